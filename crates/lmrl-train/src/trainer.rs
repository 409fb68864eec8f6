//! The training loop: each iteration draws a batch of the task's prompts, samples responses,
//! scores them with the task's reward over each prompt's context, and steps the learner(s) —
//! one learner, or CORY's pioneer and observer — then writes the metrics row(s), sample log
//! lines and, on schedule, a checkpoint. Every random choice of an iteration comes from a
//! stream seeded by `(seed, iteration, purpose)`, so a resumed run continues with exactly the
//! numbers of an uninterrupted one.
//!
//! Data parallel ([`crate::parallel`]), every rank runs this loop on its contiguous share of
//! each batch; the learners reduce what they normalise over the batch, the responses and
//! rewards are gathered for the metrics and sample logs, and rank 0 alone writes files.
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::tensor::Device;
use indicatif::ProgressBar;
use lmrl_models::{GenerationConfig, LmTokenizer};
use lmrl_rewards::Sample;
use lmrl_rl::dist::{Collective, all_gather_json, broadcast_json, shard};
use lmrl_rl::group::{equal_reward_share, informative_samples};
use lmrl_rl::{CoryEnv, CoryIterationStats, EnvError, GenerationPurpose, Learner, Prompt, Role};
use lmrl_runs::{MetricRow, MetricsLog, SamplesLog};
use serde::Serialize;

use crate::algorithms::DynLearner;
use crate::copies::{Copies, CopySpec, Llm2Device, POLICY};
use crate::error::{Result, TrainError};
use crate::generation::{generate_rows, spinner};
use crate::model::TrainModel;
use crate::rows::{cory_rows, metric_row, repetition};
use crate::session::{RunDir, Start, StopToken, checkpoint_due};
use crate::settings::RunSettings;
use crate::streams::{DataOrder, mix, stream};
use crate::task::{Stage, Task};

/// How a training run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Finished,
    /// A stop signal ended it after a checkpoint; `--resume` continues it.
    Stopped,
}

/// Written when a run has reached its iteration count.
pub const SUMMARY_FILE: &str = "summary.json";

/// Everything a run needs that does not change while it trains.
pub struct Trainer<'a, M: TrainModel, T: Task<M>> {
    pub task: &'a T,
    pub tokenizer: &'a LmTokenizer,
    /// The frozen reference π₀ (no autodiff).
    pub reference: &'a M,
    pub run: &'a RunSettings,
    pub spec: &'a CopySpec,
    /// The training device (autodiff).
    pub device: &'a Device,
    /// CORY only: llm2's own device and the reference there (`--llm2-device`); `None` keeps
    /// both copies on `device`.
    pub llm2_device: Option<&'a Llm2Device<M>>,
    /// Names the app in the resume hint (`imdb-app`).
    pub app: &'a str,
    /// The data-parallel group this process or thread is a rank of
    /// ([`lmrl_rl::SingleProcess`] for a run on one device).
    pub collective: &'a dyn Collective,
    /// Asks the run to stop after the current iteration, with a checkpoint.
    pub stop: &'a StopToken,
}

/// The run's logs (rank 0): one row per copy and iteration, and the sampled texts.
struct Logs {
    metrics: MetricsLog,
    samples: SamplesLog,
}

impl Logs {
    /// Opens the logs in `out`; on resume (`resume_from` = the checkpoint's iteration count)
    /// rows past the checkpoint and a torn last line are dropped.
    fn open(out: &Path, resume_from: Option<usize>) -> Result<Self> {
        Ok(Self {
            metrics: MetricsLog::open(&out.join("metrics.csv"), resume_from)?,
            samples: SamplesLog::open(&out.join("samples.jsonl"), resume_from)?,
        })
    }
}

/// One copy's part of the progress line.
fn progress_text(r: &MetricRow) -> String {
    let mut t = format!(" {} ({}) r {:+.3}", r.agent, r.role, r.task_reward);
    if let Some(sd) = r.reward_std {
        t.push_str(&format!(" ±{sd:.3}"));
    }
    if let Some(z) = r.frac_reward_zero_std {
        t.push_str(&format!(" zero-std {z:.2}"));
    }
    t.push_str(&format!(
        " len {:.1} kl {:.3} β {:.3} |",
        r.response_len, r.kl, r.beta
    ));
    t
}

/// Seconds spent in each phase of one iteration.
#[derive(Debug, Default, Clone, Copy)]
struct Phases {
    generate: f64,
    score: f64,
}

impl<M: TrainModel, T: Task<M>> Trainer<'_, M, T> {
    /// Trains in `dir` from `start` to `run.iterations`, then evaluates, draws the plots and
    /// writes [`SUMMARY_FILE`]. `base` is the pretrained model on the training device: fresh
    /// copies start from it, LoRA runs rebuild their adapters on it.
    pub fn train(&self, dir: &RunDir, start: Start, base: M) -> Result<Outcome> {
        self.train_rank(Some(dir), start, base)
    }

    /// [`Trainer::train`] as one rank of a data-parallel group: rank 0 holds the run
    /// directory (`dir`) and writes every file; the other ranks (`None`) compute their share,
    /// read checkpoints to resume, and write nothing.
    pub fn train_rank(&self, dir: Option<&RunDir>, start: Start, base: M) -> Result<Outcome> {
        if self.run.oversample > 1 && self.collective.world() > 1 {
            return Err(crate::error::setting(
                "run.oversample",
                "selects groups within one process; a data-parallel run takes `--oversample 1`",
            ));
        }
        let (have, need) = (self.task.prompts().len(), self.batch_size());
        if have < need {
            return Err(TrainError::Task {
                what: format!(
                    "the task has {have} prompts, fewer than the {need} drawn per iteration"
                ),
                source: "too few prompts for one batch".into(),
            });
        }
        let resuming = matches!(start, Start::Resume { .. });
        let (mut copies, first) = match start {
            Start::Fresh => (self.fresh(dir, &base)?, 0),
            Start::Resume { candidates } => self.restore(dir, &candidates, &base)?,
        };
        drop(base);
        crate::parallel::join_group(&mut copies, self.collective)?;
        if let Some(dir) = dir
            && resuming
        {
            // A process killed between a save and its prune keeps one checkpoint too many.
            dir.checkpoints().prune(self.run.keep_checkpoints)?;
        }
        // The logs are opened (and so repaired: rows past the checkpoint and a torn last line
        // dropped) before anything reads them, also when nothing is left to train.
        let mut logs = match dir {
            Some(d) => Some(Logs::open(d.path(), resuming.then_some(first))?),
            None => None,
        };
        let total = self.run.iterations;
        if first >= total {
            if let Some(dir) = dir {
                eprintln!(
                    "{} already has {first} iterations (asked for {total}): nothing to do",
                    dir.path().display()
                );
                self.finish(dir.path(), &copies)?;
            }
            return Ok(Outcome::Finished);
        }
        if let Some(dir) = dir
            && first > 0
        {
            eprintln!(
                "resuming {} at iteration {first} of {total}",
                dir.path().display()
            );
        }
        // A signal to any rank while the model loaded or the base model was evaluated: the
        // work since the last checkpoint (none, or the one resumed from) is not worth an
        // iteration.
        if crate::parallel::any_rank(self.collective, self.stop.is_requested())? {
            self.report_stop_before(dir, first);
            return Ok(Outcome::Stopped);
        }
        let order = DataOrder::new(self.task.prompts().len(), self.batch_size(), self.run.seed);
        for it in first..total {
            self.iteration(&mut copies, &order, it, logs.as_mut())?;
            if self.checkpoint_or_stop(&copies, dir, it + 1)? {
                return Ok(Outcome::Stopped);
            }
        }
        if let Some(dir) = dir {
            self.finish(dir.path(), &copies)?;
        }
        Ok(Outcome::Finished)
    }

    /// Fresh copies of `base`, after the task has evaluated the base model (rank 0).
    fn fresh(&self, dir: Option<&RunDir>, base: &M) -> Result<Copies<M>> {
        if let Some(dir) = dir {
            self.evaluate(Stage::Before, &[("base", self.reference)], dir.path())?;
        }
        Copies::fresh(
            self.spec,
            base,
            self.reference,
            self.device,
            self.llm2_device,
        )
    }

    /// The copies of the newest checkpoint that restores, and its iteration count: rank 0
    /// picks it (moving unusable ones aside), the other ranks restore that one.
    fn restore(
        &self,
        dir: Option<&RunDir>,
        candidates: &[(usize, PathBuf)],
        base: &M,
    ) -> Result<(Copies<M>, usize)> {
        let restore = |done: usize, ckpt: &Path| -> Result<Copies<M>> {
            let c = Copies::restore(
                self.spec,
                ckpt,
                base,
                self.reference,
                self.device,
                self.llm2_device,
            )?;
            if let Copies::Cory(t) = &c
                && t.iterations() != done
            {
                return Err(TrainError::Run {
                    path: ckpt.to_path_buf(),
                    reason: format!(
                        "holds {} CORY iterations but its state.toml says {done}",
                        t.iterations()
                    ),
                });
            }
            Ok(c)
        };
        let c = self.collective;
        let (done, copies) = match dir {
            Some(dir) => {
                let (done, (copies, ckpt)) = dir.restore(candidates, |done, ckpt| {
                    restore(done, ckpt).map(|c| (c, ckpt.to_path_buf()))
                })?;
                if c.world() > 1 {
                    let _: (usize, PathBuf) = broadcast_json(c, 0, &(done, ckpt))?;
                }
                (done, copies)
            }
            None => {
                let (done, ckpt): (usize, PathBuf) = broadcast_json(c, 0, &(0, PathBuf::new()))?;
                (done, restore(done, &ckpt)?)
            }
        };
        Ok((copies, done))
    }

    /// Iteration `it`: the batch of `order`, each copy's step, the metrics rows and the
    /// progress line.
    fn iteration(
        &self,
        copies: &mut Copies<M>,
        order: &DataOrder,
        it: usize,
        mut logs: Option<&mut Logs>,
    ) -> Result<()> {
        let t0 = Instant::now();
        let mut phases = Phases::default();
        let batch: Vec<&Prompt<T::Context>> = order
            .batch(it)
            .into_iter()
            .map(|i| &self.task.prompts()[i])
            .collect();
        // This rank's contiguous share of the batch.
        let mine = shard(batch.len(), self.collective.rank(), self.collective.world());
        let samples = logs.as_mut().map(|l| &mut l.samples);
        let rows = match copies {
            Copies::Single(l) => {
                self.single_iteration(l, &batch, mine, it, samples, &mut phases)?
            }
            Copies::Cory(t) => self.cory_iteration(t, &batch, mine, it, samples, &mut phases)?,
        };
        let secs = t0.elapsed().as_secs_f64();
        let mut line = format!("it {:>3}/{} |", it + 1, self.run.iterations);
        for mut r in rows {
            r.seconds = secs;
            line.push_str(&progress_text(&r));
            if let Some(l) = logs.as_mut() {
                l.metrics.append(&r)?;
            }
        }
        if self.collective.rank() == 0 {
            eprintln!(
                "{line} {secs:.1} s (generate {:.1}, score {:.2}, optimise {:.1})",
                phases.generate,
                phases.score,
                (secs - phases.generate - phases.score).max(0.0)
            );
        }
        Ok(())
    }

    /// After iteration `done`: the checkpoint when due, and whether a stop signal to any rank
    /// ends the run here (every rank stops after the same iteration).
    fn checkpoint_or_stop(
        &self,
        copies: &Copies<M>,
        dir: Option<&RunDir>,
        done: usize,
    ) -> Result<bool> {
        let total = self.run.iterations;
        let mut stopping = crate::parallel::any_rank(self.collective, self.stop.is_requested())?;
        // `due` is the same on every rank (`stopping` is), so every rank asks again below.
        let due = checkpoint_due(done, self.run.checkpoint_every, total, stopping);
        if due && let Some(dir) = dir {
            self.save(copies, dir, done)?;
        }
        if due && !stopping {
            // A signal that arrived during the save stops the run right after it: the
            // checkpoint just written holds all the work, none is redone.
            stopping = crate::parallel::any_rank(self.collective, self.stop.is_requested())?;
        }
        if let Some(dir) = dir
            && stopping
        {
            let out = dir.path();
            eprintln!(
                "stopped after iteration {done}; checkpoint {} kept.\nresume with: {} --resume {} --iterations {total}",
                dir.checkpoints().path_for(done).display(),
                self.app,
                out.display(),
            );
            lmrl_runs::draw_run(out)?;
        }
        Ok(stopping)
    }

    /// What a stop before iteration `first + 1` kept, and how to resume (rank 0).
    fn report_stop_before(&self, dir: Option<&RunDir>, first: usize) {
        let Some(dir) = dir else {
            return;
        };
        let kept = match first {
            0 => "nothing was trained".to_string(),
            n => format!(
                "checkpoint {} kept",
                dir.checkpoints().path_for(n).display()
            ),
        };
        eprintln!(
            "stopped before iteration {}; {kept}.\nresume with: {} --resume {} --iterations {}",
            first + 1,
            self.app,
            dir.path().display(),
            self.run.iterations,
        );
    }

    /// Prompts per iteration: PPO's `batch_size`, or the group learners' `prompts_per_step`
    /// (each prompt answered G times).
    fn batch_size(&self) -> usize {
        self.spec.prompts_per_iteration() * self.run.oversample
    }

    fn save(&self, copies: &Copies<M>, dir: &RunDir, done: usize) -> Result<()> {
        let bar = spinner(format!("checkpoint {done}"));
        let r = copies.save(
            self.spec,
            dir.checkpoints(),
            (self.run.algo, self.run.seed),
            done,
            self.run.keep_checkpoints,
            self.tokenizer,
        );
        bar.finish_and_clear();
        r
    }

    fn evaluate(&self, stage: Stage, copies: &[(&str, &M)], out: &Path) -> Result<()> {
        self.task
            .evaluate(stage, copies, out)
            .map_err(|source| TrainError::Task {
                what: format!("the {stage:?} evaluation").to_lowercase(),
                source,
            })
    }

    /// Evaluates every trained copy, redraws the plots and writes the summary.
    fn finish(&self, out: &Path, copies: &Copies<M>) -> Result<()> {
        let named = copies.named();
        // The task evaluates on the run's device, where llm2 may not be (`--llm2-device`).
        let here = self.device.clone().without_autodiff();
        let policies: Vec<(&str, M)> = named
            .iter()
            .map(|(n, l)| (*n, l.policy().valid().to_device(&here)))
            .collect();
        let refs: Vec<(&str, &M)> = policies.iter().map(|(n, m)| (*n, m)).collect();
        self.evaluate(Stage::After, &refs, out)?;
        lmrl_runs::draw_run(out)?;
        let rows = lmrl_runs::read_rows(&out.join("metrics.csv"))?;
        #[derive(Serialize)]
        struct Summary {
            iterations: usize,
            final_rows: Vec<MetricRow>,
            /// The task's evaluation table (`eval.json`, e.g. the held-out reward or pass@k of
            /// the base model and every copy), when it wrote one.
            #[serde(skip_serializing_if = "Option::is_none")]
            evaluation: Option<serde_json::Value>,
        }
        let summary = Summary {
            iterations: self.run.iterations,
            final_rows: lmrl_runs::final_rows(&rows),
            evaluation: read_evaluation(out),
        };
        let text = serde_json::to_string_pretty(&summary).expect("the summary serialises");
        lmrl_runs::atomic_write(&out.join(SUMMARY_FILE), text.as_bytes())?;
        eprintln!("done: results in {}", out.display());
        Ok(())
    }

    /// The sampler settings of iteration `it` for prompts from global index `first_row` on.
    fn generation(&self, it: usize, first_row: usize) -> GenerationConfig {
        GenerationConfig {
            first_row: first_row as u64,
            ..self
                .task
                .generation(it, mix(&[self.run.seed, it as u64, stream::GEN_PIONEER]))
        }
    }

    fn decode_all(&self, seqs: &[Vec<u32>]) -> Result<Vec<String>> {
        seqs.iter()
            .map(|s| Ok(self.task.decode(self.tokenizer, s)?))
            .collect()
    }

    /// The task reward of each response to `prompts`, checked to be finite.
    fn rewards(
        &self,
        prompts: &[&Prompt<T::Context>],
        shown: &[&str],
        responses: &[String],
        it: usize,
    ) -> Result<Vec<f32>> {
        let samples: Vec<Sample<'_, T::Context>> = prompts
            .iter()
            .zip(shown)
            .zip(responses)
            .map(|((p, s), r)| Sample::new(s, r, &p.context))
            .collect();
        let reward = self.task.reward();
        let scores = reward.score(&samples).map_err(|e| TrainError::Iteration {
            iteration: it,
            what: "the reward",
            source: Box::new(e),
        })?;
        if let Some(i) = scores.iter().position(|s| !s.is_finite()) {
            return Err(TrainError::Iteration {
                iteration: it,
                what: "the reward",
                source: format!(
                    "`{}` gave a non-finite score ({}) to sample {i}: {:?}",
                    reward.name(),
                    scores[i],
                    responses[i]
                )
                .into(),
            });
        }
        Ok(scores)
    }

    /// One iteration of a single learner: sample, score, step. `mine` is this rank's share
    /// of `batch` (all of it in one process); the responses and rewards of every rank are
    /// gathered for the metrics and the sample log.
    fn single_iteration(
        &self,
        learner: &mut DynLearner<M>,
        batch: &[&Prompt<T::Context>],
        mine: std::ops::Range<usize>,
        it: usize,
        samples: Option<&mut SamplesLog>,
        phases: &mut Phases,
    ) -> Result<Vec<MetricRow>> {
        let g = learner.samples_per_prompt();
        let expand = |prompts| expand(prompts, g);
        let expanded = expand(&batch[mine.clone()]);
        let q: Vec<Vec<u32>> = expanded.iter().map(|p| p.ids.clone()).collect();
        let t0 = Instant::now();
        let y = generate_rows(
            learner.as_ref(),
            &q,
            &self.generation(it, mine.start * g),
            self.run.generation_batch_size,
            "generating",
            self.collective.rank() == 0,
        )
        .map_err(|e| iteration_err(it, "generation", e))?;
        phases.generate += t0.elapsed().as_secs_f64();
        let y_text = self.decode_all(&y)?;
        let shown: Vec<&str> = expanded.iter().map(|p| p.text.as_str()).collect();
        let t0 = Instant::now();
        let scores = self.rewards(&expanded, &shown, &y_text, it)?;
        phases.score += t0.elapsed().as_secs_f64();
        // The groups trained on (all of them without oversampling), as completion indices.
        let trained = informative_samples(&scores, g, self.spec.prompts_per_iteration());
        let pick =
            |v: &[Vec<u32>]| -> Vec<Vec<u32>> { trained.iter().map(|&i| v[i].clone()).collect() };
        let (q_step, y_step) = (pick(&q), pick(&y));
        let s_step: Vec<f32> = trained.iter().map(|&i| scores[i]).collect();
        let bar = self.spinner(format!("optimising {} samples", q_step.len()));
        let stats = learner.step(&q_step, &y_step, &s_step, self.reference);
        bar.finish_and_clear();
        let stats = stats.map_err(|e| iteration_err(it, "the learner's step", e))?;
        // Every rank's responses and rewards, in batch order.
        let c = self.collective;
        let all_text = all_gather_json(c, &y_text).map_err(|e| iteration_err(it, "gather", e))?;
        let all_scores = all_gather_json(c, &scores).map_err(|e| iteration_err(it, "gather", e))?;
        // Which logged samples were trained on, when not all of them were.
        let flags = (self.run.oversample > 1).then(|| {
            let mut f = vec![false; q.len()];
            trained.iter().for_each(|&i| f[i] = true);
            f
        });
        if let Some(samples) = samples
            && it.is_multiple_of(self.run.samples_every)
        {
            let expanded = expand(batch);
            let shown: Vec<&str> = expanded.iter().map(|p| p.text.as_str()).collect();
            self.log_samples(
                samples,
                it,
                POLICY,
                "policy",
                &expanded,
                &shown,
                &all_text,
                &all_scores,
                flags.as_deref(),
            )?;
        }
        let mut row = metric_row(it, POLICY, "policy", &all_scores, &stats, None);
        row.repetition = repetition(&all_text);
        if self.run.oversample > 1 {
            // Of every drawn group, not only the (mostly informative) ones trained on.
            row.frac_reward_zero_std = Some(equal_reward_share(&all_scores, g));
        }
        Ok(vec![row])
    }

    fn spinner(&self, what: String) -> ProgressBar {
        if self.collective.rank() == 0 {
            spinner(what)
        } else {
            ProgressBar::hidden()
        }
    }

    /// One CORY iteration through [`lmrl_rl::CoryTrainer::iteration`] on this rank's share
    /// `mine` of `batch`; the texts and rewards of every rank are gathered, and the observer's
    /// plain-query means taken over the whole batch.
    fn cory_iteration(
        &self,
        trainer: &mut lmrl_rl::CoryTrainer<M, DynLearner<M>>,
        batch: &[&Prompt<T::Context>],
        mine: std::ops::Range<usize>,
        it: usize,
        samples: Option<&mut SamplesLog>,
        phases: &mut Phases,
    ) -> Result<Vec<MetricRow>> {
        let owned: Vec<Prompt<T::Context>> =
            batch[mine.clone()].iter().map(|p| (*p).clone()).collect();
        let mut env = LoopEnv {
            trainer: self,
            generate_secs: 0.0,
        };
        let reward = TimedReward {
            inner: self.task.reward(),
            secs: std::sync::Mutex::new(0.0),
        };
        let g = trainer.pioneer().samples_per_prompt();
        let mut stats = trainer
            .iteration(
                &owned,
                &self.generation(it, mine.start * g),
                &mut env,
                &reward,
            )
            .map_err(|e| iteration_err(it, "the CORY iteration", e))?;
        phases.generate += env.generate_secs;
        phases.score += reward.secs.lock().map_or(0.0, |s| *s);
        crate::parallel::gather_cory_stats(self.collective, &mut stats, owned.len(), batch.len())
            .map_err(|e| iteration_err(it, "gather", e))?;
        if let Some(samples) = samples
            && it.is_multiple_of(self.run.samples_every)
        {
            let all: Vec<Prompt<T::Context>> = batch.iter().map(|p| (*p).clone()).collect();
            self.log_cory_samples(samples, it, &all, &stats)?;
        }
        let mut rows = cory_rows(it, &stats);
        for (row, m) in rows.iter_mut().zip(&stats.agents) {
            let texts = match m.role {
                Role::Pioneer => &stats.texts.pioneer_responses,
                Role::Observer => &stats.texts.observer_responses,
            };
            row.repetition = repetition(texts);
        }
        Ok(rows)
    }

    #[allow(clippy::too_many_arguments)]
    fn log_samples(
        &self,
        samples: &mut SamplesLog,
        it: usize,
        agent: &str,
        role: &str,
        prompts: &[&Prompt<T::Context>],
        shown: &[&str],
        responses: &[String],
        rewards: &[f32],
        trained: Option<&[bool]>,
    ) -> Result<()> {
        for (i, (((p, s), y), r)) in prompts
            .iter()
            .zip(shown)
            .zip(responses)
            .zip(rewards)
            .enumerate()
        {
            let mut line = serde_json::Map::new();
            line.insert("iteration".into(), it.into());
            line.insert("agent".into(), agent.into());
            line.insert("role".into(), role.into());
            line.insert("prompt".into(), (*s).into());
            line.insert("response".into(), y.as_str().into());
            line.insert("reward".into(), f64::from(*r).into());
            if let Some(t) = trained {
                line.insert("trained".into(), t[i].into());
            }
            line.extend(self.task.sample_fields(p, y));
            samples.append(&line)?;
        }
        Ok(())
    }

    fn log_cory_samples(
        &self,
        samples: &mut SamplesLog,
        it: usize,
        batch: &[Prompt<T::Context>],
        stats: &CoryIterationStats,
    ) -> Result<()> {
        let t = &stats.texts;
        let g = t.queries.len() / batch.len().max(1);
        let expanded: Vec<&Prompt<T::Context>> = batch
            .iter()
            .flat_map(|p| std::iter::repeat_n(p, g.max(1)))
            .collect();
        for m in &stats.agents {
            let (role, shown, responses, rewards): (&str, Vec<&str>, _, _) = match m.role {
                Role::Pioneer => (
                    "pioneer",
                    t.queries.iter().map(String::as_str).collect(),
                    &t.pioneer_responses,
                    &t.pioneer_rewards,
                ),
                Role::Observer => (
                    "observer",
                    t.observer_prompts.iter().map(String::as_str).collect(),
                    &t.observer_responses,
                    &t.observer_rewards,
                ),
            };
            self.log_samples(
                samples, it, m.llm, role, &expanded, &shown, responses, rewards, None,
            )?;
        }
        Ok(())
    }
}

/// Each prompt `g` times in a row (the batch layout of `Learner::samples_per_prompt`).
fn expand<'p, C>(prompts: &[&'p Prompt<C>], g: usize) -> Vec<&'p Prompt<C>> {
    prompts
        .iter()
        .flat_map(|p| std::iter::repeat_n(*p, g))
        .collect()
}

fn iteration_err(it: usize, what: &'static str, e: lmrl_rl::RlError) -> TrainError {
    TrainError::Iteration {
        iteration: it,
        what,
        source: Box::new(e),
    }
}

/// The loop's side of CORY: the task's tokenizer and template, and chunked generation with a
/// progress bar.
struct LoopEnv<'t, 'a, M: TrainModel, T: Task<M>> {
    trainer: &'t Trainer<'a, M, T>,
    generate_secs: f64,
}

impl<M: TrainModel, T: Task<M>> CoryEnv<M, T::Context> for LoopEnv<'_, '_, M, T> {
    fn decode(&self, ids: &[u32]) -> std::result::Result<String, EnvError> {
        Ok(self.trainer.task.decode(self.trainer.tokenizer, ids)?)
    }

    fn encode(&self, text: &str) -> std::result::Result<Vec<u32>, EnvError> {
        Ok(self.trainer.tokenizer.encode(text)?)
    }

    fn observer_prompt(
        &self,
        prompt: &Prompt<T::Context>,
        pioneer_response: &str,
    ) -> std::result::Result<String, EnvError> {
        self.trainer.task.observer_prompt(prompt, pioneer_response)
    }

    fn generate(
        &mut self,
        learner: &dyn Learner<M>,
        prompts: &[Vec<u32>],
        config: &GenerationConfig,
        purpose: GenerationPurpose,
    ) -> std::result::Result<Vec<Vec<u32>>, EnvError> {
        let what = match purpose {
            GenerationPurpose::Pioneer => "pioneer",
            GenerationPurpose::Observer => "observer",
            GenerationPurpose::QueryOnly => "observer (plain query)",
        };
        let t0 = Instant::now();
        let out = generate_rows(
            learner,
            prompts,
            config,
            self.trainer.run.generation_batch_size,
            what,
            self.trainer.collective.rank() == 0,
        )?;
        self.generate_secs += t0.elapsed().as_secs_f64();
        Ok(out)
    }
}

/// The task's reward, timed.
struct TimedReward<'a, C> {
    inner: &'a dyn lmrl_rewards::Reward<C>,
    secs: std::sync::Mutex<f64>,
}

impl<C: Send + Sync> lmrl_rewards::Reward<C> for TimedReward<'_, C> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn score(
        &self,
        samples: &[Sample<'_, C>],
    ) -> std::result::Result<Vec<f32>, lmrl_rewards::RewardError> {
        let t0 = Instant::now();
        let r = self.inner.score(samples);
        if let Ok(mut s) = self.secs.lock() {
            *s += t0.elapsed().as_secs_f64();
        }
        r
    }
}

/// The task's `eval.json` in run directory `out`, when there and valid JSON (the summary
/// copies it; the task itself reports a file it cannot write or read).
fn read_evaluation(out: &Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(out.join("eval.json")).ok()?;
    serde_json::from_str(&text).ok()
}
