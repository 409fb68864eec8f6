//! Sampling a batch of responses in chunks with a progress bar, and the loop's spinners.
use indicatif::{ProgressBar, ProgressStyle};
use lmrl_models::GenerationConfig;
use lmrl_rl::Learner;

use crate::model::TrainModel;

/// Samples responses to `prompts` in chunks of `chunk_size`. Prompt `i` is row
/// `base.first_row + i` of the sampler's per-row streams whatever chunk it falls in, so the
/// result depends only on the arguments (exact resume) and not on the chunk size or on how a
/// batch is split across data-parallel ranks.
pub fn generate_chunked<M: TrainModel>(
    learner: &dyn Learner<M>,
    prompts: &[Vec<u32>],
    base: &GenerationConfig,
    chunk_size: usize,
    what: &str,
) -> lmrl_rl::Result<Vec<Vec<u32>>> {
    generate_rows(learner, prompts, base, chunk_size, what, true)
}

pub(crate) fn generate_rows<M: TrainModel>(
    learner: &dyn Learner<M>,
    prompts: &[Vec<u32>],
    base: &GenerationConfig,
    chunk_size: usize,
    what: &str,
    show: bool,
) -> lmrl_rl::Result<Vec<Vec<u32>>> {
    let bar = if show {
        progress_bar(prompts.len(), what.to_string())
    } else {
        ProgressBar::hidden()
    };
    let mut out = Vec::with_capacity(prompts.len());
    let size = chunk_size.max(1);
    let chunks: Vec<(&[Vec<u32>], GenerationConfig)> = prompts
        .chunks(size)
        .enumerate()
        .map(|(k, chunk)| {
            let cfg = GenerationConfig {
                first_row: base.first_row + (k * size) as u64,
                ..base.clone()
            };
            (chunk, cfg)
        })
        .collect();
    for group in chunks.chunks(CONCURRENT_CHUNKS) {
        for g in learner.generate_chunks(group)? {
            bar.inc(g.tokens.len() as u64);
            out.extend(g.tokens);
        }
    }
    bar.finish_and_clear();
    Ok(out)
}

/// Generation chunks handed to the learner at once ([`Learner::generate_chunks`] runs them
/// concurrently): two overlap one chunk's single-threaded steps with the other's products on
/// two cores; more would only hold more KV caches at once.
const CONCURRENT_CHUNKS: usize = 2;

fn progress_bar(len: usize, what: String) -> ProgressBar {
    let b = ProgressBar::new(len as u64);
    b.set_style(
        ProgressStyle::with_template("{msg:>22} [{bar:30}] {pos}/{len} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    b.set_message(what);
    b
}

pub(crate) fn spinner(what: String) -> ProgressBar {
    let b = ProgressBar::new_spinner();
    b.set_message(what);
    b.enable_steady_tick(std::time::Duration::from_millis(200));
    b
}
