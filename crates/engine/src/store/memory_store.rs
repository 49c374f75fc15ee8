use std::collections::BTreeMap;

use parking_lot::RwLock;

use super::{Batch, Scan, Space, Store, StoreError, StoreView};

type Tree = BTreeMap<Vec<u8>, Vec<u8>>;

/// Both spaces in RAM behind one lock, so a batch is applied atomically.
#[derive(Default)]
pub struct MemoryStore {
    spaces: RwLock<[Tree; 2]>,
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
        visit_all(&self.spaces.read()[index(space)], start, end, visit);
        Ok(())
    }

    fn last_key(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(last_key_of(&self.spaces.read()[index(space)], start, end))
    }
}

impl Store for MemoryStore {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.spaces.read()[index(space)].get(key).cloned())
    }

    fn write(&self, batch: Batch) -> Result<(), StoreError> {
        let mut spaces = self.spaces.write();
        for (space, key, value) in batch.into_items() {
            let tree = &mut spaces[index(space)];
            match value {
                Some(value) => tree.insert(key, value),
                None => tree.remove(&key),
            };
        }
        Ok(())
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
            spaces: self.spaces.read().clone(),
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
