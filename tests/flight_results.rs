//! Query results through the Flight SQL client carry exactly the values
//! and types stock DataFusion computes in-process: the schema the client
//! is told (at GetFlightInfo and in the stream) is the executed plan's,
//! after type coercion, and no value is converted lossily on the way out.
//!
//! Covered: the reported cases (UNION ALL of mixed numeric types, CASE
//! with branches of different types, arrays of mixed integer types,
//! dictionary-typed results), and a randomized check: UNION ALL, CASE and
//! COALESCE over mixed numeric, string, boolean, decimal and array
//! operands, each run through the server and through stock DataFusion on
//! the same data, compared value for value.

#![allow(clippy::unwrap_used)]

#[path = "common/flight.rs"]
mod flight;

use arrow_array::RecordBatch;
use arrow_schema::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::physical_plan::collect;
use datafusion::prelude::SessionContext;
use flight::*;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

/// The table both engines hold: (a INT, f DOUBLE, s VARCHAR, u BIGINT
/// UNSIGNED, d DECIMAL(6, 2)).
const SETUP: [&str; 2] = [
    "CREATE TABLE m (a INT, f DOUBLE, s VARCHAR, u BIGINT UNSIGNED, d DECIMAL(6, 2))",
    "INSERT INTO m VALUES (2, 2.5, 'two', 7, 12.25), (1, -0.5, 'one', 18446744073709551615, -3.5), \
     (NULL, NULL, NULL, NULL, NULL)",
];

/// A result as a client sees it: column types and formatted rows.
#[derive(Debug, PartialEq)]
struct Seen {
    types: Vec<DataType>,
    rows: Vec<String>,
}

/// The type a client receives for a column of type `t`: string and binary
/// views as plain arrays, dictionaries as their values (inside nested
/// types too).
fn client_type(t: &DataType) -> DataType {
    match t {
        DataType::Utf8View => DataType::Utf8,
        DataType::BinaryView => DataType::Binary,
        DataType::Dictionary(_, v) => client_type(v),
        DataType::List(f) => {
            DataType::List(std::sync::Arc::new(f.as_ref().clone().with_data_type(client_type(f.data_type()))))
        }
        other => other.clone(),
    }
}

/// Rows of `batches` formatted, sorted (UNION ALL has no order).
fn seen(types: Vec<DataType>, batches: &[RecordBatch]) -> Seen {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for batch in batches {
        let formatters: Vec<_> =
            batch.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap()).collect();
        for row in 0..batch.num_rows() {
            rows.push(formatters.iter().map(|f| f.value(row).to_string()).collect::<Vec<_>>().join(" | "));
        }
    }
    rows.sort();
    Seen { types, rows }
}

/// `sql` on stock DataFusion, as a client would see it: the types of the
/// plan it executes (after type coercion, unlike a `DataFrame`'s schema).
async fn reference(ctx: &SessionContext, sql: &str) -> Result<Seen, String> {
    let df = ctx.sql(sql).await.map_err(|e| e.to_string())?;
    let plan = df.create_physical_plan().await.map_err(|e| e.to_string())?;
    let types = plan.schema().fields().iter().map(|f| client_type(f.data_type())).collect();
    let batches = collect(plan, ctx.task_ctx()).await.map_err(|e| e.to_string())?;
    Ok(seen(types, &batches))
}

/// `sql` through the Flight SQL client. The schema GetFlightInfo announces
/// must be the schema of every batch streamed (ADBC checks it).
async fn through_flight(client: &mut Client, sql: &str) -> Result<Seen, String> {
    let info = client.execute(sql.to_string(), None).await.map_err(|e| e.to_string())?;
    let announced = info.clone().try_decode_schema().map_err(|e| e.to_string())?;
    let mut batches = Vec::new();
    for endpoint in &info.endpoint {
        let ticket = endpoint.ticket.clone().ok_or("an endpoint without a ticket")?;
        let mut stream = client.do_get(ticket).await.map_err(|e| e.to_string())?;
        while let Some(batch) = futures::StreamExt::next(&mut stream).await {
            let batch = batch.map_err(|e| e.to_string())?;
            assert_eq!(
                batch.schema().as_ref(),
                &announced,
                "{sql}: a streamed batch differs from GetFlightInfo's schema"
            );
            batches.push(batch);
        }
        if let Some(schema) = stream.schema() {
            assert_eq!(schema.as_ref(), &announced, "{sql}: the stream's schema differs from GetFlightInfo's");
        }
    }
    let types = announced.fields().iter().map(|f| f.data_type().clone()).collect();
    Ok(seen(types, &batches))
}

/// A server and a stock DataFusion session holding the same table.
async fn engines() -> (TestServer, Client, SessionContext) {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    let reference = SessionContext::new();
    for sql in SETUP {
        client.execute_update(sql.into(), None).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        reference.sql(sql).await.unwrap().collect().await.unwrap();
    }
    (server, client, reference)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reported_cases_return_datafusions_values_and_types() {
    let (_server, mut client, stock) = engines().await;
    let cases: [(&str, &[&str]); 12] = [
        ("SELECT 2 AS x UNION ALL SELECT 1.5", &["1.5", "2.0"]),
        ("SELECT CASE WHEN a = 1 THEN a ELSE f END AS x FROM m WHERE a = 2", &["2.5"]),
        ("SELECT CASE a WHEN 1 THEN 10 ELSE 2.75 END AS x FROM m WHERE a = 2", &["2.75"]),
        ("SELECT CASE WHEN a = 1 THEN 7 ELSE s END AS x FROM m WHERE a = 2", &["two"]),
        (
            "SELECT make_array(arrow_cast(2, 'UInt8')) AS x UNION ALL SELECT make_array(arrow_cast(-2, 'Int8')) AS x",
            &["[-2]", "[2]"],
        ),
        ("SELECT 1 AS x UNION ALL SELECT 'abc'", &["1", "abc"]),
        ("SELECT u AS x FROM m WHERE a = 2 UNION ALL SELECT -5", &["-5", "7"]),
        ("SELECT arrow_cast(1, 'Int8') AS x UNION ALL SELECT a + 1000 FROM m WHERE a = 2", &["1", "1002"]),
        ("SELECT CAST(1 AS TINYINT) AS x UNION ALL SELECT 1000", &["1", "1000"]),
        ("SELECT arrow_cast(s, 'Dictionary(Int32, Utf8)') AS x FROM m WHERE a IS NOT NULL", &["one", "two"]),
        ("SELECT COALESCE(a, f, d) AS x FROM m", &["1.000000000000000", "2.000000000000000", "NULL"]),
        (
            "SELECT d AS x FROM m WHERE a = 1 UNION ALL SELECT f FROM m WHERE a = 2",
            &["-3.500000000000000", "2.500000000000000"],
        ),
    ];
    for (sql, expected) in cases {
        let want = reference(&stock, sql).await.unwrap_or_else(|e| panic!("DataFusion fails {sql}: {e}"));
        let got = through_flight(&mut client, sql).await.unwrap_or_else(|e| panic!("Flight fails {sql}: {e}"));
        assert_eq!(got, want, "{sql}");
        assert_eq!(got.rows, expected, "{sql}");
    }
}

/// Random operands of mixed types.
fn operand(rng: &mut StdRng) -> String {
    let ints = ["0", "1", "-7", "300", "2147483648"];
    let casts = ["Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64"];
    match rng.random_range(0..12) {
        0 => ints.choose(rng).unwrap().to_string(),
        1 => format!("arrow_cast({}, '{}')", rng.random_range(0..120), casts.choose(rng).unwrap()),
        2 => ["1.5", "-0.25", "1e10"].choose(rng).unwrap().to_string(),
        3 => format!("CAST({} AS DECIMAL(7, 2))", ["2.25", "-1.5", "99.99"].choose(rng).unwrap()),
        4 => ["'abc'", "'7'", "''"].choose(rng).unwrap().to_string(),
        5 => "NULL".into(),
        6 => ["true", "false"].choose(rng).unwrap().to_string(),
        7 => ["a", "f", "s", "u", "d"].choose(rng).unwrap().to_string(),
        8 => format!("a + {}", rng.random_range(-3..1000)),
        9 => format!("make_array(arrow_cast({}, '{}'))", rng.random_range(-5..200), casts.choose(rng).unwrap()),
        10 => "arrow_cast(s, 'Dictionary(Int32, Utf8)')".into(),
        _ => format!("CAST(u AS {})", ["DOUBLE", "VARCHAR", "DECIMAL(22, 0)"].choose(rng).unwrap()),
    }
}

fn statement(rng: &mut StdRng) -> String {
    let form = rng.random_range(0..4);
    let mut e = || operand(rng);
    match form {
        0 => format!("SELECT {} AS x FROM m UNION ALL SELECT {} AS x FROM m", e(), e()),
        1 => format!(
            "SELECT {} AS x FROM m UNION ALL SELECT {} AS x FROM m UNION ALL SELECT {} AS x FROM m",
            e(),
            e(),
            e()
        ),
        2 => format!("SELECT CASE WHEN a = 1 THEN {} WHEN a = 2 THEN {} ELSE {} END AS x FROM m", e(), e(), e()),
        _ => format!("SELECT COALESCE({}, {}) AS x, {} AS y FROM m", e(), e(), e()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_mixed_type_queries_agree_with_datafusion() {
    const STATEMENTS: usize = 300;
    /// Statements both engines must run and compare (the rest are ones
    /// DataFusion itself refuses, such as a UNION of an array and a number).
    const MIN_COMPARED: usize = 120;
    let (_server, mut client, reference_ctx) = engines().await;
    let mut rng = StdRng::seed_from_u64(24);
    let mut compared = 0;
    let mut mismatches = Vec::new();
    for _ in 0..STATEMENTS {
        let sql = statement(&mut rng);
        let Ok(want) = reference(&reference_ctx, &sql).await else { continue };
        match through_flight(&mut client, &sql).await {
            Ok(got) if got == want => compared += 1,
            Ok(got) => mismatches.push(format!("{sql}\n  flight:     {got:?}\n  DataFusion: {want:?}")),
            Err(e) => mismatches.push(format!("{sql}\n  flight failed: {e}\n  DataFusion: {want:?}")),
        }
    }
    assert!(mismatches.is_empty(), "{} statements differ:\n{}", mismatches.len(), mismatches.join("\n"));
    assert!(compared >= MIN_COMPARED, "only {compared} of {STATEMENTS} statements ran on both engines");
}
