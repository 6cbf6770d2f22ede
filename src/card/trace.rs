//! Counterexamples: a violating path becomes a step list in domain terms, a step table, and
//! a fixture whose `schedule` replays it.
//!
//! The fixture speaks in delivery numbers and card names, never in the checker's action
//! indices, so it keeps replaying after the code changes. Its `expect` is what the SPEC
//! receiver ends with after exactly these steps, so `arrival replay TRACE` passes and
//! `arrival replay TRACE --policy MUTANT` names the violated property. A convergence trace
//! of the SPEC receiver itself (possible with expiry) keeps the fixture's own `expect`
//! instead: the point is that these steps end elsewhere.

use crate::card::check::{LoadedModel, TraceReport};
use crate::card::fixture::{RawFixture, RawStep, TraceOrigin};
use crate::card::model::describe_step;
use crate::card::network::{Fault, Step};
use crate::card::policy::Spec;
use crate::card::properties::Property;
use crate::card::replay::{replay_steps, Report};
use crate::card::table;
use crate::harness::InputError;
use std::path::Path;

/// A schedule step as written in fixtures.
pub fn raw_step(scenario: &crate::card::fixture::Scenario, step: Step) -> RawStep {
    match step {
        Step::Deliver { delivery, fault } => RawStep {
            deliver: Some(delivery),
            ack_lost: fault == Some(Fault::AckLost),
            duplicate: fault == Some(Fault::Duplicate),
            crash: fault == Some(Fault::Crash),
            ..RawStep::default()
        },
        Step::Reconcile(card) => RawStep {
            reconcile: Some(scenario.catalog.name(card).to_owned()),
            ..RawStep::default()
        },
        Step::Expire => RawStep {
            expire: true,
            ..RawStep::default()
        },
    }
}

/// The fixture that replays `steps`, expecting what the SPEC receiver ends with.
pub fn fixture(loaded: &LoadedModel, property: Property, steps: &[Step]) -> RawFixture {
    let scenario = &loaded.scenario;
    let spec: Report = replay_steps(scenario, Spec, "spec", steps);
    let keeps_expect = loaded.policy.0.is_none() && property == Property::Convergence;
    let mut raw = scenario.raw.clone();
    raw.name = Some(format!(
        "{}: {} under {}",
        scenario.name, property, loaded.policy
    ));
    raw.description = Some(format!(
        "Counterexample found by `arrival check {}`: under policy {} this schedule violates {}. \
         {}",
        loaded.path.display(),
        loaded.policy,
        property,
        if keeps_expect {
            "`expect` is the fixture's own, which these steps do not reach."
        } else {
            "`expect` is what the SPEC receiver ends with after exactly these steps."
        }
    ));
    raw.schedule = Some(steps.iter().map(|&step| raw_step(scenario, step)).collect());
    raw.trace = Some(TraceOrigin {
        model: loaded.path.display().to_string(),
        policy: loaded.policy.to_string(),
        violates: property.name().to_owned(),
    });
    if !keeps_expect {
        raw.expect = Some(spec.as_expect());
    }
    raw
}

/// Describes, tabulates and (with `out_dir`) writes one counterexample.
pub fn report(
    loaded: &LoadedModel,
    property: Property,
    steps: &[Step],
    out_dir: Option<&Path>,
) -> Result<TraceReport, InputError> {
    let scenario = &loaded.scenario;
    let raw = fixture(loaded, property, steps);
    // Replayed against its own `expect`, the table shows where the checked policy ends up
    // differing from the SPEC receiver on the same steps.
    let trace_scenario = crate::card::fixture::Scenario::from_raw(&scenario.file, raw.clone())?;
    let replayed = replay_steps(
        &trace_scenario,
        loaded.policy.0,
        &loaded.policy.to_string(),
        steps,
    );
    let written = match out_dir {
        None => None,
        Some(dir) => Some(crate::harness::model_file::write_trace(
            dir,
            &loaded.path,
            property.name(),
            &raw,
        )?),
    };
    Ok(TraceReport {
        steps: steps
            .iter()
            .map(|step| describe_step(scenario, step))
            .collect(),
        fixture: written,
        table: table::render(&replayed),
    })
}
