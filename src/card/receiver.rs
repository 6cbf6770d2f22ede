//! The card.snapshot receiver: the decision function and reconciliation of the card contract (`docs/protocol.md`).
//!
//! Pure: no I/O, no clock. A delivery comes in as a typed [`Event`] with its delivery
//! number and receive time; [`Receiver::deliver`] decides it by the SPEC rules in their
//! order of precedence and records the decision. [`Receiver::reconcile`] applies an authority
//! snapshot and settles the card's holds. The state kept here is exactly what future
//! decisions read (cards, identity records, holds), so it doubles as the model checker's
//! receiver state; history (the audit trail, replacement counters, the global arrival order
//! of holds) lives in [`crate::card::audit`].

use crate::card::cache::FingerprintCache;
use crate::card::variants::Variants;
use crate::card::wire::{ContentId, Event, Snapshot, StateId, Sym, Version};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Why a delivery is held instead of decided against the card.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HoldReason {
    /// Missing or non-string `event_id` or `object_id`, or a `state` that is not an object.
    Malformed,
    /// `type` is not `card.snapshot`.
    UnsupportedType,
    /// `object_id` names no known card.
    UnknownObject,
    /// The card is paused, waiting for reconciliation.
    Paused,
    /// No `object_version`.
    MissingVersion,
    /// `object_version` is not a non-negative integer.
    InvalidVersion,
}

/// A recorded decision about one delivery's content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Decision {
    /// A higher version: the card's whole state was replaced.
    Applied,
    /// A lower version: nothing changed.
    Stale,
    /// The same version and state: nothing changed.
    Equal,
    /// A known event id with different content: a variant kept as evidence, cards paused.
    ConflictChangedPayload,
    /// The card's version with a different state: held, card paused.
    ConflictSameVersion,
    /// Held for reconciliation; the card never changes because of it.
    Held(HoldReason),
}

/// What an acknowledgement tells the sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ack {
    /// The snapshot was applied.
    Applied,
    /// Stale or equal: recorded, nothing to do.
    Ignored,
    /// The receiver took responsibility for a held input.
    Held,
}

/// The answer to one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// A new decision, recorded.
    Decided(Decision),
    /// The content was already recorded with this decision: no new effect.
    Duplicate(Decision),
}

/// Where a recorded decision stands with respect to holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Standing {
    /// A state decision (applied, stale, equal): nothing waits.
    Settled,
    /// Waiting for reconciliation.
    Held,
    /// A conflict that an authority snapshot resolved; kept as evidence.
    Resolved,
    /// An input that can never be evaluated, made moot by an authority snapshot. It stays
    /// an unresolved input.
    Superseded,
}

/// One recorded content under an event id (or under a delivery number, for inputs without
/// an event id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Record {
    /// The parsed event.
    pub event: Event,
    /// Its current decision (re-evaluation may change it; the audit keeps the history).
    pub decision: Decision,
    /// Whether it still waits.
    pub standing: Standing,
    /// When it was recorded (the delivery's receive time), for retention.
    pub recorded_at: RecordedAt,
}

/// A record's receive time in Unix seconds, if it has one, in eight bytes instead of an
/// `Option<i64>`'s sixteen: an identity slot is read on every redelivery and written for
/// every new id, so its size is the receiver's memory traffic. `i64::MIN` (a time some 292
/// billion years before 1970, which no clock or RFC 3339 text gives) stands for none.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordedAt(i64);

impl RecordedAt {
    /// No receive time.
    pub const NONE: RecordedAt = RecordedAt(i64::MIN);

    /// A receive time, or none (`Some(i64::MIN)` is read as none).
    #[inline]
    pub fn new(seconds: Option<i64>) -> RecordedAt {
        RecordedAt(seconds.unwrap_or(i64::MIN))
    }

    /// The receive time, if there is one.
    #[inline]
    pub fn get(self) -> Option<i64> {
        (self.0 != i64::MIN).then_some(self.0)
    }
}

impl fmt::Debug for RecordedAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

impl Event {
    /// Whether rules 2-6 can never decide this event on a card: unsupported type, no usable
    /// object id, a missing or invalid version, or a state that is not an object.
    pub fn is_unevaluable(&self) -> bool {
        !self.supported
            || self.object_id.is_none()
            || !matches!(self.version, Version::Valid(_))
            || self.state.is_none()
    }
}

impl std::hash::Hash for Record {
    /// The envelope's content id stands for the whole parsed event (every other event
    /// field is a function of it, but the bytes it came in, hashed when they are not the
    /// canonical text), which keeps model-state fingerprints cheap. The receive
    /// time is left out: it is kept for the time-based [`Receiver::expire`], but nothing the
    /// model checker explores reads it (its expiry step ignores time), so two worlds that
    /// differ only in receive times are the same state.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.event.content.hash(state);
        if !self.event.canonical_bytes() {
            // Bytes other than the canonical text (a re-encoded copy recorded first).
            self.event.bytes.hash(state);
        }
        self.decision.hash(state);
        self.standing.hash(state);
    }
}

/// Everything received under one event id: the first record and every changed variant.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Identity {
    /// The first record; never overwritten.
    pub first: Record,
    /// Every later content that differed from all earlier ones, in arrival order.
    pub variants: Variants<Record>,
}

impl Identity {
    /// Record `index`: 0 is the first record, `i > 0` is variant `i`.
    #[inline]
    pub fn record(&self, index: u32) -> &Record {
        match index {
            0 => &self.first,
            i => &self.variants[i as usize - 1],
        }
    }

    #[inline]
    fn record_mut(&mut self, index: u32) -> &mut Record {
        match index {
            0 => &mut self.first,
            i => &mut self.variants[i as usize - 1],
        }
    }

    /// Every record, first first.
    pub fn records(&self) -> impl Iterator<Item = &Record> {
        std::iter::once(&self.first).chain(self.variants.iter())
    }

    /// The index of the record with this content. The first record is compared before the
    /// variants' pointer is read: nearly every redelivery repeats it.
    #[inline]
    pub fn position(&self, content: ContentId) -> Option<u32> {
        if self.first.event.content == content {
            return Some(0);
        }
        self.variants
            .iter()
            .position(|record| record.event.content == content)
            .map(|index| record_index(index + 1))
    }

    /// Whether the id has two distinct contents: no content of it is ever applied again.
    pub fn is_conflicted(&self) -> bool {
        !self.variants.is_empty()
    }
}

/// A record's index as stored in a [`HoldKey`]. A `u32` cannot overflow in practice: every
/// content under one id is a distinct interned envelope kept in memory, so a process runs
/// out of memory long before an id has 2^32 of them (the index was a `u16` once, and 65,536
/// changed payloads under one id made the receiver panic).
pub(crate) fn record_index(index: usize) -> u32 {
    debug_assert!(
        u32::try_from(index).is_ok(),
        "fewer than 2^32 contents per id"
    );
    index as u32
}

/// A map keyed by interned names, in a slot per name: a lookup is an index, not a search,
/// and iteration is in id order, so the table is as canonical (and hashable) as a sorted
/// map. A slot holds only the value (its index is the name), and trailing empty slots are
/// trimmed, so equal contents compare equal.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SymTable<V> {
    slots: Vec<Option<V>>,
    len: usize,
}

/// Identity records by event id.
pub type IdentityTable = SymTable<Identity>;

/// Cards by card id.
pub type CardTable = SymTable<Card>;

// A slot's size is the receiver's memory traffic: one slot written per new id, one read per
// redelivery (docs/performance.md, "Reducer throughput"). Growing one should be a decision.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(std::mem::size_of::<Option<Identity>>() == 96);
    assert!(std::mem::size_of::<Option<Card>>() == 16);
};

impl<V> Default for SymTable<V> {
    fn default() -> Self {
        SymTable {
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl<V> SymTable<V> {
    /// The value of a name.
    #[inline]
    pub fn get(&self, id: &Sym) -> Option<&V> {
        self.slots.get(id.0 as usize)?.as_ref()
    }

    #[inline]
    fn get_mut(&mut self, id: &Sym) -> Option<&mut V> {
        self.slots.get_mut(id.0 as usize)?.as_mut()
    }

    /// Whether the name has a value.
    #[inline]
    pub fn contains_key(&self, id: &Sym) -> bool {
        self.get(id).is_some()
    }

    fn insert(&mut self, id: Sym, value: V) {
        let index = id.0 as usize;
        // Names are interned in arrival order: most inserts grow the table by one slot,
        // a push (no filler slots to write, no old slot to read).
        if index == self.slots.len() {
            self.slots.push(Some(value));
            self.len += 1;
            return;
        }
        if index > self.slots.len() {
            self.slots.resize_with(index + 1, || None);
        }
        if self.slots[index].replace(value).is_none() {
            self.len += 1;
        }
    }

    fn remove(&mut self, id: &Sym) {
        self.take(id);
    }

    /// Takes a name's value out of the table.
    fn take(&mut self, id: &Sym) -> Option<V> {
        let value = self.slots.get_mut(id.0 as usize).and_then(Option::take);
        if value.is_some() {
            self.len -= 1;
            self.trim();
        }
        value
    }

    /// Keeps the values `keep` says to (it may change them), emptying the other slots.
    fn retain(&mut self, mut keep: impl FnMut(&mut V) -> bool) {
        for slot in &mut self.slots {
            if slot.as_mut().is_some_and(|value| !keep(value)) {
                *slot = None;
                self.len -= 1;
            }
        }
        self.trim();
    }

    /// Drops trailing empty slots, so equal contents compare equal.
    fn trim(&mut self) {
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
    }

    /// How many names have values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no name has a value.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every name with its value, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (Sym, &V)> {
        self.slots.iter().enumerate().filter_map(|(index, slot)| {
            let id = Sym(u32::try_from(index).expect("a slot per interned name"));
            slot.as_ref().map(|value| (id, value))
        })
    }

    /// Every name with a value, in id order.
    pub fn keys(&self) -> impl Iterator<Item = Sym> + '_ {
        self.iter().map(|(id, _)| id)
    }

    /// Every value, in id order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().flatten()
    }
}

impl<V> FromIterator<(Sym, V)> for SymTable<V> {
    fn from_iter<I: IntoIterator<Item = (Sym, V)>>(entries: I) -> Self {
        let mut table = SymTable::default();
        for (id, value) in entries {
            table.insert(id, value);
        }
        table
    }
}

impl<'a, V> IntoIterator for &'a SymTable<V> {
    type Item = (Sym, &'a V);
    type IntoIter = Box<dyn Iterator<Item = (Sym, &'a V)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl<V> std::ops::Index<&Sym> for SymTable<V> {
    type Output = V;

    fn index(&self, id: &Sym) -> &V {
        self.get(id).expect("the name has a value")
    }
}

/// The waiting inputs, in a list per card (arrival order within each list) and one list
/// for inputs without a usable `object_id`. Filing a hold is a slot index and a push,
/// not a tree search: a tenth of a busy receiver's deliveries are held behind a pause.
/// Empty lists are never kept, so equal holds compare equal; iteration, comparison and
/// hashing go as a sorted map keyed by `Option<Sym>` would (the unkeyed list first, then
/// cards in id order), which keeps fingerprints and state orders as they were.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HoldTable {
    unkeyed: Vec<HoldKey>,
    cards: SymTable<Vec<HoldKey>>,
}

impl HoldTable {
    /// The list filed under `bucket` (`None`: no usable `object_id`), if it is not empty.
    #[inline]
    pub fn get(&self, bucket: &Option<Sym>) -> Option<&Vec<HoldKey>> {
        match bucket {
            None => (!self.unkeyed.is_empty()).then_some(&self.unkeyed),
            Some(card) => self.cards.get(card),
        }
    }

    /// Whether anything is filed under `bucket`.
    pub fn contains_key(&self, bucket: &Option<Sym>) -> bool {
        self.get(bucket).is_some()
    }

    /// How many lists there are (each is non-empty).
    pub fn len(&self) -> usize {
        self.cards.len() + usize::from(!self.unkeyed.is_empty())
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every list with its bucket: the unkeyed list first, then cards in id order.
    pub fn iter(&self) -> impl Iterator<Item = (Option<Sym>, &Vec<HoldKey>)> {
        let unkeyed = (!self.unkeyed.is_empty()).then_some((None, &self.unkeyed));
        unkeyed
            .into_iter()
            .chain(self.cards.iter().map(|(card, keys)| (Some(card), keys)))
    }

    /// Every list, in the order of [`HoldTable::iter`].
    pub fn values(&self) -> impl Iterator<Item = &Vec<HoldKey>> {
        self.iter().map(|(_, keys)| keys)
    }

    /// Files `key` last under `bucket`.
    #[inline]
    fn push(&mut self, bucket: Option<Sym>, key: HoldKey) {
        match bucket {
            None => self.unkeyed.push(key),
            Some(card) => match self.cards.get_mut(&card) {
                Some(keys) => keys.push(key),
                None => self.cards.insert(card, vec![key]),
            },
        }
    }

    /// Takes the list under `bucket` out of the table (empty if there was none).
    fn take(&mut self, bucket: Option<Sym>) -> Vec<HoldKey> {
        match bucket {
            None => std::mem::take(&mut self.unkeyed),
            Some(card) => self.cards.take(&card).unwrap_or_default(),
        }
    }

    /// Files `keys` under `bucket`, replacing what was there; an empty list files nothing.
    fn put(&mut self, bucket: Option<Sym>, keys: Vec<HoldKey>) {
        match bucket {
            None => self.unkeyed = keys,
            Some(card) if keys.is_empty() => {
                self.cards.take(&card);
            }
            Some(card) => self.cards.insert(card, keys),
        }
    }

    /// Keeps the holds `keep` picks, dropping the lists left empty.
    fn retain(&mut self, mut keep: impl FnMut(HoldKey) -> bool) {
        self.unkeyed.retain(|&key| keep(key));
        self.cards.retain(|keys| {
            keys.retain(|&key| keep(key));
            !keys.is_empty()
        });
    }
}

impl FromIterator<(Option<Sym>, Vec<HoldKey>)> for HoldTable {
    fn from_iter<I: IntoIterator<Item = (Option<Sym>, Vec<HoldKey>)>>(lists: I) -> Self {
        let mut table = HoldTable::default();
        for (bucket, keys) in lists {
            table.put(bucket, keys);
        }
        table
    }
}

impl<'a> IntoIterator for &'a HoldTable {
    type Item = (Option<Sym>, &'a Vec<HoldKey>);
    type IntoIter = Box<dyn Iterator<Item = (Option<Sym>, &'a Vec<HoldKey>)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl std::ops::Index<&Option<Sym>> for HoldTable {
    type Output = Vec<HoldKey>;

    fn index(&self, bucket: &Option<Sym>) -> &Vec<HoldKey> {
        self.get(bucket)
            .expect("something is filed under the bucket")
    }
}

impl PartialOrd for HoldTable {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for HoldTable {
    /// As a sorted map of the same lists compares.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.iter().cmp(other.iter())
    }
}

impl std::hash::Hash for HoldTable {
    /// As a sorted map of the same lists hashes: its length, then each bucket and list.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_usize(self.len());
        for (bucket, keys) in self.iter() {
            bucket.hash(state);
            keys.hash(state);
        }
    }
}

/// A reference to one waiting input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HoldKey {
    /// Record `index` of an event id (0 = first record).
    Record {
        /// The event id.
        event: Sym,
        /// The record within the identity.
        index: u32,
    },
    /// A delivery without an event id, known only by its delivery number.
    Delivery(u32),
}

/// An unresolved input as reported: an event id or a delivery without one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InputRef {
    /// An event id.
    Event(Sym),
    /// A delivery number (`delivery-N`).
    Delivery(u32),
}

impl HoldKey {
    /// The input this hold belongs to.
    pub fn input(self) -> InputRef {
        match self {
            HoldKey::Record { event, .. } => InputRef::Event(event),
            HoldKey::Delivery(number) => InputRef::Delivery(number),
        }
    }
}

/// Each card's `occurred_at` of its last applied event, by card: the state of the
/// `timestamp-ordering` mutant, which the contract never reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamps(BTreeMap<Sym, i64>);

impl Stamps {
    /// The card's stamp, if it has one.
    pub fn get(&self, card: Sym) -> Option<i64> {
        self.0.get(&card).copied()
    }
}

/// One card's entry in [`Stamps`], handed to [`Policy::compare`].
pub struct Stamp<'a> {
    stamps: &'a mut Stamps,
    card: Sym,
}

impl Stamp<'_> {
    /// The card's stamp, if it has one.
    pub fn get(&self) -> Option<i64> {
        self.stamps.get(self.card)
    }

    /// Sets (or, with `None`, clears) the card's stamp.
    pub fn set(&mut self, stamp: Option<i64>) {
        match stamp {
            Some(seconds) => self.stamps.0.insert(self.card, seconds),
            None => self.stamps.0.remove(&self.card),
        };
    }
}

/// A card as the receiver knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Card {
    /// The sender's version of the current state.
    pub version: u64,
    /// The complete state.
    pub state: StateId,
    /// Waiting for reconciliation: events are held, not applied.
    pub paused: bool,
}

impl Card {
    /// A known, unpaused card.
    pub fn new(version: u64, state: StateId) -> Card {
        Card {
            version,
            state,
            paused: false,
        }
    }

    #[inline]
    pub(crate) fn replace(&mut self, version: u64, state: StateId) {
        self.version = version;
        self.state = state;
    }
}

/// The result of one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Delivered {
    /// The decision, or the recorded decision a duplicate matched.
    pub verdict: Verdict,
    /// The meaning of the acknowledgement, given once the decision is recorded.
    pub ack: Ack,
}

/// What an authority snapshot did to its card.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// The card was unknown; the authority established it.
    Created,
    /// The authority is behind the card: nothing changed, the card stays paused.
    RefusedBehind,
    /// Same version and state: unpaused, nothing replaced.
    Confirmed,
    /// Replaced and unpaused.
    Replaced,
}

/// How reconciliation settled one hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Settlement {
    /// Evaluated again by rules 4-6; the record took the new decision.
    ReEvaluated {
        /// The held decision it had.
        from: Decision,
        /// The decision it has now.
        to: Decision,
    },
    /// A conflict the authority resolved; the evidence stays.
    Resolved,
    /// Unevaluable input made moot by the authority; still an unresolved input.
    Superseded,
}

/// The result of one reconciliation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reconciled {
    /// What the snapshot did to the card.
    pub outcome: Outcome,
    /// Each hold settled, in the order settled.
    pub settled: Vec<(HoldKey, Settlement)>,
}

/// The receiver's state: cards, identity records and holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Receiver {
    cards: CardTable,
    identities: IdentityTable,
    /// Inputs without an event id, by delivery number.
    anonymous: BTreeMap<u32, Record>,
    /// Waiting inputs per card (`None`: no usable `object_id`), each list in arrival order.
    holds: HoldTable,
    /// Per card, `occurred_at` of its last applied event. Only the `timestamp-ordering`
    /// mutant keeps it (empty under the contract), so it lives beside the cards, not in
    /// each card's slot.
    stamps: Stamps,
    /// The model checker's fingerprint of this value ([`Receiver::fingerprint`]), emptied
    /// by every change; no part of the state.
    fingerprints: FingerprintCache,
}

impl Decision {
    /// Whether the decision leaves the input waiting.
    #[inline]
    pub fn is_hold(self) -> bool {
        !matches!(self, Decision::Applied | Decision::Stale | Decision::Equal)
    }

    /// The acknowledgement this decision gives.
    #[inline]
    pub fn ack(self) -> Ack {
        match self {
            Decision::Applied => Ack::Applied,
            Decision::Stale | Decision::Equal => Ack::Ignored,
            Decision::ConflictChangedPayload
            | Decision::ConflictSameVersion
            | Decision::Held(_) => Ack::Held,
        }
    }

    /// The decision's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Decision::Applied => "applied",
            Decision::Stale => "stale",
            Decision::Equal => "equal",
            Decision::ConflictChangedPayload => "conflict_changed_payload",
            Decision::ConflictSameVersion => "conflict_same_version",
            Decision::Held(HoldReason::Malformed) => "held_malformed",
            Decision::Held(HoldReason::UnsupportedType) => "held_unsupported_type",
            Decision::Held(HoldReason::UnknownObject) => "held_unknown_object",
            Decision::Held(HoldReason::Paused) => "held_paused",
            Decision::Held(HoldReason::MissingVersion) => "held_missing_version",
            Decision::Held(HoldReason::InvalidVersion) => "held_invalid_version",
        }
    }

    /// Every decision kind, in SPEC order.
    pub const ALL: [Decision; 11] = [
        Decision::Applied,
        Decision::Stale,
        Decision::Equal,
        Decision::ConflictChangedPayload,
        Decision::ConflictSameVersion,
        Decision::Held(HoldReason::Malformed),
        Decision::Held(HoldReason::UnsupportedType),
        Decision::Held(HoldReason::UnknownObject),
        Decision::Held(HoldReason::Paused),
        Decision::Held(HoldReason::MissingVersion),
        Decision::Held(HoldReason::InvalidVersion),
    ];
}

impl Ack {
    /// The acknowledgement's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Ack::Applied => "applied",
            Ack::Ignored => "ignored",
            Ack::Held => "held",
        }
    }
}

impl Verdict {
    /// The decision itself, or the one a duplicate matched.
    #[inline]
    pub fn decision(self) -> Decision {
        match self {
            Verdict::Decided(decision) | Verdict::Duplicate(decision) => decision,
        }
    }

    /// The name in reports: `duplicate` for duplicates.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Decided(decision) => decision.name(),
            Verdict::Duplicate(_) => "duplicate",
        }
    }
}

impl Outcome {
    /// The outcome's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::RefusedBehind => "refused_behind",
            Outcome::Confirmed => "confirmed",
            Outcome::Replaced => "replaced",
        }
    }

    /// Every outcome.
    pub const ALL: [Outcome; 4] = [
        Outcome::Created,
        Outcome::RefusedBehind,
        Outcome::Confirmed,
        Outcome::Replaced,
    ];

    /// Whether the card's state was replaced by the authority.
    pub fn replaces(self) -> bool {
        matches!(self, Outcome::Created | Outcome::Replaced)
    }
}

#[inline]
fn verdict(verdict: Verdict) -> Delivered {
    Delivered {
        verdict,
        ack: verdict.decision().ack(),
    }
}

#[inline]
fn standing(decision: Decision) -> Standing {
    if decision.is_hold() {
        Standing::Held
    } else {
        Standing::Settled
    }
}

impl Receiver {
    /// A receiver that knows these cards.
    pub fn new(initial: impl IntoIterator<Item = (Sym, Card)>) -> Receiver {
        Receiver {
            cards: initial.into_iter().collect(),
            ..Receiver::default()
        }
    }

    /// A receiver from its parts, as a durable store loads them: the cards, the identity
    /// records, the records of inputs without an event id, and the holds (each list in
    /// arrival order). Every hold must refer to a loaded record and every waiting loaded
    /// record must be held ([`Receiver::invariants`] says what is wrong otherwise).
    pub fn from_parts(
        cards: CardTable,
        identities: IdentityTable,
        anonymous: BTreeMap<u32, Record>,
        holds: HoldTable,
    ) -> Receiver {
        Receiver {
            cards,
            identities,
            anonymous,
            holds,
            stamps: Stamps::default(),
            fingerprints: FingerprintCache::default(),
        }
    }

    /// The fingerprint kept for this value ([`Receiver::fingerprint`]).
    pub(crate) fn fingerprint_cache(&self) -> &FingerprintCache {
        &self.fingerprints
    }

    /// The known cards.
    pub fn cards(&self) -> &CardTable {
        &self.cards
    }

    /// The `timestamp-ordering` mutant's stamp of a card (never set under the contract).
    pub fn stamp(&self, card: Sym) -> Option<i64> {
        self.stamps.get(card)
    }

    /// Every event id's records.
    pub fn identities(&self) -> &IdentityTable {
        &self.identities
    }

    /// Records of inputs without an event id, by delivery number.
    pub fn anonymous(&self) -> &BTreeMap<u32, Record> {
        &self.anonymous
    }

    /// Waiting inputs per card, each list in arrival order.
    pub fn holds(&self) -> &HoldTable {
        &self.holds
    }

    /// The paused cards.
    pub fn paused(&self) -> impl Iterator<Item = Sym> + '_ {
        self.cards
            .iter()
            .filter(|(_, card)| card.paused)
            .map(|(id, _)| id)
    }

    /// The record a hold refers to.
    pub fn record(&self, key: HoldKey) -> &Record {
        match key {
            HoldKey::Record { event, index } => self.identities[&event].record(index),
            HoldKey::Delivery(number) => &self.anonymous[&number],
        }
    }

    fn record_mut(&mut self, key: HoldKey) -> &mut Record {
        match key {
            HoldKey::Record { event, index } => self
                .identities
                .get_mut(&event)
                .expect("hold refers to a record")
                .record_mut(index),
            HoldKey::Delivery(number) => self
                .anonymous
                .get_mut(&number)
                .expect("hold refers to a record"),
        }
    }

    /// The recorded decision for this content, if any: what an acknowledgement of it may
    /// say.
    pub fn recorded(&self, event: &Event, delivery: u32) -> Option<Decision> {
        match event.event_id {
            Some(id) => {
                let identity = self.identities.get(&id)?;
                let index = identity.position(event.content)?;
                Some(identity.record(index).decision)
            }
            None => self.anonymous.get(&delivery).map(|record| record.decision),
        }
    }

    /// Unresolved inputs: holds that never received a state decision (still held, or
    /// superseded), see [`Receiver::is_unresolved`].
    pub fn unresolved(&self) -> BTreeSet<InputRef> {
        let waiting = |record: &Record| self.is_unresolved(record);
        let by_id = self
            .identities
            .iter()
            .filter(|(_, identity)| identity.records().any(waiting))
            .map(|(id, _)| InputRef::Event(id));
        let anonymous = self
            .anonymous
            .iter()
            .filter(|(_, record)| waiting(record))
            .map(|(&number, _)| InputRef::Delivery(number));
        by_id.chain(anonymous).collect()
    }

    /// Whether a record is an unresolved input: it waits, or was superseded, or it is a
    /// changed payload that could never be decided itself (unevaluable, or naming a card
    /// that does not exist). Resolving a conflict settles the conflict, not such an input:
    /// the authority never gave it a decision. This keeps the unresolved inputs independent
    /// of which envelope of an event id arrived first (the first record is judged by rules
    /// 2-6 and may stay held or be superseded; a later one is a variant and gets resolved).
    pub fn is_unresolved(&self, record: &Record) -> bool {
        match record.standing {
            Standing::Held | Standing::Superseded => true,
            Standing::Resolved => {
                record.event.is_unevaluable()
                    || record
                        .event
                        .object_id
                        .is_none_or(|card| !self.cards.contains_key(&card))
            }
            Standing::Settled => false,
        }
    }

    /// Decides one delivery and records the decision (SPEC rules 1-6, in order).
    pub fn deliver<P: Policy>(
        &mut self,
        policy: P,
        delivery: u32,
        received_at: Option<i64>,
        event: &Event,
    ) -> Delivered {
        match self.recognise(policy, delivery, event) {
            Some(duplicate) => {
                if let Some(card) = policy.pauses_on_duplicate(event) {
                    self.pause(card);
                }
                duplicate
            }
            None => self.decide(policy, delivery, received_at, event),
        }
    }

    /// Rule 1, read only: a delivery whose content is already recorded (under its event id,
    /// or under its delivery number when it has no event id) is a duplicate with no new
    /// effect. `None`: the delivery needs [`Receiver::decide`].
    #[inline]
    pub fn recognise<P: Policy>(
        &self,
        policy: P,
        delivery: u32,
        event: &Event,
    ) -> Option<Delivered> {
        let recorded = match event.event_id {
            // The only identity an input without an event id has is its delivery number.
            None => self.anonymous.get(&policy.recognised_anonymous(
                &self.anonymous,
                delivery,
                event,
            )?)?,
            Some(id) => {
                let identity = self.identities.get(&id)?;
                identity.record(policy.recognised_record(identity, event)?)
            }
        };
        Some(verdict(Verdict::Duplicate(recorded.decision)))
    }

    /// This receiver as it would be had it lost every record of this delivery's identity
    /// (its event id's records, or the delivery number's for an input without one) and
    /// their holds, and then decided the delivery again; with that decision. Decided on a
    /// copy: it tells a receiver that lost a record and decided the content again from one
    /// that answers a duplicate some other way.
    pub fn decide_afresh<P: Policy>(
        &self,
        policy: P,
        delivery: u32,
        event: &Event,
    ) -> (Receiver, Delivered) {
        let mut copy = self.clone();
        copy.fingerprints.clear();
        match event.event_id {
            Some(id) => {
                copy.identities.remove(&id);
                copy.drop_holds(|key| matches!(key, HoldKey::Record { event, .. } if event == id));
            }
            None => {
                copy.anonymous.remove(&delivery);
                copy.drop_holds(|key| key == HoldKey::Delivery(delivery));
            }
        }
        let delivered = copy.deliver(policy, delivery, None, event);
        (copy, delivered)
    }

    /// Removes the holds `gone` picks, and the lists left empty.
    fn drop_holds(&mut self, gone: impl Fn(HoldKey) -> bool) {
        self.holds.retain(|key| !gone(key));
    }

    /// Decides and records a delivery that [`Receiver::recognise`] did not recognise.
    pub fn decide<P: Policy>(
        &mut self,
        policy: P,
        delivery: u32,
        received_at: Option<i64>,
        event: &Event,
    ) -> Delivered {
        debug_assert!(self.recognise(policy, delivery, event).is_none());
        self.fingerprints.clear();
        // Rule 1: identity.
        let Some(id) = event.event_id else {
            return self.deliver_anonymous(policy, delivery, received_at, event);
        };
        if self.identities.contains_key(&id) {
            let delivered = self.record_variant(policy, id, received_at, event);
            self.debug_check(policy);
            return delivered;
        }
        // Rules 2-6.
        let decision = self.judge(policy, event);
        let first = Record {
            event: *event,
            decision,
            standing: standing(decision),
            recorded_at: RecordedAt::new(received_at),
        };
        self.identities.insert(
            id,
            Identity {
                first,
                variants: Variants::new(),
            },
        );
        if decision.is_hold() {
            self.hold(
                policy,
                event.object_id,
                HoldKey::Record {
                    event: id,
                    index: 0,
                },
            );
        }
        self.debug_check(policy);
        verdict(Verdict::Decided(decision))
    }

    /// Rule 1, no event id: held by delivery number, without an identity record.
    fn deliver_anonymous<P: Policy>(
        &mut self,
        policy: P,
        delivery: u32,
        received_at: Option<i64>,
        event: &Event,
    ) -> Delivered {
        let decision = Decision::Held(HoldReason::Malformed);
        self.pause_known(event.object_id);
        self.anonymous.insert(
            delivery,
            Record {
                event: *event,
                decision,
                standing: Standing::Held,
                recorded_at: RecordedAt::new(received_at),
            },
        );
        self.hold(policy, event.object_id, HoldKey::Delivery(delivery));
        self.debug_check(policy);
        verdict(Verdict::Decided(decision))
    }

    /// Rule 1, changed payload: keep the variant as evidence, hold it, pause every known
    /// card named by the first record or the variant.
    fn record_variant<P: Policy>(
        &mut self,
        policy: P,
        id: Sym,
        received_at: Option<i64>,
        event: &Event,
    ) -> Delivered {
        let decision = Decision::ConflictChangedPayload;
        let record = Record {
            event: *event,
            decision,
            standing: Standing::Held,
            recorded_at: RecordedAt::new(received_at),
        };
        let identity = self.identities.get_mut(&id).expect("caller found the id");
        let first_card = identity.first.event.object_id;
        let index = policy.keep_variant(identity, record);
        let key = HoldKey::Record { event: id, index };
        self.pause_known(first_card);
        self.pause_known(event.object_id);
        let bucket = match policy.files_variant_under_first() {
            true => first_card.or(event.object_id),
            false => event.object_id,
        };
        self.hold(policy, bucket, key);
        verdict(Verdict::Decided(decision))
    }

    /// Rules 2-6 for an event whose identity is new (or a held one evaluated again).
    fn judge<P: Policy>(&mut self, policy: P, event: &Event) -> Decision {
        // Rule 2: type.
        if !event.supported {
            policy.on_unsupported_type(self, event);
            self.pause_known(event.object_id);
            return Decision::Held(HoldReason::UnsupportedType);
        }
        // Rule 3: object.
        let Some(object) = event.object_id else {
            return Decision::Held(HoldReason::Malformed);
        };
        let Some(card) = self.cards.get_mut(&object) else {
            return self.unknown_object(policy, object, event);
        };
        // Rule 4: pause.
        if policy.sees_pause(card) {
            return Decision::Held(HoldReason::Paused);
        }
        // Rule 5: version and state.
        let version = match event.version {
            Version::Valid(version) => version,
            Version::Missing => {
                card.paused = true;
                return Decision::Held(HoldReason::MissingVersion);
            }
            Version::Invalid => {
                card.paused = true;
                return Decision::Held(HoldReason::InvalidVersion);
            }
        };
        let Some(state) = event.state else {
            card.paused = true;
            return Decision::Held(HoldReason::Malformed);
        };
        // Rule 6: compare.
        let stamp = Stamp {
            stamps: &mut self.stamps,
            card: object,
        };
        compare(policy, card, stamp, version, state, event.occurred_at)
    }

    /// Rule 3, unknown card: never create a card from an event.
    fn unknown_object<P: Policy>(&mut self, policy: P, object: Sym, event: &Event) -> Decision {
        policy
            .unknown_card(self, object, event)
            .unwrap_or(Decision::Held(HoldReason::UnknownObject))
    }

    /// Pauses a known card from outside a decision (a wrong receiver's answer to a
    /// duplicate: the contract's receiver never does).
    pub fn pause(&mut self, card: Sym) {
        self.fingerprints.clear();
        self.pause_known(Some(card));
    }

    /// A known card, to change in place (a wrong receiver's hook).
    pub(crate) fn card_mut(&mut self, object: Sym) -> Option<&mut Card> {
        self.cards.get_mut(&object)
    }

    /// Adds a card (a wrong receiver's hook: the contract creates cards only from an
    /// authority snapshot).
    pub(crate) fn insert_card(&mut self, object: Sym, card: Card) {
        self.cards.insert(object, card);
    }

    #[inline]
    fn pause_known(&mut self, object: Option<Sym>) {
        if let Some(card) = object.and_then(|object| self.cards.get_mut(&object)) {
            card.paused = true;
        }
    }

    fn hold<P: Policy>(&mut self, policy: P, bucket: Option<Sym>, key: HoldKey) {
        let filed = |holds: &HoldTable| holds.get(&bucket).is_some_and(|keys| keys.contains(&key));
        // Keys are new by construction; a wrong receiver may file a record twice.
        if !policy.is_contract() && filed(&self.holds) {
            return;
        }
        debug_assert!(!filed(&self.holds), "hold {key:?} is new");
        self.holds.push(bucket, key);
    }

    /// Applies an authority snapshot to its card, then settles the card's holds.
    pub fn reconcile<P: Policy>(&mut self, policy: P, snapshot: &Snapshot) -> Reconciled {
        self.fingerprints.clear();
        let object = snapshot.object_id;
        let outcome = match self.cards.get_mut(&object) {
            None => {
                self.cards
                    .insert(object, Card::new(snapshot.version, snapshot.state));
                Outcome::Created
            }
            Some(card) if snapshot.version < card.version => {
                // The authority cannot vouch for anything newer than itself: nothing is
                // settled, the card stays as it is.
                return Reconciled {
                    outcome: Outcome::RefusedBehind,
                    settled: Vec::new(),
                };
            }
            Some(card) if snapshot.version == card.version && snapshot.state == card.state => {
                card.paused = false;
                Outcome::Confirmed
            }
            Some(card) => {
                card.replace(snapshot.version, snapshot.state);
                card.paused = false;
                Outcome::Replaced
            }
        };
        let settled = self.settle(policy, object);
        self.debug_check(policy);
        Reconciled { outcome, settled }
    }

    /// Settles a just-reconciled card's holds in arrival order.
    fn settle<P: Policy>(&mut self, policy: P, object: Sym) -> Vec<(HoldKey, Settlement)> {
        let mut settled = Vec::new();
        let mut still_held = Vec::new();
        for key in self.holds.take(Some(object)) {
            let record = *self.record(key);
            let conflicted = match key {
                HoldKey::Record { event, .. } => self.identities[&event].is_conflicted(),
                HoldKey::Delivery(_) => false,
            };
            let settlement = match record.decision {
                // No content of a conflicted id is ever applied: every record of it still
                // held, the first included, is resolved, whichever envelope came first.
                _ if policy.resolves_conflicted(conflicted) => {
                    self.record_mut(key).standing = Standing::Resolved;
                    Settlement::Resolved
                }
                Decision::Held(HoldReason::Paused | HoldReason::UnknownObject) => {
                    if !policy.re_evaluates_held() {
                        continue;
                    }
                    let re_paused = self.cards[&object].paused;
                    if re_paused && policy.stops_at_re_pause() {
                        // A hold earlier in this pass paused the card again.
                        still_held.push(key);
                        continue;
                    }
                    let decision = self.judge_past_re_pause(policy, object, re_paused, &record);
                    let entry = self.record_mut(key);
                    entry.decision = decision;
                    entry.standing = standing(decision);
                    if decision.is_hold() {
                        still_held.push(key);
                    }
                    Settlement::ReEvaluated {
                        from: record.decision,
                        to: decision,
                    }
                }
                Decision::ConflictChangedPayload | Decision::ConflictSameVersion => {
                    self.record_mut(key).standing = Standing::Resolved;
                    Settlement::Resolved
                }
                Decision::Held(
                    HoldReason::Malformed
                    | HoldReason::UnsupportedType
                    | HoldReason::MissingVersion
                    | HoldReason::InvalidVersion,
                ) => {
                    self.record_mut(key).standing = Standing::Superseded;
                    Settlement::Superseded
                }
                Decision::Applied | Decision::Stale | Decision::Equal => {
                    debug_assert!(false, "a settled record is never held");
                    continue;
                }
            };
            settled.push((key, settlement));
        }
        self.holds.put(Some(object), still_held);
        // A changed payload that named this card in its first record waits under the
        // variant's card: the authority resolves it too.
        let mut resolved = Vec::new();
        let identities = &self.identities;
        self.holds.retain(|key| {
            let HoldKey::Record { event, index } = key else {
                return true;
            };
            let identity = &identities[&event];
            let names_card = identity.first.event.object_id == Some(object);
            let conflict = identity.record(index).decision == Decision::ConflictChangedPayload;
            if names_card && conflict {
                resolved.push(key);
            }
            !(names_card && conflict)
        });
        for key in resolved {
            self.record_mut(key).standing = Standing::Resolved;
            settled.push((key, Settlement::Resolved));
        }
        settled
    }

    /// Rules 4-6 for a hold being re-evaluated. The contract never gets here with the card
    /// paused again (`re_paused`); a wrong receiver that does judges the hold as if the
    /// card were still just reconciled, and leaves it paused.
    fn judge_past_re_pause<P: Policy>(
        &mut self,
        policy: P,
        object: Sym,
        re_paused: bool,
        record: &Record,
    ) -> Decision {
        if re_paused {
            self.cards.get_mut(&object).expect("reconciled").paused = false;
        }
        let decision = self.judge(policy, &record.event);
        if re_paused {
            self.cards.get_mut(&object).expect("reconciled").paused = true;
        }
        decision
    }

    /// Forgets identity records older than the retention window: every record of the id
    /// was recorded before `now - retention_seconds` and the id may be forgotten at all
    /// (see [`Receiver::expirable`]). A record without a receive time never expires by the
    /// clock. Returns the forgotten ids, in id order.
    pub fn expire(&mut self, now: i64, retention_seconds: u64) -> Vec<Sym> {
        let horizon = now.saturating_sub(i64::try_from(retention_seconds).unwrap_or(i64::MAX));
        self.forget(Spec, |record| {
            record.recorded_at.get().is_some_and(|at| at < horizon)
        })
    }

    /// The retention window passes over everything recorded so far (a sender that comes
    /// back after a long outage, a queue replayed from an old offset): every id that may be
    /// forgotten is forgotten, whatever its receive times. The model checker's expiry step.
    pub fn expire_all(&mut self) -> Vec<Sym> {
        self.forget(Spec, |_| true)
    }

    /// [`Receiver::expire_all`] under a policy (a wrong receiver may forget more).
    pub fn expire_all_under<P: Policy>(&mut self, policy: P) -> Vec<Sym> {
        self.forget(policy, |_| true)
    }

    /// Whether an event id may be forgotten once its records are old: none of them is an
    /// unresolved input (waiting, superseded, or a resolved payload that never got a
    /// decision). Cards, holds, unresolved inputs and inputs without an event id are never
    /// forgotten, so expiry changes no card and no unresolved input.
    pub fn expirable(&self, identity: &Identity) -> bool {
        identity.records().all(|record| !self.is_unresolved(record))
    }

    /// Whether some event id may be forgotten now.
    pub fn has_expirable(&self) -> bool {
        self.identities
            .values()
            .any(|identity| self.expirable(identity))
    }

    fn forget<P: Policy>(&mut self, policy: P, old: impl Fn(&Record) -> bool) -> Vec<Sym> {
        self.fingerprints.clear();
        let gone: Vec<Sym> = self
            .identities
            .iter()
            .filter(|(_, identity)| {
                identity.records().all(&old)
                    && (policy.forgets_unresolved() || self.expirable(identity))
            })
            .map(|(id, _)| id)
            .collect();
        for id in &gone {
            self.identities.remove(id);
        }
        if policy.forgets_unresolved() {
            // A wrong receiver's table drop takes the holds of what it forgot with it.
            self.holds.retain(
                |key| !matches!(key, HoldKey::Record { event, .. } if gone.contains(&event)),
            );
        }
        gone
    }

    /// Checks the receiver's internal invariants (debug builds, SPEC policy only: some
    /// mutants break them on purpose).
    fn debug_check<P: Policy>(&self, policy: P) {
        if cfg!(debug_assertions) && policy.is_contract() {
            if let Err(broken) = self.invariants() {
                panic!("receiver invariant broken: {broken}");
            }
        }
    }

    /// The receiver's internal invariants: every hold refers to a waiting record and every
    /// waiting record is held exactly once, in the bucket of its card; held decisions
    /// and standings agree.
    pub fn invariants(&self) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for (bucket, keys) in self.holds.iter() {
            // Only a list broken by hand can be empty: filing never keeps one.
            if keys.is_empty() {
                return Err(format!("empty hold list for {bucket:?}"));
            }
            for &key in keys {
                let record = self.record(key);
                if record.standing != Standing::Held || !record.decision.is_hold() {
                    return Err(format!(
                        "hold {key:?} refers to a record that does not wait"
                    ));
                }
                if record.event.object_id != bucket {
                    return Err(format!("hold {key:?} is filed under the wrong card"));
                }
                if !seen.insert(key) {
                    return Err(format!("hold {key:?} is listed twice"));
                }
            }
        }
        let identity_keys = self.identities.iter().flat_map(|(event, identity)| {
            identity.records().enumerate().map(move |(index, record)| {
                let index = record_index(index);
                (HoldKey::Record { event, index }, record)
            })
        });
        let anonymous_keys = self
            .anonymous
            .iter()
            .map(|(&number, record)| (HoldKey::Delivery(number), record));
        for (key, record) in identity_keys.chain(anonymous_keys) {
            if record.decision.is_hold() != (record.standing != Standing::Settled) {
                return Err(format!("record {key:?} has decision and standing at odds"));
            }
            if record.standing == Standing::Held && !seen.contains(&key) {
                return Err(format!("record {key:?} waits but is not held"));
            }
        }
        Ok(())
    }
}

/// Rule 6: compare a valid snapshot with an unpaused known card.
#[inline]
fn compare<P: Policy>(
    policy: P,
    card: &mut Card,
    stamp: Stamp<'_>,
    version: u64,
    state: StateId,
    occurred_at: Option<i64>,
) -> Decision {
    if let Some(departure) = policy.compare(card, stamp, version, state, occurred_at) {
        return departure;
    }
    match version.cmp(&card.version) {
        std::cmp::Ordering::Greater => {
            card.replace(version, state);
            Decision::Applied
        }
        std::cmp::Ordering::Less => Decision::Stale,
        std::cmp::Ordering::Equal if state == card.state => Decision::Equal,
        std::cmp::Ordering::Equal => {
            card.paused = true;
            Decision::ConflictSameVersion
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The points at which a receiver can depart from the contract, asked by the decision
/// function at its rules. Every default is the contract's own answer, and [`Spec`] keeps all
/// of them, as constants that fold away. The wrong receivers of
/// [`crate::card::mutants`] each override the hook where a real bug would sit; the
/// property that catches each is named there.
pub trait Policy: Copy {
    /// Whether this is the contract's receiver: its internal invariants are checked in
    /// debug builds (wrong receivers break some on purpose), and a hold key is new by
    /// construction.
    #[inline(always)]
    fn is_contract(self) -> bool {
        true
    }

    /// A crash before the record: whether the acknowledgement went out first.
    #[inline(always)]
    fn acks_before_recording(self) -> bool {
        false
    }

    /// Rule 1, a recognised duplicate: the card it pauses, if any (the contract: none, a
    /// duplicate has no effect).
    #[inline(always)]
    fn pauses_on_duplicate(self, _event: &Event) -> Option<Sym> {
        None
    }

    /// Rule 1: the record of `identity` that the delivered `event` repeats, if any (the
    /// contract: the record with the same content, whatever bytes either came in).
    #[inline(always)]
    fn recognised_record(self, identity: &Identity, event: &Event) -> Option<u32> {
        identity.position(event.content)
    }

    /// Rule 1, an input without an event id: the delivery number of the recorded input it
    /// repeats, if any (the contract: its own delivery number, its only identity).
    #[inline(always)]
    fn recognised_anonymous(
        self,
        anonymous: &BTreeMap<u32, Record>,
        delivery: u32,
        _event: &Event,
    ) -> Option<u32> {
        anonymous.contains_key(&delivery).then_some(delivery)
    }

    /// Rule 1, a changed payload: keeps `record` under `identity` and returns its index (the
    /// contract: a new variant, the first record untouched).
    #[inline(always)]
    fn keep_variant(self, identity: &mut Identity, record: Record) -> u32 {
        identity.variants.push(record);
        record_index(identity.variants.len())
    }

    /// Rule 2, an unsupported type, before the event is held (the contract: nothing).
    #[inline(always)]
    fn on_unsupported_type(self, _receiver: &mut Receiver, _event: &Event) {}

    /// Rule 3, an unknown card: a decision other than holding, if any (the contract: none).
    #[inline(always)]
    fn unknown_card(
        self,
        _receiver: &mut Receiver,
        _object: Sym,
        _event: &Event,
    ) -> Option<Decision> {
        None
    }

    /// Rule 4: whether the card counts as paused (the contract: when it is).
    #[inline(always)]
    fn sees_pause(self, card: &Card) -> bool {
        card.paused
    }

    /// Rule 6: a decision other than the contract's comparison of versions, if any.
    #[inline(always)]
    fn compare(
        self,
        _card: &mut Card,
        _stamp: Stamp<'_>,
        _version: u64,
        _state: StateId,
        _occurred_at: Option<i64>,
    ) -> Option<Decision> {
        None
    }

    /// Reconciliation: whether a held record of an id is resolved without evaluation (the
    /// contract: when the id is conflicted).
    #[inline(always)]
    fn resolves_conflicted(self, conflicted: bool) -> bool {
        conflicted
    }

    /// Reconciliation: whether a re-pause ends the pass's re-evaluations (the contract:
    /// yes; the rest wait for the next reconciliation).
    #[inline(always)]
    fn stops_at_re_pause(self) -> bool {
        true
    }

    /// Reconciliation: whether inputs held for a pause or an unknown card are evaluated
    /// again (the contract: always).
    #[inline(always)]
    fn re_evaluates_held(self) -> bool {
        true
    }

    /// Rule 1, a changed payload: whether its hold is filed under the card its id's first
    /// record names (when it names one) rather than the card the variant names. The contract
    /// does not say; arrival's reading is the variant's card, and `arrival conform` also
    /// accepts the other ([`FirstCardReading`]).
    #[inline(always)]
    fn files_variant_under_first(self) -> bool {
        false
    }

    /// Expiry: whether an event id with an unresolved input among its records is forgotten
    /// too (the contract: never).
    #[inline(always)]
    fn forgets_unresolved(self) -> bool {
        false
    }
}

/// The receiver of the card contract (`docs/protocol.md`): every hook as the contract says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Spec;

impl Policy for Spec {}

/// The contract's receiver under the other reading of where a changed payload's hold is
/// filed: under the card its id's first record names. Not a wrong receiver: the contract
/// leaves the choice open, so `arrival conform` judges a receiver under either reading.
/// Its holds break arrival's own filing invariant, which is therefore not checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FirstCardReading;

impl Policy for FirstCardReading {
    #[inline(always)]
    fn is_contract(self) -> bool {
        false
    }

    #[inline(always)]
    fn files_variant_under_first(self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    //! `invariants()` must name each kind of broken state. No input reaches one (the
    //! integration tests check that every reachable state passes), so the states are
    //! broken by hand here.
    use super::*;
    use crate::card::wire::Catalog;
    use serde_json::json;

    /// A receiver holding one input for the unknown card-99, and the hold's key.
    fn holding() -> (Receiver, HoldKey) {
        let mut catalog = Catalog::new();
        let card = catalog.event(&json!({"object_id": "card-7"})).object_id;
        let state = catalog.state(&json!({"stage": "queued"}));
        let mut receiver = Receiver::new([(card.expect("a card id"), Card::new(10, state))]);
        let event = catalog.event(&json!({
            "event_id": "e-300", "object_id": "card-99", "object_version": 1,
            "type": "card.snapshot", "state": {"stage": "new"}
        }));
        let answer = receiver.deliver(Spec, 1, None, &event);
        assert_eq!(
            answer.verdict,
            Verdict::Decided(Decision::Held(HoldReason::UnknownObject))
        );
        let key = *receiver.holds.values().flatten().next().expect("one hold");
        assert_eq!(receiver.invariants(), Ok(()));
        (receiver, key)
    }

    fn broken(receiver: &Receiver) -> String {
        receiver.invariants().expect_err("a broken state")
    }

    #[test]
    fn an_id_with_more_than_65536_contents_keeps_every_one_without_panicking() {
        // Record indices were `u16`: the 65,536th changed payload under one id overflowed
        // and panicked inside `deliver`. The id here already has 65,536 resolved variants
        // (built directly: delivering them one by one re-checks every invariant each time).
        let mut catalog = Catalog::new();
        let envelope = |stage: usize| {
            json!({
                "event_id": "e-1", "object_id": "card-7", "object_version": 11,
                "type": "card.snapshot", "state": {"stage": stage}
            })
        };
        let first = catalog.event(&envelope(0));
        let card = first.object_id.expect("a card id");
        let mut receiver = Receiver::new([(card, Card::new(10, first.state.expect("a state")))]);
        receiver.deliver(Spec, 1, None, &first);
        let variants = (1..=65_536)
            .map(|stage| Record {
                event: catalog.event(&envelope(stage)),
                decision: Decision::ConflictChangedPayload,
                standing: Standing::Resolved,
                recorded_at: RecordedAt::NONE,
            })
            .collect();
        let id = first.event_id.expect("an id");
        receiver.identities.get_mut(&id).expect("recorded").variants = variants;
        assert_eq!(receiver.invariants(), Ok(()));

        let next = catalog.event(&envelope(65_537));
        let answer = receiver.deliver(Spec, 2, None, &next);
        assert_eq!(
            answer.verdict,
            Verdict::Decided(Decision::ConflictChangedPayload)
        );
        let identity = &receiver.identities[&id];
        assert_eq!(identity.variants.len(), 65_537, "every content is kept");
        assert_eq!(identity.position(next.content), Some(65_537));
        let again = receiver.deliver(Spec, 3, None, &next);
        assert_eq!(
            again.verdict,
            Verdict::Duplicate(Decision::ConflictChangedPayload)
        );
    }

    #[test]
    fn a_hold_must_refer_to_a_waiting_record() {
        let (mut receiver, key) = holding();
        receiver.record_mut(key).standing = Standing::Resolved;
        assert!(broken(&receiver).contains("does not wait"));

        let (mut receiver, key) = holding();
        receiver.record_mut(key).decision = Decision::Applied;
        assert!(broken(&receiver).contains("does not wait"));
    }

    #[test]
    fn a_hold_must_be_filed_once_under_its_own_card() {
        let (mut receiver, key) = holding();
        let card = receiver.record(key).event.object_id;
        let keys = receiver.holds.take(card);
        receiver.holds.put(None, keys);
        assert!(broken(&receiver).contains("wrong card"));

        let (mut receiver, key) = holding();
        receiver
            .holds
            .push(receiver.record(key).event.object_id, key);
        assert!(broken(&receiver).contains("listed twice"));

        let (mut receiver, key) = holding();
        let card = receiver.record(key).event.object_id.expect("a card id");
        receiver.holds.cards.insert(card, Vec::new());
        assert!(broken(&receiver).contains("empty hold list"));
    }

    #[test]
    fn every_waiting_record_is_held_and_decisions_match_standings() {
        let (mut receiver, _) = holding();
        receiver.holds = HoldTable::default();
        assert!(broken(&receiver).contains("waits but is not held"));

        let (mut receiver, key) = holding();
        receiver.holds = HoldTable::default();
        receiver.record_mut(key).standing = Standing::Settled;
        assert!(broken(&receiver).contains("at odds"));

        let (mut receiver, key) = holding();
        receiver.holds = HoldTable::default();
        let record = receiver.record_mut(key);
        record.standing = Standing::Superseded;
        record.decision = Decision::Stale;
        assert!(broken(&receiver).contains("at odds"));
    }

    /// One change to a hold table: file a key, take a list, put one back (maybe empty),
    /// or drop every key of one event id.
    #[derive(Clone, Debug)]
    enum Change {
        Push(Option<u32>, u32),
        Take(Option<u32>),
        Put(Option<u32>, Vec<u32>),
        Drop(u32),
    }

    fn change() -> impl proptest::strategy::Strategy<Value = Change> {
        use proptest::prelude::*;
        let bucket = proptest::option::of(0u32..6);
        prop_oneof![
            (bucket.clone(), 0u32..8).prop_map(|(bucket, event)| Change::Push(bucket, event)),
            bucket.clone().prop_map(Change::Take),
            (bucket, proptest::collection::vec(0u32..8, 0..3))
                .prop_map(|(bucket, events)| Change::Put(bucket, events)),
            (0u32..8).prop_map(Change::Drop),
        ]
    }

    fn hash_of(value: &impl std::hash::Hash) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        BuildHasherDefault::<DefaultHasher>::default().hash_one(value)
    }

    proptest::proptest! {
        /// The hold table reads, compares and hashes as the sorted map it replaced, after any
        /// changes: fingerprints and state orders depend on it.
        #[test]
        fn the_hold_table_behaves_as_a_sorted_map_of_non_empty_lists(
            one in proptest::collection::vec(change(), 0..24),
            other in proptest::collection::vec(change(), 0..24),
        ) {
            let key = |event: u32| HoldKey::Record { event: Sym(event), index: 0 };
            let bucket = |card: Option<u32>| card.map(Sym);
            let build = |changes: &[Change]| {
                let mut table = HoldTable::default();
                let mut map: BTreeMap<Option<Sym>, Vec<HoldKey>> = BTreeMap::new();
                for change in changes {
                    match change {
                        Change::Push(card, event) => {
                            table.push(bucket(*card), key(*event));
                            map.entry(bucket(*card)).or_default().push(key(*event));
                        }
                        Change::Take(card) => {
                            let taken = table.take(bucket(*card));
                            assert_eq!(taken, map.remove(&bucket(*card)).unwrap_or_default());
                        }
                        Change::Put(card, events) => {
                            let keys: Vec<HoldKey> = events.iter().map(|&event| key(event)).collect();
                            table.put(bucket(*card), keys.clone());
                            map.insert(bucket(*card), keys);
                        }
                        Change::Drop(event) => {
                            table.retain(|held| held != key(*event));
                            map.values_mut().for_each(|keys| keys.retain(|&held| held != key(*event)));
                        }
                    }
                    map.retain(|_, keys| !keys.is_empty());
                }
                (table, map)
            };
            let (table, map) = build(&one);
            let (other_table, other_map) = build(&other);
            let lists: Vec<_> = table.iter().collect();
            let sorted: Vec<_> = map.iter().map(|(&bucket, keys)| (bucket, keys)).collect();
            proptest::prop_assert_eq!(lists, sorted);
            proptest::prop_assert_eq!(table.len(), map.len());
            proptest::prop_assert_eq!(table.cmp(&other_table), map.cmp(&other_map));
            proptest::prop_assert_eq!(table == other_table, map == other_map);
            proptest::prop_assert_eq!(hash_of(&table), hash_of(&map));
            let rebuilt: HoldTable = map.clone().into_iter().collect();
            proptest::prop_assert_eq!(rebuilt, table);
        }
    }
}
