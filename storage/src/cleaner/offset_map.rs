//! The cleaner's key → latest offset map, in a fixed amount of memory (Kafka's
//! `SkimpyOffsetMap`, sized by `log.cleaner.dedupe.buffer.size`).
//!
//! A key is stored as its 128-bit XXH3 hash, beside the offset: 24 bytes a slot, as Kafka's
//! MD5 entries. Two keys whose hashes collide count as one key, so the cleaner may drop the
//! older of them: with 128 bits that takes about 2^64 keys in one map, the same bet Kafka makes.
//!
//! Slots are probed by double hashing over a prime number of slots, which visits every slot
//! once: an absent key costs about `1 / (1 - load)` probes (10 at the load the cleaner stops
//! filling at), where Kafka's linear tail costs far more. The table is allocated zeroed and
//! dropped after each cleaning, so the pages a small log never hashes into are never touched:
//! memory in use follows the keys mapped, up to the configured bound.

use twox_hash::XxHash3_128;

/// Bytes a slot takes: the key's 16-byte hash and its 8-byte offset (Kafka's MD5 + offset).
pub const BYTES_PER_ENTRY: usize = 24;

/// One slot: the key hash's two halves and the offset. All zero is an empty slot (a key whose
/// hash is zero is stored with its low half set to 1: one more collision among 2^128). A plain
/// array so that `vec![EMPTY; n]` is one zeroed allocation whose pages stay untouched until used.
type Slot = [u64; 3];
const EMPTY: Slot = [0; 3];

fn is_empty(slot: &Slot) -> bool {
    slot[0] == 0 && slot[1] == 0
}

pub struct OffsetMap {
    slots: Vec<Slot>,
    /// Keys mapped (occupied slots).
    entries: usize,
    /// The last offset the map covers: the cleaner keeps every record after it.
    latest_offset: i64,
    lookups: u64,
    probes: u64,
}

fn hash(key: &[u8]) -> (u64, u64) {
    let h = XxHash3_128::oneshot(key);
    let (high, low) = ((h >> 64) as u64, h as u64);
    if high == 0 && low == 0 {
        (0, 1)
    } else {
        (high, low)
    }
}

fn is_prime(n: usize) -> bool {
    if n < 4 {
        return n >= 2;
    }
    if n % 2 == 0 {
        return false;
    }
    let mut d = 3;
    while d * d <= n {
        if n % d == 0 {
            return false;
        }
        d += 2;
    }
    true
}

/// The largest prime number of slots that fits in `memory` bytes (at least 2 slots' worth).
pub fn slots_for(memory: usize) -> usize {
    let mut n = (memory / BYTES_PER_ENTRY).max(2);
    while !is_prime(n) {
        n -= 1;
    }
    n
}

impl OffsetMap {
    /// A map in at most `memory` bytes; nothing is touched until keys are put.
    /// `memory` must hold at least two slots (48 bytes); the config check refuses less.
    pub fn new(memory: usize) -> OffsetMap {
        OffsetMap {
            slots: vec![EMPTY; slots_for(memory)],
            entries: 0,
            latest_offset: -1,
            lookups: 0,
            probes: 0,
        }
    }

    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Keys mapped.
    pub fn size(&self) -> usize {
        self.entries
    }

    /// The last offset the map covers (-1 when it covers none).
    pub fn latest_offset(&self) -> i64 {
        self.latest_offset
    }

    /// The map covers offsets up to `offset` (batches with no key, offset gaps).
    pub fn update_latest_offset(&mut self, offset: i64) {
        self.latest_offset = offset;
    }

    /// Share of the slots in use.
    pub fn utilization(&self) -> f64 {
        self.entries as f64 / self.slots.len() as f64
    }

    /// Probes past the first per lookup.
    pub fn collision_rate(&self) -> f64 {
        if self.lookups == 0 {
            return 0.0;
        }
        (self.probes - self.lookups) as f64 / self.lookups as f64
    }

    /// The slot holding `hash`, or the empty slot where it would go; `None` only when every
    /// slot is taken by other keys.
    fn find(&mut self, (high, low): (u64, u64)) -> Option<usize> {
        let n = self.slots.len() as u64;
        let start = high % n;
        let step = 1 + low % (n - 1);
        self.lookups += 1;
        let mut at = start;
        for _ in 0..n {
            self.probes += 1;
            let slot = &self.slots[at as usize];
            if is_empty(slot) || (slot[0] == high && slot[1] == low) {
                return Some(at as usize);
            }
            at = (at + step) % n;
        }
        None
    }

    /// Maps `key` to `offset`. Returns false, changing nothing, when the key is new and the
    /// map is full (the caller stops filling well before: Kafka's load factor).
    pub fn put(&mut self, key: &[u8], offset: i64) -> bool {
        let h = hash(key);
        let Some(at) = self.find(h) else {
            return false;
        };
        let slot = &mut self.slots[at];
        if is_empty(slot) {
            self.entries += 1;
            slot[0] = h.0;
            slot[1] = h.1;
        }
        slot[2] = offset as u64;
        self.latest_offset = offset;
        true
    }

    /// The latest offset mapped for `key`, -1 when it is not mapped.
    pub fn get(&mut self, key: &[u8]) -> i64 {
        match self.find(hash(key)) {
            Some(at) if !is_empty(&self.slots[at]) => self.slots[at][2] as i64,
            _ => -1,
        }
    }

    /// Empties the map, giving its pages back (a fresh zeroed allocation of the same size).
    pub fn clear(&mut self) {
        let n = self.slots.len();
        self.slots = Vec::new();
        self.slots = vec![EMPTY; n];
        self.entries = 0;
        self.latest_offset = -1;
        self.lookups = 0;
        self.probes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_the_largest_prime_that_fits() {
        assert_eq!(slots_for(24 * 100), 97);
        assert_eq!(slots_for(24 * 97), 97);
        assert_eq!(slots_for(48), 2);
        assert!(is_prime(slots_for(128 << 20)));
        assert!(slots_for(128 << 20) * BYTES_PER_ENTRY <= 128 << 20);
    }

    #[test]
    fn the_latest_put_wins_and_absent_keys_are_minus_one() {
        let mut map = OffsetMap::new(24 * 1000);
        for i in 0..500i64 {
            assert!(map.put(format!("key-{}", i % 50).as_bytes(), i));
        }
        assert_eq!(map.size(), 50);
        for k in 0..50i64 {
            assert_eq!(map.get(format!("key-{k}").as_bytes()), 450 + k);
        }
        assert_eq!(map.get(b"never"), -1);
        assert_eq!(map.latest_offset(), 499);
        map.clear();
        assert_eq!(map.size(), 0);
        assert_eq!(map.get(b"key-1"), -1);
        assert_eq!(map.latest_offset(), -1);
    }

    #[test]
    fn a_full_map_refuses_new_keys_but_updates_known_ones() {
        let mut map = OffsetMap::new(24 * 7);
        assert_eq!(map.slots(), 7);
        for i in 0..7i64 {
            assert!(map.put(&i.to_be_bytes(), i));
        }
        assert!(!map.put(b"one too many", 8));
        assert!(map.put(&3i64.to_be_bytes(), 9));
        assert_eq!(map.get(&3i64.to_be_bytes()), 9);
        assert_eq!(map.get(b"one too many"), -1);
        for i in (0..7i64).filter(|&i| i != 3) {
            assert_eq!(map.get(&i.to_be_bytes()), i);
        }
    }

    #[test]
    fn probes_stay_few_at_the_cleaners_load() {
        let mut map = OffsetMap::new(24 * 10_007);
        let keys = (map.slots() as f64 * 0.9) as i64;
        for i in 0..keys {
            assert!(map.put(format!("k{i}").as_bytes(), i));
        }
        for i in 0..keys {
            assert_eq!(map.get(format!("k{i}").as_bytes()), i);
        }
        // Double hashing: about 1/(1-0.9) probes for a miss, far fewer for a hit on average.
        assert!(map.collision_rate() < 3.0, "{}", map.collision_rate());
    }
}
