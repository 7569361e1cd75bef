# frozen_string_literal: true

require "rails/railtie"

module OJS
  # Rails glue (FA-R003): the request-context middleware, the relay's lifecycle, rake tasks
  # and the `ojs:install` generator.
  #
  # The in-process relay starts lazily in each process (first request or first enqueue), so a
  # pre-fork server (Puma cluster, Unicorn) starts one per worker, not in the master; at exit
  # it is flushed and stopped. `config.relay = :external` in OJS.configure leaves relaying to
  # `rake ojs:relay` (or `ojs-relay run`).
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
