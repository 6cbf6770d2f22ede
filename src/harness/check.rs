//! From a model to a verdict: explore every part (or this shard's share of them, or sample
//! them with random walks), find a shortest counterexample for each violated property,
//! count coverage, and compare the result with what the model file expected.

use super::explore::{explore, shortest, Run, Settings};
use super::report::{
    judge, peak_rss_mib, Expected, Findings, Kind, ModelReport, PropertyReport, SampledViolation,
    ShardReport, SimulationReport, Status, TraceReport,
};
use super::shard::{Shard, ShardSpec};
use super::simulate::{simulate, Simulation};
use super::{InputError, Protocol};
use std::collections::BTreeMap;

/// What a check is about, for its report.
#[derive(Clone, Debug)]
pub struct Subject {
    /// The model file.
    pub model: String,
    /// The protocol's name.
    pub protocol: String,
    /// The fixture.
    pub fixture: String,
    /// The policy checked.
    pub policy: String,
    /// The property the model file expects violated (`None`: everything holds).
    pub expected: Option<&'static str>,
    /// Estimated bytes of one state.
    pub bytes_per_state: usize,
    /// Everything else that shapes the state space (fault budgets, reductions, ...), in
    /// the protocol's words: shard reports merge only when theirs are equal.
    pub settings: String,
}

/// How a check covers the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Every behaviour, exhaustively (up to the state limit).
    #[default]
    Exhaustive,
    /// One shard's share of every behaviour (see [`super::shard`]).
    Shard(ShardSpec),
    /// Random walks (see [`super::simulate`]): finds violations, proves nothing.
    Simulate(Simulation),
}

/// The most states the breadth-first search that shortens a simulation's counterexample
/// may explore; past it the walk's own (loop-free) steps are the trace.
pub const SHORTEST_BUDGET: usize = 500_000;

/// Checks a model made of independent parts (one part unless the protocol splits it).
/// `trace` turns the shortest violating steps of a part into a counterexample report (and
/// writes it where the protocol keeps them).
pub fn check_parts<P: Protocol>(
    subject: Subject,
    parts: &[P],
    settings: &Settings,
    trace: impl FnMut(&P, usize, &[P::Step]) -> Result<TraceReport, InputError>,
) -> Result<ModelReport, InputError> {
    check_parts_with(subject, parts, settings, &Mode::Exhaustive, trace)
}

/// Totals over the parts a check explored or walked.
#[derive(Default)]
struct Tally {
    states: usize,
    unique_states: usize,
    max_depth: usize,
    eager_steps: usize,
    seconds: f64,
    complete: bool,
}

impl Tally {
    fn add<S>(&mut self, run: &Run<S>, settings: &Settings) {
        self.complete &= !run.hit_limit(settings.state_limit);
        self.states += run.states;
        self.unique_states += run.unique_states;
        self.max_depth = self.max_depth.max(run.max_depth);
        self.eager_steps += run.eager_steps;
        self.seconds += run.seconds;
    }
}

/// Explores `protocol`, adds its counts to `tally`, and returns a path for each property it
/// violated that `wanted` accepts: a shortest one, unless the state limit stops the
/// breadth-first search for it first (then the path the exploration found, marked `false`).
fn exhaust<Q: Protocol>(
    protocol: &Q,
    settings: &Settings,
    tally: &mut Tally,
    wanted: impl Fn(usize) -> bool,
) -> Vec<(usize, Vec<Q::Step>, bool)> {
    let run = explore(protocol.clone(), settings);
    tally.add(&run, settings);
    let mut found = Vec::new();
    for (name, steps) in run.discoveries {
        let Some(index) = super::property_index::<Q>(&name) else {
            continue;
        };
        if wanted(index) {
            match shortest(protocol, index, settings) {
                Some(shortest) => found.push((index, shortest, true)),
                None => found.push((index, steps, false)),
            }
        }
    }
    found
}

/// The protocol's counterexample report for `steps`; should the protocol panic while
/// replaying them (it walks the same steps again), the steps in its words and the message.
fn traced<P: Protocol>(
    trace: &mut impl FnMut(&P, usize, &[P::Step]) -> Result<TraceReport, InputError>,
    part: &P,
    index: usize,
    steps: &[P::Step],
) -> Result<TraceReport, InputError> {
    match super::panic::catching(|| trace(part, index, steps)) {
        Ok(report) => report,
        Err(message) => Ok(TraceReport {
            mermaid: String::new(),
            steps: steps.iter().map(|step| part.describe_step(step)).collect(),
            fixture: None,
            table: format!("(no table: replaying the trace panicked: {message})\n"),
            shortest: true,
        }),
    }
}

/// Keeps the message of the panic `steps` end in, when `index` is `panic` (the first one
/// found stays).
fn note_panic<P: Protocol>(kept: &mut Option<String>, part: &P, index: usize, steps: &[P::Step]) {
    if index == P::PROPERTIES.len() && kept.is_none() {
        *kept = super::panic::message(part, steps);
    }
}

/// Like [`check_parts`], covering the model as `mode` says.
pub fn check_parts_with<P: Protocol>(
    subject: Subject,
    parts: &[P],
    settings: &Settings,
    mode: &Mode,
    mut trace: impl FnMut(&P, usize, &[P::Step]) -> Result<TraceReport, InputError>,
) -> Result<ModelReport, InputError> {
    let checked = |index: usize| {
        parts
            .first()
            .is_some_and(|part| super::is_checked(part, index))
    };
    // The message of a step that panicked, found by walking its trace again.
    let mut panicked: Option<String> = None;
    let selected: Vec<usize> = match mode {
        Mode::Shard(spec) if parts.len() > 1 => {
            (0..parts.len()).filter(|&part| spec.takes(part)).collect()
        }
        _ => (0..parts.len()).collect(),
    };
    let mut tally = Tally {
        complete: true,
        ..Tally::default()
    };
    let mut coverage: BTreeMap<String, u64> = BTreeMap::new();
    // For each violated property (by index), its counterexample.
    let mut traces: BTreeMap<usize, TraceReport> = BTreeMap::new();
    let mut shard = None;
    let mut simulation = None;
    for &number in &selected {
        let part = &parts[number];
        match mode {
            Mode::Shard(spec) if parts.len() == 1 && spec.count > 1 => {
                let restricted = Shard::new(part.clone(), *spec);
                shard = Some(match restricted.owners() {
                    Some(split) => ShardReport {
                        by: "owners".into(),
                        owners: split.owners,
                        owners_taken: split.taken,
                        shared_states: Some(split.shared),
                        ..ShardReport::new(*spec, vec![number])
                    },
                    None => {
                        let (total, taken, depth) = restricted.prefixes();
                        ShardReport {
                            by: "first-steps".into(),
                            prefixes: Some(total),
                            prefixes_taken: Some(taken),
                            prefix_depth: Some(depth),
                            ..ShardReport::new(*spec, vec![number])
                        }
                    }
                });
                let wanted = |index| checked(index) && !traces.contains_key(&index);
                for (index, steps, shortest) in exhaust(&restricted, settings, &mut tally, wanted) {
                    note_panic(&mut panicked, part, index, &steps);
                    let mut report = traced(&mut trace, part, index, &steps)?;
                    report.shortest = shortest;
                    traces.insert(index, report);
                }
            }
            Mode::Exhaustive | Mode::Shard(_) => {
                let wanted = |index| checked(index) && !traces.contains_key(&index);
                for (index, steps, shortest) in exhaust(part, settings, &mut tally, wanted) {
                    note_panic(&mut panicked, part, index, &steps);
                    let mut report = traced(&mut trace, part, index, &steps)?;
                    report.shortest = shortest;
                    traces.insert(index, report);
                }
            }
            Mode::Simulate(how) => {
                let walks = simulate(part, number, how);
                tally.states += walks.walks + walks.steps as usize;
                tally.unique_states += walks.distinct_states;
                tally.max_depth = tally.max_depth.max(walks.longest + 1);
                tally.seconds += walks.seconds;
                let report = simulation.get_or_insert_with(|| SimulationReport {
                    seed: how.seed,
                    walks: how.walks,
                    walked: 0,
                    steps: 0,
                    distinct_states: 0,
                    counted_all: true,
                    max_depth: how.max_depth,
                    capped_walks: 0,
                    walks_per_second: 0.0,
                    violations: Vec::new(),
                });
                report.walked += walks.walks;
                report.steps += walks.steps;
                report.distinct_states += walks.distinct_states;
                report.counted_all &= walks.counted_all;
                report.capped_walks += walks.capped;
                for (index, sample) in walks.found {
                    if !checked(index) || traces.contains_key(&index) {
                        continue;
                    }
                    let bounded = Settings {
                        state_limit: Some(
                            settings
                                .state_limit
                                .map_or(SHORTEST_BUDGET, |limit| limit.min(SHORTEST_BUDGET)),
                        ),
                        progress: false,
                        ..settings.clone()
                    };
                    let (steps, is_shortest) = match shortest(part, index, &bounded) {
                        Some(steps) if steps.len() <= sample.steps.len() => (steps, true),
                        _ => (sample.steps, false),
                    };
                    report.violations.push(SampledViolation {
                        property: super::property_name::<P>(index).into(),
                        part: number,
                        walk: sample.walk,
                        walked: sample.walked,
                        trace_steps: steps.len(),
                        shortest: is_shortest,
                    });
                    note_panic(&mut panicked, part, index, &steps);
                    let mut trace = traced(&mut trace, part, index, &steps)?;
                    trace.shortest = is_shortest;
                    traces.insert(index, trace);
                }
            }
        }
        for (name, count) in part.coverage() {
            *coverage.entry(name.to_owned()).or_default() += count;
        }
    }
    if let (Mode::Shard(spec), None) = (mode, &shard) {
        shard = Some(ShardReport {
            by: if parts.len() > 1 { "parts" } else { "whole" }.into(),
            ..ShardReport::new(*spec, selected.clone())
        });
    }
    if let Some(report) = &mut simulation {
        report.walks_per_second = report.walked as f64 / tally.seconds.max(1e-9);
    }
    let sampled = simulation.is_some();
    let mut properties = Vec::new();
    let mut violated = Vec::new();
    for index in 0..=P::PROPERTIES.len() {
        let name = super::property_name::<P>(index);
        let trace = traces.remove(&index);
        let status = match (&trace, tally.complete) {
            _ if !checked(index) => Status::NotChecked,
            (Some(_), _) => Status::Violated,
            (None, _) if sampled => Status::Sampled,
            (None, true) => Status::Holds,
            (None, false) => Status::Unknown,
        };
        if trace.is_some() {
            violated.push(name.to_owned());
        }
        properties.push(PropertyReport {
            name: name.into(),
            kind: Kind::Always,
            status,
            trace,
            detail: if index == P::PROPERTIES.len() {
                panicked.take()
            } else {
                None
            },
        });
    }
    for (name, count) in &coverage {
        properties.push(PropertyReport {
            name: format!("reached-{name}"),
            kind: Kind::Sometimes,
            status: Status::coverage(*count),
            trace: None,
            detail: None,
        });
    }
    // A shard of several judges only its share: it knows a model expected to pass fails,
    // never that an expected violation is missing (another shard may hold it).
    let partial = shard.as_ref().is_some_and(|shard| shard.count > 1);
    let expected = Expected::from_property(subject.expected);
    let findings = Findings {
        violated: &violated,
        sampled,
        complete: tally.complete,
        partial,
    };
    let (verdict, as_expected) = judge(&findings, &expected);
    Ok(ModelReport {
        model: subject.model,
        protocol: subject.protocol,
        fixture: subject.fixture,
        policy: subject.policy,
        settings: subject.settings,
        verdict,
        expected,
        as_expected,
        violated,
        parts: parts.len(),
        states: tally.states,
        unique_states: tally.unique_states,
        max_depth: tally.max_depth,
        eager_steps: tally.eager_steps,
        seconds: tally.seconds,
        states_per_second: tally.states as f64 / tally.seconds.max(1e-9),
        bytes_per_state: subject.bytes_per_state,
        peak_rss_mib: peak_rss_mib(),
        properties,
        coverage,
        shard,
        simulation,
        merged: None,
    })
}

/// The report of a model whose fixture breaks a precondition (named `property`): nothing is
/// explored, since no terminal state could be judged, and every other checked property is
/// `unknown`.
pub fn precondition_failed<P: Protocol>(
    subject: Subject,
    mode: &Mode,
    checks: impl Fn(usize) -> bool,
    property: &'static str,
    detail: String,
) -> ModelReport {
    let properties = (0..=P::PROPERTIES.len())
        .map(|index| {
            let name = super::property_name::<P>(index);
            let status = if name == property {
                Status::Violated
            } else if index == P::PROPERTIES.len() || checks(index) {
                Status::Unknown
            } else {
                Status::NotChecked
            };
            PropertyReport {
                name: name.into(),
                kind: Kind::Always,
                status,
                trace: None,
                detail: (name == property).then(|| detail.clone()),
            }
        })
        .collect();
    // Nothing was explored: the verdict rests on the precondition alone, in any mode.
    let violated = vec![property.to_owned()];
    let expected = Expected::from_property(subject.expected);
    let findings = Findings {
        violated: &violated,
        sampled: false,
        complete: true,
        partial: false,
    };
    let (verdict, as_expected) = judge(&findings, &expected);
    ModelReport {
        model: subject.model,
        protocol: subject.protocol,
        fixture: subject.fixture,
        policy: subject.policy,
        settings: subject.settings,
        verdict,
        expected,
        as_expected,
        violated,
        parts: 1,
        states: 0,
        unique_states: 0,
        max_depth: 0,
        eager_steps: 0,
        seconds: 0.0,
        states_per_second: 0.0,
        bytes_per_state: subject.bytes_per_state,
        peak_rss_mib: peak_rss_mib(),
        properties,
        coverage: BTreeMap::new(),
        // Every shard reports the same failed precondition; merged, it is the model's.
        shard: match mode {
            Mode::Shard(spec) => Some(ShardReport {
                by: "precondition".into(),
                ..ShardReport::new(*spec, Vec::new())
            }),
            _ => None,
        },
        simulation: None,
        merged: None,
    }
}
