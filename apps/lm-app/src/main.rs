//! `lm-app`: run a causal language model (GPT-2 / Llama, HF directory or GGUF file) from the
//! command line — raw logits, greedy or sampled generation, and a speed benchmark.
//!
//! The JSON interfaces of `logits` and `generate --input` are a stable contract used by the
//! project's checks against the reference Python stack.
mod bench;
mod io;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use burn::tensor::{Device, Int, Tensor, TensorData};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use lmrl_models::{
    AutoLm, CausalLm, GenerationConfig, LmTokenizer, Pretrained, Sampling, generate,
};

/// Run GPT-2 / Llama causal language models (HF directories or GGUF files) on burn.
#[derive(Parser, Debug)]
#[command(name = "lm-app", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Compute device: `cpu`, `cuda:N` or `wgpu:N` (default: the backend's first device).
    #[arg(long, global = true)]
    device: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Full logits of a right-padded batch (positions 0..S), or class logits of a DistilBERT
    /// classifier directory (config.json model_type "distilbert").
    ///
    /// IN.json: {"input_ids": [[..], ..], "attention_mask": [[..], ..]} (equal-length rows,
    /// 1 = real token). OUT.json: {"logits": batch × seq × vocab} for a causal LM,
    /// {"logits": batch × labels} for DistilBERT.
    Logits {
        /// HF model directory (config.json + model.safetensors) or a .gguf file.
        #[arg(long)]
        model: PathBuf,
        /// JSON file with `input_ids` and `attention_mask`.
        #[arg(long)]
        input: PathBuf,
        /// Where to write the JSON result.
        #[arg(long)]
        out: PathBuf,
    },
    /// Generate continuations.
    ///
    /// With --input/--out (ids in, ids out): IN.json rows are left-padded prompts
    /// (`input_ids` + `attention_mask`, the mask marks the real tokens); OUT.json gets
    /// `new_tokens` and `new_token_logprobs`, batch × max-new-tokens. A row that stops at EOS
    /// keeps its EOS and is then padded with the pad id (default: the EOS id, else 0) and
    /// log-prob 0.
    ///
    /// With --prompt (text in, text out): the model's own tokenizer (tokenizer.json,
    /// vocab.json + merges.txt, or the GGUF vocabulary) encodes each prompt and the completions
    /// are printed, one per prompt.
    Generate(GenerateArgs),
    /// Speed benchmark: GPT-2 small (random init, 124M) and optionally --model: tokens/s of
    /// KV-cached generation (batch 8, 16-token prompts, 32 new tokens, pure sampling) and
    /// seconds per forward+backward of LM cross-entropy over 8×64 tokens. Prints one JSON line
    /// per model.
    Bench(bench::BenchArgs),
    /// Convert a checkpoint (HF directory or .gguf) to a Hugging Face directory:
    /// config.json + model.safetensors (HF names and layouts; GGUF Q/K rows restored to HF's
    /// rotate-half order) + tokenizer.json, loadable by `AutoModelForCausalLM.from_pretrained`.
    Convert {
        /// HF model directory or a .gguf file.
        #[arg(long)]
        model: PathBuf,
        /// Output directory (created; files are written atomically).
        #[arg(long)]
        out: PathBuf,
        /// Write config.json and the weights only, for a model that comes without a tokenizer.
        #[arg(long)]
        weights_only: bool,
    },
}

#[derive(Args, Debug)]
struct GenerateArgs {
    /// HF model directory or a .gguf file.
    #[arg(long)]
    model: PathBuf,
    /// Left-padded prompt ids (JSON: input_ids, attention_mask); requires --out.
    #[arg(long, conflicts_with = "prompt", requires = "out")]
    input: Option<PathBuf>,
    /// Where to write new_tokens / new_token_logprobs (with --input).
    #[arg(long)]
    out: Option<PathBuf>,
    /// A text prompt; repeat for a batch.
    #[arg(long, required_unless_present = "input")]
    prompt: Vec<String>,
    /// Put each prompt to the model as one user turn of its own chat template, with the
    /// generation prompt (transformers' `apply_chat_template(..., add_generation_prompt=True)`).
    #[arg(long, conflicts_with = "input")]
    chat: bool,
    /// Greedy decoding (argmax); otherwise sample with the options below.
    #[arg(long)]
    greedy: bool,
    /// Number of tokens to generate per row (EOS included).
    #[arg(long, default_value_t = 32)]
    max_new_tokens: usize,
    /// Sampling temperature (> 0).
    #[arg(long, default_value_t = 1.0)]
    temperature: f32,
    /// Keep the k most likely tokens; 0 = off.
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Nucleus sampling mass in (0, 1]; 1 = off.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// CTRL repetition penalty (> 0); 1 = off.
    #[arg(long, default_value_t = 1.0)]
    repetition_penalty: f32,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Stop token; default: every EOS id the model lists (generation_config.json, config.json).
    #[arg(long)]
    eos_token_id: Option<u32>,
    /// Never stop early at EOS.
    #[arg(long, conflicts_with = "eos_token_id")]
    ignore_eos: bool,
    /// Pad id for left padding and finished rows; default: the EOS id, else 0.
    #[arg(long)]
    pad_token_id: Option<u32>,
}

fn main() -> ExitCode {
    // Heap settings before any thread allocates; the environment chooses them (README).
    if let Err(e) = lmrl_train::init_process() {
        eprintln!("error: {}", lmrl_train::chain(&e));
        return ExitCode::from(2);
    }
    let matches = lmrl_train::checked_integers(Cli::command()).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Each cause once, also where a library repeats its source in its message.
            eprintln!("error: {}", lmrl_train::chain(e.as_ref()));
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let device = lmrl_train::select_device(cli.device.as_deref())?;
    match cli.command {
        Command::Logits { model, input, out } => logits(&model, &input, &out, &device),
        Command::Generate(args) => generate_cmd(&args, &device),
        Command::Bench(args) => bench::run(&args, &device),
        Command::Convert {
            model,
            out,
            weights_only,
        } => convert(&model, &out, weights_only, &device),
    }
}

/// Fails when a row of the batch holds a NaN or an infinity: the weights of `model` do, and a
/// result made of them is no result.
fn check_finite<'a>(
    model: &Path,
    what: &str,
    rows: impl IntoIterator<Item = &'a [f32]>,
) -> Result<()> {
    for (r, row) in rows.into_iter().enumerate() {
        if let Some(x) = row.iter().find(|x| !x.is_finite()) {
            bail!(
                "the model {} gives a non-finite {what} ({x} in row {r}): its weights hold NaN \
                 or infinite values",
                model.display()
            );
        }
    }
    Ok(())
}

/// The model at `path`, checked first against its checkpoint's checksums when it is part of a
/// training run's checkpoint.
fn load_lm(path: &Path, device: &Device) -> Result<AutoLm> {
    lmrl_train::verify_model(path)?;
    Ok(AutoLm::from_pretrained(path, device)?)
}

fn convert(model: &Path, out: &Path, weights_only: bool, device: &Device) -> Result<()> {
    let lm =
        load_lm(model, device).with_context(|| format!("loading model {}", model.display()))?;
    let tok = match weights_only {
        true => None,
        false => Some(
            LmTokenizer::load_for_model(model)
                .with_context(|| format!("loading the tokenizer of {}", model.display()))?,
        ),
    };
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    lm.save_pretrained(out)
        .with_context(|| format!("writing the model to {}", out.display()))?;
    if let Some(tok) = tok {
        tok.save(out)
            .with_context(|| format!("writing the tokenizer to {}", out.display()))?;
    }
    eprintln!("wrote {}", out.display());
    Ok(())
}

/// `model_type` of an HF directory's config.json, if there is one.
fn model_type(model: &Path) -> Result<Option<String>> {
    let cfg = model.join("config.json");
    if !model.is_dir() || !cfg.is_file() {
        return Ok(None);
    }
    let text =
        std::fs::read_to_string(&cfg).with_context(|| format!("reading {}", cfg.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", cfg.display()))?;
    Ok(v.get("model_type")
        .and_then(|t| t.as_str())
        .map(str::to_string))
}

fn int_tensor(rows: &[Vec<i64>], device: &Device) -> Tensor<2, Int> {
    let (b, s) = (rows.len(), rows.first().map_or(0, Vec::len));
    let flat: Vec<i64> = rows.iter().flatten().copied().collect();
    Tensor::from_data(TensorData::new(flat, [b, s]), device)
}

fn logits(model: &Path, input: &Path, out: &Path, device: &Device) -> Result<()> {
    let batch = io::read_batch(input)?;
    if model_type(model)?.as_deref() == Some("distilbert") {
        let clf = lmrl_rewards::load_distilbert(model, device)
            .with_context(|| format!("loading DistilBERT classifier {}", model.display()))?;
        let rows: Vec<Vec<u32>> = batch
            .input_ids
            .iter()
            .map(|r| r.iter().map(|&t| t as u32).collect())
            .collect();
        clf.check_inputs(&rows)
            .with_context(|| format!("checking {}", input.display()))?;
        let logits = clf.logits(
            int_tensor(&batch.input_ids, device),
            int_tensor(&batch.attention_mask, device),
        );
        let [b, l] = logits.dims();
        let flat = io::floats(logits)?;
        check_finite(model, "logit", flat.chunks(l.max(1)))?;
        let rows: Vec<&[f32]> = flat.chunks(l.max(1)).take(b).collect();
        return io::write_json(out, &serde_json::json!({ "logits": rows }));
    }
    let lm =
        load_lm(model, device).with_context(|| format!("loading model {}", model.display()))?;
    let config = lm.config();
    io::check_ids(
        &batch.input_ids,
        config.vocab_size(),
        config.max_positions(),
    )
    .with_context(|| format!("checking {}", input.display()))?;
    let out_t = lm.forward_simple(
        int_tensor(&batch.input_ids, device),
        int_tensor(&batch.attention_mask, device),
    );
    let [b, s, v] = out_t.logits.dims();
    let flat = io::floats(out_t.logits)?;
    check_finite(model, "logit", flat.chunks((s * v).max(1)))?;
    let nested: Vec<Vec<&[f32]>> = (0..b)
        .map(|i| {
            (0..s)
                .map(|j| &flat[(i * s + j) * v..(i * s + j + 1) * v])
                .collect()
        })
        .collect();
    io::write_json(out, &serde_json::json!({ "logits": nested }))
}

fn generation_config(args: &GenerateArgs, model_eos: Vec<u32>) -> GenerationConfig {
    let eos = match (args.ignore_eos, args.eos_token_id) {
        (true, _) => Vec::new(),
        (false, Some(id)) => vec![id],
        (false, None) => model_eos,
    };
    GenerationConfig {
        sampling: if args.greedy {
            Sampling::Greedy
        } else {
            Sampling::Sample {
                temperature: args.temperature,
                top_k: args.top_k,
                top_p: args.top_p,
            }
        },
        max_new_tokens: args.max_new_tokens,
        repetition_penalty: args.repetition_penalty,
        pad_token_id: args.pad_token_id.or(eos.first().copied()).unwrap_or(0),
        eos_token_ids: eos,
        seed: args.seed,
        first_row: 0,
        stop_sequences: Vec::new(),
        min_new_tokens: 0,
    }
}

fn generate_cmd(args: &GenerateArgs, device: &Device) -> Result<()> {
    let lm = load_lm(&args.model, device)
        .with_context(|| format!("loading model {}", args.model.display()))?;
    let config = lm.config();
    if let Some(input) = &args.input {
        let out = args.out.as_ref().context("--input needs --out")?;
        let batch = io::read_batch(input)?;
        io::check_ids(&batch.input_ids, config.vocab_size(), usize::MAX)
            .with_context(|| format!("checking {}", input.display()))?;
        let prompts = io::real_tokens(&batch);
        let cfg = generation_config(args, config.eos_token_id().into_iter().collect());
        let g = generate(&lm, &prompts, &cfg, device)
            .with_context(|| format!("generating from {}", input.display()))?;
        check_finite(
            &args.model,
            "log-probability",
            g.logprobs.iter().map(Vec::as_slice),
        )?;
        let n = cfg.max_new_tokens;
        let mut tokens = Vec::with_capacity(prompts.len());
        let mut logprobs = Vec::with_capacity(prompts.len());
        for (t, l) in g.tokens.iter().zip(&g.logprobs) {
            let mut t = t.clone();
            let mut l = l.clone();
            t.resize(n, cfg.pad_token_id);
            l.resize(n, 0.0);
            tokens.push(t);
            logprobs.push(l);
        }
        return io::write_json(
            out,
            &serde_json::json!({ "new_tokens": tokens, "new_token_logprobs": logprobs }),
        );
    }
    if args.prompt.is_empty() {
        bail!("give --prompt TEXT (or --input IN.json --out OUT.json)");
    }
    // The tokenizer checked against the model: an id past its embedding table is refused here.
    let (tok, _) = lmrl_train::load_tokenizer(&args.model)?;
    let chat =
        match args.chat {
            true => Some(tok.chat_template()?.with_context(|| {
                format!("--chat: {} ships no chat template", args.model.display())
            })?),
            false => None,
        };
    let prompts = args
        .prompt
        .iter()
        .map(|p| {
            let text = match &chat {
                Some(t) => t.render(&[lmrl_models::ChatMessage::user(p.as_str())], true)?,
                None => p.clone(),
            };
            tok.encode(&text)
                .with_context(|| format!("encoding prompt {p:?}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let model_eos = match tok.eos_token_ids() {
        ids if ids.is_empty() => config.eos_token_id().into_iter().collect(),
        ids => ids,
    };
    let cfg = generation_config(args, model_eos);
    let g = generate(&lm, &prompts, &cfg, device).context("generating")?;
    check_finite(
        &args.model,
        "log-probability",
        g.logprobs.iter().map(Vec::as_slice),
    )?;
    for (prompt, new) in args.prompt.iter().zip(&g.tokens) {
        let text = tok
            .decode_skip_special(new)
            .context("decoding the completion")?;
        println!("{prompt}{text}");
    }
    Ok(())
}
