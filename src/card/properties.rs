//! The safety and convergence properties of the card contract (`docs/protocol.md`), one per bullet, as checks on steps and
//! states.
//!
//! stateright's properties are predicates on states, but several of SPEC's are about steps
//! (a duplicate changes nothing, a paused card changes only by reconciliation). Those are
//! checked by the callers of [`crate::card::world::transition`] ([`check`]) by comparing the world before and after the
//! step; a broken rule leaves a marker in the successor (`World::violation`) that an
//! `always` property reads. Correct steps carry no marker, so the checks add no states.

use crate::card::fixture::Scenario;
use crate::card::property::{Properties, Property};
use crate::card::receiver::{
    HoldKey, InputRef, Policy, Receiver, Record, Settlement, Standing, Verdict,
};
use crate::card::step::{Fault, Step};
use crate::card::wire::{Sym, Version};
use crate::card::world::{transition, Effect, World};
use std::collections::BTreeSet;
use std::sync::Arc;

/// One step through [`crate::card::world::transition`], then [`check`]: what replay and the
/// model take.
pub fn checked_transition<P: Policy>(
    scenario: &Scenario,
    policy: P,
    checked: Properties,
    pre: &World,
    step: Step,
) -> (World, Effect) {
    let (mut post, effect) = transition(scenario, policy, pre, step);
    check(scenario, checked, pre, &mut post, step, &effect);
    (post, effect)
}

/// Checks a step the callers of [`crate::card::world::transition`] took: `pre` went to
/// `post` by `step` with `effect`. Records the first property among `checked` it broke in
/// `post.violation` (the first one on the way stays).
pub fn check(
    scenario: &Scenario,
    checked: Properties,
    pre: &World,
    post: &mut World,
    step: Step,
    effect: &Effect,
) {
    if post.violation.is_none() {
        post.violation = check_step(scenario, checked, pre, post, step, effect);
    }
    let unchanged = Arc::ptr_eq(&pre.receiver, &post.receiver) && pre.owed == post.owed;
    if post.violation.is_none() && !unchanged {
        // An unchanged world was already checked when it was reached.
        post.violation = check_state(scenario, checked, post);
    }
}

/// Checks one step: `pre` went to `post` by `step` with `effect`. Returns the first broken
/// property among `checked`, in [`Property::ALL`] order.
pub fn check_step(
    scenario: &Scenario,
    checked: Properties,
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
        (index, &scenario.deliveries[index])
    });
    let broken = |property: Property, holds: &dyn Fn() -> bool| {
        (checked.contains(property) && !holds()).then_some(property)
    };

    // Whether what arrived is recorded (a crash records nothing, by definition).
    let arrived_recorded = || match (delivery, arriving) {
        (Some((number, fault, ..)), Some((_, arriving))) if fault != Some(Fault::Crash) => {
            after.recorded(&arriving.event, number).is_some()
        }
        _ => true,
    };
    // Whether the acknowledgement the sender got, if any, is a recorded decision's meaning.
    let ack_matches = || match (delivery, arriving) {
        // A crash before recording sends nothing back (section 4).
        (Some((_, Some(Fault::Crash), _, Some(_))), _) => false,
        (Some((number, _, _, Some(ack))), Some((_, arriving))) => {
            after
                .recorded(&arriving.event, number)
                .map(|decision| decision.ack())
                == Some(ack)
        }
        _ => true,
    };
    // redelivery-recognised: what the receiver saw before (an acknowledged delivery, or one
    // whose records were forgotten) comes back as a duplicate.
    let recognised = || match (delivery, arriving) {
        (Some((_, _, Some(answer), _)), Some((index, _)))
            if !pre.owes(index) || pre.forgotten.contains(index) =>
        {
            matches!(answer.verdict, Verdict::Duplicate(_))
        }
        _ => true,
    };

    // A step that left the receiver untouched (a duplicate, a crash before record) can only
    // be wrong in what arrived and what the sender got.
    if std::sync::Arc::ptr_eq(before, after) {
        return broken(Property::EvidenceRetained, &arrived_recorded)
            .or_else(|| broken(Property::AckImpliesRecorded, &ack_matches))
            .or_else(|| broken(Property::RedeliveryRecognised, &recognised));
    }

    // Only expiry may forget an event id, and only one whose records are all settled (no
    // unresolved input among them); it is judged by evidence-retained.
    let forgettable = |id: &crate::card::wire::Sym| {
        step == Step::Expire
            && !after.identities().contains_key(id)
            && before.identities()[id]
                .records()
                .all(|record| !is_unresolved_input(before, record))
    };
    let first_kept = || {
        before.identities().iter().all(|(id, identity)| {
            after
                .identities()
                .get(&id)
                .map_or(step == Step::Expire, |now| {
                    // The content id stands for the whole parsed event.
                    now.first.event.content == identity.first.event.content
                        && now.first.recorded_at == identity.first.recorded_at
                })
        })
    };
    // evidence-retained: nothing recorded disappears (but what expiry may forget), and
    // what arrived is recorded.
    let retained = || {
        before.identities().iter().all(|(id, identity)| {
            forgettable(&id)
                || after.identities().get(&id).is_some_and(|now| {
                    identity
                        .records()
                        .all(|record| now.position(record.event.content).is_some())
                })
        }) && before
            .anonymous()
            .keys()
            .all(|number| after.anonymous().contains_key(number))
            && arrived_recorded()
    };
    // no-unknown-card: only reconciliation creates, and only its own card.
    let created_ok = || {
        after
            .cards()
            .keys()
            .all(|card| before.cards().contains_key(&card) || step == Step::Reconcile(card))
    };
    // version-monotonic: an event moves a card forward or leaves it alone, reconciliation
    // never moves it back, and expiry leaves it alone.
    let monotonic = || {
        before.cards().iter().all(|(id, card)| {
            after.cards().get(&id).is_some_and(|now| {
                let moved_forward = now.version > card.version;
                let unchanged = now.version == card.version && now.state == card.state;
                match step {
                    Step::Deliver { .. } => moved_forward || unchanged,
                    Step::Reconcile(_) => now.version >= card.version,
                    Step::Expire => unchanged && now.paused == card.paused,
                }
            })
        }) && applied_newer(
            scenario,
            before,
            after,
            step,
            effect,
            arriving.map(|(_, d)| d),
        )
    };
    let found = broken(Property::FirstRecordImmutable, &first_kept)
        .or_else(|| broken(Property::EvidenceRetained, &retained))
        .or_else(|| broken(Property::NoUnknownCard, &created_ok))
        .or_else(|| broken(Property::VersionMonotonic, &monotonic))
        .or_else(|| {
            broken(Property::ConflictedNeverDecided, &|| {
                conflicted_never_decided(before, after)
            })
        })
        .or_else(|| {
            broken(Property::RePauseStopsReEvaluation, &|| {
                re_pause_stops(effect)
            })
        })
        .or_else(|| {
            broken(Property::ReconciliationSettlesHolds, &|| {
                settles_holds(before, after, step, effect)
            })
        });
    if found.is_some() {
        return found;
    }

    // The rest speaks about deliveries only.
    let (_, _, delivered, _) = delivery?;
    // paused-frozen: nothing changes a paused card but reconciliation, and an input for it
    // is held until then (rule 4: whatever the input, a paused card decides nothing).
    let paused_frozen = || {
        let decided_while_paused = delivered.is_some_and(|answer| match answer.verdict {
            Verdict::Decided(decision) => arriving.is_some_and(|(_, arriving)| {
                let event = &arriving.event;
                let paused = event
                    .object_id
                    .and_then(|card| before.cards().get(&card))
                    .is_some_and(|card| card.paused);
                paused && !held_for_pause(decision, event)
            }),
            Verdict::Duplicate(_) => false,
        });
        !decided_while_paused && frozen(before, after, |card| before.cards()[&card].paused)
    };
    let held_changes_nothing = || {
        let held = delivered.is_some_and(|answer| match answer.verdict {
            Verdict::Decided(decision) => decision.is_hold(),
            Verdict::Duplicate(_) => false,
        });
        !held || (frozen(before, after, |_| true) && before.cards().len() == after.cards().len())
    };
    // duplicate-no-effect: a duplicate, and any delivery of content already recorded
    // (semantic equality: in whatever bytes it came), leaves the receiver as it was.
    let duplicate_no_effect = || {
        let duplicate =
            delivered.is_some_and(|answer| matches!(answer.verdict, Verdict::Duplicate(_)));
        let repeat = delivered.is_some()
            && delivery
                .zip(arriving)
                .is_some_and(|((number, ..), (_, arriving))| {
                    before.recorded(&arriving.event, number).is_some()
                });
        !(duplicate || repeat) || before == after
    };
    broken(Property::PausedFrozen, &paused_frozen)
        .or_else(|| broken(Property::HeldChangesNothing, &held_changes_nothing))
        .or_else(|| broken(Property::AckImpliesRecorded, &ack_matches))
        .or_else(|| broken(Property::DuplicateNoEffect, &duplicate_no_effect))
        .or_else(|| broken(Property::RedeliveryRecognised, &recognised))
}

/// `conflicted-never-decided`, from the records: in every event id that carries two or more
/// contents after the step, each record that was waiting before it is resolved now, or
/// still waits with the decision it had: none is decided, none re-evaluated. (A record
/// decided before the second content arrived keeps its decision: it was not waiting.)
fn conflicted_never_decided(before: &Receiver, after: &Receiver) -> bool {
    after
        .identities()
        .iter()
        .filter(|(_, identity)| identity.is_conflicted())
        .all(|(id, identity)| {
            before.identities().get(&id).is_none_or(|earlier| {
                earlier.records().zip(identity.records()).all(|(was, now)| {
                    was.standing != Standing::Held
                        || now.standing == Standing::Resolved
                        || (now.standing == Standing::Held && now.decision == was.decision)
                })
            })
        })
}

/// Rule 4 and what comes before it: an input for a paused card is held for the pause
/// (`held_paused`), unless rules 1-3 held it first: a changed payload, an unsupported type,
/// or no event id. Rule 4 comes before rule 5, so a missing version is found out only at
/// re-evaluation.
fn held_for_pause(
    decision: crate::card::receiver::Decision,
    event: &crate::card::wire::Event,
) -> bool {
    use crate::card::receiver::{Decision, HoldReason};
    match decision {
        Decision::Held(HoldReason::Paused) | Decision::ConflictChangedPayload => true,
        Decision::Held(HoldReason::UnsupportedType) => !event.supported,
        Decision::Held(HoldReason::Malformed) => event.event_id.is_none(),
        _ => false,
    }
}

/// `reconciliation-settles-holds`, from the settlements a reconciliation recorded (section
/// 5): every hold filed under the card before it is resolved, superseded or re-evaluated, or
/// still waits under the card because the pass stopped at a re-pause; a hold is `resolved`
/// only if it is a conflict or a record of an event id with two contents (the settlement
/// table); and every `conflict_changed_payload` variant waiting under another card whose
/// event id's first record names this card is resolved too. (A refused snapshot settles
/// nothing.)
fn settles_holds(before: &Receiver, after: &Receiver, step: Step, effect: &Effect) -> bool {
    let (Step::Reconcile(card), Effect::Reconciled(reconciled)) = (step, effect) else {
        return true;
    };
    if reconciled.outcome == crate::card::receiver::Outcome::RefusedBehind {
        return true;
    }
    let settled = |key: &HoldKey| reconciled.settled.iter().any(|(done, _)| done == key);
    let paused = after.cards().get(&card).is_some_and(|card| card.paused);
    let waiting = after.holds().get(&Some(card));
    let own_settled = before
        .holds()
        .get(&Some(card))
        .into_iter()
        .flatten()
        .all(|key| settled(key) || (paused && waiting.is_some_and(|keys| keys.contains(key))));
    own_settled
        && reconciled
            .settled
            .iter()
            .all(|(key, settlement)| resolved_rightly(before, *key, settlement))
        && cross_card_variants(before, card).all(|key| settled(&key))
}

/// Whether `settlement` of `key` fits section 5's table where it says `resolved`: only a
/// conflict, or a record of an event id that carries two or more contents, is resolved.
fn resolved_rightly(before: &Receiver, key: HoldKey, settlement: &Settlement) -> bool {
    use crate::card::receiver::Decision;
    if *settlement != Settlement::Resolved {
        return true;
    }
    let conflicted_id = match key {
        HoldKey::Record { event, .. } => before.identities()[&event].is_conflicted(),
        HoldKey::Delivery(_) => false,
    };
    conflicted_id
        || matches!(
            before.record(key).decision,
            Decision::ConflictSameVersion | Decision::ConflictChangedPayload
        )
}

/// The `conflict_changed_payload` variants waiting under a card other than `card` whose
/// event id's first record names `card`: reconciling `card` resolves them (section 5).
fn cross_card_variants(before: &Receiver, card: Sym) -> impl Iterator<Item = HoldKey> + '_ {
    before
        .holds()
        .iter()
        .filter(move |(under, _)| *under != Some(card))
        .flat_map(|(_, keys)| keys.iter().copied())
        .filter(move |key| match *key {
            HoldKey::Record { event, index } => {
                let identity = &before.identities()[&event];
                index > 0
                    && identity.record(index).decision
                        == crate::card::receiver::Decision::ConflictChangedPayload
                    && identity.record(0).event.object_id == Some(card)
            }
            HoldKey::Delivery(_) => false,
        })
}

/// The second half of `version-monotonic`, read from what the step recorded: versions
/// decide, nothing else. A delivery recorded as `applied` carried a version above its
/// card's before it, one recorded as `stale` a version below, and a snapshot at the card's
/// own version with another state is never settled (it is a conflict); at reconciliation, where every change of
/// the card starts from the authority's snapshot, a re-evaluation recorded as `applied`
/// carried a version above the authority's, one recorded as `stale` a version below the
/// card's at the end of the pass, and the card ends as the authority or newer.
fn applied_newer(
    scenario: &Scenario,
    before: &Receiver,
    after: &Receiver,
    step: Step,
    effect: &Effect,
    arriving: Option<&crate::card::fixture::Delivery>,
) -> bool {
    let above = |version: Version, floor: u64| matches!(version, Version::Valid(v) if v > floor);
    match (step, effect) {
        (Step::Deliver { .. }, Effect::Delivered { delivered, .. }) => {
            let applied = delivered.is_some_and(|answer| {
                answer.verdict == Verdict::Decided(crate::card::receiver::Decision::Applied)
            });
            let event = arriving.map(|arriving| &arriving.event);
            let card = event
                .and_then(|event| event.object_id)
                .and_then(|card| before.cards().get(&card));
            // An applied event for a card that did not exist is no-unknown-card's finding.
            let newer = !applied
                || card.is_none_or(|card| event.is_some_and(|e| above(e.version, card.version)));
            // Two states at one version: the second is a conflict, never settled by
            // anything else (arrival time included).
            let settled = delivered.is_some_and(|answer| {
                matches!(answer.verdict, Verdict::Decided(decision) if !decision.is_hold())
            });
            let same_version_other_state = card.zip(event).is_some_and(|(card, event)| {
                event.version == Version::Valid(card.version)
                    && event.state.is_some_and(|state| state != card.state)
            });
            // And `stale` only below the card's version.
            let stale = delivered.is_some_and(|answer| {
                answer.verdict == Verdict::Decided(crate::card::receiver::Decision::Stale)
            });
            let older = !stale
                || card.zip(event).is_none_or(
                    |(card, event)| matches!(event.version, Version::Valid(v) if v < card.version),
                );
            newer && older && !(settled && same_version_other_state)
        }
        (Step::Reconcile(card), Effect::Reconciled(reconciled)) => {
            let Some(snapshot) = scenario.authority_for(card) else {
                return true;
            };
            if reconciled.outcome == crate::card::receiver::Outcome::RefusedBehind {
                return true;
            }
            let Some(now) = after.cards().get(&card) else {
                return false;
            };
            // The card only moves forward during the pass, from the authority to `now`: an
            // applied re-evaluation is above the authority, a stale one below `now`.
            let re_evaluated = reconciled.settled.iter().all(|(key, settlement)| {
                use crate::card::receiver::Decision;
                let version = after.record(*key).event.version;
                match settlement {
                    Settlement::ReEvaluated {
                        to: Decision::Applied,
                        ..
                    } => above(version, snapshot.version),
                    Settlement::ReEvaluated {
                        to: Decision::Stale,
                        ..
                    } => matches!(version, Version::Valid(v) if v < now.version),
                    _ => true,
                }
            });
            let ends = (now.version, now.state) == (snapshot.version, snapshot.state)
                || now.version > snapshot.version;
            re_evaluated && ends
        }
        _ => true,
    }
}

/// `re-pause-stops-re-evaluation`, from the settlements a reconciliation recorded, in the
/// order it made them: after a re-evaluation that held its input again (every hold rules 5
/// and 6 give pauses the card), no later hold is re-evaluated in the same pass.
fn re_pause_stops(effect: &Effect) -> bool {
    let Effect::Reconciled(reconciled) = effect else {
        return true;
    };
    let mut re_paused = false;
    reconciled
        .settled
        .iter()
        .all(|(_, settlement)| match settlement {
            Settlement::ReEvaluated { to, .. } => {
                let in_order = !re_paused;
                re_paused |= to.is_hold();
                in_order
            }
            Settlement::Resolved | Settlement::Superseded => true,
        })
}

/// Cards selected by `which` kept their version and state.
fn frozen(
    before: &Receiver,
    after: &Receiver,
    which: impl Fn(crate::card::wire::Sym) -> bool,
) -> bool {
    before.cards().iter().all(|(id, card)| {
        !which(id)
            || after
                .cards()
                .get(&id)
                .is_some_and(|now| now.version == card.version && now.state == card.state)
    })
}

/// Checks one state against the `checked` properties: cards have a known origin, every
/// acknowledged delivery is recorded (unless expiry forgot it), and a terminal state has
/// converged.
pub fn check_state(scenario: &Scenario, checked: Properties, world: &World) -> Option<Property> {
    let receiver = &world.receiver;
    let broken = |property: Property, holds: &dyn Fn() -> bool| {
        (checked.contains(property) && !holds()).then_some(property)
    };
    let origin_known = || {
        receiver.cards().keys().all(|card| {
            scenario.initial.iter().any(|(id, _)| *id == card)
                || scenario.authority_for(card).is_some()
        })
    };
    let acked_recorded = || {
        scenario
            .deliveries
            .iter()
            .enumerate()
            .all(|(index, delivery)| {
                world.owes(index)
                    || world.forgotten.contains(index)
                    || receiver
                        .recorded(&delivery.event, delivery.number)
                        .is_some()
            })
    };
    let converges = || !world.is_terminal(scenario) || converged(scenario, receiver);
    broken(Property::NoUnknownCard, &origin_known)
        .or_else(|| broken(Property::AckImpliesRecorded, &acked_recorded))
        .or_else(|| broken(Property::Convergence, &converges))
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
            .all(|(id, card)| expect.final_cards.get(&id) == Some(&(card.version, card.state)));
    let paused_match = receiver.paused().eq(expect.paused.iter().copied());
    let unresolved_match = expect
        .unresolved_refs
        .as_ref()
        .is_some_and(|expected| *expected == unresolved_inputs(receiver));
    cards_match && paused_match && unresolved_match
}

/// The unresolved inputs by SPEC's definition, read from the records themselves. The
/// properties compute this on their own rather than through the receiver's helpers, so a
/// bug in those helpers cannot hide from the properties that judge them.
pub fn unresolved_inputs(receiver: &Receiver) -> BTreeSet<InputRef> {
    let by_id = receiver
        .identities()
        .iter()
        .filter(|(_, identity)| {
            identity
                .records()
                .any(|record| is_unresolved_input(receiver, record))
        })
        .map(|(id, _)| InputRef::Event(id));
    let anonymous = receiver
        .anonymous()
        .iter()
        .filter(|(_, record)| is_unresolved_input(receiver, record))
        .map(|(&number, _)| InputRef::Delivery(number));
    by_id.chain(anonymous).collect()
}

/// SPEC: an input that never received a state decision (still held, or superseded), or a
/// resolved record of a conflicted id whose own content could never have been decided on a
/// card (not `card.snapshot`, no object id, no valid version, no object state, or naming a
/// card that does not exist).
fn is_unresolved_input(receiver: &Receiver, record: &Record) -> bool {
    match record.standing {
        Standing::Held | Standing::Superseded => true,
        Standing::Settled => false,
        Standing::Resolved => {
            let event = &record.event;
            let decidable = event.supported
                && matches!(event.version, Version::Valid(_))
                && event.state.is_some()
                && event
                    .object_id
                    .is_some_and(|card| receiver.cards().contains_key(&card));
            !decidable
        }
    }
}

/// Why a card's authority cannot be trusted to settle it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ahead {
    /// The card's initial version is newer than the authority.
    Initial(u64),
    /// A decidable delivery for the card (a `card.snapshot` with an event id, a valid
    /// version and an object state) is newer than the authority.
    Delivery {
        /// The delivery number.
        number: u32,
        /// Its version.
        version: u64,
    },
    /// The card has no authority snapshot at all, but this delivery can pause it.
    Pauses {
        /// The delivery number.
        number: u32,
    },
    /// The authority differs from the newest snapshot the card can reach, and no input is
    /// sure to pause the card: whether it is ever reconciled (and so whether it ends as the
    /// authority or as that snapshot) depends on arrival order.
    MaybeNeverPaused {
        /// The delivery with the newest snapshot (`None`: the initial card).
        number: Option<u32>,
        /// Its version.
        version: u64,
    },
}

/// A card whose authority is not current: `authority-current` is violated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthorityBehind {
    /// The card.
    pub card: crate::card::wire::Sym,
    /// The authority's version; `None` when the card has no authority snapshot.
    pub authority: Option<u64>,
    /// What is ahead of it.
    pub ahead: Ahead,
}

impl AuthorityBehind {
    /// In domain terms: `authority for card-4 is v3, behind the card's initial v5`.
    pub fn describe(&self, scenario: &Scenario) -> String {
        let card = scenario.catalog.name(self.card);
        let delivery = |number: u32| {
            let index = scenario.delivery_index(number).expect("a delivery");
            let id = scenario.deliveries[index]
                .event
                .event_id
                .map_or("no event id", |id| scenario.catalog.name(id));
            format!("delivery #{number} ({id})")
        };
        let authority = self.authority.unwrap_or_default();
        match self.ahead {
            Ahead::Initial(version) => format!(
                "authority for {card} is v{authority}, behind the card's initial v{version}"
            ),
            Ahead::Delivery { number, version } => format!(
                "authority for {card} is v{authority}, behind {} v{version}",
                delivery(number)
            ),
            Ahead::MaybeNeverPaused { number, version } => format!(
                "authority for {card} is v{authority} with another state than the newest snapshot the card can reach ({} v{version}), and no input is sure to pause the card: it ends as one or the other depending on arrival order",
                number.map_or_else(|| "its initial state".to_owned(), delivery)
            ),
            Ahead::Pauses { number } => format!(
                "{card} has no authority snapshot, but {} can pause it: it would stay paused for good, and which of its inputs were decided before the pause would depend on arrival order",
                delivery(number)
            ),
        }
    }
}

/// The contract's precondition, "the authority is current", for every card that some input
/// can pause (the others are never reconciled once they exist, so their authority is never
/// read): its authority snapshot must be at least as new as the card's initial version and
/// every version delivered for it that could ever be applied (an input that can never be
/// decided, such as an unsupported type, a missing version or a missing event id, carries no
/// version the card could reach); when the card may escape a pause in some orders, the
/// authority must be exactly the newest snapshot it reaches; and it must exist. Returns the
/// first card, in authority then initial order, that breaks it.
pub fn authority_behind(scenario: &Scenario) -> Option<AuthorityBehind> {
    // A card that no input can pause is never reconciled once it exists: whatever its
    // authority says, it ends as its newest snapshot in every order. Only a card that can be
    // paused needs a current authority.
    let pausable = |card| pausing_delivery(scenario, card).is_some();
    let behind = scenario.authority.iter().find_map(|snapshot| {
        let card = snapshot.object_id;
        if !pausable(card) {
            return None;
        }
        let initial = scenario
            .initial
            .iter()
            .find(|(id, _)| *id == card)
            .map(|(_, initial)| Ahead::Initial(initial.version));
        let delivered = scenario.deliveries.iter().filter_map(|delivery| {
            let event = &delivery.event;
            match event.version {
                Version::Valid(version)
                    if event.object_id == Some(card)
                        && event.event_id.is_some()
                        && !event.is_unevaluable() =>
                {
                    Some(Ahead::Delivery {
                        number: delivery.number,
                        version,
                    })
                }
                _ => None,
            }
        });
        let version = |ahead: &Ahead| match *ahead {
            Ahead::Initial(version) | Ahead::Delivery { version, .. } => version,
            Ahead::Pauses { .. } | Ahead::MaybeNeverPaused { .. } => 0,
        };
        initial
            .into_iter()
            .chain(delivered)
            .filter(|ahead| version(ahead) > snapshot.version)
            .max_by_key(|ahead| version(ahead))
            .map(|ahead| AuthorityBehind {
                card,
                authority: Some(snapshot.version),
                ahead,
            })
    });
    let unreconciled = || {
        scenario.authority.iter().find_map(|snapshot| {
            let card = snapshot.object_id;
            let newest = newest_snapshot(scenario, card)?;
            let (number, version, state) = newest;
            let differs = (version, state) != (snapshot.version, snapshot.state);
            let sometimes_paused = pausable(card) && !surely_paused(scenario, card);
            (differs && sometimes_paused).then_some(AuthorityBehind {
                card,
                authority: Some(snapshot.version),
                ahead: Ahead::MaybeNeverPaused { number, version },
            })
        })
    };
    behind.or_else(unreconciled).or_else(|| {
        scenario
            .initial
            .iter()
            .filter(|(card, _)| scenario.authority_for(*card).is_none())
            .find_map(|&(card, _)| {
                pausing_delivery(scenario, card).map(|number| AuthorityBehind {
                    card,
                    authority: None,
                    ahead: Ahead::Pauses { number },
                })
            })
    })
}

/// The newest snapshot a known card reaches if nothing pauses it: the decidable delivery
/// with the highest version (the first of them, when several share it), or the initial
/// card. `None` for a card that is not initial (its authority creates it in every order).
fn newest_snapshot(
    scenario: &Scenario,
    card: crate::card::wire::Sym,
) -> Option<(Option<u32>, u64, crate::card::wire::StateId)> {
    let (_, initial) = scenario.initial.iter().find(|(id, _)| *id == card)?;
    let mut newest = (None, initial.version, initial.state);
    for delivery in &scenario.deliveries {
        let event = &delivery.event;
        if let (Version::Valid(version), Some(state), true) = (
            event.version,
            event.state,
            event.object_id == Some(card) && event.event_id.is_some() && !event.is_unevaluable(),
        ) {
            if version > newest.1 {
                newest = (Some(delivery.number), version, state);
            }
        }
    }
    Some(newest)
}

/// Whether the known `card` is paused in every arrival order: an input names it that can
/// never be decided (no event id, unsupported type, no valid version, no object state);
/// an event id with several contents names it (whichever content comes second is a changed
/// payload and pauses the cards of both); or two different states share its newest version
/// (whichever comes second is an equal-version conflict).
fn surely_paused(scenario: &Scenario, card: crate::card::wire::Sym) -> bool {
    let deliveries = &scenario.deliveries;
    let names = |event: &crate::card::wire::Event| event.object_id == Some(card);
    let unevaluable = deliveries
        .iter()
        .any(|d| names(&d.event) && (d.event.event_id.is_none() || d.event.is_unevaluable()));
    let changed_payload = deliveries.iter().any(|d| {
        d.event.event_id.is_some()
            && names(&d.event)
            && deliveries.iter().any(|other| {
                other.event.event_id == d.event.event_id && other.event.content != d.event.content
            })
    });
    let tie_at_newest = newest_snapshot(scenario, card).is_some_and(|(_, version, state)| {
        deliveries.iter().any(|d| {
            names(&d.event)
                && d.event.event_id.is_some()
                && !d.event.is_unevaluable()
                && d.event.version == Version::Valid(version)
                && d.event.state != Some(state)
        })
    });
    unevaluable || changed_payload || tie_at_newest
}

/// The first delivery that can pause the known `card` in some arrival order: an input that
/// names it and can never be decided (no event id, unsupported type, no valid version, no
/// object state), a content of an event id that has other contents (a changed payload
/// pauses the cards of both), or a snapshot whose version the card has, or another
/// snapshot has, with a different state (an equal-version conflict).
fn pausing_delivery(scenario: &Scenario, card: crate::card::wire::Sym) -> Option<u32> {
    let initial = scenario
        .initial
        .iter()
        .find(|(id, _)| *id == card)
        .map(|(_, initial)| (initial.version, initial.state));
    let deliveries = &scenario.deliveries;
    deliveries.iter().find_map(|delivery| {
        let event = &delivery.event;
        let names = event.object_id == Some(card);
        let unevaluable = names && (event.event_id.is_none() || event.is_unevaluable());
        let changed_payload = event.event_id.is_some()
            && deliveries.iter().any(|other| {
                other.event.event_id == event.event_id
                    && other.event.content != event.content
                    && (names || other.event.object_id == Some(card))
            });
        let same_version_conflict = names
            && match (event.version, event.state) {
                (Version::Valid(version), Some(state)) => {
                    initial.is_some_and(|(v, s)| v == version && s != state)
                        || deliveries.iter().any(|other| {
                            other.event.object_id == Some(card)
                                && other.event.version == Version::Valid(version)
                                && other.event.state.is_some_and(|other| other != state)
                        })
                }
                _ => false,
            };
        (unevaluable || changed_payload || same_version_conflict).then_some(delivery.number)
    })
}
