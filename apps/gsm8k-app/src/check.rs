//! `check`: the answer checker on a JSONL file (a stable contract used by outside checks).
//!
//! Input: one JSON object per line with `response` (a model's answer text) and `answer` (a
//! GSM8K solution ending in `#### N`, or a bare number); blank lines are allowed. Output: line
//! for line, so output line i answers input line i: an object with `extracted` (the response's
//! final number before any invented `Question:`, canonical form, or `null`) and `correct`
//! (exact numeric equality with the ground truth), or a blank line for a blank one. The first
//! invalid line stops the command with an error naming its number; nothing is written then.
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use anyhow::{Context, Result, anyhow};
use lmrl_rewards::{check_answer, extract_response_answer};
use serde::Serialize;

use crate::cli::CheckArgs;

/// One output line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Checked {
    pub extracted: Option<String>,
    pub correct: bool,
}

/// Checks one input line (1-based `line` for messages).
pub fn check_line(text: &str, line: usize, path: &Path) -> Result<Checked> {
    let at = || format!("{} line {line}", path.display());
    let v: serde_json::Value =
        serde_json::from_str(text).with_context(|| format!("{}: invalid JSON", at()))?;
    let field = |name: &str| -> Result<&str> {
        match v.get(name) {
            Some(serde_json::Value::String(s)) => Ok(s.as_str()),
            Some(other) => Err(anyhow!(
                "{}: `{name}` must be a string, got {}",
                at(),
                json_kind(other)
            )),
            None => Err(anyhow!("{}: missing field `{name}`", at())),
        }
    };
    let response = field("response")?;
    let answer = field("answer")?;
    let correct = check_answer(response, answer).map_err(|e| anyhow!("{}: {e}", at()))? > 0.5;
    Ok(Checked {
        extracted: extract_response_answer(response),
        correct,
    })
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Checks every line of `input`: one entry per line, `None` for a blank one.
pub fn check_file(input: &Path) -> Result<Vec<Option<Checked>>> {
    let file =
        std::fs::File::open(input).with_context(|| format!("cannot open {}", input.display()))?;
    let mut out = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line =
            line.with_context(|| format!("{} line {}: unreadable", input.display(), i + 1))?;
        out.push(match line.trim().is_empty() {
            true => None,
            false => Some(check_line(&line, i + 1, input)?),
        });
    }
    Ok(out)
}

pub fn run(args: &CheckArgs) -> Result<()> {
    let checked = check_file(&args.input)?;
    let mut bytes = Vec::new();
    for c in &checked {
        if let Some(c) = c {
            serde_json::to_writer(&mut bytes, c)?;
        }
        bytes.push(b'\n');
    }
    lmrl_runs::atomic_write(&args.out, &bytes)?;
    let correct = checked.iter().flatten().filter(|c| c.correct).count();
    let mut err = std::io::stderr();
    writeln!(
        err,
        "{correct}/{} correct; wrote {}",
        checked.iter().flatten().count(),
        args.out.display()
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(response: &str, answer: &str) -> Checked {
        let line = serde_json::json!({"response": response, "answer": answer}).to_string();
        check_line(&line, 1, Path::new("x.jsonl")).unwrap()
    }

    #[test]
    fn final_number_before_an_invented_question_counts() {
        let c = check("5 + 4 = 9.\nQuestion: what is 2 + 2?\nAnswer: 4", "#### 9");
        assert_eq!(c.extracted.as_deref(), Some("9"));
        assert!(c.correct);
    }

    #[test]
    fn errors_name_the_line_and_field() {
        let e = check_line("{\"response\": \"1\"}", 7, Path::new("in.jsonl")).unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("in.jsonl line 7") && msg.contains("answer"),
            "{msg}"
        );
        let e = check_line("not json", 3, Path::new("in.jsonl")).unwrap_err();
        assert!(format!("{e:#}").contains("line 3"));
    }
}
