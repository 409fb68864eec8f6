//! The training loop: PPO (one policy) or CORY (pioneer + observer, role exchange), with
//! metrics, samples, plots, checkpoints, resume and Ctrl-C handling.
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::module::Module;
use burn::tensor::Device;
use indicatif::{ProgressBar, ProgressStyle};
use lmrl_data::{ImdbPrompt, imdb_observer_prompt};
use lmrl_models::{GenerationConfig, LmTokenizer, LmWithValueHead, Sampling, load_causal_lm};
use lmrl_rewards::Reward;
use lmrl_rl::ppo::{KlController, PpoAgent, PpoConfig, PpoStats};
use lmrl_runs::{CheckpointDir, MetricRow, MetricsLog, SamplesLog, atomic_write, write_toml};
use rand::Rng;
use serde::Serialize;

use crate::cli::TrainArgs;
use crate::config::{Algo, RunConfig};
use crate::setup;
use crate::state::{AgentState, DataOrder, STATE_FILE, STATE_FORMAT, TrainState, iter_rng, stream};

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

/// Set by the first Ctrl-C: the loop finishes the current iteration, checkpoints and stops.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn install_ctrlc() {
    // A second call (sweep) fails harmlessly: the handler is already there.
    let _ = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            eprintln!("\nsecond Ctrl-C: stopping now; the last complete checkpoint is intact");
            std::process::exit(130);
        }
        eprintln!(
            "\nCtrl-C: finishing this iteration, then checkpointing (Ctrl-C again to quit now)"
        );
    });
}

/// `config.toml` of a run directory.
pub const CONFIG_FILE: &str = "config.toml";
/// Written when a run has reached its iteration count.
pub const SUMMARY_FILE: &str = "summary.json";

/// Resolves the configuration from defaults, `--config`, flags (or the run being resumed) and
/// trains. Exit code 0 when done, 130 when stopped by Ctrl-C, 2 for invalid settings.
pub fn run_cli(args: &TrainArgs) -> Result<ExitCode> {
    let (cfg, out, resume) = match resolve(args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    install_ctrlc();
    let outcome = train(&cfg, &out, resume, args.cache_dir.as_deref())?;
    Ok(match outcome {
        Outcome::Finished => ExitCode::SUCCESS,
        Outcome::Interrupted => ExitCode::from(130),
    })
}

/// The run's configuration, output directory and whether it resumes.
pub fn resolve(args: &TrainArgs) -> Result<(RunConfig, PathBuf, bool)> {
    if let Some(dir) = &args.resume {
        let changed = args.changes_settings();
        if !changed.is_empty() {
            bail!(
                "--resume continues {} with its own config.toml; only --iterations and \
                 --cache-dir may be given, not {}",
                dir.display(),
                changed.join(", ")
            );
        }
        let mut cfg = read_config(&dir.join(CONFIG_FILE))?;
        if let Some(n) = args.iterations {
            cfg.iterations = n;
        }
        cfg.checkpoint_every = args.checkpoint_every.unwrap_or(cfg.checkpoint_every);
        cfg.samples_every = args.samples_every.unwrap_or(cfg.samples_every);
        cfg.resolve();
        cfg.validate()?;
        return Ok((cfg, dir.clone(), true));
    }
    let mut cfg = match &args.config {
        Some(p) => read_config(p)?,
        None => RunConfig::default(),
    };
    args.apply(&mut cfg);
    cfg.resolve();
    cfg.validate()?;
    let algo = match cfg.algo {
        Algo::Ppo => "ppo",
        Algo::Cory => "cory",
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("runs/imdb-{algo}-{}", cfg.seed)));
    Ok((cfg, out, false))
}

fn read_config(path: &Path) -> Result<RunConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("invalid settings in {}", path.display()))
}

/// How a training run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Finished,
    Interrupted,
}

/// One trained copy of the policy.
struct Copy {
    name: String,
    agent: PpoAgent,
}

/// Everything the loop needs that does not change.
struct Env {
    cfg: RunConfig,
    ppo: PpoConfig,
    tok: LmTokenizer,
    reward: Box<dyn Reward>,
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
        seed: cfg.seed,
        ..PpoConfig::default()
    }
}

/// Trains `cfg` into `out` (a fresh directory, or the run to resume).
pub fn train(
    cfg: &RunConfig,
    out: &Path,
    resume: bool,
    cache_dir: Option<&Path>,
) -> Result<Outcome> {
    let ckpts = CheckpointDir::new(out.join("checkpoints"));
    let latest = if resume {
        let l = ckpts.latest()?;
        if l.is_none() {
            bail!(
                "{} has no checkpoint to resume from (runs checkpoint every {} iterations)",
                out.display(),
                cfg.checkpoint_every
            );
        }
        l
    } else {
        if out.join("metrics.csv").exists() || ckpts.latest()?.is_some() {
            bail!(
                "{} already holds a run: continue it with --resume {}, or choose another --out",
                out.display(),
                out.display()
            );
        }
        None
    };
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    write_toml(&out.join(CONFIG_FILE), cfg)?;

    let cache = setup::asset_cache(cache_dir)?;
    let device = crate::select_device();
    device.seed(cfg.seed);
    let train_device = device.clone().autodiff();
    let model_path = setup::resolve_path_or_asset(&cache, &cfg.model)?;
    let (tok, model_config) = setup::load_tokenizer(&model_path)?;
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
    let pad_id = tok
        .pad_token_id()
        .or(tok.eos_token_id())
        .or(model_config.eos_token_id())
        .unwrap_or(0);
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

    let names: Vec<&str> = match cfg.algo {
        Algo::Ppo => vec!["policy"],
        Algo::Cory => vec!["llm1", "llm2"],
    };
    let (mut copies, start) = match &latest {
        None => {
            let copies = names
                .iter()
                .map(|n| {
                    let model = LmWithValueHead::new(lm.clone(), &train_device);
                    Ok(Copy {
                        name: n.to_string(),
                        agent: PpoAgent::new(model, ppo.clone(), &train_device)?,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            (copies, 0)
        }
        Some((_, dir)) => restore(&env, dir)?,
    };
    drop(lm);
    if start >= cfg.iterations {
        eprintln!(
            "{} already has {start} iterations (asked for {}): nothing to do",
            out.display(),
            cfg.iterations
        );
        finish(out, cfg)?;
        return Ok(Outcome::Finished);
    }
    if resume {
        eprintln!(
            "resuming {} at iteration {start} of {}",
            out.display(),
            cfg.iterations
        );
    }
    let resume_from = resume.then_some(start);
    let mut metrics = MetricsLog::open(&out.join("metrics.csv"), resume_from)?;
    let mut samples = SamplesLog::open(&out.join("samples.jsonl"), resume_from)?;

    for it in start..cfg.iterations {
        let t0 = Instant::now();
        PHASES.with(|p| p.set([0.0; 3]));
        let rows = match cfg.algo {
            Algo::Ppo => ppo_iteration(&env, &mut copies[0], it, &mut samples)?,
            Algo::Cory => cory_iteration(&env, &mut copies, it, &mut samples)?,
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
        // CORY role exchange after every `swap_period` iterations (spec §2 step 8).
        if cfg.algo == Algo::Cory && (it + 1).is_multiple_of(cfg.swap_period) {
            copies.swap(0, 1);
            if cfg.reset_state_on_swap {
                // What the reference's reload does: fresh Adam, β₀, normaliser, minibatch seed.
                copies = copies
                    .into_iter()
                    .map(|c| {
                        let model = c.agent.into_model();
                        Ok(Copy {
                            name: c.name,
                            agent: PpoAgent::new(model, env.ppo.clone(), &env.train_device)?,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
            }
        }
        let done = it + 1;
        let interrupted = INTERRUPTED.load(Ordering::SeqCst);
        if done.is_multiple_of(cfg.checkpoint_every) || done == cfg.iterations || interrupted {
            save_checkpoint(&env, &ckpts, &copies, done)?;
        }
        if interrupted {
            eprintln!(
                "stopped after iteration {done}; checkpoint {} kept.\nresume with: \
                 imdb-app --resume {} --iterations {}",
                ckpts.path_for(done).display(),
                out.display(),
                cfg.iterations
            );
            draw(out)?;
            return Ok(Outcome::Interrupted);
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

fn draw(out: &Path) -> Result<()> {
    let rows = lmrl_runs::read_rows(&out.join("metrics.csv"))?;
    if !rows.is_empty() {
        lmrl_runs::plot_run(&rows, out)?;
    }
    Ok(())
}

#[derive(Serialize)]
struct Summary {
    iterations: usize,
    final_rows: Vec<MetricRow>,
}

fn finish(out: &Path, cfg: &RunConfig) -> Result<()> {
    draw(out)?;
    let rows = lmrl_runs::read_rows(&out.join("metrics.csv"))?;
    let last = rows.iter().map(|r| r.iteration).max();
    let final_rows = rows
        .iter()
        .filter(|r| Some(r.iteration) == last)
        .cloned()
        .collect();
    let s = Summary {
        iterations: cfg.iterations,
        final_rows,
    };
    atomic_write(
        &out.join(SUMMARY_FILE),
        serde_json::to_string_pretty(&s)?.as_bytes(),
    )?;
    eprintln!("done: results in {}", out.display());
    Ok(())
}

fn save_checkpoint(env: &Env, ckpts: &CheckpointDir, copies: &[Copy], done: usize) -> Result<()> {
    let state = TrainState {
        format: STATE_FORMAT,
        algo: env.cfg.algo,
        seed: env.cfg.seed,
        completed_iterations: done,
        agents: copies
            .iter()
            .map(|c| AgentState {
                name: c.name.clone(),
                kl_controller: *c.agent.kl_controller(),
                running_moments: *c.agent.running_moments(),
                steps: c.agent.steps(),
            })
            .collect(),
    };
    let bar = spinner(format!("checkpoint {done}"));
    ckpts.save(done, |dir| {
        for c in copies {
            let d = dir.join(&c.name);
            c.agent.model().save_pretrained(&d)?;
            env.tok.save(&d)?;
        }
        std::fs::write(dir.join(STATE_FILE), toml::to_string_pretty(&state)?)?;
        Ok(())
    })?;
    ckpts.prune(env.cfg.keep_checkpoints)?;
    bar.finish_and_clear();
    Ok(())
}

/// Rebuilds the copies from a checkpoint: weights and value heads exactly, β through the
/// controller's initial value. See docs/imdb-app.md for what a resumed run cannot restore.
fn restore(env: &Env, dir: &Path) -> Result<(Vec<Copy>, usize)> {
    let path = dir.join(STATE_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let state: TrainState = toml::from_str(&text)
        .with_context(|| format!("invalid checkpoint state {}", path.display()))?;
    if state.format != STATE_FORMAT || state.algo != env.cfg.algo || state.seed != env.cfg.seed {
        bail!(
            "{} does not belong to this run (format {}, algo {:?}, seed {})",
            path.display(),
            state.format,
            state.algo,
            state.seed
        );
    }
    let copies = state
        .agents
        .iter()
        .map(|a| {
            let model = LmWithValueHead::load(&dir.join(&a.name), true, &env.train_device)
                .with_context(|| format!("cannot load {}", dir.join(&a.name).display()))?;
            let beta = match a.kl_controller {
                KlController::Adaptive(c) => c.value,
                KlController::Fixed(c) => c.value,
            };
            let cfg = PpoConfig {
                init_kl_coef: beta,
                ..env.ppo.clone()
            };
            Ok(Copy {
                name: a.name.clone(),
                agent: PpoAgent::new(model, cfg, &env.train_device)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((copies, state.completed_iterations))
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

/// Samples responses in chunks of `generation_batch_size`, with a progress bar.
fn generate(
    env: &Env,
    agent: &PpoAgent,
    prompts: &[Vec<u32>],
    gen_len: usize,
    seed: u64,
    what: String,
) -> Result<Vec<Vec<u32>>> {
    let t0 = Instant::now();
    let b = bar(prompts.len(), what);
    let mut out = Vec::with_capacity(prompts.len());
    for (k, chunk) in prompts.chunks(env.cfg.generation_batch_size).enumerate() {
        let gcfg = GenerationConfig {
            sampling: Sampling::pure(),
            max_new_tokens: gen_len,
            repetition_penalty: env.cfg.repetition_penalty,
            eos_token_id: env.tok.eos_token_id(),
            pad_token_id: env.pad_id,
            seed: crate::state::mix(&[seed, k as u64]),
        };
        let g = agent.generate(chunk, &gcfg)?;
        out.extend(g.tokens);
        b.inc(chunk.len() as u64);
    }
    b.finish_and_clear();
    add_phase(0, t0.elapsed().as_secs_f64());
    Ok(out)
}

fn decode_all(tok: &LmTokenizer, seqs: &[Vec<u32>]) -> Result<Vec<String>> {
    seqs.iter()
        .map(|s| tok.decode(s).map_err(anyhow::Error::from))
        .collect()
}

fn score(env: &Env, texts: &[String], it: usize) -> Result<Vec<f32>> {
    let t0 = Instant::now();
    let b = spinner(format!("scoring {} texts", texts.len()));
    let s = setup::score_texts(env.reward.as_ref(), texts, it);
    b.finish_and_clear();
    add_phase(1, t0.elapsed().as_secs_f64());
    s
}

fn optimise(
    env: &Env,
    c: &mut Copy,
    q: &[Vec<u32>],
    y: &[Vec<u32>],
    scores: &[f32],
    it: usize,
) -> Result<PpoStats> {
    let t0 = Instant::now();
    let b = spinner(format!(
        "optimising {} ({} epochs × {} minibatches)",
        c.name,
        env.cfg.ppo_epochs,
        env.cfg.batch_size / env.cfg.mini_batch_size
    ));
    let s = c
        .agent
        .step(q, y, scores, &env.reference)
        .with_context(|| format!("PPO step of {} failed on iteration {it}", c.name));
    b.finish_and_clear();
    add_phase(2, t0.elapsed().as_secs_f64());
    s
}

fn mean(xs: &[f32]) -> f64 {
    xs.iter().map(|&x| f64::from(x)).sum::<f64>() / xs.len().max(1) as f64
}

#[allow(clippy::too_many_arguments)]
fn row(
    it: usize,
    name: &str,
    role: &str,
    own_scores: &[f32],
    s: &PpoStats,
    pioneer: Option<(f64, f64)>,
) -> MetricRow {
    let task = mean(own_scores);
    let kl = f64::from(s.objective_kl);
    let (ptr, pkl) = pioneer.unwrap_or((task, kl));
    MetricRow {
        iteration: it,
        agent: name.into(),
        role: role.into(),
        task_reward: task,
        kl,
        beta: s.objective_kl_coef,
        combined_reward: task - s.objective_kl_coef * kl,
        policy_loss: f64::from(s.train.loss_policy),
        value_loss: f64::from(s.train.loss_value),
        entropy: f64::from(s.train.policy_entropy),
        approxkl: f64::from(s.train.policy_approxkl),
        clipfrac: f64::from(s.train.policy_clipfrac),
        response_len: f64::from(s.responses_len_mean),
        pioneer_task_reward: ptr,
        pioneer_kl: pkl,
        seconds: 0.0,
    }
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

fn log_samples(
    samples: &mut SamplesLog,
    it: usize,
    agent: &str,
    role: &str,
    queries: &[&str],
    responses: &[String],
    scores: &[f32],
) -> Result<()> {
    for ((q, r), s) in queries.iter().zip(responses).zip(scores) {
        samples.append(&Sample {
            iteration: it,
            agent,
            role,
            query: q,
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
    c: &mut Copy,
    it: usize,
    samples: &mut SamplesLog,
) -> Result<Vec<MetricRow>> {
    let (batch, gen_len) = batch_of(env, it);
    let q: Vec<Vec<u32>> = batch.iter().map(|p| p.input_ids.clone()).collect();
    let q_text: Vec<&str> = batch.iter().map(|p| p.query.as_str()).collect();
    let seed = crate::state::mix(&[env.cfg.seed, it as u64, stream::GEN_PIONEER]);
    let y = generate(env, &c.agent, &q, gen_len, seed, "generating".into())?;
    let y_text = decode_all(&env.tok, &y)?;
    let full: Vec<String> = q_text
        .iter()
        .zip(&y_text)
        .map(|(a, b)| format!("{a}{b}"))
        .collect();
    let scores = score(env, &full, it)?;
    if it.is_multiple_of(env.cfg.samples_every) {
        log_samples(samples, it, &c.name, "policy", &q_text, &y_text, &scores)?;
    }
    let stats = optimise(env, c, &q, &y, &scores, it)?;
    Ok(vec![row(it, &c.name, "policy", &scores, &stats, None)])
}

/// One CORY iteration (spec §2): pioneer answers q, observer answers the merged prompt, both
/// are scored on `q + own response`, and both train on R = r₁ + r₂ (Eq. 4).
fn cory_iteration(
    env: &Env,
    copies: &mut [Copy],
    it: usize,
    samples: &mut SamplesLog,
) -> Result<Vec<MetricRow>> {
    let (batch, gen_len) = batch_of(env, it);
    let q: Vec<Vec<u32>> = batch.iter().map(|p| p.input_ids.clone()).collect();
    let q_text: Vec<&str> = batch.iter().map(|p| p.query.as_str()).collect();
    let (pio, obs) = copies.split_at_mut(1);
    let (pio, obs) = (&mut pio[0], &mut obs[0]);

    let seed = crate::state::mix(&[env.cfg.seed, it as u64, stream::GEN_PIONEER]);
    let y1 = generate(
        env,
        &pio.agent,
        &q,
        gen_len,
        seed,
        format!("{} (pioneer)", pio.name),
    )?;
    let y1_text = decode_all(&env.tok, &y1)?;
    let m_text: Vec<String> = q_text
        .iter()
        .zip(&y1_text)
        .map(|(q, y)| imdb_observer_prompt(q, y))
        .collect();
    let m: Vec<Vec<u32>> = m_text
        .iter()
        .map(|t| env.tok.encode(t))
        .collect::<Result<_, _>>()?;
    let seed = crate::state::mix(&[env.cfg.seed, it as u64, stream::GEN_OBSERVER]);
    let y2 = generate(
        env,
        &obs.agent,
        &m,
        gen_len,
        seed,
        format!("{} (observer)", obs.name),
    )?;
    let y2_text = decode_all(&env.tok, &y2)?;

    let cat = |ys: &[String]| -> Vec<String> {
        q_text
            .iter()
            .zip(ys)
            .map(|(a, b)| format!("{a}{b}"))
            .collect()
    };
    let mut texts = cat(&y1_text);
    texts.extend(cat(&y2_text));
    let all = score(env, &texts, it)?;
    let (r1, r2) = all.split_at(q.len());
    let total: Vec<f32> = r1.iter().zip(r2).map(|(a, b)| a + b).collect();

    // Observer answering the plain query, measured before the update (same weights as its
    // training rollout).
    let obs_pioneer_format = if env.cfg.pioneer_format_metrics {
        let seed = crate::state::mix(&[env.cfg.seed, it as u64, stream::GEN_EVAL]);
        let y = generate(
            env,
            &obs.agent,
            &q,
            gen_len,
            seed,
            format!("{} (plain query)", obs.name),
        )?;
        let r = score(env, &cat(&decode_all(&env.tok, &y)?), it)?;
        let kl = obs.agent.kl_to_reference(&q, &y, &env.reference)?;
        Some((mean(&r), mean(&kl)))
    } else {
        None
    };

    if it.is_multiple_of(env.cfg.samples_every) {
        log_samples(samples, it, &pio.name, "pioneer", &q_text, &y1_text, r1)?;
        let m_ref: Vec<&str> = m_text.iter().map(String::as_str).collect();
        log_samples(samples, it, &obs.name, "observer", &m_ref, &y2_text, r2)?;
    }
    let s1 = optimise(env, pio, &q, &y1, &total, it)?;
    let s2 = optimise(env, obs, &m, &y2, &total, it)?;
    let mut rows = vec![
        row(it, &pio.name, "pioneer", r1, &s1, None),
        row(it, &obs.name, "observer", r2, &s2, obs_pioneer_format),
    ];
    rows.sort_by(|a, b| a.agent.cmp(&b.agent));
    Ok(rows)
}
