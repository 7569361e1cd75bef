//! The backend URL has no silent default: parsing without one fails naming the setting, unless
//! the host framework runs in development mode (then the development URL, and a notice to log)
//! or the handle never talks to the backend. And the near-miss names of unknown options.

use ojs_bridge::{self as bridge, Bridge};
use ojs_outbox::backend::Backend;
use ojs_outbox::{Config, DEVELOPMENT_OJS_URL, ErrorCode, Host};
use serde_json::json;

const DJANGO: &str = r#"OJS_CONFIG["ojs_url"]"#;

#[test]
fn a_configuration_without_a_url_is_invalid_and_names_the_setting() {
    for text in [
        r#"{}"#,
        r#"{"adapter": {"outbox": {"table_name": "jobs"}}}"#,
        r#"{"adapter": {"ojs_url": null}}"#,
        r#"{"url": null}"#,
    ] {
        let error = Config::from_json(text).expect_err(text);
        assert_eq!(error.code, ErrorCode::InvalidConfig, "{text}");
        assert_eq!(error.field.as_deref(), Some("adapter.ojs_url"), "{text}");
        assert!(
            error.message.contains("no OJS backend URL is set"),
            "{text}: {}",
            error.message
        );
    }
    let host = Host {
        url_setting: DJANGO,
        ..Host::PRODUCTION
    };
    let error = Config::load(&json!({}), &host).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidConfig);
    assert!(error.message.contains(DJANGO), "{}", error.message);
    let error = Bridge::for_host("{}", &host).err().unwrap();
    assert!(error.message.contains(DJANGO), "{}", error.message);
    assert!(Bridge::new("{}").is_err());
}

#[test]
fn development_mode_takes_the_development_url_and_says_so() {
    let host = Host {
        development: true,
        url_setting: DJANGO,
        needs_backend: true,
    };
    let loaded = Config::load(&json!({"adapter": {"ojs_url": null}}), &host).unwrap();
    assert_eq!(loaded.config.ojs_url, DEVELOPMENT_OJS_URL);
    let notice = loaded.notice.expect("a notice");
    assert!(
        notice.contains(DEVELOPMENT_OJS_URL) && notice.contains(DJANGO),
        "{notice}"
    );
    let adapter = Bridge::for_host("{}", &host).unwrap();
    assert_eq!(adapter.config().ojs_url, DEVELOPMENT_OJS_URL);
    assert!(adapter.notice().unwrap().contains(DJANGO));

    // A URL that is set is taken as it is, in development mode too, without a word.
    // `url` is the same key as `ojs_url`, and its errors name `adapter.ojs_url`.
    let error = Config::from_value(&json!({"url": "ftp://ojs"})).unwrap_err();
    assert_eq!(error.field.as_deref(), Some("adapter.ojs_url"));
    let loaded = Config::load(&json!({"url": "http://ojs:9000"}), &host).unwrap();
    assert_eq!(loaded.config.ojs_url, "http://ojs:9000");
    assert_eq!(loaded.notice, None);
}

#[test]
fn a_handle_that_needs_no_backend_has_no_url_and_cannot_send() {
    let host = Host {
        needs_backend: false,
        ..Host::PRODUCTION
    };
    let loaded = Config::load(&json!({"outbox": {"table_name": "jobs"}}), &host).unwrap();
    assert_eq!(loaded.config.ojs_url, "");
    assert_eq!(loaded.notice, None);
    // The DDL needs no backend.
    let adapter = Bridge::for_host("{}", &host).unwrap();
    assert!(!adapter.create_table_sql("sqlite").unwrap().is_empty());
    // Nor do the relay's commands that only touch the database (ojs-relay migrate, status).
    let dir = std::env::temp_dir().join(format!("ojs-no-url-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let database = format!("sqlite://{}", dir.join("app.db").display());
    let adapter = Bridge::for_host(&json!({"database_url": database}).to_string(), &host).unwrap();
    adapter.migrate().unwrap();
    assert!(adapter.status_json().unwrap().contains("\"pending\":0"));
    // Every request it would make fails, naming the missing URL.
    let backend = Backend::new(&loaded.config).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let error = runtime.block_on(backend.health()).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidConfig);
    assert_eq!(error.field.as_deref(), Some("adapter.ojs_url"));
    let outcome = runtime.block_on(backend.send_one("{}".into()));
    assert!(
        matches!(&outcome, ojs_outbox::classify::Outcome::Misconfigured { reason } if reason.contains("no OJS backend URL")),
        "{outcome:?}"
    );
    adapter.close();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unknown_options_name_the_accepted_spelling_when_near() {
    let mut accepted: Vec<String> = bridge::option_keys()
        .into_iter()
        .map(|key| key.replace("_url", "Url").replace("_token", "Token"))
        .collect();
    accepted.push("knex".into());
    for (key, spelling) in [
        ("ojsUrl", "url"),
        ("ojs_url", "url"),
        ("URL", "url"),
        ("knexx", "knex"),
        ("auth_token", "authToken"),
        ("databaseURL", "databaseUrl"),
    ] {
        let error = bridge::unknown_option_error(key, &accepted);
        assert_eq!(error.code, ErrorCode::InvalidConfig, "{key}");
        assert_eq!(error.field.as_deref(), Some(key));
        assert!(
            error
                .message
                .contains(&format!("did you mean {spelling:?}")),
            "{key}: {}",
            error.message
        );
    }
    let error = bridge::unknown_option_error("frobnicate", &accepted);
    assert!(
        !error.message.contains("did you mean") && error.message.contains("knex"),
        "{}",
        error.message
    );
}

#[test]
fn a_key_given_in_both_spellings_must_agree() {
    // The §5.2 names and the §8 examples' aliases are one key each.
    let error = Config::from_value(&json!({"ojs_url": "http://a:8080", "url": "http://b:8080"}))
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidConfig);
    assert_eq!(error.field.as_deref(), Some("adapter.ojs_url"));
    assert!(error.message.contains("adapter.url"), "{}", error.message);
    let error = Config::from_value(&json!({
        "url": "http://a:8080",
        "outbox": {"table_name": "one_outbox", "table": "two_outbox"}
    }))
    .unwrap_err();
    assert_eq!(error.field.as_deref(), Some("adapter.outbox.table_name"));
    assert!(
        error.message.contains("adapter.outbox.table"),
        "{}",
        error.message
    );
    // The same value twice, or one of them null (a binding's unset setting), is one key.
    let same = Config::from_value(&json!({
        "ojs_url": "http://a:8080", "url": "http://a:8080",
        "outbox": {"table_name": "one_outbox", "table": "one_outbox"}
    }))
    .unwrap();
    assert_eq!(same.ojs_url, "http://a:8080");
    assert_eq!(same.outbox.table_name, "one_outbox");
    let unset = Config::from_value(&json!({"ojs_url": null, "url": "http://b:8080"})).unwrap();
    assert_eq!(unset.ojs_url, "http://b:8080");
}
