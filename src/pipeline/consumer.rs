//! A consumer of the group: reads its own pending entries first (`0`), then takes over
//! entries idle longer than `min_idle` (`XAUTOCLAIM`), then reads new ones (`>`); decides a
//! batch entry by entry in one inbox transaction and acknowledges the decided entries only
//! after the commit; retries an entry it cannot process (unparseable, or undecidable while
//! the inbox works) until its budget of `max_deliveries` is spent, then dead-letters it. A
//! delivery that met an infrastructure failure is noted and never counts toward a budget.
//!
//! Faults are injected through [`Faults`]: a consumer asked to die at a [`Point`] stops
//! there, exactly as a killed process would (an uncommitted transaction is rolled back, an
//! unacknowledged entry stays pending).

use super::batch::{self, Item};
use super::sql::{Db, InboxAt, SqlError};
use super::store;
use super::stream::{self, Names, RawEntry};
use crate::facts::envelope::{Envelope, Source};
use crate::facts::inbox::{on_unprocessable, PoisonAction};
use crate::facts::mutants::Mutant;
use crate::facts::world::{unprocessable_reason, Decision};
use serde::{Deserialize, Serialize};
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

/// Decides whether a consumer dies at a point, and whether an entry's decision fails
/// (tests and drills inject faults here; `serve` always runs [`NoFaults`], so no command
/// line reaches them).
pub trait Faults: Send + Sync {
    /// Whether `consumer` dies at `point` while handling a batch of `batch` entries.
    fn kill_at(&self, consumer: &str, point: Point, batch: usize) -> bool;

    /// The reason deciding `item` must fail, making it undecidable (a test names the entry,
    /// say by its event id); `None` decides it. Never a production fault.
    fn fail_decision(&self, _item: &Item) -> Option<String> {
        None
    }
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
    /// The inbox (an SQLite file or a PostgreSQL database).
    pub db: InboxAt,
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

impl Outcome {
    /// An entry not decided (yet) and not acknowledged.
    fn new(entry: &str) -> Outcome {
        Outcome {
            entry: entry.to_owned(),
            decision: None,
            acknowledged: false,
        }
    }
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
    Db(#[from] SqlError),
    /// The inbox's schema could not be brought to this build's version.
    #[error("{0}")]
    Schema(#[from] super::schema::SchemaError),
}

/// A connected consumer.
pub struct Consumer {
    options: ConsumerOptions,
    redis: redis::Connection,
    db: Db,
    faults: Arc<dyn Faults>,
    own_first: bool,
    last_claim: Instant,
    cursor: String,
    metrics: Option<Arc<super::metrics::Metrics>>,
}

const REDIS_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a batch refused as a race (PostgreSQL's serialization failure) is decided
/// again at once before the consumer backs off with the entries pending.
const SERIAL_ATTEMPTS: u32 = 8;

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
            metrics: None,
        })
    }

    /// Counts this consumer's batches and commit times in `metrics` (`serve` does).
    pub fn with_metrics(mut self, metrics: Option<Arc<super::metrics::Metrics>>) -> Consumer {
        self.metrics = metrics;
        self
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

    /// Handles a batch. The entries that parse are decided in ONE transaction, each under
    /// its own savepoint ([`batch::decide`]), committed, and then the decided ones are
    /// acknowledged. An entry that does not parse, or whose decision failed, is judged by
    /// its budget (see `judge`): retried, or dead-lettered and acknowledged. If the
    /// inbox fails, nothing is kept or acknowledged, this delivery of every entry of the
    /// batch is noted as an infrastructure failure (it never counts toward a budget), and the
    /// error is returned for the caller to back off.
    pub fn handle(&mut self, entries: &[RawEntry]) -> Result<BatchResult, ConsumerError> {
        let (raws, mut items, unparseable) = split(entries, &self.options.name);
        self.note_deliveries(&mut items)?;
        let mut batch = BatchResult {
            outcomes: items.iter().map(|item| Outcome::new(&item.entry)).collect(),
            killed: None,
        };
        let early_ack = self.options.mutant == Some(Mutant::AckBeforeCommit);
        if early_ack {
            let ids: Vec<String> = items.iter().map(|item| item.entry.clone()).collect();
            stream::ack(&mut self.redis, &self.options.names, &ids)?;
            batch
                .outcomes
                .iter_mut()
                .for_each(|o| o.acknowledged = true);
        }
        let mut failures = Vec::new();
        if !items.is_empty() {
            failures = match self.commit_items(&raws, &items, &mut batch) {
                Ok(failures) => failures,
                Err(error) => {
                    if let Some(metrics) = &self.metrics {
                        metrics.batch(None);
                    }
                    self.note_infrastructure(entries);
                    return Err(error);
                }
            };
            if batch.killed.is_none() {
                self.ack_decided(&items, &failures, &mut batch, early_ack)?;
            }
            if batch.killed.is_some() {
                return Ok(batch);
            }
        }
        failures.extend(unparseable);
        for failure in &failures {
            let (decision, acknowledged) = self.judge(failure)?;
            let acked_early = failure
                .index
                .is_some_and(|index| batch.outcomes[index].acknowledged);
            let outcome = Outcome {
                entry: failure.entry.id.clone(),
                decision: Some(decision),
                acknowledged: acknowledged || acked_early,
            };
            match failure.index {
                Some(index) => batch.outcomes[index] = outcome,
                None => batch.outcomes.push(outcome),
            }
        }
        Ok(batch)
    }

    /// Notes on each item the delivery count Redis keeps for it (one `XPENDING` over the
    /// batch's range, this consumer's entries only), for its verdict row.
    fn note_deliveries(&mut self, items: &mut [Item]) -> Result<(), ConsumerError> {
        let (Some(first), Some(last)) = (items.first(), items.last()) else {
            return Ok(());
        };
        let (start, end) = match stream::id_order(&first.entry, &last.entry) {
            std::cmp::Ordering::Greater => (last.entry.clone(), first.entry.clone()),
            _ => (first.entry.clone(), last.entry.clone()),
        };
        let pending = stream::pending_of(
            &mut self.redis,
            &self.options.names,
            &start,
            &end,
            items.len() + 64,
            Some(&self.options.name),
        )?;
        for item in items.iter_mut() {
            item.deliveries = pending
                .iter()
                .find(|entry| entry.id == item.entry)
                .map(|entry| entry.deliveries);
        }
        Ok(())
    }

    /// Decides the parsed items in one transaction and commits it (unless a fault kills the
    /// consumer first); the items found undecidable come back as failures to judge.
    fn commit_items<'e>(
        &mut self,
        raws: &[&'e RawEntry],
        items: &[Item],
        batch: &mut BatchResult,
    ) -> Result<Vec<Failure<'e>>, ConsumerError> {
        let n = items.len();
        let faults = self.faults.clone();
        let me = self.options.name.clone();
        let fail = |item: &Item| faults.fail_decision(item);
        let started = Instant::now();
        let mut attempt = 1;
        let decided = loop {
            // On PostgreSQL a transaction that raced another consumer's on the same
            // identity is refused (serialization failure) and is decided again from the
            // start, reading what the winner committed.
            match batch::decide(&self.db, self.options.mutant, items, &fail) {
                Err(error) if error.is_retryable() && attempt < SERIAL_ATTEMPTS => attempt += 1,
                decided => break decided?,
            }
        };
        let results = decided.outcomes.clone();
        if faults.kill_at(&me, Point::BeforeCommit, n) {
            drop(decided);
            batch.killed = Some(Point::BeforeCommit);
            return Ok(Vec::new());
        }
        if let Err(error) = decided.commit() {
            // A commit refused as a race loses nothing: the entries stay pending and
            // unacknowledged, and the next read decides them again.
            return Err(error.into());
        }
        if let Some(metrics) = &self.metrics {
            metrics.batch(Some(started.elapsed()));
        }
        let mut failures = Vec::new();
        for (index, result) in results.into_iter().enumerate() {
            match result {
                Ok(verdict) => batch.outcomes[index].decision = Some(Decision::Verdict(verdict)),
                Err(reason) => failures.push(Failure::undecidable(
                    raws[index],
                    index,
                    &items[index],
                    reason,
                )),
            }
        }
        if self.kill(Point::AfterCommit, n) {
            batch.killed = Some(Point::AfterCommit);
        }
        Ok(failures)
    }

    /// Acknowledges the decided items (all of them, or half when a fault kills the consumer
    /// mid-batch); the undecidable ones stay pending to be judged.
    fn ack_decided(
        &mut self,
        items: &[Item],
        failures: &[Failure<'_>],
        batch: &mut BatchResult,
        early_ack: bool,
    ) -> Result<(), ConsumerError> {
        let decided: Vec<usize> = (0..items.len())
            .filter(|index| failures.iter().all(|f| f.index != Some(*index)))
            .collect();
        let mut upto = decided.len();
        if items.len() > 1 && self.kill(Point::MidBatch, items.len()) {
            batch.killed = Some(Point::MidBatch);
            upto = decided.len() / 2;
        }
        if !early_ack {
            let ids: Vec<String> = decided[..upto]
                .iter()
                .map(|&i| items[i].entry.clone())
                .collect();
            stream::ack(&mut self.redis, &self.options.names, &ids)?;
            for &index in &decided[..upto] {
                batch.outcomes[index].acknowledged = true;
            }
        }
        Ok(())
    }

    /// Judges an entry that could not be processed by its budget: its deliveries as Redis
    /// counts them, less those that met an infrastructure failure
    /// ([`stream::infrastructure_deliveries`]), against `max_deliveries`
    /// ([`on_unprocessable`]). Under budget it stays pending and is read again; at the budget
    /// it is dead-lettered with its count, category, error and identity, and only then
    /// acknowledged. Returns the decision and whether the entry was acknowledged.
    fn judge(&mut self, failure: &Failure<'_>) -> Result<(Decision, bool), ConsumerError> {
        let names = self.options.names.clone();
        let id = &failure.entry.id;
        let reason = failure.reason.clone();
        if self.options.mutant == Some(Mutant::AckAndDropPoison) {
            stream::ack(&mut self.redis, &names, std::slice::from_ref(id))?;
            return Ok((Decision::Dropped { reason }, true));
        }
        let redis_deliveries = stream::deliveries(&mut self.redis, &names, id)?;
        let infra = stream::infrastructure_deliveries(&mut self.redis, &names, id)?;
        let counted = redis_deliveries.saturating_sub(infra);
        // An entry deleted while pending has no body left to retry: Redis 7.0 does not even
        // count its deliveries up, so waiting for max_deliveries would hold the consumer on
        // it for ever. It goes to the dead-letter stream at once.
        let action = if failure.entry.fields.is_none() {
            PoisonAction::DeadLetter
        } else {
            on_unprocessable(counted, self.options.max_deliveries)
        };
        eprintln!(
            "arrival consumer {}: entry {id}{} is {} (delivery {counted} of {}): {reason}",
            self.options.name,
            failure.identity_text(),
            failure.category.as_str(),
            self.options.max_deliveries
        );
        match action {
            PoisonAction::Retry => {
                self.own_first = true;
                let category = failure.category;
                Ok((Decision::Retry { category, reason }, false))
            }
            PoisonAction::DeadLetter => {
                let letter = stream::DeadLetter {
                    category: failure.category.as_str(),
                    deliveries: counted,
                    redis_deliveries,
                    reason: reason.clone(),
                    identity: failure.identity.clone(),
                };
                stream::dead_letter(&mut self.redis, &names, failure.entry, &letter)?;
                let category = failure.category;
                Ok((Decision::DeadLetter { category, reason }, true))
            }
        }
    }

    /// Notes this delivery of every entry of the batch as met by an infrastructure failure.
    /// If Redis cannot take the note either, the delivery counts: an undecidable entry may
    /// then be dead-lettered a delivery early, never held for ever.
    fn note_infrastructure(&mut self, entries: &[RawEntry]) {
        let ids: Vec<String> = entries.iter().map(|entry| entry.id.clone()).collect();
        if let Err(error) = stream::note_infrastructure(&mut self.redis, &self.options.names, &ids)
        {
            eprintln!(
                "arrival consumer {}: could not note an infrastructure failure: {error}",
                self.options.name
            );
        }
    }

    /// Runs until `stop` is set (the batch in hand is finished first) or a fault kills it
    /// (returns where). Errors are retried with a pause; entries stay pending meanwhile.
    pub fn run(&mut self, stop: &AtomicBool) -> Option<Point> {
        let mut pause = Duration::from_millis(50);
        while !stop.load(Ordering::SeqCst) {
            let result = self.next_batch().and_then(|batch| match batch {
                Some((kind, entries)) => {
                    let handled = self.handle(&entries)?;
                    self.log_batch(kind, &handled);
                    Ok(Some(handled))
                }
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
                    if self.db.is_broken() {
                        if let Ok(db) = store::open(&self.options.db, self.options.busy_timeout_ms)
                        {
                            self.db = db;
                        }
                    }
                }
            }
        }
        self.leave_group_if_idle();
        None
    }

    /// One log line per batch: how it was read, its entries, and how many were decided,
    /// acknowledged, left to retry and dead-lettered (entry ids, never bodies).
    fn log_batch(&self, kind: ReadKind, batch: &BatchResult) {
        let count = |test: fn(&Outcome) -> bool| batch.outcomes.iter().filter(|o| test(o)).count();
        tracing::info!(
            target: "arrival::consumer",
            consumer = %self.options.name,
            read = ?kind,
            entries = batch.outcomes.len(),
            decided = count(|o| matches!(o.decision, Some(Decision::Verdict(_)))),
            acknowledged = count(|o| o.acknowledged),
            retried = count(|o| matches!(o.decision, Some(Decision::Retry { .. }))),
            dead_lettered = count(|o| matches!(o.decision, Some(Decision::DeadLetter { .. }))),
            first = %batch.outcomes.first().map_or("", |o| o.entry.as_str()),
            last = %batch.outcomes.last().map_or("", |o| o.entry.as_str()),
            killed = ?batch.killed,
            "batch"
        );
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

/// The error category a dead letter carries (the pure rule's).
pub use crate::facts::inbox::PoisonCategory as Category;

/// An entry of a batch that could not be processed, waiting to be judged.
struct Failure<'e> {
    entry: &'e RawEntry,
    /// Its place among the batch's parsed items (`None`: it did not parse).
    index: Option<usize>,
    category: Category,
    reason: String,
    /// `(tenant_id, event_id)` when it parsed.
    identity: Option<(String, String)>,
}

impl<'e> Failure<'e> {
    fn unparseable(entry: &'e RawEntry, reason: String) -> Failure<'e> {
        Failure {
            entry,
            index: None,
            category: Category::Unparseable,
            reason,
            identity: None,
        }
    }

    fn undecidable(entry: &'e RawEntry, index: usize, item: &Item, reason: String) -> Failure<'e> {
        Failure {
            entry,
            index: Some(index),
            category: Category::Undecidable,
            reason,
            identity: Some((
                item.envelope.tenant_id().to_owned(),
                item.envelope.event_id().to_owned(),
            )),
        }
    }

    fn identity_text(&self) -> String {
        let source = self.entry.field("source").map(String::from_utf8_lossy);
        match (&self.identity, source) {
            (Some((tenant, event)), Some(source)) => format!(" ({tenant}, {source}, {event})"),
            _ => String::new(),
        }
    }
}

/// A batch split into the parsed items (with their raw entries, in the same order) and the
/// entries that do not parse.
fn split<'e>(
    entries: &'e [RawEntry],
    consumer: &str,
) -> (Vec<&'e RawEntry>, Vec<Item>, Vec<Failure<'e>>) {
    let (mut raws, mut items, mut unparseable) = (Vec::new(), Vec::new(), Vec::new());
    for entry in entries {
        match parse(entry, consumer) {
            Ok(item) => {
                raws.push(entry);
                items.push(item);
            }
            Err(reason) => unparseable.push(Failure::unparseable(entry, reason)),
        }
    }
    (raws, items, unparseable)
}

/// A stream entry as an inbox item read by `consumer`, or why it cannot be processed. Only
/// `source` and `body` are read: the ids ingress writes beside them are for people and
/// `pipeline explain`, and entries from before they were written parse the same.
fn parse(entry: &RawEntry, consumer: &str) -> Result<Item, String> {
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
            consumer: Some(consumer.to_owned()),
            deliveries: None,
        }),
        None => Err(unprocessable_reason(source, &String::from_utf8_lossy(body))),
    }
}
