//! Bounds on a runner's time from the two measured bound runs: the computation alone (`C`)
//! and the I/O alone (`IO`).
//!
//! - The **overlap bound**, `max(C, IO)`: no runner beats it by overlapping the two.
//! - The **tight bound** adds what no runner can overlap, modelled at the granularity of a
//!   checkpoint (heat) or a snapshot (FWI): the computation runs at full speed and the disk
//!   writes one checkpoint or snapshot at a time, each as soon as its data exists and the disk
//!   is free. So the disk idles until the first checkpoint's iterations are computed, and a
//!   checkpoint taken at the last iteration is written after the computation ends.
//!
//! A runner that starts writing a checkpoint's first blocks while later blocks of the same
//! iteration still compute (umt-rt's dataflow graph allows it) can beat the tight bound by a
//! little: it is the bound of a perfect runner at that granularity, not of every schedule.

/// The overlap bound: the longer of the two bound runs.
pub fn overlap(compute: f64, io: f64) -> f64 {
    compute.max(io)
}

/// The tight bound of heat: `iters` iterations computing `compute` seconds in all, a
/// checkpoint after every `iof`-th, all of them writing `io` seconds in all.
pub fn heat_tight(compute: f64, io: f64, iters: usize, iof: usize) -> f64 {
    if iters == 0 || iof == 0 {
        return overlap(compute, io);
    }
    let checkpoints = iters / iof;
    if checkpoints == 0 {
        return overlap(compute, io);
    }
    let per_iter = compute / iters as f64;
    let per_checkpoint = io / checkpoints as f64;
    let mut disk_free = 0.0f64;
    for k in 1..=checkpoints {
        let ready = (k * iof) as f64 * per_iter;
        disk_free = disk_free.max(ready) + per_checkpoint;
    }
    compute.max(disk_free)
}

/// The tight bound of FWI: `steps` forward and `steps` backward steps computing `compute`
/// seconds in all (half each way), a snapshot after every `iof`-th forward step, written and
/// read back in `io` seconds in all. The disk cannot start before the first snapshot exists,
/// after `iof` forward steps; the backward phase only needs the snapshots' data, and a runner
/// may compute its adjoint steps while the disk works, so the rest overlaps.
pub fn fwi_tight(compute: f64, io: f64, steps: usize, iof: usize) -> f64 {
    if steps == 0 || iof == 0 || steps < iof {
        return overlap(compute, io);
    }
    let per_forward_step = compute / (2 * steps) as f64;
    compute.max(iof as f64 * per_forward_step + io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn heat_counts_the_idle_disk_before_the_first_checkpoint_and_the_last_write() {
        // 10 iterations of 0.1 s, a checkpoint of 0.2 s every 2: the disk idles 0.2 s before
        // the first, keeps up with the computation, and writes the last after it ends.
        let t = heat_tight(1.0, 1.0, 10, 2);
        assert!((t - 1.2).abs() < 1e-9, "{t}");
        // I/O-bound: the disk runs from the first checkpoint's data to the end.
        let t = heat_tight(1.0, 4.0, 10, 2);
        assert!((t - 4.2).abs() < 1e-9, "{t}");
        // No checkpoint: the computation alone.
        assert_eq!(heat_tight(1.0, 0.0, 10, 20), 1.0);
    }

    #[test]
    fn fwi_counts_the_steps_before_the_first_snapshot() {
        // 10 steps each way of 0.05 s: the first snapshot exists after 2 forward steps.
        let t = fwi_tight(1.0, 1.5, 10, 2);
        assert!((t - 1.6).abs() < 1e-9, "{t}");
        assert_eq!(fwi_tight(2.0, 0.5, 10, 2), 2.0);
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
        ) {
            for t in [heat_tight(compute, io, iters, iof), fwi_tight(compute, io, iters, iof)] {
                prop_assert!(t >= overlap(compute, io) - 1e-9);
                prop_assert!(t <= compute + io + 1e-9);
            }
        }
    }
}
