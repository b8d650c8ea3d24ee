//! `quiverdb sql`: an interactive SQL shell over Flight SQL, or one
//! command with `-c`.
//!
//! Input is cut into statements at each `;` outside quotes and comments
//! ([`split_statements`]); a line without one continues the statement on
//! the next line. Each statement is sent to the server as it completes and
//! its result printed as a table (queries), an affected-row count (DML:
//! one `UInt64` column named `count`) or `OK` (DDL).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use arrow_cast::pretty::pretty_format_batches_with_schema;
use arrow_schema::{ArrowError, DataType};
use clap::Args;
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use tokio::runtime::Runtime;

use super::CliError;
use super::client::{ConnectArgs, Outcome, Session};

/// Arguments of `quiverdb sql`.
#[derive(Debug, Args)]
pub(crate) struct SqlArgs {
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
    /// Run these statements (separated by ';'), print their results and exit
    /// (non-zero at the first error).
    #[arg(short = 'c', long = "command")]
    pub(crate) command: Option<String>,
}

/// The prompt at the start of a statement.
const PROMPT: &str = "quiverdb> ";
/// The prompt of a statement's further lines.
const CONTINUATION: &str = "      -> ";
/// The history file, under `$HOME`.
const HISTORY_FILE: &str = ".quiverdb_history";

const HELP: &str = "\
Statements end with ';' and may span lines. Results print as tables.
  \\q, quit, exit   leave the shell (also Ctrl-D)
  \\?, help         this help
  Ctrl-C           discard the statement being typed";

pub(crate) fn run(args: SqlArgs) -> Result<ExitCode, CliError> {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut session = runtime.block_on(Session::connect(&args.connect))?;
    match args.command {
        Some(text) => Ok(run_command(&runtime, &mut session, &text)),
        None => interactive(&runtime, &mut session),
    }
}

/// `-c`: runs the statements of `text` in order, stopping at the first
/// error (printed to stderr).
fn run_command(runtime: &Runtime, session: &mut Session, text: &str) -> ExitCode {
    let split = split_statements(text);
    let mut statements = split.statements;
    if !split.rest_blank {
        statements.push(split.rest.trim());
    }
    if statements.is_empty() {
        eprintln!("error: no SQL statement given");
        return ExitCode::FAILURE;
    }
    for sql in statements {
        if !execute(runtime, session, sql) {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// Runs one statement and prints its result to stdout or its error to
/// stderr; returns whether it succeeded.
fn execute(runtime: &Runtime, session: &mut Session, sql: &str) -> bool {
    let start = Instant::now();
    let outcome = runtime.block_on(session.run(sql));
    let elapsed = start.elapsed();
    match outcome.map_err(CliError::from).and_then(|o| render(&o, elapsed).map_err(CliError::from)) {
        Ok(text) => {
            println!("{text}");
            true
        }
        Err(e) => {
            eprintln!("error: {e}");
            false
        }
    }
}

/// What happens to an input line typed at the start of a statement.
#[derive(Debug, PartialEq, Eq)]
enum Special {
    Quit,
    Help,
    Unknown,
}

/// The shell command `line` names, if it is one.
fn special(line: &str) -> Option<Special> {
    let word = line.trim().trim_end_matches(';').trim_end();
    match word.to_ascii_lowercase().as_str() {
        "\\q" | "quit" | "exit" => Some(Special::Quit),
        "\\?" | "\\h" | "help" => Some(Special::Help),
        w if w.starts_with('\\') => Some(Special::Unknown),
        _ => None,
    }
}

/// The read-eval-print loop. Reading from a pipe works too (no prompt, no
/// history); then the exit code says whether every statement succeeded.
fn interactive(runtime: &Runtime, session: &mut Session) -> Result<ExitCode, CliError> {
    let terminal = std::io::stdin().is_terminal();
    let mut editor = DefaultEditor::new()?;
    let history = if terminal { history_path() } else { None };
    if let Some(path) = &history {
        // A missing or unreadable history is no reason not to start.
        let _ = editor.load_history(path);
    }
    if terminal {
        println!("connected to {}; statements end with ';', \\? for help, \\q to quit", session.address());
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
        if buffer.is_empty() {
            match special(&line) {
                Some(Special::Quit) => break,
                Some(Special::Help) => {
                    println!("{HELP}");
                    continue;
                }
                Some(Special::Unknown) => {
                    eprintln!("error: unknown command '{}'; \\? for help", line.trim());
                    continue;
                }
                None => {}
            }
        } else {
            buffer.push('\n');
        }
        buffer.push_str(&line);
        let split = split_statements(&buffer);
        if !split.statements.is_empty() {
            let entered = buffer[..buffer.len() - split.rest.len()].trim();
            let _ = editor.add_history_entry(entered);
        }
        for sql in &split.statements {
            failed |= !execute(runtime, session, sql);
        }
        buffer = if split.rest_blank { String::new() } else { split.rest.to_string() };
    }
    // Input ended inside a statement: run what was typed.
    if !buffer.trim().is_empty() {
        failed |= !execute(runtime, session, buffer.trim());
    }
    if let Some(path) = &history {
        let _ = editor.save_history(path);
    }
    Ok(if failed && !terminal { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// `$HOME/.quiverdb_history`, if `HOME` is set.
fn history_path() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|home| PathBuf::from(home).join(HISTORY_FILE))
}

/// A statement's result as printed: `OK` for DDL, `N rows affected` for
/// DML, else the table and `N rows`; each with the time taken.
fn render(outcome: &Outcome, elapsed: Duration) -> Result<String, ArrowError> {
    let time = format_elapsed(elapsed);
    let fields = outcome.schema.fields();
    if fields.is_empty() {
        return Ok(format!("OK ({time})"));
    }
    if let [field] = &fields[..]
        && field.name() == "count"
        && field.data_type() == &DataType::UInt64
    {
        let mut affected = 0u64;
        for batch in &outcome.batches {
            if let Some(counts) = batch.column(0).as_any().downcast_ref::<arrow_array::UInt64Array>() {
                affected = counts.values().iter().fold(affected, |sum, &n| sum.saturating_add(n));
            }
        }
        return Ok(format!("{} affected ({time})", rows(affected)));
    }
    let table = pretty_format_batches_with_schema(outcome.schema.clone(), &outcome.batches)?;
    let count: usize = outcome.batches.iter().map(|b| b.num_rows()).sum();
    Ok(format!("{table}\n{} ({time})", rows(count as u64)))
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
    Split { statements, rest: &text[start..], rest_blank: !has_code && !open }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use arrow_array::{Int64Array, RecordBatch, UInt64Array};
    use arrow_schema::{DataType, Field, Schema};

    use super::{Outcome, Special, Split, render, special, split_statements};

    fn split(statements: &[&'static str], rest: &'static str, rest_blank: bool) -> Split<'static> {
        Split { statements: statements.to_vec(), rest, rest_blank }
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
    fn shell_commands() {
        assert_eq!(special("\\q"), Some(Special::Quit));
        assert_eq!(special("  quit; "), Some(Special::Quit));
        assert_eq!(special("EXIT"), Some(Special::Quit));
        assert_eq!(special("\\?"), Some(Special::Help));
        assert_eq!(special("help"), Some(Special::Help));
        assert_eq!(special("\\d"), Some(Special::Unknown));
        assert_eq!(special("SELECT 1;"), None);
        assert_eq!(special("exit_code;"), None);
    }

    #[test]
    fn rendering() {
        let ms = Duration::from_micros(1500);
        let ddl = Outcome { schema: Arc::new(Schema::empty()), batches: vec![] };
        assert_eq!(render(&ddl, ms).unwrap(), "OK (1.500 ms)");

        let count = Arc::new(Schema::new(vec![Field::new("count", DataType::UInt64, false)]));
        let batch = RecordBatch::try_new(count.clone(), vec![Arc::new(UInt64Array::from(vec![3]))]).unwrap();
        let dml = Outcome { schema: count, batches: vec![batch] };
        assert_eq!(render(&dml, Duration::from_millis(2500)).unwrap(), "3 rows affected (2.500 s)");

        let x = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(x.clone(), vec![Arc::new(Int64Array::from(vec![7]))]).unwrap();
        let query = Outcome { schema: x.clone(), batches: vec![batch] };
        assert_eq!(render(&query, ms).unwrap(), "+---+\n| x |\n+---+\n| 7 |\n+---+\n1 row (1.500 ms)");

        let empty = Outcome { schema: x, batches: vec![] };
        assert_eq!(render(&empty, ms).unwrap(), "+---+\n| x |\n+---+\n+---+\n0 rows (1.500 ms)");
    }
}
