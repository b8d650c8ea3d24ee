"""Client side of `cargo run --release --example flight_bench`: measures a
running quiverdb Flight SQL server from Python, through ADBC (the Flight
SQL driver, written in Go) and through pyarrow's C++ Flight client.

Prints one JSON object with the figures. Needs pyarrow and
adbc-driver-flightsql (tests/python/requirements.txt).

    python examples/flight_bench.py --uri grpc://127.0.0.1:50051 [--rows 2000000]
"""

import argparse
import json
import statistics
import time

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight


def seed_table(rows: int) -> pa.Table:
    """The seed table: id 0..rows-1, value uniform in [0, 1,000,000],
    category uniform in [0, 999], name uniform over name_0000..name_0999."""
    names = pa.array([f"name_{i:04d}" for i in range(1000)])

    def uniform(high: int) -> pa.Array:
        return pc.cast(pc.floor(pc.multiply(pc.random(rows), high)), pa.int64())

    columns = {
        "id": pa.array(range(rows), pa.int64()),
        "value": uniform(1_000_001),
        "category": uniform(1000),
        "name": pc.take(names, uniform(1000)),
    }
    schema = pa.schema([pa.field(k, v.type, nullable=False) for k, v in columns.items()])
    return pa.Table.from_pydict(columns, schema=schema).combine_chunks()


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def statement_query(sql: str) -> bytes:
    """A Flight SQL CommandStatementQuery packed in a protobuf Any."""
    query = sql.encode()
    command = b"\x0a" + varint(len(query)) + query
    url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    return b"\x0a" + varint(len(url)) + url + b"\x12" + varint(len(command)) + command


class FlightClient:
    """The Flight SQL query flow (GetFlightInfo, then DoGet of each
    endpoint) through pyarrow's C++ Flight client."""

    def __init__(self, uri: str):
        self.client = flight.FlightClient(uri)

    def query(self, sql: str) -> pa.Table:
        info = self.client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(sql)))
        tables = [self.client.do_get(endpoint.ticket).read_all() for endpoint in info.endpoints]
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


QUERIES = {
    "floor": "SELECT 1",
    "Q2": "SELECT SUM(value) FROM t",
    "Q4": "SELECT COUNT(*) FROM t WHERE value > 500000",
    "Q9": "SELECT id, value FROM t WHERE id BETWEEN 1000000 AND 1000100",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uri", required=True)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--batch-rows", type=int, default=131_072)
    args = parser.parse_args()
    out = {}

    conn = flightsql.connect(args.uri, autocommit=True)
    cur = conn.cursor()

    # Ingest: the seed table in one request, in batches of --batch-rows;
    # one warm-up, then the median of three (each into a fresh table).
    table = seed_table(args.rows)

    def ingest():
        cur.execute("DROP TABLE IF EXISTS t")
        reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=args.batch_rows))
        start = time.perf_counter()
        cur.adbc_ingest("t", reader, mode="create")
        return time.perf_counter() - start

    ingest()
    seconds = statistics.median([ingest() for _ in range(3)])
    out["ingest_rows"] = args.rows
    out["ingest_seconds"] = seconds
    out["ingest_rows_per_s"] = args.rows / seconds

    # The server rebuilds full shards into main storage in the background;
    # the Rust side waits for that before the latency runs.
    print(json.dumps({"ingested": True}), flush=True)
    input()

    wide = pa.table({f"c{i}": pa.array(range(i, i + 1000), pa.int64()) for i in range(250)})
    cur.adbc_ingest("wide", wide, mode="create")

    def adbc(sql):
        cur.execute(sql)
        return cur.fetch_arrow_table()

    clients = {"adbc": adbc, "flight": FlightClient(args.uri).query}
    for client, run in clients.items():
        for name, sql in QUERIES.items():
            run(sql)
            out[f"{client}_{name}_ms"] = median_ms(lambda: run(sql), args.runs)

        # Full-table export.
        full = run("SELECT * FROM t")
        assert full.num_rows == args.rows
        export_ms = median_ms(lambda: run("SELECT * FROM t"), 5)
        out["export_bytes"] = full.nbytes
        out[f"{client}_export_ms"] = export_ms
        out[f"{client}_export_gb_per_s"] = full.nbytes / (export_ms / 1000) / 1e9

        # A 1,000-row x 250-column result.
        assert run("SELECT * FROM wide").shape == (1000, 250)
        out[f"{client}_wide_ms"] = median_ms(lambda: run("SELECT * FROM wide"), args.runs)

    cur.close()
    conn.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
