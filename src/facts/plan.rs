//! Facts plan files: every schedule a facts conformance campaign would run, written as one
//! readable JSON file (`arrival conform --plan-out`) in the shape of the card plans, and
//! read back (`--plan`) to run exactly those schedules, in order, against a facts target.
//!
//! A plan carries a digest of the facts fixture it was drawn from (its keys, applications,
//! limits and requests): a plan is refused on any other fixture, since its request numbers
//! would mean other requests there. Every action is checked against the fixture: a request
//! it lacks, or one arrival cannot play on a real clock, is bad input, named by its place.

use super::campaign::Plan;
use super::conform::{playable, Action};
use super::fixture::{RawFixture, Scenario};
use crate::harness::InputError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::Path;

/// The `protocol` a facts plan file says.
pub const PROTOCOL: &str = "facts-plan";

/// A facts plan file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// Always [`PROTOCOL`].
    pub protocol: String,
    /// The model file (or facts fixture) it was drawn from, as named.
    pub model: String,
    /// The facts fixture the model names.
    pub fixture: String,
    /// [`fixture_digest`] of that fixture.
    pub fixture_digest: String,
    /// The seed the walks were drawn with, which with a request's number also times each
    /// kill in flight: `--plan` uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The `--kill-window-ms` of the run that wrote it: `--plan` uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_window_ms: Option<u64>,
    /// What the planning left out, and why (reported again when the plan runs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// The schedules, in the order they run.
    pub schedules: Vec<RawSchedule>,
}

/// One schedule of a facts plan file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawSchedule {
    /// Where it comes from: `fixture`, `mutants/MUTANT.PROPERTY` or `walks/sSEED/wN`.
    pub origin: String,
    /// Its actions, as an `.actions.json` file writes them (read one by one, so a bad one
    /// is named by its place).
    pub actions: Vec<Value>,
}

/// SHA-256 (hex) of what a plan's request numbers mean: the fixture without its name,
/// description, schedule, expectation and trace origin (its keys, applications, limits
/// and requests).
pub fn fixture_digest(raw: &RawFixture) -> String {
    let mut raw = raw.clone();
    raw.name = None;
    raw.description = None;
    raw.schedule = None;
    raw.expect = None;
    raw.trace = None;
    let text = serde_json::to_string(&raw).expect("fixtures serialise");
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The plan file of `plans` on the fixture `raw` (at `fixture`), drawn from `model`.
pub fn plan_file(
    (raw, fixture): (&RawFixture, &Path),
    model: &str,
    (seed, kill_window_ms): (Option<u64>, Option<u64>),
    plans: &[Plan],
    skipped: &[String],
) -> PlanFile {
    PlanFile {
        protocol: PROTOCOL.into(),
        model: model.into(),
        fixture: fixture.display().to_string(),
        fixture_digest: fixture_digest(raw),
        seed,
        kill_window_ms,
        skipped: skipped.to_vec(),
        schedules: plans
            .iter()
            .map(|plan| RawSchedule {
                origin: plan.id.clone(),
                actions: plan
                    .actions
                    .iter()
                    .map(|action| serde_json::to_value(action).expect("actions serialise"))
                    .collect(),
            })
            .collect(),
    }
}

/// What a plan file gives a run: its schedules, what its planning left out, and the seed
/// and kill window that time its kills.
pub type Loaded = (Vec<Plan>, Vec<String>, (Option<u64>, Option<u64>));

/// Reads a facts plan file for the fixture `raw` (`scenario` typed): its schedules, what
/// its planning skipped, and its timing. A file that is not a facts plan, a plan for
/// another fixture, an empty origin, an action that is not one, and a post of a request
/// the fixture lacks or arrival cannot play are bad input, named by field.
pub fn load(file: &Path, scenario: &Scenario, raw: &RawFixture) -> Result<Loaded, InputError> {
    let text = crate::harness::input::read_text(file)?;
    let plan: PlanFile = crate::harness::input::parse_json(
        file,
        &text,
        "a facts plan file is a JSON object with `protocol`, `fixture_digest` and `schedules`",
    )?;
    if plan.protocol != PROTOCOL {
        return Err(InputError::invalid(
            file,
            "protocol",
            format!("`{}`: a facts plan says `{PROTOCOL}`", plan.protocol),
        ));
    }
    let digest = fixture_digest(raw);
    if plan.fixture_digest != digest {
        return Err(InputError::invalid(
            file,
            "fixture_digest",
            format!(
                "the plan was written for fixture {} (digest {}), not for {} (digest {digest}): \
                 its request numbers would mean other requests here",
                plan.fixture,
                plan.fixture_digest,
                scenario.file.display()
            ),
        ));
    }
    let (requests, _) = playable(scenario, 2);
    if plan.schedules.is_empty() {
        return Err(InputError::invalid(
            file,
            "schedules",
            "empty: a plan runs at least one schedule",
        ));
    }
    let mut plans = Vec::with_capacity(plan.schedules.len());
    for (index, schedule) in plan.schedules.iter().enumerate() {
        if schedule.origin.trim().is_empty() {
            return Err(InputError::invalid(
                file,
                format!("schedules[{index}].origin"),
                "empty: say where the schedule comes from (`fixture`, `walks/s1/w0`, ...)",
            ));
        }
        let mut actions = Vec::with_capacity(schedule.actions.len());
        for (at, value) in schedule.actions.iter().enumerate() {
            let place = || format!("schedules[{index}].actions[{at}]");
            let action = parse_action(value, scenario, &requests)
                .map_err(|message| InputError::invalid(file, place(), message))?;
            actions.push(action);
        }
        plans.push(Plan {
            id: schedule.origin.clone(),
            actions,
        });
    }
    Ok((plans, plan.skipped, (plan.seed, plan.kill_window_ms)))
}

/// One action of a plan, checked against the fixture: `Err` says what is wrong.
fn parse_action(value: &Value, scenario: &Scenario, playable: &[u32]) -> Result<Action, String> {
    let action: Action = serde_json::from_value(value.clone()).map_err(|error| {
        format!(
            "`{value}` is not an action ({error}): write {{\"post\": {{\"request\": N, \
             \"bytes\": \"resigned\"|\"exact\"|\"reencoded\", \"fault\": ...}}}} or \
             \"restart\""
        )
    })?;
    if let Action::Post { request, .. } = action {
        if !scenario.setup.requests.contains_key(&request) {
            return Err(format!(
                "request {request} is not in the fixture {}",
                scenario.file.display()
            ));
        }
        if !playable.contains(&request) {
            return Err(format!(
                "request {request} cannot be played on a real clock (see `arrival conform`'s \
                 skipped list for why)"
            ));
        }
    }
    Ok(action)
}
