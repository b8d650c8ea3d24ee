//! Block-sized vectors: the unit map expressions and reducers work on,
//! one value per lane of a block (the lanes, their bitmaps and the
//! selections of a block's rows are storage's: [`quiverdb_storage::block`]).

use quiverdb_storage::block::{Bits, LANES};

/// Values of one numeric domain, one per lane.
#[derive(Debug, Clone)]
pub enum Values {
    /// I64 domain.
    I64(Box<[i64; LANES]>),
    /// U64 domain.
    U64(Box<[u64; LANES]>),
    /// F64 domain.
    F64(Box<[f64; LANES]>),
    /// I128 domain.
    I128(Box<[i128; LANES]>),
}

impl Values {
    /// Zeroed values of `domain` (allocated once, when a reducer opens).
    pub fn new(domain: crate::Domain) -> Self {
        match domain {
            crate::Domain::I64 => Values::I64(Box::new([0; LANES])),
            crate::Domain::U64 => Values::U64(Box::new([0; LANES])),
            crate::Domain::F64 => Values::F64(Box::new([0.0; LANES])),
            crate::Domain::I128 => Values::I128(Box::new([0; LANES])),
        }
    }
}

/// A numeric vector: values and validity for `len` lanes.
#[derive(Debug, Clone)]
pub struct NumVector {
    /// Lanes in use.
    pub len: usize,
    /// The values; lanes whose validity bit is clear hold unspecified values.
    pub values: Values,
    /// Valid lanes (meaningful only when `has_nulls`).
    pub validity: Bits,
    /// True when some lane may be null.
    pub has_nulls: bool,
}

impl NumVector {
    /// An empty vector of `domain`.
    pub fn new(domain: crate::Domain) -> Self {
        Self { len: 0, values: Values::new(domain), validity: Bits::EMPTY, has_nulls: false }
    }

    /// The valid lanes among `active`.
    #[inline]
    pub fn valid(&self, active: &Bits) -> Bits {
        if self.has_nulls { active.and(&self.validity) } else { *active }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The valid lanes of a vector are its active lanes when it has no
    /// NULLs (its validity bits are then not meaningful), else the AND.
    #[test]
    fn valid_lanes_are_the_active_lanes_not_null() {
        let active = Bits::range(3, 700);
        let mut v = NumVector::new(crate::Domain::I64);
        v.len = LANES;
        v.validity = Bits::range(500, 900);
        assert_eq!(v.valid(&active), active, "validity bits without has_nulls are ignored");
        v.has_nulls = true;
        let want: Vec<usize> = (500..700).collect();
        let mut got = Vec::new();
        v.valid(&active).for_each_one(|l| got.push(l));
        assert_eq!(got, want);
    }
}
