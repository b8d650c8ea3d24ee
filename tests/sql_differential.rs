//! Randomized differential test: the same random tables, DML and queries
//! run on a quiverdb-backed DataFusion session and on plain DataFusion
//! with `MemTable`s, and the results must agree.
//!
//! Each seed is one deterministic iteration (`StdRng`): random settings
//! (shard capacity, batch size, partitions, id buffer), two or three
//! tables with random column types (signed and unsigned integers, DOUBLE,
//! BOOLEAN, VARCHAR, DATE, TIMESTAMP, DECIMAL; nullable and NOT NULL),
//! rows from `INSERT ... VALUES` and `INSERT ... SELECT FROM
//! generate_series`, then a random mix of queries (projections, filters,
//! aggregates with and without GROUP BY and HAVING, DISTINCT, ORDER BY ...
//! LIMIT/OFFSET, joins, subqueries) and DML (INSERT, DELETE, UPDATE,
//! TRUNCATE) with quiverdb rebuilding its tables at random points. After
//! every DML statement the affected-row counts and the whole tables are
//! compared.
//!
//! Results are compared as sorted lists of formatted rows (floats with a
//! relative tolerance), or in order where the ORDER BY makes the order
//! unambiguous; an ORDER BY ... LIMIT over only some of the columns is
//! checked against the reference's full sorted result (same keys in the
//! same order, each returned row one of the rows with its key). Both sides
//! failing is a match; one side failing is a mismatch.
//!
//! Environment: `QUIVERDB_DIFF_SEED=n` runs only seed `n`;
//! `QUIVERDB_DIFF_SEEDS=n` runs seeds `0..n`; `QUIVERDB_DIFF_STEPS=n`
//! changes the number of random statements per seed;
//! `QUIVERDB_DIFF_TRACE=1` prints every statement (a failing seed's script);
//! `QUIVERDB_DIFF_STATS=1` prints each seed's time and the statements both
//! sides rejected;
//! `QUIVERDB_DIFF_SKIP=in_null,avg,date_trunc,bool_in,float_special`
//! leaves those constructs out (to look past a bug while reducing
//! another); `QUIVERDB_DIFF_SCRIPT=file` replays a script file on both
//! sides instead of the seeds (see `replay_script`).

use std::fmt::Write as _;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::tree_node::TreeNode;
use datafusion::error::DataFusionError;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::{Optimizer, OptimizerRule};
use datafusion::prelude::{SessionConfig, SessionContext};
use quiverdb::server::ScanSettings;
use quiverdb::{Database, SessionOptions, TableOptions};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

/// Seeds run by default (CI runs the debug build: keep it under a minute).
const DEFAULT_SEEDS: u64 = 28;
/// A shard capacity that spans several blocks (1024 rows) of main
/// storage; with it, one table starts with `BIG_ROWS` rows.
const BIG_SHARD: usize = 2500;
const BIG_ROWS: i64 = 3000;
/// Random statements per seed after the initial inserts.
const DEFAULT_STEPS: usize = 45;
/// Of a seed's random statements, at least this share must produce a real
/// comparison: both sides succeed and their results are compared (a
/// statement both sides reject compares nothing). Measured: 42 to 51
/// comparisons for 45 steps over the default seeds, almost never a
/// statement failing on both sides.
const MIN_COMPARED_SHARE: f64 = 0.75;

// ------------------------------------------------------------------ schema

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F64,
    Bool,
    Str,
    Date,
    Ts,
    Dec(u8, u8),
}

/// Families of types that compare, join and combine with each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Int,
    UInt,
    Float,
    Bool,
    Str,
    Date,
    Ts,
    Dec,
}

impl Ty {
    fn sql(self) -> String {
        match self {
            Ty::I8 => "TINYINT".into(),
            Ty::I16 => "SMALLINT".into(),
            Ty::I32 => "INT".into(),
            Ty::I64 => "BIGINT".into(),
            Ty::U8 => "TINYINT UNSIGNED".into(),
            Ty::U16 => "SMALLINT UNSIGNED".into(),
            Ty::U32 => "INT UNSIGNED".into(),
            Ty::U64 => "BIGINT UNSIGNED".into(),
            Ty::F64 => "DOUBLE".into(),
            Ty::Bool => "BOOLEAN".into(),
            Ty::Str => "VARCHAR".into(),
            Ty::Date => "DATE".into(),
            Ty::Ts => "TIMESTAMP".into(),
            Ty::Dec(p, s) => format!("DECIMAL({p},{s})"),
        }
    }

    fn class(self) -> Class {
        match self {
            Ty::I8 | Ty::I16 | Ty::I32 | Ty::I64 => Class::Int,
            Ty::U8 | Ty::U16 | Ty::U32 | Ty::U64 => Class::UInt,
            Ty::F64 => Class::Float,
            Ty::Bool => Class::Bool,
            Ty::Str => Class::Str,
            Ty::Date => Class::Date,
            Ty::Ts => Class::Ts,
            Ty::Dec(..) => Class::Dec,
        }
    }

    fn integer(self) -> bool {
        matches!(self.class(), Class::Int | Class::UInt)
    }
}

const TYPES: &[Ty] = &[
    Ty::I8,
    Ty::I16,
    Ty::I32,
    Ty::I64,
    Ty::I64,
    Ty::U8,
    Ty::U16,
    Ty::U32,
    Ty::U64,
    Ty::F64,
    Ty::Bool,
    Ty::Str,
    Ty::Str,
    Ty::Date,
    Ty::Ts,
    Ty::Dec(5, 2),
    Ty::Dec(9, 0),
    Ty::Dec(12, 3),
    Ty::Dec(18, 2),
    Ty::Dec(38, 6),
    Ty::Dec(4, 1),
];

/// The strings values are drawn from: prefixes of each other (for LIKE),
/// the empty string, a LIKE wildcard character, a multi-byte character.
const STRINGS: &[&str] = &["", "a", "ab", "abc", "b", "ba", "p", "pq", "pqr", "Zed", "é", "a_c", "a%c", "x y", "pqabc"];

#[derive(Debug, Clone)]
struct Column {
    name: String,
    ty: Ty,
    nullable: bool,
    /// A `DEFAULT` literal.
    default: Option<String>,
}

#[derive(Debug, Clone)]
struct Table {
    name: String,
    cols: Vec<Column>,
}

impl Table {
    fn create_sql(&self) -> String {
        let cols: Vec<String> = self
            .cols
            .iter()
            .map(|c| {
                let default = c.default.as_ref().map(|d| format!(" DEFAULT {d}")).unwrap_or_default();
                format!("{} {}{}{default}", c.name, c.ty.sql(), if c.nullable { "" } else { " NOT NULL" })
            })
            .collect();
        format!("CREATE TABLE {} ({})", self.name, cols.join(", "))
    }
}

// --------------------------------------------------------------- generator

struct Gen {
    rng: StdRng,
    tables: Vec<Table>,
    /// Constructs not to generate (`QUIVERDB_DIFF_SKIP`), for looking
    /// past a known bug while it is open.
    skip: Vec<String>,
}

/// An expression with the type family of its value.
struct Val {
    sql: String,
    class: Class,
}

impl Gen {
    fn skips(&self, what: &str) -> bool {
        self.skip.iter().any(|s| s == what)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        items.choose(&mut self.rng).expect("non-empty choice")
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    fn range(&mut self, lo: i64, hi_inclusive: i64) -> i64 {
        self.rng.random_range(lo..=hi_inclusive)
    }

    fn table(&mut self, index: usize) -> Table {
        let n = self.rng.random_range(2..=6);
        let mut cols = Vec::with_capacity(n);
        for i in 0..n {
            // The first column is an integer in every table (a join key).
            let ty =
                if i == 0 { *self.pick(&[Ty::I32, Ty::I64, Ty::I64, Ty::I16, Ty::U32]) } else { *self.pick(TYPES) };
            let nullable = !self.chance(0.3);
            let default = if self.chance(0.25) { Some(self.lit_plain(ty)) } else { None };
            cols.push(Column { name: format!("c{i}"), ty, nullable, default });
        }
        Table { name: format!("t{index}"), cols }
    }

    // ---------------------------------------------------------- literals

    fn int_lit(&mut self, class: Class) -> String {
        match class {
            Class::UInt => self.range(0, 50).to_string(),
            _ => self.range(-50, 50).to_string(),
        }
    }

    /// A literal of type `ty` (never NULL).
    fn lit(&mut self, ty: Ty) -> String {
        match ty {
            Ty::I8 | Ty::I16 | Ty::I32 | Ty::I64 => self.int_lit(Class::Int),
            Ty::U8 | Ty::U16 | Ty::U32 | Ty::U64 => self.int_lit(Class::UInt),
            Ty::F64 if self.chance(0.1) => (*self.pick(&["0.0", "-0.0", "0"])).into(),
            Ty::F64 => format!("{:?}", self.range(-80, 80) as f64 / 4.0),
            Ty::Bool => (if self.chance(0.5) { "true" } else { "false" }).into(),
            Ty::Str => format!("'{}'", self.pick(STRINGS)),
            Ty::Date => {
                let day = self.range(1, 20);
                if self.chance(0.5) { format!("DATE '2024-01-{day:02}'") } else { format!("'2024-01-{day:02}'") }
            }
            Ty::Ts => {
                let s = self.range(0, 30);
                let frac = if self.chance(0.2) { ".5" } else { "" };
                if self.chance(0.5) {
                    format!("TIMESTAMP '2024-01-01 00:00:{s:02}{frac}'")
                } else {
                    format!("'2024-01-01T00:00:{s:02}{frac}'")
                }
            }
            Ty::Dec(p, s) => {
                let text = self.dec_text(s);
                if self.chance(0.4) { format!("CAST('{text}' AS DECIMAL({p},{s}))") } else { text }
            }
        }
    }

    /// A decimal in -50..50 representable with `scale` digits.
    fn dec_text(&mut self, scale: u8) -> String {
        match scale {
            0 => self.range(-50, 50).to_string(),
            1 => format!("{:.1}", self.range(-100, 100) as f64 / 2.0),
            s => format!("{:.*}", s as usize, self.range(-200, 200) as f64 / 4.0),
        }
    }

    /// A value for INSERT: ~20% NULL in nullable columns.
    fn value(&mut self, c: &Column) -> String {
        if c.nullable && self.chance(0.2) {
            return "NULL".into();
        }
        match c.ty {
            Ty::Dec(_, s) => self.dec_text(s),
            // No NaN: DataFusion's grouped MIN/MAX skip NaN (`SELECT k, MAX(x)
            // ... GROUP BY k` over {NaN, -0.0} gives -0.0) while its
            // ungrouped MAX, PostgreSQL and quiverdb say NaN.
            Ty::F64 if !self.skips("float_special") && self.chance(0.08) => {
                (*self.pick(&["CAST('inf' AS DOUBLE)", "CAST('-inf' AS DOUBLE)", "-0.0", "-0.0"])).into()
            }
            ty => self.lit(ty),
        }
    }

    // ------------------------------------------------------------ inserts

    fn insert_values(&mut self, t: &Table) -> String {
        let rows = self.rng.random_range(1..=25);
        let mut sql = format!("INSERT INTO {} VALUES ", t.name);
        for r in 0..rows {
            if r > 0 {
                sql.push_str(", ");
            }
            let vals: Vec<String> = t.cols.iter().map(|c| self.value(c)).collect();
            write!(sql, "({})", vals.join(", ")).expect("write to string");
        }
        sql
    }

    /// `INSERT INTO t (some columns, any order) VALUES ...`: the others get
    /// their DEFAULT or NULL (an omitted NOT NULL column without a default
    /// fails on both sides).
    fn insert_columns(&mut self, t: &Table) -> String {
        let mut cols: Vec<Column> =
            t.cols.iter().filter(|c| c.nullable || c.default.is_some() || self.chance(0.95)).cloned().collect();
        let optional: Vec<usize> = (0..cols.len()).filter(|&i| cols[i].nullable || cols[i].default.is_some()).collect();
        if !optional.is_empty() && self.chance(0.7) {
            let i = *self.pick(&optional);
            cols.remove(i);
        }
        let shift = self.rng.random_range(0..cols.len().max(1));
        cols.rotate_left(shift);
        if cols.is_empty() {
            cols.push(t.cols[0].clone());
        }
        let rows = self.rng.random_range(1..=8);
        let values: Vec<String> = (0..rows)
            .map(|_| format!("({})", cols.iter().map(|c| self.value(c)).collect::<Vec<_>>().join(", ")))
            .collect();
        let names: Vec<&str> = cols.iter().map(|c| c.name.as_str()).collect();
        format!("INSERT INTO {} ({}) VALUES {}", t.name, names.join(", "), values.join(", "))
    }

    /// An expression of `value` (generate_series' column) for column `c`.
    /// Shapes: scattered values, sorted runs, one constant; NULLs
    /// scattered or in one long run (whole blocks and shards of NULLs).
    fn series_expr(&mut self, c: &Column, rows: i64) -> String {
        let m = self.range(2, 13);
        let k = self.range(0, 50);
        let v = match self.rng.random_range(0..6) {
            0..=3 => format!("(value * {m} + {k})"),
            4 => format!("(value / {m} + {k})"),
            _ => format!("(value * 0 + {k})"),
        };
        let body = match c.ty {
            Ty::I8 | Ty::I16 | Ty::I32 | Ty::I64 => format!("{v} % 101 - 50"),
            Ty::U8 | Ty::U16 | Ty::U32 | Ty::U64 => format!("{v} % 51"),
            Ty::F64 => format!("CAST({v} % 161 - 80 AS DOUBLE) / 4"),
            Ty::Bool => format!("{v} % 3 = 0"),
            Ty::Str => {
                let a = self.pick(STRINGS).to_string();
                let b = self.pick(STRINGS).to_string();
                let c2 = self.pick(STRINGS).to_string();
                format!("CASE (value + {k}) % 3 WHEN 0 THEN '{a}' WHEN 1 THEN '{b}' ELSE '{c2}' END")
            }
            Ty::Date => format!("CAST(CAST(19723 + {v} % 20 AS INT) AS DATE)"),
            Ty::Ts => format!("to_timestamp(1704067200 + {v} % 31)"),
            Ty::Dec(p, s) => format!("CAST(CAST({v} % 101 - 50 AS DECIMAL(8,0)) / 2 AS DECIMAL({p},{s}))"),
        };
        if !c.nullable || self.chance(0.3) {
            return body;
        }
        if self.chance(0.75) {
            let n = self.range(3, 7);
            format!("CASE WHEN (value + {k}) % {n} = 0 THEN NULL ELSE {body} END")
        } else {
            let from = self.range(0, rows);
            format!("CASE WHEN value > {from} THEN NULL ELSE {body} END")
        }
    }

    fn insert_series(&mut self, t: &Table) -> String {
        let n = self.range(5, 120);
        self.insert_series_of(t, n)
    }

    fn insert_series_of(&mut self, t: &Table, n: i64) -> String {
        let exprs: Vec<String> = t.cols.iter().map(|c| self.series_expr(c, n)).collect();
        format!("INSERT INTO {} SELECT {} FROM generate_series(1, {n})", t.name, exprs.join(", "))
    }

    /// `INSERT INTO t SELECT ... FROM other`, casting what has to be cast.
    fn insert_from(&mut self, t: &Table, src: &Table) -> String {
        let exprs: Vec<String> = t
            .cols
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let same = src
                    .cols
                    .iter()
                    .filter(|s| s.ty.class() == c.ty.class())
                    .map(|s| s.name.clone())
                    .collect::<Vec<_>>();
                if !same.is_empty() && self.chance(0.8) {
                    let s = self.pick(&same).clone();
                    if c.nullable {
                        format!("{s} AS x{i}")
                    } else {
                        format!("coalesce({s}, CAST({} AS {})) AS x{i}", self.lit_plain(c.ty), c.ty.sql())
                    }
                } else {
                    format!("{} AS x{i}", self.value(c))
                }
            })
            .collect();
        let mut sql = format!("INSERT INTO {} SELECT {} FROM {}", t.name, exprs.join(", "), src.name);
        if self.chance(0.6) {
            let p = self.pred(src, "", 1);
            write!(sql, " WHERE {p}").expect("write to string");
        }
        sql
    }

    /// A literal as a plain value (decimals without a cast).
    fn lit_plain(&mut self, ty: Ty) -> String {
        match ty {
            Ty::Dec(_, s) => self.dec_text(s),
            ty => self.lit(ty),
        }
    }

    // --------------------------------------------------------- predicates

    /// A random boolean condition over `t`'s columns, each prefixed with `q`.
    fn pred(&mut self, t: &Table, q: &str, depth: u32) -> String {
        if depth > 0 && self.chance(0.35) {
            match self.rng.random_range(0..5) {
                0 | 1 => format!("({} AND {})", self.pred(t, q, depth - 1), self.pred(t, q, depth - 1)),
                2 | 3 => format!("({} OR {})", self.pred(t, q, depth - 1), self.pred(t, q, depth - 1)),
                _ => format!("NOT ({})", self.pred(t, q, depth - 1)),
            }
        } else {
            self.leaf(t, q)
        }
    }

    /// A literal of another type than `ty` that still compares with it:
    /// out of the column type's range, a fraction for an integer, a
    /// timestamp for a date...
    fn odd_lit(&mut self, ty: Ty) -> String {
        match ty.class() {
            Class::Int | Class::UInt => (*self.pick(&[
                "-1",
                "300",
                "-300",
                "70000",
                "-70000",
                "5000000000",
                "-5000000000",
                "2.5",
                "-0.5",
                "18446744073709551615",
                "CAST(3 AS TINYINT)",
                "CAST(7 AS TINYINT UNSIGNED)",
                "CAST(-2 AS SMALLINT)",
                "CAST(4.5 AS DECIMAL(5,2))",
            ]))
            .into(),
            Class::Float => (*self.pick(&["3", "-2", "CAST(1.25 AS DECIMAL(5,2))", "1e300", "-1e-300"])).into(),
            Class::Dec => {
                (*self.pick(&["3", "-2", "1.125", "0.001", "99999.5", "CAST(2.5 AS DECIMAL(20,4))", "-1.5e1"])).into()
            }
            Class::Date => (*self.pick(&[
                "TIMESTAMP '2024-01-05 12:00:00'",
                "TIMESTAMP '2024-01-10 00:00:00'",
                "'2024-01-07T00:00:00'",
                "DATE '1970-01-01'",
            ]))
            .into(),
            Class::Ts => (*self.pick(&[
                "DATE '2024-01-01'",
                "DATE '2024-01-02'",
                "'2024-01-01'",
                "TIMESTAMP '2024-01-01 00:00:10.000001'",
            ]))
            .into(),
            Class::Str => (*self.pick(&["'aa'", "'é'", "'ab '", "'A'", "'~'"])).into(),
            Class::Bool => (*self.pick(&["CAST('true' AS BOOLEAN)", "CAST(0 AS BOOLEAN)"])).into(),
        }
    }

    fn cmp_op(&mut self) -> &'static str {
        const OPS: [&str; 6] = ["=", "<>", "<", "<=", ">", ">="];
        OPS[self.rng.random_range(0..OPS.len())]
    }

    fn leaf(&mut self, t: &Table, q: &str) -> String {
        let c = self.pick(&t.cols).clone();
        let col = format!("{q}{}", c.name);
        let r = self.rng.random_range(0..100);
        if r < 2 {
            return (*self.pick(&["true", "false", "1 = 0", "NULL", "1 = 1"])).into();
        }
        if r < 10 {
            return format!("{col} {}", if self.chance(0.5) { "IS NULL" } else { "IS NOT NULL" });
        }
        if r < 13 {
            let l = if self.chance(0.3) { "NULL".to_string() } else { self.lit(c.ty) };
            return match self.rng.random_range(0..3) {
                0 => format!("({col} IS DISTINCT FROM {l})"),
                1 => format!("({col} IS NOT DISTINCT FROM {l})"),
                _ => format!("{col} {} NULL", self.cmp_op()),
            };
        }
        if r < 16 && c.ty.integer() {
            let target = *self.pick(&["BIGINT", "INT", "DOUBLE", "SMALLINT", "DECIMAL(10,2)", "VARCHAR"]);
            let l = if target == "VARCHAR" { format!("'{}'", self.range(-50, 50)) } else { self.int_lit(Class::Int) };
            return format!("CAST({col} AS {target}) {} {l}", self.cmp_op());
        }
        if r < 35 {
            let op = self.cmp_op();
            let l = if self.chance(0.15) { self.odd_lit(c.ty) } else { self.lit(c.ty) };
            return if self.chance(0.8) { format!("{col} {op} {l}") } else { format!("{l} {op} {col}") };
        }
        if r < 43 {
            let (a, b) = (self.lit(c.ty), self.lit(c.ty));
            let not = if self.chance(0.25) { "NOT " } else { "" };
            return format!("{col} {not}BETWEEN {a} AND {b}");
        }
        if r < 52 && !(c.ty == Ty::Bool && self.skips("bool_in")) {
            let n = self.rng.random_range(1..=4);
            let mut items: Vec<String> = (0..n).map(|_| self.lit(c.ty)).collect();
            if self.chance(0.1) && !self.skips("in_null") {
                items.push("NULL".into());
            }
            let not = if self.chance(0.25) { "NOT " } else { "" };
            return format!("{col} {not}IN ({})", items.join(", "));
        }
        if r < 60 {
            // Two columns of one family.
            let same: Vec<Column> = t.cols.iter().filter(|o| o.ty.class() == c.ty.class()).cloned().collect();
            let o = self.pick(&same).clone();
            let op = self.cmp_op();
            return format!("{col} {op} {q}{}", o.name);
        }
        // Type-specific forms, pushable and not.
        match c.ty.class() {
            Class::Int | Class::UInt => {
                let other: Vec<Column> = t.cols.iter().filter(|o| o.ty.class() == c.ty.class()).cloned().collect();
                let o = self.pick(&other).clone();
                let k = self.range(1, 9);
                let l = self.int_lit(Class::Int);
                let op = self.cmp_op();
                match self.rng.random_range(0..8) {
                    0 => format!("{col} + {k} {op} {l}"),
                    1 => format!("{col} - {k} {op} {l}"),
                    2 => format!("{col} * {k} {op} {l}"),
                    3 => format!("{col} % {} = {}", k + 1, self.range(0, k)),
                    4 => format!("{col} + {q}{} {op} {l}", o.name),
                    5 => format!("abs({col}) {op} {}", self.range(0, 50)),
                    6 => format!("coalesce({col}, 0) {op} {l}"),
                    _ => format!("CAST({col} AS DOUBLE) / 2 {op} {l}"),
                }
            }
            Class::Float => {
                let l = self.lit(Ty::F64);
                let op = self.cmp_op();
                match self.rng.random_range(0..4) {
                    0 => format!("{col} * 2 {op} {l}"),
                    1 => format!("{col} + 1.5 {op} {l}"),
                    2 => format!("abs({col}) {op} {l}"),
                    _ => format!("ceil({col}) {op} {l}"),
                }
            }
            Class::Bool => match self.rng.random_range(0..5) {
                0 => col,
                1 => format!("NOT {col}"),
                2 => format!("{col} IS TRUE"),
                3 => format!("{col} IS NOT FALSE"),
                _ => format!("{col} = {}", self.lit(Ty::Bool)),
            },
            Class::Str => {
                let pattern = *self.pick(&[
                    "p%", "a%", "ab%", "%b", "a_", "%", "", "ab", "_", "%q%", "a\\_c", "é%", "A%", "%b%", "a%c",
                    "%a%b%", "%\\%%", "a\\%c", "p%q%r", "%é", "%%", "a%%c", "%c", "%ab%c", "a%a", "pq%%abc%",
                ]);
                let not = if self.chance(0.25) { "NOT " } else { "" };
                match self.rng.random_range(0..7) {
                    0..=2 => format!("{col} {not}LIKE '{pattern}'"),
                    3 => format!("{col} ILIKE '{pattern}'"),
                    4 => format!("length({col}) {} {}", self.cmp_op(), self.range(0, 3)),
                    5 => format!("upper({col}) = '{}'", self.pick(STRINGS).to_uppercase()),
                    _ => format!("starts_with({col}, '{}')", self.pick(&["p", "a", "", "ab"])),
                }
            }
            Class::Date => match self.rng.random_range(0..2) {
                0 => format!("date_part('day', {col}) {} {}", self.cmp_op(), self.range(1, 20)),
                _ => format!("{col} + INTERVAL '1 day' {} {}", self.cmp_op(), self.lit(Ty::Date)),
            },
            Class::Ts => match self.rng.random_range(0..2) {
                0 => format!("date_part('second', {col}) {} {}", self.cmp_op(), self.range(0, 30)),
                _ => format!("{col} - INTERVAL '2 seconds' {} {}", self.cmp_op(), self.lit(Ty::Ts)),
            },
            Class::Dec => {
                let op = self.cmp_op();
                let l = self.lit(c.ty);
                match self.rng.random_range(0..4) {
                    0 => format!("{col} * 2 {op} {l}"),
                    1 => format!("{col} + 1 {op} {l}"),
                    2 => format!("abs({col}) {op} {l}"),
                    _ => format!("{col} {op} {}", self.range(-50, 50)),
                }
            }
        }
    }

    // -------------------------------------------------------- expressions

    /// A scalar expression over `t` (for projections, keys, aggregates).
    fn val(&mut self, t: &Table, q: &str) -> Val {
        let c = self.pick(&t.cols).clone();
        let col = format!("{q}{}", c.name);
        let class = c.ty.class();
        if self.chance(0.6) {
            return Val { sql: col, class };
        }
        let sql = match class {
            Class::Int | Class::UInt => {
                let same: Vec<Column> = t.cols.iter().filter(|o| o.ty.class() == class).cloned().collect();
                let o = self.pick(&same).clone();
                let k = self.range(2, 9);
                match self.rng.random_range(0..7) {
                    0 => format!("{col} % {k}"),
                    1 => format!("{col} + {q}{}", o.name),
                    2 => format!("{col} * {k}"),
                    3 => format!("{col} - {k}"),
                    4 => format!("abs({col})"),
                    5 => format!("CAST({col} AS DOUBLE)"),
                    _ => format!("{col} / {k}"),
                }
            }
            Class::Float => match self.rng.random_range(0..3) {
                0 => format!("{col} * 2"),
                1 => format!("{col} + 0.5"),
                _ => format!("floor({col})"),
            },
            Class::Dec => match self.rng.random_range(0..3) {
                0 => format!("{col} * 2"),
                1 => format!("{col} + 1"),
                _ => format!("-{col}"),
            },
            Class::Str => match self.rng.random_range(0..3) {
                0 => format!("upper({col})"),
                1 => format!("{col} || 'x'"),
                _ => format!("length({col})"),
            },
            Class::Bool => format!("NOT {col}"),
            Class::Date => format!("date_part('day', {col})"),
            Class::Ts if self.skips("date_trunc") => format!("{col} + INTERVAL '1 second'"),
            Class::Ts => format!("date_trunc('second', {col})"),
        };
        let class = if sql.starts_with("length(") || sql.starts_with("date_part(") {
            Class::Int
        } else if sql.ends_with("AS DOUBLE)") {
            Class::Float
        } else {
            class
        };
        Val { sql, class }
    }

    fn projection(&mut self, t: &Table, q: &str) -> Vec<String> {
        let n = self.rng.random_range(1..=4);
        (0..n).map(|i| format!("{} AS o{i}", self.val(t, q).sql)).collect()
    }

    fn aggregate(&mut self, t: &Table, q: &str) -> String {
        let v = self.val(t, q);
        let numeric = matches!(v.class, Class::Int | Class::UInt | Class::Float | Class::Dec);
        let r = self.rng.random_range(0..100);
        if r < 12 {
            return "COUNT(*)".into();
        }
        if r < 25 {
            return format!("COUNT({})", v.sql);
        }
        if r < 30 {
            return format!("COUNT(DISTINCT {})", v.sql);
        }
        if r < 45 {
            return format!("MIN({})", v.sql);
        }
        if r < 60 {
            return format!("MAX({})", v.sql);
        }
        if !numeric {
            return format!("MAX({})", v.sql);
        }
        let agg = if r < 82 || self.skips("avg") { format!("SUM({})", v.sql) } else { format!("AVG({})", v.sql) };
        if self.chance(0.1) {
            let p = self.pred(t, q, 0);
            return format!("{agg} FILTER (WHERE {p})");
        }
        agg
    }

    // ---------------------------------------------------------- statements

    fn delete(&mut self, t: &Table) -> String {
        if self.chance(0.03) {
            return format!("DELETE FROM {}", t.name);
        }
        let p = self.pred(t, "", 2);
        format!("DELETE FROM {} WHERE {p}", t.name)
    }

    fn set_expr(&mut self, t: &Table, c: &Column) -> String {
        if c.nullable && self.chance(0.1) {
            return "NULL".into();
        }
        if self.chance(0.25) {
            return self.lit_plain(c.ty);
        }
        let col = &c.name;
        let same: Vec<Column> =
            t.cols.iter().filter(|o| o.ty.class() == c.ty.class() && o.nullable <= c.nullable).cloned().collect();
        if !same.is_empty() && self.chance(0.15) {
            return self.pick(&same).name.clone();
        }
        match c.ty.class() {
            Class::Int => {
                (*self.pick(&["{c} + 1", "{c} - 1", "{c} % 10", "-{c}", "abs({c})", "{c} / 2"])).replace("{c}", col)
            }
            Class::UInt => (*self.pick(&["{c} + 1", "{c} % 10", "{c} / 2", "{c} - 1"])).replace("{c}", col),
            Class::Float => (*self.pick(&["{c} * 0.5", "{c} + 0.25", "-{c}", "floor({c})"])).replace("{c}", col),
            Class::Bool => format!("NOT {col}"),
            Class::Str => (*self.pick(&["upper({c})", "substr({c} || 'p', 1, 3)", "lower({c})", "substr({c}, 2)"]))
                .replace("{c}", col),
            Class::Date => format!("{col} + INTERVAL '1 day'"),
            Class::Ts => format!("{col} + INTERVAL '1 second'"),
            Class::Dec => (*self.pick(&["{c} + 1", "-{c}", "{c} / 2", "{c} * 2 - 1"])).replace("{c}", col),
        }
    }

    fn update(&mut self, t: &Table) -> String {
        let n = self.rng.random_range(1..=2.min(t.cols.len()));
        let mut cols = t.cols.clone();
        let mut sets = Vec::new();
        for _ in 0..n {
            let i = self.rng.random_range(0..cols.len());
            let c = cols.remove(i);
            // Conditional assignments: the CASE is never pushed.
            let e = self.set_expr(t, &c);
            let e = if self.chance(0.15) {
                let p = self.pred(t, "", 0);
                format!("CASE WHEN {p} THEN {e} ELSE {} END", c.name)
            } else {
                e
            };
            sets.push(format!("{} = {e}", c.name));
        }
        // Sometimes swap two columns of one type: each SET sees the old row.
        let pairs: Vec<(String, String)> = t
            .cols
            .iter()
            .flat_map(|a| t.cols.iter().map(move |b| (a, b)))
            .filter(|(a, b)| a.name < b.name && a.ty == b.ty && a.nullable == b.nullable)
            .map(|(a, b)| (a.name.clone(), b.name.clone()))
            .collect();
        if !pairs.is_empty() && self.chance(0.15) {
            let (a, b) = self.pick(&pairs).clone();
            sets = vec![format!("{a} = {b}"), format!("{b} = {a}")];
        }
        let mut sql = format!("UPDATE {} SET {}", t.name, sets.join(", "));
        if !self.chance(0.05) {
            let p = self.pred(t, "", 2);
            write!(sql, " WHERE {p}").expect("write to string");
        }
        sql
    }

    fn query(&mut self) -> Query {
        let ti = self.rng.random_range(0..self.tables.len());
        let t = self.tables[ti].clone();
        let r = self.rng.random_range(0..100);
        let where_ = |g: &mut Gen, t: &Table, q: &str| -> String {
            if g.chance(0.7) { format!(" WHERE {}", g.pred(t, q, 2)) } else { String::new() }
        };
        if r < 14 {
            // Projection with a filter.
            let proj = self.projection(&t, "");
            let w = where_(self, &t, "");
            return Query::multiset(format!("SELECT {} FROM {}{w}", proj.join(", "), t.name));
        }
        if r < 28 {
            // Aggregates without GROUP BY.
            let n = self.rng.random_range(1..=4);
            let aggs: Vec<String> = (0..n).map(|i| format!("{} AS a{i}", self.aggregate(&t, ""))).collect();
            let w = where_(self, &t, "");
            return Query::multiset(format!("SELECT {} FROM {}{w}", aggs.join(", "), t.name));
        }
        if r < 52 {
            // GROUP BY column or expression keys, maybe HAVING.
            let nk = self.rng.random_range(1..=2);
            let keys: Vec<String> = (0..nk).map(|_| self.val(&t, "").sql).collect();
            let na = self.rng.random_range(1..=3);
            let aggs: Vec<String> = (0..na).map(|i| format!("{} AS a{i}", self.aggregate(&t, ""))).collect();
            let w = where_(self, &t, "");
            let named: Vec<String> = keys.iter().enumerate().map(|(i, k)| format!("{k} AS k{i}")).collect();
            let mut sql = format!(
                "SELECT {}, {} FROM {}{w} GROUP BY {}",
                named.join(", "),
                aggs.join(", "),
                t.name,
                keys.join(", ")
            );
            if self.chance(0.25) {
                let h =
                    *self.pick(&["COUNT(*) > 1", "COUNT(*) = 1", "MIN(c0) < 0", "MAX(c0) IS NOT NULL", "SUM(c0) > 10"]);
                write!(sql, " HAVING {h}").expect("write to string");
            }
            // Sometimes only the keys (DISTINCT by GROUP BY) or ORDER BY all + LIMIT.
            if self.chance(0.2) {
                let outputs = keys.len() + aggs.len();
                let order: Vec<String> = (1..=outputs).map(|i| self.order_item(&i.to_string())).collect();
                let limit = self.range(1, 10);
                write!(sql, " ORDER BY {} LIMIT {limit}", order.join(", ")).expect("write to string");
                return Query::exact(sql);
            }
            return Query::multiset(sql);
        }
        if r < 58 {
            let proj = self.projection(&t, "");
            let w = where_(self, &t, "");
            return Query::multiset(format!("SELECT DISTINCT {} FROM {}{w}", proj.join(", "), t.name));
        }
        if r < 72 {
            // ORDER BY ... LIMIT: over all output columns (exact), or some (prefix check).
            let proj = self.projection(&t, "");
            let w = where_(self, &t, "");
            let base = format!("SELECT {} FROM {}{w}", proj.join(", "), t.name);
            let n = proj.len();
            let all = self.chance(0.5);
            let keys: Vec<usize> = if all {
                let mut k: Vec<usize> = (0..n).collect();
                k.rotate_left(self.rng.random_range(0..n));
                k
            } else {
                let m = self.rng.random_range(1..=n);
                let mut k: Vec<usize> = (0..n).collect();
                k.rotate_left(self.rng.random_range(0..n));
                k.truncate(m);
                k
            };
            let order: Vec<String> = keys.iter().map(|&k| self.order_item(&format!("o{k}"))).collect();
            let limit = self.range(0, 12);
            let offset = if self.chance(0.3) { self.range(0, 5) } else { 0 };
            if all && self.chance(0.15) {
                // A full sort, no limit.
                return Query::exact(format!("{base} ORDER BY {}", order.join(", ")));
            }
            let tail = if offset > 0 { format!(" LIMIT {limit} OFFSET {offset}") } else { format!(" LIMIT {limit}") };
            let sql = format!("{base} ORDER BY {}{tail}", order.join(", "));
            let full = format!("{base} ORDER BY {}", order.join(", "));
            return if keys.len() == n {
                Query::exact(sql)
            } else {
                Query { sql, check: Check::Prefix { keys, full, limit: limit as usize, offset: offset as usize } }
            };
        }
        if r < 90 && self.tables.len() > 1 {
            // A join of two tables on columns of one family.
            let mut tj = self.rng.random_range(0..self.tables.len());
            if tj == ti {
                tj = (tj + 1) % self.tables.len();
            }
            let u = self.tables[tj].clone();
            let (lk, rk) = self.join_keys(&t, &u);
            let kind = *self.pick(&["JOIN", "JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"]);
            let mut on = format!("l.{lk} = r.{rk}");
            if self.chance(0.2) {
                write!(on, " AND {}", self.pred(&u, "r.", 0)).expect("write to string");
            }
            let mut w = String::new();
            if self.chance(0.6) {
                let p = if self.chance(0.5) { self.pred(&t, "l.", 1) } else { self.pred(&u, "r.", 1) };
                w = format!(" WHERE {p}");
            }
            if self.chance(0.4) {
                let key = self.val(&t, "l.").sql;
                let a1 = self.aggregate(&u, "r.");
                let a2 = self.aggregate(&t, "l.");
                return Query::multiset(format!(
                    "SELECT {key} AS k, {a1} AS a1, {a2} AS a2 FROM {} l {kind} {} r ON {on}{w} GROUP BY {key}",
                    t.name, u.name
                ));
            }
            let mut proj = self.projection(&t, "l.");
            let more = self.projection(&u, "r.");
            proj.extend(
                more.into_iter().enumerate().map(|(i, p)| p.replace(&format!(" AS o{i}"), &format!(" AS p{i}"))),
            );
            return Query::multiset(format!(
                "SELECT {} FROM {} l {kind} {} r ON {on}{w}",
                proj.join(", "),
                t.name,
                u.name
            ));
        }
        if r < 95 && self.tables.len() > 1 {
            // IN / EXISTS subqueries and UNION ALL.
            let tj = (ti + 1) % self.tables.len();
            let u = self.tables[tj].clone();
            let (lk, rk) = self.join_keys(&t, &u);
            let proj = self.projection(&t, "");
            let pu = self.pred(&u, "", 1);
            let not = if self.chance(0.3) { "NOT " } else { "" };
            return Query::multiset(match self.rng.random_range(0..3) {
                0 => format!(
                    "SELECT {} FROM {} WHERE {lk} {not}IN (SELECT {rk} FROM {} WHERE {pu})",
                    proj.join(", "),
                    t.name,
                    u.name
                ),
                1 => format!(
                    "SELECT {} FROM {} WHERE {not}EXISTS (SELECT 1 FROM {} WHERE {}.{rk} = {}.{lk} AND {pu})",
                    proj.join(", "),
                    t.name,
                    u.name,
                    u.name,
                    t.name
                ),
                _ => format!("SELECT {lk} AS k FROM {} UNION ALL SELECT {rk} FROM {} WHERE {pu}", t.name, u.name),
            });
        }
        if r < 97 {
            // LIMIT without ORDER BY: any `limit` of the rows.
            let proj = self.projection(&t, "");
            let w = where_(self, &t, "");
            let base = format!("SELECT {} FROM {}{w}", proj.join(", "), t.name);
            let limit = self.range(0, 15) as usize;
            return Query { sql: format!("{base} LIMIT {limit}"), check: Check::Subset { full: base, limit } };
        }
        if r < 99 {
            // Window aggregates over whole partitions (no ORDER BY: the value is one per partition).
            let key = self.val(&t, "").sql;
            let agg = self.aggregate(&t, "");
            let proj = self.projection(&t, "");
            let w = where_(self, &t, "");
            return Query::multiset(format!(
                "SELECT {}, {agg} OVER (PARTITION BY {key}) AS w0, COUNT(*) OVER () AS w1 FROM {}{w}",
                proj.join(", "),
                t.name
            ));
        }
        // The whole table.
        Query::multiset(format!("SELECT * FROM {}", t.name))
    }

    fn order_item(&mut self, e: &str) -> String {
        let dir = *self.pick(&["", " ASC", " DESC"]);
        let nulls = *self.pick(&["", "", " NULLS FIRST", " NULLS LAST"]);
        format!("{e}{dir}{nulls}")
    }

    /// Columns of `t` and `u` to join on: same type if any, else same family, else the first columns.
    fn join_keys(&mut self, t: &Table, u: &Table) -> (String, String) {
        let mut same = Vec::new();
        let mut family = Vec::new();
        for a in &t.cols {
            for b in &u.cols {
                if a.ty == b.ty {
                    same.push((a.name.clone(), b.name.clone()));
                } else if a.ty.class() == b.ty.class() || (a.ty.integer() && b.ty.integer()) {
                    family.push((a.name.clone(), b.name.clone()));
                }
            }
        }
        if !same.is_empty() && (family.is_empty() || self.chance(0.8)) {
            self.pick(&same).clone()
        } else if !family.is_empty() {
            self.pick(&family).clone()
        } else {
            ("c0".into(), "c0".into())
        }
    }
}

// ----------------------------------------------------------------- queries

#[derive(Debug, Clone)]
enum Check {
    /// Same rows in any order.
    Multiset,
    /// Same rows in the same order.
    Exact,
    /// ORDER BY some output columns with LIMIT/OFFSET: the sort keys must
    /// match the reference's full sorted result at the window, and each row
    /// must be one of the rows with its key.
    Prefix { keys: Vec<usize>, full: String, limit: usize, offset: usize },
    /// LIMIT without ORDER BY: `min(limit, n)` of the `n` rows of `full`.
    Subset { full: String, limit: usize },
}

#[derive(Debug, Clone)]
struct Query {
    sql: String,
    check: Check,
}

impl Query {
    fn multiset(sql: String) -> Self {
        Self { sql, check: Check::Multiset }
    }

    fn exact(sql: String) -> Self {
        Self { sql, check: Check::Exact }
    }
}

// ------------------------------------------------------------------- cells

#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Null,
    Float(f64),
    Text(String),
}

impl Cell {
    /// A sort key that ignores float noise.
    fn key(&self) -> String {
        match self {
            Cell::Null => "\u{0}NULL".into(),
            Cell::Float(v) => format!("F{:.9e}", v),
            Cell::Text(s) => format!("T{s}"),
        }
    }

    fn matches(&self, other: &Cell) -> bool {
        match (self, other) {
            (Cell::Float(a), Cell::Float(b)) => {
                a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
            }
            (a, b) => a == b,
        }
    }
}

impl std::fmt::Display for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cell::Null => write!(f, "NULL"),
            Cell::Float(v) => write!(f, "{v:?}"),
            Cell::Text(s) => write!(f, "{s:?}"),
        }
    }
}

type Row = Vec<Cell>;

#[derive(Debug)]
struct Output {
    types: Vec<DataType>,
    rows: Vec<Row>,
}

fn rows_of(batches: &[RecordBatch]) -> Result<Output, DataFusionError> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    let mut types = Vec::new();
    for batch in batches {
        if types.is_empty() {
            types = batch.schema().fields().iter().map(|f| f.data_type().clone()).collect();
        }
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        for r in 0..batch.num_rows() {
            rows.push(
                batch
                    .columns()
                    .iter()
                    .zip(&formatters)
                    .map(|(c, f)| {
                        if c.is_null(r) {
                            Cell::Null
                        } else if c.data_type().is_floating() {
                            // -0.0 prints as "-0.0" but equals 0.0: which one a
                            // MIN, MAX or group key shows is not defined.
                            let v: f64 = f.value(r).to_string().parse().unwrap_or(f64::NAN);
                            Cell::Float(if v == 0.0 { 0.0 } else { v })
                        } else {
                            Cell::Text(f.value(r).to_string())
                        }
                    })
                    .collect(),
            );
        }
    }
    Ok(Output { types, rows })
}

fn row_key(row: &Row) -> Vec<String> {
    row.iter().map(Cell::key).collect()
}

fn rows_match(a: &[Row], b: &[Row]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.matches(q)))
}

fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort_by_cached_key(row_key);
    rows
}

fn show(rows: &[Row]) -> String {
    const MAX: usize = 40;
    let mut s = String::new();
    for r in rows.iter().take(MAX) {
        let cells: Vec<String> = r.iter().map(ToString::to_string).collect();
        writeln!(s, "    {}", cells.join(" | ")).expect("write to string");
    }
    if rows.len() > MAX {
        writeln!(s, "    ... ({} rows)", rows.len()).expect("write to string");
    }
    s
}

// ------------------------------------------------------------------ engines

struct Engines {
    db: Database,
    quiver: SessionContext,
    reference: SessionContext,
    trace: bool,
    /// One table starts with `BIG_ROWS` rows.
    big: bool,
    log: Vec<String>,
    /// Statements compared, and those both sides rejected (with the reference's message).
    compared: usize,
    both_failed: Vec<String>,
}

type Outcome = Result<Output, String>;

/// Runs `sql` on `ctx` in a task of its own, so that a panic is an error.
async fn run_on(ctx: &SessionContext, sql: &str) -> Outcome {
    let (ctx, sql) = (ctx.clone(), sql.to_string());
    let task = tokio::spawn(async move {
        let df = ctx.sql(&sql).await.map_err(|e| e.to_string())?;
        let batches = df.collect().await.map_err(|e| e.to_string())?;
        rows_of(&batches).map_err(|e| e.to_string())
    });
    task.await.unwrap_or_else(|e| Err(format!("panic: {e}")))
}

/// Whether the optimizer folded `sql`'s condition away (into an empty relation).
async fn folds_to_empty(ctx: &SessionContext, sql: &str) -> bool {
    let Ok(df) = ctx.sql(sql).await else { return false };
    let Ok(plan) = df.into_optimized_plan() else { return false };
    plan.exists(|n| Ok(matches!(n, LogicalPlan::EmptyRelation(_)))).unwrap_or(false)
}

impl Engines {
    async fn both(&mut self, sql: &str) -> (Outcome, Outcome) {
        if self.trace {
            println!("{sql};");
        }
        self.log.push(sql.to_string());
        let q = run_on(&self.quiver, sql).await;
        let r = run_on(&self.reference, sql).await;
        (q, r)
    }

    /// Runs a DDL statement on both sides; both must succeed.
    async fn ddl(&mut self, sql: &str) -> Result<(), String> {
        match self.both(sql).await {
            (Ok(_), Ok(_)) => Ok(()),
            (q, r) => Err(format!("DDL failed: {sql}\n  quiverdb: {:?}\n  MemTable: {:?}", q.err(), r.err())),
        }
    }

    /// Runs a DML statement; the affected-row counts must agree, then the tables.
    async fn dml(&mut self, sql: &str, table: &str) -> Result<(), String> {
        if self.trace {
            println!("{sql};");
        }
        self.log.push(sql.to_string());
        self.compared += 1;
        let q = run_on(&self.quiver, sql).await;
        // DataFusion hands a MemTable no condition at all when its optimizer
        // folded the condition to false (`WHERE 1 = 0`, `x IS NULL` on a NOT
        // NULL column), and the MemTable then changes every row: the
        // reference answers 0 there, as SQL says, without running it.
        let is_dml = sql.starts_with("DELETE") || sql.starts_with("UPDATE");
        let r = if is_dml && folds_to_empty(&self.reference, sql).await {
            Ok(Output { types: vec![DataType::UInt64], rows: vec![vec![Cell::Text("0".into())]] })
        } else if let Some(t) = sql.strip_prefix("TRUNCATE TABLE ") {
            // A MemTable does not implement TRUNCATE ("TRUNCATE not supported for Base table").
            run_on(&self.reference, &format!("DELETE FROM {t}")).await
        } else {
            run_on(&self.reference, sql).await
        };
        match (&q, &r) {
            (Ok(a), Ok(b)) if rows_match(&a.rows, &b.rows) => {}
            (Err(_), Err(m)) => self.both_failed.push(format!("{m} <- {sql}")),
            _ => return Err(format!("DML result differs\n{}", describe(sql, &q, &r))),
        }
        self.compare_table(table).await
    }

    async fn compare_table(&mut self, table: &str) -> Result<(), String> {
        let sql = format!("SELECT * FROM {table}");
        let q = run_on(&self.quiver, &sql).await;
        let r = run_on(&self.reference, &sql).await;
        let ok = match (&q, &r) {
            (Ok(a), Ok(b)) => rows_match(&sorted(a.rows.clone()), &sorted(b.rows.clone())),
            _ => false,
        };
        if !ok {
            return Err(format!("table contents differ after the statement\n{}", describe(&sql, &q, &r)));
        }
        let count = self.db.table(table).map(|t| t.row_count()).map_err(|e| e.to_string())?;
        let expected = r.map(|o| o.rows.len()).unwrap_or_default();
        if count != expected {
            return Err(format!("row_count() of {table} is {count}, the reference has {expected} rows"));
        }
        Ok(())
    }

    async fn query(&mut self, query: &Query) -> Result<(), String> {
        self.compared += 1;
        let (q, r) = self.both(&query.sql).await;
        let (a, b) = match (&q, &r) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(_), Err(m)) => {
                self.both_failed.push(format!("{m} <- {}", query.sql));
                return Ok(());
            }
            _ => return Err(format!("one side failed\n{}", describe(&query.sql, &q, &r))),
        };
        if !a.rows.is_empty() && !b.rows.is_empty() && a.types != b.types {
            return Err(format!(
                "output types differ: {:?} vs {:?}\n{}",
                a.types,
                b.types,
                describe(&query.sql, &q, &r)
            ));
        }
        let ok = match &query.check {
            Check::Multiset => rows_match(&sorted(a.rows.clone()), &sorted(b.rows.clone())),
            Check::Exact => rows_match(&a.rows, &b.rows),
            Check::Subset { full, limit } => {
                let all =
                    run_on(&self.reference, full).await.map_err(|e| format!("reference failed on {full}: {e}"))?;
                a.rows.len() == (*limit).min(all.rows.len()) && sub_multiset(&a.rows, &all.rows)
            }
            Check::Prefix { keys, full, limit, offset } => {
                let all =
                    run_on(&self.reference, full).await.map_err(|e| format!("reference failed on {full}: {e}"))?;
                prefix_ok(&a.rows, &all.rows, keys, *limit, *offset)
                    && rows_match(&project(&a.rows, keys), &project(&b.rows, keys))
            }
        };
        if ok { Ok(()) } else { Err(format!("results differ ({:?})\n{}", query.check, describe(&query.sql, &q, &r))) }
    }
}

fn project(rows: &[Row], keys: &[usize]) -> Vec<Row> {
    rows.iter().map(|r| keys.iter().map(|&k| r[k].clone()).collect()).collect()
}

/// `got` is a valid `LIMIT limit OFFSET offset` window of `full` (sorted on `keys`).
fn prefix_ok(got: &[Row], full: &[Row], keys: &[usize], limit: usize, offset: usize) -> bool {
    let window: Vec<Row> = full.iter().skip(offset).take(limit).cloned().collect();
    if !rows_match(&project(got, keys), &project(&window, keys)) {
        return false;
    }
    sub_multiset(got, full)
}

/// Each row of `got` is a row of `full`, no row of `full` used twice.
fn sub_multiset(got: &[Row], full: &[Row]) -> bool {
    let mut pool: Vec<Option<&Row>> = full.iter().map(Some).collect();
    got.iter().all(|g| {
        let slot =
            pool.iter_mut().find(|p| p.is_some_and(|f| rows_match(std::slice::from_ref(g), std::slice::from_ref(f))));
        match slot {
            Some(s) => {
                *s = None;
                true
            }
            None => false,
        }
    })
}

fn describe(sql: &str, q: &Outcome, r: &Outcome) -> String {
    let side = |o: &Outcome| match o {
        Ok(out) => format!("{} row(s)\n{}", out.rows.len(), show(&sorted(out.rows.clone()))),
        Err(e) => format!("error: {e}\n"),
    };
    format!("  SQL: {sql}\n  quiverdb: {}  MemTable: {}", side(q), side(r))
}

// ---------------------------------------------------------------- the test

#[derive(Debug, Clone, Copy)]
struct Settings {
    shard_capacity: usize,
    batch_size: usize,
    target_partitions: usize,
    id_buffer: usize,
}

fn quiver_context(settings: Settings) -> (Database, SessionContext) {
    let db = Database::new();
    let ctx = quiverdb::session_context_with(
        &db,
        SessionOptions {
            target_partitions: settings.target_partitions,
            batch_size: settings.batch_size,
            table_options: TableOptions::default()
                .with_shard_capacity(settings.shard_capacity)
                .with_background_rebuild(false),
            scan: ScanSettings { id_buffer: settings.id_buffer },
            memory_limit: None,
            max_table_memory: None,
        },
    );
    (db, ctx)
}

/// Plain DataFusion with `MemTable`s, minus common subexpression
/// elimination: DataFusion 55 reads an UPDATE's assignments from the
/// optimized plan, where CSE may have replaced them with references to a
/// `__common_expr_n` column the table does not have (`UPDATE t SET a = a
/// % 10 WHERE coalesce(a, 0) = 19` fails with "No field named
/// __common_expr_3"). The reference stays correct without the rule.
fn reference_context(settings: Settings) -> SessionContext {
    let config =
        SessionConfig::new().with_target_partitions(settings.target_partitions).with_batch_size(settings.batch_size);
    let rules: Vec<Arc<dyn OptimizerRule + Send + Sync>> =
        Optimizer::new().rules.into_iter().filter(|r| r.name() != "common_sub_expression_eliminate").collect();
    let state =
        SessionStateBuilder::new().with_config(config).with_default_features().with_optimizer_rules(rules).build();
    SessionContext::new_with_state(state)
}

async fn run_seed(seed: u64, steps: usize, trace: bool) -> Result<(), String> {
    let skip =
        std::env::var("QUIVERDB_DIFF_SKIP").unwrap_or_default().split(',').map(|s| s.trim().to_string()).collect();
    let mut g = Gen { rng: StdRng::seed_from_u64(seed), tables: Vec::new(), skip };
    let mut settings = Settings {
        shard_capacity: *g.pick(&[1, 3, 7, 64, BIG_SHARD]),
        batch_size: *g.pick(&[1, 3, 8192, 8192]),
        target_partitions: g.rng.random_range(1..=4),
        id_buffer: *g.pick(&[1, 3, 0]),
    };
    if settings.shard_capacity == BIG_SHARD {
        // Thousands of rows in batches of 1 or 3 take too long in a debug build.
        settings.batch_size = *g.pick(&[1000, 8192]);
    }
    if trace {
        println!("-- seed {seed}: {settings:?}");
    }
    let (db, quiver) = quiver_context(settings);
    let reference = reference_context(settings);
    let big = settings.shard_capacity == BIG_SHARD;
    let mut e = Engines { db, quiver, reference, trace, big, log: Vec::new(), compared: 0, both_failed: Vec::new() };
    let mut result = script(&mut g, &mut e, steps).await;
    let real = e.compared - e.both_failed.len();
    if result.is_ok() && (real as f64) < MIN_COMPARED_SHARE * steps as f64 {
        result = Err(format!(
            "seed {seed}: only {real} statements produced a comparison ({} of {} failed on both sides; at least {:.0} \
             must compare):\n{}",
            e.both_failed.len(),
            e.compared,
            MIN_COMPARED_SHARE * steps as f64,
            e.both_failed.join("\n")
        ));
    }
    if std::env::var("QUIVERDB_DIFF_STATS").is_ok() {
        eprintln!("seed {seed}: {} statements compared, {} failed on both sides", e.compared, e.both_failed.len());
        for m in &e.both_failed {
            eprintln!("    both failed: {}", m.replace('\n', " "));
        }
    }
    result.map_err(|msg| {
        let script = e
            .log
            .iter()
            .map(|s| if s.starts_with("--") { format!("    {s}") } else { format!("    {s};") })
            .collect::<Vec<_>>()
            .join("\n");
        format!("seed {seed} {settings:?}:\n{msg}\n  statements so far:\n{script}")
    })
}

async fn script(g: &mut Gen, e: &mut Engines, steps: usize) -> Result<(), String> {
    let n_tables = g.rng.random_range(2..=3);
    for i in 0..n_tables {
        let t = g.table(i);
        e.ddl(&t.create_sql()).await?;
        g.tables.push(t);
    }
    if e.big {
        let t = g.tables[0].clone();
        let sql = g.insert_series_of(&t, BIG_ROWS);
        e.dml(&sql, &t.name).await?;
        if g.chance(0.7) {
            e.log.push("-- rebuild".into());
            e.db.rebuild_all().map_err(|err| format!("rebuild_all failed: {err}"))?;
        }
    }
    for t in g.tables.clone() {
        for _ in 0..g.rng.random_range(1..=2) {
            let sql = g.insert_values(&t);
            e.dml(&sql, &t.name).await?;
        }
        if g.chance(0.7) {
            let sql = g.insert_series(&t);
            e.dml(&sql, &t.name).await?;
        }
    }
    for _ in 0..steps {
        let ti = g.rng.random_range(0..g.tables.len());
        let t = g.tables[ti].clone();
        let r = g.rng.random_range(0..100);
        if r < 8 {
            if e.trace {
                println!("-- rebuild_all");
            }
            e.log.push("-- rebuild".into());
            e.db.rebuild_all().map_err(|err| format!("rebuild_all failed: {err}"))?;
        } else if r < 14 {
            let sql = match g.rng.random_range(0..5) {
                0 | 1 => g.insert_values(&t),
                2 => g.insert_columns(&t),
                _ => g.insert_series(&t),
            };
            e.dml(&sql, &t.name).await?;
        } else if r < 15 {
            if g.chance(0.5) {
                // The table reads itself while it grows.
                let w = if g.chance(0.5) { format!(" WHERE {}", g.pred(&t, "", 1)) } else { String::new() };
                e.dml(&format!("INSERT INTO {} SELECT * FROM {}{w}", t.name, t.name), &t.name).await?;
            } else {
                // CREATE TABLE AS SELECT: a table with the query's types, compared whole, then dropped.
                let proj = g.projection(&t, "");
                let w = if g.chance(0.6) { format!(" WHERE {}", g.pred(&t, "", 1)) } else { String::new() };
                e.ddl(&format!("CREATE TABLE tx AS SELECT {} FROM {}{w}", proj.join(", "), t.name)).await?;
                e.compare_table("tx").await?;
                let q = Query::multiset("SELECT o0, COUNT(*) AS n FROM tx GROUP BY o0".into());
                e.query(&q).await?;
                e.ddl("DROP TABLE tx").await?;
            }
        } else if r < 17 {
            let src = g.tables[(ti + 1) % g.tables.len()].clone();
            let sql = g.insert_from(&t, &src);
            e.dml(&sql, &t.name).await?;
        } else if r < 27 {
            let sql = g.delete(&t);
            e.dml(&sql, &t.name).await?;
        } else if r < 39 {
            let sql = g.update(&t);
            e.dml(&sql, &t.name).await?;
        } else if r < 40 {
            e.dml(&format!("TRUNCATE TABLE {}", t.name), &t.name).await?;
        } else {
            let q = g.query();
            e.query(&q).await?;
        }
    }
    Ok(())
}

/// Runs the script at `path` (from `QUIVERDB_DIFF_SCRIPT`; a file: statements each
/// ending with `;` at the end of a line, `-- rebuild` lines for
/// `db.rebuild_all()`) on both sides and prints both results of each
/// statement, for reducing a failing seed by hand. Settings from
/// `QUIVERDB_DIFF_SETTINGS=shard_capacity,batch_size,target_partitions,id_buffer`.
fn replay_script(path: &str) {
    let text = std::fs::read_to_string(path).expect("read the script");
    let numbers: Vec<usize> = std::env::var("QUIVERDB_DIFF_SETTINGS")
        .unwrap_or_else(|_| "7,3,2,3".into())
        .split(',')
        .map(|n| n.trim().parse().expect("a number"))
        .collect();
    let settings = Settings {
        shard_capacity: numbers[0],
        batch_size: numbers[1],
        target_partitions: numbers[2],
        id_buffer: numbers[3],
    };
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime");
    runtime.block_on(async {
        let (db, quiver) = quiver_context(settings);
        let reference = reference_context(settings);
        let mut statement = String::new();
        for line in text.lines() {
            if line.trim() == "-- rebuild" {
                db.rebuild_all().expect("rebuild_all");
                println!("-- rebuild\n");
                continue;
            }
            if line.trim_start().starts_with("--") {
                continue;
            }
            statement.push_str(line);
            statement.push('\n');
            if !line.trim_end().ends_with(';') {
                continue;
            }
            let sql = std::mem::take(&mut statement);
            let sql = sql.trim().trim_end_matches(';');
            println!("> {sql}");
            let q = run_on(&quiver, sql).await;
            let r = run_on(&reference, sql).await;
            let same = match (&q, &r) {
                (Ok(a), Ok(b)) => rows_match(&sorted(a.rows.clone()), &sorted(b.rows.clone())),
                (Err(_), Err(_)) => true,
                _ => false,
            };
            println!("{}{}", if same { "" } else { "!!! DIFFERENT\n" }, describe(sql, &q, &r));
        }
    });
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}")))
}

#[test]
fn sql_differential() {
    if let Ok(path) = std::env::var("QUIVERDB_DIFF_SCRIPT") {
        replay_script(&path);
        return;
    }
    let seeds: Vec<u64> = match (env_number("QUIVERDB_DIFF_SEED"), env_number("QUIVERDB_DIFF_SEEDS")) {
        (Some(s), _) => vec![s],
        (None, Some(n)) => (0..n).collect(),
        (None, None) => (0..DEFAULT_SEEDS).collect(),
    };
    let steps = env_number("QUIVERDB_DIFF_STEPS").map_or(DEFAULT_STEPS, |n| n as usize);
    let trace = std::env::var("QUIVERDB_DIFF_TRACE").is_ok_and(|v| v != "0");
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime");
    // Two seeds at a time (planning a query is single-threaded).
    let parallel = if trace { 1 } else { 2 };
    let mut failures = runtime.block_on(async {
        let mut running = tokio::task::JoinSet::new();
        let mut failures = Vec::new();
        let mut next = seeds.iter().copied();
        loop {
            while running.len() < parallel {
                let Some(seed) = next.next() else { break };
                running.spawn(async move {
                    let started = std::time::Instant::now();
                    let outcome = run_seed(seed, steps, trace).await;
                    if std::env::var("QUIVERDB_DIFF_STATS").is_ok() {
                        eprintln!("seed {seed}: {:?}", started.elapsed());
                    }
                    (seed, outcome)
                });
            }
            let Some(done) = running.join_next().await else { break };
            let (seed, outcome) = done.expect("a seed's task panicked");
            if let Err(msg) = outcome {
                eprintln!("FAILED {msg}\n");
                failures.push((seed, msg));
            }
        }
        failures
    });
    failures.sort_by_key(|(seed, _)| *seed);
    let failures: Vec<String> = failures.into_iter().map(|(_, msg)| msg).collect();
    assert!(
        failures.is_empty(),
        "{} of {} seed(s) found a difference between quiverdb and DataFusion's MemTable:\n\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n\n")
    );
}
