//! A multi-armed bandit: DYON's way of choosing a partition from past performance (seed 002,
//! after Berry and Fristedt), usable on its own.
//!
//! B1. Every arm is tried once, in order, before any is chosen for its record.
//! B2. Then, with [`Strategy::EpsilonGreedy`], a random arm with probability `epsilon`
//!     (exploration, counted), else the best mean; with [`Strategy::Ucb1`], the arm with the
//!     highest mean plus `c * sqrt(ln(pulls) / pulls of the arm)`.
//! B3. A reward updates its arm's mean: the plain average (weighted, where rewards carry a
//!     weight: a ratio metric's per-period ratio weighted by its denominator gives the ratio
//!     of the sums), or with a step size the exponentially weighted one, which follows a
//!     system whose best arm changes.

/// How a [`Bandit`] picks its next arm (step B2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Strategy {
    /// The best arm so far, except a random one with probability `epsilon` (0..=1).
    EpsilonGreedy {
        /// The exploration rate.
        epsilon: f64,
    },
    /// Upper confidence bound (UCB1) with exploration weight `c` (`sqrt(2)` in the
    /// literature, for rewards in 0..=1).
    Ucb1 {
        /// The exploration weight.
        c: f64,
    },
}

impl Default for Strategy {
    fn default() -> Self {
        Strategy::EpsilonGreedy { epsilon: 0.1 }
    }
}

/// A bandit over a fixed number of arms; rewards are higher-is-better. Deterministic for a
/// seed.
#[derive(Debug, Clone)]
pub struct Bandit {
    strategy: Strategy,
    step: Option<f64>,
    counts: Vec<u64>,
    means: Vec<f64>,
    /// Sum of the weights of each arm's rewards.
    weights: Vec<f64>,
    pulls: u64,
    explorations: u64,
    rng: u64,
}

impl Bandit {
    /// A bandit over `arms` arms (at least 1).
    pub fn new(arms: usize, strategy: Strategy, seed: u64) -> Bandit {
        let arms = arms.max(1);
        Bandit {
            strategy,
            step: None,
            counts: vec![0; arms],
            means: vec![0.0; arms],
            weights: vec![0.0; arms],
            pulls: 0,
            explorations: 0,
            rng: seed ^ 0x9e37_79b9_7f4a_7c15 | 1,
        }
    }

    /// Means weighted towards recent rewards: each reward moves its arm's mean by `step`
    /// (0..=1) of the difference (step B3). Without it, the plain average.
    pub fn with_step(mut self, step: f64) -> Bandit {
        self.step = (step > 0.0 && step <= 1.0).then_some(step);
        self
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// The arm to pull next (steps B1 and B2).
    pub fn choose(&mut self) -> usize {
        self.pulls += 1;
        if let Some(untried) = self.counts.iter().position(|&c| c == 0) {
            return untried;
        }
        match self.strategy {
            Strategy::EpsilonGreedy { epsilon } => {
                let draw = (self.next_random() >> 11) as f64 / (1u64 << 53) as f64;
                if draw < epsilon {
                    self.explorations += 1;
                    (self.next_random() % self.counts.len() as u64) as usize
                } else {
                    self.best()
                }
            }
            Strategy::Ucb1 { c } => {
                let ln = (self.pulls as f64).ln();
                let score = |a: usize| self.means[a] + c * (ln / self.counts[a] as f64).sqrt();
                (0..self.counts.len())
                    .max_by(|&a, &b| score(a).total_cmp(&score(b)))
                    .unwrap_or(0)
            }
        }
    }

    /// Records `reward` for `arm` (step B3). Rewards that are not finite, and arms out of
    /// range, are ignored.
    pub fn update(&mut self, arm: usize, reward: f64) {
        self.update_weighted(arm, reward, 1.0);
    }

    /// Records `reward` for `arm` with weight `weight` (step B3): the plain mean becomes the
    /// weighted one. For a ratio metric (CPU time per block of I/O), the period's ratio
    /// weighted by its denominator makes the mean the ratio of the sums, which short periods
    /// with little I/O do not swing. With a step size, the weight is ignored. Rewards or
    /// weights that are not finite, weights not above 0, and arms out of range are ignored.
    pub fn update_weighted(&mut self, arm: usize, reward: f64, weight: f64) {
        if arm >= self.counts.len() || !reward.is_finite() || !weight.is_finite() || weight <= 0.0 {
            return;
        }
        self.counts[arm] += 1;
        self.weights[arm] += weight;
        let step = self.step.unwrap_or(weight / self.weights[arm]);
        self.means[arm] += step * (reward - self.means[arm]);
    }

    /// Forgets every reward (counts, means, weights), keeping the strategy, the step and
    /// the random state: for a metric whose scale changed (DYON's CPIO between its I/O and
    /// CPU-only forms).
    pub(crate) fn forget(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.means.iter_mut().for_each(|m| *m = 0.0);
        self.weights.iter_mut().for_each(|w| *w = 0.0);
    }

    /// The tried arm with the highest mean (the first on ties; arm 0 before any reward).
    pub fn best(&self) -> usize {
        (0..self.counts.len())
            .filter(|&a| self.counts[a] > 0)
            .fold(None, |best: Option<usize>, a| match best {
                Some(b) if self.means[b] >= self.means[a] => Some(b),
                _ => Some(a),
            })
            .unwrap_or(0)
    }

    /// Rewards recorded per arm.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// Mean reward per arm.
    pub fn means(&self) -> &[f64] {
        &self.means
    }

    /// Times [`Bandit::choose`] was called, and how many of those explored at random
    /// (epsilon-greedy only).
    pub fn pulls(&self) -> (u64, u64) {
        (self.pulls, self.explorations)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::Bandit;
    use super::Strategy as Pick;

    /// Plays `n` rounds against `table` (mean rewards) with noise of `noise` from a fixed
    /// generator; returns the bandit.
    fn play(mut b: Bandit, table: &[f64], noise: f64, n: usize) -> Bandit {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..n {
            let arm = b.choose();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            b.update(arm, table[arm] + noise * (2.0 * u - 1.0));
        }
        b
    }

    #[test]
    fn every_arm_is_tried_first_in_order() {
        let mut b = Bandit::new(4, Pick::default(), 1);
        let first: Vec<usize> = (0..4)
            .map(|_| {
                let a = b.choose();
                b.update(a, 0.0);
                a
            })
            .collect();
        assert_eq!(first, [0, 1, 2, 3]);
        b.update(9, 1.0);
        b.update(0, f64::NAN);
        assert_eq!(b.counts(), [1, 1, 1, 1]);
    }

    /// Weighted rewards average to the ratio of sums: periods of (cpu, io) (1, 10) and
    /// (1, 1000) give 2/1010, not the mean of 0.1 and 0.001.
    #[test]
    fn weighted_rewards_give_the_ratio_of_sums() {
        let mut b = Bandit::new(1, Pick::default(), 1);
        b.update_weighted(0, 1.0 / 10.0, 10.0);
        b.update_weighted(0, 1.0 / 1000.0, 1000.0);
        assert!(
            (b.means()[0] - 2.0 / 1010.0).abs() < 1e-12,
            "{:?}",
            b.means()
        );
        assert_eq!(b.counts(), [2]);
        b.update_weighted(0, 5.0, 0.0);
        b.update_weighted(0, 5.0, f64::NAN);
        assert_eq!(b.counts(), [2]);
    }

    #[test]
    fn a_step_size_follows_a_change_of_the_best_arm() {
        let mut b = Bandit::new(2, Pick::EpsilonGreedy { epsilon: 0.2 }, 7).with_step(0.3);
        b = play(b, &[1.0, 0.0], 0.0, 300);
        assert_eq!(b.best(), 0);
        b = play(b, &[0.0, 1.0], 0.0, 300);
        assert_eq!(b.best(), 1);
    }

    proptest! {
        /// Both strategies find the best arm of a reward table and pull it most of the time.
        #[test]
        fn converges_to_the_best_arm(
            table in proptest::collection::vec(0.0f64..0.7, 2..8),
            best in 0usize..8,
            seed: u64,
            ucb: bool,
        ) {
            let mut table = table;
            let best = best % table.len();
            table[best] = 1.0; // a margin of at least 0.3 over every other arm
            let strategy = if ucb {
                Pick::Ucb1 { c: 0.5 }
            } else {
                Pick::EpsilonGreedy { epsilon: 0.1 }
            };
            let b = play(Bandit::new(table.len(), strategy, seed), &table, 0.1, 3000);
            prop_assert_eq!(b.best(), best);
            prop_assert!(b.counts()[best] as f64 > 0.75 * 3000.0, "{:?}", b.counts());
        }

        /// Epsilon-greedy explores at its configured rate.
        #[test]
        fn explores_at_the_configured_rate(epsilon in 0.0f64..0.5, seed: u64) {
            let b = play(
                Bandit::new(3, Pick::EpsilonGreedy { epsilon }, seed),
                &[0.2, 0.5, 0.9],
                0.0,
                20_000,
            );
            let (pulls, explored) = b.pulls();
            let rate = explored as f64 / (pulls - 3) as f64;
            prop_assert!((rate - epsilon).abs() < 0.02, "rate {} for epsilon {}", rate, epsilon);
        }
    }
}
