//! The operator's commands on a real inbox (`pipeline applications|conflicts|quarantine`)
//! and every facts fixture played against the real pipeline (`pipeline run`: HTTP ingress,
//! the Redis stream, consumer child processes, the SQLite inbox), each compared with its
//! `expect` and with the model's replay of the same fixture.

use crate::pipeline::redis_url;
use crate::util::{root, stderr, stdout, temp_dir, ARRIVAL};
use arrival::facts::envelope::envelope_in;
use arrival::facts::inbox::Verdict;
use arrival::pipeline::{batch, store};
use std::path::Path;
use std::process::{Command, Output};

/// Every facts fixture whose schedule the real pipeline plays: the acceptance run, the
/// production walk, the contract v2 fixtures, every probe and review regression.
pub const FIXTURES: &[&str] = &[
    "fixtures/acmeflow-wf14.json",
    "fixtures/acmeflow-production.json",
    "fixtures/facts-conflict.json",
    "fixtures/facts-faults.json",
    "fixtures/facts-lifecycle.json",
    "fixtures/facts-quarantine.json",
    "fixtures/facts-retries.json",
    "fixtures/facts-standard-webhooks.json",
    "fixtures/facts-tenant-keys.json",
    "fixtures/facts-two-tenants.json",
    "fixtures/facts-undecidable.json",
    "fixtures/facts-v2-concern-attempt-in-data.json",
    "fixtures/facts-withdrawals.json",
    "fixtures/regressions/probe-correlation-oracle.json",
    "fixtures/regressions/probe-cross-tenant-id.json",
    "fixtures/regressions/probe-init-downgrade.json",
    "fixtures/regressions/probe-resigned-retry.json",
    "fixtures/regressions/probe-reversal.json",
    "fixtures/regressions/probe-terminated-ready.json",
    "fixtures/regressions/probe-undecidable-stall.json",
    "fixtures/regressions/probe-unknown-application.json",
    "fixtures/regressions/review-accepted-then-terminated-redelivered.json",
    "fixtures/regressions/review-expired-quarantine-redelivered.json",
    "fixtures/regressions/review-withdrawal-of-another-application-after-ready.json",
    "fixtures/regressions/review-withdrawal-of-another-application-before-its-fact.json",
    "fixtures/regressions/review-withdrawal-of-another-application-released-by-registration.json",
    "fixtures/regressions/review-material-version-beyond-2-53.json",
    "fixtures/regressions/review-registration-releases-mixed-entries.json",
    "fixtures/regressions/review-event-id-reused-across-applications-resolved.json",
    "fixtures/regressions/review-resolving-a-withdrawal-to-a-variant-that-names-another-fact.json",
];

#[test]
fn every_facts_fixture_reproduces_its_expect_and_the_model_on_the_real_pipeline() {
    let url = redis_url();
    let mut failed = Vec::new();
    for fixture in FIXTURES {
        let output = Command::new(ARRIVAL)
            .args(["pipeline", "run", fixture])
            .env("ARRIVAL_REDIS_URL", &url)
            .current_dir(root())
            .output()
            .unwrap();
        let text = stdout(&output);
        if !output.status.success() || !text.contains("expect:       holds") {
            failed.push(format!("{fixture}:\n{text}\n{}", stderr(&output)));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

#[test]
fn the_production_walk_on_the_real_pipeline_registers_terminates_and_resolves() {
    let output = Command::new(ARRIVAL)
        .args(["pipeline", "run", "fixtures/acmeflow-production.json"])
        .env("ARRIVAL_REDIS_URL", redis_url())
        .current_dir(root())
        .output()
        .unwrap();
    let text = stdout(&output);
    assert!(output.status.success(), "{text}{}", stderr(&output));
    let json = Command::new(ARRIVAL)
        .args([
            "pipeline",
            "run",
            "--json",
            "fixtures/acmeflow-production.json",
        ])
        .env("ARRIVAL_REDIS_URL", redis_url())
        .current_dir(root())
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let notes: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|step| step["note"].as_str())
        .collect();
    assert!(
        notes.contains(&"7c1d9e2a-5b3f-4a6e-8d0c-2e4f6a8b0c1d new; released: entry 4 accepted, entry 5 accepted"),
        "{notes:?}"
    );
    assert!(
        notes.contains(&"xinghe-demo/contracts/SIG-014 resolved: kept the first"),
        "{notes:?}"
    );
    for line in [
        "202 quarantined",
        "after_termination",
        "400 bad_signature",
        "parked:       entry 11 after_termination (xinghe-demo/finance/PAY-018)",
        "expect:       holds",
    ] {
        assert!(text.contains(line), "missing `{line}` in:\n{text}");
    }
}

const APP: &str = "3f6b2c1e-8d4a-4f7b-9c2e-5a1d0e7f9b34";
const NEW_APP: &str = "7c1d9e2a-5b3f-4a6e-8d0c-2e4f6a8b0c1d";

fn payment(event_id: &str, application: &str, business_key: &str, amount: &str) -> String {
    format!(
        r#"{{"schema_version":"1","source":"finance","event_id":"{event_id}","event_type":"PAYMENT_CONFIRMED","sent_at":"2024-06-03T09:00:00Z","tenant_id":"xinghe-demo","application_id":"{application}","business_key":"{business_key}","material_version":1,"data":{{"amount":"{amount}","currency":"CNY"}}}}"#
    )
}

/// Decides bodies as stream entries `1-0`, `2-0`, ... (received at 2024-06-03T09:00:01Z),
/// returning their verdicts.
fn decide(db: &Path, first: u64, bodies: &[String]) -> Vec<Verdict> {
    let conn = store::open(&db.to_path_buf().into(), 5_000).unwrap();
    let items: Vec<batch::Item> = bodies
        .iter()
        .enumerate()
        .map(|(n, body)| batch::Item {
            entry: format!("{}-0", first + n as u64),
            envelope: envelope_in(body.as_bytes()).unwrap(),
            received_ms: Some(1_717_405_201_000),
            consumer: None,
            deliveries: None,
        })
        .collect();
    let decided = batch::decide(&conn, None, &items, &|_| None).unwrap();
    let verdicts = decided
        .outcomes
        .iter()
        .map(|outcome| *outcome.as_ref().unwrap())
        .collect();
    decided.commit().unwrap();
    verdicts
}

fn pipeline(db: &Path, args: &[&str]) -> Output {
    Command::new(ARRIVAL)
        .arg("pipeline")
        .args(args)
        .arg("--db")
        .arg(db)
        .env_remove("ARRIVAL_DB")
        .current_dir(root())
        .output()
        .unwrap()
}

fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}{}",
        stdout(output),
        stderr(output)
    );
    stdout(output)
}

fn refused(output: &Output, flag: &str, words: &str) {
    let text = stderr(output);
    assert_eq!(output.status.code(), Some(2), "{}{text}", stdout(output));
    assert!(text.contains(flag) && text.contains(words), "{text}");
}

/// A new inbox made by `pipeline init` from `fixtures/facts-quarantine.json`, in a
/// temporary folder (kept alive by the returned guard).
fn quarantine_inbox(label: &str) -> (crate::util::TempDir, std::path::PathBuf) {
    let dir = temp_dir(label);
    let db = dir.path().join("inbox.db");
    let init = Command::new(ARRIVAL)
        .args([
            "pipeline",
            "init",
            "--fixture",
            "fixtures/facts-quarantine.json",
            "--db",
        ])
        .arg(&db)
        .arg("--keys-out")
        .arg(dir.path().join("keys.json"))
        .current_dir(root())
        .output()
        .unwrap();
    ok(&init);
    (dir, db)
}

fn ready(db: &Path) -> Vec<(String, bool)> {
    let text = ok(&pipeline(db, &["status", "--json"]));
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["applications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|app| {
            (
                app["application_id"].as_str().unwrap().to_owned(),
                app["ready"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn operator_commands_register_release_terminate_and_resolve_in_one_transaction_each() {
    let (_dir, db) = quarantine_inbox("operator");
    // A payment for an application nobody registered yet waits in quarantine.
    let early = payment("PAY-015", NEW_APP, "APP-EVENT-015", "120000.00");
    assert_eq!(decide(&db, 1, &[early]), [Verdict::Quarantined]);
    let listed = ok(&pipeline(&db, &["quarantine", "list"]));
    assert!(
        listed.contains("1-0 quarantined xinghe-demo/finance/PAY-015"),
        "{listed}"
    );
    // Registering it releases the entry as a fact, in the same transaction.
    let target = ["--tenant", "xinghe-demo", "--application", NEW_APP];
    let register = |version: &str| {
        let mut args = vec!["applications", "register"];
        args.extend(target);
        args.extend([
            "--business-key",
            "APP-EVENT-015",
            "--material-version",
            version,
        ]);
        pipeline(&db, &args)
    };
    let released = ok(&register("1"));
    assert!(
        released.contains("v1: new") && released.contains("released 1-0: accepted"),
        "{released}"
    );
    assert_eq!(
        ok(&pipeline(&db, &["quarantine", "list"])),
        "nothing quarantined\n"
    );
    assert!(ok(&register("2")).contains("v2: upgraded"));
    // Never backwards: refused, naming the flag, and nothing changes.
    refused(&register("1"), "--material-version", "backwards");
    let status = ok(&pipeline(&db, &["status", "--json"]));
    assert!(status.contains("\"material_version\": 2"), "{status}");
    // A conflict on the known application keeps it out of READY until a person resolves it.
    let first = payment("PAY-014", APP, "APP-EVENT-014", "120000.00");
    let other = payment("PAY-014", APP, "APP-EVENT-014", "99.00");
    let signature = r#"{"schema_version":"1","source":"contracts","event_id":"SIG-014","event_type":"CONTRACT_SIGNED","sent_at":"2024-06-03T09:00:00Z","tenant_id":"xinghe-demo","application_id":"3f6b2c1e-8d4a-4f7b-9c2e-5a1d0e7f9b34","business_key":"APP-EVENT-014","material_version":1,"data":{"contract_no":"HT-014"}}"#;
    assert_eq!(
        decide(&db, 2, &[first, signature.to_owned(), other]),
        [Verdict::Accepted, Verdict::Accepted, Verdict::Conflict]
    );
    assert!(ready(&db).contains(&(APP.to_owned(), false)));
    let conflicts = ok(&pipeline(&db, &["conflicts", "list"]));
    assert!(
        conflicts.contains("xinghe-demo/finance/PAY-014 (open)") && conflicts.contains("99.00"),
        "{conflicts}"
    );
    let resolve = |keep: &str| {
        pipeline(
            &db,
            &[
                "conflicts",
                "resolve",
                "--event",
                "xinghe-demo/finance/PAY-014",
                "--keep",
                keep,
                "--reason",
                "the bank statement says 99.00",
            ],
        )
    };
    assert!(ok(&resolve("variant")).contains("kept the variant"));
    assert!(ready(&db).contains(&(APP.to_owned(), true)));
    let conflicts = ok(&pipeline(&db, &["conflicts", "list", "--json"]));
    let rows: serde_json::Value = serde_json::from_str(&conflicts).unwrap();
    assert_eq!(rows[0]["state"], "variant");
    assert!(rows[0]["fact"].as_str().unwrap().contains("99.00"));
    assert!(rows[0]["variants"][0]
        .as_str()
        .unwrap()
        .contains("120000.00"));
    refused(&resolve("first"), "--event", "no open conflict");
    // The resolved content is the fact now: its redelivery is a duplicate, the old one too.
    let again = payment("PAY-014", APP, "APP-EVENT-014", "99.00");
    let old = payment("PAY-014", APP, "APP-EVENT-014", "120000.00");
    assert_eq!(
        decide(&db, 5, &[again, old]),
        [Verdict::Duplicate, Verdict::Duplicate]
    );
    // Termination is final: READY false, a later fact kept aside, a second one refused.
    let terminate = || {
        let mut args = vec!["applications", "terminate", "--tenant", "xinghe-demo"];
        args.extend([
            "--application",
            APP,
            "--reason",
            "withdrawn",
            "--at",
            "2024-06-04T00:00:00Z",
        ]);
        pipeline(&db, &args)
    };
    ok(&terminate());
    assert!(ready(&db).contains(&(APP.to_owned(), false)));
    refused(&terminate(), "--application", "terminated");
    let late = payment("PAY-099", APP, "APP-EVENT-014", "1.00");
    assert_eq!(decide(&db, 7, &[late]), [Verdict::AfterTermination]);
    // READY history names the step or entry behind each change.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let history: Vec<(String, bool, String)> = conn
        .prepare("SELECT application_id, ready, cause FROM ready_history ORDER BY seq")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let app = |text: &str| text.to_owned();
    assert_eq!(
        history,
        [
            (app(APP), true, app("3-0")),
            (app(APP), false, app("4-0")),
            (app(APP), true, app("resolve xinghe-demo/finance/PAY-014")),
            (app(APP), false, format!("terminate xinghe-demo/{APP}")),
        ]
    );
}

#[test]
fn quarantine_expires_by_the_sweep_s_clock_and_expired_entries_stay_out_of_registration() {
    let (_dir, db) = quarantine_inbox("quarantine-expire");
    let early = payment("PAY-015", NEW_APP, "APP-EVENT-015", "120000.00");
    assert_eq!(decide(&db, 1, &[early]), [Verdict::Quarantined]);
    let expire = |now: &str| pipeline(&db, &["quarantine", "expire", "--now", now]);
    assert!(ok(&expire("2024-06-06T09:00:00Z")).starts_with("0 entries expired"));
    assert!(ok(&expire("2024-06-06T09:00:01Z")).starts_with("1 entries expired"));
    refused(&expire("yesterday"), "--now", "RFC 3339");
    let listed = ok(&pipeline(&db, &["quarantine", "list"]));
    assert!(listed.contains("1-0 quarantine_expired"), "{listed}");
    let register = pipeline(
        &db,
        &[
            "applications",
            "register",
            "--tenant",
            "xinghe-demo",
            "--application",
            NEW_APP,
            "--business-key",
            "APP-EVENT-015",
            "--material-version",
            "1",
        ],
    );
    assert!(!ok(&register).contains("released"));
    let snapshot = store::snapshot(&store::open(&db.to_path_buf().into(), 5_000).unwrap()).unwrap();
    assert!(
        snapshot.facts.is_empty(),
        "an expired entry never becomes a fact"
    );
}

#[test]
fn operator_values_no_envelope_could_match_are_refused_naming_their_flag() {
    let (_dir, db) = quarantine_inbox("operator-refusals");
    let register = |tenant: &str, application: &str, business_key: &str, version: &str| {
        pipeline(
            &db,
            &[
                "applications",
                "register",
                "--tenant",
                tenant,
                "--application",
                application,
                "--business-key",
                business_key,
                "--material-version",
                version,
            ],
        )
    };
    let long = "x".repeat(129);
    let cases: &[(&str, &str, &str, &str, &str, &str)] = &[
        ("xinghe-demo", "app-9", "", "1", "--business-key", "0 bytes"),
        (
            "xinghe-demo",
            "app-9",
            "BK",
            "0",
            "--material-version",
            "not from 1",
        ),
        ("", "app-9", "BK", "1", "--tenant", "0 bytes"),
        (
            "xinghe-demo",
            &long,
            "BK",
            "1",
            "--application",
            "129 bytes",
        ),
        (
            "xinghe-demo",
            APP,
            "APP-EVENT-999",
            "1",
            "--business-key",
            "differs",
        ),
    ];
    for (tenant, application, business_key, version, flag, words) in cases {
        refused(
            &register(tenant, application, business_key, version),
            flag,
            words,
        );
    }
    let terminate = pipeline(
        &db,
        &[
            "applications",
            "terminate",
            "--tenant",
            "xinghe-demo",
            "--application",
            APP,
            "--reason",
            " ",
        ],
    );
    refused(&terminate, "--reason", "reason");
    // A tenant id may hold `/`: the source is the part that names one.
    let resolve = |event: &str| {
        pipeline(
            &db,
            &[
                "conflicts",
                "resolve",
                "--event",
                event,
                "--keep",
                "first",
                "--reason",
                "r",
            ],
        )
    };
    refused(
        &resolve("acme/eu/finance/PAY-1"),
        "--event",
        "no open conflict on acme/eu/finance/PAY-1",
    );
    refused(
        &resolve("acme/PAY-1"),
        "--event",
        "not TENANT/SOURCE/EVENT_ID",
    );
    refused(
        &resolve("t/finance/finance/x"),
        "--event",
        "more than one way",
    );
    let status = ok(&pipeline(&db, &["status", "--json"]));
    assert!(
        !status.contains("app-9"),
        "nothing was registered: {status}"
    );
}
