# frozen_string_literal: true

# ojs-adapter-rails: jobs staged with OJS.enqueue_after_commit are written to the outbox in
# your transaction and relayed to the OJS backend after the outermost commit.
OJS.configure do |config|
  # Required: without it booting fails (OJS::InvalidConfig), except in development, where jobs
  # go to the core's development URL and a warning says so.
  config.url = ENV["OJS_URL"]
  config.adapter = :active_record
  config.outbox_table = "ojs_outbox"
  # config.relay = :external           # relay with `rake ojs:relay` instead of in each process
  # config.database_url = ENV["OJS_RELAY_DATABASE_URL"] # default: derived from database.yml
  # config.outbox_options = { poll_interval: "PT1S", batch_size: 500 }
  # config.relay_options = { max_attempts: 10 }
  # config.current_user_id = ->(env) { env["warden"]&.user&.id }
  # The jobs' tenant, from your app (never from a client's X-OJS-Tenant header by default):
  # config.current_tenant_id = ->(env) { env["warden"]&.user&.account_id&.to_s }
  # config.trust_tenant_header = true  # only behind a gateway that sets X-OJS-Tenant and strips the client's
  # config.logger = Rails.logger       # the relay's pauses, resumes and dead letters (default)
  # config.auto_start = true           # the in-process relay starts by itself (false: OJS.start_relay)
end
