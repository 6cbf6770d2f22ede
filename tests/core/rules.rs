//! One test per rule and per precedence edge of the card contract's decision function, its
//! reconciliation and the retention of identity records, run against the real public API:
//! envelopes written as JSON, parsed by `Catalog::event`, decided by `Receiver::deliver`
//! under the SPEC policy, reconciled by `Receiver::reconcile`.
//!
//! Every helper call also checks two things SPEC asks of every delivery: the
//! acknowledgement is given only once the decision is recorded (the receiver answers
//! `recorded()` with it), and the receiver's internal invariants hold.

use arrival::card::policy::{Mutant, Spec};
use arrival::card::receiver::{
    Ack, Card, Decision, Delivered, HoldKey, HoldReason, InputRef, Outcome, Receiver, Reconciled,
    Record, RecordedAt, Settlement, Standing, Verdict,
};
use arrival::card::wire::{Catalog, Snapshot, Sym};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

// ---------------------------------------------------------------------------------------
// The bench
// ---------------------------------------------------------------------------------------

/// T of the B62-15 fixture, 2024-01-01T08:00:00Z, in Unix seconds.
const T: i64 = 1_704_096_000;
const T_TEXT: &str = "2024-01-01T08:00:00Z";
const DAY: u64 = 86_400;

const HELD_MALFORMED: Decision = Decision::Held(HoldReason::Malformed);
const HELD_UNSUPPORTED_TYPE: Decision = Decision::Held(HoldReason::UnsupportedType);
const HELD_UNKNOWN_OBJECT: Decision = Decision::Held(HoldReason::UnknownObject);
const HELD_PAUSED: Decision = Decision::Held(HoldReason::Paused);
const HELD_MISSING_VERSION: Decision = Decision::Held(HoldReason::MissingVersion);
const HELD_INVALID_VERSION: Decision = Decision::Held(HoldReason::InvalidVersion);

/// A catalog and a receiver under the SPEC policy, with a delivery counter and a clock.
struct Bench {
    catalog: Catalog,
    receiver: Receiver,
    /// The number of the last delivery made.
    last: u32,
    /// The receive time of the next delivery (one second later each time).
    now: i64,
}

impl Bench {
    /// A receiver that knows these cards, none paused.
    fn new(cards: &[(&str, u64, Value)]) -> Bench {
        let mut catalog = Catalog::new();
        let initial: Vec<(Sym, Card)> = cards
            .iter()
            .map(|(name, version, state)| {
                (catalog.sym(name), Card::new(*version, catalog.state(state)))
            })
            .collect();
        Bench {
            catalog,
            receiver: Receiver::new(initial),
            last: 0,
            now: T + 1,
        }
    }

    /// The B62-15 board: card-7 v10 queued/Map, card-8 v3 ready/Chart.
    fn board() -> Bench {
        Bench::new(&[
            ("card-7", 10, st("queued", "Map")),
            ("card-8", 3, st("ready", "Chart")),
        ])
    }

    /// Runs the rows in order, the only place the receiver's `deliver` and `reconcile` are
    /// called: after each row, under SPEC, the acknowledgement was given only once its
    /// decision was recorded and the receiver's invariants hold; then the row's own
    /// expectations (answer, outcome, cards, unchanged) are checked. Returns the answers.
    #[track_caller]
    fn check(&mut self, rows: Vec<Row>) -> Answers {
        let mut answers = Vec::with_capacity(rows.len());
        for (index, row) in rows.into_iter().enumerate() {
            let before = row.unchanged.then(|| self.receiver.clone());
            let at = format!("row {} ({}){}", index + 1, row.input, row.note);
            let answer = match row.input {
                Input::Deliver(raw) => {
                    self.last += 1;
                    let number = self.last;
                    let received_at = self.tick();
                    Answer::Delivered(self.send(row.mutant, number, received_at, &raw))
                }
                Input::Redeliver(number, raw) => {
                    let received_at = self.tick();
                    Answer::Delivered(self.send(row.mutant, number, received_at, &raw))
                }
                Input::DeliverAt(number, received_at, raw) => {
                    Answer::Delivered(self.send(row.mutant, number, received_at, &raw))
                }
                Input::Reconcile(card, version, state) => {
                    let snapshot = Snapshot {
                        object_id: self.catalog.sym(card),
                        version,
                        state: self.catalog.state(&state),
                    };
                    Answer::Reconciled(match row.mutant {
                        None => {
                            let reconciled = self.receiver.reconcile(Spec, &snapshot);
                            self.invariants();
                            reconciled
                        }
                        Some(mutant) => self.receiver.reconcile(Some(mutant), &snapshot),
                    })
                }
            };
            match (&answer, row.answer, row.outcome) {
                (Answer::Delivered(delivered), Some(expected), _) => {
                    assert_eq!(delivered, &expected, "{at}")
                }
                (Answer::Reconciled(reconciled), _, Some(expected)) => {
                    assert_eq!(reconciled.outcome, expected, "{at}")
                }
                (_, None, None) => {}
                _ => panic!("{at}: the expected answer does not fit the input"),
            }
            for (name, version, state, paused) in row.cards {
                self.assert_card(name, version, state, paused);
            }
            if let Some(before) = before {
                assert_eq!(self.receiver, before, "{at}: changes nothing");
            }
            answers.push(answer);
        }
        Answers(answers)
    }

    /// The receive time of the next delivery; the clock moves one second.
    fn tick(&mut self) -> Option<i64> {
        let at = self.now;
        self.now += 1;
        Some(at)
    }

    /// One delivery under SPEC (checked) or a seeded mutant (not checked).
    fn send(
        &mut self,
        mutant: Option<Mutant>,
        number: u32,
        received_at: Option<i64>,
        raw: &Value,
    ) -> Delivered {
        let event = self.catalog.event(raw);
        if let Some(mutant) = mutant {
            return self
                .receiver
                .deliver(Some(mutant), number, received_at, &event);
        }
        let delivered = self.receiver.deliver(Spec, number, received_at, &event);
        {
            assert_eq!(
                self.receiver.recorded(&event, number),
                Some(delivered.verdict.decision()),
                "an acknowledgement is given only once its decision is recorded"
            );
            assert_eq!(delivered.ack, delivered.verdict.decision().ack());
            self.invariants();
        }
        delivered
    }

    fn invariants(&self) {
        if let Err(broken) = self.receiver.invariants() {
            panic!("receiver invariant broken: {broken}");
        }
    }

    fn sym(&self, name: &str) -> Sym {
        self.catalog
            .find(name)
            .unwrap_or_else(|| panic!("{name} was never interned"))
    }

    fn card(&self, name: &str) -> Option<Card> {
        self.catalog
            .find(name)
            .and_then(|sym| self.receiver.cards().get(&sym).copied())
    }

    fn is_known(&self, name: &str) -> bool {
        self.card(name).is_some()
    }

    /// Asserts a card's version, complete state and paused flag.
    #[track_caller]
    fn assert_card(&self, name: &str, version: u64, state: Value, paused: bool) {
        let card = self
            .card(name)
            .unwrap_or_else(|| panic!("{name} is not a known card"));
        assert_eq!(
            (
                card.version,
                self.catalog.state_value(card.state),
                card.paused
            ),
            (version, &state, paused),
            "{name}: (version, state, paused)"
        );
    }

    /// The paused cards, by name.
    fn paused(&self) -> Vec<&str> {
        self.receiver
            .paused()
            .map(|sym| self.catalog.name(sym))
            .collect()
    }

    /// Record `index` of event id `event` (0 is the first record).
    fn key(&self, event: &str, index: u32) -> HoldKey {
        HoldKey::Record {
            event: self.sym(event),
            index,
        }
    }

    fn record(&self, key: HoldKey) -> Record {
        *self.receiver.record(key)
    }

    /// The holds filed under a card (`None`: inputs without a usable object id).
    fn holds(&self, card: Option<&str>) -> Vec<HoldKey> {
        let bucket = card.map(|name| self.sym(name));
        self.receiver
            .holds()
            .get(&bucket)
            .cloned()
            .unwrap_or_default()
    }

    fn holds_by_card(&self) -> BTreeMap<Option<Sym>, Vec<HoldKey>> {
        (self.receiver.holds().iter())
            .map(|(bucket, keys)| (bucket, keys.clone()))
            .collect()
    }

    fn unresolved(&self) -> BTreeSet<InputRef> {
        self.receiver.unresolved()
    }

    /// Input references: event ids and delivery numbers.
    fn inputs(&self, events: &[&str], deliveries: &[u32]) -> BTreeSet<InputRef> {
        events
            .iter()
            .map(|name| InputRef::Event(self.sym(name)))
            .chain(deliveries.iter().map(|&number| InputRef::Delivery(number)))
            .collect()
    }

    fn cards(&self) -> BTreeMap<Sym, Card> {
        self.receiver
            .cards()
            .iter()
            .map(|(id, &card)| (id, card))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// Rows: one step of a rule test and what must hold after it
// ---------------------------------------------------------------------------------------

/// What a row sends to the receiver.
enum Input {
    /// A new delivery: the next delivery number, one second after the last.
    Deliver(Value),
    /// The sender delivers delivery `number` again (same number, later receive time).
    Redeliver(u32, Value),
    /// Delivery `number` received at this time (`None`: unknown); the clock stays.
    DeliverAt(u32, Option<i64>, Value),
    /// The authority snapshot `{card, version, state}`.
    Reconcile(&'static str, u64, Value),
}

impl std::fmt::Display for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Input::Deliver(raw) => write!(f, "deliver {raw}"),
            Input::Redeliver(number, raw) => write!(f, "redeliver #{number} {raw}"),
            Input::DeliverAt(number, at, raw) => write!(f, "deliver #{number} at {at:?} {raw}"),
            Input::Reconcile(card, version, state) => {
                write!(f, "reconcile {card} v{version} {state}")
            }
        }
    }
}

/// One row of a rule table: the input, and what the receiver must answer and hold after it.
struct Row {
    input: Input,
    /// A seeded mutant decides instead of SPEC: then no invariant or record check (some
    /// mutants break them on purpose).
    mutant: Option<Mutant>,
    /// The answer to a delivery: verdict and acknowledgement.
    answer: Option<Delivered>,
    /// The outcome of a reconciliation.
    outcome: Option<Outcome>,
    /// Cards after the step: (name, version, complete state, paused).
    cards: Vec<(&'static str, u64, Value, bool)>,
    /// The step changes nothing in the receiver (a duplicate, a refused authority).
    unchanged: bool,
    /// Shown when the row fails.
    note: String,
}

fn row(input: Input) -> Row {
    Row {
        input,
        mutant: None,
        answer: None,
        outcome: None,
        cards: Vec::new(),
        unchanged: false,
        note: String::new(),
    }
}

/// A new delivery of this envelope.
fn deliver(raw: Value) -> Row {
    row(Input::Deliver(raw))
}

/// Delivery `number` again.
fn redeliver(number: u32, raw: Value) -> Row {
    row(Input::Redeliver(number, raw))
}

/// Delivery `number`, received at `received_at`.
fn deliver_at(number: u32, received_at: Option<i64>, raw: Value) -> Row {
    row(Input::DeliverAt(number, received_at, raw))
}

/// The authority snapshot of `card`.
fn reconcile(card: &'static str, version: u64, state: Value) -> Row {
    row(Input::Reconcile(card, version, state))
}

impl Row {
    /// Decided afresh: `decision`, acknowledged `ack`.
    fn decided(mut self, decision: Decision, ack: Ack) -> Row {
        self.answer = Some(decided(decision, ack));
        self
    }

    /// Answered exactly `expected`.
    fn answers(mut self, expected: Delivered) -> Row {
        self.answer = Some(expected);
        self
    }

    /// A duplicate of a record decided `of`, acknowledged `ack`.
    fn duplicate(mut self, of: Decision, ack: Ack) -> Row {
        self.answer = Some(duplicate(of, ack));
        self
    }

    /// The reconciliation's outcome.
    fn outcome(mut self, outcome: Outcome) -> Row {
        self.outcome = Some(outcome);
        self
    }

    /// A card after the step: version, complete state and paused flag.
    fn card(mut self, name: &'static str, version: u64, state: Value, paused: bool) -> Row {
        self.cards.push((name, version, state, paused));
        self
    }

    /// The step leaves the receiver exactly as it was.
    fn unchanged(mut self) -> Row {
        self.unchanged = true;
        self
    }

    /// Decided by a seeded mutant instead of SPEC.
    fn under(mut self, mutant: Mutant) -> Row {
        self.mutant = Some(mutant);
        self
    }

    /// Said when the row fails.
    fn note(mut self, note: impl std::fmt::Display) -> Row {
        self.note = format!(": {note}");
        self
    }
}

/// What the receiver answered, a row at a time.
enum Answer {
    Delivered(Delivered),
    Reconciled(Reconciled),
}

/// The answers of one `check`.
struct Answers(Vec<Answer>);

impl Answers {
    /// The answer of the last row, a delivery.
    fn delivered(&self) -> Delivered {
        match self.0.last() {
            Some(Answer::Delivered(delivered)) => *delivered,
            _ => panic!("the last row is not a delivery"),
        }
    }

    /// The answer of the last row, a reconciliation.
    fn reconciled(self) -> Reconciled {
        match self.0.into_iter().last() {
            Some(Answer::Reconciled(reconciled)) => reconciled,
            _ => panic!("the last row is not a reconciliation"),
        }
    }
}

/// A card state.
fn st(stage: &str, label: &str) -> Value {
    json!({"stage": stage, "label": label})
}

/// A well-formed card.snapshot envelope, occurred at T.
fn snapshot(event_id: &str, card: &str, version: u64, state: Value) -> Value {
    json!({
        "event_id": event_id,
        "object_id": card,
        "object_version": version,
        "occurred_at": T_TEXT,
        "type": "card.snapshot",
        "state": state,
    })
}

/// The envelope with one field set to `value`.
fn with(mut envelope: Value, key: &str, value: Value) -> Value {
    envelope
        .as_object_mut()
        .expect("envelopes are objects")
        .insert(key.to_owned(), value);
    envelope
}

/// The envelope without one field.
fn without(mut envelope: Value, key: &str) -> Value {
    envelope
        .as_object_mut()
        .expect("envelopes are objects")
        .remove(key);
    envelope
}

fn decided(decision: Decision, ack: Ack) -> Delivered {
    Delivered {
        verdict: Verdict::Decided(decision),
        ack,
    }
}

fn duplicate(of: Decision, ack: Ack) -> Delivered {
    Delivered {
        verdict: Verdict::Duplicate(of),
        ack,
    }
}

fn re_evaluated(from: Decision, to: Decision) -> Settlement {
    Settlement::ReEvaluated { from, to }
}

/// Every invalid `object_version`, with a label.
fn invalid_versions() -> Vec<(&'static str, Value)> {
    let text = |raw: &str| serde_json::from_str::<Value>(raw).expect("valid JSON");
    vec![
        ("negative", json!(-1)),
        ("float 12.0", json!(12.0)),
        ("float 12.0 as text", text("12.0")),
        ("float 1.5", json!(1.5)),
        ("string", json!("12")),
        ("null", json!(null)),
        ("bool", json!(true)),
        ("array", json!([12])),
        ("object", json!({"version": 12})),
        ("above u64::MAX", text("18446744073709551616")),
        ("far above u64::MAX", json!(1e30)),
    ]
}

// ---------------------------------------------------------------------------------------
// Rule 1: identity
// ---------------------------------------------------------------------------------------

#[test]
fn a_new_identity_gets_its_first_record_with_the_decision() {
    let mut b = Bench::board();
    let at = b.now;
    b.check(vec![deliver(snapshot(
        "e-201",
        "card-7",
        12,
        st("ready", "Map"),
    ))]);
    let identity = &b.receiver.identities()[&b.sym("e-201")];
    assert_eq!(identity.first.decision, Decision::Applied);
    assert_eq!(identity.first.standing, Standing::Settled);
    assert_eq!(identity.first.recorded_at.get(), Some(at));
    assert!(identity.variants.is_empty());
    assert!(b.receiver.anonymous().is_empty());
}

#[test]
fn duplicate_of_the_first_record_changes_nothing_and_repeats_its_ack() {
    let cases = [
        (
            snapshot("e-201", "card-7", 12, st("ready", "Map")),
            Decision::Applied,
            Ack::Applied,
        ),
        (
            snapshot("e-200", "card-7", 9, st("building", "Map")),
            Decision::Stale,
            Ack::Ignored,
        ),
        (
            snapshot("e-207", "card-7", 10, st("queued", "Map")),
            Decision::Equal,
            Ack::Ignored,
        ),
        (
            snapshot("e-300", "card-99", 1, st("queued", "New")),
            HELD_UNKNOWN_OBJECT,
            Ack::Held,
        ),
        (
            without(
                snapshot("e-204", "card-8", 4, st("archived", "Chart")),
                "object_version",
            ),
            HELD_MISSING_VERSION,
            Ack::Held,
        ),
    ];
    for (envelope, decision, ack) in cases {
        let mut b = Bench::board();
        b.check(vec![
            deliver(envelope.clone())
                .decided(decision, ack)
                .note(format!("{envelope}")), // Another delivery number and a later receive time: transport facts never count.
            deliver(envelope.clone())
                .duplicate(decision, ack)
                .unchanged()
                .note(format!("a duplicate changes nothing: {envelope}")),
            // The sender's own redelivery of the same delivery is a duplicate too.
            redeliver(1, envelope.clone())
                .duplicate(decision, ack)
                .unchanged()
                .note(format!("a duplicate changes nothing: {envelope}")),
        ]);
    }
}

#[test]
fn duplicate_of_a_retained_variant_changes_nothing_and_repeats_its_ack() {
    let mut b = Bench::board();
    let first = snapshot("e-202", "card-7", 13, st("ready", "Map v2"));
    let forge = snapshot("e-202", "card-7", 13, st("ready", "Forge"));
    let anvil = snapshot("e-202", "card-7", 13, st("ready", "Anvil"));
    b.check(vec![
        deliver(first.clone()).decided(Decision::Applied, Ack::Applied),
        deliver(forge.clone()).decided(Decision::ConflictChangedPayload, Ack::Held),
        deliver(anvil.clone()).decided(Decision::ConflictChangedPayload, Ack::Held),
    ]);
    assert_eq!(b.receiver.identities()[&b.sym("e-202")].variants.len(), 2);

    // Duplicates change nothing.
    b.check(vec![
        deliver(forge)
            .duplicate(Decision::ConflictChangedPayload, Ack::Held)
            .unchanged(),
        deliver(anvil)
            .duplicate(Decision::ConflictChangedPayload, Ack::Held)
            .unchanged(),
    ]);
    // Identity precedes pause: the first record's content on the paused card is still a
    // duplicate of its applied record, acknowledged as applied.
    assert!(b.card("card-7").unwrap().paused);
    b.check(vec![deliver(first)
        .duplicate(Decision::Applied, Ack::Applied)
        .unchanged()]);
}

#[test]
fn duplicate_after_reconciliation_repeats_the_recorded_decisions_meaning() {
    let mut b = Bench::board();
    let first = snapshot("e-202", "card-7", 13, st("ready", "Map v2"));
    let variant = snapshot("e-202", "card-7", 13, st("ready", "Forge"));
    let later = snapshot("e-203", "card-7", 14, st("archived", "Map v2"));
    b.check(vec![
        deliver(first.clone()),
        deliver(variant.clone()),
        deliver(later.clone()).decided(HELD_PAUSED, Ack::Held),
        reconcile("card-7", 14, st("archived", "Map v2")).outcome(Outcome::Replaced),
    ]);
    assert_eq!(b.record(b.key("e-203", 0)).decision, Decision::Equal);

    // Duplicates change nothing.
    b.check(vec![
        // The held_paused record was re-evaluated as equal: its duplicate now says ignored.
        deliver(later)
            .duplicate(Decision::Equal, Ack::Ignored)
            .unchanged(),
        // The resolved variant still answers held, and does not pause the card again.
        deliver(variant)
            .duplicate(Decision::ConflictChangedPayload, Ack::Held)
            .unchanged(),
        deliver(first)
            .duplicate(Decision::Applied, Ack::Applied)
            .unchanged(),
    ]);
    assert_eq!(b.record(b.key("e-202", 1)).standing, Standing::Resolved);
    assert!(b.paused().is_empty());
}

#[test]
fn changed_payload_appends_a_variant_holds_it_and_never_overwrites_the_first_record() {
    let mut b = Bench::board();
    b.check(vec![deliver(snapshot(
        "e-202",
        "card-7",
        13,
        st("ready", "Map v2"),
    ))]);
    let first = b.record(b.key("e-202", 0));
    let card_8 = b.card("card-8");

    let variant = snapshot("e-202", "card-7", 13, st("ready", "Forge"));
    b.check(vec![
        deliver(variant.clone()).decided(Decision::ConflictChangedPayload, Ack::Held)
    ]);

    let identity = b.receiver.identities()[&b.sym("e-202")].clone();
    assert_eq!(identity.first, first, "the first record never changes");
    assert_eq!(identity.variants.len(), 1);
    let kept = identity.variants[0];
    assert_eq!(b.catalog.content_value(kept.event.content), variant);
    assert_eq!(kept.decision, Decision::ConflictChangedPayload);
    assert_eq!(kept.standing, Standing::Held);
    // Held: nothing changes the card but its pause.
    b.assert_card("card-7", 13, st("ready", "Map v2"), true);
    assert_eq!(b.card("card-8"), card_8);
    assert_eq!(b.holds(Some("card-7")), vec![b.key("e-202", 1)]);
    assert_eq!(b.holds_by_card().len(), 1);
    assert_eq!(b.unresolved(), b.inputs(&["e-202"], &[]));

    // A second different content is a second variant; the first record still stands.
    b.check(vec![deliver(snapshot(
        "e-202",
        "card-7",
        13,
        st("ready", "Anvil"),
    ))
    .decided(Decision::ConflictChangedPayload, Ack::Held)]);
    let identity = &b.receiver.identities()[&b.sym("e-202")];
    assert_eq!(identity.first, first);
    assert_eq!(identity.variants.len(), 2);
    assert_eq!(identity.variants[0], kept);
    assert_eq!(
        b.holds(Some("card-7")),
        vec![b.key("e-202", 1), b.key("e-202", 2)]
    );
}

#[test]
fn changed_payload_under_an_id_reused_for_another_card_pauses_both_cards() {
    let mut b = Bench::board();
    b.check(vec![
        deliver(snapshot("e-202", "card-7", 11, st("ready", "Map")))
            .decided(Decision::Applied, Ack::Applied),
        deliver(snapshot("e-202", "card-8", 4, st("building", "Chart")))
            .decided(Decision::ConflictChangedPayload, Ack::Held)
            .card("card-7", 11, st("ready", "Map"), true)
            .card("card-8", 3, st("ready", "Chart"), true),
    ]);
    // The variant waits under the card it names.
    assert_eq!(b.holds(Some("card-8")), vec![b.key("e-202", 1)]);
    assert_eq!(b.holds_by_card().len(), 1);
}

#[test]
fn changed_payload_naming_an_unknown_card_pauses_only_the_known_one() {
    // The first record names a known card, the variant an unknown one.
    let mut b = Bench::board();
    b.check(vec![
        deliver(snapshot("e-202", "card-7", 11, st("ready", "Map"))),
        deliver(snapshot("e-202", "card-99", 1, st("queued", "New")))
            .decided(Decision::ConflictChangedPayload, Ack::Held),
    ]);
    assert_eq!(b.paused(), vec!["card-7"]);
    assert!(!b.is_known("card-99"), "never create a card from an event");
    assert_eq!(b.holds(Some("card-99")), vec![b.key("e-202", 1)]);

    // The first record names an unknown card, the variant a known one.
    let mut b = Bench::board();
    b.check(vec![deliver(snapshot(
        "e-300",
        "card-99",
        1,
        st("queued", "New"),
    ))
    .decided(HELD_UNKNOWN_OBJECT, Ack::Held)]);
    assert!(b.paused().is_empty());
    b.check(vec![deliver(snapshot(
        "e-300",
        "card-7",
        11,
        st("ready", "Map"),
    ))
    .decided(Decision::ConflictChangedPayload, Ack::Held)]);
    assert_eq!(b.paused(), vec!["card-7"]);
    b.assert_card("card-7", 10, st("queued", "Map"), true);
    assert!(!b.is_known("card-99"));
    assert_eq!(b.holds(Some("card-99")), vec![b.key("e-300", 0)]);
    assert_eq!(b.holds(Some("card-7")), vec![b.key("e-300", 1)]);
}

#[test]
fn changed_payload_takes_precedence_over_every_later_rule() {
    let base = snapshot("e-202", "card-7", 13, st("ready", "Map v2"));
    let variants = [
        with(base.clone(), "type", json!("card.deleted")),
        without(base.clone(), "object_id"),
        with(base.clone(), "object_id", json!("card-99")),
        without(base.clone(), "object_version"),
        with(base.clone(), "object_version", json!(-13)),
        with(base.clone(), "state", json!("ready")),
        with(base.clone(), "object_version", json!(12)),
        with(base.clone(), "object_version", json!(14)),
    ];
    for variant in variants {
        let mut b = Bench::board();
        b.check(vec![
            deliver(base.clone()),
            deliver(variant.clone())
                .decided(Decision::ConflictChangedPayload, Ack::Held)
                .note(format!("{variant}"))
                .card("card-7", 13, st("ready", "Map v2"), true),
        ]);
        assert_eq!(b.receiver.identities()[&b.sym("e-202")].variants.len(), 1);
    }
}

#[test]
fn key_order_and_whitespace_do_not_make_a_variant() {
    let compact = r#"{"event_id":"e-202","object_id":"card-7","object_version":13,"occurred_at":"2024-01-01T08:00:01Z","type":"card.snapshot","state":{"stage":"ready","label":"Map v2","tags":["a","b"]}}"#;
    let reordered = "{\n  \"state\" : { \"tags\" : [ \"a\", \"b\" ],\n \"label\":\"Map v2\",  \"stage\" : \"ready\" },\n\t\"type\": \"card.snapshot\",\n  \"occurred_at\" : \"2024-01-01T08:00:01Z\",\n  \"object_version\" :13 ,\"object_id\":\"card-7\",\n  \"event_id\" : \"e-202\"\n}\n";
    let swapped_tags = compact.replace(r#"["a","b"]"#, r#"["b","a"]"#);
    let parse = |text: &str| serde_json::from_str::<Value>(text).expect("valid JSON");

    let mut b = Bench::board();
    b.check(vec![
        deliver(parse(compact)).decided(Decision::Applied, Ack::Applied),
        deliver(parse(reordered))
            .duplicate(Decision::Applied, Ack::Applied)
            .unchanged(),
        // Array order, unlike key order, is part of the value.
        deliver(parse(&swapped_tags)).decided(Decision::ConflictChangedPayload, Ack::Held),
    ]);
}

#[test]
fn a_redelivery_with_another_occurred_at_is_a_changed_payload() {
    // occurred_at is never a dedupe key, but it is part of the envelope: semantic equality
    // is equality of the whole parsed value.
    let mut b = Bench::board();
    let envelope = snapshot("e-202", "card-7", 13, st("ready", "Map v2"));
    b.check(vec![
        deliver(envelope.clone()),
        deliver(with(envelope, "occurred_at", json!("2024-01-01T08:00:09Z")))
            .decided(Decision::ConflictChangedPayload, Ack::Held),
    ]);
    assert!(b.card("card-7").unwrap().paused);
}

#[test]
fn missing_event_id_is_held_malformed_by_delivery_number() {
    let mut b = Bench::board();
    let envelope = without(
        snapshot("e-201", "card-7", 12, st("ready", "Map")),
        "event_id",
    );
    b.check(vec![
        deliver(envelope.clone()).decided(HELD_MALFORMED, Ack::Held)
    ]);
    let number = b.last;
    assert!(b.receiver.identities().is_empty(), "no identity record");
    let record = b.receiver.anonymous()[&number];
    assert_eq!(record.decision, HELD_MALFORMED);
    assert_eq!(record.standing, Standing::Held);
    b.assert_card("card-7", 10, st("queued", "Map"), true);
    assert!(!b.card("card-8").unwrap().paused);
    assert_eq!(b.holds(Some("card-7")), vec![HoldKey::Delivery(number)]);
    assert_eq!(b.unresolved(), b.inputs(&[], &[number]));

    b.check(vec![
        // The same delivery number again is a duplicate.
        redeliver(number, envelope.clone())
            .duplicate(HELD_MALFORMED, Ack::Held)
            .unchanged(),
        // Without an event id, another delivery number is another input.
        deliver(envelope).decided(HELD_MALFORMED, Ack::Held),
    ]);
    assert_eq!(
        b.holds(Some("card-7")),
        vec![HoldKey::Delivery(number), HoldKey::Delivery(b.last)]
    );
    assert_eq!(b.unresolved(), b.inputs(&[], &[number, b.last]));
}

#[test]
fn non_string_event_id_is_held_malformed_without_an_identity_record() {
    for id in [
        json!(201),
        json!(null),
        json!(true),
        json!(["e-201"]),
        json!({"id": "e-201"}),
    ] {
        let mut b = Bench::board();
        let envelope = with(
            snapshot("e-201", "card-7", 12, st("ready", "Map")),
            "event_id",
            id,
        );
        b.check(vec![deliver(envelope.clone())
            .decided(HELD_MALFORMED, Ack::Held)
            .note(format!("{envelope}"))]);
        assert!(b.receiver.identities().is_empty(), "{envelope}");
        assert_eq!(b.receiver.anonymous().len(), 1);
        b.assert_card("card-7", 10, st("queued", "Map"), true);
        assert_eq!(b.holds(Some("card-7")), vec![HoldKey::Delivery(1)]);
        b.check(vec![
            redeliver(1, envelope).duplicate(HELD_MALFORMED, Ack::Held)
        ]);
    }
}

#[test]
fn missing_event_id_precedes_type_object_and_pause() {
    let anonymous = |envelope: Value| without(envelope, "event_id");

    // Unsupported type on a known card: malformed (rule 1), still pauses the card.
    let mut b = Bench::board();
    let envelope = with(
        snapshot("x", "card-7", 12, st("ready", "Map")),
        "type",
        json!("card.deleted"),
    );
    b.check(vec![
        deliver(anonymous(envelope)).decided(HELD_MALFORMED, Ack::Held)
    ]);
    assert_eq!(b.paused(), vec!["card-7"]);

    // An unknown card: malformed, nothing paused, nothing created.
    let mut b = Bench::board();
    let cards = b.cards();
    b.check(vec![deliver(anonymous(snapshot(
        "x",
        "card-99",
        1,
        st("queued", "New"),
    )))
    .decided(HELD_MALFORMED, Ack::Held)]);
    assert_eq!(b.cards(), cards);
    assert_eq!(b.holds(Some("card-99")), vec![HoldKey::Delivery(1)]);

    // No object id either: held with no card.
    let mut b = Bench::board();
    let cards = b.cards();
    b.check(vec![deliver(anonymous(without(
        snapshot("x", "card-7", 12, st("ready", "Map")),
        "object_id",
    )))
    .decided(HELD_MALFORMED, Ack::Held)]);
    assert_eq!(b.cards(), cards);
    assert_eq!(b.holds(None), vec![HoldKey::Delivery(1)]);

    // A paused card: malformed, not held_paused.
    let mut b = Bench::board();
    b.check(vec![
        deliver(without(
            snapshot("e-204", "card-7", 11, st("ready", "Map")),
            "object_version",
        )),
        deliver(anonymous(snapshot("x", "card-7", 12, st("ready", "Map"))))
            .decided(HELD_MALFORMED, Ack::Held),
    ]);
}

// ---------------------------------------------------------------------------------------
// Rule 2: type
// ---------------------------------------------------------------------------------------

#[test]
fn unsupported_type_is_held_and_pauses_a_known_card() {
    let base = snapshot("e-250", "card-7", 12, st("ready", "Map"));
    let types = [
        Some(json!("card.deleted")),
        Some(json!("Card.Snapshot")),
        Some(json!("card.snapshot ")),
        Some(json!(42)),
        Some(json!(null)),
        None,
    ];
    for kind in types {
        let envelope = match &kind {
            Some(kind) => with(base.clone(), "type", kind.clone()),
            None => without(base.clone(), "type"),
        };
        let mut b = Bench::board();
        b.check(vec![deliver(envelope.clone())
            .decided(HELD_UNSUPPORTED_TYPE, Ack::Held)
            .note(format!("{envelope}"))
            .card("card-7", 10, st("queued", "Map"), true)]);
        assert_eq!(b.paused(), vec!["card-7"]);
        assert_eq!(b.holds(Some("card-7")), vec![b.key("e-250", 0)]);
        assert_eq!(b.record(b.key("e-250", 0)).decision, HELD_UNSUPPORTED_TYPE);
        assert_eq!(b.unresolved(), b.inputs(&["e-250"], &[]));
    }
}

#[test]
fn unsupported_type_precedes_object_pause_and_version_rules() {
    let unsupported = |envelope: Value| with(envelope, "type", json!("card.deleted"));

    // On an unknown card: still held_unsupported_type, and the card is not created.
    let mut b = Bench::board();
    let cards = b.cards();
    b.check(vec![deliver(unsupported(snapshot(
        "e-301",
        "card-99",
        1,
        st("queued", "New"),
    )))
    .decided(HELD_UNSUPPORTED_TYPE, Ack::Held)]);
    assert_eq!(b.cards(), cards, "nothing created, nothing paused");
    assert_eq!(b.holds(Some("card-99")), vec![b.key("e-301", 0)]);

    // Without an object id.
    let mut b = Bench::board();
    b.check(vec![deliver(unsupported(without(
        snapshot("e-302", "card-7", 12, st("ready", "Map")),
        "object_id",
    )))
    .decided(HELD_UNSUPPORTED_TYPE, Ack::Held)]);
    assert!(b.paused().is_empty());
    assert_eq!(b.holds(None), vec![b.key("e-302", 0)]);

    // On a paused card: not held_paused.
    let mut b = Bench::board();
    b.check(vec![
        deliver(without(
            snapshot("e-204", "card-7", 11, st("ready", "Map")),
            "object_version",
        )),
        deliver(unsupported(snapshot(
            "e-303",
            "card-7",
            12,
            st("ready", "Map"),
        )))
        .decided(HELD_UNSUPPORTED_TYPE, Ack::Held),
    ]);

    // With a missing version: not held_missing_version.
    let mut b = Bench::board();
    b.check(vec![deliver(unsupported(without(
        snapshot("e-304", "card-8", 4, st("ready", "Chart")),
        "object_version",
    )))
    .decided(HELD_UNSUPPORTED_TYPE, Ack::Held)]);
    assert_eq!(b.paused(), vec!["card-8"]);
}

// ---------------------------------------------------------------------------------------
// Rule 3: object
// ---------------------------------------------------------------------------------------

#[test]
fn missing_or_non_string_object_id_is_held_malformed() {
    let base = snapshot("e-260", "card-7", 12, st("ready", "Map"));
    let ids = [
        None,
        Some(json!(7)),
        Some(json!(null)),
        Some(json!(["card-7"])),
        Some(json!({"id": "card-7"})),
    ];
    for id in ids {
        let envelope = match &id {
            Some(id) => with(base.clone(), "object_id", id.clone()),
            None => without(base.clone(), "object_id"),
        };
        let mut b = Bench::board();
        let cards = b.cards();
        b.check(vec![deliver(envelope.clone())
            .decided(HELD_MALFORMED, Ack::Held)
            .note(format!("{envelope}"))]);
        assert_eq!(b.cards(), cards, "no card named, none paused: {envelope}");
        let holds: BTreeMap<Option<Sym>, Vec<HoldKey>> =
            [(None, vec![b.key("e-260", 0)])].into_iter().collect();
        assert_eq!(b.holds_by_card(), holds);
        assert_eq!(b.record(b.key("e-260", 0)).decision, HELD_MALFORMED);
        assert_eq!(b.unresolved(), b.inputs(&["e-260"], &[]));
    }
}

#[test]
fn unknown_card_is_held_and_never_created_from_an_event() {
    let mut b = Bench::board();
    let cards = b.cards();
    b.check(vec![deliver(snapshot(
        "e-300",
        "card-99",
        1,
        st("queued", "New"),
    ))
    .decided(HELD_UNKNOWN_OBJECT, Ack::Held)]);
    assert_eq!(b.cards(), cards);
    assert!(!b.is_known("card-99"));
    assert_eq!(b.holds(Some("card-99")), vec![b.key("e-300", 0)]);
    assert_eq!(b.unresolved(), b.inputs(&["e-300"], &[]));

    // Rule 3 precedes rule 5: a broken version or state on an unknown card is still
    // held_unknown_object; more snapshots of it never create it either.
    let more = [
        without(
            snapshot("e-301", "card-99", 2, st("x", "y")),
            "object_version",
        ),
        snapshot("e-302", "card-99", 2, st("x", "y")),
        with(
            snapshot("e-303", "card-99", 3, st("x", "y")),
            "object_version",
            json!("3"),
        ),
        with(
            snapshot("e-304", "card-99", 4, st("x", "y")),
            "state",
            json!("ready"),
        ),
    ];
    for envelope in more {
        b.check(vec![deliver(envelope.clone())
            .decided(HELD_UNKNOWN_OBJECT, Ack::Held)
            .note(format!("{envelope}"))]);
    }
    assert_eq!(b.cards(), cards);
    assert_eq!(b.holds(Some("card-99")).len(), 5);
}

// ---------------------------------------------------------------------------------------
// Rule 4: pause
// ---------------------------------------------------------------------------------------

#[test]
fn paused_card_holds_new_events_before_any_version_rule() {
    let mut b = Bench::board();
    b.check(vec![deliver(without(
        snapshot("e-204", "card-7", 11, st("ready", "Map")),
        "object_version",
    ))
    .decided(HELD_MISSING_VERSION, Ack::Held)]);
    let events = [
        ("higher", snapshot("e-a", "card-7", 14, st("ready", "Map"))),
        ("lower", snapshot("e-b", "card-7", 9, st("ready", "Map"))),
        ("equal", snapshot("e-c", "card-7", 10, st("queued", "Map"))),
        (
            "same version, other state",
            snapshot("e-d", "card-7", 10, st("ready", "Forge")),
        ),
        (
            "missing version",
            without(
                snapshot("e-e", "card-7", 0, st("ready", "Map")),
                "object_version",
            ),
        ),
        (
            "invalid version",
            with(
                snapshot("e-f", "card-7", 0, st("ready", "Map")),
                "object_version",
                json!(1.5),
            ),
        ),
        (
            "state not an object",
            with(
                snapshot("e-g", "card-7", 15, st("ready", "Map")),
                "state",
                json!("ready"),
            ),
        ),
    ];
    for (what, envelope) in events {
        b.check(vec![deliver(envelope)
            .decided(HELD_PAUSED, Ack::Held)
            .note(format!("paused card, {what}"))
            .card("card-7", 10, st("queued", "Map"), true)]);
    }
    let expected: Vec<HoldKey> = ["e-204", "e-a", "e-b", "e-c", "e-d", "e-e", "e-f", "e-g"]
        .iter()
        .map(|id| b.key(id, 0))
        .collect();
    assert_eq!(b.holds(Some("card-7")), expected, "arrival order");
    assert!(!b.card("card-8").unwrap().paused);
}

// ---------------------------------------------------------------------------------------
// Rule 5: version and state
// ---------------------------------------------------------------------------------------

#[test]
fn missing_version_is_held_and_pauses_the_card() {
    let mut b = Bench::board();
    b.check(vec![deliver(without(
        snapshot("e-204", "card-8", 4, st("archived", "Chart")),
        "object_version",
    ))
    .decided(HELD_MISSING_VERSION, Ack::Held)
    .card("card-8", 3, st("ready", "Chart"), true)
    .card("card-7", 10, st("queued", "Map"), false)]);
    assert_eq!(b.holds(Some("card-8")), vec![b.key("e-204", 0)]);
    assert_eq!(b.unresolved(), b.inputs(&["e-204"], &[]));
}

#[test]
fn every_invalid_version_form_is_held_invalid_version_and_pauses() {
    for (what, version) in invalid_versions() {
        let mut b = Bench::board();
        let envelope = with(
            snapshot("e-270", "card-7", 0, st("ready", "Map")),
            "object_version",
            version,
        );
        b.check(vec![deliver(envelope)
            .decided(HELD_INVALID_VERSION, Ack::Held)
            .note(what)
            .card("card-7", 10, st("queued", "Map"), true)]);
        assert_eq!(b.holds(Some("card-7")), vec![b.key("e-270", 0)], "{what}");
    }
}

#[test]
fn zero_and_u64_max_are_valid_versions() {
    let mut b = Bench::board();
    b.check(vec![
        deliver(snapshot("e-0", "card-7", 0, st("ready", "Map")))
            .decided(Decision::Stale, Ack::Ignored),
        deliver(snapshot("e-max", "card-7", u64::MAX, st("ready", "Map")))
            .decided(Decision::Applied, Ack::Applied)
            .card("card-7", u64::MAX, st("ready", "Map"), false),
    ]);
}

#[test]
fn state_not_an_object_is_held_malformed_and_pauses() {
    let base = snapshot("e-280", "card-7", 12, st("ready", "Map"));
    let states = [
        Some(json!("ready")),
        Some(json!(["ready", "Map"])),
        Some(json!(null)),
        Some(json!(12)),
        Some(json!(false)),
        None,
    ];
    for state in states {
        let envelope = match &state {
            Some(state) => with(base.clone(), "state", state.clone()),
            None => without(base.clone(), "state"),
        };
        let mut b = Bench::board();
        b.check(vec![deliver(envelope.clone())
            .decided(HELD_MALFORMED, Ack::Held)
            .note(format!("{envelope}"))
            .card("card-7", 10, st("queued", "Map"), true)]);
        assert_eq!(b.holds(Some("card-7")), vec![b.key("e-280", 0)]);
    }
}

#[test]
fn version_is_judged_before_state() {
    let mut b = Bench::board();
    let bad_state = |envelope: Value| with(envelope, "state", json!("ready"));
    b.check(vec![
        deliver(bad_state(without(
            snapshot("e-1", "card-7", 0, st("x", "y")),
            "object_version",
        )))
        .decided(HELD_MISSING_VERSION, Ack::Held),
        deliver(bad_state(with(
            snapshot("e-2", "card-8", 0, st("x", "y")),
            "object_version",
            json!(-4),
        )))
        .decided(HELD_INVALID_VERSION, Ack::Held),
    ]);
}

// ---------------------------------------------------------------------------------------
// Rule 6: compare
// ---------------------------------------------------------------------------------------

#[test]
fn higher_version_is_applied_and_replaces_the_whole_state_gaps_allowed() {
    let mut b = Bench::board();
    let holds = b.holds_by_card();
    // From v10 to v50: a gap is normal for full snapshots.
    b.check(vec![deliver(snapshot(
        "e-1",
        "card-7",
        50,
        json!({"stage": "ready"}),
    ))
    .decided(Decision::Applied, Ack::Applied)]);
    // The whole state is replaced, not merged: "label" is gone.
    b.assert_card("card-7", 50, json!({"stage": "ready"}), false);
    b.check(vec![deliver(snapshot(
        "e-2",
        "card-7",
        51,
        json!({"label": "Map", "owner": "ana"}),
    ))
    .decided(Decision::Applied, Ack::Applied)
    .card("card-7", 51, json!({"label": "Map", "owner": "ana"}), false)
    .card("card-8", 3, st("ready", "Chart"), false)]);
    assert_eq!(b.holds_by_card(), holds);
    assert!(b.unresolved().is_empty());
    assert_eq!(b.record(b.key("e-2", 0)).standing, Standing::Settled);
}

#[test]
fn lower_version_is_stale_and_changes_nothing() {
    let mut b = Bench::board();
    b.check(vec![deliver(snapshot(
        "e-201",
        "card-7",
        12,
        st("ready", "Map"),
    ))]);
    let cards = b.cards();
    b.check(vec![deliver(snapshot(
        "e-200",
        "card-7",
        11,
        st("building", "Map"),
    ))
    .decided(Decision::Stale, Ack::Ignored)]);
    assert_eq!(b.cards(), cards);
    assert!(b.holds_by_card().is_empty());
    assert_eq!(b.record(b.key("e-200", 0)).standing, Standing::Settled);
    assert!(b.unresolved().is_empty());
}

#[test]
fn equal_version_and_equal_state_is_equal() {
    let mut b = Bench::board();
    let cards = b.cards();
    let reordered: Value =
        serde_json::from_str(r#"{ "label" : "Map", "stage": "queued" }"#).unwrap();
    b.check(vec![
        deliver(snapshot("e-207", "card-7", 10, reordered)).decided(Decision::Equal, Ack::Ignored)
    ]);
    assert_eq!(b.cards(), cards);
    assert!(b.holds_by_card().is_empty());
    assert!(b.unresolved().is_empty());
}

#[test]
fn equal_version_with_a_different_state_is_conflict_same_version() {
    let mut b = Bench::board();
    b.check(vec![deliver(snapshot(
        "e-210",
        "card-7",
        10,
        st("ready", "Map"),
    ))
    .decided(Decision::ConflictSameVersion, Ack::Held)
    .card("card-7", 10, st("queued", "Map"), true)]);
    assert_eq!(b.holds(Some("card-7")), vec![b.key("e-210", 0)]);
    assert_eq!(b.record(b.key("e-210", 0)).standing, Standing::Held);
    assert_eq!(b.unresolved(), b.inputs(&["e-210"], &[]));
}

#[test]
fn occurred_at_never_orders_snapshots() {
    let mut b = Bench::board();
    let at = |envelope: Value, time: Value| with(envelope, "occurred_at", time);
    b.check(vec![
        deliver(at(
            snapshot("e-1", "card-7", 12, st("ready", "Map")),
            json!("2024-01-01T09:00:00Z"),
        ))
        .decided(Decision::Applied, Ack::Applied),
        // Older occurred_at, higher version: applied.
        deliver(at(
            snapshot("e-2", "card-7", 13, st("ready", "Map v2")),
            json!("2023-01-01T00:00:00Z"),
        ))
        .decided(Decision::Applied, Ack::Applied),
        // Newer occurred_at, lower version: stale.
        deliver(at(
            snapshot("e-3", "card-7", 11, st("building", "Map")),
            json!("2030-01-01T00:00:00Z"),
        ))
        .decided(Decision::Stale, Ack::Ignored),
        // Unparseable or absent occurred_at does not matter either.
        deliver(at(
            snapshot("e-4", "card-7", 14, st("archived", "Map v2")),
            json!("yesterday"),
        ))
        .decided(Decision::Applied, Ack::Applied),
        deliver(without(
            snapshot("e-5", "card-7", 15, st("done", "Map v2")),
            "occurred_at",
        ))
        .decided(Decision::Applied, Ack::Applied)
        .card("card-7", 15, st("done", "Map v2"), false),
    ]);
}

#[test]
fn every_decision_acknowledges_with_its_meaning() {
    let good = snapshot;
    let cases: Vec<(Vec<Value>, Decision, Ack)> = vec![
        (
            vec![good("e", "card-7", 11, st("a", "b"))],
            Decision::Applied,
            Ack::Applied,
        ),
        (
            vec![good("e", "card-7", 9, st("a", "b"))],
            Decision::Stale,
            Ack::Ignored,
        ),
        (
            vec![good("e", "card-7", 10, st("queued", "Map"))],
            Decision::Equal,
            Ack::Ignored,
        ),
        (
            vec![
                good("e", "card-7", 11, st("a", "b")),
                good("e", "card-7", 11, st("a", "c")),
            ],
            Decision::ConflictChangedPayload,
            Ack::Held,
        ),
        (
            vec![good("e", "card-7", 10, st("a", "b"))],
            Decision::ConflictSameVersion,
            Ack::Held,
        ),
        (
            vec![without(good("e", "card-7", 11, st("a", "b")), "event_id")],
            HELD_MALFORMED,
            Ack::Held,
        ),
        (
            vec![with(
                good("e", "card-7", 11, st("a", "b")),
                "type",
                json!("card.deleted"),
            )],
            HELD_UNSUPPORTED_TYPE,
            Ack::Held,
        ),
        (
            vec![good("e", "card-99", 1, st("a", "b"))],
            HELD_UNKNOWN_OBJECT,
            Ack::Held,
        ),
        (
            vec![
                good("d", "card-7", 10, st("a", "b")),
                good("e", "card-7", 11, st("a", "b")),
            ],
            HELD_PAUSED,
            Ack::Held,
        ),
        (
            vec![without(
                good("e", "card-7", 11, st("a", "b")),
                "object_version",
            )],
            HELD_MISSING_VERSION,
            Ack::Held,
        ),
        (
            vec![with(
                good("e", "card-7", 11, st("a", "b")),
                "object_version",
                json!("11"),
            )],
            HELD_INVALID_VERSION,
            Ack::Held,
        ),
    ];
    let mut covered = BTreeSet::new();
    for (envelopes, decision, ack) in cases {
        let mut b = Bench::board();
        let (last, earlier) = envelopes.split_last().unwrap();
        for envelope in earlier {
            b.check(vec![deliver(envelope.clone())]);
        }
        b.check(vec![deliver(last.clone())
            .decided(decision, ack)
            .note(format!("{decision}"))]);
        assert_eq!(decision.ack(), ack);
        // A duplicate of it repeats the same meaning.
        let again = b.check(vec![redeliver(b.last, last.clone())]).delivered();
        assert_eq!(again.ack, ack, "{decision}");
        covered.insert(decision);
    }
    assert_eq!(covered, Decision::ALL.into_iter().collect());
}

// ---------------------------------------------------------------------------------------
// Reconciliation
// ---------------------------------------------------------------------------------------

#[test]
fn authority_for_an_unknown_card_creates_it_and_re_evaluates_its_unknown_object_holds() {
    let mut b = Bench::board();
    b.check(vec![
        deliver(snapshot("e-300", "card-99", 1, st("queued", "New"))),
        deliver(snapshot("e-301", "card-99", 3, st("building", "New"))),
        deliver(snapshot("e-302", "card-99", 2, st("queued", "New v2"))),
    ]);
    assert!(!b.is_known("card-99"));

    let reconciled = b
        .check(vec![
            reconcile("card-99", 2, st("queued", "New v2")).outcome(Outcome::Created)
        ])
        .reconciled();
    assert!(
        reconciled.outcome.replaces(),
        "one authoritative replacement"
    );
    // Arrival order: e-301 (v3) is applied before e-302 (v2) is looked at again.
    assert_eq!(
        reconciled.settled,
        vec![
            (
                b.key("e-300", 0),
                re_evaluated(HELD_UNKNOWN_OBJECT, Decision::Stale)
            ),
            (
                b.key("e-301", 0),
                re_evaluated(HELD_UNKNOWN_OBJECT, Decision::Applied)
            ),
            (
                b.key("e-302", 0),
                re_evaluated(HELD_UNKNOWN_OBJECT, Decision::Stale)
            ),
        ]
    );
    b.assert_card("card-99", 3, st("building", "New"), false);
    for (id, decision) in [
        ("e-300", Decision::Stale),
        ("e-301", Decision::Applied),
        ("e-302", Decision::Stale),
    ] {
        let record = b.record(b.key(id, 0));
        assert_eq!(
            (record.decision, record.standing),
            (decision, Standing::Settled)
        );
    }
    assert!(b.holds_by_card().is_empty());
    assert!(b.unresolved().is_empty());
}

#[test]
fn an_unknown_card_without_authority_is_never_created() {
    let mut b = Bench::board();
    let envelope = snapshot("e-300", "card-99", 1, st("queued", "New"));
    b.check(vec![
        deliver(envelope.clone()),
        reconcile("card-7", 10, st("queued", "Map")),
        reconcile("card-8", 3, st("ready", "Chart")),
    ]);
    assert!(!b.is_known("card-99"));
    assert_eq!(b.holds(Some("card-99")), vec![b.key("e-300", 0)]);
    assert_eq!(b.unresolved(), b.inputs(&["e-300"], &[]));
    b.check(vec![
        deliver(envelope).duplicate(HELD_UNKNOWN_OBJECT, Ack::Held)
    ]);
    assert!(!b.is_known("card-99"));
}

#[test]
fn a_created_card_re_evaluates_unknown_object_holds_by_rules_4_to_6() {
    let mut b = Bench::board();
    // Rule 3 came first, so the missing version was never looked at.
    let reconciled = b
        .check(vec![
            deliver(without(
                snapshot("e-300", "card-99", 1, st("queued", "New")),
                "object_version",
            ))
            .decided(HELD_UNKNOWN_OBJECT, Ack::Held),
            deliver(snapshot("e-301", "card-99", 2, st("building", "New"))),
            reconcile("card-99", 1, st("queued", "New")).outcome(Outcome::Created),
        ])
        .reconciled();
    // Now rule 5 sees it: held_missing_version, which pauses the new card; the later hold
    // stays held.
    assert_eq!(
        reconciled.settled,
        vec![(
            b.key("e-300", 0),
            re_evaluated(HELD_UNKNOWN_OBJECT, HELD_MISSING_VERSION)
        )]
    );
    b.assert_card("card-99", 1, st("queued", "New"), true);
    assert_eq!(b.record(b.key("e-300", 0)).decision, HELD_MISSING_VERSION);
    assert_eq!(b.record(b.key("e-301", 0)).standing, Standing::Held);
    assert_eq!(
        b.holds(Some("card-99")),
        vec![b.key("e-300", 0), b.key("e-301", 0)]
    );
    assert_eq!(b.unresolved(), b.inputs(&["e-300", "e-301"], &[]));

    // The next reconciliation supersedes the unevaluable one and evaluates the other.
    let reconciled = b
        .check(vec![
            reconcile("card-99", 1, st("queued", "New")).outcome(Outcome::Confirmed)
        ])
        .reconciled();
    assert_eq!(
        reconciled.settled,
        vec![
            (b.key("e-300", 0), Settlement::Superseded),
            (
                b.key("e-301", 0),
                re_evaluated(HELD_UNKNOWN_OBJECT, Decision::Applied)
            ),
        ]
    );
    b.assert_card("card-99", 2, st("building", "New"), false);
    assert_eq!(b.unresolved(), b.inputs(&["e-300"], &[]));
}

#[test]
fn authority_behind_the_card_is_refused_and_changes_nothing() {
    let mut b = Bench::board();
    let reconciled = b
        .check(vec![
            deliver(snapshot("e-202", "card-7", 13, st("ready", "Map v2"))),
            deliver(snapshot("e-202", "card-7", 13, st("ready", "Forge"))),
            deliver(snapshot("e-203", "card-7", 14, st("archived", "Map v2"))),
            deliver(without(
                snapshot("x", "card-7", 15, st("x", "y")),
                "event_id",
            )),
            reconcile("card-7", 12, st("ready", "Map"))
                .outcome(Outcome::RefusedBehind)
                .unchanged()
                .note("card, pause, holds and records unchanged")
                .card("card-7", 13, st("ready", "Map v2"), true),
        ])
        .reconciled();
    assert!(!reconciled.outcome.replaces());
    assert!(reconciled.settled.is_empty(), "holds untouched");
}

#[test]
fn authority_with_the_same_version_and_state_confirms_without_replacing() {
    let mut b = Bench::board();
    let reconciled = b
        .check(vec![
            deliver(without(
                snapshot("e-204", "card-8", 4, st("archived", "Chart")),
                "object_version",
            )),
            deliver(snapshot("e-205", "card-8", 4, st("building", "Chart"))),
            reconcile("card-8", 3, st("ready", "Chart")).outcome(Outcome::Confirmed),
        ])
        .reconciled();
    assert!(!reconciled.outcome.replaces(), "no replacement");
    assert_eq!(
        reconciled.settled,
        vec![
            (b.key("e-204", 0), Settlement::Superseded),
            (
                b.key("e-205", 0),
                re_evaluated(HELD_PAUSED, Decision::Applied)
            ),
        ]
    );
    b.assert_card("card-8", 4, st("building", "Chart"), false);

    // Confirming an unpaused card with nothing waiting changes nothing at all.
    let reconciled = b
        .check(vec![reconcile("card-7", 10, st("queued", "Map"))
            .outcome(Outcome::Confirmed)
            .unchanged()])
        .reconciled();
    assert!(reconciled.settled.is_empty());
}

#[test]
fn any_other_authority_replaces_and_unpauses() {
    // Ahead of a paused card.
    let mut b = Bench::board();
    let reconciled = b
        .check(vec![
            deliver(snapshot("e-210", "card-7", 10, st("ready", "Map"))),
            reconcile("card-7", 11, st("ready", "Map"))
                .outcome(Outcome::Replaced)
                .card("card-7", 11, st("ready", "Map"), false),
        ])
        .reconciled();
    assert!(reconciled.outcome.replaces());

    // Same version, another state: the authority wins.
    let mut b = Bench::board();
    b.check(vec![
        deliver(snapshot("e-210", "card-7", 10, st("ready", "Map"))),
        reconcile("card-7", 10, st("archived", "Map"))
            .outcome(Outcome::Replaced)
            .card("card-7", 10, st("archived", "Map"), false),
    ]);

    // Ahead of an unpaused card with nothing waiting.
    let mut b = Bench::board();
    let reconciled = b
        .check(vec![reconcile("card-8", 9, st("done", "Chart"))
            .outcome(Outcome::Replaced)
            .card("card-8", 9, st("done", "Chart"), false)
            .card("card-7", 10, st("queued", "Map"), false)])
        .reconciled();
    assert!(reconciled.settled.is_empty());
}

#[test]
fn held_paused_events_are_re_evaluated_in_arrival_order() {
    let mut b = Bench::board();
    let reconciled = b
        .check(vec![
            deliver(without(
                snapshot("e-204", "card-7", 11, st("x", "y")),
                "object_version",
            )),
            deliver(snapshot("e-a", "card-7", 15, st("ready", "A"))),
            deliver(snapshot("e-b", "card-7", 14, st("ready", "B"))),
            deliver(snapshot("e-c", "card-7", 16, st("ready", "C"))),
            reconcile("card-7", 13, st("ready", "Authority")).outcome(Outcome::Replaced),
        ])
        .reconciled();
    // By version, e-b (v14) would have been applied; by arrival, e-a (v15) came first.
    assert_eq!(
        reconciled.settled,
        vec![
            (b.key("e-204", 0), Settlement::Superseded),
            (
                b.key("e-a", 0),
                re_evaluated(HELD_PAUSED, Decision::Applied)
            ),
            (b.key("e-b", 0), re_evaluated(HELD_PAUSED, Decision::Stale)),
            (
                b.key("e-c", 0),
                re_evaluated(HELD_PAUSED, Decision::Applied)
            ),
        ]
    );
    b.assert_card("card-7", 16, st("ready", "C"), false);
    for (id, decision) in [
        ("e-a", Decision::Applied),
        ("e-b", Decision::Stale),
        ("e-c", Decision::Applied),
    ] {
        let record = b.record(b.key(id, 0));
        assert_eq!(
            (record.decision, record.standing),
            (decision, Standing::Settled),
            "{id}"
        );
    }
    assert!(b.holds_by_card().is_empty());
    assert_eq!(b.unresolved(), b.inputs(&["e-204"], &[]));
}

#[test]
fn re_evaluation_meeting_a_new_conflict_re_pauses_and_still_settles_the_rest() {
    let mut b = Bench::board();
    b.check(vec![
        deliver(snapshot("e-1", "card-7", 12, st("ready", "Map"))),
        // Holds on card-7, in arrival order:
        deliver(snapshot("e-1", "card-7", 12, st("ready", "Forge")))
            .decided(Decision::ConflictChangedPayload, Ack::Held),
        deliver(snapshot("e-2", "card-7", 14, st("archived", "Forge")))
            .decided(HELD_PAUSED, Ack::Held),
        deliver(snapshot("e-3", "card-7", 15, st("done", "Map"))).decided(HELD_PAUSED, Ack::Held),
        deliver(with(
            snapshot("e-4", "card-7", 16, st("x", "y")),
            "type",
            json!("card.deleted"),
        ))
        .decided(HELD_UNSUPPORTED_TYPE, Ack::Held),
        deliver(without(
            snapshot("x", "card-7", 16, st("x", "y")),
            "event_id",
        ))
        .decided(HELD_MALFORMED, Ack::Held),
    ]);
    let anonymous = b.last;
    b.check(vec![deliver(snapshot(
        "e-1",
        "card-7",
        12,
        st("ready", "Anvil"),
    ))
    .decided(Decision::ConflictChangedPayload, Ack::Held)]);
    // The authority's v14 differs from the held v14.
    let reconciled = b
        .check(vec![
            reconcile("card-7", 14, st("archived", "Map v2")).outcome(Outcome::Replaced)
        ])
        .reconciled();
    assert_eq!(
        reconciled.settled,
        vec![
            (b.key("e-1", 1), Settlement::Resolved),
            (
                b.key("e-2", 0),
                re_evaluated(HELD_PAUSED, Decision::ConflictSameVersion)
            ),
            // e-3 stays held: the card is paused again.
            (b.key("e-4", 0), Settlement::Superseded),
            (HoldKey::Delivery(anonymous), Settlement::Superseded),
            (b.key("e-1", 2), Settlement::Resolved),
        ]
    );
    b.assert_card("card-7", 14, st("archived", "Map v2"), true);
    assert_eq!(
        b.record(b.key("e-2", 0)).decision,
        Decision::ConflictSameVersion
    );
    assert_eq!(b.record(b.key("e-2", 0)).standing, Standing::Held);
    assert_eq!(b.record(b.key("e-3", 0)).decision, HELD_PAUSED);
    assert_eq!(b.record(b.key("e-3", 0)).standing, Standing::Held);
    assert_eq!(b.record(b.key("e-1", 1)).standing, Standing::Resolved);
    assert_eq!(b.record(b.key("e-1", 2)).standing, Standing::Resolved);
    assert_eq!(b.record(b.key("e-4", 0)).standing, Standing::Superseded);
    assert_eq!(
        b.holds(Some("card-7")),
        vec![b.key("e-2", 0), b.key("e-3", 0)]
    );
    assert_eq!(
        b.unresolved(),
        b.inputs(&["e-2", "e-3", "e-4"], &[anonymous])
    );

    // A later authority resolves the new conflict and evaluates what stayed held.
    let reconciled = b
        .check(vec![
            reconcile("card-7", 15, st("done", "Map")).outcome(Outcome::Replaced)
        ])
        .reconciled();
    assert_eq!(
        reconciled.settled,
        vec![
            (b.key("e-2", 0), Settlement::Resolved),
            (b.key("e-3", 0), re_evaluated(HELD_PAUSED, Decision::Equal)),
        ]
    );
    b.assert_card("card-7", 15, st("done", "Map"), false);
    assert!(b.holds_by_card().is_empty());
    assert_eq!(b.unresolved(), b.inputs(&["e-4"], &[anonymous]));
}

#[test]
fn conflicts_are_resolved_by_the_authority_and_kept_as_evidence() {
    // A changed payload (B62-15, card-7).
    let mut b = Bench::board();
    b.check(vec![
        deliver(snapshot("e-202", "card-7", 13, st("ready", "Map v2"))),
        deliver(snapshot("e-207", "card-7", 13, st("ready", "Map v2"))),
        deliver(snapshot("e-202", "card-7", 13, st("ready", "Forge"))),
        deliver(snapshot("e-203", "card-7", 14, st("archived", "Map v2"))),
    ]);
    let first = b.record(b.key("e-202", 0));
    let reconciled = b
        .check(vec![
            reconcile("card-7", 14, st("archived", "Map v2")).outcome(Outcome::Replaced)
        ])
        .reconciled();
    assert_eq!(
        reconciled.settled,
        vec![
            (b.key("e-202", 1), Settlement::Resolved),
            (
                b.key("e-203", 0),
                re_evaluated(HELD_PAUSED, Decision::Equal)
            ),
        ]
    );
    let identity = &b.receiver.identities()[&b.sym("e-202")];
    assert_eq!(identity.first, first, "evidence: the first record is kept");
    assert_eq!(identity.variants.len(), 1, "evidence: the variant is kept");
    assert_eq!(
        identity.variants[0].decision,
        Decision::ConflictChangedPayload
    );
    assert_eq!(identity.variants[0].standing, Standing::Resolved);
    b.assert_card("card-7", 14, st("archived", "Map v2"), false);
    assert!(b.unresolved().is_empty(), "resolved is not unresolved");

    // A same-version conflict.
    let mut b = Bench::board();
    let reconciled = b
        .check(vec![
            deliver(snapshot("e-210", "card-7", 10, st("ready", "Map"))),
            reconcile("card-7", 11, st("ready", "Map")),
        ])
        .reconciled();
    assert_eq!(
        reconciled.settled,
        vec![(b.key("e-210", 0), Settlement::Resolved)]
    );
    let record = b.record(b.key("e-210", 0));
    assert_eq!(
        (record.decision, record.standing),
        (Decision::ConflictSameVersion, Standing::Resolved)
    );
    assert!(b.unresolved().is_empty());
}

#[test]
fn no_content_of_a_conflicted_identity_is_applied_whichever_arrived_first() {
    // SPEC: once an id has two distinct contents, every record of it still held, the first
    // included (here a held_paused one), is resolved and never re-evaluated. Both orders of
    // the two payloads end with the authority's card, neither payload applied.
    let map = st("archived", "Map");
    let forge = st("archived", "Forge");
    let mut ends = Vec::new();
    for (first, second) in [(map.clone(), forge.clone()), (forge, map)] {
        let mut b = Bench::board();
        let reconciled = b
            .check(vec![
                deliver(snapshot("e-210", "card-7", 10, st("ready", "Map"))),
                deliver(snapshot("e-203", "card-7", 14, first)),
                deliver(snapshot("e-203", "card-7", 14, second)),
                reconcile("card-7", 15, st("shipped", "Map")).outcome(Outcome::Replaced),
            ])
            .reconciled();
        assert_eq!(
            reconciled.settled,
            vec![
                (b.key("e-210", 0), Settlement::Resolved),
                (b.key("e-203", 0), Settlement::Resolved),
                (b.key("e-203", 1), Settlement::Resolved),
            ],
            "the first record is resolved, not re-evaluated"
        );
        let first_record = b.record(b.key("e-203", 0));
        assert_eq!(
            (first_record.decision, first_record.standing),
            (HELD_PAUSED, Standing::Resolved)
        );
        b.assert_card("card-7", 15, st("shipped", "Map"), false);
        assert!(b.unresolved().is_empty(), "both contents were decidable");
        ends.push(b.receiver.cards().clone());
    }
    assert_eq!(ends[0], ends[1], "the same end in both orders");
}

#[test]
fn a_conflicted_identity_for_an_unknown_card_is_resolved_when_its_card_is_created() {
    // The first record is held_unknown_object; the authority creates the card. Re-evaluating
    // it would apply whichever payload came first (v2 is newer than the authority's v1).
    let mut b = Bench::board();
    let reconciled = b
        .check(vec![
            deliver(snapshot("e-31", "card-99", 2, st("approved", "X"))),
            deliver(snapshot("e-31", "card-99", 2, st("rejected", "X"))),
            reconcile("card-99", 1, st("new", "X")).outcome(Outcome::Created),
        ])
        .reconciled();
    assert_eq!(
        reconciled.settled,
        vec![
            (b.key("e-31", 0), Settlement::Resolved),
            (b.key("e-31", 1), Settlement::Resolved),
        ]
    );
    b.assert_card("card-99", 1, st("new", "X"), false);
    assert!(b.unresolved().is_empty());
}

#[test]
fn unevaluable_holds_are_superseded_and_stay_unresolved() {
    let base = snapshot("e-204", "card-8", 4, st("archived", "Chart"));
    let cases = [
        (
            without(base.clone(), "object_version"),
            HELD_MISSING_VERSION,
        ),
        (
            with(base.clone(), "object_version", json!(-4)),
            HELD_INVALID_VERSION,
        ),
        (
            with(base.clone(), "state", json!("archived")),
            HELD_MALFORMED,
        ),
        (
            with(base.clone(), "type", json!("card.deleted")),
            HELD_UNSUPPORTED_TYPE,
        ),
        (without(base.clone(), "event_id"), HELD_MALFORMED),
    ];
    for (envelope, decision) in cases {
        let mut b = Bench::board();
        b.check(vec![deliver(envelope.clone()).decided(decision, Ack::Held)]);
        let key = match b.catalog.find("e-204") {
            Some(_) => b.key("e-204", 0),
            None => HoldKey::Delivery(b.last),
        };
        let input = key.input();
        assert_eq!(b.paused(), vec!["card-8"], "{envelope}");

        let reconciled = b
            .check(vec![
                reconcile("card-8", 5, st("ready", "Chart")).outcome(Outcome::Replaced)
            ])
            .reconciled();
        assert_eq!(reconciled.settled, vec![(key, Settlement::Superseded)]);
        let record = b.record(key);
        // No version is invented for it: it keeps its held decision.
        assert_eq!(
            (record.decision, record.standing),
            (decision, Standing::Superseded),
            "{envelope}"
        );
        b.assert_card("card-8", 5, st("ready", "Chart"), false);
        assert!(
            b.holds_by_card().is_empty(),
            "a superseded input no longer waits"
        );
        assert_eq!(b.unresolved(), [input].into_iter().collect(), "{envelope}");
    }
}

#[test]
fn unresolved_inputs_are_exactly_the_holds_without_a_state_decision() {
    let mut b = Bench::board();
    b.check(vec![
        deliver(snapshot("e-201", "card-7", 12, st("ready", "Map"))), // applied
        deliver(snapshot("e-210", "card-7", 12, st("ready", "Forge"))), // conflict, pauses
        deliver(snapshot("e-211", "card-7", 13, st("ready", "Map v2"))), // held_paused
        deliver(without(
            snapshot("e-204", "card-8", 4, st("a", "b")),
            "object_version",
        )),
        deliver(snapshot("e-300", "card-99", 1, st("queued", "New"))), // unknown
        deliver(without(
            snapshot("e-5", "card-7", 1, st("a", "b")),
            "object_id",
        )), // no card
        deliver(without(
            snapshot("x", "card-77", 1, st("a", "b")),
            "event_id",
        )), // anonymous
    ]);
    let anonymous = b.last;
    assert_eq!(
        b.unresolved(),
        b.inputs(&["e-210", "e-211", "e-204", "e-300", "e-5"], &[anonymous])
    );

    b.check(vec![
        reconcile("card-7", 12, st("ready", "Map")),
        reconcile("card-8", 3, st("ready", "Chart")),
    ]);
    // Resolved and re-evaluated inputs leave; superseded ones stay; inputs no authority
    // can reach (unknown card, no object id) stay held.
    assert_eq!(
        b.unresolved(),
        b.inputs(&["e-204", "e-300", "e-5"], &[anonymous])
    );
    assert_eq!(b.record(b.key("e-204", 0)).standing, Standing::Superseded);
    assert_eq!(b.record(b.key("e-300", 0)).standing, Standing::Held);
    assert_eq!(b.record(b.key("e-5", 0)).standing, Standing::Held);
    assert_eq!(b.receiver.anonymous()[&anonymous].standing, Standing::Held);
    assert_eq!(b.holds(None), vec![b.key("e-5", 0)]);
    assert_eq!(b.holds(Some("card-77")), vec![HoldKey::Delivery(anonymous)]);
}

#[test]
fn a_changed_payload_naming_another_card_is_resolved_when_the_first_card_is_reconciled() {
    let setup = || {
        let mut b = Bench::board();
        b.check(vec![
            deliver(snapshot("e-202", "card-7", 11, st("ready", "Map"))),
            deliver(snapshot("e-202", "card-8", 4, st("building", "Chart"))),
        ]);
        assert_eq!(b.paused(), vec!["card-7", "card-8"]);
        assert_eq!(b.holds(Some("card-8")), vec![b.key("e-202", 1)]);
        b
    };

    // Reconciling card-7, named only by the first record, resolves the variant filed
    // under card-8; card-8 stays paused until its own reconciliation.
    let mut b = setup();
    let reconciled = b
        .check(vec![
            reconcile("card-7", 11, st("ready", "Map")).outcome(Outcome::Confirmed)
        ])
        .reconciled();
    assert_eq!(
        reconciled.settled,
        vec![(b.key("e-202", 1), Settlement::Resolved)]
    );
    assert_eq!(b.record(b.key("e-202", 1)).standing, Standing::Resolved);
    assert!(b.holds_by_card().is_empty());
    assert!(b.unresolved().is_empty());
    assert_eq!(b.paused(), vec!["card-8"]);
    let reconciled = b
        .check(vec![
            reconcile("card-8", 3, st("ready", "Chart")).outcome(Outcome::Confirmed)
        ])
        .reconciled();
    assert!(reconciled.settled.is_empty());
    assert!(b.paused().is_empty());

    // Reconciling card-8, named by the variant, resolves it too.
    let mut b = setup();
    let reconciled = b
        .check(vec![reconcile("card-8", 3, st("ready", "Chart"))])
        .reconciled();
    assert_eq!(
        reconciled.settled,
        vec![(b.key("e-202", 1), Settlement::Resolved)]
    );
    assert_eq!(b.paused(), vec!["card-7"]);
    assert!(b.unresolved().is_empty());
}

#[test]
fn the_b62_15_fixture_in_article_order() {
    let mut b = Bench::board();
    let e201 = snapshot("e-201", "card-7", 12, st("ready", "Map"));
    let steps = [
        (e201.clone(), decided(Decision::Applied, Ack::Applied)),
        (e201, duplicate(Decision::Applied, Ack::Applied)),
        (
            snapshot("e-200", "card-7", 11, st("building", "Map")),
            decided(Decision::Stale, Ack::Ignored),
        ),
        (
            snapshot("e-202", "card-7", 13, st("ready", "Map v2")),
            decided(Decision::Applied, Ack::Applied),
        ),
        (
            snapshot("e-207", "card-7", 13, st("ready", "Map v2")),
            decided(Decision::Equal, Ack::Ignored),
        ),
        (
            snapshot("e-202", "card-7", 13, st("ready", "Forge")),
            decided(Decision::ConflictChangedPayload, Ack::Held),
        ),
        (
            snapshot("e-203", "card-7", 14, st("archived", "Map v2")),
            decided(HELD_PAUSED, Ack::Held),
        ),
        (
            snapshot("e-300", "card-99", 1, st("queued", "New")),
            decided(HELD_UNKNOWN_OBJECT, Ack::Held),
        ),
        (
            without(
                snapshot("e-204", "card-8", 0, st("archived", "Chart")),
                "object_version",
            ),
            decided(HELD_MISSING_VERSION, Ack::Held),
        ),
        (
            snapshot("e-205", "card-8", 4, st("building", "Chart")),
            decided(HELD_PAUSED, Ack::Held),
        ),
    ];
    let mut rows: Vec<Row> = steps
        .into_iter()
        .enumerate()
        .map(|(number, (envelope, expected))| {
            deliver(envelope)
                .answers(expected)
                .note(format!("delivery {}", number + 1))
        })
        .collect();
    let last = rows.pop().expect("ten deliveries");
    rows.push(last.card("card-7", 13, st("ready", "Map v2"), true).card(
        "card-8",
        3,
        st("ready", "Chart"),
        true,
    ));
    b.check(rows);
    let card_7 = b
        .check(vec![
            reconcile("card-7", 14, st("archived", "Map v2")).outcome(Outcome::Replaced)
        ])
        .reconciled();
    assert_eq!(
        card_7.settled,
        vec![
            (b.key("e-202", 1), Settlement::Resolved),
            (
                b.key("e-203", 0),
                re_evaluated(HELD_PAUSED, Decision::Equal)
            ),
        ]
    );
    let card_8 = b
        .check(vec![
            reconcile("card-8", 5, st("ready", "Chart")).outcome(Outcome::Replaced)
        ])
        .reconciled();
    assert_eq!(
        card_8.settled,
        vec![
            (b.key("e-204", 0), Settlement::Superseded),
            (
                b.key("e-205", 0),
                re_evaluated(HELD_PAUSED, Decision::Stale)
            ),
        ]
    );
    b.assert_card("card-7", 14, st("archived", "Map v2"), false);
    b.assert_card("card-8", 5, st("ready", "Chart"), false);
    assert!(!b.is_known("card-99"));
    assert!(b.paused().is_empty());
    assert_eq!(b.unresolved(), b.inputs(&["e-204", "e-300"], &[]));
}

// ---------------------------------------------------------------------------------------
// Retention
// ---------------------------------------------------------------------------------------

#[test]
fn expiry_forgets_old_records_with_nothing_waiting_and_keeps_the_rest() {
    let mut b = Bench::board();
    b.check(vec![
        deliver(snapshot("e-201", "card-7", 12, st("ready", "Map"))), // settled
        deliver(snapshot("e-202", "card-7", 13, st("ready", "Map v2"))), // settled
        deliver(snapshot("e-202", "card-7", 13, st("ready", "Forge"))), // resolved below
        deliver(without(
            snapshot("e-204", "card-8", 0, st("a", "b")),
            "object_version",
        )),
        deliver(snapshot("e-300", "card-99", 1, st("queued", "New"))), // held
        deliver(without(
            snapshot("x", "card-7", 14, st("a", "b")),
            "event_id",
        )), // anonymous
    ]);
    let anonymous = b.last;
    b.check(vec![
        reconcile("card-7", 13, st("ready", "Map v2")),
        reconcile("card-8", 3, st("ready", "Chart")), // e-204 superseded
    ]);
    b.now = T + 1_000;
    b.check(vec![
        deliver(snapshot("e-210", "card-7", 14, st("archived", "Map v2"))), // young
    ]);
    let cards = b.cards();
    let holds = b.holds_by_card();
    let unresolved = b.unresolved();
    let anonymous_records = b.receiver.anonymous().clone();

    // e-210 was received exactly one window ago: not older than the window, kept.
    let now = T + 1_000 + DAY as i64;
    let gone: BTreeSet<Sym> = b.receiver.expire(now, DAY).into_iter().collect();
    assert_eq!(gone, [b.sym("e-201"), b.sym("e-202")].into_iter().collect());
    let kept: BTreeSet<Sym> = b.receiver.identities().keys().collect();
    assert_eq!(
        kept,
        [b.sym("e-204"), b.sym("e-300"), b.sym("e-210")]
            .into_iter()
            .collect(),
        "waiting (held or superseded) and young records are kept"
    );
    assert_eq!(b.cards(), cards, "expiry never touches cards");
    assert_eq!(b.holds_by_card(), holds);
    assert_eq!(b.unresolved(), unresolved);
    assert_eq!(b.receiver.anonymous(), &anonymous_records);
    assert!(b.receiver.anonymous().contains_key(&anonymous));
    b.invariants();

    // One second later e-210 is older than the window.
    assert_eq!(b.receiver.expire(now + 1, DAY), vec![b.sym("e-210")]);
    assert_eq!(b.unresolved(), unresolved);
}

#[test]
fn expiry_keeps_an_identity_while_any_of_its_records_waits_or_is_young() {
    let mut b = Bench::board();
    b.check(vec![
        deliver(snapshot("e-202", "card-7", 13, st("ready", "Map v2"))),
        deliver(snapshot("e-202", "card-7", 13, st("ready", "Forge"))), // held variant
    ]);
    assert!(b.receiver.expire(T + 10 * DAY as i64, DAY).is_empty());

    let mut b = Bench::board();
    b.check(vec![
        deliver(snapshot("e-202", "card-7", 13, st("ready", "Map v2"))),
        deliver(snapshot("e-202", "card-7", 13, st("ready", "Forge"))),
        reconcile("card-7", 13, st("ready", "Map v2")),
    ]);
    b.now = T + DAY as i64;
    b.check(vec![
        deliver(snapshot("e-202", "card-7", 13, st("ready", "Anvil"))), // young, held
        reconcile("card-7", 13, st("ready", "Map v2")),
    ]);
    assert!(
        b.receiver.expire(T + DAY as i64 + 10, DAY).is_empty(),
        "the young variant keeps the whole identity"
    );
}

#[test]
fn a_record_without_a_receive_time_never_expires() {
    let mut b = Bench::board();
    b.check(vec![deliver_at(
        1,
        None,
        snapshot("e-201", "card-7", 12, st("ready", "Map")),
    )]);
    assert!(b.receiver.expire(i64::MAX, 0).is_empty());
    assert!(b.receiver.identities().contains_key(&b.sym("e-201")));
}

#[test]
fn after_expiry_a_redelivery_is_decided_afresh_and_versions_still_protect_the_card() {
    let mut b = Bench::board();
    let e201 = snapshot("e-201", "card-7", 12, st("ready", "Map"));
    let e202 = snapshot("e-202", "card-7", 13, st("ready", "Map v2"));
    b.check(vec![deliver(e201.clone()), deliver(e202.clone())]);
    b.now = T + 2 * DAY as i64;
    assert_eq!(b.receiver.expire(b.now, DAY).len(), 2);
    assert!(b.receiver.identities().is_empty());

    // Duplicate recognition is lost: not `duplicate`, a new decision. Versions still hold:
    // the old snapshot is stale, the current one equal.
    b.check(vec![
        deliver(e201).decided(Decision::Stale, Ack::Ignored),
        deliver(e202.clone())
            .decided(Decision::Equal, Ack::Ignored)
            .card("card-7", 13, st("ready", "Map v2"), false),
    ]);
    // A changed payload under a forgotten id can no longer be told apart from a new event.
    let mut b = Bench::board();
    b.check(vec![deliver(e202.clone())]);
    b.now = T + 2 * DAY as i64;
    b.receiver.expire(b.now, DAY);
    b.check(vec![
        deliver(snapshot("e-202", "card-7", 12, st("ready", "Forge")))
            .decided(Decision::Stale, Ack::Ignored)
            .card("card-7", 13, st("ready", "Map v2"), false),
        // The new first record is recognised from then on.
        deliver(snapshot("e-202", "card-7", 12, st("ready", "Forge")))
            .duplicate(Decision::Stale, Ack::Ignored),
    ]);
}

#[test]
fn expiry_keeps_a_resolved_variant_that_never_got_a_decision() {
    // e-202's variant has no version: its conflict is resolved by the authority, but the
    // input itself is still unresolved, so the whole id must outlive the window.
    let mut b = Bench::board();
    b.check(vec![
        deliver(snapshot("e-202", "card-7", 13, st("ready", "Map v2"))),
        deliver(without(
            snapshot("e-202", "card-7", 13, st("ready", "Forge")),
            "object_version",
        )),
        reconcile("card-7", 13, st("ready", "Map v2")),
    ]);
    let unresolved = b.unresolved();
    assert_eq!(unresolved, b.inputs(&["e-202"], &[]));
    let identity = &b.receiver.identities()[&b.sym("e-202")];
    assert!(!b.receiver.expirable(identity));
    assert!(!b.receiver.has_expirable());
    assert!(b.receiver.expire(T + 10 * DAY as i64, DAY).is_empty());
    assert!(b.receiver.expire_all().is_empty());
    assert_eq!(
        b.unresolved(),
        unresolved,
        "expiry never loses an unresolved input"
    );
}

#[test]
fn the_window_passing_forgets_every_settled_id_whatever_its_receive_time() {
    let mut b = Bench::board();
    b.check(vec![
        deliver_at(1, None, snapshot("e-201", "card-7", 12, st("ready", "Map"))),
        deliver(snapshot("e-202", "card-7", 13, st("ready", "Map v2"))),
        deliver(snapshot("e-300", "card-99", 1, st("queued", "New"))), // held
    ]);
    assert!(b.receiver.has_expirable());
    let cards = b.cards();
    let holds = b.holds_by_card();
    let unresolved = b.unresolved();
    // By the clock, only the record with a receive time can expire.
    assert_eq!(
        b.receiver.clone().expire(T + 2 * DAY as i64, DAY),
        vec![b.sym("e-202")]
    );
    let mut gone = b.receiver.expire_all();
    gone.sort();
    let mut wanted = vec![b.sym("e-201"), b.sym("e-202")];
    wanted.sort();
    assert_eq!(gone, wanted);
    assert!(b.receiver.identities().contains_key(&b.sym("e-300")));
    assert!(!b.receiver.has_expirable(), "only the held e-300 is left");
    assert_eq!(b.cards(), cards);
    assert_eq!(b.holds_by_card(), holds);
    assert_eq!(b.unresolved(), unresolved);
    b.invariants();
    assert!(b.receiver.expire_all().is_empty(), "nothing more to forget");
}

// ---------------------------------------------------------------------------------------
// Mutation-testing gaps: behaviour only the slow targets (`model`, `cli`) exercised
// ---------------------------------------------------------------------------------------

use std::hash::{DefaultHasher, Hash, Hasher};

fn hash_of(value: &impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

#[test]
fn each_seeded_ordering_mutant_misbehaves_as_its_catalogue_entry_says() {
    // last-arrival-wins: a lower version replaces the card.
    let mut b = Bench::board();
    b.check(vec![deliver(snapshot(
        "e-200",
        "card-7",
        9,
        st("building", "Map"),
    ))
    .decided(Decision::Applied, Ack::Applied)
    .under(Mutant::LastArrivalWins)
    .card("card-7", 9, st("building", "Map"), false)]);

    // timestamp-ordering: the later occurrence wins whatever the version; a tie goes to the
    // later arrival.
    let mut b = Bench::board();
    let ordered_by_time = [
        (
            "e-1",
            12,
            st("ready", "Map"),
            "08:00:05",
            Decision::Applied,
            Ack::Applied,
        ),
        (
            "e-2",
            13,
            st("ready", "Map v2"),
            "08:00:01",
            Decision::Stale,
            Ack::Ignored,
        ),
        (
            "e-3",
            11,
            st("building", "Map"),
            "08:00:05",
            Decision::Applied,
            Ack::Applied,
        ),
    ];
    for (id, version, state, time, decision, ack) in ordered_by_time {
        let envelope = with(
            snapshot(id, "card-7", version, state),
            "occurred_at",
            json!(format!("2024-01-01T{time}Z")),
        );
        b.check(vec![deliver(envelope)
            .decided(decision, ack)
            .under(Mutant::TimestampOrdering)
            .note(id)]);
    }
    b.assert_card("card-7", 11, st("building", "Map"), false);

    // apply-equal-version-conflict: the card's version with another state replaces it.
    let mut b = Bench::board();
    b.check(vec![deliver(snapshot(
        "e-1",
        "card-7",
        10,
        st("ready", "Forge"),
    ))
    .decided(Decision::Applied, Ack::Applied)
    .under(Mutant::ApplyEqualVersionConflict)
    .card("card-7", 10, st("ready", "Forge"), false)]);

    // ignore-pause: a paused card takes a higher version.
    let mut b = Bench::board();
    b.check(vec![
        deliver(without(
            snapshot("e-1", "card-7", 0, st("a", "b")),
            "object_version",
        )),
        deliver(snapshot("e-2", "card-7", 12, st("ready", "Map")))
            .decided(Decision::Applied, Ack::Applied)
            .under(Mutant::IgnorePause)
            .card("card-7", 12, st("ready", "Map"), true),
    ]);

    // create-unknown-card: an event creates the card it names.
    let mut b = Bench::board();
    b.check(vec![deliver(snapshot(
        "e-300",
        "card-99",
        1,
        st("queued", "New"),
    ))
    .decided(Decision::Applied, Ack::Applied)
    .under(Mutant::CreateUnknownCard)
    .card("card-99", 1, st("queued", "New"), false)]);
}

#[test]
fn each_seeded_identity_mutant_misbehaves_as_its_catalogue_entry_says() {
    // id-only-dedupe: a changed payload is taken for a duplicate of the first record.
    let mut b = Bench::board();
    b.check(vec![
        deliver(snapshot("e-202", "card-7", 13, st("ready", "Map v2"))),
        deliver(snapshot("e-202", "card-7", 13, st("ready", "Forge")))
            .duplicate(Decision::Applied, Ack::Applied)
            .under(Mutant::IdOnlyDedupe),
    ]);
    assert!(b.paused().is_empty());

    // overwrite-first-record: the variant replaces the first record; its hold is filed
    // once under index 0, even when a third content overwrites it again.
    let mut b = Bench::board();
    b.check(vec![deliver(snapshot(
        "e-202",
        "card-7",
        13,
        st("ready", "Map v2"),
    ))]);
    for label in ["Forge", "Anvil"] {
        b.check(vec![deliver(snapshot(
            "e-202",
            "card-7",
            13,
            st("ready", label),
        ))
        .decided(Decision::ConflictChangedPayload, Ack::Held)
        .under(Mutant::OverwriteFirstRecord)]);
        let identity = &b.receiver.identities()[&b.sym("e-202")];
        assert_eq!(identity.first.decision, Decision::ConflictChangedPayload);
        assert!(identity.variants.is_empty());
        assert_eq!(b.holds(Some("card-7")), vec![b.key("e-202", 0)]);
    }
}

#[test]
fn forgetting_held_events_at_reconciliation_breaks_the_invariants() {
    let mut b = Bench::board();
    let reconciled = b
        .check(vec![
            deliver(snapshot("e-210", "card-7", 10, st("ready", "Forge"))), // pauses card-7
            deliver(snapshot("e-211", "card-7", 12, st("ready", "Map"))),   // held_paused
            reconcile("card-7", 10, st("queued", "Map")).under(Mutant::ForgetHeldAfterReconcile),
        ])
        .reconciled();
    assert_eq!(
        reconciled.settled,
        vec![(b.key("e-210", 0), Settlement::Resolved)],
        "the held_paused event is dropped, not re-evaluated"
    );
    assert_eq!(b.record(b.key("e-211", 0)).standing, Standing::Held);
    assert!(b.holds_by_card().is_empty());
    let broken = b
        .receiver
        .invariants()
        .expect_err("a waiting record is not held");
    assert!(broken.contains("waits but is not held"), "{broken}");
}

#[test]
fn a_resolved_variant_stays_unresolved_input_only_if_it_could_never_be_decided() {
    let mut b = Bench::board();
    let variant = |id: &str| snapshot(id, "card-7", 12, st("ready", "Forge"));
    for id in [
        "e-ok",
        "e-type",
        "e-object",
        "e-version",
        "e-state",
        "e-unknown",
    ] {
        b.check(vec![deliver(snapshot(
            id,
            "card-7",
            11,
            st("ready", "Map"),
        ))]);
    }
    b.check(vec![
        deliver(variant("e-ok")),
        deliver(with(variant("e-type"), "type", json!("card.deleted"))),
        deliver(without(variant("e-object"), "object_id")),
        deliver(without(variant("e-version"), "object_version")),
        deliver(with(variant("e-state"), "state", json!("ready"))),
        deliver(snapshot("e-unknown", "card-99", 12, st("ready", "Forge"))),
        reconcile("card-7", 12, st("ready", "Map")),
    ]);
    for id in [
        "e-ok",
        "e-type",
        "e-object",
        "e-version",
        "e-state",
        "e-unknown",
    ] {
        assert_eq!(b.record(b.key(id, 1)).standing, Standing::Resolved, "{id}");
    }
    assert!(b.holds_by_card().is_empty());
    assert_eq!(
        b.unresolved(),
        b.inputs(
            &["e-type", "e-object", "e-version", "e-state", "e-unknown"],
            &[]
        ),
        "a resolved, decidable variant naming a known card is settled"
    );
}

#[test]
fn record_hashes_tell_apart_every_field_that_matters() {
    let mut b = Bench::board();
    b.check(vec![
        deliver(snapshot("e-201", "card-7", 12, st("ready", "Map"))),
        deliver(snapshot("e-202", "card-7", 12, st("ready", "Map"))),
    ]);
    let record = b.record(b.key("e-201", 0));
    let other_content = b.record(b.key("e-202", 0));
    let variants = [
        record,
        other_content,
        Record {
            decision: Decision::Stale,
            ..record
        },
        Record {
            standing: Standing::Resolved,
            ..record
        },
    ];
    let hashes: BTreeSet<u64> = variants.iter().map(hash_of).collect();
    assert_eq!(hashes.len(), variants.len(), "{variants:?}");
    assert_eq!(hash_of(&record), hash_of(&b.record(b.key("e-201", 0))));
    // The receive time is kept for time-based expiry but is not part of the model state:
    // nothing the checker explores reads it.
    let unstamped = Record {
        recorded_at: RecordedAt::NONE,
        ..record
    };
    assert_ne!(unstamped, record);
    assert_eq!(hash_of(&unstamped), hash_of(&record));
}

#[test]
fn card_and_identity_tables_count_and_list_their_entries() {
    let mut b = Bench::board();
    assert_eq!(b.receiver.cards().len(), 2);
    assert!(!b.receiver.cards().is_empty());
    assert_eq!(
        b.receiver.cards().keys().collect::<Vec<_>>(),
        vec![b.sym("card-7"), b.sym("card-8")]
    );
    assert_eq!(
        b.receiver
            .cards()
            .values()
            .map(|card| card.version)
            .collect::<Vec<_>>(),
        vec![10, 3]
    );
    assert!(b.receiver.identities().is_empty());
    assert_eq!(b.receiver.identities().len(), 0);

    b.check(vec![
        deliver(snapshot("e-201", "card-7", 12, st("ready", "Map"))),
        deliver(snapshot("e-300", "card-99", 1, st("queued", "New"))),
        deliver(snapshot("e-202", "card-7", 13, st("ready", "Map v2"))),
    ]);
    assert_eq!(b.receiver.identities().len(), 3);
    assert!(!b.receiver.identities().is_empty());
    b.check(vec![reconcile("card-99", 1, st("queued", "New"))]);
    assert_eq!(b.receiver.cards().len(), 3);
    assert_eq!(
        b.receiver.cards().into_iter().count(),
        3,
        "by-reference iteration"
    );

    b.now = T + 2 * DAY as i64;
    assert_eq!(b.receiver.expire(b.now, DAY).len(), 3);
    assert_eq!(b.receiver.identities().len(), 0);
    assert!(b.receiver.identities().is_empty());
    assert_eq!(b.receiver.identities(), &Default::default());
}

#[test]
fn report_names_are_the_spec_names() {
    let names: Vec<String> = Decision::ALL.iter().map(Decision::to_string).collect();
    assert_eq!(
        names,
        [
            "applied",
            "stale",
            "equal",
            "conflict_changed_payload",
            "conflict_same_version",
            "held_malformed",
            "held_unsupported_type",
            "held_unknown_object",
            "held_paused",
            "held_missing_version",
            "held_invalid_version",
        ]
    );
    assert_eq!(
        [Ack::Applied, Ack::Ignored, Ack::Held].map(Ack::name),
        ["applied", "ignored", "held"]
    );
    assert_eq!(
        Outcome::ALL.map(Outcome::name),
        ["created", "refused_behind", "confirmed", "replaced"]
    );
    assert_eq!(Verdict::Decided(Decision::Stale).name(), "stale");
    assert_eq!(Verdict::Duplicate(Decision::Stale).name(), "duplicate");
}

#[test]
fn readings_where_the_contract_is_silent_replay_as_documented() {
    // docs/protocol.md section 3 (where holds are filed) and section 2 (integers beyond 64
    // bits): each fixture's `expect` holds, and the settlement of each unresolved input is
    // the one the text names.
    use arrival::card::fixture::Scenario;
    use arrival::card::replay::replay;
    for (fixture, settled) in [
        (
            "tests/inputs/hold-buckets.json",
            &[("delivery-3", "superseded"), ("e1", "resolved")][..],
        ),
        ("tests/inputs/integers-beyond-64-bits.json", &[][..]),
        (
            "tests/inputs/refused-behind-keeps-variants.json",
            &[("e1", "held")][..],
        ),
    ] {
        let scenario = Scenario::load(std::path::Path::new(fixture)).unwrap();
        let report = replay(&scenario, Spec, "spec");
        let expect = report.expect.as_ref().expect("the fixture has an expect");
        assert!(expect.holds, "{fixture}: {:?}", expect.differences);
        let seen: Vec<(&str, &str)> = report
            .unresolved_detail
            .iter()
            .map(|input| (input.input.as_str(), input.standing.as_str()))
            .collect();
        assert_eq!(seen, settled, "{fixture}");
    }
}
