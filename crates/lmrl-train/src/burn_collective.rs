//! burn's own device collective for the ranks of one process on CUDA devices
//! (`burn::tensor::distributed`: a `DistributedContext` over the devices, `all_reduce` through
//! cubecl's NCCL): the gradient sum stays on the GPUs. The small host reductions (statistics,
//! texts) still go through the [`LocalGroup`]. burn 0.22 implements collectives for CUDA only
//! (flex, tch and wgpu panic), so this is used only with the `cuda` backend. It is compiled in
//! every build (burn's `distributed` module is), so it is type-checked without CUDA.
//!
//! Not run in this repository's tests (no GPU): see `docs/distributed.md`.
use std::sync::Arc;

use burn::tensor::Device;
use burn::tensor::Tensor;
use burn::tensor::distributed::{
    DistributedConfig, DistributedContext, ReduceOperation, all_reduce,
};
use lmrl_rl::dist::Collective;
use lmrl_rl::{LocalGroup, Result};

/// One rank of a local group whose tensor all-reduce is burn's.
#[derive(Debug, Clone)]
struct DeviceGroup {
    host: LocalGroup,
    devices: Vec<Device>,
    _context: Arc<DistributedContext>,
}

impl Collective for DeviceGroup {
    fn rank(&self) -> usize {
        self.host.rank()
    }
    fn world(&self) -> usize {
        self.host.world()
    }
    fn all_reduce_f64(&self, xs: &mut [f64]) -> Result<()> {
        self.host.all_reduce_f64(xs)
    }
    fn all_reduce_f32(&self, xs: &mut [f32]) -> Result<()> {
        self.host.all_reduce_f32(xs)
    }
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.host.all_gather_bytes(mine)
    }
    fn all_reduce_tensor(&self, t: Tensor<1>) -> Result<Tensor<1>> {
        // Every rank has reached this point before any submits (burn pairs the submissions of
        // one collective by device), and the plain tensor is reduced on its own device.
        self.host.all_reduce_f64(&mut [])?;
        let device = t.device();
        let plain = t.inner();
        let out = all_reduce(plain, ReduceOperation::Sum, self.devices.clone()).resolve();
        Ok(out.to_device(&device))
    }
    fn split(&self) -> Result<Arc<dyn Collective>> {
        Ok(Arc::new(DeviceGroup {
            host: self.host.split_group()?,
            devices: self.devices.clone(),
            _context: self._context.clone(),
        }))
    }
}

/// The collectives of a local group on CUDA devices, or `None` for other devices.
pub fn collectives(devices: &[Device], groups: &[LocalGroup]) -> Option<Vec<Arc<dyn Collective>>> {
    let plain: Vec<Device> = devices
        .iter()
        .map(|d| d.clone().without_autodiff())
        .collect();
    if !plain
        .iter()
        .all(|d| format!("{d:?}").to_lowercase().contains("cuda"))
    {
        return None;
    }
    let context = Arc::new(DistributedContext::init(
        plain.clone(),
        DistributedConfig {
            all_reduce_op: ReduceOperation::Sum,
        },
    ));
    Some(
        groups
            .iter()
            .map(|g| {
                Arc::new(DeviceGroup {
                    host: g.clone(),
                    devices: plain.clone(),
                    _context: context.clone(),
                }) as Arc<dyn Collective>
            })
            .collect(),
    )
}
