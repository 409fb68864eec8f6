//! `metrics.csv` (one row per iteration and agent) and `samples.jsonl`.
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, RunError, io};
use crate::files::atomic_write;

/// One row of `metrics.csv`: what one trained copy did in one iteration.
///
/// `agent` names the trained copy (`policy` for PPO; `llm1`/`llm2` for CORY, following the
/// weights across role exchanges) and `role` the part it played in that iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricRow {
    pub iteration: usize,
    pub agent: String,
    pub role: String,
    /// Batch mean of the agent's own task reward r(q, y) (not CORY's summed R).
    pub task_reward: f64,
    /// Batch mean of Σ_t KL_t in nats (TRL `objective/kl`).
    pub kl: f64,
    pub beta: f64,
    /// task_reward − β·kl (paper §4.1, with the current β).
    pub combined_reward: f64,
    pub policy_loss: f64,
    pub value_loss: f64,
    pub entropy: f64,
    pub approxkl: f64,
    pub clipfrac: f64,
    pub response_len: f64,
    /// Task reward and KL of this agent answering the plain query (pioneer format), so curves
    /// stay comparable across role exchanges. Equal to the above for the pioneer.
    pub pioneer_task_reward: f64,
    pub pioneer_kl: f64,
    /// Mean over the copy's responses of 1 − distinct words / words: 0 when no word repeats,
    /// near 1 for a collapsed policy that repeats one word (absent in files of earlier versions).
    #[serde(default)]
    pub repetition: f64,
    /// Bessel-corrected standard deviation of the batch's task rewards (TRL `reward_std`).
    #[serde(default)]
    pub reward_std: Option<f64>,
    /// Group learners: fraction of prompts whose sampled group got identical scores, so that
    /// they add no policy gradient (TRL `frac_reward_zero_std`); empty for PPO.
    #[serde(default)]
    pub frac_reward_zero_std: Option<f64>,
    pub seconds: f64,
}

/// Append-only `metrics.csv`, flushed after every row.
pub struct MetricsLog {
    path: PathBuf,
    writer: csv::Writer<File>,
}

impl MetricsLog {
    /// Creates a new log, or — when resuming — keeps the rows of iterations before
    /// `resume_from` (dropping any written after the last checkpoint) and appends after them.
    ///
    /// A last row cut short (a kill or a full disk in the middle of an append: no final line
    /// break) is dropped; any other malformed row is an error naming it.
    pub fn open(path: &Path, resume_from: Option<usize>) -> Result<Self> {
        let kept = match resume_from {
            Some(it) if path.exists() => {
                let bytes = complete_lines(path)?;
                rows_of(path, csv::Reader::from_reader(bytes.as_slice()))?
                    .into_iter()
                    .filter(|r| r.iteration < it)
                    .collect()
            }
            _ => Vec::new(),
        };
        let mut w = csv::Writer::from_writer(Vec::new());
        for r in &kept {
            w.serialize(r).map_err(|e| csv_err(path, e))?;
        }
        let mut bytes = w.into_inner().map_err(|e| RunError::Format {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        if kept.is_empty() {
            bytes = header_line();
        }
        atomic_write(path, &bytes)?;
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(io("open", path))?;
        let writer = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(file);
        Ok(Self {
            path: path.to_path_buf(),
            writer,
        })
    }

    pub fn append(&mut self, row: &MetricRow) -> Result<()> {
        self.writer
            .serialize(row)
            .map_err(|e| csv_err(&self.path, e))?;
        self.writer.flush().map_err(io("write", &self.path))
    }
}

fn header_line() -> Vec<u8> {
    const COLS: &[&str] = &[
        "iteration",
        "agent",
        "role",
        "task_reward",
        "kl",
        "beta",
        "combined_reward",
        "policy_loss",
        "value_loss",
        "entropy",
        "approxkl",
        "clipfrac",
        "response_len",
        "pioneer_task_reward",
        "pioneer_kl",
        "repetition",
        "reward_std",
        "frac_reward_zero_std",
        "seconds",
    ];
    format!("{}\n", COLS.join(",")).into_bytes()
}

/// Reads every row of a `metrics.csv`.
pub fn read_rows(path: &Path) -> Result<Vec<MetricRow>> {
    let bytes = std::fs::read(path).map_err(io("read", path))?;
    rows_of(path, csv::Reader::from_reader(bytes.as_slice()))
}

fn rows_of(path: &Path, mut r: csv::Reader<&[u8]>) -> Result<Vec<MetricRow>> {
    r.deserialize()
        .enumerate()
        .map(|(i, row)| {
            row.map_err(|e| RunError::Format {
                path: path.to_path_buf(),
                reason: format!("row {}: {e}", i + 2),
            })
        })
        .collect()
}

/// The rows of the last iteration in `rows` (one per agent): a run's final state in its
/// summary.
pub fn final_rows(rows: &[MetricRow]) -> Vec<MetricRow> {
    let last = rows.iter().map(|r| r.iteration).max();
    rows.iter()
        .filter(|r| Some(r.iteration) == last)
        .cloned()
        .collect()
}

/// The mean of a batch's rewards (0 for an empty batch), in f64 as the metrics columns.
pub fn mean(xs: &[f32]) -> f64 {
    xs.iter().map(|&x| f64::from(x)).sum::<f64>() / xs.len().max(1) as f64
}

/// The bytes of `path` up to its last line break: an append-only log without the line an
/// interrupted append left unfinished.
fn complete_lines(path: &Path) -> Result<Vec<u8>> {
    let mut bytes = std::fs::read(path).map_err(io("read", path))?;
    let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    bytes.truncate(end);
    Ok(bytes)
}

fn csv_err(path: &Path, e: csv::Error) -> RunError {
    RunError::Format {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// Append-only `samples.jsonl`: one JSON object per line.
pub struct SamplesLog {
    path: PathBuf,
    file: File,
}

impl SamplesLog {
    /// Opens the log; on resume drops lines whose `iteration` is ≥ `resume_from`. A last line
    /// cut short by an interrupted append (no final line break) is dropped; any other line
    /// that is not a JSON object with an `iteration` is an error naming it.
    pub fn open(path: &Path, resume_from: Option<usize>) -> Result<Self> {
        let mut kept = Vec::new();
        if let (Some(it), true) = (resume_from, path.exists()) {
            let bytes = complete_lines(path)?;
            for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
                if line.is_empty() {
                    continue;
                }
                let iteration = serde_json::from_slice::<serde_json::Value>(line)
                    .ok()
                    .and_then(|v| v.get("iteration")?.as_u64())
                    .ok_or_else(|| RunError::Format {
                        path: path.to_path_buf(),
                        reason: format!("line {} is not a sample log line", i + 1),
                    })?;
                if (iteration as usize) < it {
                    kept.extend_from_slice(line);
                    kept.push(b'\n');
                }
            }
        }
        atomic_write(path, &kept)?;
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(io("open", path))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
        })
    }

    pub fn append<T: Serialize>(&mut self, value: &T) -> Result<()> {
        let mut line = serde_json::to_vec(value).map_err(|e| RunError::Format {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .map_err(io("write", &self.path))?;
        self.file.flush().map_err(io("write", &self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(iteration: usize, agent: &str) -> MetricRow {
        MetricRow {
            iteration,
            agent: agent.into(),
            role: "pioneer".into(),
            task_reward: iteration as f64 * 0.5,
            kl: 0.1,
            beta: 0.3,
            combined_reward: iteration as f64 * 0.5 - 0.03,
            policy_loss: 0.0,
            value_loss: 0.0,
            entropy: 1.0,
            approxkl: 0.0,
            clipfrac: 0.0,
            response_len: 8.0,
            pioneer_task_reward: 0.0,
            pioneer_kl: 0.0,
            repetition: 0.0,
            reward_std: Some(0.5),
            frac_reward_zero_std: None,
            seconds: 1.0,
        }
    }

    #[test]
    fn resume_keeps_rows_before_the_checkpoint_and_appends() {
        let dir = std::env::temp_dir().join(format!("lmrl-runs-m-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("metrics.csv");
        let mut log = MetricsLog::open(&p, None).unwrap();
        for it in 0..4 {
            log.append(&row(it, "llm1")).unwrap();
        }
        drop(log);
        let mut log = MetricsLog::open(&p, Some(2)).unwrap();
        log.append(&row(2, "llm1")).unwrap();
        drop(log);
        let rows = read_rows(&p).unwrap();
        let its: Vec<_> = rows.iter().map(|r| r.iteration).collect();
        assert_eq!(its, vec![0, 1, 2]);
        assert_eq!(rows[1], row(1, "llm1"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn header_matches_serialised_fields() {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.serialize(row(0, "a")).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        let first = text.lines().next().unwrap();
        assert_eq!(format!("{first}\n").into_bytes(), header_line());
    }

    /// A kill in the middle of an append leaves a last line without its line break; resuming
    /// drops it (its iteration is after the checkpoint) instead of failing.
    #[test]
    fn resume_drops_a_torn_last_line_and_refuses_a_damaged_one_before_it() {
        let dir = std::env::temp_dir().join(format!("lmrl-runs-torn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("metrics.csv");
        let mut log = MetricsLog::open(&p, None).unwrap();
        for it in 0..3 {
            log.append(&row(it, "policy")).unwrap();
        }
        drop(log);
        let mut text = std::fs::read_to_string(&p).unwrap();
        text.push_str("3,policy,pol");
        std::fs::write(&p, &text).unwrap();
        drop(MetricsLog::open(&p, Some(2)).unwrap());
        let its: Vec<_> = read_rows(&p).unwrap().iter().map(|r| r.iteration).collect();
        assert_eq!(its, [0, 1]);

        let s = dir.join("samples.jsonl");
        std::fs::write(
            &s,
            "{\"iteration\":0}\n{\"iteration\":1}\n{\"iteration\":2}\n{\"itera",
        )
        .unwrap();
        drop(SamplesLog::open(&s, Some(2)).unwrap());
        assert_eq!(
            std::fs::read_to_string(&s).unwrap(),
            "{\"iteration\":0}\n{\"iteration\":1}\n"
        );
        std::fs::write(&s, "{\"iteration\":0}\nnot json\n{\"iteration\":1}\n").unwrap();
        let e = SamplesLog::open(&s, Some(2)).err().unwrap().to_string();
        assert!(e.contains("samples.jsonl") && e.contains("line 2"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
