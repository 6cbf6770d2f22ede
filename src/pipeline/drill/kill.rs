//! The kill drill: consumers killed at random points, restarted under the same name or a new one.

use super::checks::common_checks;
use super::rig::{answer_word, drained, finish, model, post, requests, rig};
use super::{DrillOptions, DrillReport};
use crate::harness::rng::SplitMix;
use crate::pipeline::client::Client;
use crate::pipeline::consumer::{Faults, Point};
use crate::pipeline::ingress::{spawn_consumer, PipelineError};
use crate::pipeline::store;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Kills consumers at random points until its budget is spent.
struct KillPlan {
    rng: Mutex<SplitMix>,
    left: AtomicUsize,
    by_point: Mutex<BTreeMap<String, usize>>,
}

impl Faults for KillPlan {
    fn kill_at(&self, _: &str, point: Point, _: usize) -> bool {
        if self.left.load(Ordering::SeqCst) == 0 {
            return false;
        }
        let hit = self
            .rng
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .chance(0.5);
        if hit
            && self
                .left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            let name = serde_json::to_value(point)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            *self
                .by_point
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(name)
                .or_default() += 1;
            return true;
        }
        false
    }
}

/// The kill drill.
pub async fn kill(options: &DrillOptions) -> Result<DrillReport, PipelineError> {
    let started = Instant::now();
    let now = store::now_ms() / 1000;
    let (apps, requests) = requests(options.seed, options.requests, now);
    let oracle = model(&apps, &requests, 3);
    let mut rig = rig(
        &options.redis_url,
        &apps,
        options.count,
        150,
        store::DEFAULT_BUSY_TIMEOUT_MS,
        options.mutant,
        options.scratch_db.as_ref(),
    )
    .await?;
    let mut report = DrillReport::new("kill", options, requests.len());
    let plan = Arc::new(KillPlan {
        rng: Mutex::new(SplitMix::new(options.seed ^ 0x5eed)),
        left: AtomicUsize::new(options.kills),
        by_point: Mutex::new(BTreeMap::new()),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let mut slots = Vec::new();
    let mut generation = 0usize;
    for index in 1..=options.consumers.max(1) {
        let name = format!("c{index}");
        slots.push((
            name.clone(),
            spawn_consumer(
                rig.options.consumer(&name),
                plan.clone(),
                stop.clone(),
                None,
            ),
        ));
        report.consumer_starts += 1;
    }
    let mut client = Client::new(rig.running.addr);
    let mut accepted = BTreeMap::new();
    let mut rng = SplitMix::new(options.seed ^ 0xdead);
    let mut sent = 0;
    let mut quiet = 0;
    let deadline = Instant::now() + Duration::from_secs(60 + options.kills as u64 / 2);
    loop {
        // Send a few requests, then look after the consumers.
        for _ in 0..3 {
            if let Some(request) = requests.get(sent) {
                let reply = post(&mut client, &mut report, request).await?;
                if let Some(id) = reply.entry {
                    accepted.insert(id, request.number);
                }
                sent += 1;
            }
        }
        for slot in &mut slots {
            if slot.1.is_finished() {
                let killed = (&mut slot.1).await.ok().flatten();
                if killed.is_some() {
                    // Half the time the same consumer restarts (own pending first), else a
                    // new one starts and the dead one's entries are taken over.
                    if rng.chance(0.5) {
                        generation += 1;
                        slot.0 =
                            format!("{}-{generation}", slot.0.split('-').next().unwrap_or("c"));
                    }
                }
                slot.1 = spawn_consumer(
                    rig.options.consumer(&slot.0),
                    plan.clone(),
                    stop.clone(),
                    None,
                );
                report.consumer_starts += 1;
            }
        }
        if sent >= requests.len() && drained(&mut rig.redis, &rig.options.names)? {
            // Done when the kills are spent; a drained pipeline with kills left has no
            // work for them (a wrong build that lost its entries), so it ends after a
            // quiet second.
            quiet += 1;
            if plan.left.load(Ordering::SeqCst) == 0 || quiet > 50 {
                break;
            }
        } else {
            quiet = 0;
        }
        if Instant::now() > deadline {
            report.check(
                "finished-in-time",
                false,
                "the pipeline did not drain before the deadline".into(),
            );
            break;
        }
        if sent >= requests.len() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    stop.store(true, Ordering::SeqCst);
    for (_, handle) in slots {
        let _ = handle.await;
    }
    report.kills = plan
        .by_point
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let total: usize = report.kills.values().sum();
    report.check(
        "kills-done",
        total >= options.kills,
        format!("{total} kills of {} planned", options.kills),
    );
    let model_answers: BTreeMap<String, usize> =
        oracle
            .responses
            .iter()
            .fold(BTreeMap::new(), |mut counts, (_, response)| {
                *counts
                    .entry(answer_word(response.status(), response.reason()))
                    .or_default() += 1;
                counts
            });
    report.check(
        "answers-equal-model",
        model_answers == report.answers,
        format!("{:?}", report.answers),
    );
    common_checks(&mut report, &mut rig, &accepted, Some(&oracle))?;
    Ok(finish(rig, report, started).await)
}
