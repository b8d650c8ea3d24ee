//! What to aggregate: the functions, their inputs, and a validated
//! aggregation (group keys and aggregates over one table) with the state
//! kind and output type of each aggregate.

use std::sync::Arc;

use arrow_schema::DataType;
use quiverdb_storage::TableSchema;

use super::groups::MAX_KEYS;
use super::state::{MinMaxDomain, StateKind, SumDomain};
use crate::error::{Error, Result};
use crate::expr::MapExpr;
use crate::scalar::Domain;

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

/// Bounds the memory an aggregation's accumulators hold. Each accumulator
/// reports its size after every shard as a change from what it reported
/// before; a refused change stops it with
/// [`Error::ResourcesExhausted`](crate::Error::ResourcesExhausted).
pub trait MemoryBudget: std::fmt::Debug + Send + Sync {
    /// An accumulator that held `from` bytes now holds `to`; `Err` (with
    /// the reason) refuses the growth.
    fn resize(&self, from: usize, to: usize) -> std::result::Result<(), String>;
}

/// A validated aggregation: group keys and aggregates over one table.
#[derive(Debug, Clone)]
pub struct AggregateSpec {
    pub(super) schema: TableSchema,
    pub(super) group_by: Vec<MapExpr>,
    pub(super) aggregates: Vec<Aggregate>,
    pub(super) key_types: Vec<DataType>,
    pub(super) kinds: Vec<StateKind>,
    pub(super) output_types: Vec<DataType>,
    pub(super) budget: Option<Arc<dyn MemoryBudget>>,
}

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
        Ok(Self { schema: schema.clone(), group_by, aggregates, key_types, kinds, output_types, budget: None })
    }

    /// The same aggregation with its accumulators' memory bounded by
    /// `budget`.
    pub fn with_budget(&self, budget: Arc<dyn MemoryBudget>) -> Self {
        Self { budget: Some(budget), ..self.clone() }
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
}

/// The state kind and output type of `func` over `input`.
pub(super) fn state_kind(func: AggFunc, input: Option<&DataType>) -> Result<(StateKind, DataType)> {
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
