//! The audit trail: every decision, including the ones re-evaluation changed, every
//! reconciliation, the replacement counters, and the global arrival order of holds.
//!
//! History is kept here, beside the receiver, not inside it: the receiver's state is what
//! future decisions read, and history would make every path through the model distinct.

use crate::card::fixture::Replacements;
use crate::card::receiver::{Decision, HoldKey, Outcome, Receiver, Settlement, Verdict};
use crate::card::step::{Fault, Step};
use crate::card::wire::Sym;
use crate::card::world::Effect;
use std::collections::BTreeMap;

/// One entry of the audit trail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A delivery got a new decision.
    Decided {
        /// The delivery number.
        delivery: u32,
        /// The decision.
        decision: Decision,
    },
    /// A delivery matched a recorded decision.
    Duplicate {
        /// The delivery number.
        delivery: u32,
        /// The decision it matched.
        of: Decision,
    },
    /// The receiver crashed before recording a delivery.
    Crashed {
        /// The delivery number.
        delivery: u32,
    },
    /// An authority snapshot was applied.
    Reconciled {
        /// The card.
        card: Sym,
        /// What it did.
        outcome: Outcome,
    },
    /// Reconciliation settled a hold.
    Settled {
        /// The hold.
        key: HoldKey,
        /// How.
        settlement: Settlement,
    },
    /// The retention window passed and this event id was forgotten.
    Forgotten {
        /// The event id.
        event: Sym,
    },
}

/// The audit trail and counters of one run.
#[derive(Clone, Debug, Default)]
pub struct Journal {
    /// Every entry, with the index of the step that wrote it.
    pub entries: Vec<(usize, Entry)>,
    /// Replacements so far.
    pub replacements: Replacements,
    /// Each hold's position in global arrival order. Positions only grow: expiry removes
    /// entries, so the map's length is no fresh position.
    arrival: BTreeMap<HoldKey, usize>,
    /// The next position to give.
    next_arrival: usize,
}

impl Journal {
    /// An empty journal.
    pub fn new() -> Journal {
        Journal::default()
    }

    /// Records what step `index` did; `after` is the receiver after it.
    pub fn observe(&mut self, index: usize, step: Step, effect: &Effect, after: &Receiver) {
        match (step, effect) {
            (Step::Deliver { delivery, fault }, Effect::Delivered { delivered, .. }) => {
                let entry = match delivered {
                    None => {
                        debug_assert_eq!(fault, Some(Fault::Crash));
                        Entry::Crashed { delivery }
                    }
                    Some(answer) => match answer.verdict {
                        Verdict::Decided(decision) => {
                            if decision == Decision::Applied {
                                self.replacements.event += 1;
                            }
                            Entry::Decided { delivery, decision }
                        }
                        Verdict::Duplicate(of) => Entry::Duplicate { delivery, of },
                    },
                };
                self.entries.push((index, entry));
            }
            (Step::Reconcile(card), Effect::Reconciled(reconciled)) => {
                if reconciled.outcome.replaces() {
                    self.replacements.authority += 1;
                }
                self.entries.push((
                    index,
                    Entry::Reconciled {
                        card,
                        outcome: reconciled.outcome,
                    },
                ));
                for &(key, settlement) in &reconciled.settled {
                    if let Settlement::ReEvaluated {
                        to: Decision::Applied,
                        ..
                    } = settlement
                    {
                        self.replacements.event += 1;
                    }
                    self.entries
                        .push((index, Entry::Settled { key, settlement }));
                }
            }
            (Step::Expire, Effect::Expired(gone)) => {
                // A forgotten id starts afresh if it comes back: its old arrival positions
                // must not order its new holds.
                self.arrival.retain(|key, _| match key {
                    HoldKey::Record { event, .. } => gone.binary_search(event).is_err(),
                    HoldKey::Delivery(_) => true,
                });
                self.entries.extend(
                    gone.iter()
                        .map(|&event| (index, Entry::Forgotten { event })),
                );
            }
            _ => unreachable!("effects match their steps"),
        }
        for key in after.holds().values().flatten() {
            if let std::collections::btree_map::Entry::Vacant(slot) = self.arrival.entry(*key) {
                slot.insert(self.next_arrival);
                self.next_arrival += 1;
            }
        }
    }

    /// The receiver's waiting inputs in global arrival order.
    pub fn held(&self, receiver: &Receiver) -> Vec<HoldKey> {
        let mut held: Vec<HoldKey> = receiver.holds().values().flatten().copied().collect();
        held.sort_by_key(|key| self.arrival.get(key).copied().unwrap_or(usize::MAX));
        held
    }
}
