//! `arrival conform` on the facts protocol against real processes: `arrival pipeline serve`
//! (the contract: sampled), `pipeline serve-wrong` with two mutants (caught, named, shrunk
//! and confirmed), and broken harnesses (exit 3). Redis is the one at `ARRIVAL_REDIS_URL`;
//! each reset takes a new stream and the target file's clean-up deletes it. Walk counts are
//! small; the CLI's defaults are for real runs.

use crate::util::{arrival, assert_status, json, root, temp_dir};
use serde_json::Value;
use std::path::Path;

const SERVE: &str = "examples/targets/pipeline-serve.toml";
const SENT_AT: &str = "examples/targets/pipeline-serve-wrong-sent-at.toml";

/// `arrival conform SOURCE --target TARGET --json EXTRA...`; a facts model file's mutant
/// schedules left out (their searches cost seconds a run; one test runs them).
fn conform(source: &str, target: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["conform", source, "--target", target, "--json"];
    if source.ends_with(".toml") {
        args.push("--no-mutants");
    }
    args.extend_from_slice(extra);
    arrival(&args)
}

fn status_of(report: &Value, name: &str) -> String {
    let properties = report["properties"].as_array().expect("properties");
    let entry = properties.iter().find(|p| p["name"] == name).expect(name);
    entry["status"].as_str().unwrap().to_owned()
}

fn steps(report: &Value) -> Vec<String> {
    report["failure"]["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// The example target file with its receiver and expectation changed, in `dir`.
fn target_file(dir: &Path, name: &str, edit: impl Fn(String) -> String) -> String {
    let text = std::fs::read_to_string(root().join(SERVE)).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, edit(text)).unwrap();
    path.display().to_string()
}

#[test]
fn pipeline_serve_is_sampled_on_re_signed_retries_lost_answers_and_kills() {
    let output = conform("models/acmeflow-retries.toml", SERVE, &["--walks", "3"]);
    assert_status(&output, 0, "conform pipeline serve");
    let report = json(&output);
    assert_eq!(report["verdict"], "sampled");
    assert_eq!(report["protocol"], "facts");
    // The fixture's own schedule, the kept sent-at-in-content trace and three walks.
    assert_eq!(
        (report["schedules"].as_u64(), report["passed"].as_u64()),
        (Some(5), Some(5))
    );
    assert_eq!(report["counts"]["lost"], 0);
    assert!(report["counts"]["kills"].as_u64().unwrap() > 0, "{report}");
    assert!(report["counts"]["dropped_by_arrival"].as_u64().unwrap() > 0);
    for name in [
        "no-loss",
        "retry-invisible",
        "ready-sound",
        "conflict-visible",
    ] {
        assert_eq!(status_of(&report, name), "sampled", "{name}");
    }
    assert_eq!(status_of(&report, "ack-after-commit"), "unobserved");
    assert_eq!(status_of(&report, "fact-once"), "unobserved");
    assert_eq!(status_of(&report, "lifecycle-forward"), "not exercised");
}

#[test]
fn sent_at_in_content_is_caught_as_retry_invisible_in_two_posts_and_its_files_rerun() {
    let dir = temp_dir("conform-facts-sent-at");
    let out = dir.path().display().to_string();
    let output = conform(
        "models/acmeflow-retries.toml",
        SENT_AT,
        &["--walks", "0", "--trace-out", &out],
    );
    // The target file expects retry-invisible: exit 0 when it is caught so, every time.
    assert_status(&output, 0, "conform serve-wrong sent-at-in-content");
    let report = json(&output);
    assert_eq!(report["verdict"], "violated");
    assert_eq!(report["failure"]["property"], "retry-invisible");
    assert_eq!(report["failure"]["found_by"], "fixture");
    assert_eq!(steps(&report), ["post #1 (answer lost)", "post #21"]);
    assert_eq!(report["failure"]["reproduced"], "3/3");
    assert_eq!(status_of(&report, "retry-invisible"), "violated");
    // The model's side replays as an ordinary facts fixture: the contract's pipeline keeps
    // one fact and counts the retry a duplicate.
    let fixture = dir
        .path()
        .join("acmeflow-retries.conform.retry-invisible.json");
    let replayed = arrival(&["replay", fixture.to_str().unwrap(), "--json"]);
    assert_status(&replayed, 0, "replay the written fixture");
    assert_eq!(json(&replayed)["duplicates"], 1);
    // The actions rerun: still caught on serve-wrong, sampled on serve.
    let actions = dir
        .path()
        .join("acmeflow-retries.conform.retry-invisible.actions.json");
    let actions = actions.to_str().unwrap();
    let again = conform(actions, SENT_AT, &["--confirm", "1"]);
    assert_status(&again, 0, "rerun on serve-wrong");
    assert_eq!(json(&again)["failure"]["property"], "retry-invisible");
    let fixed = conform(actions, SERVE, &[]);
    assert_status(&fixed, 0, "rerun on serve");
    assert_eq!(json(&fixed)["verdict"], "sampled");
}

#[test]
fn id_only_dedupe_is_caught_as_conflict_visible() {
    let dir = temp_dir("conform-facts-id-only");
    let target = target_file(dir.path(), "id-only.toml", |text| {
        text.replace(
            "\"pipeline\", \"serve\",",
            "\"pipeline\", \"serve-wrong\", \"--mutant\", \"id-only-dedupe\",",
        )
        .replace("expect = \"pass\"", "expect = \"conflict-visible\"")
    });
    let output = conform("models/acmeflow-conflict.toml", &target, &["--walks", "2"]);
    assert_status(&output, 0, "conform serve-wrong id-only-dedupe");
    let report = json(&output);
    assert_eq!(report["failure"]["property"], "conflict-visible");
    assert_eq!(steps(&report).len(), 2, "{report}");
    assert_eq!(report["failure"]["reproduced"], "3/3");
    // The fixture's schedule has a person's resolution: no operator channel, so skipped.
    let skipped = report["skipped"].as_array().unwrap();
    assert!(
        skipped
            .iter()
            .any(|s| s.as_str().unwrap().contains("an operator step")),
        "{skipped:?}"
    );
}

#[test]
fn a_broken_harness_exits_3_and_fails_only_the_junit_harness_case() {
    let dir = temp_dir("conform-facts-broken");
    type Edit = fn(String) -> String;
    let cases: [(&str, Edit); 3] = [
        // A register command that fails.
        ("register.toml", |text| {
            text.replace("\"--keys-out\"", "\"--no-such-flag\"")
        }),
        // A state command that prints something that is not JSON.
        ("state.toml", |text| {
            let start = text.find("state = [").unwrap();
            let end = start + text[start..].find(']').unwrap() + 1;
            format!(
                "{}state = [\"echo\", \"not json\"]{}",
                &text[..start],
                &text[end..]
            )
        }),
        // A receiver that exits before it is ready.
        ("command.toml", |text| {
            let start = text.find("command = [").unwrap();
            let end = start + text[start..].find(']').unwrap() + 1;
            format!("{}command = [\"false\"]{}", &text[..start], &text[end..])
        }),
    ];
    for (name, edit) in cases {
        let target = target_file(dir.path(), name, edit);
        let junit = dir.path().join(format!("{name}.xml"));
        let output = conform(
            "models/acmeflow-retries.toml",
            &target,
            &["--walks", "1", "--junit", junit.to_str().unwrap()],
        );
        assert_status(&output, 3, name);
        let xml = std::fs::read_to_string(&junit).unwrap();
        assert!(
            xml.contains("harness") && xml.contains("<failure"),
            "{name}: {xml}"
        );
    }
    // A card target for a facts model, and a facts target file without its state
    // command, are bad input.
    let output = conform("models/acmeflow-retries.toml", "http:python3 x.py", &[]);
    assert_status(&output, 2, "a card target for a facts model");
    let target = target_file(dir.path(), "no-state.toml", |text| {
        let start = text.find("state = [").unwrap();
        let end = start + text[start..].find(']').unwrap() + 1;
        format!("{}{}", &text[..start], &text[end..])
    });
    let output = conform("models/acmeflow-retries.toml", &target, &[]);
    assert_status(&output, 2, "a facts target file without `state`");
    assert!(crate::util::stderr(&output).contains("state"));
}

#[test]
fn a_pipeline_that_never_accepts_is_caught_as_no_loss_and_its_junit_fails_with_the_exit() {
    // Found by review: `pipeline serve` on a Redis that is not there answers 503 to every
    // valid post; without the liveness phase (owed requests retried, no faults) that ran
    // to `sampled`.
    let dir = temp_dir("conform-facts-dead-redis");
    let target = target_file(dir.path(), "dead-redis.toml", |text| {
        // The receiver's command only (the state command reads the real stream).
        text.replacen(
            "\"--stream\", \"{stream}\",",
            "\"--stream\", \"{stream}\", \"--redis-url\", \"redis://127.0.0.1:1\",",
            1,
        )
    });
    let junit = dir.path().join("junit.xml");
    let output = conform(
        "models/acmeflow-retries.toml",
        &target,
        &["--walks", "0", "--junit", junit.to_str().unwrap()],
    );
    assert_status(&output, 1, "conform serve on a dead Redis");
    let report = json(&output);
    assert_eq!(report["failure"]["property"], "no-loss", "{report}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(xml.matches("<failure").count(), 1, "{xml}");
}

/// A facts fixture given as the source runs its own schedule and then `--walks` walks (one
/// lost answer, one kill and one copy each); a `cleanup` command that fails is a warning in
/// the report, never silence and never a verdict.
#[test]
fn a_facts_fixture_runs_its_walks_too_and_a_failing_cleanup_is_a_warning() {
    let dir = temp_dir("conform-facts-cleanup");
    // It still deletes the stream (tests clean up after themselves), then fails.
    let target = target_file(dir.path(), "failing-cleanup.toml", |text| {
        text.replace(
            ">/dev/null\"]",
            ">/dev/null; echo no such stream >&2; exit 4\"]",
        )
    });
    let output = conform("fixtures/facts-retries.json", &target, &["--walks", "2"]);
    assert_status(&output, 0, "conform facts fixture");
    let report = json(&output);
    assert_eq!(
        (report["schedules"].as_u64(), report["verdict"].as_str()),
        (Some(3), Some("sampled"))
    );
    let warnings = report["warnings"].to_string();
    assert!(
        warnings.contains("cleanup") && warnings.contains("no such stream"),
        "{warnings}"
    );
}

/// The mutant schedule a model file gives, alone in a plan file (`--plan-out`, then the
/// fixture's own schedule taken out): it catches the wrong pipeline by the property the
/// model names, and the contract's pipeline passes it.
#[test]
fn a_mutant_schedule_from_a_plan_file_catches_serve_wrong_by_the_models_property() {
    let dir = temp_dir("conform-facts-plan");
    let file = dir.path().join("plan.json");
    let plan = file.to_str().unwrap();
    let model = "models/acmeflow-mutant-sent-at-in-content.toml";
    let written = arrival(&["conform", model, "--walks", "0", "--plan-out", plan]);
    assert_status(&written, 0, "write the plan");
    let mut value: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let schedules = value["schedules"].as_array_mut().unwrap();
    schedules.retain(|schedule| schedule["origin"] != "fixture");
    assert_eq!(schedules.len(), 1, "{value}");
    std::fs::write(&file, value.to_string()).unwrap();
    let output = arrival(&[
        "conform",
        model,
        "--plan",
        plan,
        "--target",
        SENT_AT,
        "--json",
        "--confirm",
        "1",
    ]);
    assert_status(&output, 0, "the mutant schedule on serve-wrong");
    let report = json(&output);
    assert_eq!(report["failure"]["property"], "retry-invisible");
    assert_eq!(
        report["failure"]["found_by"],
        "mutants/sent-at-in-content.retry-invisible"
    );
    assert_eq!(steps(&report), ["post #1 (answer lost)", "post #11"]);
    let output = arrival(&[
        "conform", model, "--plan", plan, "--target", SERVE, "--json",
    ]);
    assert_status(&output, 0, "the mutant schedule on serve");
    let report = json(&output);
    assert_eq!(
        (report["verdict"].as_str(), report["schedules"].as_u64()),
        (Some("sampled"), Some(1))
    );
}
