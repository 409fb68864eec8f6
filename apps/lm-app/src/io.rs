//! JSON input/output of the `logits` and `generate --input` subcommands.
use std::path::Path;

use anyhow::{Context, Result, bail, ensure};
use burn::tensor::Tensor;
use serde::Deserialize;

/// `{"input_ids": [[..]], "attention_mask": [[..]]}`: a rectangular batch of token ids and its
/// 0/1 mask.
#[derive(Debug, Deserialize)]
pub struct Batch {
    pub input_ids: Vec<Vec<i64>>,
    pub attention_mask: Vec<Vec<i64>>,
}

/// Reads and checks a batch file: non-empty, rectangular, mask shape equal to the ids' shape,
/// mask values 0/1, every row with at least one real token.
pub fn read_batch(path: &Path) -> Result<Batch> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let b: Batch = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: expected {{\"input_ids\": [[int]], \"attention_mask\": [[int]]}}",
            path.display()
        )
    })?;
    let p = path.display();
    ensure!(!b.input_ids.is_empty(), "{p}: input_ids is empty");
    let s = b.input_ids[0].len();
    ensure!(s > 0, "{p}: input_ids rows are empty");
    ensure!(
        b.attention_mask.len() == b.input_ids.len(),
        "{p}: attention_mask has {} rows, input_ids {}",
        b.attention_mask.len(),
        b.input_ids.len()
    );
    for (r, (ids, m)) in b.input_ids.iter().zip(&b.attention_mask).enumerate() {
        ensure!(
            ids.len() == s,
            "{p}: input_ids row {r} has length {}, row 0 has {s}",
            ids.len()
        );
        ensure!(
            m.len() == s,
            "{p}: attention_mask row {r} has length {}, expected {s}",
            m.len()
        );
        if let Some(j) = m.iter().position(|&x| x != 0 && x != 1) {
            bail!("{p}: attention_mask[{r}][{j}] = {} (must be 0 or 1)", m[j]);
        }
        ensure!(
            m.contains(&1),
            "{p}: row {r} has no real token (attention_mask all 0)"
        );
    }
    Ok(b)
}

/// Every id must lie in `0..vocab`; rows must fit in `max_len` positions.
pub fn check_ids(ids: &[Vec<i64>], vocab: usize, max_len: usize) -> Result<()> {
    for (r, row) in ids.iter().enumerate() {
        if let Some((j, &id)) = row
            .iter()
            .enumerate()
            .find(|(_, id)| **id < 0 || **id as usize >= vocab)
        {
            bail!(
                "input_ids[{r}][{j}] = {id} is out of range for the model's vocabulary of {vocab} tokens"
            );
        }
        ensure!(
            row.len() <= max_len,
            "row {r} has {} tokens, more than the model's {max_len} positions",
            row.len()
        );
    }
    Ok(())
}

/// The real tokens (mask 1) of each row, in order — a left-padded prompt without its padding.
/// Call after [`check_ids`] (ids are non-negative).
pub fn real_tokens(b: &Batch) -> Vec<Vec<u32>> {
    b.input_ids
        .iter()
        .zip(&b.attention_mask)
        .map(|(ids, m)| {
            ids.iter()
                .zip(m)
                .filter(|(_, m)| **m == 1)
                .map(|(&t, _)| t as u32)
                .collect()
        })
        .collect()
}

/// A float tensor's values on the host.
pub fn floats<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>> {
    t.try_into_vec_as::<f32>()
        .map_err(|e| anyhow::anyhow!("reading a tensor back from the device: {e:?}"))
}

/// Writes `v` as JSON to `path` (creating parent directories).
pub fn write_json(path: &Path, v: &serde_json::Value) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string(v).context("serialising the result")?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
