//! Runs every conformance case on SQLite and PostgreSQL through the Rust-native adapter and
//! prints the matrix (case x database). PostgreSQL comes from `OJS_TEST_DATABASE_URL`
//! (scripts/test.sh starts a throwaway server); without it the column is skipped, and under CI
//! that is a failure, since CI must prove both databases.

use ojs_conformance::{Database, load_cases, run_case};
use ojs_devserver::DevServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_case_passes_on_sqlite_and_postgres() {
    let cases = load_cases();
    assert!(!cases.is_empty(), "no conformance cases found");
    let dir = std::env::temp_dir().join(format!("ojs-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut databases = vec![Database::Sqlite { dir: dir.clone() }];
    match std::env::var("OJS_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => databases.push(Database::Postgres { url }),
        _ if std::env::var_os("CI").is_some() => {
            panic!("OJS_TEST_DATABASE_URL is unset under CI: run scripts/test.sh")
        }
        _ => eprintln!(
            "SKIP postgres column: OJS_TEST_DATABASE_URL is unset (scripts/test.sh sets it)"
        ),
    }
    // One dev backend per database, so the two columns run side by side.
    let mut columns = Vec::new();
    for database in databases {
        let cases = cases.clone();
        columns.push(tokio::spawn(async move {
            let server = DevServer::start(0).await.expect("dev backend starts");
            let mut results = Vec::new();
            for case in &cases {
                let result = run_case(case, &database, &server.url()).await;
                results.push(result);
            }
            server.shutdown().await;
            (database.name(), results)
        }));
    }
    let mut matrix = Vec::new();
    for column in columns {
        matrix.push(column.await.expect("column runs"));
    }

    let width = cases.iter().map(|c| c.id.len()).max().unwrap_or(10);
    let mut report = String::new();
    let mut header = format!("{:width$}", "case");
    for (name, _) in &matrix {
        header.push_str(&format!("  {name:8}"));
    }
    report.push_str(&format!("{header}\n"));
    // One line per case and database for scripts/matrix.sh, which joins every runner's column.
    let mut tsv = String::new();
    let (mut passed, mut failed) = (0, 0);
    let mut failures = Vec::new();
    for (index, case) in cases.iter().enumerate() {
        let mut line = format!("{:width$}", case.id);
        for (name, results) in &matrix {
            let database = if *name == "postgres" {
                "postgresql"
            } else {
                name
            };
            let outcome = if results[index].is_ok() {
                "PASS"
            } else {
                "FAIL"
            };
            tsv.push_str(&format!("{}\t{database}\t{outcome}\n", case.id));
            match &results[index] {
                Ok(()) => {
                    passed += 1;
                    line.push_str("  PASS    ");
                }
                Err(why) => {
                    failed += 1;
                    line.push_str("  FAIL    ");
                    failures.push(format!(
                        "{} [{name}] ({}): {why}",
                        case.id,
                        case.spec.join(", ")
                    ));
                }
            }
        }
        report.push_str(&format!("{line}\n"));
    }
    for failure in &failures {
        report.push_str(&format!("FAILED {failure}\n"));
    }
    report.push_str(&format!("conformance: {passed} passed, {failed} failed\n"));
    println!("\n{report}");
    // scripts/test.sh prints the matrix after the run.
    let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    std::fs::write(target.join("conformance-matrix.txt"), &report).expect("matrix written");
    std::fs::create_dir_all(target.join("matrix")).expect("target/matrix");
    std::fs::write(target.join("matrix/rust.tsv"), tsv).expect("matrix written");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "{} conformance failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
