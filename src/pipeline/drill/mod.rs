//! The drills: the real pipeline (real HTTP, Redis, SQLite) under faults, its end checked
//! against the facts model's terminal state for the same requests.
//!
//! - `kill`: consumers killed at random points (before commit, after commit before `XACK`,
//!   mid-batch) while a random schedule of requests arrives; restarted under the same
//!   name (own pending first) or a new one (the dead one's entries taken over);
//! - `process-kill`: the consumers are `arrival pipeline consume` child processes, SIGKILLed
//!   by themselves at those points or by the drill at random moments, each replaced by a new
//!   process under a new name (the dead one's entries taken over with `XAUTOCLAIM`);
//! - `commit-fails`: the disk fills up under a consumer process, so its `COMMIT` fails:
//!   entries stay pending and unacknowledged, and are committed once there is room;
//! - `redis-down`: a private `redis-server` (AOF, fsync always) killed while requests
//!   arrive, then restarted: 503 meanwhile, never 202, nothing accepted before is lost;
//! - `db-locked`: another writer holds the inbox: entries stay pending, none acknowledged;
//! - `poison`: an unparseable entry written straight into the stream is dead-lettered after
//!   `max_deliveries` while the rest flows.
//!
//! One file per drill (`kill`, `process_kill`, `commit_fails`, `redis_down`, `db_locked`,
//! `poison`); `rig` is what they share to set up and run (the signed requests and their
//! model, the rig, posting, draining, the end), `checks` the end checks they share, and
//! `children` the consumer child processes of the process drills. This file holds the
//! options, the report and the dispatch.

mod checks;
mod children;
mod commit_fails;
mod db_locked;
mod kill;
mod poison;
mod process_kill;
mod redis_down;
mod rig;

pub use commit_fails::commit_fails;
pub use db_locked::db_locked;
pub use kill::kill;
pub use poison::poison;
pub use process_kill::process_kill;
pub use redis_down::{redis_down, PrivateRedis};
pub use rig::{model, requests, rfc3339, rig, Rig};

use super::ingress::PipelineError;
use crate::facts::ingress::Response;
use crate::facts::mutants::Mutant;
use serde::Serialize;
use std::collections::BTreeMap;

/// The drills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrillName {
    /// Consumers killed at random points.
    Kill,
    /// Consumer processes SIGKILLed, by themselves at a point or from outside.
    ProcessKill,
    /// The inbox's disk full under a consumer process: its commits fail.
    CommitFails,
    /// Redis stopped while requests arrive.
    RedisDown,
    /// The inbox database locked by another writer.
    DbLocked,
    /// An unparseable entry in the stream.
    Poison,
}

/// One check of a drill.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// What is checked.
    pub name: String,
    /// Whether it held.
    pub holds: bool,
    /// What was found.
    pub detail: String,
}

/// What a drill did and found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DrillReport {
    /// The drill.
    pub drill: String,
    /// The mutant run, if any.
    pub mutant: Option<String>,
    /// Requests sent.
    pub requests: usize,
    /// Answers: `status reason` -> how many.
    pub answers: BTreeMap<String, usize>,
    /// Kills by point (kill drill).
    pub kills: BTreeMap<String, usize>,
    /// Consumer (re)starts (processes started, in the process drills).
    pub consumer_starts: usize,
    /// Entries accepted (answered 202).
    pub entries: usize,
    /// Facts in the inbox at the end.
    pub facts: usize,
    /// Wall time in seconds.
    pub seconds: f64,
    /// The checks.
    pub checks: Vec<Check>,
    /// Whether every check held.
    pub passed: bool,
}

impl DrillReport {
    /// The drill as a JUnit suite: one case per check, a failed one carrying what the drill
    /// found.
    pub fn junit_suite(&self) -> crate::harness::junit::ExtraSuite {
        crate::harness::junit::ExtraSuite {
            skipped: Vec::new(),
            name: format!(
                "pipeline drill {}{}",
                self.drill,
                self.mutant
                    .as_ref()
                    .map(|m| format!(" (mutant {m})"))
                    .unwrap_or_default()
            ),
            cases: self
                .checks
                .iter()
                .map(|check| {
                    let failure = (!check.holds).then(|| check.detail.clone());
                    (check.name.clone(), failure)
                })
                .collect(),
            seconds: self.seconds,
        }
    }

    fn check(&mut self, name: &str, holds: bool, detail: String) {
        self.checks.push(Check {
            name: name.into(),
            holds,
            detail,
        });
    }
}

/// How a drill is set up.
#[derive(Clone, Debug)]
pub struct DrillOptions {
    /// Redis URL (ignored by `redis-down`, which starts its own).
    pub redis_url: String,
    /// Requests to send.
    pub requests: usize,
    /// Kills (kill drills).
    pub kills: usize,
    /// Consumers (consumer processes, in the process drills).
    pub consumers: usize,
    /// Entries per batch.
    pub count: usize,
    /// Seed.
    pub seed: u64,
    /// A wrong pipeline.
    pub mutant: Option<Mutant>,
    /// The arrival binary, which the process drills start as `pipeline consume`.
    pub exe: Option<std::path::PathBuf>,
    /// Requests sent while Redis is down (redis-down; `None`: a third of them).
    pub down_requests: Option<usize>,
    /// A database the drill may EMPTY and use as the inbox (`kill` and `process-kill`;
    /// PostgreSQL, say); a new SQLite file when `None`.
    pub scratch_db: Option<crate::pipeline::sql::InboxAt>,
}

/// The finance key of the drills.
pub const KEY_FINANCE: &str = "drill-finance-key-0000000";
/// The contracts key of the drills.
pub const KEY_CONTRACTS: &str = "drill-contracts-key-00000";

impl DrillReport {
    /// An empty report of drill `name` over `requests` requests.
    fn new(name: &str, options: &DrillOptions, requests: usize) -> DrillReport {
        DrillReport {
            drill: name.into(),
            mutant: options.mutant.map(|m| m.name().to_owned()),
            requests,
            ..DrillReport::default()
        }
    }
}

/// Runs a drill.
pub async fn drill(name: DrillName, options: &DrillOptions) -> Result<DrillReport, PipelineError> {
    match name {
        DrillName::Kill => kill(options).await,
        DrillName::ProcessKill => process_kill(options).await,
        DrillName::CommitFails => commit_fails(options).await,
        DrillName::Poison => poison(options).await,
        DrillName::DbLocked => db_locked(options).await,
        DrillName::RedisDown => redis_down(options).await,
    }
}

/// Response from its parts (for tests).
pub fn response(status: u16, reason: &str) -> Option<Response> {
    crate::facts::fixture::response_from_parts(status, reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drill_suite_has_a_case_per_check_failing_with_what_was_found() {
        let mut report = DrillReport {
            drill: "kill".into(),
            seconds: 1.5,
            ..DrillReport::default()
        };
        report.check("no decision twice", true, "12 decisions".into());
        report.check("every 202 decided", false, "request 7 has none".into());
        let suite = report.junit_suite();
        assert_eq!(suite.name, "pipeline drill kill");
        assert_eq!(
            suite.cases,
            vec![
                ("no decision twice".to_owned(), None),
                (
                    "every 202 decided".to_owned(),
                    Some("request 7 has none".to_owned())
                ),
            ]
        );
    }
}
