//! Zone maps: the min, max and null count of every block of a main column.

/// Zone map of one block.
///
/// `min` and `max` are over the block's non-null values, in the column's
/// key space: the value key for fixed-width columns (exact), the code for
/// dictionary strings (exact, code order = value order), and the 8-byte
/// prefix key ([`crate::types::prefix_key`]) for plain strings (a bound).
/// A block whose values are all null has `min > max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Zone {
    /// Smallest non-null key.
    pub min: u64,
    /// Largest non-null key.
    pub max: u64,
    /// Number of nulls in the block.
    pub null_count: u32,
}

impl Zone {
    /// True when the block holds no non-null value.
    pub fn all_null(&self) -> bool {
        self.min > self.max
    }
}
