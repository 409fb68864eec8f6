//! The one place that picks the compute device: from the backend compiled in (cargo features
//! `flex`, `tch`, `wgpu`, `cuda`; the first of `tch`, `cuda`, `wgpu`, `flex` that is enabled
//! wins) and the `--device` flag.
//!
//! A device that does not exist on this machine, or whose backend is not compiled in, is a
//! [`TrainError::Device`] naming what there is, never a panic: accelerator devices are counted
//! with burn's `Device::enumerate` before one is used.
use burn::tensor::Device;

use std::sync::Arc;

use lmrl_rl::dist::Collective;

use crate::error::{Result, TrainError};

/// One rank of a run: its device (without autodiff) and its collective.
#[derive(Debug, Clone)]
pub struct RankContext {
    pub device: Device,
    pub collective: Arc<dyn Collective>,
}

/// Which device of the compiled-in backend: `cpu`, `cuda:N`, `wgpu:N`, or (`None`) the
/// backend's first device.
pub fn select_device(spec: Option<&str>) -> Result<Device> {
    select_rank_device(spec, 0)
}

/// The device of the process that is local rank `local_rank` on its machine (MPI): as
/// [`select_device`], but a spec without an index (`cuda`, `wgpu`, or none on an accelerator
/// backend) means device `local_rank`, so `mpirun -np 4 app --device cuda` puts one rank on
/// each of four GPUs.
pub fn select_rank_device(spec: Option<&str>, local_rank: usize) -> Result<Device> {
    let spec = spec.map(str::trim).filter(|s| !s.is_empty());
    let (kind, index) = match spec {
        None => ("default", None),
        Some(s) => parse(s)?,
    };
    backend_device(kind, index.unwrap_or(local_rank)).map_err(|reason| TrainError::Device {
        spec: spec.unwrap_or("default").to_string(),
        reason,
    })
}

/// The devices of a `--device` list (`cuda:0,cuda:1`; `cpu,cpu` runs two CPU ranks, for
/// tests): one data-parallel rank per entry. A single entry gives one device.
pub fn select_devices(spec: Option<&str>) -> Result<Vec<Device>> {
    match spec {
        Some(s) if s.contains(',') => s
            .split(',')
            .map(|one| select_device(Some(one)))
            .collect::<Result<Vec<_>>>(),
        _ => Ok(vec![select_device(spec)?]),
    }
}

fn parse(spec: &str) -> Result<(&str, Option<usize>)> {
    let bad = |reason: &str| TrainError::Device {
        spec: spec.to_string(),
        reason: reason.to_string(),
    };
    let (kind, index) = match spec.split_once(':') {
        Some((k, i)) => (
            k,
            Some(
                i.parse::<usize>()
                    .map_err(|_| bad("the index after `:` must be a number, e.g. cuda:0"))?,
            ),
        ),
        None => (spec, None),
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
    } else if cfg!(feature = "cuda") {
        "cuda"
    } else if cfg!(feature = "wgpu") {
        "wgpu"
    } else if cfg!(feature = "flex") {
        "flex"
    } else {
        "none"
    }
}

/// How many devices `enumerate` finds, turning a panic of a backend that cannot load its
/// driver into an error.
#[allow(dead_code)]
fn count_devices(
    what: &str,
    enumerate: impl FnOnce() -> usize + std::panic::UnwindSafe,
) -> std::result::Result<usize, String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(enumerate);
    std::panic::set_hook(hook);
    r.map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("cannot list the {what} devices of this machine (no driver or no device?) {msg}")
    })
}

/// Checks that device `index` of a backend with `n` devices exists.
#[allow(dead_code)]
fn check_index(kind: &str, index: usize, n: usize) -> std::result::Result<(), String> {
    if index < n {
        return Ok(());
    }
    Err(match n {
        0 => format!("this machine has no {kind} device"),
        1 => format!("this machine has one {kind} device, {kind}:0"),
        n => format!(
            "this machine has {n} {kind} devices, {kind}:0 to {kind}:{}",
            n - 1
        ),
    })
}

#[allow(unreachable_code, unused_variables)]
fn backend_device(kind: &str, index: usize) -> std::result::Result<Device, String> {
    #[cfg(feature = "tch")]
    #[allow(deprecated)]
    {
        return match kind {
            "default" | "cpu" => Ok(Device::libtorch()),
            "cuda" => {
                // LibTorch lists its CUDA devices (none with a CPU-only torch).
                let n = count_devices("CUDA (libtorch)", || {
                    Device::enumerate(burn::tensor::DeviceType::LibTorch).len()
                })?;
                check_index("cuda", index, n).map_err(|e| {
                    format!(
                        "{e}; a CUDA build of libtorch is needed (scripts/setup-tch.sh --full) \
                         and a visible GPU"
                    )
                })?;
                Ok(Device::libtorch_cuda(index))
            }
            _ => Err("the tch backend runs on `cpu` or `cuda:N`".into()),
        };
    }
    #[cfg(all(feature = "cuda", not(feature = "tch")))]
    {
        return match kind {
            "default" | "cuda" => {
                let n = count_devices("CUDA", || {
                    Device::enumerate(burn::tensor::DeviceType::Cuda).len()
                })?;
                check_index("cuda", index, n)?;
                Ok(Device::cuda(index))
            }
            _ => Err(format!(
                "the cuda backend runs on `cuda:N`; rebuild with the default `flex` feature for \
                 `{kind}`"
            )),
        };
    }
    #[cfg(all(feature = "wgpu", not(feature = "tch"), not(feature = "cuda")))]
    {
        return match kind {
            "default" => Ok(Device::wgpu(burn::tensor::DeviceKind::DefaultDevice)),
            "wgpu" | "cuda" => {
                let n = count_devices("wgpu", || {
                    Device::enumerate(burn::tensor::DeviceType::Wgpu).len()
                })?;
                check_index("wgpu", index, n)?;
                Ok(Device::wgpu(burn::tensor::DeviceKind::DiscreteGpu(index)))
            }
            _ => Err("the wgpu backend runs on `wgpu:N`".into()),
        };
    }
    #[cfg(all(
        feature = "flex",
        not(feature = "tch"),
        not(feature = "wgpu"),
        not(feature = "cuda")
    ))]
    {
        return match kind {
            "default" | "cpu" => Ok(Device::flex()),
            _ => Err(format!(
                "this build has only the CPU backend (flex); rebuild with `--features cuda`, \
                 `--features tch` or `--features wgpu` for `{kind}`"
            )),
        };
    }
    Err("no backend compiled in: enable one of the features flex, tch, wgpu, cuda".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_are_parsed_and_bad_ones_named() {
        assert_eq!(parse("cuda:1").unwrap(), ("cuda", Some(1)));
        assert_eq!(parse("cpu").unwrap(), ("cpu", None));
        let e = parse("tpu:0").unwrap_err().to_string();
        assert!(e.contains("tpu:0") && e.contains("cuda:N"), "{e}");
        let e = parse("cuda:x").unwrap_err().to_string();
        assert!(e.contains("must be a number"), "{e}");
    }

    #[test]
    fn missing_devices_are_named() {
        assert_eq!(
            check_index("cuda", 2, 2).unwrap_err(),
            "this machine has 2 cuda devices, cuda:0 to cuda:1"
        );
        assert!(check_index("cuda", 0, 0).unwrap_err().contains("no cuda"));
        let e = count_devices("CUDA", || panic!("libcuda.so not found")).unwrap_err();
        assert!(e.contains("libcuda.so not found"), "{e}");
    }

    #[test]
    fn device_lists_give_one_device_per_entry() {
        assert!(select_devices(Some("cpu,tpu")).is_err());
        if backend_name() == "flex" {
            assert_eq!(select_devices(Some("cpu,cpu")).unwrap().len(), 2);
            assert_eq!(select_devices(None).unwrap().len(), 1);
        } else if backend_name() == "none" {
            // `cargo test -p lmrl-train` alone: the library enables no backend.
            let e = select_devices(Some("cpu,cpu")).unwrap_err().to_string();
            assert!(e.contains("no backend compiled in"), "{e}");
        }
    }
}
