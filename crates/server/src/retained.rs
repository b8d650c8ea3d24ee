//! The memory a set of record batches holds: each buffer counted once,
//! however many arrays, slices or views share it.
//!
//! `RecordBatch::get_array_memory_size` counts a buffer once per array
//! that refers to it, so batches of views into one dictionary, or slices
//! of one large batch, would be counted many times over; what statements
//! that keep their input (`CREATE TABLE … AS`, `INSERT`) reserve from the
//! memory pool is what they really hold.

use std::collections::HashSet;

use arrow_array::{Array, RecordBatch};
use arrow_buffer::Buffer;
use arrow_data::ArrayData;

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
    }
}
