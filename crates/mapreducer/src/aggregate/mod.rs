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

mod grouped;
mod groups;
mod state;
mod ungrouped;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::ArrayRef;
use arrow_schema::DataType;
use quiverdb_storage::TableSchema;
use quiverdb_storage::main::{KeySource, StrDictionary};

use self::groups::{BytesMap, Groups, HashMapKeys, IntMap, KeyId, KeyMap, KeyValue, MAX_KEYS, float_group_bits};
use self::state::{MinMaxDomain, StateColumn, StateKind, SumDomain};
use crate::columns::{ColumnSource, Scratch, ShardColumns, gather_keys, key_to_num};
use crate::error::{Error, Result};
use crate::expr::{CompiledExpr, MapExpr, Operand, Side};
use crate::output::{bytes_array, f64_array, i64_array, native_array, nulls_from};
use crate::scalar::{Domain, Num};
use crate::shard::Kernel;
use crate::vector::Values;
use quiverdb_storage::block::{Bits, LANES, Sel, sel_offsets};

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
                _ => {
                    return Err(Error::InvalidExpression(format!(
                        "{:?} takes {} input",
                        agg.func,
                        if agg.func == AggFunc::CountStar { "no" } else { "one" }
                    )));
                }
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
        AggregateAcc(Box::new(AccState {
            spec: Arc::clone(self),
            token: NEXT_TOKEN.fetch_add(1, Ordering::Relaxed),
            groups,
            states,
            deferred: 0,
            error: None,
        }))
    }
}

/// The state kind and output type of `func` over `input`.
fn state_kind(func: AggFunc, input: Option<&DataType>) -> Result<(StateKind, DataType)> {
    let unsupported =
        || Error::Unsupported(format!("{func:?} of {}", input.map_or("*".to_string(), |t| t.to_string())));
    Ok(match (func, input) {
        (AggFunc::CountStar | AggFunc::Count, _) => (StateKind::Count, DataType::Int64),
        (AggFunc::Sum | AggFunc::Avg, Some(t)) => {
            let avg = func == AggFunc::Avg;
            let (domain, out) = match t {
                DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
                    (SumDomain::Signed, DataType::Int64)
                }
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
///
/// The state sits behind one box: accumulators are passed by value block
/// after block, and a pointer moves where the state would be copied.
#[derive(Debug)]
pub struct AggregateAcc(Box<AccState>);

/// What an [`AggregateAcc`] holds.
#[derive(Debug)]
struct AccState {
    spec: Arc<AggregateSpec>,
    token: u64,
    groups: Groups,
    states: Vec<StateColumn>,
    /// Shards whose rows a kernel holds by dictionary code, to be folded
    /// in when the shard is finished ([`ByCode`]).
    deferred: u32,
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
        self.0.error.as_ref()
    }

    /// Number of groups so far.
    pub fn num_groups(&self) -> usize {
        self.0.groups.len
    }

    /// Combines two accumulators of the same spec (MemCP's `reduce2`):
    /// groups are matched by key value.
    pub fn merge(mut self, other: AggregateAcc) -> AggregateAcc {
        self.0.merge(*other.0);
        self
    }

    /// The final values: one row per group (one row without group keys).
    pub fn finish(self) -> Result<AggregateOutput> {
        self.0.finish_as(false)
    }

    /// The partial states, one row per group, laid out as DataFusion's
    /// partial aggregates do: each AVG contributes two arrays, `count`
    /// (UInt64) and `sum`, both NULL for a group without values; every
    /// other aggregate its final value.
    pub fn finish_states(self) -> Result<AggregateOutput> {
        self.0.finish_as(true)
    }
}

impl AccState {
    fn merge(&mut self, other: AccState) {
        if let Err(e) = self.check_finished().and(other.check_finished()) {
            self.error.get_or_insert(e);
        }
        if self.error.is_some() {
            return;
        }
        if let Some(e) = other.error {
            self.error = Some(e);
            return;
        }
        if let Err(e) = self.merge_groups(&other) {
            self.error = Some(e);
        }
    }

    fn merge_groups(&mut self, other: &AccState) -> Result<()> {
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

    /// An error while a kernel still holds rows of this accumulator for
    /// the end of a shard: its shard was not finished.
    fn check_finished(&self) -> Result<()> {
        if self.deferred == 0 {
            return Ok(());
        }
        Err(Error::Internal(format!(
            "an aggregate was used with {} shard(s) not finished: call MapReducer::finish after a shard's last block",
            self.deferred
        )))
    }

    fn finish_as(self, states: bool) -> Result<AggregateOutput> {
        if let Some(e) = self.error {
            return Err(e);
        }
        self.check_finished()?;
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
                if states { s.finish_state(kind, out) } else { Ok(vec![s.finish(kind, out)?]) }
            })
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect();
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
            i64_array(data_type, v, nulls)
        }
        Some(Domain::U64) => {
            let v: Vec<u64> = values.iter().map(|v| if let KeyValue::U64(x) = v { *x } else { 0 }).collect();
            native_array(data_type, v, nulls)
        }
        Some(Domain::F64) => {
            let v: Vec<f64> = values.iter().map(|v| if let KeyValue::F64(x) = v { *x } else { 0.0 }).collect();
            f64_array(data_type, v, nulls)
        }
        Some(Domain::I128) => {
            let v: Vec<i128> = values.iter().map(|v| if let KeyValue::I128(x) = v { *x } else { 0 }).collect();
            native_array(data_type, v, nulls)
        }
        None => bytes_array(data_type, values.iter().map(|v| if let KeyValue::Bytes(b) = v { Some(*b) } else { None })),
    }
}

/// How the kernel reads one aggregate's input.
#[derive(Debug)]
pub(super) enum Input {
    CountStar,
    /// A numeric column: encoding-aware fast paths, `expr` as fallback.
    Column {
        col: usize,
        expr: CompiledExpr,
    },
    /// A computed numeric expression.
    Expr(CompiledExpr),
    /// A string or binary column.
    Bytes(usize),
}

/// How the kernel reads one group key.
#[derive(Debug)]
enum KeyInput {
    Num(CompiledExpr),
    /// An integer function of one integer column (`category % 100`):
    /// evaluated once per distinct column value, see [`KeyMemo`].
    Memo {
        col: usize,
        column: Box<CompiledExpr>,
        expr: CompiledExpr,
        memo: KeyMemo,
    },
    Bytes {
        col: usize,
        cache: DictCache,
    },
}

/// Column value → key id of `f(value)` for a group key `f(column)`, in a
/// direct-mapped window of column values, for one accumulator (`token`).
/// A row costs a window lookup instead of evaluating `f`; `f` runs once
/// per distinct value (on first sight), so its results and errors are
/// those of evaluating it on every row. The window starts at the least
/// value of the first block and moves down to take in a lower value
/// whenever everything it holds and that value fit in it together, so
/// the order in which values come does not matter. Values that do not
/// fit are evaluated one by one; a kernel that meets many of them (a
/// column with a wide range) goes back to evaluating `f` as a vector.
#[derive(Debug, Default)]
struct KeyMemo {
    token: u64,
    base: Option<i64>,
    /// The greatest value with a filled slot (`i64::MIN`: none). The
    /// least is `base`: the window starts at it.
    hi: i64,
    slots: Vec<u32>,
    off: bool,
}

impl KeyMemo {
    /// Lanes of a block outside the window beyond which memoising stops.
    const MAX_OUTSIDE: usize = LANES / 8;

    fn bind(&mut self, token: u64) {
        if self.token != token || self.slots.is_empty() {
            self.token = token;
            self.base = None;
            self.hi = i64::MIN;
            self.slots.clear();
            self.slots.resize(groups::DENSE_WINDOW, u32::MAX);
        }
    }

    /// The slot of `v`: in the window as it is, or, for a value below
    /// it, after moving the window (its filled slots with it) down to
    /// start at `v`, if the greatest filled value still fits; `None` if
    /// `v` does not fit. (The window starts at the least filled value, so
    /// a value above it never fits by moving.)
    fn slot_for(&mut self, v: i64) -> Option<usize> {
        let base = *self.base.get_or_insert(v);
        let len = self.slots.len();
        let at = i128::from(v) - i128::from(base);
        if (0..len as i128).contains(&at) {
            return Some(at as usize);
        }
        if at > 0 || i128::from(self.hi) - i128::from(v) >= len as i128 {
            return None;
        }
        let by = at.unsigned_abs().min(len as u128) as usize;
        self.slots.copy_within(..len - by, by);
        self.slots[..by].fill(u32::MAX);
        self.base = Some(v);
        Some(0)
    }

    /// Records `id` as the key id of `v`, whose slot is `slot`.
    fn fill(&mut self, slot: usize, v: i64, id: u32) {
        self.slots[slot] = id;
        self.hi = self.hi.max(v);
    }
}

/// Dictionary code → key id of one shard's dictionary, for one
/// accumulator: valid only for that accumulator (`token`) and a
/// dictionary of exactly these values (`offsets`, `bytes`). Shards built
/// from similar data often have equal dictionaries; the next shard's is
/// compared with the copy (a few KiB, once per shard) and, when equal,
/// keeps the ids instead of hashing every value again. `dict` (the bytes'
/// address) skips even the comparison within one shard; it is reset when
/// the kernel moves to another shard.
#[derive(Debug, Default)]
struct DictCache {
    token: u64,
    dict: usize,
    offsets: Vec<u32>,
    bytes: Vec<u8>,
    ids: Vec<u32>,
}

impl DictCache {
    /// Makes the cache valid for `dict` under accumulator `token`.
    fn bind(&mut self, dict: StrDictionary<'_>, token: u64) {
        let address = dict.values_buffer().as_ptr() as usize;
        if self.token == token && self.dict == address {
            return;
        }
        let same =
            self.token == token && self.offsets == dict.offsets() && self.bytes == dict.values_buffer().as_slice();
        self.dict = address;
        if same {
            return;
        }
        self.token = token;
        self.offsets.clear();
        self.offsets.extend_from_slice(dict.offsets());
        self.bytes.clear();
        self.bytes.extend_from_slice(dict.values_buffer());
        self.ids.clear();
        self.ids.resize(dict.dict_len(), u32::MAX);
    }
}

/// Aggregation by dictionary code. With one group key, a dictionary
/// string column without nulls, the rows of whole main blocks are folded
/// into states indexed by the shard's codes: a row's code is its group, so
/// no row looks its group up. The codes that have rows are mapped to
/// groups and their states merged into the accumulator once, when the
/// shard is finished ([`Kernel::close`]) or a block that cannot go by
/// code arrives. When every main row of the shard went by code, every
/// code has rows (each dictionary entry is some row's value, see
/// [`StrDictionary`]); otherwise the codes of the blocks that did are decoded
/// again to find them.
///
/// A group key that is an integer function of one integer column
/// (`category % 100`, see [`KeyMemo`]) folds the same way by the column's
/// value when the shard's values span less than [`groups::DENSE_WINDOW`]
/// and a COUNT(*) is among the aggregates: its per-value counts tell which
/// values have rows, and each of those is mapped to its group once.
///
/// Until then the accumulator counts the shard as deferred, and reports an
/// error rather than a result if it is used before the shard is finished.
#[derive(Debug, Default)]
struct ByCode {
    /// Token of the accumulator the states belong to; 0 when none.
    token: u64,
    /// One state column per aggregate, indexed by code.
    states: Vec<StateColumn>,
    /// Main blocks folded by code, and their rows.
    blocks: Vec<u32>,
    rows: usize,
    /// Codes with rows, one bit each (when not every row went by code).
    present: Vec<u64>,
    /// (group, code) of the codes with rows, when merging.
    pairs: Vec<(u32, u32)>,
    /// For a memoised integer key ([`KeyMemo`]) instead of a dictionary:
    /// the least key of the column in the shard (a row's slot is its key
    /// minus it); its COUNT(*) state says which slots have rows.
    lo: Option<u64>,
}

impl ByCode {
    /// Starts holding rows of `acc` in `slots` states per aggregate (a
    /// shard of `rows` main rows), unless it already does.
    fn begin(
        &mut self,
        acc: &mut AccState,
        kinds: &[StateKind],
        slots: usize,
        rows: usize,
        lo: Option<u64>,
    ) -> Result<()> {
        if self.token == acc.token {
            return Ok(());
        }
        if self.token != 0 {
            return Err(Error::Internal("a kernel holds rows of another aggregate by code".into()));
        }
        self.token = acc.token;
        self.lo = lo;
        self.blocks.clear();
        // One allocation for the shard's blocks, however many.
        self.blocks.reserve(rows.div_ceil(LANES));
        self.rows = 0;
        if self.states.len() != kinds.len() {
            self.states = kinds.iter().map(StateColumn::new).collect();
        }
        for s in &mut self.states {
            s.clear();
            s.ensure(slots);
        }
        acc.deferred += 1;
        Ok(())
    }
}

/// The [`Kernel`] of an aggregation over one shard.
#[derive(Debug)]
pub struct AggregateKernel {
    spec: Arc<AggregateSpec>,
    inputs: Vec<Input>,
    keys: Vec<KeyInput>,
    key_ids: Vec<Box<[u32; LANES]>>,
    gids: Box<[u32; LANES]>,
    by_code: ByCode,
    /// The aggregate that is COUNT(*), if one is.
    count_star: Option<usize>,
    /// No keys and every aggregate COUNT(*): a block adds how many rows
    /// it selects, and reads nothing.
    counts_only: bool,
    /// The key range of a memoised key's column in the open shard, when
    /// its blocks may fold by value (see [`ByCode`]).
    value_range: Option<(u64, u64)>,
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
                    (Some(_), _) => {
                        let expr = CompiledExpr::compile(k, schema)?;
                        match expr.integer_function_of() {
                            Some(c) => KeyInput::Memo {
                                col: c,
                                column: Box::new(CompiledExpr::compile(&MapExpr::col(c), schema)?),
                                expr,
                                memo: KeyMemo::default(),
                            },
                            None => KeyInput::Num(expr),
                        }
                    }
                    (None, Some(col)) => KeyInput::Bytes { col, cache: DictCache::default() },
                    (None, None) => return Err(Error::Unsupported(format!("group key {k}"))),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let key_ids = (0..keys.len()).map(|_| Box::new([0u32; LANES])).collect();
        let count_star = spec.aggregates.iter().position(|a| a.func == AggFunc::CountStar);
        let counts_only = keys.is_empty() && inputs.iter().all(|i| matches!(i, Input::CountStar));
        Ok(Self {
            spec,
            inputs,
            keys,
            key_ids,
            gids: Box::new([0; LANES]),
            by_code: ByCode::default(),
            count_star,
            counts_only,
            value_range: None,
        })
    }

    fn process(
        &mut self,
        cols: &ShardColumns<'_>,
        mut acc: AggregateAcc,
        side: Side,
        sel: Sel<'_>,
        scratch: &mut Scratch,
    ) -> AggregateAcc {
        if self.counts_only {
            let n = sel.count() as u64;
            for state in &mut acc.0.states {
                state.add_count(0, n);
            }
            return acc;
        }
        if acc.0.error.is_none()
            && sel.lanes() > 0
            && let Err(e) = self.fold(cols, &mut acc.0, side, sel, scratch)
        {
            acc.0.error = Some(e);
        }
        acc
    }

    fn fold(
        &mut self,
        cols: &ShardColumns<'_>,
        acc: &mut AccState,
        side: Side,
        sel: Sel<'_>,
        scratch: &mut Scratch,
    ) -> Result<()> {
        if self.keys.is_empty() {
            for (i, input) in self.inputs.iter_mut().enumerate() {
                ungrouped::fold(&mut acc.states[i], &self.spec.kinds[i], input, cols, side, sel, scratch)?;
            }
            return Ok(());
        }
        // A whole main block of one key column folds by dictionary code
        // (no nulls in the shard) or by value (see [`ByCode`]).
        let key_col = match self.keys.as_slice() {
            [KeyInput::Bytes { col, .. }] => Some((*col, false)),
            [KeyInput::Memo { col, .. }] => Some((*col, true)),
            _ => None,
        };
        if let (Some((col, memo)), Side::Main(block), Sel::Range(0, rows)) = (key_col, side, sel)
            && rows == cols.block_len(block)
            && let Some(main) = cols.column(col).main()
        {
            match (main.string_dictionary(), main.keys(), memo, self.value_range) {
                (Some(dict), _, false, _) if main.null_count() == 0 => {
                    return self.fold_slots(
                        &dict.codes(),
                        main.len(),
                        dict.dict_len(),
                        None,
                        block,
                        rows,
                        cols,
                        acc,
                        sel,
                        scratch,
                    );
                }
                (_, Some(keys), true, Some((lo, hi))) => {
                    return self.fold_slots(
                        &keys,
                        main.len(),
                        (hi - lo) as usize + 1,
                        Some(lo),
                        block,
                        rows,
                        cols,
                        acc,
                        sel,
                        scratch,
                    );
                }
                _ => {}
            }
        }
        self.flush_by_code(cols, acc, scratch)?;
        self.assign_groups(cols, acc, side, sel, scratch)?;
        for (i, input) in self.inputs.iter_mut().enumerate() {
            acc.states[i].ensure(acc.groups.len);
            grouped::fold(&mut acc.states[i], &self.spec.kinds[i], input, cols, side, sel, scratch, &self.gids)?;
        }
        Ok(())
    }

    /// Folds main block `block` (all of its `rows`) into [`ByCode`]'s
    /// `slots` states per aggregate: a row's slot is its key in `keys` (a
    /// column of `len` rows) minus `lo` (none for dictionary codes).
    #[allow(clippy::too_many_arguments)]
    fn fold_slots(
        &mut self,
        keys: &impl KeySource,
        len: usize,
        slots: usize,
        lo: Option<u64>,
        block: usize,
        rows: usize,
        cols: &ShardColumns<'_>,
        acc: &mut AccState,
        sel: Sel<'_>,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let bc = &mut self.by_code;
        bc.begin(acc, &self.spec.kinds, slots, len, lo)?;
        // The whole block's slots (the caller folds whole blocks),
        // unpacked straight from the keys.
        keys.decode_block_u32(block, lo.unwrap_or(0), &mut self.gids, &mut scratch.keys);
        for (i, input) in self.inputs.iter_mut().enumerate() {
            grouped::fold(
                &mut bc.states[i],
                &self.spec.kinds[i],
                input,
                cols,
                Side::Main(block),
                sel,
                scratch,
                &self.gids,
            )?;
        }
        bc.blocks.push(block as u32);
        bc.rows += rows;
        Ok(())
    }

    /// Merges the per-code (or per-value) states of [`ByCode`], if any,
    /// into `acc`'s groups.
    fn flush_by_code(&mut self, cols: &ShardColumns<'_>, acc: &mut AccState, scratch: &mut Scratch) -> Result<()> {
        let bc = &mut self.by_code;
        if bc.token == 0 {
            return Ok(());
        }
        if bc.token != acc.token {
            return Err(Error::Internal("a kernel holds rows of another aggregate by code".into()));
        }
        bc.token = 0;
        acc.deferred -= 1;
        // The (group, slot) pairs of the slots with rows, and the groups after.
        bc.pairs.clear();
        let groups = if let Some(lo) = bc.lo {
            let (Some(KeyInput::Memo { col, expr, memo, .. }), Some(map), Some(c)) =
                (self.keys.first_mut(), acc.groups.keys.first_mut(), self.count_star)
            else {
                return Err(Error::Internal("rows by value without a memoised key and a COUNT(*)".into()));
            };
            let StateColumn::Count(counts) = &bc.states[c] else {
                return Err(Error::Internal("COUNT(*) without a count state".into()));
            };
            let physical = cols.column(*col).physical();
            memo.bind(acc.token);
            for (slot, &n) in counts.iter().enumerate() {
                if n == 0 {
                    continue;
                }
                let Num::I64(v) = key_to_num(physical, lo + slot as u64) else {
                    return Err(Error::Internal("a memoised key over a non-integer column".into()));
                };
                bc.pairs.push((memo_id(expr, memo, map, v)?, slot as u32));
            }
            map.len()
        } else {
            let (Some(KeyInput::Bytes { col, cache }), Some(KeyMap::Bytes(map))) =
                (self.keys.first_mut(), acc.groups.keys.first_mut())
            else {
                return Err(Error::Internal("rows by code without a string key".into()));
            };
            let main = cols.column(*col).main();
            let Some(dict) = main.and_then(|m| m.string_dictionary()) else {
                return Err(Error::Internal("rows by code without a dictionary".into()));
            };
            cache.bind(dict, acc.token);
            let every = bc.rows == dict.len();
            if !every {
                bc.present.clear();
                bc.present.resize(dict.dict_len().div_ceil(64), 0);
                for &b in &bc.blocks {
                    let start = b as usize * LANES;
                    let n = LANES.min(dict.len() - start);
                    gather_keys(&dict.codes(), b as usize, Sel::Range(0, n), scratch);
                    for &code in &scratch.keys[..n] {
                        bc.present[(code / 64) as usize] |= 1 << (code % 64);
                    }
                }
            }
            for code in 0..dict.dict_len() {
                if !every && bc.present[code / 64] >> (code % 64) & 1 == 0 {
                    continue;
                }
                let mut g = cache.ids[code];
                if g == u32::MAX {
                    g = map.id(dict.value(code));
                    cache.ids[code] = g;
                }
                bc.pairs.push((g, code as u32));
            }
            map.spans.len()
        };
        acc.groups.len = groups;
        for (i, state) in acc.states.iter_mut().enumerate() {
            state.ensure(groups);
            state.merge_entries(&bc.states[i], &bc.pairs, &self.spec.kinds[i])?;
        }
        Ok(())
    }

    /// Fills `self.gids` for the active lanes of `sel`.
    fn assign_groups(
        &mut self,
        cols: &ShardColumns<'_>,
        acc: &mut AccState,
        side: Side,
        sel: Sel<'_>,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let active = sel.active();
        let token = acc.token;
        let single = self.keys.len() == 1;
        for (k, key) in self.keys.iter_mut().enumerate() {
            // One key: its ids are the group ids.
            let ids = if single { &mut self.gids } else { &mut self.key_ids[k] };
            let map = &mut acc.groups.keys[k];
            match key {
                KeyInput::Memo { column, expr, memo, .. } if !memo.off => {
                    memo_key_ids(column, expr, memo, map, token, cols, side, sel, &active, ids, scratch)?;
                }
                KeyInput::Num(expr) | KeyInput::Memo { expr, .. } => match expr.eval(cols, side, sel, scratch)? {
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
                            (KeyMap::F64(m), Values::F64(x)) => {
                                valid.for_each_one(|l| ids[l] = m.id(float_group_bits(x[l])))
                            }
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

/// The key id of `f(v)` for a memoised integer key `expr` = f(column):
/// from the memo when it holds `v`, else evaluated (and memoised).
fn memo_id(expr: &CompiledExpr, memo: &mut KeyMemo, map: &mut KeyMap, v: i64) -> Result<KeyId> {
    let slot = memo.slot_for(v);
    if let Some(s) = slot
        && memo.slots[s] != u32::MAX
    {
        return Ok(memo.slots[s]);
    }
    let id = match expr.eval_one(Some(Num::I64(v)))? {
        None => map.null(),
        Some(n) => map.id_of(&num_key(n))?,
    };
    if let Some(s) = slot {
        memo.fill(s, v, id);
    }
    Ok(id)
}

/// Key ids of a memoised integer key `expr` = f(`column`) (see [`KeyMemo`]).
#[allow(clippy::too_many_arguments)]
fn memo_key_ids(
    column: &mut CompiledExpr,
    expr: &CompiledExpr,
    memo: &mut KeyMemo,
    map: &mut KeyMap,
    token: u64,
    cols: &ShardColumns<'_>,
    side: Side,
    sel: Sel<'_>,
    active: &Bits,
    ids: &mut [u32; LANES],
    scratch: &mut Scratch,
) -> Result<()> {
    let id_of = |map: &mut KeyMap, v: Option<Num>| -> Result<KeyId> {
        match expr.eval_one(v)? {
            None => Ok(map.null()),
            Some(n) => map.id_of(&num_key(n)),
        }
    };
    memo.bind(token);
    let v = match column.eval(cols, side, sel, scratch)? {
        Operand::Scalar(v) => {
            let id = id_of(map, v)?;
            active.for_each_one(|l| ids[l] = id);
            return Ok(());
        }
        Operand::Vector(v) => v,
    };
    let Values::I64(x) = &v.values else {
        return Err(Error::Internal("memoised group key over a non-integer column".into()));
    };
    let valid = v.valid(active);
    let nulls = active.and_not(&valid);
    if !nulls.is_empty() {
        let id = id_of(map, None)?;
        nulls.for_each_one(|l| ids[l] = id);
    }
    let Some(first) = valid.first_one() else { return Ok(()) };
    let base = *memo.base.get_or_insert_with(|| {
        let mut min = x[first];
        valid.for_each_one(|l| min = min.min(x[l]));
        min
    });
    let slots = memo.slots.as_slice();
    let lookup = |v: i64| {
        let slot = v.wrapping_sub(base) as u64 as usize;
        if slot < slots.len() { slots[slot] } else { u32::MAX }
    };
    if groups::lookup_lanes(x, &valid, ids, lookup) {
        let mut outside = 0;
        let mut err = None;
        valid.for_each_one(|l| {
            if ids[l] != u32::MAX || err.is_some() {
                return;
            }
            let slot = memo.slot_for(x[l]);
            if let Some(s) = slot
                && memo.slots[s] != u32::MAX
            {
                ids[l] = memo.slots[s];
                return;
            }
            match id_of(map, Some(Num::I64(x[l]))) {
                Ok(id) => {
                    ids[l] = id;
                    match slot {
                        Some(s) => memo.fill(s, x[l], id),
                        None => outside += 1,
                    }
                }
                Err(e) => err = Some(e),
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        if outside > KeyMemo::MAX_OUTSIDE {
            memo.off = true;
        }
    }
    Ok(())
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
            match col.string_dictionary() {
                Some(dict) => {
                    cache.bind(dict, token);
                    gather_keys(&dict.codes(), block, sel, scratch);
                    let codes = &scratch.keys;
                    // A plain lookup per lane first (no branch, so it
                    // vectorises); codes seen for the first time are
                    // given ids in a second pass over the few misses.
                    let known = cache.ids.as_slice();
                    if groups::lookup_lanes(codes, &valid, ids, |code| known[code as usize]) {
                        valid.for_each_one(|l| {
                            if ids[l] == u32::MAX {
                                let code = codes[l] as usize;
                                let mut id = cache.ids[code];
                                if id == u32::MAX {
                                    id = map.id(dict.value(code));
                                    cache.ids[code] = id;
                                }
                                ids[l] = id;
                            }
                        });
                    }
                }
                None => {
                    let start = block * LANES;
                    sel_offsets(sel, &valid, |l, o| ids[l] = map.id(src.main_bytes(start + o)));
                }
            }
        }
        Side::Delta(chunk) => sel_offsets(sel, &valid, |l, o| ids[l] = map.id(src.delta_bytes(chunk, o))),
    }
}

/// The validity of a column's rows `sel`, or `None` when all are valid.
pub(super) fn column_validity(src: &ColumnSource<'_>, side: Side, sel: Sel<'_>) -> Option<Bits> {
    match side {
        Side::Main(b) => src.main_validity(b, sel),
        Side::Delta(c) => src.delta_validity(c, sel),
    }
}

impl Kernel for AggregateKernel {
    type Acc = AggregateAcc;

    fn open(&mut self, cols: &ShardColumns<'_>) -> Result<()> {
        // Rows of an unfinished shard are dropped; their accumulator
        // reports it (see [`ByCode`]).
        self.by_code.token = 0;
        // A memoised key's column may fold by value in this shard: keys
        // without nulls spanning less than the dense window, integers,
        // and a COUNT(*) to tell which values have rows.
        self.value_range = None;
        if let (Some(_), [KeyInput::Memo { col, memo, .. }]) = (self.count_star, self.keys.as_slice())
            && !memo.off
            && let Some(main) = cols.column(*col).main()
            && main.keys().is_some()
            && main.null_count() == 0
            && let Some((lo, hi)) = main.key_range()
            && hi - lo < groups::DENSE_WINDOW as u64
            && matches!(key_to_num(cols.column(*col).physical(), lo), Num::I64(_))
        {
            self.value_range = Some((lo, hi));
        }
        // Another shard's dictionary may sit at the address of the last
        // one: compare contents from here on.
        for key in &mut self.keys {
            if let KeyInput::Bytes { cache, .. } = key {
                cache.dict = 0;
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

    fn process_main_block(
        &mut self,
        cols: &ShardColumns<'_>,
        acc: AggregateAcc,
        block: usize,
        sel: Sel<'_>,
        scratch: &mut Scratch,
    ) -> AggregateAcc {
        self.process(cols, acc, Side::Main(block), sel, scratch)
    }

    fn process_delta_block(
        &mut self,
        cols: &ShardColumns<'_>,
        acc: AggregateAcc,
        chunk: usize,
        sel: Sel<'_>,
        scratch: &mut Scratch,
    ) -> AggregateAcc {
        self.process(cols, acc, Side::Delta(chunk), sel, scratch)
    }

    fn close(&mut self, cols: &ShardColumns<'_>, mut acc: AggregateAcc, scratch: &mut Scratch) -> AggregateAcc {
        if let Err(e) = self.flush_by_code(cols, &mut acc.0, scratch) {
            acc.0.error.get_or_insert(e);
        }
        acc
    }

    fn merge(a: AggregateAcc, b: AggregateAcc) -> AggregateAcc {
        a.merge(b)
    }
}
