//! Catalog metadata for Flight SQL clients: SqlInfo, XDBC type info,
//! tables and primary keys.

use std::sync::{Arc, LazyLock};

use arrow_array::builder::{Int32Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_flight::sql::metadata::{
    SqlInfoData, SqlInfoDataBuilder, XdbcTypeInfo, XdbcTypeInfoData, XdbcTypeInfoDataBuilder,
};
use arrow_flight::sql::{
    CommandGetPrimaryKeys, Nullable, Searchable, SqlInfo, SqlNullOrdering, SqlSupportedCaseSensitivity,
    SqlSupportedTransaction, SupportedSqlGrammar, XdbcDataType,
};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use quiverdb_storage::Database;

use crate::catalog::{DEFAULT_SCHEMA, stored_name};
use crate::session::DEFAULT_CATALOG;

/// The schema DataFusion's `information_schema` views live in.
pub(crate) const INFORMATION_SCHEMA: &str = "information_schema";

/// What `GetSqlInfo` reports.
pub(crate) static SQL_INFO: LazyLock<Result<SqlInfoData, String>> = LazyLock::new(|| {
    let mut b = SqlInfoDataBuilder::new();
    b.append(SqlInfo::FlightSqlServerName, "quiverdb");
    b.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    // The Arrow columnar format version (Schema.fbs MetadataVersion V5).
    b.append(SqlInfo::FlightSqlServerArrowVersion, "1.5");
    b.append(SqlInfo::FlightSqlServerReadOnly, false);
    b.append(SqlInfo::FlightSqlServerSql, true);
    b.append(SqlInfo::FlightSqlServerSubstrait, false);
    b.append(SqlInfo::FlightSqlServerTransaction, SqlSupportedTransaction::None as i32);
    b.append(SqlInfo::FlightSqlServerCancel, false);
    b.append(SqlInfo::FlightSqlServerBulkIngestion, true);
    b.append(SqlInfo::FlightSqlServerIngestTransactionsSupported, false);
    b.append(SqlInfo::FlightSqlServerStatementTimeout, 0i32);
    b.append(SqlInfo::FlightSqlServerTransactionTimeout, 0i32);
    b.append(SqlInfo::SqlDdlCatalog, false);
    b.append(SqlInfo::SqlDdlSchema, false);
    b.append(SqlInfo::SqlDdlTable, true);
    b.append(SqlInfo::SqlIdentifierCase, SqlSupportedCaseSensitivity::SqlCaseSensitivityLowercase as i32);
    b.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    b.append(SqlInfo::SqlQuotedIdentifierCase, SqlSupportedCaseSensitivity::SqlCaseSensitivityCaseInsensitive as i32);
    b.append(SqlInfo::SqlAllTablesAreSelectable, true);
    b.append(SqlInfo::SqlNullOrdering, SqlNullOrdering::SqlNullsSortedHigh as i32);
    b.append(SqlInfo::SqlSupportedGrammar, SupportedSqlGrammar::SqlCoreGrammar as i32);
    b.append(SqlInfo::SqlSchemaTerm, "schema");
    b.append(SqlInfo::SqlCatalogTerm, "catalog");
    b.append(SqlInfo::SqlProcedureTerm, "procedure");
    b.append(SqlInfo::SqlCatalogAtStart, true);
    b.append(SqlInfo::SqlSelectForUpdateSupported, false);
    b.append(SqlInfo::SqlStoredProceduresSupported, false);
    b.append(SqlInfo::SqlTransactionsSupported, false);
    b.append(SqlInfo::SqlMaxColumnsInTable, 0i64);
    b.append(SqlInfo::SqlSearchStringEscape, "\\");
    b.build().map_err(|e| e.to_string())
});

/// What `GetXdbcTypeInfo` reports: the SQL types quiverdb tables store.
pub(crate) static XDBC_TYPES: LazyLock<Result<XdbcTypeInfoData, String>> = LazyLock::new(|| {
    let mut b = XdbcTypeInfoDataBuilder::new();
    let types: [(&str, XdbcDataType, Option<i32>, Option<&str>); 11] = [
        ("BOOLEAN", XdbcDataType::XdbcBit, Some(1), None),
        ("TINYINT", XdbcDataType::XdbcTinyint, Some(3), None),
        ("SMALLINT", XdbcDataType::XdbcSmallint, Some(5), None),
        ("INTEGER", XdbcDataType::XdbcInteger, Some(10), None),
        ("BIGINT", XdbcDataType::XdbcBigint, Some(19), None),
        ("REAL", XdbcDataType::XdbcReal, Some(24), None),
        ("DOUBLE", XdbcDataType::XdbcDouble, Some(53), None),
        ("DECIMAL", XdbcDataType::XdbcDecimal, Some(38), Some("precision,scale")),
        ("VARCHAR", XdbcDataType::XdbcVarchar, None, None),
        ("VARBINARY", XdbcDataType::XdbcVarbinary, None, None),
        ("DATE", XdbcDataType::XdbcDate, Some(10), None),
    ];
    let numeric = |t: XdbcDataType| {
        !matches!(t, XdbcDataType::XdbcVarchar | XdbcDataType::XdbcVarbinary | XdbcDataType::XdbcDate)
    };
    for (name, data_type, column_size, create_params) in types {
        let text = matches!(data_type, XdbcDataType::XdbcVarchar);
        b.append(XdbcTypeInfo {
            type_name: name.into(),
            data_type,
            column_size,
            literal_prefix: text.then(|| "'".into()),
            literal_suffix: text.then(|| "'".into()),
            create_params: create_params.map(|p| p.split(',').map(String::from).collect()),
            nullable: Nullable::NullabilityNullable,
            case_sensitive: text,
            searchable: Searchable::Full,
            unsigned_attribute: numeric(data_type).then_some(false),
            fixed_prec_scale: matches!(data_type, XdbcDataType::XdbcDecimal),
            auto_increment: numeric(data_type).then_some(false),
            local_type_name: Some(name.into()),
            minimum_scale: None,
            maximum_scale: matches!(data_type, XdbcDataType::XdbcDecimal).then_some(38),
            sql_data_type: data_type,
            datetime_subcode: None,
            num_prec_radix: numeric(data_type).then_some(10),
            interval_precision: None,
        });
    }
    b.append(XdbcTypeInfo {
        type_name: "TIMESTAMP".into(),
        data_type: XdbcDataType::XdbcTimestamp,
        column_size: Some(26),
        literal_prefix: Some("TIMESTAMP '".into()),
        literal_suffix: Some("'".into()),
        create_params: None,
        nullable: Nullable::NullabilityNullable,
        case_sensitive: false,
        searchable: Searchable::Full,
        unsigned_attribute: None,
        fixed_prec_scale: false,
        auto_increment: None,
        local_type_name: Some("TIMESTAMP".into()),
        minimum_scale: Some(0),
        maximum_scale: Some(9),
        sql_data_type: XdbcDataType::XdbcDatetime,
        datetime_subcode: None,
        num_prec_radix: None,
        interval_precision: None,
    });
    b.build().map_err(|e| e.to_string())
});

/// The schema of a `GetPrimaryKeys` result (Flight SQL's `CommandGetPrimaryKeys`).
pub(crate) fn primary_keys_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ]))
}

/// The primary-key columns of the table `query` names (none if the table
/// does not exist or is in another catalog or schema).
pub(crate) fn primary_keys(db: &Database, query: &CommandGetPrimaryKeys) -> Result<RecordBatch, ArrowError> {
    let mut catalog = StringBuilder::new();
    let mut schema = StringBuilder::new();
    let mut table = StringBuilder::new();
    let mut column = StringBuilder::new();
    let mut key = StringBuilder::new();
    let mut sequence = Int32Builder::new();
    let ours = query.catalog.as_deref().is_none_or(|c| c == DEFAULT_CATALOG);
    let stored = ours.then(|| stored_name(db, query.db_schema.as_deref(), &query.table)).flatten();
    if let Some(found) = stored.and_then(|stored| db.table(&stored).ok()) {
        for (i, name) in found.options().primary_key.iter().enumerate() {
            catalog.append_value(DEFAULT_CATALOG);
            schema.append_value(query.db_schema.as_deref().unwrap_or(DEFAULT_SCHEMA));
            table.append_value(&query.table);
            column.append_value(name);
            key.append_value(format!("{}_pkey", query.table));
            sequence.append_value(i32::try_from(i + 1).unwrap_or(i32::MAX));
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(catalog.finish()),
        Arc::new(schema.finish()),
        Arc::new(table.finish()),
        Arc::new(column.finish()),
        Arc::new(key.finish()),
        Arc::new(sequence.finish()),
    ];
    RecordBatch::try_new(primary_keys_schema(), columns)
}
