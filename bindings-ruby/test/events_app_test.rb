# frozen_string_literal: true

# OJS::EventsApp (issue 15): the in-process relay's event stream, /metrics, /healthz and /readyz
# as a Rack app, driven by real Rack requests (Rack::MockRequest's env, the app behind
# Rack::Lint, the body iterated as a server iterates it) over the real relay, a real SQLite
# file or the real PostgreSQL, and the real devserver.

require_relative "test_helper"
require "rack"
require "rack/mock"
require "rack/lint"
require "rack/etag"
require "stringio"
require "base64"
require "active_support/security_utils"

class EventsAppTest < Minitest::Test
  TABLE = "rb_events_app"
  # The core's keep-alive comment (`ojs_outbox::surface::KEEP_ALIVE_FRAME`).
  KEEP_ALIVE = ": keep-alive\n\n"
  # The core's answer to a caller `authorize:` refused.
  FORBIDDEN = '{"error":{"code":"forbidden","message":"this caller may not read this surface"}}'

  # One streaming response, its body iterated on a thread of its own as a server would.
  class Stream
    attr_reader :status, :headers, :body, :reader

    def initialize(app, path, env = {})
      @status, @headers, @body = app.call(Rack::MockRequest.env_for(path, env))
      @text = +""
      @lock = Mutex.new
      @reader = Thread.new do
        @body.each { |chunk| @lock.synchronize { @text << chunk } }
        :ended
      end
    end

    def text
      @lock.synchronize { @text.dup }
    end

    # The envelopes of the frames received so far.
    def events
      text.split("\n\n").filter_map do |frame|
        data = frame.lines.find { |line| line.start_with?("data: ") }
        JSON.parse(data.delete_prefix("data: ")) if data
      end
    end

    def wait_for_event(what)
      TestSupport.wait_until(what) { events.find { |event| yield event } }
    end

    # Closes the body as the server does when the client goes away; the iteration ends.
    def close
      @body.close
      @reader.join(TestSupport::PATIENCE) or raise Minitest::Assertion, "the stream's each did not end after close"
    end
  end

  def setup
    TestSupport.devserver.reset
    TestSupport.devserver.call(:delete, "/_dev/faults")
  end

  def teardown
    @streams&.each { |stream| stream.close rescue nil } # rubocop:disable Style/RescueModifier
    OJS.clear_context
    OJS.stop_relay
    TestSupport.devserver.call(:delete, "/_dev/faults")
  end

  def start(database = :sqlite)
    TestSupport.connect(database, "events_app", table: TABLE)
    TestSupport.configure(table: TABLE)
  end

  # An EventsApp behind Rack::Lint; open to every caller unless the test says otherwise.
  OPEN = ->(_request) { true }

  def app(authorize: OPEN, **options)
    Rack::Lint.new(OJS::EventsApp.new(authorize: authorize, **options))
  end

  def stream(app, path, env = {})
    (@streams ||= []) << Stream.new(app, path, env)
    @streams.last
  end

  def enqueue(type = "email.welcome", args = [1], tenant: nil)
    OJS.with_context(tenant ? { tenant_id: tenant } : {}) do
      ActiveRecord::Base.transaction { OJS.enqueue_after_commit(type, args) }
    end
  end

  def get(app, path, env = {})
    Rack::MockRequest.new(app).get(path, env)
  end

  TestSupport.databases.each do |database|
    define_method("test_#{database}_a_committed_job_s_job_enqueued_arrives_on_the_stream") do
      start(database)
      events = stream(app, "/v1/events/stream?types=job.*")
      assert_equal 200, events.status
      assert_equal "text/event-stream", events.headers["content-type"]
      assert_equal "no-cache", events.headers["cache-control"]
      TestSupport.wait_until("the first keep-alive comment") { events.text.start_with?(KEEP_ALIVE) }

      id = enqueue
      event = events.wait_for_event("job.enqueued of #{id}") { |e| e["subject"] == id }
      assert_equal "job.enqueued", event["type"]
      assert_equal "/ojs/outbox/#{TABLE}", event["source"]
      assert_equal({ "job_id" => id, "type" => "email.welcome", "queue" => "default" },
                   event["data"].slice("job_id", "type", "queue"))
      assert_includes events.text, "id: #{event['id']}\nevent: job.enqueued\ndata: "
      events.close
      assert_equal :ended, events.reader.value
    end

    define_method("test_#{database}_metrics_counters_match_the_outbox_after_a_drain") do
      start(database)
      TestSupport.devserver.call(:post, "/_dev/faults", { "status" => 422, "code" => "validation_error",
                                                           "match_type" => "rejected.job" })
      dead = enqueue("rejected.job", [0])
      sent = (1..3).map { |i| enqueue("email.welcome", [i]) }
      TestSupport.wait_until("the drain") do
        rows = OJS.outbox_rows(sent + [dead])
        rows.values_at(*sent).all? { |row| row&.fetch("status") == "sent" } && rows.dig(dead, "status") == "dead"
      end
      counts = ActiveRecord::Base.connection.select_rows("SELECT status, COUNT(*) FROM #{TABLE} GROUP BY status")
                                 .to_h { |status, n| [status, n.to_i] }
      assert_equal({ "sent" => 3, "dead" => 1 }, counts)
      # The relay counts a settlement once it has committed: its counters trail the rows briefly.
      TestSupport.wait_until("the relay's counters") do
        OJS.metrics.values_at("sent", "dead") == counts.values_at("sent", "dead")
      end

      response = get(app, "/metrics")
      assert_equal 200, response.status
      assert_equal "application/openmetrics-text; version=1.0.0; charset=utf-8", response.headers["content-type"]
      # No OpenMetrics parser is packaged for Ruby in Debian (ruby-prometheus-client-mmap only
      # writes the format), and RubyGems is not reachable: so these are the exact lines the
      # exposition must hold, compared whole, for the relay's counters and the table's. A
      # counter's family (# TYPE) has no _total, its samples do; the text ends with # EOF.
      lines = response.body.lines.map(&:chomp)
      assert_equal "# EOF", lines.last
      assert_includes lines, "# TYPE ojs_relay_jobs_sent counter"
      refute(lines.any? { |line| line.start_with?("# TYPE ") && line.match?(/_total /) }, response.body)
      samples = lines.reject { |line| line.start_with?("#") }
      # The relay's own figures carry its id (relay="..."), the table's do not.
      assert samples.grep(/\Aojs_relay_/).all? { |line| line.match?(/,relay="\h{32}"[,}]/) }, samples.grep(/\Aojs_relay_/).first
      samples = samples.map { |line| line.sub(/,relay="\h{32}"/, "") }
      table = %(table="#{TABLE}")
      expected = [
        "ojs_relay_jobs_sent_total{#{table}} #{counts['sent']}",
        "ojs_relay_jobs_dead_total{#{table}} #{counts['dead']}",
        "ojs_relay_jobs_in_flight{#{table}} 0",
        "ojs_outbox_backlog_jobs{#{table}} 0",
        "ojs_outbox_rows{#{table},status=\"pending\"} 0",
        "ojs_outbox_rows{#{table},status=\"failed\"} 0",
        "ojs_outbox_rows{#{table},status=\"sent\"} #{counts['sent']}",
        "ojs_outbox_rows{#{table},status=\"dead\"} #{counts['dead']}",
        "ojs_relay_delivery_lag_seconds_count{#{table}} #{counts['sent']}"
      ]
      expected.each { |line| assert_includes samples, line }
      assert(samples.any? { |line| line.start_with?("ojs_relay_send_duration_seconds_bucket{#{table},le=\"+Inf\"} ") })
      # The same counters as the relay reports them to Ruby.
      assert_equal counts["sent"], OJS.metrics["sent"]
    end
  end

  # Rails puts Rack::ETag in front of every app; on Rack 2 it reads a whole 200 body to digest it
  # unless the response has an ETag or a Last-Modified. The stream still answers at once.
  def test_the_stream_is_not_buffered_by_rack_etag
    start
    events = stream(Rack::ETag.new(app), "/v1/events/stream")
    assert_equal 200, events.status
    refute events.headers.key?("etag"), "Rack::ETag left the stream alone"
    id = enqueue
    events.wait_for_event("job.enqueued of #{id} through Rack::ETag") { |e| e["subject"] == id }
  end

  # Closed by default (issue 25): without authorize: it is not built, as Express's
  # ojs.router() is not, and the error says how to open it on purpose. Before, it served
  # /metrics and every job's events to anyone (200).
  def test_without_authorize_it_is_not_built_and_says_how_to_open_it
    start
    [-> { OJS::EventsApp.new }, -> { OJS::EventsApp.new(authorize: nil) }, -> { OJS::EventsApp.new(keep_alive: 5) }].each do |build|
      error = assert_raises(OJS::InvalidConfig) { build.call }
      assert_equal %w[INVALID_CONFIG authorize], [error.code, error.field]
      assert_includes error.message, "OJS::EventsApp.new(authorize: ->(_request) { true })"
    end
    # Opened explicitly, it serves.
    assert_equal 200, get(app(authorize: ->(_request) { true }), "/metrics").status
  end

  # A tenant-scoped caller reads its own tenant whatever the query says: another tenant, the
  # parameter twice (either order: 400), percent-encoded, in another case, empty, or as a list
  # is refused; a parameter the core does not read (`tenant[]`, also twice) changes nothing.
  def test_a_tenant_scoped_caller_cannot_widen_its_scope_through_the_query
    start
    scoped = app(authorize: ->(_request) { { tenant: "t1" } })
    {
      "tenant=t2" => 403, "tenant=t1&tenant=t2" => 400, "tenant=t2&tenant=t1" => 400,
      "%74enant=t2" => 403, "tenant=T1" => 403, "tenant=" => 403, "tenant=t1,t2" => 403,
      "tenant=t1%2Ct2" => 403, "tenant=t1%00" => 403, "tenant=%20t1" => 403
    }.each do |query, status|
      response = get(scoped, "/v1/events/stream?#{query}")
      assert_equal status, response.status, "?#{query}: #{response.body}"
    end
    widened = %w[tenant[]=t2 tenant[]=t1&tenant[]=t2 tenant%5B%5D=t2 tenant[t1]=t2 Tenant=t2 TENANT=t2].map do |query|
      stream(scoped, "/v1/events/stream?#{query}").tap { |s| assert_equal 200, s.status, query }
    end
    operator = stream(app, "/v1/events/stream")
    other = enqueue(tenant: "t2")
    mine = enqueue(tenant: "t1")
    operator.wait_for_event("t1's job for the operator") { |e| e["subject"] == mine }
    assert_equal [other, mine], operator.events.map { |e| e["subject"] } & [other, mine]
    widened.each do |scoped_stream|
      scoped_stream.wait_for_event("t1's job for t1") { |e| e["subject"] == mine }
      assert_equal [mine], scoped_stream.events.map { |e| e["subject"] }
    end
  end

  # Nothing this surface or the relay behind it logs holds a token (the caller's bearer token,
  # the backend's auth_token) or a job's argument: everything OJS.logger and Rack's error
  # stream get while a caller reads the stream, a job is delivered, one is refused for good,
  # and one is refused for the token. The frames carry no argument either.
  def test_no_token_or_job_argument_in_logs
    TestSupport.connect(:sqlite, "events_app", table: TABLE)
    log = StringIO.new
    logger = Logger.new(log, level: Logger::DEBUG)
    TestSupport.configure(table: TABLE, auth_token: "s3cret-backend-token", logger: logger)
    caller_token = "s3cret-caller-token"
    guarded = app(authorize: lambda do |request|
      ActiveSupport::SecurityUtils.secure_compare(request.get_header("HTTP_AUTHORIZATION").to_s, "Bearer #{caller_token}")
    end)
    errors = StringIO.new
    env = { "HTTP_AUTHORIZATION" => "Bearer #{caller_token}", "rack.errors" => errors }
    assert_equal 403, get(guarded, "/metrics", env.merge("HTTP_AUTHORIZATION" => "Bearer s3cret-wrong-token")).status
    events = stream(guarded, "/v1/events/stream", env)
    assert_equal 200, events.status
    TestSupport.devserver.call(:post, "/_dev/faults", { "status" => 400, "code" => "invalid_request",
                                                         "match_type" => "poison.job" })
    sent = enqueue("email.welcome", ["s3cret-arg-sent"])
    dead = enqueue("poison.job", ["s3cret-arg-dead"])
    events.wait_for_event("the dead letter") { |e| e["subject"] == dead && e["type"] == "job.dead_lettered" }
    events.wait_for_event("the delivery") { |e| e["subject"] == sent && e["type"] == "job.enqueued" }
    assert_equal 200, get(guarded, "/metrics", env).status
    assert_equal 200, get(guarded, "/readyz", env).status
    TestSupport.devserver.call(:delete, "/_dev/faults")
    TestSupport.devserver.call(:post, "/_dev/faults", { "status" => 401, "code" => "unauthorized" })
    enqueue("email.welcome", ["s3cret-arg-refused"])
    TestSupport.wait_until("the relay's refusal logged") do
      OJS::RelayLog.forward
      log.string.include?("refuses this relay")
    end
    OJS.stop_relay
    logged = log.string + errors.string
    assert_includes logged, dead, "the dead letter is logged, by its id"
    %w[s3cret-backend-token s3cret-caller-token s3cret-wrong-token s3cret-arg].each do |secret|
      refute_includes logged, secret
      refute_includes events.text, secret
    end
  end

  def test_authorize_false_refuses_every_path_but_healthz
    start
    [false, nil].each do |decision|
      refused = app(authorize: ->(_request) { decision })
      %w[/v1/events/stream /metrics /readyz].each do |path|
        response = get(refused, path)
        assert_equal [403, "application/json", FORBIDDEN], [response.status, response.headers["content-type"], response.body],
                     "#{decision.inspect} #{path}"
      end
    end
    refused = app(authorize: ->(_request) { false })
    assert_equal 200, get(refused, "/healthz").status
    assert_equal "ok\n", get(refused, "/healthz").body
  end

  def test_authorize_receives_the_request
    start
    seen = []
    allowed = app(authorize: ->(request) { seen << request.get_header("HTTP_X_ROLE"); request.get_header("HTTP_X_ROLE") == "ops" })
    assert_equal 200, get(allowed, "/readyz", "HTTP_X_ROLE" => "ops").status
    assert_equal 403, get(allowed, "/readyz", "HTTP_X_ROLE" => "guest").status
    assert_equal %w[ops guest], seen
  end

  def test_a_tenant_scoped_caller_sees_only_its_tenant
    start
    scoped = app(authorize: ->(_request) { { tenant: "t1" } })
    assert_equal 403, get(scoped, "/v1/events/stream?tenant=t2").status
    assert_equal 403, get(scoped, "/metrics").status
    assert_equal 403, get(scoped, "/readyz").status

    own = stream(scoped, "/v1/events/stream")
    asked = stream(scoped, "/v1/events/stream?tenant=t1")
    operator = stream(app, "/v1/events/stream")
    other = enqueue(tenant: "t2")
    mine = enqueue(tenant: "t1")
    # The operator's stream shows both were announced, t2's first (one relay, in commit order).
    operator.wait_for_event("t1's job for the operator") { |e| e["subject"] == mine }
    assert_equal [other, mine], operator.events.map { |e| e["subject"] } & [other, mine]
    [own, asked].each do |scoped_stream|
      scoped_stream.wait_for_event("t1's job for t1") { |e| e["subject"] == mine }
      assert_equal [mine], scoped_stream.events.map { |e| e["subject"] }
      assert_equal ["t1"], scoped_stream.events.map { |e| e.dig("data", "tenant_id") }
    end
  end

  # The dashboard (issue 29) through the Rack app: the core's page and API, the write header
  # passed on, the caller's scope (the page itself is driven in a browser by the Express suite).
  def test_the_dashboard_is_served_with_the_caller_s_scope_and_writes_need_the_header
    start
    mine = enqueue(tenant: "t1")
    other = enqueue(tenant: "t2")
    operator = Rack::MockRequest.new(app)
    assert_equal 308, operator.get("/dashboard").status
    page = operator.get("/dashboard/")
    assert_equal 200, page.status
    assert_includes page.headers["content-security-policy"], "script-src 'self'"
    asset = page.body[/src="(assets\/app-[0-9a-f]+\.js)"/, 1]
    script = operator.get("/dashboard/#{asset}")
    assert_equal 200, script.status
    assert_equal "private, max-age=31536000, immutable", script.headers["cache-control"]

    t1 = Rack::MockRequest.new(app(authorize: ->(_request) { { tenant: "t1" } }))
    listed = TestSupport.wait_until("t1's row listed") do
      rows = JSON.parse(t1.get("/dashboard/api/rows").body)["rows"]
      rows if rows.any? { |row| row["job_id"] == mine }
    end
    assert_equal ["t1"], listed.map { |row| row["tenant_id"] }.uniq
    assert_equal 404, t1.get("/dashboard/api/rows/#{other}").status

    replay = "/dashboard/api/dead/replay?job_id=#{other}"
    assert_equal 403, operator.post(replay).status, "no write header, no write"
    answered = operator.post(replay, "HTTP_X_OJS_DASHBOARD" => "1")
    assert_equal 200, answered.status
    assert_equal({ "replayed" => 0 }, JSON.parse(answered.body))
    viewer = Rack::MockRequest.new(app(authorize: ->(_request) { { read_only: true } }))
    assert_equal 403, viewer.post(replay, "HTTP_X_OJS_DASHBOARD" => "1").status
    assert_equal false, JSON.parse(viewer.get("/dashboard/api/overview").body).dig("viewer", "writes")
  end

  def test_readyz_answers_the_core_s_verdict
    start
    response = get(app, "/readyz")
    assert_equal 200, response.status
    assert_equal "application/json", response.headers["content-type"]
    assert_equal({ "ready" => true, "database" => "ok", "backend" => "ok" }, JSON.parse(response.body))

    # A backend that does not answer: 503, the database still fine.
    closed = TCPServer.open("127.0.0.1", 0) { |server| "http://127.0.0.1:#{server.addr[1]}" }
    OJS.configure do |config|
      config.url = closed
      config.outbox_table = TABLE
      config.auto_start = false
    end
    response = get(app, "/readyz")
    assert_equal 503, response.status
    body = JSON.parse(response.body)
    assert_equal false, body["ready"]
    assert_equal "ok", body["database"]
    refute_equal "ok", body["backend"]
  end

  # The relay's database does not answer at all: not ready (503), with the core's reason.
  def test_readyz_without_a_database_is_503
    closed = TCPServer.open("127.0.0.1", 0) { |server| server.addr[1] }
    OJS.configure do |config|
      config.url = TestSupport.devserver.url
      config.database_url = "postgres://postgres@127.0.0.1:#{closed}/nothing"
      config.auto_start = false
    end
    response = get(app, "/readyz")
    assert_equal 503, response.status
    body = JSON.parse(response.body)
    assert_equal false, body["ready"]
    assert_equal "ok", body["backend"]
    assert_includes body["database"], closed.to_s, "the core's verdict names the database"
  end

  # The core's answers: a bad query is 400 naming the parameter, an unknown path 404, another
  # method 405 (HEAD is GET without a body).
  def test_bad_requests_are_refused_naming_the_parameter
    start
    error_of = ->(response) { JSON.parse(response.body)["error"] }
    response = get(app, "/v1/events/stream?since=yesterday")
    assert_equal 400, response.status
    assert_equal "invalid_request", error_of.(response)["code"]
    assert_match(/\Asince: "yesterday" is not an RFC 3339 time/, error_of.(response)["message"])
    response = get(app, "/v1/events/stream?types=job.*&types=ojs.*")
    assert_equal 400, response.status
    assert_equal "the query parameter types is given more than once", error_of.(response)["message"]
    response = get(app, "/nothing")
    assert_equal [404, "not_found"], [response.status, error_of.(response)["code"]]
    response = Rack::MockRequest.new(app).post("/v1/events/stream")
    assert_equal [405, "method_not_allowed"], [response.status, error_of.(response)["code"]]
    assert_equal 405, Rack::MockRequest.new(app).post("/healthz").status
    head = Rack::MockRequest.new(app).request("HEAD", "/readyz")
    assert_equal [200, "application/json", ""], [head.status, head.headers["content-type"], head.body]
    head = Rack::MockRequest.new(app).request("HEAD", "/v1/events/stream")
    assert_equal [200, "text/event-stream", ""], [head.status, head.headers["content-type"], head.body]
  end

  # No relay here (external mode): the stream reads the table's event log all the same, and
  # /metrics gives the table's figures; live only (event_retention nil), the stream is 503.
  def test_without_a_relay_here_the_stream_reads_the_log
    start
    OJS.configure do |config|
      config.url = TestSupport.devserver.url
      config.outbox_table = TABLE
      config.relay = :external
    end
    events = stream(app, "/v1/events/stream")
    assert_equal 200, events.status
    metrics = get(app, "/metrics")
    assert_equal 200, metrics.status
    assert_includes metrics.body, %(ojs_outbox_backlog_jobs{table="#{TABLE}"})
    refute_includes metrics.body, 'ojs_relay_'
    OJS.configure do |config|
      config.url = TestSupport.devserver.url
      config.outbox_table = TABLE
      config.relay = :external
      config.relay_options = { event_retention: nil }
    end
    response = get(app, "/v1/events/stream")
    assert_equal 503, response.status
    assert_equal "relay_not_running", JSON.parse(response.body).dig("error", "code")
  end

  # Rails starts its relay lazily: with config.auto_start the mount starts it, as the middleware
  # does, before it subscribes.
  def test_the_mount_starts_the_lazy_relay
    TestSupport.connect(:sqlite, "events_app", table: TABLE)
    TestSupport.configure(table: TABLE, start_relay: false)
    OJS.configure do |config|
      config.url = TestSupport.devserver.url
      config.outbox_table = TABLE
      config.outbox_options = { poll_interval: "PT0.2S" }
      config.auto_start = true
    end
    assert_nil OJS.metrics, "no relay before the first request"
    events = stream(app, "/v1/events/stream")
    assert_equal 200, events.status
    refute_nil OJS.metrics, "the mount started it"
    id = enqueue
    events.wait_for_event("job.enqueued of #{id}") { |e| e["subject"] == id }
  end

  # The stream waits in native code without the GVL: another Ruby thread keeps running meanwhile.
  # The window is the stream's own: from its second keep-alive comment to its fourth, at least
  # two native waits of a second each (keep_alive: 1). A wait that held the GVL would let this
  # thread run only between the waits, a turn or two each; the verdict compares the turns taken
  # with the waits in the window, whatever the machine's speed (a turn may take up to 100 ms).
  def test_a_waiting_stream_does_not_hold_the_gvl
    start
    events = stream(app(keep_alive: 1), "/v1/events/stream") # each native wait lasts 1 s
    keep_alives = -> { events.text.scan(KEEP_ALIVE).length }
    TestSupport.wait_until("the stream's second keep-alive") { keep_alives.call >= 2 }
    ticks = 0
    deadline = TestSupport.monotonic + TestSupport::PATIENCE
    until keep_alives.call >= 4
      sleep 0.01
      ticks += 1
      raise Minitest::Assertion, "no fourth keep-alive within #{TestSupport::PATIENCE} s" if TestSupport.monotonic > deadline
    end
    waits = 2
    assert_operator ticks, :>=, 10 * waits, "this thread ran #{ticks} times during #{waits} native waits of 1 s"
  end

  def test_an_idle_stream_writes_keep_alive_comments
    start
    events = stream(app(keep_alive: 0.2), "/v1/events/stream")
    TestSupport.wait_until("three keep-alive comments") { events.text.scan(KEEP_ALIVE).length >= 3 }
    assert_equal "", events.text.gsub(KEEP_ALIVE, "")
  end

  def test_settings_that_do_not_exist_are_refused
    error = assert_raises(OJS::InvalidConfig) { OJS::EventsApp.new(authorise: ->(_r) { true }) }
    assert_equal "authorise", error.field
    assert_match(/authorize/, error.message)
    error = assert_raises(OJS::InvalidConfig) { OJS::EventsApp.new(authorize: true) }
    assert_equal "authorize", error.field
    error = assert_raises(OJS::InvalidConfig) { OJS::EventsApp.new(authorize: OPEN, keep_alive: 0) }
    assert_equal "keep_alive", error.field
  end
  # authorize: answering no decision is the core's INVALID_CONFIG naming `authorize`, never
  # quoting what it answered; a value Ruby has no JSON form for is refused naming its class. A
  # tenant id alone is a decision: that tenant.
  def test_an_authorize_answer_that_is_no_decision_is_refused_without_its_value
    start
    [{ token: "s3cret" }, "", { tenant: "" }, 1, ["s3cret"], Object.new].each do |odd|
      error = assert_raises(OJS::InvalidConfig, odd.inspect) { get(app(authorize: ->(_request) { odd }), "/metrics") }
      assert_equal "authorize", error.field, odd.inspect
      refute_includes error.message, "s3cret"
    end
    tenant = app(authorize: ->(_request) { "t1" })
    assert_equal 403, get(tenant, "/metrics").status
    assert_equal 403, get(tenant, "/v1/events/stream?tenant=t2").status
    assert_equal 200, stream(tenant, "/v1/events/stream?tenant=t1").status
  end

  # /healthz answers without asking authorize: (it is the core's open path).
  def test_healthz_does_not_ask_authorize
    start
    asked = []
    counting = app(authorize: ->(request) { asked << request.path_info && false })
    assert_equal [200, "ok\n"], get(counting, "/healthz").then { |r| [r.status, r.body] }
    assert_empty asked
    assert_equal 403, get(counting, "/readyz").status
    assert_equal ["/readyz"], asked
  end

  # With config.encryption the mount is a Codec Server: the request body reaches the core,
  # which encodes and decodes payloads; its limits and policy hold (over 1 MiB: 413, no JSON:
  # 400, a tenant: 403). Without encryption there is none (404).
  def test_the_codec_server_reads_the_request_body
    TestSupport.connect(:sqlite, "events_app", table: TABLE)
    key = Base64.strict_encode64("\x01" * 32)
    TestSupport.configure(table: TABLE, start_relay: false, encryption: { key_id: "k1", keys: { "k1" => key } })
    post = ->(app, path, body) { Rack::MockRequest.new(app).post(path, input: body, "CONTENT_TYPE" => "application/json") }
    plain = { "payloads" => [{ "data" => Base64.strict_encode64("[1,2]"), "metadata" => { "encoding" => "json/plain" } }] }
    encoded = post.(app, "/codec/encode", JSON.generate(plain))
    assert_equal 200, encoded.status, encoded.body
    sealed = JSON.parse(encoded.body)["payloads"][0]
    assert_equal "binary/encrypted", sealed.dig("metadata", "encoding")
    refute_includes Base64.strict_decode64(sealed["data"]), "[1,2]"
    decoded = post.(app, "/codec/decode", JSON.generate("payloads" => [sealed]))
    assert_equal 200, decoded.status, decoded.body
    assert_equal "[1,2]", Base64.strict_decode64(JSON.parse(decoded.body)["payloads"][0]["data"])
    assert_equal 413, post.(app, "/codec/decode", " " * ((1024 * 1024) + 1)).status
    assert_equal 400, post.(app, "/codec/decode", "not json").status
    assert_equal 403, post.(app(authorize: ->(_request) { { tenant: "t1" } }), "/codec/decode", JSON.generate(plain)).status

    TestSupport.configure(table: TABLE, start_relay: false)
    response = post.(app, "/codec/decode", JSON.generate(plain))
    assert_equal [404, "not_found"], [response.status, JSON.parse(response.body).dig("error", "code")]
  end
end
