//! I/O readiness for futures: [`Async<T>`] wraps a descriptor (a socket, a pipe, a terminal)
//! in non-blocking mode and lets a future wait until it is readable or writable, in any
//! executor. One reactor thread per process, started by the first [`Async::new`], waits in
//! `epoll` for every registered descriptor and wakes the futures that wait on them; an idle
//! worker of a umt runtime waits in the same set meanwhile and takes the events first.
//!
//! Steps:
//!
//! 1. **R1 — register.** [`Async::new`] sets `O_NONBLOCK` and adds the descriptor to the
//!    reactor's epoll set, edge-triggered for both directions, under a key of its own. Both
//!    directions start *ready*: the first read or write is tried at once.
//! 2. **R2 — try, then wait.** [`Async::read_with`] (and `write_with`, and the helpers built
//!    on them) runs the operation while the direction is ready; on `WouldBlock` it clears the
//!    ready flag, but only if no event came since it looked (the direction's tick is
//!    unchanged), stores its waker, and returns `Pending`.
//! 3. **R3 — an event.** The reactor thread, for each event, sets the direction's ready flag,
//!    advances its tick and takes its waker under the source's lock, then wakes it outside.
//! 4. **R4 — drop.** Dropping the `Async` removes the descriptor from the epoll set and the
//!    table, then closes it.
//!
//! 5. **R5 — the turn.** An idle worker of a runtime built with `Builder::drive_io` (the
//!    default) takes the turn before it parks (`crate::drive`, D1) and waits in this same
//!    epoll set instead of on its futex, if it is the last of its core to go idle (so that
//!    events wake a thread whose CPU is free). epoll wakes one waiter per event, the one that
//!    started waiting last, so the worker, which comes back to the set after each wake-up,
//!    mostly gets the events before the reactor thread, which stays in the set for those that
//!    come while no worker waits (and takes them while it is the newer waiter, after its own
//!    wake-ups).
//! 6. **R6 — a worker's events.** The worker takes them as R3 does (ready flags, wakers),
//!    gives the turn back, leaves its pool, and only then wakes the wakers (D6): its own
//!    runtime's futures go to its own deque, and it polls the first itself.
//! 7. **R7 — the kick.** A notification for the worker that holds the turn (new work, a
//!    latch, shutdown) writes the reactor's eventfd, which is in the set edge-triggered, so
//!    one waiter wakes per write. Whoever wakes on it reads it first; the reactor thread, if
//!    it read a kick while a worker holds the turn, writes it again (a new edge, for that
//!    worker) and waits for the turn to be given back before it waits in the set again.
//!    Race: a kick written between the reactor thread's look at the turn and its read would
//!    be lost to the worker, so it reads first and looks after. A child of `fork` shares the
//!    set: its workers never take the turn (the reactor is the parent's).
//! 8. **R8 — a failed wait.** A worker whose `epoll_wait` fails says so once and no worker
//!    takes the turn again; the reactor thread serves alone, as with `drive_io(false)`.
//! 9. **R9 — stand by while workers look.** Busy workers take the events between their jobs
//!    (`crate::drive`, D7), each look counted. Before each of its waits the reactor thread
//!    compares that count with the one it saw last: while it grows, the thread waits out of
//!    the set, a `STANDBY` at a time, so an event that comes meanwhile wakes no thread and
//!    waits for the next look. The stand-by ends when one passes with no look (the workers
//!    park, block in the kernel, or run long jobs), when a driving worker gives the turn back
//!    (it leaves the set to run what it found, and the other idle workers are parked on their
//!    futexes, out of it), or when a leader finds its core with nothing to run
//!    (`Driver::end_standby`): an event then waits about two stand-bys, plus however long
//!    this thread waits for a CPU after its timer (milliseconds behind busy workers), and is
//!    never lost (an edge stays in epoll's ready list until a wait reports it). The cost:
//!    while workers look and no event comes, this thread wakes once a stand-by. A look reads
//!    no kick of a driving worker's (that worker holds the turn), and nobody waits for a
//!    look's turn: a worker about to drive (R5) waits the look out, the reactor thread's R7
//!    waits only for a driving worker's turn.
//! 10. **R10 — a spent turn.** In a poll by a umt runtime's worker, an operation first asks
//!     whether the poll has had its turn (C2 of `crate::coop`: 50 us from its first, not counting the
//!     poll's first operation nor the first write after a read): if so it wakes its future
//!     and returns `Pending` without trying, and the future waits behind the others woken
//!     before it. A connection whose next request is always there when its handler reads
//!     (its client on another CPU, or at a higher priority) never sees `WouldBlock`, and
//!     without this kept its worker from every other connection.
//! 11. **R11 — one entry per waiting future.** R2 stores the waker under the wait's own
//!     registration number, kept in the future; polled again with another waker it replaces
//!     its entry, and when the future ends (done, or dropped: a `timeout`, a `select`, an
//!     abort) its entry goes. Without this a wait given up left its waker behind until the
//!     direction's next event: each kept its task alive, and on a quiet socket the list only
//!     grew. A replaced or removed waker is dropped outside the source's lock: it may hold the
//!     last reference to a task, whose future may hold another wait on the same source.
//!
//! Races: an edge that arrives between a `WouldBlock` and the clearing of the flag advances the
//! tick, so the flag stays set and the operation is tried again (no lost edge). A waker stored
//! after the event that would have woken it finds the flag set on its next look: the flag is
//! read under the same lock the reactor sets it under, before `Pending` is returned.
//!
//! A future whose operation blocks anyway (a descriptor the caller left blocking inside `T`,
//! a regular file, which is always "ready") blocks its worker; on a monitored runtime, the
//! core's spare runs the other tasks meanwhile.
//!
//! ```
//! use std::io::{Read, Write};
//! use std::net::{TcpListener, TcpStream};
//! use umt_rt::async_io::Async;
//!
//! let rt = umt_rt::Runtime::new()?;
//! let listener = Async::new(TcpListener::bind("127.0.0.1:0")?)?;
//! let addr = listener.get_ref().local_addr()?;
//! let server = rt.spawn_async(async move {
//!     let (mut stream, _) = listener.accept().await?;
//!     let mut buf = [0u8; 5];
//!     stream.read_exact(&mut buf).await?;
//!     stream.write_all(&buf).await?;
//!     Ok::<_, std::io::Error>(())
//! });
//! let mut client = TcpStream::connect(addr)?;
//! client.write_all(b"hello")?;
//! let mut back = [0u8; 5];
//! client.read_exact(&mut back)?;
//! assert_eq!(&back, b"hello");
//! server.join()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::poll_fn;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::coop::{self, Op};
use crate::drive::Waited;
use crate::fork::ForkMark;

/// One direction (read or write) of a source.
#[derive(Default)]
struct Direction {
    ready: bool,
    /// Events seen so far (R3), to tell whether one came since a look (R2).
    tick: u64,
    /// Every future waiting on this direction (two tasks may wait on one socket), by the
    /// number of its registration (R11).
    wakers: Vec<(u64, Waker)>,
    /// The next registration's number.
    next: u64,
}

/// A registered descriptor's readiness.
#[derive(Default)]
struct Source {
    dirs: Mutex<[Direction; 2]>,
}

const READ: usize = 0;
const WRITE: usize = 1;

impl Source {
    fn lock(&self) -> crate::sync::Counted<MutexGuard<'_, [Direction; 2]>> {
        crate::sync::lock_std(&self.dirs)
    }

    /// R2: `Ready(tick)` while direction `d` is ready, else stores the waker under the
    /// future's registration `id` (R11: one entry per waiting future, its waker replaced when
    /// it is polled with another; a new registration when it has none or an event took it).
    fn poll_ready(&self, d: usize, cx: &mut Context<'_>, id: &mut Option<u64>) -> Poll<u64> {
        let replaced = {
            let mut dirs = self.lock();
            let dir = &mut dirs[d];
            if dir.ready {
                // The event that set the flag took every entry, this wait's too.
                *id = None;
                return Poll::Ready(dir.tick);
            }
            match id.and_then(|id| dir.wakers.iter_mut().find(|(n, _)| *n == id)) {
                Some((_, w)) if w.will_wake(cx.waker()) => None,
                Some((_, w)) => Some(std::mem::replace(w, cx.waker().clone())),
                None => {
                    *id = Some(dir.next);
                    dir.wakers.push((dir.next, cx.waker().clone()));
                    dir.next += 1;
                    None
                }
            }
        };
        // Dropped outside the lock: a waker's drop may end a task, whose future's drop may
        // come back here (R11).
        drop(replaced);
        Poll::Pending
    }

    /// R11: the future of registration `id` is gone (dropped, or done): its waker goes too.
    fn forget(&self, d: usize, id: u64) {
        let gone = {
            let mut dirs = self.lock();
            let wakers = &mut dirs[d].wakers;
            wakers
                .iter()
                .position(|(n, _)| *n == id)
                .map(|i| wakers.swap_remove(i))
        };
        drop(gone);
    }

    /// R2: the operation would block: not ready, unless an event came since `tick`.
    fn clear(&self, d: usize, tick: u64) {
        let mut dirs = self.lock();
        if dirs[d].tick == tick {
            dirs[d].ready = false;
        }
    }

    /// R3: an event for direction `d`: every waiter is woken.
    fn fire(&self, d: usize) -> Vec<Waker> {
        let mut dirs = self.lock();
        let dir = &mut dirs[d];
        dir.ready = true;
        dir.tick += 1;
        std::mem::take(&mut dir.wakers)
            .into_iter()
            .map(|(_, w)| w)
            .collect()
    }
}

/// R11: a readiness wait's entry in its source, taken out when the wait's future ends, so
/// that a wait given up (a `timeout`, a `select`, an abort) leaves no waker behind: it would
/// keep its task alive until the next event, and a quiet socket's list would only grow.
struct Registration<'a> {
    source: &'a Source,
    d: usize,
    id: Option<u64>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.source.forget(self.d, id);
        }
    }
}

/// The key of the reactor's eventfd in its epoll set (sources count up from 0).
const KICK: u64 = u64::MAX;

/// [`Reactor::turn`]: nobody holds it.
const FREE: u8 = 0;
/// [`Reactor::turn`]: a worker waits in the set (R5).
const DRIVING: u8 = 1;
/// [`Reactor::turn`]: a busy worker looks (D7).
const LOOKING: u8 = 2;
/// R5: how many times a worker about to drive tries for a turn held by a look, first
/// spinning, then yielding, before it parks on its futex instead.
const LOOK_WAIT_ROUNDS: u32 = 64;

/// R9: how long the reactor thread stays out of the set at a time once it saw busy workers
/// look. An event that comes while every worker stops looking (blocked, or in a long job)
/// waits about twice this long, plus the thread's wait for a CPU, where tokio's waits for a
/// busy worker's next look however long that takes; shorter, the thread wakes more often for
/// nothing while workers look.
const STANDBY: std::time::Duration = std::time::Duration::from_micros(500);

/// The process's reactor: its epoll set and the sources by key, and the turn that idle
/// workers take to wait in the set themselves (R5–R8, `crate::drive`).
struct Reactor {
    epoll: Epoll,
    sources: Mutex<HashMap<u64, Arc<Source>>>,
    next_key: AtomicU64,
    /// R7: in the set, edge-triggered; written to wake the worker that holds the turn.
    kick: EventFd,
    /// R5: who holds the turn: nobody ([`FREE`]), a driving worker ([`DRIVING`]) or a busy
    /// worker's look ([`LOOKING`], D7).
    turn: AtomicU8,
    /// The reactor thread waits here for the turn to be given back (R7).
    turn_lock: Mutex<()>,
    turn_given: Condvar,
    /// A driving worker's `epoll_wait` failed: workers park as before.
    failed: AtomicBool,
    /// R9: busy workers' looks so far.
    looks: AtomicU64,
    /// R9: turns given back by driving workers so far, and stand-bys ended by leaders (each
    /// told on `turn_given`).
    drives: AtomicU64,
    /// R9: the reactor thread stands by.
    standing_by: AtomicBool,
    /// The process that made the set: a child of `fork` shares it and its eventfd, and its
    /// workers must not take the parent's events. Looking costs a load, not a `getpid` per
    /// busy look (`crate::fork`). A child made without the `pthread_atfork` handlers (a raw
    /// `clone`, glibc's `_Fork`) passes that look; `try_take` also compares the process id,
    /// so such a child may take a busy look's events, never the turn.
    made: ForkMark,
}

thread_local! {
    /// A driving worker's event buffer.
    static EVENTS: RefCell<Vec<EpollEvent>> = RefCell::new(vec![EpollEvent::empty(); 64]);
    /// The wakers a driving worker took and has not woken yet (R6 to D6).
    static TAKEN: RefCell<Vec<Waker>> = const { RefCell::new(Vec::new()) };
}

impl Reactor {
    /// Whether workers may take the turn at all: the driver has not failed (R8), and this is
    /// the process that made it (a `fork` child shares the set).
    fn usable(&self) -> bool {
        !self.failed.load(Ordering::Relaxed) && !self.made.is_copy()
    }

    fn sources(&self) -> crate::sync::Counted<MutexGuard<'_, HashMap<u64, Arc<Source>>>> {
        crate::sync::lock_std(&self.sources)
    }

    /// R3 (and R6 for a driving worker): a batch of events: each source's ready flags set and
    /// its wakers taken into `wake`. A kick is read, unless it came to the reactor thread
    /// while a worker holds the turn: then it is left for that worker and this returns `true`.
    fn take(&self, events: &[EpollEvent], driver: bool, wake: &mut Vec<Waker>) -> bool {
        let mut left = false;
        let sources = self.sources();
        for ev in events {
            if ev.data() == KICK {
                // Non-blocking: `EAGAIN` when another waiter read it first. Read before the
                // turn is looked at: a kick written after the look would otherwise be read
                // here, unseen by the worker it was for.
                let read = self.kick.read().is_ok();
                if !driver && read && self.turn.load(Ordering::SeqCst) == DRIVING {
                    // R7: maybe the driving worker's: written again (a new edge, which wakes
                    // it), and this thread stays out of the set until the turn is back.
                    let _ = self.kick.write(1);
                    left = true;
                }
                continue;
            }
            let Some(source) = sources.get(&ev.data()) else {
                continue;
            };
            let flags = ev.events();
            let gone = EpollFlags::EPOLLHUP | EpollFlags::EPOLLERR;
            if flags.intersects(EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP | gone) {
                wake.extend(source.fire(READ));
            }
            if flags.intersects(EpollFlags::EPOLLOUT | gone) {
                wake.extend(source.fire(WRITE));
            }
        }
        left
    }

    /// R3: the reactor thread.
    fn run(&self) {
        let mut events = vec![EpollEvent::empty(); 256];
        let mut wake = Vec::new();
        let mut looks = self.looks.load(Ordering::Relaxed);
        loop {
            self.stand_by(&mut looks);
            let n = match self.epoll.wait(&mut events, EpollTimeout::NONE) {
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    crate::diag::emit(&format!(
                        "umt-rt: the async I/O reactor stopped: epoll_wait failed ({e})"
                    ));
                    return;
                }
            };
            let left = self.take(&events[..n], false, &mut wake);
            // Any executor's waker: its panic must not stop the reactor.
            wake.drain(..).for_each(crate::spawn::wake_foreign);
            if left {
                // R7: out of the set until the turn is given back, or the kick it did not
                // read would wake it again at once.
                let mut held = self.turn_lock.lock().unwrap_or_else(|p| p.into_inner());
                while self.turn.load(Ordering::SeqCst) == DRIVING {
                    held = self
                        .turn_given
                        .wait(held)
                        .unwrap_or_else(|p| p.into_inner());
                }
            }
        }
    }
}

/// R5–R8: idle workers wait in the reactor's set, one at a time (`crate::drive`).
impl crate::drive::Driver for Reactor {
    /// R5; never after R8. A busy worker's look (D7) holds the turn for one `epoll_wait`
    /// that does not wait: the worker waits for it to end rather than park on its futex,
    /// where no event would reach it (a while, then it parks there).
    fn try_take(&self) -> bool {
        // The process id too, here where a worker is about to wait in the set anyway: a child
        // made without the `fork` handlers (a raw `clone`, glibc's `_Fork`) is not counted.
        if !self.usable() || self.made.pid_differs() {
            return false;
        }
        for round in 0..LOOK_WAIT_ROUNDS {
            match self
                .turn
                .compare_exchange(FREE, DRIVING, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(LOOKING) if round < LOOK_WAIT_ROUNDS / 2 => std::hint::spin_loop(),
                Err(LOOKING) => std::thread::yield_now(),
                Err(_) => return false,
            }
        }
        false
    }

    /// R5, a look: what `try_take` would say, without taking the turn.
    fn is_free(&self) -> bool {
        self.usable() && self.turn.load(Ordering::Relaxed) != DRIVING
    }

    /// R6: one `epoll_wait` in the reactor's set; the events' wakers are kept in this thread.
    fn wait(&self) -> Waited {
        self.wait_for(EpollTimeout::NONE)
    }

    /// D7 and R9: a busy worker's look, counted; `None` while the turn is held.
    fn look(&self) -> Option<Waited> {
        if !self.usable()
            || self
                .turn
                .compare_exchange(FREE, LOOKING, Ordering::SeqCst, Ordering::Relaxed)
                .is_err()
        {
            return None;
        }
        self.looks.fetch_add(1, Ordering::Relaxed);
        let looked = self.wait_for(EpollTimeout::ZERO);
        // Nobody waits for a look's turn (R7 and R9 wait for a driving worker's).
        self.turn.store(FREE, Ordering::SeqCst);
        Some(looked)
    }

    /// R7 and R9: the reactor thread may be waiting for the turn, or standing by.
    fn release(&self) {
        self.turn.store(FREE, Ordering::SeqCst);
        self.drives.fetch_add(1, Ordering::SeqCst);
        let _held = crate::sync::lock_std(&self.turn_lock);
        self.turn_given.notify_all();
    }

    /// R9: counted as a turn given back, which ends a stand-by; a flag read first keeps the
    /// polling leaders' calls (every few microseconds on an idle core) to a load.
    fn end_standby(&self) {
        if self.standing_by.load(Ordering::SeqCst) {
            self.drives.fetch_add(1, Ordering::SeqCst);
            let _held = crate::sync::lock_std(&self.turn_lock);
            self.turn_given.notify_all();
        }
    }

    fn dispatch(&self) {
        let taken = TAKEN.with_borrow_mut(std::mem::take);
        taken.into_iter().for_each(crate::spawn::wake_foreign);
    }

    /// R7.
    fn kick(&self) {
        // Non-blocking: fails only when the counter is full, which wakes the waiter anyway.
        let _ = self.kick.write(1);
    }
}

impl Reactor {
    /// R9: while busy workers look (the count grew since `looks`, which is brought up to
    /// date), the reactor thread stays out of the set, a [`STANDBY`] at a time, until a
    /// stand-by passes with no look, a driving worker gives the turn back (it left the set,
    /// and idle workers may be parked on their futexes, out of it), or a leader ends it.
    fn stand_by(&self, looks: &mut u64) {
        let drives = self.drives.load(Ordering::SeqCst);
        let mut held = self.turn_lock.lock().unwrap_or_else(|p| p.into_inner());
        // Raised under the lock: a leader that sees it counts and notifies under the lock, so
        // either this thread sees the count before it waits or the notification ends the
        // wait. A leader that looked before it was raised ends nothing: its call is a hint,
        // and the stand-by still ends once looks stop (a polling leader calls again within
        // microseconds).
        self.standing_by.store(true, Ordering::SeqCst);
        loop {
            let now = self.looks.load(Ordering::Relaxed);
            if now == *looks || self.drives.load(Ordering::SeqCst) != drives {
                break;
            }
            *looks = now;
            held = self
                .turn_given
                .wait_timeout(held, STANDBY)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        self.standing_by.store(false, Ordering::SeqCst);
    }

    /// R6 and D7: one `epoll_wait` in the set, turn held, for at most `timeout`; the events'
    /// wakers are kept in this thread. A failure stops the workers' turns (R8).
    fn wait_for(&self, timeout: EpollTimeout) -> Waited {
        EVENTS.with_borrow_mut(|events| match self.epoll.wait(events, timeout) {
            Ok(n) => TAKEN.with_borrow_mut(|taken| {
                let before = taken.len();
                self.take(&events[..n], true, taken);
                if taken.len() > before {
                    Waited::Events
                } else {
                    Waited::Nothing
                }
            }),
            Err(nix::errno::Errno::EINTR) => Waited::Nothing,
            Err(e) => {
                self.failed.store(true, Ordering::Relaxed);
                crate::diag::emit(&format!(
                    "umt-rt: idle workers stop waiting for I/O events themselves: \
                     epoll_wait failed ({e}); the reactor thread alone waits for them"
                ));
                Waited::Failed
            }
        })
    }
}

/// The reactor, started on first use.
fn reactor() -> io::Result<&'static Reactor> {
    static REACTOR: OnceLock<Result<&'static Reactor, String>> = OnceLock::new();
    REACTOR
        .get_or_init(|| {
            let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
                .map_err(|e| format!("epoll_create1 failed ({e})"))?;
            let kick = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
                .map_err(|e| format!("eventfd failed ({e})"))?;
            epoll
                .add(
                    &kick,
                    EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLET, KICK),
                )
                .map_err(|e| format!("cannot watch its eventfd ({e})"))?;
            let reactor: &'static Reactor = Box::leak(Box::new(Reactor {
                epoll,
                sources: Mutex::new(HashMap::new()),
                next_key: AtomicU64::new(0),
                kick,
                turn: AtomicU8::new(FREE),
                turn_lock: Mutex::new(()),
                turn_given: Condvar::new(),
                failed: AtomicBool::new(false),
                looks: AtomicU64::new(0),
                drives: AtomicU64::new(0),
                standing_by: AtomicBool::new(false),
                made: ForkMark::here(),
            }));
            std::thread::Builder::new()
                .name("umt-reactor".into())
                .spawn(move || reactor.run())
                .map_err(|e| format!("cannot start its thread ({e})"))?;
            crate::drive::install(reactor);
            Ok(reactor)
        })
        .as_ref()
        .copied()
        .map_err(|why| {
            io::Error::other(format!(
                "umt-rt: the async I/O reactor is unavailable: {why}; use blocking I/O in \
                 the task instead (the monitor covers it)"
            ))
        })
}

/// A descriptor in non-blocking mode whose readiness futures can wait for (see the module's
/// docs). Reads and writes go through [`Async::read_with`] / [`Async::write_with`], or the
/// helpers for types that implement [`Read`] and [`Write`] by reference (sockets, pipes).
pub struct Async<T: AsFd> {
    /// `None` only while dropping.
    io: Option<T>,
    key: u64,
    source: Arc<Source>,
}

impl<T: AsFd + std::fmt::Debug> std::fmt::Debug for Async<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Async")
            .field("io", &self.io)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl<T: AsFd> Async<T> {
    /// R1: sets `io` non-blocking and registers it with the reactor. Fails if the descriptor
    /// cannot be made non-blocking or watched by epoll (a regular file, which is always ready:
    /// read it with plain blocking calls), or if the reactor cannot run (in a child of
    /// `fork` too: the reactor and its epoll set are the parent's, so a descriptor added
    /// there would be watched for the parent).
    pub fn new(io: T) -> io::Result<Async<T>> {
        let reactor = reactor()?;
        if reactor.made.pid_differs() {
            return Err(io::Error::other(
                "the I/O reactor belongs to the parent of this fork: async I/O is not \
                 available in the child (exec a new program, or use blocking calls)",
            ));
        }
        let fd = io.as_fd();
        let flags = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL)?);
        fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
        let key = reactor.next_key.fetch_add(1, Ordering::Relaxed);
        let source = Arc::new(Source::default());
        {
            let mut dirs = source.lock();
            dirs[READ].ready = true;
            dirs[WRITE].ready = true;
        }
        reactor.sources().insert(key, source.clone());
        let interest = EpollFlags::EPOLLIN
            | EpollFlags::EPOLLOUT
            | EpollFlags::EPOLLRDHUP
            | EpollFlags::EPOLLET;
        if let Err(e) = reactor.epoll.add(fd, EpollEvent::new(interest, key)) {
            reactor.sources().remove(&key);
            return Err(io::Error::other(format!(
                "cannot watch descriptor {} with epoll ({e}); a regular file is always ready: \
                 read it with blocking calls",
                fd.as_raw_fd()
            )));
        }
        Ok(Async {
            io: Some(io),
            key,
            source,
        })
    }

    /// The wrapped I/O object.
    pub fn get_ref(&self) -> &T {
        match &self.io {
            Some(io) => io,
            None => unreachable!("taken only while dropping"),
        }
    }

    /// The wrapped I/O object, mutably (keep it non-blocking).
    pub fn get_mut(&mut self) -> &mut T {
        match &mut self.io {
            Some(io) => io,
            None => unreachable!("taken only while dropping"),
        }
    }

    /// Waits until the descriptor is readable (or at its end, or in error): the next read
    /// finds something, unless another reader takes it first.
    pub async fn readable(&self) -> io::Result<()> {
        self.ready(READ, PollFlags::POLLIN).await
    }

    /// Waits until the descriptor is writable (or in error).
    pub async fn writable(&self) -> io::Result<()> {
        self.ready(WRITE, PollFlags::POLLOUT).await
    }

    /// Waits for direction `d`: the ready flag is only a hint (set since the last
    /// `WouldBlock`), so it is confirmed with a `poll(2)` that does not wait, and cleared
    /// (R2) when that finds nothing: a loop of `readable` and a read of its own does not
    /// spin.
    async fn ready(&self, d: usize, events: PollFlags) -> io::Result<()> {
        self.retry(d, |io| {
            let mut fds = [PollFd::new(io.as_fd(), events)];
            match nix::poll::poll(&mut fds, PollTimeout::ZERO) {
                Ok(0) => Err(io::ErrorKind::WouldBlock.into()),
                Ok(_) => Ok(()),
                Err(e) => Err(e.into()),
            }
        })
        .await
    }

    /// R2 for direction `d`: runs `op` until it does not return `WouldBlock`.
    async fn retry<R>(&self, d: usize, mut op: impl FnMut(&T) -> io::Result<R>) -> io::Result<R> {
        let kind = if d == READ { Op::Read } else { Op::Write };
        // C3's key of this descriptor and direction: the address is even (aligned), `d` 0 or 1.
        let key = std::ptr::from_ref(self) as usize | d;
        let mut registration = Registration {
            source: &self.source,
            d,
            id: None,
        };
        poll_fn(|cx| {
            // R10: a runtime's future that has had its turn lets the others run first.
            if coop::spent(kind, key) {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            loop {
                let tick = match self.source.poll_ready(d, cx, &mut registration.id) {
                    Poll::Ready(tick) => tick,
                    Poll::Pending => return Poll::Pending,
                };
                coop::tried(kind);
                match op(self.get_ref()) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.source.clear(d, tick),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    r => return Poll::Ready(r),
                }
            }
        })
        .await
    }

    /// Runs a read operation on the I/O object, waiting for readability whenever it would
    /// block: `listener.read_with(|l| l.accept())`.
    pub async fn read_with<R>(&self, op: impl FnMut(&T) -> io::Result<R>) -> io::Result<R> {
        self.retry(READ, op).await
    }

    /// Runs a write operation on the I/O object, waiting for writability whenever it would
    /// block.
    pub async fn write_with<R>(&self, op: impl FnMut(&T) -> io::Result<R>) -> io::Result<R> {
        self.retry(WRITE, op).await
    }
}

impl<T: AsFd> Drop for Async<T> {
    /// R4: unregisters, then closes the descriptor (drops `T`).
    fn drop(&mut self) {
        if let Some(io) = self.io.take() {
            // Not in a child of `fork`: the epoll set is the parent's, whose entry for this
            // descriptor (the same file, the same number) the delete would remove, and the
            // parent would hear of it no more (a pre-fork server's listener).
            if let Ok(reactor) = reactor()
                && !reactor.made.pid_differs()
            {
                let _ = reactor.epoll.delete(io.as_fd());
                reactor.sources().remove(&self.key);
            }
            drop(io);
        }
    }
}

impl<T: AsFd> Async<T>
where
    for<'a> &'a T: Read + Write,
{
    /// Reads some bytes into `buf` (0 at the end of the stream).
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_with(|mut io| io.read(buf)).await
    }

    /// Reads exactly `buf.len()` bytes; `UnexpectedEof` if the stream ends first.
    pub async fn read_exact(&self, mut buf: &mut [u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read(buf).await? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => buf = &mut buf[n..],
            }
        }
        Ok(())
    }

    /// Writes some bytes of `buf`.
    pub async fn write(&self, buf: &[u8]) -> io::Result<usize> {
        self.write_with(|mut io| io.write(buf)).await
    }

    /// Writes all of `buf`.
    pub async fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write(buf).await? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => buf = &buf[n..],
            }
        }
        Ok(())
    }
}

impl Async<std::net::TcpListener> {
    /// Binds a listener (see [`std::net::TcpListener::bind`]) and registers it.
    pub fn bind(addr: impl std::net::ToSocketAddrs) -> io::Result<Self> {
        Async::new(std::net::TcpListener::bind(addr)?)
    }

    /// Waits for a connection; the stream is registered too.
    pub async fn accept(&self) -> io::Result<(Async<std::net::TcpStream>, std::net::SocketAddr)> {
        let (stream, addr) = self.read_with(|l| l.accept()).await?;
        Ok((Async::new(stream)?, addr))
    }
}

impl Async<std::net::TcpStream> {
    /// Connects (a blocking `connect`: on a monitored runtime the core's spare runs the other
    /// tasks while it waits) and registers the stream.
    pub async fn connect(addr: impl std::net::ToSocketAddrs) -> io::Result<Self> {
        Async::new(std::net::TcpStream::connect(addr)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drive::Driver;

    /// R7's last race: a child of `fork` shares the set, and must never take the turn, look,
    /// or call the set usable; the parent still may.
    #[test]
    fn a_fork_child_never_takes_the_turn() {
        let r = reactor().unwrap();
        assert!(r.usable());
        // SAFETY: the child only loads atomics (the checks below take no lock and allocate
        // nothing when they refuse) and leaves with `_exit`, which runs no handler.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let refused = !r.usable() && !r.is_free() && r.look().is_none() && !r.try_take();
            // SAFETY: ends the child at once, as a child of a multithreaded process must.
            unsafe { libc::_exit(if refused { 0 } else { 1 }) };
        }
        let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
        assert_eq!(
            status,
            nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 0),
            "the child could use the parent's reactor"
        );
        assert!(r.usable());
    }
}
