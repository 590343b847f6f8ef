//! The shell's commands against a model store (a `BTreeMap` of bytes):
//! quoting, scans with their limit and next key, import and export round
//! trips, on random keys and values that need every kind of quoting.

use std::collections::BTreeMap;

use kv::KvError;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::command::{execute, SCAN_DEFAULT};
use super::quote::{self, Sep};
use super::{Backend, Pair};

/// The model: an ordered map; with `words`, 8-byte keys and values only,
/// refused by the contract's own checks as a u64 system refuses them.
#[derive(Default)]
struct Model {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    words: bool,
}

impl Model {
    fn check(&self, key: &[u8], value: Option<&[u8]>) -> Result<(), KvError> {
        if self.words {
            kv::key_word(key)?;
            if let Some(v) = value {
                kv::value_word(v)?;
            }
        }
        Ok(())
    }
}

impl Backend for Model {
    fn words(&self) -> bool {
        self.words
    }
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        self.check(key, None)?;
        Ok(self.map.get(key).cloned())
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.check(key, Some(value))?;
        self.map.insert(key.to_vec(), value.to_vec());
        Ok(())
    }
    fn delete(&mut self, key: &[u8]) -> Result<bool, KvError> {
        self.check(key, None)?;
        Ok(self.map.remove(key).is_some())
    }
    fn scan(&mut self, start: &[u8], n: usize, out: &mut Vec<Pair>) -> Result<(), KvError> {
        self.check(start, None)?;
        out.extend(
            self.map
                .range(start.to_vec()..)
                .take(n)
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        Ok(())
    }
    fn stats(&mut self) -> Result<String, String> {
        Ok(format!("keys={}", self.map.len()))
    }
}

/// Bytes that need each kind of quoting: spaces, quotes, commas, tabs,
/// a `0x` start, non-UTF-8 bytes; sometimes empty (values only).
fn bytes(rng: &mut StdRng, empty: bool) -> Vec<u8> {
    const PIECES: &[&[u8]] = &[
        b"a",
        b"b",
        b"user:",
        b" ",
        b"\"",
        b"'",
        b",",
        b"\t",
        b"0x",
        b"=",
        b"\xff",
        b"\x00",
        b"caf\xc3\xa9",
    ];
    let n = rng.random_range(usize::from(!empty)..5);
    (0..n)
        .flat_map(|_| PIECES[rng.random_range(0..PIECES.len())].iter().copied())
        .collect()
}

fn run(b: &mut Model, line: &str) -> Vec<String> {
    let answer = execute(b, line);
    assert!(!answer.failed, "{line}: {:?}", answer.lines);
    answer.lines
}

/// The pairs of a scan's answer lines, and the key its last line names.
fn read_scan(lines: &[String]) -> (Vec<Pair>, Option<Vec<u8>>) {
    let mut pairs = Vec::new();
    let mut next = None;
    for l in lines {
        if l == "(no pairs)" {
            continue;
        }
        if let Some(rest) = l.strip_prefix("-- more: scan ") {
            let w = quote::split(rest, Sep::Space).unwrap();
            next = Some(w[0].bytes.clone());
            continue;
        }
        let w = quote::split(l, Sep::Space).unwrap();
        assert_eq!(w.len(), 2, "{l}");
        pairs.push((w[0].bytes.clone(), w[1].bytes.clone()));
    }
    (pairs, next)
}

#[test]
fn random_byte_strings_round_trip_through_lines_scans_and_files() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut b = Model::default();
    let mut model = BTreeMap::new();
    let show = |x: &[u8]| quote::show(x, Sep::Space);
    for _ in 0..400 {
        let k = bytes(&mut rng, false);
        match rng.random_range(0..4) {
            0 | 1 => {
                let v = bytes(&mut rng, true);
                assert_eq!(
                    run(&mut b, &format!("put {} {}", show(&k), show(&v))),
                    ["OK"]
                );
                model.insert(k, v);
            }
            2 => {
                let want = model.remove(&k).map_or("NOT_FOUND", |_| "OK");
                assert_eq!(run(&mut b, &format!("del {}", show(&k))), [want]);
            }
            _ => {
                let got = run(&mut b, &format!("get {}", show(&k)));
                let want = model.get(&k).map_or("NOT_FOUND".into(), |v| show(v));
                assert_eq!(got, [want], "get {k:?}");
            }
        }
    }
    assert_eq!(b.map, model, "seed {seed}");
    // Paging through every pair with scans of a random limit.
    let limit = rng.random_range(1..20);
    let (mut all, mut at) = (Vec::new(), Some(Vec::new()));
    while let Some(k) = at {
        let (pairs, next) = read_scan(&run(&mut b, &format!("scan {} {limit}", show(&k))));
        assert!(pairs.len() == limit || next.is_none(), "{pairs:?}");
        all.extend(pairs);
        at = next;
    }
    assert_eq!(all, model.clone().into_iter().collect::<Vec<_>>());
    // Export to TSV and CSV, import each into an empty store: the same.
    let dir = tempfile::tempdir().unwrap();
    for name in ["pairs.tsv", "pairs.csv"] {
        let path = dir.path().join(name);
        let p = path.to_str().unwrap();
        let out = run(&mut b, &format!("export {}", show(p.as_bytes())));
        assert_eq!(out, [format!("OK exported {} pairs to {p}", model.len())]);
        let mut fresh = Model::default();
        let out = run(&mut fresh, &format!("import {}", show(p.as_bytes())));
        assert!(
            out[0].starts_with(&format!("OK imported {} pairs", model.len())),
            "{out:?}"
        );
        assert_eq!(fresh.map, model, "{name}, seed {seed}");
    }
}

#[test]
fn scans_have_a_limit_and_name_the_next_key() {
    let mut b = Model {
        words: true,
        ..Model::default()
    };
    for k in 1..=250u64 {
        run(&mut b, &format!("put {k} {}", k * 10));
    }
    assert_eq!(
        run(&mut b, "scan 5 2"),
        ["5 50", "6 60", "-- more: scan 7 2"]
    );
    assert_eq!(run(&mut b, "scan 249 5"), ["249 2490", "250 2500"]);
    assert_eq!(run(&mut b, "scan 251"), ["(no pairs)"]);
    let all = run(&mut b, "scan");
    assert_eq!(all.len(), SCAN_DEFAULT + 1);
    assert_eq!(
        all[SCAN_DEFAULT],
        format!("-- more: scan {} 100", SCAN_DEFAULT + 1)
    );
    let too_many = execute(&mut b, "scan 0 10001");
    assert!(too_many.failed && too_many.lines[0].contains("from 1 to 10000"));
    // Bytes on a u64 system: 8 of them are a key, others the contract's
    // refusal, and a word that is not a number says why.
    assert_eq!(run(&mut b, "get 0x0000000000000005"), ["50"]);
    let short = execute(&mut b, "get \"abc\"");
    assert!(
        short.failed && short.lines[0].contains("exactly 8 bytes"),
        "{short:?}"
    );
    let word = execute(&mut b, "put abc 1");
    assert!(
        word.failed && word.lines[0].contains("not a decimal u64"),
        "{word:?}"
    );
}

#[test]
fn an_import_reports_bad_lines_by_number_and_writes_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let tsv = dir.path().join("in.tsv");
    std::fs::write(&tsv, "1\t10\n2 20\n3\t30\t\nx\t1\n4\t40\r\n\"5\"\t50\n").unwrap();
    let mut b = Model {
        words: true,
        ..Model::default()
    };
    let answer = execute(&mut b, &format!("import {}", tsv.display()));
    assert!(answer.failed);
    let lines = &answer.lines;
    assert!(lines[0].starts_with("ERR line 2: 1 fields"), "{lines:?}");
    assert!(lines[1].starts_with("ERR line 3: 3 fields"), "{lines:?}");
    assert!(
        lines[2].starts_with("ERR line 4: key 'x' is not a decimal u64"),
        "{lines:?}"
    );
    assert!(lines[3].starts_with("ERR line 6: bad input"), "{lines:?}");
    assert!(lines[4].starts_with("ERR imported 2 pairs"), "{lines:?}");
    let keys: Vec<u64> = b.map.keys().map(|k| kv::key_word(k).unwrap()).collect();
    assert_eq!(keys, [1, 4]);
    // An export of a range, as CSV.
    let csv = dir.path().join("out.csv");
    run(&mut b, &format!("export {} 2 5", csv.display()));
    assert_eq!(std::fs::read_to_string(&csv).unwrap(), "4,40\n");
    let missing = execute(&mut b, "import /nonexistent/file.tsv");
    assert!(missing.failed && missing.lines[0].starts_with("ERR /nonexistent"));
}
