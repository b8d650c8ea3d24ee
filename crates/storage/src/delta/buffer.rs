//! The two append-only primitives under the delta: a byte buffer and a
//! bitmap that one writer extends while readers read the committed prefix.
//!
//! ```text
//!   RawAppend   [ committed bytes ......... | being written | free ]
//!               0                  committed ▲ (Release)    capacity
//!               readers read here ──┘          one writer writes here
//! ```
//!
//! Neither ever reallocates: a reader's slice stays valid for as long as it
//! holds the buffer. The buffers do not know the committed length
//! themselves; [`super::Delta`] does, and it checks every write against it
//! (writes only at or past it) and every read (reads only before it). The
//! writer publishes new rows with a Release store of the committed length,
//! readers load it with Acquire, so the bytes they read are the bytes
//! written, and no location is read and written concurrently.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_buffer::{ArrowNativeType, BooleanBuffer, Buffer};

/// A fixed-capacity, 16-byte aligned byte buffer written past its committed
/// prefix by a single writer.
pub(crate) struct RawAppend {
    words: Box<[UnsafeCell<MaybeUninit<u128>>]>,
}

impl std::fmt::Debug for RawAppend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawAppend").field("capacity", &self.capacity()).finish()
    }
}

// SAFETY: the buffer is plain bytes; concurrent access is confined to
// disjoint ranges by the protocol in the module docs (one writer past the
// committed length, readers before it, synchronised by the Delta's atomics).
unsafe impl Sync for RawAppend {}

impl RawAppend {
    /// A buffer of at least `bytes` bytes.
    pub(crate) fn new(bytes: usize) -> Self {
        let words = Box::<[MaybeUninit<u128>]>::new_uninit_slice(bytes.div_ceil(16));
        // SAFETY: `UnsafeCell<T>` is `repr(transparent)` over `T`, so the
        // slice layouts are identical.
        let words = unsafe { Box::from_raw(Box::into_raw(words) as *mut [UnsafeCell<MaybeUninit<u128>>]) };
        Self { words }
    }

    /// Capacity in bytes.
    pub(crate) fn capacity(&self) -> usize {
        self.words.len() * 16
    }

    fn base(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.words.as_ptr()).cast::<u8>()
    }

    /// Copies `src` to byte offset `at`.
    ///
    /// # Safety
    /// The caller is the only writer, and no reader reads `at .. at + src.len()`
    /// until a later commit publishes it (so it lies at or past the committed length).
    pub(crate) unsafe fn write(&self, at: usize, src: &[u8]) {
        assert!(at + src.len() <= self.capacity(), "delta buffer overflow");
        // SAFETY: in bounds (asserted); exclusive access to the range is the
        // caller's contract; `src` cannot overlap a buffer we own.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base().add(at), src.len()) };
    }

    /// The `len` values of type `T` starting at element `start`.
    ///
    /// # Safety
    /// The range was written before and is committed (no concurrent writer
    /// touches it), and it was written as values of `T`.
    pub(crate) unsafe fn slice<T: ArrowNativeType>(&self, start: usize, len: usize) -> &[T] {
        let size = size_of::<T>();
        assert!((start + len) * size <= self.capacity(), "delta read out of bounds");
        debug_assert!(align_of::<T>() <= 16);
        // SAFETY: in bounds (asserted), aligned (the base is 16-byte aligned
        // and offsets are multiples of size_of::<T>(), which for Arrow
        // natives is a multiple of their alignment), initialised and not
        // concurrently written (the caller's contract).
        unsafe { std::slice::from_raw_parts(self.base().add(start * size).cast::<T>(), len) }
    }
}

/// A fixed-capacity bitmap extended by one writer while readers read its
/// committed prefix. Words are atomics because the word holding the
/// committed boundary is shared by both sides; relaxed loads and stores
/// suffice since the committed length's Release/Acquire orders them.
#[derive(Debug)]
pub(crate) struct BitWords {
    words: Box<[AtomicU64]>,
}

impl BitWords {
    pub(crate) fn new(bits: usize) -> Self {
        Self { words: (0..bits.div_ceil(64)).map(|_| AtomicU64::new(0)).collect() }
    }

    /// Bytes allocated.
    pub(crate) fn size_bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// Writes bits `at .. at + src.len()` from `src`, replacing whatever an
    /// aborted write may have left there.
    pub(crate) fn write(&self, at: usize, src: &BooleanBuffer) {
        let n = src.len();
        let bytes = src.values();
        let mut done = 0;
        while done < n {
            let pos = at + done;
            let (word, bit) = (pos / 64, pos % 64);
            let take = (64 - bit).min(n - done);
            let chunk = read_bits(bytes, src.offset() + done, take);
            let mask = low_mask(take) << bit;
            let old = self.words[word].load(Ordering::Relaxed);
            self.words[word].store((old & !mask) | (chunk << bit), Ordering::Relaxed);
            done += take;
        }
    }

    /// Sets bit `at` to `value`.
    pub(crate) fn write_bit(&self, at: usize, value: bool) {
        let (word, bit) = (at / 64, at % 64);
        let old = self.words[word].load(Ordering::Relaxed);
        let new = if value { old | (1 << bit) } else { old & !(1 << bit) };
        self.words[word].store(new, Ordering::Relaxed);
    }

    /// Bit `i`.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> bool {
        self.words[i / 64].load(Ordering::Relaxed) >> (i % 64) & 1 == 1
    }

    /// Word `i` (bits `64 i .. 64 i + 64`).
    #[inline]
    pub(crate) fn word(&self, i: usize) -> u64 {
        self.words[i].load(Ordering::Relaxed)
    }

    /// Bits `start .. start + len` as a boolean buffer (copied, 64 at a time).
    pub(crate) fn to_buffer(&self, start: usize, len: usize) -> BooleanBuffer {
        let first = start / 64;
        let last = (start + len).div_ceil(64);
        let words: Vec<u64> = (first..last).map(|w| self.word(w)).collect();
        BooleanBuffer::new(Buffer::from_vec(words), start % 64, len)
    }
}

/// A mask of the low `n` bits (`n <= 64`).
#[inline]
fn low_mask(n: usize) -> u64 {
    if n == 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// `n <= 64` bits of `bytes` starting at bit `offset` (LSB-first, Arrow order).
#[inline]
fn read_bits(bytes: &[u8], offset: usize, n: usize) -> u64 {
    let first = offset / 8;
    let shift = offset % 8;
    let needed = (shift + n).div_ceil(8);
    let mut acc: u128 = 0;
    for (i, &b) in bytes[first..first + needed].iter().enumerate() {
        acc |= (b as u128) << (8 * i);
    }
    ((acc >> shift) as u64) & low_mask(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_words_write_at_any_offset() {
        let src: Vec<bool> = (0..300).map(|i| i % 3 == 0 || i % 7 == 0).collect();
        let buf = BooleanBuffer::from(src.clone());
        for (at, src_off) in [(0, 0), (5, 3), (63, 1), (64, 64), (100, 17)] {
            let bits = BitWords::new(512);
            // Pre-fill with garbage that the write must replace.
            bits.write(at, &BooleanBuffer::new_set(200));
            let part = buf.slice(src_off, 200);
            bits.write(at, &part);
            for i in 0..200 {
                assert_eq!(bits.get(at + i), src[src_off + i], "at {at} bit {i}");
            }
            let back = bits.to_buffer(at, 200);
            assert_eq!(back.iter().collect::<Vec<_>>(), src[src_off..src_off + 200]);
        }
    }

    #[test]
    fn raw_append_round_trip() {
        let raw = RawAppend::new(64);
        let v: [i64; 4] = [1, -2, 3, i64::MIN];
        // SAFETY: single-threaded test; the range is written before it is read.
        unsafe {
            raw.write(8, arrow_buffer::ToByteSlice::to_byte_slice(&v[..]));
            assert_eq!(raw.slice::<i64>(1, 4), &v);
        }
    }
}
