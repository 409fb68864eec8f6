//! Key/value cache for incremental decoding (HF `past_key_values`).
use burn::tensor::{Int, Tensor};

/// Keys and values of one layer, `[B, kv_heads, T, head_dim]` each (after RoPE for Llama).
pub type LayerKv = (Tensor<4>, Tensor<4>);

/// Per-layer keys and values of every position processed so far.
///
/// The forward pass appends the new positions of each layer; [`KvCache::len`] is the number of
/// cached positions, which the next forward's attention mask must cover (`attention_mask` is
/// `[B, len() + S]`).
///
/// Each layer's keys and values live in buffers with room beyond `len()` (`[B, kv_heads,
/// capacity, head_dim]`), written in place: appending one token to a `cat`-grown cache copies
/// every cached position of every layer, which at a few hundred positions moves as many bytes
/// per decoding step as the weights. Capacity grows by doubling (a copy every doubling only),
/// or is set up front with [`KvCache::with_headroom`] when the number of new tokens is known.
/// Attention reads `narrow`ed views of the buffers.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    layers: Vec<Option<Slot>>,
    /// Positions reserved beyond the first append of each layer.
    headroom: usize,
}

/// One layer's buffers and how many positions of them are filled.
#[derive(Debug, Clone)]
struct Slot {
    k: Tensor<4>,
    v: Tensor<4>,
    len: usize,
}

impl Slot {
    fn capacity(&self) -> usize {
        self.k.dims()[2]
    }

    fn views(&self) -> LayerKv {
        (
            self.k.clone().narrow(2, 0, self.len),
            self.v.clone().narrow(2, 0, self.len),
        )
    }
}

impl KvCache {
    /// An empty cache for a model with `num_layers` layers.
    pub fn new(num_layers: usize) -> Self {
        Self {
            layers: vec![None; num_layers],
            headroom: 0,
        }
    }

    /// An empty cache whose layers keep room for `positions` more positions after their first
    /// append (generation: the prompt, then at most `max_new_tokens` one at a time).
    pub fn with_headroom(positions: usize) -> Self {
        Self {
            layers: Vec::new(),
            headroom: positions,
        }
    }

    /// Number of cached positions (0 when empty).
    pub fn len(&self) -> usize {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .map_or(0, |slot| slot.len)
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
            .map(|slot| slot.k.dims()[0])
    }

    /// Cached keys and values of `layer` (`[B, kv_heads, len(), head_dim]` each), if any.
    pub fn layer(&self, layer: usize) -> Option<LayerKv> {
        self.layers
            .get(layer)
            .and_then(|l| l.as_ref())
            .map(Slot::views)
    }

    /// Appends the new keys/values of `layer` (`[B, kv_heads, S, head_dim]`) along the time
    /// axis and returns all cached ones.
    pub fn append(&mut self, layer: usize, k: Tensor<4>, v: Tensor<4>) -> LayerKv {
        if self.layers.len() <= layer {
            self.layers.resize(layer + 1, None);
        }
        let s = k.dims()[2];
        let slot = match self.layers[layer].take() {
            None => Slot {
                k: with_room(k, self.headroom),
                v: with_room(v, self.headroom),
                len: s,
            },
            Some(slot) => slot.appended(k, v),
        };
        let views = slot.views();
        self.layers[layer] = Some(slot);
        views
    }

    /// Keeps only the batch rows `rows` (e.g. to drop finished sequences), in that order.
    pub fn select_rows(&mut self, rows: Tensor<1, Int>) {
        for slot in self.layers.iter_mut().flatten() {
            slot.k = slot.k.clone().select(0, rows.clone());
            slot.v = slot.v.clone().select(0, rows.clone());
        }
    }

    /// Forgets every cached position.
    pub fn clear(&mut self) {
        self.layers.iter_mut().for_each(|l| *l = None);
    }
}

impl Slot {
    /// Writes `k`, `v` at positions `len..len + S`, in place when the buffers have room (and
    /// no other tensor shares them: burn copies otherwise, so a view taken earlier never sees
    /// the write), else into buffers of twice the needed capacity.
    fn appended(self, k: Tensor<4>, v: Tensor<4>) -> Slot {
        let s = k.dims()[2];
        let len = self.len + s;
        let (k_buf, v_buf) = if len <= self.capacity() {
            (self.k, self.v)
        } else {
            let room = len.max(2 * self.capacity()) - self.len;
            let (pk, pv) = self.views();
            (with_room(pk, room), with_room(pv, room))
        };
        let at = [
            0..k.dims()[0],
            0..k.dims()[1],
            self.len..len,
            0..k.dims()[3],
        ];
        Slot {
            k: k_buf.slice_assign(at.clone(), k),
            v: v_buf.slice_assign(at, v),
            len,
        }
    }
}

/// `x` (`[B, H, T, D]`) followed by `room` zero positions along the time axis.
fn with_room(x: Tensor<4>, room: usize) -> Tensor<4> {
    if room == 0 {
        return x;
    }
    let [b, h, _, d] = x.dims();
    let zeros = Tensor::zeros([b, h, room, d], &x.device());
    Tensor::cat(vec![x, zeros], 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, TensorData};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Distinct values for every call, made on the host: the device's RNG is one per process,
    /// and drawing from it here would land between another test's seed and its draws.
    fn kv(t: usize, device: &Device) -> (Tensor<4>, Tensor<4>) {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = 2 * 3 * t * 4;
        let r = || {
            let base = NEXT.fetch_add(n, Ordering::Relaxed);
            let v: Vec<f32> = (base..base + n).map(|i| i as f32 * 1e-3).collect();
            Tensor::from_data(TensorData::new(v, [2, 3, t, 4]), device)
        };
        (r(), r())
    }

    fn assert_same(a: &Tensor<4>, b: &Tensor<4>) {
        assert_eq!(a.dims(), b.dims());
        let (a, b) = (
            a.to_data().try_to_vec::<f32>().unwrap(),
            b.to_data().try_to_vec::<f32>().unwrap(),
        );
        assert_eq!(a, b);
    }

    /// Appends of 5, 1, 1, 7, 1 positions (through in-place writes and growth, with and
    /// without headroom) hold exactly the concatenation of what was appended; a clone taken
    /// midway keeps its own contents; `select_rows` picks rows of every layer.
    #[test]
    fn appends_equal_the_concatenation_and_clones_do_not_share_writes() {
        let device = Device::flex();
        for headroom in [0, 3, 20] {
            let mut cache = KvCache::with_headroom(headroom);
            let (mut all_k, mut all_v) = kv(0, &device);
            let mut snapshot = None;
            for (step, t) in [5, 1, 1, 7, 1].into_iter().enumerate() {
                let (k, v) = kv(t, &device);
                all_k = Tensor::cat(vec![all_k, k.clone()], 2);
                all_v = Tensor::cat(vec![all_v, v.clone()], 2);
                let (got_k, got_v) = cache.append(1, k, v);
                assert_same(&got_k, &all_k);
                assert_same(&got_v, &all_v);
                if step == 2 {
                    snapshot = Some((cache.clone(), all_k.clone()));
                }
            }
            let (old, old_k) = snapshot.unwrap();
            assert_same(&old.layer(1).unwrap().0, &old_k);
            let rows = Tensor::<1, Int>::from_data(TensorData::new(vec![1i64, 1, 0], [3]), &device);
            cache.select_rows(rows.clone());
            assert_same(&cache.layer(1).unwrap().1, &all_v.select(0, rows));
        }
    }
}
