//! The `arrival` command line, run as a user runs it: exit statuses (0 holds, 1 does not
//! hold as expected, 2 bad input) and what the error messages say.
//!
//! `tests/malformed/` holds one problem per file. Each must stop the run with exit status 2
//! and a message naming the file, the place (a JSON path, line:column or TOML key) and what
//! is wrong, without a panic. `tests/inputs/protocol-anomalies.json` is the opposite: envelopes
//! that break the protocol are not fixture errors, the receiver holds them.

use crate::util::{arrival, assert_status, json, stderr, stdout, temp_dir};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// Fixture files (`arrival replay`): the file and what stderr must say besides its name.
const FIXTURE_CASES: &[(&str, &[&str])] = &[
    ("not-json.json", &["line 1:1", "not valid JSON"]),
    ("trailing-garbage.json", &["line 5", "more content after"]),
    ("empty.json", &["line 1", "empty"]),
    (
        "truncated.json",
        &["deliveries[1].event", "line 6", "ends early"],
    ),
    (
        "top-level-array.json",
        &["top level", "JSON object", "not an array"],
    ),
    (
        "unknown-top-level-key.json",
        &["deliveriez", "line 4:", "unknown field `deliveriez`"],
    ),
    (
        "unknown-delivery-key.json",
        &[
            "deliveries[1].recieved_at",
            "line 5:",
            "unknown field `recieved_at`",
        ],
    ),
    (
        "delivery-missing-event.json",
        &["deliveries[1]", "missing field `event`"],
    ),
    (
        "delivery-number-negative.json",
        &["deliveries[0].delivery", "-1", "non-negative integer"],
    ),
    (
        "initial-negative-version.json",
        &["initial.card-7.version", "-1", "non-negative integer"],
    ),
    (
        "initial-fractional-version.json",
        &["initial.card-7.version", "1.5", "non-negative integer"],
    ),
    (
        "trace-unknown-policy.json",
        &[
            "trace.policy",
            "unknown policy `ignore-paus`",
            "ignore-pause",
        ],
    ),
    (
        "trace-unknown-property.json",
        &[
            "trace.violates",
            "unknown property `paused-forever`",
            "paused-frozen",
        ],
    ),
    (
        "initial-string-version.json",
        &[
            "initial.card-7.version",
            "string \"10\"",
            "non-negative integer",
        ],
    ),
    (
        "initial-state-not-object.json",
        &["initial.card-7.state", "array", "expected a JSON object"],
    ),
    (
        "authority-negative-version.json",
        &["authority[0].version", "-3", "non-negative integer"],
    ),
    (
        "authority-state-not-object.json",
        &["authority[0].state", "\"done\"", "expected a JSON object"],
    ),
    (
        "authority-twice.json",
        &[
            "authority[1].object_id",
            "second authority snapshot",
            "card-7",
        ],
    ),
    (
        "duplicate-delivery-number.json",
        &[
            "deliveries[2].delivery",
            "delivery number 2 is used twice",
            "deliveries[1]",
        ],
    ),
    (
        "missing-deliveries.json",
        &["top level", "missing field `deliveries`"],
    ),
    (
        "received-at-not-rfc3339.json",
        &[
            "deliveries[1].received_at",
            "yesterday at noon",
            "not an RFC 3339 time",
        ],
    ),
    (
        "expect-unresolved-twice.json",
        &["expect.unresolved", "`e-9` is listed twice"],
    ),
    (
        "conform-two-faults.json",
        &["conform.actions[1]", "at most one of"],
    ),
    (
        "conform-unknown-action-key.json",
        &["conform.actions[0]", "kil_after_ack"],
    ),
    (
        "conform-observe-unknown.json",
        &["conform.observe", "`sometimes`"],
    ),
    (
        "conform-channel-unknown.json",
        &["conform.channels", "`pasued`"],
    ),
    (
        "schedule-unknown-delivery.json",
        &["schedule[1]", "delivery 7", "does not have"],
    ),
    (
        "schedule-reconcile-without-authority.json",
        &["schedule[1]", "card-99", "no authority snapshot"],
    ),
    (
        "schedule-deliver-and-reconcile.json",
        &["schedule[0]", "not both"],
    ),
    (
        "schedule-empty-step.json",
        &[
            "schedule[1]",
            "needs `deliver`",
            "`reconcile` (a card)",
            "`expire`",
        ],
    ),
    (
        "schedule-expire-with-deliver.json",
        &["schedule[1]", "`expire` is a step of its own"],
    ),
    (
        "schedule-expire-not-bool.json",
        &["schedule[1].expire", "expected a boolean"],
    ),
    (
        "schedule-ack-lost-and-crash.json",
        &["schedule[0]", "at most one of", "`ack_lost`", "`crash`"],
    ),
    (
        "schedule-reconcile-with-fault.json",
        &["schedule[1]", "go with `deliver`, not `reconcile`"],
    ),
];

/// Model files (`arrival check`): the file and what stderr must say besides its name.
const MODEL_CASES: &[(&str, &[&str])] = &[
    (
        "model-invalid-toml.toml",
        &["line 3:", "key `expect`", "not valid TOML"],
    ),
    (
        "model-unknown-key.toml",
        &["line 5:1", "key `treads`", "unknown field `treads`"],
    ),
    (
        "model-missing-expect.toml",
        &["top level", "missing field `expect`"],
    ),
    (
        "model-negative-budget.toml",
        &["key `duplicates`", "-1", "from 0 to 255"],
    ),
    (
        "model-unknown-reconciliation.toml",
        &["key `reconciliation`", "unknown variant `whenever`"],
    ),
    (
        "model-unknown-policy.toml",
        &[
            "policy",
            "unknown policy `first-come-first-served`",
            "ignore-pause",
        ],
    ),
    (
        "model-unknown-property.toml",
        &["expect", "unknown property `paused-forever`", "or `pass`"],
    ),
    (
        "model-missing-fixture.toml",
        &["fixture", "no-such-fixture.json", "cannot read"],
    ),
    (
        "model-malformed-fixture.toml",
        &[
            "fixture",
            "duplicate-delivery-number.json",
            "deliveries[2].delivery",
            "used twice",
        ],
    ),
    ("model-zero-threads.toml", &["threads", "at least 1"]),
    (
        "model-unknown-checked-property.toml",
        &["properties", "unknown property `eventual-consistency`"],
    ),
    (
        "model-expect-not-checked.toml",
        &[
            "expect",
            "`paused-frozen` is not among the checked `properties`",
        ],
    ),
    (
        "model-no-properties.toml",
        &["properties", "lists no property"],
    ),
    (
        "model-per-delivery-unknown.toml",
        &["per_delivery.11", "the fixture has no delivery 11"],
    ),
    (
        "model-per-delivery-not-a-number.toml",
        &["per_delivery.first", "must be a delivery number"],
    ),
    (
        "model-per-delivery-unknown-fault.toml",
        &["line 7", "unknown field `lost_ack`"],
    ),
];

const MALFORMED: &str = "tests/malformed";
const B62_15: &str = "fixtures/B62-15-events.json";
const ANOMALIES: &str = "tests/inputs/protocol-anomalies.json";

/// The ignore-pause mutant's model file.
const IGNORE_PAUSE: &str = "models/mutant-ignore-pause.toml";

/// Checks one rejected input; returns what is wrong with the run, if anything.
fn rejected(args: &[&str], file: &str, expected: &[&str]) -> Vec<String> {
    let output = arrival(args);
    let err = stderr(&output);
    let mut problems = Vec::new();
    if output.status.code() != Some(2) {
        problems.push(format!("exit status {:?}, not 2", output.status.code()));
    }
    if err.contains("panicked") {
        problems.push("panicked".into());
    }
    if !err.contains(file) {
        problems.push(format!("does not name the file `{file}`"));
    }
    for wanted in expected {
        if !err.contains(wanted) {
            problems.push(format!("does not say `{wanted}`"));
        }
    }
    if !output.stdout.is_empty() {
        problems.push(format!("printed a report: {}", stdout(&output)));
    }
    if problems.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "{file}: {}\n    stderr: {}",
            problems.join("; "),
            err.trim()
        )]
    }
}

#[test]
fn every_malformed_fixture_exits_2_naming_file_place_and_problem() {
    let failures: Vec<String> = FIXTURE_CASES
        .iter()
        .flat_map(|(name, expected)| {
            let file = format!("{MALFORMED}/{name}");
            rejected(&["replay", &file], &file, expected)
        })
        .collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn every_malformed_fixture_is_rejected_with_json_output_too() {
    // `--json` must not turn bad input into a half-written report.
    let failures: Vec<String> = FIXTURE_CASES
        .iter()
        .flat_map(|(name, expected)| {
            let file = format!("{MALFORMED}/{name}");
            rejected(&["replay", "--json", &file], &file, expected)
        })
        .collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn every_malformed_model_exits_2_naming_file_place_and_problem() {
    let failures: Vec<String> = MODEL_CASES
        .iter()
        .flat_map(|(name, expected)| {
            let file = format!("{MALFORMED}/{name}");
            rejected(&["check", "--quiet", &file], &file, expected)
        })
        .collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn every_file_in_the_malformed_folder_is_in_a_table() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join(MALFORMED);
    let listed: Vec<&str> = FIXTURE_CASES
        .iter()
        .chain(MODEL_CASES)
        .map(|(name, _)| *name)
        .collect();
    let mut unlisted = Vec::new();
    for entry in std::fs::read_dir(&folder).expect("tests/malformed exists") {
        let name = entry.expect("a directory entry").file_name();
        let name = name.to_string_lossy().into_owned();
        if !listed.contains(&name.as_str()) {
            unlisted.push(name);
        }
    }
    assert!(
        unlisted.is_empty(),
        "files in {MALFORMED} that no test runs: {unlisted:?}"
    );
    for name in &listed {
        assert!(folder.join(name).is_file(), "{MALFORMED}/{name} is missing");
    }
}

#[test]
fn a_bad_model_file_stops_the_run_before_any_model_is_checked() {
    // The good model comes first: nothing is explored, nothing printed.
    let bad = format!("{MALFORMED}/model-zero-threads.toml");
    let output = arrival(&["check", "--quiet", IGNORE_PAUSE, &bad]);
    assert_status(&output, 2, "a good and a bad model");
    assert!(stderr(&output).contains(&bad), "{}", stderr(&output));
    assert!(output.stdout.is_empty(), "{}", stdout(&output));
}

#[test]
fn check_of_a_model_with_a_malformed_fixture_names_both_files() {
    let model = format!("{MALFORMED}/model-malformed-fixture.toml");
    let output = arrival(&["check", "--quiet", "--json", &model]);
    assert_status(&output, 2, "model with a malformed fixture");
    let err = stderr(&output);
    assert!(err.contains(&model), "{err}");
    assert!(
        err.contains("tests/malformed/duplicate-delivery-number.json"),
        "{err}"
    );
    assert!(err.contains("deliveries[2].delivery"), "{err}");
    assert!(output.stdout.is_empty(), "{}", stdout(&output));
}

#[test]
fn a_bad_trace_block_is_refused_even_when_another_policy_is_given() {
    // `--policy` means the trace's own policy is never used; the block must still be sound.
    let failures: Vec<String> = [
        (MALFORMED, "trace-unknown-policy.json", "trace.policy"),
        (MALFORMED, "trace-unknown-property.json", "trace.violates"),
        (
            "tests/facts-malformed",
            "trace-card-policy.json",
            "trace.policy",
        ),
        (
            "tests/facts-malformed",
            "trace-unknown-property.json",
            "trace.violates",
        ),
    ]
    .iter()
    .flat_map(|(folder, name, place)| {
        let file = format!("{folder}/{name}");
        rejected(&["replay", "--policy", "spec", &file], &file, &[place])
    })
    .collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn a_missing_fixture_exits_2_naming_it() {
    let missing = "fixtures/no-such-fixture.json";
    let output = arrival(&["replay", missing]);
    assert_status(&output, 2, "missing fixture");
    let err = stderr(&output);
    assert!(err.contains(missing), "{err}");
    assert!(err.contains("cannot read"), "{err}");
}

#[test]
fn an_unknown_policy_exits_2() {
    let output = arrival(&["replay", "--policy", "no-such-policy", B62_15]);
    assert_status(&output, 2, "unknown policy");
    let err = stderr(&output);
    assert!(err.contains("no-such-policy"), "{err}");
    assert!(err.contains("ignore-pause"), "lists the policies: {err}");
    assert!(output.stdout.is_empty(), "{}", stdout(&output));
}

#[test]
fn explore_on_a_taken_address_exits_3_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let address = taken.local_addr().expect("its address").to_string();
    let output = arrival(&["check", "models/b62-15.toml", "--explore", &address]);
    // A port another process holds is the environment's failure.
    assert_status(&output, 3, "Explorer on a taken address");
    let said = stderr(&output);
    assert!(said.contains("--explore"), "{said}");
    assert!(
        said.contains(&format!("cannot listen on {address}")),
        "{said}"
    );
    assert!(!said.contains("serving Explorer"), "{said}");
    assert!(!said.contains("panicked"), "{said}");
}

#[test]
fn replay_of_b62_15_holds() {
    let output = arrival(&["replay", B62_15]);
    assert_status(&output, 0, "replay B62-15");
    let out = stdout(&output);
    assert!(out.contains("expect: holds"), "{out}");
    assert!(
        out.contains("replacements: 2 event-driven + 2 authoritative"),
        "{out}"
    );
}

#[test]
fn replay_json_of_b62_15_has_the_spec_keys() {
    let output = arrival(&["replay", "--json", B62_15]);
    assert_status(&output, 0, "replay --json B62-15");
    let report = json(&output);
    for key in ["steps", "final", "paused", "replacements", "unresolved"] {
        assert!(report.get(key).is_some(), "no `{key}` in {report:#}");
    }
    let steps = report["steps"].as_array().expect("steps is an array");
    assert_eq!(steps.len(), 12, "ten deliveries and two reconciliations");
    let first = &steps[0];
    for key in [
        "kind",
        "delivery",
        "event_id",
        "object_id",
        "decision",
        "ack",
        "ack_lost",
        "cards",
        "paused",
        "held",
    ] {
        assert!(first.get(key).is_some(), "no `{key}` in step 1: {first:#}");
    }
    assert_eq!(first["kind"], "deliver");
    assert_eq!(first["decision"], "applied");
    assert_eq!(first["ack_lost"], true);
    assert_eq!(steps[1]["decision"], "duplicate");
    assert_eq!(steps[1]["original_decision"], "applied");
    let reconcile = &steps[10];
    assert_eq!(reconcile["kind"], "reconcile");
    assert_eq!(reconcile["object_id"], "card-7");
    assert_eq!(reconcile["outcome"], "replaced");
    assert_eq!(
        reconcile["re_evaluated"][0]["event_id"], "e-203",
        "{reconcile:#}"
    );
    assert_eq!(reconcile["re_evaluated"][0]["decision"], "equal");
    assert_eq!(report["final"]["card-7"]["version"], 14);
    assert_eq!(report["final"]["card-8"]["version"], 5);
    assert_eq!(report["paused"], serde_json::json!([]));
    assert_eq!(
        report["replacements"],
        serde_json::json!({"event": 2, "authority": 2})
    );
    assert_eq!(report["unresolved"], serde_json::json!(["e-204", "e-300"]));
}

#[test]
fn replay_of_a_trace_uses_its_recorded_policy_unless_told_otherwise() {
    // Card and facts counterexamples alike, each beside a fixture of its protocol with no
    // trace block.
    for (trace, policy, property, plain) in [
        (
            "fixtures/regressions/mutant-ignore-pause.paused-frozen.json",
            "ignore-pause",
            "paused-frozen",
            "fixtures/B62-15-events.json",
        ),
        (
            "fixtures/regressions/acmeflow-mutant-ack-before-commit.ack-after-commit.json",
            "ack-before-commit",
            "ack-after-commit",
            "fixtures/acmeflow-wf14.json",
        ),
    ] {
        let out = arrival(&["replay", trace]);
        assert_status(&out, 1, "replay of a trace under its recorded policy");
        let text = stdout(&out);
        assert!(
            text.starts_with(&format!("policy: {policy} (from the trace)\n")),
            "{text}"
        );
        assert!(text.contains(property), "{text}");
        let out = arrival(&["replay", trace, "--json"]);
        assert_status(&out, 1, "replay --json of a trace");
        assert_eq!(json(&out)["policy"], policy);
        let out = arrival(&["replay", trace, "--policy", "spec"]);
        assert_status(&out, 0, "replay of a trace under --policy spec");
        assert!(!stdout(&out).contains("from the trace"));
        let out = arrival(&["replay", trace, "--policy", "spec", "--json"]);
        assert_eq!(json(&out)["policy"], "spec", "{trace}");
        // A fixture without a trace block replays under SPEC, with no such header.
        let out = arrival(&["replay", plain]);
        assert_status(&out, 0, "replay of a fixture without a trace block");
        assert!(!stdout(&out).contains("from the trace"));
    }
}

#[test]
fn replay_with_a_wrong_expect_exits_1_and_names_what_differs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(B62_15)).expect("B62-15");
    let mut fixture: Value = serde_json::from_str(&text).expect("B62-15 is JSON");
    fixture["expect"]["final"]["card-7"]["version"] = 13.into();
    fixture["expect"]["unresolved"] = serde_json::json!(["e-204"]);
    fixture["expect"]["replacements"]["event"] = 3.into();
    let dir = temp_dir("wrong-expect");
    let file = dir.path().join("B62-15-wrong-expect.json");
    std::fs::write(&file, serde_json::to_string_pretty(&fixture).unwrap()).expect("written");
    let file = file.to_str().expect("a UTF-8 temp path");

    let output = arrival(&["replay", file]);
    assert_status(&output, 1, "wrong expect");
    let out = stdout(&output);
    assert!(out.contains("expect: DIFFERS"), "{out}");
    assert!(out.contains("card-7 expected v13"), "{out}");
    assert!(out.contains("but is v14"), "{out}");
    assert!(out.contains("unresolved: expected [\"e-204\"]"), "{out}");
    assert!(out.contains("replacements: expected 3 event"), "{out}");
    assert!(
        !out.contains("card-8 expected"),
        "card-8 is as expected: {out}"
    );

    let output = arrival(&["replay", "--json", file]);
    assert_status(&output, 1, "wrong expect, --json");
    let report = json(&output);
    assert_eq!(report["expect"]["holds"], false, "{report:#}");
    let differences = report["expect"]["differences"]
        .as_array()
        .expect("differences");
    assert_eq!(differences.len(), 3, "{differences:#?}");
}

#[test]
fn protocol_anomalies_are_held_not_rejected() {
    let output = arrival(&["replay", ANOMALIES]);
    assert_status(&output, 0, "protocol anomalies");
    assert!(
        stdout(&output).contains("expect: holds"),
        "{}",
        stdout(&output)
    );

    let output = arrival(&["replay", "--json", ANOMALIES]);
    assert_status(&output, 0, "protocol anomalies, --json");
    let report = json(&output);
    let steps = report["steps"].as_array().expect("steps");
    // Delivery by delivery: (event id, card, decision, paused after, held after).
    let expected: [(Value, Value, &str, &[&str]); 10] = [
        // Rule 5: missing version pauses the card.
        (
            "a-1".into(),
            "card-1".into(),
            "held_missing_version",
            &["card-1"],
        ),
        // Rule 1: non-string event_id, held by delivery number, pauses the card it names.
        (
            Value::Null,
            "card-2".into(),
            "held_malformed",
            &["card-1", "card-2"],
        ),
        // Rule 3: non-string object_id; no card to pause.
        (
            "a-3".into(),
            Value::Null,
            "held_malformed",
            &["card-1", "card-2"],
        ),
        // Rule 2: unsupported type pauses the known card.
        (
            "a-4".into(),
            "card-3".into(),
            "held_unsupported_type",
            &["card-1", "card-2", "card-3"],
        ),
        // Rule 5: state not an object.
        (
            "a-5".into(),
            "card-4".into(),
            "held_malformed",
            &["card-1", "card-2", "card-3", "card-4"],
        ),
        // An event that is a string, then one that is an array: no identity, no card.
        (
            Value::Null,
            Value::Null,
            "held_malformed",
            &["card-1", "card-2", "card-3", "card-4"],
        ),
        (
            Value::Null,
            Value::Null,
            "held_malformed",
            &["card-1", "card-2", "card-3", "card-4"],
        ),
        // Rule 5: a version of 1.5.
        (
            "a-8".into(),
            "card-5".into(),
            "held_invalid_version",
            &["card-1", "card-2", "card-3", "card-4", "card-5"],
        ),
        // An empty envelope.
        (
            Value::Null,
            Value::Null,
            "held_malformed",
            &["card-1", "card-2", "card-3", "card-4", "card-5"],
        ),
        // Rule 4: a good event for a paused card waits.
        (
            "a-10".into(),
            "card-1".into(),
            "held_paused",
            &["card-1", "card-2", "card-3", "card-4", "card-5"],
        ),
    ];
    for (index, (event_id, object_id, decision, paused)) in expected.iter().enumerate() {
        let step = &steps[index];
        let what = format!("delivery {}: {step:#}", index + 1);
        assert_eq!(step["kind"], "deliver", "{what}");
        assert_eq!(step["delivery"], index + 1, "{what}");
        assert_eq!(&step["event_id"], event_id, "{what}");
        assert_eq!(&step["object_id"], object_id, "{what}");
        assert_eq!(step["decision"], *decision, "{what}");
        assert_eq!(step["ack"], "held", "{what}");
        assert_eq!(step["paused"], serde_json::json!(paused), "{what}");
        // Nothing held changes a card.
        assert_eq!(step["cards"], steps[0]["cards"], "{what}");
    }
    assert_eq!(
        steps[9]["held"],
        serde_json::json!([
            "a-1",
            "delivery-2",
            "a-3",
            "a-4",
            "a-5",
            "delivery-6",
            "delivery-7",
            "a-8",
            "delivery-9",
            "a-10"
        ])
    );
    // card-1's authority (v6) replaces it; a-10 (v7) is then applied; a-1 (no version) is
    // superseded, never given an invented version.
    let card_1 = &steps[10];
    assert_eq!(card_1["outcome"], "replaced", "{card_1:#}");
    assert_eq!(
        card_1["re_evaluated"],
        serde_json::json!([{"event_id": "a-10", "from": "held_paused", "decision": "applied"}])
    );
    assert_eq!(card_1["superseded"], serde_json::json!(["a-1"]));
    // card-2's authority confirms it; the anonymous delivery that paused it is superseded.
    let card_2 = &steps[11];
    assert_eq!(card_2["outcome"], "confirmed", "{card_2:#}");
    assert_eq!(card_2["superseded"], serde_json::json!(["delivery-2"]));
    assert_eq!(
        card_2["paused"],
        serde_json::json!(["card-3", "card-4", "card-5"])
    );

    assert_eq!(report["final"]["card-1"]["version"], 7);
    assert_eq!(report["final"]["card-1"]["state"]["stage"], "archived");
    assert_eq!(
        report["paused"],
        serde_json::json!(["card-3", "card-4", "card-5"])
    );
    assert_eq!(
        report["replacements"],
        serde_json::json!({"event": 1, "authority": 1})
    );
    assert_eq!(
        report["unresolved"],
        serde_json::json!([
            "a-1",
            "a-3",
            "a-4",
            "a-5",
            "a-8",
            "delivery-2",
            "delivery-6",
            "delivery-7",
            "delivery-9"
        ])
    );
    assert_eq!(report["expect"]["holds"], true, "{:#}", report["expect"]);
}

#[test]
fn check_catches_the_ignore_pause_mutant_as_expected() {
    let output = arrival(&["check", IGNORE_PAUSE, "--quiet", "--json"]);
    assert_status(&output, 0, "check ignore-pause");
    let document = json(&output);
    let model = &document["models"][0];
    assert_eq!(model["verdict"], "fail", "{model:#}");
    assert_eq!(model["expected"], "paused-frozen");
    assert_eq!(model["as_expected"], true);
    assert_eq!(model["policy"], "ignore-pause");
    let violated = model["violated"].as_array().expect("violated");
    assert!(
        violated.iter().any(|name| name == "paused-frozen"),
        "{violated:?}"
    );
}

#[test]
fn check_of_the_ignore_pause_model_under_the_spec_policy_exits_1() {
    let output = arrival(&["check", IGNORE_PAUSE, "--quiet", "--policy", "spec"]);
    assert_status(&output, 1, "check ignore-pause --policy spec");
    let out = stdout(&output);
    assert!(
        out.contains("verdict: pass (expected paused-frozen)"),
        "{out}"
    );
    assert!(out.contains("NOT AS EXPECTED"), "{out}");
}

/// Validates a JUnit file against `tests/schema/junit.xsd` with `xmllint`.
fn validate_junit(file: &std::path::Path) {
    let validated = Command::new("xmllint")
        .args(["--noout", "--schema", "tests/schema/junit.xsd"])
        .arg(file)
        .output()
        .unwrap_or_else(|error| {
            panic!("xmllint is needed to validate JUnit output ({error}): install libxml2-utils (`apt-get install libxml2-utils`)")
        });
    assert!(
        validated.status.success(),
        "{}: {}",
        file.display(),
        String::from_utf8_lossy(&validated.stderr)
    );
}

#[test]
fn conform_junit_is_schema_valid_with_a_case_per_property_and_a_harness_case() {
    let dir = temp_dir("conform-junit");
    let file = dir.path().join("conform.xml");
    let target = format!(
        "stdio:{} store stdio --mutant ack-before-commit",
        crate::util::ARRIVAL
    );
    let out = arrival(&[
        "conform",
        "models/b62-15.toml",
        "--target",
        &target,
        "--no-traces",
        "--no-mutants",
        "--no-cover",
        "--walks",
        "1",
        "--junit",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    validate_junit(&file);
    let xml = std::fs::read_to_string(&file).unwrap();
    assert_eq!(xml.matches("<testcase").count(), 9 + 1);
    assert_eq!(xml.matches("<failure").count(), 1, "{xml}");
    // Cases are named after their property alone; what conform cannot see is skipped.
    assert!(xml.contains("name=\"ack-implies-recorded\""), "{xml}");
    assert!(xml.contains("<skipped message=\"unobserved: "), "{xml}");
    // Kept as a test of the wrong receiver (`--expect`), the suite passes exactly when the
    // exit status is 0: the expected property's case passes, and an `expect` case is added.
    let expected = arrival(&[
        "conform",
        "models/b62-15.toml",
        "--target",
        &target,
        "--no-traces",
        "--no-mutants",
        "--no-cover",
        "--walks",
        "1",
        "--expect",
        "ack-implies-recorded",
        "--junit",
        file.to_str().unwrap(),
    ]);
    assert_eq!(expected.status.code(), Some(0), "{}", stderr(&expected));
    validate_junit(&file);
    let xml = std::fs::read_to_string(&file).unwrap();
    assert_eq!(xml.matches("<testcase").count(), 9 + 1 + 1);
    assert_eq!(xml.matches("<failure").count(), 0, "{xml}");
    assert!(xml.contains("name=\"ack-implies-recorded\""), "{xml}");
    assert!(xml.contains("expect ack-implies-recorded"));
    // A harness failure writes the harness case alone, failed.
    let broken = arrival(&[
        "conform",
        "models/b62-15.toml",
        "--target",
        "http:true",
        "--json",
        "--junit",
        file.to_str().unwrap(),
    ]);
    assert_eq!(broken.status.code(), Some(3), "{}", stderr(&broken));
    // With --json, exit 3 has its document too.
    let document: serde_json::Value = serde_json::from_slice(&broken.stdout).unwrap();
    assert_eq!(document["verdict"], "harness_failure", "{document}");
    assert!(document["harness"]["message"].is_string(), "{document}");
    validate_junit(&file);
    let xml = std::fs::read_to_string(&file).unwrap();
    assert_eq!(xml.matches("<testcase").count(), 1);
    assert!(xml.contains("name=\"harness\""));
}

#[test]
fn junit_output_is_schema_valid_with_a_case_per_property_and_the_trace_in_a_failure() {
    let dir = temp_dir("junit");
    let file = dir.path().join("out.xml");
    let out = arrival(&[
        "check",
        "--quiet",
        "--junit",
        file.to_str().unwrap(),
        "models/b62-15-split.toml",
        "models/mutant-ignore-pause.toml",
        "models/acmeflow-mutant-ack-before-commit.toml",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    validate_junit(&file);
    let xml = std::fs::read_to_string(&file).unwrap();
    assert_eq!(xml.matches("<testsuite ").count(), 3);
    // Thirteen properties, the opt-in one, the harness's `panic` and the verdict for each
    // card model.
    let cases = |suite: &str| {
        let start = xml.find(&format!("<testsuite name=\"{suite}\"")).unwrap();
        let end = start + xml[start..].find("</testsuite>").unwrap();
        xml[start..end].matches("<testcase ").count()
    };
    assert_eq!(cases("models/b62-15-split.toml"), 16);
    assert!(!xml[..xml.find("models/mutant-ignore-pause.toml").unwrap()].contains("<failure"));
    // The mutant's violation is a failure carrying its shortest trace in domain terms.
    assert!(
        xml.contains("paused-frozen violated (the model file expects this violation) in 2 steps: 1. deliver #9 e-204; 2. deliver #10 e-205"),
        "{xml}"
    );
    assert!(
        xml.contains("c1 consumes, crashes before the inbox commit"),
        "{xml}"
    );
    // The verdict cases pass: every model is as expected.
    assert!(!xml.contains("not as expected"), "{xml}");
}

#[test]
fn check_flags_override_the_model_file() {
    // b62-15 with no faults at all is much smaller than the file's D=L=C=1.
    let out = arrival(&[
        "check",
        "--quiet",
        "--json",
        "--budgets",
        "0,0,0,0",
        "--strategy",
        "bfs",
        "--threads",
        "1",
        "--properties",
        "convergence,version-monotonic",
        "models/b62-15.toml",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let model = &report["models"][0];
    // 16,898 when paused cards keep how they got there (`merge_paused = false`), 44,928
    // when settled records' state decisions also tell worlds apart (`merge_settled =
    // false`), and 64,400 when identical redeliveries are also sent in every order
    // (`symmetry = false`).
    assert_eq!(model["unique_states"], 3_024, "{model}");
    let status = |name: &str| {
        model["properties"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["status"]
            .clone()
    };
    assert_eq!(status("convergence"), "holds");
    assert_eq!(status("paused-frozen"), "not checked");
    // A wrong number of budgets is bad input, named.
    let bad = arrival(&["check", "--budgets", "1,2", "models/b62-15.toml"]);
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("--budgets") && stderr.contains("takes 4 budgets"),
        "{stderr}"
    );
    // --help lists the policies, the properties and the exit codes.
    let help = arrival(&["check", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    for needle in [
        "ack-before-commit",
        "reevaluate-conflicted-first",
        "ready-converges",
        "authority-current",
        "Exit status",
    ] {
        assert!(text.contains(needle), "{needle} missing from --help");
    }
}

#[test]
fn replay_tables_fit_in_120_columns_unless_wide() {
    for fixture in [
        "fixtures/B62-15-events.json",
        "fixtures/every-decision.json",
        "fixtures/acmeflow-wf14.json",
        "fixtures/facts-faults.json",
    ] {
        let out = arrival(&["replay", fixture]);
        let text = String::from_utf8_lossy(&out.stdout);
        let widest = text
            .lines()
            .map(|line| line.chars().count())
            .max()
            .unwrap_or(0);
        assert!(
            widest <= 120,
            "{fixture}: a line of {widest} columns\n{text}"
        );
    }
    let wide = arrival(&["replay", "--wide", "fixtures/B62-15-events.json"]);
    let text = String::from_utf8_lossy(&wide.stdout);
    assert!(text.lines().any(|line| line.chars().count() > 120));
    assert!(text.contains("card-7 v14 {label:Map v2,stage:archived}; card-8"));
}

/// Runs `arrival ARGS` that name an output path that cannot be written: exit 2 at once,
/// naming the flag and saying `cannot write`, with no report printed.
fn refused_output(args: &[&str], flag: &str) {
    let started = std::time::Instant::now();
    let out = arrival(args);
    assert_status(&out, 2, &args.join(" "));
    let err = stderr(&out);
    assert!(err.contains(flag) && err.contains("cannot write"), "{err}");
    assert!(!err.contains("cannot read"), "{err}");
    assert!(out.stdout.is_empty(), "ran anyway: {}", stdout(&out));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{args:?} ran before refusing"
    );
}

#[test]
fn output_paths_that_cannot_be_written_stop_the_run_before_any_work() {
    let dir = temp_dir("outputs");
    refused_output(
        &[
            "check",
            "--quiet",
            "--junit",
            "/nonexistent/x.xml",
            IGNORE_PAUSE,
        ],
        "--junit",
    );
    refused_output(
        &[
            "check",
            "--quiet",
            "--trace-out",
            "/proc/nope",
            IGNORE_PAUSE,
        ],
        "--trace-out",
    );
    // A file where the trace folder should be.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    refused_output(
        &[
            "check",
            "--quiet",
            "--trace-out",
            file.join("traces").to_str().unwrap(),
            IGNORE_PAUSE,
        ],
        "--trace-out",
    );
    refused_output(
        &[
            "report",
            "merge",
            "--junit",
            "/nonexistent/x.xml",
            "no-such-report.json",
        ],
        "--junit",
    );
    refused_output(&["gen", "--out", "/nonexistent/fixture.json"], "--out");
    refused_output(
        &[
            "store",
            "drill",
            "crash",
            "fixtures/B62-15-events.json",
            "--kills",
            "3",
            "--junit",
            "/nonexistent/x.xml",
        ],
        "--junit",
    );
    refused_output(
        &["pipeline", "drill", "kill", "--junit", "/nonexistent/x.xml"],
        "--junit",
    );
    // A writable --junit that did not exist is not left behind by the check.
    let junit = dir.path().join("later.xml");
    let out = arrival(&[
        "report",
        "merge",
        "--junit",
        junit.to_str().unwrap(),
        "no-such-report.json",
    ]);
    assert_status(&out, 2, "merge of a missing report");
    assert!(stderr(&out).contains("no-such-report.json"));
    assert!(!junit.exists());
}

#[test]
fn store_drill_junit_is_schema_valid_with_a_case_per_check() {
    let dir = temp_dir("drill-junit");
    let file = dir.path().join("drill.xml");
    let db = format!("sqlite:{}", dir.path().join("drill.db").display());
    let out = arrival(&[
        "store",
        "drill",
        "crash",
        "fixtures/B62-15-events.json",
        "--kills",
        "3",
        "--db",
        &db,
        "--junit",
        file.to_str().unwrap(),
    ]);
    assert_status(&out, 0, "store drill crash");
    validate_junit(&file);
    let xml = std::fs::read_to_string(&file).unwrap();
    assert_eq!(xml.matches("<testsuite ").count(), 1, "{xml}");
    assert!(
        xml.contains("<testsuite name=\"store drill crash on B62-15"),
        "{xml}"
    );
    for check in [
        "every acknowledged delivery recorded, as acknowledged",
        "no decision twice",
        "final state equals the model",
    ] {
        assert!(
            xml.contains(&format!("<testcase name=\"{check}")),
            "{check}: {xml}"
        );
    }
    assert_eq!(xml.matches("<testcase ").count(), 8, "{xml}");
    assert!(!xml.contains("<failure"), "{xml}");
}

#[test]
fn a_trace_the_state_limit_kept_from_being_shortened_says_so() {
    // B62-15 under last-arrival-wins with convergence alone: version-monotonic, which
    // catches the mutant first, would cut the paths to a convergence violation short.
    let model = "models/b62-15.toml";
    let only = [
        "--policy",
        "last-arrival-wins",
        "--properties",
        "convergence",
    ];
    let trace_of = |out: &Output| -> Value {
        let report = json(out);
        report["models"][0]["properties"]
            .as_array()
            .expect("properties")
            .iter()
            .find(|property| property["name"] == "convergence")
            .expect("convergence is checked")["trace"]
            .clone()
    };
    // Depth-first, the checker meets a convergence violation within 200 states; the
    // breadth-first search for a shortest one needs more than that.
    let limited = [
        "check",
        model,
        "--quiet",
        "--strategy",
        "dfs",
        "--state-limit",
        "200",
        only[0],
        only[1],
        only[2],
        only[3],
    ];
    let mut args = limited.to_vec();
    args.push("--json");
    let trace = trace_of(&arrival(&args));
    assert_eq!(trace["shortest"], false, "{trace}");
    let text = stdout(&arrival(&limited));
    assert!(text.contains("not known to be shortest"), "{text}");
    // Without the limit the same model's trace is a shortest one, and says nothing more.
    let mut args = vec!["check", model, "--quiet", "--strategy", "dfs", "--json"];
    args.extend(only);
    let out = arrival(&args);
    let trace = trace_of(&out);
    assert_eq!(trace["shortest"], true, "{trace}");
    assert!(
        trace["steps"].as_array().unwrap().len() <= 12,
        "a shortest trace is no longer than the limited run's: {trace}"
    );
    let mut args = vec!["check", model, "--quiet", "--strategy", "dfs"];
    args.extend(only);
    let text = stdout(&arrival(&args));
    assert!(!text.contains("not known to be shortest"), "{text}");
}

/// A loopback port nobody listens on: bound, then let go.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("an address").port()
}

#[test]
fn a_database_that_does_not_answer_exits_3_naming_it() {
    let url = format!("postgres://postgres@127.0.0.1:{}/x", dead_port());
    let output = arrival(&["store", "show", "--db", &url]);
    assert_status(&output, 3, "store show on a dead PostgreSQL");
    let err = stderr(&output);
    assert!(err.contains("database") && err.contains(&url), "{err}");
    let output = arrival(&[
        "store", "drill", "crash", B62_15, "--kills", "1", "--db", &url,
    ]);
    assert_status(&output, 3, "store drill crash on a dead PostgreSQL");
    let err = stderr(&output);
    assert!(err.contains("database") && err.contains(&url), "{err}");
}

#[test]
fn a_redis_that_does_not_answer_exits_3_naming_it() {
    let redis = format!("redis://127.0.0.1:{}", dead_port());
    let output = Command::new(env!("CARGO_BIN_EXE_arrival"))
        .args([
            "pipeline",
            "run",
            "fixtures/acmeflow-wf14.json",
            "--redis-url",
            &redis,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("arrival runs");
    assert_status(&output, 3, "pipeline run on a dead Redis");
    let err = stderr(&output);
    assert!(err.to_lowercase().contains("redis"), "{err}");
}

#[test]
fn pipeline_load_on_a_dead_redis_exits_3_naming_it() {
    // `load` used to print "0 accepted, 0 req/s" and exit 0: a throughput figure of a
    // pipeline that never reached Redis.
    let redis = format!("redis://127.0.0.1:{}", dead_port());
    let output = arrival(&[
        "pipeline",
        "load",
        "--requests",
        "5",
        "--consumers",
        "1",
        "--redis-url",
        &redis,
    ]);
    assert_status(&output, 3, "pipeline load on a dead Redis");
    let err = stderr(&output);
    assert!(err.contains("Redis") && err.contains(&redis), "{err}");
}

#[test]
fn a_malformed_database_or_redis_url_exits_2_naming_the_flag() {
    // A URL that does not parse is bad input, not a server that does not answer: it used
    // to exit 3 with the hint to install and start PostgreSQL or Redis.
    for url in ["postgres://", "postgres://postgres@[::1:5432/x"] {
        let output = arrival(&["store", "show", "--db", url]);
        assert_status(&output, 2, &format!("store show --db {url}"));
        assert!(stderr(&output).contains("--db"), "{}", stderr(&output));
    }
    let output = arrival(&[
        "pipeline",
        "run",
        "fixtures/acmeflow-wf14.json",
        "--redis-url",
        "notaurl",
    ]);
    assert_status(&output, 2, "pipeline run --redis-url notaurl");
    assert!(
        stderr(&output).contains("--redis-url"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_malformed_fixture_still_exits_2_and_help_lists_every_exit_status() {
    let output = arrival(&[
        "store",
        "init",
        "--db",
        "sqlite:/nonexistent/never.db",
        "--fixture",
        "tests/malformed/not-json.json",
    ]);
    assert_status(&output, 2, "store init with a malformed fixture");
    let help = stdout(&arrival(&["--help"]));
    for line in [
        "0  everything as expected",
        "1  something is not as expected",
        "2  bad input",
        "3  the environment failed",
    ] {
        assert!(help.contains(line), "{line}: {help}");
    }
}

#[test]
fn a_sweep_of_no_fixtures_is_bad_input_naming_the_flag() {
    let output = arrival(&["check", "--sweep", "0"]);
    assert_status(&output, 2, "check --sweep 0");
    assert!(stderr(&output).contains("--sweep"), "{}", stderr(&output));
}

/// The review's probe: `init` over an inbox whose application was upgraded used to move it
/// back to the fixture's version 1. Now init refuses any file that exists, says how to
/// start over, and leaves the inbox exactly as it was.
#[test]
fn pipeline_init_refuses_an_existing_inbox_and_leaves_it_as_it_was() {
    let dir = temp_dir("pipeline-init");
    let db = dir.path().join("inbox.db");
    let keys = dir.path().join("keys.json");
    let (db_text, keys_text) = (db.to_str().unwrap(), keys.to_str().unwrap());
    let init = [
        "pipeline",
        "init",
        "--db",
        db_text,
        "--fixture",
        "fixtures/acmeflow-wf14.json",
        "--keys-out",
        keys_text,
    ];
    assert_status(&arrival(&init), 0, "the first init");
    let upgrade = arrival(&[
        "pipeline",
        "upgrade",
        "--db",
        db_text,
        "--tenant",
        "xinghe-demo",
        "--application",
        "3f6b2c1e-8d4a-4f7b-9c2e-5a1d0e7f9b34",
        "--material-version",
        "2",
    ]);
    assert_status(&upgrade, 0, "upgrade to version 2");
    let again = arrival(&init);
    assert_status(&again, 2, "init over an existing inbox");
    let message = stderr(&again);
    assert!(
        message.contains(db_text) && message.contains("exists") && message.contains("delete"),
        "the refusal names the file and says how to start over: {message}"
    );
    let status = stdout(&arrival(&["pipeline", "status", "--db", db_text]));
    assert!(
        status.contains("3f6b2c1e-8d4a-4f7b-9c2e-5a1d0e7f9b34 v2"),
        "the application stays at version 2: {status}"
    );
    // Any other file at that path is refused too, and not turned into an inbox.
    let other = dir.path().join("notes.txt");
    std::fs::write(&other, b"keep me").unwrap();
    let output = arrival(&[
        "pipeline",
        "init",
        "--db",
        other.to_str().unwrap(),
        "--fixture",
        "fixtures/acmeflow-wf14.json",
        "--keys-out",
        keys_text,
    ]);
    assert_status(&output, 2, "init over another file");
    assert_eq!(std::fs::read(&other).unwrap(), b"keep me");
}

/// `serve` is the production receiver: one flag must not turn it into a wrong one. The
/// refusal comes before any file is read, and says where mutants belong.
#[test]
fn pipeline_serve_refuses_a_mutant_and_says_where_mutants_belong() {
    let output = arrival(&[
        "pipeline",
        "serve",
        "--db",
        "/nonexistent/inbox.db",
        "--keys",
        "/nonexistent/keys.json",
        "--mutant",
        "ack-before-commit",
    ]);
    assert_status(&output, 2, "serve --mutant");
    let message = stderr(&output);
    assert!(
        message.contains("--mutant")
            && message.contains("production")
            && message.contains("pipeline drill"),
        "{message}"
    );
}

/// `pipeline consume` checks `--db` as `serve` does, and its hidden drill chance must be a
/// chance: both are bad input, said with the flag, before anything connects.
#[test]
fn pipeline_consume_refuses_a_missing_inbox_and_a_chance_that_is_not_one() {
    let missing = arrival(&["pipeline", "consume", "--db", "/nonexistent/inbox.db"]);
    assert_status(&missing, 2, "consume --db with no inbox");
    let message = stderr(&missing);
    assert!(
        message.contains("--db") && message.contains("/nonexistent/inbox.db"),
        "{message}"
    );
    let chance = arrival(&[
        "pipeline",
        "consume",
        "--db",
        "/nonexistent/inbox.db",
        "--drill-kill-at",
        "before-commit",
        "--drill-kill-chance",
        "1.5",
    ]);
    assert_status(&chance, 2, "consume --drill-kill-chance 1.5");
    assert!(
        stderr(&chance).contains("--drill-kill-chance"),
        "{}",
        stderr(&chance)
    );
}

#[test]
fn a_fifth_budget_sets_the_re_encoded_copies() {
    // dedupe-by-body-hash is seen only with a re-encoded copy: `--budgets D,L,C,E,R` gives one.
    let with = |budgets: &str| {
        arrival(&[
            "check",
            "models/b62-15.toml",
            "--quiet",
            "--policy",
            "dedupe-by-body-hash",
            "--budgets",
            budgets,
        ])
    };
    let caught = with("0,0,0,0,1");
    assert_status(&caught, 1, "one re-encoded copy");
    assert!(stdout(&caught).contains("duplicate-no-effect      violated"));
    assert_status(&with("0,0,0,0"), 0, "no re-encoded copy");
    assert_status(&with("0,0,0,0,0"), 0, "no re-encoded copy, said so");
}

#[test]
fn a_malformed_or_foreign_plan_exits_2_naming_the_file_and_the_field() {
    let dir = temp_dir("conform-plan-bad");
    let file = dir.path().join("plan.json");
    let written = arrival(&[
        "conform",
        "models/b62-15.toml",
        "--plan-out",
        file.to_str().unwrap(),
        "--no-traces",
        "--no-mutants",
        "--no-cover",
        "--walks",
        "2",
    ]);
    assert_eq!(written.status.code(), Some(0), "{}", stderr(&written));
    let good: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let run = |text: &str, model: &str| {
        std::fs::write(&file, text).unwrap();
        let out = arrival(&[
            "conform",
            model,
            "--plan",
            file.to_str().unwrap(),
            "--target",
            "http:true",
        ]);
        assert_eq!(out.status.code(), Some(2), "{text}: {}", stderr(&out));
        stderr(&out)
    };
    let said = run(
        "{\"protocol\": \"card-plan\",\n  \"schedules\": [",
        "models/b62-15.toml",
    );
    assert!(
        said.contains("plan.json") && said.contains("line 2"),
        "{said}"
    );
    let mut unknown = good.clone();
    unknown["schedules"][1]["actions"][0] = serde_json::json!({"deliver": 99});
    let said = run(&unknown.to_string(), "models/b62-15.toml");
    assert!(
        said.contains("schedules[1].actions[0]") && said.contains("delivery 99"),
        "{said}"
    );
    let mut typo = good.clone();
    typo["schedules"][0]["actions"][0] = serde_json::json!({"deliver": 1, "kil": true});
    let said = run(&typo.to_string(), "models/b62-15.toml");
    assert!(
        said.contains("schedules[0].actions[0]") && said.contains("kil"),
        "{said}"
    );
    // A schedule that opens with a reconciliation the model never allows can never run.
    let mut never = good.clone();
    never["schedules"][0]["actions"] = serde_json::json!([{"reconcile": "card-8"}]);
    let said = run(&never.to_string(), "models/b62-15.toml");
    assert!(
        said.contains("schedules[0].actions[0]") && said.contains("never allows"),
        "{said}"
    );
    // A copy of a delivery the schedule never sent is no fault the model has.
    let mut copy = good.clone();
    copy["schedules"][0]["actions"] = serde_json::json!([{"deliver": 3, "duplicate": true}]);
    let said = run(&copy.to_string(), "models/b62-15.toml");
    assert!(
        said.contains("schedules[0].actions[0]") && said.contains("has not sent before"),
        "{said}"
    );
    // A schedule with nothing to do.
    let mut empty = good.clone();
    empty["schedules"][1]["actions"] = serde_json::json!([]);
    let said = run(&empty.to_string(), "models/b62-15.toml");
    assert!(
        said.contains("schedules[1].actions") && said.contains("at least one action"),
        "{said}"
    );
    // The same plan for another fixture: its deliveries would mean something else.
    let said = run(&good.to_string(), "models/every-decision.toml");
    assert!(said.contains("fixture_digest"), "{said}");
    // Without --target only --plan-out works.
    std::fs::write(&file, good.to_string()).unwrap();
    let out = arrival(&[
        "conform",
        "models/b62-15.toml",
        "--plan",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--target"), "{}", stderr(&out));
}

#[test]
fn a_malformed_or_foreign_facts_plan_exits_2_naming_the_file_and_the_field() {
    let dir = temp_dir("conform-facts-plan-bad");
    let file = dir.path().join("plan.json");
    let model = "models/acmeflow-retries.toml";
    let written = arrival(&[
        "conform",
        model,
        "--plan-out",
        file.to_str().unwrap(),
        "--no-mutants",
        "--no-traces",
        "--walks",
        "1",
    ]);
    assert_eq!(written.status.code(), Some(0), "{}", stderr(&written));
    assert!(
        stdout(&written).contains("plan: 2 schedules"),
        "{}",
        stdout(&written)
    );
    let good: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(good["protocol"], "facts-plan");
    assert_eq!(good["schedules"][0]["origin"], "fixture");
    let run = |text: &str, model: &str| {
        std::fs::write(&file, text).unwrap();
        let out = arrival(&[
            "conform",
            model,
            "--plan",
            file.to_str().unwrap(),
            "--target",
            "examples/targets/pipeline-serve.toml",
        ]);
        assert_eq!(out.status.code(), Some(2), "{text}: {}", stderr(&out));
        stderr(&out)
    };
    let said = run("{\"protocol\": \"facts-plan\",\n  \"schedules\": [", model);
    assert!(
        said.contains("plan.json") && said.contains("line 2"),
        "{said}"
    );
    let mut unknown = good.clone();
    unknown["schedules"][1]["actions"][0] =
        serde_json::json!({"post": {"request": 99, "bytes": "resigned"}});
    let said = run(&unknown.to_string(), model);
    assert!(
        said.contains("schedules[1].actions[0]") && said.contains("request 99"),
        "{said}"
    );
    let mut typo = good.clone();
    typo["schedules"][0]["actions"][1] =
        serde_json::json!({"post": {"request": 1, "bytes": "resigned", "falt": "lost_answer"}});
    let said = run(&typo.to_string(), model);
    assert!(
        said.contains("schedules[0].actions[1]") && said.contains("falt"),
        "{said}"
    );
    // A card plan is not a facts plan.
    let mut card = good.clone();
    card["protocol"] = serde_json::json!("card-plan");
    let said = run(&card.to_string(), model);
    assert!(
        said.contains("protocol") && said.contains("facts-plan"),
        "{said}"
    );
    // The same plan for another fixture: its request numbers would mean other requests.
    let said = run(&good.to_string(), "models/acmeflow-conflict.toml");
    assert!(said.contains("fixture_digest"), "{said}");
}

/// `--expect` takes only what a run can report: `pass`, `diverged` or a property a
/// conform run names. A property no observation can pin would never be met: exit 2.
#[test]
fn conform_expect_refuses_a_property_no_run_can_name() {
    let cases = [
        ("models/b62-15.toml", "http:true", "first-record-immutable"),
        (
            "models/b62-15.toml",
            "http:true",
            "reconciliation-settles-holds",
        ),
        (
            "models/acmeflow-retries.toml",
            "examples/targets/pipeline-serve.toml",
            "fact-once",
        ),
    ];
    for (model, target, property) in cases {
        let out = arrival(&["conform", model, "--target", target, "--expect", property]);
        assert_eq!(out.status.code(), Some(2), "{property}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains("--expect") && said.contains(property),
            "{property}: {said}"
        );
    }
}

/// `--channels` names each channel at most once: an empty list or item, or a channel
/// twice, is a typo, not a choice (found by review: both were accepted).
#[test]
fn conform_channels_refuse_empty_names_and_repeats() {
    for list in ["", "ack,ack", "ack,,paused", "cards,"] {
        let out = arrival(&[
            "conform",
            "models/b62-15.toml",
            "--target",
            "http:true",
            "--channels",
            list,
        ]);
        assert_eq!(out.status.code(), Some(2), "{list:?}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains("--channels") && said.contains("at most once"),
            "{list:?}: {said}"
        );
    }
}
