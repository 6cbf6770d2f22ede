//! One batch's transaction: load it table by table (one query per 500 names), decide each
//! delivery in memory, write cards, write records (the steps `mutants` wraps); one
//! reconciliation.

use crate::card::policy::Spec;
use crate::card::receiver::{Decision, Delivered, HoldKey, Outcome, Receiver, Settlement, Verdict};
use crate::card::wire::{Catalog, Event, Snapshot, Sym};
use crate::store::partial::{load_for_batch, Partial};
use crate::store::rows::{content_hash, text, text_of, AuditRow};
use crate::store::write::{check_delivery_scope, Before, Changes, Steps};
use crate::store::{
    Acknowledgement, AuthoritySnapshot, Database, DbError, Incoming, ReconcileReport,
};
use std::collections::BTreeMap;

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

/// Decides a batch of deliveries inside the open transaction, in order (each sees the ones
/// before it), and writes what changed: the production path of [`Store::deliver_batch`].
///
/// [`Store::deliver_batch`]: crate::store::Store::deliver_batch
pub(crate) fn deliver_batch_in(
    db: &mut dyn Database,
    incoming: &[Incoming],
) -> Result<Vec<Acknowledgement>, DbError> {
    let decided = decide(load_for_batch(db, incoming)?, incoming)?;
    decided.write_all(db)?;
    Ok(decided.acks)
}

/// A batch decided on the parts loaded for it, not written yet.
pub(crate) struct Decided {
    changes: Changes,
    /// The acknowledgements, in order, to be handed out after the commit.
    pub(crate) acks: Vec<Acknowledgement>,
}

impl Decided {
    /// Writes everything that changed (on PostgreSQL, the inserts in one statement).
    pub(crate) fn write_all(&self, db: &mut dyn Database) -> Result<(), DbError> {
        self.changes.write_all(db)
    }

    /// Writes the changed cards and their counters.
    pub(crate) fn write_cards(&self, db: &mut dyn Database) -> Result<(), DbError> {
        self.changes.write_cards(db)
    }

    /// Writes the new or changed records, the holds and the audit rows.
    pub(crate) fn write_records(&self, db: &mut dyn Database) -> Result<(), DbError> {
        self.changes.write_records(db)
    }
}

/// Runs the real decision function on the loaded parts, one delivery after another on one
/// receiver, and gathers what changed.
pub(crate) fn decide(
    (partial, events): (Partial, Vec<Result<Event, String>>),
    incoming: &[Incoming],
) -> Result<Decided, DbError> {
    let catalog = &partial.catalog;
    let before = partial.receiver();
    let mut after = before.clone();
    let mut steps = Steps::default();
    let mut acks = Vec::with_capacity(incoming.len());
    for (one, event) in incoming.iter().zip(events) {
        let event = match event {
            Ok(event) => event,
            Err(reason) => {
                acks.push(Acknowledgement::rejected(one, reason));
                continue;
            }
        };
        let scope = Before::delivery(&after, &event);
        let small = (cfg!(debug_assertions) && after.cards().len() + after.holds().len() <= 64)
            .then(|| after.clone());
        let answer = after.deliver(Spec, one.delivery, one.received_at, &event);
        if let Some(whole) = &small {
            check_delivery_scope(catalog, (&scope, whole), &after);
        }
        let ack = acknowledgement(catalog, one.delivery, &event, answer);
        let (audit, deltas) = decision_audit(catalog, one, &event, &ack, answer);
        steps.step(catalog, &scope, &after, vec![audit], &deltas);
        acks.push(ack);
    }
    let changes = Changes::new(catalog, &partial.counters, &before, &after, steps)?;
    Ok(Decided { changes, acks })
}

/// The audit row of one delivery's decision, and the replacement it counts.
fn decision_audit(
    catalog: &Catalog,
    incoming: &Incoming,
    event: &Event,
    ack: &Acknowledgement,
    answer: Delivered,
) -> (AuditRow, BTreeMap<Sym, (i64, i64)>) {
    let content = catalog.content_text(event.content);
    let mut audit = AuditRow {
        subject: ack
            .event_id
            .clone()
            .unwrap_or_else(|| format!("delivery-{}", incoming.delivery)),
        delivery: incoming.numbered.then_some(incoming.delivery),
        event_id: ack.event_id.clone(),
        content_hash: event.event_id.map(|_| content_hash(content)),
        card_id: event.object_id.map(|card| catalog.name(card).to_owned()),
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
    (audit, deltas)
}

/// Writes the difference one reconciliation made, as one step.
fn write_back(
    db: &mut dyn Database,
    partial: &Partial,
    before: &Receiver,
    after: &Receiver,
    deltas: &BTreeMap<Sym, (i64, i64)>,
    audit: Vec<AuditRow>,
) -> Result<(), DbError> {
    let catalog = &partial.catalog;
    let mut steps = Steps::default();
    let whole = Before::Whole {
        cards: before.cards(),
        holds: before.holds(),
    };
    steps.step(catalog, &whole, after, audit, deltas);
    Changes::new(catalog, &partial.counters, before, after, steps)?.write_all(db)
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
/// names it and that wait (the conflicts a reconciliation resolves). Those are loaded by
/// the card their hold is filed under (none first, then by id text), then by arrival: the
/// cards are numbered in that order, and the reconciliation resolves them in their cards'
/// order, which is then the same on both backends and, for cards the fixture starts with,
/// the same as replay's.
fn load_waiting(
    db: &mut dyn Database,
    partial: &mut Partial,
    card: Sym,
    object_id: &str,
) -> Result<(), DbError> {
    partial.ensure_bucket(db, card)?;
    let conflicted = db.query(
        "SELECT r.event_id FROM records r JOIN holds h ON h.event_id = r.event_id \
         WHERE r.idx = 0 AND r.object_id = $1 GROUP BY r.event_id \
         ORDER BY MIN(h.card_id) IS NOT NULL, MIN(h.card_id), MIN(h.seq)",
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
        unique: false,
    }
}
