//! `imdb-app sweep`: algorithm × initial β × seed, each run in its own subdirectory, then the
//! reward–KL frontier (mean ± std over seeds). Finished runs (with `summary.json` for the asked
//! iteration count) are skipped; interrupted ones are resumed.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::ArgMatches;
use lmrl_runs::{
    CheckpointDir, CurveGroup, FrontierPoint, MetricRow, atomic_write, mean_std, plot_curves,
    plot_frontier, read_rows,
};
use lmrl_train::{Outcome, Resolved, SUMMARY_FILE, resolve_with};

use crate::cli::SweepArgs;
use crate::config::ImdbConfig;
use crate::task::ImdbTask;

fn finished(dir: &Path, iterations: usize) -> bool {
    std::fs::read_to_string(dir.join(SUMMARY_FILE))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["iterations"].as_u64())
        .is_some_and(|n| n as usize >= iterations)
}

/// Mean of the plain-query (pioneer-format) task reward and KL over every copy's rows of the
/// last `tail` iterations: a CORY observer's own reward and KL are measured on its merged
/// prompt and are not comparable with a PPO policy's.
fn tail_point(dir: &Path, tail: usize) -> Result<(f64, f64)> {
    let rows = read_rows(&dir.join("metrics.csv"))?;
    let last = rows.iter().map(|r| r.iteration).max().unwrap_or(0);
    let from = (last + 1).saturating_sub(tail.max(1));
    let sel: Vec<_> = rows.iter().filter(|r| r.iteration >= from).collect();
    if sel.is_empty() {
        bail!("{} has no metrics rows", dir.display());
    }
    let n = sel.len() as f64;
    Ok((
        sel.iter().map(|r| r.pioneer_task_reward).sum::<f64>() / n,
        sel.iter().map(|r| r.pioneer_kl).sum::<f64>() / n,
    ))
}

/// The quantities drawn against iteration for every setting of the sweep.
/// File name, axis label and the metric it reads.
type Curve = (&'static str, &'static str, fn(&MetricRow) -> f64);

const CURVES: [Curve; 3] = [
    ("curves_task_reward", "task reward", |r| r.task_reward),
    ("curves_kl", "KL (nats)", |r| r.kl),
    ("curves_combined_reward", "task reward − β·KL", |r| {
        r.combined_reward
    }),
];

/// Adds one run's rows to the curve groups, one group per setting and trained copy
/// (`ppo`, or `cory llm1` / `cory llm2`, with β₀ when the sweep has several).
fn add_curves(groups: &mut [Vec<CurveGroup>; 3], setting: &str, rows: &[MetricRow]) {
    let mut agents: Vec<&str> = rows.iter().map(|r| r.agent.as_str()).collect();
    agents.sort();
    agents.dedup();
    for agent in agents {
        let label = if agent == lmrl_train::POLICY {
            setting.to_string()
        } else {
            format!("{setting} {agent}")
        };
        for (k, (_, _, pick)) in CURVES.iter().enumerate() {
            let run: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.agent == agent)
                .map(|r| (r.iteration as f64, pick(r)))
                .collect();
            match groups[k].iter_mut().find(|g| g.label == label) {
                Some(g) => g.runs.push(run),
                None => groups[k].push(CurveGroup {
                    label: label.clone(),
                    runs: vec![run],
                }),
            }
        }
    }
}

/// The settings the sweep sets per run, as a partial `config.toml`.
fn forced(algo: lmrl_train::Algo, kl: f64, seed: u64) -> Result<toml::Table> {
    let seed = i64::try_from(seed)
        .map_err(|_| anyhow::anyhow!("--seeds: {seed} is past the largest seed, {}", i64::MAX))?;
    let mut t = toml::Table::new();
    let mut run = toml::Table::new();
    run.insert("algo".into(), algo.name().into());
    run.insert("seed".into(), seed.into());
    let mut ppo = toml::Table::new();
    ppo.insert("init_kl_coef".into(), kl.into());
    // Every copy is also measured on the plain query, so the frontier compares like with like.
    let mut cory = toml::Table::new();
    cory.insert("pioneer_format_metrics".into(), true.into());
    t.insert("run".into(), run.into());
    t.insert("ppo".into(), ppo.into());
    t.insert("cory".into(), cory.into());
    Ok(t)
}

/// Runs the sweep; `matches` are those of the `sweep` subcommand.
pub fn run(matches: &ArgMatches, args: &SweepArgs) -> Result<ExitCode> {
    let c = &args.common;
    let set_by_sweep = ["algo", "init_kl_coef", "seed"];
    if c.run.resume.is_some()
        || set_by_sweep
            .iter()
            .any(|id| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine))
    {
        bail!(
            "sweep sets --algo, --init-kl-coef, --seed and --resume itself; use --algos, --init-kl-coefs, --seeds"
        );
    }
    let root = c
        .run
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("runs/sweep"));
    std::fs::create_dir_all(&root)?;
    let stop = crate::stop_on_signals()?;
    let mut points = Vec::new();
    let mut curves: [Vec<CurveGroup>; 3] = Default::default();
    let mut csv = String::from("algo,init_kl_coef,seeds,reward_mean,reward_std,kl_mean,kl_std\n");
    for &algo in &args.algos {
        for &kl in &args.init_kl_coefs {
            let mut rewards = Vec::new();
            let mut kls = Vec::new();
            for &seed in &args.seeds {
                let dir = root.join(format!("{}-kl{kl}-seed{seed}", algo.name()));
                let mut run_args = c.run.clone();
                run_args.out = Some(dir.clone());
                let fresh: Resolved<ImdbConfig> =
                    resolve_with(matches, &run_args, &forced(algo, kl, seed)?)?;
                if finished(&dir, fresh.config.run.iterations) {
                    eprintln!("sweep: {} finished, skipped", dir.display());
                } else {
                    let resume = CheckpointDir::new(dir.join("checkpoints"))
                        .latest()?
                        .is_some();
                    eprintln!(
                        "sweep: {} {}",
                        if resume { "resuming" } else { "training" },
                        dir.display()
                    );
                    let resolved = Resolved { resume, ..fresh };
                    match lmrl_train::train_resolved::<_, lmrl_models::AutoLm, _>(
                        "imdb-app sweep",
                        &resolved,
                        &run_args,
                        &stop,
                        ImdbTask::build,
                    )? {
                        Outcome::Finished => {}
                        Outcome::Stopped => {
                            eprintln!("sweep interrupted; rerun the same command to continue");
                            return Ok(ExitCode::from(130));
                        }
                    }
                }
                if let Some(data) = &args.data_dir {
                    copy_small_files(&dir, &data.join(dir.file_name().unwrap_or_default()))?;
                }
                let setting = if args.init_kl_coefs.len() > 1 {
                    format!("{} β₀={kl}", algo.name())
                } else {
                    algo.name().to_string()
                };
                add_curves(&mut curves, &setting, &read_rows(&dir.join("metrics.csv"))?);
                let (r, k) = tail_point(&dir, args.tail)?;
                rewards.push(r);
                kls.push(k);
            }
            let (rm, rs) = mean_std(&rewards);
            let (km, ks) = mean_std(&kls);
            csv.push_str(&format!(
                "{},{kl},{},{rm},{rs},{km},{ks}\n",
                algo.name(),
                args.seeds.len()
            ));
            points.push(FrontierPoint {
                label: algo.name().into(),
                kl_mean: km,
                kl_std: ks,
                reward_mean: rm,
                reward_std: rs,
            });
        }
    }
    atomic_write(&root.join("frontier.csv"), csv.as_bytes())?;
    plot_frontier(&points, &root, "frontier")?;
    for (k, (name, ylabel, _)) in CURVES.iter().enumerate() {
        plot_curves(&curves[k], &root, name, ylabel)?;
    }
    eprintln!("sweep done: {}/frontier.png", root.display());
    Ok(ExitCode::SUCCESS)
}

/// Copies a finished run's `config.toml` and `metrics.csv` into `to`, and the lines of the
/// last iteration logged in its `samples.jsonl` as `samples_last.jsonl` (the texts a results
/// page quotes; the whole log is too large to commit).
fn copy_small_files(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for f in ["config.toml", "metrics.csv"] {
        std::fs::copy(from.join(f), to.join(f)).map_err(|e| {
            anyhow::anyhow!(
                "cannot copy {} to {}: {e}",
                from.join(f).display(),
                to.display()
            )
        })?;
    }
    let samples = from.join("samples.jsonl");
    if samples.is_file() {
        let text = std::fs::read_to_string(&samples)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", samples.display()))?;
        atomic_write(
            &to.join("samples_last.jsonl"),
            last_iteration(&text).as_bytes(),
        )?;
    }
    Ok(())
}

/// The lines of a `samples.jsonl` text whose `iteration` is the largest one present.
fn last_iteration(text: &str) -> String {
    let iteration = |l: &str| {
        serde_json::from_str::<serde_json::Value>(l)
            .ok()
            .and_then(|v| v["iteration"].as_u64())
    };
    let last = text.lines().filter_map(iteration).max();
    text.lines()
        .filter(|l| last.is_some() && iteration(l) == last)
        .flat_map(|l| [l, "\n"])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_logged_iteration_is_kept() {
        let text = "{\"iteration\":4,\"response\":\"a\"}\n{\"iteration\":9,\"response\":\"b\"}\n\
                    {\"iteration\":9,\"response\":\"c\"}\nnot json\n";
        assert_eq!(
            last_iteration(text),
            "{\"iteration\":9,\"response\":\"b\"}\n{\"iteration\":9,\"response\":\"c\"}\n"
        );
        assert_eq!(last_iteration(""), "");
    }
}
