//! Parity with TRL 0.11's own PPO arithmetic on `tests/fixtures/ppo-trl/expected.json`
//! (`compute_rewards`, `compute_advantages`, `loss`, `AdaptiveKLController`, `RunningMoments`),
//! every quantity within 1e-5. Every setting is read from the fixture's `config` block, so the
//! same test runs on any fixture made the same way (e.g. another `kl_penalty`).

use std::path::PathBuf;

use burn::tensor::{Device, Int, Tensor, TensorData, activation::log_softmax};
use lmrl_rl::PpoConfig;
use lmrl_rl::ppo::{
    AdaptiveKlController, LossInputs, ResponseMask, RunningMoments, TokenLogProbs,
    compute_advantages, compute_rewards, gather_logprobs, kl_penalty, normalise_scores, ppo_loss,
};
use serde_json::Value;

mod common;

const TOL: f64 = 1e-5;

fn fixture() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/ppo-trl/expected.json");
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
fn t3(v: &Value, d: &Device) -> Tensor<3> {
    let (x, dims) = array(v);
    Tensor::from_data(TensorData::new(x, [dims[0], dims[1], dims[2]]), d)
}
fn ids(v: &Value, d: &Device) -> Tensor<2, Int> {
    let (x, dims) = array(v);
    let x: Vec<i64> = x.iter().map(|&f| f as i64).collect();
    Tensor::from_data(TensorData::new(x, [dims[0], dims[1]]), d)
}

fn assert_close<const D: usize>(what: &str, got: Tensor<D>, want: &Value) {
    let got = got.try_into_vec_as::<f32>().expect("f32");
    let (want, _) = array(want);
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut max_err = 0.0f64;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let err = (f64::from(*g) - f64::from(*w)).abs();
        assert!(err <= TOL, "{what}[{i}]: got {g}, TRL {w}, |diff| {err:e}");
        max_err = max_err.max(err);
    }
    eprintln!("{what}: max |diff| {max_err:.2e} over {} values", got.len());
}

fn assert_scalar(what: &str, got: f64, want: &Value) {
    let want = want.as_f64().expect("number");
    let err = (got - want).abs();
    assert!(err <= TOL, "{what}: got {got}, TRL {want}, |diff| {err:e}");
    eprintln!("{what}: |diff| {err:.2e}");
}

#[test]
fn trl_parity_rewards_advantages_loss() {
    let fx = fixture();
    let device = common::backend_device();
    let cfg: PpoConfig = serde_json::from_value(fx["config"].clone())
        .expect("the fixture's config block deserialises into PpoConfig");
    cfg.validate().expect("fixture config is valid");
    let inp = &fx["inputs"];

    let (mask_host, mdims) = array(&inp["mask"]);
    let mask = ResponseMask::from_host(mask_host, mdims[0], mdims[1], &device).expect("mask");
    let response_ids = ids(&inp["response_ids"], &device);

    // Rollout policy and reference: log-softmax, gathered log-probs.
    let lsm = log_softmax(t3(&inp["logits"], &device), 2);
    let ref_lsm = log_softmax(t3(&inp["ref_logits"], &device), 2);
    let policy = TokenLogProbs {
        gathered: gather_logprobs(lsm.clone(), response_ids.clone()),
        full: Some(lsm),
    };
    let reference = TokenLogProbs {
        gathered: gather_logprobs(ref_lsm.clone(), response_ids.clone()),
        full: Some(ref_lsm),
    };

    // compute_rewards
    let kls = kl_penalty(cfg.kl_penalty, &policy, &reference).expect("kl");
    let shaped = compute_rewards(t1(&inp["scores"], &device), kls, &mask, cfg.init_kl_coef)
        .expect("rewards");
    let cr = &fx["compute_rewards"];
    assert_close("kls", shaped.kls.clone(), &cr["kls"]);
    assert_close(
        "non_score_rewards",
        shaped.non_score_rewards.clone(),
        &cr["non_score_rewards"],
    );
    assert_close("rewards", shaped.rewards.clone(), &cr["rewards"]);

    // compute_advantages
    let adv = compute_advantages(
        t2(&inp["values"], &device),
        shaped.rewards,
        &mask,
        cfg.gamma,
        cfg.lam,
        cfg.whiten_rewards,
    )
    .expect("advantages");
    let ca = &fx["compute_advantages"];
    assert_close("values", adv.values.clone(), &ca["values"]);
    assert_close("advantages", adv.advantages.clone(), &ca["advantages"]);
    assert_close("returns", adv.returns.clone(), &ca["returns"]);

    // loss: the new policy's logits and values against the rollout's.
    let new_logits = t3(&inp["new_logits"], &device);
    let new_lsm = log_softmax(new_logits.clone(), 2);
    let out = ppo_loss(
        LossInputs {
            old_logprobs: policy.gathered,
            values: adv.values,
            logits: new_logits,
            vpreds: t2(&inp["new_values"], &device),
            logprobs: gather_logprobs(new_lsm, response_ids),
            advantages: adv.advantages,
            returns: adv.returns,
        },
        &mask,
        &cfg.loss_params(),
    )
    .expect("loss");
    let l = &fx["loss"];
    let scalar = |t: Tensor<1>| f64::from(t.into_scalar::<f32>());
    assert_scalar("pg_loss", scalar(out.pg_loss.clone()), &l["pg_loss"]);
    assert_scalar(
        "vf_loss_weighted",
        scalar(out.vf_loss_weighted.clone()),
        &l["vf_loss_weighted"],
    );
    assert_scalar("entropy", out.stats.policy_entropy.into(), &l["entropy"]);
    assert_scalar("approxkl", out.stats.policy_approxkl.into(), &l["approxkl"]);
    assert_scalar("policykl", out.stats.policy_policykl.into(), &l["policykl"]);
    assert_scalar(
        "pg_clipfrac",
        out.stats.policy_clipfrac.into(),
        &l["pg_clipfrac"],
    );
    assert_scalar(
        "vf_clipfrac",
        out.stats.val_clipfrac.into(),
        &l["vf_clipfrac"],
    );
    // The logged statistics agree with the returned tensors.
    assert_scalar("loss/policy", out.stats.loss_policy.into(), &l["pg_loss"]);
    let vf_w = l["vf_loss_weighted"].as_f64().expect("number");
    assert!((f64::from(out.stats.loss_value) * cfg.vf_coef - vf_w).abs() <= TOL);
    assert!(!out.skipped, "the fixture's ratio is below the threshold");
    let total = scalar(out.loss);
    let want_total = l["pg_loss"].as_f64().expect("n") + vf_w;
    assert!(
        (total - want_total).abs() <= TOL,
        "total loss {total} vs {want_total}"
    );
}

#[test]
fn trl_parity_adaptive_kl_sequence() {
    let fx = fixture();
    let a = &fx["adaptive_kl"];
    let num = |k: &str| a[k].as_f64().unwrap_or_else(|| panic!("adaptive_kl.{k}"));
    let mut ctl = AdaptiveKlController::new(num("init"), num("target"), num("horizon"));
    let n_steps = num("n_steps") as usize;
    let observed = a["observed_kl"].as_array().expect("observed_kl");
    let betas = a["beta_after_each"].as_array().expect("beta_after_each");
    assert_eq!(observed.len(), betas.len());
    for (i, (kl, beta)) in observed.iter().zip(betas).enumerate() {
        ctl.update(kl.as_f64().expect("kl"), n_steps);
        assert_scalar(&format!("beta after update {i}"), ctl.value, beta);
    }
}

#[test]
fn trl_parity_running_moments_normalisation() {
    let fx = fixture();
    let rm = &fx["running_moments"];
    let note = rm["note"].as_str().unwrap_or("");
    // The fixture states which of TRL's switches produced `normalised`.
    let scaling = note.contains("use_score_scaling");
    let norm = note.contains("use_score_norm");
    assert!(scaling, "fixture note must name use_score_scaling: {note}");
    let mut running = RunningMoments::new();
    let batches = rm["batches"].as_array().expect("batches");
    let normalised = rm["normalised"].as_array().expect("normalised");
    assert_eq!(batches.len(), normalised.len());
    for (i, (b, want)) in batches.iter().zip(normalised).enumerate() {
        let (xs, _) = array(b);
        let got = normalise_scores(&xs, &mut running, scaling, norm, None).expect("normalise");
        let (want, _) = array(want);
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            let err = (f64::from(*g) - f64::from(*w)).abs();
            assert!(
                err <= TOL,
                "batch {i} score {j}: got {g}, TRL {w}, |diff| {err:e}"
            );
        }
    }
}
