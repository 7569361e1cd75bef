# frozen_string_literal: true

# A minimal Rails app (railties + ActiveRecord + ActionController, no asset pipeline): a signup
# endpoint that creates a user and stages a welcome email in the same transaction.
require "rails"
require "active_record/railtie"
require "action_controller/railtie"
require "active_job/railtie"
require "ojs-adapter-rails"

class SignupApp < Rails::Application
  config.root = File.expand_path("..", __dir__)
  # The defaults of the Rails version running (6.1 on Debian 12, 7.2 in the Debian 13 root of
  # test-rails72.sh; 7.2 asks the queue adapter whether to defer enqueues to after the commit).
  config.load_defaults Rails::VERSION::STRING.to_f
  config.eager_load = false
  config.api_only = true
  config.logger = Logger.new($stderr)
  config.log_level = ENV.fetch("LOG_LEVEL", "warn").to_sym
  config.secret_key_base = "example-only-not-a-secret"
  config.hosts.clear
  config.active_job.queue_adapter = :ojs
end
