//! Fuzz target `envelope`: arbitrary bytes that parse as JSON, delivered as an event envelope.
//!
//! The bytes go through `Catalog::event` (which must accept any JSON) and
//! `Receiver::deliver` under the SPEC policy, on a receiver that knows two cards (`card-7`
//! and `card-8`, as in fixtures/B62-15-events.json). Then come redeliveries of the same
//! bytes (plain and re-serialised), deliveries of mutated envelopes (version up and down,
//! other state, other card, no or another event id, ...), reconciliations from authority
//! snapshots of every card at versions behind, equal to and ahead of the card, and identity
//! expiry. After every step: no panic, `Receiver::invariants()` is Ok, a redelivery is a
//! `Duplicate` of the recorded decision that leaves the receiver unchanged, a decision
//! other than `applied` changes no card's version or state, and no event creates a card.

#![no_main]

use arrival::card::policy::Spec;
use arrival::card::wire::{Catalog, Event, Snapshot, Sym, Version, SUPPORTED_TYPE};
use arrival::card::receiver::{Card, Decision, Outcome, Receiver, Verdict};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Receive times start here (2024-01-01T08:00:00Z); delivery N arrives N seconds later.
const T0: i64 = 1_704_096_000;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    run(data, &value);
});

struct Harness {
    catalog: Catalog,
    receiver: Receiver,
    next_delivery: u32,
    /// Every delivery made, for redelivery after reconciliation.
    delivered: Vec<(u32, Event)>,
}

fn run(data: &[u8], value: &Value) {
    let mut catalog = Catalog::new();
    let card_7 = catalog.sym("card-7");
    let card_8 = catalog.sym("card-8");
    let state_7 = catalog.state(&json!({"stage": "queued", "label": "Map"}));
    let state_8 = catalog.state(&json!({"stage": "ready", "label": "Chart"}));
    let receiver = Receiver::new([
        (card_7, Card::new(10, state_7)),
        (card_8, Card::new(3, state_8)),
    ]);
    let mut h = Harness {
        catalog,
        receiver,
        next_delivery: 1,
        delivered: Vec::new(),
    };

    // The bytes as sent, then the same bytes again under a new delivery number.
    let event = h.deliver(value);
    let again: Value = serde_json::from_slice(data).expect("parsed once already");
    assert_eq!(
        h.catalog.event(&again),
        event,
        "the same bytes parse to the same event"
    );
    h.deliver(&again);

    // Re-serialised (pretty, so whitespace differs): equal parsed values are the same content.
    let pretty = serde_json::to_vec_pretty(value).expect("a Value serialises");
    if let Ok(reparsed) = serde_json::from_slice::<Value>(&pretty) {
        if reparsed == *value {
            assert_eq!(
                h.catalog.event(&reparsed).content,
                event.content,
                "whitespace changed the content id"
            );
            h.deliver(&reparsed);
        }
    }

    // Mutated envelopes.
    for mutated in mutations(value) {
        h.deliver(&mutated);
    }
    // And the original once more, after all that.
    h.deliver(value);

    // Reconciliation from authority snapshots, each from the state after the deliveries.
    let base = h.receiver.clone();
    let mut cards: Vec<Sym> = vec![card_7, card_8];
    cards.extend(h.delivered.iter().filter_map(|(_, event)| event.object_id));
    cards.sort();
    cards.dedup();
    let other_state = h.catalog.state(&json!({"stage": "authority"}));
    for &card in &cards {
        for snapshot in snapshots(&base, card, other_state) {
            h.receiver = base.clone();
            h.reconcile(&snapshot);
            h.redeliver_all();
        }
    }
    // Every card in turn on one receiver: the usual end of a run.
    h.receiver = base.clone();
    for &card in &cards {
        let snapshot = match h.receiver.cards().get(&card) {
            Some(known) => Snapshot {
                object_id: card,
                version: known.version.saturating_add(1),
                state: other_state,
            },
            None => Snapshot {
                object_id: card,
                version: 0,
                state: other_state,
            },
        };
        h.reconcile(&snapshot);
    }
    h.redeliver_all();

    // Identity expiry never breaks the invariants and never forgets a waiting input.
    for (now, retention) in [(T0, 0), (T0 + 3, 1), (i64::MAX, 0), (i64::MIN, u64::MAX)] {
        let mut expired = base.clone();
        let unresolved = expired.unresolved();
        expired.expire(now, retention);
        check_invariants(&expired, "after expire");
        assert_eq!(
            expired.unresolved(),
            unresolved,
            "expire forgot an unresolved input"
        );
        assert_eq!(expired.cards(), base.cards(), "expire changed a card");
        assert_eq!(expired.holds(), base.holds(), "expire changed the holds");
    }
}

impl Harness {
    /// Parses and delivers an envelope under a new delivery number, checks the answer, then
    /// redelivers it (same number, and a new number when it has an event id).
    fn deliver(&mut self, value: &Value) -> Event {
        let event = self.catalog.event(value);
        check_parse(&self.catalog, value, &event);
        let number = self.next_delivery;
        self.next_delivery += 1;
        let received_at = Some(T0 + i64::from(number));
        let before = self.receiver.clone();
        let answer = self.receiver.deliver(Spec, number, received_at, &event);
        check_invariants(&self.receiver, "after a delivery");
        let recorded = self
            .receiver
            .recorded(&event, number)
            .expect("a delivered content is recorded");
        assert_eq!(
            answer.ack,
            answer.verdict.decision().ack(),
            "ack and decision disagree"
        );
        match answer.verdict {
            Verdict::Duplicate(decision) => {
                assert_eq!(self.receiver, before, "a duplicate changed the receiver");
                assert_eq!(decision, recorded, "a duplicate reports another decision");
            }
            Verdict::Decided(decision) => {
                assert_eq!(
                    decision, recorded,
                    "the decision recorded is not the one given"
                );
                check_cards(&before, &self.receiver, &event, decision);
            }
        }
        self.delivered.push((number, event));
        self.redeliver(number, &event);
        if event.event_id.is_some() {
            // Identity is the event id, not the delivery number.
            let other = self.next_delivery;
            self.next_delivery += 1;
            self.redeliver(other, &event);
        }
        event
    }

    /// A delivery of content already recorded: a duplicate of the recorded decision, with
    /// no effect at all.
    fn redeliver(&mut self, number: u32, event: &Event) {
        let before = self.receiver.clone();
        let recorded = before
            .recorded(event, number)
            .expect("redelivered content is recorded");
        let received_at = Some(T0 + i64::from(number) + 1000);
        let answer = self.receiver.deliver(Spec, number, received_at, event);
        assert_eq!(
            answer.verdict,
            Verdict::Duplicate(recorded),
            "a redelivery is not a duplicate of the recorded decision"
        );
        assert_eq!(answer.ack, recorded.ack());
        assert_eq!(self.receiver, before, "a redelivery changed the receiver");
        check_invariants(&self.receiver, "after a redelivery");
    }

    fn redeliver_all(&mut self) {
        for (number, event) in self.delivered.clone() {
            self.redeliver(number, &event);
        }
    }

    fn reconcile(&mut self, snapshot: &Snapshot) {
        let before = self.receiver.clone();
        let known = before.cards().get(&snapshot.object_id).copied();
        let result = self.receiver.reconcile(Spec, snapshot);
        check_invariants(&self.receiver, "after a reconciliation");
        let card = self.receiver.cards().get(&snapshot.object_id).copied();
        match result.outcome {
            Outcome::RefusedBehind => {
                let known = known.expect("refused: the card was known");
                assert!(
                    snapshot.version < known.version,
                    "refused an authority not behind"
                );
                assert_eq!(
                    self.receiver, before,
                    "a refused snapshot changed the receiver"
                );
                assert!(result.settled.is_empty());
            }
            outcome => {
                match (outcome, known) {
                    (Outcome::Created, None) => {}
                    (Outcome::Confirmed, Some(known)) => {
                        assert_eq!(
                            (known.version, known.state),
                            (snapshot.version, snapshot.state)
                        )
                    }
                    (Outcome::Replaced, Some(known)) => {
                        assert!(snapshot.version >= known.version);
                        assert!((known.version, known.state) != (snapshot.version, snapshot.state));
                    }
                    (outcome, known) => panic!("outcome {outcome:?} for a card {known:?}"),
                }
                let card = card.expect("a reconciled card exists");
                // Held events re-evaluated against the authority may move it further on,
                // never back.
                assert!(
                    card.version >= snapshot.version,
                    "card behind its authority"
                );
                if card.version == snapshot.version {
                    assert_eq!(card.state, snapshot.state, "authority version, other state");
                }
            }
        }
        // Reconciliation never touches another card.
        for (id, other) in before.cards() {
            if id != snapshot.object_id {
                assert_eq!(
                    self.receiver.cards().get(&id),
                    Some(other),
                    "another card changed"
                );
            }
        }
        assert_eq!(
            self.receiver.cards().len(),
            before.cards().len() + usize::from(known.is_none()),
        );
    }
}

/// Card snapshots to reconcile `card` with: behind, equal (same and other state) and ahead
/// of the receiver's card, or at a few versions when the card is unknown.
fn snapshots(
    receiver: &Receiver,
    card: Sym,
    other_state: arrival::card::wire::StateId,
) -> Vec<Snapshot> {
    let at = |version: u64, state| Snapshot {
        object_id: card,
        version,
        state,
    };
    match receiver.cards().get(&card) {
        Some(known) => {
            let mut list = vec![
                at(known.version, known.state),
                at(known.version, other_state),
                at(known.version.saturating_add(1), other_state),
                at(u64::MAX, known.state),
            ];
            if known.version > 0 {
                list.push(at(known.version - 1, other_state));
            }
            list
        }
        None => vec![
            at(0, other_state),
            at(5, other_state),
            at(u64::MAX, other_state),
        ],
    }
}

/// `Catalog::event` reads exactly what the envelope says.
fn check_parse(catalog: &Catalog, value: &Value, event: &Event) {
    let text = |key: &str| value.get(key).and_then(Value::as_str);
    // Envelopes are interned by their canonical text (serde_json's, keys sorted).
    let canonical = value.to_string();
    assert_eq!(
        catalog.content_text(event.content),
        canonical,
        "content is not the envelope"
    );
    // Read back from that text. Not always `value` itself: serde_json's default float
    // parsing is not exact, so a float may come back one ulp off. Values nested deeper than
    // serde_json's recursion limit (only the harness builds those) are not read back.
    if let Ok(reparsed) = serde_json::from_str::<Value>(&canonical) {
        assert_eq!(catalog.content_value(event.content), reparsed);
    }
    assert_eq!(event.event_id.map(|id| catalog.name(id)), text("event_id"));
    assert_eq!(
        event.object_id.map(|id| catalog.name(id)),
        text("object_id")
    );
    assert_eq!(event.supported, text("type") == Some(SUPPORTED_TYPE));
    let version = value
        .as_object()
        .and_then(|object| object.get("object_version"));
    let expected = match version {
        None => Version::Missing,
        Some(field) => field.as_u64().map_or(Version::Invalid, Version::Valid),
    };
    assert_eq!(event.version, expected);
    match (event.state, value.get("state")) {
        (Some(state), Some(field)) => {
            assert!(field.is_object());
            assert_eq!(catalog.state_value(state), field);
        }
        (None, field) => assert!(!field.is_some_and(Value::is_object), "object state dropped"),
        (Some(_), None) => panic!("a state out of nowhere"),
    }
}

/// Only an applied decision replaces a card, exactly with the event's version and state; no
/// decision creates or removes a card.
fn check_cards(before: &Receiver, after: &Receiver, event: &Event, decision: Decision) {
    let contents = |receiver: &Receiver| -> BTreeMap<Sym, (u64, arrival::card::wire::StateId)> {
        receiver
            .cards()
            .iter()
            .map(|(id, card)| (id, (card.version, card.state)))
            .collect()
    };
    let (old, new) = (contents(before), contents(after));
    assert_eq!(
        old.keys().collect::<Vec<_>>(),
        new.keys().collect::<Vec<_>>(),
        "a delivery created or removed a card"
    );
    if decision == Decision::Applied {
        let object = event.object_id.expect("applied: has an object id");
        let Version::Valid(version) = event.version else {
            panic!("applied an event without a valid version");
        };
        let state = event.state.expect("applied: has a state");
        let (old_version, _) = old[&object];
        assert!(
            version > old_version,
            "applied a version not above the card's"
        );
        assert_eq!(
            new[&object],
            (version, state),
            "applied but the card differs"
        );
        assert!(!before.cards()[&object].paused, "applied to a paused card");
        for (id, card) in &old {
            if *id != object {
                assert_eq!(new.get(id), Some(card), "applied to another card");
            }
        }
    } else {
        assert_eq!(old, new, "{decision} changed a card");
    }
}

fn check_invariants(receiver: &Receiver, when: &str) {
    if let Err(broken) = receiver.invariants() {
        panic!("receiver invariant broken {when}: {broken}");
    }
}

/// Envelopes one edit away from `value`, each a classic way a redelivery differs.
fn mutations(value: &Value) -> Vec<Value> {
    let Some(object) = value.as_object() else {
        // Not an object: wrap it as the state of an otherwise valid envelope.
        return vec![json!({
            "event_id": "fuzz-wrapped", "object_id": "card-7", "object_version": 11,
            "type": SUPPORTED_TYPE, "state": {"wrapped": value},
        })];
    };
    let mut out = Vec::new();
    let mut with = |edit: &dyn Fn(&mut Map<String, Value>)| {
        let mut copy = object.clone();
        edit(&mut copy);
        out.push(Value::Object(copy));
    };
    if let Some(version) = object.get("object_version").and_then(Value::as_u64) {
        with(&|o| {
            o.insert("object_version".into(), json!(version.wrapping_add(1)));
        });
        with(&|o| {
            o.insert("object_version".into(), json!(version.saturating_sub(1)));
        });
    } else {
        with(&|o| {
            o.insert("object_version".into(), json!(11));
        });
    }
    with(&|o| {
        o.remove("object_version");
    });
    with(&|o| {
        o.insert("object_version".into(), json!(-1));
    });
    with(&|o| {
        let mut state = o
            .get("state")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        state.insert("fuzz".into(), json!(true));
        o.insert("state".into(), Value::Object(state));
    });
    with(&|o| {
        o.insert("state".into(), json!("not an object"));
    });
    with(&|o| {
        let card = match o.get("object_id").and_then(Value::as_str) {
            Some("card-7") => "card-8",
            _ => "card-7",
        };
        o.insert("object_id".into(), json!(card));
    });
    with(&|o| {
        o.insert("object_id".into(), json!("card-unknown"));
    });
    with(&|o| {
        o.remove("event_id");
    });
    with(&|o| {
        o.insert("event_id".into(), json!("fuzz-other-id"));
    });
    with(&|o| {
        o.insert("type".into(), json!(SUPPORTED_TYPE));
    });
    with(&|o| {
        o.insert("type".into(), json!("card.deleted"));
    });
    out
}
