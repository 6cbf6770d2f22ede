//! The concurrency drill: several receiver processes on one database, reconcilers beside them.

use super::verify::verify;
use super::{
    exe, feed, fresh, ingest_child, line, store_error, ConcurrentOptions, DrillError, DrillReport,
    Scratch,
};
use crate::harness::rng::SplitMix;
use crate::store::input::{authority, fixture_deliveries};
use crate::store::{Acknowledgement, DbUrl, Incoming, StoreMutant};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The concurrency drill.
pub fn concurrent(options: &ConcurrentOptions) -> Result<DrillReport, DrillError> {
    let started = Instant::now();
    let scratch = Scratch::new(options.db.as_ref(), options.seed)?;
    let url = &scratch.url;
    let mut rng = SplitMix::new(options.seed);
    let deliveries = fixture_deliveries(&options.scenario);
    let mut report = DrillReport::start("concurrent", &options.scenario, url, options.mutant);
    for run in 1..=options.runs {
        report.trials += 1;
        let mut store = fresh(url, &options.scenario)?;
        let shares = shares(&mut rng, options.receivers, deliveries.len());
        let children = spawn_receivers(url, options.mutant, &deliveries, &shares, &mut report)?;
        // Reconciliation runs beside the receivers, one `store reconcile` process after
        // another until they are done.
        let ingesting = Arc::new(AtomicBool::new(true));
        let reconciler = reconcile_beside(
            url,
            &options.fixture,
            Arc::clone(&ingesting),
            rng.next_u64(),
        )?;
        let acked = collect_acks(children, &shares, run, &mut report)?;
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
        let failures = verify(
            &mut store,
            url,
            &options.scenario,
            &deliveries,
            &acked,
            false,
        )?;
        if report.failed(format!("run {run}:"), failures) {
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

/// Each delivery goes to one receiver, and to a second one now and then.
fn shares(rng: &mut SplitMix, receivers: usize, count: usize) -> Vec<Vec<usize>> {
    let mut shares: Vec<Vec<usize>> = vec![Vec::new(); receivers];
    for index in 0..count {
        let first = rng.below(receivers as u64) as usize;
        shares[first].push(index);
        if receivers > 1 && rng.chance(0.3) {
            let second = (first + 1 + rng.below(receivers as u64 - 1) as usize) % receivers;
            shares[second].push(index);
        }
    }
    shares
}

/// Starts one ingesting receiver per share, each fed its share's lines.
fn spawn_receivers(
    url: &DbUrl,
    mutant: Option<StoreMutant>,
    deliveries: &[Incoming],
    shares: &[Vec<usize>],
    report: &mut DrillReport,
) -> Result<Vec<(Child, std::thread::JoinHandle<()>)>, DrillError> {
    let mut children = Vec::new();
    for share in shares {
        let mut child = ingest_child(url, (mutant, 1), Stdio::piped())?;
        report.processes += 1;
        report.sent += share.len();
        let stdin = child.stdin.take().expect("piped");
        let lines: Vec<String> = share
            .iter()
            .map(|&index| line(&deliveries[index]))
            .collect();
        let writer = feed(stdin, lines);
        children.push((child, writer));
    }
    Ok(children)
}

/// Reads every receiver's acknowledgements and waits for it to end; a receiver that fails
/// or answers fewer than its share fails the run, and the rest are not read.
fn collect_acks(
    children: Vec<(Child, std::thread::JoinHandle<()>)>,
    shares: &[Vec<usize>],
    run: usize,
    report: &mut DrillReport,
) -> Result<Vec<(usize, Acknowledgement)>, DrillError> {
    let mut acked = Vec::new();
    for ((mut child, writer), share) in children.into_iter().zip(shares) {
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
    Ok(acked)
}
