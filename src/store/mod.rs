//! The durable card receiver: the pure decision function of [`crate::card::receiver`]
//! wrapped in database transactions, on SQLite (embedded) or PostgreSQL (several receiver
//! processes).
//!
//! One batch of deliveries (one delivery by default) is one transaction: the store loads,
//! table by table for the whole batch (one query per 500 names), what the decisions read (the event ids'
//! records or the deliveries' anonymous records, the cards they name, the holds of the
//! waiting records among them), builds one [`Receiver`] from those parts, runs the real
//! [`Receiver::deliver`] on it for each delivery in order, writes back what changed
//! (cards, counters, records, holds, audit) in one multi-row statement per table and
//! commits. The acknowledgements are handed out only after the commit returns.
//! A reconciliation is one transaction the same way. The database keeps canonical texts
//! (names, state JSON, envelope JSON); interned ids live only inside one transaction.
//! `docs/store.md` is the contract in prose.
//!
//! | module | job |
//! |---|---|
//! | `mod.rs` | the types a caller sees ([`Incoming`], [`Acknowledgement`], [`StoreReport`], ...) and [`Store`]: migrations, retries, one transaction per call |
//! | `rows` | the row codec: values to and from database parameters and columns, and the audit row |
//! | `partial` | the partial-receiver loading: the parts a batch of decisions reads, table by table in lists of at most 500 names (and the whole state for [`Store::load_all`]) |
//! | `transaction` | one batch's transaction: decide each delivery in memory, write the cards, write the records (the steps [`mutants`] wraps); one reconciliation |
//! | `write` | the set-based write-back: a transaction's changes as one multi-row statement per table |
//! | [`db`] | the two backends behind one [`Database`] trait |
//! | [`input`] | what the store reads: fixtures, `ingest` lines and snapshot lines, as store inputs |
//! | [`mutants`] | deliberately broken stores, which the drills must catch |
//! | [`stdio`] | the store behind the JSON-lines conformance protocol (`arrival store stdio`) |
//! | [`drill`] | the crash and concurrency drills, and the check of a drilled database against the contract's replay |

pub mod db;
pub mod drill;
pub mod input;
pub mod mutants;
mod partial;
mod rows;
pub mod stdio;
mod transaction;
mod write;

pub use mutants::StoreMutant;
use partial::load_all_in;
pub(crate) use partial::load_for_batch;
pub use rows::{content_hash, decision_of, standing_name};
use rows::{int, text, version_param};
use transaction::reconcile_in;
pub(crate) use transaction::{decide, deliver_batch_in};

use crate::card::fixture::Replacements;
use crate::card::receiver::{HoldKey, Receiver};
use crate::card::replay::{CardReport, UnresolvedReport};
use crate::card::wire::Catalog;
pub use db::{Database, DbError, DbStats, DbUrl, Isolation, Param, Val, UNIQUE_RETRIES};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// One delivery as the store takes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Incoming {
    /// The delivery number (the identity of an input without an event id).
    pub delivery: u32,
    /// Whether the sender gave that number (a wrapper, a fixture, a request): a raw event's
    /// line number labels its acknowledgement only, and is not written to the audit.
    pub numbered: bool,
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

    /// What this store's connection sent so far (statements, queries, prepares, `BEGIN`
    /// and `COMMIT`): the round-trip profile of `benches/store.rs`.
    pub fn stats(&self) -> DbStats {
        self.db.stats()
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
        // The same unique violation, and how many times in a row.
        let mut same: Option<(String, u32)> = None;
        loop {
            let db = &mut *self.db;
            match attempt(db) {
                Ok(value) => return Ok(value),
                Err(error) => {
                    db.rollback();
                    same = match same {
                        Some((message, times)) if error.unique && message == error.message => {
                            Some((message, times + 1))
                        }
                        _ if error.unique => Some((error.message.clone(), 1)),
                        _ => None,
                    };
                    let repeated = same
                        .as_ref()
                        .is_some_and(|(_, times)| *times > UNIQUE_RETRIES);
                    if !error.retry || tries > 10_000 || repeated {
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
        let acks = self.transaction(Isolation::Serial, |db| deliver_batch_in(db, incoming))?;
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
            .map(|(id, card)| {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn failing(unique: bool) -> DbError {
        DbError {
            message: "sqlite: UNIQUE constraint failed".into(),
            retry: true,
            unique,
        }
    }

    #[test]
    fn unique_violations_on_new_rows_are_a_race_and_retried() {
        let folder = tempfile::tempdir().expect("a temporary folder");
        let mut store = Store::open(&DbUrl::Sqlite(folder.path().join("u.db"))).expect("open");
        let mut attempts = 0;
        let result = store.retrying(|_| {
            attempts += 1;
            match attempts {
                100 => Ok(()),
                n => Err(DbError {
                    message: format!("postgres: duplicate key (23505): Key (k)=({n})"),
                    ..failing(true)
                }),
            }
        });
        assert!(result.is_ok(), "each attempt met another row");
    }

    #[test]
    fn a_unique_violation_that_keeps_coming_back_is_given_up_on() {
        let folder = tempfile::tempdir().expect("a temporary folder");
        let mut store = Store::open(&DbUrl::Sqlite(folder.path().join("u.db"))).expect("open");
        let mut attempts = 0;
        let result: Result<(), _> = store.retrying(|_| {
            attempts += 1;
            Err(failing(true))
        });
        assert!(result.is_err());
        assert_eq!(attempts, UNIQUE_RETRIES + 1);
        // A busy database in between starts the count again.
        let mut attempts = 0;
        let result = store.retrying(|_| {
            attempts += 1;
            match attempts {
                n if n == 3 * UNIQUE_RETRIES => Ok(()),
                n => Err(failing(n % UNIQUE_RETRIES != 0)),
            }
        });
        assert!(result.is_ok());
    }
}
