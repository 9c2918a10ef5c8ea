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
//! by the ranks on this node (`LOCAL_WORLD_SIZE` under torchrun, `SLURM_NTASKS_PER_NODE`), or
//! by the processes of this program running side by side ([`side_by_side`]: `xargs -P`, GNU
//! parallel), whichever is more.

/// `--threads N`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ThreadArgs {
    /// CPU threads this process computes with (libtorch's intra-op pool) [default:
    /// SLURM_CPUS_PER_TASK, else OMP_NUM_THREADS, else the CPUs it may run on (taskset, Slurm's
    /// binding, cgroups) divided by the ranks on this node, or by the processes of this program
    /// running side by side when it starts (started by one xargs -P or GNU parallel), whichever
    /// is more]. Never more than the CPUs it may use (a larger count is capped there). The
    /// start line says which. Processes started later are not counted: give each of N its
    /// share, --threads $((CPUS / N)), to be sure. Fewer when the CPUs are busy as it starts,
    /// except where the count changes the results (training on the CPU).
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
    /// The CPUs this process may run on, divided by the processes of this program side by
    /// side (itself included).
    SideBySide {
        cpus: usize,
        processes: usize,
    },
}

/// A thread count and its origin, as start lines show it: `2 (--threads)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    pub threads: usize,
    pub from: From,
    /// What the origin asked for when it was more than the CPUs this process may use (the
    /// threads are capped there: a pool of 100,000 threads on two cores answers no signal).
    pub capped_from: Option<usize>,
    /// Fewer than the share because the CPUs were busy when the process started (only when
    /// nothing said how many: see [`ThreadArgs::share`]): the share it would have taken and the
    /// CPUs that were free; or, where the count was kept (see [`ThreadArgs::exact_share`]),
    /// that they were busy.
    pub busy: Option<Busy>,
}

/// CPUs found busy at the start: libtorch's OpenMP threads spin while they wait for each other,
/// and a pool larger than the free CPUs then waits for cores other work holds (a projection
/// with two threads on two busy cores took 30 s, with one 0.9 s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Busy {
    pub share: usize,
    pub free: f64,
    /// The share was kept, not cut: the count changes the results (see
    /// [`ThreadArgs::exact_share`]).
    pub kept: bool,
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
            From::SideBySide { cpus, processes } => write!(
                f,
                "{cpus} CPU(s) / {processes} processes of this program side by side; --threads sets it)"
            ),
        }?;
        if let Some(asked) = self.capped_from {
            write!(
                f,
                ", capped: {asked} asked, more than the {} CPU(s) it may use",
                self.threads
            )?;
        }
        match self.busy {
            Some(Busy {
                share,
                free,
                kept: false,
            }) => write!(
                f,
                ", not {share}: {free:.1} CPU(s) were free when it started (--threads sets it)"
            ),
            Some(Busy {
                free, kept: true, ..
            }) => write!(
                f,
                ", though {free:.1} CPU(s) were free when it started: not fewer, as on the CPU \
                 the count changes the results' last bits (--threads sets it; fewer are faster \
                 on busy CPUs)"
            ),
            None => Ok(()),
        }
    }
}

impl ThreadArgs {
    /// libtorch's intra-op threads.
    pub fn share(&self) -> Share {
        self.of(true, false)
    }

    /// libtorch's intra-op threads where the count is part of the arithmetic (training on the
    /// CPU: a reduction split over 2 threads adds in another order than over 1, and a run's
    /// weights then differ from a run's with the same seed, or from the run it resumes): as
    /// [`ThreadArgs::share`], but never fewer because the CPUs were busy as it started, which
    /// would make the results depend on what else ran (it says so instead).
    pub fn exact_share(&self) -> Share {
        self.of(true, true)
    }

    /// Threads of the tool's own (image decoding): as [`ThreadArgs::share`] but not from
    /// `OMP_NUM_THREADS`, which torchrun sets to 1 for libtorch's sake.
    pub fn workers(&self) -> Share {
        self.of(false, false)
    }

    fn of(&self, omp: bool, exact: bool) -> Share {
        let ranks = local_ranks(&env_count);
        let s = share(self.threads, &env_count, cpus(), ranks, omp);
        match s.from {
            // Only when nothing else said.
            From::Cpus { cpus, ranks } => {
                let s = match side_by_side() {
                    n if n > ranks => Share {
                        threads: (cpus / n).max(1),
                        from: From::SideBySide { cpus, processes: n },
                        capped_from: None,
                        busy: None,
                    },
                    _ => s,
                };
                // libtorch's OpenMP threads spin; the decoding threads sleep while they wait.
                match (omp, exact) {
                    (true, false) => fewer_when_busy(s, free_cpus()),
                    (true, true) => noting_busy(s, free_cpus()),
                    (false, _) => s,
                }
            }
            _ => s,
        }
    }
}

impl Share {
    /// This share once the run's ranks know that `ranks` of them share this host (they compare
    /// hosts at the rendezvous): the CPUs divided among them, when nothing else said how many
    /// (no flag, Slurm, OpenMP or launcher count: ranks started by hand with --rank and
    /// --world-size each took every CPU), and never more than the share already was.
    pub fn among_host_ranks(self, ranks: usize) -> Share {
        match self.from {
            From::Cpus { cpus, ranks: 1 } | From::SideBySide { cpus, .. } if ranks > 1 => {
                let divided = (cpus / ranks).max(1);
                Share {
                    threads: self.threads.min(divided),
                    from: From::Cpus { cpus, ranks },
                    // Still cut below the division by busy CPUs, or still more than were
                    // free: it says so.
                    busy: self
                        .busy
                        .filter(|b| match b.kept {
                            false => self.threads < divided,
                            true => rounded(b.free) < divided,
                        })
                        .map(|b| Busy {
                            share: divided,
                            ..b
                        }),
                    ..self
                }
            }
            _ => self,
        }
    }
}

/// `share` cut to the CPUs that were `free` (rounded, at least one) when they are fewer.
pub fn fewer_when_busy(share: Share, free: Option<f64>) -> Share {
    match free {
        Some(free) if rounded(free) < share.threads => Share {
            threads: rounded(free),
            busy: Some(Busy {
                share: share.threads,
                free,
                kept: false,
            }),
            ..share
        },
        _ => share,
    }
}

/// `share` as it is, noting that fewer CPUs than its threads were `free`.
pub fn noting_busy(share: Share, free: Option<f64>) -> Share {
    match free {
        Some(free) if rounded(free) < share.threads => Share {
            busy: Some(Busy {
                share: share.threads,
                free,
                kept: true,
            }),
            ..share
        },
        _ => share,
    }
}

/// Free CPUs as a thread count: rounded, at least one.
fn rounded(free: f64) -> usize {
    free.round().max(1.0) as usize
}

/// How long [`free_cpus`] watches the CPUs.
const WATCH: std::time::Duration = std::time::Duration::from_millis(40);

/// The CPUs this process may run on that were idle over a short while now (in CPUs: 1.5 is
/// one idle and one half busy), from /proc/stat; None where it cannot tell. Measured once, the
/// first time it is asked.
pub fn free_cpus() -> Option<f64> {
    static FREE: std::sync::OnceLock<Option<f64>> = std::sync::OnceLock::new();
    *FREE.get_or_init(|| {
        let allowed = allowed_cpus()?;
        let before = std::fs::read_to_string("/proc/stat").ok()?;
        std::thread::sleep(WATCH);
        let after = std::fs::read_to_string("/proc/stat").ok()?;
        idle_between(&before, &after, &allowed)
    })
}

/// The CPUs in this process's affinity mask.
fn allowed_cpus() -> Option<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it for this
    // process (pid 0) and CPU_ISSET reads it within its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some(
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect(),
        )
    }
}

/// The idle CPUs of `allowed` between two readings of /proc/stat: each one's idle and
/// iowait time over its whole time in between, summed. None when a reading lacks them or no
/// time passed.
pub fn idle_between(before: &str, after: &str, allowed: &[usize]) -> Option<f64> {
    // cpuN user nice system idle iowait irq softirq steal ...: (idle + iowait, total) by N.
    let times = |stat: &str| -> std::collections::HashMap<usize, (u64, u64)> {
        stat.lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let n = f.next()?.strip_prefix("cpu")?.parse::<usize>().ok()?;
                let v: Vec<u64> = f.take(8).map(|x| x.parse().unwrap_or(0)).collect();
                let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
                Some((n, (idle, v.iter().sum())))
            })
            .collect()
    };
    let (a, b) = (times(before), times(after));
    let mut free = 0.0;
    let mut seen = false;
    for cpu in allowed {
        let (Some(&(i0, t0)), Some(&(i1, t1))) = (a.get(cpu), b.get(cpu)) else {
            continue;
        };
        if t1 > t0 {
            free += i1.saturating_sub(i0) as f64 / (t1 - t0) as f64;
            seen = true;
        }
    }
    seen.then_some(free)
}

/// This process and the others running the same program beside it now, started by the same
/// `xargs -P` (their parent) or the same GNU parallel (its `PARALLEL_PID`), which compete for
/// the same CPUs: each running a pool of every core, three projections on two cores took ten
/// times as long as with a thread each. 1 when alone, when started otherwise, or when /proc
/// cannot tell. Counted once, the first time it is asked (libtorch's threads and the decoding
/// threads then share one count); a process started after that is not counted.
pub fn side_by_side() -> usize {
    static COUNT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *COUNT.get_or_init(count_side_by_side)
}

fn count_side_by_side() -> usize {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return 1;
    };
    let me = std::process::id();
    // Siblings under xargs only: other parents (a shell, a test harness) start processes of
    // one program for other reasons.
    let parent = parent_of("self").filter(|p| {
        std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "xargs")
    });
    let parallel = std::env::var("PARALLEL_PID")
        .ok()
        .map(|p| format!("PARALLEL_PID={p}").into_bytes());
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 1;
    };
    let others = procs
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == exe))
        .filter(|pid| {
            let same_parent = parent.is_some() && parent_of(&pid.to_string()) == parent;
            same_parent
                || parallel.as_ref().is_some_and(|var| {
                    std::fs::read(format!("/proc/{pid}/environ"))
                        .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == var.as_slice()))
                })
        })
        .count();
    1 + others
}

/// The parent of a process (`self` or a pid), from /proc/PID/stat.
fn parent_of(pid: &str) -> Option<u32> {
    parent_in(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The parent in a /proc/PID/stat line: "PID (COMMAND) STATE PPID ...", where the command may
/// hold spaces and parentheses.
fn parent_in(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The share of a process: `given`, else `SLURM_CPUS_PER_TASK`, else (with `omp`)
/// `OMP_NUM_THREADS`, else `cpus / ranks` (at least one); never more than `cpus`, whatever
/// the flag or the environment asks.
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
    let cpus = cpus.max(1);
    Share {
        threads: threads.min(cpus),
        from,
        capped_from: (threads > cpus).then_some(threads),
        busy: None,
    }
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
    fn a_share_past_the_cpus_is_capped_and_says_so() {
        let env = |k: &str| match k {
            "SLURM_CPUS_PER_TASK" => Some(100_000),
            _ => None,
        };
        let from_slurm = share(None, &env, 2, 1, true);
        assert_eq!(from_slurm.threads, 2);
        assert_eq!(from_slurm.capped_from, Some(100_000));
        assert_eq!(
            from_slurm.to_string(),
            "2 CPU thread(s) (SLURM_CPUS_PER_TASK), capped: 100000 asked, more than the 2 CPU(s) \
             it may use"
        );
        let from_flag = share(Some(u32::MAX), &|_| None, 4, 1, true);
        assert_eq!(
            (from_flag.threads, from_flag.capped_from),
            (4, Some(u32::MAX as usize))
        );
        let omp = |k: &str| (k == "OMP_NUM_THREADS").then_some(usize::MAX);
        assert_eq!(share(None, &omp, 3, 1, true).threads, 3);
        assert_eq!(share(Some(2), &|_| None, 4, 1, true).capped_from, None);
    }

    #[test]
    fn a_process_alone_is_one_and_its_parent_is_read_past_its_name() {
        // (Processes side by side: generate's CLI tests start three under xargs -P3.)
        assert_eq!(side_by_side(), 1, "no other process runs this test binary");
        assert_eq!(parent_of("self"), Some(std::os::unix::process::parent_id()));
        assert_eq!(parent_in("12 (a) (b c) S 345 12 12 0"), Some(345));
        assert_eq!(parent_in("12 (x"), None);
    }

    #[test]
    fn busy_cpus_cut_the_share_to_the_free_ones() {
        let before = "cpu  10 0 10 100 0 0 0 0 0 0\ncpu0 5 0 5 50 0 0 0 0 0 0\n\
                      cpu1 5 0 5 50 0 0 0 0 0 0\nintr 1 2\n";
        // cpu0 idle all along (100 of 100), cpu1 busy (10 of 100 idle, 5 of them iowait).
        let after = "cpu  110 0 110 190 5 0 0 0 0 0\ncpu0 5 0 5 150 0 0 0 0 0 0\n\
                     cpu1 95 0 5 55 5 0 0 0 0 0\nintr 1 2\n";
        let free = idle_between(before, after, &[0, 1]).unwrap();
        assert!((free - 1.1).abs() < 1e-9, "{free}");
        assert_eq!(idle_between(before, after, &[1]), Some(0.1));
        assert_eq!(
            idle_between(before, before, &[0, 1]),
            None,
            "no time passed"
        );
        assert_eq!(idle_between("", after, &[0]), None);
        let two = share(None, &|_| None, 2, 1, true);
        let cut = fewer_when_busy(two, Some(0.1));
        assert_eq!((cut.threads, cut.busy.map(|b| b.share)), (1, Some(2)));
        assert_eq!(
            cut.to_string(),
            "1 CPU thread(s) (the 2 CPU(s) it may use), not 2: 0.1 CPU(s) were free when it \
             started (--threads sets it)"
        );
        assert_eq!(fewer_when_busy(two, Some(1.6)), two, "1.6 free rounds to 2");
        assert_eq!(fewer_when_busy(two, None), two);
        // What the machine has is a number of CPUs at most (read from this process's /proc).
        if let Some(f) = free_cpus() {
            assert!((0.0..=cpus() as f64 + 0.01).contains(&f), "{f}");
        }
    }

    #[test]
    fn ranks_found_on_one_host_divide_its_cpus_unless_something_said_how_many() {
        let alone = share(None, &|_| None, 8, 1, true);
        let four = alone.among_host_ranks(4);
        assert_eq!(four.threads, 2);
        assert_eq!(
            four.to_string(),
            "2 CPU thread(s) (8 CPUs / 4 ranks on the node)"
        );
        assert_eq!(alone.among_host_ranks(1), alone);
        assert_eq!(alone.among_host_ranks(16).threads, 1, "at least one");
        // A flag, Slurm or a launcher's count already decided.
        let flag = share(Some(8), &|_| None, 8, 1, true);
        assert_eq!(flag.among_host_ranks(4), flag);
        let torchrun = share(None, &|_| None, 8, 2, true);
        assert_eq!(torchrun.among_host_ranks(4), torchrun);
        // Busy CPUs had cut it further already: the smaller stays, and both are said.
        let busy = fewer_when_busy(alone, Some(1.0)).among_host_ranks(2);
        assert_eq!(busy.threads, 1);
        assert_eq!(
            busy.to_string(),
            "1 CPU thread(s) (8 CPUs / 2 ranks on the node), not 4: 1.0 CPU(s) were free when it \
             started (--threads sets it)"
        );
        let less_busy = fewer_when_busy(alone, Some(6.0)).among_host_ranks(2);
        assert_eq!((less_busy.threads, less_busy.busy), (4, None));
        // Where the count was kept, the note stays only while the free CPUs are fewer.
        let kept = noting_busy(alone, Some(1.0)).among_host_ranks(2);
        assert_eq!((kept.threads, kept.busy.map(|b| b.kept)), (4, Some(true)));
        let kept = noting_busy(alone, Some(6.0)).among_host_ranks(2);
        assert_eq!((kept.threads, kept.busy), (4, None));
    }

    #[test]
    fn an_exact_share_is_not_cut_for_busy_cpus_but_says_they_were() {
        let two = share(None, &|_| None, 2, 1, true);
        let kept = noting_busy(two, Some(0.1));
        assert_eq!((kept.threads, kept.busy.map(|b| b.kept)), (2, Some(true)));
        assert_eq!(
            kept.to_string(),
            "2 CPU thread(s) (the 2 CPU(s) it may use), though 0.1 CPU(s) were free when it \
             started: not fewer, as on the CPU the count changes the results' last bits \
             (--threads sets it; fewer are faster on busy CPUs)"
        );
        assert_eq!(noting_busy(two, Some(1.6)), two, "1.6 free rounds to 2");
        assert_eq!(noting_busy(two, None), two);
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
