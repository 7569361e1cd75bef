//! Absent PostgreSQL parts come from PGHOST, PGPORT, PGUSER, PGPASSWORD and PGDATABASE, as
//! the host drivers read them. One test in its own binary: it sets process variables.

use ojs_bridge::db_url::{ConnectionParts, from_parts};

#[test]
fn absent_postgres_parts_come_from_the_pg_variables() {
    // SAFETY: the only test of this binary; no other thread reads the environment.
    unsafe {
        std::env::set_var("PGHOST", "pg.internal");
        std::env::set_var("PGPORT", "6543");
        std::env::set_var("PGUSER", "envuser");
        std::env::set_var("PGPASSWORD", "envpass");
        std::env::set_var("PGDATABASE", "envdb");
    }
    let parts = ConnectionParts::from_json(r#"{"engine": "postgresql"}"#).unwrap();
    assert_eq!(
        from_parts(&parts).unwrap(),
        "postgres://envuser:envpass@pg.internal:6543/envdb"
    );
    // Given parts win over the variables.
    let parts = ConnectionParts::from_json(
        r#"{"engine": "postgresql", "host": "h", "database": "d", "user": "u"}"#,
    )
    .unwrap();
    assert_eq!(from_parts(&parts).unwrap(), "postgres://u:envpass@h:6543/d");
}
