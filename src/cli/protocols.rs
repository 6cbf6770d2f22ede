//! The protocol registry: each protocol's replay, model loading and check behind one trait.
//!
//! It also tells which protocol a fixture or a model file belongs to.
//!
//! A new protocol (a third folder beside `src/card/` and `src/facts/`) touches:
//!
//! 1. its folder, with a fixture reader, a replay and a [`crate::harness::Protocol`] model;
//! 2. `src/lib.rs`: `pub mod` and a line in the crate's module table;
//! 3. this file: an implementation of [`CliProtocol`] and one line in [`PROTOCOLS`];
//! 4. the help texts that name the two protocols today: the top-level `about` in
//!    `src/cli/mod.rs`, `replay`'s fixture and `--policy` help in `src/cli/replay.rs`, and
//!    the `--budgets` formats in `src/cli/check.rs`;
//! 5. `harness::model_file`, whose model files without a `protocol` key are card models;
//! 6. a malformed-input corpus beside `tests/malformed/` and `tests/facts-malformed/`,
//!    and its loop in `tests/cli/cli.rs`;
//! 7. its contract in `docs/` and its section in `docs/guide.md`.
//!
//! `replay`, `check`, `check --explore` and the `--help` catalogue of policies and
//! properties then know it. What stays protocol-specific on purpose: `check --sweep`
//! (card fixtures, [`crate::card::sweep`]), `arrival gen` (card fixtures), `arrival store`
//! (the durable card receiver) and `arrival pipeline` (the real facts pipeline).

use super::Outcome;
use crate::harness::check::Mode;
use crate::harness::explore::Engine;
use crate::harness::model_file::Overrides;
use crate::harness::report::ModelReport;
use crate::harness::InputError;
use std::path::{Path, PathBuf};

/// How `replay` runs, from the command line.
#[derive(Clone, Debug, Default)]
pub struct ReplayOptions {
    /// Print the report as JSON.
    pub json: bool,
    /// The policy given with `--policy`.
    pub policy: Option<String>,
    /// Card tables: every cell, every card after every step.
    pub wide: bool,
}

/// How `check` explores a loaded model, the same for every protocol.
#[derive(Clone, Debug)]
pub struct CheckSettings {
    /// Write counterexamples as fixtures here.
    pub trace_out: Option<PathBuf>,
    /// Progress lines on stderr.
    pub progress: bool,
    /// Which checker explores.
    pub engine: Engine,
    /// Everything, one shard's share, or random walks.
    pub mode: Mode,
}

/// A protocol as the command line knows it.
pub trait CliProtocol: Sync {
    /// Its name: the `protocol` key of its fixtures (`card` when absent).
    fn name(&self) -> &'static str;
    /// Its policies, `spec` first (for `--help`).
    fn policies(&self) -> Vec<&'static str>;
    /// Its properties (for `--help`).
    fn properties(&self) -> Vec<&'static str>;
    /// Whether `fixture` is one of its fixture files. The first protocol of [`PROTOCOLS`]
    /// reads every file no other one claims.
    fn claims(&self, fixture: &Path) -> bool;
    /// Replays a fixture, prints its report, and says whether it met its `expect`.
    fn replay(&self, fixture: &Path, options: &ReplayOptions) -> Outcome;
    /// Reads a model file of this protocol and its fixture; `policy` overrides the file's.
    fn load_model(
        &self,
        path: &Path,
        policy: Option<&str>,
        overrides: &Overrides,
    ) -> Result<Box<dyn LoadedModel>, InputError>;
}

/// A model file read by its protocol, ready to check.
pub trait LoadedModel {
    /// Checks it.
    fn check(&self, settings: &CheckSettings) -> Result<ModelReport, InputError>;
    /// Serves stateright's Explorer for it on `address` (blocks; `listening` runs once the
    /// address is taken).
    fn serve(&self, address: &str, listening: &mut dyn FnMut()) -> std::io::Result<()>;
}

/// Every protocol; the first is the default (fixtures without a `protocol` key).
pub const PROTOCOLS: &[&dyn CliProtocol] = &[&card::Card, &facts::Facts];

/// The protocol of a fixture file.
pub fn of_fixture(fixture: &Path) -> &'static dyn CliProtocol {
    PROTOCOLS
        .iter()
        .skip(1)
        .find(|protocol| protocol.claims(fixture))
        .copied()
        .unwrap_or(PROTOCOLS[0])
}

/// The protocol of a model file: that of the fixture it names.
pub fn of_model(model: &Path) -> &'static dyn CliProtocol {
    let name = crate::harness::model_file::fixture_protocol(model);
    PROTOCOLS
        .iter()
        .find(|protocol| Some(protocol.name()) == name.as_deref())
        .copied()
        .unwrap_or(PROTOCOLS[0])
}

/// What `check --help` and `replay --help` add: every policy and property by protocol, the
/// exit statuses, and how simulation and shards judge.
pub fn catalogue() -> String {
    let by_protocol = |list: &dyn Fn(&dyn CliProtocol) -> Vec<&'static str>| {
        PROTOCOLS
            .iter()
            .map(|protocol| {
                format!(
                    "  {:<7}{}",
                    format!("{}:", protocol.name()),
                    list(*protocol).join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    format!(
        "Policies (--policy):\n{}\n\nProperties (--properties):\n{}\n\n{}\n\nWith --simulate N: the verdict is `fail` when a walk broke a property and `sampled` when none\ndid, never `pass`: simulation proves nothing about the behaviours no walk visited. Exit 0\nwhen that is what the model file expects (`sampled` for expect = \"pass\", the expected\nproperty violated for a mutant), else 1.\nWith --shard K/N: the verdict covers only this shard's share (`partial` when it violated\nnothing). Exit 1 only when the share alone shows the model is not as expected (a violation\nor the state limit in a model expected to pass); `arrival report merge` judges the whole.",
        by_protocol(&|protocol| protocol.policies()),
        by_protocol(&|protocol| protocol.properties()),
        super::Exit::help(),
    )
}

/// The `--policy` of the command line is bad input there.
fn bad_policy(message: String) -> InputError {
    InputError::invalid(Path::new("--policy"), "command line", message)
}

/// The header replay prints above a table replayed under the policy a trace recorded.
fn trace_header(from_trace: bool, policy: &str) -> String {
    if from_trace {
        format!("policy: {policy} (from the trace)\n")
    } else {
        String::new()
    }
}

mod card {
    use super::{bad_policy, trace_header, CheckSettings, CliProtocol, LoadedModel, ReplayOptions};
    use crate::card::check::{self, CheckOptions};
    use crate::card::fixture::Scenario;
    use crate::card::policy::PolicyName;
    use crate::card::{replay, table};
    use crate::cli::{pretty_json, print, Outcome};
    use crate::harness::model_file::Overrides;
    use crate::harness::report::ModelReport;
    use crate::harness::InputError;
    use std::path::Path;

    /// card.snapshot (`src/card/`).
    pub struct Card;

    /// A card policy named on the command line.
    pub fn policy(name: &str) -> Result<PolicyName, InputError> {
        name.parse().map_err(bad_policy)
    }

    impl CliProtocol for Card {
        fn name(&self) -> &'static str {
            "card"
        }
        fn policies(&self) -> Vec<&'static str> {
            PolicyName::all_names()
        }
        fn properties(&self) -> Vec<&'static str> {
            crate::card::property::Property::NAMES.to_vec()
        }
        fn claims(&self, _: &Path) -> bool {
            // The default: a fixture without a `protocol` key is a card fixture.
            true
        }

        /// Without `--policy`, a counterexample fixture replays under the policy its
        /// `trace` block records (so it shows its violation), any other under SPEC.
        fn replay(&self, fixture: &Path, options: &ReplayOptions) -> Outcome {
            let given = options.policy.as_deref().map(policy).transpose()?;
            let scenario = Scenario::load(fixture)?;
            let recorded = match (&given, &scenario.trace) {
                (None, Some(shown)) => Some(shown.policy),
                _ => None,
            };
            let from_trace = recorded.is_some();
            let policy = given.or(recorded).unwrap_or_default();
            let report = replay::replay(&scenario, policy.0, &policy.to_string());
            if options.json {
                print(&pretty_json(&report));
            } else {
                let table = if options.wide {
                    table::render_wide(&report)
                } else {
                    table::render(&report)
                };
                print(&(trace_header(from_trace, &policy.to_string()) + &table));
                if let Some(block) = &scenario.raw.conform {
                    print(&super::conform_block(&scenario, block));
                }
            }
            Ok(report.passed())
        }

        fn load_model(
            &self,
            path: &Path,
            policy: Option<&str>,
            overrides: &Overrides,
        ) -> Result<Box<dyn LoadedModel>, InputError> {
            let policy = policy.map(self::policy).transpose()?;
            let loaded = check::load_model_with(path, policy, overrides)?;
            Ok(Box::new(loaded))
        }
    }

    impl LoadedModel for check::LoadedModel {
        fn check(&self, settings: &CheckSettings) -> Result<ModelReport, InputError> {
            let options = CheckOptions {
                trace_out: settings.trace_out.clone(),
                progress: settings.progress,
                engine: settings.engine,
            };
            check::run_with(self, &options, &settings.mode)
        }
        fn serve(&self, address: &str, listening: &mut dyn FnMut()) -> std::io::Result<()> {
            check::serve(self, address, listening)
        }
    }
}

mod facts {
    use super::{bad_policy, trace_header, CheckSettings, CliProtocol, LoadedModel, ReplayOptions};
    use crate::cli::{pretty_json, print, Outcome};
    use crate::facts::fixture::{is_facts_file, Scenario};
    use crate::facts::mutants::Mutant;
    use crate::facts::{check, model_file, replay, table};
    use crate::harness::model_file::Overrides;
    use crate::harness::report::ModelReport;
    use crate::harness::InputError;
    use std::path::Path;

    /// Application facts (`src/facts/`).
    pub struct Facts;

    fn policy(name: &str) -> Result<Option<Mutant>, String> {
        match name {
            "spec" => Ok(None),
            name => name.parse().map(Some),
        }
    }

    impl CliProtocol for Facts {
        fn name(&self) -> &'static str {
            "facts"
        }
        fn policies(&self) -> Vec<&'static str> {
            std::iter::once("spec")
                .chain(Mutant::ALL.iter().map(|mutant| mutant.name()))
                .collect()
        }
        fn properties(&self) -> Vec<&'static str> {
            crate::facts::property::Property::NAMES.to_vec()
        }
        fn claims(&self, fixture: &Path) -> bool {
            is_facts_file(fixture)
        }

        /// Without `--policy`, a counterexample fixture replays under the policy its
        /// `trace` block records (so it shows its violation), any other under SPEC, as for
        /// card fixtures.
        fn replay(&self, fixture: &Path, options: &ReplayOptions) -> Outcome {
            let mut scenario = Scenario::load(fixture)?;
            let (name, from_trace) = match (&options.policy, &scenario.trace) {
                (Some(given), _) => (given.clone(), false),
                (None, Some(origin)) => (origin.policy.clone(), true),
                (None, None) => ("spec".to_owned(), false),
            };
            scenario.setup.mutant = policy(&name).map_err(|message| {
                if from_trace {
                    InputError::invalid(fixture, "trace.policy", message)
                } else {
                    bad_policy(message)
                }
            })?;
            let report = replay::replay(&scenario);
            if options.json {
                print(&pretty_json(&report));
            } else {
                print(&(trace_header(from_trace, &name) + &table::render_table(&report)));
            }
            Ok(report.passed())
        }

        fn load_model(
            &self,
            path: &Path,
            policy: Option<&str>,
            overrides: &Overrides,
        ) -> Result<Box<dyn LoadedModel>, InputError> {
            Ok(Box::new(model_file::load_model_with(
                path, policy, overrides,
            )?))
        }
    }

    impl LoadedModel for model_file::LoadedModel {
        fn check(&self, settings: &CheckSettings) -> Result<ModelReport, InputError> {
            check::run_with(
                self,
                settings.trace_out.as_deref(),
                settings.progress,
                settings.engine,
                &settings.mode,
            )
        }
        fn serve(&self, address: &str, listening: &mut dyn FnMut()) -> std::io::Result<()> {
            check::serve(self, address, listening)
        }
    }
}

pub use card::policy as card_policy;

/// A fixture's `conform` block for people: the real receiver's side of the schedule above.
fn conform_block(
    scenario: &crate::card::fixture::Scenario,
    block: &crate::card::fixture::ConformBlock,
) -> String {
    let actions = scenario.conform.as_deref().unwrap_or_default();
    let broke = match block.violates.as_str() {
        "diverged" => "went where no world of the model goes (diverged)".to_owned(),
        property => format!("broke {property}"),
    };
    let mut out = format!(
        "\nconform: against {} these actions {broke} (reproduced {}, found by {}, observe {}):\n",
        block.target, block.reproduced, block.found_by, block.observe
    );
    for (index, &action) in actions.iter().enumerate() {
        out += &format!(
            "  {}. {}\n",
            index + 1,
            crate::card::conform::describe_action(scenario, action)
        );
    }
    out += "the table above is the model's side of them, along a path the run's answers and \
            states fit (kills after an acknowledgement are plain deliveries, restarts are \
            nothing, a kill in flight or a disconnect is a lost acknowledgement where the \
            receiver showed the delivery recorded and otherwise a crash before recording)\n";
    out
}
