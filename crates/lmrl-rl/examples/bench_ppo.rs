//! Seconds per PPO step (`PpoAgent::step`, TRL `PPOTrainer.step` semantics) and per CORY
//! iteration on the shapes of the PyTorch + TRL comparison in `docs/benchmarks.md` (TRL's
//! `PPOTrainer.step`): batch 8, query 16 + response 32 tokens, full-vocabulary KL, 4 PPO
//! epochs, minibatch 8, lr 1.41e-5.
//!
//! `cargo run --release -p lmrl-rl --example bench_ppo -- [--model PATH | --shape NAME]
//! [--lora-rank R] [--reps N] [--batch B] [--mini-batch M] [--query-len Q] [--response-len R]
//! [--only ppo|cory]`,
//! on the CPU backend `flex`,
//! or on libtorch's CPU kernels with `--features tch` (scripts/setup-tch.sh sets libtorch up)
//! (defaults: batch 8, query 16, response 32, both). Minibatches hold at most 8 samples, with
//! gradients accumulated over the batch (one Adam step per PPO epoch, as the apps run PPO), so
//! the cost of larger batches is the cost of more samples, not of larger tensors;
//! `--only` measures one of the two (`ppo`: generation and step, without the observer-shaped
//! step), so `peak_rss_mib` is that one's peak
//! (`scripts/bench-scaling.sh` runs the grid of docs/benchmarks.md's scaling table).
//! Without `--model` the policy is GPT-2 small with random weights (speed does not depend on
//! weight values), or with `--shape` a random model of a published shape (`smollm2-135m`,
//! `qwen2.5-0.5b`, `qwen2.5-1.5b`); with `--model`, any checkpoint `AutoLm::from_pretrained`
//! reads (e.g. SmolLM2-135M GGUF). `--lora-rank R` trains LoRA adapters of rank R (α 16) on
//! every projection instead of the whole model; the reference is then the base with the
//! adapters off, sharing its weights.
//! Prints one JSON line: step seconds (median), generation seconds, the median of whole
//! `CoryTrainer` iterations as the apps run them (pioneer generation, the observer's prompt
//! from IMDB's template, its generation, rewards, both updates on two threads), peak RSS (of the
//! PPO part alone — one policy, its optimiser state and the reference through both step shapes —
//! and of the whole process, which then holds CORY's two copies). With
//! `--compare-sequential` also CORY with its two updates one after the other
//! (`CoryConfig::concurrent_updates = false`).
use std::path::PathBuf;
use std::time::Instant;

use burn::module::Module;
use burn::tensor::Device;
use lmrl_models::{
    AutoLm, GenerationConfig, LmWithValueHead, LoraConfig, ModelConfig, ValueHeadInit, apply_lora,
};
use lmrl_rewards::{Reward, RewardError, Sample};
use lmrl_rl::{CoryConfig, CoryEnv, CoryTrainer, EnvError, PpoAgent, PpoConfig, Prompt};

/// Samples per minibatch and per forward chunk (the batch is split into chunks of this size)
/// unless `--mini-batch` says otherwise.
const MINIBATCH: usize = 8;

/// What to measure: `--only ppo`, `--only cory`, or both (no flag).
#[derive(Clone, Copy, PartialEq)]
enum Only {
    Ppo,
    Cory,
    Both,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // As the apps do by default: reuse freed tensor buffers instead of faulting them in anew,
    // in transparent huge pages.
    lmrl_models::HostMemory::parse("retain,huge-pages")?.apply();
    let args: Vec<String> = std::env::args().collect();
    let model = flag(&args, "--model").map(PathBuf::from);
    let reps: usize = flag(&args, "--reps").map_or(Ok(3), |s| s.parse())?;
    let compare_sequential = args.iter().any(|a| a == "--compare-sequential");
    let size = |name: &str, default| {
        flag(&args, name).map_or(Ok(default), |s| {
            s.parse::<usize>().map_err(|e| {
                format!("{name}: expected a number of samples or tokens, got `{s}` ({e})")
            })
        })
    };
    let (batch, query, response) = (
        size("--batch", 8)?,
        size("--query-len", 16)?,
        size("--response-len", 32)?,
    );
    let mini = batch.min(size("--mini-batch", MINIBATCH)?);
    if mini == 0 || batch % mini != 0 || query == 0 || response == 0 {
        return Err(format!(
            "--batch must be a multiple of --mini-batch (default {MINIBATCH}), and every size \
             positive (got batch {batch}, mini-batch {mini}, query {query}, response {response})"
        )
        .into());
    }
    let lora_rank = size("--lora-rank", 0)?;
    let shape = flag(&args, "--shape");
    let only = match flag(&args, "--only").as_deref() {
        None => Only::Both,
        Some("ppo") => Only::Ppo,
        Some("cory") => Only::Cory,
        Some(x) => return Err(format!("--only: expected `ppo` or `cory`, got `{x}`").into()),
    };

    let (plain, backend) = cpu_device();
    plain.seed(0);
    let ad = plain.clone().autodiff();
    // The policy starts from the base model and the reference is the base itself, as the apps
    // build them (with LoRA the three share the frozen weights' memory).
    let load_base = || -> Result<(AutoLm, String), Box<dyn std::error::Error>> {
        Ok(match (&model, &shape) {
            (Some(p), _) => (AutoLm::from_pretrained(p, &ad)?, p.display().to_string()),
            (None, Some(s)) => (AutoLm::init(&shape_config(s)?, &ad), format!("{s}-random")),
            (None, None) => (
                AutoLm::init(&gpt2_small()?, &ad),
                "gpt2-small-random".into(),
            ),
        })
    };
    let (base, name) = load_base()?;
    let lora = (lora_rank > 0).then(|| LoraConfig::for_model(&base.config(), lora_rank, 16.0));
    let adapt = |lm: AutoLm| -> Result<AutoLm, lmrl_models::ModelError> {
        match &lora {
            Some(l) => apply_lora(lm, l),
            None => Ok(lm),
        }
    };
    let reference = base.valid();
    let vocab = reference.config().vocab_size();
    let policy_lm = adapt(base.clone().fork(&ad))?;
    drop(base);
    let policy = LmWithValueHead::new(policy_lm, ValueHeadInit::Default, &ad);
    let cfg = PpoConfig {
        batch_size: batch,
        mini_batch_size: mini,
        gradient_accumulation_steps: batch / mini,
        forward_batch_size: Some(mini),
        ppo_epochs: 4,
        init_kl_coef: 0.3,
        use_score_norm: false,
        use_score_scaling: false,
        ..PpoConfig::default()
    };
    let mut agent = PpoAgent::new(policy, cfg.clone(), &ad)?;
    let queries = ids(batch, query, vocab, 1);
    let responses = ids(batch, response, vocab, 2);
    let long_queries = ids(batch, 3 * query + response, vocab, 3);
    let scores: Vec<f32> = (0..batch).map(|i| i as f32 / batch as f32 - 0.5).collect();

    let gen_cfg = GenerationConfig::default().with_max_new_tokens(response);
    let mut step_s = Vec::new();
    let mut obs_step_s = Vec::new();
    let mut gen_s = Vec::new();
    // `--only cory` skips this loop (no PPO rounds).
    let ppo_rounds = if only == Only::Cory { 0 } else { reps + 1 };
    for rep in 0..ppo_rounds {
        let t = Instant::now();
        agent.generate(&queries, &gen_cfg)?;
        let g = t.elapsed().as_secs_f64();
        let t = Instant::now();
        agent.step(&queries, &responses, &scores, &reference)?;
        let s = t.elapsed().as_secs_f64();
        // The observer-shaped step is compared with TRL's step at query 80; a PPO iteration
        // (`--only ppo`) does not contain it.
        let o = if only == Only::Ppo {
            f64::NAN
        } else {
            let t = Instant::now();
            agent.step(&long_queries, &responses, &scores, &reference)?;
            t.elapsed().as_secs_f64()
        };
        if rep > 0 {
            // The first round warms caches and allocators.
            gen_s.push(g);
            step_s.push(s);
            obs_step_s.push(o);
        }
        eprintln!("rep {rep}: generation {g:.2} s, step {s:.2} s, observer-shaped step {o:.2} s");
    }
    let (g, s, o) = (median(&gen_s), median(&step_s), median(&obs_step_s));
    // One policy with value head, its Adam state and the reference, through both step shapes:
    // the process a TRL PPO run is (compared with TRL's process at query 80).
    let ppo_peak = peak_rss_mib();
    drop(agent);

    // Two copies of the policy forked from one base, as `imdb-app --algo cory` builds them.
    // A fresh base whose frozen weights the reference shares (with LoRA: all three share them).
    let (base, _) = load_base()?;
    let reference = base.valid();
    let copy = |seed| -> Result<PpoAgent<AutoLm>, Box<dyn std::error::Error>> {
        let lm = adapt(base.clone().fork(&ad))?;
        let cfg = PpoConfig {
            seed,
            ..cfg.clone()
        };
        Ok(PpoAgent::new(
            LmWithValueHead::new(lm, ValueHeadInit::Default, &ad),
            cfg,
            &ad,
        )?)
    };
    let prompts: Vec<Prompt<()>> = queries
        .iter()
        .map(|q| Prompt {
            ids: q.clone(),
            text: NumericEnv.text(q),
            context: (),
        })
        .collect();
    let mut cory_runs = vec![(true, Vec::new())];
    if only == Only::Ppo {
        cory_runs.clear();
    } else if compare_sequential {
        cory_runs.push((false, Vec::new()));
    }
    let mut observer_len = 0;
    let cory_config = |concurrent_updates| CoryConfig {
        concurrent_updates,
        // As imdb-app and the reference code: no extra plain-query generation.
        pioneer_format_metrics: false,
        ..CoryConfig::default()
    };
    let mut trainer = CoryTrainer::new(copy(0)?, copy(1)?, reference, cory_config(true))?;
    drop(base);
    for (concurrent_updates, secs) in &mut cory_runs {
        if !*concurrent_updates {
            let reference = trainer.reference(0).clone();
            let (l1, l2) = trainer.into_learners();
            trainer = CoryTrainer::new(l1, l2, reference, cory_config(false))?;
        }
        for rep in 0..=reps {
            let t = Instant::now();
            let st = trainer.iteration(&prompts, &gen_cfg, &mut NumericEnv, &HighHalf(vocab))?;
            let c = t.elapsed().as_secs_f64();
            observer_len = st
                .texts
                .observer_prompts
                .first()
                .map_or(0, |m| NumericEnv.encode(m).map_or(0, |ids| ids.len()));
            if rep > 0 {
                secs.push(c);
            }
            eprintln!(
                "rep {rep}: CORY iteration {c:.2} s (concurrent updates: {concurrent_updates})"
            );
        }
    }
    let out = serde_json::json!({
        "model": name,
        "backend": backend,
        "lora_rank": lora_rank,
        "batch": batch, "query_len": query, "response_len": response, "ppo_epochs": 4,
        "mini_batch_size": mini,
        "ppo_step_secs_median": s,
        "ppo_step_secs": step_s,
        "generation_secs_median": g,
        "ppo_iteration_secs": g + s,
        "cory_iteration_secs": cory_runs.first().map(|r| median(&r.1)),
        "cory_iteration_secs_all": cory_runs.first().map(|r| &r.1),
        "cory_sequential_iteration_secs": cory_runs.get(1).map(|r| median(&r.1)),
        "cory_observer_prompt_len": observer_len,
        "observer_step_secs_median": o,
        "ppo_peak_rss_mib": ppo_peak,
        "peak_rss_mib": peak_rss_mib(),
    });
    println!("{out}");
    Ok(())
}

/// The CPU device this build benchmarks: libtorch with `--features tch`, else flex.
fn cpu_device() -> (Device, &'static str) {
    #[cfg(feature = "tch")]
    #[allow(deprecated)]
    return (Device::libtorch(), "tch");
    #[cfg(not(feature = "tch"))]
    (Device::flex(), "flex")
}

/// Text as the ids in decimal, each after a space; other words (the template's) hash to an id.
/// With IMDB's observer template the merged prompt is 2·query + response + 7 tokens.
struct NumericEnv;

impl NumericEnv {
    fn text(&self, ids: &[u32]) -> String {
        ids.iter().map(|i| format!(" {i}")).collect()
    }
}

impl CoryEnv<AutoLm, ()> for NumericEnv {
    fn decode(&self, ids: &[u32]) -> Result<String, EnvError> {
        Ok(self.text(ids))
    }
    fn encode(&self, text: &str) -> Result<Vec<u32>, EnvError> {
        Ok(text
            .split_whitespace()
            .map(|w| {
                w.parse::<u32>().unwrap_or_else(|_| {
                    w.bytes()
                        .fold(7u32, |h, b| h.wrapping_mul(31) ^ u32::from(b))
                        % 1000
                        + 1
                })
            })
            .collect())
    }
    fn observer_prompt(&self, p: &Prompt<()>, y: &str) -> Result<String, EnvError> {
        Ok(lmrl_data::imdb_observer_prompt(&p.text, y))
    }
}

/// The fraction of response ids in the upper half of the vocabulary: a reward as cheap as the
/// apps' bag-of-words classifier.
struct HighHalf(usize);

impl Reward<()> for HighHalf {
    fn name(&self) -> &str {
        "high-half"
    }
    fn score(&self, samples: &[Sample<'_, ()>]) -> Result<Vec<f32>, RewardError> {
        Ok(samples
            .iter()
            .map(|s| {
                let ids: Vec<usize> = s
                    .response
                    .split_whitespace()
                    .filter_map(|w| w.parse().ok())
                    .collect();
                ids.iter().filter(|&&i| i >= self.0 / 2).count() as f32 / ids.len().max(1) as f32
            })
            .collect())
    }
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

/// The configuration of a named model shape, for random weights: `smollm2-135m`,
/// `qwen2.5-0.5b`, `qwen2.5-1.5b` (their published `config.json` values).
fn shape_config(name: &str) -> Result<ModelConfig, Box<dyn std::error::Error>> {
    // (hidden, intermediate, layers, heads, kv heads, vocab, rope θ, qkv bias)
    let (model_type, d, ff, layers, heads, kv, vocab, theta, eps) = match name {
        "smollm2-135m" => ("llama", 576, 1536, 30, 9, 3, 49152, 1e5, 1e-5),
        "qwen2.5-0.5b" => ("qwen2", 896, 4864, 24, 14, 2, 151936, 1e6, 1e-6),
        "qwen2.5-1.5b" => ("qwen2", 1536, 8960, 28, 12, 2, 151936, 1e6, 1e-6),
        other => {
            return Err(format!(
                "--shape: expected smollm2-135m, qwen2.5-0.5b or qwen2.5-1.5b, got `{other}`"
            )
            .into());
        }
    };
    let v = serde_json::json!({
        "model_type": model_type, "hidden_size": d, "intermediate_size": ff,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
        "vocab_size": vocab, "rope_theta": theta, "rms_norm_eps": eps,
        "max_position_embeddings": 32768, "tie_word_embeddings": true, "hidden_act": "silu",
        "bos_token_id": 0, "eos_token_id": 0
    });
    Ok(ModelConfig::from_hf_json(
        std::path::Path::new(&format!("<{name}>")),
        &v,
    )?)
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
