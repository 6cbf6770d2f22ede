//! Comparing a drilled database with the store's own promises and the contract's replay.

use super::{store_error, DrillError};
use crate::card::fixture::Scenario;
use crate::card::policy::Spec;
use crate::card::receiver::{Card, Receiver, Verdict};
use crate::card::replay::replay;
use crate::card::wire::{Catalog, Snapshot};
use crate::store::{
    content_hash, decision_of, Acknowledgement, DbUrl, Incoming, Loaded, Store, Val,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Every check of one trial or run: the store's own promises ([`check_store`]), then its end
/// against the SPEC receiver's ([`compare_with_spec`]). `crash` (one receiver at a time):
/// the audit trail is replayed and the replacement counters compared too.
pub(super) fn verify(
    store: &mut Store,
    url: &DbUrl,
    scenario: &Scenario,
    deliveries: &[Incoming],
    acked: &[(usize, Acknowledgement)],
    crash: bool,
) -> Result<Vec<String>, DrillError> {
    let mut failures = check_store(store, url, scenario, deliveries, acked, crash)?;
    failures.extend(compare_with_spec(store, url, scenario, crash)?);
    Ok(failures)
}

/// The identity key of a delivery's content: (event id, content hash), or the delivery
/// number for an input without an event id.
fn content_key(catalog: &mut Catalog, incoming: &Incoming) -> (Option<String>, String) {
    let event = catalog.event(&incoming.event);
    match event.event_id {
        Some(id) => (
            Some(catalog.name(id).to_owned()),
            content_hash(catalog.content_text(event.content)),
        ),
        None => (None, incoming.delivery.to_string()),
    }
}

/// The store's own promises, read back from its tables:
/// - the database's integrity check passes and the receiver's invariants hold;
/// - every acknowledged delivery has its recorded decision, and the acknowledgement agrees
///   with it;
/// - no decision was recorded twice;
/// - no card moved to a lower version;
/// - each card's event-replacement counter equals its applied records;
/// - with `serial_audit` (one receiver at a time): the audit trail, replayed through the
///   SPEC receiver in commit order, gives every recorded decision and the stored state.
fn check_store(
    store: &mut Store,
    url: &DbUrl,
    scenario: &Scenario,
    deliveries: &[Incoming],
    acked: &[(usize, Acknowledgement)],
    serial_audit: bool,
) -> Result<Vec<String>, DrillError> {
    let fail = |error| store_error(url, error);
    let mut failures = Vec::new();
    let integrity = store
        .database()
        .integrity()
        .map_err(|error| fail(error.into()))?;
    if !integrity.starts_with("ok") {
        failures.push(format!("integrity_check: {integrity}"));
    }
    let loaded = match store.load_all() {
        Ok(loaded) => loaded,
        Err(error) => {
            failures.push(format!("the stored state does not load: {error}"));
            return Ok(failures);
        }
    };
    let recorded = recorded_decisions(store, url)?;
    // Decided audit entries by content key.
    let audit = query(
        store,
        url,
        "SELECT seq, entry, delivery, event_id, content_hash, card_id, decision, previous, \
         version, state FROM audit ORDER BY seq",
    )?;
    let decided = decisions_by_key(&audit, &["decided"]);
    for (key, decisions) in &decided {
        if decisions.len() > 1 {
            failures.push(format!(
                "{} decided {} times: {decisions:?}",
                key.0
                    .clone()
                    .unwrap_or_else(|| format!("delivery-{}", key.1)),
                decisions.len()
            ));
        }
    }
    // Every decision each content has had, in commit order: the first decision, then
    // what reconciliations re-evaluated it to.
    let history = decisions_by_key(&audit, &["decided", "re_evaluated"]);
    let mut catalog = Catalog::new();
    for (index, ack) in acked {
        let key = content_key(&mut catalog, &deliveries[*index]);
        let name = key
            .0
            .clone()
            .unwrap_or_else(|| format!("delivery-{}", deliveries[*index].delivery));
        if let Some(problem) = ack_problem(ack, &key, &recorded, &decided, &history) {
            failures.push(format!("delivery {} ({name}) {problem}", ack.delivery));
        }
    }
    moved_back(&audit, &mut failures);
    counters_disagree(store, url, &loaded, &mut failures)?;
    if serial_audit {
        failures.extend(replay_audit(scenario, &audit, store, url, &loaded)?);
    }
    Ok(failures)
}

/// A query of the drilled database, its failure the database's.
fn query(store: &mut Store, url: &DbUrl, sql: &str) -> Result<Vec<Vec<Val>>, DrillError> {
    store
        .database()
        .query(sql, &[])
        .map_err(|error| store_error(url, error.into()))
}

/// Recorded decisions by content key.
fn recorded_decisions(
    store: &mut Store,
    url: &DbUrl,
) -> Result<BTreeMap<(Option<String>, String), String>, DrillError> {
    let mut recorded: BTreeMap<(Option<String>, String), String> = BTreeMap::new();
    for row in query(
        store,
        url,
        "SELECT event_id, content_hash, decision FROM records",
    )? {
        let id = row[0].text().map(str::to_owned);
        let hash = row[1].text().unwrap_or_default().to_owned();
        recorded.insert((id, hash), row[2].text().unwrap_or_default().to_owned());
    }
    for row in query(store, url, "SELECT delivery, decision FROM anonymous")? {
        let number = row[0].int().unwrap_or(-1).to_string();
        recorded.insert((None, number), row[1].text().unwrap_or_default().to_owned());
    }
    Ok(recorded)
}

/// The decisions of the audit rows with one of these entries, by content key, in commit
/// order.
fn decisions_by_key(
    audit: &[Vec<Val>],
    entries: &[&str],
) -> BTreeMap<(Option<String>, String), Vec<String>> {
    let mut decisions: BTreeMap<(Option<String>, String), Vec<String>> = BTreeMap::new();
    for row in audit
        .iter()
        .filter(|row| row[1].text().is_some_and(|entry| entries.contains(&entry)))
    {
        let key = match row[3].text() {
            Some(id) => (
                Some(id.to_owned()),
                row[4].text().unwrap_or_default().to_owned(),
            ),
            None => (None, row[2].int().unwrap_or(-1).to_string()),
        };
        decisions
            .entry(key)
            .or_default()
            .push(row[6].text().unwrap_or_default().to_owned());
    }
    decisions
}

/// Cards never move back.
fn moved_back(audit: &[Vec<Val>], failures: &mut Vec<String>) {
    let mut versions: BTreeMap<String, u64> = BTreeMap::new();
    for row in audit.iter().filter(|row| row[1].text() == Some("card")) {
        let card = row[5].text().unwrap_or_default().to_owned();
        let version = row[8].int().unwrap_or(0) as u64;
        if let Some(&before) = versions.get(&card) {
            if version < before {
                failures.push(format!(
                    "{card} moved back from v{before} to v{version} (audit #{:?})",
                    row[0].int()
                ));
            }
        }
        versions.insert(card, version);
    }
}

/// Counters agree with the applied records.
fn counters_disagree(
    store: &mut Store,
    url: &DbUrl,
    loaded: &Loaded,
    failures: &mut Vec<String>,
) -> Result<(), DrillError> {
    let mut applied: BTreeMap<String, i64> = BTreeMap::new();
    for row in query(
        store,
        url,
        "SELECT object_id, COUNT(*) FROM records WHERE decision = 'applied' GROUP BY object_id",
    )? {
        applied.insert(
            row[0].text().unwrap_or_default().to_owned(),
            row[1].int().unwrap_or(0),
        );
    }
    for (card, &(event, _)) in &loaded.counters {
        let count = applied.get(card).copied().unwrap_or(0);
        if count != event {
            failures.push(format!(
                "{card}: {event} event replacement(s) counted but {count} applied record(s)"
            ));
        }
    }
    Ok(())
}

/// What is wrong with one acknowledgement the sender got, if anything. Exact: a new
/// decision must be the one the audit recorded first for that content; a duplicate must
/// name a decision that content had when it was answered (its first, or one a
/// reconciliation re-evaluated it to); the `ack` must be the one that decision gives; a
/// rejection must have left no record.
fn ack_problem(
    ack: &Acknowledgement,
    key: &(Option<String>, String),
    recorded: &BTreeMap<(Option<String>, String), String>,
    decided: &BTreeMap<(Option<String>, String), Vec<String>>,
    history: &BTreeMap<(Option<String>, String), Vec<String>>,
) -> Option<String> {
    if ack.is_rejected() {
        return recorded
            .contains_key(key)
            .then(|| "was rejected but a decision is recorded".to_owned());
    }
    if !recorded.contains_key(key) {
        return Some(format!(
            "was acknowledged `{}` ({}) but no decision is recorded",
            ack.ack, ack.decision
        ));
    }
    let first = decided.get(key).and_then(|list| list.first());
    let answered = if ack.decision == "duplicate" {
        let Some(original) = &ack.original_decision else {
            return Some("was answered `duplicate` without the decision it matched".into());
        };
        let had = history.get(key).is_some_and(|list| list.contains(original));
        if !had {
            return Some(format!(
                "was answered a duplicate of `{original}` but that content was decided {:?}",
                history.get(key)
            ));
        }
        original
    } else {
        if first != Some(&ack.decision) {
            return Some(format!(
                "was answered `{}` but the audit decided {first:?}",
                ack.decision
            ));
        }
        &ack.decision
    };
    let expected = decision_of(answered).map(|decision| decision.ack().name());
    (expected != Some(ack.ack.as_str())).then(|| {
        format!(
            "was acknowledged `{}` but its decision `{answered}` acknowledges {expected:?}",
            ack.ack
        )
    })
}

/// Replays the audit trail, in commit order, through the SPEC receiver: every decision
/// and reconciliation it records must be what the SPEC receiver decides at that point, and
/// the end must be the stored cards.
fn replay_audit(
    scenario: &Scenario,
    audit: &[Vec<Val>],
    store: &mut Store,
    url: &DbUrl,
    loaded: &crate::store::Loaded,
) -> Result<Vec<String>, DrillError> {
    let contents = stored_contents(store, url)?;
    let mut catalog = Catalog::new();
    let initial: Vec<_> = scenario
        .raw
        .initial
        .iter()
        .map(|(name, card)| {
            let state = catalog.state(&Value::Object(card.state.clone()));
            (catalog.sym(name), Card::new(card.version, state))
        })
        .collect();
    let mut receiver = Receiver::new(initial);
    let mut failures = Vec::new();
    for row in audit {
        let seq = row[0].int().unwrap_or(0);
        match row[1].text() {
            Some(entry @ ("decided" | "duplicate")) => {
                failures.extend(replay_delivery(
                    row,
                    entry,
                    seq,
                    &contents,
                    &mut catalog,
                    &mut receiver,
                ));
            }
            Some("reconciled") => {
                failures.extend(replay_reconciliation(row, seq, &mut catalog, &mut receiver));
            }
            _ => {}
        }
    }
    let replayed = cards(&catalog, &receiver);
    let stored = cards(&loaded.catalog, &loaded.receiver);
    if replayed != stored {
        failures.push(format!(
            "the audit trail replayed ends in {replayed:?} but the store holds {stored:?}"
        ));
    }
    Ok(failures)
}

/// A decision or duplicate of the audit trail, delivered to the SPEC receiver: what is
/// wrong with it, if anything.
fn replay_delivery(
    row: &[Val],
    entry: &str,
    seq: i64,
    contents: &BTreeMap<(Option<String>, String), String>,
    catalog: &mut Catalog,
    receiver: &mut Receiver,
) -> Option<String> {
    let delivery = row[2].int().unwrap_or(0) as u32;
    let key = match row[3].text() {
        Some(id) => (
            Some(id.to_owned()),
            row[4].text().unwrap_or_default().to_owned(),
        ),
        None => (None, delivery.to_string()),
    };
    let Some(text) = contents.get(&key) else {
        return Some(format!("audit #{seq}: {entry} of {key:?} has no record"));
    };
    let value: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let event = catalog.event(&value);
    let answer = receiver.deliver(Spec, delivery, None, &event);
    let expected = match answer.verdict {
        Verdict::Decided(decision) => (decision.name(), None),
        Verdict::Duplicate(of) => ("duplicate", Some(of.name())),
    };
    let actual = (row[6].text().unwrap_or_default(), row[7].text());
    (expected.0 != actual.0 || (entry == "duplicate" && expected.1 != actual.1)).then(|| {
        format!(
            "audit #{seq}: delivery {delivery} recorded {actual:?} where the SPEC receiver, in commit order, decides {expected:?}"
        )
    })
}

/// A reconciliation of the audit trail, run by the SPEC receiver: what is wrong with it, if
/// anything.
fn replay_reconciliation(
    row: &[Val],
    seq: i64,
    catalog: &mut Catalog,
    receiver: &mut Receiver,
) -> Option<String> {
    let card = catalog.sym(row[5].text().unwrap_or_default());
    let state: Value = serde_json::from_str(row[9].text().unwrap_or("{}")).unwrap_or(json!({}));
    let snapshot = Snapshot {
        object_id: card,
        version: row[8].int().unwrap_or(0) as u64,
        state: catalog.state(&state),
    };
    let outcome = receiver.reconcile(Spec, &snapshot).outcome;
    (Some(outcome.name()) != row[6].text()).then(|| {
        format!(
            "audit #{seq}: reconciliation recorded {:?} where the SPEC receiver gives {}",
            row[6].text(),
            outcome.name()
        )
    })
}

/// The stored envelope of each content key, as text.
fn stored_contents(
    store: &mut Store,
    url: &DbUrl,
) -> Result<BTreeMap<(Option<String>, String), String>, DrillError> {
    let mut contents: BTreeMap<(Option<String>, String), String> = BTreeMap::new();
    for row in query(
        store,
        url,
        "SELECT event_id, content_hash, content FROM records",
    )? {
        contents.insert(
            (
                row[0].text().map(str::to_owned),
                row[1].text().unwrap_or_default().to_owned(),
            ),
            row[2].text().unwrap_or_default().to_owned(),
        );
    }
    for row in query(store, url, "SELECT delivery, content FROM anonymous")? {
        contents.insert(
            (None, row[0].int().unwrap_or(-1).to_string()),
            row[1].text().unwrap_or_default().to_owned(),
        );
    }
    Ok(contents)
}

/// The cards of a receiver by name: version, state, paused.
fn cards(catalog: &Catalog, receiver: &Receiver) -> BTreeMap<String, (u64, Value, bool)> {
    receiver
        .cards()
        .iter()
        .map(|(id, card)| {
            (
                catalog.name(id).to_owned(),
                (
                    card.version,
                    catalog.state_value(card.state).clone(),
                    card.paused,
                ),
            )
        })
        .collect()
}

/// The store's end against the SPEC receiver's end state for the fixture (replay's default
/// order): the cards, the paused cards and the unresolved inputs; with `counts`, the
/// replacement counters too (the crash drill keeps the fixture's order of first decisions).
fn compare_with_spec(
    store: &mut Store,
    url: &DbUrl,
    scenario: &Scenario,
    counts: bool,
) -> Result<Vec<String>, DrillError> {
    let spec = replay(scenario, Spec, "spec");
    let ours = store.report().map_err(|error| store_error(url, error))?;
    let mut failures = Vec::new();
    if ours.final_cards != spec.final_cards {
        failures.push(format!(
            "final cards {} differ from SPEC's {}",
            serde_json::to_string(&ours.final_cards).unwrap_or_default(),
            serde_json::to_string(&spec.final_cards).unwrap_or_default()
        ));
    }
    if ours.paused != spec.paused {
        failures.push(format!("paused {:?}, SPEC {:?}", ours.paused, spec.paused));
    }
    if ours.unresolved != spec.unresolved {
        failures.push(format!(
            "unresolved {:?}, SPEC {:?}",
            ours.unresolved, spec.unresolved
        ));
    }
    if counts && ours.replacements != spec.replacements {
        failures.push(format!(
            "replacements {:?}, SPEC {:?}",
            ours.replacements, spec.replacements
        ));
    }
    Ok(failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(decision: &str, ack: &str, original: Option<&str>) -> Acknowledgement {
        Acknowledgement {
            delivery: 1,
            event_id: Some("e-1".into()),
            decision: decision.into(),
            ack: ack.into(),
            original_decision: original.map(str::to_owned),
            reason: None,
        }
    }

    #[test]
    fn an_acknowledgement_must_carry_exactly_its_recorded_decision() {
        let key = (Some("e-1".to_owned()), "h".to_owned());
        let one = |decision: &str| BTreeMap::from([(key.clone(), decision.to_owned())]);
        let list = |decisions: &[&str]| {
            BTreeMap::from([(
                key.clone(),
                decisions
                    .iter()
                    .map(|d| (*d).to_owned())
                    .collect::<Vec<_>>(),
            )])
        };
        let (recorded, decided) = (one("held_paused"), list(&["held_paused"]));
        let history = list(&["held_paused", "applied"]);
        let check = |ack: &Acknowledgement| ack_problem(ack, &key, &recorded, &decided, &history);
        assert_eq!(check(&ack("held_paused", "held", None)), None);
        // Both are `held`, but not the same decision.
        assert!(check(&ack("conflict_same_version", "held", None)).is_some());
        assert!(check(&ack("held_paused", "applied", None)).is_some());
        assert_eq!(check(&ack("duplicate", "applied", Some("applied"))), None);
        assert!(check(&ack("duplicate", "held", Some("held_unknown_object"))).is_some());
        assert!(check(&ack("duplicate", "held", None)).is_some());
        let mut rejected = ack("rejected", "rejected", None);
        rejected.reason = Some("too long".into());
        assert!(
            check(&rejected).is_some(),
            "a rejection must leave no record"
        );
        let none_recorded = BTreeMap::new();
        let none_decided = BTreeMap::new();
        let absent = |ack: &Acknowledgement| {
            ack_problem(ack, &key, &none_recorded, &none_decided, &none_decided)
        };
        assert_eq!(absent(&rejected), None);
        assert!(absent(&ack("applied", "applied", None)).is_some());
    }
}
