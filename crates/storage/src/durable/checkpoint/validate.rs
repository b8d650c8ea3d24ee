//! Checking the values of a checkpoint's columns, once their structure
//! has been read, against what their encoders guarantee and scans rely on:
//! frames that agree with their packed words, codes within their
//! dictionaries, string offsets within their bytes, keys within their
//! type's domain, zones that scans may answer from or prune with (see the
//! parent module for the exact rules).
//!
//! Every bit-packed array is unpacked exactly once, and its blocks are
//! checked in the space of their deltas, so nothing adds the reference:
//!
//! ```text
//!   frame b ──unpack──▶ deltas[1024] ──stats──▶ Σ, min, max      one vectorised pass
//!                 Σ = delta_sum?   padding deltas 0?   reference + max ≤ u64::MAX?
//!                 reference + [min, max] in the key domain, or below the dictionary size?
//!                 (key(min), key(max), nulls) == zones[b]?
//!                 block with nulls: zones[b] ⊇ key([min, max]), else the exact
//!                 min, max over its valid rows (validity read 64 bits at a time)
//! ```
//!
//! The kernels are compiled twice, for the baseline CPU and with AVX2
//! (chosen at run time, as [`crate::main`]'s unpacking is): the baseline
//! x86-64 target has no 64-bit vector compare, so only AVX2 vectorises `u64`
//! minima and maxima.

use arrow_buffer::NullBuffer;
use arrow_buffer::bit_chunk_iterator::BitChunks;

use crate::block::BLOCK_SIZE;
use crate::durable::damage::Damage;
use crate::main::Zone;
use crate::main::bitpacked::BitPacked;
use crate::main::column::Encoding;
use crate::main::encoding::KeyEncoding;
use crate::main::fsst::StrFsst;
use crate::main::run_end::RunEnd;
use crate::main::sequence::Sequence;
use crate::main::strings::StrPlain;
use crate::types::{KeyNative, PhysicalType};

/// Bytes of a stored zone: min, max, null count.
pub(super) const ZONE_LEN: usize = 8 + 8 + 4;

/// Checks a string dictionary: offsets from 0, ascending (entries never
/// equal), ending at `bytes.len()`, entries sorted, UTF-8 when `utf8`.
/// A failure names the offset's index.
pub(super) fn check_dictionary(offsets: &[u32], bytes: &[u8], utf8: bool) -> Result<(), (usize, String)> {
    if offsets.first() != Some(&0) {
        return Err((0, "the dictionary offsets do not start at 0".into()));
    }
    if let Some(i) = offsets.windows(2).position(|w| w[0] > w[1] || w[1] as usize > bytes.len()) {
        return Err((
            i + 1,
            format!("dictionary offset {} is below the one before or past the {} bytes", i + 1, bytes.len()),
        ));
    }
    let last = offsets.len() - 1;
    if offsets[last] as usize != bytes.len() {
        return Err((last, format!("the dictionary ends at byte {}, not {}", offsets[last], bytes.len())));
    }
    let entry = |i: usize| &bytes[offsets[i] as usize..offsets[i + 1] as usize];
    if let Some(i) = (1..last).find(|&i| entry(i - 1) >= entry(i)) {
        return Err((i, format!("dictionary entry {i} is not above the one before")));
    }
    if utf8 {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| (0, format!("the dictionary is not UTF-8 at byte {}", e.valid_up_to())))?;
        if let Some(i) = offsets.iter().position(|&o| !text.is_char_boundary(o as usize)) {
            return Err((i, format!("dictionary offset {i} splits a UTF-8 character")));
        }
    }
    Ok(())
}

/// What a column's values must agree with.
pub(super) struct Expect<'a> {
    /// Rows of the column.
    pub(super) len: usize,
    pub(super) validity: Option<&'a NullBuffer>,
    pub(super) zones: &'a [Zone],
    /// File offset of the first zone.
    pub(super) zones_at: usize,
    /// File offset of the encoding, where problems with values are reported.
    pub(super) at: usize,
}

impl Expect<'_> {
    fn fault(&self, reason: impl Into<String>) -> Damage {
        Damage::new(self.at, reason)
    }

    fn blocks(&self) -> usize {
        self.len.div_ceil(BLOCK_SIZE)
    }

    /// Rows in block `block`.
    fn rows_in(&self, block: usize) -> usize {
        (self.len - block * BLOCK_SIZE).min(BLOCK_SIZE)
    }

    /// Nulls among the `n` rows of block `block`.
    fn nulls_in(&self, block: usize, n: usize) -> usize {
        self.validity.map_or(0, |v| n - v.buffer().count_set_bits_offset(v.offset() + block * BLOCK_SIZE, n))
    }

    /// Checks the zone of block `block`, whose rows hold `values` with
    /// minimum and maximum `range`; `key` maps values to zone keys and
    /// preserves order (deltas plus a reference, codes through a sorted
    /// dictionary).
    ///
    /// A block without nulls must have the exact zone: scans answer MIN and
    /// MAX of such blocks from it. Of a block with nulls, scans use the
    /// zone as a bound (pruning, and the magnitude that keeps sums from
    /// overflowing), so a zone that holds every value of the block, null
    /// slots included, passes as is; only other blocks (whose null slots
    /// repeat a key from beyond the zone) pay for the exact minimum and
    /// maximum over the valid rows.
    fn zone(&self, block: usize, values: &[u64], range: (u64, u64), key: impl Fn(u64) -> u64) -> Result<(), Damage> {
        let n = values.len();
        let nulls = self.nulls_in(block, n);
        let null_count = nulls as u32;
        let found = match self.validity {
            _ if nulls == n => Zone { min: u64::MAX, max: 0, null_count },
            Some(v) if nulls > 0 => {
                let stored = self.zones[block];
                let (lo, hi) = (key(range.0), key(range.1));
                if stored.null_count == null_count && stored.min <= lo && hi <= stored.max {
                    return Ok(());
                }
                let (min, max) = masked_min_max(values, v.buffer(), v.offset() + block * BLOCK_SIZE);
                Zone { min: key(min), max: key(max), null_count }
            }
            _ => Zone { min: key(range.0), max: key(range.1), null_count },
        };
        self.same_zone(block, found)
    }

    /// Checks what every zone must get right: its null count, and that it
    /// is all-null exactly when the block is. (Used alone for zones of
    /// strings, whose keys scans use only to prune: plain strings' prefix
    /// keys would cost a pass over every string to recompute.)
    fn zone_counts(&self, block: usize) -> Result<(), Damage> {
        let n = self.rows_in(block);
        let nulls = self.nulls_in(block, n);
        let stored = self.zones[block];
        if stored.null_count as usize != nulls || stored.all_null() != (nulls == n) {
            return Err(Damage::new(
                self.zones_at + block * ZONE_LEN,
                format!("the zone of block {block} is {stored:?}, but the block has {nulls} nulls in {n} rows"),
            ));
        }
        Ok(())
    }

    fn same_zone(&self, block: usize, found: Zone) -> Result<(), Damage> {
        let stored = self.zones[block];
        if stored != found {
            return Err(Damage::new(
                self.zones_at + block * ZONE_LEN,
                format!("the zone of block {block} is {stored:?}, but its values give {found:?}"),
            ));
        }
        Ok(())
    }
}

/// Checks the values of an encoding whose structure
/// [`super::read_encoding`] checked.
pub(super) fn check_values(
    encoding: &Encoding,
    physical: PhysicalType,
    utf8: bool,
    e: &Expect<'_>,
) -> Result<(), Damage> {
    let (lo, hi) = key_domain(physical);
    let in_domain = |block: usize, min: u64, max: u64| {
        if min < lo || max > hi {
            return Err(
                e.fault(format!("block {block} holds keys {min}..={max}, outside the {physical:?} keys {lo}..={hi}"))
            );
        }
        Ok(())
    };
    match encoding {
        Encoding::Keys(KeyEncoding::Constant { key, .. }) => {
            in_domain(0, *key, *key)?;
            for b in 0..e.blocks() {
                let n = e.rows_in(b);
                let nulls = e.nulls_in(b, n);
                let (min, max) = if nulls == n { (u64::MAX, 0) } else { (*key, *key) };
                e.same_zone(b, Zone { min, max, null_count: nulls as u32 })?;
            }
            Ok(())
        }
        Encoding::Keys(KeyEncoding::BitPacked(p)) => walk_packed(p, e, |b, deltas, reference, (min, max)| {
            in_domain(b, reference + min, reference + max)?;
            e.zone(b, deltas, (min, max), |d| reference + d)
        }),
        Encoding::Keys(KeyEncoding::Dict(d)) => {
            let values = d.values();
            if let (Some(&first), Some(&last)) = (values.first(), values.last()) {
                in_domain(0, first, last)?;
            }
            walk_packed(d.codes(), e, |b, deltas, reference, (min, max)| {
                if reference + max >= values.len() as u64 {
                    return Err(e.fault(format!(
                        "block {b} has code {}, the dictionary {} values",
                        reference + max,
                        values.len()
                    )));
                }
                e.zone(b, deltas, (min, max), |d| values[(reference + d) as usize])
            })
        }
        Encoding::Keys(KeyEncoding::Plain(keys)) => {
            for (b, block) in keys.chunks(BLOCK_SIZE).enumerate() {
                let (_, min, max) = stats(block);
                in_domain(b, min, max)?;
                e.zone(b, block, (min, max), |k| k)?;
            }
            Ok(())
        }
        Encoding::Keys(keys @ (KeyEncoding::Sequence(_) | KeyEncoding::RunEnd(_))) => {
            let mut buf = [0u64; BLOCK_SIZE];
            for b in 0..e.blocks() {
                let (start, n) = (b * BLOCK_SIZE, e.rows_in(b));
                let range = match keys {
                    KeyEncoding::Sequence(s) => sequence_range(s, start, start + n),
                    KeyEncoding::RunEnd(r) => Some(run_range(r, start, start + n)),
                    _ => None,
                };
                let decoded = range.is_none() || e.nulls_in(b, n) > 0;
                if decoded {
                    keys.decode_block(b, &mut buf);
                }
                let (min, max) = range.unwrap_or_else(|| {
                    let (_, min, max) = stats(&buf[..n]);
                    (min, max)
                });
                in_domain(b, min, max)?;
                if decoded {
                    e.zone(b, &buf[..n], (min, max), |k| k)?;
                } else {
                    e.same_zone(b, Zone { min, max, null_count: 0 })?;
                }
            }
            Ok(())
        }
        Encoding::Wide(values) => {
            let mut keys = [0u64; BLOCK_SIZE];
            for (b, chunk) in values.chunks(BLOCK_SIZE).enumerate() {
                for (k, v) in keys.iter_mut().zip(chunk) {
                    *k = v.to_key();
                }
                let block = &keys[..chunk.len()];
                let (_, min, max) = stats(block);
                e.zone(b, block, (min, max), |k| k)?;
            }
            Ok(())
        }
        Encoding::StrDict(d) => {
            let entries = d.dict_len() as u64;
            // Every entry is some row's value, as the encoder makes them
            // (aggregation by code relies on it, see `StrDict`).
            let mut used = vec![0u64; d.dict_len().div_ceil(64)];
            walk_packed(d.codes(), e, |b, deltas, reference, (min, max)| {
                if reference + max >= entries {
                    return Err(
                        e.fault(format!("block {b} has code {}, the dictionary {entries} entries", reference + max))
                    );
                }
                for &delta in deltas {
                    let code = reference + delta;
                    used[(code / 64) as usize] |= 1 << (code % 64);
                }
                if e.nulls_in(b, deltas.len()) == 0 {
                    return e.zone(b, deltas, (min, max), |d| reference + d);
                }
                // Null rows hold the code of "": such zones only prune, and
                // index the dictionary (statistics), so they need the right
                // counts and codes below the dictionary size.
                e.zone_counts(b)?;
                let zone = e.zones[b];
                if !zone.all_null() && zone.max >= entries {
                    return Err(Damage::new(
                        e.zones_at + b * ZONE_LEN,
                        format!("the zone of block {b} reaches code {}, the dictionary {entries} entries", zone.max),
                    ));
                }
                Ok(())
            })?;
            match (0..d.dict_len()).find(|&i| used[i / 64] >> (i % 64) & 1 == 0) {
                Some(i) => Err(e.fault(format!("dictionary entry {i} is the value of no row"))),
                None => Ok(()),
            }
        }
        Encoding::StrPlain(p) => check_plain(p, utf8, e),
        Encoding::StrFsst(f) => check_fsst(f, utf8, e),
        // Children were checked as they were read; the zones count nulls.
        Encoding::Nested(_) => (0..e.blocks()).try_for_each(|b| {
            let n = e.rows_in(b);
            e.same_zone(b, crate::main::nested::zone(n, e.nulls_in(b, n)))
        }),
    }
}

/// The keys of a physical type's values (see [`KeyNative`]).
fn key_domain(physical: PhysicalType) -> (u64, u64) {
    match physical {
        PhysicalType::Boolean => (0, 1),
        PhysicalType::Int8 => (i8::MIN.to_key(), i8::MAX.to_key()),
        PhysicalType::Int16 => (i16::MIN.to_key(), i16::MAX.to_key()),
        PhysicalType::Int32 => (i32::MIN.to_key(), i32::MAX.to_key()),
        PhysicalType::UInt8 => (0, u8::MAX.into()),
        PhysicalType::UInt16 => (0, u16::MAX.into()),
        PhysicalType::UInt32 | PhysicalType::Float32 => (0, u32::MAX.into()),
        PhysicalType::Int64
        | PhysicalType::UInt64
        | PhysicalType::Float64
        | PhysicalType::Decimal128
        | PhysicalType::Bytes => (0, u64::MAX),
    }
}

/// Minimum and maximum of rows `start..end` of a sequence, from the ends
/// of its runs there, or `None` when a run wraps around `u64` (then the
/// block is decoded).
fn sequence_range(s: &Sequence, start: usize, end: usize) -> Option<(u64, u64)> {
    let runs = s.runs();
    let (mut min, mut max) = (u64::MAX, 0);
    let (mut r, mut row) = (s.run_of(start), start);
    while row < end {
        let run = runs[r];
        let stop = runs.get(r + 1).map_or(s.len(), |next| next.start as usize).min(end);
        // In i128 with a signed step a run is linear: when its first and
        // last keys both lie in the u64 range, none between wraps.
        let key = |row: usize| i128::from(run.base) + (row - run.start as usize) as i128 * i128::from(run.step as i64);
        let (a, z) = (u64::try_from(key(row)).ok()?, u64::try_from(key(stop - 1)).ok()?);
        min = min.min(a.min(z));
        max = max.max(a.max(z));
        (r, row) = (r + 1, stop);
    }
    Some((min, max))
}

/// Minimum and maximum of rows `start..end` of runs, from the runs there.
fn run_range(runs: &RunEnd, start: usize, end: usize) -> (u64, u64) {
    let (_, min, max) = stats(&runs.values()[runs.run_of(start)..=runs.run_of(end - 1)]);
    (min, max)
}

/// Checks plain strings: offsets from 0, never descending, ending at the
/// byte length (on character boundaries of valid UTF-8 when `utf8`), and
/// zones with the right null counts.
fn check_plain(p: &StrPlain, utf8: bool, e: &Expect<'_>) -> Result<(), Damage> {
    let bytes: &[u8] = p.bytes();
    let text = match utf8 {
        true => Some(
            std::str::from_utf8(bytes)
                .map_err(|err| e.fault(format!("the strings are not UTF-8 at byte {}", err.valid_up_to())))?,
        ),
        false => None,
    };
    check_offsets(p.offsets(), bytes.len() as u64, text, e)?;
    (0..e.blocks()).try_for_each(|b| e.zone_counts(b))
}

/// Checks FSST strings: offsets as plain strings' over the codes, every
/// value's codes symbols or complete escapes, every value UTF-8 once
/// decompressed when `utf8`, and zones with the right null counts.
fn check_fsst(f: &StrFsst, utf8: bool, e: &Expect<'_>) -> Result<(), Damage> {
    check_offsets(f.offsets(), f.bytes().len() as u64, None, e)?;
    f.check().map_err(|row| e.fault(format!("the codes of row {row} are neither symbols nor escapes")))?;
    if utf8 {
        let mut buf = Vec::new();
        for row in 0..f.len() {
            if std::str::from_utf8(f.get(row, &mut buf)).is_err() {
                return Err(e.fault(format!("row {row} is not UTF-8")));
            }
        }
    }
    (0..e.blocks()).try_for_each(|b| e.zone_counts(b))
}

/// Checks value offsets into `total` bytes: from 0, never descending,
/// ending at `total`, and on character boundaries of `text` when given.
fn check_offsets(offsets: &BitPacked, total: u64, text: Option<&str>, e: &Expect<'_>) -> Result<(), Damage> {
    let mut prev = 0;
    walk_packed(offsets, e, |b, deltas, reference, (_, max)| {
        let first = reference + deltas[0];
        let from = if b == 0 { first == 0 } else { first >= prev };
        if !from || !ascending(deltas) || reference + max > total {
            return Err(
                e.fault(format!("the string offsets of block {b} do not ascend from 0 within the {total} bytes"))
            );
        }
        if text.is_some_and(|t| !deltas.iter().all(|&d| t.is_char_boundary((reference + d) as usize))) {
            return Err(e.fault(format!("a string offset of block {b} splits a UTF-8 character")));
        }
        prev = reference + deltas[deltas.len() - 1];
        Ok(())
    })?;
    if prev != total {
        return Err(e.fault(format!("the string offsets end at byte {prev}, not {total}")));
    }
    Ok(())
}

/// Unpacks each block of `packed` once, checks its deltas against its frame
/// (exact delta sum, padding deltas 0, reference plus deltas within
/// `u64`), and calls `f(block, deltas, reference, (min, max))` with the
/// deltas of the block's values (not its padding) and their bounds.
fn walk_packed(
    packed: &BitPacked,
    e: &Expect<'_>,
    mut f: impl FnMut(usize, &[u64], u64, (u64, u64)) -> Result<(), Damage>,
) -> Result<(), Damage> {
    let mut deltas = [0u64; BLOCK_SIZE];
    for (b, frame) in packed.frames().iter().enumerate() {
        let n = (packed.len() - b * BLOCK_SIZE).min(BLOCK_SIZE);
        let (sum, min, max) = if frame.width == 0 {
            deltas[..n].fill(0);
            (0, 0, 0)
        } else {
            packed.decode_block_deltas(b, &mut deltas);
            if n < BLOCK_SIZE && stats(&deltas[n..]).2 != 0 {
                return Err(e.fault(format!("the padding of block {b} is not its reference")));
            }
            if frame.width < 64 { small_stats(&deltas[..n]) } else { stats(&deltas[..n]) }
        };
        if sum != frame.delta_sum {
            return Err(
                e.fault(format!("frame {b} records a delta sum of {}, its deltas sum to {sum}", frame.delta_sum))
            );
        }
        if frame.reference.checked_add(max).is_none() {
            return Err(e.fault(format!("the values of block {b} wrap past u64::MAX")));
        }
        f(b, &deltas[..n], frame.reference, (min, max))?;
    }
    Ok(())
}

/// Defines `$name` to run `$lanes` compiled for the baseline CPU, or with
/// AVX2 when the CPU has it (checked at run time).
macro_rules! with_avx2 {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $lanes:ident) => {
        $(#[$doc])*
        fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                unsafe fn avx2($($arg: $ty),*) -> $ret {
                    $lanes($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: AVX2 is available (checked just above).
                    return unsafe { avx2($($arg),*) };
                }
            }
            $lanes($($arg),*)
        }
    };
}

with_avx2! {
    /// Wrapping sum, minimum and maximum of `values` (`(0, u64::MAX, 0)`
    /// when empty).
    fn stats(values: &[u64]) -> (u64, u64, u64) = stats_lanes
}

/// Plain reductions: the loop vectoriser splits them into lanes itself
/// (hand-made lanes came out as strided gathers).
#[inline(always)]
fn stats_lanes(values: &[u64]) -> (u64, u64, u64) {
    let (mut sum, mut min, mut max) = (0u64, u64::MAX, 0u64);
    for &v in values {
        sum = sum.wrapping_add(v);
        min = min.min(v);
        max = max.max(v);
    }
    (sum, min, max)
}

with_avx2! {
    /// [`stats`] of values below 2^63 (deltas of widths below 64), which
    /// compare as `i64`: AVX2 has a signed 64-bit compare, so this saves
    /// the sign flips an unsigned compare needs.
    fn small_stats(values: &[u64]) -> (u64, u64, u64) = small_stats_lanes
}

#[inline(always)]
fn small_stats_lanes(values: &[u64]) -> (u64, u64, u64) {
    let (mut sum, mut min, mut max) = (0u64, i64::MAX, 0i64);
    for &v in values {
        sum = sum.wrapping_add(v);
        min = min.min(v as i64);
        max = max.max(v as i64);
    }
    (sum, min as u64, max as u64)
}

with_avx2! {
    /// True when `values` never descend.
    fn ascending(values: &[u64]) -> bool = ascending_lanes
}

#[inline(always)]
fn ascending_lanes(values: &[u64]) -> bool {
    let Some((_, next)) = values.split_first() else { return true };
    let mut descents = 0u64;
    for (a, b) in values.iter().zip(next) {
        descents |= u64::from(a > b);
    }
    descents == 0
}

with_avx2! {
    /// Minimum and maximum of the `values` whose validity bit is set, bit
    /// `offset` of `bits` being the first value's (`(u64::MAX, 0)` when
    /// none is).
    fn masked_min_max(values: &[u64], bits: &[u8], offset: usize) -> (u64, u64) = masked_lanes
}

#[inline(always)]
fn masked_lanes(values: &[u64], bits: &[u8], offset: usize) -> (u64, u64) {
    let (mut min, mut max) = (u64::MAX, 0u64);
    let words = BitChunks::new(bits, offset, values.len());
    for (chunk, word) in values.chunks(64).zip(words.iter_padded()) {
        let mut bit = 1u64;
        for &v in chunk {
            // All ones for a valid value: a null one drops out of both.
            let keep = if word & bit != 0 { u64::MAX } else { 0 };
            min = min.min(v | !keep);
            max = max.max(v & keep);
            bit <<= 1;
        }
    }
    (min, max)
}
