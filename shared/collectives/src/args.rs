//! `DistArgs`: the distributed flags every rank-aware tool flattens into its `Cli` (feature
//! `clap`). Unset flags fall back to the launcher's environment (see [`crate::rendezvous`]).

use std::time::Duration;

use crate::{Backend, InitMethod, Options, Transport};

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Distributed")]
pub struct DistArgs {
    /// Rendezvous: env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun sets them, or
    /// Slurm's SLURM_PROCID/SLURM_NTASKS/SLURM_STEP_NODELIST), tcp://HOST:PORT, or
    /// file:///shared/path (rank 0 publishes its address there; works across machines on a shared
    /// filesystem).
    #[arg(long, value_name = "URL", default_value = "env://")]
    pub init_method: InitMethod,
    /// This process's rank [default: $RANK, else $SLURM_PROCID, else 0].
    #[arg(long)]
    pub rank: Option<usize>,
    /// Number of ranks [default: $WORLD_SIZE, else $SLURM_NTASKS, else 1].
    #[arg(long)]
    pub world_size: Option<usize>,
    /// Host of rank 0's store for env:// [default: $MASTER_ADDR, else the first Slurm node, else
    /// 127.0.0.1].
    #[arg(long)]
    pub master_addr: Option<String>,
    /// Port of rank 0's store for env:// [default: $MASTER_PORT, else 20000 + (SLURM_JOB_ID +
    /// 1009·SLURM_STEP_ID) mod 20000 under Slurm, else 29500].
    #[arg(long)]
    pub master_port: Option<u16>,
    /// The run's identity, the same on all its ranks: a rank of another run that reaches this
    /// run's store is refused before it joins [default: TORCHELASTIC_RUN_ID under torchrun
    /// (unless "none"), else SLURM_JOB_ID.SLURM_STEP_ID in a Slurm job, whichever variables name
    /// the rank (a job script may export RANK/WORLD_SIZE); otherwise rank 0's token, which any
    /// rank accepts].
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Longest wait for a peer, in seconds: rendezvous, silence within a collective, NCCL
    /// completion. A rank that dies or never arrives fails the others within this time.
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    pub dist_timeout_secs: f64,
    /// Engine for CUDA tensors: auto (NCCL when libnccl.so.2 loads, else host copies over the
    /// CPU ring), nccl, or cpu. CPU tensors always go the CPU way (--transport).
    #[arg(long, value_name = "NAME", default_value = "auto")]
    pub backend: Backend,
    /// How CPU collectives travel between ranks: auto (shared memory when every rank is on one
    /// host, found at the rendezvous; over several hosts with two or more ranks on one, shared
    /// memory inside each host and TCP between the hosts' lowest ranks, engine cpu-shm+tcp; else
    /// the TCP ring), shm (shared memory: a memfd segment the ranks of a host map, with TCP
    /// between hosts when there are several), or tcp (the TCP ring, like gloo). Across hosts,
    /// shared memory needs each host's ranks consecutive, as torchrun and srun place them;
    /// otherwise the TCP ring is used (engine cpu-ring-interleaved). Every rank must be given
    /// the same; results are bit-identical whichever is used.
    #[arg(long, value_name = "NAME", default_value = "auto")]
    pub transport: Transport,
}

impl DistArgs {
    pub fn options(&self) -> Options {
        Options {
            init_method: self.init_method.clone(),
            rank: self.rank,
            world_size: self.world_size,
            master_addr: self.master_addr.clone(),
            master_port: self.master_port,
            run_id: self.run_id.clone(),
            timeout: Duration::from_secs_f64(self.dist_timeout_secs.max(0.001)),
            transport: self.transport,
            should_stop: crate::never,
        }
    }
}
