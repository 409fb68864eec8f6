//! Data-parallel runs: which ranks a run has, and what the loop shares between them.
//!
//! A run is one or more ranks, each running the same loop ([`crate::Trainer`]) on its
//! contiguous share of every batch with a full copy of the learners:
//!
//! - one process on one device (the default): [`lmrl_rl::SingleProcess`];
//! - a `--device` list (`cuda:0,cuda:1`, or `cpu,cpu` to try it on a CPU): one thread per
//!   device in this process, joined by an [`lmrl_rl::LocalGroup`] (with the `cuda` backend,
//!   gradients are summed by burn's own device collective, `burn::tensor::distributed`);
//! - built with the `mpi` feature and started by `mpirun`/`srun`: one process per rank, joined
//!   by MPI (`crate::mpi`), each on the device `--device` names or, without an index, the
//!   GPU of its local rank.
//!
//! Rank 0 alone opens the run directory (lock, resume decision) and writes the config,
//! metrics, samples, plots and checkpoints; it tells the other ranks where the run starts,
//! and every rank reads the checkpoint to resume. A rank that fails stops the run: in one
//! process every other rank's next collective returns its error; under MPI the failing rank
//! prints its error and aborts the job (`MPI_Abort`), as MPI does when a rank dies.
use std::sync::{Arc, Mutex};

use burn::tensor::Device;
use lmrl_rl::dist::{Collective, all_gather_json, broadcast_json, sum_f64};
use lmrl_rl::{CoryIterationStats, CoryTexts, LocalGroup, Role, SingleProcess};

use crate::copies::Copies;
pub use crate::device::RankContext;
use crate::device::select_devices;
use crate::error::{Result, TrainError};
use crate::session::{RunDir, Start};

/// Runs `body` once per rank of the run that `--device` (`device`) and the environment ask
/// for (see the module docs) and gives back rank 0's result, or the error of a rank that
/// failed (rank 0's if it failed too).
pub fn run_ranks<R: Send>(
    device: Option<&str>,
    body: impl Fn(RankContext) -> Result<R> + Sync,
) -> Result<R> {
    #[cfg(feature = "mpi")]
    if crate::mpi::launched() {
        return crate::mpi::run(device, body);
    }
    let devices = select_devices(device)?;
    if devices.len() == 1 {
        let device = devices.into_iter().next().expect("one device");
        return body(RankContext {
            device,
            collective: Arc::new(SingleProcess),
        });
    }
    run_local(devices, body)
}

/// One thread per device, joined by a [`LocalGroup`].
fn run_local<R: Send>(
    devices: Vec<Device>,
    body: impl Fn(RankContext) -> Result<R> + Sync,
) -> Result<R> {
    let world = devices.len();
    eprintln!("data parallel: {world} ranks in this process, one per device");
    let groups = LocalGroup::new(world);
    let collectives = device_collectives(&devices, &groups);
    let results: Vec<Mutex<Option<Result<R>>>> = (0..world).map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for (rank, (device, collective)) in devices.iter().zip(collectives).enumerate() {
            let (body, group, slot) = (&body, &groups[rank], &results[rank]);
            std::thread::Builder::new()
                .name(format!("rank-{rank}"))
                .spawn_scoped(s, move || {
                    let ctx = RankContext {
                        device: device.clone(),
                        collective,
                    };
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(ctx)))
                        .unwrap_or_else(|p| {
                            let msg = p
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_else(|| "panicked".into());
                            Err(TrainError::Rank {
                                rank,
                                world,
                                reason: format!("panicked: {msg}"),
                            })
                        });
                    if let Err(e) = &r {
                        group.fail(&crate::error::chain(e));
                    }
                    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                })
                .expect("a rank's thread starts");
        }
    });
    let mut results: Vec<Result<R>> = results
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .expect("every rank stored its result")
        })
        .collect();
    let first = results.remove(0)?;
    for (k, r) in results.into_iter().enumerate() {
        if let Err(e) = r {
            return Err(TrainError::Rank {
                rank: k + 1,
                world,
                reason: crate::error::chain(&e),
            });
        }
    }
    Ok(first)
}

/// The collectives of a local group: the host path, or with the `cuda` backend burn's device
/// all-reduce for the gradients.
fn device_collectives(devices: &[Device], groups: &[LocalGroup]) -> Vec<Arc<dyn Collective>> {
    // burn 0.22 implements its collectives for the CUDA backend only (the others panic).
    if cfg!(feature = "cuda")
        && let Some(c) = crate::burn_collective::collectives(devices, groups)
    {
        return c;
    }
    groups
        .iter()
        .map(|g| Arc::new(g.clone()) as Arc<dyn Collective>)
        .collect()
}

/// Rank 0 opens the run directory (`open`, called on rank 0 only) and every rank learns where
/// the run starts (the other ranks restore the checkpoint that rank 0 picks among the
/// candidates, [`crate::Trainer::train_rank`]); the other ranks get no directory. A failure on rank 0 is its error there
/// and a short note on the others.
pub fn open_run_dir(
    c: &dyn Collective,
    open: impl FnOnce() -> Result<(RunDir, Start)>,
) -> Result<(Option<RunDir>, Start)> {
    type Shared = std::result::Result<Option<Vec<(usize, std::path::PathBuf)>>, String>;
    if c.world() == 1 {
        let (d, s) = open()?;
        return Ok((Some(d), s));
    }
    if c.rank() == 0 {
        let opened = open();
        let shared: Shared = match &opened {
            Ok((_, Start::Fresh)) => Ok(None),
            Ok((_, Start::Resume { candidates })) => Ok(Some(candidates.clone())),
            Err(e) => Err(crate::error::chain(e)),
        };
        let _: Shared = broadcast_json(c, 0, &shared)?;
        let (d, s) = opened?;
        return Ok((Some(d), s));
    }
    let shared: Shared = broadcast_json(c, 0, &Ok(None))?;
    match shared {
        Ok(None) => Ok((None, Start::Fresh)),
        Ok(Some(candidates)) => Ok((None, Start::Resume { candidates })),
        Err(reason) => Err(TrainError::Rank {
            rank: 0,
            world: c.world(),
            reason,
        }),
    }
}

/// Makes every learner of `copies` a rank of `c` (nothing to do in one process).
pub fn join_group<M: crate::model::TrainModel>(
    copies: &mut Copies<M>,
    c: &dyn Collective,
) -> Result<()> {
    if c.world() == 1 {
        return Ok(());
    }
    match copies {
        Copies::Single(l) => l.set_collective(c.split()?)?,
        Copies::Cory(t) => t.set_collective(c)?,
    }
    Ok(())
}

/// Whether `flag` is set on any rank.
pub fn any_rank(c: &dyn Collective, flag: bool) -> Result<bool> {
    if c.world() == 1 {
        return Ok(flag);
    }
    let [n] = sum_f64(c, [f64::from(u8::from(flag))])?;
    Ok(n > 0.0)
}

/// Turns the statistics of this rank's share of a CORY iteration (`local` of `global` prompts)
/// into the whole batch's: every text and task reward gathered in batch order, and each copy's
/// means (task reward, trained score, the observer's plain-query reward and KL) taken over the
/// whole batch. The learners' own step statistics are already the batch's.
pub fn gather_cory_stats(
    c: &dyn Collective,
    stats: &mut CoryIterationStats,
    local: usize,
    global: usize,
) -> lmrl_rl::Result<()> {
    if c.world() == 1 {
        return Ok(());
    }
    let t = &stats.texts;
    let local_samples = t.queries.len();
    stats.texts = CoryTexts {
        queries: all_gather_json(c, &t.queries)?,
        pioneer_responses: all_gather_json(c, &t.pioneer_responses)?,
        observer_prompts: all_gather_json(c, &t.observer_prompts)?,
        observer_responses: all_gather_json(c, &t.observer_responses)?,
        pioneer_rewards: all_gather_json(c, &t.pioneer_rewards)?,
        observer_rewards: all_gather_json(c, &t.observer_rewards)?,
    };
    let t = &stats.texts;
    let mean = |xs: &[f32]| xs.iter().map(|&x| f64::from(x)).sum::<f64>() / xs.len().max(1) as f64;
    let all_samples = t.queries.len().max(1) as f64;
    for m in &mut stats.agents {
        let beta = m.stats.kl_coef as f32;
        let own = match m.role {
            Role::Pioneer => &t.pioneer_rewards,
            Role::Observer => &t.observer_rewards,
        };
        m.task_reward = mean(own) as f32;
        m.combined_reward = m.task_reward - beta * m.kl;
        let [ts] = sum_f64(c, [f64::from(m.trained_score) * local_samples as f64])?;
        m.trained_score = (ts / all_samples) as f32;
        let plain = match (m.role, m.query_only_reward, m.query_only_kl) {
            (Role::Pioneer, _, _) => Some((m.task_reward, m.kl)),
            (Role::Observer, Some(r), Some(k)) => {
                // `CoryTrainer` measures it on one sample per prompt.
                let n = local as f64;
                let [r, k] = sum_f64(c, [f64::from(r) * n, f64::from(k) * n])?;
                let n = global.max(1) as f64;
                Some(((r / n) as f32, (k / n) as f32))
            }
            (Role::Observer, _, _) => None,
        };
        m.query_only_reward = plain.map(|(r, _)| r);
        m.query_only_kl = plain.map(|(_, k)| k);
        m.query_only_combined = plain.map(|(r, k)| r - beta * k);
    }
    Ok(())
}
