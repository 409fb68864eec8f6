//! Reusing the crates with your own model and reward: a causal LM defined here (not one of
//! `lmrl-models`' architectures) and a reward defined here, trained with PPO and then with CORY
//! on the CPU in well under a minute.
//!
//! `cargo run --release -p lmrl-rl --example custom_model`
//!
//! The model is a one-layer transformer over a 16-token vocabulary. Each prompt carries its own
//! context — a "lucky" token — and the reward of a response is the fraction of its tokens equal
//! to that prompt's lucky token. Implementing `lmrl_models::CausalLm` (the trunk and the
//! vocabulary head, with a KV cache) is all it takes for generation, scoring, the value head,
//! `PpoAgent` and `CoryTrainer` to work with it.
use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::gelu;
use burn::tensor::{Device, Int, Tensor};
use lmrl_models::attention::{attend, attention_bias, split_heads};
use lmrl_models::{CausalLm, GenerationConfig, KvCache, LmWithValueHead, ValueHeadInit};
use lmrl_rewards::{Reward, RewardError, Sample};
use lmrl_rl::{CoryConfig, CoryEnv, CoryTrainer, EnvError, PpoAgent, PpoConfig, Prompt};

const VOCAB: usize = 16;
const WIDTH: usize = 32;
const HEADS: usize = 2;
/// Separates the pioneer's answer in the observer's prompt.
const SEP: u32 = 15;
const ITERATIONS: usize = 30;

/// A one-layer pre-norm transformer with learned positions and an untied head.
#[derive(Module, Debug)]
struct TinyLm {
    tokens: Embedding,
    positions: Embedding,
    norm1: LayerNorm,
    qkv: Linear,
    out: Linear,
    norm2: LayerNorm,
    mlp_in: Linear,
    mlp_out: Linear,
    norm_f: LayerNorm,
    head: Linear,
}

impl TinyLm {
    fn new(device: &Device) -> Self {
        let lin = |i, o| LinearConfig::new(i, o).init(device);
        let norm = || LayerNormConfig::new(WIDTH).init(device);
        Self {
            tokens: EmbeddingConfig::new(VOCAB, WIDTH).init(device),
            positions: EmbeddingConfig::new(64, WIDTH).init(device),
            norm1: norm(),
            qkv: lin(WIDTH, 3 * WIDTH),
            out: lin(WIDTH, WIDTH),
            norm2: norm(),
            mlp_in: lin(WIDTH, 4 * WIDTH),
            mlp_out: lin(4 * WIDTH, WIDTH),
            norm_f: norm(),
            head: lin(WIDTH, VOCAB),
        }
    }
}

impl CausalLm for TinyLm {
    fn hidden_states(
        &self,
        input_ids: Tensor<2, Int>,
        position_ids: Tensor<2, Int>,
        attention_mask: Tensor<2, Int>,
        cache: Option<&mut KvCache>,
    ) -> Tensor<3> {
        let past = cache.as_ref().map_or(0, |c| c.len());
        let bias = attention_bias(attention_mask, past, input_ids.dims()[1]);
        let x = self.tokens.forward(input_ids) + self.positions.forward(position_ids);
        let mut qkv = self
            .qkv
            .forward(self.norm1.forward(x.clone()))
            .chunk(3, 2)
            .into_iter();
        let mut next = || split_heads(qkv.next().expect("three chunks"), HEADS);
        let (q, mut k, mut v) = (next(), next(), next());
        if let Some(c) = cache {
            (k, v) = c.append(0, k, v);
        }
        let x = x + self.out.forward(attend(q, k, v, bias));
        let m = self
            .mlp_out
            .forward(gelu(self.mlp_in.forward(self.norm2.forward(x.clone()))));
        self.norm_f.forward(x + m)
    }

    fn lm_head(&self, hidden: Tensor<2>) -> Tensor<2> {
        self.head.forward(hidden)
    }

    fn vocab_size(&self) -> usize {
        VOCAB
    }

    fn hidden_size(&self) -> usize {
        WIDTH
    }

    fn max_positions(&self) -> usize {
        64
    }
}

/// The reward: the fraction of the response's tokens equal to the prompt's lucky token (the
/// sample's context). Texts are space-separated token ids.
struct LuckyToken;

impl Reward<u32> for LuckyToken {
    fn name(&self) -> &str {
        "lucky-token"
    }

    fn score(&self, samples: &[Sample<'_, u32>]) -> Result<Vec<f32>, RewardError> {
        Ok(samples
            .iter()
            .map(|s| {
                let ids = parse(s.response);
                let hits = ids.iter().filter(|&&t| t == *s.context).count();
                hits as f32 / ids.len().max(1) as f32
            })
            .collect())
    }
}

fn text(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
}

fn parse(text: &str) -> Vec<u32> {
    text.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// CORY's text side: ids ↔ text, and the observer's prompt = query, SEP, pioneer's answer.
struct Env;

impl CoryEnv<TinyLm, u32> for Env {
    fn decode(&self, ids: &[u32]) -> Result<String, EnvError> {
        Ok(text(ids))
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, EnvError> {
        Ok(parse(text))
    }

    fn observer_prompt(&self, prompt: &Prompt<u32>, pioneer: &str) -> Result<String, EnvError> {
        Ok(format!("{} {SEP} {pioneer}", prompt.text))
    }
}

/// 16 prompts: a lucky token (its context) followed by two filler tokens.
fn prompts(iteration: usize) -> Vec<Prompt<u32>> {
    (0..16)
        .map(|i| {
            let lucky = ((i + iteration) % 4) as u32 + 1;
            let ids = vec![lucky, 9, 10];
            Prompt {
                text: text(&ids),
                ids,
                context: lucky,
            }
        })
        .collect()
}

fn generation(iteration: usize) -> GenerationConfig {
    GenerationConfig::default()
        .with_max_new_tokens(6)
        .with_seed(iteration as u64)
}

fn ppo_config() -> PpoConfig {
    PpoConfig {
        learning_rate: 3e-3,
        batch_size: 16,
        mini_batch_size: 8,
        ppo_epochs: 2,
        init_kl_coef: 0.05,
        ..PpoConfig::default()
    }
}

/// A PPO learner on a copy of `base`, with a fresh value head.
fn learner(base: &TinyLm, device: &Device) -> Result<PpoAgent<TinyLm>, lmrl_rl::RlError> {
    let model = LmWithValueHead::new(base.clone(), ValueHeadInit::Zeros, device);
    PpoAgent::new(model, ppo_config(), device)
}

fn mean(x: &[f32]) -> f32 {
    x.iter().sum::<f32>() / x.len().max(1) as f32
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::flex();
    device.seed(0);
    let train = device.clone().autodiff();
    // The "pretrained" model every copy starts from, and its frozen copy for the KL penalty.
    let base = TinyLm::new(&train);
    let reference = base.valid();

    println!("PPO on TinyLm, reward = fraction of the prompt's lucky token");
    let mut agent = learner(&base, &train)?;
    let reward = LuckyToken;
    for it in 0..ITERATIONS {
        let batch = prompts(it);
        let queries: Vec<Vec<u32>> = batch.iter().map(|p| p.ids.clone()).collect();
        let responses = agent.generate(&queries, &generation(it))?.tokens;
        let texts: Vec<String> = responses.iter().map(|y| text(y)).collect();
        let samples: Vec<Sample<'_, u32>> = batch
            .iter()
            .zip(&texts)
            .map(|(p, y)| Sample::new(&p.text, y, &p.context))
            .collect();
        let scores = reward.score(&samples)?;
        let stats = agent.step(&queries, &responses, &scores, &reference)?;
        println!(
            "ppo  it {it:>2}: reward {:.3}  kl {:.3}",
            mean(&scores),
            stats.objective_kl
        );
    }

    println!("CORY on TinyLm (pioneer and observer, roles exchanged every 5 iterations)");
    let cory = CoryConfig::default();
    let mut trainer = CoryTrainer::new(
        learner(&base, &train)?,
        learner(&base, &train)?,
        reference,
        cory,
    )?;
    for it in 0..ITERATIONS {
        let s = trainer.iteration(&prompts(it), &generation(it), &mut Env, &LuckyToken)?;
        let [l1, l2] = &s.agents;
        println!(
            "cory it {it:>2}: llm1 ({:?}) reward {:.3} kl {:.3} | llm2 ({:?}) reward {:.3} kl {:.3}",
            l1.role, l1.task_reward, l1.kl, l2.role, l2.task_reward, l2.kl
        );
    }
    Ok(())
}
