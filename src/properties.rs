//! The safety and convergence properties of SPEC.md, one per bullet, as checks on steps and
//! states.
//!
//! stateright's properties are predicates on states, but several of SPEC's are about steps
//! (a duplicate changes nothing, a paused card changes only by reconciliation). Those are
//! checked inside [`crate::network::transition`] by comparing the world before and after the
//! step; a broken rule leaves a marker in the successor (`World::violation`) that an
//! `always` property reads. Correct steps carry no marker, so the checks add no states.

use crate::fixture::Scenario;
use crate::network::{Effect, Fault, Step, World};
use crate::receiver::{Receiver, Verdict};
use std::fmt;
use std::str::FromStr;

/// A named property of SPEC.md.
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
    /// A duplicate changes nothing at all.
    DuplicateNoEffect,
    /// Every terminal state has the expected final cards, nothing paused, and exactly the
    /// expected unresolved inputs.
    Convergence,
}

impl Property {
    /// Every property, in the order checks run (and violations are reported).
    pub const ALL: [Property; 9] = [
        Property::FirstRecordImmutable,
        Property::EvidenceRetained,
        Property::NoUnknownCard,
        Property::VersionMonotonic,
        Property::PausedFrozen,
        Property::HeldChangesNothing,
        Property::AckImpliesRecorded,
        Property::DuplicateNoEffect,
        Property::Convergence,
    ];

    /// The property's name in model files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Property::FirstRecordImmutable => "first-record-immutable",
            Property::EvidenceRetained => "evidence-retained",
            Property::NoUnknownCard => "no-unknown-card",
            Property::VersionMonotonic => "version-monotonic",
            Property::PausedFrozen => "paused-frozen",
            Property::HeldChangesNothing => "held-changes-nothing",
            Property::AckImpliesRecorded => "ack-implies-recorded",
            Property::DuplicateNoEffect => "duplicate-no-effect",
            Property::Convergence => "convergence",
        }
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
            .find(|property| property.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = Property::ALL.iter().map(|p| p.name()).collect();
                format!(
                    "unknown property `{text}`; expected one of: {}",
                    names.join(", ")
                )
            })
    }
}

/// Checks one step: `pre` went to `post` by `step` with `effect`. Returns the first broken
/// property, in [`Property::ALL`] order.
pub fn check_step(
    scenario: &Scenario,
    pre: &World,
    post: &World,
    step: Step,
    effect: &Effect,
) -> Option<Property> {
    let (before, after) = (&pre.receiver, &post.receiver);
    let delivery = match (step, effect) {
        (Step::Deliver { delivery, fault }, Effect::Delivered { delivered, acked }) => {
            Some((delivery, fault, *delivered, *acked))
        }
        _ => None,
    };
    let arriving = delivery.map(|(number, ..)| {
        let index = scenario
            .delivery_index(number)
            .expect("step names a delivery");
        &scenario.deliveries[index]
    });

    // Whether what arrived is recorded (a crash records nothing, by definition).
    let arrived_recorded = match (delivery, arriving) {
        (Some((number, fault, ..)), Some(arriving)) if fault != Some(Fault::Crash) => {
            after.recorded(&arriving.event, number).is_some()
        }
        _ => true,
    };
    // Whether the acknowledgement the sender got, if any, is a recorded decision's meaning.
    let ack_matches = match (delivery, arriving) {
        (Some((number, _, _, Some(ack))), Some(arriving)) => {
            after
                .recorded(&arriving.event, number)
                .map(|decision| decision.ack())
                == Some(ack)
        }
        _ => true,
    };

    // A step that left the receiver untouched (a duplicate, a crash before record) can only
    // be wrong in what arrived and what the sender got.
    if std::sync::Arc::ptr_eq(before, after) {
        if !arrived_recorded {
            return Some(Property::EvidenceRetained);
        }
        return (!ack_matches).then_some(Property::AckImpliesRecorded);
    }

    // first-record-immutable
    let first_kept = before.identities().iter().all(|(id, identity)| {
        after.identities().get(id).is_some_and(|now| {
            now.first.event == identity.first.event
                && now.first.recorded_at == identity.first.recorded_at
        })
    });
    if !first_kept {
        return Some(Property::FirstRecordImmutable);
    }

    // evidence-retained: nothing recorded disappears, and what arrived is recorded.
    let retained = before.identities().iter().all(|(id, identity)| {
        let now = &after.identities()[id];
        identity
            .records()
            .all(|record| now.position(record.event.content).is_some())
    }) && before
        .anonymous()
        .keys()
        .all(|number| after.anonymous().contains_key(number));
    if !retained || !arrived_recorded {
        return Some(Property::EvidenceRetained);
    }

    // no-unknown-card: only reconciliation creates, and only its own card.
    let created_ok = after
        .cards()
        .keys()
        .all(|card| before.cards().contains_key(card) || step == Step::Reconcile(*card));
    if !created_ok {
        return Some(Property::NoUnknownCard);
    }

    // version-monotonic
    let monotonic = before.cards().iter().all(|(id, card)| {
        after.cards().get(id).is_some_and(|now| {
            let moved_forward = now.version > card.version;
            let unchanged = now.version == card.version && now.state == card.state;
            match step {
                Step::Deliver { .. } => moved_forward || unchanged,
                Step::Reconcile(_) => now.version >= card.version,
            }
        })
    });
    if !monotonic {
        return Some(Property::VersionMonotonic);
    }

    if let Some((_, _, delivered, _)) = delivery {
        // paused-frozen
        if !frozen(before, after, |card| before.cards()[&card].paused) {
            return Some(Property::PausedFrozen);
        }
        // held-changes-nothing
        let held = delivered.is_some_and(|answer| match answer.verdict {
            Verdict::Decided(decision) => decision.is_hold(),
            Verdict::Duplicate(_) => false,
        });
        if held && (!frozen(before, after, |_| true) || before.cards().len() != after.cards().len())
        {
            return Some(Property::HeldChangesNothing);
        }
        // ack-implies-recorded: the meaning the sender got is a recorded decision's.
        if !ack_matches {
            return Some(Property::AckImpliesRecorded);
        }
        // duplicate-no-effect
        let duplicate =
            delivered.is_some_and(|answer| matches!(answer.verdict, Verdict::Duplicate(_)));
        if duplicate && before != after {
            return Some(Property::DuplicateNoEffect);
        }
    }
    None
}

/// Cards selected by `which` kept their version and state.
fn frozen(
    before: &Receiver,
    after: &Receiver,
    which: impl Fn(crate::protocol::Sym) -> bool,
) -> bool {
    before.cards().iter().all(|(&id, card)| {
        !which(id)
            || after
                .cards()
                .get(&id)
                .is_some_and(|now| now.version == card.version && now.state == card.state)
    })
}

/// Checks one state: cards have a known origin, every acknowledged delivery is recorded,
/// and a terminal state has converged.
pub fn check_state(scenario: &Scenario, world: &World) -> Option<Property> {
    let receiver = &world.receiver;
    let origin_known = receiver.cards().keys().all(|card| {
        scenario.initial.iter().any(|(id, _)| id == card) || scenario.authority_for(*card).is_some()
    });
    if !origin_known {
        return Some(Property::NoUnknownCard);
    }
    let acked_recorded = scenario
        .deliveries
        .iter()
        .enumerate()
        .all(|(index, delivery)| {
            world.owes(index)
                || receiver
                    .recorded(&delivery.event, delivery.number)
                    .is_some()
        });
    if !acked_recorded {
        return Some(Property::AckImpliesRecorded);
    }
    if world.is_terminal(scenario) && !converged(scenario, receiver) {
        return Some(Property::Convergence);
    }
    None
}

/// Whether the receiver holds exactly the fixture's expected final cards, nothing paused,
/// and exactly the expected unresolved inputs. Replacement counts are not compared: they
/// depend on arrival order. Without `expect`, anything converges.
pub fn converged(scenario: &Scenario, receiver: &Receiver) -> bool {
    let Some(expect) = &scenario.expect else {
        return true;
    };
    let cards_match = receiver.cards().len() == expect.final_cards.len()
        && receiver
            .cards()
            .iter()
            .all(|(id, card)| expect.final_cards.get(id) == Some(&(card.version, card.state)));
    let paused_match = receiver.paused().eq(expect.paused.iter().copied());
    let unresolved_match = expect
        .unresolved_refs
        .as_ref()
        .is_some_and(|expected| *expected == receiver.unresolved());
    cards_match && paused_match && unresolved_match
}
