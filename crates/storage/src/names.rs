//! Schemas in the one namespace of tables and views: a table or view in
//! schema `s` is named `s.name`. A name whose part before the first dot is
//! not a schema belongs to the default schema, where names may hold dots;
//! a schema cannot be created while names claiming it exist.

use std::collections::BTreeSet;

use crate::error::{Error, Result};

/// The schema a table or view name places it in: the part before the first
/// `.` when a schema of that name exists (`schemas`), else none (the
/// default schema, where a name may hold dots).
pub fn schema_of<'n>(name: &'n str, schemas: &BTreeSet<String>) -> Option<&'n str> {
    name.split_once('.').map(|(schema, _)| schema).filter(|schema| schemas.contains(*schema))
}

/// Checks that schema `name` may be created over a catalog with these
/// `schemas` and names: a new, non-empty name without dots, that no table
/// or view name already starts with (as `name.`).
pub(crate) fn check_new_schema<'a>(
    name: &str,
    schemas: &BTreeSet<String>,
    mut names: impl Iterator<Item = &'a String>,
) -> Result<()> {
    if name.is_empty() || name.contains('.') {
        return Err(Error::InvalidSchema(format!("'{name}' cannot name a schema: it must be non-empty, without dots")));
    }
    if schemas.contains(name) || names.any(|n| n.split_once('.').is_some_and(|(s, _)| s == name)) {
        return Err(Error::SchemaExists(name.into()));
    }
    Ok(())
}

/// The tables and views of schema `schema`, or an error when it holds some
/// and `cascade` is not set.
pub(crate) fn schema_contents<'a>(
    schema: &str,
    cascade: bool,
    names: impl Iterator<Item = &'a String>,
) -> Result<Vec<String>> {
    let contents: Vec<String> =
        names.filter(|n| n.split_once('.').is_some_and(|(s, _)| s == schema)).cloned().collect();
    match contents.first() {
        Some(first) if !cascade => Err(Error::SchemaNotEmpty { schema: schema.into(), holds: first.clone() }),
        _ => Ok(contents),
    }
}

/// A change to a table's definition that keeps its rows as they are.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Alteration {
    /// `ALTER TABLE t RENAME TO name`.
    RenameTo(String),
    /// `ALTER TABLE t RENAME COLUMN from TO to`.
    RenameColumn {
        /// The column's name.
        from: String,
        /// Its new name.
        to: String,
    },
}

/// The definition of table `name` (`schema`, `options`) after `alteration`:
/// its new name, schema and options (key columns, UNIQUE constraints and
/// defaults follow a renamed column).
pub(crate) fn altered(
    name: &str,
    schema: &arrow_schema::Schema,
    options: &crate::state::TableOptions,
    alteration: &Alteration,
) -> Result<(String, arrow_schema::Schema, crate::state::TableOptions)> {
    match alteration {
        Alteration::RenameTo(new) => Ok((new.clone(), schema.clone(), options.clone())),
        Alteration::RenameColumn { from, to } => {
            let at = schema
                .index_of(from)
                .map_err(|_| Error::ColumnNotFound { table: name.into(), column: from.clone() })?;
            if schema.index_of(to).is_ok() {
                return Err(Error::InvalidSchema(format!("table '{name}' already has a column '{to}'")));
            }
            if to.is_empty() {
                return Err(Error::InvalidSchema("a column name cannot be empty".into()));
            }
            let fields: Vec<arrow_schema::Field> = schema
                .fields()
                .iter()
                .enumerate()
                .map(|(i, f)| if i == at { f.as_ref().clone().with_name(to.clone()) } else { f.as_ref().clone() })
                .collect();
            let rename = |c: &String| if c == from { to.clone() } else { c.clone() };
            let mut options = options.clone();
            options.primary_key = options.primary_key.iter().map(rename).collect();
            options.unique = options.unique.iter().map(|set| set.iter().map(rename).collect()).collect();
            options.column_defaults = options.column_defaults.iter().map(|(c, d)| (rename(c), d.clone())).collect();
            Ok((name.to_string(), arrow_schema::Schema::new_with_metadata(fields, schema.metadata().clone()), options))
        }
    }
}

/// What an ALTER TABLE does to the columns of a table's rows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ColumnChange {
    /// Nothing: the rows stay as they are.
    None,
    /// A column is added at the end, every existing row holding `value`
    /// (a one-row batch of one column).
    Add(arrow_array::RecordBatch),
    /// Column `index` is removed.
    Drop(usize),
}
