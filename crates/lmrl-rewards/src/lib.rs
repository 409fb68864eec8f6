//! Reward functions for RL fine-tuning of language models.
//!
//! Every reward maps a batch of `(prompt, response)` texts to one `f32` score each through the
//! object-safe [`Reward`] trait, so applications can hold a `Box<dyn Reward>` chosen at run time:
//!
//! - [`TextCat`]: a port of the IMDB-trained spaCy `TextCatBOW.v2` classifier (score = the
//!   POS-vs-NEG logit), with a built-in spaCy-like English tokenizer ([`SpacyTokenizer`]).
//! - [`Vader`]: the VADER lexicon sentiment scorer (score = VADER's compound value).
//! - [`DistilBert`]: `DistilBertForSequenceClassification` in burn (score = the POSITIVE logit).
//! - [`Gsm8kReward`]: the GSM8K exact-match answer checker (score = 1.0 or 0.0).
//!
//! Assets (weights, lexicons) are never bundled: they are loaded from a path, by default under
//! `~/.cache/lmrl/` (see [`default_asset_dir`]).
mod error;
mod reward;

pub mod distilbert;
pub mod gsm8k;
pub mod hash;
pub mod textcat;
pub mod tokenize;
pub mod vader;

pub use distilbert::{DistilBert, DistilBertConfig, DistilBertReward, load_distilbert};
pub use error::RewardError;
pub use gsm8k::{Gsm8kReward, extract_ground_truth, extract_response_answer, pass_at_k};
pub use reward::{Reward, default_asset_dir};
pub use textcat::TextCat;
pub use tokenize::SpacyTokenizer;
pub use vader::Vader;
