# frozen_string_literal: true

require "time"
require "uri"

module OJS
  # The in-process relay's HTTP surface as a Rack app (issue 15), the same four paths as
  # `ojs-relay run --listen`:
  #
  #   GET <mount>/v1/events/stream   the relay's events as Server-Sent Events; query `types`
  #                                  (`job.*` globs), `queues`, `job_types` (comma-separated),
  #                                  `tenant`, `since` (RFC 3339); header Last-Event-ID
  #   GET <mount>/metrics            Prometheus text (text/plain; version=0.0.4)
  #   GET <mount>/healthz            "ok": the process answers
  #   GET <mount>/readyz             the core's verdict as JSON: 200 when ready, else 503
  #
  # Closed by default: `authorize:` is required (as Express's `ojs.router({ authorize })`), and
  # decides each request but /healthz: `->(request) { ... }` answering true (everything), false
  # or nil (403), or `{ tenant: "t1" }` (only that tenant's events; asking the stream for another
  # tenant is 403, and so are /metrics and /readyz). /healthz is never refused. Mounted inside
  # the application's own authentication (docs/rails.md, "Events, metrics and health"), say so:
  #
  #   authenticate :user, ->(user) { user.admin? } do
  #     mount OJS::EventsApp.new(authorize: ->(_request) { true }) => "/ojs"
  #   end
  #
  # The core makes the frames, the metrics text and the readiness verdict (filters, replay,
  # framing, the verdict: `ojs_bridge::Bridge`); this app serves them. The stream's body waits
  # for each frame in native code without the GVL, so a waiting stream does not stop the
  # server's other threads; `close` (the server calls it when the response ends or the client
  # goes away) drops the subscription. With config.auto_start the relay is started first, as
  # OJS::Middleware does, since Rails starts it lazily.
  class EventsApp
    STREAM_PATH = "/v1/events/stream"
    # The SSE comment written when no event came for `keep_alive` seconds (and first, so the
    # response's headers go out at once): it keeps proxies from closing an idle stream, and a
    # failed write tells the server the client has gone.
    KEEP_ALIVE = ": keep-alive\n\n"

    # How to open the surface to every caller, said in each refusal of a missing `authorize:`.
    OPEN_TO_ALL = "to serve it to every caller (e.g. mounted inside your own authentication), say so: " \
                  "OJS::EventsApp.new(authorize: ->(_request) { true })"

    # `authorize:` (required) a callable taking the request (ActionDispatch::Request in Rails,
    # else Rack::Request). `keep_alive:` seconds without an event before the stream writes
    # KEEP_ALIVE.
    def initialize(authorize: nil, keep_alive: 15, **unknown)
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
      unless keep_alive.is_a?(Numeric) && keep_alive.positive?
        raise InvalidConfig.new("keep_alive: must be a positive number of seconds, got #{keep_alive.inspect}",
                                field: "keep_alive")
      end
      @authorize = authorize
      @keep_alive = keep_alive
    end

    def call(env)
      method = env["REQUEST_METHOD"]
      path = env["PATH_INFO"].to_s
      path = path.chomp("/") unless path == "/"
      return stream(env) if path == STREAM_PATH && method == "GET"
      return error(405, "method_not_allowed", "#{method} is not allowed here") unless %w[GET HEAD].include?(method)

      case path
      when "/healthz" then [200, { "content-type" => "text/plain" }, ["ok\n"]]
      when "/readyz" then operator_only(env) { readyz }
      when "/metrics" then operator_only(env) { metrics }
      when STREAM_PATH then error(405, "method_not_allowed", "#{method} is not allowed here")
      else error(404, "not_found", "no such path: #{path} (#{STREAM_PATH}, /metrics, /healthz, /readyz)")
      end
    end

    # A streaming Rack body: each frame the core makes, as it comes; KEEP_ALIVE while idle.
    class StreamBody
      def initialize(frames, keep_alive)
        @frames = frames
        @keep_alive = keep_alive
        @wait_ms = ([keep_alive, 1].min * 1000).ceil
      end

      def each
        yield KEEP_ALIVE
        idle_since = monotonic
        while (frame = @frames.next_frame(@wait_ms))
          if !frame.empty?
            yield frame
            idle_since = monotonic
          elsif monotonic - idle_since >= @keep_alive
            yield KEEP_ALIVE
            idle_since = monotonic
          end
        end
      end

      # Drops the native subscription (the server calls this when the response ends).
      def close
        @frames.close
      end

      private

      def monotonic
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end
    end

    private

    # :operator, [:tenant, name], or nil (refused), by `authorize:`.
    def caller_of(env)
      verdict = @authorize.call(request_of(env))
      case verdict
      when true then :operator
      when false, nil then nil
      when Hash
        tenant = verdict.to_h { |key, value| [key.to_s, value] }
        unknown = tenant.keys - ["tenant"]
        raise OJS::Error.from_json(Native.unknown_option_error(unknown.first, ["tenant"])) unless unknown.empty?
        unless tenant["tenant"].is_a?(String) && !tenant["tenant"].empty?
          raise InvalidConfig.new("authorize: { tenant: } must name a tenant, got #{verdict.inspect}", field: "authorize")
        end

        [:tenant, tenant["tenant"]]
      else
        raise InvalidConfig.new("authorize: must answer true, false or { tenant: \"...\" }, got #{verdict.inspect}",
                                field: "authorize")
      end
    end

    # What `authorize:` is given: Rails' request object, else Rack's (a Rack server has loaded
    # Rack; this gem does not depend on it).
    def request_of(env)
      if defined?(::ActionDispatch::Request) then ::ActionDispatch::Request.new(env)
      elsif defined?(::Rack::Request) then ::Rack::Request.new(env)
      else env
      end
    end

    def operator_only(env)
      case caller_of(env)
      when :operator then yield
      when nil then forbidden("not allowed")
      else forbidden("a tenant-scoped caller reads only #{STREAM_PATH}")
      end
    end

    def stream(env)
      caller = caller_of(env)
      return forbidden("not allowed") if caller.nil?

      params = query_params(env)
      return params if params.is_a?(Array) # a 400
      tenant = params["tenant"]
      if caller.is_a?(Array)
        return forbidden("this caller reads only its own tenant") if tenant && tenant != caller[1]

        tenant = caller[1]
      end
      client = OJS.client
      client.ensure_relay if client.auto_start?
      frames = client.relay_events(
        "types" => params["types"], "queues" => params["queues"], "job_types" => params["job_types"],
        "tenant" => tenant, "since" => params["since"], "last_event_id" => env["HTTP_LAST_EVENT_ID"]
      )
      headers = {
        "content-type" => "text/event-stream",
        "cache-control" => "no-cache",
        # Rack::ETag (in every Rails stack) buffers a 200 body to digest it unless the response
        # has an ETag or a Last-Modified: it would never answer an endless stream. The stream's
        # content is as of now.
        "last-modified" => Time.now.httpdate,
        # nginx: pass each frame on at once.
        "x-accel-buffering" => "no"
      }
      [200, headers, StreamBody.new(frames, @keep_alive)]
    rescue OJS::RelayShutDown => e
      error(503, e.code, e.message)
    rescue OJS::ValidationError, OJS::ConfigurationError => e
      error(400, e.code, e.message, field: e.field)
    end

    # The query's parameters (each at most once), or the 400 response saying what is wrong.
    def query_params(env)
      pairs = begin
        URI.decode_www_form(env["QUERY_STRING"].to_s)
      rescue ArgumentError => e
        return error(400, "invalid_request", "query string: #{e.message}")
      end
      pairs.each_with_object({}) do |(name, value), params|
        if params.key?(name)
          return error(400, "invalid_request", "#{name}: given twice (one value; comma-separated for a list)",
                       field: name)
        end

        params[name] = value
      end
    end

    def metrics
      client = OJS.client
      client.ensure_relay if client.auto_start?
      text = client.metrics_text
      return error(503, "RELAY_SHUT_DOWN", "neither a relay in this process nor the outbox table could be read: see /readyz") unless text

      [200, { "content-type" => "text/plain; version=0.0.4" }, [text]]
    end

    def readyz
      body = OJS.client.readiness_json
      [JSON.parse(body)["ready"] == true ? 200 : 503, { "content-type" => "application/json" }, [body]]
    end

    def forbidden(why)
      error(403, "forbidden", why)
    end

    def error(status, code, message, field: nil)
      body = { "error" => { "code" => code, "field" => field, "message" => message }.compact }
      [status, { "content-type" => "application/json" }, [JSON.generate(body)]]
    end
  end
end
