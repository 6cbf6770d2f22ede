//! `arrival check`: model files of any protocol (and the card sweep), checked and reported.
//!
//! Reports print as text, as one JSON document (`--json`) and as JUnit XML (`--junit`).

use super::protocols::{self, card_policy, CheckSettings, LoadedModel};
use super::{pretty_json, print, EnvironmentError, Error, Outcome};
use crate::card::differential::{self, DifferentialOptions, DifferentialReport};
use crate::card::policy::PolicyName;
use crate::card::sweep::{self, SweepOptions, SweepReport};
use crate::harness::check::Mode;
use crate::harness::explore::{Engine, Strategy};
use crate::harness::junit::ExtraSuite;
use crate::harness::model_file::Overrides;
use crate::harness::report::{render, ModelReport};
use crate::harness::shard::ShardSpec;
use crate::harness::simulate::{Simulation, DEFAULT_MAX_DEPTH};
use crate::harness::InputError;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// `arrival check`.
#[derive(clap::Args)]
#[command(group = clap::ArgGroup::new("sampling").args(["sweep", "simulate"]).multiple(true))]
pub struct CheckArgs {
    /// Model files (TOML).
    #[arg(required_unless_present = "sweep")]
    pub models: Vec<PathBuf>,
    /// Also check N small generated fixtures under SPEC and every mutant (or `--policy`):
    /// SPEC must break nothing, each mutant must be caught by its catalogue property.
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub sweep: Option<usize>,
    /// With `--sweep`: check the first M of its fixtures once more with the retention
    /// window passing once (default: one in ten; at most N).
    #[arg(long, value_name = "M", requires = "sweep")]
    pub sweep_expiry: Option<usize>,
    /// With `--sweep`: check each mutant only until its catalogue property breaks (`spec`
    /// still on every fixture): the same verdicts in a fraction of the time.
    #[arg(long, requires = "sweep")]
    pub sweep_until_caught: bool,
    /// With `--sweep`: also walk each mutant and the contract's policy over the same random
    /// schedules of the sweep's fixtures and report every walk where their decisions differ
    /// while no property fails (a property gap).
    #[arg(long, requires = "sweep")]
    pub differential: bool,
    /// With `--differential`: walks per fixture and mutant.
    #[arg(long, value_name = "W", default_value_t = 20, value_parser = at_least_one, requires = "differential")]
    pub differential_walks: usize,
    /// The seed of the sweep and of `--simulate`.
    #[arg(long, default_value_t = 1, requires = "sampling")]
    pub seed: u64,
    /// Instead of exploring every behaviour, take N random walks per part (seeded by
    /// `--seed`): finds violations, proves nothing about behaviours no walk visited (the
    /// verdict is then `fail` or `sampled`, never `pass`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), conflicts_with_all = ["shard", "explore"])]
    pub simulate: Option<u64>,
    /// With `--simulate`: the most steps one walk takes.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_DEPTH as u64, value_parser = clap::value_parser!(u64).range(1..), requires = "simulate")]
    pub max_depth: u64,
    /// Check only shard K of N (numbered from 1) of each model's work: its independent
    /// parts with `index % N == K-1`; for a card model checked whole whose parts commute,
    /// that share of its owners' worlds (and the shared ones); otherwise that share of the
    /// subtrees of its first steps. Merge the N `--json` reports with `arrival report
    /// merge`.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<ShardSpec>,
    /// Check this policy instead of the model files' own (`spec` or a mutant's name).
    #[arg(long)]
    pub policy: Option<String>,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write each counterexample as a replayable fixture in this folder.
    #[arg(long)]
    pub trace_out: Option<PathBuf>,
    /// Serve stateright's Explorer for the first model on this address (blocks).
    #[arg(long)]
    pub explore: Option<String>,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Also write the results as JUnit XML to this file (one suite per model, one case
    /// per property, a `verdict` case per model).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Checker threads (overrides the model files).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Search strategy: `bfs` (shortest traces) or `dfs` (little memory).
    #[arg(long, value_parser = parse_strategy)]
    pub strategy: Option<Strategy>,
    /// Checker: `arrival` (the default, fast) or `stateright` (stateright 0.31's own
    /// checkers, for comparison).
    #[arg(long, value_parser = parse_engine, default_value = "arrival")]
    pub engine: Engine,
    /// Stop after about N states (the verdict is then `incomplete`).
    #[arg(long, value_name = "N")]
    pub state_limit: Option<usize>,
    /// Fault budgets, comma-separated: card models `D,L,C,E` or `D,L,C,E,R` (duplicates,
    /// lost acks, crashes, expiries, re-encoded copies); facts models `L,CB,CA,T,P,U` (lost answers, crashes before and
    /// after commit, takeovers, poison entries, upgrade 0 or 1).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub budgets: Option<Vec<u8>>,
    /// The properties to check, comma-separated (overrides the model files; the sweep and
    /// its property-gap report always check the default set, so it needs model files).
    #[arg(long, value_delimiter = ',', value_name = "LIST", requires = "models")]
    pub properties: Option<Vec<String>>,
}

fn parse_engine(text: &str) -> Result<Engine, String> {
    match text {
        "arrival" => Ok(Engine::Arrival),
        "stateright" => Ok(Engine::Stateright),
        other => Err(format!(
            "`{other}` is not a checker: `arrival` or `stateright`"
        )),
    }
}

fn parse_strategy(text: &str) -> Result<Strategy, String> {
    match text {
        "bfs" => Ok(Strategy::Bfs),
        "dfs" => Ok(Strategy::Dfs),
        other => Err(format!("`{other}` is not a strategy: `bfs` or `dfs`")),
    }
}

impl CheckArgs {
    /// How the check covers each model: everything, one shard's share, or random walks.
    fn mode(&self) -> Mode {
        match (self.simulate, self.shard) {
            (Some(walks), _) => Mode::Simulate(Simulation {
                walks: usize::try_from(walks).unwrap_or(usize::MAX),
                seed: self.seed,
                max_depth: usize::try_from(self.max_depth).unwrap_or(usize::MAX),
            }),
            (None, Some(spec)) => Mode::Shard(spec),
            (None, None) => Mode::Exhaustive,
        }
    }

    fn overrides(&self) -> Overrides {
        Overrides {
            threads: self.threads,
            strategy: self.strategy,
            state_limit: self.state_limit,
            properties: self.properties.clone(),
            budgets: self.budgets.clone(),
        }
    }

    fn sweep_options(&self) -> Result<Option<SweepOptions>, InputError> {
        let Some(count) = self.sweep else {
            return Ok(None);
        };
        let policies = match &self.policy {
            Some(name) => vec![card_policy(name)?],
            None => PolicyName::every(),
        };
        Ok(Some(SweepOptions {
            count,
            seed: self.seed,
            policies,
            trace_out: self.trace_out.clone(),
            expiry: self
                .sweep_expiry
                .unwrap_or_else(|| sweep::default_expiry(count)),
            until_caught: self.sweep_until_caught,
        }))
    }
}

/// Checks the model files (and the sweep): `Ok(true)` when everything is as expected.
pub fn run(args: CheckArgs) -> Outcome {
    let sweep = args.sweep_options()?;
    // Output paths first: a run that cannot write its results stops before any work.
    if let Some(file) = &args.junit {
        crate::harness::input::writable_file("--junit", file)?;
    }
    if let Some(dir) = &args.trace_out {
        crate::harness::input::writable_dir("--trace-out", dir)?;
    }
    // Read every model file first: bad input stops the run before any work is done.
    let overrides = args.overrides();
    let loaded = args
        .models
        .iter()
        .map(|path| protocols::of_model(path).load_model(path, args.policy.as_deref(), &overrides))
        .collect::<Result<Vec<_>, _>>()?;
    if let (Some(address), Some(first)) = (&args.explore, loaded.first()) {
        serve(first.as_ref(), &args.models[0], address)?;
        return Ok(true);
    }
    let settings = CheckSettings {
        trace_out: args.trace_out.clone(),
        // Progress lines only for a person watching: never with --quiet or into a file or
        // pipe.
        progress: !args.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr()),
        engine: args.engine,
        mode: args.mode(),
    };
    let mut reports = Vec::new();
    for model in &loaded {
        let report = model.check(&settings)?;
        if !args.json {
            print(&render(&report));
        }
        reports.push(report);
    }
    let swept = sweep.as_ref().map(sweep::run).transpose()?;
    if let (Some(report), false) = (&swept, args.json) {
        print(&sweep::render(report));
    }
    let compared = match (&sweep, args.differential) {
        (Some(options), true) => Some(differential::run(&DifferentialOptions {
            count: options.count,
            seed: options.seed,
            walks: args.differential_walks,
            expiry: options.expiry,
            mutants: options
                .policies
                .iter()
                .filter_map(|policy| policy.0)
                .collect(),
            checked: crate::card::property::Properties::SPEC,
        })?),
        _ => None,
    };
    if let (Some(report), false) = (&compared, args.json) {
        print(&differential::render(report));
    }
    finish(&args, &reports, swept.as_ref(), compared.as_ref())
}

/// Serves Explorer for the first model (blocks). An address another process holds, or
/// one this machine does not have, is the environment's failure; any other refusal of the
/// address is bad input.
fn serve(model: &dyn LoadedModel, path: &Path, address: &str) -> Result<(), Error> {
    let mut listening = || {
        eprintln!(
            "arrival: serving Explorer for {} on http://{address}",
            path.display()
        );
        eprintln!("arrival: press \"Run to completion\" in the page to search for violations");
    };
    model.serve(address, &mut listening).map_err(|error| {
        let message = format!("cannot listen on {address}: {error}");
        match error.kind() {
            ErrorKind::AddrInUse | ErrorKind::AddrNotAvailable | ErrorKind::PermissionDenied => {
                EnvironmentError::new("--explore", message).into()
            }
            _ => InputError::invalid(Path::new("--explore"), "command line", message).into(),
        }
    })
}

/// Writes the JUnit file if asked and the JSON document or the summary line.
fn finish(
    args: &CheckArgs,
    reports: &[ModelReport],
    swept: Option<&SweepReport>,
    compared: Option<&DifferentialReport>,
) -> Outcome {
    let all_as_expected = reports.iter().all(|report| report.as_expected)
        && swept.is_none_or(|report| report.as_expected)
        && compared.is_none_or(|report| report.as_expected);
    if let Some(file) = &args.junit {
        let extra: Vec<ExtraSuite> = swept
            .iter()
            .map(|report| sweep::junit_suite(report))
            .chain(
                compared
                    .iter()
                    .map(|report| differential::junit_suite(report)),
            )
            .collect();
        write_junit(file, reports, &extra)?;
    }
    if args.json {
        let mut document = serde_json::json!({ "models": reports });
        if let Some(report) = swept {
            document["sweep"] = serde_json::to_value(report).expect("reports serialise");
        }
        if let Some(report) = compared {
            document["differential"] = serde_json::to_value(report).expect("reports serialise");
        }
        print(&pretty_json(&document));
    } else {
        print_summary(reports);
    }
    Ok(all_as_expected)
}

/// Writes the reports (and extra suites) as a JUnit document.
pub fn write_junit(
    file: &Path,
    reports: &[ModelReport],
    extra: &[ExtraSuite],
) -> Result<(), InputError> {
    let xml = crate::harness::junit::document(reports, extra);
    std::fs::write(file, xml).map_err(|source| InputError::Write {
        file: file.to_owned(),
        source,
    })
}

/// One closing line over several models: all as expected, or which are not.
pub fn print_summary(reports: &[ModelReport]) {
    if reports.len() < 2 {
        return;
    }
    let failed: Vec<&str> = reports
        .iter()
        .filter(|report| !report.as_expected)
        .map(|report| report.model.as_str())
        .collect();
    if failed.is_empty() {
        print(&format!("all {} models as expected\n", reports.len()));
    } else {
        print(&format!("NOT as expected: {}\n", failed.join(", ")));
    }
}

/// A count of at least 1 (a sweep of no fixtures would catch no mutant and say so).
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(count) => Ok(count),
        Err(error) => Err(error.to_string()),
    }
}
