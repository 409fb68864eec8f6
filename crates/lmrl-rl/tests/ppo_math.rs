//! Hand-computed values, invariants and error paths of the PPO arithmetic.

use burn::tensor::{Device, Tensor, TensorData, activation::log_softmax};
use lmrl_rl::ppo::{
    AdaptiveKlController, FixedKlController, Gae, KlController, KlPenalty, LossInputs, LossParams,
    ResponseMask, RunningMoments, TokenLogProbs, compute_advantages, compute_advantages_with,
    compute_rewards, kl_penalty, normalise_scores, ppo_loss,
};
use lmrl_rl::ppo::{kl_abs, kl_full, kl_k1, kl_mse};
use lmrl_rl::ppo::{masked_mean, masked_var, masked_whiten, whiten};
use lmrl_rl::{PpoConfig, RlError};

fn dev() -> Device {
    Device::flex()
}
fn t2(v: &[f32], b: usize, t: usize) -> Tensor<2> {
    Tensor::from_data(TensorData::new(v.to_vec(), [b, t]), &dev())
}
fn t1(v: &[f32]) -> Tensor<1> {
    Tensor::from_data(TensorData::new(v.to_vec(), [v.len()]), &dev())
}
fn host<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.try_into_vec_as::<f32>().expect("read")
}
fn close(a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= tol, "[{i}] {x} vs {y}");
    }
}

fn params() -> LossParams {
    PpoConfig::default().loss_params()
}

#[test]
fn token_kl_estimators_by_hand() {
    let lp = t2(&[-1.0, -2.0], 1, 2);
    let rp = t2(&[-1.5, -1.0], 1, 2);
    close(&host(kl_k1(lp.clone(), rp.clone())), &[0.5, -1.0], 1e-7);
    close(&host(kl_abs(lp.clone(), rp.clone())), &[0.5, 1.0], 1e-7);
    close(&host(kl_mse(lp, rp)), &[0.125, 0.5], 1e-7);
}

#[test]
fn full_kl_is_zero_against_itself_and_matches_hand_value() {
    let logits = Tensor::<3>::from_data(
        TensorData::new(vec![0.3f32, -1.0, 2.0, 0.0, 0.5, 0.5], [1, 2, 3]),
        &dev(),
    );
    let lsm = log_softmax(logits, 2);
    close(&host(kl_full(lsm.clone(), lsm.clone())), &[0.0, 0.0], 1e-7);
    // Two-way distribution p = (0.75, 0.25) vs q = (0.5, 0.5): KL = 0.75 ln 1.5 + 0.25 ln 0.5.
    let p = Tensor::<3>::from_data(
        TensorData::new(vec![0.75f32.ln(), 0.25f32.ln()], [1, 1, 2]),
        &dev(),
    );
    let q = Tensor::<3>::from_data(
        TensorData::new(vec![0.5f32.ln(), 0.5f32.ln()], [1, 1, 2]),
        &dev(),
    );
    let want = 0.75 * 1.5f32.ln() + 0.25 * 0.5f32.ln();
    close(&host(kl_full(p, q)), &[want], 1e-6);
}

#[test]
fn full_kl_without_distributions_is_a_config_error() {
    let g = TokenLogProbs {
        gathered: t2(&[-1.0], 1, 1),
        full: None,
    };
    let err = kl_penalty(KlPenalty::Full, &g, &g).unwrap_err();
    assert!(
        matches!(err, RlError::Config { ref field, .. } if field == "kl_penalty"),
        "{err}"
    );
}

#[test]
fn rewards_put_the_score_on_the_last_unmasked_token() {
    let mask = ResponseMask::from_lengths(&[3, 1], 3, &dev()).unwrap();
    let kls = t2(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3);
    let r = compute_rewards(t1(&[10.0, 20.0]), kls, &mask, 0.5).unwrap();
    close(
        &host(r.non_score_rewards),
        &[-0.5, -1.0, -1.5, -2.0, -2.5, -3.0],
        1e-7,
    );
    close(&host(r.rewards), &[-0.5, -1.0, 8.5, 18.0, -2.5, -3.0], 1e-6);
}

#[test]
fn empty_response_is_a_typed_error_naming_the_sample() {
    let mask = ResponseMask::from_lengths(&[2, 0], 2, &dev()).unwrap();
    let err = compute_rewards(t1(&[1.0, 1.0]), t2(&[0.0; 4], 2, 2), &mask, 0.1).unwrap_err();
    assert!(
        matches!(err, RlError::EmptyResponse { sample: 1, .. }),
        "{err}"
    );
}

#[test]
fn all_masked_batch_is_a_typed_error() {
    let mask = ResponseMask::from_lengths(&[0, 0], 2, &dev()).unwrap();
    let err = masked_mean("x", t2(&[1.0; 4], 2, 2), &mask).unwrap_err();
    assert!(
        matches!(
            err,
            RlError::TooFewTokens {
                needed: 1,
                found: 0,
                ..
            }
        ),
        "{err}"
    );
    let one = ResponseMask::from_lengths(&[1, 0], 2, &dev()).unwrap();
    let err = masked_var("x", t2(&[1.0; 4], 2, 2), &one, true).unwrap_err();
    assert!(
        matches!(
            err,
            RlError::TooFewTokens {
                needed: 2,
                found: 1,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn nan_score_and_nan_value_are_located() {
    let mask = ResponseMask::from_lengths(&[2, 2], 2, &dev()).unwrap();
    let err = compute_rewards(t1(&[1.0, f32::NAN]), t2(&[0.0; 4], 2, 2), &mask, 0.1).unwrap_err();
    match err {
        RlError::NonFinite { what, location, .. } => {
            assert_eq!(what, "scores");
            assert_eq!(location, "element 1");
        }
        other => panic!("{other}"),
    }
    let values = t2(&[0.0, 0.0, f32::INFINITY, 0.0], 2, 2);
    let err = compute_advantages(values, t2(&[0.0; 4], 2, 2), &mask, 1.0, 0.95, false).unwrap_err();
    match err {
        RlError::NonFinite {
            what,
            location,
            value,
        } => {
            assert_eq!(what, "values");
            assert_eq!(location, "sample 1, token 0");
            assert!(value.is_infinite());
        }
        other => panic!("{other}"),
    }
}

#[test]
fn gae_matches_a_hand_computation() {
    // One row of 3 tokens plus a padded 4th; γ = 0.9, λ = 0.8.
    let mask = ResponseMask::from_lengths(&[3], 4, &dev()).unwrap();
    let v = [0.5f32, 0.2, -0.1, 7.0];
    let r = [0.0f32, 0.0, 1.0, 5.0];
    let (g, l) = (0.9f32, 0.8f32);
    let vm = [v[0], v[1], v[2], 0.0];
    let d2 = r[2] - vm[2];
    let d1 = r[1] + g * vm[2] - vm[1];
    let d0 = r[0] + g * vm[1] - vm[0];
    let a2 = d2;
    let a1 = d1 + g * l * a2;
    let a0 = d0 + g * l * a1;
    let adv = compute_advantages(t2(&v, 1, 4), t2(&r, 1, 4), &mask, 0.9, 0.8, false).unwrap();
    close(&host(adv.values), &vm, 1e-7);
    close(
        &host(adv.returns),
        &[a0 + vm[0], a1 + vm[1], a2 + vm[2], 0.0],
        1e-6,
    );
    // Whitened over the 3 unmasked tokens, unbiased variance.
    let m = (a0 + a1 + a2) / 3.0;
    let var = ((a0 - m).powi(2) + (a1 - m).powi(2) + (a2 - m).powi(2)) / 2.0;
    let s = (var + 1e-8).sqrt();
    close(
        &host(adv.advantages),
        &[(a0 - m) / s, (a1 - m) / s, (a2 - m) / s, (0.0 - m) / s],
        1e-5,
    );
}

#[test]
fn unwhitened_advantages_are_the_raw_gae_and_keep_the_returns() {
    // Same row as above: with `whiten_advantages` off the advantages are A_t themselves (so
    // returns − values on the response) and the returns do not change.
    let mask = ResponseMask::from_lengths(&[3], 4, &dev()).unwrap();
    let (v, r) = ([0.5f32, 0.2, -0.1, 7.0], [0.0f32, 0.0, 1.0, 5.0]);
    let gae = |whiten_advantages| Gae {
        gamma: 0.9,
        lam: 0.8,
        whiten_rewards: false,
        whiten_advantages,
    };
    let run = |g: Gae| {
        compute_advantages_with(t2(&v, 1, 4), t2(&r, 1, 4), &mask, &g, &masked_whiten).unwrap()
    };
    let (raw, whitened) = (run(gae(false)), run(gae(true)));
    let (a0, a1, a2) = (
        (0.0 + 0.9 * 0.2 - 0.5) + 0.72 * ((0.0 + 0.9 * -0.1 - 0.2) + 0.72 * (1.0 + 0.1)),
        (0.0 + 0.9 * -0.1 - 0.2) + 0.72 * (1.0 + 0.1),
        1.0 + 0.1,
    );
    close(&host(raw.advantages), &[a0, a1, a2, 0.0], 1e-6);
    close(&host(raw.returns), &host(whitened.returns), 0.0);
    let by_trl = masked_whiten("adv", t2(&[a0, a1, a2, 0.0], 1, 4), &mask, true).unwrap();
    close(&host(whitened.advantages), &host(by_trl), 1e-6);
}

#[test]
fn zero_variance_advantages_fall_back_to_finite_zeros() {
    // Identical rows and a constant-advantage pattern: var = 0, TRL's +1e-8 keeps it finite.
    let mask = ResponseMask::from_lengths(&[2, 2], 2, &dev()).unwrap();
    let w = masked_whiten("adv", t2(&[0.25; 4], 2, 2), &mask, true).unwrap();
    for x in host(w) {
        assert!(x.is_finite() && x.abs() < 1e-2, "{x}");
    }
}

#[test]
fn whiten_shift_mean_false_keeps_the_mean() {
    let x = t2(&[1.0, 2.0, 3.0, 6.0], 2, 2);
    let w = host(whiten("x", x.clone(), false).unwrap());
    let mean: f32 = w.iter().sum::<f32>() / 4.0;
    assert!((mean - 3.0).abs() < 1e-5);
    let w0 = host(whiten("x", x, true).unwrap());
    let var: f32 = w0.iter().map(|v| v * v).sum::<f32>() / 3.0;
    assert!(
        (var - 1.0).abs() < 1e-4,
        "unit unbiased variance, got {var}"
    );
    let mask = ResponseMask::from_lengths(&[2, 2], 2, &dev()).unwrap();
    let mw = host(masked_whiten("x", t2(&[1.0, 2.0, 3.0, 6.0], 2, 2), &mask, true).unwrap());
    close(&mw, &w0, 1e-6);
}

fn loss_inputs(delta_logp: f32) -> (LossInputs, ResponseMask) {
    let mask = ResponseMask::from_lengths(&[2, 1], 2, &dev()).unwrap();
    let old = [-1.0f32, -2.0, -0.5, 0.0];
    let new: Vec<f32> = old.iter().map(|x| x + delta_logp).collect();
    let logits = Tensor::<3>::from_data(
        TensorData::new(
            vec![
                0.1f32, 0.2, 0.3, 0.0, 1.0, -1.0, 0.5, 0.5, 0.5, 0.2, 0.1, 0.0,
            ],
            [2, 2, 3],
        ),
        &dev(),
    );
    (
        LossInputs {
            old_logprobs: t2(&old, 2, 2),
            values: t2(&[0.1, 0.2, 0.3, 0.0], 2, 2),
            logits,
            vpreds: t2(&[0.5, 0.1, 0.3, 0.0], 2, 2),
            logprobs: t2(&new, 2, 2),
            advantages: t2(&[1.0, -1.0, 0.5, 0.0], 2, 2),
            returns: t2(&[0.2, 0.2, 0.2, 0.0], 2, 2),
        },
        mask,
    )
}

#[test]
fn loss_by_hand_at_ratio_one() {
    let (inp, mask) = loss_inputs(0.0);
    let out = ppo_loss(inp, &mask, &params()).unwrap();
    // ρ = 1: L_pg = mean(−Â) over the 3 tokens = −(1 − 1 + 0.5)/3.
    let pg = -(0.5f32) / 3.0;
    // V^clip = clip(V^new, V^old ± 0.2): 0.5→0.3, 0.1→0.1 (within 0.0..0.4), 0.3→0.3.
    let l1 = [
        (0.5f32 - 0.2).powi(2),
        (0.1f32 - 0.2).powi(2),
        (0.3f32 - 0.2).powi(2),
    ];
    let l2 = [
        (0.3f32 - 0.2).powi(2),
        (0.1f32 - 0.2).powi(2),
        (0.3f32 - 0.2).powi(2),
    ];
    let vf = 0.5 * (l1[0].max(l2[0]) + l1[1].max(l2[1]) + l1[2].max(l2[2])) / 3.0;
    assert!((out.stats.loss_policy - pg).abs() < 1e-6);
    assert!((out.stats.loss_value - vf).abs() < 1e-6);
    assert!((host(out.loss)[0] - (pg + 0.1 * vf)).abs() < 1e-6);
    assert_eq!(out.stats.policy_clipfrac, 0.0);
    assert!(out.stats.policy_approxkl.abs() < 1e-9);
    assert!((out.stats.policy_ratio_mean - 1.0).abs() < 1e-6);
    assert!(!out.skipped);
}

#[test]
fn ratio_threshold_zeroes_the_loss() {
    // ρ = e³ ≈ 20 > 10.
    let (inp, mask) = loss_inputs(3.0);
    let out = ppo_loss(inp, &mask, &params()).unwrap();
    assert!(out.skipped);
    assert_eq!(host(out.loss), vec![0.0]);
    assert_eq!(out.stats.loss_total, 0.0);
    assert!(out.stats.policy_ratio_mean > 10.0);
    assert!(out.stats.policy_clipfrac > 0.0);
}

#[test]
fn nan_logprobs_are_a_typed_error() {
    let (mut inp, mask) = loss_inputs(0.0);
    inp.logprobs = t2(&[-1.0, f32::NAN, -0.5, 0.0], 2, 2);
    let err = ppo_loss(inp, &mask, &params()).unwrap_err();
    assert!(
        matches!(err, RlError::NonFinite { ref what, ref location, .. } if what == "logprobs" && location == "sample 0, token 1"),
        "{err}"
    );
}

#[test]
fn nan_loss_from_nan_returns_is_a_typed_error() {
    let (mut inp, mask) = loss_inputs(0.0);
    inp.returns = t2(&[0.2, f32::NAN, 0.2, 0.0], 2, 2);
    let err = ppo_loss(inp, &mask, &params()).unwrap_err();
    assert!(
        matches!(err, RlError::NonFinite { ref what, .. } if what == "ppo/loss/total"),
        "{err}"
    );
}

#[test]
fn kl_controllers() {
    let mut a = KlController::Adaptive(AdaptiveKlController::new(0.2, 6.0, 10000.0));
    a.update(6.0, 256); // on target: unchanged
    assert!((a.value() - 0.2).abs() < 1e-15);
    a.update(1e9, 100); // clipped at +0.2
    assert!((a.value() - 0.2 * (1.0 + 0.2 * 100.0 / 10000.0)).abs() < 1e-12);
    let mut f = KlController::Fixed(FixedKlController::new(0.3));
    f.update(100.0, 256);
    assert_eq!(f.value(), 0.3);
}

#[test]
fn running_moments_equal_pooled_statistics() {
    let batches: Vec<Vec<f32>> = vec![
        vec![1.0, 2.0, 3.0],
        vec![-4.0, 0.5],
        vec![10.0, 11.0, 12.0, 13.0],
    ];
    let mut rm = RunningMoments::new();
    for b in &batches {
        rm.update(b).unwrap();
    }
    let all: Vec<f64> = batches.iter().flatten().map(|&x| f64::from(x)).collect();
    let n = all.len() as f64;
    let mean = all.iter().sum::<f64>() / n;
    let var_u = all.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    assert!((rm.mean - mean).abs() < 1e-9);
    assert!((rm.std - var_u.sqrt()).abs() < 1e-9);
    assert!((rm.count - n).abs() < 1e-9);
}

#[test]
fn score_scaling_semantics() {
    let xs = [1.0f32, 3.0];
    // Norm without scaling does nothing (TRL only looks at use_score_norm inside scaling).
    let mut rm = RunningMoments::new();
    assert_eq!(
        normalise_scores(&xs, &mut rm, false, true, None).unwrap(),
        xs.to_vec()
    );
    assert_eq!(rm, RunningMoments::new());
    // Scaling only divides by σ = std([1, 3]) = √2.
    let mut rm = RunningMoments::new();
    let s = normalise_scores(&xs, &mut rm, true, false, None).unwrap();
    let sd = 2f32.sqrt() + f32::EPSILON;
    close(&s, &[1.0 / sd, 3.0 / sd], 1e-6);
    // Norm also subtracts μ = 2; clipping comes last.
    let mut rm = RunningMoments::new();
    let s = normalise_scores(&xs, &mut rm, true, true, Some(0.5)).unwrap();
    close(&s, &[-0.5, 0.5], 1e-6);
    let err =
        normalise_scores(&[f32::NAN], &mut RunningMoments::new(), true, true, None).unwrap_err();
    assert!(matches!(err, RlError::NonFinite { .. }));
}

#[test]
fn config_validation_and_serde() {
    PpoConfig::default().validate().unwrap();
    PpoConfig::ppo_reference().validate().unwrap();
    let bad = PpoConfig {
        mini_batch_size: 512,
        ..PpoConfig::default()
    };
    assert!(
        matches!(bad.validate(), Err(RlError::Config { ref field, .. }) if field == "mini_batch_size")
    );
    for field in [
        "batch_size",
        "mini_batch_size",
        "gradient_accumulation_steps",
        "ppo_epochs",
    ] {
        let mut v = serde_json::to_value(PpoConfig::default()).unwrap();
        v[field] = 0.into();
        let c: PpoConfig = serde_json::from_value(v).unwrap();
        assert!(
            matches!(c.validate(), Err(RlError::Config { field: ref f, .. }) if f == field),
            "{field}"
        );
    }
    let indivisible = PpoConfig {
        batch_size: 10,
        mini_batch_size: 4,
        ..PpoConfig::default()
    };
    assert!(indivisible.validate().is_err());
    let c: PpoConfig =
        serde_json::from_str(r#"{"kl_penalty": "mse", "init_kl_coef": 0.1}"#).unwrap();
    assert_eq!(c.kl_penalty, KlPenalty::Mse);
    assert_eq!(c.ppo_epochs, 4);
    assert!(serde_json::from_str::<PpoConfig>(r#"{"kl_penalti": "mse"}"#).is_err());
    let d = PpoConfig::default();
    assert_eq!(
        (
            d.learning_rate,
            d.batch_size,
            d.ppo_epochs,
            d.target,
            d.horizon,
            d.lam,
            d.vf_coef
        ),
        (1.41e-5, 256, 4, 6.0, 10000.0, 0.95, 0.1)
    );
    assert_eq!(
        (d.adam_epsilon, d.adam_beta1, d.adam_beta2),
        (1e-8, 0.9, 0.999)
    );
}
