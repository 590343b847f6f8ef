//! The listener: one thread per connection, each with its own client of
//! the backend (clients are per thread in the contract).
//!
//! A connection reads what the socket has, answers every complete
//! request in the buffer in order, and writes all the replies at once:
//! a pipelined batch (`redis-benchmark -P 16`) costs one write. Bounds:
//! at most [`FrontEndConfig::max_connections`] connections (one more is
//! answered `-ERR max number of clients reached` and closed), a request
//! of at most [`MAX_BUFFER`] bytes, replies written after each batch of at most
//! [`MAX_BATCH`] requests.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::commands::{After, Session, Shared};
use crate::proto::{self, Reply};

/// Bytes a connection buffers for one incomplete request, at most: an
/// MSET of large values fits; a peer that sends more without finishing a
/// request is answered with an error and closed.
pub const MAX_BUFFER: usize = 64 << 20;

/// Requests answered as one batch, at most (the rest wait for the next
/// turn: a batch's replies are gathered in memory).
pub const MAX_BATCH: usize = 1024;

/// How often a blocked accept or read looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);

/// Settings of a front end.
#[derive(Debug, Clone)]
pub struct FrontEndConfig {
    /// Connections served at once, at most.
    pub max_connections: usize,
}

impl Default for FrontEndConfig {
    fn default() -> FrontEndConfig {
        FrontEndConfig {
            max_connections: 1024,
        }
    }
}

/// Serves RESP on `listener` until `stop` is raised, each connection
/// through its own client of `store`.
pub fn serve(
    listener: &TcpListener,
    store: &dyn kv::Store,
    shared: &Arc<Shared>,
    config: &FrontEndConfig,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let open = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        while !stop.load(Ordering::SeqCst) {
            let (mut stream, peer) = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    std::thread::sleep(POLL);
                    continue;
                }
            };
            if open.load(Ordering::SeqCst) >= config.max_connections {
                let _ = stream.write_all(b"-ERR max number of clients reached\r\n");
                continue;
            }
            open.fetch_add(1, Ordering::SeqCst);
            let open = &open;
            let shared = shared.clone();
            scope.spawn(move || {
                if let Err(e) = connection(stream, store, shared, stop) {
                    tracing::info!(%peer, error = %e, "connection ended");
                }
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Ok(())
}

/// Serves one connection until it closes, QUITs, breaks the protocol or
/// `stop` is raised.
fn connection(
    mut stream: TcpStream,
    store: &dyn kv::Store,
    shared: Arc<Shared>,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(POLL))?;
    let client = match store.client() {
        Ok(c) => c,
        Err(e) => {
            let mut out = Vec::new();
            Reply::err(format!("the backend refused a client: {}", e.message))
                .encode(false, &mut out);
            return stream.write_all(&out);
        }
    };
    let mut session = Session::new(client, shared);
    let mut buf: Vec<u8> = Vec::with_capacity(16 << 10);
    let mut out: Vec<u8> = Vec::with_capacity(16 << 10);
    let mut chunk = vec![0u8; 64 << 10];
    while !stop.load(Ordering::SeqCst) {
        let n = match stream.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        buf.extend_from_slice(&chunk[..n]);
        // Every complete request in the buffer, in batches of at most
        // MAX_BATCH, before the next read.
        loop {
            let (batch, used, broken) = take_batch(&buf);
            buf.drain(..used);
            let closing = session.execute_batch(&batch, &mut out) == After::Close;
            if let Some(e) = &broken {
                Reply::err(e).encode(session.resp3(), &mut out);
            }
            if closing || broken.is_some() {
                return stream.write_all(&out);
            }
            if !out.is_empty() {
                stream.write_all(&out)?;
                out.clear();
            }
            if batch.len() < MAX_BATCH {
                break;
            }
        }
        if buf.len() > MAX_BUFFER {
            Reply::err(format!("request over {MAX_BUFFER} bytes"))
                .encode(session.resp3(), &mut out);
            return stream.write_all(&out);
        }
    }
    Ok(())
}

/// The complete requests at the front of `buf` (at most [`MAX_BATCH`]),
/// the bytes they took, and the protocol error that stopped the parse, if
/// one did.
fn take_batch(buf: &[u8]) -> (Vec<Vec<Vec<u8>>>, usize, Option<proto::ProtoError>) {
    let mut used = 0;
    let mut batch = Vec::new();
    while batch.len() < MAX_BATCH {
        match proto::parse(&buf[used..]) {
            Ok(Some((args, len))) => {
                used += len;
                if !args.is_empty() {
                    batch.push(args);
                }
            }
            Ok(None) => break,
            Err(e) => return (batch, used, Some(e)),
        }
    }
    (batch, used, None)
}
