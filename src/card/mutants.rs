//! The wrong receivers the checker must catch, each a bug seen in real webhook consumers.
//!
//! Each mutant departs from the contract at one hook of [`Policy`] (the decision function in
//! [`crate::card::receiver`] calls the hooks and never names a mutant) and names the
//! property that catches it ([`Mutant::caught_by`]), which its model file in `models/` and
//! the sweep check. `Option<Mutant>` is the run-time choice the checker and
//! `replay --policy` use; `None` is the contract.

use crate::card::property::Property;
use crate::card::receiver::{Card, Decision, Identity, Policy, Receiver, Record, Spec, Stamp};
use crate::card::wire::{Event, StateId, Sym, Version};
use std::collections::BTreeMap;

/// A deliberately wrong receiver, each one a bug seen in real webhook consumers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mutant {
    /// Applies every valid snapshot to an unpaused known card, whatever its version.
    LastArrivalWins,
    /// Orders snapshots by `occurred_at` instead of `object_version` (ties go to the later
    /// arrival).
    TimestampOrdering,
    /// Treats any repeated event id as a duplicate, silently dropping changed payloads.
    IdOnlyDedupe,
    /// Replaces the first record of an id with a changed payload instead of appending it.
    OverwriteFirstRecord,
    /// Creates a card from an event that names an unknown card.
    CreateUnknownCard,
    /// Applies events to paused cards as if nothing were wrong.
    IgnorePause,
    /// Applies an equal-version snapshot whose state differs.
    ApplyEqualVersionConflict,
    /// Drops a card's waiting holds at reconciliation without evaluating them.
    ForgetHeldAfterReconcile,
    /// Acknowledges a delivery before its decision is recorded.
    AckBeforeRecord,
    /// Re-evaluates a conflicted id's first record at reconciliation when it is still held
    /// (`held_paused`, `held_unknown_object`), so whichever payload arrived first wins.
    ReevaluateConflictedFirst,
    /// Pauses the card whenever an event id comes back, exact redeliveries included.
    PauseOnRedelivery,
    /// Holds an event of an unsupported type but applies its state anyway (a "tolerant
    /// reader" that flags what it should have refused).
    ApplyUnsupportedType,
    /// Recognises a redelivery by the hash of its body (its bytes) instead of its parsed
    /// content, so the same envelope re-encoded on the way (keys in another order, other
    /// whitespace) is taken for a changed payload.
    DedupeByBodyHash,
    /// Lets the retention window forget every old event id, unresolved ones too (a TTL on
    /// the whole dedupe table, held work included), so a held input's evidence vanishes.
    ExpireUnresolved,
    /// Goes on re-evaluating a card's holds after one of them paused the card again, as if
    /// the card were still just reconciled (a loop that reads the pause once, before it
    /// starts).
    ReEvaluatePastRePause,
    /// Recognises a redelivery only by the id's first record, so a copy of a changed
    /// payload (a variant) is recorded once more as yet another variant.
    DedupeAgainstFirstRecord,
    /// Recognises an input without an event id by its content instead of its delivery
    /// number, so a second, separate input with the same body is taken for a duplicate and
    /// never recorded.
    AnonymousByContent,
    /// Not in the catalogue: a probe of the checker itself. Assumes an event id never comes
    /// back with a changed payload and panics when one does (an `unreachable!` where the
    /// contract records a conflict), so that tests can see a panic reported as a finding.
    PanicOnChangedPayload,
}

impl Mutant {
    /// Every mutant, in catalogue order.
    pub const ALL: [Mutant; 17] = [
        Mutant::LastArrivalWins,
        Mutant::TimestampOrdering,
        Mutant::IdOnlyDedupe,
        Mutant::OverwriteFirstRecord,
        Mutant::CreateUnknownCard,
        Mutant::IgnorePause,
        Mutant::ApplyEqualVersionConflict,
        Mutant::ForgetHeldAfterReconcile,
        Mutant::AckBeforeRecord,
        Mutant::ReevaluateConflictedFirst,
        Mutant::PauseOnRedelivery,
        Mutant::ApplyUnsupportedType,
        Mutant::DedupeByBodyHash,
        Mutant::ExpireUnresolved,
        Mutant::ReEvaluatePastRePause,
        Mutant::DedupeAgainstFirstRecord,
        Mutant::AnonymousByContent,
    ];

    /// Wrong receivers that test the checker rather than the contract: accepted by name,
    /// left out of the catalogue, the sweep's default policies and the docs' counts.
    pub const PROBES: [Mutant; 1] = [Mutant::PanicOnChangedPayload];

    /// The name used in model files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::LastArrivalWins => "last-arrival-wins",
            Mutant::TimestampOrdering => "timestamp-ordering",
            Mutant::IdOnlyDedupe => "id-only-dedupe",
            Mutant::OverwriteFirstRecord => "overwrite-first-record",
            Mutant::CreateUnknownCard => "create-unknown-card",
            Mutant::IgnorePause => "ignore-pause",
            Mutant::ApplyEqualVersionConflict => "apply-equal-version-conflict",
            Mutant::ForgetHeldAfterReconcile => "forget-held-after-reconcile",
            Mutant::AckBeforeRecord => "ack-before-record",
            Mutant::ReevaluateConflictedFirst => "reevaluate-conflicted-first",
            Mutant::PauseOnRedelivery => "pause-on-redelivery",
            Mutant::ApplyUnsupportedType => "apply-unsupported-type",
            Mutant::DedupeByBodyHash => "dedupe-by-body-hash",
            Mutant::ExpireUnresolved => "expire-unresolved",
            Mutant::ReEvaluatePastRePause => "re-evaluate-past-re-pause",
            Mutant::DedupeAgainstFirstRecord => "dedupe-against-first-record",
            Mutant::AnonymousByContent => "anonymous-by-content",
            Mutant::PanicOnChangedPayload => "panic-on-changed-payload",
        }
    }

    /// Whether only a model in which the retention window passes can catch the mutant (the
    /// sweep catches it in its expiry pass).
    pub fn needs_expiry(self) -> bool {
        matches!(self, Mutant::ExpireUnresolved)
    }

    /// The property that catches this mutant: the catalogue's claim, checked by its model
    /// file in `models/` and by the sweep.
    pub fn caught_by(self) -> Property {
        match self {
            Mutant::LastArrivalWins => Property::VersionMonotonic,
            Mutant::TimestampOrdering => Property::VersionMonotonic,
            Mutant::IdOnlyDedupe => Property::EvidenceRetained,
            Mutant::OverwriteFirstRecord => Property::FirstRecordImmutable,
            Mutant::CreateUnknownCard => Property::NoUnknownCard,
            Mutant::IgnorePause => Property::PausedFrozen,
            Mutant::ApplyEqualVersionConflict => Property::VersionMonotonic,
            Mutant::ForgetHeldAfterReconcile => Property::ReconciliationSettlesHolds,
            Mutant::AckBeforeRecord => Property::AckImpliesRecorded,
            Mutant::ReevaluateConflictedFirst => Property::ConflictedNeverDecided,
            Mutant::PauseOnRedelivery => Property::DuplicateNoEffect,
            Mutant::ApplyUnsupportedType => Property::HeldChangesNothing,
            Mutant::DedupeByBodyHash => Property::DuplicateNoEffect,
            Mutant::ExpireUnresolved => Property::EvidenceRetained,
            Mutant::ReEvaluatePastRePause => Property::RePauseStopsReEvaluation,
            Mutant::DedupeAgainstFirstRecord => Property::DuplicateNoEffect,
            Mutant::AnonymousByContent => Property::EvidenceRetained,
            Mutant::PanicOnChangedPayload => Property::Panic,
        }
    }
}

/// Each hook answers as the contract does, except at the one the mutant in force departs
/// from.
impl Policy for Option<Mutant> {
    #[inline(always)]
    fn is_contract(self) -> bool {
        self.is_none()
    }

    #[inline(always)]
    fn acks_before_recording(self) -> bool {
        self == Some(Mutant::AckBeforeRecord)
    }

    #[inline(always)]
    fn pauses_on_duplicate(self, event: &Event) -> Option<Sym> {
        match self {
            Some(Mutant::PauseOnRedelivery) => event.object_id,
            _ => None,
        }
    }

    #[inline(always)]
    fn recognised_record(self, identity: &Identity, event: &Event) -> Option<u32> {
        match self {
            // Any repeated id is a duplicate of its first record.
            Some(Mutant::IdOnlyDedupe) => Some(0),
            // Only the first record's content is a duplicate.
            Some(Mutant::DedupeAgainstFirstRecord) => {
                (identity.first.event.content == event.content).then_some(0)
            }
            // Only the same bytes are a duplicate.
            Some(Mutant::DedupeByBodyHash) => identity
                .records()
                .position(|record| record.event.bytes == event.bytes)
                .map(|index| u32::try_from(index).expect("fewer than 2^32 contents per id")),
            _ => Spec.recognised_record(identity, event),
        }
    }

    #[inline(always)]
    fn recognised_anonymous(
        self,
        anonymous: &BTreeMap<u32, Record>,
        delivery: u32,
        event: &Event,
    ) -> Option<u32> {
        match self {
            Some(Mutant::AnonymousByContent) => anonymous
                .iter()
                .find(|(_, record)| record.event.content == event.content)
                .map(|(&number, _)| number),
            _ => Spec.recognised_anonymous(anonymous, delivery, event),
        }
    }

    #[inline(always)]
    fn keep_variant(self, identity: &mut Identity, record: Record) -> u32 {
        match self {
            Some(Mutant::OverwriteFirstRecord) => {
                identity.first = record;
                0
            }
            Some(Mutant::PanicOnChangedPayload) => {
                unreachable!("an event id never comes back with a changed payload")
            }
            _ => Spec.keep_variant(identity, record),
        }
    }

    #[inline(always)]
    fn on_unsupported_type(self, receiver: &mut Receiver, event: &Event) {
        if self == Some(Mutant::ApplyUnsupportedType) {
            apply_anyway(receiver, event);
        }
    }

    #[inline(always)]
    fn unknown_card(self, receiver: &mut Receiver, object: Sym, event: &Event) -> Option<Decision> {
        if self != Some(Mutant::CreateUnknownCard) {
            return None;
        }
        let (Version::Valid(version), Some(state)) = (event.version, event.state) else {
            return None;
        };
        receiver.insert_card(object, Card::new(version, state));
        Some(Decision::Applied)
    }

    #[inline(always)]
    fn sees_pause(self, card: &Card) -> bool {
        card.paused && self != Some(Mutant::IgnorePause)
    }

    #[inline(always)]
    fn compare(
        self,
        card: &mut Card,
        mut stamp: Stamp<'_>,
        version: u64,
        state: StateId,
        occurred_at: Option<i64>,
    ) -> Option<Decision> {
        match self? {
            Mutant::LastArrivalWins => {
                card.replace(version, state);
                Some(Decision::Applied)
            }
            Mutant::TimestampOrdering if occurred_at >= stamp.get() => {
                card.replace(version, state);
                stamp.set(occurred_at);
                Some(Decision::Applied)
            }
            Mutant::TimestampOrdering => Some(Decision::Stale),
            Mutant::ApplyEqualVersionConflict if version == card.version && state != card.state => {
                card.replace(version, state);
                Some(Decision::Applied)
            }
            _ => None,
        }
    }

    #[inline(always)]
    fn resolves_conflicted(self, conflicted: bool) -> bool {
        conflicted && self != Some(Mutant::ReevaluateConflictedFirst)
    }

    #[inline(always)]
    fn stops_at_re_pause(self) -> bool {
        self != Some(Mutant::ReEvaluatePastRePause)
    }

    #[inline(always)]
    fn re_evaluates_held(self) -> bool {
        self != Some(Mutant::ForgetHeldAfterReconcile)
    }

    #[inline(always)]
    fn forgets_unresolved(self) -> bool {
        self == Some(Mutant::ExpireUnresolved)
    }
}

/// The `apply-unsupported-type` mutant: a newer snapshot of an unpaused known card is
/// applied although the event is held.
fn apply_anyway(receiver: &mut Receiver, event: &Event) {
    let card = event.object_id.and_then(|object| receiver.card_mut(object));
    if let (Some(card), Version::Valid(version), Some(state)) = (card, event.version, event.state) {
        if !card.paused && version > card.version {
            card.replace(version, state);
        }
    }
}
