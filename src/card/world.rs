//! The receiver inside its world: a sender that retries until acknowledged, a network that
//! reorders and copies, acknowledgements that get lost, a receiver that can crash, and a
//! retention window that can pass.
//!
//! One [`Step`] at a time, [`transition`] moves a [`World`] forward with the real decision
//! function. `replay` walks a fixture's schedule through it and the model checker explores
//! every schedule through it, so both run exactly the same code; both callers then check
//! the step against the properties ([`crate::card::properties::check`]).

use crate::card::fingerprint::View;
use crate::card::fixture::Scenario;
use crate::card::property::Property;
use crate::card::receiver::{Ack, Delivered, Policy, Receiver, Reconciled};
use crate::card::step::{Budgets, DeliveryBudgets, DeliverySet, Fault, Step};
use crate::card::wire::Sym;
use std::sync::Arc;

/// The receiver, what the sender still owes, the fault budgets, and the first property a
/// step broke.
///
/// A world's `Hash` is its identity in the model checker's visited set: its receiver's
/// fingerprint in the run's [`View`] (which may leave out settled records' state decisions,
/// and how a covered card got to its pause: see [`Receiver::fingerprint`] for why worlds
/// that differ only there are one state) and everything else.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct World {
    /// The receiver's state, shared between worlds until a step changes it: a duplicate
    /// or a crash before record copies nothing.
    pub receiver: Arc<Receiver>,
    /// Delivery indices not yet acknowledged to the sender.
    pub owed: DeliverySet,
    /// Delivery indices whose records expiry forgot: the receiver may no longer know them
    /// (empty unless the retention window passed).
    pub forgotten: DeliverySet,
    /// Faults left, in all.
    pub budgets: Budgets,
    /// Faults left per delivery, when the model file limits them.
    pub per_delivery: DeliveryBudgets,
    /// The first property broken on the way here.
    pub violation: Option<Property>,
    /// What the world's identity leaves out of the receiver (the model file's
    /// `merge_settled` and `merge_paused`; the same in every world of a run).
    pub view: View,
}

impl std::hash::Hash for World {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.receiver.fingerprint(&self.view));
        self.owed.hash(state);
        self.forgotten.hash(state);
        self.budgets.hash(state);
        self.per_delivery.hash(state);
        self.violation.hash(state);
    }
}

/// What a step did, for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// A delivery arrived.
    Delivered {
        /// The receiver's answer; `None` when it crashed before recording.
        delivered: Option<Delivered>,
        /// The acknowledgement the sender got, if any.
        acked: Option<Ack>,
    },
    /// An authority snapshot was applied.
    Reconciled(Reconciled),
    /// The retention window passed: these event ids were forgotten, in id order.
    Expired(Vec<Sym>),
}

impl World {
    /// The world at the start: initial cards, every delivery owed.
    pub fn initial(scenario: &Scenario, budgets: Budgets) -> World {
        World {
            receiver: Arc::new(Receiver::new(scenario.initial.iter().copied())),
            owed: DeliverySet::all(scenario.deliveries.len()),
            forgotten: DeliverySet::default(),
            budgets,
            per_delivery: DeliveryBudgets::NONE,
            violation: None,
            view: View::full(),
        }
    }

    /// Whether the sender still waits for delivery index `index`.
    pub fn owes(&self, index: usize) -> bool {
        self.owed.contains(index)
    }

    /// Whether `card` can be reconciled now: it has an authority snapshot and is paused,
    /// or it is not known yet (its authority establishes it, whether or not inputs wait for
    /// it: otherwise whether the card exists at the end would depend on arrival order).
    pub fn reconcilable(&self, scenario: &Scenario, card: Sym) -> bool {
        if scenario.authority_for(card).is_none() {
            return false;
        }
        self.receiver
            .cards()
            .get(&card)
            .is_none_or(|known| known.paused)
    }

    /// Estimated bytes of this state: inline size plus the heap its collections hold
    /// (entries only; allocator and tree-node overhead excluded).
    pub fn approx_bytes(&self) -> usize {
        use crate::card::receiver::{Card, HoldKey, Identity, Record};
        use std::mem::size_of;
        let receiver = &self.receiver;
        let variants: usize = receiver
            .identities()
            .values()
            .map(|identity| identity.variants.len())
            .sum();
        let holds: usize = receiver.holds().values().map(Vec::len).sum();
        size_of::<World>()
            + receiver.cards().len() * size_of::<Option<Card>>()
            + receiver.identities().len() * size_of::<Option<Identity>>()
            + variants * size_of::<Record>()
            + receiver.anonymous().len() * (size_of::<u32>() + size_of::<Record>())
            + receiver.holds().len() * size_of::<Option<Vec<HoldKey>>>()
            + holds * size_of::<HoldKey>()
    }

    /// Whether the authority `snapshot` could still change its card: the card is
    /// reconcilable and the snapshot is not behind it (a paused card whose authority is
    /// behind it stays paused: the snapshot would only be refused again).
    pub fn is_open(&self, scenario: &Scenario, snapshot: &crate::card::wire::Snapshot) -> bool {
        let behind = self
            .receiver
            .cards()
            .get(&snapshot.object_id)
            .is_some_and(|card| snapshot.version < card.version);
        self.reconcilable(scenario, snapshot.object_id) && !behind
    }

    /// Terminal: every delivery acknowledged and no authority snapshot left open.
    pub fn is_terminal(&self, scenario: &Scenario) -> bool {
        self.owed.is_empty()
            && !scenario
                .authority
                .iter()
                .any(|snapshot| self.is_open(scenario, snapshot))
    }
}

/// Applies one step to a copy of `pre` and returns the new world and what happened. The
/// caller checks the step ([`crate::card::properties::check`]).
pub fn transition<P: Policy>(
    scenario: &Scenario,
    policy: P,
    pre: &World,
    step: Step,
) -> (World, Effect) {
    let mut post = pre.clone();
    let effect = match step {
        Step::Deliver { delivery, fault } => {
            let index = scenario
                .delivery_index(delivery)
                .expect("schedules name existing deliveries");
            let arriving = &scenario.deliveries[index];
            // A re-encoded copy is the same content in other bytes.
            let event = if fault == Some(Fault::Reencoded) {
                &arriving.reencoded
            } else {
                &arriving.event
            };
            post.budgets.spend(fault);
            post.per_delivery.spend(index, fault);
            let (delivered, acked) = if fault == Some(Fault::Crash) {
                // Nothing of the step survives. A receiver that acknowledges first has
                // already told the sender something it never recorded.
                let early_ack = policy.acks_before_recording().then(|| {
                    let mut scratch = Receiver::clone(&pre.receiver);
                    scratch
                        .deliver(policy, arriving.number, arriving.received_at, event)
                        .ack
                });
                (None, early_ack)
            } else {
                let number = arriving.number;
                let delivered = match post.receiver.recognise(policy, number, event) {
                    Some(duplicate) => {
                        if let Some(card) = policy.pauses_on_duplicate(event) {
                            Arc::make_mut(&mut post.receiver).pause(card);
                        }
                        duplicate
                    }
                    None => Arc::make_mut(&mut post.receiver).decide(
                        policy,
                        number,
                        arriving.received_at,
                        event,
                    ),
                };
                let acked = match fault {
                    None => Some(delivered.ack),
                    Some(_) => None,
                };
                (Some(delivered), acked)
            };
            if acked.is_some() {
                post.owed.remove(index);
            }
            Effect::Delivered { delivered, acked }
        }
        Step::Reconcile(card) => {
            let snapshot = scenario
                .authority_for(card)
                .expect("schedules reconcile cards with authority");
            Effect::Reconciled(Arc::make_mut(&mut post.receiver).reconcile(policy, snapshot))
        }
        Step::Expire => {
            post.budgets.expiries = post.budgets.expiries.saturating_sub(1);
            let gone = Arc::make_mut(&mut post.receiver).expire_all_under(policy);
            for (index, delivery) in scenario.deliveries.iter().enumerate() {
                if delivery
                    .event
                    .event_id
                    .is_some_and(|id| gone.binary_search(&id).is_ok())
                {
                    post.forgotten.insert(index);
                }
            }
            Effect::Expired(gone)
        }
    };
    (post, effect)
}
