//! The stateright model: every reordering, duplicate, lost acknowledgement and crash of a
//! fixture's deliveries, with reconciliation interleaved and (if asked) the retention window
//! passing, through the real decision function.
//!
//! State: [`World`] (receiver state, what the sender still owes, fault budgets, violation
//! marker). Actions: [`Step`]s. `next_state` is
//! [`crate::card::properties::checked_transition`], the same function replay uses. A step
//! that changes neither the receiver nor the sender (a redelivery of recorded content, a
//! crash before record under the SPEC policy) has been checked there and is then dropped
//! (`None`): it would only lead back to a state already covered with more budget, so
//! budgets cost transitions rather than states.

use crate::card::commute::{Commuting, HELD, INERT, RAISING};
use crate::card::fingerprint::{covered_cards, View};
use crate::card::fixture::Scenario;
use crate::card::policy::{Mutant, Spec};
use crate::card::properties::checked_transition;
use crate::card::property::{Properties, Property};
use crate::card::receiver::{Decision, HoldReason, Outcome, Verdict};
use crate::card::step::{Budgets, DeliveryBudgets, Fault, Reconciliation, Step};
use crate::card::world::{Effect, World};
use crate::harness::checker::{Kind, SleepSet};
use crate::harness::shard::Owner;
use crate::harness::Protocol;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Counts of every decision kind and reconciliation outcome met on explored transitions.
/// Every transition adds to them, from every checker thread: each thread counts in a
/// stripe of its own (a cache line apart), so threads never contend for one counter.
#[derive(Debug, Default)]
pub struct Coverage {
    stripes: [Stripe; STRIPES],
}

/// Checker threads beyond this many share stripes (still counted exactly).
const STRIPES: usize = 8;

/// One thread's counters, alone on their cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Stripe {
    decisions: [AtomicU64; Decision::ALL.len()],
    duplicates: AtomicU64,
    outcomes: [AtomicU64; Outcome::ALL.len()],
}

/// This thread's stripe.
fn stripe_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|stripe| *stripe)
}

impl Coverage {
    fn note(&self, effect: &Effect) {
        let stripe = &self.stripes[stripe_index()];
        match effect {
            Effect::Delivered {
                delivered: Some(answer),
                ..
            } => match answer.verdict {
                Verdict::Decided(decision) => {
                    let index = Decision::ALL.iter().position(|&kind| kind == decision);
                    stripe.decisions[index.expect("every decision is listed")]
                        .fetch_add(1, Ordering::Relaxed);
                }
                Verdict::Duplicate(_) => {
                    stripe.duplicates.fetch_add(1, Ordering::Relaxed);
                }
            },
            Effect::Delivered {
                delivered: None, ..
            }
            | Effect::Expired(_) => {}
            Effect::Reconciled(reconciled) => {
                let index = Outcome::ALL
                    .iter()
                    .position(|&kind| kind == reconciled.outcome);
                stripe.outcomes[index.expect("every outcome is listed")]
                    .fetch_add(1, Ordering::Relaxed);
                for (_, settlement) in &reconciled.settled {
                    if let crate::card::receiver::Settlement::ReEvaluated { to, .. } = settlement {
                        let index = Decision::ALL.iter().position(|kind| kind == to);
                        stripe.decisions[index.expect("every decision is listed")]
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }

    /// Every decision kind (`duplicate` included) and outcome, with how many explored
    /// transitions met it.
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        let sum = |pick: &dyn Fn(&Stripe) -> &AtomicU64| -> u64 {
            self.stripes
                .iter()
                .map(|stripe| pick(stripe).load(Ordering::Relaxed))
                .sum()
        };
        let decisions = Decision::ALL
            .iter()
            .enumerate()
            .map(|(at, kind)| (kind.name(), sum(&|stripe| &stripe.decisions[at])));
        let duplicate = std::iter::once(("duplicate", sum(&|stripe| &stripe.duplicates)));
        let outcomes = Outcome::ALL
            .iter()
            .enumerate()
            .map(|(at, kind)| (kind.name(), sum(&|stripe| &stripe.outcomes[at])));
        decisions.chain(duplicate).chain(outcomes).collect()
    }
}

/// A fixture's fault space under one policy.
#[derive(Clone, Debug)]
pub struct ReceiverModel {
    /// The fixture.
    pub scenario: Arc<Scenario>,
    /// The policy (`None`: SPEC).
    pub policy: Option<Mutant>,
    /// Fault budgets, totals over a run.
    pub budgets: Budgets,
    /// Fault budgets of single deliveries, if the model file gives them.
    pub per_delivery: DeliveryBudgets,
    /// When reconciliation may happen.
    pub reconciliation: Reconciliation,
    /// The properties this run checks.
    pub checked: Properties,
    /// Decision coverage, shared by the checker's threads.
    pub coverage: Arc<Coverage>,
    /// Symmetry of identical redeliveries ([`Twins`]); `None`: every copy is sent on its own.
    pub twins: Option<Arc<Twins>>,
    /// What a world's identity leaves out of the receiver
    /// ([`crate::card::receiver::Receiver::fingerprint`]).
    pub view: View,
    /// Which steps commute, for depth-first search's sleep sets; `None`: nothing sleeps.
    pub commuting: Option<Arc<Commuting>>,
    /// Owed deliveries of recorded content, which depth-first search delivers at once
    /// ([`Redeliveries`]); `None`: it does not.
    pub redeliveries: Option<Arc<Redeliveries>>,
    /// The hub and the rest of the fixture, for sharding by owner ([`Hub`]); `None`: the
    /// model is sharded by its first steps.
    pub hub: Option<Arc<Hub>>,
}

/// Sharding by owner ([`crate::harness::shard::Owner`]): the fixture's deliveries split
/// into the *hub* (the connected part of deliveries, cards and event ids with the most
/// deliveries, as [`crate::card::independence`] draws parts) and the rest. A world is
/// shared while no hub delivery's content is recorded; after that its owner is which of
/// the rest's deliveries have their content recorded.
///
/// Why the owner contract holds: a delivery records only its own content, under its own
/// event id, so a step changes the recorded set of one side at most (expiry forgets
/// records of every part in one step: then there are no owners); deliveries of different
/// parts share no card and no event id, so they commute (the reason `split` may check them
/// apart), and fault budgets are totals that any order of the same steps uses alike;
/// reconciliation records nothing, and interleaved it waits only for its own card (at the
/// end it waits for every delivery, which ties the parts: then there are no owners); a
/// redelivery the model takes alone recognises recorded content and records nothing new.
#[derive(Debug)]
pub struct Hub {
    /// The hub's delivery indices.
    hub: Vec<usize>,
    /// The other delivery indices: bit `i` of an owner is `rest[i]`.
    rest: Vec<usize>,
}

impl Hub {
    /// The hub of `scenario`, if it has more than one part, at most 64 deliveries outside
    /// the hub, no expiry and no reconciliation held back to the end.
    pub fn of(
        scenario: &Scenario,
        budgets: Budgets,
        reconciliation: Reconciliation,
    ) -> Option<Hub> {
        let waits = reconciliation == Reconciliation::End && !scenario.authority.is_empty();
        if budgets.expiries > 0 || waits {
            return None;
        }
        let deliveries = &scenario.deliveries;
        // Union-find over delivery indices: two deliveries are joined by a card or an event id
        // they share (no card counts as one card, as it does for holds).
        let mut parent: Vec<usize> = (0..deliveries.len()).collect();
        fn root(parent: &mut [usize], mut at: usize) -> usize {
            while parent[at] != at {
                parent[at] = parent[parent[at]];
                at = parent[at];
            }
            at
        }
        for one in 0..deliveries.len() {
            for other in 0..one {
                let (a, b) = (&deliveries[one].event, &deliveries[other].event);
                let shares = a.object_id == b.object_id
                    || (a.event_id.is_some() && a.event_id == b.event_id);
                if shares {
                    let (x, y) = (root(&mut parent, one), root(&mut parent, other));
                    parent[x] = y;
                }
            }
        }
        let roots: Vec<usize> = (0..deliveries.len())
            .map(|index| root(&mut parent, index))
            .collect();
        let size = |part: usize| roots.iter().filter(|&&root| root == part).count();
        // The largest part; the first in fixture order among equals.
        let hub_root = roots
            .iter()
            .copied()
            .max_by_key(|&part| (size(part), std::cmp::Reverse(part)))?;
        let (hub, rest): (Vec<usize>, Vec<usize>) =
            (0..deliveries.len()).partition(|&index| roots[index] == hub_root);
        (!rest.is_empty() && rest.len() <= 64).then_some(Hub { hub, rest })
    }

    /// Every step of the hub: its deliveries, with and without each fault, and the
    /// reconciliation of its cards.
    fn steps<'a>(&'a self, scenario: &'a Scenario) -> impl Iterator<Item = Step> + 'a {
        let faults = [
            None,
            Some(Fault::AckLost),
            Some(Fault::Crash),
            Some(Fault::Duplicate),
            Some(Fault::Reencoded),
        ];
        let deliveries = self.hub.iter().flat_map(move |&index| {
            let delivery = scenario.deliveries[index].number;
            faults.map(|fault| Step::Deliver { delivery, fault })
        });
        let cards = self
            .hub
            .iter()
            .filter_map(move |&index| scenario.deliveries[index].event.object_id);
        let reconciles = scenario
            .authority
            .iter()
            .filter(move |snapshot| cards.clone().any(|card| card == snapshot.object_id))
            .map(|snapshot| Step::Reconcile(snapshot.object_id));
        deliveries.chain(reconciles)
    }

    /// Whose share `world` is.
    pub fn owner(&self, scenario: &Scenario, world: &World) -> Owner {
        let recorded = |index: usize| {
            let delivery = &scenario.deliveries[index];
            world
                .receiver
                .recorded(&delivery.event, delivery.number)
                .is_some()
        };
        if !self.hub.iter().any(|&index| recorded(index)) {
            return Owner::Shared;
        }
        let rest = self
            .rest
            .iter()
            .enumerate()
            .filter(|&(_, &index)| recorded(index))
            .fold(0u64, |owner, (bit, _)| owner | 1 << bit);
        Owner::Of(rest)
    }
}

/// Redeliveries taken alone (the model file's `eager_redeliveries`, depth-first search
/// only): at a world where the sender still owes a delivery whose content the receiver has
/// recorded, the model names its plain delivery as the only step to take
/// ([`crate::harness::checker::Commute::eager`]). Under SPEC without expiry that step is
/// recognised and acknowledged from the record: it changes nothing but what the sender
/// owes, breaks no property, stays so whatever else happens first (records are never
/// forgotten, and nothing else acknowledges the delivery), and commutes with every other
/// step the model keeps. So the worlds where such a redelivery is still in flight while
/// other steps interleave need not be searched. docs/checker.md has the argument; mutants
/// may decide a redelivery otherwise, and expiry forgets records, so the model never names
/// one there.
#[derive(Debug)]
pub struct Redeliveries {
    /// By delivery number (sorted): the indices of the deliveries that share its event id
    /// (itself alone without one), in fixture order. Only these can become redeliveries of
    /// recorded content by a step of that delivery.
    same_id: Vec<(u32, Vec<usize>)>,
}

impl Redeliveries {
    /// The deliveries of `scenario`, grouped by event id.
    pub fn of(scenario: &Scenario) -> Redeliveries {
        let deliveries = &scenario.deliveries;
        let mut same_id: Vec<(u32, Vec<usize>)> = deliveries
            .iter()
            .enumerate()
            .map(|(index, delivery)| {
                let shared = match delivery.event.event_id {
                    Some(id) => (0..deliveries.len())
                        .filter(|&other| deliveries[other].event.event_id == Some(id))
                        .collect(),
                    None => vec![index],
                };
                (delivery.number, shared)
            })
            .collect();
        same_id.sort_by_key(|&(number, _)| number);
        Redeliveries { same_id }
    }

    /// The deliveries that share delivery `number`'s event id.
    fn same_id(&self, number: u32) -> &[usize] {
        self.same_id
            .binary_search_by_key(&number, |&(number, _)| number)
            .map_or(&[], |at| &self.same_id[at].1)
    }
}

/// Identical redeliveries in a fixture: deliveries of one event id with one content (the
/// same envelope, whatever their receive times) are interchangeable. The receiver keeps
/// nothing of a delivery with an event id but its content (its number is not recorded,
/// and its receive time is left out of the state), every property reads a delivery through
/// its event, and the fault budgets are totals; so a world in which copy `b` was
/// acknowledged and copy `a` is owed behaves exactly as the world with `a` and `b`
/// swapped. The model therefore sends the copies of one envelope in fixture order: a copy
/// is delivered only while no earlier copy is owed, and the network duplicates only the
/// first acknowledged copy. Every behaviour of the full model is a renaming of one the
/// reduced model has, with the same decisions, acknowledgements and verdict, and each
/// trace is a real schedule, so it replays as it is. Inputs without an event id are
/// excluded (their delivery number is their identity), and so are models with
/// per-delivery budgets (the copies' budgets differ). The argument leans on two facts a
/// change must keep: the model's expiry step ignores receive times (a time-based one would
/// tell copies apart), and no step rewrites a first record with the same content (its
/// receive time is compared by first-record-immutable). `tests/model.rs` checks verdicts
/// and violated properties with and without it, on generated fixtures under every policy.
#[derive(Debug)]
pub struct Twins {
    /// For each delivery index, the index of the previous identical copy, if any.
    earlier: Vec<Option<usize>>,
}

impl Twins {
    /// The copies in `scenario`, or `None` when it has no identical redelivery.
    pub fn of(scenario: &Scenario) -> Option<Twins> {
        let deliveries = &scenario.deliveries;
        let earlier: Vec<Option<usize>> = (0..deliveries.len())
            .map(|index| {
                let event = &deliveries[index].event;
                event.event_id?;
                (0..index)
                    .rev()
                    .find(|&before| deliveries[before].event.content == event.content)
            })
            .collect();
        earlier
            .iter()
            .any(Option::is_some)
            .then_some(Twins { earlier })
    }

    /// Whether an earlier copy of delivery `index` is in the state `owed` says.
    fn earlier_copy(&self, index: usize, owed: bool, world: &World) -> bool {
        let mut at = self.earlier[index];
        while let Some(before) = at {
            if world.owes(before) == owed {
                return true;
            }
            at = self.earlier[before];
        }
        false
    }
}

impl ReceiverModel {
    /// A model checking SPEC's properties.
    pub fn new(
        scenario: Arc<Scenario>,
        policy: Option<Mutant>,
        budgets: Budgets,
        reconciliation: Reconciliation,
    ) -> ReceiverModel {
        ReceiverModel {
            policy,
            budgets,
            per_delivery: DeliveryBudgets::NONE,
            reconciliation,
            checked: Properties::SPEC,
            coverage: Arc::default(),
            twins: None,
            view: View::full(),
            commuting: None,
            redeliveries: None,
            hub: Hub::of(&scenario, budgets, reconciliation).map(Arc::new),
            scenario,
        }
    }

    /// The same model, sending identical redeliveries in fixture order ([`Twins`]).
    pub fn with_symmetry(mut self) -> ReceiverModel {
        self.twins = Twins::of(&self.scenario).map(Arc::new);
        self
    }

    /// The same model, with worlds that differ only in settled records' state decisions
    /// taken as one state ([`crate::card::receiver::Receiver::fingerprint`]); with
    /// `merge_paused`, under SPEC and without expiry, also worlds that differ only in how a
    /// covered card got to its pause ([`covered_cards`]).
    pub fn with_merges(mut self, merge_paused: bool) -> ReceiverModel {
        let covered = if merge_paused && self.policy.is_none() && self.budgets.expiries == 0 {
            covered_cards(&self.scenario)
        } else {
            Vec::new()
        };
        self.view = View::new(true, covered);
        self
    }

    /// The same model, telling depth-first search which steps commute ([`Commuting`]), under
    /// SPEC without expiry or per-delivery budgets (the footprints hold there only).
    pub fn with_sleep_sets(mut self) -> ReceiverModel {
        let footprints_hold = self.policy.is_none()
            && self.budgets.expiries == 0
            && self.per_delivery.left().is_none();
        let view = self.view;
        self.commuting = footprints_hold
            .then(|| Commuting::of(&self.scenario, self.budgets, self.reconciliation, &view))
            .flatten()
            .map(Arc::new);
        self
    }

    /// The same model, naming owed deliveries of recorded content for depth-first search to
    /// deliver at once ([`Redeliveries`]), under SPEC without expiry only.
    pub fn with_eager_redeliveries(mut self) -> ReceiverModel {
        let holds = self.policy.is_none() && self.budgets.expiries == 0;
        self.redeliveries = holds.then(|| Arc::new(Redeliveries::of(&self.scenario)));
        self
    }

    /// The plain delivery of the first owed delivery the model offers at `world` whose
    /// content the receiver recognises, among those `after` may have recorded (the
    /// deliveries of its event id; all, for `None`).
    fn redelivery(&self, world: &World, after: Option<&Step>) -> Option<Step> {
        let redeliveries = self.redeliveries.as_deref()?;
        let all: Vec<usize>;
        let candidates = match after {
            Some(&Step::Deliver { delivery, .. }) => redeliveries.same_id(delivery),
            // Reconciliation and expiry record no content.
            Some(_) => return None,
            None => {
                all = (0..self.scenario.deliveries.len()).collect();
                &all
            }
        };
        let twins = self.twins.as_deref();
        candidates.iter().find_map(|&index| {
            let delivery = &self.scenario.deliveries[index];
            let offered = world.owes(index)
                && !twins.is_some_and(|twins| twins.earlier_copy(index, true, world));
            let recorded = offered
                && world
                    .receiver
                    .recognise(Spec, delivery.number, &delivery.event)
                    .is_some();
            recorded.then_some(Step::Deliver {
                delivery: delivery.number,
                fault: None,
            })
        })
    }

    /// Describes a step in domain terms: `deliver #6 e-202 (variant)`, `ack of #1 lost`.
    pub fn describe(&self, step: &Step) -> String {
        describe_step(&self.scenario, step)
    }
}

/// Describes a world in domain terms, for Explorer: cards, pauses, records, holds, what
/// the sender still owes, budgets left and any violation.
pub fn describe_world(scenario: &Scenario, world: &World) -> String {
    use std::fmt::Write;
    let catalog = &scenario.catalog;
    let receiver = &world.receiver;
    let mut out = String::new();
    if let Some(property) = world.violation {
        let _ = writeln!(out, "VIOLATED: {property}");
    }
    let _ = writeln!(out, "cards:");
    for (card, state) in receiver.cards() {
        let paused = if state.paused { " (paused)" } else { "" };
        let value = catalog.state_value(state.state);
        let _ = writeln!(
            out,
            "  {} v{} {value}{paused}",
            catalog.name(card),
            state.version
        );
    }
    let _ = writeln!(out, "records:");
    for (id, identity) in receiver.identities() {
        let records: Vec<String> = identity
            .records()
            .map(|record| format!("{} ({:?})", record.decision, record.standing))
            .collect();
        let _ = writeln!(
            out,
            "  {}: {}",
            catalog.name(id),
            records.join(", then variant ")
        );
    }
    for (&number, record) in receiver.anonymous() {
        let _ = writeln!(
            out,
            "  delivery-{number}: {} ({:?})",
            record.decision, record.standing
        );
    }
    let _ = writeln!(out, "holds:");
    for (card, keys) in receiver.holds() {
        let names: Vec<String> = keys
            .iter()
            .map(|key| scenario.input_name(key.input()))
            .collect();
        let card = card.map_or("(no card)", |card| catalog.name(card));
        let _ = writeln!(out, "  {card}: {}", names.join(", "));
    }
    let owed: Vec<String> = scenario
        .deliveries
        .iter()
        .enumerate()
        .filter(|(index, _)| world.owes(*index))
        .map(|(_, delivery)| format!("#{}", delivery.number))
        .collect();
    let owed = if owed.is_empty() {
        "nothing".to_owned()
    } else {
        owed.join(" ")
    };
    let _ = writeln!(out, "sender still owes: {owed}");
    let budgets = world.budgets;
    let _ = writeln!(
        out,
        "faults left: {} duplicates, {} lost acks, {} crashes, {} expiries, {} re-encodings",
        budgets.duplicates,
        budgets.lost_acks,
        budgets.crashes,
        budgets.expiries,
        budgets.reencodings
    );
    if let Some(left) = world.per_delivery.left() {
        let per: Vec<String> = left
            .iter()
            .map(|(index, budget)| {
                format!(
                    "#{}: {}/{}/{}",
                    scenario.deliveries[*index].number,
                    budget.duplicates,
                    budget.lost_acks,
                    budget.crashes
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "per delivery (duplicates/lost acks/crashes): {}",
            per.join(", ")
        );
    }
    out
}

/// Describes a step in domain terms.
pub fn describe_step(scenario: &Scenario, step: &Step) -> String {
    match *step {
        Step::Reconcile(card) => format!("reconcile {}", scenario.catalog.name(card)),
        Step::Expire => "retention window passes (settled event ids are forgotten)".into(),
        Step::Deliver { delivery, fault } => {
            let index = scenario.delivery_index(delivery).expect("known delivery");
            let event = &scenario.deliveries[index].event;
            let id = event
                .event_id
                .map_or("(no event id)", |id| scenario.catalog.name(id));
            let variant = scenario.deliveries[..index].iter().any(|earlier| {
                earlier.event.event_id == event.event_id
                    && event.event_id.is_some()
                    && earlier.event.content != event.content
            });
            let what = format!(
                "#{delivery} {id}{}",
                if variant { " (variant)" } else { "" }
            );
            match fault {
                None => format!("deliver {what}"),
                Some(Fault::AckLost) => format!("deliver {what}, ack of #{delivery} lost"),
                Some(Fault::Duplicate) => format!("duplicate of #{delivery} ({id}) by the network"),
                Some(Fault::Reencoded) => {
                    format!("re-encoded copy of #{delivery} ({id}) by the network")
                }
                Some(Fault::Crash) => format!("deliver {what}, crash before record"),
            }
        }
    }
}

impl Protocol for ReceiverModel {
    type World = World;
    type Step = Step;

    const PROPERTIES: &'static [&'static str] = &Property::NAMES;

    fn init(&self) -> World {
        World {
            per_delivery: self.per_delivery.clone(),
            view: self.view,
            ..World::initial(&self.scenario, self.budgets)
        }
    }

    fn steps(&self, world: &World, actions: &mut Vec<Step>) {
        let budgets = world.budgets;
        let allows = |index: usize, fault: Fault| {
            budgets.allows(fault) && world.per_delivery.allows(index, fault)
        };
        let twins = self.twins.as_deref();
        for (index, delivery) in self.scenario.deliveries.iter().enumerate() {
            let delivery = delivery.number;
            let owed = world.owes(index);
            if twins.is_some_and(|twins| twins.earlier_copy(index, owed, world)) {
                // An earlier copy of the same envelope in the same standing stands for it.
                continue;
            }
            if owed {
                actions.push(Step::Deliver {
                    delivery,
                    fault: None,
                });
                for fault in [Fault::AckLost, Fault::Crash] {
                    if allows(index, fault) {
                        actions.push(Step::Deliver {
                            delivery,
                            fault: Some(fault),
                        });
                    }
                }
            } else {
                for fault in [Fault::Duplicate, Fault::Reencoded] {
                    if allows(index, fault) {
                        actions.push(Step::Deliver {
                            delivery,
                            fault: Some(fault),
                        });
                    }
                }
            }
        }
        if self.reconciliation == Reconciliation::Interleaved || world.owed.is_empty() {
            for snapshot in &self.scenario.authority {
                if world.reconcilable(&self.scenario, snapshot.object_id) {
                    actions.push(Step::Reconcile(snapshot.object_id));
                }
            }
        }
        if budgets.expiries > 0 && world.receiver.has_expirable() {
            actions.push(Step::Expire);
        }
    }

    fn next(&self, last: &World, step: &Step) -> Option<World> {
        let (next, effect) = match self.policy {
            None => checked_transition(&self.scenario, Spec, self.checked, last, *step),
            Some(mutant) => {
                checked_transition(&self.scenario, Some(mutant), self.checked, last, *step)
            }
        };
        self.coverage.note(&effect);
        // A receiver the step did not touch is the same allocation. One it touched without
        // changing (rare) is a repeat of `last`, which the checker's visited set drops: a
        // deep comparison here would cost more than that on every step.
        let changed = !Arc::ptr_eq(&next.receiver, &last.receiver) || next.owed != last.owed;
        (changed || next.violation.is_some()).then_some(next)
    }

    fn violation(world: &World) -> Option<usize> {
        world.violation.map(|property| property as usize)
    }

    fn panicked(&self, world: &World) -> World {
        World {
            violation: Some(Property::Panic),
            ..world.clone()
        }
    }

    fn checks(&self, index: usize) -> bool {
        let property = Property::ALL[index];
        property.is_explored() && self.checked.contains(property)
    }

    fn only(&self, index: usize) -> ReceiverModel {
        ReceiverModel {
            checked: Properties::only(Property::at(index)),
            coverage: Arc::default(),
            ..self.clone()
        }
    }

    fn describe_step(&self, step: &Step) -> String {
        self.describe(step)
    }

    fn describe_world(&self, world: &World) -> String {
        describe_world(&self.scenario, world)
    }

    fn coverage(&self) -> Vec<(&'static str, u64)> {
        self.coverage.counts()
    }

    fn sleeps(&self) -> bool {
        self.commuting.is_some()
    }

    fn sleep_key(&self, step: &Step) -> Option<u8> {
        self.commuting.as_deref()?.key(step)
    }

    fn commutes_with(&self, key: u8) -> crate::harness::checker::SleepSet {
        self.commuting
            .as_deref()
            .map_or(0, |commuting| commuting.commutes_with(key))
    }

    fn step_kind(&self, _key: u8, before: &World, step: &Step, after: Option<&World>) -> Kind {
        if self.commuting.is_none() {
            return 0;
        }
        step_kind(&self.scenario, before, step, after)
    }

    fn commutes_given(&self, key: u8, kind: Kind, other: Kind) -> SleepSet {
        self.commuting
            .as_deref()
            .map_or(0, |commuting| commuting.commutes_given(key, kind, other))
    }

    fn settles(&self) -> bool {
        self.redeliveries.is_some()
    }

    fn eager(&self, world: &World, after: Option<&Step>) -> Option<Step> {
        self.redelivery(world, after)
    }

    fn owner(&self, world: &World) -> Option<Owner> {
        Some(self.hub.as_deref()?.owner(&self.scenario, world))
    }

    fn hub_keys(&self) -> SleepSet {
        let (Some(hub), Some(commuting)) = (self.hub.as_deref(), self.commuting.as_deref()) else {
            return 0;
        };
        hub.steps(&self.scenario)
            .filter_map(|step| commuting.key(&step))
            .fold(0, |keys, key| keys | 1 << key)
    }
}

/// What a delivery did at `before` under SPEC (the only policy that sleeps), for
/// state-dependent independence: [`INERT`] if it left every card and hold as it was and
/// would do the same with its card raised (the model dropped it, so the receiver was not
/// touched: a recognised redelivery or a crash; or it recognised recorded content; or it
/// was decided `stale`), [`RAISING`] if it only raised cards that stay unpaused (decided
/// `applied`), 0 otherwise (an `equal` decision too: a raised card would make it `stale`).
pub fn step_kind(scenario: &Scenario, before: &World, step: &Step, after: Option<&World>) -> Kind {
    let Step::Deliver { delivery, .. } = *step else {
        return 0;
    };
    let Some(after) = after else {
        // `next` drops a step only when the receiver is the same allocation and the sender
        // owes the same: nothing was decided.
        return INERT;
    };
    if after.violation.is_some() {
        return 0;
    }
    let (was, now) = (&*before.receiver, &*after.receiver);
    if Arc::ptr_eq(&before.receiver, &after.receiver) {
        // Recognised (a retry acknowledged from its record): only records were read.
        return INERT;
    }
    let (old, new) = (was.cards(), now.cards());
    if was.holds() != now.holds() {
        return held_at_pause(scenario, was, now, delivery);
    }
    if old == new {
        let Some(index) = scenario.delivery_index(delivery) else {
            return 0;
        };
        let event = &scenario.deliveries[index].event;
        return match now.recorded(event, delivery) {
            Some(Decision::Stale) => INERT,
            _ => 0,
        };
    }
    let raised = old.len() == new.len()
        && old.iter().zip(new.iter()).all(|((a, was), (b, now))| {
            a == b && (was == now || (now.version > was.version && !was.paused && !now.paused))
        });
    if raised {
        RAISING
    } else {
        0
    }
}

/// [`HELD`] if the delivery was decided `held` because its card was paused, leaving every
/// card as it was (its card paused before and after) and adding exactly one hold, under
/// that card; 0 otherwise.
fn held_at_pause(
    scenario: &Scenario,
    was: &crate::card::receiver::Receiver,
    now: &crate::card::receiver::Receiver,
    delivery: u32,
) -> Kind {
    let Some(index) = scenario.delivery_index(delivery) else {
        return 0;
    };
    let event = &scenario.deliveries[index].event;
    let Some(card) = event.object_id else {
        return 0;
    };
    let paused_before = was.cards().get(&card).is_some_and(|known| known.paused);
    let held = now.recorded(event, delivery) == Some(Decision::Held(HoldReason::Paused));
    let one_more_hold = |list: Option<&Vec<_>>| list.map_or(0, Vec::len);
    let holds_grew = was.holds().len() + usize::from(!was.holds().contains_key(&Some(card)))
        == now.holds().len()
        && one_more_hold(was.holds().get(&Some(card))) + 1
            == one_more_hold(now.holds().get(&Some(card)));
    if paused_before && held && holds_grew && was.cards() == now.cards() {
        HELD
    } else {
        0
    }
}
