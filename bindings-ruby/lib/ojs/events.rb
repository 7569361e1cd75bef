# frozen_string_literal: true

require "time"

module OJS
  # One event of an OJS event stream: a CloudEvents 1.0 envelope (RFC-0005 §2) as Ruby values.
  # The core receives, filters and resumes; this class only reads the envelope's JSON text.
  #
  #   event.id       # "019abf0e-..." (the stream's id; Last-Event-ID resumes after it)
  #   event.type     # "job.enqueued"
  #   event.source   # "/ojs/outbox/ojs_outbox" (the relay's), or the backend's
  #   event.subject  # the job id for job events
  #   event.time     # a Time (UTC), nil when the envelope has none
  #   event.data     # { "job_id" => ..., "type" => ..., "queue" => ..., ... }
  #   event.to_h     # the whole envelope as parsed
  class Event
    attr_reader :id, :type, :source, :subject, :time, :data, :specversion, :datacontenttype

    # The event of a CloudEvents JSON text (what the core hands over per event).
    def self.from_json(text)
      new(JSON.parse(text))
    end

    def initialize(envelope)
      @envelope = envelope.freeze
      @id = envelope["id"]
      @type = envelope["type"]
      @source = envelope["source"]
      @subject = envelope["subject"]
      @time = parse_time(envelope["time"])
      @data = envelope["data"] || {}
      @specversion = envelope["specversion"]
      @datacontenttype = envelope["datacontenttype"]
      freeze
    end

    def to_h
      @envelope
    end

    def ==(other)
      other.is_a?(Event) && other.to_h == to_h
    end
    alias eql? ==

    def hash
      @envelope.hash
    end

    def inspect
      "#<OJS::Event #{type} id=#{id} subject=#{subject.inspect} data=#{data.inspect}>"
    end

    private

    def parse_time(text)
      text.is_a?(String) ? Time.iso8601(text).utc : nil
    rescue ArgumentError
      nil
    end
  end

  # How long one native wait lasts before control comes back to Ruby: what bounds how late a
  # `close` from another thread, Thread#kill or Thread#raise takes effect. Not a delivery
  # setting (the core delivers each event as soon as it has it).
  POLL_MS = 500
  private_constant :POLL_MS

  # A subscriber of this process's relay events as SSE frames (`Bridge::relay_events`): what
  # OJS::EventsApp serves and the conformance runner reads. Each `next_frame` waits without the
  # GVL.
  class RelayStream
    # `native`: a Native::RelayFrames.
    def initialize(native)
      @native = native
      @closed = false
    end

    # The next SSE frame (text to write as it is), "" when none came within `timeout_ms`, nil at
    # the end (the relay stopped, the subscriber was cut off, or #close).
    def next_frame(timeout_ms)
      return nil if @closed

      @native.next(Integer(timeout_ms))
    end

    # Drops the subscription at once (a `next_frame` waiting in another thread returns within
    # its timeout, with the end).
    def close
      @closed = true
      @native.close
    end

    def closed?
      @closed
    end
  end

  # An event client of an OJS event stream (`OJS.subscribe_events`): a backend's (the default:
  # the configured backend's `/v1/events/stream`) or a relay's. Reconnecting with Last-Event-ID
  # after a dropped connection, and dropping ids already handed over, are the core's
  # (`Bridge::subscribe_events`). Enumerable: `each` yields OJS::Event until the subscription
  # is closed, and closes it when the iteration ends (also by `break` or an exception).
  class EventSubscription
    include Enumerable

    # `native`: a Native::EventFeed.
    def initialize(native)
      @native = native
      @closed = false
    end

    # The next event, waiting at most `timeout` seconds (nil: until one comes or the
    # subscription closes). Returns nil when none came in time or once closed (see #closed?).
    # A refusal by the server (400, 401, 403, 404, 405) raises the core's error, for good.
    def next_event(timeout: nil)
      deadline = timeout && (monotonic + timeout)
      loop do
        return nil if @closed

        wait = deadline ? ((deadline - monotonic) * 1000).ceil.clamp(0, POLL_MS) : POLL_MS
        text = poll(wait)
        return nil if @closed # closed by another thread while this one waited
        if text.nil?
          @closed = true
          return nil
        end
        return Event.from_json(text) unless text.empty?
        return nil if deadline && monotonic >= deadline
      end
    end

    # Yields each event until the subscription closes; closes it when the iteration ends.
    # Without a block: an Enumerator.
    def each
      return enum_for(:each) unless block_given?

      while (event = next_event)
        yield event
      end
      self
    ensure
      close if block_given?
    end

    # Stops the client (idempotent; safe from another thread: a wait in progress returns
    # within half a second).
    def close
      @closed = true
      @native.close
      nil
    end

    def closed?
      @closed
    end

    private

    def poll(timeout_ms)
      @native.next(timeout_ms)
    end

    def monotonic
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end

  # What OJS.subscribe_events returns without a block: an Enumerator of OJS::Event over an open
  # subscription, which `close` ends (the native client stops). Internal iteration (`each`,
  # `first(n)`, `take_while`, ...) closes it when it ends; external iteration (`next`) runs
  # until `close` (or the end of the stream: StopIteration).
  class EventEnumerator < Enumerator
    def initialize(subscription)
      @subscription = subscription
      super() { |yielder| subscription.each { |event| yielder << event } }
    end

    def close
      @subscription.close
    end

    def closed?
      @subscription.closed?
    end
  end
end
