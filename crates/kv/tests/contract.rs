//! The contract's adapters and encoding: `Words` and `Bytes` keep a
//! model's answers (against a BTreeMap), encoded keys keep u64 order,
//! wrong lengths and bad options are typed errors.

use std::collections::BTreeMap;

use kv::{
    key_bytes, key_word, Bytes, Capabilities, ClientFigures, ErrorKind, KvClient, KvError, Options,
    Pending, Started, WordClient, WordWrite, Words, Write,
};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};

/// A u64 store over a BTreeMap, with deletes and a one-deep pipeline (its
/// ticket is a system type, so finishing exercises the downcast).
#[derive(Default)]
struct MapClient {
    map: BTreeMap<u64, u64>,
}

/// MapClient's ticket: the answer, computed at start.
struct MapTicket(bool);

impl Started for MapTicket {
    fn is_ready(&self) -> bool {
        true
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

impl WordClient for MapClient {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            deletes: true,
            upserts: true,
            pipelined_writes: true,
            ..Capabilities::words()
        }
    }
    fn get(&mut self, key: u64) -> Result<Option<u64>, KvError> {
        Ok(self.map.get(&key).copied())
    }
    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), KvError> {
        out.extend(self.map.range(start..).take(n).map(|(&k, &v)| (k, v)));
        Ok(())
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        if self.map.contains_key(&key) {
            return Ok(false);
        }
        self.map.insert(key, value);
        Ok(true)
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        match self.map.get_mut(&key) {
            Some(v) => {
                *v = value;
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn delete(&mut self, key: u64) -> Result<bool, KvError> {
        Ok(self.map.remove(&key).is_some())
    }
    fn start_write(&mut self, w: WordWrite) -> Result<Pending, KvError> {
        let b = match w {
            WordWrite::Insert { key, value } => self.insert(key, value)?,
            WordWrite::Update { key, value } => self.update(key, value)?,
            WordWrite::Upsert { key, value } => self.upsert(key, value)?,
            WordWrite::Delete { key } => self.delete(key)?,
        };
        Ok(Pending::Started(Box::new(MapTicket(b))))
    }
    fn finish_write(&mut self, p: Pending) -> Result<bool, KvError> {
        match p {
            Pending::Done(b) => Ok(b),
            Pending::Started(s) => Ok(kv::ticket::<MapTicket>(s)?.0),
        }
    }
    fn figures(&self) -> ClientFigures {
        ClientFigures::default()
    }
}

/// One random operation through `Bytes(Words(MapClient))` and the same on
/// the model; the answers must agree.
fn step(rng: &mut rand::rngs::StdRng, c: &mut dyn WordClient, model: &mut BTreeMap<u64, u64>) {
    // A small key space, so operations hit existing keys often.
    let key = rng.random_range(0..64u64);
    let value = rng.random::<u64>();
    match rng.random_range(0..8) {
        0 => assert_eq!(c.get(key).unwrap(), model.get(&key).copied(), "get {key}"),
        1 => {
            let n = rng.random_range(0..10);
            let mut out = vec![(u64::MAX, 0)];
            c.scan(key, n, &mut out).unwrap();
            let want: Vec<_> = std::iter::once((u64::MAX, 0))
                .chain(model.range(key..).take(n).map(|(&k, &v)| (k, v)))
                .collect();
            assert_eq!(out, want, "scan {key} {n} appends in key order");
        }
        2 => {
            let new = !model.contains_key(&key);
            if new {
                model.insert(key, value);
            }
            assert_eq!(c.insert(key, value).unwrap(), new, "insert {key}");
        }
        3 => {
            let present = model.contains_key(&key);
            if present {
                model.insert(key, value);
            }
            assert_eq!(c.update(key, value).unwrap(), present, "update {key}");
        }
        4 => {
            let new = model.insert(key, value).is_none();
            assert_eq!(c.upsert(key, value).unwrap(), new, "upsert {key}");
        }
        5 => {
            let present = model.remove(&key).is_some();
            assert_eq!(c.delete(key).unwrap(), present, "delete {key}");
        }
        _ => {
            let new = !model.contains_key(&key);
            if new {
                model.insert(key, value);
            }
            let p = c.start_write(WordWrite::Insert { key, value }).unwrap();
            assert!(p.is_ready());
            assert_eq!(c.finish_write(p).unwrap(), new, "pipelined insert {key}");
        }
    }
}

#[test]
fn words_and_bytes_round_trip_a_model() {
    let seed = testkit::seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut words = Words(MapClient::default());
    let mut model = BTreeMap::new();
    for _ in 0..5_000 {
        step(&mut rng, &mut Bytes(&mut words), &mut model);
    }
    assert_eq!(words.0.map, model, "the store ends as the model");
}

#[test]
fn words_hands_out_its_inner_client() {
    let mut words = Words(MapClient::default());
    words.insert(&key_bytes(5), &7u64.to_be_bytes()).unwrap();
    let inner = words.words().expect("a word system has a word path");
    assert_eq!(inner.get(5).unwrap(), Some(7));
    let mut v = vec![1, 2, 3];
    assert!(words.get(&key_bytes(5), &mut v).unwrap());
    assert_eq!(v, 7u64.to_be_bytes(), "get replaces the buffer's contents");
    assert!(!words.get(&key_bytes(6), &mut v).unwrap());
}

#[test]
fn wrong_lengths_are_bad_input() {
    let mut words = Words(MapClient::default());
    let seven = [0u8; 7];
    let nine = [0u8; 9];
    let eight = [0u8; 8];
    let mut v = Vec::new();
    let mut out = Vec::new();
    let errors = [
        words.get(&seven, &mut v).unwrap_err(),
        words.get(&[], &mut v).unwrap_err(),
        words.scan(&nine, 3, &mut out).unwrap_err(),
        words.insert(&eight, &seven).unwrap_err(),
        words.insert(&nine, &eight).unwrap_err(),
        words.update(&eight, &nine).unwrap_err(),
        words.upsert(&seven, &eight).unwrap_err(),
        words.delete(&nine).unwrap_err(),
        words
            .start_write(Write::Update {
                key: &eight,
                value: &seven,
            })
            .unwrap_err(),
    ];
    for e in errors {
        assert_eq!(e.kind, ErrorKind::BadInput, "{e}");
    }
    assert!(words.0.map.is_empty(), "nothing written by a refused call");
    assert_eq!(key_word(&[1, 2]).unwrap_err().kind, ErrorKind::BadInput);
}

/// A byte client that breaks its own capabilities: 7-byte values.
struct ShortValues;

impl KvClient for ShortValues {
    fn capabilities(&self) -> Capabilities {
        Capabilities::words()
    }
    fn get(&mut self, _: &[u8], value: &mut Vec<u8>) -> Result<bool, KvError> {
        value.clear();
        value.extend_from_slice(&[0; 7]);
        Ok(true)
    }
    fn scan(
        &mut self,
        _: &[u8],
        _: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), KvError> {
        out.push((vec![0; 8], vec![0; 7]));
        Ok(())
    }
    fn insert(&mut self, _: &[u8], _: &[u8]) -> Result<bool, KvError> {
        Ok(true)
    }
    fn update(&mut self, _: &[u8], _: &[u8]) -> Result<bool, KvError> {
        Ok(true)
    }
    fn upsert(&mut self, _: &[u8], _: &[u8]) -> Result<bool, KvError> {
        Ok(true)
    }
    fn delete(&mut self, _: &[u8]) -> Result<bool, KvError> {
        Ok(true)
    }
    fn figures(&self) -> ClientFigures {
        ClientFigures::default()
    }
}

#[test]
fn bytes_calls_a_wrong_length_answer_corrupt() {
    let mut c = ShortValues;
    assert!(c.words().is_none());
    let mut b = Bytes(&mut c);
    assert_eq!(b.get(1).unwrap_err().kind, ErrorKind::Corrupt);
    let mut out = Vec::new();
    assert_eq!(b.scan(1, 1, &mut out).unwrap_err().kind, ErrorKind::Corrupt);
}

#[test]
fn a_ticket_finished_on_another_client_is_an_error() {
    struct Other;
    impl Started for Other {
        fn is_ready(&self) -> bool {
            false
        }
        fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
            self
        }
    }
    let mut c = MapClient::default();
    let p = Pending::Started(Box::new(Other));
    assert!(!p.is_ready());
    assert_eq!(c.finish_write(p).unwrap_err().kind, ErrorKind::Failed);
    // The default path refuses a system ticket too.
    let mut s = ShortValues;
    let e = s.finish_write(Pending::Started(Box::new(MapTicket(true))));
    assert_eq!(e.unwrap_err().kind, ErrorKind::Failed);
}

#[test]
fn options_parse_and_refuse() {
    let mut o = Options::new();
    o.parse_one("leaf-slots=16").unwrap();
    o.set("cache", "lru").unwrap();
    o.parse_one("durable = true").unwrap();
    assert_eq!(o.get_usize("leaf-slots", 32).unwrap(), 16);
    assert_eq!(o.get_u64("absent", 9).unwrap(), 9);
    assert_eq!(o.get_str("cache"), Some("lru"));
    assert!(o.get_bool("durable", false).unwrap());
    let bad = [
        o.get_usize("cache", 1).unwrap_err(),
        o.get_bool("leaf-slots", false).unwrap_err(),
        Options::new().parse_one("no-equals").unwrap_err(),
        Options::new().parse_one("=5").unwrap_err(),
        Options::new().set("x", "y".repeat(5000)).unwrap_err(),
        {
            let mut n = Options::new();
            n.set("n", -3).unwrap();
            n.get_u64("n", 0).unwrap_err()
        },
    ];
    for e in bad {
        assert_eq!(e.kind, ErrorKind::BadInput, "{e}");
    }
    assert!(bad_named(
        "leaf-slots",
        &o.get_bool("leaf-slots", false).unwrap_err()
    ));
    assert_eq!(o.iter().count(), 3);
}

fn bad_named(name: &str, e: &KvError) -> bool {
    e.message.contains(name)
}

#[test]
fn timed_handler_times_and_limits() {
    struct Echo;
    impl fabric::RpcHandler for Echo {
        fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
            std::thread::sleep(std::time::Duration::from_millis(2));
            reply.extend_from_slice(request);
        }
    }
    let h = std::sync::Arc::new(kv::local::TimedHandler::new(
        std::sync::Arc::new(Echo),
        Some(1),
    ));
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let h = h.clone();
            std::thread::spawn(move || {
                let mut reply = Vec::new();
                fabric::RpcHandler::handle(&*h, &[i], &mut reply);
                assert_eq!(reply, [i]);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(
        h.busy_ns() >= 6_000_000,
        "three 2 ms calls: {} ns",
        h.busy_ns()
    );
    assert_eq!(h.server_time().worker_ns, h.busy_ns());
}

proptest! {
    #[test]
    fn encoded_keys_keep_u64_order(a: u64, b: u64) {
        prop_assert_eq!(key_bytes(a).cmp(&key_bytes(b)), a.cmp(&b));
        prop_assert_eq!(key_word(&key_bytes(a)).unwrap(), a);
    }

    #[test]
    fn upsert_through_bytes_matches_a_map(ops in proptest::collection::vec((0u64..16, any::<u64>()), 0..64)) {
        let mut words = Words(MapClient::default());
        let mut model = BTreeMap::new();
        for (k, v) in ops {
            let new = model.insert(k, v).is_none();
            prop_assert_eq!(words.upsert(&key_bytes(k), &v.to_be_bytes()).unwrap(), new);
        }
        prop_assert_eq!(&words.0.map, &model);
    }
}

#[test]
fn with_words_takes_the_word_path_when_there_is_one() {
    let mut words = Words(MapClient::default());
    words.0.map.insert(3, 4);
    assert_eq!(kv::with_words(&mut words, |w| w.get(3)).unwrap(), Some(4));
    // No word path: the same call goes through the byte contract, which
    // here answers 7 bytes, so the u64 view calls it corrupt.
    let e = kv::with_words(&mut ShortValues, |w| w.get(3)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt);
    assert_eq!(words.counters(), words.figures().counters);
}
