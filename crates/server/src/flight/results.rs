//! Query results as a Flight SQL client receives them: the schema it is
//! told (at `GetFlightInfo` and in the stream) and every batch in exactly
//! that schema, converted without loss.
//!
//! ```text
//!   optimized plan's schema ──client_schema──▶ announced schema
//!     (after type coercion)                      Utf8View → Utf8, BinaryView → Binary,
//!                                                Dictionary(K, V) → V, LargeList → List,
//!                                                inside lists, structs and maps too
//!   each result batch ──to_client_batch──▶ the announced types: only the
//!                                          conversions above, checked (no NULL
//!                                          for a value that does not fit);
//!                                          any other difference is an error
//! ```
//!
//! Views become plain arrays because every Flight SQL client reads those
//! (JDBC drivers do not all read views), and a slice of a view array would
//! still carry all of its data buffers, so batches could not be split below
//! the message size bound. Dictionaries are sent as their values: the
//! schema of a result must not depend on how one engine encoded it. Large
//! lists are sent as lists because arrow-flight's encoder converts them
//! (whatever it is given): the schema announced at `GetFlightInfo` must be
//! the one the stream carries, or clients refuse the result.

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::{DataType, FieldRef, Fields, Schema, SchemaRef};
use datafusion::error::DataFusionError;

/// The type a client receives for a result column of type `t`.
pub(super) fn client_type(t: &DataType) -> DataType {
    match t {
        DataType::Utf8View => DataType::Utf8,
        DataType::BinaryView => DataType::Binary,
        DataType::Dictionary(_, values) => client_type(values),
        DataType::List(f) => DataType::List(client_field(f)),
        // arrow-flight's encoder sends every large list as a list (casting
        // it, checked): announce what it sends.
        DataType::LargeList(f) => DataType::List(client_field(f)),
        DataType::FixedSizeList(f, n) => DataType::FixedSizeList(client_field(f), *n),
        DataType::Struct(fields) => DataType::Struct(client_fields(fields)),
        DataType::Map(f, sorted) => DataType::Map(client_field(f), *sorted),
        other => other.clone(),
    }
}

fn client_field(f: &FieldRef) -> FieldRef {
    Arc::new(f.as_ref().clone().with_data_type(client_type(f.data_type())))
}

fn client_fields(fields: &Fields) -> Fields {
    fields.iter().map(client_field).collect()
}

/// The schema a client receives for results of `schema`.
pub(super) fn client_schema(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new_with_metadata(client_fields(schema.fields()), schema.metadata().clone()))
}

/// `batch` in the announced `schema`: each column as it is, or through
/// one of [`client_type`]'s conversions, which lose nothing (a conversion
/// that fails is an error, never a NULL). A column whose type is neither
/// is an error: the schema the client was told would be wrong.
pub(super) fn to_client_batch(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, DataFusionError> {
    if batch.num_columns() != schema.fields().len() {
        return Err(DataFusionError::Internal(format!(
            "a result batch has {} columns, but the client was told {}",
            batch.num_columns(),
            schema.fields().len()
        )));
    }
    let checked = CastOptions { safe: false, ..CastOptions::default() };
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| {
            if column.data_type() == field.data_type() {
                Ok(Arc::clone(column))
            } else if &client_type(column.data_type()) == field.data_type() {
                Ok(cast_with_options(column, field.data_type(), &checked)?)
            } else {
                Err(DataFusionError::Internal(format!(
                    "result column '{}' is {}, but the client was told {}",
                    field.name(),
                    column.data_type(),
                    field.data_type()
                )))
            }
        })
        .collect::<Result<Vec<_>, DataFusionError>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(Arc::clone(schema), columns, &options)?)
}

#[cfg(test)]
mod tests {
    use arrow_array::builder::{ListBuilder, StringViewBuilder};
    use arrow_array::types::Int32Type;
    use arrow_array::{Array, DictionaryArray, Float64Array, Int8Array, Int64Array, StringArray};

    use arrow_schema::Field;

    use super::*;

    fn batch(fields: Vec<Field>, columns: Vec<arrow_array::ArrayRef>) -> RecordBatch {
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    #[test]
    fn dictionaries_and_views_arrive_as_their_plain_values() {
        let dict: DictionaryArray<Int32Type> = vec![Some("a"), None, Some("b"), Some("a")].into_iter().collect();
        let mut list = ListBuilder::new(StringViewBuilder::new());
        for row in 0..4 {
            list.values().append_value(format!("x{row}"));
            list.append(row != 1);
        }
        let list = list.finish();
        let b = batch(
            vec![Field::new("d", dict.data_type().clone(), true), Field::new("l", list.data_type().clone(), true)],
            vec![Arc::new(dict), Arc::new(list)],
        );
        let schema = client_schema(&b.schema());
        assert_eq!(schema.field(0).data_type(), &DataType::Utf8);
        assert_eq!(schema.field(1).data_type(), &DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))));
        let out = to_client_batch(&b, &schema).unwrap();
        assert_eq!(out.schema(), schema);
        let strings = out.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(strings.iter().collect::<Vec<_>>(), vec![Some("a"), None, Some("b"), Some("a")]);
        assert_eq!(out.column(1).null_count(), 1);
    }

    /// A column whose type is not what the client was told is an error:
    /// never a cast that turns what does not fit into NULL.
    #[test]
    fn a_type_the_client_was_not_told_is_an_error_not_a_null() {
        let b = batch(vec![Field::new("x", DataType::Float64, false)], vec![Arc::new(Float64Array::from(vec![1.5]))]);
        let told = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let e = to_client_batch(&b, &told).unwrap_err();
        assert!(e.to_string().contains("result column 'x' is Float64, but the client was told Int64"), "{e}");

        let b = batch(vec![Field::new("x", DataType::Int64, true)], vec![Arc::new(Int64Array::from(vec![1000]))]);
        let told = Arc::new(Schema::new(vec![Field::new("x", DataType::Int8, true)]));
        assert!(to_client_batch(&b, &told).is_err());
        let fits = batch(vec![Field::new("x", DataType::Int8, true)], vec![Arc::new(Int8Array::from(vec![100]))]);
        assert_eq!(to_client_batch(&fits, &told).unwrap().column(0).len(), 1);
    }

    /// The stream arrow-flight's encoder sends carries exactly the schema
    /// the client was told, for every nesting of the types it rewrites.
    #[tokio::test]
    async fn the_stream_carries_the_announced_schema() {
        use arrow_flight::decode::FlightRecordBatchStream;
        use arrow_flight::encode::FlightDataEncoderBuilder;
        use futures::{StreamExt, TryStreamExt};

        let sql = "SELECT arrow_cast([1, 2], 'LargeList(Int64)') AS a, \
                   named_struct('l', arrow_cast(['x'], 'LargeList(Utf8View)')) AS b, \
                   arrow_cast([arrow_cast([1], 'LargeList(Int64)')], 'FixedSizeList(1, LargeList(Int64))') AS c, \
                   MAP {'k': arrow_cast([arrow_cast('v', 'Dictionary(Int32, Utf8)')], 'LargeList(Dictionary(Int32, Utf8))')} AS d, \
                   [arrow_cast('s', 'Utf8View')] AS e";
        let ctx = datafusion::prelude::SessionContext::new();
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let schema = client_schema(&batches[0].schema());
        let client: Vec<RecordBatch> = batches.iter().map(|b| to_client_batch(b, &schema).unwrap()).collect();
        let data = FlightDataEncoderBuilder::new()
            .with_schema(Arc::clone(&schema))
            .build(futures::stream::iter(client.clone().into_iter().map(Ok)));
        let mut decoded = FlightRecordBatchStream::new_from_flight_data(data.map_err(Into::into));
        let mut got = Vec::new();
        while let Some(batch) = decoded.next().await {
            got.push(batch.unwrap());
        }
        assert_eq!(decoded.schema().map(|s| s.as_ref()), Some(schema.as_ref()), "the stream's schema");
        assert_eq!(got, client);
    }
}
