//! Statement handles and tickets.
//!
//! quiverdb keeps no per-statement state on the server: a ticket or a
//! prepared-statement handle carries everything needed to run it — the SQL
//! text, the bound parameters (as an Arrow IPC stream), or the outcome of a
//! statement that already ran. A client that vanishes leaks nothing, and a
//! handle survives a server restart. Handles are versioned and decoded with
//! bounds checks; anything malformed is an `InvalidArgument`.

use arrow_array::RecordBatch;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use bytes::Bytes;
use tonic::Status;

const VERSION: u8 = 1;
/// A ticket: as [`VERSION`], with a number after the kind that makes each
/// ticket a `GetFlightInfo` hands out its own (so `CancelFlightInfo` stops
/// that one statement, not another client's run of the same text).
const TICKET_VERSION: u8 = 2;
const QUERY: u8 = 1;
const PREPARED: u8 = 2;
const DONE: u8 = 3;
const RAN: u8 = 4;

/// What a ticket or prepared-statement handle stands for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Handle {
    /// A statement to plan and run when its ticket is fetched.
    Query { sql: String },
    /// A prepared statement and the parameters bound to it (one execution
    /// per row).
    Prepared { sql: String, params: Option<RecordBatch> },
    /// A statement that already ran: its affected-row count (`None` for
    /// DDL, which returns no rows).
    Done { count: Option<u64> },
    /// A query that changed data as it ran (`EXPLAIN ANALYZE INSERT …`),
    /// run once when it was planned: its whole result. Fetching the
    /// ticket again returns the same rows and changes nothing.
    Ran { result: RecordBatch },
}

impl Handle {
    pub(crate) fn encode(&self) -> Result<Bytes, Status> {
        let mut out = vec![VERSION];
        match self {
            Handle::Query { sql } => {
                out.push(QUERY);
                put_bytes(&mut out, sql.as_bytes());
            }
            Handle::Prepared { sql, params } => {
                out.push(PREPARED);
                put_bytes(&mut out, sql.as_bytes());
                if let Some(params) = params {
                    put_bytes(&mut out, &write_batch(params, "parameters")?);
                }
            }
            Handle::Ran { result } => {
                out.push(RAN);
                put_bytes(&mut out, &write_batch(result, "a result")?);
            }
            Handle::Done { count } => {
                out.push(DONE);
                match count {
                    Some(n) => {
                        out.push(1);
                        out.extend_from_slice(&n.to_le_bytes());
                    }
                    None => out.push(0),
                }
            }
        }
        Ok(out.into())
    }

    /// The handle as a ticket numbered `nonce` (see [`TICKET_VERSION`]).
    pub(crate) fn encode_ticket(&self, nonce: u64) -> Result<Bytes, Status> {
        let mut out = self.encode()?.to_vec();
        out[0] = TICKET_VERSION;
        out.splice(2..2, nonce.to_le_bytes());
        Ok(out.into())
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, Status> {
        let bad = |what: &str| Status::invalid_argument(format!("malformed quiverdb statement handle: {what}"));
        let mut r = Reader { rest: bytes };
        let version = r.byte().ok_or_else(|| bad("empty"))?;
        if version != VERSION && version != TICKET_VERSION {
            return Err(bad("unknown version"));
        }
        let kind = r.byte().ok_or_else(|| bad("no kind"))?;
        if version == TICKET_VERSION {
            r.take(8).ok_or_else(|| bad("truncated ticket number"))?;
        }
        let handle = match kind {
            QUERY => Handle::Query { sql: r.string().ok_or_else(|| bad("truncated SQL"))? },
            PREPARED => {
                let sql = r.string().ok_or_else(|| bad("truncated SQL"))?;
                let params = if r.rest.is_empty() {
                    None
                } else {
                    let ipc = r.bytes().ok_or_else(|| bad("truncated parameters"))?;
                    Some(read_batch(ipc).map_err(|e| bad(&format!("parameters: {e}")))?)
                };
                Handle::Prepared { sql, params }
            }
            RAN => {
                let ipc = r.bytes().ok_or_else(|| bad("truncated result"))?;
                Handle::Ran { result: read_batch(ipc).map_err(|e| bad(&format!("result: {e}")))? }
            }
            DONE => match r.byte().ok_or_else(|| bad("truncated result"))? {
                0 => Handle::Done { count: None },
                1 => {
                    let n = r.take(8).ok_or_else(|| bad("truncated count"))?;
                    let mut le = [0u8; 8];
                    le.copy_from_slice(n);
                    Handle::Done { count: Some(u64::from_le_bytes(le)) }
                }
                _ => return Err(bad("unknown result")),
            },
            _ => return Err(bad("unknown kind")),
        };
        if !r.rest.is_empty() {
            return Err(bad("trailing bytes"));
        }
        Ok(handle)
    }
}

/// `batch` as an Arrow IPC stream.
fn write_batch(batch: &RecordBatch, what: &str) -> Result<Vec<u8>, Status> {
    let failed = |e: arrow_schema::ArrowError| Status::internal(format!("encoding {what}: {e}"));
    let mut ipc = Vec::new();
    let mut writer = StreamWriter::try_new(&mut ipc, &batch.schema()).map_err(failed)?;
    writer.write(batch).map_err(failed)?;
    writer.finish().map_err(failed)?;
    drop(writer);
    Ok(ipc)
}

/// The one batch of an IPC stream (several are concatenated). The stream
/// comes from a client: its framing is checked first ([`check_framing`]).
fn read_batch(ipc: &[u8]) -> Result<RecordBatch, arrow_schema::ArrowError> {
    check_framing(ipc).map_err(arrow_schema::ArrowError::IpcError)?;
    let reader = StreamReader::try_new(ipc, None)?;
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>()?;
    arrow_select::concat::concat_batches(&schema, &batches)
}

/// Checks that every message of the IPC stream `ipc` is a valid
/// flatbuffer, that its metadata and body lie within `ipc`, and that its
/// contents hold up against its bytes ([`super::ipc_check`]), before the
/// stream reader sizes anything by them (it allocates a message's
/// declared body length before reading it: 2^60 bytes aborted the
/// process).
fn check_framing(ipc: &[u8]) -> Result<(), String> {
    let mut rest = ipc;
    let mut messages = super::ipc_check::IpcChecker::new(ipc.len().saturating_mul(16).max(1 << 20));
    let length = |rest: &mut &[u8]| -> Result<Option<i32>, String> {
        if rest.is_empty() {
            return Ok(None);
        }
        let Some((word, tail)) = rest.split_first_chunk::<4>() else {
            return Err(format!("a message length cut short at byte {}", ipc.len() - rest.len()));
        };
        *rest = tail;
        Ok(Some(i32::from_le_bytes(*word)))
    };
    loop {
        let at = ipc.len() - rest.len();
        let Some(mut len) = length(&mut rest)? else { return Ok(()) };
        if len == -1 {
            // The continuation marker of the current format, then the length.
            len = length(&mut rest)?.ok_or_else(|| format!("a message cut short at byte {at}"))?;
        }
        if len == 0 {
            return Ok(());
        }
        let len = usize::try_from(len).map_err(|_| format!("a negative message length at byte {at}"))?;
        if len > rest.len() {
            return Err(format!("a message at byte {at} declares {len} bytes of metadata; {} remain", rest.len()));
        }
        let (metadata, tail) = rest.split_at(len);
        let message = arrow_ipc::root_as_message(metadata)
            .map_err(|e| format!("the message at byte {at} is not a valid IPC message: {e}"))?;
        let body = usize::try_from(message.bodyLength())
            .map_err(|_| format!("the message at byte {at} declares a negative body length"))?;
        if body > tail.len() {
            return Err(format!("the message at byte {at} declares a body of {body} bytes; {} remain", tail.len()));
        }
        let (body, tail) = tail.split_at(body);
        messages.check(metadata, body).map_err(|e| format!("the message at byte {at}: {e}"))?;
        rest = tail;
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // Handles are bounded by the message size, far below 4 GiB.
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Some(head)
    }

    fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = self.take(4)?;
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        self.take(len)
    }

    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};

    use super::*;

    #[test]
    fn round_trips() {
        let params = RecordBatch::try_from_iter([
            ("$1", Arc::new(Int64Array::from(vec![1, 2])) as _),
            ("$2", Arc::new(StringArray::from(vec![Some("a"), None])) as _),
        ])
        .unwrap();
        for handle in [
            Handle::Query { sql: "SELECT 1".into() },
            Handle::Prepared { sql: "SELECT $1, $2".into(), params: None },
            Handle::Prepared { sql: "SELECT $1, $2".into(), params: Some(params) },
            Handle::Done { count: None },
            Handle::Done { count: Some(u64::MAX) },
            Handle::Ran {
                result: RecordBatch::try_from_iter([("plan", Arc::new(StringArray::from(vec!["x"])) as _)]).unwrap(),
            },
        ] {
            assert_eq!(Handle::decode(&handle.encode().unwrap()).unwrap(), handle);
            let (one, two) = (handle.encode_ticket(1).unwrap(), handle.encode_ticket(2).unwrap());
            assert_ne!(one, two, "each ticket its own");
            assert_eq!(Handle::decode(&one).unwrap(), handle);
            for n in 0..one.len() {
                // Cut where optional parameters start, it is another handle.
                assert!(Handle::decode(&one[..n]).map_or(true, |h| h != handle), "a ticket cut at {n}");
            }
        }
    }

    #[test]
    fn malformed_handles_are_invalid_arguments() {
        let good = Handle::Query { sql: "SELECT 1".into() }.encode().unwrap();
        let mut cases: Vec<Vec<u8>> = vec![vec![], vec![9], vec![VERSION], vec![VERSION, 77], vec![VERSION, DONE, 2]];
        cases.extend((0..good.len()).map(|n| good[..n].to_vec()));
        cases.push([&good[..], &[0]].concat());
        cases.push(vec![VERSION, QUERY, 2, 0, 0, 0, 0xff, 0xfe]);
        cases.push(vec![VERSION, PREPARED, 0, 0, 0, 0, 3, 0, 0, 0, 1, 2, 3]);
        for case in cases {
            let err = Handle::decode(&case).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{case:?}");
        }
    }

    /// Parameters whose IPC stream declares lengths past its bytes: a
    /// body of 2^60 bytes made the reader allocate it and abort the
    /// process; every cut and every such length is an `InvalidArgument`.
    #[test]
    fn parameter_streams_declaring_more_than_they_hold_are_refused() {
        let params =
            RecordBatch::try_from_iter([("$1", Arc::new(Int64Array::from_iter_values(0..1000)) as _)]).unwrap();
        let ipc = write_batch(&params, "parameters").unwrap();
        let handle = |ipc: &[u8]| {
            let mut out = vec![VERSION, PREPARED];
            put_bytes(&mut out, b"SELECT $1");
            put_bytes(&mut out, ipc);
            out
        };
        assert!(Handle::decode(&handle(&ipc)).is_ok());
        // The body (and buffer) length 8,000 as 2^60, wherever it is written.
        let (real, huge) = (8_000i64.to_le_bytes(), (1i64 << 60).to_le_bytes());
        let mut hostile = ipc.clone();
        let mut patched = 0;
        for at in 0..hostile.len() - 8 {
            if hostile[at..at + 8] == real {
                hostile[at..at + 8].copy_from_slice(&huge);
                patched += 1;
            }
        }
        assert!(patched >= 1);
        let mut cases = vec![hostile];
        // Every cut of the stream, and a metadata length past the end.
        cases.extend((1..ipc.len()).step_by(7).map(|n| ipc[..n].to_vec()));
        let mut long_metadata = ipc.clone();
        long_metadata[4..8].copy_from_slice(&i32::MAX.to_le_bytes());
        cases.push(long_metadata);
        for case in cases {
            let err = Handle::decode(&handle(&case)).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
            assert!(err.message().contains("parameters"), "{err:?}");
        }
        let err = Handle::decode(&handle(&ipc[..ipc.len() - 100])).unwrap_err();
        assert!(err.message().contains("declares a body of"), "{err:?}");
    }
}
