//! The core's facade for the gem (`OJS::Client`, `lib/ojs/facade.rb`): one `Bridge` per
//! application and its `Stager`s, the staging calls made per job and per commit, the relay's
//! lifecycle, the operator commands and the relay command line. Every rule is
//! `ojs_bridge::Bridge`'s; this module converts text and handles by the protocol of `lib.rs`.

use std::sync::Arc;

use ojs_bridge::{Error, Report};

use crate::{Answer, OjsRubyOut, borrow, call, free, into_handle, strings, text};

/// One configured `ojs_bridge::Bridge` per application.
pub struct Bridge {
    pub(crate) inner: Arc<ojs_bridge::Bridge>,
}

/// A Bridge staging for one host connection kind (dialect and placeholder style, checked by
/// the core on each call): what the per-job calls take.
pub struct Stager {
    bridge: Arc<ojs_bridge::Bridge>,
    dialect: String,
    placeholder: String,
}

/// An operator command's or the relay command's report as JSON: `exit_code`, `stdout`,
/// `stderr`.
fn report_json(report: &Report) -> serde_json::Value {
    serde_json::json!({
        "exit_code": report.exit_code,
        "stdout": report.stdout,
        "stderr": report.stderr,
    })
}

/// Parses the spec §5.2 configuration (JSON text) as the host runs (`config::Host`):
/// `development` (Rails' development environment), `url_setting` (named when the backend URL is
/// missing), `needs_backend` (0 for a DDL-only handle). No I/O. Answers a new `Bridge`.
///
/// # Safety
/// Each `(pointer, length)` pair null or that many readable bytes; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_new(
    config: *const u8,
    config_len: usize,
    development: u8,
    url_setting: *const u8,
    url_setting_len: usize,
    needs_backend: u8,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let config = text(config, config_len, "config")?.unwrap_or("{}");
            let url_setting = text(url_setting, url_setting_len, "config")?.unwrap_or_default();
            let host = ojs_bridge::Host {
                development: development != 0,
                url_setting,
                needs_backend: needs_backend != 0,
            };
            let inner = Arc::new(ojs_bridge::Bridge::for_host(config, &host)?);
            Ok(into_handle(Bridge { inner }))
        })
    }
}

/// Frees a `Bridge` (Ruby's finalizer).
///
/// # Safety
/// `bridge` null or a `Bridge` of this library, not freed yet, borrowed by no call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_free(bridge: *mut Bridge) {
    unsafe { free(bridge) }
}

/// Frees a `Stager` (Ruby's finalizer).
///
/// # Safety
/// As `ojs_ruby_bridge_free`, for a `Stager`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_stager_free(stager: *mut Stager) {
    unsafe { free(stager) }
}

/// The Bridge's cheap facts, one JSON object, read once by `OJS::Client`: `table_name`,
/// `relay_in_process`, `notice` (the line to log once when the development default URL was
/// taken, or null). No I/O.
///
/// # Safety
/// `bridge` a live `Bridge`; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_facts(bridge: *const Bridge, out: *mut OjsRubyOut) -> i32 {
    unsafe {
        call(out, || {
            let bridge = &borrow(bridge).inner;
            Ok(serde_json::json!({
                "table_name": bridge.table_name(),
                "relay_in_process": bridge.relay_in_process(),
                "notice": bridge.notice(),
            })
            .to_string())
        })
    }
}

/// The outbox table's DDL for `dialect`, as a JSON array of statements.
///
/// # Safety
/// `bridge` a live `Bridge`; each `(pointer, length)` pair null or that many readable bytes;
/// `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_create_table_sql(
    bridge: *const Bridge,
    dialect: *const u8,
    dialect_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let dialect = text(dialect, dialect_len, "config")?.unwrap_or_default();
            let statements = borrow(bridge).inner.create_table_sql(dialect)?;
            Ok(serde_json::Value::from(statements).to_string())
        })
    }
}

/// A `Stager` of this Bridge for a dialect and placeholder style (the core checks them on each
/// call). Answers a new `Stager`.
///
/// # Safety
/// `bridge` a live `Bridge`; each `(pointer, length)` pair null or that many readable bytes;
/// `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_stager(
    bridge: *const Bridge,
    dialect: *const u8,
    dialect_len: usize,
    placeholder: *const u8,
    placeholder_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let dialect = text(dialect, dialect_len, "config")?.unwrap_or_default();
            let placeholder = text(placeholder, placeholder_len, "config")?.unwrap_or_default();
            Ok(into_handle(Stager {
                bridge: Arc::clone(&borrow(bridge).inner),
                dialect: dialect.to_owned(),
                placeholder: placeholder.to_owned(),
            }))
        })
    }
}

/// One job (`Bridge::stage_job`), the per-job call: the answer is `StagedJob::encode(with_sql
/// != 0)`, the INSERT's text first when asked, then its parameters, NUL-separated; for a job
/// with an ordering key or a unique key, an empty first field and then its `Staged::to_json`
/// (run as a bulk of one).
///
/// # Safety
/// `stager` a live `Stager`; each `(pointer, length)` pair null or that many readable bytes;
/// `out` as `call`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ojs_ruby_stager_stage_job(
    stager: *const Stager,
    job_type: *const u8,
    job_type_len: usize,
    args: *const u8,
    args_len: usize,
    options: *const u8,
    options_len: usize,
    meta: *const u8,
    meta_len: usize,
    context: *const u8,
    context_len: usize,
    with_sql: u8,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let stager = borrow(stager);
            let staged = stager.bridge.stage_job(
                &stager.dialect,
                &stager.placeholder,
                text(job_type, job_type_len, "type")?.unwrap_or_default(),
                text(args, args_len, "args")?.unwrap_or("null"),
                text(options, options_len, "options")?,
                text(meta, meta_len, "meta")?,
                text(context, context_len, "context")?,
            )?;
            Ok(staged.encode(with_sql != 0))
        })
    }
}

/// Several jobs (`Bridge::stage`, `jobs` a JSON array): the answer is `Staged::to_json`.
///
/// # Safety
/// As `ojs_ruby_stager_stage_job`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_stager_stage(
    stager: *const Stager,
    jobs: *const u8,
    jobs_len: usize,
    context: *const u8,
    context_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let stager = borrow(stager);
            let staged = stager.bridge.stage(
                &stager.dialect,
                &stager.placeholder,
                text(jobs, jobs_len, "args")?.unwrap_or("null"),
                text(context, context_len, "context")?,
            )?;
            Ok(staged.to_json())
        })
    }
}

/// What a unique job's enqueue call reports once its staging statement (one with `returns`)
/// ran (`Bridge::held_outcome`): `token` is the statement's `returns.token`, `returned` the
/// first column of the row it returned (null: no row). The job id to report, or the core's
/// `DUPLICATE` error (with `existing_job_id`).
///
/// # Safety
/// `bridge` a live `Bridge`; each `(pointer, length)` pair null or that many readable bytes;
/// `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_held_outcome(
    bridge: *const Bridge,
    token: *const u8,
    token_len: usize,
    returned: *const u8,
    returned_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let token = text(token, token_len, "options")?.unwrap_or_default();
            let returned = text(returned, returned_len, "options")?;
            borrow(bridge).inner.held_outcome(token, returned)
        })
    }
}

/// `Bridge::ensure_relay`: starts this process's relay once, and again in a forked child; one
/// atomic load when it runs. Bound with `blocking: true` (a start opens the relay's database
/// connection).
///
/// # Safety
/// `bridge` a live `Bridge`; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_ensure_relay(
    bridge: *const Bridge,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe { call(out, || borrow(bridge).inner.ensure_relay()) }
}

/// The after-commit wake-up (`Bridge::notify_committed`) for job ids as `encode_ids` text.
/// Never blocks.
///
/// # Safety
/// `bridge` a live `Bridge`; `job_ids` null or `job_ids_len` readable bytes; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_notify_committed(
    bridge: *const Bridge,
    job_ids: *const u8,
    job_ids_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let ids = text(job_ids, job_ids_len, "args")?.unwrap_or_default();
            borrow(bridge)
                .inner
                .notify_committed(ojs_bridge::decode_ids(ids));
            Ok(())
        })
    }
}

/// A Bridge call without arguments, by name: `stop_relay` (graceful, within
/// `relay.shutdown_timeout`), `kill_relay` (abrupt, as a crash: tests of recovery), `migrate`,
/// `run_relay_until_signal` (`rake ojs:relay`: until SIGINT/SIGTERM), `status_json`,
/// `metrics_json` (the relay's counters in this process), `metrics_text` (the Prometheus
/// exposition, null without figures), `readiness_json` (`{"ready", "database", "backend"}`).
/// Bound with `blocking: true`: most wait on the relay, the database or the backend.
///
/// # Safety
/// `bridge` a live `Bridge`; `verb` null or `verb_len` readable bytes; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_run(
    bridge: *const Bridge,
    verb: *const u8,
    verb_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let bridge = &borrow(bridge).inner;
            let answer = match text(verb, verb_len, "config")?.unwrap_or_default() {
                "start_relay" => Answer::from(bridge.start_relay()?),
                "stop_relay" => {
                    bridge.stop_relay();
                    Answer::default()
                }
                "kill_relay" => {
                    bridge.kill_relay();
                    Answer::default()
                }
                "migrate" => Answer::from(bridge.migrate()?),
                "run_relay_until_signal" => Answer::from(bridge.run_relay_until_signal()?),
                "status_json" => Answer::from(bridge.status_json()?),
                "metrics_json" => Answer::from(bridge.metrics_json()),
                "metrics_text" => Answer::from(bridge.metrics_text()),
                "readiness_json" => Answer::from(bridge.readiness_json()?),
                other => panic!("no Bridge call {other:?}"),
            };
            Ok(answer)
        })
    }
}

/// Spec §5.1 `enqueue` (`Bridge::enqueue_now`): one job (JSON) straight to the backend;
/// answers its id. Bound with `blocking: true` (a backend round trip).
///
/// # Safety
/// `bridge` a live `Bridge`; each `(pointer, length)` pair null or that many readable bytes;
/// `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_enqueue_now(
    bridge: *const Bridge,
    job: *const u8,
    job_len: usize,
    context: *const u8,
    context_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let job = text(job, job_len, "args")?.unwrap_or("null");
            let context = text(context, context_len, "context")?;
            borrow(bridge).inner.enqueue_now(job, context)
        })
    }
}

/// The outbox calls of the relay's own connection, by name, with one text argument `arg` and a
/// number `limit` (negative: none): `prune` (`arg` an ISO-8601 duration; the count deleted),
/// `dead_list_json` (`arg` a tenant or null), `dead_replay`, `dead_purge` (`arg` a tenant or
/// null; the count), `rows_json` (`arg` job ids as `encode_ids` text), `admin` (`arg` an
/// `admin::Command` as JSON; the `Report` as JSON: `exit_code`, `stdout`, `stderr`). Bound with
/// `blocking: true` (database round trips).
///
/// # Safety
/// `bridge` a live `Bridge`; each `(pointer, length)` pair null or that many readable bytes;
/// `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_bridge_outbox(
    bridge: *const Bridge,
    verb: *const u8,
    verb_len: usize,
    arg: *const u8,
    arg_len: usize,
    limit: i64,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let bridge = &borrow(bridge).inner;
            let arg = text(arg, arg_len, "config")?;
            let answer = match text(verb, verb_len, "config")?.unwrap_or_default() {
                "prune" => Answer::from(bridge.prune(arg.unwrap_or_default())?),
                "dead_list_json" => {
                    let limit = u32::try_from(limit).ok();
                    Answer::from(bridge.dead_list_json(arg, limit)?)
                }
                "dead_replay" => Answer::from(bridge.dead_replay(arg)?),
                "dead_purge" => Answer::from(bridge.dead_purge(arg)?),
                "rows_json" => {
                    let ids = ojs_bridge::decode_ids(arg.unwrap_or_default());
                    Answer::from(bridge.rows_json(ids)?)
                }
                "admin" => {
                    Answer::from(report_json(&bridge.admin(arg.unwrap_or("{}"))?).to_string())
                }
                other => panic!("no Bridge outbox call {other:?}"),
            };
            Ok(answer)
        })
    }
}

/// The relay's database URL from ActiveRecord's connection settings (`db_url::ConnectionParts`
/// as JSON).
///
/// # Safety
/// `parts` null or `parts_len` readable bytes; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_database_url_from_parts(
    parts: *const u8,
    parts_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            ojs_bridge::database_url_from_parts(text(parts, parts_len, "config")?.unwrap_or("{}"))
        })
    }
}

/// The request headers the middleware passes in the context's `"headers"` (lowercase), as a
/// JSON array.
///
/// # Safety
/// `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_context_header_names(out: *mut OjsRubyOut) -> i32 {
    unsafe {
        call(out, || {
            Ok(serde_json::Value::from(ojs_bridge::context_header_names()).to_string())
        })
    }
}

/// From now on SIGINT and SIGTERM no longer kill the process but stop the relay command (or
/// `run_relay_until_signal`) gracefully, also one that arrives before the relay runs
/// (`ojs_bridge::arm_stop_signals`). Called first thing by `rake ojs:relay`, after its Ruby
/// traps (the core's handlers chain to them). Idempotent.
///
/// # Safety
/// `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_arm_stop_signals(out: *mut OjsRubyOut) -> i32 {
    unsafe { call(out, ojs_bridge::arm_stop_signals) }
}

/// The exit code of a failed relay command for an error code (2: usage and configuration
/// errors; 1: the rest), as `ojs-relay` exits: the out-parameter's `value`.
///
/// # Safety
/// `code` null or `code_len` readable bytes; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_relay_exit_code(
    code: *const u8,
    code_len: usize,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || {
            let code = text(code, code_len, "config")?.unwrap_or_default();
            let exit = ojs_bridge::ErrorCode::parse(code).map_or(1, ojs_bridge::relay_exit_code);
            Ok(u64::try_from(exit).unwrap_or(1))
        })
    }
}

/// The relay command line of `rake ojs:relay` (`ojs_bridge::relay_command`): `args` (a JSON
/// array) are the options of `ojs-relay run`, `framework` the command's description
/// (`program`, `config`, `development`, `url_setting`, `create_table_with`, `after_help`).
/// With `run` 0, nothing runs and nothing is read (no I/O): the answer is `{"exit": the report
/// to print and exit with (`--help`, a usage error) or null, "table": the outbox table the
/// settings name, or null}`. With `run` 1, the standalone relay runs (with its `--listen`
/// surface when asked) until SIGINT/SIGTERM (the core's stop signals, armed by
/// `ojs_ruby_arm_stop_signals`), then stops gracefully; the answer is its report (JSON:
/// `exit_code`, `stdout`, `stderr`). Bound with `blocking: true`.
///
/// # Safety
/// Each `(pointer, length)` pair null or that many readable bytes; `out` as `call`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ojs_ruby_relay_command(
    args: *const u8,
    args_len: usize,
    framework: *const u8,
    framework_len: usize,
    run: u8,
    out: *mut OjsRubyOut,
) -> i32 {
    unsafe {
        call(out, || -> Result<String, Error> {
            let args = strings(text(args, args_len, "config")?, "config")?;
            let framework = text(framework, framework_len, "config")?.unwrap_or("{}");
            let command = ojs_bridge::relay_command(args, framework)?;
            if run != 0 {
                return Ok(report_json(&command.run_until_signal()?).to_string());
            }
            if let Some(report) = command.exit() {
                return Ok(
                    serde_json::json!({ "exit": report_json(&report), "table": null }).to_string(),
                );
            }
            Ok(serde_json::json!({ "exit": null, "table": command.table()? }).to_string())
        })
    }
}
