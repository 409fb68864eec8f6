//! `imdb-app score`: a stable scoring contract for external checks. Input JSONL lines hold
//! `text` and optionally `tokens` (a list of strings that replaces the built-in tokenizer,
//! textcat only); each output line holds `p_pos` (P(positive), or null for a reward without a
//! probability, as VADER) and `score` (the value training uses).
use std::io::{BufRead, BufReader, Write};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use lmrl_rewards::{TextCat, TextScorer};
use serde::{Deserialize, Serialize};

use crate::cli::ScoreArgs;
use crate::setup;

#[derive(Deserialize)]
struct Input {
    text: String,
    tokens: Option<Vec<String>>,
}

#[derive(Serialize)]
struct Output {
    p_pos: Option<f32>,
    score: f32,
}

pub fn run(args: &ScoreArgs) -> Result<ExitCode> {
    let cache = lmrl_runs::asset_cache(args.cache_dir.as_deref())?;
    let f = std::fs::File::open(&args.input)
        .with_context(|| format!("cannot open {}", args.input.display()))?;
    let mut inputs = Vec::new();
    for (i, line) in BufReader::new(f).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read {}", args.input.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let v: Input = serde_json::from_str(&line).with_context(|| {
            format!(
                "{} line {}: expected {{\"text\": ..., \"tokens\"?: [...]}}",
                args.input.display(),
                i + 1
            )
        })?;
        inputs.push(v);
    }
    let outputs: Vec<Output> = if args.reward == "textcat" || args.reward.starts_with("textcat:") {
        let dir = match args.reward.split_once(':') {
            Some((_, d)) => d.into(),
            None => cache.resolve("imdb-textcat")?,
        };
        let tc = TextCat::load(&dir)?;
        inputs
            .iter()
            .map(|x| {
                let s = match &x.tokens {
                    Some(t) => tc.predict_tokens(t),
                    None => tc.predict(&x.text),
                };
                Output {
                    p_pos: Some(s.p_pos),
                    score: s.logit,
                }
            })
            .collect()
    } else {
        if inputs.iter().any(|x| x.tokens.is_some()) {
            bail!("`tokens` is only supported with the textcat reward");
        }
        let device = crate::select_device();
        let reward = setup::load_reward(&args.reward, &cache, &device)?;
        let texts: Vec<String> = inputs.iter().map(|x| x.text.clone()).collect();
        let batch: Vec<&str> = texts.iter().map(String::as_str).collect();
        let scores = reward.score_texts(&batch)?;
        // VADER has no probability, and the DistilBERT reward exposes only the POSITIVE logit
        // (P(POS) would need both logits): p_pos is null for both.
        scores
            .into_iter()
            .map(|s| Output {
                p_pos: None,
                score: s,
            })
            .collect()
    };
    let mut text = Vec::new();
    for o in &outputs {
        serde_json::to_writer(&mut text, o)?;
        text.write_all(b"\n")?;
    }
    lmrl_runs::atomic_write(&args.out, &text)?;
    eprintln!("scored {} texts into {}", outputs.len(), args.out.display());
    Ok(ExitCode::SUCCESS)
}
