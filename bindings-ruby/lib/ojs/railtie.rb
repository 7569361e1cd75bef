# frozen_string_literal: true

require "rails/railtie"

module OJS
  # Rails glue (FA-R003): the request-context middleware, the relay's lifecycle, rake tasks
  # and the `ojs:install` generator.
  #
  # With config.auto_start (the default) the in-process relay starts by itself in each process,
  # on its first request (middleware) or first enqueue, so a pre-fork server (Puma cluster,
  # Unicorn) starts one per worker, never in the master. Not at boot: a worker forked from a
  # master whose relay runs may hang starting its own (seen 1 fork in 10 on Debian 13), and with
  # ffi 1.17.0 and earlier a process forked after one of the gem's async calls hangs on its next
  # one (ffi issue #1114): docs/rails.md, "Relay modes". At exit the relay is flushed and
  # stopped. `config.relay = :external` in OJS.configure leaves relaying to `rake ojs:relay`
  # (or `ojs-relay run`).
  class Railtie < ::Rails::Railtie
    initializer "ojs.middleware" do |app|
      app.middleware.use OJS::Middleware
    end

    initializer "ojs.active_job" do
      ActiveSupport.on_load(:active_job) { require_relative "active_job_adapter" }
    end

    config.after_initialize do
      OJS.install_exit_hook
    end

    rake_tasks do
      load File.expand_path("tasks/ojs.rake", __dir__)
    end

    generators do
      require_relative "../generators/ojs/install/install_generator"
    end
  end
end
