//! A system as the registry lists it: its description, its options, and
//! the loaded or reached store that hands out clients.

use std::collections::BTreeMap;
use std::str::FromStr;

use crate::{
    Capabilities, HintCounters, KvClient, KvError, ModelFigures, PhaseBreakdown, RetrainCounters,
    RolexFigures, ServerTime,
};

/// A loaded or reached system, ready to hand out clients.
pub trait Store: Sync {
    /// A new client (one per thread).
    fn client(&self) -> Result<Box<dyn KvClient>, KvError>;
    /// Model figures, for designs with a learned model.
    fn model(&self) -> Option<ModelFigures> {
        None
    }
    /// Server time spent so far, for systems that can tell.
    fn server_time(&self) -> Option<ServerTime> {
        None
    }
    /// Hint counters so far (FineStore's server); `None` for designs
    /// without them.
    fn hints(&self) -> Option<HintCounters> {
        None
    }
    /// Retraining counts and freeze times so far (FineStore); `None` for
    /// designs that do not count them.
    fn retrains(&self) -> Option<RetrainCounters> {
        None
    }

    /// ROLEX's retraining and metadata figures so far; `None` for other
    /// designs.
    fn rolex(&self) -> Option<RolexFigures> {
        None
    }

    /// The latency breakdown by phase since the last reset (`reset`:
    /// forget it after reading, as a measured phase starts); `None` for
    /// designs that trace none.
    fn breakdown(&self, reset: bool) -> Option<PhaseBreakdown> {
        let _ = reset;
        None
    }
}

/// Longest option name or value taken: options come from command lines,
/// and a bound keeps a mistake from becoming a large allocation.
pub const MAX_OPTION_LEN: usize = 4096;

/// Options a system reads, by flag name (`leaf-slots` -> `16`); each
/// system parses its own options struct from them and refuses bad values
/// with [`crate::ErrorKind::BadInput`]. Names a system does not know are
/// not its business: the same set goes to every system of a line-up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options(BTreeMap<String, String>);

impl Options {
    /// No options: every system uses its defaults.
    pub fn new() -> Options {
        Options::default()
    }

    /// Sets `name` to `value` (replacing an earlier value).
    pub fn set(&mut self, name: &str, value: impl ToString) -> Result<&mut Options, KvError> {
        let value = value.to_string();
        if name.is_empty() || name.len() > MAX_OPTION_LEN || value.len() > MAX_OPTION_LEN {
            return Err(KvError::bad_input(format!(
                "option names are 1 to {MAX_OPTION_LEN} bytes and values at most that \
                 (name of {} bytes, value of {})",
                name.len(),
                value.len()
            )));
        }
        self.0.insert(name.to_owned(), value);
        Ok(self)
    }

    /// Sets one option from `name=value`.
    pub fn parse_one(&mut self, pair: &str) -> Result<&mut Options, KvError> {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| KvError::bad_input(format!("an option is NAME=VALUE, not '{pair}'")))?;
        self.set(name.trim(), value.trim())
    }

    /// Removes `name`; its old value, if set.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        self.0.remove(name)
    }

    /// The raw value of `name`, if set.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// The value of `name` parsed as `T`, if set; a value that does not
    /// parse is bad input naming the option.
    pub fn get_parsed<T: FromStr>(&self, name: &str) -> Result<Option<T>, KvError>
    where
        T::Err: std::fmt::Display,
    {
        match self.get_str(name) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|e| KvError::bad_input(format!("option {name}: cannot use '{v}': {e}"))),
        }
    }

    /// `name` as a usize, `default` if unset.
    pub fn get_usize(&self, name: &str, default: usize) -> Result<usize, KvError> {
        Ok(self.get_parsed(name)?.unwrap_or(default))
    }

    /// `name` as a u64, `default` if unset.
    pub fn get_u64(&self, name: &str, default: u64) -> Result<u64, KvError> {
        Ok(self.get_parsed(name)?.unwrap_or(default))
    }

    /// `name` as a u64 in `lo..=hi`, `default` if unset; a value outside
    /// is bad input naming the flag and the range.
    pub fn get_u64_in(&self, name: &str, default: u64, lo: u64, hi: u64) -> Result<u64, KvError> {
        let v = self.get_u64(name, default)?;
        if !(lo..=hi).contains(&v) {
            return Err(KvError::bad_input(format!(
                "--{name} {v}: want {lo}..={hi}"
            )));
        }
        Ok(v)
    }

    /// `name` as a bool (`true`/`false`), `default` if unset.
    pub fn get_bool(&self, name: &str, default: bool) -> Result<bool, KvError> {
        Ok(self.get_parsed(name)?.unwrap_or(default))
    }

    /// Every option set, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// One option a system reads, for `--help` and listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionDesc {
    /// Its name, as [`Options`] spells it (`leaf-slots`).
    pub name: &'static str,
    /// One line: what it sets, and its default.
    pub help: &'static str,
}

/// What a local load gets: the pairs, the fabric's behaviour, the options.
#[derive(Debug, Clone, Copy)]
pub struct LocalLoad<'a> {
    /// The pairs to load, in key order.
    pub pairs: &'a [(u64, u64)],
    /// Tear one-sided READs adversarially with this seed.
    pub adversary: Option<u64>,
    /// Emulate a server with this many RPC worker threads (`None`: RPCs
    /// run unlimited in the client threads).
    pub server_workers: Option<usize>,
    /// The system's options.
    pub options: &'a Options,
}

/// What connecting to a running system gets.
#[derive(Debug, Clone, Copy)]
pub struct Connect<'a> {
    /// Where it is.
    pub url: &'a fabric::Url,
    /// The shared secret, if the server asks for one.
    pub token: Option<&'a str>,
    /// The system's options (client-side ones: cache, reads per GET).
    pub options: &'a Options,
}

/// Loads a system over a local fabric.
pub type LoadLocalFn = fn(&LocalLoad<'_>) -> Result<Box<dyn Store>, KvError>;
/// Reaches a running system.
pub type ConnectFn = fn(&Connect<'_>) -> Result<Box<dyn Store>, KvError>;

/// What a system exports: one per `--system` name.
#[derive(Clone, Copy)]
pub struct SystemDesc {
    /// Its name, as `--system` spells it.
    pub name: &'static str,
    /// One line for `--help` and listings.
    pub about: &'static str,
    /// What it takes and does.
    pub capabilities: Capabilities,
    /// The options it reads.
    pub options: &'static [OptionDesc],
    /// Its colour in plots (one per system, so a system keeps its colour
    /// across figures).
    pub colour: (u8, u8, u8),
    /// Loads it over a local fabric.
    pub load_local: LoadLocalFn,
    /// Reaches it running elsewhere, if it can be.
    pub connect: Option<ConnectFn>,
    /// Serves it from a process of its own (`xstore server --system`),
    /// if it can be.
    pub server: Option<crate::ServerDesc>,
}

impl std::fmt::Debug for SystemDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SystemDesc")
            .field("name", &self.name)
            .field("about", &self.about)
            .field("capabilities", &self.capabilities)
            .field("options", &self.options)
            .field("colour", &self.colour)
            .field("connect", &self.connect.is_some())
            .field("server", &self.server)
            .finish()
    }
}
