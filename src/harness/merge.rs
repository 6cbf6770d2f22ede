//! Merging shard reports: the `check --shard K/N --json` documents of N jobs combined into
//! one report per model, judged as one unsharded run would be.
//!
//! A property is violated if any shard violated it (with the shortest of the shards'
//! counterexamples); it holds only if every shard 1..N is present, finished, and none
//! violated it; otherwise it is unknown. The verdict is `fail` with any violation,
//! `incomplete` with a shard missing or stopped at its state limit, else `pass`. State
//! counts are summed over the shards (the shards do not share a visited set, so the sum of
//! unique states counts a state once per shard that reached it). Reports of different
//! models, policies, fixtures, settings (the report's `settings`: fault budgets,
//! reconciliation, reductions) or shard counts, a shard given twice, a report that is not
//! a shard's, and malformed JSON are refused, naming the file.

use super::input::{parse_json, read_text, InputError};
use super::report::{judge, Findings, Kind, MergeReport, ModelReport, PropertyReport, Status};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A `check --json` document, as merge reads it.
#[derive(Deserialize)]
struct Document {
    models: Vec<ModelReport>,
}

/// Reads shard reports (each a `check --json` document).
pub fn read(files: &[PathBuf]) -> Result<Vec<(PathBuf, Vec<ModelReport>)>, InputError> {
    files
        .iter()
        .map(|file| {
            let text = read_text(file)?;
            let document: Document =
                parse_json(file, &text, "expected a `check --json` report object")?;
            if document.models.is_empty() {
                // A sweep's report, or an empty one: merging it would say nothing and pass.
                return Err(InputError::invalid(
                    file,
                    "models",
                    "holds no model report: merge the reports of `arrival check --shard K/N --json`",
                ));
            }
            Ok((file.clone(), document.models))
        })
        .collect()
}

/// Merges shard reports into one report per model, in the order of the first file.
pub fn merge(inputs: &[(PathBuf, Vec<ModelReport>)]) -> Result<Vec<ModelReport>, InputError> {
    let Some((first_file, first)) = inputs.first() else {
        return Err(InputError::invalid(
            Path::new("report merge"),
            "command line",
            "no report to merge",
        ));
    };
    let names: Vec<&str> = first.iter().map(|report| report.model.as_str()).collect();
    let mut groups: BTreeMap<&str, Vec<(&Path, &ModelReport)>> = BTreeMap::new();
    for (file, reports) in inputs {
        for (at, report) in reports.iter().enumerate() {
            let place = format!("models[{at}]");
            // What makes a report no shard report of today's arrival, in check order.
            let unfit = if report.merged.is_some() {
                Some("is already a merged report; merge the shards' own reports")
            } else if report.settings.is_empty() {
                Some(
                    "was written before reports carried their settings (fault budgets, \
                     reductions), so whether its shards checked one state space cannot be \
                     told: run the shards again with this arrival",
                )
            } else if report.shard.is_none() {
                Some(
                    "is not a shard report; merge the reports of `arrival check --shard K/N --json`",
                )
            } else {
                None
            };
            if let Some(why) = unfit {
                return Err(InputError::invalid(
                    file,
                    place,
                    format!("`{}` {why}", report.model),
                ));
            }
            if !names.contains(&report.model.as_str()) {
                return Err(InputError::invalid(
                    file,
                    place,
                    format!(
                        "model `{}` is not in {}: merge the shards of the same models",
                        report.model,
                        first_file.display()
                    ),
                ));
            }
            groups
                .entry(report.model.as_str())
                .or_default()
                .push((file, report));
        }
        for name in &names {
            if !reports.iter().any(|report| report.model == *name) {
                return Err(InputError::invalid(
                    file,
                    "models",
                    format!(
                        "has no report of model `{name}`, which {} has: merge the shards of the same models",
                        first_file.display()
                    ),
                ));
            }
        }
    }
    names
        .iter()
        .map(|name| merge_model(&groups[name]))
        .collect()
}

/// What must be equal in every shard report of one model.
fn identity(report: &ModelReport) -> Vec<(&'static str, String)> {
    let checked: Vec<&str> = report
        .properties
        .iter()
        .filter(|property| property.kind == Kind::Always && property.status != Status::NotChecked)
        .map(|property| property.name.as_str())
        .collect();
    vec![
        ("protocol", report.protocol.clone()),
        ("fixture", report.fixture.clone()),
        ("policy", report.policy.clone()),
        ("settings", report.settings.clone()),
        ("expected", report.expected.to_string()),
        ("parts", report.parts.to_string()),
        (
            "shard count",
            report
                .shard
                .as_ref()
                .map_or(0, |shard| shard.count)
                .to_string(),
        ),
        ("checked properties", checked.join(", ")),
        // Shards split the first steps of the same state space only if they saw the same
        // prefixes: a different budget or policy changes them.
        (
            "first-step prefixes",
            report.shard.as_ref().map_or(String::new(), |shard| {
                format!("{:?} at depth {:?}", shard.prefixes, shard.prefix_depth)
            }),
        ),
        // Shards by owner split the same owners only if they met the same ones.
        (
            "owners",
            report.shard.as_ref().map_or(String::new(), |shard| {
                format!("{} {:?} {:?}", shard.by, shard.owners, shard.shared_states)
            }),
        ),
    ]
}

fn merge_model(shards: &[(&Path, &ModelReport)]) -> Result<ModelReport, InputError> {
    let (first_file, first) = shards[0];
    let count = first.shard.as_ref().map_or(0, |shard| shard.count);
    let expected_identity = identity(first);
    let mut by_index: BTreeMap<usize, (&Path, &ModelReport)> = BTreeMap::new();
    for &(file, report) in shards {
        for ((what, mine), (_, theirs)) in identity(report).iter().zip(&expected_identity) {
            if mine != theirs {
                return Err(InputError::invalid(
                    file,
                    format!("model `{}`", report.model),
                    format!(
                        "{what} `{mine}` differs from `{theirs}` in {}: merge the shards of one model under one policy, fixture, settings and shard count",
                        first_file.display()
                    ),
                ));
            }
        }
        let index = report.shard.as_ref().map_or(0, |shard| shard.index);
        if let Some((other, _)) = by_index.insert(index, (file, report)) {
            return Err(InputError::invalid(
                file,
                format!("model `{}`", report.model),
                format!(
                    "shard {index}/{count} is also in {}: each shard once",
                    other.display()
                ),
            ));
        }
    }
    let present: Vec<usize> = by_index.keys().copied().collect();
    let missing: Vec<usize> = (1..=count)
        .filter(|index| !by_index.contains_key(index))
        .collect();
    let reports: Vec<&ModelReport> = by_index.values().map(|(_, report)| *report).collect();
    let mut properties = Vec::new();
    let mut violated = Vec::new();
    let mut undecided = !missing.is_empty();
    for property in first.properties.iter().filter(|p| p.kind == Kind::Always) {
        let statuses: Vec<&PropertyReport> = reports
            .iter()
            .filter_map(|report| {
                report
                    .properties
                    .iter()
                    .find(|theirs| theirs.kind == Kind::Always && theirs.name == property.name)
            })
            .collect();
        let breaking = statuses
            .iter()
            .filter(|theirs| theirs.status == Status::Violated)
            .min_by_key(|theirs| theirs.trace.as_ref().map_or(0, |trace| trace.steps.len()));
        let merged = if property.status == Status::NotChecked {
            PropertyReport {
                trace: None,
                ..property.clone()
            }
        } else if let Some(breaking) = breaking {
            violated.push(property.name.clone());
            (*breaking).clone()
        } else {
            let holds = missing.is_empty()
                && statuses.len() == reports.len()
                && statuses.iter().all(|theirs| theirs.status == Status::Holds);
            undecided |= !holds;
            PropertyReport {
                status: if holds {
                    Status::Holds
                } else {
                    Status::Unknown
                },
                trace: None,
                detail: None,
                ..property.clone()
            }
        };
        properties.push(merged);
    }
    let mut coverage: BTreeMap<String, u64> = BTreeMap::new();
    for report in &reports {
        for (name, count) in &report.coverage {
            *coverage.entry(name.clone()).or_default() += count;
        }
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
    let findings = Findings {
        violated: &violated,
        sampled: false,
        complete: !undecided,
        partial: false,
    };
    let (verdict, as_expected) = judge(&findings, &first.expected);
    let states = reports.iter().map(|report| report.states).sum();
    let seconds: f64 = reports.iter().map(|report| report.seconds).sum();
    Ok(ModelReport {
        model: first.model.clone(),
        fixture: first.fixture.clone(),
        protocol: first.protocol.clone(),
        policy: first.policy.clone(),
        settings: first.settings.clone(),
        verdict,
        expected: first.expected.clone(),
        as_expected,
        violated,
        parts: first.parts,
        states,
        unique_states: reports.iter().map(|report| report.unique_states).sum(),
        max_depth: reports
            .iter()
            .map(|report| report.max_depth)
            .max()
            .unwrap_or(0),
        eager_steps: reports.iter().map(|report| report.eager_steps).sum(),
        seconds,
        states_per_second: states as f64 / seconds.max(1e-9),
        bytes_per_state: first.bytes_per_state,
        peak_rss_mib: reports
            .iter()
            .filter_map(|report| report.peak_rss_mib)
            .reduce(f64::max),
        properties,
        coverage,
        shard: None,
        simulation: None,
        merged: Some(MergeReport {
            count,
            present,
            missing,
            files: by_index
                .values()
                .map(|(file, _)| file.display().to_string())
                .collect(),
        }),
    })
}
