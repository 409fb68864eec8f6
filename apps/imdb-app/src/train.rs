//! The training loop: PPO (one `lmrl_rl::PpoAgent`) or CORY (`lmrl_rl::CoryTrainer`: pioneer +
//! observer, role exchange), with metrics, samples, plots, checkpoints, exact resume and Ctrl-C
//! handling. The algorithms live in `lmrl-rl`; this file supplies the IMDB data, tokenizer,
//! template and reward, and the bookkeeping.
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use burn::module::Module;
use burn::tensor::Device;
use indicatif::{ProgressBar, ProgressStyle};
use lmrl_data::{ImdbPrompt, imdb_observer_prompt};
use lmrl_models::{GenerationConfig, LmTokenizer, LmWithValueHead, Sampling, load_causal_lm};
use lmrl_rewards::TextScorer;
use lmrl_rl::cory::EnvError;
use lmrl_rl::ppo::{PpoAgent, PpoConfig};
use lmrl_rl::{CoryConfig, CoryEnv, CoryTrainer, GenerationPurpose, RewardMode, Role};
use lmrl_runs::{
    CheckpointDir, Learner, LearnerKind, MetricRow, Outcome, POLICY, SamplesLog, cory_rows,
    generate_chunked, mean, metric_row, write_toml,
};
use rand::Rng;
use serde::Serialize;

use crate::cli::TrainArgs;
use crate::config::RunConfig;
use crate::setup;
use crate::state::{DataOrder, iter_rng, stream};

thread_local! {
    /// Seconds spent in (generation, scoring, optimisation) during the current iteration.
    static PHASES: std::cell::Cell<[f64; 3]> = const { std::cell::Cell::new([0.0; 3]) };
}

fn add_phase(i: usize, secs: f64) {
    PHASES.with(|p| {
        let mut v = p.get();
        v[i] += secs;
        p.set(v);
    });
}

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

/// Everything the loop needs that does not change.
struct Env {
    cfg: RunConfig,
    ppo: PpoConfig,
    tok: LmTokenizer,
    reward: Box<dyn TextScorer>,
    prompts: Vec<ImdbPrompt>,
    order: DataOrder,
    reference: lmrl_models::CausalLm,
    train_device: Device,
    pad_id: u32,
}

/// The TRL `PPOConfig` of this run.
pub fn ppo_config(cfg: &RunConfig) -> PpoConfig {
    PpoConfig {
        learning_rate: cfg.lr,
        batch_size: cfg.batch_size,
        mini_batch_size: cfg.mini_batch_size,
        gradient_accumulation_steps: cfg.gradient_accumulation_steps,
        ppo_epochs: cfg.ppo_epochs,
        init_kl_coef: cfg.init_kl_coef,
        adap_kl_ctrl: cfg.target_kl.is_some(),
        target: cfg.target_kl.unwrap_or(6.0),
        horizon: cfg.kl_horizon,
        use_score_scaling: cfg.score_norm(),
        use_score_norm: cfg.score_norm(),
        max_grad_norm: cfg.max_grad_norm.map(|x| x as f32),
        vf_coef: cfg.vf_coef,
        seed: cfg.seed,
        ..PpoConfig::default()
    }
}

/// The CORY settings of this run: R = r₁ + r₂ (paper Eq. 4), role exchange every
/// `swap_period` iterations.
pub fn cory_config(cfg: &RunConfig) -> CoryConfig {
    CoryConfig {
        swap_every: cfg.swap_period,
        reset_state_on_swap: cfg.reset_state_on_swap,
        reward_mode: RewardMode::Sum,
        eval_query_only: cfg.pioneer_format_metrics,
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
    let reward = setup::load_reward(&cfg.reward, &cache, &device)?;
    let prompts = setup::load_prompts(cfg, &cache, &tok)?;
    eprintln!(
        "{} prompts ({} iterations per epoch of {}), policy {}, reward {}",
        prompts.len(),
        prompts.len() / cfg.batch_size,
        cfg.batch_size,
        model_path.display(),
        reward.name()
    );
    let lm = load_causal_lm(&model_path, &train_device)
        .with_context(|| format!("cannot load the policy {}", model_path.display()))?;
    let reference = lm.valid();
    let ppo = ppo_config(cfg);
    let pad_id = lmrl_runs::pad_id(&tok, &model_config);
    let env = Env {
        cfg: cfg.clone(),
        order: DataOrder::new(prompts.len(), cfg.batch_size, cfg.seed),
        ppo: ppo.clone(),
        tok,
        reward,
        prompts,
        reference,
        train_device: train_device.clone(),
        pad_id,
    };

    let (mut learner, start) = match &latest {
        None => {
            let agent = || -> Result<PpoAgent> {
                let model =
                    LmWithValueHead::with_head_init(lm.clone(), cfg.value_head_init, &train_device);
                Ok(PpoAgent::new(model, ppo.clone(), &train_device)?)
            };
            (Learner::fresh(learner_kind(&env), agent)?, 0)
        }
        Some((_, dir)) => restore(&env, dir)?,
    };
    drop(lm);
    if !lmrl_runs::announce_start(out, start, cfg.iterations, resume) {
        finish(out, cfg)?;
        return Ok(Outcome::Finished);
    }
    let (mut metrics, mut samples) = lmrl_runs::open_logs(out, resume.then_some(start))?;

    for it in start..cfg.iterations {
        let t0 = Instant::now();
        PHASES.with(|p| p.set([0.0; 3]));
        let rows = match &mut learner {
            Learner::Ppo(agent) => ppo_iteration(&env, agent, it, &mut samples)?,
            // The role exchange after every `swap_period` iterations happens inside.
            Learner::Cory(trainer) => cory_iteration(&env, trainer, it, &mut samples)?,
        };
        let secs = t0.elapsed().as_secs_f64();
        let mut line = format!("it {:>3}/{} |", it + 1, cfg.iterations);
        for mut r in rows {
            r.seconds = secs;
            line.push_str(&format!(
                " {} ({}) r {:+.3} kl {:.3} β {:.3} |",
                r.agent, r.role, r.task_reward, r.kl, r.beta
            ));
            metrics.append(&r)?;
        }
        let [g, sc, o] = PHASES.with(|p| p.get());
        eprintln!("{line} {secs:.1} s (generate {g:.1}, score {sc:.2}, optimise {o:.1})");
        let done = it + 1;
        let interrupted = lmrl_runs::interrupted();
        if lmrl_runs::checkpoint_due(done, cfg.checkpoint_every, cfg.iterations, interrupted) {
            save_checkpoint(&env, &ckpts, &learner, done)?;
        }
        if interrupted {
            return Ok(lmrl_runs::stop_interrupted(
                "imdb-app",
                &ckpts,
                out,
                done,
                cfg.iterations,
            )?);
        }
    }
    finish(out, cfg)?;
    Ok(Outcome::Finished)
}

/// Whether `out` holds a checkpoint to resume from.
pub fn has_checkpoint(out: &Path) -> Result<bool> {
    Ok(CheckpointDir::new(out.join("checkpoints"))
        .latest()?
        .is_some())
}

#[derive(Serialize)]
struct Summary {
    iterations: usize,
    final_rows: Vec<MetricRow>,
}

fn finish(out: &Path, cfg: &RunConfig) -> Result<()> {
    Ok(lmrl_runs::finish_run(out, |final_rows| Summary {
        iterations: cfg.iterations,
        final_rows,
    })?)
}

/// Writes checkpoint `done` ([`Learner::save_checkpoint`]): per copy its HF-format weights,
/// value head and tokenizer, plus `lmrl_rl`'s training state and the app's `state.toml`.
fn save_checkpoint(env: &Env, ckpts: &CheckpointDir, learner: &Learner, done: usize) -> Result<()> {
    let bar = spinner(format!("checkpoint {done}"));
    learner.save_checkpoint(
        ckpts,
        (&env.cfg.algo, env.cfg.seed),
        done,
        env.cfg.keep_checkpoints,
        |agent, d| {
            agent.model().save_pretrained(d)?;
            env.tok.save(d)?;
            Ok(())
        },
    )?;
    bar.finish_and_clear();
    Ok(())
}

/// What this run trains, with what a CORY trainer is built from.
fn learner_kind(env: &Env) -> LearnerKind {
    LearnerKind::new(env.cfg.algo, cory_config(&env.cfg), &env.reference)
}

/// Rebuilds the learner from a checkpoint exactly ([`Learner::restore`]).
fn restore(env: &Env, dir: &Path) -> Result<(Learner, usize)> {
    let kind = learner_kind(env);
    let dev = &env.train_device;
    Ok(Learner::restore(
        dir,
        (&env.cfg.algo, env.cfg.seed),
        kind,
        &env.ppo,
        dev,
        |d| Ok(LmWithValueHead::load(d, true, dev)?),
    )?)
}

fn bar(len: usize, what: String) -> ProgressBar {
    let b = ProgressBar::new(len as u64);
    b.set_style(
        ProgressStyle::with_template("{msg:>22} [{bar:30}] {pos}/{len} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    b.set_message(what);
    b
}

fn spinner(what: String) -> ProgressBar {
    let b = ProgressBar::new_spinner();
    b.set_message(what);
    b.enable_steady_tick(std::time::Duration::from_millis(200));
    b
}

/// The sampler settings of iteration `it`'s generation calls: pure sampling, `gen_len` new
/// tokens, base seed `seed` (each chunk of `generation_batch_size` prompts mixes in its index).
fn generation_config(env: &Env, gen_len: usize, seed: u64) -> GenerationConfig {
    GenerationConfig {
        sampling: Sampling::pure(),
        max_new_tokens: gen_len,
        repetition_penalty: env.cfg.repetition_penalty,
        eos_token_id: env.tok.eos_token_id(),
        pad_token_id: env.pad_id,
        seed,
    }
}

/// Samples responses in chunks of `generation_batch_size`, with a progress bar. Chunk `k` uses
/// the seed `mix(base.seed, k)`.
fn generate(
    env: &Env,
    agent: &PpoAgent,
    prompts: &[Vec<u32>],
    base: &GenerationConfig,
    what: String,
) -> Result<Vec<Vec<u32>>> {
    let t0 = Instant::now();
    let b = bar(prompts.len(), what);
    let out = generate_chunked(agent, prompts, base, env.cfg.generation_batch_size, |n| {
        b.inc(n as u64)
    })?;
    b.finish_and_clear();
    add_phase(0, t0.elapsed().as_secs_f64());
    Ok(out)
}

fn decode_all(tok: &LmTokenizer, seqs: &[Vec<u32>]) -> Result<Vec<String>> {
    seqs.iter()
        .map(|s| tok.decode(s).map_err(anyhow::Error::from))
        .collect()
}

/// Task rewards r(q, y): the reward model scores the plain query followed by the response.
fn score(env: &Env, queries: &[&str], responses: &[String], it: usize) -> Result<Vec<f32>> {
    let texts: Vec<String> = queries
        .iter()
        .zip(responses)
        .map(|(q, y)| format!("{q}{y}"))
        .collect();
    let t0 = Instant::now();
    let b = spinner(format!("scoring {} texts", texts.len()));
    let s = setup::score_texts(env.reward.as_ref(), &texts, it);
    b.finish_and_clear();
    add_phase(1, t0.elapsed().as_secs_f64());
    s
}

#[derive(Serialize)]
struct Sample<'a> {
    iteration: usize,
    agent: &'a str,
    role: &'a str,
    query: &'a str,
    response: &'a str,
    score: f32,
}

fn log_samples<Q: AsRef<str>>(
    samples: &mut SamplesLog,
    it: usize,
    agent: &str,
    role: &str,
    queries: &[Q],
    responses: &[String],
    scores: &[f32],
) -> Result<()> {
    for ((q, r), s) in queries.iter().zip(responses).zip(scores) {
        samples.append(&Sample {
            iteration: it,
            agent,
            role,
            query: q.as_ref(),
            response: r,
            score: *s,
        })?;
    }
    Ok(())
}

/// The batch of iteration `it` and its response length (drawn once per batch, spec §1 step 2).
fn batch_of(env: &Env, it: usize) -> (Vec<&ImdbPrompt>, usize) {
    let batch: Vec<&ImdbPrompt> = env
        .order
        .batch(it)
        .into_iter()
        .map(|i| &env.prompts[i])
        .collect();
    let gen_len = iter_rng(env.cfg.seed, it, stream::RESPONSE_LEN)
        .random_range(env.cfg.response_tokens_min..=env.cfg.response_tokens_max);
    (batch, gen_len)
}

fn ppo_iteration(
    env: &Env,
    agent: &mut PpoAgent,
    it: usize,
    samples: &mut SamplesLog,
) -> Result<Vec<MetricRow>> {
    let (batch, gen_len) = batch_of(env, it);
    let q: Vec<Vec<u32>> = batch.iter().map(|p| p.input_ids.clone()).collect();
    let q_text: Vec<&str> = batch.iter().map(|p| p.query.as_str()).collect();
    let seed = crate::state::mix(&[env.cfg.seed, it as u64, stream::GEN_PIONEER]);
    let gcfg = generation_config(env, gen_len, seed);
    let y = generate(env, agent, &q, &gcfg, "generating".into())?;
    let y_text = decode_all(&env.tok, &y)?;
    let scores = score(env, &q_text, &y_text, it)?;
    if it.is_multiple_of(env.cfg.samples_every) {
        log_samples(samples, it, POLICY, "policy", &q_text, &y_text, &scores)?;
    }
    let t0 = Instant::now();
    let b = spinner(format!(
        "optimising ({} epochs × {} minibatches)",
        env.cfg.ppo_epochs,
        env.cfg.batch_size / env.cfg.mini_batch_size
    ));
    let stats = agent
        .step(&q, &y, &scores, &env.reference)
        .with_context(|| format!("PPO step failed on iteration {it}"));
    b.finish_and_clear();
    add_phase(2, t0.elapsed().as_secs_f64());
    Ok(vec![metric_row(
        it,
        POLICY,
        "policy",
        mean(&scores),
        &stats?,
        None,
    )])
}

/// The IMDB side of CORY for [`CoryTrainer`]: the policy's tokenizer, the observer template
/// `lmrl_data::imdb_observer_prompt`, the sentiment reward on `query + response`, and chunked
/// generation with progress bars. Lives for one iteration (`it` names it in errors).
struct ImdbCory<'a> {
    env: &'a Env,
    it: usize,
}

impl CoryEnv for ImdbCory<'_> {
    fn decode(&self, ids: &[u32]) -> std::result::Result<String, EnvError> {
        Ok(self.env.tok.decode(ids)?)
    }

    fn encode(&self, text: &str) -> std::result::Result<Vec<u32>, EnvError> {
        Ok(self.env.tok.encode(text)?)
    }

    fn observer_prompt(
        &self,
        query: &str,
        pioneer_response: &str,
    ) -> std::result::Result<String, EnvError> {
        Ok(imdb_observer_prompt(query, pioneer_response))
    }

    fn rewards(
        &mut self,
        queries: &[String],
        responses: &[String],
    ) -> std::result::Result<Vec<f32>, EnvError> {
        score(self.env, &queries_ref(queries), responses, self.it).map_err(boxed)
    }

    fn generate(
        &mut self,
        agent: &PpoAgent,
        prompts: &[Vec<u32>],
        config: &GenerationConfig,
        purpose: GenerationPurpose,
    ) -> std::result::Result<Vec<Vec<u32>>, EnvError> {
        let what = match purpose {
            GenerationPurpose::Pioneer => "pioneer",
            GenerationPurpose::Observer => "observer",
            GenerationPurpose::QueryOnly => "observer (plain query)",
        };
        generate(self.env, agent, prompts, config, what.into()).map_err(boxed)
    }
}

fn queries_ref(q: &[String]) -> Vec<&str> {
    q.iter().map(String::as_str).collect()
}

fn boxed(e: anyhow::Error) -> EnvError {
    e.into_boxed_dyn_error()
}

/// One CORY iteration (spec §2) through [`CoryTrainer::iteration`]: pioneer answers q,
/// observer answers the merged prompt, both are scored on `q + own response`, both train on
/// R = r₁ + r₂ (Eq. 4), roles are exchanged every `swap_period` iterations.
fn cory_iteration(
    env: &Env,
    trainer: &mut CoryTrainer,
    it: usize,
    samples: &mut SamplesLog,
) -> Result<Vec<MetricRow>> {
    let (batch, gen_len) = batch_of(env, it);
    let q: Vec<Vec<u32>> = batch.iter().map(|p| p.input_ids.clone()).collect();
    let seed = crate::state::mix(&[env.cfg.seed, it as u64, stream::GEN_PIONEER]);
    let gcfg = generation_config(env, gen_len, seed);
    let t0 = Instant::now();
    let stats = trainer
        .iteration(&q, &gcfg, &mut ImdbCory { env, it })
        .with_context(|| format!("CORY iteration {it} failed"))?;
    let [g, sc, _] = PHASES.with(|p| p.get());
    add_phase(2, (t0.elapsed().as_secs_f64() - g - sc).max(0.0));

    let t = &stats.texts;
    if it.is_multiple_of(env.cfg.samples_every) {
        for m in &stats.agents {
            match m.role {
                Role::Pioneer => log_samples(
                    samples,
                    it,
                    m.llm,
                    "pioneer",
                    &t.queries,
                    &t.pioneer_responses,
                    &t.pioneer_rewards,
                )?,
                Role::Observer => log_samples(
                    samples,
                    it,
                    m.llm,
                    "observer",
                    &t.observer_prompts,
                    &t.observer_responses,
                    &t.observer_rewards,
                )?,
            }
        }
    }
    // `stats.agents` is [llm1, llm2]: rows sorted by agent name.
    Ok(cory_rows(it, &stats))
}
