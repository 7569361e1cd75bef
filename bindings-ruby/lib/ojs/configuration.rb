# frozen_string_literal: true

module OJS
  # Settings in the shape of the spec's §8.1 example, turned into the core's adapter
  # configuration (spec §5.2 JSON). Only what is set is passed on: every default and every
  # validation is the core's (an unset key takes the core's default; a bad value raises
  # OJS::InvalidConfig naming the key, e.g. `adapter.outbox.batch_size`).
  #
  #   OJS.configure do |config|
  #     config.url = ENV["OJS_URL"]               # adapter.ojs_url
  #     config.adapter = :active_record           # stage jobs through ActiveRecord (the only one)
  #     config.outbox_table = "ojs_outbox"        # adapter.outbox.table_name
  #     config.database_url = nil                 # the relay's own connection; derived from
  #                                               # ActiveRecord's connection config when nil
  #     config.relay = :in_process                # or :external (adapter.relay.mode)
  #     config.outbox_options = { poll_interval: "PT1S", batch_size: 500 } # adapter.outbox.*
  #     config.relay_options = { max_attempts: 10 }                          # adapter.relay.*
  #     config.logger = Rails.logger              # where the relay's records go (the default)
  #     config.auto_start = true                  # the in-process relay starts by itself
  #     config.current_tenant_id = ->(env) { env["warden"]&.user&.account_id&.to_s } # the tenant
  #     config.trust_tenant_header = false        # adapter.trust_tenant_header
  #     config.encryption = {                     # adapter.encryption: args sealed at staging
  #       key_id: "k2",                           # the key new jobs are sealed with
  #       keys: { "k1" => ENV["OJS_KEY_K1"], "k2" => ENV["OJS_KEY_K2"] } # base64, 32 bytes each
  #     }
  #   end
  #
  # A setting that does not exist (a misspelling, a removed name) raises OJS::InvalidConfig.
  class Configuration
    # How an application sets the backend URL, named by the core when it is missing.
    URL_SETTING = "config.ojs_url (config.url) in OJS.configure"

    # adapter.ojs_url: the OJS backend. Required: nil fails OJS.configure (OJS::InvalidConfig),
    # except in development (see #development?), where the core's development URL is used.
    attr_accessor :url
    # Must be :active_record (the spec's §8.1 key): jobs are staged on ActiveRecord's connection.
    attr_accessor :adapter
    # adapter.outbox.table_name.
    attr_accessor :outbox_table
    # adapter.database_url: the relay's own connection. nil: derived from `connection_class`.
    attr_accessor :database_url
    # adapter.auth_token.
    attr_accessor :auth_token
    # adapter.relay.mode: :in_process (the core's default) or :external (`rake ojs:relay`).
    attr_accessor :relay
    # More adapter.outbox.* / adapter.relay.* keys, passed to the core as they are.
    attr_accessor :outbox_options, :relay_options
    # The ActiveRecord class whose connection stages the rows (ActiveRecord::Base by default).
    attr_writer :connection_class
    # true (the default): the in-process relay starts by itself in each process (at boot of a
    # serving process where that is safe, else on the first request or enqueue; again in a
    # forked child). false: only when the application calls OJS.start_relay.
    attr_accessor :auto_start
    # A callable `->(env) { id }` giving the current user's id for the request context; the
    # middleware falls back to `env["warden"].user.id` (Devise) when this is nil. Never taken
    # from a request header.
    attr_accessor :current_user_id
    # A callable `->(env) { "tenant" or nil }` giving the request's tenant, from what the
    # application knows (the signed-in user, the subdomain), called when a job is staged during
    # the request; its String is the job's `tenant_id` (nil: none). It wins over the
    # `X-OJS-Tenant` header even where that header is trusted. A value that is neither a String
    # nor nil raises OJS::InvalidConfig naming this setting.
    attr_accessor :current_tenant_id
    # adapter.trust_tenant_header: true lets a request's `X-OJS-Tenant` header decide its jobs'
    # tenant (when current_tenant_id gives none). Off by default: any client can send that
    # header; trust it only behind a gateway that sets it and strips the client's.
    attr_accessor :trust_tenant_header
    # adapter.encryption: the key ring of the OJS encryption extension, a Hash
    # `{ key_id: "k2", keys: { "k1" => "<base64 of 32 bytes>", "k2" => "..." } }` (nil: args
    # travel in plaintext). Passed to the core as it is: the core checks it when OJS.configure
    # runs (a bad key is OJS::InvalidConfig naming it) and seals each new job's args with
    # `key_id`'s key; the other keys still open jobs sealed before a rotation. Key ids are
    # passed as written (Symbol keys become their names, nothing is re-spelled).
    attr_accessor :encryption
    # adapter.tracing: OpenTelemetry spans exported over OTLP/HTTP (docs/tracing.md): true on,
    # false off (over OTEL_TRACES_EXPORTER), nil: on only with OTEL_TRACES_EXPORTER=otlp. The
    # core checks the value.
    attr_accessor :tracing
    # The Logger the adapter writes to: the relay's pauses (warn), resumes (info) and dead
    # letters (error, with the job id), and the development-URL notice. nil: Rails.logger when
    # Rails is loaded, else a Logger on $stderr (OJS.logger).
    attr_accessor :logger

    def initialize
      @adapter = :active_record
      @outbox_options = {}
      @relay_options = {}
      @auto_start = true
    end

    alias ojs_url url
    alias ojs_url= url=

    # The settings of this class, as `config.<name> =` spells them.
    SETTINGS = %w[url ojs_url adapter outbox_table database_url auth_token trust_tenant_header relay
                  outbox_options relay_options connection_class auto_start current_user_id current_tenant_id
                  logger encryption tracing].freeze
    # Names this gem used before, and what they are now.
    RENAMED = { "start_relay_on_first_use" => "auto_start" }.freeze

    # `config.<unknown> = value` is an error naming the setting (the core's near-miss rule), never
    # silently ignored.
    def method_missing(name, *args, &block)
      setting = name.to_s
      return super unless setting.end_with?("=") && args.length == 1

      key = setting.delete_suffix("=")
      error = OJS::Error.from_json(OJS::Native.unknown_option_error("config.#{key}", SETTINGS.map { |s| "config.#{s}" }))
      raise error unless RENAMED.key?(key)

      raise InvalidConfig.new("config.#{key}: renamed config.#{RENAMED[key]}", field: error.field)
    end

    # Whether the application runs in development mode, as the core is told (a missing URL
    # then takes the core's development default, with a warning): Rails.env.development?, or
    # outside Rails RAILS_ENV / RACK_ENV == "development".
    def development?
      if defined?(::Rails) && ::Rails.respond_to?(:env) && ::Rails.env
        ::Rails.env.development?
      else
        (ENV["RAILS_ENV"] || ENV["RACK_ENV"]) == "development"
      end
    end

    def connection_class
      @connection_class || ::ActiveRecord::Base
    end

    # The core configuration as JSON text.
    def to_core_json
      unless adapter.nil? || adapter.to_s == "active_record"
        raise InvalidConfig.new(
          "adapter: #{adapter.inspect} is not supported; ojs-adapter-rails stages jobs through ActiveRecord (:active_record)",
          field: "adapter"
        )
      end
      outbox = section(outbox_options, "outbox_options")
      outbox["table_name"] = outbox_table.to_s unless outbox_table.nil?
      relay_section = section(relay_options, "relay_options")
      relay_section["mode"] = relay.to_s unless relay.nil?
      Configuration.check_hook(current_user_id, "config.current_user_id")
      Configuration.check_hook(current_tenant_id, "config.current_tenant_id")
      core = {
        "ojs_url" => url,
        "database_url" => database_url || relay_database_url,
        "auth_token" => auth_token,
        "trust_tenant_header" => trust_tenant_header
      }.compact
      core["outbox"] = outbox unless outbox.empty?
      core["relay"] = relay_section unless relay_section.empty?
      core["encryption"] = encryption unless encryption.nil?
      core["tracing"] = tracing unless tracing.nil?
      JSONValue.dump({ "adapter" => core }, "config")
    end

    # A request hook (`->(env) { ... }`) must be callable; nil is no hook.
    def self.check_hook(hook, setting)
      return if hook.nil? || hook.respond_to?(:call)

      raise InvalidConfig.new("#{setting}: must respond to call(env), got #{hook.class}", field: setting)
    end

    # The tenant a tenant hook gave: a String (an empty one is none), or nil; anything else is
    # the application's mistake, named.
    def self.tenant_of(value, setting)
      return value if value.nil? || value.is_a?(String)

      raise InvalidConfig.new(
        "#{setting}: must return the tenant id as a String (or nil for none), got #{value.class}; " \
        "convert it in the hook, e.g. account_id&.to_s",
        field: setting
      )
    end

    # An external relay has its own settings: a URL that cannot be derived is no error then.
    def relay_database_url
      derived_database_url
    rescue InvalidDatabaseUrl
      raise unless relay.to_s == "external"
    end

    # The relay's database URL from ActiveRecord's configuration of `connection_class`: the
    # connection settings as ActiveRecord has them, the URL by the core's rule
    # (`ojs_bridge::database_url_from_parts`).
    def derived_database_url
      return nil unless defined?(::ActiveRecord::Base)

      db_config = connection_class.connection_db_config
      Native.database_url_from_parts(JSON.generate(Configuration.connection_parts(db_config.configuration_hash)))
    rescue ::ActiveRecord::ConnectionNotEstablished
      nil
    end

    # ActiveRecord's connection settings as the core's `db_url::ConnectionParts`.
    def self.connection_parts(config)
      config = config.transform_keys(&:to_sym)
      root = defined?(::Rails) && ::Rails.respond_to?(:root) && ::Rails.root ? ::Rails.root.to_s : Dir.pwd
      {
        "engine" => config[:adapter].to_s,
        "url" => config[:url]&.to_s,
        "database" => config[:database]&.to_s,
        "host" => config[:host]&.to_s,
        "port" => config[:port],
        "user" => config[:username]&.to_s,
        "password" => config[:password]&.to_s,
        "sslmode" => config[:sslmode]&.to_s,
        "base_dir" => root,
        "setting" => "config.database_url"
      }.compact
    end

    private

    def section(options, name)
      return {} if options.nil?
      unless options.is_a?(Hash)
        raise InvalidConfig.new("#{name}: must be a Hash, got #{options.class}", field: name)
      end

      options.to_h { |key, value| [key.to_s, value] }
    end
  end
end
