//! Rank-count invariance of data-parallel PPO: the same global batch stepped by 1 rank and by
//! 2 or 3 ranks of a `LocalGroup` (threads of this process, each holding its contiguous share)
//! gives the same statistics and ends with the same weights on every rank.
//!
//! The settings exercise every reduction of `lmrl_rl::ppo::parallel`: score scaling and
//! normalisation (global running moments), reward whitening, minibatches that split across
//! ranks (shuffled, so a rank sometimes holds none of a minibatch's samples), two PPO epochs,
//! gradient clipping (the global norm of the summed gradients) and the adaptive KL controller.
//! Responses of different lengths, so that a rank's share is padded less than the whole batch
//! (with `whiten_rewards`, TRL's GAE sees the padding).

use std::path::PathBuf;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Device, Tensor};
use lmrl_models::{AutoLm, LmWithValueHead, ValueHeadInit};
use lmrl_rl::dist::shard;
use lmrl_rl::{Collective, LocalGroup, PpoAgent, PpoConfig, PpoStats};
use std::sync::Arc;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gpt2-tiny")
}

/// 8 queries and responses of different lengths, so that ranks pad their shares differently.
fn batch(step: usize) -> (Vec<Vec<u32>>, Vec<Vec<u32>>, Vec<f32>) {
    let s = step as u32;
    let q = vec![
        vec![5, 17, 300],
        vec![42, 7, 9, 11, 600],
        vec![3, 3],
        vec![999, 100, 250, 4],
        vec![12, 13 + s],
        vec![700, 701, 702, 703, 704, 705],
        vec![8],
        vec![61, 62, 63],
    ];
    let y = vec![
        vec![8, 9, 10, 11],
        vec![12],
        vec![77, 78, 79],
        vec![500, 501],
        vec![20, 21, 22, 23, 24 + s],
        vec![1, 2],
        vec![300, 301, 302],
        vec![44],
    ];
    let scores = vec![1.0, -0.5, 2.0, 0.3, -1.2, 0.8, 0.1 * step as f32, -0.25];
    (q, y, scores)
}

fn cfg() -> PpoConfig {
    PpoConfig {
        // TRL's default. The bound on the weights is absolute: Adam turns a gradient's rounding
        // into a step of up to ±lr where the gradient is near zero (the summation order of a
        // split minibatch differs from one process's), so the weights' difference grows with
        // the learning rate — at 1e-3 (12 Adam updates) it reached 1.3e-4 while every statistic
        // stayed within 1e-4.
        learning_rate: 1.41e-5,
        batch_size: 8,
        mini_batch_size: 4,
        ppo_epochs: 2,
        use_score_scaling: true,
        use_score_norm: true,
        whiten_rewards: true,
        max_grad_norm: Some(0.5),
        ..PpoConfig::default()
    }
}

/// Flattened copy of every parameter.
struct Snapshot(Vec<f32>);
impl ModuleVisitor for Snapshot {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        self.0
            .extend(p.val().try_into_vec_as::<f32>().expect("read"));
    }
}
fn snapshot<M: Module>(m: &M) -> Vec<f32> {
    let mut s = Snapshot(Vec::new());
    m.visit(&mut s);
    s.0
}

const STEPS: usize = 3;

/// The statistics of every step and the final weights of one rank.
type RankRun = (Vec<PpoStats>, Vec<f32>);

/// `STEPS` PPO steps over `world` ranks (one thread each) from the same initial model; every
/// rank's statistics and final weights.
fn run(world: usize, policy: &LmWithValueHead<AutoLm>, reference: &AutoLm) -> Vec<RankRun> {
    let ad = Device::flex().autodiff();
    let groups = LocalGroup::new(world);
    std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .iter()
            .map(|g| {
                let (policy, reference, ad) = (policy.clone(), reference.clone(), ad.clone());
                s.spawn(move || {
                    let mut agent = PpoAgent::new(policy, cfg(), &ad).unwrap();
                    if world > 1 {
                        agent
                            .set_collective(Arc::new(g.clone()) as Arc<dyn Collective>)
                            .unwrap();
                    }
                    let mine = shard(8, g.rank(), world);
                    let mut stats = Vec::new();
                    for step in 0..STEPS {
                        let (q, y, sc) = batch(step);
                        let st = agent
                            .step(
                                &q[mine.clone()],
                                &y[mine.clone()],
                                &sc[mine.clone()],
                                &reference,
                            )
                            .unwrap();
                        stats.push(st);
                    }
                    (stats, snapshot(agent.model()))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn max_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(0.0, f64::max)
}

/// Largest |Δ| over every statistic of TRL's map and the per-sample KLs.
fn stats_diff(a: &PpoStats, b: &PpoStats) -> f64 {
    let (ma, mb) = (a.to_trl_map(), b.to_trl_map());
    assert_eq!(ma.keys().collect::<Vec<_>>(), mb.keys().collect::<Vec<_>>());
    let mut worst = max_diff(&a.objective_kl_dist, &b.objective_kl_dist);
    for (k, x) in &ma {
        let y = mb[k];
        // Both NaN (a variance of one value) counts as equal.
        if x.is_nan() && y.is_nan() {
            continue;
        }
        let d = (x - y).abs();
        assert!(d.is_finite(), "{k}: {x} vs {y}");
        worst = worst.max(d);
    }
    worst
}

#[test]
fn ppo_over_two_and_three_ranks_steps_as_one_process() {
    let plain = Device::flex();
    plain.seed(11);
    let ad = plain.clone().autodiff();
    let lm = AutoLm::from_pretrained(&fixture_dir(), &ad).expect("gpt2-tiny loads");
    let policy = LmWithValueHead::new(lm, ValueHeadInit::Default, &ad);
    let reference = AutoLm::from_pretrained(&fixture_dir(), &plain).expect("reference loads");
    let initial = snapshot(&policy);

    let one = run(1, &policy, &reference);
    let (one_stats, one_weights) = &one[0];
    assert_eq!(one_stats.len(), STEPS);
    // The steps did train: the weights moved.
    let moved = max_diff(&initial, one_weights);
    assert!(moved > 1e-5, "the weights moved by only {moved}");

    for world in [2, 3] {
        let ranks = run(world, &policy, &reference);
        let mut stats_worst = 0.0f64;
        let mut weights_worst = 0.0f64;
        for (rank, (stats, weights)) in ranks.iter().enumerate() {
            for (step, (a, b)) in one_stats.iter().zip(stats).enumerate() {
                let d = stats_diff(a, b);
                assert!(
                    d <= 1e-4,
                    "{world} ranks, rank {rank}, step {step}: stats differ by {d}"
                );
                assert_eq!(a.optimizer_steps, b.optimizer_steps);
                assert_eq!(a.objective_kl_dist.len(), 8, "every sample's KL");
                stats_worst = stats_worst.max(d);
            }
            let w = max_diff(one_weights, weights);
            assert!(
                w <= 1e-4,
                "{world} ranks, rank {rank}: weights differ by {w}"
            );
            weights_worst = weights_worst.max(w);
            // Every rank holds exactly the same weights as rank 0 (sums in rank order).
            assert_eq!(weights, &ranks[0].1, "rank {rank} drifted from rank 0");
        }
        eprintln!(
            "{world} ranks vs 1: max |Δ stats| = {stats_worst:.3e}, max |Δ weights| = \
             {weights_worst:.3e} (weights moved by {moved:.3e})"
        );
    }
}

#[test]
fn a_batch_smaller_than_the_group_is_refused() {
    let plain = Device::flex();
    let ad = plain.clone().autodiff();
    let lm = AutoLm::from_pretrained(&fixture_dir(), &ad).expect("gpt2-tiny loads");
    let policy = LmWithValueHead::new(lm, ValueHeadInit::Default, &ad);
    let mut agent = PpoAgent::new(
        policy,
        PpoConfig {
            batch_size: 2,
            mini_batch_size: 2,
            ..PpoConfig::default()
        },
        &ad,
    )
    .unwrap();
    let groups = LocalGroup::new(3);
    let e = agent
        .set_collective(Arc::new(groups[0].clone()) as Arc<dyn Collective>)
        .unwrap_err();
    assert!(e.to_string().contains("batch_size"), "{e}");
}
