//! Client sessions: the SQL settings (`SET …`) one Flight SQL client made.
//!
//! Every client starts in the server's shared session. The first `SET` (or
//! `RESET`) a client runs gives it a session of its own: a copy of the
//! shared one's settings, over the same catalog and memory pool, named by a
//! random id the response hands back as the cookie
//! `arrow_flight_session_id`. A client that sends the cookie back (JDBC
//! does; ADBC with `adbc.flight.sql.rpc.with_cookie_middleware`) runs its
//! statements with its settings; nothing it sets reaches another client.
//!
//! A session ends when its client closes it (Flight's `CloseSession`
//! action) or after it went unused for the idle time. A request naming a
//! session that ended is refused rather than run with other settings than
//! the client chose. With authentication, a session belongs to the
//! credentials that opened it.
//!
//! A client that does not send cookies back keeps its session by its
//! connection instead: requests without a cookie over the connection that
//! opened a session (and never named it by its cookie) run in that
//! session, as in a PostgreSQL connection. Such a session ends with the
//! idle time or `CloseSession` too, and the first request after it ended
//! is refused like a cookie's; a client that reconnects starts over in the
//! shared session. Once a client sends the cookie, only the cookie names
//! the session.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as BASE64_URL_SAFE_NO_PAD;
use datafusion::prelude::SessionContext;
use rand::RngCore;
use tonic::Status;
use tonic::metadata::{MetadataMap, MetadataValue};

/// The cookie that names a client's session.
pub(crate) const SESSION_COOKIE: &str = "arrow_flight_session_id";

/// Most sessions open at once: opening one more ends the least recently
/// used (whose client's next request is then refused, as for any session
/// that ended).
pub(crate) const MAX_SESSIONS: usize = 10_000;

/// Longest session id accepted from a client.
const MAX_ID_LEN: usize = 64;

/// The open sessions.
pub(crate) struct Sessions {
    open: Mutex<Open>,
    idle: Duration,
}

/// The open sessions, and those not named by a cookie yet, by the
/// connection that opened them.
#[derive(Default)]
struct Open {
    sessions: HashMap<Key, Entry>,
    by_connection: HashMap<SocketAddr, Key>,
}

/// A session: its id and the credentials that opened it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    id: String,
    owner: Option<String>,
}

struct Entry {
    ctx: SessionContext,
    last_used: Instant,
    /// The connection that opened the session, until a request names it.
    opener: Option<SocketAddr>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").field("open", &self.lock_open().sessions.len()).field("idle", &self.idle).finish()
    }
}

/// The session a request runs in, as its metadata names it.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestSession {
    /// The id of the cookie the request sent, if any.
    id: Option<String>,
    /// The request's `authorization` header.
    owner: Option<String>,
    /// The connection the request came over.
    peer: Option<SocketAddr>,
    /// The id of a session opened while serving the request, which its
    /// response hands back as a cookie.
    opened: Arc<Mutex<Option<String>>>,
}

impl RequestSession {
    /// The session `metadata` names (by its cookie), refusing a malformed
    /// id, of a request that came over the connection from `peer`.
    pub(crate) fn of(metadata: &MetadataMap, peer: Option<SocketAddr>) -> Result<Self, Status> {
        let mut id = None;
        for header in metadata.get_all("cookie") {
            let Ok(header) = header.to_str() else { continue };
            for pair in header.split(';') {
                if let Some((name, value)) = pair.trim().split_once('=')
                    && name == SESSION_COOKIE
                {
                    let valid = !value.is_empty()
                        && value.len() <= MAX_ID_LEN
                        && value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
                    if !valid {
                        return Err(Status::invalid_argument(format!("malformed {SESSION_COOKIE} cookie")));
                    }
                    id = Some(value.to_string());
                }
            }
        }
        let owner = metadata.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string);
        Ok(Self { id, owner, peer, opened: Arc::default() })
    }

    /// The `authorization` header the request carried.
    pub(crate) fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The connection the request came over.
    pub(crate) fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Adds the cookie of a session opened while serving the request, or
    /// the expiry of one that was closed, to `metadata`.
    pub(crate) fn answer(&self, metadata: &mut MetadataMap) {
        let opened = lock(&self.opened).clone();
        let cookie = match opened {
            Some(id) if id.is_empty() => format!("{SESSION_COOKIE}=; Max-Age=0"),
            Some(id) => format!("{SESSION_COOKIE}={id}"),
            None => return,
        };
        if let Ok(value) = MetadataValue::try_from(cookie) {
            metadata.insert("set-cookie", value);
        }
    }

    /// The session the request's cookie (or a session opened while
    /// serving it) names.
    fn key(&self) -> Option<Key> {
        let id = lock(&self.opened).clone().filter(|id| !id.is_empty()).or_else(|| self.id.clone())?;
        Some(Key { id, owner: self.owner.clone() })
    }

    /// [`Self::key`], or else the session its connection opened (see the
    /// module documentation).
    fn key_in(&self, open: &Open) -> Option<Key> {
        self.key().or_else(|| {
            let key = open.by_connection.get(&self.peer?)?;
            (key.owner == self.owner).then(|| key.clone())
        })
    }
}

impl Sessions {
    /// Sessions that end after `idle` unused.
    pub(crate) fn new(idle: Duration) -> Self {
        Self { open: Mutex::default(), idle }
    }

    /// The settings `request` runs with: its session's, `None` for the
    /// shared session. A request naming a session that ended is refused.
    pub(crate) fn context(&self, request: &RequestSession) -> Result<Option<SessionContext>, Status> {
        let mut open = self.lock_open();
        let by_cookie = request.key().is_some();
        let Some(key) = request.key_in(&open) else { return Ok(None) };
        match open.sessions.get_mut(&key) {
            Some(entry) if entry.last_used.elapsed() <= self.idle => {
                entry.last_used = Instant::now();
                let ctx = entry.ctx.clone();
                // Named by its cookie: the connection no longer names it.
                if by_cookie && let Some(opener) = entry.opener.take() {
                    open.by_connection.remove(&opener);
                }
                Ok(Some(ctx))
            }
            _ => {
                if let Some(entry) = open.sessions.remove(&key)
                    && let Some(opener) = entry.opener
                {
                    open.by_connection.remove(&opener);
                }
                if !by_cookie && let Some(peer) = request.peer {
                    open.by_connection.remove(&peer);
                }
                Err(self.ended())
            }
        }
    }

    /// `request`'s session, opened (as a copy of `shared`) when it has
    /// none; true if it was opened now.
    pub(crate) fn open(
        &self,
        request: &RequestSession,
        shared: &SessionContext,
    ) -> Result<(SessionContext, bool), Status> {
        if request.key_in(&self.lock_open()).is_some() {
            return Ok((self.context(request)?.ok_or_else(|| self.ended())?, false));
        }
        let mut open = self.lock_open();
        if open.sessions.len() >= MAX_SESSIONS {
            open.sessions.retain(|_, entry| entry.last_used.elapsed() <= self.idle);
            let oldest = open.sessions.iter().min_by_key(|(_, entry)| entry.last_used).map(|(key, _)| key.clone());
            if open.sessions.len() >= MAX_SESSIONS
                && let Some(oldest) = oldest
            {
                open.sessions.remove(&oldest);
            }
            let Open { sessions, by_connection } = &mut *open;
            by_connection.retain(|_, key| sessions.contains_key(key));
        }
        let mut bytes = [0u8; 24];
        rand::rng().fill_bytes(&mut bytes);
        let id = BASE64_URL_SAFE_NO_PAD.encode(bytes);
        let ctx = SessionContext::new_with_state(shared.state());
        let key = Key { id: id.clone(), owner: request.owner.clone() };
        if let Some(peer) = request.peer
            && let Some(previous) = open.by_connection.insert(peer, key.clone())
        {
            open.sessions.remove(&previous);
        }
        open.sessions.insert(key, Entry { ctx: ctx.clone(), last_used: Instant::now(), opener: request.peer });
        *lock(&request.opened) = Some(id);
        Ok((ctx, true))
    }

    /// Ends a session opened while serving `request` (whose statement then
    /// failed), so that no session lingers that its client never learnt of.
    pub(crate) fn discard_opened(&self, request: &RequestSession) {
        let opened = lock(&request.opened).take();
        if let Some(id) = opened.filter(|id| !id.is_empty()) {
            self.forget(&Key { id, owner: request.owner.clone() });
        }
    }

    /// Ends `request`'s session; true if it had one.
    pub(crate) fn close(&self, request: &RequestSession) -> bool {
        let key = request.key_in(&self.lock_open());
        let Some(key) = key else { return false };
        let closed = self.forget(&key);
        // The response tells the client to forget the cookie.
        *lock(&request.opened) = Some(String::new());
        closed
    }

    fn ended(&self) -> Status {
        Status::failed_precondition(format!(
            "this client's session ended (closed, unused for more than {:?}, or the server restarted) and its \
             settings with it; reconnect to start a new one",
            self.idle
        ))
    }

    /// Ends the session `key`; true if it was open.
    fn forget(&self, key: &Key) -> bool {
        let mut open = self.lock_open();
        let Some(entry) = open.sessions.remove(key) else { return false };
        if let Some(opener) = entry.opener {
            open.by_connection.remove(&opener);
        }
        true
    }

    fn lock_open(&self) -> MutexGuard<'_, Open> {
        lock(&self.open)
    }
}

/// Flight's session-option messages (`Flight.proto`; arrow-flight 59 has
/// no types for them). Their action bodies are the plain messages.
pub(crate) mod proto {
    use std::collections::HashMap;

    pub(crate) const SET_SESSION_OPTIONS: &str = "SetSessionOptions";
    pub(crate) const GET_SESSION_OPTIONS: &str = "GetSessionOptions";
    pub(crate) const CLOSE_SESSION: &str = "CloseSession";

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct SessionOptionValue {
        #[prost(oneof = "OptionValue", tags = "1, 2, 3, 4, 5")]
        pub(crate) option_value: Option<OptionValue>,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub(crate) enum OptionValue {
        #[prost(string, tag = "1")]
        String(String),
        #[prost(bool, tag = "2")]
        Bool(bool),
        #[prost(sfixed64, tag = "3")]
        Int64(i64),
        #[prost(double, tag = "4")]
        Double(f64),
        #[prost(message, tag = "5")]
        StringList(StringListValue),
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct StringListValue {
        #[prost(string, repeated, tag = "1")]
        pub(crate) values: Vec<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct SetSessionOptionsRequest {
        #[prost(map = "string, message", tag = "1")]
        pub(crate) session_options: HashMap<String, SessionOptionValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct SetSessionOptionsResult {
        #[prost(map = "string, message", tag = "1")]
        pub(crate) errors: HashMap<String, SetSessionOptionsError>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct SetSessionOptionsError {
        #[prost(enumeration = "ErrorValue", tag = "1")]
        pub(crate) value: i32,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub(crate) enum ErrorValue {
        Unspecified = 0,
        InvalidName = 1,
        InvalidValue = 2,
        Error = 3,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct GetSessionOptionsResult {
        #[prost(map = "string, message", tag = "1")]
        pub(crate) session_options: HashMap<String, SessionOptionValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct CloseSessionResult {
        #[prost(enumeration = "CloseStatus", tag = "1")]
        pub(crate) status: i32,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub(crate) enum CloseStatus {
        Unspecified = 0,
        Closed = 1,
        Closing = 2,
        NotClosable = 3,
    }
}

/// A lock that a panic elsewhere does not poison: the guarded maps hold no
/// invariant a half-done update could break.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(cookie: Option<&str>, auth: Option<&str>) -> RequestSession {
        request_from(cookie, auth, None)
    }

    fn request_from(cookie: Option<&str>, auth: Option<&str>, peer: Option<SocketAddr>) -> RequestSession {
        let mut metadata = MetadataMap::new();
        if let Some(cookie) = cookie {
            metadata.insert("cookie", MetadataValue::try_from(cookie).expect("ascii"));
        }
        if let Some(auth) = auth {
            metadata.insert("authorization", MetadataValue::try_from(auth).expect("ascii"));
        }
        RequestSession::of(&metadata, peer).expect("well-formed")
    }

    fn cookie_of(request: &RequestSession) -> String {
        let mut metadata = MetadataMap::new();
        request.answer(&mut metadata);
        let header = metadata.get("set-cookie").expect("a cookie").to_str().expect("ascii").to_string();
        header.strip_prefix(&format!("{SESSION_COOKIE}=")).expect("the session cookie").to_string()
    }

    #[test]
    fn a_session_is_found_by_its_cookie_and_only_by_its_owner() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let shared = SessionContext::new();
        let first = request(None, Some("Bearer a"));
        assert!(sessions.context(&first).expect("no session").is_none());
        let (ctx, opened) = sessions.open(&first, &shared).expect("opened");
        assert!(opened);
        let id = cookie_of(&first);
        assert_eq!(id.len(), 32);

        let again = request(Some(&format!("other=1; {SESSION_COOKIE}={id}")), Some("Bearer a"));
        let found = sessions.context(&again).expect("open").expect("a session");
        assert_eq!(found.session_id(), ctx.session_id());
        // The same id with other credentials names no session.
        let stranger = request(Some(&format!("{SESSION_COOKIE}={id}")), Some("Bearer b"));
        assert_eq!(
            sessions.context(&stranger).map(|c| c.is_some()).expect_err("not theirs").code(),
            tonic::Code::FailedPrecondition
        );

        assert!(sessions.close(&again));
        assert_eq!(cookie_of(&again), "; Max-Age=0");
        let after = request(Some(&format!("{SESSION_COOKIE}={id}")), Some("Bearer a"));
        assert_eq!(
            sessions.context(&after).map(|c| c.is_some()).expect_err("closed").code(),
            tonic::Code::FailedPrecondition
        );
    }

    #[test]
    fn idle_sessions_end() {
        let sessions = Sessions::new(Duration::ZERO);
        let first = request(None, None);
        sessions.open(&first, &SessionContext::new()).expect("opened");
        std::thread::sleep(Duration::from_millis(2));
        let again = request(Some(&format!("{SESSION_COOKIE}={}", cookie_of(&first))), None);
        assert_eq!(
            sessions.context(&again).map(|c| c.is_some()).expect_err("ended").code(),
            tonic::Code::FailedPrecondition
        );
    }

    #[test]
    fn a_connection_without_cookies_keeps_its_session_by_the_connection() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let shared = SessionContext::new();
        let peer: SocketAddr = "127.0.0.1:5000".parse().expect("an address");
        let other: SocketAddr = "127.0.0.1:5001".parse().expect("an address");
        let set = request_from(None, None, Some(peer));
        let (ctx, opened) = sessions.open(&set, &shared).expect("opened");
        assert!(opened);
        // The same connection without a cookie: its session, again and again.
        for _ in 0..2 {
            let found = sessions.context(&request_from(None, None, Some(peer))).expect("open").expect("a session");
            assert_eq!(found.session_id(), ctx.session_id());
        }
        // A second SET over it uses the same session.
        let (again, opened) = sessions.open(&request_from(None, None, Some(peer)), &shared).expect("open");
        assert!(!opened);
        assert_eq!(again.session_id(), ctx.session_id());
        // Another connection, or other credentials: the shared session.
        assert!(sessions.context(&request_from(None, None, Some(other))).expect("shared").is_none());
        assert!(sessions.context(&request_from(None, Some("Bearer x"), Some(peer))).expect("shared").is_none());
        // CloseSession over the connection ends it; the next request there
        // runs in the shared session.
        assert!(sessions.close(&request_from(None, None, Some(peer))));
        assert!(sessions.context(&request_from(None, None, Some(peer))).expect("shared").is_none());

        // Once the client names its session by the cookie, only the cookie
        // does: a request without it over the connection runs shared.
        let set = request_from(None, None, Some(peer));
        sessions.open(&set, &shared).expect("opened");
        let cookie = format!("{SESSION_COOKIE}={}", cookie_of(&set));
        assert!(sessions.context(&request_from(Some(&cookie), None, Some(peer))).expect("open").is_some());
        assert!(sessions.context(&request_from(None, None, Some(peer))).expect("shared").is_none());
    }

    #[test]
    fn a_connections_session_that_ended_is_refused_once() {
        let sessions = Sessions::new(Duration::ZERO);
        let peer: SocketAddr = "127.0.0.1:5002".parse().expect("an address");
        sessions.open(&request_from(None, None, Some(peer)), &SessionContext::new()).expect("opened");
        std::thread::sleep(Duration::from_millis(2));
        let status = sessions.context(&request_from(None, None, Some(peer))).map(|c| c.is_some()).expect_err("ended");
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert!(sessions.context(&request_from(None, None, Some(peer))).expect("shared").is_none());
    }

    #[test]
    fn malformed_cookies_are_refused() {
        for bad in ["", "a b", "a,b", &"a".repeat(65), "a/b"] {
            let mut metadata = MetadataMap::new();
            let Ok(value) = MetadataValue::try_from(format!("{SESSION_COOKIE}={bad}")) else { continue };
            metadata.insert("cookie", value);
            let status = RequestSession::of(&metadata, None).expect_err(bad);
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{bad}");
        }
    }
}
