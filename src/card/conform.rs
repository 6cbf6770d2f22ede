//! The model as the oracle for a card.snapshot receiver arrival did not write: the
//! [`CardTarget`] a receiver is driven through (over HTTP, JSON lines or in-process), a
//! schedule's external actions mapped to the model steps they may be, the set of model
//! worlds still consistent with what the receiver answered and showed, and the contract
//! property named when that set empties. No I/O: the targets that talk to processes are in
//! `crate::conform`.

use crate::card::fixture::Scenario;
use crate::card::policy::Spec;
use crate::card::property::Property;
use crate::card::receiver::FirstCardReading;
use crate::card::receiver::{Decision, InputRef, Verdict};
use crate::card::replay::CardReport;
use crate::card::step::{Action, Budgets, External, Fault, Step};
use crate::card::wire::Event;
use crate::card::world::{transition, Effect, World};
use crate::harness::conform::{Candidates, Counts};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// What a target answered to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// An acknowledgement, with its meaning when the target gave one (`applied`,
    /// `ignored`, `held`; for a reconciliation its outcome).
    Ack(Option<String>),
    /// A definite refusal: nothing happened.
    Definite(String),
    /// Nothing known: maybe recorded, maybe not.
    Indefinite(String),
}

/// How a request is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sending {
    /// Send and wait for the answer.
    Wait,
    /// Send, then close the connection without reading.
    Disconnect,
    /// Send, wait this long, then kill the target's process group.
    KillAfter(Duration),
}

/// What a target lets arrival see of its state.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Observed {
    /// Every card it knows.
    pub cards: BTreeMap<String, CardReport>,
    /// The paused cards, if it says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<BTreeSet<String>>,
    /// The unresolved inputs, if it says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unresolved: Option<BTreeSet<String>>,
}

/// The target could not be started, reset, read or spoken to: never a receiver verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HarnessError {
    /// What failed, as the user knows it.
    pub what: String,
    /// What happened.
    pub message: String,
}

impl std::fmt::Display for HarnessError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.message)
    }
}

/// A card.snapshot receiver under test. Implemented over HTTP and JSON lines in
/// `crate::conform`, and by anything a `#[test]` wants to drive in-process.
pub trait CardTarget {
    /// Starts the receiver: `fresh` on empty storage seeded with `initial`, otherwise on
    /// the storage it had (after a kill).
    fn start(
        &mut self,
        initial: &BTreeMap<String, CardReport>,
        fresh: bool,
    ) -> Result<(), HarnessError>;
    /// Sends one delivery's envelope bytes.
    fn deliver(
        &mut self,
        delivery: u32,
        body: &[u8],
        send: Sending,
    ) -> Result<Answer, HarnessError>;
    /// Sends an authority snapshot (`{"object_id", "version", "state"}`).
    fn reconcile(&mut self, snapshot: &Value) -> Result<Answer, HarnessError>;
    /// Reads the receiver's state.
    fn read(&mut self) -> Result<Observed, HarnessError>;
    /// Kills the receiver (its whole process group); [`CardTarget::start`] with
    /// `fresh = false` follows.
    fn kill(&mut self) -> Result<(), HarnessError>;
    /// Whether [`CardTarget::kill`] is possible.
    fn can_kill(&self) -> bool;
    /// The receiver's last log lines, for failure reports.
    fn log_tail(&self) -> Vec<String> {
        Vec::new()
    }
    /// The fixture's authority snapshots (`{"object_id", "version", "state"}` by card),
    /// given before the first schedule: a target whose receiver fetches them itself (an
    /// HTTP target in pull mode) serves these. Others ignore them.
    fn serve_authority(&mut self, _snapshots: &BTreeMap<String, Value>) {}
    /// The cards whose snapshot the receiver fetched from the authority on its own (not
    /// in answer to a reconciliation request) since the last call, in order: each may be
    /// a reconciliation it did. None by default.
    fn fetched(&mut self) -> Vec<String> {
        Vec::new()
    }
    /// How many times since the last call the target killed the receiver itself to settle
    /// a request it stopped waiting for (an HTTP disconnect or timeout): a kill like
    /// arrival's own, counted with them. None by default.
    fn own_kills(&mut self) -> u64 {
        0
    }
}

/// The fixture's authority snapshots by card, as [`CardTarget::serve_authority`] takes
/// them.
pub fn authority_snapshots(scenario: &Scenario) -> BTreeMap<String, Value> {
    scenario
        .raw
        .authority
        .iter()
        .map(|snapshot| {
            let value = json!({
                "object_id": snapshot.object_id,
                "version": snapshot.version,
                "state": snapshot.state,
            });
            (snapshot.object_id.clone(), value)
        })
        .collect()
}

/// What the run reads and compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Channels {
    /// Compare the acknowledgement's meaning.
    pub ack: bool,
    /// Compare the paused cards, when the target reports them.
    pub paused: bool,
    /// Compare the unresolved inputs, when the target reports them.
    pub unresolved: bool,
    /// Read the state after every step (otherwise only at the end).
    pub every_step: bool,
}

impl Channels {
    /// Everything.
    pub const ALL: Channels = Channels {
        ack: true,
        paused: true,
        unresolved: true,
        every_step: true,
    };

    /// The channel names besides the cards, for reports.
    pub fn names(self) -> Vec<String> {
        [
            (self.ack, "ack"),
            (self.paused, "paused"),
            (self.unresolved, "unresolved"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| (*name).to_owned())
        .collect()
    }
}

/// How one schedule is run.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// What is read and compared.
    pub channels: Channels,
    /// Retries of an owed delivery in the liveness phase.
    pub max_retries: usize,
    /// How long after sending a kill in flight comes, at most (milliseconds).
    pub kill_window_ms: u64,
    /// Seeds the kill-in-flight delays.
    pub seed: u64,
}

/// Where and why a schedule failed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Failure {
    /// The property broken, or `diverged`.
    pub property: String,
    /// The action (counted from 1) at which it showed; one past the schedule for the
    /// liveness phase.
    pub step: usize,
    /// What was expected and what was seen.
    pub detail: String,
    /// Whether a card's version was seen to go down (the most direct witness).
    pub regressed: bool,
}

/// One schedule's run.
#[derive(Clone, Debug, Default)]
pub struct Run {
    /// The failure, if any.
    pub failure: Option<Failure>,
    /// Whether the schedule is one the model allows (a reconcile of a card no candidate
    /// could reconcile is not).
    pub valid: bool,
    /// Counts.
    pub counts: Counts,
    /// What was answered and seen, step by step.
    pub log: Vec<Value>,
    /// Whether a restart or kill happened.
    pub killed: bool,
    /// Whether the target reported its paused cards.
    pub paused_reported: bool,
    /// Whether the target reported its unresolved inputs.
    pub unresolved_reported: bool,
    /// Whether an acknowledgement carried its meaning (`applied`, `ignored`, `held`).
    pub ack_reported: bool,
    /// The actions the liveness phase took, in order (so that a failure there can be
    /// replayed as a schedule).
    pub liveness: Vec<Action>,
    /// Words an acknowledgement carried that are not the contract's (taken as no meaning).
    pub unknown_words: BTreeSet<String>,
    /// One model path the receiver's answers and states fit, by action (1-based, the
    /// liveness phase's actions after the schedule's): a kill in flight is `ack lost` when
    /// every world left had the delivery recorded. On a failure it ends before the failing
    /// action, which no world fits.
    pub model_path: Vec<(usize, Step)>,
    /// The cards the receiver fetched from the authority on its own, by the action after
    /// which arrival saw the fetch (each taken as a reconciliation it may have done).
    pub own_fetches: Vec<(usize, String)>,
    /// Reconciliations of the schedule not sent: no world allowed them, because the
    /// receiver had already reconciled the card on its own (a fetch of it seen earlier).
    pub reconciles_not_sent: usize,
    /// The actions (1-based) in which the receiver was killed or restarted, or left a
    /// request without a definite answer: where a record may have gone missing.
    pub crashes: Vec<usize>,
    /// The first action that sent each identity (an event id, or `delivery-N` for an input
    /// without one): a crash before it cannot have lost that identity's record.
    pub first_sent: BTreeMap<String, usize>,
    /// Deliveries acknowledged (reconciliations' answers not counted).
    pub delivery_acks: u64,
}

/// The cards a receiver fetched on its own during action `step` (of a run's
/// `own_fetches`).
fn fetched_at(own_fetches: &[(usize, String)], step: usize) -> Vec<&str> {
    let at_step = own_fetches.iter().filter(|(at, _)| *at == step);
    at_step.map(|(_, id)| id.as_str()).collect()
}

/// The meanings a delivery's acknowledgement may carry.
const ACKS: &[&str] = &["applied", "ignored", "held"];

/// The outcomes a reconciliation's acknowledgement may carry.
const OUTCOMES: &[&str] = &["created", "refused_behind", "confirmed", "replaced"];

/// Where the contract leaves a choice open, a receiver may take either reading; a world is
/// judged under the reading it was reached by (docs/conform.md, "Open readings").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reading {
    /// arrival's: a changed payload's hold is filed under the card the variant names.
    Arrival,
    /// Under the card its id's first record names.
    FirstCard,
}

impl Reading {
    fn transition(self, scenario: &Scenario, world: &World, step: Step) -> (World, Effect) {
        match self {
            Reading::Arrival => transition(scenario, Spec, world, step),
            Reading::FirstCard => transition(scenario, FirstCardReading, world, step),
        }
    }

    /// The world a receiver that lost every record of this delivery's identity would reach
    /// by deciding it again, and the acknowledgement it would give.
    fn afresh(self, world: &World, delivery: u32, event: &Event) -> (World, &'static str) {
        let (receiver, delivered) = match self {
            Reading::Arrival => world.receiver.decide_afresh(Spec, delivery, event),
            Reading::FirstCard => world
                .receiver
                .decide_afresh(FirstCardReading, delivery, event),
        };
        let world = World {
            receiver: std::sync::Arc::new(receiver),
            ..world.clone()
        };
        (world, delivered.ack.name())
    }
}

/// One world with what the receiver should have answered on the way to it.
#[derive(Clone)]
struct Branch {
    world: World,
    reading: Reading,
    /// The candidate world it came from, and the model step taken (none: nothing happened).
    from: usize,
    steps: Vec<Step>,
    word: Option<&'static str>,
    verdict: Option<Verdict>,
    recorded: bool,
}

/// The properties a run can name a failure by, besides `diverged`: the ones a receiver's
/// answers and state can show broken. The others (`first-record-immutable`,
/// `reconciliation-settles-holds`, ...) are about records and steps no channel shows one
/// by one; a breach of them shows as one of these or as `diverged`.
pub const NAMEABLE: [Property; 8] = [
    Property::NoUnknownCard,
    Property::VersionMonotonic,
    Property::PausedFrozen,
    Property::HeldChangesNothing,
    Property::AckImpliesRecorded,
    Property::DuplicateNoEffect,
    Property::EvidenceRetained,
    Property::Convergence,
];

/// Runs one schedule against a freshly reset target, then the liveness phase.
pub fn run_schedule(
    scenario: &Scenario,
    target: &mut dyn CardTarget,
    actions: &[Action],
    settings: &Settings,
) -> Result<Run, HarnessError> {
    let mut runner = Runner::new(scenario, target, settings)?;
    runner.run.valid = true;
    for (index, &action) in actions.iter().enumerate() {
        if !runner.act(index + 1, action)? {
            return Ok(runner.run);
        }
    }
    runner.liveness(actions.len() + 1)?;
    Ok(runner.run)
}

struct Runner<'a> {
    scenario: &'a Scenario,
    target: &'a mut dyn CardTarget,
    settings: &'a Settings,
    candidates: Candidates<World>,
    /// For each candidate world, the model path that reached it first.
    paths: Vec<Vec<(usize, Step)>>,
    /// For each candidate world, the reading it was reached by.
    readings: Vec<Reading>,
    last: Option<Observed>,
    /// Every read so far, the reset's first.
    reads: Vec<Observed>,
    run: Run,
}

impl<'a> Runner<'a> {
    fn new(
        scenario: &'a Scenario,
        target: &'a mut dyn CardTarget,
        settings: &'a Settings,
    ) -> Result<Runner<'a>, HarnessError> {
        let start = World::initial(scenario, Budgets::UNLIMITED);
        let initial = project(scenario, &start);
        target.start(&initial.cards, true)?;
        let seen = target.read()?;
        if !fits(&initial, &seen, &Channels::ALL) {
            return Err(HarnessError {
                what: "reset".into(),
                message: format!(
                    "reset not verified: after a fresh start the receiver shows {}, not the \
                     fixture's initial cards {}",
                    compact(&seen),
                    compact(&initial)
                ),
            });
        }
        Ok(Runner {
            scenario,
            target,
            settings,
            candidates: Candidates::exactly(vec![start.clone(), start]),
            paths: vec![Vec::new(), Vec::new()],
            readings: vec![Reading::Arrival, Reading::FirstCard],
            last: Some(seen.clone()),
            reads: vec![seen],
            run: Run::default(),
        })
    }

    /// One action; `false` when the schedule stops (a failure, or a schedule the model
    /// does not allow).
    fn act(&mut self, step: usize, action: Action) -> Result<bool, HarnessError> {
        if let Action::Deliver { delivery, .. } = action {
            let identity = self.identity(delivery);
            self.run.first_sent.entry(identity).or_insert(step);
        }
        let crashes = self.run.counts.kills + self.run.counts.indefinite;
        let going_on = self.act_on(step, action)?;
        if self.run.counts.kills + self.run.counts.indefinite > crashes {
            self.run.crashes.push(step);
        }
        Ok(going_on)
    }

    /// The identity of a delivery: its event id, or `delivery-N` without one.
    fn identity(&self, delivery: u32) -> String {
        let scenario = self.scenario;
        let index = scenario
            .delivery_index(delivery)
            .expect("an existing delivery");
        let input = match scenario.deliveries[index].event.event_id {
            Some(id) => InputRef::Event(id),
            None => InputRef::Delivery(delivery),
        };
        scenario.input_name(input)
    }

    /// Whether the receiver crashed (killed, restarted, or silent on a request) after
    /// `action`'s identity was first sent and before `step`: only then can its record be
    /// missing beside its effect. This step's own kill, after its answer, does not count.
    fn crashed_since_sent(&self, step: usize, action: Action) -> bool {
        let since = match action {
            Action::Deliver { delivery, .. } => self.run.first_sent[&self.identity(delivery)],
            _ => 0,
        };
        (self.run.crashes.iter()).any(|&at| at >= since && at < step)
    }

    fn act_on(&mut self, step: usize, action: Action) -> Result<bool, HarnessError> {
        let (answer, branches) = match action {
            Action::Deliver { delivery, fault } => self.deliver(delivery, fault)?,
            Action::Reconcile(card) => match self.reconcile(card)? {
                Some(outcome) => outcome,
                None if self.fetched_before(card) => {
                    self.run.reconciles_not_sent += 1;
                    return Ok(true);
                }
                None => {
                    self.run.valid = false;
                    return Ok(false);
                }
            },
            Action::Restart => {
                self.restart()?;
                (Answer::Ack(None), self.unchanged())
            }
        };
        self.settle(step, action, &answer, branches, false)
    }

    fn deliver(
        &mut self,
        delivery: u32,
        fault: Option<External>,
    ) -> Result<(Answer, Vec<Branch>), HarnessError> {
        let index = self
            .scenario
            .delivery_index(delivery)
            .expect("schedules name existing deliveries");
        let raw = &self.scenario.raw.deliveries[index].event;
        let body = match fault {
            Some(External::Reencoded) => crate::card::fixture::reencode(raw).into_bytes(),
            _ => serde_json::to_vec(raw).expect("JSON values serialise"),
        };
        let send = match fault {
            Some(External::Disconnect) => Sending::Disconnect,
            Some(External::Kill) if self.target.can_kill() => {
                Sending::KillAfter(crate::harness::conform::kill_delay(
                    self.settings.seed,
                    delivery,
                    self.settings.kill_window_ms,
                ))
            }
            Some(External::Kill) => Sending::Disconnect,
            _ => Sending::Wait,
        };
        self.run.counts.attempted += 1;
        let answer = self.target.deliver(delivery, &body, send)?;
        let answer = self.known_word(answer, ACKS);
        self.count(&answer, fault);
        self.count_own_kills();
        self.run.delivery_acks += u64::from(matches!(answer, Answer::Ack(_)));
        // A delivery's meaning (a reconciliation's outcome word is another channel).
        self.run.ack_reported |= matches!(&answer, Answer::Ack(Some(_)));
        if matches!(send, Sending::KillAfter(_)) {
            self.run.counts.kills += 1;
            self.run.killed = true;
            self.target.start(&BTreeMap::new(), false)?;
        }
        if fault == Some(External::KillAfterAck) && self.target.can_kill() {
            self.restart()?;
        }
        let steps = delivery_branches(delivery, fault, &answer);
        let branches = self.branch(&steps);
        Ok((answer, branches))
    }

    /// Whether the receiver fetched `card` from the authority on its own earlier in this
    /// schedule.
    fn fetched_before(&self, card: crate::card::wire::Sym) -> bool {
        let name = self.scenario.catalog.name(card);
        self.run.own_fetches.iter().any(|(_, id)| id == name)
    }

    /// An acknowledgement whose word is not one of `words` carries no meaning: the word is
    /// kept aside for the report's warning, never compared with the contract's.
    fn known_word(&mut self, answer: Answer, words: &[&str]) -> Answer {
        match answer {
            Answer::Ack(Some(word)) if !words.contains(&word.as_str()) => {
                self.run.unknown_words.insert(word);
                Answer::Ack(None)
            }
            answer => answer,
        }
    }

    fn count(&mut self, answer: &Answer, fault: Option<External>) {
        match answer {
            Answer::Ack(_) => {
                self.run.counts.acknowledged += 1;
                if fault == Some(External::LostAck) {
                    self.run.counts.dropped_by_arrival += 1;
                }
            }
            Answer::Definite(_) => {}
            Answer::Indefinite(_) => {
                self.run.counts.indefinite += 1;
                if matches!(fault, Some(External::Disconnect) | Some(External::Kill)) {
                    self.run.counts.cut_by_arrival += 1;
                }
            }
        }
    }

    /// The target's own kills ([`CardTarget::own_kills`]), counted as kills.
    fn count_own_kills(&mut self) {
        let own = self.target.own_kills();
        self.run.counts.kills += own;
        self.run.killed |= own > 0;
    }

    fn restart(&mut self) -> Result<(), HarnessError> {
        if !self.target.can_kill() {
            return Ok(());
        }
        self.target.kill()?;
        self.run.counts.kills += 1;
        self.run.killed = true;
        self.target.start(&BTreeMap::new(), false)
    }

    fn reconcile(
        &mut self,
        card: crate::card::wire::Sym,
    ) -> Result<Option<(Answer, Vec<Branch>)>, HarnessError> {
        let scenario = self.scenario;
        if !self
            .candidates
            .worlds()
            .iter()
            .any(|world| world.reconcilable(scenario, card))
        {
            return Ok(None);
        }
        let snapshot = scenario
            .authority_for(card)
            .expect("reconciled cards have authority");
        let body = json!({
            "object_id": scenario.catalog.name(card),
            "version": snapshot.version,
            "state": scenario.catalog.state_value(snapshot.state),
        });
        self.run.counts.attempted += 1;
        let answer = self.target.reconcile(&body)?;
        let answer = self.known_word(answer, OUTCOMES);
        self.count(&answer, None);
        self.count_own_kills();
        let steps: Vec<Option<Step>> = match answer {
            Answer::Ack(_) => vec![Some(Step::Reconcile(card))],
            Answer::Definite(_) => vec![None],
            Answer::Indefinite(_) => vec![Some(Step::Reconcile(card)), None],
        };
        let branches = self.branch(&steps);
        Ok(Some((answer, branches)))
    }

    /// Every candidate world through every model step the action may have been.
    fn branch(&self, steps: &[Option<Step>]) -> Vec<Branch> {
        let mut out: Vec<Branch> = Vec::new();
        for (from, world) in self.candidates.worlds().iter().enumerate() {
            for step in steps {
                let branch = match *step {
                    None => Branch::same(from, world, self.readings[from]),
                    Some(step) => {
                        step_branch(self.scenario, from, world, self.readings[from], step)
                    }
                };
                if !out.iter().any(|other| other.same_expectation(&branch)) {
                    out.push(branch);
                }
            }
        }
        out
    }

    /// Each card the receiver fetched from the authority on its own since the last action
    /// may be a reconciliation it did after the action: every branch also goes on through
    /// it. A fetch of a card the fixture's authority
    /// does not have (the authority answered 404) changes nothing.
    fn with_own_fetches(&mut self, step: usize, mut branches: Vec<Branch>) -> Vec<Branch> {
        let scenario = self.scenario;
        for id in self.target.fetched() {
            let Some(card) = scenario.catalog.find(&id) else {
                continue;
            };
            if scenario.authority_for(card).is_none() {
                continue;
            }
            self.run.own_fetches.push((step, id));
            let mut next = Vec::with_capacity(branches.len() * 2);
            for branch in branches {
                // The contract lets a receiver reconcile only a paused card or one it does
                // not know yet: a fetch of any other changes nothing (what the receiver
                // did with it shows in its state).
                if branch.world.reconcilable(scenario, card) {
                    let (world, _) =
                        branch
                            .reading
                            .transition(scenario, &branch.world, Step::Reconcile(card));
                    let mut steps = branch.steps.clone();
                    steps.push(Step::Reconcile(card));
                    let reconciled = Branch {
                        world,
                        steps,
                        ..branch.clone()
                    };
                    if !next
                        .iter()
                        .any(|other: &Branch| other.same_expectation(&reconciled))
                    {
                        next.push(reconciled);
                    }
                }
                if !next
                    .iter()
                    .any(|other: &Branch| other.same_expectation(&branch))
                {
                    next.push(branch);
                }
            }
            branches = next;
        }
        branches
    }

    /// Every candidate world, unchanged (a restart, the final read).
    fn unchanged(&self) -> Vec<Branch> {
        let worlds = self.candidates.worlds().iter().enumerate();
        worlds
            .map(|(from, world)| Branch::same(from, world, self.readings[from]))
            .collect()
    }

    /// Filters the branches by the answer and (when read) the state; names the property
    /// when nothing is left.
    fn settle(
        &mut self,
        step: usize,
        action: Action,
        answer: &Answer,
        branches: Vec<Branch>,
        last_read: bool,
    ) -> Result<bool, HarnessError> {
        let branches = self.with_own_fetches(step, branches);
        let channels = self.settings.channels;
        let word = match answer {
            Answer::Ack(Some(word)) if channels.ack => Some(word.as_str()),
            _ => None,
        };
        let answered: Vec<Branch> = branches
            .iter()
            .filter(|branch| match (word, branch.word) {
                (Some(seen), Some(expected)) => seen == expected,
                _ => true,
            })
            .cloned()
            .collect();
        let read = channels.every_step || last_read;
        let seen = if read {
            Some(self.target.read()?)
        } else {
            None
        };
        let kept: Vec<Branch> = answered
            .into_iter()
            .filter(|branch| {
                seen.as_ref().is_none_or(|seen| {
                    fits(&project(self.scenario, &branch.world), seen, &channels)
                })
            })
            .collect();
        self.log(step, action, answer, seen.as_ref());
        let fetched = fetched_at(&self.run.own_fetches, step);
        if !fetched.is_empty() {
            let entry = self.run.log.last_mut().expect("just logged");
            entry["own_fetches"] = json!(fetched);
        }
        self.run.paused_reported |= seen.as_ref().is_some_and(|seen| seen.paused.is_some());
        self.run.unresolved_reported |= seen.as_ref().is_some_and(|seen| seen.unresolved.is_some());
        if kept.is_empty() {
            let failure = self.name(step, action, answer, &branches, seen.as_ref(), last_read);
            self.run.failure = Some(failure);
            self.run.model_path = self.paths[0].clone();
            return Ok(false);
        }
        if kept.iter().all(|branch| branch.recorded)
            && matches!(answer, Answer::Indefinite(_))
            && seen.is_some()
        {
            self.run.counts.recovered += 1;
        }
        self.keep(step, kept);
        if let Some(seen) = seen {
            self.reads.push(seen.clone());
            self.last = Some(seen);
        }
        Ok(true)
    }

    /// The kept branches become the candidates (equal worlds under one reading once, by
    /// the first path).
    fn keep(&mut self, step: usize, kept: Vec<Branch>) {
        let mut unique: Vec<Branch> = Vec::new();
        for branch in kept {
            if !unique.iter().any(|other| other.same_as(&branch)) {
                unique.push(branch);
            }
        }
        let paths: Vec<_> = unique
            .iter()
            .map(|branch| {
                let mut path = self.paths[branch.from].clone();
                path.extend(branch.steps.iter().map(|&taken| (step, taken)));
                path
            })
            .collect();
        self.run.model_path = paths[0].clone();
        self.readings = unique.iter().map(|branch| branch.reading).collect();
        self.candidates = Candidates::exactly(unique.into_iter().map(|b| b.world).collect());
        self.paths = paths;
    }

    fn log(&mut self, step: usize, action: Action, answer: &Answer, seen: Option<&Observed>) {
        let answer = match answer {
            Answer::Ack(word) => json!({"ack": word}),
            Answer::Definite(why) => json!({"definite": why}),
            Answer::Indefinite(why) => json!({"indefinite": why}),
        };
        let mut entry = json!({
            "step": step,
            "action": describe_action(self.scenario, action),
            "answer": answer,
        });
        if let Some(seen) = seen {
            entry["state"] = serde_json::to_value(seen).expect("observations serialise");
        }
        self.run.log.push(entry);
    }

    /// Faults stop: owed deliveries are retried, paused cards reconciled, then the
    /// terminal is read and compared.
    fn liveness(&mut self, step: usize) -> Result<(), HarnessError> {
        for _ in 0..self.settings.max_retries.max(1) {
            let owed: Vec<u32> = {
                let world = &self.candidates.worlds()[0];
                self.scenario
                    .deliveries
                    .iter()
                    .enumerate()
                    .filter(|(index, _)| world.owes(*index))
                    .map(|(_, delivery)| delivery.number)
                    .collect()
            };
            if owed.is_empty() {
                break;
            }
            for delivery in owed {
                let action = Action::Deliver {
                    delivery,
                    fault: None,
                };
                self.run.liveness.push(action);
                if !self.act(step + self.run.liveness.len() - 1, action)? {
                    return Ok(());
                }
            }
        }
        for _ in 0..(2 * self.scenario.authority.len() + 1) {
            let scenario = self.scenario;
            let open: Vec<crate::card::wire::Sym> = scenario
                .authority
                .iter()
                .filter(|snapshot| {
                    self.candidates
                        .worlds()
                        .iter()
                        .any(|world| world.is_open(scenario, snapshot))
                })
                .map(|snapshot| snapshot.object_id)
                .collect();
            if open.is_empty() {
                break;
            }
            for card in open {
                if let Some((answer, branches)) = self.reconcile(card)? {
                    self.run.liveness.push(Action::Reconcile(card));
                    let at = step + self.run.liveness.len() - 1;
                    if !self.settle(at, Action::Reconcile(card), &answer, branches, false)? {
                        return Ok(());
                    }
                }
            }
        }
        let same = self.unchanged();
        let at = step + self.run.liveness.len();
        let done = self.settle(at, Action::Restart, &Answer::Ack(None), same, true)?;
        if done
            && !self
                .candidates
                .worlds()
                .iter()
                .all(|w| w.is_terminal(self.scenario))
        {
            self.run.failure = Some(Failure {
                property: "convergence".into(),
                step: at,
                detail: self.still_owed(),
                regressed: false,
            });
        }
        Ok(())
    }

    /// What a world left still owes after the liveness phase, in words (the first that is
    /// not terminal).
    fn still_owed(&self) -> String {
        let scenario = self.scenario;
        let worlds = self.candidates.worlds();
        let world = worlds
            .iter()
            .find(|world| !world.is_terminal(scenario))
            .unwrap_or(&worlds[0]);
        let deliveries: Vec<String> = scenario
            .deliveries
            .iter()
            .enumerate()
            .filter(|(index, _)| world.owes(*index))
            .map(|(_, delivery)| format!("#{}", delivery.number))
            .collect();
        let cards: Vec<&str> = scenario
            .authority
            .iter()
            .filter(|snapshot| world.is_open(scenario, snapshot))
            .map(|snapshot| scenario.catalog.name(snapshot.object_id))
            .collect();
        let mut owed = Vec::new();
        if !deliveries.is_empty() {
            owed.push(format!(
                "an acknowledgement of deliveries {} (retried up to {} times)",
                deliveries.join(", "),
                self.settings.max_retries
            ));
        }
        if !cards.is_empty() {
            owed.push(format!(
                "a reconciliation that resolves cards {} (each reconciled up to {} times)",
                cards.join(", "),
                2 * scenario.authority.len() + 1
            ));
        }
        format!(
            "after the faults stopped, the receiver still owes {}",
            owed.join(", and ")
        )
    }

    fn name(
        &mut self,
        step: usize,
        action: Action,
        answer: &Answer,
        branches: &[Branch],
        seen: Option<&Observed>,
        last_read: bool,
    ) -> Failure {
        let naming = Naming {
            scenario: self.scenario,
            action,
            answer,
            before: self.candidates.worlds(),
            branches,
            seen,
            last: self.last.as_ref(),
            channels: self.settings.channels,
            final_read: last_read,
            crashed: self.crashed_since_sent(step, action),
            fetched: fetched_at(&self.run.own_fetches, step),
            reads: &self.reads,
        };
        let regressed_before = self.run.counts.regressed;
        let property = naming.property(&mut self.run.counts);
        let regressed = self.run.counts.regressed > regressed_before;
        let property = match property {
            Some(property) => property.to_owned(),
            None if last_read => "convergence".to_owned(),
            None => "diverged".to_owned(),
        };
        let note = match property.as_str() {
            "ack-implies-recorded" => naming.redecided_note(),
            "diverged" => naming
                .misanswered_duplicate()
                .or_else(|| naming.unreported_hold())
                .or_else(|| naming.half_recorded_note())
                .or_else(|| naming.gone_at_kill_note())
                .or_else(|| naming.unread_variant_note()),
            _ => None,
        };
        let detail = match note {
            Some(note) => format!("{note}\n{}", naming.diff()),
            None => naming.diff(),
        };
        Failure {
            property,
            step,
            detail,
            regressed,
        }
    }
}

/// The model steps an action with this answer may have been (`None`: nothing happened).
fn delivery_branches(delivery: u32, fault: Option<External>, answer: &Answer) -> Vec<Option<Step>> {
    let step = |fault| Some(Step::Deliver { delivery, fault });
    let unknown = vec![step(Some(Fault::Crash)), step(Some(Fault::AckLost))];
    match fault {
        Some(External::Disconnect) | Some(External::Kill) => unknown,
        Some(External::Duplicate) | Some(External::Reencoded) => {
            let copy = if fault == Some(External::Duplicate) {
                step(Some(Fault::Duplicate))
            } else {
                step(Some(Fault::Reencoded))
            };
            match answer {
                Answer::Ack(_) => vec![copy],
                Answer::Definite(_) => vec![None],
                Answer::Indefinite(_) => vec![copy, None],
            }
        }
        Some(External::LostAck) => match answer {
            Answer::Ack(_) => vec![step(Some(Fault::AckLost))],
            Answer::Definite(_) => vec![None],
            Answer::Indefinite(_) => unknown,
        },
        None | Some(External::KillAfterAck) => match answer {
            Answer::Ack(_) => vec![step(None)],
            Answer::Definite(_) => vec![None],
            Answer::Indefinite(_) => unknown,
        },
    }
}

impl Branch {
    /// The world as it was: nothing happened.
    fn same(from: usize, world: &World, reading: Reading) -> Branch {
        Branch {
            world: world.clone(),
            reading,
            from,
            steps: Vec::new(),
            word: None,
            verdict: None,
            recorded: false,
        }
    }
}

impl Branch {
    /// The same world under the same reading.
    fn same_as(&self, other: &Branch) -> bool {
        self.reading == other.reading && self.world == other.world
    }

    /// The same world under the same reading, reached with the same answer, decision and
    /// record: two ways to one world that answer differently are two expectations (an
    /// indefinite reconciliation followed by another reaches one world whether the first
    /// landed or not, answered `confirmed` or `replaced`; keeping only the first was a
    /// false `diverged`).
    fn same_expectation(&self, other: &Branch) -> bool {
        self.same_as(other)
            && self.word == other.word
            && self.verdict == other.verdict
            && self.recorded == other.recorded
    }
}

fn step_branch(
    scenario: &Scenario,
    from: usize,
    world: &World,
    reading: Reading,
    step: Step,
) -> Branch {
    let (next, effect) = reading.transition(scenario, world, step);
    let (word, verdict, recorded) = match effect {
        Effect::Delivered { delivered, .. } => match delivered {
            Some(delivered) => (Some(delivered.ack.name()), Some(delivered.verdict), true),
            None => (None, None, false),
        },
        Effect::Reconciled(reconciled) => (Some(reconciled.outcome.name()), None, true),
        Effect::Expired(_) => (None, None, true),
    };
    Branch {
        world: next,
        reading,
        from,
        steps: vec![step],
        word,
        verdict,
        recorded,
    }
}

/// The items `before` listed and `now` does not, when the channel is read.
fn gone_items<'s>(
    read: bool,
    now: &Option<BTreeSet<String>>,
    before: &'s Option<BTreeSet<String>>,
) -> Vec<&'s String> {
    match (read, now, before) {
        (true, Some(now), Some(before)) => {
            before.iter().filter(|item| !now.contains(*item)).collect()
        }
        _ => Vec::new(),
    }
}

/// A world as a target would show it.
pub fn project(scenario: &Scenario, world: &World) -> Observed {
    let catalog = &scenario.catalog;
    let cards = world
        .receiver
        .cards()
        .iter()
        .map(|(id, card)| {
            let report = CardReport {
                version: card.version,
                state: catalog.state_value(card.state).clone(),
            };
            (catalog.name(id).to_owned(), report)
        })
        .collect();
    let paused = world
        .receiver
        .paused()
        .map(|card| catalog.name(card).to_owned())
        .collect();
    let unresolved = world
        .receiver
        .unresolved()
        .into_iter()
        .map(|input| scenario.input_name(input))
        .collect();
    Observed {
        cards,
        paused: Some(paused),
        unresolved: Some(unresolved),
    }
}

/// Whether an observation fits the model's projection on the channels compared.
pub fn fits(model: &Observed, seen: &Observed, channels: &Channels) -> bool {
    let optional = |on: bool, model: &Option<BTreeSet<String>>, seen: &Option<BTreeSet<String>>| {
        !on || seen.is_none() || model == seen
    };
    model.cards == seen.cards
        && optional(channels.paused, &model.paused, &seen.paused)
        && optional(channels.unresolved, &model.unresolved, &seen.unresolved)
}

fn compact(observed: &Observed) -> String {
    serde_json::to_string(observed).expect("observations serialise")
}

/// An action in domain terms: `deliver #3 (kill after ack)`.
pub fn describe_action(scenario: &Scenario, action: Action) -> String {
    match action {
        Action::Deliver { delivery, fault } => {
            let fault = match fault {
                None => "",
                Some(External::LostAck) => " (ack read and dropped)",
                Some(External::Duplicate) => " (duplicate)",
                Some(External::Reencoded) => " (re-encoded copy)",
                Some(External::Disconnect) => " (disconnect)",
                Some(External::Kill) => " (kill in flight)",
                Some(External::KillAfterAck) => " (kill after ack)",
            };
            format!("deliver #{delivery}{fault}")
        }
        Action::Reconcile(card) => format!("reconcile {}", scenario.catalog.name(card)),
        Action::Restart => "restart".into(),
    }
}

/// What the naming of a failed step reads.
struct Naming<'a> {
    scenario: &'a Scenario,
    action: Action,
    answer: &'a Answer,
    before: &'a [World],
    branches: &'a [Branch],
    seen: Option<&'a Observed>,
    last: Option<&'a Observed>,
    channels: Channels,
    final_read: bool,
    /// Whether the receiver was killed, or left a request without a definite answer, after
    /// this delivery's identity was first sent and before this step
    /// ([`Runner::crashed_since_sent`]).
    crashed: bool,
    /// The cards the receiver fetched from the authority on its own during this step:
    /// each may have been reconciled, so no rule about what a delivery may not change
    /// names a change to it.
    fetched: Vec<&'a str>,
    /// Every read before this step, the reset's first.
    reads: &'a [Observed],
}

impl Naming<'_> {
    /// The contract property the observations witness, if one does.
    fn property(&self, counts: &mut Counts) -> Option<&'static str> {
        if let Some(name) = self.lost_after_kill() {
            counts.lost += 1;
            return Some(name);
        }
        if let Some(seen) = self.seen {
            let known = |name: &String| {
                self.before
                    .iter()
                    .chain(self.branches.iter().map(|branch| &branch.world))
                    .any(|world| {
                        self.scenario
                            .catalog
                            .find(name)
                            .is_some_and(|id| world.receiver.cards().contains_key(&id))
                    })
            };
            if seen.cards.keys().any(|name| !known(name)) {
                counts.unexpected += 1;
                return Some("no-unknown-card");
            }
            if let Some(last) = self.last {
                let regressed = seen.cards.iter().any(|(name, card)| {
                    last.cards
                        .get(name)
                        .is_some_and(|before| card.version < before.version)
                });
                if regressed {
                    counts.regressed += 1;
                    return Some("version-monotonic");
                }
                // A card fetched during the step may have been replaced at its version.
                let rewritten = seen.cards.iter().any(|(name, card)| {
                    !self.fetched.contains(&name.as_str())
                        && last.cards.get(name).is_some_and(|before| {
                            card.version == before.version && card.state != before.state
                        })
                });
                if rewritten && matches!(self.action, Action::Deliver { .. }) {
                    // A delivery every world takes for a duplicate may change nothing at
                    // all: that is the rule it broke, whichever card it rewrote.
                    return Some(if self.all_duplicates() {
                        "duplicate-no-effect"
                    } else {
                        "version-monotonic"
                    });
                }
            }
        }
        if self.swallowed() {
            counts.changed_payloads_swallowed += 1;
            return Some("evidence-retained");
        }
        if let Some(name) = self.changed_cards() {
            return Some(name);
        }
        if self.duplicate_changed_state() {
            return Some("duplicate-no-effect");
        }
        self.redecided().then_some("ack-implies-recorded")
    }

    /// An acknowledged decision missing after a kill right after its acknowledgement, or
    /// state lost across a restart.
    fn lost_after_kill(&self) -> Option<&'static str> {
        let seen = self.seen?;
        if self.final_read {
            return None;
        }
        match self.action {
            Action::Deliver {
                fault: Some(External::KillAfterAck),
                ..
            } if matches!(self.answer, Answer::Ack(_)) && self.lost_since_last_read(seen) => {
                Some("ack-implies-recorded")
            }
            Action::Deliver {
                fault: Some(External::Kill) | Some(External::Disconnect),
                ..
            } if self.lost_since_last_read(seen) => Some("ack-implies-recorded"),
            // Only with the answer's word compared: a wrong decision that changes nothing
            // looks the same as a lost one.
            Action::Deliver {
                fault: Some(External::KillAfterAck),
                ..
            } if matches!(self.answer, Answer::Ack(Some(_))) && self.channels.ack => {
                let unrecorded = self
                    .before
                    .iter()
                    .any(|world| fits(&project(self.scenario, world), seen, &self.channels));
                let changes = self.visible_changes();
                let seen_lost = changes.iter().all(|&(hold_only, _)| !hold_only);
                (unrecorded && !changes.is_empty() && seen_lost).then_some("ack-implies-recorded")
            }
            Action::Restart => {
                let last = self.last?;
                let lost = last.cards.iter().any(|(name, card)| {
                    seen.cards
                        .get(name)
                        .is_none_or(|now| now.version < card.version)
                });
                (lost || self.lost_waiting(seen)).then_some("ack-implies-recorded")
            }
            _ => None,
        }
    }

    /// The branches the answer's word fits whose state differs, on the channels compared,
    /// from the state before the step: for each, whether only its unresolved inputs differ,
    /// and its decision. A word no branch has is a wrong decision, not a lost one.
    fn visible_changes(&self) -> Vec<(bool, &'static str)> {
        let before = project(self.scenario, &self.before[0]);
        let changed = self.answered().filter_map(|branch| {
            let after = project(self.scenario, &branch.world);
            let hold_only = after.cards == before.cards && self.same_pauses(&after, &before);
            let decision = branch
                .verdict
                .map_or("", |verdict| verdict.decision().name());
            (!fits(&after, &before, &self.channels)).then_some((hold_only, decision))
        });
        changed.collect()
    }

    /// The branches whose word is the one the receiver answered (all of them when no word
    /// was read).
    fn answered(&self) -> impl Iterator<Item = &Branch> {
        let word = match self.answer {
            Answer::Ack(Some(word)) if self.channels.ack => Some(word.as_str()),
            _ => None,
        };
        (self.branches.iter())
            .filter(move |branch| word.is_none() || branch.word.is_none_or(|w| Some(w) == word))
    }

    /// Whether two states have the same paused cards, as far as this read compares them.
    fn same_pauses(&self, one: &Observed, other: &Observed) -> bool {
        let compared = self.channels.paused && self.seen.is_some_and(|seen| seen.paused.is_some());
        !compared || one.paused == other.paused
    }

    /// After a kill right after an acknowledgement, a state without the hold the decision
    /// left and nothing else missing: the hold may be lost, or the target may leave such
    /// holds out of its report (by kind, or by any condition: an earlier hold shown proves
    /// nothing about this one). Both look the same.
    fn unreported_hold(&self) -> Option<String> {
        let killed = matches!(
            self.action,
            Action::Deliver {
                fault: Some(External::KillAfterAck),
                ..
            }
        );
        let seen = self.seen?;
        let hold_only = (self.visible_changes().into_iter())
            .find(|&(hold_only, _)| hold_only)
            .map(|(_, decision)| decision);
        // Or the state shows everything the decision did but the input it leaves.
        let all_but_hold = self.answered().find(|branch| {
            let model = project(self.scenario, &branch.world);
            model.cards == seen.cards
                && self.same_pauses(&model, seen)
                && seen.unresolved.is_some()
                && model.unresolved != seen.unresolved
        });
        let decision = hold_only.or_else(|| {
            all_but_hold.and_then(|branch| branch.verdict.map(|v| v.decision().name()))
        });
        let decision = decision.filter(|_| killed)?;
        Some(format!(
            "note: the receiver was killed right after acknowledging this input, and the \
             state lacks the input the decision (`{decision}`) leaves unresolved, with \
             nothing else of the decision missing. Its record may be lost \
             (ack-implies-recorded), or the target may leave such inputs out of its \
             unresolved report; from outside both look the same, so arrival names no \
             property"
        ))
    }

    /// Whether an unresolved input or a paused card the last read showed is gone, in a step
    /// with no reconciliation (only one settles a hold or lifts a pause; the receiver's own
    /// fetches during the step may have been one, so a step with any is not judged here).
    fn lost_waiting(&self, seen: &Observed) -> bool {
        let Some(last) = self.last else {
            return false;
        };
        // Only where no decision ran (a restart): on a delivery with a kill, a hold or pause
        // gone may be lost at the kill or taken by the decision, wrongly, on any card, and
        // both look the same ([`Naming::gone_at_kill_note`]).
        let inputs = gone_items(self.channels.unresolved, &seen.unresolved, &last.unresolved);
        let pauses = gone_items(self.channels.paused, &seen.paused, &last.paused);
        self.fetched.is_empty() && (!inputs.is_empty() || !pauses.is_empty())
    }

    /// After a delivery with a kill, an unresolved input or paused card the last read
    /// showed is gone: lost at the kill, or taken by the decision; a note, not a name.
    fn gone_at_kill_note(&self) -> Option<String> {
        let (seen, last) = (self.seen?, self.last?);
        let inputs = gone_items(self.channels.unresolved, &seen.unresolved, &last.unresolved);
        let pauses = gone_items(self.channels.paused, &seen.paused, &last.paused);
        let gone: Vec<&str> = inputs
            .iter()
            .chain(&pauses)
            .map(|item| item.as_str())
            .collect();
        (self.killed_in_delivery() && !gone.is_empty() && self.fetched.is_empty()).then(|| {
            format!(
                "note: after this delivery the receiver was killed, and {} that the last \
                 read showed waiting (an unresolved input or a paused card) is gone. It may \
                 have been lost at the kill (ack-implies-recorded), or taken by the decision, \
                 wrongly; from outside both look the same, so arrival names no property",
                gone.join(", ")
            )
        })
    }

    /// Whether this step is a delivery with a kill or a disconnect in it.
    fn killed_in_delivery(&self) -> bool {
        matches!(
            self.action,
            Action::Deliver {
                fault: Some(External::KillAfterAck | External::Kill | External::Disconnect),
                ..
            }
        )
    }

    /// Whether a card the last read showed is gone, or back at a lower version that is not
    /// the one this action delivered (a kill that loses earlier acknowledged decisions;
    /// a receiver that applies the older version it was just sent breaks
    /// `version-monotonic` instead).
    fn lost_since_last_read(&self, seen: &Observed) -> bool {
        let Some(last) = self.last else {
            return false;
        };
        let delivered = self.delivered_event();
        last.cards
            .iter()
            .any(|(name, before)| match seen.cards.get(name) {
                None => true,
                Some(now) => {
                    let this_delivery = delivered.is_some_and(|event| {
                        event
                            .object_id
                            .is_some_and(|card| self.scenario.catalog.name(card) == name.as_str())
                            && event.version == crate::card::wire::Version::Valid(now.version)
                    });
                    now.version < before.version && !this_delivery
                }
            } && self.lost_not_decided(name, seen.cards.get(name)))
    }

    /// Whether a card's loss is not this step's own decision: the card is not the one the
    /// delivered event names, or an earlier read showed it as it is now (absent, or at
    /// this version and state). The step's own card in a state it never had (removed by a
    /// `card.deleted` a receiver wrongly applies, say) is a wrong decision, not a lost one.
    fn lost_not_decided(&self, name: &str, now: Option<&CardReport>) -> bool {
        let own = self.delivered_event().and_then(|event| event.object_id);
        own.is_none_or(|card| self.scenario.catalog.name(card) != name)
            || self.reads.iter().any(|read| read.cards.get(name) == now)
    }

    /// After an indefinite step, the decision's effect on the cards is there but the
    /// unresolved input it leaves is not: the decision was not stored whole, or the target
    /// leaves such inputs out of its report. Both look the same: a note, not a name.
    fn half_recorded_note(&self) -> Option<String> {
        self.half_recorded().then(|| {
            "note: after a request with no definite answer, the state shows the decision's \
             effect on the cards but not the input it leaves unresolved. The decision may \
             have been stored without its record (evidence-retained), or the target may \
             leave such inputs out of its unresolved report; from outside both look the \
             same, so arrival names no property"
                .to_owned()
        })
    }

    fn half_recorded(&self) -> bool {
        let Some(seen) = self.seen else {
            return false;
        };
        if !matches!(self.answer, Answer::Indefinite(_))
            || !self.channels.unresolved
            || seen.unresolved.is_none()
        {
            return false;
        }
        let shown = |branch: &Branch| project(self.scenario, &branch.world);
        let effect = self.branches.iter().any(|branch| {
            let model = shown(branch);
            branch.recorded
                && model.cards == seen.cards
                && (seen.paused.is_none() || model.paused == seen.paused)
                && model.unresolved != seen.unresolved
        });
        let record_missing = self
            .branches
            .iter()
            .any(|branch| !branch.recorded && shown(branch).unresolved == seen.unresolved);
        effect && record_missing
    }

    /// A changed payload acknowledged with a meaning other than `held`, and a state read
    /// with its unresolved inputs that does not show it kept (one that shows the input
    /// unresolved, as the model has it, means only the word is wrong: `diverged`; one
    /// without the unresolved inputs cannot tell: [`Naming::unread_variant_note`]).
    fn swallowed(&self) -> bool {
        let Some(seen) = self.unresolved_read() else {
            return false;
        };
        // Kept, as far as the state can tell, when its event id is among the unresolved
        // inputs (whatever else the state gets wrong: a pause missing is another bug).
        let Some(id) = self.delivered_event().and_then(|event| event.event_id) else {
            return false;
        };
        let name = self.scenario.catalog.name(id);
        let kept_in_state = seen
            .unresolved
            .as_ref()
            .is_some_and(|shown| shown.contains(name));
        !kept_in_state && self.misanswered_variant().is_some()
    }

    /// The state read after this step, when it lists the unresolved inputs.
    fn unresolved_read(&self) -> Option<&Observed> {
        self.seen
            .filter(|seen| self.channels.unresolved && seen.unresolved.is_some())
    }

    /// The word a changed payload every branch takes for one was acknowledged with, when
    /// it is not `held`.
    fn misanswered_variant(&self) -> Option<&str> {
        let Answer::Ack(Some(word)) = self.answer else {
            return None;
        };
        let variant = self.channels.ack
            && word != "held"
            && !self.branches.is_empty()
            && self.branches.iter().all(|branch| {
                branch.verdict == Some(Verdict::Decided(Decision::ConflictChangedPayload))
            });
        variant.then_some(word.as_str())
    }

    /// A changed payload acknowledged with another word than `held`, and no read of the
    /// unresolved inputs: kept as evidence or swallowed, only they would tell.
    fn unread_variant_note(&self) -> Option<String> {
        if self.unresolved_read().is_some() {
            return None;
        }
        let word = self.misanswered_variant()?;
        Some(format!(
            "note: a changed payload was acknowledged `{word}`, not `held`. Whether it was \
             kept as evidence (evidence-retained if not) shows only in the unresolved \
             inputs, which this run did not read; with them, arrival could name it"
        ))
    }

    /// A delivery every candidate world has recorded (so it is a duplicate, answered with
    /// the meaning its record holds now) acknowledged with another meaning: the
    /// acknowledgement matches no decision recorded for that content. A receiver whose
    /// decision's effect was stored without its record decides the content again.
    ///
    /// Only after a kill or an answer that never came earlier in the run (without one, a
    /// record cannot go missing beside its effect: a receiver that decides a duplicate
    /// again keeps no records by design), with the whole state read, and when what was
    /// seen is what deciding the content again would give, in a world before the step
    /// with the identity's records lost: that meaning, and that state. A step that changed
    /// the state was named `duplicate-no-effect` before this is asked: from outside, a
    /// lost record decided again and a duplicate never recognised look alike, and that
    /// rule is broken either way. A duplicate answered with a meaning its record no longer
    /// holds (the one it held before a reconciliation re-evaluated it, say) with its
    /// record kept is a wrong answer, which no property names
    /// ([`Naming::misanswered_duplicate`]).
    fn redecided(&self) -> bool {
        let Answer::Ack(Some(word)) = self.answer else {
            return false;
        };
        let Action::Deliver { delivery, .. } = self.action else {
            return false;
        };
        let Some(event) = self.delivered_event() else {
            return false;
        };
        // The state must have been read whole: a channel not read could hide the hold a
        // fresh decision leaves, and a receiver that keeps its records but answers wrongly
        // would look like one that lost them.
        let Some(seen) = self.seen.filter(|seen| {
            self.channels.paused
                && self.channels.unresolved
                && seen.paused.is_some()
                && seen.unresolved.is_some()
        }) else {
            return false;
        };
        // A receiver that kept the record and answers the duplicate as if deciding it
        // again, with a crash in between, looks the same (docs/conform.md says so).
        self.crashed
            && self.all_duplicates_answered_otherwise(word)
            && self.branches.iter().any(|branch| {
                let before = &self.before[branch.from];
                let (world, answer) = branch.reading.afresh(before, delivery, event);
                answer == word.as_str()
                    && fits(&project(self.scenario, &world), seen, &self.channels)
            })
    }

    /// Every candidate took this delivery for a duplicate, and the receiver acknowledged it
    /// with a meaning none of their records holds now.
    fn all_duplicates_answered_otherwise(&self, word: &str) -> bool {
        self.channels.ack
            && self.all_duplicates()
            && self.branches.iter().all(|branch| branch.word != Some(word))
    }

    /// Whether every candidate took this step for a duplicate delivery.
    fn all_duplicates(&self) -> bool {
        !self.branches.is_empty()
            && self
                .branches
                .iter()
                .all(|branch| matches!(branch.verdict, Some(Verdict::Duplicate(_))))
    }

    /// The event this step delivered, if it is a delivery.
    fn delivered_event(&self) -> Option<&Event> {
        let Action::Deliver { delivery, .. } = self.action else {
            return None;
        };
        let index = self.scenario.delivery_index(delivery)?;
        Some(&self.scenario.deliveries[index].event)
    }

    /// Why a duplicate answered with a meaning its record does not hold, with nothing seen
    /// to show the record lost ([`Naming::redecided`] does not hold), is `diverged`:
    /// protocol section 4 answers a duplicate with its record's meaning now.
    fn misanswered_duplicate(&self) -> Option<String> {
        let Answer::Ack(Some(word)) = self.answer else {
            return None;
        };
        if !self.all_duplicates_answered_otherwise(word) || self.redecided() {
            return None;
        }
        let recorded = self.branches[0].word.unwrap_or("-");
        Some(format!(
            "a delivery every world consistent with what was seen has recorded (a duplicate, \
             to be answered with its record's meaning now: {recorded}) was acknowledged \
             {word}. Either its record was lost (ack-implies-recorded) or it was kept and the \
             answer is wrong (protocol section 4); nothing seen tells which (no crash since \
             the input was first sent, a state not read whole, or a state unlike what \
             deciding it again leaves), so arrival names no property"
        ))
    }

    /// A delivery every candidate takes for a duplicate changed the paused cards or the
    /// unresolved inputs (the cards are [`Naming::changed_cards`]'s), where both reads
    /// show them.
    fn duplicate_changed_state(&self) -> bool {
        let (Some(seen), Some(last)) = (self.seen, self.last) else {
            return false;
        };
        let differs =
            |shown: bool, now: &Option<BTreeSet<String>>, before: &Option<BTreeSet<String>>| {
                shown && now.is_some() && before.is_some() && now != before
            };
        let changed = differs(self.channels.paused, &seen.paused, &last.paused)
            || differs(self.channels.unresolved, &seen.unresolved, &last.unresolved);
        // With a kill in the step, something gone may have been lost at the kill rather
        // than taken by the duplicate: only something added is certain.
        let added = |now: &Option<BTreeSet<String>>, before: &Option<BTreeSet<String>>| matches!((now, before), (Some(now), Some(before)) if !now.is_subset(before));
        let certain = !self.killed_in_delivery()
            || (self.channels.paused && added(&seen.paused, &last.paused))
            || (self.channels.unresolved && added(&seen.unresolved, &last.unresolved));
        changed && certain && self.all_duplicates()
    }

    /// Why [`Naming::redecided`] names `ack-implies-recorded`, when that rule (and no
    /// kill that lost an acknowledged effect) is what named it.
    fn redecided_note(&self) -> Option<String> {
        if !self.redecided() || self.lost_after_kill().is_some() {
            return None;
        }
        let Answer::Ack(Some(word)) = self.answer else {
            return None;
        };
        let recorded = self.branches[0].word.unwrap_or("-");
        Some(format!(
            "a delivery every world consistent with what was seen has recorded (a duplicate, \
             answered with its record's meaning now: {recorded}) was acknowledged {word}, and \
             what was seen is what deciding that content again gives: its record was lost, or \
             never written beside its effect"
        ))
    }

    /// A card changed where the contract says nothing may change it (a card the receiver
    /// fetched on its own during the step may have been reconciled, so it is not counted).
    fn changed_cards(&self) -> Option<&'static str> {
        let (seen, last) = (self.seen?, self.last?);
        let changed: Vec<&String> = seen
            .cards
            .iter()
            .filter(|(name, card)| last.cards.get(*name) != Some(card))
            .map(|(name, _)| name)
            .filter(|name| !self.fetched.contains(&name.as_str()))
            .collect();
        if changed.is_empty() {
            return None;
        }
        let reconciled = |name: &str| {
            matches!(self.action, Action::Reconcile(card)
                if self.scenario.catalog.name(card) == name)
        };
        let paused_before = |name: &str| {
            self.channels.paused
                && last
                    .paused
                    .as_ref()
                    .is_some_and(|paused| paused.contains(name))
        };
        if changed
            .iter()
            .any(|name| paused_before(name) && !reconciled(name))
        {
            return Some("paused-frozen");
        }
        let all =
            |want: fn(&Branch) -> bool| !self.branches.is_empty() && self.branches.iter().all(want);
        if self.all_duplicates() {
            return Some("duplicate-no-effect");
        }
        let held = matches!(self.answer, Answer::Ack(Some(word)) if word == "held");
        if self.channels.ack && held && all(|branch| branch.word == Some("held")) {
            return Some("held-changes-nothing");
        }
        None
    }

    /// The model's expectation beside what was seen.
    fn diff(&self) -> String {
        let mut expected: Vec<String> = Vec::new();
        let shown = self.branches.iter().map(|branch| {
            let mut shown = project(self.scenario, &branch.world);
            if !self.channels.paused {
                shown.paused = None;
            }
            if !self.channels.unresolved {
                shown.unresolved = None;
            }
            let word = branch.word.unwrap_or("-");
            format!("answer {word}, state {}", compact(&shown))
        });
        // Two paths to one world read the same: each expectation is shown once.
        for line in shown {
            if expected.len() == 2 {
                break;
            }
            if !expected.contains(&line) {
                expected.push(line);
            }
        }
        let answer = match self.answer {
            // A restart is arrival's, answered by nothing.
            Answer::Ack(None) if self.action == Action::Restart => "-".into(),
            Answer::Ack(word) => word.clone().unwrap_or_else(|| "2xx".into()),
            Answer::Definite(why) => format!("definite refusal ({why})"),
            Answer::Indefinite(why) => format!("indefinite ({why})"),
        };
        let seen = self.seen.map_or_else(|| "not read".to_owned(), compact);
        format!(
            "at {}:\n  specification:  {}\n  implementation: answer {answer}, state {seen}",
            describe_action(self.scenario, self.action),
            expected.join("\n                  or: ")
        )
    }
}
