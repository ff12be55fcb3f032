//! Scheduler-centric I/O waits (`umt_rt::io`): every wait completes once, errors come back
//! typed, a waiter with nothing else to run blocks in the kernel, group polls aggregate.

mod common;

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{monitored_backend, thread_syscall};

use umt_rt::io::{self, EventSource, IoError, Source};
use umt_rt::{BackendKind, Runtime};

/// A scratch file, in a new directory of its own removed on drop (no predictable name in the
/// shared temporary directory, where another user could plant a link). The third field only
/// keeps the directory alive.
struct Scratch(PathBuf, File, #[allow(dead_code)] tempfile::TempDir);

impl Scratch {
    fn new(tag: &str, custom: impl FnOnce(&mut OpenOptions)) -> Option<Scratch> {
        let dir = tempfile::tempdir().ok()?;
        let path = dir.path().join(tag);
        let mut o = OpenOptions::new();
        o.create_new(true).read(true).write(true);
        custom(&mut o);
        let file = o.open(&path).ok()?;
        Some(Scratch(path, file, dir))
    }
}

fn runtime(threads: usize, backend: BackendKind) -> Runtime {
    Runtime::builder()
        .num_threads(threads)
        .monitor(backend)
        .build()
        .unwrap()
}

/// Whether this kernel gives us io_uring (a container may forbid it): else the waits fall
/// back to blocking calls, which the tests below still check for results, not for counts.
fn have_uring() -> bool {
    umt_sys::uring::Ring::new(2).is_ok()
}

#[test]
fn reads_and_writes_return_what_was_written_inside_and_outside_a_runtime() {
    let f = Scratch::new("rw", |_| {}).unwrap();
    let rt = runtime(2, BackendKind::Disabled);
    rt.install(|| {
        rt.scope(|s| {
            for i in 0..64u64 {
                let file = &f.1;
                s.spawn(move |_| {
                    let data = [i as u8; 512];
                    io::write_all_at(file, &data, i * 512).unwrap();
                });
            }
        });
    });
    // Outside: the same calls, blocking.
    let mut back = vec![0u8; 64 * 512];
    io::read_exact_at(&f.1, &mut back, 0).unwrap();
    for (i, chunk) in back.chunks(512).enumerate() {
        assert!(chunk.iter().all(|&b| b == i as u8), "block {i}");
    }
    let got = rt.install(|| {
        let mut b = [0u8; 4];
        let n = io::read_at(&f.1, &mut b, 64 * 512 - 2).unwrap();
        (n, b)
    });
    assert_eq!(got.0, 2);
    let eof = rt.install(|| io::read_exact_at(&f.1, &mut [0u8; 8], 64 * 512 - 4));
    assert!(
        matches!(eof, Err(IoError::UnexpectedEof { read: 4, wanted: 8 })),
        "{eof:?}"
    );
    let st = rt.io_stats();
    if have_uring() {
        assert_eq!(st.waits, 64 + 2 + 1, "{st:?}");
        assert_eq!(st.completions, st.waits, "{st:?}");
        assert_eq!(st.fallback_waits, 0);
    }
}

#[test]
fn kernel_errors_come_back_typed() {
    let rt = runtime(2, BackendKind::Disabled);
    let check = |inside: bool| {
        let run = |f: &(dyn Fn() -> Result<(), IoError> + Sync)| {
            if inside { rt.install(f) } else { f() }
        };
        // EBADF: writing a file opened for reading only.
        let ro = Scratch::new(&format!("ro{inside}"), |o| {
            o.write(true);
        })
        .unwrap();
        let reader = File::open(&ro.0).unwrap();
        let e = run(&|| io::write_all_at(&reader, b"x", 0)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{e}");
        assert!(e.to_string().contains("not open for this direction"), "{e}");
        // ENOSPC: /dev/full.
        if let Ok(full) = OpenOptions::new().write(true).open("/dev/full") {
            let e = run(&|| io::write_all_at(&full, &[1u8; 4096], 0)).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
            assert!(e.to_string().contains("device is full"), "{e}");
        }
        // EINVAL: a misaligned O_DIRECT write (where the file system takes O_DIRECT).
        if let Some(direct) = Scratch::new(&format!("direct{inside}"), |o| {
            o.custom_flags(libc::O_DIRECT);
        }) {
            let buf = vec![0u8; 3 * 4096];
            let misaligned = &buf[1..4097];
            let e = run(&|| io::write_all_at(&direct.1, misaligned, 0)).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
            assert!(e.to_string().contains("aligned"), "{e}");
        }
        // A pipe's write end polled for reading: readable never comes, so use a closed fd
        // instead: EBADF from the poll.
        let (r, w) = std::io::pipe().unwrap();
        drop(w);
        // The write end closed: the read end is readable (end of file), at once.
        run(&|| io::readable(&r)).unwrap();
    };
    check(true);
    check(false);
}

/// A source whose requests complete when a shared counter reaches their target.
struct Counter {
    value: AtomicU64,
}

impl Source for Counter {
    type Request = (u64, usize);
    type Output = usize;
    fn poll(&self, r: &mut (u64, usize)) -> Option<usize> {
        (self.value.load(Ordering::Acquire) >= r.0).then_some(r.1)
    }
}

/// 10^5 waits of three kinds (a file write then read back, a pipe byte, a custom source)
/// race with compute tasks on a monitored runtime: each completes exactly once with its own
/// result, and the counts balance. The pipes' bytes and the source's counter come from a
/// "device" thread outside the runtime, as events do: a wait whose event only a queued task
/// produces may find every worker nested in waits (the limit of `io/README.md`, W2a).
#[test]
fn every_wait_of_a_mixed_storm_completes_exactly_once() {
    let rt = runtime(2, monitored_backend());
    // Without a monitor no spare takes a core whose worker waits at the nesting limit (W2a):
    // its queued tasks wait for the other core to steal them, and the storm crawls.
    if common::skip_unmonitored(&rt) {
        return;
    }
    let f = Scratch::new("storm", |_| {}).unwrap();
    let source = EventSource::new(Counter {
        value: AtomicU64::new(0),
    });
    let done: Vec<AtomicU64> = (0..STORM).map(|_| AtomicU64::new(0)).collect();
    let pipes: Vec<(std::io::PipeReader, std::io::PipeWriter)> =
        (0..64).map(|_| std::io::pipe().unwrap()).collect();
    for (r, _) in &pipes {
        let flags = nix::fcntl::fcntl(r, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(r, nix::fcntl::FcntlArg::F_SETFL(flags)).unwrap();
    }
    let computed = AtomicUsize::new(0);
    // Says what is stuck if the storm lasts over a minute (a hang says nothing by itself).
    let finished = AtomicBool::new(false);
    std::thread::scope(|w| {
        // The device: a byte for each reader of each pipe, and the counter up to every
        // target, spread over about a second.
        w.spawn(|| {
            let readers = |p: usize| (0..STORM).filter(|i| i % 4 == 1 && i / 4 % 64 == p).count();
            let mut owed: Vec<usize> = (0..pipes.len()).map(readers).collect();
            while !finished.load(Ordering::SeqCst) {
                for (p, (_, w)) in pipes.iter().enumerate() {
                    if owed[p] > 0 {
                        let mut w: &std::io::PipeWriter = w;
                        w.write_all(b"x").unwrap();
                        owed[p] -= 1;
                    }
                }
                let c = &source.source().value;
                if c.load(Ordering::Relaxed) < 5000 {
                    c.fetch_add(13, Ordering::AcqRel);
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        w.spawn(|| {
            let start = Instant::now();
            let mut said = 1;
            while !finished.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(100));
                let secs = start.elapsed().as_secs();
                if secs / 60 >= said {
                    said += 1;
                    let left: Vec<usize> = (0..STORM)
                        .filter(|&i| done[i].load(Ordering::SeqCst) == 0)
                        .collect();
                    eprintln!(
                        "storm: {secs} s, {} waits left ({:?}...), counter {}, computed {}\n\
                         {:?}\n{:#?}",
                        left.len(),
                        &left[..left.len().min(8)],
                        source.source().value.load(Ordering::SeqCst),
                        computed.load(Ordering::Relaxed),
                        rt.io_stats(),
                        rt.stats()
                    );
                }
            }
        });
        storm(&rt, &f.1, &source, &done, &pipes, &computed);
        finished.store(true, Ordering::SeqCst);
    });
    let wrong: Vec<usize> = (0..STORM)
        .filter(|&i| done[i].load(Ordering::SeqCst) != 1)
        .take(10)
        .collect();
    assert!(
        wrong.is_empty(),
        "waits not completed exactly once: {wrong:?}"
    );
    assert_eq!(computed.load(Ordering::Relaxed), STORM / 4);
    let st = rt.io_stats();
    if have_uring() {
        // Every ring wait completed once: file writes and reads, and the pipe polls.
        assert_eq!(st.completions, st.waits - source_waits(&st), "{st:?}");
        assert_eq!(st.fallback_waits, 0, "{st:?}");
    } else {
        // Every file and pipe wait blocked in its system call instead (W6).
        assert!(st.fallback_waits >= (STORM / 4 * 3) as u64, "{st:?}");
    }
}

/// Tasks in the storm.
const STORM: usize = 100_000;

/// The storm's tasks: waits of three kinds, and computation.
fn storm(
    rt: &Runtime,
    f: &File,
    source: &EventSource<Counter>,
    done: &[AtomicU64],
    pipes: &[(std::io::PipeReader, std::io::PipeWriter)],
    computed: &AtomicUsize,
) {
    rt.scope(|s| {
        for i in 0..STORM {
            s.spawn(move |_| match i % 4 {
                0 => {
                    let off = (i / 4 % 1024) as u64 * 8;
                    let v = (i as u64).to_ne_bytes();
                    // Each slot is written by many tasks: read back into a private buffer
                    // only checks the call, not a value another task may have overwritten.
                    io::write_all_at(f, &v, off).unwrap();
                    let mut b = [0u8; 8];
                    io::read_exact_at(f, &mut b, off).unwrap();
                    done[i].fetch_add(1, Ordering::SeqCst);
                }
                1 => {
                    // A reader waits for a byte of the device. Readers of a pipe share it,
                    // one byte each (the read ends do not block).
                    let (r, _) = &pipes[i / 4 % 64];
                    let mut rd: &std::io::PipeReader = r;
                    loop {
                        io::readable(r).unwrap();
                        match rd.read(&mut [0u8; 1]) {
                            Ok(1) => break,
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            other => panic!("{other:?}"),
                        }
                    }
                    done[i].fetch_add(1, Ordering::SeqCst);
                }
                2 => {
                    let target = (i / 4) as u64 % 5000;
                    let got = source.wait((target, i));
                    assert_eq!(got, i);
                    done[i].fetch_add(1, Ordering::SeqCst);
                }
                _ => {
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_micros(2) {
                        std::hint::spin_loop();
                    }
                    computed.fetch_add(1, Ordering::Relaxed);
                    done[i].fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
}

/// The waits of the storm that went to the event source (not completed through the ring):
/// the ring waits are exactly the completions when none is lost or doubled.
fn source_waits(st: &io::IoStats) -> u64 {
    st.waits - st.completions
}

/// The fields of thread `tid`'s `stat` after its name: field 3 (the state) first.
fn stat_fields(tid: i32) -> Vec<String> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}

/// The thread state and the system call it sleeps in of thread `tid` of this process.
fn thread_state(tid: i32) -> (char, Option<i64>) {
    let state = stat_fields(tid)
        .first()
        .and_then(|f| f.chars().next())
        .unwrap_or('?');
    (state, thread_syscall(tid))
}

/// The CPU time thread `tid` of this process has used (user and system), in clock ticks
/// (fields 14 and 15 of its `stat`).
fn thread_cpu_ticks(tid: i32) -> u64 {
    let fields = stat_fields(tid);
    let field = |n: usize| fields[n - 3].parse::<u64>().unwrap();
    field(14) + field(15)
}

/// Clock ticks per second, the unit of `thread_cpu_ticks`.
fn clock_ticks_per_second() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|hz| u64::try_from(hz).ok())
        .unwrap_or(100)
}

/// A wait on a core with nothing else to run blocks the worker in the kernel (sleeping, in
/// `io_uring_enter`), rather than spinning, until the event comes.
#[test]
fn a_wait_with_nothing_else_to_run_blocks_in_the_kernel() {
    if !have_uring() {
        eprintln!("skipped: no io_uring here");
        return;
    }
    let rt = runtime(1, BackendKind::Disabled);
    let (r, w) = std::io::pipe().unwrap();
    /// Writes the awaited byte when dropped, also when an assertion fails (else the scope
    /// would wait for the waiter forever).
    struct Wake(std::io::PipeWriter);
    impl Drop for Wake {
        fn drop(&mut self) {
            let _ = self.0.write_all(b"x");
        }
    }
    let tid = AtomicU64::new(0);
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            rt.install(|| {
                tid.store(umt_sys::cpu::current_tid() as u64, Ordering::SeqCst);
                io::readable(&r).unwrap();
            });
            finished.store(true, Ordering::SeqCst);
        });
        let wake = Wake(w);
        while tid.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let tid = tid.load(Ordering::SeqCst) as i32;
        // First seen asleep in io_uring_enter (so past its set-up)...
        let asleep = |(state, syscall): (char, Option<i64>)| {
            state == 'S' && syscall.is_none_or(|n| n == libc::SYS_io_uring_enter)
        };
        let start = Instant::now();
        while !asleep(thread_state(tid)) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "never seen asleep in io_uring_enter: {:?}",
                thread_state(tid)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // ...then it takes (almost) no CPU time for half a second. A spinning waiter takes
        // its share of a core, however loaded the machine; a sleeper only what its 50 ms
        // safety-net wake-ups cost, far below a clock tick each. (Sampling its state instead
        // is load-dependent: after such a wake-up a sleeper may wait long for a CPU, 'R'.)
        let (ticks, window) = (thread_cpu_ticks(tid), Instant::now());
        while window.elapsed() < Duration::from_millis(500) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let used = thread_cpu_ticks(tid) - ticks;
        let elapsed = window.elapsed().as_secs_f64() * clock_ticks_per_second() as f64;
        assert!(
            (used as f64) <= elapsed / 10.0,
            "the waiter used {used} clock ticks of CPU in a window of {elapsed:.0}: {:?}",
            thread_state(tid)
        );
        assert!(!finished.load(Ordering::SeqCst));
        drop(wake);
    });
    assert!(finished.load(Ordering::SeqCst));
    let st = rt.io_stats();
    assert!(st.blocks >= 1, "{st:?}");
    assert_eq!(st.completions, 1, "{st:?}");
}

/// A source that counts its calls.
struct Silent {
    single: AtomicU64,
    group: AtomicU64,
    open: AtomicBool,
}

impl Source for Silent {
    type Request = ();
    type Output = ();
    fn poll(&self, _: &mut ()) -> Option<()> {
        self.single.fetch_add(1, Ordering::Relaxed);
        self.open.load(Ordering::Acquire).then_some(())
    }
    fn poll_group(&self, reqs: &mut [()], done: &mut dyn FnMut(usize, ())) {
        self.group.fetch_add(1, Ordering::Relaxed);
        if self.open.load(Ordering::Acquire) {
            for i in 0..reqs.len() {
                done(i, ());
            }
        }
    }
}

/// With aggregation, one group poll tests every waiting request of the core; without, each
/// look costs one poll per waiting request.
#[test]
fn a_group_poll_serves_every_waiter_of_the_core() {
    for aggregate in [true, false] {
        let rt = runtime(1, BackendKind::Disabled);
        let silent = Silent {
            single: AtomicU64::new(0),
            group: AtomicU64::new(0),
            open: AtomicBool::new(false),
        };
        let source = Arc::new(if aggregate {
            EventSource::new(silent)
        } else {
            EventSource::one_poll_per_request(silent)
        });
        const WAITERS: usize = 16;
        let waiting = Arc::new(AtomicUsize::new(0));
        // Spawned from outside: the injector hands them out in order, each nested in the
        // previous one's wait on the single worker.
        let waiters: Vec<_> = (0..WAITERS)
            .map(|_| {
                let (source, waiting) = (source.clone(), waiting.clone());
                rt.spawn(move || {
                    waiting.fetch_add(1, Ordering::SeqCst);
                    source.wait(());
                })
            })
            .collect();
        while waiting.load(Ordering::SeqCst) < WAITERS {
            std::thread::yield_now();
        }
        // Computation the innermost wait runs, looking at the source between its tasks; then
        // the event.
        let computed: Vec<_> = (0..200)
            .map(|_| {
                rt.spawn(|| {
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_micros(50) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let opener = source.clone();
        rt.spawn(move || opener.source().open.store(true, Ordering::Release))
            .join();
        for h in computed.into_iter().chain(waiters) {
            h.join();
        }
        let st = rt.io_stats();
        let (single, group) = (
            source.source().single.load(Ordering::Relaxed),
            source.source().group.load(Ordering::Relaxed),
        );
        // Each waiter's first test is a single poll (a request may be complete already).
        if aggregate {
            assert_eq!(single, WAITERS as u64, "{st:?}");
            assert!(group >= 1 && group == st.group_polls, "{st:?}");
            assert_eq!(st.request_polls, 0);
        } else {
            assert_eq!(group, 0);
            assert_eq!(single, WAITERS as u64 + st.request_polls, "{st:?}");
            // A look with every waiter waiting tests all of them.
            assert!(st.request_polls >= WAITERS as u64, "{st:?}");
        }
        assert_eq!(st.waits, WAITERS as u64);
    }
}

/// A wait that nothing satisfies ends at its deadline with `TimedOut`, never before it, on a
/// worker (the kernel cancels the ring's poll) and outside a runtime (a timed `poll`); the
/// core's ring serves the next wait normally, and the deadlines' own completions are not
/// counted as anyone's.
#[test]
fn a_deadline_ends_a_wait_nothing_satisfies_and_the_ring_goes_on() {
    for backend in [BackendKind::Disabled, monitored_backend()] {
        let rt = runtime(1, backend);
        let (reader, mut writer) = std::io::pipe().unwrap();
        for inside in [true, false] {
            let run = |f: &(dyn Fn() -> Result<(), IoError> + Sync)| {
                if inside { rt.install(f) } else { f() }
            };
            let deadline = io::Deadline::after(Duration::from_millis(20));
            let e = run(&|| deadline.readable(&reader)).unwrap_err();
            assert!(deadline.passed(), "{e} came before the deadline");
            assert!(
                matches!(
                    e,
                    IoError::TimedOut {
                        op: "poll",
                        transferred: 0
                    }
                ),
                "{e:?}"
            );
            assert!(e.to_string().contains("deadline"), "{e}");
            assert_eq!(std::io::Error::from(e).kind(), std::io::ErrorKind::TimedOut);
            // A deadline already past still takes what is ready.
            writer.write_all(b"x").unwrap();
            let past = io::Deadline::at(Instant::now() - Duration::from_millis(1));
            run(&|| past.readable(&reader)).unwrap();
            let mut byte = [0u8];
            (&reader).read_exact(&mut byte).unwrap();
            // A far deadline does not get in the way of an event that comes.
            let far = io::Deadline::after(Duration::from_secs(600));
            let got = rt.install(|| {
                umt_rt::join(
                    || far.poll_fd(&reader, libc::POLLIN),
                    || (&writer).write_all(b"y"),
                )
            });
            assert_eq!(got.0.unwrap() & libc::POLLIN, libc::POLLIN);
            got.1.unwrap();
            (&reader).read_exact(&mut byte).unwrap();
            // A pipe has no offset: read_at reads it from where it is, on the ring and off
            // it, and a deadline ends a read that nothing satisfies.
            writer.write_all(b"abc").unwrap();
            let mut three = [0u8; 3];
            let n = if inside {
                rt.install(|| io::read_at(&reader, &mut three, 0))
            } else {
                io::read_at(&reader, &mut three, 0)
            };
            assert_eq!((n.unwrap(), &three), (3, b"abc"));
            let deadline = io::Deadline::after(Duration::from_millis(5));
            let e = if inside {
                rt.install(|| deadline.read_at(&reader, &mut three, 0))
            } else {
                deadline.read_at(&reader, &mut three, 0)
            };
            assert!(
                matches!(e, Err(IoError::TimedOut { op: "read", .. })),
                "{e:?}"
            );
            assert!(deadline.passed());
        }
        // Files: a far deadline reads and writes all of it.
        let f = Scratch::new("deadline", |_| {}).unwrap();
        let far = io::Deadline::after(Duration::from_secs(600));
        let back = rt.install(|| {
            far.write_all_at(&f.1, b"checkpoint", 4096)?;
            let mut back = [0u8; 10];
            far.read_exact_at(&f.1, &mut back, 4096)?;
            Ok::<_, IoError>(back)
        });
        assert_eq!(&back.unwrap(), b"checkpoint");
        let st = rt.io_stats();
        if have_uring() {
            // On the workers: the timed-out poll, the ready one, the two far ones (one per
            // pass), the pipe's read and the one that timed out, the file's write and read
            // (outside the runtime, waits are plain system calls): each one completion; the
            // deadlines' own completions are not among them.
            assert_eq!(st.waits, 8, "{st:?}");
            assert_eq!(st.completions, st.waits, "{st:?}");
            assert_eq!(st.fallback_waits, 0, "{st:?}");
        }
    }
}

/// A source that never completes a request, and remembers the requests its polls saw.
struct Stuck {
    seen: std::sync::Mutex<Vec<u32>>,
}

impl Source for Stuck {
    type Request = u32;
    type Output = u32;
    fn poll(&self, r: &mut u32) -> Option<u32> {
        self.seen.lock().unwrap().push(*r);
        (*r == 0).then_some(0)
    }
}

/// `wait_until` gives an expired request back and no poll sees it afterwards; a request that
/// completes before the deadline gives its output.
#[test]
fn an_expired_source_request_comes_back_and_is_polled_no_more() {
    let rt = runtime(1, BackendKind::Disabled);
    let source = EventSource::new(Stuck {
        seen: std::sync::Mutex::new(Vec::new()),
    });
    for inside in [true, false] {
        let wait = |r: u32, d: io::Deadline| {
            if inside {
                rt.install(|| source.wait_until(r, d))
            } else {
                source.wait_until(r, d)
            }
        };
        let deadline = io::Deadline::after(Duration::from_millis(10));
        let e = wait(7, deadline).unwrap_err();
        assert!(deadline.passed());
        assert!(e.to_string().contains("into_request"), "{e}");
        assert_eq!(e.into_request(), 7);
        source.source().seen.lock().unwrap().clear();
        // The next wait's polls see only its own request.
        let deadline = io::Deadline::after(Duration::from_millis(5));
        assert_eq!(wait(8, deadline).unwrap_err().into_request(), 8);
        let seen = std::mem::take(&mut *source.source().seen.lock().unwrap());
        assert!(!seen.is_empty() && seen.iter().all(|&r| r == 8), "{seen:?}");
        // Complete at once: the output, whatever the deadline.
        assert_eq!(wait(0, io::Deadline::after(Duration::ZERO)), Ok(0));
    }
    // Every source wait of the runtime ended: none is left counted on the core (a look
    // would still poll them).
    let before = rt.io_stats().group_polls;
    rt.install(|| {
        for _ in 0..100 {
            umt_rt::join(|| {}, || {});
        }
    });
    assert_eq!(rt.io_stats().group_polls, before);
}
