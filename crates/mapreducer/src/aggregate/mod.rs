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

mod acc;
mod by_code;
mod grouped;
mod groups;
mod input;
mod kernel;
mod keys;
mod spec;
mod state;
mod ungrouped;

pub use acc::{AggregateAcc, AggregateOutput};
pub use kernel::AggregateKernel;
pub use spec::{AggFunc, Aggregate, AggregateSpec, MemoryBudget};
