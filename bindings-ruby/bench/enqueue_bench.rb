# frozen_string_literal: true

# Issue 16's two staging ratios, on SQLite and PostgreSQL (OJS_BENCH_DATABASE_URL or
# OJS_TEST_DATABASE_URL), in one host transaction per round. The relay is not running: this
# measures the cost on the application's side (validation, ids, the INSERT, the commit hook).
#
# 1. single: OJS.enqueue_after_commit per job vs a raw parameterized INSERT of the same row
#    through the same ActiveRecord connection (the core's single-row INSERT text and row shape,
#    a fresh UUIDv7 text (`uuid_v7` below) and a fresh args JSON text per row, `exec_query`
#    with binds as a Rails developer would write it). Target <= 1.10x. The ids are
#    time-ordered like the core's: random `SecureRandom.uuid` (v4) ids land all over the
#    `job_id` UNIQUE index of a table that grows by every committed round, which makes the raw
#    side slower for a reason that is not the adapter's; the raw INSERT with v4 ids, the
#    baseline before issue 16, is printed for information. The raw INSERT of the ratio runs on a
#    connection held in a local variable. A second raw INSERT, printed for information, looks
#    the connection up per row (`ActiveRecord::Base.connection.exec_query`), as application
#    code does and as OJS.enqueue_after_commit must (about 2 us, more inside a loop of INSERTs).
# 2. bulk: OJS.enqueue_bulk of 1,000 jobs vs ONE raw multi-row INSERT of the same 1,000 rows
#    through the same connection, per job. Target <= 1.25x. The raw statement is the core's own
#    bulk statement for these 1,000 jobs, taken once (before timing) from what the adapter ran
#    (the "sql.active_record" notification of one enqueue_bulk, rolled back): the columns
#    job_id, job_type, job_args, job_options, job_meta, tenant_id; per row three bound
#    parameters (job_id, job_type, job_args) and the literals '{}', '{}', NULL for the empty
#    options/meta and the missing tenant, exactly what the core's bulk writes (on PostgreSQL
#    inside the same CAST(.. AS uuid/jsonb)). The raw side builds its 3,000 binds inside the
#    timed block from the same job hashes the adapter gets (a UUIDv7 text, the type,
#    JSON.generate of the args) and runs one `connection.exec_query(sql, "OJS", binds)`, the
#    call the adapter itself makes. Printed for information: the same statement with its
#    binds built before the timer (ActiveRecord's and the database's share alone).
#
# Rounds interleave the variants (adapter, raw, raw with lookup, raw with v4 ids, raw
# multi-row, bulk, raw multi-row prebuilt; the order rotates each round) so that a noisy
# neighbour or the table's growth weighs on all of them alike. Each result is the median of
# OJS_BENCH_ROUNDS rounds (default 15; the quartiles of the per-round ratios are printed too),
# each round one transaction with its commit included (the adapter's wake-up runs at the
# commit), after an untimed GC.start (garbage left by the variant before is not collected on
# the next one's clock; a variant's own garbage still is). The bulk pair is also printed
# without the commit (the time up to the end of the block).
require "ojs-adapter-rails"
require "securerandom"
require "fileutils"

ROUNDS = Integer(ENV.fetch("OJS_BENCH_ROUNDS", "15"))
SINGLE_TARGET = 1.10
BULK_TARGET = 1.25
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

# Seconds for one round: `variant` inside one transaction, [the commit included, up to the end
# of the variant].
# A variant is a lambda, or [prepare, run]: `run.call(prepare.call)`, the prepare untimed
# (inside the transaction). A full GC runs before each round, untimed.
def round(variant)
  inside = nil
  started = nil
  GC.start # untimed: no variant pays for the garbage of the one before it
  ActiveRecord::Base.transaction do
    if variant.is_a?(Array)
      argument = variant[0].call
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      variant[1].call(argument)
    else
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      variant.call
    end
    inside = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
  end
  [Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, inside]
end

# A UUIDv7 text (RFC 9562: 48-bit Unix milliseconds, version 7, 74 random bits), time-ordered
# like the core's ids, from the same random source as SecureRandom.uuid (Ruby 3.3's
# SecureRandom.uuid_v7 does the same; this Ruby is older).
def uuid_v7
  ms = Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond)
  rand_a, rand_b, rand_c, rand_d = SecureRandom.random_bytes(10).unpack("nnnN")
  format("%08x-%04x-%04x-%04x-%04x%08x", ms >> 16, ms & 0xffff, 0x7000 | (rand_a & 0x0fff),
         0x8000 | (rand_b & 0x3fff), rand_c, rand_d)
end

def median(times)
  times.sort[times.length / 2]
end

# The quartiles of the per-round ratios of two variants (run next to each other each round).
def round_quartiles(numerators, denominators)
  ratios = numerators.zip(denominators).map { |a, b| a / b }.sort
  [ratios[ratios.length / 4], ratios[ratios.length * 3 / 4]]
end

def met(ratio, target)
  ratio <= target ? "met" : "NOT met"
end

# The SQL text of the one statement the adapter runs for `jobs` (rolled back).
def bulk_statement(jobs)
  statements = []
  callback = ->(*, payload) { statements << payload[:sql] if payload[:name] == "OJS" }
  ActiveSupport::Notifications.subscribed(callback, "sql.active_record") do
    ActiveRecord::Base.transaction do
      OJS.enqueue_bulk(jobs)
      raise ActiveRecord::Rollback
    end
  end
  raise "the adapter ran #{statements.length} statements for one bulk" unless statements.length == 1

  statements.first
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
  bulk_sql = bulk_statement(bulk_jobs)
  raise "row shape changed: #{bulk_sql[0, 200]}" unless bulk_sql.scan(/'\{\}', '\{\}', NULL\)/).length == JOBS

  raw_multi_binds = lambda do
    binds = []
    bulk_jobs.each { |job| binds << uuid_v7 << job[:type] << JSON.generate(job[:args]) }
    binds
  end
  variants = {
    adapter: -> { JOBS.times { OJS.enqueue_after_commit("email.welcome", [42]) } },
    raw: lambda {
      JOBS.times { connection.exec_query(sql, "OJS", [uuid_v7, job_type, JSON.generate([42]), *rest]) }
    },
    raw_lookup: lambda {
      JOBS.times do
        ActiveRecord::Base.connection.exec_query(sql, "OJS", [uuid_v7, job_type, JSON.generate([42]), *rest])
      end
    },
    # For information: the raw INSERT of the baseline before issue 16 (v4 ids).
    raw_v4: lambda {
      JOBS.times { connection.exec_query(sql, "OJS", [SecureRandom.uuid, job_type, JSON.generate([42]), *rest]) }
    },
    raw_multi: -> { connection.exec_query(bulk_sql, "OJS", raw_multi_binds.call) },
    bulk: -> { OJS.enqueue_bulk(bulk_jobs) },
    # For information: the raw statement alone, its binds (fresh ids) built before the timer.
    raw_multi_prebuilt: [raw_multi_binds, ->(binds) { connection.exec_query(bulk_sql, "OJS", binds) }]
  }
  2.times { variants.each_value { |variant| round(variant) } } # warm up every path
  times = variants.keys.to_h { |name| [name, []] }
  inside = variants.keys.to_h { |name| [name, []] }
  ROUNDS.times do |index|
    variants.to_a.rotate(index).each do |name, variant|
      total, before_commit = round(variant)
      times[name] << total
      inside[name] << before_commit
    end
  end

  # Both bulk paths write the same values (on an emptied table, rolled back).
  groups = nil
  ActiveRecord::Base.transaction do
    connection.execute("DELETE FROM #{TABLE}")
    variants[:raw_multi].call
    variants[:bulk].call
    groups = connection.select_rows(
      "SELECT job_type, job_args, job_options, job_meta, tenant_id, COUNT(*) FROM #{TABLE} GROUP BY 1, 2, 3, 4, 5"
    )
    raise ActiveRecord::Rollback
  end
  unless groups.length == JOBS && groups.all? { |row| row.last.to_i == 2 }
    raise "raw multi-row and bulk rows differ: #{groups.first(3).inspect}"
  end

  adapter, raw, raw_lookup, raw_v4, raw_multi, bulk, prebuilt =
    times.values_at(:adapter, :raw, :raw_lookup, :raw_v4, :raw_multi, :bulk, :raw_multi_prebuilt).map { |list| median(list) }
  raw_multi_inside, bulk_inside = inside.values_at(:raw_multi, :bulk).map { |list| median(list) }
  results[kind] = {
    adapter: adapter, raw: raw, raw_lookup: raw_lookup, raw_v4: raw_v4, raw_multi: raw_multi, bulk: bulk,
    single_ratio: adapter / raw, bulk_ratio: bulk / raw_multi,
    raw_multi_before_commit: raw_multi_inside, bulk_before_commit: bulk_inside,
    bulk_ratio_before_commit: bulk_inside / raw_multi_inside,
    raw_multi_prebuilt: prebuilt, bulk_ratio_vs_prebuilt: bulk / prebuilt,
    rounds: times, rounds_before_commit: inside
  }
  puts format("%-8s single: enqueue_after_commit %7.1f us/job   raw INSERT %7.1f us/job   ratio %.2fx (target <= %.2fx: %s)   per round %.2f-%.2fx",
              kind, adapter / JOBS * 1e6, raw / JOBS * 1e6, adapter / raw, SINGLE_TARGET, met(adapter / raw, SINGLE_TARGET),
              *round_quartiles(times[:adapter], times[:raw]))
  puts format("%-8s   (raw INSERT looking the connection up per row: %.1f us/job, ratio %.2fx)",
              kind, raw_lookup / JOBS * 1e6, adapter / raw_lookup)
  puts format("%-8s   (raw INSERT with v4 ids, the baseline before issue 16: %.1f us/job, ratio %.2fx)",
              kind, raw_v4 / JOBS * 1e6, adapter / raw_v4)
  puts format("%-8s bulk:   enqueue_bulk of %d %7.2f us/job   raw multi-row INSERT of %d %7.2f us/job   ratio %.2fx (target <= %.2fx: %s)   per round %.2f-%.2fx",
              kind, JOBS, bulk / JOBS * 1e6, JOBS, raw_multi / JOBS * 1e6, bulk / raw_multi, BULK_TARGET,
              met(bulk / raw_multi, BULK_TARGET), *round_quartiles(times[:bulk], times[:raw_multi]))
  puts format("%-8s   (without the commit: enqueue_bulk %.2f us/job, raw multi-row %.2f us/job, ratio %.2fx)",
              kind, bulk_inside / JOBS * 1e6, raw_multi_inside / JOBS * 1e6, bulk_inside / raw_multi_inside)
  puts format("%-8s   (raw multi-row INSERT with its binds built before the timer: %.2f us/job, enqueue_bulk %.2fx that)",
              kind, prebuilt / JOBS * 1e6, bulk / prebuilt)
end
# 3. The staging call alone (OJS::Client#stage_job: the native call across the FFI line and its
#    answer decoded, no INSERT), 20,000 calls per round in a tight loop: the FFI line's own share
#    of a job (issue 28, item 7: within 10% of the C path before it).
stager = OJS.client.stager_of(ActiveRecord::Base.connection)
OJS.client.stage_job(stager, "email.welcome", "[42]", nil, nil, nil)
calls = 20_000
per_call = Array.new(ROUNDS) do
  GC.start
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  calls.times { OJS.client.stage_job(stager, "email.welcome", "[42]", nil, nil, nil) }
  (Process.clock_gettime(Process::CLOCK_MONOTONIC) - started) / calls
end
results[:staging_call] = median(per_call)
puts format("staging call alone (stage_job, no INSERT): %.2f us/call (median of %d rounds of %d)",
            median(per_call) * 1e6, ROUNDS, calls)
File.write(File.expand_path("../../target/ruby-bench.json", __dir__), JSON.pretty_generate(results))
