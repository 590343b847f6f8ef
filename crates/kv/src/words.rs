//! u64 keys and values at the byte-string contract: the encoding (8 bytes,
//! big-endian, so byte order is numeric order) and the two adapters
//! between [`KvClient`] and [`WordClient`].

use crate::{
    Capabilities, ClientFigures, Counters, KvClient, KvError, Pending, WordClient, WordWrite, Write,
};

/// The contract's bytes of a u64 key: 8 bytes big-endian, so comparing
/// encoded keys as byte strings orders them as numbers.
pub fn key_bytes(k: u64) -> [u8; 8] {
    k.to_be_bytes()
}

/// The u64 of an encoded key; anything but exactly 8 bytes is
/// [`crate::ErrorKind::BadInput`].
pub fn key_word(k: &[u8]) -> Result<u64, KvError> {
    let b: [u8; 8] = k.try_into().map_err(|_| {
        KvError::bad_input(format!(
            "this system stores u64 keys: a key is exactly 8 bytes (big-endian), not {}",
            k.len()
        ))
    })?;
    Ok(u64::from_be_bytes(b))
}

/// The u64 of an encoded value; anything but exactly 8 bytes is
/// [`crate::ErrorKind::BadInput`].
pub fn value_word(v: &[u8]) -> Result<u64, KvError> {
    let b: [u8; 8] = v.try_into().map_err(|_| {
        KvError::bad_input(format!(
            "this system stores u64 values: a value is exactly 8 bytes (big-endian), not {}",
            v.len()
        ))
    })?;
    Ok(u64::from_be_bytes(b))
}

/// A value a system returned, as a u64: a length other than 8 here is the
/// system's fault (it broke its own capabilities), so it is
/// [`crate::ErrorKind::Corrupt`], not bad input.
fn returned_word(v: &[u8], what: &str) -> Result<u64, KvError> {
    let b: [u8; 8] = v.try_into().map_err(|_| {
        KvError::corrupt(format!(
            "the system returned a {what} of {} bytes where 8 were due",
            v.len()
        ))
    })?;
    Ok(u64::from_be_bytes(b))
}

/// Any [`WordClient`] as a [`KvClient`]: 8-byte big-endian keys and
/// values; [`KvClient::words`] returns the inner client, so a harness that
/// drives u64s pays no encoding.
pub struct Words<C>(pub C);

impl<C: WordClient> KvClient for Words<C> {
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    fn get(&mut self, key: &[u8], value: &mut Vec<u8>) -> Result<bool, KvError> {
        match self.0.get(key_word(key)?)? {
            Some(v) => {
                value.clear();
                value.extend_from_slice(&v.to_be_bytes());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(
        &mut self,
        start: &[u8],
        n: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), KvError> {
        let mut words = Vec::with_capacity(n.min(1024));
        self.0.scan(key_word(start)?, n, &mut words)?;
        out.extend(
            words
                .into_iter()
                .map(|(k, v)| (k.to_be_bytes().to_vec(), v.to_be_bytes().to_vec())),
        );
        Ok(())
    }

    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        self.0.insert(key_word(key)?, value_word(value)?)
    }

    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        self.0.update(key_word(key)?, value_word(value)?)
    }

    fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        self.0.upsert(key_word(key)?, value_word(value)?)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, KvError> {
        self.0.delete(key_word(key)?)
    }

    fn start_write(&mut self, w: Write<'_>) -> Result<Pending, KvError> {
        let w = match w {
            Write::Insert { key, value } => WordWrite::Insert {
                key: key_word(key)?,
                value: value_word(value)?,
            },
            Write::Update { key, value } => WordWrite::Update {
                key: key_word(key)?,
                value: value_word(value)?,
            },
            Write::Upsert { key, value } => WordWrite::Upsert {
                key: key_word(key)?,
                value: value_word(value)?,
            },
            Write::Delete { key } => WordWrite::Delete {
                key: key_word(key)?,
            },
        };
        self.0.start_write(w)
    }

    fn finish_write(&mut self, p: Pending) -> Result<bool, KvError> {
        self.0.finish_write(p)
    }

    fn words(&mut self) -> Option<&mut dyn WordClient> {
        Some(&mut self.0)
    }

    fn figures(&self) -> ClientFigures {
        self.0.figures()
    }

    fn counters(&self) -> Counters {
        self.0.counters()
    }
}

/// Any [`KvClient`] driven with u64s (for a harness whose system has no
/// word path): keys and values go over as 8 bytes big-endian.
pub struct Bytes<'a>(pub &'a mut dyn KvClient);

impl WordClient for Bytes<'_> {
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    fn get(&mut self, key: u64) -> Result<Option<u64>, KvError> {
        let mut v = Vec::with_capacity(8);
        if !self.0.get(&key_bytes(key), &mut v)? {
            return Ok(None);
        }
        returned_word(&v, "value").map(Some)
    }

    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), KvError> {
        let mut pairs = Vec::with_capacity(n.min(1024));
        self.0.scan(&key_bytes(start), n, &mut pairs)?;
        out.reserve(pairs.len());
        for (k, v) in pairs {
            out.push((returned_word(&k, "key")?, returned_word(&v, "value")?));
        }
        Ok(())
    }

    fn insert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        self.0.insert(&key_bytes(key), &value.to_be_bytes())
    }

    fn update(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        self.0.update(&key_bytes(key), &value.to_be_bytes())
    }

    fn upsert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        self.0.upsert(&key_bytes(key), &value.to_be_bytes())
    }

    fn delete(&mut self, key: u64) -> Result<bool, KvError> {
        self.0.delete(&key_bytes(key))
    }

    fn start_write(&mut self, w: WordWrite) -> Result<Pending, KvError> {
        match w {
            WordWrite::Insert { key, value } => self.0.start_write(Write::Insert {
                key: &key_bytes(key),
                value: &value.to_be_bytes(),
            }),
            WordWrite::Update { key, value } => self.0.start_write(Write::Update {
                key: &key_bytes(key),
                value: &value.to_be_bytes(),
            }),
            WordWrite::Upsert { key, value } => self.0.start_write(Write::Upsert {
                key: &key_bytes(key),
                value: &value.to_be_bytes(),
            }),
            WordWrite::Delete { key } => self.0.start_write(Write::Delete {
                key: &key_bytes(key),
            }),
        }
    }

    fn finish_write(&mut self, p: Pending) -> Result<bool, KvError> {
        self.0.finish_write(p)
    }

    fn figures(&self) -> ClientFigures {
        self.0.figures()
    }

    fn counters(&self) -> Counters {
        self.0.counters()
    }
}
