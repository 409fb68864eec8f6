//! The held-out task reward: continuations sampled from review openings that never enter
//! training, scored by the run's reward, for the base model and every trained copy. Each
//! opening is answered `samples` times by every model with the same sampling streams; the
//! figure is the mean over openings of each opening's mean reward, ± its standard error over
//! openings, and a copy's gain is the paired difference to the base model on the same openings.
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use lmrl_models::{CausalLm, Generation, GenerationConfig, LmTokenizer, Sampling, generate};
use lmrl_rewards::{TextCat, TextScorer};
use serde::{Deserialize, Serialize};

use lmrl_train::{mix, stream};

/// The held-out openings of a run, one JSON object (`text`) per line.
pub const HELDOUT_FILE: &str = "heldout.jsonl";
/// The evaluation table (`eval.json` holds each opening's mean too; `.csv`, `.md` beside it).
pub const EVAL_JSON: &str = "eval.json";
/// Every evaluated continuation with its score.
pub const EVAL_SAMPLES: &str = "eval-samples.jsonl";

/// Rows generated per chunk; two chunks run at once, one per core.
const EVAL_CHUNK: usize = 32;

/// One review opening to continue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Opening {
    pub text: String,
}

/// How the continuations are sampled and scored.
#[derive(Debug, Clone)]
pub struct EvalSettings {
    pub samples: usize,
    pub max_new_tokens: usize,
    pub seed: u64,
    /// The ids generation stops on (EOS first).
    pub eos: Vec<u32>,
    pub pad: u32,
    /// Drop the EOS text before scoring (the run's `imdb.strip_eos`).
    pub strip_eos: bool,
}

/// The run's reward, and the IMDB classifier for P(POS) when the reward is that classifier.
pub struct Scorer<'a> {
    pub reward: &'a dyn TextScorer,
    pub textcat: Option<&'a TextCat>,
}

/// One model's result: a row of `eval.csv` / the printed table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRow {
    /// `before` / `after` training, or `eval` for the standalone command.
    pub stage: String,
    /// `base`, `policy`, `llm1`, `llm2`, or the model path.
    pub agent: String,
    pub openings: usize,
    pub samples: usize,
    pub max_new_tokens: usize,
    /// Mean over openings of the mean task reward of an opening's continuations.
    pub reward: f64,
    /// Standard error of `reward` over openings.
    pub reward_sem: f64,
    /// Mean P(POS) of every continuation (textcat rewards only).
    pub p_pos: Option<f64>,
    /// Mean over openings of this model's minus the base model's opening mean, with its
    /// standard error (paired: the same openings).
    pub gain: Option<f64>,
    pub gain_sem: Option<f64>,
    /// Mean over continuations of 1 − distinct words / words.
    pub repetition: f64,
    pub mean_response_tokens: f64,
    pub seconds: f64,
    /// Each opening's mean reward, in the order of the openings.
    #[serde(default)]
    pub per_opening: Vec<f64>,
}

/// One scored continuation (a line of [`EVAL_SAMPLES`]).
#[derive(Debug, Clone, Serialize)]
pub struct ScoredSample<'a> {
    pub stage: &'a str,
    pub agent: &'a str,
    pub opening: &'a str,
    pub response: String,
    pub reward: f32,
    pub p_pos: Option<f32>,
}

/// Reads openings: JSON lines with `text` (or `prompt`), or plain text, one opening per line;
/// blank lines are skipped. A line that starts with `{` but is not such an object is an error
/// naming the file and line.
pub fn read_openings(path: &Path) -> Result<Vec<Opening>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    #[derive(Deserialize)]
    struct Line {
        text: Option<String>,
        prompt: Option<String>,
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{} line {}", path.display(), i + 1);
        let opening = if line.trim_start().starts_with('{') {
            let v: Line = serde_json::from_str(line)
                .with_context(|| format!("{}: expected {{\"text\": \"…\"}}", at()))?;
            match v.text.or(v.prompt) {
                Some(t) => t,
                None => bail!("{}: the object has no `text` (or `prompt`) field", at()),
            }
        } else {
            line.to_string()
        };
        if opening.is_empty() {
            bail!("{}: empty opening", at());
        }
        out.push(Opening { text: opening });
    }
    if out.is_empty() {
        bail!("{} holds no openings", path.display());
    }
    Ok(out)
}

/// Writes openings as [`HELDOUT_FILE`] lines.
pub fn write_openings(path: &Path, openings: &[Opening]) -> Result<()> {
    let mut text = String::new();
    for o in openings {
        text.push_str(&serde_json::to_string(o)?);
        text.push('\n');
    }
    Ok(lmrl_runs::atomic_write(path, text.as_bytes())?)
}

/// The tokens of each opening (an opening that encodes to nothing is an error naming it).
pub fn encode_openings(tok: &LmTokenizer, openings: &[Opening]) -> Result<Vec<Vec<u32>>> {
    openings
        .iter()
        .map(|o| {
            let ids = tok.encode(&o.text)?;
            if ids.is_empty() {
                bail!("the opening {:?} encodes to no tokens", o.text);
            }
            Ok(ids)
        })
        .collect()
}

/// Samples and scores every opening `s.samples` times with `lm`; the row's `gain` is against
/// `base` (each opening's mean under the base model) when given.
#[allow(clippy::too_many_arguments)]
pub fn evaluate<M: CausalLm>(
    (stage, agent): (&str, &str),
    lm: &M,
    tok: &LmTokenizer,
    openings: &[Opening],
    ids: &[Vec<u32>],
    scorer: &Scorer<'_>,
    s: &EvalSettings,
    base: Option<&[f64]>,
    device: &Device,
) -> Result<(EvalRow, Vec<String>)> {
    let t0 = Instant::now();
    let k = s.samples.max(1);
    // Each opening k times in a row, so sample j of opening i is row i·k + j.
    let rows: Vec<Vec<u32>> = ids
        .iter()
        .flat_map(|p| std::iter::repeat_n(p.clone(), k))
        .collect();
    let tokens = sample(lm, &rows, s, device)?;
    let mut responses = Vec::with_capacity(tokens.len());
    for y in &tokens {
        let kept: Vec<u32> = match s.strip_eos {
            true => y.iter().copied().filter(|t| !s.eos.contains(t)).collect(),
            false => y.clone(),
        };
        responses.push(tok.decode(&kept)?);
    }
    let texts: Vec<String> = responses
        .iter()
        .enumerate()
        .map(|(r, y)| format!("{}{y}", openings[r / k].text))
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let scores = scorer.reward.score_texts(&refs)?;
    let p_pos: Option<Vec<f32>> = scorer
        .textcat
        .as_ref()
        .map(|tc| refs.iter().map(|t| tc.predict(t).p_pos).collect());
    let per_opening: Vec<f64> = scores
        .chunks(k)
        .map(|c| c.iter().map(|&x| f64::from(x)).sum::<f64>() / c.len() as f64)
        .collect();
    let (reward, reward_sem) = mean_sem(&per_opening);
    let (gain, gain_sem) = match base {
        Some(b) if b.len() == per_opening.len() => {
            let d: Vec<f64> = per_opening.iter().zip(b).map(|(x, y)| x - y).collect();
            let (g, e) = mean_sem(&d);
            (Some(g), Some(e))
        }
        _ => (None, None),
    };
    let row = EvalRow {
        stage: stage.into(),
        agent: agent.into(),
        openings: openings.len(),
        samples: k,
        max_new_tokens: s.max_new_tokens,
        reward,
        reward_sem,
        p_pos: p_pos
            .as_ref()
            .map(|p| p.iter().map(|&x| f64::from(x)).sum::<f64>() / p.len().max(1) as f64),
        gain,
        gain_sem,
        repetition: lmrl_train::repetition(&responses),
        mean_response_tokens: tokens.iter().map(Vec::len).sum::<usize>() as f64
            / tokens.len().max(1) as f64,
        seconds: t0.elapsed().as_secs_f64(),
        per_opening,
    };
    let lines = responses
        .into_iter()
        .enumerate()
        .map(|(r, response)| {
            let line = ScoredSample {
                stage,
                agent,
                opening: &openings[r / k].text,
                response,
                reward: scores[r],
                p_pos: p_pos.as_ref().map(|p| p[r]),
            };
            serde_json::to_string(&line).expect("a sample serialises")
        })
        .collect();
    Ok((row, lines))
}

/// Pure sampling (temperature 1, no top-k/top-p, as training samples) of `s.max_new_tokens`
/// tokens for every row, two chunks at a time; row `r` is row `r` of the sampler's streams
/// whatever chunk it falls in, so every model gets the same noise.
fn sample<M: CausalLm>(
    lm: &M,
    rows: &[Vec<u32>],
    s: &EvalSettings,
    device: &Device,
) -> Result<Vec<Vec<u32>>> {
    let cfg = GenerationConfig {
        sampling: Sampling::pure(),
        max_new_tokens: s.max_new_tokens,
        repetition_penalty: 1.0,
        eos_token_ids: s.eos.clone(),
        pad_token_id: s.pad,
        seed: mix(&[s.seed, stream::EVAL]),
        first_row: 0,
        stop_sequences: Vec::new(),
        min_new_tokens: 0,
    };
    let chunks: Vec<(&[Vec<u32>], GenerationConfig)> = rows
        .chunks(EVAL_CHUNK)
        .enumerate()
        .map(|(c, chunk)| {
            let first_row = (c * EVAL_CHUNK) as u64;
            (
                chunk,
                GenerationConfig {
                    first_row,
                    ..cfg.clone()
                },
            )
        })
        .collect();
    let bar = indicatif::ProgressBar::new(rows.len() as u64);
    bar.set_message("held-out evaluation");
    let mut out = Vec::with_capacity(rows.len());
    for pair in chunks.chunks(2) {
        let done: Vec<lmrl_models::Result<Generation>> = std::thread::scope(|scope| {
            let running: Vec<_> = pair
                .iter()
                .map(|(p, c)| scope.spawn(move || generate(lm, p, c, device)))
                .collect();
            running
                .into_iter()
                .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        for g in done {
            let g = g.context("generation failed during the held-out evaluation")?;
            bar.inc(g.tokens.len() as u64);
            out.extend(g.tokens);
        }
    }
    bar.finish_and_clear();
    Ok(out)
}

/// Mean and standard error of the mean (sample std / √n; 0 for one value).
fn mean_sem(xs: &[f64]) -> (f64, f64) {
    let (m, sd) = lmrl_runs::mean_std(xs);
    (m, sd / (xs.len().max(1) as f64).sqrt())
}

/// The rows as a markdown table.
pub fn markdown(rows: &[EvalRow]) -> String {
    let mut s = String::from(
        "| stage | model | openings × samples | task reward (± sem) | gain over base (± sem) | P(POS) | repetition | mean tokens | seconds |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let gain = match (r.gain, r.gain_sem) {
            (Some(g), Some(e)) => format!("{g:+.3} ± {e:.3}"),
            _ => "—".into(),
        };
        let p = r.p_pos.map_or("—".into(), |p| format!("{p:.3}"));
        s.push_str(&format!(
            "| {} | {} | {} × {} | {:+.3} ± {:.3} | {gain} | {p} | {:.3} | {:.1} | {:.1} |\n",
            r.stage,
            r.agent,
            r.openings,
            r.samples,
            r.reward,
            r.reward_sem,
            r.repetition,
            r.mean_response_tokens,
            r.seconds
        ));
    }
    s
}

/// Writes `eval.json`, `eval.csv`, `eval.md` and the samples into `dir`.
pub fn write_eval(dir: &Path, rows: &[EvalRow], samples: &[String]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    lmrl_runs::atomic_write(
        &dir.join(EVAL_JSON),
        serde_json::to_string_pretty(rows)?.as_bytes(),
    )?;
    let mut csv = String::from(
        "stage,agent,openings,samples,max_new_tokens,reward,reward_sem,p_pos,gain,gain_sem,repetition,mean_response_tokens,seconds\n",
    );
    let opt = |x: Option<f64>| x.map_or(String::new(), |v| v.to_string());
    for r in rows {
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            r.stage,
            r.agent.replace([',', '"', '\n'], "_"),
            r.openings,
            r.samples,
            r.max_new_tokens,
            r.reward,
            r.reward_sem,
            opt(r.p_pos),
            opt(r.gain),
            opt(r.gain_sem),
            r.repetition,
            r.mean_response_tokens,
            r.seconds
        ));
    }
    lmrl_runs::atomic_write(&dir.join("eval.csv"), csv.as_bytes())?;
    lmrl_runs::atomic_write(&dir.join("eval.md"), markdown(rows).as_bytes())?;
    let mut text = samples.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    lmrl_runs::atomic_write(&dir.join(EVAL_SAMPLES), text.as_bytes())?;
    Ok(())
}

/// The rows of an earlier `eval.json` in `dir` (none when absent).
pub fn read_eval(dir: &Path) -> Result<Vec<EvalRow>> {
    let p = dir.join(EVAL_JSON);
    if !p.exists() {
        return Ok(Vec::new());
    }
    let text =
        std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
    serde_json::from_str(&text).with_context(|| format!("invalid {}", p.display()))
}

/// The lines of an earlier evaluation's samples in `dir` whose `stage` passes `keep` (none
/// when absent).
pub fn read_samples(dir: &Path, keep: impl Fn(&str) -> bool) -> Result<Vec<String>> {
    let p: PathBuf = dir.join(EVAL_SAMPLES);
    if !p.exists() {
        return Ok(Vec::new());
    }
    let text =
        std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
    #[derive(Deserialize)]
    struct Stage {
        stage: String,
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let s: Stage = serde_json::from_str(line)
            .with_context(|| format!("{} line {}: expected a sample", p.display(), i + 1))?;
        if keep(&s.stage) {
            out.push(line.to_string());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_standard_error_by_hand() {
        let (m, e) = mean_sem(&[1.0, 2.0, 3.0, 6.0]);
        assert_eq!(m, 3.0);
        // sample variance (4 + 1 + 0 + 9) / 3 = 14/3, sem = √(14/3 / 4)
        assert!((e - (14.0f64 / 12.0).sqrt()).abs() < 1e-12);
        assert_eq!(mean_sem(&[0.5]), (0.5, 0.0));
    }

    #[test]
    fn openings_are_read_as_text_or_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("o.txt");
        std::fs::write(
            &p,
            "This movie\r\n\n{\"text\": \"I watched\"}\n{\"prompt\": \"the plot\"}\n",
        )
        .unwrap();
        let o: Vec<String> = read_openings(&p)
            .unwrap()
            .into_iter()
            .map(|o| o.text)
            .collect();
        assert_eq!(o, ["This movie", "I watched", "the plot"]);
        std::fs::write(&p, "fine\n{\"label\": 1}\n").unwrap();
        let e = format!("{:#}", read_openings(&p).unwrap_err());
        assert!(e.contains("o.txt line 2") && e.contains("`text`"), "{e}");
        std::fs::write(&p, "{not json\n").unwrap();
        let e = format!("{:#}", read_openings(&p).unwrap_err());
        assert!(e.contains("o.txt line 1"), "{e}");
        std::fs::write(&p, "\n\n").unwrap();
        assert!(read_openings(&p).is_err());
    }

    #[test]
    fn openings_round_trip_through_the_heldout_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(HELDOUT_FILE);
        let o = vec![
            Opening {
                text: "a \"quoted\" start".into(),
            },
            Opening {
                text: "two\nlines".into(),
            },
        ];
        write_openings(&p, &o).unwrap();
        assert_eq!(read_openings(&p).unwrap(), o);
    }
}
