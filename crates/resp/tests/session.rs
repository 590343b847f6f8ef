//! Sessions against a map-backed client whose writes in flight land only
//! when finished (as a remote store's do): pipelined batches must answer
//! in order and every request must see the writes before it; refusals
//! are one error each; a random stream of commands matches a `BTreeMap`
//! (seeded: `XSTORE_SEED` replays).

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kv::{Capabilities, ClientFigures, KvClient, KvError, Pending, Started, Write};
use resp::commands::After;
use resp::{Session, Shared};

/// A u64 store in a map; writes started are applied when finished.
#[derive(Default)]
struct MapClient {
    map: BTreeMap<u64, u64>,
    /// The number of keys of each `get_many`, when watched.
    runs: Option<Arc<Mutex<Vec<usize>>>>,
}

struct Ticket(u64, u64);

impl Started for Ticket {
    fn is_ready(&self) -> bool {
        true
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

fn word(b: &[u8]) -> Result<u64, KvError> {
    kv::key_word(b)
}

impl KvClient for MapClient {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            deletes: true,
            upserts: true,
            pipelined_writes: true,
            ..Capabilities::words()
        }
    }
    fn get(&mut self, key: &[u8], value: &mut Vec<u8>) -> Result<bool, KvError> {
        value.clear();
        Ok(match self.map.get(&word(key)?) {
            Some(v) => {
                value.extend_from_slice(&v.to_be_bytes());
                true
            }
            None => false,
        })
    }
    fn scan(
        &mut self,
        start: &[u8],
        n: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), KvError> {
        for (k, v) in self.map.range(word(start)?..).take(n) {
            out.push((k.to_be_bytes().to_vec(), v.to_be_bytes().to_vec()));
        }
        Ok(())
    }
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        let k = word(key)?;
        if self.map.contains_key(&k) {
            return Ok(false);
        }
        self.map.insert(k, word(value)?);
        Ok(true)
    }
    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        let k = word(key)?;
        if !self.map.contains_key(&k) {
            return Ok(false);
        }
        self.map.insert(k, word(value)?);
        Ok(true)
    }
    fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        Ok(self.map.insert(word(key)?, word(value)?).is_none())
    }
    fn delete(&mut self, key: &[u8]) -> Result<bool, KvError> {
        Ok(self.map.remove(&word(key)?).is_some())
    }
    fn get_many(&mut self, keys: &[&[u8]], answer: &mut kv::GetAnswer<'_>) {
        if let Some(runs) = &self.runs {
            runs.lock().unwrap().push(keys.len());
        }
        for (i, k) in keys.iter().enumerate() {
            match word(k) {
                Ok(k) => {
                    let v = self.map.get(&k).map(|v| v.to_be_bytes());
                    answer(i, Ok(v.as_ref().map(|v| &v[..])));
                }
                Err(e) => answer(i, Err(e)),
            }
        }
    }
    fn start_write(&mut self, w: Write<'_>) -> Result<Pending, KvError> {
        match w {
            Write::Upsert { key, value } => {
                Ok(Pending::Started(Box::new(Ticket(word(key)?, word(value)?))))
            }
            other => panic!("only upserts are pipelined: {other:?}"),
        }
    }
    fn finish_write(&mut self, p: Pending) -> Result<bool, KvError> {
        match p {
            Pending::Started(t) => {
                let t = t.into_any().downcast::<Ticket>().expect("our ticket");
                Ok(self.map.insert(t.0, t.1).is_none())
            }
            Pending::Done(b) => Ok(b),
        }
    }
    fn figures(&self) -> ClientFigures {
        ClientFigures::default()
    }
}

fn session(token: Option<&str>) -> Session {
    Session::new(
        Box::<MapClient>::default(),
        Shared::new(token.map(String::from), "map", "test://"),
    )
}

fn req(line: &str) -> Vec<Vec<u8>> {
    line.split(' ').map(|w| w.as_bytes().to_vec()).collect()
}

/// The RESP2 replies of a batch, as text.
fn batch(s: &mut Session, lines: &[&str]) -> (String, After) {
    let owned: Vec<_> = lines.iter().map(|l| req(l)).collect();
    let args: Vec<Vec<&[u8]>> = owned
        .iter()
        .map(|r| r.iter().map(Vec::as_slice).collect())
        .collect();
    let reqs: Vec<&[&[u8]]> = args.iter().map(Vec::as_slice).collect();
    let mut out = Vec::new();
    let after = s.execute_batch(&reqs, &mut out);
    (String::from_utf8(out).unwrap(), after)
}

#[test]
fn a_pipelined_batch_answers_in_order_and_sees_its_own_writes() {
    let mut s = session(None);
    let (out, after) = batch(
        &mut s,
        &[
            "SET 1 10",
            "SET 2 20",
            "GET 1",
            "SET 1 11",
            "SET 3 30",
            "MGET 1 2 3",
            "QUIT",
            "SET 9 9",
        ],
    );
    assert_eq!(
        out,
        "+OK\r\n+OK\r\n$2\r\n10\r\n+OK\r\n+OK\r\n*3\r\n$2\r\n11\r\n$2\r\n20\r\n$2\r\n30\r\n+OK\r\n"
    );
    assert_eq!(after, After::Close);
    let (out, _) = batch(&mut s, &["GET 9", "DBSIZE", "SET x 1", "SET 4 y", "GET 4"]);
    assert!(
        out.starts_with("$-1\r\n:3\r\n-ERR this store holds u64"),
        "{out}"
    );
    assert!(
        out.ends_with("$-1\r\n"),
        "a refused SET wrote nothing: {out}"
    );
}

#[test]
fn a_pipelined_run_of_gets_is_one_store_batch_answered_in_order() {
    let runs = Arc::new(Mutex::new(Vec::new()));
    let client = MapClient {
        runs: Some(runs.clone()),
        ..MapClient::default()
    };
    let mut s = Session::new(Box::new(client), Shared::new(None, "map", "test://"));
    let (out, _) = batch(
        &mut s,
        &[
            "SET 1 10", "SET 2 20", "GET 1", "GET 2", "GET 3", "GET x", "GET 1", "SET 1 11",
            "get 1", "SET 3 30", "GET 3", "GET 2", "PING", "GET 3",
        ],
    );
    assert_eq!(
        out,
        "+OK\r\n+OK\r\n$2\r\n10\r\n$2\r\n20\r\n$-1\r\n\
         -ERR this store holds u64 keys and values: a key is a decimal number 0..2^64-1\r\n\
         $2\r\n10\r\n+OK\r\n$2\r\n11\r\n+OK\r\n$2\r\n30\r\n$2\r\n20\r\n+PONG\r\n$2\r\n30\r\n"
    );
    // GET 1-3 together; a malformed key splits a run; a SET or a PING ends one.
    assert_eq!(*runs.lock().unwrap(), vec![3, 1, 1, 2, 1]);
}

/// A store whose clients are fresh maps.
struct MapStore;

impl kv::Store for MapStore {
    fn client(&self) -> Result<Box<dyn KvClient>, KvError> {
        Ok(Box::<MapClient>::default())
    }
}

/// Reads from `conn` until `want` bytes came (or the peer closed).
fn read_n(conn: &mut std::net::TcpStream, want: usize) -> String {
    use std::io::Read;
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while got.len() < want {
        match conn.read(&mut chunk).expect("a reply within the timeout") {
            0 => break,
            n => got.extend_from_slice(&chunk[..n]),
        }
    }
    String::from_utf8(got).unwrap()
}

#[test]
fn the_event_loop_answers_a_pipelined_batch_split_across_reads_in_order() {
    use std::io::Write as _;
    use std::sync::atomic::{AtomicBool, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = AtomicBool::new(false);
    let shared = Shared::new(None, "map", "test://");
    let config = resp::FrontEndConfig {
        max_connections: 4,
        loops: 2,
    };
    std::thread::scope(|scope| {
        let server = scope.spawn(|| resp::serve(&listener, &MapStore, &shared, &config, &stop));
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut req = Vec::new();
        for args in [
            &["SET", "1", "10"][..],
            &["GET", "1"],
            &["GET", "2"],
            &["SET", "2", "20"],
            &["GET", "2"],
            &["GET", "1"],
        ] {
            req.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
            for a in args {
                req.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
            }
        }
        req.extend_from_slice(b"PING\r\nset 3 \"30\"\r\nGET 3\r\n");
        // Two writes, cut inside a request: the rest waits for its bytes.
        let cut = 20;
        c.write_all(&req[..cut]).unwrap();
        c.flush().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        c.write_all(&req[cut..]).unwrap();
        let want =
            "+OK\r\n$2\r\n10\r\n$-1\r\n+OK\r\n$2\r\n20\r\n$2\r\n10\r\n+PONG\r\n+OK\r\n$2\r\n30\r\n";
        assert_eq!(read_n(&mut c, want.len()), want);
        c.write_all(b"QUIT\r\nGET 1\r\n").unwrap();
        assert_eq!(read_n(&mut c, 100), "+OK\r\n", "QUIT answers, then closes");
        stop.store(true, Ordering::SeqCst);
        server.join().unwrap().unwrap();
    });
}

#[test]
fn without_the_token_only_auth_hello_and_quit_are_answered() {
    let mut s = session(Some("tok"));
    let (out, _) = batch(
        &mut s,
        &["SET 1 1", "GET 1", "AUTH nope", "HELLO 3 AUTH default nope"],
    );
    assert_eq!(out.matches("-NOAUTH").count(), 2, "{out}");
    assert!(out.contains("-WRONGPASS"), "{out}");
    let (out, _) = batch(&mut s, &["AUTH tok", "SET 1 1", "GET 1"]);
    assert_eq!(out, "+OK\r\n+OK\r\n$1\r\n1\r\n");
    // RESP3 after HELLO 3: a missing value is `_`.
    let (out, _) = batch(&mut s, &["HELLO 3", "GET 2"]);
    assert!(out.starts_with('%') && out.ends_with("_\r\n"), "{out}");
}

#[test]
fn random_commands_match_a_map() {
    let seed = testkit::seed();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
    let mut s = session(None);
    let mut model: BTreeMap<u64, u64> = BTreeMap::new();
    for round in 0..300 {
        // A batch of 1-8 commands over keys 0..20.
        let n = 1 + rand::Rng::random_range(&mut rng, 0..8);
        let mut lines = Vec::new();
        let mut want = String::new();
        for _ in 0..n {
            let k: u64 = rand::Rng::random_range(&mut rng, 0..20);
            let v: u64 = rand::Rng::random_range(&mut rng, 0..1000);
            match rand::Rng::random_range(&mut rng, 0..5) {
                0 => {
                    lines.push(format!("SET {k} {v}"));
                    model.insert(k, v);
                    want.push_str("+OK\r\n");
                }
                1 => {
                    lines.push(format!("GET {k}"));
                    match model.get(&k) {
                        Some(v) => want.push_str(&format!("${}\r\n{v}\r\n", v.to_string().len())),
                        None => want.push_str("$-1\r\n"),
                    }
                }
                2 => {
                    lines.push(format!("DEL {k}"));
                    let n = i64::from(model.remove(&k).is_some());
                    want.push_str(&format!(":{n}\r\n"));
                }
                3 => {
                    lines.push(format!("SET {k} {v} NX"));
                    match model.entry(k) {
                        std::collections::btree_map::Entry::Occupied(_) => want.push_str("$-1\r\n"),
                        std::collections::btree_map::Entry::Vacant(e) => {
                            e.insert(v);
                            want.push_str("+OK\r\n");
                        }
                    }
                }
                _ => {
                    lines.push(format!("INCR {k}"));
                    let n = model.entry(k).or_insert(0);
                    *n += 1;
                    want.push_str(&format!(":{n}\r\n"));
                }
            }
        }
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let (out, _) = batch(&mut s, &refs);
        assert_eq!(out, want, "seed {seed} round {round}: {lines:?}");
    }
}
