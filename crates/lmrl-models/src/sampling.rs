//! Decoding strategies and logits processing, applied the way Hugging Face `generate` applies them.
//!
//! For one decoding step HF turns the last-position logits into a distribution with a list of
//! processors, in this order (transformers 4.46 `_get_logits_processor`):
//!
//! 1. `RepetitionPenaltyLogitsProcessor` (CTRL, Keskar et al. 2019): for every token id already in
//!    the sequence, a logit `l < 0` becomes `l·p` and any other `l/p`;
//! 2. `TemperatureLogitsWarper`: `l / T` (only when sampling and `T ≠ 1`);
//! 3. `TopKLogitsWarper`: logits strictly below the k-th largest become `-inf` (ties kept);
//! 4. `TopPLogitsWarper` (nucleus, Holtzman et al. 2020): sort ascending, remove the tokens whose
//!    cumulative probability is `≤ 1 - top_p`, always keeping the most likely token — i.e. keep
//!    the smallest set whose probability is `≥ top_p`.
//!
//! Greedy decoding takes the argmax of the (penalised) logits; sampling draws from
//! `softmax(processed logits)`. All of this runs on the device for the whole batch; only the
//! uniform numbers of the categorical draw come from host RNGs so that runs are reproducible on
//! any backend: one `StdRng` per row, seeded from ([`GenerationConfig::seed`], the row's global
//! index [`GenerationConfig::first_row`] + r) by [`row_seed`]. A sample's noise therefore does
//! not depend on which batch, chunk or rank it was generated in — what makes a data-parallel
//! run sample the same responses as a single process.
use burn::tensor::activation::softmax;
use burn::tensor::{Bool, Device, IndexingUpdateOp, Int, Tensor, TensorData};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::error::{ModelError, Result};
use crate::log_softmax::log_softmax;

/// How the next token is chosen from the processed logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// Argmax of the logits (after the repetition penalty). HF `do_sample=False`, `num_beams=1`.
    Greedy,
    /// Multinomial sampling from `softmax(processed logits)`. HF `do_sample=True`.
    Sample {
        /// Divides the logits; must be > 0. `1.0` leaves them unchanged.
        temperature: f32,
        /// Keep only the `top_k` largest logits; `0` disables the filter (TRL PPO uses 0).
        top_k: usize,
        /// Nucleus mass in `(0, 1]`; `1.0` disables the filter (TRL PPO uses 1.0).
        top_p: f32,
    },
}

impl Sampling {
    /// Pure sampling from the model's distribution, as TRL's PPO generation kwargs ask for
    /// (`top_k=0.0, top_p=1.0, do_sample=True`).
    pub fn pure() -> Self {
        Sampling::Sample {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
        }
    }
}

/// Everything [`crate::generation::generate`] needs besides the model and the prompts.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationConfig {
    pub sampling: Sampling,
    /// Upper bound on generated tokens per row (EOS included).
    pub max_new_tokens: usize,
    /// CTRL repetition penalty; `1.0` disables it. Must be > 0.
    pub repetition_penalty: f32,
    /// A row stops after producing any of these ids (the EOS itself is kept): HF
    /// `generation_config.eos_token_id`, one id or several (Llama 3 ends a turn with
    /// `<|eot_id|>` as well as `<|end_of_text|>`). Empty: never stop early.
    pub eos_token_ids: Vec<u32>,
    /// Fills the left padding of prompts and the tail of rows that stopped.
    pub pad_token_id: u32,
    /// Seed of the host RNGs that draw the categorical samples.
    pub seed: u64,
    /// Global index of the batch's first prompt: row r draws its uniforms from the stream
    /// [`row_seed`]`(seed, first_row + r)`, so a prompt gets the same samples whether it is
    /// generated alone, in a chunk of a larger batch or on another rank. 0 for a batch that
    /// stands alone.
    pub first_row: u64,
    /// A row also stops once its generated tokens end with one of these id sequences (kept in
    /// the output, as the EOS is): token-level stop strings, e.g. the encodings of an invented
    /// `Question:` (HF `stop_strings`, matched on ids). Empty sequences are ignored; empty: no
    /// stop besides EOS and `max_new_tokens`.
    pub stop_sequences: Vec<Vec<u32>>,
    /// No EOS before this many new tokens (HF `min_new_tokens`: the EOS logit is −∞ until
    /// then); 0 = off. Stop sequences still end a row.
    pub min_new_tokens: usize,
}

/// The settings of a PPO rollout as TRL's examples run it: pure sampling (TRL's PPO generation
/// kwargs `top_k=0.0, top_p=1.0, do_sample=True`), at most
/// [`DEFAULT_MAX_NEW_TOKENS`] new tokens, no repetition penalty, no EOS ids (a config knows no
/// model: every row runs to `max_new_tokens`), padding id 0, seed 0, the batch standing alone
/// (`first_row` 0), no stop sequences and no minimum length. [`GenerationConfig::for_tokenizer`]
/// starts from here with the model's EOS ids and padding id, which is what HF `generate` does
/// with the model's `generation_config`.
impl Default for GenerationConfig {
    fn default() -> Self {
        Self {
            sampling: Sampling::pure(),
            max_new_tokens: DEFAULT_MAX_NEW_TOKENS,
            repetition_penalty: 1.0,
            eos_token_ids: Vec::new(),
            pad_token_id: 0,
            seed: 0,
            first_row: 0,
            stop_sequences: Vec::new(),
            min_new_tokens: 0,
        }
    }
}

/// [`GenerationConfig::default`]'s length bound: the short continuations RL fine-tuning samples
/// (TRL's IMDB script draws 4 to 16 tokens; a GSM8K answer needs more, so apps set their own).
pub const DEFAULT_MAX_NEW_TOKENS: usize = 32;

/// Builder methods, named as transformers' `GenerationConfig` fields and candle's sampler
/// settings; each returns the changed config, so that a program writes
/// `GenerationConfig::for_tokenizer(&tok).with_max_new_tokens(48).with_seed(step)`.
impl GenerationConfig {
    /// [`GenerationConfig::default`] with the ids `tokenizer` stops on
    /// ([`crate::LmTokenizer::eos_token_ids`]: Llama 3's end-of-turn id as well as its EOS) and
    /// its padding id: the tokenizer's own, else its EOS (TRL's GPT-2 scripts), else 0 — the
    /// one padding rule, so that generation and the learners' batches pad alike.
    pub fn for_tokenizer(tokenizer: &crate::LmTokenizer) -> Self {
        Self::default()
            .with_eos(tokenizer.eos_token_ids())
            .with_pad(tokenizer.pad_token_id().unwrap_or(0))
    }

    /// At most `max_new_tokens` new tokens per row (EOS included).
    #[must_use]
    pub fn with_max_new_tokens(mut self, max_new_tokens: usize) -> Self {
        self.max_new_tokens = max_new_tokens;
        self
    }

    /// No EOS before `min_new_tokens` new tokens (HF `min_new_tokens`).
    #[must_use]
    pub fn with_min_new_tokens(mut self, min_new_tokens: usize) -> Self {
        self.min_new_tokens = min_new_tokens;
        self
    }

    /// How the next token is chosen ([`Sampling::Greedy`], [`Sampling::pure`], …).
    #[must_use]
    pub fn with_sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = sampling;
        self
    }

    /// Samples at `temperature`, keeping the current top-k/top-p filters; a greedy config
    /// becomes sampling without filters (greedy decoding has no temperature to set, and HF
    /// ignores one there, which would hide the mistake).
    #[must_use]
    pub fn with_temperature(self, temperature: f32) -> Self {
        self.sampled(|t, _, _| *t = temperature)
    }

    /// Samples from the `top_k` most likely tokens only (0 = all), keeping the temperature and
    /// top-p filter; turns a greedy config into sampling as
    /// [`GenerationConfig::with_temperature`] does.
    #[must_use]
    pub fn with_top_k(self, top_k: usize) -> Self {
        self.sampled(|_, k, _| *k = top_k)
    }

    /// Samples from the nucleus of mass `top_p` (1.0 = all), keeping the temperature and top-k
    /// filter; turns a greedy config into sampling as [`GenerationConfig::with_temperature`]
    /// does.
    #[must_use]
    pub fn with_top_p(self, top_p: f32) -> Self {
        self.sampled(|_, _, p| *p = top_p)
    }

    /// CTRL repetition penalty (1.0 = off).
    #[must_use]
    pub fn with_repetition_penalty(mut self, penalty: f32) -> Self {
        self.repetition_penalty = penalty;
        self
    }

    /// The ids a row stops on: one id (`Some(id)`, `[id]`), several, or none.
    #[must_use]
    pub fn with_eos(mut self, eos: impl IntoIterator<Item = u32>) -> Self {
        self.eos_token_ids = eos.into_iter().collect();
        self
    }

    /// The id that fills left padding and the tail of stopped rows.
    #[must_use]
    pub fn with_pad(mut self, pad_token_id: u32) -> Self {
        self.pad_token_id = pad_token_id;
        self
    }

    /// The seed of the sampling noise (a training loop passes its iteration, so that every
    /// batch draws fresh samples and a resumed run draws the same ones).
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The global index of the batch's first prompt ([`GenerationConfig::first_row`]).
    #[must_use]
    pub fn with_first_row(mut self, first_row: u64) -> Self {
        self.first_row = first_row;
        self
    }

    /// Token-id sequences that end a row besides EOS (HF `stop_strings`, already encoded).
    #[must_use]
    pub fn with_stop_sequences(mut self, stops: impl IntoIterator<Item = Vec<u32>>) -> Self {
        self.stop_sequences = stops.into_iter().collect();
        self
    }

    /// Sampling with `(temperature, top_k, top_p)` as `set` leaves them, starting from the
    /// current ones (greedy decoding's: 1.0, no top-k, no top-p).
    fn sampled(self, set: impl FnOnce(&mut f32, &mut usize, &mut f32)) -> Self {
        let (mut temperature, mut top_k, mut top_p) = match self.sampling {
            Sampling::Greedy => (1.0, 0, 1.0),
            Sampling::Sample {
                temperature,
                top_k,
                top_p,
            } => (temperature, top_k, top_p),
        };
        set(&mut temperature, &mut top_k, &mut top_p);
        self.with_sampling(Sampling::Sample {
            temperature,
            top_k,
            top_p,
        })
    }
}

impl GenerationConfig {
    /// Whether `generated` (a row's new tokens so far) ends with one of
    /// [`GenerationConfig::stop_sequences`].
    pub fn ends_with_stop(&self, generated: &[u32]) -> bool {
        self.stop_sequences
            .iter()
            .any(|s| !s.is_empty() && generated.ends_with(s))
    }

    /// Whether `token` ends a row.
    pub fn is_eos(&self, token: u32) -> bool {
        self.eos_token_ids.contains(&token)
    }

    /// Greedy decoding with no penalty; `eos` is one id (`Some(id)`), none, or a list.
    pub fn greedy(
        max_new_tokens: usize,
        eos: impl IntoIterator<Item = u32>,
        pad_token_id: u32,
    ) -> Self {
        Self::default()
            .with_sampling(Sampling::Greedy)
            .with_max_new_tokens(max_new_tokens)
            .with_eos(eos)
            .with_pad(pad_token_id)
    }

    /// Checks the numeric fields (HF raises on the same conditions).
    pub fn validate(&self) -> Result<()> {
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return Err(ModelError::Input(format!(
                "repetition_penalty must be a positive number, got {}",
                self.repetition_penalty
            )));
        }
        if let Sampling::Sample {
            temperature, top_p, ..
        } = self.sampling
        {
            if !(temperature.is_finite() && temperature > 0.0) {
                return Err(ModelError::Input(format!(
                    "temperature must be a positive number, got {temperature}"
                )));
            }
            if !(top_p > 0.0 && top_p <= 1.0) {
                return Err(ModelError::Input(format!(
                    "top_p must be in (0, 1], got {top_p}"
                )));
            }
        }
        Ok(())
    }
}

/// CTRL repetition penalty over `[B, V]` logits: where `seen[b, v]`, a negative logit is
/// multiplied by `penalty` and a non-negative one divided by it (HF
/// `RepetitionPenaltyLogitsProcessor`: `torch.where(score < 0, score * p, score / p)`).
pub fn apply_repetition_penalty(
    logits: Tensor<2>,
    seen: Tensor<2, Bool>,
    penalty: f32,
) -> Tensor<2> {
    if penalty == 1.0 {
        return logits;
    }
    let negative = logits.clone().lower_elem(0.0);
    let penalised = logits
        .clone()
        .mul_scalar(penalty)
        .mask_where(negative.bool_not(), logits.clone().div_scalar(penalty));
    logits.mask_where(seen, penalised)
}

/// HF `TemperatureLogitsWarper`: `logits / temperature`.
pub fn apply_temperature(logits: Tensor<2>, temperature: f32) -> Tensor<2> {
    if temperature == 1.0 {
        logits
    } else {
        logits.div_scalar(temperature)
    }
}

/// HF `TopKLogitsWarper` (with `min_tokens_to_keep = 1`): every logit strictly below the k-th
/// largest of its row becomes `-inf`; ties with the k-th value survive. `k = 0` or `k ≥ V`
/// leaves the logits unchanged.
pub fn top_k_filter(logits: Tensor<2>, k: usize) -> Tensor<2> {
    let [_, vocab] = logits.dims();
    if k == 0 || k >= vocab {
        return logits;
    }
    let kth = logits.clone().topk(k, 1).narrow(1, k - 1, 1); // [B, 1]
    let remove = logits.clone().lower(kth.expand(logits.dims()));
    logits.mask_fill(remove, f32::NEG_INFINITY)
}

/// HF `TopPLogitsWarper` (with `min_tokens_to_keep = 1`): sort ascending, remove the tokens
/// whose cumulative probability is `≤ 1 - top_p`, never the most likely one. What survives is
/// the smallest set of most-likely tokens whose total probability is `≥ top_p`.
pub fn top_p_filter(logits: Tensor<2>, top_p: f32) -> Tensor<2> {
    if top_p >= 1.0 {
        return logits;
    }
    let [batch, vocab] = logits.dims();
    let device = logits.device();
    let (sorted, order) = logits.clone().sort_with_indices(1);
    let cumulative = softmax(sorted, 1).cumsum(1);
    let remove_sorted = cumulative
        .lower_equal_elem(1.0 - top_p)
        .float()
        // the last (largest) sorted position is always kept
        .slice_fill([0..batch, vocab - 1..vocab], 0.0);
    // Undo the sort: `order` is a permutation of each row, so scatter-add into zeros puts every
    // flag back at its token id exactly once.
    let remove = Tensor::<2>::zeros([batch, vocab], &device)
        .scatter(1, order, remove_sorted, IndexingUpdateOp::Add)
        .greater_elem(0.5);
    logits.mask_fill(remove, f32::NEG_INFINITY)
}

/// HF `MinNewTokensLengthLogitsProcessor`: while fewer than [`GenerationConfig::min_new_tokens`]
/// tokens have been generated (`generated`), EOS cannot be drawn.
pub fn suppress_early_eos(
    logits: Tensor<2>,
    generated: usize,
    cfg: &GenerationConfig,
) -> Tensor<2> {
    if generated >= cfg.min_new_tokens {
        return logits;
    }
    let [batch, vocab] = logits.dims();
    cfg.eos_token_ids
        .iter()
        .map(|&eos| eos as usize)
        .filter(|&eos| eos < vocab)
        .fold(logits, |l, eos| {
            l.slice_fill([0..batch, eos..eos + 1], f32::NEG_INFINITY)
        })
}

/// The whole HF processor chain of one step for `cfg.sampling`: repetition penalty (when `seen`
/// is given), then for sampling temperature, top-k and top-p. The result is the logits whose
/// softmax is the distribution the next token is drawn from (greedy: whose argmax is taken).
pub fn process_logits(
    logits: Tensor<2>,
    seen: Option<Tensor<2, Bool>>,
    cfg: &GenerationConfig,
) -> Tensor<2> {
    let logits = match seen {
        Some(seen) => apply_repetition_penalty(logits, seen, cfg.repetition_penalty),
        None => logits,
    };
    match cfg.sampling {
        Sampling::Greedy => logits,
        Sampling::Sample {
            temperature,
            top_k,
            top_p,
        } => {
            let logits = apply_temperature(logits, temperature);
            let logits = top_k_filter(logits, top_k);
            top_p_filter(logits, top_p)
        }
    }
}

/// Token ids chosen for one step and their log-probabilities under the processed distribution.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub tokens: Vec<u32>,
    pub logprobs: Vec<f32>,
}

/// The seed of the random stream of the prompt with global index `row` in a generation seeded
/// with `seed` (SplitMix64 finaliser over both).
pub fn row_seed(seed: u64, row: u64) -> u64 {
    let mut h: u64 = 0x9E37_79B9_7F4A_7C15;
    for p in [seed, row] {
        h ^= p.wrapping_add(0x9E37_79B9_7F4A_7C15);
        h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h ^= h >> 31;
        h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
        h ^= h >> 29;
    }
    h
}

/// Picks the next token of every row from processed logits, holding one seeded RNG per row
/// between steps so that a whole generation is reproducible from [`GenerationConfig::seed`]
/// and each row's draws depend only on its global index ([`GenerationConfig::first_row`] + r).
#[derive(Debug, Clone)]
pub struct TokenChooser {
    sampling: Sampling,
    seed: u64,
    first_row: u64,
    rngs: Vec<StdRng>,
}

impl TokenChooser {
    pub fn new(cfg: &GenerationConfig) -> Self {
        Self {
            sampling: cfg.sampling,
            seed: cfg.seed,
            first_row: cfg.first_row,
            rngs: Vec::new(),
        }
    }

    /// Greedy: argmax per row. Sampling: inverse-CDF draw per row with one host uniform each —
    /// on the device, `idx = #{v : cdf[v] ≤ u·cdf[V-1]}`, which never lands on a zero-probability
    /// token (the first `v` whose cdf exceeds the target has positive mass); it is then clamped
    /// to the last positive-mass token to guard against float rounding at the top end.
    /// Log-probs are `log_softmax(processed)[token]`.
    pub fn choose(&mut self, processed: Tensor<2>) -> Result<Choice> {
        let rows: Vec<usize> = (0..processed.dims()[0]).collect();
        self.choose_rows(processed, &rows)
    }

    /// [`TokenChooser::choose`] for a batch whose row `i` is row `rows[i]` of the first call
    /// (a generation that dropped its finished rows): each row keeps drawing from its own stream.
    pub fn choose_rows(&mut self, processed: Tensor<2>, rows: &[usize]) -> Result<Choice> {
        let [batch, vocab] = processed.dims();
        if rows.len() != batch {
            return Err(ModelError::Input(format!(
                "{} row indices for a batch of {batch} rows",
                rows.len()
            )));
        }
        let device = processed.device();
        let logprobs_all = log_softmax(processed.clone());
        let idx: Tensor<2, Int> = match self.sampling {
            Sampling::Greedy => processed.argmax(1),
            Sampling::Sample { .. } => {
                let probs = logprobs_all.clone().exp();
                let cdf = probs.clone().cumsum(1);
                let total = cdf.clone().narrow(1, vocab - 1, 1); // [B, 1]
                let needed = rows.iter().max().map_or(0, |&r| r + 1);
                for r in self.rngs.len()..needed {
                    let seed = row_seed(self.seed, self.first_row + r as u64);
                    self.rngs.push(StdRng::seed_from_u64(seed));
                }
                let uniforms: Vec<f32> =
                    rows.iter().map(|&r| self.rngs[r].random::<f32>()).collect();
                let u = Tensor::<2>::from_data(TensorData::new(uniforms, [batch, 1]), &device);
                let target = total.mul(u);
                let count = cdf
                    .lower_equal(target.expand([batch, vocab]))
                    .int()
                    .sum_dim(1); // [B, 1]
                let positions = Tensor::<1, Int>::arange(0..vocab as i64, &device)
                    .unsqueeze::<2>()
                    .expand([batch, vocab]);
                let last_positive = positions
                    .mask_fill(probs.lower_equal_elem(0.0), 0)
                    .max_dim(1);
                count.min_pair(last_positive)
            }
        };
        let logprobs = logprobs_all.gather(1, idx.clone());
        let tokens = read_ints(idx)?;
        let logprobs = read_floats(logprobs)?;
        Ok(Choice { tokens, logprobs })
    }
}

/// Reads an Int tensor back as `u32` token ids.
pub(crate) fn read_ints<const D: usize>(t: Tensor<D, Int>) -> Result<Vec<u32>> {
    let v = t
        .try_into_vec_as::<i64>()
        .map_err(|e| ModelError::Input(format!("reading token ids from the device: {e:?}")))?;
    Ok(v.into_iter().map(|x| x as u32).collect())
}

/// Reads a float tensor back as `f32`.
pub(crate) fn read_floats<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>> {
    t.try_into_vec_as::<f32>()
        .map_err(|e| ModelError::Input(format!("reading values from the device: {e:?}")))
}

/// A `[B, V]` mask with `true` at `(b, v)` for every id `v` in `ids[b]` — the "already in the
/// sequence" set of the repetition penalty. Ids outside the vocabulary are ignored.
pub fn presence_mask(ids: &[Vec<u32>], vocab: usize, device: &Device) -> Tensor<2, Bool> {
    let mut flags = vec![false; ids.len() * vocab];
    for (b, row) in ids.iter().enumerate() {
        for &v in row {
            if (v as usize) < vocab {
                flags[b * vocab + v as usize] = true;
            }
        }
    }
    Tensor::from_data(TensorData::new(flags, [ids.len(), vocab]), device)
}

#[cfg(test)]
mod tests {
    use super::{DEFAULT_MAX_NEW_TOKENS, GenerationConfig, Sampling};
    use crate::LmTokenizer;

    #[test]
    fn default_is_trls_pure_sampling_with_nothing_model_specific() {
        let c = GenerationConfig::default();
        assert_eq!(
            c.sampling,
            Sampling::Sample {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0
            }
        );
        assert_eq!(c.max_new_tokens, DEFAULT_MAX_NEW_TOKENS);
        assert_eq!(c.repetition_penalty, 1.0);
        assert!(c.eos_token_ids.is_empty() && c.stop_sequences.is_empty());
        assert_eq!((c.pad_token_id, c.seed, c.first_row), (0, 0, 0));
        assert_eq!(c.min_new_tokens, 0);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn builders_set_exactly_their_field() {
        let c = GenerationConfig::default()
            .with_max_new_tokens(7)
            .with_min_new_tokens(2)
            .with_repetition_penalty(1.3)
            .with_eos(Some(5))
            .with_pad(9)
            .with_seed(11)
            .with_first_row(40)
            .with_stop_sequences([vec![1, 2], vec![3]]);
        let by_hand = GenerationConfig {
            sampling: Sampling::pure(),
            max_new_tokens: 7,
            repetition_penalty: 1.3,
            eos_token_ids: vec![5],
            pad_token_id: 9,
            seed: 11,
            first_row: 40,
            stop_sequences: vec![vec![1, 2], vec![3]],
            min_new_tokens: 2,
        };
        assert_eq!(c, by_hand);
        assert_eq!(
            GenerationConfig::greedy(4, [1, 2], 3),
            GenerationConfig {
                sampling: Sampling::Greedy,
                max_new_tokens: 4,
                eos_token_ids: vec![1, 2],
                pad_token_id: 3,
                ..GenerationConfig::default()
            }
        );
    }

    #[test]
    fn sampling_settings_compose_and_leave_greedy_for_sampling() {
        let c = GenerationConfig::default()
            .with_top_k(50)
            .with_temperature(0.7)
            .with_top_p(0.9);
        let want = Sampling::Sample {
            temperature: 0.7,
            top_k: 50,
            top_p: 0.9,
        };
        assert_eq!(c.sampling, want);
        let from_greedy = GenerationConfig::greedy(4, None, 0).with_temperature(0.5);
        assert_eq!(
            from_greedy.sampling,
            Sampling::Sample {
                temperature: 0.5,
                top_k: 0,
                top_p: 1.0
            }
        );
        assert_eq!(c.with_sampling(Sampling::Greedy).sampling, Sampling::Greedy);
    }

    #[test]
    fn for_tokenizer_takes_the_eos_ids_and_the_one_padding_rule() {
        let words = ["<unk>", "<pad>", "</s>", "hello"];
        let tokenizer = |eos, pad| LmTokenizer::word_level(&words, eos, pad).expect("tokenizer");
        let c = GenerationConfig::for_tokenizer(&tokenizer(Some("</s>"), Some("<pad>")));
        assert_eq!((c.eos_token_ids.clone(), c.pad_token_id), (vec![2], 1));
        assert_eq!(
            c,
            GenerationConfig::default().with_eos([2]).with_pad(1),
            "nothing else differs from the default"
        );
        // No padding token: EOS pads, as TRL's GPT-2 scripts set it.
        let c = GenerationConfig::for_tokenizer(&tokenizer(Some("</s>"), None));
        assert_eq!((c.eos_token_ids, c.pad_token_id), (vec![2], 2));
        // Neither: no early stop, and 0 pads.
        let c = GenerationConfig::for_tokenizer(&tokenizer(None, None));
        assert_eq!((c.eos_token_ids, c.pad_token_id), (vec![], 0));
    }
}
