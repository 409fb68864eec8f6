//! Reward functions for RL fine-tuning of language models.
//!
//! Every reward scores a batch of [`Sample`]s — the prompt the policy saw, its response and the
//! sample's own context `C` — to one `f32` each through the object-safe [`Reward<C>`] trait, so
//! an application holds a `Box<dyn Reward<C>>` chosen at run time. The context carries what the
//! reward needs besides the two texts:
//!
//! - [`SentimentContext`] (the plain query): the IMDB sentiment rewards score `query + response`.
//!   They are [`TextScorer`]s, models of whole texts (higher = more positive), and every
//!   `TextScorer` is a `Reward<SentimentContext>`:
//!   - [`TextCat`]: a port of the IMDB-trained spaCy `TextCatBOW.v2` classifier (score = the
//!     POS-vs-NEG logit, or P(POS) with [`TextCatScore::Probability`]), with a spaCy-like English
//!     tokenizer ([`SpacyTokenizer`]);
//!   - [`Vader`]: the VADER lexicon scorer (score = VADER's compound value in [−1, 1]);
//!   - `DistilBertReward` (cargo feature `distilbert`): `DistilBertForSequenceClassification`
//!     in burn (score = the POSITIVE logit).
//! - [`AnswerContext`] (the ground-truth answer): [`AnswerChecker`], the GSM8K exact-match
//!   checker (score = 1.0 or 0.0), built on [`check_answer`] and [`extract_response_answer`].
//!
//! Without the `distilbert` feature the crate depends on neither burn nor lmrl-models.
//!
//! Assets (weights, lexicons) are never bundled: they are loaded from a path, by default from
//! the asset cache of `lmrl-data` (`$LMRL_CACHE`, else `$XDG_CACHE_HOME/lmrl`, else
//! `~/.cache/lmrl`; see [`default_asset_dir`]).
mod error;
mod gsm8k;
mod hash;
mod reward;
mod textcat;
mod tokenize;
mod vader;

#[cfg(feature = "distilbert")]
mod distilbert;

#[cfg(feature = "distilbert")]
pub use distilbert::{
    BertTokenizer, DistilBert, DistilBertConfig, DistilBertReward, load_distilbert,
};
pub use error::RewardError;
pub use gsm8k::{
    AnswerChecker, check_answer, cut_continuation, extract_ground_truth, extract_response_answer,
    pass_at_k,
};
pub use reward::{AnswerContext, Reward, Sample, SentimentContext, TextScorer, default_asset_dir};
pub use textcat::{TextCat, TextCatScore, TextCatScores};
pub use tokenize::SpacyTokenizer;
pub use vader::Vader;
