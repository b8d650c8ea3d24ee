//! Key tests on delta chunks: keys of their native values. (Main blocks
//! are tested on their encoding by storage: `Keys::filter_block`.)

use arrow_buffer::ArrowNativeType;
use quiverdb_mapreducer::{Bits, LANES, Scratch};
use quiverdb_storage::block::KeyTest;
use quiverdb_storage::types::{KeyNative, PhysicalType};

use super::leaf::OrdTest;

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

/// Delta rows of chunk `chunk` of a decimal column whose values pass `test`.
pub(super) fn delta_decimals(
    delta: &quiverdb_storage::DeltaColumnReader<'_>,
    chunk: usize,
    len: usize,
    test: &OrdTest,
) -> Bits {
    let mut out = Bits::EMPTY;
    for (i, &v) in delta.values::<i128>(chunk).iter().take(len).enumerate() {
        if test.test(v) {
            out.set(i);
        }
    }
    out
}
