//! Data parallelism across ranks: the [`Collective`] a learner reduces through, whatever
//! carries it (one process: [`SingleProcess`]; threads on the devices of one machine:
//! [`LocalGroup`]; processes on several machines: MPI, in `lmrl-train` behind its `mpi`
//! feature).
//!
//! Every rank runs the same program on its contiguous share ([`shard`]) of each global batch.
//! What PPO normalises over the batch — score statistics, advantage whitening, the KL the
//! controller sees, the logged statistics — is reduced over all ranks, and the gradients are
//! summed before every optimiser step, so every rank holds the same weights and a run's numbers
//! do not depend on how many ranks share the batch (up to float rounding).
//!
//! Rules every implementation keeps: every rank calls the same collectives in the same order
//! with the same lengths; results are identical on every rank (sums are taken in rank order,
//! not in whatever order messages arrive), so replicated state never drifts apart.
use std::fmt::Debug;
use std::sync::{Arc, Condvar, Mutex};

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};

use crate::error::{Result, RlError};
use crate::util::to_vec;

/// The collective operations a data-parallel learner needs. Every call is collective: each
/// rank of the group makes it, in the same order, with the same lengths where a length is
/// given.
pub trait Collective: Send + Sync + Debug {
    /// This rank, `0..world()`.
    fn rank(&self) -> usize;

    /// Number of ranks.
    fn world(&self) -> usize;

    /// Element-wise sum over ranks, in place (every rank passes the same length).
    fn all_reduce_f64(&self, xs: &mut [f64]) -> Result<()>;

    /// Element-wise sum over ranks, in place (every rank passes the same length): gradients.
    fn all_reduce_f32(&self, xs: &mut [f32]) -> Result<()>;

    /// Every rank's bytes (any length), in rank order.
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;

    /// Element-wise sum over ranks of a 1-D float tensor, on its device. The default reads it
    /// back to the host and goes through [`Collective::all_reduce_f32`]; a transport with a
    /// device collective (NCCL through burn's `all_reduce`) overrides it.
    fn all_reduce_tensor(&self, t: Tensor<1>) -> Result<Tensor<1>> {
        if self.world() == 1 {
            return Ok(t);
        }
        let device = t.device();
        let mut host = to_vec("all-reduced tensor", t)?;
        self.all_reduce_f32(&mut host)?;
        let n = host.len();
        Ok(Tensor::from_data(TensorData::new(host, [n]), &device))
    }

    /// A new group of the same ranks whose collectives never pair with this one's (MPI
    /// `MPI_Comm_dup`): one per learner, so two learners that step concurrently (CORY) cannot
    /// interleave their messages. Collective itself: every rank calls it in the same order.
    fn split(&self) -> Result<Arc<dyn Collective>>;
}

/// One process alone: every collective is the identity.
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleProcess;

impl Collective for SingleProcess {
    fn rank(&self) -> usize {
        0
    }
    fn world(&self) -> usize {
        1
    }
    fn all_reduce_f64(&self, _xs: &mut [f64]) -> Result<()> {
        Ok(())
    }
    fn all_reduce_f32(&self, _xs: &mut [f32]) -> Result<()> {
        Ok(())
    }
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(vec![mine.to_vec()])
    }
    fn all_reduce_tensor(&self, t: Tensor<1>) -> Result<Tensor<1>> {
        Ok(t)
    }
    fn split(&self) -> Result<Arc<dyn Collective>> {
        Ok(Arc::new(SingleProcess))
    }
}

/// The single-process collective, shared.
pub fn single_process() -> Arc<dyn Collective> {
    Arc::new(SingleProcess)
}

/// `[lo, hi)`: rank `rank`'s contiguous share of `n` items split over `world` ranks, the first
/// `n mod world` ranks taking one more.
pub fn shard(n: usize, rank: usize, world: usize) -> std::ops::Range<usize> {
    let world = world.max(1);
    let (base, extra) = (n / world, n % world);
    let lo = rank * base + rank.min(extra);
    let len = base + usize::from(rank < extra);
    lo..(lo + len).min(n)
}

/// Every rank's `mine` concatenated in rank order.
pub fn all_gather_f32(c: &dyn Collective, mine: &[f32]) -> Result<Vec<f32>> {
    if c.world() == 1 {
        return Ok(mine.to_vec());
    }
    let bytes: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = Vec::new();
    for part in c.all_gather_bytes(&bytes)? {
        out.extend(
            part.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
    }
    Ok(out)
}

/// Every rank's `mine` concatenated in rank order.
pub fn all_gather_usize(c: &dyn Collective, mine: &[usize]) -> Result<Vec<usize>> {
    if c.world() == 1 {
        return Ok(mine.to_vec());
    }
    let bytes: Vec<u8> = mine
        .iter()
        .flat_map(|&x| (x as u64).to_le_bytes())
        .collect();
    let mut out = Vec::new();
    for part in c.all_gather_bytes(&bytes)? {
        out.extend(part.chunks_exact(8).map(|b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a) as usize
        }));
    }
    Ok(out)
}

/// Every rank's items (any serialisable values: texts, token ids) concatenated in rank order.
pub fn all_gather_json<T>(c: &dyn Collective, mine: &[T]) -> Result<Vec<T>>
where
    T: serde::Serialize + serde::de::DeserializeOwned + Clone,
{
    if c.world() == 1 {
        return Ok(mine.to_vec());
    }
    let bytes = serde_json::to_vec(mine).map_err(|e| collective_err(format!("encoding: {e}")))?;
    let mut out = Vec::new();
    for (rank, part) in c.all_gather_bytes(&bytes)?.into_iter().enumerate() {
        let items: Vec<T> = serde_json::from_slice(&part)
            .map_err(|e| collective_err(format!("decoding rank {rank}'s items: {e}")))?;
        out.extend(items);
    }
    Ok(out)
}

/// Rank `root`'s value on every rank (the others' `value` is ignored).
pub fn broadcast_json<T>(c: &dyn Collective, root: usize, value: &T) -> Result<T>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let bytes = if c.rank() == root {
        serde_json::to_vec(value).map_err(|e| collective_err(format!("encoding: {e}")))?
    } else {
        Vec::new()
    };
    let parts = c.all_gather_bytes(&bytes)?;
    serde_json::from_slice(&parts[root])
        .map_err(|e| collective_err(format!("decoding rank {root}'s value: {e}")))
}

/// Σ over ranks of each `x`, returned (a convenience over [`Collective::all_reduce_f64`]).
pub fn sum_f64<const N: usize>(c: &dyn Collective, mut xs: [f64; N]) -> Result<[f64; N]> {
    c.all_reduce_f64(&mut xs)?;
    Ok(xs)
}

/// A collective that failed: a peer died or the transport broke.
pub fn collective_err(message: impl Into<String>) -> RlError {
    RlError::External {
        component: "data-parallel collective".into(),
        message: message.into(),
    }
}

struct GradLayout<'a> {
    grads: &'a GradientsParams,
    /// 1 where this rank has the gradient of the k-th trainable parameter.
    present: Vec<f64>,
}

impl ModuleVisitor for GradLayout<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if param.is_require_grad() {
            let has = self.grads.get::<D>(param.id).is_some();
            self.present.push(if has { 1.0 } else { 0.0 });
        }
    }
}

struct Flatten<'a> {
    grads: &'a mut GradientsParams,
    any: &'a [f64],
    k: usize,
    parts: Vec<Tensor<1>>,
    device: Option<Device>,
}

impl ModuleVisitor for Flatten<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if !param.is_require_grad() {
            return;
        }
        let k = self.k;
        self.k += 1;
        if self.any[k] == 0.0 {
            return;
        }
        let g = match self.grads.remove::<D>(param.id) {
            Some(g) => g,
            None => {
                let v = param.val();
                Tensor::<D>::zeros(v.shape(), &v.device().without_autodiff())
            }
        };
        self.device.get_or_insert_with(|| g.device());
        self.parts.push(g.flatten::<1>(0, D - 1));
    }
}

struct Unflatten {
    flat: Tensor<1>,
    any: Vec<f64>,
    k: usize,
    offset: usize,
    out: GradientsParams,
}

impl ModuleVisitor for Unflatten {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if !param.is_require_grad() {
            return;
        }
        let k = self.k;
        self.k += 1;
        if self.any[k] == 0.0 {
            return;
        }
        let shape = param.val().shape();
        let n = shape.num_elements();
        let dims: [usize; D] = shape.dims();
        let part = self
            .flat
            .clone()
            .narrow(0, self.offset, n)
            .reshape::<D, _>(dims);
        self.offset += n;
        self.out.register(param.id, part);
    }
}

/// The sum over ranks of every rank's gradients of `module` (Horovod's all-reduce before the
/// optimiser step): afterwards every rank holds the same gradients. A parameter gets a gradient
/// if any rank had one (a rank with no sample in the minibatch contributes zeros), so the
/// optimiser sees the parameters a single process would. One collective call for all
/// parameters (flattened into one buffer).
pub fn all_reduce_grads<M: Module>(
    c: &dyn Collective,
    module: &M,
    mut grads: GradientsParams,
) -> Result<GradientsParams> {
    if c.world() == 1 {
        return Ok(grads);
    }
    let mut layout = GradLayout {
        grads: &grads,
        present: Vec::new(),
    };
    module.visit(&mut layout);
    let mut any = layout.present;
    c.all_reduce_f64(&mut any)?;
    let mut flat = Flatten {
        grads: &mut grads,
        any: &any,
        k: 0,
        parts: Vec::new(),
        device: None,
    };
    module.visit(&mut flat);
    if flat.parts.is_empty() {
        return Ok(GradientsParams::new());
    }
    let summed = c.all_reduce_tensor(Tensor::cat(flat.parts, 0))?;
    let mut un = Unflatten {
        flat: summed,
        any,
        k: 0,
        offset: 0,
        out: GradientsParams::new(),
    };
    module.visit(&mut un);
    Ok(un.out)
}

struct Values {
    root: bool,
    parts: Vec<Tensor<1>>,
}

impl ModuleVisitor for Values {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let v = param.val().inner();
        let v = if self.root { v } else { v.zeros_like() };
        self.parts.push(v.flatten::<1>(0, D - 1));
    }
}

struct Assign {
    flat: Tensor<1>,
    offset: usize,
}

impl ModuleMapper for Assign {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let (flat, offset) = (&self.flat, &mut self.offset);
        param.map(|t| {
            let shape = t.shape();
            let n = shape.num_elements();
            let dims: [usize; D] = shape.dims();
            let v = flat.clone().narrow(0, *offset, n).reshape::<D, _>(dims);
            *offset += n;
            let v = v.to_device(&t.device().without_autodiff());
            if t.is_autodiff() {
                Tensor::from_inner(v).set_require_grad(t.is_require_grad())
            } else {
                v
            }
        })
    }
}

/// Rank `root`'s values of every float parameter of `module` on every rank (DDP's broadcast
/// of the initial weights): ranks whose random initialisation (value head, LoRA factors)
/// drew different numbers start from the same model. Parameter ids and trainability are kept.
/// One tensor all-reduce of rank 0's values and the other ranks' zeros (exact: x + 0 = x).
pub fn broadcast_module<M: Module>(c: &dyn Collective, module: M) -> Result<M> {
    if c.world() == 1 {
        return Ok(module);
    }
    let mut values = Values {
        root: c.rank() == 0,
        parts: Vec::new(),
    };
    module.visit(&mut values);
    if values.parts.is_empty() {
        return Ok(module);
    }
    let flat = c.all_reduce_tensor(Tensor::cat(values.parts, 0))?;
    Ok(module.map(&mut Assign { flat, offset: 0 }))
}

/// What one exchange of a [`LocalGroup`] carries.
#[derive(Debug, Clone)]
enum Payload {
    F64(Vec<f64>),
    F32(Vec<f32>),
    Bytes(Vec<u8>),
}

#[derive(Debug, Default)]
struct Round {
    /// Completed exchanges.
    generation: u64,
    deposited: Vec<Option<Payload>>,
    arrived: usize,
    /// The payloads of the last completed exchange, in rank order.
    results: Arc<Vec<Payload>>,
    /// Set when a rank failed: every waiting and later call returns this error.
    failed: Option<String>,
}

#[derive(Debug)]
struct Shared {
    world: usize,
    round: Mutex<Round>,
    cv: Condvar,
}

/// The ranks of one process, one thread per device (data parallel over the devices of one
/// machine): collectives meet in shared memory. Sums are taken on every rank over the
/// contributions in rank order, so all ranks get bit-identical results. A rank that fails calls
/// [`LocalGroup::fail`] (the runner does it for errors and panics), and every other rank's
/// pending and later collectives return that error instead of waiting for it.
///
/// The tensor all-reduce goes through the host; with burn's `cuda` backend
/// `lmrl-train` uses burn's own device collective instead (`DistributedContext`).
#[derive(Debug, Clone)]
pub struct LocalGroup {
    rank: usize,
    shared: Arc<Shared>,
}

impl LocalGroup {
    /// The `world` handles of a new group, rank 0 first.
    pub fn new(world: usize) -> Vec<LocalGroup> {
        let world = world.max(1);
        let shared = Arc::new(Shared {
            world,
            round: Mutex::new(Round {
                deposited: vec![None; world],
                ..Round::default()
            }),
            cv: Condvar::new(),
        });
        (0..world)
            .map(|rank| LocalGroup {
                rank,
                shared: shared.clone(),
            })
            .collect()
    }

    /// Marks the group failed with `reason` (naming this rank) and wakes every waiting rank.
    pub fn fail(&self, reason: &str) {
        let mut r = self.shared.round.lock().unwrap_or_else(|p| p.into_inner());
        if r.failed.is_none() {
            r.failed = Some(format!(
                "rank {} of {} failed: {reason}",
                self.rank, self.shared.world
            ));
        }
        self.shared.cv.notify_all();
    }

    /// [`Collective::split`] as a `LocalGroup`: a new group of the same ranks (collective).
    pub fn split_group(&self) -> Result<LocalGroup> {
        // The handles of the new group are made once and picked up through a registry keyed
        // by this group and its exchange count, which every rank agrees on here.
        let key = {
            let r = self.shared.round.lock().unwrap_or_else(|p| p.into_inner());
            r.generation
        };
        let id = Arc::as_ptr(&self.shared) as usize;
        let handle = {
            let mut reg = SPLITS.lock().unwrap_or_else(|p| p.into_inner());
            let entry = reg
                .entry((id, key))
                .or_insert_with(|| (LocalGroup::new(self.shared.world), 0));
            let handle = entry.0[self.rank].clone();
            entry.1 += 1;
            if entry.1 == self.shared.world {
                reg.remove(&(id, key));
            }
            handle
        };
        // Everyone has taken its handle before anyone moves on to the next exchange.
        self.exchange(Payload::Bytes(Vec::new()))?;
        Ok(handle)
    }

    fn exchange(&self, mine: Payload) -> Result<Arc<Vec<Payload>>> {
        let sh = &self.shared;
        let mut r = sh.round.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = &r.failed {
            return Err(collective_err(f.clone()));
        }
        let gen0 = r.generation;
        r.deposited[self.rank] = Some(mine);
        r.arrived += 1;
        if r.arrived == sh.world {
            let all: Vec<Payload> = r
                .deposited
                .iter_mut()
                .map(|p| p.take().expect("every rank deposited"))
                .collect();
            r.results = Arc::new(all);
            r.arrived = 0;
            r.generation += 1;
            sh.cv.notify_all();
            return Ok(r.results.clone());
        }
        loop {
            r = sh.cv.wait(r).unwrap_or_else(|p| p.into_inner());
            if r.generation != gen0 {
                return Ok(r.results.clone());
            }
            if let Some(f) = &r.failed {
                return Err(collective_err(f.clone()));
            }
        }
    }
}

fn length_err(what: &str, got: usize, want: usize) -> RlError {
    collective_err(format!(
        "{what}: ranks passed different lengths ({got} and {want})"
    ))
}

impl Collective for LocalGroup {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.shared.world
    }
    fn all_reduce_f64(&self, xs: &mut [f64]) -> Result<()> {
        let all = self.exchange(Payload::F64(xs.to_vec()))?;
        xs.iter_mut().for_each(|x| *x = 0.0);
        for p in all.iter() {
            let Payload::F64(v) = p else {
                return Err(collective_err("mismatched collectives (f64 sum)"));
            };
            if v.len() != xs.len() {
                return Err(length_err("f64 sum", v.len(), xs.len()));
            }
            xs.iter_mut().zip(v).for_each(|(x, y)| *x += y);
        }
        Ok(())
    }
    fn all_reduce_f32(&self, xs: &mut [f32]) -> Result<()> {
        let all = self.exchange(Payload::F32(xs.to_vec()))?;
        xs.iter_mut().for_each(|x| *x = 0.0);
        for p in all.iter() {
            let Payload::F32(v) = p else {
                return Err(collective_err("mismatched collectives (f32 sum)"));
            };
            if v.len() != xs.len() {
                return Err(length_err("f32 sum", v.len(), xs.len()));
            }
            xs.iter_mut().zip(v).for_each(|(x, y)| *x += y);
        }
        Ok(())
    }
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let all = self.exchange(Payload::Bytes(mine.to_vec()))?;
        all.iter()
            .map(|p| match p {
                Payload::Bytes(b) => Ok(b.clone()),
                _ => Err(collective_err("mismatched collectives (gather)")),
            })
            .collect()
    }
    fn split(&self) -> Result<Arc<dyn Collective>> {
        Ok(Arc::new(self.split_group()?))
    }
}

type SplitRegistry = std::collections::HashMap<(usize, u64), (Vec<LocalGroup>, usize)>;

static SPLITS: std::sync::LazyLock<Mutex<SplitRegistry>> =
    std::sync::LazyLock::new(|| Mutex::new(SplitRegistry::new()));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_the_batch_contiguously() {
        for n in 0..12 {
            for world in 1..5 {
                let parts: Vec<_> = (0..world).map(|r| shard(n, r, world)).collect();
                assert_eq!(parts[0].start, 0);
                assert_eq!(parts[world - 1].end, n);
                for w in parts.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                    assert!(w[0].len() >= w[1].len());
                }
            }
        }
        assert_eq!(shard(5, 0, 2), 0..3);
        assert_eq!(shard(5, 1, 2), 3..5);
    }

    #[test]
    fn a_local_group_sums_gathers_and_reports_a_failed_rank() {
        let group = LocalGroup::new(3);
        let out: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = group
                .iter()
                .map(|g| {
                    s.spawn(move || {
                        let r = g.rank() as f64;
                        let mut xs = [r, 1.0];
                        g.all_reduce_f64(&mut xs).unwrap();
                        let gathered = all_gather_f32(g, &vec![r as f32; g.rank()]).unwrap();
                        let sub = g.split().unwrap();
                        let mut ys = [1.0f32];
                        sub.all_reduce_f32(&mut ys).unwrap();
                        let root = broadcast_json(g, 2, &format!("from {}", g.rank())).unwrap();
                        (xs, gathered, ys[0], root)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (xs, gathered, y, root) in out {
            assert_eq!(xs, [3.0, 3.0]);
            assert_eq!(gathered, vec![1.0, 2.0, 2.0]);
            assert_eq!(y, 3.0);
            assert_eq!(root, "from 2");
        }

        let group = LocalGroup::new(2);
        std::thread::scope(|s| {
            let g1 = group[1].clone();
            s.spawn(move || g1.fail("the reward model crashed"));
            let e = group[0].all_reduce_f64(&mut [1.0]).unwrap_err().to_string();
            assert!(
                e.contains("rank 1 of 2 failed: the reward model crashed"),
                "{e}"
            );
        });
    }
}
