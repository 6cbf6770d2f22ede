//! `arrival report merge`: shard reports combined and printed like `check`'s.

use super::check::{print_summary, write_junit};
use super::{pretty_json, print, Outcome};
use crate::harness::report::render;
use std::path::PathBuf;

/// `arrival report ...`.
#[derive(clap::Subcommand)]
pub enum ReportCommand {
    /// Merge the JSON reports of `arrival check --shard K/N --json` (one file per shard,
    /// the same models in each) into one verdict per model, as one unsharded run would give.
    /// Exit status 0 when every merged verdict is as expected, 1 when not (a shard missing
    /// makes a model expected to pass `incomplete`), 2 when the reports cannot be merged
    /// (different models, policies, fixtures, settings or shard counts; a shard twice; a
    /// report without settings, written by an older arrival; bad JSON).
    Merge(MergeArgs),
}

/// `arrival report merge`.
#[derive(clap::Args)]
pub struct MergeArgs {
    /// The shard reports.
    #[arg(required = true, value_name = "REPORT")]
    pub files: Vec<PathBuf>,
    /// Print the merged results as JSON (the `check --json` document).
    #[arg(long)]
    pub json: bool,
    /// Also write the merged results as JUnit XML to this file.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

/// Merges the shards' reports: `Ok(true)` when every merged verdict is as expected.
pub fn run(args: &MergeArgs) -> Outcome {
    if let Some(file) = &args.junit {
        crate::harness::input::writable_file("--junit", file)?;
    }
    let inputs = crate::harness::merge::read(&args.files)?;
    let reports = crate::harness::merge::merge(&inputs)?;
    if let Some(file) = &args.junit {
        write_junit(file, &reports, &[])?;
    }
    if args.json {
        print(&pretty_json(&serde_json::json!({ "models": reports })));
    } else {
        for report in &reports {
            print(&render(report));
        }
        print_summary(&reports);
    }
    Ok(reports.iter().all(|report| report.as_expected))
}
