//! The durable store against real databases: SQLite files in temporary folders and the
//! PostgreSQL server at `ARRIVAL_DATABASE_URL` (default the local one), one fresh database
//! per test, dropped after. A PostgreSQL that does not answer fails the test with what to
//! install and run: it is never skipped.

use crate::pg::{PgDatabase, DEFAULT_URL};
use crate::util::{arrival, ok, root, temp_dir, TempDir, ARRIVAL};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn b62() -> PathBuf {
    root().join("fixtures/B62-15-events.json")
}

/// The two stores every backend test runs on.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    const ALL: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];

    /// The name the drills report (`"backend"`).
    fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// A fresh, empty database on this backend (a file named `name` in a temporary folder,
    /// or a new PostgreSQL database), and a temporary folder for the test's own files.
    fn fresh(self, name: &str) -> Db {
        let folder = temp_dir("store");
        let (url, postgres) = match self {
            Backend::Sqlite => (
                format!("sqlite:{}", folder.path().join(name).display()),
                None,
            ),
            Backend::Postgres => {
                let database = PgDatabase::new();
                (database.url.clone(), Some(database))
            }
        };
        Db {
            backend: self,
            url,
            folder,
            _postgres: postgres,
        }
    }

    /// A fresh store with B62-15's initial cards.
    fn b62_store(self, name: &str) -> Db {
        let db = self.fresh(name);
        let fixture = b62();
        ok(&[
            "store",
            "init",
            "--db",
            &db.url,
            "--fixture",
            fixture.to_str().expect("UTF-8"),
        ]);
        db
    }
}

/// A database of one backend for one test, removed (with its folder) when dropped.
struct Db {
    backend: Backend,
    /// The `--db` text.
    url: String,
    /// The test's own files (and the SQLite file).
    folder: TempDir,
    _postgres: Option<PgDatabase>,
}

impl Db {
    /// The `--db` arguments a drill takes for this backend: none on SQLite (a drill makes
    /// its own files), the fresh database on PostgreSQL.
    fn drill_args(&self) -> Vec<&str> {
        match self.backend {
            Backend::Sqlite => Vec::new(),
            Backend::Postgres => vec!["--db", &self.url],
        }
    }

    /// The schema versions recorded in `schema_migrations`.
    fn migrations(&self) -> Vec<i64> {
        match self.backend {
            Backend::Sqlite => {
                let path = self.url.strip_prefix("sqlite:").expect("a SQLite url");
                let connection = rusqlite::Connection::open(path).expect("open");
                let versions = connection
                    .prepare("SELECT version FROM schema_migrations")
                    .expect("prepare")
                    .query_map([], |row| row.get(0))
                    .expect("query")
                    .map(|row| row.expect("a row"))
                    .collect();
                versions
            }
            Backend::Postgres => {
                let mut client =
                    postgres::Client::connect(&self.url, postgres::NoTls).expect("connect");
                client
                    .query("SELECT version FROM schema_migrations", &[])
                    .expect("query")
                    .iter()
                    .map(|row| row.get(0))
                    .collect()
            }
        }
    }
}

/// One test body run on each backend: `backend_test! { fn sentence(backend) { ... } }`
/// makes the tests `sentence::on_sqlite` and `sentence::on_postgres`.
macro_rules! backend_test {
    ($(#[doc = $doc:literal])* fn $name:ident($backend:ident) $body:block) => {
        $(#[doc = $doc])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn body($backend: Backend) $body

            #[test]
            fn on_sqlite() {
                body(Backend::Sqlite)
            }

            #[test]
            fn on_postgres() {
                body(Backend::Postgres)
            }
        }
    };
}

fn report_keys(value: &Value) -> Value {
    serde_json::json!({
        "final": value["final"],
        "paused": value["paused"],
        "replacements": value["replacements"],
        "unresolved": value["unresolved"],
        "unresolved_detail": value["unresolved_detail"],
    })
}

/// init, ingest and reconcile B62-15, then compare `show --json` with `replay --json`.
fn b62_ends_as_replay(db: &str) {
    let fixture = b62();
    let fixture = fixture.to_str().expect("a UTF-8 path");
    ok(&["store", "init", "--db", db, "--fixture", fixture]);
    let acks = ok(&["store", "ingest", "--db", db, "--fixture", fixture]);
    let acks: Vec<Value> = acks
        .lines()
        .map(|line| serde_json::from_str(line).expect("an acknowledgement line"))
        .collect();
    assert_eq!(acks.len(), 10, "one acknowledgement per delivery");
    assert_eq!(acks[1]["decision"], "duplicate");
    assert_eq!(acks[5]["decision"], "conflict_changed_payload");
    ok(&["store", "reconcile", "--db", db, "--fixture", fixture]);
    let store: Value =
        serde_json::from_str(&ok(&["store", "show", "--db", db, "--json"])).expect("JSON");
    let replay: Value = serde_json::from_str(&ok(&["replay", "--json", fixture])).expect("JSON");
    assert_eq!(report_keys(&store), report_keys(&replay));
    assert_eq!(store["unresolved"], serde_json::json!(["e-204", "e-300"]));
    assert_eq!(
        store["replacements"],
        serde_json::json!({"event": 2, "authority": 2})
    );
    // Reconciling again changes nothing: no card is paused any more.
    assert_eq!(
        ok(&["store", "reconcile", "--db", db, "--fixture", fixture]),
        ""
    );
}

backend_test! {
    fn b62_15_ends_in_the_contracts_final_state(backend) {
        let db = backend.fresh("b62.db");
        b62_ends_as_replay(&db.url);
    }
}

backend_test! {
    fn migrations_are_recorded_once_and_init_is_idempotent(backend) {
        let db = backend.fresh("m.db");
        let fixture = b62();
        let fixture = fixture.to_str().expect("a UTF-8 path");
        assert!(ok(&["store", "init", "--db", &db.url, "--fixture", fixture])
            .contains("2 initial card(s) added"));
        assert!(ok(&["store", "init", "--db", &db.url, "--fixture", fixture])
            .contains("0 initial card(s) added"));
        assert_eq!(db.migrations(), vec![1]);
        if backend == Backend::Sqlite {
            let path = db.url.strip_prefix("sqlite:").expect("a SQLite url");
            let connection = rusqlite::Connection::open(path).expect("open");
            let mode: String = connection
                .query_row("PRAGMA journal_mode", [], |row| row.get(0))
                .expect("pragma");
            assert_eq!(mode, "wal");
        }
    }
}

backend_test! {
    fn an_exact_redelivery_on_stdin_is_a_duplicate_and_acks_follow_the_input_order(backend) {
        let store = backend.b62_store("s.db");
        let db = &store.url;
        let event = r#"{"event_id":"e-1","object_id":"card-7","object_version":11,"type":"card.snapshot","state":{"stage":"x"}}"#;
        let input = format!("{{\"delivery\": 5, \"event\": {event}}}\n\n{event}\n");
        let mut child = Command::new(ARRIVAL)
            .args(["store", "ingest", "--db", db])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("arrival runs");
        std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), input.as_bytes())
            .expect("write");
        let output = child.wait_with_output().expect("ends");
        assert!(output.status.success());
        let lines: Vec<Value> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).expect("JSON"))
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["delivery"], 5);
        assert_eq!(lines[0]["decision"], "applied");
        assert_eq!(
            lines[1]["delivery"], 3,
            "a raw event's delivery number is its line number"
        );
        assert_eq!(lines[1]["decision"], "duplicate");
        assert_eq!(lines[1]["ack"], "applied");
        // The line number labels the acknowledgement and nothing else: the audit keeps
        // the wrapper's delivery number, and none for the raw event.
        let (audit, _) = audit_and_holds(db);
        let decisions: Vec<(Option<&str>, Option<i64>)> = audit
            .iter()
            .filter(|row| row[0].text() != Some("card"))
            .map(|row| (row[0].text(), row[2].int()))
            .collect();
        assert_eq!(decisions, [(Some("decided"), Some(5)), (Some("duplicate"), None)]);
    }
}

backend_test! {
    fn bad_input_is_exit_2_naming_the_source_and_line(backend) {
        let store = backend.fresh("bad.db");
        let db = &store.url;
        ok(&["store", "init", "--db", db]);
        let lines = store.folder.path().join("deliveries.jsonl");
        std::fs::write(&lines, "{\"delivery\": 1, \"event\": {}}\n{not json\n").expect("write");
        let output = arrival(&[
            "store",
            "ingest",
            "--db",
            db,
            "--file",
            lines.to_str().expect("UTF-8"),
        ]);
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("deliveries.jsonl") && stderr.contains("line 2"),
            "{stderr}"
        );
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).lines().count(),
            1,
            "line 1 was acknowledged"
        );

        let output = arrival(&["store", "show", "--db", "mysql://localhost/x"]);
        assert_eq!(output.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&output.stderr).contains("unknown database"));
    }
}

fn drill(args: &[&str]) -> (bool, Value) {
    let output = arrival(args);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "arrival {args:?}: no JSON report ({error}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    match output.status.code() {
        Some(0) => (true, report),
        Some(1) => (false, report),
        other => panic!(
            "arrival {args:?} ended with {other:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

/// `arrival store drill KIND FIXTURE ARGS... [--db URL] --json` on this database's backend.
fn drill_on(db: &Db, kind: &str, fixture: &Path, args: &[&str]) -> (bool, Value) {
    let mut all = vec!["store", "drill", kind, fixture.to_str().expect("UTF-8")];
    all.extend_from_slice(args);
    all.extend(db.drill_args());
    all.push("--json");
    drill(&all)
}

backend_test! {
    fn crash_drill_survives_kills_of_b62_15(backend) {
        let db = backend.fresh("unused.db");
        let (passed, report) = drill_on(&db, "crash", &b62(), &["--kills", "20"]);
        assert!(passed, "{report:#}");
        assert!(report["kills"].as_u64().expect("kills") >= 20);
        assert_eq!(report["backend"], backend.name());
    }
}

backend_test! {
    fn crash_drill_at_batch_8_survives_kills_and_catches_ack_before_commit(backend) {
        // Batches of up to 8 deliveries per transaction, killed anywhere: every
        // acknowledged delivery of a batch is still recorded, and a store that answers a
        // batch before committing it is still caught.
        let db = backend.fresh("unused.db");
        let args = ["--kills", "20", "--batch", "8"];
        let (passed, report) = drill_on(&db, "crash", &b62(), &args);
        assert!(passed, "{report:#}");
        let mut caught = false;
        for seed in ["1", "2", "3"] {
            let args = ["--kills", "20", "--batch", "8", "--seed", seed];
            let mutant = [&args[..], &["--mutant", "ack-before-commit"]].concat();
            caught |= !drill_on(&db, "crash", &b62(), &mutant).0;
        }
        assert!(caught, "ack-before-commit survived three seeds at batch 8");
    }
}

/// The crash drill's runs that must catch `mutant` on this backend: (kills, seed).
///
/// PostgreSQL commits what a killed client already sent, so an acknowledgement written
/// just before COMMIT is exposed only by a kill in between: half the drill's kills land
/// right after the sender read an acknowledgement. Kills as CI runs them: on PostgreSQL 20
/// for ack-before-commit (as the surviving drill), three seeds, and 200 for
/// two-transactions, whose window only a timed kill can hit; on SQLite 200 with the
/// drill's default seed.
fn crash_runs(backend: Backend, mutant: &str) -> Vec<(&'static str, Option<&'static str>)> {
    match (backend, mutant) {
        (Backend::Sqlite, _) => vec![("200", None)],
        (Backend::Postgres, "ack-before-commit") => {
            vec![("20", Some("1")), ("20", Some("2")), ("20", Some("3"))]
        }
        (Backend::Postgres, _) => vec![("200", Some("1"))],
    }
}

fn crash_drill_catches(backend: Backend, mutant: &str) {
    let db = backend.fresh("unused.db");
    for (kills, seed) in crash_runs(backend, mutant) {
        let mut args = vec!["--kills", kills, "--mutant", mutant];
        if let Some(seed) = seed {
            args.extend(["--seed", seed]);
        }
        let (passed, report) = drill_on(&db, "crash", &b62(), &args);
        assert!(
            !passed,
            "{mutant} survived on {}, seed {seed:?}: {report:#}",
            backend.name()
        );
    }
}

backend_test! {
    fn crash_drill_catches_a_store_that_acknowledges_before_it_commits(backend) {
        crash_drill_catches(backend, "ack-before-commit");
    }
}

backend_test! {
    fn crash_drill_catches_a_store_that_commits_card_and_record_separately(backend) {
        crash_drill_catches(backend, "two-transactions");
    }
}

fn generated(folder: &Path) -> PathBuf {
    let path = folder.join("gen.json");
    ok(&[
        "gen",
        "--cards",
        "2",
        "--deliveries",
        "120",
        "--out",
        path.to_str().expect("UTF-8"),
    ]);
    path
}

backend_test! {
    /// On SQLite, four receivers share one file.
    fn concurrent_drill_ends_in_the_spec_state(backend) {
        let db = backend.fresh("unused.db");
        let fixture = generated(db.folder.path());
        let (passed, report) = drill_on(
            &db,
            "concurrent",
            &fixture,
            &["--receivers", "4", "--runs", "3"],
        );
        assert!(passed, "{report:#}");
    }
}

#[test]
fn concurrent_drill_catches_a_store_that_reads_before_it_locks() {
    let database = PgDatabase::new();
    let folder = temp_dir("store");
    let fixture = generated(folder.path());
    let (passed, report) = drill(&[
        "store",
        "drill",
        "concurrent",
        fixture.to_str().expect("UTF-8"),
        "--receivers",
        "4",
        "--runs",
        "20",
        "--db",
        &database.url,
        "--mutant",
        "no-lock",
        "--json",
    ]);
    assert!(!passed, "the mutant survived: {report:#}");
}

backend_test! {
    fn reconciliation_keeps_passing_while_re_evaluated_holds_pause_the_card_again(backend) {
        // A card paused by an input without a version, then 30 more inputs without versions
        // held behind the pause: each reconciliation pass supersedes what it can and pauses the
        // card again on the next one, so it takes one pass per hold. The store must keep going
        // until the card is quiet, as replay's default order does.
        let store = backend.fresh("h.db");
        let folder = &store.folder;
        let deliveries: Vec<Value> = (1..=31)
            .map(|n| {
                serde_json::json!({"delivery": n, "event": {
                    "event_id": format!("m{n}"), "object_id": "c0", "type": "card.snapshot",
                    "state": {"s": format!("y{n}")}}})
            })
            .collect();
        let fixture = serde_json::json!({
            "initial": {"c0": {"version": 1, "state": {"s": "a"}}},
            "deliveries": deliveries,
            "authority": [{"object_id": "c0", "version": 2, "state": {"s": "auth"}}]
        });
        let path = folder.path().join("many-holds.json");
        std::fs::write(&path, fixture.to_string()).expect("written");
        let fixture = path.to_str().expect("a UTF-8 path");
        let db = store.url.clone();
        ok(&["store", "init", "--db", &db, "--fixture", fixture]);
        ok(&["store", "ingest", "--db", &db, "--fixture", fixture]);
        ok(&["store", "reconcile", "--db", &db, "--fixture", fixture]);
        let shown: Value =
            serde_json::from_str(&ok(&["store", "show", "--db", &db, "--json"])).expect("JSON");
        let replayed: Value = serde_json::from_str(&ok(&["replay", "--json", fixture])).expect("JSON");
        assert_eq!(shown["paused"], replayed["paused"], "{shown}");
        assert_eq!(shown["paused"], serde_json::json!([]));
        assert_eq!(shown["unresolved"], replayed["unresolved"]);
    }
}

/// Ingests `input` on standard input; (exit code, answer lines, standard error).
fn ingest(db: &str, input: &str) -> (Option<i32>, Vec<Value>, String) {
    let mut child = Command::new(ARRIVAL)
        .args(["store", "ingest", "--db", db])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("arrival runs");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_owned();
    let writer = std::thread::spawn(move || {
        let _ = std::io::Write::write_all(&mut stdin, input.as_bytes());
    });
    let output = child.wait_with_output().expect("ends");
    writer.join().expect("writer");
    let lines = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("an answer line is JSON"))
        .collect();
    (
        output.status.code(),
        lines,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Deliveries whose event id or card id the store cannot keep (a NUL character, more than
/// 1024 bytes), then an ordinary one.
fn unkeepable_ids_are_rejected_per_delivery(db: &str) -> Vec<Value> {
    let fixture = b62();
    ok(&[
        "store",
        "init",
        "--db",
        db,
        "--fixture",
        fixture.to_str().expect("UTF-8"),
    ]);
    // Incompressible, so PostgreSQL cannot squeeze it under its index row limit.
    let mut seed = 7u64;
    let long: String = (0..20_000)
        .map(|_| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            char::from(b'!' + ((seed >> 33) % 90) as u8)
        })
        .collect();
    let event = |id: &str, card: &str, version: u64| {
        serde_json::json!({"event_id": id, "object_id": card, "object_version": version,
            "type": "card.snapshot", "state": {"stage": format!("v{version}")}})
    };
    let lines = [
        serde_json::json!({"delivery": 1, "event": event("e-\u{0}-nul", "card-7", 20)}),
        serde_json::json!({"delivery": 2, "event": event(&long, "card-7", 21)}),
        serde_json::json!({"delivery": 3, "event": event("e-card-nul", "card-\u{0}", 22)}),
        serde_json::json!({"delivery": 4, "event": event("e-x", &long, 23)}),
        serde_json::json!({"delivery": 5, "event": event("e-fine", "card-7", 24)}),
    ];
    let input: String = lines.iter().map(|line| format!("{line}\n")).collect();
    let (code, answers, stderr) = ingest(db, &input);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(answers.len(), 5, "one answer per delivery: {answers:?}");
    for answer in &answers[..4] {
        assert_eq!(answer["ack"], "rejected", "{answer}");
        assert_eq!(answer["decision"], "rejected", "{answer}");
        assert!(answer["reason"]
            .as_str()
            .is_some_and(|reason| !reason.is_empty()));
    }
    assert_eq!(answers[4]["decision"], "applied", "the stream goes on");
    // Sent again, a rejected delivery is rejected again: nothing of it was kept.
    let (code, again, stderr) = ingest(db, &input);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(again[0]["ack"], "rejected");
    assert_eq!(again[4]["decision"], "duplicate");
    let shown: Value =
        serde_json::from_str(&ok(&["store", "show", "--db", db, "--json"])).expect("JSON");
    assert_eq!(shown["final"]["card-7"]["version"], 24);
    assert_eq!(shown["held"], serde_json::json!([]));
    answers
        .into_iter()
        .map(|mut answer| {
            answer["event_id"] = Value::Null;
            answer
        })
        .collect()
}

#[test]
fn ids_the_store_cannot_keep_are_rejected_per_delivery_alike_on_both_backends() {
    let answers: Vec<Vec<Value>> = Backend::ALL
        .into_iter()
        .map(|backend| unkeepable_ids_are_rejected_per_delivery(&backend.fresh("ids.db").url))
        .collect();
    assert_eq!(
        answers[0], answers[1],
        "both backends give the same answers"
    );
}

backend_test! {
    fn an_ingest_line_is_a_wellformed_wrapper_or_an_event_with_an_id_and_nothing_else(backend) {
        let store = backend.b62_store("lines.db");
        let (folder, db) = (&store.folder, store.url.clone());
        let event = |id: Option<&str>, version: u64| {
            let mut event = serde_json::json!({"object_id": "card-7", "object_version": version,
                "type": "card.snapshot", "state": {"stage": format!("v{version}")}});
            if let Some(id) = id {
                event["event_id"] = Value::from(id);
            }
            event
        };
        let cases = [
            // No event id, no wrapper: a line number is no identity (it repeats in every file).
            (event(None, 40).to_string(), "event_id"),
            (r#"{"delivery": 8}"#.to_owned(), "without `event`"),
            (
                serde_json::json!({"event": event(Some("e-w1"), 40)}).to_string(),
                "without `delivery`",
            ),
            (
                serde_json::json!({"delivery": 9, "event": event(Some("e-w2"), 40), "recieved_at": 1})
                    .to_string(),
                "unknown key `recieved_at`",
            ),
            (
                serde_json::json!({"delivry": 9, "event": event(Some("e-w3"), 40)}).to_string(),
                "unknown key `delivry`",
            ),
            ("[1, 2]".to_owned(), "not a JSON object"),
            (
                serde_json::json!({"delivery": -1, "event": event(Some("e-w4"), 40)}).to_string(),
                "`delivery` must be",
            ),
        ];
        for (case, (bad, says)) in cases.iter().enumerate() {
            let version = 20 + case as u64;
            let good = serde_json::json!({"delivery": 100 + case, "event": event(Some(&format!("e-good-{case}")), version)});
            let file = folder.path().join(format!("case-{case}.jsonl"));
            std::fs::write(&file, format!("{good}\n{bad}\n{good}\n")).expect("write");
            let output = arrival(&[
                "store",
                "ingest",
                "--db",
                &db,
                "--file",
                file.to_str().expect("UTF-8"),
            ]);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(
                output.status.code(),
                Some(2),
                "case {case} ({bad}): {stderr}"
            );
            assert!(
                stderr.contains(&format!("case-{case}.jsonl"))
                    && stderr.contains("line 2")
                    && stderr.contains(says),
                "case {case} ({bad}): {stderr}"
            );
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert_eq!(
                stdout.lines().count(),
                1,
                "only line 1 is answered: {stdout}"
            );
            let shown: Value =
                serde_json::from_str(&ok(&["store", "show", "--db", &db, "--json"])).expect("JSON");
            assert_eq!(
                shown["final"]["card-7"]["version"], version,
                "line 1 stays committed"
            );
        }
        // A raw event with an event id is still a line of its own.
        let (code, answers, stderr) = ingest(&db, &format!("{}\n", event(Some("e-raw"), 90)));
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(answers[0]["decision"], "applied");
    }
}

backend_test! {
    fn receivers_starting_together_on_a_fresh_database_all_find_one_schema(backend) {
        fn together(db: &str) {
            let fixture = b62();
            let children: Vec<_> = (0..8)
                .map(|_| {
                    Command::new(ARRIVAL)
                        .args(["store", "init", "--db", db, "--fixture"])
                        .arg(&fixture)
                        .stdin(Stdio::null())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .expect("arrival runs")
                })
                .collect();
            let mut added = 0;
            for child in children {
                let output = child.wait_with_output().expect("ends");
                let stdout = String::from_utf8_lossy(&output.stdout);
                assert!(
                    output.status.success(),
                    "{db}: an init failed: {stdout}{}",
                    String::from_utf8_lossy(&output.stderr)
                );
                assert!(stdout.contains("schema version 1"), "{stdout}");
                added += stdout
                    .split("version 1, ")
                    .nth(1)
                    .and_then(|rest| rest.split(' ').next())
                    .and_then(|count| count.parse::<u32>().ok())
                    .expect("a count of added cards");
            }
            assert_eq!(added, 2, "{db}: the fixture's two cards, added once");
            let shown: Value =
                serde_json::from_str(&ok(&["store", "show", "--db", db, "--json"])).expect("JSON");
            assert_eq!(shown["final"].as_object().map(|cards| cards.len()), Some(2));
        }
        // Three fresh databases: the race is won differently each time.
        for _ in 0..3 {
            let db = backend.fresh("fresh.db");
            together(&db.url);
            assert_eq!(db.migrations(), vec![1]);
        }
    }
}

#[test]
fn the_connect_error_names_only_what_the_command_line_reads() {
    let output = arrival(&[
        "store",
        "show",
        "--db",
        "postgres://postgres@127.0.0.1:1/none",
    ]);
    // A server that does not answer is the environment's failure: exit 3.
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot connect") && stderr.contains("--db"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("ARRIVAL_DATABASE_URL"),
        "the command line does not read ARRIVAL_DATABASE_URL: {stderr}"
    );
}

fn snapshot_line(id: &str, version: u64) -> String {
    format!(
        "{{\"delivery\": {version}, \"event\": {{\"event_id\": \"{id}\", \"object_id\": \"card-7\", \
         \"object_version\": {version}, \"type\": \"card.snapshot\", \"state\": {{\"stage\": \"v{version}\"}}}}}}\n"
    )
}

fn card_7_version(db: &str) -> Value {
    let shown: Value =
        serde_json::from_str(&ok(&["store", "show", "--db", db, "--json"])).expect("JSON");
    shown["final"]["card-7"]["version"].clone()
}

backend_test! {
    fn a_bad_line_in_a_batch_commits_and_answers_the_lines_before_it(backend) {
        let store = backend.b62_store("batch.db");
        let (folder, db) = (&store.folder, store.url.clone());
        let file = folder.path().join("batch.jsonl");
        let input = format!(
            "{}{}{}{{not json\n{}",
            snapshot_line("e-b1", 20),
            snapshot_line("e-b2", 21),
            snapshot_line("e-b3", 22),
            snapshot_line("e-b5", 23),
        );
        std::fs::write(&file, input).expect("write");
        let output = arrival(&[
            "store",
            "ingest",
            "--db",
            &db,
            "--batch",
            "10",
            "--file",
            file.to_str().expect("UTF-8"),
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("batch.jsonl") && stderr.contains("line 4"),
            "{stderr}"
        );
        let answers: Vec<Value> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).expect("JSON"))
            .collect();
        assert_eq!(
            answers.len(),
            3,
            "the three lines before the bad one are answered"
        );
        assert!(answers.iter().all(|answer| answer["decision"] == "applied"));
        assert_eq!(card_7_version(&db), 22, "and committed");
    }
}

backend_test! {
    fn a_snapshot_or_initial_card_the_store_cannot_keep_writes_nothing_and_names_its_place(backend) {
        let store = backend.b62_store("snap.db");
        let (folder, db) = (&store.folder, store.url.clone());
        let file = folder.path().join("snapshots.jsonl");
        std::fs::write(
            &file,
            "{\"object_id\": \"card-new\", \"version\": 1, \"state\": {\"s\": 1}}\n\
             {\"object_id\": \"card-\\u0000\", \"version\": 1, \"state\": {\"s\": 1}}\n",
        )
        .expect("write");
        let output = arrival(&[
            "store",
            "reconcile",
            "--db",
            &db,
            "--file",
            file.to_str().expect("UTF-8"),
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("snapshots.jsonl") && stderr.contains("line 2") && stderr.contains("NUL"),
            "{stderr}"
        );
        assert!(
            !stderr.contains("sqlite:"),
            "not the database's fault: {stderr}"
        );
        assert_eq!(String::from_utf8_lossy(&output.stdout), "");
        let shown: Value =
            serde_json::from_str(&ok(&["store", "show", "--db", &db, "--json"])).expect("JSON");
        assert!(shown["final"].get("card-new").is_none(), "{shown}");

        // The same card id in a fixture's initial cards: the fixture and the field are named,
        // and no store is created.
        let fixture = folder.path().join("bad-initial.json");
        let long = "x".repeat(2000);
        std::fs::write(
            &fixture,
            serde_json::json!({"initial": {(long.as_str()): {"version": 1, "state": {}}},
                "deliveries": []})
            .to_string(),
        )
        .expect("write");
        let fresh = folder.path().join("fresh.db");
        let output = arrival(&[
            "store",
            "init",
            "--db",
            &format!("sqlite:{}", fresh.display()),
            "--fixture",
            fixture.to_str().expect("UTF-8"),
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("bad-initial.json")
                && stderr.contains("initial")
                && stderr.contains("2000 bytes"),
            "{stderr}"
        );
        assert!(!fresh.exists(), "nothing written");
    }
}

/// `url` with `password` in its user part.
fn with_password(url: &str, password: &str) -> String {
    let start = url.find("://").expect("a URL") + 3;
    let at = start + url[start..].find('@').expect("a user part");
    let user = url[start..at].split(':').next().expect("a user");
    format!("{}{user}:{password}{}", &url[..start], &url[at..])
}

#[test]
fn connect_errors_give_the_servers_reason_and_never_the_password() {
    let admin = std::env::var("ARRIVAL_DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.into());
    let base = admin.split('?').next().expect("a URL");
    let cut = base.rfind('/').expect("a database path");
    let missing = with_password(
        &format!("{}/arrival_no_such_database", &base[..cut]),
        "s3cret-pw",
    );
    let output = arrival(&["store", "show", "--db", &missing]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // What the database says is the environment's failure (exit 3), not bad input.
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("arrival_no_such_database") && stderr.contains("does not exist"),
        "the server's reason: {stderr}"
    );
    assert!(
        !stderr.contains("installed and running"),
        "the server answered: {stderr}"
    );
    assert!(!stderr.contains("s3cret-pw"), "{stderr}");
    assert!(stderr.contains(":***@"), "{stderr}");

    // A store that opens: init's line names the database, without the password.
    let database = PgDatabase::new();
    let url = with_password(&database.url, "s3cret-pw");
    let output = arrival(&["store", "init", "--db", &url]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{all}");
    assert!(all.contains(":***@") && !all.contains("s3cret-pw"), "{all}");
}

backend_test! {
    fn ingest_lines_are_utf8_per_line_unique_keyed_and_the_store_must_exist(backend) {
        let store = backend.b62_store("small.db");
        let (folder, db) = (&store.folder, store.url.clone());
        let run = |name: &str, bytes: &[u8], extra: &[&str]| {
            let file = folder.path().join(name);
            std::fs::write(&file, bytes).expect("write");
            let mut args = vec!["store", "ingest", "--db", &db, "--file"];
            args.push(file.to_str().expect("UTF-8"));
            args.extend_from_slice(extra);
            arrival(&args)
        };
        // Not UTF-8 on line 2: line 1 is answered, line 2 named.
        let mut bytes = snapshot_line("e-u1", 30).into_bytes();
        bytes.extend_from_slice(b"{\"delivery\": 2, \"event\": \"\xff\"}\n");
        let output = run("latin1.jsonl", &bytes, &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("line 2") && stderr.contains("UTF-8"),
            "{stderr}"
        );
        assert_eq!(String::from_utf8_lossy(&output.stdout).lines().count(), 1);

        // A byte order mark at the start is skipped.
        let mut bytes = b"\xef\xbb\xbf".to_vec();
        bytes.extend_from_slice(snapshot_line("e-bom", 31).as_bytes());
        let output = run("bom.jsonl", &bytes, &[]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(card_7_version(&db), 31);

        // --batch 0 is bad input.
        let output = run(
            "zero.jsonl",
            snapshot_line("e-z", 32).as_bytes(),
            &["--batch", "0"],
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("--batch"), "{stderr}");
        assert_eq!(card_7_version(&db), 31);

        // The same key twice in one object.
        let twice = "{\"delivery\": 3, \"delivery\": 4, \"event\": {\"event_id\": \"e-d\"}}\n";
        let output = run("twice.jsonl", twice.as_bytes(), &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("line 1") && stderr.contains("`delivery` appears twice"),
            "{stderr}"
        );

        // show, ingest and reconcile do not create a store; init does.
        let missing = folder.path().join("missing.db");
        let missing_db = format!("sqlite:{}", missing.display());
        let fixture = b62();
        for args in [
            vec!["store", "show", "--db", &missing_db],
            vec![
                "store",
                "ingest",
                "--db",
                &missing_db,
                "--fixture",
                fixture.to_str().expect("UTF-8"),
            ],
            vec![
                "store",
                "reconcile",
                "--db",
                &missing_db,
                "--fixture",
                fixture.to_str().expect("UTF-8"),
            ],
        ] {
            let output = arrival(&args);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(
                stderr.contains("no store at") && stderr.contains("arrival store init"),
                "{stderr}"
            );
            assert!(!missing.exists(), "{args:?} created the file");
        }
    }
}

/// Every audit row and every hold of a store, in sequence order.
fn audit_and_holds(url: &str) -> (Vec<Vec<arrival::store::Val>>, Vec<Vec<arrival::store::Val>>) {
    let url = arrival::store::DbUrl::parse(url).expect("a database url");
    let mut store = arrival::store::Store::open(&url).expect("open");
    let db = store.database();
    let audit = db
        .query(
            "SELECT entry, subject, delivery, event_id, content_hash, card_id, decision, \
             previous, version, state FROM audit ORDER BY seq",
            &[],
        )
        .expect("the audit");
    let holds = db
        .query(
            "SELECT card_id, event_id, idx, delivery FROM holds ORDER BY seq",
            &[],
        )
        .expect("the holds");
    (audit, holds)
}

backend_test! {
    /// B62-15 in one transaction of all its deliveries (a redelivery, a changed payload and
    /// holds inside the batch) gives the acknowledgements, the audit rows, the holds in
    /// their order and the final state that one transaction per delivery gives.
    fn one_batch_of_b62_15_writes_what_one_transaction_per_delivery_writes(backend) {
        let fixture = b62();
        let fixture = fixture.to_str().expect("a UTF-8 path");
        let mut runs = Vec::new();
        for (name, batch) in [("one.db", "1"), ("all.db", "16")] {
            let db = backend.fresh(name);
            ok(&["store", "init", "--db", &db.url, "--fixture", fixture]);
            let acks = ok(&["store", "ingest", "--db", &db.url, "--fixture", fixture, "--batch", batch]);
            let (audit, holds) = audit_and_holds(&db.url);
            ok(&["store", "reconcile", "--db", &db.url, "--fixture", fixture]);
            let show = ok(&["store", "show", "--db", &db.url, "--json"]);
            runs.push((acks, audit, holds, show, db));
        }
        let (one, all) = (&runs[0], &runs[1]);
        assert_eq!(one.0.lines().count(), 10);
        assert_eq!(one.0, all.0, "the acknowledgements");
        assert_eq!(one.1.len(), 14, "10 decisions and 4 card changes");
        assert_eq!(one.1, all.1, "the audit rows before reconciliation");
        assert_eq!(one.2.len(), 5, "the holds before reconciliation");
        assert_eq!(one.2, all.2, "the holds, in order");
        assert_eq!(one.3, all.3, "the final state");
    }
}

/// Two cards and a changed payload that pauses both: `e-1` applied to card-b, then `e-1`
/// again with other content naming card-a. Deciding the second delivery alone meets
/// card-a before card-b (the variant names it); in one batch with the first, card-b comes
/// first. Then a delivery held on the paused card-a, and one for a card nobody knows.
const TWO_CARD_PAUSE: &str = r#"{
  "name": "two-card-pause",
  "initial": {
    "card-a": {"version": 1, "state": {"stage": "open"}},
    "card-b": {"version": 1, "state": {"stage": "open"}}
  },
  "deliveries": [
    {"delivery": 1, "event": {"event_id": "e-1", "object_id": "card-b", "object_version": 2, "type": "card.snapshot", "state": {"stage": "done"}}},
    {"delivery": 2, "event": {"event_id": "e-1", "object_id": "card-a", "object_version": 2, "type": "card.snapshot", "state": {"stage": "done"}}},
    {"delivery": 3, "event": {"event_id": "e-2", "object_id": "card-a", "object_version": 3, "type": "card.snapshot", "state": {"stage": "late"}}},
    {"delivery": 4, "event": {"event_id": "e-3", "object_id": "card-z", "object_version": 1, "type": "card.snapshot", "state": {"stage": "new"}}}
  ]
}"#;

backend_test! {
    /// A step that changes two card rows audits them by card id, whatever else its
    /// transaction met first: the audit of the whole fixture in one batch equals the
    /// audit of one transaction per delivery, row by row.
    fn a_step_that_pauses_two_cards_audits_them_in_card_order_at_any_batch(backend) {
        let mut runs = Vec::new();
        for (name, batch) in [("one.db", "1"), ("four.db", "4")] {
            let db = backend.fresh(name);
            let fixture = db.folder.path().join("two-card-pause.json");
            std::fs::write(&fixture, TWO_CARD_PAUSE).expect("write the fixture");
            let fixture = fixture.to_str().expect("a UTF-8 path");
            ok(&["store", "init", "--db", &db.url, "--fixture", fixture]);
            let acks = ok(&["store", "ingest", "--db", &db.url, "--fixture", fixture, "--batch", batch]);
            let (audit, holds) = audit_and_holds(&db.url);
            runs.push((acks, audit, holds, db));
        }
        let (one, four) = (&runs[0], &runs[1]);
        let decisions: Vec<String> = one.0.lines().map(|line| {
            let ack: Value = serde_json::from_str(line).expect("JSON");
            ack["decision"].as_str().expect("a decision").to_owned()
        }).collect();
        assert_eq!(
            decisions,
            ["applied", "conflict_changed_payload", "held_paused", "held_unknown_object"]
        );
        assert_eq!(one.0, four.0, "the acknowledgements");
        // The card rows of delivery 2's step: card-a, then card-b.
        let cards: Vec<String> = one.1.iter().filter(|row| row[0].text() == Some("card"))
            .map(|row| format!("{}:{}", row[1].text().expect("subject"), row[6].text().expect("paused or active")))
            .collect();
        assert_eq!(cards, ["card-b:active", "card-a:paused", "card-b:paused"]);
        assert_eq!(one.1.len(), 7, "4 decisions and 3 card changes");
        for (at, (row_one, row_four)) in one.1.iter().zip(&four.1).enumerate() {
            assert_eq!(row_one, row_four, "audit row {at}");
        }
        assert_eq!(one.1, four.1, "the audit rows");
        assert_eq!(one.2, four.2, "the holds, in order");
    }
}

/// The next line the child printed, or the test fails after `seconds` (the child killed
/// first, so that a store that waits for a full batch fails the test rather than hangs it).
fn answer_within(
    answers: &std::sync::mpsc::Receiver<String>,
    child: &mut std::process::Child,
    seconds: u64,
    what: &str,
) -> Value {
    match answers.recv_timeout(std::time::Duration::from_secs(seconds)) {
        Ok(line) => serde_json::from_str(&line).expect("an answer line is JSON"),
        Err(error) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no answer to {what} within {seconds} s ({error})");
        }
    }
}

/// `arrival store ingest --batch BATCH` on `url`, its three streams piped.
fn ingest_child(url: &str, batch: usize) -> std::process::Child {
    Command::new(ARRIVAL)
        .args([
            "store",
            "ingest",
            "--db",
            url,
            "--batch",
            &batch.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("arrival runs")
}

/// A sender that waits for each answer before it sends the next delivery gets each answer
/// at once, `--batch 16` or not: the store commits what it has as soon as nothing more
/// is waiting on its input.
#[test]
fn ingest_answers_a_waiting_sender_without_filling_its_batch() {
    let store = Backend::Sqlite.b62_store("quiet.db");
    let mut child = ingest_child(&store.url, 16);
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let (send, answers) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let Ok(line) = line else { return };
            if send.send(line).is_err() {
                return;
            }
        }
    });
    // Line 1 is sent with the first 12,000 bytes of a 20 KB line 2 (more than the reader's
    // buffer holds), and line 2's rest only after line 1's answer: an answer is never held
    // back behind a line still coming (found by review).
    let second = snapshot_line("e-q2", 21).replace(
        "\"stage\": \"v21\"",
        &format!("\"stage\": \"v21\", \"pad\": \"{}\"", "x".repeat(20_000)),
    );
    let first = format!("{}{}", snapshot_line("e-q1", 20), &second[..12_000]);
    for (at, version, bytes) in [(1, 20, &first[..]), (2, 21, &second[12_000..])] {
        std::io::Write::write_all(&mut stdin, bytes.as_bytes()).expect("write");
        std::io::Write::flush(&mut stdin).expect("flush");
        let answer = answer_within(&answers, &mut child, 30, &format!("line {at}"));
        assert_eq!(answer["delivery"], version, "{answer}");
        assert_eq!(answer["decision"], "applied", "{answer}");
        // Committed before it was answered.
        assert_eq!(card_7_version(&store.url), version);
    }
    drop(stdin);
    let output = child.wait_with_output().expect("ends");
    reader.join().expect("the reader");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(answers.try_recv().is_err(), "two lines, two answers");
}

/// Found by review: a reader that closed the acknowledgements' output went unnoticed (exit
/// 0, answers lost in silence). The store stops with exit 3, naming the output and what is
/// committed.
#[test]
fn ingest_stops_with_exit_3_when_its_acknowledgements_cannot_be_written() {
    let store = Backend::Sqlite.b62_store("closed-output.db");
    let mut child = ingest_child(&store.url, 4);
    drop(child.stdout.take());
    let mut stdin = child.stdin.take().expect("stdin");
    // The first write may already find the store gone; nothing else is needed of it.
    let _ = std::io::Write::write_all(&mut stdin, snapshot_line("e-c1", 20).as_bytes());
    drop(stdin);
    let output = child.wait_with_output().expect("ends");
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{said}");
    assert!(
        said.contains("standard output: 1 acknowledgement(s) could not be written"),
        "{said}"
    );
    // Committed all the same: a resend is a duplicate.
    assert_eq!(card_7_version(&store.url), 20);
}

/// Found by review: the changed payloads a reconciliation resolves elsewhere came in an
/// order that depended on the backend (SQLite `e-9, e-1`, PostgreSQL and replay `e-1, e-9`).
#[test]
fn a_reconciliation_resolves_held_variants_in_replay_s_order_on_both_backends() {
    let fixture = root().join("tests/inputs/resolved-order.json");
    let fixture = fixture.to_str().expect("UTF-8");
    for backend in Backend::ALL {
        let db = backend.fresh("order.db");
        for step in ["init", "ingest", "reconcile"] {
            let said = ok(&["store", step, "--db", &db.url, "--fixture", fixture]);
            if step != "reconcile" {
                continue;
            }
            let card_x: Value = said
                .lines()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .find(|line| line["object_id"] == "card-x")
                .expect("card-x reconciled");
            assert_eq!(
                card_x["resolved"],
                serde_json::json!(["e-1", "e-9"]),
                "{}",
                backend.name()
            );
        }
    }
    let replayed = ok(&["replay", fixture]);
    assert!(
        replayed.contains("e-1 resolved")
            && replayed.contains("e-9 resolved")
            && replayed.find("e-1 resolved") < replayed.find("e-9 resolved"),
        "{replayed}"
    );
}
