//! The delta: a shard's columnar, append-only buffer of recent rows.
//!
//! ```text
//!   Delta (capacity = shard capacity - main rows)
//!   ├─ column 0: chunk 0 [1,024 rows] chunk 1 [1,024 rows] chunk 2 [..]  (allocated on first write)
//!   │            values: fixed-width bytes | bit-packed booleans | u64 offsets + byte page
//!   │            validity: bitmap, only for nullable columns
//!   ├─ column 1: ...
//!   └─ committed: rows visible to readers (Release store / Acquire load)
//! ```
//!
//! Writers copy Arrow column slices (values, offsets, validity) into the
//! chunks past the committed length, then the table publishes the new
//! length in its state after calling `Delta::commit`. Readers take a
//! length from a snapshot and read only below it: nothing is copied, no
//! lock is taken, and a reader never sees a half-written row. Chunks never
//! move. A chunk's string bytes live in one page; when it fills, the writer
//! copies it into a page twice the size and swaps the page pointer
//! (readers holding the old page keep it alive), so every page holds all
//! committed bytes.

mod buffer;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use arrow_buffer::{ArrowNativeType, BooleanBuffer, BooleanBufferBuilder, NullBuffer, ToByteSlice};
use arrow_schema::DataType;

use crate::block::BLOCK_SIZE;
use crate::error::{Error, Result};
use crate::output::{boolean_array, bytes_array, normalize_nulls, primitive_array};
use crate::types::{PhysicalType, TableSchema, with_native};
use buffer::{BitWords, RawAppend};

use crate::main::decode::Rows;

/// Rows per delta chunk: one block, so a delta chunk is scanned like a main block.
pub const DELTA_CHUNK_ROWS: usize = BLOCK_SIZE;

/// Initial bytes reserved per row of a string chunk's page; a page doubles
/// when full, so this only sets how soon the first copy happens.
const INITIAL_BYTES_PER_ROW: usize = 16;

/// A single value prepared for [`Delta::write_row`] (see `ingest::encode_value`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cell<'a> {
    Null,
    Fixed([u8; 16]),
    Bool(bool),
    Bytes(&'a [u8]),
}

/// A shard's delta.
#[derive(Debug)]
pub struct Delta {
    capacity: usize,
    committed: AtomicUsize,
    write_lock: Mutex<()>,
    columns: Box<[DeltaColumn]>,
}

/// One column of a delta.
#[derive(Debug)]
pub struct DeltaColumn {
    data_type: DataType,
    physical: PhysicalType,
    nullable: bool,
    capacity: usize,
    chunks: Box<[OnceLock<Chunk>]>,
}

#[derive(Debug)]
struct Chunk {
    values: ChunkValues,
    validity: Option<BitWords>,
}

#[derive(Debug)]
enum ChunkValues {
    Fixed(RawAppend),
    Bool(BitWords),
    Bytes(BytesChunk),
}

#[derive(Debug)]
struct BytesChunk {
    /// `rows + 1` u64 offsets into the page; offset 0 is written at creation.
    offsets: RawAppend,
    page: ArcSwap<RawAppend>,
}

impl Delta {
    /// An empty delta for up to `capacity` rows of `schema`.
    pub(crate) fn new(schema: &TableSchema, capacity: usize) -> Self {
        let columns = (0..schema.len())
            .map(|i| DeltaColumn {
                data_type: schema.field(i).data_type().clone(),
                physical: schema.physical(i),
                nullable: schema.field(i).is_nullable(),
                capacity,
                chunks: (0..capacity.div_ceil(DELTA_CHUNK_ROWS)).map(|_| OnceLock::new()).collect(),
            })
            .collect();
        Self { capacity, committed: AtomicUsize::new(0), write_lock: Mutex::new(()), columns }
    }

    /// Maximum number of rows.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Rows visible to readers.
    pub fn committed(&self) -> usize {
        self.committed.load(Ordering::Acquire)
    }

    /// Makes rows `..len` visible. Lengths only grow.
    pub(crate) fn commit(&self, len: usize) {
        debug_assert!(len <= self.capacity);
        debug_assert!(len >= self.committed.load(Ordering::Relaxed));
        self.committed.store(len, Ordering::Release);
    }

    /// Column `i`.
    pub fn column(&self, i: usize) -> &DeltaColumn {
        &self.columns[i]
    }

    /// Number of columns.
    pub fn num_columns(&self) -> usize {
        self.columns.len()
    }

    /// Checks that `at .. at + len` lies past the committed rows and within capacity.
    fn check_write(&self, at: usize, len: usize) -> Result<()> {
        let committed = self.committed.load(Ordering::Acquire);
        if at < committed || at + len > self.capacity {
            return Err(Error::Internal(format!(
                "delta write of rows {at}..{} with {committed} committed and capacity {}",
                at + len,
                self.capacity
            )));
        }
        Ok(())
    }

    /// Copies rows `offset .. offset + len` of the validated `columns` to
    /// delta rows `at ..`. Nothing becomes visible before [`Delta::commit`].
    pub(crate) fn write_batch(&self, at: usize, columns: &[ArrayRef], offset: usize, len: usize) -> Result<()> {
        let _guard = self.write_lock.lock().map_err(|_| poisoned())?;
        self.check_write(at, len)?;
        for (col, array) in self.columns.iter().zip(columns) {
            col.write(at, array.as_ref(), offset, len)?;
        }
        Ok(())
    }

    /// Writes one row at delta row `at`, column `i` holding `cell(i)`.
    pub(crate) fn write_row<'a>(&self, at: usize, cell: impl Fn(usize) -> Result<Cell<'a>>) -> Result<()> {
        let _guard = self.write_lock.lock().map_err(|_| poisoned())?;
        self.check_write(at, 1)?;
        for (i, col) in self.columns.iter().enumerate() {
            col.write_cell(at, &cell(i)?);
        }
        Ok(())
    }

    /// Bytes allocated by the delta's chunks.
    pub fn size_bytes(&self) -> usize {
        self.columns.iter().map(DeltaColumn::size_bytes).sum()
    }

    /// A reader of the first `len` rows (a snapshot's delta length, which
    /// never exceeds the committed length).
    pub fn reader(&self, len: usize) -> DeltaReader<'_> {
        assert!(len <= self.committed(), "a snapshot never sees uncommitted delta rows");
        DeltaReader { delta: self, len }
    }
}

/// Read access to the committed rows `0 .. len` of a delta, chunk by chunk
/// (chunk `c` holds rows `c * 1024 ..`).
#[derive(Debug, Clone, Copy)]
pub struct DeltaReader<'a> {
    delta: &'a Delta,
    len: usize,
}

impl<'a> DeltaReader<'a> {
    /// Rows readable.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of chunks holding the rows.
    pub fn num_chunks(&self) -> usize {
        self.len.div_ceil(DELTA_CHUNK_ROWS)
    }

    /// Rows of chunk `c` within the readable length.
    pub fn chunk_len(&self, c: usize) -> usize {
        (self.len - c * DELTA_CHUNK_ROWS).min(DELTA_CHUNK_ROWS)
    }

    /// Column `i`.
    pub fn column(&self, i: usize) -> DeltaColumnReader<'a> {
        DeltaColumnReader { col: &self.delta.columns[i], len: self.len }
    }
}

/// Read access to one column of a [`DeltaReader`].
#[derive(Debug, Clone, Copy)]
pub struct DeltaColumnReader<'a> {
    col: &'a DeltaColumn,
    len: usize,
}

impl<'a> DeltaColumnReader<'a> {
    /// The column's physical type.
    pub fn physical(&self) -> PhysicalType {
        self.col.physical
    }

    /// The column's Arrow type.
    pub fn data_type(&self) -> &'a DataType {
        &self.col.data_type
    }

    fn chunk_len(&self, c: usize) -> usize {
        (self.len - c * DELTA_CHUNK_ROWS).min(DELTA_CHUNK_ROWS)
    }

    /// The fixed-width values of chunk `c`. `T` must be the native type of
    /// the column's physical type.
    pub fn values<T: ArrowNativeType>(&self, c: usize) -> &'a [T] {
        assert_eq!(size_of::<T>(), self.col.physical.byte_width(), "native type of the column");
        self.col.fixed::<T>(c, 0, self.chunk_len(c))
    }

    /// Writes chunk `c`'s validity into `out` (bit `i` = row `i` is valid;
    /// bits past the chunk's rows are zero). Returns false, leaving `out`
    /// untouched, when the column has no validity bitmap (no row is null).
    pub fn validity(&self, c: usize, out: &mut [u64; 16]) -> bool {
        match &self.col.chunk(c).validity {
            None => false,
            Some(bits) => {
                copy_words(bits, self.chunk_len(c), out);
                true
            }
        }
    }

    /// Writes chunk `c`'s boolean values into `out` (booleans only).
    pub fn booleans(&self, c: usize, out: &mut [u64; 16]) {
        match &self.col.chunk(c).values {
            ChunkValues::Bool(bits) => copy_words(bits, self.chunk_len(c), out),
            _ => panic!("booleans() of a non-boolean column"),
        }
    }

    /// The byte values of chunk `c` (strings and binary only).
    pub fn bytes(&self, c: usize) -> DeltaBytes<'a> {
        let ChunkValues::Bytes(b) = &self.col.chunk(c).values else { panic!("bytes() of a non-bytes column") };
        let rows = self.chunk_len(c);
        // SAFETY: offsets `..=rows` of committed rows are written and never change.
        let offsets = unsafe { b.offsets.slice::<u64>(0, rows + 1) };
        DeltaBytes { offsets, page: b.page.load_full() }
    }
}

/// The committed byte values of one delta chunk; holds the chunk's page.
#[derive(Debug, Clone)]
pub struct DeltaBytes<'a> {
    offsets: &'a [u64],
    page: Arc<RawAppend>,
}

impl DeltaBytes<'_> {
    /// Number of values.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// True when there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Value `i` (empty for a null row).
    #[inline]
    pub fn get(&self, i: usize) -> &[u8] {
        let (s, e) = (self.offsets[i] as usize, self.offsets[i + 1] as usize);
        // SAFETY: committed bytes `s..e` are in every page published after
        // they were written, including this one.
        unsafe { self.page.slice::<u8>(s, e - s) }
    }
}

/// Copies the first `rows` bits of `bits` into `out`, zeroing the rest.
fn copy_words(bits: &BitWords, rows: usize, out: &mut [u64; 16]) {
    for (w, slot) in out.iter_mut().enumerate() {
        let lo = w * 64;
        *slot = if lo >= rows {
            0
        } else if rows - lo >= 64 {
            bits.word(w)
        } else {
            bits.word(w) & ((1u64 << (rows - lo)) - 1)
        };
    }
}

fn poisoned() -> Error {
    Error::Internal("a delta writer panicked while holding its lock".into())
}

impl DeltaColumn {
    /// The Arrow type decodes produce.
    pub fn data_type(&self) -> &DataType {
        &self.data_type
    }

    /// The physical type.
    pub fn physical(&self) -> PhysicalType {
        self.physical
    }

    fn chunk_rows(&self, chunk: usize) -> usize {
        (self.capacity - chunk * DELTA_CHUNK_ROWS).min(DELTA_CHUNK_ROWS)
    }

    /// Chunk `c`, created on first use (writers only).
    fn chunk_mut(&self, c: usize) -> &Chunk {
        self.chunks[c].get_or_init(|| {
            let rows = self.chunk_rows(c);
            let values = match self.physical {
                PhysicalType::Boolean => ChunkValues::Bool(BitWords::new(rows)),
                PhysicalType::Bytes => {
                    let offsets = RawAppend::new((rows + 1) * 8);
                    // SAFETY: the chunk is not yet shared; offset 0 is
                    // written before any reader can reach it.
                    unsafe { offsets.write(0, 0u64.to_byte_slice()) };
                    ChunkValues::Bytes(BytesChunk {
                        offsets,
                        page: ArcSwap::from_pointee(RawAppend::new(rows * INITIAL_BYTES_PER_ROW)),
                    })
                }
                p => ChunkValues::Fixed(RawAppend::new(rows * p.byte_width())),
            };
            Chunk { values, validity: self.nullable.then(|| BitWords::new(rows)) }
        })
    }

    /// Chunk `c` for reading rows that were committed.
    fn chunk(&self, c: usize) -> &Chunk {
        self.chunks[c].get().expect("committed delta rows live in initialised chunks")
    }

    /// Splits rows `at .. at + len` at chunk boundaries: `(chunk, row in chunk, source row, count)`.
    fn pieces(at: usize, len: usize) -> impl Iterator<Item = (usize, usize, usize, usize)> {
        let mut done = 0;
        std::iter::from_fn(move || {
            (done < len).then(|| {
                let pos = at + done;
                let (c, r) = (pos / DELTA_CHUNK_ROWS, pos % DELTA_CHUNK_ROWS);
                let n = (DELTA_CHUNK_ROWS - r).min(len - done);
                let piece = (c, r, done, n);
                done += n;
                piece
            })
        })
    }

    fn write(&self, at: usize, array: &dyn Array, offset: usize, len: usize) -> Result<()> {
        if crate::row_encoded::is_row_encoded(&self.data_type) && array.data_type() != &DataType::Binary {
            let rows = crate::row_encoded::encode(array.slice(offset, len).as_ref())?;
            return self.write(at, rows.as_ref(), 0, len);
        }
        let nulls = array.nulls().map(|n| n.inner().slice(offset, len));
        let data = array.to_data();
        for (c, r, src, n) in Self::pieces(at, len) {
            let chunk = self.chunk_mut(c);
            if let Some(validity) = &chunk.validity {
                match &nulls {
                    Some(bits) => validity.write(r, &bits.slice(src, n)),
                    None => validity.write(r, &BooleanBuffer::new_set(n)),
                }
            }
            let first = offset + src;
            match &chunk.values {
                ChunkValues::Fixed(raw) => {
                    let w = self.physical.byte_width();
                    let start = (data.offset() + first) * w;
                    let bytes = &data.buffers()[0].as_slice()[start..start + n * w];
                    // SAFETY: `Delta::check_write` verified the rows lie past
                    // the committed length, and `Delta::write_lock` is held.
                    unsafe { raw.write(r * w, bytes) };
                }
                ChunkValues::Bool(bits) => {
                    bits.write(r, &array.as_boolean().values().slice(first, n));
                }
                ChunkValues::Bytes(bytes) => match array.data_type() {
                    DataType::Utf8 | DataType::Binary => {
                        bytes.write_offsets(r, &data.buffer::<i32>(0)[first..=first + n], data.buffers()[1].as_slice())
                    }
                    DataType::LargeUtf8 | DataType::LargeBinary => {
                        bytes.write_offsets(r, &data.buffer::<i64>(0)[first..=first + n], data.buffers()[1].as_slice())
                    }
                    DataType::Utf8View => {
                        let a = array.as_string_view();
                        bytes.write(r, n, |i| a.value(first + i).as_bytes());
                    }
                    DataType::BinaryView => {
                        let a = array.as_binary_view();
                        bytes.write(r, n, |i| a.value(first + i));
                    }
                    other => {
                        return Err(Error::Internal(format!("bytes column written from {other}")));
                    }
                },
            }
        }
        Ok(())
    }

    fn write_cell(&self, at: usize, cell: &Cell<'_>) {
        let (c, r) = (at / DELTA_CHUNK_ROWS, at % DELTA_CHUNK_ROWS);
        let chunk = self.chunk_mut(c);
        if let Some(validity) = &chunk.validity {
            validity.write_bit(r, !matches!(cell, Cell::Null));
        }
        match (&chunk.values, cell) {
            (ChunkValues::Fixed(raw), Cell::Fixed(bytes)) => {
                let w = self.physical.byte_width();
                // SAFETY: as in `write`: past the committed length, under the write lock.
                unsafe { raw.write(r * w, &bytes[..w]) };
            }
            (ChunkValues::Bool(bits), Cell::Bool(b)) => bits.write_bit(r, *b),
            (ChunkValues::Bytes(b), Cell::Bytes(v)) => b.write(r, 1, |_| v),
            (ChunkValues::Fixed(raw), Cell::Null) => {
                let w = self.physical.byte_width();
                // SAFETY: as above.
                unsafe { raw.write(r * w, &[0u8; 16][..w]) };
            }
            (ChunkValues::Bool(bits), Cell::Null) => bits.write_bit(r, false),
            (ChunkValues::Bytes(b), Cell::Null) => b.write(r, 1, |_| &[]),
            _ => unreachable!("ingest::encode_value produces cells of the column's physical type"),
        }
    }

    /// Bytes allocated.
    pub fn size_bytes(&self) -> usize {
        self.chunks
            .iter()
            .filter_map(OnceLock::get)
            .map(|chunk| {
                let values = match &chunk.values {
                    ChunkValues::Fixed(raw) => raw.capacity(),
                    ChunkValues::Bool(bits) => bits.size_bytes(),
                    ChunkValues::Bytes(b) => b.offsets.capacity() + b.page.load().capacity(),
                };
                values + chunk.validity.as_ref().map_or(0, BitWords::size_bytes)
            })
            .sum()
    }

    /// Decodes rows of a delta whose committed length is at least `len`
    /// (`rows` relative to the delta's first row) to an Arrow array.
    pub(crate) fn decode(&self, len: usize, rows: Rows<'_>) -> Result<ArrayRef> {
        let n = rows.len();
        let in_bounds = match rows {
            Rows::Range(start, count) => start + count <= len,
            Rows::Ids(ids) => ids.iter().all(|&i| (i as usize) < len),
        };
        if !in_bounds {
            return Err(Error::Internal(format!("delta decode past its {len} rows")));
        }
        let nulls = if self.nullable {
            normalize_nulls(Some(NullBuffer::new(self.bits(rows, |c| c.validity.as_ref()))))
        } else {
            None
        };
        with_native!(self.physical,
            T => {
                let mut out: Vec<T> = Vec::with_capacity(n);
                match rows {
                    Rows::Range(start, count) => {
                        for (c, r, _, k) in Self::pieces(start, count) {
                            out.extend_from_slice(self.fixed::<T>(c, r, k));
                        }
                    }
                    Rows::Ids(ids) => out.extend(ids.iter().map(|&id| {
                        let id = id as usize;
                        self.fixed::<T>(id / DELTA_CHUNK_ROWS, id % DELTA_CHUNK_ROWS, 1)[0]
                    })),
                }
                primitive_array(&self.data_type, out, nulls)
            },
            bool => Ok(boolean_array(
                self.bits(rows, |c| match &c.values { ChunkValues::Bool(b) => Some(b), _ => None }),
                nulls,
            )),
            bytes => {
                let reader = BytesReader::new(self, rows);
                let stored = crate::row_encoded::stored_type(&self.data_type);
                let array = match rows {
                    Rows::Range(start, _) => bytes_array(stored, n, nulls, |i| reader.get(start + i)),
                    Rows::Ids(ids) => bytes_array(stored, n, nulls, |i| reader.get(ids[i] as usize)),
                }?;
                crate::row_encoded::decode(array, &self.data_type)
            },
        )
    }

    /// Committed fixed-width values `r .. r + k` of chunk `c`.
    fn fixed<T: ArrowNativeType>(&self, c: usize, r: usize, k: usize) -> &[T] {
        match &self.chunk(c).values {
            ChunkValues::Fixed(raw) => {
                debug_assert_eq!(size_of::<T>(), self.physical.byte_width());
                // SAFETY: callers pass rows below a snapshot length, which
                // is at most the committed length: written, published with
                // Release, never written again.
                unsafe { raw.slice::<T>(r, k) }
            }
            _ => unreachable!("fixed-width column has fixed-width chunks"),
        }
    }

    /// A bitmap (validity or boolean values, chosen by `pick`) for `rows`;
    /// all-set where `pick` yields no bitmap.
    fn bits<'a>(&'a self, rows: Rows<'_>, pick: impl Fn(&'a Chunk) -> Option<&'a BitWords>) -> BooleanBuffer {
        match rows {
            Rows::Range(start, count) => {
                let mut out = BooleanBufferBuilder::new(count);
                for (c, r, _, k) in Self::pieces(start, count) {
                    match pick(self.chunk(c)) {
                        Some(bits) => out.append_buffer(&bits.to_buffer(r, k)),
                        None => out.append_n(k, true),
                    }
                }
                out.finish()
            }
            Rows::Ids(ids) => BooleanBuffer::collect_bool(ids.len(), |i| {
                let id = ids[i] as usize;
                pick(self.chunk(id / DELTA_CHUNK_ROWS)).is_none_or(|b| b.get(id % DELTA_CHUNK_ROWS))
            }),
        }
    }
}

impl BytesChunk {
    /// Makes room for `total` more bytes after the value ending chunk row
    /// `r`; returns the page to write to and the byte offset of row `r`.
    fn reserve(&self, r: usize, total: usize) -> (Arc<RawAppend>, usize) {
        // SAFETY: offset `r` is committed or was written by this writer.
        let base = unsafe { self.offsets.slice::<u64>(r, 1)[0] } as usize;
        let page = self.page.load_full();
        if base + total <= page.capacity() {
            return (page, base);
        }
        let grown = RawAppend::new((base + total).max(2 * page.capacity()));
        // SAFETY: `..base` is committed or this writer's own bytes; the new
        // page is not shared until the swap below.
        unsafe { grown.write(0, page.slice::<u8>(0, base)) };
        let grown = Arc::new(grown);
        self.page.store(Arc::clone(&grown));
        (grown, base)
    }

    /// Writes the values delimited by `offsets` (`n + 1` entries into
    /// `values`) at chunk rows `r .. r + n`: one copy of the bytes, offsets
    /// rebased onto the page.
    fn write_offsets<O: Copy + Into<i64>>(&self, r: usize, offsets: &[O], values: &[u8]) {
        let n = offsets.len() - 1;
        let first = offsets[0].into() as usize;
        let last = offsets[n].into() as usize;
        let (page, base) = self.reserve(r, last - first);
        let mut rebased = [0u64; DELTA_CHUNK_ROWS];
        for (dst, o) in rebased.iter_mut().zip(&offsets[1..]) {
            *dst = (base + (*o).into() as usize - first) as u64;
        }
        // SAFETY: bytes past `base` and offsets past `r` belong to
        // uncommitted rows, written only by the delta's single writer.
        unsafe {
            page.write(base, &values[first..last]);
            self.offsets.write((r + 1) * 8, rebased[..n].to_byte_slice());
        }
    }

    /// Writes `n` values at chunk rows `r ..`, value `i` being `value(i)`.
    fn write<'v>(&self, r: usize, n: usize, value: impl Fn(usize) -> &'v [u8]) {
        let total: usize = (0..n).map(|i| value(i).len()).sum();
        let (page, base) = self.reserve(r, total);
        let mut end = base;
        for i in 0..n {
            let v = value(i);
            // SAFETY: as in `write_offsets`.
            unsafe {
                page.write(end, v);
                end += v.len();
                self.offsets.write((r + i + 1) * 8, (end as u64).to_byte_slice());
            }
        }
    }
}

/// Reads committed values of a bytes column, holding each chunk's page.
struct BytesReader<'a> {
    chunks: Vec<Option<(&'a [u64], Arc<RawAppend>)>>,
}

impl<'a> BytesReader<'a> {
    fn new(col: &'a DeltaColumn, rows: Rows<'_>) -> Self {
        let (lo, hi) = match rows {
            Rows::Range(start, count) => (start, start + count),
            Rows::Ids(ids) => {
                (ids.iter().min().map_or(0, |&i| i as usize), ids.iter().max().map_or(0, |&i| i as usize + 1))
            }
        };
        let mut chunks = Vec::new();
        if hi > lo {
            let last = (hi - 1) / DELTA_CHUNK_ROWS;
            for c in 0..=last {
                if c < lo / DELTA_CHUNK_ROWS {
                    chunks.push(None);
                    continue;
                }
                let ChunkValues::Bytes(b) = &col.chunk(c).values else { unreachable!("bytes column has bytes chunks") };
                let rows_here = (hi - c * DELTA_CHUNK_ROWS).min(DELTA_CHUNK_ROWS);
                // SAFETY: offsets `..=rows_here` of committed rows are
                // written and never change.
                let offsets = unsafe { b.offsets.slice::<u64>(0, rows_here + 1) };
                chunks.push(Some((offsets, b.page.load_full())));
            }
        }
        Self { chunks }
    }

    fn get(&self, row: usize) -> &[u8] {
        let (offsets, page) =
            self.chunks[row / DELTA_CHUNK_ROWS].as_ref().expect("reader covers the rows it was built for");
        let r = row % DELTA_CHUNK_ROWS;
        let (s, e) = (offsets[r] as usize, offsets[r + 1] as usize);
        // SAFETY: the committed bytes `s..e` are in every page published
        // after they were written, including this one.
        unsafe { page.slice::<u8>(s, e - s) }
    }
}
