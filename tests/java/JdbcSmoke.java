// The path DBeaver takes: Arrow's Flight SQL JDBC driver runs a query and
// reads DatabaseMetaData.getTables. Run by tests/jdbc.rs against a test
// server; prints what it read, one fact per line, for the test to check.
//
//   java --add-opens=java.base/java.nio=ALL-UNNAMED -cp flight-sql-jdbc-driver.jar \
//       tests/java/JdbcSmoke.java HOST:PORT USER PASSWORD

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;

public class JdbcSmoke {
    public static void main(String[] args) throws Exception {
        String url = "jdbc:arrow-flight-sql://" + args[0] + "?useEncryption=false";
        try (Connection conn = DriverManager.getConnection(url, args[1], args[2])) {
            try (Statement st = conn.createStatement()) {
                st.execute("CREATE TABLE jdbc_t (id BIGINT NOT NULL, name VARCHAR)");
                int inserted = st.executeUpdate("INSERT INTO jdbc_t VALUES (1, 'ada'), (2, NULL), (3, 'grace')");
                System.out.println("inserted " + inserted);
                System.out.println("deleted " + st.executeUpdate("DELETE FROM jdbc_t WHERE id = 99"));
                try (ResultSet rs = st.executeQuery("SELECT id, name FROM jdbc_t ORDER BY id")) {
                    while (rs.next()) {
                        String name = rs.getString(2);
                        System.out.println("row " + rs.getLong(1) + " " + (name == null ? "NULL" : name));
                    }
                }
            }
            try (PreparedStatement ps = conn.prepareStatement("SELECT COUNT(*) FROM jdbc_t WHERE id > ?")) {
                ps.setLong(1, 1);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    System.out.println("count " + rs.getLong(1));
                }
            }
            // SET holds for this connection's session (the driver sends the
            // session cookie back); a second connection keeps the server's.
            try (Statement st = conn.createStatement()) {
                st.execute("SET datafusion.sql_parser.parse_float_as_decimal = true");
                try (ResultSet rs = st.executeQuery("SELECT 1.5 AS x")) {
                    System.out.println("session type " + rs.getMetaData().getColumnTypeName(1));
                }
            }
            try (Connection other = DriverManager.getConnection(url, args[1], args[2]);
                    Statement st = other.createStatement();
                    ResultSet rs = st.executeQuery("SELECT 1.5 AS x")) {
                System.out.println("other type " + rs.getMetaData().getColumnTypeName(1));
            }
            DatabaseMetaData meta = conn.getMetaData();
            try (ResultSet rs = meta.getTables(null, null, "jdbc%", null)) {
                while (rs.next()) {
                    System.out.println("table " + rs.getString("TABLE_CAT") + "." + rs.getString("TABLE_SCHEM") + "."
                            + rs.getString("TABLE_NAME") + " " + rs.getString("TABLE_TYPE"));
                }
            }
            try (ResultSet rs = meta.getColumns(null, null, "jdbc_t", "%")) {
                while (rs.next()) {
                    System.out.println("column " + rs.getString("COLUMN_NAME") + " " + rs.getString("TYPE_NAME"));
                }
            }
        }
    }
}
