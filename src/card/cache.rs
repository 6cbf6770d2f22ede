//! The fingerprint a receiver keeps of itself for the model checker's visited set, beside
//! it until it changes (filled by [`crate::card::fingerprint`]).

use std::hash::Hasher;
use std::sync::atomic::AtomicU64;

/// The fingerprint of one receiver value and the view it was taken in (tag 0: none yet).
/// A clone starts empty, and every change to the receiver empties it, so a kept
/// fingerprint is always its receiver's. It takes no part in comparisons.
#[derive(Default)]
pub struct FingerprintCache {
    pub(crate) tag: AtomicU64,
    pub(crate) fingerprint: AtomicU64,
}

impl FingerprintCache {
    /// Forgets the fingerprint: the receiver is about to change.
    pub(crate) fn clear(&mut self) {
        *self.tag.get_mut() = 0;
        *self.fingerprint.get_mut() = 0;
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
