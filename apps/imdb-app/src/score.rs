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
use crate::task::load_reward;

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
    let cache = lmrl_train::asset_cache(args.cache_dir.as_deref())?;
    let inputs = read_inputs(&args.input)?;
    let outputs: Vec<Output> = if args.reward == "textcat"
        || args.reward == "textcat-prob"
        || args.reward.starts_with("textcat:")
    {
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
                    score: match args.reward.as_str() {
                        "textcat-prob" => s.p_pos,
                        _ => s.logit,
                    },
                }
            })
            .collect()
    } else {
        if inputs.iter().any(|x| x.tokens.is_some()) {
            bail!("`tokens` is only supported with the textcat reward");
        }
        let device = lmrl_train::select_device(args.device.as_deref())?;
        let reward = load_reward(&args.reward, &cache, &device)?;
        let texts: Vec<&str> = inputs.iter().map(|x| x.text.as_str()).collect();
        let scores = reward.score_texts(&texts)?;
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

/// Every line of the input JSONL, in order: a blank line, a line that is not UTF-8 or not an
/// input object is an error naming its line, so output line *n* always answers input line *n*.
fn read_inputs(path: &std::path::Path) -> Result<Vec<Input>> {
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut inputs = Vec::new();
    for (i, line) in BufReader::new(f).split(b'\n').enumerate() {
        let at = || format!("{} line {}", path.display(), i + 1);
        let bytes = line.with_context(|| format!("cannot read {}", at()))?;
        let text = std::str::from_utf8(&bytes).with_context(|| format!("{}: not UTF-8", at()))?;
        let text = text.strip_suffix('\r').unwrap_or(text);
        if text.trim().is_empty() {
            bail!("{}: blank line (expected {{\"text\": ...}})", at());
        }
        let v: Input = serde_json::from_str(text)
            .with_context(|| format!("{}: expected {{\"text\": ..., \"tokens\"?: [...]}}", at()))?;
        inputs.push(v);
    }
    Ok(inputs)
}
