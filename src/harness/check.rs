//! From a model to a verdict: explore every part, find a shortest counterexample for each
//! violated property, count coverage, and compare the result with what the model file
//! expected.

use super::explore::{explore, shortest, Settings};
use super::report::{peak_rss_mib, ModelReport, PropertyReport, TraceReport};
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
}

/// Checks a model made of independent parts (one part unless the protocol splits it).
/// `trace` turns the shortest violating steps of a part into a counterexample report (and
/// writes it where the protocol keeps them).
pub fn check_parts<P: Protocol>(
    subject: Subject,
    parts: &[P],
    settings: &Settings,
    mut trace: impl FnMut(&P, usize, &[P::Step]) -> Result<TraceReport, InputError>,
) -> Result<ModelReport, InputError> {
    let mut totals = (0usize, 0usize, 0usize, 0.0f64);
    let mut complete = true;
    let mut coverage: BTreeMap<String, u64> = BTreeMap::new();
    // For each violated property, the part where it was found and the path stateright gave.
    let mut found: BTreeMap<String, (usize, Vec<P::Step>)> = BTreeMap::new();
    for (index, part) in parts.iter().enumerate() {
        let run = explore(part.clone(), settings);
        complete &= !run.hit_limit(settings.state_limit);
        totals.0 += run.states;
        totals.1 += run.unique_states;
        totals.2 = totals.2.max(run.max_depth);
        totals.3 += run.seconds;
        for (name, steps) in run.discoveries {
            found.entry(name).or_insert((index, steps));
        }
        for (name, count) in part.coverage() {
            *coverage.entry(name.to_owned()).or_default() += count;
        }
    }
    let checked = |index: usize| parts.first().is_some_and(|part| part.checks(index));
    let mut properties = Vec::new();
    let mut violated = Vec::new();
    for (index, &name) in P::PROPERTIES.iter().enumerate() {
        let status = match (found.get(name), complete) {
            _ if !checked(index) => "not checked",
            (Some(_), _) => "violated",
            (None, true) => "holds",
            (None, false) => "unknown",
        };
        let report = match found.get(name) {
            Some((part, fallback)) if checked(index) => {
                violated.push(name.to_owned());
                let part = &parts[*part];
                let steps = shortest(part, index, settings).unwrap_or_else(|| fallback.clone());
                Some(trace(part, index, &steps)?)
            }
            _ => None,
        };
        properties.push(PropertyReport {
            name: name.into(),
            kind: "always".into(),
            status: status.into(),
            trace: report,
            detail: None,
        });
    }
    for (name, count) in &coverage {
        properties.push(PropertyReport {
            name: format!("reached-{name}"),
            kind: "sometimes".into(),
            status: if *count > 0 { "reached" } else { "unreached" }.into(),
            trace: None,
            detail: None,
        });
    }
    let verdict = if !violated.is_empty() {
        "fail"
    } else if complete {
        "pass"
    } else {
        "incomplete"
    };
    let as_expected = match subject.expected {
        None => verdict == "pass",
        Some(property) => violated.iter().any(|name| name == property),
    };
    let (states, unique_states, max_depth, seconds) = totals;
    Ok(ModelReport {
        model: subject.model,
        protocol: subject.protocol,
        fixture: subject.fixture,
        policy: subject.policy,
        verdict: verdict.into(),
        expected: subject.expected.unwrap_or("pass").into(),
        as_expected,
        violated,
        parts: parts.len(),
        states,
        unique_states,
        max_depth,
        seconds,
        states_per_second: states as f64 / seconds.max(1e-9),
        bytes_per_state: subject.bytes_per_state,
        peak_rss_mib: peak_rss_mib(),
        properties,
        coverage,
    })
}

/// The report of a model whose fixture breaks a precondition (named `property`): nothing is
/// explored, since no terminal state could be judged, and every other checked property is
/// `unknown`.
pub fn precondition_failed<P: Protocol>(
    subject: Subject,
    checks: impl Fn(usize) -> bool,
    property: &'static str,
    detail: String,
) -> ModelReport {
    let properties = P::PROPERTIES
        .iter()
        .enumerate()
        .map(|(index, &name)| {
            let status = if name == property {
                "violated"
            } else if checks(index) {
                "unknown"
            } else {
                "not checked"
            };
            PropertyReport {
                name: name.into(),
                kind: "always".into(),
                status: status.into(),
                trace: None,
                detail: (name == property).then(|| detail.clone()),
            }
        })
        .collect();
    ModelReport {
        model: subject.model,
        protocol: subject.protocol,
        fixture: subject.fixture,
        policy: subject.policy,
        verdict: "fail".into(),
        expected: subject.expected.unwrap_or("pass").into(),
        as_expected: subject.expected == Some(property),
        violated: vec![property.to_owned()],
        parts: 1,
        states: 0,
        unique_states: 0,
        max_depth: 0,
        seconds: 0.0,
        states_per_second: 0.0,
        bytes_per_state: subject.bytes_per_state,
        peak_rss_mib: peak_rss_mib(),
        properties,
        coverage: BTreeMap::new(),
    }
}
