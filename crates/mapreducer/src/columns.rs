//! Column readers of one shard snapshot: typed access to main blocks and
//! delta chunks, resolved once when a reducer opens.
//!
//! ```text
//!   ShardColumns ── main rows 0..M      block b = rows b*1024 ..
//!                └─ delta rows M..M+D   chunk c = rows M + c*1024 ..
//!   ColumnSource ── main: &MainColumn (encoded), delta: chunk slices,
//!                   string pages of the delta loaded once
//! ```
//!
//! `fetch_*` decode the rows of a [`Sel`] into a [`NumVector`] in the
//! column's numeric domain; everything that depends on the encoding or the
//! type is decided once per call, and the per-row loops are plain
//! conversions the compiler vectorises.

use arrow_buffer::bit_chunk_iterator::BitChunks;
use arrow_buffer::{NullBuffer, ToByteSlice};
use arrow_schema::DataType;
use quiverdb_storage::main::KeySource;
use quiverdb_storage::types::{KeyNative, PhysicalType, SIGN_BIT};
use quiverdb_storage::{BlockBytes, DeleteSet, DeltaBytes, DeltaColumnReader, MainColumn, ShardSnapshot};

use crate::error::{Error, Result};
use crate::scalar::Domain;
use crate::vector::{NumVector, Values};
use quiverdb_storage::block::{Bits, LANES, Sel, WORDS};

/// Scratch buffers for decoding keys, allocated once per reducer.
#[derive(Debug)]
pub struct Scratch {
    pub(crate) keys: Box<[u64; LANES]>,
    pub(crate) block: Box<[u64; LANES]>,
    /// Buffers of a compressed block's strings, kept from block to block
    /// (see [`ColumnSource::main_block_bytes`]).
    pub(crate) bytes: BlockBytes,
}

impl Scratch {
    /// A key buffer for callers that decode blocks themselves.
    pub fn keys_mut(&mut self) -> &mut [u64; LANES] {
        &mut self.keys
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Self { keys: Box::new([0; LANES]), block: Box::new([0; LANES]), bytes: BlockBytes::default() }
    }
}

/// One column of a shard snapshot, ready to read.
#[derive(Debug)]
pub struct ColumnSource<'a> {
    data_type: DataType,
    physical: PhysicalType,
    main: Option<&'a MainColumn>,
    delta: DeltaColumnReader<'a>,
    delta_bytes: Vec<DeltaBytes<'a>>,
}

/// The bytes of one main block of a string or binary column, read row by
/// row (see [`ColumnSource::main_block_bytes`]).
#[derive(Debug)]
pub struct MainBlockBytes<'a> {
    main: Option<&'a MainColumn>,
    /// The block's first row.
    start: usize,
    /// True when the block's rows are in `decompressed`.
    whole: bool,
    decompressed: BlockBytes,
    buf: Vec<u8>,
}

impl MainBlockBytes<'_> {
    /// The decompression buffers, for the next block.
    pub fn recycle(self) -> BlockBytes {
        self.decompressed
    }

    /// The bytes of the block's row `o`.
    #[inline]
    pub fn get(&mut self, o: usize) -> &[u8] {
        match self.main {
            _ if self.whole => self.decompressed.get(o),
            Some(m) => m.bytes(self.start + o, &mut self.buf),
            None => &[],
        }
    }
}

/// The column readers of one shard snapshot.
#[derive(Debug)]
pub struct ShardColumns<'a> {
    shard: ShardSnapshot<'a>,
    main_rows: usize,
    delta_rows: usize,
    columns: Vec<Option<ColumnSource<'a>>>,
}

impl<'a> ShardColumns<'a> {
    /// The shard's rows (main and delta, deleted ones included).
    pub(crate) fn rows(&self) -> usize {
        self.main_rows + self.delta_rows
    }

    /// Opens the readers of `columns` (table column indexes) of `shard`.
    pub fn open(shard: ShardSnapshot<'a>, columns: impl IntoIterator<Item = usize>) -> Result<Self> {
        let schema = shard.schema();
        let delta = shard.delta().reader(shard.delta_len());
        let mut sources: Vec<Option<ColumnSource<'a>>> = (0..schema.len()).map(|_| None).collect();
        for c in columns {
            if c >= schema.len() {
                return Err(Error::InvalidExpression(format!(
                    "column {c} does not exist (the table has {})",
                    schema.len()
                )));
            }
            if sources[c].is_some() {
                continue;
            }
            let reader = delta.column(c);
            let physical = schema.physical(c);
            let delta_bytes = if physical == PhysicalType::Bytes {
                (0..delta.num_chunks()).map(|ch| reader.bytes(ch)).collect()
            } else {
                Vec::new()
            };
            sources[c] = Some(ColumnSource {
                data_type: schema.field(c).data_type().clone(),
                physical,
                main: shard.main().column(c),
                delta: reader,
                delta_bytes,
            });
        }
        Ok(Self { shard, main_rows: shard.main().rows(), delta_rows: shard.delta_len(), columns: sources })
    }

    /// The shard snapshot.
    pub fn shard(&self) -> ShardSnapshot<'a> {
        self.shard
    }

    /// Rows in main storage.
    pub fn main_rows(&self) -> usize {
        self.main_rows
    }

    /// Rows in the delta.
    pub fn delta_rows(&self) -> usize {
        self.delta_rows
    }

    /// Number of main blocks.
    pub fn main_blocks(&self) -> usize {
        self.main_rows.div_ceil(LANES)
    }

    /// Number of delta chunks.
    pub fn delta_chunks(&self) -> usize {
        self.delta_rows.div_ceil(LANES)
    }

    /// Rows of main block `b`.
    pub fn block_len(&self, b: usize) -> usize {
        (self.main_rows - b * LANES).min(LANES)
    }

    /// Rows of delta chunk `c`.
    pub fn chunk_len(&self, c: usize) -> usize {
        (self.delta_rows - c * LANES).min(LANES)
    }

    /// The deleted records, if any.
    pub fn deletes(&self) -> Option<&'a DeleteSet> {
        self.shard.deletes()
    }

    /// Column `c` (which must have been opened).
    #[inline]
    pub fn column(&self, c: usize) -> &ColumnSource<'a> {
        self.columns[c].as_ref().expect("columns are opened before they are read")
    }
}

impl<'a> ColumnSource<'a> {
    /// The column's Arrow type.
    pub fn data_type(&self) -> &DataType {
        &self.data_type
    }

    /// The column's physical type.
    pub fn physical(&self) -> PhysicalType {
        self.physical
    }

    /// The main column, if the shard has main rows.
    pub fn main(&self) -> Option<&'a MainColumn> {
        self.main
    }

    /// The delta column reader.
    pub fn delta(&self) -> &DeltaColumnReader<'a> {
        &self.delta
    }

    /// The bytes of main block `block` (string and binary columns), to
    /// read row by row: an FSST-compressed column's rows are decompressed
    /// once for the whole block (into `recycled`'s buffers, which
    /// [`MainBlockBytes::recycle`] gives back), the others' read in place.
    pub fn main_block_bytes(&self, block: usize, recycled: BlockBytes) -> MainBlockBytes<'a> {
        let start = block * LANES;
        let mut decompressed = recycled;
        let whole = self.main.is_some_and(|m| {
            let len = LANES.min(m.len().saturating_sub(start));
            m.decompress_rows(start, len, &mut decompressed)
        });
        MainBlockBytes { main: self.main, start, whole, decompressed, buf: Vec::new() }
    }

    /// Calls `f` with the bytes of main block `block` (see
    /// [`Self::main_block_bytes`]), decompressed into `scratch`'s buffers
    /// (kept for the next block: no allocation per block).
    pub fn with_main_block_bytes<R>(
        &self,
        block: usize,
        scratch: &mut Scratch,
        f: impl FnOnce(&mut MainBlockBytes<'a>) -> R,
    ) -> R {
        let mut bytes = self.main_block_bytes(block, std::mem::take(&mut scratch.bytes));
        let out = f(&mut bytes);
        scratch.bytes = bytes.recycle();
        out
    }

    /// Bytes of row `i` of delta chunk `c` (string and binary columns).
    #[inline]
    pub fn delta_bytes(&self, c: usize, i: usize) -> &[u8] {
        self.delta_bytes[c].get(i)
    }

    /// Decodes the rows `sel` of main block `block` into `out`.
    pub fn fetch_main(&self, block: usize, sel: Sel<'_>, scratch: &mut Scratch, out: &mut NumVector) -> Result<()> {
        let col = self.main.ok_or_else(|| Error::Internal("fetch from a shard without main rows".into()))?;
        let start = block * LANES;
        let lanes = sel.lanes();
        out.len = lanes;
        if let Some(keys) = col.keys() {
            // Integers unpack straight into the vector, the block's
            // reference value added in the same pass, where the encoding
            // allows; otherwise keys are gathered and converted.
            let base = |reference| key_value_i64(self.physical, reference) as u64;
            let unpacked = match &mut out.values {
                Values::I64(dst) if is_int64_domain(self.physical) => {
                    keys.fetch_i64(block, sel, base, dst, &mut scratch.block)
                }
                _ => false,
            };
            if !unpacked {
                keys.gather(block, sel, &mut scratch.keys, &mut scratch.block);
                keys_to_values(self.physical, &scratch.keys[..lanes], &mut out.values)?;
            }
        } else if let Some(values) = col.wide_values() {
            let Values::I128(dst) = &mut out.values else {
                return Err(Error::Internal("wide decimals fetched into a non-I128 vector".into()));
            };
            sel_for_each_row(sel, |lane, offset| dst[lane] = values[start + offset]);
        } else {
            return Err(Error::Internal("numeric fetch of a bytes column".into()));
        }
        out.has_nulls = match col.validity() {
            Some(nulls) => {
                out.validity = select_null_bits(nulls, start, col.len() - start, sel);
                true
            }
            None => false,
        };
        Ok(())
    }

    /// Appends rows `a..b` of main block `block` to `dst`, decoded
    /// straight into it, when this is an integer column of the I64 domain
    /// with no NULLs in main storage; `false` (nothing appended) otherwise.
    /// The output path of plain column gathers: no vector in between.
    pub fn extend_main_i64(&self, block: usize, a: usize, b: usize, scratch: &mut Scratch, dst: &mut Vec<i64>) -> bool {
        let Some(col) = self.main else { return false };
        let Some(keys) = col.keys() else { return false };
        if col.validity().is_some() || !is_int64_domain(self.physical) {
            return false;
        }
        let value = |key| key_value_i64(self.physical, key) as u64;
        if !keys.extend_i64(block, a..b, value, dst) {
            keys.gather(block, Sel::Range(a, b), &mut scratch.keys, &mut scratch.block);
            // Signed keys are stored with their sign bit flipped.
            let flip = key_value_i64(self.physical, 0) as u64;
            dst.extend(scratch.keys[..b - a].iter().map(|&k| (k ^ flip) as i64));
        }
        true
    }

    /// Decodes the rows `sel` of delta chunk `chunk` into `out`.
    pub fn fetch_delta(&self, chunk: usize, sel: Sel<'_>, out: &mut NumVector) -> Result<()> {
        out.len = sel.lanes();
        macro_rules! convert {
            ($native:ty, $variant:ident, $conv:expr) => {{
                let src: &[$native] = self.delta.values(chunk);
                let Values::$variant(dst) = &mut out.values else {
                    return Err(Error::Internal("delta fetch into a vector of another domain".into()));
                };
                let conv = $conv;
                match sel {
                    Sel::Range(a, b) => {
                        for (d, s) in dst.iter_mut().zip(&src[a..b]) {
                            *d = conv(*s);
                        }
                    }
                    _ => sel_for_each_row(sel, |lane, offset| dst[lane] = conv(src[offset])),
                }
            }};
        }
        match self.physical {
            PhysicalType::Boolean => {
                let mut words = [0u64; WORDS];
                self.delta.booleans(chunk, &mut words);
                let Values::I64(dst) = &mut out.values else {
                    return Err(Error::Internal("boolean fetch into a non-I64 vector".into()));
                };
                sel_for_each_row(sel, |lane, offset| dst[lane] = (words[offset / 64] >> (offset % 64) & 1) as i64);
            }
            PhysicalType::Int8 => convert!(i8, I64, |v: i8| v as i64),
            PhysicalType::Int16 => convert!(i16, I64, |v: i16| v as i64),
            PhysicalType::Int32 => convert!(i32, I64, |v: i32| v as i64),
            PhysicalType::Int64 => convert!(i64, I64, |v: i64| v),
            PhysicalType::UInt8 => convert!(u8, I64, |v: u8| v as i64),
            PhysicalType::UInt16 => convert!(u16, I64, |v: u16| v as i64),
            PhysicalType::UInt32 => convert!(u32, I64, |v: u32| v as i64),
            PhysicalType::UInt64 => convert!(u64, U64, |v: u64| v),
            PhysicalType::Float32 => convert!(f32, F64, |v: f32| v as f64),
            PhysicalType::Float64 => convert!(f64, F64, |v: f64| v),
            PhysicalType::Decimal128 => convert!(i128, I128, |v: i128| v),
            PhysicalType::Bytes => return Err(Error::Internal("numeric fetch of a bytes column".into())),
        }
        let mut words = [0u64; WORDS];
        out.has_nulls = self.delta.validity(chunk, &mut words);
        if out.has_nulls {
            out.validity = select_bits(&words, sel);
        }
        Ok(())
    }

    /// The validity of the rows `sel` of main block `block`, or `None` when
    /// the column has no nulls.
    pub fn main_validity(&self, block: usize, sel: Sel<'_>) -> Option<Bits> {
        let col = self.main?;
        let start = block * LANES;
        col.validity().map(|nulls| select_null_bits(nulls, start, col.len() - start, sel))
    }

    /// The validity of the rows `sel` of delta chunk `chunk`, or `None`
    /// when no row of the chunk can be null.
    pub fn delta_validity(&self, chunk: usize, sel: Sel<'_>) -> Option<Bits> {
        let mut words = [0u64; WORDS];
        self.delta.validity(chunk, &mut words).then(|| select_bits(&words, sel))
    }
}

/// Calls `f(lane, offset)` for every lane of `sel` (active or not).
#[inline]
fn sel_for_each_row(sel: Sel<'_>, mut f: impl FnMut(usize, usize)) {
    match sel {
        Sel::Range(a, b) => (a..b).enumerate().for_each(|(l, o)| f(l, o)),
        Sel::Mask(_, len) => (0..len).for_each(|o| f(o, o)),
        Sel::Ids(ids, base) => ids.iter().enumerate().for_each(|(l, &id)| f(l, (id - base) as usize)),
    }
}

/// Gathers the keys of the rows `sel` of block `block` of `src` into
/// `scratch.keys`, one per lane.
#[inline]
pub(crate) fn gather_keys(src: &impl KeySource, block: usize, sel: Sel<'_>, scratch: &mut Scratch) {
    src.gather(block, sel, &mut scratch.keys, &mut scratch.block);
}

/// True for the physical types whose I64-domain value is `key - reference`
/// arithmetic-compatible (integers that fit i64).
fn is_int64_domain(p: PhysicalType) -> bool {
    matches!(
        p,
        PhysicalType::Int8
            | PhysicalType::Int16
            | PhysicalType::Int32
            | PhysicalType::Int64
            | PhysicalType::UInt8
            | PhysicalType::UInt16
            | PhysicalType::UInt32
    )
}

/// The I64-domain value of a key of an integer physical type.
#[inline]
fn key_value_i64(p: PhysicalType, key: u64) -> i64 {
    match p {
        PhysicalType::UInt8 | PhysicalType::UInt16 | PhysicalType::UInt32 => key as i64,
        _ => (key ^ SIGN_BIT) as i64,
    }
}

/// Converts keys to values of the physical type's domain.
pub(crate) fn keys_to_values(physical: PhysicalType, keys: &[u64], out: &mut Values) -> Result<()> {
    match (physical, out) {
        (PhysicalType::Int8 | PhysicalType::Int16 | PhysicalType::Int32 | PhysicalType::Int64, Values::I64(dst)) => {
            for (d, &k) in dst.iter_mut().zip(keys) {
                *d = (k ^ SIGN_BIT) as i64;
            }
        }
        (
            PhysicalType::Boolean | PhysicalType::UInt8 | PhysicalType::UInt16 | PhysicalType::UInt32,
            Values::I64(dst),
        ) => {
            for (d, &k) in dst.iter_mut().zip(keys) {
                *d = k as i64;
            }
        }
        (PhysicalType::UInt64, Values::U64(dst)) => dst[..keys.len()].copy_from_slice(keys),
        (PhysicalType::Float32, Values::F64(dst)) => {
            for (d, &k) in dst.iter_mut().zip(keys) {
                *d = f32::from_key(k) as f64;
            }
        }
        (PhysicalType::Float64, Values::F64(dst)) => {
            for (d, &k) in dst.iter_mut().zip(keys) {
                *d = f64::from_key(k);
            }
        }
        (PhysicalType::Decimal128, Values::I128(dst)) => {
            for (d, &k) in dst.iter_mut().zip(keys) {
                *d = (k ^ SIGN_BIT) as i64 as i128;
            }
        }
        (p, _) => return Err(Error::Internal(format!("keys of {p:?} into a vector of another domain"))),
    }
    Ok(())
}

/// The value of one key in `domain`, for the physical type.
pub fn key_to_num(physical: PhysicalType, key: u64) -> crate::Num {
    use crate::Num;
    match physical {
        PhysicalType::Int8 | PhysicalType::Int16 | PhysicalType::Int32 | PhysicalType::Int64 => {
            Num::I64((key ^ SIGN_BIT) as i64)
        }
        PhysicalType::UInt64 => Num::U64(key),
        PhysicalType::Float32 => Num::F64(f32::from_key(key) as f64),
        PhysicalType::Float64 => Num::F64(f64::from_key(key)),
        PhysicalType::Decimal128 => Num::I128((key ^ SIGN_BIT) as i64 as i128),
        _ => Num::I64(key as i64),
    }
}

/// The domain of a column's values.
pub fn domain_of(physical: PhysicalType) -> Option<Domain> {
    Some(match physical {
        PhysicalType::UInt64 => Domain::U64,
        PhysicalType::Float32 | PhysicalType::Float64 => Domain::F64,
        PhysicalType::Decimal128 => Domain::I128,
        PhysicalType::Bytes => return None,
        _ => Domain::I64,
    })
}

/// Validity bits of the rows `sel` of a block starting at row `start`
/// (`remaining` rows from there to the column's end).
fn select_null_bits(nulls: &NullBuffer, start: usize, remaining: usize, sel: Sel<'_>) -> Bits {
    let block_len = remaining.min(LANES);
    let bits = nulls.inner();
    let chunks = BitChunks::new(bits.values(), bits.offset() + start, block_len);
    let mut words = [0u64; WORDS];
    for (w, c) in words.iter_mut().zip(chunks.iter_padded()) {
        *w = c;
    }
    select_bits(&words, sel)
}

/// The bits of `words` (offsets of a block) for the lanes of `sel`.
pub(crate) fn select_bits(words: &[u64; WORDS], sel: Sel<'_>) -> Bits {
    match sel {
        Sel::Range(0, b) => Bits(*words).and(&Bits::first(b)),
        Sel::Range(a, b) => {
            let chunks = BitChunks::new(words.to_byte_slice(), a, b - a);
            let mut out = [0u64; WORDS];
            for (w, c) in out.iter_mut().zip(chunks.iter_padded()) {
                *w = c;
            }
            Bits(out)
        }
        Sel::Mask(_, len) => Bits(*words).and(&Bits::first(len)),
        Sel::Ids(ids, base) => {
            let mut out = Bits::EMPTY;
            for (lane, &id) in ids.iter().enumerate() {
                let o = (id - base) as usize;
                if words[o / 64] >> (o % 64) & 1 == 1 {
                    out.set(lane);
                }
            }
            out
        }
    }
}

#[cfg(test)]
mod tests;
