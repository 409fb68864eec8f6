//! Completion masks of a GRPO/RLOO batch (the crate's [`ResponseMask`], TRL's
//! `completion_mask`).

use burn::tensor::Device;

use crate::error::{Result, RlError};
use crate::ppo::ResponseMask;

/// TRL `mask_truncated_completions`: the rows of truncated completions (no EOS before
/// `max_completion_length`) are zeroed, so that they add nothing to the loss, while their
/// rewards still enter the group statistics. `is_truncated[i]` is TRL's
/// `ids[-1] not in (eos, pad)` for completion `i`.
pub fn mask_truncated_completions(
    mask: &ResponseMask,
    is_truncated: &[bool],
    device: &Device,
) -> Result<ResponseMask> {
    let [n, t] = mask.dims();
    if is_truncated.len() != n {
        return Err(RlError::Shape {
            what: "is_truncated".into(),
            expected: vec![n],
            got: vec![is_truncated.len()],
        });
    }
    let mut host = mask.host().to_vec();
    for (row, &trunc) in host.chunks_mut(t.max(1)).zip(is_truncated) {
        if trunc {
            row.fill(0.0);
        }
    }
    ResponseMask::from_host(host, n, t, device)
}
