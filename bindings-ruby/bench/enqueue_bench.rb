# frozen_string_literal: true

# In one host transaction, per job: OJS.enqueue_after_commit vs a raw parameterized INSERT of
# the same row through the same ActiveRecord connection (the core's SQL and row shape, a fresh
# UUID and a fresh args JSON text per row, `exec_query` with binds as a Rails developer would
# write it), and OJS.enqueue_bulk of 1,000 jobs vs 1,000 single calls. SQLite and PostgreSQL
# (OJS_BENCH_DATABASE_URL or OJS_TEST_DATABASE_URL). The relay is not running: this measures
# the cost on the application's side (validation, ids, the INSERT, the commit hook).
#
# The raw INSERT of the target ratio runs on a connection held in a local variable. A second
# raw INSERT, printed for information, looks the connection up per row
# (`ActiveRecord::Base.connection.exec_query`), as application code does and as
# OJS.enqueue_after_commit must (about 2 us, more inside a loop of INSERTs).
#
# Rounds interleave the variants (adapter, raw, raw with lookup, bulk; the order rotates each
# round) so that a noisy neighbour or the table's growth weighs on all of them alike; each
# result is the median of OJS_BENCH_ROUNDS rounds (default 9) of 1,000 jobs, the commit
# included.
require "ojs-adapter-rails"
require "securerandom"
require "fileutils"

ROUNDS = Integer(ENV.fetch("OJS_BENCH_ROUNDS", "9"))
JOBS = 1000
TABLE = "rb_bench_outbox"

def connect(kind)
  ActiveRecord::Base.remove_connection if ActiveRecord::Base.connected?
  if kind == :sqlite
    path = File.expand_path("../../target/ruby-bench.db", __dir__)
    FileUtils.rm_f([path, "#{path}-wal", "#{path}-shm"])
    ActiveRecord::Base.establish_connection(adapter: "sqlite3", database: path, timeout: 10_000)
    ActiveRecord::Base.connection.execute("PRAGMA journal_mode=WAL")
  else
    ActiveRecord::Base.establish_connection(ENV["OJS_BENCH_DATABASE_URL"] || ENV.fetch("OJS_TEST_DATABASE_URL"))
    ActiveRecord::Base.connection.drop_table(TABLE, if_exists: true)
  end
  OJS.configure do |config|
    config.url = "http://127.0.0.1:9" # the relay does not run: nothing is sent
    config.outbox_table = TABLE
    config.auto_start = false
  end
  OJS::Migration.create_outbox_table
  ActiveRecord::Base.connection
end

# Seconds for one round: `block` inside one transaction, the commit included.
def round
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  ActiveRecord::Base.transaction { yield }
  Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
end

def median(times)
  times.sort[times.length / 2]
end

results = {}
%i[sqlite postgres].each do |kind|
  connection = connect(kind)
  # The core's INSERT and one row's parameters (job_id, job_type, job_args, job_options,
  # job_meta, tenant_id): the raw INSERTs write the same row shape.
  *params, sql = OJS.client.stage_job(OJS.client.stager_of(connection), "email.welcome", "[42]", nil, nil, nil)
  job_type = params[1]
  rest = params.drop(3)
  bulk_jobs = Array.new(JOBS) { |i| { type: "email.welcome", args: [i] } }
  variants = {
    adapter: -> { JOBS.times { OJS.enqueue_after_commit("email.welcome", [42]) } },
    raw: lambda {
      JOBS.times { connection.exec_query(sql, "OJS", [SecureRandom.uuid, job_type, JSON.generate([42]), *rest]) }
    },
    raw_lookup: lambda {
      JOBS.times do
        ActiveRecord::Base.connection.exec_query(sql, "OJS", [SecureRandom.uuid, job_type, JSON.generate([42]), *rest])
      end
    },
    bulk: -> { OJS.enqueue_bulk(bulk_jobs) }
  }
  2.times { variants.each_value { |variant| round(&variant) } } # warm up every path
  times = variants.keys.to_h { |name| [name, []] }
  ROUNDS.times do |index|
    variants.to_a.rotate(index).each { |name, variant| times[name] << round(&variant) }
  end
  adapter, raw, raw_lookup, bulk = times.values_at(:adapter, :raw, :raw_lookup, :bulk).map { |list| median(list) }
  results[kind] = { adapter: adapter, raw: raw, raw_lookup: raw_lookup, bulk: bulk, rounds: times }
  puts format("%-8s enqueue_after_commit %7.1f us/job   raw INSERT %7.1f us/job   ratio %.2fx (target <= 1.15x)",
              kind, adapter / JOBS * 1e6, raw / JOBS * 1e6, adapter / raw)
  puts format("%-8s   (raw INSERT looking the connection up per row: %.1f us/job, ratio %.2fx)",
              kind, raw_lookup / JOBS * 1e6, adapter / raw_lookup)
  puts format("%-8s bulk of %d          %7.1f us/job   %d single calls %7.1f us/job   speed-up %.1fx (target >= 5x)",
              kind, JOBS, bulk / JOBS * 1e6, JOBS, adapter / JOBS * 1e6, adapter / bulk)
end
File.write(File.expand_path("../../target/ruby-bench.json", __dir__), JSON.pretty_generate(results))
