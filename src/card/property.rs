//! The card contract's properties by name: the [`Property`] enum, its names and the
//! [`Properties`] set a model checks. The checks themselves are in
//! [`crate::card::properties`].

use std::fmt;
use std::str::FromStr;

/// A named property of the card contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Property {
    /// The first record of an event id never changes.
    FirstRecordImmutable,
    /// Every distinct content received under an id is retained.
    EvidenceRetained,
    /// No card exists that is neither initial nor created by its authority.
    NoUnknownCard,
    /// A card's version never decreases, and an event changes a card's state only with a
    /// higher version.
    VersionMonotonic,
    /// A paused card changes only by reconciliation.
    PausedFrozen,
    /// A held (or conflict) decision changes no card.
    HeldChangesNothing,
    /// Every acknowledgement the sender got matches a recorded decision.
    AckImpliesRecorded,
    /// A duplicate changes nothing at all, nor does any delivery of content already
    /// recorded, whatever bytes it came in (a re-encoded redelivery).
    DuplicateNoEffect,
    /// Not one of SPEC's: a delivery the receiver has seen before (a copy of an
    /// acknowledged delivery, or any delivery whose records expiry forgot) is recognised
    /// as a duplicate. It holds without expiry and is lost with it, as SPEC's retention
    /// section says; opt in (`properties` in a model file) to see how.
    RedeliveryRecognised,
    /// Every terminal state has the expected final cards, no paused card but the ones
    /// `expect.paused` lists (cards without an authority snapshot), and exactly the
    /// expected unresolved inputs.
    Convergence,
    /// The precondition of convergence: every authority snapshot is at least as new as its
    /// card's initial version and every decidable version delivered for that card. A
    /// property of the fixture, checked before any state is explored.
    AuthorityCurrent,
    /// No content of a conflicted event id is ever decided: once an id carries two
    /// contents, each of its records still waiting is resolved, never re-evaluated (read
    /// from the records' standings on every step).
    ConflictedNeverDecided,
    /// A re-evaluation stops at a re-pause: once re-evaluating a hold pauses the card again,
    /// no later hold of that reconciliation is re-evaluated; they wait for the next one
    /// (read from the settlements a reconciliation records, in order).
    RePauseStopsReEvaluation,
    /// Reconciliation settles every hold of its card: each is resolved, superseded or
    /// re-evaluated, or still waits because the pass stopped at a re-pause (read from the
    /// settlements a reconciliation records).
    ReconciliationSettlesHolds,
    /// Not a rule of the contract but the harness's: no step panics (a panic in the
    /// decision function or a check is a finding, reported with the path to it). Always
    /// checked; not in [`Property::ALL`], whose length is its index.
    Panic,
}

// The harness reports a panicking step as the property just past the protocol's own.
const _: () = assert!(Property::Panic as usize == Property::ALL.len());

impl Property {
    /// Every property, in the order checks run (and violations are reported).
    pub const ALL: [Property; 14] = [
        Property::FirstRecordImmutable,
        Property::EvidenceRetained,
        Property::NoUnknownCard,
        Property::VersionMonotonic,
        Property::PausedFrozen,
        Property::HeldChangesNothing,
        Property::AckImpliesRecorded,
        Property::DuplicateNoEffect,
        Property::RedeliveryRecognised,
        Property::Convergence,
        Property::AuthorityCurrent,
        Property::ConflictedNeverDecided,
        Property::RePauseStopsReEvaluation,
        Property::ReconciliationSettlesHolds,
    ];

    /// Every property's name, in [`Property::ALL`] order (the discriminant is the index).
    pub const NAMES: [&'static str; 14] = [
        "first-record-immutable",
        "evidence-retained",
        "no-unknown-card",
        "version-monotonic",
        "paused-frozen",
        "held-changes-nothing",
        "ack-implies-recorded",
        "duplicate-no-effect",
        "redelivery-recognised",
        "convergence",
        "authority-current",
        "conflicted-never-decided",
        "re-pause-stops-re-evaluation",
        "reconciliation-settles-holds",
    ];

    /// The property's name in model files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Property::Panic => crate::harness::panic::PANIC,
            property => Property::NAMES[property as usize],
        }
    }

    /// The property with harness index `index`: one of [`Property::ALL`], or `panic` just
    /// past them.
    pub fn at(index: usize) -> Property {
        Property::ALL.get(index).copied().unwrap_or(Property::Panic)
    }

    /// Whether the model checker evaluates the property on explored states and steps
    /// (every one but the fixture precondition `authority-current`).
    pub fn is_explored(self) -> bool {
        self != Property::AuthorityCurrent
    }
}

/// A set of properties: the ones a run checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Properties(u16);

impl Properties {
    /// SPEC's thirteen (twelve properties and the `authority-current` precondition): what
    /// replay and model files check unless told otherwise.
    pub const SPEC: Properties =
        Properties((1 << Property::ALL.len()) - 1 - (1 << Property::RedeliveryRecognised as u16));

    /// Just one.
    pub fn only(property: Property) -> Properties {
        Properties(1 << property as u16)
    }

    /// Whether `property` is in the set.
    pub fn contains(self, property: Property) -> bool {
        self.0 & (1 << property as u16) != 0
    }

    /// The set with `property` added.
    pub fn with(self, property: Property) -> Properties {
        Properties(self.0 | Properties::only(property).0)
    }

    /// The members, in [`Property::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Property> {
        Property::ALL
            .into_iter()
            .filter(move |&property| self.contains(property))
    }
}

impl FromIterator<Property> for Properties {
    fn from_iter<I: IntoIterator<Item = Property>>(iter: I) -> Properties {
        iter.into_iter()
            .fold(Properties(0), |set, property| set.with(property))
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Property {
    type Err = String;

    fn from_str(text: &str) -> Result<Property, String> {
        Property::ALL
            .into_iter()
            .chain([Property::Panic])
            .find(|property| property.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = Property::ALL
                    .iter()
                    .chain(&[Property::Panic])
                    .map(|p| p.name())
                    .collect();
                format!(
                    "unknown property `{text}`; expected one of: {}",
                    names.join(", ")
                )
            })
    }
}
