//! How many CPU threads a process computes with: `--threads`, else its share of the machine as
//! the launcher tells it. libtorch (through OpenMP) otherwise starts a pool of every core in
//! every process, and processes started side by side (`xargs -P`, GNU parallel, several ranks on
//! a node, a sweep's trials) then fight over the same cores, spinning: three projections on two
//! cores took ten times as long as with a thread each.
//!
//! The share, in order: `--threads`; Slurm's `SLURM_CPUS_PER_TASK`; `OMP_NUM_THREADS` (what
//! torchrun and `sweep --cpus-per-trial` set; for libtorch's threads only, see
//! [`ThreadArgs::workers`]); else the CPUs this process may run on — its affinity mask and
//! cgroup quota, which `taskset`, Slurm's CPU binding and containers set — divided
//! by the ranks on this node (`LOCAL_WORLD_SIZE` under torchrun, `SLURM_NTASKS_PER_NODE`).

/// `--threads N`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ThreadArgs {
    /// CPU threads this process computes with (libtorch's intra-op pool) [default:
    /// SLURM_CPUS_PER_TASK, else OMP_NUM_THREADS, else the CPUs it may run on (taskset, Slurm's
    /// binding, cgroups) divided by the ranks on this node]. Give each of N processes run side
    /// by side (xargs -P N, parallel -j N) its share: --threads $((CPUS / N)).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: Option<u32>,
}

/// Where a [`Share`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    Flag,
    Slurm,
    Omp,
    /// The CPUs this process may run on, divided by the ranks on its node.
    Cpus {
        cpus: usize,
        ranks: usize,
    },
}

/// A thread count and its origin, as start lines show it: `2 (--threads)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    pub threads: usize,
    pub from: From,
}

impl std::fmt::Display for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{} CPU thread(s) (", self.threads)?;
        match self.from {
            From::Flag => write!(f, "--threads)"),
            From::Slurm => write!(f, "SLURM_CPUS_PER_TASK)"),
            From::Omp => write!(f, "OMP_NUM_THREADS)"),
            From::Cpus { cpus, ranks: 1 } => write!(f, "the {cpus} CPU(s) it may use)"),
            From::Cpus { cpus, ranks } => write!(f, "{cpus} CPUs / {ranks} ranks on the node)"),
        }
    }
}

impl ThreadArgs {
    /// libtorch's intra-op threads.
    pub fn share(&self) -> Share {
        share(
            self.threads,
            &env_count,
            cpus(),
            local_ranks(&env_count),
            true,
        )
    }

    /// Threads of the tool's own (image decoding): as [`ThreadArgs::share`] but not from
    /// `OMP_NUM_THREADS`, which torchrun sets to 1 for libtorch's sake.
    pub fn workers(&self) -> Share {
        share(
            self.threads,
            &env_count,
            cpus(),
            local_ranks(&env_count),
            false,
        )
    }
}

/// The share of a process: `given`, else `SLURM_CPUS_PER_TASK`, else (with `omp`)
/// `OMP_NUM_THREADS`, else `cpus / ranks` (at least one).
pub fn share(
    given: Option<u32>,
    var: &dyn Fn(&str) -> Option<usize>,
    cpus: usize,
    ranks: usize,
    omp: bool,
) -> Share {
    let (threads, from) = if let Some(n) = given {
        (n as usize, From::Flag)
    } else if let Some(n) = var("SLURM_CPUS_PER_TASK") {
        (n, From::Slurm)
    } else if let Some(n) = omp.then(|| var("OMP_NUM_THREADS")).flatten() {
        (n, From::Omp)
    } else {
        let ranks = ranks.max(1);
        ((cpus / ranks).max(1), From::Cpus { cpus, ranks })
    };
    Share { threads, from }
}

/// The CPUs this process may run on (its affinity mask, within its cgroup's quota).
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The ranks of a run on this node, as the launcher says (1 without one).
pub fn local_ranks(var: &dyn Fn(&str) -> Option<usize>) -> usize {
    var("LOCAL_WORLD_SIZE")
        .or_else(|| var("SLURM_NTASKS_PER_NODE"))
        .unwrap_or(1)
}

/// A positive count from the environment (its leading digits: Slurm writes "2(x3)").
pub fn env_count(k: &str) -> Option<usize> {
    std::env::var(k).ok().and_then(|v| {
        let digits: String = v.trim().chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<usize>().ok().filter(|n| *n > 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_follows_the_flag_slurm_omp_then_the_cpus_per_rank() {
        let env = |pairs: &'static [(&'static str, usize)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
        };
        static BOTH: [(&str, usize); 2] = [("SLURM_CPUS_PER_TASK", 6), ("OMP_NUM_THREADS", 1)];
        let threads = |given, e: &dyn Fn(&str) -> Option<usize>, omp| {
            share(given, e, 16, local_ranks(e), omp).threads
        };
        assert_eq!(threads(Some(3), &env(&BOTH), true), 3);
        assert_eq!(threads(None, &env(&BOTH), true), 6);
        // torchrun's OMP_NUM_THREADS=1 is for libtorch's threads, not the decoders'.
        assert_eq!(threads(None, &env(&BOTH[1..]), true), 1);
        assert_eq!(threads(None, &env(&BOTH[1..]), false), 16);
        static TORCHRUN: [(&str, usize); 1] = [("LOCAL_WORLD_SIZE", 4)];
        assert_eq!(threads(None, &env(&TORCHRUN), true), 4);
        assert_eq!(
            share(None, &env(&[]), 2, 4, true).threads,
            1,
            "at least one"
        );
        assert_eq!(
            share(None, &env(&TORCHRUN), 16, 4, true).to_string(),
            "4 CPU thread(s) (16 CPUs / 4 ranks on the node)"
        );
        assert_eq!(
            share(Some(2), &env(&[]), 16, 1, true).to_string(),
            "2 CPU thread(s) (--threads)"
        );
    }

    #[test]
    fn counts_take_the_leading_digits_and_refuse_zero() {
        // SAFETY: (edition 2024 marks these unsafe) the variables are this test's own.
        unsafe {
            std::env::set_var("SHARDKIT_TEST_COUNT_A", "2(x3)");
            std::env::set_var("SHARDKIT_TEST_COUNT_B", "0");
        }
        assert_eq!(env_count("SHARDKIT_TEST_COUNT_A"), Some(2));
        assert_eq!(env_count("SHARDKIT_TEST_COUNT_B"), None);
        assert_eq!(env_count("SHARDKIT_TEST_COUNT_UNSET"), None);
    }
}
