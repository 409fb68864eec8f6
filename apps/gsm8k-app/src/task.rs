//! The math task: answer a word problem after the paper's 1-shot exemplar; the reward is the
//! answer checker (1 when the response's final number equals the problem's ground truth);
//! CORY's observer sees the same prompt with `Reference: <pioneer answer>` before `Answer:`.
//! Before and after training, every copy's pass@k on the dev split is measured (the test split
//! is left to `eval --split test`).
use std::path::Path;

use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use lmrl_models::{CausalLm, GenerationConfig, LmTokenizer, ModelError, Sampling};
use lmrl_rewards::{
    AnswerChecker, AnswerContext, Reward, RewardError, Sample, cut_continuation,
    extract_response_answer,
};
use lmrl_rl::Prompt;
use lmrl_train::{Stage, Task, TaskEnv, TaskError, TrainConfig};

use crate::config::{Gsm8kConfig, Gsm8kSettings};
use crate::eval::{
    EvalRow, EvalSettings, end_ids, eval_row, markdown, write_csv, write_question_results,
};
use crate::setup::{self, MathTask, Split};

/// Machine-readable evaluation rows (the source of `eval.csv` / `eval.md`, kept across resumes).
pub const EVAL_JSON: &str = "eval.json";

/// What a problem's prompt carries: its question (for the observer template) and its ground
/// truth (for the checker).
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub question: String,
    pub answer: AnswerContext,
}

/// The answer checker on each problem's ground truth.
struct Checker;

impl Reward<Problem> for Checker {
    fn name(&self) -> &str {
        "gsm8k"
    }

    fn score(&self, samples: &[Sample<'_, Problem>]) -> Result<Vec<f32>, RewardError> {
        let inner: Vec<Sample<'_, AnswerContext>> = samples
            .iter()
            .map(|s| Sample::new(s.prompt, s.response, &s.context.answer))
            .collect();
        AnswerChecker.score(&inner)
    }
}

/// The observer's reference: the pioneer's answer (special tokens already dropped) cut at an
/// invented "Question:" and trimmed, so the observer sees the answer, not a made-up follow-up
/// problem.
pub fn reference_text(pioneer_response: &str) -> String {
    cut_continuation(pioneer_response).trim().to_string()
}

/// Per-question outputs of the evaluations a run makes: `eval-questions/<stage>-<copy>.jsonl`.
pub const EVAL_QUESTIONS_DIR: &str = "eval-questions";

/// The math task of one run.
pub struct GsmTask {
    prompts: Vec<Prompt<Problem>>,
    /// The dev questions evaluated before and after training.
    dev: Vec<MathTask>,
    dataset: &'static str,
    settings: Gsm8kSettings,
    tokenizer: LmTokenizer,
    /// Puts questions (and, for CORY's observer, the pioneer's answer) to the model.
    prompter: setup::Prompter,
    device: Device,
    /// The ids generation stops on (EOS first).
    eos: Vec<u32>,
    pad: u32,
    seed: u64,
    generation_batch_size: usize,
    /// Token sequences that end a response ([`setup::stop_sequences`] of the stop strings).
    stop_sequences: Vec<Vec<u32>>,
}

/// Tokens a prompt must leave free in the context: the response, and for CORY the observer's
/// `Reference: <pioneer response>` line as well (re-encoded text may take a few more tokens).
fn context_room(cfg: &Gsm8kConfig) -> usize {
    match cfg.run.algo {
        // Saturating: any room past usize::MAX is past every context, and refused as such.
        lmrl_train::Algo::Cory => cfg
            .gsm8k
            .max_new_tokens
            .saturating_mul(3)
            .saturating_add(16),
        _ => cfg.gsm8k.max_new_tokens,
    }
}

impl GsmTask {
    /// The task of the settings `cfg`: problems read and split, prompts that fit the context.
    pub fn new(cfg: &Gsm8kConfig, env: &TaskEnv<'_>) -> Result<Self> {
        let t = &cfg.gsm8k;
        let problems = setup::load_problems(env.cache, &t.data, t.data_format)?;
        let dataset = setup::source_name(&problems);
        let parts = setup::parts(problems, t.split_spec())?;
        let room = context_room(cfg);
        let max_pos = env.model.max_positions;
        if room >= max_pos {
            bail!(
                "gsm8k.max_new_tokens = {} leaves no room for a prompt: a response needs {room} \
                 tokens of the model's {max_pos}-token context",
                t.max_new_tokens
            );
        }
        let prompter = setup::Prompter::new(t.prompt_style, env.tokenizer)?;
        let (train, dropped) =
            setup::make_tasks(&parts.train, env.tokenizer, &prompter, max_pos, room)?;
        let dev_p: Vec<_> = parts.dev.into_iter().take(t.eval_limit).collect();
        let (dev, dropped_dev) =
            setup::make_tasks(&dev_p, env.tokenizer, &prompter, max_pos, t.max_new_tokens)?;
        if env.rank == 0 && dropped + dropped_dev > 0 {
            eprintln!(
                "note: {dropped} training and {dropped_dev} dev questions skipped: their prompts \
                 leave fewer than {room} / {} tokens of the model's {max_pos}-token context",
                t.max_new_tokens
            );
        }
        let batch = cfg.prompts_drawn();
        if train.len() < batch {
            bail!(
                "only {} {dataset} training questions fit, fewer than one batch of {batch}",
                train.len(),
            );
        }
        if env.rank == 0 {
            eprintln!(
                "{dataset}: {} training questions ({} iterations per epoch of {batch} prompts), \
                 {} held-out dev questions evaluated ({} test questions left for `eval --split test`)",
                train.len(),
                train.len() / batch,
                dev.len(),
                parts.test.len(),
            );
        }
        let stop_sequences = setup::stop_sequences(env.tokenizer, &t.stop_strings)?;
        let prompts = train
            .into_iter()
            .map(|m| Prompt {
                text: m.prompt,
                ids: m.prompt_ids,
                context: Problem {
                    question: m.question,
                    answer: AnswerContext::new(m.truth),
                },
            })
            .collect();
        Ok(Self {
            prompts,
            dev,
            dataset,
            settings: t.clone(),
            tokenizer: env.tokenizer.clone(),
            prompter,
            device: env.device.clone(),
            eos: end_ids(env.tokenizer.eos_token_ids(), env.model.eos_token_id),
            pad: env.pad_id,
            seed: cfg.run.seed,
            generation_batch_size: cfg.run.generation_batch_size,
            stop_sequences,
        })
    }

    /// Builds the task for the training loop (errors as the loop's task errors).
    pub fn build(cfg: &Gsm8kConfig, env: &TaskEnv<'_>) -> std::result::Result<Self, TaskError> {
        Self::new(cfg, env).map_err(|e| e.into_boxed_dyn_error())
    }

    fn eval_settings(&self) -> EvalSettings {
        EvalSettings {
            k: self.settings.eval_k,
            temperature: self.settings.eval_temperature,
            max_new_tokens: self.settings.max_new_tokens,
            generation_batch_size: self.generation_batch_size,
            seed: self.seed,
            eos: self.eos.clone(),
            pad: self.pad,
            stop_sequences: self.stop_sequences.clone(),
        }
    }

    /// pass@k of each copy on the dev questions, added to `out`'s evaluation table: the
    /// "before" rows start it (a run started again in place replaces those of its first try),
    /// the "after" rows replace any earlier "after" rows and keep the "before" ones (a resume).
    fn evaluate_copies<M: CausalLm>(
        &self,
        stage: Stage,
        copies: &[(&str, &M)],
        out: &Path,
    ) -> Result<()> {
        if self.settings.eval_limit == 0 || self.dev.is_empty() {
            return Ok(());
        }
        let stage_name = match stage {
            Stage::Before => "before",
            Stage::After => "after",
        };
        let mut rows: Vec<EvalRow> = match stage {
            Stage::Before => Vec::new(),
            Stage::After => read_eval_rows(out)?
                .into_iter()
                .filter(|r| r.stage == "before")
                .collect(),
        };
        for (name, lm) in copies {
            let (row, results) = eval_row(
                stage_name,
                name,
                self.dataset,
                Split::Dev,
                *lm,
                &self.tokenizer,
                &self.dev,
                &self.eval_settings(),
                &self.device,
            )?;
            let file = out
                .join(EVAL_QUESTIONS_DIR)
                .join(format!("{stage_name}-{name}.jsonl"));
            write_question_results(&file, &results)?;
            eprintln!(
                "{stage_name} training, {name}: pass@1 {:.3}, pass@{} {:.3} on {} {} dev questions",
                row.pass_at_1, row.k, row.pass_at_k, row.questions, self.dataset
            );
            rows.push(row);
        }
        write_eval(out, &rows)?;
        if stage == Stage::After {
            println!(
                "pass@k on {} held-out {} dev questions (answer checker, {} prompt):\n\n{}",
                self.dev.len(),
                self.dataset,
                match self.settings.prompt_style {
                    crate::config::PromptStyle::OneShot => "1-shot",
                    crate::config::PromptStyle::ZeroShot => "0-shot",
                    crate::config::PromptStyle::Chat => "chat",
                },
                markdown(&rows)
            );
        }
        Ok(())
    }
}

fn read_eval_rows(out: &Path) -> Result<Vec<EvalRow>> {
    let p = out.join(EVAL_JSON);
    if !p.exists() {
        return Ok(Vec::new());
    }
    let text =
        std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
    serde_json::from_str(&text).with_context(|| format!("invalid {}", p.display()))
}

/// `eval.json`, `eval.csv` and `eval.md` (the markdown table).
fn write_eval(out: &Path, rows: &[EvalRow]) -> Result<()> {
    lmrl_runs::atomic_write(
        &out.join(EVAL_JSON),
        serde_json::to_string_pretty(rows)?.as_bytes(),
    )?;
    write_csv(&out.join("eval.csv"), rows)?;
    lmrl_runs::atomic_write(&out.join("eval.md"), markdown(rows).as_bytes())?;
    Ok(())
}

impl<M: CausalLm> Task<M> for GsmTask {
    type Context = Problem;

    fn prompts(&self) -> &[Prompt<Problem>] {
        &self.prompts
    }

    fn reward(&self) -> &dyn Reward<Problem> {
        &Checker
    }

    fn observer_prompt(
        &self,
        prompt: &Prompt<Problem>,
        pioneer_response: &str,
    ) -> std::result::Result<String, TaskError> {
        self.prompter
            .observer(&prompt.context.question, &reference_text(pioneer_response))
            .map_err(|e| e.into_boxed_dyn_error())
    }

    /// Pure sampling at the configured temperature (TRL's `top_k=0, top_p=1.0,
    /// do_sample=True`), stopping at EOS, a stop string or `max_new_tokens`.
    fn generation(&self, _iteration: usize, seed: u64) -> GenerationConfig {
        GenerationConfig {
            sampling: Sampling::Sample {
                temperature: self.settings.temperature,
                top_k: 0,
                top_p: 1.0,
            },
            max_new_tokens: self.settings.max_new_tokens,
            repetition_penalty: self.settings.repetition_penalty,
            eos_token_ids: self.eos.clone(),
            pad_token_id: self.pad,
            seed,
            first_row: 0,
            stop_sequences: self.stop_sequences.clone(),
            min_new_tokens: self.settings.min_new_tokens,
        }
    }

    /// Without special tokens: the EOS marker is not part of the answer.
    fn decode(
        &self,
        tokenizer: &LmTokenizer,
        ids: &[u32],
    ) -> std::result::Result<String, ModelError> {
        tokenizer.decode_skip_special(ids)
    }

    fn sample_fields(
        &self,
        prompt: &Prompt<Problem>,
        response: &str,
    ) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("question".into(), prompt.context.question.as_str().into());
        m.insert(
            "extracted".into(),
            extract_response_answer(response).map_or(serde_json::Value::Null, Into::into),
        );
        m.insert("truth".into(), prompt.context.answer.answer.as_str().into());
        m
    }

    fn evaluate(
        &self,
        stage: Stage,
        copies: &[(&str, &M)],
        out: &Path,
    ) -> std::result::Result<(), TaskError> {
        self.evaluate_copies(stage, copies, out)
            .map_err(|e| e.into_boxed_dyn_error())
    }
}
