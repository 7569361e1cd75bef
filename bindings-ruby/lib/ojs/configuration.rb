# frozen_string_literal: true

require "uri"

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
  #     config.outbox_options = { poll_interval: "PT1S", batch_size: 100 } # adapter.outbox.*
  #     config.relay_options = { max_attempts: 10 }                          # adapter.relay.*
  #     config.logger = Rails.logger              # where the relay's records go (the default)
  #   end
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
    # Start the in-process relay in each process on its first enqueue (true), or only when
    # OJS.start_relay is called (false). The Railtie keeps true.
    attr_accessor :start_relay_on_first_use
    # A callable `->(env) { id }` giving the current user's id for the request context; the
    # middleware falls back to `env["warden"].user.id` (Devise) when this is nil.
    attr_accessor :current_user_id
    # The Logger the adapter writes to: the relay's pauses (warn), resumes (info) and dead
    # letters (error, with the job id), and the development-URL notice. nil: Rails.logger when
    # Rails is loaded, else a Logger on $stderr (OJS.logger).
    attr_accessor :logger

    def initialize
      @adapter = :active_record
      @outbox_options = {}
      @relay_options = {}
      @start_relay_on_first_use = true
    end

    alias ojs_url url
    alias ojs_url= url=

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
      core = {
        "ojs_url" => url,
        "database_url" => database_url || relay_database_url,
        "auth_token" => auth_token
      }.compact
      core["outbox"] = outbox unless outbox.empty?
      core["relay"] = relay_section unless relay_section.empty?
      JSONValue.dump({ "adapter" => core }, code: "INVALID_CONFIG", field: "config")
    end

    # An external relay has its own settings: a URL that cannot be derived is no error then.
    def relay_database_url
      derived_database_url
    rescue InvalidDatabaseUrl
      raise unless relay.to_s == "external"
    end

    # The relay's database URL from ActiveRecord's configuration of `connection_class`
    # (language glue: the relay opens its own connection to the application's database).
    def derived_database_url
      return nil unless defined?(::ActiveRecord::Base)

      db_config = connection_class.connection_db_config
      OJS::Configuration.database_url_from(db_config.configuration_hash)
    rescue ::ActiveRecord::ConnectionNotEstablished
      nil
    end

    def self.database_url_from(config)
      config = config.transform_keys(&:to_sym)
      return normalize_url(config[:url]) if config[:url]

      adapter = config[:adapter].to_s
      case adapter
      when /sqlite/
        database = config[:database].to_s
        if database.empty? || database == ":memory:" || database.include?("mode=memory")
          raise InvalidDatabaseUrl.new(
            "database_url: an in-memory SQLite database cannot be shared with the relay; " \
            "use a file, or set config.database_url",
            field: "database_url"
          )
        end
        root = defined?(::Rails) && ::Rails.respond_to?(:root) && ::Rails.root ? ::Rails.root.to_s : Dir.pwd
        "sqlite://#{File.expand_path(database.delete_prefix('file:'), root)}"
      when /postg/
        postgres_url(config)
      else
        raise InvalidDatabaseUrl.new(
          "database_url: cannot derive the relay's URL from ActiveRecord adapter #{adapter.inspect} " \
          "(postgresql and sqlite3 are supported); set config.database_url",
          field: "database_url"
        )
      end
    end

    def self.postgres_url(config)
      userinfo = config[:username] && URI.encode_www_form_component(config[:username].to_s)
      if userinfo && config[:password]
        userinfo += ":#{URI.encode_www_form_component(config[:password].to_s)}"
      end
      host = config[:host].to_s
      query = {}
      if host.start_with?("/")
        query["host"] = host
        host = "localhost"
      end
      host = "localhost" if host.empty?
      query["sslmode"] = config[:sslmode].to_s if config[:sslmode]
      url = +"postgres://"
      url << "#{userinfo}@" if userinfo
      url << host
      url << ":#{config[:port]}" if config[:port]
      url << "/#{URI.encode_www_form_component(config[:database].to_s)}" if config[:database]
      url << "?#{URI.encode_www_form(query)}" unless query.empty?
      url
    end

    # ActiveRecord URLs name the adapter (`postgresql://`, `sqlite3:`); the core takes
    # `postgres://`/`postgresql://` and `sqlite:`.
    def self.normalize_url(url)
      url.to_s.sub(/\Asqlite3:/, "sqlite:")
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
