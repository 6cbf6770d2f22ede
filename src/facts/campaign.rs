//! A conformance campaign against one facts receiver, over the [`FactsTarget`] trait (no
//! I/O of its own): each schedule of [`Action`]s run from a fresh receiver, every answer and
//! every settled state checked by the [`Oracle`]; the first failure cut, shrunk and
//! confirmed by rerunning; the report with its counts, property statuses and JUnit; the
//! failing schedule as a facts fixture and a file of the actions that rerun it.

use super::conform::{
    describe_action, model_steps, wire, Action, Answer, FactsState, Fault, Mismatch, Oracle, Wire,
};
use super::fixture::{RawFixture, Scenario};
use crate::harness::conform::{confirm, shrink, Counts, Reproduced, Status, Verdict};
use crate::harness::conform::{junit_suite, properties_text, report_tail, FoundView};
use crate::harness::junit::ExtraSuite;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// The target could not be started, reset, read or spoken to (exit 3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetError {
    /// What failed: the command, the URL.
    pub what: String,
    /// What it said.
    pub message: String,
}

impl std::fmt::Display for TargetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.message)
    }
}

/// How a post is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sending {
    /// Send and read the whole answer.
    Wait,
    /// Close the connection right after sending.
    Disconnect,
    /// Kill the receiver's process group this long after sending (it stays down).
    KillAfter(Duration),
}

/// A facts receiver as `arrival conform` drives it.
pub trait FactsTarget {
    /// Stops it if it runs, empties its data, registers `fixture`'s applications and keys
    /// (a fresh stream too) and starts it.
    fn reset(&mut self, fixture: &RawFixture) -> Result<(), TargetError>;
    /// Posts one request.
    fn post(&mut self, wire: &Wire, sending: Sending) -> Result<Answer, TargetError>;
    /// Its state document (docs/conform.md).
    fn read(&mut self) -> Result<Value, TargetError>;
    /// Kills its process group (it stays down).
    fn kill(&mut self) -> Result<(), TargetError>;
    /// Starts it again on the same data.
    fn start(&mut self) -> Result<(), TargetError>;
    /// Its clock as arrival sees it (Unix milliseconds).
    fn now_ms(&self) -> i64;
    /// How long it may take to show nothing pending.
    fn settle_timeout(&self) -> Duration;
    /// Its last log lines.
    fn log_tail(&self) -> Vec<String>;
    /// What went wrong around the receiver without being a verdict or a harness failure
    /// (a `cleanup` command that failed), taken once; nothing by default.
    fn take_warnings(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// How each schedule runs.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Settle and compare after every action (else only at the end).
    pub every_step: bool,
    /// A kill in flight comes up to this many milliseconds after sending.
    pub kill_window_ms: u64,
    /// The kill delays' seed.
    pub seed: u64,
}

/// One schedule to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// `fixture`, `walks/s1/w3`, `rerun`.
    pub id: String,
    /// The actions.
    pub actions: Vec<Action>,
}

/// Where a schedule failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The property, or `diverged`.
    pub property: String,
    /// The action after which it showed (from 1; the length for the end).
    pub step: usize,
    /// What was expected and seen.
    pub detail: String,
}

/// One schedule's run.
#[derive(Clone, Debug)]
pub struct Run {
    /// The first mismatch.
    pub failure: Option<Failure>,
    /// Its counts.
    pub counts: Counts,
    /// States compared.
    pub settles: usize,
}

fn harness(what: &str, message: impl std::fmt::Display) -> TargetError {
    TargetError {
        what: what.to_owned(),
        message: message.to_string(),
    }
}

/// Reads the state until it shows nothing owed twice in a row, the same both times, or the
/// target's settle time runs out after at least two reads (`Err` with the last state: not
/// settled).
fn settled(
    target: &mut dyn FactsTarget,
    scenario: &Scenario,
) -> Result<Result<FactsState, FactsState>, TargetError> {
    let started = std::time::Instant::now();
    let mut last: Option<FactsState> = None;
    loop {
        let doc = target.read()?;
        let state = FactsState::from_status(&doc, scenario)
            .map_err(|message| harness("the target's state", message))?;
        if state.pending == 0 && last.as_ref() == Some(&state) {
            return Ok(Ok(state));
        }
        if last.is_some() && started.elapsed() > target.settle_timeout() {
            return Ok(Err(state));
        }
        if state.pending > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        last = Some(state);
    }
}

/// Runs one schedule from a fresh receiver.
pub fn run_schedule(
    scenario: &Scenario,
    fixture: &RawFixture,
    target: &mut dyn FactsTarget,
    actions: &[Action],
    settings: &Settings,
) -> Result<Run, TargetError> {
    let mut run = Run {
        failure: None,
        counts: Counts::default(),
        settles: 0,
    };
    target.reset(fixture)?;
    let mut oracle = Oracle::new(scenario);
    let initial = oracle.initial_state();
    let first = match settled(target, scenario)? {
        Ok(state) | Err(state) => state,
    };
    if first != initial {
        return Err(harness(
            "reset not verified",
            format!(
                "a fresh receiver should hold only the fixture's applications: {}",
                initial.differences(&first).join("; ")
            ),
        ));
    }
    // Each request's last attempt: its bytes and when they were sent (arrival's clock).
    let mut last: BTreeMap<u32, (Wire, i64)> = BTreeMap::new();
    // Requests every answer to which so far was indefinite: a sender still owes them.
    let mut owed: std::collections::BTreeSet<u32> = std::collections::BTreeSet::new();
    let fail = |run: &mut Run, step: usize, mismatch: Mismatch| {
        if mismatch.property == "no-loss" {
            run.counts.lost += 1;
        }
        run.failure = Some(Failure {
            property: mismatch.property,
            step,
            detail: mismatch.detail,
        });
    };
    for (index, action) in actions.iter().enumerate() {
        let step = index + 1;
        match *action {
            Action::Post {
                request,
                bytes,
                fault,
            } => {
                let posted = &scenario.setup.requests[&request];
                let now = target.now_ms();
                // An exact copy keeps the time its bytes were signed at.
                let (sent, signed_at) = match (bytes, last.get(&request)) {
                    (super::conform::Bytes::Exact, Some((previous, at)))
                        if super::conform::exact_copy_keeps_its_age(
                            scenario,
                            posted,
                            now - at,
                            2,
                        ) =>
                    {
                        (previous.clone(), *at)
                    }
                    // A copy that would turn stale on the way goes re-signed.
                    (super::conform::Bytes::Exact, Some(_)) => (
                        wire(scenario, posted, now, super::conform::Bytes::Resigned),
                        now,
                    ),
                    _ => (wire(scenario, posted, now, bytes), now),
                };
                last.insert(request, (sent.clone(), signed_at));
                let sending = match fault {
                    Some(Fault::Disconnect) => Sending::Disconnect,
                    // Timed from the seed and the request alone, so a shrunk schedule
                    // and its reruns kill that request as long after sending it.
                    Some(Fault::KillInFlight) => {
                        Sending::KillAfter(crate::harness::conform::kill_delay(
                            settings.seed,
                            request,
                            settings.kill_window_ms,
                        ))
                    }
                    _ => Sending::Wait,
                };
                let answer = target.post(&sent, sending)?;
                run.counts.attempted += 1;
                match &answer {
                    Answer::Indefinite(_) => {
                        run.counts.indefinite += 1;
                        if fault == Some(Fault::KillInFlight) {
                            run.counts.cut_by_arrival += 1;
                        }
                        owed.insert(request);
                    }
                    _ => {
                        run.counts.acknowledged += 1;
                        if fault != Some(Fault::LostAnswer) {
                            owed.remove(&request);
                        }
                    }
                }
                if fault == Some(Fault::LostAnswer) {
                    run.counts.dropped_by_arrival += 1;
                }
                if fault == Some(Fault::KillInFlight) {
                    run.counts.kills += 1;
                    target.start()?;
                }
                if let Err(mismatch) = oracle.post(request, &answer) {
                    fail(&mut run, step, mismatch);
                    return Ok(run);
                }
                if fault == Some(Fault::KillAfterAnswer) {
                    run.counts.kills += 1;
                    target.kill()?;
                    target.start()?;
                }
            }
            Action::Restart => {
                run.counts.kills += 1;
                target.kill()?;
                target.start()?;
            }
        }
        if settings.every_step || step == actions.len() {
            if let Err(mismatch) = settle(&mut oracle, target, scenario, &mut run)? {
                fail(&mut run, step, mismatch);
                return Ok(run);
            }
        }
    }
    if actions.is_empty() {
        if let Err(mismatch) = settle(&mut oracle, target, scenario, &mut run)? {
            fail(&mut run, 0, mismatch);
        }
        return Ok(run);
    }
    // Liveness: faults stop and the sender retries what it still owes, re-signed, until it
    // gets an answer; a request never answered after every retry is lost to the sender.
    let step = actions.len() + 1;
    let retried = !owed.is_empty();
    for request in owed {
        let posted = &scenario.setup.requests[&request];
        let mut answered = false;
        for _ in 0..LIVENESS_RETRIES {
            let sent = wire(
                scenario,
                posted,
                target.now_ms(),
                super::conform::Bytes::Resigned,
            );
            let answer = target.post(&sent, Sending::Wait)?;
            run.counts.attempted += 1;
            if let Err(mismatch) = oracle.post(request, &answer) {
                fail(&mut run, step, mismatch);
                return Ok(run);
            }
            if matches!(answer, Answer::Indefinite(_)) {
                run.counts.indefinite += 1;
                continue;
            }
            run.counts.acknowledged += 1;
            answered = true;
            break;
        }
        if !answered {
            fail(
                &mut run,
                step,
                Mismatch {
                    property: "no-loss".into(),
                    detail: format!(
                        "request {request} was never answered: {LIVENESS_RETRIES} retries after \
                         the schedule, with no fault, all indefinite (a 5xx, a reset or no answer)"
                    ),
                },
            );
            return Ok(run);
        }
    }
    if retried {
        if let Err(mismatch) = settle(&mut oracle, target, scenario, &mut run)? {
            fail(&mut run, step, mismatch);
        }
    }
    Ok(run)
}

/// Retries of an owed request in the liveness phase.
const LIVENESS_RETRIES: usize = 5;

fn settle(
    oracle: &mut Oracle<'_>,
    target: &mut dyn FactsTarget,
    scenario: &Scenario,
    run: &mut Run,
) -> Result<Result<(), Mismatch>, TargetError> {
    run.settles += 1;
    let before = oracle.worlds().len();
    let state = match settled(target, scenario)? {
        Ok(state) => state,
        Err(state) => {
            return Ok(Err(Mismatch {
                property: "no-loss".into(),
                detail: format!(
                    "the receiver never settled: {} entries still not acknowledged after {} ms",
                    state.pending,
                    target.settle_timeout().as_millis()
                ),
            }))
        }
    };
    let result = oracle.settle(&state);
    if result.is_ok() && before > 1 {
        // Indefinite posts whose effect (or its absence) the settled state showed.
        run.counts.recovered += (before - oracle.worlds().len()) as u64;
    }
    Ok(result)
}

/// How a campaign runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// How each schedule runs.
    pub settings: Settings,
    /// Runs the shrinker may spend.
    pub shrink_budget: usize,
    /// Reruns that confirm the shrunk schedule.
    pub confirm: usize,
    /// The target as named on the command line.
    pub target: String,
    /// The model or file the plans come from.
    pub source: String,
}

/// The first failure, shrunk and confirmed.
#[derive(Clone, Debug, Serialize)]
pub struct Found {
    /// The property broken, or `diverged`.
    pub property: String,
    /// The schedule it was found by.
    pub found_by: String,
    /// Its length before shrinking.
    pub original_steps: usize,
    /// The shrunk schedule, in words.
    pub steps: Vec<String>,
    /// The shrunk schedule.
    #[serde(skip)]
    pub actions: Vec<Action>,
    /// The action after which it showed (from 1).
    pub step: usize,
    /// What was expected and what was seen.
    pub detail: String,
    /// `3/3`, or fewer for a flaky receiver.
    pub reproduced: String,
    /// Whether some reruns did not fail the same way.
    pub flaky: bool,
    /// The receiver's last log lines.
    pub log_tail: Vec<String>,
}

impl Found {
    /// The failure as the shared report parts read it.
    pub fn view(&self) -> FoundView<'_> {
        FoundView {
            property: &self.property,
            found_by: &self.found_by,
            original_steps: self.original_steps,
            steps: &self.steps,
            reproduced: &self.reproduced,
            flaky: self.flaky,
            detail: &self.detail,
        }
    }
}

/// What a facts campaign found.
#[derive(Clone, Debug, Serialize)]
pub struct FactsConformReport {
    /// The target as named.
    pub target: String,
    /// The model or file.
    pub source: String,
    /// The fixture's name.
    pub fixture: String,
    /// Always `facts`.
    pub protocol: &'static str,
    /// `every-step` or `end`.
    pub observe: &'static str,
    /// `sampled`, `violated` or `incomplete`.
    pub verdict: Verdict,
    /// Schedules run.
    pub schedules: usize,
    /// Schedules that ran to the end with nothing broken.
    pub passed: usize,
    /// Settled states compared.
    pub settles: usize,
    /// Counts over every run, shrinking and confirmation excluded.
    pub counts: Counts,
    /// Each property's status (in JSON: `{"name", "status", "why"?}`).
    #[serde(serialize_with = "properties_json")]
    pub properties: Vec<(String, Status)>,
    /// The first failure.
    pub failure: Option<Found>,
    /// What could not be driven, and why.
    pub skipped: Vec<String>,
    /// Notes on what this run cannot see.
    pub warnings: Vec<String>,
    /// Wall time.
    pub seconds: f64,
}

fn properties_json<S: serde::Serializer>(
    properties: &[(String, Status)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = serializer.serialize_seq(Some(properties.len()))?;
    for (name, status) in properties {
        let mut entry = serde_json::json!({"name": name, "status": status.word()});
        if let Status::Unobserved(why) | Status::NotExercised(why) = status {
            entry["why"] = serde_json::json!(why);
        }
        seq.serialize_element(&entry)?;
    }
    seq.end()
}

/// Runs every plan until one fails; shrinks and confirms that one.
pub fn campaign(
    scenario: &Scenario,
    fixture: &RawFixture,
    plans: &[Plan],
    target: &mut dyn FactsTarget,
    options: &Options,
) -> Result<FactsConformReport, TargetError> {
    let started = std::time::Instant::now();
    let mut counts = Counts::default();
    let (mut passed, mut schedules, mut settles) = (0, 0, 0);
    let mut failed: Option<(Plan, Failure)> = None;
    for plan in plans {
        let run = run_schedule(scenario, fixture, target, &plan.actions, &options.settings)?;
        schedules += 1;
        settles += run.settles;
        counts.add(&run.counts);
        match run.failure {
            None => passed += 1,
            Some(failure) => {
                failed = Some((plan.clone(), failure));
                break;
            }
        }
    }
    let found = match &failed {
        Some((plan, failure)) => Some(settle_failure(
            scenario, fixture, plan, failure, target, options,
        )?),
        None => None,
    };
    let verdict = match (&found, schedules) {
        (Some(_), _) => Verdict::Violated,
        // Schedules that posted nothing (every request skipped) tested nothing.
        (None, 0) => Verdict::Incomplete,
        (None, _) if counts.attempted == 0 => Verdict::Incomplete,
        (None, _) => Verdict::Sampled,
    };
    let mut warnings = target.take_warnings();
    if !options.settings.every_step {
        warnings.push(
            "the state is read only at the end of each schedule: what a step did on the way \
             is not seen"
                .to_owned(),
        );
    }
    Ok(FactsConformReport {
        target: options.target.clone(),
        source: options.source.clone(),
        fixture: scenario.name.clone(),
        protocol: "facts",
        observe: if options.settings.every_step {
            "every-step"
        } else {
            "end"
        },
        verdict,
        schedules,
        passed,
        settles,
        counts,
        properties: statuses(&found, settles > 0, crosses_tenants(fixture)),
        failure: found,
        skipped: Vec::new(),
        warnings,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Whether a request of the fixture could cross tenants: the tenants its applications
/// belong to and its requests name (`tenant_id` in a body) are two or more, or a key is
/// limited to some tenants.
pub fn crosses_tenants(fixture: &RawFixture) -> bool {
    let named = fixture.requests.iter().filter_map(|request| {
        let body: Value = serde_json::from_str(&request.body).ok()?;
        body.get("tenant_id")?.as_str().map(str::to_owned)
    });
    let tenants: std::collections::BTreeSet<String> = fixture
        .applications
        .iter()
        .map(|app| app.tenant_id.clone())
        .chain(named)
        .collect();
    tenants.len() > 1 || fixture.keys.iter().any(|key| key.tenants.is_some())
}

/// Each facts property's status after a run that compared a settled state or not, on a
/// fixture whose requests could cross tenants or not.
pub fn statuses(
    found: &Option<Found>,
    compared: bool,
    crosses_tenants: bool,
) -> Vec<(String, Status)> {
    let broken = found.as_ref().map(|found| found.property.as_str());
    super::property::Property::NAMES
        .iter()
        .map(|&name| {
            let status = match name {
                _ if broken == Some(name) => Status::Violated,
                "ack-after-commit" => Status::Unobserved(
                    "the receiver's acknowledgements of stream entries are not visible from \
                     outside; kills show only their effect on the settled state"
                        .into(),
                ),
                "quarantine-resolves" | "lifecycle-forward" => Status::NotExercised(
                    "no operator channel: registrations, upgrades and terminations are not \
                     driven"
                        .into(),
                ),
                "fact-once" => Status::Unobserved(
                    "the state document keys facts by identity: two facts under one \
                     identity would show as one"
                        .into(),
                ),
                "tenant-isolated" if !crosses_tenants => Status::NotExercised(
                    "the fixture's applications and requests name one tenant and no key is \
                     limited to tenants: no request could cross tenants"
                        .into(),
                ),
                _ if compared => Status::Sampled,
                _ => Status::NotExercised("no settled state was compared".into()),
            };
            (name.to_owned(), status)
        })
        .collect()
}

/// Shrinks a failure over reruns of the same property and confirms it.
fn settle_failure(
    scenario: &Scenario,
    fixture: &RawFixture,
    plan: &Plan,
    failure: &Failure,
    target: &mut dyn FactsTarget,
    options: &Options,
) -> Result<Found, TargetError> {
    let property = failure.property.clone();
    let mut same = |actions: &[Action]| -> Result<Option<Run>, TargetError> {
        let run = run_schedule(scenario, fixture, target, actions, &options.settings)?;
        let hit = run
            .failure
            .as_ref()
            .is_some_and(|found| found.property == property);
        Ok(hit.then_some(run))
    };
    let mut start = plan.actions.clone();
    if failure.step > 0 && failure.step < start.len() && same(&start[..failure.step])?.is_some() {
        start.truncate(failure.step);
    }
    let mut progress = crate::harness::conform::ShrinkProgress::start(
        &property,
        &plan.id,
        plan.actions.len(),
        options.shrink_budget,
    );
    let (shrunk, _) = shrink(&start, options.shrink_budget, |actions| {
        let failed = same(actions)?.is_some();
        progress.rerun(actions.len(), failed);
        Ok(failed)
    })?;
    let mut kept: Option<Run> = None;
    let reproduced: Reproduced = confirm(options.confirm, || {
        let run = same(&shrunk)?;
        let hit = run.is_some();
        if kept.is_none() {
            kept = run;
        }
        Ok(hit)
    })?;
    progress.done(shrunk.len(), reproduced);
    let (detail, step) = match kept.as_ref().and_then(|run| run.failure.as_ref()) {
        Some(found) => (found.detail.clone(), found.step),
        None => (failure.detail.clone(), failure.step),
    };
    Ok(Found {
        property,
        found_by: plan.id.clone(),
        original_steps: plan.actions.len(),
        steps: shrunk.iter().map(describe_action).collect(),
        actions: shrunk,
        step,
        detail,
        reproduced: reproduced.text(),
        flaky: reproduced.flaky(),
        log_tail: target.log_tail(),
    })
}

/// The actions of a failing schedule and where it came from: what `arrival conform FILE`
/// reruns (the facts fixture format has no `conform` block).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConformFile {
    /// Always `facts-conform`.
    pub protocol: String,
    /// The facts fixture the actions play, relative to this file.
    pub fixture: String,
    /// The model the run came from.
    pub model: String,
    /// The target as named.
    pub target: String,
    /// The property broken, or `diverged`.
    pub property: String,
    /// The schedule that found it.
    pub found_by: String,
    /// `3/3`.
    pub reproduced: String,
    /// The actions.
    pub actions: Vec<Action>,
    /// The run's seed (with a request's number it times each kill in flight); a rerun
    /// uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The run's `--kill-window-ms`; a rerun uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_window_ms: Option<u64>,
}

/// The failing schedule as a facts fixture: the model's side of its actions as
/// `schedule` (each post followed by one consumer step; a lost, disconnected or killed
/// post taken as appended with its answer lost), no `expect`, so `arrival replay` shows
/// what the contract's pipeline does with exactly those steps.
pub fn failure_fixture(raw: &RawFixture, found: &Found, source: &str) -> RawFixture {
    let mut fixture = raw.clone();
    fixture.name = Some(format!(
        "{}-conform-{}",
        raw.name.clone().unwrap_or_else(|| "facts".into()),
        found.property
    ));
    fixture.description = Some(format!(
        "arrival conform on {source}: {} by {} (shrunk from {} actions, reproduced {}). The \
         real actions are in the .actions.json file beside this one.",
        found.property,
        found.steps.join(", "),
        found.original_steps,
        found.reproduced
    ));
    fixture.schedule = Some(
        model_steps(&found.actions)
            .iter()
            .map(super::trace::raw_step)
            .collect(),
    );
    fixture.expect = None;
    fixture.trace = None;
    fixture
}

impl FactsConformReport {
    /// Whether the run is what `expect` (`pass` or a property) says it should be.
    pub fn as_expected(&self, expect: &str) -> bool {
        match (&self.failure, expect) {
            (None, "pass") => self.verdict == Verdict::Sampled,
            (Some(found), property) => found.property == property && !found.flaky,
            _ => false,
        }
    }

    /// The report for people.
    pub fn text(&self) -> String {
        let mut out = format!(
            "conform {} against {} (facts fixture {}, observe {})\n",
            self.source, self.target, self.fixture, self.observe
        );
        let c = &self.counts;
        out += &format!(
            "schedules: {} run, {} passed, {} settled states compared ({:.2} s)\ncounts: \
             attempted {}, answered {}, dropped by arrival {}, indefinite {} ({} cut by arrival), \
             lost {}, forks resolved {}, kills {}\n",
            self.schedules,
            self.passed,
            self.settles,
            self.seconds,
            c.attempted,
            c.acknowledged,
            c.dropped_by_arrival,
            c.indefinite,
            c.cut_by_arrival,
            c.lost,
            c.recovered,
            c.kills
        );
        out += &properties_text(&self.properties);
        out += &report_tail(
            &self.skipped,
            &self.warnings,
            self.failure.as_ref().map(Found::view),
            self.verdict,
        );
        out
    }

    /// The run as a JUnit suite ([`junit_suite`]): it fails exactly when the run is not
    /// what `expect` says.
    pub fn junit(&self, expect: &str) -> ExtraSuite {
        let failure = self
            .failure
            .as_ref()
            .map(|found| found.view().suite_failure());
        junit_suite(
            format!("conform {} against {}", self.source, self.target),
            &self.properties,
            failure.as_ref(),
            expect,
            self.as_expected(expect),
            self.seconds,
        )
    }
}

/// The schedules a facts model file gives, and what it cannot play: the fixture's own
/// schedule (when every step can be played); with `mutant_state_limit`, each listed
/// mutant's shortest counterexample ([`super::mutant_schedules`], searched over at most
/// that many states each), shortest first; then `walks` seeded walks over the playable
/// requests within the file's budgets (lost answers and disconnects: `lost_responses`;
/// kills and restarts: the consumer crashes and takeovers together; extra exact or
/// re-encoded copies: `lost_responses`, at least one).
pub fn model_plans(
    loaded: &super::model_file::LoadedModel,
    walks: usize,
    seed: u64,
    mutant_state_limit: Option<usize>,
) -> (Vec<Plan>, Vec<String>) {
    let scenario: &Scenario = &loaded.model.scenario;
    let file = &loaded.file;
    let (requests, mut skipped) = super::conform::playable(scenario, 2);
    let mut plans = Vec::new();
    match scenario.schedule.as_deref() {
        Some(steps) => match super::conform::schedule_actions(steps, &requests) {
            Ok(actions) => plans.push(Plan {
                id: "fixture".into(),
                actions,
            }),
            Err(why) => skipped.push(format!("the fixture's schedule: {why}")),
        },
        None => plans.push(Plan {
            id: "fixture".into(),
            actions: requests
                .iter()
                .map(|&request| Action::post(request))
                .collect(),
        }),
    }
    if let Some(limit) = mutant_state_limit {
        let mutants = super::mutant_schedules::listed(loaded);
        let known: Vec<Vec<Action>> = plans.iter().map(|plan| plan.actions.clone()).collect();
        let (found, left) =
            super::mutant_schedules::mutant_schedules(loaded, &mutants, limit, &requests, &known);
        plans.extend(found.into_iter().map(|(id, actions)| Plan { id, actions }));
        skipped.extend(left);
    }
    for (budget, what) in [
        (file.poison, "poison entries"),
        (file.undecidable, "undecidable entries"),
        (file.operator, "operator steps"),
        (u8::from(file.upgrade), "upgrades"),
    ] {
        if budget > 0 {
            skipped.push(format!(
                "{what}: arrival has no channel to the receiver's stream or operator"
            ));
        }
    }
    let budgets = super::conform::WalkBudgets {
        lost: file.lost_responses,
        kills: file
            .crashes_before_commit
            .saturating_add(file.crashes_after_commit)
            .saturating_add(file.takeovers),
        copies: file.lost_responses.max(1),
    };
    plans.extend(walk_plans(&requests, budgets, walks, seed));
    (plans, skipped)
}

/// The kept counterexamples in `dir` (a model's `fixtures/regressions/`) written for
/// `raw`'s fixture, each as a schedule `traces/NAME` when every step of it can be played
/// over HTTP (`playable`: the requests arrival can post on a real clock); the others, and
/// why not. Files of another fixture or protocol are passed over.
pub fn trace_plans(
    raw: &RawFixture,
    dir: &std::path::Path,
    playable: &[u32],
) -> (Vec<Plan>, Vec<String>) {
    let files = crate::harness::input::json_files(dir);
    let (mut plans, mut skipped) = (Vec::new(), Vec::new());
    for file in files {
        let Ok((kept, kept_raw)) = load_fixture(&file) else {
            continue;
        };
        let Some(steps) = kept.schedule.as_deref() else {
            continue;
        };
        if !same_fixture(&kept_raw, raw) {
            continue;
        }
        let name = file
            .file_stem()
            .map_or_else(String::new, |stem| stem.to_string_lossy().into_owned());
        match super::conform::schedule_actions(steps, playable) {
            Ok(actions) => plans.push(Plan {
                id: format!("traces/{name}"),
                actions,
            }),
            Err(why) => skipped.push(format!("traces/{name}: its schedule needs {why}")),
        }
    }
    plans.sort_by_key(|plan| plan.actions.len());
    (plans, skipped)
}

/// Whether two facts fixtures set up the same world: everything but their names, schedule,
/// trace origin and expectations.
fn same_fixture(a: &RawFixture, b: &RawFixture) -> bool {
    let setup = |raw: &RawFixture| RawFixture {
        name: None,
        description: None,
        schedule: None,
        trace: None,
        expect: None,
        ..raw.clone()
    };
    setup(a) == setup(b)
}

/// The budgets of the walks after a facts fixture given without a model file: one lost
/// answer, one kill and one extra copy each.
pub const FIXTURE_WALKS: super::conform::WalkBudgets = super::conform::WalkBudgets {
    lost: 1,
    kills: 1,
    copies: 1,
};

/// `walks` seeded walks over the playable `requests` (none when there is nothing to post).
pub fn walk_plans(
    requests: &[u32],
    budgets: super::conform::WalkBudgets,
    walks: usize,
    seed: u64,
) -> Vec<Plan> {
    if requests.is_empty() {
        return Vec::new();
    }
    (0..walks)
        .map(|walk| Plan {
            id: format!("walks/s{seed}/w{walk}"),
            actions: super::conform::walk_actions(requests, budgets, seed, walk),
        })
        .collect()
}

/// Reads a file written by `--trace-out` (`*.actions.json`): its fixture (relative to
/// it) and its actions.
pub fn load_conform_file(
    path: &std::path::Path,
) -> Result<(ConformFile, Scenario, RawFixture), crate::harness::InputError> {
    use crate::harness::InputError;
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Io {
        file: path.to_owned(),
        source,
    })?;
    let file: ConformFile = serde_json::from_str(&text)
        .map_err(|error| InputError::invalid(path, "facts-conform", error.to_string()))?;
    let fixture = path
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .join(&file.fixture);
    let (scenario, raw) = load_fixture(&fixture)?;
    for action in &file.actions {
        if let Action::Post { request, .. } = action {
            if !scenario.setup.requests.contains_key(request) {
                return Err(InputError::invalid(
                    path,
                    "actions",
                    format!("request {request} is not in {}", fixture.display()),
                ));
            }
        }
    }
    Ok((file, scenario, raw))
}

/// A facts fixture, typed and as written.
pub fn load_fixture(
    path: &std::path::Path,
) -> Result<(Scenario, RawFixture), crate::harness::InputError> {
    use crate::harness::InputError;
    let scenario = Scenario::load(path)?;
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Io {
        file: path.to_owned(),
        source,
    })?;
    let raw: RawFixture = serde_json::from_str(&text)
        .map_err(|error| InputError::invalid(path, "fixture", error.to_string()))?;
    Ok((scenario, raw))
}
