//! A child of `fork` has only the thread that called it: none of the runtimes' workers,
//! leaders or starter. The work it gives a runtime its parent built runs on its calling
//! thread, the global runtime is built again there, and dropping a runtime there returns
//! (a user's trial, 2026-11-30: the first two waited for ever, the drop panicked in the
//! standard library's join). Steps F1–F3 in `src/README.md`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use umt_rt::Runtime;
use umt_rt::prelude::*;

/// A future that wakes itself `left` times before it is ready.
struct SelfWaking {
    left: u32,
}

impl std::future::Future for SelfWaking {
    type Output = u32;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<u32> {
        if self.left == 0 {
            return std::task::Poll::Ready(7);
        }
        self.left -= 1;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

type Said = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// What the child checks; the exit status says which failed (0: none).
fn in_child(rt: Runtime, said: Said) -> i32 {
    // The global runtime, built again in this process: its loops run on its workers.
    let sum: u64 = (0..1000u64).into_par_iter().sum();
    if sum != 499_500 {
        return 10;
    }
    let ran_on_worker = umt_rt::spawn(umt_rt::current_thread_index).join();
    if ran_on_worker.is_none() {
        return 11;
    }
    // The parent's runtime: its work runs on this thread.
    let me = std::thread::current().id();
    if rt.install(|| std::thread::current().id()) != me {
        return 12;
    }
    if rt.spawn(|| 6).join() != 6 {
        return 13;
    }
    // A loop inside: on the child's global runtime (this thread is no worker).
    let inside: u64 = rt.install(|| (0..100u64).into_par_iter().map(|x| x * 2).sum());
    if inside != 9900 {
        return 14;
    }
    let n = std::sync::atomic::AtomicUsize::new(0);
    rt.scope(|s| {
        for _ in 0..4 {
            s.spawn(|_| {
                n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
    });
    if n.into_inner() != 4 {
        return 15;
    }
    // A future of the parent's runtime that wakes itself: polled again in a loop, not one
    // stack frame deeper per wake (100 000 of them overflowed the stack).
    if rt.spawn_async(SelfWaking { left: 100_000 }).join() != 7 {
        return 17;
    }
    // Said once, whatever ran there.
    let forked = said
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("built before this process was forked"))
        .count();
    if forked != 1 {
        return 16;
    }
    drop(rt);
    0
}

#[test]
fn a_fork_child_runs_its_parents_runtime_work_and_builds_its_own_global_runtime() {
    // Set before any runtime: a thread that warns holds the hook's lock, which a fork could
    // copy held.
    let said = Said::default();
    let sink = said.clone();
    umt_rt::set_warning_hook(move |line| sink.lock().unwrap().push(line.to_owned()));
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    assert_eq!(rt.install(|| 1), 1);
    // The parent's global runtime exists, with its threads.
    let sum: u64 = (0..1000u64).into_par_iter().sum();
    assert_eq!(sum, 499_500);
    // Every worker of both has started (and said what it had to): none is in the middle of
    // it when the fork copies the process.
    rt.broadcast(|_| ());
    umt_rt::broadcast(|_| ());
    // SAFETY: the child runs Rust code that allocates and starts threads: glibc's `fork`
    // leaves malloc usable in the child, and the parent's runtime threads are idle here
    // (nothing of theirs holds a lock the child takes). The child leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let status = catch_unwind(AssertUnwindSafe(|| in_child(rt, said))).unwrap_or(2);
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(status) };
    }
    // A hang in the child is a failure, not a hung test: waited for 5 minutes at most.
    let child = Pid::from_raw(pid);
    let start = Instant::now();
    let status = loop {
        match waitpid(child, Some(WaitPidFlag::WNOHANG)).unwrap() {
            WaitStatus::StillAlive if start.elapsed() < Duration::from_secs(300) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            WaitStatus::StillAlive => {
                let _ = nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGKILL);
                let _ = waitpid(child, None);
                panic!("the child still ran after 5 minutes (hung)");
            }
            status => break status,
        }
    };
    assert_eq!(
        status,
        WaitStatus::Exited(child, 0),
        "the child's check failed"
    );
    // The parent's runtime is untouched.
    assert_eq!(rt.install(|| 2), 2);
}
