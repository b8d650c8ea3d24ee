//! The [`Kernel`] of an aggregation: per block, group ids (or none), then
//! each aggregate folded into its state.

use std::sync::Arc;

use quiverdb_storage::block::{LANES, Sel};
use quiverdb_storage::main::KeySource;

use super::acc::{AccState, AggregateAcc};
use super::by_code::ByCode;
use super::groups::{self, KeyMap, MAX_KEYS, float_group_bits};
use super::input::{Input, Step};
use super::keys::{DictCache, KeyIds, KeyInput, KeyMemo, MemoKey, bytes_key_ids, memo_id, memo_key_ids, num_key};
use super::spec::{AggFunc, AggregateSpec};
use super::state::StateColumn;
use super::{grouped, ungrouped};
use crate::columns::{Scratch, ShardColumns, gather_keys, key_to_num};
use crate::error::{Error, Result};
use crate::expr::{CompiledExpr, MapExpr, Operand, Side};
use crate::scalar::{Domain, Num};
use crate::shard::Kernel;
use crate::vector::Values;

/// The slots a whole main block folds into by code or by value (see
/// [`ByCode`]): a row's slot is its key in `keys` (a column of `rows` rows)
/// minus `lo` (none for dictionary codes); `count` slots in all.
struct Slots<'k, K> {
    keys: &'k K,
    rows: usize,
    count: usize,
    lo: Option<u64>,
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
        let step = Step { cols, side, sel };
        if self.keys.is_empty() {
            for (i, input) in self.inputs.iter_mut().enumerate() {
                ungrouped::fold(&mut acc.states[i], &self.spec.kinds[i], input, step, scratch)?;
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
                    let slots = Slots { keys: &dict.codes(), rows: main.len(), count: dict.dict_len(), lo: None };
                    return self.fold_slots(slots, block, step, acc, scratch);
                }
                (_, Some(keys), true, Some((lo, hi))) => {
                    let slots = Slots { keys: &keys, rows: main.len(), count: (hi - lo) as usize + 1, lo: Some(lo) };
                    return self.fold_slots(slots, block, step, acc, scratch);
                }
                _ => {}
            }
        }
        self.flush_by_code(cols, acc, scratch)?;
        self.assign_groups(cols, acc, side, sel, scratch)?;
        for (i, input) in self.inputs.iter_mut().enumerate() {
            acc.states[i].ensure(acc.groups.len);
            grouped::fold(&mut acc.states[i], &self.spec.kinds[i], input, step, scratch, &self.gids)?;
        }
        Ok(())
    }

    /// Folds main block `block` (all of its rows, `step`) into [`ByCode`]'s
    /// states, one per slot of `slots`, per aggregate.
    fn fold_slots<K: KeySource>(
        &mut self,
        slots: Slots<'_, K>,
        block: usize,
        step: Step<'_, '_>,
        acc: &mut AccState,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let bc = &mut self.by_code;
        bc.begin(acc, &self.spec.kinds, slots.count, slots.rows, slots.lo)?;
        // The whole block's slots (the caller folds whole blocks),
        // unpacked straight from the keys.
        slots.keys.decode_block_u32(block, slots.lo.unwrap_or(0), &mut self.gids, &mut scratch.keys);
        for (i, input) in self.inputs.iter_mut().enumerate() {
            grouped::fold(&mut bc.states[i], &self.spec.kinds[i], input, step, scratch, &self.gids)?;
        }
        bc.blocks.push(block as u32);
        bc.rows += step.sel.lanes();
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
                    let key = MemoKey { column, expr, memo };
                    memo_key_ids(key, KeyIds { map, ids, token }, Step { cols, side, sel }, &active, scratch)?;
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
                    bytes_key_ids(
                        src,
                        Step { cols, side, sel },
                        &active,
                        cache,
                        KeyIds { map: m, ids, token },
                        scratch,
                    );
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
        acc.0.charge(cols.rows());
        acc
    }

    fn merge(a: AggregateAcc, b: AggregateAcc) -> AggregateAcc {
        a.merge(b)
    }
}

#[cfg(test)]
mod tests;
