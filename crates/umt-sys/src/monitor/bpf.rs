//! The Bpf backend: BPF programs on the scheduler's tracepoints keep each CPU's ready count of
//! this process's registered threads in memory the process maps, and wake a waiter only when
//! a CPU it armed drops to no ready thread (`README.md`, "The Bpf backend", steps B1–B6).
//!
//! The program is `bpf/umt_counts.bpf.c`, compiled by clang at build time (`build.rs`) and
//! loaded with aya: a pure-Rust loader, so the crate needs no C library (libbpf, libelf) to
//! build or run, only clang for the program itself. A build without clang still compiles; the
//! backend then reports itself unavailable and says why.

use nix::sys::epoll::Epoll;

use crate::backend::{BackendKind, Unavailable};
use crate::cpu::CpuId;
use crate::error::Result;
use crate::event::MonitorEvent;
use crate::monitor::handoff::Handoff;
use crate::monitor::ops::{Backend, Context, Held, Totals};

/// Most threads one monitor can register at once (the size of the programs' thread table).
pub const BPF_MAX_THREADS: u32 = 16384;

#[cfg(umt_bpf)]
pub(crate) use imp::BpfBackend;

#[cfg(not(umt_bpf))]
pub(crate) use stub::BpfBackend;

/// Whether the Bpf backend can run here: loads and attaches the programs, then drops them.
pub(crate) fn probe() -> std::result::Result<(), Unavailable> {
    match BpfBackend::open(crate::cpu::possible_cpus().unwrap_or(1), None, None) {
        Ok(_) => Ok(()),
        Err(crate::Error::Unavailable(u)) => Err(u),
        Err(e) => Err(Unavailable::new(BackendKind::Bpf, e.to_string())),
    }
}

#[cfg(not(umt_bpf))]
mod stub {
    use super::*;

    /// Never built: this build has no BPF program (see `UMT_BPF_UNAVAILABLE`).
    pub(crate) enum BpfBackend {}

    impl BpfBackend {
        pub(crate) fn open(
            _possible: usize,
            _epoll: Option<&Epoll>,
            _handoff: Option<i32>,
        ) -> Result<BpfBackend> {
            Err(
                Unavailable::new(BackendKind::Bpf, env!("UMT_BPF_UNAVAILABLE"))
                    .with_fix(
                        "install clang (Debian: apt-get install clang), then `cargo clean -p \
                     umt-sys` and rebuild; umt-sys's `bpf` feature is on by default",
                    )
                    .into(),
            )
        }
        pub(crate) fn register(&self, _tid: i32) -> Result<()> {
            match *self {}
        }
        pub(crate) fn unregister(&self, _tid: i32) -> Result<()> {
            match *self {}
        }
        pub(crate) fn ready(&self, _cpu: CpuId) -> i64 {
            match *self {}
        }
        pub(crate) fn watch_cpu(&self, _cpu: CpuId, _set: &Epoll) -> Result<()> {
            match *self {}
        }
        pub(crate) fn arm_cpu(&self, _cpu: CpuId) -> bool {
            match *self {}
        }
        pub(crate) fn arm_all(&self) -> bool {
            match *self {}
        }
        pub(crate) fn disarm_cpu(&self, _cpu: CpuId) {
            match *self {}
        }
        pub(crate) fn disarm_all(&self) {
            match *self {}
        }
        pub(crate) fn drain_cpu(&self, _cpu: CpuId) -> usize {
            match *self {}
        }
        pub(crate) fn drain(&self, _sink: &mut dyn FnMut(MonitorEvent)) -> usize {
            match *self {}
        }
        pub(crate) fn totals(&self) -> Totals {
            match *self {}
        }
        pub(crate) fn oversubscribed_ns(&self, _cpu: CpuId) -> Option<u64> {
            match *self {}
        }
        pub(crate) fn exited(&self) -> Vec<i32> {
            match *self {}
        }
        pub(crate) fn handoff(&self) -> Handoff {
            match *self {}
        }
        pub(crate) fn handoff_slot(&self, _tid: i32) -> Option<u32> {
            match *self {}
        }
        pub(crate) fn set_handoff_flags(&self, _slot: u32, _flags: u32) {
            match *self {}
        }
    }
}

impl Backend for BpfBackend {
    /// The programs keep the counts in the shared `counts` array.
    fn counts_are_live(&self) -> bool {
        true
    }

    fn register(&self, _cx: &Context, tid: i32) -> Result<()> {
        self.register(tid)
    }

    fn unregister(&self, _cx: &Context, tid: i32) -> Result<()> {
        self.unregister(tid)
    }

    /// The reap before a registration found what the programs marked exited; a registration
    /// the programs never saw exit (one that failed halfway) is cleared as an unregister.
    fn retire_stale(&self, _cx: &Context, tid: i32) {
        let _ = self.unregister(tid);
    }

    fn reap_exited(&self, cx: &Context) {
        cx.forget_exited(self.exited());
    }

    /// The counts are live: the events only describe them, for watchers (B4).
    fn drain(&self, cx: &Context, out: &mut dyn FnMut(MonitorEvent)) -> Result<()> {
        self.drain(out);
        cx.forget_exited(self.exited());
        Ok(())
    }

    /// The counts are live: nothing to drain.
    fn drain_current_thread(&self, _cx: &Context) -> Result<usize> {
        Ok(0)
    }

    /// The wake-ups read; the counts need no drain (B4).
    fn drain_cpu(&self, _cx: &Context, cpu: CpuId, _held: Held) -> Result<usize> {
        Ok(self.drain_cpu(cpu))
    }

    fn watch_cpu(&self, cpu: CpuId, set: &Epoll) -> Result<()> {
        self.watch_cpu(cpu, set)
    }

    fn arm_all(&self) -> Result<bool> {
        Ok(self.arm_all())
    }

    fn disarm_all(&self) {
        self.disarm_all()
    }

    /// B3.
    fn arm_cpu(&self, cpu: CpuId) -> Result<bool> {
        Ok(self.arm_cpu(cpu))
    }

    fn disarm_cpu(&self, cpu: CpuId) {
        self.disarm_cpu(cpu)
    }

    /// One load from the shared counts.
    fn ready(&self, _cx: &Context, cpu: CpuId) -> i64 {
        self.ready(cpu)
    }

    fn ready_counts(&self, cx: &Context) -> Vec<i64> {
        (0..cx.possible_cpus()).map(|c| self.ready(c)).collect()
    }

    fn totals(&self) -> Option<Totals> {
        Some(self.totals())
    }

    fn oversubscribed(&self, cpu: CpuId) -> Option<std::time::Duration> {
        self.oversubscribed_ns(cpu)
            .map(std::time::Duration::from_nanos)
    }

    fn handoff(&self, _asked: bool) -> Handoff {
        self.handoff()
    }

    fn handoff_slot(&self, tid: i32) -> Option<u32> {
        self.handoff_slot(tid)
    }

    fn set_handoff_flags(&self, slot: u32, flags: u32) {
        self.set_handoff_flags(slot, flags)
    }
}

#[cfg(umt_bpf)]
mod imp {
    use std::collections::HashMap;
    use std::os::fd::AsFd;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

    use aya::maps::perf::{PerfEvent, PerfEventArray, PerfEventArrayBuffer};
    use aya::maps::{HashMap as BpfHashMap, MapData};
    use aya::programs::BtfTracePoint;
    use aya::{Btf, Ebpf};
    use nix::sys::epoll::{EpollEvent, EpollFlags};

    use super::*;
    use crate::abi::Events;
    use crate::error::Error;
    use crate::event::Cause;
    use crate::monitor::bpf_loader::{self, Settings};
    use crate::monitor::over;
    use crate::monitor::shared::Shared;

    /// The fix for a missing privilege.
    const PRIVILEGE_FIX: &str = "run as root, or grant the binary the capabilities: \
         sudo setcap cap_bpf,cap_perfmon+ep BINARY";

    /// The compiled program, embedded.
    static OBJECT: &[u8] = include_bytes!(env!("UMT_BPF_OBJECT"));

    /// The programs and the tracepoints they attach to.
    const PROGRAMS: &[(&str, &str)] = &[
        ("umt_switch", "sched_switch"),
        ("umt_wakeup", "sched_wakeup"),
        ("umt_wakeup_new", "sched_wakeup_new"),
        ("umt_migrate", "sched_migrate_task"),
        ("umt_exit", "sched_process_exit"),
    ];

    /// The directed handoff's programs (P1–P4 of `README.md`), loaded only on request.
    const HANDOFF_PROGRAMS: &[(&str, &str)] = &[
        ("umt_handoff_switch", "sched_switch"),
        ("umt_handoff_wakeup", "sched_wakeup"),
    ];

    /// The kernel functions the handoff program calls, by the placeholder each call carries
    /// in its immediate (`KFUNC_CALL` in the program).
    const KFUNCS: &[(u32, &str)] = &[
        (0x55aa_0001, "bpf_task_from_pid"),
        (0x55aa_0002, "bpf_send_signal_task"),
        (0x55aa_0003, "bpf_task_release"),
    ];

    /// The kernel's BTF type information (`/sys/kernel/btf/vmlinux`), parsed once per
    /// process (`bpf_loader.rs`); a failure says what to do.
    fn kernel_btf() -> Result<&'static Btf> {
        crate::monitor::bpf_loader::kernel_btf().map_err(|e| {
            let mut text = format!("reading the kernel's BTF type information: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                text.push_str(&format!(": {s}"));
                source = s.source();
            }
            btf_fix(&text, Unavailable::new(BackendKind::Bpf, text.clone())).into()
        })
    }

    /// Why this thread cannot load tracing programs, from its effective capabilities
    /// (`CapEff` in `/proc/thread-self/status`): it needs CAP_SYS_ADMIN, or CAP_BPF and
    /// CAP_PERFMON (Linux >= 5.8). Said before the BTF is read, which an unprivileged
    /// process paid on every open only to fail at the load (`Auto` tries Bpf first). `None`
    /// where the capabilities cannot be read: the load then says.
    fn missing_privilege() -> Option<String> {
        // Capabilities are per thread: the calling thread's, which loads the programs.
        let status = std::fs::read_to_string("/proc/thread-self/status")
            .or_else(|_| std::fs::read_to_string("/proc/self/status"))
            .ok()?;
        let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
        let caps = u64::from_str_radix(hex.trim(), 16).ok()?;
        (!may_load_tracing(caps)).then(|| {
            "loading tracing programs: this process has neither CAP_SYS_ADMIN nor both \
             CAP_BPF and CAP_PERFMON"
                .to_owned()
        })
    }

    /// Whether a thread with the effective capabilities `caps` (a bit per capability) may
    /// load and attach tracing programs: CAP_SYS_ADMIN, or both CAP_BPF and CAP_PERFMON.
    fn may_load_tracing(caps: u64) -> bool {
        const CAP_SYS_ADMIN: u32 = 21;
        const CAP_PERFMON: u32 = 38;
        const CAP_BPF: u32 = 39;
        let has = |cap: u32| caps & (1u64 << cap) != 0;
        has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
    }

    /// A copy of `object` whose kfunc calls carry the running kernel's BTF ids, or why it
    /// cannot have them. A call is the instruction `0x85` (BPF_JMP | BPF_CALL) with src_reg 2
    /// (BPF_PSEUDO_KFUNC_CALL), off 0 and the placeholder as its immediate (little-endian, as
    /// clang writes for `-target bpf` on this machine). Only the programs' code is searched,
    /// one eight-byte instruction at a time from the start of each executable section.
    fn resolve_kfuncs(object: &[u8], btf: &Btf) -> std::result::Result<Vec<u8>, String> {
        use object::{Object as _, ObjectSection as _, SectionKind};
        let file = object::File::parse(object)
            .map_err(|e| format!("umt-sys's BPF object does not parse: {e}"))?;
        let code: Vec<std::ops::Range<usize>> = file
            .sections()
            .filter(|s| s.kind() == SectionKind::Text)
            .filter_map(|s| s.file_range())
            .filter_map(|(at, len)| {
                Some(usize::try_from(at).ok()?..usize::try_from(at + len).ok()?)
            })
            .collect();
        let mut out = object.to_vec();
        for &(placeholder, name) in KFUNCS {
            let id = btf
                .id_by_type_name_kind(name, aya_obj::btf::BtfKind::Func)
                .map_err(|_| {
                    format!(
                        "this kernel has no {name} kfunc (Linux 6.13 added \
                         bpf_send_signal_task)"
                    )
                })?;
            let mut want = [0u8; 8];
            want[0] = 0x85;
            want[1] = 0x20;
            want[4..].copy_from_slice(&placeholder.to_le_bytes());
            let mut found = 0;
            for range in &code {
                let Some(section) = out.get_mut(range.clone()) else {
                    continue;
                };
                for insn in section.chunks_exact_mut(8) {
                    if insn == want {
                        insn[4..].copy_from_slice(&id.to_le_bytes());
                        found += 1;
                    }
                }
            }
            if found == 0 {
                return Err(format!("the program has no call to {name}"));
            }
        }
        Ok(out)
    }

    /// A thread's state word (`slots` in the program): its CPU, and flags.
    const ST_CPU_MASK: u64 = 0xffff_ffff;
    const ST_READY: u64 = 1 << 32;
    const ST_ACTIVE: u64 = 1 << 33;
    const ST_EXITED: u64 = 1 << 34;
    /// Bits 40..64: a registration generation, so that a program still holding a slot that
    /// was given back and taken again cannot match the new word with an old one.
    const ST_GEN_SHIFT: u32 = 40;

    /// `struct umt_cpu` of the program: one per possible CPU, two cache lines each.
    #[repr(C, align(64))]
    pub(crate) struct CpuCounts {
        ready: AtomicI64,
        blocks: AtomicU64,
        unblocks: AtomicU64,
        migrations: AtomicU64,
        drops: AtomicU64,
        notes: AtomicU64,
        armed: AtomicU64,
        handoffs: AtomicU64,
        /// The time above one (`over.rs`): the ended episodes' nanoseconds, minus the start
        /// of the one under way.
        over: AtomicI64,
        _pad: [u64; 7],
    }

    const _: () = assert!(std::mem::size_of::<CpuCounts>() == 128);

    /// The programs' clock (`bpf_ktime_get_ns`, the kernel's `CLOCK_MONOTONIC`), read by the
    /// process: its own `CLOCK_MONOTONIC` less its time namespace's offset
    /// ([`monotonic_offset_ns`]). `None` if the clock cannot be read.
    // `time_t` and `c_long` are 32 bits wide on some targets.
    #[allow(clippy::unnecessary_cast)]
    fn kernel_clock(offset_ns: i64) -> Option<i64> {
        let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).ok()?;
        (t.tv_sec() as i64)
            .checked_mul(1_000_000_000)?
            .checked_add(t.tv_nsec() as i64)?
            .checked_sub(offset_ns)
    }

    /// This process's time namespace's offset of `CLOCK_MONOTONIC`, in nanoseconds: 0
    /// without time namespaces (no `/proc/self/ns/time`) or where `/proc/self/timens_offsets`
    /// is absent; `None` where it cannot be known: the file describes the namespace of the
    /// process's future children, which after `unshare(CLONE_NEWTIME)` is not its own (the
    /// two namespace links then differ), or it does not parse.
    fn monotonic_offset_ns() -> Option<i64> {
        use std::os::unix::fs::MetadataExt;
        // Without /proc (a sandbox) nothing can be told: not "no time namespaces".
        std::fs::metadata("/proc/self/ns").ok()?;
        let own = match std::fs::metadata("/proc/self/ns/time") {
            Ok(m) => m.ino(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(0),
            Err(_) => return None,
        };
        let children = std::fs::metadata("/proc/self/ns/time_for_children")
            .ok()?
            .ino();
        if own != children {
            return None;
        }
        match std::fs::read_to_string("/proc/self/timens_offsets") {
            Ok(text) => parse_monotonic_offset(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(0),
            Err(_) => None,
        }
    }

    /// The `monotonic <secs> <nanosecs>` line of `timens_offsets`, in nanoseconds.
    fn parse_monotonic_offset(text: &str) -> Option<i64> {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some("monotonic"))?;
        let mut fields = line.split_whitespace().skip(1);
        let secs: i64 = fields.next()?.parse().ok()?;
        let nanos: i64 = fields.next()?.parse().ok()?;
        secs.checked_mul(1_000_000_000)?.checked_add(nanos)
    }

    /// The process-side registration table: which slot each registered thread has.
    #[derive(Default)]
    struct Slots {
        of_tid: HashMap<i32, u32>,
        free: Vec<u32>,
        next: u32,
        generation: u64,
    }

    /// The inode number of the initial PID namespace (`PROC_PID_INIT_INO`,
    /// `include/linux/proc_ns.h`): fixed by the kernel.
    const INIT_PID_NS: u64 = 0xEFFF_FFFC;

    /// The process's PID namespace as the programs identify it: 0 for the initial one (where
    /// the ids the process sees are the kernel's), else the namespace's inode number.
    fn pid_namespace() -> Result<u32> {
        use std::os::unix::fs::MetadataExt;
        let ino = std::fs::metadata("/proc/self/ns/pid")
            .map_err(|e| {
                Unavailable::new(
                    BackendKind::Bpf,
                    format!(
                        "cannot tell which PID namespace this process is in: /proc/self/ns/pid: {e}"
                    ),
                )
                .with_fix("mount /proc (in a container, its own PID namespace's /proc)")
            })?
            .ino();
        if ino == INIT_PID_NS {
            return Ok(0);
        }
        u32::try_from(ino).map_err(|_| {
            Unavailable::new(
                BackendKind::Bpf,
                format!(
                    "the PID namespace's inode number {ino} does not fit the programs' 32 bits"
                ),
            )
            .into()
        })
    }

    /// The loaded, attached programs and the process's views of their maps.
    pub(crate) struct BpfBackend {
        /// Owns the programs (attached while it lives) and the maps not taken out of it.
        _ebpf: Ebpf,
        /// Per possible CPU: the counters the programs keep.
        counts: Shared<CpuCounts>,
        /// Per slot: a registered thread's state word.
        slots: Shared<AtomicU64>,
        /// Thread id -> slot, read by the programs.
        threads: Mutex<BpfHashMap<MapData, u32, u32>>,
        /// Slot allocation and the registered threads.
        table: Mutex<Slots>,
        /// Per possible CPU: its wake-up buffer (none for a CPU that is offline).
        notes: Box<[Option<Mutex<PerfEventArrayBuffer<MapData>>>]>,
        /// Per slot: the handoff flags the process writes (P2), when the handoff is on.
        in_task: Option<Shared<AtomicU64>>,
        /// Whether the directed handoff was asked for, and whether it runs.
        handoff: Handoff,
        /// Per possible CPU: its `drops` when a drain of that CPU last looked.
        seen_cpu: Box<[AtomicU64]>,
        /// Per possible CPU: `drops` when the whole-monitor drain last looked, and the
        /// counters it last reported.
        seen_all: Mutex<Vec<[u64; 4]>>,
        /// Per possible CPU: the process's own changes of its count under way, and the last
        /// whole reading of its time above one (`over.rs`).
        over_side: Box<[(over::Changes, AtomicI64)]>,
        /// The time namespace's offset of `CLOCK_MONOTONIC` ([`kernel_clock`]); `None`:
        /// unknown, and no time above one is reported.
        clock_offset: Option<i64>,
        /// The clock could not be read at one of the process's changes: the words are off,
        /// and no time above one is reported.
        clock_failed: std::sync::atomic::AtomicBool,
    }

    impl BpfBackend {
        /// Loads and attaches the programs for this process. `epoll`: the monitor's wait set,
        /// which gets every CPU's wake-up buffer. `handoff`: the signal of the directed
        /// handoff, if asked for; where it cannot run the backend opens without it and says
        /// why ([`BpfBackend::handoff`]).
        pub(crate) fn open(
            possible: usize,
            epoll: Option<&Epoll>,
            handoff: Option<i32>,
        ) -> Result<BpfBackend> {
            let cpus = u32::try_from(possible).unwrap_or(u32::MAX);
            enough_descriptors(crate::cpu::online_cpus().map_or(possible, |c| c.len()))?;
            if let Some(missing) = missing_privilege() {
                let u = Unavailable::new(BackendKind::Bpf, missing);
                return Err(u
                    .with_fix(format!("it needs CAP_BPF and CAP_PERFMON: {PRIVILEGE_FIX}"))
                    .into());
            }
            let btf = kernel_btf()?;
            let namespace = pid_namespace()?;
            // In a PID namespace of its own the process's ids are not the kernel's: the
            // programs then find its threads through the namespace (`target_ns`).
            let tgid = if namespace == 0 {
                std::process::id() as i32
            } else {
                0
            };
            // The handoff's kfunc calls get their ids; without them its programs stay unloaded
            // (the counting programs never call a kfunc).
            let mut handoff_state = Handoff::Off;
            let mut object = std::borrow::Cow::Borrowed(OBJECT);
            if let Some(signal) = handoff {
                match resolve_kfuncs(OBJECT, btf) {
                    Ok(patched) => {
                        object = std::borrow::Cow::Owned(patched);
                        handoff_state = Handoff::Active { signal };
                    }
                    Err(why) => handoff_state = Handoff::Unavailable(why),
                }
            }
            let signal = match handoff_state {
                Handoff::Active { signal } => signal as u32,
                _ => 0,
            };
            let settings = Settings {
                tgid,
                namespace,
                signal,
                cpus,
                threads: BPF_MAX_THREADS,
            };
            let mut ebpf = bpf_loader::load(btf, settings, &object)
                .map_err(|e| load_error(&format!("loading the programs: {e}"), &e))?;
            for (name, tracepoint) in PROGRAMS {
                let prog: &mut BtfTracePoint = ebpf
                    .program_mut(name)
                    .ok_or_else(|| internal(format!("program {name} missing")))?
                    .try_into()
                    .map_err(|e| internal(format!("program {name}: {e}")))?;
                prog.load(tracepoint, btf)
                    .map_err(|e| load_error(&format!("loading {name}: {e:#}"), &e))?;
                prog.attach()
                    .map_err(|e| load_error(&format!("attaching {name}: {e}"), &e))?;
            }
            if matches!(handoff_state, Handoff::Active { .. })
                && let Err(why) = load_handoff(&mut ebpf, btf)
            {
                handoff_state = Handoff::Unavailable(why);
            }
            let in_task = match handoff_state {
                Handoff::Active { .. } => Some(Shared::map(
                    map_data(&ebpf, "in_task")?.fd().as_fd(),
                    BPF_MAX_THREADS as usize,
                    true,
                    "mmap(BPF array)",
                )?),
                _ => None,
            };
            let counts = Shared::map(
                map_data(&ebpf, "counts")?.fd().as_fd(),
                possible,
                true,
                "mmap(BPF array)",
            )?;
            let slots = Shared::map(
                map_data(&ebpf, "slots")?.fd().as_fd(),
                BPF_MAX_THREADS as usize,
                true,
                "mmap(BPF array)",
            )?;
            let threads = BpfHashMap::try_from(take_map(&mut ebpf, "threads")?)
                .map_err(|e| internal(format!("map threads: {e}")))?;
            let mut array = PerfEventArray::try_from(take_map(&mut ebpf, "notes")?)
                .map_err(|e| internal(format!("map notes: {e}")))?;
            let online = crate::cpu::online_cpus().unwrap_or_default();
            let mut notes = Vec::with_capacity(possible);
            for cpu in 0..possible {
                if !online.contains(&cpu) {
                    notes.push(None);
                    continue;
                }
                let buf = array.open(cpu as u32, Some(1)).map_err(|e| {
                    load_error(&format!("opening the wake-up buffer of CPU {cpu}: {e}"), &e)
                })?;
                if let Some(epoll) = epoll {
                    epoll
                        .add(
                            buf.as_fd(),
                            EpollEvent::new(EpollFlags::EPOLLIN, cpu as u64),
                        )
                        .map_err(|e| Error::os("epoll_ctl(ADD)", e))?;
                }
                notes.push(Some(Mutex::new(buf)));
            }
            Ok(BpfBackend {
                _ebpf: ebpf,
                counts,
                slots,
                threads: Mutex::new(threads),
                table: Mutex::new(Slots::default()),
                notes: notes.into_boxed_slice(),
                in_task,
                handoff: handoff_state,
                seen_cpu: (0..possible).map(|_| AtomicU64::new(0)).collect(),
                seen_all: Mutex::new(vec![[0; 4]; possible]),
                over_side: (0..possible)
                    .map(|_| (over::Changes::default(), AtomicI64::new(0)))
                    .collect(),
                clock_offset: monotonic_offset_ns(),
                clock_failed: std::sync::atomic::AtomicBool::new(false),
            })
        }

        /// B1: the calling thread (`tid`) counts as ready where it runs, from now on. The
        /// monitor reaps exited threads first ([`BpfBackend::exited`]), freeing their slots.
        pub(crate) fn register(&self, tid: i32) -> Result<()> {
            let mut table = lock(&self.table);
            let slot = match table.free.pop() {
                Some(s) => s,
                None if table.next < BPF_MAX_THREADS => {
                    table.next += 1;
                    table.next - 1
                }
                None => {
                    return Err(Error::TooManyThreads {
                        max: BPF_MAX_THREADS,
                    });
                }
            };
            table.generation += 1;
            let gen_bits = (table.generation & 0xff_ffff) << ST_GEN_SHIFT;
            let cpu = crate::cpu::current_cpu()?;
            self.set_handoff_flags(slot, 0);
            let word = self.slot(slot);
            word.store(
                gen_bits | ST_ACTIVE | ST_READY | cpu as u64,
                Ordering::SeqCst,
            );
            self.add_ready(cpu, 1);
            // From here the programs follow the thread; a move since `cpu` was read is
            // settled at its next block, which takes the count back where it was added.
            if let Err(e) = lock(&self.threads).insert(tid as u32, slot, 0) {
                word.store(0, Ordering::SeqCst);
                self.add_ready(cpu, -1);
                table.free.push(slot);
                return Err(internal(format!("adding thread {tid} to the table: {e}")));
            }
            table.of_tid.insert(tid, slot);
            Ok(())
        }

        /// B5: the calling thread stops counting; what it contributed is taken back.
        pub(crate) fn unregister(&self, tid: i32) -> Result<()> {
            let mut table = lock(&self.table);
            let Some(slot) = table.of_tid.remove(&tid) else {
                return Ok(());
            };
            let _ = lock(&self.threads).remove(&(tid as u32));
            // A program that found the slot before the removal may still change the word:
            // whichever compare-and-swap lands second sees the other's result.
            let word = self.slot(slot);
            let mut old = word.load(Ordering::SeqCst);
            while old & ST_ACTIVE != 0 {
                match word.compare_exchange(old, 0, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(_) => {
                        if old & ST_READY != 0 {
                            self.add_ready((old & ST_CPU_MASK) as usize, -1);
                        }
                        break;
                    }
                    Err(now) => old = now,
                }
            }
            word.store(0, Ordering::SeqCst);
            self.set_handoff_flags(slot, 0);
            table.free.push(slot);
            Ok(())
        }

        /// Whether the directed handoff runs, and if not why.
        pub(crate) fn handoff(&self) -> Handoff {
            self.handoff.clone()
        }

        /// The slot of registered thread `tid`, for its handoff flags.
        pub(crate) fn handoff_slot(&self, tid: i32) -> Option<u32> {
            self.in_task.as_ref()?;
            lock(&self.table).of_tid.get(&tid).copied()
        }

        /// P2: the handoff flags of `slot` (one store; nothing without the handoff).
        #[inline]
        pub(crate) fn set_handoff_flags(&self, slot: u32, flags: u32) {
            if let Some(f) = self.in_task.as_ref().and_then(|m| m.get(slot as usize)) {
                f.store(u64::from(flags), Ordering::Release);
            }
        }

        /// Threads that exited while registered (the exit program took their counts back):
        /// their slots are given back, and their ids returned.
        pub(crate) fn exited(&self) -> Vec<i32> {
            let mut table = lock(&self.table);
            let gone: Vec<(i32, u32)> = table
                .of_tid
                .iter()
                .filter(|&(_, &s)| self.slot(s).load(Ordering::SeqCst) & ST_EXITED != 0)
                .map(|(&t, &s)| (t, s))
                .collect();
            for &(tid, slot) in &gone {
                table.of_tid.remove(&tid);
                self.slot(slot).store(0, Ordering::SeqCst);
                self.set_handoff_flags(slot, 0);
                table.free.push(slot);
            }
            gone.into_iter().map(|(t, _)| t).collect()
        }

        /// The live ready count of `cpu`: one load.
        #[inline]
        pub(crate) fn ready(&self, cpu: CpuId) -> i64 {
            self.counts
                .get(cpu)
                .map_or(0, |c| c.ready.load(Ordering::Acquire))
        }

        /// Puts `cpu`'s wake-up buffer in `set`.
        pub(crate) fn watch_cpu(&self, cpu: CpuId, set: &Epoll) -> Result<()> {
            if let Some(Some(buf)) = self.notes.get(cpu) {
                set.add(
                    lock(buf).as_fd(),
                    EpollEvent::new(EpollFlags::EPOLLIN, cpu as u64),
                )
                .map_err(|e| Error::os("epoll_ctl(ADD)", e))?;
            }
            Ok(())
        }

        /// B3: asks for a wake-up at `cpu`'s next drop to zero. Returns `true` if one
        /// happened since `cpu` was last drained: the caller must not sleep.
        pub(crate) fn arm_cpu(&self, cpu: CpuId) -> bool {
            let Some(c) = self.counts.get(cpu) else {
                return false;
            };
            // Dekker with the program: it adds to `drops`, then takes `armed`; this sets
            // `armed`, then reads `drops`. Both are full barriers, so a drop either sees the
            // arm (and wakes) or is seen here.
            c.armed.swap(1, Ordering::SeqCst);
            c.drops.load(Ordering::SeqCst) != self.seen_cpu[cpu].load(Ordering::SeqCst)
        }

        /// [`BpfBackend::arm_cpu`] for every CPU, against the whole-monitor drain's view.
        pub(crate) fn arm_all(&self) -> bool {
            let seen = lock(&self.seen_all);
            let mut dropped = false;
            for cpu in 0..seen.len() {
                if let Some(c) = self.counts.get(cpu) {
                    c.armed.swap(1, Ordering::SeqCst);
                    dropped |= c.drops.load(Ordering::SeqCst) != seen[cpu][3];
                }
            }
            dropped
        }

        /// After a wait: no wake-up is wanted until the next arm.
        pub(crate) fn disarm_cpu(&self, cpu: CpuId) {
            if let Some(c) = self.counts.get(cpu) {
                c.armed.store(0, Ordering::SeqCst);
            }
        }

        pub(crate) fn disarm_all(&self) {
            for cpu in 0..self.counts.len() {
                self.disarm_cpu(cpu);
            }
        }

        /// B4: takes `cpu`'s wake-ups and notes its drops as seen. Returns the wake-ups read.
        pub(crate) fn drain_cpu(&self, cpu: CpuId) -> usize {
            let Some(c) = self.counts.get(cpu) else {
                return 0;
            };
            self.seen_cpu[cpu].store(c.drops.load(Ordering::SeqCst), Ordering::SeqCst);
            self.read_notes(cpu)
        }

        /// Reads (and discards) the records of `cpu`'s wake-up buffer: what they say is in the
        /// counts already; they exist to wake the waiter.
        fn read_notes(&self, cpu: CpuId) -> usize {
            let Some(Some(buf)) = self.notes.get(cpu) else {
                return 0;
            };
            // A buffer another drainer is reading is skipped: it is being emptied.
            let Ok(mut buf) = buf.try_lock() else {
                return 0;
            };
            let mut n = 0;
            buf.for_each(|ev| {
                if let PerfEvent::Sample { .. } = ev {
                    n += 1;
                }
            });
            n
        }

        /// Every CPU's counters since the last call, as events for watchers; every wake-up
        /// buffer emptied. Returns the wake-ups read.
        pub(crate) fn drain(&self, sink: &mut dyn FnMut(MonitorEvent)) -> usize {
            let mut seen = lock(&self.seen_all);
            let mut notes = 0;
            for (cpu, last) in seen.iter_mut().enumerate() {
                notes += self.read_notes(cpu);
                let Some(c) = self.counts.get(cpu) else {
                    continue;
                };
                let now = [
                    c.blocks.load(Ordering::SeqCst),
                    c.unblocks.load(Ordering::SeqCst),
                    c.migrations.load(Ordering::SeqCst),
                    c.drops.load(Ordering::SeqCst),
                ];
                let delta = |i: usize| u32::try_from(now[i] - last[i]).unwrap_or(u32::MAX);
                if let Some(ev) = MonitorEvent::counted(cpu, [last[0], last[1]], [now[0], now[1]]) {
                    sink(ev);
                }
                if now[2] != last[2] {
                    sink(MonitorEvent {
                        cpu,
                        events: Events {
                            blocked: 0,
                            unblocked: delta(2),
                        },
                        cause: Cause::Migration,
                        tid: None,
                        time_ns: None,
                    });
                }
                *last = now;
            }
            notes
        }

        /// How long `cpu`'s ready count has been above one since the programs were loaded,
        /// the episode under way included (`over.rs`, O4-O5); `None` for a CPU out of range
        /// or where the programs' clock cannot be read from here.
        pub(crate) fn oversubscribed_ns(&self, cpu: CpuId) -> Option<u64> {
            let offset = self.clock_offset?;
            if self.clock_failed.load(Ordering::SeqCst) {
                return None;
            }
            let (c, (changes, last)) = (self.counts.get(cpu)?, self.over_side.get(cpu)?);
            // A clock that fails now says `None`; one that fails in the retries below reads
            // 0, with which an open episode's word is refused and a closed one's is exact.
            kernel_clock(offset)?;
            let clock = || kernel_clock(offset).unwrap_or(0);
            Some(over::read(&c.over, changes, last, clock))
        }

        /// The programs' clock for one of the process's changes of a count.
        fn change_clock(&self) -> i64 {
            match kernel_clock(self.clock_offset.unwrap_or(0)) {
                Some(t) => t,
                None => {
                    self.clock_failed.store(true, Ordering::SeqCst);
                    0
                }
            }
        }

        /// The counters summed over every CPU.
        pub(crate) fn totals(&self) -> Totals {
            let mut t = Totals::default();
            for c in (0..self.counts.len()).filter_map(|cpu| self.counts.get(cpu)) {
                t.blocks += c.blocks.load(Ordering::Relaxed);
                t.unblocks += c.unblocks.load(Ordering::Relaxed);
                t.migrations += c.migrations.load(Ordering::Relaxed);
                t.notes += c.notes.load(Ordering::Relaxed);
                t.drops += c.drops.load(Ordering::Relaxed);
                t.handoffs += c.handoffs.load(Ordering::Relaxed);
            }
            t
        }

        fn slot(&self, slot: u32) -> &AtomicU64 {
            self.slots
                .get(slot as usize)
                .expect("slots are allocated below BPF_MAX_THREADS, the mapping's length")
        }

        /// A change of `cpu`'s ready count made by the process (registration): a drop to zero
        /// counts as one, so a waiter's next arm sees it.
        fn add_ready(&self, cpu: CpuId, delta: i64) {
            // `over_side` has one entry per possible CPU, as `counts`.
            if let (Some(c), Some((changes, _))) = (self.counts.get(cpu), self.over_side.get(cpu)) {
                let old =
                    over::add_ready(&c.ready, &c.over, changes, delta, || self.change_clock());
                if delta < 0 && old == 1 {
                    c.drops.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }

    /// Loads the handoff's programs, then attaches them, all or none; on failure, why (the
    /// verifier's first lines), and the counting programs run on without them.
    fn load_handoff(ebpf: &mut Ebpf, btf: &Btf) -> std::result::Result<(), String> {
        let result = (|| {
            for (name, tracepoint) in HANDOFF_PROGRAMS {
                handoff_program(ebpf, name)?
                    .load(tracepoint, btf)
                    .map_err(|e| format!("the kernel refused {name}: {e:#}"))?;
            }
            for (name, _) in HANDOFF_PROGRAMS {
                handoff_program(ebpf, name)?
                    .attach()
                    .map_err(|e| format!("attaching {name}: {e}"))?;
            }
            Ok(())
        })();
        if result.is_err() {
            // Unloading detaches what was attached: none of them stays.
            for (name, _) in HANDOFF_PROGRAMS {
                if let Ok(prog) = handoff_program(ebpf, name) {
                    let _ = prog.unload();
                }
            }
        }
        result
    }

    fn handoff_program<'a>(
        ebpf: &'a mut Ebpf,
        name: &str,
    ) -> std::result::Result<&'a mut BtfTracePoint, String> {
        ebpf.program_mut(name)
            .ok_or_else(|| format!("program {name} missing"))?
            .try_into()
            .map_err(|e| format!("program {name}: {e}"))
    }

    fn map_data<'a>(ebpf: &'a Ebpf, name: &str) -> Result<&'a MapData> {
        match ebpf.map(name) {
            Some(aya::maps::Map::Array(data)) => Ok(data),
            _ => Err(internal(format!("map {name} missing or not an array"))),
        }
    }

    fn take_map(ebpf: &mut Ebpf, name: &str) -> Result<aya::maps::Map> {
        ebpf.take_map(name)
            .ok_or_else(|| internal(format!("map {name} missing")))
    }

    /// A failure that is this crate's fault, not the machine's.
    fn internal(what: String) -> Error {
        Unavailable::new(
            BackendKind::Bpf,
            format!("umt-sys's BPF object is broken: {what}"),
        )
        .with_fix("please report it")
        .into()
    }

    /// Classifies a load or attach failure: missing privilege, or a kernel too old.
    fn load_error(what: &str, e: &dyn std::error::Error) -> Error {
        let mut text = what.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            text.push_str(&format!(": {s}"));
            source = s.source();
        }
        let u = Unavailable::new(BackendKind::Bpf, text.clone());
        load_fix(&text, u).into()
    }

    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fix for a load or attach failure whose message (with its causes) is `text`: missing
    /// privilege, the process's file descriptor limit (loading opens a descriptor per map and
    /// program), or else a kernel too old.
    fn load_fix(text: &str, u: Unavailable) -> Unavailable {
        let has = |s: &str| text.contains(s);
        if has("Operation not permitted") || has("EPERM") || has("Permission denied") {
            u.with_fix(format!("it needs CAP_BPF and CAP_PERFMON: {PRIVILEGE_FIX}"))
        } else if out_of_descriptors(text) {
            u.with_fix(DESCRIPTOR_FIX)
        } else {
            u.with_fix("it needs Linux >= 5.18 with BTF and BPF atomics")
        }
    }

    /// The fix for a failure to read the kernel's BTF whose message (with its causes) is
    /// `text`: the descriptor limit, or else a kernel built without BTF.
    fn btf_fix(text: &str, u: Unavailable) -> Unavailable {
        if out_of_descriptors(text) {
            u.with_fix(DESCRIPTOR_FIX)
        } else {
            u.with_fix("use a kernel built with CONFIG_DEBUG_INFO_BTF=y (Linux >= 5.18)")
        }
    }

    /// File descriptors that opening the backend may hold at once on a machine of `online`
    /// CPUs: the BTF, 7 maps (5 and 2 of global data), 5 programs and their 5 links, aya's
    /// probes of the kernel's features (a few at a time), and a wake-up buffer per online
    /// CPU. Measured: 21 held on 2 CPUs once open; this keeps a margin above that.
    fn descriptors_needed(online: usize) -> u64 {
        32 + online as u64
    }

    /// Refuses to load with fewer descriptors free under the process's limit than
    /// [`descriptors_needed`]. Checked first: aya probes the kernel's features once per
    /// process, at its first load, and a probe that fails for want of a descriptor is taken
    /// for a feature the kernel lacks, for good. Loading then fails later with a misleading
    /// relocation error (issue 30, item 10, found by
    /// `out_of_descriptors_the_reason_names_the_limit`).
    fn enough_descriptors(online: usize) -> Result<()> {
        use nix::sys::resource::{Resource, getrlimit};
        let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
            return Ok(());
        };
        // New descriptors take the lowest free numbers below the limit: those open above it
        // take no place. (The directory read's own descriptor counts: a margin of one.)
        let Ok(open) = std::fs::read_dir("/proc/self/fd").map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
                .filter(|&fd| fd < soft)
                .count() as u64
        }) else {
            return Ok(());
        };
        let (free, needed) = (soft.saturating_sub(open), descriptors_needed(online));
        if free >= needed {
            return Ok(());
        }
        Err(Unavailable::new(
            BackendKind::Bpf,
            format!(
                "not loaded: {free} file descriptors are free under this process's limit of \
                 {soft}, and loading takes up to {needed}"
            ),
        )
        .with_fix(format!(
            "raise the limit (`ulimit -n`, up to the hard limit of {hard}) or close \
             descriptors first"
        ))
        .into())
    }

    /// The fix when the process's descriptor limit stopped the backend.
    const DESCRIPTOR_FIX: &str = "the process ran out of file descriptors while loading (one \
                                  per map and program): raise the limit (`ulimit -n`) or close \
                                  descriptors first";

    /// `text` says the process or the system ran out of file descriptors.
    fn out_of_descriptors(text: &str) -> bool {
        ["Too many open files", "EMFILE", "ENFILE"]
            .iter()
            .any(|s| text.contains(s))
    }

    #[cfg(test)]
    mod load_fix_tests {
        use super::*;

        /// Only the programs' kfunc calls change: every placeholder is gone, and at most the
        /// immediates of the three calls differ from the embedded object.
        #[test]
        fn kfunc_placeholders_are_replaced_in_the_code_and_nowhere_else() {
            let Ok(btf) = Btf::from_sys_fs() else {
                eprintln!("skipped: no kernel BTF here");
                return;
            };
            let patched = match resolve_kfuncs(OBJECT, &btf) {
                Ok(p) => p,
                Err(why) => {
                    eprintln!("skipped: {why}");
                    return;
                }
            };
            assert_eq!(patched.len(), OBJECT.len());
            for &(placeholder, name) in KFUNCS {
                let mut want = [0x85u8, 0x20, 0, 0, 0, 0, 0, 0];
                want[4..].copy_from_slice(&placeholder.to_le_bytes());
                assert!(
                    !patched.windows(8).any(|w| w == want),
                    "{name}: a placeholder is left"
                );
            }
            let changed = OBJECT.iter().zip(&patched).filter(|(a, b)| a != b).count();
            assert!((1..=12).contains(&changed), "{changed} bytes changed");
        }

        /// A time namespace's offsets (`/proc/self/timens_offsets`): the monotonic line, in
        /// nanoseconds, negative ones included; nothing usable reads as no offset.
        #[test]
        fn the_time_namespace_offset_is_read_from_its_monotonic_line() {
            let text = "monotonic  -5 250\nboottime  7 0\n";
            assert_eq!(parse_monotonic_offset(text), Some(-4_999_999_750));
            assert_eq!(parse_monotonic_offset("boottime 1 0\n"), None);
            assert_eq!(parse_monotonic_offset("monotonic x 0\n"), None);
            assert_eq!(parse_monotonic_offset("monotonic 0 0\n"), Some(0));
        }

        #[test]
        fn tracing_programs_need_sys_admin_or_bpf_and_perfmon() {
            assert!(!may_load_tracing(0));
            assert!(may_load_tracing(u64::MAX));
            assert!(may_load_tracing(1 << 21));
            assert!(may_load_tracing((1 << 38) | (1 << 39)));
            assert!(!may_load_tracing(1 << 39), "CAP_BPF alone");
            assert!(!may_load_tracing(1 << 38), "CAP_PERFMON alone");
        }

        #[test]
        fn a_descriptor_shortage_is_named_as_such() {
            let u = |t: &str| {
                load_fix(t, Unavailable::new(BackendKind::Bpf, t.to_string())).to_string()
            };
            assert!(u("loading: Too many open files (os error 24)").contains("ulimit -n"));
            assert!(!u("loading: Too many open files (os error 24)").contains("5.18"));
            assert!(u("attaching: Operation not permitted").contains("CAP_BPF"));
            assert!(u("loading: unknown func bpf_foo").contains("5.18"));
        }

        /// The BTF read fails the same way when the descriptors run out: the fix names the
        /// limit, not a kernel without BTF (issue 30, item 10).
        #[test]
        fn a_descriptor_shortage_reading_btf_is_named_as_such() {
            let u =
                |t: &str| btf_fix(t, Unavailable::new(BackendKind::Bpf, t.to_string())).to_string();
            let short = u(
                "reading the kernel's BTF type information: error parsing /sys/kernel/btf/vmlinux: Too many open files (os error 24)",
            );
            assert!(short.contains("ulimit -n"), "{short}");
            assert!(!short.contains("CONFIG_DEBUG_INFO_BTF"), "{short}");
            assert!(u("reading the kernel's BTF type information: No such file or directory (os error 2)").contains("CONFIG_DEBUG_INFO_BTF"));
        }
    }
}
