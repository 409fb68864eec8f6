//! `lm-app bench`: the two costs that dominate an RL fine-tuning step — KV-cached batched
//! generation (the PPO rollout) and forward+backward of the LM loss (the PPO update) — on
//! GPT-2 small with random weights (124M parameters) and optionally a real checkpoint.
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::{Device, Int, Tensor, TensorData};
use clap::Args;
use lmrl_models::{
    AutoLm, CausalLm, GenerationConfig, KvCache, ModelConfig, Sampling, TokenChooser, generate,
    left_pad, next_token_logprobs, process_logits,
};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Also benchmark this model (HF directory or .gguf), e.g. SmolLM2-135M.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Also benchmark a randomly initialised model of this HF `config.json`'s shape (speed does
    /// not depend on the weights' values), e.g. `apps/lm-app/shapes/qwen2.5-1.5b.json`.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Skip the random-init GPT-2 small model.
    #[arg(long)]
    skip_gpt2: bool,
    /// Timed repetitions per measurement (the median is reported), after one warm-up.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Batch size of both measurements.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Prompt length for generation.
    #[arg(long, default_value_t = 16)]
    prompt_len: usize,
    /// New tokens per row.
    #[arg(long, default_value_t = 32)]
    new_tokens: usize,
    /// Sequence length of the forward+backward measurement.
    #[arg(long, default_value_t = 64)]
    train_len: usize,
}

/// GPT-2 small (the hub's `gpt2` config.json, the fields this project reads).
fn gpt2_small() -> Result<ModelConfig> {
    let v = serde_json::json!({
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
        "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
        "n_inner": null, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
        "bos_token_id": 50256, "eos_token_id": 50256
    });
    Ok(ModelConfig::from_hf_json(
        std::path::Path::new("<gpt2-small>"),
        &v,
    )?)
}

/// Deterministic pseudo-random ids (SplitMix64), so every run benchmarks the same input.
fn ids(rows: usize, cols: usize, vocab: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut s = seed;
    let mut next = || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (0..rows)
        .map(|_| (0..cols).map(|_| (next() % vocab as u64) as u32).collect())
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs `f` once to warm up, then `reps` times; returns the timings in seconds.
fn time_reps(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    f()?;
    (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            f()?;
            Ok(t.elapsed().as_secs_f64())
        })
        .collect()
}

fn int_tensor(rows: &[Vec<u32>], device: &Device) -> Tensor<2, Int> {
    let (b, s) = (rows.len(), rows[0].len());
    let flat: Vec<i64> = rows.iter().flatten().map(|&t| t as i64).collect();
    Tensor::from_data(TensorData::new(flat, [b, s]), device)
}

/// Next-token cross-entropy of `ids` under `model` (mean over the `B·(S-1)` predictions), the
/// loss HF computes for `labels=input_ids`.
fn lm_loss(model: &AutoLm, ids: &[Vec<u32>], device: &Device) -> Result<Tensor<1>> {
    let input = int_tensor(ids, device);
    let mask = Tensor::<2, Int>::ones(input.dims(), device);
    Ok(next_token_logprobs(model, input, mask)?.mean().neg())
}

fn bench_model(
    name: &str,
    infer: &AutoLm,
    train: &AutoLm,
    args: &BenchArgs,
    device: &Device,
) -> Result<serde_json::Value> {
    let config = infer.config();
    let vocab = config.vocab_size();
    let prompts = ids(args.batch, args.prompt_len, vocab, 1);
    let cfg = GenerationConfig {
        sampling: Sampling::pure(),
        max_new_tokens: args.new_tokens,
        repetition_penalty: 1.0,
        eos_token_ids: Vec::new(), // every row generates all tokens
        pad_token_id: 0,
        seed: 0,
        first_row: 0,
        stop_sequences: Vec::new(),
        min_new_tokens: 0,
    };
    let gen_secs = time_reps(args.reps, || {
        generate(infer, &prompts, &cfg, device)?;
        Ok(())
    })?;

    let profile = profile_generation(infer, &prompts, &cfg, args.reps, device)?;

    let train_ids = ids(args.batch, args.train_len, vocab, 2);
    let plain_ids = int_tensor(&train_ids, device);
    let ones = Tensor::<2, Int>::ones([args.batch, args.train_len], device);
    let fwd_secs = time_reps(args.reps, || {
        let logits = infer.forward_simple(plain_ids.clone(), ones.clone()).logits;
        let _ = logits.narrow(1, 0, 1).into_data();
        Ok(())
    })?;
    let ad = device.clone().autodiff();
    // Sanity: the autodiff copy really trains (every parameter gets a gradient).
    let grads = lm_loss(train, &train_ids, &ad)?.backward();
    let grad_tensors = GradientsParams::from_grads(grads, train).len();
    anyhow::ensure!(
        grad_tensors > 0,
        "forward+backward produced no parameter gradients"
    );
    let fwd_bwd_secs = time_reps(args.reps, || {
        let loss = lm_loss(train, &train_ids, &ad)?;
        let grads = loss.backward();
        drop(grads);
        device
            .sync()
            .map_err(|e| anyhow::anyhow!("device sync: {e:?}"))?;
        Ok(())
    })?;
    let gen_med = median(gen_secs.clone());
    Ok(serde_json::json!({
        "model": name,
        "backend": lmrl_train::backend_name(),
        "params": infer.num_params(),
        "batch": args.batch,
        "generation": {
            "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
            "secs_median": gen_med,
            "tokens_per_s": (args.batch * args.new_tokens) as f64 / gen_med,
            "secs": gen_secs,
        },
        "generation_profile": profile,
        "forward_no_grad": { "seq_len": args.train_len, "secs_median": median(fwd_secs.clone()), "secs": fwd_secs },
        "grad_tensors": grad_tensors,
        "forward_backward": { "seq_len": args.train_len, "secs_median": median(fwd_bwd_secs.clone()), "secs": fwd_bwd_secs },
    }))
}

/// Where generation time goes: the prefill pass, one cached decode step, and the token choice
/// (processors + draw) on `[B, V]` logits, each the median of `reps` timings in seconds.
fn profile_generation(
    model: &AutoLm,
    prompts: &[Vec<u32>],
    cfg: &GenerationConfig,
    reps: usize,
    device: &Device,
) -> Result<serde_json::Value> {
    let (b, l) = (prompts.len(), prompts[0].len());
    let vocab = model.config().vocab_size();
    let (input, mask, pos) = left_pad(prompts, 0, device);
    let sync = || {
        device
            .sync()
            .map_err(|e| anyhow::anyhow!("device sync: {e:?}"))
    };
    let prefill = time_reps(reps, || {
        let mut cache = KvCache::default();
        let out = model.forward(input.clone(), pos.clone(), mask.clone(), Some(&mut cache));
        let _ = out.logits.narrow(1, l - 1, 1).into_data();
        sync()
    })?;
    // Room for every timed step, as generation reserves it: a step then writes into the
    // cache in place, where a clone of a shared cache would first copy all of it.
    let mut cache = KvCache::with_headroom(reps.max(1) + 1);
    let out = model.forward(input.clone(), pos.clone(), mask.clone(), Some(&mut cache));
    let last: Tensor<2> = out.logits.narrow(1, l - 1, 1).reshape([b, vocab]);
    let step_ids = Tensor::<2, Int>::zeros([b, 1], device);
    let mut past = l;
    let decode = time_reps(reps, || {
        // consecutive steps on one cache, as in generation: past = L, L + 1, …
        let step_pos = Tensor::<2, Int>::full([b, 1], past as i64, device);
        let step_mask = Tensor::cat(
            vec![
                mask.clone(),
                Tensor::<2, Int>::ones([b, past + 1 - l], device),
            ],
            1,
        );
        let out = model.forward(step_ids.clone(), step_pos, step_mask, Some(&mut cache));
        let _ = out.logits.into_data();
        past += 1;
        sync()
    })?;
    let mut chooser = TokenChooser::new(cfg);
    let choose_sample = time_reps(reps, || {
        chooser.choose(process_logits(last.clone(), None, cfg))?;
        Ok(())
    })?;
    let greedy = GenerationConfig {
        sampling: Sampling::Greedy,
        ..cfg.clone()
    };
    let mut greedy_chooser = TokenChooser::new(&greedy);
    let choose_greedy = time_reps(reps, || {
        greedy_chooser.choose(last.clone())?;
        Ok(())
    })?;
    let nucleus = GenerationConfig {
        sampling: Sampling::Sample {
            temperature: 0.7,
            top_k: 50,
            top_p: 0.9,
        },
        ..cfg.clone()
    };
    let mut nucleus_chooser = TokenChooser::new(&nucleus);
    let choose_topk_topp = time_reps(reps, || {
        nucleus_chooser.choose(process_logits(last.clone(), None, &nucleus))?;
        Ok(())
    })?;
    Ok(serde_json::json!({
        "prefill_secs": median(prefill),
        "decode_step_secs": median(decode),
        "choose_sample_secs": median(choose_sample),
        "choose_greedy_secs": median(choose_greedy),
        "choose_topk50_topp09_secs": median(choose_topk_topp),
    }))
}

/// The largest `--batch`: the benchmark holds `batch × length × vocabulary` logits at once.
const MAX_BATCH: usize = 1 << 16;

/// Refuses sizes the benchmark cannot run on a model of `config` (`name` in messages): every
/// sum and product of the flags is checked, none wraps.
fn check_sizes(args: &BenchArgs, name: &str, config: &ModelConfig) -> Result<()> {
    anyhow::ensure!(
        (1..=MAX_BATCH).contains(&args.batch),
        "--batch must be between 1 and {MAX_BATCH}, got {}",
        args.batch
    );
    anyhow::ensure!(
        args.prompt_len >= 1 && args.new_tokens >= 1,
        "--prompt-len and --new-tokens must be at least 1"
    );
    anyhow::ensure!(
        args.train_len >= 2,
        "--train-len must be at least 2 (the loss predicts each token from the ones before it), \
         got {}",
        args.train_len
    );
    let max = config.max_positions();
    let generated = args.prompt_len.checked_add(args.new_tokens);
    anyhow::ensure!(
        generated.is_some_and(|n| n <= max),
        "--prompt-len {} + --new-tokens {} do not fit the {max}-token context of {name}",
        args.prompt_len,
        args.new_tokens
    );
    anyhow::ensure!(
        args.train_len <= max,
        "--train-len {} does not fit the {max}-token context of {name}",
        args.train_len
    );
    Ok(())
}

pub fn run(args: &BenchArgs, device: &Device) -> Result<()> {
    let ad = device.clone().autodiff();
    // --model is loaded and the sizes checked against every model before any timing: a bad
    // file or flag is refused at once, not after the GPT-2 benchmark.
    let model = match &args.model {
        Some(path) => {
            lmrl_train::verify_model(path)?;
            let train = AutoLm::from_pretrained(path, &ad)
                .with_context(|| format!("loading model {}", path.display()))?;
            let name = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            check_sizes(args, &name, &train.config())?;
            Some((name, train))
        }
        None => None,
    };
    let shape = match &args.config {
        Some(path) => {
            let cfg = ModelConfig::from_file(path)?;
            let name = path.file_stem().map_or_else(
                || path.display().to_string(),
                |n| format!("{}-random", n.to_string_lossy()),
            );
            check_sizes(args, &name, &cfg)?;
            Some((name, cfg))
        }
        None => None,
    };
    let gpt2 = match args.skip_gpt2 {
        true => None,
        false => {
            let cfg = gpt2_small()?;
            check_sizes(args, "gpt2-small", &cfg)?;
            Some(cfg)
        }
    };
    if let Some(gpt2) = gpt2 {
        // parameters tracked on the autodiff device; `valid()` is the same weights, untracked
        let train = AutoLm::init(&gpt2, &ad);
        let infer = train.valid();
        let r = bench_model("gpt2-small-random", &infer, &train, args, device)?;
        println!("{r}");
    }
    if let Some((name, cfg)) = shape {
        let train = AutoLm::init(&cfg, &ad);
        let infer = train.valid();
        let r = bench_model(&name, &infer, &train, args, device)?;
        println!("{r}");
    }
    if let Some((name, train)) = model {
        let infer = train.valid();
        let r = bench_model(&name, &infer, &train, args, device)?;
        println!("{r}");
    }
    Ok(())
}
