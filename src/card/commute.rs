//! Which steps of a fixture commute: the footprints behind the checker's sleep sets
//! ([`crate::harness::checker::Commute`]).
//!
//! Under SPEC a step reads and writes only a few parts of the world, which the fixture
//! fixes in advance (its footprint):
//! - a delivery of event id `e`: `e`'s records, and every card any delivery of `e` names
//!   (its value, pause and the holds filed under it; a changed payload pauses the first
//!   record's card, which some delivery of `e` named), or the hold list of inputs without
//!   a card when one of them has none; a delivery without an event id: its own record and
//!   its card. Also whether the sender still owes that delivery, and the fault budget
//!   the step spends, if any;
//! - reconciling card `c`: `c`, and for every delivery that names `c` the records of its
//!   event id and everything that id's deliveries name (reconciliation settles the holds
//!   filed under `c` and resolves changed payloads whose first record named `c`, filed
//!   under the variant's card). With reconciliation only at the end it also reads
//!   whether anything is owed at all, so it depends on every delivery.
//!
//! Steps with disjoint footprints commute in the sense the checker needs: neither enables
//! nor disables the other (enabledness reads whether the delivery is owed, the budget,
//! whether the card is paused or unknown, and, with the symmetry of identical
//! redeliveries, whether earlier copies are owed: copies share their id's records, so they
//! never commute with each other anyway), both orders end in the same world (each step
//! changes only its own footprint, from values in it), and each step is judged by every
//! property alike before and after the other: the step checks compare before and after
//! the step, so a part of the world the step does not change compares equal, whatever its
//! value, and the parts it does change are the same in both orders. State properties
//! judge states, and sleep sets visit every state. Two steps of one delivery share its
//! record, so they never commute.
//!
//! The footprints hold for the SPEC receiver only: mutants may write outside them (the
//! `pause-on-redelivery` mutant pauses a card on a duplicate), expiry forgets every
//! settled id at once, and per-delivery budgets make the copies' budgets differ, so the
//! model uses no sleep sets then ([`Commuting::of`] says `None`). `tests/model.rs` checks
//! the footprints directly: on generated fixtures it takes every reachable state and every
//! pair of enabled steps declared to commute, and compares both orders.
//!
//! Some steps commute at a world though their footprints share a card
//! ([`Commuting::commutes_given`], the checker's state-dependent independence): two
//! deliveries whose footprints meet in cards only, at a world where both are [`INERT`]
//! (neither changes a card or a hold) or one is inert and the other [`RAISING`] (it raises
//! its card, unpaused). The inert step reads of the card only its version and pause, which
//! the other leaves alone or raises unpaused, so it decides the same in either order; the
//! other reads nothing the inert step writes. Also a [`HELD`] step (held at its paused
//! card) with an inert or raising one, and, when settled decisions are merged, two raising
//! steps with different versions (one state whichever goes first). docs/checker.md has the
//! argument for sleep sets, and `tests/model/indep.rs` checks the claims in every
//! reachable world.

use crate::card::fingerprint::View;
use crate::card::fixture::Scenario;
use crate::card::step::Reconciliation;
use crate::card::step::{Budgets, Fault, Step};
use crate::card::wire::{Sym, Version};
use crate::harness::checker::{Kind, SleepSet};
use std::collections::BTreeSet;

/// A part of the world a step may read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    /// An event id's records.
    Records(Sym),
    /// The record of a delivery without an event id, by delivery number.
    Anonymous(u32),
    /// A card: its value, its pause and the holds filed under it.
    Card(Sym),
    /// The holds of inputs without a usable card.
    NoCard,
    /// Whether the sender still owes a delivery (by index).
    Owed(usize),
    /// A fault budget.
    Budget(Fault),
}

/// A step's class of a delivery: the plain delivery and each fault are separate steps.
const CLASSES: usize = 5;

fn class(fault: Option<Fault>) -> usize {
    match fault {
        None => 0,
        Some(Fault::AckLost) => 1,
        Some(Fault::Crash) => 2,
        Some(Fault::Duplicate) => 3,
        Some(Fault::Reencoded) => 4,
    }
}

/// Sleep keys of deliveries by number.
#[derive(Clone, Debug)]
enum DeliveryKeys {
    /// Indexed by delivery number.
    Direct(Vec<[Option<u8>; CLASSES]>),
    /// Sorted by delivery number.
    Sorted(Vec<(u32, [Option<u8>; CLASSES])>),
}

impl DeliveryKeys {
    /// Numbers below this are indexed directly.
    const DIRECT_BELOW: u32 = 4096;

    fn new(mut keys: Vec<(u32, [Option<u8>; CLASSES])>) -> DeliveryKeys {
        keys.sort_by_key(|&(number, _)| number);
        match keys.last() {
            Some(&(largest, _)) if largest < Self::DIRECT_BELOW => {
                let mut direct = vec![[None; CLASSES]; largest as usize + 1];
                for (number, classes) in keys {
                    direct[number as usize] = classes;
                }
                DeliveryKeys::Direct(direct)
            }
            _ => DeliveryKeys::Sorted(keys),
        }
    }

    #[inline]
    fn get(&self, number: u32) -> Option<&[Option<u8>; CLASSES]> {
        match self {
            DeliveryKeys::Direct(direct) => direct.get(number as usize),
            DeliveryKeys::Sorted(sorted) => sorted
                .binary_search_by_key(&number, |&(number, _)| number)
                .ok()
                .map(|at| &sorted[at].1),
        }
    }
}

/// The sleep keys of a fixture's steps and which of them commute.
#[derive(Clone, Debug)]
pub struct Commuting {
    /// Sleep keys of deliveries, one per class, by delivery number (a direct index when
    /// the numbers are small, as fixtures' are; a sorted list otherwise).
    deliveries: DeliveryKeys,
    /// Sleep keys of reconciliations, by card (`Sym.0`).
    reconciles: Vec<Option<u8>>,
    /// For each key, the keys of the steps that commute with it.
    independent: [SleepSet; 64],
    /// For each delivery's key, the keys of the deliveries whose footprints meet its own in
    /// cards only: they commute at a world where neither changes those cards there, or one
    /// of them raises one and the other is [`INERT`] ([`Commuting::commutes_given`]).
    card_only: [SleepSet; 64],
    /// For each delivery's key, the keys in `card_only` whose deliveries carry a valid
    /// version other than its own: two of them that both raise their cards at a world
    /// commute there, when settled decisions are merged (`None`: they are not, and
    /// [`RAISING`] steps never commute with each other).
    other_version: Option<[SleepSet; 64]>,
}

/// The kind of a delivery step that changes no card and no hold at a world and stays the
/// same step at every world that differs only in cards raised meanwhile: a redelivery the
/// receiver recognises, a crash (under SPEC neither touches the receiver), or a delivery
/// decided `stale` (its version is below its card's, and a raised card is higher still).
pub const INERT: Kind = 1;

/// The kind of a delivery step that raises its card and changes nothing else about cards
/// and holds: a delivery decided `applied`. It reads its card and writes it; an [`INERT`]
/// step on the same card neither reads nor writes anything it touches, nor is it changed
/// by the raise. Two raising steps with different versions commute in effect when settled
/// decisions are merged: whichever goes first, the card ends at the higher one's state,
/// and the lower one is `applied` in one order and `stale` in the other, which a merged
/// fingerprint does not tell apart. After the higher one, the lower one is [`INERT`],
/// whose claims include those of a raising step.
pub const RAISING: Kind = 2;

/// The kind of a delivery held because its card is paused: the card was paused before and
/// is unchanged after, and the step added one hold under it and its own record. It reads
/// of cards only that pause, which neither an [`INERT`] nor a [`RAISING`] step changes
/// (neither pauses a card nor touches a paused one), and they read no hold.
pub const HELD: Kind = 3;

impl Commuting {
    /// The footprints of `scenario`'s steps under SPEC with total `budgets` (no expiry) and
    /// the given reconciliation; `None` when nothing could commute. The first 64 steps get
    /// keys: every delivery's plain step, then its lost acknowledgement, duplicate and
    /// re-encoded copy (class by class, in fixture order), each card's reconciliation, and
    /// crashes last; the rest never sleep, which only costs transitions.
    pub fn of(
        scenario: &Scenario,
        budgets: Budgets,
        reconciliation: Reconciliation,
        view: &View,
    ) -> Option<Commuting> {
        debug_assert_eq!(budgets.expiries, 0, "no sleep sets with expiry");
        let deliveries = &scenario.deliveries;
        // What a delivery's identity touches: its records and every card its id's
        // deliveries name.
        let identity = |index: usize| -> BTreeSet<Part> {
            let event = &deliveries[index].event;
            let mut parts = BTreeSet::new();
            let card = |object: Option<Sym>| object.map_or(Part::NoCard, Part::Card);
            match event.event_id {
                Some(id) => {
                    parts.insert(Part::Records(id));
                    for other in deliveries.iter().filter(|d| d.event.event_id == Some(id)) {
                        parts.insert(card(other.event.object_id));
                    }
                }
                None => {
                    parts.insert(Part::Anonymous(deliveries[index].number));
                    parts.insert(card(event.object_id));
                }
            }
            parts
        };
        let mut footprints: Vec<BTreeSet<Part>> = Vec::new();
        let mut keyed = |footprint: BTreeSet<Part>| -> Option<u8> {
            let key = u8::try_from(footprints.len()).ok().filter(|&k| k < 64)?;
            footprints.push(footprint);
            Some(key)
        };
        // Keys go first to the steps whose successors the model keeps and whose sleep saves
        // the most: plain deliveries, then lost acknowledgements and network copies, then
        // reconciliations, and crashes last (under SPEC a crash is dropped: without a key it
        // costs one transition, never a state). A step without a key never sleeps, and its
        // successor is expanded with nothing asleep.
        let mut delivery_keys: Vec<(u32, [Option<u8>; CLASSES])> = deliveries
            .iter()
            .map(|delivery| (delivery.number, [None; CLASSES]))
            .collect();
        // Reconciliations never commute given kinds: only these keys do.
        let mut delivery_mask: SleepSet = 0;
        let mut key_class =
            |fault: Option<Fault>, keyed: &mut dyn FnMut(BTreeSet<Part>) -> Option<u8>| {
                for (index, (_, keys)) in delivery_keys.iter_mut().enumerate() {
                    let mut footprint = identity(index);
                    footprint.insert(Part::Owed(index));
                    if let Some(fault) = fault {
                        footprint.insert(Part::Budget(fault));
                    }
                    let key = keyed(footprint);
                    if let Some(key) = key {
                        delivery_mask |= 1 << key;
                    }
                    keys[class(fault)] = key;
                }
            };
        for (fault, possible) in [
            (None, true),
            (Some(Fault::AckLost), budgets.lost_acks > 0),
            (Some(Fault::Duplicate), budgets.duplicates > 0),
            // The same footprint as a duplicate (its records, cards and standing), with a
            // budget of its own.
            (Some(Fault::Reencoded), budgets.reencodings > 0),
        ] {
            if possible {
                key_class(fault, &mut keyed);
            }
        }
        let mut reconciles = Vec::new();
        for snapshot in &scenario.authority {
            let card = snapshot.object_id;
            let mut footprint = BTreeSet::from([Part::Card(card)]);
            for (index, delivery) in deliveries.iter().enumerate() {
                if delivery.event.object_id == Some(card) {
                    footprint.extend(identity(index));
                }
                if reconciliation == Reconciliation::End {
                    footprint.insert(Part::Owed(index));
                }
            }
            let at = card.0 as usize;
            if reconciles.len() <= at {
                reconciles.resize(at + 1, None);
            }
            reconciles[at] = keyed(footprint);
        }
        if budgets.crashes > 0 {
            key_class(Some(Fault::Crash), &mut keyed);
        }
        let mut independent = [0; 64];
        let mut card_only = [0; 64];
        for (a, mine) in footprints.iter().enumerate() {
            for (b, theirs) in footprints.iter().enumerate() {
                if mine.is_disjoint(theirs) {
                    independent[a] |= 1 << b;
                } else if a != b
                    && delivery_mask & (1 << a) != 0
                    && delivery_mask & (1 << b) != 0
                    && mine
                        .intersection(theirs)
                        .all(|part| matches!(part, Part::Card(_)))
                {
                    card_only[a] |= 1 << b;
                }
            }
        }
        let other_version = view
            .merges_settled()
            .then(|| other_versions(scenario, &delivery_keys, &card_only));
        let any = independent.iter().any(|&keys| keys != 0);
        let any_given = card_only.iter().any(|&keys| keys != 0);
        (any || any_given).then_some(Commuting {
            deliveries: DeliveryKeys::new(delivery_keys),
            reconciles,
            independent,
            card_only,
            other_version,
        })
    }

    /// The step's sleep key, if it has one.
    #[inline]
    pub fn key(&self, step: &Step) -> Option<u8> {
        match *step {
            Step::Deliver { delivery, fault } => self.deliveries.get(delivery)?[class(fault)],
            Step::Reconcile(card) => self.reconciles.get(card.0 as usize).copied().flatten(),
            Step::Expire => None,
        }
    }

    /// The keys of the steps that commute with the step whose key is `key`.
    #[inline]
    pub fn commutes_with(&self, key: u8) -> SleepSet {
        self.independent[usize::from(key)]
    }

    /// The keys of the deliveries that commute with the delivery whose key is `key` at a
    /// world where it has kind `kind` and they have kind `other`: those whose footprints
    /// meet its own in cards only, when both are [`INERT`] or one is and the other is
    /// [`RAISING`].
    ///
    /// Also two [`RAISING`] deliveries with different versions (when settled decisions
    /// are merged), and a [`HELD`] delivery with an inert or raising one (never two held
    /// ones: the order of a card's holds is part of the world).
    #[inline]
    pub fn commutes_given(&self, key: u8, kind: Kind, other: Kind) -> SleepSet {
        let key = usize::from(key);
        match (kind, other) {
            (INERT, INERT | RAISING | HELD)
            | (RAISING | HELD, INERT)
            | (RAISING, HELD)
            | (HELD, RAISING) => self.card_only[key],
            (RAISING, RAISING) => self.other_version.map_or(0, |other| other[key]),
            _ => 0,
        }
    }

    /// Whether the steps `a` and `b` share only cards (and may commute given their kinds).
    pub fn card_only(&self, a: &Step, b: &Step) -> bool {
        match (self.key(a), self.key(b)) {
            (Some(a), Some(b)) => self.card_only[usize::from(a)] & (1 << b) != 0,
            _ => false,
        }
    }

    /// Whether the steps `a` and `b` are declared to commute.
    pub fn commute(&self, a: &Step, b: &Step) -> bool {
        match (self.key(a), self.key(b)) {
            (Some(a), Some(b)) => self.commutes_with(a) & (1 << b) != 0,
            _ => false,
        }
    }
}

/// For each delivery key, the keys in `card_only` whose delivery's valid version differs
/// from its own (both valid).
fn other_versions(
    scenario: &Scenario,
    delivery_keys: &[(u32, [Option<u8>; CLASSES])],
    card_only: &[SleepSet; 64],
) -> [SleepSet; 64] {
    let mut version_of: [Option<u64>; 64] = [None; 64];
    for (index, (_, keys)) in delivery_keys.iter().enumerate() {
        if let Version::Valid(version) = scenario.deliveries[index].event.version {
            for key in keys.iter().flatten() {
                version_of[usize::from(*key)] = Some(version);
            }
        }
    }
    let mut other = [0; 64];
    for (a, keys) in other.iter_mut().enumerate() {
        for b in 0..64 {
            let differ = matches!((version_of[a], version_of[b]), (Some(x), Some(y)) if x != y);
            if differ && card_only[a] & (1 << b) != 0 {
                *keys |= 1 << b;
            }
        }
    }
    other
}
