//! An identity's changed payloads, kept out of line: one pointer in the identity's slot,
//! null while the id has none (nearly always), so an event-id slot stays small.

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};

/// A list that is one word wide while empty; it reads as a slice (`len`, indexing,
/// iteration) and compares, orders and hashes exactly as a `Vec` of the same items would.
// The box is the point: a `Vec` is three words in every slot, a box of one is one.
#[allow(clippy::box_collection)]
#[derive(Clone)]
pub struct Variants<T>(Option<Box<Vec<T>>>);

impl<T> Variants<T> {
    /// No variants.
    pub const fn new() -> Self {
        Variants(None)
    }

    /// Appends one at the end.
    pub fn push(&mut self, item: T) {
        self.0.get_or_insert_with(Box::default).push(item);
    }
}

impl<T> Default for Variants<T> {
    fn default() -> Self {
        Variants::new()
    }
}

impl<T> Deref for Variants<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }
}

impl<T> DerefMut for Variants<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.0.as_deref_mut().map_or(&mut [], Vec::as_mut_slice)
    }
}

impl<T> From<Vec<T>> for Variants<T> {
    fn from(items: Vec<T>) -> Self {
        Variants((!items.is_empty()).then(|| Box::new(items)))
    }
}

impl<T> FromIterator<T> for Variants<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        Variants::from(items.into_iter().collect::<Vec<T>>())
    }
}

impl<'a, T> IntoIterator for &'a Variants<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T: PartialEq> PartialEq for Variants<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Eq> Eq for Variants<T> {}

impl<T: PartialOrd> PartialOrd for Variants<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        (**self).partial_cmp(&**other)
    }
}

impl<T: Ord> Ord for Variants<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (**self).cmp(&**other)
    }
}

impl<T: Hash> Hash for Variants<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Variants<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_compares_and_hashes_as_a_vec() {
        let mut variants = Variants::new();
        assert_eq!(
            std::mem::size_of_val(&variants),
            std::mem::size_of::<usize>()
        );
        assert!(variants.is_empty());
        variants.push(3);
        variants.push(5);
        let vec = vec![3, 5];
        assert_eq!(&*variants, vec.as_slice());
        assert_eq!(variants, Variants::from(vec.clone()));
        assert!(Variants::from(vec![3]) < variants);
        let digest = |value: &dyn Fn(&mut std::hash::DefaultHasher)| {
            let mut state = std::hash::DefaultHasher::new();
            value(&mut state);
            state.finish()
        };
        assert_eq!(digest(&|s| variants.hash(s)), digest(&|s| vec.hash(s)));
        assert_eq!(format!("{variants:?}"), format!("{vec:?}"));
        assert_eq!(Variants::<u8>::from(Vec::new()), Variants::new());
    }
}
