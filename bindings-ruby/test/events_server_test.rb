# frozen_string_literal: true

# OJS::EventsApp under a real server: Puma (Debian's package; test.sh and test-rails72.sh
# install it), in this process, mounted at /ojs with Rack::URLMap as a Rails route mounts it. A
# client reads the stream over a TCP socket while the same Puma answers other requests: the
# stream's wait in native code holds no GVL, Puma writes each frame as it comes, and when the
# client goes away Puma closes the body.

require_relative "test_helper"
require "socket"
require "rack"
require "rack/urlmap"
require "rack/body_proxy"
require "puma"
require "puma/server"

class EventsServerTest < Minitest::Test
  TABLE = "rb_events_server"
  STREAM_PATH = "/v1/events/stream"
  # The core's keep-alive comment, written first and when no event came for keep_alive.
  KEEP_ALIVE = ": keep-alive\n\n"

  def setup
    TestSupport.devserver.reset
    TestSupport.connect(:sqlite, "events_server", table: TABLE)
    TestSupport.configure(table: TABLE)
    @closed = Queue.new
    events = OJS::EventsApp.new(authorize: ->(_request) { true }, keep_alive: 1) # each native wait lasts 1 s
    closes = events_closes(events)
    app = Rack::URLMap.new("/ojs" => closes, "/" => ->(_env) { [200, { "content-type" => "text/plain" }, ["app"]] })
    # A graceful stop waits for requests in progress, and a stream with its client still
    # connected never ends by itself: force_shutdown_after bounds the wait (docs/rails.md).
    options = { min_threads: 1, max_threads: 4, force_shutdown_after: 1 }
    if defined?(Puma::LogWriter) # Puma 6 (Debian 13)
      options[:log_writer] = Puma::LogWriter.strings
      @server = Puma::Server.new(app, nil, options)
    else # Puma 5 (Debian 12)
      @server = Puma::Server.new(app, Puma::Events.strings, options)
    end
    @port = @server.add_tcp_listener("127.0.0.1", 0).addr[1]
    @server.run
  end

  def teardown
    @socket&.close unless @socket&.closed?
    OJS.stop_relay # ends any stream still open
    @server&.stop(true)
  end

  # The app, with the server's `close` of a stream's body noted in @closed.
  def events_closes(app)
    closed = @closed
    lambda do |env|
      status, headers, body = app.call(env)
      return [status, headers, body] unless env["PATH_INFO"] == STREAM_PATH

      [status, headers, Rack::BodyProxy.new(body) { closed << :stream }]
    end
  end

  def get(path)
    Net::HTTP.start("127.0.0.1", @port) { |http| http.get(path) }
  end

  # A streaming GET read by a thread of its own; returns the text received so far, live.
  def open_stream(path)
    @socket = TCPSocket.new("127.0.0.1", @port)
    @socket.write("GET #{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
    received = +""
    lock = Mutex.new
    Thread.new do
      loop do
        chunk = @socket.readpartial(4096) # outside the lock: it waits
        lock.synchronize { received << chunk }
      end
    rescue IOError, SystemCallError
      nil
    end
    -> { lock.synchronize { received.dup } }
  end

  def test_puma_streams_frames_and_serves_other_requests_while_a_stream_waits
    text = open_stream("/ojs/v1/events/stream?types=job.*")
    TestSupport.wait_until("the stream's headers and first comment") { text.call.include?(KEEP_ALIVE) }
    assert_match(%r{\AHTTP/1\.1 200 OK\r\n}, text.call)
    assert_match(%r{^content-type: text/event-stream\r$}i, text.call)

    # While the stream waits in native code (1 s at a time), Puma's other threads answer.
    # With a wait that held the GVL, the threads of each request (this client's, Puma's) would
    # get the GVL only between two waits: about one wait (1 s) per request. The bound is half a
    # wait per request: the wait the test set, not a machine speed.
    requests = 40
    started = TestSupport.monotonic
    (requests / 2).times do
      assert_equal "ok\n", get("/ojs/healthz").body
      assert_equal "app", get("/").body
    end
    elapsed = TestSupport.monotonic - started
    assert_operator elapsed, :<, requests * 0.5, "#{requests} requests took #{elapsed.round(2)} s beside a waiting stream"

    id = ActiveRecord::Base.transaction { OJS.enqueue_after_commit("email.welcome", [1]) }
    TestSupport.wait_until("job.enqueued of #{id} through Puma") { text.call.include?(%("subject":"#{id}")) }
    assert_match(/event: job\.enqueued\r?\ndata: .*"subject":"#{id}"/, text.call)

    # The client goes away: Puma's next write (a keep-alive within a second) fails and it
    # closes the body, which drops the native subscription.
    @socket.close
    TestSupport.wait_until("Puma closed the stream's body") { !@closed.empty? }
    assert_equal :stream, @closed.pop
  end

  # Puma's stop with a client still reading a stream: force_shutdown_after interrupts the
  # stream's thread (its native wait returns at least once a second) and the body is closed.
  def test_a_stop_with_a_connected_stream_client_ends
    text = open_stream("/ojs/v1/events/stream")
    TestSupport.wait_until("the stream open") { text.call.include?(KEEP_ALIVE) }
    stopping = Thread.new { @server.stop(true) }
    assert stopping.join(TestSupport::PATIENCE), "Puma stopped within #{TestSupport::PATIENCE}s"
    @server = nil
    TestSupport.wait_until("the stream's body closed") { !@closed.empty? }
  end

  def test_metrics_and_readyz_through_puma
    id = ActiveRecord::Base.transaction { OJS.enqueue_after_commit("email.welcome", [1]) }
    TestSupport.devserver.wait_for([id])
    TestSupport.wait_until("the row sent") { OJS.outbox_rows([id]).dig(id, "status") == "sent" }
    # The relay counts a settlement once it has committed: its counters trail the row briefly.
    TestSupport.wait_until("the relay's sent counter") { OJS.metrics["sent"] == 1 }
    metrics = get("/ojs/metrics")
    assert_equal "200", metrics.code
    assert_equal "application/openmetrics-text; version=1.0.0; charset=utf-8", metrics["content-type"]
    assert_equal "# EOF", metrics.body.lines.last.chomp
    assert metrics.body.lines.map(&:chomp).any? { |line| line.match?(/\Aojs_relay_jobs_sent_total\{table="#{TABLE}",relay="\h{32}"\} 1\z/) }, metrics.body
    ready = get("/ojs/readyz")
    assert_equal "200", ready.code
    assert_equal true, JSON.parse(ready.body)["ready"]
  end
end
