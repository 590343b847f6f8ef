//! Keys and values as a person types them, and as the shell prints them
//! back so that a printed pair can be typed (or imported) again.
//!
//! A word is one of:
//! * bare: `hello`, `user:1`, `42` — its bytes as typed (in a line, up to
//!   whitespace; in a file field, up to the separator);
//! * double-quoted: `"hello world"`, a `"` inside written twice (`""`);
//! * single-quoted: `'it''s'`, a `'` inside written twice;
//! * hex: `0x68656c6c6f` — raw bytes, two digits a byte (`0x` alone is
//!   the empty string).
//!
//! A quote counts only at a word's start; a closing quote must end the
//! word. Quote a word that starts with `0x`, a quote, or holds the
//! separator. On a system that stores u64 keys and values, a bare
//! decimal number is the u64 (8 bytes big-endian through the contract,
//! as `kv::key_bytes`); anything else is passed as bytes and the contract
//! refuses a length other than 8.

/// How the words of a line are separated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sep {
    /// A shell line: runs of whitespace.
    Space,
    /// A file line: exactly this character (tab or comma).
    Char(char),
}

impl Sep {
    fn is(self, c: char) -> bool {
        match self {
            Sep::Space => c.is_whitespace(),
            Sep::Char(s) => c == s,
        }
    }
}

/// One word of a line, unquoted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Whether it was typed bare (so a decimal number may be a u64).
    pub bare: bool,
}

impl Word {
    /// The word as the text typed, for messages.
    pub fn lossy(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// Most words in one line: a bound on what a line may cost.
const MAX_WORDS: usize = 64;

/// Splits `line` into its words; `Err` says what is wrong and where.
pub fn split(line: &str, sep: Sep) -> Result<Vec<Word>, String> {
    let mut words = Vec::new();
    let mut chars = line.char_indices().peekable();
    loop {
        if sep == Sep::Space {
            while chars.next_if(|&(_, c)| c.is_whitespace()).is_some() {}
            if chars.peek().is_none() {
                return Ok(words);
            }
        }
        if words.len() == MAX_WORDS {
            return Err(format!("more than {MAX_WORDS} words in a line"));
        }
        let word = match chars.peek().map(|&(_, c)| c) {
            Some(q @ ('"' | '\'')) => {
                chars.next();
                quoted(&mut chars, q, sep)?
            }
            _ => {
                let mut text = String::new();
                while let Some((_, c)) = chars.next_if(|&(_, c)| !sep.is(c)) {
                    text.push(c);
                }
                bare(text)?
            }
        };
        words.push(word);
        match (sep, chars.next()) {
            (_, None) => return Ok(words),
            (Sep::Space, Some(_)) => {}
            // The separator after a field: one more field follows, even
            // an empty one.
            (Sep::Char(_), Some(_)) => {
                if chars.peek().is_none() {
                    words.push(Word {
                        bytes: Vec::new(),
                        bare: true,
                    });
                    return Ok(words);
                }
            }
        }
    }
}

/// The rest of a word opened by quote `q`; the closing quote must end it.
fn quoted(
    chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>,
    q: char,
    sep: Sep,
) -> Result<Word, String> {
    let mut text = String::new();
    loop {
        match chars.next() {
            None => return Err(format!("unterminated {q}quote{q}")),
            Some((_, c)) if c == q => {
                if chars.next_if(|&(_, c)| c == q).is_some() {
                    text.push(q);
                    continue;
                }
                if let Some(&(at, c)) = chars.peek() {
                    if !sep.is(c) {
                        return Err(format!(
                            "text after a closing quote at column {} (a quote inside is written twice)",
                            at + 1
                        ));
                    }
                }
                return Ok(Word {
                    bytes: text.into_bytes(),
                    bare: false,
                });
            }
            Some((_, c)) => text.push(c),
        }
    }
}

/// A bare word: hex if it starts with `0x`, else its text.
fn bare(text: String) -> Result<Word, String> {
    let Some(digits) = text.strip_prefix("0x") else {
        return Ok(Word {
            bytes: text.into_bytes(),
            bare: true,
        });
    };
    if digits.len() % 2 != 0 {
        return Err(format!("'{text}': hex needs two digits a byte"));
    }
    let bytes = (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| format!("'{text}' is not hex (quote it for the text)"))?;
    Ok(Word { bytes, bare: false })
}

/// `bytes` written so that [`split`] with `sep` reads them back: bare if
/// that is unambiguous, double-quoted if it is printable text, else hex.
pub fn show(bytes: &[u8], sep: Sep) -> String {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return hex(bytes);
    };
    if text.chars().any(char::is_control) {
        return hex(bytes);
    }
    let plain = !text.is_empty()
        && !text.starts_with(['"', '\''])
        && !text.starts_with("0x")
        && !text
            .chars()
            .any(|c| sep.is(c) || (sep == Sep::Space && c.is_whitespace()));
    if plain {
        return text.to_string();
    }
    format!("\"{}\"", text.replace('"', "\"\""))
}

/// `0x` and two hex digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 + 2 * bytes.len());
    s.push_str("0x");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(line: &str, sep: Sep) -> Vec<Vec<u8>> {
        split(line, sep)
            .unwrap()
            .into_iter()
            .map(|w| w.bytes)
            .collect()
    }

    #[test]
    fn quoting_rules() {
        assert_eq!(
            texts(r#"put "hello world" 'it''s'"#, Sep::Space),
            vec![b"put".to_vec(), b"hello world".to_vec(), b"it's".to_vec()]
        );
        assert_eq!(
            texts(r#"  "a""b"   0x00ff 0x  x'y "#, Sep::Space),
            vec![b"a\"b".to_vec(), vec![0, 255], vec![], b"x'y".to_vec()]
        );
        assert_eq!(
            texts("k 1\t\"v,2\"", Sep::Char('\t')),
            vec![b"k 1".to_vec(), b"v,2".to_vec()]
        );
        assert_eq!(texts("a,", Sep::Char(',')), vec![b"a".to_vec(), Vec::new()]);
        assert!(split("\"open", Sep::Space)
            .unwrap_err()
            .contains("unterminated"));
        assert!(split("\"a\"b", Sep::Space)
            .unwrap_err()
            .contains("closing quote"));
        assert!(split("0xabc", Sep::Space)
            .unwrap_err()
            .contains("two digits"));
        assert!(split("0xzz", Sep::Space).unwrap_err().contains("not hex"));
        assert!(split(&"w ".repeat(MAX_WORDS + 1), Sep::Space).is_err());
    }

    #[test]
    fn what_is_shown_reads_back() {
        let cases: [&[u8]; 9] = [
            b"plain",
            b"two words",
            b"it's \"quoted\"",
            b"0xnot-hex",
            b"",
            b"tab\there",
            &[0, 1, 255],
            b"a,b",
            "caf\u{e9}".as_bytes(),
        ];
        for sep in [Sep::Space, Sep::Char('\t'), Sep::Char(',')] {
            for bytes in cases {
                let shown = show(bytes, sep);
                let back = split(&shown, sep).unwrap();
                assert_eq!(back.len(), 1, "{shown:?} with {sep:?}");
                assert_eq!(back[0].bytes, bytes, "{shown:?} with {sep:?}");
            }
        }
        assert_eq!(show(b"plain", Sep::Space), "plain");
        assert_eq!(show(&[0xff], Sep::Space), "0xff");
    }
}
