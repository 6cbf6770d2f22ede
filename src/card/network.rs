//! The receiver inside its world: a sender that retries until acknowledged, a network that
//! reorders and copies, acknowledgements that get lost, a receiver that can crash, and a
//! retention window that can pass.
//!
//! One [`Step`] at a time, [`transition`] moves a [`World`] forward with the real decision
//! function and checks the step against the safety properties. `replay` walks a fixture's
//! schedule through it and the model checker explores every schedule through it, so both
//! run exactly the same code.

use crate::card::fingerprint::View;
use crate::card::fixture::Scenario;
use crate::card::policy::{Mutant, Policy};
use crate::card::properties::{self, Properties, Property};
use crate::card::receiver::{Ack, Delivered, Receiver, Reconciled};
use crate::card::wire::Sym;
use std::sync::Arc;

/// A fault injected into one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// Decided and recorded, but the acknowledgement never reaches the sender, which will
    /// send the delivery again.
    AckLost,
    /// An extra copy made by the network; nobody waits for its acknowledgement.
    Duplicate,
    /// The receiver crashes before the decision is recorded: nothing of the step survives
    /// and no acknowledgement goes out.
    Crash,
}

/// One step of a schedule, in domain terms (delivery numbers and card names, never checker
/// indices), so that a schedule stays meaningful when the code changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// Delivery `delivery` arrives, with an optional fault.
    Deliver {
        /// The delivery number.
        delivery: u32,
        /// What goes wrong, if anything.
        fault: Option<Fault>,
    },
    /// The card's authority snapshot is applied.
    Reconcile(Sym),
    /// The retention window passes over everything recorded so far: every event id that
    /// may be forgotten is ([`Receiver::expire_all`]).
    Expire,
}

/// Fault budgets left, totals over a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Budgets {
    /// Extra copies the network may still make.
    pub duplicates: u8,
    /// Acknowledgements that may still be lost.
    pub lost_acks: u8,
    /// Crashes the receiver may still have.
    pub crashes: u8,
    /// Times the retention window may still pass.
    pub expiries: u8,
}

impl Budgets {
    /// No limit, for replaying a given schedule.
    pub const UNLIMITED: Budgets = Budgets {
        duplicates: u8::MAX,
        lost_acks: u8::MAX,
        crashes: u8::MAX,
        expiries: u8::MAX,
    };

    fn spend(&mut self, fault: Option<Fault>) {
        let budget = match fault {
            None => return,
            Some(Fault::AckLost) => &mut self.lost_acks,
            Some(Fault::Duplicate) => &mut self.duplicates,
            Some(Fault::Crash) => &mut self.crashes,
        };
        *budget = budget.saturating_sub(1);
    }

    /// Whether one more fault of this kind is allowed.
    pub fn allows(&self, fault: Fault) -> bool {
        match fault {
            Fault::AckLost => self.lost_acks > 0,
            Fault::Duplicate => self.duplicates > 0,
            Fault::Crash => self.crashes > 0,
        }
    }
}

/// Fault budgets of single deliveries (a model file's `per_delivery` table). Absent: any
/// delivery may take any fault the totals allow. Present: a fault may hit only a listed
/// delivery, and only while that delivery's own budget lasts (the totals still apply).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeliveryBudgets(Option<Vec<(usize, Budgets)>>);

impl DeliveryBudgets {
    /// No per-delivery limits.
    pub const NONE: DeliveryBudgets = DeliveryBudgets(None);

    /// Limits for the listed delivery indices; every other delivery gets no fault.
    pub fn only(mut budgets: Vec<(usize, Budgets)>) -> DeliveryBudgets {
        budgets.sort_by_key(|&(index, _)| index);
        budgets.dedup_by_key(|&mut (index, _)| index);
        DeliveryBudgets(Some(budgets))
    }

    fn slot(&self, index: usize) -> Option<&Budgets> {
        let list = self.0.as_ref()?;
        let at = list.binary_search_by_key(&index, |&(at, _)| at).ok()?;
        Some(&list[at].1)
    }

    /// Whether delivery `index` may take one more `fault`.
    pub fn allows(&self, index: usize, fault: Fault) -> bool {
        match &self.0 {
            None => true,
            Some(_) => self.slot(index).is_some_and(|budget| budget.allows(fault)),
        }
    }

    fn spend(&mut self, index: usize, fault: Option<Fault>) {
        if let Some(list) = &mut self.0 {
            if let Ok(at) = list.binary_search_by_key(&index, |&(at, _)| at) {
                list[at].1.spend(fault);
            }
        }
    }

    /// The per-delivery budgets left, by delivery index (`None`: no per-delivery limits).
    pub fn left(&self) -> Option<&[(usize, Budgets)]> {
        self.0.as_deref()
    }
}

/// A set of delivery indices: inline for the first 64, so model states of small fixtures
/// carry no extra allocation. Equal sets are equal values (no trailing empty words beyond
/// what [`DeliverySet::all`] starts with).
// `eq` below is the derived equality with a fast path, so the derived `Hash` agrees with it.
#[allow(clippy::derived_hash_with_manual_eq)]
#[derive(Clone, Debug, Default, Eq, PartialOrd, Ord, Hash)]
pub struct DeliverySet {
    low: u64,
    high: Vec<u64>,
}

impl PartialEq for DeliverySet {
    fn eq(&self, other: &Self) -> bool {
        // Worlds compare these on every step: most fixtures have under 64 deliveries, and
        // an empty `high` needs no call into `memcmp`.
        self.low == other.low
            && self.high.len() == other.high.len()
            && (self.high.is_empty() || self.high == other.high)
    }
}

impl DeliverySet {
    /// Indices `0..count`.
    pub fn all(count: usize) -> DeliverySet {
        let word = |bits: usize| {
            if bits >= 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            }
        };
        let high = (64..count)
            .step_by(64)
            .map(|start| word(count - start))
            .collect();
        DeliverySet {
            low: word(count),
            high,
        }
    }

    /// Whether `index` is in the set.
    pub fn contains(&self, index: usize) -> bool {
        let word = if index < 64 {
            self.low
        } else {
            self.high.get(index / 64 - 1).copied().unwrap_or(0)
        };
        word & (1 << (index % 64)) != 0
    }

    /// Takes `index` out.
    pub fn remove(&mut self, index: usize) {
        let word = if index < 64 {
            &mut self.low
        } else {
            &mut self.high[index / 64 - 1]
        };
        *word &= !(1 << (index % 64));
    }

    /// Puts `index` in.
    pub fn insert(&mut self, index: usize) {
        if index < 64 {
            self.low |= 1 << index;
        } else {
            let word = index / 64 - 1;
            if self.high.len() <= word {
                self.high.resize(word + 1, 0);
            }
            self.high[word] |= 1 << (index % 64);
        }
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.low == 0 && self.high.iter().all(|&word| word == 0)
    }
}

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
            + receiver.cards().len() * (size_of::<Sym>() + size_of::<Card>())
            + receiver.identities().len() * (size_of::<Sym>() + size_of::<Identity>())
            + variants * size_of::<Record>()
            + receiver.anonymous().len() * (size_of::<u32>() + size_of::<Record>())
            + receiver.holds().len() * (size_of::<Option<Sym>>() + size_of::<Vec<HoldKey>>())
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

/// Applies one step to a copy of `pre`, checks it against the `checked` properties, and
/// returns the new world and what happened. A broken property is recorded in
/// `World::violation` (the first one stays).
pub fn transition<P: Policy>(
    scenario: &Scenario,
    policy: P,
    checked: Properties,
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
            post.budgets.spend(fault);
            post.per_delivery.spend(index, fault);
            let (delivered, acked) = if fault == Some(Fault::Crash) {
                // Nothing of the step survives. A receiver that acknowledges first has
                // already told the sender something it never recorded.
                let early_ack = policy.is(Mutant::AckBeforeRecord).then(|| {
                    let mut scratch = Receiver::clone(&pre.receiver);
                    scratch
                        .deliver(
                            policy,
                            arriving.number,
                            arriving.received_at,
                            &arriving.event,
                        )
                        .ack
                });
                (None, early_ack)
            } else {
                let (number, event) = (arriving.number, &arriving.event);
                let delivered = match post.receiver.recognise(policy, number, event) {
                    Some(duplicate) if policy.is(Mutant::PauseOnRedelivery) => {
                        Arc::make_mut(&mut post.receiver).pause_on_redelivery(event);
                        duplicate
                    }
                    Some(duplicate) => duplicate,
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
            let gone = Arc::make_mut(&mut post.receiver).expire_all();
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
    if post.violation.is_none() {
        post.violation = properties::check_step(scenario, checked, pre, &post, step, &effect);
    }
    let unchanged = Arc::ptr_eq(&pre.receiver, &post.receiver) && pre.owed == post.owed;
    if post.violation.is_none() && !unchanged {
        // An unchanged world was already checked when it was reached.
        post.violation = properties::check_state(scenario, checked, &post);
    }
    (post, effect)
}
