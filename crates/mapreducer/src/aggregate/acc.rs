//! The accumulator of an aggregation: its groups and one state column per
//! aggregate, merged across shards and finished into Arrow arrays.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::ArrayRef;
use arrow_schema::DataType;

use super::groups::{BytesMap, Groups, HashMapKeys, IntMap, KeyMap, KeyValue, MAX_KEYS};
use super::spec::AggregateSpec;
use super::state::StateColumn;
use crate::error::{Error, Result};
use crate::output::{bytes_array, f64_array, i64_array, native_array, nulls_from};
use crate::scalar::Domain;

/// Source of unique accumulator tokens (see [`AggregateAcc`]).
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

impl AggregateSpec {
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
            reported: 0,
        }))
    }
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
pub struct AggregateAcc(pub(super) Box<AccState>);

/// What an [`AggregateAcc`] holds.
#[derive(Debug)]
pub(super) struct AccState {
    pub(super) spec: Arc<AggregateSpec>,
    pub(super) token: u64,
    pub(super) groups: Groups,
    pub(super) states: Vec<StateColumn>,
    /// Shards whose rows a kernel holds by dictionary code, to be folded
    /// in when the shard is finished ([`ByCode`]).
    pub(super) deferred: u32,
    pub(super) error: Option<Error>,
    /// Bytes last reported to the spec's [`MemoryBudget`].
    ///
    /// [`MemoryBudget`]: super::spec::MemoryBudget
    pub(super) reported: usize,
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
    /// Heap bytes the groups and states hold (hash tables by capacity).
    pub(super) fn size_bytes(&self) -> usize {
        self.groups.size_bytes() + self.states.iter().map(StateColumn::size_bytes).sum::<usize>()
    }

    /// Reports the accumulator's size to the spec's budget (after each
    /// shard, of `rows` rows); a refusal becomes the accumulator's error,
    /// after which it takes no more rows. The size includes what its
    /// group maps would allocate on top while as many new groups go in
    /// (a hash table's next table is allocated before the old one is
    /// freed): the budget refuses that growth before it happens rather
    /// than after the memory was taken.
    pub(super) fn charge(&mut self, rows: usize) {
        if self.spec.budget.is_none() || self.error.is_some() {
            return;
        }
        let size = self.size_bytes() + self.groups.growth_bytes(rows);
        self.reserve(size);
    }

    /// Reports `size` bytes to the budget in place of what was reported.
    fn reserve(&mut self, size: usize) {
        let Some(budget) = &self.spec.budget else { return };
        if self.error.is_some() {
            return;
        }
        match budget.resize(self.reported, size) {
            Ok(()) => self.reported = size,
            Err(reason) => self.error = Some(Error::ResourcesExhausted(reason)),
        }
    }

    fn merge(&mut self, other: AccState) {
        // What the other held is now this one's to report.
        self.reported += other.reported;
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
        // Both are held while the merged maps grow by up to the other's groups.
        if self.spec.budget.is_some() {
            self.reserve(self.size_bytes() + other.size_bytes() + self.groups.growth_bytes(other.groups.len));
            if self.error.is_some() {
                return;
            }
        }
        if let Err(e) = self.merge_groups(&other) {
            self.error = Some(e);
        }
        self.charge(0);
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
