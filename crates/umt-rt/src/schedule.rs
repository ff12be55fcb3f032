//! Loop schedules (the OS-vs-runtime scheduling study, seed 003, after LB4OMP): how a parallel
//! loop's index space `0..len` is cut into chunks and handed to the loop's participants (one
//! per core). The chunk-size rules are written as in the literature, as pure functions
//! ([`chunk_sequence`], [`af_chunk`]); a [`Dispenser`] hands the chunks out at run time.
//! Design notes: `iter/README.md`, "Schedules".

use std::fmt;
use std::ops::Range;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crossbeam_utils::CachePadded;

/// How a parallel loop hands its iterations to the cores: set per loop with
/// [`ParallelIterator::schedule`](crate::iter::ParallelIterator::schedule), for a whole program with the
/// environment variable `UMT_SCHEDULE` (same spelling as [`Schedule::from_str`]: `static`,
/// `static_steal`, `dynamic,64`, `guided,8`, `fac2`, `af`, `auto`), else
/// [`Schedule::StaticSteal`].
///
/// `P` below is the number of participants (the runtime's cores, at most the loop's length),
/// `R` the iterations not yet handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Schedule {
    /// One contiguous block of `ceil` or `floor(len / P)` iterations per participant, decided
    /// up front: the least overhead and the best locality, no rebalancing.
    Static,
    /// `Static`'s blocks, each taken by its owner in pieces of `ceil(r / 8)`, `r` what is left
    /// of it; a participant whose block is done steals the back half of the next non-empty
    /// block and makes it its own (as LLVM's `static_steal`).
    ///
    /// A piece is also cut to what its owner runs in about [`STEAL_CHUNK_TIME`] at the pace of
    /// its previous piece (its first piece is one iteration): iterations that take long, or
    /// block in the kernel, are taken one at a time, so the rest of a block stays for thieves
    /// and for the participants that join while one blocks, and the loop's tail is at most
    /// one piece of about that time (or one iteration, if longer) per participant, not an
    /// eighth of a block.
    StaticSteal,
    /// Self-scheduling: chunks of a fixed size (`dynamic,1` is the study's SS).
    Dynamic(usize),
    /// Guided self-scheduling (GSS, Polychronopoulos and Kuck 1987): each chunk is
    /// `max(min, ceil(R / P))`.
    Guided(usize),
    /// Factoring with a factor of 2 (FAC2, Hummel, Schonberg and Flynn 1992): in batches of
    /// `P` chunks of `ceil(R_b / (2P))`, `R_b` what was left when the batch began.
    Fac2,
    /// Adaptive factoring (AF, Banicescu and Liu 2000): from the mean `mu_i` and the variance
    /// `sigma_i^2` of the iteration times measured on each participant, participant `i` gets
    /// `(D + 2TR - sqrt(D^2 + 4DTR)) / (2 mu_i)` with `D = sum sigma_j^2 / mu_j` and
    /// `T = 1 / sum (1 / mu_j)`; FAC2's first chunk until it has measured anything.
    Af,
    /// Chosen by measurement, per loop (per call site of the consumer): the first runs of a
    /// loop try each candidate schedule once, later runs use the fastest, and every
    /// [`AUTO_REEXPLORE`] runs the choice is measured again.
    Auto,
}

/// How long a piece of [`Schedule::StaticSteal`] runs at most, at its owner's measured pace:
/// short enough that a long or blocking iteration holds no others back, long enough that the
/// clock read and the compare-and-swap of each piece (tens of nanoseconds) cost nothing.
pub const STEAL_CHUNK_TIME: std::time::Duration = std::time::Duration::from_micros(50);

/// Runs after which [`Schedule::Auto`] measures every candidate again.
pub const AUTO_REEXPLORE: u32 = 256;

/// The candidates [`Schedule::Auto`] tries, in order (`Dynamic`'s chunk: see
/// [`Schedule::resolve`]).
const AUTO_CANDIDATES: [Schedule; 6] = [
    Schedule::StaticSteal,
    Schedule::Static,
    Schedule::Guided(1),
    Schedule::Fac2,
    Schedule::Af,
    Schedule::Dynamic(0),
];

/// A schedule string that is not one of [`Schedule`]'s forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown loop schedule {0:?}: use static, static_steal, dynamic[,CHUNK], guided[,MIN_CHUNK], \
     fac2, af or auto (CHUNK and MIN_CHUNK at least 1)"
)]
pub struct ParseScheduleError(String);

impl FromStr for Schedule {
    type Err = ParseScheduleError;

    /// `static`, `static_steal`, `dynamic` (chunk 1), `dynamic,CHUNK`, `guided` (min chunk 1),
    /// `guided,MIN_CHUNK`, `fac2`, `af`, `auto`; case and spaces ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ParseScheduleError(s.to_string());
        let lower = s.trim().to_ascii_lowercase();
        let (name, arg) = match lower.split_once(',') {
            Some((n, a)) => (n.trim(), Some(a.trim())),
            None => (lower.as_str(), None),
        };
        let chunk = |arg: Option<&str>| -> Result<usize, ParseScheduleError> {
            match arg {
                None => Ok(1),
                Some(a) => a.parse::<usize>().ok().filter(|&c| c >= 1).ok_or_else(bad),
            }
        };
        match (name, arg) {
            ("static", None) => Ok(Schedule::Static),
            ("static_steal", None) => Ok(Schedule::StaticSteal),
            ("dynamic", a) => Ok(Schedule::Dynamic(chunk(a)?)),
            ("guided", a) => Ok(Schedule::Guided(chunk(a)?)),
            ("fac2", None) => Ok(Schedule::Fac2),
            ("af", None) => Ok(Schedule::Af),
            ("auto", None) => Ok(Schedule::Auto),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Static => f.write_str("static"),
            Schedule::StaticSteal => f.write_str("static_steal"),
            Schedule::Dynamic(c) => write!(f, "dynamic,{c}"),
            Schedule::Guided(c) => write!(f, "guided,{c}"),
            Schedule::Fac2 => f.write_str("fac2"),
            Schedule::Af => f.write_str("af"),
            Schedule::Auto => f.write_str("auto"),
        }
    }
}

impl Schedule {
    /// The schedule of `UMT_SCHEDULE`, read once; `None` when unset or invalid (said once on
    /// stderr, or through `tracing`).
    pub fn from_env() -> Option<Schedule> {
        static ENV: OnceLock<Option<Schedule>> = OnceLock::new();
        *ENV.get_or_init(|| {
            let value = std::env::var("UMT_SCHEDULE").ok()?;
            match value.parse() {
                Ok(s) => Some(s),
                Err(e) => {
                    crate::diag::emit(&format!("UMT_SCHEDULE ignored: {e}"));
                    None
                }
            }
        })
    }

    /// The schedule of loops that set none: `UMT_SCHEDULE`, else [`Schedule::StaticSteal`].
    pub fn program_default() -> Schedule {
        Schedule::from_env().unwrap_or(Schedule::StaticSteal)
    }

    /// This schedule with its parameters made concrete for a loop of `len` over
    /// `participants`: a chunk of 0 becomes `Dynamic`'s default, `max(1, len / (64 P))`.
    fn resolve(self, len: usize, participants: usize) -> Schedule {
        match self {
            Schedule::Dynamic(0) => Schedule::Dynamic((len / (64 * participants.max(1))).max(1)),
            Schedule::Guided(0) => Schedule::Guided(1),
            s => s,
        }
    }
}

/// The chunk sizes, in order, that `schedule` hands out for a loop of `len` iterations over
/// `p` participants, for the schedules whose sequence does not depend on timing or on who
/// asks: `Static` (one block per participant), `Dynamic`, `Guided` and `Fac2`. `None` for
/// `StaticSteal`, `Af` and `Auto`.
pub fn chunk_sequence(schedule: Schedule, len: usize, p: usize) -> Option<Vec<usize>> {
    let p = p.max(1);
    let mut sizes = Vec::new();
    let mut left = len;
    match schedule.resolve(len, p) {
        Schedule::Static => {
            let parts = p.min(len.max(1));
            sizes.extend((0..parts).map(|i| len / parts + usize::from(i < len % parts)));
            sizes.retain(|&s| s > 0);
        }
        Schedule::Dynamic(c) => {
            while left > 0 {
                let s = c.min(left);
                sizes.push(s);
                left -= s;
            }
        }
        Schedule::Guided(min) => {
            while left > 0 {
                let s = guided_chunk(left, p, min);
                sizes.push(s);
                left -= s;
            }
        }
        Schedule::Fac2 => {
            while left > 0 {
                let s = fac2_chunk(left, p);
                for _ in 0..p {
                    let s = s.min(left);
                    if s == 0 {
                        break;
                    }
                    sizes.push(s);
                    left -= s;
                }
            }
        }
        Schedule::StaticSteal | Schedule::Af | Schedule::Auto => return None,
    }
    Some(sizes)
}

/// GSS: `max(min, ceil(R / P))`, at most `R`.
pub fn guided_chunk(remaining: usize, p: usize, min: usize) -> usize {
    remaining.div_ceil(p.max(1)).max(min.max(1)).min(remaining)
}

/// FAC2: the chunk of a batch that begins with `R` iterations left, `ceil(R / (2P))`.
pub fn fac2_chunk(remaining: usize, p: usize) -> usize {
    remaining.div_ceil(2 * p.max(1))
}

/// AF's chunk for participant `me` with `remaining` iterations left, from each participant's
/// mean iteration time `mu[j]` and its variance `var[j]` (any unit, the same for all):
/// `(D + 2TR - sqrt(D^2 + 4DTR)) / (2 mu_me)`, `D = sum var_j / mu_j`, `T = 1 / sum 1/mu_j`.
/// At least 1 and at most `remaining`; a zero or missing mean counts as the smallest positive
/// one measured (or 1).
pub fn af_chunk(mu: &[f64], var: &[f64], me: usize, remaining: usize) -> usize {
    if remaining == 0 {
        return 0;
    }
    let floor = mu
        .iter()
        .copied()
        .filter(|m| *m > 0.0 && m.is_finite())
        .fold(f64::INFINITY, f64::min);
    let floor = if floor.is_finite() { floor } else { 1.0 };
    let mu_of = |j: usize| mu.get(j).copied().filter(|m| *m > 0.0).unwrap_or(floor);
    let d: f64 = (0..mu.len())
        .map(|j| var.get(j).copied().unwrap_or(0.0).max(0.0) / mu_of(j))
        .sum();
    let t = 1.0 / (0..mu.len()).map(|j| 1.0 / mu_of(j)).sum::<f64>();
    let r = remaining as f64;
    let k = (d + 2.0 * t * r - (d * d + 4.0 * d * t * r).sqrt()) / (2.0 * mu_of(me));
    if k.is_finite() {
        (k.ceil() as usize).clamp(1, remaining)
    } else {
        remaining.div_ceil(2 * mu.len().max(1))
    }
}

/// Bounds on the chunks one loop hands out (`with_min_len`, `with_max_len`): at least `min`
/// iterations except the loop's last ones, at most `max`; `min` wins where they disagree
/// (as in rayon: a piece is not cut below `min` to respect `max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkLimits {
    pub(crate) min: usize,
    pub(crate) max: usize,
}

impl Default for ChunkLimits {
    fn default() -> Self {
        ChunkLimits {
            min: 1,
            max: usize::MAX,
        }
    }
}

impl ChunkLimits {
    /// The limits of a loop over two loops' items (`zip`, `chain`): the stricter of each.
    pub(crate) fn both(self, other: ChunkLimits) -> ChunkLimits {
        ChunkLimits {
            min: self.min.max(other.min),
            max: self.max.min(other.max),
        }
    }

    /// `size` brought within the limits (at least 1).
    pub(crate) fn apply(self, size: usize) -> usize {
        size.min(self.max).max(self.min).max(1)
    }

    /// How many participants a loop of `len` can keep busy with chunks of at least `min`,
    /// at most `cores` (and at least 1).
    pub(crate) fn participants(self, len: usize, cores: usize) -> usize {
        cores.min(len / self.min.max(1)).max(1)
    }

    /// A table of chunk sizes (summing to the loop's length) cut to at most `max` and joined
    /// to at least `min`; the sum stays the same, the last may be shorter than `min`, none is
    /// longer than `max(min, max)`.
    fn cut(self, sizes: &[usize]) -> Vec<usize> {
        let (min, max) = (self.min.max(1), self.max.max(1));
        let mut out = Vec::with_capacity(sizes.len());
        let mut open = 0;
        for &s in sizes {
            let mut s = s;
            while s > 0 {
                let take = s.min(max.saturating_sub(open).max(1));
                s -= take;
                open += take;
                if open >= min {
                    out.push(std::mem::take(&mut open));
                }
            }
        }
        if open > 0 {
            out.push(open);
        }
        out
    }
}

/// How `by_uniform_blocks` and `by_exponential_blocks` (`iter`) cut a loop into
/// blocks that run one after another, each a parallel loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InTurn {
    /// Blocks of this many indices.
    Uniform(usize),
    /// This many indices (the runtime's cores when it was asked for), then twice as many each
    /// time (rayon's sizes).
    Exponential(usize),
}

impl InTurn {
    /// Block `s`'s indices in a loop of `len`.
    pub(crate) fn block(self, s: usize, len: usize) -> Range<usize> {
        let start = |s: usize| -> usize {
            let at = match self {
                InTurn::Uniform(k) => s as u128 * k as u128,
                // c + 2c + ... + 2^(s-1)c; past 2^127 no loop reaches anyway.
                InTurn::Exponential(c) => c as u128 * ((1u128 << s.min(127)) - 1),
            };
            usize::try_from(at).unwrap_or(usize::MAX).min(len)
        };
        start(s)..start(s + 1)
    }

    /// How many blocks a loop of `len` has (at least 1).
    pub(crate) fn count(self, len: usize) -> usize {
        match self {
            InTurn::Uniform(k) => len.div_ceil(k.max(1)).max(1),
            InTurn::Exponential(_) => {
                (0..128)
                    .find(|&s| self.block(s, len).end >= len)
                    .unwrap_or(127)
                    + 1
            }
        }
    }

    /// How many of `fold`'s blocks each block holds when `fold` would cut the whole loop into
    /// `blocks` (`FoldBlocks`): as many, but no more than a uniform block has indices.
    pub(crate) fn fold_blocks(self, blocks: usize) -> usize {
        match self {
            InTurn::Uniform(k) => blocks.min(k),
            InTurn::Exponential(_) => blocks,
        }
        .max(1)
    }
}

/// The most pieces a `Guided` or `Fac2` loop's table holds (8 MiB of ends); beyond, the loop
/// runs as `dynamic,max` (see [`Dispenser::new`]).
const MAX_TABLE: usize = 1 << 20;

/// A participant's place in a loop: who it is, and the chunk it is running (for the
/// schedules that learn from chunk times).
#[derive(Debug)]
pub(crate) struct Cursor {
    participant: usize,
    /// `Static`: the participant took its block.
    done: bool,
    /// `Static`: what is left of its block, handed out `max` at a time.
    left: Range<usize>,
    /// The chunk handed out last and when: `Af` and `StaticSteal` measure it at the next
    /// request.
    running: Option<(usize, Instant)>,
}

impl Cursor {
    pub(crate) fn new(participant: usize) -> Cursor {
        Cursor {
            participant,
            done: false,
            left: 0..0,
            running: None,
        }
    }
}

/// Hands out the chunks of one loop run: each index of `0..len` exactly once, whoever asks.
#[derive(Debug)]
pub(crate) struct Dispenser {
    len: usize,
    participants: usize,
    limits: ChunkLimits,
    kind: Kind,
    /// No chunk that starts at or past this index is handed out: `len` at first, lowered by
    /// [`Dispenser::cut`] once the loop has decided (a search found, a participant panicked).
    wanted: CachePadded<AtomicUsize>,
}

#[derive(Debug)]
enum Kind {
    Static,
    /// Per participant its unclaimed block `[lo, hi)`, packed `lo << 32 | hi`.
    Steal(Box<[CachePadded<AtomicU64>]>),
    Dynamic {
        next: CachePadded<AtomicUsize>,
        chunk: usize,
    },
    /// Precomputed chunk ends (`Guided`, `Fac2`): the k-th request gets chunk k.
    Table {
        ends: Vec<usize>,
        next: CachePadded<AtomicUsize>,
    },
    Af(Mutex<AfState>),
}

/// What `Af` has measured, under one lock (taken once per chunk).
#[derive(Debug)]
struct AfState {
    next: usize,
    /// Per participant: chunks measured, mean and sum of squared deviations (Welford) of the
    /// chunks' per-iteration times in ns, and the mean chunk size.
    samples: Vec<(u64, f64, f64, f64)>,
}

impl Dispenser {
    /// A dispenser of `0..len` for `participants` under `schedule` (not `Auto`: the driver
    /// resolves it first). Beyond `u32::MAX` iterations `StaticSteal` is `Dynamic`; a
    /// `Guided` or `Fac2` loop whose table would hold more than [`MAX_TABLE`] pieces is
    /// `Dynamic` with chunks of `limits.max`.
    ///
    /// `joiners` more participants may join while the loop runs, as participants
    /// `participants..participants + joiners` (see [`Dispenser::joinable`]): the chunk sizes
    /// stay those of `participants`, and a joiner starts with no block of its own.
    ///
    /// Every chunk is within `limits` (but a loop's last chunks, which may be shorter than
    /// `limits.min`); `Static`'s blocks stay each participant's, handed out `max` at a time.
    pub(crate) fn new(
        schedule: Schedule,
        len: usize,
        participants: usize,
        joiners: usize,
        limits: ChunkLimits,
    ) -> Dispenser {
        let p = participants.max(1);
        let slots = p + joiners;
        let kind = match schedule.resolve(len, p) {
            Schedule::Static => Kind::Static,
            Schedule::StaticSteal if u32::try_from(len).is_ok() => Kind::Steal(
                (0..slots)
                    .map(|i| {
                        let r = if i < p { static_block(len, p, i) } else { 0..0 };
                        CachePadded::new(AtomicU64::new(pack(r.start, r.end)))
                    })
                    .collect(),
            ),
            Schedule::StaticSteal | Schedule::Auto => Kind::Dynamic {
                next: CachePadded::new(AtomicUsize::new(0)),
                chunk: limits.apply(len / (64 * p)).min(len.max(1)),
            },
            Schedule::Dynamic(c) => Kind::Dynamic {
                next: CachePadded::new(AtomicUsize::new(0)),
                chunk: limits.apply(c).clamp(1, len.max(1)),
            },
            s @ (Schedule::Guided(_) | Schedule::Fac2) => {
                let sizes = chunk_sequence(s, len, p).unwrap_or_default();
                // A `max` far below the loop's length would make a table of one entry per
                // `max` iterations (2^48 of them for `0..usize::MAX` in pieces of 2^16):
                // such a loop runs as `dynamic,max`, which hands out the same pieces but for
                // the last few, where the sequence drops below `max`.
                let pieces = sizes
                    .iter()
                    .map(|s| s.div_ceil(limits.max.max(1)))
                    .fold(0usize, usize::saturating_add);
                if pieces > MAX_TABLE {
                    return Dispenser::new(
                        Schedule::Dynamic(limits.max),
                        len,
                        participants,
                        joiners,
                        limits,
                    );
                }
                let ends = limits
                    .cut(&sizes)
                    .iter()
                    .scan(0, |end, s| {
                        *end += s;
                        Some(*end)
                    })
                    .collect();
                Kind::Table {
                    ends,
                    next: CachePadded::new(AtomicUsize::new(0)),
                }
            }
            Schedule::Af => Kind::Af(Mutex::new(AfState {
                next: 0,
                samples: vec![(0, 0.0, 0.0, 0.0); slots],
            })),
        };
        Dispenser {
            len,
            participants: p,
            limits,
            kind,
            wanted: CachePadded::new(AtomicUsize::new(len)),
        }
    }

    /// Whether a participant that joins while the loop runs may get chunks: every schedule
    /// but `Static`, which gives participant `i` block `i` and nothing else (so a joiner has
    /// nothing to take, and a blocked participant's block waits for it: the schedule's
    /// contract is that the assignment of indices to participants is fixed).
    pub(crate) fn joinable(&self) -> bool {
        !matches!(self.kind, Kind::Static)
    }

    /// Whether chunks are left to hand out (a cheap look, for the offer of a running loop;
    /// `false` for `Static`, see [`Dispenser::joinable`]). A chunk a thief of `StaticSteal`
    /// has taken from a block but not yet made its own is not seen.
    pub(crate) fn has_chunks(&self) -> bool {
        let wanted = self.wanted.load(Ordering::Relaxed);
        match &self.kind {
            Kind::Static => false,
            Kind::Steal(blocks) => blocks.iter().any(|b| {
                let (lo, hi) = unpack(b.load(Ordering::Acquire));
                lo < hi.min(wanted)
            }),
            Kind::Dynamic { next, .. } => next.load(Ordering::Relaxed) < wanted,
            Kind::Table { ends, next } => {
                let k = next.load(Ordering::Relaxed);
                k < ends.len() && k.checked_sub(1).map_or(0, |j| ends[j]) < wanted
            }
            Kind::Af(state) => crate::sync::lock_std(state).next < wanted,
        }
    }

    /// Hands out no chunk that starts at or past `end` from now on (a participant panicked:
    /// 0; a search has found what it looks for in a chunk that starts at `end`, or anywhere:
    /// 0). Chunks already handed out are not called back: their folds stop by themselves.
    /// Never raises the bound.
    pub(crate) fn cut(&self, end: usize) {
        if end < self.wanted.load(Ordering::Relaxed) {
            self.wanted.fetch_min(end, Ordering::Relaxed);
        }
    }

    /// The next chunk for `cursor`'s participant, `None` once the loop is all handed out.
    pub(crate) fn next(&self, cursor: &mut Cursor) -> Option<Range<usize>> {
        // Every schedule but `StaticSteal` hands out each participant's chunks in index
        // order: once one starts past `wanted`, so do all later ones.
        let wanted = self.wanted.load(Ordering::Relaxed);
        let me = cursor.participant;
        match &self.kind {
            Kind::Static => {
                if !std::mem::replace(&mut cursor.done, true) {
                    cursor.left = static_block(self.len, self.participants, me);
                }
                let left = &mut cursor.left;
                left.end = left.end.min(wanted);
                let end = left
                    .end
                    .min(left.start.saturating_add(self.limits.apply(left.len())));
                let chunk = left.start..end;
                left.start = end;
                Some(chunk).filter(|r| !r.is_empty())
            }
            Kind::Steal(blocks) => {
                // One clock read: it ends the last piece and starts the next.
                let now = Instant::now();
                let cap = steal_cap(cursor.running.take(), now);
                let chunk = self.next_steal(blocks, me, cap, wanted)?;
                cursor.running = Some((chunk.len(), now));
                Some(chunk)
            }
            Kind::Dynamic { next, chunk } => {
                // Never past `wanted`, and saturating: a plain `fetch_add` wrapped near
                // `usize::MAX` (a loop of `usize::MAX` indices, or each participant's last
                // request past a long loop's end) and handed the loop out again from 0.
                let start = next
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                        (n < wanted).then(|| n.saturating_add(*chunk))
                    })
                    .ok()?;
                Some(start..start.saturating_add(*chunk).min(self.len))
            }
            Kind::Table { ends, next } => {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let end = *ends.get(k)?;
                let start = k.checked_sub(1).map_or(0, |j| ends[j]);
                (start < wanted).then_some(start..end)
            }
            Kind::Af(state) => {
                let mut st = crate::sync::lock_std(state);
                if let Some((size, started)) = cursor.running.take() {
                    let per_iter = started.elapsed().as_nanos() as f64 / size as f64;
                    let (n, mean, m2, msize) = &mut st.samples[me];
                    *n += 1;
                    let delta = per_iter - *mean;
                    *mean += delta / *n as f64;
                    *m2 += delta * (per_iter - *mean);
                    *msize += (size as f64 - *msize) / *n as f64;
                }
                let remaining = wanted.saturating_sub(st.next);
                if remaining == 0 {
                    return None;
                }
                let size = self
                    .limits
                    .apply(af_next(&st.samples, me, remaining, self.participants))
                    .min(remaining);
                let start = st.next;
                st.next += size;
                cursor.running = Some((size, Instant::now()));
                Some(start..start + size)
            }
        }
    }

    /// `StaticSteal`'s next chunk for `me`: at most `cap` iterations of its block (before the
    /// limits), else half of another's; a block's part from `wanted` on counts as taken.
    ///
    /// A joiner (`me` past the participants) owns no block: it takes one piece at a time from
    /// the back of another's. A stolen half is out of every block between the thief's steal
    /// and its store into its own, so the participants may all find the loop handed out
    /// meanwhile and end; a joiner may stop between two pieces (D5.4), and what it left in
    /// a block of its own would then be lost. A piece it holds, it always finishes.
    fn next_steal(
        &self,
        blocks: &[CachePadded<AtomicU64>],
        me: usize,
        cap: usize,
        wanted: usize,
    ) -> Option<Range<usize>> {
        let piece = |lo: usize, hi: usize| {
            self.limits
                .apply((hi - lo).div_ceil(8).min(cap))
                .min(hi - lo)
        };
        let n = blocks.len();
        if me >= self.participants {
            return (1..n).find_map(|k| {
                claim(&blocks[(me + k) % n], wanted, |lo, hi| {
                    let start = hi - piece(lo, hi);
                    (lo..start, start..hi)
                })
            });
        }
        let own = &blocks[me];
        loop {
            // The owner takes from the front of its block.
            let taken = claim(own, wanted, |lo, hi| {
                let end = lo + piece(lo, hi);
                (end..hi, lo..end)
            });
            if taken.is_some() {
                return taken;
            }
            // Empty: steal the back half of the first non-empty block after ours, and make it
            // ours (nobody else writes an empty block: thieves skip them).
            let stolen = (1..n).find_map(|k| {
                claim(&blocks[(me + k) % n], wanted, |lo, hi| {
                    // Half, unless a half would be shorter than the limits' `min`: then
                    // all of it (the owner is busy with a chunk of its own).
                    let half = (hi - lo) / 2;
                    let mid = if half >= self.limits.min {
                        lo + half
                    } else {
                        lo
                    };
                    (lo..mid, mid..hi)
                })
            })?;
            own.store(pack(stolen.start, stolen.end), Ordering::Release);
        }
    }
}

/// Claims part of the `StaticSteal` block in `word`, whose part from `wanted` on counts as
/// taken: `cut(lo, hi)` of the non-empty block `lo..hi` says what stays in the word and what
/// is taken. `None` if the block is empty. Owner and thieves CAS the same word, so each index
/// is claimed once.
fn claim(
    word: &AtomicU64,
    wanted: usize,
    cut: impl Fn(usize, usize) -> (Range<usize>, Range<usize>),
) -> Option<Range<usize>> {
    let mut cur = word.load(Ordering::Acquire);
    loop {
        let (lo, hi) = unpack(cur);
        let hi = hi.min(wanted);
        if lo >= hi {
            return None;
        }
        let (keep, take) = cut(lo, hi);
        match word.compare_exchange_weak(
            cur,
            pack(keep.start, keep.end),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return Some(take),
            Err(now) => cur = now,
        }
    }
}

/// The most iterations `StaticSteal`'s next piece may have, asked at `now`: what runs in
/// [`STEAL_CHUNK_TIME`] at the pace of the previous piece (`size` iterations handed out at
/// `started`), at least 1; 1 for a participant's first piece, which measures the pace.
fn steal_cap(previous: Option<(usize, Instant)>, now: Instant) -> usize {
    previous.map_or(1, |(size, started)| {
        pieces_in(size, now.saturating_duration_since(started))
    })
}

/// How many iterations run in [`STEAL_CHUNK_TIME`] when `size` of them took `took`: at least 1.
fn pieces_in(size: usize, took: std::time::Duration) -> usize {
    let fits = STEAL_CHUNK_TIME.as_nanos() * size as u128 / took.as_nanos().max(1);
    usize::try_from(fits).unwrap_or(usize::MAX).max(1)
}

/// `Af`'s next chunk for `me` from the samples so far: FAC2's first chunk until someone has
/// measured a chunk; participants without samples count as the average of those with.
fn af_next(samples: &[(u64, f64, f64, f64)], me: usize, remaining: usize, p: usize) -> usize {
    let measured: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.0 > 0)
        .map(|&(n, mean, m2, msize)| {
            // The chunks' per-iteration times average `msize` iterations: their variance is
            // the iterations' divided by `msize`.
            let var = if n > 1 {
                m2 / (n - 1) as f64 * msize
            } else {
                0.0
            };
            (mean, var)
        })
        .collect();
    if measured.is_empty() {
        return fac2_chunk(remaining, p).clamp(1, remaining);
    }
    let k = measured.len() as f64;
    let avg = (
        measured.iter().map(|m| m.0).sum::<f64>() / k,
        measured.iter().map(|m| m.1).sum::<f64>() / k,
    );
    let (mu, var): (Vec<f64>, Vec<f64>) = samples
        .iter()
        .map(|&(n, mean, m2, msize)| match n {
            0 => avg,
            1 => (mean, avg.1),
            _ => (mean, m2 / (n - 1) as f64 * msize),
        })
        .unzip();
    af_chunk(&mu, &var, me, remaining)
}

/// `Static`'s block for participant `i`: the first `len % p` blocks are one longer.
fn static_block(len: usize, p: usize, i: usize) -> Range<usize> {
    let (base, extra) = (len / p, len % p);
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}

fn pack(lo: usize, hi: usize) -> u64 {
    ((lo as u64) << 32) | hi as u64
}

fn unpack(v: u64) -> (usize, usize) {
    ((v >> 32) as usize, (v & u64::from(u32::MAX)) as usize)
}

/// What [`Schedule::Auto`] learned per loop: keyed by the consumer's call site.
#[derive(Debug, Default)]
struct AutoState {
    /// Best time per iteration seen for each candidate (ns), `NaN` until tried.
    cost: [f64; AUTO_CANDIDATES.len()],
    /// The next candidate to try, or `AUTO_CANDIDATES.len()` once all were.
    trial: usize,
    /// Runs since the last exploration ended.
    runs: u32,
}

type AutoTable = std::collections::HashMap<usize, AutoState>;

fn auto_table() -> &'static Mutex<AutoTable> {
    static TABLE: OnceLock<Mutex<AutoTable>> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

/// The schedule `Auto` runs next at `site`, and the index of the candidate (to report its
/// time with [`auto_record`]).
pub(crate) fn auto_pick(site: &'static std::panic::Location<'static>) -> (Schedule, usize) {
    let mut table = crate::sync::lock_std(auto_table());
    let st = table
        .entry(site as *const _ as usize)
        .or_insert_with(|| AutoState {
            cost: [f64::NAN; AUTO_CANDIDATES.len()],
            ..AutoState::default()
        });
    if st.trial >= AUTO_CANDIDATES.len() {
        st.runs += 1;
        if st.runs >= AUTO_REEXPLORE {
            st.trial = 0;
            st.runs = 0;
            st.cost = [f64::NAN; AUTO_CANDIDATES.len()];
        }
    }
    let k = if st.trial < AUTO_CANDIDATES.len() {
        st.trial
    } else {
        best(&st.cost)
    };
    (AUTO_CANDIDATES[k], k)
}

/// Reports the time per iteration (ns) of a run of candidate `k` at `site`.
pub(crate) fn auto_record(site: &'static std::panic::Location<'static>, k: usize, per_iter: f64) {
    let mut table = crate::sync::lock_std(auto_table());
    if let Some(st) = table.get_mut(&(site as *const _ as usize)) {
        let c = &mut st.cost[k];
        *c = if c.is_nan() {
            per_iter
        } else {
            c.min(per_iter)
        };
        if st.trial == k && st.trial < AUTO_CANDIDATES.len() {
            st.trial += 1;
        }
    }
}

/// The candidate with the lowest measured cost (untried ones last).
fn best(cost: &[f64]) -> usize {
    (0..cost.len())
        .filter(|&k| !cost[k].is_nan())
        .min_by(|&a, &b| cost[a].total_cmp(&cost[b]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_every_form_and_prints_it_back() {
        for (s, want) in [
            ("static", Schedule::Static),
            ("static_steal", Schedule::StaticSteal),
            ("dynamic", Schedule::Dynamic(1)),
            ("dynamic,64", Schedule::Dynamic(64)),
            (" Guided , 8 ", Schedule::Guided(8)),
            ("guided", Schedule::Guided(1)),
            ("fac2", Schedule::Fac2),
            ("AF", Schedule::Af),
            ("auto", Schedule::Auto),
        ] {
            assert_eq!(s.parse::<Schedule>(), Ok(want), "{s}");
            assert_eq!(want.to_string().parse::<Schedule>(), Ok(want));
        }
        for bad in [
            "",
            "stat",
            "dynamic,0",
            "dynamic,x",
            "guided,-1",
            "static,4",
            "af,2",
        ] {
            let e = bad.parse::<Schedule>().unwrap_err();
            assert!(e.to_string().contains("use static"), "{e}");
        }
    }

    /// Chunk sequences from the rules as the literature states them, worked by hand.
    #[test]
    fn chunk_sequences_match_the_literature() {
        let seq = |s, n, p| chunk_sequence(s, n, p).unwrap();
        // Static: blocks of ceil / floor (OpenMP static without chunk).
        assert_eq!(seq(Schedule::Static, 10, 4), [3, 3, 2, 2]);
        assert_eq!(seq(Schedule::Static, 3, 4), [1, 1, 1]);
        assert_eq!(seq(Schedule::Static, 0, 4), Vec::<usize>::new());
        // SS and dynamic,k.
        assert_eq!(seq(Schedule::Dynamic(1), 3, 2), [1, 1, 1]);
        assert_eq!(seq(Schedule::Dynamic(4), 10, 2), [4, 4, 2]);
        // GSS, P = 4, N = 100: ceil(R/4).
        assert_eq!(
            seq(Schedule::Guided(1), 100, 4),
            [25, 19, 14, 11, 8, 6, 5, 3, 3, 2, 1, 1, 1, 1]
        );
        // GSS with a minimum chunk of 4.
        assert_eq!(
            seq(Schedule::Guided(4), 100, 4),
            [25, 19, 14, 11, 8, 6, 5, 4, 4, 4]
        );
        // FAC2, P = 4, N = 100: batches of 4 chunks of ceil(R/8): 13 (R=100), 6 (R=48),
        // 3 (R=24), 2 (R=12), 1 (R=4).
        assert_eq!(
            seq(Schedule::Fac2, 100, 4),
            [
                13, 13, 13, 13, 6, 6, 6, 6, 3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1
            ]
        );
        // FAC2, P = 2, N = 10: ceil(10/4) = 3, then R = 4: 1 each, then R = 2: 1, 1.
        assert_eq!(seq(Schedule::Fac2, 10, 2), [3, 3, 1, 1, 1, 1]);
        assert_eq!(chunk_sequence(Schedule::Af, 10, 2), None);
    }

    #[test]
    fn af_chunks_follow_the_formula() {
        // No variance: each participant gets its share of what is left, by speed.
        assert_eq!(af_chunk(&[1.0, 1.0], &[0.0, 0.0], 0, 100), 50);
        assert_eq!(af_chunk(&[1.0, 3.0], &[0.0, 0.0], 0, 100), 75);
        assert_eq!(af_chunk(&[1.0, 3.0], &[0.0, 0.0], 1, 100), 25);
        // Variance shrinks the chunk: D = 2, T = 0.5, R = 100:
        // (2 + 100 - sqrt(4 + 400)) / 2 = 40.95 -> 41.
        assert_eq!(af_chunk(&[1.0, 1.0], &[1.0, 1.0], 0, 100), 41);
        // Bounds and degenerate input.
        assert_eq!(af_chunk(&[1.0], &[1e12], 0, 100), 1);
        assert_eq!(af_chunk(&[0.0, 0.0], &[0.0, 0.0], 0, 10), 5);
        assert_eq!(af_chunk(&[1.0], &[0.0], 0, 0), 0);
    }

    #[test]
    fn auto_tries_each_candidate_then_keeps_the_fastest() {
        let site = std::panic::Location::caller();
        let mut tried = Vec::new();
        for _ in 0..AUTO_CANDIDATES.len() {
            let (s, k) = auto_pick(site);
            tried.push(s);
            // Fac2 is the fastest.
            auto_record(site, k, if s == Schedule::Fac2 { 1.0 } else { 5.0 });
        }
        assert_eq!(tried, AUTO_CANDIDATES);
        for _ in 0..10 {
            let (s, k) = auto_pick(site);
            assert_eq!(s, Schedule::Fac2);
            auto_record(site, k, 1.0);
        }
    }

    /// The default limits half of the time, else any `min` and `max` (`max` may be below
    /// `min`).
    fn limits() -> impl Strategy<Value = ChunkLimits> {
        prop_oneof![
            Just(ChunkLimits::default()),
            (1usize..60, prop_oneof![1usize..120, Just(usize::MAX)])
                .prop_map(|(min, max)| ChunkLimits { min, max }),
        ]
    }

    fn all_schedules() -> impl Strategy<Value = Schedule> {
        prop_oneof![
            Just(Schedule::Static),
            Just(Schedule::StaticSteal),
            (0usize..40).prop_map(Schedule::Dynamic),
            (0usize..40).prop_map(Schedule::Guided),
            Just(Schedule::Fac2),
            Just(Schedule::Af),
        ]
    }

    proptest! {
        /// However the participants interleave, with joiners that leave early, every index is
        /// handed out exactly once.
        #[test]
        fn every_index_is_handed_out_exactly_once(
            schedule in all_schedules(),
            len in 0usize..3000,
            p in 1usize..9,
            joiners in 0usize..4,
            order in proptest::collection::vec(0usize..64, 1..64),
            limits in limits(),
        ) {
            let d = Dispenser::new(schedule, len, p, joiners, limits);
            let longest = limits.max.max(limits.min);
            // Joiners take part from the start in this model, in any order with the others.
            let joiners = if d.joinable() { joiners } else { 0 };
            let mut cursors: Vec<Cursor> = (0..p + joiners).map(Cursor::new).collect();
            let mut live: Vec<usize> = (0..p + joiners).collect();
            let mut seen = vec![0u8; len];
            let mut step = 0;
            while !live.is_empty() {
                let o = order[step % order.len()];
                let pick = o % live.len();
                step += 1;
                // A joiner may leave at any point (its core got its participant back),
                // whatever its own block still holds: the others take the rest.
                if live[pick] >= p && o >= 56 && live.iter().any(|&q| q < p) {
                    live.remove(pick);
                    continue;
                }
                match d.next(&mut cursors[live[pick]]) {
                    Some(r) => {
                        prop_assert!(!r.is_empty() && r.end <= len, "{:?}", r);
                        prop_assert!(r.len() <= longest, "{:?} beyond {:?}", r, limits);
                        for i in r { seen[i] += 1; }
                    }
                    None => { live.remove(pick); }
                }
            }
            prop_assert!(seen.iter().all(|&c| c == 1));
            prop_assert!(!d.has_chunks());
        }

        /// A loop cut at `wanted` once some chunks are out (a search decided): no chunk that
        /// starts at or past `wanted` is handed out after the cut, every index below it still
        /// is, exactly once, and none twice anywhere.
        #[test]
        fn a_cut_loop_hands_out_everything_below_the_cut_and_nothing_new_past_it(
            schedule in all_schedules(),
            len in 0usize..3000,
            p in 1usize..9,
            order in proptest::collection::vec(0usize..64, 1..64),
            limits in limits(),
            wanted in 0usize..3200,
            after in 0usize..40,
        ) {
            let d = Dispenser::new(schedule, len, p, 0, limits);
            let mut cursors: Vec<Cursor> = (0..p).map(Cursor::new).collect();
            let mut live: Vec<usize> = (0..p).collect();
            let mut seen = vec![0u8; len];
            let mut step = 0;
            while !live.is_empty() {
                if step == after {
                    d.cut(wanted);
                    // Never raised again.
                    d.cut(usize::MAX);
                }
                let pick = order[step % order.len()] % live.len();
                step += 1;
                match d.next(&mut cursors[live[pick]]) {
                    Some(r) => {
                        prop_assert!(!r.is_empty() && r.end <= len, "{:?}", r);
                        prop_assert!(step <= after || r.start < wanted, "{:?} after a cut at {}", r, wanted);
                        for i in r { seen[i] += 1; }
                    }
                    None => { live.remove(pick); }
                }
            }
            prop_assert!(seen.iter().all(|&c| c <= 1));
            prop_assert!(seen.iter().take(wanted).all(|&c| c == 1));
            prop_assert!(!d.has_chunks());
        }

        /// A table cut to the limits keeps its sum; every piece but the last is at least
        /// `min`, and none is longer than `max(min, max)`.
        #[test]
        fn a_cut_table_keeps_its_sum_within_the_limits(
            sizes in proptest::collection::vec(1usize..200, 0..40),
            limits in limits(),
        ) {
            let cut = limits.cut(&sizes);
            prop_assert_eq!(cut.iter().sum::<usize>(), sizes.iter().sum::<usize>());
            prop_assert!(cut.iter().all(|&c| c > 0 && c <= limits.max.max(limits.min)));
            if let Some((_, head)) = cut.split_last() {
                prop_assert!(head.iter().all(|&c| c >= limits.min), "{:?}", cut);
            }
        }

        #[test]
        fn sequences_cover_the_loop(len in 0usize..5000, p in 1usize..17, c in 1usize..50) {
            for s in [Schedule::Static, Schedule::Dynamic(c), Schedule::Guided(c), Schedule::Fac2] {
                let seq = chunk_sequence(s, len, p).unwrap();
                prop_assert_eq!(seq.iter().sum::<usize>(), len);
                prop_assert!(seq.iter().all(|&x| x > 0));
                if let Schedule::Guided(_) | Schedule::Fac2 = s {
                    // Non-increasing: large chunks early, small late.
                    prop_assert!(seq.windows(2).all(|w| w[0] >= w[1]));
                }
            }
        }
    }

    /// A table schedule over a loop far longer than `MAX_TABLE` pieces of `max`: no table of
    /// 2^48 ends (the allocation would abort), but pieces of `max`, and a cut still ends it.
    #[test]
    fn a_huge_table_loop_hands_out_pieces_of_max_without_a_table() {
        let limits = ChunkLimits {
            min: 1,
            max: 1 << 16,
        };
        for s in [Schedule::Guided(1), Schedule::Fac2] {
            let d = Dispenser::new(s, usize::MAX, 2, 1, limits);
            let mut c = Cursor::new(0);
            assert_eq!(d.next(&mut c), Some(0..1 << 16), "{s}");
            assert_eq!(d.next(&mut Cursor::new(2)), Some(1 << 16..2 << 16), "{s}");
            d.cut(0);
            assert_eq!(d.next(&mut c), None, "{s}");
            assert!(!d.has_chunks());
        }
        // Within the bound, the table stays.
        let d = Dispenser::new(Schedule::Guided(1), 1000, 2, 0, limits);
        assert!(matches!(d.kind, Kind::Table { .. }));
    }

    /// A dynamic loop of `usize::MAX` indices is handed out once: the counter saturates
    /// instead of wrapping to 0 (it used to, and the loop started over).
    #[test]
    fn a_dynamic_loop_next_to_usize_max_is_handed_out_once() {
        let q = 1usize << 62;
        let d = Dispenser::new(
            Schedule::Dynamic(q),
            usize::MAX,
            2,
            1,
            ChunkLimits::default(),
        );
        let (mut a, mut b) = (Cursor::new(0), Cursor::new(1));
        assert_eq!(d.next(&mut a), Some(0..q));
        assert_eq!(d.next(&mut b), Some(q..2 * q));
        assert_eq!(d.next(&mut a), Some(2 * q..3 * q));
        assert_eq!(d.next(&mut b), Some(3 * q..usize::MAX));
        for _ in 0..4 {
            assert_eq!(d.next(&mut a), None);
            assert_eq!(d.next(&mut b), None);
        }
        assert!(!d.has_chunks());
    }

    /// A joiner under `static_steal` takes pieces from the back of the others' blocks and
    /// never owns a block: it may stop between two pieces, and nothing it holds is then left
    /// for participants that may have ended.
    #[test]
    fn a_static_steal_joiner_owns_no_block() {
        let d = Dispenser::new(Schedule::StaticSteal, 1000, 2, 1, ChunkLimits::default());
        let Kind::Steal(blocks) = &d.kind else {
            panic!("static_steal below u32::MAX is a steal kind");
        };
        let mut joiner = Cursor::new(2);
        let mut seen = vec![0u8; 1000];
        // Its first piece (pace unknown): one index, from the back of block 0 (after its own).
        assert_eq!(d.next(&mut joiner), Some(499..500));
        seen[499] = 1;
        for _ in 0..20 {
            let r = d.next(&mut joiner).unwrap();
            assert!(
                r.end == 500 || r.end == 1000 || seen[r.end] == 1,
                "{r:?}: from a back"
            );
            for i in r {
                seen[i] += 1;
            }
            assert_eq!(unpack(blocks[2].load(Ordering::Relaxed)), (0, 0));
        }
    }

    #[test]
    fn a_steal_piece_lasts_about_the_chunk_time_at_the_measured_pace() {
        let ms = std::time::Duration::from_millis;
        // Iterations of 10 ms (a blocking read): one at a time.
        assert_eq!(pieces_in(4, ms(40)), 1);
        // Even slower than the chunk time, never 0.
        assert_eq!(pieces_in(1, ms(1000)), 1);
        // 1000 iterations in 10 us: 5000 fit in 50 us.
        assert_eq!(pieces_in(1000, std::time::Duration::from_micros(10)), 5000);
        // A clock that did not move: as many as can be.
        assert_eq!(pieces_in(7, std::time::Duration::ZERO), 7 * 50_000);
        assert_eq!(steal_cap(None, Instant::now()), 1);
    }

    #[test]
    fn static_steal_takes_slow_iterations_one_at_a_time() {
        let d = Dispenser::new(Schedule::StaticSteal, 800, 2, 0, ChunkLimits::default());
        let mut a = Cursor::new(0);
        // The first piece measures the pace: one iteration.
        assert_eq!(d.next(&mut a), Some(0..1));
        // It "took" a second: the next piece is one iteration, not an eighth of 399.
        let second_ago = |t: Instant| t.checked_sub(std::time::Duration::from_secs(1)).unwrap();
        a.running = a.running.map(|(n, t)| (n, second_ago(t)));
        assert_eq!(d.next(&mut a), Some(1..2));
        // Fast iterations (2^40 in whatever time passed): back to an eighth of what is left.
        a.running = a.running.map(|(_, t)| (1 << 40, t));
        assert_eq!(d.next(&mut a).map(|r| r.len()), Some(398usize.div_ceil(8)));
        // With `with_min_len(4)` the slow piece is 4.
        let d = Dispenser::new(
            Schedule::StaticSteal,
            800,
            2,
            0,
            ChunkLimits {
                min: 4,
                max: usize::MAX,
            },
        );
        let mut b = Cursor::new(1);
        assert_eq!(d.next(&mut b), Some(400..404));
    }

    #[test]
    fn static_steal_threads_steal_when_their_block_is_done() {
        let d = Dispenser::new(Schedule::StaticSteal, 64, 2, 0, ChunkLimits::default());
        let (mut a, mut b) = (Cursor::new(0), Cursor::new(1));
        // Participant 0 runs its whole block and then takes from 1's.
        let mut mine = 0;
        while let Some(r) = d.next(&mut a) {
            mine += r.len();
        }
        assert_eq!(mine, 64);
        assert_eq!(d.next(&mut b), None);
    }
}
