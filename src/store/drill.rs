//! The store's drills: receivers killed with SIGKILL while a sender retries, and several
//! receiver processes on one database; after each, the store is checked against the
//! promises of the contract and against the SPEC receiver's end state for the fixture.

use crate::card::fixture::Scenario;
use crate::card::policy::Spec;
use crate::card::receiver::{Card, Receiver, Verdict};
use crate::card::replay::replay;
use crate::card::wire::{Catalog, Snapshot};
use crate::harness::rng::SplitMix;
use crate::harness::InputError;
use crate::store::input::{authority, fixture_deliveries, initial_cards};
use crate::store::{
    content_hash, decision_of, Acknowledgement, DbUrl, Incoming, Store, StoreMutant, Val,
};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
            name: format!("store drill {} on {}", self.drill, self.fixture),
            cases,
            seconds: self.seconds,
        }
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
    mutant: Option<StoreMutant>,
    stderr: Stdio,
) -> Result<Child, DrillError> {
    let mut command = Command::new(exe()?);
    command
        .args(["store", "ingest", "--db", &url.connection_text()])
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

/// Kills `child` with SIGKILL after `delay` unless `done` is set first.
fn killer(
    child: Arc<Mutex<Child>>,
    delay: Duration,
    done: Arc<AtomicBool>,
) -> std::thread::JoinHandle<bool> {
    std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < delay {
            if done.load(Ordering::SeqCst) {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200).min(delay - start.elapsed().min(delay)));
        }
        let mut child = child.lock().expect("child lock");
        matches!(child.try_wait(), Ok(None)) && child.kill().is_ok()
    })
}

/// How an entry of the sender's schedule treats the acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Send {
    /// The sender waits for it.
    Wait,
    /// The acknowledgement is lost on the way back; a retry follows in the schedule.
    AckLost,
    /// A copy made by the network; nobody waits for its acknowledgement.
    Copy,
}

fn line(incoming: &Incoming) -> String {
    let mut object = json!({"delivery": incoming.delivery, "event": incoming.event});
    if let Some(at) = incoming.received_at {
        object["received_at"] = Value::from(at);
    }
    object.to_string()
}

/// When the parent kills an ingesting child.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// After this long, wherever the child is.
    After(Duration),
    /// As soon as the parent has read this many acknowledgements: right after the child
    /// answered a delivery, where a store that answers before it commits is exposed.
    AtAck(usize),
}

/// One round: a child ingests `pending` until done or killed. The acknowledgements read,
/// whether it was killed, and the time taken.
fn round(
    url: &DbUrl,
    mutant: Option<StoreMutant>,
    lines: Vec<String>,
    kill: Option<Kill>,
) -> Result<(Vec<Acknowledgement>, bool, Duration), DrillError> {
    let started = Instant::now();
    let mut child = ingest_child(url, mutant, Stdio::null())?;
    let mut stdin = child.stdin.take().expect("piped");
    let stdout = child.stdout.take().expect("piped");
    let writer = std::thread::spawn(move || {
        for text in lines {
            if writeln!(stdin, "{text}").is_err() {
                return;
            }
        }
    });
    let child = Arc::new(Mutex::new(child));
    let done = Arc::new(AtomicBool::new(false));
    let timer = match kill {
        Some(Kill::After(delay)) => Some(killer(Arc::clone(&child), delay, Arc::clone(&done))),
        _ => None,
    };
    let at_ack = match kill {
        Some(Kill::AtAck(count)) => Some(count),
        _ => None,
    };
    let mut killed_at_ack = false;
    let mut acks = Vec::new();
    for text in BufReader::new(stdout).lines() {
        let Ok(text) = text else { break };
        match serde_json::from_str::<Acknowledgement>(&text) {
            Ok(ack) => acks.push(ack),
            Err(_) => break,
        }
        if at_ack == Some(acks.len()) {
            let mut child = child.lock().expect("child lock");
            killed_at_ack = matches!(child.try_wait(), Ok(None)) && child.kill().is_ok();
        }
        // What the child wrote before it died is still read: the sender got it.
    }
    done.store(true, Ordering::SeqCst);
    let killed = killed_at_ack || timer.is_some_and(|handle| handle.join().unwrap_or(false));
    let status = child
        .lock()
        .expect("child lock")
        .wait()
        .map_err(|source| DrillError::environment("store ingest child", source))?;
    let _ = writer.join();
    if !killed && !status.success() {
        return Err(DrillError::environment(
            format!("drill on {url}"),
            format!(
                "the ingest child failed ({status}) after {} acknowledgement(s)",
                acks.len()
            ),
        ));
    }
    Ok((acks, killed, started.elapsed()))
}

/// The crash drill.
pub fn crash(options: &CrashOptions) -> Result<DrillReport, DrillError> {
    let started = Instant::now();
    let scratch = Scratch::new(options.db.as_ref(), options.seed)?;
    let url = &scratch.url;
    let mut rng = SplitMix::new(options.seed);
    let deliveries = fixture_deliveries(&options.scenario);
    let mut report = DrillReport {
        drill: "crash".into(),
        fixture: options.scenario.name.clone(),
        backend: backend_name(url).into(),
        mutant: options.mutant.map(|mutant| mutant.name().to_owned()),
        trials: 0,
        kills: 0,
        processes: 0,
        sent: 0,
        acknowledged: 0,
        passed: true,
        failures: Vec::new(),
        seconds: 0.0,
    };
    // Per-line and start-up times, learnt as the drill goes.
    let mut per_line = Duration::from_millis(2);
    let startup = Duration::from_millis(5);
    let per_trial = (deliveries.len() / 40).clamp(1, 25);
    while report.kills < options.kills || report.trials == 0 {
        report.trials += 1;
        let mut store = fresh(url, &options.scenario)?;
        // The schedule: every delivery in order, lost acknowledgements (a retry follows),
        // network copies at random later places.
        let mut schedule: Vec<(usize, Send)> = Vec::new();
        for index in 0..deliveries.len() {
            if rng.chance(0.15) {
                schedule.push((index, Send::AckLost));
            }
            schedule.push((index, Send::Wait));
        }
        for index in 0..deliveries.len() {
            if rng.chance(0.15) {
                let after = schedule
                    .iter()
                    .position(|&(at, _)| at == index)
                    .expect("scheduled");
                let place = after + 1 + rng.below((schedule.len() - after) as u64) as usize;
                schedule.insert(place, (index, Send::Copy));
            }
        }
        let mut pending = schedule;
        let mut acked: Vec<(usize, Acknowledgement)> = Vec::new();
        let mut kills_left = per_trial.min(options.kills.saturating_sub(report.kills));
        while !pending.is_empty() {
            // Half the kills land at a random time; the other half right after the
            // sender read the acknowledgement of a delivery it waits for (not of one whose
            // acknowledgement is lost: that one is sent again anyway).
            let waited: Vec<usize> = pending
                .iter()
                .enumerate()
                .filter(|(_, (_, send))| *send == Send::Wait)
                .map(|(at, _)| at + 1)
                .collect();
            let kill = (kills_left > 0).then(|| {
                if !waited.is_empty() && rng.chance(0.5) {
                    Kill::AtAck(waited[rng.below(waited.len() as u64) as usize])
                } else {
                    let estimate = startup + per_line * pending.len() as u32;
                    let span = (estimate.as_micros() as u64 / kills_left as u64).max(1);
                    Kill::After(Duration::from_micros(rng.below(span)))
                }
            });
            let lines = pending
                .iter()
                .map(|&(index, _)| line(&deliveries[index]))
                .collect();
            report.processes += 1;
            report.sent += pending.len();
            let (acks, killed, took) = round(url, options.mutant, lines, kill)?;
            if !acks.is_empty() {
                per_line = (took / acks.len() as u32).max(Duration::from_micros(50));
            }
            if killed {
                report.kills += 1;
                kills_left -= 1;
            }
            for ((index, send), ack) in pending.iter().zip(&acks) {
                if *send == Send::Wait {
                    acked.push((*index, ack.clone()));
                }
            }
            report.acknowledged += acks.len();
            // Everything without an acknowledgement is sent again, in order.
            pending.drain(..acks.len().min(pending.len()));
            if !killed && !pending.is_empty() {
                break;
            }
        }
        // Reconciliation, killed at random too.
        loop {
            let kill_after = (kills_left > 0).then(|| {
                Duration::from_micros(rng.below((startup + per_line * 4).as_micros() as u64))
            });
            let mut command = Command::new(exe()?);
            command
                .args([
                    "store",
                    "reconcile",
                    "--db",
                    &url.connection_text(),
                    "--fixture",
                ])
                .arg(&options.fixture)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let child = Arc::new(Mutex::new(command.spawn().map_err(|source| {
                DrillError::environment("store reconcile child", source)
            })?));
            report.processes += 1;
            let done = Arc::new(AtomicBool::new(false));
            let kill = kill_after.map(|delay| killer(Arc::clone(&child), delay, Arc::clone(&done)));
            let status = loop {
                if let Some(status) = child.lock().expect("child lock").try_wait().ok().flatten() {
                    break status;
                }
                std::thread::sleep(Duration::from_micros(500));
            };
            done.store(true, Ordering::SeqCst);
            let killed = kill.is_some_and(|handle| handle.join().unwrap_or(false));
            if killed {
                report.kills += 1;
                kills_left = kills_left.saturating_sub(1);
                continue;
            }
            if status.success() {
                break;
            }
            return Err(DrillError::environment(
                format!("drill on {url}"),
                format!("the reconcile child failed ({status})"),
            ));
        }
        let mut failures = check_store(
            &mut store,
            url,
            &options.scenario,
            &deliveries,
            &acked,
            true,
        )?;
        failures.extend(compare_with_spec(&mut store, url, &options.scenario, true)?);
        if !failures.is_empty() {
            report.passed = false;
            report.failures = failures;
            report
                .failures
                .insert(0, format!("trial {}:", report.trials));
            break;
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The concurrency drill.
pub fn concurrent(options: &ConcurrentOptions) -> Result<DrillReport, DrillError> {
    let started = Instant::now();
    let scratch = Scratch::new(options.db.as_ref(), options.seed)?;
    let url = &scratch.url;
    let mut rng = SplitMix::new(options.seed);
    let deliveries = fixture_deliveries(&options.scenario);
    let mut report = DrillReport {
        drill: "concurrent".into(),
        fixture: options.scenario.name.clone(),
        backend: backend_name(url).into(),
        mutant: options.mutant.map(|mutant| mutant.name().to_owned()),
        trials: 0,
        kills: 0,
        processes: 0,
        sent: 0,
        acknowledged: 0,
        passed: true,
        failures: Vec::new(),
        seconds: 0.0,
    };
    for run in 1..=options.runs {
        report.trials += 1;
        let mut store = fresh(url, &options.scenario)?;
        // Each delivery goes to one receiver, and to a second one now and then.
        let mut shares: Vec<Vec<usize>> = vec![Vec::new(); options.receivers];
        for index in 0..deliveries.len() {
            let first = rng.below(options.receivers as u64) as usize;
            shares[first].push(index);
            if options.receivers > 1 && rng.chance(0.3) {
                let second = (first + 1 + rng.below(options.receivers as u64 - 1) as usize)
                    % options.receivers;
                shares[second].push(index);
            }
        }
        let mut children = Vec::new();
        for share in &shares {
            let mut child = ingest_child(url, options.mutant, Stdio::piped())?;
            report.processes += 1;
            report.sent += share.len();
            let mut stdin = child.stdin.take().expect("piped");
            let lines: Vec<String> = share
                .iter()
                .map(|&index| line(&deliveries[index]))
                .collect();
            let writer = std::thread::spawn(move || {
                for text in lines {
                    if writeln!(stdin, "{text}").is_err() {
                        return;
                    }
                }
            });
            children.push((child, writer));
        }
        // Reconciliation runs beside the receivers, one `store reconcile` process after
        // another until they are done.
        let ingesting = Arc::new(AtomicBool::new(true));
        let reconciler = reconcile_beside(
            url,
            &options.fixture,
            Arc::clone(&ingesting),
            rng.next_u64(),
        )?;
        let mut acked = Vec::new();
        for ((mut child, writer), share) in children.into_iter().zip(&shares) {
            let stdout = child.stdout.take().expect("piped");
            let acks: Vec<Acknowledgement> = BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|text| serde_json::from_str(&text).ok())
                .collect();
            let _ = writer.join();
            let status = child
                .wait()
                .map_err(|source| DrillError::environment("store ingest child", source))?;
            if !status.success() || acks.len() != share.len() {
                let mut said = String::new();
                if let Some(mut stderr) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut stderr, &mut said);
                }
                report.passed = false;
                report.failures = vec![format!(
                    "run {run}: a receiver ended with {status} after {} of {} acknowledgements: {}",
                    acks.len(),
                    share.len(),
                    said.trim()
                )];
                break;
            }
            report.acknowledged += acks.len();
            acked.extend(share.iter().copied().zip(acks));
        }
        ingesting.store(false, Ordering::SeqCst);
        let (reconcilers, failed) = reconciler
            .join()
            .unwrap_or_else(|_| (0, Some("the reconciler thread panicked".into())));
        report.processes += reconcilers;
        if let (true, Some(failed)) = (report.passed, failed) {
            report.passed = false;
            report.failures = vec![format!("run {run}: {failed}")];
        }
        if !report.passed {
            break;
        }
        store
            .reconcile_all(&authority(&options.scenario))
            .map_err(|error| store_error(url, error))?;
        let mut failures = check_store(
            &mut store,
            url,
            &options.scenario,
            &deliveries,
            &acked,
            false,
        )?;
        failures.extend(compare_with_spec(
            &mut store,
            url,
            &options.scenario,
            false,
        )?);
        if !failures.is_empty() {
            report.passed = false;
            report.failures = failures;
            report.failures.insert(0, format!("run {run}:"));
            break;
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Runs `arrival store reconcile` processes one after another (a short random pause
/// between them) while `ingesting` holds, then one more; their number, and the first
/// failure.
fn reconcile_beside(
    url: &DbUrl,
    fixture: &std::path::Path,
    ingesting: Arc<AtomicBool>,
    seed: u64,
) -> Result<std::thread::JoinHandle<(usize, Option<String>)>, DrillError> {
    let exe = exe()?;
    let url = url.connection_text();
    let fixture = fixture.to_owned();
    Ok(std::thread::spawn(move || {
        let mut rng = SplitMix::new(seed);
        let mut started = 0;
        loop {
            let last = !ingesting.load(Ordering::SeqCst);
            std::thread::sleep(Duration::from_micros(rng.below(3_000)));
            started += 1;
            let output = Command::new(&exe)
                .args(["store", "reconcile", "--db", &url, "--fixture"])
                .arg(&fixture)
                .stdin(Stdio::null())
                .output();
            match output {
                Ok(output) if output.status.success() => {}
                Ok(output) => {
                    return (
                        started,
                        Some(format!(
                            "a reconciler beside the receivers ended with {}: {}",
                            output.status,
                            String::from_utf8_lossy(&output.stderr).trim()
                        )),
                    )
                }
                Err(error) => {
                    return (
                        started,
                        Some(format!("a reconciler did not start: {error}")),
                    )
                }
            }
            if last {
                return (started, None);
            }
        }
    }))
}

fn backend_name(url: &DbUrl) -> &'static str {
    match url {
        DbUrl::Sqlite(_) => "sqlite",
        DbUrl::Postgres(_) => "postgres",
    }
}

/// The identity key of a delivery's content: (event id, content hash), or the delivery
/// number for an input without an event id.
fn content_key(catalog: &mut Catalog, incoming: &Incoming) -> (Option<String>, String) {
    let event = catalog.event(&incoming.event);
    match event.event_id {
        Some(id) => (
            Some(catalog.name(id).to_owned()),
            content_hash(catalog.content_text(event.content)),
        ),
        None => (None, incoming.delivery.to_string()),
    }
}

/// The store's own promises, read back from its tables:
/// - the database's integrity check passes and the receiver's invariants hold;
/// - every acknowledged delivery has its recorded decision, and the acknowledgement agrees
///   with it;
/// - no decision was recorded twice;
/// - no card moved to a lower version;
/// - each card's event-replacement counter equals its applied records;
/// - with `serial_audit` (one receiver at a time): the audit trail, replayed through the
///   SPEC receiver in commit order, gives every recorded decision and the stored state.
fn check_store(
    store: &mut Store,
    url: &DbUrl,
    scenario: &Scenario,
    deliveries: &[Incoming],
    acked: &[(usize, Acknowledgement)],
    serial_audit: bool,
) -> Result<Vec<String>, DrillError> {
    let fail = |error| store_error(url, error);
    let mut failures = Vec::new();
    let integrity = store
        .database()
        .integrity()
        .map_err(|error| fail(error.into()))?;
    if !integrity.starts_with("ok") {
        failures.push(format!("integrity_check: {integrity}"));
    }
    let loaded = match store.load_all() {
        Ok(loaded) => loaded,
        Err(error) => {
            failures.push(format!("the stored state does not load: {error}"));
            return Ok(failures);
        }
    };
    let query = |store: &mut Store, sql: &str| {
        store
            .database()
            .query(sql, &[])
            .map_err(|error| fail(error.into()))
    };
    // Recorded decisions by content key.
    let mut recorded: BTreeMap<(Option<String>, String), String> = BTreeMap::new();
    for row in query(
        store,
        "SELECT event_id, content_hash, decision FROM records",
    )? {
        let id = row[0].text().map(str::to_owned);
        let hash = row[1].text().unwrap_or_default().to_owned();
        recorded.insert((id, hash), row[2].text().unwrap_or_default().to_owned());
    }
    for row in query(store, "SELECT delivery, decision FROM anonymous")? {
        let number = row[0].int().unwrap_or(-1).to_string();
        recorded.insert((None, number), row[1].text().unwrap_or_default().to_owned());
    }
    // Decided audit entries by content key.
    let audit = query(
        store,
        "SELECT seq, entry, delivery, event_id, content_hash, card_id, decision, previous, \
         version, state FROM audit ORDER BY seq",
    )?;
    let mut decided: BTreeMap<(Option<String>, String), Vec<String>> = BTreeMap::new();
    for row in audit.iter().filter(|row| row[1].text() == Some("decided")) {
        let key = match row[3].text() {
            Some(id) => (
                Some(id.to_owned()),
                row[4].text().unwrap_or_default().to_owned(),
            ),
            None => (None, row[2].int().unwrap_or(-1).to_string()),
        };
        decided
            .entry(key)
            .or_default()
            .push(row[6].text().unwrap_or_default().to_owned());
    }
    for (key, decisions) in &decided {
        if decisions.len() > 1 {
            failures.push(format!(
                "{} decided {} times: {decisions:?}",
                key.0
                    .clone()
                    .unwrap_or_else(|| format!("delivery-{}", key.1)),
                decisions.len()
            ));
        }
    }
    // Every decision each content has had, in commit order: the first decision, then
    // what reconciliations re-evaluated it to.
    let mut history: BTreeMap<(Option<String>, String), Vec<String>> = BTreeMap::new();
    for row in audit
        .iter()
        .filter(|row| matches!(row[1].text(), Some("decided" | "re_evaluated")))
    {
        let key = match row[3].text() {
            Some(id) => (
                Some(id.to_owned()),
                row[4].text().unwrap_or_default().to_owned(),
            ),
            None => (None, row[2].int().unwrap_or(-1).to_string()),
        };
        history
            .entry(key)
            .or_default()
            .push(row[6].text().unwrap_or_default().to_owned());
    }
    let mut catalog = Catalog::new();
    for (index, ack) in acked {
        let key = content_key(&mut catalog, &deliveries[*index]);
        let name = key
            .0
            .clone()
            .unwrap_or_else(|| format!("delivery-{}", deliveries[*index].delivery));
        if let Some(problem) = ack_problem(ack, &key, &recorded, &decided, &history) {
            failures.push(format!("delivery {} ({name}) {problem}", ack.delivery));
        }
    }
    // Cards never move back.
    let mut versions: BTreeMap<String, u64> = BTreeMap::new();
    for row in audit.iter().filter(|row| row[1].text() == Some("card")) {
        let card = row[5].text().unwrap_or_default().to_owned();
        let version = row[8].int().unwrap_or(0) as u64;
        if let Some(&before) = versions.get(&card) {
            if version < before {
                failures.push(format!(
                    "{card} moved back from v{before} to v{version} (audit #{:?})",
                    row[0].int()
                ));
            }
        }
        versions.insert(card, version);
    }
    // Counters agree with the applied records.
    let mut applied: BTreeMap<String, i64> = BTreeMap::new();
    for row in query(
        store,
        "SELECT object_id, COUNT(*) FROM records WHERE decision = 'applied' GROUP BY object_id",
    )? {
        applied.insert(
            row[0].text().unwrap_or_default().to_owned(),
            row[1].int().unwrap_or(0),
        );
    }
    for (card, &(event, _)) in &loaded.counters {
        let count = applied.get(card).copied().unwrap_or(0);
        if count != event {
            failures.push(format!(
                "{card}: {event} event replacement(s) counted but {count} applied record(s)"
            ));
        }
    }
    if serial_audit {
        failures.extend(replay_audit(scenario, &audit, store, url, &loaded)?);
    }
    Ok(failures)
}

/// What is wrong with one acknowledgement the sender got, if anything. Exact: a new
/// decision must be the one the audit recorded first for that content; a duplicate must
/// name a decision that content had when it was answered (its first, or one a
/// reconciliation re-evaluated it to); the `ack` must be the one that decision gives; a
/// rejection must have left no record.
fn ack_problem(
    ack: &Acknowledgement,
    key: &(Option<String>, String),
    recorded: &BTreeMap<(Option<String>, String), String>,
    decided: &BTreeMap<(Option<String>, String), Vec<String>>,
    history: &BTreeMap<(Option<String>, String), Vec<String>>,
) -> Option<String> {
    if ack.is_rejected() {
        return recorded
            .contains_key(key)
            .then(|| "was rejected but a decision is recorded".to_owned());
    }
    if !recorded.contains_key(key) {
        return Some(format!(
            "was acknowledged `{}` ({}) but no decision is recorded",
            ack.ack, ack.decision
        ));
    }
    let first = decided.get(key).and_then(|list| list.first());
    let answered = if ack.decision == "duplicate" {
        let Some(original) = &ack.original_decision else {
            return Some("was answered `duplicate` without the decision it matched".into());
        };
        let had = history.get(key).is_some_and(|list| list.contains(original));
        if !had {
            return Some(format!(
                "was answered a duplicate of `{original}` but that content was decided {:?}",
                history.get(key)
            ));
        }
        original
    } else {
        if first != Some(&ack.decision) {
            return Some(format!(
                "was answered `{}` but the audit decided {first:?}",
                ack.decision
            ));
        }
        &ack.decision
    };
    let expected = decision_of(answered).map(|decision| decision.ack().name());
    (expected != Some(ack.ack.as_str())).then(|| {
        format!(
            "was acknowledged `{}` but its decision `{answered}` acknowledges {expected:?}",
            ack.ack
        )
    })
}

/// Replays the audit trail, in commit order, through the SPEC receiver: every decision
/// and reconciliation it records must be what the SPEC receiver decides at that point, and
/// the end must be the stored cards.
fn replay_audit(
    scenario: &Scenario,
    audit: &[Vec<Val>],
    store: &mut Store,
    url: &DbUrl,
    loaded: &crate::store::Loaded,
) -> Result<Vec<String>, DrillError> {
    let fail = |error: crate::store::DbError| store_error(url, error.into());
    let mut contents: BTreeMap<(Option<String>, String), String> = BTreeMap::new();
    for row in store
        .database()
        .query("SELECT event_id, content_hash, content FROM records", &[])
        .map_err(fail)?
    {
        contents.insert(
            (
                row[0].text().map(str::to_owned),
                row[1].text().unwrap_or_default().to_owned(),
            ),
            row[2].text().unwrap_or_default().to_owned(),
        );
    }
    for row in store
        .database()
        .query("SELECT delivery, content FROM anonymous", &[])
        .map_err(fail)?
    {
        contents.insert(
            (None, row[0].int().unwrap_or(-1).to_string()),
            row[1].text().unwrap_or_default().to_owned(),
        );
    }
    let mut catalog = Catalog::new();
    let initial: Vec<_> = scenario
        .raw
        .initial
        .iter()
        .map(|(name, card)| {
            let state = catalog.state(&Value::Object(card.state.clone()));
            (catalog.sym(name), Card::new(card.version, state))
        })
        .collect();
    let mut receiver = Receiver::new(initial);
    let mut failures = Vec::new();
    for row in audit {
        let seq = row[0].int().unwrap_or(0);
        match row[1].text() {
            Some(entry @ ("decided" | "duplicate")) => {
                let delivery = row[2].int().unwrap_or(0) as u32;
                let key = match row[3].text() {
                    Some(id) => (
                        Some(id.to_owned()),
                        row[4].text().unwrap_or_default().to_owned(),
                    ),
                    None => (None, delivery.to_string()),
                };
                let Some(text) = contents.get(&key) else {
                    failures.push(format!("audit #{seq}: {entry} of {key:?} has no record"));
                    continue;
                };
                let value: Value = serde_json::from_str(text).unwrap_or(Value::Null);
                let event = catalog.event(&value);
                let answer = receiver.deliver(Spec, delivery, None, &event);
                let expected = match answer.verdict {
                    Verdict::Decided(decision) => (decision.name(), None),
                    Verdict::Duplicate(of) => ("duplicate", Some(of.name())),
                };
                let actual = (row[6].text().unwrap_or_default(), row[7].text());
                if expected.0 != actual.0 || (entry == "duplicate" && expected.1 != actual.1) {
                    failures.push(format!(
                        "audit #{seq}: delivery {delivery} recorded {actual:?} where the SPEC receiver, in commit order, decides {expected:?}"
                    ));
                }
            }
            Some("reconciled") => {
                let card = catalog.sym(row[5].text().unwrap_or_default());
                let state: Value =
                    serde_json::from_str(row[9].text().unwrap_or("{}")).unwrap_or(json!({}));
                let snapshot = Snapshot {
                    object_id: card,
                    version: row[8].int().unwrap_or(0) as u64,
                    state: catalog.state(&state),
                };
                let outcome = receiver.reconcile(Spec, &snapshot).outcome;
                if Some(outcome.name()) != row[6].text() {
                    failures.push(format!(
                        "audit #{seq}: reconciliation recorded {:?} where the SPEC receiver gives {}",
                        row[6].text(),
                        outcome.name()
                    ));
                }
            }
            _ => {}
        }
    }
    let cards = |catalog: &Catalog, receiver: &Receiver| -> BTreeMap<String, (u64, Value, bool)> {
        receiver
            .cards()
            .iter()
            .map(|(&id, card)| {
                (
                    catalog.name(id).to_owned(),
                    (
                        card.version,
                        catalog.state_value(card.state).clone(),
                        card.paused,
                    ),
                )
            })
            .collect()
    };
    let replayed = cards(&catalog, &receiver);
    let stored = cards(&loaded.catalog, &loaded.receiver);
    if replayed != stored {
        failures.push(format!(
            "the audit trail replayed ends in {replayed:?} but the store holds {stored:?}"
        ));
    }
    Ok(failures)
}

/// The store's end against the SPEC receiver's end state for the fixture (replay's default
/// order): the cards, the paused cards and the unresolved inputs; with `counts`, the
/// replacement counters too (the crash drill keeps the fixture's order of first decisions).
fn compare_with_spec(
    store: &mut Store,
    url: &DbUrl,
    scenario: &Scenario,
    counts: bool,
) -> Result<Vec<String>, DrillError> {
    let spec = replay(scenario, Spec, "spec");
    let ours = store.report().map_err(|error| store_error(url, error))?;
    let mut failures = Vec::new();
    if ours.final_cards != spec.final_cards {
        failures.push(format!(
            "final cards {} differ from SPEC's {}",
            serde_json::to_string(&ours.final_cards).unwrap_or_default(),
            serde_json::to_string(&spec.final_cards).unwrap_or_default()
        ));
    }
    if ours.paused != spec.paused {
        failures.push(format!("paused {:?}, SPEC {:?}", ours.paused, spec.paused));
    }
    if ours.unresolved != spec.unresolved {
        failures.push(format!(
            "unresolved {:?}, SPEC {:?}",
            ours.unresolved, spec.unresolved
        ));
    }
    if counts && ours.replacements != spec.replacements {
        failures.push(format!(
            "replacements {:?}, SPEC {:?}",
            ours.replacements, spec.replacements
        ));
    }
    Ok(failures)
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

    fn ack(decision: &str, ack: &str, original: Option<&str>) -> Acknowledgement {
        Acknowledgement {
            delivery: 1,
            event_id: Some("e-1".into()),
            decision: decision.into(),
            ack: ack.into(),
            original_decision: original.map(str::to_owned),
            reason: None,
        }
    }

    #[test]
    fn an_acknowledgement_must_carry_exactly_its_recorded_decision() {
        let key = (Some("e-1".to_owned()), "h".to_owned());
        let one = |decision: &str| BTreeMap::from([(key.clone(), decision.to_owned())]);
        let list = |decisions: &[&str]| {
            BTreeMap::from([(
                key.clone(),
                decisions
                    .iter()
                    .map(|d| (*d).to_owned())
                    .collect::<Vec<_>>(),
            )])
        };
        let (recorded, decided) = (one("held_paused"), list(&["held_paused"]));
        let history = list(&["held_paused", "applied"]);
        let check = |ack: &Acknowledgement| ack_problem(ack, &key, &recorded, &decided, &history);
        assert_eq!(check(&ack("held_paused", "held", None)), None);
        // Both are `held`, but not the same decision.
        assert!(check(&ack("conflict_same_version", "held", None)).is_some());
        assert!(check(&ack("held_paused", "applied", None)).is_some());
        assert_eq!(check(&ack("duplicate", "applied", Some("applied"))), None);
        assert!(check(&ack("duplicate", "held", Some("held_unknown_object"))).is_some());
        assert!(check(&ack("duplicate", "held", None)).is_some());
        let mut rejected = ack("rejected", "rejected", None);
        rejected.reason = Some("too long".into());
        assert!(
            check(&rejected).is_some(),
            "a rejection must leave no record"
        );
        let none_recorded = BTreeMap::new();
        let none_decided = BTreeMap::new();
        let absent = |ack: &Acknowledgement| {
            ack_problem(ack, &key, &none_recorded, &none_decided, &none_decided)
        };
        assert_eq!(absent(&rejected), None);
        assert!(absent(&ack("applied", "applied", None)).is_some());
    }
}
