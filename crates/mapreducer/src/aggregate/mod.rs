//! Aggregation: COUNT, SUM, MIN, MAX and AVG over map expressions, with or
//! without GROUP BY.
//!
//! ```text
//!   AggregateSpec (validated once)      AggregateAcc (per shard, merged)
//!     group_by: [MapExpr]                 groups: key maps → group ids
//!     aggregates: [(func, MapExpr)]       states: one column per aggregate
//!
//!   per block (AggregateKernel):
//!     no keys:  each aggregate reads its column the cheapest way the
//!               encoding allows ─ bit-packed SUM = n·reference + Σ deltas,
//!               constant / sequence / run-end SUM by arithmetic, MIN/MAX of
//!               a whole block from its zone map ─ else evaluates its
//!               expression and reduces the vector
//!     keys:     key vectors → group ids (array window or hash; dictionary
//!               strings by code, cached per shard) → scatter into states
//! ```

mod groups;
mod state;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::ArrayRef;
use arrow_schema::DataType;
use quiverdb_storage::TableSchema;
use quiverdb_storage::main::{Encoding, KeyEncoding};
use quiverdb_storage::types::PhysicalType;

use self::groups::{BytesMap, Groups, HashMapKeys, IntMap, KeyMap, KeyValue, MAX_KEYS};
use self::state::{MinMaxDomain, StateColumn, StateKind, SumDomain, better, f64_better};
use crate::columns::{ColumnSource, Scratch, ShardColumns, gather_keys, key_to_num};
use crate::error::{Error, Result};
use crate::expr::{CompiledExpr, MapExpr, Operand, Side};
use crate::output::{bytes_array, f64_array, i64_array, native_array, nulls_from};
use crate::scalar::{Domain, Num};
use crate::shard::Kernel;
use crate::kernels;
use crate::vector::{Bits, LANES, Sel, Values, sel_offsets};

/// An aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AggFunc {
    /// `COUNT(*)`: rows.
    CountStar,
    /// `COUNT(expr)`: non-null values.
    Count,
    /// `SUM(expr)`: NULL over no values.
    Sum,
    /// `MIN(expr)`.
    Min,
    /// `MAX(expr)`.
    Max,
    /// `AVG(expr)`.
    Avg,
}

/// One aggregate: a function and its input.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregate {
    /// The function.
    pub func: AggFunc,
    /// The input (`None` for `COUNT(*)`).
    pub input: Option<MapExpr>,
}

impl Aggregate {
    /// `func(input)`.
    pub fn new(func: AggFunc, input: MapExpr) -> Self {
        Self { func, input: Some(input) }
    }

    /// `COUNT(*)`.
    pub fn count_star() -> Self {
        Self { func: AggFunc::CountStar, input: None }
    }
}

/// A validated aggregation: group keys and aggregates over one table.
#[derive(Debug)]
pub struct AggregateSpec {
    schema: TableSchema,
    group_by: Vec<MapExpr>,
    aggregates: Vec<Aggregate>,
    key_types: Vec<DataType>,
    kinds: Vec<StateKind>,
    output_types: Vec<DataType>,
}

/// Source of unique accumulator tokens (see [`AggregateAcc`]).
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

impl AggregateSpec {
    /// Validates `aggregates` grouped by `group_by` against `schema`.
    /// Unsupported combinations give [`Error::Unsupported`].
    pub fn new(group_by: Vec<MapExpr>, aggregates: Vec<Aggregate>, schema: &TableSchema) -> Result<Self> {
        if group_by.len() > MAX_KEYS {
            return Err(Error::Unsupported(format!("more than {MAX_KEYS} group keys")));
        }
        let key_types = group_by
            .iter()
            .map(|k| {
                let t = k.data_type(schema)?;
                if Domain::of(&t).is_none() && k.as_column().is_none() {
                    return Err(Error::Unsupported(format!("group key {k} of type {t}")));
                }
                Ok(t)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut kinds = Vec::with_capacity(aggregates.len());
        let mut output_types = Vec::with_capacity(aggregates.len());
        for agg in &aggregates {
            let input_type = match (&agg.input, agg.func) {
                (None, AggFunc::CountStar) => None,
                (Some(e), f) if f != AggFunc::CountStar => {
                    let t = e.data_type(schema)?;
                    if Domain::of(&t).is_none() && e.as_column().is_none() {
                        return Err(Error::Unsupported(format!("{f:?} of {e}")));
                    }
                    Some(t)
                }
                _ => return Err(Error::InvalidExpression(format!("{:?} takes {} input", agg.func, if agg.func == AggFunc::CountStar { "no" } else { "one" }))),
            };
            let (mut kind, out) = state_kind(agg.func, input_type.as_ref())?;
            if let (StateKind::Sum { avg: false, implied, .. }, Some(e)) = (&mut kind, &agg.input) {
                *implied = !group_by.is_empty() && !e.nullable(schema);
            }
            kinds.push(kind);
            output_types.push(out);
        }
        Ok(Self { schema: schema.clone(), group_by, aggregates, key_types, kinds, output_types })
    }

    /// The group keys.
    pub fn group_by(&self) -> &[MapExpr] {
        &self.group_by
    }

    /// The aggregates.
    pub fn aggregates(&self) -> &[Aggregate] {
        &self.aggregates
    }

    /// Types of the group key columns of the output.
    pub fn key_types(&self) -> &[DataType] {
        &self.key_types
    }

    /// Types of the aggregate columns of the output.
    pub fn output_types(&self) -> &[DataType] {
        &self.output_types
    }

    /// An empty accumulator.
    pub fn new_acc(self: &Arc<Self>) -> AggregateAcc {
        let keys = self
            .key_types
            .iter()
            .map(|t| match Domain::of(t) {
                Some(Domain::I64) => KeyMap::I64(IntMap::default()),
                Some(Domain::U64) => KeyMap::U64(HashMapKeys::default()),
                Some(Domain::F64) => KeyMap::F64(HashMapKeys::default()),
                Some(Domain::I128) => KeyMap::I128(HashMapKeys::default()),
                None => KeyMap::Bytes(BytesMap::default()),
            })
            .collect();
        let groups = Groups::new(keys);
        let mut states: Vec<StateColumn> = self.kinds.iter().map(StateColumn::new).collect();
        for s in &mut states {
            s.ensure(groups.len);
        }
        AggregateAcc {
            spec: Arc::clone(self),
            token: NEXT_TOKEN.fetch_add(1, Ordering::Relaxed),
            groups,
            states,
            error: None,
        }
    }
}

/// The state kind and output type of `func` over `input`.
fn state_kind(func: AggFunc, input: Option<&DataType>) -> Result<(StateKind, DataType)> {
    let unsupported = || Error::Unsupported(format!("{func:?} of {}", input.map_or("*".to_string(), |t| t.to_string())));
    Ok(match (func, input) {
        (AggFunc::CountStar | AggFunc::Count, _) => (StateKind::Count, DataType::Int64),
        (AggFunc::Sum | AggFunc::Avg, Some(t)) => {
            let avg = func == AggFunc::Avg;
            let (domain, out) = match t {
                DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => (SumDomain::Signed, DataType::Int64),
                // Narrow unsigned values live in the I64 domain: exact
                // signed sums, reported as UInt64.
                DataType::UInt8 | DataType::UInt16 | DataType::UInt32 => (SumDomain::Signed, DataType::UInt64),
                DataType::UInt64 => (SumDomain::Unsigned, DataType::UInt64),
                DataType::Float32 | DataType::Float64 => (SumDomain::Float, DataType::Float64),
                DataType::Decimal128(p, s) => {
                    let out = if avg {
                        DataType::Decimal128((*p + 4).min(38), (*s + 4).min(38))
                    } else {
                        DataType::Decimal128((*p + 10).min(38), *s)
                    };
                    (SumDomain::Decimal(*p, *s), out)
                }
                _ => return Err(unsupported()),
            };
            let out = if avg && !matches!(domain, SumDomain::Decimal(..)) { DataType::Float64 } else { out };
            (StateKind::Sum { domain, avg, implied: false }, out)
        }
        (AggFunc::Min | AggFunc::Max, Some(t)) => {
            let domain = match Domain::of(t) {
                Some(Domain::I64) => MinMaxDomain::I64,
                Some(Domain::U64) => MinMaxDomain::U64,
                Some(Domain::F64) => MinMaxDomain::F64,
                Some(Domain::I128) => MinMaxDomain::I128,
                None => MinMaxDomain::Bytes,
            };
            (StateKind::MinMax { max: func == AggFunc::Max, domain }, t.clone())
        }
        _ => return Err(unsupported()),
    })
}

/// The accumulator of an aggregation: groups and their states, or the
/// first error met while streaming.
///
/// Each accumulator carries a unique token so that a kernel's per-shard
/// caches (dictionary code → group) are never applied to another one.
#[derive(Debug)]
pub struct AggregateAcc {
    spec: Arc<AggregateSpec>,
    token: u64,
    groups: Groups,
    states: Vec<StateColumn>,
    error: Option<Error>,
}

/// The result of an aggregation: one row per group.
#[derive(Debug, Clone)]
pub struct AggregateOutput {
    /// One array per group key.
    pub keys: Vec<ArrayRef>,
    /// One array per aggregate.
    pub values: Vec<ArrayRef>,
}

impl AggregateAcc {
    /// The first error met while streaming, if any.
    pub fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    /// Number of groups so far.
    pub fn num_groups(&self) -> usize {
        self.groups.len
    }

    /// Combines two accumulators of the same spec (MemCP's `reduce2`):
    /// groups are matched by key value.
    pub fn merge(mut self, other: AggregateAcc) -> AggregateAcc {
        if self.error.is_some() {
            return self;
        }
        if let Some(e) = other.error {
            self.error = Some(e);
            return self;
        }
        if let Err(e) = self.merge_groups(&other) {
            self.error = Some(e);
        }
        self
    }

    fn merge_groups(&mut self, other: &AggregateAcc) -> Result<()> {
        let nkeys = self.groups.keys.len();
        let mut ids = [0u32; MAX_KEYS];
        for h in 0..other.groups.len {
            let g = if nkeys == 0 {
                0
            } else {
                let tuple = other.groups.tuple(h as u32);
                for k in 0..nkeys {
                    let value = other.groups.keys[k].value(tuple[k]);
                    ids[k] = self.groups.keys[k].id_of(&value)?;
                }
                self.groups.group(&ids[..nkeys]) as usize
            };
            for (i, state) in self.states.iter_mut().enumerate() {
                state.ensure(self.groups.len);
                state.merge_entry(g, &other.states[i], h, &self.spec.kinds[i])?;
            }
        }
        Ok(())
    }

    /// The final values: one row per group (one row without group keys).
    pub fn finish(self) -> Result<AggregateOutput> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let n = self.groups.len;
        let keys = (0..self.groups.keys.len())
            .map(|k| {
                let map = &self.groups.keys[k];
                let values: Vec<KeyValue<'_>> = (0..n).map(|g| map.value(self.groups.tuple(g as u32)[k])).collect();
                key_array(&self.spec.key_types[k], &values)
            })
            .collect::<Result<Vec<_>>>()?;
        let values = self
            .states
            .iter()
            .zip(&self.spec.kinds)
            .zip(&self.spec.output_types)
            .map(|((s, kind), out)| {
                let mut s = s.clone();
                s.ensure(n);
                s.finish(kind, out)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(AggregateOutput { keys, values })
    }
}

/// An output array of group key values.
fn key_array(data_type: &DataType, values: &[KeyValue<'_>]) -> Result<ArrayRef> {
    let valid: Vec<bool> = values.iter().map(|v| !matches!(v, KeyValue::Null)).collect();
    let nulls = nulls_from(&valid);
    match Domain::of(data_type) {
        Some(Domain::I64) => {
            let v: Vec<i64> = values.iter().map(|v| if let KeyValue::I64(x) = v { *x } else { 0 }).collect();
            i64_array(data_type, &v, nulls)
        }
        Some(Domain::U64) => {
            let v: Vec<u64> = values.iter().map(|v| if let KeyValue::U64(x) = v { *x } else { 0 }).collect();
            native_array(data_type, v, nulls)
        }
        Some(Domain::F64) => {
            let v: Vec<f64> = values.iter().map(|v| if let KeyValue::F64(x) = v { *x } else { 0.0 }).collect();
            f64_array(data_type, &v, nulls)
        }
        Some(Domain::I128) => {
            let v: Vec<i128> = values.iter().map(|v| if let KeyValue::I128(x) = v { *x } else { 0 }).collect();
            native_array(data_type, v, nulls)
        }
        None => bytes_array(
            data_type,
            values.iter().map(|v| if let KeyValue::Bytes(b) = v { Some(*b) } else { None }),
        ),
    }
}

/// How the kernel reads one aggregate's input.
#[derive(Debug)]
enum Input {
    CountStar,
    /// A numeric column: encoding-aware fast paths, `expr` as fallback.
    Column { col: usize, expr: CompiledExpr },
    /// A computed numeric expression.
    Expr(CompiledExpr),
    /// A string or binary column.
    Bytes(usize),
}

/// How the kernel reads one group key.
#[derive(Debug)]
enum KeyInput {
    Num(CompiledExpr),
    Bytes { col: usize, cache: DictCache },
}

/// Dictionary code → key id of one shard's dictionary, for one
/// accumulator: valid only for that accumulator (`token`) and that
/// dictionary (`dict`, its bytes' address; reset when a kernel moves to
/// another shard).
#[derive(Debug, Default)]
struct DictCache {
    token: u64,
    dict: usize,
    ids: Vec<u32>,
}

/// The [`Kernel`] of an aggregation over one shard.
#[derive(Debug)]
pub struct AggregateKernel {
    spec: Arc<AggregateSpec>,
    inputs: Vec<Input>,
    keys: Vec<KeyInput>,
    key_ids: Vec<Box<[u32; LANES]>>,
    gids: Box<[u32; LANES]>,
}

impl AggregateKernel {
    /// Compiles `spec`'s expressions and allocates the kernel's vectors.
    pub fn new(spec: Arc<AggregateSpec>) -> Result<Self> {
        let schema = &spec.schema;
        let inputs = spec
            .aggregates
            .iter()
            .map(|agg| {
                let Some(e) = &agg.input else { return Ok(Input::CountStar) };
                let t = e.data_type(schema)?;
                Ok(match (Domain::of(&t), e.as_column()) {
                    (None, Some(c)) => Input::Bytes(c),
                    (None, None) => return Err(Error::Unsupported(format!("aggregate input {e}"))),
                    (Some(_), Some(c)) => Input::Column { col: c, expr: CompiledExpr::compile(e, schema)? },
                    (Some(_), None) => Input::Expr(CompiledExpr::compile(e, schema)?),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let keys = spec
            .group_by
            .iter()
            .zip(&spec.key_types)
            .map(|(k, t)| {
                Ok(match (Domain::of(t), k.as_column()) {
                    (Some(_), _) => KeyInput::Num(CompiledExpr::compile(k, schema)?),
                    (None, Some(col)) => KeyInput::Bytes { col, cache: DictCache::default() },
                    (None, None) => return Err(Error::Unsupported(format!("group key {k}"))),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let key_ids = (0..keys.len()).map(|_| Box::new([0u32; LANES])).collect();
        Ok(Self { spec, inputs, keys, key_ids, gids: Box::new([0; LANES]) })
    }

    fn process(&mut self, cols: &ShardColumns<'_>, mut acc: AggregateAcc, side: Side, sel: Sel<'_>, scratch: &mut Scratch) -> AggregateAcc {
        if acc.error.is_none()
            && sel.lanes() > 0
            && let Err(e) = self.fold(cols, &mut acc, side, sel, scratch)
        {
            acc.error = Some(e);
        }
        acc
    }

    fn fold(&mut self, cols: &ShardColumns<'_>, acc: &mut AggregateAcc, side: Side, sel: Sel<'_>, scratch: &mut Scratch) -> Result<()> {
        if self.keys.is_empty() {
            for (i, input) in self.inputs.iter_mut().enumerate() {
                ungrouped(&mut acc.states[i], &self.spec.kinds[i], input, cols, side, sel, scratch)?;
            }
            return Ok(());
        }
        self.assign_groups(cols, acc, side, sel, scratch)?;
        for (i, input) in self.inputs.iter_mut().enumerate() {
            acc.states[i].ensure(acc.groups.len);
            grouped(&mut acc.states[i], &self.spec.kinds[i], input, cols, side, sel, scratch, &self.gids)?;
        }
        Ok(())
    }

    /// Fills `self.gids` for the active lanes of `sel`.
    fn assign_groups(&mut self, cols: &ShardColumns<'_>, acc: &mut AggregateAcc, side: Side, sel: Sel<'_>, scratch: &mut Scratch) -> Result<()> {
        let active = sel.active();
        let token = acc.token;
        let single = self.keys.len() == 1;
        for (k, key) in self.keys.iter_mut().enumerate() {
            // One key: its ids are the group ids.
            let ids = if single { &mut self.gids } else { &mut self.key_ids[k] };
            let map = &mut acc.groups.keys[k];
            match key {
                KeyInput::Num(expr) => match expr.eval(cols, side, sel, scratch)? {
                    Operand::Scalar(v) => {
                        let id = match v {
                            None => map.null(),
                            Some(n) => map.id_of(&num_key(n))?,
                        };
                        active.for_each_one(|l| ids[l] = id);
                    }
                    Operand::Vector(v) => {
                        let valid = v.valid(&active);
                        let nulls = active.and_not(&valid);
                        if !nulls.is_empty() {
                            let id = map.null();
                            nulls.for_each_one(|l| ids[l] = id);
                        }
                        match (map, &v.values) {
                            (KeyMap::I64(m), Values::I64(x)) => {
                                if !m.has_window()
                                    && let Some(first) = valid.first_one()
                                {
                                    let mut min = x[first];
                                    valid.for_each_one(|l| min = min.min(x[l]));
                                    m.init_window(min);
                                }
                                m.ids(x, &valid, ids);
                            }
                            (KeyMap::U64(m), Values::U64(x)) => valid.for_each_one(|l| ids[l] = m.id(x[l])),
                            (KeyMap::F64(m), Values::F64(x)) => valid.for_each_one(|l| ids[l] = m.id(x[l].to_bits())),
                            (KeyMap::I128(m), Values::I128(x)) => valid.for_each_one(|l| ids[l] = m.id(x[l])),
                            _ => return Err(Error::Internal("group key of another domain".into())),
                        }
                    }
                },
                KeyInput::Bytes { col, cache } => {
                    let KeyMap::Bytes(m) = map else {
                        return Err(Error::Internal("bytes key without a bytes map".into()));
                    };
                    let src = cols.column(*col);
                    bytes_key_ids(src, side, sel, &active, m, cache, token, ids, scratch);
                }
            }
        }
        if single {
            acc.groups.len = acc.groups.keys[0].len();
        } else {
            let n = self.keys.len();
            let mut tuple = [0u32; MAX_KEYS];
            let (gids, key_ids, groups) = (&mut self.gids, &self.key_ids, &mut acc.groups);
            active.for_each_one(|l| {
                for k in 0..n {
                    tuple[k] = key_ids[k][l];
                }
                gids[l] = groups.group(&tuple[..n]);
            });
        }
        Ok(())
    }
}

fn num_key(n: Num) -> KeyValue<'static> {
    match n {
        Num::I64(x) => KeyValue::I64(x),
        Num::U64(x) => KeyValue::U64(x),
        Num::F64(x) => KeyValue::F64(x),
        Num::I128(x) => KeyValue::I128(x),
    }
}

/// Key ids of a bytes column: dictionary codes through the shard's cache,
/// other strings through the map's hash.
#[allow(clippy::too_many_arguments)]
fn bytes_key_ids(
    src: &ColumnSource<'_>,
    side: Side,
    sel: Sel<'_>,
    active: &Bits,
    map: &mut BytesMap,
    cache: &mut DictCache,
    token: u64,
    ids: &mut [u32; LANES],
    scratch: &mut Scratch,
) {
    let validity = match side {
        Side::Main(b) => src.main_validity(b, sel),
        Side::Delta(c) => src.delta_validity(c, sel),
    };
    let valid = validity.map_or(*active, |v| active.and(&v));
    let nulls = active.and_not(&valid);
    if !nulls.is_empty() {
        let id = map.null_id();
        nulls.for_each_one(|l| ids[l] = id);
    }
    match side {
        Side::Main(block) => {
            let col = src.main().expect("main block of a shard with main rows");
            match col.encoding() {
                Encoding::StrDict(dict) => {
                    let dict_id = dict.dict_bytes().as_ptr() as usize;
                    if cache.token != token || cache.dict != dict_id || cache.ids.len() != dict.dict_len() {
                        cache.token = token;
                        cache.dict = dict_id;
                        cache.ids.clear();
                        cache.ids.resize(dict.dict_len(), u32::MAX);
                    }
                    gather_keys(dict.codes(), block * LANES, col.len(), sel, scratch);
                    let codes = &scratch.keys;
                    valid.for_each_one(|l| {
                        let code = codes[l] as usize;
                        let mut id = cache.ids[code];
                        if id == u32::MAX {
                            id = map.id(dict.dict_value(code));
                            cache.ids[code] = id;
                        }
                        ids[l] = id;
                    });
                }
                _ => {
                    let start = block * LANES;
                    sel_offsets(sel, &valid, |l, o| ids[l] = map.id(src.main_bytes(start + o)));
                }
            }
        }
        Side::Delta(chunk) => sel_offsets(sel, &valid, |l, o| ids[l] = map.id(src.delta_bytes(chunk, o))),
    }
}

/// The validity of a column's rows `sel`, or `None` when all are valid.
fn column_validity(src: &ColumnSource<'_>, side: Side, sel: Sel<'_>) -> Option<Bits> {
    match side {
        Side::Main(b) => src.main_validity(b, sel),
        Side::Delta(c) => src.delta_validity(c, sel),
    }
}

/// Folds `sel` into the single group of an aggregate without keys.
fn ungrouped(
    state: &mut StateColumn,
    kind: &StateKind,
    input: &mut Input,
    cols: &ShardColumns<'_>,
    side: Side,
    sel: Sel<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let active = sel.active();
    match (kind, input) {
        (StateKind::Count, Input::CountStar) => state.add_count(0, sel.count() as u64),
        (StateKind::Count, Input::Column { col, .. } | Input::Bytes(col)) => {
            let n = match column_validity(cols.column(*col), side, sel) {
                None => sel.count(),
                Some(v) => v.and(&active).count(),
            };
            state.add_count(0, n as u64);
        }
        (StateKind::Sum { domain, .. }, Input::Column { col, expr })
            if !matches!(domain, SumDomain::Float) =>
        {
            let src = cols.column(*col);
            if let (Side::Main(block), Some(Encoding::Keys(enc))) = (side, src.main().map(|m| m.encoding())) {
                let valid = src.main_validity(block, sel).map(|v| v.and(&active));
                let len = cols.block_len(block);
                let (sum_keys, n) = sum_keys(enc, block, len, sel, valid, scratch);
                let signed = !matches!(src.physical(), PhysicalType::UInt8 | PhysicalType::UInt16 | PhysicalType::UInt32 | PhysicalType::UInt64 | PhysicalType::Boolean);
                add_key_sum(state, sum_keys, n, signed)?;
            } else {
                let o = expr.eval(cols, side, sel, scratch)?;
                sum_operand(state, o, &active)?;
            }
        }
        (StateKind::MinMax { max, domain }, Input::Column { col, expr }) if *domain != MinMaxDomain::Bytes => {
            let src = cols.column(*col);
            if let (Side::Main(block), Some(main)) = (side, src.main())
                && let Encoding::Keys(enc) = main.encoding()
            {
                let valid = src.main_validity(block, sel).map(|v| v.and(&active));
                let full = matches!(sel, Sel::Range(0, b) if b == cols.block_len(block));
                let key = if full && valid.is_none() {
                    let z = main.zones()[block];
                    (!z.all_null()).then_some(if *max { z.max } else { z.min })
                } else {
                    let lanes = valid.unwrap_or(active);
                    gather_keys(enc, block * LANES, main.len(), sel, scratch);
                    best_key(&scratch.keys, &lanes, *max)
                };
                if let Some(k) = key {
                    offer_num(state, key_to_num(src.physical(), k), *max);
                }
            } else {
                let o = expr.eval(cols, side, sel, scratch)?;
                minmax_operand(state, o, &active, *max);
            }
        }
        (StateKind::MinMax { max, .. }, Input::Bytes(col)) => {
            let src = cols.column(*col);
            let valid = column_validity(src, side, sel).map_or(active, |v| v.and(&active));
            if let Some(best) = best_bytes(src, side, sel, &valid, *max, scratch) {
                state.offer_bytes(0, best, *max);
            }
        }
        (StateKind::Count, Input::Expr(e)) => {
            let n = match e.eval(cols, side, sel, scratch)? {
                Operand::Scalar(None) => 0,
                Operand::Scalar(Some(_)) => active.count(),
                Operand::Vector(v) => v.valid(&active).count(),
            };
            state.add_count(0, n as u64);
        }
        (StateKind::Sum { .. }, Input::Column { expr, .. } | Input::Expr(expr)) => {
            let o = expr.eval(cols, side, sel, scratch)?;
            sum_operand(state, o, &active)?;
        }
        (StateKind::MinMax { max, .. }, Input::Column { expr, .. } | Input::Expr(expr)) => {
            let o = expr.eval(cols, side, sel, scratch)?;
            minmax_operand(state, o, &active, *max);
        }
        _ => return Err(Error::Internal("aggregate input and state disagree".into())),
    }
    Ok(())
}

/// Adds a sum of keys over `n` values to a SUM state.
fn add_key_sum(state: &mut StateColumn, sum_keys: u128, n: u64, signed: bool) -> Result<()> {
    // Signed keys are values + 2^63.
    let values = if signed { sum_keys as i128 - ((n as i128) << 63) } else { sum_keys as i128 };
    match state {
        StateColumn::SumI { sum, n: c } => {
            sum.total[0] += values;
            c[0] += n;
        }
        StateColumn::SumU { sum, n: c } => {
            sum[0] += values as u128;
            c[0] += n;
        }
        StateColumn::SumD { sum, n: c } => {
            sum[0] = sum[0].checked_add(values).ok_or_else(|| Error::Overflow("decimal SUM".into()))?;
            c[0] += n;
        }
        _ => return Err(Error::Internal("key sum into a non-integer state".into())),
    }
    Ok(())
}

/// Σ keys and count of the selected, valid rows of block `block` of a key
/// encoding, reading the encoding directly where it allows.
fn sum_keys(enc: &KeyEncoding, block: usize, block_len: usize, sel: Sel<'_>, valid: Option<Bits>, scratch: &mut Scratch) -> (u128, u64) {
    let start = block * LANES;
    let range = match (sel, valid) {
        (Sel::Range(a, b), None) => Some((a, b)),
        _ => None,
    };
    let lanes = valid.unwrap_or_else(|| sel.active());
    match enc {
        KeyEncoding::Constant { key, .. } => {
            let n = lanes.count() as u64;
            (*key as u128 * n as u128, n)
        }
        KeyEncoding::BitPacked(bp) => {
            let frame = bp.frames()[block];
            if frame.width == 0 {
                let n = lanes.count() as u64;
                return (frame.reference as u128 * n as u128, n);
            }
            // Unpack the deltas (without the reference) and sum them.
            let deltas = &mut scratch.block;
            bp.decode_block_deltas(block, deltas);
            let small = frame.width <= 53;
            let (sum, n) = match (range, sel) {
                (Some((0, b)), _) if b == block_len && small => {
                    // Padding deltas are zero: sum the whole block.
                    (kernels::sum_small(deltas, 0, LANES) as u128, b as u64)
                }
                (Some((a, b)), _) if small => (kernels::sum_small(deltas, a, b) as u128, (b - a) as u64),
                (Some((a, b)), _) => (sum_all(&deltas[a..b], false), (b - a) as u64),
                (None, Sel::Ids(ids, base)) => {
                    let mut s: u128 = 0;
                    lanes.for_each_one(|l| s += deltas[(ids[l] - base) as usize] as u128);
                    (s, lanes.count() as u64)
                }
                (None, Sel::Range(a, _)) => {
                    let mut s: u128 = 0;
                    lanes.for_each_one(|l| s += deltas[a + l] as u128);
                    (s, lanes.count() as u64)
                }
                (None, Sel::Mask(..)) if small => (kernels::masked_sum_small(deltas, &lanes) as u128, lanes.count() as u64),
                (None, Sel::Mask(..)) => (masked_sum(&deltas[..], &lanes, false), lanes.count() as u64),
            };
            (n as u128 * frame.reference as u128 + sum, n)
        }
        KeyEncoding::Sequence(seq) if range.is_some() => {
            let (a, b) = range.unwrap_or_default();
            let mut total: u128 = 0;
            let mut row = start + a;
            let end = start + b;
            while row < end {
                let r = seq.run_of(row);
                let run = seq.runs()[r];
                let run_end = seq.runs().get(r + 1).map_or(usize::MAX, |x| x.start as usize).min(end);
                let k = (run_end - row) as i128;
                let first = run.key(row) as i128;
                let step = run.step as i64 as i128;
                let last = first + (k - 1) * step;
                if (0..=u64::MAX as i128).contains(&last) {
                    total += (k * first + step * k * (k - 1) / 2) as u128;
                } else {
                    // The progression wraps around the key space: add key by key.
                    for i in row..run_end {
                        total += run.key(i) as u128;
                    }
                }
                row = run_end;
            }
            (total, (b - a) as u64)
        }
        KeyEncoding::RunEnd(re) if !matches!(sel, Sel::Ids(..)) => {
            let offset = if let Sel::Range(a, _) = sel { a } else { 0 };
            let (lo, hi) = (start + offset, start + offset + sel.lanes());
            let mut total: u128 = 0;
            let mut n = 0u64;
            let mut r = re.run_of(lo);
            let mut row = lo;
            while row < hi {
                let run_end = (re.ends()[r] as usize).min(hi);
                let k = lanes_in(&lanes, row - start - offset, run_end - start - offset) as u64;
                total += re.values()[r] as u128 * k as u128;
                n += k;
                row = run_end;
                r += 1;
            }
            (total, n)
        }
        _ => {
            gather_keys(enc, start, start + block_len, sel, scratch);
            let keys = &scratch.keys;
            let mut s: u128 = 0;
            lanes.for_each_one(|l| s += keys[l] as u128);
            (s, lanes.count() as u64)
        }
    }
}

/// Number of set lanes in `a..b`.
fn lanes_in(lanes: &Bits, a: usize, b: usize) -> usize {
    lanes.and(&Bits::range(a, b)).count()
}

/// Σ values; `small` promises every value is below 2^53, so 1,024 of them
/// fit a u64 and the loop vectorises.
#[inline]
fn sum_all(v: &[u64], small: bool) -> u128 {
    if small {
        let mut acc = [0u64; 4];
        let chunks = v.chunks_exact(4);
        let rest: u64 = chunks.remainder().iter().sum();
        for c in chunks {
            for i in 0..4 {
                acc[i] += c[i];
            }
        }
        (acc.iter().sum::<u64>() + rest) as u128
    } else {
        v.iter().map(|&x| x as u128).sum()
    }
}

/// Σ of the lanes set in `mask`, 64 lanes at a time.
#[inline]
fn masked_sum(v: &[u64], mask: &Bits, small: bool) -> u128 {
    let mut total: u128 = 0;
    for (w, &word) in mask.0.iter().enumerate() {
        if word == 0 {
            continue;
        }
        let lanes = &v[w * 64..w * 64 + 64];
        if word == u64::MAX {
            total += sum_all(lanes, small);
        } else if small {
            let mut s = 0u64;
            for (j, &x) in lanes.iter().enumerate() {
                s += x & 0u64.wrapping_sub((word >> j) & 1);
            }
            total += s as u128;
        } else {
            for (j, &x) in lanes.iter().enumerate() {
                total += (x & 0u64.wrapping_sub((word >> j) & 1)) as u128;
            }
        }
    }
    total
}

/// The smallest (or largest) key among `lanes`.
fn best_key(keys: &[u64; LANES], lanes: &Bits, max: bool) -> Option<u64> {
    let first = lanes.first_one()?;
    let mut best = keys[first];
    if max {
        lanes.for_each_one(|l| best = best.max(keys[l]));
    } else {
        lanes.for_each_one(|l| best = best.min(keys[l]));
    }
    Some(best)
}

/// The largest magnitude among `lanes` of `x`.
#[inline]
fn max_abs(x: &[i64; LANES], lanes: &Bits) -> u64 {
    match lanes.dense_len() {
        Some(n) => x[..n].iter().fold(0u64, |m, v| m.max(v.unsigned_abs())),
        None => {
            let mut m = 0u64;
            lanes.for_each_one(|l| m = m.max(x[l].unsigned_abs()));
            m
        }
    }
}

/// Offers a number to group 0 of a MIN/MAX state.
fn offer_num(state: &mut StateColumn, n: Num, max: bool) {
    offer_num_at(state, 0, n, max);
}

#[inline]
fn offer_num_at(state: &mut StateColumn, g: usize, n: Num, max: bool) {
    match (state, n) {
        (StateColumn::MinMaxI { v, has }, Num::I64(x))
            if (!has[g] || better(x, v[g], max)) => {
                (v[g], has[g]) = (x, true);
            }
        (StateColumn::MinMaxU { v, has }, Num::U64(x))
            if (!has[g] || better(x, v[g], max)) => {
                (v[g], has[g]) = (x, true);
            }
        (StateColumn::MinMaxF { v, has }, Num::F64(x))
            if (!has[g] || f64_better(x, v[g], max)) => {
                (v[g], has[g]) = (x, true);
            }
        (StateColumn::MinMaxD { v, has }, Num::I128(x))
            if (!has[g] || better(x, v[g], max)) => {
                (v[g], has[g]) = (x, true);
            }
        _ => {}
    }
}

/// Adds the valid, active lanes of an operand to group 0 of a SUM state.
fn sum_operand(state: &mut StateColumn, o: Operand<'_>, active: &Bits) -> Result<()> {
    match o {
        Operand::Scalar(None) => {}
        Operand::Scalar(Some(x)) => {
            let k = active.count() as u64;
            match (state, x) {
                (StateColumn::SumI { sum, n }, Num::I64(v)) => {
                    sum.total[0] += v as i128 * k as i128;
                    n[0] += k;
                }
                (StateColumn::SumU { sum, n }, Num::U64(v)) => {
                    sum[0] += v as u128 * k as u128;
                    n[0] += k;
                }
                (StateColumn::SumF { sum, n }, Num::F64(v)) => {
                    for _ in 0..k {
                        sum[0] += v;
                    }
                    n[0] += k;
                }
                (StateColumn::SumD { sum, n }, Num::I128(v)) => {
                    let add = v.checked_mul(k as i128).ok_or_else(|| Error::Overflow("decimal SUM".into()))?;
                    sum[0] = sum[0].checked_add(add).ok_or_else(|| Error::Overflow("decimal SUM".into()))?;
                    n[0] += k;
                }
                _ => return Err(Error::Internal("sum of another domain".into())),
            }
        }
        Operand::Vector(vec) => {
            let lanes = vec.valid(active);
            let k = lanes.count() as u64;
            match (state, &vec.values) {
                (StateColumn::SumI { sum, n }, Values::I64(x)) => {
                    if sum.reserve(k as usize, max_abs(x, &lanes)) {
                        let s: i64 = match lanes.dense_len() {
                            Some(n) => x[..n].iter().sum(),
                            None => {
                                let mut s = 0;
                                lanes.for_each_one(|l| s += x[l]);
                                s
                            }
                        };
                        sum.partial[0] += s;
                    } else {
                        let mut s: i128 = 0;
                        lanes.for_each_one(|l| s += x[l] as i128);
                        sum.total[0] += s;
                    }
                    n[0] += k;
                }
                (StateColumn::SumU { sum, n }, Values::U64(x)) => {
                    let mut s: u128 = 0;
                    lanes.for_each_one(|l| s += x[l] as u128);
                    sum[0] += s;
                    n[0] += k;
                }
                (StateColumn::SumF { sum, n }, Values::F64(x)) => {
                    let mut s = 0.0;
                    lanes.for_each_one(|l| s += x[l]);
                    sum[0] += s;
                    n[0] += k;
                }
                (StateColumn::SumD { sum, n }, Values::I128(x)) => {
                    let mut s: i128 = sum[0];
                    let mut overflow = false;
                    lanes.for_each_one(|l| match s.checked_add(x[l]) {
                        Some(v) => s = v,
                        None => overflow = true,
                    });
                    if overflow {
                        return Err(Error::Overflow("decimal SUM".into()));
                    }
                    sum[0] = s;
                    n[0] += k;
                }
                _ => return Err(Error::Internal("sum of another domain".into())),
            }
        }
    }
    Ok(())
}

/// Offers the valid, active lanes of an operand to group 0 of MIN/MAX.
fn minmax_operand(state: &mut StateColumn, o: Operand<'_>, active: &Bits, max: bool) {
    match o {
        Operand::Scalar(None) => {}
        Operand::Scalar(Some(x)) => {
            if !active.is_empty() {
                offer_num(state, x, max);
            }
        }
        Operand::Vector(vec) => {
            let lanes = vec.valid(active);
            lanes.for_each_one(|l| {
                let n = match &vec.values {
                    Values::I64(x) => Num::I64(x[l]),
                    Values::U64(x) => Num::U64(x[l]),
                    Values::F64(x) => Num::F64(x[l]),
                    Values::I128(x) => Num::I128(x[l]),
                };
                offer_num(state, n, max);
            });
        }
    }
}

/// The smallest (or largest) byte string among `lanes`, without copying.
fn best_bytes<'s>(
    src: &'s ColumnSource<'_>,
    side: Side,
    sel: Sel<'_>,
    lanes: &Bits,
    max: bool,
    scratch: &mut Scratch,
) -> Option<&'s [u8]> {
    let mut best: Option<&'s [u8]> = None;
    let mut offer = |v: &'s [u8]| {
        if best.is_none_or(|b| better(v, b, max)) {
            best = Some(v);
        }
    };
    match side {
        Side::Main(block) => {
            let col = src.main()?;
            if let Encoding::StrDict(dict) = col.encoding() {
                // Code order is value order: find the best code, then one lookup.
                gather_keys(dict.codes(), block * LANES, col.len(), sel, scratch);
                let code = best_key(&scratch.keys, lanes, max)?;
                return Some(dict.dict_value(code as usize));
            }
            let start = block * LANES;
            sel_offsets(sel, lanes, |_, o| offer(src.main_bytes(start + o)));
        }
        Side::Delta(chunk) => sel_offsets(sel, lanes, |_, o| offer(src.delta_bytes(chunk, o))),
    }
    best
}

/// Folds `sel` into the groups `gids` (per lane) of one aggregate.
#[allow(clippy::too_many_arguments)]
fn grouped(
    state: &mut StateColumn,
    kind: &StateKind,
    input: &mut Input,
    cols: &ShardColumns<'_>,
    side: Side,
    sel: Sel<'_>,
    scratch: &mut Scratch,
    gids: &[u32; LANES],
) -> Result<()> {
    let active = sel.active();
    match (kind, input) {
        (StateKind::Count, Input::CountStar) => {
            let StateColumn::Count(c) = state else { return Err(Error::Internal("count state".into())) };
            let c = c.as_mut_slice();
            active.for_each_one(|l| c[gids[l] as usize] += 1);
        }
        (StateKind::Count, Input::Bytes(col)) => {
            let StateColumn::Count(c) = state else { return Err(Error::Internal("count state".into())) };
            let valid = column_validity(cols.column(*col), side, sel).map_or(active, |v| v.and(&active));
            valid.for_each_one(|l| c[gids[l] as usize] += 1);
        }
        (StateKind::MinMax { max, .. }, Input::Bytes(col)) => {
            let src = cols.column(*col);
            let valid = column_validity(src, side, sel).map_or(active, |v| v.and(&active));
            match side {
                Side::Main(block) => {
                    let start = block * LANES;
                    sel_offsets(sel, &valid, |l, o| state.offer_bytes(gids[l] as usize, src.main_bytes(start + o), *max));
                }
                Side::Delta(chunk) => {
                    sel_offsets(sel, &valid, |l, o| state.offer_bytes(gids[l] as usize, src.delta_bytes(chunk, o), *max));
                }
            }
        }
        (kind, Input::Column { col, expr }) => {
            let bound = zone_magnitude(cols, *col, side);
            let o = expr.eval(cols, side, sel, scratch)?;
            scatter(state, kind, o, &active, gids, bound)?;
        }
        (kind, Input::Expr(expr)) => {
            let o = expr.eval(cols, side, sel, scratch)?;
            scatter(state, kind, o, &active, gids, None)?;
        }
        _ => return Err(Error::Internal("aggregate input and state disagree".into())),
    }
    Ok(())
}

/// The largest |value| of an I64-domain column in main block `block`,
/// from its zone map (exact for key encodings), or `None` when unknown.
fn zone_magnitude(cols: &ShardColumns<'_>, col: usize, side: Side) -> Option<u64> {
    let Side::Main(block) = side else { return None };
    let src = cols.column(col);
    let main = src.main()?;
    if !matches!(main.encoding(), Encoding::Keys(_)) {
        return None;
    }
    let z = main.zones()[block];
    if z.all_null() {
        return Some(0);
    }
    match (key_to_num(src.physical(), z.min), key_to_num(src.physical(), z.max)) {
        (Num::I64(lo), Num::I64(hi)) => Some(lo.unsigned_abs().max(hi.unsigned_abs())),
        _ => None,
    }
}

/// Scatters an operand's valid, active lanes into per-group states;
/// `bound`, when known, is the largest |value| of the lanes.
fn scatter(
    state: &mut StateColumn,
    kind: &StateKind,
    o: Operand<'_>,
    active: &Bits,
    gids: &[u32; LANES],
    bound: Option<u64>,
) -> Result<()> {
    let (lanes, vec) = match o {
        Operand::Scalar(None) => return Ok(()),
        Operand::Scalar(Some(x)) => {
            // Rare (a constant input): one offer per lane.
            let mut err = None;
            active.for_each_one(|l| {
                let g = gids[l] as usize;
                if let Err(e) = add_one(state, kind, g, x) {
                    err.get_or_insert(e);
                }
            });
            return err.map_or(Ok(()), Err);
        }
        Operand::Vector(v) => (v.valid(active), v),
    };
    match (state, &vec.values) {
        (StateColumn::Count(c), _) => {
            let c = c.as_mut_slice();
            lanes.for_each_one(|l| c[gids[l] as usize] += 1)
        }
        (StateColumn::SumI { sum, n }, Values::I64(x)) => {
            let implied = matches!(kind, StateKind::Sum { implied: true, .. });
            if sum.reserve(lanes.count(), bound.unwrap_or_else(|| max_abs(x, &lanes))) {
                let (partial, n) = (sum.partial.as_mut_slice(), n.as_mut_slice());
                match lanes.dense_len() {
                    Some(k) if implied => {
                        for (&g, &v) in gids[..k].iter().zip(&x[..k]) {
                            partial[g as usize] += v;
                        }
                    }
                    Some(k) => {
                        for (&g, &v) in gids[..k].iter().zip(&x[..k]) {
                            partial[g as usize] += v;
                            n[g as usize] += 1;
                        }
                    }
                    None => lanes.for_each_one(|l| {
                        let g = gids[l] as usize;
                        partial[g] += x[l];
                        n[g] += 1;
                    }),
                }
            } else {
                let total = &mut sum.total;
                lanes.for_each_one(|l| {
                    let g = gids[l] as usize;
                    total[g] += x[l] as i128;
                    n[g] += 1;
                });
            }
        }
        (StateColumn::SumU { sum, n }, Values::U64(x)) => lanes.for_each_one(|l| {
            let g = gids[l] as usize;
            sum[g] += x[l] as u128;
            n[g] += 1;
        }),
        (StateColumn::SumF { sum, n }, Values::F64(x)) => lanes.for_each_one(|l| {
            let g = gids[l] as usize;
            sum[g] += x[l];
            n[g] += 1;
        }),
        (StateColumn::SumD { sum, n }, Values::I128(x)) => {
            let mut overflow = false;
            lanes.for_each_one(|l| {
                let g = gids[l] as usize;
                match sum[g].checked_add(x[l]) {
                    Some(v) => sum[g] = v,
                    None => overflow = true,
                }
                n[g] += 1;
            });
            if overflow {
                return Err(Error::Overflow("decimal SUM".into()));
            }
        }
        (state @ (StateColumn::MinMaxI { .. } | StateColumn::MinMaxU { .. } | StateColumn::MinMaxF { .. } | StateColumn::MinMaxD { .. }), values) => {
            let StateKind::MinMax { max, .. } = kind else {
                return Err(Error::Internal("min/max state of another aggregate".into()));
            };
            lanes.for_each_one(|l| {
                let n = match values {
                    Values::I64(x) => Num::I64(x[l]),
                    Values::U64(x) => Num::U64(x[l]),
                    Values::F64(x) => Num::F64(x[l]),
                    Values::I128(x) => Num::I128(x[l]),
                };
                offer_num_at(state, gids[l] as usize, n, *max);
            });
        }
        _ => return Err(Error::Internal("scatter into a state of another domain".into())),
    }
    Ok(())
}

/// Adds one value to group `g`.
fn add_one(state: &mut StateColumn, kind: &StateKind, g: usize, x: Num) -> Result<()> {
    match (state, x) {
        (StateColumn::Count(c), _) => c[g] += 1,
        (StateColumn::SumI { sum, n }, Num::I64(v)) => {
            sum.total[g] += v as i128;
            n[g] += 1;
        }
        (StateColumn::SumU { sum, n }, Num::U64(v)) => {
            sum[g] += v as u128;
            n[g] += 1;
        }
        (StateColumn::SumF { sum, n }, Num::F64(v)) => {
            sum[g] += v;
            n[g] += 1;
        }
        (StateColumn::SumD { sum, n }, Num::I128(v)) => {
            sum[g] = sum[g].checked_add(v).ok_or_else(|| Error::Overflow("decimal SUM".into()))?;
            n[g] += 1;
        }
        (state, x) => {
            let StateKind::MinMax { max, .. } = kind else {
                return Err(Error::Internal("value of another domain".into()));
            };
            offer_num_at(state, g, x, *max);
        }
    }
    Ok(())
}

impl Kernel for AggregateKernel {
    type Acc = AggregateAcc;

    fn open(&mut self, _cols: &ShardColumns<'_>) -> Result<()> {
        // Caches of another shard's dictionaries are meaningless here.
        for key in &mut self.keys {
            if let KeyInput::Bytes { cache, .. } = key {
                *cache = DictCache::default();
            }
        }
        Ok(())
    }

    fn columns(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for k in &self.spec.group_by {
            k.columns(&mut out);
        }
        for a in &self.spec.aggregates {
            if let Some(e) = &a.input {
                e.columns(&mut out);
            }
        }
        out
    }

    fn process_main_block(&mut self, cols: &ShardColumns<'_>, acc: AggregateAcc, block: usize, sel: Sel<'_>, scratch: &mut Scratch) -> AggregateAcc {
        self.process(cols, acc, Side::Main(block), sel, scratch)
    }

    fn process_delta_block(&mut self, cols: &ShardColumns<'_>, acc: AggregateAcc, chunk: usize, sel: Sel<'_>, scratch: &mut Scratch) -> AggregateAcc {
        self.process(cols, acc, Side::Delta(chunk), sel, scratch)
    }

    fn merge(a: AggregateAcc, b: AggregateAcc) -> AggregateAcc {
        a.merge(b)
    }
}
