//! `imdb-app generate`: continue a prompt with a trained checkpoint.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use lmrl_models::{AutoLm, GenerationConfig, Sampling, generate};
use lmrl_runs::CheckpointDir;

use crate::cli::GenerateArgs;

/// Rows generated at once by `generate --num N`.
const GENERATE_BATCH: usize = 16;

/// A run directory → its latest checkpoint's copy `agent` (or `policy` for PPO runs); anything
/// else is used as given.
fn model_dir(arg: &str, agent: &str, cache: &lmrl_data::AssetCache) -> Result<PathBuf> {
    let p = Path::new(arg);
    let ckpts = CheckpointDir::new(p.join("checkpoints"));
    if p.is_dir()
        && let Some((_, latest)) = ckpts.latest()?
    {
        for name in [agent, "policy"] {
            if latest.join(name).join("config.json").is_file() {
                lmrl_train::verify_model(&latest.join(name))?;
                return Ok(latest.join(name));
            }
        }
        bail!("{} has no copy named `{agent}`", latest.display());
    }
    if p.is_dir() && !p.join("config.json").is_file() {
        bail!(
            "{} is neither a checkpoint (config.json) nor a run directory (checkpoints/)",
            p.display()
        );
    }
    Ok(lmrl_train::resolve_path_or_asset(cache, arg)?)
}

pub fn run(args: &GenerateArgs) -> Result<ExitCode> {
    let cache = lmrl_train::asset_cache(args.cache_dir.as_deref())?;
    let dir = model_dir(&args.model, &args.agent, &cache)?;
    let (tok, _) = lmrl_train::load_tokenizer(&dir)?;
    let device = lmrl_train::select_device(args.device.as_deref())?;
    device.seed(args.seed);
    let lm = AutoLm::from_pretrained(&dir, &device)
        .with_context(|| format!("cannot load {}", dir.display()))?;
    let ids = tok.encode(&args.prompt)?;
    if ids.is_empty() {
        bail!("the prompt encodes to no tokens");
    }
    let cfg = GenerationConfig {
        sampling: if args.greedy {
            Sampling::Greedy
        } else {
            Sampling::pure()
        },
        max_new_tokens: args.max_new_tokens,
        repetition_penalty: 1.0,
        eos_token_ids: tok.eos_token_ids(),
        pad_token_id: tok.pad_token_id().unwrap_or(0),
        seed: args.seed,
        first_row: 0,
        stop_sequences: Vec::new(),
        min_new_tokens: 0,
    };
    // In batches of at most GENERATE_BATCH rows, each row seeded by its index, so that any
    // `--num` takes bounded memory and gives the samples one batch of `--num` rows would.
    let num = args.num.max(1);
    let mut done = 0;
    while done < num {
        let rows = (num - done).min(GENERATE_BATCH);
        let batch = GenerationConfig {
            first_row: done as u64,
            ..cfg.clone()
        };
        let g = generate(&lm, &vec![ids.clone(); rows], &batch, &device)?;
        for y in &g.tokens {
            println!("{}{}", args.prompt, tok.decode(y)?);
        }
        done += rows;
    }
    Ok(ExitCode::SUCCESS)
}
