//! The Flight SQL ingest command the end-to-end tests send.

use arrow_flight::sql::{CommandStatementIngest, TableDefinitionOptions, TableExistsOption, TableNotExistOption};

/// A `CommandStatementIngest` into `public.table`.
pub(crate) fn ingest_command(
    table: &str,
    if_not_exist: TableNotExistOption,
    if_exists: TableExistsOption,
) -> CommandStatementIngest {
    CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: if_not_exist as i32,
            if_exists: if_exists as i32,
        }),
        table: table.into(),
        schema: None,
        catalog: None,
        temporary: false,
        transaction_id: None,
        options: Default::default(),
    }
}
