//! Receiver policies: the SPEC policy and the deliberately wrong ones the checker must catch.
//!
//! The decision function is generic over [`Policy`]. [`Spec`] answers "no mutant" as a
//! constant, so every mutant branch folds away when the real receiver is compiled: the
//! mutant catalogue costs the hot path nothing. `Option<Mutant>` is the run-time choice the
//! checker and `replay --policy` use.

use crate::card::properties::Property;
use std::fmt;
use std::str::FromStr;

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
}

impl Mutant {
    /// Every mutant, in catalogue order.
    pub const ALL: [Mutant; 12] = [
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
    ];

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
        }
    }

    /// Whether the mutant can only be seen where `authority-current` is relaxed. Re-evaluating
    /// a conflicted id's first record cannot change a card while every authority is current
    /// (the authority is at least as new as the record, so re-evaluation gives stale, equal or
    /// a conflict), so on fixtures that keep the precondition the sweep expects it to pass;
    /// its model file relaxes the precondition and catches it.
    pub fn needs_relaxed_precondition(self) -> bool {
        matches!(self, Mutant::ReevaluateConflictedFirst)
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
            Mutant::ForgetHeldAfterReconcile => Property::Convergence,
            Mutant::AckBeforeRecord => Property::AckImpliesRecorded,
            Mutant::ReevaluateConflictedFirst => Property::Convergence,
            Mutant::PauseOnRedelivery => Property::DuplicateNoEffect,
            Mutant::ApplyUnsupportedType => Property::HeldChangesNothing,
        }
    }
}

/// What the decision function asks of a policy.
pub trait Policy: Copy {
    /// The mutant in force, if any.
    fn mutant(self) -> Option<Mutant>;

    /// Whether this policy is the given mutant.
    #[inline(always)]
    fn is(self, mutant: Mutant) -> bool {
        self.mutant() == Some(mutant)
    }
}

/// The policy of the card contract (`docs/protocol.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Spec;

impl Policy for Spec {
    #[inline(always)]
    fn mutant(self) -> Option<Mutant> {
        None
    }
}

impl Policy for Option<Mutant> {
    #[inline(always)]
    fn mutant(self) -> Option<Mutant> {
        self
    }
}

/// A policy chosen by name: `spec` or a mutant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PolicyName(pub Option<Mutant>);

impl PolicyName {
    /// SPEC, then every mutant in catalogue order.
    pub fn every() -> Vec<PolicyName> {
        std::iter::once(PolicyName(None))
            .chain(
                Mutant::ALL
                    .into_iter()
                    .map(|mutant| PolicyName(Some(mutant))),
            )
            .collect()
    }

    /// Every accepted name, `spec` first.
    pub fn all_names() -> Vec<&'static str> {
        std::iter::once("spec")
            .chain(Mutant::ALL.iter().map(|mutant| mutant.name()))
            .collect()
    }
}

impl FromStr for PolicyName {
    type Err = String;

    fn from_str(text: &str) -> Result<PolicyName, String> {
        if text == "spec" {
            return Ok(PolicyName(None));
        }
        Mutant::ALL
            .into_iter()
            .find(|mutant| mutant.name() == text)
            .map(|mutant| PolicyName(Some(mutant)))
            .ok_or_else(|| {
                format!(
                    "unknown policy `{text}`; expected one of: {}",
                    PolicyName::all_names().join(", ")
                )
            })
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.map_or("spec", Mutant::name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in PolicyName::all_names() {
            let policy: PolicyName = name.parse().unwrap();
            assert_eq!(policy.to_string(), name);
        }
        assert!("latest-wins".parse::<PolicyName>().is_err());
    }
}
