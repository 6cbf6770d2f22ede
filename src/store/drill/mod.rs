//! The store's drills: receivers killed with SIGKILL while a sender retries, and several
//! receiver processes on one database; after each, the store is checked against the
//! promises of the contract and against the SPEC receiver's end state for the fixture.
//!
//! This file holds what both drills share (options, the report and its JUnit suite, the
//! scratch database, the ingest child and its feeder); `crash` is the crash drill,
//! `concurrent` the concurrency drill, and `verify` compares a drilled database with the
//! store's promises and the contract's replay.

mod concurrent;
mod crash;
mod verify;

pub use concurrent::concurrent;
pub use crash::crash;

use crate::card::fixture::Scenario;
use crate::harness::InputError;
use crate::store::input::initial_cards;
use crate::store::{DbUrl, Incoming, Store, StoreMutant};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Instant;

/// Why a drill could not run: bad input, or the environment (a database, a temporary
/// folder, a child process) failing.
#[derive(Debug, thiserror::Error)]
pub enum DrillError {
    /// Bad input (exit 2).
    #[error(transparent)]
    Input(#[from] InputError),
    /// Something the drill needs failed (exit 3).
    #[error("{what}: {message}")]
    Environment {
        /// What failed: `database sqlite:...`, `store ingest child`, ...
        what: String,
        /// What it said.
        message: String,
    },
}

impl DrillError {
    /// `what` failed with `error`.
    pub fn environment(what: impl std::fmt::Display, error: impl std::fmt::Display) -> DrillError {
        DrillError::Environment {
            what: what.to_string(),
            message: error.to_string(),
        }
    }
}

/// A store failure in a drill: the database's, naming it.
fn store_error(url: &DbUrl, error: crate::store::StoreError) -> DrillError {
    DrillError::environment(format!("database {url}"), error)
}

/// `arrival store drill crash` options.
pub struct CrashOptions {
    /// The fixture, loaded.
    pub scenario: Scenario,
    /// Its path (the reconcile child reads it).
    pub fixture: PathBuf,
    /// Kills in all.
    pub kills: usize,
    /// The database; `None`: a fresh SQLite file in a temporary folder.
    pub db: Option<DbUrl>,
    /// Seed of the schedules and kill times.
    pub seed: u64,
    /// A broken store to drill instead of the real one.
    pub mutant: Option<StoreMutant>,
    /// Each receiver's `ingest --batch`.
    pub batch: usize,
}

/// `arrival store drill concurrent` options.
pub struct ConcurrentOptions {
    /// The fixture, loaded.
    pub scenario: Scenario,
    /// Its path.
    pub fixture: PathBuf,
    /// Receiver processes per run.
    pub receivers: usize,
    /// Runs.
    pub runs: usize,
    /// The database; `None`: a fresh SQLite file in a temporary folder.
    pub db: Option<DbUrl>,
    /// Seed of the splits.
    pub seed: u64,
    /// A broken store to drill instead of the real one.
    pub mutant: Option<StoreMutant>,
}

/// What a drill did and found.
#[derive(Clone, Debug, Serialize)]
pub struct DrillReport {
    /// `crash` or `concurrent`.
    pub drill: String,
    /// The fixture's name.
    pub fixture: String,
    /// `sqlite` or `postgres`.
    pub backend: String,
    /// The store mutant drilled, if any.
    pub mutant: Option<String>,
    /// Trials (crash: fresh schema, whole schedule, kills) or runs (concurrent).
    pub trials: usize,
    /// Receiver processes killed with SIGKILL.
    pub kills: usize,
    /// Receiver processes started.
    pub processes: usize,
    /// Deliveries sent, retries and copies included.
    pub sent: usize,
    /// Acknowledgements the sender received.
    pub acknowledged: usize,
    /// Whether every check held in every trial.
    pub passed: bool,
    /// What broke, in the first failing trial.
    pub failures: Vec<String>,
    /// Wall time.
    pub seconds: f64,
}

impl DrillReport {
    /// A few lines for people.
    pub fn render(&self) -> String {
        let mut out = format!(
            "store drill {} on {} ({}{}): {} trial(s), {} kill(s), {} process(es), {} sent, {} acknowledged, {:.1} s\n",
            self.drill,
            self.fixture,
            self.backend,
            self.mutant
                .as_ref()
                .map_or(String::new(), |mutant| format!(", mutant {mutant}")),
            self.trials,
            self.kills,
            self.processes,
            self.sent,
            self.acknowledged,
            self.seconds
        );
        if self.passed {
            out += "every check held";
        } else {
            out += "FAILED:";
            for failure in &self.failures {
                out += &format!("\n  {failure}");
            }
        }
        out
    }
}

/// The checks a store drill makes, as JUnit names them: one test case each.
pub const CHECKS: &[&str] = &[
    "receivers ran to completion",
    "database integrity and the stored state loads",
    "every acknowledged delivery recorded, as acknowledged",
    "no decision twice",
    "no card moved back",
    "replacement counters equal applied records",
    "audit trail replays through SPEC",
    "final state equals the model's terminal state",
];

/// Which of [`CHECKS`] a failure message belongs to (by the shape `check_store`,
/// `replay_audit`, `compare_with_spec` and the drills give it), after its `trial N:` or
/// `run N:` context.
fn check_of(message: &str) -> Option<&'static str> {
    let at = |index: usize| Some(CHECKS[index]);
    if message.contains("a receiver ended with")
        || message.contains("reconciler")
        || message.contains("reconcile child")
    {
        at(0)
    } else if message.starts_with("integrity_check:") || message.starts_with("the stored state") {
        at(1)
    } else if message.starts_with("delivery ") {
        at(2)
    } else if message.contains(" times: ") {
        at(3)
    } else if message.contains(" moved back from ") {
        at(4)
    } else if message.contains("event replacement(s) counted") {
        at(5)
    } else if message.starts_with("audit #") || message.starts_with("the audit trail") {
        at(6)
    } else if ["final cards ", "paused ", "unresolved ", "replacements "]
        .iter()
        .any(|start| message.starts_with(start))
    {
        at(7)
    } else {
        None
    }
}

impl DrillReport {
    /// The drill as a JUnit suite: one case per check it makes (the crash drill replays the
    /// audit trail, the concurrent one does not), a failed case carrying the drill's
    /// messages for that check; a message no check claims fails an `other` case.
    pub fn junit_suite(&self) -> crate::harness::junit::ExtraSuite {
        let mut context = "";
        let mut by_check: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        let numbered = |text: &str| text.starts_with("trial ") || text.starts_with("run ");
        for failure in &self.failures {
            // `trial N:` or `run N:` alone heads the messages after it.
            if let Some(head) = failure.strip_suffix(':').filter(|head| numbered(head)) {
                context = head;
                continue;
            }
            let message = match failure.split_once(": ") {
                Some((head, rest)) if numbered(head) => rest,
                _ => failure.as_str(),
            };
            let check = check_of(message).unwrap_or("other");
            let text = if context.is_empty() {
                failure.clone()
            } else {
                format!("{context}: {failure}")
            };
            by_check.entry(check).or_default().push(text);
        }
        let mut cases: Vec<(String, Option<String>)> = CHECKS
            .iter()
            .filter(|check| self.drill == "crash" || !check.starts_with("audit trail"))
            .map(|check| {
                let failed = by_check.remove(check).map(|messages| messages.join("; "));
                ((*check).to_owned(), failed)
            })
            .collect();
        if let Some(messages) = by_check.remove("other") {
            cases.push(("other".into(), Some(messages.join("; "))));
        }
        crate::harness::junit::ExtraSuite {
            skipped: Vec::new(),
            name: format!("store drill {} on {}", self.drill, self.fixture),
            cases,
            seconds: self.seconds,
        }
    }
}

impl DrillReport {
    /// An empty report of drill `drill` on the fixture, before its first trial.
    fn start(
        drill: &str,
        scenario: &Scenario,
        url: &DbUrl,
        mutant: Option<StoreMutant>,
    ) -> DrillReport {
        DrillReport {
            drill: drill.into(),
            fixture: scenario.name.clone(),
            backend: backend_name(url).into(),
            mutant: mutant.map(|mutant| mutant.name().to_owned()),
            trials: 0,
            kills: 0,
            processes: 0,
            sent: 0,
            acknowledged: 0,
            passed: true,
            failures: Vec::new(),
            seconds: 0.0,
        }
    }
}

impl DrillReport {
    /// Records the failures of a trial or run under their head (`trial N:`, `run N:`), if
    /// there are any; whether there were.
    fn failed(&mut self, head: String, failures: Vec<String>) -> bool {
        if failures.is_empty() {
            return false;
        }
        self.passed = false;
        self.failures = failures;
        self.failures.insert(0, head);
        true
    }
}

/// A scratch database for a drill: the given one, or an SQLite file in a temporary folder
/// removed at the end.
struct Scratch {
    url: DbUrl,
    folder: Option<PathBuf>,
}

impl Scratch {
    fn new(db: Option<&DbUrl>, seed: u64) -> Result<Scratch, DrillError> {
        if let Some(url) = db {
            return Ok(Scratch {
                url: url.clone(),
                folder: None,
            });
        }
        let folder = std::env::temp_dir().join(format!(
            "arrival-drill-{}-{seed}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos()
        ));
        std::fs::create_dir_all(&folder)
            .map_err(|source| DrillError::environment(folder.display(), source))?;
        Ok(Scratch {
            url: DbUrl::Sqlite(folder.join("drill.db")),
            folder: Some(folder),
        })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(folder) = &self.folder {
            let _ = std::fs::remove_dir_all(folder);
        }
    }
}

fn fresh(url: &DbUrl, scenario: &Scenario) -> Result<Store, DrillError> {
    let mut store = Store::open(url).map_err(|error| store_error(url, error))?;
    store.reset().map_err(|error| store_error(url, error))?;
    store
        .seed(&initial_cards(scenario))
        .map_err(|error| store_error(url, error))?;
    Ok(store)
}

fn exe() -> Result<PathBuf, DrillError> {
    std::env::current_exe().map_err(|source| DrillError::environment("current executable", source))
}

fn ingest_child(
    url: &DbUrl,
    (mutant, batch): (Option<StoreMutant>, usize),
    stderr: Stdio,
) -> Result<Child, DrillError> {
    let mut command = Command::new(exe()?);
    command
        .args(["store", "ingest", "--db", &url.connection_text()])
        .args(["--batch", &batch.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr);
    if let Some(mutant) = mutant {
        command.args(["--mutant", mutant.name()]);
    }
    command
        .spawn()
        .map_err(|source| DrillError::environment("store ingest child", source))
}

/// Writes `lines` to a child's standard input from a thread of its own, until they run out
/// or the child stops reading.
fn feed(mut stdin: ChildStdin, lines: Vec<String>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for text in lines {
            if writeln!(stdin, "{text}").is_err() {
                return;
            }
        }
    })
}

fn line(incoming: &Incoming) -> String {
    let mut object = json!({"delivery": incoming.delivery, "event": incoming.event});
    if let Some(at) = incoming.received_at {
        object["received_at"] = Value::from(at);
    }
    object.to_string()
}

fn backend_name(url: &DbUrl) -> &'static str {
    match url {
        DbUrl::Sqlite(_) => "sqlite",
        DbUrl::Postgres(_) => "postgres",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(drill: &str, failures: &[&str]) -> DrillReport {
        DrillReport {
            drill: drill.into(),
            fixture: "f".into(),
            backend: "sqlite".into(),
            mutant: None,
            trials: 1,
            kills: 0,
            processes: 1,
            sent: 1,
            acknowledged: 1,
            passed: failures.is_empty(),
            failures: failures.iter().map(|&f| f.to_owned()).collect(),
            seconds: 0.5,
        }
    }

    #[test]
    fn a_drill_suite_has_a_case_per_check_and_each_failure_under_its_check() {
        let passed = report("crash", &[]).junit_suite();
        assert_eq!(passed.cases.len(), CHECKS.len());
        assert!(passed.cases.iter().all(|(_, failure)| failure.is_none()));
        let concurrent = report("concurrent", &[]).junit_suite();
        assert_eq!(concurrent.cases.len(), CHECKS.len() - 1, "no audit replay");
        let failed = report(
            "crash",
            &[
                "trial 2:",
                "integrity_check: page 3 is never used",
                "delivery 4 (e-201) acknowledged applied but nothing is recorded",
                "e-201 decided 2 times: [\"applied\", \"applied\"]",
                "card-7 moved back from v12 to v10 (audit #Some(4))",
                "card-7: 2 event replacement(s) counted but 1 applied record(s)",
                "audit #5: delivery 4 recorded (\"applied\", None) where the SPEC receiver, in commit order, decides (\"duplicate\", None)",
                "paused [\"card-7\"], SPEC []",
                "something new",
            ],
        )
        .junit_suite();
        let failure = |name: &str| {
            failed
                .cases
                .iter()
                .find(|(case, _)| case == name)
                .and_then(|(_, failure)| failure.clone())
        };
        assert_eq!(failure(CHECKS[0]), None);
        for (index, check) in CHECKS.iter().enumerate().skip(1) {
            let message = failure(check).unwrap_or_else(|| panic!("{check} did not fail"));
            assert!(message.starts_with("trial 2: "), "{index}: {message}");
        }
        assert!(failure("other").is_some_and(|m| m.contains("something new")));
        let ran = report(
            "concurrent",
            &["run 3: a receiver ended with signal 9 after 2 of 5 acknowledgements: "],
        )
        .junit_suite();
        assert!(ran.cases[0]
            .1
            .as_ref()
            .is_some_and(|m| m.starts_with("run 3: a receiver")));
        assert!(ran.cases[1..].iter().all(|(_, failure)| failure.is_none()));
    }
}
