//! Rank-count invariance of data-parallel PPO, GRPO and RLOO: the same global batch stepped by 1 rank and by
//! 2 or 3 ranks of a `LocalGroup` (threads of this process, each holding its contiguous share)
//! gives the same statistics and ends with the same weights on every rank.
//!
//! The settings exercise every reduction of `lmrl_rl::ppo::parallel`: score scaling and
//! normalisation (global running moments), reward whitening, minibatches that split across
//! ranks (shuffled, so a rank sometimes holds none of a minibatch's samples), two PPO epochs,
//! gradient clipping (the global norm of the summed gradients) and the adaptive KL controller.
//! Responses of different lengths, so that a rank's share is padded less than the whole batch
//! (with `whiten_rewards`, TRL's GAE sees the padding).

use std::collections::BTreeMap;
use std::path::PathBuf;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Device, Tensor};
use lmrl_models::{AutoLm, LmWithValueHead, ValueHeadInit};
use lmrl_rl::dist::shard;
use lmrl_rl::group::{GrpoLossType, GrpoSettings};
use lmrl_rl::{
    Collective, GroupAgent, GroupAlgorithm, GroupStats, GrpoConfig, LocalGroup, PpoAgent,
    PpoConfig, PpoStats, RlooConfig,
};
use std::sync::Arc;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gpt2-tiny")
}

/// 8 queries and responses of different lengths, so that ranks pad their shares differently.
fn batch(step: usize) -> Batch {
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

/// `f` on each of the `world` ranks of a `LocalGroup`, one thread each; every rank's result.
fn on_ranks<R: Send>(world: usize, f: impl Fn(&LocalGroup) -> R + Sync) -> Vec<R> {
    let groups = LocalGroup::new(world);
    std::thread::scope(|s| {
        let handles: Vec<_> = groups.iter().map(|g| s.spawn(|| f(g))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// This rank as a learner's collective.
fn member(g: &LocalGroup) -> Arc<dyn Collective> {
    Arc::new(g.clone())
}

/// A batch of queries, responses and scores.
type Batch = (Vec<Vec<u32>>, Vec<Vec<u32>>, Vec<f32>);

/// `STEPS` steps, each on the rows `mine` of `batch(step)`.
fn steps<S>(
    mine: std::ops::Range<usize>,
    batch: fn(usize) -> Batch,
    mut step: impl FnMut(&[Vec<u32>], &[Vec<u32>], &[f32]) -> S,
) -> Vec<S> {
    (0..STEPS)
        .map(|i| {
            let (q, y, sc) = batch(i);
            step(&q[mine.clone()], &y[mine.clone()], &sc[mine.clone()])
        })
        .collect()
}

/// `STEPS` PPO steps over `world` ranks (one thread each) from the same initial model; every
/// rank's statistics and final weights.
fn run(world: usize, policy: &LmWithValueHead<AutoLm>, reference: &AutoLm) -> Vec<RankRun> {
    let ad = Device::flex().autodiff();
    on_ranks(world, |g| {
        let mut agent = PpoAgent::new(policy.clone(), cfg(), &ad).unwrap();
        if world > 1 {
            agent.set_collective(member(g)).unwrap();
        }
        let stats = steps(shard(8, g.rank(), world), batch, |q, y, sc| {
            agent.step(q, y, sc, reference).unwrap()
        });
        (stats, snapshot(agent.model()))
    })
}

fn max_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(0.0, f64::max)
}

/// Largest |Δ| over every statistic of two TRL maps and the per-sample KLs.
fn trl_diff(ma: &BTreeMap<String, f64>, mb: &BTreeMap<String, f64>, kl: (&[f32], &[f32])) -> f64 {
    assert_eq!(ma.keys().collect::<Vec<_>>(), mb.keys().collect::<Vec<_>>());
    let mut worst = max_diff(kl.0, kl.1);
    for (k, x) in ma {
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

/// A step's statistics as the rank-count comparison reads them: TRL's map, the per-sample
/// KLs and the Adam steps taken.
trait Compared {
    fn parts(&self) -> (BTreeMap<String, f64>, &[f32], usize);

    /// Largest |Δ| to `other` over every logged statistic and per-sample KL.
    fn diff(&self, other: &Self) -> f64 {
        let ((ma, ka, _), (mb, kb, _)) = (self.parts(), other.parts());
        trl_diff(&ma, &mb, (ka, kb))
    }
}

impl Compared for PpoStats {
    fn parts(&self) -> (BTreeMap<String, f64>, &[f32], usize) {
        (
            self.to_trl_map(),
            &self.objective_kl_dist,
            self.optimizer_steps,
        )
    }
}

impl Compared for GroupStats {
    fn parts(&self) -> (BTreeMap<String, f64>, &[f32], usize) {
        (
            self.to_trl_map(),
            &self.objective_kl_dist,
            self.optimizer_steps,
        )
    }
}

/// Every rank of `ranks` against the one-process run (`one`, `one_weights`): each step's
/// statistics and the final weights within 1e-4, and every rank's weights exactly rank 0's
/// (sums in rank order). Prints the largest differences (quoted in docs/distributed.md).
fn check_ranks<S: Compared>(
    name: &str,
    one: &[S],
    one_weights: &[f32],
    ranks: &[(Vec<S>, Vec<f32>)],
    moved: f64,
) {
    let world = ranks.len();
    let (mut stats_worst, mut weights_worst) = (0.0f64, 0.0f64);
    for (rank, (stats, weights)) in ranks.iter().enumerate() {
        for (step, (a, b)) in one.iter().zip(stats).enumerate() {
            let d = a.diff(b);
            let at = format!("{name}, {world} ranks, rank {rank}, step {step}");
            assert!(d <= 1e-4, "{at}: stats differ by {d}");
            let ((_, ka, sa), (_, kb, sb)) = (a.parts(), b.parts());
            assert_eq!(sa, sb, "{at}: Adam steps");
            assert_eq!(ka.len(), kb.len(), "{at}: every sample's KL");
            stats_worst = stats_worst.max(d);
        }
        let w = max_diff(one_weights, weights);
        assert!(
            w <= 1e-4,
            "{name}, {world} ranks, rank {rank}: weights differ by {w}"
        );
        weights_worst = weights_worst.max(w);
        assert_eq!(
            weights, &ranks[0].1,
            "{name}: rank {rank} drifted from rank 0"
        );
    }
    eprintln!(
        "{name}, {world} ranks vs 1: max |Δ stats| = {stats_worst:.3e}, max |Δ weights| = \
         {weights_worst:.3e} (weights moved by {moved:.3e})"
    );
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
        check_ranks(
            "ppo",
            one_stats,
            one_weights,
            &run(world, &policy, &reference),
            moved,
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
    let e = agent.set_collective(member(&groups[0])).unwrap_err();
    assert!(e.to_string().contains("batch_size"), "{e}");
}

/// 6 prompts × G = 2, rows 2p and 2p + 1 answering prompt p; lengths 1–6 with a maximum of 5,
/// so that some completions are truncated.
fn group_batch(step: usize) -> Batch {
    let (q8, y8, _) = batch(step);
    let q: Vec<Vec<u32>> = (0..12).map(|i| q8[(i / 2) % 8].clone()).collect();
    let y: Vec<Vec<u32>> = (0..12)
        .map(|i| {
            let mut r = y8[(i + step) % 8].clone();
            r.extend((0..(i % 3) as u32).map(|k| 30 + k));
            r.truncate(5);
            r
        })
        .collect();
    let scores = (0..12)
        .map(|i| ((i * 7 + step * 3) % 5) as f32 * 0.5 - 1.0)
        .collect();
    (q, y, scores)
}

/// The group learners whose data-parallel step is compared: each GRPO loss type (one with a
/// KL term and two passes, so with the no-grad pre-pass and off-policy ratios; one with
/// truncated completions masked out), and RLOO with its KL in the reward.
fn group_learners() -> Vec<(&'static str, GroupAlgorithm)> {
    let grpo = |loss_type, beta, num_iterations, mask_truncated_completions| {
        GroupAlgorithm::Grpo(GrpoConfig {
            learning_rate: 1e-5,
            num_generations: 2,
            prompts_per_step: 6,
            mini_batch_size: 3,
            gradient_accumulation_steps: 2,
            max_completion_length: 5,
            kind: GrpoSettings {
                loss_type,
                ..GrpoSettings::default()
            },
            beta,
            num_iterations,
            mask_truncated_completions,
            max_grad_norm: Some(0.5),
            ..GrpoConfig::default()
        })
    };
    vec![
        ("grpo dapo", grpo(GrpoLossType::Dapo, 0.0, 1, false)),
        (
            "grpo grpo β 0.04 μ 2",
            grpo(GrpoLossType::Grpo, 0.04, 2, false),
        ),
        ("grpo bnpo masked", grpo(GrpoLossType::Bnpo, 0.0, 1, true)),
        ("grpo dr_grpo", grpo(GrpoLossType::DrGrpo, 0.0, 1, false)),
        (
            "rloo",
            GroupAlgorithm::Rloo(RlooConfig {
                learning_rate: 1e-5,
                num_generations: 2,
                prompts_per_step: 6,
                mini_batch_size: 3,
                gradient_accumulation_steps: 2,
                max_completion_length: 5,
                beta: 0.05,
                num_iterations: 2,
                ..RlooConfig::default()
            }),
        ),
    ]
}

/// `STEPS` group steps over `world` ranks; every rank's TRL statistics and final weights.
fn run_group(
    world: usize,
    algorithm: &GroupAlgorithm,
    policy: &AutoLm,
    reference: &AutoLm,
) -> Vec<(Vec<GroupStats>, Vec<f32>)> {
    let ad = Device::flex().autodiff();
    on_ranks(world, |g| {
        let mut agent = GroupAgent::new(policy.clone(), algorithm.clone(), &ad).unwrap();
        if world > 1 {
            agent.set_collective(member(g)).unwrap();
        }
        let p = shard(6, g.rank(), world);
        let stats = steps(p.start * 2..p.end * 2, group_batch, |q, y, sc| {
            agent.step(q, y, sc, reference).unwrap()
        });
        (stats, snapshot(agent.model()))
    })
}

#[test]
fn grpo_and_rloo_over_two_and_three_ranks_step_as_one_process() {
    let plain = Device::flex();
    plain.seed(11);
    let ad = plain.clone().autodiff();
    let policy = AutoLm::from_pretrained(&fixture_dir(), &ad).expect("gpt2-tiny loads");
    let reference = AutoLm::from_pretrained(&fixture_dir(), &plain).expect("reference loads");
    let initial = snapshot(&policy);
    for (name, algorithm) in group_learners() {
        let one = run_group(1, &algorithm, &policy, &reference);
        let (one_stats, one_weights) = &one[0];
        let moved = max_diff(&initial, one_weights);
        assert!(moved > 1e-6, "{name}: the weights moved by only {moved}");
        for world in [2, 3] {
            let ranks = run_group(world, &algorithm, &policy, &reference);
            check_ranks(name, one_stats, one_weights, &ranks, moved);
        }
    }
}

#[test]
fn fewer_prompts_than_ranks_are_refused() {
    let ad = Device::flex().autodiff();
    let lm = AutoLm::from_pretrained(&fixture_dir(), &ad).expect("gpt2-tiny loads");
    let (_, algorithm) = group_learners().remove(0);
    let mut agent = GroupAgent::new(lm, algorithm, &ad).unwrap();
    let groups = LocalGroup::new(7);
    let e = agent.set_collective(member(&groups[0])).unwrap_err();
    assert!(e.to_string().contains("prompts_per_step"), "{e}");
}
