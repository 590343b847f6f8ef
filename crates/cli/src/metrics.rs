//! `xstore server --metrics ADDR`: the server's statistics in the
//! Prometheus text format (version 0.0.4) at `http://ADDR/metrics`.
//!
//! The figures are exactly those of `xstore stats URL` and the shell's
//! `stats` ([`crate::stats_cmd::figures`], one list, named once in
//! docs/metrics.md): every numeric one becomes a gauge `xstore_NAME`, the
//! system's name and any text field become labels of `xstore_info`. They
//! are read the way `xstore stats` reads them, from the server's own URL
//! with its token, at each scrape (so a scrape counts as one INFO request
//! and one host-stats request of the server).
//!
//! The endpoint has no authentication, so it serves loopback addresses
//! only; one scrape at a time, a request head of at most
//! [`MAX_REQUEST`] bytes read within [`READ_WITHIN`].

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use fabric::Url;

/// Bytes of an HTTP request head read at most.
pub const MAX_REQUEST: usize = 8 << 10;

/// How long a scraper has to send its request.
pub const READ_WITHIN: Duration = Duration::from_secs(2);

/// Starts the endpoint on a thread of its own: it serves until `stop`.
pub fn start(
    addr: SocketAddr,
    url: String,
    token: Option<String>,
    stop: Arc<AtomicBool>,
) -> Result<SocketAddr> {
    if !addr.ip().is_loopback() {
        bail!("--metrics {addr}: the endpoint has no authentication, so it serves loopback addresses only");
    }
    let listener = TcpListener::bind(addr).with_context(|| format!("--metrics {addr}"))?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let url: Url = url.parse().context("the server's own URL")?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((s, _)) => {
                        if let Err(e) = scrape(s, &url, token.as_deref()) {
                            tracing::info!(error = %e, "metrics request failed");
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        })?;
    println!("metrics on http://{bound}/metrics");
    Ok(bound)
}

/// Answers one HTTP request.
fn scrape(mut s: TcpStream, url: &Url, token: Option<&str>) -> Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(READ_WITHIN))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_REQUEST {
            return respond(&mut s, "431 Request Header Fields Too Large", "");
        }
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, path) = (words.next(), words.next());
    if method != Some(b"GET") {
        return respond(&mut s, "405 Method Not Allowed", "");
    }
    if path != Some(b"/metrics") {
        return respond(&mut s, "404 Not Found", "see /metrics\n");
    }
    match crate::stats_cmd::figures(url, token) {
        Ok(f) => respond(&mut s, "200 OK", &prometheus(&f)),
        Err(e) => respond(&mut s, "503 Service Unavailable", &format!("{e:#}\n")),
    }
}

fn respond(s: &mut TcpStream, status: &str, body: &str) -> Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    Ok(())
}

/// The figures in the Prometheus text format.
pub fn prometheus(figures: &serde_json::Map<String, serde_json::Value>) -> String {
    let mut labels = Vec::new();
    let mut gauges = String::new();
    for (name, value) in figures {
        let name: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        match value.as_f64() {
            Some(v) => {
                gauges.push_str(&format!("# TYPE xstore_{name} gauge\nxstore_{name} {v}\n"));
            }
            None => {
                let text = value
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| value.to_string());
                let text = text
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                labels.push(format!("{name}=\"{text}\""));
            }
        }
    }
    format!(
        "# HELP xstore_info The server's system and text figures, as labels.\n# TYPE xstore_info gauge\nxstore_info{{{}}} 1\n{gauges}",
        labels.join(",")
    )
}
