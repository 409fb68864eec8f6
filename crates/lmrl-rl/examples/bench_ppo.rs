//! Seconds per PPO step (`PpoAgent::step`, TRL `PPOTrainer.step` semantics) and per CORY
//! iteration on the shapes of the PyTorch + TRL comparison in `docs/benchmarks.md` (TRL's
//! `PPOTrainer.step`): batch 8, query 16 + response 32 tokens, full-vocabulary KL, 4 PPO
//! epochs, minibatch 8, lr 1.41e-5.
//!
//! `cargo run --release -p lmrl-rl --example bench_ppo -- [--model PATH] [--reps N]`
//! Without `--model` the policy is GPT-2 small with random weights (speed does not depend on
//! weight values); with it, any checkpoint `AutoLm::from_pretrained` reads (e.g. SmolLM2-135M GGUF).
//! Prints one JSON line: step seconds (median), generation seconds, a CORY iteration estimate
//! (two agents: two generations + two steps, the observer on a 3× longer prompt), peak RSS.
use std::path::PathBuf;
use std::time::Instant;

use burn::tensor::Device;
use lmrl_models::{
    AutoLm, GenerationConfig, LmWithValueHead, ModelConfig, Sampling, ValueHeadInit,
};
use lmrl_rl::{PpoAgent, PpoConfig};

const BATCH: usize = 8;
const QUERY: usize = 16;
const RESPONSE: usize = 32;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let model = flag(&args, "--model").map(PathBuf::from);
    let reps: usize = flag(&args, "--reps").map_or(Ok(3), |s| s.parse())?;

    let plain = Device::flex();
    plain.seed(0);
    let ad = plain.clone().autodiff();
    let (policy_lm, reference, name) = match &model {
        Some(p) => (
            AutoLm::from_pretrained(p, &ad)?,
            AutoLm::from_pretrained(p, &plain)?,
            p.display().to_string(),
        ),
        None => {
            let cfg = gpt2_small()?;
            let lm = AutoLm::init(&cfg, &ad);
            // A second random model as the reference: speed does not depend on the weights.
            let reference = AutoLm::init(&cfg, &plain);
            (lm, reference, "gpt2-small-random".to_string())
        }
    };
    let vocab = reference.config().vocab_size();
    let policy = LmWithValueHead::new(policy_lm, ValueHeadInit::Default, &ad);
    let cfg = PpoConfig {
        batch_size: BATCH,
        mini_batch_size: BATCH,
        ppo_epochs: 4,
        init_kl_coef: 0.3,
        use_score_norm: false,
        use_score_scaling: false,
        ..PpoConfig::default()
    };
    let mut agent = PpoAgent::new(policy, cfg, &ad)?;
    let queries = ids(BATCH, QUERY, vocab, 1);
    let responses = ids(BATCH, RESPONSE, vocab, 2);
    let long_queries = ids(BATCH, 3 * QUERY + RESPONSE, vocab, 3);
    let scores: Vec<f32> = (0..BATCH).map(|i| i as f32 / BATCH as f32 - 0.5).collect();

    let gen_cfg = GenerationConfig {
        sampling: Sampling::pure(),
        max_new_tokens: RESPONSE,
        repetition_penalty: 1.0,
        eos_token_id: None,
        pad_token_id: 0,
        seed: 0,
        first_row: 0,
        stop_sequences: Vec::new(),
    };
    let mut step_s = Vec::new();
    let mut obs_step_s = Vec::new();
    let mut gen_s = Vec::new();
    for rep in 0..=reps {
        let t = Instant::now();
        agent.generate(&queries, &gen_cfg)?;
        let g = t.elapsed().as_secs_f64();
        let t = Instant::now();
        agent.step(&queries, &responses, &scores, &reference)?;
        let s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        agent.step(&long_queries, &responses, &scores, &reference)?;
        let o = t.elapsed().as_secs_f64();
        if rep > 0 {
            // The first round warms caches and allocators.
            gen_s.push(g);
            step_s.push(s);
            obs_step_s.push(o);
        }
        eprintln!("rep {rep}: generation {g:.2} s, step {s:.2} s, observer-shaped step {o:.2} s");
    }
    let (g, s, o) = (median(&gen_s), median(&step_s), median(&obs_step_s));
    let out = serde_json::json!({
        "model": name,
        "backend": "flex",
        "batch": BATCH, "query_len": QUERY, "response_len": RESPONSE, "ppo_epochs": 4,
        "ppo_step_secs_median": s,
        "ppo_step_secs": step_s,
        "generation_secs_median": g,
        "ppo_iteration_secs": g + s,
        "cory_iteration_secs": 2.0 * g + s + o,
        "observer_step_secs_median": o,
        "peak_rss_mib": peak_rss_mib(),
    });
    println!("{out}");
    Ok(())
}

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn gpt2_small() -> Result<ModelConfig, lmrl_models::ModelError> {
    let v = serde_json::json!({
        "model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768,
        "n_layer": 12, "n_head": 12, "n_inner": null, "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu_new", "bos_token_id": 50256, "eos_token_id": 50256
    });
    ModelConfig::from_hf_json(std::path::Path::new("<gpt2-small>"), &v)
}

/// Deterministic pseudo-random ids in 1..vocab (SplitMix64).
fn ids(rows: usize, cols: usize, vocab: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut s = seed;
    let mut next = move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (0..rows)
        .map(|_| {
            (0..cols)
                .map(|_| 1 + (next() % (vocab as u64 - 1)) as u32)
                .collect()
        })
        .collect()
}

/// Peak resident set size of this process (Linux `VmHWM`), MiB.
fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}
