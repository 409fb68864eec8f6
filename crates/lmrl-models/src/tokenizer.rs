//! Tokenizers of the supported models, all built on the `tokenizers` crate (the Rust core of
//! Hugging Face's fast tokenizers, so ids match `AutoTokenizer` in the reference stack).
//!
//! Three sources are supported:
//! - GPT-2's `vocab.json` + `merges.txt` (byte-level BPE, GPT-2's pre-tokenisation regex,
//!   `<|endoftext|>` = BOS = EOS, as `GPT2TokenizerFast` builds it);
//! - any `tokenizer.json`;
//! - the byte-level BPE embedded in a GGUF file (`tokenizer.ggml.*`), as llama.cpp's
//!   converter stored it from the model's HF tokenizer.
use std::path::{Path, PathBuf};

use tokenizers::SplitDelimiterBehavior;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, PreTokenizerWrapper, Tokenizer};

use crate::chat::ChatTemplate;
use crate::error::{ModelError, Result};
use crate::gguf::GgufMetadata;
use crate::loader::write_atomic;

/// The pre-tokenisation regex of Qwen2/Qwen2.5/Qwen3's `tokenizer.json` (llama.cpp: `qwen2`):
/// single digits, letters with one leading non-letter, line breaks kept with the punctuation
/// before them.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Llama 3's (llama.cpp: `llama-bpe`): the same with digits in groups of up to three.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GPT-2's only special token, which is its BOS, EOS and (in TRL) padding token.
pub const GPT2_EOS: &str = "<|endoftext|>";

/// A text tokenizer plus the special ids the RL loop needs.
#[derive(Debug, Clone)]
pub struct LmTokenizer {
    inner: Tokenizer,
    /// Where it was read from, for error messages.
    path: PathBuf,
    bos: Option<u32>,
    eos: Option<u32>,
    pad: Option<u32>,
    /// Further ids that end a generation besides `eos`: the rest of an `eos_token_id` list
    /// (`generation_config.json`, `config.json`), a GGUF's end-of-turn id.
    more_eos: Vec<u32>,
    /// The Jinja chat template, if the model ships one.
    chat_template: Option<String>,
    /// Number of ids (largest id + 1), computed once: `Tokenizer::get_vocab_size(true)`
    /// clones the whole vocabulary on every call.
    vocab_size: usize,
}

/// Largest id + 1 over the model vocabulary and the added tokens.
fn count_ids(inner: &Tokenizer) -> usize {
    inner
        .get_vocab(true)
        .values()
        .max()
        .map_or(0, |&m| m as usize + 1)
}

fn tok_err(path: &Path, reason: impl std::fmt::Display) -> ModelError {
    ModelError::Tokenizer {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// The byte-level pre-tokenizer of GPT-2: its regex
/// (`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`) and its
/// byte-to-unicode table, no prefix space (HF `GPT2TokenizerFast` defaults).
fn gpt2_byte_level() -> ByteLevel {
    ByteLevel::new(false, true, true)
}

impl LmTokenizer {
    /// GPT-2's BPE from `vocab.json` and `merges.txt` (OpenAI's `encoder.json` and `vocab.bpe`
    /// are the same files).
    pub fn from_gpt2_files(vocab_json: &Path, merges_txt: &Path) -> Result<Self> {
        for p in [vocab_json, merges_txt] {
            if !p.is_file() {
                return Err(tok_err(p, "file not found"));
            }
        }
        let (vocab_s, merges_s) = (vocab_json.to_string_lossy(), merges_txt.to_string_lossy());
        let bpe = BPE::from_file(&vocab_s, &merges_s)
            .build()
            .map_err(|e| tok_err(vocab_json, format!("with {}: {e}", merges_txt.display())))?;
        let mut inner = Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(gpt2_byte_level()));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        inner.add_special_tokens(&[AddedToken::from(GPT2_EOS, true)]);
        let eos = inner.token_to_id(GPT2_EOS);
        if eos.is_none() {
            return Err(tok_err(
                vocab_json,
                format!("`{GPT2_EOS}` is not in the vocabulary"),
            ));
        }
        Ok(Self {
            vocab_size: count_ids(&inner),
            inner,
            path: vocab_json.to_path_buf(),
            bos: eos,
            eos,
            pad: None,
            more_eos: Vec::new(),
            chat_template: None,
        })
    }

    /// Any HF `tokenizer.json`. Special ids come from a sibling `tokenizer_config.json`
    /// (`bos_token`, `eos_token`, `pad_token`) or `config.json` (`*_token_id`), and default to
    /// `<|endoftext|>` when the vocabulary has it.
    pub fn from_tokenizer_json(path: &Path) -> Result<Self> {
        // The JSON syntax is checked here first: tokenizers 0.22 panics ("Helper") on a file
        // that is not JSON inside its `decoder` (found by the `tokenizer` fuzz target).
        let text = std::fs::read_to_string(path).map_err(|e| tok_err(path, e))?;
        serde_json::from_str::<serde::de::IgnoredAny>(&text)
            .map_err(|e| tok_err(path, format!("not valid JSON: {e}")))?;
        let inner: Tokenizer = text.parse().map_err(|e| tok_err(path, e))?;
        let mut t = Self {
            vocab_size: count_ids(&inner),
            inner,
            path: path.to_path_buf(),
            bos: None,
            eos: None,
            pad: None,
            more_eos: Vec::new(),
            chat_template: None,
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        t.read_special_ids(dir)?;
        if t.eos.is_none() {
            t.eos = t.inner.token_to_id(GPT2_EOS);
            if t.bos.is_none() {
                t.bos = t.eos;
            }
        }
        Ok(t)
    }

    /// A word-level tokenizer over `words`, the id of a word being its position: text is split
    /// on whitespace and punctuation, a word not in the list becomes `words[0]` (the unknown
    /// token), and ids decode to their words joined by spaces. For toy tasks and models trained
    /// from scratch; `eos` and `pad` name words of the list. [`LmTokenizer::save`] writes it as
    /// a `tokenizer.json` that transformers loads.
    pub fn word_level(words: &[&str], eos: Option<&str>, pad: Option<&str>) -> Result<Self> {
        let path = Path::new("<word list>");
        let Some(unknown) = words.first() else {
            return Err(tok_err(path, "the word list is empty"));
        };
        let mut vocab = serde_json::Map::new();
        for (id, w) in words.iter().enumerate() {
            if vocab.insert(w.to_string(), id.into()).is_some() {
                return Err(tok_err(path, format!("`{w}` is listed twice")));
            }
        }
        let json = serde_json::json!({
            "version": "1.0",
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": unknown},
            "pre_tokenizer": {"type": "Whitespace"},
        });
        let inner: Tokenizer = json.to_string().parse().map_err(|e| tok_err(path, e))?;
        let id = |name: Option<&str>| -> Result<Option<u32>> {
            name.map(|n| {
                inner
                    .token_to_id(n)
                    .ok_or_else(|| tok_err(path, format!("`{n}` is not in the word list")))
            })
            .transpose()
        };
        let (eos, pad) = (id(eos)?, id(pad)?);
        Ok(Self {
            vocab_size: words.len(),
            path: path.to_path_buf(),
            bos: None,
            eos,
            pad,
            more_eos: Vec::new(),
            chat_template: None,
            inner,
        })
    }

    /// Fills bos/eos/pad from `tokenizer_config.json`, then `config.json`, in `dir`.
    fn read_special_ids(&mut self, dir: &Path) -> Result<()> {
        let tc = dir.join("tokenizer_config.json");
        if tc.is_file() {
            let v = read_json(&tc)?;
            let id = |key: &str| -> Result<Option<u32>> {
                let content = match v.get(key) {
                    Some(serde_json::Value::String(s)) => s.as_str(),
                    Some(serde_json::Value::Object(o)) => {
                        match o.get("content").and_then(|c| c.as_str()) {
                            Some(s) => s,
                            None => return Ok(None),
                        }
                    }
                    _ => return Ok(None),
                };
                self.inner.token_to_id(content).map(Some).ok_or_else(|| {
                    tok_err(&tc, format!("{key} `{content}` is not in the vocabulary"))
                })
            };
            self.bos = id("bos_token")?;
            self.eos = id("eos_token")?;
            self.pad = id("pad_token")?;
            self.chat_template = chat_template_of(&v, &tc)?;
        }
        let jinja = dir.join("chat_template.jinja");
        if self.chat_template.is_none() && jinja.is_file() {
            let text = std::fs::read_to_string(&jinja).map_err(|source| ModelError::Io {
                path: jinja.clone(),
                source,
            })?;
            self.chat_template = Some(text);
        }
        // generation_config.json is what `generate` stops on; config.json the fallback.
        for file in ["generation_config.json", "config.json"] {
            let cfg = dir.join(file);
            if !cfg.is_file() {
                continue;
            }
            let v = read_json(&cfg)?;
            let ids = |key: &str| -> Result<Vec<u32>> {
                let bad = || tok_err(&cfg, format!("{key} must be a token id or a list of them"));
                let list = match v.get(key) {
                    None | Some(serde_json::Value::Null) => return Ok(Vec::new()),
                    Some(serde_json::Value::Array(a)) => a.iter().collect(),
                    Some(x) => vec![x],
                };
                list.into_iter()
                    .map(|x| {
                        x.as_u64()
                            .and_then(|x| u32::try_from(x).ok())
                            .ok_or_else(bad)
                    })
                    .collect()
            };
            let eos = ids("eos_token_id")?;
            self.bos = self.bos.or(ids("bos_token_id")?.first().copied());
            self.eos = self.eos.or(eos.first().copied());
            self.pad = self.pad.or(ids("pad_token_id")?.first().copied());
            for id in eos {
                if Some(id) != self.eos && !self.more_eos.contains(&id) {
                    self.more_eos.push(id);
                }
            }
        }
        Ok(())
    }

    /// The byte-level BPE stored in a GGUF file (`tokenizer.ggml.model = "gpt2"`).
    ///
    /// `tokenizer.ggml.tokens` gives the vocabulary (index = id), `tokenizer.ggml.merges` the
    /// ranked merges (`"a b"`), `tokenizer.ggml.token_type` marks control tokens (type 3),
    /// which become special added tokens (matched whole in text, as in the HF tokenizer), and
    /// user-defined tokens (type 4), which become plain added tokens. `tokenizer.ggml.pre` names
    /// the pre-tokenisation: `smollm` is llama.cpp's name for SmolLM's HF pipeline, which
    /// isolates every digit (`\p{N}`) before GPT-2's regex (HF: `Digits(individual_digits)` then
    /// `ByteLevel`); `gpt-2`/`default` is GPT-2's regex alone; `qwen2` (NFC, then Qwen2's split
    /// regex, then the byte mapping) and `llama-bpe` (Llama 3's split regex, then the byte
    /// mapping) are those models' `tokenizer.json` pipelines. BOS is prepended when
    /// `tokenizer.ggml.add_bos_token` is true.
    pub fn from_gguf(meta: &GgufMetadata, path: &Path) -> Result<Self> {
        let model = meta.get_str("tokenizer.ggml.model").unwrap_or("");
        if model != "gpt2" {
            return Err(tok_err(
                path,
                format!(
                    "tokenizer.ggml.model `{model}` is not supported (only the byte-level BPE `gpt2`)"
                ),
            ));
        }
        let tokens = meta.string_array("tokenizer.ggml.tokens")?;
        let mut inner = Tokenizer::new(gguf_bpe(meta, &tokens, path)?);
        let pre = meta.get_str("tokenizer.ggml.pre").unwrap_or("default");
        let pre_tok = gguf_pre_tokenizer(pre, &mut inner, path)?;
        inner.with_pre_tokenizer(Some(pre_tok));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        add_gguf_token_types(meta, &tokens, &mut inner, path)?;
        let id = |key: &str| -> Result<Option<u32>> {
            match meta.opt_u64(key)? {
                None => Ok(None),
                Some(v) if (v as usize) < tokens.len() => Ok(Some(v as u32)),
                Some(v) => Err(tok_err(
                    path,
                    format!("{key} {v} is outside the {} tokens", tokens.len()),
                )),
            }
        };
        let (bos, eos, pad) = (
            id("tokenizer.ggml.bos_token_id")?,
            id("tokenizer.ggml.eos_token_id")?,
            id("tokenizer.ggml.padding_token_id")?,
        );
        // llama.cpp also ends a generation on the end-of-turn and end-of-message tokens.
        let more_eos = [
            id("tokenizer.ggml.eot_token_id")?,
            id("tokenizer.ggml.eom_token_id")?,
        ]
        .into_iter()
        .flatten()
        .collect();
        let chat_template = meta.get_str("tokenizer.chat_template").map(str::to_string);
        let add_bos = meta
            .get("tokenizer.ggml.add_bos_token")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        if add_bos {
            let bos_id = bos.ok_or_else(|| {
                tok_err(path, "add_bos_token is set but there is no bos_token_id")
            })?;
            inner.with_post_processor(Some(bos_template(tokens[bos_id as usize], bos_id, path)?));
        }
        Ok(Self {
            vocab_size: count_ids(&inner).max(tokens.len()),
            inner,
            path: path.to_path_buf(),
            bos,
            eos,
            pad,
            more_eos,
            chat_template,
        })
    }

    /// The tokenizer belonging to a model: a `.gguf` file's own vocabulary, or in an HF
    /// directory `tokenizer.json`, else `vocab.json` + `merges.txt`.
    pub fn load_for_model(path: &Path) -> Result<Self> {
        if path.is_file() {
            if path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
            {
                return Self::from_gguf(&GgufMetadata::read(path)?, path);
            }
            if path.file_name().is_some_and(|n| n == "tokenizer.json") {
                return Self::from_tokenizer_json(path);
            }
            return Err(tok_err(
                path,
                "expected a .gguf file, a tokenizer.json or a model directory",
            ));
        }
        if !path.is_dir() {
            return Err(tok_err(path, "no such file or directory"));
        }
        let tj = path.join("tokenizer.json");
        if tj.is_file() {
            return Self::from_tokenizer_json(&tj);
        }
        let (v, m) = (path.join("vocab.json"), path.join("merges.txt"));
        if v.is_file() && m.is_file() {
            let mut t = Self::from_gpt2_files(&v, &m)?;
            // A saved GPT-2 directory may override the special tokens.
            t.read_special_ids(path)?;
            return Ok(t);
        }
        Err(tok_err(
            path,
            "no tokenizer.json, and no vocab.json + merges.txt, in this directory",
        ))
    }

    /// Token ids of `text`, with the tokenizer's own special tokens (e.g. a BOS) where its
    /// post-processor adds them — what `tokenizer(text)["input_ids"]` gives in Python.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.inner
            .encode(text, true)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| tok_err(&self.path, format!("encoding failed: {e}")))
    }

    /// Text of `ids`, special tokens included (HF `decode` default).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.decode_with(ids, false)
    }

    /// Text of `ids` without special tokens (`skip_special_tokens=True`).
    pub fn decode_skip_special(&self, ids: &[u32]) -> Result<String> {
        self.decode_with(ids, true)
    }

    fn decode_with(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let vocab = self.vocab_size();
        if let Some((pos, &id)) = ids
            .iter()
            .enumerate()
            .find(|&(_, &id)| id as usize >= vocab)
        {
            return Err(ModelError::TokenOutOfRange {
                id: id.into(),
                row: 0,
                pos,
                vocab,
            });
        }
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| tok_err(&self.path, format!("decoding failed: {e}")))
    }

    /// Number of ids (largest id + 1), added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn eos_token_id(&self) -> Option<u32> {
        self.eos
    }

    /// Every id that ends a generation: the EOS first, then the others the model names
    /// (Llama 3's `<|eot_id|>` beside `<|end_of_text|>`) — what `generate` stops on.
    pub fn eos_token_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.eos.into_iter().collect();
        for &id in &self.more_eos {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }

    /// The model's chat template, with the BOS and EOS strings it refers to; `None` when the
    /// model ships no template.
    pub fn chat_template(&self) -> Result<Option<ChatTemplate>> {
        let Some(source) = &self.chat_template else {
            return Ok(None);
        };
        let name = |id: Option<u32>| {
            id.and_then(|i| self.inner.id_to_token(i))
                .unwrap_or_default()
        };
        ChatTemplate::new(source.clone(), name(self.bos), name(self.eos), &self.path).map(Some)
    }

    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos
    }

    /// The padding id: the tokenizer's own, else EOS (what TRL scripts set for GPT-2).
    pub fn pad_token_id(&self) -> Option<u32> {
        self.pad.or(self.eos)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The wrapped `tokenizers` tokenizer.
    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }

    /// Writes `tokenizer.json` and a `tokenizer_config.json` naming the special tokens into
    /// `dir` (created if needed), each atomically (temporary file, then rename), so that
    /// [`LmTokenizer::load_for_model`] on `dir` gives back the same tokenizer.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|source| ModelError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let json = self
            .inner
            .to_string(false)
            .map_err(|e| tok_err(&self.path, format!("serialising: {e}")))?;
        write_atomic(&dir.join("tokenizer.json"), json.as_bytes())?;
        let name = |id: Option<u32>| id.and_then(|i| self.inner.id_to_token(i));
        let mut cfg = serde_json::Map::new();
        for (key, id) in [
            ("bos_token", self.bos),
            ("eos_token", self.eos),
            ("pad_token", self.pad),
        ] {
            if let Some(n) = name(id) {
                cfg.insert(key.to_string(), serde_json::Value::String(n));
            }
        }
        if let Some(t) = &self.chat_template {
            cfg.insert(
                "chat_template".to_string(),
                serde_json::Value::String(t.clone()),
            );
        }
        cfg.insert(
            "tokenizer_class".to_string(),
            serde_json::Value::String("PreTrainedTokenizerFast".to_string()),
        );
        let text = serde_json::to_string_pretty(&serde_json::Value::Object(cfg)).map_err(|e| {
            tok_err(
                &self.path,
                format!("serialising tokenizer_config.json: {e}"),
            )
        })?;
        write_atomic(&dir.join("tokenizer_config.json"), text.as_bytes())?;
        self.save_generation_config(dir)
    }

    /// `generation_config.json` with the ids generation stops on (a list when there are
    /// several), so that a saved model stops where the original did, here and in transformers.
    fn save_generation_config(&self, dir: &Path) -> Result<()> {
        let eos = self.eos_token_ids();
        let mut cfg = serde_json::Map::new();
        let mut put = |key: &str, v: serde_json::Value| {
            cfg.insert(key.to_string(), v);
        };
        if let Some(b) = self.bos {
            put("bos_token_id", b.into());
        }
        match eos.as_slice() {
            [] => {}
            [one] => put("eos_token_id", (*one).into()),
            many => put("eos_token_id", many.to_vec().into()),
        }
        if let Some(p) = self.pad {
            put("pad_token_id", p.into());
        }
        let text = serde_json::to_string_pretty(&serde_json::Value::Object(cfg)).map_err(|e| {
            tok_err(
                &self.path,
                format!("serialising generation_config.json: {e}"),
            )
        })?;
        write_atomic(&dir.join("generation_config.json"), text.as_bytes())
    }
}

/// `chat_template` of a `tokenizer_config.json`: a string, or transformers' list of named
/// templates, of which the one named `default` is the one `apply_chat_template` uses.
fn chat_template_of(v: &serde_json::Value, path: &Path) -> Result<Option<String>> {
    match v.get("chat_template") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(serde_json::Value::Array(named)) => {
            let default = named
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"));
            Ok(default
                .and_then(|t| t.get("template"))
                .and_then(|t| t.as_str())
                .map(str::to_string))
        }
        Some(_) => Err(tok_err(
            path,
            "chat_template must be a string or a list of {name, template}",
        )),
    }
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| ModelError::Format {
        path: path.to_path_buf(),
        format: "JSON",
        reason: e.to_string(),
    })
}

/// The BPE model of a GGUF's `tokenizer.ggml.tokens` (index = id) and ranked
/// `tokenizer.ggml.merges` (`"a b"`).
fn gguf_bpe(meta: &GgufMetadata, tokens: &[&str], path: &Path) -> Result<BPE> {
    let merges_raw = meta.string_array("tokenizer.ggml.merges")?;
    let mut vocab = Vocab::default();
    for (id, tok) in tokens.iter().enumerate() {
        let id = u32::try_from(id).map_err(|_| tok_err(path, "more than 2^32 tokens"))?;
        // Keep the first id of a duplicated token string (the others can only be decoded).
        vocab.entry((*tok).to_string()).or_insert(id);
    }
    let mut merges = Vec::with_capacity(merges_raw.len());
    for (i, m) in merges_raw.iter().enumerate() {
        let (a, b) = m.split_once(' ').ok_or_else(|| {
            tok_err(
                path,
                format!("tokenizer.ggml.merges[{i}] `{m}` is not `a b`"),
            )
        })?;
        merges.push((a.to_string(), b.to_string()));
    }
    BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| tok_err(path, format!("building BPE from tokenizer.ggml.*: {e}")))
}

/// The pre-tokenisation `tokenizer.ggml.pre` names (Qwen2's also sets NFC on `inner`).
fn gguf_pre_tokenizer(
    pre: &str,
    inner: &mut Tokenizer,
    path: &Path,
) -> Result<PreTokenizerWrapper> {
    let split_then_bytes = |pattern: &str| -> Result<PreTokenizerWrapper> {
        let split = Split::new(
            SplitPattern::Regex(pattern.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| tok_err(path, e))?;
        let bytes = ByteLevel::new(false, false, false);
        Ok(Sequence::new(vec![split.into(), bytes.into()]).into())
    };
    Ok(match pre {
        "default" | "gpt-2" | "gpt2" => gpt2_byte_level().into(),
        "smollm" => Sequence::new(vec![Digits::new(true).into(), gpt2_byte_level().into()]).into(),
        "qwen2" => {
            inner.with_normalizer(Some(NFC));
            split_then_bytes(QWEN2_SPLIT)?
        }
        "llama-bpe" => split_then_bytes(LLAMA3_SPLIT)?,
        other => {
            return Err(tok_err(
                path,
                format!(
                    "tokenizer.ggml.pre `{other}` is not supported (gpt-2, default, smollm, \
                     qwen2, llama-bpe are)"
                ),
            ));
        }
    })
}

/// Control tokens (type 3) as special added tokens, matched whole in text as in the HF
/// tokenizer, and user-defined tokens (type 4) as plain added tokens.
fn add_gguf_token_types(
    meta: &GgufMetadata,
    tokens: &[&str],
    inner: &mut Tokenizer,
    path: &Path,
) -> Result<()> {
    let Some(types) = meta
        .get("tokenizer.ggml.token_type")
        .and_then(|v| v.as_array())
    else {
        return Ok(());
    };
    if types.len() != tokens.len() {
        return Err(tok_err(
            path,
            format!(
                "tokenizer.ggml.token_type has {} entries for {} tokens",
                types.len(),
                tokens.len()
            ),
        ));
    }
    let mut special = Vec::new();
    let mut user = Vec::new();
    for (tok, ty) in tokens.iter().zip(types) {
        match ty.as_i64() {
            Some(3) => special.push(AddedToken::from(*tok, true)),
            Some(4) => user.push(AddedToken::from(*tok, false).normalized(false)),
            _ => {}
        }
    }
    inner.add_special_tokens(&special);
    inner.add_tokens(&user);
    Ok(())
}

/// Prepends BOS (`tokenizer.ggml.add_bos_token`) to single texts and pairs.
fn bos_template(bos_tok: &str, bos_id: u32, path: &Path) -> Result<TemplateProcessing> {
    TemplateProcessing::builder()
        .try_single(format!("{bos_tok} $A"))
        .and_then(|b| b.try_pair(format!("{bos_tok} $A {bos_tok} $B")))
        .map_err(|e| tok_err(path, e))?
        .special_tokens(vec![(bos_tok.to_string(), bos_id)])
        .build()
        .map_err(|e| tok_err(path, e))
}
