# frozen_string_literal: true

# Hot path under sustained load (issue 16): `hot_dropped` <= 1% of committed jobs while a Rails
# app (ActiveRecord) commits about 1,500 transactions/s on a SQLite file, through the installed
# gem with the release build of its native library (bindings-ruby/build.sh release).
#
# What runs: ActiveRecord on a SQLite file (`timeout: 5000` as Rails' database.yml has it, then
# `PRAGMA journal_mode=WAL` as the tests do and docs/rails.md advises), the outbox table from
# OJS::Migration, the real `ojs-devserver` binary (release) as the backend, and the gem's
# in-process relay with the default configuration (only `config.url` set), started before the
# load (OJS.start_relay, as a serving process starts it at boot).
#
# The load: one thread offers OJS_SOAK_TPS transactions/s (1500) on a fixed schedule
# (transaction i is due at i / rate; late ones start at once, so the schedule catches up) for
# OJS_SOAK_SECONDS (60). Each is `ActiveRecord::Base.transaction` around either
# `OJS.enqueue_after_commit` of one job or, one in OJS_SOAK_BULK_EVERY (50), `OJS.enqueue_bulk`
# of OJS_SOAK_BULK_SIZE (100) jobs. Every OJS_SOAK_CHECKPOINT_S (5) s it counts the rows still
# waiting through ActiveRecord's connection (`status IN ('pending', 'failed')`) and reads
# OJS.metrics.
#
# After the load it waits (polling `/_dev/stats`; deadline OJS_SOAK_DRAIN_TIMEOUT_S, 600) until
# the devserver holds every committed job, reads `hot_dropped` from the relay's Prometheus text
# (`ojs_relay_wakeups_dropped_total`, OJS.metrics_text), compares the devserver's ids with the
# committed ids, and prints the result (met / not met against <= 1%) and one line of JSON
# prefixed `SOAK_JSON `. Exit status 0 when every committed job was delivered, 1 otherwise.
#
# Run through scripts/soak.sh (GEM_HOME of the release build).

require "json"
require "net/http"
require "uri"
require "etc"
require "tmpdir"
require "ojs-adapter-rails"

RATE = Float(ENV.fetch("OJS_SOAK_TPS", "1500"))
SECONDS = Float(ENV.fetch("OJS_SOAK_SECONDS", "60"))
BULK_EVERY = Integer(ENV.fetch("OJS_SOAK_BULK_EVERY", "50"))
BULK_SIZE = Integer(ENV.fetch("OJS_SOAK_BULK_SIZE", "100"))
CHECKPOINT_S = Float(ENV.fetch("OJS_SOAK_CHECKPOINT_S", "5"))
DRAIN_TIMEOUT_S = Float(ENV.fetch("OJS_SOAK_DRAIN_TIMEOUT_S", "600"))
VERIFY_IDS = ENV.fetch("OJS_SOAK_VERIFY_IDS", "1") != "0"
# For diagnosis only (the soak's result is with neither): adapter settings (JSON with "outbox"
# and "relay" sections, e.g. '{"relay": {"hot_queue_capacity": 100000}}') and a PRAGMA synchronous
# for ActiveRecord's connection (e.g. NORMAL; SQLite's default is FULL: an fsync in every COMMIT).
EXTRA_CONFIG = JSON.parse(ENV["OJS_SOAK_CONFIG"].to_s.empty? ? "{}" : ENV["OJS_SOAK_CONFIG"])
APP_SYNCHRONOUS = ENV["OJS_SOAK_APP_SYNCHRONOUS"]
TARGET = 0.01
REPO = File.expand_path("../..", __dir__)
DEVSERVER = ENV["OJS_DEVSERVER_BIN"] || File.join(REPO, "target", "release", "ojs-devserver")
TABLE = "ojs_outbox" # the default table

def say(*parts)
  puts(["soak[rails]:", *parts].join(" "))
  $stdout.flush
end

def now
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

# --- the devserver ------------------------------------------------------------------------------

class Devserver
  attr_reader :url, :pid

  def initialize(binary)
    abort "#{binary} is missing: cargo build --release -p ojs-devserver" unless File.executable?(binary)
    @io = IO.popen([binary, "--port", "0"], err: File::NULL)
    @pid = @io.pid
    line = @io.gets or abort "ojs-devserver did not start"
    @url = line[%r{listening on (http://\S+)}, 1] or abort "unexpected devserver line: #{line}"
  end

  def get(path)
    uri = URI("#{@url}#{path}")
    response = Net::HTTP.start(uri.host, uri.port, read_timeout: 60) { |http| http.get(uri.path) }
    JSON.parse(response.body)
  end

  def stop
    return if @io.nil?

    Process.kill("TERM", @pid)
    @io.close
    @io = nil
  rescue Errno::ESRCH
    nil
  end
end

# --- CPU and load of the machine ----------------------------------------------------------------

TICK = Etc.sysconf(Etc::SC_CLK_TCK)

def machine_busy_s
  fields = File.read("/proc/stat").lines.first.split[1..].map(&:to_i)
  user, nice, system, _idle, _iowait, irq, softirq, steal = fields
  (user + nice + system + irq + softirq + steal).to_f / TICK
end

def process_cpu_s(pid)
  fields = File.read("/proc/#{pid}/stat").rpartition(")").last.split
  (fields[11].to_i + fields[12].to_i).to_f / TICK
rescue Errno::ENOENT, Errno::ESRCH
  0.0
end

def threads_cpu_s(pid)
  Dir.children("/proc/#{pid}/task").each_with_object({}) do |tid, out|
    text = File.read("/proc/#{pid}/task/#{tid}/stat")
    name = text[(text.index("(") + 1)...text.rindex(")")]
    fields = text.rpartition(")").last.split
    out[[tid, name]] = (fields[11].to_i + fields[12].to_i).to_f / TICK
  rescue Errno::ENOENT
    next
  end
end

def thread_delta(before, after)
  by_name = Hash.new(0.0)
  after.each { |key, value| by_name[key[1]] += value - before.fetch(key, 0.0) }
  by_name.select { |_, v| v >= 0.05 }.sort_by { |_, v| -v }.to_h { |k, v| [k, v.round(2)] }
end

def loadavg
  File.read("/proc/loadavg").split.first(3).map(&:to_f)
end

# --- Prometheus text ------------------------------------------------------------------------------

def prometheus_samples(text)
  (text || "").each_line.with_object({}) do |line, samples|
    line = line.chomp
    next if line.empty? || line.start_with?("#")

    name, _, value = line.rpartition(" ")
    samples[name] = Float(value)
  end
end

def sample(samples, name)
  samples.find { |key, _| key == name || key.start_with?("#{name}{") }&.last
end

def histogram_quantile(samples, name, q)
  buckets = samples.filter_map do |key, value|
    next unless key.start_with?("#{name}_bucket{")

    le = key.split(',le="', 2)[1].split('"', 2)[0]
    [le == "+Inf" ? Float::INFINITY : Float(le), value]
  end.sort
  return nil if buckets.empty? || buckets.last[1].zero?

  total = buckets.last[1]
  bound = buckets.find { |_, count| count >= q * total }&.first
  bound == Float::INFINITY ? "+Inf" : bound
end

def relay_summary(text)
  s = prometheus_samples(text)
  out = { "hot_dropped" => (sample(s, "ojs_relay_wakeups_dropped_total") || 0).to_i,
          "sent" => (sample(s, "ojs_relay_jobs_sent_total") || 0).to_i }
  %w[claim send settle].each do |phase|
    count = sample(s, "ojs_relay_#{phase}_duration_seconds_count") || 0
    total = sample(s, "ojs_relay_#{phase}_duration_seconds_sum") || 0
    out["#{phase}_count"] = count.to_i
    out["#{phase}_mean_ms"] = count.positive? ? (1000 * total / count).round(3) : nil
  end
  out["delivery_lag_p50_le_s"] = histogram_quantile(s, "ojs_relay_delivery_lag_seconds", 0.5)
  out["delivery_lag_p99_le_s"] = histogram_quantile(s, "ojs_relay_delivery_lag_seconds", 0.99)
  out
end

def percentile(sorted, q)
  sorted.empty? ? nil : sorted[[sorted.length - 1, (q * sorted.length).floor].min]
end

# --- the run -----------------------------------------------------------------------------------

devserver = Devserver.new(DEVSERVER)
at_exit { devserver.stop } # also when the run fails
work = Dir.mktmpdir("ojs-rb-soak-")
db_file = File.join(work, "soak.db")
ActiveRecord::Base.establish_connection(adapter: "sqlite3", database: db_file, timeout: 5000)
connection = ActiveRecord::Base.connection
connection.execute("PRAGMA journal_mode=WAL")
connection.execute("PRAGMA synchronous=#{APP_SYNCHRONOUS}") if APP_SYNCHRONOUS
app_synchronous = %w[OFF NORMAL FULL EXTRA][connection.select_value("PRAGMA synchronous").to_i]
OJS.configure do |config|
  config.url = devserver.url # every other setting: the core's default (unless OJS_SOAK_CONFIG)
  config.outbox_options = EXTRA_CONFIG["outbox"] if EXTRA_CONFIG["outbox"]
  config.relay_options = EXTRA_CONFIG["relay"] if EXTRA_CONFIG["relay"]
end
OJS::Migration.create_outbox_table
OJS.start_relay
raise "no in-process relay runs" if OJS.metrics.nil?

pending_rows = lambda do
  ActiveRecord::Base.connection.select_value(
    "SELECT COUNT(*) FROM #{TABLE} WHERE status IN ('pending', 'failed')"
  ).to_i
end

n_tx = (RATE * SECONDS).to_i
bulks = n_tx / BULK_EVERY
singles = n_tx - bulks
say "ActiveRecord #{ActiveRecord::VERSION::STRING}, sqlite3 gem #{SQLite3::VERSION} (SQLite #{SQLite3::SQLITE_VERSION}), " \
    "Ruby #{RUBY_VERSION}, ojs-adapter-rails #{OJS::VERSION}, SQLite file #{db_file} (WAL), devserver #{devserver.url} (#{DEVSERVER})"
say "offering #{RATE} tx/s for #{SECONDS} s: #{n_tx} transactions = #{singles} x 1 job + #{bulks} x #{BULK_SIZE} jobs " \
    "(one in #{BULK_EVERY}) = #{singles + bulks * BULK_SIZE} jobs, #{((singles + bulks * BULK_SIZE) / SECONDS).round} jobs/s; " \
    "relay config: #{EXTRA_CONFIG.empty? ? 'the default' : JSON.generate(EXTRA_CONFIG)}; " \
    "ActiveRecord's connection: synchronous=#{app_synchronous}"

committed_ids = []
commit_at = [] # wall clock (s) per transaction
tx_of_job = []
schedule_lag = []
tx_seconds = []
checkpoints = []
period = 1.0 / RATE

load_before = loadavg
busy0 = machine_busy_s
self0 = process_cpu_s(Process.pid)
dev0 = process_cpu_s(devserver.pid)
threads0 = threads_cpu_s(Process.pid)
started = now
next_checkpoint = started + CHECKPOINT_S
finish = started + SECONDS
i = 0
checkpoint = lambda do |t|
  metrics = OJS.metrics || {}
  point = { "t_s" => (t - started).round(1), "tx" => i, "jobs" => committed_ids.length,
            "pending_rows" => pending_rows.call, "hot_dropped" => metrics["hot_dropped"], "sent" => metrics["sent"] }
  checkpoints << point
  point
end
while i < n_tx
  due = started + i * period
  t = now
  if t < due
    sleep(due - t)
    t = now
  end
  break if t >= finish # the duration is over: what the app could not start in it is not offered later

  schedule_lag << t - due
  ids = if ((i + 1) % BULK_EVERY).zero?
          n = i
          jobs = Array.new(BULK_SIZE) { |k| { type: "soak.bulk", args: [n, k] } }
          ActiveRecord::Base.transaction { OJS.enqueue_bulk(jobs) }
        else
          n = i
          [ActiveRecord::Base.transaction { OJS.enqueue_after_commit("soak.single", [n]) }]
        end
  done = now
  tx_seconds << done - t
  commit_at << Time.now.to_f
  committed_ids.concat(ids)
  ids.length.times { tx_of_job << i }
  i += 1
  next unless done >= next_checkpoint

  say "checkpoint", JSON.generate(checkpoint.call(done))
  next_checkpoint += CHECKPOINT_S
end
load_seconds = now - started
busy1 = machine_busy_s
self1 = process_cpu_s(Process.pid)
dev1 = process_cpu_s(devserver.pid)
threads1 = threads_cpu_s(Process.pid)
load_after = loadavg
say "end of load", JSON.generate(checkpoint.call(now))

# Wait for the devserver to hold every committed job (a condition, polled).
jobs_committed = committed_ids.length
drain_started = now
stats = nil
loop do
  stats = devserver.get("/_dev/stats")
  break if stats["jobs"] >= jobs_committed || now - drain_started > DRAIN_TIMEOUT_S

  sleep 0.1
end
drain_seconds = now - drain_started
say "devserver holds #{stats['jobs']} of #{jobs_committed} jobs, #{drain_seconds.round(1)} s after the load"

relay = relay_summary(OJS.metrics_text)
hot_dropped_counter = OJS.metrics["hot_dropped"]
rows_by_status = ActiveRecord::Base.connection.select_rows("SELECT status, COUNT(*) FROM #{TABLE} GROUP BY status")
                                   .to_h { |status, count| [status, count.to_i] }
missing = nil
latency = {}
if VERIFY_IDS
  received = devserver.get("/_dev/received")
  at = received["jobs"].to_h { |job| [job["id"], job["received_at_us"]] }
  received = nil
  missing = 0
  lags = []
  committed_ids.each_with_index do |id, k|
    us = at[id]
    if us.nil?
      missing += 1
    else
      lags << us / 1e6 - commit_at[tx_of_job[k]]
    end
  end
  lags.sort!
  latency = { "p50_ms" => (1000 * percentile(lags, 0.5)).round(1), "p90_ms" => (1000 * percentile(lags, 0.9)).round(1),
              "p99_ms" => (1000 * percentile(lags, 0.99)).round(1), "max_ms" => (1000 * lags.last).round(1),
              "over_1s_share" => (lags.count { |v| v > 1.0 }.to_f / [1, lags.length].max).round(4) }
end
OJS.stop_relay
devserver_cpu = process_cpu_s(devserver.pid) - dev0
devserver.stop

delivered = stats["jobs"]
hot_dropped = relay["hot_dropped"]
share = jobs_committed.positive? ? hot_dropped.to_f / jobs_committed : 0.0
no_loss = delivered == jobs_committed && (missing.nil? || missing.zero?)
met = share <= TARGET
lag_sorted = schedule_lag.sort
tx_sorted = tx_seconds.sort
self_cpu = self1 - self0
result = {
  "binding" => "rails", "framework" => "ActiveRecord #{ActiveRecord::VERSION::STRING}",
  "offered_tps" => RATE, "seconds" => SECONDS, "bulk_every" => BULK_EVERY, "bulk_size" => BULK_SIZE,
  "tx_committed" => i, "single_tx" => i - i / BULK_EVERY, "bulk_tx" => i / BULK_EVERY,
  "jobs_committed" => jobs_committed, "load_seconds" => load_seconds.round(2),
  "achieved_tps" => (i / load_seconds).round(1), "achieved_jobs_per_s" => (jobs_committed / load_seconds).round(1),
  "hot_dropped" => hot_dropped, "hot_dropped_share" => share.round(5), "hot_dropped_metrics_call" => hot_dropped_counter,
  "max_pending_rows" => checkpoints.map { |p| p["pending_rows"] }.max,
  "checkpoints" => checkpoints,
  "delivered" => delivered, "missing_ids" => missing, "delivered_equals_committed" => no_loss,
  "deliveries" => stats["deliveries"], "drain_seconds_after_load" => drain_seconds.round(2),
  "rows_by_status" => rows_by_status,
  "commit_to_received" => latency,
  "schedule_lag_ms" => { "p50" => (1000 * percentile(lag_sorted, 0.5)).round(2),
                         "p99" => (1000 * percentile(lag_sorted, 0.99)).round(2),
                         "max" => (1000 * lag_sorted.last).round(1) },
  "tx_ms" => { "p50" => (1000 * percentile(tx_sorted, 0.5)).round(3), "p99" => (1000 * percentile(tx_sorted, 0.99)).round(3),
               "max" => (1000 * tx_sorted.last).round(1) },
  "relay" => relay,
  "cpu_s" => { "app_process" => self_cpu.round(2), "devserver" => (dev1 - dev0).round(2),
               "devserver_incl_drain" => devserver_cpu.round(2),
               "other" => (busy1 - busy0 - self_cpu - (dev1 - dev0)).round(2),
               "machine_capacity" => (load_seconds * Etc.nprocessors).round(1),
               "app_threads" => thread_delta(threads0, threads1) },
  "loadavg_before" => load_before, "loadavg_after" => load_after,
  "target" => TARGET, "met" => met,
  "extra_config" => EXTRA_CONFIG, "app_synchronous" => app_synchronous
}
puts
puts "Rails soak: #{i} transactions, #{jobs_committed} jobs committed in #{load_seconds.round(1)} s " \
     "(#{result['achieved_tps']} tx/s of #{RATE} offered, #{result['achieved_jobs_per_s']} jobs/s)"
puts "  hot_dropped            #{hot_dropped} = #{format('%.2f', 100 * share)}% of committed jobs " \
     "(target <= #{(100 * TARGET).round}%): #{met ? 'met' : 'NOT met'}"
puts "  max pending rows       #{result['max_pending_rows']} (checkpoints every #{CHECKPOINT_S} s: " \
     "#{checkpoints.map { |p| p['pending_rows'] }.join(', ')})"
puts "  delivered              #{delivered} of #{jobs_committed}" \
     "#{missing.nil? ? '' : ", #{missing} committed ids missing at the devserver"}: " \
     "#{no_loss ? 'no job lost' : 'JOBS MISSING'} (#{stats['deliveries']} deliveries, drained #{drain_seconds.round(1)} s after the load)"
if VERIFY_IDS
  puts "  commit -> received     p50 #{latency['p50_ms']} ms, p90 #{latency['p90_ms']}, p99 #{latency['p99_ms']}, " \
       "max #{latency['max_ms']}; #{(100 * latency['over_1s_share']).round(1)}% over 1 s"
end
puts "  relay rounds           claims #{relay['claim_count']} (mean #{relay['claim_mean_ms']} ms), sends #{relay['send_count']} " \
     "(mean #{relay['send_mean_ms']} ms), settles #{relay['settle_count']} (mean #{relay['settle_mean_ms']} ms); #{relay['sent']} sent"
puts "  transaction            p50 #{result['tx_ms']['p50']} ms, p99 #{result['tx_ms']['p99']}, max #{result['tx_ms']['max']}; " \
     "schedule lag p99 #{result['schedule_lag_ms']['p99']} ms, max #{result['schedule_lag_ms']['max']}"
puts "  CPU s during the load  app+relay #{result['cpu_s']['app_process']}, devserver #{result['cpu_s']['devserver']}, " \
     "other #{result['cpu_s']['other']} (of #{result['cpu_s']['machine_capacity']}); threads #{result['cpu_s']['app_threads']}"
puts "  load average           #{load_before} before, #{load_after} after"
puts "SOAK_JSON #{JSON.generate(result)}"
$stdout.flush
exit(no_loss ? 0 : 1)
