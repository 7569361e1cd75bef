# frozen_string_literal: true

# OJS.subscribe_events (issue 15) against the real devserver's event stream, which it serves as
# a backend would: job.enqueued when it stores a pushed job, job.started / job.completed /
# job.failed through its control API, and POST /_dev/events/drop cuts every open stream. The
# reconnect and the Last-Event-ID resume are the core's; these tests check what a Ruby caller
# sees: every event once, in order, across a dropped connection, in the block form and the
# Enumerator form.

require_relative "test_helper"
require "securerandom"

class EventClientTest < Minitest::Test
  TABLE = "rb_event_client"

  def setup
    TestSupport.devserver.reset
    TestSupport.connect(:sqlite, "event_client", table: TABLE)
    TestSupport.configure(table: TABLE, start_relay: false)
    # A job type of this test alone, so the filter leaves out anything else the devserver sees.
    @type = "evt.t#{SecureRandom.hex(4)}"
    # Each subscription replays from here on its first connection, so no job pushed before the
    # client has connected is missed (the devserver keeps its events for replay).
    @since = Time.now - 1
  end

  def teardown
    @threads&.each do |thread|
      thread.kill
      begin
        thread.join(TestSupport::PATIENCE)
      rescue StandardError
        nil # the test has already seen it (Thread#value)
      end
    end
  end

  # Pushes one job straight to the backend (spec §5.1 enqueue); returns its id.
  def push(args = [1])
    OJS.enqueue(@type, args)
  end

  def drop_streams
    TestSupport.devserver.call(:post, "/_dev/events/drop")["dropped"]
  end

  def open_streams
    TestSupport.devserver.call(:get, "/_dev/events")["open_streams"]
  end

  def background(&block)
    thread = Thread.new(&block)
    thread.report_on_exception = false
    (@threads ||= []) << thread
    thread
  end

  # Events collected by another thread.
  class Collected
    def initialize
      @events = []
      @lock = Mutex.new
    end

    def <<(event)
      @lock.synchronize { @events << event }
    end

    def to_a
      @lock.synchronize { @events.dup }
    end

    def wait_for(count, what)
      TestSupport.wait_until("#{what}: #{count} events (have #{to_a.length})") { to_a.length >= count }
      to_a
    end
  end

  # N jobs, the connection cut, M more jobs while the client reconnects, then a sentinel: the
  # consumer sees exactly the N + M + 1 job.enqueued events, each job once, in push order, with
  # distinct event ids. (Any repeat from the resume would come before the sentinel's event.)
  def check_resume(collected)
    first = (1..5).map { |i| push([i]) }
    collected.wait_for(2, "events before the drop") # so the stream is open when it is cut
    assert_operator drop_streams, :>=, 1, "the devserver cut the open stream"
    second = (6..10).map { |i| push([i]) }
    sentinel = push([0])
    events = collected.wait_for(first.length + second.length + 1, "every event after the drop")
    assert_equal first + second + [sentinel], events.map(&:subject)
    assert_equal events.length, events.map(&:id).uniq.length, "no event id twice"
    assert(events.all? { |event| event.type == "job.enqueued" && event.data["type"] == @type })
    events
  end

  def test_block_form_resumes_after_a_drop_without_losing_or_repeating_an_event
    collected = Collected.new
    consumer = background do
      OJS.subscribe_events(types: ["job.enqueued"], job_types: [@type], since: @since) { |event| collected << event }
    end
    events = check_resume(collected)
    event = events.first
    assert_kind_of OJS::Event, event
    assert_equal "1.0", event.specversion
    assert_equal event.subject, event.data["job_id"]
    assert_kind_of Time, event.time
    assert_kind_of String, event.source
    # Thread#kill waits for the native wait to return (at most half a second), and the block
    # form's ensure closes the feed.
    consumer.kill
    assert consumer.join(TestSupport::PATIENCE), "the consumer thread ended"
  end

  def test_enumerator_form_resumes_after_a_drop_and_close_ends_it
    events = OJS.subscribe_events(types: "job.enqueued", job_types: [@type], since: @since)
    assert_kind_of Enumerator, events
    collected = Collected.new
    consumer = background do
      loop { collected << events.next } # external iteration; StopIteration ends the loop
      :stopped
    end
    check_resume(collected)
    events.close # from another thread than the consumer's
    assert events.closed?
    assert_equal :stopped, consumer.value
  end

  def test_enumerator_internal_iteration_closes_the_feed_when_done
    events = OJS.subscribe_events(job_types: [@type], since: @since)
    ids = (1..3).map { |i| push([i]) }
    taken = background { events.lazy.map(&:subject).first(2) }
    assert_equal ids.first(2), taken.value
    assert events.closed?, "first(2) ended the iteration, which closed the feed"
    TestSupport.wait_until("the devserver saw the stream close") { open_streams.zero? }
  end

  def test_control_api_events_in_order
    events = OJS.subscribe_events(job_types: [@type], since: @since)
    id = push
    TestSupport.devserver.call(:post, "/_dev/jobs/#{id}/start")
    TestSupport.devserver.call(:post, "/_dev/jobs/#{id}/complete")
    seen = background { events.take(3) }.value
    assert_equal %w[job.enqueued job.started job.completed], seen.map(&:type)
    assert_equal [id] * 3, seen.map(&:subject)
    assert events.closed?
  end

  def test_the_filters_reach_the_server
    events = OJS.subscribe_events(types: ["job.completed"], job_types: [@type], since: @since)
    id = push
    other = push
    TestSupport.devserver.call(:post, "/_dev/jobs/#{id}/start")
    TestSupport.devserver.call(:post, "/_dev/jobs/#{id}/complete")
    first = background { events.first }.value
    assert_equal ["job.completed", id], [first.type, first.subject]
    refute_equal other, first.subject
  end

  def test_next_event_with_a_timeout
    subscription = OJS.client.subscribe_events({ "job_types" => [@type], "since" => OJS::JSONValue.timestamp(@since) })
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    assert_nil subscription.next_event(timeout: 0.3), "nothing came in time"
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :>=, 0.3
    refute subscription.closed?
    id = push
    event = TestSupport.wait_until("the event") { subscription.next_event(timeout: 0.5) }
    assert_equal id, event.subject
    subscription.close
    assert_nil subscription.next_event
  end

  # A refusal by the server (here 404: no stream at that URL) is the core's error, for good.
  def test_a_refusal_raises_the_core_s_error
    events = OJS.subscribe_events(url: "#{TestSupport.devserver.url}/v1/no-such-stream")
    error = assert_raises(OJS::BackendRejected) { background { events.next }.value }
    assert_match(/404/, error.message)
  end

  def test_bad_settings_raise_typed_errors_naming_the_field
    error = assert_raises(OJS::InvalidConfig) { OJS.subscribe_events(typez: ["job.*"]) }
    assert_equal "typez", error.field
    assert_match(/types/, error.message)
    error = assert_raises(OJS::InvalidConfig) { OJS.subscribe_events(url: "ftp://example.invalid/") }
    assert_equal "url", error.field
    # A value of the wrong type: the core names the option.
    { types: [1], tenant: 5, last_event_id: [] }.each do |key, value|
      error = assert_raises(OJS::InvalidConfig) { OJS.subscribe_events(key => value) }
      assert_equal key.to_s, error.field
    end
  end

  # The client speaks only HTTP: the outbox database need not answer (here nothing listens
  # at the configured database URL), and no relay runs.
  def test_the_client_needs_no_database
    closed = TCPServer.open("127.0.0.1", 0) { |server| server.addr[1] }
    OJS.configure do |config|
      config.url = TestSupport.devserver.url
      config.database_url = "postgres://postgres@127.0.0.1:#{closed}/nothing"
      config.auto_start = false
    end
    events = OJS.subscribe_events(job_types: [@type], since: @since)
    # Pushed over HTTP by the test (OJS.enqueue would open the outbox's pool).
    id = TestSupport.devserver.call(:post, "/ojs/v1/jobs", { "type" => @type, "args" => [1] }).dig("job", "id")
    assert_equal id, background { events.first }.value.subject
    assert_nil OJS.metrics, "no relay runs"
  end

  def test_since_accepts_a_time
    pushed = push
    TestSupport.devserver.wait_for([pushed])
    events = OJS.subscribe_events(job_types: [@type], since: Time.now - 60)
    replayed = background { events.first }.value
    assert_equal pushed, replayed.subject
  end
end
