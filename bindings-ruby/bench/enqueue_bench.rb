# frozen_string_literal: true

# In one host transaction, per job: OJS.enqueue_after_commit vs a raw parameterized INSERT of
# the same row through the same ActiveRecord connection (same SQL, same parameters, a fresh
# UUID), and OJS.enqueue_bulk of 1,000 jobs vs 1,000 single calls. SQLite and PostgreSQL
# (OJS_BENCH_DATABASE_URL or OJS_TEST_DATABASE_URL). The relay is not running: this measures
# the cost on the application's side (validation, ids, the INSERT, the commit hook).
require "ojs-adapter-rails"
require "securerandom"
require "fileutils"

ROUNDS = Integer(ENV.fetch("OJS_BENCH_ROUNDS", "5"))
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
    config.outbox_table = TABLE
    config.start_relay_on_first_use = false
  end
  OJS::Migration.create_outbox_table
  ActiveRecord::Base.connection
end

# Seconds for `block` run JOBS times inside one transaction (the commit included), median of ROUNDS.
def measure
  times = Array.new(ROUNDS) do
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    ActiveRecord::Base.transaction { yield }
    Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
  end
  times.sort[ROUNDS / 2]
end

results = {}
%i[sqlite postgres].each do |kind|
  connection = connect(kind)
  dialect = kind == :sqlite ? %w[sqlite question] : %w[postgresql dollar]
  staged = JSON.parse(OJS.adapter.native.stage(*dialect, '[{"type":"email.welcome","args":[42]}]', nil))
  sql = staged["statements"][0]["sql"]
  params = staged["statements"][0]["params"]
  2.times do # warm up both paths
    measure { 50.times { OJS.enqueue_after_commit("email.welcome", [42]) } }
    measure { 50.times { connection.exec_query(sql, "OJS", [SecureRandom.uuid, *params.drop(1)]) } }
  end
  adapter = measure { JOBS.times { OJS.enqueue_after_commit("email.welcome", [42]) } }
  raw = measure { JOBS.times { connection.exec_query(sql, "OJS", [SecureRandom.uuid, *params.drop(1)]) } }
  bulk_jobs = Array.new(JOBS) { |i| { type: "email.welcome", args: [i] } }
  bulk = measure { OJS.enqueue_bulk(bulk_jobs) }
  results[kind] = { adapter: adapter, raw: raw, bulk: bulk }
  puts format("%-8s enqueue_after_commit %7.1f us/job   raw INSERT %7.1f us/job   ratio %.2fx (target <= 1.15x)",
              kind, adapter / JOBS * 1e6, raw / JOBS * 1e6, adapter / raw)
  puts format("%-8s bulk of %d          %7.1f us/job   %d single calls %7.1f us/job   speed-up %.1fx (target >= 5x)",
              kind, JOBS, bulk / JOBS * 1e6, JOBS, adapter / JOBS * 1e6, adapter / bulk)
end
File.write(File.expand_path("../../target/ruby-bench.json", __dir__), JSON.pretty_generate(results))
