//! Bounded tables: a slab of entries with a capacity fixed at start.
//!
//! The HCA's contexts (QPC, CQC, MPT, ...) live in these; an index is the
//! hardware "handle" of the object. Insertion fails when the table is
//! full: nothing grows past the configured size.

use crate::handles::TableIndex;
use core::marker::PhantomData;
use slab::Slab;

/// A table with at most `capacity` live entries, keyed by `K` (a typed
/// handle, or a bare `usize`).
#[derive(Debug)]
pub struct Table<T, K = usize> {
    slots: Slab<T>,
    capacity: usize,
    key: PhantomData<K>,
}

/// The table has no free slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFull;

impl<T, K: TableIndex> Table<T, K> {
    /// An empty table for up to `capacity` entries. Memory for entries is
    /// taken as they are inserted, never beyond `capacity`.
    pub fn new(capacity: usize) -> Table<T, K> {
        Table { slots: Slab::new(), capacity, key: PhantomData }
    }

    /// Inserts an entry built from its index.
    pub fn insert_with(&mut self, make: impl FnOnce(K) -> T) -> Result<K, TableFull> {
        if self.slots.len() >= self.capacity {
            return Err(TableFull);
        }
        let entry = self.slots.vacant_entry();
        let index = K::from_slot(entry.key());
        entry.insert(make(index));
        Ok(index)
    }

    /// The entry at `index`.
    pub fn get(&self, index: K) -> Option<&T> {
        self.slots.get(index.slot())
    }

    /// The entry at `index`, mutably.
    pub fn get_mut(&mut self, index: K) -> Option<&mut T> {
        self.slots.get_mut(index.slot())
    }

    /// Removes and returns the entry at `index`.
    pub fn remove(&mut self, index: K) -> Option<T> {
        self.slots.try_remove(index.slot())
    }

    /// Live entries.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there is no live entry.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Live entries in index order.
    pub fn iter(&self) -> impl Iterator<Item = (K, &T)> {
        self.slots.iter().map(|(slot, entry)| (K::from_slot(slot), entry))
    }

    /// Live entries in index order, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (K, &mut T)> {
        self.slots.iter_mut().map(|(slot, entry)| (K::from_slot(slot), entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_a_hard_bound_and_slots_are_reused() {
        let mut t: Table<usize> = Table::new(2);
        let a = t.insert_with(|i| i * 10).unwrap();
        let b = t.insert_with(|i| i * 10).unwrap();
        assert_eq!(t.insert_with(|i| i), Err(TableFull));
        assert_eq!(t.get(b), Some(&(b * 10)));
        assert_eq!(t.remove(a), Some(a * 10));
        assert_eq!(t.remove(a), None);
        assert_eq!(t.insert_with(|i| i).unwrap(), a, "freed slot reused");
        assert_eq!(t.len(), 2);
    }
}
