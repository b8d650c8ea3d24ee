//! Key tests evaluated on one block, reading the encoding directly:
//! bit-packed blocks compare deltas against the range shifted by the
//! block's reference, dictionaries compare codes, run-end tests once per
//! run; delta chunks compare keys of their native values.

use arrow_buffer::ArrowNativeType;
use quiverdb_mapreducer::{Bits, LANES, Scratch, kernels};
use quiverdb_storage::main::KeyEncoding;
use quiverdb_storage::types::{KeyNative, PhysicalType};

use super::leaf::{KeySet, KeyTest};

/// Keys of main block `block` that pass `test`, read from the encoding.
pub(super) fn key_block(enc: &KeyEncoding, block: usize, len: usize, test: &KeyTest, codes: Option<&KeyTest>, scratch: &mut Scratch) -> Bits {
    let keys = scratch.keys_mut();
    match enc {
        KeyEncoding::Constant { key, .. } => {
            if test.test(*key) { Bits::first(len) } else { Bits::EMPTY }
        }
        KeyEncoding::BitPacked(bp) => {
            let frame = bp.frames()[block];
            match test {
                KeyTest::Range { lo, hi, empty: false } => {
                    // Compare the packed deltas with the range shifted by the
                    // block's reference: no reference is added to any value.
                    if *hi < frame.reference {
                        return Bits::EMPTY;
                    }
                    let shifted = KeyTest::Range {
                        lo: lo.saturating_sub(frame.reference),
                        hi: hi - frame.reference,
                        empty: false,
                    };
                    if frame.width == 0 {
                        return if shifted.test(0) { Bits::first(len) } else { Bits::EMPTY };
                    }
                    bp.decode_block_deltas(block, keys);
                    shifted.mask(keys, len)
                }
                KeyTest::Set(KeySet { dense: Some((lo, words)), .. }) => {
                    // The bitset's first key shifted by the reference, as
                    // for ranges: `delta - (lo - reference)` is `key - lo`.
                    bp.decode_block_deltas(block, keys);
                    kernels::bitset_mask(keys, len, lo.wrapping_sub(frame.reference), words)
                }
                _ => {
                    bp.decode_block(block, keys);
                    test.mask(keys, len)
                }
            }
        }
        KeyEncoding::Dict(d) => {
            d.codes().decode_block(block, keys);
            match codes {
                Some(c) => c.mask(keys, len),
                None => {
                    for k in keys.iter_mut() {
                        *k = d.values()[*k as usize];
                    }
                    test.mask(keys, len)
                }
            }
        }
        KeyEncoding::RunEnd(re) => {
            let start = block * LANES;
            let mut out = Bits::EMPTY;
            let mut r = re.run_of(start);
            let mut row = start;
            while row < start + len {
                let end = (re.ends()[r] as usize).min(start + len);
                if test.test(re.values()[r]) {
                    out = out.or(&Bits::range(row - start, end - start));
                }
                row = end;
                r += 1;
            }
            out
        }
        _ => {
            enc.decode_block(block, keys);
            test.mask(keys, len)
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
