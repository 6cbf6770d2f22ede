//! Where `arrival conform` reads a target's state (docs/conform.md, "Where the state is
//! read"): python-sqlite's cards by SQL from its SQLite file and by a command, against the
//! same runs over `GET /_arrival/state`; `pipeline serve`'s facts by SQL from its SQLite
//! inbox and from a PostgreSQL database made for the test; state sources that fail (exit 3)
//! and `state` settings that are wrong (exit 2). Each run is a few schedules.

use crate::util::{arrival, assert_status, json, stderr, temp_dir};
use serde_json::Value;
use std::path::Path;

const URL: &str =
    "http:python3 examples/receivers/python-sqlite/receiver.py --port {port} --data {data_dir}";
const SQL: &str = "examples/targets/python-sqlite-sql.toml";
const COMMAND: &str = "examples/targets/python-sqlite-command.toml";
const FACTS_SQL: &str = "examples/targets/pipeline-serve-sql.toml";
/// Two seeded walks, nothing else: a few seconds on python-sqlite.
const WALKS: [&str; 5] = ["--no-traces", "--no-mutants", "--no-cover", "--walks", "2"];

/// `arrival conform SOURCE --target TARGET --json EXTRA...`; a facts model file's mutant
/// schedules left out (their searches cost seconds a run; one test runs them).
fn conform(source: &str, target: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["conform", source, "--target", target, "--json"];
    if source.starts_with("models/acmeflow") {
        args.push("--no-mutants");
    }
    args.extend_from_slice(extra);
    arrival(&args)
}

/// Each property's name and status.
fn statuses(report: &Value) -> Vec<(String, String)> {
    report["properties"]
        .as_array()
        .expect("properties")
        .iter()
        .map(|p| (p["name"].to_string(), p["status"].to_string()))
        .collect()
}

/// A passing run's report.
#[track_caller]
fn passes(source: &str, target: &str, extra: &[&str]) -> Value {
    let output = conform(source, target, extra);
    assert_status(&output, 0, target);
    let report = json(&output);
    assert_eq!(report["verdict"], "sampled", "{target}");
    report
}

/// `text` written as `name` in `dir`; its path.
fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The example file `from` with `old` replaced by `new`, written as `name` in `dir`.
fn edited(dir: &Path, from: &str, name: &str, old: &str, new: &str) -> String {
    let text = std::fs::read_to_string(crate::util::root().join(from)).unwrap();
    assert!(text.contains(old), "{from} has no {old:?}");
    write(dir, name, &text.replace(old, new))
}

#[test]
fn python_sqlite_read_by_sql_from_its_sqlite_file_passes_as_over_the_url() {
    let by_url = passes("models/b62-15.toml", URL, &WALKS);
    let by_sql = passes("models/b62-15.toml", SQL, &WALKS);
    assert_eq!(
        (by_sql["schedules"].as_u64(), by_sql["passed"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(by_sql["schedules"], by_url["schedules"]);
    assert_eq!(by_sql["counts"]["attempted"], by_url["counts"]["attempted"]);
    // The SQL target leaves `unresolved` out (the receiver works it out in Python), so the
    // two properties that need it are unobserved; every other status is the URL's.
    let mut expected = statuses(&by_url);
    for (name, status) in &mut expected {
        if name == "\"convergence\"" || name == "\"evidence-retained\"" {
            assert_eq!(status, "\"sampled\"");
            *status = "\"unobserved\"".into();
        }
    }
    assert_eq!(statuses(&by_sql), expected);
}

#[test]
fn python_sqlite_read_by_a_state_command_passes_as_over_the_url() {
    // A Python process per read: the state is read at the end of each schedule only.
    let extra: Vec<&str> = WALKS.iter().copied().chain(["--observe", "end"]).collect();
    let by_url = passes("models/b62-15.toml", URL, &extra);
    let by_command = passes("models/b62-15.toml", COMMAND, &extra);
    assert_eq!(by_command["schedules"], 2);
    assert_eq!(by_command["schedules"], by_url["schedules"]);
    assert_eq!(statuses(&by_command), statuses(&by_url));
}

#[test]
fn pipeline_serve_read_by_sql_from_its_sqlite_inbox_passes_and_its_rows_are_what_is_compared() {
    let report = passes("models/acmeflow-retries.toml", FACTS_SQL, &["--walks", "1"]);
    // The fixture's own schedule, the kept sent-at-in-content trace and one walk.
    assert_eq!(
        (report["schedules"].as_u64(), report["passed"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(report["counts"]["lost"], 0);
    // The same target with a query that hides every fact: the facts compared are the
    // query's rows, not the status command's (which the SQL source shadows).
    let dir = temp_dir("conform-state-facts");
    let hidden = edited(
        dir.path(),
        FACTS_SQL,
        "hidden.toml",
        "canonical FROM facts\"",
        "canonical FROM facts WHERE 0\"",
    );
    let output = conform("models/acmeflow-retries.toml", &hidden, &["--walks", "0"]);
    assert_status(&output, 1, "a query that hides the facts");
    let report = json(&output);
    assert_eq!(report["failure"]["property"], "no-loss", "{report}");
}

#[test]
fn pipeline_serve_on_postgresql_read_by_sql_passes() {
    let db = crate::pg::PgDatabase::new();
    let dir = temp_dir("conform-state-pg");
    let url = &db.url;
    // Every reset empties the test's database before `pipeline init` (which wants it new).
    let register = format!(
        "psql -q -v ON_ERROR_STOP=1 {url} -c 'DROP SCHEMA public CASCADE' \
         -c 'CREATE SCHEMA public' && {{arrival}} pipeline init --db {url} \
         --fixture {{fixture}} --keys-out {{data_dir}}/keys.json"
    );
    let text = std::fs::read_to_string(crate::util::root().join(FACTS_SQL)).unwrap();
    let start = text.find("register = [").unwrap();
    let end = start + text[start..].find(']').unwrap() + 1;
    let text = format!(
        "{}register = [\"sh\", \"-c\", {register:?}]{}",
        &text[..start],
        &text[end..]
    )
    .replace("\"{data_dir}/inbox.db\"", &format!("{url:?}"))
    .replace("sqlite = ", "postgres = ");
    let target = write(dir.path(), "pg.toml", &text);
    assert!(text.contains(&format!("postgres = {url:?}")), "{text}");
    let report = passes("models/acmeflow-retries.toml", &target, &["--walks", "1"]);
    // The fixture's own schedule, the kept sent-at-in-content trace and one walk.
    assert_eq!(
        (report["schedules"].as_u64(), report["passed"].as_u64()),
        (Some(3), Some(3))
    );
}

/// Runs a target that must stop with exit 3 at its first state read, the JUnit harness
/// case failing; what stderr says.
#[track_caller]
fn harness_fails(source: &str, target: &str, says: &[&str]) {
    let dir = temp_dir("conform-state-junit");
    let junit = dir.path().join("junit.xml");
    let junit = junit.to_str().unwrap();
    let output = conform(source, target, &["--walks", "0", "--junit", junit]);
    assert_status(&output, 3, target);
    let text = stderr(&output);
    for part in says {
        assert!(text.contains(part), "{part:?} not in: {text}");
    }
    let xml = std::fs::read_to_string(junit).unwrap();
    assert!(
        xml.contains("\"harness\"") && xml.contains("<failure"),
        "{xml}"
    );
}

#[test]
fn a_state_source_that_fails_exits_3_naming_the_source_and_what_is_wrong() {
    let dir = temp_dir("conform-state-broken");
    let d = dir.path();
    let card = "models/b62-15.toml";
    let bad_table = edited(d, SQL, "table.toml", "FROM cards\"", "FROM nowhere\"");
    harness_fails(
        card,
        &bad_table,
        &["state SQL on SQLite", "no such table: nowhere"],
    );
    let narrow = edited(d, SQL, "narrow.toml", "version, state FROM", "version FROM");
    harness_fails(
        card,
        &narrow,
        &["query `cards`", "returned 2 columns, not 3"],
    );
    let receiver = "command = [\"python3\", \"examples/receivers/python-sqlite/receiver.py\", \
                    \"--port\", \"{port}\", \"--data\", \"{data_dir}\"]\n";
    let not_found = write(
        d,
        "404.toml",
        &format!("kind = \"http\"\n{receiver}state = {{ url = \"/nowhere\" }}\n"),
    );
    harness_fails(
        card,
        &not_found,
        &[
            "state URL /nowhere",
            "GET http://127.0.0.1:",
            "answered 404, not 200",
        ],
    );
    let not_json = edited(
        d,
        COMMAND,
        "echo.toml",
        "[\"python3\", \"examples/receivers/python-sqlite/state.py\", \"{data_dir}\"]",
        "[\"echo\", \"cards\"]",
    );
    harness_fails(
        card,
        &not_json,
        &["state command `echo cards`", "gave no JSON document"],
    );
    let facts = edited(
        d,
        FACTS_SQL,
        "facts.toml",
        "FROM applications a",
        "FROM applications a WHERE a.nope",
    );
    harness_fails(
        "models/acmeflow-retries.toml",
        &facts,
        &["query `applications`", "no such column: a.nope"],
    );
}

#[test]
fn a_wrong_state_setting_exits_2_naming_the_file_and_the_key() {
    let dir = temp_dir("conform-state-bad");
    let d = dir.path();
    let head = "kind = \"http\"\ncommand = [\"true\"]\n";
    let cases: [(&str, &str, &str); 7] = [
        ("number", "state = 3\n", "state: write a table"),
        (
            "two",
            "state = { url = \"/s\", command = [\"x\"] }\n",
            "url and command sources at once",
        ),
        ("ftp", "state = { url = \"ftp://x/s\" }\n", "state.url"),
        (
            "part",
            "[state]\nsqlite = \"x.db\"\ncards = \"SELECT 1\"\ncarts = \"SELECT 1\"\n",
            "state.carts",
        ),
        (
            "no-cards",
            "[state]\nsqlite = \"x.db\"\npaused = \"SELECT 1\"\n",
            "state.cards",
        ),
        (
            "pg",
            "[state]\npostgres = \"localhost\"\ncards = \"SELECT 1\"\n",
            "state.postgres",
        ),
        (
            "pg-port",
            "[state]\npostgres = \"postgres://postgres@127.0.0.1:notaport/x\"\ncards = \"SELECT 1\"\n",
            "state.postgres",
        ),
    ];
    for (name, state, says) in cases {
        let target = write(d, &format!("{name}.toml"), &format!("{head}{state}"));
        let output = conform("models/b62-15.toml", &target, &[]);
        assert_status(&output, 2, name);
        let text = stderr(&output);
        assert!(
            text.contains(&target) && text.contains(says),
            "{name}: {text}"
        );
    }
    let facts = edited(d, FACTS_SQL, "facts.toml", "fact_contents = ", "facts = ");
    let output = conform("models/acmeflow-retries.toml", &facts, &[]);
    assert_status(&output, 2, "a facts part misnamed");
    let text = stderr(&output);
    assert!(
        text.contains("state[0].facts") && text.contains("fact_contents"),
        "{text}"
    );
}
