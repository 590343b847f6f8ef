//! The listener: event loops (epoll, through `mio`), each serving many
//! connections, every connection with its own client of the backend.
//!
//! Why loops and not a thread per connection: `redis-benchmark` keeps 50
//! connections busy, and on a machine of few cores a thread per
//! connection pays a context switch per request (two per round trip);
//! a loop answers every ready connection in one turn, as Redis does.
//! Each loop has one client of the backend (the contract's clients are
//! per thread), which its connections' sessions share: a client per
//! connection cost each new connection the client's set-up (XStore's
//! fetches its model: a third of the instructions of a 20,000-request
//! `redis-benchmark -c 50` run) and a cache of its own.
//!
//! A connection reads what the socket has into its buffer, answers every
//! complete request there in batches of at most [`MAX_BATCH`] (parsed in
//! place, [`proto::parse_spans`]), and writes each batch's replies with
//! one write: a pipelined batch (`redis-benchmark -P 16`) costs one read
//! and one write. A peer that does not read its replies is not read from
//! until they are out. Bounds: at most
//! [`FrontEndConfig::max_connections`] connections (one more is answered
//! `-ERR max number of clients reached` and closed), a request of at most
//! [`MAX_BUFFER`] bytes.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpListener;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::commands::{After, Session, Shared};
use crate::proto::{self, Reply};

/// Bytes a connection buffers for one incomplete request, at most: an
/// MSET of large values fits; a peer that sends more without finishing a
/// request is answered with an error and closed.
pub const MAX_BUFFER: usize = 64 << 20;

/// Requests answered as one batch, at most (the rest wait for the next
/// turn: a batch's replies are gathered in memory).
pub const MAX_BATCH: usize = 1024;

/// Event loops of one front end, at most.
pub const MAX_LOOPS: usize = 64;

/// A connection's read buffer to begin with (it grows to [`MAX_BUFFER`]).
const FIRST_BUFFER: usize = 16 << 10;

/// How often a waiting loop looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);

/// The listener's token in the first loop.
const LISTENER: Token = Token(usize::MAX - 1);

/// The token of a loop's waker (new connections handed to it).
const WAKER: Token = Token(usize::MAX - 2);

/// Settings of a front end.
#[derive(Debug, Clone)]
pub struct FrontEndConfig {
    /// Connections served at once, at most.
    pub max_connections: usize,
    /// Event loops (threads) serving the connections, 1..=[`MAX_LOOPS`].
    pub loops: usize,
}

impl Default for FrontEndConfig {
    fn default() -> FrontEndConfig {
        FrontEndConfig {
            max_connections: 1024,
            loops: 1,
        }
    }
}

/// Serves RESP on `listener` until `stop` is raised, each connection
/// through its own client of `store`. The first loop accepts and hands
/// connections to the loops in turn.
pub fn serve(
    listener: &TcpListener,
    store: &dyn kv::Store,
    shared: &Arc<Shared>,
    config: &FrontEndConfig,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    assert!(
        (1..=MAX_LOOPS).contains(&config.loops),
        "1..={MAX_LOOPS} event loops"
    );
    listener.set_nonblocking(true)?;
    let open = AtomicUsize::new(0);
    let mut polls = Vec::with_capacity(config.loops);
    let mut doors = Vec::with_capacity(config.loops);
    let mut inboxes = Vec::with_capacity(config.loops);
    for _ in 0..config.loops {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        let (tx, rx) = mpsc::channel::<std::net::TcpStream>();
        polls.push(poll);
        doors.push((tx, waker));
        inboxes.push(rx);
    }
    let mut first = mio::net::TcpListener::from_std(listener.try_clone()?);
    polls[0]
        .registry()
        .register(&mut first, LISTENER, Interest::READABLE)?;
    let accept = Accept {
        listener: first,
        doors,
        next: 0,
        open: &open,
        max: config.max_connections,
    };
    std::thread::scope(|scope| {
        let mut loops = Vec::new();
        let mut accept = Some(accept);
        for (i, (poll, inbox)) in polls.into_iter().zip(inboxes).enumerate() {
            let el = EventLoop {
                poll,
                inbox,
                accept: if i == 0 { accept.take() } else { None },
                client: None,
                conns: Vec::new(),
                free: Vec::new(),
                store,
                shared,
                open: &open,
            };
            loops.push(scope.spawn(move || el.run(stop)));
        }
        let mut result = Ok(());
        for l in loops {
            match l.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    stop.store(true, Ordering::SeqCst);
                    result = Err(e);
                }
                Err(p) => std::panic::resume_unwind(p),
            }
        }
        result
    })
}

/// The accepting side of the first loop.
struct Accept<'a> {
    listener: mio::net::TcpListener,
    /// Each loop's inbox of new connections and its waker.
    doors: Vec<(mpsc::Sender<std::net::TcpStream>, Waker)>,
    /// The loop the next connection goes to.
    next: usize,
    open: &'a AtomicUsize,
    max: usize,
}

impl Accept<'_> {
    /// Accepts every waiting connection and hands each to a loop.
    fn accept_all(&mut self) -> std::io::Result<()> {
        loop {
            let (stream, peer) = match self.listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors and the like: later turns retry.
                    tracing::warn!(error = %e, "accept failed");
                    return Ok(());
                }
            };
            // mio's stream into std's: it crosses a channel to its loop.
            let mut stream = std::net::TcpStream::from(stream);
            if self.open.load(Ordering::SeqCst) >= self.max {
                let _ = stream.write_all(b"-ERR max number of clients reached\r\n");
                tracing::info!(%peer, "refused: max number of clients reached");
                continue;
            }
            self.open.fetch_add(1, Ordering::SeqCst);
            let (tx, waker) = &self.doors[self.next];
            self.next = (self.next + 1) % self.doors.len();
            if tx.send(stream).is_err() {
                // That loop has ended (the front end is stopping).
                self.open.fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            waker.wake()?;
        }
    }
}

/// One event loop: its connections, indexed by their tokens.
struct EventLoop<'a> {
    poll: Poll,
    inbox: mpsc::Receiver<std::net::TcpStream>,
    accept: Option<Accept<'a>>,
    /// The loop's client of the backend, made with its first connection.
    client: Option<Box<dyn kv::KvClient>>,
    conns: Vec<Option<Conn>>,
    /// Free slots of `conns`.
    free: Vec<usize>,
    store: &'a dyn kv::Store,
    shared: &'a Arc<Shared>,
    open: &'a AtomicUsize,
}

impl EventLoop<'_> {
    fn run(mut self, stop: &AtomicBool) -> std::io::Result<()> {
        let mut events = Events::with_capacity(1024);
        while !stop.load(Ordering::SeqCst) {
            if let Err(e) = self.poll.poll(&mut events, Some(POLL)) {
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => {
                        if let Some(a) = self.accept.as_mut() {
                            a.accept_all()?;
                        }
                    }
                    WAKER => self.take_new()?,
                    Token(i) => self.serve(i, ev.is_readable() || ev.is_read_closed()),
                }
            }
        }
        Ok(())
    }

    /// Registers the connections handed to this loop.
    fn take_new(&mut self) -> std::io::Result<()> {
        while let Ok(mut stream) = self.inbox.try_recv() {
            if self.client.is_none() {
                match self.store.client() {
                    Ok(c) => self.client = Some(c),
                    Err(e) => {
                        let mut out = Vec::new();
                        Reply::err(format!("the backend refused a client: {}", e.message))
                            .encode(false, &mut out);
                        let _ = stream.write_all(&out);
                        self.open.fetch_sub(1, Ordering::SeqCst);
                        continue;
                    }
                }
            }
            let caps = self.client.as_ref().map(|c| c.capabilities());
            let Some(conn) = caps.and_then(|caps| Conn::open(stream, caps, self.shared)) else {
                self.open.fetch_sub(1, Ordering::SeqCst);
                continue;
            };
            let slot = match self.free.pop() {
                Some(s) => s,
                None => {
                    self.conns.push(None);
                    self.conns.len() - 1
                }
            };
            let conn = self.conns[slot].insert(conn);
            self.poll.registry().register(
                &mut conn.stream,
                Token(slot),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            // Bytes that came before the registration raise no event.
            self.serve(slot, true);
        }
        Ok(())
    }

    /// Serves connection `slot` as far as it can go (`readable`: the
    /// event says bytes came); closes it when done.
    fn serve(&mut self, slot: usize, readable: bool) {
        let (Some(Some(conn)), Some(client)) =
            (self.conns.get_mut(slot), self.client.as_deref_mut())
        else {
            return;
        };
        let keep = match conn.serve(client, readable) {
            Ok(keep) => keep,
            Err(e) => {
                tracing::info!(error = %e, "connection ended");
                false
            }
        };
        if !keep {
            if let Some(mut c) = self.conns[slot].take() {
                let _ = self.poll.registry().deregister(&mut c.stream);
            }
            self.free.push(slot);
            self.open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// One connection: its socket, session, read buffer and unsent replies.
struct Conn {
    stream: TcpStream,
    session: Session,
    /// Read buffer: bytes `start..end` are unanswered.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Replies; `out[sent..]` not yet written.
    out: Vec<u8>,
    sent: usize,
    /// Whether to close once the replies are out (QUIT, a protocol error).
    closing: bool,
    /// Whether the socket may hold bytes not read yet: set by a readable
    /// event, cleared by a read that did not fill the space it was given
    /// (epoll(7): the input is then exhausted, and new bytes raise a new
    /// event) or that would block. Reading only then saves the read
    /// that answers EAGAIN: a third of the syscalls of an unpipelined
    /// request.
    unread: bool,
    /// Argument ranges of the batch being answered (kept for reuse).
    spans: Vec<Range<usize>>,
    /// Requests of the batch: ranges of `spans`.
    requests: Vec<Range<usize>>,
}

impl Conn {
    /// A connection to a store with `caps`; `None` if the socket cannot
    /// be set up.
    fn open(
        stream: std::net::TcpStream,
        caps: kv::Capabilities,
        shared: &Arc<Shared>,
    ) -> Option<Conn> {
        if let Err(e) = stream.set_nonblocking(true).and(stream.set_nodelay(true)) {
            tracing::warn!(error = %e, "setting up a connection");
            return None;
        }
        Some(Conn {
            stream: TcpStream::from_std(stream),
            session: Session::detached(caps, shared.clone()),
            buf: vec![0; FIRST_BUFFER],
            start: 0,
            end: 0,
            out: Vec::with_capacity(FIRST_BUFFER),
            sent: 0,
            closing: false,
            unread: false,
            spans: Vec::new(),
            requests: Vec::new(),
        })
    }

    /// Answers, writes and reads until the socket would block or its
    /// input is exhausted (the loop is edge-triggered: the next event
    /// comes only after that); false once the connection is to close.
    /// A writable event with nothing to write costs no syscall.
    fn serve(&mut self, client: &mut dyn kv::KvClient, readable: bool) -> std::io::Result<bool> {
        self.unread |= readable;
        loop {
            // Answer what is buffered, writing each batch's replies.
            loop {
                if !self.flush()? {
                    // A writable event resumes; `unread` says whether to read.
                    return Ok(true);
                }
                if self.closing {
                    return Ok(false);
                }
                if !self.answer_batch(client) {
                    break;
                }
            }
            if !self.unread {
                return Ok(true);
            }
            match self.fill() {
                Ok(0) => return Ok(false),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.unread = false;
                    return Ok(true);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes the unsent replies; false if the socket would block first.
    fn flush(&mut self) -> std::io::Result<bool> {
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out.clear();
        self.sent = 0;
        Ok(true)
    }

    /// Reads what the socket has after the buffered bytes, making room
    /// first (moving the unanswered bytes to the front, or growing the
    /// buffer up to [`MAX_BUFFER`]); a request that does not fit is
    /// answered with an error and the connection closes.
    fn fill(&mut self) -> std::io::Result<usize> {
        if self.end == self.buf.len() && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= MAX_BUFFER {
                Reply::err(format!("request over {MAX_BUFFER} bytes"))
                    .encode(self.session.resp3(), &mut self.out);
                self.closing = true;
                // Not an end of input: the loop writes the error, then closes.
                return Ok(1);
            }
            let grown = (self.buf.len() * 2).min(MAX_BUFFER);
            self.buf.resize(grown, 0);
        }
        let space = self.buf.len() - self.end;
        let n = self.stream.read(&mut self.buf[self.end..])?;
        if n < space {
            self.unread = false;
        }
        self.end += n;
        Ok(n)
    }

    /// Parses up to [`MAX_BATCH`] complete requests from the buffer and
    /// answers them into `out`: false if there was nothing to do (no
    /// complete request, nothing to close).
    fn answer_batch(&mut self, client: &mut dyn kv::KvClient) -> bool {
        self.spans.clear();
        self.requests.clear();
        let mut at = self.start;
        let mut broken = None;
        while self.requests.len() < MAX_BATCH {
            let first = self.spans.len();
            match proto::parse_spans(&mut self.buf[..self.end], at, &mut self.spans) {
                Ok(Some(next)) => {
                    debug_assert!(next > at && next <= self.end);
                    at = next;
                    // Empty requests (`*0`, blank lines) are skipped, as Redis does.
                    if self.spans.len() > first {
                        self.requests.push(first..self.spans.len());
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    broken = Some(e);
                    break;
                }
            }
        }
        let progress = at > self.start || self.closing || broken.is_some();
        let buf = &self.buf;
        let args: Vec<&[u8]> = self.spans.iter().map(|r| &buf[r.clone()]).collect();
        let batch: Vec<&[&[u8]]> = self.requests.iter().map(|r| &args[r.clone()]).collect();
        if self.session.execute_batch_on(client, &batch, &mut self.out) == After::Close {
            self.closing = true;
        }
        if let Some(e) = broken {
            Reply::err(e).encode(self.session.resp3(), &mut self.out);
            self.closing = true;
        }
        self.start = at;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        progress
    }
}
