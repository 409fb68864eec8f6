//! The training loop: PPO (one `lmrl_rl::PpoAgent`) or CORY (`lmrl_rl::CoryTrainer`: pioneer +
//! observer, role exchange) with the answer-checker reward, pass@k before and after, metrics,
//! samples, plots, checkpoints, exact resume and Ctrl-C handling. The algorithms live in
//! `lmrl-rl`; this file supplies the GSM8K data, templates and reward, and the bookkeeping.
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use burn::module::Module;
use burn::tensor::Device;
use lmrl_data::gsm8k_observer_prompt;
use lmrl_models::{
    CausalLm, GenerationConfig, LmTokenizer, LmWithValueHead, Sampling, apply_lora, merge_lora,
    save_pretrained,
};
use lmrl_rewards::{check_answer, cut_continuation, extract_response_answer};
use lmrl_rl::cory::EnvError;
use lmrl_rl::ppo::{PpoAgent, PpoConfig};
use lmrl_rl::{CoryConfig, CoryEnv, CoryTrainer, GenerationPurpose, RewardMode, Role};
use lmrl_runs::{
    CheckpointDir, Learner, LearnerKind, MetricRow, Outcome, POLICY, SamplesLog, atomic_write,
    cory_rows, generate_chunked, mean, metric_row, write_toml,
};
use serde::Serialize;

use crate::cli::TrainArgs;
use crate::config::{Algo, RunConfig};
use crate::eval::{EvalRow, EvalSettings, eval_row, markdown, write_csv};
use crate::setup::{self, Split, Task};
use crate::state::{DataOrder, mix, stream};

/// Machine-readable evaluation rows (the source of `eval.csv` / `eval.md`, kept across resumes).
pub const EVAL_JSON: &str = "eval.json";

/// Resolves the configuration from defaults, `--config`, flags (or the run being resumed) and
/// trains. Exit code 0 when done, 130 when stopped by Ctrl-C, 2 for invalid settings.
pub fn run_cli(args: &TrainArgs) -> Result<ExitCode> {
    lmrl_runs::run_training(resolve(args), |(cfg, out, resume)| {
        train(&cfg, &out, resume, args.run.cache_dir.as_deref())
    })
}

/// The run's configuration, output directory and whether it resumes.
pub fn resolve(args: &TrainArgs) -> Result<(RunConfig, PathBuf, bool)> {
    Ok(lmrl_runs::resolve_run(
        &args.run,
        &args.ppo,
        args.changes_settings(),
        |cfg| args.apply(cfg),
    )?)
}

/// LoRA runs only: burn's record of the whole adapted policy with its value head (frozen base,
/// adapter factors A and B), next to the merged Hugging Face weights. The merged weights alone
/// cannot give the adapters back, and exact resume needs them.
pub const LORA_FILE: &str = "lora_model.bpk";

/// Everything the loop needs that does not change.
struct Env {
    cfg: RunConfig,
    ppo: PpoConfig,
    tok: LmTokenizer,
    train: Vec<Task>,
    test: Vec<Task>,
    dataset: &'static str,
    order: DataOrder,
    reference: CausalLm,
    device: Device,
    train_device: Device,
    eos: Option<u32>,
    pad_id: u32,
}

/// The TRL `PPOConfig` of this run.
pub fn ppo_config(cfg: &RunConfig) -> PpoConfig {
    PpoConfig {
        learning_rate: cfg.lr(),
        batch_size: cfg.batch_size,
        mini_batch_size: cfg.mini_batch_size,
        gradient_accumulation_steps: cfg.grad_accum(),
        ppo_epochs: cfg.ppo_epochs,
        forward_batch_size: Some(cfg.generation_batch_size.min(cfg.batch_size)),
        init_kl_coef: cfg.init_kl_coef,
        adap_kl_ctrl: cfg.target_kl.is_some(),
        target: cfg.target_kl.unwrap_or(6.0),
        horizon: cfg.kl_horizon,
        use_score_scaling: cfg.score_norm,
        use_score_norm: cfg.score_norm,
        max_grad_norm: cfg.max_grad_norm.map(|x| x as f32),
        seed: cfg.seed,
        ..PpoConfig::default()
    }
}

/// The CORY settings of this run: R = r₁ + r₂ (paper Eq. 4), role exchange every
/// `swap_period` iterations. The observer's plain-query measurement is off: the metrics'
/// `pioneer_*` columns repeat the training-role values and the held-out pass@k is the
/// role-free measure (docs/gsm8k-app.md), so the extra generation would cost time for nothing.
pub fn cory_config(cfg: &RunConfig) -> CoryConfig {
    CoryConfig {
        swap_every: cfg.swap_period,
        reset_state_on_swap: cfg.reset_state_on_swap,
        reward_mode: RewardMode::Sum,
        eval_query_only: false,
    }
}

/// Tokens a prompt must leave free in the context: the response, and for CORY the observer's
/// `Reference: <pioneer response>` line as well (re-encoded text may take a few more tokens).
fn context_room(cfg: &RunConfig) -> usize {
    match cfg.algo {
        Algo::Ppo => cfg.max_new_tokens,
        Algo::Cory => 3 * cfg.max_new_tokens + 16,
    }
}

/// Trains `cfg` into `out` (a fresh directory, or the run to resume).
pub fn train(
    cfg: &RunConfig,
    out: &Path,
    resume: bool,
    cache_dir: Option<&Path>,
) -> Result<Outcome> {
    let (ckpts, latest) = lmrl_runs::open_run(out, resume, cfg.checkpoint_every)?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    write_toml(&out.join(lmrl_runs::CONFIG_FILE), cfg)?;

    let cache = lmrl_runs::asset_cache(cache_dir)?;
    let device = crate::select_device();
    device.seed(cfg.seed);
    let train_device = device.clone().autodiff();
    let model_path = lmrl_runs::resolve_path_or_asset(&cache, &cfg.model)?;
    let (tok, model_config) = lmrl_runs::load_tokenizer(&model_path)?;
    let problems = setup::load_problems(&cache, &cfg.data, cfg.data_format)?;
    let dataset = setup::source_name(&problems);
    let (train_p, test_p) =
        lmrl_data::train_test_split(problems, cfg.test_fraction, cfg.split_seed)?;
    let room = context_room(cfg);
    let max_pos = model_config.max_positions();
    let (train, dropped) = setup::make_tasks(&train_p, &tok, max_pos, room)?;
    let test_p: Vec<_> = test_p.into_iter().take(cfg.eval_limit).collect();
    let (test, dropped_test) = setup::make_tasks(&test_p, &tok, max_pos, cfg.max_new_tokens)?;
    if dropped + dropped_test > 0 {
        eprintln!(
            "note: {dropped} training and {dropped_test} test questions skipped: their prompts \
             leave fewer than {room} / {} tokens of the model's {max_pos}-token context",
            cfg.max_new_tokens
        );
    }
    if train.len() < cfg.batch_size {
        bail!(
            "only {} {dataset} training questions fit, fewer than one batch of {}",
            train.len(),
            cfg.batch_size
        );
    }
    eprintln!(
        "{dataset}: {} training questions ({} iterations per epoch of {}), {} test questions \
         evaluated; policy {}{}",
        train.len(),
        train.len() / cfg.batch_size,
        cfg.batch_size,
        test.len(),
        model_path.display(),
        if cfg.lora_rank > 0 {
            format!(" with LoRA rank {}", cfg.lora_rank)
        } else {
            String::new()
        }
    );
    let base = lmrl_models::load_causal_lm(&model_path, &train_device)
        .with_context(|| format!("cannot load the policy {}", model_path.display()))?;
    let reference = base.valid();
    let ppo = ppo_config(cfg);
    let env = Env {
        cfg: cfg.clone(),
        order: DataOrder::new(train.len(), cfg.batch_size, cfg.seed),
        ppo: ppo.clone(),
        eos: tok.eos_token_id().or(model_config.eos_token_id()),
        pad_id: lmrl_runs::pad_id(&tok, &model_config),
        tok,
        train,
        test,
        dataset,
        reference,
        device: device.clone(),
        train_device: train_device.clone(),
    };

    let mut eval_rows: Vec<EvalRow> = if resume {
        read_eval_rows(out)?
            .into_iter()
            .filter(|r| r.stage == "before")
            .collect()
    } else {
        Vec::new()
    };
    if cfg.eval_limit > 0 && !env.test.is_empty() && eval_rows.is_empty() {
        let row = evaluate_model(&env, "before", "base", &env.reference)?;
        eprintln!(
            "before training: pass@1 {:.3}, pass@{} {:.3} on {} {} test questions",
            row.pass_at_1, row.k, row.pass_at_k, row.questions, env.dataset
        );
        eval_rows.push(row);
        write_eval(out, &eval_rows)?;
    }

    let (mut learner, start) = match &latest {
        None => {
            let agent = || -> Result<PpoAgent> {
                let model = LmWithValueHead::new(with_lora(&env, base.clone())?, &train_device);
                Ok(PpoAgent::new(model, ppo.clone(), &train_device)?)
            };
            (Learner::fresh(learner_kind(&env), agent)?, 0)
        }
        Some((_, dir)) => restore(&env, &base, dir)?,
    };
    drop(base);
    if !lmrl_runs::announce_start(out, start, cfg.iterations, resume) {
        finish(&env, out, &learner, eval_rows)?;
        return Ok(Outcome::Finished);
    }
    let (mut metrics, mut samples) = lmrl_runs::open_logs(out, resume.then_some(start))?;

    for it in start..cfg.iterations {
        let t0 = Instant::now();
        let rows = match &mut learner {
            Learner::Ppo(agent) => ppo_iteration(&env, agent, it, &mut samples)?,
            // The role exchange after every `swap_period` iterations (spec §2 step 8) happens
            // inside `CoryTrainer::iteration`.
            Learner::Cory(trainer) => cory_iteration(&env, trainer, it, &mut samples)?,
        };
        let secs = t0.elapsed().as_secs_f64();
        let mut line = format!("it {:>3}/{} |", it + 1, cfg.iterations);
        for mut r in rows {
            r.seconds = secs;
            line.push_str(&format!(
                " {} ({}) r {:.3} kl {:.3} β {:.4} |",
                r.agent, r.role, r.task_reward, r.kl, r.beta
            ));
            metrics.append(&r)?;
        }
        eprintln!("{line} {secs:.1} s");
        let done = it + 1;
        let interrupted = lmrl_runs::interrupted();
        if lmrl_runs::checkpoint_due(done, cfg.checkpoint_every, cfg.iterations, interrupted) {
            save_checkpoint(&env, &ckpts, &learner, done)?;
        }
        if interrupted {
            return Ok(lmrl_runs::stop_interrupted(
                "gsm8k-app",
                &ckpts,
                out,
                done,
                cfg.iterations,
            )?);
        }
    }
    finish(&env, out, &learner, eval_rows)?;
    Ok(Outcome::Finished)
}

/// Attaches LoRA adapters when the run asks for them.
fn with_lora(env: &Env, lm: CausalLm) -> Result<CausalLm> {
    if env.cfg.lora_rank == 0 {
        return Ok(lm);
    }
    let lc = setup::lora_config(env.cfg.lora_rank, env.cfg.lora_alpha, &lm.config());
    apply_lora(lm, &lc).context("cannot attach LoRA adapters")
}

fn eval_settings(env: &Env) -> EvalSettings {
    EvalSettings {
        k: env.cfg.eval_k,
        temperature: env.cfg.eval_temperature,
        max_new_tokens: env.cfg.max_new_tokens,
        generation_batch_size: env.cfg.generation_batch_size,
        seed: env.cfg.seed,
        eos: env.eos,
        pad: env.pad_id,
    }
}

fn evaluate_model(env: &Env, stage: &str, agent: &str, lm: &CausalLm) -> Result<EvalRow> {
    let (row, _) = eval_row(
        stage,
        agent,
        env.dataset,
        Split::Test,
        lm,
        &env.tok,
        &env.test,
        &eval_settings(env),
        &env.device,
    )?;
    Ok(row)
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
    atomic_write(
        &out.join(EVAL_JSON),
        serde_json::to_string_pretty(rows)?.as_bytes(),
    )?;
    write_csv(&out.join("eval.csv"), rows)?;
    atomic_write(&out.join("eval.md"), markdown(rows).as_bytes())?;
    Ok(())
}

#[derive(Serialize)]
struct Summary {
    iterations: usize,
    dataset: &'static str,
    final_rows: Vec<MetricRow>,
    eval: Vec<EvalRow>,
}

/// Evaluates every copy after training, writes the evaluation table, plots and summary.
fn finish(env: &Env, out: &Path, learner: &Learner, mut eval_rows: Vec<EvalRow>) -> Result<()> {
    if env.cfg.eval_limit > 0 && !env.test.is_empty() {
        eval_rows.retain(|r| r.stage == "before");
        for (name, agent) in learner.copies() {
            let row = evaluate_model(env, "after", name, &agent.model().lm)?;
            eval_rows.push(row);
        }
        write_eval(out, &eval_rows)?;
        println!(
            "pass@k on {} held-out {} questions (answer checker, 1-shot prompt):\n\n{}",
            env.test.len(),
            env.dataset,
            markdown(&eval_rows)
        );
    }
    Ok(lmrl_runs::finish_run(out, |final_rows| Summary {
        iterations: env.cfg.iterations,
        dataset: env.dataset,
        final_rows,
        eval: eval_rows,
    })?)
}

/// Writes one copy's weights into `d` as a Hugging Face checkpoint (LoRA adapters merged into
/// the weights, so `eval` and other tools read a plain model) with its value head and the
/// tokenizer; LoRA runs add [`LORA_FILE`] with the unmerged adapters for resume.
fn save_weights(env: &Env, agent: &PpoAgent, d: &Path) -> Result<()> {
    let m = agent.model();
    if env.cfg.lora_rank > 0 {
        save_pretrained(&merge_lora(m.lm.clone()), d)?;
        m.v_head
            .save(&d.join(lmrl_models::value_head::VALUE_HEAD_FILE))?;
        let f = d.join(LORA_FILE);
        m.clone()
            .save_file(&f)
            .map_err(|e| anyhow!("cannot write {}: {e:?}", f.display()))?;
    } else {
        m.save_pretrained(d)?;
    }
    env.tok.save(d)?;
    Ok(())
}

/// The model [`save_weights`] wrote to `d`, on the training device: the HF weights and value
/// head, or for LoRA runs the run's base model (`base`) with the saved adapters and head.
fn load_weights(env: &Env, base: &CausalLm, d: &Path) -> Result<LmWithValueHead> {
    if env.cfg.lora_rank == 0 {
        return LmWithValueHead::load(d, true, &env.train_device)
            .with_context(|| format!("cannot load {}", d.display()));
    }
    let f = d.join(LORA_FILE);
    let model = LmWithValueHead::new(with_lora(env, base.clone())?, &env.train_device);
    model
        .try_load_file(&f)
        .map_err(|e| anyhow!("cannot load the LoRA policy {}: {e:?}", f.display()))
}

/// Writes checkpoint `done` ([`Learner::save_checkpoint`]): per copy its weights
/// ([`save_weights`]) and training state, for CORY the trainer's `cory_state.toml`, and the
/// app's `state.toml`.
fn save_checkpoint(env: &Env, ckpts: &CheckpointDir, learner: &Learner, done: usize) -> Result<()> {
    learner.save_checkpoint(
        ckpts,
        (&env.cfg.algo, env.cfg.seed),
        done,
        env.cfg.keep_checkpoints,
        |agent, d| save_weights(env, agent, d).map_err(Into::into),
    )?;
    Ok(())
}

/// What this run trains, with what a CORY trainer is built from.
fn learner_kind(env: &Env) -> LearnerKind {
    LearnerKind::new(env.cfg.algo, cory_config(&env.cfg), &env.reference)
}

/// Rebuilds the learner from a checkpoint exactly ([`Learner::restore`]); `base` is the run's
/// base model (LoRA runs rebuild on it).
fn restore(env: &Env, base: &CausalLm, dir: &Path) -> Result<(Learner, usize)> {
    let kind = learner_kind(env);
    Ok(Learner::restore(
        dir,
        (&env.cfg.algo, env.cfg.seed),
        kind,
        &env.ppo,
        &env.train_device,
        |d| load_weights(env, base, d).map_err(Into::into),
    )?)
}

/// The sampler settings of a generation call: pure sampling at the configured temperature, as
/// TRL's `top_k=0, top_p=1.0, do_sample=True`; stops at EOS or `max_new_tokens`. `seed` is the
/// call's base seed (each chunk of `generation_batch_size` prompts mixes in its index).
fn generation_config(env: &Env, seed: u64) -> GenerationConfig {
    GenerationConfig {
        sampling: Sampling::Sample {
            temperature: env.cfg.temperature,
            top_k: 0,
            top_p: 1.0,
        },
        max_new_tokens: env.cfg.max_new_tokens,
        repetition_penalty: env.cfg.repetition_penalty,
        eos_token_id: env.eos,
        pad_token_id: env.pad_id,
        seed,
    }
}

/// Samples responses in chunks of `generation_batch_size`; chunk `k` uses the seed
/// `mix(base.seed, k)`, so the result depends only on the arguments (exact resume).
fn generate(
    env: &Env,
    agent: &PpoAgent,
    prompts: &[Vec<u32>],
    base: &GenerationConfig,
) -> Result<Vec<Vec<u32>>> {
    Ok(generate_chunked(
        agent,
        prompts,
        base,
        env.cfg.generation_batch_size,
        |_| {},
    )?)
}

/// Decoded responses without special tokens (the EOS marker is not part of the answer).
fn decode_all(tok: &LmTokenizer, seqs: &[Vec<u32>]) -> Result<Vec<String>> {
    seqs.iter()
        .map(|s| tok.decode_skip_special(s).map_err(anyhow::Error::from))
        .collect()
}

/// The answer-checker reward of each response: 1.0 when its final number (before any invented
/// "Question:") equals the ground truth, else 0.0.
fn rewards(batch: &[&Task], texts: &[String], it: usize) -> Result<Vec<f32>> {
    batch
        .iter()
        .zip(texts)
        .map(|(t, y)| {
            check_answer(y, &t.truth)
                .with_context(|| format!("answer check failed on iteration {it}"))
        })
        .collect()
}

#[derive(Serialize)]
struct Sample<'a> {
    iteration: usize,
    agent: &'a str,
    role: &'a str,
    question: &'a str,
    /// Observer only: the pioneer response placed in its prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    reference: Option<&'a str>,
    response: &'a str,
    extracted: Option<String>,
    truth: &'a str,
    reward: f32,
}

#[allow(clippy::too_many_arguments)]
fn log_samples(
    samples: &mut SamplesLog,
    it: usize,
    agent: &str,
    role: &str,
    batch: &[&Task],
    references: Option<&[String]>,
    responses: &[String],
    rewards: &[f32],
) -> Result<()> {
    for (i, ((t, y), r)) in batch.iter().zip(responses).zip(rewards).enumerate() {
        samples.append(&Sample {
            iteration: it,
            agent,
            role,
            question: &t.question,
            reference: references.map(|refs| refs[i].as_str()),
            response: y,
            extracted: extract_response_answer(y),
            truth: &t.final_answer,
            reward: *r,
        })?;
    }
    Ok(())
}

fn batch_of(env: &Env, it: usize) -> Vec<&Task> {
    env.order
        .batch(it)
        .into_iter()
        .map(|i| &env.train[i])
        .collect()
}

fn ppo_iteration(
    env: &Env,
    agent: &mut PpoAgent,
    it: usize,
    samples: &mut SamplesLog,
) -> Result<Vec<MetricRow>> {
    let batch = batch_of(env, it);
    let q: Vec<Vec<u32>> = batch.iter().map(|t| t.prompt_ids.clone()).collect();
    let gcfg = generation_config(env, mix(&[env.cfg.seed, it as u64, stream::GEN_PIONEER]));
    let y = generate(env, agent, &q, &gcfg)?;
    let y_text = decode_all(&env.tok, &y)?;
    let r = rewards(&batch, &y_text, it)?;
    if it.is_multiple_of(env.cfg.samples_every) {
        log_samples(samples, it, POLICY, "policy", &batch, None, &y_text, &r)?;
    }
    let stats = agent
        .step(&q, &y, &r, &env.reference)
        .with_context(|| format!("PPO step of {POLICY} failed on iteration {it}"))?;
    Ok(vec![metric_row(
        it,
        POLICY,
        "policy",
        mean(&r),
        &stats,
        None,
    )])
}

/// **[assume]** The observer's reference: the pioneer's answer (special tokens already
/// dropped) cut at an invented "Question:" and trimmed, so the observer sees the answer, not a
/// made-up follow-up problem.
fn reference_text(pioneer_response: &str) -> String {
    cut_continuation(pioneer_response).trim().to_string()
}

/// The GSM8K side of CORY for [`CoryTrainer`]: the policy's tokenizer (decoding without special
/// tokens), the observer template `lmrl_data::gsm8k_observer_prompt` on the problem's question
/// and the pioneer's [`reference_text`], the answer-checker reward of each response against
/// its problem's ground truth, and chunked generation. Lives for one iteration's batch.
///
/// The trainer hands back queries as decoded text; `keys` (the batch's prompts decoded the same
/// way) map them to their problems. The trainer visits the batch in order, so the problem at
/// the cursor is tried first: two problems whose prompts decode alike (a lossy tokenizer) still
/// get their own questions and truths.
struct GsmCory<'a> {
    env: &'a Env,
    batch: &'a [&'a Task],
    keys: Vec<String>,
    cursor: Cell<usize>,
    it: usize,
}

impl<'a> GsmCory<'a> {
    fn new(env: &'a Env, batch: &'a [&'a Task], it: usize) -> Result<Self> {
        let keys = batch
            .iter()
            .map(|t| env.tok.decode_skip_special(&t.prompt_ids))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            env,
            batch,
            keys,
            cursor: Cell::new(0),
            it,
        })
    }

    /// The batch position of the problem whose prompt decodes to `query`, trying `at` first.
    fn find(&self, query: &str, at: usize) -> Result<usize, EnvError> {
        if self.keys.get(at).is_some_and(|k| k == query) {
            return Ok(at);
        }
        self.keys.iter().position(|k| k == query).ok_or_else(|| {
            format!(
                "iteration {}: a query is not one of the batch's prompts: {query:?}",
                self.it
            )
            .into()
        })
    }
}

impl CoryEnv for GsmCory<'_> {
    fn decode(&self, ids: &[u32]) -> std::result::Result<String, EnvError> {
        Ok(self.env.tok.decode_skip_special(ids)?)
    }

    fn encode(&self, text: &str) -> std::result::Result<Vec<u32>, EnvError> {
        Ok(self.env.tok.encode(text)?)
    }

    fn observer_prompt(
        &self,
        query: &str,
        pioneer_response: &str,
    ) -> std::result::Result<String, EnvError> {
        let i = self.find(query, self.cursor.get())?;
        self.cursor.set(i + 1);
        Ok(gsm8k_observer_prompt(
            &self.batch[i].question,
            &reference_text(pioneer_response),
        ))
    }

    /// r(q, y) on the plain query: the answer checker of `y` against the truth of `q`'s problem.
    fn rewards(
        &mut self,
        queries: &[String],
        responses: &[String],
    ) -> std::result::Result<Vec<f32>, EnvError> {
        if queries.len() != responses.len() {
            return Err(format!(
                "{} queries but {} responses on iteration {}",
                queries.len(),
                responses.len(),
                self.it
            )
            .into());
        }
        let tasks = queries
            .iter()
            .enumerate()
            .map(|(i, q)| self.find(q, i).map(|j| self.batch[j]))
            .collect::<Result<Vec<_>, _>>()?;
        rewards(&tasks, responses, self.it).map_err(|e| e.into_boxed_dyn_error())
    }

    fn generate(
        &mut self,
        agent: &PpoAgent,
        prompts: &[Vec<u32>],
        config: &GenerationConfig,
        _purpose: GenerationPurpose,
    ) -> std::result::Result<Vec<Vec<u32>>, EnvError> {
        generate(self.env, agent, prompts, config).map_err(|e| e.into_boxed_dyn_error())
    }
}

/// One CORY iteration (spec §2, §4) through [`CoryTrainer::iteration`]: the pioneer answers the
/// 1-shot prompt, the observer the same prompt with `Reference: <pioneer response>` before
/// `Answer:`; each response is checked against the ground truth and both copies train on
/// R = r₁ + r₂ ∈ {0, 1, 2} (Eq. 4). The observer's sampler seed is the pioneer's + 1.
fn cory_iteration(
    env: &Env,
    trainer: &mut CoryTrainer,
    it: usize,
    samples: &mut SamplesLog,
) -> Result<Vec<MetricRow>> {
    let batch = batch_of(env, it);
    let q: Vec<Vec<u32>> = batch.iter().map(|t| t.prompt_ids.clone()).collect();
    let gcfg = generation_config(env, mix(&[env.cfg.seed, it as u64, stream::GEN_PIONEER]));
    let mut genv = GsmCory::new(env, &batch, it)?;
    let stats = trainer
        .iteration(&q, &gcfg, &mut genv)
        .with_context(|| format!("CORY iteration {it} failed"))?;
    let t = &stats.texts;
    let name_of = |role: Role| {
        stats
            .agents
            .iter()
            .find(|m| m.role == role)
            .map_or("?", |m| m.llm)
    };
    if it.is_multiple_of(env.cfg.samples_every) {
        let refs: Vec<String> = t
            .pioneer_responses
            .iter()
            .map(|y| reference_text(y))
            .collect();
        log_samples(
            samples,
            it,
            name_of(Role::Pioneer),
            "pioneer",
            &batch,
            None,
            &t.pioneer_responses,
            &t.pioneer_rewards,
        )?;
        log_samples(
            samples,
            it,
            name_of(Role::Observer),
            "observer",
            &batch,
            Some(&refs),
            &t.observer_responses,
            &t.observer_rewards,
        )?;
    }
    // `stats.agents` is [llm1, llm2]: rows sorted by agent name. The plain-query measurement is
    // off (`cory_config`), so the `pioneer_*` columns repeat the training-role values.
    Ok(cory_rows(it, &stats))
}
