//! Plan files: every schedule a card conformance campaign would run, written as one
//! readable JSON file (`arrival conform --plan-out`) to be reviewed or edited, and read
//! back (`--plan`) to run exactly those schedules, in order, against a target.
//!
//! A plan names the model and fixture it was drawn from and carries a digest of the
//! fixture's initial cards, deliveries and authority snapshots: a plan is refused on any
//! other fixture, since its delivery numbers and cards would mean something else there.

use crate::card::campaign::{raw_action, Plan};
use crate::card::fixture::{RawAction, RawFixture, Scenario};
use crate::harness::InputError;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The `protocol` a card plan file says.
pub const PROTOCOL: &str = "card-plan";

/// A plan file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// Always [`PROTOCOL`].
    pub protocol: String,
    /// The model file (or fixture with a `conform` block) it was drawn from, as named.
    pub model: String,
    /// The fixture file the model names.
    pub fixture: String,
    /// [`fixture_digest`] of that fixture.
    pub fixture_digest: String,
    /// The seed the walks were drawn with, which with a delivery's number also times
    /// each kill in flight: `--plan` uses it.
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

/// One schedule of a plan file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawSchedule {
    /// Where it comes from: `traces/NAME` (a kept trace), `mutants/MUTANT.PROPERTY`,
    /// `cover/KIND+KIND...`, `walks/sSEED/wN` or `fixture`. The kind decides how a
    /// campaign treats it (kept traces, mutants and cover all run; walks stop at the first
    /// failure) and which kinds of transition the report lists as covered.
    pub origin: String,
    /// Its actions, as a fixture's `conform` block writes them.
    pub actions: Vec<RawAction>,
}

/// SHA-256 (hex) of the fixture's initial cards, deliveries and authority snapshots: what
/// a plan's delivery numbers and card names mean.
pub fn fixture_digest(raw: &RawFixture) -> String {
    let authority: Vec<serde_json::Value> = raw
        .authority
        .iter()
        .map(|snapshot| serde_json::json!([snapshot.object_id, snapshot.version, snapshot.state]))
        .collect();
    let text = serde_json::json!([raw.initial, raw.deliveries, authority]).to_string();
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The plan file of `plans` on `scenario`, drawn from `model`.
pub fn plan_file(
    scenario: &Scenario,
    model: &str,
    (seed, kill_window_ms): (Option<u64>, Option<u64>),
    plans: &[Plan],
    skipped: &[String],
) -> PlanFile {
    PlanFile {
        protocol: PROTOCOL.into(),
        model: model.into(),
        fixture: scenario.file.display().to_string(),
        fixture_digest: fixture_digest(&scenario.raw),
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
                    .map(|&action| raw_action(scenario, action))
                    .collect(),
            })
            .collect(),
    }
}

/// What a plan file gives a run: its schedules, what its planning left out, and the seed
/// and kill window that time its kills.
pub type Loaded = (Vec<Plan>, Vec<String>, (Option<u64>, Option<u64>));

/// Reads a plan file for `scenario`: its schedules, what its planning skipped, and its
/// timing. A file that is not a plan, a plan for another fixture, an empty origin and an
/// action the fixture cannot take are bad input, named by field.
pub fn load(file: &Path, scenario: &Scenario) -> Result<Loaded, InputError> {
    let text = crate::harness::input::read_text(file)?;
    let plan: PlanFile = crate::harness::input::parse_json(
        file,
        &text,
        "a plan file is a JSON object with `protocol`, `fixture_digest` and `schedules`",
    )?;
    if plan.protocol != PROTOCOL {
        return Err(InputError::invalid(
            file,
            "protocol",
            format!("`{}`: a card plan says `{PROTOCOL}`", plan.protocol),
        ));
    }
    let digest = fixture_digest(&scenario.raw);
    if plan.fixture_digest != digest {
        return Err(InputError::invalid(
            file,
            "fixture_digest",
            format!(
                "the plan was written for fixture {} (digest {}), not for {} (digest {digest}): \
                 its deliveries and cards would mean something else here",
                plan.fixture,
                plan.fixture_digest,
                scenario.file.display()
            ),
        ));
    }
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
                "empty: say where the schedule comes from (`walks/s1/w0`, `cover/...`)",
            ));
        }
        let actions = scenario
            .parse_actions(&schedule.actions)
            .map_err(|(at, message)| {
                InputError::invalid(file, format!("schedules[{index}].actions[{at}]"), message)
            })?;
        if actions.is_empty() {
            return Err(InputError::invalid(
                file,
                format!("schedules[{index}].actions"),
                "empty: a schedule needs at least one action",
            ));
        }
        crate::card::campaign::opening_allowed(scenario, &actions)
            .and_then(|()| crate::card::campaign::copies_follow_their_delivery(&actions))
            .map_err(|(at, message)| {
                InputError::invalid(file, format!("schedules[{index}].actions[{at}]"), message)
            })?;
        plans.push(Plan {
            id: schedule.origin.clone(),
            actions,
        });
    }
    Ok((plans, plan.skipped, (plan.seed, plan.kill_window_ms)))
}
