//! Gather: materialise expressions of the streamed rows as Arrow
//! `RecordBatch`es of a target size.
//!
//! ```text
//!   per block:  numeric expr ──eval──▶ vector ──▶ column builder (domain values)
//!               string column ─────────────────▶ column builder (bytes / views)
//!   builders reach the batch size ──▶ RecordBatch (values converted to the
//!                                     declared type; Int64 moves without copy)
//! ```
//!
//! A `Utf8View` or `BinaryView` output of a dictionary-encoded column
//! points its views into the dictionary's buffer instead of copying strings.
//! Structs, lists, maps and the other types the delta keeps in Arrow's row
//! format are gathered as Arrow arrays: main storage decodes the selected
//! rows (from child columns where it has them), the delta decodes its
//! rows' byte strings, and the pieces are concatenated once per batch.

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, make_view};
use arrow_array::{Array, ArrayRef, RecordBatch, RecordBatchOptions, new_empty_array};
use arrow_buffer::{BooleanBufferBuilder, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_data::ArrayDataBuilder;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use quiverdb_storage::TableSchema;

use crate::columns::{ColumnSource, Scratch, ShardColumns, gather_keys};
use crate::error::{Error, Result};
use crate::expr::{CompiledExpr, MapExpr, Operand, Side};
use crate::output::{f64_array, i64_array, native_array};
use crate::scalar::{Domain, Num};
use crate::shard::Kernel;
use crate::vector::Values;
use quiverdb_storage::block::{Bits, LANES, Sel, sel_offsets};

/// Longest value an Arrow view stores inline.
const MAX_INLINE: usize = 12;

/// Name of the shard-id column of [`GatherSpec::with_record_ids`].
pub const SHARD_COLUMN: &str = "__shard";
/// Name of the record-id column of [`GatherSpec::with_record_ids`].
pub const RECORD_COLUMN: &str = "__record";

/// What to gather: named expressions over one table, and the batch size.
#[derive(Debug)]
pub struct GatherSpec {
    table: TableSchema,
    exprs: Vec<MapExpr>,
    schema: SchemaRef,
    batch_size: usize,
    record_ids: bool,
}

impl GatherSpec {
    /// Gathers `exprs` (each with its output column name) into batches of
    /// about `batch_size` rows. String and binary values can only be
    /// gathered as plain column references.
    pub fn new(exprs: Vec<(MapExpr, String)>, table: &TableSchema, batch_size: usize) -> Result<Self> {
        let mut fields = Vec::with_capacity(exprs.len());
        for (e, name) in &exprs {
            let t = e.data_type(table)?;
            if Domain::of(&t).is_none() && e.as_column().is_none() {
                return Err(Error::Unsupported(format!("gather of computed {t}")));
            }
            let nullable = match e.as_column() {
                Some(c) => table.field(c).is_nullable(),
                None => true,
            };
            let mut field = Field::new(name, t, nullable);
            if let Some(c) = e.as_column() {
                field = field.with_metadata(table.field(c).metadata().clone());
            }
            fields.push(field);
        }
        Ok(Self {
            table: table.clone(),
            schema: Arc::new(Schema::new(fields)),
            exprs: exprs.into_iter().map(|(e, _)| e).collect(),
            batch_size: batch_size.max(1),
            record_ids: false,
        })
    }

    /// Also emits each row's record id, as two more columns: `__shard`
    /// (UInt64, the shard id) and `__record` (UInt32, the record id within
    /// that shard version) — what a DELETE or UPDATE needs.
    pub fn with_record_ids(mut self) -> Self {
        let mut fields: Vec<Field> = self.schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(SHARD_COLUMN, DataType::UInt64, false));
        fields.push(Field::new(RECORD_COLUMN, DataType::UInt32, false));
        self.schema = Arc::new(Schema::new(fields));
        self.record_ids = true;
        self
    }

    /// Gathers table columns `projection` (all when `None`) under their names.
    pub fn columns(table: &TableSchema, projection: Option<&[usize]>, batch_size: usize) -> Result<Self> {
        let all: Vec<usize> = (0..table.len()).collect();
        let cols = projection.unwrap_or(&all);
        let exprs = cols
            .iter()
            .map(|&c| {
                if c >= table.len() {
                    return Err(Error::InvalidExpression(format!("column #{c} does not exist")));
                }
                Ok((MapExpr::Column(c), table.field(c).name().clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        Self::new(exprs, table, batch_size)
    }

    /// The schema of the output batches.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// An empty accumulator.
    pub fn new_acc(self: &Arc<Self>) -> GatherAcc {
        self.new_acc_for(usize::MAX)
    }

    /// An empty accumulator that will be given at most `max_rows` rows (a
    /// bound, such as the live rows of the shards it scans): its column
    /// builders take room for that many rather than for a full batch, so a
    /// small or wide result does not reserve a batch's worth per column.
    /// More rows are still gathered correctly, at the cost of growing.
    pub fn new_acc_for(self: &Arc<Self>, max_rows: usize) -> GatherAcc {
        let room = self.batch_room(max_rows);
        GatherAcc {
            builders: self.schema.fields().iter().map(|f| ColumnBuilder::new(f.data_type(), room)).collect(),
            spec: Arc::clone(self),
            rows: 0,
            left: max_rows,
            batches: Vec::new(),
            error: None,
        }
    }

    /// Rows of room a batch's builders take when at most `left` rows are
    /// still to come: a batch may overshoot its target by less than one
    /// block.
    fn batch_room(&self, left: usize) -> usize {
        (self.batch_size + LANES).min(left)
    }
}

/// Rows gathered so far: finished batches plus the batch being built.
#[derive(Debug)]
pub struct GatherAcc {
    spec: Arc<GatherSpec>,
    builders: Vec<ColumnBuilder>,
    rows: usize,
    /// At most this many more rows are expected (see [`GatherSpec::new_acc_for`]).
    left: usize,
    batches: Vec<RecordBatch>,
    error: Option<Error>,
}

impl GatherAcc {
    /// The first error met while streaming, if any.
    pub fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    /// Rows gathered (finished and pending).
    pub fn num_rows(&self) -> usize {
        self.rows + self.batches.iter().map(RecordBatch::num_rows).sum::<usize>()
    }

    /// Removes and returns the finished batches.
    pub fn take_batches(&mut self) -> Result<Vec<RecordBatch>> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        Ok(std::mem::take(&mut self.batches))
    }

    /// All rows as batches.
    pub fn finish(mut self) -> Result<Vec<RecordBatch>> {
        // Nothing follows: no room for another batch.
        self.flush(false)?;
        if let Some(e) = self.error {
            return Err(e);
        }
        Ok(self.batches)
    }

    /// Appends `b`'s rows after `self`'s.
    pub fn merge(mut self, mut b: GatherAcc) -> GatherAcc {
        if self.error.is_none() {
            self.error = b.error.take();
        }
        if self.error.is_some() {
            return self;
        }
        self.left = self.left.saturating_add(b.left);
        if let Err(e) = self.flush(true).and_then(|_| b.flush(false)) {
            self.error = Some(e);
            return self;
        }
        self.batches.append(&mut b.batches);
        self
    }

    /// Turns the pending rows into a batch, leaving builders with room for
    /// another batch if `more` rows may follow.
    fn flush(&mut self, more: bool) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let room = if more { self.spec.batch_room(self.left) } else { 0 };
        let columns = self
            .builders
            .iter_mut()
            .zip(self.spec.schema.fields())
            .map(|(b, f)| b.finish(f.data_type(), room))
            .collect::<Result<Vec<_>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(self.rows));
        self.batches.push(RecordBatch::try_new_with_options(Arc::clone(&self.spec.schema), columns, &options)?);
        self.rows = 0;
        Ok(())
    }
}

/// Values of one output column being built, in the column's domain.
#[derive(Debug)]
enum ColumnBuilder {
    I64(Vec<i64>, BooleanBufferBuilder),
    U64(Vec<u64>, BooleanBufferBuilder),
    F64(Vec<f64>, BooleanBufferBuilder),
    I128(Vec<i128>, BooleanBufferBuilder),
    /// Offsets + bytes (Utf8, LargeUtf8, Binary, LargeBinary).
    Bytes {
        offsets: Vec<i64>,
        bytes: Vec<u8>,
        valid: BooleanBufferBuilder,
    },
    /// Views; buffer 0 holds copied values, later buffers are shared
    /// dictionaries.
    Views {
        views: Vec<u128>,
        own: Vec<u8>,
        shared: Vec<Buffer>,
        valid: BooleanBufferBuilder,
    },
    /// Decoded pieces of a nested or row-encoded column, in row order.
    Arrays(Vec<ArrayRef>),
}

impl ColumnBuilder {
    /// A builder with room for `rows` rows.
    fn new(data_type: &DataType, rows: usize) -> Self {
        if quiverdb_storage::row_encoded::is_row_encoded(data_type) {
            return ColumnBuilder::Arrays(Vec::new());
        }
        let valid = BooleanBufferBuilder::new(rows);
        match Domain::of(data_type) {
            Some(Domain::I64) => ColumnBuilder::I64(Vec::with_capacity(rows), valid),
            Some(Domain::U64) => ColumnBuilder::U64(Vec::with_capacity(rows), valid),
            Some(Domain::F64) => ColumnBuilder::F64(Vec::with_capacity(rows), valid),
            Some(Domain::I128) => ColumnBuilder::I128(Vec::with_capacity(rows), valid),
            None if matches!(data_type, DataType::Utf8View | DataType::BinaryView) => {
                ColumnBuilder::Views { views: Vec::with_capacity(rows), own: Vec::new(), shared: Vec::new(), valid }
            }
            None => {
                let mut offsets = Vec::with_capacity(rows + 1);
                offsets.push(0);
                ColumnBuilder::Bytes { offsets, bytes: Vec::new(), valid }
            }
        }
    }

    /// Appends `k` NULLs of an operand (numeric columns only).
    fn push_nulls(&mut self, k: usize) -> Result<()> {
        let valid = match self {
            ColumnBuilder::I64(x, v) => {
                x.resize(x.len() + k, 0);
                v
            }
            ColumnBuilder::U64(x, v) => {
                x.resize(x.len() + k, 0);
                v
            }
            ColumnBuilder::F64(x, v) => {
                x.resize(x.len() + k, 0.0);
                v
            }
            ColumnBuilder::I128(x, v) => {
                x.resize(x.len() + k, 0);
                v
            }
            ColumnBuilder::Bytes { offsets, bytes, valid } => {
                offsets.extend(std::iter::repeat_n(bytes.len() as i64, k));
                valid
            }
            ColumnBuilder::Views { views, valid, .. } => {
                views.extend(std::iter::repeat_n(0u128, k));
                valid
            }
            ColumnBuilder::Arrays(_) => return Err(Error::Internal("an operand gathered into a nested column".into())),
        };
        valid.append_n(k, false);
        Ok(())
    }

    /// Appends the `lanes` of an evaluated operand.
    fn push_operand(&mut self, o: Operand<'_>, lanes: &Bits, dense: Option<usize>) -> Result<()> {
        match o {
            Operand::Scalar(v) => {
                let k = lanes.count();
                match (self, v) {
                    (b, None) => b.push_nulls(k)?,
                    (ColumnBuilder::I64(x, valid), Some(Num::I64(v))) => {
                        x.extend(std::iter::repeat_n(v, k));
                        valid.append_n(k, true);
                    }
                    (ColumnBuilder::U64(x, valid), Some(Num::U64(v))) => {
                        x.extend(std::iter::repeat_n(v, k));
                        valid.append_n(k, true);
                    }
                    (ColumnBuilder::F64(x, valid), Some(Num::F64(v))) => {
                        x.extend(std::iter::repeat_n(v, k));
                        valid.append_n(k, true);
                    }
                    (ColumnBuilder::I128(x, valid), Some(Num::I128(v))) => {
                        x.extend(std::iter::repeat_n(v, k));
                        valid.append_n(k, true);
                    }
                    _ => return Err(Error::Internal("gather of a constant of another domain".into())),
                }
            }
            Operand::Vector(vec) => {
                macro_rules! push {
                    ($dst:expr, $valid:expr, $src:expr) => {{
                        match dense {
                            // Every lane, in order: one copy.
                            Some(n) => $dst.extend_from_slice(&$src[..n]),
                            None => lanes.for_each_one(|l| $dst.push($src[l])),
                        }
                        if vec.has_nulls {
                            append_validity($valid, &vec.validity, lanes, dense);
                        } else {
                            $valid.append_n(lanes.count(), true);
                        }
                    }};
                }
                match (self, &vec.values) {
                    (ColumnBuilder::I64(x, valid), Values::I64(src)) => push!(x, valid, src),
                    (ColumnBuilder::U64(x, valid), Values::U64(src)) => push!(x, valid, src),
                    (ColumnBuilder::F64(x, valid), Values::F64(src)) => push!(x, valid, src),
                    (ColumnBuilder::I128(x, valid), Values::I128(src)) => push!(x, valid, src),
                    _ => return Err(Error::Internal("gather of a vector of another domain".into())),
                }
            }
        }
        Ok(())
    }

    /// Appends one byte value (or NULL).
    #[inline]
    fn push_bytes(&mut self, v: Option<&[u8]>) {
        match self {
            ColumnBuilder::Bytes { offsets, bytes, valid } => {
                if let Some(v) = v {
                    bytes.extend_from_slice(v);
                }
                offsets.push(bytes.len() as i64);
                valid.append(v.is_some());
            }
            ColumnBuilder::Views { views, own, valid, .. } => {
                let v_bytes = v.unwrap_or_default();
                let offset = own.len() as u32;
                if v_bytes.len() > MAX_INLINE {
                    own.extend_from_slice(v_bytes);
                }
                views.push(make_view(v_bytes, 0, offset));
                valid.append(v.is_some());
            }
            _ => {}
        }
    }

    /// The array of the rows so far, as `data_type`; resets the builder
    /// with room for `rows` more.
    fn finish(&mut self, data_type: &DataType, rows: usize) -> Result<ArrayRef> {
        let fresh = ColumnBuilder::new(data_type, rows);
        let old = std::mem::replace(self, fresh);
        Ok(match old {
            ColumnBuilder::I64(x, mut v) => i64_array(data_type, x, nulls(&mut v))?,
            ColumnBuilder::U64(x, mut v) => native_array(data_type, x, nulls(&mut v))?,
            ColumnBuilder::F64(x, mut v) => f64_array(data_type, x, nulls(&mut v))?,
            ColumnBuilder::I128(x, mut v) => native_array(data_type, x, nulls(&mut v))?,
            ColumnBuilder::Bytes { offsets, bytes, mut valid } => {
                let nulls = nulls(&mut valid);
                let len = offsets.len() - 1;
                let offsets_buf = if matches!(data_type, DataType::LargeUtf8 | DataType::LargeBinary) {
                    Buffer::from_vec(offsets)
                } else {
                    // Offsets only grow: the last one bounds them all.
                    if offsets.last().is_some_and(|&o| o > i64::from(i32::MAX)) {
                        return Err(Error::Unsupported(
                            "more than 2 GiB of strings in one batch; use LargeUtf8".into(),
                        ));
                    }
                    let narrow: Vec<i32> = offsets.iter().map(|&o| o as i32).collect();
                    OffsetBuffer::new(ScalarBuffer::from(narrow)).into_inner().into_inner()
                };
                let data = ArrayDataBuilder::new(data_type.clone())
                    .len(len)
                    .add_buffer(offsets_buf)
                    .add_buffer(Buffer::from_vec(bytes))
                    .nulls(nulls);
                // SAFETY: the offsets start at 0 and never decrease, the
                // last one is the byte length, and every value was copied
                // whole from a column stored as this type (Utf8, Binary or
                // their large forms), whose strings were validated as UTF-8
                // when they were ingested; checking again would cost more
                // than gathering them.
                arrow_array::make_array(unsafe { data.build_unchecked() })
            }
            ColumnBuilder::Arrays(mut parts) => match parts.len() {
                0 => new_empty_array(data_type),
                1 => parts.remove(0),
                _ => {
                    let parts: Vec<&dyn Array> = parts.iter().map(|p| p.as_ref()).collect();
                    arrow_select::concat::concat(&parts)?
                }
            },
            ColumnBuilder::Views { views, own, shared, mut valid } => {
                let nulls = nulls(&mut valid);
                let mut buffers = vec![Buffer::from_vec(own)];
                buffers.extend(shared);
                let data = ArrayDataBuilder::new(data_type.clone())
                    .len(views.len())
                    .add_buffer(ScalarBuffer::from(views).into_inner())
                    .add_buffers(buffers)
                    .nulls(nulls);
                // SAFETY: every view was made by `make_view` from a whole
                // value, either copied into buffer 0 at the offset it
                // records or lying in the dictionary buffer it names; the
                // values come from a column of this type, validated as
                // UTF-8 (for strings) when ingested.
                arrow_array::make_array(unsafe { data.build_unchecked() })
            }
        })
    }
}

fn nulls(valid: &mut BooleanBufferBuilder) -> Option<NullBuffer> {
    Some(NullBuffer::new(valid.finish())).filter(|n| n.null_count() > 0)
}

/// How the kernel produces one output column.
#[derive(Debug)]
enum Source {
    /// A numeric expression; `column` if it is a plain column reference.
    Num {
        expr: Box<CompiledExpr>,
        column: Option<usize>,
    },
    Bytes(usize),
    /// A nested or row-encoded column, gathered as Arrow arrays.
    Arrays(usize),
}

/// The views of every value of one shard's string dictionary, for the
/// builder buffer that holds the dictionary: gathering a row is then one
/// table lookup by its code.
#[derive(Debug, Default)]
struct DictViews {
    buffer: u32,
    views: Vec<u128>,
}

/// The [`Kernel`] of a gather over one shard.
#[derive(Debug)]
pub struct GatherKernel {
    spec: Arc<GatherSpec>,
    sources: Vec<Source>,
    /// Per source: the dictionary view table of the current shard.
    dict_views: Vec<Option<DictViews>>,
}

impl GatherKernel {
    /// Compiles `spec`'s expressions.
    pub fn new(spec: Arc<GatherSpec>) -> Result<Self> {
        let sources = spec
            .exprs
            .iter()
            .map(|e| {
                let t = e.data_type(&spec.table)?;
                Ok(match (Domain::of(&t), e.as_column()) {
                    (None, Some(c)) if quiverdb_storage::row_encoded::is_row_encoded(&t) => Source::Arrays(c),
                    (Some(_), column) => Source::Num { expr: Box::new(CompiledExpr::compile(e, &spec.table)?), column },
                    (None, Some(c)) => Source::Bytes(c),
                    (None, None) => return Err(Error::Unsupported(format!("gather of {e}"))),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let dict_views = sources.iter().map(|_| None).collect();
        Ok(Self { spec, sources, dict_views })
    }

    fn process(
        &mut self,
        cols: &ShardColumns<'_>,
        mut acc: GatherAcc,
        side: Side,
        sel: Sel<'_>,
        scratch: &mut Scratch,
    ) -> GatherAcc {
        if acc.error.is_none()
            && sel.lanes() > 0
            && let Err(e) = self.fold(cols, &mut acc, side, sel, scratch)
        {
            acc.error = Some(e);
        }
        acc
    }

    fn fold(
        &mut self,
        cols: &ShardColumns<'_>,
        acc: &mut GatherAcc,
        side: Side,
        sel: Sel<'_>,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let lanes = sel.active();
        let dense = sel.dense().then(|| sel.lanes());
        for ((source, builder), views) in self.sources.iter_mut().zip(&mut acc.builders).zip(&mut self.dict_views) {
            match source {
                Source::Num { expr, column } => {
                    // A whole range of a plain integer column decodes
                    // straight into the builder.
                    if let (Some(c), Side::Main(block), Sel::Range(a, b), ColumnBuilder::I64(dst, valid)) =
                        (*column, side, sel, &mut *builder)
                        && cols.column(c).extend_main_i64(block, a, b, scratch, dst)
                    {
                        valid.append_n(b - a, true);
                        continue;
                    }
                    let o = expr.eval(cols, side, sel, scratch)?;
                    builder.push_operand(o, &lanes, dense)?;
                }
                Source::Arrays(col) => {
                    let ColumnBuilder::Arrays(parts) = builder else {
                        return Err(Error::Internal("a nested column gathered into another builder".into()));
                    };
                    parts.push(gather_array(cols.column(*col), side, sel, &lanes)?);
                }
                Source::Bytes(col) => {
                    let src = cols.column(*col);
                    push_bytes_column(builder, src, side, sel, &lanes, scratch, views);
                }
            }
        }
        if self.spec.record_ids {
            let n = self.sources.len();
            let shard = cols.shard().id().0;
            let base = match side {
                Side::Main(b) => b * LANES,
                Side::Delta(c) => cols.main_rows() + c * LANES,
            };
            let (shards, records) = acc.builders[n..].split_at_mut(1);
            let (ColumnBuilder::U64(s, sv), ColumnBuilder::I64(r, rv)) = (&mut shards[0], &mut records[0]) else {
                return Err(Error::Internal("record-id columns of another type".into()));
            };
            let count = lanes.count();
            s.extend(std::iter::repeat_n(shard, count));
            sv.append_n(count, true);
            sel_offsets(sel, &lanes, |_, o| r.push((base + o) as i64));
            rv.append_n(count, true);
        }
        acc.rows += lanes.count();
        acc.left = acc.left.saturating_sub(lanes.count());
        if acc.rows >= self.spec.batch_size {
            acc.flush(true)?;
        }
        Ok(())
    }
}

/// Appends the validity bits of `lanes` to `out`: the bitmap's words at
/// once when the lanes are `0..n` (`dense`), lane by lane otherwise.
fn append_validity(out: &mut BooleanBufferBuilder, validity: &Bits, lanes: &Bits, dense: Option<usize>) {
    match dense {
        Some(n) => {
            let mut bytes = [0u8; LANES / 8];
            for (b, w) in bytes.chunks_exact_mut(8).zip(validity.0) {
                b.copy_from_slice(&w.to_le_bytes());
            }
            out.append_packed_range(0..n, &bytes);
        }
        None => lanes.for_each_one(|l| out.append(validity.get(l))),
    }
}

/// The `lanes` of a nested or row-encoded column as an Arrow array: main
/// storage reads them (from child columns, or decoding their byte
/// strings); delta rows are byte strings in Arrow's row format.
fn gather_array(src: &ColumnSource<'_>, side: Side, sel: Sel<'_>, lanes: &Bits) -> Result<ArrayRef> {
    let data_type = src.data_type();
    match side {
        Side::Main(block) => {
            let Some(col) = src.main() else {
                return Err(Error::Internal("main rows of a column without main storage".into()));
            };
            let start = block * LANES;
            let mut ids = Vec::with_capacity(lanes.count());
            sel_offsets(sel, lanes, |_, o| ids.push((start + o) as u32));
            Ok(col.gather(&ids).map_err(Arc::new)?)
        }
        Side::Delta(chunk) => {
            let validity = src.delta_validity(chunk, sel);
            let mut bytes = BinaryBuilder::with_capacity(lanes.count(), 0);
            sel_offsets(sel, lanes, |l, o| {
                if validity.as_ref().is_none_or(|v| v.get(l)) {
                    bytes.append_value(src.delta_bytes(chunk, o));
                } else {
                    bytes.append_null();
                }
            });
            let stored: ArrayRef = Arc::new(bytes.finish());
            Ok(quiverdb_storage::row_encoded::decode(stored, data_type).map_err(Arc::new)?)
        }
    }
}

/// Appends the `lanes` of a bytes column to `builder`.
fn push_bytes_column(
    builder: &mut ColumnBuilder,
    src: &ColumnSource<'_>,
    side: Side,
    sel: Sel<'_>,
    lanes: &Bits,
    scratch: &mut Scratch,
    dict_views: &mut Option<DictViews>,
) {
    let validity = match side {
        Side::Main(b) => src.main_validity(b, sel),
        Side::Delta(c) => src.delta_validity(c, sel),
    };
    let valid = |l: usize| validity.as_ref().is_none_or(|v| v.get(l));
    match side {
        Side::Main(block) => {
            let Some(col) = src.main() else { return };
            if let (Some(dict), ColumnBuilder::Views { views, shared: bufs, valid: vb, .. }) =
                (col.string_dictionary(), &mut *builder)
            {
                // Views into the dictionary: no string is copied. Buffer 0
                // is the builder's own; shared dictionaries follow.
                let dict_buf = dict.values_buffer();
                let index = match bufs.iter().position(|b| b.as_ptr() == dict_buf.as_ptr()) {
                    Some(i) => i as u32 + 1,
                    None => {
                        bufs.push(dict_buf.clone());
                        bufs.len() as u32
                    }
                };
                let table = match dict_views {
                    Some(t) if t.buffer == index => t,
                    _ => {
                        let starts = dict.offsets();
                        let views =
                            (0..dict.dict_len()).map(|code| make_view(dict.value(code), index, starts[code])).collect();
                        dict_views.insert(DictViews { buffer: index, views })
                    }
                };
                gather_keys(&dict.codes(), block, sel, scratch);
                let (codes, table) = (&scratch.keys, table.views.as_slice());
                match lanes.dense_len() {
                    Some(n) => views.extend(codes[..n].iter().map(|&c| table[c as usize])),
                    None => lanes.for_each_one(|l| views.push(table[codes[l] as usize])),
                }
                match &validity {
                    None => vb.append_n(lanes.count(), true),
                    Some(v) => append_validity(vb, v, lanes, lanes.dense_len()),
                }
                return;
            }
            if let (Some(dict), ColumnBuilder::Bytes { offsets, bytes, valid: vb }) =
                (col.string_dictionary(), &mut *builder)
            {
                // Unpack the block's codes at once, then copy each value
                // out of the dictionary.
                gather_keys(&dict.codes(), block, sel, scratch);
                let codes = &scratch.keys;
                let (starts, values) = (dict.offsets(), dict.values_buffer().as_slice());
                let span = |l: usize| {
                    let code = codes[l] as usize;
                    if valid(l) { starts[code] as usize..starts[code + 1] as usize } else { 0..0 }
                };
                let dense = lanes.dense_len();
                if bytes.capacity() == 0 {
                    // A fresh batch: room for as many rows as its offsets
                    // have, at this block's bytes per row, rather than
                    // growing by reallocation.
                    let mut block_bytes = 0;
                    lanes.for_each_one(|l| block_bytes += span(l).len());
                    let rows = offsets.capacity().saturating_sub(1).max(lanes.count()).max(1);
                    bytes.reserve(block_bytes.div_ceil(lanes.count().max(1)) * rows);
                }
                let mut push = |l: usize| {
                    bytes.extend_from_slice(&values[span(l)]);
                    offsets.push(bytes.len() as i64);
                };
                match dense {
                    Some(n) => (0..n).for_each(&mut push),
                    None => lanes.for_each_one(push),
                }
                match &validity {
                    None => vb.append_n(lanes.count(), true),
                    Some(v) => append_validity(vb, v, lanes, dense),
                }
                return;
            }
            src.with_main_block_bytes(block, scratch, |bytes| {
                sel_offsets(sel, lanes, |l, o| builder.push_bytes(valid(l).then(|| bytes.get(o))))
            });
        }
        Side::Delta(chunk) => {
            sel_offsets(sel, lanes, |l, o| builder.push_bytes(valid(l).then(|| src.delta_bytes(chunk, o))))
        }
    }
}

impl Kernel for GatherKernel {
    type Acc = GatherAcc;

    fn open(&mut self, _cols: &ShardColumns<'_>) -> Result<()> {
        // View tables belong to the previous shard's dictionaries.
        self.dict_views.iter_mut().for_each(|v| *v = None);
        Ok(())
    }

    fn columns(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for e in &self.spec.exprs {
            e.columns(&mut out);
        }
        out
    }

    fn process_main_block(
        &mut self,
        cols: &ShardColumns<'_>,
        acc: GatherAcc,
        block: usize,
        sel: Sel<'_>,
        scratch: &mut Scratch,
    ) -> GatherAcc {
        self.process(cols, acc, Side::Main(block), sel, scratch)
    }

    fn process_delta_block(
        &mut self,
        cols: &ShardColumns<'_>,
        acc: GatherAcc,
        chunk: usize,
        sel: Sel<'_>,
        scratch: &mut Scratch,
    ) -> GatherAcc {
        self.process(cols, acc, Side::Delta(chunk), sel, scratch)
    }

    fn merge(a: GatherAcc, b: GatherAcc) -> GatherAcc {
        a.merge(b)
    }
}
