//! An optimiser record written as burn's burnpack container, streamed from the moments' own
//! buffers (past the page cache where the program chose `lmrl_models::WriteMode::Direct`).
//!
//! Why: burn writes a record either through the page cache (a SmolLM2-135M copy's 1.08 GB
//! `optimizer.bpk` in 2.9–3.9 s on a 2-core VM, each of its pages freshly handed out) or into
//! one in-memory container (another 1.08 GB of heap). The container is a header, CBOR
//! metadata and each tensor's bytes at a 256-byte-aligned offset, and the moments already lie
//! in memory as those bytes; so the metadata is built here, byte for byte as burn-pack builds
//! it (checked against burn's own container in the tests), and the file is written with
//! [`lmrl_models::write_atomic_parts`] from the buffers themselves. Reading stays burn's
//! `OptimizerRecord::load`.
use std::collections::BTreeMap;
use std::path::Path;

use burn::optim::OptimizerRecord;
use burn_pack::{
    DType, HEADER_SIZE, Header, Reader, Scalar, TENSOR_ALIGNMENT, aligned_data_section_start,
};
use serde::Serialize;

use crate::error::Result;
use crate::optim::Moment;
use crate::ppo::state::state_err;

/// burn-pack's metadata block (`base.rs`, `Metadata`), field for field: CBOR writes names and
/// order, so the same struct shape gives the same bytes.
#[derive(Serialize)]
struct Metadata {
    tensors: BTreeMap<String, Descriptor>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    scalars: BTreeMap<String, Scalar>,
}

/// burn-pack's `TensorDescriptor`: offsets are relative to the aligned data section.
#[derive(Serialize)]
struct Descriptor {
    dtype: DType,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
    #[serde(skip_serializing_if = "Option::is_none")]
    param_id: Option<u64>,
}

/// Zeros for the alignment gaps (each shorter than [`TENSOR_ALIGNMENT`]).
static PADDING: [u8; TENSOR_ALIGNMENT as usize] = [0; TENSOR_ALIGNMENT as usize];

/// Writes to `path` the container burn would write for `record` with `moments` in the place of
/// its empty placeholders (what [`crate::optim::record_streamed`] returns).
pub(crate) fn write_streamed(
    path: &Path,
    record: OptimizerRecord,
    moments: &[Moment],
) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| state_err(path, e);
    // The scalars (step counts, ranks) and metadata (parameter paths) as burn records them:
    // the placeholder record is a few kilobytes.
    let small = record.into_bytes().map_err(|e| err(&format!("{e:?}")))?;
    let reader = Reader::from_bytes(small).map_err(|e| err(&e))?;
    let (metadata, offsets) = metadata(reader.metadata(), reader.scalars(), moments);
    let mut meta = Vec::new();
    ciborium::ser::into_writer(&metadata, &mut meta).map_err(|e| err(&e))?;
    let size = u32::try_from(meta.len()).map_err(|_| err(&"metadata over 4 GiB"))?;
    let header = Header::new(size).into_bytes();
    let data_start = aligned_data_section_start(meta.len());
    let mut parts: Vec<&[u8]> = vec![
        &header,
        &meta,
        &PADDING[..data_start - HEADER_SIZE - meta.len()],
    ];
    let mut at = 0;
    for (moment, &offset) in moments.iter().zip(&offsets) {
        parts.push(&PADDING[..offset - at]);
        parts.push(&moment.buffer[..]);
        at = offset + moment.buffer.len();
    }
    Ok(lmrl_models::write_atomic_parts(path, &parts)?)
}

/// The metadata block and each moment's offset in the data section (in `moments` order, each
/// aligned to [`TENSOR_ALIGNMENT`]).
fn metadata(
    paths: &BTreeMap<String, String>,
    scalars: &BTreeMap<String, Scalar>,
    moments: &[Moment],
) -> (Metadata, Vec<usize>) {
    let mut tensors = BTreeMap::new();
    let mut offsets = Vec::with_capacity(moments.len());
    let mut end = 0usize;
    for m in moments {
        let start = end.next_multiple_of(TENSOR_ALIGNMENT as usize);
        end = start + m.buffer.len();
        offsets.push(start);
        let descriptor = Descriptor {
            dtype: m.dtype,
            shape: m.shape.iter().map(|&d| d as u64).collect(),
            data_offsets: (start as u64, end as u64),
            param_id: Some(m.param_id),
        };
        tensors.insert(m.name.clone(), descriptor);
    }
    let metadata = Metadata {
        tensors,
        metadata: paths.clone(),
        scalars: scalars.clone(),
    };
    (metadata, offsets)
}

#[cfg(test)]
mod tests {
    use burn::module::Module;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::{GradientsParams, ModuleOptimizer, OptimizerRecord};
    use burn::tensor::{Device, Distribution, Tensor};

    use crate::optim::{adam, record_streamed};
    use crate::ppo::state::{OPTIMIZER_FILE, load_optimizer_record, save_optimizer};

    #[derive(Module, Debug)]
    struct Two {
        first: Linear,
        second: Linear,
    }

    /// Two layers (matrices and bias vectors: ranks 2 and 1) after `steps` Adam steps.
    fn trained(steps: usize) -> (Two, ModuleOptimizer) {
        let device = Device::flex().autodiff();
        device.seed(11);
        let mut model = Two {
            first: LinearConfig::new(300, 70).init(&device),
            second: LinearConfig::new(70, 5).init(&device),
        };
        let mut optimizer = adam(0.9, 0.999, 1e-8);
        for _ in 0..steps {
            let x = Tensor::<2>::random([4, 300], Distribution::Normal(0.0, 1.0), &device);
            let loss = model
                .second
                .forward(model.first.forward(x))
                .powf_scalar(2.0)
                .mean();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optimizer.step(1e-3, model, grads);
        }
        (model, optimizer)
    }

    /// The streamed file is byte for byte the container burn builds for the same record.
    #[test]
    fn the_streamed_file_is_burns_container() {
        let (_model, optimizer) = trained(3);
        let (_, moments) = record_streamed(&optimizer).expect("every moment streams");
        assert_eq!(moments.len(), 8);
        let dir = tempfile::tempdir().unwrap();
        save_optimizer(&optimizer, dir.path()).unwrap();
        let written = std::fs::read(dir.path().join(OPTIMIZER_FILE)).unwrap();
        let burns = optimizer.to_record().into_bytes().unwrap();
        assert_eq!(written.len(), burns.len());
        assert!(
            written == burns[..],
            "the streamed container differs from burn's"
        );
        assert_eq!(OptimizerRecord::from_bytes(burns).unwrap().len(), 8);
    }

    /// A record read back from the streamed file restores an optimiser whose next step is
    /// the same as the original's.
    #[test]
    fn the_streamed_file_restores_the_optimizer() {
        let (model, optimizer) = trained(2);
        let dir = tempfile::tempdir().unwrap();
        save_optimizer(&optimizer, dir.path()).unwrap();
        let restored =
            adam(0.9, 0.999, 1e-8).load_record(load_optimizer_record(dir.path()).unwrap());
        let device = model.first.weight.device();
        let x = Tensor::<2>::random([4, 300], Distribution::Normal(0.0, 1.0), &device);
        let step = |mut o: ModuleOptimizer| {
            let loss = model.second.forward(model.first.forward(x.clone())).sum();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            let m = o.step(1e-3, model.clone(), grads);
            m.first
                .weight
                .val()
                .into_data()
                .try_to_vec::<f32>()
                .unwrap()
        };
        assert_eq!(step(optimizer), step(restored));
    }
}
