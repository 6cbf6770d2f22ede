//! Counterexamples: a violating path becomes a step list in domain terms, a step table, and
//! a fixture whose `schedule` replays it.
//!
//! The fixture speaks in delivery numbers and card names, never in the checker's action
//! indices, so it keeps replaying after the code changes. Its `expect` is what the SPEC
//! receiver ends with after exactly these steps, so `arrival replay TRACE` passes and
//! `arrival replay TRACE --policy MUTANT` names the violated property. A convergence trace
//! of the SPEC receiver itself (possible with expiry) keeps the fixture's own `expect`
//! instead: the point is that these steps end elsewhere.

use crate::card::fixture::{RawFixture, RawStep, TraceOrigin};
use crate::card::model::describe_step;
use crate::card::model_file::LoadedModel;
use crate::card::policy::Spec;
use crate::card::property::Property;
use crate::card::replay::{replay_steps, CardReport, Report, StepReport};
use crate::card::step::{Fault, Step};
use crate::card::table;
use crate::harness::report::TraceReport;
use crate::harness::InputError;
use std::path::Path;

/// A schedule step as written in fixtures.
pub fn raw_step(scenario: &crate::card::fixture::Scenario, step: Step) -> RawStep {
    match step {
        Step::Deliver { delivery, fault } => RawStep {
            deliver: Some(delivery),
            ack_lost: fault == Some(Fault::AckLost),
            duplicate: fault == Some(Fault::Duplicate),
            crash: fault == Some(Fault::Crash),
            reencoded: fault == Some(Fault::Reencoded),
            ..RawStep::default()
        },
        Step::Reconcile(card) => RawStep {
            reconcile: Some(scenario.catalog.name(card).to_owned()),
            ..RawStep::default()
        },
        Step::Expire => RawStep {
            expire: true,
            ..RawStep::default()
        },
    }
}

/// The fixture that replays `steps`, expecting what the SPEC receiver ends with.
pub fn fixture(loaded: &LoadedModel, property: Property, steps: &[Step]) -> RawFixture {
    let scenario = &loaded.scenario;
    let spec: Report = replay_steps(scenario, Spec, "spec", steps);
    let keeps_expect = loaded.policy.0.is_none() && property == Property::Convergence;
    let mut raw = scenario.raw.clone();
    raw.name = Some(format!(
        "{}: {} under {}",
        scenario.name, property, loaded.policy
    ));
    raw.description = Some(format!(
        "Counterexample found by `arrival check {}`: under policy {} this schedule violates {}. \
         {}",
        loaded.path.display(),
        loaded.policy,
        property,
        if keeps_expect {
            "`expect` is the fixture's own, which these steps do not reach."
        } else {
            "`expect` is what the SPEC receiver ends with after exactly these steps."
        }
    ));
    raw.schedule = Some(steps.iter().map(|&step| raw_step(scenario, step)).collect());
    raw.trace = Some(TraceOrigin {
        model: loaded.path.display().to_string(),
        policy: loaded.policy.to_string(),
        violates: property.name().to_owned(),
    });
    if !keeps_expect {
        raw.expect = Some(spec.as_expect());
    }
    raw
}

/// Describes, tabulates and (with `out_dir`) writes one counterexample.
pub fn report(
    loaded: &LoadedModel,
    property: Property,
    steps: &[Step],
    out_dir: Option<&Path>,
) -> Result<TraceReport, InputError> {
    let scenario = &loaded.scenario;
    let raw = fixture(loaded, property, steps);
    // Replayed against its own `expect`, the table shows where the checked policy ends up
    // differing from the SPEC receiver on the same steps.
    let trace_scenario = crate::card::fixture::Scenario::from_raw(&scenario.file, raw.clone())?;
    let replayed = replay_steps(
        &trace_scenario,
        loaded.policy.0,
        &loaded.policy.to_string(),
        steps,
    );
    let written = match out_dir {
        None => None,
        Some(dir) => Some(crate::harness::model_file::write_trace(
            dir,
            &loaded.path,
            property.name(),
            &raw,
        )?),
    };
    let diagram = diagram(loaded, property, steps, &replayed);
    if let Some(fixture) = &written {
        crate::harness::model_file::write_diagram(fixture, &diagram)?;
    }
    Ok(TraceReport {
        mermaid: diagram.mermaid(),
        steps: steps
            .iter()
            .map(|step| describe_step(scenario, step))
            .collect(),
        fixture: written,
        table: table::render(&replayed),
        shortest: true,
    })
}

/// The lanes of a card trace.
const SENDER: usize = 0;
const NETWORK: usize = 1;
const RECEIVER: usize = 2;
const AUTHORITY: usize = 3;

/// The receiver's visible state: cards as `NAME vVERSION STATE`, paused cards, held inputs.
type Visible = (Vec<String>, Vec<String>, Vec<String>);

fn visible_cards(cards: &std::collections::BTreeMap<String, CardReport>) -> Vec<String> {
    cards
        .iter()
        .map(|(name, card)| format!("{name} v{} {}", card.version, card.state))
        .collect()
}

/// The visible state after a step.
fn visible(step: &StepReport) -> Visible {
    let (cards, paused, held) = match step {
        StepReport::Deliver {
            cards,
            paused,
            held,
            ..
        }
        | StepReport::Reconcile {
            cards,
            paused,
            held,
            ..
        }
        | StepReport::Expire {
            cards,
            paused,
            held,
            ..
        } => (cards, paused, held),
    };
    (visible_cards(cards), paused.clone(), held.clone())
}

/// The visible state before the first step: the fixture's initial world.
fn visible_initially(scenario: &crate::card::fixture::Scenario) -> Visible {
    let (cards, paused) = crate::card::replay::initial_state(scenario);
    (visible_cards(&cards), paused, Vec::new())
}

/// What a step changed, from the state before it (the initial world for step 1) and after.
fn changes(before: &Visible, after: &Visible) -> Option<String> {
    let (cards, paused, held) = after;
    let (cards_before, paused_before, held_before) = before;
    let mut out = Vec::new();
    let changed: Vec<&str> = cards
        .iter()
        .filter(|card| !cards_before.contains(card))
        .map(String::as_str)
        .collect();
    if !changed.is_empty() {
        out.push(changed.join(", "));
    }
    if paused != paused_before {
        out.push(format!(
            "paused: {}",
            if paused.is_empty() {
                "-".into()
            } else {
                paused.join(",")
            }
        ));
    }
    if held != held_before {
        out.push(format!(
            "held: {}",
            if held.is_empty() {
                "-".into()
            } else {
                held.join(",")
            }
        ));
    }
    (!out.is_empty()).then(|| out.join("; "))
}

/// The counterexample as a sequence diagram: sender, network, receiver (with its store) and
/// authority; each step's decision and acknowledgement, what it changed, the violating step.
pub fn diagram(
    loaded: &LoadedModel,
    property: Property,
    steps: &[Step],
    replayed: &Report,
) -> crate::harness::diagram::Diagram {
    use crate::harness::diagram::{Diagram, Message};
    let scenario = &loaded.scenario;
    let message = |from, to, label: String, lost, changed| Message {
        from,
        to,
        label,
        lost,
        changed,
    };
    let mut rows = Vec::new();
    let mut before = visible_initially(scenario);
    // A walk that panicked stops before the step that panicked.
    for (step, report) in steps.iter().zip(&replayed.steps) {
        let after = visible(report);
        let changed = changes(&before, &after);
        before = after;
        let row = match (step, report) {
            (Step::Deliver { fault, .. }, StepReport::Deliver { decision, ack, .. }) => {
                let what = describe_step(scenario, step);
                let decided = decision
                    .clone()
                    .unwrap_or_else(|| "crash before record".into());
                let mut row = match fault {
                    Some(Fault::Duplicate | Fault::Reencoded) => {
                        vec![message(
                            NETWORK,
                            RECEIVER,
                            format!("{what}: {decided}"),
                            false,
                            changed,
                        )]
                    }
                    _ => vec![message(
                        SENDER,
                        RECEIVER,
                        format!("{what}: {decided}"),
                        false,
                        changed,
                    )],
                };
                if let Some(ack) = ack {
                    let lost = *fault == Some(Fault::AckLost);
                    let to = if matches!(fault, Some(Fault::Duplicate | Fault::Reencoded)) {
                        NETWORK
                    } else {
                        SENDER
                    };
                    row.push(message(RECEIVER, to, format!("ack {ack}"), lost, None));
                }
                row
            }
            (
                Step::Reconcile(_),
                StepReport::Reconcile {
                    object_id, outcome, ..
                },
            ) => {
                vec![message(
                    AUTHORITY,
                    RECEIVER,
                    format!("reconcile {object_id}: {outcome}"),
                    false,
                    changed,
                )]
            }
            _ => vec![message(
                RECEIVER,
                RECEIVER,
                describe_step(scenario, step),
                false,
                changed,
            )],
        };
        rows.push(row);
    }
    let violation = replayed
        .violations
        .first()
        .map(|violation| (violation.step, violation.property.clone()))
        .or_else(|| Some((steps.len(), property.name().to_owned())));
    Diagram {
        title: format!("{}: {} under {}", scenario.name, property, loaded.policy),
        lanes: ["sender", "network", "receiver + store", "authority"]
            .map(String::from)
            .to_vec(),
        steps: rows,
        violation,
    }
}

/// A conformance schedule as a sequence diagram between `arrival` (sender, network,
/// authority and process supervisor in one) and the `receiver`: each action's request and
/// the answer arrival read (from the run's `observed` log), the external actions (a kill in
/// flight or after the acknowledgement, a restart, a disconnect, an acknowledgement read
/// and dropped) as notes and lost messages, and the step at which `property` showed.
pub fn conform_diagram(
    scenario: &crate::card::fixture::Scenario,
    actions: &[crate::card::step::Action],
    observed: &[serde_json::Value],
    violation: (usize, &str),
) -> crate::harness::diagram::Diagram {
    use crate::card::step::{Action, External};
    use crate::harness::diagram::{Diagram, Message};
    const ARRIVAL: usize = 0;
    const RECEIVER: usize = 1;
    let message = |from, to, label: &str, lost| Message {
        from,
        to,
        label: label.to_owned(),
        lost,
        changed: None,
    };
    let mut rows = Vec::with_capacity(actions.len());
    for (index, &action) in actions.iter().enumerate() {
        let answer = observed
            .iter()
            .find(|entry| entry["step"].as_u64() == Some(index as u64 + 1))
            .map_or_else(|| "answer not recorded".to_owned(), answer_words);
        let row = match action {
            Action::Deliver { delivery, fault } => {
                let plain = Step::Deliver {
                    delivery,
                    fault: None,
                };
                let mut request = describe_step(scenario, &plain);
                request += match fault {
                    Some(External::Duplicate) => " (duplicate copy)",
                    Some(External::Reencoded) => " (re-encoded copy)",
                    _ => "",
                };
                let mut row = vec![message(ARRIVAL, RECEIVER, &request, false)];
                match fault {
                    Some(External::Disconnect) => row.push(message(
                        ARRIVAL,
                        ARRIVAL,
                        "disconnect: connection closed after sending, answer never read",
                        false,
                    )),
                    Some(External::Kill) => row.push(message(
                        RECEIVER,
                        RECEIVER,
                        "kill in flight (SIGKILL to the process group), restart",
                        false,
                    )),
                    _ => {}
                }
                match fault {
                    Some(External::LostAck) => row.push(message(
                        RECEIVER,
                        ARRIVAL,
                        &format!("{answer}: ack lost (read, dropped by arrival)"),
                        true,
                    )),
                    Some(External::Disconnect | External::Kill) => {
                        row.push(message(RECEIVER, ARRIVAL, &answer, true));
                    }
                    _ => row.push(message(RECEIVER, ARRIVAL, &answer, false)),
                }
                if fault == Some(External::KillAfterAck) {
                    row.push(message(
                        RECEIVER,
                        RECEIVER,
                        "kill after the ack (SIGKILL to the process group), restart",
                        false,
                    ));
                }
                row
            }
            Action::Reconcile(card) => {
                let snapshot = scenario
                    .authority_for(card)
                    .map_or_else(String::new, |s| format!(" (authority v{})", s.version));
                let request = format!("reconcile {}{snapshot}", scenario.catalog.name(card));
                vec![
                    message(ARRIVAL, RECEIVER, &request, false),
                    message(RECEIVER, ARRIVAL, &answer, false),
                ]
            }
            Action::Restart => vec![message(
                RECEIVER,
                RECEIVER,
                "restart: SIGKILL between steps, started again on the same data",
                false,
            )],
        };
        rows.push(row);
    }
    Diagram {
        title: format!("{}: {} against a real receiver", scenario.name, violation.1),
        lanes: vec!["arrival".into(), "receiver".into()],
        steps: rows,
        violation: Some((violation.0, violation.1.to_owned())),
    }
}

/// An answer of the `observed` log in words: `ack applied`, `ack`, `indefinite: WHY`.
fn answer_words(entry: &serde_json::Value) -> String {
    let answer = &entry["answer"];
    if let Some(word) = answer.get("ack") {
        return match word.as_str() {
            Some(word) => format!("ack {word}"),
            None => "ack".into(),
        };
    }
    for kind in ["definite", "indefinite"] {
        if let Some(why) = answer.get(kind).and_then(|why| why.as_str()) {
            return format!("{kind}: {why}");
        }
    }
    "answer not recorded".into()
}
