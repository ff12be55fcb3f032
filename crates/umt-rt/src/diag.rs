//! Warnings a user must see: the runtime is not doing its whole job (no monitor, a worker
//! that could not be monitored or pinned, a leader that failed). Through `tracing` when the
//! application installed a subscriber; otherwise one line on stderr, since a warning nobody
//! sees is a silent degradation. Each kind is said once per runtime: a failure that repeats
//! (one per worker, one per leader iteration) would flood stderr.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Warning {
    /// The monitor fell back to Disabled.
    NoMonitor,
    /// A worker could not register with the monitor.
    Unmonitored,
    /// A worker or a leader could not be pinned to its CPU.
    Unpinned,
    /// A worker's mute or unmute failed.
    Mute,
    /// A leader could not take the idle policy.
    LeaderPolicy,
    /// A leader's wait or drain failed.
    Leader,
    /// The starter could not start a spare worker.
    SpareStart,
    /// Shutdown could not wake the leaders.
    Shutdown,
    /// An onload thread could not be started or take its policy.
    Onload,
    /// A core could not make its io_uring: waits block in system calls.
    Io,
    /// `UMT_NUM_THREADS` was left out or bounded.
    EnvNumThreads,
    /// `Builder::num_threads` asked for more cores than the affinity mask holds.
    NumThreads,
    /// `UMT_BACKEND` was left out.
    EnvBackend,
    /// The cgroup's CPU quota made the default core count smaller than the affinity mask.
    CpuQuota,
    /// A start or exit handler panicked.
    Handler,
    /// The directed handoff could not take its signal.
    Handoff,
    /// The runtime is used in a child of `fork`: its tasks run on the calling thread.
    Forked,
    /// `Builder::panic_handler` panicked.
    PanicHandler,
    /// `Builder::thread_name` panicked or gave a name with a NUL byte.
    ThreadName,
    /// A DYON `Metric::App` function panicked.
    Metric,
}

/// The kinds already said, for one runtime.
#[derive(Debug, Default)]
pub(crate) struct Warnings(AtomicU32);

impl Warnings {
    /// Says `message()` unless a warning of this kind was said before.
    pub(crate) fn warn(&self, kind: Warning, message: impl FnOnce() -> String) {
        let bit = 1 << kind as u32;
        if self.0.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            emit(&message());
        }
    }

    /// Whether a warning of this kind was said.
    #[cfg(test)]
    pub(crate) fn said(&self, kind: Warning) -> bool {
        self.0.load(Ordering::Relaxed) & (1 << kind as u32) != 0
    }
}

/// Where warnings go when the application chose (see [`set_warning_hook`]).
type Hook = Arc<dyn Fn(&str) + Send + Sync>;

static HOOK: RwLock<Option<Hook>> = RwLock::new(None);

/// Sends umt-rt's warnings (the monitor fell back, a worker is not monitored or not pinned, a
/// leader failed, a detached task panicked, `UMT_SCHEDULE` is invalid) to `hook`, for an
/// application that logs through `log` or its own logger; each warning is one line, without
/// the `umt-rt: ` prefix. Without a hook they go to the application's `tracing` subscriber if
/// it installed one, else to stderr. A later call replaces the hook; a hook that does nothing
/// silences them (a command-line tool whose stderr is its user's terminal, say).
///
/// ```
/// umt_rt::set_warning_hook(|line| eprintln!("[my-app] umt-rt says: {line}"));
/// // Or: umt_rt::set_warning_hook(|_| {}); to say nothing.
/// ```
pub fn set_warning_hook<F>(hook: F)
where
    F: Fn(&str) + Send + Sync + 'static,
{
    *HOOK.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(hook));
}

/// Drops `payload`, a panic nobody will receive (a detached task's, a hook's, one after a
/// scope's first). A payload whose own drop panics (`std::panic::panic_any` of such a value)
/// is leaked instead: its panic would unwind out of the thread dropping it, a worker that
/// must go on (tokio leaks such payloads too).
pub(crate) fn drop_panic(payload: Box<dyn std::any::Any + Send>) {
    if let Err(again) =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload)))
    {
        std::mem::forget(again);
    }
}

/// Runs `f`, user code whose panic nobody could receive (a value's drop at a detached task's
/// end, another executor's waker, a hook); `false` if it panicked. The panic is dropped with
/// [`drop_panic`].
pub(crate) fn run_quietly(f: impl FnOnce()) -> bool {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(()) => true,
        Err(payload) => {
            drop_panic(payload);
            false
        }
    }
}

/// One warning: to the hook, else to the application's `tracing` subscriber, else to stderr.
pub(crate) fn emit(message: &str) {
    let hook = HOOK.read().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(hook) = hook {
        // A hook that panics would unwind out of whichever thread warned (a worker, a
        // leader): the warning is dropped instead, as one that cannot be shown is.
        run_quietly(|| hook(message));
    } else if tracing::dispatcher::has_been_set() {
        // The subscriber is the application's code too, run on whichever thread warned.
        run_quietly(|| tracing::warn!("umt-rt: {message}"));
    } else {
        // Not `eprintln!`, which panics when standard error is closed (a daemon's `2>&-`, a
        // reader gone): a warning that cannot be shown is dropped.
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), "umt-rt: {message}");
    }
}

/// Says (as [`emit`] does) that a detached task panicked, with its message when it has one:
/// for a runtime without `Builder::panic_handler`, or none at all.
pub(crate) fn detached_panic(payload: Box<dyn std::any::Any + Send>) {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string payload".to_string());
    drop_panic(payload);
    emit(&format!(
        "a detached task panicked: {what} (Builder::panic_handler receives these)"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `tracing` subscriber whose every event panics.
    struct PanickingSubscriber;

    impl tracing::Subscriber for PanickingSubscriber {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, _: &tracing::Event<'_>) {
            panic!("the subscriber panics");
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// A warning said on a runtime thread must not unwind out of it, whoever shows it.
    #[test]
    fn a_subscriber_that_panics_drops_the_warning_instead_of_unwinding() {
        tracing::subscriber::with_default(PanickingSubscriber, || {
            emit("a warning nobody can show");
        });
    }

    #[test]
    fn each_kind_is_said_once() {
        let w = Warnings::default();
        let mut said = 0;
        for _ in 0..3 {
            w.warn(Warning::Unmonitored, || {
                said += 1;
                "a worker is not monitored".into()
            });
        }
        assert_eq!(said, 1);
        assert!(w.said(Warning::Unmonitored));
        assert!(!w.said(Warning::Unpinned));
    }

    /// A warning with standard error closed (a pipe whose reader is gone: EPIPE) is dropped,
    /// not a panic: this test runs itself again in a child with such a standard error.
    #[test]
    fn a_warning_to_a_closed_stderr_is_dropped() {
        const CHILD: &str = "UMT_TEST_CLOSED_STDERR_CHILD";
        if std::env::var_os(CHILD).is_some() {
            emit("a warning nobody reads");
            return;
        }
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "diag::tests::a_warning_to_a_closed_stderr_is_dropped",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .stdout(std::process::Stdio::null())
            .stderr(writer)
            .status()
            .unwrap();
        assert!(status.success(), "the child failed: {status}");
    }
}
