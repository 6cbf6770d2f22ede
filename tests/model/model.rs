//! The model checker end to end: the B62-15 model passes exhaustively, every decision kind
//! is reached, every mutant is caught by its named property with a trace that replays, and
//! the counterexamples kept in `fixtures/regressions/` still replay.

use crate::util::temp_dir;
use arrival::card::check::{self, CheckOptions, ModelReport};
use arrival::card::fixture::Scenario;
use arrival::card::model_file::{Expectation, LoadedModel};
use arrival::card::policy::{Mutant, PolicyName, Spec};
use arrival::card::property::{Properties, Property};
use arrival::card::replay::{first_violation, replay};
use std::path::{Path, PathBuf};

fn load(path: &str) -> LoadedModel {
    check::load_model(Path::new(path), None).unwrap_or_else(|error| panic!("{error}"))
}

fn run(loaded: &LoadedModel, trace_out: Option<PathBuf>) -> ModelReport {
    let options = CheckOptions {
        trace_out,
        progress: false,
        ..CheckOptions::default()
    };
    check::run(loaded, &options).unwrap_or_else(|error| panic!("{error}"))
}

/// Distinct states the main card models reach under their own settings (the strategy and
/// threads of the model file), as `arrival check --json` reports them (`unique_states`;
/// 2026-12-02, with redeliveries taken alone in depth-first search: B62-15 and
/// every-decision are checked depth first and counted 21,695 and 75,374 before). One thread
/// or two give the same count (only the number of generated states differs), and so do
/// depth- and breadth-first search with `eager_redeliveries = false`.
/// These are pins, not comparisons of two runs: a reduction (or a change to the model)
/// that changes what the checker visits fails them, and the number is changed on purpose.
const B62_15_STATES: usize = 4_031;
const EVERY_DECISION_STATES: usize = 20_062;
const RE_PAUSE_STATES: usize = 30;

#[track_caller]
fn assert_pinned(report: &ModelReport, pinned: usize) {
    assert_eq!(
        report.unique_states, pinned,
        "{}: distinct states changed; if a reduction or the model changed on purpose, pin \
         the new count (`arrival check --json {}`)",
        report.model, report.model
    );
}

fn status<'a>(report: &'a ModelReport, name: &str) -> &'a str {
    let property = report
        .properties
        .iter()
        .find(|property| property.name == name);
    property
        .unwrap_or_else(|| panic!("no property {name}"))
        .status
        .as_str()
}

#[test]
fn b62_15_with_one_duplicate_lost_ack_and_crash_passes_exhaustively() {
    let loaded = load("models/b62-15.toml");
    assert_eq!(
        (
            loaded.file.duplicates,
            loaded.file.lost_acks,
            loaded.file.crashes
        ),
        (1, 1, 1)
    );
    assert_eq!(
        loaded.file.reconciliation,
        arrival::card::step::Reconciliation::Interleaved
    );
    let report = run(&loaded, None);
    assert_eq!(report.verdict, "pass", "{}", check::render(&report));
    assert!(report.as_expected);
    for property in Properties::SPEC.iter() {
        assert_eq!(status(&report, property.name()), "holds", "{property}");
    }
    assert_eq!(
        status(&report, Property::RedeliveryRecognised.name()),
        "not checked"
    );
    // Every decision kind the fixture can produce is reached, and the fault budgets are
    // really exercised (duplicates are decided, not skipped).
    for kind in [
        "applied",
        "stale",
        "equal",
        "duplicate",
        "conflict_changed_payload",
        "conflict_same_version",
        "held_unknown_object",
        "held_paused",
        "held_missing_version",
        "replaced",
        "confirmed",
    ] {
        assert!(report.coverage[kind] > 0, "{kind} unreached");
    }
    assert_pinned(&report, B62_15_STATES);
}

#[test]
fn the_state_count_pins_see_a_reduction_switched_off() {
    // The same model without merging settled decisions: another count, which the pin of
    // B62-15 would refuse.
    let mut loaded = load("models/b62-15.toml");
    loaded.file.merge_settled = false;
    let report = run(&loaded, None);
    assert_eq!(report.verdict, "pass", "{}", check::render(&report));
    assert!(
        report.unique_states > B62_15_STATES,
        "{} without merge_settled",
        report.unique_states
    );
}

#[test]
fn b62_15_with_reconciliation_only_at_the_end_passes() {
    let report = run(&load("models/b62-15-end.toml"), None);
    assert_eq!(report.verdict, "pass", "{}", check::render(&report));
    assert!(report.as_expected);
}

#[test]
fn every_decision_kind_and_outcome_is_reached() {
    let report = run(&load("models/every-decision.toml"), None);
    assert_eq!(report.verdict, "pass", "{}", check::render(&report));
    assert_pinned(&report, EVERY_DECISION_STATES);
    for (kind, count) in &report.coverage {
        // A card can only be ahead of its authority when authority-current is broken, and
        // then nothing is explored: refused_behind is shown by replay instead (below).
        if kind == "refused_behind" {
            assert_eq!(*count, 0, "refused_behind reached with a current authority");
        } else {
            assert!(*count > 0, "{kind} unreached");
        }
    }
    let behind = Scenario::load(Path::new("fixtures/authority-behind.json")).expect("loads");
    let replayed = replay(&behind, Spec, "spec");
    assert!(
        replayed.steps.iter().any(|step| matches!(
            step,
            arrival::card::replay::StepReport::Reconcile { outcome, .. } if outcome == "refused_behind"
        )),
        "the authority-behind fixture reaches refused_behind"
    );
    let sometimes: Vec<_> = report
        .properties
        .iter()
        .filter(|property| property.kind == "sometimes")
        .collect();
    assert_eq!(sometimes.len(), report.coverage.len());
    for property in sometimes {
        let expected = if property.name == "reached-refused_behind" {
            "unreached"
        } else {
            "reached"
        };
        assert_eq!(property.status, expected, "{}", property.name);
    }
}

#[test]
fn every_mutant_is_caught_by_its_named_property_with_a_trace_that_replays() {
    let scratch = temp_dir("traces");
    let out = scratch.path().to_path_buf();
    for mutant in Mutant::ALL {
        let path = format!("models/mutant-{}.toml", mutant.name());
        let loaded = load(&path);
        assert_eq!(loaded.policy, PolicyName(Some(mutant)), "{path}");
        let Expectation::Violates(property) = loaded.expectation else {
            panic!("{path} must expect a violation");
        };
        assert_eq!(property, mutant.caught_by(), "{path} against the catalogue");
        let report = run(&loaded, Some(out.clone()));
        assert!(report.as_expected, "{}", check::render(&report));
        assert_eq!(status(&report, property.name()), "violated", "{path}");
        let trace = report
            .properties
            .iter()
            .find(|entry| entry.name == property.name())
            .and_then(|entry| entry.trace.as_ref())
            .expect("a violated property has a trace");
        assert!(!trace.steps.is_empty());
        // The written fixture replays: the mutant breaks the property, SPEC does not.
        let written = trace.fixture.as_ref().expect("written with trace_out");
        // The sequence diagram beside it: Mermaid text and an SVG, the violation marked.
        let mermaid = std::fs::read_to_string(written.replace(".json", ".mmd")).expect(".mmd");
        assert!(mermaid.starts_with("sequenceDiagram") && mermaid.contains("VIOLATED"));
        assert_eq!(mermaid, trace.mermaid);
        let svg = std::fs::read_to_string(written.replace(".json", ".svg")).expect(".svg");
        assert!(svg.starts_with("<svg") && svg.contains(&format!("VIOLATED {property}")));
        // The committed regression of the same trace carries the same diagrams.
        let name = Path::new(written).file_name().expect("a file name");
        let kept = Path::new("fixtures/regressions").join(name);
        if std::fs::read_to_string(&kept).ok() == std::fs::read_to_string(written).ok() {
            for extension in ["mmd", "svg"] {
                let committed = std::fs::read_to_string(kept.with_extension(extension));
                let fresh = std::fs::read_to_string(Path::new(written).with_extension(extension));
                assert_eq!(
                    committed.ok(),
                    fresh.ok(),
                    "{}: regenerate with `arrival check {path} --trace-out fixtures/regressions`",
                    kept.with_extension(extension).display()
                );
            }
        }
        let scenario = Scenario::load(Path::new(written)).expect("trace fixture loads");
        assert_eq!(
            scenario.schedule.as_ref().map(Vec::len),
            Some(trace.steps.len())
        );
        let under_mutant = replay(&scenario, Some(mutant), mutant.name());
        assert_eq!(first_violation(&under_mutant), Some(property), "{written}");
        assert!(!under_mutant.passed());
        let under_spec = replay(&scenario, Spec, "spec");
        assert!(
            under_spec.passed(),
            "{written}: {:?}",
            under_spec.violations
        );
    }
}

#[test]
fn a_diagram_shows_what_step_one_changed() {
    // Step 1 is diffed against the fixture's initial cards: the unknown card the mutant
    // creates appears at the violating step, and the cards it did not touch do not.
    let loaded = load("models/mutant-create-unknown-card.toml");
    let report = run(&loaded, None);
    let trace = report
        .properties
        .iter()
        .find(|entry| entry.name == Property::NoUnknownCard.name())
        .and_then(|entry| entry.trace.as_ref())
        .expect("a trace");
    assert_eq!(trace.steps.len(), 1, "{:?}", trace.steps);
    let notes: Vec<&str> = trace
        .mermaid
        .lines()
        .filter(|line| line.contains("Note") && !line.contains("VIOLATED"))
        .collect();
    assert_eq!(notes.len(), 1, "{}", trace.mermaid);
    assert!(notes[0].contains("card-99"), "{}", trace.mermaid);
    assert!(!notes[0].contains("card-7"), "{}", trace.mermaid);
}

#[test]
fn the_spec_policy_passes_every_mutant_model() {
    // The same scenarios with the real receiver: nothing is violated, so each mutant's
    // failure is the mutant's, not the scenario's.
    for mutant in Mutant::ALL {
        let path = format!("models/mutant-{}.toml", mutant.name());
        let loaded = check::load_model(Path::new(&path), Some(PolicyName(None))).expect("loads");
        let report = run(&loaded, None);
        assert_eq!(report.verdict, "pass", "{}", check::render(&report));
        assert!(!report.as_expected, "the file expects a violation");
    }
}

fn trace_of(report: &ModelReport, property: Property) -> Vec<String> {
    report
        .properties
        .iter()
        .find(|entry| entry.name == property.name())
        .and_then(|entry| entry.trace.as_ref())
        .map(|trace| trace.steps.clone())
        .unwrap_or_default()
}

#[test]
fn the_retention_window_costs_duplicate_recognition_but_not_card_safety() {
    // What still holds: with the window passing once at any point of any order (and one
    // duplicate, lost ack and crash), every SPEC property holds on B62-15, convergence too.
    let loaded = load("models/b62-15-retention.toml");
    assert_eq!(loaded.file.expiries, 1);
    let report = run(&loaded, None);
    assert_eq!(report.verdict, "pass", "{}", check::render(&report));
    for property in Properties::SPEC.iter() {
        assert_eq!(status(&report, property.name()), "holds", "{property}");
    }
    // The same fixture without expiry has fewer states: the expiry steps are explored.
    let mut without = loaded.clone();
    without.file.expiries = 0;
    assert!(run(&without, None).unique_states < report.unique_states);

    // What is lost: a delivery the receiver saw comes back after the window and is
    // decided afresh. Without expiry the same property holds.
    let loaded = load("models/b62-15-retention-loss.toml");
    assert_eq!(
        loaded.checked,
        Properties::only(Property::RedeliveryRecognised)
    );
    lost_only_with_expiry(
        &loaded,
        Property::RedeliveryRecognised,
        &[
            "deliver #1 e-201",
            "retention window passes (settled event ids are forgotten)",
            "duplicate of #1 (e-201) by the network",
        ],
    );
    // And convergence in general: an id reused for another card is a conflict inside the
    // window, and a new event (applied) after it.
    lost_only_with_expiry(
        &load("models/retention-reused-id.toml"),
        Property::Convergence,
        &[
            "deliver #1 e-500",
            "retention window passes (settled event ids are forgotten)",
            "deliver #2 e-500 (variant)",
        ],
    );
}

/// The model violates `property` along `steps` (a shortest trace), and passes once the
/// retention window may no longer pass.
fn lost_only_with_expiry(loaded: &LoadedModel, property: Property, steps: &[&str]) {
    let report = run(loaded, None);
    assert!(report.as_expected, "{}", check::render(&report));
    assert_eq!(trace_of(&report, property), steps);
    let mut without = loaded.clone();
    without.file.expiries = 0;
    let report = run(&without, None);
    assert_eq!(report.verdict, "pass", "{}", check::render(&report));
}

#[test]
fn an_expiry_step_replays_with_what_it_forgot() {
    let path = "fixtures/regressions/b62-15-retention-loss.redelivery-recognised.json";
    let scenario = Scenario::load(Path::new(path)).expect("loads");
    let report = replay(&scenario, Spec, "spec");
    let json = serde_json::to_value(&report).expect("serialises");
    assert_eq!(json["steps"][1]["kind"], "expire");
    assert_eq!(json["steps"][1]["forgotten"], serde_json::json!(["e-201"]));
    assert_eq!(json["steps"][2]["decision"], "equal", "decided afresh");
    assert!(report
        .audit
        .iter()
        .any(|entry| entry.entry == "forgotten" && entry.subject == "e-201" && entry.step == 2));
    assert_eq!(
        first_violation(&report),
        Some(Property::RedeliveryRecognised)
    );
    // The checked properties come from the trace: without its origin, SPEC's nine pass.
    let mut raw = scenario.raw.clone();
    raw.trace = None;
    let plain = Scenario::from_raw(Path::new(path), raw).expect("valid");
    assert!(replay(&plain, Spec, "spec").passed());
}

#[test]
fn per_delivery_budgets_aim_the_faults() {
    let mut loaded = load("models/b62-15-per-delivery.toml");
    // Redeliveries taken alone make lost acknowledgements cheap wherever they are aimed
    // (23,089 against 15,217 generated states with them); the comparison is of the fault
    // space itself.
    loaded.file.eager_redeliveries = false;
    let report = run(&loaded, None);
    assert_eq!(report.verdict, "pass", "{}", check::render(&report));
    // Aimed at two deliveries, the same totals explore far less than when any delivery
    // may take them.
    let mut anywhere = loaded.clone();
    anywhere.per_delivery = None;
    anywhere.file.state_limit = Some(report.states * 4);
    let wider = run(&anywhere, None);
    assert!(
        wider.states > 2 * report.states,
        "{} vs {}",
        wider.states,
        report.states
    );

    // ack-before-record is caught by a crash on any delivery; aimed at #3 it is caught
    // there, and with an empty table (no delivery may fault) it is not caught at all.
    let mut loaded = load("models/mutant-ack-before-record.toml");
    let crash = arrival::card::step::Budgets {
        duplicates: 0,
        lost_acks: 0,
        crashes: 1,
        expiries: 0,
        reencodings: 0,
    };
    loaded.per_delivery = Some([(3, crash)].into_iter().collect());
    let report = run(&loaded, None);
    assert!(report.as_expected, "{}", check::render(&report));
    let steps = trace_of(&report, Property::AckImpliesRecorded);
    assert_eq!(steps, ["deliver #3 e-200, crash before record"]);
    loaded.per_delivery = Some(Default::default());
    let report = run(&loaded, None);
    assert_eq!(report.verdict, "pass", "{}", check::render(&report));
}

#[test]
fn regression_fixtures_replay() {
    let mut count = 0;
    for entry in std::fs::read_dir("fixtures/regressions").expect("folder exists") {
        let path = entry.expect("readable").path();
        if path.extension().and_then(|ext| ext.to_str()) != Some("json") {
            continue;
        }
        if arrival::facts::fixture::is_facts_file(&path) {
            continue; // tests/facts_model.rs replays the facts traces
        }
        count += 1;
        let scenario = Scenario::load(&path).unwrap_or_else(|error| panic!("{error}"));
        let shown = scenario
            .trace
            .expect("a regression fixture names its origin");
        let (policy, property) = (shown.policy, shown.violates);
        let under_policy = replay(&scenario, policy.0, &policy.to_string());
        assert_eq!(
            first_violation(&under_policy),
            Some(property),
            "{}: {:?}",
            path.display(),
            under_policy.violations
        );
        let under_spec = replay(&scenario, Spec, "spec");
        if policy.0.is_none() {
            // A trace of the SPEC receiver itself shows what SPEC gives up after the
            // retention window: that property alone is violated. A convergence trace
            // keeps the fixture's own `expect`, which it misses; any other ends as
            // recorded.
            assert_eq!(under_spec.violations.len(), 1, "{}", path.display());
            let expect_holds = under_spec.expect.as_ref().is_some_and(|check| check.holds);
            assert_eq!(
                expect_holds,
                property != Property::Convergence,
                "{}: {:?}",
                path.display(),
                under_spec.expect
            );
        } else {
            assert!(
                under_spec.passed(),
                "{}: {:?}",
                path.display(),
                under_spec.expect
            );
        }
    }
    assert!(
        count >= Mutant::ALL.len(),
        "one regression per mutant at least"
    );
}

/// A generated fixture as a model, whole or split into independent parts, with the default
/// reductions (the symmetry of identical redeliveries, settled decisions merged); tests
/// turn them off on the returned model.
fn generated_model(seed: u64, policy: PolicyName, split: bool) -> LoadedModel {
    use arrival::card::check::Strategy;
    use arrival::card::generate::GenOptions;
    use arrival::card::model_file::ModelFile;
    use arrival::card::step::Reconciliation;
    let options = GenOptions {
        cards: 3,
        deliveries: 7,
        dup_rate: 0.15,
        conflict_rate: 0.15,
        seed,
        out: None,
    };
    let raw = arrival::card::generate::fixture(&options).expect("generates");
    let scenario = Scenario::from_raw(Path::new("(generated)"), raw).expect("valid");
    LoadedModel {
        path: PathBuf::from(format!("generated-{seed}")),
        file: ModelFile {
            description: None,
            fixture: "(generated)".into(),
            duplicates: 1,
            lost_acks: 1,
            crashes: 1,
            expiries: 0,
            // Re-encoded copies too: the reductions compared below must stay sound with
            // them.
            reencodings: 1,
            reconciliation: Reconciliation::Interleaved,
            policy: policy.to_string(),
            strategy: Strategy::Dfs,
            threads: 1,
            state_limit: None,
            split,
            symmetry: true,
            merge_settled: true,
            merge_paused: true,
            sleep_sets: true,
            eager_redeliveries: true,
            per_delivery: None,
            properties: None,
            expect: "pass".into(),
        },
        scenario: std::sync::Arc::new(scenario),
        policy,
        expectation: Expectation::Pass,
        checked: Properties::SPEC,
        per_delivery: None,
    }
}

#[test]
fn split_checks_give_the_verdicts_of_whole_checks() {
    let policies =
        std::iter::once(PolicyName(None)).chain(Mutant::ALL.map(|mutant| PolicyName(Some(mutant))));
    let mut reduced = 0;
    for policy in policies {
        for seed in 1..=3 {
            let whole = run(&generated_model(seed, policy, false), None);
            let split = run(&generated_model(seed, policy, true), None);
            assert_eq!(
                (whole.verdict.as_str(), &whole.violated),
                (split.verdict.as_str(), &split.violated),
                "seed {seed}, policy {policy}"
            );
            assert!(
                split.unique_states <= whole.unique_states,
                "seed {seed}, policy {policy}"
            );
            if policy == PolicyName(None) {
                // The generator's `expect`, computed by replay, holds in every order.
                assert_eq!(whole.verdict, "pass", "{}", check::render(&whole));
            }
            if split.parts > 1 {
                reduced += 1;
            }
        }
    }
    assert!(reduced > 0, "some generated fixture splits");
}

#[test]
fn sending_identical_redeliveries_in_order_keeps_every_verdict() {
    // The symmetry reduction (`card::model::Twins`) against the full model: the same verdict
    // and the same violated properties under SPEC and every mutant, on generated fixtures
    // with identical redeliveries and on every card model file.
    let policies =
        std::iter::once(PolicyName(None)).chain(Mutant::ALL.map(|mutant| PolicyName(Some(mutant))));
    let mut fewer = 0;
    for policy in policies {
        for seed in 1..=8 {
            let mut loaded = generated_model(seed, policy, false);
            let reduced = run(&loaded, None);
            loaded.file.symmetry = false;
            let full = run(&loaded, None);
            assert_eq!(
                (full.verdict.as_str(), &full.violated),
                (reduced.verdict.as_str(), &reduced.violated),
                "seed {seed}, policy {policy}"
            );
            if full.violated.is_empty() {
                assert!(reduced.unique_states <= full.unique_states, "seed {seed}");
                fewer += usize::from(reduced.unique_states < full.unique_states);
            }
        }
    }
    assert!(
        fewer > 0,
        "some generated fixture has identical redeliveries"
    );
    for path in model_files() {
        let mut loaded = check::load_model(&path, None).expect("loads");
        let reduced = run(&loaded, None);
        loaded.file.symmetry = false;
        let full = run(&loaded, None);
        assert_eq!(
            (full.verdict.as_str(), &full.violated),
            (reduced.verdict.as_str(), &reduced.violated),
            "{}",
            path.display()
        );
    }
}

#[test]
fn merging_settled_decisions_and_paused_paths_keeps_every_verdict_and_trace_length() {
    // The reductions of `Receiver::fingerprint` (worlds that differ only in which state
    // decision settled records got are one state; with `merge_paused`, also worlds that
    // differ only in how a covered card got to its pause) against the full model: the same
    // verdict, the same violated properties and the same shortest counterexample lengths
    // (BFS) under SPEC and every mutant, on generated fixtures and on every card model file.
    use arrival::card::check::Strategy;
    let policies =
        std::iter::once(PolicyName(None)).chain(Mutant::ALL.map(|mutant| PolicyName(Some(mutant))));
    let trace_lengths = |report: &ModelReport| -> Vec<(String, usize)> {
        report
            .properties
            .iter()
            .filter_map(|property| {
                let trace = property.trace.as_ref()?;
                Some((property.name.clone(), trace.steps.len()))
            })
            .collect()
    };
    // Distinct states with (merge_settled, merge_paused) off/off, on/off and on/on.
    let compare = |mut loaded: LoadedModel, what: &str| -> [usize; 3] {
        loaded.file.strategy = Strategy::Bfs;
        let mut counts = [0; 3];
        let mut reports = Vec::new();
        for (at, (settled, paused)) in [(false, false), (true, false), (true, true)]
            .into_iter()
            .enumerate()
        {
            loaded.file.merge_settled = settled;
            loaded.file.merge_paused = paused;
            let report = run(&loaded, None);
            counts[at] = report.unique_states;
            reports.push(report);
        }
        let full = &reports[0];
        for reduced in &reports[1..] {
            assert_eq!(
                (full.verdict.as_str(), &full.violated, trace_lengths(full)),
                (
                    reduced.verdict.as_str(),
                    &reduced.violated,
                    trace_lengths(reduced)
                ),
                "{what}"
            );
        }
        assert!(
            counts[2] <= counts[1] && counts[1] <= counts[0],
            "{what}: {counts:?}"
        );
        counts
    };
    let (mut fewer_settled, mut fewer_paused, mut violated) = (0, 0, 0);
    for policy in policies {
        for seed in 1..=8 {
            let loaded = generated_model(seed, policy, false);
            let counts = compare(loaded.clone(), &format!("seed {seed}, policy {policy}"));
            fewer_settled += usize::from(counts[1] < counts[0]);
            fewer_paused += usize::from(counts[2] < counts[1]);
            violated += usize::from(run(&loaded, None).verdict == "fail");
        }
    }
    assert!(
        fewer_settled > 0,
        "merging settled decisions removes states somewhere"
    );
    assert!(
        fewer_paused > 0,
        "merging paused paths removes states somewhere"
    );
    assert!(violated > 0, "some mutant is caught on a generated fixture");
    for path in model_files() {
        let loaded = check::load_model(&path, None).expect("loads");
        compare(loaded, &path.display().to_string());
    }
}

/// The card protocol's model files.
fn model_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir("models")
        .expect("models/")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .filter(|path| {
            arrival::harness::model_file::fixture_protocol(path).as_deref() == Some("card")
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_spec_property_is_the_expected_violation_of_some_model_and_is_caught() {
    // The twelve properties and the authority-current precondition each have a model file
    // that expects them violated, and the checker catches each: every property has teeth.
    let mut caught = std::collections::BTreeSet::new();
    for path in model_files() {
        let loaded = check::load_model(&path, None).expect("loads");
        let Expectation::Violates(property) = loaded.expectation else {
            continue;
        };
        let report = run(&loaded, None);
        assert!(report.as_expected, "{}", check::render(&report));
        assert!(report.violated.contains(&property.name().to_owned()));
        caught.insert(property);
    }
    let missing: Vec<&str> = Properties::SPEC
        .iter()
        .filter(|property| !caught.contains(property))
        .map(Property::name)
        .collect();
    assert!(missing.is_empty(), "no model catches {missing:?}");
    assert_eq!(Properties::SPEC.iter().count(), 13);
}

#[test]
fn replay_and_check_agree_on_every_fixture() {
    // The default order ends in a terminal state of the model, so one `expect` serves both:
    // replay's end holds `expect` exactly when every arrival order converges to it. A fixture
    // that breaks authority-current is flagged by both (replay warns, check reports it).
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir("fixtures")
        .expect("fixtures/")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .filter(|path| !arrival::facts::fixture::is_facts_file(path))
        .collect();
    fixtures.sort();
    assert!(fixtures.len() >= 5, "{fixtures:?}");
    let scratch = temp_dir("agree");
    let model = scratch.path();
    for fixture in fixtures {
        let scenario = Scenario::load(&fixture).expect("loads");
        let replayed = replay(&scenario, Spec, "spec");
        assert!(replayed.passed(), "{}: {replayed:?}", fixture.display());
        let file = model.join("agree.toml");
        let absolute = std::fs::canonicalize(&fixture).expect("a path");
        let text = format!(
            "fixture = {:?}\nreconciliation = \"interleaved\"\nexpect = \"pass\"\n",
            absolute.display().to_string()
        );
        std::fs::write(&file, text).expect("writes");
        let report = run(&load(file.to_str().expect("utf-8")), None);
        if replayed.warnings.is_empty() {
            assert_eq!(
                report.verdict,
                "pass",
                "{}: replay holds its expect, check does not\n{}",
                fixture.display(),
                check::render(&report)
            );
        } else {
            assert_eq!(
                report.violated,
                vec![Property::AuthorityCurrent.name().to_owned()],
                "{}",
                fixture.display()
            );
        }
    }
}

#[test]
fn the_default_order_reconciles_again_when_a_re_evaluated_hold_pauses_the_card() {
    let scenario = Scenario::load(Path::new("fixtures/re-pause.json")).expect("loads");
    let replayed = replay(&scenario, Spec, "spec");
    let reconciles: Vec<&str> = replayed
        .steps
        .iter()
        .filter_map(|step| match step {
            arrival::card::replay::StepReport::Reconcile { outcome, .. } => Some(outcome.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(reconciles, ["replaced", "confirmed"], "{replayed:?}");
    assert!(replayed.paused.is_empty());
    assert!(replayed.passed(), "{replayed:?}");
    let report = run(&load("models/re-pause.toml"), None);
    assert_eq!(report.verdict, "pass", "{}", check::render(&report));
    assert_pinned(&report, RE_PAUSE_STATES);
}

#[test]
fn a_sweep_finds_mutants_reports_the_seed_and_writes_a_fixture_that_replays() {
    let scratch = temp_dir("sweep");
    let out = scratch.path().to_path_buf();
    let options = arrival::card::sweep::SweepOptions {
        count: 40,
        seed: 3,
        policies: vec![
            PolicyName(None),
            PolicyName(Some(Mutant::IgnorePause)),
            PolicyName(Some(Mutant::ReevaluateConflictedFirst)),
        ],
        trace_out: Some(out.clone()),
        expiry: 4,
        until_caught: false,
    };
    let report = arrival::card::sweep::run(&options).expect("runs");
    assert!(
        report.as_expected,
        "{}",
        arrival::card::sweep::render(&report)
    );
    assert!(report.policies[0].violations.is_empty());
    // reevaluate-conflicted-first, harmless to the cards while every authority is current,
    // is caught by conflicted-never-decided all the same.
    assert!(report.policies[2]
        .violations
        .contains_key("conflicted-never-decided"));
    let found = report.policies[1]
        .first
        .as_ref()
        .expect("ignore-pause caught");
    assert_eq!(found.property, "paused-frozen");
    assert!(arrival::card::sweep::fixture_seeds(3, 40).contains(&found.fixture_seed));
    let written = found.fixture.as_ref().expect("written");
    let scenario = Scenario::load(Path::new(written)).expect("loads");
    let under_mutant = replay(&scenario, Some(Mutant::IgnorePause), "ignore-pause");
    assert_eq!(first_violation(&under_mutant), Some(Property::PausedFrozen));
    assert!(replay(&scenario, Spec, "spec").passed());
}

#[test]
fn an_authority_nothing_ever_reads_is_no_precondition_failure() {
    // Nothing can pause card-7 (one newer snapshot with its own id), so it is never
    // reconciled: whatever its authority says, every order ends at v11. The precondition
    // concerns only cards that some input can pause. With an input that pauses the card in
    // some orders only (v10 with another state: a conflict before e-1, stale after it), the
    // same newer authority is reported: the card ends at v11 or v12 by arrival order.
    let scratch = temp_dir("unread");
    let dir = scratch.path();
    let fixture = |extra: &str| {
        format!(
            r#"{{"initial": {{"card-7": {{"version": 10, "state": {{"stage": "a"}}}}}},
            "deliveries": [{{"delivery": 1, "event": {{"event_id": "e-1", "object_id": "card-7",
                "object_version": 11, "type": "card.snapshot", "state": {{"stage": "b"}}}}}}{extra}],
            "authority": [{{"object_id": "card-7", "version": 12, "state": {{"stage": "c"}}}}],
            "expect": {{"final": {{"card-7": {{"version": 11, "state": {{"stage": "b"}}}}}}, "unresolved": []}}}}"#
        )
    };
    std::fs::write(dir.join("unread.json"), fixture("")).unwrap();
    let pausing = r#", {"delivery": 2, "event": {"event_id": "e-2", "object_id": "card-7",
        "object_version": 10, "type": "card.snapshot", "state": {"stage": "x"}}}"#;
    std::fs::write(dir.join("read.json"), fixture(pausing)).unwrap();
    for (name, expected) in [("unread", "pass"), ("read", "authority-current")] {
        let model = dir.join(format!("{name}.toml"));
        std::fs::write(
            &model,
            format!("fixture = \"{name}.json\"\nduplicates = 1\nlost_acks = 1\nexpect = \"{expected}\"\n"),
        )
        .unwrap();
        let report = run(&load(model.to_str().unwrap()), None);
        assert!(report.as_expected, "{}", check::render(&report));
    }
}

#[test]
fn sleep_sets_visit_every_state_and_keep_every_verdict() {
    // Sleep sets (`card::commute`, the checker's depth-first search) prune transitions,
    // not states: with and without them the verdict and the violated properties are the
    // same, and so is the unique count (a failing run may in general skip violating dead
    // ends behind a sleeping step, never a violated property; see below), under SPEC with
    // several fault budgets, both reconciliation modes, one and two threads, on generated fixtures (also with an `expect` no order
    // meets, so that convergence fails) and on every card model file. Under mutants,
    // expiry and per-delivery budgets nothing sleeps, and the counts are equal too.
    use arrival::card::step::Reconciliation;
    let compare = |mut loaded: LoadedModel, what: &str| -> (usize, usize) {
        loaded.file.strategy = check::Strategy::Dfs;
        loaded.file.sleep_sets = false;
        let full = run(&loaded, None);
        loaded.file.sleep_sets = true;
        let asleep = run(&loaded, None);
        assert_eq!(
            (full.verdict.as_str(), &full.violated),
            (asleep.verdict.as_str(), &asleep.violated),
            "{what}"
        );
        // A failing run may in general skip violating dead ends behind a sleeping step. The
        // failing runs here break only convergence, at worlds where nothing is owed: every
        // other step there is a dropped redelivery or leads back to the same world, so
        // nothing lies behind them and the counts stay equal.
        assert_eq!(full.unique_states, asleep.unique_states, "{what}");
        // Explored states (repeats included) are exact on one thread only: two threads may
        // both expand a state before either marks it seen, so there the count varies from
        // run to run (seen once in CI: seed 5, budgets 0/2/1, End).
        if loaded.file.threads == 1 {
            assert!(asleep.states <= full.states, "{what}");
        }
        (full.states, asleep.states)
    };
    let (mut fewer, mut failed) = (0, 0);
    for seed in 1..=6 {
        for (duplicates, lost_acks, crashes) in [(1, 1, 1), (2, 1, 0), (0, 2, 1)] {
            for reconciliation in [Reconciliation::Interleaved, Reconciliation::End] {
                for threads in [1, 2] {
                    let mut loaded = generated_model(seed, PolicyName(None), false);
                    // Without re-encoded copies: with one, seed 2 at 0/2/1 (one thread)
                    // visits the same unique states but explores more with sleep sets
                    // than without (issue #27, left open).
                    loaded.file.reencodings = 0;
                    loaded.file.duplicates = duplicates;
                    loaded.file.lost_acks = lost_acks;
                    loaded.file.crashes = crashes;
                    loaded.file.reconciliation = reconciliation;
                    loaded.file.threads = threads;
                    let what = format!(
                        "seed {seed}, budgets {duplicates}/{lost_acks}/{crashes}, \
                         {reconciliation:?}, {threads} threads"
                    );
                    let (full, asleep) = compare(loaded, &what);
                    fewer += usize::from(asleep < full);
                }
            }
        }
        // An expectation no order meets: convergence fails with and without sleep sets.
        let mut loaded = generated_model(seed, PolicyName(None), false);
        loaded.file.reencodings = 0;
        let mut raw = loaded.scenario.raw.clone();
        let expect = raw.expect.as_mut().expect("generated fixtures expect");
        expect.unresolved.push("no-such-event".into());
        loaded.scenario = std::sync::Arc::new(
            Scenario::from_raw(Path::new("(generated)"), raw).expect("still valid"),
        );
        loaded.file.threads = 2;
        let report = run(&loaded, None);
        assert_eq!(report.violated, ["convergence"], "seed {seed}");
        compare(loaded, &format!("seed {seed}, expect no order meets"));
        failed += 1;
    }
    assert!(fewer > 0, "sleep sets prune transitions somewhere");
    assert!(failed > 0);
    for policy in Mutant::ALL.map(|mutant| PolicyName(Some(mutant))) {
        let loaded = generated_model(1, policy, false);
        let (full, asleep) = compare(loaded, &format!("policy {policy}"));
        assert_eq!(full, asleep, "nothing sleeps under {policy}");
    }
    for path in model_files() {
        let loaded = check::load_model(&path, None).expect("loads");
        compare(loaded, &path.display().to_string());
    }
}

#[test]
fn steps_declared_to_commute_commute_in_every_reachable_state() {
    // The footprints of `card::commute`, checked directly: in every reachable world of
    // generated fixtures (SPEC, one fault of each kind, both reconciliation modes), for
    // every step `t` taken and every step `u` declared to commute with it, `t` neither
    // enables nor disables `u`, and when both are enabled both orders give the same world
    // and neither order breaks a property.
    use arrival::card::model::ReceiverModel;
    use arrival::card::properties::checked_transition;
    use arrival::card::step::Reconciliation;
    use arrival::card::step::{Budgets, Step};
    use arrival::card::world::World;
    use arrival::harness::Protocol;
    use std::collections::HashSet;
    let budgets = Budgets {
        duplicates: 1,
        lost_acks: 1,
        crashes: 1,
        expiries: 0,
        reencodings: 1,
    };
    let (mut commuting_pairs, mut worlds) = (0usize, 0usize);
    for seed in 1..=4 {
        for reconciliation in [Reconciliation::Interleaved, Reconciliation::End] {
            let loaded = generated_model(seed, PolicyName(None), false);
            let scenario = loaded.scenario.clone();
            let model = ReceiverModel::new(scenario.clone(), None, budgets, reconciliation)
                .with_symmetry()
                .with_sleep_sets();
            let Some(commuting) = model.commuting.clone() else {
                continue;
            };
            let after = |world: &World, step: Step| {
                checked_transition(&scenario, Spec, Properties::SPEC, world, step).0
            };
            let enabled = |world: &World| {
                let mut steps = Vec::new();
                model.steps(world, &mut steps);
                steps
            };
            // The receiver's fingerprint cache is interior mutability that no hash or
            // comparison reads.
            #[allow(clippy::mutable_key_type)]
            let mut seen: HashSet<World> = HashSet::new();
            let mut stack = vec![model.init()];
            while let Some(world) = stack.pop() {
                if !seen.insert(world.clone()) {
                    continue;
                }
                worlds += 1;
                let here = enabled(&world);
                for t in &here {
                    let world_t = after(&world, *t);
                    assert_eq!(world_t.violation, None, "SPEC breaks nothing");
                    let there = enabled(&world_t);
                    for u in here.iter().chain(&there) {
                        if u == t || !commuting.commute(t, u) {
                            continue;
                        }
                        assert_eq!(
                            here.contains(u),
                            there.contains(u),
                            "seed {seed} {reconciliation:?}: {t:?} changes whether {u:?} \
                             is enabled in {world:?}"
                        );
                        if !here.contains(u) {
                            continue;
                        }
                        commuting_pairs += 1;
                        let world_u = after(&world, *u);
                        let (tu, ut) = (after(&world_t, *u), after(&world_u, *t));
                        assert_eq!(
                            tu, ut,
                            "seed {seed} {reconciliation:?}: {t:?} and {u:?} do not commute \
                             from {world:?}"
                        );
                        assert_eq!(tu.violation, None);
                    }
                    if let Some(next) = model.next(&world, t) {
                        stack.push(next);
                    }
                }
            }
        }
    }
    assert!(worlds > 1000, "{worlds} worlds");
    assert!(commuting_pairs > 1000, "{commuting_pairs} pairs");
}

#[test]
fn worlds_merged_as_one_state_are_one_state_in_every_visit_order() {
    // The fingerprint's merges must take behaviourally equal worlds as one state whatever
    // order the checker meets them in, or unique counts depend on the search (and sleep
    // sets, which assume merged worlds step alike, would be reasoned about on a quotient
    // that is not one). Found by review: a paused covered card's hold bucket with only
    // inputs held for the pause hashed unlike no bucket, so breadth- and depth-first
    // search counted different states. Fixtures with ids sent to several cards (which
    // `arrival gen` never makes), every budget 1: one count for BFS, DFS, 1 and 2 threads,
    // with and without sleep sets.
    use arrival::card::check::Strategy;
    use std::collections::BTreeSet;
    for fixture in [
        "tests/inputs/one-id-two-cards.json",
        "tests/inputs/ids-across-cards.json",
    ] {
        let mut loaded = generated_model(1, PolicyName(None), false);
        loaded.path = PathBuf::from(fixture);
        loaded.scenario = std::sync::Arc::new(
            Scenario::load(Path::new(fixture)).unwrap_or_else(|error| panic!("{error}")),
        );
        let mut counts = BTreeSet::new();
        let runs = [
            (Strategy::Bfs, 1, false),
            (Strategy::Dfs, 1, false),
            (Strategy::Dfs, 2, false),
            (Strategy::Dfs, 1, true),
            (Strategy::Dfs, 2, true),
            (Strategy::Dfs, 2, true),
            (Strategy::Dfs, 2, true),
        ];
        // Breadth- and depth-first search count alike without redeliveries taken alone
        // (depth first only).
        loaded.file.eager_redeliveries = false;
        for (strategy, threads, sleep_sets) in runs {
            loaded.file.strategy = strategy;
            loaded.file.threads = threads;
            loaded.file.sleep_sets = sleep_sets;
            let report = run(&loaded, None);
            assert_eq!(
                report.verdict,
                "pass",
                "{fixture}: {}",
                check::render(&report)
            );
            counts.insert(report.unique_states);
        }
        assert_eq!(counts.len(), 1, "{fixture}: unique counts {counts:?}");
    }
}

fn differential(
    count: usize,
    mutants: Vec<Mutant>,
    checked: Properties,
) -> arrival::card::differential::DifferentialReport {
    arrival::card::differential::run(&arrival::card::differential::DifferentialOptions {
        count,
        seed: 1,
        walks: 10,
        expiry: 4,
        mutants,
        checked,
    })
    .expect("runs")
}

#[test]
fn the_property_gap_report_finds_no_gap_in_the_catalogue_and_exercises_every_mutant() {
    // 300 fixtures, as CI's sweep: fewer leave anonymous-by-content (two inputs without an
    // event id and with one body) unexercised, which the report counts as not as expected.
    let report = differential(300, Mutant::ALL.to_vec(), Properties::SPEC);
    let rendered = arrival::card::differential::render(&report);
    assert!(report.as_expected, "{rendered}");
    assert_eq!(report.mutants.len(), Mutant::ALL.len());
    // Every schedule is walked: 300 fixtures and 4 again with expiry, 10 walks each.
    assert!(report.mutants.iter().all(|mutant| mutant.schedules == 3040));
    for mutant in &report.mutants {
        assert_eq!(mutant.gaps, 0, "{rendered}");
        assert!(mutant.caught > 0, "{rendered}");
        // A walk that differs is caught (a mutant is also caught on walks where its
        // decisions are the contract's but its effect is not, as a pause on a duplicate).
        assert!(mutant.differing <= mutant.caught, "{rendered}");
    }
}

#[test]
fn a_mutant_no_walk_tells_apart_from_the_contract_is_not_exercised() {
    // 40 fixtures give anonymous-by-content no two anonymous inputs with one body: no gap,
    // and nothing shown either, so the report is not as expected.
    let report = differential(40, vec![Mutant::AnonymousByContent], Properties::SPEC);
    let mutant = &report.mutants[0];
    assert_eq!((mutant.differing, mutant.caught, mutant.gaps), (0, 0, 0));
    assert!(!mutant.as_expected && !report.as_expected);
    assert!(arrival::card::differential::render(&report).contains("NOT EXERCISED"));
}

#[test]
fn without_re_pause_stops_re_evaluation_the_report_shows_the_gap_it_closes() {
    // The property that closed the gap left out: the mutant decides a hold after a
    // re-pause, every card and end state stays right, and the report says so.
    let checked: Properties = Properties::SPEC
        .iter()
        .filter(|&property| property != Property::RePauseStopsReEvaluation)
        .collect();
    let report = differential(40, vec![Mutant::ReEvaluatePastRePause], checked);
    let mutant = &report.mutants[0];
    assert!(
        !report.as_expected,
        "{}",
        arrival::card::differential::render(&report)
    );
    assert!(mutant.gaps > 0, "{mutant:?}");
    let gap = mutant.first_gap.as_ref().expect("a gap");
    assert!(
        gap.steps
            .last()
            .is_some_and(|step| step.starts_with("reconcile")),
        "{gap:?}"
    );
    let with_it = differential(40, vec![Mutant::ReEvaluatePastRePause], Properties::SPEC);
    assert!(with_it.as_expected);
    assert_eq!(with_it.mutants[0].gaps, 0);
    // The same walks differ (they draw the same steps up to the first difference), and
    // with the property every one of them is caught.
    assert_eq!(with_it.mutants[0].differing, mutant.differing);
    assert_eq!(with_it.mutants[0].caught, mutant.differing);
    // Pinned: 37 of the 440 walks reach a re-pause with a hold behind it.
    assert_eq!((mutant.schedules, mutant.differing), (440, 37));
}
