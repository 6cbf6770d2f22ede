//! The set-based write-back: what one transaction changed (cards, counters, records,
//! holds, audit), gathered step by step and written as one multi-row statement per table.

use crate::card::receiver::{Card, CardTable, HoldKey, HoldTable, Receiver, Record};
use crate::card::wire::{Catalog, Event, Sym};
use crate::store::rows::{
    content_hash, corrupt, int, opt_text, standing_name, text, version_param, AuditRow,
};
use crate::store::{Database, DbError, Param};
use std::collections::{BTreeMap, BTreeSet};

/// The most rows one statement carries (10 columns at most: far below both backends'
/// parameter limits).
const ROWS_PER_STATEMENT: usize = 200;

type Holds = HoldTable;

/// What the decisions of one transaction did, step by step: the audit rows in order, the
/// replacement counts, and the hold rows to delete and to add (in arrival order).
#[derive(Default)]
pub(super) struct Steps {
    audit: Vec<AuditRow>,
    deltas: BTreeMap<Sym, (i64, i64)>,
    /// Hold rows that were in the database and are gone.
    deleted: Vec<HoldKey>,
    /// Hold rows to add, in the order they appeared.
    added: Vec<(Option<Sym>, HoldKey)>,
}

/// The part of a receiver one step may change, as it was before the step.
pub(super) enum Before<'a> {
    /// Everything: a reconciliation may create a card and settle any card's holds.
    Whole {
        cards: &'a CardTable,
        holds: &'a Holds,
    },
    /// A delivery under the contract changes at most its own card and its identity's first
    /// record's card, and only appends holds, to one of those two cards' lists (SPEC rule 1
    /// for a changed payload, rules 2-6 otherwise; [`Receiver::deliver`]). So a step costs
    /// the same whatever the transaction has loaded.
    Delivery {
        /// The cards it may change, as they were (`None`: not known).
        cards: Vec<(Sym, Option<Card>)>,
        /// The lengths of the hold lists it may append to.
        lists: Vec<(Option<Sym>, usize)>,
    },
}

impl Before<'_> {
    /// What a delivery of `event` may change in `receiver`, before it is decided.
    pub(super) fn delivery(receiver: &Receiver, event: &Event) -> Before<'static> {
        let first = event
            .event_id
            .and_then(|id| receiver.identities().get(&id))
            .and_then(|identity| identity.first.event.object_id);
        let mut buckets = vec![event.object_id];
        if first.is_some() && first != event.object_id {
            buckets.push(first);
        }
        Before::Delivery {
            cards: (buckets.iter().flatten())
                .map(|&id| (id, receiver.cards().get(&id).copied()))
                .collect(),
            lists: (buckets.iter())
                .map(|&bucket| (bucket, receiver.holds().get(&bucket).map_or(0, Vec::len)))
                .collect(),
        }
    }

    /// The cards that differ in `after`, by card id text, and the holds removed and added.
    fn diff<'c>(&self, catalog: &'c Catalog, after: &'c Receiver) -> Diff<'c> {
        match self {
            Before::Whole { cards, holds } => {
                let old: BTreeSet<HoldKey> = holds.values().flatten().copied().collect();
                let new: BTreeSet<HoldKey> = after.holds().values().flatten().copied().collect();
                let mut added = Vec::new();
                for (bucket, keys) in after.holds() {
                    added.extend(
                        (keys.iter())
                            .filter(|key| !old.contains(key))
                            .map(|&key| (bucket, key)),
                    );
                }
                Diff {
                    cards: changed_cards(catalog, cards, after),
                    removed: old.difference(&new).copied().collect(),
                    added,
                }
            }
            Before::Delivery { cards, lists } => {
                let mut changed: Vec<(&str, &Card)> = (cards.iter())
                    .filter_map(|(id, old)| {
                        let card = after.cards().get(id)?;
                        (old.as_ref() != Some(card)).then(|| (catalog.name(*id), card))
                    })
                    .collect();
                changed.sort_unstable_by(|one, other| one.0.cmp(other.0));
                let mut added = Vec::new();
                for &(bucket, len) in lists {
                    let keys = after.holds().get(&bucket).map_or(&[][..], Vec::as_slice);
                    added.extend(keys.iter().skip(len).map(|&key| (bucket, key)));
                }
                Diff {
                    cards: changed,
                    removed: Vec::new(),
                    added,
                }
            }
        }
    }
}

/// What one step changed.
#[derive(Debug, PartialEq)]
struct Diff<'c> {
    cards: Vec<(&'c str, &'c Card)>,
    removed: Vec<HoldKey>,
    added: Vec<(Option<Sym>, HoldKey)>,
}

impl Steps {
    /// One step (a delivery decided, a card reconciled): its own audit rows, then one per
    /// card row it changed, by card id text ([`changed_cards`]); its replacement counts;
    /// the holds it removed and added. `before` is what the step may have changed, as it
    /// was.
    pub(super) fn step(
        &mut self,
        catalog: &Catalog,
        before: &Before,
        after: &Receiver,
        audit: Vec<AuditRow>,
        deltas: &BTreeMap<Sym, (i64, i64)>,
    ) {
        self.audit.extend(audit);
        let diff = before.diff(catalog, after);
        for (name, card) in diff.cards {
            self.audit.push(AuditRow {
                entry: "card",
                subject: name.to_owned(),
                card_id: Some(name.to_owned()),
                decision: Some(if card.paused { "paused" } else { "active" }.into()),
                version: Some(card.version),
                state: Some(catalog.state_value(card.state).to_string()),
                ..AuditRow::default()
            });
        }
        for (&card, &(event, authority)) in deltas {
            let sum = self.deltas.entry(card).or_insert((0, 0));
            sum.0 += event;
            sum.1 += authority;
        }
        for key in diff.removed {
            match self.added.iter().position(|(_, added)| *added == key) {
                Some(at) => {
                    self.added.remove(at);
                }
                None => self.deleted.push(key),
            }
        }
        self.added.extend(diff.added);
    }
}

/// Debug builds: a delivery's scoped difference ([`Before::delivery`]) equals the one found
/// by comparing everything (`whole`: the receiver before the delivery).
pub(super) fn check_delivery_scope(
    catalog: &Catalog,
    (scoped, whole): (&Before, &Receiver),
    after: &Receiver,
) {
    let everything = Before::Whole {
        cards: whole.cards(),
        holds: whole.holds(),
    };
    assert_eq!(
        scoped.diff(catalog, after),
        everything.diff(catalog, after),
        "a delivery changed more than its scope"
    );
}

/// The cards whose row differs from `before`, by card id text. Not by interned symbol:
/// the symbols are numbered in the order one transaction met the names, which depends on
/// the batch, and a step's audit rows must not (a changed payload whose variant names
/// another card pauses two cards in one step).
fn changed_cards<'a>(
    catalog: &'a Catalog,
    before: &CardTable,
    after: &'a Receiver,
) -> Vec<(&'a str, &'a Card)> {
    let mut changed: Vec<(&str, &Card)> = after
        .cards()
        .iter()
        .filter(|&(id, card)| before.get(&id) != Some(card))
        .map(|(id, card)| (catalog.name(id), card))
        .collect();
    changed.sort_unstable_by(|one, other| one.0.cmp(other.0));
    changed
}

/// The rows to write, by table.
pub(super) struct Changes {
    cards: Vec<Vec<Param>>,
    counters: Vec<Vec<Param>>,
    records: Vec<Vec<Param>>,
    record_updates: Vec<Vec<Param>>,
    anonymous: Vec<Vec<Param>>,
    anonymous_updates: Vec<Vec<Param>>,
    /// `[event_id, idx]` or `[delivery]`.
    hold_deletes: Vec<Vec<Param>>,
    holds: Vec<Vec<Param>>,
    audit: Vec<Vec<Param>>,
}

impl Changes {
    /// The difference between the receiver before the transaction and after it, with the
    /// steps that led there; `counters` are the counters as loaded.
    pub(super) fn new(
        catalog: &Catalog,
        counters: &BTreeMap<Sym, (i64, i64)>,
        before: &Receiver,
        after: &Receiver,
        steps: Steps,
    ) -> Result<Changes, DbError> {
        let mut changes = Changes {
            cards: Vec::new(),
            counters: Vec::new(),
            records: Vec::new(),
            record_updates: Vec::new(),
            anonymous: Vec::new(),
            anonymous_updates: Vec::new(),
            hold_deletes: steps
                .deleted
                .iter()
                .map(|key| match *key {
                    HoldKey::Record { event, index } => {
                        vec![text(catalog.name(event)), int(index.into())]
                    }
                    HoldKey::Delivery(number) => vec![int(number.into())],
                })
                .collect(),
            holds: Vec::new(),
            audit: steps.audit.into_iter().map(audit_params).collect(),
        };
        for (id, card) in after.cards().iter() {
            if before.cards().get(&id) == Some(card) {
                continue;
            }
            changes.cards.push(vec![
                text(catalog.name(id)),
                version_param(card.version),
                text(catalog.state_value(card.state).to_string()),
                int(i64::from(card.paused)),
            ]);
        }
        for (&id, &(event, authority)) in &steps.deltas {
            let (old_event, old_authority) = counters.get(&id).copied().unwrap_or((0, 0));
            changes.counters.push(vec![
                text(catalog.name(id)),
                int(old_event + event),
                int(old_authority + authority),
            ]);
        }
        changes.records_between(catalog, before, after)?;
        for (bucket, key) in steps.added {
            let card = bucket.map(|card| catalog.name(card).to_owned());
            changes.holds.push(match key {
                HoldKey::Record { event, index } => vec![
                    opt_text(card),
                    text(catalog.name(event)),
                    int(index.into()),
                    Param::Int(None),
                ],
                HoldKey::Delivery(number) => vec![
                    opt_text(card),
                    Param::Text(None),
                    Param::Int(None),
                    int(number.into()),
                ],
            });
        }
        Ok(changes)
    }

    /// The new records, and the records whose decision or standing changed.
    fn records_between(
        &mut self,
        catalog: &Catalog,
        before: &Receiver,
        after: &Receiver,
    ) -> Result<(), DbError> {
        for (id, identity) in after.identities().iter() {
            let old = before.identities().get(&id);
            for (index, record) in identity.records().enumerate() {
                let key = (text(catalog.name(id)), int(index as i64));
                match old.and_then(|old| old.records().nth(index)) {
                    Some(previous) => {
                        if changed(previous, record)? {
                            self.record_updates.push(vec![
                                key.0,
                                key.1,
                                text(record.decision.name()),
                                text(standing_name(record.standing)),
                            ]);
                        }
                    }
                    None => {
                        let content = catalog.content_text(record.event.content);
                        let mut row = vec![key.0, key.1, text(content_hash(content))];
                        row.extend(record_columns(catalog, record));
                        self.records.push(row);
                    }
                }
            }
        }
        for (&number, record) in after.anonymous() {
            match before.anonymous().get(&number) {
                Some(previous) => {
                    if changed(previous, record)? {
                        self.anonymous_updates.push(vec![
                            int(number.into()),
                            text(record.decision.name()),
                            text(standing_name(record.standing)),
                        ]);
                    }
                }
                None => {
                    let mut row = vec![int(number.into())];
                    row.extend(record_columns(catalog, record));
                    self.anonymous.push(row);
                }
            }
        }
        Ok(())
    }

    /// Writes everything: [`Changes::write_cards`] then [`Changes::write_records`]; on
    /// PostgreSQL, the updates and deletes first and then every insert in one statement
    /// (one data-modifying `WITH` part per table), one round trip instead of one per table.
    pub(super) fn write_all(&self, db: &mut dyn Database) -> Result<(), DbError> {
        let inserts = self.inserts();
        let fits = inserts
            .iter()
            .all(|(_, _, rows)| rows.len() <= ROWS_PER_STATEMENT);
        if db.backend() != "postgres" || !fits {
            self.write_cards(db)?;
            return self.write_records(db);
        }
        self.write_updates(db)?;
        let parts: Vec<_> = inserts
            .into_iter()
            .filter(|(_, _, rows)| !rows.is_empty())
            .collect();
        let Some((last, withs)) = parts.split_last() else {
            return Ok(());
        };
        let mut params: Vec<Param> = Vec::new();
        let mut statement = |(head, tail, rows): &(&str, &str, &Vec<Vec<Param>>)| {
            let values = placeholders_from(params.len() + 1, rows.len(), rows[0].len(), |_, p| p);
            params.extend(rows.iter().flatten().cloned());
            format!("{head}{values}{tail}")
        };
        let mut sql = String::new();
        for (at, part) in withs.iter().enumerate() {
            sql += if at == 0 { "WITH " } else { ", " };
            sql += &format!("w{at} AS ({})", statement(part));
        }
        sql += " ";
        sql += &statement(last);
        db.execute(&sql, &params)?;
        Ok(())
    }

    /// Every insert, in the order [`Changes::write_cards`] and [`Changes::write_records`]
    /// run them: (head, tail, rows).
    fn inserts(&self) -> [(&'static str, &'static str, &Vec<Vec<Param>>); 6] {
        [
            (CARDS, CARDS_TAIL, &self.cards),
            (COUNTERS, COUNTERS_TAIL, &self.counters),
            (RECORDS, "", &self.records),
            (ANONYMOUS, "", &self.anonymous),
            (HOLDS, "", &self.holds),
            (AUDIT, "", &self.audit),
        ]
    }

    /// The changed records' and anonymous records' decisions, and the holds gone.
    fn write_updates(&self, db: &mut dyn Database) -> Result<(), DbError> {
        update_rows(
            db,
            "UPDATE records SET decision = v.column3, standing = v.column4 FROM (VALUES ",
            ") AS v WHERE records.event_id = v.column1 AND records.idx = v.column2",
            &["TEXT", "BIGINT", "TEXT", "TEXT"],
            &self.record_updates,
        )?;
        update_rows(
            db,
            "UPDATE anonymous SET decision = v.column2, standing = v.column3 FROM (VALUES ",
            ") AS v WHERE anonymous.delivery = v.column1",
            &["BIGINT", "TEXT", "TEXT"],
            &self.anonymous_updates,
        )?;
        delete_holds(db, &self.hold_deletes)
    }

    /// Writes the changed cards and their counters.
    pub(super) fn write_cards(&self, db: &mut dyn Database) -> Result<(), DbError> {
        insert_rows(db, CARDS, CARDS_TAIL, &self.cards)?;
        insert_rows(db, COUNTERS, COUNTERS_TAIL, &self.counters)
    }

    /// Writes the new and changed records, the holds removed and added, and the audit.
    pub(super) fn write_records(&self, db: &mut dyn Database) -> Result<(), DbError> {
        insert_rows(db, RECORDS, "", &self.records)?;
        insert_rows(db, ANONYMOUS, "", &self.anonymous)?;
        self.write_updates(db)?;
        insert_rows(db, HOLDS, "", &self.holds)?;
        insert_rows(db, AUDIT, "", &self.audit)
    }
}

const CARDS: &str = "INSERT INTO cards (card_id, version, state, paused) VALUES ";
const CARDS_TAIL: &str = " ON CONFLICT (card_id) DO UPDATE SET version = excluded.version, \
     state = excluded.state, paused = excluded.paused";
const COUNTERS: &str =
    "INSERT INTO counters (card_id, event_replacements, authority_replacements) VALUES ";
const COUNTERS_TAIL: &str = " ON CONFLICT (card_id) DO UPDATE SET \
     event_replacements = excluded.event_replacements, \
     authority_replacements = excluded.authority_replacements";
const RECORDS: &str = "INSERT INTO records (event_id, idx, content_hash, content, object_id, \
     decision, standing, recorded_at) VALUES ";
const ANONYMOUS: &str = "INSERT INTO anonymous (delivery, content, object_id, decision, \
     standing, recorded_at) VALUES ";
const HOLDS: &str = "INSERT INTO holds (card_id, event_id, idx, delivery) VALUES ";
const AUDIT: &str = "INSERT INTO audit (entry, subject, delivery, event_id, content_hash, \
     card_id, decision, previous, version, state) VALUES ";

/// Whether a record that was there before changed its decision or standing (its content
/// must not have changed).
fn changed(previous: &Record, record: &Record) -> Result<bool, DbError> {
    if previous.event.content != record.event.content {
        return Err(corrupt("a record's content changed"));
    }
    Ok(previous.decision != record.decision || previous.standing != record.standing)
}

/// content, object_id, decision, standing, recorded_at.
fn record_columns(catalog: &Catalog, record: &Record) -> [Param; 5] {
    [
        text(catalog.content_text(record.event.content)),
        opt_text(
            record
                .event
                .object_id
                .map(|card| catalog.name(card).to_owned()),
        ),
        text(record.decision.name()),
        text(standing_name(record.standing)),
        Param::Int(record.recorded_at.get()),
    ]
}

fn audit_params(row: AuditRow) -> Vec<Param> {
    vec![
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
    ]
}

/// `($1, $2), ($3, $4)` for two rows of two columns, each cell wrapped by `cell`.
fn placeholders(rows: usize, columns: usize, cell: impl Fn(usize, String) -> String) -> String {
    placeholders_from(1, rows, columns, cell)
}

/// [`placeholders`] numbered from `$first`.
fn placeholders_from(
    first: usize,
    rows: usize,
    columns: usize,
    cell: impl Fn(usize, String) -> String,
) -> String {
    let mut out = String::new();
    for row in 0..rows {
        if row > 0 {
            out += ", ";
        }
        out += "(";
        for column in 0..columns {
            if column > 0 {
                out += ", ";
            }
            out += &cell(column, format!("${}", first + row * columns + column));
        }
        out += ")";
    }
    out
}

/// `head` + the rows as a VALUES list + `tail`, in statements of at most
/// [`ROWS_PER_STATEMENT`] rows, in order.
fn insert_rows(
    db: &mut dyn Database,
    head: &str,
    tail: &str,
    rows: &[Vec<Param>],
) -> Result<(), DbError> {
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let columns = chunk[0].len();
        let sql = format!(
            "{head}{}{tail}",
            placeholders(chunk.len(), columns, |_, p| p)
        );
        let params: Vec<Param> = chunk.iter().flatten().cloned().collect();
        db.execute(&sql, &params)?;
    }
    Ok(())
}

/// An `UPDATE ... FROM (VALUES ...)`: each cell cast to its column's type (PostgreSQL
/// cannot infer a parameter's type inside a VALUES list; SQLite ignores the cast).
fn update_rows(
    db: &mut dyn Database,
    head: &str,
    tail: &str,
    types: &[&str],
    rows: &[Vec<Param>],
) -> Result<(), DbError> {
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let values = placeholders(chunk.len(), types.len(), |column, p| {
            format!("CAST({p} AS {})", types[column])
        });
        let params: Vec<Param> = chunk.iter().flatten().cloned().collect();
        db.execute(&format!("{head}{values}{tail}"), &params)?;
    }
    Ok(())
}

/// One `DELETE` of the holds gone, a record's by (event id, index), an anonymous input's
/// by delivery number.
fn delete_holds(db: &mut dyn Database, rows: &[Vec<Param>]) -> Result<(), DbError> {
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let mut terms = Vec::with_capacity(chunk.len());
        let mut params = Vec::new();
        for row in chunk {
            let at = params.len();
            terms.push(if row.len() == 2 {
                format!("(event_id = ${} AND idx = ${})", at + 1, at + 2)
            } else {
                format!("delivery = ${}", at + 1)
            });
            params.extend(row.iter().cloned());
        }
        db.execute(
            &format!("DELETE FROM holds WHERE {}", terms.join(" OR ")),
            &params,
        )?;
    }
    Ok(())
}
