//! `ALTER TABLE`, which DataFusion parses but does not plan: quiverdb
//! plans it as a catalog change of its own and runs it on the database.
//!
//! ```text
//!   ALTER TABLE [IF EXISTS] t RENAME TO u            storage renames the table
//!   ALTER TABLE [IF EXISTS] t RENAME COLUMN a TO b   storage renames the column
//!   ALTER TABLE t ADD [COLUMN] [IF NOT EXISTS] c TYPE [NOT NULL] [DEFAULT const]
//!   ALTER TABLE t DROP [COLUMN] [IF EXISTS] c
//! ```
//!
//! Each is one logged step. Renames keep the rows where they are; ADD and
//! DROP keep main storage's encoded columns (an added column is stored
//! constant-encoded, its value the default or NULL) and copy delta rows.
//! Through Flight SQL every client gets them; an embedder runs them with
//! [`crate::sql`] (a `SessionContext`'s own `sql` refuses ALTER, as
//! DataFusion does).

use std::fmt;
use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_schema::Field;
use datafusion::common::{DFSchema, DFSchemaRef, DataFusionError, Result, ScalarValue, TableReference};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{DdlStatement, Expr, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::prelude::{DataFrame, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::planner::{IdentNormalizer, object_name_to_table_reference};
use datafusion::sql::sqlparser::ast::{AlterTableOperation, RenameTableNameKind, Statement};
use datafusion::sql::unparser::expr_to_sql;
use quiverdb_storage::{Alteration, Database};

use crate::catalog::QuiverCatalog;
use crate::catalog::stored_name;
use crate::error::Error;
use crate::session::{DEFAULT_CATALOG, simplifier};

/// Runs `sql` in `ctx` as `SessionContext::sql` does, and also the
/// statements quiverdb plans itself: `ALTER TABLE … RENAME TO` and
/// `RENAME COLUMN`, `ADD COLUMN` and `DROP COLUMN` (see this module); a
/// `CREATE TABLE … AS` counts its rows against the session's memory
/// limit and replaces a table in one step ([`crate::execute`]).
/// `ctx` is a session over a quiverdb database
/// ([`crate::session_context`]).
pub async fn sql(ctx: &SessionContext, sql: &str) -> Result<DataFrame> {
    let state = ctx.state();
    let normalize = state.config().options().sql_parser.enable_ident_normalization;
    let statement = crate::nesting::parse(&state, sql)?;
    let Some(plan) = plan(&statement, normalize) else {
        let plan = state.statement_to_plan(statement).await?;
        crate::nesting::check_plan(&plan)?;
        return crate::execute::execute(ctx, plan).await;
    };
    let plan = plan?;
    let catalog = ctx.catalog(DEFAULT_CATALOG);
    let db = catalog.as_ref().and_then(|c| c.downcast_ref::<QuiverCatalog>()).map(QuiverCatalog::database);
    let (Some(alter), Some(db)) = (of(&plan), db) else {
        return Err(DataFusionError::Plan("ALTER TABLE runs only in a session over a quiverdb database".into()));
    };
    run(db, &state, alter).await?;
    let nothing = LogicalPlan::EmptyRelation(datafusion::logical_expr::EmptyRelation {
        produce_one_row: false,
        schema: Arc::clone(DFSchema::empty_ref()),
    });
    Ok(DataFrame::new(state, nothing))
}

/// A planned `ALTER TABLE` (a [`LogicalPlan::Extension`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub(crate) struct AlterTable {
    /// The table's schema (`None`: the default one) and name.
    schema: Option<String>,
    table: String,
    if_exists: bool,
    operation: Operation,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
enum Operation {
    /// A rename (of the table or a column).
    Rename(Alteration),
    /// A new column, as its SQL definition (planned when it runs).
    AddColumn { definition: String, name: String, if_not_exists: bool },
    /// A column to drop.
    DropColumn { name: String, if_exists: bool },
}

impl UserDefinedLogicalNodeCore for AlterTable {
    fn name(&self) -> &str {
        "AlterTable"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        Vec::new()
    }

    fn schema(&self) -> &DFSchemaRef {
        datafusion::common::DFSchema::empty_ref()
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlterTable: {} {:?}", self.table, self.operation)
    }

    fn with_exprs_and_inputs(&self, _exprs: Vec<Expr>, _inputs: Vec<LogicalPlan>) -> Result<Self> {
        Ok(self.clone())
    }
}

/// The plan of `statement` if it is an `ALTER TABLE`; identifiers are
/// normalized as DataFusion normalizes them when `normalize` is set.
pub(crate) fn plan(statement: &DFStatement, normalize: bool) -> Option<Result<LogicalPlan>> {
    let DFStatement::Statement(statement) = statement else { return None };
    let Statement::AlterTable(alter) = statement.as_ref() else { return None };
    Some(plan_alter(alter, normalize))
}

fn plan_alter(alter: &datafusion::sql::sqlparser::ast::AlterTable, normalize: bool) -> Result<LogicalPlan> {
    let not_supported = |what: &str| DataFusionError::NotImplemented(format!("ALTER TABLE … {what} is not supported"));
    let reference = object_name_to_table_reference(alter.name.clone(), normalize)?;
    let (schema, table) = match reference {
        TableReference::Bare { table } => (None, table.to_string()),
        TableReference::Partial { schema, table } => (Some(schema.to_string()), table.to_string()),
        TableReference::Full { schema, table, .. } => (Some(schema.to_string()), table.to_string()),
    };
    let [operation] = alter.operations.as_slice() else {
        return Err(DataFusionError::NotImplemented("ALTER TABLE takes one operation per statement".into()));
    };
    let normalizer = IdentNormalizer::new(normalize);
    let operation = match operation {
        AlterTableOperation::RenameColumn { old_column_name, new_column_name } => {
            Operation::Rename(Alteration::RenameColumn {
                from: normalizer.normalize(old_column_name.clone()),
                to: normalizer.normalize(new_column_name.clone()),
            })
        }
        AlterTableOperation::AddColumn { if_not_exists, column_def, column_position: None, .. } => {
            Operation::AddColumn {
                definition: column_def.to_string(),
                name: normalizer.normalize(column_def.name.clone()),
                if_not_exists: *if_not_exists,
            }
        }
        AlterTableOperation::DropColumn { column_names, if_exists, drop_behavior: None, .. } => {
            let [column] = column_names.as_slice() else {
                return Err(not_supported("DROP COLUMN of several columns"));
            };
            Operation::DropColumn { name: normalizer.normalize(column.clone()), if_exists: *if_exists }
        }
        AlterTableOperation::RenameTable { table_name } => {
            let (RenameTableNameKind::To(name) | RenameTableNameKind::As(name)) = table_name;
            let new = match object_name_to_table_reference(name.clone(), normalize)? {
                TableReference::Bare { table } => table.to_string(),
                other => match (other.schema(), &schema) {
                    (Some(s), Some(current)) if s == current => other.table().to_string(),
                    _ => return Err(not_supported("RENAME TO another schema")),
                },
            };
            Operation::Rename(Alteration::RenameTo(new))
        }
        other => {
            let text = other.to_string();
            let what: String = text.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
            return Err(not_supported(&what));
        }
    };
    let node = AlterTable { schema, table, if_exists: alter.if_exists, operation };
    Ok(LogicalPlan::Extension(datafusion::logical_expr::Extension { node: std::sync::Arc::new(node) }))
}

/// The `ALTER TABLE` `plan` is, if it is one.
pub(crate) fn of(plan: &LogicalPlan) -> Option<&AlterTable> {
    match plan {
        LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<AlterTable>(),
        _ => None,
    }
}

/// Runs `alter` on `db`; `state` plans an added column's definition.
pub(crate) async fn run(db: &Database, state: &SessionState, alter: &AlterTable) -> Result<()> {
    let schema = alter.schema.as_deref();
    let found = stored_name(db, schema, &alter.table).and_then(|s| Some((db.table(&s).ok()?, s)));
    let Some((table, stored)) = found else {
        if alter.if_exists {
            return Ok(());
        }
        return Err(Error::from(quiverdb_storage::Error::TableNotFound(alter.table.clone())).into());
    };
    let columns = table.arrow_schema();
    match &alter.operation {
        Operation::Rename(Alteration::RenameTo(new)) => {
            let Some(new) = stored_name(db, schema, new) else {
                return Err(DataFusionError::Plan(format!(
                    "a table of the default schema cannot be named '{new}' while a schema of that prefix exists"
                )));
            };
            db.alter_table(&stored, &Alteration::RenameTo(new)).map_err(Error::from)?;
        }
        Operation::Rename(other) => db.alter_table(&stored, other).map_err(Error::from)?,
        Operation::AddColumn { name, if_not_exists: true, .. } if columns.index_of(name).is_ok() => {}
        Operation::AddColumn { definition, .. } => {
            let (field, value, default) = new_column(state, definition).await?;
            db.add_column(&stored, field, value, default).map_err(Error::from)?;
        }
        Operation::DropColumn { name, if_exists: true } if columns.index_of(name).is_err() => {}
        Operation::DropColumn { name, .. } => db.drop_column(&stored, name).map_err(Error::from)?,
    }
    Ok(())
}

/// The field, the value existing rows get, and the default text of a new
/// column with SQL `definition`: planned as DataFusion plans a column of
/// `CREATE TABLE` (types, NOT NULL, DEFAULT). The default must be a
/// constant; constraints on the new column are not supported.
async fn new_column(state: &SessionState, definition: &str) -> Result<(Field, ArrayRef, Option<String>)> {
    let dialect = state.config().options().sql_parser.dialect;
    let statement = state.sql_to_statement(&format!("CREATE TABLE quiverdb_new_column ({definition})"), &dialect)?;
    let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) = state.statement_to_plan(statement).await? else {
        return Err(DataFusionError::Plan(format!("'{definition}' does not define a column")));
    };
    if !create.constraints.is_empty() {
        return Err(DataFusionError::NotImplemented(
            "ALTER TABLE … ADD COLUMN with a PRIMARY KEY or UNIQUE constraint is not supported".into(),
        ));
    }
    let field = create.input.schema().field(0).as_ref().clone();
    let Some(default) = create.column_defaults.first().map(|(_, e)| e.clone()) else {
        let value = ScalarValue::try_from(field.data_type())?.to_array_of_size(1)?;
        return Ok((field, value, None));
    };
    let text = expr_to_sql(&default).map_err(|e| {
        DataFusionError::NotImplemented(format!(
            "the default of column '{}' ({default}) cannot be stored: {e}",
            field.name()
        ))
    })?;
    let simplified = simplifier(DFSchema::empty_ref(), state.config_options()).simplify(default.clone())?;
    let Expr::Literal(value, _) = simplified else {
        return Err(DataFusionError::NotImplemented(format!(
            "the default of added column '{}' must be a constant, not {default}",
            field.name()
        )));
    };
    let value = value.cast_to(field.data_type())?.to_array_of_size(1)?;
    Ok((field, value, Some(text.to_string())))
}
