//! The commands: each request of a connection turned into operations of
//! the key-value contract on that connection's client.
//!
//! Keys and values travel as RESP bulk strings. A store of u64 keys and
//! values (XStore, ROLEX, FineStore, the baselines; `Capabilities` key and
//! value length 8..8) takes them as decimal text: `SET 42 7`, `GET 42`
//! answers `"7"`; other text is refused with one line saying so. A store
//! of byte strings (HiStore) takes the bytes as they are, within the
//! lengths it takes.

use std::sync::{Arc, Mutex};

use kv::{Capabilities, KvClient, KvError};

use crate::proto::{self, Reply};

/// Pairs one SCAN or XSTORE.RANGE returns at most.
pub const MAX_PAIRS: usize = 100_000;

/// Pairs a SCAN returns when no COUNT is given (Redis's default).
const DEFAULT_SCAN_COUNT: usize = 10;

/// Pairs an XSTORE.RANGE returns when no LIMIT is given.
const DEFAULT_RANGE_LIMIT: usize = 1_000;

/// Plain SETs of one batch kept in flight to the store at once.
pub const MAX_IN_FLIGHT: usize = 64;

/// Pairs DBSIZE reads per scan.
const DBSIZE_BATCH: usize = 4_096;

/// Stripes of the lock that makes INCR atomic among this front end's
/// connections (the contract has no read-modify-write).
pub const INCR_STRIPES: usize = 64;

/// What every connection of one front end shares.
#[derive(Debug)]
pub struct Shared {
    /// The access token, if the backend requires one: a connection must
    /// AUTH (or HELLO ... AUTH) with it first.
    pub token: Option<String>,
    /// The backend's system name, for INFO and HELLO.
    pub system: String,
    /// The backend URL, for INFO.
    pub backend: String,
    /// INCR's striped lock.
    pub incr: Vec<Mutex<()>>,
}

impl Shared {
    /// Shared state of a front end.
    pub fn new(token: Option<String>, system: &str, backend: &str) -> Arc<Shared> {
        Arc::new(Shared {
            token,
            system: system.to_string(),
            backend: backend.to_string(),
            incr: (0..INCR_STRIPES).map(|_| Mutex::new(())).collect(),
        })
    }
}

/// Key-value pairs as stored.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// How keys and values are written in requests and replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    /// u64 keys and values as decimal text.
    Words,
    /// Byte strings within these lengths.
    Bytes {
        key: (usize, usize),
        value: (usize, usize),
    },
}

impl Codec {
    fn of(c: &Capabilities) -> Codec {
        if c.key_len == (8, 8) && c.value_len == (8, 8) {
            Codec::Words
        } else {
            Codec::Bytes {
                key: c.key_len,
                value: c.value_len,
            }
        }
    }

    fn key<'a>(&self, text: &'a [u8]) -> Result<Stored<'a>, Reply> {
        match *self {
            Codec::Words => Ok(Stored::Word(word(text, "key")?.to_be_bytes())),
            Codec::Bytes { key, .. } => within(text, key, "key"),
        }
    }

    fn value<'a>(&self, text: &'a [u8]) -> Result<Stored<'a>, Reply> {
        match *self {
            Codec::Words => Ok(Stored::Word(word(text, "value")?.to_be_bytes())),
            Codec::Bytes { value, .. } => within(text, value, "value"),
        }
    }

    /// Stored bytes back as the client wrote them.
    fn show(&self, stored: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.show_into(stored, &mut out);
        out
    }

    /// Stored bytes back as the client wrote them, appended to `out`.
    fn show_into(&self, stored: &[u8], out: &mut Vec<u8>) {
        match (self, <[u8; 8]>::try_from(stored)) {
            (Codec::Words, Ok(b)) => {
                let mut digits = [0u8; 20];
                out.extend_from_slice(decimal(u64::from_be_bytes(b), &mut digits));
            }
            _ => out.extend_from_slice(stored),
        }
    }

    /// A bulk reply of a stored value, encoded straight into `out`.
    fn push_value(&self, stored: &[u8], out: &mut Vec<u8>) {
        match (self, <[u8; 8]>::try_from(stored)) {
            (Codec::Words, Ok(b)) => {
                let mut digits = [0u8; 20];
                proto::push_bulk(out, decimal(u64::from_be_bytes(b), &mut digits));
            }
            _ => proto::push_bulk(out, stored),
        }
    }

    /// A SCAN cursor for the next key: decimal (words) or hex (bytes);
    /// `0` is the start and the end (a next key is never the smallest).
    fn cursor(&self, next: &[u8]) -> Vec<u8> {
        match self {
            Codec::Words => self.show(next),
            Codec::Bytes { .. } => next
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
                .into_bytes(),
        }
    }

    fn start_of(&self, c: &[u8]) -> Result<Vec<u8>, Reply> {
        if c == b"0" {
            return Ok(match self {
                Codec::Words => vec![0; 8],
                Codec::Bytes { .. } => Vec::new(),
            });
        }
        match self {
            Codec::Words => self.key(c).map(|k| k.bytes().to_vec()),
            Codec::Bytes { .. } => {
                let s = std::str::from_utf8(c).map_err(|_| Reply::err("invalid cursor"))?;
                if s.len() % 2 != 0 || s.len() > 2 * 1024 {
                    return Err(Reply::err("invalid cursor"));
                }
                (0..s.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&s[i..i + 2], 16))
                    .collect::<Result<Vec<u8>, _>>()
                    .map_err(|_| Reply::err("invalid cursor"))
            }
        }
    }
}

fn word(text: &[u8], what: &str) -> Result<u64, Reply> {
    // As `str::parse::<u64>` (an optional `+`, then digits), without the
    // UTF-8 check and its generality: every GET and SET runs it.
    let digits = text.strip_prefix(b"+").unwrap_or(text);
    let parsed = match digits.len() {
        1..=20 => digits.iter().try_fold(0u64, |n, &d| {
            if d.is_ascii_digit() {
                n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
            } else {
                None
            }
        }),
        _ => None,
    };
    parsed.ok_or_else(|| {
        Reply::err(format!(
            "this store holds u64 keys and values: a {what} is a decimal number 0..2^64-1"
        ))
    })
}

/// A key or value as the store takes it: a word's 8 bytes, or the
/// client's bytes as they are (no copy).
#[derive(Debug, Clone, Copy)]
enum Stored<'a> {
    /// A u64, big-endian.
    Word([u8; 8]),
    /// Bytes of the request.
    Bytes(&'a [u8]),
}

impl Stored<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Stored::Word(w) => w,
            Stored::Bytes(b) => b,
        }
    }
}

/// The decimal digits of `n`, written at the end of `digits`.
fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &digits[i..]
}

fn within<'a>(text: &'a [u8], (lo, hi): (usize, usize), what: &str) -> Result<Stored<'a>, Reply> {
    if text.len() < lo || text.len() > hi {
        return Err(Reply::err(format!(
            "this store takes {what}s of {lo}..={hi} bytes, not {}",
            text.len()
        )));
    }
    Ok(Stored::Bytes(text))
}

fn store_err(e: KvError) -> Reply {
    Reply::err(format!("{:?}: {}", e.kind, e.message))
}

/// What the connection does after a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// Reads the next request.
    Continue,
    /// Sends the reply, then closes (QUIT).
    Close,
}

/// One connection's state: protocol version, whether it proved the
/// token. Its requests run on a client of the backend: its own
/// ([`Session::new`]), or one its event loop shares among its
/// connections ([`Session::detached`], [`Session::execute_batch_on`]):
/// a client per connection would cost each connection the client's
/// set-up (XStore's: fetching the model) and its cache.
pub struct Session {
    client: Option<Box<dyn KvClient>>,
    state: State,
}

/// What a session keeps between requests.
struct State {
    codec: Codec,
    caps: Capabilities,
    shared: Arc<Shared>,
    resp3: bool,
    authed: bool,
    value: Vec<u8>,
}

/// A session's state with the client its requests run on.
struct Exec<'a> {
    client: &'a mut dyn KvClient,
    s: &'a mut State,
}

impl Session {
    /// A session over its own `client`.
    pub fn new(client: Box<dyn KvClient>, shared: Arc<Shared>) -> Session {
        let caps = client.capabilities();
        Session {
            client: Some(client),
            state: State::new(caps, shared),
        }
    }

    /// A session whose requests run on a client given with each batch
    /// ([`Session::execute_batch_on`]), of a store with `caps`.
    pub fn detached(caps: Capabilities, shared: Arc<Shared>) -> Session {
        Session {
            client: None,
            state: State::new(caps, shared),
        }
    }

    /// Whether replies are RESP3 (after `HELLO 3`).
    pub fn resp3(&self) -> bool {
        self.state.resp3
    }

    /// Answers a pipelined batch on the session's own client (see
    /// [`Session::execute_batch_on`]).
    ///
    /// # Panics
    /// On a [`Session::detached`] session.
    pub fn execute_batch(&mut self, batch: &[&[&[u8]]], out: &mut Vec<u8>) -> After {
        let client = self
            .client
            .as_deref_mut()
            .expect("a session made with its own client");
        Exec {
            client,
            s: &mut self.state,
        }
        .execute_batch(batch, out)
    }

    /// Answers a pipelined batch in order on `client` (of the store the
    /// session was made for), appending the replies to `out`;
    /// `After::Close` once a request asks to close (the rest are not
    /// run). Runs of plain `GET k` go to the store as one
    /// [`kv::KvClient::get_many`]; runs of plain `SET k v` go with their
    /// writes in flight together ([`kv::KvClient::start_write`]) and are
    /// answered once all are done. Any other request (and a GET after a
    /// SET, a SET after a GET) first waits for the run before it, so
    /// every request sees the writes before it.
    pub fn execute_batch_on(
        &mut self,
        client: &mut dyn KvClient,
        batch: &[&[&[u8]]],
        out: &mut Vec<u8>,
    ) -> After {
        debug_assert_eq!(client.capabilities(), self.state.caps);
        Exec {
            client,
            s: &mut self.state,
        }
        .execute_batch(batch, out)
    }
}

impl State {
    fn new(caps: Capabilities, shared: Arc<Shared>) -> State {
        State {
            codec: Codec::of(&caps),
            caps,
            authed: shared.token.is_none(),
            shared,
            resp3: false,
            value: Vec::new(),
        }
    }
}

impl Exec<'_> {
    /// Answers a pipelined batch in order, appending the replies to
    /// `out`; `After::Close` once a request asks to close (the rest are
    /// not run). Runs of plain `GET k` go to the store as one
    /// [`kv::KvClient::get_many`]; runs of plain `SET k v` go with their
    /// writes in flight together ([`kv::KvClient::start_write`]) and are
    /// answered once all are done. Any other request (and a GET after a
    /// SET, a SET after a GET) first waits for the run before it, so
    /// every request sees the writes before it.
    fn execute_batch(&mut self, batch: &[&[&[u8]]], out: &mut Vec<u8>) -> After {
        let mut in_flight: Vec<Result<kv::Pending, Reply>> = Vec::new();
        let mut gets: Vec<&[u8]> = Vec::new();
        for args in batch {
            if let Some(key) = self.plain_get(args) {
                self.finish(&mut in_flight, out);
                gets.push(key);
                continue;
            }
            self.answer_gets(&mut gets, out);
            if let Some(started) = self.start_plain_set(args) {
                in_flight.push(started);
                if in_flight.len() < MAX_IN_FLIGHT {
                    continue;
                }
                self.finish(&mut in_flight, out);
                continue;
            }
            self.finish(&mut in_flight, out);
            let (reply, after) = self.execute(args);
            reply.encode(self.s.resp3, out);
            if after == After::Close {
                return After::Close;
            }
        }
        self.answer_gets(&mut gets, out);
        self.finish(&mut in_flight, out);
        After::Continue
    }

    /// The key of a plain `GET k` the session may run; `None` for
    /// anything else.
    fn plain_get<'a>(&self, args: &[&'a [u8]]) -> Option<&'a [u8]> {
        match args {
            [name, key] if self.s.authed && name.eq_ignore_ascii_case(b"GET") => Some(key),
            _ => None,
        }
    }

    /// Answers a run of plain GETs (their keys as the client wrote them)
    /// in order, the well-formed ones through one `get_many` per stretch
    /// between malformed keys; empties `texts`.
    fn answer_gets(&mut self, texts: &mut Vec<&[u8]>, out: &mut Vec<u8>) {
        if texts.is_empty() {
            return;
        }
        let codec = self.s.codec;
        let resp3 = self.s.resp3;
        let encoded: Vec<Result<Stored<'_>, Reply>> = texts.iter().map(|t| codec.key(t)).collect();
        let mut i = 0;
        while i < encoded.len() {
            let end = encoded[i..]
                .iter()
                .position(Result::is_err)
                .map_or(encoded.len(), |p| i + p);
            if end > i {
                let keys: Vec<&[u8]> = encoded[i..end]
                    .iter()
                    .filter_map(|k| k.as_ref().ok().map(Stored::bytes))
                    .collect();
                self.client.get_many(&keys, &mut |_, got| match got {
                    Ok(Some(v)) => codec.push_value(v, out),
                    Ok(None) => Reply::Nil.encode(resp3, out),
                    Err(e) => store_err(e).encode(resp3, out),
                });
            }
            if let Some(Err(r)) = encoded.get(end) {
                r.encode(resp3, out);
            }
            i = end + 1;
        }
        texts.clear();
    }

    /// Starts `SET k v` (no options) as an upsert in flight, when the
    /// store keeps writes in flight and the session may write; `None`
    /// for anything else (executed the usual way).
    fn start_plain_set(&mut self, args: &[&[u8]]) -> Option<Result<kv::Pending, Reply>> {
        let [name, k, v] = args else { return None };
        // A store without writes in flight answers `start_write` at
        // once (the contract's default): the same as a blocking upsert.
        if !name.eq_ignore_ascii_case(b"SET") || !self.s.authed || !self.s.caps.upserts {
            return None;
        }
        let (key, value) = match (self.s.codec.key(k), self.s.codec.value(v)) {
            (Ok(k), Ok(v)) => (k, v),
            (Err(r), _) | (_, Err(r)) => return Some(Err(r)),
        };
        Some(
            self.client
                .start_write(kv::Write::Upsert {
                    key: key.bytes(),
                    value: value.bytes(),
                })
                .map_err(store_err),
        )
    }

    /// Answers the writes in flight, in the order they were started.
    fn finish(&mut self, in_flight: &mut Vec<Result<kv::Pending, Reply>>, out: &mut Vec<u8>) {
        for started in in_flight.drain(..) {
            let reply = match started {
                Ok(p) => match self.client.finish_write(p) {
                    Ok(_) => Reply::Simple("OK"),
                    Err(e) => store_err(e),
                },
                Err(r) => r,
            };
            reply.encode(self.s.resp3, out);
        }
    }

    /// Answers one request.
    fn execute(&mut self, args: &[&[u8]]) -> (Reply, After) {
        let Some(name) = args.first() else {
            return (Reply::err("empty command"), After::Continue);
        };
        // Command names are short ASCII words: upper-cased on the stack.
        let mut upper = [0u8; 16];
        let long;
        let name: &str = match upper_ascii(name, &mut upper) {
            Some(n) => n,
            None => {
                long = String::from_utf8_lossy(name).to_ascii_uppercase();
                &long
            }
        };
        let rest = &args[1..];
        if !self.s.authed && !matches!(name, "AUTH" | "HELLO" | "QUIT") {
            return (
                Reply::Error("NOAUTH Authentication required.".into()),
                After::Continue,
            );
        }
        let reply = match name {
            "QUIT" => return (Reply::Simple("OK"), After::Close),
            "PING" => match rest {
                [] => Reply::Simple("PONG"),
                [m] => Reply::Bulk(m.to_vec()),
                _ => arity(name),
            },
            "ECHO" => match rest {
                [m] => Reply::Bulk(m.to_vec()),
                _ => arity(name),
            },
            "AUTH" => self.auth(rest),
            "HELLO" => self.hello(rest),
            "SELECT" => match rest {
                [db] if *db == b"0" => Reply::Simple("OK"),
                [_] => Reply::err("DB index is out of range (this store has one database)"),
                _ => arity(name),
            },
            "CLIENT" => Reply::Simple("OK"),
            "GET" => match rest {
                [k] => self.get(k),
                _ => arity(name),
            },
            "SET" => self.set(rest),
            "DEL" | "UNLINK" if !rest.is_empty() => self.del(rest),
            "EXISTS" if !rest.is_empty() => self.exists(rest),
            "MGET" if !rest.is_empty() => Reply::Array(rest.iter().map(|k| self.get(k)).collect()),
            "MSET" if !rest.is_empty() && rest.len().is_multiple_of(2) => self.mset(rest),
            "INCR" | "DECR" => match rest {
                [k] => self.incr(k, if name == "INCR" { 1 } else { -1 }),
                _ => arity(name),
            },
            "INCRBY" | "DECRBY" => match rest {
                [k, by] => match std::str::from_utf8(by)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
                {
                    Some(by) if name == "INCRBY" => self.incr(k, by),
                    Some(by) => self.incr(k, by.checked_neg().unwrap_or(i64::MAX)),
                    None => Reply::err("value is not an integer or out of range"),
                },
                _ => arity(name),
            },
            "DBSIZE" => self.dbsize(),
            "SCAN" => self.scan(rest),
            "XSTORE.RANGE" => self.range(rest),
            "INFO" => self.info(),
            "COMMAND" => command(rest),
            "CONFIG" => config(rest),
            "DEL" | "UNLINK" | "EXISTS" | "MGET" | "MSET" => arity(name),
            _ => unknown(name, rest),
        };
        (reply, After::Continue)
    }

    fn auth(&mut self, rest: &[&[u8]]) -> Reply {
        let password = match rest {
            [p] | [_, p] => p,
            _ => return arity("AUTH"),
        };
        self.prove(password)
    }

    fn prove(&mut self, password: &[u8]) -> Reply {
        use subtle::ConstantTimeEq;
        match &self.s.shared.token {
            None => Reply::err("AUTH <password> called without any password configured"),
            Some(t) if bool::from(t.as_bytes().ct_eq(password)) => {
                self.s.authed = true;
                Reply::Simple("OK")
            }
            Some(_) => Reply::Error("WRONGPASS invalid username-password pair".into()),
        }
    }

    fn hello(&mut self, rest: &[&[u8]]) -> Reply {
        let mut i = 0;
        let mut version = if self.s.resp3 { 3 } else { 2 };
        if let Some(v) = rest.first() {
            match *v {
                b"2" => version = 2,
                b"3" => version = 3,
                _ => return Reply::Error("NOPROTO unsupported protocol version".into()),
            }
            i = 1;
        }
        while i < rest.len() {
            let opt = String::from_utf8_lossy(rest[i]).to_ascii_uppercase();
            match (opt.as_str(), rest.get(i + 1), rest.get(i + 2)) {
                ("AUTH", Some(_user), Some(pass)) => {
                    if let Reply::Error(e) = self.prove(pass) {
                        return Reply::Error(e);
                    }
                    i += 3;
                }
                ("SETNAME", Some(_), _) => i += 2,
                _ => return Reply::err(format!("syntax error in HELLO option '{opt}'")),
            }
        }
        if !self.s.authed {
            return Reply::Error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".into());
        }
        self.s.resp3 = version == 3;
        Reply::Map(vec![
            (Reply::text("server"), Reply::text("xstore")),
            (
                Reply::text("version"),
                Reply::text(env!("CARGO_PKG_VERSION")),
            ),
            (Reply::text("proto"), Reply::Int(version)),
            (Reply::text("id"), Reply::Int(0)),
            (Reply::text("mode"), Reply::text("standalone")),
            (Reply::text("role"), Reply::text("master")),
            (Reply::text("modules"), Reply::Array(Vec::new())),
            (
                Reply::text("system"),
                Reply::text(self.s.shared.system.clone()),
            ),
        ])
    }

    fn get(&mut self, k: &[u8]) -> Reply {
        let key = match self.s.codec.key(k) {
            Ok(k) => k,
            Err(r) => return r,
        };
        match self.client.get(key.bytes(), &mut self.s.value) {
            Ok(true) => Reply::Bulk(self.s.codec.show(&self.s.value)),
            Ok(false) => Reply::Nil,
            Err(e) => store_err(e),
        }
    }

    fn set(&mut self, rest: &[&[u8]]) -> Reply {
        let [k, v, opts @ ..] = rest else {
            return arity("SET");
        };
        let (mut nx, mut xx) = (false, false);
        for o in opts {
            match String::from_utf8_lossy(o).to_ascii_uppercase().as_str() {
                "NX" => nx = true,
                "XX" => xx = true,
                "EX" | "PX" | "EXAT" | "PXAT" | "KEEPTTL" => {
                    return Reply::err(
                        "this store keeps no expiry: EX, PX, EXAT, PXAT and KEEPTTL are refused",
                    )
                }
                "GET" => return Reply::err("SET ... GET is not supported (GET, then SET)"),
                _ => return Reply::err("syntax error"),
            }
        }
        if nx && xx {
            return Reply::err("syntax error");
        }
        let (key, value) = match (self.s.codec.key(k), self.s.codec.value(v)) {
            (Ok(k), Ok(v)) => (k, v),
            (Err(r), _) | (_, Err(r)) => return r,
        };
        let done = if nx {
            self.client.insert(key.bytes(), value.bytes())
        } else if xx {
            self.client.update(key.bytes(), value.bytes())
        } else {
            self.upsert(key.bytes(), value.bytes()).map(|_| true)
        };
        match done {
            Ok(true) => Reply::Simple("OK"),
            Ok(false) => Reply::Nil,
            Err(e) => store_err(e),
        }
    }

    /// Upsert, or insert-then-update for a store without it.
    fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        if self.s.caps.upserts {
            return self.client.upsert(key, value);
        }
        if self.client.insert(key, value)? {
            return Ok(true);
        }
        self.client.update(key, value).map(|_| false)
    }

    fn del(&mut self, keys: &[&[u8]]) -> Reply {
        if !self.s.caps.deletes {
            return Reply::err("this store cannot delete keys");
        }
        let mut n = 0;
        for k in keys {
            let key = match self.s.codec.key(k) {
                Ok(k) => k,
                Err(r) => return r,
            };
            match self.client.delete(key.bytes()) {
                Ok(true) => n += 1,
                Ok(false) => {}
                Err(e) => return store_err(e),
            }
        }
        Reply::Int(n)
    }

    fn exists(&mut self, keys: &[&[u8]]) -> Reply {
        let mut n = 0;
        for k in keys {
            match self.get(k) {
                Reply::Bulk(_) => n += 1,
                Reply::Nil => {}
                other => return other,
            }
        }
        Reply::Int(n)
    }

    fn mset(&mut self, pairs: &[&[u8]]) -> Reply {
        // Every pair is checked before anything is written.
        let mut encoded = Vec::with_capacity(pairs.len() / 2);
        for p in pairs.chunks_exact(2) {
            match (self.s.codec.key(p[0]), self.s.codec.value(p[1])) {
                (Ok(k), Ok(v)) => encoded.push((k, v)),
                (Err(r), _) | (_, Err(r)) => return r,
            }
        }
        for (k, v) in &encoded {
            if let Err(e) = self.upsert(k.bytes(), v.bytes()) {
                return store_err(e);
            }
        }
        Reply::Simple("OK")
    }

    fn incr(&mut self, k: &[u8], by: i64) -> Reply {
        let key = match self.s.codec.key(k) {
            Ok(k) => k,
            Err(r) => return r,
        };
        let stripe = key
            .bytes()
            .iter()
            .fold(0usize, |h, &b| h.wrapping_mul(31).wrapping_add(b as usize));
        let shared = self.s.shared.clone();
        let _held = shared.incr[stripe % INCR_STRIPES]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let old: i128 = match self.client.get(key.bytes(), &mut self.s.value) {
            Ok(false) => 0,
            Ok(true) => {
                let shown = self.s.codec.show(&self.s.value);
                match std::str::from_utf8(&shown)
                    .ok()
                    .and_then(|s| s.parse::<i128>().ok())
                {
                    Some(n) => n,
                    None => return Reply::err("value is not an integer or out of range"),
                }
            }
            Err(e) => return store_err(e),
        };
        let new = old + i128::from(by);
        let lowest = if self.s.codec == Codec::Words {
            0
        } else {
            i128::from(i64::MIN)
        };
        let highest = if self.s.codec == Codec::Words {
            i128::from(u64::MAX)
        } else {
            i128::from(i64::MAX)
        };
        if new < lowest || new > highest {
            return Reply::err("increment or decrement would overflow");
        }
        let text = new.to_string();
        let value = match self.s.codec.value(text.as_bytes()) {
            Ok(v) => v,
            Err(r) => return r,
        };
        match self.upsert(key.bytes(), value.bytes()) {
            Ok(_) => Reply::Int(i64::try_from(new).unwrap_or(i64::MAX)),
            Err(e) => store_err(e),
        }
    }

    /// Pairs from `start`, at most `n`.
    fn pairs(&mut self, start: &[u8], n: usize) -> Result<Pairs, Reply> {
        if !self.s.caps.scans {
            return Err(Reply::err("this store cannot scan"));
        }
        let mut out = Vec::new();
        self.client.scan(start, n, &mut out).map_err(store_err)?;
        Ok(out)
    }

    fn dbsize(&mut self) -> Reply {
        let mut start = match self.s.codec.start_of(b"0") {
            Ok(s) => s,
            Err(r) => return r,
        };
        let mut n: i64 = 0;
        loop {
            let batch = match self.pairs(&start, DBSIZE_BATCH) {
                Ok(b) => b,
                Err(r) => return r,
            };
            n += batch.len() as i64;
            let Some((last, _)) = batch.last() else { break };
            if batch.len() < DBSIZE_BATCH {
                break;
            }
            match successor(last) {
                Some(next) => start = next,
                None => break,
            }
        }
        Reply::Int(n)
    }

    fn scan(&mut self, rest: &[&[u8]]) -> Reply {
        let Some((cursor, opts)) = rest.split_first() else {
            return arity("SCAN");
        };
        let mut count = DEFAULT_SCAN_COUNT;
        let mut i = 0;
        while i < opts.len() {
            let opt = String::from_utf8_lossy(opts[i]).to_ascii_uppercase();
            match (opt.as_str(), opts.get(i + 1)) {
                ("COUNT", Some(n)) => match parse_count(n) {
                    Some(n) => count = n,
                    None => return Reply::err(format!("COUNT must be 1..={MAX_PAIRS}")),
                },
                ("MATCH", Some(p)) if *p == b"*" => {}
                ("MATCH", Some(_)) => {
                    return Reply::err("SCAN ... MATCH is not supported (only '*')")
                }
                ("TYPE", Some(t)) if t.eq_ignore_ascii_case(b"string") => {}
                ("TYPE", Some(_)) => {
                    return Reply::Array(vec![Reply::text("0"), Reply::Array(vec![])])
                }
                _ => return Reply::err("syntax error"),
            }
            i += 2;
        }
        let start = match self.s.codec.start_of(cursor) {
            Ok(s) => s,
            Err(r) => return r,
        };
        let mut batch = match self.pairs(&start, count + 1) {
            Ok(b) => b,
            Err(r) => return r,
        };
        let next = if batch.len() > count {
            batch.pop().map(|(k, _)| self.s.codec.cursor(&k))
        } else {
            None
        };
        let keys = batch
            .iter()
            .map(|(k, _)| Reply::Bulk(self.s.codec.show(k)))
            .collect();
        Reply::Array(vec![
            Reply::Bulk(next.unwrap_or_else(|| b"0".to_vec())),
            Reply::Array(keys),
        ])
    }

    fn range(&mut self, rest: &[&[u8]]) -> Reply {
        let (lo, hi, limit) = match rest {
            [lo, hi] => (lo, hi, DEFAULT_RANGE_LIMIT),
            [lo, hi, word, n] if word.eq_ignore_ascii_case(b"LIMIT") => match parse_count(n) {
                Some(n) => (lo, hi, n),
                None => return Reply::err(format!("LIMIT must be 1..={MAX_PAIRS}")),
            },
            _ => return arity("XSTORE.RANGE"),
        };
        let (lo, hi) = match (self.s.codec.key(lo), self.s.codec.key(hi)) {
            (Ok(l), Ok(h)) => (l, h),
            (Err(r), _) | (_, Err(r)) => return r,
        };
        let batch = match self.pairs(lo.bytes(), limit) {
            Ok(b) => b,
            Err(r) => return r,
        };
        let mut out = Vec::new();
        for (k, v) in batch
            .into_iter()
            .take_while(|(k, _)| k.as_slice() < hi.bytes())
        {
            out.push(Reply::Bulk(self.s.codec.show(&k)));
            out.push(Reply::Bulk(self.s.codec.show(&v)));
        }
        Reply::Array(out)
    }

    fn info(&self) -> Reply {
        let f = self.client.figures();
        let text = format!(
            "# Server\r\nredis_version:7.0.0\r\nxstore_version:{}\r\nredis_mode:standalone\r\n\
             backend_system:{}\r\nbackend_url:{}\r\n\r\n# Keyspace\r\n# Backend\r\n\
             key_bytes:{}..{}\r\nvalue_bytes:{}..{}\r\nround_trips:{}\r\nrpcs:{}\r\n",
            env!("CARGO_PKG_VERSION"),
            self.s.shared.system,
            self.s.shared.backend,
            self.s.caps.key_len.0,
            self.s.caps.key_len.1,
            self.s.caps.value_len.0,
            self.s.caps.value_len.1,
            f.counters.round_trips,
            f.counters.rpcs,
        );
        Reply::Bulk(text.into_bytes())
    }
}

/// The smallest key after `k` in byte order (`k` followed by a zero
/// byte), or for 8-byte words the next word; `None` after the last.
fn successor(k: &[u8]) -> Option<Vec<u8>> {
    if let Ok(w) = <[u8; 8]>::try_from(k) {
        return u64::from_be_bytes(w)
            .checked_add(1)
            .map(|n| n.to_be_bytes().to_vec());
    }
    let mut next = k.to_vec();
    next.push(0);
    Some(next)
}

/// `name` upper-cased in `buf`, if it is ASCII and fits.
fn upper_ascii<'a>(name: &[u8], buf: &'a mut [u8; 16]) -> Option<&'a str> {
    let upper = buf.get_mut(..name.len())?;
    if !name.is_ascii() {
        return None;
    }
    upper.copy_from_slice(name);
    upper.make_ascii_uppercase();
    std::str::from_utf8(upper).ok()
}

fn parse_count(n: &[u8]) -> Option<usize> {
    std::str::from_utf8(n)
        .ok()?
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_PAIRS).contains(n))
}

fn arity(name: &str) -> Reply {
    Reply::err(format!(
        "wrong number of arguments for '{}' command",
        name.to_ascii_lowercase()
    ))
}

fn unknown(name: &str, rest: &[&[u8]]) -> Reply {
    let args: Vec<String> = rest
        .iter()
        .take(8)
        .map(|a| format!("'{}'", String::from_utf8_lossy(&a[..a.len().min(64)])))
        .collect();
    Reply::err(format!(
        "unknown command '{}', with args beginning with: {}",
        &name[..name.len().min(64)],
        args.join(" ")
    ))
}

/// The commands this front end answers (COMMAND, COMMAND COUNT).
pub const COMMANDS: [(&str, i64); 25] = [
    ("ping", -1),
    ("echo", 2),
    ("quit", 1),
    ("auth", -2),
    ("hello", -1),
    ("select", 2),
    ("client", -2),
    ("get", 2),
    ("set", -3),
    ("del", -2),
    ("unlink", -2),
    ("exists", -2),
    ("mget", -2),
    ("mset", -3),
    ("incr", 2),
    ("decr", 2),
    ("incrby", 3),
    ("decrby", 3),
    ("dbsize", 1),
    ("scan", -2),
    ("xstore.range", -3),
    ("info", -1),
    ("command", -1),
    ("config", -2),
    ("unknown", 0),
];

fn command(rest: &[&[u8]]) -> Reply {
    let listed = &COMMANDS[..COMMANDS.len() - 1];
    match rest
        .first()
        .map(|s| String::from_utf8_lossy(s).to_ascii_uppercase())
    {
        None => Reply::Array(
            listed
                .iter()
                .map(|(name, arity)| {
                    Reply::Array(vec![
                        Reply::text(*name),
                        Reply::Int(*arity),
                        Reply::Array(Vec::new()),
                        Reply::Int(i64::from(*arity != 1)),
                        Reply::Int(i64::from(*arity != 1)),
                        Reply::Int(1),
                    ])
                })
                .collect(),
        ),
        Some(s) if s == "COUNT" => Reply::Int(listed.len() as i64),
        // redis-cli asks for the docs at start; it does without them.
        Some(s) if s == "DOCS" || s == "INFO" => Reply::Map(Vec::new()),
        Some(s) => Reply::err(format!("unknown subcommand '{s}' of COMMAND")),
    }
}

fn config(rest: &[&[u8]]) -> Reply {
    match rest {
        [sub, pattern] if sub.eq_ignore_ascii_case(b"GET") => {
            // What redis-benchmark and clients ask about; nothing else is
            // configurable here.
            let known = [("save", ""), ("appendonly", "no"), ("databases", "1")];
            let p = String::from_utf8_lossy(pattern).to_ascii_lowercase();
            Reply::Map(
                known
                    .iter()
                    .filter(|(k, _)| p == "*" || p == *k)
                    .map(|(k, v)| (Reply::text(*k), Reply::text(*v)))
                    .collect(),
            )
        }
        [sub, ..] if sub.eq_ignore_ascii_case(b"SET") => {
            Reply::err("CONFIG SET is not supported: configure the store's server")
        }
        _ => Reply::err("CONFIG takes GET pattern"),
    }
}
