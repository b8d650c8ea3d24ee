//! The memory a set of record batches holds: each buffer counted once,
//! however many arrays, slices or views share it.
//!
//! `RecordBatch::get_array_memory_size` counts a buffer once per array
//! that refers to it, so batches of views into one dictionary, or slices
//! of one large batch, would be counted many times over; what a statement
//! that keeps its input batches (`CREATE TABLE … AS`) reserves from the
//! memory pool is what they really hold. (Buffers are told apart by
//! address, so the batches counted must stay alive while counting goes on:
//! a freed buffer's address can come back.) A statement that copies its
//! rows and lets the batches go (`INSERT`, bulk ingest) counts
//! [`row_bytes`]: what the copies take.

use std::collections::HashSet;

use arrow_array::{Array, RecordBatch};
use arrow_buffer::Buffer;
use arrow_data::ArrayData;
use arrow_schema::DataType;

/// Buffers seen so far.
#[derive(Debug, Default)]
pub(crate) struct Retained {
    seen: HashSet<usize>,
}

impl Retained {
    /// Bytes of the buffers of `batch` not seen before (then counted).
    pub(crate) fn add(&mut self, batch: &RecordBatch) -> usize {
        batch.columns().iter().map(|c| self.add_data(&c.to_data())).sum()
    }

    fn add_data(&mut self, data: &ArrayData) -> usize {
        let mut bytes = data.buffers().iter().map(|b| self.add_buffer(b)).sum::<usize>();
        if let Some(nulls) = data.nulls() {
            bytes += self.add_buffer(nulls.buffer());
        }
        bytes + data.child_data().iter().map(|c| self.add_data(c)).sum::<usize>()
    }

    fn add_buffer(&mut self, buffer: &Buffer) -> usize {
        if self.seen.insert(buffer.data_ptr().as_ptr() as usize) {
            // An externally owned buffer reports no capacity: its length.
            buffer.capacity().max(buffer.len())
        } else {
            0
        }
    }
}

/// Bytes the rows of `batch` take once copied, as a table's delta holds
/// them: fixed-width values, offsets and the bytes of each string (a
/// view's own bytes, not the buffers it points into), validity.
pub(crate) fn row_bytes(batch: &RecordBatch) -> usize {
    batch.columns().iter().map(|c| array_row_bytes(c.as_ref())).sum()
}

fn array_row_bytes(array: &dyn Array) -> usize {
    let data = array.to_data();
    match array.data_type() {
        DataType::Utf8View | DataType::BinaryView => {
            let views = &data.buffer::<u128>(0)[..array.len()];
            let long: usize = views.iter().map(|&v| v as u32 as usize).filter(|&len| len > 12).sum();
            views.len() * 16 + long + data.nulls().map_or(0, |n| n.len().div_ceil(8))
        }
        _ => data.get_slice_memory_size().unwrap_or_else(|_| array.get_array_memory_size()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, StringViewArray};

    use super::*;

    #[test]
    fn shared_buffers_count_once() {
        let values: ArrayRef = Arc::new(Int64Array::from_iter_values(0..10_000));
        let batch = RecordBatch::try_from_iter([("v", values)]).unwrap();
        let mut retained = Retained::default();
        let whole = retained.add(&batch);
        assert!(whole >= 80_000, "{whole}");
        assert_eq!(retained.add(&batch.slice(0, 100)), 0, "a slice holds nothing more");
        let long: Vec<String> = (0..100).map(|i| format!("a string longer than twelve bytes {i}")).collect();
        let views: ArrayRef = Arc::new(StringViewArray::from_iter_values(&long));
        let batch = RecordBatch::try_from_iter([("s", views)]).unwrap();
        let first = retained.add(&batch.slice(0, 10));
        assert!(first > 0);
        assert_eq!(retained.add(&batch.slice(10, 10)), 0, "views into the same data buffer");
        // Copied rows: each slice its own views and strings.
        let strings: usize = long[..10].iter().map(String::len).sum();
        assert_eq!(row_bytes(&batch.slice(0, 10)), 10 * 16 + strings);
        let ints: ArrayRef = Arc::new(Int64Array::from_iter_values(0..10_000));
        assert_eq!(row_bytes(&RecordBatch::try_from_iter([("v", ints)]).unwrap().slice(100, 50)), 50 * 8);
    }
}
