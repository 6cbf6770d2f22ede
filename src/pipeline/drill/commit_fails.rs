//! The commit-fails drill: the inbox's disk fills up under a consumer process, so its
//! `COMMIT` fails; the entries stay pending and unacknowledged, and once there is room again
//! the same process commits them.
//!
//! The full disk is the consumer process's file-size limit (`RLIMIT_FSIZE`) dropped to
//! zero with prlimit(2) from outside. In WAL mode SQLite writes a transaction's pages to the
//! WAL at `COMMIT` (a small batch never spills earlier), by appending, so `COMMIT` is the
//! statement that fails (`disk I/O error`). A reader holds a snapshot meanwhile, so the WAL
//! cannot be restarted and overwritten in place, which would need no room.

use super::checks::common_checks;
use super::children::{Arming, ConsumerChild};
use super::rig::{drained, finish, model, post, requests, rig, Rig};
use super::{DrillOptions, DrillReport};
use crate::facts::world::PostedRequest;
use crate::pipeline::client::Client;
use crate::pipeline::ingress::PipelineError;
use crate::pipeline::store;
use crate::pipeline::stream;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What the consumer says when SQLite cannot write (`SQLITE_IOERR`, `SQLITE_FULL`).
const WRITE_ERRORS: [&str; 2] = ["disk I/O error", "disk is full"];

/// The commit-fails drill (one consumer process).
pub async fn commit_fails(options: &DrillOptions) -> Result<DrillReport, PipelineError> {
    let started = Instant::now();
    let exe = options.exe.clone().ok_or_else(|| {
        PipelineError::Other("the commit-fails drill needs the arrival binary to start".into())
    })?;
    let now = store::now_ms() / 1000;
    let (apps, requests) = requests(options.seed, options.requests, now);
    let oracle = model(&apps, &requests, 3);
    let mut rig = rig(
        &options.redis_url,
        &apps,
        options.count,
        30_000,
        store::DEFAULT_BUSY_TIMEOUT_MS,
        options.mutant,
        None,
    )
    .await?;
    let mut report = DrillReport::new("commit-fails", options, requests.len());
    let child = ConsumerChild::start(&exe, &rig.options, Arming::NONE, options.mutant)?;
    report.consumer_starts = 1;
    let mut client = Client::new(rig.running.addr);
    let mut accepted = BTreeMap::new();
    let third = requests.len() / 3;
    let (before, during, after) = (
        &requests[..third],
        &requests[third..2 * third],
        &requests[2 * third..],
    );
    send(&mut client, &mut report, before, &mut accepted).await?;
    wait_drained(&mut rig).await?;
    let reader = store::open(&rig.options.db, store::DEFAULT_BUSY_TIMEOUT_MS)?;
    reader.batch("BEGIN")?;
    store::verdict_count(&reader)?;
    let room = file_size_limit(child.pid, 0)?;
    let committed = store::verdict_count(&store::open(&rig.options.db, 1_000)?)?;
    // The consumer stands still while the window's requests arrive (its blocking read
    // ends meanwhile), so it then takes them as full batches, and the first one fails.
    child.pause();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut held = BTreeMap::new();
    send(&mut client, &mut report, during, &mut held).await?;
    child.resume();
    let observed = while_full(&mut rig, &held, committed).await;
    file_size_limit(child.pid, room)?;
    reader.batch("ROLLBACK")?;
    let observed = observed?;
    report.check("full-disk-nothing-acknowledged", observed.0, observed.1);
    accepted.extend(held);
    send(&mut client, &mut report, after, &mut accepted).await?;
    wait_drained(&mut rig).await?;
    child.terminate();
    let ended = child.ended(Duration::from_secs(20)).await?;
    let failures = ended
        .stderr
        .iter()
        .filter(|line| WRITE_ERRORS.iter().any(|error| line.contains(error)))
        .count();
    report.check(
        "commit-failed-then-same-process-committed",
        failures > 0 && ended.status.success(),
        format!(
            "the consumer process said {failures} times that the inbox could not be written, \
             retried, and ended with {} on SIGTERM",
            ended.status
        ),
    );
    common_checks(&mut report, &mut rig, &accepted, Some(&oracle))?;
    Ok(finish(rig, report, started).await)
}

/// Posts `requests` in order, noting each accepted entry.
async fn send(
    client: &mut Client,
    report: &mut DrillReport,
    requests: &[PostedRequest],
    accepted: &mut BTreeMap<String, u32>,
) -> Result<(), PipelineError> {
    for request in requests {
        let reply = post(client, report, request).await?;
        if let Some(id) = reply.entry {
            accepted.insert(id, request.number);
        }
    }
    Ok(())
}

/// Waits (a minute at the most) until the group has delivered and acknowledged everything.
async fn wait_drained(rig: &mut Rig) -> Result<(), PipelineError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !drained(&mut rig.redis, &rig.options.names)? && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// While the disk is full: waits (10 s at the most) until the consumer has failed twice on
/// entries of `held` (the same batch again, or a second batch), then tells whether every
/// entry it took is still pending with those failures noted as the infrastructure's (never
/// counted toward the poison budget), with no verdict committed since `committed` and no
/// dead letter.
async fn while_full(
    rig: &mut Rig,
    held: &BTreeMap<String, u32>,
    committed: usize,
) -> Result<(bool, String), PipelineError> {
    let names = rig.options.names.clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let last = stream::last_delivered(&mut rig.redis, &names)?.unwrap_or_default();
        let taken: Vec<&String> = held
            .keys()
            .filter(|id| stream::id_order(id, &last).is_le())
            .collect();
        let mut failures = Vec::new();
        for id in &taken {
            failures.push(stream::infrastructure_deliveries(
                &mut rig.redis,
                &names,
                id,
            )?);
        }
        let retried = failures.iter().any(|n| *n >= 2);
        let two_batches = failures.len() > rig.options.count;
        if retried || two_batches || Instant::now() > deadline {
            let noted = !taken.is_empty() && failures.iter().all(|n| *n >= 1);
            let pending = stream::pending_count(&mut rig.redis, &names)?;
            let verdicts = store::verdict_count(&store::open(&rig.options.db, 1_000)?)?;
            let dead = stream::length(&mut rig.redis, &names.dead_letter())?;
            let holds = noted && pending == taken.len() && verdicts == committed && dead == 0;
            return Ok((
                holds,
                format!(
                    "{} entries taken while the disk was full, {pending} pending, \
                     infrastructure failures noted per entry {failures:?}, {} verdicts \
                     committed meanwhile, {dead} dead letters",
                    taken.len(),
                    verdicts.saturating_sub(committed)
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sets process `pid`'s soft file-size limit (at most its hard limit, which is kept) and
/// returns the soft limit it had. A limit of 0 makes every write that would grow a file fail.
fn file_size_limit(pid: u32, soft: u64) -> Result<u64, PipelineError> {
    let failed = || {
        PipelineError::Other(format!(
            "cannot set the file-size limit of consumer process {pid}: {}",
            std::io::Error::last_os_error()
        ))
    };
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let (pid, resource) = (pid as libc::pid_t, libc::RLIMIT_FSIZE);
    // SAFETY: prlimit(2) writes `old`, valid for the call.
    if unsafe { libc::prlimit(pid, resource, std::ptr::null(), &mut old) } != 0 {
        return Err(failed());
    }
    let new = libc::rlimit {
        rlim_cur: soft.min(old.rlim_max),
        rlim_max: old.rlim_max,
    };
    // SAFETY: prlimit(2) reads `new`, valid for the call.
    if unsafe { libc::prlimit(pid, resource, &new, std::ptr::null_mut()) } != 0 {
        return Err(failed());
    }
    Ok(old.rlim_cur)
}
