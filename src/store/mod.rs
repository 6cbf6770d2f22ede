//! The durable card receiver: the pure decision function of [`crate::card::receiver`]
//! wrapped in database transactions, on SQLite (embedded) or PostgreSQL (several receiver
//! processes).
//!
//! One delivery is one transaction: the store loads exactly what the decision reads (the
//! event id's records or the delivery's anonymous record, the cards they name, the holds of
//! the waiting records among them), builds a [`Receiver`] from those parts, runs the real
//! [`Receiver::deliver`] on it, writes back what changed (cards, counters, records, holds,
//! audit) and commits. The acknowledgement is handed out only after the commit returns.
//! A reconciliation is one transaction the same way. The database keeps canonical texts
//! (names, state JSON, envelope JSON); interned ids live only inside one transaction.
//! `docs/store.md` is the contract in prose.

pub mod db;
pub mod drill;
pub mod input;
pub mod mutants;

pub use mutants::StoreMutant;

use crate::card::fixture::Replacements;
use crate::card::policy::Spec;
use crate::card::receiver::{
    Card, Decision, Delivered, HoldKey, Identity, Outcome, Receiver, Record, Settlement, Standing,
    Verdict,
};
use crate::card::replay::{CardReport, UnresolvedReport};
use crate::card::wire::{Catalog, Snapshot, Sym};
pub use db::{Database, DbError, DbUrl, Isolation, Param, Val};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// One delivery as the store takes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Incoming {
    /// The delivery number (the identity of an input without an event id).
    pub delivery: u32,
    /// When it was received, Unix seconds, if known.
    pub received_at: Option<i64>,
    /// The raw envelope.
    pub event: Value,
}

/// The acknowledgement of one delivery, given after its transaction committed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acknowledgement {
    /// The delivery number.
    pub delivery: u32,
    /// The event id, when it is a string.
    pub event_id: Option<String>,
    /// The decision, or `duplicate`.
    pub decision: String,
    /// `applied`, `ignored` or `held`.
    pub ack: String,
    /// For a duplicate: the recorded decision it matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_decision: Option<String>,
    /// For a rejected delivery: why the store cannot keep it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Acknowledgement {
    /// The answer to a delivery the store refuses before deciding it: `rejected`, with the
    /// reason; nothing of it is recorded.
    pub fn rejected(incoming: &Incoming, reason: String) -> Acknowledgement {
        Acknowledgement {
            delivery: incoming.delivery,
            event_id: incoming
                .event
                .get("event_id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            decision: REJECTED.into(),
            ack: REJECTED.into(),
            original_decision: None,
            reason: Some(reason),
        }
    }

    /// Whether the store refused the delivery (and kept nothing of it).
    pub fn is_rejected(&self) -> bool {
        self.ack == REJECTED
    }
}

/// The `ack` and `decision` of a delivery the store refuses.
pub const REJECTED: &str = "rejected";

/// The longest event id or card id the store keeps, in UTF-8 bytes. PostgreSQL refuses an
/// index row over about 2.7 KB (after compression), and both ids are index keys; SQLite
/// has no such limit, but both backends answer alike.
pub const MAX_ID_BYTES: usize = 1024;

/// Why the store cannot keep this name as an event id or card id, if it cannot: a NUL
/// character (PostgreSQL's text cannot hold one) or more than [`MAX_ID_BYTES`].
pub fn unkeepable_name(name: &str) -> Option<String> {
    if name.contains('\0') {
        return Some("contains a NUL character".into());
    }
    if name.len() > MAX_ID_BYTES {
        return Some(format!(
            "is {} bytes long, more than the {MAX_ID_BYTES} the store keeps",
            name.len()
        ));
    }
    None
}

/// Why the store cannot keep this envelope, if it cannot: its `event_id` or `object_id`
/// (when a string: otherwise the decision holds it as malformed) is a name the store
/// cannot keep. The check reads the raw envelope only, before any database access, so
/// both backends give the same answer.
pub fn unkeepable(event: &Value) -> Option<String> {
    ["event_id", "object_id"].into_iter().find_map(|key| {
        let name = event.get(key)?.as_str()?;
        unkeepable_name(name).map(|why| format!("`{key}` {why}"))
    })
}

/// An authority snapshot as the store takes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuthoritySnapshot {
    /// The card.
    pub object_id: String,
    /// The authoritative version.
    pub version: u64,
    /// The authoritative state (a JSON object).
    pub state: Value,
}

/// What one reconciliation did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileReport {
    /// The card.
    pub object_id: String,
    /// created / refused_behind / confirmed / replaced.
    pub outcome: String,
    /// Inputs re-evaluated, with their new decision.
    pub re_evaluated: Vec<(String, String)>,
    /// Conflicts resolved.
    pub resolved: Vec<String>,
    /// Unevaluable inputs superseded.
    pub superseded: Vec<String>,
}

/// The store's state as `replay` reports a final state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoreReport {
    /// `sqlite` or `postgres`.
    pub backend: String,
    /// The cards.
    #[serde(rename = "final")]
    pub final_cards: BTreeMap<String, CardReport>,
    /// Paused cards.
    pub paused: Vec<String>,
    /// Waiting inputs, in arrival order.
    pub held: Vec<String>,
    /// Replacement counters, summed over the cards.
    pub replacements: Replacements,
    /// Unresolved inputs, sorted.
    pub unresolved: Vec<String>,
    /// Why each is unresolved.
    pub unresolved_detail: Vec<UnresolvedReport>,
}

/// A store failure: the database's error, or a stored row the store cannot read.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed.
    #[error("{0}")]
    Db(#[from] DbError),
    /// A stored row makes no sense to this store.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// A card id in the initial cards or an authority snapshot that the store cannot keep
    /// ([`unkeepable_name`]); nothing was written.
    #[error("card id {0}")]
    Unkeepable(String),
}

fn keepable_card(name: &str) -> Result<(), StoreError> {
    match unkeepable_name(name) {
        None => Ok(()),
        Some(why) => {
            let mut shown: String = name.chars().take(40).collect();
            if shown.len() < name.len() {
                shown += "...";
            }
            Err(StoreError::Unkeepable(format!("{shown:?} {why}")))
        }
    }
}

fn corrupt(what: impl Into<String>) -> DbError {
    DbError {
        message: format!("corrupt store: {}", what.into()),
        retry: false,
    }
}

/// The sha-256 of a canonical text, hex: the unique key of an envelope under its event id.
pub fn content_hash(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

fn int(value: i64) -> Param {
    Param::Int(Some(value))
}

fn text(value: impl Into<String>) -> Param {
    Param::Text(Some(value.into()))
}

fn opt_text(value: Option<impl Into<String>>) -> Param {
    Param::Text(value.map(Into::into))
}

/// Versions are u64; the column is a signed 64-bit integer holding the same bits.
fn version_param(version: u64) -> Param {
    int(version as i64)
}

fn version_of(value: &Val) -> Result<u64, DbError> {
    value
        .int()
        .map(|bits| bits as u64)
        .ok_or_else(|| corrupt("a version is not an integer"))
}

fn text_of(value: &Val) -> Result<&str, DbError> {
    value
        .text()
        .ok_or_else(|| corrupt("a text column is not a text"))
}

/// The name of a standing in the database.
pub fn standing_name(standing: Standing) -> &'static str {
    match standing {
        Standing::Settled => "settled",
        Standing::Held => "held",
        Standing::Resolved => "resolved",
        Standing::Superseded => "superseded",
    }
}

fn standing_of(name: &str) -> Result<Standing, DbError> {
    Ok(match name {
        "settled" => Standing::Settled,
        "held" => Standing::Held,
        "resolved" => Standing::Resolved,
        "superseded" => Standing::Superseded,
        other => return Err(corrupt(format!("unknown standing `{other}`"))),
    })
}

/// The decision with this report name.
pub fn decision_of(name: &str) -> Option<Decision> {
    Decision::ALL
        .into_iter()
        .find(|decision| decision.name() == name)
}

fn parse_json(text: &str) -> Result<Value, DbError> {
    serde_json::from_str(text).map_err(|error| corrupt(format!("stored JSON: {error}")))
}

/// One audit row, as written.
#[derive(Clone, Debug, Default)]
struct AuditRow {
    entry: &'static str,
    subject: String,
    delivery: Option<u32>,
    event_id: Option<String>,
    content_hash: Option<String>,
    card_id: Option<String>,
    decision: Option<String>,
    previous: Option<String>,
    version: Option<u64>,
    state: Option<String>,
}

/// What one transaction loaded: the parts of the receiver state its decision reads.
#[derive(Default)]
pub(crate) struct Partial {
    catalog: Catalog,
    cards: BTreeMap<Sym, Card>,
    missing_cards: BTreeSet<Sym>,
    counters: BTreeMap<Sym, (i64, i64)>,
    identities: BTreeMap<Sym, Identity>,
    anonymous: BTreeMap<u32, Record>,
    /// Hold rows by bucket, each by sequence number (arrival order).
    holds: BTreeMap<Option<Sym>, BTreeMap<i64, HoldKey>>,
    loaded_buckets: BTreeSet<Option<Sym>>,
}

impl Partial {
    fn receiver(&self) -> Receiver {
        Receiver::from_parts(
            self.cards.iter().map(|(&id, &card)| (id, card)).collect(),
            self.identities
                .iter()
                .map(|(&id, identity)| (id, identity.clone()))
                .collect(),
            self.anonymous.clone(),
            self.holds
                .iter()
                .filter(|(_, keys)| !keys.is_empty())
                .map(|(&bucket, keys)| (bucket, keys.values().copied().collect()))
                .collect(),
        )
    }

    fn ensure_card(&mut self, db: &mut dyn Database, card: Sym) -> Result<(), DbError> {
        if self.cards.contains_key(&card) || self.missing_cards.contains(&card) {
            return Ok(());
        }
        let name = self.catalog.name(card).to_owned();
        let rows = db.query(
            "SELECT c.version, c.state, c.paused, n.event_replacements, n.authority_replacements \
             FROM cards c LEFT JOIN counters n ON n.card_id = c.card_id WHERE c.card_id = $1",
            &[text(&name)],
        )?;
        let Some(row) = rows.first() else {
            self.missing_cards.insert(card);
            return Ok(());
        };
        let state = self.catalog.state(&parse_json(text_of(&row[1])?)?);
        let mut known = Card::new(version_of(&row[0])?, state);
        known.paused = row[2].int() == Some(1);
        self.cards.insert(card, known);
        self.counters
            .insert(card, (row[3].int().unwrap_or(0), row[4].int().unwrap_or(0)));
        Ok(())
    }

    fn record_of(&mut self, row: &[Val]) -> Result<Record, DbError> {
        // row: content, decision, standing, recorded_at
        let event = self.catalog.event(&parse_json(text_of(&row[0])?)?);
        let decision = text_of(&row[1])?;
        Ok(Record {
            event,
            decision: decision_of(decision)
                .ok_or_else(|| corrupt(format!("unknown decision `{decision}`")))?,
            standing: standing_of(text_of(&row[2])?)?,
            recorded_at: row[3].int(),
        })
    }

    fn file_hold(&mut self, bucket: Option<&str>, seq: i64, key: HoldKey) {
        let bucket = bucket.map(|name| self.catalog.sym(name));
        self.holds.entry(bucket).or_default().insert(seq, key);
    }

    /// Loads an event id's records and the holds of its waiting ones.
    fn ensure_identity(&mut self, db: &mut dyn Database, id: Sym) -> Result<(), DbError> {
        if self.identities.contains_key(&id) {
            return Ok(());
        }
        let name = self.catalog.name(id).to_owned();
        let rows = db.query(
            "SELECT content, decision, standing, recorded_at, idx FROM records \
             WHERE event_id = $1 ORDER BY idx",
            &[text(&name)],
        )?;
        if rows.is_empty() {
            return Ok(());
        }
        let mut records = Vec::with_capacity(rows.len());
        for (position, row) in rows.iter().enumerate() {
            if row[4].int() != Some(position as i64) {
                return Err(corrupt(format!("records of {name} are not numbered 0..")));
            }
            records.push(self.record_of(row)?);
        }
        let first = records.remove(0);
        let waiting = std::iter::once(&first)
            .chain(records.iter())
            .any(|record| record.standing == Standing::Held);
        self.identities.insert(
            id,
            Identity {
                first,
                variants: records,
            },
        );
        if waiting {
            let holds = db.query(
                "SELECT seq, card_id, idx FROM holds WHERE event_id = $1",
                &[text(&name)],
            )?;
            for hold in holds {
                let seq = hold[0].int().ok_or_else(|| corrupt("hold seq"))?;
                let index = hold[2].int().ok_or_else(|| corrupt("hold idx"))? as u32;
                self.file_hold(hold[1].text(), seq, HoldKey::Record { event: id, index });
            }
        }
        Ok(())
    }

    /// Loads the record of an input without an event id, and its hold.
    fn ensure_anonymous(&mut self, db: &mut dyn Database, delivery: u32) -> Result<(), DbError> {
        if self.anonymous.contains_key(&delivery) {
            return Ok(());
        }
        let rows = db.query(
            "SELECT content, decision, standing, recorded_at FROM anonymous WHERE delivery = $1",
            &[int(delivery.into())],
        )?;
        let Some(row) = rows.first() else {
            return Ok(());
        };
        let record = self.record_of(row)?;
        let waiting = record.standing == Standing::Held;
        self.anonymous.insert(delivery, record);
        if waiting {
            let holds = db.query(
                "SELECT seq, card_id FROM holds WHERE delivery = $1",
                &[int(delivery.into())],
            )?;
            for hold in holds {
                let seq = hold[0].int().ok_or_else(|| corrupt("hold seq"))?;
                self.file_hold(hold[1].text(), seq, HoldKey::Delivery(delivery));
            }
        }
        Ok(())
    }

    /// Loads every hold filed under a card, and the records they refer to.
    fn ensure_bucket(&mut self, db: &mut dyn Database, card: Sym) -> Result<(), DbError> {
        if !self.loaded_buckets.insert(Some(card)) {
            return Ok(());
        }
        let name = self.catalog.name(card).to_owned();
        let rows = db.query(
            "SELECT seq, event_id, idx, delivery FROM holds WHERE card_id = $1 ORDER BY seq",
            &[text(&name)],
        )?;
        for row in rows {
            match (row[1].text(), row[3].int()) {
                (Some(event), _) => {
                    let id = self.catalog.sym(event);
                    self.ensure_identity(db, id)?;
                }
                (None, Some(delivery)) => self.ensure_anonymous(db, delivery as u32)?,
                (None, None) => return Err(corrupt("a hold refers to nothing")),
            }
        }
        Ok(())
    }
}

/// The durable receiver: one database connection and the decision function around it.
pub struct Store {
    db: Box<dyn Database>,
    /// Transactions retried so far (serialization failures, deadlocks, busy database).
    pub retries: u64,
}

/// The tables, in the order they are dropped.
const TABLES: [&str; 7] = [
    "audit",
    "holds",
    "anonymous",
    "records",
    "counters",
    "cards",
    "schema_migrations",
];

impl Store {
    /// Connects to the database (no schema change).
    pub fn open(url: &DbUrl) -> Result<Store, StoreError> {
        Ok(Store {
            db: db::connect(url)?,
            retries: 0,
        })
    }

    /// The connection, for checks that read tables directly.
    pub fn database(&mut self) -> &mut dyn Database {
        &mut *self.db
    }

    /// Applies every migration not applied yet, in order; the schema version after.
    ///
    /// The whole of it, `schema_migrations` included, is one transaction that first takes
    /// the schema lock ([`Database::begin_schema`]: SQLite's write lock, a PostgreSQL
    /// advisory lock), so receivers starting together on a fresh database take turns: the
    /// first creates the schema, the others find it. A failure the database says to retry
    /// is retried from the start.
    pub fn migrate(&mut self) -> Result<i64, StoreError> {
        self.retrying(|db| {
            db.begin_schema()?;
            db.batch(
                "CREATE TABLE IF NOT EXISTS schema_migrations \
                 (version BIGINT PRIMARY KEY, name TEXT NOT NULL)",
            )?;
            let applied: BTreeSet<i64> = db
                .query("SELECT version FROM schema_migrations", &[])?
                .iter()
                .filter_map(|row| row[0].int())
                .collect();
            let mut current = applied.iter().copied().max().unwrap_or(0);
            for migration in db.migrations() {
                if applied.contains(&migration.version) {
                    continue;
                }
                db.batch(migration.sql)?;
                db.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    &[int(migration.version), text(migration.name)],
                )?;
                current = current.max(migration.version);
            }
            db.commit()?;
            Ok(current)
        })
    }

    /// Drops every table of the store (a drill's fresh start), then migrates.
    pub fn reset(&mut self) -> Result<(), StoreError> {
        self.retrying(|db| {
            db.begin_schema()?;
            for table in TABLES {
                db.batch(&format!("DROP TABLE IF EXISTS {table}"))?;
            }
            db.commit()
        })?;
        self.migrate()?;
        Ok(())
    }

    /// Adds the initial cards that are not there yet (one transaction).
    pub fn seed(&mut self, cards: &[(String, u64, Value)]) -> Result<usize, StoreError> {
        for (name, _, _) in cards {
            keepable_card(name)?;
        }
        self.transaction(Isolation::Serial, |db| {
            let mut added = 0;
            for (name, version, state) in cards {
                added += db.execute(
                    "INSERT INTO cards (card_id, version, state, paused) VALUES ($1, $2, $3, 0) \
                     ON CONFLICT (card_id) DO NOTHING",
                    &[text(name), version_param(*version), text(state.to_string())],
                )?;
                db.execute(
                    "INSERT INTO counters (card_id, event_replacements, authority_replacements) \
                     VALUES ($1, 0, 0) ON CONFLICT (card_id) DO NOTHING",
                    &[text(name)],
                )?;
            }
            Ok(added as usize)
        })
    }

    /// Runs `body` in one transaction, retrying it from the start when the database
    /// asks for that.
    fn transaction<T>(
        &mut self,
        isolation: Isolation,
        mut body: impl FnMut(&mut dyn Database) -> Result<T, DbError>,
    ) -> Result<T, StoreError> {
        self.retrying(|db| {
            db.begin(isolation)?;
            let value = body(db)?;
            db.commit()?;
            Ok(value)
        })
    }

    /// Runs `attempt`, which opens and commits its own transactions, and runs it again from
    /// the start (after a rollback and a jittered pause) when it fails with an error the
    /// database says to retry.
    pub(crate) fn retrying<T>(
        &mut self,
        mut attempt: impl FnMut(&mut dyn Database) -> Result<T, DbError>,
    ) -> Result<T, StoreError> {
        let mut tries = 0u32;
        loop {
            let db = &mut *self.db;
            match attempt(db) {
                Ok(value) => return Ok(value),
                Err(error) => {
                    db.rollback();
                    if !error.retry || tries > 10_000 {
                        return Err(error.into());
                    }
                    tries += 1;
                    self.retries += 1;
                    backoff(tries);
                }
            }
        }
    }

    /// Decides one delivery in one transaction; `on_ack` gets the acknowledgement after
    /// the commit.
    pub fn deliver(
        &mut self,
        incoming: &Incoming,
        on_ack: &mut dyn FnMut(&Acknowledgement),
    ) -> Result<Acknowledgement, StoreError> {
        self.deliver_batch(std::slice::from_ref(incoming), on_ack)
            .map(|mut acks| acks.remove(0))
    }

    /// Decides several deliveries in one transaction, in order (each sees the ones
    /// before it); `on_ack` gets every acknowledgement after the commit. A delivery the
    /// store cannot keep ([`unkeepable`]) is answered `rejected` in its place, and the
    /// others go on.
    pub fn deliver_batch(
        &mut self,
        incoming: &[Incoming],
        on_ack: &mut dyn FnMut(&Acknowledgement),
    ) -> Result<Vec<Acknowledgement>, StoreError> {
        let acks: Vec<Acknowledgement> = self.transaction(Isolation::Serial, |db| {
            incoming.iter().map(|one| deliver_in(db, one)).collect()
        })?;
        acks.iter().for_each(on_ack);
        Ok(acks)
    }

    /// Reconciles one card from its authority snapshot, in one transaction, if the default
    /// order would: on the `first` pass when the card is paused or unknown; on a later
    /// pass when it is paused and the snapshot is not behind it. `None`: nothing to do.
    pub fn reconcile(
        &mut self,
        snapshot: &AuthoritySnapshot,
        first: bool,
    ) -> Result<Option<ReconcileReport>, StoreError> {
        keepable_card(&snapshot.object_id)?;
        self.transaction(Isolation::Serial, |db| reconcile_in(db, snapshot, first))
    }

    /// The default order's reconciliation: a first pass over the snapshots, then passes
    /// over the cards still paused until one finds none. Each reconciliation is its own
    /// transaction.
    pub fn reconcile_all(
        &mut self,
        snapshots: &[AuthoritySnapshot],
    ) -> Result<Vec<ReconcileReport>, StoreError> {
        // Every card id is checked before the first transaction: nothing is written when
        // one of them cannot be kept.
        for snapshot in snapshots {
            keepable_card(&snapshot.object_id)?;
        }
        let mut done = Vec::new();
        for snapshot in snapshots {
            done.extend(self.reconcile(snapshot, true)?);
        }
        // Each further pass re-evaluates at least one held input (a re-evaluation that
        // pauses the card again consumes the hold it settled), so the passes end once the
        // holds run out; the guard only stops a broken receiver from looping for ever.
        for _ in 0..1_000_000 {
            let mut any = false;
            for snapshot in snapshots {
                if let Some(report) = self.reconcile(snapshot, false)? {
                    done.push(report);
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        Ok(done)
    }

    /// Loads the whole receiver state (for `show` and the drills' checks), with its
    /// catalog, the replacement counters and the holds in global arrival order.
    pub fn load_all(&mut self) -> Result<Loaded, StoreError> {
        self.transaction(Isolation::Serial, load_all_in)
    }

    /// The store's state in the shape of replay's final report.
    pub fn report(&mut self) -> Result<StoreReport, StoreError> {
        let backend = self.db.backend().to_owned();
        let loaded = self.load_all()?;
        Ok(loaded.report(&backend))
    }
}

/// The whole receiver state as loaded from a store.
pub struct Loaded {
    /// The names, states and envelopes interned while loading.
    pub catalog: Catalog,
    /// The receiver.
    pub receiver: Receiver,
    /// Replacement counters by card name: (event, authority).
    pub counters: BTreeMap<String, (i64, i64)>,
    /// Every hold in global arrival order.
    pub held: Vec<HoldKey>,
}

impl Loaded {
    /// The name of an input.
    pub fn input_name(&self, key: HoldKey) -> String {
        match key {
            HoldKey::Record { event, .. } => self.catalog.name(event).to_owned(),
            HoldKey::Delivery(number) => format!("delivery-{number}"),
        }
    }

    /// The state in the shape of replay's final report.
    pub fn report(&self, backend: &str) -> StoreReport {
        let catalog = &self.catalog;
        let receiver = &self.receiver;
        let final_cards = receiver
            .cards()
            .iter()
            .map(|(&id, card)| {
                let report = CardReport {
                    version: card.version,
                    state: catalog.state_value(card.state).clone(),
                };
                (catalog.name(id).to_owned(), report)
            })
            .collect();
        let mut paused: Vec<String> = receiver
            .paused()
            .map(|card| catalog.name(card).to_owned())
            .collect();
        paused.sort();
        let mut unresolved: Vec<String> = receiver
            .unresolved()
            .into_iter()
            .map(|input| match input {
                crate::card::receiver::InputRef::Event(id) => catalog.name(id).to_owned(),
                crate::card::receiver::InputRef::Delivery(number) => format!("delivery-{number}"),
            })
            .collect();
        unresolved.sort();
        let unresolved_detail = crate::card::replay::unresolved_detail(catalog, receiver);
        let replacements = self.counters.values().fold(
            Replacements {
                event: 0,
                authority: 0,
            },
            |sum, &(event, authority)| Replacements {
                event: sum.event + event as u32,
                authority: sum.authority + authority as u32,
            },
        );
        StoreReport {
            backend: backend.to_owned(),
            final_cards,
            paused,
            held: self.held.iter().map(|&key| self.input_name(key)).collect(),
            replacements,
            unresolved,
            unresolved_detail,
        }
    }
}

fn backoff(attempt: u32) {
    // Jittered, growing, capped: receivers that collided should not collide again.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.subsec_nanos());
    let cap = 200u64 << attempt.min(6);
    std::thread::sleep(Duration::from_micros(u64::from(nanos) % cap));
}

/// Loads what deciding this delivery reads.
pub(crate) fn load_for_delivery(
    db: &mut dyn Database,
    incoming: &Incoming,
) -> Result<Partial, DbError> {
    let mut partial = Partial::default();
    let event = partial.catalog.event(&incoming.event);
    match event.event_id {
        Some(id) => partial.ensure_identity(db, id)?,
        None => partial.ensure_anonymous(db, incoming.delivery)?,
    }
    if let Some(card) = event.object_id {
        partial.ensure_card(db, card)?;
    }
    let first_card = event
        .event_id
        .and_then(|id| partial.identities.get(&id))
        .and_then(|identity| identity.first.event.object_id);
    if let Some(card) = first_card {
        partial.ensure_card(db, card)?;
    }
    Ok(partial)
}

fn acknowledgement(
    catalog: &Catalog,
    delivery: u32,
    event: &crate::card::wire::Event,
    answer: Delivered,
) -> Acknowledgement {
    Acknowledgement {
        delivery,
        event_id: event.event_id.map(|id| catalog.name(id).to_owned()),
        decision: answer.verdict.name().to_owned(),
        ack: answer.ack.name().to_owned(),
        original_decision: match answer.verdict {
            Verdict::Duplicate(of) => Some(of.name().to_owned()),
            Verdict::Decided(_) => None,
        },
        reason: None,
    }
}

/// Decides one delivery inside the open transaction and writes what changed: the
/// production path, one step of [`Store::deliver_batch`].
pub(crate) fn deliver_in(
    db: &mut dyn Database,
    incoming: &Incoming,
) -> Result<Acknowledgement, DbError> {
    if let Some(reason) = unkeepable(&incoming.event) {
        return Ok(Acknowledgement::rejected(incoming, reason));
    }
    let decided = decide(load_for_delivery(db, incoming)?, incoming);
    decided.write_cards(db)?;
    decided.write_records(db)?;
    Ok(decided.ack)
}

/// One delivery decided on the parts loaded for it, not written yet.
pub(crate) struct Decided {
    partial: Partial,
    before: Receiver,
    after: Receiver,
    deltas: BTreeMap<Sym, (i64, i64)>,
    audit: Vec<AuditRow>,
    /// The acknowledgement, to be handed out after the commit.
    pub(crate) ack: Acknowledgement,
}

impl Decided {
    /// Writes the changed cards and their counters.
    pub(crate) fn write_cards(&self, db: &mut dyn Database) -> Result<(), DbError> {
        write_cards(db, &self.partial, &self.before, &self.after, &self.deltas)
    }

    /// Writes the new or changed records, the holds and the audit rows.
    pub(crate) fn write_records(&self, db: &mut dyn Database) -> Result<(), DbError> {
        write_records(
            db,
            &self.partial,
            &self.before,
            &self.after,
            self.audit.clone(),
        )
    }
}

/// Runs the real decision function on the loaded parts.
pub(crate) fn decide(mut partial: Partial, incoming: &Incoming) -> Decided {
    let event = partial.catalog.event(&incoming.event);
    let before = partial.receiver();
    let mut after = before.clone();
    let answer = after.deliver(Spec, incoming.delivery, incoming.received_at, &event);
    let ack = acknowledgement(&partial.catalog, incoming.delivery, &event, answer);
    let content = partial.catalog.content_text(event.content).to_owned();
    let hash = event.event_id.map(|_| content_hash(&content));
    let mut audit = AuditRow {
        subject: ack
            .event_id
            .clone()
            .unwrap_or_else(|| format!("delivery-{}", incoming.delivery)),
        delivery: Some(incoming.delivery),
        event_id: ack.event_id.clone(),
        content_hash: hash,
        card_id: event
            .object_id
            .map(|card| partial.catalog.name(card).to_owned()),
        ..AuditRow::default()
    };
    let mut deltas = BTreeMap::new();
    match answer.verdict {
        Verdict::Duplicate(of) => {
            audit.entry = "duplicate";
            audit.decision = Some("duplicate".into());
            audit.previous = Some(of.name().into());
        }
        Verdict::Decided(decision) => {
            audit.entry = "decided";
            audit.decision = Some(decision.name().into());
            if decision == Decision::Applied {
                if let Some(card) = event.object_id {
                    deltas.insert(card, (1, 0));
                }
            }
        }
    }
    Decided {
        partial,
        before,
        after,
        deltas,
        audit: vec![audit],
        ack,
    }
}

/// Writes the difference between the loaded receiver and the decided one: cards and
/// counters, records, holds, then the audit rows.
fn write_back(
    db: &mut dyn Database,
    partial: &Partial,
    before: &Receiver,
    after: &Receiver,
    deltas: &BTreeMap<Sym, (i64, i64)>,
    audit: Vec<AuditRow>,
) -> Result<(), DbError> {
    write_cards(db, partial, before, after, deltas)?;
    write_records(db, partial, before, after, audit)
}

/// The cards that changed, and the counters of the replacements.
fn write_cards(
    db: &mut dyn Database,
    partial: &Partial,
    before: &Receiver,
    after: &Receiver,
    deltas: &BTreeMap<Sym, (i64, i64)>,
) -> Result<(), DbError> {
    let catalog = &partial.catalog;
    for (&id, card) in after.cards().iter() {
        let old = before.cards().get(&id);
        if old == Some(card) {
            continue;
        }
        let name = catalog.name(id);
        let state = catalog.state_value(card.state).to_string();
        db.execute(
            "INSERT INTO cards (card_id, version, state, paused) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (card_id) DO UPDATE SET version = excluded.version, \
             state = excluded.state, paused = excluded.paused",
            &[
                text(name),
                version_param(card.version),
                text(&state),
                int(i64::from(card.paused)),
            ],
        )?;
    }
    for (&id, &(event, authority)) in deltas {
        let (old_event, old_authority) = partial.counters.get(&id).copied().unwrap_or((0, 0));
        db.execute(
            "INSERT INTO counters (card_id, event_replacements, authority_replacements) \
             VALUES ($1, $2, $3) ON CONFLICT (card_id) DO UPDATE SET \
             event_replacements = excluded.event_replacements, \
             authority_replacements = excluded.authority_replacements",
            &[
                text(catalog.name(id)),
                int(old_event + event),
                int(old_authority + authority),
            ],
        )?;
    }
    Ok(())
}

/// The new or changed records, the holds removed and added, and the audit rows (the
/// changes of card rows that [`write_cards`] wrote are audited here, after the decision).
fn write_records(
    db: &mut dyn Database,
    partial: &Partial,
    before: &Receiver,
    after: &Receiver,
    mut audit: Vec<AuditRow>,
) -> Result<(), DbError> {
    let catalog = &partial.catalog;
    for (&id, card) in after.cards().iter() {
        if before.cards().get(&id) == Some(card) {
            continue;
        }
        let name = catalog.name(id);
        audit.push(AuditRow {
            entry: "card",
            subject: name.to_owned(),
            card_id: Some(name.to_owned()),
            decision: Some(if card.paused { "paused" } else { "active" }.into()),
            version: Some(card.version),
            state: Some(catalog.state_value(card.state).to_string()),
            ..AuditRow::default()
        });
    }
    for (&id, identity) in after.identities().iter() {
        let old = before.identities().get(&id);
        for (index, record) in identity.records().enumerate() {
            let previous = old.and_then(|old| old.records().nth(index));
            write_record(
                db,
                catalog,
                Some((id, index as u32)),
                None,
                record,
                previous,
            )?;
        }
    }
    for (&number, record) in after.anonymous() {
        let previous = before.anonymous().get(&number);
        write_record(db, catalog, None, Some(number), record, previous)?;
    }
    let old_keys: BTreeSet<HoldKey> = before.holds().values().flatten().copied().collect();
    let new_keys: BTreeSet<HoldKey> = after.holds().values().flatten().copied().collect();
    for key in old_keys.difference(&new_keys) {
        match *key {
            HoldKey::Record { event, index } => db.execute(
                "DELETE FROM holds WHERE event_id = $1 AND idx = $2",
                &[text(catalog.name(event)), int(index.into())],
            )?,
            HoldKey::Delivery(number) => db.execute(
                "DELETE FROM holds WHERE delivery = $1",
                &[int(number.into())],
            )?,
        };
    }
    for (bucket, keys) in after.holds() {
        for key in keys.iter().filter(|key| !old_keys.contains(key)) {
            let card = bucket.map(|card| catalog.name(card).to_owned());
            let (event, index, delivery) = match *key {
                HoldKey::Record { event, index } => (
                    Some(catalog.name(event).to_owned()),
                    Some(i64::from(index)),
                    None,
                ),
                HoldKey::Delivery(number) => (None, None, Some(i64::from(number))),
            };
            db.execute(
                "INSERT INTO holds (card_id, event_id, idx, delivery) VALUES ($1, $2, $3, $4)",
                &[
                    opt_text(card),
                    opt_text(event),
                    Param::Int(index),
                    Param::Int(delivery),
                ],
            )?;
        }
    }
    for row in audit {
        db.execute(
            "INSERT INTO audit (entry, subject, delivery, event_id, content_hash, card_id, \
             decision, previous, version, state) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            &[
                text(row.entry),
                text(row.subject),
                Param::Int(row.delivery.map(i64::from)),
                opt_text(row.event_id),
                opt_text(row.content_hash),
                opt_text(row.card_id),
                opt_text(row.decision),
                opt_text(row.previous),
                Param::Int(row.version.map(|version| version as i64)),
                opt_text(row.state),
            ],
        )?;
    }
    Ok(())
}

fn write_record(
    db: &mut dyn Database,
    catalog: &Catalog,
    identity: Option<(Sym, u32)>,
    delivery: Option<u32>,
    record: &Record,
    previous: Option<&Record>,
) -> Result<(), DbError> {
    let decision = record.decision.name();
    let standing = standing_name(record.standing);
    if let Some(previous) = previous {
        if previous.event.content != record.event.content {
            return Err(corrupt("a record's content changed"));
        }
        if previous.decision == record.decision && previous.standing == record.standing {
            return Ok(());
        }
        return match (identity, delivery) {
            (Some((id, index)), _) => db.execute(
                "UPDATE records SET decision = $1, standing = $2 WHERE event_id = $3 AND idx = $4",
                &[
                    text(decision),
                    text(standing),
                    text(catalog.name(id)),
                    int(index.into()),
                ],
            ),
            (None, Some(number)) => db.execute(
                "UPDATE anonymous SET decision = $1, standing = $2 WHERE delivery = $3",
                &[text(decision), text(standing), int(number.into())],
            ),
            (None, None) => unreachable!("a record has an identity or a delivery"),
        }
        .map(|_| ());
    }
    let content = catalog.content_text(record.event.content);
    let object = record
        .event
        .object_id
        .map(|card| catalog.name(card).to_owned());
    match (identity, delivery) {
        (Some((id, index)), _) => db.execute(
            "INSERT INTO records (event_id, idx, content_hash, content, object_id, decision, \
             standing, recorded_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                text(catalog.name(id)),
                int(index.into()),
                text(content_hash(content)),
                text(content),
                opt_text(object),
                text(decision),
                text(standing),
                Param::Int(record.recorded_at),
            ],
        )?,
        (None, Some(number)) => db.execute(
            "INSERT INTO anonymous (delivery, content, object_id, decision, standing, \
             recorded_at) VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                int(number.into()),
                text(content),
                opt_text(object),
                text(decision),
                text(standing),
                Param::Int(record.recorded_at),
            ],
        )?,
        (None, None) => unreachable!("a record has an identity or a delivery"),
    };
    Ok(())
}

fn reconcile_in(
    db: &mut dyn Database,
    snapshot: &AuthoritySnapshot,
    first: bool,
) -> Result<Option<ReconcileReport>, DbError> {
    let mut partial = Partial::default();
    let card = partial.catalog.sym(&snapshot.object_id);
    partial.ensure_card(db, card)?;
    let due = match partial.cards.get(&card) {
        None => first,
        Some(known) if first => known.paused,
        Some(known) => known.paused && snapshot.version >= known.version,
    };
    if !due {
        return Ok(None);
    }
    if !snapshot.state.is_object() {
        return Err(DbError {
            message: format!(
                "authority snapshot of {}: state is not an object",
                snapshot.object_id
            ),
            retry: false,
        });
    }
    partial.ensure_bucket(db, card)?;
    let conflicted = db.query(
        "SELECT DISTINCT r.event_id FROM records r JOIN holds h ON h.event_id = r.event_id \
         WHERE r.idx = 0 AND r.object_id = $1",
        &[text(&snapshot.object_id)],
    )?;
    for row in conflicted {
        let id = partial.catalog.sym(text_of(&row[0])?);
        partial.ensure_identity(db, id)?;
    }
    // The waiting records just loaded may name other cards; their holds are loaded with
    // them, and their cards are needed for nothing but a consistent receiver.
    let state = partial.catalog.state(&snapshot.state);
    let before = partial.receiver();
    let mut after = before.clone();
    let reconciled = after.reconcile(
        Spec,
        &Snapshot {
            object_id: card,
            version: snapshot.version,
            state,
        },
    );
    let catalog = &partial.catalog;
    let key_name = |key: HoldKey| match key {
        HoldKey::Record { event, .. } => catalog.name(event).to_owned(),
        HoldKey::Delivery(number) => format!("delivery-{number}"),
    };
    let mut report = ReconcileReport {
        object_id: snapshot.object_id.clone(),
        outcome: reconciled.outcome.name().to_owned(),
        re_evaluated: Vec::new(),
        resolved: Vec::new(),
        superseded: Vec::new(),
    };
    let mut audit = vec![AuditRow {
        entry: "reconciled",
        subject: snapshot.object_id.clone(),
        card_id: Some(snapshot.object_id.clone()),
        decision: Some(reconciled.outcome.name().into()),
        version: Some(snapshot.version),
        state: Some(catalog.state_value(state).to_string()),
        ..AuditRow::default()
    }];
    let mut event_delta = 0;
    for &(key, settlement) in &reconciled.settled {
        let name = key_name(key);
        let (entry, decision, previous) = match settlement {
            Settlement::ReEvaluated { from, to } => {
                if to == Decision::Applied {
                    event_delta += 1;
                }
                report
                    .re_evaluated
                    .push((name.clone(), to.name().to_owned()));
                (
                    "re_evaluated",
                    Some(to.name().to_owned()),
                    Some(from.name().to_owned()),
                )
            }
            Settlement::Resolved => {
                report.resolved.push(name.clone());
                ("resolved", None, None)
            }
            Settlement::Superseded => {
                report.superseded.push(name.clone());
                ("superseded", None, None)
            }
        };
        let (event_id, index, delivery) = match key {
            HoldKey::Record { event, index } => {
                (Some(catalog.name(event).to_owned()), Some(index), None)
            }
            HoldKey::Delivery(number) => (None, None, Some(number)),
        };
        let hash = match (key, index) {
            (HoldKey::Record { event, .. }, Some(index)) => {
                after.identities().get(&event).map(|identity| {
                    content_hash(catalog.content_text(identity.record(index).event.content))
                })
            }
            _ => None,
        };
        audit.push(AuditRow {
            entry,
            subject: name,
            delivery,
            event_id,
            content_hash: hash,
            card_id: Some(snapshot.object_id.clone()),
            decision,
            previous,
            ..AuditRow::default()
        });
    }
    let authority_delta = i64::from(reconciled.outcome.replaces());
    let mut deltas = BTreeMap::new();
    if reconciled.outcome != Outcome::RefusedBehind {
        deltas.insert(card, (event_delta, authority_delta));
    }
    write_back(db, &partial, &before, &after, &deltas, audit)?;
    Ok(Some(report))
}

fn load_all_in(db: &mut dyn Database) -> Result<Loaded, DbError> {
    let mut partial = Partial::default();
    let mut counters = BTreeMap::new();
    for row in db.query(
        "SELECT c.card_id, c.version, c.state, c.paused, n.event_replacements, \
         n.authority_replacements FROM cards c LEFT JOIN counters n ON n.card_id = c.card_id \
         ORDER BY c.card_id",
        &[],
    )? {
        let name = text_of(&row[0])?.to_owned();
        let id = partial.catalog.sym(&name);
        let state = partial.catalog.state(&parse_json(text_of(&row[2])?)?);
        let mut card = Card::new(version_of(&row[1])?, state);
        card.paused = row[3].int() == Some(1);
        partial.cards.insert(id, card);
        counters.insert(name, (row[4].int().unwrap_or(0), row[5].int().unwrap_or(0)));
    }
    let mut by_id: BTreeMap<String, Vec<Record>> = BTreeMap::new();
    for row in db.query(
        "SELECT content, decision, standing, recorded_at, event_id, idx FROM records \
         ORDER BY event_id, idx",
        &[],
    )? {
        let record = partial.record_of(&row)?;
        let records = by_id.entry(text_of(&row[4])?.to_owned()).or_default();
        if row[5].int() != Some(records.len() as i64) {
            return Err(corrupt("records are not numbered 0.. under their id"));
        }
        records.push(record);
    }
    for (name, mut records) in by_id {
        let id = partial.catalog.sym(&name);
        let first = records.remove(0);
        partial.identities.insert(
            id,
            Identity {
                first,
                variants: records,
            },
        );
    }
    for row in db.query(
        "SELECT content, decision, standing, recorded_at, delivery FROM anonymous",
        &[],
    )? {
        let record = partial.record_of(&row)?;
        let number = row[4].int().ok_or_else(|| corrupt("anonymous delivery"))? as u32;
        partial.anonymous.insert(number, record);
    }
    let mut held = Vec::new();
    for row in db.query(
        "SELECT seq, card_id, event_id, idx, delivery FROM holds ORDER BY seq",
        &[],
    )? {
        let seq = row[0].int().ok_or_else(|| corrupt("hold seq"))?;
        let key = match (row[2].text(), row[3].int(), row[4].int()) {
            (Some(event), Some(index), _) => HoldKey::Record {
                event: partial.catalog.sym(event),
                index: index as u32,
            },
            (None, _, Some(number)) => HoldKey::Delivery(number as u32),
            _ => return Err(corrupt("a hold refers to nothing")),
        };
        let bucket = row[1].text().map(str::to_owned);
        partial.file_hold(bucket.as_deref(), seq, key);
        held.push(key);
    }
    let receiver = partial.receiver();
    receiver.invariants().map_err(corrupt)?;
    Ok(Loaded {
        catalog: partial.catalog,
        receiver,
        counters,
        held,
    })
}
