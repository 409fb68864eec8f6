//! Property-based fuzzing of the CSV and JSONL readers.
//!
//! - Arbitrary bytes never panic: every reader returns rows or a typed error, and every line it
//!   names lies in the file.
//! - Well-formed files written here from generated rows (fields with quotes, commas, line
//!   breaks, non-ASCII) read back exactly.
//! - One stray `"` inserted into an unquoted field of a one-line row costs at most that row.
//!
//! Each property runs proptest's default 256 cases; `PROPTEST_CASES=100000 cargo test --release
//! -p lmrl-data --test fuzz` raises the budget.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use lmrl_data::{
    DataError, ReadOptions, ReadReport, Review, Sentiment, read_asdiv_jsonl,
    read_gsm_symbolic_jsonl, read_gsm8k_jsonl, read_pang_lee_csv, read_reviews, read_reviews_jsonl,
    read_text_label_csv,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestRunner};

/// Proptest's defaults (256 cases unless `PROPTEST_CASES` says otherwise), with failing cases
/// saved next to this file (`fuzz.proptest-regressions`) and replayed first on the next run.
fn config() -> Config {
    Config {
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        source_file: Some(file!()),
        ..Config::default()
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

// ---------------------------------------------------------------------------------------------
// Arbitrary bytes.

/// Bytes biased towards what the parsers react to (quotes, separators, line ends, JSON syntax,
/// a BOM, invalid UTF-8), mixed with any byte at all.
fn hostile_bytes() -> impl Strategy<Value = Vec<u8>> {
    let pieces: Vec<&'static [u8]> = vec![
        b"\"",
        b"\"\"",
        b",",
        b"\n",
        b"\r\n",
        b"\r",
        b"0",
        b"1",
        b"-1",
        b"pos",
        b"a b",
        b"text,label\n",
        b"label,text\n",
        b"\xEF\xBB\xBF",
        b"\xFF",
        b"\xC3",
        b"{",
        b"}",
        b"[1]",
        b":",
        b"null",
        b"\"text\"",
        b"\"label\"",
        b"\"question\"",
        b"\"answer\"",
        b"\"passage\"",
        b"\"#### 7\"",
        b"\"9 apples\"",
    ];
    vec(
        prop_oneof![
            3 => select(pieces).prop_map(|p| p.to_vec()),
            1 => any::<u8>().prop_map(|b| vec![b]),
        ],
        0..120,
    )
    .prop_map(|v| v.concat())
}

/// What every reader must guarantee on any input: a typed error or rows, lines that exist, and
/// skipped rows in file order, each starting on its own line.
fn check_outcome<T>(
    result: Result<ReadReport<T>, DataError>,
    path: &Path,
    lines: u64,
) -> Result<(), TestCaseError> {
    match result {
        Err(e) => {
            prop_assert!(!e.to_string().is_empty());
            if let Some(l) = e.line() {
                prop_assert!((1..=lines).contains(&l), "line {l} of {lines}: {e}");
                prop_assert_eq!(e.path(), Some(path));
            }
        }
        Ok(r) => {
            prop_assert!(!r.items.is_empty());
            let skipped = r.skipped_lines();
            prop_assert_eq!(skipped.len(), r.skipped.len());
            prop_assert!(skipped.windows(2).all(|w| w[0] < w[1]), "{:?}", skipped);
            prop_assert!(skipped.iter().all(|l| (1..=lines).contains(l)));
            prop_assert!(r.items.len() + skipped.len() <= lines as usize);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in hostile_bytes()) {
        let d = tempfile::tempdir().unwrap();
        let lines = bytes.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
        let csv = write(d.path(), "x.csv", &bytes);
        let jsonl = write(d.path(), "x.jsonl", &bytes);
        for opts in [ReadOptions::strict(), ReadOptions::skip_bad_rows()] {
            check_outcome(read_text_label_csv(&csv, opts), &csv, lines)?;
            check_outcome(read_pang_lee_csv(&csv, opts), &csv, lines)?;
            check_outcome(read_reviews(&csv, None, opts), &csv, lines)?;
            check_outcome(read_reviews_jsonl(&jsonl, opts), &jsonl, lines)?;
            check_outcome(read_reviews(&jsonl, None, opts), &jsonl, lines)?;
            check_outcome(read_gsm8k_jsonl(&jsonl, opts), &jsonl, lines)?;
            check_outcome(read_gsm_symbolic_jsonl(&jsonl, opts), &jsonl, lines)?;
            check_outcome(read_asdiv_jsonl(&jsonl, opts), &jsonl, lines)?;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Well-formed CSV, written here.

/// Field text: mostly plain (letters, digits, non-ASCII), with quotes, commas and both line
/// ends mixed in, alone and in the combinations that trip up quote handling.
fn field_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        6 => select(vec!["a", "b", "Z", " ", "é", "🎬", "0", "1"]),
        3 => select(vec![",", "\"", "\"\"", ",\""]),
        1 => select(vec!["\n", "\r\n", "\"\n"]),
    ];
    vec(piece, 0..10).prop_map(|v| v.concat())
}

/// A label as the `text,label` reader accepts it, and what it means.
fn hf_label() -> impl Strategy<Value = (&'static str, Option<Sentiment>)> {
    select(vec![
        ("0", Some(Sentiment::Negative)),
        ("1", Some(Sentiment::Positive)),
        ("neg", Some(Sentiment::Negative)),
        ("positive", Some(Sentiment::Positive)),
        ("-1", None),
    ])
}

/// One generated CSV file: a header (or none), rows of cells, and how it is written.
#[derive(Debug, Clone)]
struct Table {
    header: Option<Vec<String>>,
    /// Per row: the cells in file order and, per cell, whether to quote it even when it needs
    /// no quotes.
    rows: Vec<Vec<(String, bool)>>,
    crlf: bool,
    final_newline: bool,
    bom: bool,
}

/// A cell as a CSV writer puts it: quoted (quotes doubled) when it holds `,`, `"` or a line
/// break, or when asked to.
fn written_cell(s: &str, force_quote: bool) -> (String, bool) {
    if force_quote || s.contains([',', '"', '\n', '\r']) {
        (format!("\"{}\"", s.replace('"', "\"\"")), true)
    } else {
        (s.to_string(), false)
    }
}

/// Where each row went in the written file.
struct RowSpan {
    line: u64,
    /// Byte offset where each cell's written text starts, and whether it was quoted.
    cells: Vec<(usize, bool)>,
    one_line: bool,
}

impl Table {
    fn write(&self) -> (Vec<u8>, Vec<RowSpan>) {
        let end = if self.crlf { "\r\n" } else { "\n" };
        let mut out = String::new();
        if self.bom {
            out.push('\u{feff}');
        }
        let mut line = 1;
        if let Some(h) = &self.header {
            out.push_str(&h.join(","));
            out.push_str(end);
            line += 1;
        }
        let mut spans = Vec::new();
        for (r, row) in self.rows.iter().enumerate() {
            let mut cells = Vec::new();
            let mut newlines = 0;
            for (c, (text, force)) in row.iter().enumerate() {
                if c > 0 {
                    out.push(',');
                }
                let (w, quoted) = written_cell(text, *force);
                cells.push((out.len(), quoted));
                newlines += w.matches('\n').count() as u64;
                out.push_str(&w);
            }
            if r + 1 < self.rows.len() || self.final_newline {
                out.push_str(end);
            }
            spans.push(RowSpan {
                line,
                cells,
                one_line: newlines == 0,
            });
            line += newlines + 1;
        }
        (out.into_bytes(), spans)
    }
}

/// A `text,label` table with 0-2 extra columns, columns in any order. Returns the table, the
/// column index of `text` and of `label`, and the expected reviews.
fn text_label_table() -> impl Strategy<Value = (Table, usize, usize, Vec<Review>)> {
    (0usize..=2)
        .prop_flat_map(|extra| {
            let width = 2 + extra;
            let order = Just((0..width).collect::<Vec<usize>>()).prop_shuffle();
            let row = (
                field_text(),
                hf_label(),
                vec(field_text(), extra),
                vec(any::<bool>(), width),
            );
            (
                order,
                vec(row, 1..20),
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
            )
        })
        .prop_map(|(order, rows, crlf, final_newline, bom)| {
            // order[c] = which logical column sits at file column c (0 text, 1 label, 2+ extra).
            let names = |k: usize| match k {
                0 => "text".to_string(),
                1 => "label".to_string(),
                k => format!("extra{k}"),
            };
            let text_col = order.iter().position(|&k| k == 0).unwrap();
            let label_col = order.iter().position(|&k| k == 1).unwrap();
            let mut table_rows = Vec::new();
            let mut reviews = Vec::new();
            for (text, (label, meaning), extras, force) in rows {
                let cells = order
                    .iter()
                    .enumerate()
                    .map(|(c, &k)| {
                        let v = match k {
                            0 => text.clone(),
                            1 => label.to_string(),
                            k => extras[k - 2].clone(),
                        };
                        (v, force[c])
                    })
                    .collect();
                table_rows.push(cells);
                reviews.push(Review {
                    text,
                    label: meaning,
                });
            }
            let table = Table {
                header: Some(order.iter().map(|&k| names(k)).collect()),
                rows: table_rows,
                crlf,
                final_newline,
                bom,
            };
            (table, text_col, label_col, reviews)
        })
}

/// A Pang & Lee table: no header, `label,text`, label `1`/`-1`.
fn pang_lee_table() -> impl Strategy<Value = (Table, Vec<Review>)> {
    let row = (
        select(vec![
            ("1", Sentiment::Positive),
            ("-1", Sentiment::Negative),
        ]),
        field_text(),
        any::<bool>(),
        any::<bool>(),
    );
    (vec(row, 1..20), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
        |(rows, crlf, final_newline, bom)| {
            let mut table_rows = Vec::new();
            let mut reviews = Vec::new();
            for ((label, s), text, q0, q1) in rows {
                table_rows.push(vec![(label.to_string(), q0), (text.clone(), q1)]);
                reviews.push(Review {
                    text,
                    label: Some(s),
                });
            }
            let table = Table {
                header: None,
                rows: table_rows,
                crlf,
                final_newline,
                bom,
            };
            (table, reviews)
        },
    )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn well_formed_text_label_csv_round_trips((table, _, _, want) in text_label_table()) {
        let d = tempfile::tempdir().unwrap();
        let (bytes, _) = table.write();
        let p = write(d.path(), "t.csv", &bytes);
        let r = read_text_label_csv(&p, ReadOptions::strict());
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        let r = r.unwrap();
        prop_assert_eq!(r.items, want);
        prop_assert_eq!(r.skipped.len(), 0);
    }

    #[test]
    fn well_formed_pang_lee_csv_round_trips((table, want) in pang_lee_table()) {
        let d = tempfile::tempdir().unwrap();
        let (bytes, _) = table.write();
        let p = write(d.path(), "p.csv", &bytes);
        let r = read_pang_lee_csv(&p, ReadOptions::strict());
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        prop_assert_eq!(r.unwrap().items, want);
    }
}

// ---------------------------------------------------------------------------------------------
// One stray quote.

/// Whether the parser is bound to notice a `"` opening a field at `at`: the quoted field it
/// opens must close at the next `"` that is not doubled, and unless that quote is followed by
/// `,`, a line end or the end of the file, the record is malformed. (When it is, the run-on
/// reads like a real multi-line field and only the reader's checks on the row can catch it.)
fn run_on_is_malformed(bytes: &[u8], at: usize) -> bool {
    let mut i = at + 1;
    while i < bytes.len() {
        if bytes[i] == b'"' {
            if bytes.get(i + 1) == Some(&b'"') {
                i += 2;
                continue;
            }
            let rest = &bytes[i + 1..];
            return !(rest.is_empty()
                || rest[0] == b','
                || rest[0] == b'\n'
                || rest.starts_with(b"\r\n"));
        }
        i += 1;
    }
    true
}

/// How often each kind of stray quote came up, to show the properties were exercised.
#[derive(Default)]
struct Tally {
    opening_caught: Cell<usize>,
    opening_ambiguous: Cell<usize>,
    /// Of those, how many still lost only the stray row (the reader rejected the run-on row).
    ambiguous_but_exact: Cell<usize>,
    literal: Cell<usize>,
    no_candidate: Cell<usize>,
}

impl Tally {
    fn bump(c: &Cell<usize>) {
        c.set(c.get() + 1);
    }
    fn report(&self, name: &str) {
        eprintln!(
            "{name}: stray quote opening a field: {} caught by the parser, {} closing like a real field ({} of them still costing only their row); inside a field: {}; no unquoted one-line field: {}",
            self.opening_caught.get(),
            self.opening_ambiguous.get(),
            self.ambiguous_but_exact.get(),
            self.literal.get(),
            self.no_candidate.get()
        );
    }
}

type ReviewReader = dyn Fn(&Path, ReadOptions) -> Result<ReadReport<Review>, DataError>;

/// Insert a `"` into an unquoted cell of a one-line row, read the file, and check that at most
/// that row is affected. `read` reads a file, `label_col` is the column the reader checks as a
/// label (a quote inside it makes the row bad), `text_col` the column it returns as text.
fn check_stray(
    table: &Table,
    want: &[Review],
    text_col: usize,
    label_col: usize,
    pick: (Index, Index, Index),
    read: &ReviewReader,
    tally: &Tally,
) -> Result<(), TestCaseError> {
    let (bytes, spans) = table.write();
    let candidates: Vec<(usize, usize)> = spans
        .iter()
        .enumerate()
        .filter(|(_, s)| s.one_line)
        .flat_map(|(r, s)| {
            s.cells
                .iter()
                .enumerate()
                .filter(|(_, (_, quoted))| !quoted)
                .map(move |(c, _)| (r, c))
        })
        .collect();
    if candidates.is_empty() {
        Tally::bump(&tally.no_candidate);
        return Ok(());
    }
    let (row, col) = candidates[pick.0.index(candidates.len())];
    let cell = &table.rows[row][col].0;
    let boundaries: Vec<usize> = cell
        .char_indices()
        .map(|(i, _)| i)
        .chain([cell.len()])
        .collect();
    let offset = boundaries[pick.1.index(boundaries.len())];
    let at = spans[row].cells[col].0 + offset;
    let mut broken = bytes.clone();
    broken.insert(at, b'"');
    let line = spans[row].line;

    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "s.csv", &broken);
    let lines = broken.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
    check_outcome(read(&p, ReadOptions::skip_bad_rows()), &p, lines)?;
    check_outcome(read(&p, ReadOptions::strict()), &p, lines)?;
    let skip = read(&p, ReadOptions::skip_bad_rows());
    let strict = read(&p, ReadOptions::strict());

    let mut others: Vec<Review> = want.to_vec();
    others.remove(row);
    if offset > 0 {
        // Inside an unquoted field a quote is literal.
        Tally::bump(&tally.literal);
        if col == label_col {
            if others.is_empty() {
                prop_assert_eq!(skip.err().and_then(|e| e.line()), Some(line));
            } else {
                let r = skip.map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(&r.items, &others);
                prop_assert_eq!(r.skipped_lines(), vec![line]);
            }
            prop_assert_eq!(strict.err().and_then(|e| e.line()), Some(line));
        } else {
            let mut changed = want.to_vec();
            if col == text_col {
                changed[row].text.insert(offset, '"');
            }
            let r = skip.map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&r.items, &changed);
            prop_assert!(r.skipped.is_empty());
            let s = strict.map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(s.items, changed);
        }
    } else if run_on_is_malformed(&broken, at) {
        Tally::bump(&tally.opening_caught);
        if others.is_empty() {
            prop_assert!(skip.is_err());
        } else {
            let r = skip.map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&r.items, &others);
            prop_assert_eq!(r.skipped_lines(), vec![line]);
        }
        let e = strict.err();
        prop_assert!(
            matches!(&e, Some(DataError::Csv { line: l, path, .. }) if *l == line && path == &p),
            "{:?}",
            e
        );
    } else {
        // The run-on closes like a real field: the rows before the stray one are still intact,
        // and nothing panics.
        Tally::bump(&tally.opening_ambiguous);
        if let Ok(r) = skip {
            let n = row.min(r.items.len());
            prop_assert_eq!(&r.items[..n], &want[..n]);
            if r.items == others && r.skipped_lines() == vec![line] {
                Tally::bump(&tally.ambiguous_but_exact);
            }
        }
    }
    Ok(())
}

fn runner() -> TestRunner {
    TestRunner::new(config())
}

#[test]
fn stray_quote_in_text_label_csv_costs_at_most_its_row() {
    let tally = Tally::default();
    let strategy = (text_label_table(), any::<(Index, Index, Index)>());
    let result = runner().run(&strategy, |((table, text_col, label_col, want), pick)| {
        check_stray(
            &table,
            &want,
            text_col,
            label_col,
            pick,
            &read_text_label_csv,
            &tally,
        )
    });
    tally.report("text,label CSV");
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn stray_quote_in_pang_lee_csv_costs_at_most_its_row() {
    let tally = Tally::default();
    let strategy = (pang_lee_table(), any::<(Index, Index, Index)>());
    let result = runner().run(&strategy, |((table, want), pick)| {
        check_stray(&table, &want, 1, 0, pick, &read_pang_lee_csv, &tally)
    });
    tally.report("Pang & Lee CSV");
    if let Err(e) = result {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------------------------
// JSONL.

fn json_text() -> impl Strategy<Value = String> {
    let pieces = vec![
        "a", " ", ",", "\"", "\\", "\n", "\r\n", "\t", "é", "🎬", "{", "}", "#### 3", "\u{0}",
    ];
    vec(select(pieces), 0..10).prop_map(|v| v.concat())
}

/// Reviews as JSON lines (labels as numbers, strings or null), with blank lines between some.
fn reviews_jsonl() -> impl Strategy<Value = (Vec<String>, Vec<Review>)> {
    let label = select(vec![
        (serde_json::json!(0), Some(Sentiment::Negative)),
        (serde_json::json!(1), Some(Sentiment::Positive)),
        (serde_json::json!(-1), None),
        (serde_json::json!(null), None),
        (serde_json::json!("pos"), Some(Sentiment::Positive)),
        (serde_json::json!("negative"), Some(Sentiment::Negative)),
    ]);
    vec((json_text(), label, any::<bool>()), 1..20).prop_map(|rows| {
        let mut lines = Vec::new();
        let mut reviews = Vec::new();
        for (text, (json_label, meaning), blank_after) in rows {
            lines.push(serde_json::json!({ "text": text, "label": json_label }).to_string());
            if blank_after {
                lines.push(String::new());
            }
            reviews.push(Review {
                text,
                label: meaning,
            });
        }
        (lines, reviews)
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn well_formed_reviews_jsonl_round_trips((lines, want) in reviews_jsonl()) {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "r.jsonl", lines.join("\n").as_bytes());
        let r = read_reviews_jsonl(&p, ReadOptions::strict());
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        prop_assert_eq!(r.unwrap().items, want);
    }

    /// A stray `"` anywhere in one line costs at most that line: every other line reads as
    /// written, and if the line is skipped, it is reported with its number.
    #[test]
    fn stray_quote_in_jsonl_costs_at_most_its_line(
        (lines, want) in reviews_jsonl(),
        which in any::<Index>(),
        pos in any::<Index>(),
    ) {
        let filled: Vec<usize> = (0..lines.len()).filter(|&i| !lines[i].is_empty()).collect();
        let k = filled[which.index(filled.len())];
        let row = filled.iter().position(|&i| i == k).unwrap();
        let mut lines = lines;
        let cuts: Vec<usize> = lines[k].char_indices().map(|(i, _)| i).chain([lines[k].len()]).collect();
        lines[k].insert(cuts[pos.index(cuts.len())], '"');
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "r.jsonl", lines.join("\n").as_bytes());
        let mut others = want.clone();
        others.remove(row);
        match read_reviews_jsonl(&p, ReadOptions::skip_bad_rows()) {
            Ok(r) => {
                if r.skipped.is_empty() {
                    // The quote left valid JSON: only row `row` may differ.
                    prop_assert_eq!(r.items.len(), want.len());
                    let mut rest = r.items.clone();
                    rest.remove(row);
                    prop_assert_eq!(rest, others);
                } else {
                    prop_assert_eq!(&r.items, &others);
                    prop_assert_eq!(r.skipped_lines(), vec![k as u64 + 1]);
                }
            }
            Err(e) => {
                prop_assert!(others.is_empty(), "{}", e);
                prop_assert_eq!(e.line(), Some(k as u64 + 1));
            }
        }
    }
}
