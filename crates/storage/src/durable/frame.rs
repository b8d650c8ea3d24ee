//! Framed records: what the write-ahead log is made of.
//!
//! ```text
//! frame  = header payload trailer
//! header = len: u32 LE      payload bytes
//!          head_crc: u32 LE CRC32C of `len` and the format byte 2
//!          crc: u32 LE      CRC32C of `kind` and `payload`
//!          kind: u8         record type
//! trailer = 0xA5            the frame's last byte: never zero
//! ```
//!
//! The header checks itself, so a damaged length is told apart from a
//! frame cut short by a crash. Log files are prepared full of zeros and
//! written over, so a file's *data* ends at its last non-zero byte, and a
//! write cut short leaves zeros where its last bytes belong: the trailer
//! tells a frame written to its end from one that was not. [`scan_all`]
//! reads frames up to the last complete one and classifies what follows:
//!
//! * nothing, or nothing but zeros: a clean end (the zeros are room
//!   never written);
//! * a **torn tail** — the last write never completed: fewer bytes than a
//!   header, a header whose bytes end the data, a valid header whose
//!   payload runs past the end of the file, or a last frame whose checksum
//!   fails, whose trailer is missing and after which only zeros follow.
//!   Recovery drops it and reports it;
//! * anything else — a frame written whole whose checksum fails (a bit
//!   flipped on the disk, even in the last record), a bad checksum with
//!   data after it, a damaged header with data after it — is
//!   **damage**, reported with its offset; recovery refuses to go on
//!   rather than drop or misapply data (unless told to drop it).
//!
//! Frames written before the trailer existed (`head_crc` of `len` alone)
//! are read as they were: without a trailer, a last one whose checksum
//! fails is taken as torn.

use std::io::IoSlice;

use arrow_buffer::Buffer;

/// Bytes of a frame header.
pub(super) const HEADER: usize = 13;

/// The last byte of every frame written.
const TRAILER: u8 = 0xA5;

/// Bytes of a frame besides its payload: header and trailer.
pub(super) const OVERHEAD: usize = HEADER + 1;

/// The format byte the header checksum of a frame with a trailer covers.
const TRAILED: u8 = 2;

/// The largest payload a frame may carry.
pub(super) const MAX_PAYLOAD: usize = 1 << 30;

/// The type of a frame holding a part of a record too large for one
/// frame: the record is the payloads of a run of such frames and of the
/// frame after them, which has the record's type. Written together (one
/// write, one segment); a run the log ends in is a torn tail.
pub(super) const CONTINUED: u8 = 255;

/// Appends one frame holding `payload` of type `kind` to `out`.
#[cfg(test)]
pub(super) fn encode(kind: u8, payload: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER]);
    out.extend_from_slice(payload);
    let (header, payload) = out[start..].split_at_mut(HEADER);
    write_header(header, kind, payload.len(), crc32c::crc32c_append(crc32c::crc32c(&[kind]), payload));
    out.push(TRAILER);
}

/// Appends one frame as written before frames had a trailer.
#[cfg(test)]
pub(super) fn encode_untrailed(kind: u8, payload: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    encode(kind, payload, out);
    out.pop();
    let len: [u8; 4] = out[start..start + 4].try_into().expect("four bytes");
    out[start + 4..start + 8].copy_from_slice(&crc32c::crc32c(&len).to_le_bytes());
}

/// The header checksum of a frame whose length bytes are `len`.
fn head_crc(len: &[u8; 4], trailed: bool) -> u32 {
    let crc = crc32c::crc32c(len);
    if trailed { crc32c::crc32c_append(crc, &[TRAILED]) } else { crc }
}

/// Writes a header for a payload of `len` bytes whose checksum (of `kind`
/// and the payload) is `crc`.
fn write_header(header: &mut [u8], kind: u8, len: usize, crc: u32) {
    debug_assert!(len <= MAX_PAYLOAD);
    let len = (len as u32).to_le_bytes();
    header[0..4].copy_from_slice(&len);
    header[4..8].copy_from_slice(&head_crc(&len, true).to_le_bytes());
    header[8..12].copy_from_slice(&crc.to_le_bytes());
    header[12] = kind;
}

/// Frames being written. Their bytes are held here, except for the large
/// Arrow buffers of their payloads, which are held by reference (each
/// with the offset in the bytes it goes before) and written to the file
/// from where they are: a logged batch is read once, by the write, rather
/// than copied here first. Made with [`FrameBuf::contiguous`], it copies
/// them too.
#[derive(Debug, Default)]
pub(crate) struct FrameBuf {
    bytes: Vec<u8>,
    shared: Vec<(usize, Buffer)>,
    /// Bytes of the buffers in `shared`.
    shared_len: usize,
    contiguous: bool,
}

/// Where a frame starts in a [`FrameBuf`]: its header's offset in the
/// bytes, and the buffers held before it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameStart {
    at: usize,
    shared: usize,
    shared_len: usize,
}

impl FrameBuf {
    /// Buffers shorter than this are copied: a piece of its own would cost
    /// the write more than the copy.
    const SHARE_MIN: usize = 4096;

    /// A buffer that copies every byte (its frames are one slice).
    #[cfg(test)]
    pub(crate) fn contiguous() -> Self {
        Self { contiguous: true, ..Self::default() }
    }

    /// The bytes, to append to.
    pub(crate) fn bytes(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    /// Appends `buffer`: by reference if it is large (and this buffer is
    /// not contiguous), else as a copy.
    pub(crate) fn push_buffer(&mut self, buffer: Buffer) {
        if self.contiguous || buffer.len() < Self::SHARE_MIN {
            self.bytes.extend_from_slice(&buffer);
        } else {
            self.shared_len += buffer.len();
            self.shared.push((self.bytes.len(), buffer));
        }
    }

    /// Bytes held, by copy or by reference.
    pub(crate) fn len(&self) -> usize {
        self.bytes.len() + self.shared_len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Starts a frame: room for its header, then its payload is appended.
    pub(crate) fn start(&mut self) -> FrameStart {
        let start = FrameStart { at: self.bytes.len(), shared: self.shared.len(), shared_len: self.shared_len };
        self.bytes.extend_from_slice(&[0; HEADER]);
        start
    }

    /// Bytes of the payload of the frame started at `start`.
    pub(crate) fn payload_len(&self, start: FrameStart) -> usize {
        self.len() - (start.at + start.shared_len) - HEADER
    }

    /// Fills in the header of the frame started at `start`, of type `kind`,
    /// holding everything appended since, and ends it with its trailer.
    pub(crate) fn seal(&mut self, start: FrameStart, kind: u8) {
        let len = self.payload_len(start);
        let (before, payload) = self.bytes.split_at_mut(start.at + HEADER);
        let mut crc = crc32c::crc32c(&[kind]);
        let mut from = 0;
        for (at, buffer) in &self.shared[start.shared..] {
            let at = at - (start.at + HEADER);
            crc = crc32c::crc32c_append(crc32c::crc32c_append(crc, &payload[from..at]), buffer);
            from = at;
        }
        crc = crc32c::crc32c_append(crc, &payload[from..]);
        write_header(&mut before[start.at..], kind, len, crc);
        self.bytes.push(TRAILER);
    }

    /// Splits the payload appended since `start` into frames of at most
    /// `max` bytes each: [`CONTINUED`] frames, then one of type `kind`
    /// (large buffers stay shared, sliced where a frame ends inside one).
    /// Returns the number of frames.
    pub(crate) fn split(&mut self, start: FrameStart, kind: u8, max: usize) -> usize {
        assert!(max > 0, "frames hold at least a byte");
        // The payload as pieces in order: copied bytes, shared buffers.
        let payload_at = start.at + HEADER;
        let inline = self.bytes.split_off(payload_at);
        let shared = self.shared.split_off(start.shared);
        self.truncate(start);
        let mut pieces: Vec<Buffer> = Vec::with_capacity(2 * shared.len() + 1);
        let inline = Buffer::from_vec(inline);
        let mut from = 0;
        for (at, buffer) in shared {
            let at = at - payload_at;
            if at > from {
                pieces.push(inline.slice_with_length(from, at - from));
            }
            pieces.push(buffer);
            from = at;
        }
        if inline.len() > from {
            pieces.push(inline.slice_with_length(from, inline.len() - from));
        }
        let total: usize = pieces.iter().map(Buffer::len).sum();
        let frames = total.div_ceil(max).max(1);
        let mut pieces = pieces.into_iter().peekable();
        let mut offset = 0; // into the next piece
        for f in 0..frames {
            let frame = self.start();
            let mut room = if f + 1 == frames { total - f * max } else { max };
            while room > 0 {
                let Some(piece) = pieces.peek() else { break };
                let n = (piece.len() - offset).min(room);
                self.push_buffer(piece.slice_with_length(offset, n));
                (room, offset) = (room - n, offset + n);
                if offset == piece.len() {
                    pieces.next();
                    offset = 0;
                }
            }
            self.seal(frame, if f + 1 == frames { kind } else { CONTINUED });
        }
        frames
    }

    /// Drops the frame started at `start` and everything after it.
    pub(crate) fn truncate(&mut self, start: FrameStart) {
        self.bytes.truncate(start.at);
        self.shared.truncate(start.shared);
        self.shared_len = start.shared_len;
    }

    /// Drops every frame, keeping the memory for the next ones.
    pub(crate) fn clear(&mut self) {
        self.truncate(FrameStart { at: 0, shared: 0, shared_len: 0 });
    }

    /// Bytes of memory this buffer keeps when cleared.
    pub(crate) fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    /// The frames as slices, in order, to write with one vectored write.
    pub(crate) fn io_slices(&self) -> Vec<IoSlice<'_>> {
        let mut slices = Vec::with_capacity(2 * self.shared.len() + 1);
        let mut from = 0;
        for (at, buffer) in &self.shared {
            if *at > from {
                slices.push(IoSlice::new(&self.bytes[from..*at]));
            }
            slices.push(IoSlice::new(buffer));
            from = *at;
        }
        if self.bytes.len() > from {
            slices.push(IoSlice::new(&self.bytes[from..]));
        }
        slices
    }

    /// Every byte held, in order.
    #[cfg(test)]
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        if self.shared.is_empty() {
            return self.bytes;
        }
        self.io_slices().iter().map(|s| &**s).collect::<Vec<&[u8]>>().concat()
    }
}

/// One frame read back: its type, payload and offset in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Frame<'a> {
    pub kind: u8,
    pub payload: &'a [u8],
    pub offset: u64,
}

/// How the frames of a file end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// The last frame ends at `offset`; only zeros (if anything) follow.
    Clean { offset: u64 },
    /// An incomplete last write starts at `offset`; `bytes` of data
    /// (up to the last non-zero byte) follow it.
    Torn { offset: u64, bytes: u64 },
    /// Damage (`what`) at `offset`, followed by `bytes` of data.
    Damaged { offset: u64, bytes: u64, what: &'static str },
}

impl End {
    /// Where the complete frames end: where writing can go on.
    pub(super) fn offset(self) -> u64 {
        match self {
            End::Clean { offset } | End::Torn { offset, .. } | End::Damaged { offset, .. } => offset,
        }
    }
}

/// The length of `bytes` without its trailing zeros. (Pages at a time:
/// the zeros after a segment's last record can be most of a file.)
pub(super) fn data_end(bytes: &[u8]) -> usize {
    const PAGE: usize = 4096;
    let full = bytes.len() / PAGE * PAGE;
    let tail = &bytes[full..];
    if let Some(last) = tail.iter().rposition(|&b| b != 0) {
        return full + last + 1;
    }
    // Or-ing a page (no early exit per byte) vectorizes.
    let page = bytes[..full].chunks_exact(PAGE).rposition(|p| p.iter().fold(0, |acc, &b| acc | b) != 0);
    page.map_or(0, |p| p * PAGE + bytes[p * PAGE..(p + 1) * PAGE].iter().rposition(|&b| b != 0).map_or(0, |l| l + 1))
}

/// The bytes of a file up to where [`scan_all`] must see them, given its
/// data (`bytes`, up to its last non-zero byte) and its length: a frame
/// whose data ends in zeros gets them back, up to the end of the frame
/// (or of the file). Then [`scan_all`] of the result reads what it would
/// read of the whole file.
pub(super) fn restore_zeros(bytes: &mut Vec<u8>, file_len: u64) {
    let mut at = 0usize;
    while at + HEADER <= bytes.len() {
        let Some((len, trailed)) = declared_len(&bytes[at..]) else { return };
        at += HEADER + len + usize::from(trailed);
    }
    let needed = (at as u64).min(file_len) as usize;
    if needed > bytes.len() {
        bytes.resize(needed, 0);
    }
}

/// The payload length declared by the frame header at the start of `rest`
/// (at least [`HEADER`] bytes), and whether a trailer follows the payload,
/// if the length's own checksum holds and the length is allowed.
fn declared_len(rest: &[u8]) -> Option<(usize, bool)> {
    let len = [rest[0], rest[1], rest[2], rest[3]];
    let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
    let trailed = if crc == head_crc(&len, true) {
        true
    } else if crc == head_crc(&len, false) {
        false
    } else {
        return None;
    };
    let len = u32::from_le_bytes(len) as usize;
    (len <= MAX_PAYLOAD).then_some((len, trailed))
}

/// Reads the frames of `bytes` (a whole file) in order; damage is an error.
#[cfg(test)]
pub(super) fn scan(bytes: &[u8]) -> Result<(Vec<Frame<'_>>, End), super::damage::Damage> {
    match scan_all(bytes) {
        (_, End::Damaged { offset, what, .. }) => Err(super::damage::Damage::new(offset as usize, what)),
        (frames, end) => Ok((frames, end)),
    }
}

/// Reads the frames of `bytes` (a whole file) in order, up to the end, a
/// torn tail or the first damage.
pub(super) fn scan_all(bytes: &[u8]) -> (Vec<Frame<'_>>, End) {
    let mut frames = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let rest = &bytes[at..];
        // Where the data after `at` ends (only asked once a frame fails).
        let data = || data_end(rest);
        let torn = || End::Torn { offset: at as u64, bytes: data() as u64 };
        let damaged = |what| End::Damaged { offset: at as u64, bytes: data() as u64, what };
        if rest.len() < HEADER {
            return (frames, if data() == 0 { End::Clean { offset: at as u64 } } else { torn() });
        }
        let Some((len, trailed)) = declared_len(rest) else {
            return match data() {
                0 => (frames, End::Clean { offset: at as u64 }),
                n if n <= HEADER => (frames, torn()),
                _ => (frames, damaged("damaged frame header")),
            };
        };
        let crc = u32::from_le_bytes([rest[8], rest[9], rest[10], rest[11]]);
        let end = HEADER + len + usize::from(trailed);
        if end > rest.len() {
            return (frames, torn());
        }
        let (kind, payload) = (rest[12], &rest[HEADER..HEADER + len]);
        // Zeros where the frame's last byte belongs: its write was cut short.
        let cut_short = data() <= end && (!trailed || rest[end - 1] == 0);
        if crc32c::crc32c_append(crc32c::crc32c(&[kind]), payload) != crc {
            if cut_short {
                return (frames, torn());
            }
            return (frames, damaged("frame checksum mismatch"));
        }
        if trailed && rest[end - 1] != TRAILER {
            if cut_short {
                return (frames, torn());
            }
            return (frames, damaged("damaged frame trailer"));
        }
        frames.push(Frame { kind, payload, offset: at as u64 });
        at += end;
    }
    (frames, End::Clean { offset: at as u64 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(records: &[(u8, &[u8])]) -> (Vec<u8>, Vec<usize>) {
        let mut out = Vec::new();
        let mut starts = Vec::new();
        for (kind, payload) in records {
            starts.push(out.len());
            encode(*kind, payload, &mut out);
        }
        (out, starts)
    }

    fn kinds(frames: &[Frame<'_>]) -> Vec<u8> {
        frames.iter().map(|f| f.kind).collect()
    }

    #[test]
    fn split_frames_hold_the_payload_in_order() {
        // A payload of copied bytes and shared buffers, split at every
        // size from a byte to more than all of it.
        let shared = [Buffer::from_vec(vec![7u8; 5000]), Buffer::from_vec((0..=255u8).cycle().take(9000).collect())];
        for max in [1, 13, 1000, 4096, 5000, 20_000] {
            let mut buf = FrameBuf::default();
            let before = buf.start();
            buf.bytes().extend_from_slice(b"first");
            buf.seal(before, 1);
            let start = buf.start();
            buf.bytes().extend_from_slice(b"head");
            buf.push_buffer(shared[0].clone());
            buf.bytes().extend_from_slice(&[1, 2, 3]);
            buf.push_buffer(shared[1].clone());
            buf.bytes().extend_from_slice(b"tail");
            let payload = [&b"head"[..], &shared[0], &[1, 2, 3], &shared[1], b"tail"].concat();
            let n = buf.split(start, 9, max);
            assert_eq!(n, payload.len().div_ceil(max), "max {max}");
            let bytes = buf.into_bytes();
            let (frames, end) = scan(&bytes).unwrap();
            assert_eq!(end, End::Clean { offset: bytes.len() as u64 });
            assert_eq!(frames.len(), 1 + n);
            assert_eq!((frames[0].kind, frames[0].payload), (1, &b"first"[..]));
            let parts = &frames[1..];
            assert!(parts[..n - 1].iter().all(|f| f.kind == CONTINUED && f.payload.len() == max));
            assert_eq!(parts[n - 1].kind, 9);
            assert_eq!(parts.iter().flat_map(|f| f.payload.iter().copied()).collect::<Vec<u8>>(), payload);
        }
    }

    #[test]
    fn round_trip() {
        let (bytes, starts) = log(&[(1, b"alpha"), (2, b""), (3, &[7; 1000])]);
        let (frames, end) = scan(&bytes).unwrap();
        assert_eq!(end, End::Clean { offset: bytes.len() as u64 });
        assert_eq!(kinds(&frames), [1, 2, 3]);
        assert_eq!(frames[0].payload, b"alpha");
        assert_eq!(frames[1].payload, b"");
        assert_eq!(frames[2].payload, &[7; 1000]);
        assert_eq!(frames.iter().map(|f| f.offset as usize).collect::<Vec<_>>(), starts);
        assert_eq!(scan(&[]).unwrap(), (vec![], End::Clean { offset: 0 }));
    }

    #[test]
    fn every_cut_of_the_last_frame_is_a_torn_tail() {
        let (bytes, starts) = log(&[(1, b"first"), (2, b"second frame")]);
        for cut in starts[1] + 1..bytes.len() {
            let (frames, end) = scan(&bytes[..cut]).unwrap();
            assert_eq!(kinds(&frames), [1], "cut at {cut}");
            // The bytes reported are those up to the last non-zero one.
            let data = bytes[..cut].iter().rposition(|&b| b != 0).unwrap() + 1;
            assert_eq!(end, End::Torn { offset: starts[1] as u64, bytes: (data - starts[1]) as u64 });
        }
    }

    #[test]
    fn data_ends_at_the_last_non_zero_byte() {
        for len in [0usize, 1, 4095, 4096, 4097, 3 * 4096 + 5] {
            for last in (0..len).step_by(997).chain(len.checked_sub(1)) {
                let mut bytes = vec![0; len];
                bytes[last] = 9;
                assert_eq!(data_end(&bytes), last + 1, "byte {last} of {len}");
            }
            assert_eq!(data_end(&vec![0; len]), 0);
        }
    }

    #[test]
    fn a_file_read_without_its_trailing_zeros_scans_the_same() {
        // Frames whose payloads end in zeros, in a file with room after them.
        let records: [(u8, &[u8]); 4] = [(1, b"a\0"), (2, &[0; 5000]), (3, b"b\0\0\0"), (4, &[0; 20])];
        let (bytes, starts) = log(&records);
        for extra in [0, 1, 4096] {
            for cut in (starts[1]..=bytes.len()).step_by(7).chain([bytes.len()]) {
                let mut whole = bytes[..cut].to_vec();
                whole.resize(bytes.len() + extra, 0);
                let mut data = whole[..data_end(&whole)].to_vec();
                restore_zeros(&mut data, whole.len() as u64);
                let (full, end) = scan(&whole).unwrap();
                let (read, read_end) = scan(&data).unwrap();
                assert_eq!((read, read_end), (full, end), "cut at {cut}, {extra} zeros after");
            }
        }
    }

    #[test]
    fn zeros_after_the_last_frame_are_room_never_written() {
        let (mut bytes, starts) = log(&[(1, b"first")]);
        let clean = bytes.len();
        for zeros in [1, HEADER - 1, HEADER, 4096] {
            bytes.resize(clean + zeros, 0);
            let (frames, end) = scan(&bytes).unwrap();
            assert_eq!(kinds(&frames), [1]);
            assert_eq!(end, End::Clean { offset: clean as u64 }, "{zeros} zeros");
        }
        assert_eq!(scan(&[0; 100]).unwrap(), (vec![], End::Clean { offset: 0 }));
        assert_eq!(starts, [0]);
    }

    #[test]
    fn every_cut_of_the_last_frame_written_over_zeros_is_a_torn_tail() {
        // A prepared file: the last frame's write reached the disk only in part.
        let (bytes, starts) = log(&[(1, b"first"), (2, b"second frame, \0\0 with zeros \0 inside")]);
        for cut in starts[1] + 1..bytes.len() {
            let mut prepared = bytes[..cut].to_vec();
            prepared.resize(bytes.len() + 512, 0);
            let (frames, end) = scan(&prepared).unwrap();
            assert_eq!(kinds(&frames), [1], "cut at {cut}");
            let data = bytes[..cut].iter().rposition(|&b| b != 0).unwrap() + 1;
            assert_eq!(end, End::Torn { offset: starts[1] as u64, bytes: (data - starts[1]) as u64 }, "cut at {cut}");
        }
    }

    #[test]
    fn data_after_a_failed_frame_is_corruption_even_among_zeros() {
        let (bytes, starts) = log(&[(1, b"first"), (2, b"second"), (3, b"third")]);
        let mut prepared = bytes.clone();
        prepared.resize(bytes.len() + 512, 0);
        // The second frame's payload damaged: the third follows it.
        prepared[starts[1] + HEADER] ^= 1;
        assert_eq!(scan(&prepared).unwrap_err().offset, starts[1] as u64);
        // The second frame's header zeroed (lost), the third written.
        let mut lost = bytes.clone();
        lost[starts[1]..starts[1] + HEADER].fill(0);
        lost.resize(bytes.len() + 512, 0);
        assert_eq!(scan(&lost).unwrap_err().offset, starts[1] as u64);
    }

    #[test]
    fn a_flipped_bit_in_a_last_frame_written_whole_is_damage_not_a_torn_tail() {
        // Ends in zero bytes, as many records do.
        let (bytes, starts) = log(&[(1, b"first"), (2, b"second\0\0\0")]);
        let mut prepared = bytes.clone();
        prepared.resize(bytes.len() + 512, 0);
        for at in starts[1]..bytes.len() {
            for bit in 0..8 {
                let mut damaged = prepared.clone();
                damaged[at] ^= 1 << bit;
                let (frames, end) = scan_all(&damaged);
                assert_eq!(kinds(&frames), [1], "bit {bit} of byte {at}");
                assert!(
                    matches!(end, End::Damaged { offset, .. } if offset == starts[1] as u64),
                    "bit {bit} of byte {at}: {end:?}"
                );
            }
        }
    }

    #[test]
    fn frames_written_before_the_trailer_are_read_as_they_were() {
        let mut bytes = Vec::new();
        encode_untrailed(1, b"first", &mut bytes);
        let second = bytes.len();
        encode_untrailed(2, b"second", &mut bytes);
        let third = bytes.len();
        encode(3, b"third", &mut bytes);
        let (frames, end) = scan(&bytes).unwrap();
        assert_eq!(kinds(&frames), [1, 2, 3]);
        assert_eq!(end, End::Clean { offset: bytes.len() as u64 });
        // Without a trailer, a damaged last payload cannot be told from a
        // write cut short: it is taken as torn, as it was.
        let mut old = bytes[..third].to_vec();
        let last = old.len() - 1;
        old[last] ^= 0x10;
        let (frames, end) = scan(&old).unwrap();
        assert_eq!(kinds(&frames), [1]);
        assert_eq!(end, End::Torn { offset: second as u64, bytes: (old.len() - second) as u64 });
    }

    #[test]
    fn any_bit_flip_before_the_last_frame_is_corruption_at_its_frame() {
        let (bytes, starts) = log(&[(1, b"first"), (2, b"second"), (3, b"third")]);
        for at in 0..starts[2] {
            for bit in 0..8 {
                let mut damaged = bytes.clone();
                damaged[at] ^= 1 << bit;
                let frame = if at < starts[1] { starts[0] } else { starts[1] };
                let err = scan(&damaged).expect_err("a flipped bit must not go unnoticed");
                assert_eq!(err.offset, frame as u64, "bit {bit} of byte {at}");
            }
        }
    }

    #[test]
    fn frames_holding_buffers_by_reference_are_the_frames_written_in_place() {
        let big =
            |n: usize, seed: u8| Buffer::from((0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect::<Vec<u8>>());
        let pieces: [&[Buffer]; 4] =
            [&[big(5000, 1), big(10, 2), big(4096, 3)], &[], &[big(100, 4)], &[big(70_000, 5), big(70_000, 6)]];
        let mut shared = FrameBuf::default();
        let mut copied = Vec::new();
        for (kind, buffers) in pieces.iter().enumerate() {
            let start = shared.start();
            let mut payload = Vec::new();
            for (i, buffer) in buffers.iter().enumerate() {
                shared.bytes().extend_from_slice(&[i as u8; 3]);
                shared.push_buffer(buffer.clone());
                payload.extend_from_slice(&[i as u8; 3]);
                payload.extend_from_slice(buffer);
            }
            assert_eq!(shared.payload_len(start), payload.len());
            shared.seal(start, kind as u8);
            encode(kind as u8, &payload, &mut copied);
            // A frame given up leaves nothing behind.
            let dropped = shared.start();
            shared.push_buffer(big(9000, 7));
            shared.truncate(dropped);
        }
        assert_eq!(shared.len(), copied.len());
        // The buffers of 4 KiB and more were not copied.
        assert_eq!(shared.io_slices().len(), 2 * 4 + 1, "four buffers, each after bytes, then a trailer");
        let bytes = shared.into_bytes();
        assert!(bytes == copied, "the same frames");
        let (frames, _) = scan(&bytes).unwrap();
        assert_eq!(kinds(&frames), [0, 1, 2, 3]);
    }
}
