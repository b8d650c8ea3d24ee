//! Group-id maps against a `BTreeMap` reference: every value gets one id,
//! for good, distinct values distinct ids, ids are dense from 0 and map
//! back to their values.

use std::collections::BTreeMap;

use quiverdb_storage::block::{Bits, LANES};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

/// Lanes of a block: a dense prefix (the common case, one tight loop) or
/// a random sparse set.
fn random_lanes(rng: &mut StdRng) -> Bits {
    match rng.random_range(0..3) {
        0 => Bits::first(rng.random_range(0..=LANES)),
        1 => Bits::first(LANES),
        _ => {
            let mut b = Bits::EMPTY;
            (0..LANES).filter(|_| rng.random_bool(0.3)).for_each(|l| b.set(l));
            b
        }
    }
}

/// What a map assigned so far: value → id, and id → value.
struct Reference<V> {
    ids: BTreeMap<V, u32>,
    values: BTreeMap<u32, V>,
}

impl<V: Ord + Clone + std::fmt::Debug> Reference<V> {
    fn new() -> Self {
        Self { ids: BTreeMap::new(), values: BTreeMap::new() }
    }

    /// Checks that `id` is the id the map gave `value` before, or, for a
    /// value not seen yet, an id no other value has.
    fn record(&mut self, value: V, id: u32) {
        match self.ids.get(&value) {
            Some(&old) => assert_eq!(id, old, "{value:?} changed its id"),
            None => {
                if let Some(other) = self.values.get(&id) {
                    panic!("{value:?} got the id {id} of {other:?}");
                }
                self.ids.insert(value.clone(), id);
                self.values.insert(id, value);
            }
        }
    }

    /// The values by id, checking that the ids are `0..n`.
    fn by_id(&self) -> Vec<V> {
        assert!(self.values.keys().copied().eq(0..self.values.len() as u32), "ids are dense from 0");
        self.values.values().cloned().collect()
    }
}

/// A value around the window (inside, just outside on either side), far
/// away, or extreme.
fn int_value(rng: &mut StdRng, base: i64) -> i64 {
    let window = DENSE_WINDOW as i64;
    match rng.random_range(0..10) {
        0..=5 => base.wrapping_add(rng.random_range(0..window)),
        6 => base.wrapping_add(window + rng.random_range(0..50)),
        7 => base.wrapping_sub(rng.random_range(1..50)),
        8 => rng.random(),
        _ => [i64::MIN, i64::MAX, 0, -1, base, base.wrapping_add(window - 1), base.wrapping_add(window)]
            [rng.random_range(0..7)],
    }
}

#[test]
fn int_map_ids_agree_with_a_btreemap() {
    for seed in 0..4 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut map = IntMap::default();
        let mut seen = Reference::new();
        let base = [0, -5_000, i64::MIN + 10, i64::MAX - DENSE_WINDOW as i64][seed as usize];
        for block in 0..40 {
            let mut x = [0i64; LANES];
            x.iter_mut().for_each(|v| *v = int_value(&mut rng, base));
            let lanes = random_lanes(&mut rng);
            if block == 0 {
                map.init_window(base);
            }
            assert!(map.has_window());
            let mut out = [u32::MAX - 1; LANES];
            if rng.random_bool(0.8) {
                map.ids(&x, &lanes, &mut out);
            } else {
                lanes.for_each_one(|l| out[l] = map.id(x[l]));
            }
            for (l, &id) in out.iter().enumerate() {
                if lanes.get(l) {
                    seen.record(x[l], id);
                } else {
                    assert_eq!(id, u32::MAX - 1, "lane {l} is not selected and keeps its value");
                }
            }
        }
        let values = seen.by_id();
        assert_eq!(map.values, values, "values by id");
        assert!(values.len() > 1000, "{} distinct values", values.len());
        // The NULL key: an id of its own, the same every time.
        let null = map.null_id();
        assert_eq!(null as usize, values.len());
        assert_eq!(map.null_id(), null);
        assert_eq!(map.id(0), seen.ids.get(&0).copied().unwrap_or(null + 1));
    }
}

/// Keys stored in order come in runs, mostly outside the window (a
/// lane repeating the last missed key reuses its id): runs of 1 to 5
/// equal keys, some crossing blocks, some back inside the window, with
/// lanes skipped between them.
#[test]
fn int_map_ids_of_runs_agree_with_a_btreemap() {
    let mut rng = StdRng::seed_from_u64(21);
    let mut map = IntMap::default();
    let mut seen = Reference::new();
    map.init_window(0);
    let (mut key, mut left) = (DENSE_WINDOW as i64, 0);
    for _ in 0..60 {
        let mut x = [0i64; LANES];
        for v in x.iter_mut() {
            if left == 0 {
                key = if rng.random_bool(0.05) { rng.random_range(0..DENSE_WINDOW as i64) } else { key + 3 };
                left = rng.random_range(1..=5);
            }
            *v = key;
            left -= 1;
        }
        let lanes = random_lanes(&mut rng);
        let mut out = [0u32; LANES];
        map.ids(&x, &lanes, &mut out);
        lanes.for_each_one(|l| seen.record(x[l], out[l]));
    }
    assert_eq!(map.values, seen.by_id());
    assert!(map.values.len() > 5_000, "{} distinct values", map.values.len());
}

/// Keys in ascending order twice over (a table appended to twice in the
/// same order), then interleaved with smaller keys: the second pass finds
/// every key of the first (in `ascending`), and keys below the largest
/// one are new only once.
#[test]
fn int_map_ids_of_a_second_ascending_pass_agree_with_a_btreemap() {
    let mut map = IntMap::default();
    let mut seen = Reference::new();
    map.init_window(0);
    let keys: Vec<i64> = (0..20_000).map(|i| DENSE_WINDOW as i64 + i * 7).collect();
    let mut pass = |map: &mut IntMap, keys: &[i64]| {
        for chunk in keys.chunks(LANES) {
            let mut x = [0i64; LANES];
            x[..chunk.len()].copy_from_slice(chunk);
            let lanes = Bits::first(chunk.len());
            let mut out = [0u32; LANES];
            map.ids(&x, &lanes, &mut out);
            lanes.for_each_one(|l| seen.record(x[l], out[l]));
        }
    };
    pass(&mut map, &keys);
    pass(&mut map, &keys);
    assert_eq!(map.values.len(), keys.len(), "the second pass assigned nothing");
    let between: Vec<i64> = keys.iter().map(|k| k + 3).collect();
    pass(&mut map, &between);
    pass(&mut map, &keys);
    pass(&mut map, &between);
    assert_eq!(map.values.len(), 2 * keys.len());
    assert_eq!(map.values, seen.by_id());
}

/// A map whose first key is NULL, or whose window is never placed, still
/// gives every value one id.
#[test]
fn int_map_without_a_window_hashes_every_value() {
    let mut rng = StdRng::seed_from_u64(9);
    for null_first in [false, true] {
        let mut map = KeyMap::I64(IntMap::default());
        let mut seen = Reference::new();
        if null_first {
            let null = map.null();
            seen.record(None, null);
        }
        let KeyMap::I64(m) = &mut map else { unreachable!() };
        m.init_window(100);
        for _ in 0..5 {
            let mut x = [0i64; LANES];
            x.iter_mut().for_each(|v| *v = int_value(&mut rng, 100));
            let lanes = random_lanes(&mut rng);
            let mut out = [0u32; LANES];
            m.ids(&x, &lanes, &mut out);
            lanes.for_each_one(|l| seen.record(Some(x[l]), out[l]));
        }
        let values = seen.by_id();
        for (id, v) in values.iter().enumerate() {
            let want = v.map_or(KeyValue::Null, KeyValue::I64);
            assert_eq!(map.value(id as u32), want, "id {id}");
        }
        assert_eq!(map.len(), values.len());
    }
}

#[test]
fn hash_maps_agree_with_a_btreemap() {
    let mut rng = StdRng::seed_from_u64(10);
    let mut u = KeyMap::U64(HashMapKeys::default());
    let mut f = KeyMap::F64(HashMapKeys::default());
    let mut d = KeyMap::I128(HashMapKeys::default());
    let (mut su, mut sf, mut sd) = (Reference::new(), Reference::new(), Reference::new());
    let floats = [0.0, -0.0, f64::NAN, -f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.5, -1.5, f64::MIN_POSITIVE];
    for _ in 0..20_000 {
        let null = rng.random_bool(0.02);
        let x: u64 = if rng.random_bool(0.5) { rng.random_range(0..500) } else { rng.random() };
        let key = (!null).then_some(x);
        su.record(key, u.id_of(&key.map_or(KeyValue::Null, KeyValue::U64)).unwrap());

        let y = if rng.random_bool(0.3) {
            floats[rng.random_range(0..floats.len())]
        } else {
            rng.random_range(-50..50) as f64 / 4.0
        };
        // SQL groups the two zeros together; NaNs by their bits.
        let group = if y == 0.0 { 0.0f64.to_bits() } else { y.to_bits() };
        let key = (!null).then_some(group);
        sf.record(key, f.id_of(&if null { KeyValue::Null } else { KeyValue::F64(y) }).unwrap());

        let z: i128 = if rng.random_bool(0.5) { rng.random_range(-300..300) } else { rng.random::<i128>() };
        let key = (!null).then_some(z);
        sd.record(key, d.id_of(&key.map_or(KeyValue::Null, KeyValue::I128)).unwrap());
    }
    let (vu, vf, vd) = (su.by_id(), sf.by_id(), sd.by_id());
    for (id, v) in vu.iter().enumerate() {
        assert_eq!(u.value(id as u32), v.map_or(KeyValue::Null, KeyValue::U64));
    }
    for (id, v) in vf.iter().enumerate() {
        match (f.value(id as u32), v) {
            (KeyValue::F64(got), Some(bits)) => assert_eq!(got.to_bits(), *bits, "id {id}"),
            (KeyValue::Null, None) => {}
            (got, want) => panic!("id {id}: {got:?}, want {want:?}"),
        }
    }
    for (id, v) in vd.iter().enumerate() {
        assert_eq!(d.value(id as u32), v.map_or(KeyValue::Null, KeyValue::I128));
    }
    assert_eq!((u.len(), f.len(), d.len()), (vu.len(), vf.len(), vd.len()));
    assert!(sf.ids.contains_key(&Some(f64::NAN.to_bits())) && sf.ids.contains_key(&Some((-f64::NAN).to_bits())));
    assert!(!vf.contains(&Some((-0.0f64).to_bits())), "-0.0 groups with 0.0");
}

#[test]
fn bytes_map_agrees_with_a_btreemap() {
    let mut rng = StdRng::seed_from_u64(11);
    let mut map = KeyMap::Bytes(BytesMap::default());
    let mut seen = Reference::new();
    for _ in 0..5_000 {
        let v: Option<Vec<u8>> = match rng.random_range(0..20) {
            0 => None,
            1 => Some(Vec::new()),
            2 => Some((0..rng.random_range(0..40)).map(|_| rng.random()).collect()),
            _ => Some(format!("name {}", rng.random_range(0..300)).into_bytes()),
        };
        let id = map.id_of(&v.as_deref().map_or(KeyValue::Null, KeyValue::Bytes)).unwrap();
        seen.record(v, id);
    }
    assert!(seen.ids.contains_key(&None) && seen.ids.contains_key(&Some(Vec::new())), "NULL and '' are distinct keys");
    let values = seen.by_id();
    for (id, v) in values.iter().enumerate() {
        assert_eq!(map.value(id as u32), v.as_deref().map_or(KeyValue::Null, KeyValue::Bytes), "id {id}");
    }
    assert_eq!(map.len(), values.len());
}

#[test]
fn a_key_of_another_type_is_an_internal_error() {
    let mut maps = [
        KeyMap::I64(IntMap::default()),
        KeyMap::U64(HashMapKeys::default()),
        KeyMap::F64(HashMapKeys::default()),
        KeyMap::I128(HashMapKeys::default()),
        KeyMap::Bytes(BytesMap::default()),
    ];
    let keys = [KeyValue::I64(1), KeyValue::U64(1), KeyValue::F64(1.0), KeyValue::I128(1), KeyValue::Bytes(b"1")];
    for (m, map) in maps.iter_mut().enumerate() {
        for (k, key) in keys.iter().enumerate() {
            let got = map.id_of(key);
            if m == k {
                assert_eq!(got.unwrap(), 0);
            } else {
                assert!(matches!(got, Err(Error::Internal(_))), "map {m} key {k}: {got:?}");
            }
        }
        assert_eq!(map.len(), 1, "a failed lookup assigns nothing");
    }
}

#[test]
fn lookup_lanes_reports_misses_of_selected_lanes_only() {
    let mut rng = StdRng::seed_from_u64(12);
    for _ in 0..200 {
        let table: Vec<u32> = (0..64).map(|i| if rng.random_bool(0.05) { u32::MAX } else { i * 3 }).collect();
        let mut x = [0u8; LANES];
        x.iter_mut().for_each(|v| *v = rng.random_range(0..64));
        let lanes = random_lanes(&mut rng);
        let mut out = [7u32; LANES];
        let missed = lookup_lanes(&x, &lanes, &mut out, |v| table[v as usize]);
        let mut want_missed = false;
        for l in 0..LANES {
            if lanes.get(l) {
                assert_eq!(out[l], table[x[l] as usize], "lane {l}");
                want_missed |= out[l] == u32::MAX;
            } else {
                assert_eq!(out[l], 7, "lane {l} is not selected");
            }
        }
        assert_eq!(missed, want_missed);
    }
}

/// Several keys: a group per distinct tuple of key ids, dense, mapping
/// back to its tuple; one key: the key id is the group.
#[test]
fn composite_groups_agree_with_a_btreemap() {
    let mut rng = StdRng::seed_from_u64(13);
    for nkeys in 1..=MAX_KEYS {
        let keys = (0..nkeys).map(|_| KeyMap::I64(IntMap::default())).collect();
        let mut groups = Groups::new(keys);
        assert_eq!(groups.len, 0);
        let mut seen = Reference::new();
        for _ in 0..20_000 {
            let ids: Vec<KeyId> = (0..nkeys).map(|_| rng.random_range(0..12)).collect();
            let g = groups.group(&ids);
            if nkeys == 1 {
                assert_eq!(g, ids[0]);
                assert_eq!(groups.tuple(g)[0], ids[0]);
                assert!(groups.len > g as usize);
                continue;
            }
            seen.record(ids.clone(), g);
            assert_eq!(groups.tuple(g)[..nkeys], ids[..]);
        }
        if nkeys > 1 {
            assert_eq!(groups.len, seen.by_id().len());
        }
    }
    assert_eq!(Groups::new(Vec::new()).len, 1, "no keys: one group");
}

/// What a map reports it will allocate while new keys go in covers what
/// it then allocates: each time a key is about to grow the map's
/// containers, the growth predicted for the next block of keys is at
/// least the size the containers grow to (the old ones are still held
/// while they do).
#[test]
fn predicted_growth_covers_every_reallocation() {
    let mut rng = StdRng::seed_from_u64(5);
    let mut maps = vec![KeyMap::Bytes(BytesMap::default()), KeyMap::I64(IntMap::default())];
    for map in &mut maps {
        let mut grew = 0;
        for i in 0..50_000i64 {
            let before = map.size_bytes();
            // For a block of keys: one key may be longer than the average.
            let predicted = map.growth_bytes(64);
            let text = format!("key {i} {}", "x".repeat(rng.random_range(0..24)));
            let value = match map {
                KeyMap::Bytes(_) => KeyValue::Bytes(text.as_bytes()),
                _ => KeyValue::I64(i * 1_000_003),
            };
            map.id_of(&value).unwrap();
            // Beyond the new key's own bytes (its box, arena bytes and span).
            let own = match map {
                KeyMap::Bytes(_) => 2 * text.len().next_multiple_of(16) + 32,
                _ => 0,
            };
            let grown = map.size_bytes() - before;
            // (Past the first allocations, whose minimum sizes the
            // prediction does not model: a few hundred bytes.)
            if grown > own && i >= 1_000 {
                grew += 1;
                assert!(predicted >= grown - own, "key {i}: predicted {predicted}, grew by {grown}");
            }
        }
        assert!(grew > 5, "the containers grew {grew} times");
    }
}
