//! Parity with TRL 1.16's own GRPO and RLOO arithmetic on
//! `tests/fixtures/group-trl/expected.json` (made by `make_fixture.py` beside it from real
//! `GRPOTrainer` / `RLOOTrainer` instances): advantages for every `scale_rewards`, ratios, k3 KL,
//! per-token loss, the loss of every `loss_type`, its gradient with respect to the policy's
//! log-probabilities, the logged statistics, and RLOO's KL-penalised rewards, leave-one-out
//! baselines, advantages, sequence ratios and loss — every quantity within 1e-5. Each case's
//! settings are read from the fixture. Run with `--nocapture` to see the max |diff| of each.

use std::path::PathBuf;

use burn::tensor::{Device, Tensor, TensorData};
use lmrl_rl::group::{
    GrpoConfig, GrpoLossInputs, GrpoLossType, GrpoSettings, RlooConfig, RlooSettings, ScaleRewards,
    grpo_advantages, grpo_loss, k3_kl, rloo_advantages, rloo_loss, rloo_rewards, rloo_sequence_kl,
    sequence_logps,
};
use lmrl_rl::ppo::ResponseMask;
use serde_json::Value;

mod common;

const TOL: f64 = 1e-5;

fn fixture() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/group-trl/expected.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("fixture is JSON")
}

fn flat(v: &Value, out: &mut Vec<f32>, dims: &mut Vec<usize>, depth: usize) {
    match v {
        Value::Array(a) => {
            if dims.len() == depth {
                dims.push(a.len());
            }
            for x in a {
                flat(x, out, dims, depth + 1);
            }
        }
        Value::Number(n) => out.push(n.as_f64().expect("number") as f32),
        other => panic!("unexpected {other}"),
    }
}

fn array(v: &Value) -> (Vec<f32>, Vec<usize>) {
    let (mut out, mut dims) = (Vec::new(), Vec::new());
    flat(v, &mut out, &mut dims, 0);
    (out, dims)
}

fn t1(v: &Value, d: &Device) -> Tensor<1> {
    let (x, dims) = array(v);
    Tensor::from_data(TensorData::new(x, [dims[0]]), d)
}

fn t2(v: &Value, d: &Device) -> Tensor<2> {
    let (x, dims) = array(v);
    Tensor::from_data(TensorData::new(x, [dims[0], dims[1]]), d)
}

/// Checks `got` against TRL element-wise, prints and returns the max |diff|.
fn close_vec(what: &str, got: &[f32], want: &Value) -> f64 {
    let (want, _) = array(want);
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut max_err = 0.0f64;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let err = (f64::from(*g) - f64::from(*w)).abs();
        assert!(err <= TOL, "{what}[{i}]: got {g}, TRL {w}, |diff| {err:e}");
        max_err = max_err.max(err);
    }
    eprintln!("{what}: max |diff| {max_err:.2e} over {} values", got.len());
    max_err
}

fn close<const D: usize>(what: &str, got: Tensor<D>, want: &Value) -> f64 {
    let got = got.try_into_vec_as::<f32>().expect("f32");
    close_vec(what, &got, want)
}

fn close_scalar(what: &str, got: f64, want: &Value) -> f64 {
    let want = want
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: no number in the fixture"));
    let err = (got - want).abs();
    assert!(err <= TOL, "{what}: got {got}, TRL {want}, |diff| {err:e}");
    eprintln!("{what}: |diff| {err:.2e}");
    err
}

struct Inputs {
    mask: ResponseMask,
    group_size: usize,
}

fn inputs(fx: &Value, device: &Device) -> Inputs {
    let inp = &fx["inputs"];
    let (m, dims) = array(&inp["completion_mask"]);
    let mask = ResponseMask::from_host(m, dims[0], dims[1], device).expect("mask");
    let group_size = inp["num_generations"].as_u64().expect("num_generations") as usize;
    Inputs { mask, group_size }
}

fn scale_of(s: &Value) -> ScaleRewards {
    serde_json::from_value(s.clone()).expect("scale_rewards")
}

#[test]
fn grpo_advantages_match_trl() {
    let fx = fixture();
    let device = common::backend_device();
    let inp = inputs(&fx, &device);
    let rewards = t1(&fx["inputs"]["rewards"], &device);
    let cases = fx["grpo_advantages"].as_array().expect("grpo_advantages");
    assert_eq!(cases.len(), 3, "group, batch and none");
    for c in cases {
        let scale = scale_of(&c["scale_rewards"]);
        let tag = format!("grpo[scale_rewards={}]", c["scale_rewards"]);
        let out = grpo_advantages(rewards.clone(), inp.group_size, scale).expect("advantages");
        close(
            &format!("{tag} mean_grouped_rewards"),
            out.mean_grouped_rewards,
            &c["mean_grouped_rewards"],
        );
        close(
            &format!("{tag} std_rewards"),
            out.std_rewards,
            &c["std_rewards"],
        );
        close(
            &format!("{tag} advantages"),
            out.advantages,
            &c["advantages"],
        );
        let m = &c["metrics"];
        close_scalar(
            &format!("{tag} reward"),
            out.stats.reward.into(),
            &m["reward"],
        );
        close_scalar(
            &format!("{tag} reward_std"),
            out.stats.reward_std.into(),
            &m["reward_std"],
        );
        close_scalar(
            &format!("{tag} frac_reward_zero_std"),
            out.stats.frac_reward_zero_std.into(),
            &m["frac_reward_zero_std"],
        );
    }
}

fn grpo_config(s: &Value) -> GrpoConfig {
    let loss_type: GrpoLossType =
        serde_json::from_value(s["loss_type"].clone()).expect("loss_type");
    assert_eq!(s["importance_sampling_level"], "token");
    GrpoConfig {
        num_generations: s["num_generations"].as_u64().expect("G") as usize,
        max_completion_length: s["max_completion_length"].as_u64().expect("max") as usize,
        beta: s["beta"].as_f64().expect("beta"),
        epsilon: s["epsilon"].as_f64().expect("epsilon"),
        epsilon_high: s["epsilon_high"].as_f64(),
        kind: GrpoSettings {
            scale_rewards: scale_of(&s["scale_rewards"]),
            loss_type,
            use_bias_correction_kl: s["use_bias_correction_kl"].as_bool().expect("bool"),
        },
        // The fixture's one group is one micro-batch and one Adam step (the loop sizes do not
        // enter the loss; they only have to describe a whole step).
        prompts_per_step: 1,
        mini_batch_size: s["num_generations"].as_u64().expect("G") as usize,
        gradient_accumulation_steps: 1,
        ..GrpoConfig::default()
    }
}

#[test]
fn grpo_loss_matches_trl_for_every_loss_type() {
    let fx = fixture();
    let device = common::backend_device().autodiff();
    let inp = inputs(&fx, &device);
    let fi = &fx["inputs"];
    let cases = fx["grpo_loss"].as_array().expect("grpo_loss");
    let mut seen = Vec::new();
    for c in cases {
        let name = c["name"].as_str().expect("name");
        let cfg = grpo_config(&c["settings"]);
        cfg.validate().expect("fixture config is valid");
        seen.push(cfg.kind.loss_type);
        let tag = format!("grpo[{name}]");

        // Advantages from the rewards, as TRL's scoring pass does.
        let adv = grpo_advantages(
            t1(&fi["rewards"], &device),
            inp.group_size,
            cfg.kind.scale_rewards,
        )
        .expect("advantages");
        close(
            &format!("{tag} advantages"),
            adv.advantages.clone(),
            &c["advantages"],
        );
        let num_items = inp.mask.total();
        close_scalar(
            &format!("{tag} num_items_in_batch"),
            num_items as f64,
            &c["num_items_in_batch"],
        );

        let logps = t2(&fi["new_logps"], &device).require_grad();
        let out = grpo_loss(
            GrpoLossInputs {
                logps: logps.clone(),
                old_logps: Some(t2(&fi["old_logps"], &device)),
                ref_logps: Some(t2(&fi["ref_logps"], &device)),
                advantages: adv.advantages,
            },
            &inp.mask,
            &cfg.loss_params(num_items),
        )
        .expect("loss");
        close(
            &format!("{tag} ratio"),
            out.ratio.clone().detach(),
            &c["ratio"],
        );
        match (&out.per_token_kl, c["per_token_kl"].is_null()) {
            (Some(kl), false) => {
                close(
                    &format!("{tag} per_token_kl"),
                    kl.clone().detach(),
                    &c["per_token_kl"],
                );
            }
            (None, true) => {}
            _ => panic!("{tag}: KL present in one of Rust and TRL only"),
        }
        close(
            &format!("{tag} per_token_loss"),
            out.per_token_loss.clone().detach(),
            &c["per_token_loss"],
        );
        close_scalar(
            &format!("{tag} loss"),
            f64::from(out.loss.clone().detach().into_scalar::<f32>()),
            &c["loss"],
        );
        let grads = out.loss.backward();
        let g = logps.grad(&grads).expect("gradient of the log-probs");
        close(&format!("{tag} d loss / d logps"), g, &c["grad_new_logps"]);

        let m = &c["metrics"];
        let s = out.stats;
        match s.kl {
            Some(kl) => {
                close_scalar(&format!("{tag} kl"), kl.into(), &m["kl"]);
            }
            None => assert!(m.get("kl").is_none(), "{tag}: TRL logged a KL"),
        }
        close_scalar(
            &format!("{tag} clip_ratio/low_mean"),
            s.clip_ratio_low_mean.into(),
            &m["clip_ratio/low_mean"],
        );
        close_scalar(
            &format!("{tag} clip_ratio/high_mean"),
            s.clip_ratio_high_mean.into(),
            &m["clip_ratio/high_mean"],
        );
        close_scalar(
            &format!("{tag} clip_ratio/region_mean"),
            s.clip_ratio_region_mean.into(),
            &m["clip_ratio/region_mean"],
        );
        close_scalar(
            &format!("{tag} clip_ratio/low_min"),
            s.clip_ratio_low_min.into(),
            &m["clip_ratio/low_min"],
        );
        close_scalar(
            &format!("{tag} clip_ratio/high_max"),
            s.clip_ratio_high_max.into(),
            &m["clip_ratio/high_max"],
        );
    }
    for lt in [
        GrpoLossType::Grpo,
        GrpoLossType::Bnpo,
        GrpoLossType::DrGrpo,
        GrpoLossType::Dapo,
    ] {
        assert!(seen.contains(&lt), "the fixture has no {lt:?} case");
    }
}

#[test]
fn k3_kl_matches_trl_without_bias_correction() {
    let fx = fixture();
    let device = common::backend_device();
    let fi = &fx["inputs"];
    let case = fx["grpo_loss"]
        .as_array()
        .expect("grpo_loss")
        .iter()
        .find(|c| c["settings"]["use_bias_correction_kl"] == false && !c["per_token_kl"].is_null())
        .expect("a case with the plain k3 KL");
    let kl = k3_kl(t2(&fi["new_logps"], &device), t2(&fi["ref_logps"], &device));
    close("k3 per_token_kl", kl, &case["per_token_kl"]);
}

fn rloo_config(s: &Value) -> RlooConfig {
    RlooConfig {
        num_generations: s["num_generations"].as_u64().expect("G") as usize,
        beta: s["beta"].as_f64().expect("beta"),
        epsilon: s["epsilon"].as_f64().expect("epsilon"),
        epsilon_high: s["epsilon_high"].as_f64(),
        kind: RlooSettings {
            normalize_advantages: s["normalize_advantages"].as_bool().expect("bool"),
            reward_clip_range: serde_json::from_value(s["reward_clip_range"].clone())
                .expect("reward_clip_range"),
        },
        ..RlooConfig::default()
    }
}

#[test]
fn rloo_matches_trl() {
    let fx = fixture();
    let device = common::backend_device().autodiff();
    let inp = inputs(&fx, &device);
    let fi = &fx["inputs"];
    let cases = fx["rloo"].as_array().expect("rloo");
    assert!(cases.len() >= 2);
    for c in cases {
        let name = c["name"].as_str().expect("name");
        let cfg = rloo_config(&c["settings"]);
        cfg.validate().expect("fixture config is valid");
        let tag = format!("rloo[{name}]");

        let old = t2(&fi["old_logps"], &device);
        let kl =
            rloo_sequence_kl(old.clone(), t2(&fi["ref_logps"], &device), &inp.mask).expect("kl");
        if cfg.beta != 0.0 {
            close(
                &format!("{tag} per_token_kl"),
                kl.per_token_kl.clone(),
                &c["per_token_kl"],
            );
            close(&format!("{tag} kl"), kl.kl.clone(), &c["kl"]);
            close_scalar(
                &format!("{tag} mean kl"),
                kl.mean_kl.into(),
                &c["metrics"]["kl"],
            );
        }
        let rewards = rloo_rewards(
            t1(&fi["rewards"], &device),
            Some(kl.kl),
            cfg.beta,
            cfg.kind.reward_clip_range,
        )
        .expect("rewards");
        close(&format!("{tag} rewards"), rewards.clone(), &c["rewards"]);
        let adv = rloo_advantages(rewards, cfg.num_generations, cfg.kind.normalize_advantages)
            .expect("advantages");
        close(&format!("{tag} baselines"), adv.baselines, &c["baselines"]);
        close(
            &format!("{tag} advantages"),
            adv.advantages.clone(),
            &c["advantages"],
        );
        let old_seq = sequence_logps(old, &inp.mask).expect("old logps");
        close(
            &format!("{tag} old_logps"),
            old_seq.clone(),
            &c["old_logps"],
        );

        let logps = t2(&fi["rloo_new_logps"], &device).require_grad();
        let out = rloo_loss(
            logps.clone(),
            old_seq,
            adv.advantages,
            &inp.mask,
            &cfg.loss_params(),
        )
        .expect("loss");
        close(
            &format!("{tag} logps"),
            out.logps.clone().detach(),
            &c["logps"],
        );
        close(
            &format!("{tag} ratio"),
            out.ratio.clone().detach(),
            &c["ratio"],
        );
        close(
            &format!("{tag} per_sequence_loss"),
            out.per_sequence_loss.clone().detach(),
            &c["per_sequence_loss"],
        );
        close_scalar(
            &format!("{tag} loss"),
            f64::from(out.loss.clone().detach().into_scalar::<f32>()),
            &c["loss"],
        );
        let grads = out.loss.backward();
        let g = logps.grad(&grads).expect("gradient of the log-probs");
        close(&format!("{tag} d loss / d logps"), g, &c["grad_new_logps"]);

        let m = &c["metrics"];
        let s = out.stats;
        for (k, v) in [
            ("clip_ratio/low_mean", s.clip_ratio_low_mean),
            ("clip_ratio/high_mean", s.clip_ratio_high_mean),
            ("clip_ratio/region_mean", s.clip_ratio_region_mean),
            ("clip_ratio/low_min", s.clip_ratio_low_min),
            ("clip_ratio/high_max", s.clip_ratio_high_max),
        ] {
            close_scalar(&format!("{tag} {k}"), v.into(), &m[k]);
        }
    }
}
