//! Facts model files (TOML, in `models/`): a facts fixture with fault budgets, consumers, a
//! policy, run options and the expected verdict, read and validated into a
//! [`LoadedModel`]; the keys that shape the state space in words ([`settings_text`]).

use super::fixture::Scenario;
use super::model::FactsModel;
use super::mutants::Mutant;
use super::property::{Properties, Property};
use super::step::{Budgets, Consumer, Step};
use super::world::{envelope_of, Setup};
use crate::harness::explore::Strategy;
use crate::harness::model_file::Overrides;
use crate::harness::InputError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn one() -> usize {
    1
}

fn one_consumer() -> u8 {
    1
}

fn spec() -> String {
    "spec".into()
}

/// A facts model file as written.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    /// What the scenario checks.
    #[serde(default)]
    pub description: Option<String>,
    /// The facts fixture, relative to the model file.
    pub fixture: String,
    /// Consumers in the group (`c1`, `c2`, ...; 1 to 3).
    #[serde(default = "one_consumer")]
    pub consumers: u8,
    /// HTTP answers that may be lost, in all (each makes the sender post again).
    #[serde(default)]
    pub lost_responses: u8,
    /// Consumer crashes after reading, before the inbox commit.
    #[serde(default)]
    pub crashes_before_commit: u8,
    /// Consumer crashes after the inbox commit, before `XACK`.
    #[serde(default)]
    pub crashes_after_commit: u8,
    /// Takeovers (`XAUTOCLAIM`) of an entry pending in another consumer.
    #[serde(default)]
    pub takeovers: u8,
    /// Unparseable entries written straight into the stream.
    #[serde(default)]
    pub poison: u8,
    /// Whether the first application's material may be upgraded (to the next version) at
    /// any point.
    #[serde(default)]
    pub upgrade: bool,
    /// Entries whose decision fails (the fixture's `undecidable` step's request, else its
    /// first request with a valid envelope).
    #[serde(default)]
    pub undecidable: u8,
    /// How many of the fixture's operator steps (register, upgrade, terminate, resolve,
    /// expire_quarantine, from its schedule) may happen, each once, at any point.
    #[serde(default)]
    pub operator: u8,
    /// `spec` or a facts mutant's name.
    #[serde(default = "spec")]
    pub policy: String,
    /// `bfs` or `dfs`.
    #[serde(default)]
    pub strategy: Strategy,
    /// Checker threads.
    #[serde(default = "one")]
    pub threads: usize,
    /// Stop after about this many states (the verdict is then `incomplete`).
    #[serde(default)]
    pub state_limit: Option<usize>,
    /// The properties to check (all of them when absent).
    #[serde(default)]
    pub properties: Option<Vec<String>>,
    /// `pass`, or the property that must be violated.
    pub expect: String,
}

/// A facts model file, loaded with its fixture.
#[derive(Clone, Debug)]
pub struct LoadedModel {
    /// The model file.
    pub path: PathBuf,
    /// As written.
    pub file: ModelFile,
    /// The model.
    pub model: FactsModel,
    /// The policy's name.
    pub policy: String,
    /// The property expected violated (`None`: pass).
    pub expected: Option<Property>,
}

/// Reads a facts model file and its fixture; `policy` overrides the file's.
pub fn load_model(path: &Path, policy: Option<&str>) -> Result<LoadedModel, InputError> {
    load_model_with(path, policy, &Overrides::default())
}

/// The fault budgets `--budgets` sets for facts models, in order.
pub const BUDGETS: [&str; 6] = [
    "lost_responses",
    "crashes_before_commit",
    "crashes_after_commit",
    "takeovers",
    "poison",
    "upgrade",
];

/// Reads a facts model file with command-line overrides of its run options.
pub fn load_model_with(
    path: &Path,
    policy: Option<&str>,
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
        file.lost_responses = budgets[0];
        file.crashes_before_commit = budgets[1];
        file.crashes_after_commit = budgets[2];
        file.takeovers = budgets[3];
        file.poison = budgets[4];
        file.upgrade = budgets[5] > 0;
    }
    let policy = policy.unwrap_or(&file.policy).to_owned();
    let mutant = match policy.as_str() {
        "spec" => None,
        name => Some(
            name.parse::<Mutant>()
                .map_err(|message| InputError::invalid(path, "policy", message))?,
        ),
    };
    let expected = match file.expect.as_str() {
        "pass" => None,
        name => Some(name.parse::<Property>().map_err(|message| {
            InputError::invalid(path, "expect", format!("{message}, or `pass`"))
        })?),
    };
    let mut checked = Properties::ALL;
    if let Some(names) = &file.properties {
        if names.is_empty() {
            return Err(InputError::invalid(
                path,
                "properties",
                "lists no property; leave it out to check them all",
            ));
        }
        checked = Properties::NONE;
        for name in names {
            let property: Property = name
                .parse()
                .map_err(|message| InputError::invalid(path, "properties", message))?;
            checked = checked.with(property);
        }
    }
    if let Some(property) = expected {
        if !checked.contains(property) {
            return Err(InputError::invalid(
                path,
                "expect",
                format!("`{property}` is not among the checked `properties`"),
            ));
        }
    }
    if !(1..=3).contains(&file.consumers) {
        return Err(InputError::invalid(path, "consumers", "must be 1, 2 or 3"));
    }
    crate::harness::model_file::check_run_options(path, file.threads, file.state_limit)?;
    let scenario = crate::harness::model_file::load_fixture(path, &file.fixture, Scenario::load)?;
    let upgrade = match (file.upgrade, scenario.applications.iter().next()) {
        (false, _) => None,
        (true, Some((key, application))) => Some((key.clone(), application.material_version + 1)),
        (true, None) => {
            return Err(InputError::invalid(
                path,
                "upgrade",
                "the fixture has no application to upgrade",
            ))
        }
    };
    let operator_steps: Vec<Step> = scenario
        .schedule
        .iter()
        .flatten()
        .filter(|step| step.is_operator())
        .cloned()
        .collect();
    if file.operator > 0 && operator_steps.is_empty() {
        return Err(InputError::invalid(
            path,
            "operator",
            "the fixture's schedule has no operator step (register, upgrade, terminate, resolve, expire_quarantine)",
        ));
    }
    if operator_steps.len() > 16 {
        return Err(InputError::invalid(
            path,
            "operator",
            "a model takes at most 16 operator steps from its fixture",
        ));
    }
    let undecidable = scenario
        .schedule
        .iter()
        .flatten()
        .find_map(|step| match step {
            Step::Undecidable { request } => Some(*request),
            _ => None,
        })
        .or_else(|| {
            scenario
                .setup
                .requests
                .values()
                .find(|posted| posted.resends.is_none() && envelope_of(posted).is_some())
                .map(|posted| posted.number)
        });
    if file.undecidable > 0 && undecidable.is_none() {
        return Err(InputError::invalid(
            path,
            "undecidable",
            "the fixture has no request with a valid envelope to make undecidable",
        ));
    }
    let setup = Setup {
        mutant,
        ..scenario.setup.clone()
    };
    let model = FactsModel {
        consumers: (1..=file.consumers)
            .map(|n| Consumer(format!("c{n}")))
            .collect(),
        budgets: Budgets {
            lost_responses: file.lost_responses,
            crashes_before_commit: file.crashes_before_commit,
            crashes_after_commit: file.crashes_after_commit,
            takeovers: file.takeovers,
            poison: file.poison,
            upgrades: u8::from(upgrade.is_some()),
            undecidable: file.undecidable,
            operator: file.operator,
        },
        upgrade,
        operator_steps,
        undecidable,
        checked,
        coverage: Arc::default(),
        setup: Arc::new(setup),
        scenario: Arc::new(scenario),
    };
    Ok(LoadedModel {
        path: path.to_owned(),
        file,
        model,
        policy,
        expected,
    })
}

/// The model file's keys that shape the state space, in words (a report's `settings`).
pub fn settings_text(file: &ModelFile) -> String {
    format!(
        "consumers={} lost_responses={} crashes_before_commit={} crashes_after_commit={} \
         takeovers={} poison={} undecidable={} upgrade={} operator={}",
        file.consumers,
        file.lost_responses,
        file.crashes_before_commit,
        file.crashes_after_commit,
        file.takeovers,
        file.poison,
        file.undecidable,
        file.upgrade,
        file.operator
    )
}
