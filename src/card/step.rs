//! The steps of a card schedule and the faults and budgets that bound them: what the sender,
//! the network and the receiver's crashes may do, in domain terms (delivery numbers and card
//! names), shared by fixtures, replay, the model and its traces.

use crate::card::wire::Sym;

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
    /// An extra copy made by the network, re-encoded on the way (keys in another order,
    /// other whitespace: what a proxy, a queue or an SDK may do): the same content in other
    /// bytes ([`crate::card::fixture::Delivery::reencoded`]); nobody waits for its
    /// acknowledgement.
    Reencoded,
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
    /// may be forgotten is ([`crate::card::receiver::Receiver::expire_all`]).
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
    /// Re-encoded copies the network may still make.
    pub reencodings: u8,
}

impl Budgets {
    /// No limit, for replaying a given schedule.
    pub const UNLIMITED: Budgets = Budgets {
        duplicates: u8::MAX,
        lost_acks: u8::MAX,
        crashes: u8::MAX,
        expiries: u8::MAX,
        reencodings: u8::MAX,
    };

    pub(crate) fn spend(&mut self, fault: Option<Fault>) {
        let budget = match fault {
            None => return,
            Some(Fault::AckLost) => &mut self.lost_acks,
            Some(Fault::Duplicate) => &mut self.duplicates,
            Some(Fault::Crash) => &mut self.crashes,
            Some(Fault::Reencoded) => &mut self.reencodings,
        };
        *budget = budget.saturating_sub(1);
    }

    /// Whether one more fault of this kind is allowed.
    pub fn allows(&self, fault: Fault) -> bool {
        match fault {
            Fault::AckLost => self.lost_acks > 0,
            Fault::Duplicate => self.duplicates > 0,
            Fault::Crash => self.crashes > 0,
            Fault::Reencoded => self.reencodings > 0,
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

    pub(crate) fn spend(&mut self, index: usize, fault: Option<Fault>) {
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

/// When authority snapshots may be applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reconciliation {
    /// Whenever a card is paused, between any two deliveries, repeatedly.
    Interleaved,
    /// Only once every delivery is acknowledged.
    End,
}

/// A fault only a real receiver can take: what `arrival conform` does around a delivery
/// besides sending it. Each maps to the model steps it may be (see
/// [`crate::card::conform`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum External {
    /// The whole 2xx answer is read, then dropped: the model's lost acknowledgement.
    LostAck,
    /// An extra copy of a delivery already acknowledged.
    Duplicate,
    /// An extra copy in other bytes (same content).
    Reencoded,
    /// The connection is closed right after the request is sent: indefinite.
    Disconnect,
    /// The receiver's process group is killed while the request is in flight, then
    /// restarted: indefinite.
    Kill,
    /// The receiver's process group is killed right after its acknowledgement is read,
    /// then restarted: the acknowledged decision must survive.
    KillAfterAck,
}

/// One action of a conformance schedule: a step the model knows, or one it cannot see.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// Send delivery `delivery`, with an external fault.
    Deliver {
        /// The delivery number.
        delivery: u32,
        /// What arrival does around it, if anything.
        fault: Option<External>,
    },
    /// Send the card's authority snapshot.
    Reconcile(Sym),
    /// Kill the receiver's process group between steps and start it on the same data:
    /// nothing may change.
    Restart,
}
