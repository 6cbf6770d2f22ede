//! The `arrival` command line: every subcommand's clap definition and its dispatch.
//!
//! `src/main.rs` only calls [`parse`], then [`run`], and exits with its [`Exit`].
//!
//! | module | job |
//! |---|---|
//! | [`protocols`] | the protocol registry: which protocol a fixture or model file is, its replay and check |
//! | [`replay`] | `arrival replay` |
//! | [`check`] | `arrival check` (and its sweep) |
//! | [`conform`] | `arrival conform`: a card model run against a receiver arrival did not write |
//! | [`merge`] | `arrival report merge` |
//! | [`gen`] | `arrival gen` |
//! | [`store`] | `arrival store ...` |
//! | [`pipeline`] | `arrival pipeline ...` |
//! | [`inbox`] | the pipeline commands' shared edge: an existing inbox, a failing part named |
//! | [`operator`] | `arrival pipeline applications\|conflicts\|quarantine ...` |
//! | [`explain`] | `arrival pipeline explain`: why an application is (not) READY, where an event went |
//! | [`error`] | the one error type: bad input apart from a failing environment |
//! | [`exit`] | the exit statuses |

pub mod check;
pub mod conform;
pub mod error;
pub mod exit;
pub mod explain;
pub mod gen;
pub mod inbox;
pub mod merge;
pub mod operator;
pub mod pipeline;
pub mod protocols;
pub mod replay;
pub mod store;

pub use error::{EnvironmentError, Error, Outcome};
pub use exit::Exit;

use clap::{Parser, Subcommand};
use std::io::Write;

/// `arrival`.
#[derive(Parser)]
#[command(
    name = "arrival",
    version,
    about = "Replay and model-check event receivers that must not treat arrival order as truth (card.snapshot and application facts)"
)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Walk a fixture's deliveries in arrival order and report every decision.
    Replay(replay::ReplayArgs),
    /// Model-check fixtures under every reordering, duplicate, lost ack and crash.
    Check(check::CheckArgs),
    /// Combine reports: `merge` the `check --shard K/N --json` reports of N jobs.
    #[command(subcommand)]
    Report(merge::ReportCommand),
    /// Run a card model's schedules against a receiver arrival did not write (HTTP or JSON
    /// lines), the model as the oracle (docs/conform.md).
    Conform(conform::ConformArgs),
    /// Write a synthetic fixture (cards, deliveries, authority and a computed `expect`).
    Gen(gen::GenArgs),
    /// The real facts pipeline: HTTP ingress, Redis Stream, SQLite inbox (docs/pipeline.md).
    Pipeline {
        /// The pipeline subcommand.
        #[command(subcommand)]
        command: pipeline::PipelineCommand,
    },
    /// The durable receiver on SQLite or PostgreSQL: init, ingest, reconcile, show, drills.
    #[command(subcommand)]
    Store(store::StoreCommand),
}

/// Parses the command line (printing help, or a usage error with exit status 2, and
/// exiting, where clap does).
pub fn parse() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let catalogue = protocols::catalogue();
    let command = <Cli as CommandFactory>::command()
        .after_help(Exit::help())
        .mut_subcommand("check", |check| check.after_help(catalogue.clone()))
        .mut_subcommand("replay", |replay| replay.after_help(catalogue.clone()));
    match Cli::from_arg_matches(&command.get_matches()) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    }
}

/// Runs one command line to its exit status (an error is printed on stderr).
pub fn run(cli: Cli) -> Exit {
    Exit::of(dispatch(cli.command))
}

fn dispatch(command: Command) -> Outcome {
    match command {
        Command::Replay(args) => replay::run(&args),
        Command::Check(args) => check::run(args),
        Command::Report(merge::ReportCommand::Merge(args)) => merge::run(&args),
        Command::Gen(args) => gen::run(args),
        Command::Conform(args) => conform::run(&args),
        Command::Pipeline { command } => pipeline::run(command),
        Command::Store(command) => store::run(command),
    }
}

/// Writes `text` to standard output; a closed pipe (`| head`) is not worth a panic.
pub fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

/// Writes `text` and a line end to standard output, like [`print()`].
pub fn print_line(text: &str) {
    print(&format!("{text}\n"));
}

/// A value as pretty JSON and a line end.
pub fn pretty_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).expect("reports serialise") + "\n"
}
