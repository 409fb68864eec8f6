//! The deterministic data order and the per-iteration random streams of a run.
//!
//! Every random choice of an iteration (batch, response length, sampling noise) is drawn from a
//! stream seeded by `(seed, iteration, purpose)`, not from one long-lived generator, so a
//! resumed run reproduces them without saving any generator state.
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

/// Purposes of the per-iteration streams.
pub mod stream {
    /// The response length of an iteration (tasks that draw one).
    pub const RESPONSE_LEN: u64 = 1;
    /// Sampling noise of the pioneer / single learner. CORY's observer and plain-query
    /// generations use this seed + 1 and + 2 (`lmrl_rl::CoryTrainer::iteration`).
    pub const GEN_PIONEER: u64 = 2;
    /// The per-epoch data order.
    pub const EPOCH_ORDER: u64 = 5;
    /// Evaluation sampling.
    pub const EVAL: u64 = 6;
}

/// A well-mixed 64-bit seed from several inputs (the RL crate's mixer, so the loop's streams
/// and the learners' use one).
pub use lmrl_rl::mix_seed as mix;

/// A generator for one purpose of one iteration.
pub fn iter_rng(seed: u64, iteration: usize, purpose: u64) -> StdRng {
    StdRng::seed_from_u64(mix(&[seed, iteration as u64, purpose]))
}

/// The reference's DataLoader (`shuffle=True, drop_last=True`): each epoch is a fresh seeded
/// permutation of the items (prompts, problems) cut into whole batches; iteration `i` takes
/// batch `i mod batches_per_epoch` of epoch `i div batches_per_epoch`. Unlike the reference
/// (which stops after one epoch) runs may go on for more epochs.
#[derive(Debug, Clone)]
pub struct DataOrder {
    n: usize,
    batch: usize,
    seed: u64,
}

impl DataOrder {
    pub fn new(n: usize, batch: usize, seed: u64) -> Self {
        Self { n, batch, seed }
    }

    pub fn batches_per_epoch(&self) -> usize {
        self.n / self.batch
    }

    /// Item indices of iteration `it` (needs `n ≥ batch` for a whole batch).
    pub fn batch(&self, it: usize) -> Vec<usize> {
        let per = self.batches_per_epoch().max(1);
        let (epoch, k) = (it / per, it % per);
        let mut idx: Vec<usize> = (0..self.n).collect();
        idx.shuffle(&mut StdRng::seed_from_u64(mix(&[
            self.seed,
            epoch as u64,
            stream::EPOCH_ORDER,
        ])));
        idx[k * self.batch..((k + 1) * self.batch).min(self.n)].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_order_covers_each_item_once_per_epoch_and_drops_the_rest() {
        let o = DataOrder::new(10, 3, 7);
        assert_eq!(o.batches_per_epoch(), 3);
        let mut seen: Vec<usize> = (0..3).flat_map(|i| o.batch(i)).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 9, "one epoch = 3 disjoint batches of 3");
        // Deterministic, and a new permutation in the next epoch.
        assert_eq!(o.batch(4), DataOrder::new(10, 3, 7).batch(4));
        let e0: Vec<_> = (0..3).flat_map(|i| o.batch(i)).collect();
        let e1: Vec<_> = (3..6).flat_map(|i| o.batch(i)).collect();
        assert_ne!(e0, e1);
    }

    #[test]
    fn streams_differ_by_purpose_and_iteration() {
        assert_ne!(mix(&[0, 1, 2]), mix(&[0, 2, 1]));
        assert_ne!(mix(&[0, 1, 2]), mix(&[1, 1, 2]));
        assert_eq!(mix(&[3, 4]), mix(&[3, 4]));
    }
}
