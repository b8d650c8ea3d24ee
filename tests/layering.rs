//! Module layering: no crate of the workspace has an import circle between
//! its modules.
//!
//! The project's rule is that modules form layers with no import circles; a
//! module that others build on imports none of them. A circle means neither
//! module can be understood, tested or moved without the other, so this test
//! reads every crate's sources and fails on any circle it finds, printing the
//! modules and the `use` lines or paths that make each edge.
//!
//! ```text
//!   nodes   every `.rs` file of a crate's module tree (`lib.rs` / `main.rs`
//!           is `crate`, `x/mod.rs` is `x`), found through `mod x;` items
//!   edges   A -> B when A's code names an item by a path that resolves
//!           into B: `use crate::b::Item`, `use super::Item`, `use child::X`,
//!           `use super::*`, or a path in code such as `crate::b::f(..)`
//!   circles strongly connected components of more than one module
//!           (Tarjan), plus every pair of modules that import each other
//! ```
//!
//! A path resolves to the module that defines the item: when it reaches a
//! name that a module imports (`pub use`, `use`, `as` renames, brace groups),
//! the import is followed to its source. A re-export is not itself an edge,
//! so a parent that only re-exports its children's items is a facade; it is
//! an edge when the re-exporting module also names the item in its own code.
//! A path whose last resolvable segment is a module is an edge to that
//! module; a name nobody imports or declares as a module (an item, a macro)
//! belongs to the module the path has reached.
//!
//! Comments, string literals and test code (items under `#[cfg(test)]`,
//! including `mod tests;` files) are not read.
//!
//! The test uses only the standard library, so it also builds without Cargo:
//!
//! ```text
//! rustc --edition 2024 --test tests/layering.rs -o /tmp/layering && CARGO_MANIFEST_DIR=$PWD /tmp/layering --nocapture
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

#[test]
fn no_crate_has_an_import_circle() {
    let workspace = workspace_root();
    let roots = crate_roots(&workspace);
    assert!(roots.len() >= 2, "found no crates in {} (crates/*/src and src/)", workspace.display());

    let mut circles = String::new();
    for (name, root_file) in roots {
        let krate = load_crate(&name, &root_file, &|path: &Path| fs::read_to_string(path).ok());
        let edges = dependency_edges(&krate);
        let found = describe_circles(&krate, &edges);
        let verdict = if found.is_empty() { "no circles" } else { "CIRCLES" };
        println!("{name}: {} modules, {} edges, {verdict}", krate.modules.len(), edges.len());
        circles.push_str(&found);
    }
    print!("{circles}");
    assert!(circles.is_empty(), "modules must form layers with no import circles, found:\n{circles}");
}

// ---------------------------------------------------------------------------
// The workspace
// ---------------------------------------------------------------------------

/// The workspace root: `CARGO_MANIFEST_DIR` as Cargo (or whoever compiled
/// this file) set it at compile time, else as set when the test runs.
fn workspace_root() -> PathBuf {
    let dir = option_env!("CARGO_MANIFEST_DIR")
        .map(str::to_owned)
        .or_else(|| std::env::var("CARGO_MANIFEST_DIR").ok())
        .expect("set CARGO_MANIFEST_DIR to the workspace root");
    PathBuf::from(dir)
}

/// Every crate root of the workspace as (crate name, root file): each
/// `crates/*/src/{lib,main}.rs`, then the root package's own.
fn crate_roots(workspace: &Path) -> Vec<(String, PathBuf)> {
    let members = workspace.join("crates");
    let mut dirs: Vec<PathBuf> = fs::read_dir(&members)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", members.display()))
        .map(|entry| entry.expect("a readable directory entry").path())
        .filter(|dir| dir.join("src").is_dir())
        .collect();
    dirs.sort();

    let mut roots = Vec::new();
    for dir in dirs {
        let name = dir.file_name().expect("a crate directory has a name").to_string_lossy().into_owned();
        push_roots(&name, &dir, &mut roots);
    }
    push_roots(&package_name(&workspace.join("Cargo.toml")), workspace, &mut roots);
    roots
}

/// A package's library and binary roots; a binary next to a library is its
/// own crate with its own module tree.
fn push_roots(name: &str, package: &Path, roots: &mut Vec<(String, PathBuf)>) {
    let lib = package.join("src/lib.rs");
    let main = package.join("src/main.rs");
    let has_lib = lib.is_file();
    if has_lib {
        roots.push((name.to_owned(), lib));
    }
    if main.is_file() {
        let label = if has_lib { format!("{name} (main.rs)") } else { name.to_owned() };
        roots.push((label, main));
    }
}

/// The `name` of the `[package]` section of a manifest.
fn package_name(manifest: &Path) -> String {
    let text = fs::read_to_string(manifest).unwrap_or_else(|e| panic!("cannot read {}: {e}", manifest.display()));
    let package = text.split("[package]").nth(1).expect("the root manifest has a [package] section");
    package
        .lines()
        .find_map(|line| line.trim().strip_prefix("name")?.trim().strip_prefix('='))
        .map(|value| value.trim().trim_matches('"').to_owned())
        .expect("the root package has a name")
}

// ---------------------------------------------------------------------------
// Lexing: tokens without comments, and literals reduced to one token
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    /// A word: identifier, keyword, or `$crate` in a macro.
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
    /// A string, char or number literal; a string keeps its text (for `#[path = "..."]`).
    Literal(String),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

fn lex(source: &str) -> Vec<Token> {
    let mut lexer = Lexer { chars: source.chars().collect(), pos: 0, line: 1, tokens: Vec::new() };
    lexer.run();
    lexer.tokens
}

struct Lexer {
    chars: Vec<char>,
    pos: usize,
    line: usize,
    tokens: Vec<Token>,
}

impl Lexer {
    fn run(&mut self) {
        while let Some(c) = self.peek(0) {
            let line = self.line;
            match c {
                '/' if self.peek(1) == Some('/') => self.skip_line_comment(),
                '/' if self.peek(1) == Some('*') => self.skip_block_comment(),
                '"' => {
                    let text = self.quoted();
                    self.push(Tok::Literal(text), line);
                }
                '\'' => self.char_or_lifetime(),
                ':' if self.peek(1) == Some(':') => {
                    self.pos += 2;
                    self.push(Tok::PathSep, line);
                }
                '$' if self.peek(1).is_some_and(is_word_char) => {
                    self.pos += 1;
                    let word = self.word();
                    self.push(Tok::Ident(format!("${word}")), line);
                }
                c if c.is_alphabetic() || c == '_' => self.word_or_prefixed_literal(),
                c if c.is_ascii_digit() => {
                    let number = self.word();
                    self.push(Tok::Literal(number), line);
                }
                c if c.is_whitespace() => {
                    self.bump();
                }
                c => {
                    self.bump();
                    self.push(Tok::Punct(c), line);
                }
            }
        }
    }

    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        self.pos += 1;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn push(&mut self, tok: Tok, line: usize) {
        self.tokens.push(Token { tok, line });
    }

    fn word(&mut self) -> String {
        let mut word = String::new();
        while let Some(c) = self.peek(0).filter(|&c| is_word_char(c)) {
            word.push(c);
            self.pos += 1;
        }
        word
    }

    fn skip_line_comment(&mut self) {
        while self.peek(0).is_some_and(|c| c != '\n') {
            self.pos += 1;
        }
    }

    /// Block comments nest in Rust.
    fn skip_block_comment(&mut self) {
        let mut depth = 0usize;
        while let Some(c) = self.bump() {
            if c == '/' && self.peek(0) == Some('*') {
                self.pos += 1;
                depth += 1;
            } else if c == '*' && self.peek(0) == Some('/') {
                self.pos += 1;
                depth -= 1;
                if depth == 0 {
                    return;
                }
            }
        }
    }

    /// A `"..."` or `'...'` literal with escapes; returns its text.
    fn quoted(&mut self) -> String {
        let delimiter = self.bump();
        let mut text = String::new();
        while let Some(c) = self.bump() {
            match c {
                '\\' => {
                    text.push(c);
                    text.extend(self.bump());
                }
                c if Some(c) == delimiter => break,
                c => text.push(c),
            }
        }
        text
    }

    /// `r"..."`, `r#"..."#` and their byte and C forms, after the prefix.
    fn raw_string(&mut self) -> String {
        let mut hashes = 0;
        while self.peek(0) == Some('#') {
            self.pos += 1;
            hashes += 1;
        }
        self.bump();
        let mut text = String::new();
        while let Some(c) = self.bump() {
            if c == '"' && (0..hashes).all(|i| self.peek(i) == Some('#')) {
                self.pos += hashes;
                break;
            }
            text.push(c);
        }
        text
    }

    fn raw_string_ahead(&self) -> bool {
        let mut ahead = 0;
        while self.peek(ahead) == Some('#') {
            ahead += 1;
        }
        self.peek(ahead) == Some('"')
    }

    /// `'x'`, `'\n'` are literals; `'a` and `'static` are lifetimes or labels.
    fn char_or_lifetime(&mut self) {
        let line = self.line;
        if self.peek(1) == Some('\\') || self.peek(2) == Some('\'') {
            let text = self.quoted();
            self.push(Tok::Literal(text), line);
        } else {
            self.pos += 1;
            self.word();
        }
    }

    /// A word, or the prefix of a literal (`b"..."`, `r#"..."#`, `b'x'`), or
    /// a raw identifier (`r#type`).
    fn word_or_prefixed_literal(&mut self) {
        let line = self.line;
        let word = self.word();
        let literal = match (word.as_str(), self.peek(0)) {
            ("b" | "c", Some('"')) | ("b", Some('\'')) => Some(self.quoted()),
            ("r" | "br" | "cr", Some('"' | '#')) if self.raw_string_ahead() => Some(self.raw_string()),
            ("r", Some('#')) => {
                self.pos += 1;
                let raw = self.word();
                self.push(Tok::Ident(raw), line);
                return;
            }
            _ => None,
        };
        match literal {
            Some(text) => self.push(Tok::Literal(text), line),
            None => self.push(Tok::Ident(word), line),
        }
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

// ---------------------------------------------------------------------------
// Parsing one file: its `mod` items, imports, paths in code and names used
// ---------------------------------------------------------------------------

/// What one source file says about its dependencies.
#[derive(Debug, Default)]
struct ParsedFile {
    /// `mod x;` items outside test code.
    mods: Vec<ModDecl>,
    /// One entry per leaf of every `use` item outside test code.
    imports: Vec<Import>,
    /// Paths of two or more segments in code, e.g. `crate::x::f` or `child::T`.
    paths: Vec<CodePath>,
    /// Every word the code names outside `use` items (not a method or field
    /// after `.`, a later path segment, a `fn` name or a `field:`): tells
    /// whether a re-exported name is also used by the module itself.
    names: BTreeSet<String>,
}

#[derive(Debug, Clone)]
struct ModDecl {
    name: String,
    /// From `#[path = "..."]`.
    path: Option<String>,
}

/// One leaf of a `use` tree: `use crate::x::{a, b::C as D}` has two.
#[derive(Debug, Clone)]
struct Import {
    /// As written, e.g. `["crate", "x", "b", "C"]`; may end in `self`.
    segments: Vec<String>,
    /// The name it brings into scope; `None` for a glob or `as _`.
    binding: Option<String>,
    glob: bool,
    /// `pub use`, `pub(crate) use`, `pub(super) use`, ...
    reexport: bool,
    line: usize,
    /// How many inline (non-test) `mod x { ... }` blocks enclose it.
    inline_depth: usize,
}

impl Import {
    /// A leaf as parsed; `use_item` sets where it sits and whether it is a re-export.
    fn leaf(segments: Vec<String>, binding: Option<String>, glob: bool, line: usize) -> Self {
        Import { segments, binding, glob, reexport: false, line, inline_depth: 0 }
    }

    /// The path as written, for the report.
    fn text(&self) -> String {
        let mut segments: Vec<&str> = self.segments.iter().map(String::as_str).collect();
        if segments.last() == Some(&"self") {
            segments.pop();
        }
        let text = segments.join("::");
        if self.glob { format!("{text}::*") } else { text }
    }
}

#[derive(Debug, Clone)]
struct CodePath {
    segments: Vec<String>,
    line: usize,
    inline_depth: usize,
}

fn parse(source: &str) -> ParsedFile {
    let tokens = lex(source);
    let mut parser = Parser { tokens: &tokens, pos: 0, depth: 0, inline_mods: Vec::new(), out: ParsedFile::default() };
    parser.items();
    parser.out
}

struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
    /// Brace depth.
    depth: usize,
    /// The brace depth inside each enclosing inline `mod x { ... }`.
    inline_mods: Vec<usize>,
    out: ParsedFile,
}

enum Attribute {
    /// `#[cfg(test)]`; `inner` for `#![cfg(test)]`, which makes the whole file test code.
    CfgTest {
        inner: bool,
    },
    Path(String),
    Other,
}

impl Parser<'_> {
    fn items(&mut self) {
        let mut path_attribute = None;
        while let Some(tok) = self.tok(0).cloned() {
            match tok {
                Tok::Punct('#') => match self.attribute() {
                    Attribute::CfgTest { inner: true } => return,
                    Attribute::CfgTest { inner: false } => self.skip_item(),
                    Attribute::Path(path) => path_attribute = Some(path),
                    Attribute::Other => {}
                },
                Tok::Ident(word) if word == "pub" => self.visibility(),
                Tok::Ident(word) if word == "use" && !self.is(1, &Tok::Punct('<')) => self.use_item(false),
                Tok::Ident(word) if word == "mod" => self.mod_item(path_attribute.take()),
                Tok::Ident(_) => self.code_path(),
                Tok::Punct('{') => {
                    self.depth += 1;
                    self.pos += 1;
                }
                Tok::Punct('}') => {
                    if self.inline_mods.last() == Some(&self.depth) {
                        self.inline_mods.pop();
                    }
                    self.depth = self.depth.saturating_sub(1);
                    self.pos += 1;
                }
                _ => self.pos += 1,
            }
        }
    }

    fn tok(&self, ahead: usize) -> Option<&Tok> {
        self.tokens.get(self.pos + ahead).map(|t| &t.tok)
    }

    fn is(&self, ahead: usize, tok: &Tok) -> bool {
        self.tok(ahead) == Some(tok)
    }

    fn ident(&self, ahead: usize) -> Option<&str> {
        match self.tok(ahead) {
            Some(Tok::Ident(word)) => Some(word),
            _ => None,
        }
    }

    fn line(&self) -> usize {
        self.tokens.get(self.pos).map_or(0, |t| t.line)
    }

    /// `#[...]` or `#![...]`, consumed whole.
    fn attribute(&mut self) -> Attribute {
        let inner = self.is(1, &Tok::Punct('!'));
        let open = if inner { 2 } else { 1 };
        if !self.is(open, &Tok::Punct('[')) {
            self.pos += 1;
            return Attribute::Other;
        }
        self.pos += open + 1;
        let start = self.pos;
        let mut nesting = 1;
        while let Some(tok) = self.tok(0) {
            match tok {
                Tok::Punct('[') => nesting += 1,
                Tok::Punct(']') => nesting -= 1,
                _ => {}
            }
            if nesting == 0 {
                break;
            }
            self.pos += 1;
        }
        let body: Vec<Tok> = self.tokens[start..self.pos].iter().map(|t| t.tok.clone()).collect();
        self.pos += 1;
        match body.as_slice() {
            [Tok::Ident(path), Tok::Punct('='), Tok::Literal(file)] if path == "path" => Attribute::Path(file.clone()),
            _ if is_cfg_test(&body) => Attribute::CfgTest { inner },
            _ => Attribute::Other,
        }
    }

    /// Skips the item (or statement) an attribute applies to: up to a `;`
    /// or through a `{ ... }` block, whichever comes first.
    fn skip_item(&mut self) {
        let mut nesting = 0usize;
        while let Some(tok) = self.tok(0) {
            match tok {
                Tok::Punct('(' | '[') => nesting += 1,
                Tok::Punct(')' | ']') => nesting = nesting.saturating_sub(1),
                Tok::Punct(';') if nesting == 0 => {
                    self.pos += 1;
                    return;
                }
                Tok::Punct('{') if nesting == 0 => {
                    self.skip_block();
                    return;
                }
                Tok::Punct('}') if nesting == 0 => return,
                _ => {}
            }
            self.pos += 1;
        }
    }

    fn skip_block(&mut self) {
        let mut depth = 0usize;
        while let Some(tok) = self.tok(0) {
            match tok {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => depth -= 1,
                _ => {}
            }
            self.pos += 1;
            if depth == 0 {
                return;
            }
        }
    }

    /// `pub`, `pub(crate)`, `pub(in path)`: the restriction path is not a
    /// dependency. A `use` that follows is a re-export.
    fn visibility(&mut self) {
        self.pos += 1;
        if self.is(0, &Tok::Punct('(')) {
            while self.tok(0).is_some_and(|t| *t != Tok::Punct(')')) {
                self.pos += 1;
            }
            self.pos += 1;
        }
        if self.ident(0) == Some("use") {
            self.use_item(true);
        }
    }

    fn mod_item(&mut self, path: Option<String>) {
        self.pos += 1;
        let Some(name) = self.ident(0).map(str::to_owned) else { return };
        self.pos += 1;
        if self.is(0, &Tok::Punct(';')) {
            self.out.mods.push(ModDecl { name, path });
        } else if self.is(0, &Tok::Punct('{')) {
            self.depth += 1;
            self.inline_mods.push(self.depth);
        }
        self.pos += 1;
    }

    fn use_item(&mut self, reexport: bool) {
        self.pos += 1;
        let mut leaves = Vec::new();
        self.use_tree(Vec::new(), &mut leaves);
        while self.tok(0).is_some_and(|t| *t != Tok::Punct(';')) {
            self.pos += 1;
        }
        self.pos += 1;
        let inline_depth = self.inline_mods.len();
        for leaf in leaves {
            self.out.imports.push(Import { reexport, inline_depth, ..leaf });
        }
    }

    /// The leaves of one use tree after `prefix`.
    fn use_tree(&mut self, prefix: Vec<String>, leaves: &mut Vec<Import>) {
        let mut segments = prefix;
        loop {
            let line = self.line();
            match self.tok(0).cloned() {
                Some(Tok::PathSep) => self.pos += 1,
                Some(Tok::Punct('*')) => {
                    self.pos += 1;
                    leaves.push(Import::leaf(segments, None, true, line));
                    return;
                }
                Some(Tok::Punct('{')) => {
                    self.pos += 1;
                    self.use_group(&segments, leaves);
                    return;
                }
                Some(Tok::Ident(word)) => {
                    self.pos += 1;
                    segments.push(word);
                    if !self.is(0, &Tok::PathSep) {
                        let binding = self.use_binding(&segments);
                        leaves.push(Import::leaf(segments, binding, false, line));
                        return;
                    }
                }
                _ => return,
            }
        }
    }

    /// The trees of `{ a, b::c, d as e }` after the `{`.
    fn use_group(&mut self, prefix: &[String], leaves: &mut Vec<Import>) {
        while let Some(tok) = self.tok(0) {
            match tok {
                Tok::Punct('}') => {
                    self.pos += 1;
                    return;
                }
                Tok::Punct(',') => self.pos += 1,
                _ => {
                    let before = self.pos;
                    self.use_tree(prefix.to_vec(), leaves);
                    if self.pos == before {
                        self.pos += 1;
                    }
                }
            }
        }
    }

    /// The name a leaf binds: its `as` alias, or its last segment
    /// (`x::{self}` binds `x`).
    fn use_binding(&mut self, segments: &[String]) -> Option<String> {
        if self.ident(0) == Some("as") {
            let alias = self.ident(1).map(str::to_owned);
            self.pos += 2;
            return alias.filter(|a| a != "_");
        }
        match segments {
            [.., module, last] if last == "self" => Some(module.clone()),
            [.., last] => Some(last.clone()),
            [] => None,
        }
    }

    /// A word in code and the path it starts, if any.
    fn code_path(&mut self) {
        let after = self.pos.checked_sub(1).map(|p| &self.tokens[p].tok);
        let continues_path = matches!(after, Some(Tok::PathSep | Tok::Punct('.')));
        let after_fn = matches!(after, Some(Tok::Ident(word)) if word == "fn");
        let line = self.line();
        let mut segments = vec![self.ident(0).unwrap_or_default().to_owned()];
        self.pos += 1;
        let field = self.is(0, &Tok::Punct(':'));
        while self.is(0, &Tok::PathSep) {
            let Some(next) = self.ident(1).map(str::to_owned) else { break };
            segments.push(next);
            self.pos += 2;
        }
        if continues_path {
            return;
        }
        if !after_fn && !field {
            self.out.names.insert(segments[0].clone());
        }
        if segments.len() >= 2 {
            self.out.paths.push(CodePath { segments, line, inline_depth: self.inline_mods.len() });
        }
    }
}

/// `cfg(test)`, or `cfg(all(..))` with `test` among its conditions (not
/// `cfg(any(test, ..))` or `cfg(not(test))`: that code is built outside tests).
fn is_cfg_test(body: &[Tok]) -> bool {
    let word = |tok: &Tok, expected: &str| matches!(tok, Tok::Ident(w) if w == expected);
    match body {
        [cfg, Tok::Punct('('), test, Tok::Punct(')')] => word(cfg, "cfg") && word(test, "test"),
        [cfg, Tok::Punct('('), all, Tok::Punct('('), conditions @ ..] if word(cfg, "cfg") && word(all, "all") => {
            top_level_conditions(conditions).iter().any(|c| matches!(c, [test] if word(test, "test")))
        }
        _ => false,
    }
}

/// The comma-separated conditions of `all(a, not(b), c)` (tokens after `all(`).
fn top_level_conditions(tokens: &[Tok]) -> Vec<&[Tok]> {
    let mut conditions = Vec::new();
    let (mut nesting, mut start) = (0usize, 0);
    for (i, tok) in tokens.iter().enumerate() {
        match tok {
            Tok::Punct('(') => nesting += 1,
            Tok::Punct(')') if nesting > 0 => nesting -= 1,
            Tok::Punct(',' | ')') => {
                conditions.push(&tokens[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    conditions
}

// ---------------------------------------------------------------------------
// A crate's module tree
// ---------------------------------------------------------------------------

#[derive(Debug)]
struct Crate {
    name: String,
    /// Index 0 is the crate root.
    modules: Vec<Module>,
}

#[derive(Debug)]
struct Module {
    /// `crate`, `durable`, `durable::store`, ...
    name: String,
    /// Relative to the crate's `src/`.
    file: String,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    parsed: ParsedFile,
}

type ReadSource<'a> = &'a dyn Fn(&Path) -> Option<String>;

/// Reads the module tree from `root_file` through its `mod x;` items.
fn load_crate(name: &str, root_file: &Path, read: ReadSource<'_>) -> Crate {
    let src = root_file.parent().expect("a crate root lives in a directory");
    let mut krate = Crate { name: name.to_owned(), modules: Vec::new() };
    krate.add_module(None, "crate", root_file, src, read);
    krate
}

impl Crate {
    /// The index of the crate root in `modules`.
    const ROOT: usize = 0;

    fn add_module(
        &mut self,
        parent: Option<usize>,
        name: &str,
        file: &Path,
        src: &Path,
        read: ReadSource<'_>,
    ) -> usize {
        let source = read(file).unwrap_or_else(|| panic!("cannot read {}", file.display()));
        let parsed = parse(&source);
        let declared = parsed.mods.clone();
        let index = self.modules.len();
        let relative = file.strip_prefix(src).unwrap_or(file).to_string_lossy().into_owned();
        self.modules.push(Module { name: name.to_owned(), file: relative, parent, children: BTreeMap::new(), parsed });

        for decl in declared {
            let child_file = child_file(file, &decl, read);
            let child_name = if parent.is_none() { decl.name.clone() } else { format!("{name}::{}", decl.name) };
            let child = self.add_module(Some(index), &child_name, &child_file, src, read);
            self.modules[index].children.insert(decl.name, child);
        }
        index
    }
}

/// Where `mod x;` in `parent_file` lives: `x.rs` or `x/mod.rs` in the
/// directory the parent owns (its own for `lib.rs`, `main.rs`, `mod.rs`,
/// `dir/parent/` for `dir/parent.rs`), or the `#[path]` given.
fn child_file(parent_file: &Path, decl: &ModDecl, read: ReadSource<'_>) -> PathBuf {
    let parent_dir = parent_file.parent().expect("a source file lives in a directory");
    if let Some(path) = &decl.path {
        return parent_dir.join(path);
    }
    let owns_dir = matches!(parent_file.file_name().and_then(|n| n.to_str()), Some("lib.rs" | "main.rs" | "mod.rs"));
    let dir = if owns_dir { parent_dir.to_path_buf() } else { parent_file.with_extension("") };
    let flat = dir.join(format!("{}.rs", decl.name));
    let nested = dir.join(&decl.name).join("mod.rs");
    if read(&flat).is_some() { flat } else { nested }
}

// ---------------------------------------------------------------------------
// Resolving a path to the module that defines what it names
// ---------------------------------------------------------------------------

/// Where a path leads: a module, or an item defined in a module.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Target {
    module: usize,
    is_module: bool,
}

/// What a name means inside one module.
enum Lookup {
    Found(Target),
    /// Imported from outside the crate (another crate, `std`).
    External,
    /// Neither a child module nor an import: an item defined here, a macro,
    /// or a name this test does not see.
    Unknown,
}

/// (module, name) pairs being resolved, so that a re-export of a name
/// defined in the same module (`pub(crate) use my_macro;`) ends.
type Visiting = Vec<(usize, String)>;

impl Crate {
    /// The module that defines what `segments`, written in module `from`,
    /// names, and how many segments lead there (`Error::Internal` names
    /// `Error`: one); `None` for a path that leaves the crate or is not a
    /// path of this crate (a local type, `Self::X`, `std::...`).
    fn resolve(
        &self,
        from: usize,
        segments: &[String],
        inline_depth: usize,
        visiting: &mut Visiting,
    ) -> Option<(Target, usize)> {
        let (start, consumed) = self.resolve_start(from, segments, inline_depth, visiting)?;
        let (target, walked) = self.walk(start, &segments[consumed..], visiting)?;
        Some((target, consumed + walked))
    }

    /// The first segment(s): `crate`, `self`, `super::super`, or a name in
    /// scope (a child module or an import); returns how many were used.
    fn resolve_start(
        &self,
        from: usize,
        segments: &[String],
        inline_depth: usize,
        visiting: &mut Visiting,
    ) -> Option<(Target, usize)> {
        let module = |module| Target { module, is_module: true };
        let first = segments.first()?;
        match first.as_str() {
            "crate" | "$crate" => Some((module(Self::ROOT), 1)),
            "self" => Some((module(from), 1)),
            "super" => {
                let supers = segments.iter().take_while(|s| *s == "super").count();
                let mut current = from;
                for _ in 0..supers.saturating_sub(inline_depth) {
                    current = self.modules[current].parent?;
                }
                Some((module(current), supers))
            }
            name => match self.lookup(from, name, visiting) {
                Lookup::Found(target) => Some((target, 1)),
                Lookup::External | Lookup::Unknown => None,
            },
        }
    }

    /// Follows the remaining segments from `target` through child modules
    /// and imports, stopping after the first segment that names an item;
    /// returns how many segments it took.
    fn walk(&self, mut target: Target, rest: &[String], visiting: &mut Visiting) -> Option<(Target, usize)> {
        for (walked, segment) in rest.iter().enumerate() {
            if !target.is_module {
                return Some((target, walked));
            }
            match segment.as_str() {
                "self" => {}
                "super" => target.module = self.modules[target.module].parent?,
                name => match self.lookup(target.module, name, visiting) {
                    Lookup::Found(next) => target = next,
                    Lookup::External => return None,
                    Lookup::Unknown => target.is_module = false,
                },
            }
        }
        Some((target, rest.len()))
    }

    /// `name` in module `module`: a child module, or an import followed to
    /// its source.
    fn lookup(&self, module: usize, name: &str, visiting: &mut Visiting) -> Lookup {
        let here = &self.modules[module];
        if let Some(&child) = here.children.get(name) {
            return Lookup::Found(Target { module: child, is_module: true });
        }
        let Some(import) = here.parsed.imports.iter().find(|i| i.binding.as_deref() == Some(name)) else {
            return Lookup::Unknown;
        };
        let key = (module, name.to_owned());
        if visiting.contains(&key) {
            return Lookup::Found(Target { module, is_module: false });
        }
        visiting.push(key);
        let source = self.resolve(module, &import.segments, import.inline_depth, visiting);
        visiting.pop();
        source.map_or(Lookup::External, |(target, _)| Lookup::Found(target))
    }
}

// ---------------------------------------------------------------------------
// Edges
// ---------------------------------------------------------------------------

/// Why one module depends on another: the path, the item it names (the
/// last segment of `via`) and where it is written.
#[derive(Debug, Clone, PartialEq)]
struct Evidence {
    via: String,
    item: String,
    at: String,
}

/// (from, to) -> the paths that make the edge, in source order.
type Edges = BTreeMap<(usize, usize), Vec<Evidence>>;

fn dependency_edges(krate: &Crate) -> Edges {
    let mut edges = Edges::new();
    for (from, module) in krate.modules.iter().enumerate() {
        for import in module.parsed.imports.iter().filter(|i| import_is_a_dependency(module, i)) {
            let Some((target, _)) = krate.resolve(from, &import.segments, import.inline_depth, &mut Vec::new()) else {
                continue;
            };
            let text = import.text();
            let item = text.rsplit("::").next().unwrap_or_default().to_owned();
            let via = if import.reexport { format!("re-export {text}, also named here") } else { text };
            add_edge(&mut edges, from, target, Evidence { via, item, at: location(module, import.line) });
        }
        for path in &module.parsed.paths {
            let Some((target, used)) = krate.resolve(from, &path.segments, path.inline_depth, &mut Vec::new()) else {
                continue;
            };
            let named = &path.segments[..used];
            let evidence =
                Evidence { via: named.join("::"), item: named[used - 1].clone(), at: location(module, path.line) };
            add_edge(&mut edges, from, target, evidence);
        }
    }
    edges
}

/// A plain `use` is a dependency; a re-export only when the module names
/// the re-exported item in its own code too (a facade's `pub use` is not).
fn import_is_a_dependency(module: &Module, import: &Import) -> bool {
    !import.reexport || import.binding.as_ref().is_some_and(|name| module.parsed.names.contains(name))
}

fn location(module: &Module, line: usize) -> String {
    format!("{}:{line}", module.file)
}

/// Records an edge, once per item it names (the `use` line first, not
/// every later `Item::variant`); a path to the module itself is no edge.
fn add_edge(edges: &mut Edges, from: usize, target: Target, evidence: Evidence) {
    if target.module == from {
        return;
    }
    let list = edges.entry((from, target.module)).or_default();
    if !list.iter().any(|e| e.item == evidence.item) {
        list.push(evidence);
    }
}

// ---------------------------------------------------------------------------
// Circles
// ---------------------------------------------------------------------------

/// Strongly connected components of more than one module, each sorted, by
/// Tarjan's algorithm.
fn circles(modules: usize, edges: &Edges) -> Vec<Vec<usize>> {
    let mut successors = vec![Vec::new(); modules];
    for &(from, to) in edges.keys() {
        successors[from].push(to);
    }
    let mut tarjan = Tarjan {
        successors: &successors,
        index: vec![None; modules],
        low: vec![0; modules],
        on_stack: vec![false; modules],
        stack: Vec::new(),
        next: 0,
        components: Vec::new(),
    };
    for module in 0..modules {
        if tarjan.index[module].is_none() {
            tarjan.visit(module);
        }
    }
    let mut circles: Vec<Vec<usize>> = tarjan.components.into_iter().filter(|c| c.len() > 1).collect();
    for circle in &mut circles {
        circle.sort_unstable();
    }
    circles.sort();
    circles
}

struct Tarjan<'a> {
    successors: &'a [Vec<usize>],
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    next: usize,
    components: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    fn visit(&mut self, v: usize) {
        self.index[v] = Some(self.next);
        self.low[v] = self.next;
        self.next += 1;
        self.stack.push(v);
        self.on_stack[v] = true;

        for &w in &self.successors[v] {
            match self.index[w] {
                None => {
                    self.visit(w);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(index) if self.on_stack[w] => self.low[v] = self.low[v].min(index),
                Some(_) => {}
            }
        }

        if Some(self.low[v]) == self.index[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}

/// Pairs of modules that import each other, `a < b`.
fn mutual_pairs(edges: &Edges) -> Vec<(usize, usize)> {
    edges.keys().filter(|&&(a, b)| a < b && edges.contains_key(&(b, a))).copied().collect()
}

/// Every circle of `krate` with the edges inside it, then every mutual
/// pair; empty when there are none.
fn describe_circles(krate: &Crate, edges: &Edges) -> String {
    let name = |m: usize| krate.modules[m].name.as_str();
    let mut out = String::new();
    let found = circles(krate.modules.len(), edges);
    for (number, circle) in found.iter().enumerate() {
        let members: Vec<&str> = circle.iter().map(|&m| name(m)).collect();
        let _ = writeln!(out, "{}: circle {} of {}: {}", krate.name, number + 1, found.len(), members.join(", "));
        for ((from, to), evidence) in edges {
            if circle.contains(from) && circle.contains(to) {
                let _ = writeln!(out, "  {}: {} -> {} ({})", krate.name, name(*from), name(*to), describe(evidence));
            }
        }
    }
    for (a, b) in mutual_pairs(edges) {
        let _ = writeln!(out, "{}: {} and {} import each other", krate.name, name(a), name(b));
    }
    out
}

fn describe(evidence: &[Evidence]) -> String {
    evidence.iter().map(|e| format!("{} at {}", e.via, e.at)).collect::<Vec<_>>().join("; ")
}

// ---------------------------------------------------------------------------
// The checker on small made-up crates, so that it cannot pass by seeing
// nothing
// ---------------------------------------------------------------------------

/// Loads a crate from (path under `src/`, source) pairs.
fn made_up_crate(files: &[(&str, &str)]) -> (Crate, Edges) {
    let src = Path::new("/made-up/src");
    let sources: HashMap<PathBuf, String> = files.iter().map(|(p, s)| (src.join(p), (*s).to_owned())).collect();
    let krate = load_crate("made-up", &src.join("lib.rs"), &|path: &Path| sources.get(path).cloned());
    let edges = dependency_edges(&krate);
    (krate, edges)
}

fn circle_names(files: &[(&str, &str)]) -> Vec<Vec<String>> {
    let (krate, edges) = made_up_crate(files);
    let name = |m: usize| krate.modules[m].name.clone();
    circles(krate.modules.len(), &edges).into_iter().map(|c| c.into_iter().map(name).collect()).collect()
}

#[test]
fn a_circle_through_use_and_a_path_in_code_is_found() {
    let files = [
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        ("b.rs", "pub struct B;\nfn f() -> super::c::C { todo!() }\n"),
        ("c.rs", "pub struct C(crate::a::A);\n"),
    ];
    assert_eq!(circle_names(&files), [["a", "b", "c"]]);

    let (krate, edges) = made_up_crate(&files);
    let report = describe_circles(&krate, &edges);
    assert!(report.contains("made-up: a -> b (crate::b::B at a.rs:1)"), "{report}");
    assert!(report.contains("made-up: b -> c (super::c::C at b.rs:2)"), "{report}");
}

#[test]
fn re_exports_lead_to_the_defining_module_and_a_facade_is_no_edge() {
    let files = [
        ("lib.rs", "mod a;\nmod inner;\npub use inner::{B as Renamed, helper};\n"),
        ("a.rs", "use crate::Renamed;\npub struct A;\n"),
        ("inner/mod.rs", "mod b;\npub(crate) use self::b::{B, helper};\n"),
        ("inner/b.rs", "use crate::a::A;\npub struct B(A);\npub fn helper() {}\n"),
    ];
    assert_eq!(circle_names(&files), [["a", "inner::b"]]);
}

#[test]
fn a_re_export_the_module_also_uses_is_an_edge() {
    let files = [("lib.rs", "mod a;\npub use a::A;\npub struct Root(A);\n"), ("a.rs", "pub struct A(crate::Root);\n")];
    assert_eq!(circle_names(&files), [["crate", "a"]]);
}

#[test]
fn a_module_named_by_a_use_is_the_target() {
    let files = [
        ("lib.rs", "mod durable;\nmod table;\n"),
        ("durable/mod.rs", "pub mod record;\n"),
        ("durable/record.rs", "use crate::table::{self};\npub struct LogRecord;\n"),
        ("table.rs", "use crate::durable::record;\nfn f(_: record::LogRecord) {}\n"),
    ];
    assert_eq!(circle_names(&files), [["durable::record", "table"]]);
}

#[test]
fn test_code_comments_and_strings_make_no_edges() {
    let files = [
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        (
            "b.rs",
            concat!(
                "pub struct B;\n",
                "// use crate::a::A;\n",
                "/* crate::a::A /* nested */ crate::a::A */\n",
                "const S: &str = \"crate::a::A\";\n",
                "const R: &str = r#\"crate::a::A\"#;\n",
                "fn lifetime<'a>(x: &'a str) -> char { let _ = x; 'a' }\n",
                "#[cfg(test)]\n#[allow(dead_code)]\nmod tests {\n    use super::*;\n    use crate::a::A;\n}\n",
                "#[cfg(test)]\nmod more_tests;\n",
                "#[cfg(test)]\nfn only_in_tests() -> crate::a::A { crate::a::A }\n",
            ),
        ),
    ];
    assert_eq!(circle_names(&files), Vec::<Vec<String>>::new());
}

#[test]
fn only_test_only_cfgs_are_skipped() {
    let cfg = |attribute: &str| is_cfg_test(&lex(attribute).into_iter().map(|t| t.tok).collect::<Vec<_>>());
    assert!(cfg("cfg(test)"));
    assert!(cfg("cfg(all(test, feature = \"x\"))"));
    assert!(cfg("cfg(all(unix, test))"));
    assert!(!cfg("cfg(any(test, feature = \"x\"))"));
    assert!(!cfg("cfg(all(unix, not(test)))"));
    assert!(!cfg("cfg(feature = \"test\")"));
}

#[test]
fn a_glob_import_outside_tests_is_an_edge() {
    let files = [
        ("lib.rs", "mod parent;\n"),
        ("parent/mod.rs", "mod child;\nfn f() { child::g() }\n"),
        ("parent/child.rs", "use super::*;\npub fn g() {}\n"),
    ];
    assert_eq!(circle_names(&files), [["parent", "parent::child"]]);
}
