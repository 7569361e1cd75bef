# frozen_string_literal: true

module OJS
  # Rack middleware (FA-R001): sets the request context for the request's duration, so every
  # job enqueued while handling it carries it in `meta`. Thread- and fiber-safe (OJS::Context).
  #
  # It passes the core the request's headers it names (`ojs_bridge::context_header_names`:
  # traceparent, tracestate, X-Request-Id, X-OJS-Tenant, Accept-Language), which the core maps
  # (values trimmed, the first Accept-Language tag, ...; X-OJS-Tenant only where
  # config.trust_tenant_header says so), plus what only the application knows, never a header:
  #
  #   request_id   env["action_dispatch.request_id"], Rails' own request id (it wins over
  #                X-Request-Id, which ActionDispatch::RequestId already took into account)
  #   user_id      config.current_user_id.call(env), else env["warden"].user.id (Devise)
  #   tenant_id    config.current_tenant_id.call(env) (a String or nil), when set; as an
  #                explicit key it wins over a trusted X-OJS-Tenant
  #
  # The user and the tenant are evaluated when a job is staged: a user who signs in during the
  # request is seen.
  class Middleware
    # Each header the core reads, as Rack's env key ("x-request-id" => "HTTP_X_REQUEST_ID").
    HEADERS = Native.context_header_names.to_h { |name| [name, "HTTP_#{name.upcase.tr('-', '_')}"] }.freeze

    def initialize(app, current_user_id: nil, current_tenant_id: nil)
      Configuration.check_hook(current_user_id, "current_user_id")
      Configuration.check_hook(current_tenant_id, "current_tenant_id")
      @app = app
      @current_user_id = current_user_id
      @current_tenant_id = current_tenant_id
    end

    def call(env)
      client = OJS.configured? ? OJS.client : nil
      client.ensure_relay if client&.auto_start?
      Context.with(context_for(env)) { @app.call(env) }
    end

    # The context JSON's keys (`{"headers": {...}, "request_id", "user_id", "tenant_id"}`).
    def context_for(env)
      headers = {}
      HEADERS.each do |name, key|
        value = env[key]
        headers[name] = value unless value.nil?
      end
      {
        headers: headers,
        request_id: env["action_dispatch.request_id"],
        user_id: user_resolver(env),
        tenant_id: tenant_resolver(env)
      }.compact
    end

    private

    # The tenant hook (the middleware's own, else config.current_tenant_id), called when a job
    # is staged; nil without one (the core then takes X-OJS-Tenant only when trusted).
    def tenant_resolver(env)
      finder, setting = if @current_tenant_id
                          [@current_tenant_id, "current_tenant_id"]
                        elsif OJS.configured? && OJS.configuration.current_tenant_id
                          [OJS.configuration.current_tenant_id, "config.current_tenant_id"]
                        end
      return nil unless finder

      -> { Configuration.tenant_of(finder.call(env), setting) }
    end

    def user_resolver(env)
      finder = @current_user_id || (OJS.configured? && OJS.configuration.current_user_id)
      return -> { stringify(finder.call(env)) } if finder

      lambda do
        warden = env["warden"]
        user = warden&.user
        stringify(user.respond_to?(:id) ? user.id : user)
      end
    end

    def stringify(id)
      id&.to_s
    end
  end
end
