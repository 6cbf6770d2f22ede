//! The inbox's schema under versioned migrations, on real SQLite files: a version-1 inbox
//! (the schema from before versioning, `tests/inputs/inbox-v1.sql`) opened by today's
//! arrival, and an inbox from a newer arrival refused.

use crate::util::{root, temp_dir, ARRIVAL};
use arrival::facts::envelope::{Envelope, Source};
use arrival::facts::inbox::Verdict;
use arrival::pipeline::{batch, schema, store};
use std::path::Path;
use std::process::Command;

/// Writes the version-1 fixture into a new SQLite file at `path`.
fn version_1_inbox(path: &Path) {
    let sql = std::fs::read_to_string(root().join("tests/inputs/inbox-v1.sql")).unwrap();
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(&sql).unwrap();
    assert_eq!(
        schema::version(&conn).unwrap(),
        1,
        "the fixture is version 1"
    );
}

fn recorded(conn: &rusqlite::Connection) -> Vec<(i64, String)> {
    conn.prepare("SELECT version, name FROM schema_migrations ORDER BY version")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn a_version_1_inbox_is_migrated_in_place_and_keeps_what_it_held() {
    let dir = temp_dir("inbox-v1");
    let path = dir.path().join("inbox.db");
    version_1_inbox(&path);
    let conn = store::open(&path.to_path_buf().into(), 5_000).unwrap();
    assert_eq!(
        schema::version(conn.sqlite().unwrap()).unwrap(),
        schema::CURRENT
    );
    let expected: Vec<(i64, String)> = schema::MIGRATIONS
        .iter()
        .map(|m| (m.version, m.name.to_owned()))
        .collect();
    assert_eq!(
        recorded(conn.sqlite().unwrap()),
        expected,
        "version 1 adopted, the rest applied"
    );
    let failures: i64 = conn
        .sqlite()
        .unwrap()
        .query_row("SELECT count(*) FROM decision_failures", [], |row| {
            row.get(0)
        })
        .unwrap();
    assert_eq!(failures, 0, "version 2's table is there, empty");
    let snapshot = store::snapshot(&conn).unwrap();
    assert_eq!(snapshot.facts.len(), 1);
    assert_eq!(
        (snapshot.facts[0].0, snapshot.facts[0].1.as_str()),
        (Source::Finance, "PAY-1")
    );
    assert_eq!(snapshot.counters.accepted, 1);
    assert!(snapshot.verdicts.contains_key("1714557600000-0"));
    // The migrated inbox still decides on what it held: the stored payment delivered again
    // under a new entry is a duplicate of it, not a second fact.
    let envelope = Envelope::parse(snapshot.facts[0].2.as_bytes(), Source::Finance).unwrap();
    let item = batch::Item {
        entry: "1714557700000-0".into(),
        envelope,
        received_ms: None,
        consumer: None,
        deliveries: None,
    };
    let decided = batch::decide(&conn, None, &[item], &|_| None).unwrap();
    assert_eq!(decided.outcomes, [Ok(Verdict::Duplicate)]);
    decided.commit().unwrap();
    drop(conn);
    let again = store::open(&path.to_path_buf().into(), 5_000).unwrap();
    assert_eq!(
        recorded(again.sqlite().unwrap()),
        expected,
        "opening a current inbox changes nothing"
    );
}

#[test]
fn an_open_conflict_of_a_version_1_inbox_stays_open_and_can_be_resolved_after_migration() {
    let dir = temp_dir("inbox-v1-conflict");
    let path = dir.path().join("inbox.db");
    version_1_inbox(&path);
    let variant = r#"{"application_id":"app-1","business_key":"APP-1","data":{"amount":"2"},"event_id":"PAY-1","event_type":"PAYMENT_CONFIRMED","material_version":1,"schema_version":"1","sent_at":"2024-05-01T10:00:00Z","source":"finance","tenant_id":"t-1"}"#;
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "INSERT INTO evidence VALUES (?1, 'finance', 'PAY-1')",
            [variant],
        )
        .unwrap();
        conn.execute("INSERT INTO open_conflicts VALUES ('t-1', 'app-1')", [])
            .unwrap();
    }
    let conn = store::open(&path.to_path_buf().into(), 5_000).unwrap();
    let app = arrival::facts::application::AppKey {
        tenant_id: "t-1".into(),
        application_id: "app-1".into(),
    };
    let snapshot = store::snapshot(&conn).unwrap();
    assert_eq!(snapshot.open_conflicts, [app.clone()].into());
    let id = arrival::facts::envelope::FactId {
        tenant_id: "t-1".into(),
        source: Source::Finance,
        event_id: "PAY-1".into(),
    };
    let kept = arrival::pipeline::operator::resolve(
        &conn,
        &id,
        &arrival::pipeline::operator::Keep::OnlyVariant,
        "the variant carries the amount",
    )
    .unwrap()
    .unwrap();
    assert_eq!(kept, arrival::facts::inbox::Kept::Variant);
    let snapshot = store::snapshot(&conn).unwrap();
    assert!(snapshot.open_conflicts.is_empty());
    assert!(
        snapshot.facts[0].2.contains("\"amount\":\"2\""),
        "{:?}",
        snapshot.facts
    );
    assert_eq!(
        snapshot.evidence.len(),
        1,
        "the first content stays recorded"
    );
}

#[test]
fn a_variant_an_older_build_recorded_for_a_number_spelled_otherwise_is_no_conflict_after_migration()
{
    let dir = temp_dir("inbox-v1-numbers");
    let path = dir.path().join("inbox.db");
    version_1_inbox(&path);
    let spelled = |amount: &str| {
        format!(
            r#"{{"application_id":"app-1","business_key":"APP-1","data":{{"amount":{amount}}},"event_id":"PAY-2","event_type":"PAYMENT_CONFIRMED","material_version":1,"schema_version":"1","sent_at":"2024-05-01T10:00:00Z","source":"finance","tenant_id":"t-1"}}"#
        )
    };
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "INSERT INTO facts VALUES ('finance', 'PAY-2', 't-1', 'app-1', ?1, '1714557600001-0')",
            [spelled("100")],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO evidence VALUES (?1, 'finance', 'PAY-2')",
            [spelled("100.0")],
        )
        .unwrap();
        conn.execute("INSERT INTO open_conflicts VALUES ('t-1', 'app-1')", [])
            .unwrap();
    }
    let conn = store::open(&path.to_path_buf().into(), 5_000).unwrap();
    let snapshot = store::snapshot(&conn).unwrap();
    assert!(
        snapshot.open_conflicts.is_empty(),
        "{:?}",
        snapshot.open_conflicts
    );
    assert!(snapshot.evidence.is_empty(), "{:?}", snapshot.evidence);
}

#[test]
fn an_inbox_from_a_newer_arrival_is_refused_with_exit_2_and_left_as_it_was() {
    let dir = temp_dir("inbox-newer");
    let path = dir.path().join("inbox.db");
    drop(store::open(&path.to_path_buf().into(), 5_000).unwrap());
    let newer = schema::CURRENT + 1;
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "INSERT INTO schema_migrations VALUES (?1, 'from a newer arrival')",
            [newer],
        )
        .unwrap();
    assert!(matches!(
        store::open(&path.to_path_buf().into(), 5_000),
        Err(schema::SchemaError::Newer { found, .. }) if found == newer
    ));
    let output = Command::new(ARRIVAL)
        .args(["pipeline", "status", "--db"])
        .arg(&path)
        .env_remove("ARRIVAL_DB")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(path.to_str().unwrap()) && stderr.contains("newer arrival"),
        "{stderr}"
    );
    let conn = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(schema::version(&conn).unwrap(), newer, "left as it was");
}
