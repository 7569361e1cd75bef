# frozen_string_literal: true

require "rails/railtie"

module OJS
  # Rails glue (FA-R003): the request-context middleware, the relay's lifecycle, rake tasks
  # and the `ojs:install` generator.
  #
  # With config.auto_start (the default) the in-process relay starts by itself:
  # - at boot (`after_initialize`) in a serving process (`rails server`, Puma, Unicorn,
  #   Passenger, Falcon), and again in each forked worker (ActiveSupport::ForkTracker), when
  #   the ffi gem is 1.17.0 or later (BOOT_START_FFI);
  # - else lazily, on the first request (middleware) or the first enqueue of each process: with
  #   ffi before 1.17.0 a process forked after an async call's callback dispatcher thread started
  #   hangs on its own async calls (ffi issue #1114, fixed in 1.17.0; Debian 12 ships 1.15.5).
  # At exit the relay is flushed and stopped. `config.relay = :external` in OJS.configure leaves
  # relaying to `rake ojs:relay` (or `ojs-relay run`).
  class Railtie < ::Rails::Railtie
    initializer "ojs.middleware" do |app|
      app.middleware.use OJS::Middleware
    end

    initializer "ojs.active_job" do
      ActiveSupport.on_load(:active_job) { require_relative "active_job_adapter" }
    end

    config.after_initialize do
      OJS.install_exit_hook
      OJS::Railtie.start_at_boot if OJS::Railtie.boot_start?
    end

    # The first ffi release whose forked children keep working async calls (ffi PR #1117).
    BOOT_START_FFI = Gem::Version.new("1.17.0")
    # The program names of the servers a Rails app is served by, as they set $PROGRAM_NAME.
    SERVERS = /\b(puma|unicorn|passenger|falcon)\b/i

    class << self
      # Whether this process starts the relay at boot: a serving process, config.auto_start,
      # an ffi gem without the fork bug.
      def boot_start?
        return false unless Gem::Version.new(FFI::VERSION) >= BOOT_START_FFI
        return false unless serving?

        OJS.configured? && OJS.client.auto_start?
      end

      # `rails server`, or a process a server started (Puma, Unicorn, Passenger, Falcon).
      def serving?
        defined?(::Rails::Server) || SERVERS.match?($PROGRAM_NAME) ? true : false
      end

      # Starts the relay now and again in every forked child (a pre-fork server's workers).
      def start_at_boot
        OJS.client.ensure_relay
        return if @fork_hook

        @fork_hook = true
        ActiveSupport::ForkTracker.after_fork do
          OJS.client.ensure_relay if OJS.configured? && OJS.client.auto_start?
        end
      end
    end

    rake_tasks do
      load File.expand_path("tasks/ojs.rake", __dir__)
    end

    generators do
      require_relative "../generators/ojs/install/install_generator"
    end
  end
end
