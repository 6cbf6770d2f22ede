//! The crash drill: receivers killed with SIGKILL while a sender retries, then reconciled.

use super::verify::verify;
use super::{exe, feed, fresh, ingest_child, line, CrashOptions, DrillError, DrillReport, Scratch};
use crate::harness::rng::SplitMix;
use crate::store::input::fixture_deliveries;
use crate::store::{Acknowledgement, DbUrl, StoreMutant};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    child: (Option<StoreMutant>, usize),
    lines: Vec<String>,
    kill: Option<Kill>,
) -> Result<(Vec<Acknowledgement>, bool, Duration), DrillError> {
    let started = Instant::now();
    let mut child = ingest_child(url, child, Stdio::null())?;
    let stdin = child.stdin.take().expect("piped");
    let stdout = child.stdout.take().expect("piped");
    let writer = feed(stdin, lines);
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
    let mut report = DrillReport::start("crash", &options.scenario, url, options.mutant);
    // Per-line and start-up times, learnt as the drill goes.
    let mut per_line = Duration::from_millis(2);
    let startup = Duration::from_millis(5);
    let per_trial = (deliveries.len() / 40).clamp(1, 25);
    while report.kills < options.kills || report.trials == 0 {
        report.trials += 1;
        let mut store = fresh(url, &options.scenario)?;
        let mut pending = schedule(&mut rng, deliveries.len());
        let mut acked: Vec<(usize, Acknowledgement)> = Vec::new();
        let mut kills_left = per_trial.min(options.kills.saturating_sub(report.kills));
        while !pending.is_empty() {
            let kill = next_kill(&mut rng, &pending, kills_left, startup, per_line);
            let lines = pending
                .iter()
                .map(|&(index, _)| line(&deliveries[index]))
                .collect();
            report.processes += 1;
            report.sent += pending.len();
            let (acks, killed, took) = round(url, (options.mutant, options.batch), lines, kill)?;
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
        reconcile_killed(
            options,
            url,
            &mut rng,
            &mut kills_left,
            &mut report,
            startup,
            per_line,
        )?;
        let failures = verify(
            &mut store,
            url,
            &options.scenario,
            &deliveries,
            &acked,
            true,
        )?;
        if report.failed(format!("trial {}:", report.trials), failures) {
            break;
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The sender's schedule: every delivery in order, lost acknowledgements (a retry
/// follows), network copies at random later places.
fn schedule(rng: &mut SplitMix, count: usize) -> Vec<(usize, Send)> {
    let mut schedule: Vec<(usize, Send)> = Vec::new();
    for index in 0..count {
        if rng.chance(0.15) {
            schedule.push((index, Send::AckLost));
        }
        schedule.push((index, Send::Wait));
    }
    for index in 0..count {
        if rng.chance(0.15) {
            let after = schedule
                .iter()
                .position(|&(at, _)| at == index)
                .expect("scheduled");
            let place = after + 1 + rng.below((schedule.len() - after) as u64) as usize;
            schedule.insert(place, (index, Send::Copy));
        }
    }
    schedule
}

/// When to kill the next round's child, while kills are left.
fn next_kill(
    rng: &mut SplitMix,
    pending: &[(usize, Send)],
    kills_left: usize,
    startup: Duration,
    per_line: Duration,
) -> Option<Kill> {
    // Half the kills land at a random time; the other half right after the
    // sender read the acknowledgement of a delivery it waits for (not of one whose
    // acknowledgement is lost: that one is sent again anyway).
    let waited: Vec<usize> = pending
        .iter()
        .enumerate()
        .filter(|(_, (_, send))| *send == Send::Wait)
        .map(|(at, _)| at + 1)
        .collect();
    (kills_left > 0).then(|| {
        if !waited.is_empty() && rng.chance(0.5) {
            Kill::AtAck(waited[rng.below(waited.len() as u64) as usize])
        } else {
            let estimate = startup + per_line * pending.len() as u32;
            let span = (estimate.as_micros() as u64 / kills_left as u64).max(1);
            Kill::After(Duration::from_micros(rng.below(span)))
        }
    })
}

/// Runs `store reconcile` children until one ends by itself, killing them at random while
/// kills are left; a child that fails on its own fails the drill.
fn reconcile_killed(
    options: &CrashOptions,
    url: &DbUrl,
    rng: &mut SplitMix,
    kills_left: &mut usize,
    report: &mut DrillReport,
    startup: Duration,
    per_line: Duration,
) -> Result<(), DrillError> {
    loop {
        let kill_after = (*kills_left > 0)
            .then(|| Duration::from_micros(rng.below((startup + per_line * 4).as_micros() as u64)));
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
            *kills_left = kills_left.saturating_sub(1);
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
    Ok(())
}
