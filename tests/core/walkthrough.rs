//! The B62-15 walkthrough of the card contract (`docs/protocol.md`), asserted step by step through `replay`.

use arrival::card::fixture::{Replacements, Scenario};
use arrival::card::policy::Spec;
use arrival::card::replay::{replay, CardReport, Report, StepReport};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

fn b62_15() -> Report {
    let scenario = Scenario::load(Path::new("fixtures/B62-15-events.json")).expect("fixture loads");
    replay(&scenario, Spec, "spec")
}

fn card(version: u64, stage: &str, label: &str) -> CardReport {
    CardReport {
        version,
        state: json!({"stage": stage, "label": label}),
    }
}

/// One row of SPEC's table: delivery, event, decision, ack, ack lost, original decision,
/// card-7 and card-8 after, paused, held.
type Row = (
    u32,
    &'static str,
    &'static str,
    &'static str,
    bool,
    Option<&'static str>,
    (u64, &'static str, &'static str),
    (u64, &'static str, &'static str),
    &'static [&'static str],
    &'static [&'static str],
);

const ROWS: [Row; 10] = [
    (
        1,
        "e-201",
        "applied",
        "applied",
        true,
        None,
        (12, "ready", "Map"),
        (3, "ready", "Chart"),
        &[],
        &[],
    ),
    (
        2,
        "e-201",
        "duplicate",
        "applied",
        false,
        Some("applied"),
        (12, "ready", "Map"),
        (3, "ready", "Chart"),
        &[],
        &[],
    ),
    (
        3,
        "e-200",
        "stale",
        "ignored",
        false,
        None,
        (12, "ready", "Map"),
        (3, "ready", "Chart"),
        &[],
        &[],
    ),
    (
        4,
        "e-202",
        "applied",
        "applied",
        false,
        None,
        (13, "ready", "Map v2"),
        (3, "ready", "Chart"),
        &[],
        &[],
    ),
    (
        5,
        "e-207",
        "equal",
        "ignored",
        false,
        None,
        (13, "ready", "Map v2"),
        (3, "ready", "Chart"),
        &[],
        &[],
    ),
    (
        6,
        "e-202",
        "conflict_changed_payload",
        "held",
        false,
        None,
        (13, "ready", "Map v2"),
        (3, "ready", "Chart"),
        &["card-7"],
        &["e-202"],
    ),
    (
        7,
        "e-203",
        "held_paused",
        "held",
        false,
        None,
        (13, "ready", "Map v2"),
        (3, "ready", "Chart"),
        &["card-7"],
        &["e-202", "e-203"],
    ),
    (
        8,
        "e-300",
        "held_unknown_object",
        "held",
        false,
        None,
        (13, "ready", "Map v2"),
        (3, "ready", "Chart"),
        &["card-7"],
        &["e-202", "e-203", "e-300"],
    ),
    (
        9,
        "e-204",
        "held_missing_version",
        "held",
        false,
        None,
        (13, "ready", "Map v2"),
        (3, "ready", "Chart"),
        &["card-7", "card-8"],
        &["e-202", "e-203", "e-300", "e-204"],
    ),
    (
        10,
        "e-205",
        "held_paused",
        "held",
        false,
        None,
        (13, "ready", "Map v2"),
        (3, "ready", "Chart"),
        &["card-7", "card-8"],
        &["e-202", "e-203", "e-300", "e-204", "e-205"],
    ),
];

fn names(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

#[test]
fn every_delivery_matches_the_spec_table() {
    let report = b62_15();
    assert_eq!(
        report.steps.len(),
        12,
        "ten deliveries and two reconciliations"
    );
    for (row, step) in ROWS.iter().zip(&report.steps) {
        let &(
            number,
            event,
            decision_expected,
            ack_expected,
            lost,
            original,
            c7,
            c8,
            paused_expected,
            held_expected,
        ) = row;
        let StepReport::Deliver {
            delivery,
            event_id,
            object_id: _,
            decision,
            ack,
            ack_lost,
            original_decision,
            cards,
            paused,
            held,
            ..
        } = step
        else {
            panic!("step for delivery {number} is not a delivery: {step:?}");
        };
        assert_eq!(*delivery, number);
        assert_eq!(event_id.as_deref(), Some(event), "delivery {number}");
        assert_eq!(
            decision.as_deref(),
            Some(decision_expected),
            "delivery {number}"
        );
        assert_eq!(ack.as_deref(), Some(ack_expected), "delivery {number}");
        assert_eq!(*ack_lost, lost, "delivery {number}");
        assert_eq!(original_decision.as_deref(), original, "delivery {number}");
        let expected_cards: BTreeMap<String, CardReport> = [
            ("card-7".to_owned(), card(c7.0, c7.1, c7.2)),
            ("card-8".to_owned(), card(c8.0, c8.1, c8.2)),
        ]
        .into();
        assert_eq!(cards, &expected_cards, "cards after delivery {number}");
        assert_eq!(
            paused,
            &names(paused_expected),
            "paused after delivery {number}"
        );
        assert_eq!(held, &names(held_expected), "held after delivery {number}");
    }
}

#[test]
fn reconciliation_matches_the_spec() {
    let report = b62_15();
    let reconciliations: Vec<&StepReport> = report.steps[10..].iter().collect();
    match reconciliations[0] {
        StepReport::Reconcile {
            object_id,
            outcome,
            re_evaluated,
            resolved,
            superseded,
            cards,
            paused,
            held,
        } => {
            assert_eq!(object_id, "card-7");
            assert_eq!(outcome, "replaced");
            assert_eq!(re_evaluated.len(), 1);
            assert_eq!(re_evaluated[0].event_id, "e-203");
            assert_eq!(re_evaluated[0].from, "held_paused");
            assert_eq!(re_evaluated[0].decision, "equal");
            assert_eq!(resolved, &names(&["e-202"]));
            assert!(superseded.is_empty());
            assert_eq!(cards["card-7"], card(14, "archived", "Map v2"));
            assert_eq!(cards["card-8"], card(3, "ready", "Chart"));
            assert_eq!(paused, &names(&["card-8"]));
            assert_eq!(held, &names(&["e-300", "e-204", "e-205"]));
        }
        other => panic!("step 11 is not a reconciliation: {other:?}"),
    }
    match reconciliations[1] {
        StepReport::Reconcile {
            object_id,
            outcome,
            re_evaluated,
            resolved,
            superseded,
            cards,
            paused,
            held,
        } => {
            assert_eq!(object_id, "card-8");
            assert_eq!(outcome, "replaced");
            assert_eq!(re_evaluated.len(), 1);
            assert_eq!(re_evaluated[0].event_id, "e-205");
            assert_eq!(re_evaluated[0].decision, "stale");
            assert!(resolved.is_empty());
            assert_eq!(superseded, &names(&["e-204"]));
            assert_eq!(cards["card-8"], card(5, "ready", "Chart"));
            assert!(paused.is_empty());
            assert_eq!(held, &names(&["e-300"]));
        }
        other => panic!("step 12 is not a reconciliation: {other:?}"),
    }
}

#[test]
fn final_state_counts_and_unresolved_inputs_match_the_spec() {
    let report = b62_15();
    let expected: BTreeMap<String, CardReport> = [
        ("card-7".to_owned(), card(14, "archived", "Map v2")),
        ("card-8".to_owned(), card(5, "ready", "Chart")),
    ]
    .into();
    assert_eq!(report.final_cards, expected);
    assert!(report.paused.is_empty());
    assert_eq!(
        report.replacements,
        Replacements {
            event: 2,
            authority: 2
        }
    );
    assert_eq!(report.unresolved, names(&["e-204", "e-300"]));
    let reasons: Vec<(&str, &str, &str)> = report
        .unresolved_detail
        .iter()
        .map(|detail| {
            (
                detail.input.as_str(),
                detail.decision.as_str(),
                detail.standing.as_str(),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [
            ("e-204", "held_missing_version", "superseded"),
            ("e-300", "held_unknown_object", "held"),
        ]
    );
    assert!(report.violations.is_empty());
    assert!(report.expect.as_ref().is_some_and(|check| check.holds));
    assert!(report.passed());
}

#[test]
fn json_report_follows_the_contract() {
    let report = b62_15();
    let value: Value = serde_json::to_value(&report).expect("serialises");
    for key in ["steps", "final", "paused", "replacements", "unresolved"] {
        assert!(value.get(key).is_some(), "report has `{key}`");
    }
    let first = &value["steps"][0];
    assert_eq!(first["kind"], "deliver");
    assert_eq!(first["delivery"], 1);
    assert_eq!(first["event_id"], "e-201");
    assert_eq!(first["object_id"], "card-7");
    assert_eq!(first["decision"], "applied");
    assert_eq!(first["ack"], "applied");
    assert_eq!(first["ack_lost"], true);
    assert!(
        first.get("original_decision").is_none(),
        "only duplicates carry it"
    );
    assert_eq!(
        first["cards"]["card-7"],
        json!({"version": 12, "state": {"stage": "ready", "label": "Map"}})
    );
    assert_eq!(value["steps"][1]["original_decision"], "applied");
    assert_eq!(value["steps"][1]["decision"], "duplicate");
    let reconcile = &value["steps"][10];
    assert_eq!(reconcile["kind"], "reconcile");
    assert_eq!(reconcile["object_id"], "card-7");
    assert_eq!(reconcile["outcome"], "replaced");
    assert_eq!(reconcile["re_evaluated"][0]["event_id"], "e-203");
    assert_eq!(reconcile["re_evaluated"][0]["decision"], "equal");
    assert_eq!(reconcile["paused"], json!(["card-8"]));
    assert_eq!(reconcile["held"], json!(["e-300", "e-204", "e-205"]));
    assert_eq!(value["replacements"], json!({"event": 2, "authority": 2}));
    assert_eq!(value["unresolved"], json!(["e-204", "e-300"]));
    assert_eq!(value["paused"], json!([]));
    // The report survives serialisation and reading back unchanged.
    let back: Report = serde_json::from_value(value).expect("reads back");
    assert_eq!(back, report);
}

/// step, entry, subject, decision, previous decision.
type AuditLine<'a> = (usize, &'a str, &'a str, Option<&'a str>, Option<&'a str>);

#[test]
fn the_audit_keeps_every_decision_including_the_ones_re_evaluation_changed() {
    let report = b62_15();
    let trail: Vec<AuditLine> = report
        .audit
        .iter()
        .map(|line| {
            (
                line.step,
                line.entry.as_str(),
                line.subject.as_str(),
                line.decision.as_deref(),
                line.previous.as_deref(),
            )
        })
        .collect();
    assert!(trail.contains(&(7, "decided", "e-203", Some("held_paused"), None)));
    assert!(trail.contains(&(
        11,
        "re_evaluated",
        "e-203",
        Some("equal"),
        Some("held_paused")
    )));
    assert!(trail.contains(&(
        6,
        "decided",
        "e-202",
        Some("conflict_changed_payload"),
        None
    )));
    assert!(trail.contains(&(11, "resolved", "e-202", None, None)));
    assert!(trail.contains(&(12, "superseded", "e-204", None, None)));
    assert!(trail.contains(&(2, "duplicate", "e-201", Some("duplicate"), Some("applied"))));
    assert_eq!(
        trail.len(),
        16,
        "ten deliveries, two reconciliations, four settlements"
    );
}
