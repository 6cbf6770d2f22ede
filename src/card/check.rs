//! Card model files and their runs.
//!
//! A model file (TOML, in `models/`) pairs a card fixture with fault budgets, a
//! reconciliation mode, a policy, a search strategy and the expected verdict, the way TLC
//! pairs a spec with a `.cfg`. A run checks the `authority-current` precondition, splits the
//! fixture into independent parts if asked, and hands the parts to the harness, which
//! explores them, finds shortest counterexamples and judges the verdict.

use crate::card::fixture::Scenario;
use crate::card::model::{ReceiverModel, Reconciliation};
use crate::card::network::{Budgets, DeliveryBudgets, World};
use crate::card::policy::PolicyName;
use crate::card::properties::{Properties, Property};
use crate::card::trace;
pub use crate::harness::check::Mode;
pub use crate::harness::explore::{Engine, Strategy};
use crate::harness::model_file::Overrides;
pub use crate::harness::report::{render, ModelReport, PropertyReport, TraceReport};
use crate::harness::InputError;
use crate::harness::{self, check::Subject, explore::Settings};
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
    /// Budgets of single deliveries, by delivery number (`[per_delivery]` then
    /// `6 = { duplicates = 1 }`). When given, faults hit only the listed deliveries, each
    /// within its own budget; the totals above still apply.
    #[serde(default)]
    pub per_delivery: Option<BTreeMap<String, DeliveryBudget>>,
    /// The properties to check; the contract's ten when absent. `redelivery-recognised` is only
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
    if let Some(budgets) = overrides.budgets(path, &BUDGETS)? {
        file.duplicates = budgets[0];
        file.lost_acks = budgets[1];
        file.crashes = budgets[2];
        file.expiries = budgets[3];
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
                "lists no property; leave it out to check the contract's ten",
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

/// How `check` runs.
#[derive(Clone, Debug, Default)]
pub struct CheckOptions {
    /// Write counterexamples as fixtures here.
    pub trace_out: Option<PathBuf>,
    /// Print progress on stderr.
    pub progress: bool,
    /// Which checker explores.
    pub engine: Engine,
}

/// The model a loaded model file describes, checking the given properties.
pub fn build_model(loaded: &LoadedModel, checked: Properties) -> ReceiverModel {
    let budgets = Budgets {
        duplicates: loaded.file.duplicates,
        lost_acks: loaded.file.lost_acks,
        crashes: loaded.file.crashes,
        expiries: loaded.file.expiries,
    };
    let mut model = ReceiverModel::new(
        Arc::clone(&loaded.scenario),
        loaded.policy.0,
        budgets,
        loaded.file.reconciliation,
    );
    model.checked = checked;
    if let Some(per_delivery) = &loaded.per_delivery {
        // By index in this (possibly split) scenario; deliveries of other parts drop out.
        model.per_delivery = DeliveryBudgets::only(
            per_delivery
                .iter()
                .filter_map(|(&number, &budget)| {
                    loaded
                        .scenario
                        .delivery_index(number)
                        .map(|index| (index, budget))
                })
                .collect(),
        );
    }
    if loaded.file.symmetry && loaded.per_delivery.is_none() {
        model = model.with_symmetry();
    }
    if loaded.file.merge_settled {
        model = model.with_merges(loaded.file.merge_paused);
    }
    if loaded.file.sleep_sets {
        model = model.with_sleep_sets();
    }
    model
}

/// What the harness reports this model as.
fn subject(loaded: &LoadedModel) -> Subject {
    Subject {
        model: loaded.path.display().to_string(),
        protocol: "card".into(),
        fixture: loaded.scenario.file.display().to_string(),
        policy: loaded.policy.to_string(),
        expected: match loaded.expectation {
            Expectation::Pass => None,
            Expectation::Violates(property) => Some(property.name()),
        },
        bytes_per_state: full_state_bytes(&loaded.scenario),
        settings: settings_text(loaded),
    }
}

/// The model file's keys that shape the state space, after command-line overrides and as
/// they take effect, in words (a report's `settings`).
fn settings_text(loaded: &LoadedModel) -> String {
    let file = &loaded.file;
    let per_delivery = loaded
        .per_delivery
        .as_ref()
        .map_or("none".to_owned(), |budgets| {
            budgets
                .iter()
                .map(|(number, budget)| {
                    format!(
                        "#{number}:{}/{}/{}",
                        budget.duplicates, budget.lost_acks, budget.crashes
                    )
                })
                .collect::<Vec<_>>()
                .join(",")
        });
    let reconciliation = match file.reconciliation {
        Reconciliation::Interleaved => "interleaved",
        Reconciliation::End => "end",
    };
    // The reductions as they take effect ([`build_model`], `ReceiverModel::with_merges`),
    // not as written: a key that changes nothing must not keep shards apart.
    let symmetry = file.symmetry && loaded.per_delivery.is_none();
    let merge_paused =
        file.merge_settled && file.merge_paused && loaded.policy.0.is_none() && file.expiries == 0;
    format!(
        "duplicates={} lost_acks={} crashes={} expiries={} per_delivery={per_delivery} \
         reconciliation={reconciliation} split={} symmetry={symmetry} merge_settled={} \
         merge_paused={merge_paused}",
        file.duplicates,
        file.lost_acks,
        file.crashes,
        file.expiries,
        file.split,
        file.merge_settled,
    )
}

/// Checks one model file exhaustively.
pub fn run(loaded: &LoadedModel, options: &CheckOptions) -> Result<ModelReport, InputError> {
    run_with(loaded, options, &Mode::Exhaustive)
}

/// Checks one model file, covering it as `mode` says (everything, one shard's share, or
/// random walks).
pub fn run_with(
    loaded: &LoadedModel,
    options: &CheckOptions,
    mode: &Mode,
) -> Result<ModelReport, InputError> {
    if loaded.checked.contains(Property::AuthorityCurrent) {
        if let Some(behind) = crate::card::properties::authority_behind(&loaded.scenario) {
            let checked = loaded.checked;
            return Ok(harness::check::precondition_failed::<ReceiverModel>(
                subject(loaded),
                mode,
                |index| checked.contains(Property::ALL[index]),
                Property::AuthorityCurrent.name(),
                behind.describe(&loaded.scenario),
            ));
        }
    }
    let parts: Vec<LoadedModel> = if loaded.file.split {
        crate::card::independence::split(&loaded.scenario)?
            .into_iter()
            .map(|scenario| LoadedModel {
                scenario: Arc::new(scenario),
                ..loaded.clone()
            })
            .collect()
    } else {
        vec![loaded.clone()]
    };
    let models: Vec<ReceiverModel> = parts
        .iter()
        .map(|part| build_model(part, loaded.checked))
        .collect();
    let settings = Settings {
        strategy: loaded.file.strategy,
        threads: loaded.file.threads,
        state_limit: loaded.file.state_limit,
        label: loaded.path.display().to_string(),
        progress: options.progress,
        engine: options.engine,
    };
    let mut report = harness::check::check_parts_with(
        subject(loaded),
        &models,
        &settings,
        mode,
        |model, index, steps| {
            let part = LoadedModel {
                scenario: Arc::clone(&model.scenario),
                ..loaded.clone()
            };
            trace::report(
                &part,
                Property::ALL[index],
                steps,
                options.trace_out.as_deref(),
            )
        },
    )?;
    // The precondition was checked on the fixture above, before exploring.
    if loaded.checked.contains(Property::AuthorityCurrent) {
        for property in &mut report.properties {
            if property.name == Property::AuthorityCurrent.name() {
                property.status = "holds".into();
            }
        }
    }
    Ok(report)
}

/// The estimated size of a state late in the default order, when the receiver holds the
/// most records.
fn full_state_bytes(scenario: &Scenario) -> usize {
    let start = World::initial(scenario, Budgets::UNLIMITED);
    let steps = crate::card::replay::schedule(scenario, crate::card::policy::Spec);
    let end = steps.into_iter().fold(start, |world, step| {
        crate::card::network::transition(
            scenario,
            crate::card::policy::Spec,
            Properties::SPEC,
            &world,
            step,
        )
        .0
    });
    end.approx_bytes()
}

/// Serves stateright's Explorer for a model on `address` (blocks; `listening` runs once the
/// address is taken); fails when nothing can listen there.
pub fn serve(loaded: &LoadedModel, address: &str, listening: impl FnOnce()) -> std::io::Result<()> {
    let model = build_model(loaded, loaded.checked);
    harness::explorer::serve(model, loaded.file.threads, address, listening)
}
