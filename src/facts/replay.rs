//! Facts replay: walks a scenario's steps through [`transition`] with the properties
//! checked on every step, and reports every step and the end state, compared with the
//! fixture's `expect` (the [`Report`]; serialised, it is the JSON report; its table for
//! people is [`super::table`]).

use super::application::AppKey;
use super::envelope::Source;
use super::fixture::{sort_facts, Scenario, DEFAULT_CONSUMER};
use super::inbox::{describe, Parking, PoisonCategory};
use super::ingress::Response;
use super::properties::{check_state, check_step};
use super::property::{Properties, Property};
use super::step::{Consumer, Crash, Keep, PostFault, Step};
use super::world::{transition, Decision, EntryId, Read, StepOutcome, World};
use crate::harness::InputError;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One step of a replay and the world right after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepReport {
    /// 1-based position in the run.
    pub index: usize,
    /// The step.
    pub step: Step,
    /// The step in words.
    pub step_label: String,
    /// The request posted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<u32>,
    /// Its answer, `[status, reason]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<Response>,
    /// Why ingress refused it, for people.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The id of the key whose signature matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The stream entry appended or handled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryId>,
    /// The consumer that acted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer: Option<Consumer>,
    /// How it got the entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read: Option<Read>,
    /// The entry's delivery count, this delivery included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deliveries: Option<u32>,
    /// Where the consumer crashed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash: Option<Crash>,
    /// What went wrong with a post.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_fault: Option<PostFault>,
    /// The consumer's decision (inbox verdict, retry, dead letter).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// Whether the entry was acknowledged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acknowledged: Option<bool>,
    /// Steps that did nothing, upgrades: what happened, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Entries pending after the step.
    pub pending: usize,
    /// Facts held after the step.
    pub facts: usize,
    /// Applications READY after the step (their labels).
    pub ready: Vec<String>,
}

/// A dead-lettered entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeadLetterReport {
    /// The original entry id.
    pub entry: EntryId,
    /// `unparseable` or `undecidable`.
    pub category: PoisonCategory,
    /// Its delivery count when it was dead-lettered.
    pub deliveries: u32,
    /// Its identity `tenant/source/event_id`, when it parsed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// Why it could not be processed.
    pub reason: String,
}

/// An entry kept without a fact identity, at the end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ParkedReport {
    /// The stream entry.
    pub entry: EntryId,
    /// `quarantined`, `quarantine_expired`, `late_mismatch` or `after_termination`.
    pub state: &'static str,
    /// Its identity `tenant/source/event_id`.
    pub identity: String,
    /// The application it names (label).
    pub application: String,
}

/// One change of an application's READY answer, and the step that caused it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReadyChange {
    /// The 1-based step.
    pub step: usize,
    /// The application (label).
    pub application: String,
    /// READY after the step.
    pub ready: bool,
    /// The stream entry whose decision changed it, if it was a consumer's step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryId>,
}

/// The end of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EndReport {
    /// Request number -> its last answer, `[status, reason]`.
    pub responses: BTreeMap<u32, Response>,
    /// The facts held, sorted `[source, event_id]` pairs.
    pub facts: Vec<(Source, String)>,
    /// Deliveries decided `duplicate`.
    pub duplicates: u32,
    /// Deliveries decided `conflict`.
    pub conflicts: u32,
    /// Deliveries decided `late_mismatch`.
    pub late_mismatches: u32,
    /// Applications with an open conflict (labels).
    pub open_conflicts: Vec<String>,
    /// Entries kept without a fact identity (quarantine, late mismatch, after termination).
    pub parked: Vec<ParkedReport>,
    /// Every change of READY, with its cause.
    pub ready_history: Vec<ReadyChange>,
    /// Application label -> READY.
    pub ready: BTreeMap<String, bool>,
    /// Entries still pending.
    pub pending: usize,
    /// The dead-letter stream.
    pub dead_letter: Vec<DeadLetterReport>,
    /// Requests the sender still has to post again.
    pub owed: Vec<u32>,
    /// Accepted entries (202) with neither a committed verdict nor a dead-letter copy.
    pub unsettled: Vec<EntryId>,
}

/// A replay: every step, the end, and how the end compares with `expect`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The fixture file.
    pub fixture: String,
    /// Its name.
    pub name: String,
    /// Always `facts`.
    pub protocol: &'static str,
    /// The policy replayed: `spec` or a facts mutant's name.
    pub policy: &'static str,
    /// Whether the fixture's own schedule was walked (else the default order).
    pub scheduled: bool,
    /// The steps.
    pub steps: Vec<StepReport>,
    /// The end: `responses`, `facts`, `duplicates`, `ready`, `pending`, `dead_letter`, ...
    /// (flattened into the report's top level in JSON).
    #[serde(flatten)]
    pub end: EndReport,
    /// Whether the fixture has an `expect`.
    pub expect_checked: bool,
    /// Where the end differs from `expect` (empty when it holds).
    pub differences: Vec<String>,
    /// READY marks that disagree with the readiness rule applied to the inbox at the end.
    pub stale_ready: Vec<String>,
    /// The first property a step broke (the end-of-run ones are judged when the run ends
    /// with nothing left to do).
    pub violations: Vec<ViolationReport>,
}

/// A property broken on the way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ViolationReport {
    /// The property.
    pub property: String,
    /// The 1-based step that broke it.
    pub step: usize,
}

impl Report {
    /// Whether the run is clean: no property broken, `expect` (if any) holds and no READY
    /// mark is stale.
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.differences.is_empty() && self.stale_ready.is_empty()
    }
}

/// Loads a facts fixture and replays it.
pub fn replay_file(path: &Path) -> Result<Report, InputError> {
    Ok(replay(&Scenario::load(path)?))
}

/// Replays a scenario: its schedule, or the default order (every request posted in file
/// order, then `c1` consumes until the stream is drained).
pub fn replay(scenario: &Scenario) -> Report {
    let mut world = World::initial(scenario.applications.clone());
    // The first property a step broke, and the step (1-based).
    let mut broken: Option<(Property, usize)> = None;
    let mut steps = Vec::new();
    let mut history = Vec::new();
    let mut walk = |world: &mut World, step: &Step, steps: &mut Vec<StepReport>| {
        walk(scenario, world, step, steps, &mut broken, &mut history);
    };
    match &scenario.schedule {
        Some(schedule) => {
            for step in schedule {
                walk(&mut world, step, &mut steps);
            }
        }
        None => {
            for &request in scenario.setup.requests.keys() {
                let step = Step::Post {
                    request,
                    fault: None,
                };
                walk(&mut world, &step, &mut steps);
            }
            let consume = Step::Consume {
                consumer: Consumer(DEFAULT_CONSUMER.to_owned()),
                crash: None,
            };
            // Each consume acknowledges an entry or raises a delivery count towards the
            // dead-letter limit, so this ends; the bound only guards against a bug.
            let bound = world.stream.len() * scenario.setup.max_deliveries as usize + 1;
            for _ in 0..bound {
                if world.is_drained() {
                    break;
                }
                walk(&mut world, &consume, &mut steps);
            }
        }
    }
    // The end is terminal when the model, with no faults left, could take no further step:
    // every request sent, no answer owed, no consumer down, nothing a consumer would still
    // read. Then the end-of-run properties are judged too.
    let terminal = nothing_left(scenario, &world, &steps);
    if broken.is_none() && terminal {
        broken = check_state(Properties::ALL, &world, true, None, false, &|key| {
            scenario.label(key)
        })
        .map(|property| (property, steps.len()));
    }
    let violations = broken
        .map(|(property, step)| ViolationReport {
            property: property.name().to_owned(),
            step,
        })
        .into_iter()
        .collect();
    let mut end = end_report(scenario, &world);
    end.ready_history = history;
    let differences = scenario
        .expect
        .as_ref()
        .map(|expect| compare(expect, &end))
        .unwrap_or_default();
    let stale_ready = world
        .applications
        .iter()
        .map(|(key, _)| key)
        .filter(|key| {
            world.inbox.marked_ready(key)
                != super::inbox::ready(&world.inbox, &world.applications, key)
        })
        .map(|key| scenario.label(key))
        .collect();
    Report {
        fixture: scenario.file.display().to_string(),
        name: scenario.name.clone(),
        protocol: "facts",
        policy: scenario.setup.mutant.map_or("spec", |mutant| mutant.name()),
        scheduled: scenario.schedule.is_some(),
        steps,
        end,
        expect_checked: scenario.expect.is_some(),
        differences,
        stale_ready,
        violations,
    }
}

/// Whether nothing is left to do at the end of a replay of `scenario` (its setup's policy
/// included): the model, with the consumers the replay used (`c1` when none) and no fault
/// budget, has no step from `world` ([`World::is_terminal`]). Requests the replay never
/// posted count as unsent.
fn nothing_left(scenario: &Scenario, world: &World, steps: &[StepReport]) -> bool {
    let mut consumers: Vec<Consumer> = steps
        .iter()
        .filter_map(|step| match &step.step {
            Step::Consume { consumer, .. }
            | Step::Recover { consumer, .. }
            | Step::Claim { consumer, .. } => Some(consumer.clone()),
            _ => None,
        })
        .collect();
    consumers.sort();
    consumers.dedup();
    if consumers.is_empty() {
        consumers.push(Consumer(DEFAULT_CONSUMER.to_owned()));
    }
    let posted: BTreeSet<u32> = steps
        .iter()
        .filter_map(|step| match step.step {
            Step::Post { request, .. } => Some(request),
            _ => None,
        })
        .collect();
    let unsent: BTreeSet<u32> = scenario
        .setup
        .requests
        .keys()
        .filter(|request| !posted.contains(request))
        .copied()
        .collect();
    world.is_terminal(&scenario.setup, &unsent, &consumers)
}

fn walk(
    scenario: &Scenario,
    world: &mut World,
    step: &Step,
    steps: &mut Vec<StepReport>,
    broken: &mut Option<(Property, usize)>,
    history: &mut Vec<ReadyChange>,
) {
    let before = world.clone();
    let outcome = transition(&scenario.setup, world, step);
    let cause = match &outcome {
        StepOutcome::Handled(handled) => Some(handled.entry),
        _ => None,
    };
    for (key, _) in world.applications.iter() {
        let now = world.inbox.marked_ready(key);
        if before.inbox.marked_ready(key) != now {
            history.push(ReadyChange {
                step: steps.len() + 1,
                application: scenario.label(key),
                ready: now,
                entry: cause,
            });
        }
    }
    if broken.is_none() {
        let config = &scenario.setup.config;
        let found = check_step(Properties::ALL, config, &before, world, &outcome).or_else(|| {
            check_state(Properties::ALL, world, false, None, false, &|key| {
                scenario.label(key)
            })
        });
        *broken = found.map(|property| (property, steps.len() + 1));
    }
    let mut report = StepReport {
        index: steps.len() + 1,
        step: step.clone(),
        step_label: step_text(scenario, step),
        request: None,
        response: None,
        detail: None,
        key: None,
        entry: None,
        consumer: None,
        read: None,
        deliveries: None,
        crash: None,
        post_fault: None,
        decision: None,
        acknowledged: None,
        note: None,
        pending: world.pending.len(),
        facts: world.inbox.fact_count(),
        ready: ready_labels(scenario, world),
    };
    match outcome {
        StepOutcome::Posted {
            request,
            response,
            detail,
            entry,
            fault,
            key,
            tenant: _,
        } => {
            report.request = Some(request);
            report.response = Some(response);
            report.detail = detail;
            report.key = key;
            report.entry = entry;
            report.post_fault = fault;
        }
        StepOutcome::Handled(handled) => {
            report.consumer = Some(handled.consumer);
            report.read = Some(handled.read);
            report.entry = Some(handled.entry);
            report.deliveries = Some(handled.deliveries);
            report.crash = handled.crash;
            report.decision = handled.decision;
            report.acknowledged = Some(handled.acknowledged);
        }
        StepOutcome::Idle(consumer) => {
            report.consumer = Some(consumer);
            report.note = Some("nothing to read".into());
        }
        StepOutcome::ConsumerDown(consumer) => {
            report.consumer = Some(consumer);
            report.note = Some("consumer is down: recover it first".into());
        }
        StepOutcome::Upgraded {
            application: _,
            from,
            to,
        } => {
            report.note = Some(format!("material v{from} -> v{to}"));
        }
        StepOutcome::UpgradeRefused { application, why } => {
            report.note = Some(format!(
                "upgrade of {} refused: {why}",
                scenario.label(&application)
            ));
        }
        StepOutcome::Poisoned(entry) => {
            report.entry = Some(entry);
            report.note = Some(match step {
                Step::Undecidable { .. } => "undecidable entry".into(),
                _ => "unparseable entry".into(),
            });
        }
        other => report.note = Some(operator_note(scenario, &other)),
    }
    steps.push(report);
}

/// What an operator step did, in words.
fn operator_note(scenario: &Scenario, outcome: &StepOutcome) -> String {
    match outcome {
        StepOutcome::Registered {
            application,
            registered,
            released,
        } => {
            let decided: Vec<String> = released
                .iter()
                .map(|(entry, verdict)| format!("entry {entry} {}", verdict.as_str()))
                .collect();
            let what = match registered {
                super::application::Registered::New => "registered".to_owned(),
                super::application::Registered::Unchanged => "registered again, unchanged".into(),
                super::application::Registered::Upgraded { from } => {
                    format!("registered again, material v{from} moved forward")
                }
            };
            let label = scenario.label(application);
            if decided.is_empty() {
                format!("{label} {what}")
            } else {
                format!(
                    "{label} {what}; quarantine released: {}",
                    decided.join(", ")
                )
            }
        }
        StepOutcome::Terminated { application } => {
            format!("{} terminated", scenario.label(application))
        }
        StepOutcome::Resolved { fact, kept } => {
            let kept = match kept {
                super::inbox::Kept::First => "the fact as it stood",
                super::inbox::Kept::Variant => "the variant",
            };
            format!("conflict on {} resolved: kept {kept}", describe(fact))
        }
        StepOutcome::Expired { entries } => format!("quarantine expired: {entries:?}"),
        StepOutcome::OperatorRefused { step, why } => format!("{step} refused: {why}"),
        _ => String::new(),
    }
}

fn ready_labels(scenario: &Scenario, world: &World) -> Vec<String> {
    world
        .applications
        .iter()
        .map(|(key, _)| key)
        .filter(|key| world.inbox.marked_ready(key))
        .map(|key| scenario.label(key))
        .collect()
}

fn end_report(scenario: &Scenario, world: &World) -> EndReport {
    let responses = world
        .responses
        .iter()
        .map(|&(request, response)| (request, response))
        .collect();
    let mut facts: Vec<(Source, String)> = world
        .inbox
        .facts()
        .map(|fact| (fact.source(), fact.event_id().to_owned()))
        .collect();
    sort_facts(&mut facts);
    let counters = world.inbox.counters();
    let ready = world
        .applications
        .iter()
        .map(|(key, _)| (scenario.label(key), world.inbox.marked_ready(key)))
        .collect();
    let unsettled = world
        .stream
        .iter()
        .filter(|entry| entry.request.is_some())
        .map(|entry| entry.id)
        .filter(|id| !world.committed.contains(id) && !world.dead_letter.contains_key(id))
        .collect();
    let parked = world
        .inbox
        .parked()
        .iter()
        .map(|(&entry, parked)| ParkedReport {
            entry,
            state: parked.why.as_str(),
            identity: describe(&parked.envelope.fact_id()),
            application: scenario.label(&AppKey::of(&parked.envelope)),
        })
        .collect();
    EndReport {
        responses,
        facts,
        duplicates: counters.duplicates,
        conflicts: counters.conflicts,
        late_mismatches: counters.late_mismatches,
        open_conflicts: world
            .inbox
            .open_conflicts()
            .iter()
            .map(|key: &AppKey| scenario.label(key))
            .collect(),
        parked,
        ready_history: Vec::new(),
        ready,
        pending: world.pending.len(),
        dead_letter: world
            .dead_letter
            .iter()
            .map(|(&entry, letter)| DeadLetterReport {
                entry,
                category: letter.category,
                deliveries: letter.deliveries,
                identity: letter.identity.as_ref().map(describe),
                reason: letter.reason.clone(),
            })
            .collect(),
        owed: world.owed.iter().copied().collect(),
        unsettled,
    }
}

/// Where an end report differs from a fixture's `expect`, one line each (empty: it holds).
pub fn compare(expect: &super::fixture::Expect, end: &EndReport) -> Vec<String> {
    let mut differences = Vec::new();
    let answer = |response: Option<&Response>| match response {
        Some(response) => format!("{} {}", response.status(), response.reason()),
        None => "no answer (never posted)".to_owned(),
    };
    if let Some(responses) = &expect.responses {
        for (request, expected) in responses {
            let got = end.responses.get(request);
            if got != Some(expected) {
                differences.push(format!(
                    "request {request}: expected {}, got {}",
                    answer(Some(expected)),
                    answer(got)
                ));
            }
        }
    }
    let pairs = |facts: &[(Source, String)]| {
        let names: Vec<String> = facts
            .iter()
            .map(|(source, id)| format!("{source}/{id}"))
            .collect();
        format!("[{}]", names.join(", "))
    };
    if let Some(facts) = &expect.facts {
        if *facts != end.facts {
            differences.push(format!(
                "facts: expected {}, got {}",
                pairs(facts),
                pairs(&end.facts)
            ));
        }
    }
    let counts = [
        ("duplicates", expect.duplicates, end.duplicates),
        ("conflicts", expect.conflicts, end.conflicts),
        (
            "late_mismatches",
            expect.late_mismatches,
            end.late_mismatches,
        ),
    ];
    for (name, expected, got) in counts {
        if let Some(expected) = expected {
            if expected != got {
                differences.push(format!("{name}: expected {expected}, got {got}"));
            }
        }
    }
    if let Some(ready) = &expect.ready {
        for (label, expected) in ready {
            let got = end.ready.get(label).copied().unwrap_or(false);
            if *expected != got {
                differences.push(format!("ready {label}: expected {expected}, got {got}"));
            }
        }
    }
    if let Some(pending) = expect.pending {
        if pending != end.pending {
            differences.push(format!("pending: expected {pending}, got {}", end.pending));
        }
    }
    let parked = |state: Parking| {
        end.parked
            .iter()
            .filter(|p| p.state == state.as_str())
            .count()
    };
    let kept = [
        (
            "quarantined",
            expect.quarantined,
            parked(Parking::Quarantined),
        ),
        (
            "quarantine_expired",
            expect.quarantine_expired,
            parked(Parking::QuarantineExpired),
        ),
        (
            "after_termination",
            expect.after_termination,
            parked(Parking::AfterTermination),
        ),
    ];
    for (name, expected, got) in kept {
        if let Some(expected) = expected {
            if expected != got {
                differences.push(format!("{name}: expected {expected} entries, got {got}"));
            }
        }
    }
    if let Some(open) = &expect.open_conflicts {
        if *open != end.open_conflicts {
            differences.push(format!(
                "open_conflicts: expected {open:?}, got {:?}",
                end.open_conflicts
            ));
        }
    }
    if let Some(dead_letter) = &expect.dead_letter {
        let got: Vec<EntryId> = end.dead_letter.iter().map(|dead| dead.entry).collect();
        if *dead_letter != got {
            differences.push(format!(
                "dead_letter: expected entries {dead_letter:?}, got {got:?}"
            ));
        }
    }
    differences
}

/// A long application label (a UUID) cut to its first group, for the step column.
fn short(label: &str) -> String {
    if label.chars().count() > 12 {
        label.chars().take(8).collect::<String>() + "~"
    } else {
        label.to_owned()
    }
}

/// A step in the replay table's words.
pub fn step_text(scenario: &Scenario, step: &Step) -> String {
    let crash_text = |crash: &Option<Crash>| match crash {
        None => String::new(),
        Some(Crash::BeforeCommit) => ", crash pre-commit".into(),
        Some(Crash::AfterCommit) => ", crash post-commit".into(),
    };
    match step {
        Step::Post { request, fault } => match fault {
            None => format!("post {request}"),
            Some(PostFault::ResponseLost) => format!("post {request}, answer lost"),
            Some(PostFault::StreamUnavailable) => format!("post {request}, stream down"),
        },
        Step::Consume { consumer, crash } => format!("consume {consumer}{}", crash_text(crash)),
        Step::Recover { consumer, crash } => format!("recover {consumer}{}", crash_text(crash)),
        Step::Claim { consumer, crash } => format!("claim {consumer}{}", crash_text(crash)),
        Step::Upgrade {
            application,
            material_version,
        } => format!(
            "upgrade {} to v{material_version}",
            short(&scenario.label(application))
        ),
        Step::Poison => "poison".into(),
        Step::Undecidable { request } => format!("undecidable {request}"),
        Step::Register {
            application,
            material_version,
            ..
        } => format!(
            "register {} v{material_version}",
            short(&scenario.label(application))
        ),
        Step::Terminate { application, .. } => {
            format!("terminate {}", short(&scenario.label(application)))
        }
        Step::Resolve { fact, keep, .. } => format!(
            "resolve {}/{}: {}",
            fact.source,
            fact.event_id,
            match keep {
                Keep::First => "first".to_owned(),
                Keep::Variant => "variant".to_owned(),
                Keep::VariantOf(n) => format!("variant of {n}"),
            }
        ),
        Step::ExpireQuarantine { .. } => "expire quarantine".into(),
    }
}
