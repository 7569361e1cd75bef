//! What every benchmark shares: the devserver child process and its control API, staging,
//! table setup, /proc readings, percentiles and the JSON-lines output.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ojs_outbox::relay_metrics::HistogramSnapshot;
use ojs_outbox::{Config, Histograms, NewJob, Outbox};
use serde_json::{Value, json};
use sqlx::AssertSqlSafe;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type BoxResult<T> = Result<T, BoxError>;

pub fn err(message: impl Into<String>) -> BoxError {
    message.into().into()
}

/// Rows per staging transaction (also the core's `MAX_ROWS_PER_INSERT`).
pub const STAGE_CHUNK: usize = 5000;

// ---------------------------------------------------------------------------------------------
// Binaries beside this one

/// `name` in the directory of the running binary (target/release), unless `explicit` is given.
pub fn sibling_binary(explicit: Option<&Path>, name: &str) -> BoxResult<PathBuf> {
    if let Some(path) = explicit {
        return Ok(path.to_owned());
    }
    let exe = std::env::current_exe()?;
    let path = exe
        .parent()
        .ok_or_else(|| err("current_exe has no parent"))?
        .join(name);
    if !path.exists() {
        return Err(err(format!(
            "{} not found: build it (cargo build --release -p {name}) or pass its path",
            path.display()
        )));
    }
    Ok(path)
}

// ---------------------------------------------------------------------------------------------
// The devserver, as a child process (its CPU is not counted in the relay's process)

pub struct DevServer {
    child: Child,
    _stdout: BufReader<ChildStdout>,
    pub url: String,
    http: reqwest::Client,
}

impl DevServer {
    pub fn spawn(bin: &Path) -> BoxResult<DevServer> {
        let mut child = Command::new(bin)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| err(format!("cannot start {}: {e}", bin.display())))?;
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let url = line
            .trim()
            .strip_prefix("ojs-devserver listening on ")
            .ok_or_else(|| {
                err(format!(
                    "unexpected first line from ojs-devserver: {line:?}"
                ))
            })?
            .to_owned();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        Ok(DevServer {
            child,
            _stdout: stdout,
            url,
            http,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub async fn reset(&self) -> BoxResult<()> {
        let response = self
            .http
            .post(format!("{}/_dev/reset", self.url))
            .send()
            .await?;
        if !response.status().is_success() {
            return Err(err(format!(
                "POST /_dev/reset answered {}",
                response.status()
            )));
        }
        Ok(())
    }

    /// `GET /_dev/stats`: `{"jobs", "deliveries", "requests": {...}}`, cheap at any size.
    pub async fn stats(&self) -> BoxResult<Value> {
        let text = self
            .http
            .get(format!("{}/_dev/stats", self.url))
            .send()
            .await?
            .text()
            .await?;
        Ok(serde_json::from_str(&text)?)
    }

    /// `POST /_dev/faults` with a fault object (`{"status": 503, "count": 1}`, ...).
    pub async fn push_fault(&self, fault: Value) -> BoxResult<()> {
        let response = self
            .http
            .post(format!("{}/_dev/faults", self.url))
            .header("content-type", "application/json")
            .body(fault.to_string())
            .send()
            .await?;
        if !response.status().is_success() {
            return Err(err(format!(
                "POST /_dev/faults answered {}: {}",
                response.status(),
                response.text().await.unwrap_or_default()
            )));
        }
        Ok(())
    }

    /// `POST /ojs/v1/jobs/batch` of these jobs, which must be accepted (201).
    pub async fn post_batch(&self, jobs: &[Value]) -> BoxResult<()> {
        let response = self
            .http
            .post(format!("{}/ojs/v1/jobs/batch", self.url))
            .header("content-type", "application/openjobspec+json")
            .body(json!({ "jobs": jobs }).to_string())
            .send()
            .await?;
        if response.status().as_u16() != 201 {
            return Err(err(format!(
                "POST /ojs/v1/jobs/batch answered {}: {}",
                response.status(),
                response.text().await.unwrap_or_default()
            )));
        }
        Ok(())
    }

    /// `GET /_dev/received`, whole (every stored job and the deliveries per id).
    pub async fn received(&self) -> BoxResult<Value> {
        let text = self
            .http
            .get(format!("{}/_dev/received", self.url))
            .send()
            .await?
            .text()
            .await?;
        Ok(serde_json::from_str(&text)?)
    }

    pub async fn jobs_received(&self) -> BoxResult<u64> {
        let stats = self.stats().await?;
        stats["jobs"]
            .as_u64()
            .ok_or_else(|| err(format!("no jobs count in /_dev/stats: {stats}")))
    }

    /// `GET /_dev/received`: every job's id and `received_at_us`.
    pub async fn received_times(&self) -> BoxResult<std::collections::HashMap<String, i64>> {
        let text = self
            .http
            .get(format!("{}/_dev/received", self.url))
            .send()
            .await?
            .text()
            .await?;
        let value: Value = serde_json::from_str(&text)?;
        let jobs = value["jobs"]
            .as_array()
            .ok_or_else(|| err("no jobs array in /_dev/received"))?;
        let mut times = std::collections::HashMap::with_capacity(jobs.len());
        for job in jobs {
            let id = job["id"].as_str().ok_or_else(|| err("job without id"))?;
            let at = job["received_at_us"]
                .as_i64()
                .ok_or_else(|| err("job without received_at_us"))?;
            times.insert(id.to_owned(), at);
        }
        Ok(times)
    }

    /// Polls `/_dev/stats` every `every` until `jobs >= want`; returns when it saw it, or fails
    /// after `timeout`.
    pub async fn wait_for_jobs(
        &self,
        want: u64,
        every: Duration,
        timeout: Duration,
    ) -> BoxResult<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.jobs_received().await?;
            if got >= want {
                return Ok(Instant::now());
            }
            if Instant::now() >= deadline {
                return Err(err(format!(
                    "timed out: the devserver has {got} of {want} jobs after {timeout:?}"
                )));
            }
            tokio::time::sleep(every).await;
        }
    }
}

impl Drop for DevServer {
    fn drop(&mut self) {
        terminate(self.child.id());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGTERM to one process we started, by its pid.
pub fn terminate(pid: u32) {
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}

// ---------------------------------------------------------------------------------------------
// Database setup and staging

pub fn config_for(database_url: &str, ojs_url: &str, table: &str) -> Config {
    let mut config = Config {
        database_url: Some(database_url.to_owned()),
        ojs_url: ojs_url.to_owned(),
        ..Config::default()
    };
    config.outbox.table_name = table.to_owned();
    config
}

pub fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

pub fn is_mysql(url: &str) -> bool {
    url.starts_with("mysql://") || url.starts_with("mariadb://")
}

/// Drops `table` (PostgreSQL) so the benchmark starts from an empty, never-updated table.
pub async fn drop_table(admin: &sqlx::PgPool, table: &str) -> BoxResult<()> {
    // With the relay's event log and registry: a run must not append to an earlier run's log.
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {table}, {table}_events, {table}_relays"
    )))
    .execute(admin)
    .await?;
    Ok(())
}

/// `VACUUM ANALYZE` then `CHECKPOINT`: every run starts with hint bits set, statistics known
/// and no checkpoint of the staging writes pending.
pub async fn settle_database(admin: &sqlx::PgPool, table: &str) -> BoxResult<()> {
    sqlx::raw_sql(AssertSqlSafe(format!("VACUUM ANALYZE {table}")))
        .execute(admin)
        .await?;
    sqlx::raw_sql("CHECKPOINT").execute(admin).await?;
    Ok(())
}

pub fn bench_job(kind: &str, i: usize) -> NewJob {
    NewJob::new(
        kind,
        json!([i, format!("user-{i}@example.com"), {"plan": "pro", "locale": "en"}]),
    )
}

/// Stages `rows` jobs through the adapter API (`Outbox::begin` + `enqueue_bulk`), `STAGE_CHUNK`
/// per transaction. Returns the time it took.
pub async fn stage(outbox: &Outbox, kind: &str, rows: usize) -> BoxResult<Duration> {
    let started = Instant::now();
    let mut done = 0;
    while done < rows {
        let n = STAGE_CHUNK.min(rows - done);
        let jobs = (done..done + n).map(|i| bench_job(kind, i)).collect();
        let mut tx = outbox.begin().await?;
        tx.enqueue_bulk(jobs).await?;
        tx.commit().await?;
        done += n;
    }
    Ok(started.elapsed())
}

/// `stage` with ordering keys: job `i` has `ordering_key` `key-{i mod keys}`, staged in the
/// same chunks (each keyed job is an INSERT of its own, after the chunk's key locks).
pub async fn stage_keyed(
    outbox: &Outbox,
    kind: &str,
    rows: usize,
    keys: usize,
) -> BoxResult<Duration> {
    let started = Instant::now();
    let mut done = 0;
    while done < rows {
        let n = STAGE_CHUNK.min(rows - done);
        let jobs = (done..done + n)
            .map(|i| {
                bench_job(kind, i)
                    .with_options(json!({"ordering_key": format!("key-{}", i % keys)}))
            })
            .collect();
        let mut tx = outbox.begin().await?;
        tx.enqueue_bulk(jobs).await?;
        tx.commit().await?;
        done += n;
    }
    Ok(started.elapsed())
}

pub async fn server_version(admin: &sqlx::PgPool) -> String {
    sqlx::query_scalar::<_, String>("SHOW server_version")
        .fetch_one(admin)
        .await
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

// ---------------------------------------------------------------------------------------------
// /proc

pub const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// User + system CPU seconds of one process (`/proc/PID/stat`, fields 14 and 15).
pub fn process_cpu_seconds(pid: &str) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14 -> index 11, stime index 12.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / CLOCK_TICKS_PER_SECOND)
}

/// Busy CPU seconds of the whole machine, all cores (`/proc/stat`: total minus idle and iowait).
pub fn machine_busy_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?;
    let values: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: f64 = values.iter().take(8).sum();
    let idle = values.get(3)? + values.get(4)?;
    Some((total - idle) / CLOCK_TICKS_PER_SECOND)
}

/// Fields of `/proc/PID/stat` after the command name (index 0 = field 3, the state).
fn stat_fields(pid: &str) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The PostgreSQL postmaster's pid: the parent of one of its backends.
pub async fn postmaster_pid(admin: &sqlx::PgPool) -> Option<u32> {
    let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(admin)
        .await
        .ok()?;
    let fields = stat_fields(&backend.to_string())?;
    fields.get(1)?.parse().ok()
}

/// CPU seconds of a PostgreSQL cluster: the postmaster, its live children, and (through the
/// postmaster's children times) the backends that already exited.
pub fn cluster_cpu_seconds(postmaster: u32) -> Option<f64> {
    let pm = postmaster.to_string();
    let mut ticks = 0.0;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Some(fields) = stat_fields(pid) else {
            continue;
        };
        let num = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        if pid == pm {
            ticks += num(11) + num(12) + num(13) + num(14);
        } else if fields.get(1).map(String::as_str) == Some(pm.as_str()) {
            ticks += num(11) + num(12);
        }
    }
    Some(ticks / CLOCK_TICKS_PER_SECOND)
}

/// CPU seconds of the relay (this process or a child), the devserver, the PostgreSQL cluster
/// and the whole machine; the difference of two samples splits a run's CPU between them, and
/// what is left is somebody else's (interference on a shared machine).
#[derive(Debug, Clone, Copy)]
pub struct CpuSample {
    relay: f64,
    devserver: f64,
    postgres: f64,
    machine: f64,
}

impl CpuSample {
    pub fn take(relay_pid: &str, devserver_pid: u32, postmaster: Option<u32>) -> CpuSample {
        CpuSample {
            relay: process_cpu_seconds(relay_pid).unwrap_or(f64::NAN),
            devserver: process_cpu_seconds(&devserver_pid.to_string()).unwrap_or(f64::NAN),
            postgres: postmaster.and_then(cluster_cpu_seconds).unwrap_or(0.0),
            machine: machine_busy_seconds().unwrap_or(f64::NAN),
        }
    }

    /// `{relay_cpu_s, devserver_cpu_s, postgres_cpu_s, machine_busy_s, other_cpu_s}`.
    pub fn delta(&self, later: &CpuSample) -> Value {
        let relay = later.relay - self.relay;
        let devserver = later.devserver - self.devserver;
        let postgres = later.postgres - self.postgres;
        let machine = later.machine - self.machine;
        json!({
            "relay_cpu_s": round3(relay),
            "devserver_cpu_s": round3(devserver),
            "postgres_cpu_s": round3(postgres),
            "machine_busy_s": round3(machine),
            "other_cpu_s": round3(machine - relay - devserver - postgres),
        })
    }
}

/// `(VmRSS, VmHWM)` in KiB from `/proc/PID/status`.
pub fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

// ---------------------------------------------------------------------------------------------
// Numbers and output

pub fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros() as i64
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Appends one JSON line to `--out` (creating its directory) and returns it.
pub fn emit(out: &Path, mut record: Value) -> BoxResult<()> {
    if let Some(object) = record.as_object_mut() {
        object.insert("at_us".into(), json!(now_us()));
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        object.insert(
            "loadavg".into(),
            json!(
                load.split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        );
    }
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out)?;
    writeln!(file, "{record}")?;
    Ok(())
}

/// Prints a plain table: a header row and rows of cells, columns padded.
pub fn print_table(title: &str, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:>w$}", w = widths[i]))
            .collect::<Vec<_>>()
            .join("  ")
    };
    println!("\n{title}");
    println!("{}", line(header.to_vec()));
    println!(
        "{}",
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("  ")
    );
    for row in rows {
        println!("{}", line(row.iter().map(String::as_str).collect()));
    }
    let _ = std::io::stdout().flush();
}

/// A redacted URL for the output (no password).
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL write statistics: WAL volume and HOT updates

pub async fn wal_lsn(admin: &sqlx::PgPool) -> BoxResult<String> {
    Ok(sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(admin)
        .await?)
}

/// WAL bytes written by the whole cluster since `lsn`.
pub async fn wal_bytes_since(admin: &sqlx::PgPool, lsn: &str) -> BoxResult<f64> {
    Ok(
        sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8")
            .bind(lsn)
            .fetch_one(admin)
            .await?,
    )
}

/// Row-level write counters of one table, or summed over a schema's tables, from
/// `pg_stat_user_tables` (cumulative since the table was created: the benchmarks create their
/// tables fresh, so these are the run's writes, staging included).
#[derive(Debug, Clone, Copy, Default)]
pub struct TupleCounts {
    pub inserted: i64,
    pub updated: i64,
    pub hot_updated: i64,
    pub deleted: i64,
}

impl TupleCounts {
    /// `n_tup_ins + n_tup_upd + n_tup_del`.
    pub fn writes(&self) -> i64 {
        self.inserted + self.updated + self.deleted
    }
}

/// The counters of `table` in `schema` (every table of the schema when `table` is `None`).
/// Backends report their counters when their connection closes (or every second): close the
/// pools that wrote first.
pub async fn tuple_counts(
    admin: &sqlx::PgPool,
    schema: &str,
    table: Option<&str>,
) -> BoxResult<TupleCounts> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let row: (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT coalesce(sum(n_tup_ins), 0)::int8, coalesce(sum(n_tup_upd), 0)::int8, \
                coalesce(sum(n_tup_hot_upd), 0)::int8, coalesce(sum(n_tup_del), 0)::int8 \
         FROM pg_stat_user_tables WHERE schemaname = $1 AND ($2::text IS NULL OR relname = $2)",
    )
    .bind(schema)
    .bind(table)
    .fetch_one(admin)
    .await?;
    Ok(TupleCounts {
        inserted: row.0,
        updated: row.1,
        hot_updated: row.2,
        deleted: row.3,
    })
}

/// `{wal_bytes_per_job, updates_per_job, hot_update_percent, tuples, writes_per_row}` for a run
/// of `rows` jobs on `table` (schema `public`).
pub async fn write_stats(
    admin: &sqlx::PgPool,
    table: &str,
    lsn: &str,
    rows: usize,
) -> BoxResult<Value> {
    write_stats_in(admin, "public", Some(table), lsn, rows).await
}

/// [`write_stats`] for a table of another schema, or every table of `schema` (`None`).
/// `writes_per_row` is `(n_tup_ins + n_tup_upd + n_tup_del) / rows` since the table was
/// created, so it counts the staging INSERT too.
pub async fn write_stats_in(
    admin: &sqlx::PgPool,
    schema: &str,
    table: Option<&str>,
    lsn: &str,
    rows: usize,
) -> BoxResult<Value> {
    let wal = wal_bytes_since(admin, lsn).await?;
    let counts = tuple_counts(admin, schema, table).await?;
    let (updates, hot) = (counts.updated, counts.hot_updated);
    Ok(json!({
        "wal_bytes_per_job": round1(wal / rows as f64),
        "updates_per_job": round3(updates as f64 / rows as f64),
        "hot_update_percent": round1(if updates > 0 { hot as f64 * 100.0 / updates as f64 } else { 0.0 }),
        "tuples": {"inserted": counts.inserted, "updated": counts.updated, "deleted": counts.deleted},
        "writes_per_row": round3(counts.writes() as f64 / rows as f64),
    }))
}

/// What every PostgreSQL benchmark starts with: an admin pool, the server's version, and the
/// dev backend as a child process. `what` names the benchmark in the error for a non-Postgres URL.
pub async fn postgres_setup(
    what: &str,
    database_url: &str,
    devserver_bin: Option<&Path>,
) -> BoxResult<(sqlx::PgPool, String, DevServer)> {
    if !is_postgres(database_url) {
        return Err(err(format!(
            "{what} runs on PostgreSQL: pass a postgres:// URL"
        )));
    }
    let admin = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(database_url)
        .await?;
    let version = server_version(&admin).await;
    let devserver = DevServer::spawn(&sibling_binary(devserver_bin, "ojs-devserver")?)?;
    Ok((admin, version, devserver))
}

/// The relay's phase histograms as counts, mean milliseconds and shares of the summed time:
/// where a round's time goes, measured by the engine itself (no round rebuilt here).
pub fn phases_json(h: &Histograms) -> Value {
    let count = |s: &HistogramSnapshot| s.counts.iter().sum::<u64>();
    let total_ms = |s: &HistogramSnapshot| s.sum_micros as f64 / 1000.0;
    let mean = |s: &HistogramSnapshot| total_ms(s) / count(s).max(1) as f64;
    let all =
        total_ms(&h.claim_duration) + total_ms(&h.send_duration) + total_ms(&h.settle_duration);
    let share = |s: &HistogramSnapshot| round1(100.0 * total_ms(s) / all.max(f64::MIN_POSITIVE));
    json!({
        "claims": count(&h.claim_duration), "claim_ms_mean": round3(mean(&h.claim_duration)),
        "requests": count(&h.send_duration), "send_ms_mean": round3(mean(&h.send_duration)),
        "settles": count(&h.settle_duration), "settle_ms_mean": round3(mean(&h.settle_duration)),
        "percent": {"claim": share(&h.claim_duration), "send": share(&h.send_duration), "settle": share(&h.settle_duration)},
    })
}
