//! A numeric stand-in for a text task, shared by the CORY tests: texts are space-separated
//! ids, the observer template wraps the query and the pioneer's answer in marker ids, and the
//! reward is the fraction of response ids below 500.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

use lmrl_models::AutoLm;
use lmrl_rewards::{Reward, RewardError, Sample};
use lmrl_rl::{CoryEnv, EnvError, Prompt};

pub struct MockEnv;

pub fn ids_text(ids: &[u32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

impl CoryEnv<AutoLm, ()> for MockEnv {
    fn decode(&self, ids: &[u32]) -> Result<String, EnvError> {
        Ok(ids_text(ids))
    }
    fn encode(&self, text: &str) -> Result<Vec<u32>, EnvError> {
        text.split_whitespace()
            .map(|w| w.parse::<u32>().map_err(|e| e.into()))
            .collect()
    }
    fn observer_prompt(&self, p: &Prompt<()>, y: &str) -> Result<String, EnvError> {
        let q = &p.text;
        Ok(format!("1 {q} {y} 2 {q}"))
    }
}

/// The fraction of response ids below 500, counting its calls.
#[derive(Default)]
pub struct LowIds {
    pub calls: AtomicUsize,
}

impl LowIds {
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Reward<()> for LowIds {
    fn name(&self) -> &str {
        "low-ids"
    }
    fn score(&self, samples: &[Sample<'_, ()>]) -> Result<Vec<f32>, RewardError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(samples
            .iter()
            .map(|s| {
                let ids: Vec<u32> = s
                    .response
                    .split_whitespace()
                    .filter_map(|w| w.parse().ok())
                    .collect();
                ids.iter().filter(|&&i| i < 500).count() as f32 / ids.len().max(1) as f32
            })
            .collect())
    }
}

pub fn prompts(queries: &[Vec<u32>]) -> Vec<Prompt<()>> {
    queries
        .iter()
        .map(|q| Prompt {
            ids: q.clone(),
            text: ids_text(q),
            context: (),
        })
        .collect()
}

/// The backend the reference-parity tests run on: libtorch when the crate is built with its
/// `tch` feature (`scripts/test-backend.sh tch`), the CPU default otherwise.
pub fn backend_device() -> burn::tensor::Device {
    // burn 0.22 marks burn-tch deprecated in favour of its CubeCL backends; libtorch is still
    // the GPU route this workspace documents, so it is what these tests check.
    #[cfg(feature = "tch")]
    #[allow(deprecated)]
    return burn::tensor::Device::libtorch();
    #[cfg(not(feature = "tch"))]
    burn::tensor::Device::flex()
}
