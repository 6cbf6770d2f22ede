//! The facts pipeline as a [`Protocol`] the harness checks: every order of the requests,
//! lost HTTP responses (the sender posts again: a second stream entry), consumers that
//! crash before the inbox commit or between commit and `XACK`, recovery of a consumer's own
//! pending entries, takeover by another consumer, poison entries and a material upgrade at
//! any point, each within its budget, through the same [`transition`] replay uses; its
//! coverage counters, and steps and states in domain terms.

use super::application::AppKey;
use super::fixture::Scenario;
use super::ingress::Response;
use super::mutants::Mutant;
use super::properties::{check_state, check_step};
use super::property::{Properties, Property};
use super::step::{Budgets, Consumer, Crash, Keep, PostFault, Step};
use super::world::{transition, Decision, Read, Setup, StepOutcome, World};
use crate::harness::Protocol;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The model's state: the pipeline's world, the requests not yet sent, the budgets left,
/// and the first property a step broke.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The pipeline (its answer history is dropped after each step: the properties read
    /// the step's outcome, and history would make every path a new state).
    pub world: World,
    /// Requests the sender has not sent yet.
    pub unsent: BTreeSet<u32>,
    /// Faults left.
    pub budgets: Budgets,
    /// The operator steps taken so far (bit `i`: [`FactsModel::operator_steps`]`[i]`).
    pub operator_done: u16,
    /// The first property broken on the way here.
    pub violation: Option<Property>,
    /// A step on the way here panicked (the harness's `panic`).
    pub panicked: bool,
}

/// Verdicts, answers and poison handling met on explored transitions.
#[derive(Debug, Default)]
pub struct Coverage {
    counts: [AtomicU64; COVERAGE.len()],
}

const COVERAGE: [&str; 17] = [
    "accepted",
    "duplicate",
    "conflict",
    "late_mismatch",
    "quarantined",
    "after_termination",
    "http-202",
    "http-400",
    "retry",
    "dead_letter",
    "claimed",
    "upgraded",
    "registered",
    "released",
    "terminated",
    "resolved",
    "expired",
];

impl Coverage {
    fn bump(&self, name: &str) {
        let index = COVERAGE.iter().position(|known| *known == name);
        self.counts[index.expect("a coverage name")].fetch_add(1, Ordering::Relaxed);
    }

    fn note(&self, outcome: &StepOutcome) {
        match outcome {
            StepOutcome::Posted { response, .. } => match response {
                Response::Accepted | Response::Quarantined => self.bump("http-202"),
                Response::Rejected(_) => self.bump("http-400"),
                Response::Unavailable => {}
            },
            StepOutcome::Registered { released, .. } => {
                self.bump("registered");
                for (_, verdict) in released {
                    self.bump("released");
                    self.bump(verdict.as_str());
                }
            }
            StepOutcome::Terminated { .. } => self.bump("terminated"),
            StepOutcome::Resolved { .. } => self.bump("resolved"),
            StepOutcome::Expired { entries } if !entries.is_empty() => self.bump("expired"),
            StepOutcome::Handled(handled) => {
                if matches!(handled.read, Read::Claimed { .. }) {
                    self.bump("claimed");
                }
                match &handled.decision {
                    Some(Decision::Verdict(verdict)) => self.bump(verdict.as_str()),
                    Some(Decision::Retry { .. }) => self.bump("retry"),
                    Some(Decision::DeadLetter { .. }) => self.bump("dead_letter"),
                    Some(Decision::Dropped { .. }) | None => {}
                }
            }
            StepOutcome::Upgraded { .. } => self.bump("upgraded"),
            _ => {}
        }
    }

    fn counts(&self) -> Vec<(&'static str, u64)> {
        COVERAGE
            .iter()
            .zip(&self.counts)
            .map(|(name, count)| (*name, count.load(Ordering::Relaxed)))
            .collect()
    }
}

/// A facts fixture's fault space under one policy.
#[derive(Clone, Debug)]
pub struct FactsModel {
    /// The fixture.
    pub scenario: Arc<Scenario>,
    /// Its setup with the policy in force.
    pub setup: Arc<Setup<Option<Mutant>>>,
    /// The consumers.
    pub consumers: Vec<Consumer>,
    /// Budgets at the start.
    pub budgets: Budgets,
    /// The upgrade a step may make: the first application to its next material version.
    pub upgrade: Option<(AppKey, u64)>,
    /// The fixture's operator steps (register, terminate, resolve, expire, upgrade), each
    /// of which may happen once, at any point, within the `operator` budget.
    pub operator_steps: Vec<Step>,
    /// The request whose envelope an undecidable entry carries.
    pub undecidable: Option<u32>,
    /// The properties checked.
    pub checked: Properties,
    /// Coverage, shared by the checker's threads.
    pub coverage: Arc<Coverage>,
}

fn consumer_steps(budgets: Budgets, make: impl Fn(Option<Crash>) -> Step, steps: &mut Vec<Step>) {
    steps.push(make(None));
    if budgets.crashes_before_commit > 0 {
        steps.push(make(Some(Crash::BeforeCommit)));
    }
    if budgets.crashes_after_commit > 0 {
        steps.push(make(Some(Crash::AfterCommit)));
    }
}

impl Protocol for FactsModel {
    type World = State;
    type Step = Step;

    const PROPERTIES: &'static [&'static str] = &Property::NAMES;

    fn init(&self) -> State {
        State {
            world: World::initial(self.scenario.applications.clone()),
            unsent: self
                .setup
                .requests
                .values()
                .filter(|request| request.resends.is_none())
                .map(|request| request.number)
                .collect(),
            budgets: self.budgets,
            operator_done: 0,
            violation: None,
            panicked: false,
        }
    }

    fn steps(&self, state: &State, steps: &mut Vec<Step>) {
        let budgets = state.budgets;
        let mut sendable: BTreeSet<u32> = state.unsent.union(&state.world.owed).copied().collect();
        // In place of a resend it owes, the sender may send a re-signed retry.
        sendable.extend(
            self.setup
                .requests
                .values()
                .filter(|request| {
                    request
                        .resends
                        .is_some_and(|n| state.world.owed.contains(&n))
                })
                .map(|request| request.number),
        );
        for request in sendable {
            steps.push(Step::Post {
                request,
                fault: None,
            });
            if budgets.lost_responses > 0 {
                steps.push(Step::Post {
                    request,
                    fault: Some(PostFault::ResponseLost),
                });
            }
        }
        let world = &state.world;
        for consumer in &self.consumers {
            if world.is_down(consumer) {
                let consumer = consumer.clone();
                steps.push(Step::Recover {
                    consumer,
                    crash: None,
                });
                continue;
            }
            if world.has_work(&self.setup, consumer) {
                let make = |crash| Step::Consume {
                    consumer: consumer.clone(),
                    crash,
                };
                consumer_steps(budgets, make, steps);
            }
            let elsewhere = world
                .pending
                .values()
                .any(|pending| pending.consumer != *consumer);
            if budgets.takeovers > 0 && elsewhere {
                let make = |crash| Step::Claim {
                    consumer: consumer.clone(),
                    crash,
                };
                consumer_steps(budgets, make, steps);
            }
        }
        if let (Some((application, version)), true) = (&self.upgrade, budgets.upgrades > 0) {
            steps.push(Step::Upgrade {
                application: application.clone(),
                material_version: *version,
            });
        }
        if budgets.poison > 0 {
            steps.push(Step::Poison);
        }
        if let (Some(request), true) = (self.undecidable, budgets.undecidable > 0) {
            steps.push(Step::Undecidable { request });
        }
        if budgets.operator > 0 {
            for (index, step) in self.operator_steps.iter().enumerate() {
                if state.operator_done & (1 << index) == 0 {
                    steps.push(step.clone());
                }
            }
        }
    }

    fn next(&self, state: &State, step: &Step) -> Option<State> {
        let mut next = state.clone();
        let outcome = transition(&self.setup, &mut next.world, step);
        self.coverage.note(&outcome);
        let spend = |budget: &mut u8| *budget = budget.saturating_sub(1);
        match step {
            Step::Post { request, fault } => {
                next.unsent.remove(request);
                if *fault == Some(PostFault::ResponseLost) {
                    spend(&mut next.budgets.lost_responses);
                }
            }
            Step::Consume { crash, .. }
            | Step::Recover { crash, .. }
            | Step::Claim { crash, .. } => {
                if matches!(step, Step::Claim { .. }) {
                    spend(&mut next.budgets.takeovers);
                }
                match crash {
                    Some(Crash::BeforeCommit) => spend(&mut next.budgets.crashes_before_commit),
                    Some(Crash::AfterCommit) => spend(&mut next.budgets.crashes_after_commit),
                    None => {}
                }
            }
            Step::Upgrade { .. } if self.upgrade.is_some() && !self.is_operator_step(step) => {
                spend(&mut next.budgets.upgrades)
            }
            Step::Poison => spend(&mut next.budgets.poison),
            Step::Undecidable { .. } => spend(&mut next.budgets.undecidable),
            operator => {
                if let Some(index) = self.operator_steps.iter().position(|s| s == operator) {
                    next.operator_done |= 1 << index;
                    spend(&mut next.budgets.operator);
                }
            }
        }
        let checked = self.checked;
        if next.violation.is_none() {
            let config = &self.setup.config;
            next.violation = check_step(checked, config, &state.world, &next.world, &outcome);
        }
        next.world.responses.clear();
        if next.violation.is_none() {
            let mut after = Vec::new();
            self.steps(&next, &mut after);
            let scenario = &self.scenario;
            next.violation = check_state(
                checked,
                &next.world,
                after.is_empty(),
                scenario.expect.as_ref(),
                self.budgets.upgrades == 0 && self.budgets.operator == 0,
                &|key| scenario.label(key),
            );
        }
        Some(next)
    }

    fn violation(state: &State) -> Option<usize> {
        if state.panicked {
            return Some(Property::ALL.len());
        }
        state.violation.map(|property| property as usize)
    }

    fn panicked(&self, state: &State) -> State {
        State {
            panicked: true,
            ..state.clone()
        }
    }

    fn checks(&self, index: usize) -> bool {
        self.checked.contains(Property::ALL[index])
    }

    fn only(&self, index: usize) -> FactsModel {
        FactsModel {
            checked: Property::ALL
                .get(index)
                .map_or(Properties::NONE, |&property| Properties::only(property)),
            coverage: Arc::default(),
            ..self.clone()
        }
    }

    fn describe_step(&self, step: &Step) -> String {
        describe_step(step)
    }

    fn describe_world(&self, state: &State) -> String {
        describe_world(&self.scenario, state)
    }

    fn coverage(&self) -> Vec<(&'static str, u64)> {
        self.coverage.counts()
    }
}

impl FactsModel {
    /// Whether `step` is one of the fixture's operator steps.
    fn is_operator_step(&self, step: &Step) -> bool {
        self.operator_steps.contains(step)
    }
}

/// A step in domain terms.
pub fn describe_step(step: &Step) -> String {
    let crash = |crash: &Option<Crash>| match crash {
        None => String::new(),
        Some(Crash::BeforeCommit) => ", crashes before the inbox commit".into(),
        Some(Crash::AfterCommit) => ", crashes after the commit, before XACK".into(),
    };
    match step {
        Step::Post { request, fault } => match fault {
            None => format!("post request #{request}"),
            Some(PostFault::ResponseLost) => {
                format!("post request #{request}, the answer is lost (the sender will resend)")
            }
            Some(PostFault::StreamUnavailable) => {
                format!("post request #{request}, the stream cannot be written")
            }
        },
        Step::Consume { consumer, crash: c } => format!("{consumer} consumes{}", crash(c)),
        Step::Recover { consumer, crash: c } => {
            format!(
                "{consumer} restarts and re-reads its pending entry{}",
                crash(c)
            )
        }
        Step::Claim { consumer, crash: c } => {
            format!(
                "{consumer} takes over an entry pending elsewhere{}",
                crash(c)
            )
        }
        Step::Upgrade {
            application,
            material_version,
        } => format!("{application} upgraded to material version {material_version}"),
        Step::Poison => "an unparseable entry is written into the stream".into(),
        Step::Undecidable { request } => {
            format!("request #{request}'s envelope enters the stream as an entry that cannot be decided")
        }
        Step::Register {
            application,
            business_key,
            material_version,
        } => format!(
            "an operator registers {application} ({business_key}, material version {material_version})"
        ),
        Step::Terminate {
            application,
            reason,
            ..
        } => format!("an operator terminates {application} ({reason})"),
        Step::Resolve { fact, keep, reason } => format!(
            "a person resolves the conflict on {}: keep {} ({reason})",
            crate::facts::inbox::describe(fact),
            match keep {
                Keep::First => "the first".to_owned(),
                Keep::Variant => "the variant".to_owned(),
                Keep::VariantOf(n) => format!("the variant of request #{n}"),
            }
        ),
        Step::ExpireQuarantine { .. } => "the quarantine is swept".into(),
    }
}

/// A state in domain terms, for Explorer.
pub fn describe_world(scenario: &Scenario, state: &State) -> String {
    use std::fmt::Write;
    let world = &state.world;
    let mut out = String::new();
    if let Some(property) = state.violation {
        let _ = writeln!(out, "VIOLATED: {property}");
    }
    for (key, application) in world.applications.iter() {
        let _ = writeln!(
            out,
            "application {} (material v{}): READY {}",
            scenario.label(key),
            application.material_version,
            world.inbox.marked_ready(key)
        );
    }
    let facts: Vec<String> = world
        .inbox
        .facts()
        .map(|fact| format!("{}/{}", fact.source().as_str(), fact.event_id()))
        .collect();
    let _ = writeln!(out, "facts: {}", listed(&facts, ", "));
    let stream: Vec<String> = world
        .stream
        .iter()
        .map(|entry| {
            let from = entry
                .request
                .map_or_else(|| "poison".to_owned(), |request| format!("#{request}"));
            let status = if world.committed.contains(&entry.id) {
                "committed"
            } else if world.dead_letter.contains_key(&entry.id) {
                "dead-lettered"
            } else {
                "open"
            };
            format!("{} from {from} ({status})", entry.id)
        })
        .collect();
    let _ = writeln!(out, "stream: {}", listed(&stream, ", "));
    let pending: Vec<String> = world
        .pending
        .iter()
        .map(|(id, pending)| format!("{id} at {} x{}", pending.consumer, pending.deliveries))
        .collect();
    let _ = writeln!(out, "pending: {}", listed(&pending, ", "));
    let down: Vec<String> = world.in_hand.keys().map(ToString::to_string).collect();
    let _ = writeln!(out, "consumers down: {}", listed(&down, ", "));
    let unsent: Vec<String> = state.unsent.iter().map(|r| format!("#{r}")).collect();
    let owed: Vec<String> = world.owed.iter().map(|r| format!("#{r}")).collect();
    let _ = writeln!(
        out,
        "sender: not yet sent {}; will resend {}",
        listed(&unsent, " "),
        listed(&owed, " ")
    );
    let b = state.budgets;
    let _ = writeln!(
        out,
        "faults left: {} lost answers, {}+{} crashes, {} takeovers, {} poison, {} undecidable, {} upgrades, {} operator steps",
        b.lost_responses,
        b.crashes_before_commit,
        b.crashes_after_commit,
        b.takeovers,
        b.poison,
        b.undecidable,
        b.upgrades,
        b.operator
    );
    out
}

/// `items` joined by `separator`, or `none`.
fn listed(items: &[String], separator: &str) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(separator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::inbox::Verdict;

    #[test]
    fn verdict_names_are_coverage_names() {
        for verdict in Verdict::ALL {
            assert!(COVERAGE.contains(&verdict.as_str()));
        }
    }
}
