//! The same training on libtorch as on the CPU default: PPO, GRPO and CORY (over PPO), three
//! iterations each from the same weights and seeds, log the same numbers. On `flex` the
//! hand-written kernels run (log-softmax, KL, entropy, products, Adam); on libtorch burn's
//! composite ops do, so this is the check that the two paths compute one algorithm.
//!
//! Built only with this crate's `tch` feature (`scripts/test-backend.sh tch`).
#![cfg(feature = "tch")]

use std::path::PathBuf;

use burn::tensor::Device;
use lmrl_models::{AutoLm, GenerationConfig, LmWithValueHead, Sampling, ValueHeadInit};
use lmrl_rl::{CoryConfig, CoryTrainer, GroupAgent, GrpoConfig, Learner, PpoAgent, PpoConfig};
use lmrl_rl::{StepStats, score_texts};

mod common;
use common::{LowIds, MockEnv, ids_text, prompts};

/// Relative tolerance on every logged number. The backends sum in different orders and
/// `flex`'s exp is a polynomial (relative error < 2e-7), so agreement is to float rounding
/// carried through three Adam steps, not bit for bit.
const REL_TOL: f64 = 1e-4;
/// Below this magnitude two numbers are compared absolutely (a KL of 1e-9 against 3e-9 is
/// agreement).
const ABS_FLOOR: f64 = 1e-5;

/// burn 0.22 marks burn-tch deprecated in favour of its CubeCL backends; libtorch is still the
/// GPU route this workspace documents.
#[allow(deprecated)]
fn libtorch() -> Device {
    Device::libtorch()
}

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/llama-tiny")
}

/// The policy (on the autodiff device) and a reference, both from the fixture's weights.
fn models(plain: &Device) -> (AutoLm, AutoLm, Device) {
    let ad = plain.clone().autodiff();
    let lm = AutoLm::from_pretrained(&fixture_dir(), &ad).expect("llama-tiny loads");
    let reference = AutoLm::from_pretrained(&fixture_dir(), plain).expect("reference loads");
    (lm, reference, ad)
}

fn queries() -> Vec<Vec<u32>> {
    vec![
        vec![5, 17, 30],
        vec![42, 7, 9, 11],
        vec![3, 3],
        vec![98, 10, 25, 4],
    ]
}

fn generation(seed: u64) -> GenerationConfig {
    GenerationConfig::default()
        .with_sampling(Sampling::pure())
        .with_max_new_tokens(4)
        .with_seed(seed)
}

fn ppo_config() -> PpoConfig {
    PpoConfig {
        learning_rate: 1e-3,
        batch_size: 4,
        mini_batch_size: 2,
        ppo_epochs: 2,
        ..PpoConfig::default()
    }
}

fn ppo_agent(plain: &Device) -> (PpoAgent<AutoLm>, AutoLm) {
    let (lm, reference, ad) = models(plain);
    // Zeros: the value head draws nothing from a device generator, which the backends do not share.
    let policy = LmWithValueHead::new(lm, ValueHeadInit::Zeros, &ad);
    (
        PpoAgent::new(policy, ppo_config(), &ad).expect("ppo"),
        reference,
    )
}

fn grpo_agent(plain: &Device) -> (GroupAgent<AutoLm>, AutoLm) {
    let (lm, reference, ad) = models(plain);
    let config = GrpoConfig {
        learning_rate: 1e-3,
        num_generations: 2,
        prompts_per_step: 2,
        mini_batch_size: 2,
        gradient_accumulation_steps: 2,
        max_completion_length: 4,
        beta: 0.04,
        ..GrpoConfig::default()
    };
    (GroupAgent::grpo(lm, config, &ad).expect("grpo"), reference)
}

/// Three rounds of sample → score → step; per round the responses and the step's statistics.
fn train<L: Learner<AutoLm>>(mut learner: L, reference: AutoLm) -> Vec<(Vec<Vec<u32>>, StepStats)> {
    let g = learner.samples_per_prompt();
    let q: Vec<Vec<u32>> = queries()
        .into_iter()
        .take(4 / g)
        .flat_map(|q| std::iter::repeat_n(q, g))
        .collect();
    let texts: Vec<String> = q.iter().map(|q| ids_text(q)).collect();
    let contexts = vec![&(); q.len()];
    (0..3)
        .map(|i| {
            let y = learner
                .generate(&q, &generation(i))
                .expect("generate")
                .tokens;
            let y_text: Vec<String> = y.iter().map(|y| ids_text(y)).collect();
            let q_refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let scores =
                score_texts(&LowIds::default(), &q_refs, &y_text, &contexts).expect("score");
            let stats = learner.step(&q, &y, &scores, &reference).expect("step");
            (y, stats)
        })
        .collect()
}

/// Statistics that count tokens (the share of clipped ratios): a ratio that sits on the clip
/// boundary may fall on either side of it under float rounding, so these may differ by one
/// token of a minibatch (the CORY run's smallest has 16 response tokens).
const COUNTED: [&str; 2] = ["clipfrac", "clip_ratio"];
const ONE_TOKEN: f64 = 1.0 / 16.0;

fn close(key: &str, a: f64, b: f64) -> bool {
    if COUNTED.iter().any(|c| key.contains(c)) {
        return (a - b).abs() <= ONE_TOKEN + 1e-9;
    }
    let scale = a.abs().max(b.abs());
    scale < ABS_FLOOR || (a - b).abs() <= REL_TOL * scale
}

/// Same responses, and every TRL statistic within tolerance, round by round.
fn assert_same(
    what: &str,
    flex: &[(Vec<Vec<u32>>, StepStats)],
    tch: &[(Vec<Vec<u32>>, StepStats)],
) {
    assert_eq!(flex.len(), tch.len());
    for (i, ((y_f, s_f), (y_t, s_t))) in flex.iter().zip(tch).enumerate() {
        assert_eq!(
            y_f, y_t,
            "{what}, round {i}: the backends sampled different tokens"
        );
        assert_eq!(
            s_f.trl.keys().collect::<Vec<_>>(),
            s_t.trl.keys().collect::<Vec<_>>(),
            "{what}, round {i}: the same statistics are logged"
        );
        let differ: Vec<String> = s_f
            .trl
            .iter()
            .filter(|(key, a)| !close(key, **a, s_t.trl[*key]))
            .map(|(key, a)| format!("{key}: flex {a} vs libtorch {}", s_t.trl[key]))
            .collect();
        assert!(
            differ.is_empty(),
            "{what}, round {i} (relative tolerance {REL_TOL}):\n{}",
            differ.join("\n")
        );
    }
}

#[test]
fn ppo_trains_alike_on_libtorch_and_flex() {
    let run = |d: &Device| {
        let (agent, reference) = ppo_agent(d);
        train(agent, reference)
    };
    assert_same("PPO", &run(&Device::flex()), &run(&libtorch()));
}

#[test]
fn grpo_trains_alike_on_libtorch_and_flex() {
    let run = |d: &Device| {
        let (agent, reference) = grpo_agent(d);
        train(agent, reference)
    };
    assert_same("GRPO", &run(&Device::flex()), &run(&libtorch()));
}

#[test]
fn cory_trains_alike_on_libtorch_and_flex() {
    let run = |d: &Device| {
        let (a1, reference) = ppo_agent(d);
        let (a2, _) = ppo_agent(d);
        let config = CoryConfig {
            swap_period: 2,
            ..CoryConfig::default()
        };
        let mut t = CoryTrainer::new(a1, a2, reference, config).expect("cory");
        let q = prompts(&queries());
        (0..3)
            .flat_map(|i| {
                let s = t
                    .iteration(&q, &generation(i), &mut MockEnv, &LowIds::default())
                    .expect("iteration");
                // Each copy's statistics (llm1, llm2) beside one role's texts: both are
                // functions of the run alone, so they compare across backends as they are.
                let [l1, l2] = s.agents;
                let ids = |texts: &[String]| -> Vec<Vec<u32>> {
                    texts
                        .iter()
                        .map(|t| {
                            t.split_whitespace()
                                .map(|w| w.parse().expect("id"))
                                .collect()
                        })
                        .collect()
                };
                [
                    (ids(&s.texts.pioneer_responses), l1.stats),
                    (ids(&s.texts.observer_responses), l2.stats),
                ]
            })
            .collect::<Vec<_>>()
    };
    assert_same("CORY", &run(&Device::flex()), &run(&libtorch()));
}
