//! Key tests evaluated on one block, reading the encoding directly:
//! bit-packed blocks compare deltas against the range shifted by the
//! block's reference (a range while unpacking), dictionaries compare
//! codes the same way, run-end tests once per run; delta chunks compare
//! keys of their native values.

use arrow_buffer::ArrowNativeType;
use quiverdb_mapreducer::{Bits, LANES, Scratch, kernels};
use quiverdb_storage::main::KeyEncoding;
use quiverdb_storage::main::bitpacked::BitPacked;
use quiverdb_storage::types::{KeyNative, PhysicalType};

use super::leaf::{KeySet, KeyTest};

/// Keys of main block `block` that pass `test`, read from the encoding,
/// written to `out`.
pub(super) fn key_block(
    enc: &KeyEncoding,
    block: usize,
    len: usize,
    test: &KeyTest,
    codes: Option<&KeyTest>,
    scratch: &mut Scratch,
    out: &mut Bits,
) {
    match (enc, codes) {
        (KeyEncoding::BitPacked(bp), _) => packed_block(bp, block, len, test, scratch, out),
        (KeyEncoding::Dict(d), Some(c)) => packed_block(d.codes(), block, len, c, scratch, out),
        (KeyEncoding::Constant { key, .. }, _) => *out = if test.test(*key) { Bits::first(len) } else { Bits::EMPTY },
        (KeyEncoding::Dict(d), None) => {
            let keys = scratch.keys_mut();
            d.codes().decode_block(block, keys);
            for k in keys.iter_mut() {
                *k = d.values()[*k as usize];
            }
            *out = test.mask(keys, len);
        }
        (KeyEncoding::RunEnd(re), _) => {
            let start = block * LANES;
            *out = Bits::EMPTY;
            let mut r = re.run_of(start);
            let mut row = start;
            while row < start + len {
                let end = (re.ends()[r] as usize).min(start + len);
                if test.test(re.values()[r]) {
                    *out = out.or(&Bits::range(row - start, end - start));
                }
                row = end;
                r += 1;
            }
        }
        _ => {
            let keys = scratch.keys_mut();
            enc.decode_block(block, keys);
            *out = test.mask(keys, len);
        }
    }
}

/// Values of block `block` of `bp` (keys or dictionary codes) that pass
/// `test`, read from the packing, written to `out`: the test is shifted by
/// the block's reference and compared with the packed deltas, so no
/// reference is added to any value, and a range is compared while
/// unpacking.
pub(super) fn packed_block(
    bp: &BitPacked,
    block: usize,
    len: usize,
    test: &KeyTest,
    scratch: &mut Scratch,
    out: &mut Bits,
) {
    let reference = bp.frames()[block].reference;
    match test {
        KeyTest::Range { empty: true, .. } => *out = Bits::EMPTY,
        &KeyTest::Range { hi, .. } if hi < reference => *out = Bits::EMPTY,
        &KeyTest::Range { lo, hi, .. } => {
            // lo <= hi, so the shifted bounds keep their order.
            let (lo, hi) = (lo.saturating_sub(reference), hi - reference);
            bp.block_delta_range_bits(block, lo, hi - lo, &mut out.0);
            if len < LANES {
                *out = out.and(&Bits::first(len));
            }
        }
        KeyTest::Set(KeySet { dense: Some((lo, words)), .. }) => {
            // The bitset's first key shifted by the reference, as for
            // ranges: `delta - (lo - reference)` is `key - lo`.
            let keys = scratch.keys_mut();
            bp.decode_block_deltas(block, keys);
            *out = kernels::bitset_mask(keys, len, lo.wrapping_sub(reference), words);
        }
        KeyTest::Set(_) => {
            let keys = scratch.keys_mut();
            bp.decode_block(block, keys);
            *out = test.mask(keys, len);
        }
    }
}

/// Delta rows of chunk `chunk` that pass a key test.
pub(super) fn delta_keys(
    delta: &quiverdb_storage::DeltaColumnReader<'_>,
    physical: PhysicalType,
    chunk: usize,
    len: usize,
    test: &KeyTest,
    scratch: &mut Scratch,
) -> Bits {
    let keys = scratch.keys_mut();
    fn fill<T: ArrowNativeType + KeyNative>(src: &[T], keys: &mut [u64; LANES]) {
        for (k, v) in keys.iter_mut().zip(src) {
            *k = v.to_key();
        }
    }
    match physical {
        PhysicalType::Boolean => {
            let mut words = [0u64; 16];
            delta.booleans(chunk, &mut words);
            for (i, k) in keys.iter_mut().enumerate().take(len) {
                *k = words[i / 64] >> (i % 64) & 1;
            }
        }
        PhysicalType::Int8 => fill::<i8>(delta.values(chunk), keys),
        PhysicalType::Int16 => fill::<i16>(delta.values(chunk), keys),
        PhysicalType::Int32 => fill::<i32>(delta.values(chunk), keys),
        PhysicalType::Int64 => fill::<i64>(delta.values(chunk), keys),
        PhysicalType::UInt8 => fill::<u8>(delta.values(chunk), keys),
        PhysicalType::UInt16 => fill::<u16>(delta.values(chunk), keys),
        PhysicalType::UInt32 => fill::<u32>(delta.values(chunk), keys),
        PhysicalType::UInt64 => fill::<u64>(delta.values(chunk), keys),
        PhysicalType::Float32 => fill::<f32>(delta.values(chunk), keys),
        PhysicalType::Float64 => fill::<f64>(delta.values(chunk), keys),
        PhysicalType::Decimal128 | PhysicalType::Bytes => return Bits::EMPTY,
    }
    test.mask(keys, len)
}
