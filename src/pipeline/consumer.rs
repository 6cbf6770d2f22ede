//! A consumer of the group: reads its own pending entries first (`0`), then takes over
//! entries idle longer than `min_idle` (`XAUTOCLAIM`), then reads new ones (`>`); decides a
//! batch in one inbox transaction and acknowledges it only after the commit; retries an
//! entry it cannot process until `max_deliveries`, then dead-letters it.
//!
//! Faults are injected through [`Faults`]: a consumer asked to die at a [`Point`] stops
//! there, exactly as a killed process would (an uncommitted transaction is rolled back, an
//! unacknowledged entry stays pending).

use super::store::{self, Item};
use super::stream::{self, Names, RawEntry};
use crate::facts::envelope::{Envelope, Source};
use crate::facts::inbox::{on_unprocessable, PoisonAction};
use crate::facts::mutants::Mutant;
use crate::facts::world::{unprocessable_reason, Decision};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where a consumer can be killed while it handles a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Point {
    /// Every entry decided, the transaction not committed: nothing is recorded.
    BeforeCommit,
    /// The transaction committed, no `XACK` sent: the entries stay pending.
    AfterCommit,
    /// Committed, and only the first half of the batch acknowledged.
    MidBatch,
}

impl Point {
    /// Every point.
    pub const ALL: [Point; 3] = [Point::BeforeCommit, Point::AfterCommit, Point::MidBatch];
}

/// Decides whether a consumer dies at a point (tests and drills inject kills here).
pub trait Faults: Send + Sync {
    /// Whether `consumer` dies at `point` while handling a batch of `batch` entries.
    fn kill_at(&self, consumer: &str, point: Point, batch: usize) -> bool;
}

/// No faults: the production consumer.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoFaults;

impl Faults for NoFaults {
    fn kill_at(&self, _: &str, _: Point, _: usize) -> bool {
        false
    }
}

/// How a consumer is set up.
#[derive(Clone, Debug)]
pub struct ConsumerOptions {
    /// Redis URL.
    pub redis_url: String,
    /// Stream and group.
    pub names: Names,
    /// This consumer's name in the group.
    pub name: String,
    /// The inbox database.
    pub db: PathBuf,
    /// Entries per batch (`COUNT`), decided in one transaction.
    pub count: usize,
    /// How long one `XREADGROUP ... >` blocks (ms).
    pub block_ms: u64,
    /// Pending entries idle longer than this may be taken over (ms).
    pub min_idle_ms: u64,
    /// How often `XAUTOCLAIM` runs (ms).
    pub claim_every_ms: u64,
    /// Deliveries before an unprocessable entry is dead-lettered.
    pub max_deliveries: u32,
    /// The SQLite busy timeout (ms).
    pub busy_timeout_ms: u64,
    /// A wrong consumer to run instead (only `ack-before-commit` and `ack-and-drop-poison`
    /// change anything here; the others change the inbox decision).
    pub mutant: Option<Mutant>,
}

/// How a batch was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadKind {
    /// Own pending entries (`0`).
    Own,
    /// Taken over (`XAUTOCLAIM`).
    Claimed,
    /// New entries (`>`).
    New,
}

/// What happened to one entry of a batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// The entry id.
    pub entry: String,
    /// The decision (none when killed before it was committed).
    pub decision: Option<Decision>,
    /// Whether it was acknowledged.
    pub acknowledged: bool,
}

/// A batch handled, or cut short by a kill.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResult {
    /// Each entry.
    pub outcomes: Vec<Outcome>,
    /// Where the consumer was killed, if it was.
    pub killed: Option<Point>,
}

/// Why a consumer could not go on (it retries; entries stay pending).
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// Redis failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The inbox database failed.
    #[error("inbox database: {0}")]
    Db(#[from] rusqlite::Error),
    /// The inbox's schema could not be brought to this build's version.
    #[error("{0}")]
    Schema(#[from] super::schema::SchemaError),
}

/// A connected consumer.
pub struct Consumer {
    options: ConsumerOptions,
    redis: redis::Connection,
    db: rusqlite::Connection,
    faults: Arc<dyn Faults>,
    own_first: bool,
    last_claim: Instant,
    cursor: String,
}

const REDIS_TIMEOUT: Duration = Duration::from_secs(5);

impl Consumer {
    /// Connects to Redis and opens the inbox; the group is created if missing. A new
    /// consumer starts with its own pending entries.
    pub fn connect(
        options: ConsumerOptions,
        faults: Arc<dyn Faults>,
    ) -> Result<Consumer, ConsumerError> {
        let mut redis = stream::connect(&options.redis_url, REDIS_TIMEOUT)?;
        stream::ensure_group(&mut redis, &options.names)?;
        let db = store::open(&options.db, options.busy_timeout_ms)?;
        Ok(Consumer {
            options,
            redis,
            db,
            faults,
            own_first: true,
            last_claim: Instant::now(),
            cursor: "0-0".into(),
        })
    }

    /// This consumer's name.
    pub fn name(&self) -> &str {
        &self.options.name
    }

    /// The next batch: own pending first, then entries to take over, then new ones
    /// (blocking up to `block_ms`). `None`: nothing to do now.
    pub fn next_batch(&mut self) -> Result<Option<(ReadKind, Vec<RawEntry>)>, ConsumerError> {
        let (names, name, count) = (&self.options.names, &self.options.name, self.options.count);
        if self.own_first {
            let own = stream::read_group(&mut self.redis, names, name, "0", count, None)?;
            if !own.is_empty() {
                return Ok(Some((ReadKind::Own, own)));
            }
            self.own_first = false;
        }
        if self.last_claim.elapsed() >= Duration::from_millis(self.options.claim_every_ms) {
            self.last_claim = Instant::now();
            let (next, claimed) = stream::autoclaim(
                &mut self.redis,
                names,
                name,
                self.options.min_idle_ms,
                &self.cursor,
                count,
            )?;
            self.cursor = next;
            if !claimed.is_empty() {
                return Ok(Some((ReadKind::Claimed, claimed)));
            }
        }
        let new = stream::read_group(
            &mut self.redis,
            names,
            name,
            ">",
            count,
            Some(self.options.block_ms),
        )?;
        Ok((!new.is_empty()).then_some((ReadKind::New, new)))
    }

    fn kill(&self, point: Point, batch: usize) -> bool {
        self.faults.kill_at(&self.options.name, point, batch)
    }

    /// Handles a batch: every valid envelope decided in ONE transaction, committed, then
    /// acknowledged; each unprocessable entry retried or dead-lettered.
    pub fn handle(&mut self, entries: &[RawEntry]) -> Result<BatchResult, ConsumerError> {
        let mut items = Vec::new();
        let mut bad = Vec::new();
        for entry in entries {
            match parse(entry) {
                Ok(item) => items.push(item),
                Err(reason) => bad.push((entry, reason)),
            }
        }
        let ids: Vec<String> = items.iter().map(|item| item.entry.clone()).collect();
        let mut outcomes: Vec<Outcome> = ids
            .iter()
            .map(|id| Outcome {
                entry: id.clone(),
                decision: None,
                acknowledged: false,
            })
            .collect();
        let names = self.options.names.clone();
        let early_ack = self.options.mutant == Some(Mutant::AckBeforeCommit);
        if early_ack {
            stream::ack(&mut self.redis, &names, &ids)?;
            outcomes.iter_mut().for_each(|o| o.acknowledged = true);
        }
        if !items.is_empty() {
            let n = items.len();
            let faults = self.faults.clone();
            let me = self.options.name.clone();
            let decided = store::decide(&mut self.db, self.options.mutant, &items)?;
            let verdicts = decided.verdicts.clone();
            if faults.kill_at(&me, Point::BeforeCommit, n) {
                drop(decided);
                return Ok(BatchResult {
                    outcomes,
                    killed: Some(Point::BeforeCommit),
                });
            }
            decided.commit()?;
            for (outcome, verdict) in outcomes.iter_mut().zip(verdicts) {
                outcome.decision = Some(Decision::Verdict(verdict));
            }
            if self.kill(Point::AfterCommit, n) {
                return Ok(BatchResult {
                    outcomes,
                    killed: Some(Point::AfterCommit),
                });
            }
            if n > 1 && self.kill(Point::MidBatch, n) {
                let half = n / 2;
                if !early_ack {
                    stream::ack(&mut self.redis, &names, &ids[..half])?;
                    outcomes[..half]
                        .iter_mut()
                        .for_each(|o| o.acknowledged = true);
                }
                return Ok(BatchResult {
                    outcomes,
                    killed: Some(Point::MidBatch),
                });
            }
            if !early_ack {
                stream::ack(&mut self.redis, &names, &ids)?;
                outcomes.iter_mut().for_each(|o| o.acknowledged = true);
            }
        }
        for (entry, reason) in bad {
            let deliveries = stream::deliveries(&mut self.redis, &names, &entry.id)?;
            let (decision, acknowledged) = if self.options.mutant == Some(Mutant::AckAndDropPoison)
            {
                stream::ack(&mut self.redis, &names, std::slice::from_ref(&entry.id))?;
                (Decision::Dropped { reason }, true)
            } else {
                // An entry deleted while pending has no body left to retry: Redis 7.0 does not
                // even count its deliveries up, so waiting for max_deliveries would hold the
                // consumer on it for ever. It goes to the dead-letter stream at once.
                let gone = entry.fields.is_none();
                let action = if gone {
                    PoisonAction::DeadLetter
                } else {
                    on_unprocessable(deliveries, self.options.max_deliveries)
                };
                match action {
                    PoisonAction::Retry => {
                        self.own_first = true;
                        (Decision::Retry { reason }, false)
                    }
                    PoisonAction::DeadLetter => {
                        stream::dead_letter(&mut self.redis, &names, entry, &reason)?;
                        (Decision::DeadLetter { reason }, true)
                    }
                }
            };
            outcomes.push(Outcome {
                entry: entry.id.clone(),
                decision: Some(decision),
                acknowledged,
            });
        }
        Ok(BatchResult {
            outcomes,
            killed: None,
        })
    }

    /// Runs until `stop` is set (the batch in hand is finished first) or a fault kills it
    /// (returns where). Errors are retried with a pause; entries stay pending meanwhile.
    pub fn run(&mut self, stop: &AtomicBool) -> Option<Point> {
        let mut pause = Duration::from_millis(50);
        while !stop.load(Ordering::SeqCst) {
            let result = self.next_batch().and_then(|batch| match batch {
                Some((_, entries)) => self.handle(&entries).map(Some),
                None => Ok(None),
            });
            match result {
                Ok(Some(BatchResult {
                    killed: Some(point),
                    ..
                })) => return Some(point),
                Ok(_) => pause = Duration::from_millis(50),
                Err(error) => {
                    eprintln!("arrival consumer {}: {error}; retrying", self.options.name);
                    self.own_first = true;
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(1));
                    if matches!(error, ConsumerError::Redis(_)) {
                        if let Ok(conn) = stream::connect(&self.options.redis_url, REDIS_TIMEOUT) {
                            self.redis = conn;
                            let _ = stream::ensure_group(&mut self.redis, &self.options.names);
                        }
                    }
                }
            }
        }
        self.leave_group_if_idle();
        None
    }

    /// On a graceful stop, removes this consumer from the group when it holds nothing
    /// pending (its name is unique to this process and will not be used again).
    fn leave_group_if_idle(&mut self) {
        let (names, name) = (&self.options.names, &self.options.name);
        if let Err(error) = stream::leave_group_if_idle(&mut self.redis, names, name) {
            eprintln!("arrival consumer {name}: could not leave the group: {error}");
        }
    }

    /// One step of a fixture's schedule: `consume` (own pending, else one new entry),
    /// `recover` (own pending only) or `claim` (the oldest entry pending in another
    /// consumer). Returns how it was read, the entry and its delivery count, before handling
    /// (so a caller can report it even if the consumer is killed).
    pub fn read_one(&mut self, mode: StepMode) -> Result<Option<OneRead>, ConsumerError> {
        let names = self.options.names.clone();
        let name = self.options.name.clone();
        let read = match mode {
            StepMode::Consume | StepMode::Recover => {
                let own = stream::read_group(&mut self.redis, &names, &name, "0", 1, None)?;
                match own.into_iter().next() {
                    Some(entry) => Some((ReadKind::Own, entry, None)),
                    None if mode == StepMode::Consume => {
                        stream::read_group(&mut self.redis, &names, &name, ">", 1, None)?
                            .into_iter()
                            .next()
                            .map(|entry| (ReadKind::New, entry, None))
                    }
                    None => None,
                }
            }
            StepMode::Claim => {
                let other = stream::pending_range(&mut self.redis, &names, "-", "+", 1000)?
                    .into_iter()
                    .find(|pending| pending.consumer != name);
                match other {
                    None => None,
                    Some(pending) => {
                        stream::autoclaim(&mut self.redis, &names, &name, 0, &pending.id, 1)?
                            .1
                            .into_iter()
                            .next()
                            .map(|entry| (ReadKind::Claimed, entry, Some(pending.consumer)))
                    }
                }
            }
        };
        match read {
            None => Ok(None),
            Some((kind, entry, from)) => {
                let deliveries = stream::deliveries(&mut self.redis, &names, &entry.id)?;
                Ok(Some(OneRead {
                    kind,
                    entry,
                    deliveries,
                    from,
                }))
            }
        }
    }
}

/// One entry read by a schedule step.
#[derive(Clone, Debug)]
pub struct OneRead {
    /// How it was read.
    pub kind: ReadKind,
    /// The entry.
    pub entry: RawEntry,
    /// Its delivery count, this delivery included.
    pub deliveries: u32,
    /// The consumer it was taken over from (claims only).
    pub from: Option<String>,
}

/// The three consumer steps of a fixture's schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepMode {
    /// Own pending first, else one new entry.
    Consume,
    /// Own pending only (after a restart).
    Recover,
    /// The oldest entry pending in another consumer.
    Claim,
}

/// A stream entry as an inbox item, or why it cannot be processed.
fn parse(entry: &RawEntry) -> Result<Item, String> {
    if entry.fields.is_none() {
        return Err("the entry was deleted from the stream while pending".into());
    }
    let body = entry.field("body").unwrap_or_default();
    let source = entry
        .field("source")
        .and_then(|name| std::str::from_utf8(name).ok())
        .and_then(Source::from_wire);
    let parsed = source.and_then(|source| Envelope::parse(body, source).ok());
    match parsed {
        Some(envelope) => Ok(Item {
            entry: entry.id.clone(),
            envelope,
            received_ms: entry
                .field("received_ms")
                .and_then(|ms| std::str::from_utf8(ms).ok())
                .and_then(|ms| ms.parse().ok()),
        }),
        None => Err(unprocessable_reason(source, &String::from_utf8_lossy(body))),
    }
}
