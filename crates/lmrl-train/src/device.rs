//! The one place that picks the compute device: from the backend compiled in (cargo features
//! `flex`, `tch`, `wgpu`; the first of `tch`, `wgpu`, `flex` that is enabled wins) and the
//! `--device` flag.
use burn::tensor::Device;

use crate::error::{Result, TrainError};

/// Which device of the compiled-in backend: `cpu`, `cuda:N`, `wgpu:N`, or (`None`) the
/// backend's first device.
pub fn select_device(spec: Option<&str>) -> Result<Device> {
    let spec = spec.map(str::trim).filter(|s| !s.is_empty());
    let (kind, index) = match spec {
        None => ("default", 0),
        Some(s) => parse(s)?,
    };
    backend_device(kind, index).map_err(|reason| TrainError::Device {
        spec: spec.unwrap_or("default").to_string(),
        reason,
    })
}

fn parse(spec: &str) -> Result<(&str, usize)> {
    let bad = |reason: &str| TrainError::Device {
        spec: spec.to_string(),
        reason: reason.to_string(),
    };
    let (kind, index) = match spec.split_once(':') {
        Some((k, i)) => (
            k,
            i.parse::<usize>()
                .map_err(|_| bad("the index after `:` must be a number, e.g. cuda:0"))?,
        ),
        None => (spec, 0),
    };
    match kind {
        "cpu" | "cuda" | "wgpu" => Ok((kind, index)),
        _ => Err(bad("expected `cpu`, `cuda:N` or `wgpu:N`")),
    }
}

/// The name of the backend this build runs on.
pub fn backend_name() -> &'static str {
    if cfg!(feature = "tch") {
        "tch"
    } else if cfg!(feature = "wgpu") {
        "wgpu"
    } else if cfg!(feature = "flex") {
        "flex"
    } else {
        "none"
    }
}

#[allow(unreachable_code, unused_variables)]
fn backend_device(kind: &str, index: usize) -> std::result::Result<Device, String> {
    #[cfg(feature = "tch")]
    #[allow(deprecated)]
    {
        return match kind {
            "default" | "cpu" => Ok(Device::libtorch()),
            "cuda" => Ok(Device::libtorch_cuda(index)),
            _ => Err("the tch backend runs on `cpu` or `cuda:N`".into()),
        };
    }
    #[cfg(all(feature = "wgpu", not(feature = "tch")))]
    {
        return match kind {
            "default" => Ok(Device::wgpu(burn::tensor::DeviceKind::DefaultDevice)),
            "wgpu" | "cuda" => Ok(Device::wgpu(burn::tensor::DeviceKind::DiscreteGpu(index))),
            _ => Err("the wgpu backend runs on `wgpu:N`".into()),
        };
    }
    #[cfg(all(feature = "flex", not(feature = "tch"), not(feature = "wgpu")))]
    {
        return match kind {
            "default" | "cpu" => Ok(Device::flex()),
            _ => Err(format!(
                "this build has only the CPU backend (flex); rebuild with `--features tch` or \
                 `--features wgpu` for `{kind}`"
            )),
        };
    }
    Err("no backend compiled in: enable one of the features flex, tch, wgpu".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_are_parsed_and_bad_ones_named() {
        assert_eq!(parse("cuda:1").unwrap(), ("cuda", 1));
        assert_eq!(parse("cpu").unwrap(), ("cpu", 0));
        let e = parse("tpu:0").unwrap_err().to_string();
        assert!(e.contains("tpu:0") && e.contains("cuda:N"), "{e}");
        let e = parse("cuda:x").unwrap_err().to_string();
        assert!(e.contains("must be a number"), "{e}");
    }
}
