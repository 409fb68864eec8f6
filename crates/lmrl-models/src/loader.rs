//! Loading and saving models in Hugging Face layout (and GGUF, through [`crate::gguf`]).
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::tensor::Device;

use crate::auto::AutoLm;
use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use crate::file_write::FileWriter;
use crate::gpt2::Gpt2LmHeadModel;
use crate::llama::LlamaForCausalLm;
use crate::tensors::{RawTensor, TensorMap};

/// Weights file of an HF checkpoint directory.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// Index of a sharded HF checkpoint (`weight_map`: tensor name → shard file).
pub const WEIGHTS_INDEX_FILE: &str = "model.safetensors.index.json";
pub const CONFIG_FILE: &str = "config.json";

/// Loads a causal LM from an HF directory (`config.json` + `model.safetensors`, or a sharded
/// `model.safetensors.index.json`) or from a `.gguf` file.
pub(crate) fn load_causal_lm(path: &Path, device: &Device) -> Result<AutoLm> {
    if is_gguf(path) {
        return load_gguf(path, device);
    }
    let config = ModelConfig::from_file(&path.join(CONFIG_FILE))?;
    let tensors = read_weights(path)?;
    causal_lm_from_tensors(&config, tensors, device)
}

fn is_gguf(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

/// GGUF branch: [`crate::gguf`] turns the file into an HF config and HF-named tensors.
fn load_gguf(path: &Path, device: &Device) -> Result<AutoLm> {
    let (config, tensors, _meta) = crate::gguf::read_gguf(path)?;
    causal_lm_from_tensors(&config, tensors, device)
}

/// Reads `model.safetensors`, or every shard named by `model.safetensors.index.json`.
pub fn read_weights(dir: &Path) -> Result<TensorMap> {
    let single = dir.join(WEIGHTS_FILE);
    let index = dir.join(WEIGHTS_INDEX_FILE);
    if single.exists() || !index.exists() {
        return TensorMap::from_safetensors(&single);
    }
    let mut all = TensorMap::new(&index);
    for shard in shard_files(&index)? {
        let part = TensorMap::from_safetensors(&dir.join(shard))?;
        all.tensors.extend(part.tensors);
    }
    Ok(all)
}

/// The distinct shard files of a sharded checkpoint's index, in first-seen order.
fn shard_files(index: &Path) -> Result<Vec<String>> {
    let bad = |reason: String| ModelError::Format {
        path: index.to_path_buf(),
        format: "safetensors index",
        reason,
    };
    let text = std::fs::read_to_string(index).map_err(|source| ModelError::Io {
        path: index.to_path_buf(),
        source,
    })?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("no `weight_map` object".into()))?;
    let mut files: Vec<String> = Vec::new();
    for f in map.values() {
        let f = f
            .as_str()
            .ok_or_else(|| bad("shard names must be strings".into()))?;
        // Shards live next to the index; a path would let the index read any file.
        if Path::new(f).file_name() != Some(std::ffi::OsStr::new(f)) {
            return Err(bad(format!("shard `{f}` is not a file name")));
        }
        if !files.iter().any(|x| x == f) {
            files.push(f.to_string());
        }
    }
    Ok(files)
}

/// Builds a model from a config and HF-named tensors (checks every name and shape).
///
/// Tensors the model does not use (GPT-2's `attn.bias` buffers, a tied `lm_head.weight`) are
/// ignored.
pub fn causal_lm_from_tensors(
    config: &ModelConfig,
    mut tensors: TensorMap,
    device: &Device,
) -> Result<AutoLm> {
    check_against_weights(config, &tensors)?;
    Ok(match config {
        ModelConfig::Gpt2(c) => {
            AutoLm::Gpt2(Gpt2LmHeadModel::from_tensors(c, &mut tensors, device)?)
        }
        ModelConfig::Llama(c) => {
            AutoLm::Llama(LlamaForCausalLm::from_tensors(c, &mut tensors, device)?)
        }
    })
}

/// Checks the sizes the model is built from against the weights that are there, before
/// anything is allocated from them: a layer count or vocabulary from a corrupt config then
/// gives [`ModelError::WeightsMismatch`] instead of an allocation the weights cannot back.
pub fn check_against_weights(config: &ModelConfig, tensors: &TensorMap) -> Result<()> {
    let mismatch = |field: &str, reason: String| ModelError::WeightsMismatch {
        path: tensors.path.clone(),
        field: field.to_string(),
        reason,
    };
    // Per architecture: the layer-count field, the prefixes of layer tensors, the hidden-size
    // field, and each embedding table with the field that gives its number of rows.
    type Tables<'a> = Vec<(&'a str, &'a str, usize)>;
    let (layers_field, layer_prefixes, hidden_field, embeddings): (&str, &[&str], &str, Tables) =
        match config {
            ModelConfig::Gpt2(c) => (
                "n_layer",
                &["h.", "transformer.h."],
                "n_embd",
                vec![
                    ("vocab_size", "wte.weight", c.vocab_size),
                    ("n_positions", "wpe.weight", c.n_positions),
                ],
            ),
            ModelConfig::Llama(c) => (
                "num_hidden_layers",
                &["model.layers."],
                "hidden_size",
                vec![("vocab_size", "model.embed_tokens.weight", c.vocab_size)],
            ),
        };
    let layers: std::collections::BTreeSet<usize> = tensors
        .tensors
        .keys()
        .filter_map(|k| {
            let rest = layer_prefixes.iter().find_map(|p| k.strip_prefix(p))?;
            rest.split_once('.')?.0.parse().ok()
        })
        .collect();
    let n = config.num_layers();
    if let Some(missing) = (0..n).find(|i| !layers.contains(i)) {
        return Err(mismatch(
            layers_field,
            format!(
                "the config has {n} layers, but there are no tensors for layer {missing} ({} layers found)",
                layers.len()
            ),
        ));
    }
    let hidden = config.hidden_size();
    for (rows_field, name, rows) in embeddings {
        let t = ["", "transformer."]
            .iter()
            .find_map(|p| tensors.tensors.get(&format!("{p}{name}")));
        if let Some(t) = t
            && t.shape != [rows, hidden]
        {
            let field = match t.shape.first() == Some(&rows) {
                true => hidden_field,
                false => rows_field,
            };
            return Err(mismatch(
                field,
                format!(
                    "{rows_field} {rows} and {hidden_field} {hidden} need `{name}` of shape [{rows}, {hidden}], found {:?}",
                    t.shape
                ),
            ));
        }
    }
    Ok(())
}

/// A host f32 tensor viewed as safetensors data.
struct F32View<'a>(&'a RawTensor);

impl safetensors::View for F32View<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        safetensors::Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        &self.0.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&[])
    }
    fn data_len(&self) -> usize {
        self.0.data.len() * 4
    }
}

/// Writes f32 tensors as a safetensors file (metadata `format: pt`, as `transformers` writes),
/// atomically, streamed from the tensors' own bytes (past the page cache in
/// [`crate::WriteMode::Direct`]).
pub fn write_safetensors(path: &Path, tensors: &[(String, RawTensor)]) -> Result<()> {
    let header = safetensors_header(path, tensors)?;
    let order = data_order(path, &header, tensors)?;
    replace_via_tmp(path, |tmp| {
        let mut file = FileWriter::create(tmp)?;
        file.write(&header)?;
        for i in order {
            file.write(&le_bytes(&tensors[i].1.data))?;
        }
        file.finish()
    })
}

/// The file's first bytes: the header's length and the header, as the safetensors crate lays
/// them out (it decides the tensors' order and offsets). The views report their lengths but
/// lend no data, so the crate's serializer returns the header alone.
fn safetensors_header(path: &Path, tensors: &[(String, RawTensor)]) -> Result<Vec<u8>> {
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    let views = tensors.iter().map(|(k, t)| (k.as_str(), F32View(t)));
    safetensors::serialize(views, Some(meta)).map_err(|e| ModelError::Format {
        path: path.to_path_buf(),
        format: "safetensors",
        reason: e.to_string(),
    })
}

/// Indices into `tensors` in the order of their data in the file, checked to tile the data
/// section exactly as the header says.
fn data_order(path: &Path, header: &[u8], tensors: &[(String, RawTensor)]) -> Result<Vec<usize>> {
    #[derive(serde::Deserialize)]
    struct Entry {
        data_offsets: (usize, usize),
    }
    let bad = |reason: String| ModelError::Format {
        path: path.to_path_buf(),
        format: "safetensors",
        reason,
    };
    let json = header.get(8..).unwrap_or_default();
    let mut entries: HashMap<String, serde_json::Value> =
        serde_json::from_slice(json).map_err(|e| bad(format!("header being written: {e}")))?;
    entries.remove("__metadata__");
    let mut placed = Vec::with_capacity(tensors.len());
    for (i, (name, t)) in tensors.iter().enumerate() {
        let entry: Entry = entries
            .remove(name)
            .and_then(|v| serde_json::from_value(v).ok())
            .ok_or_else(|| {
                bad(format!(
                    "no offsets for `{name}` in the header being written"
                ))
            })?;
        placed.push((entry.data_offsets, t.data.len() * 4, i));
    }
    placed.sort_unstable();
    let mut end = 0;
    for ((start, stop), len, i) in &placed {
        if *start != end || stop - start != *len {
            let name = &tensors[*i].0;
            return Err(bad(format!(
                "`{name}` at {start}..{stop} does not follow byte {end}"
            )));
        }
        end = *stop;
    }
    Ok(placed.into_iter().map(|(_, _, i)| i).collect())
}

/// safetensors' little-endian bytes of `data`: on a little-endian host the f32s' own, so a
/// checkpoint's half-gigabyte of weights is written without a copy.
fn le_bytes(data: &[f32]) -> Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        Cow::Borrowed(bytemuck::cast_slice(data))
    } else {
        Cow::Owned(data.iter().flat_map(|x| x.to_le_bytes()).collect())
    }
}

/// Writes `bytes` to `path.tmp` next to `path` ([`crate::write_mode`]), then renames it over
/// `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_parts(path, &[bytes])
}

/// [`write_atomic`] of the concatenation of `parts`, without assembling it in memory: a file
/// made of large buffers that live elsewhere (a container's header, then each tensor's own
/// buffer) is written straight from them.
pub fn write_atomic_parts(path: &Path, parts: &[&[u8]]) -> Result<()> {
    replace_via_tmp(path, |tmp| {
        let mut file = FileWriter::create(tmp)?;
        for part in parts {
            file.write(part)?;
        }
        file.finish()
    })
}

/// `write` fills a temporary sibling of `path`, which is then renamed over `path`, so a reader
/// never sees half a file under the final name.
fn replace_via_tmp(path: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let tmp = tmp_path(path);
    write(&tmp)?;
    std::fs::rename(&tmp, path).map_err(|source| ModelError::Write {
        path: path.to_path_buf(),
        source,
    })
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp{}", std::process::id()));
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tensor with its data, to serialize through the safetensors crate alone.
    struct Full<'a>(&'a RawTensor);

    impl safetensors::View for Full<'_> {
        fn dtype(&self) -> safetensors::Dtype {
            safetensors::Dtype::F32
        }
        fn shape(&self) -> &[usize] {
            &self.0.shape
        }
        fn data(&self) -> Cow<'_, [u8]> {
            le_bytes(&self.0.data)
        }
        fn data_len(&self) -> usize {
            self.0.data.len() * 4
        }
    }

    #[test]
    fn the_file_is_what_the_safetensors_crate_serializes() {
        // Names out of order (the crate sorts them), sizes that leave the file mid-block.
        let tensors: Vec<(String, RawTensor)> =
            [("wte", vec![7, 300]), ("b", vec![3]), ("a.w", vec![2049])]
                .into_iter()
                .map(|(name, shape)| {
                    let n = shape.iter().product::<usize>();
                    let data = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
                    (name.to_string(), RawTensor::new(shape, data))
                })
                .collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("model.safetensors");
        write_safetensors(&path, &tensors).expect("write");
        let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
        let views = tensors.iter().map(|(k, t)| (k.as_str(), Full(t)));
        let expected = safetensors::serialize(views, Some(meta)).expect("serialize");
        assert_eq!(std::fs::read(&path).expect("read back"), expected);
        let names: Vec<_> = std::fs::read_dir(dir.path()).expect("list").collect();
        assert_eq!(
            names.len(),
            1,
            "the temporary file is renamed, not left behind"
        );
    }
}
