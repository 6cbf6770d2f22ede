//! `arrival replay`: a fixture's deliveries in arrival order, by its protocol.

use super::protocols::{self, ReplayOptions};
use super::Outcome;
use std::path::PathBuf;

/// `arrival replay`.
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// The fixture: a card fixture, or a facts fixture (`"protocol": "facts"`).
    pub fixture: PathBuf,
    /// Print the report as JSON (the stable report contract in docs/protocol.md).
    #[arg(long)]
    pub json: bool,
    /// Replay under this policy: `spec` or a mutant's name (card or facts). Default: the
    /// policy a counterexample fixture records in its `trace` block, else `spec`.
    #[arg(long)]
    pub policy: Option<String>,
    /// Card tables: every cell on one line and every card after every step (the default
    /// fits 120 columns).
    #[arg(long)]
    pub wide: bool,
}

/// Replays the fixture under its protocol: `Ok(true)` when it met its `expect`.
pub fn run(args: &ReplayArgs) -> Outcome {
    let options = ReplayOptions {
        json: args.json,
        policy: args.policy.clone(),
        wide: args.wide,
    };
    protocols::of_fixture(&args.fixture).replay(&args.fixture, &options)
}
