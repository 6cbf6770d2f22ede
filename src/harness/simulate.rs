//! Simulation: seeded random walks through a [`Protocol`] instead of exhaustive
//! exploration, for models too large to explore. A walk that breaks a property is a real
//! counterexample; walks that break nothing prove nothing about the behaviours they did not
//! visit.
//!
//! Walk `w` of part `p` draws from its own generator, seeded from (seed, `p`, `w`) alone, so
//! a violation found at walk `w` comes back with `--simulate w+1 --seed S` whatever else
//! ran. Each walk starts at [`Protocol::init`] and takes a step drawn uniformly from
//! [`Protocol::steps`] until no step remains, a step marks a violation, or it has taken
//! `max_depth` steps. A step whose successor is `None` leaves the world as it was (a
//! self-loop): the walk draws again among the other steps of that world, and a world whose
//! every step is a self-loop ends the walk.

use super::rng::SplitMix;
use super::Protocol;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::time::Instant;

/// The default cap on one walk's steps.
pub const DEFAULT_MAX_DEPTH: usize = 1_000;

/// At most this many distinct states are remembered for the count; past it the count is a
/// lower bound.
pub const MAX_COUNTED_STATES: usize = 1 << 22;

/// How a simulation runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Simulation {
    /// Walks per part.
    pub walks: usize,
    /// The seed every walk's generator derives from.
    pub seed: u64,
    /// The most steps one walk takes.
    pub max_depth: usize,
}

/// A violation a walk found.
#[derive(Clone, Debug)]
pub struct Sample<S> {
    /// The walk's number (0-based).
    pub walk: usize,
    /// How many steps the walk took to the violation.
    pub walked: usize,
    /// The walk's steps with every loop back to a state it had already visited cut out.
    pub steps: Vec<S>,
}

/// What the walks found.
#[derive(Clone, Debug)]
pub struct Walks<S> {
    /// Walks taken.
    pub walks: usize,
    /// Steps taken, over every walk.
    pub steps: u64,
    /// Distinct states visited (a lower bound when `counted_all` is false).
    pub distinct_states: usize,
    /// Whether every distinct state was counted.
    pub counted_all: bool,
    /// Walks stopped by `max_depth`.
    pub capped: usize,
    /// The longest walk, in steps.
    pub longest: usize,
    /// Wall time.
    pub seconds: f64,
    /// For each violated property (by index), the first walk that broke it.
    pub found: BTreeMap<usize, Sample<S>>,
}

/// The generator of walk `walk` of part `part`.
fn walk_generator(seed: u64, part: usize, walk: usize) -> SplitMix {
    let a = SplitMix::new(seed).next_u64();
    let b = SplitMix::new(a ^ part as u64).next_u64();
    SplitMix::new(SplitMix::new(b ^ walk as u64).next_u64())
}

fn fingerprint<W: Hash>(world: &W) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    world.hash(&mut hasher);
    hasher.finish()
}

/// Runs `simulation.walks` walks through part `part` of a model (the part's number only
/// seeds the walks).
pub fn simulate<P: Protocol>(protocol: &P, part: usize, simulation: &Simulation) -> Walks<P::Step> {
    let start = Instant::now();
    let wanted = (0..=P::PROPERTIES.len())
        .filter(|&index| super::is_checked(protocol, index))
        .count();
    let mut walks = Walks {
        walks: 0,
        steps: 0,
        distinct_states: 0,
        counted_all: true,
        capped: 0,
        longest: 0,
        seconds: 0.0,
        found: BTreeMap::new(),
    };
    let mut seen: HashSet<u64> = HashSet::new();
    let mut steps = Vec::new();
    let mut path: Vec<P::Step> = Vec::new();
    let mut visited: Vec<u64> = Vec::new();
    for walk in 0..simulation.walks {
        if walks.found.len() == wanted && wanted > 0 {
            break;
        }
        walks.walks += 1;
        let mut generator = walk_generator(simulation.seed, part, walk);
        let mut world = protocol.init();
        path.clear();
        visited.clear();
        loop {
            let print = fingerprint(&world);
            visited.push(print);
            if seen.len() < MAX_COUNTED_STATES {
                seen.insert(print);
            } else if !seen.contains(&print) {
                walks.counted_all = false;
            }
            if let Some(index) = P::violation(&world) {
                if super::is_checked(protocol, index) && !walks.found.contains_key(&index) {
                    walks.found.insert(
                        index,
                        Sample {
                            walk,
                            walked: path.len(),
                            steps: loop_free(protocol, index, &path, &visited),
                        },
                    );
                }
                break;
            }
            if path.len() >= simulation.max_depth {
                walks.capped += 1;
                break;
            }
            steps.clear();
            protocol.steps(&world, &mut steps);
            let taken = loop {
                if steps.is_empty() {
                    break None;
                }
                let step = steps.swap_remove(generator.scaled_below(steps.len()));
                if let Some(next) = super::panic::next(protocol, &world, &step) {
                    break Some((step, next));
                }
            };
            let Some((step, next)) = taken else { break };
            path.push(step);
            world = next;
        }
        walks.steps += path.len() as u64;
        walks.longest = walks.longest.max(path.len());
    }
    walks.distinct_states = seen.len();
    walks.seconds = start.elapsed().as_secs_f64();
    walks
}

/// `path` with every loop back to an already visited state cut out (`visited[i]` is the
/// fingerprint of the state before step `i`, and one more after the last), if the shorter
/// path still breaks property `index` when replayed; else `path`.
fn loop_free<P: Protocol>(
    protocol: &P,
    index: usize,
    path: &[P::Step],
    visited: &[u64],
) -> Vec<P::Step> {
    let mut kept: Vec<usize> = Vec::new();
    let mut prints: Vec<u64> = vec![visited[0]];
    let mut at: HashMap<u64, usize> = HashMap::from([(visited[0], 0)]);
    for (step, &print) in visited[1..].iter().enumerate() {
        if let Some(&position) = at.get(&print) {
            for removed in prints.drain(position + 1..) {
                at.remove(&removed);
            }
            kept.truncate(position);
        } else {
            kept.push(step);
            at.insert(print, prints.len());
            prints.push(print);
        }
    }
    if kept.len() == path.len() {
        return path.to_vec();
    }
    let shorter: Vec<P::Step> = kept.iter().map(|&step| path[step].clone()).collect();
    let mut world = protocol.init();
    for step in &shorter {
        match super::panic::next(protocol, &world, step) {
            Some(next) => world = next,
            None => return path.to_vec(),
        }
    }
    if P::violation(&world) == Some(index) {
        shorter
    } else {
        path.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counter from 0 that steps +1, +2 or back to 0; reaching 7 breaks property 0.
    #[derive(Clone, Debug)]
    struct Climb;

    impl Protocol for Climb {
        type World = u8;
        type Step = u8;
        const PROPERTIES: &'static [&'static str] = &["below-seven"];

        fn init(&self) -> u8 {
            0
        }
        fn steps(&self, world: &u8, steps: &mut Vec<u8>) {
            if *world < 7 {
                steps.extend([1, 2, 0]);
            }
        }
        fn next(&self, world: &u8, step: &u8) -> Option<u8> {
            match step {
                0 if *world == 0 => None,
                0 => Some(0),
                step => Some(world + step),
            }
        }
        fn violation(world: &u8) -> Option<usize> {
            (*world >= 7).then_some(0)
        }
        fn panicked(&self, _: &u8) -> u8 {
            7
        }
        fn checks(&self, _: usize) -> bool {
            true
        }
        fn only(&self, _: usize) -> Self {
            Climb
        }
        fn describe_step(&self, step: &u8) -> String {
            step.to_string()
        }
        fn describe_world(&self, world: &u8) -> String {
            world.to_string()
        }
        fn coverage(&self) -> Vec<(&'static str, u64)> {
            Vec::new()
        }
    }

    #[test]
    fn walks_are_deterministic_for_a_seed_and_find_the_violation_without_loops() {
        let simulation = Simulation {
            walks: 50,
            seed: 7,
            max_depth: 100,
        };
        let first = simulate(&Climb, 0, &simulation);
        let again = simulate(&Climb, 0, &simulation);
        let sample = &first.found[&0];
        assert_eq!(sample.walk, again.found[&0].walk);
        assert_eq!(sample.steps, again.found[&0].steps);
        assert_eq!(first.steps, again.steps);
        // No step back to 0 survives loop cutting, so the trace climbs straight to 7 or 8.
        assert!(!sample.steps.contains(&0), "{:?}", sample.steps);
        let end: u8 = sample.steps.iter().sum();
        assert!(end >= 7);
        // The walk that found it comes back alone with --simulate walk+1.
        let alone = simulate(
            &Climb,
            0,
            &Simulation {
                walks: sample.walk + 1,
                ..simulation
            },
        );
        assert_eq!(alone.found[&0].walk, sample.walk);
    }

    #[test]
    fn walks_stop_at_the_depth_cap() {
        let walks = simulate(
            &Climb,
            0,
            &Simulation {
                walks: 20,
                seed: 1,
                max_depth: 2,
            },
        );
        assert!(walks.found.is_empty());
        assert_eq!(walks.capped, 20);
        assert_eq!(walks.longest, 2);
    }
}
