//! RCU publication: cells that readers load without locking and writers
//! replace whole, and slots whose content can be frozen ("moved") while a
//! retrainer copies it into a new version.
//!
//! **The RCU rule.** A published structure is never changed in a way a
//! reader must see except through its own seqlocks (records, bins); it is
//! replaced by storing a new `Arc` into the cell that points to it. A
//! reader that loaded the old `Arc` keeps a valid, frozen copy until it
//! lets go; the old version is freed by the last reader's drop (arc-swap
//! defers the free past every reader still holding a guard: the grace
//! period). Writers never write into a version that has been frozen for
//! a copy: every writable word of a frozen version carries a "moved" mark
//! set under that word's own lock, after the word's content was copied
//! into the new version (under the same lock); a writer or reader that
//! finds the mark goes on in the new version at once, without waiting
//! for it to be published.
//!
//! Under `--cfg loom` the cell is a loom mutex around the `Arc`, so the
//! model checker explores the publication protocol (the slot lock and the
//! moved mark) rather than arc-swap's internals.

#[cfg(loom)]
use std::ops::Deref;
use std::sync::Arc;

use crate::sync::{spin_wait, AtomicU8, Ordering};

/// A published `Option<Arc<T>>`.
pub struct ArcCell<T> {
    #[cfg(not(loom))]
    inner: arc_swap::ArcSwapOption<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<Option<Arc<T>>>,
}

/// What [`ArcCell::load`] returns: the published value, kept alive.
#[cfg(not(loom))]
pub type Loaded<T> = arc_swap::Guard<Option<Arc<T>>>;

/// What [`ArcCell::load`] returns: the published value, kept alive.
#[cfg(loom)]
pub struct Loaded<T>(Option<Arc<T>>);

#[cfg(loom)]
impl<T> Deref for Loaded<T> {
    type Target = Option<Arc<T>>;
    fn deref(&self) -> &Option<Arc<T>> {
        &self.0
    }
}

impl<T> ArcCell<T> {
    /// A cell holding `value`.
    pub fn new(value: Option<Arc<T>>) -> Self {
        ArcCell {
            #[cfg(not(loom))]
            inner: arc_swap::ArcSwapOption::new(value),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
        }
    }

    /// The current value; never blocks outside loom.
    pub fn load(&self) -> Loaded<T> {
        #[cfg(not(loom))]
        return self.inner.load();
        #[cfg(loom)]
        return Loaded(self.inner.lock().unwrap().clone());
    }

    /// Publishes `value`; the old one is freed when its last reader lets go.
    pub fn store(&self, value: Option<Arc<T>>) {
        #[cfg(not(loom))]
        self.inner.store(value);
        #[cfg(loom)]
        {
            *self.inner.lock().unwrap() = value;
        }
    }
}

impl<T> std::fmt::Debug for ArcCell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ArcCell")
    }
}

const LOCKED: u8 = 1;
const MOVED: u8 = 2;

/// A slot under a trained record: empty, or what holds the keys between
/// that record and the next (a level bin or a small model). Its content
/// changes only under its lock; a retrainer that copies the slot into a
/// new version marks it moved, after which no writer changes it.
pub struct Slot<T> {
    state: AtomicU8,
    cell: ArcCell<T>,
}

/// The slot was frozen for a retraining: retry from the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved;

impl<T> Slot<T> {
    /// A slot holding `content`.
    pub fn new(content: Option<Arc<T>>) -> Self {
        Slot {
            state: AtomicU8::new(0),
            cell: ArcCell::new(content),
        }
    }

    /// The content, without locking.
    pub fn load(&self) -> Loaded<T> {
        self.cell.load()
    }

    /// Whether a retrainer has frozen this slot.
    pub fn is_moved(&self) -> bool {
        self.state.load(Ordering::Acquire) & MOVED != 0
    }

    fn lock(&self) -> u8 {
        // Held only for a load and a store of the cell, so the wait is
        // bounded by the holder's few instructions.
        let mut round = 0;
        loop {
            let s = self.state.load(Ordering::Relaxed);
            if s & LOCKED == 0
                && self
                    .state
                    .compare_exchange(s, s | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return s;
            }
            spin_wait(&mut round);
        }
    }

    fn unlock(&self, state: u8) {
        self.state.store(state & !LOCKED, Ordering::Release);
    }

    /// Under the slot lock, unless the slot is moved: `f` sees the content
    /// and may return a replacement to publish.
    pub fn update<R>(
        &self,
        f: impl FnOnce(&Option<Arc<T>>) -> (Option<Option<Arc<T>>>, R),
    ) -> Result<R, Moved> {
        let s = self.lock();
        if s & MOVED != 0 {
            self.unlock(s);
            return Err(Moved);
        }
        let current = self.cell.load();
        let (replace, r) = f(&current);
        drop(current);
        if let Some(new) = replace {
            self.cell.store(new);
        }
        self.unlock(s);
        Ok(r)
    }

    /// Freezes the slot for a copy and returns its content: no writer
    /// changes it afterwards.
    pub fn seal(&self) -> Option<Arc<T>> {
        self.seal_with(Clone::clone)
    }

    /// Freezes the slot, handing its content to `copy` under the slot's
    /// lock first: `copy` stores it into the new version, so a writer
    /// that finds the slot moved (it takes the same lock) finds the copy
    /// already there and goes on in the new version without waiting.
    pub fn seal_with<R>(&self, copy: impl FnOnce(&Option<Arc<T>>) -> R) -> R {
        let s = self.lock();
        debug_assert!(s & MOVED == 0, "a slot is frozen once");
        let content = self.cell.load();
        let r = copy(&content);
        drop(content);
        self.unlock(s | MOVED);
        r
    }
}

impl<T> std::fmt::Debug for Slot<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("moved", &self.is_moved())
            .finish()
    }
}
