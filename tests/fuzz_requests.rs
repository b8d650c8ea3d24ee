//! A fuzz harness against the real `quiverdb serve` binary: valid
//! requests of every entry point that takes bytes from a client — tickets,
//! commands, prepared-statement handles, prepared-statement parameters and
//! bulk-ingest streams — are mutated (bit flips, overwritten bytes,
//! extreme lengths, cuts, insertions) and sent. The server must answer
//! each, stay up, and never panic: no `CANCELLED`, `UNKNOWN` or `INTERNAL`
//! status, no "panicked" in its log.
//!
//! `QUIVERDB_FUZZ_CASES` (default 5,000) sets the number of cases and
//! `QUIVERDB_FUZZ_SEED` the first seed; `scripts/fuzz` runs a long one.

#![cfg(all(feature = "cli", unix))]
#![allow(clippy::unwrap_used)]

#[path = "common/child.rs"]
mod child;
#[path = "common/ingest.rs"]
mod ingest;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::{
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any, CommandPreparedStatementQuery,
    CommandStatementQuery, ProstMessageExt, TableExistsOption, TableNotExistOption, TicketStatementQuery,
};
use arrow_flight::{Action, FlightData, FlightDescriptor, Ticket};
use child::Server;
use futures::{StreamExt, TryStreamExt};
use ingest::ingest_command;
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tonic::transport::Channel;

type Raw = FlightServiceClient<Channel>;

/// A few random edits of `bytes`.
fn mutate(rng: &mut StdRng, bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let at = if out.is_empty() { 0 } else { rng.random_range(0..out.len()) };
        match rng.random_range(0..7) {
            0 if !out.is_empty() => out[at] ^= 1 << rng.random_range(0..8),
            1 if !out.is_empty() => out[at] = rng.random(),
            2 => {
                // An extreme 4- or 8-byte value, as lengths and offsets are.
                let word: [u8; 8] = match rng.random_range(0..5) {
                    0 => u64::MAX.to_le_bytes(),
                    1 => (1u64 << 60).to_le_bytes(),
                    2 => (i32::MAX as u64).to_le_bytes(),
                    3 => (u32::MAX as u64 + 1).to_le_bytes(),
                    _ => rng.random_range(0..4096u64).to_le_bytes(),
                };
                let n = if rng.random_bool(0.5) { 4 } else { 8 };
                for (i, b) in word.iter().take(n).enumerate() {
                    if let Some(slot) = out.get_mut(at + i) {
                        *slot = *b;
                    }
                }
            }
            3 => out.truncate(at),
            4 => out.insert(at.min(out.len()), rng.random()),
            5 if !out.is_empty() => {
                out.remove(at);
            }
            _ => {
                if let Some(slot) = out.get_mut(at) {
                    *slot = 0;
                }
            }
        }
    }
    out
}

fn batch(rows: i64) -> RecordBatch {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter((0..rows).map(|i| (i % 3 != 1).then_some(i))));
    let names: ArrayRef = Arc::new(StringArray::from_iter((0..rows).map(|i| (i % 4 != 2).then(|| format!("n{i}")))));
    RecordBatch::try_from_iter([("id", ids), ("name", names)]).unwrap()
}

/// `batches` as Flight data after a first message carrying `descriptor`.
async fn flight_data(descriptor: FlightDescriptor, batches: Vec<RecordBatch>) -> Vec<FlightData> {
    let input = futures::stream::iter(batches.into_iter().map(Ok));
    FlightDataEncoderBuilder::new().with_flight_descriptor(Some(descriptor)).build(input).try_collect().await.unwrap()
}

/// `data` with one message (not the first, which names the command)
/// mutated in its header or body, or cut off there.
fn mutate_stream(rng: &mut StdRng, data: &[FlightData]) -> Vec<FlightData> {
    let mut out = data.to_vec();
    let i = rng.random_range(1..out.len());
    match rng.random_range(0..5) {
        0 | 1 => out[i].data_header = mutate(rng, &out[i].data_header).into(),
        2 | 3 => out[i].data_body = mutate(rng, &out[i].data_body).into(),
        _ => out.truncate(i),
    }
    out
}

/// Whether a status is a server fault rather than a refusal.
fn is_fault(status: &tonic::Status) -> bool {
    matches!(status.code(), tonic::Code::Cancelled | tonic::Code::Unknown | tonic::Code::Internal)
}

/// The status of a call (`Ok` for a success), with the stream read to its end.
async fn outcome<T, S>(
    call: impl std::future::Future<Output = Result<tonic::Response<S>, tonic::Status>>,
) -> tonic::Status
where
    S: futures::Stream<Item = Result<T, tonic::Status>> + Unpin,
{
    let response = match tokio::time::timeout(Duration::from_secs(30), call).await {
        Ok(Ok(r)) => r,
        Ok(Err(status)) => return status,
        Err(_) => return tonic::Status::deadline_exceeded("no answer in 30 s"),
    };
    let mut stream = response.into_inner();
    while let Some(item) = stream.next().await {
        if let Err(status) = item {
            return status;
        }
    }
    tonic::Status::ok("")
}

#[test]
fn mutated_requests_are_refused_without_panics() {
    let cases: usize = std::env::var("QUIVERDB_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(5_000);
    let seed: u64 = std::env::var("QUIVERDB_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut server = Server::in_memory(&[]);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (counts, faults) = runtime.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut raw = Raw::new(channel);
        // The seeds: a table, a prepared statement's handle, a query's
        // command and ticket, a parameter stream and an ingest stream.
        let setup = flight_data(
            FlightDescriptor::new_cmd(
                ingest_command("t", TableNotExistOption::Create, TableExistsOption::Fail).as_any().encode_to_vec(),
            ),
            vec![batch(100)],
        )
        .await;
        let status = outcome(raw.do_put(futures::stream::iter(setup))).await;
        assert_eq!(status.code(), tonic::Code::Ok, "{status:?}");
        let prepare = ActionCreatePreparedStatementRequest {
            query: "SELECT id, name FROM t WHERE id > $1".into(),
            transaction_id: None,
        };
        let action = Action { r#type: "CreatePreparedStatement".into(), body: prepare.as_any().encode_to_vec().into() };
        let result = raw.do_action(action).await.unwrap().into_inner().next().await.unwrap().unwrap();
        let created: ActionCreatePreparedStatementResult =
            Any::decode(&*result.body).unwrap().unpack().unwrap().unwrap();
        let handle = created.prepared_statement_handle.to_vec();
        let query =
            CommandStatementQuery { query: "SELECT id, name FROM t WHERE id < 50".into(), transaction_id: None };
        let command = query.as_any().encode_to_vec();
        let ticket = TicketStatementQuery { statement_handle: handle.clone().into() }.as_any().encode_to_vec();
        let params =
            RecordBatch::try_from_iter([("$1", Arc::new(Int64Array::from(vec![10, 20])) as ArrayRef)]).unwrap();
        let bind = CommandPreparedStatementQuery { prepared_statement_handle: handle.clone().into() };
        let param_stream = flight_data(FlightDescriptor::new_cmd(bind.as_any().encode_to_vec()), vec![params]).await;
        let ingest = ingest_command("t", TableNotExistOption::Fail, TableExistsOption::Append);
        let ingest_stream =
            flight_data(FlightDescriptor::new_cmd(ingest.as_any().encode_to_vec()), vec![batch(50), batch(7)]).await;

        let mut counts: BTreeMap<(&str, String), usize> = BTreeMap::new();
        let mut faults = Vec::new();
        for case in 0..cases {
            let rng = &mut StdRng::seed_from_u64(seed + case as u64);
            let (entry, status) = match case % 5 {
                0 => {
                    let ticket = Ticket { ticket: mutate(rng, &ticket).into() };
                    ("ticket", outcome(raw.do_get(ticket)).await)
                }
                1 => {
                    let descriptor = FlightDescriptor::new_cmd(mutate(rng, &command));
                    ("command", raw.get_flight_info(descriptor).await.err().unwrap_or_else(|| tonic::Status::ok("")))
                }
                2 => {
                    let bound =
                        CommandPreparedStatementQuery { prepared_statement_handle: mutate(rng, &handle).into() };
                    let descriptor = FlightDescriptor::new_cmd(bound.as_any().encode_to_vec());
                    ("handle", raw.get_flight_info(descriptor).await.err().unwrap_or_else(|| tonic::Status::ok("")))
                }
                3 => {
                    let stream = mutate_stream(rng, &param_stream);
                    ("parameters", outcome(raw.do_put(futures::stream::iter(stream))).await)
                }
                _ => {
                    let stream = mutate_stream(rng, &ingest_stream);
                    ("ingest", outcome(raw.do_put(futures::stream::iter(stream))).await)
                }
            };
            *counts.entry((entry, format!("{:?}", status.code()))).or_default() += 1;
            if is_fault(&status) || status.code() == tonic::Code::DeadlineExceeded {
                faults.push(format!("case {case} (seed {}) {entry}: {status:?}", seed + case as u64));
            }
        }
        (counts, faults)
    });
    eprintln!("fuzz cases by entry point and outcome: {counts:#?}");
    assert!(server.alive(), "the server died");
    let panics: Vec<String> = server.log.try_iter().filter(|l| l.contains("panicked")).collect();
    assert!(panics.is_empty(), "the server panicked: {panics:#?}");
    assert!(faults.is_empty(), "{} of {cases} cases failed in the server: {faults:#?}", faults.len());
    // Every entry point saw refusals (the mutations reach the checks).
    for entry in ["ticket", "command", "handle", "parameters", "ingest"] {
        assert!(
            counts.iter().any(|((e, code), _)| *e == entry && code == "InvalidArgument"),
            "no {entry} case was refused: {counts:?}"
        );
    }
}
