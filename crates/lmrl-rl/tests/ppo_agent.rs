//! PpoAgent on the tiny random GPT-2 fixture (`tests/fixtures/gpt2-tiny`).

use std::path::PathBuf;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor};
use lmrl_models::{AutoLm, LmWithValueHead, ModelError, ValueHeadInit};
use lmrl_models::{QueryResponseBatch, response_logprobs, response_values};
use lmrl_rl::RlError;
use lmrl_rl::ppo::{clip_grad_norm, global_grad_norm};
use lmrl_rl::{PpoAgent, PpoConfig};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gpt2-tiny")
}

fn models() -> (LmWithValueHead<AutoLm>, AutoLm, Device) {
    let plain = Device::flex();
    plain.seed(7);
    let ad = plain.clone().autodiff();
    let lm = AutoLm::from_pretrained(&fixture_dir(), &ad).expect("gpt2-tiny loads");
    let policy = LmWithValueHead::new(lm, ValueHeadInit::Default, &ad);
    let reference = AutoLm::from_pretrained(&fixture_dir(), &plain).expect("reference loads");
    (policy, reference, ad)
}

fn batch() -> (Vec<Vec<u32>>, Vec<Vec<u32>>, Vec<f32>) {
    let q = vec![
        vec![5, 17, 300],
        vec![42, 7, 9, 11, 600],
        vec![3, 3],
        vec![999, 100, 250, 4],
    ];
    let y = vec![
        vec![8, 9, 10, 11],
        vec![12],
        vec![77, 78, 79],
        vec![500, 501],
    ];
    (q, y, vec![1.0, -0.5, 2.0, 0.3])
}

fn cfg() -> PpoConfig {
    PpoConfig {
        learning_rate: 1e-3,
        batch_size: 4,
        mini_batch_size: 4,
        ppo_epochs: 1,
        use_score_scaling: false,
        use_score_norm: false,
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

#[test]
fn one_step_changes_parameters_and_lowers_the_loss() {
    let (policy, reference, ad) = models();
    let (q, y, s) = batch();
    let mut agent = PpoAgent::new(policy, cfg(), &ad).unwrap();
    let before_params = snapshot(agent.model());
    let beta = agent.kl_coef();
    let old = agent.rollout(&q, &y, &reference).unwrap();
    let before = agent
        .evaluate_loss(&q, &y, &s, &reference, beta, Some(&old))
        .unwrap();
    let stats = agent.step(&q, &y, &s, &reference).unwrap();
    let after_params = snapshot(agent.model());
    let after = agent
        .evaluate_loss(&q, &y, &s, &reference, beta, Some(&old))
        .unwrap();
    let changed = before_params
        .iter()
        .zip(&after_params)
        .filter(|(a, b)| a != b)
        .count();
    eprintln!(
        "loss before {} after {}; {changed}/{} parameters changed; stats {:?}",
        before.loss_total,
        after.loss_total,
        before_params.len(),
        stats.to_trl_map()
    );
    assert!(
        changed > before_params.len() / 2,
        "only {changed} parameters moved"
    );
    assert!(
        after.loss_total < before.loss_total,
        "{} !< {}",
        after.loss_total,
        before.loss_total
    );
    assert_eq!(stats.optimizer_steps, 1);
    assert_eq!(stats.objective_kl_coef, beta);
    // Policy == reference before the step: KL 0 and approxkl 0 at the first minibatch.
    assert!(stats.objective_kl.abs() < 1e-4, "{}", stats.objective_kl);
    assert!(stats.train.policy_approxkl.abs() < 1e-6);
    assert!((stats.train.policy_ratio_mean - 1.0).abs() < 1e-5);
    // KL below target: β shrinks by the clipped −0.2·4/10000.
    assert!((stats.kl_coef_next - beta * (1.0 - 0.2 * 4.0 / 10000.0)).abs() < 1e-12);
}

#[test]
fn a_batch_of_equal_scores_is_measured_but_not_trained_on_when_asked() {
    let (q, y, varied) = batch();
    let equal = vec![0.0; 4];
    // One draw of the value head for every agent below (other tests seed the same device RNG).
    let (policy, reference, ad) = models();
    let before = snapshot(&policy);
    let skipping = PpoConfig {
        skip_equal_scores: true,
        ppo_epochs: 2,
        ..cfg()
    };
    let plain = PpoConfig {
        ppo_epochs: 2,
        ..cfg()
    };
    let step = |config: &PpoConfig, scores: &[f32]| {
        let mut agent = PpoAgent::new(policy.clone(), config.clone(), &ad).unwrap();
        let beta = agent.kl_coef();
        let stats = agent.step(&q, &y, scores, &reference).unwrap();
        assert_eq!(agent.steps(), 1);
        (snapshot(agent.model()), stats, beta)
    };
    // Equal scores with the option: no weight moves, no Adam step, but the batch is measured
    // (the loss statistics of one pass) and counts as a step for β.
    let (after, stats, beta) = step(&skipping, &equal);
    assert_eq!(after, before);
    assert_eq!(stats.optimizer_steps, 0);
    assert!(stats.train.policy_entropy > 0.0, "{:?}", stats.train);
    assert!(stats.train.loss_value > 0.0, "{:?}", stats.train);
    assert!(stats.kl_coef_next < beta);
    // Without it (TRL) the same batch is trained on: the whitened advantages are not zero.
    let (after, stats, _) = step(&plain, &equal);
    assert_eq!(stats.optimizer_steps, 2);
    assert_ne!(after, before);
    // Scores that differ are trained on with the option exactly as without it.
    let (with_option, stats, _) = step(&skipping, &varied);
    assert_eq!(stats.optimizer_steps, 2);
    assert_eq!(with_option, step(&plain, &varied).0);
}

#[test]
fn kl_of_a_policy_with_itself_is_zero() {
    let (policy, reference, ad) = models();
    let (q, y, _) = batch();
    for kind in ["full", "kl", "abs", "mse"] {
        let c: PpoConfig =
            serde_json::from_value(serde_json::json!({ "kl_penalty": kind })).unwrap();
        let agent = PpoAgent::new(policy.clone(), c, &ad).unwrap();
        let kl = agent.kl_to_reference(&q, &y, &reference).unwrap();
        assert_eq!(kl.len(), 4);
        for k in kl {
            assert!(k.abs() < 1e-5, "{kind}: {k}");
        }
    }
}

#[test]
fn nan_and_shape_errors_are_typed() {
    let (policy, reference, ad) = models();
    let (q, y, mut s) = batch();
    let mut agent = PpoAgent::new(policy, cfg(), &ad).unwrap();
    s[2] = f32::NAN;
    let err = agent.step(&q, &y, &s, &reference).unwrap_err();
    assert!(
        matches!(err, RlError::NonFinite { ref what, ref location, .. } if what == "scores" && location == "element 2"),
        "{err}"
    );
    let err = agent
        .step(&q[..3], &y[..3], &s[..3], &reference)
        .unwrap_err();
    assert!(matches!(err, RlError::Shape { .. }), "{err}");
    let mut y2 = y.clone();
    y2[1].clear();
    let err = agent.step(&q, &y2, &[0.0; 4], &reference).unwrap_err();
    assert!(
        matches!(err, RlError::EmptyResponse { sample: 1, .. }),
        "{err}"
    );
    assert!(PpoAgent::new(agent.model().clone(), cfg(), &Device::flex()).is_err());
    // Sequences the model cannot hold are refused before any forward (gpt2-tiny: vocab 1000,
    // 64 positions).
    let mut long = q.clone();
    long[3] = vec![1; 63];
    let err = agent.step(&long, &y, &[0.0; 4], &reference).unwrap_err();
    assert!(
        matches!(
            err,
            RlError::Model(ModelError::ContextTooLong { len: 65, max: 64 })
        ),
        "{err}"
    );
    let mut y3 = y.clone();
    y3[2][1] = 1000;
    let err = agent.kl_to_reference(&q, &y3, &reference).unwrap_err();
    assert!(
        matches!(
            err,
            RlError::Model(ModelError::TokenOutOfRange {
                id: 1000,
                row: 2,
                ..
            })
        ),
        "{err}"
    );
}

#[test]
fn global_grad_norm_clipping_scales_all_gradients_together() {
    let (policy, _, ad) = models();
    let (q, y, _) = batch();
    let b = QueryResponseBatch::new(&q, &y, 0, &ad).unwrap();
    let (hidden, values) = policy.hidden_and_values(b.input_ids.clone(), b.attention_mask.clone());
    let (lp, _) = response_logprobs(&policy.lm, hidden, &b);
    let loss = lp.sum() + response_values(values, &b).sum();
    let mut grads = GradientsParams::from_grads(loss.backward(), &policy);
    let n0 = global_grad_norm(&policy, &grads).unwrap().unwrap();
    let max = n0 / 4.0;
    let reported = clip_grad_norm(&policy, &mut grads, max).unwrap();
    assert_eq!(reported, n0);
    let n1 = global_grad_norm(&policy, &grads).unwrap().unwrap();
    eprintln!("global grad norm {n0} -> {n1} (max {max})");
    assert!((n1 - max).abs() / max < 1e-4, "{n1} vs {max}");
    // Below the threshold nothing changes.
    let again = clip_grad_norm(&policy, &mut grads, n1 * 10.0).unwrap();
    assert!((global_grad_norm(&policy, &grads).unwrap().unwrap() - again).abs() < 1e-6 * again);
}

#[test]
fn accumulation_and_clipping_run_end_to_end() {
    let (policy, reference, ad) = models();
    let (q, y, s) = batch();
    let c = PpoConfig {
        mini_batch_size: 1,
        gradient_accumulation_steps: 2,
        ppo_epochs: 2,
        max_grad_norm: Some(0.5),
        use_score_scaling: true,
        use_score_norm: true,
        ..cfg()
    };
    let mut agent = PpoAgent::new(policy, c, &ad).unwrap();
    let st = agent.step(&q, &y, &s, &reference).unwrap();
    assert_eq!(st.optimizer_steps, 4, "2 epochs × 2 backward batches");
    assert!(st.grad_norm.is_some_and(f32::is_finite));
    assert!(
        st.mean_scores.abs() < 1e-5,
        "normalised scores have mean 0: {}",
        st.mean_scores
    );
    let st2 = agent.step(&q, &y, &s, &reference).unwrap();
    assert!(
        st2.objective_kl > 0.0,
        "the policy moved away from the reference"
    );
    assert!(agent.running_moments().count > 7.9);
    agent.reset_state();
    assert_eq!(agent.kl_coef(), agent.config().init_kl_coef);
    assert_eq!(
        *agent.running_moments(),
        lmrl_rl::ppo::RunningMoments::new()
    );
}

/// End to end, PPO must learn: with a reward that pays for response tokens below id 100
/// (≈10% of a near-uniform tiny model's samples), twenty sample-and-step rounds must raise
/// the rewarded fraction well above where it started. Catches any misalignment between
/// generated responses, their scores and the optimisation.
#[test]
fn ppo_raises_a_simple_reward() {
    let (policy, reference, ad) = models();
    let c = PpoConfig {
        learning_rate: 3e-3,
        batch_size: 16,
        mini_batch_size: 8,
        ppo_epochs: 2,
        init_kl_coef: 0.01,
        ..cfg()
    };
    let mut agent = PpoAgent::new(policy, c, &ad).unwrap();
    let prompts: Vec<Vec<u32>> = (0..16).map(|i| vec![200 + i, 300 + i, 400]).collect();
    let reward = |y: &[u32]| y.iter().filter(|&&t| t < 100).count() as f32 / y.len().max(1) as f32;
    let mut fractions = Vec::new();
    for round in 0..20u64 {
        let gcfg = lmrl_models::GenerationConfig {
            sampling: lmrl_models::Sampling::pure(),
            max_new_tokens: 6,
            repetition_penalty: 1.0,
            eos_token_ids: Vec::new(),
            pad_token_id: 0,
            seed: round,
            first_row: 0,
            stop_sequences: Vec::new(),
            min_new_tokens: 0,
        };
        let y = agent.generate(&prompts, &gcfg).unwrap().tokens;
        let scores: Vec<f32> = y.iter().map(|r| reward(r)).collect();
        fractions.push(scores.iter().sum::<f32>() / scores.len() as f32);
        agent.step(&prompts, &y, &scores, &reference).unwrap();
    }
    let first = fractions[..3].iter().sum::<f32>() / 3.0;
    let last = fractions[17..].iter().sum::<f32>() / 3.0;
    assert!(
        last > first + 0.25,
        "rewarded fraction {first:.3} → {last:.3}: {fractions:?}"
    );
}

/// The first minibatch trains on the weights the rollout scored, so the step takes its loss
/// from the rollout's own forward: with one minibatch per step, the step's loss statistics are
/// those of the loss evaluated separately on the same weights, and the ratio π/π_old is 1.
#[test]
fn the_first_minibatch_loss_is_the_loss_on_the_rollout_weights() {
    let (policy, reference, ad) = models();
    let (q, y, s) = batch();
    let before = PpoAgent::new(policy, cfg(), &ad).unwrap();
    let expected = before
        .evaluate_loss(&q, &y, &s, &reference, before.kl_coef(), None)
        .unwrap();
    let mut agent = before.clone();
    let got = agent.step(&q, &y, &s, &reference).unwrap().train;
    assert_eq!(got.policy_ratio_mean, 1.0);
    assert_eq!(got.policy_approxkl, 0.0);
    for (what, a, b) in [
        ("loss_total", got.loss_total, expected.loss_total),
        ("loss_policy", got.loss_policy, expected.loss_policy),
        ("loss_value", got.loss_value, expected.loss_value),
        (
            "policy_entropy",
            got.policy_entropy,
            expected.policy_entropy,
        ),
        ("val_vpred", got.val_vpred, expected.val_vpred),
    ] {
        assert!(
            (a - b).abs() <= 1e-6 * b.abs().max(1.0),
            "{what}: {a} vs {b}"
        );
    }
    assert!(
        snapshot(agent.model()) != snapshot(before.model()),
        "the step updated the weights"
    );
}
