//! GRPO and RLOO arithmetic on hand-computed cases, the typed errors, and the configs' TRL
//! defaults. (Parity with TRL itself is `group_parity.rs`.)

use burn::tensor::{Device, Tensor, TensorData};
use lmrl_rl::RlError;
use lmrl_rl::group::{
    GroupConfig, GroupKind, GrpoConfig, GrpoLossInputs, GrpoLossParams, GrpoLossType, GrpoSettings,
    LossNormalisation, RlooConfig, RlooLossParams, RlooSettings, ScaleRewards, aggregate_loss,
    clipped_objective, grpo_advantages, grpo_loss, k3_kl, mask_truncated_completions,
    rloo_advantages, rloo_loss, rloo_rewards, rloo_sequence_kl, sequence_logps,
};
use lmrl_rl::ppo::ResponseMask;

fn dev() -> Device {
    Device::flex()
}

fn t1(x: &[f32], d: &Device) -> Tensor<1> {
    Tensor::from_data(TensorData::new(x.to_vec(), [x.len()]), d)
}

fn t2(rows: &[&[f32]], d: &Device) -> Tensor<2> {
    let t = rows[0].len();
    let flat: Vec<f32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_data(TensorData::new(flat, [rows.len(), t]), d)
}

fn v<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.try_into_vec_as::<f32>().expect("f32")
}

fn assert_all_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "length: got {got:?}, want {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol,
            "[{i}]: got {g}, want {w} (all: {got:?})"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// GRPO advantages
// ---------------------------------------------------------------------------------------------

#[test]
fn identical_rewards_give_zero_advantage_for_every_scaling() {
    let d = dev();
    let rewards = t1(&[0.7, 0.7, 0.7, 0.7, 1.0, 2.0, 3.0, 4.0], &d);
    for scale in [ScaleRewards::Group, ScaleRewards::Batch, ScaleRewards::None] {
        let out = grpo_advantages(rewards.clone(), 4, scale).expect("advantages");
        let a = v(out.advantages);
        assert_all_close(&a[..4], &[0.0; 4], 1e-6);
        assert!(a[4..].iter().all(|x| x.abs() > 0.1), "{scale:?}: {a:?}");
    }
    let out = grpo_advantages(rewards, 4, ScaleRewards::Group).expect("advantages");
    assert_all_close(&[out.stats.frac_reward_zero_std], &[0.5], 1e-7);
}

#[test]
fn group_scaling_divides_by_the_bessel_std_plus_1e_4() {
    let d = dev();
    // Group (1, 2, 3): mean 2, unbiased std 1.
    let out = grpo_advantages(t1(&[1.0, 2.0, 3.0], &d), 3, ScaleRewards::Group).expect("adv");
    let s = 1.0 / (1.0 + 1e-4);
    assert_all_close(&v(out.advantages), &[-s, 0.0, s], 1e-6);
    assert_all_close(&v(out.mean_grouped_rewards), &[2.0; 3], 1e-6);
    assert_all_close(&v(out.std_rewards), &[1.0; 3], 1e-6);
    assert_all_close(&[out.stats.reward, out.stats.reward_std], &[2.0, 1.0], 1e-6);
}

#[test]
fn batch_scaling_uses_the_group_mean_and_the_batch_std() {
    let d = dev();
    // Groups (1, 3) and (5, 7): means 2 and 6; the batch std is sqrt(20/3).
    let out = grpo_advantages(t1(&[1.0, 3.0, 5.0, 7.0], &d), 2, ScaleRewards::Batch).expect("adv");
    let s = 1.0 / ((20.0f32 / 3.0).sqrt() + 1e-4);
    assert_all_close(&v(out.advantages), &[-s, s, -s, s], 1e-6);
    assert_all_close(&v(out.mean_grouped_rewards), &[2.0, 2.0, 6.0, 6.0], 1e-6);
    // No scaling: centred rewards only (Dr. GRPO).
    let out = grpo_advantages(t1(&[1.0, 3.0, 5.0, 7.0], &d), 2, ScaleRewards::None).expect("adv");
    assert_all_close(&v(out.advantages), &[-1.0, 1.0, -1.0, 1.0], 1e-6);
    // ... while std_rewards is still the group std (TRL logs frac_reward_zero_std from it).
    assert_all_close(&v(out.std_rewards), &[2f32.sqrt(); 4], 1e-6);
}

#[test]
fn group_of_one_gives_zero_advantage_as_trl_eval() {
    let d = dev();
    let out = grpo_advantages(t1(&[1.0, 5.0], &d), 1, ScaleRewards::Group).expect("adv");
    assert_all_close(&v(out.advantages), &[0.0, 0.0], 0.0);
    let out = rloo_advantages(t1(&[1.0, 5.0], &d), 1, false).expect("adv");
    assert_all_close(&v(out.advantages), &[0.0, 0.0], 0.0);
}

// ---------------------------------------------------------------------------------------------
// RLOO
// ---------------------------------------------------------------------------------------------

#[test]
fn leave_one_out_with_two_samples_is_the_reward_difference() {
    let d = dev();
    // G = 2: the baseline of each is the other's reward.
    let out = rloo_advantages(t1(&[1.0, 3.0, 5.0, 5.0], &d), 2, false).expect("adv");
    assert_all_close(&v(out.baselines), &[3.0, 1.0, 5.0, 5.0], 1e-6);
    assert_all_close(&v(out.advantages), &[-2.0, 2.0, 0.0, 0.0], 1e-6);
}

#[test]
fn leave_one_out_is_k_over_k_minus_1_times_the_centred_reward() {
    let d = dev();
    let r = [0.5f32, -1.0, 2.0, 0.25];
    let out = rloo_advantages(t1(&r, &d), 4, false).expect("adv");
    let mean = r.iter().sum::<f32>() / 4.0;
    let want: Vec<f32> = r.iter().map(|x| 4.0 / 3.0 * (x - mean)).collect();
    assert_all_close(&v(out.advantages), &want, 1e-6);
    // Baseline of sample 0: mean of the other three.
    assert_all_close(&v(out.baselines)[..1], &[(-1.0 + 2.0 + 0.25) / 3.0], 1e-6);
    // Normalised: zero mean, unit (Bessel) std up to the 1e-4.
    let a = v(rloo_advantages(t1(&r, &d), 2, true)
        .expect("adv")
        .advantages);
    let m = a.iter().sum::<f32>() / 4.0;
    let var = a.iter().map(|x| (x - m).powi(2)).sum::<f32>() / 3.0;
    assert!(m.abs() < 1e-6 && (var.sqrt() - 1.0).abs() < 1e-3, "{a:?}");
}

#[test]
fn rloo_reward_is_clipped_then_penalised_by_the_summed_k1_kl() {
    let d = dev();
    let mask = ResponseMask::from_lengths(&[2, 1], 3, &d).expect("mask");
    let old = t2(&[&[-1.0, -2.0, -9.0], &[-0.5, -9.0, -9.0]], &d);
    let reference = t2(&[&[-1.5, -1.0, 0.0], &[-1.0, 0.0, 0.0]], &d);
    let kl = rloo_sequence_kl(old, reference, &mask).expect("kl");
    // Row 0: (−1 + 1.5) + (−2 + 1) = −0.5; row 1: 0.5. Token mean: (0.5 − 1 + 0.5) / 3 = 0.
    assert_all_close(&v(kl.kl.clone()), &[-0.5, 0.5], 1e-6);
    assert!(kl.mean_kl.abs() < 1e-6);
    let r = rloo_rewards(t1(&[3.0, -3.0], &d), Some(kl.kl), 0.1, Some((-1.0, 2.0))).expect("r");
    assert_all_close(&v(r), &[2.0 + 0.05, -1.0 - 0.05], 1e-6);
    // β = 0 needs no KL.
    let r = rloo_rewards(t1(&[3.0, -3.0], &d), None, 0.0, None).expect("r");
    assert_all_close(&v(r), &[3.0, -3.0], 0.0);
}

#[test]
fn rloo_loss_clips_the_sequence_ratio() {
    let d = dev();
    let mask = ResponseMask::from_lengths(&[2, 2, 1], 2, &d).expect("mask");
    // Sequence log-ratios: ln 1.5 (A > 0: clipped at 1.2), ln 0.5 (A < 0: clipped at 0.8), 0.
    let (a, b) = (1.5f32.ln(), 0.5f32.ln());
    let logps = t2(&[&[a, 0.0], &[0.0, b], &[0.0, 7.0]], &d);
    let old = t1(&[0.0, 0.0, 0.0], &d);
    let adv = t1(&[1.0, -1.0, 2.0], &d);
    let p = RlooLossParams {
        epsilon_low: 0.2,
        epsilon_high: 0.2,
    };
    let out = rloo_loss(logps, old, adv, &mask, &p).expect("loss");
    assert_all_close(&v(out.per_sequence_loss.clone()), &[-1.2, 0.8, -2.0], 1e-5);
    assert_all_close(&v(out.loss), &[(-1.2 + 0.8 - 2.0) / 3.0], 1e-5);
    let s = out.stats;
    assert_all_close(
        &[
            s.clip_ratio_low_mean,
            s.clip_ratio_high_mean,
            s.clip_ratio_region_mean,
            s.clip_ratio_low_min,
            s.clip_ratio_high_max,
        ],
        &[1.0 / 3.0, 1.0 / 3.0, 2.0 / 3.0, 0.0, 1.0],
        1e-6,
    );
}

// ---------------------------------------------------------------------------------------------
// GRPO loss
// ---------------------------------------------------------------------------------------------

#[test]
fn k3_is_zero_on_policy_and_matches_its_formula() {
    let d = dev();
    let kl = k3_kl(t2(&[&[-1.0, -0.3]], &d), t2(&[&[-2.0, -0.3]], &d));
    // d = ref − logp = −1: e^−1 + 1 − 1.
    assert_all_close(&v(kl), &[(-1.0f32).exp(), 0.0], 1e-6);
}

#[test]
fn clipped_objective_takes_the_pessimistic_side() {
    let d = dev();
    let ratio = t2(&[&[1.5, 0.5, 1.1], &[1.5, 0.5, 1.1]], &d);
    let out = clipped_objective(ratio, t1(&[1.0, -1.0], &d), 0.2, 0.28);
    // A > 0: −min(ρ, clip ρ); A < 0: −min(−ρ, −clip ρ) = max(ρ, clip ρ).
    assert_all_close(&v(out), &[-1.28, -0.5, -1.1, 1.5, 0.8, 1.1], 1e-6);
}

#[test]
fn the_four_normalisations() {
    let d = dev();
    let mask = ResponseMask::from_lengths(&[1, 3], 4, &d).expect("mask");
    // Masked positions hold garbage that must not count.
    let l = t2(&[&[2.0, 100.0, 100.0, 100.0], &[1.0, 1.0, 1.0, 100.0]], &d);
    let agg = |n| v(aggregate_loss(l.clone(), &mask, n).expect("loss"))[0];
    assert!((agg(LossNormalisation::Sequence) - 1.5).abs() < 1e-6); // (2/1 + 3/3) / 2
    assert!((agg(LossNormalisation::Token) - 1.25).abs() < 1e-6); // 5 / 4
    let dr = LossNormalisation::DrGrpo {
        max_completion_length: 5,
    };
    assert!((agg(dr) - 0.5).abs() < 1e-6); // 5 / (2·5)
    let dapo = LossNormalisation::dapo(10, 1, 1, 1);
    assert!((agg(dapo) - 0.5).abs() < 1e-6); // 5 / 10
    assert_eq!(
        LossNormalisation::dapo(51, 2, 4, 2),
        LossNormalisation::GlobalToken { normalizer: 51.0 }
    );
    // A completion without tokens counts as 0 in "grpo" (TRL clamps its length to 1).
    let mask = ResponseMask::from_lengths(&[0, 2], 4, &d).expect("mask");
    assert!(
        (v(aggregate_loss(l, &mask, LossNormalisation::Sequence).expect("l"))[0] - 0.5).abs()
            < 1e-6
    );
}

#[test]
fn on_policy_grpo_loss_and_gradient() {
    let d = Device::flex().autodiff();
    let mask = ResponseMask::from_lengths(&[2, 1], 2, &d).expect("mask");
    let logps = t2(&[&[-1.0, -2.0], &[-0.5, -3.0]], &d).require_grad();
    let adv = [0.5f32, -1.0];
    let p = GrpoLossParams {
        epsilon_low: 0.2,
        epsilon_high: 0.2,
        beta: 0.0,
        use_bias_correction_kl: true,
        normalisation: LossNormalisation::Token,
    };
    let out = grpo_loss(
        GrpoLossInputs {
            logps: logps.clone(),
            old_logps: None,
            ref_logps: None,
            advantages: t1(&adv, &d),
        },
        &mask,
        &p,
    )
    .expect("loss");
    // ρ = 1 everywhere: loss = −Σ m Â / Σ m = −(0.5 + 0.5 − 1) / 3 = 0.
    assert!(v(out.loss.clone().detach())[0].abs() < 1e-6);
    assert!(out.per_token_kl.is_none() && out.stats.kl.is_none());
    // d loss / d ℓ_t = −m_t Â_i / Σ m (the ratio's gradient is 1 on policy).
    let g = logps.grad(&out.loss.backward()).expect("grad");
    assert_all_close(&v(g), &[-0.5 / 3.0, -0.5 / 3.0, 1.0 / 3.0, 0.0], 1e-6);
}

#[test]
fn grpo_kl_term_and_bias_correction() {
    let d = dev();
    let mask = ResponseMask::from_lengths(&[1], 1, &d).expect("mask");
    let (logp, old, reference) = (-1.0f32, -1.1f32, -2.0f32);
    let rho = (logp - old).exp();
    let k3 = (reference - logp).exp() - (reference - logp) - 1.0;
    for bias in [false, true] {
        let p = GrpoLossParams {
            epsilon_low: 0.2,
            epsilon_high: 0.2,
            beta: 0.5,
            use_bias_correction_kl: bias,
            normalisation: LossNormalisation::Sequence,
        };
        let out = grpo_loss(
            GrpoLossInputs {
                logps: t2(&[&[logp]], &d),
                old_logps: Some(t2(&[&[old]], &d)),
                ref_logps: Some(t2(&[&[reference]], &d)),
                advantages: t1(&[0.0], &d),
            },
            &mask,
            &p,
        )
        .expect("loss");
        let kl = if bias { k3 * rho } else { k3 };
        assert_all_close(&v(out.loss), &[0.5 * kl], 1e-6);
        assert!((out.stats.kl.expect("kl") - kl).abs() < 1e-6);
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

#[test]
fn group_size_must_divide_the_batch() {
    let d = dev();
    let r = t1(&[1.0, 2.0, 3.0, 4.0, 5.0], &d);
    for g in [0, 2, 3] {
        assert!(matches!(
            grpo_advantages(r.clone(), g, ScaleRewards::Group),
            Err(RlError::Config { .. })
        ));
        assert!(matches!(
            rloo_advantages(r.clone(), g, false),
            Err(RlError::Config { .. })
        ));
    }
    assert!(matches!(
        grpo_advantages(t1(&[], &d), 2, ScaleRewards::Group),
        Err(RlError::Config { .. })
    ));
}

#[test]
fn non_finite_inputs_are_typed_errors() {
    let d = dev();
    let r = t1(&[1.0, f32::NAN], &d);
    assert!(matches!(
        grpo_advantages(r.clone(), 2, ScaleRewards::Group),
        Err(RlError::NonFinite { .. })
    ));
    assert!(matches!(
        rloo_advantages(r.clone(), 2, false),
        Err(RlError::NonFinite { .. })
    ));
    assert!(matches!(
        rloo_rewards(r, None, 0.0, None),
        Err(RlError::NonFinite { .. })
    ));
    let mask = ResponseMask::from_lengths(&[2, 2], 2, &d).expect("mask");
    let p = GrpoConfig::default().loss_params(4);
    let err = grpo_loss(
        GrpoLossInputs {
            logps: t2(&[&[-1.0, f32::INFINITY], &[-1.0, -1.0]], &d),
            old_logps: None,
            ref_logps: None,
            advantages: t1(&[1.0, -1.0], &d),
        },
        &mask,
        &p,
    );
    match err {
        Err(RlError::NonFinite { what, location, .. }) => {
            assert_eq!(what, "logps");
            assert_eq!(location, "sample 0, token 1");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn shape_mismatches_and_missing_reference_are_typed_errors() {
    let d = dev();
    let mask = ResponseMask::from_lengths(&[2, 2], 2, &d).expect("mask");
    let logps = t2(&[&[-1.0, -1.0], &[-1.0, -1.0]], &d);
    let p = GrpoConfig::default().loss_params(4);
    let bad = grpo_loss(
        GrpoLossInputs {
            logps: logps.clone(),
            old_logps: None,
            ref_logps: None,
            advantages: t1(&[1.0, -1.0, 0.0], &d),
        },
        &mask,
        &p,
    );
    assert!(matches!(bad, Err(RlError::Shape { .. })), "{bad:?}");
    let bad = grpo_loss(
        GrpoLossInputs {
            logps: t2(&[&[-1.0, -1.0, -1.0], &[-1.0, -1.0, -1.0]], &d),
            old_logps: None,
            ref_logps: None,
            advantages: t1(&[1.0, -1.0], &d),
        },
        &mask,
        &p,
    );
    assert!(matches!(bad, Err(RlError::Shape { .. })), "{bad:?}");
    let with_kl = GrpoConfig {
        beta: 0.04,
        ..GrpoConfig::default()
    }
    .loss_params(4);
    let bad = grpo_loss(
        GrpoLossInputs {
            logps: logps.clone(),
            old_logps: None,
            ref_logps: None,
            advantages: t1(&[1.0, -1.0], &d),
        },
        &mask,
        &with_kl,
    );
    assert!(matches!(bad, Err(RlError::Config { .. })), "{bad:?}");
    assert!(matches!(
        rloo_rewards(t1(&[1.0, 2.0], &d), None, 0.05, None),
        Err(RlError::Config { .. })
    ));
    assert!(matches!(
        sequence_logps(t2(&[&[-1.0]], &d), &mask),
        Err(RlError::Shape { .. })
    ));
    let p = RlooConfig::default().loss_params();
    assert!(matches!(
        rloo_loss(logps, t1(&[0.0], &d), t1(&[1.0, 1.0], &d), &mask, &p),
        Err(RlError::Shape { .. })
    ));
}

#[test]
fn truncated_completions_are_masked_out() {
    let d = dev();
    let mask = ResponseMask::from_lengths(&[2, 3, 1], 3, &d).expect("mask");
    let m = mask_truncated_completions(&mask, &[false, true, false], &d).expect("mask");
    assert_eq!(m.host(), &[1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]);
    assert!(matches!(
        mask_truncated_completions(&mask, &[true], &d),
        Err(RlError::Shape { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Configs
// ---------------------------------------------------------------------------------------------

#[test]
fn configs_default_to_trl_1_16() {
    let g = GrpoConfig::default();
    assert_eq!(g.num_generations, 8);
    assert_eq!(g.max_completion_length, 512);
    assert_eq!(g.beta, 0.0);
    assert_eq!(g.epsilon, 0.2);
    assert_eq!(g.epsilon_high(), 0.2);
    assert_eq!(g.kind.loss_type, GrpoLossType::Dapo);
    assert_eq!(g.kind.scale_rewards, ScaleRewards::Group);
    assert!(g.kind.use_bias_correction_kl);
    assert_eq!(g.learning_rate, 1e-6);
    g.validate().expect("default is valid");
    let r = RlooConfig::default();
    assert_eq!(r.num_generations, 2);
    assert_eq!(r.beta, 0.05);
    assert!(!r.kind.normalize_advantages);
    assert_eq!(r.kind.reward_clip_range, None);
    r.validate().expect("default is valid");
}

#[test]
fn configs_parse_trl_names_and_reject_bad_values() {
    let g: GrpoConfig = serde_json::from_str(
        r#"{"loss_type": "dr_grpo", "scale_rewards": "none", "epsilon_high": 0.28, "beta": 0.001}"#,
    )
    .expect("parse");
    assert_eq!(g.kind.loss_type, GrpoLossType::DrGrpo);
    assert_eq!(g.kind.scale_rewards, ScaleRewards::None);
    assert_eq!(g.epsilon_high(), 0.28);
    assert_eq!(
        g.normalisation(100),
        LossNormalisation::DrGrpo {
            max_completion_length: 512
        }
    );
    assert!(serde_json::from_str::<GrpoConfig>(r#"{"loss_typ": "grpo"}"#).is_err());
    let back: GrpoConfig =
        serde_json::from_str(&serde_json::to_string(&g).expect("ser")).expect("de");
    assert_eq!(back, g);
    for bad in [
        GrpoConfig {
            num_generations: 1,
            ..GrpoConfig::default()
        },
        GrpoConfig {
            epsilon: 1.0,
            ..GrpoConfig::default()
        },
        GrpoConfig {
            beta: -0.1,
            ..GrpoConfig::default()
        },
    ] {
        assert!(matches!(bad.validate(), Err(RlError::Config { .. })));
    }
    let r: RlooConfig =
        serde_json::from_str(r#"{"num_generations": 4, "reward_clip_range": [-1.0, 1.0]}"#)
            .expect("parse");
    assert_eq!(r.kind.reward_clip_range, Some((-1.0, 1.0)));
    let bad = RlooConfig {
        kind: RlooSettings {
            reward_clip_range: Some((1.0, -1.0)),
            ..RlooSettings::default()
        },
        ..RlooConfig::default()
    };
    assert!(matches!(bad.validate(), Err(RlError::Config { .. })));
}

/// Every `config.toml` below `dir`, at any depth.
fn config_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            config_files(&path, out);
        } else if path.file_name().is_some_and(|n| n == "config.toml") {
            out.push(path);
        }
    }
}

/// A committed `[grpo]` or `[rloo]` table read into the shared config: every key it names is
/// written back, and the written table reads back equal.
fn section_round_trips<K: GroupKind>(file: &std::path::Path, t: &toml::Table) {
    let c: GroupConfig<K> = t
        .clone()
        .try_into()
        .unwrap_or_else(|e| panic!("{file:?} [{}]: {e}", K::SECTION));
    let back = toml::Table::try_from(&c).expect("serialise");
    for k in t.keys() {
        assert!(back.contains_key(k), "{file:?} [{}] {k}", K::SECTION);
    }
    let again: GroupConfig<K> = back.try_into().expect("read back");
    assert_eq!(again, c, "{file:?}");
}

/// The `[grpo]` and `[rloo]` sections of the run configs committed under docs/results/data
/// still read, and round-trip.
#[test]
fn committed_run_configs_parse_and_round_trip() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/results/data");
    let mut files = Vec::new();
    config_files(&root, &mut files);
    let mut sections = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read config");
        let table: toml::Table = text.parse().expect("toml");
        if let Some(t) = table.get("grpo").and_then(toml::Value::as_table) {
            section_round_trips::<GrpoSettings>(file, t);
            sections += 1;
        }
        if let Some(t) = table.get("rloo").and_then(toml::Value::as_table) {
            section_round_trips::<RlooSettings>(file, t);
            sections += 1;
        }
    }
    assert!(
        sections >= 2,
        "{sections} sections in {} files",
        files.len()
    );
    // A default RLOO config (no reward clip range) writes a table without the key and reads
    // back equal.
    let text = toml::to_string(&RlooConfig::default()).expect("serialise");
    assert!(!text.contains("reward_clip_range"), "{text}");
    assert_eq!(
        toml::from_str::<RlooConfig>(&text).expect("parse"),
        RlooConfig::default()
    );
    assert!(toml::from_str::<RlooConfig>("normalise_advantages = true").is_err());
}
