//! quiverdb's `FlightSqlService`.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, RecordBatch, UInt64Array};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::{GetCatalogsBuilder, GetDbSchemasBuilder, GetTablesBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionCancelQueryRequest, ActionCancelQueryResult, ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any, Command, CommandGetCatalogs,
    CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables,
    CommandGetXdbcTypeInfo, CommandPreparedStatementQuery, CommandPreparedStatementUpdate, CommandStatementIngest,
    CommandStatementQuery, CommandStatementUpdate, DoPutPreparedStatementResult, ProstMessageExt, SqlInfo,
    TableExistsOption, TableNotExistOption, TicketStatementQuery,
};
use arrow_flight::{
    CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus, FlightData, FlightDescriptor, FlightEndpoint,
    FlightInfo, HandshakeRequest, HandshakeResponse, IpcMessage, SchemaAsIpc, SchemaResult, Ticket,
};
use arrow_ipc::writer::IpcWriteOptions;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use datafusion::catalog::SchemaProvider;
use datafusion::catalog::information_schema::InformationSchemaProvider;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DataFusionError, ParamValues, ScalarValue};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{LogicalPlan, ResetVariable, SetVariable, Statement};
use datafusion::physical_plan::collect;
use datafusion::prelude::{SQLOptions, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use futures::{Stream, StreamExt, TryStreamExt, stream};
use prost::Message;
use quiverdb_storage::{Database, TableOptions};
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status, Streaming};
use tracing::debug;

use super::auth::Authenticator;
use super::handle::Handle;
use super::metadata::{INFORMATION_SCHEMA, SQL_INFO, XDBC_TYPES, primary_keys, primary_keys_schema};
use super::plans::PlanCache;
use super::results::{client_schema, to_client_batch};
use super::sessions::proto::{
    ErrorValue, GetSessionOptionsResult, OptionValue, SessionOptionValue, SetSessionOptionsError,
    SetSessionOptionsResult,
};
use super::sessions::{RequestSession, Sessions};
use super::status::{arrow_status, df_status, flight_status, storage_status};
use crate::admission::{Admission, Refused, Weight};
use crate::catalog::{DEFAULT_SCHEMA, QuiverSchema, stored_name};
use crate::exec::Incoming;
use crate::limits::TableMemoryLimit;
use crate::many::{as_one_statement, as_one_update, bind_delete_where, bind_insert_values};
use crate::retained::row_bytes;
use crate::running::{RunningGuard, RunningQueries, Statement as Registered, cancellable};
use crate::session::DEFAULT_CATALOG;

use super::incoming::IncomingBatches;

/// Memory one bound parameter value takes beyond its Arrow data (measured:
/// 200,000 rows of a BIGINT and a VARCHAR bound to an INSERT peaked at
/// about 700 bytes a row).
const BOUND_VALUE_BYTES: usize = 384;

type FlightStream = Pin<Box<dyn Stream<Item = Result<FlightData, Status>> + Send + 'static>>;

/// quiverdb's Flight SQL service: SQL statements, prepared statements,
/// catalog metadata and bulk ingest over one quiverdb database.
#[derive(Clone)]
pub(crate) struct QuiverFlightSql {
    db: Database,
    /// The session a request runs in: the shared one, or its client's
    /// (see [`super::sessions`]).
    ctx: SessionContext,
    /// The server's shared session, which client sessions copy.
    shared: SessionContext,
    sessions: Arc<Sessions>,
    /// The session the request being served names.
    session: RequestSession,
    /// Whether `ctx` is a client's session, whose settings may differ from
    /// the shared session's (its plans are not cached).
    own_settings: bool,
    /// The schema `ctx` resolves table names in (for its catalog version).
    schema: Arc<QuiverSchema>,
    plans: Arc<PlanCache>,
    table_options: TableOptions,
    auth: Arc<Authenticator>,
    /// Largest encoded data message sent to a client.
    max_flight_data_bytes: usize,
    /// The most bytes the compressed buffers of one Arrow message a client
    /// sends may declare once decompressed.
    max_decompressed: usize,
    /// The slots statements run in (see [`crate::admission`]).
    admission: Arc<Admission>,
    /// The statements running (see [`crate::running`]).
    running: Arc<RunningQueries>,
}

impl std::fmt::Debug for QuiverFlightSql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuiverFlightSql").field("db", &self.db).field("auth", &self.auth).finish_non_exhaustive()
    }
}

impl QuiverFlightSql {
    pub(crate) fn new(
        db: Database,
        (ctx, schema): (SessionContext, Arc<QuiverSchema>),
        table_options: TableOptions,
        auth: Arc<Authenticator>,
        max_message_bytes: usize,
        session_idle: Duration,
        (admission, running): (Arc<Admission>, Arc<RunningQueries>),
    ) -> Self {
        // Leave room for the IPC framing around a data message.
        let max_flight_data_bytes = (max_message_bytes / 2).clamp(1024, 2 << 20);
        let plans = Arc::default();
        let sessions = Arc::new(Sessions::new(session_idle));
        Self {
            db,
            shared: ctx.clone(),
            ctx,
            sessions,
            session: RequestSession::default(),
            own_settings: false,
            schema,
            plans,
            table_options,
            auth,
            max_flight_data_bytes,
            max_decompressed: max_message_bytes.saturating_mul(4),
            admission,
            running,
        }
    }

    /// The service for `request`: in the session its metadata names.
    pub(crate) fn for_request<T>(&self, request: &Request<T>) -> Result<Self, Status> {
        let session = RequestSession::of(request.metadata(), request.remote_addr())?;
        let mut service = self.clone();
        if let Some(ctx) = self.sessions.context(&session)? {
            service.ctx = ctx;
            service.own_settings = true;
        }
        service.session = session;
        Ok(service)
    }

    /// The request's session, for the response to name.
    pub(crate) fn session(&self) -> &RequestSession {
        &self.session
    }

    /// Runs `SET` and `RESET` statements in the request's session, opening
    /// one for its client if it has none.
    async fn apply_settings(&self, plans: Vec<LogicalPlan>) -> Result<(), Status> {
        let (ctx, opened) = self.sessions.open(&self.session, &self.shared)?;
        let applied = self.apply_settings_to(&ctx, plans).await;
        if applied.is_err() && opened {
            self.sessions.discard_opened(&self.session);
        }
        applied
    }

    async fn apply_settings_to(&self, ctx: &SessionContext, plans: Vec<LogicalPlan>) -> Result<(), Status> {
        for plan in plans {
            let plan = match plan {
                LogicalPlan::Statement(Statement::SetVariable(set)) => {
                    check_setting(&set.variable, Some(&set.value))?;
                    LogicalPlan::Statement(Statement::SetVariable(set))
                }
                LogicalPlan::Statement(Statement::ResetVariable(reset)) => {
                    check_setting(&reset.variable, None)?;
                    // Back to the server's setting, which may not be
                    // DataFusion's default.
                    let shared = self.shared.state().config().options().entries();
                    match shared.into_iter().find(|e| e.key == reset.variable).and_then(|e| e.value) {
                        Some(value) => LogicalPlan::Statement(Statement::SetVariable(SetVariable {
                            variable: reset.variable,
                            value,
                        })),
                        None => LogicalPlan::Statement(Statement::ResetVariable(reset)),
                    }
                }
                other => return Err(Status::internal(format!("not a session setting: {}", other.display()))),
            };
            ctx.execute_logical_plan(plan).await.map_err(df_status)?;
        }
        Ok(())
    }

    /// Flight's `SetSessionOptions`: each option as a `SET` in the request's
    /// session; the ones refused, with why.
    pub(crate) async fn set_session_options(
        &self,
        options: std::collections::HashMap<String, SessionOptionValue>,
    ) -> SetSessionOptionsResult {
        let known = |name: &str| self.ctx.state().config().options().entries().iter().any(|e| e.key == name);
        let mut errors = std::collections::HashMap::new();
        for (name, value) in options {
            let variable = name.to_ascii_lowercase();
            let value = match value.option_value {
                None => None,
                Some(OptionValue::String(value)) => Some(value),
                Some(OptionValue::Bool(value)) => Some(value.to_string()),
                Some(OptionValue::Int64(value)) => Some(value.to_string()),
                Some(OptionValue::Double(value)) => Some(value.to_string()),
                Some(OptionValue::StringList(_)) => {
                    errors.insert(name, SetSessionOptionsError { value: ErrorValue::InvalidValue as i32 });
                    continue;
                }
            };
            let known = known(&variable);
            let plan = match value {
                Some(value) => Statement::SetVariable(SetVariable { variable, value }),
                None => Statement::ResetVariable(ResetVariable { variable }),
            };
            if let Err(status) = self.apply_settings(vec![LogicalPlan::Statement(plan)]).await {
                debug!(option = %name, %status, "session option refused");
                let value = if known { ErrorValue::InvalidValue } else { ErrorValue::InvalidName };
                errors.insert(name, SetSessionOptionsError { value: value as i32 });
            }
        }
        SetSessionOptionsResult { errors }
    }

    /// Flight's `GetSessionOptions`: every setting of the request's
    /// session that has a value.
    pub(crate) fn session_options(&self) -> GetSessionOptionsResult {
        let session_options = self
            .ctx
            .state()
            .config()
            .options()
            .entries()
            .into_iter()
            .filter_map(|e| {
                let value = e.value?;
                Some((e.key, SessionOptionValue { option_value: Some(OptionValue::String(value)) }))
            })
            .collect();
        GetSessionOptionsResult { session_options }
    }

    /// Ends the request's session (Flight's `CloseSession`).
    pub(crate) fn close_session(&self) -> bool {
        self.sessions.close(&self.session)
    }

    /// Plans `sql` without running it (queries come from the plan cache
    /// when they can; `ALTER TABLE` gets quiverdb's own plan). `SET` and
    /// `RESET` are planned to run in the client's session (see
    /// [`super::sessions`]); transactions and SQL `PREPARE`/`EXECUTE` are
    /// refused, and so is a `CREATE OR REPLACE` of a view over a table (or
    /// of a table over a view).
    async fn plan(&self, sql: &str) -> Result<LogicalPlan, Status> {
        Ok(self.plan_versioned(sql).await?.0)
    }

    /// [`Self::plan`], with the catalog version the plan was made at.
    async fn plan_versioned(&self, sql: &str) -> Result<(LogicalPlan, u64), Status> {
        let version = self.schema.catalog_version();
        if let Some(plan) = self.cache().and_then(|plans| plans.get(sql, version)) {
            return Ok((plan, version));
        }
        let state = self.ctx.state();
        let mut statement = crate::nesting::parse(&state, sql).map_err(df_status)?;
        let normalize = state.config().options().sql_parser.enable_ident_normalization;
        if let Some(plan) = crate::alter::plan(&statement, normalize) {
            return Ok((plan.map_err(df_status)?, version));
        }
        number_positional_placeholders(&mut statement);
        let plan = state.statement_to_plan(statement).await.map_err(df_status)?;
        crate::nesting::check_plan(&plan).map_err(df_status)?;
        if !is_setting(&plan) {
            SQLOptions::new().with_allow_statements(false).verify_plan(&plan).map_err(df_status)?;
        }
        self.schema.check_replace(&plan).map_err(df_status)?;
        if is_query(&plan)
            && let Some(plans) = self.cache()
        {
            plans.insert(sql, version, &plan);
        }
        Ok((plan, version))
    }

    /// [`Self::plan_versioned`] for a statement a client sent: one that
    /// fails to plan logs its line here (it never runs).
    async fn plan_statement(&self, sql: &str) -> Result<(LogicalPlan, u64), Status> {
        let start = std::time::Instant::now();
        let planned = self.plan_versioned(sql).await;
        if let Err(status) = &planned {
            crate::running::log_refused(self.session.peer(), sql, start.elapsed(), status.message());
        }
        planned
    }

    /// The plan cache, for requests in the shared session.
    fn cache(&self) -> Option<&PlanCache> {
        (!self.own_settings).then_some(&*self.plans)
    }

    /// `plan` once per row of `params` (or once, if there are none), with
    /// the row's values bound to `$1`, `$2`, ... exactly: a row must hold
    /// one value per placeholder, and a value is converted to its
    /// placeholder's type only when that loses nothing (1.5 is no BIGINT).
    fn bind(plan: LogicalPlan, params: Option<&RecordBatch>) -> Result<Vec<LogicalPlan>, Status> {
        let Some(params) = params else { return Ok(vec![plan]) };
        let types = placeholder_types(&plan, params)?;
        if params.num_rows() > 1 {
            let row = |row| row_values(params, row, &types).map_err(|s| DataFusionError::Plan(s.message().into()));
            let one = match bind_insert_values(&plan, params.num_rows(), row).map_err(df_status)? {
                Some(one) => Some(one),
                None => bind_delete_where(&plan, params.num_rows(), row).map_err(df_status)?,
            };
            if let Some(one) = one {
                return Ok(vec![one]);
            }
        }
        (0..params.num_rows()).map(|row| bind_row(&plan, params, row, &types)).collect()
    }

    /// The memory binding `params` to a statement takes, counted against
    /// the memory limit until the statement ends: about
    /// [`BOUND_VALUE_BYTES`] a value (its literal and its slot in the rows
    /// the statement runs on) besides the Arrow data. Past the limit:
    /// `ResourceExhausted`, before anything is bound.
    fn reserve_params(&self, params: &RecordBatch) -> Result<MemoryReservation, Status> {
        let pool = self.ctx.runtime_env().memory_pool.clone();
        let reservation = MemoryConsumer::new("parameter rows of a prepared statement").register(&pool);
        let values = params.num_rows().saturating_mul(params.num_columns().max(1));
        let bytes = values.saturating_mul(BOUND_VALUE_BYTES).saturating_add(params.get_array_memory_size());
        reservation.try_grow(bytes).map_err(df_status)?;
        Ok(reservation)
    }

    /// Runs queries that change data as they run, each once; their results
    /// in the schema a client receives, as one batch.
    async fn run_writing_query(&self, plans: Vec<LogicalPlan>) -> Result<RecordBatch, Status> {
        let mut schema = None;
        let mut batches = Vec::new();
        for plan in plans {
            let optimized = self.optimize(&plan)?;
            let out = schema.get_or_insert_with(|| result_schema(&optimized));
            let stream = self.execute_optimized(optimized).await?;
            for batch in stream.try_collect::<Vec<_>>().await.map_err(df_status)? {
                batches.push(to_client_batch(&batch, out).map_err(df_status)?);
            }
        }
        let schema = schema.unwrap_or_else(|| Arc::new(Schema::empty()));
        arrow_select::concat::concat_batches(&schema, &batches).map_err(arrow_status)
    }

    /// Runs statements that change data or the catalog, returning the
    /// total affected-row count (`None` for DDL).
    async fn run_mutations(&self, plans: Vec<LogicalPlan>) -> Result<Option<u64>, Status> {
        let slot = self.admission.admit(Weight::of_change(&plans)).await.map_err(refused_status)?;
        let this = self.clone();
        let result = match slot.run(async move { this.apply_mutations(plans).await }).await {
            Ok(result) => result,
            Err(e) => Err(Status::internal(format!("the statement failed: {e}"))),
        };
        self.forget_stale_plans();
        result
    }

    /// A dropped or replaced table's cached plans (which hold its rows) go
    /// as soon as the catalog changes, not at the next query.
    fn forget_stale_plans(&self) {
        if let Some(cache) = self.cache() {
            cache.forget_before(self.schema.catalog_version());
        }
    }

    /// [`Self::run_mutations`], before the plan cache is brought up to date.
    async fn apply_mutations(&self, plans: Vec<LogicalPlan>) -> Result<Option<u64>, Status> {
        if plans.iter().all(is_setting) {
            self.apply_settings(plans).await?;
            return Ok(None);
        }
        if let Some(alter) = plans.first().and_then(crate::alter::of) {
            if plans.len() > 1 {
                return Err(Status::invalid_argument("ALTER TABLE takes no parameters"));
            }
            crate::alter::run(&self.db, &self.ctx.state(), alter).await.map_err(df_status)?;
            return Ok(None);
        }
        let mut total = None;
        let mut results = Vec::new();
        if let Some(update) = as_one_update(&self.ctx.state(), &plans).await.map_err(df_status)? {
            results.push(collect(update, self.ctx.task_ctx()).await.map_err(df_status)?);
        } else {
            for plan in as_one_statement(plans).map_err(df_status)? {
                let df = crate::execute::execute(&self.ctx, plan).await.map_err(df_status)?;
                results.push(df.collect().await.map_err(df_status)?);
            }
        }
        for batches in &results {
            for batch in batches {
                if let Some(counts) =
                    batch.column_by_name("count").and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
                {
                    *total.get_or_insert(0) += counts.values().iter().sum::<u64>();
                }
            }
        }
        Ok(total)
    }

    /// `FlightInfo` for `sql` (with `params`): a query is only planned (its
    /// ticket runs it); DDL and DML run now and their ticket returns the
    /// outcome, with the affected-row count in `total_records`.
    async fn statement_info(
        &self,
        sql: String,
        params: Option<RecordBatch>,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        if let Some(cancel) = cancel_target(&sql) {
            self.cancel(cancel?)?;
            return self.done_info(None, descriptor);
        }
        let (plan, version) = self.plan_statement(&sql).await?;
        let (schema, handle, total_records) = if is_query(&plan) {
            let schema = self.query_schema(&sql, version, &plan, params.as_ref())?;
            let handle = match params {
                None => Handle::Query { sql },
                params => Handle::Prepared { sql, params },
            };
            (schema.as_ref().clone(), handle, -1)
        } else if is_change(&plan) {
            let bound = Self::bind(plan, params.as_ref())?;
            let count = self.registered(&sql, true, |this| this.run_mutations(bound)).await?;
            return self.done_info(count, descriptor);
        } else {
            // A query that writes as it runs: run it once, now; its ticket
            // carries the result.
            let bound = Self::bind(plan, params.as_ref())?;
            let result = self.registered(&sql, true, |this| this.run_writing_query(bound)).await?;
            let records = result.num_rows() as i64;
            (result.schema().as_ref().clone(), Handle::Ran { result }, records)
        };
        // Each ticket its own: `CancelFlightInfo` names this one.
        info_of(&schema, handle.encode_ticket(next_ticket())?, total_records, descriptor)
    }

    /// `FlightInfo` of a statement that already ran, with `count` rows
    /// affected (`None` for DDL).
    fn done_info(&self, count: Option<u64>, descriptor: FlightDescriptor) -> Result<Response<FlightInfo>, Status> {
        let records = count.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        info_of(&outcome_schema(count), Handle::Done { count }.encode()?, records, descriptor)
    }

    /// Runs `work`, statement `sql` (one that `changes` data, or a query
    /// run as an update), listed in `system.queries` while it runs; its
    /// outcome is logged. A query stops when it is cancelled.
    async fn registered<'a, T: RowCount, F>(
        &'a self,
        sql: &str,
        changes: bool,
        work: impl FnOnce(&'a Self) -> F,
    ) -> Result<T, Status>
    where
        F: std::future::Future<Output = Result<T, Status>> + 'a,
    {
        let mut guard = self.register(sql, None, changes);
        guard.set_running();
        let outcome = tokio::select! {
            outcome = work(self) => outcome,
            () = guard.until_cancelled() => Err(cancelled_status(guard.id())),
        };
        if let Ok(done) = &outcome {
            guard.add_rows(done.rows());
        }
        guard.finish(&outcome.as_ref().map_err(|e| e.message().to_string()));
        outcome
    }

    /// Lists statement `sql` (run from `ticket`, if a query) in `system.queries`.
    fn register(&self, sql: &str, ticket: Option<Bytes>, changes: bool) -> RunningGuard {
        self.running.start(Registered {
            client: self.session.peer(),
            owner: self.session.owner().map(str::to_string),
            sql: sql.to_string(),
            ticket,
            changes,
        })
    }

    /// `CANCEL <id>`: cancels a running query.
    fn cancel(&self, id: u64) -> Result<(), Status> {
        self.running.cancel(id).map_err(|e| match e {
            crate::running::CancelError::NotRunning(_) => Status::not_found(e.to_string()),
            crate::running::CancelError::ChangesData(_) => Status::failed_precondition(e.to_string()),
        })
    }

    /// Cancels the queries running from the ticket of `info` (and any
    /// later fetch of it); how many were running.
    fn cancel_info(&self, info: &FlightInfo) -> Result<usize, Status> {
        let mut running = 0;
        for endpoint in &info.endpoint {
            let Some(ticket) = &endpoint.ticket else { continue };
            let any = Any::decode(&*ticket.ticket).map_err(|e| Status::invalid_argument(format!("a ticket: {e}")))?;
            let Some(statement) = any.unpack::<TicketStatementQuery>().map_err(arrow_status)? else {
                continue;
            };
            running += self.running.cancel_ticket(&statement.statement_handle, self.session.owner());
        }
        Ok(running)
    }

    /// The schema of query `plan`'s results (`sql` planned at catalog
    /// `version`, with `params` if any).
    fn query_schema(
        &self,
        sql: &str,
        version: u64,
        plan: &LogicalPlan,
        params: Option<&RecordBatch>,
    ) -> Result<SchemaRef, Status> {
        Ok(match params {
            None => result_schema(&self.optimize_query(sql, version, plan)?),
            Some(params) => match Self::bind(plan.clone(), Some(params))?.first() {
                Some(bound) => result_schema(&self.optimize(bound)?),
                None => self.unbound_schema(plan),
            },
        })
    }

    /// The schema of `sql`'s results (with `params`), found without
    /// running it: what [`Self::statement_info`] would announce.
    async fn statement_schema(&self, sql: &str, params: Option<&RecordBatch>) -> Result<SchemaRef, Status> {
        let (plan, version) = self.plan_versioned(sql).await?;
        if is_query(&plan) {
            self.query_schema(sql, version, &plan, params)
        } else if is_change(&plan) {
            Ok(outcome_schema(matches!(plan, LogicalPlan::Dml(_)).then_some(0)))
        } else {
            let bound = Self::bind(plan, params)?;
            let plan = bound.first().ok_or_else(|| Status::invalid_argument("no parameter rows"))?;
            Ok(result_schema(&self.optimize(plan)?))
        }
    }

    /// GetSchema: the schema of a query's, a prepared statement's or a
    /// metadata command's results, without running anything.
    pub(crate) async fn schema_of(&self, request: Request<FlightDescriptor>) -> Result<SchemaResult, Status> {
        let malformed = |e: String| Status::invalid_argument(format!("malformed Flight SQL command: {e}"));
        let any = Any::decode(&*request.get_ref().cmd).map_err(|e| malformed(e.to_string()))?;
        let schema = match Command::try_from(any).map_err(|e| malformed(e.to_string()))? {
            Command::CommandStatementQuery(query) => self.statement_schema(&query.query, None).await?,
            Command::CommandPreparedStatementQuery(query) => {
                let Handle::Prepared { sql, params } = Handle::decode(&query.prepared_statement_handle)? else {
                    return Err(Status::invalid_argument("not a prepared statement handle"));
                };
                self.statement_schema(&sql, params.as_ref()).await?
            }
            Command::CommandGetCatalogs(_)
            | Command::CommandGetDbSchemas(_)
            | Command::CommandGetTables(_)
            | Command::CommandGetTableTypes(_)
            | Command::CommandGetSqlInfo(_)
            | Command::CommandGetPrimaryKeys(_)
            | Command::CommandGetXdbcTypeInfo(_) => {
                // Their FlightInfo runs nothing.
                let info = self.get_flight_info(request).await?.into_inner();
                Arc::new(info.try_decode_schema().map_err(|e| Status::internal(format!("decoding a schema: {e}")))?)
            }
            other => {
                return Err(Status::invalid_argument(format!(
                    "GetSchema answers for queries, prepared statements and metadata commands, not {}",
                    other.type_url()
                )));
            }
        };
        Ok(SchemaResult { schema: schema_ipc(&schema)? })
    }

    /// The result stream of a ticket (`ticket`, its bytes, for a query
    /// `CancelFlightInfo` may stop).
    async fn run_handle(&self, handle: Handle, ticket: Option<Bytes>) -> Result<Response<FlightStream>, Status> {
        let (sql, params) = match handle {
            Handle::Done { count } => {
                let schema = outcome_schema(count);
                let batches = match count {
                    Some(n) => {
                        let column: ArrayRef = Arc::new(UInt64Array::from(vec![n]));
                        vec![RecordBatch::try_new(Arc::clone(&schema), vec![column]).map_err(arrow_status)?]
                    }
                    None => Vec::new(),
                };
                return Ok(self.encode(schema, stream::iter(batches.into_iter().map(Ok)).boxed()));
            }
            Handle::Ran { result } => {
                let schema = result.schema();
                return Ok(self.encode(schema, stream::iter([Ok(result)]).boxed()));
            }
            Handle::Query { sql } => (sql, None),
            Handle::Prepared { sql, params } => (sql, params),
        };
        // Listed first, so a CancelFlightInfo arriving meanwhile finds it
        // (or the ticket it remembers).
        let mut guard = self.register(&sql, ticket.clone(), false);
        if let Some(ticket) = &ticket
            && self.running.ticket_cancelled(ticket, self.session.owner())
        {
            let status = cancelled_status(guard.id());
            guard.finish::<(), _>(&Err(status.message()));
            return Err(status);
        }
        // Planning and the wait for a slot stop when it is cancelled too.
        let prepared = tokio::select! {
            prepared = self.prepare_query(sql, params) => prepared,
            () = guard.until_cancelled() => Err(cancelled_status(guard.id())),
        };
        let (schema, batches) = match prepared {
            Ok(prepared) => prepared,
            Err(status) => {
                guard.finish::<(), _>(&Err(status.message()));
                return Err(status);
            }
        };
        guard.set_running();
        let out = Arc::clone(&schema);
        let batches = batches.map(move |batch| to_client_batch(&batch?, &out).map_err(flight_error));
        let batches = cancellable(batches.boxed(), guard, |id| FlightError::Tonic(Box::new(cancelled_status(id))));
        Ok(self.encode(schema, batches))
    }

    /// A query's result schema and batches (`sql` with `params`, if a
    /// prepared statement's), once admitted to run.
    async fn prepare_query(
        &self,
        sql: String,
        params: Option<RecordBatch>,
    ) -> Result<(SchemaRef, futures::stream::BoxStream<'static, Result<RecordBatch, FlightError>>), Status> {
        let (plan, version) = self.plan_versioned(&sql).await?;
        if !is_query(&plan) {
            return Err(Status::invalid_argument(
                "this ticket names a statement that changes data; run it through GetFlightInfo or an update",
            ));
        }
        let (schema, batches) = match params {
            None => {
                let optimized = self.optimize_query(&sql, version, &plan)?;
                (result_schema(&optimized), self.execute_optimized(optimized).await?.map_err(flight_error).boxed())
            }
            Some(params) => {
                // One row bound, planned and run at a time, as the client
                // reads: the memory of a run does not grow with the rows.
                let types = placeholder_types(&plan, &params)?;
                let schema = match params.num_rows() {
                    0 => self.unbound_schema(&plan),
                    _ => result_schema(&self.optimize(&bind_row(&plan, &params, 0, &types)?)?),
                };
                let this = self.clone();
                let runs = stream::iter(0..params.num_rows()).then(move |row| {
                    let (this, plan, params, types) = (this.clone(), plan.clone(), params.clone(), types.clone());
                    async move {
                        let optimized = this.optimize(&bind_row(&plan, &params, row, &types)?)?;
                        this.execute_optimized(optimized).await
                    }
                });
                let batches = runs
                    .map(move |run| match run {
                        Ok(batches) => batches.map_err(flight_error).boxed(),
                        Err(status) => stream::once(async move { Err(FlightError::Tonic(Box::new(status))) }).boxed(),
                    })
                    .flatten();
                (schema, batches.boxed())
            }
        };
        Ok((schema, batches))
    }

    /// `plan`, the plan of query text `sql` (with no parameters) made at
    /// catalog `version`, optimized: from the plan cache when a run kept
    /// it (see [`super::plans`]).
    fn optimize_query(&self, sql: &str, version: u64, plan: &LogicalPlan) -> Result<LogicalPlan, Status> {
        let Some(plans) = self.cache() else { return self.optimize(plan) };
        if let Some(optimized) = plans.optimized(sql, version) {
            return Ok(optimized);
        }
        let optimized = self.optimize(plan)?;
        plans.set_optimized(sql, version, &optimized);
        Ok(optimized)
    }

    /// `plan` analysed (types coerced) and optimized.
    fn optimize(&self, plan: &LogicalPlan) -> Result<LogicalPlan, Status> {
        self.ctx.state().optimize(plan).map_err(df_status)
    }

    /// The result schema of a prepared query run with no parameter row
    /// (so with no result): its optimized plan's when the placeholders
    /// allow optimizing it, else the plan's own.
    fn unbound_schema(&self, plan: &LogicalPlan) -> SchemaRef {
        self.optimize(plan).map_or_else(|_| client_schema(plan.schema().as_arrow()), |o| result_schema(&o))
    }

    /// Runs an optimized plan once admitted (its stream holds its slot).
    /// The physical plan is made anew each time: it holds the snapshot of
    /// the rows the query reads.
    async fn execute_optimized(&self, optimized: LogicalPlan) -> Result<SendableRecordBatchStream, Status> {
        let state = self.ctx.state();
        let physical = state.query_planner().create_physical_plan(&optimized, &state).await.map_err(df_status)?;
        let slot = self.admission.admit(Weight::of_plan(&physical)).await.map_err(refused_status)?;
        Ok(slot.execute(physical, Arc::new(TaskContext::from(&state))))
    }

    /// Encodes a batch stream as Flight data, batch by batch.
    fn encode(
        &self,
        schema: SchemaRef,
        batches: futures::stream::BoxStream<'static, Result<RecordBatch, FlightError>>,
    ) -> Response<FlightStream> {
        let data = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .with_max_flight_data_size(self.max_flight_data_bytes)
            .build(batches)
            .map_err(flight_status);
        Response::new(Box::pin(data))
    }

    /// A metadata result as a one-batch stream.
    fn one_batch(&self, batch: Result<RecordBatch, FlightError>) -> Result<Response<FlightStream>, Status> {
        let batch = batch.map_err(flight_status)?;
        Ok(self.encode(batch.schema(), stream::once(async { Ok(batch) }).boxed()))
    }

    /// The tables and views in `schema` of quiverdb's catalog: name, kind
    /// (`TABLE` or `VIEW`) and schema.
    async fn tables_of(&self, schema: &str) -> Vec<(String, &'static str, SchemaRef)> {
        let provider: Arc<dyn SchemaProvider> = if schema == INFORMATION_SCHEMA {
            // DataFusion serves these views per session, outside the catalog.
            Arc::new(InformationSchemaProvider::new(Arc::clone(self.ctx.state().catalog_list())))
        } else {
            match self.ctx.catalog(DEFAULT_CATALOG).and_then(|c| c.schema(schema)) {
                Some(provider) => provider,
                None => return Vec::new(),
            }
        };
        let mut out = Vec::new();
        for name in provider.table_names() {
            if let Ok(Some(table)) = provider.table(&name).await {
                let kind = match table.table_type() {
                    datafusion::logical_expr::TableType::Base => "TABLE",
                    _ => "VIEW",
                };
                out.push((name, kind, table.schema()));
            }
        }
        out
    }

    /// Reads a DoPut stream's batches (as one batch) and its schema.
    async fn read_batches(
        &self,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<(SchemaRef, Vec<RecordBatch>), Status> {
        let mut stream = self.batch_stream(request);
        let mut batches = Vec::new();
        while let Some(batch) = stream.next().await? {
            batches.push(batch);
        }
        let schema = match (stream.schema(), batches.first()) {
            (Some(schema), _) => Arc::clone(schema),
            (None, Some(batch)) => batch.schema(),
            (None, None) => Arc::new(Schema::empty()),
        };
        Ok((schema, batches))
    }

    /// The record batches of a DoPut, decoded as they arrive. Each message
    /// is checked before arrow-ipc decodes it ([`super::ipc_check::IpcChecker`]): a client's
    /// lengths, offsets and types must hold up against the bytes sent.
    fn batch_stream(&self, request: Request<PeekableFlightDataStream>) -> IncomingBatches {
        IncomingBatches::new(request.into_inner().boxed(), self.max_decompressed)
    }

    /// Parameters sent in a DoPut, as one batch (`None` if none were sent).
    /// A batch with no columns is no parameters: the JDBC driver sends an
    /// empty one (no columns, no rows) to run a statement without
    /// parameters, which must run once, not once per row.
    async fn read_params(&self, request: Request<PeekableFlightDataStream>) -> Result<Option<RecordBatch>, Status> {
        let (schema, batches) = self.read_batches(request).await?;
        if batches.is_empty() || schema.fields().is_empty() {
            return Ok(None);
        }
        arrow_select::concat::concat_batches(&schema, &batches).map(Some).map_err(arrow_status)
    }
}

/// The type of each placeholder of `plan` (`None`: unknown), in order,
/// once `params` is checked to hold one column per placeholder.
fn placeholder_types(plan: &LogicalPlan, params: &RecordBatch) -> Result<Vec<Option<DataType>>, Status> {
    let types = plan.get_parameter_types().map_err(df_status)?;
    if params.num_columns() != types.len() {
        return Err(Status::invalid_argument(format!(
            "{} parameter value(s) were sent for a statement with {} placeholder(s)",
            params.num_columns(),
            types.len()
        )));
    }
    Ok((0..types.len()).map(|i| types.get(&format!("${}", i + 1)).cloned().flatten()).collect())
}

/// `plan` with row `row` of `params` bound to `$1`, `$2`, ... exactly: a
/// value is converted to its placeholder's type (`types`, from
/// [`placeholder_types`]) only when that loses nothing (1.5 is no BIGINT).
fn bind_row(
    plan: &LogicalPlan,
    params: &RecordBatch,
    row: usize,
    types: &[Option<DataType>],
) -> Result<LogicalPlan, Status> {
    let values = row_values(params, row, types)?;
    plan.clone().with_param_values(ParamValues::from(values)).map_err(df_status)
}

/// Row `row` of `params`, each value converted to its placeholder's type
/// (`types`) when that loses nothing, else refused.
fn row_values(params: &RecordBatch, row: usize, types: &[Option<DataType>]) -> Result<Vec<ScalarValue>, Status> {
    params
        .columns()
        .iter()
        .zip(types)
        .enumerate()
        .map(|(i, (column, expected))| {
            let value = ScalarValue::try_from_array(column, row).map_err(df_status)?;
            match expected {
                Some(ty) if *ty != value.data_type() => bind_as(value, ty, i),
                _ => Ok(value),
            }
        })
        .collect()
}

/// Numbers JDBC/ODBC-style `?` placeholders in order of appearance as
/// `$1`, `$2`, ... (DataFusion binds only numbered ones), so clients that
/// write `?` get the same parameters as those that write `$n`.
fn number_positional_placeholders(statement: &mut DFStatement) {
    use datafusion::sql::sqlparser::ast::{Expr, Value, visit_expressions_mut};
    let DFStatement::Statement(statement) = statement else { return };
    let mut n = 0;
    let _ = visit_expressions_mut(statement.as_mut(), |e| {
        if let Expr::Value(v) = e
            && let Value::Placeholder(p) = &mut v.value
            && p == "?"
        {
            n += 1;
            *p = format!("${n}");
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// Parameter `$i+1`'s `value` as `ty`, its placeholder's type, when the
/// conversion keeps the value (converting back gives it again).
fn bind_as(value: ScalarValue, ty: &DataType, i: usize) -> Result<ScalarValue, Status> {
    let refused = |why: String| {
        Status::invalid_argument(format!(
            "parameter ${} = {value} ({}) cannot be used as {ty}: {why}",
            i + 1,
            value.data_type()
        ))
    };
    let bound = value.cast_to(ty).map_err(|e| refused(e.to_string()))?;
    match bound.cast_to(&value.data_type()) {
        Ok(back) if back == value => Ok(bound),
        _ => Err(refused(format!("it would become {bound}"))),
    }
}

/// `FlightInfo` of a result of `schema` behind one ticket (holding
/// `statement_handle`), with `records` rows (-1: not known yet).
fn info_of(
    schema: &Schema,
    statement_handle: Bytes,
    records: i64,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let ticket = TicketStatementQuery { statement_handle };
    let endpoint = FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec()));
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("encoding the result schema: {e}")))?
        .with_endpoint(endpoint)
        .with_descriptor(descriptor)
        .with_total_records(records)
        .with_ordered(true);
    Ok(Response::new(info))
}

/// What a client hears of statement `id` once it is cancelled.
fn cancelled_status(id: u64) -> Status {
    Status::cancelled(format!("statement {id} was cancelled"))
}

/// A failed result batch as the Flight stream carries it.
fn flight_error(e: DataFusionError) -> FlightError {
    FlightError::from_external_error(Box::new(e))
}

/// The rows a statement's outcome counts (changed, or returned), for its
/// log line and `system.queries`.
trait RowCount {
    fn rows(&self) -> u64;
}

impl RowCount for Option<u64> {
    fn rows(&self) -> u64 {
        self.unwrap_or(0)
    }
}

impl RowCount for RecordBatch {
    fn rows(&self) -> u64 {
        self.num_rows() as u64
    }
}

/// The Flight action that cancels the statement of a `FlightInfo`.
const CANCEL_FLIGHT_INFO: &str = "CancelFlightInfo";

/// A number for the next ticket (see [`Handle::encode_ticket`]).
fn next_ticket() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The query `CANCEL <id>` or `KILL [QUERY] <id>` names, if `sql` is one
/// (an error if it starts so but is not one).
fn cancel_target(sql: &str) -> Option<Result<u64, Status>> {
    let mut words = sql.trim().trim_end_matches(';').split_whitespace();
    let first = words.next()?;
    if !first.eq_ignore_ascii_case("cancel") && !first.eq_ignore_ascii_case("kill") {
        return None;
    }
    let mut words = words.peekable();
    if words.peek().is_some_and(|w| w.eq_ignore_ascii_case("query")) {
        words.next();
    }
    let usage =
        || Status::invalid_argument(format!("usage: {} <id>, with an id from system.queries", first.to_uppercase()));
    let id = words.next().and_then(|w| w.parse::<u64>().ok());
    Some(match (id, words.next()) {
        (Some(id), None) => Ok(id),
        _ => Err(usage()),
    })
}

/// A statement not admitted: the server is busy.
fn refused_status(refused: Refused) -> Status {
    tracing::warn!("{refused}");
    Status::resource_exhausted(refused.to_string())
}

/// The schema a client receives for the results of `optimized` (after
/// type coercion: the types its rows really have).
fn result_schema(optimized: &LogicalPlan) -> SchemaRef {
    client_schema(optimized.schema().as_arrow())
}

/// True for `SET` and `RESET`, which change the client's session.
fn is_setting(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Statement(Statement::SetVariable(_) | Statement::ResetVariable(_)))
}

/// Refuses settings a client may not change in its session: those of the
/// server's runtime (its memory pool is every client's), and sizes that
/// would let one query take the machine. `value` is `None` for a `RESET`.
fn check_setting(name: &str, value: Option<&str>) -> Result<(), Status> {
    if name.starts_with("datafusion.runtime.") {
        return Err(Status::permission_denied(format!(
            "'{name}' is the server's setting, shared by all clients (set it when starting the server)"
        )));
    }
    let bounds: &[(&str, u64)] = &[
        ("datafusion.execution.target_partitions", MAX_PARTITIONS),
        ("datafusion.execution.planning_concurrency", MAX_PARTITIONS),
        ("datafusion.execution.meta_fetch_concurrency", MAX_PARTITIONS),
        ("datafusion.execution.batch_size", MAX_BATCH_ROWS),
    ];
    if let (Some(value), Some((_, max))) = (value, bounds.iter().find(|(n, _)| *n == name))
        && value.trim().parse::<u64>().is_ok_and(|v| v > *max)
    {
        return Err(Status::invalid_argument(format!("'{name}' may be at most {max}, not {value}")));
    }
    Ok(())
}

/// Most partitions a session may ask a query to run in.
const MAX_PARTITIONS: u64 = 1024;

/// Most rows per batch a session may ask for.
const MAX_BATCH_ROWS: u64 = 1 << 20;

/// True for a statement that only reads: not DDL, DML or a session
/// statement, and nothing of the kind inside it (`EXPLAIN ANALYZE INSERT`
/// writes when it runs).
fn is_query(plan: &LogicalPlan) -> bool {
    !is_change(plan) && !plan.exists(|p| Ok(is_change(p))).unwrap_or(true)
}

/// True for a statement whose result is the change it makes (its
/// affected-row count, or nothing for DDL).
fn is_change(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Dml(_) | LogicalPlan::Ddl(_) | LogicalPlan::Copy(_) | LogicalPlan::Statement(_))
        || crate::alter::of(plan).is_some()
}

/// The schema of a finished statement's result: DataFusion's one-column
/// `count` for DML, nothing for DDL.
fn outcome_schema(count: Option<u64>) -> SchemaRef {
    match count {
        Some(_) => Arc::new(Schema::new(vec![Field::new("count", DataType::UInt64, false)])),
        None => Arc::new(Schema::empty()),
    }
}

fn schema_ipc(schema: &Schema) -> Result<bytes::Bytes, Status> {
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(|e| Status::internal(format!("encoding a schema: {e}")))?;
    Ok(bytes)
}

/// `FlightInfo` whose single ticket is the metadata command itself.
fn metadata_info(
    command: &impl ProstMessageExt,
    schema: &Schema,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let endpoint = FlightEndpoint::new().with_ticket(Ticket::new(command.as_any().encode_to_vec()));
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("encoding a schema: {e}")))?
        .with_endpoint(endpoint)
        .with_descriptor(descriptor);
    Ok(Response::new(info))
}

#[tonic::async_trait]
impl FlightSqlService for QuiverFlightSql {
    type FlightService = QuiverFlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>, Status> {
        let header = request.metadata().get("authorization").and_then(|v| v.to_str().ok());
        let peer = request.remote_addr().map(|a| a.ip());
        let token = self.auth.handshake_from(peer, header)?;
        let reply = HandshakeResponse { protocol_version: 0, payload: token.clone().into() };
        let mut response: Response<Pin<Box<dyn Stream<Item = _> + Send>>> =
            Response::new(Box::pin(stream::iter([Ok(reply)])));
        if !token.is_empty() {
            let value = MetadataValue::try_from(format!("Bearer {token}"))
                .map_err(|_| Status::internal("bearer token is not a valid header value"))?;
            response.metadata_mut().insert("authorization", value);
        }
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        if query.transaction_id.is_some() {
            return Err(Status::invalid_argument("quiverdb does not support transactions"));
        }
        debug!(sql = %query.query, "statement");
        self.statement_info(query.query, None, request.into_inner()).await
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let Handle::Prepared { sql, params } = Handle::decode(&query.prepared_statement_handle)? else {
            return Err(Status::invalid_argument("not a prepared statement handle"));
        };
        self.statement_info(sql, params, request.into_inner()).await
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        metadata_info(&query, &schema, request.into_inner())
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        metadata_info(&query, &schema, request.into_inner())
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        metadata_info(&query, &schema, request.into_inner())
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        metadata_info(&query, &schema, request.into_inner())
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let info = SQL_INFO.as_ref().map_err(|e| Status::internal(e.clone()))?;
        metadata_info(&query, &info.schema(), request.into_inner())
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        metadata_info(&query, &primary_keys_schema(), request.into_inner())
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let types = XDBC_TYPES.as_ref().map_err(|e| Status::internal(e.clone()))?;
        metadata_info(&query, &types.schema(), request.into_inner())
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let handle = Handle::decode(&ticket.statement_handle)?;
        self.run_handle(handle, Some(ticket.statement_handle)).await
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.run_handle(Handle::decode(&query.prepared_statement_handle)?, None).await
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let mut builder: GetCatalogsBuilder = query.into_builder();
        builder.append(DEFAULT_CATALOG);
        self.one_batch(builder.build())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let mut builder: GetDbSchemasBuilder = query.into_builder();
        builder.append(DEFAULT_CATALOG, DEFAULT_SCHEMA);
        for schema in self.db.schema_names() {
            builder.append(DEFAULT_CATALOG, schema);
        }
        builder.append(DEFAULT_CATALOG, INFORMATION_SCHEMA);
        self.one_batch(builder.build())
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let mut builder: GetTablesBuilder = query.into_builder();
        let mut schemas = vec![DEFAULT_SCHEMA.to_string()];
        schemas.extend(self.db.schema_names());
        schemas.push(INFORMATION_SCHEMA.to_string());
        for schema in &schemas {
            for (name, kind, table_schema) in self.tables_of(schema).await {
                let table_schema = client_schema(&table_schema);
                builder.append(DEFAULT_CATALOG, schema, name, kind, &table_schema).map_err(flight_status)?;
            }
        }
        self.one_batch(builder.build())
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let mut builder = query.into_builder();
        builder.append("TABLE");
        builder.append("VIEW");
        self.one_batch(builder.build())
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let info = SQL_INFO.as_ref().map_err(|e| Status::internal(e.clone()))?;
        self.one_batch(query.into_builder(info).build())
    }

    async fn do_get_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.one_batch(primary_keys(&self.db, &query).map_err(FlightError::Arrow))
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let types = XDBC_TYPES.as_ref().map_err(|e| Status::internal(e.clone()))?;
        self.one_batch(query.into_builder(types).build())
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        if command.transaction_id.is_some() {
            return Err(Status::invalid_argument("quiverdb does not support transactions"));
        }
        debug!(sql = %command.query, "update");
        if let Some(cancel) = cancel_target(&command.query) {
            self.cancel(cancel?)?;
            return Ok(0);
        }
        let plan = self.plan_statement(&command.query).await?.0;
        let count = if is_query(&plan) {
            // A query run as an update: run it, report its row count.
            self.registered(&command.query, false, |this| async move {
                let mut rows = 0u64;
                let mut batches = this.execute_optimized(this.optimize(&plan)?).await?;
                while let Some(batch) = batches.next().await {
                    rows += batch.map_err(df_status)?.num_rows() as u64;
                }
                Ok(Some(rows))
            })
            .await?
        } else {
            self.registered(&command.query, true, |this| this.run_mutations(vec![plan])).await?
        };
        Ok(count.map_or(0, |n| i64::try_from(n).unwrap_or(i64::MAX)))
    }

    async fn do_put_statement_ingest(
        &self,
        command: CommandStatementIngest,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        if command.transaction_id.is_some() {
            return Err(Status::invalid_argument("quiverdb does not support transactions"));
        }
        if command.temporary {
            return Err(Status::invalid_argument("quiverdb has no temporary tables"));
        }
        if command.catalog.as_deref().is_some_and(|c| c != DEFAULT_CATALOG) {
            return Err(Status::not_found(format!(
                "no catalog '{}' (quiverdb has '{DEFAULT_CATALOG}')",
                command.catalog.unwrap_or_default()
            )));
        }
        if command.table.is_empty() {
            return Err(Status::invalid_argument("ingest names no table"));
        }
        let Some(name) = stored_name(&self.db, command.schema.as_deref(), &command.table) else {
            return Err(match command.schema {
                Some(schema) if schema != DEFAULT_SCHEMA => {
                    Status::not_found(format!("schema '{schema}' does not exist"))
                }
                _ => Status::invalid_argument(format!(
                    "a table of schema '{DEFAULT_SCHEMA}' cannot be named '{}' while a schema of that prefix exists",
                    command.table
                )),
            });
        };
        let options = command.table_definition_options.unwrap_or_default();
        let if_not_exist =
            TableNotExistOption::try_from(options.if_not_exist).unwrap_or(TableNotExistOption::Unspecified);
        let if_exists = TableExistsOption::try_from(options.if_exists).unwrap_or(TableExistsOption::Unspecified);
        // The batches stream into the table's transaction as they arrive
        // (the request is never held whole); the table appears, or the
        // rows commit, only once the last one is in.
        let mut stream = self.batch_stream(request);
        let first = stream.next().await?;
        let schema = match (stream.schema(), &first) {
            (Some(schema), _) => Arc::clone(schema),
            (None, Some(batch)) => batch.schema(),
            (None, None) => Arc::new(Schema::empty()),
        };
        let exists = self.db.contains_table(&name);
        let target = match (exists, if_exists, if_not_exist) {
            (true, TableExistsOption::Append, _) => IngestInto::Append(self.db.table(&name).map_err(storage_status)?),
            (true, TableExistsOption::Replace, _) => IngestInto::Create { replace: true },
            (true, _, _) => {
                return Err(Status::already_exists(format!("table '{name}' already exists")));
            }
            (false, _, TableNotExistOption::Create) => IngestInto::Create { replace: false },
            (false, _, _) => {
                return Err(Status::not_found(format!(
                    "table '{name}' does not exist (ingest with mode create to create it)"
                )));
            }
        };
        let mut budget = TableMemoryLimit::of(self.ctx.state().config()).map(|l| l.budget());
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Incoming>(2);
        let (db, options, table_name) = (self.db.clone(), self.table_options.clone(), name.clone());
        let writer = tokio::task::spawn_blocking(move || {
            let fill = move |table: &quiverdb_storage::Table| {
                table.try_transaction(move |t| {
                    let mut rows = 0;
                    loop {
                        match rx.blocking_recv() {
                            Some(Incoming::Batch(batch)) => rows += t.append(&batch)?,
                            Some(Incoming::End) => return Ok(rows),
                            // The reading side failed: roll back.
                            None => return Err(IngestError::InputFailed),
                        }
                    }
                })
            };
            match target {
                IngestInto::Append(table) => fill(&table),
                IngestInto::Create { replace } => db.create_table_with(&table_name, &schema, options, replace, fill),
            }
        });
        let reader = async move {
            let mut next = first;
            while let Some(batch) = next {
                if let Some(budget) = &mut budget {
                    budget.add(row_bytes(&batch)).map_err(df_status)?;
                }
                if tx.send(Incoming::Batch(batch)).await.is_err() {
                    // The writer failed; its error is reported below.
                    return Ok(());
                }
                next = stream.next().await?;
            }
            let _ = tx.send(Incoming::End).await;
            Ok::<(), Status>(())
        };
        let (read, written) = futures::join!(reader, writer);
        read?;
        let rows = match written.map_err(|e| Status::internal(format!("an ingest panicked: {e}")))? {
            Ok(rows) => rows,
            Err(IngestError::Storage(e)) => return Err(storage_status(e)),
            Err(IngestError::InputFailed) => return Err(Status::aborted("the ingest's input failed")),
        };
        debug!(table = %name, rows, "ingest");
        self.forget_stale_plans();
        Ok(i64::try_from(rows).unwrap_or(i64::MAX))
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let Handle::Prepared { sql, .. } = Handle::decode(&query.prepared_statement_handle)? else {
            return Err(Status::invalid_argument("not a prepared statement handle"));
        };
        let params = self.read_params(request).await?;
        let handle = Handle::Prepared { sql, params }.encode()?;
        Ok(DoPutPreparedStatementResult { prepared_statement_handle: Some(handle) })
    }

    async fn do_put_prepared_statement_update(
        &self,
        query: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let Handle::Prepared { sql, params } = Handle::decode(&query.prepared_statement_handle)? else {
            return Err(Status::invalid_argument("not a prepared statement handle"));
        };
        if let Some(cancel) = cancel_target(&sql) {
            self.cancel(cancel?)?;
            return Ok(0);
        }
        // Parameters come with this call, or were bound before.
        let params = self.read_params(request).await?.or(params);
        let plan = self.plan_statement(&sql).await?.0;
        if is_query(&plan) {
            return Err(Status::invalid_argument("a query cannot run as an update; execute it as a query"));
        }
        let _held = params.as_ref().map(|p| self.reserve_params(p)).transpose()?;
        let bound = Self::bind(plan, params.as_ref())?;
        let count = self.registered(&sql, true, |this| this.run_mutations(bound)).await?;
        Ok(count.map_or(0, |n| i64::try_from(n).unwrap_or(i64::MAX)))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        _request: Request<arrow_flight::Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        if query.transaction_id.is_some() {
            return Err(Status::invalid_argument("quiverdb does not support transactions"));
        }
        if let Some(cancel) = cancel_target(&query.query) {
            // Runs when executed (JDBC prepares every statement): no result set.
            cancel?;
            let handle = Handle::Prepared { sql: query.query, params: None }.encode()?;
            let empty = schema_ipc(&Schema::empty())?;
            return Ok(ActionCreatePreparedStatementResult {
                prepared_statement_handle: handle,
                dataset_schema: empty.clone(),
                parameter_schema: empty,
            });
        }
        let plan = self.plan(&query.query).await?;
        // DDL and DML produce no result set: an empty dataset schema, which
        // JDBC reads as an update (and then reports its affected rows).
        let dataset = if is_query(&plan) { self.unbound_schema(&plan).as_ref().clone() } else { Schema::empty() };
        let types = plan.get_parameter_types().map_err(df_status)?;
        let mut names: Vec<&String> = types.keys().collect();
        // $1, $2, ..., $10 in numeric order; named parameters after.
        names.sort_by_key(|n| {
            (n.strip_prefix('$').and_then(|d| d.parse::<u64>().ok()).unwrap_or(u64::MAX), n.to_string())
        });
        let fields: Vec<Field> = names
            .into_iter()
            .map(|n| Field::new(n.as_str(), types[n].clone().unwrap_or(DataType::Null), true))
            .collect();
        let handle = Handle::Prepared { sql: query.query, params: None }.encode()?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle,
            dataset_schema: schema_ipc(&dataset)?,
            parameter_schema: schema_ipc(&Schema::new(fields))?,
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        _request: Request<arrow_flight::Action>,
    ) -> Result<(), Status> {
        // Handles are stateless: nothing to free, but reject garbage.
        Handle::decode(&query.prepared_statement_handle).map(drop)
    }

    async fn do_action_cancel_query(
        &self,
        query: ActionCancelQueryRequest,
        _request: Request<arrow_flight::Action>,
    ) -> Result<ActionCancelQueryResult, Status> {
        let info = FlightInfo::decode(&*query.info)
            .map_err(|e| Status::invalid_argument(format!("CancelQuery needs a FlightInfo: {e}")))?;
        self.cancel_info(&info)?;
        // `CancelResult::Cancelled`, numbered as `CancelStatus::Cancelled`.
        Ok(ActionCancelQueryResult { result: CancelStatus::Cancelled as i32 })
    }

    async fn do_action_fallback(
        &self,
        request: Request<arrow_flight::Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        let action = request.into_inner();
        if action.r#type != CANCEL_FLIGHT_INFO {
            return Err(Status::invalid_argument(format!("unsupported action: {}", action.r#type)));
        }
        let request = CancelFlightInfoRequest::decode(&*action.body)
            .map_err(|e| Status::invalid_argument(format!("CancelFlightInfo: {e}")))?;
        let info = request.info.ok_or_else(|| Status::invalid_argument("CancelFlightInfo names no FlightInfo"))?;
        self.cancel_info(&info)?;
        let result = CancelFlightInfoResult { status: CancelStatus::Cancelled as i32 };
        let body = arrow_flight::Result { body: result.encode_to_vec().into() };
        Ok(Response::new(Box::pin(stream::iter([Ok(body)]))))
    }

    async fn list_custom_actions(&self) -> Option<Vec<Result<arrow_flight::ActionType, Status>>> {
        Some(vec![Ok(arrow_flight::ActionType {
            r#type: CANCEL_FLIGHT_INFO.into(),
            description:
                "Cancels the statement of a FlightInfo: its running fetches fail with Cancelled, and so do later ones."
                    .into(),
        })])
    }

    async fn do_get_fallback(
        &self,
        _request: Request<Ticket>,
        message: Any,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        Err(Status::invalid_argument(format!("unsupported ticket type: {}", message.type_url)))
    }

    async fn get_flight_info_fallback(
        &self,
        command: arrow_flight::sql::Command,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(Status::invalid_argument(format!("unsupported Flight SQL command: {}", command.type_url())))
    }

    async fn do_put_fallback(
        &self,
        _request: Request<PeekableFlightDataStream>,
        message: Any,
    ) -> Result<Response<<Self as FlightService>::DoPutStream>, Status> {
        Err(Status::invalid_argument(format!("unsupported DoPut command: {}", message.type_url)))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

/// Where an ingest's rows go.
enum IngestInto {
    /// Into this existing table.
    Append(quiverdb_storage::Table),
    /// Into a new table, in place of one of the same name if `replace`.
    Create { replace: bool },
}

/// Why an ingest's transaction rolled back.
enum IngestError {
    Storage(quiverdb_storage::Error),
    /// The request's data stopped with an error (reported on its own).
    InputFailed,
}

impl From<quiverdb_storage::Error> for IngestError {
    fn from(e: quiverdb_storage::Error) -> Self {
        Self::Storage(e)
    }
}
