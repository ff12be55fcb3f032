//! A directory tree walked and its files hashed, the way a rayon user writes it:
//! `walk_tree(root, read_dir).map(hash_file).reduce(..)`. umt-rt's `walk_tree` lets the
//! loop's participants list directories together, and a spare join while one blocks in a
//! read; its `walk_tree_prefix` does too, then lays the nodes out in prefix order. Beside
//! them: the same walk unmonitored, the tree listed on the calling thread first and hashed
//! by a `par_iter` (what `walk_tree` did before), and rayon's `walk_tree` with one thread per
//! core and with four.
//!
//! ```text
//! cargo run --release -p umt-benches --example walk -- [--rounds 5] [--fanout 8] [--depth 2]
//!     [--files 16] [--kib 256] [--cost 1] [--dir .]
//! ```
//!
//! The tree is written once in a private directory under `--dir` (removed at the end). Before
//! each run the caches are dropped: as root, the page cache, dentries and inodes of the
//! whole machine (`/proc/sys/vm/drop_caches`); otherwise the files' pages only
//! (`posix_fadvise(DONTNEED)`), and the directories stay cached. Runners alternate round
//! after round; the table shows medians, relative to rayon with one thread per core, and every
//! runner's hash must agree.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use umt_rt::prelude::*;
use umt_rt::{BackendKind, Runtime};

#[derive(Parser, Debug)]
struct Args {
    /// Rounds (each runs every runner once).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Directories per directory.
    #[arg(long, default_value_t = 8)]
    fanout: usize,
    /// Levels of directories under the root.
    #[arg(long, default_value_t = 2)]
    depth: usize,
    /// Files per directory of the last level.
    #[arg(long, default_value_t = 16)]
    files: usize,
    /// Size of each file, KiB.
    #[arg(long, default_value_t = 256)]
    kib: usize,
    /// Passes of the hash over each file's bytes (CPU per byte).
    #[arg(long, default_value_t = 1)]
    cost: usize,
    /// Where the private tree directory is made.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
}

/// Writes `depth` levels of `fanout` directories under `at`, `files` files in each of the
/// last level's.
fn build(at: &Path, a: &Args, depth: usize, seed: &mut u64) -> std::io::Result<()> {
    if depth == 0 {
        for f in 0..a.files {
            let mut bytes = vec![0u8; a.kib * 1024];
            for b in bytes.iter_mut() {
                *seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                *b = (*seed >> 56) as u8;
            }
            File::create(at.join(format!("f{f}")))?.write_all(&bytes)?;
        }
        return Ok(());
    }
    for d in 0..a.fanout {
        let sub = at.join(format!("d{d}"));
        std::fs::create_dir(&sub)?;
        build(&sub, a, depth - 1, seed)?;
    }
    Ok(())
}

/// A directory's entries, sorted (a leaf has none).
fn children(p: &PathBuf) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(p) else {
        return Vec::new();
    };
    let mut kids: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
    kids.sort();
    kids
}

/// A file's hash (`cost` passes over its bytes); 0 for a directory.
fn hash(p: &Path, cost: usize) -> u64 {
    if p.is_dir() {
        return 0;
    }
    let mut bytes = Vec::new();
    if File::open(p)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .is_err()
    {
        return 0;
    }
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for _ in 0..cost {
        for b in &bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

/// Drops what the next run must read from the disk; says how.
fn drop_caches(files: &[PathBuf]) -> &'static str {
    nix::unistd::sync();
    if std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok() {
        return "page cache, dentries and inodes (root)";
    }
    for f in files {
        if let Ok(file) = File::open(f) {
            let dont_need = nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED;
            let _ = nix::fcntl::posix_fadvise(&file, 0, 0, dont_need);
        }
    }
    "the files' pages only (not root: directories stay cached)"
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> std::io::Result<()> {
    let a = Args::parse();
    let template = a.dir.join("umt-walk-XXXXXX");
    let root = nix::unistd::mkdtemp(&template).map_err(std::io::Error::from)?;
    let mut seed = 1;
    build(&root, &a, a.depth, &mut seed)?;
    let mut files = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(p) = stack.pop() {
        let kids = children(&p);
        if kids.is_empty() && !p.is_dir() {
            files.push(p);
        }
        stack.extend(kids);
    }
    let cores = umt_sys::cpu::process_cpus().map_or(1, |c| c.len());
    let monitored = Runtime::builder().build().expect("a runtime");
    let plain = Runtime::builder()
        .monitor(BackendKind::Disabled)
        .build()
        .expect("a runtime");
    let rayon = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a rayon pool")
    };
    let (rayon1, rayon4) = (rayon(cores), rayon(4 * cores));
    let cost = a.cost;
    let listed_first = |rt: &Runtime| {
        let mut all = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(p) = stack.pop() {
            stack.extend(children(&p).into_iter().rev());
            all.push(p);
        }
        rt.install(|| {
            all.into_par_iter()
                .map(|p| hash(&p, cost))
                .reduce(|| 0, |x, y| x ^ y)
        })
    };
    let umt_walk = |rt: &Runtime, prefix: bool| {
        let r = root.clone();
        rt.install(|| {
            let h = |p: PathBuf| hash(&p, cost);
            if prefix {
                umt_rt::iter::walk_tree_prefix(r, children)
                    .map(h)
                    .reduce(|| 0, |x, y| x ^ y)
            } else {
                umt_rt::iter::walk_tree(r, children)
                    .map(h)
                    .reduce(|| 0, |x, y| x ^ y)
            }
        })
    };
    let rayon_walk = |pool: &rayon::ThreadPool| {
        use rayon::prelude::*;
        let r = root.clone();
        pool.install(|| {
            rayon::iter::walk_tree(r, children)
                .map(|p| hash(&p, cost))
                .reduce(|| 0, |x, y| x ^ y)
        })
    };
    type Runner<'a> = (&'a str, Box<dyn Fn() -> u64 + 'a>);
    let runners: Vec<Runner<'_>> = vec![
        (
            "umt-rt walk_tree (monitor)",
            Box::new(|| umt_walk(&monitored, false)),
        ),
        (
            "umt-rt walk_tree (monitor off)",
            Box::new(|| umt_walk(&plain, false)),
        ),
        (
            "umt-rt walk_tree_prefix",
            Box::new(|| umt_walk(&monitored, true)),
        ),
        (
            "listed first, then umt-rt par_iter",
            Box::new(|| listed_first(&monitored)),
        ),
        ("rayon 1x threads", Box::new(|| rayon_walk(&rayon1))),
        ("rayon 4x threads", Box::new(|| rayon_walk(&rayon4))),
    ];
    let mut times = vec![Vec::new(); runners.len()];
    let mut hashes = vec![None; runners.len()];
    let mut how = "";
    for _ in 0..a.rounds {
        for (i, (_, run)) in runners.iter().enumerate() {
            how = drop_caches(&files);
            let t = Instant::now();
            let h = run();
            times[i].push(t.elapsed().as_secs_f64());
            assert!(
                hashes[i].is_none_or(|old| old == h) && hashes[0].is_none_or(|first| first == h),
                "runner {i} hashed differently"
            );
            hashes[i] = Some(h);
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    let medians: Vec<f64> = times.iter_mut().map(|t| median(t)).collect();
    let base = medians[4];
    println!(
        "{} files of {} KiB in {} directories, {cores} cores, cost {cost}, {} rounds; dropped: {how}; backend {:?}",
        files.len(),
        a.kib,
        (1..=a.depth).map(|l| a.fanout.pow(l as u32)).sum::<usize>() + 1,
        a.rounds,
        monitored.backend(),
    );
    println!("| runner | median s | vs rayon 1x |\n|---|---|---|");
    for ((name, _), m) in runners.iter().zip(&medians) {
        println!("| {name} | {m:.3} | {:.2} |", base / m);
    }
    Ok(())
}
