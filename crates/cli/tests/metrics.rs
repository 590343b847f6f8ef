//! `xstore server --metrics ADDR`: a scrape parses as the Prometheus text
//! format and holds the figures `xstore stats` prints, under the names
//! docs/metrics.md gives; a non-loopback address is refused.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use coord::launch::{Launched, StopBy};

/// `name -> (labels, value)` of every sample in a Prometheus text body;
/// panics on a line that is not a comment or a sample.
fn parse(body: &str) -> Vec<(String, String, f64)> {
    let mut out = Vec::new();
    for line in body
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line.rsplit_once(' ').expect("name value");
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.strip_suffix('}').expect("closing brace")),
            None => (series, ""),
        };
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "metric name {name}"
        );
        out.push((name.to_string(), labels.to_string(), value));
    }
    out
}

fn get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    r
}

#[test]
fn a_scrape_parses_and_holds_the_stats_figures() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xstore"));
    cmd.args(["server", "--listen", "127.0.0.1:0", "--keys", "1000"])
        .args(["--metrics", "127.0.0.1:0"]);
    let mut server = Launched::spawn("server", cmd, StopBy::Kill).unwrap();
    let lines = server
        .wait_for("serving", Duration::from_secs(60), None)
        .unwrap()
        .unwrap();
    let addr = lines
        .iter()
        .find_map(|l| l.strip_prefix("metrics on http://"))
        .and_then(|r| r.strip_suffix("/metrics"))
        .expect("the metrics line")
        .to_string();
    let reply = get(&addr, "/metrics");
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    let samples = parse(body);
    let find = |n: &str| {
        samples
            .iter()
            .find(|s| s.0 == n)
            .unwrap_or_else(|| panic!("{n} in {body}"))
    };
    assert!(
        find("xstore_info").1.contains("system=\"xstore\""),
        "{body}"
    );
    assert_eq!(find("xstore_keys").2, 1000.0);
    assert!(find("xstore_nic_requests").2 >= 0.0);
    assert!(
        find("xstore_connections").2 >= 1.0,
        "the scrape's own connection"
    );
    assert!(get(&addr, "/nope").starts_with("HTTP/1.1 404"));
    drop(server);

    let out = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(["server", "--listen", "127.0.0.1:0", "--keys", "10"])
        .args(["--metrics", "0.0.0.0:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("loopback addresses only"), "{err}");
}
