//! Replay: walk a fixture's steps in arrival order through the real receiver and report
//! every decision, acknowledgement, card state, pause and hold, the reconciliations, the
//! final state, the replacement counts, the unresolved inputs, any property a step broke,
//! and whether the fixture's `expect` holds.

use crate::card::audit::Journal;
use crate::card::fixture::{Replacements, Scenario};
use crate::card::policy::Policy;
use crate::card::properties::{self};
use crate::card::property::{Properties, Property};
use crate::card::receiver::{HoldKey, Receiver, Record, Settlement, Standing, Verdict};
use crate::card::step::{Budgets, Fault, Step};
use crate::card::wire::{Catalog, Sym};
use crate::card::world::{transition, Effect, World};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A card in a report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CardReport {
    /// Its version.
    pub version: u64,
    /// Its complete state.
    pub state: Value,
}

/// A field that is present is `Some`, even when it is `null`.
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// An event re-evaluated by reconciliation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReEvaluated {
    /// The event id (or `delivery-N`).
    pub event_id: String,
    /// Its decision before.
    pub from: String,
    /// Its new decision.
    pub decision: String,
}

/// One step of a replay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StepReport {
    /// A delivery.
    Deliver {
        /// The delivery number.
        delivery: u32,
        /// Its event id, when it has a string one.
        event_id: Option<String>,
        /// Its object id, when it has a string one.
        object_id: Option<String>,
        /// Its `object_version` as sent (absent when missing; a `null` sent stays `null`).
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "present"
        )]
        version: Option<Value>,
        /// The decision (`duplicate` for duplicates); `null` when the receiver crashed.
        decision: Option<String>,
        /// The acknowledgement's meaning; `null` when none was given.
        ack: Option<String>,
        /// The acknowledgement was lost on its way to the sender.
        ack_lost: bool,
        /// The fault injected (`ack_lost`, `duplicate`, `crash`), if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fault: Option<String>,
        /// For duplicates: the recorded decision matched.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        original_decision: Option<String>,
        /// Every card after the step.
        cards: BTreeMap<String, CardReport>,
        /// Paused cards after the step.
        paused: Vec<String>,
        /// Waiting inputs after the step, in arrival order.
        held: Vec<String>,
    },
    /// A reconciliation.
    Reconcile {
        /// The card.
        object_id: String,
        /// created / refused_behind / confirmed / replaced.
        outcome: String,
        /// Held events evaluated again, with their new decisions.
        re_evaluated: Vec<ReEvaluated>,
        /// Conflicts resolved.
        resolved: Vec<String>,
        /// Unevaluable inputs superseded.
        superseded: Vec<String>,
        /// Every card after the step.
        cards: BTreeMap<String, CardReport>,
        /// Paused cards after the step.
        paused: Vec<String>,
        /// Waiting inputs after the step, in arrival order.
        held: Vec<String>,
    },
    /// The retention window passed.
    Expire {
        /// The event ids forgotten, sorted.
        forgotten: Vec<String>,
        /// Every card after the step.
        cards: BTreeMap<String, CardReport>,
        /// Paused cards after the step.
        paused: Vec<String>,
        /// Waiting inputs after the step, in arrival order.
        held: Vec<String>,
    },
}

/// Why an input is unresolved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnresolvedReport {
    /// The event id or `delivery-N`.
    pub input: String,
    /// Its held decision.
    pub decision: String,
    /// `held` (still waiting), `superseded`, or `resolved` (a changed payload that could
    /// never be decided itself, whose conflict the authority resolved).
    pub standing: String,
}

/// One entry of the audit trail.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditReport {
    /// The 1-based step that wrote it.
    pub step: usize,
    /// `decided`, `duplicate`, `crashed`, `reconciled`, `re_evaluated`, `resolved`,
    /// `superseded` or `forgotten`.
    pub entry: String,
    /// The input (event id or `delivery-N`), or the card for `reconciled`.
    pub subject: String,
    /// The decision (or outcome) it records; for `re_evaluated`, the new decision.
    pub decision: Option<String>,
    /// For `re_evaluated`: the held decision it replaced; for `duplicate`, the one matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
}

/// A property broken by a step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViolationReport {
    /// The property.
    pub property: String,
    /// The 1-based step that broke it.
    pub step: usize,
    /// For `panic`: the panic's message (the walk stops at that step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// How the end of the run compares with the fixture's `expect`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExpectCheck {
    /// Everything matches.
    pub holds: bool,
    /// What differs, one line each.
    pub differences: Vec<String>,
}

/// The replay report: SPEC's contract plus a few extra keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The fixture's name.
    pub fixture: String,
    /// The policy replayed.
    pub policy: String,
    /// Every step.
    pub steps: Vec<StepReport>,
    /// The cards at the end.
    #[serde(rename = "final")]
    pub final_cards: BTreeMap<String, CardReport>,
    /// Paused cards at the end.
    pub paused: Vec<String>,
    /// Replacement counts.
    pub replacements: Replacements,
    /// Unresolved inputs, sorted.
    pub unresolved: Vec<String>,
    /// Why each is unresolved.
    pub unresolved_detail: Vec<UnresolvedReport>,
    /// Properties broken on the way, at most one (the first).
    pub violations: Vec<ViolationReport>,
    /// Preconditions the fixture breaks (`authority-current`): the run is shown, but no
    /// arrival order is promised to converge.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The audit trail: every decision, including the ones re-evaluation changed.
    pub audit: Vec<AuditReport>,
    /// The fixture's `expect`, checked; absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<ExpectCheck>,
}

impl Report {
    /// The end of this run as a fixture's `expect`.
    pub fn as_expect(&self) -> crate::card::fixture::RawExpect {
        crate::card::fixture::RawExpect {
            final_cards: self
                .final_cards
                .iter()
                .map(|(name, card)| {
                    let state = card.state.as_object().cloned().unwrap_or_default();
                    let card = crate::card::fixture::RawCard {
                        version: card.version,
                        state,
                    };
                    (name.clone(), card)
                })
                .collect(),
            replacements: Some(self.replacements),
            unresolved: self.unresolved.clone(),
            paused: (!self.paused.is_empty()).then(|| self.paused.clone()),
        }
    }

    /// Whether the run is clean: no property broken and `expect` (if any) holds.
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.expect.as_ref().is_none_or(|check| check.holds)
    }
}

/// Replays the fixture's steps (its schedule, or the default order) under a policy.
pub fn replay<P: Policy>(scenario: &Scenario, policy: P, policy_name: &str) -> Report {
    replay_steps(scenario, policy, policy_name, &schedule(scenario, policy))
}

/// The steps `replay` walks: the fixture's schedule, or the default order. The default
/// order delivers every delivery in array order, then reconciles until quiet: one pass over
/// the authority snapshots in array order reconciling each card that is paused or not yet
/// created, then further passes, in the same order, over each card still paused whose
/// authority is not behind it, until a pass finds none (a re-evaluated hold can pause its
/// card again). So the default order ends where the model's terminal states are, and one
/// `expect` serves replay and check.
pub fn schedule<P: Policy>(scenario: &Scenario, policy: P) -> Vec<Step> {
    let mut steps = scenario.steps();
    if scenario.schedule.is_some() {
        return steps;
    }
    let mut world = World::initial(scenario, Budgets::UNLIMITED);
    let take = |world: &mut World, steps: &mut Vec<Step>, step: Step| {
        *world = transition(scenario, policy, world, step).0;
        steps.push(step);
    };
    for step in steps.clone() {
        world = transition(scenario, policy, &world, step).0;
    }
    for snapshot in &scenario.authority {
        if world.reconcilable(scenario, snapshot.object_id) {
            take(&mut world, &mut steps, Step::Reconcile(snapshot.object_id));
        }
    }
    // Each further pass reconciles at least one card, and a reconciliation that pauses its
    // card again leaves fewer holds to re-evaluate, so the passes end; the bound only
    // guards against a mutant that keeps pausing.
    let bound = scenario.deliveries.len() + scenario.authority.len() + 1;
    for _ in 0..bound {
        let open: Vec<Sym> = scenario
            .authority
            .iter()
            .filter(|snapshot| world.is_open(scenario, snapshot))
            .map(|snapshot| snapshot.object_id)
            .collect();
        if open.is_empty() {
            break;
        }
        for card in open {
            if world.is_open(scenario, scenario.authority_for(card).expect("listed")) {
                take(&mut world, &mut steps, Step::Reconcile(card));
            }
        }
    }
    steps
}

/// Replays the given steps under a policy.
pub fn replay_steps<P: Policy>(
    scenario: &Scenario,
    policy: P,
    policy_name: &str,
    steps: &[Step],
) -> Report {
    let mut world = World::initial(scenario, Budgets::UNLIMITED);
    let mut journal = Journal::new();
    let mut reports = Vec::with_capacity(steps.len());
    let mut violations = Vec::new();
    // SPEC's properties, and the one a counterexample fixture was written to show.
    let checked = scenario.trace.map_or(Properties::SPEC, |shown| {
        Properties::SPEC.with(shown.violates)
    });
    for (index, &step) in steps.iter().enumerate() {
        let taken = crate::harness::panic::catching(|| {
            properties::checked_transition(scenario, policy, checked, &world, step)
        });
        let (next, effect) = match taken {
            Ok(taken) => taken,
            Err(message) => {
                // Nothing after a panicking step can be trusted: the walk ends before it.
                if world.violation.is_none() {
                    violations.push(ViolationReport {
                        property: Property::Panic.name().into(),
                        step: index + 1,
                        message: Some(message),
                    });
                }
                break;
            }
        };
        journal.observe(index, step, &effect, &next.receiver);
        if let (None, Some(property)) = (world.violation, next.violation) {
            violations.push(ViolationReport {
                property: property.name().into(),
                step: index + 1,
                message: None,
            });
        }
        world = next;
        reports.push(step_report(scenario, &world, &journal, step, &effect));
    }
    let receiver = &world.receiver;
    let unresolved_detail: Vec<UnresolvedReport> =
        unresolved_detail(&scenario.catalog, &world.receiver);
    let mut report = Report {
        fixture: scenario.name.clone(),
        policy: policy_name.into(),
        steps: reports,
        final_cards: cards(scenario, &world),
        paused: receiver
            .paused()
            .map(|card| scenario.catalog.name(card).to_owned())
            .collect(),
        replacements: journal.replacements,
        unresolved: receiver
            .unresolved()
            .into_iter()
            .map(|input| scenario.input_name(input))
            .collect(),
        unresolved_detail,
        violations,
        warnings: properties::authority_behind(scenario)
            .map(|behind| {
                format!(
                    "{}: {} (the fixture breaks convergence's precondition)",
                    Property::AuthorityCurrent,
                    behind.describe(scenario)
                )
            })
            .into_iter()
            .collect(),
        audit: audit(scenario, &journal),
        expect: None,
    };
    report.unresolved.sort();
    report.expect = scenario
        .expect
        .as_ref()
        .map(|_| check_expect(scenario, &world, &report));
    report
}

fn check_expect(scenario: &Scenario, world: &World, report: &Report) -> ExpectCheck {
    let expect = scenario.expect.as_ref().expect("caller checked");
    let catalog = &scenario.catalog;
    let mut differences = Vec::new();
    let expected_cards: BTreeMap<String, CardReport> = expect
        .final_cards
        .iter()
        .map(|(&id, &(version, state))| {
            let card = CardReport {
                version,
                state: catalog.state_value(state).clone(),
            };
            (catalog.name(id).to_owned(), card)
        })
        .collect();
    for (name, expected) in &expected_cards {
        match report.final_cards.get(name) {
            None => differences.push(format!(
                "final: {name} expected v{} but it does not exist",
                expected.version
            )),
            Some(actual) if actual != expected => differences.push(format!(
                "final: {name} expected v{} {} but is v{} {}",
                expected.version, expected.state, actual.version, actual.state
            )),
            Some(_) => {}
        }
    }
    for (name, actual) in &report.final_cards {
        if !expected_cards.contains_key(name) {
            differences.push(format!(
                "final: {name} exists (v{}) but is not expected",
                actual.version
            ));
        }
    }
    let expected_paused: Vec<String> = expect
        .paused
        .iter()
        .map(|&card| catalog.name(card).to_owned())
        .collect();
    if report.paused != expected_paused {
        differences.push(format!(
            "paused: expected {:?} but got {:?}",
            expected_paused, report.paused
        ));
    }
    if report.unresolved != expect.unresolved {
        differences.push(format!(
            "unresolved: expected {:?} but got {:?}",
            expect.unresolved, report.unresolved
        ));
    }
    if let Some(expected) = expect.replacements {
        if expected != report.replacements {
            differences.push(format!(
                "replacements: expected {} event + {} authority but got {} + {}",
                expected.event,
                expected.authority,
                report.replacements.event,
                report.replacements.authority
            ));
        }
    }
    // At a terminal state, the expectation is the convergence property.
    debug_assert!(
        !world.is_terminal(scenario)
            || properties::converged(scenario, &world.receiver)
                == differences
                    .iter()
                    .all(|line| line.starts_with("replacements")),
        "replay's expect check and the convergence property agree"
    );
    ExpectCheck {
        holds: differences.is_empty(),
        differences,
    }
}

/// The receiver before any step: the fixture's initial cards and the cards it starts paused.
/// Nothing is held before the first delivery.
pub fn initial_state(scenario: &Scenario) -> (BTreeMap<String, CardReport>, Vec<String>) {
    let world = World::initial(scenario, Budgets::UNLIMITED);
    let paused = world
        .receiver
        .paused()
        .map(|card| scenario.catalog.name(card).to_owned())
        .collect();
    (cards(scenario, &world), paused)
}

fn cards(scenario: &Scenario, world: &World) -> BTreeMap<String, CardReport> {
    world
        .receiver
        .cards()
        .iter()
        .map(|(id, card)| {
            let report = CardReport {
                version: card.version,
                state: scenario.catalog.state_value(card.state).clone(),
            };
            (scenario.catalog.name(id).to_owned(), report)
        })
        .collect()
}

fn hold_name(scenario: &Scenario, key: HoldKey) -> String {
    scenario.input_name(key.input())
}

fn step_report(
    scenario: &Scenario,
    world: &World,
    journal: &Journal,
    step: Step,
    effect: &Effect,
) -> StepReport {
    let catalog = &scenario.catalog;
    let cards = cards(scenario, world);
    let paused = world
        .receiver
        .paused()
        .map(|card| catalog.name(card).to_owned())
        .collect();
    let held = journal
        .held(&world.receiver)
        .into_iter()
        .map(|key| hold_name(scenario, key))
        .collect();
    match (step, effect) {
        (
            Step::Deliver { delivery, fault },
            Effect::Delivered {
                delivered,
                acked: _,
            },
        ) => {
            let index = scenario.delivery_index(delivery).expect("known delivery");
            let arriving = &scenario.deliveries[index];
            let raw = &scenario.raw.deliveries[index].event;
            let name =
                |sym: Option<crate::card::wire::Sym>| sym.map(|sym| catalog.name(sym).to_owned());
            StepReport::Deliver {
                delivery,
                event_id: name(arriving.event.event_id),
                object_id: name(arriving.event.object_id),
                version: raw.get("object_version").cloned(),
                decision: delivered.map(|answer| answer.verdict.name().to_owned()),
                ack: delivered.map(|answer| answer.ack.name().to_owned()),
                ack_lost: fault == Some(Fault::AckLost),
                fault: fault.map(|fault| fault_name(fault).to_owned()),
                original_decision: delivered.and_then(|answer| match answer.verdict {
                    Verdict::Duplicate(of) => Some(of.name().to_owned()),
                    Verdict::Decided(_) => None,
                }),
                cards,
                paused,
                held,
            }
        }
        (Step::Reconcile(card), Effect::Reconciled(reconciled)) => {
            let named = |wanted: fn(&Settlement) -> bool| {
                reconciled
                    .settled
                    .iter()
                    .filter(|(_, settlement)| wanted(settlement))
                    .map(|&(key, _)| hold_name(scenario, key))
                    .collect()
            };
            StepReport::Reconcile {
                object_id: catalog.name(card).to_owned(),
                outcome: reconciled.outcome.name().to_owned(),
                re_evaluated: reconciled
                    .settled
                    .iter()
                    .filter_map(|&(key, settlement)| match settlement {
                        Settlement::ReEvaluated { from, to } => Some(ReEvaluated {
                            event_id: hold_name(scenario, key),
                            from: from.name().to_owned(),
                            decision: to.name().to_owned(),
                        }),
                        _ => None,
                    })
                    .collect(),
                resolved: named(|settlement| *settlement == Settlement::Resolved),
                superseded: named(|settlement| *settlement == Settlement::Superseded),
                cards,
                paused,
                held,
            }
        }
        (Step::Expire, Effect::Expired(gone)) => {
            let mut forgotten: Vec<String> =
                gone.iter().map(|&id| catalog.name(id).to_owned()).collect();
            forgotten.sort();
            StepReport::Expire {
                forgotten,
                cards,
                paused,
                held,
            }
        }
        _ => unreachable!("effects match their steps"),
    }
}

fn audit(scenario: &Scenario, journal: &Journal) -> Vec<AuditReport> {
    use crate::card::audit::Entry;
    let delivery_input = |number: u32| {
        let index = scenario.delivery_index(number).expect("known delivery");
        let event = &scenario.deliveries[index].event;
        event.event_id.map_or_else(
            || format!("delivery-{number}"),
            |id| scenario.catalog.name(id).to_owned(),
        )
    };
    let line = |step: usize,
                entry: &str,
                subject: String,
                decision: Option<String>,
                previous: Option<String>| {
        AuditReport {
            step: step + 1,
            entry: entry.into(),
            subject,
            decision,
            previous,
        }
    };
    journal
        .entries
        .iter()
        .map(|&(step, entry)| match entry {
            Entry::Decided { delivery, decision } => line(
                step,
                "decided",
                delivery_input(delivery),
                Some(decision.name().into()),
                None,
            ),
            Entry::Duplicate { delivery, of } => line(
                step,
                "duplicate",
                delivery_input(delivery),
                Some("duplicate".into()),
                Some(of.name().into()),
            ),
            Entry::Crashed { delivery } => {
                line(step, "crashed", delivery_input(delivery), None, None)
            }
            Entry::Reconciled { card, outcome } => line(
                step,
                "reconciled",
                scenario.catalog.name(card).into(),
                Some(outcome.name().into()),
                None,
            ),
            Entry::Settled { key, settlement } => match settlement {
                Settlement::ReEvaluated { from, to } => line(
                    step,
                    "re_evaluated",
                    hold_name(scenario, key),
                    Some(to.name().into()),
                    Some(from.name().into()),
                ),
                Settlement::Resolved => {
                    line(step, "resolved", hold_name(scenario, key), None, None)
                }
                Settlement::Superseded => {
                    line(step, "superseded", hold_name(scenario, key), None, None)
                }
            },
            Entry::Forgotten { event } => line(
                step,
                "forgotten",
                scenario.catalog.name(event).into(),
                None,
                None,
            ),
        })
        .collect()
}

/// The name of a fault in reports and schedules.
pub fn fault_name(fault: Fault) -> &'static str {
    match fault {
        Fault::AckLost => "ack_lost",
        Fault::Duplicate => "duplicate",
        Fault::Crash => "crash",
        Fault::Reencoded => "reencoded",
    }
}

/// Every unresolved input with its record's decision and standing, by input name: the
/// report's detail, shared with the durable store's `show`.
pub fn unresolved_detail(catalog: &Catalog, receiver: &Receiver) -> Vec<UnresolvedReport> {
    let waiting = |record: &Record| receiver.is_unresolved(record);
    let describe = |input: String, record: &Record| UnresolvedReport {
        input,
        decision: record.decision.name().to_owned(),
        standing: match record.standing {
            Standing::Superseded => "superseded",
            Standing::Resolved => "resolved",
            Standing::Held | Standing::Settled => "held",
        }
        .to_owned(),
    };
    let mut detail: Vec<UnresolvedReport> = receiver
        .identities()
        .iter()
        .flat_map(|(id, identity)| {
            identity
                .records()
                .filter(|record| waiting(record))
                .map(move |record| describe(catalog.name(id).to_owned(), record))
        })
        .chain(
            receiver
                .anonymous()
                .iter()
                .filter(|(_, record)| waiting(record))
                .map(|(&number, record)| describe(format!("delivery-{number}"), record)),
        )
        .collect();
    detail.sort_by(|a, b| a.input.cmp(&b.input));
    detail
}

/// The property a report says was broken first, if any.
pub fn first_violation(report: &Report) -> Option<Property> {
    report
        .violations
        .first()
        .and_then(|violation| violation.property.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::{replay, StepReport};
    use crate::card::fixture::Scenario;
    use crate::card::receiver::Spec;
    use std::path::Path;

    #[test]
    fn holds_stay_in_arrival_order_after_an_expiry_forgets_an_earlier_one() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inputs/held-order-after-expiry.json");
        let scenario = Scenario::load(&path).expect("the fixture loads");
        let report = replay(&scenario, Spec, "spec");
        let Some(StepReport::Deliver { held, .. }) = report.steps.last() else {
            panic!("the last step is a delivery");
        };
        assert_eq!(held, &["e-2", "e-3"]);
    }
}
