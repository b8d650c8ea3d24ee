#!/usr/bin/env python3
"""TPC-H through quiverdb's Flight SQL server (ADBC) against DuckDB, side by side.

    cargo build --release --bin quiverdb --example tpch_bench
    target/release/examples/tpch_bench --sf 1 --export /tmp/tpch-sf1
    python benches/tpch_duckdb.py --data /tmp/tpch-sf1 --quiverdb target/release/quiverdb

`tpch_bench --export DIR` writes the generated tables as Parquet files
(`DIR/<table>.parquet`) and the 22 queries as it runs them
(`DIR/qNN.sql`: setup statements, the timed SELECT, teardown, one per
`;`-terminated statement). This script starts `quiverdb serve --in-memory`
on a free loopback port, loads each file with `quiverdb load --create`
(one Flight SQL ingest each), waits for the server's background rebuilds
to settle (`system.tables`), and loads the same files into an in-process
DuckDB (`CREATE TABLE … AS SELECT * FROM read_parquet(…)`, `threads` set
to `--threads`). Each query then runs on both, one warm-up run and
`--runs` measured ones, alternating sides; a run is timed from sending the
SQL to holding the whole result as Arrow (quiverdb: ADBC Flight SQL
`execute` + `fetch_arrow_table`; DuckDB: `sql(…).to_arrow_table()`),
so quiverdb's figures include planning, Flight SQL and the loopback
transfer. The answers are compared row for row (sorted; numbers as floats
within 1e-9 relative; a decimal on one side against a double on the other,
as DataFusion's AVG and division of decimals are decimals rounded to their
scale and DuckDB's are doubles, within a unit of the decimal's last place). Prints a markdown table of medians and the ratio
DuckDB / quiverdb, and a JSON line; exits non-zero when an answer differs.
"""

import argparse
import datetime
import decimal
import json
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import time

import adbc_driver_flightsql.dbapi as flight_sql
import duckdb
import pyarrow as pa

TABLES = ["nation", "region", "part", "supplier", "partsupp", "customer", "orders", "lineitem"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def statements(path):
    text = open(path, encoding="utf-8").read()
    parts = [p.strip() for p in text.split(";") if p.strip()]
    main = next(i for i, p in enumerate(parts) if p.lower().startswith("select"))
    return parts[:main], parts[main], parts[main + 1 :]


def canonical(value):
    if isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    return value


def sort_key(row):
    # Floats rounded for ordering only (the comparison itself is by tolerance).
    return tuple((0, "%.6g" % v) if isinstance(v, float) else (1, str(v)) for v in row)


def rows_of(table):
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    rows = [tuple(canonical(c[r]) for c in columns) for r in range(table.num_rows)]
    return sorted(rows, key=sort_key)


def scales(table):
    """Per column: the scale of a decimal column, else None."""
    return [getattr(f.type, "scale", None) if pa.types.is_decimal(f.type) else None for f in table.schema]


def same(a, b, tolerances):
    """Rows equal, numbers within their column's tolerance."""
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b):
        if len(ra) != len(rb):
            return False
        for x, y, tolerance in zip(ra, rb, tolerances):
            if isinstance(x, float) and isinstance(y, float):
                if not math.isclose(x, y, rel_tol=1e-9, abs_tol=tolerance):
                    return False
            elif x != y:
                return False
    return True


def tolerances(quiverdb_table, duckdb_table):
    """A decimal on one side against a double on the other (DataFusion's
    AVG and division of decimals are decimals rounded to their scale,
    DuckDB's are doubles): equal to within a unit of the decimal's last
    place. Otherwise 1e-9 (with 1e-9 relative: doubles summed in another order)."""
    out = []
    for sq, sd in zip(scales(quiverdb_table), scales(duckdb_table)):
        if (sq is None) != (sd is None):
            out.append(10.0 ** -(sq if sq is not None else sd))
        else:
            out.append(1e-9)
    return out


def timed(run):
    start = time.perf_counter()
    result = run()
    return (time.perf_counter() - start) * 1000.0, result


def wait_for_rebuilds(cursor, timeout_s):
    """Waits until the tables' delta rows stop shrinking (background rebuilds done)."""
    deadline = time.monotonic() + timeout_s
    last, stable_since = None, time.monotonic()
    while time.monotonic() < deadline:
        cursor.execute("SELECT SUM(delta_rows) AS d, SUM(main_rows) AS m FROM system.tables")
        delta, main = cursor.fetchone()
        if delta != last:
            last, stable_since = delta, time.monotonic()
        elif time.monotonic() - stable_since > 3.0:
            return delta, main
        time.sleep(0.5)
    return last, None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="the directory tpch_bench --export wrote")
    p.add_argument("--quiverdb", required=True, help="the quiverdb binary")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--query", help="run one query, e.g. q06")
    args = p.parse_args()

    queries = sorted(f[:-4] for f in os.listdir(args.data) if re.fullmatch(r"q\d\d\.sql", f))
    if args.query:
        queries = [q for q in queries if q == args.query]
        if not queries:
            sys.exit(f"no {args.query}.sql in {args.data}")

    port = free_port()
    server = subprocess.Popen(
        [args.quiverdb, "serve", "--in-memory", "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    failed = False
    try:
        uri = f"grpc://127.0.0.1:{port}"
        for _ in range(100):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.1)
        start = time.perf_counter()
        for t in TABLES:
            subprocess.run(
                [args.quiverdb, "load", "--connect", uri, "--create", t, os.path.join(args.data, f"{t}.parquet")],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        load_s = time.perf_counter() - start
        conn = flight_sql.connect(uri, autocommit=True)
        cursor = conn.cursor()
        delta, main_rows = wait_for_rebuilds(cursor, 600)
        settled_s = time.perf_counter() - start

        duck = duckdb.connect()
        duck.execute(f"SET threads = {args.threads}")
        start = time.perf_counter()
        for t in TABLES:
            path = os.path.join(args.data, f"{t}.parquet").replace("'", "''")
            duck.execute(f"CREATE TABLE {t} AS SELECT * FROM read_parquet('{path}')")
        duck_load_s = time.perf_counter() - start

        results = []
        for q in queries:
            setup, select, teardown = statements(os.path.join(args.data, f"{q}.sql"))
            for s in setup:
                cursor.execute(s)
                duck.execute(s)
            try:
                qv, dv = [], []
                answers = {}
                for run in range(1 + args.runs):

                    def on_quiverdb():
                        cursor.execute(select)
                        return cursor.fetch_arrow_table()

                    def on_duckdb():
                        return duck.sql(select).to_arrow_table()

                    mq, tq = timed(on_quiverdb)
                    md, td = timed(on_duckdb)
                    if run > 0:
                        qv.append(mq)
                        dv.append(md)
                    answers = {"quiverdb": tq, "duckdb": td}
                a, b = rows_of(answers["quiverdb"]), rows_of(answers["duckdb"])
                ok = same(a, b, tolerances(answers["quiverdb"], answers["duckdb"]))
                failed |= not ok
                results.append(
                    {
                        "query": q,
                        "quiverdb_ms": statistics.median(qv),
                        "duckdb_ms": statistics.median(dv),
                        "rows": len(a),
                        "same_answer": ok,
                        "error": None,
                    }
                )
            except Exception as e:  # a failing query is reported, the run goes on
                failed = True
                results.append({"query": q, "quiverdb_ms": None, "duckdb_ms": None, "rows": None,
                                "same_answer": False, "error": str(e).splitlines()[0][:200]})
            for s in teardown:
                cursor.execute(s)
                duck.execute(s)
        cursor.close()
        conn.close()
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()

    print(f"loaded: quiverdb (quiverdb load, Flight SQL ingest) {load_s:.1f} s, rebuilds settled at "
          f"{settled_s:.1f} s ({main_rows} main rows, {delta} delta rows); DuckDB {duck_load_s:.1f} s")
    print(f"{args.runs} runs after a warm-up, medians; ratio = DuckDB ms / quiverdb ms (above 1: quiverdb faster)\n")
    print("| query | quiverdb ms (ADBC) | DuckDB ms | ratio | rows | same answer | error |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        if r["error"]:
            print(f"| {r['query']} | | | | | no | {r['error']} |")
            continue
        ratio = r["duckdb_ms"] / r["quiverdb_ms"]
        r["ratio"] = ratio
        print(f"| {r['query']} | {r['quiverdb_ms']:.1f} | {r['duckdb_ms']:.1f} | {ratio:.2f}× | {r['rows']} | "
              f"{'yes' if r['same_answer'] else 'NO'} | |")
    ran = [r for r in results if not r["error"]]
    qs, ds = sum(r["quiverdb_ms"] for r in ran), sum(r["duckdb_ms"] for r in ran)
    if ran:
        print(f"| sum of {len(ran)} | {qs:.1f} | {ds:.1f} | {ds / qs:.2f}× | | | |")
    print(json.dumps({"runs": args.runs, "threads": args.threads, "quiverdb_load_s": load_s,
                      "duckdb_load_s": duck_load_s, "quiverdb_sum_ms": qs, "duckdb_sum_ms": ds,
                      "duckdb_version": duckdb.__version__, "queries": results}))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
