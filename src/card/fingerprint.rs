//! A receiver's 64-bit fingerprint, its identity in the model checker's visited set.
//!
//! It is computed once per receiver and kept beside it: a step that leaves the receiver
//! alone (a redelivery of recorded content, a crash before record) shares the allocation,
//! so hashing the next world reads one word instead of walking every card and record. The
//! digest writes a few words per card, record and hold rather than every field through the
//! derived `Hash`. A [`View`] says which sound reductions the fingerprint makes: settled
//! records' state decisions merged ([`Receiver::fingerprint`]), and how a paused card got
//! to its pause forgotten when its authority snapshot supersedes every input that names it
//! ([`covered_cards`]); each is argued where it is defined.

use crate::card::fixture::Scenario;
use crate::card::receiver::{Decision, HoldKey, HoldReason, Receiver, Record, Standing};
use crate::card::wire::{Sym, Version};
use foldhash::quality::FixedState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// What a fingerprint leaves out; the same for every world of one model run. It is `Copy`
/// (every world carries one, and a world is cloned for every step the checker takes): the
/// covered cards are an interned slice, so copying a view touches no reference count that
/// the checker's threads would share.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct View {
    /// Settled records contribute their content, not their state decision.
    merge_settled: bool,
    /// Cards (sorted) whose path to a pause is forgotten while they are paused.
    covered: &'static [Sym],
    /// The view's own hash, kept beside cached fingerprints; never 0.
    tag: u64,
}

impl View {
    /// The whole state: no reduction.
    pub fn full() -> View {
        View::new(false, Vec::new())
    }

    /// A view merging settled decisions or not, and forgetting how the `covered` cards got
    /// to a pause (only with `merge_settled`, which [`covered_cards`] leans on).
    pub fn new(merge_settled: bool, mut covered: Vec<Sym>) -> View {
        assert!(
            merge_settled || covered.is_empty(),
            "merging paused paths needs merged settled decisions"
        );
        covered.sort();
        covered.dedup();
        let tag = FixedState::with_seed(0x7669_6577)
            .hash_one((merge_settled, &covered))
            .max(1);
        let covered = intern(covered);
        View {
            merge_settled,
            covered,
            tag,
        }
    }

    /// Whether settled records contribute their content and not their state decision.
    pub fn merges_settled(&self) -> bool {
        self.merge_settled
    }

    /// The cards whose path to a pause is forgotten while they are paused.
    pub fn covered(&self) -> &[Sym] {
        self.covered
    }

    fn is_covered(&self, card: Option<Sym>) -> bool {
        card.is_some_and(|card| self.covered().binary_search(&card).is_ok())
    }
}

/// The one `'static` copy of a sorted set of covered cards. A process keeps each distinct
/// set once, for its lifetime (a set is a few card ids, and a process checks a handful of
/// fixtures), so views can be copied freely.
fn intern(covered: Vec<Sym>) -> &'static [Sym] {
    static SETS: Mutex<Vec<&'static [Sym]>> = Mutex::new(Vec::new());
    if covered.is_empty() {
        return &[];
    }
    let mut sets = SETS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(kept) = sets.iter().find(|kept| kept[..] == covered[..]) {
        return kept;
    }
    let kept: &'static [Sym] = Box::leak(covered.into_boxed_slice());
    sets.push(kept);
    kept
}

/// The cards of `scenario` whose authority snapshot supersedes every input that names them:
/// every such input is a supported `card.snapshot` with a valid version and an object
/// state, older than the snapshot or equal to it (same version, same state), and so is the
/// initial card. Under the SPEC policy, with no expiry and with settled decisions merged,
/// how such a card got to a pause does not matter while it is paused, and the model's
/// fingerprint forgets it: the card's version and state, which of the records that name it
/// are held for the pause rather than settled or resolved, and its holds of that kind.
///
/// Why that is sound. While the card is paused, every new input naming it is held or is a
/// conflict, whatever the card's version; its authority is open (never behind), so no
/// terminal world has it paused and convergence is never judged there; and reconciling it
/// replaces or confirms it with the snapshot, whatever it was. Settlement then evaluates
/// each held input again against the snapshot, which is at least as new as the input: the
/// answer is stale or equal, a settled decision, and nothing pauses the card again, so the
/// order of its holds cannot matter either; conflicted ids are resolved, inputs without an
/// event id superseded. After that the card is the snapshot in every such world, and its
/// records differ at most in being settled (any decision) or resolved, which no policy
/// step, no property and no later settlement tells apart for an input that names an
/// existing card and could be decided (resolved and settled are both not unresolved inputs,
/// and a redelivery of either is a duplicate), so the fingerprint takes a covered card's
/// settled and resolved records as one, paused or not. Expiry would tell them apart (it forgets
/// settled ids but never waiting ones), so the reduction is off when the model may expire
/// records, and mutant policies (which may read a paused card or re-evaluate in order)
/// keep the whole state.
pub fn covered_cards(scenario: &Scenario) -> Vec<Sym> {
    scenario
        .authority
        .iter()
        .filter(|snapshot| {
            let covers = |version: u64, state| {
                version < snapshot.version
                    || (version == snapshot.version && state == snapshot.state)
            };
            let card = snapshot.object_id;
            let initial_covered = scenario
                .initial
                .iter()
                .filter(|(id, _)| *id == card)
                .all(|(_, initial)| covers(initial.version, initial.state));
            let inputs_covered = scenario
                .deliveries
                .iter()
                .map(|delivery| &delivery.event)
                .filter(|event| event.object_id == Some(card))
                .all(
                    |event| match (event.supported, event.version, event.state) {
                        (true, Version::Valid(version), Some(state)) => covers(version, state),
                        _ => false,
                    },
                );
            initial_covered && inputs_covered
        })
        .map(|snapshot| snapshot.object_id)
        .collect()
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
    /// derived from its decision; the digest asserts it in debug builds). Re-evaluation
    /// and settlement read held records only (a settled record is never held), expiry and
    /// unresolved inputs read standings, convergence reads cards, holds and standings, and
    /// first-record-immutable compares contents and receive times. So
    /// from two receivers that differ only in settled decisions, every step leads to two
    /// receivers that again differ only there, with the same properties broken; a trace to
    /// a violation in one is a trace to a violation in the other, of the same length. A
    /// change that makes any of this read a settled decision must drop the merge.
    ///
    /// The view may also forget how some paused cards got to their pause
    /// ([`covered_cards`] says which, and why).
    pub fn fingerprint(&self, view: &View) -> u64 {
        let cache = self.fingerprint_cache();
        // All worlds of a run share one view; the tag guards against any other use.
        if cache.tag.load(Ordering::Acquire) == view.tag {
            let kept = cache.fingerprint.load(Ordering::Relaxed);
            debug_assert_eq!(kept, self.digest(view), "a kept fingerprint is stale");
            return kept;
        }
        let digest = self.digest(view);
        cache.fingerprint.store(digest, Ordering::Relaxed);
        cache.tag.store(view.tag, Ordering::Release);
        digest
    }

    /// Hashes the receiver, a few words per card, record and hold; never 0.
    fn digest(&self, view: &View) -> u64 {
        let merge_settled = view.merge_settled;
        // A covered card that is paused: how it got there is left out.
        let forgotten = |card: Option<Sym>| {
            view.is_covered(card)
                && card
                    .and_then(|card| self.cards().get(&card))
                    .is_some_and(|card| card.paused)
        };
        // A record of a covered card that reconciling it can only settle or has resolved.
        let merged_path = |record: &Record| {
            let card = record.event.object_id;
            view.is_covered(card)
                && match record.standing {
                    Standing::Settled => true,
                    // Resolved is not an unresolved input only when the card exists.
                    Standing::Resolved => card.is_some_and(|card| self.cards().contains_key(&card)),
                    Standing::Held => {
                        record.decision == Decision::Held(HoldReason::Paused) && {
                            debug_assert!(forgotten(card), "held for a pause, card paused");
                            forgotten(card)
                        }
                    }
                    Standing::Superseded => false,
                }
        };
        // A fixed seed: fingerprints, hence traces, are the same in every run.
        const HASHER: FixedState = FixedState::with_seed(0x7265_6365_6976_6572);
        let mut state = HASHER.build_hasher();
        state.write_usize(self.cards().len());
        for (id, card) in self.cards().iter() {
            if forgotten(Some(id)) {
                state.write_u64(u64::from(id.0) | u64::from(u32::MAX) << 32);
                continue;
            }
            state.write_u64(u64::from(id.0) | u64::from(card.state.0) << 32);
            state.write_u64(card.version);
            let stamp = self.stamp(id);
            state.write_u64(u64::from(card.paused) | u64::from(stamp.is_some()) << 1);
            state.write_i64(stamp.unwrap_or(0));
        }
        let record = |state: &mut foldhash::quality::FoldHasher, record: &Record| {
            debug_assert_eq!(
                record.standing == Standing::Settled,
                !record.decision.is_hold(),
                "a record is settled exactly when its decision is a state decision"
            );
            let merged = merged_path(record);
            let decision = if merged || (merge_settled && record.standing == Standing::Settled) {
                0
            } else {
                decision_code(record.decision)
            };
            let standing = if merged {
                standing_code(Standing::Settled)
            } else {
                standing_code(record.standing)
            };
            state.write_u64(
                u64::from(record.event.content.0)
                    | u64::from(standing) << 32
                    | u64::from(decision) << 40,
            );
            if !record.event.canonical_bytes() {
                // A record of a re-encoded copy (one recorded after expiry forgot the id):
                // a wrong receiver may tell it apart by its bytes.
                state.write_u32(record.event.bytes.0);
            }
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
        // A paused covered card's bucket that holds only inputs held for the pause is no
        // bucket at all: either way reconciling the card leaves no hold of it, and the
        // records are merged above (without this, a world where reconciling another card
        // emptied the bucket, and so removed it, and one where such holds remain in it
        // were two states that behave alike). The holds come last, so the count of buckets
        // written goes after them (no pass ahead to count them): each bucket is written
        // whole, its layout fixed by the cards already hashed.
        let mut buckets = 0usize;
        for (bucket, keys) in self.holds().iter() {
            let word = |key: &HoldKey| match *key {
                HoldKey::Record { event, index } => {
                    (0u8, u64::from(event.0) | u64::from(index) << 32)
                }
                HoldKey::Delivery(number) => (1u8, u64::from(number)),
            };
            if forgotten(bucket) {
                // The other holds as a set, without those held for the pause.
                let (count, sum) = keys
                    .iter()
                    .filter(|&&key| !merged_path(self.record(key)))
                    .fold((0u64, 0u64), |(count, sum), key| {
                        (count + 1, sum.wrapping_add(KEY_HASHER.hash_one(word(key))))
                    });
                if count == 0 {
                    continue;
                }
                buckets += 1;
                state.write_u64(bucket.map_or(u64::MAX, |card| u64::from(card.0)));
                state.write_u64(count);
                state.write_u64(sum);
                continue;
            }
            buckets += 1;
            state.write_u64(bucket.map_or(u64::MAX, |card| u64::from(card.0)));
            state.write_usize(keys.len());
            for key in keys {
                let (tag, word) = word(key);
                state.write_u8(tag);
                state.write_u64(word);
            }
        }
        state.write_usize(buckets);
        state.finish().max(1)
    }
}

/// Hashes single hold keys of paused covered cards.
const KEY_HASHER: FixedState = FixedState::with_seed(0x686f_6c64);

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
