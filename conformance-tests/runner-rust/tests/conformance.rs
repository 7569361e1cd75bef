//! Runs every conformance case on SQLite, PostgreSQL and MariaDB through the bridge
//! (`bridge::Bridge`, as the bindings call it) and prints the matrix (case x database).
//! PostgreSQL comes from `OJS_TEST_DATABASE_URL`, MariaDB from `OJS_TEST_MYSQL_URL`
//! (scripts/test.sh starts throwaway servers); without one its column is skipped, and under CI
//! that is a failure, since CI must prove every database.

use ojs_conformance::{Database, load_cases, run_case};
use ojs_devserver::DevServer;

#[test]
fn every_case_passes_on_every_database() {
    let mut cases = load_cases();
    assert!(!cases.is_empty(), "no conformance cases found");
    // A local run may pick cases by a part of their id; CI runs them all.
    if let Ok(part) = std::env::var("OJS_CONFORMANCE_ONLY")
        && std::env::var_os("CI").is_none()
    {
        cases.retain(|case| case.id.contains(&part));
        assert!(!cases.is_empty(), "no case id contains {part:?}");
    }
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
    match std::env::var("OJS_TEST_MYSQL_URL") {
        Ok(url) if !url.is_empty() => databases.push(Database::Mysql { url }),
        _ if std::env::var_os("CI").is_some() => {
            panic!("OJS_TEST_MYSQL_URL is unset under CI: run scripts/test.sh")
        }
        _ => eprintln!("SKIP mysql column: OJS_TEST_MYSQL_URL is unset (scripts/test.sh sets it)"),
    }
    // The dev backend stands for another process: it serves from a runtime of its own while
    // the runners block in their calls (run_case is synchronous, like a binding's host).
    let backend_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("dev backend runtime");
    // One dev backend per database, so the two columns run side by side, one thread each.
    let servers: Vec<DevServer> = databases
        .iter()
        .map(|_| {
            backend_runtime
                .block_on(DevServer::start(0))
                .expect("dev backend starts")
        })
        .collect();
    let matrix: Vec<(&str, Vec<Result<(), String>>)> = std::thread::scope(|scope| {
        let columns: Vec<_> = databases
            .iter()
            .zip(&servers)
            .map(|(database, server)| {
                let (cases, url) = (&cases, server.url());
                scope.spawn(move || {
                    let results: Vec<_> = cases
                        .iter()
                        .map(|case| run_case(case, database, &url))
                        .collect();
                    (database.name(), results)
                })
            })
            .collect();
        columns
            .into_iter()
            .map(|column| column.join().expect("column runs"))
            .collect()
    });
    for server in servers {
        backend_runtime.block_on(server.shutdown());
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
            let database = match *name {
                "postgres" => "postgresql",
                "mysql" => "mariadb",
                name => name,
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
