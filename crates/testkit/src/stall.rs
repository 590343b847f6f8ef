//! A fabric endpoint that dies in the middle of a doorbell: the way to put
//! a one-sided writer's crash at an exact point of its verbs, in a test,
//! without a hook in the code under test.
//!
//! [`StallEndpoint`] forwards every batch to the endpoint it wraps until
//! the trigger batch: the `nth` batch (from 0) that WRITEs to the trigger
//! region. Of that batch it posts only a prefix chosen by its [`Cut`],
//! then runs the `on_stall` callback (a crash test's child process prints
//! that it is ready to be killed and sleeps; an in-process test just
//! returns) and fails this post and every later one, as a dead process
//! would never post again.

use fabric::{Batch, Counters, Endpoint, FabricError, NodeId, OpKind, RegionId};

/// Which prefix of the trigger batch reaches the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Nothing of it: the client stops just before posting it.
    Nothing,
    /// The first verb only, and only its first half (in whole 8-byte
    /// words) if it is a WRITE: a record torn while it was written.
    HalfOfFirst,
    /// Every verb before the last WRITE to the region, then the first
    /// half (in whole words) of that WRITE: a torn leaf.
    TearLastTo(RegionId),
    /// Every verb before the last WRITE to the region, whole: stopped
    /// between two WRITEs.
    BeforeLastTo(RegionId),
}

/// See the module docs.
pub struct StallEndpoint<E: Endpoint> {
    inner: E,
    trigger: RegionId,
    nth: usize,
    cut: Cut,
    on_stall: Box<dyn FnMut() + Send>,
    dead: bool,
}

impl<E: Endpoint> std::fmt::Debug for StallEndpoint<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StallEndpoint")
            .field("trigger", &self.trigger)
            .field("nth", &self.nth)
            .field("cut", &self.cut)
            .field("dead", &self.dead)
            .finish()
    }
}

impl<E: Endpoint> StallEndpoint<E> {
    /// Wraps `inner`; stalls at the `nth` batch (from 0) with a WRITE to
    /// `trigger`.
    pub fn new(
        inner: E,
        trigger: RegionId,
        nth: usize,
        cut: Cut,
        on_stall: Box<dyn FnMut() + Send>,
    ) -> StallEndpoint<E> {
        StallEndpoint {
            inner,
            trigger,
            nth,
            cut,
            on_stall,
            dead: false,
        }
    }

    /// Whether it has stalled.
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    /// The prefix of `batch` its cut lets through.
    fn prefix(&self, batch: &Batch) -> Batch {
        let ops = batch.ops();
        let mut out = Batch::new();
        let last_to = |r: RegionId| {
            ops.iter()
                .rposition(|o| o.kind == OpKind::Write && o.region == r)
                .unwrap_or(ops.len())
        };
        let (whole, half) = match self.cut {
            Cut::Nothing => (0, None),
            Cut::HalfOfFirst => (0, Some(0)),
            Cut::TearLastTo(r) => (last_to(r), Some(last_to(r))),
            Cut::BeforeLastTo(r) => (last_to(r), None),
        };
        for (i, op) in ops.iter().enumerate().take(whole) {
            copy_op(batch, i, op, &mut out, op.len as usize);
        }
        if let Some(i) = half.filter(|&i| i < ops.len()) {
            let op = &ops[i];
            let len = if op.kind == OpKind::Write {
                (op.len as usize / 2) & !7
            } else {
                op.len as usize
            };
            copy_op(batch, i, op, &mut out, len);
        }
        out
    }
}

fn copy_op(from: &Batch, i: usize, op: &fabric::Op, to: &mut Batch, len: usize) {
    match op.kind {
        OpKind::Read => {
            to.read(op.region, op.offset, op.len);
        }
        OpKind::Write => {
            to.write(op.region, op.offset, &from.op_data(i)[..len]);
        }
        OpKind::Cas => {
            to.cas(op.region, op.offset, op.arg0, op.arg1);
        }
        OpKind::Faa => {
            to.faa(op.region, op.offset, op.arg0);
        }
    }
}

impl<E: Endpoint> Endpoint for StallEndpoint<E> {
    fn post(&mut self, node: NodeId, batch: &mut Batch) -> Result<(), FabricError> {
        if self.dead {
            return Err(FabricError::Disconnected("stalled".into()));
        }
        let writes_trigger = batch
            .ops()
            .iter()
            .any(|o| o.kind == OpKind::Write && o.region == self.trigger);
        if !writes_trigger {
            return self.inner.post(node, batch);
        }
        if self.nth > 0 {
            self.nth -= 1;
            return self.inner.post(node, batch);
        }
        let mut prefix = self.prefix(batch);
        if !prefix.is_empty() {
            self.inner.post(node, &mut prefix)?;
        }
        self.dead = true;
        (self.on_stall)();
        Err(FabricError::Disconnected("stalled".into()))
    }

    fn call(
        &mut self,
        node: NodeId,
        request: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), FabricError> {
        self.inner.call(node, request, reply)
    }

    fn counters(&self) -> Counters {
        self.inner.counters()
    }
}
