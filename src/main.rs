//! The `arrival` command line: a thin layer over the library.
//!
//! Exit status: 0 when everything holds as expected, 1 when a fixture's `expect` or a
//! model's expected verdict does not hold, 2 on bad input (with a message naming the file,
//! the place and what is wrong).

/// The model checker allocates and frees a receiver per explored step: mimalloc's
/// thread-local free lists make that markedly cheaper than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use arrival::card::check::{self, CheckOptions};
use arrival::card::fixture::Scenario;
use arrival::card::policy::PolicyName;
use arrival::card::sweep::SweepOptions;
use arrival::card::{replay, table};
use arrival::harness::check::Mode;
use arrival::harness::explore::{Engine, Strategy};
use arrival::harness::junit::ExtraSuite;
use arrival::harness::model_file::Overrides;
use arrival::harness::shard::ShardSpec;
use arrival::harness::simulate::Simulation;
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
        /// Replay under this policy: `spec` or a mutant's name (card or facts). Default: the
        /// policy a counterexample fixture records in its `trace` block, else `spec`.
        #[arg(long)]
        policy: Option<String>,
        /// Card tables: every cell on one line and every card after every step (the default
        /// fits 120 columns).
        #[arg(long)]
        wide: bool,
    },
    /// Model-check fixtures under every reordering, duplicate, lost ack and crash.
    #[command(group = clap::ArgGroup::new("sampling").args(["sweep", "simulate"]).multiple(true))]
    Check {
        /// Model files (TOML).
        #[arg(required_unless_present = "sweep")]
        models: Vec<PathBuf>,
        /// Also check N small generated fixtures under SPEC and every mutant (or `--policy`):
        /// SPEC must break nothing, each mutant must be caught by its catalogue property.
        #[arg(long, value_name = "N")]
        sweep: Option<usize>,
        /// The seed of the sweep and of `--simulate`.
        #[arg(long, default_value_t = 1, requires = "sampling")]
        seed: u64,
        /// Instead of exploring every behaviour, take N random walks per part (seeded by
        /// `--seed`): finds violations, proves nothing about behaviours no walk visited (the
        /// verdict is then `fail` or `sampled`, never `pass`).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), conflicts_with_all = ["shard", "explore"])]
        simulate: Option<u64>,
        /// With `--simulate`: the most steps one walk takes.
        #[arg(long, value_name = "N", default_value_t = arrival::harness::simulate::DEFAULT_MAX_DEPTH as u64, value_parser = clap::value_parser!(u64).range(1..), requires = "simulate")]
        max_depth: u64,
        /// Check only shard K of N (numbered from 1) of each model's work: its independent
        /// parts with `index % N == K-1`, or, for a model of one part, that share of the
        /// subtrees of its first steps. Merge the N `--json` reports with `arrival report
        /// merge`.
        #[arg(long, value_name = "K/N")]
        shard: Option<ShardSpec>,
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
        /// Also write the results as JUnit XML to this file (one suite per model, one case
        /// per property, a `verdict` case per model).
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// Checker threads (overrides the model files).
        #[arg(long, value_name = "N")]
        threads: Option<usize>,
        /// Search strategy: `bfs` (shortest traces) or `dfs` (little memory).
        #[arg(long, value_parser = parse_strategy)]
        strategy: Option<Strategy>,
        /// Checker: `arrival` (the default, fast) or `stateright` (stateright 0.31's own
        /// checkers, for comparison).
        #[arg(long, value_parser = parse_engine, default_value = "arrival")]
        engine: Engine,
        /// Stop after about N states (the verdict is then `incomplete`).
        #[arg(long, value_name = "N")]
        state_limit: Option<usize>,
        /// Fault budgets, comma-separated: card models `D,L,C,E` (duplicates, lost acks,
        /// crashes, expiries); facts models `L,CB,CA,T,P,U` (lost answers, crashes before and
        /// after commit, takeovers, poison entries, upgrade 0 or 1).
        #[arg(long, value_delimiter = ',', value_name = "LIST")]
        budgets: Option<Vec<u8>>,
        /// The properties to check, comma-separated (overrides the model files).
        #[arg(long, value_delimiter = ',', value_name = "LIST")]
        properties: Option<Vec<String>>,
    },
    /// Combine reports: `merge` the `check --shard K/N --json` reports of N jobs.
    #[command(subcommand)]
    Report(ReportCommand),
    /// Write a synthetic fixture (cards, deliveries, authority and a computed `expect`).
    Gen(arrival::card::generate::GenOptions),
    /// The real facts pipeline: HTTP ingress, Redis Stream, SQLite inbox (docs/pipeline.md).
    Pipeline {
        #[command(subcommand)]
        command: arrival::pipeline::cli::PipelineCommand,
    },
    /// The durable receiver on SQLite or PostgreSQL: init, ingest, reconcile, show, drills.
    #[command(subcommand)]
    Store(arrival::store::cli::StoreCommand),
}

#[derive(Subcommand)]
enum ReportCommand {
    /// Merge the JSON reports of `arrival check --shard K/N --json` (one file per shard,
    /// the same models in each) into one verdict per model, as one unsharded run would give.
    /// Exit status 0 when every merged verdict is as expected, 1 when not (a shard missing
    /// makes a model expected to pass `incomplete`), 2 when the reports cannot be merged
    /// (different models, policies, fixtures, settings or shard counts; a shard twice; a
    /// report without settings, written by an older arrival; bad JSON).
    Merge {
        /// The shard reports.
        #[arg(required = true, value_name = "REPORT")]
        files: Vec<PathBuf>,
        /// Print the merged results as JSON (the `check --json` document).
        #[arg(long)]
        json: bool,
        /// Also write the merged results as JUnit XML to this file.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
    },
}

/// What `--help` adds: every policy and property by protocol, and the exit statuses.
fn catalogue() -> String {
    let card_properties: Vec<&str> = arrival::card::property::Property::NAMES.to_vec();
    let facts_policies: Vec<&str> = std::iter::once("spec")
        .chain(
            arrival::facts::mutants::Mutant::ALL
                .iter()
                .map(|m| m.name()),
        )
        .collect();
    format!(
        "Policies (--policy):\n  card:  {}\n  facts: {}\n\nProperties (--properties):\n  card:  {}\n  facts: {}\n\nExit status:\n  0  everything as expected (a model's expected verdict, a fixture's expect)\n  1  something is not as expected\n  2  bad input: the message names the file, the place and the problem\n\nWith --simulate N: the verdict is `fail` when a walk broke a property and `sampled` when none\ndid, never `pass`: simulation proves nothing about the behaviours no walk visited. Exit 0\nwhen that is what the model file expects (`sampled` for expect = \"pass\", the expected\nproperty violated for a mutant), else 1.\nWith --shard K/N: the verdict covers only this shard's share (`partial` when it violated\nnothing). Exit 1 only when the share alone shows the model is not as expected (a violation\nor the state limit in a model expected to pass); `arrival report merge` judges the whole.",
        PolicyName::all_names().join(", "),
        facts_policies.join(", "),
        card_properties.join(", "),
        arrival::facts::property::Property::NAMES.join(", "),
    )
}

fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let command = Cli::command()
        .mut_subcommand("check", |check| check.after_help(catalogue()))
        .mut_subcommand("replay", |replay| replay.after_help(catalogue()));
    let cli = match Cli::from_arg_matches(&command.get_matches()) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    let result = match cli.command {
        Command::Replay {
            fixture,
            json,
            policy,
            wide,
        } => replay_facts(&fixture, json, policy.as_deref())
            .unwrap_or_else(|| run_replay(&fixture, json, wide, policy.as_deref())),
        Command::Check {
            models,
            sweep,
            seed,
            simulate,
            max_depth,
            shard,
            policy,
            json,
            trace_out,
            explore,
            quiet,
            junit,
            threads,
            strategy,
            engine,
            state_limit,
            budgets,
            properties,
        } => {
            let mode = match (simulate, shard) {
                (Some(walks), _) => Mode::Simulate(Simulation {
                    walks: usize::try_from(walks).unwrap_or(usize::MAX),
                    seed,
                    max_depth: usize::try_from(max_depth).unwrap_or(usize::MAX),
                }),
                (None, Some(spec)) => Mode::Shard(spec),
                (None, None) => Mode::Exhaustive,
            };
            let options = CheckRun {
                engine,
                mode,
                policy,
                json,
                trace_out,
                explore,
                quiet,
                junit,
                overrides: Overrides {
                    threads,
                    strategy,
                    state_limit,
                    properties,
                    budgets,
                },
            };
            sweep_options(sweep, seed, &options)
                .and_then(|sweep| run_check(&models, sweep, &options))
        }
        Command::Report(ReportCommand::Merge { files, json, junit }) => {
            run_merge(&files, json, junit.as_deref())
        }
        Command::Gen(options) => arrival::card::generate::run(&options).map(|()| true),
        Command::Pipeline { command } => arrival::pipeline::cli::run(command),
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
/// report. `None` for any other file, which the card.snapshot replay reads. Without
/// `--policy`, a counterexample fixture replays under the policy its `trace` block records
/// (so it shows its violation), any other under SPEC, as for card fixtures.
fn replay_facts(
    fixture: &Path,
    json: bool,
    policy: Option<&str>,
) -> Option<Result<bool, InputError>> {
    use arrival::facts::{fixture::is_facts_file, replay, table};
    if !is_facts_file(fixture) {
        return None;
    }
    let run = || -> Result<bool, InputError> {
        let mut scenario = arrival::facts::fixture::Scenario::load(fixture)?;
        let (name, from_trace) = match (policy, &scenario.trace) {
            (Some(given), _) => (given.to_owned(), false),
            (None, Some(origin)) => (origin.policy.clone(), true),
            (None, None) => ("spec".to_owned(), false),
        };
        scenario.setup.mutant = facts_policy(&name).map_err(|message| {
            if from_trace {
                InputError::invalid(fixture, "trace.policy", message)
            } else {
                InputError::invalid(Path::new("--policy"), "command line", message)
            }
        })?;
        let report = replay::replay(&scenario);
        if json {
            print(&(serde_json::to_string_pretty(&report).expect("reports serialise") + "\n"));
        } else {
            let header = if from_trace {
                format!("policy: {name} (from the trace)\n")
            } else {
                String::new()
            };
            print(&(header + &table::render_table(&report)));
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

/// `replay` of a card fixture. Without `--policy`, a counterexample fixture replays under the
/// policy its `trace` block records (so it shows its violation), any other under SPEC.
fn run_replay(
    fixture: &Path,
    json: bool,
    wide: bool,
    policy: Option<&str>,
) -> Result<bool, InputError> {
    let given = policy.map(card_policy).transpose()?;
    let scenario = Scenario::load(fixture)?;
    let recorded = match (&given, &scenario.trace) {
        (None, Some(shown)) => Some(shown.policy),
        _ => None,
    };
    let from_trace = recorded.is_some();
    let policy = given.or(recorded).unwrap_or_default();
    let report = replay::replay(&scenario, policy.0, &policy.to_string());
    if json {
        print(&(serde_json::to_string_pretty(&report).expect("reports serialise") + "\n"));
    } else {
        let header = if from_trace {
            format!("policy: {policy} (from the trace)\n")
        } else {
            String::new()
        };
        let table = if wide {
            table::render_wide(&report)
        } else {
            table::render(&report)
        };
        print(&(header + &table));
    }
    Ok(report.passed())
}

/// How `check` runs, from the command line.
struct CheckRun {
    mode: Mode,
    policy: Option<String>,
    json: bool,
    trace_out: Option<PathBuf>,
    explore: Option<String>,
    quiet: bool,
    junit: Option<PathBuf>,
    overrides: Overrides,
    engine: Engine,
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
    Facts(arrival::facts::model_file::LoadedModel),
}

fn load(path: &Path, options: &CheckRun) -> Result<Loaded, InputError> {
    let policy = options.policy.as_deref();
    let overrides = &options.overrides;
    match arrival::harness::model_file::fixture_protocol(path).as_deref() {
        Some("facts") => {
            arrival::facts::model_file::load_model_with(path, policy, overrides).map(Loaded::Facts)
        }
        _ => {
            let policy = policy.map(card_policy).transpose()?;
            check::load_model_with(path, policy, overrides).map(Loaded::Card)
        }
    }
}

fn run_check(
    models: &[PathBuf],
    sweep: Option<SweepOptions>,
    options: &CheckRun,
) -> Result<bool, InputError> {
    // Output paths first: a run that cannot write its results stops before any work.
    if let Some(file) = &options.junit {
        arrival::harness::input::writable_file("--junit", file)?;
    }
    if let Some(dir) = &options.trace_out {
        arrival::harness::input::writable_dir("--trace-out", dir)?;
    }
    // Read every model file first: bad input stops the run before any work is done.
    let loaded = models
        .iter()
        .map(|path| load(path, options))
        .collect::<Result<Vec<_>, _>>()?;
    if let (Some(address), Some(first)) = (&options.explore, loaded.first()) {
        let listening = || {
            eprintln!(
                "arrival: serving Explorer for {} on http://{address}",
                models[0].display()
            );
            eprintln!("arrival: press \"Run to completion\" in the page to search for violations");
        };
        match first {
            Loaded::Card(model) => check::serve(model, address, listening),
            Loaded::Facts(model) => arrival::facts::check::serve(model, address, listening),
        }
        .map_err(|error| {
            let message = format!("cannot listen on {address}: {error}");
            InputError::invalid(Path::new("--explore"), "command line", message)
        })?;
        return Ok(true);
    }
    // Progress lines only for a person watching: never with --quiet or into a file or pipe.
    let progress = !options.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let card_options = CheckOptions {
        trace_out: options.trace_out.clone(),
        progress,
        engine: options.engine,
    };
    let mut reports = Vec::new();
    for model in &loaded {
        let report = match model {
            Loaded::Card(model) => check::run_with(model, &card_options, &options.mode)?,
            Loaded::Facts(model) => arrival::facts::check::run_with(
                model,
                options.trace_out.as_deref(),
                progress,
                options.engine,
                &options.mode,
            )?,
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
    if let Some(file) = &options.junit {
        let extra: Vec<ExtraSuite> = swept
            .iter()
            .map(arrival::card::sweep::junit_suite)
            .collect();
        let xml = arrival::harness::junit::document(&reports, &extra);
        std::fs::write(file, xml).map_err(|source| InputError::Write {
            file: file.clone(),
            source,
        })?;
    }
    if options.json {
        let mut document = serde_json::json!({ "models": reports });
        if let Some(report) = &swept {
            document["sweep"] = serde_json::to_value(report).expect("reports serialise");
        }
        print(&(serde_json::to_string_pretty(&document).expect("reports serialise") + "\n"));
    } else {
        print_summary(&reports);
    }
    Ok(all_as_expected)
}

/// One closing line over several models: all as expected, or which are not.
fn print_summary(reports: &[check::ModelReport]) {
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

/// `report merge`: the shards' reports combined, printed like `check`'s.
fn run_merge(files: &[PathBuf], json: bool, junit: Option<&Path>) -> Result<bool, InputError> {
    if let Some(file) = junit {
        arrival::harness::input::writable_file("--junit", file)?;
    }
    let inputs = arrival::harness::merge::read(files)?;
    let reports = arrival::harness::merge::merge(&inputs)?;
    if let Some(file) = junit {
        let xml = arrival::harness::junit::document(&reports, &[]);
        std::fs::write(file, xml).map_err(|source| InputError::Write {
            file: file.to_owned(),
            source,
        })?;
    }
    if json {
        let document = serde_json::json!({ "models": reports });
        print(&(serde_json::to_string_pretty(&document).expect("reports serialise") + "\n"));
    } else {
        for report in &reports {
            print(&check::render(report));
        }
        print_summary(&reports);
    }
    Ok(reports.iter().all(|report| report.as_expected))
}
