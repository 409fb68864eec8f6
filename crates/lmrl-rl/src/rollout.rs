//! One learner's rollout: sample responses to a batch of prompts, decode them, score each
//! with a [`Reward`] on its prompt's own context, and optionally take the learner's step on
//! the result — the loop body of PPO, GRPO and RLOO with one trainable copy.
//!
//! ```ignore
//! for it in 0..iterations {
//!     let generation = generation.clone().with_seed(it);
//!     let (batch, stats) = rollout_step(&mut agent, &prompts, &generation, &tok, &reward, &reference)?;
//!     println!("{it}: reward {:.3}, kl {:.3}", batch.mean_score(), stats.kl);
//! }
//! ```
//!
//! The step goes through [`Learner::step`], so whichever learner runs it reports one type,
//! [`StepStats`] (the KL, entropy, losses and TRL's own keys). `PpoAgent::step` and
//! `GroupAgent::step`, the algorithms' own entry points, return their full statistics
//! (`PpoStats`, `GroupStats`), from which [`StepStats`] is built.
//!
//! CORY ([`crate::CoryTrainer`]) decodes and scores its pioneer's and observer's responses with
//! the same functions.
use lmrl_models::{CausalLm, GenerationConfig, LmTokenizer};
use lmrl_rewards::{Reward, Sample};

use crate::cory::{EnvError, Prompt, ext};
use crate::error::{Result, RlError};
use crate::learner::{Learner, StepStats};

/// Token ids → the text a reward reads.
pub trait Decode {
    /// The text of `ids`.
    fn decode(&self, ids: &[u32]) -> std::result::Result<String, EnvError>;
}

/// Keeps special tokens (an `<|endoftext|>` stays in the text), as the CORY reference decodes.
impl Decode for LmTokenizer {
    fn decode(&self, ids: &[u32]) -> std::result::Result<String, EnvError> {
        Ok(LmTokenizer::decode(self, ids)?)
    }
}

impl<F: Fn(&[u32]) -> std::result::Result<String, EnvError>> Decode for F {
    fn decode(&self, ids: &[u32]) -> std::result::Result<String, EnvError> {
        self(ids)
    }
}

/// A rollout's samples, in the batch layout [`Learner::step`] takes: each prompt
/// [`Learner::samples_per_prompt`] times in a row.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredBatch {
    /// The prompt ids each response answers.
    pub queries: Vec<Vec<u32>>,
    /// The sampled response ids (EOS kept, no padding).
    pub responses: Vec<Vec<u32>>,
    /// The decoded responses, as the reward read them.
    pub texts: Vec<String>,
    /// The reward of each response.
    pub scores: Vec<f32>,
}

impl ScoredBatch {
    /// The batch mean of the scores (0 for an empty batch).
    pub fn mean_score(&self) -> f32 {
        crate::cory::mean(&self.scores)
    }
}

impl<C> Prompt<C> {
    /// A prompt from its ids, its text and the context its reward needs.
    pub fn new(ids: Vec<u32>, text: impl Into<String>, context: C) -> Self {
        Self {
            ids,
            text: text.into(),
            context,
        }
    }

    /// `text` encoded by `tokenizer` (with the special tokens its post-processor adds, as
    /// transformers' `tokenizer(text)`), with `context`.
    pub fn encode(tokenizer: &LmTokenizer, text: impl Into<String>, context: C) -> Result<Self> {
        let text = text.into();
        Ok(Self::new(tokenizer.encode(&text)?, text, context))
    }
}

/// Each item `samples` times in a row: the batch layout of [`Learner::samples_per_prompt`].
pub(crate) fn repeat_each<T>(items: &[T], samples: usize) -> Vec<&T> {
    items
        .iter()
        .flat_map(|p| std::iter::repeat_n(p, samples))
        .collect()
}

/// The text of each id sequence.
pub(crate) fn decode_all<D: Decode + ?Sized>(
    decoder: &D,
    seqs: &[Vec<u32>],
) -> Result<Vec<String>> {
    seqs.iter()
        .map(|y| ext("decode", decoder.decode(y)))
        .collect()
}

/// The reward of each response to its prompt, `responses[i]` answering `prompts[i]` with
/// context `contexts[i]`: one [`Reward::score`] call over the batch, whose answer must hold one
/// score per sample.
pub fn score_texts<C>(
    reward: &dyn Reward<C>,
    prompts: &[&str],
    responses: &[String],
    contexts: &[&C],
) -> Result<Vec<f32>> {
    let samples: Vec<Sample<'_, C>> = prompts
        .iter()
        .zip(responses)
        .zip(contexts)
        .map(|((p, r), c)| Sample::new(p, r, *c))
        .collect();
    let r = reward.score(&samples).map_err(|e| RlError::External {
        component: format!("reward {}", reward.name()),
        message: e.to_string(),
    })?;
    if r.len() != samples.len() {
        return Err(RlError::Shape {
            what: format!("rewards of {}", reward.name()),
            expected: vec![samples.len()],
            got: vec![r.len()],
        });
    }
    Ok(r)
}

/// Samples [`Learner::samples_per_prompt`] responses to each of `prompts` from `learner` with
/// `generation`, decodes them with `decoder`, and scores each with `reward` on its prompt's
/// text and context. No step: what a program runs to evaluate, or before a step of its own.
pub fn rollout<M, L, D, C>(
    learner: &L,
    prompts: &[Prompt<C>],
    generation: &GenerationConfig,
    decoder: &D,
    reward: &dyn Reward<C>,
) -> Result<ScoredBatch>
where
    M: CausalLm,
    L: Learner<M> + ?Sized,
    D: Decode + ?Sized,
{
    let expanded = repeat_each(prompts, learner.samples_per_prompt());
    let queries: Vec<Vec<u32>> = expanded.iter().map(|p| p.ids.clone()).collect();
    let responses = learner.generate(&queries, generation)?.tokens;
    let texts = decode_all(decoder, &responses)?;
    let prompt_texts: Vec<&str> = expanded.iter().map(|p| p.text.as_str()).collect();
    let contexts: Vec<&C> = expanded.iter().map(|p| &p.context).collect();
    let scores = score_texts(reward, &prompt_texts, &texts, &contexts)?;
    Ok(ScoredBatch {
        queries,
        responses,
        texts,
        scores,
    })
}

/// [`rollout`], then [`Learner::step`] on its samples with the KL measured against
/// `reference`: one iteration of PPO, GRPO or RLOO. The batch must be the size the learner
/// steps on (PPO: `batch_size` prompts; GRPO and RLOO: `prompts_per_step`).
pub fn rollout_step<M, L, D, C>(
    learner: &mut L,
    prompts: &[Prompt<C>],
    generation: &GenerationConfig,
    decoder: &D,
    reward: &dyn Reward<C>,
    reference: &M,
) -> Result<(ScoredBatch, StepStats)>
where
    M: CausalLm,
    L: Learner<M> + ?Sized,
    D: Decode + ?Sized,
{
    let batch = rollout(&*learner, prompts, generation, decoder, reward)?;
    let stats = Learner::step(
        learner,
        &batch.queries,
        &batch.responses,
        &batch.scores,
        reference,
    )?;
    Ok((batch, stats))
}
