//! A small request/response service on loopback, written as a tokio user writes one (issue
//! 35): a task per connection that reads a request, computes, and writes the answer. In the
//! blocking scenarios one request in N also blocks in the kernel inside its handler,
//! unannotated: a sleep standing in for a blocking driver call ([`Blocking::Sleep`]), or a
//! `std::fs::read` of a file that is not in the page cache ([`Blocking::ColdRead`]); in the
//! last scenario none does.
//!
//! The servers: umt-rt's futures ([`umt_rt::Runtime::spawn_async`], sockets through
//! [`umt_rt::async_io::Async`]) with the monitor and without; tokio's multi-thread runtime
//! with the handlers as written, and with the blocking call moved to `spawn_blocking` as a
//! careful tokio user would. Each has one worker per core. The clients are threads of this
//! process, each with its own connection, sending its requests one after another and timing
//! each: in a closed loop (the next when the last is answered), or in an open loop at a rate
//! ([`ServeParams::rate`]: each when it is due, timed from then); throughput is requests over
//! the wall time of the whole run. The blocking requests are one in N in the order the
//! clients send them, spread over the run and the clients rather than in bursts.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use umt_rt::async_io::Async;
use umt_rt::{BackendKind, Runtime};

use crate::error::BenchError;
use crate::scan::FileSet;

/// What a blocking request's handler does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Blocking {
    /// Sleeps this long (a blocking driver call).
    Sleep(Duration),
    /// Reads a whole file of the run's [`FileSet`] with `std::fs::read`, the file's pages
    /// dropped from the page cache first (`posix_fadvise(DONTNEED)`), so the read goes to
    /// the device.
    ColdRead,
}

/// The blocking call of request `id` (`files`: the cold files, for [`Blocking::ColdRead`]).
/// Returns the bytes read, for the answer to depend on.
fn blocking_call(blocking: Blocking, files: Option<&FileSet>, id: u64) -> u64 {
    match (blocking, files) {
        (Blocking::Sleep(d), _) => {
            std::thread::sleep(d);
            0
        }
        (Blocking::ColdRead, Some(set)) if !set.paths().is_empty() => {
            let i = (id as usize) % set.paths().len();
            // Dropping only fails on a file that went away; the read then says so.
            let _ = set.drop_cache_of(i);
            std::fs::read(&set.paths()[i]).map_or(0, |b| b.len() as u64)
        }
        (Blocking::ColdRead, _) => 0,
    }
}

/// What the clients ask and what the handlers do.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct ServeParams {
    /// Connections, one client thread each.
    pub clients: usize,
    /// Requests per client.
    pub requests: usize,
    /// One request in this many blocks in its handler (0: none).
    pub block_every: u64,
    /// What a blocking request does in its handler.
    pub blocking: Blocking,
    /// Compute per request (iterations of a hash).
    pub work: u64,
    /// Worker threads of each server (one per core).
    pub cores: usize,
    /// Open loop: requests per second in all, each client's due on a fixed schedule (client
    /// `c`'s request `r` at `(r * clients + c) / rate` seconds), its latency counted from when
    /// it was due, so a server that falls behind is charged for the wait it causes (no
    /// coordinated omission). `None`: closed loop, each client sends its next request when
    /// the answer to the last arrives.
    pub rate: Option<f64>,
    /// umt's idle workers wait for socket events themselves (`Builder::drive_io`); off: every
    /// event goes through the reactor thread.
    pub drive_io: bool,
    /// umt's handoff (`Builder::handoff`): directed on the Bpf backend, a handler back from
    /// its block gets its core from the worker running there.
    pub handoff: bool,
    /// Closed loop only: the client threads run at nice [`CLIENTS_FIRST_NICE`], so that a
    /// client woken by its answer mostly preempts the server's thread and reads it at once:
    /// a latency is then mostly the server's, not also its client thread's wait for a CPU it
    /// shares with the server (nearer clients on machines of their own). Not exactly: the
    /// kernel may still let the running thread finish its slice, and the clients' CPU time
    /// now comes first, which costs a server pinned to its cores (umt's workers) more than
    /// one whose threads may move (tokio's). Needs `CAP_SYS_NICE` ([`check_clients_first`]).
    pub clients_first: bool,
}

/// The nice value of the client threads with [`ServeParams::clients_first`]: above any
/// server thread's (0), so a client woken by its answer preempts the server's worker.
pub const CLIENTS_FIRST_NICE: i32 = -10;

/// Raises the calling thread's priority to [`CLIENTS_FIRST_NICE`].
fn raise_client_priority() -> std::io::Result<()> {
    let tid = nix::unistd::gettid().as_raw() as libc::id_t;
    // SAFETY: `setpriority` with `PRIO_PROCESS` and a thread id changes that thread's nice
    // value on Linux (nice values are per thread) and touches no memory of ours.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, CLIENTS_FIRST_NICE) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether clients first ([`ServeParams::clients_first`]) may run with `rate`: a closed loop
/// (`rate` is `None`) and the right to raise the clients' priority (tried on a thread of its
/// own, which then ends). The error says what to do; `Ok` when `clients_first` is off.
pub fn check_clients_first(clients_first: bool, rate: Option<f64>) -> Result<(), BenchError> {
    if !clients_first {
        return Ok(());
    }
    if rate.is_some() {
        return Err(BenchError::InvalidParam(
            "serve: --clients-first is for the closed loop (leave out --rate): an open loop's \
             clients spin until each request is due, and above the server's priority they \
             would take its CPUs"
                .into(),
        ));
    }
    let tried = std::thread::spawn(raise_client_priority).join();
    match tried {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(BenchError::InvalidParam(format!(
            "serve --clients-first: cannot raise the client threads' priority to nice \
             {CLIENTS_FIRST_NICE} ({e}); it needs CAP_SYS_NICE: run as root, or leave the flag \
             out"
        ))),
        Err(_) => Err(BenchError::InvalidParam(
            "serve --clients-first: the priority check's thread panicked".into(),
        )),
    }
}

/// The servers compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Server {
    /// umt-rt futures, monitor on (Auto).
    UmtMonitor,
    /// umt-rt futures, monitor off.
    UmtOff,
    /// tokio multi-thread, handlers as written.
    Tokio,
    /// tokio multi-thread, the blocking call in `spawn_blocking`.
    TokioSpawnBlocking,
}

impl Server {
    /// Every server, in table order.
    pub const ALL: [Server; 4] = [
        Server::UmtMonitor,
        Server::UmtOff,
        Server::Tokio,
        Server::TokioSpawnBlocking,
    ];

    /// Its name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Server::UmtMonitor => "umt (monitor)",
            Server::UmtOff => "umt (monitor off)",
            Server::Tokio => "tokio",
            Server::TokioSpawnBlocking => "tokio + spawn_blocking",
        }
    }
}

/// One run of one server.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServeRun {
    /// The server.
    pub server: Server,
    /// Requests per second over the run.
    pub throughput: f64,
    /// Latency percentiles of the requests, in microseconds: 50, 99, 99.9.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// 99th percentile of the requests whose handlers do not block: what a blocked handler
    /// costs the others (the same as `p99_us` when none blocks).
    pub p99_others_us: f64,
    /// Open loop: the 99th percentile of how late the clients sent their requests (us after
    /// each was due), the measurement's own error: a latency below it means little.
    pub p99_late_us: Option<f64>,
    /// umt with its monitor: the backend the runtime chose, and why not a better one
    /// (`Runtime::selection`); `None` for the other servers.
    pub monitor: Option<String>,
}

/// One scenario's runs: the median of each server.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServeScenario {
    /// Its name.
    pub scenario: String,
    /// Its parameters.
    pub params: ServeParams,
    /// One run per server, in [`Server::ALL`] order.
    pub runs: Vec<ServeRun>,
}

/// A request: its number and whether its handler blocks.
const REQUEST: usize = 16;

/// What a handler computes: `work` rounds of a hash of the request's number.
fn compute(id: u64, work: u64) -> u64 {
    (0..work).fold(id ^ 0x9e37_79b9_7f4a_7c15, |h, i| {
        (h ^ i).wrapping_mul(0x0100_0000_01b3).rotate_left(7)
    })
}

fn parse(req: &[u8; REQUEST]) -> (u64, bool) {
    let id = u64::from_le_bytes(req[..8].try_into().unwrap_or_default());
    (id, req[8] != 0)
}

/// A running server: where it listens, and how to stop it.
struct Running {
    addr: SocketAddr,
    stop: Box<dyn FnOnce() -> Result<(), BenchError>>,
    /// [`ServeRun::monitor`].
    monitor: Option<String>,
}

/// Starts `server`; it serves `p.clients` connections, each until its client closes it.
fn start(
    server: Server,
    p: ServeParams,
    files: Option<Arc<FileSet>>,
) -> Result<Running, BenchError> {
    match server {
        Server::UmtMonitor | Server::UmtOff => start_umt(server == Server::UmtMonitor, p, files),
        Server::Tokio | Server::TokioSpawnBlocking => {
            start_tokio(server == Server::TokioSpawnBlocking, p, files)
        }
    }
}

fn start_umt(
    monitor: bool,
    p: ServeParams,
    files: Option<Arc<FileSet>>,
) -> Result<Running, BenchError> {
    let rt = Runtime::builder()
        .num_threads(p.cores)
        .monitor(if monitor {
            BackendKind::Auto
        } else {
            BackendKind::Disabled
        })
        .drive_io(p.drive_io)
        .handoff(p.handoff)
        .build()
        .map_err(|e| BenchError::Runtime(format!("umt-rt: {e}")))?;
    let monitor = monitor.then(|| rt.selection().to_string());
    let listener = Async::<std::net::TcpListener>::bind("127.0.0.1:0").map_err(net("bind"))?;
    let addr = listener.get_ref().local_addr().map_err(net("local_addr"))?;
    let acceptor = rt.spawn_async(async move {
        let mut conns = Vec::with_capacity(p.clients);
        for _ in 0..p.clients {
            let (stream, _) = listener.accept().await?;
            stream.get_ref().set_nodelay(true)?;
            let files = files.clone();
            conns.push(umt_rt::spawn_async(async move {
                let mut req = [0u8; REQUEST];
                while stream.read_exact(&mut req).await.is_ok() {
                    let (id, blocks) = parse(&req);
                    if blocks {
                        // Unannotated: on umt the monitor covers it.
                        std::hint::black_box(blocking_call(p.blocking, files.as_deref(), id));
                    }
                    let answer = compute(id, p.work).to_le_bytes();
                    if stream.write_all(&answer).await.is_err() {
                        return;
                    }
                }
            }));
        }
        for c in conns {
            c.await;
        }
        Ok::<(), std::io::Error>(())
    });
    Ok(Running {
        addr,
        stop: Box::new(move || {
            acceptor.join().map_err(net("accept"))?;
            drop(rt);
            Ok(())
        }),
        monitor,
    })
}

fn start_tokio(
    spawn_blocking: bool,
    p: ServeParams,
    files: Option<Arc<FileSet>>,
) -> Result<Running, BenchError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(p.cores)
        .enable_all()
        .build()
        .map_err(|e| BenchError::Runtime(format!("tokio: {e}")))?;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .map_err(net("bind"))?;
    let addr = listener.local_addr().map_err(net("local_addr"))?;
    let acceptor = rt.spawn(async move {
        let mut conns = Vec::with_capacity(p.clients);
        for _ in 0..p.clients {
            let (mut stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            let files = files.clone();
            conns.push(tokio::spawn(async move {
                let mut req = [0u8; REQUEST];
                while stream.read_exact(&mut req).await.is_ok() {
                    let (id, blocks) = parse(&req);
                    if blocks {
                        if spawn_blocking {
                            let files = files.clone();
                            let _ = tokio::task::spawn_blocking(move || {
                                blocking_call(p.blocking, files.as_deref(), id)
                            })
                            .await;
                        } else {
                            // As written: the worker thread blocks.
                            std::hint::black_box(blocking_call(p.blocking, files.as_deref(), id));
                        }
                    }
                    let answer = compute(id, p.work).to_le_bytes();
                    if stream.write_all(&answer).await.is_err() {
                        return;
                    }
                }
            }));
        }
        for c in conns {
            let _ = c.await;
        }
        Ok::<(), std::io::Error>(())
    });
    Ok(Running {
        addr,
        stop: Box::new(move || {
            rt.block_on(acceptor)
                .map_err(|e| BenchError::Runtime(format!("tokio acceptor: {e}")))?
                .map_err(net("accept"))
        }),
        monitor: None,
    })
}

/// The error of socket operation `what`.
fn net(what: &'static str) -> impl FnOnce(std::io::Error) -> BenchError {
    move |source| BenchError::Net { what, source }
}

/// When request `r` of client `c` is due in an open loop at `rate` requests per second in all
/// (from the start of the run).
fn due(r: usize, c: usize, clients: usize, rate: f64) -> Duration {
    Duration::from_secs_f64((r as f64 * clients as f64 + c as f64) / rate)
}

/// Request `r` of client `c`: its number, `r * clients + c`, the order in which an open loop
/// sends them, and whether its handler blocks: one number in `block_every`, so the blocking
/// requests are spread evenly over the run and over the clients (not every client's `r`-th
/// request at once).
fn request(r: usize, c: usize, p: &ServeParams) -> (u64, bool) {
    let id = (r * p.clients + c) as u64;
    (id, p.block_every > 0 && id.is_multiple_of(p.block_every))
}

/// Microseconds, saturated to `u32`.
fn micros(d: Duration) -> u32 {
    d.as_micros().min(u128::from(u32::MAX)) as u32
}

/// Waits until `at`: sleeps until shortly before, then spins, so a request leaves on time
/// (a sleep alone overshoots by the timer slack and the wake-up).
fn wait_until(at: Instant) {
    const SPIN: Duration = Duration::from_micros(100);
    if let Some(wait) = at.checked_duration_since(Instant::now())
        && wait > SPIN
    {
        std::thread::sleep(wait - SPIN);
    }
    while Instant::now() < at {
        std::hint::spin_loop();
    }
}

/// What one client measured: per request its latency in us and whether its handler blocks,
/// and per request of an open loop how late it left (us after it was due).
type ClientSamples = (Vec<(u32, bool)>, Vec<u32>);

/// One client: its requests one after another (in an open loop, each when it is due from
/// the shared start `t0`), each timed.
fn client(
    addr: SocketAddr,
    c: usize,
    p: ServeParams,
    go: &Barrier,
    t0: &std::sync::OnceLock<Instant>,
) -> std::io::Result<ClientSamples> {
    let raised = if p.clients_first {
        raise_client_priority()
    } else {
        Ok(())
    };
    let stream = TcpStream::connect(addr).and_then(|s| s.set_nodelay(true).map(|()| s));
    // Everyone passes the barrier, a client that could not connect too.
    go.wait();
    // Set before the barrier by `run`; a client never sees it unset.
    let t0 = t0.get().copied().unwrap_or_else(Instant::now);
    raised?;
    let mut stream = stream?;
    let mut lat = Vec::with_capacity(p.requests.min(1 << 20));
    let mut late = Vec::new();
    for r in 0..p.requests {
        let (id, blocks) = request(r, c, &p);
        let mut req = [0u8; REQUEST];
        req[..8].copy_from_slice(&id.to_le_bytes());
        req[8] = u8::from(blocks);
        let start = match p.rate {
            Some(rate) => {
                let at = t0 + due(r, c, p.clients, rate);
                wait_until(at);
                late.push(micros(at.elapsed()));
                at
            }
            None => Instant::now(),
        };
        stream.write_all(&req)?;
        let mut answer = [0u8; 8];
        stream.read_exact(&mut answer)?;
        lat.push((micros(start.elapsed()), blocks));
        if u64::from_le_bytes(answer) != compute(id, p.work) {
            return Err(std::io::Error::other(format!(
                "wrong answer to request {id}"
            )));
        }
    }
    Ok((lat, late))
}

/// The `q` quantile (0..=1) of sorted samples.
fn quantile(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    f64::from(sorted[i.min(sorted.len() - 1)])
}

/// Refuses an open loop's `rate` (requests per second) unless it sends all `requests` within
/// an hour: a rate of zero, below zero or not a number would never end.
pub fn check_rate(rate: Option<f64>, requests: usize) -> Result<(), BenchError> {
    if rate.is_some_and(|r| !(r.is_finite() && r > 0.0 && requests as f64 / r <= 3600.0)) {
        return Err(BenchError::InvalidParam(
            "serve: an open loop's rate must be a number of requests per second that sends \
             them all within an hour"
                .into(),
        ));
    }
    Ok(())
}

/// One run of `server`: start it, run every client, stop it. `files` are the cold files of
/// [`Blocking::ColdRead`] (needed there, unused otherwise).
pub fn run(
    server: Server,
    p: ServeParams,
    files: Option<&Arc<FileSet>>,
) -> Result<ServeRun, BenchError> {
    if p.clients == 0 || p.requests == 0 || p.cores == 0 {
        return Err(BenchError::InvalidParam(
            "serve needs at least one client, one request and one core".into(),
        ));
    }
    check_rate(p.rate, p.clients.saturating_mul(p.requests))?;
    check_clients_first(p.clients_first, p.rate)?;
    if p.blocking == Blocking::ColdRead
        && p.block_every > 0
        && files.is_none_or(|f| f.paths().is_empty())
    {
        return Err(BenchError::InvalidParam(
            "serve: cold reads need a set of files to read".into(),
        ));
    }
    let running = start(server, p, files.cloned())?;
    let go = Arc::new(Barrier::new(p.clients + 1));
    let t0 = Arc::new(std::sync::OnceLock::new());
    let threads: Vec<_> = (0..p.clients)
        .map(|c| {
            let (go, t0, addr) = (go.clone(), t0.clone(), running.addr);
            std::thread::Builder::new()
                .name(format!("serve-client-{c}"))
                .spawn(move || client(addr, c, p, &go, &t0))
        })
        .collect::<Result<_, _>>()
        .map_err(net("start a client thread"))?;
    // One start for every client, a little ahead, so that the schedule's interleaving holds
    // however late each client thread wakes from the barrier.
    let _ = t0.set(Instant::now() + Duration::from_millis(2));
    go.wait();
    let start = Instant::now();
    let mut lat: Vec<(u32, bool)> = Vec::new();
    let mut late: Vec<u32> = Vec::new();
    let mut failed = None;
    for t in threads {
        match t.join() {
            Ok(Ok((l, g))) => {
                lat.extend(l);
                late.extend(g);
            }
            Ok(Err(e)) => failed = Some(e.to_string()),
            Err(_) => failed = Some("a client thread panicked".into()),
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let monitor = running.monitor;
    (running.stop)()?;
    if let Some(why) = failed {
        return Err(BenchError::Net {
            what: server.name(),
            source: std::io::Error::other(why),
        });
    }
    let mut others: Vec<u32> = lat.iter().filter(|l| !l.1).map(|l| l.0).collect();
    let mut lat: Vec<u32> = lat.into_iter().map(|l| l.0).collect();
    lat.sort_unstable();
    others.sort_unstable();
    late.sort_unstable();
    Ok(ServeRun {
        server,
        throughput: lat.len() as f64 / seconds,
        p50_us: quantile(&lat, 0.5),
        p99_us: quantile(&lat, 0.99),
        p999_us: quantile(&lat, 0.999),
        p99_others_us: quantile(&others, 0.99),
        p99_late_us: p.rate.map(|_| quantile(&late, 0.99)),
        monitor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small closed loop: 4 clients, 50 requests each, one in 10 sleeping 200 us.
    fn small() -> ServeParams {
        ServeParams {
            clients: 4,
            requests: 50,
            block_every: 10,
            blocking: Blocking::Sleep(Duration::from_micros(200)),
            work: 100,
            cores: 2,
            rate: None,
            drive_io: true,
            handoff: false,
            clients_first: false,
        }
    }

    #[test]
    fn every_server_answers_every_request_correctly() {
        let p = small();
        let dir = tempfile::tempdir().unwrap();
        let files = Arc::new(
            FileSet::create(&crate::scan::ScanParams {
                files: 3,
                file_mib: 1,
                rounds: 1,
                dir: dir.path().to_path_buf(),
            })
            .unwrap(),
        );
        for s in Server::ALL {
            let r = run(s, p, None).unwrap();
            assert!(r.throughput > 0.0, "{r:?}");
            assert!(r.p50_us <= r.p99_us && r.p99_us <= r.p999_us, "{r:?}");
            // Only umt with its monitor names one, and says which backend it got.
            assert_eq!(r.monitor.is_some(), s == Server::UmtMonitor, "{r:?}");
            assert!(
                r.monitor.as_ref().is_none_or(|m| m.contains("backend")),
                "{r:?}"
            );
            let cold = ServeParams {
                blocking: Blocking::ColdRead,
                ..p
            };
            let r = run(s, cold, Some(&files)).unwrap();
            assert!(r.throughput > 0.0, "{r:?}");
        }
        // Cold reads without files are refused before anything starts.
        let cold = ServeParams {
            blocking: Blocking::ColdRead,
            ..p
        };
        assert!(matches!(
            run(Server::Tokio, cold, None),
            Err(BenchError::InvalidParam(_))
        ));
    }

    #[test]
    fn an_open_loop_interleaves_the_clients_and_spreads_the_blocking_requests() {
        // Client c's request r is due at (r * clients + c) / rate: the clients interleave,
        // and one request in `block_every`, in that order, blocks.
        let every = ServeParams {
            clients: 4,
            requests: 10,
            block_every: 3,
            blocking: Blocking::Sleep(Duration::ZERO),
            work: 1,
            cores: 1,
            rate: None,
            drive_io: true,
            handoff: false,
            clients_first: false,
        };
        let blocking: Vec<u64> = (0..10)
            .flat_map(|r| (0..4).map(move |c| (r, c)))
            .map(|(r, c)| request(r, c, &every))
            .filter(|q| q.1)
            .map(|q| q.0)
            .collect();
        assert_eq!(blocking, (0..40).step_by(3).collect::<Vec<u64>>());
        assert_eq!(due(0, 0, 4, 1000.0), Duration::ZERO);
        assert_eq!(due(0, 3, 4, 1000.0), Duration::from_millis(3));
        assert_eq!(due(1, 0, 4, 1000.0), Duration::from_millis(4));
        let p = ServeParams {
            clients: 3,
            requests: 20,
            block_every: 0,
            blocking: Blocking::Sleep(Duration::ZERO),
            work: 100,
            cores: 2,
            rate: Some(20_000.0),
            drive_io: true,
            handoff: false,
            clients_first: false,
        };
        for s in [Server::UmtMonitor, Server::Tokio] {
            let r = run(s, p, None).unwrap();
            assert!(r.throughput > 0.0, "{r:?}");
            // Nothing blocks: the others are every request.
            assert_eq!(r.p99_others_us, r.p99_us, "{r:?}");
            assert!(r.p99_late_us.is_some(), "{r:?}");
        }
        // A rate that would take longer than an hour (or forever) is refused.
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-300, 0.01] {
            let p = ServeParams {
                rate: Some(bad),
                ..p
            };
            assert!(matches!(
                run(Server::Tokio, p, None),
                Err(BenchError::InvalidParam(_))
            ));
        }
    }

    #[test]
    fn clients_first_serves_the_closed_loop_where_allowed_and_refuses_the_open_loop() {
        let p = ServeParams {
            clients_first: true,
            ..small()
        };
        let open = ServeParams {
            rate: Some(20_000.0),
            ..p
        };
        assert!(matches!(
            run(Server::Tokio, open, None),
            Err(BenchError::InvalidParam(_))
        ));
        match check_clients_first(true, None) {
            Ok(()) => {
                for s in Server::ALL {
                    let r = run(s, p, None).unwrap();
                    assert!(r.throughput > 0.0, "{r:?}");
                }
            }
            // Without CAP_SYS_NICE the flag is refused before anything starts, saying why.
            Err(e) => {
                assert!(e.to_string().contains("CAP_SYS_NICE"), "{e}");
                assert!(run(Server::Tokio, p, None).is_err());
            }
        }
    }

    #[test]
    fn a_cold_read_reads_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let files = FileSet::create(&crate::scan::ScanParams {
            files: 2,
            file_mib: 1,
            rounds: 1,
            dir: dir.path().to_path_buf(),
        })
        .unwrap();
        assert_eq!(blocking_call(Blocking::ColdRead, Some(&files), 5), 1 << 20);
        assert_eq!(blocking_call(Blocking::ColdRead, None, 5), 0);
    }

    #[test]
    fn quantiles_pick_the_sample_at_their_rank() {
        let s: Vec<u32> = (1..=1000).collect();
        assert_eq!(quantile(&s, 0.5), 501.0);
        assert_eq!(quantile(&s, 0.99), 990.0);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
