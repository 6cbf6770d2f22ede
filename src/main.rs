//! The `arrival` command line: a thin layer over the library.
//!
//! Exit status: 0 when everything holds as expected, 1 when a fixture's `expect` or a
//! model's expected verdict does not hold, 2 on bad input (with a message naming the file,
//! the place and what is wrong).

use arrival::check::{self, CheckOptions};
use arrival::fixture::{InputError, Scenario};
use arrival::policy::PolicyName;
use arrival::{replay, table};
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "arrival",
    version,
    about = "Replay and model-check a card.snapshot receiver"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Walk a fixture's deliveries in arrival order and report every decision.
    Replay {
        /// The fixture (SPEC format).
        fixture: PathBuf,
        /// Print the report as JSON (the stable contract of SPEC.md).
        #[arg(long)]
        json: bool,
        /// Replay under this policy: `spec` (default) or a mutant's name.
        #[arg(long, default_value = "spec")]
        policy: PolicyName,
    },
    /// Model-check fixtures under every reordering, duplicate, lost ack and crash.
    Check {
        /// Model files (TOML).
        #[arg(required = true)]
        models: Vec<PathBuf>,
        /// Check this policy instead of the model files' own.
        #[arg(long)]
        policy: Option<PolicyName>,
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
    Gen(arrival::generate::GenOptions),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay {
            fixture,
            json,
            policy,
        } => replay_facts(&fixture, json).unwrap_or_else(|| run_replay(&fixture, json, policy)),
        Command::Check {
            models,
            policy,
            json,
            trace_out,
            explore,
            quiet,
        } => run_check(&models, policy, json, trace_out, explore, quiet),
        Command::Gen(options) => arrival::generate::run(&options).map(|()| true),
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
fn replay_facts(fixture: &std::path::Path, json: bool) -> Option<Result<bool, InputError>> {
    use arrival::facts::{fixture::is_facts_file, replay};
    if !is_facts_file(fixture) {
        return None;
    }
    Some(replay::replay_file(fixture).map(|report| {
        if json {
            print(&(serde_json::to_string_pretty(&report).expect("reports serialise") + "\n"));
        } else {
            print(&replay::render_table(&report));
        }
        report.passed()
    }))
}

fn run_replay(
    fixture: &std::path::Path,
    json: bool,
    policy: PolicyName,
) -> Result<bool, InputError> {
    let scenario = Scenario::load(fixture)?;
    let report = replay::replay(&scenario, policy.0, &policy.to_string());
    if json {
        print(&(serde_json::to_string_pretty(&report).expect("reports serialise") + "\n"));
    } else {
        print(&table::render(&report));
    }
    Ok(report.passed())
}

fn run_check(
    models: &[PathBuf],
    policy: Option<PolicyName>,
    json: bool,
    trace_out: Option<PathBuf>,
    explore: Option<String>,
    quiet: bool,
) -> Result<bool, InputError> {
    // Read every model file first: bad input stops the run before any work is done.
    let loaded = models
        .iter()
        .map(|path| check::load_model(path, policy))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(address) = explore {
        eprintln!(
            "arrival: serving Explorer for {} on http://{address}",
            loaded[0].path.display()
        );
        eprintln!("arrival: press \"Run to completion\" in the page to search for violations");
        check::serve(&loaded[0], &address);
        return Ok(true);
    }
    let options = CheckOptions {
        trace_out,
        progress: !quiet,
    };
    let mut reports = Vec::new();
    for model in &loaded {
        let report = check::run(model, &options)?;
        if !json {
            print(&check::render(&report));
        }
        reports.push(report);
    }
    let all_as_expected = reports.iter().all(|report| report.as_expected);
    if json {
        let document = serde_json::json!({ "models": reports });
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
