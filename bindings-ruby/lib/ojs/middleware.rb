# frozen_string_literal: true

module OJS
  # Rack middleware (FA-R001): sets the request context for the request's duration, so every
  # job enqueued while handling it carries it in `meta`. Thread- and fiber-safe (OJS::Context).
  #
  # It passes the core the request's headers it names (`ojs_bridge::context_header_names`:
  # traceparent, tracestate, X-Request-Id, X-OJS-Tenant, Accept-Language), which the core maps
  # (values trimmed, the first Accept-Language tag, ...), plus what only Rails knows:
  #
  #   request_id   env["action_dispatch.request_id"], Rails' own request id (it wins over
  #                X-Request-Id, which ActionDispatch::RequestId already took into account)
  #   user_id      config.current_user_id.call(env), else env["warden"].user.id (Devise),
  #                evaluated when a job is enqueued: a user who signs in during the request is
  #                seen
  class Middleware
    # Each header the core reads, as Rack's env key ("x-request-id" => "HTTP_X_REQUEST_ID").
    HEADERS = Native.context_header_names.to_h { |name| [name, "HTTP_#{name.upcase.tr('-', '_')}"] }.freeze

    def initialize(app, current_user_id: nil)
      @app = app
      @current_user_id = current_user_id
    end

    def call(env)
      client = OJS.configured? ? OJS.client : nil
      client.ensure_relay if client&.auto_start?
      Context.with(context_for(env)) { @app.call(env) }
    end

    # The context JSON's keys (`{"headers": {...}, "request_id", "user_id"}`).
    def context_for(env)
      headers = {}
      HEADERS.each do |name, key|
        value = env[key]
        headers[name] = value unless value.nil?
      end
      {
        headers: headers,
        request_id: env["action_dispatch.request_id"],
        user_id: user_resolver(env)
      }.compact
    end

    private

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
