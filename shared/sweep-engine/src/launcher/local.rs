//! The local launcher: each trial a child process of the sweep, on its slot's share of this
//! machine's GPUs (CUDA_VISIBLE_DEVICES) and CPUs (an affinity mask, and OMP_NUM_THREADS).

use std::sync::mpsc::Sender;

use crate::error::Context;

use super::{Launch, Launcher, Msg, Signal, signal_group, spawn};

/// Runs trials here, each slot on its own GPUs and CPUs.
#[derive(Debug, Clone)]
pub struct Local {
    /// CUDA_VISIBLE_DEVICES of each slot (None: left as inherited).
    pub slot_gpus: Vec<Option<String>>,
    /// The CPUs each slot's trials may run on, also their OMP_NUM_THREADS (None: left as
    /// inherited).
    pub slot_cpus: Vec<Option<Vec<usize>>>,
}

impl Launcher for Local {
    fn start(&mut self, launch: Launch<'_>, tx: Sender<Msg>) -> crate::Result<i32> {
        let Launch {
            trial,
            attempt,
            slot,
            args,
            mut env,
            stderr,
            stdout,
            ..
        } = launch;
        if let Some(g) = self.slot_gpus.get(slot).cloned().flatten() {
            env.push(("CUDA_VISIBLE_DEVICES", g.into()));
        }
        let cpus = self.slot_cpus.get(slot).and_then(Option::as_deref);
        if let Some(c) = cpus {
            env.push(("OMP_NUM_THREADS", c.len().to_string().into()));
        }
        spawn(args, &env, cpus, stderr, stdout, (trial, attempt), tx)
            .with_context(|| format!("starting {:?}", args[0]))
    }

    /// A sweep killed with SIGKILL left this trial's background processes running in its
    /// directory: ended before its output is read back or the trial runs there again.
    fn end_leftovers(&mut self, trial: usize, dir: &std::path::Path, stdout: Option<[u64; 2]>) {
        let left = end_leftovers(dir, stdout);
        if !left.is_empty() {
            log::warn!(
                "trial {trial}: {} process(es) of an earlier run of this trial were still running in {} (pids {left:?}): ended them",
                left.len(),
                dir.display()
            );
        }
    }

    fn signal(&mut self, pid: i32, signal: Signal) {
        signal_group(
            pid,
            match signal {
                Signal::Stop => libc::SIGTERM,
                Signal::Kill => libc::SIGKILL,
            },
        );
    }
}

/// The CPUs of each slot (`None`: left as inherited): `per_trial` of `allowed` each, in turn,
/// starting again from the first where there are not enough.
pub fn slot_cpus(
    slots: usize,
    per_trial: Option<usize>,
    allowed: &[usize],
) -> Vec<Option<Vec<usize>>> {
    let per_trial = match per_trial {
        Some(n) => n,
        None if slots > 1 => (allowed.len() / slots).max(1),
        None => 0,
    };
    if per_trial == 0 || allowed.is_empty() {
        return vec![None; slots];
    }
    (0..slots)
        .map(|slot| {
            let first = slot * per_trial;
            Some(
                (first..first + per_trial)
                    .map(|i| allowed[i % allowed.len()])
                    .collect(),
            )
        })
        .collect()
}

/// CUDA_VISIBLE_DEVICES for each slot.
pub fn slot_gpus(
    slots: usize,
    per_trial: usize,
    gpus: Option<&[String]>,
    visible: Option<&str>,
    installed: Option<usize>,
) -> crate::Result<Vec<Option<String>>> {
    if per_trial == 0 {
        return Ok(vec![None; slots]);
    }
    let listed: Option<Vec<String>> = gpus.map(<[String]>::to_vec).or_else(|| {
        visible.map(|v| {
            v.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
    });
    let need = slots * per_trial;
    let list = match listed {
        Some(l) if l.len() < need => {
            return Err(crate::Error::Usage(format!(
                "--slots {slots} × --gpus-per-trial {per_trial} needs {need} GPUs, {} given ({}): lower --slots, or --gpus-per-trial 0 for CPU trials",
                l.len(),
                l.join(",")
            )));
        }
        Some(l) => l,
        None => match installed {
            Some(n) if n < need => {
                return Err(crate::Error::Usage(format!(
                    "--slots {slots} × --gpus-per-trial {per_trial} needs {need} GPUs, this machine has {n}: lower --slots, or --gpus-per-trial 0 for CPU trials"
                )));
            }
            _ => (0..need).map(|i| i.to_string()).collect(),
        },
    };
    Ok((0..slots)
        .map(|i| Some(list[i * per_trial..(i + 1) * per_trial].join(",")))
        .collect())
}

/// GPUs the NVIDIA driver lists (/proc/driver/nvidia/gpus); None without the driver.
pub fn installed_gpus() -> Option<usize> {
    std::fs::read_dir("/proc/driver/nvidia/gpus")
        .ok()
        .map(|d| d.count())
}

/// The CPUs this process may run on, in order (its affinity mask; empty if it cannot be read).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: the set is written by the kernel, then only read.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Ends the processes (this user's, found in /proc) that belong to the trial in `trial_dir`:
/// those whose environment says so (`SWEEP_TRIAL_DIR`, which every process a trial starts
/// inherits) and those that hold `stdout` open for writing (the device and inode of the
/// stdout.log its last attempt wrote to: found also when the directory was moved since, or a
/// process cleared its environment). What an
/// earlier sweep of this directory left running when it was killed (PR_SET_PDEATHSIG reaches
/// only a trial's first process; its children were reparented and ran on). Called before the
/// trial starts again; returns the pids it killed, once each has ended (or after 10 seconds).
pub fn end_leftovers(trial_dir: &std::path::Path, stdout: Option<[u64; 2]>) -> Vec<i32> {
    use std::os::unix::ffi::OsStrExt;
    let marker = [b"SWEEP_TRIAL_DIR=", trial_dir.as_os_str().as_bytes()].concat();
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut killed = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        // Unreadable for other users' processes, and gone for ended ones: not ours to end.
        let Ok(environ) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if environ.split(|&b| b == 0).any(|v| v == marker)
            || stdout.is_some_and(|id| writes_to(&e.path(), id))
        {
            // SAFETY: kill(2) on a pid read just now; no memory is shared.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            killed.push(pid);
        }
    }
    // Nothing of theirs may land in the file after it is read back: each one gone (or a
    // zombie, its writes done), within a deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let ended = |pid: &i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(true)
    };
    while !killed.iter().all(ended) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    killed
}

/// Whether the process at `proc` (its /proc directory) holds the file `id` open for writing.
fn writes_to(proc: &std::path::Path, id: [u64; 2]) -> bool {
    let Ok(fds) = std::fs::read_dir(proc.join("fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::metadata(fd.path()).is_ok_and(|m| crate::journal::FileId::of(&m) == id)
            && std::fs::read_to_string(proc.join("fdinfo").join(fd.file_name())).is_ok_and(|i| {
                (i.lines())
                    .find_map(|l| l.strip_prefix("flags:"))
                    .and_then(|f| i32::from_str_radix(f.trim(), 8).ok())
                    .is_some_and(|f| f & libc::O_ACCMODE != libc::O_RDONLY)
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_get_their_own_cpus() {
        let cpus = [0, 1, 2, 3, 8, 9];
        assert_eq!(
            slot_cpus(3, Some(2), &cpus),
            [Some(vec![0, 1]), Some(vec![2, 3]), Some(vec![8, 9])]
        );
        // By default the CPUs are divided between the slots; with one slot nothing is set.
        assert_eq!(
            slot_cpus(2, None, &cpus),
            [Some(vec![0, 1, 2]), Some(vec![3, 8, 9])]
        );
        assert_eq!(slot_cpus(1, None, &cpus), [None]);
        assert_eq!(slot_cpus(2, Some(0), &cpus), [None, None]);
        // More slots than CPUs: they share, in turn.
        assert_eq!(
            slot_cpus(3, None, &[0, 1]),
            [Some(vec![0]), Some(vec![1]), Some(vec![0])]
        );
    }

    #[test]
    fn slots_get_their_own_gpus() {
        assert_eq!(
            slot_gpus(2, 1, None, None, None).unwrap(),
            [Some("0".into()), Some("1".into())]
        );
        assert_eq!(
            slot_gpus(2, 2, None, Some("4,5,6,7"), Some(8)).unwrap(),
            [Some("4,5".into()), Some("6,7".into())]
        );
        assert_eq!(
            slot_gpus(1, 1, Some(&["3".into()]), Some("0,1"), None).unwrap(),
            [Some("3".into())]
        );
        assert_eq!(
            slot_gpus(3, 0, None, Some("0"), None).unwrap(),
            [None, None, None]
        );
        let e = slot_gpus(4, 1, None, Some("0,1"), None).unwrap_err();
        assert!(matches!(e, crate::Error::Usage(_)), "{e}");
        let e = slot_gpus(4, 1, None, None, Some(2)).unwrap_err();
        assert!(matches!(e, crate::Error::Usage(_)), "{e}");
    }
}
