//! The Arrow data of a `DoPut`, decoded as it arrives.
//!
//! Each message is checked first ([`IpcChecker`]), then decoded by
//! arrow-ipc. Arrow validates what it decodes (offsets, UTF-8, null
//! counts, dictionary keys): for a bulk load of text that was the largest
//! cost of the server's reading side, a UTF-8 check per string of a
//! string view column (a function call for a value of a few bytes).
//!
//! A batch whose columns are all flat (no children, no dictionary: the
//! primitive, boolean, decimal, temporal, binary and string types) is
//! therefore decoded without arrow's validation and validated here,
//! whole, before anything reads it: [`validate_flat`] runs arrow's own
//! checks except for string views, whose data buffers are checked as
//! UTF-8 once each and their views for bounds, prefixes and character
//! boundaries ([`validate_utf8_views`]); a buffer that is not UTF-8 as a
//! whole falls back to arrow's check per value. Building the arrays of
//! such a batch reads no value and panics on nothing the checker passes:
//! it refuses buffers too short for their arrays, validity bitmaps short
//! of their values, and slices outside the body. Other batches are
//! decoded with arrow's validation.

use std::collections::HashMap;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_buffer::Buffer;
use arrow_data::{ArrayData, ByteView, UnsafeFlag};
use arrow_flight::FlightData;
use arrow_ipc::MessageHeader;
use arrow_schema::{ArrowError, DataType, Schema, SchemaRef};
use futures::StreamExt;
use futures::stream::BoxStream;
use tonic::Status;

use super::ipc_check::IpcChecker;

/// A `DoPut`'s record batches, checked and decoded one message at a time.
pub(crate) struct IncomingBatches {
    input: BoxStream<'static, Result<FlightData, Status>>,
    checker: IpcChecker,
    decoding: Decoding,
}

impl std::fmt::Debug for IncomingBatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncomingBatches").field("decoding", &self.decoding).finish_non_exhaustive()
    }
}

impl IncomingBatches {
    /// Batches of `input`; `max_decompressed`: what the compressed buffers
    /// of one message may expand to ([`IpcChecker::new`]).
    pub(crate) fn new(input: BoxStream<'static, Result<FlightData, Status>>, max_decompressed: usize) -> Self {
        Self { input, checker: IpcChecker::new(max_decompressed), decoding: Decoding::default() }
    }

    /// The stream's schema, once its schema message has arrived.
    pub(crate) fn schema(&self) -> Option<&SchemaRef> {
        self.decoding.schema.as_ref()
    }

    /// The next record batch; `None` at the end of the stream. A message
    /// without an IPC header (a `DoPut` may open with the command alone)
    /// is skipped.
    pub(crate) async fn next(&mut self) -> Result<Option<RecordBatch>, Status> {
        while let Some(data) = self.input.next().await.transpose()? {
            if data.data_header.is_empty() {
                continue;
            }
            self.checker
                .check(&data.data_header, &data.data_body)
                .map_err(|e| Status::invalid_argument(format!("malformed Arrow data: {e}")))?;
            let decoded = self
                .decoding
                .decode(&data.data_header, data.data_body)
                .map_err(|e| Status::invalid_argument(format!("malformed Arrow data: {e}")))?;
            if let Some(batch) = decoded {
                return Ok(Some(batch));
            }
        }
        Ok(None)
    }
}

/// What decoding a stream remembers: its schema, whether it is flat, and
/// its dictionaries.
#[derive(Debug, Default)]
pub(crate) struct Decoding {
    schema: Option<SchemaRef>,
    /// Every column of the schema is of a flat type ([`is_flat`]).
    flat: bool,
    dictionaries: HashMap<i64, ArrayRef>,
}

impl Decoding {
    /// Decodes one message, which [`IpcChecker::check`] passed: a record
    /// batch comes back, validated; a schema or dictionary is kept.
    pub(crate) fn decode(&mut self, header: &[u8], body: bytes::Bytes) -> Result<Option<RecordBatch>, ArrowError> {
        let message = arrow_ipc::root_as_message(header).map_err(|e| ArrowError::ParseError(e.to_string()))?;
        let missing = |what: &str| ArrowError::ParseError(format!("a {what} message without its {what}"));
        match message.header_type() {
            MessageHeader::Schema => {
                let schema: Schema = arrow_ipc::convert::try_schema_from_flatbuffer_bytes(header)?;
                self.flat = schema.fields().iter().all(|f| is_flat(f.data_type()));
                self.schema = Some(SchemaRef::new(schema));
                self.dictionaries.clear();
                Ok(None)
            }
            MessageHeader::DictionaryBatch => {
                let schema = self.schema.as_ref().ok_or_else(|| ArrowError::ParseError("no schema".into()))?;
                let batch = message.header_as_dictionary_batch().ok_or_else(|| missing("dictionary batch"))?;
                let version = message.version();
                arrow_ipc::reader::read_dictionary(
                    &Buffer::from(body),
                    batch,
                    schema,
                    &mut self.dictionaries,
                    &version,
                )?;
                Ok(None)
            }
            MessageHeader::RecordBatch => {
                let schema = self.schema.clone().ok_or_else(|| ArrowError::ParseError("no schema".into()))?;
                let batch = message.header_as_record_batch().ok_or_else(|| missing("record batch"))?;
                // 64-byte aligned, as arrow-flight decodes it: copied when
                // it is not, so no buffer is copied on its own.
                let body =
                    if body.as_ptr().align_offset(64) == 0 { Buffer::from(body) } else { Buffer::from(body.as_ref()) };
                let version = message.version();
                let mut unchecked = UnsafeFlag::new();
                if self.flat {
                    // SAFETY: the batch's columns are flat and the checker
                    // passed the message: building them reads no value
                    // (module docs), and `validate_flat` checks them before
                    // the batch leaves this function.
                    unsafe { unchecked.set(true) };
                }
                let decoded =
                    arrow_ipc::reader::RecordBatchDecoder::try_new(&body, batch, schema, &self.dictionaries, &version)?
                        .with_skip_validation(unchecked)
                        .read_record_batch()?;
                if self.flat {
                    validate_flat(&decoded)?;
                }
                Ok(Some(decoded))
            }
            other => Err(ArrowError::ParseError(format!(
                "an unexpected {} message",
                other.variant_name().unwrap_or("unknown")
            ))),
        }
    }
}

/// Whether arrays of `data_type` have no children and no dictionary.
pub(super) fn is_flat(data_type: &DataType) -> bool {
    data_type.is_primitive()
        || matches!(
            data_type,
            DataType::Null
                | DataType::Boolean
                | DataType::FixedSizeBinary(_)
                | DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Binary
                | DataType::LargeBinary
                | DataType::Utf8View
                | DataType::BinaryView
        )
}

/// What arrow's validation of a record batch of flat columns checks:
/// each column's layout, null count and values, its length, and no null
/// in a column its field says has none.
pub(crate) fn validate_flat(batch: &RecordBatch) -> Result<(), ArrowError> {
    let schema = batch.schema();
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        let invalid = |e: ArrowError| {
            let problem = match e {
                ArrowError::InvalidArgumentError(problem) => problem,
                other => other.to_string(),
            };
            ArrowError::InvalidArgumentError(format!("column '{}': {problem}", field.name()))
        };
        if column.data_type() != field.data_type() || column.len() != batch.num_rows() {
            return Err(invalid(ArrowError::InvalidArgumentError(format!(
                "{} values of {}, in a batch of {} rows of {}",
                column.len(),
                column.data_type(),
                batch.num_rows(),
                field.data_type()
            ))));
        }
        let data = column.to_data();
        if !data.child_data().is_empty() {
            return Err(invalid(ArrowError::InvalidArgumentError("a flat column with children".into())));
        }
        data.validate().map_err(invalid)?;
        data.validate_nulls().map_err(invalid)?;
        match data.data_type() {
            DataType::Utf8View => validate_utf8_views(&data).map_err(invalid)?,
            _ => data.validate_values().map_err(invalid)?,
        }
        if !field.is_nullable() && column.null_count() > 0 {
            return Err(invalid(ArrowError::InvalidArgumentError("nulls in a column declared non-nullable".into())));
        }
    }
    Ok(())
}

/// Arrow's check of a string view array (`data`, laid out as `validate`
/// found): each view within its buffer and matching its prefix, each value
/// UTF-8, unused inline bytes zero. Each data buffer is checked as UTF-8
/// once; a value in it then needs only to start and end on character
/// boundaries. A buffer that is not UTF-8 as a whole (bytes no view
/// reaches may be anything) leaves the check to arrow, value by value.
fn validate_utf8_views(data: &ArrayData) -> Result<(), ArrowError> {
    let buffers = &data.buffers()[1..];
    let Ok(texts) = buffers.iter().map(|b| std::str::from_utf8(b.as_slice())).collect::<Result<Vec<_>, _>>() else {
        return data.validate_values();
    };
    let views = &data.buffers()[0].typed_data::<u128>()[data.offset()..data.offset() + data.len()];
    let invalid = |i: usize, problem: &str| ArrowError::InvalidArgumentError(format!("view {i}: {problem}"));
    for (i, &view) in views.iter().enumerate() {
        let len = view as u32;
        if len <= 12 {
            let inline = view >> 32;
            if len < 12 && inline >> (len * 8) != 0 {
                return Err(invalid(i, "non-zero bytes after an inline value"));
            }
            // Inline ASCII (most short values) is UTF-8 as it stands.
            if inline & 0x8080_8080_8080_8080_8080_8080 != 0 {
                std::str::from_utf8(&view.to_le_bytes()[4..4 + len as usize])
                    .map_err(|e| invalid(i, &format!("not UTF-8 ({e})")))?;
            }
        } else {
            let view = ByteView::from(view);
            let text = texts.get(view.buffer_index as usize).ok_or_else(|| invalid(i, "no such data buffer"))?;
            let start = view.offset as usize;
            let end = start.checked_add(len as usize).filter(|&end| end <= text.len());
            let end = end.ok_or_else(|| invalid(i, "a value past the end of its data buffer"))?;
            if !text.is_char_boundary(start) || !text.is_char_boundary(end) {
                return Err(invalid(i, "a value that is not UTF-8 (it splits a character)"));
            }
            if text.as_bytes()[start..start + 4] != view.prefix.to_le_bytes() {
                return Err(invalid(i, "a prefix that differs from its value"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
