//! The poison drill: an unparseable entry in the stream is dead-lettered while the rest flows.

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
use std::time::Instant;

/// The poison drill.
pub async fn poison(options: &DrillOptions) -> Result<DrillReport, PipelineError> {
    let started = Instant::now();
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
    let mut report = DrillReport::new("poison", options, requests.len());
    let stop = Arc::new(AtomicBool::new(false));
    let consumers = plain_consumers(&rig, options.consumers, &stop);
    report.consumer_starts = consumers.len();
    let mut client = Client::new(rig.running.addr);
    let mut accepted = BTreeMap::new();
    let mut poison_id = String::new();
    for (index, request) in requests.iter().enumerate() {
        if index == requests.len() / 2 {
            poison_id = redis::cmd("XADD")
                .arg(&rig.options.names.stream)
                .arg("*")
                .arg("body")
                .arg(crate::facts::world::POISON_BODY)
                .query(&mut rig.redis)?;
        }
        let reply = post(&mut client, &mut report, request).await?;
        if let Some(id) = reply.entry {
            accepted.insert(id, request.number);
        }
    }
    drain_then_stop(&mut rig, &stop, consumers).await?;
    let dead = stream::range_all(&mut rig.redis, &rig.options.names.dead_letter())?;
    let dead_ids: Vec<String> = dead
        .iter()
        .filter_map(|entry| entry.field("entry"))
        .map(|id| String::from_utf8_lossy(id).into_owned())
        .collect();
    report.check(
        "poison-dead-lettered-once",
        dead_ids == [poison_id.clone()],
        format!("dead letters {dead_ids:?}, poison entry {poison_id}"),
    );
    let conn = store::open(&rig.options.db, store::DEFAULT_BUSY_TIMEOUT_MS)?;
    let verdicts = store::verdict_count(&conn)?;
    report.check(
        "poison-has-no-verdict",
        !store::snapshot(&conn)?.verdicts.contains_key(&poison_id),
        format!("{verdicts} verdicts"),
    );
    common_checks(&mut report, &mut rig, &accepted, Some(&oracle))?;
    Ok(finish(rig, report, started).await)
}
