//! RESP, the Redis serialization protocol: requests in, replies out.
//!
//! A request is an array of bulk strings, or an inline command (one line
//! of words, what `redis-benchmark` sends for `PING`):
//!
//! ```text
//! *2\r\n$3\r\nGET\r\n$5\r\nmykey\r\n      array of 2 bulk strings
//! PING\r\n                              inline (also ended by a bare \n)
//! ```
//!
//! Every length a peer announces is checked against a bound before
//! anything is allocated for it ([`MAX_ARGS`], [`MAX_BULK`],
//! [`MAX_INLINE`]); bytes are taken only once all of a request is in the
//! buffer, so a peer's announcement never becomes memory here. Bad input
//! is a [`ProtoError`] (the connection answers it with `-ERR` and closes),
//! never a panic.
//!
//! The front end parses without copying ([`parse_spans`]): a request's
//! arguments are ranges of the connection's read buffer. A quoted inline
//! word is unquoted in place (it only ever shrinks), so it too is a range.
//! [`parse`] is the owned form, for tests and the fuzz target.

use std::ops::Range;

/// Arguments of one request, at most (MSET of 32 k pairs fits).
pub const MAX_ARGS: usize = 1 << 16;

/// Bytes of one bulk string, at most: the largest value (1 MiB).
pub const MAX_BULK: usize = 1 << 20;

/// Bytes of an inline command line, at most.
pub const MAX_INLINE: usize = 64 << 10;

/// Digits of a length line, at most (lengths are far below 10^12).
const MAX_DIGITS: usize = 12;

/// Why a request could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// A byte where the protocol wants another.
    #[error("Protocol error: expected '{expected}', got '{got}'")]
    Unexpected {
        /// What the protocol wants.
        expected: char,
        /// What came (as a char, lossy).
        got: char,
    },
    /// A length that is not a number or is negative where it may not be.
    #[error("Protocol error: invalid {what} length")]
    BadLength {
        /// `multibulk` or `bulk`.
        what: &'static str,
    },
    /// A length over its bound.
    #[error("Protocol error: {what} length {len} is over the limit of {limit}")]
    TooLong {
        /// `multibulk`, `bulk` or `inline`.
        what: &'static str,
        /// The announced (or seen) length.
        len: u64,
        /// The bound.
        limit: usize,
    },
    /// An inline line with an unbalanced quote.
    #[error("Protocol error: unbalanced quotes in request")]
    Quotes,
}

/// One request: its arguments (the first is the command), and how many
/// buffer bytes it took.
pub type Request = (Vec<Vec<u8>>, usize);

/// Reads one request from the front of `buf`: `Ok(None)` if it is not
/// all there yet. The owned form of [`parse_spans`] (it copies `buf`).
pub fn parse(buf: &[u8]) -> Result<Option<Request>, ProtoError> {
    let mut owned = buf.to_vec();
    let mut spans = Vec::new();
    Ok(parse_spans(&mut owned, 0, &mut spans)?.map(|end| {
        let args = spans.iter().map(|r| owned[r.clone()].to_vec()).collect();
        (args, end)
    }))
}

/// Reads one request from `buf[at..]` without copying: appends the
/// ranges of `buf` its arguments are in to `spans` and answers where the
/// request ends (an index of `buf`); `Ok(None)` if it is not all there
/// yet. On `Ok(None)` or an error `spans` is as it was. Quoted inline
/// words are unquoted in place, inside the request's own bytes.
pub fn parse_spans(
    buf: &mut [u8],
    at: usize,
    spans: &mut Vec<Range<usize>>,
) -> Result<Option<usize>, ProtoError> {
    assert!(at <= buf.len(), "a request starts inside its buffer");
    let before = spans.len();
    let parsed = match buf.get(at) {
        None => Ok(None),
        Some(b'*') => parse_array(buf, at, spans),
        Some(_) => parse_inline(buf, at, spans),
    };
    if !matches!(parsed, Ok(Some(_))) {
        spans.truncate(before);
    }
    parsed
}

/// The line at `buf[at..]` up to `\r\n` (without it), and where the next
/// one starts; `None` if not all there, an error past `limit` bytes. Only
/// `limit + 2` bytes are searched.
fn line(
    buf: &[u8],
    at: usize,
    limit: usize,
    what: &'static str,
) -> Result<Option<(Range<usize>, usize)>, ProtoError> {
    let rest = &buf[at..];
    let window = &rest[..rest.len().min(limit + 2)];
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(end) if end <= limit => Ok(Some((at..at + end, at + end + 2))),
        Some(end) => Err(ProtoError::TooLong {
            what,
            len: end as u64,
            limit,
        }),
        None if rest.len() > limit + 1 => Err(ProtoError::TooLong {
            what,
            len: rest.len() as u64,
            limit,
        }),
        None => Ok(None),
    }
}

/// A decimal length.
fn length(digits: &[u8], what: &'static str) -> Result<u64, ProtoError> {
    if digits.is_empty() || digits.len() > MAX_DIGITS || !digits.iter().all(u8::is_ascii_digit) {
        return Err(ProtoError::BadLength { what });
    }
    // At most 12 ASCII digits: fits a u64.
    Ok(digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

fn parse_array(
    buf: &[u8],
    at: usize,
    spans: &mut Vec<Range<usize>>,
) -> Result<Option<usize>, ProtoError> {
    let Some((head, mut at)) = line(buf, at + 1, MAX_DIGITS + 1, "multibulk")? else {
        return Ok(None);
    };
    // `*-1` and `*0` are empty requests: Redis skips them.
    if &buf[head.clone()] == b"-1" {
        return Ok(Some(at));
    }
    let n = length(&buf[head], "multibulk")?;
    if n > MAX_ARGS as u64 {
        return Err(ProtoError::TooLong {
            what: "multibulk",
            len: n,
            limit: MAX_ARGS,
        });
    }
    for _ in 0..n {
        let Some(&first) = buf.get(at) else {
            return Ok(None);
        };
        if first != b'$' {
            return Err(ProtoError::Unexpected {
                expected: '$',
                got: first as char,
            });
        }
        let Some((digits, start)) = line(buf, at + 1, MAX_DIGITS + 1, "bulk")? else {
            return Ok(None);
        };
        let len = length(&buf[digits], "bulk")?;
        if len > MAX_BULK as u64 {
            return Err(ProtoError::TooLong {
                what: "bulk",
                len,
                limit: MAX_BULK,
            });
        }
        let end = start + len as usize;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err(ProtoError::Unexpected {
                expected: '\r',
                got: buf[end] as char,
            });
        }
        spans.push(start..end);
        at = end + 2;
    }
    Ok(Some(at))
}

fn parse_inline(
    buf: &mut [u8],
    at: usize,
    spans: &mut Vec<Range<usize>>,
) -> Result<Option<usize>, ProtoError> {
    let rest = &buf[at..];
    let window = &rest[..rest.len().min(MAX_INLINE + 1)];
    let Some(end) = window.iter().position(|&b| b == b'\n') else {
        if rest.len() > MAX_INLINE {
            return Err(ProtoError::TooLong {
                what: "inline",
                len: rest.len() as u64,
                limit: MAX_INLINE,
            });
        }
        return Ok(None);
    };
    if end > MAX_INLINE {
        return Err(ProtoError::TooLong {
            what: "inline",
            len: end as u64,
            limit: MAX_INLINE,
        });
    }
    let text_end = if end > 0 && buf[at + end - 1] == b'\r' {
        at + end - 1
    } else {
        at + end
    };
    split_inline(&mut buf[..text_end], at, spans)?;
    Ok(Some(at + end + 1))
}

/// The words of the inline line `text[at..]`: separated by spaces or
/// tabs; `"..."` and `'...'` group words with spaces (no escapes inside,
/// except `\"` in double quotes). A quoted word is written unquoted over
/// its own bytes (never longer than them) and its range is where it now is.
fn split_inline(
    text: &mut [u8],
    mut i: usize,
    spans: &mut Vec<Range<usize>>,
) -> Result<(), ProtoError> {
    let first = spans.len();
    while i < text.len() {
        while i < text.len() && (text[i] == b' ' || text[i] == b'\t') {
            i += 1;
        }
        if i == text.len() {
            break;
        }
        let start = i;
        if text[i] == b'"' || text[i] == b'\'' {
            let quote = text[i];
            let mut w = start;
            i += 1;
            loop {
                // `w < i` throughout: the unquoted word only shrinks.
                debug_assert!(w < i);
                match text.get(i) {
                    None => return Err(ProtoError::Quotes),
                    Some(&b'\\') if quote == b'"' && text.get(i + 1) == Some(&b'"') => {
                        text[w] = b'"';
                        w += 1;
                        i += 2;
                    }
                    Some(&c) if c == quote => {
                        i += 1;
                        break;
                    }
                    Some(&c) => {
                        text[w] = c;
                        w += 1;
                        i += 1;
                    }
                }
            }
            spans.push(start..w);
        } else {
            while i < text.len() && text[i] != b' ' && text[i] != b'\t' {
                i += 1;
            }
            spans.push(start..i);
        }
        if spans.len() - first > MAX_ARGS {
            return Err(ProtoError::TooLong {
                what: "multibulk",
                len: (spans.len() - first) as u64,
                limit: MAX_ARGS,
            });
        }
    }
    Ok(())
}

/// A reply, encoded for the connection's protocol version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Simple(&'static str),
    /// `-ERR ...` (the text includes the error code word).
    Error(String),
    /// `:n`.
    Int(i64),
    /// `$n` bytes.
    Bulk(Vec<u8>),
    /// No value: `$-1` (RESP2) or `_` (RESP3).
    Nil,
    /// `*n` replies.
    Array(Vec<Reply>),
    /// `%n` pairs (RESP3); a flat array of 2n in RESP2.
    Map(Vec<(Reply, Reply)>),
}

impl Reply {
    /// `-ERR text`.
    pub fn err(text: impl std::fmt::Display) -> Reply {
        Reply::Error(format!("ERR {text}"))
    }

    /// A bulk string of text.
    pub fn text(s: impl Into<String>) -> Reply {
        Reply::Bulk(s.into().into_bytes())
    }

    /// Appends the encoding of this reply (RESP3 if `resp3`) to `out`.
    pub fn encode(&self, resp3: bool, out: &mut Vec<u8>) {
        match self {
            Reply::Simple(s) => push_line(out, '+', s),
            Reply::Error(e) => {
                // An error line must not break the framing.
                let clean: String = e.chars().map(|c| if c < ' ' { ' ' } else { c }).collect();
                push_line(out, '-', &clean)
            }
            Reply::Int(n) => push_number(out, b':', *n),
            Reply::Bulk(b) => push_bulk(out, b),
            Reply::Nil if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
            Reply::Array(items) => {
                push_number(out, b'*', items.len() as i64);
                for r in items {
                    r.encode(resp3, out);
                }
            }
            Reply::Map(pairs) => {
                if resp3 {
                    push_number(out, b'%', pairs.len() as i64);
                } else {
                    push_number(out, b'*', (pairs.len() * 2) as i64);
                }
                for (k, v) in pairs {
                    k.encode(resp3, out);
                    v.encode(resp3, out);
                }
            }
        }
    }
}

fn push_line(out: &mut Vec<u8>, kind: char, text: &str) {
    out.push(kind as u8);
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends `kind`, the decimal `n` and `\r\n` (a length or integer line)
/// without going through a formatter.
pub fn push_number(out: &mut Vec<u8>, kind: u8, n: i64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut m = n.unsigned_abs();
    loop {
        i -= 1;
        digits[i] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    out.push(kind);
    if n < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
}

/// Appends a bulk string reply: `$len\r\nbytes\r\n`.
pub fn push_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    push_number(out, b'$', bytes.len() as i64);
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn arrays_and_inline_commands_parse_and_partial_ones_wait() {
        let req = b"*2\r\n$3\r\nGET\r\n$5\r\nmykey\r\n";
        assert_eq!(
            parse(req).unwrap(),
            Some((args(&["GET", "mykey"]), req.len()))
        );
        for cut in 0..req.len() {
            assert_eq!(parse(&req[..cut]).unwrap(), None, "cut at {cut}");
        }
        assert_eq!(parse(b"PING\r\n").unwrap(), Some((args(&["PING"]), 6)));
        assert_eq!(parse(b"PING\n").unwrap(), Some((args(&["PING"]), 5)));
        assert_eq!(
            parse(b"set  \"a b\" 'c'\r\n").unwrap(),
            Some((args(&["set", "a b", "c"]), 16))
        );
        assert_eq!(parse(b"*0\r\n").unwrap(), Some((vec![], 4)));
        // Two pipelined requests: the first is taken alone.
        let two = b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n";
        assert_eq!(parse(two).unwrap().unwrap().1, 14);
        // Binary-safe bulk strings.
        let bin = b"*1\r\n$4\r\n\r\n\0\xff\r\n";
        assert_eq!(parse(bin).unwrap().unwrap().0, vec![b"\r\n\0\xff".to_vec()]);
    }

    #[test]
    fn bad_and_oversized_requests_are_errors_not_allocations() {
        assert!(matches!(
            parse(b"*x\r\n"),
            Err(ProtoError::BadLength { .. })
        ));
        assert!(matches!(
            parse(b"*1\r\n:4\r\n"),
            Err(ProtoError::Unexpected { .. })
        ));
        assert!(matches!(
            parse(b"*1\r\n$3\r\nabcd\r\n"),
            Err(ProtoError::Unexpected { .. })
        ));
        assert!(matches!(
            parse(b"*99999999\r\n"),
            Err(ProtoError::TooLong { .. })
        ));
        assert!(matches!(
            parse(b"*1\r\n$99999999999\r\n"),
            Err(ProtoError::TooLong { .. })
        ));
        assert!(matches!(
            parse(b"*1\r\n$-5\r\n"),
            Err(ProtoError::BadLength { .. })
        ));
        assert!(parse(b"*1234567890123456\r\n").is_err());
        assert!(matches!(parse(b"get \"a\r\n"), Err(ProtoError::Quotes)));
        let long = vec![b'a'; MAX_INLINE + 2];
        assert!(matches!(parse(&long), Err(ProtoError::TooLong { .. })));
    }

    #[test]
    fn spans_point_into_the_buffer_and_quoted_words_are_unquoted_in_place() {
        let mut buf = b"*2\r\n$3\r\nGET\r\n$2\r\nab\r\nset \"a \\\"b\" 'c d' e\r\nGET".to_vec();
        let mut spans = Vec::new();
        let end = parse_spans(&mut buf, 0, &mut spans).unwrap().unwrap();
        assert_eq!(spans, vec![8..11, 17..19]);
        let next = parse_spans(&mut buf, end, &mut spans).unwrap().unwrap();
        let words: Vec<&[u8]> = spans[2..].iter().map(|r| &buf[r.clone()]).collect();
        assert_eq!(words, vec![&b"set"[..], b"a \"b", b"c d", b"e"]);
        // An unfinished request leaves the spans as they were.
        assert_eq!(parse_spans(&mut buf, next, &mut spans).unwrap(), None);
        assert_eq!(spans.len(), 6);
        assert!(parse_spans(&mut b"*1\r\n:1\r\n".to_vec(), 0, &mut spans).is_err());
        assert_eq!(spans.len(), 6);
    }

    #[test]
    fn numbers_and_bulk_strings_encode_without_a_formatter() {
        for n in [0, 7, -1, 42, i64::MAX, i64::MIN, 1_000_000] {
            let mut out = Vec::new();
            push_number(&mut out, b':', n);
            assert_eq!(out, format!(":{n}\r\n").into_bytes());
        }
        let mut out = Vec::new();
        push_bulk(&mut out, b"");
        push_bulk(&mut out, b"hi");
        assert_eq!(out, b"$0\r\n\r\n$2\r\nhi\r\n");
    }

    #[test]
    fn replies_encode_in_both_versions() {
        let mut out = Vec::new();
        Reply::Array(vec![Reply::Nil, Reply::Int(-3), Reply::text("hi")]).encode(false, &mut out);
        assert_eq!(out, b"*3\r\n$-1\r\n:-3\r\n$2\r\nhi\r\n");
        out.clear();
        Reply::Map(vec![(Reply::text("a"), Reply::Nil)]).encode(true, &mut out);
        assert_eq!(out, b"%1\r\n$1\r\na\r\n_\r\n");
        out.clear();
        Reply::Map(vec![(Reply::text("a"), Reply::Int(1))]).encode(false, &mut out);
        assert_eq!(out, b"*2\r\n$1\r\na\r\n:1\r\n");
        out.clear();
        Reply::err("bad\r\nthing").encode(false, &mut out);
        assert_eq!(out, b"-ERR bad  thing\r\n");
    }

    proptest::proptest! {
        /// Any bytes: an error, a wait, or a request no longer than the input.
        #[test]
        fn any_bytes_parse_without_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            if let Ok(Some((_, used))) = parse(&bytes) {
                proptest::prop_assert!(used <= bytes.len());
            }
        }

        /// Encoded requests parse back to their arguments.
        #[test]
        fn encoded_arrays_round_trip(words in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..40), 1..8)) {
            let mut req = format!("*{}\r\n", words.len()).into_bytes();
            for w in &words {
                req.extend_from_slice(format!("${}\r\n", w.len()).as_bytes());
                req.extend_from_slice(w);
                req.extend_from_slice(b"\r\n");
            }
            proptest::prop_assert_eq!(parse(&req).unwrap(), Some((words.clone(), req.len())));
        }
    }
}
