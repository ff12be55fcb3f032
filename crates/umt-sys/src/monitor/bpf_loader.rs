//! The kernel's BTF and aya's loaders, kept per process for every open of the Bpf backend.
//!
//! aya's `EbpfLoader::new` parses `/sys/kernel/btf/vmlinux` (some 5 MB: 20-35 ms in a release
//! build, ten times that in a debug one) each time a loader is made, even when `btf()` then
//! replaces that parse with the caller's; the backend has its own parse besides (the
//! tracepoints' and the kfuncs' ids). A loader made per open made every `Runtime::new` pay a
//! parse. Here the backend's parse is kept, and loaders go back to a pool once they have
//! loaded: an open takes one (or makes one, when all are in use), so a process makes about as
//! many as it ever runs opens at once. The first [`kernel_btf`] also makes the first loader
//! on a thread of its own, so that its parse runs beside the backend's where a second CPU is
//! free (where it fails, short of descriptors, the loader only lacks a BTF the load gives it).
//! Not aya's one-time feature probe: a probe that fails for want of a descriptor is kept for
//! the process's life, so it runs at the first load, after the descriptor check.
//!
//! Fork: the pool's lock is held only to take or give back a loader (a pop or a push, and the
//! lookup of the settings kept), never under a parse or a load, and it is only ever tried, a
//! bounded number of times: a fork child that inherited it locked by a thread it does not
//! have makes a loader of its own. What this module cannot make safe is aya's own one-time
//! feature probe (a `LazyLock` run at a process's first load, a dozen `bpf()` calls): a child
//! forked while another thread runs it blocks at its first load.

use std::sync::{Mutex, MutexGuard, OnceLock, TryLockError};

use aya::{Btf, BtfError, Ebpf, EbpfError, EbpfLoader};

/// What one open gives the programs: their globals, and the sizes of the maps sized per
/// machine. Every field is set on every load, so nothing one open set reaches the next
/// through a kept loader: a new setting goes here, not in a caller.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Settings {
    /// `target_tgid`: the process id, 0 in a PID namespace of its own.
    pub(crate) tgid: i32,
    /// `target_ns`: the PID namespace's inode number, 0 for the initial one.
    pub(crate) namespace: u32,
    /// `handoff_signal`: the directed handoff's signal, 0 when it is off.
    pub(crate) signal: u32,
    /// Entries of the maps with one per possible CPU.
    pub(crate) cpus: u32,
    /// Entries of the maps with one per thread.
    pub(crate) threads: u32,
}

/// `handoff_value`: the value the handoff's signal carries, the same for every open.
static HANDOFF_VALUE: u64 = crate::monitor::handoff::HANDOFF_SIGNAL_VALUE as u64;

/// Sets every setting of `s`, and `btf`, on `loader` (by reference: a kept loader keeps the
/// references until the next load replaces them).
fn apply<'l, 'a>(
    loader: &'l mut EbpfLoader<'a>,
    btf: &'a Btf,
    s: &'a Settings,
) -> &'l mut EbpfLoader<'a> {
    loader
        .btf(Some(btf))
        .map_max_entries("counts", s.cpus)
        .map_max_entries("notes", s.cpus)
        .map_max_entries("running", s.cpus)
        .map_max_entries("slots", s.threads)
        .map_max_entries("in_task", s.threads)
        .map_max_entries("threads", s.threads)
        .override_global("target_tgid", &s.tgid, true)
        .override_global("target_ns", &s.namespace, true)
        .override_global("handoff_signal", &s.signal, true)
        .override_global("handoff_value", &HANDOFF_VALUE, true)
}

/// The kept loaders, and every [`Settings`] a kept loader was given (each distinct one once,
/// at most [`KEPT_SETTINGS`]).
#[derive(Default)]
struct Pool {
    loaders: Vec<EbpfLoader<'static>>,
    settings: Vec<&'static Settings>,
}

/// Most distinct [`Settings`] kept. Per process they differ only in the handoff's signal
/// (`MonitorBuilder::directed_handoff` takes any): past this many, a load with settings not
/// kept uses a loader of its own, which keeps nothing.
const KEPT_SETTINGS: usize = 16;

/// How many times the pool's lock is tried before a load goes without it.
const TRIES: u32 = 100;

static BTF: OnceLock<Btf> = OnceLock::new();
static POOL: Mutex<Pool> = Mutex::new(Pool {
    loaders: Vec::new(),
    settings: Vec::new(),
});

/// The pool, locked, or `None` when it stays held through [`TRIES`] tries (a fork child that
/// inherited it held never gets it).
fn pool() -> Option<MutexGuard<'static, Pool>> {
    for _ in 0..TRIES {
        match POOL.try_lock() {
            Ok(guard) => return Some(guard),
            // A panic under the lock leaves whole vectors: a push or a pop happened or not.
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => std::thread::yield_now(),
        }
    }
    None
}

impl Pool {
    /// A kept loader (`None` inside: none is free, make one) and `settings` as kept, or
    /// `None` when they cannot be kept ([`KEPT_SETTINGS`]).
    fn take(
        &mut self,
        settings: Settings,
    ) -> Option<(Option<EbpfLoader<'static>>, &'static Settings)> {
        let kept = match self.settings.iter().find(|s| ***s == settings) {
            Some(kept) => *kept,
            None if self.settings.len() < KEPT_SETTINGS => {
                let kept: &'static Settings = Box::leak(Box::new(settings));
                self.settings.push(kept);
                kept
            }
            None => return None,
        };
        Some((self.loaders.pop(), kept))
    }

    /// Gives a loader back for the next load.
    fn give(&mut self, loader: EbpfLoader<'static>) {
        self.loaders.push(loader);
    }
}

/// The kernel's BTF, parsed once per process and kept; a failure is not kept, the next call
/// tries again. The first call also makes the pool's first loader on a thread beside it
/// (where no thread can start, the first [`load`] makes it).
pub(crate) fn kernel_btf() -> Result<&'static Btf, BtfError> {
    if let Some(btf) = BTF.get() {
        return Ok(btf);
    }
    let (parsed, beside) = std::thread::scope(|s| {
        let beside = std::thread::Builder::new()
            .name("umt-bpf-load".into())
            .spawn_scoped(s, EbpfLoader::new);
        let parsed = Btf::from_sys_fs();
        let beside = match beside {
            Ok(handle) => handle.join().ok(),
            Err(_) => None,
        };
        (parsed, beside)
    });
    let parsed = parsed?;
    // Two first calls at once: both parse, one copy is kept.
    let btf = BTF.get_or_init(|| parsed);
    if let (Some(loader), Some(mut pool)) = (beside, pool()) {
        pool.give(loader);
    }
    Ok(btf)
}

/// Loads `object` with `settings` through a kept loader (made if none is free, given back
/// after), or, where the pool cannot be had or the settings kept, through one made for this
/// load only.
pub(crate) fn load(
    btf: &'static Btf,
    settings: Settings,
    object: &[u8],
) -> Result<Ebpf, EbpfError> {
    let Some((loader, kept)) = pool().and_then(|mut pool| pool.take(settings)) else {
        return apply(&mut EbpfLoader::new(), btf, &settings).load(object);
    };
    let mut loader = loader.unwrap_or_default();
    let loaded = apply(&mut loader, btf, kept).load(object);
    if let Some(mut pool) = pool() {
        pool.give(loader);
    }
    loaded
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opening the backend again (a runtime per test) does not parse the kernel's BTF
    /// again.
    #[test]
    fn the_kernel_btf_is_parsed_once_per_process() {
        let Ok(first) = kernel_btf() else {
            eprintln!("skipped: no kernel BTF here");
            return;
        };
        assert!(std::ptr::eq(first, kernel_btf().unwrap()));
    }

    fn settings() -> Settings {
        Settings {
            tgid: -7,
            namespace: 3,
            signal: 0,
            cpus: 2,
            threads: 4,
        }
    }

    /// A loader given back is the one the next take gets; with none free, the take says to
    /// make one.
    #[test]
    fn a_loader_given_back_is_taken_again() {
        let mut pool = Pool::default();
        assert!(matches!(pool.take(settings()), Some((None, _))));
        pool.give(EbpfLoader::default());
        assert!(matches!(pool.take(settings()), Some((Some(_), _))));
        assert!(pool.loaders.is_empty());
    }

    /// The same settings are kept once however many loads give them, others apart, and no
    /// more than `KEPT_SETTINGS` of them (past that, a take says to go without the pool).
    #[test]
    fn settings_are_kept_once_and_a_few_at_most() {
        let mut pool = Pool::default();
        let s = settings();
        let a = pool.take(s).unwrap().1;
        assert!(std::ptr::eq(a, pool.take(s).unwrap().1));
        let b = pool.take(Settings { signal: 23, ..s }).unwrap().1;
        assert!(!std::ptr::eq(a, b));
        assert_eq!((a.signal, b.signal), (0, 23));
        for signal in 100..100 + KEPT_SETTINGS as u32 - 2 {
            assert!(pool.take(Settings { signal, ..s }).is_some());
        }
        assert_eq!(pool.settings.len(), KEPT_SETTINGS);
        assert!(pool.take(Settings { signal: 7, ..s }).is_none());
        assert!(pool.take(s).is_some(), "kept ones still are");
    }
}
