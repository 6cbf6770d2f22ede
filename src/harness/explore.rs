//! Exploration: runs a checker over a [`Protocol`] (arrival's own by default, stateright's
//! on request), with progress on stderr (one line redrawn in place), and finds a shortest counterexample for one
//! property.

use super::checker::{self, Counters, Order};
use super::{Checked, Protocol};
use serde::{Deserialize, Serialize};
use stateright::{Checker, Model};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How the checker walks the state space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Breadth first: shortest counterexamples, more memory.
    #[default]
    Bfs,
    /// Depth first: little memory.
    Dfs,
}

/// Which checker explores the model. Both explore the same stateright model
/// ([`Checked`]) and reach the same states; tests hold them to the same counts and
/// verdicts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// arrival's own checker ([`checker`]): a lock-free visited set, no per-state paths.
    #[default]
    Arrival,
    /// stateright 0.31's own breadth- and depth-first checkers.
    Stateright,
}

/// How one exploration runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Breadth or depth first.
    pub strategy: Strategy,
    /// Checker threads.
    pub threads: usize,
    /// Stop after about this many states.
    pub state_limit: Option<usize>,
    /// What progress lines call the run.
    pub label: String,
    /// Show progress on stderr: one line redrawn in place (the caller turns it off when
    /// stderr is not a terminal).
    pub progress: bool,
    /// Which checker explores.
    pub engine: Engine,
}

/// What one exploration found.
#[derive(Clone, Debug)]
pub struct Run<S> {
    /// States generated, repeats included.
    pub states: usize,
    /// Distinct states.
    pub unique_states: usize,
    /// Longest path explored.
    pub max_depth: usize,
    /// Steps depth-first search took alone ([`checker::Counters::eager`]); not among
    /// `states`.
    pub eager_steps: usize,
    /// Wall time.
    pub seconds: f64,
    /// For each violated property, the steps of the path stateright reported.
    pub discoveries: BTreeMap<String, Vec<S>>,
}

impl<S> Run<S> {
    /// Whether the run stopped at its state limit before exploring everything.
    pub fn hit_limit(&self, limit: Option<usize>) -> bool {
        limit.is_some_and(|limit| self.states >= limit)
    }
}

/// Explores `protocol` exhaustively (or up to the state limit).
pub fn explore<P: Protocol>(protocol: P, settings: &Settings) -> Run<P::Step> {
    explore_checking(protocol, settings, true)
}

/// Explores `protocol`, checking `panic` too if `panics`.
fn explore_checking<P: Protocol>(protocol: P, settings: &Settings, panics: bool) -> Run<P::Step> {
    if settings.engine == Engine::Arrival {
        return explore_fast(Checked(protocol, panics), settings);
    }
    let mut builder = Checked(protocol, panics)
        .checker()
        .threads(settings.threads);
    if let Some(limit) = settings.state_limit {
        builder = builder.target_state_count(limit);
    }
    match settings.strategy {
        Strategy::Bfs => drive(builder.spawn_bfs(), settings),
        Strategy::Dfs => drive(builder.spawn_dfs(), settings),
    }
}

/// A shortest path to a violation of property `index`: a single-threaded breadth-first run
/// that checks that property alone (stateright 0.31 stops at the first violation then; with
/// several open properties it keeps overwriting discoveries with longer paths).
pub fn shortest<P: Protocol>(
    protocol: &P,
    index: usize,
    settings: &Settings,
) -> Option<Vec<P::Step>> {
    shortest_within(protocol, index, settings).0
}

/// [`shortest`], and whether the search stopped at its state limit (so a `None` says only
/// that no counterexample lies within the limit, not that there is none).
pub fn shortest_within<P: Protocol>(
    protocol: &P,
    index: usize,
    settings: &Settings,
) -> (Option<Vec<P::Step>>, bool) {
    let alone = Settings {
        strategy: Strategy::Bfs,
        threads: 1,
        ..settings.clone()
    };
    // The search for `panic` checks it alone; one for the protocol's own leaves it out.
    let panics = index == P::PROPERTIES.len();
    let mut run = explore_checking(protocol.only(index), &alone, panics);
    let cut = run.hit_limit(alone.state_limit);
    (
        run.discoveries.remove(super::property_name::<P>(index)),
        cut,
    )
}

fn explore_fast<P: Protocol>(model: Checked<P>, settings: &Settings) -> Run<P::Step> {
    let order = match settings.strategy {
        Strategy::Bfs => Order::BreadthFirst,
        Strategy::Dfs => Order::DepthFirst,
    };
    let counters = Counters::default();
    let start = Instant::now();
    let finished = AtomicBool::new(false);
    let outcome = std::thread::scope(|scope| {
        if settings.progress {
            let (counters, finished) = (&counters, &finished);
            scope.spawn(move || {
                report_progress(&settings.label, start, finished, || {
                    (
                        counters.states.load(Ordering::Relaxed),
                        counters.unique.load(Ordering::Relaxed),
                        counters.depth.load(Ordering::Relaxed),
                    )
                })
            });
        }
        let commute: Option<&(dyn checker::Commute<P::World, P::Step> + Sync)> =
            (model.0.sleeps() || model.0.settles()).then_some(&model);
        let outcome = checker::check(
            &model,
            order,
            settings.threads,
            settings.state_limit,
            &counters,
            commute,
        );
        finished.store(true, Ordering::Relaxed);
        outcome
    });
    Run {
        states: counters.states.load(Ordering::Relaxed),
        unique_states: counters.unique.load(Ordering::Relaxed),
        max_depth: counters.depth.load(Ordering::Relaxed),
        eager_steps: counters.eager.load(Ordering::Relaxed),
        seconds: start.elapsed().as_secs_f64(),
        discoveries: outcome
            .discoveries
            .into_iter()
            .map(|(name, steps)| (name.to_owned(), steps))
            .collect(),
    }
}

/// Shows progress until `finished`: runs shorter than a second print nothing; longer ones
/// redraw one line (states, distinct states, depth, states per second, elapsed time) every
/// 200 ms and leave its last figures on screen.
fn report_progress(
    label: &str,
    start: Instant,
    finished: &AtomicBool,
    read: impl Fn() -> (usize, usize, usize),
) {
    let mut shown = false;
    loop {
        let done = finished.load(Ordering::Relaxed);
        if done && !shown {
            return;
        }
        if shown || start.elapsed() >= Duration::from_secs(1) {
            shown = true;
            let seconds = start.elapsed().as_secs_f64();
            let (states, unique, depth) = read();
            let line = format!(
                "  {label}: {states} states, {unique} unique, depth {depth}, {:.0} states/s, {seconds:.0} s",
                states as f64 / seconds.max(0.001),
            );
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[2K{line}");
            if done {
                let _ = writeln!(stderr);
                return;
            }
            let _ = stderr.flush();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn drive<P: Protocol, C: Checker<Checked<P>> + Sync>(
    mut checker: C,
    settings: &Settings,
) -> Run<P::Step> {
    let start = Instant::now();
    let handles = checker.handles();
    let finished = AtomicBool::new(false);
    let label = &settings.label;
    std::thread::scope(|scope| {
        let checker = &checker;
        let finished = &finished;
        if settings.progress {
            scope.spawn(move || {
                report_progress(label, start, finished, || {
                    (
                        checker.state_count(),
                        checker.unique_state_count(),
                        checker.max_depth(),
                    )
                })
            });
        }
        for handle in handles {
            handle.join().expect("checker thread panicked");
        }
        finished.store(true, Ordering::Relaxed);
    });
    let discoveries = checker
        .discoveries()
        .into_iter()
        .map(|(name, path)| (name.to_owned(), path.into_actions()))
        .collect();
    Run {
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        eager_steps: 0,
        seconds: start.elapsed().as_secs_f64(),
        discoveries,
    }
}
