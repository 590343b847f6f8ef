//! `xstore resp`, the Redis-protocol front end, against a real `xstore
//! server`, driven by Redis's own tools: every command `redis-cli` can
//! send, and `redis-benchmark` pipelined. Needs `redis-cli` and
//! `redis-benchmark` (Debian: redis-tools, `.ci/redis-deps.sh`): the test
//! skips, saying so, without them, and fails instead under
//! `XSTORE_REQUIRE_REDIS=1` (CI).

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use coord::launch::{Launched, StopBy};
use support::ServerProcess;

const TOKEN: &str = "resp-test-token";

/// `redis-cli`'s path, or `None` after a line saying the test skips.
fn redis_tools() -> Option<()> {
    let found = ["redis-cli", "redis-benchmark"].iter().all(|t| {
        Command::new(t)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !found {
        let what = "no redis-cli/redis-benchmark: install redis-tools (.ci/redis-deps.sh)";
        if std::env::var("XSTORE_REQUIRE_REDIS").is_ok_and(|v| v == "1") {
            panic!("XSTORE_REQUIRE_REDIS=1 but {what}");
        }
        eprintln!("skipped: {what}");
        return None;
    }
    Some(())
}

/// A running `xstore resp` in front of a server; both stopped on drop.
struct FrontEnd {
    _server: Option<ServerProcess>,
    _resp: Launched,
    port: String,
}

fn front_end() -> FrontEnd {
    let env = [("XSTORE_TOKEN", TOKEN)];
    let server = ServerProcess::start_with(&["--keys", "1000"], &env);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xstore"));
    cmd.args(["resp", "--listen", "127.0.0.1:0", "--backend", &server.tcp])
        .envs(env);
    let (resp, port) = launch(cmd);
    FrontEnd {
        _server: Some(server),
        _resp: resp,
        port,
    }
}

/// `xstore resp --backend embedded:NAME --keys KEYS` (no token).
fn embedded(name: &str, keys: &str) -> FrontEnd {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xstore"));
    cmd.args(["resp", "--listen", "127.0.0.1:0", "--keys", keys])
        .args(["--loops", "2", "--backend", &format!("embedded:{name}")])
        .env_remove("XSTORE_TOKEN");
    let (resp, port) = launch(cmd);
    FrontEnd {
        _server: None,
        _resp: resp,
        port,
    }
}

/// Starts a front end: it and its port.
fn launch(cmd: Command) -> (Launched, String) {
    let mut resp = Launched::spawn("resp", cmd, StopBy::Kill).expect("spawn resp");
    let lines = resp
        .wait_for("resp listening on", Duration::from_secs(60), None)
        .expect("resp starts")
        .expect("no stop flag");
    let line = lines.last().unwrap();
    let addr = line
        .strip_prefix("resp listening on ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap();
    let port = addr.rsplit_once(':').unwrap().1.to_string();
    (resp, port)
}

impl FrontEnd {
    /// `redis-cli` with the token: its output (raw replies, one a line).
    fn cli(&self, args: &[&str]) -> String {
        self.cli_as(Some(TOKEN), args)
    }

    fn cli_as(&self, token: Option<&str>, args: &[&str]) -> String {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1", "-p", &self.port, "--no-auth-warning"]);
        if let Some(t) = token {
            cmd.args(["-a", t]);
        }
        let out = cmd.args(args).stdin(Stdio::null()).output().unwrap();
        assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }
}

#[test]
fn redis_cli_drives_every_command() {
    let Some(()) = redis_tools() else { return };
    let fe = front_end();
    assert!(
        fe.cli_as(None, &["PING"]).starts_with("NOAUTH"),
        "a token is required"
    );
    assert!(
        fe.cli_as(Some("wrong"), &["PING"]).contains("NOAUTH"),
        "a wrong token proves nothing"
    );
    assert_eq!(fe.cli(&["PING"]), "PONG");
    assert_eq!(fe.cli(&["PING", "hi there"]), "hi there");
    assert_eq!(fe.cli(&["ECHO", "x y"]), "x y");
    // u64 keys and values as decimal text.
    assert_eq!(fe.cli(&["SET", "42", "7"]), "OK");
    assert_eq!(fe.cli(&["GET", "42"]), "7");
    assert_eq!(fe.cli(&["SET", "42", "8", "NX"]), "");
    assert_eq!(fe.cli(&["SET", "43", "1", "XX"]), "");
    assert_eq!(fe.cli(&["SET", "42", "9", "XX"]), "OK");
    assert_eq!(fe.cli(&["GET", "42"]), "9");
    assert_eq!(fe.cli(&["GET", "43"]), "");
    assert_eq!(fe.cli(&["EXISTS", "42", "43", "42"]), "2");
    assert_eq!(fe.cli(&["MSET", "100", "1", "101", "2"]), "OK");
    assert_eq!(fe.cli(&["MGET", "100", "101", "102"]), "1\n2");
    assert_eq!(fe.cli(&["INCR", "100"]), "2");
    assert_eq!(fe.cli(&["INCRBY", "100", "40"]), "42");
    assert_eq!(fe.cli(&["DECR", "100"]), "41");
    assert_eq!(fe.cli(&["INCR", "5"]), "1", "absent counts from 0");
    assert_eq!(fe.cli(&["DEL", "100", "101", "102"]), "2");
    assert_eq!(fe.cli(&["GET", "100"]), "");
    // 1,000 loaded keys, plus 42, 5.
    assert_eq!(fe.cli(&["DBSIZE"]), "1002");
    // An ordered range, and SCAN with the next key as its cursor.
    assert_eq!(
        fe.cli(&["XSTORE.RANGE", "0", "50", "LIMIT", "10"]),
        "5\n1\n42\n9"
    );
    let first = fe.cli(&["SCAN", "0", "COUNT", "3"]);
    let lines: Vec<&str> = first.lines().collect();
    assert_eq!(lines.len(), 4, "{first}");
    assert_ne!(lines[0], "0", "more keys follow");
    assert_eq!(&lines[1..3], ["5", "42"], "in key order: {first}");
    let mut seen = 0;
    let mut cursor = "0".to_string();
    loop {
        let page = fe.cli(&["SCAN", &cursor, "COUNT", "100"]);
        let mut lines = page.lines();
        cursor = lines.next().unwrap().to_string();
        seen += lines.count();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen, 1002, "a SCAN walk sees every key once");
    assert!(fe.cli(&["INFO"]).contains("backend_system:xstore"));
    assert!(fe.cli(&["COMMAND", "COUNT"]).parse::<u32>().unwrap() >= 20);
    assert_eq!(fe.cli(&["CONFIG", "GET", "appendonly"]), "appendonly\nno");
    assert!(fe.cli(&["HELLO", "3"]).contains("xstore"));
    // Refusals are one error line, never a hang.
    assert!(fe
        .cli(&["SET", "abc", "1"])
        .starts_with("ERR this store holds u64 keys"));
    assert!(fe
        .cli(&["SET", "1", "1", "EX", "10"])
        .starts_with("ERR this store keeps no expiry"));
    assert!(fe
        .cli(&["LPUSH", "1", "2"])
        .starts_with("ERR unknown command 'LPUSH'"));
    assert!(fe
        .cli(&["GET"])
        .starts_with("ERR wrong number of arguments"));
    assert_eq!(fe.cli(&["QUIT"]), "OK");
}

#[test]
fn redis_benchmark_pipelines_against_the_front_end() {
    let Some(()) = redis_tools() else { return };
    let fe = front_end();
    let bench = |args: &[&str]| benchmark(&fe, Some(TOKEN), args);
    // PING inline and as an array.
    let ping = bench(&["-t", "ping"]);
    assert!(
        ping.contains("PING_INLINE") && ping.contains("PING_MBULK"),
        "{ping}"
    );
    // SET, GET and MSET with decimal keys (-r: __rand_int__ is a
    // 12-digit number); redis-benchmark's own `-t set` keys are
    // `key:NNN`, which a store of u64 keys refuses.
    let r = ["-r", "100000"];
    for cmd in [
        &["SET", "__rand_int__", "__rand_int__"][..],
        &["GET", "__rand_int__"],
        &["MSET", "__rand_int__", "1", "__rand_int__", "2"],
    ] {
        let out = bench(&[&r[..], cmd].concat());
        assert!(out.contains("requests per second"), "{cmd:?}: {out}");
    }
    // Every SET landed: the keys are there.
    assert!(fe.cli(&["DBSIZE"]).parse::<u64>().unwrap() > 1000);
}

#[test]
fn an_embedded_store_of_byte_strings_takes_redis_benchmarks_own_keys() {
    let Some(()) = redis_tools() else { return };
    // HiStore's local tables are sized by the keys loaded: room for
    // the benchmark's 1,000 more.
    let fe = embedded("histore", "20000");
    assert_eq!(fe.cli_as(None, &["SET", "key:1", "hello world"]), "OK");
    assert_eq!(fe.cli_as(None, &["GET", "key:1"]), "hello world");
    let out = benchmark(&fe, None, &["-r", "1000", "-t", "set,get,mset"]);
    for t in ["SET: ", "GET: ", "MSET (10 keys): "] {
        assert!(out.contains(t), "{t}: {out}");
    }
    assert_eq!(out.matches("requests per second").count(), 3, "{out}");
    // The benchmark's SETs landed under its own keys (`key:` and 12
    // digits; 4,000 SETs over 1,000 keys miss one key 1.8 % of the time,
    // ten keys never in practice).
    let keys: Vec<String> = (0..10).map(|i| format!("key:{i:012}")).collect();
    let mut exists = vec!["EXISTS"];
    exists.extend(keys.iter().map(String::as_str));
    let found: u32 = fe.cli_as(None, &exists).parse().unwrap();
    assert!(found > 0, "none of {keys:?} was written");
    assert!(fe
        .cli_as(None, &["INFO"])
        .contains("backend_url:embedded:histore"));
}

#[test]
fn an_embedded_xstore_answers_with_its_loaded_keys_and_refuses_byte_keys() {
    let Some(()) = redis_tools() else { return };
    let fe = embedded("xstore", "1000");
    // Keys 0..1000, values equal to their keys.
    assert_eq!(fe.cli_as(None, &["MGET", "0", "999", "1000"]), "0\n999");
    assert_eq!(fe.cli_as(None, &["SET", "1000", "5"]), "OK");
    assert_eq!(fe.cli_as(None, &["GET", "1000"]), "5");
    assert!(fe
        .cli_as(None, &["SET", "key:1", "x"])
        .starts_with("ERR this store holds u64 keys"));
    let out = benchmark(&fe, None, &["-r", "1000", "GET", "__rand_int__"]);
    assert!(out.contains("requests per second"), "{out}");
}

/// `redis-benchmark -P 16 -n 4000 -c 4` against `fe`: its output, which
/// must not hold an error.
fn benchmark(fe: &FrontEnd, token: Option<&str>, args: &[&str]) -> String {
    let mut cmd = Command::new("redis-benchmark");
    cmd.args(["-h", "127.0.0.1", "-p", &fe.port]);
    if let Some(t) = token {
        cmd.args(["-a", t]);
    }
    let out = cmd
        .args(["-q", "-P", "16"])
        .args(["-n", "4000", "-c", "4"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "redis-benchmark {args:?}: {out:?}");
    assert!(!text.contains("ERR"), "redis-benchmark {args:?}: {text}");
    text
}
