//! Key/value cache for incremental decoding (HF `past_key_values`).
use burn::tensor::{Int, Tensor};

/// Keys and values of one layer, `[B, kv_heads, T, head_dim]` each (after RoPE for Llama).
pub type LayerKv = (Tensor<4>, Tensor<4>);

/// Per-layer keys and values of every position processed so far.
///
/// The forward pass appends the new positions of each layer in place; [`KvCache::len`] is the
/// number of cached positions, which the next forward's attention mask must cover
/// (`attention_mask` is `[B, len() + S]`).
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    layers: Vec<Option<LayerKv>>,
}

impl KvCache {
    /// An empty cache for a model with `num_layers` layers.
    pub fn new(num_layers: usize) -> Self {
        Self {
            layers: vec![None; num_layers],
        }
    }

    /// Number of cached positions (0 when empty).
    pub fn len(&self) -> usize {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .map_or(0, |(k, _)| k.dims()[2])
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Batch size of the cached tensors, `None` when empty.
    pub fn batch_size(&self) -> Option<usize> {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .map(|(k, _)| k.dims()[0])
    }

    /// Cached keys and values of `layer`, if any.
    pub fn layer(&self, layer: usize) -> Option<&LayerKv> {
        self.layers.get(layer).and_then(|l| l.as_ref())
    }

    /// Appends the new keys/values of `layer` along the time axis and returns the full ones.
    pub fn append(&mut self, layer: usize, k: Tensor<4>, v: Tensor<4>) -> LayerKv {
        if self.layers.len() <= layer {
            self.layers.resize(layer + 1, None);
        }
        let full = match self.layers[layer].take() {
            None => (k, v),
            Some((pk, pv)) => (Tensor::cat(vec![pk, k], 2), Tensor::cat(vec![pv, v], 2)),
        };
        self.layers[layer] = Some(full.clone());
        full
    }

    /// Keeps only the batch rows `rows` (e.g. to drop finished sequences), in that order.
    pub fn select_rows(&mut self, rows: Tensor<1, Int>) {
        for (k, v) in self.layers.iter_mut().flatten() {
            *k = k.clone().select(0, rows.clone());
            *v = v.clone().select(0, rows.clone());
        }
    }

    /// Forgets every cached position.
    pub fn clear(&mut self) {
        self.layers.iter_mut().for_each(|l| *l = None);
    }
}
