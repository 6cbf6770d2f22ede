//! The partial-receiver loading: what one decision reads (and, for `show`, everything).

use crate::card::receiver::{Card, HoldKey, Identity, Receiver, Record, RecordedAt, Standing};
use crate::card::wire::{Catalog, Event, Sym};
use crate::store::rows::{
    corrupt, decision_of, int, parse_json, standing_of, text, text_of, version_of,
};
use crate::store::{unkeepable, Database, DbError, Incoming, Loaded, Param, Val};
use std::collections::{BTreeMap, BTreeSet};

/// What one transaction loaded: the parts of the receiver state its decision reads.
#[derive(Default)]
pub(crate) struct Partial {
    pub(super) catalog: Catalog,
    pub(super) cards: BTreeMap<Sym, Card>,
    pub(super) missing_cards: BTreeSet<Sym>,
    pub(super) counters: BTreeMap<Sym, (i64, i64)>,
    pub(super) identities: BTreeMap<Sym, Identity>,
    pub(super) anonymous: BTreeMap<u32, Record>,
    /// Hold rows by bucket, each by sequence number (arrival order).
    pub(super) holds: BTreeMap<Option<Sym>, BTreeMap<i64, HoldKey>>,
    pub(super) loaded_buckets: BTreeSet<Option<Sym>>,
}

impl Partial {
    pub(super) fn receiver(&self) -> Receiver {
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

    pub(super) fn ensure_card(&mut self, db: &mut dyn Database, card: Sym) -> Result<(), DbError> {
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
        self.insert_card_row(card, row)
    }

    /// A card row (version, state, paused, event and authority replacements) as loaded.
    fn insert_card_row(&mut self, card: Sym, row: &[Val]) -> Result<(), DbError> {
        let state = self.catalog.state(&parse_json(text_of(&row[1])?)?);
        let mut known = Card::new(version_of(&row[0])?, state);
        known.paused = row[2].int() == Some(1);
        self.cards.insert(card, known);
        self.counters
            .insert(card, (row[3].int().unwrap_or(0), row[4].int().unwrap_or(0)));
        Ok(())
    }

    pub(super) fn record_of(&mut self, row: &[Val]) -> Result<Record, DbError> {
        // row: content, decision, standing, recorded_at
        let event = self.catalog.event(&parse_json(text_of(&row[0])?)?);
        let decision = text_of(&row[1])?;
        Ok(Record {
            event,
            decision: decision_of(decision)
                .ok_or_else(|| corrupt(format!("unknown decision `{decision}`")))?,
            standing: standing_of(text_of(&row[2])?)?,
            recorded_at: RecordedAt::new(row[3].int()),
        })
    }

    pub(super) fn file_hold(&mut self, bucket: Option<&str>, seq: i64, key: HoldKey) {
        let bucket = bucket.map(|name| self.catalog.sym(name));
        self.holds.entry(bucket).or_default().insert(seq, key);
    }

    /// Loads an event id's records and the holds of its waiting ones.
    pub(super) fn ensure_identity(
        &mut self,
        db: &mut dyn Database,
        id: Sym,
    ) -> Result<(), DbError> {
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
                variants: records.into(),
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
    pub(super) fn ensure_anonymous(
        &mut self,
        db: &mut dyn Database,
        delivery: u32,
    ) -> Result<(), DbError> {
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
    pub(super) fn ensure_bucket(
        &mut self,
        db: &mut dyn Database,
        card: Sym,
    ) -> Result<(), DbError> {
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

/// The most names one `IN (...)` list carries: one parameter each, far below SQLite's
/// 32,766 parameters per statement and PostgreSQL's 65,535, however big the batch.
const NAMES_PER_QUERY: usize = 500;

/// `$first, $first+1, ...` for `count` parameters.
fn list(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|at| format!("${at}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Loads what deciding this batch reads, table by table for the whole batch, one query per
/// [`NAMES_PER_QUERY`] names: the records of every event id, the anonymous records of every delivery without one, the
/// cards (with their counters) named by the deliveries and by the first records just
/// loaded, and the holds of the waiting records among them. The events come back parsed,
/// in order (why not, for a delivery the store cannot keep, which reads nothing).
pub(crate) fn load_for_batch(
    db: &mut dyn Database,
    incoming: &[Incoming],
) -> Result<(Partial, Vec<Result<Event, String>>), DbError> {
    let mut partial = Partial::default();
    let events: Vec<Result<Event, String>> = incoming
        .iter()
        .map(|one| match unkeepable(&one.event) {
            Some(reason) => Err(reason),
            None => Ok(partial.catalog.event(&one.event)),
        })
        .collect();
    let mut ids = BTreeSet::new();
    let mut deliveries = BTreeSet::new();
    let mut cards = BTreeSet::new();
    for (one, event) in incoming.iter().zip(&events) {
        let Ok(event) = event else { continue };
        match event.event_id {
            Some(id) => ids.insert(partial.catalog.name(id).to_owned()),
            None => deliveries.insert(one.delivery),
        };
        if let Some(card) = event.object_id {
            cards.insert(partial.catalog.name(card).to_owned());
        }
    }
    partial.load_identities(db, &ids)?;
    partial.load_anonymous(db, &deliveries)?;
    for identity in partial.identities.values() {
        if let Some(card) = identity.first.event.object_id {
            cards.insert(partial.catalog.name(card).to_owned());
        }
    }
    partial.load_cards(db, &cards)?;
    partial.load_waiting_holds(db, NAMES_PER_QUERY)?;
    Ok((partial, events))
}

impl Partial {
    /// The records of these event ids (one query per [`NAMES_PER_QUERY`]).
    fn load_identities(
        &mut self,
        db: &mut dyn Database,
        ids: &BTreeSet<String>,
    ) -> Result<(), DbError> {
        let ids: Vec<&String> = ids.iter().collect();
        let mut by_id: BTreeMap<String, Vec<Record>> = BTreeMap::new();
        for chunk in ids.chunks(NAMES_PER_QUERY) {
            let sql = format!(
                "SELECT content, decision, standing, recorded_at, idx, event_id FROM records \
                 WHERE event_id IN ({}) ORDER BY event_id, idx",
                list(1, chunk.len())
            );
            let params: Vec<Param> = chunk.iter().map(|id| text(id.as_str())).collect();
            for row in db.query(&sql, &params)? {
                let record = self.record_of(&row)?;
                let name = text_of(&row[5])?;
                let records = by_id.entry(name.to_owned()).or_default();
                if row[4].int() != Some(records.len() as i64) {
                    return Err(corrupt(format!("records of {name} are not numbered 0..")));
                }
                records.push(record);
            }
        }
        for (name, mut records) in by_id {
            let id = self.catalog.sym(&name);
            let first = records.remove(0);
            self.identities.insert(
                id,
                Identity {
                    first,
                    variants: records.into(),
                },
            );
        }
        Ok(())
    }

    /// The records of these inputs without an event id.
    fn load_anonymous(
        &mut self,
        db: &mut dyn Database,
        deliveries: &BTreeSet<u32>,
    ) -> Result<(), DbError> {
        let deliveries: Vec<u32> = deliveries.iter().copied().collect();
        for chunk in deliveries.chunks(NAMES_PER_QUERY) {
            let sql = format!(
                "SELECT content, decision, standing, recorded_at, delivery FROM anonymous \
                 WHERE delivery IN ({})",
                list(1, chunk.len())
            );
            let params: Vec<Param> = chunk.iter().map(|&number| int(number.into())).collect();
            for row in db.query(&sql, &params)? {
                let record = self.record_of(&row)?;
                let number = row[4].int().ok_or_else(|| corrupt("anonymous delivery"))? as u32;
                self.anonymous.insert(number, record);
            }
        }
        Ok(())
    }

    /// These cards with their counters; the ones not found are remembered as missing.
    fn load_cards(
        &mut self,
        db: &mut dyn Database,
        cards: &BTreeSet<String>,
    ) -> Result<(), DbError> {
        let names: Vec<&String> = cards.iter().collect();
        for chunk in names.chunks(NAMES_PER_QUERY) {
            let sql = format!(
                "SELECT c.version, c.state, c.paused, n.event_replacements, \
                 n.authority_replacements, c.card_id FROM cards c \
                 LEFT JOIN counters n ON n.card_id = c.card_id AND n.card_id IN ({0}) \
                 WHERE c.card_id IN ({0})",
                list(1, chunk.len())
            );
            let params: Vec<Param> = chunk.iter().map(|name| text(name.as_str())).collect();
            for row in db.query(&sql, &params)? {
                let card = self.catalog.sym(text_of(&row[5])?);
                self.insert_card_row(card, &row)?;
            }
        }
        for name in cards {
            let card = self.catalog.sym(name);
            if !self.cards.contains_key(&card) {
                self.missing_cards.insert(card);
            }
        }
        Ok(())
    }

    /// The holds of the loaded records that wait: the held event ids `per_query` at a time,
    /// then the held deliveries `per_query` at a time (one `IN (...)` list per query, far
    /// below SQLite's 32,766 parameters and PostgreSQL's 65,535), filed in sequence order.
    /// A hold row has an event id or a delivery, never both; keying the rows by `seq`
    /// takes one met twice once all the same.
    fn load_waiting_holds(
        &mut self,
        db: &mut dyn Database,
        per_query: usize,
    ) -> Result<(), DbError> {
        let held = |record: &Record| record.standing == Standing::Held;
        let ids: Vec<Param> = self
            .identities
            .iter()
            .filter(|(_, identity)| {
                std::iter::once(&identity.first)
                    .chain(&identity.variants)
                    .any(held)
            })
            .map(|(&id, _)| text(self.catalog.name(id)))
            .collect();
        let deliveries: Vec<Param> = self
            .anonymous
            .iter()
            .filter(|(_, record)| held(record))
            .map(|(&number, _)| int(number.into()))
            .collect();
        let mut rows: BTreeMap<i64, Vec<Val>> = BTreeMap::new();
        for (column, names) in [("event_id", &ids), ("delivery", &deliveries)] {
            for chunk in names.chunks(per_query) {
                let sql = format!(
                    "SELECT seq, card_id, event_id, idx, delivery FROM holds WHERE {column} IN ({})",
                    list(1, chunk.len())
                );
                for row in db.query(&sql, chunk)? {
                    let seq = row[0].int().ok_or_else(|| corrupt("hold seq"))?;
                    rows.insert(seq, row);
                }
            }
        }
        for (seq, row) in rows {
            let key = match (row[2].text(), row[3].int(), row[4].int()) {
                (Some(event), Some(index), _) => HoldKey::Record {
                    event: self.catalog.sym(event),
                    index: index as u32,
                },
                (None, _, Some(number)) => HoldKey::Delivery(number as u32),
                _ => return Err(corrupt("a hold refers to nothing")),
            };
            self.file_hold(row[1].text(), seq, key);
        }
        Ok(())
    }
}

pub(super) fn load_all_in(db: &mut dyn Database) -> Result<Loaded, DbError> {
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
                variants: records.into(),
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
    let held = load_holds(db, &mut partial)?;
    let receiver = partial.receiver();
    receiver.invariants().map_err(corrupt)?;
    Ok(Loaded {
        catalog: partial.catalog,
        receiver,
        counters,
        held,
    })
}

/// Files every hold under its bucket; the holds in global arrival order.
fn load_holds(db: &mut dyn Database, partial: &mut Partial) -> Result<Vec<HoldKey>, DbError> {
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
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{DbUrl, Store};

    /// A fresh SQLite store whose holds are `total` held inputs under `card-1`, in sequence
    /// 1..=total: every `every`-th an input without an event id (delivery number = its
    /// sequence number), the others event ids `e-N`.
    fn store_with_holds(total: usize, every: usize) -> (tempfile::TempDir, Store) {
        let folder = tempfile::tempdir().expect("a temporary folder");
        let url = DbUrl::Sqlite(folder.path().join("holds.db"));
        let mut store = Store::open(&url).expect("open");
        store.migrate().expect("migrate");
        let numbers = format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {total})"
        );
        let content = "'{\"event_id\":\"e-' || i || '\",\"object_id\":\"card-1\"}'";
        store
            .database()
            .batch(&format!(
                "INSERT INTO records (event_id, idx, content_hash, content, object_id, decision, \
                 standing) {numbers} SELECT 'e-' || i, 0, 'h-' || i, {content}, 'card-1', \
                 'held_unknown_object', 'held' FROM n WHERE i % {every} <> 0; \
                 INSERT INTO anonymous (delivery, content, object_id, decision, standing) \
                 {numbers} SELECT i, '{{\"object_id\":\"card-1\"}}', 'card-1', \
                 'held_unknown_object', 'held' FROM n WHERE i % {every} = 0; \
                 INSERT INTO holds (card_id, event_id, idx, delivery) {numbers} \
                 SELECT 'card-1', CASE WHEN i % {every} <> 0 THEN 'e-' || i END, \
                 CASE WHEN i % {every} <> 0 THEN 0 END, \
                 CASE WHEN i % {every} = 0 THEN i END FROM n ORDER BY i;"
            ))
            .expect("the rows");
        (folder, store)
    }

    /// What `load_for_batch` loads for every stored input, the holds `per_query` names at
    /// a time: the sequence numbers filed under `card-1`, in order.
    fn waiting_holds(store: &mut Store, total: usize, every: usize, per_query: usize) -> Vec<i64> {
        let ids: BTreeSet<String> = (1..=total)
            .filter(|i| i % every != 0)
            .map(|i| format!("e-{i}"))
            .collect();
        let deliveries: BTreeSet<u32> = (1..=total as u32)
            .filter(|i| *i as usize % every == 0)
            .collect();
        let mut partial = Partial::default();
        let db = store.database();
        partial.load_identities(db, &ids).expect("records");
        partial.load_anonymous(db, &deliveries).expect("anonymous");
        partial.load_waiting_holds(db, per_query).expect("holds");
        let card = partial.catalog.sym("card-1");
        assert_eq!(partial.holds.len(), 1, "every hold is under card-1");
        partial.holds[&Some(card)].keys().copied().collect()
    }

    #[test]
    fn more_waiting_inputs_than_sqlite_takes_parameters_load_in_chunks() {
        // 33,000 held inputs (32,991 event ids, 9 deliveries), more than SQLite's 32,766
        // parameters in one statement: one `IN (...)` list of them all fails.
        let (total, every) = (33_000, 3_600);
        let (_folder, mut store) = store_with_holds(total, every);
        let seqs = waiting_holds(&mut store, total, every, NAMES_PER_QUERY);
        assert_eq!(seqs, (1..=33_000).collect::<Vec<i64>>());
    }

    #[test]
    fn any_chunk_size_loads_the_same_holds_in_sequence_order() {
        let (total, every) = (45, 4);
        let (_folder, mut store) = store_with_holds(total, every);
        let all: Vec<i64> = (1..=45).collect();
        for per_query in [1, 7, 44, NAMES_PER_QUERY] {
            assert_eq!(
                waiting_holds(&mut store, total, every, per_query),
                all,
                "{per_query}"
            );
        }
    }
}
