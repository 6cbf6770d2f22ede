//! A decision function that panics is a finding, not a crash: the probe policy
//! `panic-on-changed-payload` (outside the catalogue) panics where the contract records a
//! conflict. `check`, the sweep and `--simulate` report a violation named `panic` with the
//! message once and a shortest trace, go on to the next model, and exit 1 (never 101); the
//! trace replays as a fixture whose `trace.violates` is `panic`.

use crate::util::{arrival, assert_status, root, stderr, stdout, temp_dir};
use std::path::Path;

/// The message the probe panics with, as the report shows it.
const MESSAGE: &str = "panic                    violated: internal error: entered unreachable code: an event id never comes back with a changed payload (at src/card/mutants.rs:";

/// A model file checking B62-15 (one duplicate, one lost ack, one crash) under the probe.
fn panicking_model(dir: &Path) -> String {
    let fixture = root().join("fixtures/B62-15-events.json");
    let text = format!(
        "fixture = {:?}\nduplicates = 1\nlost_acks = 1\ncrashes = 1\npolicy = \"panic-on-changed-payload\"\nstrategy = \"bfs\"\nexpect = \"pass\"\n",
        fixture.display().to_string()
    );
    let path = dir.join("panicking.toml");
    std::fs::write(&path, text).expect("model file written");
    path.display().to_string()
}

#[test]
fn a_panicking_decision_function_is_a_violation_with_a_shortest_trace_and_the_next_model_still_runs(
) {
    let dir = temp_dir("panics");
    let model = panicking_model(dir.path());
    let out = dir.path().join("traces");
    let out = out.display().to_string();
    let output = arrival(&["check", &model, "models/b62-15.toml", "--trace-out", &out]);
    assert_status(&output, 1, "a panicking model beside a passing one");
    let text = stdout(&output);
    assert_eq!(text.matches(MESSAGE).count(), 1, "{text}");
    assert!(text.contains("counterexample for panic (2 steps):\n    1. deliver #4 e-202\n    2. deliver #6 e-202 (variant)\n"), "{text}");
    assert!(
        text.contains("  109258 states, 35371 unique, max depth 13,"),
        "{text}"
    );
    assert!(text.contains("verdict: fail (expected pass)"), "{text}");
    // The next model ran to its own verdict, and its panic row holds.
    let after = text
        .split("model models/b62-15.toml")
        .nth(1)
        .expect("second model");
    assert!(
        after.contains("  panic                    holds\n"),
        "{after}"
    );
    assert!(after.contains("verdict: pass"), "{after}");
    assert!(
        !stderr(&output).contains("unreachable"),
        "{}",
        stderr(&output)
    );

    let trace = format!("{out}/panicking.panic.json");
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).expect("trace written")).unwrap();
    assert_eq!(fixture["trace"]["violates"], "panic");
    let replayed = arrival(&["replay", &trace]);
    assert_status(&replayed, 1, "the trace replayed under the probe");
    assert!(stdout(&replayed).contains("VIOLATED panic at step 2: internal error"));
    let under_spec = arrival(&["replay", &trace, "--policy", "spec"]);
    assert_status(&under_spec, 0, "the trace replayed under spec");
}

#[test]
fn the_sweep_and_simulation_report_a_panicking_policy_as_caught_by_panic() {
    let swept = arrival(&[
        "check",
        "--sweep",
        "20",
        "--policy",
        "panic-on-changed-payload",
    ]);
    assert_status(&swept, 0, "the sweep expects the probe caught by panic");
    let text = stdout(&swept);
    assert!(
        text.contains("panic-on-changed-payload       caught by panic; "),
        "{text}"
    );
    assert!(
        text.contains(
            "broke panic on 15\n    first: fixture seed 66428519 breaks panic in 2 steps"
        ),
        "{text}"
    );

    let dir = temp_dir("panics-simulate");
    let model = panicking_model(dir.path());
    let walked = arrival(&["check", &model, "--simulate", "50"]);
    assert_status(&walked, 1, "simulation of the probe");
    let text = stdout(&walked);
    assert_eq!(text.matches(MESSAGE).count(), 1, "{text}");
    assert!(text.contains("panic violated by walk 0 (part 0) after 8 steps; again with --simulate 1 --seed 1; trace of 2 steps, a shortest one"), "{text}");
}
