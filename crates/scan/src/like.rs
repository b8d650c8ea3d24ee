//! `LIKE` patterns made of literal text and `%` wildcards, matched on
//! bytes: the shape of nearly every LIKE in analytic SQL (`'abc%'`,
//! `'%BRASS'`, `'%green%'`, `'%special%requests%'`).
//!
//! Matching follows SQL (and DataFusion): `%` stands for any run of
//! characters, `\` makes the character after it literal (a trailing `\`
//! is itself literal). A pattern holding `_` (one character) is not a
//! [`LikePattern`]; callers leave it to a general matcher. Matching bytes
//! is exact for UTF-8 text: a literal's bytes found in a string always
//! start and end on character boundaries.

use memchr::memmem::Finder;

/// A LIKE pattern of literal parts separated by `%`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LikePattern {
    /// The literal text between the wildcards: one more than the `%`s.
    /// The first is the required prefix, the last the required suffix
    /// (either may be empty); with one part the pattern is that literal.
    parts: Vec<Vec<u8>>,
}

impl LikePattern {
    /// Parses `pattern`; `None` when it holds `_`.
    pub fn parse(pattern: &str) -> Option<Self> {
        Self::parse_with(pattern, false)
    }

    /// A pattern every value matching `pattern` matches: `pattern` with
    /// each `_` made a `%` (one character is a run of characters).
    pub fn necessary(pattern: &str) -> Self {
        Self::parse_with(pattern, true).unwrap_or_else(|| Self::prefix(b""))
    }

    fn parse_with(pattern: &str, loose: bool) -> Option<Self> {
        let mut parts = vec![Vec::new()];
        let mut bytes = pattern.as_bytes().iter();
        while let Some(&b) = bytes.next() {
            match b {
                b'%' | b'_' if b == b'%' || loose => {
                    // `%%` is one wildcard.
                    if parts.last().is_some_and(|p| !p.is_empty()) || parts.len() == 1 {
                        parts.push(Vec::new());
                    }
                }
                b'_' => return None,
                b'\\' => {
                    let part = parts.last_mut()?;
                    // The escaped character, whole (it may be several bytes).
                    match bytes.next() {
                        Some(&next) => part.push(next),
                        None => part.push(b'\\'),
                    }
                }
                _ => parts.last_mut()?.push(b),
            }
        }
        Some(Self { parts })
    }

    /// The pattern `parts[0]%parts[1]%…` of literal parts (no escapes:
    /// each part is taken byte for byte); no parts is the empty literal.
    pub fn from_parts(mut parts: Vec<Vec<u8>>) -> Self {
        if parts.is_empty() {
            parts.push(Vec::new());
        }
        Self { parts }
    }

    /// The literal parts between the `%` wildcards.
    pub fn parts(&self) -> &[Vec<u8>] {
        &self.parts
    }

    /// `prefix%`.
    pub fn prefix(prefix: &[u8]) -> Self {
        Self { parts: vec![prefix.to_vec(), Vec::new()] }
    }

    /// The literal a value must begin with (empty when the pattern starts
    /// with `%`).
    pub fn required_prefix(&self) -> &[u8] {
        &self.parts[0]
    }

    /// The literal the pattern is, if it has no wildcard.
    pub fn as_literal(&self) -> Option<&[u8]> {
        match self.parts.as_slice() {
            [only] => Some(only),
            _ => None,
        }
    }

    /// The whole pattern is `prefix%`.
    pub fn is_prefix(&self) -> bool {
        matches!(self.parts.as_slice(), [_, last] if last.is_empty())
    }

    /// A matcher with its substring searchers built once.
    pub(crate) fn matcher(&self) -> LikeMatcher {
        let n = self.parts.len();
        LikeMatcher {
            prefix: self.parts[0].clone(),
            suffix: if n > 1 { self.parts[n - 1].clone() } else { Vec::new() },
            middle: if n > 2 {
                self.parts[1..n - 1].iter().filter(|p| !p.is_empty()).map(|p| Finder::new(p).into_owned()).collect()
            } else {
                Vec::new()
            },
            exact: n == 1,
        }
    }

    /// Whether `value` matches (a reference: scans use [`LikeMatcher`]).
    pub fn matches(&self, value: &[u8]) -> bool {
        self.matcher().test(value)
    }
}

impl std::fmt::Display for LikePattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                f.write_str("%")?;
            }
            for c in String::from_utf8_lossy(part).chars() {
                if matches!(c, '%' | '_' | '\\') {
                    f.write_str("\\")?;
                }
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// A [`LikePattern`] ready to test values.
#[derive(Debug, Clone)]
pub(crate) struct LikeMatcher {
    prefix: Vec<u8>,
    suffix: Vec<u8>,
    /// The non-empty literals between the first and the last `%`, found
    /// in order, leftmost first.
    middle: Vec<Finder<'static>>,
    /// No wildcard: the value is `prefix`.
    exact: bool,
}

impl LikeMatcher {
    #[inline]
    pub(crate) fn test(&self, v: &[u8]) -> bool {
        if self.exact {
            return v == self.prefix.as_slice();
        }
        let Some(rest) = v.strip_prefix(self.prefix.as_slice()) else { return false };
        let Some(mut rest) = rest.strip_suffix(self.suffix.as_slice()) else { return false };
        for finder in &self.middle {
            match finder.find(rest) {
                Some(at) => rest = &rest[at + finder.needle().len()..],
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reference matcher: backtracking over the pattern's characters.
    fn reference(pattern: &str, value: &str) -> bool {
        fn go(p: &[char], v: &[char]) -> bool {
            match p.split_first() {
                None => v.is_empty(),
                Some(('%', rest)) => (0..=v.len()).any(|i| go(rest, &v[i..])),
                Some(('\\', rest)) => match rest.split_first() {
                    Some((c, rest)) => v.first() == Some(c) && go(rest, &v[1..]),
                    None => v == ['\\'],
                },
                Some((c, rest)) => v.first() == Some(c) && go(rest, &v[1..]),
            }
        }
        let p: Vec<char> = pattern.chars().collect();
        let v: Vec<char> = value.chars().collect();
        go(&p, &v)
    }

    #[test]
    fn matches_as_sql_does() {
        let patterns = [
            "",
            "%",
            "%%",
            "a",
            "a%",
            "%a",
            "%a%",
            "a%b",
            "%a%b%",
            "ab%ba",
            "%ab%ab%",
            "a%%b",
            "\\%",
            "a\\%b%",
            "%\\_%",
            "\\\\%",
            "x\\",
            "%ü%",
            "ü%ü",
            "%special%requests%",
            "%aa%aa",
            "aa%aa",
            "%a%a%a",
        ];
        let values = [
            "",
            "a",
            "b",
            "ab",
            "ba",
            "aba",
            "abba",
            "abab",
            "aab",
            "aaaa",
            "%",
            "a%b",
            "_",
            "x_y",
            "\\",
            "\\x",
            "x\\",
            "ü",
            "üü",
            "aüa",
            "special requests",
            "requests special",
            "a special b requests c",
            "aa",
            "aaa",
        ];
        for p in patterns {
            let pattern = LikePattern::parse(p).expect("no `_` wildcard");
            for v in values {
                assert_eq!(pattern.matches(v.as_bytes()), reference(p, v), "{v:?} LIKE {p:?}");
            }
        }
    }

    #[test]
    fn underscore_is_left_to_a_general_matcher() {
        assert_eq!(LikePattern::parse("a_b"), None);
        assert!(LikePattern::parse("a\\_b").is_some());
    }

    #[test]
    fn shapes() {
        let p = LikePattern::parse("abc%").expect("pattern");
        assert!(p.is_prefix());
        assert_eq!(p, LikePattern::prefix(b"abc"));
        assert_eq!(p.required_prefix(), b"abc");
        assert_eq!(LikePattern::parse("a\\%c").expect("pattern").as_literal(), Some(&b"a%c"[..]));
        assert!(!LikePattern::parse("%abc").expect("pattern").is_prefix());
        assert_eq!(LikePattern::parse("%a%%b\\%").expect("pattern").to_string(), "%a%b\\%");
    }
}
