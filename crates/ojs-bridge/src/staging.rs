//! Staging: a job or several prepared by the core and turned into the statements the host
//! runs on its own connection (the hot path's one INSERT, a bulk's statements, a keyed job's
//! locking and returning statements), the immediate send, and the SQL a host without its own
//! transaction API needs.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::Bridge;
use crate::js_options::{self, Renames};
use ojs_outbox::job::{NewJob, PreparedJob, RequestContext, prepare, prepare_json};
use ojs_outbox::sql::{Dialect, OutboxSql, Placeholder, Statement};
use ojs_outbox::{Error, ErrorCode, Result};

/// Jobs validated and turned into statements for the host connection. Serializes (for the
/// bindings that take it as one JSON text) as `{"job_ids": [...], "statements": [{"sql": "...",
/// "params": [text or null, ...]}], "needs_savepoint": bool}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Staged {
    pub job_ids: Vec<String>,
    pub statements: Vec<Statement>,
    /// Run the statements inside a savepoint of their own, rolled back if one fails: they
    /// must be all or nothing (`ledger::needs_savepoint`). The binding never decides this.
    pub needs_savepoint: bool,
}

impl Staged {
    /// The JSON text above: one string for a binding to cross and parse, however many jobs.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("strings serialize")
    }
}

/// One job validated and turned into its single-row INSERT (`Bridge::stage_job`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedJob {
    /// A job with an ordering key or a unique key is staged by statements of its own
    /// (`OutboxSql::insert_jobs`): then this holds them, and `sql`/`params` are unused.
    pub keyed: Option<Staged>,
    pub job_id: String,
    /// The same text for every job of a dialect and placeholder style (built once).
    pub sql: Arc<str>,
    /// `job_id, job_type, job_args, job_options, job_meta, tenant_id`, in the SQL's order.
    pub params: [Option<String>; 6],
}

impl StagedJob {
    /// The staged job's one encoding across the FFI line: one text, the fields separated by
    /// NUL characters: the INSERT text when `with_sql`, then the six parameters in the SQL's
    /// order. Without a tenant the text ends after `job_meta` (5 parameters: the tenant is
    /// NULL); with one it is the last field (possibly empty). No field can hold a NUL: the SQL
    /// is the core's, the id a UUID, the type validated, args/options/meta JSON texts (which
    /// escape control characters), and a tenant holding one is refused at validation. The SQL
    /// is the same for every call of a dialect and placeholder style: ask for it once.
    ///
    /// A keyed job (`keyed`) encodes as an empty first field, then its `Staged::to_json`: the
    /// binding runs it as it runs a bulk of one (a UUID or an INSERT text is never empty).
    pub fn encode(&self, with_sql: bool) -> String {
        if let Some(staged) = &self.keyed {
            return format!("\0{}", staged.to_json());
        }
        let sql = with_sql.then_some(&*self.sql);
        let [job_id, job_type, args, options, meta, tenant] = &self.params;
        let fields =
            [job_id, job_type, args, options, meta].map(|field| field.as_deref().unwrap_or(""));
        let length: usize = sql
            .iter()
            .chain(&fields)
            .chain(tenant.as_deref().iter())
            .map(|field| field.len() + 1)
            .sum();
        let mut out = String::with_capacity(length);
        for (index, field) in sql
            .iter()
            .chain(&fields)
            .chain(tenant.as_deref().iter())
            .enumerate()
        {
            if index > 0 {
                out.push('\0');
            }
            out.push_str(field);
        }
        out
    }
}

/// One job as a binding hands it over (an element of the `jobs` JSON array).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobInput {
    #[serde(rename = "type")]
    job_type: Value,
    #[serde(default)]
    args: Option<Value>,
    #[serde(default)]
    options: Option<Value>,
    #[serde(default)]
    meta: Option<Value>,
}

impl Bridge {
    /// The DDL for a host connection of this dialect (`postgres`/`postgresql`, `mysql`/`mariadb`,
    /// `sqlite`).
    pub fn create_table_sql(&self, dialect: &str) -> Result<Vec<String>> {
        let sql = OutboxSql::new(parse_dialect(dialect)?, self.table_name());
        if let Some(why) = sql.name_too_long() {
            return Err(Error::field(ErrorCode::InvalidConfig, "table_name", why));
        }
        Ok(sql.create_table())
    }

    /// The statement that removes the outbox table (a framework migration's reverse step).
    pub fn drop_table_sql(&self, dialect: &str) -> Result<String> {
        Ok(OutboxSql::new(parse_dialect(dialect)?, self.table_name()).drop_table())
    }

    /// Validates jobs (a JSON array of `{"type", "args", "options"?, "meta"?}`), merges the
    /// request context (JSON object or null), assigns ids, and returns the INSERT statements
    /// for the host connection in its dialect and placeholder style. All or nothing: one
    /// invalid job fails the call, naming its index when there are several.
    pub fn stage(
        &self,
        dialect: &str,
        placeholder: &str,
        jobs_json: &str,
        context_json: Option<&str>,
    ) -> Result<Staged> {
        let sql = OutboxSql::for_config(parse_dialect(dialect)?, &self.config);
        let placeholder = parse_placeholder(placeholder)?;
        let context = parse_context(context_json, self.trust_tenant_header())?;
        let context = context.as_ref();
        // The common bulk in one pass over the text: an array of job objects of known keys
        // (reading each element as a whole first, then again, was a tenth of a bulk's cost).
        // Anything else is read element by element, which names the first bad job.
        let prepared = match serde_json::from_str::<Vec<JobObject>>(jobs_json) {
            Ok(jobs) => prepare_each(jobs, |JobObject(texts)| {
                prepare_job_texts(texts, context, self.js_options)
            }),
            Err(_) => {
                let inputs: Vec<&RawValue> = serde_json::from_str(jobs_json).map_err(|e| {
                    Error::field(
                        ErrorCode::InvalidArgs,
                        "jobs",
                        format!("not a JSON array of jobs: {e}"),
                    )
                })?;
                prepare_each(inputs, |input| {
                    prepare_input(input, context, self.js_options)
                })
            }
        }?;
        let prepared = prepared
            .into_iter()
            .map(|job| self.config.seal(job))
            .collect::<Result<Vec<_>>>()?;
        let (job_ids, statements) = sql.insert_jobs(placeholder, prepared);
        Ok(Staged {
            job_ids,
            needs_savepoint: ojs_outbox::ledger::needs_savepoint(statements.len()),
            statements,
        })
    }

    /// `stage` for one job given as JSON texts: the per-call hot path of
    /// `enqueue_after_commit`. Same validation, ids and row as `stage` (a one-job array);
    /// `None` or `"null"` options/meta mean unset.
    #[allow(clippy::too_many_arguments)]
    pub fn stage_job(
        &self,
        dialect: &str,
        placeholder: &str,
        job_type: &str,
        args_json: &str,
        options_json: Option<&str>,
        meta_json: Option<&str>,
        context_json: Option<&str>,
    ) -> Result<StagedJob> {
        let dialect = parse_dialect(dialect)?;
        let placeholder = parse_placeholder(placeholder)?;
        let context = parse_context(context_json, self.trust_tenant_header())?;
        let job = with_options_text(self.js_options, options_json, |options_json| {
            prepare_json(
                job_type,
                args_json,
                options_json,
                meta_json,
                context.as_ref(),
            )
        })?;
        let job = self.config.seal(job)?;
        if job.order_key.is_some() || job.unique.is_some() {
            let (job_ids, statements) =
                OutboxSql::for_config(dialect, &self.config).insert_jobs(placeholder, vec![job]);
            return Ok(StagedJob {
                keyed: Some(Staged {
                    needs_savepoint: ojs_outbox::ledger::needs_savepoint(statements.len()),
                    job_ids,
                    statements,
                }),
                job_id: String::new(),
                sql: Arc::from(""),
                params: Default::default(),
            });
        }
        let slot = &self.insert_one[dialect as usize * 3 + placeholder as usize];
        let sql = slot
            .get_or_init(|| {
                let mut statements = OutboxSql::for_config(dialect, &self.config)
                    .insert(placeholder, std::slice::from_ref(&job));
                Arc::from(statements.remove(0).sql)
            })
            .clone();
        let PreparedJob {
            job_id,
            job_type,
            args_json,
            options_json,
            meta_json,
            tenant_id,
            ..
        } = job;
        Ok(StagedJob {
            keyed: None,
            params: [
                Some(job_id.clone()),
                Some(job_type),
                Some(args_json),
                Some(options_json),
                Some(meta_json),
                tenant_id,
            ],
            job_id,
            sql,
        })
    }

    /// A job's args as the application staged them: `args_json` opened with this process's
    /// key ring when they are the encryption envelope (`meta_json` names the key), else as
    /// they are (also in a process without a key ring: the envelope is what it may see). For a
    /// host that reads an outbox row itself (`select_job_sql`). Envelope that the ring cannot
    /// open (an unknown key, altered data): an error naming the reason, never the data.
    pub fn open_args(&self, args_json: &str, meta_json: &str) -> Result<String> {
        let args: Value = serde_json::from_str(args_json)
            .map_err(|e| Error::field(ErrorCode::InvalidArgs, "args", e.to_string()))?;
        if !ojs_outbox::codec::is_encoded(&args) {
            return Ok(args_json.to_owned());
        }
        let Some(codec) = self.config.encryption.as_deref() else {
            return Ok(args_json.to_owned());
        };
        let meta: Value = serde_json::from_str(meta_json)
            .map_err(|e| Error::field(ErrorCode::InvalidMeta, "meta", e.to_string()))?;
        Ok(codec
            .open_args(&args, &meta)?
            .map_or_else(|| args_json.to_owned(), |plain| plain.to_string()))
    }

    /// What a unique job's enqueue call reports, once its staging statement (one with
    /// `returns`) ran: `token` is `returns.token`, `returned` the first column of the row it
    /// returned (`None`: no row). The job id to report (the staged job's, or the held job's for
    /// `ignore`), or `DUPLICATE` (`existing_job_id` names the held job).
    pub fn held_outcome(&self, token: &str, returned: Option<&str>) -> Result<String> {
        ojs_outbox::sql::held_outcome(token, returned)
    }

    /// `enqueue`: one job straight to the backend, no outbox. Blocks until the backend answers.
    pub fn enqueue_now(&self, job_json: &str, context_json: Option<&str>) -> Result<String> {
        let input: Value = serde_json::from_str(job_json).map_err(|e| {
            Error::field(
                ErrorCode::InvalidArgs,
                "job",
                format!("not a JSON job: {e}"),
            )
        })?;
        let mut job = job_from_input(input)?;
        let context = parse_context(context_json, self.trust_tenant_header())?;
        let mut renames = Renames::default();
        if self.js_options
            && let Some(Value::Object(options)) = &mut job.options
        {
            let (spec, respelled) = js_options::to_spec(std::mem::take(options))?;
            *options = spec;
            renames = respelled;
        }
        self.with_running(|running| {
            running
                .runtime
                .block_on(running.outbox.enqueue_now(job, context.as_ref()))
        })
        .map_err(|error| renames.caller_error(error))
    }

    /// The statement that reads one outbox row by job id on the host's own connection
    /// (`OutboxSql::select_job`: `job_type, job_args, status, attempts, error,
    /// created_at_ms`), e.g. for a task result read inside the transaction that staged it.
    pub fn select_job_sql(&self, dialect: &str, placeholder: &str) -> Result<String> {
        let (dialect, placeholder) = (parse_dialect(dialect)?, parse_placeholder(placeholder)?);
        Ok(OutboxSql::new(dialect, self.table_name()).select_job(placeholder))
    }

    /// Transaction control for a host whose driver has none (`sql::transaction_sql`).
    pub fn transaction_sql(step: &str, depth: usize) -> Result<String> {
        ojs_outbox::sql::transaction_sql(step, depth).ok_or_else(|| {
            Error::field(
                ErrorCode::InvalidConfig,
                "step",
                format!(
                    "{step:?}: expected begin, commit, rollback, savepoint, release or rollback_to"
                ),
            )
        })
    }
}

fn parse_dialect(name: &str) -> Result<Dialect> {
    Dialect::parse(name).ok_or_else(|| {
        Error::field(
            ErrorCode::InvalidConfig,
            "dialect",
            format!("{name:?} is not supported (postgresql, mysql or sqlite)"),
        )
    })
}

fn parse_placeholder(name: &str) -> Result<Placeholder> {
    Placeholder::parse(name).ok_or_else(|| {
        Error::field(
            ErrorCode::InvalidConfig,
            "placeholder",
            format!("{name:?} is not dollar, question or percent"),
        )
    })
}

/// The request context of a context JSON; `X-OJS-Tenant` counts only where the app's
/// `adapter.trust_tenant_header` says so (`RequestContext::from_json`).
fn parse_context(
    context_json: Option<&str>,
    trust_tenant_header: bool,
) -> Result<Option<RequestContext>> {
    match context_json.map(str::trim) {
        None | Some("") | Some("null") => Ok(None),
        Some(text) => RequestContext::from_json(text, trust_tenant_header).map(Some),
    }
}

/// Each job of a bulk prepared in order; the first failure fails all, naming its index
/// (`jobs[i]: ...`) when there are several.
fn prepare_each<T>(
    inputs: Vec<T>,
    mut prepare: impl FnMut(T) -> Result<PreparedJob>,
) -> Result<Vec<PreparedJob>> {
    let many = inputs.len() > 1;
    let mut prepared = Vec::with_capacity(inputs.len());
    for (index, input) in inputs.into_iter().enumerate() {
        match prepare(input) {
            Ok(job) => prepared.push(job),
            Err(error) if many => {
                return Err(Error {
                    message: format!("jobs[{index}]: {}", error.message),
                    ..error
                });
            }
            Err(error) => return Err(error),
        }
    }
    Ok(prepared)
}

/// A job object of `stage`'s array: its parts as texts, borrowed from the array's text.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobTexts<'a> {
    #[serde(rename = "type", borrow)]
    job_type: &'a RawValue,
    #[serde(default, borrow)]
    args: Option<&'a RawValue>,
    #[serde(default, borrow)]
    options: Option<&'a RawValue>,
    #[serde(default, borrow)]
    meta: Option<&'a RawValue>,
}

/// [`JobTexts`] read from a JSON object only: serde would also fill the struct from an array
/// (`["a", [1]]`), which is no job.
struct JobObject<'a>(JobTexts<'a>);

impl<'de> Deserialize<'de> for JobObject<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = JobTexts<'de>;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a job object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> std::result::Result<JobTexts<'de>, A::Error> {
                JobTexts::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(Object).map(JobObject)
    }
}

/// One element of `stage`'s array, prepared from its texts (`prepare_json`) without building
/// JSON values for its args: the same rules and messages as `job_from_input` then `prepare`.
fn prepare_input(
    input: &RawValue,
    context: Option<&RequestContext>,
    js_options: bool,
) -> Result<PreparedJob> {
    if !input.get().starts_with('{') {
        return job_from_input(serde_json::from_str(input.get()).unwrap_or(Value::Null))
            .and_then(|job| prepare(job, context));
    }
    let texts: JobTexts = serde_json::from_str(input.get()).map_err(|e| {
        let keys: Map<String, Value> = serde_json::from_str(input.get()).unwrap_or_default();
        malformed_job(keys.keys(), e)
    })?;
    prepare_job_texts(texts, context, js_options)
}

/// A job object's texts prepared (`prepare_texts`): its type must be a JSON string.
fn prepare_job_texts(
    texts: JobTexts,
    context: Option<&RequestContext>,
    js_options: bool,
) -> Result<PreparedJob> {
    let raw_type = texts.job_type.get();
    // Borrowed from the array's text unless it holds escapes: one allocation fewer a job.
    let job_type: std::borrow::Cow<str> = match serde_json::from_str::<&str>(raw_type) {
        Ok(job_type) => job_type.into(),
        Err(_) => serde_json::from_str::<String>(raw_type)
            .map_err(|_| {
                Error::field(
                    ErrorCode::InvalidJobType,
                    "type",
                    format!("must be a string, got {raw_type}"),
                )
            })?
            .into(),
    };
    with_options_text(js_options, texts.options.map(RawValue::get), |options| {
        ojs_outbox::job::prepare_texts(
            &job_type,
            texts.args.map_or("null", RawValue::get),
            options,
            texts.meta.map(RawValue::get),
            context,
            true,
        )
    })
}

/// `prepare` on an options text respelled from the JavaScript form when `js_options` (errors
/// then name the caller's spelling); anything but an object is left for `prepare` to refuse.
fn with_options_text<T>(
    js_options: bool,
    options_json: Option<&str>,
    prepare: impl FnOnce(Option<&str>) -> Result<T>,
) -> Result<T> {
    let parsed = match options_json {
        Some(text) if js_options => serde_json::from_str::<Value>(text).ok(),
        _ => None,
    };
    let Some(Value::Object(options)) = parsed else {
        return prepare(options_json);
    };
    let (options, renames) = js_options::to_spec(options)?;
    let text = Value::Object(options).to_string();
    prepare(Some(&text)).map_err(|error| renames.caller_error(error))
}

/// A job object that does not fit `{"type", "args", "options", "meta"}`: the field is the first
/// unknown key when there is one (a bulk job with `queue` beside `type`), else `job`.
fn malformed_job<'k>(
    keys: impl Iterator<Item = &'k String>,
    error: impl std::fmt::Display,
) -> Error {
    const KEYS: [&str; 4] = ["type", "args", "options", "meta"];
    let mut keys = keys;
    match keys.find(|key| !KEYS.contains(&key.as_str())) {
        Some(key) if ojs_outbox::job::OPTION_KEYS.contains(&key.as_str()) => Error::field(
            ErrorCode::InvalidArgs,
            key.as_str(),
            "unknown key of a job (type, args, options, meta): put it in \"options\"",
        ),
        Some(key) => Error::field(
            ErrorCode::InvalidArgs,
            key.as_str(),
            "unknown key of a job (type, args, options, meta)",
        ),
        None => Error::field(
            ErrorCode::InvalidArgs,
            "job",
            format!("expected {{\"type\", \"args\", \"options\", \"meta\"}}: {error}"),
        ),
    }
}

fn job_from_input(input: Value) -> Result<NewJob> {
    // serde would also fill the struct from an array (`["a", [1]]`): only an object is a job.
    if !input.is_object() {
        return Err(Error::field(
            ErrorCode::InvalidArgs,
            "job",
            format!("must be an object {{\"type\", \"args\", ...}}, got {input}"),
        ));
    }
    let keys: Vec<String> = input
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys().cloned())
        .collect();
    let input: JobInput =
        serde_json::from_value(input).map_err(|e| malformed_job(keys.iter(), e))?;
    let job_type = match input.job_type {
        Value::String(job_type) => job_type,
        other => {
            return Err(Error::field(
                ErrorCode::InvalidJobType,
                "type",
                format!("must be a string, got {other}"),
            ));
        }
    };
    let mut job = NewJob::new(job_type, input.args.unwrap_or(Value::Null));
    job.options = input.options.filter(|o| !o.is_null());
    job.meta = input.meta.filter(|m| !m.is_null());
    Ok(job)
}
