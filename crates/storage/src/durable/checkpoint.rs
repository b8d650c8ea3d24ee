//! Checkpoint files: a shard's main storage written whole, read back
//! without re-encoding.
//!
//! A checkpoint keeps every encoding exactly as the rebuild built it
//! (frames and packed words, dictionaries, runs, zone maps, validity), so
//! loading one copies arrays instead of re-running the rebuild. Arrow
//! types are not stored: they come from the table schema; each column
//! records only its physical type, which must match the schema's.
//!
//! ```text
//!   file     magic "QVMAIN\0\0" · version u32 = 1 · rows u64 · columns u32 · crc u32
//!            └ crc: CRC32C of the 24 bytes before it; columns is 0 when rows is 0
//!              (Main::empty), else the schema's column count
//!            column × columns
//!   column   length u64 · crc u32 (CRC32C of body) · body
//!   body     physical u8 (PHYSICAL_TAGS) · len u64 (= rows)
//!            validity  u8 0  |  u8 1 · ⌈len/8⌉ bytes (bit i = row i valid, bits past len 0)
//!            zones     n u64 = ⌈len/1024⌉ · n × (min u64 · max u64 · null_count u32)
//!            encoding  tag u8, then by tag:
//!     0 constant     key u64 · len u64
//!     1 sequence     len u64 · n u64 · n × (start u32 · base u64 · step u64)
//!     2 bitpacked    packed(len)
//!     3 run-end      n u64 · n × end u32 · n × value u64
//!     4 dictionary   n u64 · n × value u64 · codes: packed(len)
//!     5 plain        n u64 · n × key u64
//!     6 wide         n u64 · n × i128
//!     7 str-dict     n u64 · n × offset u32 (entries + 1) · m u64 · m bytes · codes: packed(len)
//!     8 str-plain    offsets: packed(len + 1) · m u64 · m bytes
//!     9 struct       n u64 (the fields) · n × body(len)
//!    10 list         offsets: body(len + 1), Int64 · m u64 · values: body(m)
//!                    (lists, large lists and maps; a map's values are its entries)
//!    11 fixed list   size u64 · values: body(len × size)
//!    12 str-fsst     n u64 (≤ 255) · n × symbol u64 · n × length u8 (1 to 8)
//!                    · offsets: packed(len + 1) · m u64 · m bytes (the codes)
//!   body(k)    a column's body, as above, of k rows and its child's type
//!   packed(k)  k u64 · n u64 = ⌈k/1024⌉ · n × (reference u64 · delta_sum u64 · offset u32 · width u8)
//!              w u64 · w × word u64
//! ```
//!
//! Integers are little-endian; arrays are stored unaligned and each is
//! copied in one pass into one allocation (string bytes into one Arrow
//! buffer), with no allocation per value.
//!
//! # Validation
//!
//! [`decode_main`] trusts nothing. The checksums catch damage; behind
//! them, everything the decoders and scans index with or rely on is
//! checked before a column is built, so no input makes loading, or later
//! decoding and scanning, panic or read out of bounds:
//!
//! * structure: magic, version, counts that fit the bytes left and agree
//!   with the row count (zones and frames one per 1,024 rows), tags, the
//!   physical type against the schema's, nothing left over;
//! * frames: width ≤ 64 and their `16 × width` words in range; unpacked
//!   once, their exact `delta_sum`, no wrap past `u64::MAX`, padding equal
//!   to the reference;
//! * dictionaries sorted, every code (padding included) below their size;
//!   runs ending ascending at the row count, sequences starting at row 0
//!   and ascending; string offsets ascending from 0 to the byte length,
//!   on character boundaries of valid UTF-8 for string columns (string
//!   arrays are built unchecked in release builds); FSST symbols of 1 to
//!   8 bytes, every value's codes symbols or whole escapes, and every
//!   value UTF-8 once decompressed for string columns;
//! * keys within their physical type's key domain; a validity bitmap only
//!   when there are nulls, no bits past the last row;
//! * nested columns: children of the schema's child types, as many as it
//!   has fields; list offsets without nulls, from 0, ascending to the
//!   values' row count; fixed-size lists of the schema's size; their zones
//!   null counts only;
//! * zones: null counts always; keys exact for blocks without nulls (scans
//!   answer MIN and MAX from them) and, for blocks with nulls, exact or
//!   holding every slot (scans prune and bound sums with them);
//!   dictionary-string zones within the dictionary.
//!
//! Left to the checksums are values that no check can tell from others:
//! string bytes, plain keys and decimals in range, and the prefix keys of
//! plain-string zones (which only prune; recomputing them would cost a pass
//! over every string).

#[cfg(test)]
mod tests;
mod validate;

use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow_schema::DataType;

use super::damage::Damage;
use crate::block::BLOCK_SIZE;
use crate::main::bitpacked::{BitPacked, Frame, WORDS_PER_BIT};
use crate::main::column::{Encoding, Nested};
use crate::main::dict::Dict;
use crate::main::encoding::KeyEncoding;
use crate::main::fsst::StrFsst;
use crate::main::nested::has_child_columns;
use crate::main::run_end::RunEnd;
use crate::main::sequence::{SeqRun, Sequence};
use crate::main::strings::{StrDict, StrPlain};
use crate::main::{Main, MainColumn, Zone};
use crate::state::MAX_SHARD_CAPACITY;
use crate::types::{PhysicalType, TableSchema, is_string};
use validate::{Expect, ZONE_LEN, check_dictionary, check_values};

/// The first eight bytes of every checkpoint file.
const MAGIC: [u8; 8] = *b"QVMAIN\0\0";

/// The format version this build writes and reads.
const VERSION: u32 = 1;

/// Bytes of the file header: magic, version, rows, column count, CRC.
const HEADER_LEN: usize = 8 + 4 + 8 + 4 + 4;
/// Bytes before a column's body: its length and CRC.
const COLUMN_PREFIX: usize = 8 + 4;
/// Bytes of a stored [`Frame`]: reference, delta sum, offset, width.
const FRAME_LEN: usize = 8 + 8 + 4 + 1;
/// Bytes of a stored [`SeqRun`]: start, base, step.
const RUN_LEN: usize = 4 + 8 + 8;

/// Physical types by their on-disk tag (the index). Tags are part of the
/// format: append new types, never reorder.
const PHYSICAL_TAGS: [PhysicalType; 13] = [
    PhysicalType::Boolean,
    PhysicalType::Int8,
    PhysicalType::Int16,
    PhysicalType::Int32,
    PhysicalType::Int64,
    PhysicalType::UInt8,
    PhysicalType::UInt16,
    PhysicalType::UInt32,
    PhysicalType::UInt64,
    PhysicalType::Float32,
    PhysicalType::Float64,
    PhysicalType::Decimal128,
    PhysicalType::Bytes,
];

// Encoding tags (part of the format).
const TAG_CONSTANT: u8 = 0;
const TAG_SEQUENCE: u8 = 1;
const TAG_BITPACKED: u8 = 2;
const TAG_RUN_END: u8 = 3;
const TAG_DICT: u8 = 4;
const TAG_PLAIN: u8 = 5;
const TAG_WIDE: u8 = 6;
const TAG_STR_DICT: u8 = 7;
const TAG_STR_PLAIN: u8 = 8;
const TAG_STRUCT: u8 = 9;
const TAG_LIST: u8 = 10;
const TAG_FIXED_LIST: u8 = 11;
const TAG_STR_FSST: u8 = 12;

// ---------------------------------------------------------------- encoding

/// Serializes a shard's main storage into checkpoint file bytes.
pub(super) fn encode_main(main: &Main) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + main.size_bytes() + main.columns().len() * 64);
    out.extend_from_slice(&MAGIC);
    put_u32(&mut out, VERSION);
    put_u64(&mut out, main.rows() as u64);
    put_u32(&mut out, main.columns().len() as u32);
    let crc = crc32c::crc32c(&out);
    put_u32(&mut out, crc);
    for col in main.columns() {
        put_framed(&mut out, |out| put_column(out, col));
    }
    out
}

/// Appends a column: its body's length and CRC, then the body `body` writes.
fn put_framed(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.resize(at + COLUMN_PREFIX, 0);
    body(out);
    let start = at + COLUMN_PREFIX;
    let len = (out.len() - start) as u64;
    let crc = crc32c::crc32c(&out[start..]);
    out[at..at + 8].copy_from_slice(&len.to_le_bytes());
    out[at + 8..start].copy_from_slice(&crc.to_le_bytes());
}

fn put_column(out: &mut Vec<u8>, col: &MainColumn) {
    out.push(physical_tag(col.physical()));
    put_u64(out, col.len() as u64);
    put_validity(out, col.validity());
    put_u64(out, col.zones().len() as u64);
    put_array(out, col.zones(), zone_to_le);
    put_encoding(out, col.encoding());
}

fn put_validity(out: &mut Vec<u8>, validity: Option<&NullBuffer>) {
    let Some(v) = validity else {
        out.push(0);
        return;
    };
    out.push(1);
    // `sliced` moves the bitmap to bit offset 0 (copying only when the
    // offset is not a whole byte) and is exactly ⌈len/8⌉ bytes.
    let at = out.len();
    out.extend_from_slice(&v.inner().sliced());
    if !v.len().is_multiple_of(8)
        && let Some(last) = out.last_mut()
    {
        *last &= (1u8 << (v.len() % 8)) - 1;
    }
    debug_assert_eq!(out.len() - at, v.len().div_ceil(8));
}

fn put_encoding(out: &mut Vec<u8>, encoding: &Encoding) {
    match encoding {
        Encoding::Keys(KeyEncoding::Constant { key, len }) => {
            out.push(TAG_CONSTANT);
            put_u64(out, *key);
            put_u64(out, *len as u64);
        }
        Encoding::Keys(KeyEncoding::Sequence(s)) => {
            out.push(TAG_SEQUENCE);
            put_u64(out, s.len() as u64);
            put_u64(out, s.runs().len() as u64);
            put_array(out, s.runs(), run_to_le);
        }
        Encoding::Keys(KeyEncoding::BitPacked(p)) => {
            out.push(TAG_BITPACKED);
            put_packed(out, p);
        }
        Encoding::Keys(KeyEncoding::RunEnd(r)) => {
            out.push(TAG_RUN_END);
            put_u64(out, r.ends().len() as u64);
            put_array(out, r.ends(), u32::to_le_bytes);
            put_array(out, r.values(), u64::to_le_bytes);
        }
        Encoding::Keys(KeyEncoding::Dict(d)) => {
            out.push(TAG_DICT);
            put_u64(out, d.values().len() as u64);
            put_array(out, d.values(), u64::to_le_bytes);
            put_packed(out, d.codes());
        }
        Encoding::Keys(KeyEncoding::Plain(keys)) => {
            out.push(TAG_PLAIN);
            put_u64(out, keys.len() as u64);
            put_array(out, keys, u64::to_le_bytes);
        }
        Encoding::Wide(values) => {
            out.push(TAG_WIDE);
            put_u64(out, values.len() as u64);
            put_array(out, values, i128::to_le_bytes);
        }
        Encoding::StrDict(d) => {
            out.push(TAG_STR_DICT);
            put_u64(out, d.dict_offsets().len() as u64);
            put_array(out, d.dict_offsets(), u32::to_le_bytes);
            put_u64(out, d.dict_bytes().len() as u64);
            out.extend_from_slice(d.dict_bytes());
            put_packed(out, d.codes());
        }
        Encoding::StrPlain(p) => {
            out.push(TAG_STR_PLAIN);
            put_packed(out, p.offsets());
            put_u64(out, p.bytes().len() as u64);
            out.extend_from_slice(p.bytes());
        }
        Encoding::StrFsst(f) => {
            out.push(TAG_STR_FSST);
            let (symbols, lengths) = f.symbols();
            put_u64(out, symbols.len() as u64);
            put_array(out, &symbols, u64::to_le_bytes);
            out.extend_from_slice(lengths);
            put_packed(out, f.offsets());
            put_u64(out, f.bytes().len() as u64);
            out.extend_from_slice(f.bytes());
        }
        Encoding::Nested(Nested::Struct(children)) => {
            out.push(TAG_STRUCT);
            put_u64(out, children.len() as u64);
            children.iter().for_each(|c| put_column(out, c));
        }
        Encoding::Nested(Nested::List { offsets, values }) => {
            out.push(TAG_LIST);
            put_column(out, offsets);
            put_u64(out, values.len() as u64);
            put_column(out, values);
        }
        Encoding::Nested(Nested::FixedSizeList { size, values }) => {
            out.push(TAG_FIXED_LIST);
            put_u64(out, *size as u64);
            put_column(out, values);
        }
    }
}

fn put_packed(out: &mut Vec<u8>, packed: &BitPacked) {
    put_u64(out, packed.len() as u64);
    put_u64(out, packed.frames().len() as u64);
    put_array(out, packed.frames(), frame_to_le);
    put_u64(out, packed.words().len() as u64);
    put_array(out, packed.words(), u64::to_le_bytes);
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `values` as `N`-byte records: one resize, then a copy loop the
/// compiler turns into straight stores (a `memcpy` on little-endian).
fn put_array<T: Copy, const N: usize>(out: &mut Vec<u8>, values: &[T], to_le: impl Fn(T) -> [u8; N]) {
    let at = out.len();
    out.resize(at + values.len() * N, 0);
    let (records, _) = out[at..].as_chunks_mut::<N>();
    for (record, &v) in records.iter_mut().zip(values) {
        *record = to_le(v);
    }
}

fn zone_to_le(z: Zone) -> [u8; ZONE_LEN] {
    let mut b = [0; ZONE_LEN];
    b[..8].copy_from_slice(&z.min.to_le_bytes());
    b[8..16].copy_from_slice(&z.max.to_le_bytes());
    b[16..].copy_from_slice(&z.null_count.to_le_bytes());
    b
}

fn frame_to_le(f: Frame) -> [u8; FRAME_LEN] {
    let mut b = [0; FRAME_LEN];
    b[..8].copy_from_slice(&f.reference.to_le_bytes());
    b[8..16].copy_from_slice(&f.delta_sum.to_le_bytes());
    b[16..20].copy_from_slice(&f.offset.to_le_bytes());
    b[20] = f.width;
    b
}

fn run_to_le(r: SeqRun) -> [u8; RUN_LEN] {
    let mut b = [0; RUN_LEN];
    b[..4].copy_from_slice(&r.start.to_le_bytes());
    b[4..12].copy_from_slice(&r.base.to_le_bytes());
    b[12..].copy_from_slice(&r.step.to_le_bytes());
    b
}

/// The on-disk tag of a physical type: its index in [`PHYSICAL_TAGS`].
fn physical_tag(physical: PhysicalType) -> u8 {
    match physical {
        PhysicalType::Boolean => 0,
        PhysicalType::Int8 => 1,
        PhysicalType::Int16 => 2,
        PhysicalType::Int32 => 3,
        PhysicalType::Int64 => 4,
        PhysicalType::UInt8 => 5,
        PhysicalType::UInt16 => 6,
        PhysicalType::UInt32 => 7,
        PhysicalType::UInt64 => 8,
        PhysicalType::Float32 => 9,
        PhysicalType::Float64 => 10,
        PhysicalType::Decimal128 => 11,
        PhysicalType::Bytes => 12,
    }
}

// ---------------------------------------------------------------- decoding

/// Parses checkpoint bytes back into main storage for a table of `schema`;
/// every length and index is checked, so no input can make this (or later
/// decoding/scans of the result) panic or read out of bounds.
pub(super) fn decode_main(bytes: &[u8], schema: &TableSchema) -> Result<Main, Damage> {
    if bytes.get(..MAGIC.len()) != Some(&MAGIC[..]) {
        return Err(Damage::new(0, "not a quiverdb checkpoint file"));
    }
    let mut r = Reader { bytes, pos: MAGIC.len() };
    let version = r.u32("the format version")?;
    if version != VERSION {
        return Err(Damage::new(
            MAGIC.len(),
            format!("unsupported checkpoint format version {version} (this build reads version {VERSION})"),
        ));
    }
    let rows_at = r.pos;
    let rows = r.u64("the row count")?;
    let count_at = r.pos;
    let count = r.u32("the column count")? as usize;
    let crc = r.u32("the header checksum")?;
    if crc != crc32c::crc32c(&bytes[..HEADER_LEN - 4]) {
        return Err(Damage::new(0, "header checksum mismatch"));
    }
    let rows = match usize::try_from(rows) {
        Ok(rows) if rows <= MAX_SHARD_CAPACITY => rows,
        _ => {
            return Err(Damage::new(rows_at, format!("{rows} rows exceed a shard's capacity of {MAX_SHARD_CAPACITY}")));
        }
    };
    if count != schema.len() && !(rows == 0 && count == 0) {
        return Err(Damage::new(count_at, format!("the checkpoint has {count} columns, the table {}", schema.len())));
    }
    let mut columns = Vec::with_capacity(count);
    for i in 0..count {
        let field = schema.field(i);
        let in_column = |d: Damage| Damage { what: format!("column '{}': {}", field.name(), d.what), ..d };
        let length = r.count(1, "the column's bytes").map_err(in_column)?;
        let crc = r.u32("the column checksum").map_err(in_column)?;
        let start = r.pos;
        let body = r.take(length, "the column").map_err(in_column)?;
        if crc32c::crc32c(body) != crc {
            return Err(Damage::new(start, format!("checksum mismatch in column '{}'", field.name())));
        }
        let mut body = Reader { bytes: &bytes[..r.pos], pos: start };
        let column = read_column(&mut body, rows, field.data_type(), schema.physical(i)).map_err(in_column)?;
        if body.pos != r.pos {
            return Err(in_column(Damage::new(body.pos, format!("{} bytes after the encoding", r.pos - body.pos))));
        }
        columns.push(column);
    }
    if r.pos != bytes.len() {
        return Err(Damage::new(r.pos, format!("{} bytes after the last column", bytes.len() - r.pos)));
    }
    // A table without columns keeps its rows too.
    Ok(if rows == 0 && columns.is_empty() { Main::empty(schema.len()) } else { Main::new(rows, columns) })
}

/// A cursor over the file; positions are file offsets, and `bytes` ends
/// where the part being read ends.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Damage> {
        if n > self.left() {
            return Err(Damage::new(self.pos, format!("truncated: {what} needs {n} bytes, {} are left", self.left())));
        }
        let taken = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(taken)
    }

    fn fixed<const N: usize>(&mut self, what: &str) -> Result<[u8; N], Damage> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u8(&mut self, what: &str) -> Result<u8, Damage> {
        Ok(self.fixed::<1>(what)?[0])
    }

    fn u32(&mut self, what: &str) -> Result<u32, Damage> {
        self.fixed(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, Damage> {
        self.fixed(what).map(u64::from_le_bytes)
    }

    /// Reads the count of an array of `size`-byte records, checking the
    /// records fit the bytes left (so no count allocates beyond the input).
    fn count(&mut self, size: usize, what: &str) -> Result<usize, Damage> {
        debug_assert!(size > 0);
        let at = self.pos;
        let n = self.u64(what)?;
        if n > (self.left() / size) as u64 {
            return Err(Damage::new(
                at,
                format!("truncated: {n} × {size} bytes of {what}, {} bytes are left", self.left()),
            ));
        }
        Ok(n as usize)
    }

    /// Reads a count that must equal `expected`, as the column's row count
    /// dictates.
    fn expect(&mut self, size: usize, expected: usize, what: &str) -> Result<(), Damage> {
        let at = self.pos;
        let n = if size == 0 { self.u64(what)? } else { self.count(size, what)? as u64 };
        if n != expected as u64 {
            return Err(Damage::new(at, format!("{n} {what}, expected {expected}")));
        }
        Ok(())
    }

    /// Reads `n` records of `N` bytes (`n` already checked by [`Reader::count`]).
    fn array<T, const N: usize>(
        &mut self,
        n: usize,
        what: &str,
        from_le: impl Fn(&[u8; N]) -> T,
    ) -> Result<Box<[T]>, Damage> {
        let bytes = self.take(n.saturating_mul(N), what)?;
        Ok(bytes.as_chunks::<N>().0.iter().map(from_le).collect())
    }
}

fn le<const N: usize>(record: &[u8], at: usize) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&record[at..at + N]);
    out
}

fn zone_from_le(b: &[u8; ZONE_LEN]) -> Zone {
    Zone {
        min: u64::from_le_bytes(le(b, 0)),
        max: u64::from_le_bytes(le(b, 8)),
        null_count: u32::from_le_bytes(le(b, 16)),
    }
}

fn frame_from_le(b: &[u8; FRAME_LEN]) -> Frame {
    Frame {
        reference: u64::from_le_bytes(le(b, 0)),
        delta_sum: u64::from_le_bytes(le(b, 8)),
        offset: u32::from_le_bytes(le(b, 16)),
        width: b[20],
    }
}

fn run_from_le(b: &[u8; RUN_LEN]) -> SeqRun {
    SeqRun {
        start: u32::from_le_bytes(le(b, 0)),
        base: u64::from_le_bytes(le(b, 4)),
        step: u64::from_le_bytes(le(b, 12)),
    }
}

fn read_column(
    r: &mut Reader<'_>,
    rows: usize,
    data_type: &DataType,
    physical: PhysicalType,
) -> Result<MainColumn, Damage> {
    let at = r.pos;
    let tag = r.u8("the physical type")?;
    let Some(&stored) = PHYSICAL_TAGS.get(tag as usize) else {
        return Err(Damage::new(at, format!("unknown physical type tag {tag}")));
    };
    if stored != physical {
        return Err(Damage::new(
            at,
            format!("stored as {stored:?}, but the table declares {data_type} ({physical:?})"),
        ));
    }
    r.expect(0, rows, "rows")?;
    let validity = read_validity(r, rows)?;
    r.expect(ZONE_LEN, rows.div_ceil(BLOCK_SIZE), "zones")?;
    let zones_at = r.pos;
    let zones = r.array(rows.div_ceil(BLOCK_SIZE), "the zones", zone_from_le)?;
    let expect = Expect { len: rows, validity: validity.as_ref(), zones: &zones, zones_at, at: r.pos };
    let utf8 = is_string(data_type);
    let encoding = read_encoding(r, rows, data_type, physical, utf8)?;
    check_values(&encoding, physical, utf8, &expect)?;
    Ok(MainColumn::from_parts(data_type.clone(), physical, rows, encoding, validity, zones))
}

fn read_validity(r: &mut Reader<'_>, len: usize) -> Result<Option<NullBuffer>, Damage> {
    let at = r.pos;
    match r.u8("the validity flag")? {
        0 => Ok(None),
        1 => {
            let at = r.pos;
            let bits = r.take(len.div_ceil(8), "the validity bitmap")?;
            if !len.is_multiple_of(8) && bits.last().is_some_and(|&b| b >> (len % 8) != 0) {
                return Err(Damage::new(at, "validity bits past the last row are set"));
            }
            let nulls = NullBuffer::new(BooleanBuffer::new(Buffer::from_slice_ref(bits), 0, len));
            if nulls.null_count() == 0 {
                return Err(Damage::new(at, "a validity bitmap without nulls"));
            }
            Ok(Some(nulls))
        }
        flag => Err(Damage::new(at, format!("validity flag {flag} is neither 0 nor 1"))),
    }
}

/// Reads an encoding and checks its structure: counts, bounds and order,
/// everything its constructor relies on. Its values are checked afterwards
/// (`check_values`).
fn read_encoding(
    r: &mut Reader<'_>,
    len: usize,
    data_type: &DataType,
    physical: PhysicalType,
    utf8: bool,
) -> Result<Encoding, Damage> {
    let at = r.pos;
    let tag = r.u8("the encoding tag")?;
    let keys = physical != PhysicalType::Bytes;
    Ok(match tag {
        TAG_STRUCT..=TAG_FIXED_LIST if has_child_columns(data_type) => {
            Encoding::Nested(read_nested(r, tag, len, data_type)?)
        }
        TAG_CONSTANT if keys => {
            let key = r.u64("the constant")?;
            r.expect(0, len, "constant rows")?;
            Encoding::Keys(KeyEncoding::Constant { key, len })
        }
        TAG_SEQUENCE if keys => {
            r.expect(0, len, "sequence rows")?;
            let n = r.count(RUN_LEN, "sequence runs")?;
            let runs_at = r.pos;
            let runs = r.array(n, "the sequence runs", run_from_le)?;
            if runs.is_empty() != (len == 0) {
                return Err(Damage::new(runs_at, format!("{n} sequence runs for {len} rows")));
            }
            for (i, run) in runs.iter().enumerate() {
                let ascends = if i == 0 { run.start == 0 } else { run.start > runs[i - 1].start };
                if !ascends || run.start as usize >= len {
                    return Err(Damage::new(
                        runs_at + i * RUN_LEN,
                        format!("sequence run {i} starts at row {}: runs start at 0 and ascend below {len}", run.start),
                    ));
                }
            }
            Encoding::Keys(KeyEncoding::Sequence(Sequence::from_parts(len, runs)))
        }
        TAG_BITPACKED if keys => Encoding::Keys(KeyEncoding::BitPacked(read_packed(r, len, "values")?)),
        TAG_RUN_END if keys => {
            let n = r.count(4 + 8, "runs")?;
            let ends_at = r.pos;
            let ends = r.array(n, "the run ends", |b: &[u8; 4]| u32::from_le_bytes(*b))?;
            let values = r.array(n, "the run values", |b: &[u8; 8]| u64::from_le_bytes(*b))?;
            let mut prev = 0;
            for (i, &end) in ends.iter().enumerate() {
                if end <= prev {
                    return Err(Damage::new(ends_at + 4 * i, format!("run {i} ends at row {end}, not after {prev}")));
                }
                prev = end;
            }
            if prev as usize != len {
                return Err(Damage::new(ends_at, format!("the runs end at row {prev}, not {len}")));
            }
            Encoding::Keys(KeyEncoding::RunEnd(RunEnd::from_parts(ends, values)))
        }
        TAG_DICT if keys => {
            let n = r.count(8, "dictionary values")?;
            let values_at = r.pos;
            let values = r.array(n, "the dictionary", |b: &[u8; 8]| u64::from_le_bytes(*b))?;
            if let Some(i) = values.windows(2).position(|w| w[0] >= w[1]) {
                return Err(Damage::new(
                    values_at + 8 * (i + 1),
                    format!("dictionary value {} is not above the one before", i + 1),
                ));
            }
            let codes = read_packed(r, len, "codes")?;
            Encoding::Keys(KeyEncoding::Dict(Dict::from_parts(values, codes)))
        }
        TAG_PLAIN if keys => {
            r.expect(8, len, "plain keys")?;
            Encoding::Keys(KeyEncoding::Plain(r.array(len, "the keys", |b: &[u8; 8]| u64::from_le_bytes(*b))?))
        }
        TAG_WIDE if physical == PhysicalType::Decimal128 => {
            r.expect(16, len, "wide values")?;
            Encoding::Wide(r.array(len, "the wide values", |b: &[u8; 16]| i128::from_le_bytes(*b))?)
        }
        TAG_STR_DICT if !keys => {
            let n = r.count(4, "dictionary offsets")?;
            let offsets_at = r.pos;
            let offsets = r.array(n, "the dictionary offsets", |b: &[u8; 4]| u32::from_le_bytes(*b))?;
            let bytes = read_bytes(r)?;
            check_dictionary(&offsets, bytes, utf8).map_err(|(i, reason)| Damage::new(offsets_at + 4 * i, reason))?;
            let codes = read_packed(r, len, "codes")?;
            Encoding::StrDict(StrDict::from_parts(offsets, Buffer::from_slice_ref(bytes), codes))
        }
        TAG_STR_PLAIN if !keys => {
            let offsets = read_packed(r, len + 1, "string offsets")?;
            let bytes = read_bytes(r)?;
            Encoding::StrPlain(StrPlain::from_parts(offsets, Buffer::from_slice_ref(bytes)))
        }
        TAG_STR_FSST if !keys => {
            let n = r.count(9, "symbols")?;
            if n > 255 {
                return Err(Damage::new(at, format!("{n} symbols, more than FSST's 255")));
            }
            let symbols = r.array(n, "the symbols", |b: &[u8; 8]| u64::from_le_bytes(*b))?;
            let lengths_at = r.pos;
            let lengths = r.array(n, "the symbol lengths", |b: &[u8; 1]| b[0])?;
            if let Some(i) = lengths.iter().position(|l| !(1..=8).contains(l)) {
                return Err(Damage::new(
                    lengths_at + i,
                    format!("symbol {i} is {} bytes long, not 1 to 8", lengths[i]),
                ));
            }
            let offsets = read_packed(r, len + 1, "string offsets")?;
            let bytes = read_bytes(r)?;
            Encoding::StrFsst(StrFsst::from_parts(&symbols, &lengths, offsets, Buffer::from_slice_ref(bytes)))
        }
        TAG_CONSTANT..=TAG_STR_FSST => {
            return Err(Damage::new(at, format!("encoding tag {tag} does not apply to {data_type} values")));
        }
        _ => return Err(Damage::new(at, format!("unknown encoding tag {tag}"))),
    })
}

/// Reads the child columns of a nested column of `len` rows and type
/// `data_type`, and checks how they fit together.
fn read_nested(r: &mut Reader<'_>, tag: u8, len: usize, data_type: &DataType) -> Result<Nested, Damage> {
    let child = |r: &mut Reader<'_>, rows: usize, field: &arrow_schema::FieldRef| {
        let physical = PhysicalType::of(field.data_type())
            .ok_or_else(|| Damage::new(r.pos, format!("child type {} is not stored", field.data_type())))?;
        let in_child = |d: Damage| Damage { what: format!("child '{}': {}", field.name(), d.what), ..d };
        read_column(r, rows, field.data_type(), physical).map_err(in_child)
    };
    match (tag, data_type) {
        (TAG_STRUCT, DataType::Struct(fields)) => {
            r.expect(0, fields.len(), "struct fields")?;
            Ok(Nested::Struct(fields.iter().map(|f| child(r, len, f)).collect::<Result<_, _>>()?))
        }
        (TAG_LIST, DataType::List(field) | DataType::LargeList(field) | DataType::Map(field, _)) => {
            let offsets_at = r.pos;
            let offsets_field = arrow_schema::Field::new("offsets", DataType::Int64, false);
            let offsets = child(r, len + 1, &std::sync::Arc::new(offsets_field))?;
            let count_at = r.pos;
            let count = r.u64("the list values")?;
            let values_len = match usize::try_from(count) {
                Ok(n) if n <= u32::MAX as usize => n,
                _ => return Err(Damage::new(count_at, format!("{count} list values exceed a column's {}", u32::MAX))),
            };
            let stored = offsets
                .decode_range(0, len + 1)
                .map_err(|e| Damage::new(offsets_at, format!("the list offsets do not decode: {e}")))?;
            let stored = stored.as_any().downcast_ref::<arrow_array::Int64Array>();
            let bad = match stored {
                None => true,
                Some(array) => {
                    let o = array.values();
                    arrow_array::Array::null_count(array) > 0
                        || o[0] != 0
                        || o.windows(2).any(|w| w[0] > w[1])
                        || o[len] != values_len as i64
                }
            };
            if bad || offsets.null_count() > 0 {
                return Err(Damage::new(
                    offsets_at,
                    format!("the list offsets do not ascend without nulls from 0 to the {values_len} values"),
                ));
            }
            let values = child(r, values_len, field)?;
            Ok(Nested::List { offsets: Box::new(offsets), values: Box::new(values) })
        }
        (TAG_FIXED_LIST, DataType::FixedSizeList(field, width)) => {
            let size_at = r.pos;
            let size = r.u64("the list size")?;
            let rows = (size == *width as u64).then(|| (size as usize).checked_mul(len)).flatten();
            let Some(rows) = rows.filter(|&n| n <= u32::MAX as usize) else {
                return Err(Damage::new(
                    size_at,
                    format!("fixed-size lists of {size} values, the table declares {width}"),
                ));
            };
            Ok(Nested::FixedSizeList { size: size as usize, values: Box::new(child(r, rows, field)?) })
        }
        _ => Err(Damage::new(r.pos, format!("encoding tag {tag} does not apply to {data_type} values"))),
    }
}

/// Reads a bit-packed array of `len` values and checks its frames against
/// its words (its values are checked with the column's, by `validate`).
fn read_packed(r: &mut Reader<'_>, len: usize, what: &str) -> Result<BitPacked, Damage> {
    r.expect(0, len, what)?;
    let blocks = len.div_ceil(BLOCK_SIZE);
    r.expect(FRAME_LEN, blocks, "frames")?;
    let frames_at = r.pos;
    let frames = r.array(blocks, "the frames", frame_from_le)?;
    let n = r.count(8, "packed words")?;
    let words = r.array(n, "the packed words", |b: &[u8; 8]| u64::from_le_bytes(*b))?;
    for (b, f) in frames.iter().enumerate() {
        let end = f.offset as usize + WORDS_PER_BIT * f.width as usize;
        if f.width > 64 || end > n {
            return Err(Damage::new(
                frames_at + b * FRAME_LEN,
                format!("frame {b} (width {}, words {}..{end}) does not fit the {n} packed words", f.width, f.offset),
            ));
        }
    }
    Ok(BitPacked::from_parts(len, frames, words))
}

fn read_bytes<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], Damage> {
    let n = r.count(1, "string bytes")?;
    r.take(n, "the string bytes")
}
