//! The cleaner's key → latest offset map, in a fixed amount of memory (Kafka's
//! `SkimpyOffsetMap`, sized by `log.cleaner.dedupe.buffer.size`).
//!
//! A key is stored as its 128-bit XXH3 hash, beside the offset: 24 bytes a slot, as Kafka's
//! MD5 entries. Two keys whose hashes collide count as one key, so the cleaner may drop the
//! older of them: with 128 bits that takes about 2^64 keys in one map, the same bet Kafka makes.
//!
//! Slots are probed by double hashing over a prime number of slots, which visits every slot
//! once: an absent key costs about `1 / (1 - load)` probes (10 at the load the cleaner stops
//! filling at), where Kafka's linear tail costs far more.
//!
//! Kafka allocates the whole buffer up front. Here the table starts at [`INITIAL_SLOTS`] and
//! doubles (rehashing the stored hashes) whenever it is [`GROW_AT`] full, up to the largest
//! prime number of slots the configured bytes hold; each cleaning starts again from the initial
//! table. So memory follows the keys of the dirty section, and never exceeds the bound except
//! while the last doubling copies the table, when the old half-size table is still held (1.5 ×
//! the bound at most, for that moment). Capacity, and so the number of cleaning passes, is
//! Kafka's: the bound's slots at the load factor.

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

/// The table a map starts each cleaning with (a prime number; 1.5 MiB).
pub const INITIAL_SLOTS: usize = 65_521;

/// The share of the table in use at which it doubles (below the bound).
pub const GROW_AT: f64 = 0.5;

pub struct OffsetMap {
    slots: Vec<Slot>,
    /// The most slots the configured memory holds: the table's bound.
    max_slots: usize,
    /// Keys mapped (occupied slots).
    entries: usize,
    /// The last offset the map covers: the cleaner keeps every record after it.
    latest_offset: i64,
    lookups: u64,
    probes: u64,
}

/// A key's 128-bit hash, as the map stores it: computed once, then looked up or touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash(u64, u64);

impl KeyHash {
    pub fn of(key: &[u8]) -> KeyHash {
        let h = XxHash3_128::oneshot(key);
        let (high, low) = ((h >> 64) as u64, h as u64);
        if high == 0 && low == 0 {
            KeyHash(0, 1)
        } else {
            KeyHash(high, low)
        }
    }
}

/// `x` scaled to `[0, n)` (Lemire's multiply-shift: no division).
fn scale(x: u64, n: u64) -> u64 {
    ((x as u128 * n as u128) >> 64) as u64
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
    /// A map of at most `memory` bytes, starting small (see the module's note).
    /// `memory` must hold at least two slots (48 bytes); the config check refuses less.
    pub fn new(memory: usize) -> OffsetMap {
        let max_slots = slots_for(memory);
        OffsetMap {
            slots: vec![EMPTY; max_slots.min(INITIAL_SLOTS)],
            max_slots,
            entries: 0,
            latest_offset: -1,
            lookups: 0,
            probes: 0,
        }
    }

    /// The slots the map may grow to: its capacity at a load factor of 1.
    pub fn slots(&self) -> usize {
        self.max_slots
    }

    /// The slots allocated now.
    pub fn allocated_slots(&self) -> usize {
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

    /// Share of the map's capacity in use (Kafka's buffer utilization).
    pub fn utilization(&self) -> f64 {
        self.entries as f64 / self.max_slots as f64
    }

    /// Doubles the table (capped at the bound), placing every stored hash again.
    fn grow(&mut self) {
        let target = (self.slots.len() * 2).min(self.max_slots);
        let mut n = target;
        while !is_prime(n) {
            n -= 1;
        }
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; n]);
        for slot in old.iter().filter(|s| !is_empty(s)) {
            let at = self
                .find(KeyHash(slot[0], slot[1]))
                .expect("a larger table has room for every key of the smaller");
            self.slots[at] = *slot;
        }
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
    fn find(&mut self, KeyHash(high, low): KeyHash) -> Option<usize> {
        let n = self.slots.len() as u64;
        let mut at = scale(high, n);
        // In [1, n): with n prime, the probe sequence visits every slot once.
        let step = 1 + scale(low, n - 1);
        self.lookups += 1;
        for _ in 0..n {
            self.probes += 1;
            let slot = &self.slots[at as usize];
            if is_empty(slot) || (slot[0] == high && slot[1] == low) {
                return Some(at as usize);
            }
            at += step;
            if at >= n {
                at -= n;
            }
        }
        None
    }

    /// Reads the first slot each of `hashes` probes, all at once, so that the lookups that
    /// follow find them in the cache: a table larger than the cache costs one miss per
    /// lookup, and independent loads overlap where a lookup's dependent probes cannot.
    pub fn touch(&self, hashes: &[KeyHash]) {
        let n = self.slots.len() as u64;
        let mut seen = 0u64;
        for h in hashes {
            seen ^= self.slots[scale(h.0, n) as usize][2];
        }
        std::hint::black_box(seen);
    }

    /// Maps `key` to `offset`. Returns false, changing nothing, when the key is new and the
    /// map is full (the caller stops filling well before: Kafka's load factor).
    pub fn put(&mut self, key: &[u8], offset: i64) -> bool {
        self.put_hash(KeyHash::of(key), offset)
    }

    /// [`Self::put`] of a key hashed already.
    pub fn put_hash(&mut self, h: KeyHash, offset: i64) -> bool {
        if self.slots.len() < self.max_slots
            && (self.entries + 1) as f64 > self.slots.len() as f64 * GROW_AT
        {
            self.grow();
        }
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
        self.get_hash(KeyHash::of(key))
    }

    /// [`Self::get`] of a key hashed already.
    pub fn get_hash(&mut self, h: KeyHash) -> i64 {
        match self.find(h) {
            Some(at) if !is_empty(&self.slots[at]) => self.slots[at][2] as i64,
            _ => -1,
        }
    }

    /// Empties the map, giving its memory back (a fresh zeroed table of the initial size).
    pub fn clear(&mut self) {
        self.slots = Vec::new();
        self.slots = vec![EMPTY; self.max_slots.min(INITIAL_SLOTS)];
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
    fn the_table_grows_with_the_keys_up_to_its_bound_and_clear_shrinks_it() {
        let bound = 24 * 1_000_003;
        let mut map = OffsetMap::new(bound);
        assert_eq!(map.slots(), slots_for(bound));
        assert_eq!(map.allocated_slots(), INITIAL_SLOTS);
        for i in 0..100_000i64 {
            assert!(map.put(format!("k{i}").as_bytes(), i));
        }
        let grown = map.allocated_slots();
        assert!(grown > 200_000 && grown < 600_000, "{grown}");
        for i in 0..100_000i64 {
            assert_eq!(map.get(format!("k{i}").as_bytes()), i);
        }
        // Up to the bound and no further: capacity is the bound's, as in Kafka.
        let max_keys = (map.slots() as f64 * 0.9) as i64;
        for i in 100_000..max_keys {
            assert!(map.put(format!("k{i}").as_bytes(), i));
        }
        assert_eq!(map.allocated_slots(), map.slots());
        assert_eq!(map.get(b"k7"), 7);
        map.clear();
        assert_eq!(map.allocated_slots(), INITIAL_SLOTS);
        assert_eq!(map.get(b"k7"), -1);
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
