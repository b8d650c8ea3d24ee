//! Building a main column: analyse the values, pick the smallest encoding.
//!
//! ```text
//!   Arrow array ──▶ RawColumn (keys | i128 | bytes, validity)
//!                     │  fill null slots with a neighbour's key
//!                     │  zone maps per 1,024 values
//!                     ▼
//!   candidate sizes:  constant 8 B · sequence 24 B/run · run-end 12 B/run
//!                     bit-packed Σ(16·width words) · dictionary 8 B/entry + codes
//!                     plain 8 B/value                  (strings: dictionary vs plain)
//!                     ▼
//!   smallest wins; ties go to the cheaper decoder (the order of `EncodingKind`)
//! ```
//!
//! Candidates that need a full pass to size (sequence, dictionary) are
//! given the best size so far as a budget and give up as soon as they
//! exceed it, so a rebuild of a column that bit-packs well never builds a
//! large hash set.

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_buffer::NullBuffer;
use arrow_schema::DataType;

use super::bitpacked::{BitPacked, min_max};
use super::column::Encoding;
use super::column::MainColumn;
use super::dict::{Dict, distinct_keys};
use super::encoding::KeyEncoding;
use super::fsst::StrFsst;
use super::kind::EncodingKind;
use super::run_end::RunEnd;
use super::sequence::Sequence;
use super::strings::{RawBytes, StrDict, StrPlain, distinct_bytes};
use super::zone::Zone;
use crate::block::BLOCK_SIZE;
use crate::error::{Error, Result};
use crate::types::{KeyNative, PhysicalType, fits_i64, prefix_key, with_native};

/// Values of a column gathered for encoding.
#[derive(Debug)]
pub(crate) enum RawValues {
    Keys(Vec<u64>),
    Wide(Vec<i128>),
    Bytes(RawBytes),
}

impl RawValues {
    fn len(&self) -> usize {
        match self {
            RawValues::Keys(k) => k.len(),
            RawValues::Wide(w) => w.len(),
            RawValues::Bytes(b) => b.len(),
        }
    }
}

impl MainColumn {
    /// Encodes an Arrow array as a main column with the smallest encoding.
    /// The array's type is the column's type.
    pub fn from_array(array: &dyn Array) -> Result<Self> {
        Self::from_array_with(array, None)
    }

    /// Encodes an Arrow array as a main column; with `force`, uses that
    /// encoding if it applies to the values, or returns
    /// [`Error::InvalidOption`] if it does not: constant for differing
    /// values; anything but dictionary and plain for strings and binary;
    /// anything but plain for decimals beyond the i64 range. A struct, list
    /// or map applies `force` to each of its child columns it applies to.
    pub fn from_array_with(array: &dyn Array, force: Option<EncodingKind>) -> Result<Self> {
        let data_type = array.data_type().clone();
        let physical = PhysicalType::of(&data_type)
            .ok_or_else(|| Error::UnsupportedType { column: String::new(), data_type: data_type.clone() })?;
        let validity = array.logical_nulls().filter(|n| n.null_count() > 0);
        if super::nested::has_child_columns(&data_type) {
            let nested = super::column::Nested::build(array, force)?;
            let zones = super::nested::zones(array.len(), validity.as_ref());
            let encoding = std::sync::Arc::new(Encoding::Nested(nested));
            return Ok(Self {
                data_type,
                physical,
                len: array.len(),
                encoding,
                validity,
                range: super::column::zone_range(&zones),
                zones: zones.into(),
                sketch: None,
            });
        }
        let rows;
        let array = if crate::row_encoded::is_row_encoded(&data_type) {
            rows = crate::row_encoded::encode(array)?;
            rows.as_ref()
        } else {
            array
        };
        let values = raw_values(array, physical);
        let len = values.len();
        let (encoding, zones) = encode(values, validity.as_ref(), force, zero_key(physical))?;
        Ok(Self {
            data_type,
            physical,
            len,
            encoding: std::sync::Arc::new(encoding),
            validity,
            range: super::column::zone_range(&zones),
            zones: zones.into(),
            sketch: None,
        }
        .with_sketch())
    }
}

/// Converts an Arrow array to raw values: keys, wide decimals, or bytes.
fn raw_values(array: &dyn Array, physical: PhysicalType) -> RawValues {
    fn keys<T: ArrowPrimitiveType>(array: &dyn Array) -> Vec<u64>
    where
        T::Native: KeyNative,
    {
        array.as_primitive::<T>().values().iter().map(|v| v.to_key()).collect()
    }
    use arrow_array::types::*;
    match physical {
        PhysicalType::Boolean => RawValues::Keys(array.as_boolean().values().iter().map(u64::from).collect()),
        PhysicalType::Int8 => RawValues::Keys(keys::<Int8Type>(array)),
        PhysicalType::Int16 => RawValues::Keys(keys::<Int16Type>(array)),
        PhysicalType::Int32 => RawValues::Keys(native_keys::<i32>(array)),
        PhysicalType::Int64 => RawValues::Keys(native_keys::<i64>(array)),
        PhysicalType::UInt8 => RawValues::Keys(keys::<UInt8Type>(array)),
        PhysicalType::UInt16 => RawValues::Keys(keys::<UInt16Type>(array)),
        PhysicalType::UInt32 => RawValues::Keys(keys::<UInt32Type>(array)),
        PhysicalType::UInt64 => RawValues::Keys(keys::<UInt64Type>(array)),
        PhysicalType::Float32 => RawValues::Keys(keys::<Float32Type>(array)),
        PhysicalType::Float64 => RawValues::Keys(keys::<Float64Type>(array)),
        PhysicalType::Decimal128 => {
            let values = array.as_primitive::<Decimal128Type>().values();
            if values.iter().all(|&v| fits_i64(v)) {
                RawValues::Keys(values.iter().map(|v| v.to_key()).collect())
            } else {
                RawValues::Wide(values.to_vec())
            }
        }
        PhysicalType::Bytes => RawValues::Bytes(raw_bytes(array)),
    }
}

/// Keys of an array backed by `T` values (Int32, Date32 and Time32 by
/// i32; Int64, Date64, Timestamp, Time64 and Duration by i64), read
/// through its buffer so every logical type and unit takes the same path.
fn native_keys<T: KeyNative>(array: &dyn Array) -> Vec<u64> {
    let data = array.to_data();
    let values: &[T] = &data.buffer::<T>(0)[..array.len()];
    values.iter().map(|v| v.to_key()).collect()
}

/// Copies the values of any string or binary array.
fn raw_bytes(array: &dyn Array) -> RawBytes {
    fn fill<'a>(raw: &mut RawBytes, values: impl Iterator<Item = Option<&'a [u8]>>) {
        for v in values {
            raw.push(v.unwrap_or_default());
        }
    }
    let mut raw = RawBytes::with_capacity(array.len(), 0);
    match array.data_type() {
        DataType::Utf8 => fill(&mut raw, array.as_string::<i32>().iter().map(|v| v.map(str::as_bytes))),
        DataType::LargeUtf8 => fill(&mut raw, array.as_string::<i64>().iter().map(|v| v.map(str::as_bytes))),
        DataType::Utf8View => fill(&mut raw, array.as_string_view().iter().map(|v| v.map(str::as_bytes))),
        DataType::Binary => fill(&mut raw, array.as_binary::<i32>().iter()),
        DataType::LargeBinary => fill(&mut raw, array.as_binary::<i64>().iter()),
        DataType::BinaryView => fill(&mut raw, array.as_binary_view().iter()),
        other => unreachable!("PhysicalType::Bytes covers only byte types, got {other}"),
    }
    raw
}

/// The key of the value zero of a fixed-width type: what the slots of an
/// all-null column hold (readers that compute on null slots, as Arrow
/// kernels do, then meet a harmless value rather than the type's minimum).
fn zero_key(physical: PhysicalType) -> u64 {
    with_native!(physical, T => T::default().to_key(), bool => 0, bytes => 0)
}

/// Encodes raw values: fills null slots, computes zone maps, picks the encoding.
pub(crate) fn encode(
    values: RawValues,
    validity: Option<&NullBuffer>,
    force: Option<EncodingKind>,
    zero_key: u64,
) -> Result<(Encoding, Vec<Zone>)> {
    match values {
        RawValues::Keys(mut keys) => {
            if let Some(v) = validity {
                fill_nulls(&mut keys, v, zero_key);
            }
            let zones = key_zones(&keys, validity, |k| k);
            Ok((Encoding::Keys(choose_keys(keys, force)?), zones))
        }
        RawValues::Wide(values) => {
            if force.is_some_and(|f| f != EncodingKind::Plain) {
                return Err(not_applicable(force, "decimals beyond the i64 range"));
            }
            let zones = key_zones(&values, validity, |v: i128| v.to_key());
            Ok((Encoding::Wide(values.into()), zones))
        }
        RawValues::Bytes(raw) => choose_bytes(raw, validity, force),
    }
}

fn not_applicable(force: Option<EncodingKind>, what: &str) -> Error {
    Error::InvalidOption {
        option: "encoding",
        reason: format!("{} does not apply to {what}", force.map_or("?", EncodingKind::name)),
    }
}

/// Gives each null slot the key of the nearest valid slot before it (the
/// first valid key for leading nulls), so nulls never break a run or widen
/// a frame.
fn fill_nulls(keys: &mut [u64], validity: &NullBuffer, zero_key: u64) {
    let Some(first) = validity.valid_indices().next() else {
        keys.fill(zero_key);
        return;
    };
    let mut last = keys[first];
    for (i, k) in keys.iter_mut().enumerate() {
        if validity.is_valid(i) { last = *k } else { *k = last }
    }
}

/// Zone maps over `values`, keyed by `key`, ignoring null slots.
fn key_zones<V: Copy>(values: &[V], validity: Option<&NullBuffer>, key: impl Fn(V) -> u64) -> Vec<Zone> {
    values
        .chunks(BLOCK_SIZE)
        .enumerate()
        .map(|(b, chunk)| {
            let base = b * BLOCK_SIZE;
            match validity {
                None => {
                    let (mut min, mut max) = (u64::MAX, 0);
                    for &v in chunk {
                        let k = key(v);
                        min = min.min(k);
                        max = max.max(k);
                    }
                    Zone { min, max, null_count: 0 }
                }
                Some(valid) => {
                    let (mut min, mut max, mut nulls) = (u64::MAX, 0, 0u32);
                    for (i, &v) in chunk.iter().enumerate() {
                        if valid.is_valid(base + i) {
                            let k = key(v);
                            min = min.min(k);
                            max = max.max(k);
                        } else {
                            nulls += 1;
                        }
                    }
                    Zone { min, max, null_count: nulls }
                }
            }
        })
        .collect()
}

/// Picks (or, with `force`, builds) the encoding of a key column.
fn choose_keys(keys: Vec<u64>, force: Option<EncodingKind>) -> Result<KeyEncoding> {
    let n = keys.len();
    let (min, max) = min_max(&keys);
    let constant = n == 0 || min == max;
    match force {
        Some(EncodingKind::Constant) => {
            return if constant {
                Ok(KeyEncoding::Constant { key: if n == 0 { 0 } else { min }, len: n })
            } else {
                Err(not_applicable(force, "differing values"))
            };
        }
        Some(EncodingKind::Sequence) => {
            return Ok(KeyEncoding::Sequence(
                Sequence::encode(&keys, usize::MAX).expect("unbounded runs always encode"),
            ));
        }
        Some(EncodingKind::BitPacked) => return Ok(KeyEncoding::BitPacked(BitPacked::encode(&keys))),
        Some(EncodingKind::RunEnd) => {
            return Ok(KeyEncoding::RunEnd(RunEnd::encode(&keys, usize::MAX).expect("unbounded runs always encode")));
        }
        Some(EncodingKind::Dictionary) => {
            let distinct = distinct_keys(&keys, usize::MAX).expect("unbounded dictionary");
            return Ok(KeyEncoding::Dict(Dict::encode(&keys, distinct)));
        }
        Some(EncodingKind::Plain) => return Ok(KeyEncoding::Plain(keys.into())),
        Some(EncodingKind::Nested) => return Err(not_applicable(force, "values without children")),
        Some(EncodingKind::Fsst) => return Err(not_applicable(force, "fixed-width values")),
        None => {}
    }
    if constant {
        return Ok(KeyEncoding::Constant { key: if n == 0 { 0 } else { min }, len: n });
    }
    // Sizes of the candidates that are cheap to compute.
    let plain = n * 8;
    let packed = BitPacked::estimate_size(&keys);
    let rle_runs = RunEnd::count_runs(&keys);
    let rle = RunEnd::size_for_runs(rle_runs);
    let mut best = (packed, EncodingKind::BitPacked);
    for candidate in [(rle, EncodingKind::RunEnd), (plain, EncodingKind::Plain)] {
        if candidate.0 < best.0 {
            best = candidate;
        }
    }
    // Sequence: only worth a pass if it can beat the best within budget.
    let seq_budget = best.0 / Sequence::size_for_runs(1);
    if let Some(seq) = Sequence::encode(&keys, seq_budget)
        && seq.size_bytes() <= best.0
    {
        return Ok(KeyEncoding::Sequence(seq));
    }
    // Dictionary: at most best/8 entries can possibly win.
    if let Some(distinct) = distinct_keys(&keys, best.0 / 8) {
        let dict = Dict::encode(&keys, distinct);
        if dict.size_bytes() < best.0 {
            return Ok(KeyEncoding::Dict(dict));
        }
    }
    Ok(match best.1 {
        EncodingKind::BitPacked => KeyEncoding::BitPacked(BitPacked::encode(&keys)),
        EncodingKind::RunEnd => KeyEncoding::RunEnd(RunEnd::encode(&keys, rle_runs).expect("run count was measured")),
        _ => KeyEncoding::Plain(keys.into()),
    })
}

/// Plain bytes below which FSST is not tried: its symbol table alone
/// takes 2.3 KB.
const FSST_MIN_BYTES: usize = 16 << 10;

/// Picks the encoding of a bytes column and computes its zones: a
/// dictionary where it is smaller than plain; else FSST where it saves a
/// fifth of the best of the others (each value decompresses when read);
/// else plain.
fn choose_bytes(
    raw: RawBytes,
    validity: Option<&NullBuffer>,
    force: Option<EncodingKind>,
) -> Result<(Encoding, Vec<Zone>)> {
    let dictionary = match force {
        Some(EncodingKind::Dictionary) => true,
        Some(EncodingKind::Plain) => false,
        Some(EncodingKind::Fsst) => {
            let zones = prefix_zones(&raw, validity);
            return Ok((Encoding::StrFsst(StrFsst::encode(&raw)), zones));
        }
        Some(_) => return Err(not_applicable(force, "strings or binary")),
        None => {
            let plain = StrPlain::estimate_size(&raw);
            let dict = distinct_bytes(&raw, plain)
                .and_then(|distinct| StrDict::encode(&raw, &distinct))
                .filter(|dict| dict.size_bytes() < plain);
            let best_other = dict.as_ref().map_or(plain, StrDict::size_bytes);
            // FSST rarely compresses text below a quarter: a dictionary
            // that small is kept without trying it.
            if raw.bytes.len() >= FSST_MIN_BYTES && best_other * 4 > plain {
                let fsst = StrFsst::encode(&raw);
                if fsst.size_bytes() * 5 < best_other * 4 {
                    let zones = prefix_zones(&raw, validity);
                    return Ok((Encoding::StrFsst(fsst), zones));
                }
            }
            match dict {
                Some(dict) => {
                    let zones = code_zones(&dict, validity);
                    return Ok((Encoding::StrDict(dict), zones));
                }
                None => false,
            }
        }
    };
    if dictionary {
        let distinct = distinct_bytes(&raw, usize::MAX).expect("unbounded dictionary");
        if let Some(dict) = StrDict::encode(&raw, &distinct) {
            let zones = code_zones(&dict, validity);
            return Ok((Encoding::StrDict(dict), zones));
        }
        return Err(not_applicable(force, "a dictionary over 4 GiB"));
    }
    let zones = prefix_zones(&raw, validity);
    Ok((Encoding::StrPlain(StrPlain::encode(raw)), zones))
}

fn code_zones(dict: &StrDict, validity: Option<&NullBuffer>) -> Vec<Zone> {
    let codes: Vec<u64> = (0..dict.len()).map(|i| dict.codes().get(i)).collect();
    key_zones(&codes, validity, |c| c)
}

fn prefix_zones(raw: &RawBytes, validity: Option<&NullBuffer>) -> Vec<Zone> {
    let idx: Vec<usize> = (0..raw.len()).collect();
    key_zones(&idx, validity, |i| prefix_key(raw.get(i)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{BinaryArray, Int64Array, StringArray};

    fn kind(array: &dyn Array) -> EncodingKind {
        MainColumn::from_array(array).unwrap().encoding().kind()
    }

    #[test]
    fn chooser_picks_the_obvious() {
        let n = 5000i64;
        assert_eq!(kind(&Int64Array::from(vec![7; 5000])), EncodingKind::Constant);
        assert_eq!(kind(&Int64Array::from_iter_values(0..n)), EncodingKind::Sequence);
        assert_eq!(kind(&Int64Array::from_iter_values((0..n).map(|i| i / 1000))), EncodingKind::RunEnd);
        let random: Vec<i64> = (0..n as u64).map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 44) as i64).collect();
        assert_eq!(kind(&Int64Array::from(random)), EncodingKind::BitPacked);
        let sparse: Vec<i64> = (0..n).map(|i| [i64::MIN, 0, i64::MAX][(i * 7) as usize % 3]).collect();
        assert_eq!(kind(&Int64Array::from(sparse)), EncodingKind::Dictionary);
        let names: Vec<String> = (0..n).map(|i| format!("name_{:04}", i % 10)).collect();
        assert_eq!(kind(&StringArray::from(names)), EncodingKind::Dictionary);
        // Distinct text with a small vocabulary compresses with FSST; bytes
        // without repeats, and text too short to pay for a symbol table,
        // stay plain.
        let unique: Vec<String> = (0..n).map(|i| format!("unique string {i}")).collect();
        assert_eq!(kind(&StringArray::from(unique)), EncodingKind::Fsst);
        let mix = |i: u64, j: u64| {
            ((i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ j.wrapping_mul(0xBF58_476D_1CE4_E5B9))
                .wrapping_mul(0x94D0_49BB_1331_11EB)
                >> 56) as u8
        };
        let noise: Vec<Vec<u8>> = (0..n as u64).map(|i| (0..24).map(|j| mix(i, j)).collect()).collect();
        assert_eq!(kind(&BinaryArray::from_iter_values(noise)), EncodingKind::Plain);
        let short: Vec<String> = (0..500).map(|i| format!("u{i}")).collect();
        assert_eq!(kind(&StringArray::from(short)), EncodingKind::Plain);
    }

    #[test]
    fn forcing_a_wrong_encoding_is_an_error() {
        let a = Int64Array::from(vec![1, 2]);
        assert!(MainColumn::from_array_with(&a, Some(EncodingKind::Constant)).is_err());
        let s = StringArray::from(vec!["a"]);
        assert!(MainColumn::from_array_with(&s, Some(EncodingKind::Sequence)).is_err());
    }

    #[test]
    fn zones_skip_nulls() {
        let a = Int64Array::from(vec![None, Some(5), Some(-3), None]);
        let c = MainColumn::from_array(&a).unwrap();
        let z = c.zones()[0];
        assert_eq!((z.min, z.max, z.null_count), ((-3i64).to_key(), 5i64.to_key(), 2));
        let all_null = Int64Array::from(vec![None::<i64>; 3]);
        assert!(MainColumn::from_array(&all_null).unwrap().zones()[0].all_null());
    }
}
