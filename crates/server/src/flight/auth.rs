//! Authentication: the Basic → Bearer handshake and a bearer check on
//! every other call.
//!
//! With a user and password, a client's `Handshake` carrying
//! `authorization: Basic base64(user:password)` is answered with a fresh
//! random bearer token (in the `authorization` response header and the
//! handshake payload). Tokens expire after a period without use. With a
//! static token, clients send `authorization: Bearer <token>` directly.
//! The check runs as a tower layer in front of the whole Flight service, so
//! no call can skip it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::prelude::BASE64_URL_SAFE_NO_PAD;
use futures::future::{Either, Ready, ready};
use rand::RngCore;
use tonic::Status;

/// How clients authenticate.
#[derive(Clone, Default)]
pub enum Auth {
    /// Every call is accepted (only allowed on a loopback address).
    #[default]
    None,
    /// A user and password, exchanged for a bearer token by `Handshake`.
    Password {
        /// User name.
        user: String,
        /// Password.
        password: String,
    },
    /// One static bearer token.
    Token(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a secret.
        match self {
            Auth::None => f.write_str("None"),
            Auth::Password { user, .. } => f.debug_struct("Password").field("user", user).finish_non_exhaustive(),
            Auth::Token(_) => f.write_str("Token(..)"),
        }
    }
}

/// The shortest static token `quiverdb serve --token` accepts.
pub const MIN_TOKEN_CHARS: usize = 16;

/// The shortest password `quiverdb serve --password` accepts.
pub const MIN_PASSWORD_CHARS: usize = 8;

impl Auth {
    /// Refuses empty or blank secrets: an empty static token would admit
    /// any client sending `authorization: Bearer ` with nothing after it,
    /// and an empty user and password anyone whose Basic credentials are
    /// `:`. [`serve`](crate::flight::serve) checks this.
    pub fn check(&self) -> Result<(), String> {
        let blank = |s: &str| s.trim().is_empty();
        match self {
            Auth::None => Ok(()),
            Auth::Token(token) if blank(token) => Err("the bearer token is empty".into()),
            Auth::Password { user, .. } if blank(user) => Err("the user name is empty".into()),
            Auth::Password { password, .. } if blank(password) => Err("the password is empty".into()),
            _ => Ok(()),
        }
    }

    /// [`Auth::check`], and secrets long enough to resist guessing: a token
    /// of at least [`MIN_TOKEN_CHARS`] characters, a password of at least
    /// [`MIN_PASSWORD_CHARS`] (what `quiverdb serve` requires).
    pub fn check_strength(&self) -> Result<(), String> {
        self.check()?;
        match self {
            Auth::Token(token) if token.chars().count() < MIN_TOKEN_CHARS => {
                Err(format!("the bearer token is shorter than {MIN_TOKEN_CHARS} characters"))
            }
            Auth::Password { password, .. } if password.chars().count() < MIN_PASSWORD_CHARS => {
                Err(format!("the password is shorter than {MIN_PASSWORD_CHARS} characters"))
            }
            _ => Ok(()),
        }
    }

    /// A short description for logs: `none`, `password (user U)` or `token`.
    pub fn describe(&self) -> String {
        match self {
            Auth::None => "none".into(),
            Auth::Password { user, .. } => format!("password (user {user})"),
            Auth::Token(_) => "token".into(),
        }
    }
}

/// Standard base64 that decodes with or without the `=` padding.
const BASE64_EITHER_PADDING: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The gRPC path of the handshake, the one call allowed without a token.
const HANDSHAKE_PATH: &str = "/arrow.flight.protocol.FlightService/Handshake";

/// Issued tokens held at once; beyond it the one closest to expiring goes.
const MAX_TOKENS: usize = 10_000;

/// Failed handshakes an address may make before it waits.
const FREE_FAILURES: u32 = 5;

/// The first wait after [`FREE_FAILURES`]; each further failure doubles
/// it, up to [`MAX_LOCKOUT`].
const FIRST_LOCKOUT: Duration = Duration::from_secs(1);

/// The longest wait.
const MAX_LOCKOUT: Duration = Duration::from_secs(60);

/// Addresses whose failures are remembered; beyond it the ones not locked
/// out are forgotten first.
const MAX_FAILING_PEERS: usize = 10_000;

/// Issued tokens and their expiry, and the failed handshakes of each
/// client address; shared by the handshake and the layer.
#[derive(Debug)]
pub(crate) struct Authenticator {
    auth: Auth,
    ttl: Duration,
    tokens: Mutex<HashMap<String, Instant>>,
    max_tokens: usize,
    failures: Mutex<HashMap<IpAddr, Failures>>,
    first_lockout: Duration,
}

/// An address's failed handshakes in a row, and until when it waits.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    until: Instant,
}

impl Authenticator {
    pub(crate) fn new(auth: Auth, ttl: Duration) -> Self {
        Self {
            auth,
            ttl,
            tokens: Mutex::new(HashMap::new()),
            max_tokens: MAX_TOKENS,
            failures: Mutex::new(HashMap::new()),
            first_lockout: FIRST_LOCKOUT,
        }
    }

    /// The same with other bounds on tokens and waits (for tests).
    #[cfg(test)]
    fn with_limits(mut self, max_tokens: usize, first_lockout: Duration) -> Self {
        self.max_tokens = max_tokens;
        self.first_lockout = first_lockout;
        self
    }

    /// Refuses a handshake from `peer` while it waits after failures
    /// (without looking at its credentials: guesses made then count for
    /// nothing), and records the outcome of one that was checked. The
    /// check, the handshake and the record hold one lock, so handshakes
    /// sent at once on many streams are counted one after another (each
    /// takes microseconds).
    pub(crate) fn handshake_from(&self, peer: Option<IpAddr>, authorization: Option<&str>) -> Result<String, Status> {
        let Some(ip) = peer else { return self.handshake(authorization) };
        let now = Instant::now();
        let mut failures = self.failures.lock().map_err(|_| Status::internal("failure store poisoned"))?;
        if let Some(f) = failures.get(&ip)
            && f.until > now
        {
            let wait = (f.until - now).as_secs_f64().ceil();
            return Err(Status::unauthenticated(format!(
                "too many failed authentications from this address: try again in {wait} s"
            )));
        }
        let outcome = self.handshake(authorization);
        match &outcome {
            Ok(_) => {
                failures.remove(&ip);
            }
            Err(_) => {
                if failures.len() >= MAX_FAILING_PEERS && !failures.contains_key(&ip) {
                    failures.retain(|_, f| f.until > now);
                }
                if failures.len() < MAX_FAILING_PEERS || failures.contains_key(&ip) {
                    let f = failures.entry(ip).or_insert(Failures { count: 0, until: now });
                    f.count = f.count.saturating_add(1);
                    if f.count > FREE_FAILURES {
                        let factor = 1u32 << (f.count - FREE_FAILURES - 1).min(16);
                        f.until = now + self.first_lockout.saturating_mul(factor).min(MAX_LOCKOUT);
                    }
                }
            }
        }
        outcome
    }

    /// Checks the credentials of a `Handshake` (its `authorization`
    /// header) and returns the bearer token the client is to use.
    pub(crate) fn handshake(&self, authorization: Option<&str>) -> Result<String, Status> {
        match &self.auth {
            Auth::None => Ok(String::new()),
            Auth::Token(token) => match authorization.and_then(|h| strip_scheme(h, "Bearer")) {
                Some(given) if constant_time_eq(given.as_bytes(), token.as_bytes()) => Ok(token.clone()),
                _ => Err(Status::unauthenticated("invalid bearer token")),
            },
            Auth::Password { user, password } => {
                let encoded = authorization.and_then(|h| strip_scheme(h, "Basic")).ok_or_else(|| {
                    Status::unauthenticated("the handshake needs an 'authorization: Basic ...' header")
                })?;
                // Padded or not: ADBC's Flight SQL driver sends it unpadded.
                let decoded = BASE64_EITHER_PADDING
                    .decode(encoded.trim())
                    .map_err(|_| Status::unauthenticated("the Basic credentials are not valid base64"))?;
                let (given_user, given_password) = decoded
                    .iter()
                    .position(|&b| b == b':')
                    .map(|i| (&decoded[..i], &decoded[i + 1..]))
                    .ok_or_else(|| Status::unauthenticated("the Basic credentials are not 'user:password'"))?;
                let user_ok = constant_time_eq(given_user, user.as_bytes());
                let password_ok = constant_time_eq(given_password, password.as_bytes());
                if !(user_ok && password_ok) {
                    return Err(Status::unauthenticated("invalid user or password"));
                }
                let mut bytes = [0u8; 32];
                rand::rng().fill_bytes(&mut bytes);
                let token = BASE64_URL_SAFE_NO_PAD.encode(bytes);
                let now = Instant::now();
                let mut tokens = self.tokens.lock().map_err(|_| Status::internal("token store poisoned"))?;
                tokens.retain(|_, expiry| *expiry > now);
                // Bounded: the token closest to expiring (the least
                // recently used) makes room.
                while tokens.len() >= self.max_tokens {
                    let oldest = tokens.iter().min_by_key(|(_, expiry)| **expiry).map(|(t, _)| t.clone());
                    match oldest {
                        Some(t) => tokens.remove(&t),
                        None => break,
                    };
                }
                tokens.insert(token.clone(), now + self.ttl);
                Ok(token)
            }
        }
    }

    /// Checks the `authorization` header of any call but the handshake.
    fn check(&self, authorization: Option<&str>) -> Result<(), Status> {
        let bearer = || {
            authorization.and_then(|h| strip_scheme(h, "Bearer")).ok_or_else(|| {
                Status::unauthenticated("missing 'authorization: Bearer ...' header; authenticate first")
            })
        };
        match &self.auth {
            Auth::None => Ok(()),
            Auth::Token(token) => {
                if constant_time_eq(bearer()?.as_bytes(), token.as_bytes()) {
                    Ok(())
                } else {
                    Err(Status::unauthenticated("invalid bearer token"))
                }
            }
            Auth::Password { .. } => {
                let given = bearer()?;
                let now = Instant::now();
                let mut tokens = self.tokens.lock().map_err(|_| Status::internal("token store poisoned"))?;
                match tokens.get_mut(given) {
                    Some(expiry) if *expiry > now => {
                        *expiry = now + self.ttl;
                        Ok(())
                    }
                    Some(_) => {
                        tokens.remove(given);
                        Err(Status::unauthenticated("the bearer token has expired; authenticate again"))
                    }
                    None => Err(Status::unauthenticated("invalid bearer token")),
                }
            }
        }
    }
}

/// `header` without its `scheme ` prefix (case-insensitive scheme).
fn strip_scheme<'h>(header: &'h str, scheme: &str) -> Option<&'h str> {
    let (given, rest) = header.split_once(' ')?;
    given.eq_ignore_ascii_case(scheme).then_some(rest.trim_start())
}

/// Equality whose running time does not depend on where `a` and `b` differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, &x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i).copied().unwrap_or(!x));
    }
    diff == 0
}

/// The tower layer that checks every call but the handshake.
#[derive(Debug, Clone)]
pub(crate) struct AuthLayer {
    auth: Arc<Authenticator>,
}

impl AuthLayer {
    pub(crate) fn new(auth: Arc<Authenticator>) -> Self {
        Self { auth }
    }
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService { inner, auth: Arc::clone(&self.auth) }
    }
}

/// See [`AuthLayer`].
#[derive(Debug, Clone)]
pub(crate) struct AuthService<S> {
    inner: S,
    auth: Arc<Authenticator>,
}

impl<S, B> tower::Service<http::Request<B>> for AuthService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Either<S::Future, Ready<Result<S::Response, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() == HANDSHAKE_PATH {
            return Either::Left(self.inner.call(request));
        }
        let header = request.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        match self.auth.check(header) {
            Ok(()) => Either::Left(self.inner.call(request)),
            Err(status) => Either::Right(ready(Ok(status.into_http()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use base64::prelude::{BASE64_STANDARD, BASE64_STANDARD_NO_PAD};

    use super::*;

    #[test]
    fn password_handshake_issues_tokens_that_the_check_accepts() {
        let auth =
            Authenticator::new(Auth::Password { user: "u".into(), password: "p:w".into() }, Duration::from_secs(60));
        let basic = format!("Basic {}", BASE64_STANDARD.encode("u:p:w"));
        let token = auth.handshake(Some(&basic)).unwrap();
        assert_eq!(token.len(), 43);
        auth.check(Some(&format!("Bearer {token}"))).unwrap();
        auth.check(Some(&format!("bearer {token}"))).unwrap();
        assert_eq!(auth.check(Some("Bearer nope")).unwrap_err().code(), tonic::Code::Unauthenticated);
        assert_eq!(auth.check(None).unwrap_err().code(), tonic::Code::Unauthenticated);
        let wrong = format!("Basic {}", BASE64_STANDARD.encode("u:p"));
        assert_eq!(auth.handshake(Some(&wrong)).unwrap_err().code(), tonic::Code::Unauthenticated);
        assert_eq!(auth.handshake(Some("Basic !!!")).unwrap_err().code(), tonic::Code::Unauthenticated);
        assert_eq!(auth.handshake(None).unwrap_err().code(), tonic::Code::Unauthenticated);
    }

    #[test]
    fn tokens_expire() {
        let auth = Authenticator::new(Auth::Password { user: "u".into(), password: "p".into() }, Duration::ZERO);
        let token = auth.handshake(Some(&format!("Basic {}", BASE64_STANDARD.encode("u:p")))).unwrap();
        let err = auth.check(Some(&format!("Bearer {token}"))).unwrap_err();
        assert!(err.message().contains("expired"), "{err}");
    }

    #[test]
    fn static_token() {
        let auth = Authenticator::new(Auth::Token("secret".into()), Duration::from_secs(60));
        auth.check(Some("Bearer secret")).unwrap();
        assert!(auth.check(Some("Bearer secreT")).is_err());
        assert!(auth.check(Some("Bearer secret2")).is_err());
        assert!(auth.check(Some("Basic secret")).is_err());
        assert_eq!(auth.handshake(Some("Bearer secret")).unwrap(), "secret");
    }

    /// ADBC's driver sends `user:password` in base64 without `=`
    /// padding: every length (modulo 3) passes padded and unpadded, and
    /// a wrong password still fails either way.
    #[test]
    fn basic_credentials_pass_with_or_without_padding() {
        for password in ["pass-word", "pass-word1", "pass-word12"] {
            let auth = Authenticator::new(
                Auth::Password { user: "quiver".into(), password: password.into() },
                Duration::from_secs(60),
            );
            let credentials = format!("quiver:{password}");
            let padded = BASE64_STANDARD.encode(&credentials);
            let unpadded = BASE64_STANDARD_NO_PAD.encode(&credentials);
            auth.handshake(Some(&format!("Basic {padded}"))).unwrap();
            auth.handshake(Some(&format!("Basic {unpadded}"))).unwrap();
            let wrong = BASE64_STANDARD_NO_PAD.encode(format!("quiver:{password}x"));
            assert_eq!(
                auth.handshake(Some(&format!("Basic {wrong}"))).unwrap_err().code(),
                tonic::Code::Unauthenticated
            );
        }
    }

    /// Empty and blank secrets are refused; `quiverdb serve` also refuses
    /// short ones.
    #[test]
    fn empty_and_short_secrets_are_refused() {
        let password = |user: &str, password: &str| Auth::Password { user: user.into(), password: password.into() };
        for auth in
            [Auth::Token(String::new()), Auth::Token("  ".into()), password("", "long-enough"), password("u", "")]
        {
            assert!(auth.check().is_err(), "{auth:?} passed");
            assert!(auth.check_strength().is_err(), "{auth:?} passed");
        }
        for auth in [Auth::Token("short-token".into()), password("u", "seven77")] {
            assert!(auth.check().is_ok(), "{auth:?} failed");
            let err = auth.check_strength().unwrap_err();
            assert!(err.contains("shorter than"), "{err}");
        }
        for auth in [Auth::None, Auth::Token("0123456789abcdef".into()), password("u", "eight888")] {
            auth.check_strength().unwrap();
        }
    }

    /// After five failed handshakes in a row an address waits (1 s, then
    /// twice as long after each further failure, in the server), even
    /// with the right password; other addresses do not; a success after
    /// the wait clears its count.
    #[test]
    fn failed_handshakes_make_their_address_wait() {
        let wait = Duration::from_millis(200);
        let auth = Authenticator::new(
            Auth::Password { user: "u".into(), password: "right-one".into() },
            Duration::from_secs(60),
        )
        .with_limits(MAX_TOKENS, wait);
        let basic = |password: &str| format!("Basic {}", BASE64_STANDARD.encode(format!("u:{password}")));
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for attempt in 1..=6 {
            let err = auth.handshake_from(Some(a), Some(&basic("guess"))).unwrap_err();
            assert!(err.message().contains("invalid user or password"), "attempt {attempt}: {err}");
        }
        let err = auth.handshake_from(Some(a), Some(&basic("right-one"))).unwrap_err();
        assert!(err.message().contains("too many failed"), "{err}");
        auth.handshake_from(Some(b), Some(&basic("right-one"))).unwrap();
        std::thread::sleep(wait + Duration::from_millis(50));
        auth.handshake_from(Some(a), Some(&basic("right-one"))).unwrap();
        // The count starts again: five more failures are free.
        for _ in 1..=5 {
            let err = auth.handshake_from(Some(a), Some(&basic("guess"))).unwrap_err();
            assert!(err.message().contains("invalid user or password"), "{err}");
        }
    }

    /// Guesses sent at once from one address (8 threads, 50 each) get
    /// their credentials checked only until the wait starts.
    #[test]
    fn concurrent_guesses_are_counted_one_after_another() {
        let auth = std::sync::Arc::new(Authenticator::new(
            Auth::Password { user: "u".into(), password: "right-one".into() },
            Duration::from_secs(60),
        ));
        let ip: IpAddr = "10.0.0.3".parse().unwrap();
        let checked: usize = (0..8)
            .map(|_| {
                let auth = std::sync::Arc::clone(&auth);
                std::thread::spawn(move || {
                    let guess = format!("Basic {}", BASE64_STANDARD.encode("u:guess"));
                    (0..50)
                        .filter(|_| {
                            let err = auth.handshake_from(Some(ip), Some(&guess)).unwrap_err();
                            err.message().contains("invalid user or password")
                        })
                        .count()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .sum();
        assert_eq!(checked, FREE_FAILURES as usize + 1, "guesses whose credentials were checked");
    }

    /// Tokens are bounded: the one closest to expiring goes first.
    #[test]
    fn issued_tokens_are_bounded() {
        let auth =
            Authenticator::new(Auth::Password { user: "u".into(), password: "p".into() }, Duration::from_secs(60))
                .with_limits(3, FIRST_LOCKOUT);
        let basic = format!("Basic {}", BASE64_STANDARD.encode("u:p"));
        let tokens: Vec<String> = (0..5)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(2));
                auth.handshake(Some(&basic)).unwrap()
            })
            .collect();
        for (i, token) in tokens.iter().enumerate() {
            let valid = auth.check(Some(&format!("Bearer {token}"))).is_ok();
            assert_eq!(valid, i >= 2, "token {i}");
        }
    }

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"ab", b"abc"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}
