# frozen_string_literal: true

Rails.application.routes.draw do
  post "/signup", to: "signups#create"

  # The relay's event stream, /metrics, /healthz and /readyz (docs/rails.md, "Events, metrics
  # and health"). This app has no login of its own, so the mount decides: a caller presenting
  # OJS_EVENTS_TOKEN as a bearer token reads everything; anyone else is refused (also when the
  # variable is unset). An app with a login mounts it inside `authenticate` instead.
  events_token = ENV["OJS_EVENTS_TOKEN"]
  mount OJS::EventsApp.new(authorize: lambda do |request|
    !events_token.nil? && ActiveSupport::SecurityUtils.secure_compare(request.authorization.to_s,
                                                                      "Bearer #{events_token}")
  end) => "/ojs"
end
