//! `ALTER TABLE`, which DataFusion parses but does not plan: quiverdb
//! plans it as a catalog change of its own and runs it on the database.
//!
//! ```text
//!   ALTER TABLE [IF EXISTS] t RENAME TO u            storage renames the table
//!   ALTER TABLE [IF EXISTS] t RENAME COLUMN a TO b   storage renames the column
//! ```
//!
//! Both keep the rows where they are (no data is copied) and are one
//! logged step. Through Flight SQL every client gets them; an embedder runs
//! them with [`crate::sql`] (a `SessionContext`'s own `sql` refuses ALTER,
//! as DataFusion does).

use std::fmt;

use datafusion::common::{DFSchemaRef, DataFusionError, Result, TableReference};
use datafusion::logical_expr::{Expr, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::planner::{IdentNormalizer, object_name_to_table_reference};
use datafusion::sql::sqlparser::ast::{AlterTableOperation, RenameTableNameKind, Statement};
use quiverdb_storage::{Alteration, Database};

use crate::catalog::stored_name;
use crate::error::Error;

/// A planned `ALTER TABLE` (a [`LogicalPlan::Extension`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub(crate) struct AlterTable {
    /// The table's schema (`None`: the default one) and name.
    schema: Option<String>,
    table: String,
    if_exists: bool,
    alteration: Alteration,
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
        write!(f, "AlterTable: {} {:?}", self.table, self.alteration)
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
    let alteration = match operation {
        AlterTableOperation::RenameColumn { old_column_name, new_column_name } => Alteration::RenameColumn {
            from: normalizer.normalize(old_column_name.clone()),
            to: normalizer.normalize(new_column_name.clone()),
        },
        AlterTableOperation::RenameTable { table_name } => {
            let (RenameTableNameKind::To(name) | RenameTableNameKind::As(name)) = table_name;
            let new = match object_name_to_table_reference(name.clone(), normalize)? {
                TableReference::Bare { table } => table.to_string(),
                other => match (other.schema(), &schema) {
                    (Some(s), Some(current)) if s == current => other.table().to_string(),
                    _ => return Err(not_supported("RENAME TO another schema")),
                },
            };
            Alteration::RenameTo(new)
        }
        other => {
            let text = other.to_string();
            let what: String = text.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
            return Err(not_supported(&what));
        }
    };
    let node = AlterTable { schema, table, if_exists: alter.if_exists, alteration };
    Ok(LogicalPlan::Extension(datafusion::logical_expr::Extension { node: std::sync::Arc::new(node) }))
}

/// The `ALTER TABLE` `plan` is, if it is one.
pub(crate) fn of(plan: &LogicalPlan) -> Option<&AlterTable> {
    match plan {
        LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<AlterTable>(),
        _ => None,
    }
}

/// Runs `alter` on `db`.
pub(crate) fn run(db: &Database, alter: &AlterTable) -> Result<()> {
    let schema = alter.schema.as_deref();
    let Some(stored) = stored_name(db, schema, &alter.table).filter(|s| db.contains_table(s)) else {
        if alter.if_exists {
            return Ok(());
        }
        return Err(Error::from(quiverdb_storage::Error::TableNotFound(alter.table.clone())).into());
    };
    let alteration = match &alter.alteration {
        Alteration::RenameTo(new) => match stored_name(db, schema, new) {
            Some(new) => Alteration::RenameTo(new),
            None => {
                return Err(DataFusionError::Plan(format!(
                    "a table of the default schema cannot be named '{new}' while a schema of that prefix exists"
                )));
            }
        },
        other => other.clone(),
    };
    db.alter_table(&stored, &alteration).map_err(Error::from)?;
    Ok(())
}
