//! Reports: each property's status, counterexamples, state counts and the verdict against
//! what the model file expected, as JSON for machines and text for people.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A model's verdict, serialised as its word (`pass`, `fail`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Everything explored, nothing violated.
    Pass,
    /// A property was violated.
    Fail,
    /// Nothing violated, but not everything explored (the state limit, or shards missing).
    Incomplete,
    /// One shard of several violated nothing in its share.
    Partial,
    /// A simulation's walks violated nothing (never `pass`: they prove nothing).
    Sampled,
}

/// A property's status in a report, serialised as its words (`holds`, `not checked`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Checked everywhere and never broken.
    Holds,
    /// Broken (the report carries a counterexample or a detail).
    Violated,
    /// Not decided: the state limit stopped the run, or shards are missing.
    Unknown,
    /// No walk of a simulation broke it.
    Sampled,
    /// The model does not check it.
    #[serde(rename = "not checked")]
    NotChecked,
    /// A `sometimes` property (decision coverage) that some explored transition met.
    Reached,
    /// A `sometimes` property no explored transition met.
    Unreached,
}

/// What kind of property a report line is, serialised as its word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A safety or convergence property: it must hold on every explored state.
    Always,
    /// Decision coverage: some explored transition should meet it.
    Sometimes,
}

impl Kind {
    /// The kind's word in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Always => "always",
            Kind::Sometimes => "sometimes",
        }
    }
}

/// What a model file expects: everything holds, or one property is violated.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Expected {
    /// Everything holds (`expect = "pass"`).
    Pass,
    /// This property is violated (a mutant's catalogue property).
    Violates(String),
}

/// What a run found, as [`judge`] reads it.
#[derive(Clone, Copy, Debug)]
pub struct Findings<'a> {
    /// The violated properties.
    pub violated: &'a [String],
    /// Whether the run sampled random walks instead of exploring.
    pub sampled: bool,
    /// Whether everything the run was asked to cover was covered (no state limit hit, no
    /// shard missing).
    pub complete: bool,
    /// Whether the run covered one shard's share of several.
    pub partial: bool,
}

/// The one verdict rule, for a check, a shard, a simulation and a merge: the verdict and
/// whether it is what `expected` asks.
///
/// A violation fails; otherwise a simulation is `sampled`, a run stopped short
/// `incomplete`, one shard of several `partial`, anything else `pass`. A model expected to
/// pass is as expected when its verdict is `pass`, `partial` or `sampled`; one expecting a
/// violation when that property is violated, or, in one shard's share, always (another
/// shard may hold the violation).
pub fn judge(findings: &Findings, expected: &Expected) -> (Verdict, bool) {
    let verdict = if !findings.violated.is_empty() {
        Verdict::Fail
    } else if findings.sampled {
        Verdict::Sampled
    } else if !findings.complete {
        Verdict::Incomplete
    } else if findings.partial {
        Verdict::Partial
    } else {
        Verdict::Pass
    };
    let as_expected = match expected {
        Expected::Pass => matches!(verdict, Verdict::Pass | Verdict::Partial | Verdict::Sampled),
        Expected::Violates(_) if findings.partial => true,
        Expected::Violates(property) => findings.violated.contains(property),
    };
    (verdict, as_expected)
}

impl Verdict {
    /// The verdict's word in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Incomplete => "incomplete",
            Verdict::Partial => "partial",
            Verdict::Sampled => "sampled",
        }
    }
}

impl Status {
    /// The status's words in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Holds => "holds",
            Status::Violated => "violated",
            Status::Unknown => "unknown",
            Status::Sampled => "sampled",
            Status::NotChecked => "not checked",
            Status::Reached => "reached",
            Status::Unreached => "unreached",
        }
    }

    /// `reached` or `unreached`, for a decision-coverage count.
    pub fn coverage(count: u64) -> Status {
        if count > 0 {
            Status::Reached
        } else {
            Status::Unreached
        }
    }
}

impl Expected {
    /// From a protocol's expected violation (`None`: everything holds).
    pub fn from_property(property: Option<&str>) -> Expected {
        property.map_or(Expected::Pass, |name| Expected::Violates(name.to_owned()))
    }

    /// `pass`, or the expected property's name: the word in reports.
    pub fn as_str(&self) -> &str {
        match self {
            Expected::Pass => "pass",
            Expected::Violates(property) => property,
        }
    }
}

macro_rules! words {
    ($($type:ty),*) => {$(
        impl fmt::Display for $type {
            fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl PartialEq<str> for $type {
            fn eq(&self, word: &str) -> bool {
                self.as_str() == word
            }
        }
        impl PartialEq<&str> for $type {
            fn eq(&self, word: &&str) -> bool {
                self.as_str() == *word
            }
        }
    )*};
}

words!(Verdict, Status, Expected, Kind);

impl Serialize for Expected {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Expected {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let word = String::deserialize(deserializer)?;
        Ok(match word.as_str() {
            "pass" => Expected::Pass,
            _ => Expected::Violates(word),
        })
    }
}

/// A property's result in a run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PropertyReport {
    /// Its name.
    pub name: String,
    /// `always` for safety and convergence, `sometimes` for decision coverage.
    pub kind: Kind,
    /// `holds`, `violated`, `unknown` (state limit hit, or shards missing), `sampled` (no
    /// walk of a simulation broke it), `not checked` / `reached`, `unreached`.
    pub status: Status,
    /// For a violation: the shortest counterexample found.
    pub trace: Option<TraceReport>,
    /// For a violated precondition: what is wrong with the fixture, in domain terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A counterexample.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TraceReport {
    /// The steps in domain terms.
    pub steps: Vec<String>,
    /// The fixture it was written to, with `--trace-out`.
    pub fixture: Option<String>,
    /// The step table, as replay prints it under the checked policy.
    pub table: String,
    /// The trace as a Mermaid sequence diagram.
    #[serde(default)]
    pub mermaid: String,
    /// Whether the trace is known to be a shortest one. False when the breadth-first rerun
    /// that looks for it stopped at the state limit (or, for a simulation, at its budget)
    /// before reaching the violation: the trace is then the path the first search found.
    #[serde(default = "known_shortest")]
    pub shortest: bool,
}

fn known_shortest() -> bool {
    true
}

/// One model's result.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ModelReport {
    /// The model file.
    pub model: String,
    /// The fixture.
    pub fixture: String,
    /// The protocol (`card`, `facts`).
    #[serde(default)]
    pub protocol: String,
    /// The policy checked.
    pub policy: String,
    /// What else shapes the state space: fault budgets, reconciliation, reductions (card);
    /// consumers and fault budgets (facts). Empty in reports written before it existed.
    #[serde(default)]
    pub settings: String,
    /// `pass`, `fail`, or `incomplete` (state limit hit with nothing violated, or a merge
    /// with shards missing); `partial` for one shard that violated nothing in its share;
    /// `sampled` for a simulation that found no violation (never `pass`).
    pub verdict: Verdict,
    /// What the model file expects: `pass`, or the name of the property it expects violated.
    pub expected: Expected,
    /// Whether the verdict is the expected one.
    pub as_expected: bool,
    /// The violated properties.
    pub violated: Vec<String>,
    /// How many independent parts were checked (1 unless the model file says `split`).
    pub parts: usize,
    /// States generated, repeats included.
    pub states: usize,
    /// Distinct states.
    pub unique_states: usize,
    /// Longest path explored (states, initial included).
    pub max_depth: usize,
    /// Steps depth-first search took alone where the model named one (redeliveries of
    /// recorded content, for card models): followed at once, their worlds not kept, so not
    /// among `states`. 0 in reports written before it existed.
    #[serde(default)]
    pub eager_steps: usize,
    /// Wall time of the main run.
    pub seconds: f64,
    /// States generated per second.
    pub states_per_second: f64,
    /// Estimated heap and inline bytes of one state of this model.
    pub bytes_per_state: usize,
    /// Peak resident memory of this process so far, in MiB (Linux).
    pub peak_rss_mib: Option<f64>,
    /// Every property's status.
    pub properties: Vec<PropertyReport>,
    /// How many explored transitions met each decision kind and reconciliation outcome.
    pub coverage: BTreeMap<String, u64>,
    /// For one shard of a sharded check (`--shard K/N`): the share it checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardReport>,
    /// For a simulation (`--simulate N`): the walks and what they found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulation: Option<SimulationReport>,
    /// For shard reports merged into one (`arrival report merge`): which shards were there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged: Option<MergeReport>,
}

/// The share of a model one shard checked.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ShardReport {
    /// K, from 1.
    pub index: usize,
    /// N.
    pub count: usize,
    /// `parts` (the model's independent parts, `i % N == K - 1`), `owners` (the worlds of
    /// some owners of a model of one part, and the shared worlds) or `first-steps` (the
    /// subtrees of the first steps of a model of one part).
    pub by: String,
    /// The parts this shard checked (0-based indices among the model's `parts`).
    pub parts: Vec<usize>,
    /// With `first-steps`: how many prefixes the first steps make in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefixes: Option<usize>,
    /// With `first-steps`: how many of them are this shard's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefixes_taken: Option<usize>,
    /// With `first-steps`: how many steps long the prefixes are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_depth: Option<usize>,
    /// With `owners`: how many owners the model has in all, when the shared worlds were few
    /// enough to list them (otherwise absent: each owner went to the shard its hash names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owners: Option<usize>,
    /// With listed `owners`: how many of them are this shard's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owners_taken: Option<usize>,
    /// With `owners`: how many shared worlds (explored by every shard) were met listing the
    /// owners (all of them when `owners` is present; the limit it stopped at otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_states: Option<usize>,
}

impl ShardReport {
    /// Shard `spec` of a model, over `parts`, saying nothing yet of how it was split.
    pub fn new(spec: super::shard::ShardSpec, parts: Vec<usize>) -> ShardReport {
        ShardReport {
            index: spec.index,
            count: spec.count,
            by: String::new(),
            parts,
            prefixes: None,
            prefixes_taken: None,
            prefix_depth: None,
            owners: None,
            owners_taken: None,
            shared_states: None,
        }
    }
}

/// What a simulation did and found.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SimulationReport {
    /// The seed.
    pub seed: u64,
    /// Walks asked for, per part.
    pub walks: usize,
    /// Walks taken, over every part (fewer than asked once every checked property was
    /// violated).
    pub walked: usize,
    /// Steps taken, over every walk.
    pub steps: u64,
    /// Distinct states visited (a lower bound when `counted_all` is false).
    pub distinct_states: usize,
    /// Whether every distinct state was counted.
    pub counted_all: bool,
    /// The most steps one walk may take.
    pub max_depth: usize,
    /// Walks stopped by `max_depth`.
    pub capped_walks: usize,
    /// Walks per second.
    pub walks_per_second: f64,
    /// The walks that broke a property.
    pub violations: Vec<SampledViolation>,
}

/// A violation a walk found, and how to walk it again.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SampledViolation {
    /// The property.
    pub property: String,
    /// The part the walk went through (0-based).
    pub part: usize,
    /// The walk's number (0-based): `--simulate walk+1 --seed SEED` walks it again.
    pub walk: usize,
    /// Steps the walk took to the violation.
    pub walked: usize,
    /// Steps in the reported trace.
    pub trace_steps: usize,
    /// Whether the trace is a shortest counterexample (found by a bounded breadth-first
    /// search); otherwise it is the walk with its loops cut out.
    pub shortest: bool,
}

/// Which shards a merged report combines.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MergeReport {
    /// N.
    pub count: usize,
    /// The shards present, from 1.
    pub present: Vec<usize>,
    /// The shards missing.
    pub missing: Vec<usize>,
    /// The shard reports' files, in shard order.
    pub files: Vec<String>,
}

/// Peak resident memory of this process (VmHWM), in MiB.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Renders one model's result for people.
pub fn render(report: &ModelReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "model {} ({} fixture {}, policy {})",
        report.model, report.protocol, report.fixture, report.policy
    );
    let _ = writeln!(
        out,
        "  {}{} states, {} unique, max depth {}, {:.2} s, {:.0} states/s, ~{} bytes/state, peak RSS {}",
        if report.parts > 1 { format!("{} parts: ", report.parts) } else { String::new() },
        report.states,
        report.unique_states,
        report.max_depth,
        report.seconds,
        report.states_per_second,
        report.bytes_per_state,
        report
            .peak_rss_mib
            .map_or_else(|| "n/a".into(), |mib| format!("{mib:.0} MiB")),
    );
    if report.eager_steps > 0 {
        let _ = writeln!(
            out,
            "  {} steps taken alone (redeliveries of recorded content, not counted as states)",
            report.eager_steps
        );
    }
    for property in report
        .properties
        .iter()
        .filter(|property| property.kind == Kind::Always)
    {
        match &property.detail {
            Some(detail) => {
                let _ = writeln!(out, "  {:<24} {}: {detail}", property.name, property.status);
            }
            None => {
                let _ = writeln!(out, "  {:<24} {}", property.name, property.status);
            }
        }
    }
    let reached: Vec<String> = report
        .coverage
        .iter()
        .map(|(name, count)| format!("{name}={count}"))
        .collect();
    // Counted per explored transition, transitions back to a known state included (a
    // redelivery of recorded content is checked, then dropped): not a count of states.
    let _ = writeln!(
        out,
        "  decisions met on explored transitions (repeats included): {}",
        reached.join(" ")
    );
    let unreached: Vec<&str> = report
        .coverage
        .iter()
        .filter(|(_, count)| **count == 0)
        .map(|(name, _)| name.as_str())
        .collect();
    if !unreached.is_empty() {
        let _ = writeln!(out, "  unreached: {}", unreached.join(", "));
    }
    for property in &report.properties {
        if let Some(trace) = &property.trace {
            let _ = writeln!(
                out,
                "\n  counterexample for {} ({} steps{}):",
                property.name,
                trace.steps.len(),
                if trace.shortest {
                    ""
                } else {
                    "; not known to be shortest: the breadth-first search for one stopped at its state budget"
                }
            );
            for (index, step) in trace.steps.iter().enumerate() {
                let _ = writeln!(out, "    {}. {step}", index + 1);
            }
            if let Some(fixture) = &trace.fixture {
                let _ = writeln!(out, "  written to {fixture}");
            }
            for line in trace.table.lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    if let Some(shard) = &report.shard {
        let _ = writeln!(
            out,
            "  shard {}/{} by {}: {}",
            shard.index,
            shard.count,
            shard.by,
            match (shard.prefixes, shard.prefixes_taken) {
                (Some(total), Some(taken)) => format!(
                    "{taken} of {total} prefixes of {} step(s)",
                    shard.prefix_depth.unwrap_or(0)
                ),
                _ if shard.parts.is_empty() => "no part".to_owned(),
                _ => format!("parts {:?} of {}", shard.parts, report.parts),
            }
        );
    }
    if let Some(simulation) = &report.simulation {
        let _ = writeln!(
            out,
            "  simulation, seed {}: {} walks, {} steps, {} distinct states{}, {} walks stopped at {} steps, {:.0} walks/s",
            simulation.seed,
            simulation.walked,
            simulation.steps,
            simulation.distinct_states,
            if simulation.counted_all { "" } else { " at least" },
            simulation.capped_walks,
            simulation.max_depth,
            simulation.walks_per_second,
        );
        for found in &simulation.violations {
            let _ = writeln!(
                out,
                "  {} violated by walk {} (part {}) after {} steps; again with --simulate {} --seed {}; trace of {} steps{}",
                found.property,
                found.walk,
                found.part,
                found.walked,
                found.walk + 1,
                simulation.seed,
                found.trace_steps,
                if found.shortest { ", a shortest one" } else { ", not necessarily shortest" },
            );
        }
        let _ = writeln!(
            out,
            "  simulation samples behaviours: it proves nothing about the behaviours no walk visited"
        );
    }
    if let Some(merged) = &report.merged {
        let _ = writeln!(
            out,
            "  merged shards {:?} of {}{}",
            merged.present,
            merged.count,
            if merged.missing.is_empty() {
                String::new()
            } else {
                format!("; MISSING shards {:?}", merged.missing)
            }
        );
    }
    let verdict = match (report.as_expected, &report.expected) {
        (_, Expected::Violates(property))
            if report.shard.is_some() && !report.violated.contains(property) =>
        {
            format!(
                "{} in this shard's share ({property} not violated here; merge every shard's report for the model's verdict)",
                report.verdict
            )
        }
        _ if report.verdict == Verdict::Partial => format!(
            "partial (nothing violated in this shard's share; merge every shard's report for the model's verdict, expected {})",
            report.expected
        ),
        (true, Expected::Pass) if report.verdict == Verdict::Sampled => {
            "sampled: no violation found (not a pass: simulation proves nothing about unvisited behaviours)".to_owned()
        }
        (true, Expected::Pass) => Verdict::Pass.to_string(),
        (true, Expected::Violates(property)) => format!("violated as expected ({property})"),
        (false, expected) => format!(
            "{} (expected {expected})  <-- NOT AS EXPECTED",
            report.verdict
        ),
    };
    let _ = writeln!(out, "  verdict: {verdict}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_serialise_to_the_report_words() {
        let words = |value: serde_json::Value| value.as_str().map(str::to_owned);
        for verdict in [
            Verdict::Pass,
            Verdict::Fail,
            Verdict::Incomplete,
            Verdict::Partial,
            Verdict::Sampled,
        ] {
            let json = serde_json::to_value(verdict).unwrap();
            assert_eq!(words(json.clone()).as_deref(), Some(verdict.as_str()));
            assert_eq!(serde_json::from_value::<Verdict>(json).unwrap(), verdict);
        }
        assert_eq!(
            serde_json::to_value(Status::NotChecked).unwrap(),
            serde_json::json!("not checked")
        );
        assert_eq!(
            serde_json::from_value::<Status>(serde_json::json!("holds")).unwrap(),
            Status::Holds
        );
        for expected in [Expected::Pass, Expected::Violates("no-regression".into())] {
            let json = serde_json::to_value(&expected).unwrap();
            assert_eq!(words(json.clone()).as_deref(), Some(expected.as_str()));
            assert_eq!(serde_json::from_value::<Expected>(json).unwrap(), expected);
        }
    }

    fn findings(violated: &[String], sampled: bool, complete: bool, partial: bool) -> Findings<'_> {
        Findings {
            violated,
            sampled,
            complete,
            partial,
        }
    }

    #[test]
    fn one_rule_judges_runs_shards_simulations_and_merges() {
        let none: &[String] = &[];
        let some = &["no-regression".to_owned()][..];
        let pass = Expected::Pass;
        let mutant = Expected::Violates("no-regression".into());
        let other = Expected::Violates("converges".into());
        let cases = [
            (
                findings(none, false, true, false),
                &pass,
                (Verdict::Pass, true),
            ),
            (
                findings(none, false, false, false),
                &pass,
                (Verdict::Incomplete, false),
            ),
            (
                findings(none, true, true, false),
                &pass,
                (Verdict::Sampled, true),
            ),
            (
                findings(none, false, true, true),
                &pass,
                (Verdict::Partial, true),
            ),
            (
                findings(some, false, true, false),
                &pass,
                (Verdict::Fail, false),
            ),
            (
                findings(some, false, true, false),
                &mutant,
                (Verdict::Fail, true),
            ),
            (
                findings(some, false, true, false),
                &other,
                (Verdict::Fail, false),
            ),
            // One shard's share cannot tell an expected violation is missing.
            (
                findings(none, false, true, true),
                &mutant,
                (Verdict::Partial, true),
            ),
            (
                findings(none, false, true, false),
                &mutant,
                (Verdict::Pass, false),
            ),
        ];
        for (found, expected, judged) in cases {
            assert_eq!(judge(&found, expected), judged, "{found:?} {expected:?}");
        }
    }
}
