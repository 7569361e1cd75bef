# frozen_string_literal: true

# Ruby threads enqueueing at the same time all succeed (no GVL deadlock between the native
# calls and the relay's threads), each on its own ActiveRecord connection.
#
# On PostgreSQL each thread writes in transactions. On SQLite the threads write in autocommit:
# with ActiveRecord 6.1 the sqlite3 gem waits for a busy database while holding the GVL, so two
# threads holding write transactions at once end in SQLite3::BusyException whatever this gem
# does (docs/rails.md, troubleshooting).

require_relative "test_helper"
require "timeout"

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
                if database == :postgres
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

  def test_another_thread_runs_while_one_waits_on_the_backend
    TestSupport.connect(:sqlite, "concurrency_gvl", table: TABLE)
    TestSupport.configure(table: TABLE)
    TestSupport.devserver.reset
    TestSupport.devserver.call(:post, "/_dev/faults", { "latency_ms" => 1000, "count" => 1 })
    ticks = 0
    done = false
    ticker = Thread.new do
      until done
        sleep 0.01
        ticks += 1
      end
    end
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    OJS.enqueue("slow.job", [1])
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    ticks_during_the_call = ticks
    done = true
    ticker.join
    assert_operator elapsed, :>=, 0.95
    # A GVL held for the whole second would leave the ticker at 0 or 1; any scheduler gives it
    # many more turns (about 100 on a quiet machine).
    assert_operator ticks_during_the_call, :>=, 10, "the ticker thread was starved while the native call waited"
  ensure
    TestSupport.devserver.call(:delete, "/_dev/faults")
  end
end
