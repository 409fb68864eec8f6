//! The IMDB task: continue the opening of a movie review positively. Prompts are the first
//! 2–7 tokens of a review (the reference's prompt builder); the reward scores the plain query
//! plus the response with a sentiment classifier; CORY's observer sees
//! `I can make this sentence "{q}{y1}" more positive: {q}`.
use std::path::Path;

use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use lmrl_data::{
    AssetCache, PromptConfig, ReadOptions, Review, build_prompts, imdb_observer_prompt,
};
use lmrl_models::{GenerationConfig, LmTokenizer, ModelError, Sampling};
use lmrl_rewards::{
    DistilBertReward, Reward, SentimentContext, TextCat, TextCatScore, TextScorer, Vader,
};
use lmrl_rl::Prompt;
use lmrl_train::{Task, TaskEnv, TaskError, TrainConfig, iter_rng, stream};
use rand::Rng;

use crate::config::{ImdbConfig, ImdbSettings};

/// A sentiment reward by name: `textcat`, `textcat-prob`, `vader`, or `distilbert:DIR` (a
/// directory or lexicon may follow `textcat:` and `vader:` too).
pub fn load_reward(spec: &str, cache: &AssetCache, device: &Device) -> Result<Box<dyn TextScorer>> {
    let (kind, arg) = match spec.split_once([':', '=']) {
        Some((k, a)) => (k, Some(a)),
        None => (spec, None),
    };
    let textcat = |score| -> Result<Box<dyn TextScorer>> {
        let dir = match arg {
            Some(d) => d.into(),
            None => cache.resolve("imdb-textcat")?,
        };
        Ok(Box::new(TextCat::load(&dir)?.with_score(score)))
    };
    Ok(match (kind, arg) {
        ("textcat", _) => textcat(TextCatScore::Logit)?,
        ("textcat-prob", _) => textcat(TextCatScore::Probability)?,
        ("vader", None) => Box::new(Vader::load(&cache.resolve("vader")?)?),
        ("vader", Some(lex)) => Box::new(Vader::load(Path::new(lex))?),
        ("distilbert", Some(dir)) => Box::new(DistilBertReward::load(Path::new(dir), device)?),
        ("distilbert", None) => bail!("`--reward distilbert` needs a directory: distilbert:DIR"),
        _ => bail!("unknown reward `{spec}`: use textcat, textcat-prob, vader or distilbert:DIR"),
    })
}

/// Names each skipped row (`path:line: reason`; the first [`SHOWN_SKIPPED`]) and the count.
fn report_skipped(skipped: &[lmrl_data::DataError], path: &std::path::Path) {
    for e in skipped.iter().take(SHOWN_SKIPPED) {
        eprintln!("note: skipped {e}");
    }
    if skipped.len() > SHOWN_SKIPPED {
        eprintln!("note: … and {} more", skipped.len() - SHOWN_SKIPPED);
    }
    if !skipped.is_empty() {
        eprintln!(
            "note: {} unreadable rows skipped in {} (--skip-bad-rows false stops at the first)",
            skipped.len(),
            path.display()
        );
    }
}

/// Skipped rows named one by one before the count.
const SHOWN_SKIPPED: usize = 20;

/// Reads every review source and builds the prompts (the first 2–7 tokens of each review),
/// each carrying its plain query as the reward's context.
pub fn load_prompts(
    t: &ImdbSettings,
    seed: u64,
    cache: &AssetCache,
    tok: &LmTokenizer,
) -> Result<Vec<Prompt<SentimentContext>>> {
    let mut reviews: Vec<Review> = Vec::new();
    for src in &t.data {
        let path = lmrl_train::resolve_path_or_asset(cache, src)?;
        let opts = if t.skip_bad_rows {
            ReadOptions::skip_bad_rows()
        } else {
            ReadOptions::strict()
        };
        let report = lmrl_data::read_reviews(&path, None, opts)
            .with_context(|| format!("cannot read reviews from {}", path.display()))?;
        report_skipped(&report.skipped, &path);
        reviews.extend(report.items);
    }
    let pc = PromptConfig {
        min_chars: t.min_review_chars,
        min_tokens: t.prompt_tokens_min,
        max_tokens: t.prompt_tokens_max,
        strip_br: true,
        seed,
    };
    let encode = |s: &str| tok.encode(s).unwrap_or_default();
    let decode = |ids: &[u32]| tok.decode(ids).unwrap_or_default();
    Ok(build_prompts(&reviews, &pc, &encode, &decode)?
        .into_iter()
        .map(|p| Prompt {
            context: SentimentContext::new(p.query.clone()),
            text: p.query,
            ids: p.input_ids,
        })
        .collect())
}

/// The IMDB task of one run.
pub struct ImdbTask {
    prompts: Vec<Prompt<SentimentContext>>,
    reward: Box<dyn TextScorer>,
    settings: ImdbSettings,
    seed: u64,
    /// The ids generation stops on (EOS first).
    eos: Vec<u32>,
    pad: u32,
}

impl ImdbTask {
    /// The task of the settings `cfg`, with its reward and prompts loaded.
    pub fn new(cfg: &ImdbConfig, env: &TaskEnv<'_>) -> Result<Self> {
        let t = &cfg.imdb;
        let max_pos = env.model.max_positions;
        match t.prompt_tokens_max.checked_add(t.response_tokens_max) {
            Some(n) if n <= max_pos => {}
            _ => bail!(
                "imdb.prompt_tokens_max + imdb.response_tokens_max = {} + {} tokens do not fit \
                 the model's {max_pos}-token context",
                t.prompt_tokens_max,
                t.response_tokens_max
            ),
        }
        let reward = load_reward(&cfg.imdb.reward, env.cache, env.device)?;
        let prompts = load_prompts(&cfg.imdb, cfg.run.seed, env.cache, env.tokenizer)?;
        let batch = cfg.prompts_drawn();
        if prompts.len() < batch {
            bail!(
                "only {} prompts (after dropping reviews of ≤ {} characters), fewer than one batch \
                 of {batch}",
                prompts.len(),
                cfg.imdb.min_review_chars,
            );
        }
        let eos = env.tokenizer.eos_token_ids();
        if env.rank == 0 {
            eprintln!(
                "{} prompts ({} iterations per epoch of {batch}), reward {}",
                prompts.len(),
                prompts.len() / batch,
                TextScorer::name(&reward)
            );
        }
        Ok(Self {
            prompts,
            reward,
            settings: cfg.imdb.clone(),
            seed: cfg.run.seed,
            eos,
            pad: env.pad_id,
        })
    }

    /// Builds the task for the training loop (errors as the loop's task errors).
    pub fn build(cfg: &ImdbConfig, env: &TaskEnv<'_>) -> std::result::Result<Self, TaskError> {
        Self::new(cfg, env).map_err(|e| e.into_boxed_dyn_error())
    }
}

impl<M: lmrl_models::CausalLm> Task<M> for ImdbTask {
    type Context = SentimentContext;

    fn prompts(&self) -> &[Prompt<SentimentContext>] {
        &self.prompts
    }

    fn reward(&self) -> &dyn Reward<SentimentContext> {
        &self.reward
    }

    fn observer_prompt(
        &self,
        prompt: &Prompt<SentimentContext>,
        pioneer_response: &str,
    ) -> std::result::Result<String, TaskError> {
        Ok(imdb_observer_prompt(&prompt.text, pioneer_response))
    }

    /// Pure sampling (TRL's `top_k=0, top_p=1.0`) for `gen_len` new tokens, one `gen_len` per
    /// batch drawn from the response-length range (the reference's `LengthSampler`).
    fn generation(&self, iteration: usize, seed: u64) -> GenerationConfig {
        let t = &self.settings;
        let gen_len = iter_rng(self.seed, iteration, stream::RESPONSE_LEN)
            .random_range(t.response_tokens_min..=t.response_tokens_max);
        GenerationConfig {
            sampling: Sampling::pure(),
            max_new_tokens: gen_len,
            repetition_penalty: t.repetition_penalty,
            eos_token_ids: self.eos.clone(),
            pad_token_id: self.pad,
            seed,
            first_row: 0,
            stop_sequences: Vec::new(),
            min_new_tokens: 0,
        }
    }

    /// The response as the reference scores it (`batch_decode` keeps the EOS text), or without
    /// the EOS text with `strip_eos`.
    fn decode(
        &self,
        tokenizer: &LmTokenizer,
        ids: &[u32],
    ) -> std::result::Result<String, ModelError> {
        if !self.settings.strip_eos {
            return tokenizer.decode(ids);
        }
        let kept: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|i| !self.eos.contains(i))
            .collect();
        tokenizer.decode(&kept)
    }
}
