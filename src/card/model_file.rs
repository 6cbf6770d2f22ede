//! Card model files: a TOML file in `models/` that pairs a card fixture with fault budgets, a
//! reconciliation mode, a policy, a search strategy and the expected verdict, the way TLC
//! pairs a spec with a `.cfg`; read and validated into a [`LoadedModel`].

use crate::card::fixture::Scenario;
use crate::card::policy::PolicyName;
use crate::card::property::{Properties, Property};
use crate::card::step::{Budgets, Reconciliation};
use crate::harness::explore::Strategy;
use crate::harness::model_file::Overrides;
use crate::harness::InputError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn default_threads() -> usize {
    1
}

fn default_symmetry() -> bool {
    true
}

fn default_merge_settled() -> bool {
    true
}

fn default_merge_paused() -> bool {
    true
}

fn default_sleep_sets() -> bool {
    true
}

fn default_eager_redeliveries() -> bool {
    true
}

fn default_reconciliation() -> Reconciliation {
    Reconciliation::Interleaved
}

fn default_policy() -> String {
    "spec".into()
}

/// A model file as written.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    /// What the scenario checks.
    #[serde(default)]
    pub description: Option<String>,
    /// The fixture, relative to the model file.
    pub fixture: String,
    /// Extra copies the network may make, in all (D).
    #[serde(default)]
    pub duplicates: u8,
    /// Acknowledgements that may be lost, in all (L).
    #[serde(default)]
    pub lost_acks: u8,
    /// Crashes before record, in all (C).
    #[serde(default)]
    pub crashes: u8,
    /// Times the retention window may pass, in all (E): each time, every event id whose
    /// records are all settled is forgotten.
    #[serde(default)]
    pub expiries: u8,
    /// Re-encoded copies the network may make, in all (R): the same content as an
    /// acknowledged delivery, keys in another order and other whitespace.
    #[serde(default)]
    pub reencodings: u8,
    /// `interleaved` or `end`.
    #[serde(default = "default_reconciliation")]
    pub reconciliation: Reconciliation,
    /// `spec` or a mutant's name.
    #[serde(default = "default_policy")]
    pub policy: String,
    /// `bfs` or `dfs`.
    #[serde(default)]
    pub strategy: Strategy,
    /// Checker threads.
    #[serde(default = "default_threads")]
    pub threads: usize,
    /// Stop after about this many states (the verdict is then `incomplete`).
    #[serde(default)]
    pub state_limit: Option<usize>,
    /// Check independent parts of the fixture one by one (see `independence`).
    #[serde(default)]
    pub split: bool,
    /// Send identical redeliveries in fixture order (a sound symmetry reduction, see
    /// [`crate::card::model::Twins`]); ignored with per-delivery budgets.
    #[serde(default = "default_symmetry")]
    pub symmetry: bool,
    /// Take worlds that differ only in which state decision (applied, stale, equal) settled
    /// records got as one state (a sound reduction, see
    /// [`crate::card::receiver::Receiver::fingerprint`]).
    #[serde(default = "default_merge_settled")]
    pub merge_settled: bool,
    /// With `merge_settled`, under SPEC and without expiry: forget how a card whose
    /// authority snapshot supersedes every input naming it got to its pause, while it is
    /// paused (a sound reduction, see [`crate::card::fingerprint::covered_cards`]).
    #[serde(default = "default_merge_paused")]
    pub merge_paused: bool,
    /// Under SPEC, without expiry and without per-delivery budgets: let depth-first search
    /// skip transitions whose result it reaches anyway with steps that commute taken in
    /// another order (sleep sets, see [`crate::card::commute`]). Every state that breaks
    /// no property is still visited: on a run that explores everything, the verdict and
    /// the violated properties never change, nor, on a passing run, the unique count (a
    /// failing run may skip violating dead ends; a run cut short by a state limit, or
    /// stopped once every checked property is violated, may stop elsewhere).
    #[serde(default = "default_sleep_sets")]
    pub sleep_sets: bool,
    /// Under SPEC and without expiry: let depth-first search deliver an owed delivery whose
    /// content is already recorded at once, as the only step of its world (see
    /// [`crate::card::model::Redeliveries`]), so that it never searches the worlds where
    /// such a redelivery is still in flight. Fewer distinct states; the verdict and the
    /// violated properties never change on a run that explores everything. Breadth-first
    /// search, and with it every shortest counterexample, is not affected.
    #[serde(default = "default_eager_redeliveries")]
    pub eager_redeliveries: bool,
    /// Budgets of single deliveries, by delivery number (`[per_delivery]` then
    /// `6 = { duplicates = 1 }`). When given, faults hit only the listed deliveries, each
    /// within its own budget; the totals above still apply.
    #[serde(default)]
    pub per_delivery: Option<BTreeMap<String, DeliveryBudget>>,
    /// The properties to check; the contract's defaults when absent. `redelivery-recognised` is only
    /// checked when listed.
    #[serde(default)]
    pub properties: Option<Vec<String>>,
    /// `pass`, or the name of the property that must be violated.
    pub expect: String,
}

/// One delivery's fault budget in a model file.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryBudget {
    /// Network copies of this delivery.
    #[serde(default)]
    pub duplicates: u8,
    /// Lost acknowledgements of this delivery.
    #[serde(default)]
    pub lost_acks: u8,
    /// Crashes while this delivery is being decided.
    #[serde(default)]
    pub crashes: u8,
    /// Re-encoded network copies of this delivery.
    #[serde(default)]
    pub reencodings: u8,
}

/// What a model file expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expectation {
    /// Every property holds, exhaustively.
    Pass,
    /// This property is violated.
    Violates(Property),
}

/// A model file, loaded with its fixture.
#[derive(Clone, Debug)]
pub struct LoadedModel {
    /// The model file.
    pub path: PathBuf,
    /// As written.
    pub file: ModelFile,
    /// The fixture.
    pub scenario: Arc<Scenario>,
    /// The policy in force (the file's, or the command line's).
    pub policy: PolicyName,
    /// The expected verdict.
    pub expectation: Expectation,
    /// The properties checked.
    pub checked: Properties,
    /// Per-delivery budgets by delivery number, if the file gives them.
    pub per_delivery: Option<BTreeMap<u32, Budgets>>,
}

/// Reads a model file and its fixture; `policy` overrides the file's policy.
pub fn load_model(path: &Path, policy: Option<PolicyName>) -> Result<LoadedModel, InputError> {
    load_model_with(path, policy, &Overrides::default())
}

/// The fault budgets `--budgets` sets for card models, in order.
pub const BUDGETS: [&str; 4] = ["duplicates", "lost_acks", "crashes", "expiries"];

/// The same with the optional fifth, re-encoded copies (`--budgets D,L,C,E,R`).
pub const BUDGETS_WITH_REENCODINGS: [&str; 5] = [
    "duplicates",
    "lost_acks",
    "crashes",
    "expiries",
    "reencodings",
];

/// Reads a model file with command-line overrides of its run options.
pub fn load_model_with(
    path: &Path,
    policy: Option<PolicyName>,
    overrides: &Overrides,
) -> Result<LoadedModel, InputError> {
    let mut file: ModelFile = crate::harness::model_file::parse(path)?;
    overrides.apply(
        &mut file.threads,
        &mut file.strategy,
        &mut file.state_limit,
        &mut file.properties,
    );
    let five = overrides
        .budgets
        .as_ref()
        .is_some_and(|values| values.len() == 5);
    let names: &[&str] = if five {
        &BUDGETS_WITH_REENCODINGS
    } else {
        &BUDGETS
    };
    if let Some(budgets) = overrides.budgets(path, names)? {
        file.duplicates = budgets[0];
        file.lost_acks = budgets[1];
        file.crashes = budgets[2];
        file.expiries = budgets[3];
        if let Some(&reencodings) = budgets.get(4) {
            file.reencodings = reencodings;
        }
    }
    let file_policy: PolicyName = file
        .policy
        .parse()
        .map_err(|message| InputError::invalid(path, "policy", message))?;
    let expectation = match file.expect.as_str() {
        "pass" => Expectation::Pass,
        name => Expectation::Violates(name.parse().map_err(|message: String| {
            InputError::invalid(path, "expect", format!("{message}, or `pass`"))
        })?),
    };
    let checked = match &file.properties {
        None => Properties::SPEC,
        Some(names) if names.is_empty() => {
            return Err(InputError::invalid(
                path,
                "properties",
                "lists no property; leave it out to check the contract's defaults",
            ))
        }
        Some(names) => names
            .iter()
            .map(|name| name.parse::<Property>())
            .collect::<Result<Properties, String>>()
            .map_err(|message| InputError::invalid(path, "properties", message))?,
    };
    if let Expectation::Violates(property) = expectation {
        if !checked.contains(property) {
            return Err(InputError::invalid(
                path,
                "expect",
                format!("`{property}` is not among the checked `properties`"),
            ));
        }
    }
    let per_delivery = match &file.per_delivery {
        None => None,
        Some(table) => {
            let mut budgets = BTreeMap::new();
            for (key, budget) in table {
                let place = format!("per_delivery.{key}");
                let number: u32 = key.parse().map_err(|_| {
                    InputError::invalid(path, place.as_str(), "the key must be a delivery number")
                })?;
                budgets.insert(
                    number,
                    Budgets {
                        duplicates: budget.duplicates,
                        lost_acks: budget.lost_acks,
                        crashes: budget.crashes,
                        expiries: 0,
                        reencodings: budget.reencodings,
                    },
                );
            }
            Some(budgets)
        }
    };
    crate::harness::model_file::check_run_options(path, file.threads, file.state_limit)?;
    let scenario = crate::harness::model_file::load_fixture(path, &file.fixture, Scenario::load)?;
    if let Some(budgets) = &per_delivery {
        if let Some(number) = budgets
            .keys()
            .find(|&&number| scenario.delivery_index(number).is_none())
        {
            return Err(InputError::invalid(
                path,
                format!("per_delivery.{number}"),
                format!("the fixture has no delivery {number}"),
            ));
        }
    }
    Ok(LoadedModel {
        path: path.to_owned(),
        policy: policy.unwrap_or(file_policy),
        expectation,
        checked,
        per_delivery,
        scenario: Arc::new(scenario),
        file,
    })
}
