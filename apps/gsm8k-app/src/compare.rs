//! Paired comparison of two models on the same questions, from the per-question files that
//! `eval --out` and a run's `eval-questions/` hold.
//!
//! For each seed (a pair of files), the difference in pass@1 (B − A), McNemar's exact test on
//! the discordant questions (k = 1), and a paired bootstrap interval over questions; across
//! seeds, the mean difference with a Student t interval over seeds and a bootstrap interval over
//! questions of the seed-averaged difference. With `--clusters`, the bootstrap resamples whole
//! clusters (GSM-Symbolic templates): instances of one template are not independent questions.
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::setup::question_id;

/// Bootstrap resamples for every interval.
const RESAMPLES: usize = 10_000;

/// The `compare` command's arguments.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Per-question results of the reference (e.g. the base model): one file, shared by every
    /// seed, or one per seed in the order of `--b`.
    #[arg(long, num_args = 1.., required = true)]
    pub a: Vec<PathBuf>,
    /// Per-question results of the compared model, one file per seed.
    #[arg(long, num_args = 1.., required = true)]
    pub b: Vec<PathBuf>,
    /// JSONL with `question` and `template` (a GSM-Symbolic file): the bootstrap resamples
    /// templates instead of questions.
    #[arg(long)]
    pub clusters: Option<PathBuf>,
    /// Seed of the bootstrap.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Also write the result as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One line of a per-question file (see `eval::QuestionResult`): the question's id, its text,
/// or both (committed result files keep only the id).
#[derive(Debug, Deserialize)]
struct Line {
    id: Option<String>,
    question: Option<String>,
    responses: Vec<String>,
    correct: usize,
}

/// A file's per-question solve rates (correct / k) by question id, in file order.
struct Scores {
    ids: Vec<String>,
    rate: HashMap<String, f64>,
    k: usize,
}

fn read_scores(path: &Path) -> Result<Scores> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let (mut ids, mut rate, mut k) = (Vec::new(), HashMap::new(), None);
    for (i, l) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let line: Line = serde_json::from_str(l).with_context(|| {
            format!(
                "{} line {}: expected a per-question result (`question`, `responses`, \
                 `correct`) as `eval --out` writes",
                path.display(),
                i + 1
            )
        })?;
        let n = line.responses.len();
        if n == 0 || line.correct > n || k.is_some_and(|k| k != n) {
            bail!(
                "{} line {}: `correct` = {} of {n} responses (every line needs the same k ≥ 1)",
                path.display(),
                i + 1,
                line.correct
            );
        }
        k = Some(n);
        let id = match (line.id, &line.question) {
            (Some(id), _) => id,
            (None, Some(q)) => question_id(q),
            (None, None) => bail!(
                "{} line {}: neither `id` nor `question` names the question",
                path.display(),
                i + 1
            ),
        };
        if rate
            .insert(id.clone(), line.correct as f64 / n as f64)
            .is_some()
        {
            bail!(
                "{} line {}: the question occurs twice",
                path.display(),
                i + 1
            );
        }
        ids.push(id);
    }
    let Some(k) = k else {
        bail!("{} holds no per-question results", path.display())
    };
    Ok(Scores { ids, rate, k })
}

/// Which cluster (template) each question id belongs to.
fn read_clusters(path: &Path) -> Result<HashMap<String, String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut out = HashMap::new();
    for (i, l) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value = serde_json::from_str(l)
            .with_context(|| format!("{} line {}: not JSON", path.display(), i + 1))?;
        let (Some(q), Some(t)) = (v["question"].as_str(), v.get("template")) else {
            bail!(
                "{} line {}: expected `question` (string) and `template`",
                path.display(),
                i + 1
            );
        };
        out.insert(question_id(q), t.to_string());
    }
    Ok(out)
}

/// Two-sided exact McNemar test: P(as or more unbalanced discordant counts) under
/// Binomial(b + c, ½), doubled and capped at 1.
pub fn mcnemar_exact(b: usize, c: usize) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let m = b.min(c);
    // P(X = i) = C(n, i) / 2^n, summed in log space so large n neither overflows nor underflows.
    let mut log_c = 0.0f64; // ln C(n, 0)
    let mut tail = 0.0;
    for i in 0..=m {
        if i > 0 {
            log_c += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        tail += (log_c - n as f64 * std::f64::consts::LN_2).exp();
    }
    (2.0 * tail).min(1.0)
}

/// SplitMix64: a small seeded generator for the bootstrap (the same draws on every platform).
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

/// Percentile 95 % interval of the mean per-question difference, resampling clusters of
/// questions with replacement (each question its own cluster when none are given).
pub fn bootstrap_ci(diffs: &[f64], clusters: &[usize], seed: u64) -> (f64, f64) {
    let mut groups: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for (d, c) in diffs.iter().zip(clusters) {
        groups.entry(*c).or_default().push(*d);
    }
    let sums: Vec<(f64, usize)> = groups
        .values()
        .map(|g| (g.iter().sum::<f64>(), g.len()))
        .collect();
    let mut rng = SplitMix(seed);
    let mut means: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            let (mut s, mut n) = (0.0, 0);
            for _ in 0..sums.len() {
                let (gs, gn) = sums[rng.below(sums.len())];
                s += gs;
                n += gn;
            }
            s / n as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((q * RESAMPLES as f64) as usize).min(RESAMPLES - 1)];
    (at(0.025), at(0.975))
}

/// One seed's paired result.
#[derive(Debug, Serialize)]
pub struct SeedResult {
    pub a: String,
    pub b: String,
    pub pass_at_1_a: f64,
    pub pass_at_1_b: f64,
    pub difference: f64,
    pub ci95: (f64, f64),
    /// Questions only A solved / only B solved (k = 1).
    pub discordant: Option<(usize, usize)>,
    pub mcnemar_p: Option<f64>,
}

/// The whole comparison.
#[derive(Debug, Serialize)]
pub struct Comparison {
    pub questions: usize,
    pub clusters: usize,
    pub k: usize,
    pub seeds: Vec<SeedResult>,
    pub mean_difference: f64,
    /// Student t over the seeds' differences (None for one seed).
    pub seeds_t_ci95: Option<(f64, f64)>,
    /// Bootstrap over questions (or clusters) of the seed-averaged difference.
    pub questions_ci95: (f64, f64),
}

/// Compares `b` (one file per seed) against `a` (one file, or one per seed).
pub fn compare(
    a: &[PathBuf],
    b: &[PathBuf],
    clusters: Option<&Path>,
    seed: u64,
) -> Result<Comparison> {
    if a.len() != 1 && a.len() != b.len() {
        bail!(
            "--a takes one file or one per --b file: got {} and {}",
            a.len(),
            b.len()
        );
    }
    let a_scores: Vec<Scores> = a.iter().map(|p| read_scores(p)).collect::<Result<_>>()?;
    let b_scores: Vec<Scores> = b.iter().map(|p| read_scores(p)).collect::<Result<_>>()?;
    let ids = &b_scores[0].ids;
    for (s, p) in a_scores.iter().zip(a).chain(b_scores.iter().zip(b)) {
        if s.ids.len() != ids.len() || ids.iter().any(|q| !s.rate.contains_key(q)) {
            bail!(
                "{} does not hold the same {} questions as {}: a paired comparison needs the \
                 same questions in every file",
                p.display(),
                ids.len(),
                b[0].display()
            );
        }
    }
    let cluster_of = clusters.map(read_clusters).transpose()?;
    let cluster_ids = cluster_index(ids, cluster_of.as_ref(), clusters)?;
    let n_clusters = cluster_ids
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let mut seeds = Vec::new();
    let mut mean_diff = vec![0.0; ids.len()];
    for (i, (bs, bp)) in b_scores.iter().zip(b).enumerate() {
        let (as_, ap) = match a_scores.len() {
            1 => (&a_scores[0], &a[0]),
            _ => (&a_scores[i], &a[i]),
        };
        let diffs: Vec<f64> = ids.iter().map(|q| bs.rate[q] - as_.rate[q]).collect();
        for (m, d) in mean_diff.iter_mut().zip(&diffs) {
            *m += d / b_scores.len() as f64;
        }
        let paired_k1 = as_.k == 1 && bs.k == 1;
        let discordant = paired_k1.then(|| {
            let only_a = diffs.iter().filter(|d| **d < 0.0).count();
            (only_a, diffs.iter().filter(|d| **d > 0.0).count())
        });
        let mean = |s: &Scores| ids.iter().map(|q| s.rate[q]).sum::<f64>() / ids.len() as f64;
        seeds.push(SeedResult {
            a: ap.display().to_string(),
            b: bp.display().to_string(),
            pass_at_1_a: mean(as_),
            pass_at_1_b: mean(bs),
            difference: diffs.iter().sum::<f64>() / ids.len() as f64,
            ci95: bootstrap_ci(&diffs, &cluster_ids, seed.wrapping_add(i as u64)),
            discordant,
            mcnemar_p: discordant.map(|(x, y)| mcnemar_exact(x, y)),
        });
    }
    let d: Vec<f64> = seeds.iter().map(|s| s.difference).collect();
    let (mean, sd) = lmrl_runs::mean_std(&d);
    let seeds_t_ci95 = (d.len() > 1).then(|| {
        let half = lmrl_runs::t975(d.len() - 1) * sd / (d.len() as f64).sqrt();
        (mean - half, mean + half)
    });
    Ok(Comparison {
        questions: ids.len(),
        clusters: n_clusters,
        k: b_scores[0].k,
        seeds,
        mean_difference: mean,
        seeds_t_ci95,
        questions_ci95: bootstrap_ci(&mean_diff, &cluster_ids, seed),
    })
}

/// Each question's cluster number: its template's when clusters are given, else its own.
fn cluster_index(
    ids: &[String],
    cluster_of: Option<&HashMap<String, String>>,
    path: Option<&Path>,
) -> Result<Vec<usize>> {
    let Some(map) = cluster_of else {
        return Ok((0..ids.len()).collect());
    };
    let mut numbers: HashMap<&str, usize> = HashMap::new();
    ids.iter()
        .map(|q| {
            let t = map.get(q).with_context(|| {
                format!(
                    "{} has no template for the question with id {q}",
                    path.map_or(String::new(), |p| p.display().to_string())
                )
            })?;
            let next = numbers.len();
            Ok(*numbers.entry(t.as_str()).or_insert(next))
        })
        .collect()
}

/// The comparison as a markdown table.
pub fn markdown(c: &Comparison) -> String {
    let mut s = format!(
        "{} questions ({} resampling units), k = {}\n\n\
         | A | B | pass@1 A | pass@1 B | B − A | 95 % CI (bootstrap) | only A / only B | McNemar p |\n\
         |---|---|---:|---:|---:|---|---:|---:|\n",
        c.questions, c.clusters, c.k
    );
    for r in &c.seeds {
        s += &format!(
            "| {} | {} | {:.3} | {:.3} | {:+.3} | [{:+.3}, {:+.3}] | {} | {} |\n",
            r.a,
            r.b,
            r.pass_at_1_a,
            r.pass_at_1_b,
            r.difference,
            r.ci95.0,
            r.ci95.1,
            r.discordant
                .map_or("–".into(), |(x, y)| format!("{x} / {y}")),
            r.mcnemar_p.map_or("–".into(), |p| format!("{p:.4}")),
        );
    }
    s += &format!(
        "\nmean B − A over {} seed(s): {:+.4}; 95 % CI over seeds (t): {}; over questions \
         (bootstrap of the seed mean): [{:+.4}, {:+.4}]\n",
        c.seeds.len(),
        c.mean_difference,
        c.seeds_t_ci95
            .map_or("– (one seed)".into(), |(l, h)| format!(
                "[{l:+.4}, {h:+.4}]"
            )),
        c.questions_ci95.0,
        c.questions_ci95.1
    );
    s
}

/// The `compare` command.
pub fn run(args: &CompareArgs) -> Result<()> {
    let c = compare(&args.a, &args.b, args.clusters.as_deref(), args.seed)?;
    if let Some(p) = &args.json {
        lmrl_runs::atomic_write(p, serde_json::to_string_pretty(&c)?.as_bytes())?;
    }
    print!("{}", markdown(&c));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-computed: b = 2, c = 8 → 2·(1 + 10 + 45)/1024 = 0.109375.
    #[test]
    fn mcnemar_matches_the_binomial_tail() {
        assert!((mcnemar_exact(2, 8) - 112.0 / 1024.0).abs() < 1e-12);
        assert!((mcnemar_exact(8, 2) - 112.0 / 1024.0).abs() < 1e-12);
        assert_eq!(mcnemar_exact(5, 5), 1.0);
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        // 0 vs 10: 2 / 1024.
        assert!((mcnemar_exact(0, 10) - 2.0 / 1024.0).abs() < 1e-12);
        // Large counts stay finite: 400 vs 600 is far in the tail.
        let p = mcnemar_exact(400, 600);
        assert!(p > 0.0 && p < 1e-9, "{p}");
    }

    /// A constant difference has a degenerate interval; clusters of identical members make the
    /// cluster bootstrap equal to the question bootstrap over one member per cluster.
    #[test]
    fn bootstrap_brackets_the_mean() {
        let d = vec![0.5; 40];
        assert_eq!(
            bootstrap_ci(&d, &(0..40).collect::<Vec<_>>(), 1),
            (0.5, 0.5)
        );
        let d: Vec<f64> = (0..200)
            .map(|i| if i % 4 == 0 { 1.0 } else { 0.0 })
            .collect();
        let (lo, hi) = bootstrap_ci(&d, &(0..200).collect::<Vec<_>>(), 7);
        // Mean 0.25, standard error sqrt(0.25·0.75/200) ≈ 0.0306: ±1.96 se ≈ [0.19, 0.31].
        assert!(
            (lo - 0.19).abs() < 0.015 && (hi - 0.31).abs() < 0.015,
            "{lo} {hi}"
        );
        // Ten clusters of 20 equal members: only 10 independent units, a wider interval.
        let dc: Vec<f64> = (0..200)
            .map(|i| if (i / 20) % 4 == 0 { 1.0 } else { 0.0 })
            .collect();
        let (clo, chi) = bootstrap_ci(&dc, &(0..200).map(|i| i / 20).collect::<Vec<_>>(), 7);
        assert!(chi - clo > 2.0 * (hi - lo), "{clo} {chi}");
    }

    /// A committed file (ids only) pairs with a file that names questions by their text.
    #[test]
    fn ids_and_question_texts_pair() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
        let qs = ["One plus one?", "Two  plus TWO?"];
        let lines = |key: &str, correct: usize, text: &dyn Fn(&str) -> String| -> String {
            qs.iter()
                .map(|q| {
                    let mut v = serde_json::json!({"responses": ["x"], "correct": correct});
                    v[key] = text(q).into();
                    v.to_string() + "\n"
                })
                .collect()
        };
        std::fs::write(&a, lines("id", 0, &|q| question_id(q))).unwrap();
        std::fs::write(&b, lines("question", 1, &|q| q.to_lowercase())).unwrap();
        let c = compare(&[a], &[b], None, 0).unwrap();
        assert_eq!(c.questions, 2);
        assert_eq!(c.seeds[0].discordant, Some((0, 2)));
    }
}
