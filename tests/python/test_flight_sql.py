"""End-to-end test of quiverdb's Flight SQL server with real Python clients.

Two clients talk to a running server:

- ADBC (``adbc_driver_flightsql.dbapi``, the Go Flight SQL driver behind
  the DB-API): statements, affected-row counts, parameters, bulk ingest,
  catalog metadata and errors.
- ``pyarrow.flight``: the Basic -> Bearer handshake, and a plain Flight
  call made with the token (and refused without it).

Environment: QUIVERDB_URI (``grpc://127.0.0.1:PORT``), QUIVERDB_USER,
QUIVERDB_PASSWORD. ``tests/python_clients.rs`` starts the server and runs
this script with the packages of ``requirements.txt``; after it, the Rust
side checks the row counts of the tables this script leaves behind (``t``,
``t2``, ...), so a change to those here changes the list there.

By hand, against a running server: set the variables and run
``python test_flight_sql.py`` (plain unittest, verbose).
"""

import itertools
import os
import threading
import time
import unittest

import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)
import pyarrow.flight as flight

URI = os.environ["QUIVERDB_URI"]
USER = os.environ["QUIVERDB_USER"]
PASSWORD = os.environ["QUIVERDB_PASSWORD"]


def connect(password=PASSWORD):
    """An ADBC DB-API connection (autocommit: quiverdb has no transactions)."""
    return flight_sql.connect(
        URI,
        db_kwargs={"username": USER, "password": password},
        autocommit=True,
    )


def rows(cursor, sql, parameters=None):
    """All rows of a query, as a list of tuples."""
    cursor.execute(sql, parameters)
    return cursor.fetchall()


class AdbcTestCase(unittest.TestCase):
    """One ADBC connection and cursor per test class."""

    @classmethod
    def setUpClass(cls):
        cls.conn = connect()
        cls.cur = cls.conn.cursor()

    @classmethod
    def tearDownClass(cls):
        cls.cur.close()
        cls.conn.close()

    def count(self, table):
        return rows(self.cur, f"SELECT COUNT(*) FROM {table}")[0][0]


class StatementTest(AdbcTestCase):
    """DDL, DML with affected-row counts, and queries."""

    def test_ddl_dml_and_queries(self):
        cur = self.cur
        cur.execute(
            "CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, score DOUBLE, PRIMARY KEY (id))"
        )
        self.assertEqual(cur.fetchall(), [])

        cur.execute(
            "INSERT INTO t VALUES (1, 'a', 1.5), (2, 'b', NULL), (3, NULL, 3.25), (4, 'd', -1.0)"
        )
        self.assertEqual(cur.rowcount, 4)

        self.assertEqual(
            rows(cur, "SELECT id, name, score FROM t ORDER BY id"),
            [(1, "a", 1.5), (2, "b", None), (3, None, 3.25), (4, "d", -1.0)],
        )

        cur.execute("UPDATE t SET score = 2.5, name = 'bb' WHERE id = 2")
        self.assertEqual(cur.rowcount, 1)
        cur.execute("DELETE FROM t WHERE id = 4")
        self.assertEqual(cur.rowcount, 1)
        cur.execute("DELETE FROM t WHERE id > 100")
        self.assertEqual(cur.rowcount, 0)

        cur.execute("SELECT id, name, score FROM t ORDER BY id")
        table = cur.fetch_arrow_table()
        expected = pa.table(
            {
                "id": pa.array([1, 2, 3], pa.int64()),
                "name": pa.array(["a", "bb", None], pa.string()),
                "score": pa.array([1.5, 2.5, 3.25], pa.float64()),
            },
            schema=pa.schema(
                [
                    pa.field("id", pa.int64(), nullable=False),
                    # VARCHAR is stored as Utf8View and sent as Utf8.
                    pa.field("name", pa.string()),
                    pa.field("score", pa.float64()),
                ]
            ),
        )
        self.assertTrue(
            table.equals(expected),
            f"got {table.schema} {table.to_pydict()}, expected {expected.schema} {expected.to_pydict()}",
        )

        cur.execute("SELECT COUNT(*) AS n, SUM(score) AS total FROM t WHERE name IS NOT NULL")
        self.assertEqual([d[0] for d in cur.description], ["n", "total"])
        self.assertEqual(cur.fetchall(), [(2, 4.0)])


class ParameterTest(AdbcTestCase):
    """Prepared statements with bound parameters (`$1`, `$2`, ...)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.cur.execute(
            "CREATE TABLE params (id BIGINT NOT NULL, name VARCHAR, score DOUBLE, PRIMARY KEY (id))"
        )
        cls.cur.execute("INSERT INTO params VALUES (1, 'a', 1.0), (2, 'b', 2.0), (3, 'c', 3.0)")

    def test_select_with_dollar_parameters(self):
        self.assertEqual(rows(self.cur, "SELECT name FROM params WHERE id = $1", (2,)), [("b",)])
        # The same prepared statement, bound again with another value.
        self.assertEqual(rows(self.cur, "SELECT name FROM params WHERE id = $1", (3,)), [("c",)])
        self.assertEqual(
            rows(
                self.cur,
                "SELECT id FROM params WHERE score >= $1 AND name <> $2 ORDER BY id",
                (1.5, "c"),
            ),
            [(2,)],
        )
        self.assertEqual(rows(self.cur, "SELECT name FROM params WHERE id = $1", (42,)), [])

    def test_question_mark_placeholders(self):
        # JDBC/ODBC-style `?` placeholders are numbered $1, $2, ... in order.
        self.assertEqual(rows(self.cur, "SELECT name FROM params WHERE id = ?", (2,)), [("b",)])
        self.assertEqual(
            rows(self.cur, "SELECT id FROM params WHERE score >= ? AND name <> ? ORDER BY id", (1.5, "c")),
            [(2,)],
        )

    def test_insert_with_parameters(self):
        cur = self.cur
        cur.execute(
            "CREATE TABLE pinsert (id BIGINT NOT NULL, name VARCHAR, score DOUBLE, PRIMARY KEY (id))"
        )
        cur.execute("INSERT INTO pinsert VALUES ($1, $2, $3)", (10, "x", 1.5))
        self.assertEqual(cur.rowcount, 1)

        cur.executemany(
            "INSERT INTO pinsert VALUES ($1, $2, $3)",
            [(11, "y", 2.5), (12, None, 3.5), (13, "z", None)],
        )
        self.assertEqual(cur.rowcount, 3)

        cur.execute("UPDATE pinsert SET score = $1 WHERE id >= $2", (0.5, 12))
        self.assertEqual(cur.rowcount, 2)

        self.assertEqual(
            rows(cur, "SELECT id, name, score FROM pinsert ORDER BY id"),
            [(10, "x", 1.5), (11, "y", 2.5), (12, None, 0.5), (13, "z", 0.5)],
        )


class IngestTest(AdbcTestCase):
    """Bulk ingest (CommandStatementIngest) in every mode."""

    def batch(self, first, n):
        ids = list(range(first, first + n))
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "label": pa.array([f"row{i}" for i in ids], pa.string()),
            }
        )

    def test_ingest_modes(self):
        cur = self.cur
        self.assertEqual(cur.adbc_ingest("t2", self.batch(0, 3), mode="create"), 3)
        self.assertEqual(self.count("t2"), 3)
        self.assertEqual(
            rows(cur, "SELECT id, label FROM t2 ORDER BY id"),
            [(0, "row0"), (1, "row1"), (2, "row2")],
        )

        # create on an existing table fails and changes nothing.
        with self.assertRaises(adbc_driver_manager.Error) as caught:
            cur.adbc_ingest("t2", self.batch(100, 2), mode="create")
        self.assertIn("t2", str(caught.exception))
        self.assertEqual(self.count("t2"), 3)

        self.assertEqual(cur.adbc_ingest("t2", self.batch(3, 2), mode="append"), 2)
        self.assertEqual(self.count("t2"), 5)

        self.assertEqual(cur.adbc_ingest("t2", self.batch(10, 2), mode="replace"), 2)
        self.assertEqual(self.count("t2"), 2)
        self.assertEqual(rows(cur, "SELECT MIN(id), MAX(id) FROM t2"), [(10, 11)])

        # create_append appends to an existing table ...
        self.assertEqual(cur.adbc_ingest("t2", self.batch(20, 2), mode="create_append"), 2)
        self.assertEqual(self.count("t2"), 4)
        # ... and creates a missing one.
        self.assertEqual(cur.adbc_ingest("t3", self.batch(0, 5), mode="create_append"), 5)
        self.assertEqual(self.count("t3"), 5)

        # append to a missing table fails and creates nothing.
        with self.assertRaises(adbc_driver_manager.Error) as caught:
            cur.adbc_ingest("no_such_ingest_table", self.batch(0, 1), mode="append")
        self.assertIn("no_such_ingest_table", str(caught.exception))
        with self.assertRaises(adbc_driver_manager.Error):
            rows(cur, "SELECT COUNT(*) FROM no_such_ingest_table")

        self.assertEqual(
            rows(cur, "SELECT id, label FROM t2 ORDER BY id"),
            [(10, "row10"), (11, "row11"), (20, "row20"), (21, "row21")],
        )
        # An ingested table keeps the Arrow types it was created from.
        schema = self.conn.adbc_get_table_schema("t2")
        self.assertEqual(schema.names, ["id", "label"])
        self.assertEqual(schema.types, [pa.int64(), pa.string()])


class MetadataTest(AdbcTestCase):
    """Catalog metadata: GetObjects, GetTableSchema, GetInfo."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.cur.execute(
            "CREATE TABLE meta (id BIGINT NOT NULL, name VARCHAR, score DOUBLE, PRIMARY KEY (id))"
        )

    def test_get_objects(self):
        objects = self.conn.adbc_get_objects(
            depth="all", catalog_filter="quiverdb", db_schema_filter="public"
        ).read_all().to_pylist()
        catalogs = {c["catalog_name"]: c for c in objects}
        self.assertIn("quiverdb", catalogs)
        schemas = {s["db_schema_name"]: s for s in catalogs["quiverdb"]["catalog_db_schemas"]}
        self.assertIn("public", schemas)
        tables = {t["table_name"]: t for t in schemas["public"]["db_schema_tables"]}
        self.assertIn("meta", tables)
        self.assertEqual(tables["meta"]["table_type"], "TABLE")
        columns = [
            (c["column_name"], c["ordinal_position"]) for c in tables["meta"]["table_columns"]
        ]
        self.assertEqual(columns, [("id", 1), ("name", 2), ("score", 3)])

        # A table name filter keeps only that table.
        filtered = self.conn.adbc_get_objects(
            depth="tables", catalog_filter="quiverdb", table_name_filter="meta"
        ).read_all().to_pylist()
        names = [
            t["table_name"]
            for c in filtered
            for s in c["catalog_db_schemas"] or []
            for t in s["db_schema_tables"] or []
        ]
        self.assertEqual(names, ["meta"])

    def test_schemas_hold_tables_and_views(self):
        cur = self.cur
        cur.execute("CREATE SCHEMA py_sales")
        self.addCleanup(cur.execute, "DROP SCHEMA IF EXISTS py_sales CASCADE")
        cur.execute("CREATE TABLE py_sales.meta (id BIGINT NOT NULL, amount DOUBLE, PRIMARY KEY (id))")
        cur.execute("CREATE VIEW py_sales.big AS SELECT id FROM py_sales.meta WHERE amount > 2")
        data = pa.table({"id": pa.array([1, 2], pa.int64()), "amount": pa.array([1.5, 2.5])})
        cur.adbc_ingest("meta", data, mode="append", db_schema_name="py_sales")
        self.assertEqual(rows(cur, "SELECT id, amount FROM py_sales.meta ORDER BY id"), [(1, 1.5), (2, 2.5)])
        self.assertEqual(rows(cur, "SELECT id FROM py_sales.big"), [(2,)])
        # The public table of the same name is another table.
        cur.execute("SELECT * FROM meta LIMIT 0")
        self.assertEqual([d[0] for d in cur.description], ["id", "name", "score"])
        cur.fetchall()

        objects = self.conn.adbc_get_objects(
            depth="tables", catalog_filter="quiverdb", db_schema_filter="py_sales"
        ).read_all().to_pylist()
        tables = {
            t["table_name"]: t["table_type"]
            for c in objects
            for s in c["catalog_db_schemas"] or []
            for t in s["db_schema_tables"] or []
        }
        self.assertEqual(tables, {"meta": "TABLE", "big": "VIEW"})
        schema = self.conn.adbc_get_table_schema("meta", db_schema_filter="py_sales")
        self.assertEqual(schema.names, ["id", "amount"])

        with self.assertRaises(adbc_driver_manager.Error) as raised:
            cur.adbc_ingest("meta", data, mode="append", db_schema_name="py_nowhere")
        self.assertIn("py_nowhere", str(raised.exception))
        with self.assertRaises(adbc_driver_manager.Error) as raised:
            cur.execute("DROP SCHEMA py_sales")
        self.assertIn("not empty", str(raised.exception))
        cur.execute("DROP SCHEMA py_sales CASCADE")
        with self.assertRaises(adbc_driver_manager.Error):
            cur.execute("SELECT * FROM py_sales.meta")

    def test_get_table_schema(self):
        schema = self.conn.adbc_get_table_schema("meta")
        self.assertEqual(schema.names, ["id", "name", "score"])
        # VARCHAR is stored as Utf8View and reported as Utf8, as results are sent.
        self.assertEqual(schema.types, [pa.int64(), pa.string(), pa.float64()])
        self.assertFalse(schema.field("id").nullable)
        self.assertTrue(schema.field("name").nullable)
        with self.assertRaises(adbc_driver_manager.Error):
            self.conn.adbc_get_table_schema("no_such_table_for_schema")

    def test_get_info(self):
        info = self.conn.adbc_get_info()
        self.assertEqual(info["vendor_name"], "quiverdb")
        self.assertTrue(info["vendor_version"], info)
        self.assertIn("Flight SQL", info["driver_name"])


class ErrorTest(AdbcTestCase):
    """Failed statements raise with the server's message and leave the
    connection usable."""

    def test_unknown_table(self):
        with self.assertRaises(adbc_driver_manager.Error) as caught:
            rows(self.cur, "SELECT * FROM no_such_table_xyz")
        self.assertIn("no_such_table_xyz", str(caught.exception))
        self.assertEqual(rows(self.cur, "SELECT 1 + 1"), [(2,)])

    def test_cancel_stops_a_running_query_on_the_server(self):
        """ADBC's cursor.adbc_cancel() stops a query that would run for hours:
        the executing call fails, and the server no longer lists it."""
        endless = "SELECT COUNT(*) FROM generate_series(1, 100000000000) WHERE value < 0"
        listed = (
            "SELECT COUNT(*) FROM system.queries "
            "WHERE sql LIKE '%100000000000%' AND sql NOT LIKE '%system.queries%'"
        )

        def running():
            return rows(self.cur, listed)[0][0]

        with connect() as conn:
            cur = conn.cursor()
            failures = []

            def run():
                try:
                    cur.execute(endless)
                    cur.fetchall()
                except adbc_driver_manager.Error as e:
                    failures.append(e)

            thread = threading.Thread(target=run)
            thread.start()
            deadline = time.time() + 30
            while running() == 0 and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(running(), 1)
            cur.adbc_cancel()
            thread.join(30)
            self.assertFalse(thread.is_alive(), "the cancelled call still runs")
            self.assertEqual(len(failures), 1, "the cancelled query returned rows")
            deadline = time.time() + 30
            while running() != 0 and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(running(), 0, "the server still runs the cancelled query")
            cur.close()

    def test_syntax_error(self):
        with self.assertRaises(adbc_driver_manager.Error) as caught:
            rows(self.cur, "SELEC 1")
        self.assertIn("SELEC", str(caught.exception))
        self.assertEqual(rows(self.cur, "SELECT 'still' || ' here'"), [("still here",)])

    def test_duplicate_primary_key(self):
        self.cur.execute("CREATE TABLE dup (id BIGINT NOT NULL, PRIMARY KEY (id))")
        self.cur.execute("INSERT INTO dup VALUES (1)")
        with self.assertRaises(adbc_driver_manager.Error):
            self.cur.execute("INSERT INTO dup VALUES (1)")
            self.cur.fetchall()
        self.assertEqual(self.count("dup"), 1)

    def test_wrong_password(self):
        with self.assertRaises(adbc_driver_manager.Error) as caught:
            with connect(password=PASSWORD + "-wrong") as conn:
                with conn.cursor() as cur:
                    cur.execute("SELECT 1")
                    cur.fetchall()
        self.assertIn("Unauthenticated", str(caught.exception))


class ResultTypesTest(AdbcTestCase):
    """Results carry the values and types of the plan that ran (after
    DataFusion's type coercion): nothing is cast lossily on the way out, and
    the schema announced for a query is the schema its batches have."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.cur.execute("CREATE TABLE mixed (a INT, f DOUBLE, s VARCHAR)")
        cls.cur.execute("INSERT INTO mixed VALUES (2, 2.5, 'two')")

    def table(self, sql):
        self.cur.execute(sql)
        return self.cur.fetch_arrow_table()

    def test_union_of_mixed_numbers_keeps_every_value(self):
        result = self.table("SELECT 2 AS x UNION ALL SELECT 1.5")
        self.assertEqual(result.schema.field("x").type, pa.float64())
        self.assertEqual(sorted(result.column("x").to_pylist()), [1.5, 2.0])
        result = self.table("SELECT CAST(1 AS TINYINT) AS x UNION ALL SELECT 1000")
        self.assertEqual(sorted(result.column("x").to_pylist()), [1, 1000])

    def test_case_with_branches_of_different_types(self):
        self.assertEqual(
            rows(self.cur, "SELECT CASE WHEN a = 1 THEN a ELSE f END FROM mixed"), [(2.5,)]
        )
        self.assertEqual(
            rows(self.cur, "SELECT CASE a WHEN 1 THEN 10 ELSE 2.75 END FROM mixed"), [(2.75,)]
        )
        self.assertEqual(
            rows(self.cur, "SELECT CASE WHEN a = 1 THEN 7 ELSE s END FROM mixed"), [("two",)]
        )

    def test_arrays_of_mixed_integer_types(self):
        result = self.table(
            "SELECT make_array(arrow_cast(2, 'UInt8')) AS x "
            "UNION ALL SELECT make_array(arrow_cast(-2, 'Int8')) AS x"
        )
        self.assertEqual(sorted(result.column("x").to_pylist()), [[-2], [2]])

    def test_a_dictionary_result_arrives_as_its_values(self):
        # ADBC checks that each endpoint's schema is the announced one.
        result = self.table("SELECT arrow_cast(s, 'Dictionary(Int32, Utf8)') AS d FROM mixed")
        self.assertEqual(result.schema.field("d").type, pa.string())
        self.assertEqual(result.column("d").to_pylist(), ["two"])

    def test_ingest_of_a_dictionary_column_stores_its_values(self):
        table = pa.table(
            {
                "id": pa.array([1, 2, 3], pa.int64()),
                "s": pa.array(["a", None, "a"]).dictionary_encode(),
            }
        )
        self.cur.adbc_ingest("dict_ingest", table, mode="create")
        self.addCleanup(self.cur.execute, "DROP TABLE dict_ingest")
        self.cur.execute("SELECT id, s FROM dict_ingest ORDER BY id")
        result = self.cur.fetch_arrow_table()
        self.assertEqual(result.schema.field("s").type, pa.string())
        self.assertEqual(result.to_pylist(), [{"id": 1, "s": "a"}, {"id": 2, "s": None}, {"id": 3, "s": "a"}])

    def test_nested_columns_round_trip(self):
        table = pa.table(
            {
                "id": pa.array([1, 2, 3], pa.int64()),
                "tags": pa.array([["a", "b"], None, []], pa.list_(pa.string())),
                "point": pa.array(
                    [{"x": 1.5, "y": None}, None, {"x": -2.0, "y": 4}],
                    pa.struct([("x", pa.float64()), ("y", pa.int32())]),
                ),
                "attrs": pa.array([[("k", 1)], [], None], pa.map_(pa.string(), pa.int64())),
                "big": pa.array([10**40, None, -1], pa.decimal256(45, 0)),
            }
        )
        self.cur.adbc_ingest("nested_ingest", table, mode="create")
        self.addCleanup(self.cur.execute, "DROP TABLE nested_ingest")
        self.cur.execute("SELECT id, tags, point, attrs, big FROM nested_ingest ORDER BY id")
        result = self.cur.fetch_arrow_table()
        self.assertEqual(result.to_pylist(), table.to_pylist())
        self.assertEqual(result.schema.field("point").type, table.schema.field("point").type)
        self.assertEqual(
            rows(self.cur, "SELECT id FROM nested_ingest WHERE point['x'] > 0 OR cardinality(tags) = 0 ORDER BY id"),
            [(1,), (3,)],
        )

    def test_many_nested_rows_round_trip(self):
        # More rows than a shard holds, so the server rebuilds full shards
        # into child columns while the rest stay in the delta.
        n = 100_000
        ids = pa.array(range(n), pa.int64())
        valid = pa.array([i % 13 != 5 for i in range(n)])
        lengths = [i % 4 for i in range(n)]
        offsets = pa.array([0] + list(itertools.accumulate(lengths)), pa.int32())
        values = pa.array([(i * 7) % 1000 for i in range(offsets[-1].as_py())], pa.int64())
        names = pa.array([f"name {i % 37}" if i % 9 else None for i in range(n)])
        point = pa.StructArray.from_arrays(
            [pa.array([i * 0.5 for i in range(n)]), names], names=["x", "name"], mask=pa.compute.invert(valid)
        )
        table = pa.table(
            {
                "id": ids,
                "point": point,
                "ints": pa.ListArray.from_arrays(offsets, values),
                "words": pa.LargeListArray.from_arrays(
                    pa.array(offsets.to_pylist(), pa.int64()), pa.array([f"w{v}" for v in values.to_pylist()])
                ),
                "pair": pa.FixedSizeListArray.from_arrays(pa.array([float(i % 5) for i in range(2 * n)]), 2),
                "attrs": pa.MapArray.from_arrays(offsets, pa.array([f"k{v % 3}" for v in values.to_pylist()]), values),
            }
        )
        self.cur.adbc_ingest("many_nested", table, mode="create")
        self.addCleanup(self.cur.execute, "DROP TABLE many_nested")
        for _ in range(2):
            self.cur.execute("SELECT * FROM many_nested ORDER BY id")
            result = self.cur.fetch_arrow_table()
            self.assertEqual(result.num_rows, n)
            for name in table.column_names:
                self.assertEqual(result.column(name).to_pylist(), table.column(name).to_pylist(), name)
            # A large list arrives as a list (arrow-flight's encoder sends it so).
            self.assertEqual(result.schema.field("words").type, pa.list_(pa.string()))
            time.sleep(1)
        self.assertEqual(
            rows(self.cur, "SELECT COUNT(*), SUM(point['x']), SUM(cardinality(ints)) FROM many_nested WHERE point IS NOT NULL"),
            [(sum(1 for i in range(n) if i % 13 != 5), sum(i * 0.5 for i in range(n) if i % 13 != 5), sum(lengths[i] for i in range(n) if i % 13 != 5))],
        )

    def test_execute_schema_describes_a_query_without_running_it(self):
        # ADBC prepares the statement and reads its dataset schema.
        sql = "SELECT a, f, 2 AS x FROM mixed UNION ALL SELECT 1, 0.5, 1.5"
        described = self.cur.adbc_execute_schema(sql)
        self.assertEqual(described, self.table(sql).schema)
        self.assertEqual(described.field("x").type, pa.float64())
        self.cur.adbc_execute_schema("INSERT INTO mixed VALUES (9, 9.5, 'nine')")
        self.assertEqual(self.count("mixed"), 1)

    def test_executemany_is_all_or_nothing(self):
        cur = self.cur
        cur.execute("CREATE TABLE many (id BIGINT NOT NULL, PRIMARY KEY (id))")
        cur.execute("INSERT INTO many VALUES (1)")
        with self.assertRaises(adbc_driver_manager.Error):
            cur.executemany("INSERT INTO many VALUES ($1)", [(2,), (3,), (1,), (4,)])
        self.assertEqual(self.count("many"), 1)
        cur.executemany("INSERT INTO many VALUES ($1)", [(2,), (3,)])
        self.assertEqual(rows(cur, "SELECT id FROM many ORDER BY id"), [(1,), (2,), (3,)])
        # The second row's key is taken: the first row's change is undone.
        with self.assertRaises(adbc_driver_manager.Error):
            cur.executemany("UPDATE many SET id = $1 WHERE id = $2", [(10, 1), (3, 2)])
        self.assertEqual(rows(cur, "SELECT id FROM many ORDER BY id"), [(1,), (2,), (3,)])
        # Rows run in order: 1 and 2 swap through 1000.
        cur.executemany("UPDATE many SET id = $1 WHERE id = $2", [(1000, 1), (1, 2), (2, 1000)])
        self.assertEqual(rows(cur, "SELECT id FROM many ORDER BY id"), [(1,), (2,), (3,)])
        cur.executemany("UPDATE many SET id = id * 10 WHERE id = $1", [(1,), (10,)])
        self.assertEqual(rows(cur, "SELECT id FROM many ORDER BY id"), [(2,), (3,), (100,)])
        cur.execute("DROP TABLE many")

    def test_delete_with_a_parameter_removes_only_its_row(self):
        cur = self.cur
        cur.execute("CREATE TABLE victims (id BIGINT NOT NULL, PRIMARY KEY (id))")
        cur.execute("INSERT INTO victims VALUES (1), (2), (3), (4)")
        cur.execute("DELETE FROM victims WHERE id = $1", (2,))
        self.assertEqual(cur.rowcount, 1)
        self.assertEqual(rows(cur, "SELECT id FROM victims ORDER BY id"), [(1,), (3,), (4,)])
        cur.execute("DROP TABLE victims")


class SessionTest(unittest.TestCase):
    """SET, SHOW, RESET and Flight session options, per connection.

    A connection keeps a session through the cookie the server sets when
    its first SET runs; ADBC sends cookies back with its cookie middleware.
    """

    def session_connection(self):
        conn = flight_sql.connect(
            URI,
            db_kwargs={
                "username": USER,
                "password": PASSWORD,
                "adbc.flight.sql.rpc.with_cookie_middleware": "true",
            },
            autocommit=True,
        )
        self.addCleanup(conn.close)
        return conn

    def type_of_one_and_a_half(self, cur):
        cur.execute("SELECT 1.5 AS x")
        table = cur.fetch_arrow_table()
        return table.schema.field("x").type, table.column("x").to_pylist()

    def test_set_changes_only_its_own_connection(self):
        mine = self.session_connection().cursor()
        other = self.session_connection().cursor()
        self.addCleanup(mine.close)
        self.addCleanup(other.close)
        # Both plan this text first in the shared session (and its cache).
        self.assertEqual(self.type_of_one_and_a_half(other), (pa.float64(), [1.5]))
        self.assertEqual(self.type_of_one_and_a_half(mine), (pa.float64(), [1.5]))

        mine.execute("SET datafusion.sql_parser.parse_float_as_decimal = true")
        self.assertEqual(self.type_of_one_and_a_half(mine)[0], pa.decimal128(2, 1))
        self.assertEqual(
            rows(mine, "SHOW datafusion.sql_parser.parse_float_as_decimal"),
            [("datafusion.sql_parser.parse_float_as_decimal", "true")],
        )
        # The other connection's queries are unchanged.
        self.assertEqual(self.type_of_one_and_a_half(other), (pa.float64(), [1.5]))
        self.assertEqual(
            rows(other, "SHOW datafusion.sql_parser.parse_float_as_decimal"),
            [("datafusion.sql_parser.parse_float_as_decimal", "false")],
        )

        mine.execute("SET TIME ZONE = '+08:00'")
        self.assertEqual(rows(mine, "SHOW TIME ZONE"), [("datafusion.execution.time_zone", "+08:00")])
        self.assertNotEqual(rows(other, "SHOW TIME ZONE"), [("datafusion.execution.time_zone", "+08:00")])

        mine.execute("RESET datafusion.sql_parser.parse_float_as_decimal")
        self.assertEqual(self.type_of_one_and_a_half(mine), (pa.float64(), [1.5]))
        # RESET touched one setting; the time zone stays.
        self.assertEqual(rows(mine, "SHOW TIME ZONE"), [("datafusion.execution.time_zone", "+08:00")])

    def test_set_without_cookies_holds_for_the_connection(self):
        # Without the cookie middleware the session is kept by the
        # connection; another connection keeps the server's settings.
        conn = connect()
        self.addCleanup(conn.close)
        cur = conn.cursor()
        self.addCleanup(cur.close)
        cur.execute("SET datafusion.sql_parser.parse_float_as_decimal = true")
        cur.fetchall()
        self.assertEqual(self.type_of_one_and_a_half(cur)[0], pa.decimal128(2, 1))
        other = connect()
        self.addCleanup(other.close)
        other_cur = other.cursor()
        self.addCleanup(other_cur.close)
        self.assertEqual(self.type_of_one_and_a_half(other_cur), (pa.float64(), [1.5]))

    def test_settings_of_the_server_are_refused(self):
        cur = self.session_connection().cursor()
        self.addCleanup(cur.close)
        with self.assertRaises(adbc_driver_manager.ProgrammingError) as raised:
            cur.execute("SET datafusion.runtime.memory_limit = '100G'")
        self.assertIn("server's setting", str(raised.exception))
        with self.assertRaises(adbc_driver_manager.ProgrammingError) as raised:
            cur.execute("SET datafusion.execution.batch_size = 1000000000")
        self.assertIn("at most", str(raised.exception))
        with self.assertRaises(adbc_driver_manager.Error) as raised:
            cur.execute("SET datafusion.no_such_option = 1")
        self.assertIn("no_such_option", str(raised.exception))
        # Nothing was set.
        self.assertEqual(
            rows(cur, "SHOW datafusion.execution.batch_size"),
            [("datafusion.execution.batch_size", "8192")],
        )

    def test_flight_session_options(self):
        conn = self.session_connection()
        prefix = "adbc.flight.sql.session.option."
        conn.adbc_connection.set_options(**{prefix + "datafusion.execution.time_zone": "+05:30"})
        self.assertEqual(conn.adbc_connection.get_option(prefix + "datafusion.execution.time_zone"), "+05:30")
        cur = conn.cursor()
        self.addCleanup(cur.close)
        self.assertEqual(rows(cur, "SHOW TIME ZONE"), [("datafusion.execution.time_zone", "+05:30")])
        cur.execute("SET datafusion.execution.batch_size = 100")
        self.assertEqual(conn.adbc_connection.get_option(prefix + "datafusion.execution.batch_size"), "100")
        # A fresh connection sees the server's settings.
        fresh = self.session_connection().cursor()
        self.addCleanup(fresh.close)
        self.assertEqual(
            rows(fresh, "SHOW datafusion.execution.batch_size"),
            [("datafusion.execution.batch_size", "8192")],
        )


def _varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _length_delimited(field, payload):
    """One protobuf length-delimited field (string, bytes or message)."""
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def statement_query_command(sql):
    """A Flight SQL CommandStatementQuery packed in a protobuf Any, encoded
    by hand (pyarrow ships no Flight SQL messages)."""
    type_url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    command = _length_delimited(1, sql.encode())
    return _length_delimited(1, type_url) + _length_delimited(2, command)


class PyArrowFlightTest(unittest.TestCase):
    """The plain Flight client: handshake and bearer token."""

    def setUp(self):
        self.client = flight.FlightClient(URI)

    def tearDown(self):
        self.client.close()

    def test_basic_handshake_gives_a_bearer_token_that_works(self):
        header = self.client.authenticate_basic_token(USER, PASSWORD)
        self.assertEqual(len(header), 2)
        self.assertEqual(header[0].lower(), b"authorization")
        self.assertTrue(header[1].startswith(b"Bearer "), header)
        self.assertGreater(len(header[1]), len(b"Bearer "))

        options = flight.FlightCallOptions(headers=[header])
        descriptor = flight.FlightDescriptor.for_command(
            statement_query_command("SELECT 7 AS seven, 'x' AS letter")
        )
        info = self.client.get_flight_info(descriptor, options)
        self.assertEqual(info.schema.names, ["seven", "letter"])
        self.assertEqual(len(info.endpoints), 1)
        table = self.client.do_get(info.endpoints[0].ticket, options).read_all()
        self.assertEqual(table.to_pylist(), [{"seven": 7, "letter": "x"}])

    def test_wrong_password_is_unauthenticated(self):
        with self.assertRaises(flight.FlightUnauthenticatedError):
            self.client.authenticate_basic_token(USER, PASSWORD + "-wrong")
        with self.assertRaises(flight.FlightUnauthenticatedError):
            self.client.authenticate_basic_token(USER + "-wrong", PASSWORD)

    def test_call_without_token_is_unauthenticated(self):
        descriptor = flight.FlightDescriptor.for_command(statement_query_command("SELECT 1"))
        with self.assertRaises(flight.FlightUnauthenticatedError):
            self.client.get_flight_info(descriptor)
        bogus = flight.FlightCallOptions(headers=[(b"authorization", b"Bearer not-a-token")])
        with self.assertRaises(flight.FlightUnauthenticatedError):
            self.client.get_flight_info(descriptor, bogus)


if __name__ == "__main__":
    unittest.main(verbosity=2)
