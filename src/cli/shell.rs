//! `quiverdb sql`: an interactive SQL shell over Flight SQL, or the
//! statements of `-c` or `-f`.
//!
//! Input is cut into statements at each `;` outside quotes and comments
//! ([`split_statements`]); a line without one continues the statement on
//! the next line. Each statement is sent to the server as it completes and
//! its result printed as it arrives ([`super::output`]): rows in the
//! chosen format, `N rows affected` for a statement that changes data (by
//! its first keyword, never by a result column's name), or `OK`.
//!
//! Ctrl-C while a statement runs cancels it (the call is dropped, which
//! stops the statement on the server); at the prompt it discards the
//! statement being typed. Ctrl-D, `\q`, `quit` or `exit` leave the shell
//! at any prompt; input unfinished at a terminal is discarded, never run.
//! The history is saved after every statement.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_schema::DataType;
use clap::{Args, ValueEnum};
use futures::StreamExt;
use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::Validator;
use rustyline::{Context, Editor, Helper};
use tokio::runtime::Runtime;

use super::CliError;
use super::client::{ConnectArgs, Session};
use super::names::TableName;
use super::output::{Format, OutputOptions, Printer};

/// Arguments of `quiverdb sql`.
#[derive(Debug, Args)]
pub(crate) struct SqlArgs {
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
    /// Run these statements (separated by ';'), print their results and exit
    /// (non-zero at the first error).
    #[arg(short = 'c', long = "command", conflicts_with = "file")]
    pub(crate) command: Option<String>,
    /// Run the statements of this file ('-': standard input), as -c does.
    #[arg(short = 'f', long = "file")]
    pub(crate) file: Option<PathBuf>,
    /// How results print: table, csv, tsv, json (one array), jsonl (an
    /// object a line) or markdown.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,
    /// Print rows only: no header, no row count, no timing.
    #[arg(short = 't', long = "tuples-only")]
    pub(crate) tuples_only: bool,
    /// How NULL shows (default: NULL in tables and Markdown, an empty
    /// field in CSV where the empty string is "", \N in TSV, null in JSON).
    #[arg(long)]
    pub(crate) null: Option<String>,
    /// Rows a result shows at most; the rest are counted (default: 100 in
    /// the interactive shell, all with -c and -f; 0: all).
    #[arg(long)]
    pub(crate) max_rows: Option<usize>,
}

/// The prompt at the start of a statement.
const PROMPT: &str = "quiverdb> ";
/// The prompt of a statement's further lines.
const CONTINUATION: &str = "      -> ";
/// The history file, under `$HOME`.
const HISTORY_FILE: &str = ".quiverdb_history";
/// Rows the interactive shell shows of a result unless told otherwise.
const INTERACTIVE_MAX_ROWS: usize = 100;
/// The exit status of a shell whose output was closed (as of a process a
/// SIGPIPE ended: 128 + 13).
const BROKEN_PIPE: u8 = 141;
/// The exit status after Ctrl-C stopped a script (128 + SIGINT).
const INTERRUPTED: u8 = 130;

const HELP: &str = "\
Statements end with ';' and may span lines.
  \\q, quit, exit    leave the shell (also Ctrl-D; an unfinished statement is discarded)
  \\?, help          this help
  \\dt, .tables      list tables
  \\d [table]        list tables, or describe one
  \\maxrows [n]      show at most n rows of a result (0: all); no n: say the current bound
  \\format [f]       table, csv, tsv, json, jsonl or markdown
  \\timing           show or hide the time each statement took
  Ctrl-C            cancel the running statement, or discard the one being typed
  Tab               complete keywords, table and column names";

/// Words tab completion offers besides table and column names.
const KEYWORDS: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "ORDER",
    "HAVING",
    "LIMIT",
    "OFFSET",
    "JOIN",
    "LEFT",
    "RIGHT",
    "INNER",
    "OUTER",
    "FULL",
    "CROSS",
    "ON",
    "USING",
    "AS",
    "AND",
    "OR",
    "NOT",
    "NULL",
    "IS",
    "IN",
    "BETWEEN",
    "LIKE",
    "ILIKE",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "DISTINCT",
    "UNION",
    "ALL",
    "EXCEPT",
    "INTERSECT",
    "WITH",
    "INSERT",
    "INTO",
    "VALUES",
    "UPDATE",
    "SET",
    "DELETE",
    "CREATE",
    "TABLE",
    "VIEW",
    "SCHEMA",
    "DROP",
    "ALTER",
    "ADD",
    "COLUMN",
    "RENAME",
    "TRUNCATE",
    "PRIMARY",
    "KEY",
    "UNIQUE",
    "DEFAULT",
    "EXPLAIN",
    "ANALYZE",
    "SHOW",
    "TABLES",
    "COUNT",
    "SUM",
    "AVG",
    "MIN",
    "MAX",
    "CAST",
    "BIGINT",
    "INT",
    "INTEGER",
    "DOUBLE",
    "VARCHAR",
    "TEXT",
    "BOOLEAN",
    "DATE",
    "TIMESTAMP",
    "DECIMAL",
    "CANCEL",
];

pub(crate) fn run(args: SqlArgs) -> Result<ExitCode, CliError> {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let session = runtime.block_on(Session::connect(&args.connect))?;
    let script = match (&args.command, &args.file) {
        (Some(text), _) => Some(text.clone()),
        (None, Some(path)) if path.as_os_str() == "-" => Some(std::io::read_to_string(std::io::stdin())?),
        (None, Some(path)) => {
            Some(std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?)
        }
        (None, None) => None,
    };
    let interactive = script.is_none();
    let max_rows = match args.max_rows {
        Some(0) => None,
        Some(n) => Some(n),
        None if interactive && std::io::stdout().is_terminal() => Some(INTERACTIVE_MAX_ROWS),
        None => None,
    };
    let output = OutputOptions { format: args.format, tuples_only: args.tuples_only, null: args.null, max_rows };
    let mut shell = Shell { runtime, session, output, timing: true, names: Arc::default() };
    let code = match script {
        Some(text) => shell.run_script(&text),
        None => shell.interactive()?,
    };
    Ok(code)
}

/// How a statement ended, when not as it should.
#[derive(Debug)]
enum Failure {
    /// The server or the connection said no (printed to stderr).
    Error(String),
    /// Ctrl-C cancelled it.
    Cancelled,
    /// Standard output was closed.
    BrokenPipe,
}

/// A connected shell and how it prints.
struct Shell {
    runtime: Runtime,
    session: Session,
    output: OutputOptions,
    timing: bool,
    /// Table and column names, for completion.
    names: Arc<Mutex<Vec<String>>>,
}

impl Shell {
    /// `-c` and `-f`: runs the statements of `text` in order, stopping at
    /// the first error (printed to stderr).
    fn run_script(&mut self, text: &str) -> ExitCode {
        let split = split_statements(text);
        let mut statements = split.statements;
        if !split.rest_blank {
            statements.push(split.rest.trim());
        }
        if statements.is_empty() {
            report("error: no SQL statement given");
            return ExitCode::FAILURE;
        }
        for sql in statements {
            match self.execute(sql) {
                Ok(()) => {}
                Err(Failure::Error(_)) => return ExitCode::FAILURE,
                Err(Failure::Cancelled) => return ExitCode::from(INTERRUPTED),
                Err(Failure::BrokenPipe) => return ExitCode::from(BROKEN_PIPE),
            }
        }
        ExitCode::SUCCESS
    }

    /// Runs one statement and prints its result as it arrives (its error
    /// to stderr). Ctrl-C cancels it.
    fn execute(&mut self, sql: &str) -> Result<(), Failure> {
        let Self { runtime, session, output, timing, .. } = self;
        let outcome = runtime.block_on(async {
            tokio::select! {
                done = print_statement(session, output, *timing, sql) => done,
                _ = tokio::signal::ctrl_c() => Err(Failure::Cancelled),
            }
        });
        match &outcome {
            Err(Failure::Error(e)) => report(&format!("error: {e}")),
            Err(Failure::Cancelled) if is_query(sql) => report("cancelled"),
            // The server runs a statement that changes data to its end.
            Err(Failure::Cancelled) => report(
                "cancelled waiting: a statement that changes data runs to its end on the server, so it may still complete",
            ),
            _ => {}
        }
        outcome
    }

    /// Table and column names from the server, for completion.
    fn refresh_names(&mut self) {
        let sql = "SELECT DISTINCT table_name, column_name FROM information_schema.columns \
                   WHERE table_schema NOT IN ('information_schema', 'system')";
        let Self { runtime, session, names, .. } = self;
        let fetched = runtime.block_on(async {
            let started = session.start(sql).await.ok()?;
            let batches: Vec<_> = started.batches.collect().await;
            let mut found = std::collections::BTreeSet::new();
            for batch in batches {
                let batch = batch.ok()?;
                for c in 0..batch.num_columns() {
                    let column = arrow_cast::cast(batch.column(c), &DataType::Utf8).ok()?;
                    let column = arrow_array::cast::AsArray::as_string::<i32>(column.as_ref()).clone();
                    found.extend(column.iter().flatten().map(str::to_string));
                }
            }
            Some(found)
        });
        if let (Some(found), Ok(mut names)) = (fetched, names.lock()) {
            *names = found.into_iter().collect();
        }
    }

    /// A shell command (`\d`, `\maxrows`, …): whether it was one, and
    /// whether it failed.
    fn command(&mut self, line: &str) -> Option<Result<(), Failure>> {
        let words: Vec<&str> = line.trim().trim_end_matches(';').split_whitespace().collect();
        let (&first, rest) = words.split_first()?;
        let tables = "SELECT table_schema, table_name, table_type FROM information_schema.tables \
                      WHERE table_schema NOT IN ('information_schema', 'system') ORDER BY 1, 2";
        match (first.to_ascii_lowercase().as_str(), rest) {
            ("\\?" | "\\h" | "help", []) => {
                say(HELP);
                Some(Ok(()))
            }
            ("\\dt" | ".tables", []) | ("\\d", []) => Some(self.execute(tables)),
            ("\\d", [table]) => {
                let name = match TableName::parse(table) {
                    Ok(name) => name,
                    Err(e) => return Some(fail(e)),
                };
                let quoted = |s: &str| s.replace('\'', "''");
                let mut sql = format!(
                    "SELECT column_name, data_type, is_nullable FROM information_schema.columns \
                     WHERE table_name = '{}'",
                    quoted(&name.table)
                );
                if let Some(schema) = &name.schema {
                    sql.push_str(&format!(" AND table_schema = '{}'", quoted(schema)));
                }
                sql.push_str(" ORDER BY table_schema, ordinal_position");
                Some(self.execute(&sql))
            }
            ("\\maxrows", []) => {
                match self.output.max_rows {
                    Some(n) => say(&format!("results show at most {n} rows")),
                    None => say("results show all their rows"),
                }
                Some(Ok(()))
            }
            ("\\maxrows", [n]) => Some(match n.parse::<usize>() {
                Ok(n) => {
                    self.output.max_rows = (n > 0).then_some(n);
                    Ok(())
                }
                Err(_) => fail(format!("\\maxrows takes a number of rows, not '{n}'")),
            }),
            ("\\format", [f]) => Some(match <Format as ValueEnum>::from_str(f, true) {
                Ok(format) => {
                    self.output.format = format;
                    Ok(())
                }
                Err(_) => fail(format!("unknown format '{f}': table, csv, tsv, json, jsonl or markdown")),
            }),
            ("\\timing", []) => {
                self.timing = !self.timing;
                say(if self.timing { "timing is on" } else { "timing is off" });
                Some(Ok(()))
            }
            (w, _) if w.starts_with('\\') => Some(fail(format!("unknown command '{}'; \\? for help", line.trim()))),
            _ => None,
        }
    }

    /// The read-eval-print loop. Reading from a pipe works too (no prompt,
    /// no history; a last statement without ';' runs); then the exit code
    /// says whether every statement succeeded.
    fn interactive(&mut self) -> Result<ExitCode, CliError> {
        let terminal = std::io::stdin().is_terminal();
        let mut editor: Editor<SqlHelper, DefaultHistory> = Editor::new()?;
        editor.set_helper(Some(SqlHelper { names: Arc::clone(&self.names) }));
        let history = if terminal { history_path() } else { None };
        if let Some(path) = &history {
            // A missing or unreadable history is no reason not to start.
            let _ = editor.load_history(path);
        }
        if terminal {
            say(&format!(
                "connected to {}; statements end with ';', \\? for help, \\q to quit",
                self.session.address()
            ));
            self.refresh_names();
        }
        let mut failed = false;
        let mut buffer = String::new();
        loop {
            let prompt = if buffer.is_empty() { PROMPT } else { CONTINUATION };
            let line = match editor.readline(prompt) {
                Ok(line) => line,
                Err(ReadlineError::Interrupted) => {
                    buffer.clear();
                    continue;
                }
                Err(ReadlineError::Eof) => break,
                Err(e) => return Err(e.into()),
            };
            // `\q` leaves at any prompt but inside a quote or comment;
            // `quit` and `exit` only at the start of a statement.
            let quits = is_quit(&line)
                && (buffer.is_empty() || (line.trim_start().starts_with('\\') && !split_statements(&buffer).open));
            if quits {
                buffer.clear();
                break;
            }
            if buffer.is_empty() {
                if let Some(done) = self.command(&line) {
                    if let Some(path) = &history {
                        let _ = editor.add_history_entry(line.trim());
                        let _ = editor.save_history(path);
                    }
                    match done {
                        Err(Failure::BrokenPipe) => return Ok(ExitCode::from(BROKEN_PIPE)),
                        Err(_) => failed = true,
                        Ok(()) => {}
                    }
                    continue;
                }
            } else {
                buffer.push('\n');
            }
            buffer.push_str(&line);
            let split = split_statements(&buffer);
            if !split.statements.is_empty() {
                let entered = buffer[..buffer.len() - split.rest.len()].trim();
                let _ = editor.add_history_entry(entered);
                if let Some(path) = &history {
                    // Saved now: a shell that is killed keeps it too.
                    let _ = editor.save_history(path);
                }
            }
            let mut changed_names = false;
            for sql in &split.statements {
                match self.execute(sql) {
                    Err(Failure::BrokenPipe) => return Ok(ExitCode::from(BROKEN_PIPE)),
                    // Ctrl-C stops a script read from a pipe, as it stops -f.
                    Err(Failure::Cancelled) if !terminal => return Ok(ExitCode::from(INTERRUPTED)),
                    Err(_) => failed = true,
                    Ok(()) => changed_names |= !is_query(sql),
                }
            }
            if changed_names && terminal {
                self.refresh_names();
            }
            buffer = if split.rest_blank { String::new() } else { split.rest.to_string() };
        }
        if !buffer.trim().is_empty() {
            if terminal {
                // As psql: Ctrl-D never runs a statement not finished with ';'.
                report("(the unfinished statement was discarded)");
            } else {
                // A script's last statement may lack its ';'.
                match self.execute(buffer.trim()) {
                    Err(Failure::BrokenPipe) => return Ok(ExitCode::from(BROKEN_PIPE)),
                    Err(_) => failed = true,
                    Ok(()) => {}
                }
            }
        }
        if let Some(path) = &history {
            let _ = editor.save_history(path);
        }
        Ok(if failed && !terminal { ExitCode::FAILURE } else { ExitCode::SUCCESS })
    }
}

/// Runs `sql` on `session` and prints its result to stdout as `output`
/// says, with the time taken (to the last row printed) if `timing`.
async fn print_statement(
    session: &mut Session,
    output: &OutputOptions,
    timing: bool,
    sql: &str,
) -> Result<(), Failure> {
    let start = Instant::now();
    let started = session.start(sql).await.map_err(|e| Failure::Error(e.to_string()))?;
    let stdout = std::io::stdout();
    let table_footer = output.format == Format::Table && !output.tuples_only;
    let time = |elapsed: Duration| if timing { format!(" ({})", format_elapsed(elapsed)) } else { String::new() };
    let fields = started.schema.fields();
    if fields.is_empty() {
        drain(started.batches).await?;
        if table_footer {
            write_line(&stdout, &format!("OK{}", time(start.elapsed())))?;
        }
        return Ok(());
    }
    if changes_data(sql)
        && let [field] = &fields[..]
        && field.data_type() == &DataType::UInt64
    {
        let mut affected = 0u64;
        let mut batches = started.batches;
        while let Some(batch) = batches.next().await {
            let batch = batch.map_err(|e| Failure::Error(e.to_string()))?;
            if let Some(counts) = batch.column(0).as_any().downcast_ref::<arrow_array::UInt64Array>() {
                affected = counts.values().iter().fold(affected, |sum, &n| sum.saturating_add(n));
            }
        }
        if !output.tuples_only {
            write_line(&stdout, &format!("{} affected{}", rows(affected), time(start.elapsed())))?;
        }
        return Ok(());
    }
    let mut printer = Printer::new(stdout.lock(), output, started.schema.clone()).map_err(io_failure)?;
    let mut batches = started.batches;
    while let Some(batch) = batches.next().await {
        let batch = batch.map_err(|e| Failure::Error(e.to_string()))?;
        printer.batch(&batch).map_err(io_failure)?;
    }
    let shown = printer.shown();
    let total = printer.finish().map_err(io_failure)?;
    if table_footer {
        let footer = if shown < total {
            format!("{} ({shown} shown; \\maxrows to show more){}", rows(total), time(start.elapsed()))
        } else {
            format!("{}{}", rows(total), time(start.elapsed()))
        };
        write_line(&stdout, &footer)?;
    }
    Ok(())
}

/// Reads what is left of a result.
async fn drain(
    mut batches: futures::stream::BoxStream<'static, Result<arrow_array::RecordBatch, super::client::RequestError>>,
) -> Result<(), Failure> {
    while let Some(batch) = batches.next().await {
        batch.map_err(|e| Failure::Error(e.to_string()))?;
    }
    Ok(())
}

fn io_failure(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe { Failure::BrokenPipe } else { Failure::Error(e.to_string()) }
}

/// Writes `line` to stdout (a closed stdout is a [`Failure::BrokenPipe`]).
fn write_line(stdout: &std::io::Stdout, line: &str) -> Result<(), Failure> {
    let mut out = stdout.lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).map_err(io_failure)
}

/// Prints a message of the shell to stdout (lost if stdout is closed).
fn say(text: &str) {
    let _ = writeln!(std::io::stdout(), "{text}");
}

/// Prints a message to stderr (lost if stderr is closed).
fn report(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

fn fail(message: String) -> Result<(), Failure> {
    report(&format!("error: {message}"));
    Err(Failure::Error(message))
}

/// Whether `line` asks to leave the shell (at any prompt).
fn is_quit(line: &str) -> bool {
    let word = line.trim().trim_end_matches(';').trim_end();
    matches!(word.to_ascii_lowercase().as_str(), "\\q" | "quit" | "exit")
}

/// The first keyword of `sql`, lowercased (after comments and parentheses).
fn first_keyword(sql: &str) -> String {
    let mut rest = sql.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r).trim_start();
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r).trim_start();
        } else if let Some(after) = rest.strip_prefix('(') {
            rest = after.trim_start();
        } else {
            break;
        }
    }
    rest.chars().take_while(|c| c.is_ascii_alphabetic()).collect::<String>().to_ascii_lowercase()
}

/// Whether `sql` is a statement that changes rows, whose result is its
/// affected-row count.
fn changes_data(sql: &str) -> bool {
    matches!(first_keyword(sql).as_str(), "insert" | "update" | "delete" | "merge" | "truncate" | "replace" | "upsert")
}

/// Whether `sql` only reads (so the names completion offers stay as they are).
fn is_query(sql: &str) -> bool {
    matches!(first_keyword(sql).as_str(), "select" | "with" | "values" | "explain" | "show" | "describe")
}

/// `$HOME/.quiverdb_history`, if `HOME` is set.
fn history_path() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|home| PathBuf::from(home).join(HISTORY_FILE))
}

/// `1 row`, `2 rows`.
fn rows(n: u64) -> String {
    if n == 1 { "1 row".into() } else { format!("{n} rows") }
}

/// `0.420 ms`, `12.345 ms`, `1.234 s`.
fn format_elapsed(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.3} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.3} s", d.as_secs_f64())
    }
}

/// Tab completion: keywords, and the table and column names the server
/// had when the shell last asked.
struct SqlHelper {
    names: Arc<Mutex<Vec<String>>>,
}

impl Completer for SqlHelper {
    type Candidate = Pair;

    fn complete(&self, line: &str, pos: usize, _ctx: &Context<'_>) -> rustyline::Result<(usize, Vec<Pair>)> {
        let start = line[..pos].rfind(|c: char| !(c.is_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
        let word = &line[start..pos];
        if word.is_empty() {
            return Ok((pos, Vec::new()));
        }
        let lower = word.to_lowercase();
        let names = self.names.lock().map(|n| n.clone()).unwrap_or_default();
        let mut found: Vec<Pair> = names
            .iter()
            .filter(|n| n.to_lowercase().starts_with(&lower))
            .map(|n| Pair { display: n.clone(), replacement: n.clone() })
            .collect();
        // Keywords in the case the word is typed in.
        let upper = word.chars().next().is_some_and(char::is_uppercase);
        found.extend(KEYWORDS.iter().filter(|k| k.to_lowercase().starts_with(&lower)).map(|k| {
            let k = if upper { k.to_string() } else { k.to_lowercase() };
            Pair { display: k.clone(), replacement: k }
        }));
        found.dedup_by(|a, b| a.replacement == b.replacement);
        Ok((start, found))
    }
}

impl Hinter for SqlHelper {
    type Hint = String;
}

impl Highlighter for SqlHelper {}

impl Validator for SqlHelper {}

impl Helper for SqlHelper {}

/// Input cut into statements by [`split_statements`].
#[derive(Debug, PartialEq, Eq)]
struct Split<'a> {
    /// The complete statements, trimmed, without their `;`; blank ones
    /// (only whitespace and comments) are dropped.
    statements: Vec<&'a str>,
    /// The text after the last complete statement.
    rest: &'a str,
    /// Whether `rest` holds nothing to run: only whitespace and finished
    /// comments (an open quote or block comment is not blank).
    rest_blank: bool,
    /// Whether `rest` ends inside a quote or a block comment.
    open: bool,
}

/// Where the scanner of [`split_statements`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lex {
    Code,
    /// Inside `'...'` (`''` is an escaped quote: leaving and re-entering
    /// gives the same result).
    Single,
    /// Inside `"..."`.
    Double,
    /// After `--`, to the end of the line.
    LineComment,
    /// Inside `/* ... */`, nested to this depth.
    BlockComment(u32),
}

/// Cuts `text` at each `;` that is outside quotes and comments.
///
/// ```text
/// SELECT ';' ; -- a; b       →  ["SELECT ';'"], rest " -- a; b" (blank)
/// INSERT INTO t VALUES (1);  →  ["INSERT INTO t VALUES (1)"]
/// SELECT 1; SELECT           →  ["SELECT 1"], rest " SELECT"
/// ```
fn split_statements(text: &str) -> Split<'_> {
    let bytes = text.as_bytes();
    let mut statements = Vec::new();
    let mut state = Lex::Code;
    let mut start = 0;
    let mut has_code = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let next = bytes.get(i + 1).copied();
        match state {
            Lex::Code => match b {
                b';' => {
                    if has_code {
                        statements.push(text[start..i].trim());
                    }
                    start = i + 1;
                    has_code = false;
                }
                b'-' if next == Some(b'-') => {
                    state = Lex::LineComment;
                    i += 1;
                }
                b'/' if next == Some(b'*') => {
                    state = Lex::BlockComment(1);
                    i += 1;
                }
                b'\'' => {
                    state = Lex::Single;
                    has_code = true;
                }
                b'"' => {
                    state = Lex::Double;
                    has_code = true;
                }
                b if b.is_ascii_whitespace() => {}
                _ => has_code = true,
            },
            Lex::Single if b == b'\'' => state = Lex::Code,
            Lex::Double if b == b'"' => state = Lex::Code,
            Lex::LineComment if b == b'\n' => state = Lex::Code,
            Lex::BlockComment(depth) if b == b'*' && next == Some(b'/') => {
                state = if depth == 1 { Lex::Code } else { Lex::BlockComment(depth - 1) };
                i += 1;
            }
            Lex::BlockComment(depth) if b == b'/' && next == Some(b'*') => {
                state = Lex::BlockComment(depth + 1);
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    let open = matches!(state, Lex::Single | Lex::Double | Lex::BlockComment(_));
    Split { statements, rest: &text[start..], rest_blank: !has_code && !open, open }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::{Arc, Mutex};

    use rustyline::Context;
    use rustyline::completion::Completer;

    use super::{Split, SqlHelper, changes_data, is_quit, split_statements};

    fn split(statements: &[&'static str], rest: &'static str, rest_blank: bool) -> Split<'static> {
        let open = split_statements(rest).open;
        Split { statements: statements.to_vec(), rest, rest_blank, open }
    }

    #[test]
    fn statements_end_at_semicolons() {
        assert_eq!(split_statements("SELECT 1;"), split(&["SELECT 1"], "", true));
        assert_eq!(split_statements("SELECT 1; SELECT 2 ;\n"), split(&["SELECT 1", "SELECT 2"], "\n", true));
        assert_eq!(split_statements("SELECT 1; SELECT"), split(&["SELECT 1"], " SELECT", false));
        assert_eq!(split_statements("SELECT\n  1\n"), split(&[], "SELECT\n  1\n", false));
        assert_eq!(split_statements(";;  ;"), split(&[], "", true));
        assert_eq!(split_statements(""), split(&[], "", true));
    }

    #[test]
    fn semicolons_in_quotes_and_comments_do_not_split() {
        assert_eq!(split_statements("SELECT ';' ;"), split(&["SELECT ';'"], "", true));
        assert_eq!(split_statements("SELECT 'it''s; ok';"), split(&["SELECT 'it''s; ok'"], "", true));
        assert_eq!(split_statements("SELECT \"a;b\" FROM t;"), split(&["SELECT \"a;b\" FROM t"], "", true));
        assert_eq!(split_statements("SELECT 1 -- one; two\n;"), split(&["SELECT 1 -- one; two"], "", true));
        assert_eq!(
            split_statements("SELECT /* a; /* b; */ c; */ 1;"),
            split(&["SELECT /* a; /* b; */ c; */ 1"], "", true)
        );
        assert_eq!(split_statements("SELECT 2 - -1;"), split(&["SELECT 2 - -1"], "", true));
        assert_eq!(split_statements("SELECT 4 / 2;"), split(&["SELECT 4 / 2"], "", true));
    }

    #[test]
    fn open_quotes_and_comments_continue() {
        assert_eq!(split_statements("SELECT 'a;"), split(&[], "SELECT 'a;", false));
        assert_eq!(split_statements("/* a; "), split(&[], "/* a; ", false));
        assert_eq!(split_statements("'"), split(&[], "'", false));
        // Only comments: nothing to run, and nothing left open.
        assert_eq!(split_statements("-- note; more"), split(&[], "-- note; more", true));
        assert_eq!(split_statements("/* c */ ;"), split(&[], "", true));
        assert_eq!(split_statements("SELECT 1; -- done"), split(&["SELECT 1"], " -- done", true));
    }

    #[test]
    fn non_ascii_text_is_kept_whole() {
        assert_eq!(split_statements("SELECT 'é;ü'; SELECT 'ß'"), split(&["SELECT 'é;ü'"], " SELECT 'ß'", false));
    }

    #[test]
    fn quitting_works_with_or_without_a_semicolon() {
        for quit in ["\\q", "  quit; ", "EXIT", "exit;"] {
            assert!(is_quit(quit), "{quit}");
        }
        for not in ["exit_code;", "SELECT 1;", "\\qq"] {
            assert!(!is_quit(not), "{not}");
        }
    }

    #[test]
    fn affected_rows_are_decided_by_the_statement_not_the_column_name() {
        for change in ["INSERT INTO t VALUES (1)", "  update t SET a = 1", "-- x\nDELETE FROM t", "/* y */ truncate t"]
        {
            assert!(changes_data(change), "{change}");
        }
        for query in ["SELECT COUNT(*) AS count FROM t", "WITH x AS (SELECT 1) SELECT * FROM x", "(SELECT 1)"] {
            assert!(!changes_data(query), "{query}");
        }
    }

    #[test]
    fn completion_offers_names_then_keywords_in_the_case_typed() {
        let names = Arc::new(Mutex::new(vec!["sales".to_string(), "region".to_string(), "select_count".to_string()]));
        let helper = SqlHelper { names };
        let history = rustyline::history::DefaultHistory::new();
        let ctx = Context::new(&history);
        let complete = |line: &str| {
            let (start, found) = helper.complete(line, line.len(), &ctx).unwrap();
            (start, found.into_iter().map(|p| p.replacement).collect::<Vec<_>>())
        };
        assert_eq!(complete("SELECT * FROM sa"), (14, vec!["sales".to_string()]));
        assert_eq!(complete("SEL"), (0, vec!["select_count".to_string(), "SELECT".to_string()]));
        assert_eq!(complete("GRO"), (0, vec!["GROUP".to_string()]));
        assert_eq!(complete("sel"), (0, vec!["select_count".to_string(), "select".to_string()]));
        assert_eq!(complete("SELECT re"), (7, vec!["region".to_string(), "rename".to_string()]));
        assert!(complete("SELECT ").1.is_empty());
    }
}
