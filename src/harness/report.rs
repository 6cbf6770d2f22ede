//! Reports: each property's status, counterexamples, state counts and the verdict against
//! what the model file expected, as JSON for machines and text for people.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A property's result in a run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PropertyReport {
    /// Its name.
    pub name: String,
    /// `always` for safety and convergence, `sometimes` for decision coverage.
    pub kind: String,
    /// `holds`, `violated`, `unknown` (state limit hit), `not checked` / `reached`,
    /// `unreached`.
    pub status: String,
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
    /// `pass`, `fail`, or `incomplete` (state limit hit with nothing violated).
    pub verdict: String,
    /// What the model file expects.
    pub expected: String,
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
    for property in report
        .properties
        .iter()
        .filter(|property| property.kind == "always")
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
                "\n  counterexample for {} ({} steps):",
                property.name,
                trace.steps.len()
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
    let verdict = match (report.as_expected, report.expected.as_str()) {
        (true, "pass") => "pass".to_owned(),
        (true, property) => format!("violated as expected ({property})"),
        (false, expected) => format!(
            "{} (expected {expected})  <-- NOT AS EXPECTED",
            report.verdict
        ),
    };
    let _ = writeln!(out, "  verdict: {verdict}");
    out
}
