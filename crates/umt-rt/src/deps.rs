//! Dataflow dependencies between the tasks of one scope (OmpSs-2 style `in` / `out`).
//!
//! A task declares the keys it reads and writes. It runs after every earlier task of its scope
//! that conflicts with it: read after write, write after read, write after write. Keys are
//! hashed to 64 bits; two keys that collide only add an ordering, never remove one, and
//! dependencies always point from earlier to later tasks, so a collision cannot deadlock.
//!
//! A task that panics *fails*, and so does every task that depends on a failed one: a failed
//! task whose turn comes is cancelled, not run, since what it would read is partial. The
//! scope counts the cancelled tasks and re-raises the first panic once all have finished.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::job::Job;

/// How a task uses a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The task reads the data named by the key (`in`).
    Read,
    /// The task writes (or reads and writes) the data named by the key (`out` / `inout`).
    Write,
}

/// One declared access: a key and how the task uses it.
///
/// ```
/// use umt_rt::Access;
/// let deps = [Access::read((3, 4)), Access::write("halo")];
/// assert_eq!(deps[0].mode(), umt_rt::Mode::Read);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Access {
    key: u64,
    mode: Mode,
}

impl Access {
    /// The task reads `key`.
    pub fn read(key: impl Hash) -> Access {
        Access {
            key: hash_key(&key),
            mode: Mode::Read,
        }
    }

    /// The task writes (or updates) `key`.
    pub fn write(key: impl Hash) -> Access {
        Access {
            key: hash_key(&key),
            mode: Mode::Write,
        }
    }

    /// How the task uses the key.
    pub fn mode(&self) -> Mode {
        self.mode
    }
}

fn hash_key(key: &impl Hash) -> u64 {
    // SipHash with fixed keys: the same key hashes the same in every task and run.
    let mut h = std::hash::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

/// A task with dependencies, until it has finished.
pub(crate) struct DepNode {
    /// Unfinished predecessors, plus one while the task is being registered.
    pending: AtomicUsize,
    /// A predecessor failed: the task must be cancelled, not run. Set before the
    /// predecessor's release, so the release that makes the task ready also shows it.
    cancelled: AtomicBool,
    state: Mutex<NodeState>,
}

struct NodeState {
    done: bool,
    /// Finished by panicking, or cancelled: its successors must not run.
    failed: bool,
    successors: Vec<Arc<DepNode>>,
    job: Option<Job>,
}

impl DepNode {
    pub(crate) fn new() -> Arc<DepNode> {
        Arc::new(DepNode {
            pending: AtomicUsize::new(1),
            cancelled: AtomicBool::new(false),
            state: Mutex::new(NodeState {
                done: false,
                failed: false,
                successors: Vec::new(),
                job: None,
            }),
        })
    }

    fn lock(&self) -> crate::sync::Counted<std::sync::MutexGuard<'_, NodeState>> {
        crate::sync::lock_std(&self.state)
    }

    /// Stores the job to run once every predecessor has finished.
    pub(crate) fn set_job(&self, job: Job) {
        self.lock().job = Some(job);
    }

    /// Drops one hold; returns the job when it was the last.
    pub(crate) fn release(&self) -> Option<Job> {
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.lock().job.take()
        } else {
            None
        }
    }

    /// Whether a predecessor failed, so the task must be cancelled instead of run.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Marks the task finished, `failed` if it panicked or was cancelled (its successors are
    /// then cancelled too); returns the successors that became ready, with their jobs.
    pub(crate) fn finish(&self, failed: bool) -> Vec<Job> {
        let successors = {
            let mut s = self.lock();
            s.done = true;
            s.failed = failed;
            std::mem::take(&mut s.successors)
        };
        if failed {
            for s in &successors {
                s.cancelled.store(true, Ordering::Release);
            }
        }
        successors.iter().filter_map(|s| s.release()).collect()
    }

    /// Makes `succ` wait for this task unless it is already finished; if it finished by
    /// failing, `succ` is cancelled.
    fn add_successor(&self, succ: &Arc<DepNode>) {
        let mut s = self.lock();
        if !s.done {
            succ.pending.fetch_add(1, Ordering::AcqRel);
            s.successors.push(succ.clone());
        } else if s.failed {
            succ.cancelled.store(true, Ordering::Release);
        }
    }
}

#[derive(Default)]
struct KeyState {
    last_writer: Option<Arc<DepNode>>,
    readers: Vec<Arc<DepNode>>,
}

/// The scope's record of who last wrote and who read each key since.
#[derive(Default)]
pub(crate) struct DepTable {
    keys: HashMap<u64, KeyState>,
}

impl DepTable {
    /// Registers `node`'s accesses (in spawn order) and links it after its predecessors.
    pub(crate) fn register(&mut self, node: &Arc<DepNode>, accesses: &[Access]) {
        let mut preds: Vec<Arc<DepNode>> = Vec::new();
        let add = |p: &Arc<DepNode>, preds: &mut Vec<Arc<DepNode>>| {
            if !Arc::ptr_eq(p, node) && !preds.iter().any(|q| Arc::ptr_eq(q, p)) {
                preds.push(p.clone());
            }
        };
        for a in accesses {
            let k = self.keys.entry(a.key).or_default();
            match a.mode {
                Mode::Read => {
                    if let Some(w) = &k.last_writer {
                        add(w, &mut preds);
                    }
                    if !k.readers.iter().any(|r| Arc::ptr_eq(r, node)) {
                        k.readers.push(node.clone());
                    }
                }
                Mode::Write => {
                    if let Some(w) = &k.last_writer {
                        add(w, &mut preds);
                    }
                    for r in k.readers.drain(..) {
                        add(&r, &mut preds);
                    }
                    k.last_writer = Some(node.clone());
                }
            }
        }
        for p in &preds {
            p.add_successor(node);
        }
    }
}
