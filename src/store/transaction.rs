//! One decision's transaction: decide, write cards, write records (the steps `mutants` wraps).

use crate::card::policy::Spec;
use crate::card::receiver::{
    Decision, Delivered, HoldKey, Outcome, Receiver, Record, Settlement, Verdict,
};
use crate::card::wire::{Catalog, Snapshot, Sym};
use crate::store::partial::{load_for_delivery, Partial};
use crate::store::rows::{
    content_hash, corrupt, int, opt_text, standing_name, text, text_of, version_param, AuditRow,
};
use crate::store::{
    unkeepable, Acknowledgement, AuthoritySnapshot, Database, DbError, Incoming, Param,
    ReconcileReport,
};
use std::collections::{BTreeMap, BTreeSet};

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
    audit_cards(catalog, before, after, &mut audit);
    write_changed_records(db, catalog, before, after)?;
    write_holds(db, catalog, before, after)?;
    write_audit(db, audit)
}

/// An audit row for each card row that changed.
fn audit_cards(catalog: &Catalog, before: &Receiver, after: &Receiver, audit: &mut Vec<AuditRow>) {
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
}

/// The new records, and the records whose decision or standing changed.
fn write_changed_records(
    db: &mut dyn Database,
    catalog: &Catalog,
    before: &Receiver,
    after: &Receiver,
) -> Result<(), DbError> {
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
    Ok(())
}

/// The holds removed, then the holds added.
fn write_holds(
    db: &mut dyn Database,
    catalog: &Catalog,
    before: &Receiver,
    after: &Receiver,
) -> Result<(), DbError> {
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
    Ok(())
}

/// The audit rows, in order.
fn write_audit(db: &mut dyn Database, audit: Vec<AuditRow>) -> Result<(), DbError> {
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
    if let Some(previous) = previous {
        return update_record(db, catalog, identity, delivery, record, previous);
    }
    let decision = record.decision.name();
    let standing = standing_name(record.standing);
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

/// A record that was there before: its content must not have changed; its decision and
/// standing are written when they did.
fn update_record(
    db: &mut dyn Database,
    catalog: &Catalog,
    identity: Option<(Sym, u32)>,
    delivery: Option<u32>,
    record: &Record,
    previous: &Record,
) -> Result<(), DbError> {
    let decision = record.decision.name();
    let standing = standing_name(record.standing);
    if previous.event.content != record.event.content {
        return Err(corrupt("a record's content changed"));
    }
    if previous.decision == record.decision && previous.standing == record.standing {
        return Ok(());
    }
    match (identity, delivery) {
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
    .map(|_| ())
}

pub(super) fn reconcile_in(
    db: &mut dyn Database,
    snapshot: &AuthoritySnapshot,
    first: bool,
) -> Result<Option<ReconcileReport>, DbError> {
    let mut partial = Partial::default();
    let card = partial.catalog.sym(&snapshot.object_id);
    partial.ensure_card(db, card)?;
    if !due(&partial, card, snapshot, first) {
        return Ok(None);
    }
    if !snapshot.state.is_object() {
        return Err(not_an_object(snapshot));
    }
    load_waiting(db, &mut partial, card, &snapshot.object_id)?;
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
        let (row, applied) = settle(
            catalog,
            &after,
            &snapshot.object_id,
            key,
            settlement,
            &mut report,
        );
        event_delta += applied;
        audit.push(row);
    }
    let authority_delta = i64::from(reconciled.outcome.replaces());
    let mut deltas = BTreeMap::new();
    if reconciled.outcome != Outcome::RefusedBehind {
        deltas.insert(card, (event_delta, authority_delta));
    }
    write_back(db, &partial, &before, &after, &deltas, audit)?;
    Ok(Some(report))
}

/// Whether the default order reconciles this card now: on the `first` pass when it is
/// paused or unknown; on a later pass when it is paused and the snapshot is not behind it.
fn due(partial: &Partial, card: Sym, snapshot: &AuthoritySnapshot, first: bool) -> bool {
    match partial.cards.get(&card) {
        None => first,
        Some(known) if first => known.paused,
        Some(known) => known.paused && snapshot.version >= known.version,
    }
}

/// Loads every hold filed under the card, and the records of the inputs whose first record
/// names it and that wait (the conflicts a reconciliation resolves).
fn load_waiting(
    db: &mut dyn Database,
    partial: &mut Partial,
    card: Sym,
    object_id: &str,
) -> Result<(), DbError> {
    partial.ensure_bucket(db, card)?;
    let conflicted = db.query(
        "SELECT DISTINCT r.event_id FROM records r JOIN holds h ON h.event_id = r.event_id \
         WHERE r.idx = 0 AND r.object_id = $1",
        &[text(object_id)],
    )?;
    for row in conflicted {
        let id = partial.catalog.sym(text_of(&row[0])?);
        partial.ensure_identity(db, id)?;
    }
    Ok(())
}

/// One input a reconciliation settled: its place in the report, its audit row, and 1 when
/// it was re-evaluated to `applied` (an event replacement), else 0.
fn settle(
    catalog: &Catalog,
    after: &Receiver,
    object_id: &str,
    key: HoldKey,
    settlement: Settlement,
    report: &mut ReconcileReport,
) -> (AuditRow, i64) {
    let name = match key {
        HoldKey::Record { event, .. } => catalog.name(event).to_owned(),
        HoldKey::Delivery(number) => format!("delivery-{number}"),
    };
    let mut applied = 0;
    let (entry, decision, previous) = match settlement {
        Settlement::ReEvaluated { from, to } => {
            if to == Decision::Applied {
                applied = 1;
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
    let row = AuditRow {
        entry,
        subject: name,
        delivery,
        event_id,
        content_hash: hash,
        card_id: Some(object_id.to_owned()),
        decision,
        previous,
        ..AuditRow::default()
    };
    (row, applied)
}

/// The error of an authority snapshot whose state is not a JSON object.
fn not_an_object(snapshot: &AuthoritySnapshot) -> DbError {
    DbError {
        message: format!(
            "authority snapshot of {}: state is not an object",
            snapshot.object_id
        ),
        retry: false,
    }
}
