//! The relay's database URL from a framework's connection settings: one rule for Django,
//! ActiveRecord and knex. (The PG* fallback is in db_url_env.rs: it sets variables.)

use ojs_bridge::ErrorCode;
use ojs_bridge::db_url::{ConnectionParts, from_parts};

fn url(json: &str) -> Result<String, ojs_outbox::Error> {
    from_parts(&ConnectionParts::from_json(json).unwrap())
}

#[test]
fn mysql_parts_become_a_mysql_url() {
    for engine in [
        "django.db.backends.mysql",
        "mysql",
        "mysql2",
        "mariadb",
        "trilogy",
    ] {
        let text = url(&format!(
            r#"{{"engine": "{engine}", "database": "app", "host": "db.internal", "port": 3307,
                "user": "ojs", "password": "p@ss"}}"#
        ))
        .unwrap();
        assert_eq!(text, "mysql://ojs:p%40ss@db.internal:3307/app", "{engine}");
    }
    let text = url(r#"{"engine": "mysql2", "database": "app", "host": "/run/mysqld/mysqld.sock", "user": "u"}"#).unwrap();
    assert_eq!(
        text,
        "mysql://u@localhost/app?socket=/run/mysqld/mysqld.sock"
    );
}

#[test]
fn postgres_parts_become_a_url_with_encoded_credentials() {
    for engine in [
        "django.db.backends.postgresql",
        "postgresql",
        "pg",
        "postgis",
    ] {
        let text = url(&format!(
            r#"{{"engine": "{engine}", "database": "app db", "host": "db.internal", "port": 6432,
                "user": "ojs", "password": "p@ss:w/rd", "sslmode": "require"}}"#
        ))
        .unwrap();
        assert_eq!(
            text, "postgres://ojs:p%40ss%3Aw%2Frd@db.internal:6432/app%20db?sslmode=require",
            "{engine}"
        );
    }
    // A socket directory goes into the query; the port may be text.
    let text = url(r#"{"engine": "postgresql", "database": "app", "host": "/var/run/postgresql", "port": "5433", "user": "u", "password": "p"}"#).unwrap();
    assert_eq!(
        text,
        "postgres://u:p@localhost:5433/app?host=/var/run/postgresql"
    );
    // A URL the framework already has is used as it is.
    let text = url(r#"{"engine": "pg", "url": "postgres://a@b/c"}"#).unwrap();
    assert_eq!(text, "postgres://a@b/c");
}

#[test]
fn sqlite_files_become_absolute_and_memory_is_refused() {
    let text =
        url(r#"{"engine": "sqlite3", "database": "db/dev.sqlite3", "base_dir": "/srv/app"}"#)
            .unwrap();
    assert_eq!(text, "sqlite:///srv/app/db/dev.sqlite3");
    let text = url(r#"{"engine": "better-sqlite3", "database": "/tmp/a.db"}"#).unwrap();
    assert_eq!(text, "sqlite:///tmp/a.db");
    let text = url(r#"{"engine": "sqlite", "database": "file:/tmp/b.db"}"#).unwrap();
    assert_eq!(text, "sqlite:///tmp/b.db");
    for memory in [
        r#"{"engine": "sqlite3", "database": ":memory:", "setting": "config.database_url"}"#,
        r#"{"engine": "sqlite3", "database": "file::memory:?cache=shared", "setting": "config.database_url"}"#,
        r#"{"engine": "sqlite3", "database": "file:x?mode=memory", "setting": "config.database_url"}"#,
        r#"{"engine": "sqlite3", "setting": "config.database_url"}"#,
    ] {
        let error = url(memory).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidDatabaseUrl, "{memory}");
        assert_eq!(error.field.as_deref(), Some("database_url"));
        assert!(
            error.message.contains("config.database_url"),
            "{}",
            error.message
        );
    }
}

#[test]
fn other_databases_and_unknown_settings_are_refused() {
    let error = url(
        r#"{"engine": "django.db.backends.oracle", "setting": "OJS_CONFIG[\"database_url\"]"}"#,
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidDatabaseUrl);
    assert!(error.message.contains("oracle"), "{}", error.message);
    assert!(error.message.contains("OJS_CONFIG"), "{}", error.message);
    let error = ConnectionParts::from_json(r#"{"engine": "pg", "hostname": "x"}"#).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidDatabaseUrl);
}
