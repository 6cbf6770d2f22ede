//! The `arrival` command line: a thin layer over the library.
//!
//! Exit status: 0 when everything holds as expected, 1 when a fixture's `expect` or a
//! model's expected verdict does not hold, 2 on bad input (with a message naming the file,
//! the place and what is wrong).

use arrival::card::check::{self, CheckOptions};
use arrival::card::fixture::Scenario;
use arrival::card::policy::PolicyName;
use arrival::card::sweep::SweepOptions;
use arrival::card::{replay, table};
use arrival::harness::InputError;
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "arrival",
    version,
    about = "Replay and model-check event receivers that must not treat arrival order as truth (card.snapshot and application facts)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Walk a fixture's deliveries in arrival order and report every decision.
    Replay {
        /// The fixture: a card fixture, or a facts fixture (`"protocol": "facts"`).
        fixture: PathBuf,
        /// Print the report as JSON (the stable report contract in docs/protocol.md).
        #[arg(long)]
        json: bool,
        /// Replay under this policy: `spec` (default) or a mutant's name (card or facts).
        #[arg(long, default_value = "spec")]
        policy: String,
    },
    /// Model-check fixtures under every reordering, duplicate, lost ack and crash.
    Check {
        /// Model files (TOML).
        #[arg(required_unless_present = "sweep")]
        models: Vec<PathBuf>,
        /// Also check N small generated fixtures under SPEC and every mutant (or `--policy`):
        /// SPEC must break nothing, each mutant must be caught by its catalogue property.
        #[arg(long, value_name = "N")]
        sweep: Option<usize>,
        /// The sweep's seed.
        #[arg(long, default_value_t = 1, requires = "sweep")]
        seed: u64,
        /// Check this policy instead of the model files' own (`spec` or a mutant's name).
        #[arg(long)]
        policy: Option<String>,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
        /// Write each counterexample as a replayable fixture in this folder.
        #[arg(long)]
        trace_out: Option<PathBuf>,
        /// Serve stateright's Explorer for the first model on this address (blocks).
        #[arg(long)]
        explore: Option<String>,
        /// No progress lines on stderr.
        #[arg(long)]
        quiet: bool,
    },
    /// Write a synthetic fixture (cards, deliveries, authority and a computed `expect`).
    Gen(arrival::card::generate::GenOptions),
    /// The durable receiver on SQLite or PostgreSQL: init, ingest, reconcile, show, drills.
    #[command(subcommand)]
    Store(arrival::store::cli::StoreCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay {
            fixture,
            json,
            policy,
        } => replay_facts(&fixture, json, &policy)
            .unwrap_or_else(|| run_replay(&fixture, json, &policy)),
        Command::Check {
            models,
            sweep,
            seed,
            policy,
            json,
            trace_out,
            explore,
            quiet,
        } => {
            let options = CheckRun {
                policy,
                json,
                trace_out,
                explore,
                quiet,
            };
            sweep_options(sweep, seed, &options)
                .and_then(|sweep| run_check(&models, sweep, &options))
        }
        Command::Gen(options) => arrival::card::generate::run(&options).map(|()| true),
        Command::Store(command) => arrival::store::cli::run(command),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("arrival: {error}");
            ExitCode::from(2)
        }
    }
}

fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

/// `replay` of a facts fixture (top-level `"protocol": "facts"`): its table or JSON
/// report. `None` for any other file, which the card.snapshot replay reads.
fn replay_facts(fixture: &Path, json: bool, policy: &str) -> Option<Result<bool, InputError>> {
    use arrival::facts::{fixture::is_facts_file, replay};
    if !is_facts_file(fixture) {
        return None;
    }
    let run = || -> Result<bool, InputError> {
        let mut scenario = arrival::facts::fixture::Scenario::load(fixture)?;
        scenario.setup.mutant = facts_policy(policy).map_err(|message| {
            InputError::invalid(Path::new("--policy"), "command line", message)
        })?;
        let report = replay::replay(&scenario);
        if json {
            print(&(serde_json::to_string_pretty(&report).expect("reports serialise") + "\n"));
        } else {
            print(&replay::render_table(&report));
        }
        Ok(report.passed())
    };
    Some(run())
}

fn facts_policy(name: &str) -> Result<Option<arrival::facts::mutants::Mutant>, String> {
    match name {
        "spec" => Ok(None),
        name => name.parse().map(Some),
    }
}

fn card_policy(name: &str) -> Result<PolicyName, InputError> {
    name.parse().map_err(|message: String| {
        InputError::invalid(Path::new("--policy"), "command line", message)
    })
}

fn run_replay(fixture: &Path, json: bool, policy: &str) -> Result<bool, InputError> {
    let policy = card_policy(policy)?;
    let scenario = Scenario::load(fixture)?;
    let report = replay::replay(&scenario, policy.0, &policy.to_string());
    if json {
        print(&(serde_json::to_string_pretty(&report).expect("reports serialise") + "\n"));
    } else {
        print(&table::render(&report));
    }
    Ok(report.passed())
}

/// How `check` runs, from the command line.
struct CheckRun {
    policy: Option<String>,
    json: bool,
    trace_out: Option<PathBuf>,
    explore: Option<String>,
    quiet: bool,
}

fn sweep_options(
    sweep: Option<usize>,
    seed: u64,
    options: &CheckRun,
) -> Result<Option<SweepOptions>, InputError> {
    let Some(count) = sweep else {
        return Ok(None);
    };
    let policies = match &options.policy {
        Some(name) => vec![card_policy(name)?],
        None => PolicyName::every(),
    };
    Ok(Some(SweepOptions {
        count,
        seed,
        policies,
        trace_out: options.trace_out.clone(),
    }))
}

/// A model file of either protocol, loaded.
enum Loaded {
    Card(check::LoadedModel),
    Facts(arrival::facts::model::LoadedModel),
}

fn load(path: &Path, policy: Option<&str>) -> Result<Loaded, InputError> {
    match arrival::harness::model_file::fixture_protocol(path).as_deref() {
        Some("facts") => arrival::facts::model::load_model(path, policy).map(Loaded::Facts),
        _ => {
            let policy = policy.map(card_policy).transpose()?;
            check::load_model(path, policy).map(Loaded::Card)
        }
    }
}

fn run_check(
    models: &[PathBuf],
    sweep: Option<SweepOptions>,
    options: &CheckRun,
) -> Result<bool, InputError> {
    // Read every model file first: bad input stops the run before any work is done.
    let loaded = models
        .iter()
        .map(|path| load(path, options.policy.as_deref()))
        .collect::<Result<Vec<_>, _>>()?;
    if let (Some(address), Some(first)) = (&options.explore, loaded.first()) {
        eprintln!(
            "arrival: serving Explorer for {} on http://{address}",
            models[0].display()
        );
        eprintln!("arrival: press \"Run to completion\" in the page to search for violations");
        match first {
            Loaded::Card(model) => check::serve(model, address),
            Loaded::Facts(model) => arrival::facts::model::serve(model, address),
        }
        return Ok(true);
    }
    let card_options = CheckOptions {
        trace_out: options.trace_out.clone(),
        progress: !options.quiet,
    };
    let mut reports = Vec::new();
    for model in &loaded {
        let report = match model {
            Loaded::Card(model) => check::run(model, &card_options)?,
            Loaded::Facts(model) => {
                arrival::facts::model::run(model, options.trace_out.as_deref(), !options.quiet)?
            }
        };
        if !options.json {
            print(&check::render(&report));
        }
        reports.push(report);
    }
    let swept = match &sweep {
        None => None,
        Some(sweep) => {
            let report = arrival::card::sweep::run(sweep)?;
            if !options.json {
                print(&arrival::card::sweep::render(&report));
            }
            Some(report)
        }
    };
    let all_as_expected = reports.iter().all(|report| report.as_expected)
        && swept.as_ref().is_none_or(|report| report.as_expected);
    if options.json {
        let mut document = serde_json::json!({ "models": reports });
        if let Some(report) = &swept {
            document["sweep"] = serde_json::to_value(report).expect("reports serialise");
        }
        print(&(serde_json::to_string_pretty(&document).expect("reports serialise") + "\n"));
    } else if reports.len() > 1 {
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
    Ok(all_as_expected)
}
