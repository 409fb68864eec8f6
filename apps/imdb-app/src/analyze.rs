//! `imdb-app analyze`: the PPO-vs-CORY comparison of a directory of finished runs (each a
//! subdirectory with its `config.toml` and `metrics.csv`), in the pioneer (plain-query) format
//! for every copy: the KL ratio at matched task reward (primary), the paired KL ratio over the
//! last iterations, the reward gap, the trend of the combined reward, and LLM1 against LLM2.
//! Writes `analysis.md`, `analysis.json` and the mean ± std curves.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use lmrl_runs::{CurveGroup, MetricRow, atomic_write, plot_curves, read_rows};
use lmrl_train::{Algo, read_config};
use serde::Serialize;

use crate::cli::AnalyzeArgs;
use crate::config::ImdbConfig;
use crate::stats::{
    Interval, RunPoints, kl_ratio_at_matched_reward, mean_ci, paired_ratio, slope, smooth,
};

/// One run read back: its settings and its rows.
struct Run {
    name: String,
    config: ImdbConfig,
    rows: Vec<MetricRow>,
    /// Up to four `agent (role): response` lines of the last logged iteration.
    last_samples: Vec<String>,
}

/// What pairs a PPO run with a CORY run: the seed and β₀ (`init_kl_coef`'s bits), so that in a
/// frontier sweep each seed is paired at each β₀.
type Unit = (u64, u64);

impl Run {
    fn cory(&self) -> bool {
        self.config.run.algo == Algo::Cory
    }

    fn unit(&self) -> Unit {
        (self.config.run.seed, self.config.ppo.init_kl_coef.to_bits())
    }

    /// Per iteration, the mean over the run's copies of the plain-query (pioneer-format) task
    /// reward, KL and reward − β·KL; for CORY both copies, each measured answering the plain
    /// query (`pioneer_format_metrics`).
    fn curve(&self) -> Vec<(usize, f64, f64, f64)> {
        let mut by_it: BTreeMap<usize, Vec<&MetricRow>> = BTreeMap::new();
        for r in &self.rows {
            by_it.entry(r.iteration).or_default().push(r);
        }
        by_it
            .into_iter()
            .map(|(it, rs)| {
                let n = rs.len() as f64;
                let reward = rs.iter().map(|r| r.pioneer_task_reward).sum::<f64>() / n;
                let kl = rs.iter().map(|r| r.pioneer_kl).sum::<f64>() / n;
                let combined = rs
                    .iter()
                    .map(|r| r.pioneer_task_reward - r.beta * r.pioneer_kl)
                    .sum::<f64>()
                    / n;
                (it, reward, kl, combined)
            })
            .collect()
    }

    /// The copy `agent`'s plain-query (reward, KL) means over the last `tail` iterations.
    fn tail_of(&self, agent: &str, tail: usize) -> (f64, f64) {
        let last = self.rows.iter().map(|r| r.iteration).max().unwrap_or(0);
        let from = (last + 1).saturating_sub(tail);
        let sel: Vec<&MetricRow> = self
            .rows
            .iter()
            .filter(|r| r.agent == agent && r.iteration >= from)
            .collect();
        let n = sel.len().max(1) as f64;
        (
            sel.iter().map(|r| r.pioneer_task_reward).sum::<f64>() / n,
            sel.iter().map(|r| r.pioneer_kl).sum::<f64>() / n,
        )
    }
}

/// Below this mean per-token entropy (nats) a policy is taken to have collapsed: it then puts
/// nearly all its mass on one token at every step (≈ 2.4–4 nats at the start of these runs,
/// 2.5–3.9 over the main comparison's last 10 iterations, ≈ 0.0–0.25 in the runs that repeat
/// one word or sign).
const COLLAPSED_ENTROPY: f64 = 0.5;

impl Run {
    /// Per iteration, the mean entropy of the run's training-role rows (for CORY of both copies,
    /// so that a CORY run counts as collapsed only when both copies are near 0: one copy at its
    /// usual ≈ 3 nats keeps the mean above [`COLLAPSED_ENTROPY`]).
    fn entropy_curve(&self) -> Vec<(usize, f64)> {
        let mut by_it: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        for r in &self.rows {
            by_it.entry(r.iteration).or_default().push(r.entropy);
        }
        by_it
            .into_iter()
            .map(|(it, e)| (it, e.iter().sum::<f64>() / e.len() as f64))
            .collect()
    }

    /// The iteration from which the entropy stays below [`COLLAPSED_ENTROPY`] to the end, if it
    /// does.
    fn collapsed_from(&self) -> Option<usize> {
        let curve = self.entropy_curve();
        let stays_low = curve
            .iter()
            .rev()
            .take_while(|(_, e)| *e < COLLAPSED_ENTROPY)
            .count();
        (stays_low > 0).then(|| curve[curve.len() - stays_low].0)
    }
}

/// One run's collapse indicators over the last iterations.
#[derive(Debug, Serialize)]
struct RunTail {
    run: String,
    /// Mean entropy of the training-role rows.
    entropy: f64,
    /// Share of repeated words (0 for responses without words, such as ";;;;").
    repetition: f64,
    /// Plain-query KL and task reward.
    kl: f64,
    task_reward: f64,
    /// The iteration from which the entropy stays below [`COLLAPSED_ENTROPY`].
    collapsed_from: Option<usize>,
}

/// The first four responses of `samples_last.jsonl`, if the run has one.
fn read_last_samples(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .take(4)
        .map(|v| {
            format!(
                "{} ({}): {}{}",
                v["agent"].as_str().unwrap_or("?"),
                v["role"].as_str().unwrap_or("?"),
                v["prompt"].as_str().unwrap_or(""),
                v["response"].as_str().unwrap_or("")
            )
        })
        .collect()
}

fn read_runs(dir: &Path, frontier: bool) -> Result<Vec<Run>> {
    let mut runs = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("metrics.csv").is_file() && p.join("config.toml").is_file())
        .collect();
    entries.sort();
    for p in entries {
        let config: ImdbConfig = read_config(&p.join("config.toml"))?;
        if config.run.algo == Algo::Cory && !config.cory.pioneer_format_metrics {
            bail!(
                "{}: a CORY run without `pioneer_format_metrics` has no plain-query measurement \
                 of its observer; rerun it with --pioneer-format-metrics true",
                p.display()
            );
        }
        let last_samples = read_last_samples(&p.join("samples_last.jsonl"));
        runs.push(Run {
            last_samples,
            name: p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            rows: read_rows(&p.join("metrics.csv"))?,
            config,
        });
    }
    if runs.is_empty() {
        bail!(
            "{} holds no run directories (config.toml + metrics.csv)",
            dir.display()
        );
    }
    check_like_for_like(&runs, frontier)?;
    Ok(runs)
}

/// The settings of a run without what the comparison varies (the algorithm and the seeds, and
/// for a frontier β₀).
fn compared_settings(config: &ImdbConfig, frontier: bool) -> Result<toml::Table> {
    let mut c = config.clone();
    if frontier {
        c.ppo.init_kl_coef = 0.0;
    }
    c.run.algo = Algo::Ppo;
    c.run.seed = 0;
    c.ppo.seed = 0;
    c.grpo.seed = 0;
    c.rloo.seed = 0;
    // How CORY's two updates are scheduled, not what they compute (equal bit for bit).
    c.cory.concurrent_updates = false;
    Ok(toml::Table::try_from(&c)?)
}

/// Paired statistics are only meaningful between runs that differ in the algorithm and the
/// seed alone (and β₀ with `frontier`); a directory that mixes, say, two β₀ is refused unless it
/// is analysed as a frontier.
fn check_like_for_like(runs: &[Run], frontier: bool) -> Result<()> {
    let first = compared_settings(&runs[0].config, frontier)?;
    let varied = if frontier {
        "the algorithm, the seed and β₀"
    } else {
        "the algorithm and the seed (--frontier: also β₀)"
    };
    for r in &runs[1..] {
        let this = compared_settings(&r.config, frontier)?;
        for (section, table) in &first {
            let other = this.get(section);
            if let (toml::Value::Table(a), Some(toml::Value::Table(b))) = (table, other)
                && let Some((key, v)) = a.iter().find(|(k, v)| b.get(*k) != Some(*v))
            {
                bail!(
                    "{} and {} differ in [{section}] {key} ({v} vs {}): analyze compares runs \
                         that differ only in {varied}",
                    runs[0].name,
                    r.name,
                    b.get(key).map_or("absent".into(), |x| x.to_string())
                );
            }
        }
    }
    Ok(())
}

/// What the analysis reports.
#[derive(Debug, Serialize)]
struct Report {
    runs: Vec<String>,
    seeds_ppo: Vec<u64>,
    seeds_cory: Vec<u64>,
    /// The β₀ of a frontier analysis (PPO and CORY paired at each), empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    frontier_betas: Vec<f64>,
    tail: usize,
    smoothing: usize,
    /// CORY / PPO KL at matched task reward (exp of the algorithm coefficient of
    /// log KL ~ reward + algorithm), 95% cluster-bootstrap interval over seeds.
    kl_ratio_matched: Option<Ival>,
    /// PPO / CORY mean KL over the last `tail` iterations, paired by seed (geometric mean, t
    /// interval on the log ratios).
    kl_ratio_paired_ppo_over_cory: Option<Ival>,
    reward_tail: BTreeMap<&'static str, Ival>,
    kl_tail: BTreeMap<&'static str, Ival>,
    /// PPO − CORY task reward over the last `tail` iterations, paired by seed.
    reward_gap_ppo_minus_cory: Option<Ival>,
    /// Least-squares slope of the combined reward r − β·KL over iterations (per run, then the
    /// mean over seeds with its t interval).
    combined_slope: BTreeMap<&'static str, Ival>,
    /// CORY's LLM1 − LLM2 over the last `tail` iterations (plain-query format), paired by seed.
    llm1_minus_llm2_reward: Option<Ival>,
    llm1_minus_llm2_kl: Option<Ival>,
    /// Collapse indicators over the last `tail` iterations, training-role rows: the policy's
    /// mean per-token entropy and the share of repeated words in its responses.
    entropy_tail: BTreeMap<&'static str, Ival>,
    repetition_tail: BTreeMap<&'static str, Ival>,
    /// Each run's collapse indicators over the last `tail` iterations.
    per_run: Vec<RunTail>,
    /// A few responses of each run's last logged iteration (`samples_last.jsonl`).
    samples: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct Ival {
    estimate: f64,
    low: f64,
    high: f64,
}

impl From<Interval> for Ival {
    fn from(i: Interval) -> Self {
        Self {
            estimate: i.estimate,
            low: i.low,
            high: i.high,
        }
    }
}

fn label(cory: bool) -> &'static str {
    if cory { "cory" } else { "ppo" }
}

fn analyse(runs: &[Run], tail: usize, smoothing: usize, frontier: bool) -> Report {
    let (cory, ppo): (Vec<&Run>, Vec<&Run>) = runs.iter().partition(|r| r.cory());
    let points: Vec<RunPoints> = runs
        .iter()
        .map(|r| {
            let c = r.curve();
            let rewards: Vec<f64> = c.iter().map(|p| p.1).collect();
            let kls: Vec<f64> = c.iter().map(|p| p.2).collect();
            RunPoints {
                cory: r.cory(),
                seed: r.config.run.seed,
                points: smooth(&rewards, smoothing)
                    .into_iter()
                    .zip(smooth(&kls, smoothing))
                    .collect(),
            }
        })
        .collect();
    let tail_means = |r: &Run| -> (f64, f64) {
        let c = r.curve();
        let t: Vec<_> = c.iter().rev().take(tail).collect();
        let n = t.len().max(1) as f64;
        (
            t.iter().map(|p| p.1).sum::<f64>() / n,
            t.iter().map(|p| p.2).sum::<f64>() / n,
        )
    };
    let by_unit = |rs: &[&Run]| -> BTreeMap<Unit, (f64, f64)> {
        rs.iter().map(|r| (r.unit(), tail_means(r))).collect()
    };
    let (ps, cs) = (by_unit(&ppo), by_unit(&cory));
    // (unit, PPO's (reward, KL), CORY's (reward, KL)) of each seed and β₀ both ran.
    type Pair = (Unit, (f64, f64), (f64, f64));
    let paired: Vec<Pair> = ps
        .iter()
        .filter_map(|(s, p)| cs.get(s).map(|c| (*s, *p, *c)))
        .collect();
    let ival = |xs: Vec<f64>| (xs.len() > 1).then(|| Ival::from(mean_ci(&xs)));
    let by_algorithm = |of: &dyn Fn(&Run) -> Option<f64>| -> BTreeMap<&'static str, Ival> {
        [(false, &ppo), (true, &cory)]
            .into_iter()
            .filter_map(|(is_cory, group)| {
                ival(group.iter().filter_map(|r| of(r)).collect()).map(|i| (label(is_cory), i))
            })
            .collect()
    };
    let reward_tail = by_algorithm(&|r| Some(tail_means(r).0));
    let kl_tail = by_algorithm(&|r| Some(tail_means(r).1));
    let combined_slope = by_algorithm(&|r| {
        let c: Vec<(f64, f64)> = r.curve().iter().map(|p| (p.0 as f64, p.3)).collect();
        slope(&c)
    });
    let tail_rows = |r: &Run, pick: fn(&MetricRow) -> f64| -> f64 {
        let last = r.rows.iter().map(|x| x.iteration).max().unwrap_or(0);
        let from = (last + 1).saturating_sub(tail);
        let sel: Vec<f64> = r
            .rows
            .iter()
            .filter(|x| x.iteration >= from)
            .map(pick)
            .collect();
        sel.iter().sum::<f64>() / sel.len().max(1) as f64
    };
    let entropy_tail = by_algorithm(&|r| Some(tail_rows(r, |x| x.entropy)));
    let repetition_tail = by_algorithm(&|r| Some(tail_rows(r, |x| x.repetition)));
    let llm =
        |agent: &str| -> Vec<(f64, f64)> { cory.iter().map(|r| r.tail_of(agent, tail)).collect() };
    let (l1, l2) = (llm("llm1"), llm("llm2"));
    Report {
        runs: runs.iter().map(|r| r.name.clone()).collect(),
        seeds_ppo: seeds(&ppo),
        seeds_cory: seeds(&cory),
        frontier_betas: if frontier { betas(runs) } else { Vec::new() },
        tail,
        smoothing,
        kl_ratio_matched: (!ppo.is_empty() && cory.len() + ppo.len() > 2)
            .then(|| kl_ratio_at_matched_reward(&points, 2000, 0))
            .flatten()
            .map(Ival::from),
        kl_ratio_paired_ppo_over_cory: (paired.len() > 1).then(|| {
            Ival::from(paired_ratio(
                &paired
                    .iter()
                    .map(|(_, p, c)| (p.1, c.1))
                    .collect::<Vec<_>>(),
            ))
        }),
        reward_tail,
        kl_tail,
        reward_gap_ppo_minus_cory: ival(paired.iter().map(|(_, p, c)| p.0 - c.0).collect()),
        combined_slope,
        llm1_minus_llm2_reward: ival(l1.iter().zip(&l2).map(|(a, b)| a.0 - b.0).collect()),
        llm1_minus_llm2_kl: ival(l1.iter().zip(&l2).map(|(a, b)| a.1 - b.1).collect()),
        entropy_tail,
        repetition_tail,
        per_run: runs
            .iter()
            .map(|r| {
                let (task_reward, kl) = tail_means(r);
                RunTail {
                    run: r.name.clone(),
                    entropy: tail_rows(r, |x| x.entropy),
                    repetition: tail_rows(r, |x| x.repetition),
                    kl,
                    task_reward,
                    collapsed_from: r.collapsed_from(),
                }
            })
            .collect(),
        samples: runs
            .iter()
            .map(|r| (r.name.clone(), r.last_samples.clone()))
            .filter(|(_, s)| !s.is_empty())
            .collect(),
    }
}

/// The distinct seeds of `runs`, ascending.
fn seeds(runs: &[&Run]) -> Vec<u64> {
    let s: std::collections::BTreeSet<u64> = runs.iter().map(|r| r.config.run.seed).collect();
    s.into_iter().collect()
}

/// The distinct β₀ of `runs`, ascending.
fn betas(runs: &[Run]) -> Vec<f64> {
    let mut b: Vec<f64> = runs.iter().map(|r| r.config.ppo.init_kl_coef).collect();
    b.sort_by(f64::total_cmp);
    b.dedup();
    b
}

fn fmt(i: &Option<Ival>) -> String {
    match i {
        Some(i) => format!("{:.3} [{:.3}, {:.3}]", i.estimate, i.low, i.high),
        None => "—".into(),
    }
}

fn markdown(r: &Report) -> String {
    let g = |m: &BTreeMap<&str, Ival>, k: &str| fmt(&m.get(k).copied());
    let (betas, pairing) = match r.frontier_betas.as_slice() {
        [] => (String::new(), "seed"),
        b => (format!(", β₀ {b:?} pooled"), "seed and β₀"),
    };
    format!(
        "| quantity (plain-query format, 95% interval over seeds) | value |\n|---|---|\n\
         | runs | {} (PPO seeds {:?}, CORY seeds {:?}{betas}) |\n\
         | CORY / PPO KL at matched task reward (log-KL fit, smoothing {}) | {} |\n\
         | PPO / CORY KL, last {} iterations, paired by {pairing} | {} |\n\
         | task reward, last {} iterations: PPO | {} |\n\
         | task reward, last {} iterations: CORY | {} |\n\
         | PPO − CORY task reward, paired by {pairing} | {} |\n\
         | KL, last {} iterations: PPO | {} |\n\
         | KL, last {} iterations: CORY | {} |\n\
         | slope of r − β·KL per iteration: PPO | {} |\n\
         | slope of r − β·KL per iteration: CORY | {} |\n\
         | CORY LLM1 − LLM2 task reward, last {} | {} |\n\
         | CORY LLM1 − LLM2 KL, last {} | {} |\n\
         | entropy (training role), last {}: PPO / CORY | {} / {} |\n\
         | repeated-word share, last {}: PPO / CORY | {} / {} |\n{}{}",
        r.runs.len(),
        r.seeds_ppo,
        r.seeds_cory,
        r.smoothing,
        fmt(&r.kl_ratio_matched),
        r.tail,
        fmt(&r.kl_ratio_paired_ppo_over_cory),
        r.tail,
        g(&r.reward_tail, "ppo"),
        r.tail,
        g(&r.reward_tail, "cory"),
        fmt(&r.reward_gap_ppo_minus_cory),
        r.tail,
        g(&r.kl_tail, "ppo"),
        r.tail,
        g(&r.kl_tail, "cory"),
        g(&r.combined_slope, "ppo"),
        g(&r.combined_slope, "cory"),
        r.tail,
        fmt(&r.llm1_minus_llm2_reward),
        r.tail,
        fmt(&r.llm1_minus_llm2_kl),
        r.tail,
        g(&r.entropy_tail, "ppo"),
        g(&r.entropy_tail, "cory"),
        r.tail,
        g(&r.repetition_tail, "ppo"),
        g(&r.repetition_tail, "cory"),
        per_run_md(&r.per_run, r.tail),
        samples_md(&r.samples),
    )
}

fn per_run_md(runs: &[RunTail], tail: usize) -> String {
    let mut s = format!(
        "\nPer run, last {tail} iterations (collapsed: the entropy, for CORY the mean of both \
         copies', stays below {COLLAPSED_ENTROPY} nats to the end):\n\n\
         | run | entropy | repeated-word share | KL (plain query) | task reward | collapsed |\n\
         |---|---:|---:|---:|---:|---|\n"
    );
    for r in runs {
        let collapsed = match r.collapsed_from {
            Some(it) => format!("from iteration {it}"),
            None => "no".into(),
        };
        s.push_str(&format!(
            "| {} | {:.3} | {:.3} | {:.2} | {:.3} | {collapsed} |\n",
            r.run, r.entropy, r.repetition, r.kl, r.task_reward
        ));
    }
    s
}

fn samples_md(samples: &BTreeMap<String, Vec<String>>) -> String {
    let mut s = String::new();
    if !samples.is_empty() {
        s.push_str("\nLast logged responses:\n\n");
    }
    for (run, lines) in samples {
        s.push_str(&format!("- `{run}`\n"));
        for l in lines {
            s.push_str(&format!("  - {}\n", l.replace('\n', " ")));
        }
    }
    s
}

/// The mean ± std curves of every algorithm (plain-query format) into `out`.
fn curves(runs: &[Run], out: &Path) -> Result<()> {
    type Pick = fn(&(usize, f64, f64, f64)) -> f64;
    let quantities: [(&str, &str, Pick); 3] = [
        ("task_reward", "task reward (plain query)", |p| p.1),
        ("kl", "KL (nats, plain query)", |p| p.2),
        ("combined_reward", "r − β·KL (plain query)", |p| p.3),
    ];
    for (name, ylabel, pick) in quantities {
        let mut groups: Vec<CurveGroup> = Vec::new();
        for cory in [false, true] {
            let series: Vec<Vec<(f64, f64)>> = runs
                .iter()
                .filter(|r| r.cory() == cory)
                .map(|r| r.curve().iter().map(|p| (p.0 as f64, pick(p))).collect())
                .collect();
            if !series.is_empty() {
                groups.push(CurveGroup {
                    label: label(cory).into(),
                    runs: series,
                });
            }
        }
        plot_curves(&groups, out, &format!("curves_{name}"), ylabel)?;
    }
    Ok(())
}

/// Runs the `analyze` command.
pub fn run(args: &AnalyzeArgs) -> Result<ExitCode> {
    let runs = read_runs(&args.data, args.frontier)?;
    let report = analyse(&runs, args.tail, args.smoothing, args.frontier);
    let out = args.out.clone().unwrap_or_else(|| args.data.clone());
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let md = markdown(&report);
    atomic_write(&out.join("analysis.md"), md.as_bytes())?;
    atomic_write(
        &out.join("analysis.json"),
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    // A frontier's mean curves would average over β₀; the sweep plots them per β₀.
    if !args.frontier {
        curves(&runs, &out)?;
    }
    print!("{md}");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(algo: Algo, seed: u64, beta: f64) -> Run {
        let mut config = ImdbConfig::for_algo(Algo::Cory);
        config.run.algo = algo;
        config.run.seed = seed;
        config.ppo.seed = seed;
        config.ppo.init_kl_coef = beta;
        Run {
            name: format!("{}-kl{beta}-seed{seed}", algo.name()),
            config,
            rows: Vec::new(),
            last_samples: Vec::new(),
        }
    }

    fn with_entropies(mut r: Run, entropies: &[f64]) -> Run {
        r.rows = entropies
            .iter()
            .enumerate()
            .map(|(iteration, &entropy)| MetricRow {
                iteration,
                agent: "policy".into(),
                role: "policy".into(),
                task_reward: 0.0,
                kl: 0.0,
                beta: 0.3,
                combined_reward: 0.0,
                policy_loss: 0.0,
                value_loss: 0.0,
                entropy,
                approxkl: 0.0,
                clipfrac: 0.0,
                response_len: 4.0,
                pioneer_task_reward: 0.0,
                pioneer_kl: 0.0,
                repetition: 0.0,
                reward_std: None,
                frac_reward_zero_std: None,
                seconds: 1.0,
            })
            .collect();
        r
    }

    #[test]
    fn a_run_has_collapsed_from_where_its_entropy_stays_low() {
        let r = |e: &[f64]| with_entropies(run(Algo::Ppo, 0, 0.3), e).collapsed_from();
        assert_eq!(r(&[3.5, 3.0, 0.4, 0.1, 0.0]), Some(2));
        // A dip that recovers is not a collapse; a late one counts from where it stays.
        assert_eq!(r(&[3.5, 0.2, 2.0, 0.3, 0.1]), Some(3));
        assert_eq!(r(&[3.5, 0.2, 2.0, 3.1, 0.6]), None);
        assert_eq!(r(&[]), None);
    }

    #[test]
    fn runs_that_differ_in_more_than_algorithm_and_seed_are_refused() {
        let same = [run(Algo::Ppo, 0, 0.3), run(Algo::Cory, 1, 0.3)];
        assert!(check_like_for_like(&same, false).is_ok());
        let mixed = [run(Algo::Ppo, 0, 0.3), run(Algo::Ppo, 1, 1.0)];
        let e = check_like_for_like(&mixed, false).unwrap_err().to_string();
        assert!(
            e.contains("[ppo] init_kl_coef") && e.contains("ppo-kl1-seed1"),
            "{e}"
        );
        // A frontier admits β₀ but nothing else.
        assert!(check_like_for_like(&mixed, true).is_ok());
        let mut other = run(Algo::Ppo, 1, 1.0);
        other.config.ppo.learning_rate *= 2.0;
        let e = check_like_for_like(&[run(Algo::Ppo, 0, 0.3), other], true).unwrap_err();
        assert!(e.to_string().contains("[ppo] learning_rate"), "{e}");
    }

    /// A run whose plain-query reward and KL are `reward` and `kl` at every iteration.
    fn constant(algo: Algo, seed: u64, beta: f64, reward: f64, kl: f64) -> Run {
        let mut r = with_entropies(run(algo, seed, beta), &[3.0; 4]);
        for row in &mut r.rows {
            row.pioneer_task_reward = reward;
            row.pioneer_kl = kl;
        }
        r
    }

    #[test]
    fn a_frontier_pairs_each_seed_at_each_beta() {
        // CORY's KL is half PPO's at every β₀, at a reward that differs by β₀ and seed alone.
        let mut runs = Vec::new();
        for (beta, reward, kl) in [(0.1, 1.0, 8.0), (1.0, 0.2, 1.0)] {
            for seed in [0, 1] {
                let r = reward + 0.1 * seed as f64;
                runs.push(constant(Algo::Ppo, seed, beta, r, kl));
                runs.push(constant(Algo::Cory, seed, beta, r, kl / 2.0));
            }
        }
        let report = analyse(&runs, 2, 1, true);
        assert_eq!(report.frontier_betas, vec![0.1, 1.0]);
        assert_eq!(report.seeds_ppo, vec![0, 1]);
        // Four pairs, each PPO/CORY = 2, and no reward gap; paired by seed alone, the two β₀
        // of a seed would collide and leave one pair per seed.
        let paired = report.kl_ratio_paired_ppo_over_cory.expect("four pairs");
        assert!((paired.estimate - 2.0).abs() < 1e-9, "{paired:?}");
        let gap = report.reward_gap_ppo_minus_cory.expect("four pairs");
        assert!(
            gap.estimate.abs() < 1e-12 && gap.high - gap.low < 1e-9,
            "{gap:?}"
        );
        let matched = report.kl_ratio_matched.expect("a fit");
        assert!((matched.estimate - 0.5).abs() < 1e-9, "{matched:?}");
        assert!(markdown(&report).contains("paired by seed and β₀"));
    }
}
