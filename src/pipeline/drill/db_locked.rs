//! The db-locked drill: another writer holds the inbox; entries stay pending, none acknowledged.

use super::checks::common_checks;
use super::rig::{drain_then_stop, finish, model, plain_consumers, post, requests, rig};
use super::{DrillOptions, DrillReport};
use crate::pipeline::client::Client;
use crate::pipeline::ingress::PipelineError;
use crate::pipeline::store;
use crate::pipeline::stream;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The locked-inbox drill: another writer holds the database; entries stay pending and
/// none is acknowledged; once it lets go, everything drains.
pub async fn db_locked(options: &DrillOptions) -> Result<DrillReport, PipelineError> {
    let started = Instant::now();
    let now = store::now_ms() / 1000;
    let (apps, requests) = requests(options.seed, options.requests, now);
    let oracle = model(&apps, &requests, 3);
    let mut rig = rig(
        &options.redis_url,
        &apps,
        options.count,
        30_000,
        100,
        options.mutant,
        None,
    )
    .await?;
    let mut report = DrillReport::new("db-locked", options, requests.len());
    let blocker = store::open(&rig.options.db, 100)?;
    blocker.batch("BEGIN EXCLUSIVE")?;
    let stop = Arc::new(AtomicBool::new(false));
    let consumers = plain_consumers(&rig, options.consumers, &stop);
    report.consumer_starts = consumers.len();
    let mut client = Client::new(rig.running.addr);
    let mut accepted = BTreeMap::new();
    for request in &requests {
        let reply = post(&mut client, &mut report, request).await?;
        if let Some(id) = reply.entry {
            accepted.insert(id, request.number);
        }
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let entries = stream::range_all(&mut rig.redis, &rig.options.names.stream)?;
    let last = stream::last_delivered(&mut rig.redis, &rig.options.names)?.unwrap_or_default();
    let delivered = entries
        .iter()
        .filter(|entry| stream::id_order(&entry.id, &last).is_le())
        .count();
    let pending = stream::pending_count(&mut rig.redis, &rig.options.names)?;
    let verdicts = store::verdict_count(&blocker)?;
    report.check(
        "locked-nothing-acknowledged",
        delivered == pending && verdicts == 0 && pending > 0,
        format!("{delivered} delivered, {pending} pending, {verdicts} verdicts while locked"),
    );
    blocker.batch("ROLLBACK")?;
    drop(blocker);
    drain_then_stop(&mut rig, &stop, consumers).await?;
    common_checks(&mut report, &mut rig, &accepted, Some(&oracle))?;
    Ok(finish(rig, report, started).await)
}
