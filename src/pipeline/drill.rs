//! The drills: the real pipeline (real HTTP, Redis, SQLite) under faults, its end checked
//! against the facts model's terminal state for the same requests.
//!
//! - `kill`: consumers killed at random points (before commit, after commit before `XACK`,
//!   mid-batch) while a random schedule of requests arrives; restarted under the same
//!   name (own pending first) or a new one (the dead one's entries taken over);
//! - `redis-down`: a private `redis-server` (AOF, fsync always) killed while requests
//!   arrive, then restarted: 503 meanwhile, never 202, nothing accepted before is lost;
//! - `db-locked`: another writer holds the inbox: entries stay pending, none acknowledged;
//! - `poison`: an unparseable entry written straight into the stream is dead-lettered after
//!   `max_deliveries` while the rest flows.

use super::client::Client;
use super::consumer::{Faults, Point};
use super::ingress::{spawn_consumer, start, PipelineError, Running, ServeOptions};
use super::run::{unique, TempDir};
use super::store;
use super::stream::{self, Names};
use crate::facts::application::{AppKey, Application, Applications};
use crate::facts::envelope::{Envelope, Source};
use crate::facts::ingress::{sign, IngressConfig, Response, Secret};
use crate::facts::mutants::Mutant;
use crate::facts::step::{Consumer, Step};
use crate::facts::world::{transition, PostedRequest, Setup, World};
use crate::harness::rng::SplitMix;
use crate::harness::InputError;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The drills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrillName {
    /// Consumers killed at random points.
    Kill,
    /// Redis stopped while requests arrive.
    RedisDown,
    /// The inbox database locked by another writer.
    DbLocked,
    /// An unparseable entry in the stream.
    Poison,
}

/// `arrival pipeline drill NAME ...`.
#[derive(clap::Args, Debug, Clone)]
pub struct DrillArgs {
    /// Which drill.
    #[arg(value_enum)]
    pub name: DrillName,
    /// Requests to send.
    #[arg(long, default_value_t = 300)]
    pub requests: usize,
    /// Consumer kills (kill drill).
    #[arg(long, default_value_t = 200)]
    pub kills: usize,
    /// Consumers.
    #[arg(long, default_value_t = 2)]
    pub consumers: usize,
    /// Entries per batch.
    #[arg(long, default_value_t = 4)]
    pub count: usize,
    /// The random schedule's seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run a wrong pipeline (e.g. `ack-before-commit`): the drill must fail.
    #[arg(long)]
    pub mutant: Option<String>,
    /// Redis URL (the redis-down drill starts its own server).
    #[arg(
        long,
        env = "ARRIVAL_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the result as JUnit XML to this file (one suite, one case per check).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<std::path::PathBuf>,
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
    /// Consumer (re)starts.
    pub consumer_starts: usize,
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
    /// Kills (kill drill).
    pub kills: usize,
    /// Consumers.
    pub consumers: usize,
    /// Entries per batch.
    pub count: usize,
    /// Seed.
    pub seed: u64,
    /// A wrong pipeline.
    pub mutant: Option<Mutant>,
}

/// The finance key of the drills.
pub const KEY_FINANCE: &str = "drill-finance-key";
/// The contracts key of the drills.
pub const KEY_CONTRACTS: &str = "drill-contracts-key";

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
            Application {
                business_key: format!("BK-{index}"),
                material_version: 1,
            },
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
    let days = seconds.div_euclid(86_400);
    let rest = seconds.rem_euclid(86_400);
    // Days to a civil date (proleptic Gregorian), after H. Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
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
) -> Result<Rig, PipelineError> {
    let dir = TempDir::new("arrival-drill")?;
    let db = dir.0.join("inbox.db");
    let mut conn = store::open(&db, busy_timeout_ms)?;
    store::put_applications(&mut conn, apps)?;
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
        keys: keys(),
        redis_url: redis_url.to_owned(),
        names,
        consumers: 0,
        count,
        min_idle_ms,
        max_deliveries: 3,
        busy_timeout_ms,
        max_body_bytes: crate::facts::ingress::DEFAULT_MAX_BODY_BYTES,
        freshness_seconds: crate::facts::ingress::DEFAULT_FRESHNESS_SECONDS,
        body_timeout_ms: super::ingress::DEFAULT_BODY_TIMEOUT_MS,
        mutant,
        shifted_clock: false,
    };
    let running = start(&options, Arc::new(super::consumer::NoFaults)).await?;
    Ok(Rig {
        dir,
        options,
        running,
        redis,
    })
}

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

fn answer_word(status: u16, reason: &str) -> String {
    format!("{status} {reason}")
}

/// Whether the group has delivered every entry and holds none pending.
fn drained(redis: &mut redis::Connection, names: &Names) -> Result<bool, PipelineError> {
    let pending = stream::pending_count(redis, names)?;
    let entries = stream::range_all(redis, &names.stream)?;
    let last = stream::last_delivered(redis, names)?;
    Ok(pending == 0
        && entries
            .last()
            .is_none_or(|entry| last.as_deref() == Some(entry.id.as_str())))
}

/// The end checks every drill shares: each 202 has exactly one verdict or dead letter,
/// no fact twice, nothing pending, the inbox equals the model's, integrity.
fn common_checks(
    report: &mut DrillReport,
    rig: &mut Rig,
    accepted: &BTreeMap<String, u32>,
    oracle: Option<&World>,
) -> Result<(), PipelineError> {
    let mut conn = store::open(&rig.options.db, store::DEFAULT_BUSY_TIMEOUT_MS)?;
    let snapshot = store::snapshot(&mut conn)?;
    let names = &rig.options.names;
    let dead: BTreeSet<String> = stream::range_all(&mut rig.redis, &names.dead_letter())?
        .iter()
        .filter_map(|entry| entry.field("entry"))
        .map(|id| String::from_utf8_lossy(id).into_owned())
        .collect();
    let missing: Vec<&String> = accepted
        .keys()
        .filter(|id| !snapshot.verdicts.contains_key(*id) && !dead.contains(*id))
        .collect();
    let both: Vec<&String> = accepted
        .keys()
        .filter(|id| snapshot.verdicts.contains_key(*id) && dead.contains(*id))
        .collect();
    report.check(
        "every-202-settled-once",
        missing.is_empty() && both.is_empty(),
        format!(
            "{} accepted, {} without a verdict or dead letter{}, {} with both",
            accepted.len(),
            missing.len(),
            missing
                .first()
                .map(|id| format!(" (first: entry {id})"))
                .unwrap_or_default(),
            both.len()
        ),
    );
    report.check(
        "no-fact-twice",
        snapshot.counters.accepted as usize == snapshot.facts.len(),
        format!(
            "{} facts, {} accepted verdicts",
            snapshot.facts.len(),
            snapshot.counters.accepted
        ),
    );
    let pending = stream::pending_count(&mut rig.redis, names)?;
    report.check("pending-zero", pending == 0, format!("{pending} pending"));
    let integrity = store::integrity(&conn)?;
    report.check("integrity", integrity == "ok", integrity);
    if let Some(world) = oracle {
        let real_ids: BTreeSet<(Source, String)> = snapshot
            .facts
            .iter()
            .map(|(source, id, _)| (*source, id.clone()))
            .collect();
        let model_ids: BTreeSet<(Source, String)> = world
            .inbox
            .facts()
            .map(|fact| (fact.source(), fact.event_id().to_owned()))
            .collect();
        report.check(
            "facts-equal-model",
            real_ids == model_ids,
            format!(
                "{} facts, the model {}; {} only here, {} only in the model",
                real_ids.len(),
                model_ids.len(),
                real_ids.difference(&model_ids).count(),
                model_ids.difference(&real_ids).count()
            ),
        );
        // Which variant of a conflicting identity came first depends on the order the
        // consumers took; the set of contents seen per identity does not.
        let real_content: BTreeSet<String> = snapshot
            .facts
            .iter()
            .map(|(_, _, canonical)| canonical.clone())
            .chain(snapshot.evidence.iter().cloned())
            .collect();
        let model_content: BTreeSet<String> = world
            .inbox
            .facts()
            .chain(world.inbox.evidence())
            .map(|envelope: &Envelope| envelope.canonical().to_owned())
            .collect();
        report.check(
            "contents-equal-model",
            real_content == model_content,
            format!(
                "{} contents (facts and evidence), the model {}",
                real_content.len(),
                model_content.len()
            ),
        );
        let model_ready: BTreeSet<AppKey> = world.inbox.ready_marks().clone();
        report.check(
            "ready-equals-model",
            snapshot.ready == model_ready,
            format!(
                "{} READY, the model {}",
                snapshot.ready.len(),
                model_ready.len()
            ),
        );
        report.check(
            "conflicts-equal-model",
            &snapshot.open_conflicts == world.inbox.open_conflicts(),
            format!(
                "{} open conflicts, the model {}",
                snapshot.open_conflicts.len(),
                world.inbox.open_conflicts().len()
            ),
        );
        report.check(
            "late-equal-model",
            &snapshot.late == world.inbox.late_mismatches(),
            format!(
                "{} late mismatches, the model {}",
                snapshot.late.len(),
                world.inbox.late_mismatches().len()
            ),
        );
    }
    Ok(())
}

async fn finish(rig: Rig, mut report: DrillReport, started: Instant) -> DrillReport {
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
            spawn_consumer(rig.options.consumer(&name), plan.clone(), stop.clone()),
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
                slot.1 = spawn_consumer(rig.options.consumer(&slot.0), plan.clone(), stop.clone());
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

/// Consumers `c1` .. `cN` (at least one) with no injected faults, until `stop` is set.
fn plain_consumers(
    rig: &Rig,
    count: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Option<Point>>> {
    (1..=count.max(1))
        .map(|index| {
            spawn_consumer(
                rig.options.consumer(&format!("c{index}")),
                Arc::new(super::consumer::NoFaults),
                stop.clone(),
            )
        })
        .collect()
}

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
        if let Some(id) = reply.entry {
            accepted.insert(id, request.number);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !drained(&mut rig.redis, &rig.options.names)? && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for handle in consumers {
        let _ = handle.await;
    }
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
    let mut conn = store::open(&rig.options.db, store::DEFAULT_BUSY_TIMEOUT_MS)?;
    let verdicts = store::verdict_count(&conn)?;
    report.check(
        "poison-has-no-verdict",
        !store::snapshot(&mut conn)?
            .verdicts
            .contains_key(&poison_id),
        format!("{verdicts} verdicts"),
    );
    common_checks(&mut report, &mut rig, &accepted, Some(&oracle))?;
    Ok(finish(rig, report, started).await)
}

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
    )
    .await?;
    let mut report = DrillReport::new("db-locked", options, requests.len());
    let blocker = store::open(&rig.options.db, 100)?;
    blocker.execute_batch("BEGIN EXCLUSIVE")?;
    let stop = Arc::new(AtomicBool::new(false));
    let consumers = plain_consumers(&rig, options.consumers, &stop);
    report.consumer_starts = consumers.len();
    let mut client = Client::new(rig.running.addr);
    let mut accepted = BTreeMap::new();
    for request in &requests {
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
    blocker.execute_batch("ROLLBACK")?;
    drop(blocker);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !drained(&mut rig.redis, &rig.options.names)? && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for handle in consumers {
        let _ = handle.await;
    }
    common_checks(&mut report, &mut rig, &accepted, Some(&oracle))?;
    Ok(finish(rig, report, started).await)
}

/// A private `redis-server` (AOF, fsync always) on a free loopback port; killed on drop.
pub struct PrivateRedis {
    /// Its folder (AOF inside).
    pub dir: TempDir,
    /// Its port.
    pub port: u16,
    child: Option<std::process::Child>,
}

impl PrivateRedis {
    /// Starts one on a free port.
    pub fn start() -> Result<PrivateRedis, PipelineError> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut redis = PrivateRedis {
            dir: TempDir::new("arrival-redis")?,
            port,
            child: None,
        };
        redis.restart()?;
        Ok(redis)
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts (again) on the same port and folder, and waits for it to answer.
    pub fn restart(&mut self) -> Result<(), PipelineError> {
        let child = std::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir.0)
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|error| {
                PipelineError::Other(format!(
                    "cannot start redis-server ({error}): install it (apt-get install redis-server)"
                ))
            })?;
        self.child = Some(child);
        for _ in 0..100 {
            if let Ok(mut conn) = stream::connect(&self.url(), Duration::from_millis(200)) {
                if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(PipelineError::Other(
            "the private redis-server did not answer".into(),
        ))
    }

    /// Kills it (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The Redis-down drill (its own private server).
pub async fn redis_down(options: &DrillOptions) -> Result<DrillReport, PipelineError> {
    let started = Instant::now();
    let mut server = PrivateRedis::start()?;
    let now = store::now_ms() / 1000;
    let (apps, requests) = requests(options.seed, options.requests, now);
    let mut rig = rig(
        &server.url(),
        &apps,
        options.count,
        30_000,
        store::DEFAULT_BUSY_TIMEOUT_MS,
        options.mutant,
    )
    .await?;
    let mut report = DrillReport::new("redis-down", options, requests.len());
    let stop = Arc::new(AtomicBool::new(false));
    let consumers = plain_consumers(&rig, options.consumers, &stop);
    report.consumer_starts = consumers.len();
    let mut client = Client::new(rig.running.addr);
    let mut accepted = BTreeMap::new();
    let third = requests.len() / 3;
    let mut accepted_while_down = 0;
    let mut unavailable = 0;
    for (index, request) in requests.iter().enumerate() {
        if index == third {
            server.kill();
        }
        if index == 2 * third {
            server.restart()?;
            // Give the ingress connection a moment to come back; requests meanwhile may
            // still be answered 503, which the sender would resend.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let down = (third..2 * third).contains(&index);
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
        if reply.status == 503 {
            unavailable += 1;
        }
        if let Some(id) = reply.entry {
            if down {
                accepted_while_down += 1;
            }
            accepted.insert(id, request.number);
        }
    }
    report.check(
        "no-202-while-down",
        accepted_while_down == 0 && unavailable > 0,
        format!("{accepted_while_down} accepted while Redis was down, {unavailable} answered 503"),
    );
    // The other end of the check: reconnect the checker's own connection.
    rig.redis = stream::connect(&server.url(), Duration::from_secs(5))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !drained(&mut rig.redis, &rig.options.names)? && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for handle in consumers {
        let _ = handle.await;
    }
    let entries: BTreeSet<String> = stream::range_all(&mut rig.redis, &rig.options.names.stream)?
        .into_iter()
        .map(|entry| entry.id)
        .collect();
    let lost = accepted.keys().filter(|id| !entries.contains(*id)).count();
    report.check(
        "accepted-entries-survive-restart",
        lost == 0,
        format!(
            "{} accepted, {lost} missing from the stream after the restart",
            accepted.len()
        ),
    );
    common_checks(&mut report, &mut rig, &accepted, None)?;
    let report = finish(rig, report, started).await;
    drop(server);
    Ok(report)
}

/// Runs a drill.
pub async fn drill(name: DrillName, options: &DrillOptions) -> Result<DrillReport, PipelineError> {
    match name {
        DrillName::Kill => kill(options).await,
        DrillName::Poison => poison(options).await,
        DrillName::DbLocked => db_locked(options).await,
        DrillName::RedisDown => redis_down(options).await,
    }
}

/// `arrival pipeline drill`: exit 0 when every check holds, 1 when one does not.
pub fn cli(args: &DrillArgs) -> Result<bool, InputError> {
    if let Some(file) = &args.junit {
        crate::harness::input::writable_file("--junit", file)?;
    }
    let mutant = args
        .mutant
        .as_deref()
        .map(|name| {
            name.parse::<Mutant>().map_err(|message| {
                InputError::invalid(Path::new("--mutant"), "command line", message)
            })
        })
        .transpose()?;
    let options = DrillOptions {
        redis_url: args.redis_url.clone(),
        requests: args.requests.max(1),
        kills: args.kills,
        consumers: args.consumers.max(1),
        count: args.count.max(1),
        seed: args.seed,
        mutant,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| InputError::invalid(Path::new("tokio"), "drill", error.to_string()))?;
    let report = runtime
        .block_on(drill(args.name, &options))
        .map_err(|error| InputError::invalid(Path::new("drill"), "pipeline", error.to_string()))?;
    if let Some(file) = &args.junit {
        crate::harness::junit::write_suite(file, &report.junit_suite())?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("json"));
    } else {
        println!(
            "drill {}{}: {} requests, answers {:?}, kills {:?}, {} consumer starts, {:.1} s",
            report.drill,
            report
                .mutant
                .as_ref()
                .map(|m| format!(" (mutant {m})"))
                .unwrap_or_default(),
            report.requests,
            report.answers,
            report.kills,
            report.consumer_starts,
            report.seconds
        );
        for check in &report.checks {
            println!(
                "  {:<5} {:<34} {}",
                if check.holds { "ok" } else { "FAIL" },
                check.name,
                check.detail
            );
        }
        println!("{}", if report.passed { "PASSED" } else { "FAILED" });
    }
    Ok(report.passed)
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
