# frozen_string_literal: true

module OJS
  # Rack middleware (FA-R001): sets the request context for the request's duration, so every
  # job enqueued while handling it carries it in `meta`. Thread- and fiber-safe (OJS::Context).
  #
  #   traceparent, tracestate   W3C Trace Context headers
  #   request_id                X-Request-ID (or ActionDispatch's request id)
  #   tenant_id                 X-OJS-Tenant
  #   locale                    the first language of Accept-Language
  #   user_id                   config.current_user_id.call(env), else env["warden"].user.id
  #                             (Devise), evaluated when a job is enqueued: a user who signs in
  #                             during the request is seen
  #
  # The core checks the values (a malformed traceparent is dropped with its tracestate).
  class Middleware
    def initialize(app, current_user_id: nil)
      @app = app
      @current_user_id = current_user_id
    end

    def call(env)
      OJS.adapter.ensure_relay if OJS.configured?
      Context.with(context_for(env)) { @app.call(env) }
    end

    def context_for(env)
      {
        request_id: header(env, "HTTP_X_REQUEST_ID") || env["action_dispatch.request_id"],
        traceparent: header(env, "HTTP_TRACEPARENT"),
        tracestate: header(env, "HTTP_TRACESTATE"),
        tenant_id: header(env, "HTTP_X_OJS_TENANT"),
        locale: first_language(env["HTTP_ACCEPT_LANGUAGE"]),
        user_id: user_resolver(env)
      }.compact
    end

    private

    def header(env, key)
      value = env[key]
      value.nil? || value.strip.empty? ? nil : value.strip
    end

    def first_language(accept_language)
      return nil if accept_language.nil?

      tag = accept_language.split(",").first.to_s.split(";").first.to_s.strip
      tag.empty? || tag == "*" ? nil : tag
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
