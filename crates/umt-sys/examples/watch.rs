//! Watch block/unblock events live.
//!
//! ```text
//! cargo run -p umt-sys --example watch -- --seconds 3 [--backend auto|kernel|perf|off]
//! ```
//!
//! Starts a thread that sleeps, one that reads a file with `O_DIRECT` (real disk I/O), and one
//! that spins; registers them with a [`Monitor`] and prints every event as it is drained, with
//! its core. The first line names the backend; the lines after it say why better backends were
//! rejected and how to fix that.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use umt_sys::{BackendKind, Cause, Monitor, MonitorEvent, cpu};

#[derive(Parser, Debug)]
#[command(about = "Print the block/unblock events of a few threads as they happen")]
struct Args {
    /// How long to watch, in seconds (more than 0, at most a day).
    #[arg(long, default_value_t = 3.0, value_parser = parse_seconds)]
    seconds: f64,
    /// Monitor backend: auto, kernel, perf or off.
    #[arg(long, default_value = "auto")]
    backend: BackendKind,
    /// Directory for the file the reader thread reads.
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// `--seconds`: a number of seconds above 0 and at most a day, so that the deadline can be
/// computed (a negative, NaN or huge value would panic `Duration::from_secs_f64`).
fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 86_400.0 => Ok(v),
        Ok(_) => Err(format!(
            "{s} is not in (0, 86400]: give a duration in seconds"
        )),
        Err(e) => Err(format!("{s}: {e}")),
    }
}

const CHUNK: usize = 1 << 20;

/// A 4 KiB-aligned buffer, as `O_DIRECT` requires.
#[repr(C, align(4096))]
struct Page([u8; 4096]);

fn aligned_buffer(len: usize) -> Vec<Page> {
    (0..len / 4096).map(|_| Page([0; 4096])).collect()
}

fn as_bytes_mut(pages: &mut [Page]) -> &mut [u8] {
    let len = pages.len() * 4096;
    // SAFETY: `Page` is plain bytes with no padding, so the pages are `len` contiguous bytes.
    unsafe { std::slice::from_raw_parts_mut(pages.as_mut_ptr().cast::<u8>(), len) }
}

/// Creates a 4 MiB file and opens it for direct reads (falls back to buffered reads when the
/// filesystem refuses `O_DIRECT`: tmpfs before Linux 6.6, some FUSE and network filesystems).
/// The file lives in a private directory made in `dir` (`mkdtemp`, mode 700), removed with it
/// when the returned guard drops: nobody else can plant a file or a link where it goes, or
/// swap it between its creation and its reopening (issue 30).
fn open_data_file(
    dir: &std::path::Path,
) -> std::io::Result<(File, PathBuf, bool, tempfile::TempDir)> {
    // Mode 700 whatever the umask: tempfile's default is 777 less the umask.
    let private = tempfile::Builder::new()
        .prefix("umt-watch-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(dir)?;
    let path = private.path().join("data");
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)?;
    f.write_all(&vec![7u8; 4 * CHUNK])?;
    f.sync_all()?;
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT | libc::O_NOFOLLOW)
        .open(&path)
    {
        Ok(f) => Ok((f, path, true, private)),
        Err(_) => Ok((File::open(&path)?, path, false, private)),
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock of the perf backend's timestamps.
fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("clock_gettime");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// Registers the calling thread and runs `body` until `stop`.
fn run_worker(
    monitor: &Monitor,
    stop: &AtomicBool,
    names: &Mutex<HashMap<i32, &'static str>>,
    name: &'static str,
    body: &dyn Fn(),
) -> Result<(), umt_sys::Error> {
    names.lock().unwrap().insert(cpu::current_tid(), name);
    monitor.register_current_thread()?;
    while !stop.load(Ordering::Relaxed) {
        body();
    }
    monitor.unregister_current_thread()
}

/// Says what went wrong, and what to do about it (umt-sys's messages carry the fix), rather
/// than the `Debug` form `main` would print for an error it returns.
fn main() -> std::process::ExitCode {
    match watch(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The reader went away (`watch | head`): nothing more to say, and no one to say it to.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("watch: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Whether the standard output is a pipe whose reader went away: `poll` reports an error on
/// the write end of such a pipe (`watch | head`), with nothing written.
fn output_gone() -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::empty())];
    poll(&mut fds, PollTimeout::ZERO).is_ok()
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP))
}

/// Writes a line to stdout; an error (a closed pipe) is returned, never a panic.
fn out(line: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_fmt(line)?;
    stdout.write_all(b"\n")
}

/// Sets `stop` when dropped: on every way out of the watch loop (the deadline, an error, a
/// closed output), so the workers end and the scope can return.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn watch(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let monitor = Monitor::new(args.backend)?;
    let sel = monitor.selection();
    out(format_args!(
        "backend: {} (requested {})",
        sel.chosen, sel.requested
    ))?;
    for r in &sel.rejected {
        out(format_args!("  rejected: {r}"))?;
    }
    let dir = args.dir.unwrap_or_else(std::env::temp_dir);
    // Removed on every way out, an error or a closed output included.
    let (file, path, direct, _private) = open_data_file(&dir)?;
    out(format_args!(
        "reader: {} ({})",
        path.display(),
        if direct {
            "O_DIRECT"
        } else {
            "buffered: this filesystem refuses O_DIRECT"
        }
    ))?;

    let stop = AtomicBool::new(false);
    let names: Mutex<HashMap<i32, &'static str>> = Mutex::new(HashMap::new());
    let start = Instant::now();
    let start_ns = monotonic_ns();
    let deadline = start + Duration::from_secs_f64(args.seconds);
    let mut per_thread: HashMap<Option<i32>, (u64, u64)> = HashMap::new();

    std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error>> {
        let _stop = StopOnDrop(&stop);
        let sleep = || std::thread::sleep(Duration::from_millis(30));
        let read = || {
            let mut buf = aligned_buffer(CHUNK);
            let _ = file.read_at(as_bytes_mut(&mut buf), 0);
            std::thread::sleep(Duration::from_millis(50));
        };
        let spin = || {
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(10) {
                std::hint::spin_loop();
            }
        };
        let (m, st, n) = (&monitor, &stop, &names);
        let handles = [
            s.spawn(move || run_worker(m, st, n, "sleeper", &sleep)),
            s.spawn(move || run_worker(m, st, n, "reader", &read)),
            s.spawn(move || run_worker(m, st, n, "spinner", &spin)),
        ];
        let closed: std::cell::RefCell<Option<std::io::Error>> = std::cell::RefCell::new(None);
        let mut print = |ev: &MonitorEvent| {
            if closed.borrow().is_some() {
                return;
            }
            let who = ev
                .tid
                .map(|t| {
                    let name = names.lock().unwrap().get(&t).copied().unwrap_or("?");
                    format!("{name} (tid {t})")
                })
                .unwrap_or_else(|| "-".to_owned());
            let what = match (ev.events.blocked, ev.events.unblocked) {
                (1, 0) => "BLOCK  ".to_owned(),
                (0, 1) => "UNBLOCK".to_owned(),
                (b, u) => format!("{b} blocks, {u} unblocks"),
            };
            let cause = match ev.cause {
                Cause::Kernel => "kernel",
                Cause::Switch => "switch",
                Cause::Migration => "migration",
                Cause::Register => "register",
                Cause::Unregister => "unregister",
                Cause::Exit => "exit",
                Cause::Resync => "resync",
                Cause::Counted => "counted",
            };
            // The kernel's timestamp of the switch when the backend has one, else the time seen.
            let at_ms = ev.time_ns.map_or(start.elapsed().as_secs_f64() * 1e3, |t| {
                t.saturating_sub(start_ns) as f64 / 1e6
            });
            if let Err(e) = out(format_args!(
                "{at_ms:>9.3} ms  cpu {:<3} {what}  {who:<22} [{cause}]",
                ev.cpu
            )) {
                *closed.borrow_mut() = Some(e);
            }
            let e = per_thread.entry(ev.tid).or_default();
            e.0 += u64::from(ev.events.blocked);
            e.1 += u64::from(ev.events.unblocked);
        };
        while Instant::now() < deadline && closed.borrow().is_none() {
            monitor.wait(Some(Duration::from_millis(100)))?;
            monitor.drain_with(&mut print)?;
            // With no events to print (the Disabled backend), no write would find the closed
            // pipe: look for it.
            if output_gone() {
                *closed.borrow_mut() = Some(std::io::ErrorKind::BrokenPipe.into());
            }
        }
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().map_err(|_| "a worker thread panicked")??;
        }
        monitor.drain_with(&mut print)?;
        let closed = closed.borrow_mut().take();
        match closed {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    })?;

    out(format_args!("summary after {:.1} s:", args.seconds))?;
    let names = names.into_inner().unwrap();
    let mut rows: Vec<_> = per_thread.into_iter().collect();
    rows.sort_by_key(|(t, _)| *t);
    for (tid, (b, u)) in rows {
        let name = tid.and_then(|t| names.get(&t)).copied().unwrap_or("all");
        out(format_args!("  {name:<8} blocks {b:>5}  unblocks {u:>5}"))?;
    }
    out(format_args!("  {:?}", monitor.stats()))?;
    out(format_args!(
        "  ready counts now: {:?}",
        monitor.ready_counts()
    ))?;
    Ok(())
}
