//! What every protocol's conformance run shares, with no I/O and no protocol: the set of
//! model worlds still consistent with what a real receiver was seen to do, seeded random
//! walks through a model as schedules, the shrinking of a failing schedule over an abstract
//! runner, its confirmation by rerunning, Jepsen-style counts and the words of a verdict.
//!
//! A conformance run samples an implementation: a run that finds nothing is `sampled`,
//! never proved, and whatever the target does not let arrival see is `unobserved`.

use super::rng::SplitMix;
use serde::Serialize;

/// The model worlds consistent with every observation so far.
///
/// A definite step maps each world to its successor; an indefinite one (a timeout, a
/// reset, a kill in flight) maps it to every branch it may have taken; an observation
/// keeps only the worlds it fits. An empty set is a violation at that step.
#[derive(Clone, Debug)]
pub struct Candidates<W> {
    worlds: Vec<W>,
}

impl<W: Clone + PartialEq> Candidates<W> {
    /// One world: the start.
    pub fn new(start: W) -> Candidates<W> {
        Candidates {
            worlds: vec![start],
        }
    }

    /// These worlds (equal ones kept once); at least one.
    pub fn of(worlds: Vec<W>) -> Candidates<W> {
        let mut kept: Vec<W> = Vec::with_capacity(worlds.len());
        for world in worlds {
            if !kept.contains(&world) {
                kept.push(world);
            }
        }
        Candidates { worlds: kept }
    }

    /// These worlds as they are, equal ones included (a caller that keeps something beside
    /// each world, which may differ between equal worlds).
    pub fn exactly(worlds: Vec<W>) -> Candidates<W> {
        Candidates { worlds }
    }

    /// The worlds, in the order their branches were taken.
    pub fn worlds(&self) -> &[W] {
        &self.worlds
    }

    /// Whether no world is left.
    pub fn is_empty(&self) -> bool {
        self.worlds.is_empty()
    }

    /// Replaces every world by its branches (equal branches kept once).
    pub fn advance(&mut self, mut branches: impl FnMut(&W) -> Vec<W>) {
        let mut next: Vec<W> = Vec::new();
        for world in &self.worlds {
            for branch in branches(world) {
                if !next.contains(&branch) {
                    next.push(branch);
                }
            }
        }
        self.worlds = next;
    }

    /// Keeps the worlds an observation fits; returns the worlds it had before.
    pub fn keep(&mut self, mut fits: impl FnMut(&W) -> bool) -> Vec<W> {
        let before = self.worlds.clone();
        self.worlds.retain(|world| fits(world));
        before
    }
}

/// Where a property stands after a conformance run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "why")]
pub enum Status {
    /// Checked on every schedule run and never broken: sampled, not proved.
    Sampled,
    /// Broken by a schedule.
    Violated,
    /// The target does not let arrival see what the property needs (the reason says what).
    Unobserved(String),
    /// No schedule exercised it (the reason says why).
    NotExercised(String),
}

impl Status {
    /// The word in reports.
    pub fn word(&self) -> &'static str {
        match self {
            Status::Sampled => "sampled",
            Status::Violated => "violated",
            Status::Unobserved(_) => "unobserved",
            Status::NotExercised(_) => "not exercised",
        }
    }
}

/// A run's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every schedule ran and nothing broke: what was sampled conforms.
    Sampled,
    /// A schedule broke a property (or diverged from the model).
    Violated,
    /// No schedule ran to the end.
    Incomplete,
}

impl Verdict {
    /// The word in reports.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Sampled => "sampled",
            Verdict::Violated => "violated",
            Verdict::Incomplete => "incomplete",
        }
    }
}

/// Jepsen-style counts over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Requests sent, retries and copies included.
    pub attempted: u64,
    /// Acknowledgements read.
    pub acknowledged: u64,
    /// Acknowledgements arrival read and then dropped (lost-ack faults).
    pub dropped_by_arrival: u64,
    /// Requests whose outcome is unknown: timeouts, disconnects, non-2xx, kills in flight.
    pub indefinite: u64,
    /// Of those, the ones arrival cut itself (a disconnect, a kill in flight): the target
    /// had no chance to answer them.
    pub cut_by_arrival: u64,
    /// Acknowledged decisions later missing.
    pub lost: u64,
    /// Indefinite requests whose effect later showed.
    pub recovered: u64,
    /// Versions seen to go down.
    pub regressed: u64,
    /// Things the model has no place for (unknown cards).
    pub unexpected: u64,
    /// Changed payloads acknowledged as if they were duplicates.
    pub changed_payloads_swallowed: u64,
    /// Kills of the target's process group.
    pub kills: u64,
}

impl Counts {
    /// Adds another run's counts.
    pub fn add(&mut self, other: &Counts) {
        self.attempted += other.attempted;
        self.acknowledged += other.acknowledged;
        self.dropped_by_arrival += other.dropped_by_arrival;
        self.indefinite += other.indefinite;
        self.cut_by_arrival += other.cut_by_arrival;
        self.lost += other.lost;
        self.recovered += other.recovered;
        self.regressed += other.regressed;
        self.unexpected += other.unexpected;
        self.changed_payloads_swallowed += other.changed_payloads_swallowed;
        self.kills += other.kills;
    }
}

/// How many reruns of a failing schedule failed the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Reproduced {
    /// Reruns that failed the same way.
    pub hits: usize,
    /// Reruns.
    pub runs: usize,
}

impl Reproduced {
    /// `3/3`.
    pub fn text(self) -> String {
        format!("{}/{}", self.hits, self.runs)
    }

    /// Whether some reruns did not fail the same way.
    pub fn flaky(self) -> bool {
        self.hits < self.runs
    }
}

/// Reruns a failing schedule `runs` times; `fails` says whether one rerun failed the same
/// way.
pub fn confirm<E>(
    runs: usize,
    mut fails: impl FnMut() -> Result<bool, E>,
) -> Result<Reproduced, E> {
    let mut hits = 0;
    for _ in 0..runs {
        if fails()? {
            hits += 1;
        }
    }
    Ok(Reproduced { hits, runs })
}

/// What the shrinker and the confirmations are doing, on standard error: a line when they
/// start and one when they end, always (a failing run against a slow or crashing receiver
/// can spend minutes there, and a CI log should say why), and each rerun as it ends when
/// standard error is a terminal.
pub struct ShrinkProgress {
    live: bool,
    budget: usize,
    runs: usize,
    started: std::time::Instant,
}

impl ShrinkProgress {
    /// Announces the shrinking of `property`'s failure, found by `found_by` in `actions`
    /// actions.
    pub fn start(property: &str, found_by: &str, actions: usize, budget: usize) -> Self {
        eprintln!(
            "arrival conform: {property} found by {found_by} ({actions} action(s)); shrinking \
             it (at most {budget} reruns), then confirming"
        );
        ShrinkProgress {
            live: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            budget,
            runs: 0,
            started: std::time::Instant::now(),
        }
    }

    /// One rerun of `actions` actions ended; `failed`: the same way.
    pub fn rerun(&mut self, actions: usize, failed: bool) {
        self.runs += 1;
        if self.live {
            let how = if failed { "fails" } else { "passes" };
            eprint!(
                "\r  rerun {}/{}: {actions} action(s) {how}    ",
                self.runs, self.budget
            );
        }
    }

    /// The shrinking and confirmation ended with `actions` actions.
    pub fn done(&self, actions: usize, reproduced: Reproduced) {
        if self.live {
            eprintln!();
        }
        eprintln!(
            "arrival conform: shrunk to {actions} action(s) by {} rerun(s), reproduced {} \
             ({:.1} s)",
            self.runs,
            reproduced.text(),
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// Shrinks a failing schedule: removes chunks of steps, halving their size down to one
/// step, keeping every removal after which `fails` still says the schedule fails the same
/// way, until no single step can go or `budget` runs are spent. `fails` is the abstract
/// runner (it may say `false` for a schedule the model does not allow). Returns the
/// shortest schedule found and the runs spent.
pub fn shrink<A: Clone, E>(
    steps: &[A],
    budget: usize,
    mut fails: impl FnMut(&[A]) -> Result<bool, E>,
) -> Result<(Vec<A>, usize), E> {
    let mut best = steps.to_vec();
    let mut spent = 0;
    let mut chunk = best.len().div_ceil(2).max(1);
    loop {
        let mut removed_any = false;
        let mut start = 0;
        while start < best.len() && spent < budget {
            let end = (start + chunk).min(best.len());
            let mut candidate = best[..start].to_vec();
            candidate.extend_from_slice(&best[end..]);
            spent += 1;
            if !candidate.is_empty() && fails(&candidate)? {
                best = candidate;
                removed_any = true;
            } else {
                start += chunk;
            }
        }
        if spent >= budget || (chunk == 1 && !removed_any) {
            return Ok((best, spent));
        }
        if !removed_any {
            chunk = (chunk / 2).max(1);
        }
    }
}

/// Walk `walk` of a seeded family: from `start`, a step drawn uniformly from those
/// `steps` offers until none remains or `max_depth` steps are taken, each applied with
/// `advance` (a step that changes nothing stays in the walk: a real receiver still gets
/// it). Walk `w` depends on (seed, `w`) alone, so it comes back on its own.
pub fn walk<W, S: Clone>(
    start: W,
    steps: impl Fn(&W, &mut Vec<S>),
    advance: impl Fn(&W, &S) -> W,
    (seed, walk): (u64, usize),
    max_depth: usize,
) -> Vec<S> {
    let mut generator = walk_generator(seed, walk);
    let mut world = start;
    let mut taken = Vec::new();
    let mut offered = Vec::new();
    while taken.len() < max_depth {
        offered.clear();
        steps(&world, &mut offered);
        if offered.is_empty() {
            break;
        }
        let step = offered[generator.scaled_below(offered.len())].clone();
        world = advance(&world, &step);
        taken.push(step);
    }
    taken
}

/// The generator of walk `walk` under `seed` (also for the faults a caller adds to it).
pub fn walk_generator(seed: u64, walk: usize) -> SplitMix {
    let a = SplitMix::new(seed ^ 0xC0F0_4A11).next_u64();
    SplitMix::new(SplitMix::new(a ^ walk as u64).next_u64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinking_keeps_only_the_steps_the_failure_needs() {
        // Fails whenever 3 comes somewhere after 1.
        let fails = |steps: &[u32]| -> Result<bool, ()> {
            let one = steps.iter().position(|&s| s == 1);
            let three = steps.iter().rposition(|&s| s == 3);
            Ok(matches!((one, three), (Some(a), Some(b)) if a < b))
        };
        let (shrunk, _) = shrink(&[5, 1, 2, 4, 6, 3, 7], 200, fails).unwrap();
        assert_eq!(shrunk, vec![1, 3]);
    }

    #[test]
    fn an_indefinite_step_forks_and_an_observation_cuts_back() {
        let mut set = Candidates::new(10);
        set.advance(|&w| vec![w, w + 1]);
        assert_eq!(set.worlds(), &[10, 11]);
        set.advance(|&w| vec![w + 1, w + 2]);
        assert_eq!(set.worlds(), &[11, 12, 13]);
        let before = set.keep(|&w| w == 12);
        assert_eq!(before.len(), 3);
        assert_eq!(set.worlds(), &[12]);
        set.keep(|&w| w == 99);
        assert!(set.is_empty());
    }

    #[test]
    fn confirmation_counts_the_reruns_that_failed_the_same_way() {
        let mut n = 0;
        let reproduced = confirm(3, || -> Result<bool, ()> {
            n += 1;
            Ok(n != 2)
        })
        .unwrap();
        assert_eq!(reproduced.text(), "2/3");
        assert!(reproduced.flaky());
    }
}

/// The failure a conformance report's JUnit suite shows: the property (or `diverged`), and
/// the text of its failure (the shrunk steps, how it reproduced, what was seen).
#[derive(Clone, Debug)]
pub struct SuiteFailure {
    /// The property broken, or `diverged`.
    pub property: String,
    /// Whether reruns did not all fail the same way.
    pub flaky: bool,
    /// The failure's text.
    pub text: String,
    /// What was expected and seen, for the `diverged` case.
    pub detail: String,
}

/// A conformance run as a JUnit suite: a case per property, a `diverged` case when nothing
/// named fits, an `expect PROPERTY` case when a wrong receiver is kept as a test (that
/// property's own case then passes when caught as expected), and the `harness` case. The
/// suite fails exactly when the run is not as expected.
pub fn junit_suite(
    name: String,
    properties: &[(String, Status)],
    failure: Option<&SuiteFailure>,
    expect: &str,
    as_expected: bool,
    seconds: f64,
) -> super::junit::ExtraSuite {
    // Each case is named after its property alone, so CI history follows it from run to
    // run; what could not be judged is skipped, with why.
    let mut cases: Vec<(String, Option<String>)> = Vec::new();
    let mut skipped = Vec::new();
    for (name, status) in properties {
        match (status, failure) {
            (Status::Violated, Some(_)) if as_expected && name == expect => {
                cases.push((name.clone(), None));
            }
            (Status::Violated, Some(found)) => cases.push((name.clone(), Some(found.text.clone()))),
            (Status::Unobserved(why) | Status::NotExercised(why), _) => {
                skipped.push((name.clone(), format!("{}: {why}", status.word())));
            }
            _ => cases.push((name.clone(), None)),
        }
    }
    if let Some(found) = failure.filter(|found| found.property == "diverged") {
        let passes = as_expected && expect == "diverged";
        cases.push(("diverged".into(), (!passes).then(|| found.detail.clone())));
    }
    if expect != "pass" {
        let why = (!as_expected).then(|| match failure {
            Some(found) => format!(
                "expected to be caught by {expect}; caught by {}{}",
                found.property,
                if found.flaky { " (flaky)" } else { "" }
            ),
            None => format!("expected to be caught by {expect}; nothing was caught"),
        });
        cases.push((format!("expect {expect}"), why));
    } else if !as_expected && failure.is_none() {
        cases.push((
            "expect pass".into(),
            Some("no schedule ran to the end: the run is incomplete".into()),
        ));
    }
    cases.push(("harness".into(), None));
    super::junit::ExtraSuite {
        skipped,
        name,
        cases,
        seconds,
    }
}

/// A shrunk, confirmed failure as both protocols' reports show it.
#[derive(Clone, Copy, Debug)]
pub struct FoundView<'a> {
    /// The property broken, or `diverged`.
    pub property: &'a str,
    /// The schedule it was found by.
    pub found_by: &'a str,
    /// Its length before shrinking.
    pub original_steps: usize,
    /// The shrunk schedule, in words.
    pub steps: &'a [String],
    /// `3/3`, or fewer.
    pub reproduced: &'a str,
    /// Whether some reruns did not fail the same way.
    pub flaky: bool,
    /// What was expected and what was seen.
    pub detail: &'a str,
}

impl FoundView<'_> {
    /// The failure for the JUnit suite ([`junit_suite`]).
    pub fn suite_failure(&self) -> SuiteFailure {
        SuiteFailure {
            property: self.property.to_owned(),
            flaky: self.flaky,
            text: format!(
                "{} (reproduced {}): {}\n{}",
                self.steps.join(", "),
                self.reproduced,
                self.found_by,
                self.detail
            ),
            detail: self.detail.to_owned(),
        }
    }
}

/// Each property's status, a line each, with why when it is not seen or not exercised.
pub fn properties_text(properties: &[(String, Status)]) -> String {
    let mut out = String::new();
    for (name, status) in properties {
        let why = match status {
            Status::Unobserved(why) | Status::NotExercised(why) => format!(" ({why})"),
            _ => String::new(),
        };
        out += &format!("  {:<24} {}{why}\n", name, status.word());
    }
    out
}

/// The end of a conformance report for people: what was skipped, the warnings, the failure
/// with its shrunk steps, and the verdict.
pub fn report_tail(
    skipped: &[String],
    warnings: &[String],
    found: Option<FoundView<'_>>,
    verdict: Verdict,
) -> String {
    let mut out = String::new();
    for skipped in skipped {
        out += &format!("skipped: {skipped}\n");
    }
    for warning in warnings {
        out += &format!("warning: {warning}\n");
    }
    if let Some(found) = found {
        out += &format!(
            "VIOLATED {} (found by {}, {} step(s), shrunk to {}; reproduced {}{}):\n",
            found.property,
            found.found_by,
            found.original_steps,
            found.steps.len(),
            found.reproduced,
            if found.flaky { ", flaky" } else { "" }
        );
        for (index, step) in found.steps.iter().enumerate() {
            out += &format!("  {}. {step}\n", index + 1);
        }
        out += &format!("{}\n", found.detail);
    }
    out += &format!("verdict: {}", verdict.word());
    out
}

/// How long after sending input `number` (a card delivery, a facts request) a kill in
/// flight lands: drawn in `0..window_ms` from the seed and the number alone, so a shrunk
/// schedule and its reruns kill that input as long after sending it as the run that found
/// the failure did.
pub fn kill_delay(seed: u64, number: u32, window_ms: u64) -> std::time::Duration {
    let salt = u64::from(number).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut draws = crate::harness::rng::SplitMix::new(seed ^ salt);
    std::time::Duration::from_millis(draws.below(window_ms.max(1)))
}
