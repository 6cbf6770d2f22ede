//! The facts pipeline model end to end: the acceptance run passes under every order with
//! lost answers, both kinds of crash and a takeover (and with an upgrade at any point);
//! every facts mutant is caught by its named property with a shortest trace that replays;
//! every property has a model that catches it.

use crate::util::temp_dir;
use arrival::facts::check::run;
use arrival::facts::fixture::Scenario;
use arrival::facts::model_file::{load_model, LoadedModel};
use arrival::facts::mutants::Mutant;
use arrival::facts::property::Property;
use arrival::facts::replay::replay;
use arrival::harness::report::{render, ModelReport};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn load(path: &str) -> LoadedModel {
    load_model(Path::new(path), None).unwrap_or_else(|error| panic!("{error}"))
}

fn check(loaded: &LoadedModel, out: Option<&Path>) -> ModelReport {
    run(loaded, out, false, Default::default()).unwrap_or_else(|error| panic!("{error}"))
}

fn coverage(report: &ModelReport, name: &str) -> u64 {
    report.coverage.get(name).copied().unwrap_or_default()
}

#[test]
fn the_acceptance_run_passes_with_a_lost_answer_both_crashes_and_a_takeover() {
    let loaded = load("models/acmeflow-wf14.toml");
    let file = &loaded.file;
    assert!(file.lost_responses >= 1 && file.takeovers >= 1 && file.consumers >= 2);
    assert!(file.crashes_before_commit >= 1 && file.crashes_after_commit >= 1);
    let report = check(&loaded, None);
    assert_eq!(report.verdict, "pass", "{}", render(&report));
    for name in Property::NAMES {
        let status = report.properties.iter().find(|p| p.name == name);
        assert_eq!(status.map(|p| p.status.as_str()), Some("holds"), "{name}");
    }
    // The faults were really taken: takeovers, resends (duplicates) and rejections.
    for name in ["claimed", "duplicate", "accepted", "http-202", "http-400"] {
        assert!(coverage(&report, name) > 0, "{name} unreached");
    }
    // Pinned, not compared between runs: the distinct states `arrival check --json
    // models/acmeflow-wf14.toml` reports under the model's own settings (2026-12-01; the
    // same depth- or breadth-first, on one thread or two). A reduction or a model change
    // that changes the count fails here, and the number is changed on purpose.
    assert_eq!(
        report.unique_states, 175_602,
        "acmeflow-wf14: distinct states changed"
    );
}

#[test]
fn the_acceptance_run_with_an_upgrade_at_any_point_passes() {
    let report = check(&load("models/acmeflow-wf14-upgrade.toml"), None);
    assert_eq!(report.verdict, "pass", "{}", render(&report));
    assert!(coverage(&report, "upgraded") > 0);
    assert!(
        coverage(&report, "late_mismatch") > 0,
        "an entry outlived its version"
    );
}

#[test]
fn two_tenants_that_reuse_event_ids_stay_apart() {
    let report = check(&load("models/acmeflow-two-tenants.toml"), None);
    assert_eq!(report.verdict, "pass", "{}", render(&report));
    let status = report
        .properties
        .iter()
        .find(|p| p.name == "tenant-isolated");
    assert_eq!(status.map(|p| p.status.as_str()), Some("holds"));
    assert_eq!(
        coverage(&report, "conflict"),
        0,
        "no conflict across tenants"
    );
    for name in ["claimed", "duplicate", "accepted"] {
        assert!(coverage(&report, name) > 0, "{name} unreached");
    }
}

#[test]
fn a_poison_entry_is_dead_lettered_and_the_rest_keeps_flowing() {
    let report = check(&load("models/acmeflow-poison.toml"), None);
    assert_eq!(report.verdict, "pass", "{}", render(&report));
    assert!(coverage(&report, "retry") > 0 && coverage(&report, "dead_letter") > 0);
}

#[test]
fn every_facts_mutant_is_caught_by_its_named_property_with_a_trace_that_replays() {
    let scratch = temp_dir("facts-traces");
    let out = scratch.path().to_path_buf();
    let mut caught = BTreeSet::new();
    for mutant in Mutant::ALL {
        let Some(property) = mutant.caught_by() else {
            continue; // accept-stale-signature: tests/facts_ingress.rs
        };
        let path = format!("models/acmeflow-mutant-{}.toml", mutant.name());
        let loaded = load(&path);
        assert_eq!(loaded.policy, mutant.name(), "{path}");
        assert_eq!(
            loaded.expected,
            Some(property),
            "{path} against the catalogue"
        );
        let report = check(&loaded, Some(&out));
        assert!(report.as_expected, "{}", render(&report));
        caught.insert(property);
        let trace = report
            .properties
            .iter()
            .find(|p| p.name == property.name())
            .and_then(|p| p.trace.as_ref())
            .expect("a violated property has a trace");
        let written = trace.fixture.as_ref().expect("written with trace_out");
        let svg = std::fs::read_to_string(written.replace(".json", ".svg")).expect(".svg");
        assert!(svg.contains("consumer c1") && svg.contains(&format!("VIOLATED {property}")));
        assert!(std::fs::read_to_string(written.replace(".json", ".mmd"))
            .expect(".mmd")
            .contains("participant L0 as source"));
        let mut scenario = Scenario::load(Path::new(written)).expect("the trace loads");
        let origin = scenario
            .trace
            .as_ref()
            .expect("a written trace has its trace block");
        assert_eq!(
            (origin.policy.as_str(), origin.violates.as_str()),
            (mutant.name(), property.name()),
            "{written}"
        );
        assert_eq!(
            scenario.schedule.as_ref().map(Vec::len),
            Some(trace.steps.len())
        );
        let under_spec = replay(&scenario);
        assert!(
            under_spec.violations.is_empty(),
            "{written}: {under_spec:?}"
        );
        scenario.setup.mutant = Some(mutant);
        let under_mutant = replay(&scenario);
        assert_eq!(
            under_mutant.violations.first().map(|v| v.property.as_str()),
            Some(property.name()),
            "{written}"
        );
        // The model under the contract's policy passes the same scenario.
        let spec = load_model(Path::new(&path), Some("spec")).expect("loads");
        assert_eq!(check(&spec, None).verdict, "pass", "{path} under spec");
    }
    let all: BTreeSet<Property> = Property::ALL.into_iter().collect();
    assert_eq!(caught, all, "every facts property is some mutant's");
}

#[test]
fn the_kept_facts_traces_still_replay() {
    let mut count = 0;
    for entry in std::fs::read_dir("fixtures/regressions").expect("folder exists") {
        let path: PathBuf = entry.expect("readable").path();
        if !arrival::facts::fixture::is_facts_file(&path) {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("acmeflow-mutant-") {
            continue; // probe regressions: tests/facts_replay.rs
        }
        count += 1;
        let (mutant, property) = name
            .trim_start_matches("acmeflow-mutant-")
            .trim_end_matches(".json")
            .split_once('.')
            .expect("mutant.property.json");
        let mut scenario = Scenario::load(&path).expect("loads");
        let origin = scenario
            .trace
            .clone()
            .expect("a kept trace has its trace block");
        assert_eq!(origin.policy, mutant, "{name}");
        assert_eq!(origin.violates, property, "{name}");
        assert_eq!(
            origin.model,
            format!("models/acmeflow-mutant-{mutant}.toml"),
            "{name}"
        );
        assert!(replay(&scenario).violations.is_empty(), "{name} under spec");
        scenario.setup.mutant = Some(mutant.parse().expect("a facts mutant"));
        let report = replay(&scenario);
        assert_eq!(
            report.violations.first().map(|v| v.property.as_str()),
            Some(property),
            "{name}"
        );
    }
    assert!(count >= 7, "{count} facts traces");
}

/// Contract v2's models under the contract's policy: each passes, reaches the decisions it
/// is about, and has the distinct-state count pinned (2026-12-01, the model files' own
/// settings).
#[test]
fn the_contract_v2_models_pass_and_reach_what_they_are_about() {
    let rows: [(&str, usize, &[&str]); 7] = [
        (
            "models/acmeflow-quarantine.toml",
            7_262,
            &["quarantined", "released", "registered", "accepted"],
        ),
        (
            "models/acmeflow-withdrawals.toml",
            18_421,
            &["accepted", "duplicate", "claimed"],
        ),
        (
            "models/acmeflow-lifecycle.toml",
            1_906,
            &["after_termination", "terminated"],
        ),
        (
            "models/acmeflow-conflict.toml",
            51_612,
            &["conflict", "resolved", "duplicate"],
        ),
        (
            "models/acmeflow-undecidable.toml",
            644,
            &["retry", "dead_letter", "claimed"],
        ),
        (
            "models/acmeflow-tenant-keys.toml",
            1_363,
            &["http-400", "accepted"],
        ),
        (
            "models/acmeflow-quarantine-expiry.toml",
            614,
            &["quarantined", "expired", "registered", "claimed"],
        ),
    ];
    for (path, unique, reached) in rows {
        let report = check(&load(path), None);
        assert_eq!(report.verdict, "pass", "{path}: {}", render(&report));
        for name in reached {
            assert!(coverage(&report, name) > 0, "{path}: {name} unreached");
        }
        assert_eq!(
            report.unique_states, unique,
            "{path}: distinct states changed"
        );
    }
}
