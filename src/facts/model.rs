//! The facts pipeline as a [`Protocol`] the harness checks: every order of the requests,
//! lost HTTP responses (the sender posts again: a second stream entry), consumers that
//! crash before the inbox commit or between commit and `XACK`, recovery of a consumer's own
//! pending entries, takeover by another consumer, poison entries and a material upgrade at
//! any point, each within its budget, through the same [`transition`] replay uses.

use super::application::AppKey;
use super::fixture::{RawFixture, RawStep, RawUpgrade, Scenario};
use super::ingress::Response;
use super::mutants::Mutant;
use super::properties::{check_state, check_step};
use super::property::{Properties, Property};
use super::step::{Budgets, Consumer, Crash, PostFault, Step};
use super::world::{transition, Decision, Read, Setup, StepOutcome, World};
use crate::harness::check::{check_parts_with, Mode, Subject};
use crate::harness::explore::{Engine, Settings, Strategy};
use crate::harness::model_file::Overrides;
use crate::harness::report::{ModelReport, TraceReport};
use crate::harness::{InputError, Protocol};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn one() -> usize {
    1
}

fn one_consumer() -> u8 {
    1
}

fn spec() -> String {
    "spec".into()
}

/// A facts model file as written.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    /// What the scenario checks.
    #[serde(default)]
    pub description: Option<String>,
    /// The facts fixture, relative to the model file.
    pub fixture: String,
    /// Consumers in the group (`c1`, `c2`, ...; 1 to 3).
    #[serde(default = "one_consumer")]
    pub consumers: u8,
    /// HTTP answers that may be lost, in all (each makes the sender post again).
    #[serde(default)]
    pub lost_responses: u8,
    /// Consumer crashes after reading, before the inbox commit.
    #[serde(default)]
    pub crashes_before_commit: u8,
    /// Consumer crashes after the inbox commit, before `XACK`.
    #[serde(default)]
    pub crashes_after_commit: u8,
    /// Takeovers (`XAUTOCLAIM`) of an entry pending in another consumer.
    #[serde(default)]
    pub takeovers: u8,
    /// Unparseable entries written straight into the stream.
    #[serde(default)]
    pub poison: u8,
    /// Whether the first application's material may be upgraded (to the next version) at
    /// any point.
    #[serde(default)]
    pub upgrade: bool,
    /// `spec` or a facts mutant's name.
    #[serde(default = "spec")]
    pub policy: String,
    /// `bfs` or `dfs`.
    #[serde(default)]
    pub strategy: Strategy,
    /// Checker threads.
    #[serde(default = "one")]
    pub threads: usize,
    /// Stop after about this many states (the verdict is then `incomplete`).
    #[serde(default)]
    pub state_limit: Option<usize>,
    /// The properties to check (all six when absent).
    #[serde(default)]
    pub properties: Option<Vec<String>>,
    /// `pass`, or the property that must be violated.
    pub expect: String,
}

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
    /// The first property broken on the way here.
    pub violation: Option<Property>,
}

/// Verdicts, answers and poison handling met on explored transitions.
#[derive(Debug, Default)]
pub struct Coverage {
    counts: [AtomicU64; COVERAGE.len()],
}

const COVERAGE: [&str; 10] = [
    "accepted",
    "duplicate",
    "conflict",
    "late_mismatch",
    "http-202",
    "http-400",
    "retry",
    "dead_letter",
    "claimed",
    "upgraded",
];

impl Coverage {
    fn bump(&self, name: &str) {
        let index = COVERAGE.iter().position(|known| *known == name);
        self.counts[index.expect("a coverage name")].fetch_add(1, Ordering::Relaxed);
    }

    fn note(&self, outcome: &StepOutcome) {
        match outcome {
            StepOutcome::Posted { response, .. } => match response {
                Response::Accepted => self.bump("http-202"),
                Response::Rejected(_) => self.bump("http-400"),
                Response::Unavailable => {}
            },
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
            unsent: self.setup.requests.keys().copied().collect(),
            budgets: self.budgets,
            violation: None,
        }
    }

    fn steps(&self, state: &State, steps: &mut Vec<Step>) {
        let budgets = state.budgets;
        let sendable: BTreeSet<u32> = state.unsent.union(&state.world.owed).copied().collect();
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
            if world.has_work(&self.setup.mutant, consumer) {
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
            Step::Upgrade { .. } => spend(&mut next.budgets.upgrades),
            Step::Poison => spend(&mut next.budgets.poison),
        }
        let checked = self.checked;
        if next.violation.is_none() {
            next.violation = check_step(checked, &state.world, &next.world, &outcome);
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
                self.budgets.upgrades == 0,
                &|key| scenario.label(key),
            );
        }
        Some(next)
    }

    fn violation(state: &State) -> Option<usize> {
        state.violation.map(|property| property as usize)
    }

    fn checks(&self, index: usize) -> bool {
        self.checked.contains(Property::ALL[index])
    }

    fn only(&self, index: usize) -> FactsModel {
        FactsModel {
            checked: Properties::only(Property::ALL[index]),
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
        "faults left: {} lost answers, {}+{} crashes, {} takeovers, {} poison, {} upgrades",
        b.lost_responses,
        b.crashes_before_commit,
        b.crashes_after_commit,
        b.takeovers,
        b.poison,
        b.upgrades
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

/// A facts model file, loaded with its fixture.
#[derive(Clone, Debug)]
pub struct LoadedModel {
    /// The model file.
    pub path: PathBuf,
    /// As written.
    pub file: ModelFile,
    /// The model.
    pub model: FactsModel,
    /// The policy's name.
    pub policy: String,
    /// The property expected violated (`None`: pass).
    pub expected: Option<Property>,
}

/// Reads a facts model file and its fixture; `policy` overrides the file's.
pub fn load_model(path: &Path, policy: Option<&str>) -> Result<LoadedModel, InputError> {
    load_model_with(path, policy, &Overrides::default())
}

/// The fault budgets `--budgets` sets for facts models, in order.
pub const BUDGETS: [&str; 6] = [
    "lost_responses",
    "crashes_before_commit",
    "crashes_after_commit",
    "takeovers",
    "poison",
    "upgrade",
];

/// Reads a facts model file with command-line overrides of its run options.
pub fn load_model_with(
    path: &Path,
    policy: Option<&str>,
    overrides: &Overrides,
) -> Result<LoadedModel, InputError> {
    let mut file: ModelFile = crate::harness::model_file::parse(path)?;
    overrides.apply(
        &mut file.threads,
        &mut file.strategy,
        &mut file.state_limit,
        &mut file.properties,
    );
    if let Some(budgets) = overrides.budgets(path, &BUDGETS)? {
        file.lost_responses = budgets[0];
        file.crashes_before_commit = budgets[1];
        file.crashes_after_commit = budgets[2];
        file.takeovers = budgets[3];
        file.poison = budgets[4];
        file.upgrade = budgets[5] > 0;
    }
    let policy = policy.unwrap_or(&file.policy).to_owned();
    let mutant = match policy.as_str() {
        "spec" => None,
        name => Some(
            name.parse::<Mutant>()
                .map_err(|message| InputError::invalid(path, "policy", message))?,
        ),
    };
    let expected = match file.expect.as_str() {
        "pass" => None,
        name => Some(name.parse::<Property>().map_err(|message| {
            InputError::invalid(path, "expect", format!("{message}, or `pass`"))
        })?),
    };
    let mut checked = Properties::ALL;
    if let Some(names) = &file.properties {
        if names.is_empty() {
            return Err(InputError::invalid(
                path,
                "properties",
                "lists no property; leave it out to check all six",
            ));
        }
        checked = Properties::NONE;
        for name in names {
            let property: Property = name
                .parse()
                .map_err(|message| InputError::invalid(path, "properties", message))?;
            checked = checked.with(property);
        }
    }
    if let Some(property) = expected {
        if !checked.contains(property) {
            return Err(InputError::invalid(
                path,
                "expect",
                format!("`{property}` is not among the checked `properties`"),
            ));
        }
    }
    if !(1..=3).contains(&file.consumers) {
        return Err(InputError::invalid(path, "consumers", "must be 1, 2 or 3"));
    }
    crate::harness::model_file::check_run_options(path, file.threads, file.state_limit)?;
    let scenario = crate::harness::model_file::load_fixture(path, &file.fixture, Scenario::load)?;
    let upgrade = match (file.upgrade, scenario.applications.iter().next()) {
        (false, _) => None,
        (true, Some((key, application))) => Some((key.clone(), application.material_version + 1)),
        (true, None) => {
            return Err(InputError::invalid(
                path,
                "upgrade",
                "the fixture has no application to upgrade",
            ))
        }
    };
    let setup = Setup {
        mutant,
        ..scenario.setup.clone()
    };
    let model = FactsModel {
        consumers: (1..=file.consumers)
            .map(|n| Consumer(format!("c{n}")))
            .collect(),
        budgets: Budgets {
            lost_responses: file.lost_responses,
            crashes_before_commit: file.crashes_before_commit,
            crashes_after_commit: file.crashes_after_commit,
            takeovers: file.takeovers,
            poison: file.poison,
            upgrades: u8::from(upgrade.is_some()),
        },
        upgrade,
        checked,
        coverage: Arc::default(),
        setup: Arc::new(setup),
        scenario: Arc::new(scenario),
    };
    Ok(LoadedModel {
        path: path.to_owned(),
        file,
        model,
        policy,
        expected,
    })
}

/// A schedule step as fixtures write it.
pub fn raw_step(step: &Step) -> RawStep {
    match step {
        Step::Post { request, fault } => RawStep {
            post: Some(*request),
            response_lost: *fault == Some(PostFault::ResponseLost),
            stream_unavailable: *fault == Some(PostFault::StreamUnavailable),
            ..RawStep::default()
        },
        Step::Consume { consumer, crash } => RawStep {
            consume: Some(consumer.0.clone()),
            crash: *crash,
            ..RawStep::default()
        },
        Step::Recover { consumer, crash } => RawStep {
            recover: Some(consumer.0.clone()),
            crash: *crash,
            ..RawStep::default()
        },
        Step::Claim { consumer, crash } => RawStep {
            claim: Some(consumer.0.clone()),
            crash: *crash,
            ..RawStep::default()
        },
        Step::Upgrade {
            application,
            material_version,
        } => RawStep {
            upgrade: Some(RawUpgrade {
                application: application.application_id.clone(),
                tenant_id: Some(application.tenant_id.clone()),
                material_version: *material_version,
            }),
            ..RawStep::default()
        },
        Step::Poison => RawStep {
            poison: true,
            ..RawStep::default()
        },
    }
}

/// Describes, tabulates and (with `out_dir`) writes one counterexample as a fixture whose
/// schedule replays it.
fn trace(
    loaded: &LoadedModel,
    property: Property,
    steps: &[Step],
    out_dir: Option<&Path>,
) -> Result<TraceReport, InputError> {
    let scenario = &loaded.model.scenario;
    let mut replayed = Scenario::clone(scenario);
    replayed.setup = Setup::clone(&loaded.model.setup);
    replayed.schedule = Some(steps.to_vec());
    let report = super::replay::replay(&replayed);
    let table = super::table::render_table(&report);
    let diagram = diagram(loaded, property, &report);
    let written = match out_dir {
        None => None,
        Some(dir) => {
            let text =
                std::fs::read_to_string(&scenario.file).map_err(|source| InputError::Io {
                    file: scenario.file.clone(),
                    source,
                })?;
            let mut raw: RawFixture = serde_json::from_str(&text).map_err(|error| {
                InputError::invalid(&scenario.file, "fixture", error.to_string())
            })?;
            raw.name = Some(format!(
                "{}: {} under {}",
                scenario.name, property, loaded.policy
            ));
            raw.description = Some(format!(
                "Counterexample found by `arrival check {}`: under policy {} this schedule violates {}. `arrival replay FILE` replays it under that policy (the trace block's), `--policy spec` under the contract.",
                loaded.path.display(),
                loaded.policy,
                property,
            ));
            raw.schedule = Some(steps.iter().map(raw_step).collect());
            raw.trace = Some(crate::harness::model_file::TraceOrigin {
                model: loaded.path.display().to_string(),
                policy: loaded.policy.clone(),
                violates: property.name().to_owned(),
            });
            raw.expect = None;
            Some(crate::harness::model_file::write_trace(
                dir,
                &loaded.path,
                property.name(),
                &raw,
            )?)
        }
    };
    if let Some(fixture) = &written {
        crate::harness::model_file::write_diagram(fixture, &diagram)?;
    }
    Ok(TraceReport {
        mermaid: diagram.mermaid(),
        steps: steps.iter().map(describe_step).collect(),
        fixture: written,
        table,
        shortest: true,
    })
}

/// The counterexample as a sequence diagram: the source, ingress, the stream, each
/// consumer and the inbox; each step's answer or verdict, what it changed (pending entries,
/// facts, READY), the violating step.
fn diagram(
    loaded: &LoadedModel,
    property: Property,
    report: &super::replay::Report,
) -> crate::harness::diagram::Diagram {
    use crate::harness::diagram::{Diagram, Message};
    let consumers = &loaded.model.consumers;
    let (source, ingress, stream, inbox) = (0, 1, 2, 3 + consumers.len());
    let lane_of = |consumer: &Consumer| {
        3 + consumers
            .iter()
            .position(|known| known == consumer)
            .unwrap_or_default()
    };
    let message = |from, to, label: String, lost, changed| Message {
        from,
        to,
        label,
        lost,
        changed,
    };
    let mut before = (0, 0, Vec::new());
    let mut rows = Vec::new();
    for step in &report.steps {
        let now = (step.pending, step.facts, step.ready.clone());
        let changed = (now != before).then(|| {
            format!(
                "pending {}, facts {}, READY {}",
                now.0,
                now.1,
                if now.2.is_empty() {
                    "-".to_owned()
                } else {
                    now.2.join(",")
                }
            )
        });
        before = now;
        let row = match (&step.step, &step.response) {
            (Step::Post { request, fault }, Some(response)) => {
                let mut row = vec![message(
                    source,
                    ingress,
                    format!("POST #{request}"),
                    false,
                    None,
                )];
                if let Some(entry) = step.entry {
                    row.push(message(
                        ingress,
                        stream,
                        format!("XADD entry {entry}"),
                        false,
                        None,
                    ));
                }
                let lost = *fault == Some(PostFault::ResponseLost);
                let answer = format!("{} {}", response.status(), response.reason());
                row.push(message(ingress, source, answer, lost, changed));
                row
            }
            (Step::Upgrade { .. }, _) | (Step::Poison, _) => {
                vec![message(
                    stream,
                    stream,
                    step.step_label.clone(),
                    false,
                    changed,
                )]
            }
            _ => match (&step.consumer, step.entry) {
                (Some(consumer), Some(entry)) => {
                    let lane = lane_of(consumer);
                    let mut row = vec![message(
                        stream,
                        lane,
                        format!("entry {entry} to {consumer}"),
                        false,
                        None,
                    )];
                    let verdict = match &step.decision {
                        Some(Decision::Verdict(verdict)) => verdict.as_str().to_owned(),
                        Some(Decision::Retry { .. }) => "retry".into(),
                        Some(Decision::DeadLetter { .. }) => "dead letter".into(),
                        Some(Decision::Dropped { .. }) => "dropped".into(),
                        None => "crash before commit".into(),
                    };
                    row.push(message(lane, inbox, verdict, step.decision.is_none(), None));
                    let acked = step.acknowledged == Some(true);
                    let label = match step.crash {
                        Some(_) if !acked => "crash: no XACK".to_owned(),
                        _ if acked => format!("XACK {entry}"),
                        _ => "no XACK (retried later)".to_owned(),
                    };
                    row.push(message(lane, stream, label, !acked, changed));
                    row
                }
                _ => vec![message(
                    stream,
                    stream,
                    step.step_label.clone(),
                    false,
                    changed,
                )],
            },
        };
        rows.push(row);
    }
    let mut lanes = vec!["source".to_owned(), "ingress".into(), "stream".into()];
    lanes.extend(
        consumers
            .iter()
            .map(|consumer| format!("consumer {consumer}")),
    );
    lanes.push("inbox".into());
    Diagram {
        title: format!(
            "{}: {} under {}",
            loaded.model.scenario.name, property, loaded.policy
        ),
        lanes,
        steps: rows,
        violation: report
            .violations
            .first()
            .map(|violation| (violation.step, violation.property.clone()))
            .or_else(|| Some((report.steps.len(), property.name().to_owned()))),
    }
}

/// The model file's keys that shape the state space, in words (a report's `settings`).
fn settings_text(file: &ModelFile) -> String {
    format!(
        "consumers={} lost_responses={} crashes_before_commit={} crashes_after_commit={} \
         takeovers={} poison={} upgrade={}",
        file.consumers,
        file.lost_responses,
        file.crashes_before_commit,
        file.crashes_after_commit,
        file.takeovers,
        file.poison,
        file.upgrade
    )
}

/// Checks one facts model file exhaustively.
pub fn run(
    loaded: &LoadedModel,
    trace_out: Option<&Path>,
    progress: bool,
    engine: Engine,
) -> Result<ModelReport, InputError> {
    run_with(loaded, trace_out, progress, engine, &Mode::Exhaustive)
}

/// Checks a facts model file, covering it as `mode` says (everything, one shard's share,
/// or random walks).
pub fn run_with(
    loaded: &LoadedModel,
    trace_out: Option<&Path>,
    progress: bool,
    engine: Engine,
    mode: &Mode,
) -> Result<ModelReport, InputError> {
    let subject = Subject {
        model: loaded.path.display().to_string(),
        protocol: "facts".into(),
        fixture: loaded.model.scenario.file.display().to_string(),
        policy: loaded.policy.clone(),
        expected: loaded.expected.map(Property::name),
        bytes_per_state: std::mem::size_of::<State>(),
        settings: settings_text(&loaded.file),
    };
    let settings = Settings {
        strategy: loaded.file.strategy,
        threads: loaded.file.threads,
        state_limit: loaded.file.state_limit,
        label: loaded.path.display().to_string(),
        progress,
        engine,
    };
    check_parts_with(
        subject,
        std::slice::from_ref(&loaded.model),
        &settings,
        mode,
        |_, index, steps| trace(loaded, Property::ALL[index], steps, trace_out),
    )
}

/// Serves stateright's Explorer for a facts model on `address` (blocks; `listening` runs once
/// the address is taken); fails when nothing can listen there.
pub fn serve(loaded: &LoadedModel, address: &str, listening: impl FnOnce()) -> std::io::Result<()> {
    let model = loaded.model.clone();
    crate::harness::explorer::serve(model, loaded.file.threads, address, listening)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::inbox::Verdict;

    #[test]
    fn verdict_names_are_coverage_names() {
        for verdict in [
            Verdict::Accepted,
            Verdict::Duplicate,
            Verdict::Conflict,
            Verdict::LateMismatch,
        ] {
            assert!(COVERAGE.contains(&verdict.as_str()));
        }
    }
}
