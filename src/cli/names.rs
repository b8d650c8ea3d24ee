//! Names as SQL reads them: the table `quiverdb load` loads into (and
//! the shell's `\d` describes), the columns of `--schema`, and the column
//! names a file brings (a CSV header, a Parquet schema).
//!
//! A name without double quotes is folded to lower case, ASCII letters
//! only, as the server's SQL folds it: `Sales`, `SALES` and `sales` name
//! one table. A name in double quotes keeps its case and may hold any
//! character; `""` inside it stands for one `"`. A table name may be
//! qualified by its schema, and that by its catalog: `s.t`,
//! `"Q1 Sales".t`, `quiverdb.public.t`.
//!
//! A file's column names follow the same rule, read from the name's text:
//! a CSV header field whose text is `"Name"` (written `"""Name"""` in the
//! file, inside CSV's own quotes) gives the column `Name`, and the field
//! `Name` gives `name`, whether or not the file quotes it. The quotes CSV
//! puts around a field do not count, so a file written with every field
//! quoted reads like one written without. Unlike the table name, an
//! unquoted column name may hold any character (a header `Order Date`
//! gives the column `order date`): only its case is folded.

use std::fmt;

/// A table's name, each part as SQL names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableName {
    /// The catalog, if the name gives one.
    pub(crate) catalog: Option<String>,
    /// The schema, if the name gives one.
    pub(crate) schema: Option<String>,
    /// The table.
    pub(crate) table: String,
}

impl TableName {
    /// Reads `[[catalog.]schema.]table`, each part a SQL identifier.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        loop {
            let (part, after) = identifier(rest).map_err(|why| not_a_name(text, &why))?;
            parts.push(part);
            let after = after.trim_start();
            if after.is_empty() {
                break;
            }
            rest = after.strip_prefix('.').ok_or_else(|| not_a_name(text, &unexpected(after)))?;
        }
        let mut parts = parts.into_iter();
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(table), None, None, None) => Ok(Self { catalog: None, schema: None, table }),
            (Some(schema), Some(table), None, None) => Ok(Self { catalog: None, schema: Some(schema), table }),
            (Some(catalog), Some(schema), Some(table), None) => {
                Ok(Self { catalog: Some(catalog), schema: Some(schema), table })
            }
            _ => Err(format!("'{text}' is not a table name: give at most catalog.schema.table")),
        }
    }
}

/// The parts joined by dots, as the messages name the table.
impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in [&self.catalog, &self.schema].into_iter().flatten() {
            write!(f, "{part}.")?;
        }
        f.write_str(&self.table)
    }
}

/// The message for a table argument that does not read as a name.
fn not_a_name(text: &str, why: &str) -> String {
    format!(
        "'{text}' is not a table name: {why} (a name in double quotes, such as '\"{text}\"', may hold any character)"
    )
}

/// The message for text where a name or a dot should be.
fn unexpected(rest: &str) -> String {
    match rest.chars().next() {
        Some(c) => format!("unexpected '{c}'"),
        None => "a name is missing".to_string(),
    }
}

/// Whether `c` may start an unquoted identifier (as in the server's SQL
/// dialect).
fn starts_identifier(c: char) -> bool {
    c.is_alphabetic() || matches!(c, '_' | '#' | '@')
}

/// Whether `c` may follow the first character of an unquoted identifier.
fn continues_identifier(c: char) -> bool {
    c.is_alphabetic() || c.is_ascii_digit() || matches!(c, '_' | '#' | '@' | '$')
}

/// Reads the identifier at the start of `text` (after any spaces):
/// returns it as SQL names it, and the text after it.
fn identifier(text: &str) -> Result<(String, &str), String> {
    let text = text.trim_start();
    if let Some(quoted) = text.strip_prefix('"') {
        return match quoted_identifier(quoted) {
            None => Err("a name in double quotes misses its closing '\"'".into()),
            Some((name, _)) if name.is_empty() => Err("a name in double quotes is empty".into()),
            Some(found) => Ok(found),
        };
    }
    let end = text
        .char_indices()
        .find(|&(i, c)| if i == 0 { !starts_identifier(c) } else { !continues_identifier(c) })
        .map_or(text.len(), |(i, _)| i);
    if end == 0 {
        return Err(unexpected(text));
    }
    Ok((text[..end].to_ascii_lowercase(), &text[end..]))
}

/// Reads a quoted identifier from after its opening quote: its text (with
/// `""` as `"`) and the text after its closing quote, or `None` if it is
/// not closed.
fn quoted_identifier(quoted: &str) -> Option<(String, &str)> {
    let mut name = String::new();
    let mut chars = quoted.char_indices();
    while let Some((i, c)) = chars.next() {
        if c != '"' {
            name.push(c);
        } else if quoted[i + 1..].starts_with('"') {
            name.push('"');
            chars.next();
        } else {
            return Some((name, &quoted[i + 1..]));
        }
    }
    None
}

/// A column name from a file, as SQL names it: the text inside double
/// quotes if the whole text is one quoted name, else the text with ASCII
/// letters in lower case.
pub(crate) fn column_name(text: &str) -> String {
    if let Some(quoted) = text.strip_prefix('"')
        && let Some((name, "")) = quoted_identifier(quoted)
        && !name.is_empty()
    {
        return name;
    }
    text.to_ascii_lowercase()
}

/// `name` written as a quoted SQL identifier.
pub(crate) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A column of `--schema`: its name, its SQL type (the text of it) and
/// whether it may hold NULL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ColumnDef {
    pub(crate) name: String,
    pub(crate) sql_type: String,
    pub(crate) nullable: bool,
}

/// Reads `--schema`: `name TYPE [NOT NULL], ...`, names as SQL reads
/// them. A type is words, numbers and parentheses (`DECIMAL(10, 2)`,
/// `TIMESTAMP WITH TIME ZONE`); the server says which types it knows.
pub(crate) fn parse_columns(text: &str) -> Result<Vec<ColumnDef>, String> {
    let mut columns: Vec<ColumnDef> = Vec::new();
    for item in split_columns(text)? {
        if item.trim().is_empty() {
            return Err("a column is missing (two commas in a row, or one at an end)".into());
        }
        let (name, rest) =
            identifier(item).map_err(|why| format!("'{}': {why} where a column name should be", item.trim()))?;
        let words: Vec<&str> = rest.split_whitespace().collect();
        let (words, nullable) = match words.as_slice() {
            [head @ .., not, null] if not.eq_ignore_ascii_case("NOT") && null.eq_ignore_ascii_case("NULL") => {
                (head, false)
            }
            [head @ .., null] if null.eq_ignore_ascii_case("NULL") => (head, true),
            all => (all, true),
        };
        let sql_type = words.join(" ");
        if sql_type.is_empty() {
            return Err(format!("column '{name}' has no type"));
        }
        if let Some(c) = sql_type.chars().find(|&c| !(c.is_ascii_alphanumeric() || " _(),".contains(c))) {
            return Err(format!("column '{name}': unexpected '{c}' in its type '{sql_type}'"));
        }
        if columns.iter().any(|c| c.name == name) {
            return Err(format!("column '{name}' is given twice"));
        }
        columns.push(ColumnDef { name, sql_type, nullable });
    }
    Ok(columns)
}

/// `text` split at the commas that are neither inside double quotes nor
/// inside parentheses.
fn split_columns(text: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let (mut start, mut depth, mut quoted) = (0, 0usize, false);
    for (i, c) in text.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth = depth.checked_sub(1).ok_or("a ')' without its '('")?,
            ',' if !quoted && depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if quoted {
        return Err("a name in double quotes misses its closing '\"'".into());
    }
    if depth > 0 {
        return Err("a '(' without its ')'".into());
    }
    items.push(&text[start..]);
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::{ColumnDef, TableName, column_name, parse_columns, quote};

    fn name(catalog: Option<&str>, schema: Option<&str>, table: &str) -> TableName {
        TableName { catalog: catalog.map(Into::into), schema: schema.map(Into::into), table: table.into() }
    }

    /// Folding follows the server's SQL: ASCII letters only (a
    /// `CREATE TABLE Übersicht` is stored as `Übersicht` with its `Ü`).
    #[test]
    fn table_names_fold_unquoted_parts() {
        assert_eq!(TableName::parse("Sales"), Ok(name(None, None, "sales")));
        assert_eq!(TableName::parse("  sales_2024 "), Ok(name(None, None, "sales_2024")));
        assert_eq!(TableName::parse("ÜberSicht"), Ok(name(None, None, "Übersicht")));
        assert_eq!(TableName::parse("S.T"), Ok(name(None, Some("s"), "t")));
        assert_eq!(TableName::parse("s . t"), Ok(name(None, Some("s"), "t")));
        assert_eq!(TableName::parse("Quiverdb.Public.T"), Ok(name(Some("quiverdb"), Some("public"), "t")));
    }

    #[test]
    fn quoted_table_names_keep_their_text() {
        assert_eq!(TableName::parse("\"MyTable\""), Ok(name(None, None, "MyTable")));
        assert_eq!(TableName::parse("\"my table\""), Ok(name(None, None, "my table")));
        assert_eq!(TableName::parse("\"a.b\""), Ok(name(None, None, "a.b")));
        assert_eq!(TableName::parse("\"Q1\".\"say \"\"hi\"\"\""), Ok(name(None, Some("Q1"), "say \"hi\"")));
        assert_eq!(TableName::parse("S.\"T\""), Ok(name(None, Some("s"), "T")));
        assert_eq!(name(None, Some("s"), "T").to_string(), "s.T");
        assert_eq!(name(Some("c"), Some("s"), "t").to_string(), "c.s.t");
    }

    #[test]
    fn bad_table_names() {
        for (text, why) in [
            ("my-table", "unexpected '-'"),
            ("1abc", "unexpected '1'"),
            ("", "a name is missing"),
            ("s.", "a name is missing"),
            (".t", "unexpected '.'"),
            ("\"open", "closing"),
            ("a.b.c.d", "at most catalog.schema.table"),
            ("t x", "unexpected 'x'"),
        ] {
            let error = TableName::parse(text).expect_err(text);
            assert!(error.contains(why), "{text}: {error}");
            assert!(error.contains(&format!("'{text}'")), "{text}: {error}");
        }
    }

    #[test]
    fn column_names() {
        assert_eq!(column_name("Id"), "id");
        assert_eq!(column_name("Order Date"), "order date");
        assert_eq!(column_name("\"MixedCase\""), "MixedCase");
        assert_eq!(column_name("\"say \"\"hi\"\"\""), "say \"hi\"");
        // Not one quoted name: folded as it is.
        assert_eq!(column_name("\"A\"B\""), "\"a\"b\"");
        assert_eq!(column_name("\"A"), "\"a");
        assert_eq!(column_name("\"\""), "\"\"");
        assert_eq!(column_name(""), "");
        assert_eq!(quote("say \"hi\""), "\"say \"\"hi\"\"\"");
        // A quoted name reads back as itself.
        for text in ["MixedCase", "a \"b\" c", "", "x,y"] {
            assert_eq!(
                TableName::parse(&quote(text)).map(|n| n.table).ok(),
                (!text.is_empty()).then(|| text.to_string())
            );
        }
    }

    fn def(name: &str, sql_type: &str, nullable: bool) -> ColumnDef {
        ColumnDef { name: name.into(), sql_type: sql_type.into(), nullable }
    }

    #[test]
    fn schema_columns() {
        assert_eq!(parse_columns("a INT, b TEXT"), Ok(vec![def("a", "INT", true), def("b", "TEXT", true)]));
        assert_eq!(
            parse_columns(" Price DECIMAL(10, 2) not null ,\"Note, long\"  varchar NULL,t timestamp  with time zone"),
            Ok(vec![
                def("price", "DECIMAL(10, 2)", false),
                def("Note, long", "varchar", true),
                def("t", "timestamp with time zone", true),
            ])
        );
        for (text, why) in [
            ("a INT,", "a column is missing"),
            ("a INT,,b INT", "a column is missing"),
            ("a", "column 'a' has no type"),
            ("a NOT NULL", "column 'a' has no type"),
            ("a INT, A TEXT", "column 'a' is given twice"),
            ("a DECIMAL(10, 2", "'(' without its ')'"),
            ("a INT)", "')' without its '('"),
            ("a INT; DROP TABLE t", "unexpected ';'"),
            ("a 'text'", "unexpected '''"),
            ("1a INT", "where a column name should be"),
            ("\"a INT", "closing"),
        ] {
            let error = parse_columns(text).expect_err(text);
            assert!(error.contains(why), "{text}: {error}");
        }
    }
}
