//! `imdb-app eval`: the held-out task reward of a run's copies and its base model, outside
//! the training loop ([`crate::eval`]).
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use lmrl_models::AutoLm;
use lmrl_runs::CheckpointDir;

use crate::cli::EvalArgs;
use crate::config::ImdbConfig;
use crate::eval::{self, EvalSettings};
use crate::task::{load_reward, load_textcat};

/// Continuation length when neither `--max-new-tokens` nor a run says (the default run's
/// longest response).
const DEFAULT_TOKENS: usize = 15;

/// What `--model` names: the models to evaluate and, for a run or one of its checkpoints, the
/// run's directory and settings.
struct Target {
    /// (name, model directory or file), in order.
    models: Vec<(String, PathBuf)>,
    run: Option<(PathBuf, ImdbConfig)>,
}

/// The copies of a checkpoint directory: every subdirectory with a `config.json`, by name.
fn copies_of(ckpt: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let entries =
        std::fs::read_dir(ckpt).with_context(|| format!("cannot read {}", ckpt.display()))?;
    for e in entries {
        let p = e
            .with_context(|| format!("cannot read {}", ckpt.display()))?
            .path();
        if p.join("config.json").is_file() {
            lmrl_train::verify_model(&p)?;
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            out.push((name.unwrap_or_default(), p));
        }
    }
    out.sort();
    if out.is_empty() {
        bail!(
            "{} holds no model (no subdirectory with config.json)",
            ckpt.display()
        );
    }
    Ok(out)
}

fn resolve(cache: &lmrl_data::AssetCache, model: &str) -> Result<Target> {
    let p = PathBuf::from(model);
    if p.is_dir() && p.join(lmrl_train::CONFIG_FILE).is_file() && p.join("checkpoints").is_dir() {
        let cfg: ImdbConfig = lmrl_train::read_config(&p.join(lmrl_train::CONFIG_FILE))?;
        let (_, ckpt) = CheckpointDir::new(p.join("checkpoints"))
            .latest()?
            .with_context(|| format!("{} has no checkpoint", p.display()))?;
        return Ok(Target {
            models: copies_of(&ckpt)?,
            run: Some((p, cfg)),
        });
    }
    if p.is_dir() && p.join(lmrl_runs::STATE_FILE).is_file() {
        // `<run>/checkpoints/iter-N`: its run's settings, when the run directory is there.
        let run = p.parent().and_then(Path::parent).map(Path::to_path_buf);
        let run = match run.filter(|r| r.join(lmrl_train::CONFIG_FILE).is_file()) {
            Some(r) => {
                let cfg = lmrl_train::read_config(&r.join(lmrl_train::CONFIG_FILE))?;
                Some((r, cfg))
            }
            None => None,
        };
        return Ok(Target {
            models: copies_of(&p)?,
            run,
        });
    }
    Ok(Target {
        models: vec![(
            model.to_string(),
            lmrl_train::resolve_path_or_asset(cache, model)?,
        )],
        run: None,
    })
}

pub fn run(args: &EvalArgs) -> Result<ExitCode> {
    if args.samples == 0 || args.max_new_tokens == Some(0) {
        bail!("--samples and --max-new-tokens must be at least 1");
    }
    let cache = lmrl_train::asset_cache(args.cache_dir.as_deref())?;
    let target = resolve(&cache, &args.model)?;
    let settings = target.run.as_ref().map(|(_, c)| &c.imdb);
    let prompts = match (&args.prompts, &target.run) {
        (Some(p), _) => p.clone(),
        (None, Some((dir, _))) if dir.join(eval::HELDOUT_FILE).is_file() => {
            dir.join(eval::HELDOUT_FILE)
        }
        (None, Some((dir, _))) => bail!(
            "{} has no {} (a run of an earlier version, or --heldout-reviews 0): give --prompts",
            dir.display(),
            eval::HELDOUT_FILE
        ),
        (None, None) => bail!("--prompts is needed when --model is not a run directory"),
    };
    let openings = eval::read_openings(&prompts)?;
    let base_name = args
        .base
        .clone()
        .or_else(|| target.run.as_ref().map(|(_, c)| c.run.model.clone()));
    let mut models = Vec::new();
    if let Some(b) = &base_name {
        models.push((
            "base".to_string(),
            lmrl_train::resolve_path_or_asset(&cache, b)?,
        ));
    }
    models.extend(target.models);
    let reward_spec = args
        .reward
        .clone()
        .or_else(|| settings.map(|s| s.reward.clone()))
        .unwrap_or_else(|| "textcat".into());
    let out = match (&args.out, &target.run) {
        (Some(o), _) => o.clone(),
        (None, Some((dir, _))) => {
            let stem = prompts
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned());
            dir.join(format!("eval-{}", stem.unwrap_or_else(|| "prompts".into())))
        }
        (None, None) => PathBuf::from("imdb-eval"),
    };
    let device = lmrl_train::select_device(args.device.as_deref())?;
    device.seed(args.seed);
    let reward = load_reward(&reward_spec, &cache, &device)?;
    let textcat = load_textcat(&reward_spec, &cache)?;
    let scorer = eval::Scorer {
        reward: &*reward,
        textcat: textcat.as_ref(),
    };
    let max_new_tokens = args
        .max_new_tokens
        .or(settings.map(|s| s.response_tokens_max))
        .unwrap_or(DEFAULT_TOKENS);
    let (mut rows, mut samples) = (Vec::new(), Vec::new());
    let mut base: Option<Vec<f64>> = None;
    for (name, path) in &models {
        let (tok, _) = lmrl_train::load_tokenizer(path)?;
        let lm = AutoLm::from_pretrained(path, &device)
            .with_context(|| format!("cannot load {}", path.display()))?;
        let s = EvalSettings {
            samples: args.samples,
            max_new_tokens,
            seed: args.seed,
            eos: tok.eos_token_ids(),
            pad: tok.pad_token_id().unwrap_or(0),
            strip_eos: settings.is_some_and(|s| s.strip_eos),
        };
        let ids = eval::encode_openings(&tok, &openings)?;
        let (row, lines) = eval::evaluate(
            ("eval", name),
            &lm,
            &tok,
            &openings,
            &ids,
            &scorer,
            &s,
            base.as_deref(),
            &device,
        )?;
        eprintln!(
            "{name}: task reward {:+.3} ± {:.3} ({:.0} s)",
            row.reward, row.reward_sem, row.seconds
        );
        if name == "base" {
            base = Some(row.per_opening.clone());
        }
        rows.push(row);
        samples.extend(lines);
    }
    eval::write_eval(&out, &rows, &samples)?;
    println!(
        "held-out task reward on {} ({} openings × {} samples, {max_new_tokens} tokens, reward {}):\n\n{}\nwritten to {}",
        prompts.display(),
        openings.len(),
        args.samples,
        reward_spec,
        eval::markdown(&rows),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}
