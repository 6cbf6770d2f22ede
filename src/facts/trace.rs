//! Counterexamples for people and for replay: a trace as fixture schedule steps
//! ([`raw_step`]), a step table, a replayable fixture file and a sequence diagram
//! ([`trace`]).

use super::fixture::{
    RawApplication, RawFixture, RawResolve, RawStep, RawTerminate, RawUpgrade, Scenario,
};
use super::model::describe_step;
use super::model_file::LoadedModel;
use super::property::Property;
use super::replay::{replay, Report};
use super::step::{Consumer, Keep, PostFault, Step};
use super::table::render_table;
use super::world::{Decision, Setup};
use crate::harness::diagram::{Diagram, Message};
use crate::harness::model_file::{write_diagram, write_trace, TraceOrigin};
use crate::harness::report::TraceReport;
use crate::harness::timestamp::format_rfc3339;
use crate::harness::InputError;
use std::path::Path;

/// A schedule step as fixtures write it.
pub fn raw_step(step: &Step) -> RawStep {
    match step {
        Step::Post { request, fault } => RawStep {
            post: Some(*request),
            response_lost: *fault == Some(PostFault::ResponseLost),
            stream_unavailable: *fault == Some(PostFault::StreamUnavailable),
            ..RawStep::default()
        },
        Step::Consume { consumer, crash } => RawStep {
            consume: Some(consumer.0.clone()),
            crash: *crash,
            ..RawStep::default()
        },
        Step::Recover { consumer, crash } => RawStep {
            recover: Some(consumer.0.clone()),
            crash: *crash,
            ..RawStep::default()
        },
        Step::Claim { consumer, crash } => RawStep {
            claim: Some(consumer.0.clone()),
            crash: *crash,
            ..RawStep::default()
        },
        Step::Upgrade {
            application,
            material_version,
        } => RawStep {
            upgrade: Some(RawUpgrade {
                application: application.application_id.clone(),
                tenant_id: Some(application.tenant_id.clone()),
                material_version: *material_version,
            }),
            ..RawStep::default()
        },
        Step::Poison => RawStep {
            poison: true,
            ..RawStep::default()
        },
        Step::Undecidable { request } => RawStep {
            undecidable: Some(*request),
            ..RawStep::default()
        },
        Step::Register {
            application,
            business_key,
            material_version,
        } => RawStep {
            register: Some(RawApplication {
                tenant_id: application.tenant_id.clone(),
                application_id: application.application_id.clone(),
                business_key: business_key.clone(),
                material_version: *material_version,
            }),
            ..RawStep::default()
        },
        Step::Terminate {
            application,
            reason,
            at,
        } => RawStep {
            terminate: Some(RawTerminate {
                application: application.application_id.clone(),
                tenant_id: Some(application.tenant_id.clone()),
                reason: reason.clone(),
                at: format_rfc3339(*at),
            }),
            ..RawStep::default()
        },
        Step::Resolve { fact, keep, reason } => RawStep {
            resolve: Some(RawResolve {
                tenant_id: fact.tenant_id.clone(),
                source: fact.source,
                event_id: fact.event_id.clone(),
                keep: match keep {
                    Keep::First => "first".into(),
                    Keep::Variant | Keep::VariantOf(_) => "variant".into(),
                },
                variant_request: match keep {
                    Keep::VariantOf(n) => Some(*n),
                    _ => None,
                },
                reason: reason.clone(),
            }),
            ..RawStep::default()
        },
        Step::ExpireQuarantine { at } => RawStep {
            expire_quarantine: Some(format_rfc3339(*at)),
            ..RawStep::default()
        },
    }
}

/// Describes, tabulates and (with `out_dir`) writes one counterexample as a fixture whose
/// schedule replays it.
pub fn trace(
    loaded: &LoadedModel,
    property: Property,
    steps: &[Step],
    out_dir: Option<&Path>,
) -> Result<TraceReport, InputError> {
    let scenario = &loaded.model.scenario;
    let mut replayed = Scenario::clone(scenario);
    replayed.setup = Setup::clone(&loaded.model.setup);
    replayed.schedule = Some(steps.to_vec());
    let report = replay(&replayed);
    let table = render_table(&report);
    let diagram = diagram(loaded, property, &report);
    let written = match out_dir {
        None => None,
        Some(dir) => {
            let text =
                std::fs::read_to_string(&scenario.file).map_err(|source| InputError::Io {
                    file: scenario.file.clone(),
                    source,
                })?;
            let mut raw: RawFixture = serde_json::from_str(&text).map_err(|error| {
                InputError::invalid(&scenario.file, "fixture", error.to_string())
            })?;
            raw.name = Some(format!(
                "{}: {} under {}",
                scenario.name, property, loaded.policy
            ));
            raw.description = Some(format!(
                "Counterexample found by `arrival check {}`: under policy {} this schedule violates {}. `arrival replay FILE` replays it under that policy (the trace block's), `--policy spec` under the contract.",
                loaded.path.display(),
                loaded.policy,
                property,
            ));
            raw.schedule = Some(steps.iter().map(raw_step).collect());
            raw.trace = Some(TraceOrigin {
                model: loaded.path.display().to_string(),
                policy: loaded.policy.clone(),
                violates: property.name().to_owned(),
            });
            raw.expect = None;
            Some(write_trace(dir, &loaded.path, property.name(), &raw)?)
        }
    };
    if let Some(fixture) = &written {
        write_diagram(fixture, &diagram)?;
    }
    Ok(TraceReport {
        mermaid: diagram.mermaid(),
        steps: steps.iter().map(describe_step).collect(),
        fixture: written,
        table,
        shortest: true,
    })
}

/// The counterexample as a sequence diagram: the source, ingress, the stream, each
/// consumer and the inbox; each step's answer or verdict, what it changed (pending entries,
/// facts, READY), the violating step.
fn diagram(loaded: &LoadedModel, property: Property, report: &Report) -> Diagram {
    let consumers = &loaded.model.consumers;
    let (source, ingress, stream, inbox) = (0, 1, 2, 3 + consumers.len());
    let lane_of = |consumer: &Consumer| {
        3 + consumers
            .iter()
            .position(|known| known == consumer)
            .unwrap_or_default()
    };
    let message = |from, to, label: String, lost, changed| Message {
        from,
        to,
        label,
        lost,
        changed,
    };
    let mut before = (0, 0, Vec::new());
    let mut rows = Vec::new();
    for step in &report.steps {
        let now = (step.pending, step.facts, step.ready.clone());
        let changed = (now != before).then(|| {
            format!(
                "pending {}, facts {}, READY {}",
                now.0,
                now.1,
                if now.2.is_empty() {
                    "-".to_owned()
                } else {
                    now.2.join(",")
                }
            )
        });
        before = now;
        let row = match (&step.step, &step.response) {
            (Step::Post { request, fault }, Some(response)) => {
                let mut row = vec![message(
                    source,
                    ingress,
                    format!("POST #{request}"),
                    false,
                    None,
                )];
                if let Some(entry) = step.entry {
                    row.push(message(
                        ingress,
                        stream,
                        format!("XADD entry {entry}"),
                        false,
                        None,
                    ));
                }
                let lost = *fault == Some(PostFault::ResponseLost);
                let answer = format!("{} {}", response.status(), response.reason());
                row.push(message(ingress, source, answer, lost, changed));
                row
            }
            (Step::Upgrade { .. }, _) | (Step::Poison, _) => {
                vec![message(
                    stream,
                    stream,
                    step.step_label.clone(),
                    false,
                    changed,
                )]
            }
            _ => match (&step.consumer, step.entry) {
                (Some(consumer), Some(entry)) => {
                    let lane = lane_of(consumer);
                    let mut row = vec![message(
                        stream,
                        lane,
                        format!("entry {entry} to {consumer}"),
                        false,
                        None,
                    )];
                    let verdict = match &step.decision {
                        Some(Decision::Verdict(verdict)) => verdict.as_str().to_owned(),
                        Some(Decision::Retry { .. }) => "retry".into(),
                        Some(Decision::DeadLetter { .. }) => "dead letter".into(),
                        Some(Decision::Dropped { .. }) => "dropped".into(),
                        None => "crash before commit".into(),
                    };
                    row.push(message(lane, inbox, verdict, step.decision.is_none(), None));
                    let acked = step.acknowledged == Some(true);
                    let label = match step.crash {
                        Some(_) if !acked => "crash: no XACK".to_owned(),
                        _ if acked => format!("XACK {entry}"),
                        _ => "no XACK (retried later)".to_owned(),
                    };
                    row.push(message(lane, stream, label, !acked, changed));
                    row
                }
                _ => vec![message(
                    stream,
                    stream,
                    step.step_label.clone(),
                    false,
                    changed,
                )],
            },
        };
        rows.push(row);
    }
    let mut lanes = vec!["source".to_owned(), "ingress".into(), "stream".into()];
    lanes.extend(
        consumers
            .iter()
            .map(|consumer| format!("consumer {consumer}")),
    );
    lanes.push("inbox".into());
    Diagram {
        title: format!(
            "{}: {} under {}",
            loaded.model.scenario.name, property, loaded.policy
        ),
        lanes,
        steps: rows,
        violation: report
            .violations
            .first()
            .map(|violation| (violation.step, violation.property.clone()))
            .or_else(|| Some((report.steps.len(), property.name().to_owned()))),
    }
}
