use std::collections::BTreeMap;

use parking_lot::RwLock;

use super::{Batch, Scan, Space, Store, StoreError, StoreView};

type Tree = BTreeMap<Vec<u8>, Vec<u8>>;

/// Both spaces in RAM behind one lock, so a batch is applied atomically.
#[derive(Default)]
pub struct MemoryStore {
    spaces: RwLock<Spaces>,
}

#[derive(Default)]
struct Spaces {
    trees: [Tree; 2],
    /// Key and value bytes held, for the memory budget.
    bytes: u64,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }
}

fn index(space: Space) -> usize {
    match space {
        Space::Meta => 0,
        Space::Data => 1,
    }
}

impl StoreView for MemoryStore {
    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan,
    ) -> Result<(), StoreError> {
        visit_all(&self.spaces.read().trees[index(space)], start, end, visit);
        Ok(())
    }

    fn last_key(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(last_key_of(
            &self.spaces.read().trees[index(space)],
            start,
            end,
        ))
    }
}

impl Store for MemoryStore {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.spaces.read().trees[index(space)].get(key).cloned())
    }

    fn write(&self, batch: Batch) -> Result<(), StoreError> {
        let mut spaces = self.spaces.write();
        let Spaces { trees, bytes } = &mut *spaces;
        for (space, key, value) in batch.into_items() {
            let tree = &mut trees[index(space)];
            let key_len = key.len() as u64;
            let added = value
                .as_ref()
                .map_or(0, |value| key_len + value.len() as u64);
            let old = match value {
                Some(value) => tree.insert(key, value.into_vec()),
                None => tree.remove(&key),
            };
            let removed = old.map_or(0, |old| key_len + old.len() as u64);
            *bytes = (*bytes + added).saturating_sub(removed);
        }
        Ok(())
    }

    fn memory_bytes(&self) -> u64 {
        self.spaces.read().bytes
    }

    fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn disk_bytes(&self) -> u64 {
        0
    }

    /// A copy: the memory store serves benchmarks and tests, where a snapshot is rare.
    fn snapshot(&self) -> Box<dyn StoreView> {
        Box::new(MemorySnapshot {
            spaces: self.spaces.read().trees.clone(),
        })
    }
}

struct MemorySnapshot {
    spaces: [Tree; 2],
}

impl StoreView for MemorySnapshot {
    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan,
    ) -> Result<(), StoreError> {
        visit_all(&self.spaces[index(space)], start, end, visit);
        Ok(())
    }

    fn last_key(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(last_key_of(&self.spaces[index(space)], start, end))
    }
}

fn visit_all(tree: &Tree, start: &[u8], end: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan) {
    for (key, value) in tree.range(start.to_vec()..end.to_vec()) {
        if visit(key, value) == Scan::Stop {
            break;
        }
    }
}

fn last_key_of(tree: &Tree, start: &[u8], end: &[u8]) -> Option<Vec<u8>> {
    let last = tree.range(start.to_vec()..end.to_vec()).next_back();
    last.map(|(key, _)| key.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(store: &MemoryStore, space: Space, key: &[u8], value: Option<&[u8]>) {
        let mut batch = Batch::default();
        match value {
            Some(value) => batch.put(space, key.to_vec(), value.to_vec()),
            None => batch.delete(space, key.to_vec()),
        }
        store.write(batch).unwrap();
    }

    #[test]
    fn counts_the_key_and_value_bytes_it_holds() {
        let store = MemoryStore::new();
        write(&store, Space::Meta, b"key", Some(b"12345"));
        write(&store, Space::Data, b"key", Some(b"1"));
        assert_eq!(store.memory_bytes(), 8 + 4);
        write(&store, Space::Meta, b"key", Some(b"12"));
        assert_eq!(store.memory_bytes(), 5 + 4);
        write(&store, Space::Meta, b"key", None);
        write(&store, Space::Meta, b"absent", None);
        assert_eq!(store.memory_bytes(), 4);
    }
}
