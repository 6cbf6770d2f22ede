//! `arrival gen`: the command line of the synthetic card fixture generator.

use super::Outcome;
use crate::card::generate::{self, GenOptions};
use std::path::PathBuf;

/// `arrival gen` options.
#[derive(Clone, Debug, clap::Args)]
pub struct GenArgs {
    /// Number of cards.
    #[arg(long, default_value_t = 2)]
    pub cards: usize,
    /// Number of deliveries.
    #[arg(long, default_value_t = 10)]
    pub deliveries: usize,
    /// Share of deliveries that are exact redeliveries of an earlier one.
    #[arg(long, default_value_t = 0.1)]
    pub dup_rate: f64,
    /// Share of deliveries that reuse an earlier event id with a changed payload.
    #[arg(long, default_value_t = 0.05)]
    pub conflict_rate: f64,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write here instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl From<GenArgs> for GenOptions {
    fn from(args: GenArgs) -> GenOptions {
        GenOptions {
            cards: args.cards,
            deliveries: args.deliveries,
            dup_rate: args.dup_rate,
            conflict_rate: args.conflict_rate,
            seed: args.seed,
            out: args.out,
        }
    }
}

/// Writes the fixture.
pub fn run(args: GenArgs) -> Outcome {
    generate::run(&args.into())?;
    Ok(true)
}
