//! A doorbell batch of one-sided verbs to one node.
//!
//! Verbs are recorded with [`Batch::read`], [`Batch::write`], [`Batch::cas`]
//! and [`Batch::faa`], posted together with [`crate::Endpoint::post`] (one
//! round trip), and their results read back by handle. Each verb succeeds or
//! fails on its own. Read data lands in one buffer owned by the batch, so a
//! batch reused across operations allocates nothing in steady state.

use crate::error::VerbError;
use crate::region::{RegionId, RegionTable, Rights};

/// The most verbs one batch may carry: a bound on the work one doorbell can
/// ask of a node.
pub const MAX_BATCH_OPS: usize = 1024;

/// The longest single READ or WRITE: 1 MiB.
pub const MAX_VERB_BYTES: u64 = 1 << 20;

/// Kind of a one-sided verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Copy remote words into the batch buffer.
    Read,
    /// Copy words from the batch buffer to remote memory.
    Write,
    /// 8-byte compare-and-swap; result is the old value.
    Cas,
    /// 8-byte fetch-and-add; result is the old value.
    Faa,
}

impl OpKind {
    fn name(self) -> &'static str {
        match self {
            OpKind::Read => "READ",
            OpKind::Write => "WRITE",
            OpKind::Cas => "CAS",
            OpKind::Faa => "FAA",
        }
    }

    /// The right a region must grant for this verb.
    pub fn needed(self) -> Rights {
        match self {
            OpKind::Read => Rights::READ,
            OpKind::Write => Rights::WRITE,
            OpKind::Cas | OpKind::Faa => Rights::ATOMIC,
        }
    }
}

/// Handle of one verb inside a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpHandle(usize);

/// One recorded verb. Public so that backends in other crates can encode
/// batches on their wire.
#[derive(Debug, Clone, Copy)]
pub struct Op {
    /// Verb kind.
    pub kind: OpKind,
    /// Target region.
    pub region: RegionId,
    /// Byte offset in the region.
    pub offset: u64,
    /// Length in bytes (8 for atomics).
    pub len: u64,
    /// Where the verb's data lives in the batch buffer (READ, WRITE).
    pub buf_off: usize,
    /// CAS: expected value; FAA: addend.
    pub arg0: u64,
    /// CAS: new value.
    pub arg1: u64,
}

/// A batch of verbs to one node; see the module docs.
#[derive(Debug, Default)]
pub struct Batch {
    ops: Vec<Op>,
    buf: Vec<u8>,
    status: Vec<Result<u64, VerbError>>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Forgets all verbs, keeping the allocations.
    pub fn clear(&mut self) {
        self.ops.clear();
        self.buf.clear();
        self.status.clear();
    }

    /// Reserves room for `ops` more verbs and `bytes` more bytes of READ
    /// and WRITE data (a decoder that has checked the totals first).
    pub fn reserve(&mut self, ops: usize, bytes: usize) {
        self.ops.reserve(ops);
        self.status.reserve(ops);
        self.buf.reserve(bytes);
    }

    /// Number of verbs.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch has no verb.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The recorded verbs, for backends.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    fn push(&mut self, op: Op) -> OpHandle {
        self.ops.push(op);
        self.status.push(Err(VerbError::NotExecuted));
        OpHandle(self.ops.len() - 1)
    }

    /// Records a READ of `len` bytes at `offset` of `region`. A length the
    /// fabric cannot serve is recorded anyway and fails alone when posted.
    pub fn read(&mut self, region: RegionId, offset: u64, len: u64) -> OpHandle {
        let buf_off = self.buf.len();
        if len <= MAX_VERB_BYTES {
            self.buf.resize(buf_off + len as usize, 0);
        }
        self.push(Op {
            kind: OpKind::Read,
            region,
            offset,
            len,
            buf_off,
            arg0: 0,
            arg1: 0,
        })
    }

    /// Records a WRITE of `data` at `offset` of `region`.
    pub fn write(&mut self, region: RegionId, offset: u64, data: &[u8]) -> OpHandle {
        let buf_off = self.buf.len();
        self.buf.extend_from_slice(data);
        self.push(Op {
            kind: OpKind::Write,
            region,
            offset,
            len: data.len() as u64,
            buf_off,
            arg0: 0,
            arg1: 0,
        })
    }

    /// Records an 8-byte compare-and-swap.
    pub fn cas(&mut self, region: RegionId, offset: u64, expected: u64, new: u64) -> OpHandle {
        self.push(Op {
            kind: OpKind::Cas,
            region,
            offset,
            len: 8,
            buf_off: 0,
            arg0: expected,
            arg1: new,
        })
    }

    /// Records an 8-byte fetch-and-add.
    pub fn faa(&mut self, region: RegionId, offset: u64, add: u64) -> OpHandle {
        self.push(Op {
            kind: OpKind::Faa,
            region,
            offset,
            len: 8,
            buf_off: 0,
            arg0: add,
            arg1: 0,
        })
    }

    /// The payload of WRITE `i` (empty for other verbs), for backends that
    /// ship writes over a wire or post them to a NIC.
    pub fn op_data(&self, i: usize) -> &[u8] {
        let op = &self.ops[i];
        if op.kind != OpKind::Write {
            return &[];
        }
        &self.buf[op.buf_off..op.buf_off + op.len as usize]
    }

    /// Whether the verb succeeded.
    pub fn status(&self, h: OpHandle) -> Result<(), VerbError> {
        self.status[h.0].clone().map(|_| ())
    }

    /// The bytes a READ returned.
    pub fn read_bytes(&self, h: OpHandle) -> Result<&[u8], VerbError> {
        let op = &self.ops[h.0];
        if op.kind != OpKind::Read {
            return Err(VerbError::WrongKind {
                actual: op.kind.name(),
                asked: "READ",
            });
        }
        self.status[h.0].clone()?;
        Ok(&self.buf[op.buf_off..op.buf_off + op.len as usize])
    }

    /// The old value a CAS or FAA returned.
    pub fn atomic_result(&self, h: OpHandle) -> Result<u64, VerbError> {
        let op = &self.ops[h.0];
        if !matches!(op.kind, OpKind::Cas | OpKind::Faa) {
            return Err(VerbError::WrongKind {
                actual: op.kind.name(),
                asked: "atomic",
            });
        }
        self.status[h.0].clone()
    }

    /// Marks every verb as failed with `err` (the whole post failed).
    pub fn fail_all(&mut self, err: VerbError) {
        for s in &mut self.status {
            *s = Err(err.clone());
        }
    }

    /// Sets the outcome of verb `i` (for backends that execute remotely and
    /// receive results over a wire). For a successful READ, `data` holds the
    /// bytes, which must have the verb's length.
    pub fn complete(&mut self, i: usize, result: Result<u64, VerbError>, data: Option<&[u8]>) {
        let op = self.ops[i];
        if let (Ok(_), OpKind::Read, Some(data)) = (&result, op.kind, data) {
            if data.len() as u64 != op.len {
                self.status[i] = Err(VerbError::Transport(format!(
                    "READ returned {} bytes, expected {}",
                    data.len(),
                    op.len
                )));
                return;
            }
            self.buf[op.buf_off..op.buf_off + data.len()].copy_from_slice(data);
        }
        self.status[i] = result;
    }

    /// Bytes this batch reads and writes when every verb succeeds
    /// (atomics count 8 each way).
    pub fn payload(&self) -> (u64, u64) {
        let mut read = 0;
        let mut written = 0;
        for op in &self.ops {
            match op.kind {
                OpKind::Read => read += op.len,
                OpKind::Write => written += op.len,
                OpKind::Cas | OpKind::Faa => {
                    read += 8;
                    written += 8;
                }
            }
        }
        (read, written)
    }

    /// Executes every verb against `table` with word copies ordered by
    /// `order` (a permutation source for adversarial backends; `None` copies
    /// in address order). Used by backends that hold the memory in-process.
    ///
    /// A batch of several verbs first touches the cache lines of its small
    /// READs (one load per line, results discarded), so that their misses
    /// are in flight together, as a NIC's DMA reads of one doorbell are,
    /// instead of one verb's copy waiting out its misses before the next
    /// verb's start. Touching changes nothing a verb returns.
    pub fn execute<T: RegionTable + ?Sized>(&mut self, table: &T, mut copy: impl CopyStrategy) {
        let mut regions = Lookup::default();
        if self.ops.len() > 1 {
            Self::touch_reads(table, &self.ops, &mut regions);
        }
        for i in 0..self.ops.len() {
            let op = self.ops[i];
            let region = regions.get(table, op.region);
            self.status[i] = Self::execute_one(region, &op, &mut self.buf, &mut copy);
        }
    }

    /// Loads one word of every cache line of each READ of at most
    /// [`TOUCH_MAX_BYTES`] that passes its checks (see [`Batch::execute`]).
    fn touch_reads<'t, T: RegionTable + ?Sized>(
        table: &'t T,
        ops: &[Op],
        regions: &mut Lookup<'t>,
    ) {
        let mut sink = 0u64;
        for op in ops {
            if op.kind != OpKind::Read || op.len > TOUCH_MAX_BYTES {
                continue;
            }
            let Some(region) = regions.get(table, op.region) else {
                continue;
            };
            if op.len == 0 || region.check(op.offset, op.len, Rights::READ).is_err() {
                continue;
            }
            let (first, last) = (op.offset / 8, (op.offset + op.len) / 8 - 1);
            let mut word = first;
            while word <= last {
                sink ^= region.load_relaxed(word as usize);
                word += 8;
            }
            sink ^= region.load_relaxed(last as usize);
        }
        std::hint::black_box(sink);
    }

    fn execute_one(
        region: Option<&crate::Region>,
        op: &Op,
        buf: &mut [u8],
        copy: &mut impl CopyStrategy,
    ) -> Result<u64, VerbError> {
        let region = region.ok_or(VerbError::UnknownRegion(op.region))?;
        if op.len > MAX_VERB_BYTES {
            return Err(VerbError::TooLarge {
                len: op.len,
                max: MAX_VERB_BYTES,
            });
        }
        region.check(op.offset, op.len, op.kind.needed())?;
        let word = (op.offset / 8) as usize;
        match op.kind {
            OpKind::Read => {
                let out = &mut buf[op.buf_off..op.buf_off + op.len as usize];
                copy.read(region, word, out);
                Ok(0)
            }
            OpKind::Write => {
                let data = &buf[op.buf_off..op.buf_off + op.len as usize];
                copy.write(region, word, data);
                Ok(0)
            }
            OpKind::Cas => Ok(region.compare_exchange(word, op.arg0, op.arg1)),
            OpKind::Faa => Ok(region.fetch_add(word, op.arg0)),
        }
    }
}

/// The longest READ whose lines [`Batch::execute`] touches ahead of the
/// copies: a few KiB (a leaf, a node, a bucket); longer READs stream, and
/// the hardware prefetches them.
const TOUCH_MAX_BYTES: u64 = 4096;

/// The last region a batch looked up: consecutive verbs mostly name the
/// same region, and the table is a hash map.
#[derive(Default)]
struct Lookup<'t> {
    last: Option<(RegionId, &'t crate::Region)>,
}

impl<'t> Lookup<'t> {
    fn get<T: RegionTable + ?Sized>(
        &mut self,
        table: &'t T,
        id: RegionId,
    ) -> Option<&'t crate::Region> {
        match self.last {
            Some((at, region)) if at == id => Some(region),
            _ => {
                let region = table.region(id)?;
                self.last = Some((id, region));
                Some(region)
            }
        }
    }
}

/// How a backend copies the words of a READ or WRITE: in address order, or
/// adversarially (any order, with pauses), as a NIC is allowed to.
pub trait CopyStrategy {
    /// Copies `out.len() / 8` words starting at word `first` into `out`.
    fn read(&mut self, region: &crate::Region, first: usize, out: &mut [u8]);
    /// Copies `data` into words starting at word `first`.
    fn write(&mut self, region: &crate::Region, first: usize, data: &[u8]);
}

/// Copies words in address order, each atomically: the fast path.
#[derive(Debug, Clone, Copy, Default)]
pub struct InOrder;

impl CopyStrategy for InOrder {
    fn read(&mut self, region: &crate::Region, first: usize, out: &mut [u8]) {
        region.copy_out(first as u64 * 8, out);
    }
    fn write(&mut self, region: &crate::Region, first: usize, data: &[u8]) {
        region.copy_in(first as u64 * 8, data);
    }
}

/// Handle of verb `i` (for backends and counters that walk a batch).
pub fn handle(i: usize) -> OpHandle {
    OpHandle(i)
}
