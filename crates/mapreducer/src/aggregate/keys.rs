//! Group keys: how a kernel turns a block's key values into key ids —
//! numbers through their maps, an integer function of one column through a
//! memo of its values, dictionary strings through a per-shard cache.

use quiverdb_storage::block::{Bits, LANES, sel_offsets};
use quiverdb_storage::main::StrDictionary;

use super::groups::{self, BytesMap, KeyId, KeyMap, KeyValue};
use super::input::Step;
use crate::columns::{ColumnSource, Scratch, gather_keys};
use crate::error::{Error, Result};
use crate::expr::{CompiledExpr, Operand, Side};
use crate::scalar::Num;
use crate::vector::Values;

/// How the kernel reads one group key.
#[derive(Debug)]
pub(super) enum KeyInput {
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
pub(super) struct KeyMemo {
    pub(super) token: u64,
    pub(super) base: Option<i64>,
    /// The greatest value with a filled slot (`i64::MIN`: none). The
    /// least is `base`: the window starts at it.
    pub(super) hi: i64,
    pub(super) slots: Vec<u32>,
    pub(super) off: bool,
}

impl KeyMemo {
    /// Lanes of a block outside the window beyond which memoising stops.
    pub(super) const MAX_OUTSIDE: usize = LANES / 8;

    pub(super) fn bind(&mut self, token: u64) {
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
    pub(super) fn slot_for(&mut self, v: i64) -> Option<usize> {
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
    pub(super) fn fill(&mut self, slot: usize, v: i64, id: u32) {
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
pub(super) struct DictCache {
    pub(super) token: u64,
    pub(super) dict: usize,
    pub(super) offsets: Vec<u32>,
    pub(super) bytes: Vec<u8>,
    pub(super) ids: Vec<u32>,
}

impl DictCache {
    /// Makes the cache valid for `dict` under accumulator `token`.
    pub(super) fn bind(&mut self, dict: StrDictionary<'_>, token: u64) {
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

/// A memoised group key `expr` = f(`column`) and its memo (see [`KeyMemo`]).
pub(super) struct MemoKey<'k> {
    pub(super) column: &'k mut CompiledExpr,
    pub(super) expr: &'k CompiledExpr,
    pub(super) memo: &'k mut KeyMemo,
}

/// Where a block's key ids go: one per active lane of `ids`, from `map`,
/// for the accumulator `token`.
pub(super) struct KeyIds<'o, M> {
    pub(super) map: &'o mut M,
    pub(super) ids: &'o mut [u32; LANES],
    pub(super) token: u64,
}

pub(super) fn num_key(n: Num) -> KeyValue<'static> {
    match n {
        Num::I64(x) => KeyValue::I64(x),
        Num::U64(x) => KeyValue::U64(x),
        Num::F64(x) => KeyValue::F64(x),
        Num::I128(x) => KeyValue::I128(x),
    }
}

/// The key id of `f(v)` for a memoised integer key `expr` = f(column):
/// from the memo when it holds `v`, else evaluated (and memoised).
pub(super) fn memo_id(expr: &CompiledExpr, memo: &mut KeyMemo, map: &mut KeyMap, v: i64) -> Result<KeyId> {
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
pub(super) fn memo_key_ids(
    key: MemoKey<'_>,
    out: KeyIds<'_, KeyMap>,
    step: Step<'_, '_>,
    active: &Bits,
    scratch: &mut Scratch,
) -> Result<()> {
    let MemoKey { column, expr, memo } = key;
    let KeyIds { map, ids, token } = out;
    let Step { cols, side, sel } = step;
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
pub(super) fn bytes_key_ids(
    src: &ColumnSource<'_>,
    step: Step<'_, '_>,
    active: &Bits,
    cache: &mut DictCache,
    out: KeyIds<'_, BytesMap>,
    scratch: &mut Scratch,
) {
    let Step { side, sel, .. } = step;
    let KeyIds { map, ids, token } = out;
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
                    src.with_main_block_bytes(block, scratch, |bytes| {
                        sel_offsets(sel, &valid, |l, o| ids[l] = map.id(bytes.get(o)))
                    });
                }
            }
        }
        Side::Delta(chunk) => sel_offsets(sel, &valid, |l, o| ids[l] = map.id(src.delta_bytes(chunk, o))),
    }
}
