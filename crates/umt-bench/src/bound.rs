//! Bounds on a runner's time from the two measured bound runs: the computation alone (`C`)
//! and the I/O alone (`IO`).
//!
//! - The **overlap bound**, `max(C, IO)`: no runner beats it by overlapping the two.
//! - The **tight bound** adds what no runner can overlap, at the finest grain any runner here
//!   can write at: one block (heat) or one slice (FWI), since umt-rt's dataflow graph lets a
//!   block's checkpoint write start as soon as that block is computed, while the rest of its
//!   iteration still computes. The disk cannot start before the first block of the first
//!   checkpoint exists, which ends a chain of `iof` updates of one block (block 0 of iteration
//!   `k` needs block 0 of iteration `k - 1`), each at least `C / updates` long (the compute-only
//!   run did all `updates` in `C`); and when the last iteration takes a checkpoint, the block
//!   computed last is written after the computation ends, which takes at least one block's
//!   share of `IO`.
//!
//! An earlier tight bound modelled whole checkpoints (the disk idle until the first
//! checkpoint's iteration was complete): dataflow runners beat it by up to `1 / checkpoints`
//! of the run (104-106 % at ten checkpoints, issue 29). This one is a bound for every
//! schedule; at many blocks it is close to the overlap bound, as it must be.

/// The overlap bound: the longer of the two bound runs.
pub fn overlap(compute: f64, io: f64) -> f64 {
    compute.max(io)
}

/// The tight bound of heat: `iters` iterations of `blocks` block updates computing `compute`
/// seconds in all, a checkpoint of every block after every `iof`-th iteration, all of them
/// writing `io` seconds in all.
pub fn heat_tight(compute: f64, io: f64, iters: usize, iof: usize, blocks: usize) -> f64 {
    if iters == 0 || iof == 0 || blocks == 0 {
        return overlap(compute, io);
    }
    let checkpoints = iters / iof;
    if checkpoints == 0 {
        return overlap(compute, io);
    }
    let update = compute / (iters * blocks) as f64;
    let first_data = iof as f64 * update;
    let last_write = if iters.is_multiple_of(iof) {
        io / (checkpoints * blocks) as f64
    } else {
        0.0
    };
    (compute + last_write).max(first_data + io)
}

/// The tight bound of FWI: `steps` forward and `steps` backward steps of `slices` slice
/// updates computing `compute` seconds in all, a snapshot of every slice after every `iof`-th
/// forward step, written and read back in `io` seconds in all. The disk cannot start before
/// the first slice of the first snapshot exists, after a chain of `iof` updates of that
/// slice; the backward phase only needs the snapshots' data, and a runner may compute its
/// adjoint steps while the disk works, so the rest overlaps.
pub fn fwi_tight(compute: f64, io: f64, steps: usize, iof: usize, slices: usize) -> f64 {
    if steps == 0 || iof == 0 || steps < iof || slices == 0 {
        return overlap(compute, io);
    }
    let update = compute / (2 * steps * slices) as f64;
    compute.max(iof as f64 * update + io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn heat_counts_the_idle_disk_before_the_first_block_and_the_last_write() {
        // One block, 10 iterations of 0.1 s, a checkpoint of 0.2 s every 2: the disk idles
        // 0.2 s before the first, and writes the last after the computation ends.
        let t = heat_tight(1.0, 1.0, 10, 2, 1);
        assert!((t - 1.2).abs() < 1e-9, "{t}");
        // I/O-bound: the disk runs from the first checkpoint's data to the end.
        let t = heat_tight(1.0, 4.0, 10, 2, 1);
        assert!((t - 4.2).abs() < 1e-9, "{t}");
        // 16 blocks: the first block's data exists after 2 of 160 updates, and the last
        // write is one of 80.
        let t = heat_tight(1.0, 1.0, 10, 2, 16);
        assert!((t - 1.0125).abs() < 1e-9, "{t}");
        // The last iteration takes no checkpoint: nothing is left to write at the end.
        let t = heat_tight(1.0, 0.5, 9, 2, 1);
        assert!((t - 1.0).abs() < 1e-9, "{t}");
        // No checkpoint: the computation alone.
        assert_eq!(heat_tight(1.0, 0.0, 10, 20, 4), 1.0);
    }

    /// What the checkpoint-grained bound said for the run where dataflow runners reached
    /// 104-106 % of it (`--iof 1 --iters 10`, 4x4 blocks, C about IO): 10 % above the
    /// overlap bound. At block grain no schedule can come closer than 1/160 of the run.
    #[test]
    fn ten_checkpoints_of_sixteen_blocks_leave_little_to_bound() {
        let t = heat_tight(1.0, 1.0, 10, 1, 16);
        assert!((t - (1.0 + 1.0 / 160.0)).abs() < 1e-9, "{t}");
    }

    #[test]
    fn fwi_counts_the_steps_before_the_first_snapshot() {
        // One slice, 10 steps each way of 0.05 s: the first snapshot exists after 2 forward
        // steps.
        let t = fwi_tight(1.0, 1.5, 10, 2, 1);
        assert!((t - 1.6).abs() < 1e-9, "{t}");
        assert_eq!(fwi_tight(2.0, 0.5, 10, 2, 8), 2.0);
    }

    proptest! {
        /// The tight bound is never below the overlap bound, and never above the two run one
        /// after the other.
        #[test]
        fn the_tight_bound_lies_between_overlap_and_serial(
            compute in 0.01f64..10.0,
            io in 0.0f64..10.0,
            iters in 1usize..200,
            iof in 1usize..50,
            blocks in 1usize..64,
        ) {
            for t in [
                heat_tight(compute, io, iters, iof, blocks),
                fwi_tight(compute, io, iters, iof, blocks),
            ] {
                prop_assert!(t >= overlap(compute, io) - 1e-9);
                prop_assert!(t <= compute + io + 1e-9);
            }
            // A finer grain never raises it: it bounds every schedule a coarser one does.
            prop_assert!(
                heat_tight(compute, io, iters, iof, blocks + 1)
                    <= heat_tight(compute, io, iters, iof, blocks) + 1e-9
            );
        }
    }
}
