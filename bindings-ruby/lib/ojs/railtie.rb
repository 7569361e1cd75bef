# frozen_string_literal: true

require "rails/railtie"

module OJS
  # Rails glue (FA-R003): the request-context middleware, the relay's lifecycle, rake tasks
  # and the `ojs:install` generator.
  #
  # A serving process (`rails server`, Puma, Unicorn, ...) starts the in-process relay once the
  # application is initialized, and each process forked from it (pre-fork workers) starts its
  # own at once (OJS.start_at_boot); any other process starts one on first request or first
  # enqueue. At exit it is flushed and stopped. `config.relay = :external` in OJS.configure leaves relaying to
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
      OJS.start_at_boot if OJS.serving?
    end

    rake_tasks do
      load File.expand_path("tasks/ojs.rake", __dir__)
    end

    generators do
      require_relative "../generators/ojs/install/install_generator"
    end
  end
end
