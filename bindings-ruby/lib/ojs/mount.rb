# frozen_string_literal: true

require "time"

module OJS
  # The relay's HTTP surface as a Rack app (issue 15): the surface `ojs-relay run --listen`
  # serves, whose policy is the core's, once (`ojs_bridge::Bridge::surface`): the paths
  # (`GET <mount>/v1/events/stream`, `/metrics`, `/healthz`, `/readyz`, the dashboard under
  # `/dashboard/`, and `POST /codec/decode`, `/codec/encode` when `config.encryption` is set),
  # who may read what, tenant
  # scoping, every refusal and its body, the keep-alive comments, the content types.
  #
  # Closed by default: `authorize:` is required (as Express's `ojs.router({ authorize })`). It
  # is asked about each request but those of a path open to everyone (`/healthz`), given the
  # request, and answers true (everything), false or nil (refused), `{ tenant: "t1" }` (only
  # that tenant's events and rows), or `{ read_only: true }` (with or without a tenant: reads,
  # no dashboard writes). Mounted inside the application's own authentication (docs/rails.md,
  # "Events, metrics and health"), say so:
  #
  #   authenticate :user, ->(user) { user.admin? } do
  #     mount OJS::EventsApp.new(authorize: ->(_request) { true }) => "/ojs"
  #   end
  #
  # This app only asks `authorize:`, hands the request and the decision to the core in one
  # call, and returns the answer. A stream's body waits for each frame in native code without
  # the GVL, so a waiting stream does not stop the server's other threads; `close` (the server
  # calls it when the response ends or the client goes away) drops the subscription. With
  # config.auto_start the relay is started first, as OJS::Middleware does, since Rails starts
  # it lazily.
  class EventsApp
    # How to open the surface to every caller, said in each refusal of a missing `authorize:`.
    OPEN_TO_ALL = "to serve it to every caller (e.g. mounted inside your own authentication), say so: " \
                  "OJS::EventsApp.new(authorize: ->(_request) { true })"

    # The largest request body read (a Codec Server call's): the core's limit
    # (`ojs_outbox::surface::CODEC_BODY_LIMIT`, 1 MiB). A longer body is handed over as none,
    # which the core answers 413.
    BODY_LIMIT = 1024 * 1024

    # `authorize:` (required) a callable taking the request (ActionDispatch::Request in Rails,
    # else Rack::Request). `keep_alive:` seconds without an event before the stream writes a
    # keep-alive comment (nil: the core's interval).
    def initialize(authorize: nil, keep_alive: nil, **unknown)
      unless unknown.empty?
        accepted = self.class.instance_method(:initialize).parameters.filter_map { |kind, name| name.to_s if kind == :key }
        raise OJS::Error.from_json(Native.unknown_option_error(unknown.keys.first.to_s, accepted))
      end
      if authorize.nil?
        raise InvalidConfig.new(
          "authorize: OJS::EventsApp.new needs authorize: ->(request) { ... } answering true, false or " \
          "{ tenant: \"...\" }: the surface shows every job's events and the metrics; #{OPEN_TO_ALL}",
          field: "authorize"
        )
      end
      unless authorize.respond_to?(:call)
        raise InvalidConfig.new("authorize: must respond to call(request), got #{authorize.class}; #{OPEN_TO_ALL}",
                                field: "authorize")
      end
      unless keep_alive.nil? || (keep_alive.is_a?(Numeric) && keep_alive.positive?)
        raise InvalidConfig.new("keep_alive: must be a positive number of seconds, got #{keep_alive.inspect}",
                                field: "keep_alive")
      end
      @authorize = authorize
      @keep_alive_ms = keep_alive && (keep_alive * 1000).ceil
    end

    def call(env)
      path = text(env["PATH_INFO"])
      open = Native.surface_is_open(path)
      # Not asked: a path open to everyone answers whatever the decision.
      access = open ? nil : decision(env)
      client = OJS.client
      client.ensure_relay if client.auto_start? && !open
      method = env["REQUEST_METHOD"]
      request = { "method" => method, "path" => path, "query" => text(env["QUERY_STRING"]), "access" => access,
                  "access_field" => "authorize" }
      request["last_event_id"] = text(env["HTTP_LAST_EVENT_ID"]) if env["HTTP_LAST_EVENT_ID"]
      # A dashboard write needs it (the core's defence against cross-site requests).
      request["write_header"] = text(env["HTTP_X_OJS_DASHBOARD"]) if env["HTTP_X_OJS_DASHBOARD"]
      request["keep_alive_ms"] = @keep_alive_ms if @keep_alive_ms
      request["body"] = body(env) if method == "POST"
      answer(client.surface(request), head: method == "HEAD")
    end

    # A streaming Rack body: each frame the core gives (its keep-alive comments included), as it
    # comes.
    class StreamBody
      # How long one native wait lasts before control comes back to Ruby: what bounds how late
      # Thread#kill or Thread#raise (Puma's force_shutdown_after) takes effect. Not a delivery
      # setting: the core hands over each frame as soon as it has it.
      WAIT_MS = 1000

      def initialize(stream)
        @stream = stream
      end

      def each
        while (frame = @stream.next_frame(WAIT_MS))
          yield frame unless frame.empty?
        end
      end

      # Drops the native subscription (the server calls this when the response ends).
      def close
        @stream.close
      end
    end

    private

    # The app's decision as the core reads it: true, false, nil, a tenant id or { tenant: "t" }
    # (keys as strings). A value with no JSON form (a user record answered by mistake) is
    # refused naming its class, never its contents; the core judges the rest.
    def decision(env)
      JSONValue.checked(@authorize.call(request_of(env)), "config", "authorize")
    rescue InvalidConfig => e
      raise InvalidConfig.new(e.message, field: "authorize")
    end

    # What `authorize:` is given: Rails' request object, else Rack's (a Rack server has loaded
    # Rack; this gem does not depend on it).
    def request_of(env)
      if defined?(::ActionDispatch::Request) then ::ActionDispatch::Request.new(env)
      elsif defined?(::Rack::Request) then ::Rack::Request.new(env)
      else env
      end
    end

    # The request body as text (at most BODY_LIMIT bytes; nil beyond: the core answers 413). A
    # body that is not UTF-8 is no JSON: handed over empty, the core answers 400.
    def body(env)
      input = env["rack.input"]
      return "" unless input

      data = input.read(BODY_LIMIT + 1).to_s
      input.rewind if input.respond_to?(:rewind)
      return nil if data.bytesize > BODY_LIMIT

      data = data.dup.force_encoding(Encoding::UTF_8)
      data.valid_encoding? ? data : ""
    end

    # The core's answer as Rack's: header names in lowercase (Rack 3); a stream as a streaming
    # body; no body for HEAD.
    def answer(answer, head:)
      headers = answer.headers.to_h { |name, value| [name.downcase, value] }
      stream = answer.stream && RelayStream.new(answer.stream)
      if head
        stream&.close
        return [answer.status, headers, []]
      end
      return [answer.status, headers, [answer.body]] unless stream

      # Rack::ETag (in every Rails stack) buffers a 200 body to digest it unless the response
      # has an ETag or a Last-Modified: it would never answer an endless stream. The stream's
      # content is as of now.
      headers["last-modified"] = Time.now.httpdate
      [answer.status, headers, StreamBody.new(stream)]
    end

    # A CGI variable as UTF-8 text (a server hands over bytes; one that is no UTF-8 is scrubbed).
    def text(value)
      string = value.to_s
      return string if string.encoding == Encoding::UTF_8 && string.valid_encoding?

      string.dup.force_encoding(Encoding::UTF_8).scrub
    end
  end
end
