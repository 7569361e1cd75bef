//! `Bridge::select_job_sql`: a host reads one outbox row by job id on its own connection, and
//! sees the row its open transaction staged, with the same column types on both databases.

use ojs_bridge::Bridge;
use sqlx::{AssertSqlSafe, Connection, Row};

fn bridge(database_url: &str) -> Bridge {
    let config = serde_json::json!({"adapter": {"ojs_url": "http://127.0.0.1:9", "database_url": database_url,
                                                "outbox": {"table_name": "ojs_select_job"}}});
    Bridge::new(&config.to_string()).unwrap()
}

/// On a fresh table: stage one job in a transaction of the host connection `$host`, read it
/// back through the same transaction with the core's SELECT, check every column, roll back.
/// `$attempts`: the integer type the driver decodes `attempts` as.
macro_rules! reads_its_own_row {
    ($bridge:expr, $host:expr, $dialect:literal, $placeholder:literal, $attempts:ty) => {{
        let (bridge, host) = ($bridge, $host);
        sqlx::raw_sql(AssertSqlSafe(bridge.drop_table_sql($dialect).unwrap()))
            .execute(&mut *host)
            .await
            .unwrap();
        for ddl in bridge.create_table_sql($dialect).unwrap() {
            sqlx::raw_sql(AssertSqlSafe(ddl))
                .execute(&mut *host)
                .await
                .unwrap();
        }
        let mut tx = host.begin().await.unwrap();
        let staged = bridge
            .stage_job(
                $dialect,
                $placeholder,
                "email.welcome",
                "[7]",
                None,
                None,
                None,
            )
            .unwrap();
        let mut insert = sqlx::query(AssertSqlSafe(staged.sql.to_string()));
        for param in &staged.params {
            insert = insert.bind(param.clone());
        }
        insert.execute(&mut *tx).await.unwrap();
        let select = bridge.select_job_sql($dialect, $placeholder).unwrap();
        let row = sqlx::query(AssertSqlSafe(select))
            .bind(&staged.job_id)
            .fetch_one(&mut *tx)
            .await
            .expect("its own uncommitted row");
        assert_eq!(row.get::<String, _>(0), "email.welcome");
        assert_eq!(row.get::<String, _>(1), "[7]");
        assert_eq!(row.get::<String, _>(2), "pending");
        assert_eq!(row.get::<$attempts, _>(3), 0);
        assert_eq!(row.get::<Option<String>, _>(4), None);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let created = row.get::<i64, _>(5);
        assert!((now_ms - created).abs() < 60_000, "{created} vs {now_ms}");
        assert_eq!(row.get::<String, _>(6), "{}", "job_meta");
        tx.rollback().await.unwrap();
        sqlx::raw_sql(AssertSqlSafe(bridge.drop_table_sql($dialect).unwrap()))
            .execute(&mut *host)
            .await
            .unwrap();
    }};
}

fn block_on<F: std::future::Future>(work: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(work)
}

#[test]
fn a_host_reads_its_own_staged_row_on_sqlite() {
    let dir = std::env::temp_dir().join(format!("ojs-select-job-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.join("host.db").display());
    let bridge = bridge(&url);
    block_on(async {
        let mut host = sqlx::SqliteConnection::connect(&url).await.unwrap();
        reads_its_own_row!(&bridge, &mut host, "sqlite", "question", i64);
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_host_reads_its_own_staged_row_on_postgres() {
    let Ok(url) = std::env::var("OJS_TEST_DATABASE_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "OJS_TEST_DATABASE_URL is unset under CI"
        );
        eprintln!("SKIP postgres: OJS_TEST_DATABASE_URL is unset (scripts/test.sh sets it)");
        return;
    };
    let bridge = bridge(&url);
    block_on(async {
        let mut host = sqlx::PgConnection::connect(&url).await.unwrap();
        reads_its_own_row!(&bridge, &mut host, "postgresql", "dollar", i32);
    });
}

/// A host that read an encrypted row itself gets the staged args back through the bridge (its
/// key ring), plain args as they are, the envelope without a ring, and an error that carries
/// no data when its ring cannot open them.
#[test]
fn open_args_gives_back_what_was_staged() {
    let key = ojs_outbox::codec::base64_encode(&[5u8; 32]);
    let config = serde_json::json!({"adapter": {"ojs_url": "http://127.0.0.1:9",
        "database_url": "sqlite::memory:", "encryption": {"key_id": "k", "keys": {"k": key}}}});
    let sealing = Bridge::new(&config.to_string()).unwrap();
    let staged = sealing
        .stage_job(
            "sqlite",
            "question",
            "card.capture",
            r#"[{"card":"4111"}]"#,
            None,
            None,
            None,
        )
        .unwrap();
    let args = staged.params[2].clone().unwrap();
    let meta = staged.params[4].clone().unwrap();
    assert!(
        args.contains("ojs_encoded") && !args.contains("4111"),
        "{args}"
    );
    let opened: serde_json::Value =
        serde_json::from_str(&sealing.open_args(&args, &meta).unwrap()).unwrap();
    assert_eq!(opened, serde_json::json!([{"card": "4111"}]));
    assert_eq!(sealing.open_args("[7]", "{}").unwrap(), "[7]");
    let keyless = bridge("sqlite::memory:");
    assert_eq!(
        keyless.open_args(&args, &meta).unwrap(),
        args,
        "no ring: the envelope"
    );
    let other_key = ojs_outbox::codec::base64_encode(&[6u8; 32]);
    let config = serde_json::json!({"adapter": {"ojs_url": "http://127.0.0.1:9",
        "database_url": "sqlite::memory:", "encryption": {"key_id": "k", "keys": {"k": other_key}}}});
    let wrong = Bridge::new(&config.to_string()).unwrap();
    let error = wrong.open_args(&args, &meta).unwrap_err();
    assert!(!error.message.contains("4111"), "{}", error.message);
}
