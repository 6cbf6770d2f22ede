//! A receiver's 64-bit fingerprint, its identity in the model checker's visited set.
//!
//! It is computed once per receiver and kept beside it: a step that leaves the receiver
//! alone (a redelivery of recorded content, a crash before record) shares the allocation,
//! so hashing the next world reads one word instead of walking every card and record. The
//! digest writes a few words per card, record and hold rather than every field through the
//! derived `Hash`. With `merge_settled` it leaves out settled records' state decisions: see
//! [`Receiver::fingerprint`] for why that is sound.

use crate::card::receiver::{Decision, HoldKey, Receiver, Record, Standing};
use foldhash::quality::FixedState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// The fingerprints of one receiver value, with and without merged settled decisions
/// (0: not computed yet). A clone starts empty, and every change to the receiver empties
/// it, so a kept fingerprint is always its receiver's. It takes no part in comparisons.
#[derive(Default)]
pub struct FingerprintCache([AtomicU64; 2]);

impl FingerprintCache {
    /// Forgets both fingerprints: the receiver is about to change.
    pub(crate) fn clear(&mut self) {
        for slot in &mut self.0 {
            *slot.get_mut() = 0;
        }
    }
}

impl Clone for FingerprintCache {
    fn clone(&self) -> Self {
        // A clone is about to be changed (that is why receivers are cloned).
        FingerprintCache::default()
    }
}

impl PartialEq for FingerprintCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for FingerprintCache {}

impl PartialOrd for FingerprintCache {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for FingerprintCache {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl std::hash::Hash for FingerprintCache {
    fn hash<H: Hasher>(&self, _: &mut H) {}
}

impl std::fmt::Debug for FingerprintCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FingerprintCache")
    }
}

impl Receiver {
    /// The receiver's identity as the model checker sees it: equal receivers have equal
    /// fingerprints. Without `merge_settled` it covers the whole state (receive times
    /// aside: nothing the checker explores reads them, see `Hash for Record`). With it, a
    /// settled record (standing [`Standing::Settled`]) contributes its content but not
    /// which state decision it got (applied, stale or equal), so receivers that differ only
    /// there are one state: the same contents reached in different orders (v3 then v2, or
    /// v2 then v3) leave different decisions and nothing else.
    ///
    /// Why merging is sound (the model key `merge_settled`, on by default; `tests/model.rs`
    /// checks verdicts, violated properties and shortest trace lengths with and without it,
    /// under SPEC and every mutant): no decision function, policy or property reads a
    /// settled record's state decision except to answer a redelivery of that same content,
    /// and that answer only fixes the acknowledgement's kind, which no state keeps and which
    /// ack-implies-recorded compares with the decision recorded for the delivered content in
    /// the same receiver. (Under `id-only-dedupe` the answer is the first record's, while the
    /// delivered content may be another; but that mutant never records a second content of
    /// an id, so such a delivery is unrecorded and breaks the property in both worlds alike.
    /// A mutant that recorded variants and answered by id would need this argued again.)
    /// Settled means applied, stale or equal under every policy (each record's standing is
    /// derived from its decision; the digest asserts it in debug builds). Re-evaluation and settlement read held records only (a settled record is never
    /// held), expiry and unresolved inputs read standings, convergence reads cards, holds
    /// and standings, and first-record-immutable compares contents and receive times. So
    /// from two receivers that differ only in settled decisions, every step leads to two
    /// receivers that again differ only there, with the same properties broken; a trace to
    /// a violation in one is a trace to a violation in the other, of the same length. A
    /// change that makes any of this read a settled decision must drop the merge.
    pub fn fingerprint(&self, merge_settled: bool) -> u64 {
        let slot = &self.fingerprint_cache().0[usize::from(merge_settled)];
        let kept = slot.load(Ordering::Relaxed);
        if kept != 0 {
            debug_assert_eq!(
                kept,
                self.digest(merge_settled),
                "a kept fingerprint is stale"
            );
            return kept;
        }
        let digest = self.digest(merge_settled);
        slot.store(digest, Ordering::Relaxed);
        digest
    }

    /// Hashes the receiver, a few words per card, record and hold; never 0.
    fn digest(&self, merge_settled: bool) -> u64 {
        // A fixed seed: fingerprints, hence traces, are the same in every run.
        const HASHER: FixedState = FixedState::with_seed(0x7265_6365_6976_6572);
        let mut state = HASHER.build_hasher();
        state.write_usize(self.cards().len());
        for (id, card) in self.cards().iter() {
            state.write_u64(u64::from(id.0) | u64::from(card.state.0) << 32);
            state.write_u64(card.version);
            state.write_u64(u64::from(card.paused) | u64::from(card.stamp.is_some()) << 1);
            state.write_i64(card.stamp.unwrap_or(0));
        }
        let record = |state: &mut foldhash::quality::FoldHasher, record: &Record| {
            debug_assert_eq!(
                record.standing == Standing::Settled,
                !record.decision.is_hold(),
                "a record is settled exactly when its decision is a state decision"
            );
            let decision = if merge_settled && record.standing == Standing::Settled {
                0
            } else {
                decision_code(record.decision)
            };
            state.write_u64(
                u64::from(record.event.content.0)
                    | u64::from(standing_code(record.standing)) << 32
                    | u64::from(decision) << 40,
            );
        };
        state.write_usize(self.identities().len());
        for (id, identity) in self.identities().iter() {
            state.write_u64(u64::from(id.0) | (identity.variants.len() as u64) << 32);
            for entry in identity.records() {
                record(&mut state, entry);
            }
        }
        state.write_usize(self.anonymous().len());
        for (&number, entry) in self.anonymous() {
            state.write_u32(number);
            record(&mut state, entry);
        }
        state.write_usize(self.holds().len());
        for (bucket, keys) in self.holds() {
            state.write_u64(bucket.map_or(u64::MAX, |card| u64::from(card.0)));
            state.write_usize(keys.len());
            for key in keys {
                let (tag, word) = match *key {
                    HoldKey::Record { event, index } => {
                        (0, u64::from(event.0) | u64::from(index) << 32)
                    }
                    HoldKey::Delivery(number) => (1, u64::from(number)),
                };
                state.write_u8(tag);
                state.write_u64(word);
            }
        }
        state.finish().max(1)
    }
}

/// A decision as a small non-zero number (0 stands for "a settled decision, merged").
fn decision_code(decision: Decision) -> u8 {
    let index = Decision::ALL
        .iter()
        .position(|&kind| kind == decision)
        .expect("every decision is listed");
    index as u8 + 1
}

fn standing_code(standing: Standing) -> u8 {
    match standing {
        Standing::Settled => 0,
        Standing::Held => 1,
        Standing::Resolved => 2,
        Standing::Superseded => 3,
    }
}
