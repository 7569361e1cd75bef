# frozen_string_literal: true

# Ruby threads enqueueing at the same time all succeed (no GVL deadlock between the native
# calls and the relay's threads), each on its own ActiveRecord connection.
#
# On PostgreSQL and MariaDB each thread writes in transactions. On SQLite the threads write in autocommit:
# with ActiveRecord 6.1 the sqlite3 gem waits for a busy database while holding the GVL, so two
# threads holding write transactions at once end in SQLite3::BusyException whatever this gem
# does (docs/rails.md, troubleshooting).

require_relative "test_helper"
require "timeout"
require "socket"

class ConcurrencyTest < Minitest::Test
  TABLE = "rb_concurrency"
  THREADS = 4
  JOBS_PER_THREAD = 25

  TestSupport.databases.each do |database|
    define_method("test_#{database}_threads_enqueue_concurrently") do
      TestSupport.connect(database, "concurrency", table: TABLE)
      TestSupport.configure(table: TABLE)
      TestSupport.devserver.reset
      ids = Queue.new
      Timeout.timeout(60) do
        threads = Array.new(THREADS) do |t|
          Thread.new do
            ActiveRecord::Base.connection_pool.with_connection do
              JOBS_PER_THREAD.times do |i|
                if database != :sqlite
                  ActiveRecord::Base.transaction { stage(ids, t, i) }
                else
                  stage(ids, t, i)
                end
              end
              ids << OJS.enqueue("thread.now", [t]) # blocking HTTP call, GVL released
            end
          end
        end
        threads.each(&:join)
      end
      all = Array.new(ids.size) { ids.pop }
      assert_equal THREADS * (JOBS_PER_THREAD + 2), all.uniq.length
      TestSupport.devserver.wait_for(all, timeout: 20)
    end
  end

  def stage(ids, thread, index)
    ids << OJS.enqueue_after_commit("thread.job", [thread, index])
    ids << OJS.enqueue_bulk([{ type: "thread.bulk", args: [thread, index] }]).first if index.zero?
  end

  # A backend that is a Ruby thread of this process: it forwards each request to the devserver
  # and writes the answer back. It can answer a native call of another thread of this process
  # only if that call waits without the GVL.
  class RubyThreadBackend
    attr_reader :url, :requests

    def initialize(target)
      @target = URI(target)
      @server = TCPServer.new("127.0.0.1", 0)
      @url = "http://127.0.0.1:#{@server.addr[1]}"
      @requests = Queue.new
      @thread = Thread.new do
        loop { serve(@server.accept) }
      rescue IOError, SystemCallError
        nil # closed
      end
    end

    def close
      @server.close
      @thread.join
    end

    private

    SKIPPED = %w[host connection content-length accept-encoding transfer-encoding content-encoding].freeze

    def serve(socket)
      method, path = socket.gets.to_s.split(" ")
      return unless method

      headers = {}
      while (line = socket.gets) && line != "\r\n"
        name, value = line.split(":", 2)
        headers[name.strip.downcase] = value.strip
      end
      body = headers.key?("content-length") ? socket.read(Integer(headers["content-length"])) : nil
      @requests << "#{method} #{path}"
      request = Net::HTTPGenericRequest.new(method, !body.nil?, method != "HEAD", path, headers.except(*SKIPPED))
      request.body = body if body
      response = Net::HTTP.start(@target.host, @target.port) { |http| http.request(request) }
      answer = +"HTTP/1.1 #{response.code} #{response.message}\r\n"
      response.each_header { |name, value| answer << "#{name}: #{value}\r\n" unless SKIPPED.include?(name) }
      answer << "content-length: #{response.body.to_s.bytesize}\r\nconnection: close\r\n\r\n#{response.body}"
      socket.write(answer)
    ensure
      socket.close
    end
  end

  # The blocking native call (spec §5.1 enqueue: an HTTP request) waits without the GVL: the
  # backend it waits for is a Ruby thread of this same process, which could not answer while
  # the GVL was held (the core's request would time out instead). A verdict by condition, not
  # by counting another thread's turns in a second.
  def test_another_thread_runs_while_one_waits_on_the_backend
    TestSupport.connect(:sqlite, "concurrency_gvl", table: TABLE)
    TestSupport.devserver.reset
    backend = RubyThreadBackend.new(TestSupport.devserver.url)
    OJS.configure do |config|
      config.url = backend.url
      config.outbox_table = TABLE
      config.auto_start = false
      config.relay_options = { request_timeout: "PT5S" }
    end
    id = OJS.enqueue("slow.job", [1])
    assert_equal id, TestSupport.devserver.job(id)&.fetch("id"), "the job reached the backend through the Ruby thread"
    requests = Array.new(backend.requests.size) { backend.requests.pop }
    assert_includes requests, "POST /ojs/v1/jobs"
  ensure
    backend&.close
    TestSupport.configure(table: TABLE, start_relay: false)
  end
end
