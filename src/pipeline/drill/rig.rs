//! The shared rig: the drills' requests and model, the pipeline set up for a drill, its end.

use super::DrillReport;
use super::{KEY_CONTRACTS, KEY_FINANCE};
use crate::facts::application::{AppKey, Application, Applications};
use crate::facts::envelope::Source;
use crate::facts::ingress::{sign, IngressConfig, Secret};
use crate::facts::mutants::Mutant;
use crate::facts::step::{Consumer, Step};
use crate::facts::world::{transition, PostedRequest, Setup, World};
use crate::harness::rng::SplitMix;
use crate::pipeline::client::{Client, Reply};
use crate::pipeline::consumer::Point;
use crate::pipeline::ingress::{spawn_consumer, start, PipelineError, Running, ServeOptions};
use crate::pipeline::run::{unique, TempDir};
use crate::pipeline::sql::InboxAt;
use crate::pipeline::store;
use crate::pipeline::stream::{self, Names};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A random schedule of requests over a few applications: payments and signatures,
/// resends (same bytes, or same content in other bytes), variants (same identity, other
/// content), other tenants, bad signatures. Returns the applications and the requests.
pub fn requests(seed: u64, count: usize, now: i64) -> (Applications, Vec<PostedRequest>) {
    let mut rng = SplitMix::new(seed);
    let app_count = (count / 6).max(1);
    let mut apps = Applications::new();
    for index in 0..app_count {
        apps.insert(
            AppKey {
                tenant_id: "drill".into(),
                application_id: format!("app-{index}"),
            },
            Application::active(format!("BK-{index}"), 1),
        );
    }
    let sent_at = rfc3339(now);
    let mut sent: Vec<(Source, String, u64)> = Vec::new();
    let mut out = Vec::new();
    for number in 1..=count as u32 {
        let roll = rng.below(100);
        let (source, event_id, amount, tenant, reformat) = if roll < 15 && !sent.is_empty() {
            let (source, id, amount) = sent[rng.below(sent.len() as u64) as usize].clone();
            (source, id, amount, "drill", rng.chance(0.5))
        } else if roll < 20 && !sent.is_empty() {
            let (source, id, amount) = sent[rng.below(sent.len() as u64) as usize].clone();
            (source, id, amount + 1, "drill", false)
        } else {
            let source = if rng.chance(0.5) {
                Source::Finance
            } else {
                Source::Contracts
            };
            let app = rng.below(app_count as u64);
            let id = format!("{}-{number}-{app}", &source.as_str()[..3]);
            sent.push((source, id.clone(), 100));
            let tenant = if rng.chance(0.05) {
                "elsewhere"
            } else {
                "drill"
            };
            (source, id, 100, tenant, false)
        };
        let app: u64 = event_id
            .rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let body = serde_json::json!({
            "schema_version": "1",
            "source": source.as_str(),
            "event_id": event_id,
            "event_type": source.fact_type().as_str(),
            "sent_at": sent_at,
            "tenant_id": tenant,
            "application_id": format!("app-{app}"),
            "business_key": format!("BK-{app}"),
            "material_version": 1,
            "data": {"amount": amount},
        });
        let body = if reformat {
            serde_json::to_vec_pretty(&body)
        } else {
            serde_json::to_vec(&body)
        }
        .expect("json");
        let key = match source {
            Source::Finance => KEY_FINANCE,
            Source::Contracts => KEY_CONTRACTS,
        };
        let signature = if rng.chance(0.04) {
            sign(b"not-the-key", &body)
        } else {
            sign(key.as_bytes(), &body)
        };
        out.push(PostedRequest {
            number,
            received_at: now,
            source: Some(source.as_str().into()),
            signature: Some(signature),
            webhook: [None, None, None],
            resends: None,
            body,
        });
    }
    (apps, out)
}

/// Unix seconds as RFC 3339 UTC (`2024-06-03T09:00:00Z`).
pub fn rfc3339(seconds: i64) -> String {
    crate::harness::timestamp::format_rfc3339(seconds)
}

fn keys() -> BTreeMap<Source, Vec<Secret>> {
    BTreeMap::from([
        (Source::Finance, vec![Secret::new(KEY_FINANCE)]),
        (Source::Contracts, vec![Secret::new(KEY_CONTRACTS)]),
    ])
}

/// The model's terminal state for these requests posted in order, then drained by one
/// consumer: the oracle.
pub fn model(apps: &Applications, requests: &[PostedRequest], max_deliveries: u32) -> World {
    let setup = Setup {
        config: IngressConfig::new(keys()),
        requests: requests.iter().map(|r| (r.number, r.clone())).collect(),
        max_deliveries,
        quarantine_seconds: crate::facts::operator::DEFAULT_QUARANTINE_SECONDS,
        mutant: None,
    };
    let mut world = World::initial(apps.clone());
    for request in requests {
        transition(
            &setup,
            &mut world,
            &Step::Post {
                request: request.number,
                fault: None,
            },
        );
    }
    let consume = Step::Consume {
        consumer: Consumer("c1".into()),
        crash: None,
    };
    while !world.is_drained() {
        transition(&setup, &mut world, &consume);
    }
    world
}

/// A pipeline set up for a drill: its own database, stream keys and ingress.
pub struct Rig {
    /// The temporary folder (database inside).
    pub dir: TempDir,
    /// Serve options (consumers are started by the drill).
    pub options: ServeOptions,
    /// The running ingress.
    pub running: Running,
    /// A plain Redis connection for checks.
    pub redis: redis::Connection,
}

/// Sets up a rig with these applications.
pub async fn rig(
    redis_url: &str,
    apps: &Applications,
    count: usize,
    min_idle_ms: u64,
    busy_timeout_ms: u64,
    mutant: Option<Mutant>,
    scratch_db: Option<&InboxAt>,
) -> Result<Rig, PipelineError> {
    let dir = TempDir::new("arrival-drill")?;
    let db = scratch_db
        .cloned()
        .unwrap_or_else(|| InboxAt::Sqlite(dir.0.join("inbox.db")));
    let conn = store::open(&db, busy_timeout_ms)?;
    if scratch_db.is_some() {
        store::empty_scratch(&conn)?;
    }
    store::put_applications(&conn, apps)?;
    let names = Names {
        stream: unique("arrival-drill"),
        group: "inbox".into(),
    };
    let mut redis = stream::connect(redis_url, Duration::from_secs(5)).map_err(|error| {
        PipelineError::Other(format!(
            "cannot reach Redis at {redis_url}: {error}; install redis-server (apt-get install redis-server) and start it, or set ARRIVAL_REDIS_URL"
        ))
    })?;
    stream::ensure_group(&mut redis, &names)?;
    let options = ServeOptions {
        listen: "127.0.0.1:0".parse().expect("address"),
        db,
        keys: IngressConfig::new(keys()).keys,
        redis_url: redis_url.to_owned(),
        names,
        consumers: 0,
        count,
        min_idle_ms,
        max_deliveries: 3,
        busy_timeout_ms,
        max_body_bytes: crate::facts::ingress::DEFAULT_MAX_BODY_BYTES,
        freshness_seconds: crate::facts::ingress::DEFAULT_FRESHNESS_SECONDS,
        body_timeout_ms: crate::pipeline::ingress::DEFAULT_BODY_TIMEOUT_MS,
        mutant,
        shifted_clock: false,
    };
    let running = start(&options, Arc::new(crate::pipeline::consumer::NoFaults)).await?;
    Ok(Rig {
        dir,
        options,
        running,
        redis,
    })
}

pub(super) fn answer_word(status: u16, reason: &str) -> String {
    format!("{status} {reason}")
}

/// Posts one request of the schedule and counts its answer in the report.
pub(super) async fn post(
    client: &mut Client,
    report: &mut DrillReport,
    request: &PostedRequest,
) -> Result<Reply, PipelineError> {
    let reply = client
        .post(
            request.source.as_deref(),
            request.signature.as_deref(),
            &request.body,
        )
        .await?;
    *report
        .answers
        .entry(answer_word(reply.status, &reply.reason()))
        .or_default() += 1;
    Ok(reply)
}

/// Waits (a minute at the most) for the group to drain, then stops the consumers and waits
/// for them to end.
pub(super) async fn drain_then_stop(
    rig: &mut Rig,
    stop: &AtomicBool,
    consumers: Vec<tokio::task::JoinHandle<Option<Point>>>,
) -> Result<(), PipelineError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !drained(&mut rig.redis, &rig.options.names)? && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for handle in consumers {
        let _ = handle.await;
    }
    Ok(())
}

/// Whether the group has delivered every entry and holds none pending.
pub(super) fn drained(redis: &mut redis::Connection, names: &Names) -> Result<bool, PipelineError> {
    let pending = stream::pending_count(redis, names)?;
    let entries = stream::range_all(redis, &names.stream)?;
    let last = stream::last_delivered(redis, names)?;
    Ok(pending == 0
        && entries
            .last()
            .is_none_or(|entry| last.as_deref() == Some(entry.id.as_str())))
}

pub(super) async fn finish(rig: Rig, mut report: DrillReport, started: Instant) -> DrillReport {
    let Rig {
        dir,
        options,
        running,
        mut redis,
    } = rig;
    running.shutdown().await;
    let _ = stream::delete_keys(&mut redis, &options.names);
    drop(dir);
    report.seconds = started.elapsed().as_secs_f64();
    report.passed = report.checks.iter().all(|check| check.holds);
    report
}

/// Consumers `c1` .. `cN` (at least one) with no injected faults, until `stop` is set.
pub(super) fn plain_consumers(
    rig: &Rig,
    count: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Option<Point>>> {
    (1..=count.max(1))
        .map(|index| {
            spawn_consumer(
                rig.options.consumer(&format!("c{index}")),
                Arc::new(crate::pipeline::consumer::NoFaults),
                stop.clone(),
                Some(rig.running.state.metrics.clone()),
            )
        })
        .collect()
}
