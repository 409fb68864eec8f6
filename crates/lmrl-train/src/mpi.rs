//! Ranks on several machines through MPI (the `mpi` cargo feature; rsmpi over the system's
//! MPI, OpenMPI from Debian), as Horovod runs deep learning across machines: an app started as
//! `mpirun -np N app …` (or `srun app …` under Slurm) runs one rank per process, and
//! [`MpiCollective`] carries the learners' reductions ([`lmrl_rl::dist::Collective`]).
//!
//! - MPI is initialised on the first use and finalised at process exit.
//! - Results are identical on every rank: small sums are gathered and added in rank order;
//!   the gradient sum is computed once on rank 0 (`MPI_Reduce`) and broadcast.
//! - A rank whose run fails prints its error, naming itself, and aborts the job
//!   (`MPI_Abort`); a rank that dies is reported by `mpirun`, which stops the others. MPI's
//!   default error handler (`MPI_ERRORS_ARE_FATAL`) ends the job on a broken link. Either
//!   way the last checkpoint, written whole or not at all, is intact for `--resume`.
use std::ffi::c_int;
use std::sync::{Arc, Mutex, OnceLock};

use lmrl_rl::dist::{Collective, collective_err};
use mpi::datatype::PartitionMut;
use mpi::environment::{Threading, Universe};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use crate::device::RankContext;
use crate::error::{Result, TrainError};

/// Whether this process was started by an MPI launcher (`mpirun`/`mpiexec` of OpenMPI or
/// MPICH, Slurm's `srun` with PMI/PMIx).
pub fn launched() -> bool {
    [
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_RANK",
        "PMI_RANK",
        "MPI_LOCALNRANKS",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some())
}

struct World {
    /// Kept until exit; finalised by [`finalize_at_exit`].
    universe: Mutex<Option<Universe>>,
    /// Serialises MPI calls when the library does not allow concurrent ones.
    serial: Option<Mutex<()>>,
}

static WORLD: OnceLock<std::result::Result<World, String>> = OnceLock::new();

unsafe extern "C" {
    fn atexit(cb: extern "C" fn()) -> c_int;
}

extern "C" fn finalize_at_exit() {
    if let Some(Ok(w)) = WORLD.get() {
        // Dropping the universe calls MPI_Finalize.
        let u = w.universe.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(u);
    }
}

fn world() -> Result<&'static World> {
    let w = WORLD.get_or_init(|| {
        let Some((universe, threading)) = mpi::initialize_with_threading(Threading::Multiple)
        else {
            return Err("MPI was already initialised by someone else".into());
        };
        // SAFETY: registering a plain function; it runs once at exit.
        unsafe {
            atexit(finalize_at_exit);
        }
        Ok(World {
            universe: Mutex::new(Some(universe)),
            serial: (threading != Threading::Multiple).then(|| Mutex::new(())),
        })
    });
    w.as_ref().map_err(|reason| TrainError::Rank {
        rank: 0,
        world: 0,
        reason: format!("cannot initialise MPI: {reason}"),
    })
}

/// One communicator of the MPI job: `MPI_COMM_WORLD` or a duplicate of it.
struct Comm(SimpleCommunicator);

// SAFETY: MPI was initialised with MPI_THREAD_MULTIPLE, or every call through a `Comm` holds
// the world's `serial` lock.
unsafe impl Send for Comm {}
unsafe impl Sync for Comm {}

/// The ranks of an MPI job as a [`Collective`].
pub struct MpiCollective {
    comm: Comm,
    rank: usize,
    world: usize,
    serial: Option<&'static Mutex<()>>,
}

impl std::fmt::Debug for MpiCollective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiCollective")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .finish()
    }
}

/// Gradient sums go through MPI in pieces of at most this many elements (MPI counts are C
/// ints).
const CHUNK: usize = 1 << 26;

impl MpiCollective {
    /// `MPI_COMM_WORLD` (initialising MPI on the first call).
    pub fn world() -> Result<MpiCollective> {
        let w = world()?;
        Ok(Self::from_comm(SimpleCommunicator::world(), w))
    }

    fn from_comm(comm: SimpleCommunicator, w: &'static World) -> MpiCollective {
        MpiCollective {
            rank: comm.rank() as usize,
            world: comm.size() as usize,
            comm: Comm(comm),
            serial: w.serial.as_ref(),
        }
    }

    fn lock(&self) -> Option<std::sync::MutexGuard<'static, ()>> {
        self.serial
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Every rank's `mine` (the same length everywhere), rank after rank.
    fn gather_fixed<T: Equivalence + Copy + Default>(&self, mine: &[T]) -> Vec<T> {
        let mut all = vec![T::default(); mine.len() * self.world];
        let _g = self.lock();
        self.comm.0.all_gather_into(mine, &mut all[..]);
        all
    }

    /// The local rank of this process on its machine.
    pub fn local_rank(&self) -> usize {
        for v in [
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "MPI_LOCALRANKID",
            "SLURM_LOCALID",
            "PMIX_LOCAL_RANK",
        ] {
            if let Some(r) = std::env::var(v).ok().and_then(|s| s.parse().ok()) {
                return r;
            }
        }
        let _g = self.lock();
        self.comm.0.split_shared(self.rank as c_int).rank() as usize
    }

    /// Ends the whole job with `code` (`MPI_Abort`).
    pub fn abort(&self, code: c_int) -> ! {
        self.comm.0.abort(code)
    }
}

impl Collective for MpiCollective {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world(&self) -> usize {
        self.world
    }

    fn all_reduce_f64(&self, xs: &mut [f64]) -> lmrl_rl::Result<()> {
        if self.world == 1 || xs.is_empty() {
            return Ok(());
        }
        // Gathered and added in rank order: the same bits on every rank.
        let all = self.gather_fixed(xs);
        xs.iter_mut().for_each(|x| *x = 0.0);
        for part in all.chunks_exact(xs.len()) {
            xs.iter_mut().zip(part).for_each(|(x, y)| *x += y);
        }
        Ok(())
    }

    fn all_reduce_f32(&self, xs: &mut [f32]) -> lmrl_rl::Result<()> {
        if self.world == 1 {
            return Ok(());
        }
        // Summed once, on rank 0, and broadcast: every rank gets the same gradients.
        let _g = self.lock();
        let root = self.comm.0.process_at_rank(0);
        for piece in xs.chunks_mut(CHUNK) {
            if self.rank == 0 {
                let mine = piece.to_vec();
                root.reduce_into_root(&mine[..], piece, mpi::collective::SystemOperation::sum());
            } else {
                root.reduce_into(&piece[..], mpi::collective::SystemOperation::sum());
            }
            root.broadcast_into(piece);
        }
        Ok(())
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> lmrl_rl::Result<Vec<Vec<u8>>> {
        if self.world == 1 {
            return Ok(vec![mine.to_vec()]);
        }
        let len = c_int::try_from(mine.len())
            .map_err(|_| collective_err(format!("{} bytes is too much to gather", mine.len())))?;
        let counts = self.gather_fixed(&[len]);
        let displs: Vec<c_int> = counts
            .iter()
            .scan(0, |acc, &n| {
                let d = *acc;
                *acc += n;
                Some(d)
            })
            .collect();
        let total: usize = counts.iter().map(|&n| n as usize).sum();
        let mut buf = vec![0u8; total];
        {
            let mut part = PartitionMut::new(&mut buf[..], &counts[..], &displs[..]);
            let _g = self.lock();
            self.comm.0.all_gather_varcount_into(mine, &mut part);
        }
        Ok(counts
            .iter()
            .zip(&displs)
            .map(|(&n, &d)| buf[d as usize..(d + n) as usize].to_vec())
            .collect())
    }

    fn split(&self) -> lmrl_rl::Result<Arc<dyn Collective>> {
        let w = world().map_err(|e| collective_err(e.to_string()))?;
        let dup = {
            let _g = self.lock();
            self.comm.0.duplicate()
        };
        Ok(Arc::new(Self::from_comm(dup, w)))
    }
}

/// [`crate::parallel::run_ranks`] under an MPI launcher: this process is one rank, on the
/// device `--device` names or, without an index, the one of its local rank. A failure on any
/// rank of a job of several prints the error with the rank and aborts the job.
pub fn run<R>(device: Option<&str>, body: impl Fn(RankContext) -> Result<R>) -> Result<R> {
    let c = MpiCollective::world()?;
    let (rank, world) = (c.rank, c.world);
    let fail = |e: TrainError| -> ! {
        eprintln!(
            "error on rank {rank} of {world} (MPI): {}\nstopping every rank (MPI_Abort); the last \
             checkpoint is intact, continue with --resume",
            crate::error::chain(&e)
        );
        c.abort(1)
    };
    if device.is_some_and(|d| d.contains(',')) {
        let e = TrainError::Device {
            spec: device.unwrap_or_default().to_string(),
            reason: "under MPI each rank takes one device: give one (`cuda` picks the local \
                     rank's GPU), not a list"
                .into(),
        };
        if world > 1 {
            fail(e)
        }
        return Err(e);
    }
    let local = c.local_rank();
    let device = match crate::device::select_rank_device(device, local) {
        Ok(d) => d,
        Err(e) if world > 1 => fail(e),
        Err(e) => return Err(e),
    };
    if rank == 0 && world > 1 {
        eprintln!("MPI: {world} ranks");
    }
    let collective: Arc<dyn Collective> = Arc::new(MpiCollective::world()?);
    match body(RankContext { device, collective }) {
        Err(e) if world > 1 => fail(e),
        r => r,
    }
}
