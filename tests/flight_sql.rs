//! End-to-end tests of the Flight SQL server: each test starts the real
//! server (`quiverdb::server::flight::serve`) on `127.0.0.1:0` and talks to
//! it with arrow-rs's `FlightSqlServiceClient` over a real TCP connection.
//!
//! Query results are compared with the same SQL run in-process on the same
//! database (`quiverdb::session_context`), or with values built here.
//! Covered: authentication (password handshake, static token, none, and
//! the refusal of an unauthenticated non-loopback listener), statements
//! (queries, DDL, DML, updates), prepared statements with parameters,
//! catalog metadata, bulk ingest (modes, validation, atomicity), errors
//! (bad SQL, malformed tickets, unknown commands, message-size bounds),
//! concurrent clients and graceful shutdown.
//!
//! The test crate has no `prost` dependency, so the few hand-made protobuf
//! messages (tickets and descriptors that a normal client never sends) are
//! encoded by [`any_bytes`].

#[path = "common/flight.rs"]
mod flight;
#[path = "common/ingest.rs"]
mod ingest;

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, BinaryArray, Float64Array, Int64Array, RecordBatch, StringArray, UnionArray};
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetTables, CommandGetXdbcTypeInfo,
    CommandStatementIngest, CommandStatementQuery, CommandStatementUpdate, ProstMessageExt, SqlInfo, TableExistsOption,
    TableNotExistOption, TicketStatementQuery, XdbcDataType,
};
use arrow_flight::{Action, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, IpcMessage, Ticket};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::compute::{cast, concat_batches};
use futures::{StreamExt, TryStreamExt, stream};
use prost::Message;
use quiverdb::Database;
use quiverdb::server::flight::{Auth, FlightOptions, ServeError, serve};
use tokio::net::TcpListener;
use tonic::Code;
use tonic::transport::Endpoint;

use flight::*;
use ingest::ingest_command;

/// `sql` run in-process on `db`, as one batch, with string and binary
/// views as plain Utf8 and Binary (the server sends results that way).
async fn local(db: &Database, sql: &str) -> RecordBatch {
    let ctx = quiverdb::session_context(db);
    let df = ctx.sql(sql).await.unwrap_or_else(|e| panic!("in-process {sql}: {e}"));
    let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let batches = df.collect().await.unwrap_or_else(|e| panic!("in-process {sql}: {e}"));
    let batch = concat_batches(&schema, &batches).expect("concatenating in-process batches");
    let columns = batch.columns().iter().map(|c| cast(c, &plain(c.data_type())).expect("casting views")).collect();
    RecordBatch::try_new(plain_schema(&schema), columns).expect("in-process batch without views")
}

/// `t` with string and binary views as plain Utf8 and Binary.
fn plain(t: &DataType) -> DataType {
    match t {
        DataType::Utf8View => DataType::Utf8,
        DataType::BinaryView => DataType::Binary,
        other => other.clone(),
    }
}

/// `schema` as the server reports it: views as plain types.
fn plain_schema(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema.fields().iter().map(|f| f.as_ref().clone().with_data_type(plain(f.data_type()))).collect::<Vec<_>>(),
    ))
}

/// `SELECT COUNT(*) FROM table`, in-process.
async fn count_rows(db: &Database, table: &str) -> i64 {
    local(db, &format!("SELECT COUNT(*) AS n FROM {table}")).await.column(0).as_primitive::<Int64Type>().value(0)
}

/// The schema of `table` as SQL sees it, in-process.
async fn table_schema(db: &Database, table: &str) -> SchemaRef {
    let ctx = quiverdb::session_context(db);
    ctx.table_provider(table).await.unwrap_or_else(|e| panic!("table {table}: {e}")).schema()
}

/// A string column's values (nulls as `None`), whatever its string layout
/// (SQL `VARCHAR` columns are `Utf8View`, metadata columns `Utf8`).
fn strings(batch: &RecordBatch, column: &str) -> Vec<Option<String>> {
    let array = batch.column_by_name(column).unwrap_or_else(|| panic!("no column {column}"));
    let utf8 = cast(array, &DataType::Utf8).unwrap_or_else(|e| panic!("column {column} is not text: {e}"));
    utf8.as_string::<i32>().iter().map(|v| v.map(str::to_string)).collect()
}

/// A non-null string column's values.
fn non_null_strings(batch: &RecordBatch, column: &str) -> Vec<String> {
    strings(batch, column).into_iter().map(|v| v.unwrap_or_else(|| panic!("null in {column}"))).collect()
}

/// The `count` of a DML result: one row, one non-null UInt64 column.
fn outcome_count(batch: &RecordBatch) -> u64 {
    assert_eq!(batch.schema().fields().len(), 1, "{:?}", batch.schema());
    let field = batch.schema().field(0).clone();
    assert_eq!((field.name().as_str(), field.data_type()), ("count", &DataType::UInt64));
    assert_eq!(batch.num_rows(), 1);
    batch.column(0).as_primitive::<UInt64Type>().value(0)
}

/// The one ticket of `info`.
fn only_ticket(info: &FlightInfo) -> Ticket {
    assert_eq!(info.endpoint.len(), 1, "endpoints: {:?}", info.endpoint);
    info.endpoint[0].ticket.clone().expect("an endpoint without a ticket")
}

/// `DoGet` through the plain Flight client: the raw messages, to look at
/// how a result was split.
async fn raw_do_get(client: &mut Client, ticket: Ticket) -> Result<Vec<FlightData>, FlightError> {
    let mut request = tonic::Request::new(ticket);
    if let Some(token) = client.token() {
        let value = format!("Bearer {token}").parse().map_err(|_| FlightError::protocol("token header"))?;
        request.metadata_mut().insert("authorization", value);
    }
    let messages = client.inner_mut().do_get(request).await?.into_inner();
    Ok(messages.try_collect().await?)
}

/// Decodes raw Flight messages into one batch of `schema`.
async fn decode(messages: Vec<FlightData>, schema: &SchemaRef) -> Result<RecordBatch, FlightError> {
    let batches: Vec<RecordBatch> =
        FlightRecordBatchStream::new_from_flight_data(stream::iter(messages.into_iter().map(Ok))).try_collect().await?;
    Ok(concat_batches(schema, &batches)?)
}

/// A protobuf length-delimited field (wire type 2).
fn proto_field(number: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![(number << 3) | 2];
    let mut len = bytes.len();
    loop {
        let low = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            out.push(low);
            break;
        }
        out.push(low | 0x80);
    }
    out.extend_from_slice(bytes);
    out
}

/// An encoded `google.protobuf.Any { type_url, value }`.
fn any_bytes(type_url: &str, value: &[u8]) -> Vec<u8> {
    [proto_field(1, type_url.as_bytes()), proto_field(2, value)].concat()
}

/// Ingests `batches` with `command`; the row count the server reports.
async fn ingest(
    client: &mut Client,
    command: CommandStatementIngest,
    batches: Vec<RecordBatch>,
) -> Result<i64, FlightError> {
    client.execute_ingest(command, stream::iter(batches.into_iter().map(Ok))).await
}

/// A batch of `(id BIGINT, name VARCHAR)`, with the given nullability.
fn id_name_batch(ids: &[i64], names: &[Option<&str>], names_nullable: bool) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, names_nullable),
    ]));
    let columns: Vec<ArrayRef> =
        vec![Arc::new(Int64Array::from(ids.to_vec())), Arc::new(StringArray::from(names.to_vec()))];
    RecordBatch::try_new(schema, columns).expect("test batch")
}

/// A one-column parameter batch.
fn params(column: ArrayRef) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("$1", column.data_type().clone(), true)]));
    RecordBatch::try_new(schema, vec![column]).expect("parameter batch")
}

/// Creates `t (id BIGINT NOT NULL, grp INT, name VARCHAR, score DOUBLE)`
/// with `rows` rows (some NULLs) through the server.
async fn create_sample_table(client: &mut Client, rows: i64) -> Result<(), FlightError> {
    update(client, "CREATE TABLE t (id BIGINT NOT NULL, grp INT, name VARCHAR, score DOUBLE, PRIMARY KEY (id))")
        .await?;
    let inserted = update(
        client,
        &format!(
            "INSERT INTO t SELECT value, CAST(value % 5 AS INT), \
             CASE WHEN value % 7 = 0 THEN NULL ELSE 'name ' || CAST(value % 13 AS VARCHAR) END, \
             CASE WHEN value % 11 = 0 THEN NULL ELSE CAST(value AS DOUBLE) / 4 END \
             FROM generate_series(1, {rows})"
        ),
    )
    .await?;
    assert_eq!(inserted, rows);
    Ok(())
}

// ---------------------------------------------------------------------------
// Authentication
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn password_handshake_issues_a_token_that_later_calls_use() -> TestResult {
    let server = TestServer::with_password().await;
    let mut client = server.client().await;
    let payload = client.handshake(USER, PASSWORD).await?;
    let token = String::from_utf8(payload.to_vec())?;
    assert!(!token.is_empty(), "the handshake returned no token");
    assert_eq!(client.token(), Some(&token), "the authorization header and the payload carry the same token");
    let batch = query(&mut client, "SELECT 1 AS one").await?;
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().values().to_vec(), vec![1]);
    assert_eq!(update(&mut client, "CREATE TABLE a (x INT)").await?, 0);
    assert!(server.db.contains_table("a"));

    // A second handshake gives a different token; both stay valid.
    let mut other = server.client().await;
    other.handshake(USER, PASSWORD).await?;
    assert_ne!(other.token(), Some(&token));
    query(&mut other, "SELECT 1").await?;
    query(&mut client, "SELECT 1").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wrong_password_is_unauthenticated() -> TestResult {
    let server = TestServer::with_password().await;
    // The arrow-rs client hides the status of a failed handshake in a string.
    let mut client = server.client().await;
    assert!(client.handshake(USER, "wrong").await.is_err());
    assert!(client.handshake("mallory", PASSWORD).await.is_err());
    assert_eq!(client.token(), None);

    // The same handshakes by hand, to see the status code.
    let raw_handshake = |basic: &'static str| {
        let mut flight = client.inner().clone();
        async move {
            let mut request = tonic::Request::new(stream::iter([HandshakeRequest::default()]));
            request.metadata_mut().insert("authorization", format!("Basic {basic}").parse().expect("header"));
            match flight.handshake(request).await {
                Ok(response) => response.into_inner().try_collect::<Vec<_>>().await.map(|r| r.len()),
                Err(status) => Err(status),
            }
        }
    };
    assert_eq!(raw_handshake(BASIC_GOOD).await?, 1, "the correct credentials are accepted");
    let refused = raw_handshake(BASIC_WRONG).await.expect_err("a wrong password is accepted");
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_without_a_valid_token_are_unauthenticated() -> TestResult {
    let server = TestServer::with_password().await;
    let mut authed = server.client().await;
    authed.handshake(USER, PASSWORD).await?;
    update(&mut authed, "CREATE TABLE secret (x INT)").await?;
    let info = authed.execute("SELECT * FROM secret".into(), None).await?;

    // No token at all: every kind of call is refused.
    let mut anonymous = server.client().await;
    let s = status_of(anonymous.execute("SELECT 1".into(), None).await);
    assert_eq!(s.code(), Code::Unauthenticated, "{s}");
    let s = status_of(anonymous.execute_update("INSERT INTO secret VALUES (1)".into(), None).await);
    assert_eq!(s.code(), Code::Unauthenticated, "{s}");
    let s = status_of(anonymous.get_catalogs().await);
    assert_eq!(s.code(), Code::Unauthenticated, "{s}");
    let s = status_of(anonymous.prepare("SELECT 1".into(), None).await.map(|_| ()));
    assert_eq!(s.code(), Code::Unauthenticated, "{s}");
    // A ticket obtained by an authenticated client does not open the door.
    let s = status_of(fetch(&mut anonymous, &info).await);
    assert_eq!(s.code(), Code::Unauthenticated, "{s}");

    // A made-up bearer token.
    let mut forger = server.client().await;
    forger.set_token("garbage".into());
    let s = status_of(forger.execute("SELECT 1".into(), None).await);
    assert_eq!(s.code(), Code::Unauthenticated, "{s}");
    let s = status_of(forger.execute_update("INSERT INTO secret VALUES (1)".into(), None).await);
    assert_eq!(s.code(), Code::Unauthenticated, "{s}");

    assert_eq!(count_rows(&server.db, "secret").await, 0, "a refused insert ran");
    assert_eq!(fetch(&mut authed, &info).await?.num_rows(), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn static_token_mode() -> TestResult {
    let server =
        TestServer::start(FlightOptions { auth: Auth::Token("t0ken".into()), ..FlightOptions::default() }).await;
    let mut client = server.client().await;
    let s = status_of(client.execute("SELECT 1".into(), None).await);
    assert_eq!(s.code(), Code::Unauthenticated, "{s}");
    client.set_token("t0keN".into());
    let s = status_of(client.execute("SELECT 1".into(), None).await);
    assert_eq!(s.code(), Code::Unauthenticated, "{s}");
    client.set_token("t0ken".into());
    let batch = query(&mut client, "SELECT 41 + 1 AS answer").await?;
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().value(0), 42);
    assert_eq!(update(&mut client, "CREATE TABLE k (x INT)").await?, 0);
    assert!(server.db.contains_table("k"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_auth_needs_nothing() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    let batch = query(&mut client, "SELECT 'hi' AS greeting").await?;
    assert_eq!(non_null_strings(&batch, "greeting"), vec!["hi"]);
    // A handshake is not needed, but harmless.
    let token = client.handshake("anyone", "anything").await?;
    assert!(token.is_empty(), "no token expected, got {token:?}");
    query(&mut client, "SELECT 1").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serve_refuses_unsafe_configurations() -> TestResult {
    // No authentication on a non-loopback address: refused before serving
    // (nothing connects to it).
    let listener = TcpListener::bind("0.0.0.0:0").await?;
    let result = tokio::time::timeout(
        HANG_GUARD,
        serve(Database::new(), listener, FlightOptions::default(), std::future::pending()),
    )
    .await
    .expect("serve started serving an unauthenticated public listener");
    match result {
        Err(ServeError::Config(message)) => assert!(message.contains("authentication"), "{message}"),
        other => panic!("expected a configuration error, got {other:?}"),
    }

    // A message bound too small to carry anything.
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let options = FlightOptions { max_message_bytes: 100, ..FlightOptions::default() };
    let result = tokio::time::timeout(HANG_GUARD, serve(Database::new(), listener, options, std::future::pending()))
        .await
        .expect("serve accepted a 100-byte message bound");
    assert!(matches!(result, Err(ServeError::Config(_))), "{result:?}");

    // Empty secrets: a client sending `authorization: Bearer ` (or Basic
    // credentials of `:`) would get in.
    for auth in [Auth::Token(String::new()), Auth::Password { user: String::new(), password: String::new() }] {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let options = FlightOptions { auth, ..FlightOptions::default() };
        let result =
            tokio::time::timeout(HANG_GUARD, serve(Database::new(), listener, options, std::future::pending()))
                .await
                .expect("serve started with an empty secret");
        match result {
            Err(ServeError::Config(message)) => assert!(message.contains("empty"), "{message}"),
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Statements
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn query_results_equal_the_in_process_results() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    create_sample_table(&mut client, 1000).await?;
    for sql in [
        "SELECT * FROM t ORDER BY id",
        "SELECT grp, COUNT(*) AS n, SUM(score) AS s, MIN(name) AS m, COUNT(name) AS names FROM t GROUP BY grp ORDER BY grp",
        "SELECT id, name, score FROM t WHERE grp = 2 AND score > 100 ORDER BY id DESC LIMIT 7",
        "SELECT name, COUNT(*) AS n FROM t GROUP BY name ORDER BY name NULLS FIRST",
        "SELECT a.id, b.id AS other FROM t a JOIN t b ON a.id = b.id + 500 WHERE a.grp = 1 ORDER BY a.id",
        "SELECT 1 AS one, 'x' AS s, CAST(NULL AS INT) AS n, 2.5 AS d",
        "SELECT * FROM t WHERE id < 0",
    ] {
        let remote = query(&mut client, sql).await?;
        let expected = local(&server.db, sql).await;
        assert_eq!(remote, expected, "{sql}");
    }
    assert_eq!(query(&mut client, "SELECT * FROM t").await?.num_rows(), 1000);
    // A query's ticket can be fetched again and runs again on current data.
    let info = client.execute("SELECT COUNT(*) AS n FROM t".into(), None).await?;
    assert_eq!(fetch(&mut client, &info).await?.column(0).as_primitive::<Int64Type>().value(0), 1000);
    update(&mut client, "DELETE FROM t WHERE id <= 10").await?;
    assert_eq!(fetch(&mut client, &info).await?.column(0).as_primitive::<Int64Type>().value(0), 990);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_large_result_arrives_in_several_messages() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE big (id BIGINT NOT NULL, v DOUBLE, s VARCHAR)").await?;
    let n = update(&mut client, "INSERT INTO big SELECT value, CAST(value AS DOUBLE) * 0.5, 'row ' || CAST(value AS VARCHAR) FROM generate_series(1, 200000)").await?;
    assert_eq!(n, 200_000);
    let sql = "SELECT * FROM big ORDER BY id";
    let info = client.execute(sql.into(), None).await?;
    let schema = Arc::new(info.clone().try_decode_schema()?);
    let messages = raw_do_get(&mut client, only_ticket(&info)).await?;
    let data_messages = messages.iter().filter(|m| !m.data_body.is_empty()).count();
    assert!(data_messages > 1, "200k rows came in {data_messages} data message(s)");
    let remote = decode(messages, &schema).await?;
    assert_eq!(remote.num_rows(), 200_000);
    assert_eq!(remote, local(&server.db, sql).await);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ddl_and_dml_through_execute() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;

    let info = client.execute("CREATE TABLE d (k INT NOT NULL, v VARCHAR, PRIMARY KEY (k))".into(), None).await?;
    assert_eq!(fetch(&mut client, &info).await?.num_rows(), 0);
    assert!(server.db.contains_table("d"));
    assert_eq!(server.db.table("d")?.options().primary_key, vec!["k".to_string()]);

    let info = client.execute("INSERT INTO d VALUES (1, 'a'), (2, 'b'), (3, NULL)".into(), None).await?;
    assert_eq!(info.total_records, 3);
    assert_eq!(outcome_count(&fetch(&mut client, &info).await?), 3);
    // Fetching the ticket again reports the outcome again; it does not insert again.
    assert_eq!(outcome_count(&fetch(&mut client, &info).await?), 3);
    assert_eq!(count_rows(&server.db, "d").await, 3);

    let info = client.execute("UPDATE d SET v = 'z' WHERE k >= 2".into(), None).await?;
    assert_eq!(info.total_records, 2);
    assert_eq!(outcome_count(&fetch(&mut client, &info).await?), 2);
    let info = client.execute("DELETE FROM d WHERE k = 1".into(), None).await?;
    assert_eq!(info.total_records, 1);
    assert_eq!(outcome_count(&fetch(&mut client, &info).await?), 1);
    let rows = query(&mut client, "SELECT k, v FROM d ORDER BY k").await?;
    assert_eq!(rows.column(0).as_primitive::<Int32Type>().values().to_vec(), vec![2, 3]);
    assert_eq!(strings(&rows, "v"), vec![Some("z".to_string()), Some("z".to_string())]);

    let info = client.execute("DROP TABLE d".into(), None).await?;
    assert_eq!(fetch(&mut client, &info).await?.num_rows(), 0);
    assert!(!server.db.contains_table("d"));
    let s = status_of(query(&mut client, "SELECT * FROM d").await);
    assert!(s.message().contains('d'), "{s}");
    Ok(())
}

/// The server reuses the plans of repeated query texts: a repeated query
/// must still see new rows, and a table dropped, re-created with other
/// columns, replaced by an ingest or shadowed by a view must be resolved
/// afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repeated_queries_follow_data_and_catalog_changes() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    let sql = "SELECT * FROM r";

    update(&mut client, "CREATE TABLE r (a BIGINT NOT NULL)").await?;
    update(&mut client, "INSERT INTO r VALUES (1), (2)").await?;
    assert_eq!(query(&mut client, sql).await?.num_rows(), 2);
    // GetFlightInfo now, new rows, then DoGet: the ticket reads the new rows.
    let info = client.execute(sql.into(), None).await?;
    update(&mut client, "INSERT INTO r VALUES (3)").await?;
    assert_eq!(fetch(&mut client, &info).await?.num_rows(), 3);

    update(&mut client, "DROP TABLE r").await?;
    let s = status_of(query(&mut client, sql).await);
    assert!(s.message().contains("r"), "{s}");

    update(&mut client, "CREATE TABLE r (b VARCHAR, c INT)").await?;
    update(&mut client, "INSERT INTO r VALUES ('x', 7)").await?;
    let rows = query(&mut client, sql).await?;
    assert_eq!(rows.schema().fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>(), ["b", "c"]);
    assert_eq!(strings(&rows, "b"), vec![Some("x".to_string())]);

    let replace = ingest_command("r", TableNotExistOption::Fail, TableExistsOption::Replace);
    ingest(&mut client, replace, vec![id_name_batch(&[5, 6], &[Some("p"), None], true)]).await?;
    let rows = query(&mut client, sql).await?;
    assert_eq!(rows.schema().field(0).name(), "id");
    assert_eq!(rows.column(0).as_primitive::<Int64Type>().values().to_vec(), vec![5, 6]);

    update(&mut client, "DROP TABLE r").await?;
    update(&mut client, "CREATE VIEW r AS SELECT 42 AS answer").await?;
    let rows = query(&mut client, sql).await?;
    assert_eq!(rows.column(0).as_primitive::<Int64Type>().values().to_vec(), vec![42]);
    Ok(())
}

/// Views are shared by every client and replaced only by views: a
/// `CREATE OR REPLACE VIEW` over a table (or `CREATE OR REPLACE TABLE`
/// over a view) is refused and the table keeps its rows; `DROP VIEW` of a
/// table and `DROP TABLE` of a view are refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn views_replace_only_views() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    let mut other = server.client().await;
    update(&mut client, "CREATE TABLE t (a BIGINT NOT NULL)").await?;
    update(&mut client, "INSERT INTO t VALUES (1), (2), (3)").await?;
    update(&mut client, "CREATE VIEW v AS SELECT a FROM t WHERE a > 1").await?;
    assert_eq!(query(&mut other, "SELECT COUNT(*) FROM v").await?.column(0).as_primitive::<Int64Type>().value(0), 2);

    update(&mut client, "CREATE OR REPLACE VIEW v AS SELECT a FROM t WHERE a > 2").await?;
    assert_eq!(query(&mut other, "SELECT COUNT(*) FROM v").await?.column(0).as_primitive::<Int64Type>().value(0), 1);

    for refused in [
        "CREATE OR REPLACE VIEW t AS SELECT 1 AS a",
        "CREATE OR REPLACE TABLE v AS SELECT 1 AS a",
        "DROP VIEW t",
        "DROP TABLE v",
        "CREATE VIEW t AS SELECT 1 AS a",
        "CREATE TABLE v (a INT)",
    ] {
        let s = status_of(update(&mut client, refused).await);
        assert_ne!(s.code(), tonic::Code::Internal, "{refused}: {s}");
    }
    let rows = query(&mut client, "SELECT a FROM t ORDER BY a").await?;
    assert_eq!(rows.column(0).as_primitive::<Int64Type>().values().to_vec(), vec![1, 2, 3]);
    assert_eq!(query(&mut client, "SELECT COUNT(*) FROM v").await?.column(0).as_primitive::<Int64Type>().value(0), 1);
    assert!(server.db.contains_table("t"));

    update(&mut client, "DROP VIEW v").await?;
    let s = status_of(query(&mut other, "SELECT * FROM v").await);
    assert!(s.message().contains("v"), "{s}");

    // The same in another schema: a table there is not replaced by a view.
    update(&mut client, "CREATE SCHEMA s").await?;
    update(&mut client, "CREATE TABLE s.w AS SELECT 1 AS a").await?;
    let s = status_of(update(&mut client, "CREATE OR REPLACE VIEW s.w AS SELECT 2 AS a").await);
    assert!(s.message().contains("CREATE OR REPLACE cannot make it a view"), "{s}");
    assert_eq!(query(&mut other, "SELECT a FROM s.w").await?.column(0).as_primitive::<Int64Type>().value(0), 1);
    Ok(())
}

/// The service keeps a query's optimized plan between runs when the
/// optimizer's output cannot change: the rows and statistics a run reads
/// are still its own, and stable functions are still evaluated per run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repeated_queries_read_fresh_rows_and_fresh_time() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE r (a BIGINT NOT NULL)").await?;
    update(&mut client, "INSERT INTO r VALUES (1), (2)").await?;
    let queries = [
        ("SELECT COUNT(*) FROM r", [2, 4]),
        ("SELECT MAX(a) FROM r", [2, 9]),
        ("SELECT SUM(a) FROM r WHERE a > 1", [2, 14]),
    ];
    let scalar = |batch: RecordBatch| batch.column(0).as_primitive::<Int64Type>().value(0);
    for (sql, [before, _]) in queries {
        for _ in 0..2 {
            assert_eq!(scalar(query(&mut client, sql).await?), before, "{sql}");
        }
    }
    update(&mut client, "INSERT INTO r VALUES (3), (9)").await?;
    for (sql, [_, after]) in queries {
        assert_eq!(scalar(query(&mut client, sql).await?), after, "{sql}");
    }

    update(&mut client, "CREATE VIEW clock AS SELECT CAST(now() AS BIGINT) AS at").await?;
    for sql in ["SELECT CAST(now() AS BIGINT)", "SELECT at FROM clock"] {
        let first = scalar(query(&mut client, sql).await?);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let second = scalar(query(&mut client, sql).await?);
        assert!(second > first, "{sql}: now() is evaluated per run: {first} then {second}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn execute_update_reports_affected_rows() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    assert_eq!(update(&mut client, "CREATE TABLE u (id BIGINT NOT NULL, v INT, PRIMARY KEY (id))").await?, 0);
    assert!(server.db.contains_table("u"));
    assert_eq!(
        update(&mut client, "INSERT INTO u SELECT value, CAST(value % 10 AS INT) FROM generate_series(1, 100)").await?,
        100
    );
    assert_eq!(update(&mut client, "UPDATE u SET v = -1 WHERE v = 3").await?, 10);
    assert_eq!(update(&mut client, "DELETE FROM u WHERE v = 0").await?, 10);
    assert_eq!(update(&mut client, "DELETE FROM u WHERE v = 0").await?, 0);

    let expected: Vec<(i64, i32)> = (1..=100i64)
        .filter(|id| id % 10 != 0)
        .map(|id| (id, if id % 10 == 3 { -1 } else { (id % 10) as i32 }))
        .collect();
    let rows = query(&mut client, "SELECT id, v FROM u ORDER BY id").await?;
    let ids = rows.column(0).as_primitive::<Int64Type>().values().to_vec();
    let vs = rows.column(1).as_primitive::<Int32Type>().values().to_vec();
    assert_eq!(ids.into_iter().zip(vs).collect::<Vec<_>>(), expected);

    assert_eq!(update(&mut client, "TRUNCATE u").await?, 90);
    assert_eq!(count_rows(&server.db, "u").await, 0);
    assert_eq!(update(&mut client, "DROP TABLE u").await?, 0);
    assert!(!server.db.contains_table("u"));
    Ok(())
}

/// DELETE and UPDATE change exactly the rows their WHERE names through
/// every Flight SQL path: an update, a statement run at `GetFlightInfo`,
/// and prepared statements with parameters (also the in-process paths:
/// `dml_paths.rs`). Each step is checked against a `Vec` of the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dml_changes_exactly_the_rows_its_where_names_on_every_flight_path() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE d (id BIGINT NOT NULL, v BIGINT NOT NULL, PRIMARY KEY (id))").await?;
    update(&mut client, "INSERT INTO d SELECT value, value * 10 FROM generate_series(1, 12)").await?;
    let mut expected: Vec<(i64, i64)> = (1..=12).map(|id| (id, id * 10)).collect();
    async fn rows(client: &mut Client) -> Result<Vec<(i64, i64)>, FlightError> {
        let batch = query(client, "SELECT id, v FROM d ORDER BY id").await?;
        let (ids, vs) = (batch.column(0).as_primitive::<Int64Type>(), batch.column(1).as_primitive::<Int64Type>());
        Ok(ids.values().iter().copied().zip(vs.values().iter().copied()).collect())
    }

    // An update (CommandStatementUpdate).
    assert_eq!(update(&mut client, "DELETE FROM d WHERE id = 2").await?, 1);
    expected.retain(|r| r.0 != 2);
    assert_eq!(rows(&mut client).await?, expected);
    assert_eq!(update(&mut client, "DELETE FROM d WHERE 1 = 0").await?, 0);
    assert_eq!(rows(&mut client).await?, expected);

    // A statement run at GetFlightInfo (CommandStatementQuery).
    let info = client.execute("UPDATE d SET v = -1 WHERE id = 3".into(), None).await?;
    assert_eq!(info.total_records, 1);
    expected.iter_mut().filter(|r| r.0 == 3).for_each(|r| r.1 = -1);
    assert_eq!(rows(&mut client).await?, expected);

    // Prepared statements with parameters, one row and several.
    let mut delete = client.prepare("DELETE FROM d WHERE id = $1".into(), None).await?;
    delete.set_parameters(params(Arc::new(Int64Array::from(vec![4]))))?;
    assert_eq!(delete.execute_update().await?, 1);
    expected.retain(|r| r.0 != 4);
    delete.set_parameters(params(Arc::new(Int64Array::from(vec![5, 99, 6]))))?;
    assert_eq!(delete.execute_update().await?, 2);
    expected.retain(|r| r.0 != 5 && r.0 != 6);
    delete.close().await?;
    assert_eq!(rows(&mut client).await?, expected);
    let mut set = client.prepare("UPDATE d SET v = v + 1 WHERE id > $1".into(), None).await?;
    set.set_parameters(params(Arc::new(Int64Array::from(vec![10]))))?;
    assert_eq!(set.execute_update().await?, 2);
    expected.iter_mut().filter(|r| r.0 > 10).for_each(|r| r.1 += 1);
    set.close().await?;
    assert_eq!(rows(&mut client).await?, expected);
    assert_eq!(count_rows(&server.db, "d").await, expected.len() as i64);
    Ok(())
}

/// A statement that writes while it produces rows (`EXPLAIN ANALYZE
/// INSERT`) runs once, when it is planned: fetching its ticket, once or
/// again, returns its result and writes nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ticket_of_a_writing_statement_does_not_write_again() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE w (id BIGINT NOT NULL)").await?;
    let info = client.execute("EXPLAIN ANALYZE INSERT INTO w VALUES (1), (2)".into(), None).await?;
    assert_eq!(count_rows(&server.db, "w").await, 2, "ran once, at GetFlightInfo");
    let first = fetch(&mut client, &info).await?;
    let again = fetch(&mut client, &info).await?;
    assert!(first.num_rows() > 0, "the EXPLAIN ANALYZE output");
    assert_eq!(first, again);
    assert_eq!(count_rows(&server.db, "w").await, 2, "fetching the ticket wrote nothing");
    // Run as an update, it runs once too.
    update(&mut client, "EXPLAIN ANALYZE INSERT INTO w VALUES (3)").await?;
    assert_eq!(count_rows(&server.db, "w").await, 3);
    Ok(())
}

// ---------------------------------------------------------------------------
// Prepared statements
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prepared_query_with_parameters() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE p (a BIGINT NOT NULL, b VARCHAR)").await?;
    update(&mut client, "INSERT INTO p SELECT value, 'v' || CAST(value AS VARCHAR) FROM generate_series(1, 20)")
        .await?;

    let mut statement = client.prepare("SELECT a, b FROM p WHERE a > $1 ORDER BY a".into(), None).await?;
    let expected_schema = local(&server.db, "SELECT a, b FROM p WHERE a > 0 ORDER BY a").await.schema();
    assert_eq!(statement.dataset_schema()?, expected_schema.as_ref());
    let parameters = statement.parameter_schema()?.clone();
    assert_eq!(parameters.fields().len(), 1, "{parameters:?}");
    assert_eq!(parameters.field(0).name(), "$1");
    assert_eq!(parameters.field(0).data_type(), &DataType::Int64, "$1 compares with a BIGINT column");

    statement.set_parameters(params(Arc::new(Int64Array::from(vec![15]))))?;
    let info = statement.execute().await?;
    let rows = fetch(&mut client, &info).await?;
    assert_eq!(rows, local(&server.db, "SELECT a, b FROM p WHERE a > 15 ORDER BY a").await);
    assert_eq!(rows.num_rows(), 5);

    // Several parameter rows: the query runs once per row, results in order.
    statement.set_parameters(params(Arc::new(Int64Array::from(vec![17, 18]))))?;
    let info = statement.execute().await?;
    let rows = fetch(&mut client, &info).await?;
    let first = local(&server.db, "SELECT a, b FROM p WHERE a > 17 ORDER BY a").await;
    let second = local(&server.db, "SELECT a, b FROM p WHERE a > 18 ORDER BY a").await;
    let schema = first.schema();
    assert_eq!(rows, concat_batches(&schema, &[first, second])?);
    assert_eq!(rows.num_rows(), 3 + 2);

    statement.close().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prepared_insert_runs_once_per_parameter_row() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE pi (id BIGINT NOT NULL, name VARCHAR, PRIMARY KEY (id))").await?;

    let mut statement = client.prepare("INSERT INTO pi VALUES ($1, $2)".into(), None).await?;
    let parameters = statement.parameter_schema()?.clone();
    let described: Vec<(&str, &DataType)> =
        parameters.fields().iter().map(|f| (f.name().as_str(), f.data_type())).collect();
    let columns = table_schema(&server.db, "pi").await;
    let expected: Vec<(&str, &DataType)> =
        vec![("$1", columns.field(0).data_type()), ("$2", columns.field(1).data_type())];
    assert_eq!(described, expected, "parameter types follow the table's columns");

    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("$1", DataType::Int64, true), Field::new("$2", DataType::Utf8, true)])),
        vec![
            Arc::new(Int64Array::from(vec![7, 8, 9])),
            Arc::new(StringArray::from(vec![Some("seven"), None, Some("nine")])),
        ],
    )?;
    statement.set_parameters(batch)?;
    assert_eq!(statement.execute_update().await?, 3);
    statement.close().await?;

    let rows = query(&mut client, "SELECT id, name FROM pi ORDER BY id").await?;
    assert_eq!(rows.column(0).as_primitive::<Int64Type>().values().to_vec(), vec![7, 8, 9]);
    assert_eq!(strings(&rows, "name"), vec![Some("seven".into()), None, Some("nine".into())]);
    Ok(())
}

/// An INSERT of a `VALUES` list run with many parameter rows binds them all
/// into one list (planned once): 20,000 rows with NULLs, expressions over
/// the parameters and two list rows per parameter row arrive exactly as a
/// reference map says; a value that does not convert exactly to its
/// column's type (1.5 for a BIGINT) is refused and inserts nothing; a
/// placeholder outside the list (`INSERT … SELECT $1`) still binds row by row.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_prepared_insert_with_many_rows_binds_them_into_one_list() -> TestResult {
    use std::collections::BTreeMap;

    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE pl (id BIGINT NOT NULL, name VARCHAR, twice BIGINT, PRIMARY KEY (id))").await?;
    let n = 20_000i64;
    let ids: Vec<i64> = (0..n).map(|i| i * 2).collect();
    let names: Vec<Option<String>> = (0..n).map(|i| (i % 5 != 0).then(|| format!("n{i}"))).collect();
    let schema =
        Arc::new(Schema::new(vec![Field::new("$1", DataType::Int64, true), Field::new("$2", DataType::Utf8, true)]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![Arc::new(Int64Array::from(ids.clone())), Arc::new(StringArray::from(names.clone()))],
    )?;
    let mut insert =
        client.prepare("INSERT INTO pl VALUES ($1, $2 || '!', $1 * 2), ($1 + 1, 'odd', NULL)".into(), None).await?;
    insert.set_parameters(batch)?;
    assert_eq!(insert.execute_update().await?, 2 * n);
    insert.close().await?;

    let mut expected = BTreeMap::new();
    for (id, name) in ids.iter().zip(&names) {
        expected.insert(*id, (name.as_ref().map(|s| format!("{s}!")), Some(id * 2)));
        expected.insert(id + 1, (Some("odd".to_string()), None));
    }
    let rows = query(&mut client, "SELECT id, name, twice FROM pl ORDER BY id").await?;
    let got: BTreeMap<i64, (Option<String>, Option<i64>)> = rows
        .column(0)
        .as_primitive::<Int64Type>()
        .values()
        .iter()
        .zip(strings(&rows, "name"))
        .zip(rows.column(2).as_primitive::<Int64Type>().iter())
        .map(|((id, name), twice)| (*id, (name, twice)))
        .collect();
    assert_eq!(got, expected);

    // A lossy value: refused, naming the parameter; nothing inserted.
    let mut lossy = client.prepare("INSERT INTO pl (id) VALUES ($1)".into(), None).await?;
    let floats = Arc::new(Schema::new(vec![Field::new("$1", DataType::Float64, true)]));
    let values: ArrayRef = Arc::new(Float64Array::from(vec![1_000_001.0, 1_000_003.5]));
    lossy.set_parameters(RecordBatch::try_new(floats, vec![values])?)?;
    let s = status_of(lossy.execute_update().await);
    assert_eq!(s.code(), Code::InvalidArgument, "{s}");
    assert!(s.message().contains("$1"), "{s}");
    assert_eq!(count_rows(&server.db, "pl").await, 2 * n);
    lossy.close().await?;

    // A placeholder outside a VALUES list: bound row by row, same result.
    let mut select =
        client.prepare("INSERT INTO pl SELECT $1 AS id, 'selected' AS name, $1 AS twice".into(), None).await?;
    select.set_parameters(params(Arc::new(Int64Array::from(vec![-1, -3]))))?;
    assert_eq!(select.execute_update().await?, 2);
    select.close().await?;
    let picked = query(&mut client, "SELECT id, twice FROM pl WHERE name = 'selected' ORDER BY id").await?;
    assert_eq!(picked.column(0).as_primitive::<Int64Type>().values().to_vec(), vec![-3, -1]);
    assert_eq!(picked.column(1).as_primitive::<Int64Type>().values().to_vec(), vec![-3, -1]);
    Ok(())
}

/// Parameter rows count against the memory limit: 100,000 rows bound to
/// an INSERT on a server limited to 8 MiB are refused with
/// `ResourceExhausted` before anything is bound, and nothing is inserted;
/// 1,000 rows fit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parameter_rows_count_against_the_memory_limit() -> TestResult {
    let session = quiverdb::SessionOptions { memory_limit: Some(8 << 20), ..Default::default() };
    let server = TestServer::start(FlightOptions { session, ..FlightOptions::default() }).await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE pb (id BIGINT NOT NULL, PRIMARY KEY (id))").await?;
    let mut insert = client.prepare("INSERT INTO pb VALUES ($1)".into(), None).await?;
    insert.set_parameters(params(Arc::new(Int64Array::from_iter_values(0..100_000))))?;
    let s = status_of(insert.execute_update().await);
    assert_eq!(s.code(), Code::ResourceExhausted, "{s}");
    assert_eq!(count_rows(&server.db, "pb").await, 0);
    insert.set_parameters(params(Arc::new(Int64Array::from_iter_values(0..1_000))))?;
    assert_eq!(insert.execute_update().await?, 1_000);
    insert.close().await?;
    Ok(())
}

/// A DELETE run with many parameter rows binds them into one WHERE: 10,000
/// keys (an IN list) and 2,000 pairs (`id = $1 AND name = $2`, joined by
/// OR) delete exactly the rows a reference set says, in one transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_prepared_delete_with_many_rows_binds_them_into_one_where() -> TestResult {
    use std::collections::BTreeSet;

    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE pd (id BIGINT NOT NULL, name VARCHAR, PRIMARY KEY (id))").await?;
    update(
        &mut client,
        "INSERT INTO pd SELECT value, 'n' || CAST(value % 3 AS VARCHAR) FROM generate_series(0, 29999)",
    )
    .await?;
    let mut left: BTreeSet<i64> = (0..30_000).collect();

    let keys: Vec<i64> = (0..10_000).map(|i| i * 3 + 1).chain([-5, 1, 99_999]).collect();
    let mut delete = client.prepare("DELETE FROM pd WHERE id = $1".into(), None).await?;
    delete.set_parameters(params(Arc::new(Int64Array::from(keys.clone()))))?;
    let removed = keys.iter().filter(|k| left.remove(k)).count();
    assert_eq!(delete.execute_update().await?, removed as i64);
    delete.close().await?;

    // Pairs: only those whose name matches the row's are deleted.
    let ids: Vec<i64> = (0..2_000).map(|i| i * 5).collect();
    let names: Vec<String> = ids.iter().map(|i| format!("n{}", (i / 5) % 3)).collect();
    let schema =
        Arc::new(Schema::new(vec![Field::new("$1", DataType::Int64, true), Field::new("$2", DataType::Utf8, true)]));
    let pairs = RecordBatch::try_new(
        schema,
        vec![Arc::new(Int64Array::from(ids.clone())), Arc::new(StringArray::from(names.clone()))],
    )?;
    let mut delete = client.prepare("DELETE FROM pd WHERE id = $1 AND name = $2".into(), None).await?;
    delete.set_parameters(pairs)?;
    let removed =
        ids.iter().zip(&names).filter(|(id, name)| **name == format!("n{}", *id % 3) && left.remove(id)).count();
    assert_eq!(delete.execute_update().await?, removed as i64);
    delete.close().await?;

    let rows = query(&mut client, "SELECT id FROM pd ORDER BY id").await?;
    let got: BTreeSet<i64> = rows.column(0).as_primitive::<Int64Type>().values().iter().copied().collect();
    assert_eq!(got, left);
    Ok(())
}

/// One update with many parameter rows is one transaction: an INSERT whose
/// third row repeats a key commits none of its rows; a DELETE removes the
/// rows of every parameter row at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_prepared_update_with_many_rows_is_one_transaction() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE pm (id BIGINT NOT NULL, name VARCHAR, PRIMARY KEY (id))").await?;
    update(&mut client, "INSERT INTO pm VALUES (1, 'one')").await?;
    let rows = |ids: Vec<i64>| {
        let names: Vec<String> = ids.iter().map(|i| format!("n{i}")).collect();
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("$1", DataType::Int64, true),
                Field::new("$2", DataType::Utf8, true),
            ])),
            vec![Arc::new(Int64Array::from(ids)), Arc::new(StringArray::from(names))],
        )
    };

    let mut insert = client.prepare("INSERT INTO pm VALUES ($1, $2)".into(), None).await?;
    insert.set_parameters(rows(vec![2, 3, 1, 4])?)?;
    let s = status_of(insert.execute_update().await);
    assert_eq!(s.code(), Code::AlreadyExists, "{s}");
    assert_eq!(count_rows(&server.db, "pm").await, 1, "rows before the duplicate were committed");
    insert.set_parameters(rows(vec![2, 3, 4])?)?;
    assert_eq!(insert.execute_update().await?, 3);
    insert.close().await?;

    let mut delete = client.prepare("DELETE FROM pm WHERE id = $1".into(), None).await?;
    delete.set_parameters(params(Arc::new(Int64Array::from(vec![2, 9, 4, 2]))))?;
    assert_eq!(delete.execute_update().await?, 2);
    delete.close().await?;
    let left = query(&mut client, "SELECT id FROM pm ORDER BY id").await?;
    assert_eq!(left.column(0).as_primitive::<Int64Type>().values().to_vec(), vec![1, 3]);
    Ok(())
}

/// An UPDATE with many parameter rows applies them in order, each seeing
/// the rows as the ones before it left them, in one transaction: its
/// result and its count are those of running the rows one by one (checked
/// against a Vec), and a row that fails (a division by zero, a duplicate
/// key) leaves the table as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_prepared_update_with_many_rows_runs_them_in_order_as_one_transaction() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE um (id BIGINT NOT NULL, v BIGINT NOT NULL, w BIGINT, PRIMARY KEY (id))").await?;
    update(&mut client, "INSERT INTO um SELECT value, value % 7, NULL FROM generate_series(1, 50)").await?;
    // (id, v, w), as the table holds them.
    let mut reference: Vec<(i64, i64, Option<i64>)> = (1..=50).map(|i| (i, i % 7, None)).collect();
    async fn contents(client: &mut Client) -> Result<Vec<(i64, i64, Option<i64>)>, FlightError> {
        let rows = query(client, "SELECT id, v, w FROM um ORDER BY id").await?;
        let (id, v, w) = (
            rows.column(0).as_primitive::<Int64Type>(),
            rows.column(1).as_primitive::<Int64Type>(),
            rows.column(2).as_primitive::<Int64Type>(),
        );
        Ok((0..rows.num_rows()).map(|i| (id.value(i), v.value(i), w.is_valid(i).then(|| w.value(i)))).collect())
    }
    fn int_params(columns: Vec<Vec<i64>>) -> RecordBatch {
        let fields: Vec<Field> =
            (1..=columns.len()).map(|i| Field::new(format!("${i}"), DataType::Int64, true)).collect();
        let arrays: Vec<ArrayRef> = columns.into_iter().map(|c| Arc::new(Int64Array::from(c)) as ArrayRef).collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).expect("parameter batch")
    }

    // Each row's WHERE reads what the rows before it SET.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n) as i64
    };
    let (mut add, mut at_least, mut every) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..40 {
        add.push(next(7) - 3);
        at_least.push(next(9) - 1);
        every.push(next(4) + 1);
    }
    let mut expected_count = 0;
    for ((&a, &l), &e) in add.iter().zip(&at_least).zip(&every) {
        for row in reference.iter_mut().filter(|(id, v, _)| *v >= l && id % e == 0) {
            row.1 += a;
            row.2 = Some(row.0);
            expected_count += 1;
        }
    }
    let mut statement =
        client.prepare("UPDATE um SET v = v + $1, w = id WHERE v >= $2 AND id % $3 = 0".into(), None).await?;
    statement.set_parameters(int_params(vec![add, at_least, every]))?;
    assert_eq!(statement.execute_update().await?, expected_count);
    statement.close().await?;
    assert_eq!(contents(&mut client).await?, reference);

    // A failing row leaves every row as it was.
    let before = contents(&mut client).await?;
    for (sql, columns, code) in [
        ("UPDATE um SET v = v / $1 WHERE id = $2", vec![vec![2, 0], vec![5, 7]], Code::InvalidArgument),
        ("UPDATE um SET id = $1 WHERE id = $2", vec![vec![100, 2], vec![1, 3]], Code::AlreadyExists),
    ] {
        let mut statement = client.prepare(sql.into(), None).await?;
        statement.set_parameters(int_params(columns))?;
        let s = status_of(statement.execute_update().await);
        assert_eq!(s.code(), code, "{sql}: {s}");
        statement.close().await?;
        assert_eq!(contents(&mut client).await?, before, "{sql}");
    }

    // Keys may pass through each other's values on the way: 1 and 2 swap.
    let mut swap = client.prepare("UPDATE um SET id = $1 WHERE id = $2".into(), None).await?;
    swap.set_parameters(int_params(vec![vec![1000, 1, 2], vec![1, 2, 1000]]))?;
    assert_eq!(swap.execute_update().await?, 3);
    swap.close().await?;
    let mut swapped = before.clone();
    swapped[0].0 = 2;
    swapped[1].0 = 1;
    swapped.sort();
    assert_eq!(contents(&mut client).await?, swapped);
    Ok(())
}

/// A prepared update sent with an empty parameter batch (no columns)
/// runs once, without parameters, not once per row: the JDBC driver sends
/// its updates that way (tests/jdbc.rs runs the driver itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prepared_update_with_an_empty_parameter_batch_runs_once() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    let empty = RecordBatch::new_empty(Arc::new(Schema::empty()));
    for sql in ["CREATE TABLE pe (id BIGINT NOT NULL, name VARCHAR)", "INSERT INTO pe VALUES (1, 'one'), (2, NULL)"] {
        let mut statement = client.prepare(sql.into(), None).await?;
        statement.set_parameters(empty.clone())?;
        statement.execute_update().await?;
        statement.close().await?;
    }
    assert_eq!(count_rows(&server.db, "pe").await, 2);
    Ok(())
}

/// A prepared statement's parameters bind exactly: a value that its
/// placeholder's type cannot hold without loss (1.5 for a BIGINT), or a
/// parameter row with more or fewer values than placeholders, is an error,
/// never a silently changed statement; an untyped `SELECT $1` takes any
/// type and returns the value as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prepared_parameters_bind_exactly_or_fail() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE q (a BIGINT NOT NULL)").await?;
    update(&mut client, "INSERT INTO q VALUES (1), (2)").await?;
    async fn run(client: &mut Client, sql: &str, parameters: RecordBatch) -> Result<RecordBatch, FlightError> {
        let mut statement = client.prepare(sql.into(), None).await?;
        statement.set_parameters(parameters)?;
        let result = match statement.execute().await {
            Ok(info) => fetch(client, &info).await,
            Err(e) => Err(e),
        };
        statement.close().await?;
        result
    }

    // A value that fits its placeholder's type binds.
    let rows =
        run(&mut client, "SELECT a FROM q WHERE a = $1", params(Arc::new(Float64Array::from(vec![2.0])))).await?;
    assert_eq!(rows.column(0).as_primitive::<Int64Type>().values().to_vec(), vec![2]);
    // One that does not is refused: it would have matched a = 1.
    let s = status_of(
        run(&mut client, "SELECT a FROM q WHERE a = $1", params(Arc::new(Float64Array::from(vec![1.5])))).await,
    );
    assert_eq!(s.code(), Code::InvalidArgument, "{s}");
    assert!(s.message().contains("$1") && s.message().contains("1.5"), "{s}");

    // Too many or too few values for the placeholders.
    let two = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("$1", DataType::Int64, true), Field::new("$2", DataType::Int64, true)])),
        vec![Arc::new(Int64Array::from(vec![1])), Arc::new(Int64Array::from(vec![2]))],
    )?;
    let s = status_of(run(&mut client, "SELECT a FROM q WHERE a = $1", two).await);
    assert_eq!(s.code(), Code::InvalidArgument, "{s}");
    assert!(s.message().contains("2 parameter") && s.message().contains("1 placeholder"), "{s}");
    let s = status_of(
        run(&mut client, "SELECT a FROM q WHERE a = $1 OR a = $2", params(Arc::new(Int64Array::from(vec![1])))).await,
    );
    assert_eq!(s.code(), Code::InvalidArgument, "{s}");

    // `SELECT $1` returns what was sent, whatever its type.
    let values: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![-7])),
        Arc::new(arrow_array::Int8Array::from(vec![-8])),
        Arc::new(arrow_array::UInt64Array::from(vec![u64::MAX])),
        Arc::new(Float64Array::from(vec![0.1])),
        Arc::new(arrow_array::Float32Array::from(vec![1.25f32])),
        Arc::new(StringArray::from(vec!["text"])),
        Arc::new(BinaryArray::from(vec![&b"\x00\xff"[..]])),
        Arc::new(arrow_array::BooleanArray::from(vec![true])),
        Arc::new(arrow_array::Date32Array::from(vec![19_000])),
        Arc::new(arrow_array::TimestampMicrosecondArray::from(vec![1_700_000_000_000_000])),
        Arc::new(arrow_array::Decimal128Array::from(vec![12_345]).with_precision_and_scale(10, 3)?),
    ];
    for value in values {
        let rows = run(&mut client, "SELECT $1 AS v", params(Arc::clone(&value))).await?;
        assert_eq!(rows.column(0).data_type(), value.data_type(), "SELECT $1 of {}", value.data_type());
        assert_eq!(rows.column(0).as_ref(), value.as_ref(), "SELECT $1 of {}", value.data_type());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prepared_parameter_of_the_wrong_type_is_invalid_argument() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE p (a BIGINT NOT NULL, b VARCHAR)").await?;
    update(&mut client, "INSERT INTO p VALUES (1, 'one'), (2, 'two')").await?;

    let wrong: [ArrayRef; 2] =
        [Arc::new(BinaryArray::from(vec![&b"\x01\x02"[..]])), Arc::new(StringArray::from(vec!["not a number"]))];
    for column in wrong {
        let data_type = column.data_type().clone();
        let mut statement = client.prepare("SELECT a, b FROM p WHERE a > $1".into(), None).await?;
        statement.set_parameters(params(column))?;
        // The error may come with the FlightInfo or with the data; it must come.
        let result = match statement.execute().await {
            Ok(info) => fetch(&mut client, &info).await,
            Err(e) => Err(e),
        };
        let s = status_of(result);
        assert_eq!(s.code(), Code::InvalidArgument, "{data_type}: {s}");
        assert!(s.message().contains("$1"), "the message names the parameter ({data_type}): {s}");
    }
    // The server still works.
    assert_eq!(query(&mut client, "SELECT * FROM p").await?.num_rows(), 2);
    Ok(())
}

// ---------------------------------------------------------------------------
// Metadata
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn catalogs_schemas_and_table_types() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;

    let info = client.get_catalogs().await?;
    let catalogs = fetch(&mut client, &info).await?;
    assert_eq!(non_null_strings(&catalogs, "catalog_name"), vec!["quiverdb"]);

    let info = client.get_db_schemas(CommandGetDbSchemas { catalog: None, db_schema_filter_pattern: None }).await?;
    let schemas = fetch(&mut client, &info).await?;
    let mut pairs: Vec<(String, String)> = non_null_strings(&schemas, "catalog_name")
        .into_iter()
        .zip(non_null_strings(&schemas, "db_schema_name"))
        .collect();
    pairs.sort();
    assert_eq!(pairs, vec![("quiverdb".into(), "information_schema".into()), ("quiverdb".into(), "public".into())]);

    let request =
        CommandGetDbSchemas { catalog: Some("quiverdb".into()), db_schema_filter_pattern: Some("pub%".into()) };
    let info = client.get_db_schemas(request).await?;
    assert_eq!(non_null_strings(&fetch(&mut client, &info).await?, "db_schema_name"), vec!["public"]);

    let info = client.get_table_types().await?;
    let mut types = non_null_strings(&fetch(&mut client, &info).await?, "table_type");
    types.sort();
    assert_eq!(types, vec!["TABLE", "VIEW"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn get_tables_filters_and_includes_schemas() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE t1 (id BIGINT NOT NULL, name VARCHAR, PRIMARY KEY (id))").await?;
    update(&mut client, "CREATE TABLE t2 (x DOUBLE, d DATE, ok BOOLEAN)").await?;
    update(&mut client, "CREATE TABLE other (y INT)").await?;

    let request = CommandGetTables {
        catalog: None,
        db_schema_filter_pattern: None,
        table_name_filter_pattern: Some("t%".into()),
        table_types: vec!["TABLE".into()],
        include_schema: true,
    };
    let info = client.get_tables(request).await?;
    let tables = fetch(&mut client, &info).await?;
    let mut found: Vec<(String, String, String, String)> = (0..tables.num_rows())
        .map(|i| {
            (
                non_null_strings(&tables, "catalog_name")[i].clone(),
                non_null_strings(&tables, "db_schema_name")[i].clone(),
                non_null_strings(&tables, "table_name")[i].clone(),
                non_null_strings(&tables, "table_type")[i].clone(),
            )
        })
        .collect();
    found.sort();
    let expected: Vec<(String, String, String, String)> =
        ["t1", "t2"].iter().map(|t| ("quiverdb".into(), "public".into(), t.to_string(), "TABLE".into())).collect();
    assert_eq!(found, expected);

    let names = non_null_strings(&tables, "table_name");
    let ipc = tables.column_by_name("table_schema").expect("a table_schema column").as_binary::<i32>();
    for (i, name) in names.iter().enumerate() {
        let decoded = Schema::try_from(IpcMessage(ipc.value(i).to_vec().into()))?;
        assert_eq!(decoded, *plain_schema(table_schema(&server.db, name).await.as_ref()), "schema of {name}");
    }

    // Without filters: every table.
    let request = CommandGetTables { include_schema: false, ..CommandGetTables::default() };
    let info = client.get_tables(request).await?;
    let all = fetch(&mut client, &info).await?;
    assert!(all.column_by_name("table_schema").is_none(), "no schemas were asked for");
    let rows = table_rows(&all);
    for table in ["t1", "t2", "other"] {
        let row = ("public".to_string(), table.to_string(), "TABLE".to_string());
        assert!(rows.contains(&row), "{table} missing from {rows:?}");
    }
    Ok(())
}

/// `(db_schema_name, table_name, table_type)` of a `GetTables` result.
fn table_rows(batch: &RecordBatch) -> Vec<(String, String, String)> {
    let schemas = non_null_strings(batch, "db_schema_name");
    let names = non_null_strings(batch, "table_name");
    let types = non_null_strings(batch, "table_type");
    schemas.into_iter().zip(names).zip(types).map(|((s, n), t)| (s, n, t)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn get_tables_lists_the_information_schema_views() -> TestResult {
    // GetDbSchemas reports `information_schema` and GetTableTypes `VIEW`:
    // GetTables lists that schema's views, as SQL sees them.
    let server = TestServer::open().await;
    let mut client = server.client().await;
    let expected = local(
        &server.db,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'information_schema' ORDER BY table_name",
    )
    .await;
    let mut expected: Vec<(String, String, String)> = non_null_strings(&expected, "table_name")
        .into_iter()
        .map(|name| ("information_schema".to_string(), name, "VIEW".to_string()))
        .collect();
    expected.sort();
    assert!(expected.iter().any(|(_, name, _)| name == "tables"), "{expected:?}");

    let request = CommandGetTables {
        db_schema_filter_pattern: Some("information_schema".into()),
        table_types: vec!["VIEW".into()],
        ..CommandGetTables::default()
    };
    let info = client.get_tables(request).await?;
    let mut rows = table_rows(&fetch(&mut client, &info).await?);
    rows.sort();
    assert_eq!(rows, expected);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sql_info_and_xdbc_type_info() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;

    let info = client.get_sql_info(vec![SqlInfo::FlightSqlServerName, SqlInfo::FlightSqlServerReadOnly]).await?;
    let batch = fetch(&mut client, &info).await?;
    assert_eq!(batch.num_rows(), 2);
    let ids = batch.column_by_name("info_name").expect("info_name").as_primitive::<UInt32Type>();
    let values =
        batch.column_by_name("value").expect("value").as_any().downcast_ref::<UnionArray>().expect("a union column");
    for row in 0..batch.num_rows() {
        let value = values.value(row);
        match ids.value(row) {
            id if id == SqlInfo::FlightSqlServerName as u32 => {
                assert_eq!(value.as_string::<i32>().value(0), "quiverdb")
            }
            id if id == SqlInfo::FlightSqlServerReadOnly as u32 => assert!(!value.as_boolean().value(0)),
            other => panic!("SqlInfo {other} was not asked for"),
        }
    }

    let info = client.get_xdbc_type_info(CommandGetXdbcTypeInfo { data_type: None }).await?;
    let types = non_null_strings(&fetch(&mut client, &info).await?, "type_name");
    for expected in ["BOOLEAN", "INTEGER", "BIGINT", "DOUBLE", "DECIMAL", "VARCHAR", "DATE", "TIMESTAMP"] {
        assert!(types.iter().any(|t| t == expected), "{expected} missing from {types:?}");
    }
    let request = CommandGetXdbcTypeInfo { data_type: Some(XdbcDataType::XdbcBigint as i32) };
    let info = client.get_xdbc_type_info(request).await?;
    assert_eq!(non_null_strings(&fetch(&mut client, &info).await?, "type_name"), vec!["BIGINT"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn primary_keys_of_a_composite_key() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE pk (a INT NOT NULL, b VARCHAR NOT NULL, c DOUBLE, PRIMARY KEY (b, a))").await?;
    update(&mut client, "CREATE TABLE nokey (x INT)").await?;

    let request = CommandGetPrimaryKeys { catalog: None, db_schema: None, table: "pk".into() };
    let info = client.get_primary_keys(request).await?;
    let keys = fetch(&mut client, &info).await?;
    assert_eq!(non_null_strings(&keys, "table_name"), vec!["pk", "pk"]);
    assert_eq!(non_null_strings(&keys, "column_name"), vec!["b", "a"]);
    let sequence = keys.column_by_name("key_sequence").expect("key_sequence").as_primitive::<Int32Type>();
    assert_eq!(sequence.values().to_vec(), vec![1, 2]);
    assert_eq!(strings(&keys, "catalog_name"), vec![Some("quiverdb".to_string()); 2]);
    assert_eq!(strings(&keys, "db_schema_name"), vec![Some("public".to_string()); 2]);

    for table in ["nokey", "missing"] {
        let request = CommandGetPrimaryKeys { catalog: None, db_schema: None, table: table.into() };
        let info = client.get_primary_keys(request).await?;
        assert_eq!(fetch(&mut client, &info).await?.num_rows(), 0, "{table}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Ingest
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ingest_create_append_replace() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    use TableExistsOption as Exists;
    use TableNotExistOption as NotExist;

    // Create: the new table has the stream's schema and rows.
    let sent = vec![
        id_name_batch(&[1, 2, 3], &[Some("a"), None, Some("c")], true),
        id_name_batch(&[4, 5], &[Some("d"), Some("e")], true),
    ];
    let n = ingest(&mut client, ingest_command("ing", NotExist::Create, Exists::Fail), sent.clone()).await?;
    assert_eq!(n, 5);
    let schema = table_schema(&server.db, "ing").await;
    let described: Vec<(&str, &DataType)> =
        schema.fields().iter().map(|f| (f.name().as_str(), f.data_type())).collect();
    assert_eq!(described, vec![("id", &DataType::Int64), ("name", &DataType::Utf8)]);
    let rows = local(&server.db, "SELECT id, name FROM ing ORDER BY id").await;
    let expected = concat_batches(&sent[0].schema(), &sent)?;
    assert_eq!(rows.columns(), expected.columns());

    // Append.
    let more = vec![id_name_batch(&[6, 7], &[None, Some("g")], true)];
    assert_eq!(ingest(&mut client, ingest_command("ing", NotExist::Fail, Exists::Append), more).await?, 2);
    assert_eq!(count_rows(&server.db, "ing").await, 7);
    let rows = query(&mut client, "SELECT id FROM ing ORDER BY id").await?;
    assert_eq!(rows.column(0).as_primitive::<Int64Type>().values().to_vec(), (1..=7).collect::<Vec<i64>>());

    // Fail if it exists.
    let again = vec![id_name_batch(&[8], &[Some("h")], true)];
    let s = status_of(ingest(&mut client, ingest_command("ing", NotExist::Create, Exists::Fail), again).await);
    assert_eq!(s.code(), Code::AlreadyExists, "{s}");
    assert_eq!(count_rows(&server.db, "ing").await, 7);

    // Replace, with a different schema.
    let schema2 = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, false),
        Field::new("score", DataType::Float64, true),
    ]));
    let replacement = RecordBatch::try_new(
        Arc::clone(&schema2),
        vec![
            Arc::new(StringArray::from(vec!["w", "x", "y", "z"])),
            Arc::new(Float64Array::from(vec![Some(1.5), None, Some(-2.0), Some(0.0)])),
        ],
    )?;
    let n = ingest(&mut client, ingest_command("ing", NotExist::Create, Exists::Replace), vec![replacement.clone()])
        .await?;
    assert_eq!(n, 4);
    let schema = table_schema(&server.db, "ing").await;
    let described: Vec<(&str, &DataType)> =
        schema.fields().iter().map(|f| (f.name().as_str(), f.data_type())).collect();
    assert_eq!(described, vec![("k", &DataType::Utf8), ("score", &DataType::Float64)]);
    let rows = query(&mut client, "SELECT k, score FROM ing ORDER BY k").await?;
    assert_eq!(rows.columns(), replacement.columns());

    // Append to a missing table.
    let orphan = vec![id_name_batch(&[1], &[Some("x")], true)];
    let s = status_of(ingest(&mut client, ingest_command("nope", NotExist::Fail, Exists::Append), orphan).await);
    assert_eq!(s.code(), Code::NotFound, "{s}");
    assert!(!server.db.contains_table("nope"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ingest_rejects_bad_batches_and_applies_nothing() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE strict (id BIGINT NOT NULL, name VARCHAR NOT NULL, PRIMARY KEY (id))").await?;
    assert_eq!(update(&mut client, "INSERT INTO strict VALUES (1, 'one'), (2, 'two'), (3, 'three')").await?, 3);
    let before = local(&server.db, "SELECT * FROM strict ORDER BY id").await;
    let append = || ingest_command("strict", TableNotExistOption::Fail, TableExistsOption::Append);

    // A column of the wrong type.
    let wrong_type = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Int64, false),
        ])),
        vec![Arc::new(Int64Array::from(vec![10])), Arc::new(Int64Array::from(vec![10]))],
    )?;
    let s = status_of(ingest(&mut client, append(), vec![wrong_type]).await);
    assert_eq!(s.code(), Code::InvalidArgument, "wrong type: {s}");
    assert!(
        s.message().contains("strict") && !s.message().starts_with("External error"),
        "names the table plainly: {s}"
    );

    // A NULL in a NOT NULL column, in the second batch of the request.
    let batches =
        vec![id_name_batch(&[10, 11], &[Some("ten"), Some("eleven")], true), id_name_batch(&[12], &[None], true)];
    let s = status_of(ingest(&mut client, append(), batches).await);
    assert_eq!(s.code(), Code::FailedPrecondition, "NULL in NOT NULL: {s}");

    // A primary key repeated across two batches of one request.
    let batches = vec![
        id_name_batch(&[20, 21], &[Some("a"), Some("b")], false),
        id_name_batch(&[21, 22], &[Some("c"), Some("d")], false),
    ];
    let s = status_of(ingest(&mut client, append(), batches).await);
    assert_eq!(s.code(), Code::AlreadyExists, "duplicate key in the request: {s}");

    // A primary key that is already in the table.
    let batches = vec![id_name_batch(&[30, 1], &[Some("x"), Some("dup")], false)];
    let s = status_of(ingest(&mut client, append(), batches).await);
    assert_eq!(s.code(), Code::AlreadyExists, "duplicate of a stored key: {s}");

    assert_eq!(
        local(&server.db, "SELECT * FROM strict ORDER BY id").await,
        before,
        "a rejected ingest left rows behind"
    );

    // Nullable fields in the stream are fine when they hold no NULLs.
    let good =
        vec![id_name_batch(&[40], &[Some("forty")], true), id_name_batch(&[41, 42], &[Some("a"), Some("b")], true)];
    assert_eq!(ingest(&mut client, append(), good).await?, 3);
    assert_eq!(count_rows(&server.db, "strict").await, 6);
    Ok(())
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_sql_and_unknown_tables() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;

    let sql = "SELEC 1 FROM";
    let parser_error = quiverdb::session_context(&server.db).sql(sql).await.expect_err("bad SQL planned in-process");
    let s = status_of(client.execute(sql.into(), None).await);
    assert_eq!(s.code(), Code::InvalidArgument, "{s}");
    // The parser's own words, without DataFusion's `ParserError("…")` wrapper.
    let parser_message = quiverdb::server::error_message(&parser_error);
    assert!(
        parser_message.starts_with("syntax error at line 1, column 1: expected an SQL statement, found SELEC"),
        "{parser_message}"
    );
    assert_eq!(s.message(), parser_message, "{s:?}");
    assert!(!s.message().contains("ParserError"), "{s:?}");
    let s = status_of(update(&mut client, sql).await);
    assert_eq!(s.code(), Code::InvalidArgument, "{s}");
    let s = status_of(client.prepare(sql.into(), None).await.map(|_| ()));
    assert_eq!(s.code(), Code::InvalidArgument, "{s}");

    let s = status_of(query(&mut client, "SELECT * FROM no_such_table").await);
    assert_eq!(s.code(), Code::NotFound, "{s}");
    assert!(s.message().contains("no_such_table"), "{s}");
    let s = status_of(update(&mut client, "INSERT INTO no_such_table VALUES (1)").await);
    assert_eq!(s.code(), Code::NotFound, "{s}");
    assert!(s.message().contains("no_such_table"), "{s}");
    Ok(())
}

/// Statement errors reach the client with the gRPC code of what went
/// wrong: the client's mistake (which one) or the server's fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn statement_errors_carry_their_kind() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE k (id BIGINT NOT NULL, name VARCHAR, PRIMARY KEY (id))").await?;
    update(&mut client, "INSERT INTO k VALUES (1, 'one'), (2, 'two')").await?;

    let s = status_of(update(&mut client, "CREATE TABLE k (id BIGINT)").await);
    assert_eq!(s.code(), Code::AlreadyExists, "an existing table: {s}");
    let s = status_of(update(&mut client, "INSERT INTO k VALUES (3, 'three'), (1, 'again')").await);
    assert_eq!(s.code(), Code::AlreadyExists, "a duplicate key: {s}");
    assert!(s.message().contains("duplicate primary key"), "{s}");
    let s = status_of(update(&mut client, "UPDATE k SET id = 2 WHERE id = 1").await);
    assert_eq!(s.code(), Code::AlreadyExists, "an update to a taken key: {s}");
    let s = status_of(update(&mut client, "DROP TABLE no_such_table").await);
    assert_eq!(s.code(), Code::NotFound, "dropping a missing table: {s}");
    let s = status_of(query(&mut client, "SELECT no_such_column FROM k").await);
    assert_eq!(s.code(), Code::NotFound, "a missing column: {s}");
    let s = status_of(query(&mut client, "SELECT id / 0 FROM k").await);
    assert_eq!(s.code(), Code::InvalidArgument, "division by zero: {s}");
    // Nothing of the failed statements was applied.
    assert_eq!(count_rows(&server.db, "k").await, 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_tickets_are_invalid_arguments() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;

    // The hand-made encoding is right: a hand-made catalogs ticket works.
    let catalogs = Ticket::new(any_bytes(CommandGetCatalogs::type_url(), &[]));
    let batches: Vec<RecordBatch> = client.do_get(catalogs).await?.try_collect().await?;
    assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 1);

    let tickets = [
        ("random bytes", vec![0xff; 16]),
        (
            "a statement ticket with a garbage handle",
            any_bytes(TicketStatementQuery::type_url(), &proto_field(1, b"\x07garbage")),
        ),
        ("a statement ticket with an empty handle", any_bytes(TicketStatementQuery::type_url(), &[])),
        ("an unknown ticket type", any_bytes("type.googleapis.com/quiverdb.NoSuchTicket", b"x")),
    ];
    for (what, bytes) in tickets {
        let result = match client.do_get(Ticket::new(bytes)).await {
            Ok(stream) => stream.try_collect::<Vec<_>>().await,
            Err(e) => Err(e),
        };
        let s = status_of(result);
        assert_eq!(s.code(), Code::InvalidArgument, "{what}: {s}");
    }
    // Still serving, on the same connection.
    assert_eq!(query(&mut client, "SELECT 1").await?.num_rows(), 1);
    Ok(())
}

/// GetSchema answers for a query, a prepared statement and a metadata
/// command with the schema their results have, and runs nothing: the
/// schema of an INSERT or a DELETE is its count, and the table is as it
/// was.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn get_schema_describes_results_without_running_anything() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE gs (id BIGINT NOT NULL, name VARCHAR, PRIMARY KEY (id))").await?;
    update(&mut client, "INSERT INTO gs VALUES (1, 'one'), (2, NULL)").await?;
    async fn schema_of(client: &mut Client, descriptor: FlightDescriptor) -> Result<Schema, FlightError> {
        let result = client.inner_mut().get_schema(descriptor).await?.into_inner();
        Ok(Schema::try_from(&result)?)
    }
    let statement = |sql: &str| {
        FlightDescriptor::new_cmd(
            CommandStatementQuery { query: sql.into(), transaction_id: None }.as_any().encode_to_vec(),
        )
    };

    for sql in [
        "SELECT id, name FROM gs",
        "SELECT id, 2.5 AS x FROM gs UNION ALL SELECT 7, 1",
        "SELECT COUNT(*) AS n, MAX(name) AS top FROM gs",
    ] {
        let described = schema_of(&mut client, statement(sql)).await?;
        let info = client.execute(sql.into(), None).await?;
        assert_eq!(described, info.clone().try_decode_schema()?, "{sql}: GetSchema and GetFlightInfo agree");
        assert_eq!(&described, fetch(&mut client, &info).await?.schema().as_ref(), "{sql}: and the rows agree");
    }

    let count = Schema::new(vec![Field::new("count", DataType::UInt64, false)]);
    for sql in ["INSERT INTO gs VALUES (3, 'three')", "DELETE FROM gs", "UPDATE gs SET name = 'x'"] {
        assert_eq!(schema_of(&mut client, statement(sql)).await?, count, "{sql}");
    }
    assert_eq!(schema_of(&mut client, statement("CREATE TABLE nothing (a INT)")).await?, Schema::empty());
    assert!(!server.db.contains_table("nothing"), "GetSchema created a table");
    let rows = query(&mut client, "SELECT id, name FROM gs ORDER BY id").await?;
    assert_eq!(rows.column(0).as_primitive::<Int64Type>().values().to_vec(), vec![1, 2]);
    assert_eq!(strings(&rows, "name"), vec![Some("one".into()), None]);

    let mut prepared = client.prepare("SELECT name, id + $1 AS later FROM gs WHERE id = $1".into(), None).await?;
    prepared.set_parameters(params(Arc::new(Int64Array::from(vec![2]))))?;
    let info = prepared.execute().await?;
    let descriptor = info.flight_descriptor.clone().expect("the prepared statement's descriptor");
    assert_eq!(schema_of(&mut client, descriptor).await?, info.clone().try_decode_schema()?);
    prepared.close().await?;

    let tables = CommandGetTables { include_schema: true, ..CommandGetTables::default() };
    let descriptor = FlightDescriptor::new_cmd(tables.as_any().encode_to_vec());
    let info = client.inner_mut().get_flight_info(descriptor.clone()).await?.into_inner();
    assert_eq!(schema_of(&mut client, descriptor).await?, info.try_decode_schema()?);

    for (descriptor, code) in [
        (statement("SELECT * FROM missing"), Code::NotFound),
        (statement("SELEKT 1"), Code::InvalidArgument),
        (
            FlightDescriptor::new_cmd(
                CommandStatementUpdate { query: "DELETE FROM gs".into(), transaction_id: None }
                    .as_any()
                    .encode_to_vec(),
            ),
            Code::InvalidArgument,
        ),
        (
            FlightDescriptor::new_cmd(any_bytes("type.googleapis.com/quiverdb.NoSuchCommand", b"x")),
            Code::InvalidArgument,
        ),
    ] {
        let s = status_of(schema_of(&mut client, descriptor).await);
        assert_eq!(s.code(), code, "{s}");
    }
    assert_eq!(count_rows(&server.db, "gs").await, 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unknown_commands_are_errors_not_hangs() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    let descriptor = FlightDescriptor::new_cmd(any_bytes("type.googleapis.com/quiverdb.NoSuchCommand", b"x"));
    let result = tokio::time::timeout(HANG_GUARD, client.inner_mut().get_flight_info(descriptor.clone()))
        .await
        .expect("GetFlightInfo with an unknown command hung");
    let s = result.expect_err("an unknown command succeeded");
    assert_ne!(s.code(), Code::Ok);

    // The same command as a DoPut.
    let put = stream::iter([FlightData { flight_descriptor: Some(descriptor), ..FlightData::default() }]);
    let result = tokio::time::timeout(HANG_GUARD, async {
        let mut results = client.inner_mut().do_put(put).await?.into_inner();
        results.message().await
    })
    .await
    .expect("DoPut with an unknown command hung");
    assert!(result.is_err(), "DoPut with an unknown command succeeded: {result:?}");

    // An unknown action.
    let action = Action { r#type: "quiverdb.NoSuchAction".into(), body: Vec::<u8>::new().into() };
    let result = tokio::time::timeout(HANG_GUARD, async {
        let mut results = client.inner_mut().do_action(action).await?.into_inner();
        results.message().await
    })
    .await
    .expect("DoAction with an unknown action hung");
    assert!(result.is_err(), "an unknown action succeeded: {result:?}");

    assert_eq!(query(&mut client, "SELECT 1").await?.num_rows(), 1);
    Ok(())
}

/// A message bound small enough to test cheaply.
const SMALL_MESSAGE_BYTES: usize = 64 << 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_oversized_message_is_rejected_and_the_server_keeps_serving() -> TestResult {
    let server =
        TestServer::start(FlightOptions { max_message_bytes: SMALL_MESSAGE_BYTES, ..FlightOptions::default() }).await;
    let mut client = server.client().await;
    // 131,072 BIGINTs: 1 MiB in one message (the client splits at 2 MiB).
    let values: Vec<i64> = (0..131_072).collect();
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values))])?;
    let command = ingest_command("huge", TableNotExistOption::Create, TableExistsOption::Fail);
    let result = tokio::time::timeout(HANG_GUARD, ingest(&mut client, command, vec![batch]))
        .await
        .expect("an oversized ingest hung");
    let s = status_of(result);
    assert!(matches!(s.code(), Code::ResourceExhausted | Code::OutOfRange), "{s}");
    assert!(!server.db.contains_table("huge"), "the oversized ingest created its table");

    // Still serving: small requests work, on the same client and a new one.
    assert_eq!(query(&mut client, "SELECT 1").await?.num_rows(), 1);
    let mut fresh = server.client().await;
    let small = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)])),
        vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
    )?;
    let command = ingest_command("huge", TableNotExistOption::Create, TableExistsOption::Fail);
    assert_eq!(ingest(&mut fresh, command, vec![small]).await?, 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_query_over_the_memory_limit_fails_and_the_server_keeps_serving() -> TestResult {
    let session = quiverdb::SessionOptions { memory_limit: Some(1 << 20), ..quiverdb::SessionOptions::default() };
    let server = TestServer::start(FlightOptions { session, ..FlightOptions::default() }).await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE big (id BIGINT NOT NULL, s VARCHAR)").await?;
    // An INSERT holds its rows until it commits: 200,000 rows (~5 MB) are
    // more than the pool, 20,000 at a time are not.
    let all = "INSERT INTO big SELECT value, 'row ' || CAST(value AS VARCHAR) FROM generate_series(1, 200000)";
    let s = status_of(update(&mut client, all).await);
    assert_eq!(s.code(), Code::ResourceExhausted, "{s}");
    assert!(s.message().to_lowercase().contains("memory"), "{s}");
    let n = query(&mut client, "SELECT COUNT(*) FROM big").await?;
    assert_eq!(n.column(0).as_primitive::<Int64Type>().value(0), 0, "nothing of the failed INSERT");
    for first in (1..200_000).step_by(20_000) {
        let sql = format!(
            "INSERT INTO big SELECT value, 'row ' || CAST(value AS VARCHAR) FROM generate_series({first}, {})",
            first + 19_999
        );
        assert_eq!(update(&mut client, &sql).await?, 20_000);
    }
    // CREATE TABLE … AS holds its result until the table is created; a
    // failed CREATE OR REPLACE leaves the table it would replace.
    let s = status_of(update(&mut client, "CREATE TABLE copy AS SELECT * FROM big").await);
    assert_eq!(s.code(), Code::ResourceExhausted, "{s}");
    let s = status_of(update(&mut client, "CREATE OR REPLACE TABLE big AS SELECT a.* FROM big a, big b").await);
    assert_eq!(s.code(), Code::ResourceExhausted, "{s}");
    let tables = query(&mut client, "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'copy'").await?;
    assert_eq!(tables.column(0).as_primitive::<Int64Type>().value(0), 0, "no half-made table");
    // A full sort of ~5 MB needs more than the 1 MiB pool and may not spill.
    let s = status_of(query(&mut client, "SELECT * FROM big ORDER BY s DESC").await);
    assert_eq!(s.code(), Code::ResourceExhausted, "{s}");
    // "Not enough memory …" or "Memory Exhausted while Sorting …", as the
    // sort finds out first.
    assert!(s.message().to_lowercase().contains("memory"), "{s}");
    assert!(!s.message().contains("Resources exhausted"), "the message keeps DataFusion's wrapper: {s}");
    // Streaming queries and pushed-down aggregates need no pool memory.
    assert_eq!(query(&mut client, "SELECT * FROM big").await?.num_rows(), 200_000);
    let n = query(&mut client, "SELECT COUNT(*) FROM big WHERE id > 100000").await?;
    assert_eq!(n.column(0).as_primitive::<Int64Type>().value(0), 100_000);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_result_larger_than_the_message_bound_still_streams() -> TestResult {
    let server =
        TestServer::start(FlightOptions { max_message_bytes: SMALL_MESSAGE_BYTES, ..FlightOptions::default() }).await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE wide (id BIGINT NOT NULL, s VARCHAR)").await?;
    let n = update(&mut client, "INSERT INTO wide SELECT value, repeat('x', CAST(value % 50 AS INT)) || CAST(value AS VARCHAR) FROM generate_series(1, 50000)").await?;
    assert_eq!(n, 50_000);

    // Fixed-width columns first, then with the VARCHAR column (stored as
    // `Utf8View`, sent as `Utf8`).
    for sql in ["SELECT id, id * 2 AS twice FROM wide ORDER BY id", "SELECT * FROM wide ORDER BY id"] {
        let info = client.execute(sql.into(), None).await?;
        let schema = Arc::new(info.clone().try_decode_schema()?);
        let messages = raw_do_get(&mut client, only_ticket(&info)).await.map_err(|e| format!("{sql}: {e}"))?;
        let total: usize = messages.iter().map(|m| m.data_body.len()).sum();
        assert!(total > 10 * SMALL_MESSAGE_BYTES, "{sql}: the result ({total} bytes) should dwarf the bound");
        for (i, m) in messages.iter().enumerate() {
            let size = m.data_header.len() + m.data_body.len() + m.app_metadata.len();
            assert!(
                size <= SMALL_MESSAGE_BYTES,
                "{sql}: message {i} has {size} bytes, over the {SMALL_MESSAGE_BYTES}-byte bound"
            );
        }
        let remote = decode(messages, &schema).await?;
        assert_eq!(remote, local(&server.db, sql).await, "{sql}");
    }
    // And through the Flight SQL client.
    assert_eq!(
        query(&mut client, "SELECT COUNT(*) AS n FROM wide").await?.column(0).as_primitive::<Int64Type>().value(0),
        50_000
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Concurrency and shutdown
// ---------------------------------------------------------------------------

/// Clients of [`concurrent_clients_keep_counts_consistent`].
const WORKERS: i64 = 8;
/// Rounds per client; each inserts 100 rows by SQL and 10 by ingest.
const ROUNDS: i64 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_clients_keep_counts_consistent() -> TestResult {
    let server = TestServer::open().await;
    let mut setup = server.client().await;
    update(&mut setup, "CREATE TABLE c (id BIGINT NOT NULL, worker BIGINT NOT NULL, PRIMARY KEY (id))").await?;

    // Inserts and queries first; deletes once every worker is done inserting.
    let inserted = Arc::new(tokio::sync::Barrier::new(WORKERS as usize));
    let mut tasks = Vec::new();
    for worker in 0..WORKERS {
        let mut client = server.client().await;
        let inserted = Arc::clone(&inserted);
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let base = worker * 1_000_000 + round * 1000;
                let sql = format!("INSERT INTO c SELECT value + {base}, {worker} FROM generate_series(1, 100)");
                assert_eq!(update(&mut client, &sql).await?, 100);

                let schema = Arc::new(Schema::new(vec![
                    Field::new("id", DataType::Int64, false),
                    Field::new("worker", DataType::Int64, false),
                ]));
                let batch = RecordBatch::try_new(
                    schema,
                    vec![
                        Arc::new(Int64Array::from_iter_values((500..510).map(|i| base + i))),
                        Arc::new(Int64Array::from(vec![worker; 10])),
                    ],
                )?;
                let command = ingest_command("c", TableNotExistOption::Fail, TableExistsOption::Append);
                assert_eq!(ingest(&mut client, command, vec![batch]).await?, 10);

                // This worker's rows are all visible to it.
                let own = query(&mut client, &format!("SELECT COUNT(*) AS n FROM c WHERE worker = {worker}")).await?;
                assert_eq!(own.column(0).as_primitive::<Int64Type>().value(0), (round + 1) * 110);
                // Every write is atomic: others' writes appear 10 or 100 rows at a time.
                let all = query(&mut client, "SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS ids FROM c").await?;
                let n = all.column(0).as_primitive::<Int64Type>().value(0);
                assert_eq!(n % 10, 0, "a partial write is visible: {n} rows");
                assert_eq!(all.column(1).as_primitive::<Int64Type>().value(0), n, "duplicate ids");
            }
            tokio::time::timeout(HANG_GUARD, inserted.wait()).await.expect("another worker failed");
            // Ids ending in 0: 10 from each SQL insert, 1 from each ingest.
            let deleted =
                update(&mut client, &format!("DELETE FROM c WHERE worker = {worker} AND id % 10 = 0")).await?;
            assert_eq!(deleted, ROUNDS * 11);
            Ok::<_, FlightError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }

    let per_worker = local(&server.db, "SELECT worker, COUNT(*) AS n FROM c GROUP BY worker ORDER BY worker").await;
    assert_eq!(per_worker.column(0).as_primitive::<Int64Type>().values().to_vec(), (0..WORKERS).collect::<Vec<_>>());
    assert!(per_worker.column(1).as_primitive::<Int64Type>().values().iter().all(|&n| n == ROUNDS * 99));
    let totals = query(&mut setup, "SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS ids FROM c").await?;
    assert_eq!(totals.column(0).as_primitive::<Int64Type>().value(0), WORKERS * ROUNDS * 99);
    assert_eq!(totals.column(1).as_primitive::<Int64Type>().value(0), WORKERS * ROUNDS * 99);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn graceful_shutdown_lets_a_running_stream_finish() -> TestResult {
    let mut server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE big (id BIGINT NOT NULL, s VARCHAR)").await?;
    update(
        &mut client,
        "INSERT INTO big SELECT value, 'row ' || CAST(value AS VARCHAR) FROM generate_series(1, 200000)",
    )
    .await?;
    let sql = "SELECT * FROM big ORDER BY id";
    let expected = local(&server.db, sql).await;

    let info = client.execute(sql.into(), None).await?;
    let schema = Arc::new(info.clone().try_decode_schema()?);
    let mut stream = client.do_get(only_ticket(&info)).await?;
    let first = stream.next().await.expect("the stream ended before its first batch")?;
    assert!(first.num_rows() < expected.num_rows(), "the first batch holds the whole result: nothing is in flight");

    server.trigger_shutdown();
    let mut batches = vec![first];
    while let Some(batch) =
        tokio::time::timeout(HANG_GUARD, stream.try_next()).await.expect("the stream stalled after shutdown")?
    {
        batches.push(batch);
    }
    assert_eq!(concat_batches(&schema, &batches)?, expected);

    let addr = server.addr;
    server.stop().await?;
    let reconnect = Endpoint::from_shared(format!("http://{addr}"))?.connect().await;
    assert!(reconnect.is_err(), "the server still accepts connections after serve returned");
    Ok(())
}

// ---------------------------------------------------------------------------
// Running queries and cancellation
// ---------------------------------------------------------------------------

/// A query that would run for hours: an aggregate over 10^11 generated
/// rows (nothing is sent before it ends).
const ENDLESS: &str = "SELECT COUNT(*) AS n FROM generate_series(1, 100000000000) WHERE value < 0";

/// Waits until nothing but `system.queries` itself is listed there: the
/// query ended on the server. (That it stops using the CPU is checked on
/// a server process, in `hostile.rs`.)
async fn until_nothing_runs(client: &mut Client) -> TestResult {
    let listed = "SELECT COUNT(*) AS n FROM system.queries WHERE sql NOT LIKE '%system.queries%'";
    let wait = async {
        loop {
            let batch = query(client, listed).await?;
            if batch.column(0).as_primitive::<Int64Type>().value(0) == 0 {
                return Ok::<_, FlightError>(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(HANG_GUARD, wait).await.expect("the query is still listed")?;
    Ok(())
}

/// The id `system.queries` shows for the running statement `sql`.
async fn running_id(client: &mut Client, sql: &str) -> Result<i64, FlightError> {
    let find = format!("SELECT id, state FROM system.queries WHERE sql = '{}'", sql.replace('\'', "''"));
    let wait = async {
        loop {
            let batch = query(client, &find).await?;
            if batch.num_rows() == 1 {
                return Ok::<_, FlightError>(batch.column(0).as_primitive::<Int64Type>().value(0));
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(HANG_GUARD, wait).await.expect("the query never showed in system.queries")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_stops_a_running_query_and_its_client_hears_cancelled() -> TestResult {
    let server = TestServer::open().await;
    let mut admin = server.client().await;
    let mut client = server.client().await;
    let info = client.execute(ENDLESS.into(), None).await?;
    let mut stream = client.do_get(only_ticket(&info)).await?;
    let waiting = tokio::spawn(async move { stream.next().await.map(|r| r.map(|b| b.num_rows())) });
    let id = running_id(&mut admin, ENDLESS).await?;
    let listed =
        query(&mut admin, &format!("SELECT client, state, changes_data FROM system.queries WHERE id = {id}")).await?;
    assert_eq!(non_null_strings(&listed, "state"), ["running"]);
    assert!(non_null_strings(&listed, "client")[0].starts_with("127.0.0.1:"));

    assert_eq!(update(&mut admin, &format!("CANCEL {id}")).await?, 0);
    let heard = tokio::time::timeout(HANG_GUARD, waiting).await.expect("the client never heard")?;
    let status = status_of(heard.expect("an error, not the end of the stream"));
    assert_eq!(status.code(), Code::Cancelled, "{status}");
    assert!(status.message().contains(&format!("statement {id} was cancelled")), "{status}");
    until_nothing_runs(&mut admin).await?;

    // What cannot be cancelled says why, whether sent as a statement or
    // prepared (JDBC prepares every statement).
    let gone = status_of(update(&mut admin, &format!("KILL QUERY {id}")).await);
    assert_eq!(gone.code(), Code::NotFound, "{gone}");
    let mut prepared = admin.prepare(format!("CANCEL {id}"), None).await?;
    let gone = status_of(prepared.execute_update().await);
    assert_eq!(gone.code(), Code::NotFound, "{gone}");
    let malformed = status_of(update(&mut admin, "CANCEL the query").await);
    assert_eq!(malformed.code(), Code::InvalidArgument, "{malformed}");
    assert!(malformed.message().contains("system.queries"), "{malformed}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_goes_away_stops_its_query() -> TestResult {
    let server = TestServer::open().await;
    let mut admin = server.client().await;
    let mut client = server.client().await;
    let info = client.execute(ENDLESS.into(), None).await?;
    let stream = client.do_get(only_ticket(&info)).await?;
    running_id(&mut admin, ENDLESS).await?;
    // The client gives up: its call is dropped (a gRPC cancel), then its connection.
    drop((stream, client));
    until_nothing_runs(&mut admin).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_flight_info_stops_the_statement_and_later_fetches() -> TestResult {
    let server = TestServer::open().await;
    let mut admin = server.client().await;
    let mut client = server.client().await;
    let info = client.execute(ENDLESS.into(), None).await?;
    let mut stream = client.do_get(only_ticket(&info)).await?;
    let waiting = tokio::spawn(async move { stream.next().await.map(|r| r.map(|b| b.num_rows())) });
    running_id(&mut admin, ENDLESS).await?;
    // Another run of the same text is another statement: it is not cancelled.
    let other = admin.execute(ENDLESS.into(), None).await?;
    assert_ne!(only_ticket(&other), only_ticket(&info), "each GetFlightInfo hands out its own ticket");

    let request = arrow_flight::CancelFlightInfoRequest { info: Some(info.clone()) };
    let action = Action::new("CancelFlightInfo", request.encode_to_vec());
    let results: Vec<_> = client.do_action(action).await?.try_collect().await?;
    let result = arrow_flight::CancelFlightInfoResult::decode(&*results[0].body)?;
    assert_eq!(result.status, arrow_flight::CancelStatus::Cancelled as i32);
    let heard = tokio::time::timeout(HANG_GUARD, waiting).await.expect("the client never heard")?;
    assert_eq!(status_of(heard.expect("an error")).code(), Code::Cancelled);
    // A fetch of the cancelled ticket fails too.
    let again = client.do_get(only_ticket(&info)).await.map(drop);
    assert_eq!(status_of(again).code(), Code::Cancelled);
    until_nothing_runs(&mut admin).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_cancels_queries_still_running_after_the_grace() -> TestResult {
    let grace = std::time::Duration::from_secs(1);
    let server = TestServer::start(FlightOptions { shutdown_grace: grace, ..FlightOptions::default() }).await;
    let mut client = server.client().await;
    let info = client.execute(ENDLESS.into(), None).await?;
    let mut stream = client.do_get(only_ticket(&info)).await?;
    running_id(&mut server.client().await, ENDLESS).await?;
    let started = std::time::Instant::now();
    let stopping = tokio::spawn(server.stop());
    let heard = tokio::time::timeout(HANG_GUARD, stream.next()).await.expect("the client never heard");
    assert_eq!(status_of(heard.expect("an error")).code(), Code::Cancelled);
    tokio::time::timeout(HANG_GUARD, stopping).await.expect("serve did not return")??;
    assert!(started.elapsed() >= grace, "the query was not given its grace");
    Ok(())
}

// ---------------------------------------------------------------------------
// Sessions
// ---------------------------------------------------------------------------

/// GetFlightInfo of `sql` as a query, sent with `cookie` (if any) on the
/// client's connection; the `set-cookie` header of the response.
async fn raw_statement(client: &mut Client, sql: &str, cookie: Option<&str>) -> Result<Option<String>, tonic::Status> {
    let command = CommandStatementQuery { query: sql.into(), transaction_id: None };
    let mut request = tonic::Request::new(FlightDescriptor::new_cmd(command.as_any().encode_to_vec()));
    if let Some(cookie) = cookie {
        request.metadata_mut().insert("cookie", cookie.parse().expect("an ASCII cookie"));
    }
    let response = client.inner_mut().get_flight_info(request).await?;
    Ok(response.metadata().get("set-cookie").and_then(|v| v.to_str().ok()).map(str::to_string))
}

/// The value column of a `SHOW` result.
async fn show(client: &mut Client, name: &str) -> Result<String, FlightError> {
    let shown = query(client, &format!("SHOW {name}")).await?;
    assert_eq!(shown.num_rows(), 1, "SHOW {name}");
    Ok(cast(shown.column(1), &DataType::Utf8)?.as_string::<i32>().value(0).to_string())
}

/// `SET` gives the client a session of its own (named by the cookie the
/// response sets) and changes nothing for other clients; `SHOW` reads the
/// session's settings and `RESET` restores the server's. A session that
/// was closed, or an id the server never issued, is refused rather than
/// run with other settings than the client chose.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn set_changes_only_the_clients_own_session() -> TestResult {
    let server = TestServer::open().await;
    let mut mine = server.client().await;
    let mut other = server.client().await;
    let type_of = |b: &RecordBatch| b.schema().field(0).data_type().clone();
    // The shared session plans (and caches) this text first.
    assert_eq!(type_of(&query(&mut other, "SELECT 1.5 AS x").await?), DataType::Float64);
    assert_eq!(raw_statement(&mut other, "SELECT 1.5 AS x", None).await?, None, "a query opened a session");

    let set_cookie = raw_statement(&mut mine, "SET datafusion.sql_parser.parse_float_as_decimal = true", None)
        .await?
        .expect("SET answers with a session cookie");
    let cookie = set_cookie.split(';').next().expect("name=value").to_string();
    assert!(cookie.starts_with("arrow_flight_session_id="), "{set_cookie}");
    mine.set_header("cookie", format!("theme=dark; {cookie}"));

    let mine_x = query(&mut mine, "SELECT 1.5 AS x").await?;
    assert_eq!(type_of(&mine_x), DataType::Decimal128(2, 1));
    assert_eq!(cast(mine_x.column(0), &DataType::Utf8)?.as_string::<i32>().value(0), "1.5");
    assert_eq!(type_of(&query(&mut other, "SELECT 1.5 AS x").await?), DataType::Float64);
    assert_eq!(show(&mut mine, "datafusion.sql_parser.parse_float_as_decimal").await?, "true");
    assert_eq!(show(&mut other, "datafusion.sql_parser.parse_float_as_decimal").await?, "false");

    // An update in the session changes it; no new session is opened.
    let shared_zone = show(&mut other, "TIME ZONE").await?;
    update(&mut mine, "SET TIME ZONE = '+08:00'").await?;
    assert_eq!(show(&mut mine, "TIME ZONE").await?, "+08:00");
    assert_eq!(show(&mut other, "TIME ZONE").await?, shared_zone);
    assert_eq!(raw_statement(&mut mine, "SET datafusion.execution.batch_size = 100", Some(&cookie)).await?, None);
    assert_eq!(show(&mut mine, "datafusion.execution.batch_size").await?, "100");

    // RESET restores the server's value of one setting.
    update(&mut mine, "RESET datafusion.sql_parser.parse_float_as_decimal").await?;
    assert_eq!(type_of(&query(&mut mine, "SELECT 1.5 AS x").await?), DataType::Float64);
    assert_eq!(show(&mut mine, "TIME ZONE").await?, "+08:00");

    // Settings a client may not change, and ones that do not exist.
    let s = status_of(update(&mut mine, "SET datafusion.runtime.memory_limit = '100G'").await);
    assert_eq!(s.code(), Code::PermissionDenied, "{s}");
    let s = status_of(update(&mut mine, "SET datafusion.execution.target_partitions = 100000").await);
    assert_eq!(s.code(), Code::InvalidArgument, "{s}");
    assert!(s.message().contains("at most 1024"), "{s}");
    let s = status_of(update(&mut mine, "SET datafusion.no_such_option = 1").await);
    assert_eq!(s.code(), Code::InvalidArgument, "{s}");
    assert!(s.message().contains("no_such_option"), "{s}");
    assert_eq!(show(&mut mine, "datafusion.execution.batch_size").await?, "100");
    // A failed SET opens no session.
    let s = raw_statement(&mut other, "SET datafusion.no_such_option = 1", None).await.expect_err("unknown option");
    assert_eq!(s.code(), Code::InvalidArgument, "{s}");
    let s = status_of(update(&mut other, "BEGIN").await);
    assert_eq!(s.code(), Code::Unimplemented, "{s}");
    assert!(s.message().contains("BEGIN"), "{s}");

    // A client that does not send cookies back keeps its session by its
    // connection; other connections are not affected.
    let mut cookieless = server.client().await;
    update(&mut cookieless, "SET datafusion.sql_parser.parse_float_as_decimal = true").await?;
    assert_eq!(type_of(&query(&mut cookieless, "SELECT 1.5 AS x").await?), DataType::Decimal128(2, 1));
    assert_eq!(show(&mut cookieless, "datafusion.sql_parser.parse_float_as_decimal").await?, "true");
    assert_eq!(type_of(&query(&mut other, "SELECT 1.5 AS x").await?), DataType::Float64);
    let close = Action { r#type: "CloseSession".into(), body: Default::default() };
    cookieless.inner_mut().do_action(tonic::Request::new(close)).await?;
    assert_eq!(type_of(&query(&mut cookieless, "SELECT 1.5 AS x").await?), DataType::Float64);

    // An id the server never issued names no session.
    let mut stranger = server.client().await;
    stranger.set_header("cookie", "arrow_flight_session_id=made-up");
    let s = status_of(query(&mut stranger, "SELECT 1").await);
    assert_eq!(s.code(), Code::FailedPrecondition, "{s}");

    // CloseSession ends it and tells the client to forget the cookie.
    let mut request = tonic::Request::new(Action { r#type: "CloseSession".into(), body: Default::default() });
    request.metadata_mut().insert("cookie", cookie.parse()?);
    let response = mine.inner_mut().do_action(request).await?;
    let cleared = response.metadata().get("set-cookie").map(|v| v.to_str().map(str::to_string)).transpose()?;
    assert_eq!(cleared.as_deref(), Some("arrow_flight_session_id=; Max-Age=0"));
    let results: Vec<arrow_flight::Result> = response.into_inner().try_collect().await?;
    // CloseSessionResult { status: CLOSED }: field 1, varint 1.
    assert_eq!(results.iter().map(|r| r.body.to_vec()).collect::<Vec<_>>(), vec![vec![0x08, 0x01]]);
    let s = status_of(query(&mut mine, "SELECT 1").await);
    assert_eq!(s.code(), Code::FailedPrecondition, "{s}");
    assert!(s.message().contains("session ended"), "{s}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_past_the_table_memory_limit_are_refused_and_apply_nothing() -> TestResult {
    let session = quiverdb::SessionOptions { max_table_memory: Some(4 << 20), ..quiverdb::SessionOptions::default() };
    let server = TestServer::start(FlightOptions { session, ..FlightOptions::default() }).await;
    let mut client = server.client().await;
    let reader = server.client().await;
    let count = |sql: &'static str| {
        let mut c = reader.clone();
        async move {
            let n = query(&mut c, sql).await?.column(0).as_primitive::<Int64Type>().value(0);
            Ok::<i64, Box<dyn std::error::Error + Send + Sync>>(n)
        }
    };
    update(&mut client, "CREATE TABLE t (id BIGINT NOT NULL, s VARCHAR)").await?;
    let small = "INSERT INTO t SELECT value, 'row ' || CAST(value AS VARCHAR) FROM generate_series(1, 10000)";
    assert_eq!(update(&mut client, small).await?, 10_000);
    // ~8 MB of rows: past the 4 MiB bound, refused as a whole.
    let big = "INSERT INTO t SELECT value, 'a longer row ' || CAST(value AS VARCHAR) FROM generate_series(1, 300000)";
    let s = status_of(update(&mut client, big).await);
    assert_eq!(s.code(), Code::ResourceExhausted, "{s}");
    assert!(s.message().contains("--max-table-memory"), "{s}");
    assert_eq!(count("SELECT COUNT(*) FROM t").await?, 10_000, "nothing of the refused INSERT");
    let s = status_of(
        update(&mut client, "CREATE TABLE u AS SELECT * FROM t, (SELECT 1 FROM generate_series(1, 50))").await,
    );
    assert_eq!(s.code(), Code::ResourceExhausted, "{s}");
    assert_eq!(count("SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'u'").await?, 0);
    // A bulk ingest past the bound: refused before any row is stored.
    let rows = 300_000;
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)])),
        vec![Arc::new(Int64Array::from_iter_values(0..rows))],
    )?;
    let command = ingest_command("v", TableNotExistOption::Create, TableExistsOption::Fail);
    let s = status_of(ingest(&mut client, command, vec![batch.clone()]).await);
    assert_eq!(s.code(), Code::ResourceExhausted, "{s}");
    assert_eq!(count("SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'v'").await?, 0);
    // Reads, deletes and drops keep working; room made is room to write.
    assert_eq!(count("SELECT COUNT(*) FROM t WHERE id > 5000").await?, 5_000);
    update(&mut client, "DROP TABLE t").await?;
    let command = ingest_command("v", TableNotExistOption::Create, TableExistsOption::Fail);
    assert_eq!(ingest(&mut client, command, vec![batch.slice(0, 100_000)]).await?, 100_000);
    Ok(())
}

/// Guessing passwords on one connection: after five failed handshakes the
/// client's address waits, and even the right password is refused until
/// then (3,000 wrong passwords took 0.26 s before).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repeated_wrong_passwords_make_the_address_wait() -> TestResult {
    let server = TestServer::with_password().await;
    let mut client = server.client().await;
    for attempt in 1..=6 {
        let err = client.handshake(USER, "wrong").await.expect_err("a wrong password is accepted");
        assert!(err.to_string().contains("invalid user or password"), "attempt {attempt}: {err}");
    }
    let err = client.handshake(USER, PASSWORD).await.expect_err("the right password passed during the wait");
    assert!(err.to_string().contains("too many failed"), "{err}");
    assert_eq!(client.token(), None);
    Ok(())
}

// ---------------------------------------------------------------------------
// Error messages
// ---------------------------------------------------------------------------

/// What DataFusion and Arrow put around an error, which a client's message
/// never shows.
const WRAPPERS: [&str; 14] = [
    "SQL error",
    "ParserError(",
    "Expected:",
    "EOF",
    "External error",
    "Arrow error",
    "Cast error",
    "Invalid argument error",
    "Error during planning",
    "Execution error",
    "Optimizer rule",
    "caused by",
    "quiverdb_dml_guard",
    "column1",
];

/// The status of `sql` run through the statement paths a client has
/// (query and prepared query; update and prepared update too for a
/// statement that is not a SELECT), which must agree on it; checked to
/// carry none of [`WRAPPERS`].
async fn statement_status(client: &mut Client, sql: &str) -> Result<tonic::Status, FlightError> {
    let select = sql.starts_with("SELECT");
    let queried = status_of(query(client, sql).await);
    let mut others = vec![];
    let prepared = client.prepare(sql.into(), None).await;
    others.push(match prepared {
        Ok(mut prepared) if select => match prepared.execute().await {
            Ok(info) => status_of(fetch(client, &info).await),
            Err(e) => status_of::<()>(Err(e)),
        },
        Ok(mut prepared) => status_of(prepared.execute_update().await),
        Err(e) => status_of::<()>(Err(e)),
    });
    if !select {
        others.push(status_of(update(client, sql).await));
    }
    for other in &others {
        assert_eq!((queried.code(), queried.message()), (other.code(), other.message()), "{sql}");
    }
    for wrapper in WRAPPERS {
        assert!(!queried.message().contains(wrapper), "{sql}: {:?} shows {wrapper:?}", queried.message());
    }
    Ok(queried)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn syntax_errors_say_what_was_expected_and_where() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    let cases = [
        ("SELECT * FROM t WHERE", "syntax error: expected an expression, found end of input"),
        ("SELECT 1 2", "syntax error at line 1, column 10: expected end of statement, found 2"),
        ("SELECT 'abc", "syntax error at line 1, column 8: unterminated string literal"),
    ];
    for (sql, expected) in cases {
        let s = statement_status(&mut client, sql).await?;
        assert_eq!(s.code(), Code::InvalidArgument, "{sql}: {s}");
        assert_eq!(s.message(), expected, "{sql}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failing_planning_rules_are_not_named() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE t (id BIGINT NOT NULL, v TINYINT, PRIMARY KEY (id))").await?;
    update(&mut client, "INSERT INTO t VALUES (1, 1)").await?;

    // quiverdb's own analyzer rule, on UPDATE's SET and DELETE's WHERE.
    let s = statement_status(&mut client, "UPDATE t SET v = 1000").await?;
    assert_eq!((s.code(), s.message()), (Code::InvalidArgument, "Can't cast value 1000 to type Int8"));
    let s = statement_status(&mut client, "DELETE FROM t WHERE id IN (SELECT id FROM t)").await?;
    assert_eq!(s.code(), Code::Unimplemented, "{s}");
    assert!(s.message().starts_with("DELETE with a subquery (IN, EXISTS or scalar) is not supported"), "{s}");
    // DataFusion's optimizer.
    let s = statement_status(&mut client, "SELECT * FROM t WHERE id = 'x'").await?;
    assert_eq!((s.code(), s.message()), (Code::InvalidArgument, "Cannot cast string 'x' to value of Int64 type"));
    // Nothing was changed.
    let rows = query(&mut client, "SELECT v FROM t").await?;
    assert_eq!(rows.column(0).as_primitive::<arrow_array::types::Int8Type>().values().to_vec(), vec![1]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_null_in_a_not_null_column_names_the_column() -> TestResult {
    let server = TestServer::open().await;
    let mut client = server.client().await;
    update(&mut client, "CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, PRIMARY KEY (id))").await?;
    let cases = [
        ("INSERT INTO t (id, name) VALUES (NULL, 'x')", "column 'id' of table 't'"),
        ("INSERT INTO t (name, id) VALUES ('x', 1), ('y', NULL)", "column 'id' of table 't'"),
        ("INSERT INTO t (name) VALUES ('x')", "column 'id' of table 't'"),
        ("CREATE TABLE c (a INT, b VARCHAR NOT NULL) AS VALUES (1, 'x'), (2, NULL)", "column 'b' of table 'c'"),
    ];
    for (sql, column) in cases {
        let s = statement_status(&mut client, sql).await?;
        assert_eq!(s.code(), Code::FailedPrecondition, "{sql}: {s}");
        assert_eq!(s.message(), format!("{column} is NOT NULL but the data contains nulls"), "{sql}");
    }
    // A prepared INSERT's NULL parameter too.
    let mut prepared = client.prepare("INSERT INTO t (id, name) VALUES ($1, 'x')".into(), None).await?;
    prepared.set_parameters(params(Arc::new(Int64Array::from(vec![Some(7), None]))))?;
    let s = status_of(prepared.execute_update().await);
    assert_eq!(
        (s.code(), s.message()),
        (Code::FailedPrecondition, "column 'id' of table 't' is NOT NULL but the data contains nulls")
    );
    // Nothing was written, and the refused CREATE made no table.
    assert_eq!(count_rows(&server.db, "t").await, 0);
    let s = status_of(query(&mut client, "SELECT * FROM c").await);
    assert_eq!(s.code(), Code::NotFound, "{s}");
    Ok(())
}
