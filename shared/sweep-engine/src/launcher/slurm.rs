//! The Slurm launcher: inside an allocation (`sbatch`, `salloc`), each trial runs as one job
//! step, `srun --exact -N NODES -n TASKS ... --job-name NAME COMMAND`, on whichever of the
//! allocation's nodes Slurm picks; Slurm binds its GPUs and CPUs, so the sweep sets no
//! CUDA_VISIBLE_DEVICES or affinity of its own.
//!
//! A step's name is the sweep's own: `sweep-DEV.INODE-trial-NNNN-A`, from the identity of the
//! sweep's directory (device and inode, which no other sweep's directory has), the trial and its
//! attempt, so that two sweeps in one allocation, or two attempts of one trial, never share it.
//! srun is the local process the engine waits for: its stdout carries the tasks' lines, the
//! tasks' stderr goes to the trial's stderr.log (`--error`, appended), and srun's own stderr,
//! with Slurm's messages about the step, to the trial's srun.log, where no task writes. A stop is
//! `scancel --signal=TERM` of the trial's step (its id, looked up by its exact name), which
//! reaches every task at once so that it can checkpoint — SIGTERM to srun itself would make srun
//! kill the tasks (Slurm 22.05); after the grace period, SIGKILL to srun and `scancel
//! --signal=KILL` of the step, which would otherwise outlive its srun. srun exits 0 for a step
//! whose node failed ("Node failure on n2"), so its exit status alone does not make a trial a
//! success: Slurm's errors in the attempt's part of srun.log make it a failure that names the
//! node. A failure while the job itself is ending (Slurm requeues it after a node failure, or it
//! is cancelled) is no failure of the trial: it is unfinished, and the sweep stops.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::mpsc::Sender;

use crate::error::Context;

use super::{Ended, Launch, Launcher, Msg, Signal, describe, signal_group, spawn};

/// What one trial asks of the allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// Nodes per trial (`srun -N`).
    pub nodes: usize,
    /// Tasks on each of them (`--ntasks-per-node`; `srun -n` is nodes × this).
    pub tasks_per_node: usize,
    /// GPUs per trial, spread evenly over its nodes (`--gres=gpu:G/N`); 0 asks for none.
    pub gpus: usize,
    /// CPUs per trial, spread evenly over its tasks (`--cpus-per-task`); None leaves Slurm's
    /// default (one per task).
    pub cpus: Option<usize>,
}

impl Ask {
    pub fn tasks(&self) -> usize {
        self.nodes * self.tasks_per_node
    }

    /// CPUs per task (at least one).
    fn cpus_per_task(&self) -> Option<usize> {
        self.cpus.map(|c| c.div_ceil(self.tasks()).max(1))
    }
}

/// The allocation the sweep runs in, as Slurm's variables describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub job_id: String,
    pub nodes: usize,
    /// GPUs on each node (SLURM_GPUS_ON_NODE, else the count of SLURM_JOB_GPUS); 0 without.
    pub gpus_per_node: usize,
    /// CPUs on each node the job may use (SLURM_CPUS_ON_NODE).
    pub cpus_per_node: usize,
}

/// The most nodes, GPUs or CPUs per node read from Slurm's variables.
const MAX_COUNT: usize = 1 << 20;

/// The variables [`Allocation::from_env`] reads, for the man page.
pub const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "SLURM_JOB_ID",
        "With --launcher slurm: the allocation the trials run in as job steps (set by sbatch and salloc).",
    ),
    (
        "SLURM_JOB_NUM_NODES, SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS, SLURM_CPUS_ON_NODE",
        "With --launcher slurm: what the allocation holds, divided by what a trial asks for to give the default --slots.",
    ),
];

impl Allocation {
    /// The allocation `env` describes; a usage error outside one.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> crate::Result<Allocation> {
        let usage = |m: String| crate::Error::Usage(m);
        let Some(job_id) = env("SLURM_JOB_ID").filter(|j| !j.is_empty()) else {
            return Err(usage(
                "--launcher slurm runs trials as job steps of a Slurm allocation: start the sweep \
                 inside one (sbatch, or salloc), or use --launcher local"
                    .into(),
            ));
        };
        let count = |name: &str| -> crate::Result<Option<usize>> {
            match env(name) {
                None => Ok(None),
                Some(v) => match v.trim().parse::<usize>() {
                    // Bounded before any product is made of them.
                    Ok(n) if n <= MAX_COUNT => Ok(Some(n)),
                    _ => Err(usage(format!("{name}={v:?} is not a count"))),
                },
            }
        };
        let nodes = count("SLURM_JOB_NUM_NODES")?.unwrap_or(1).max(1);
        let gpus_per_node = match count("SLURM_GPUS_ON_NODE")? {
            Some(n) => n,
            None => env("SLURM_JOB_GPUS")
                .map(|g| g.split(',').filter(|s| !s.trim().is_empty()).count())
                .unwrap_or(0),
        };
        // salloc's shell has no SLURM_CPUS_ON_NODE: the job's CPUs per node, "2(x2)" or
        // "4,2(x3)", the fewest counted.
        let cpus_per_node = match count("SLURM_CPUS_ON_NODE")? {
            Some(n) => n,
            None => match env("SLURM_JOB_CPUS_PER_NODE").and_then(|v| fewest_per_node(&v)) {
                Some(n) if n > MAX_COUNT => {
                    return Err(usage(format!(
                        "SLURM_JOB_CPUS_PER_NODE names {n} CPUs on a node, more than {MAX_COUNT}"
                    )));
                }
                Some(n) => n,
                None => 1,
            },
        }
        .max(1);
        Ok(Allocation {
            job_id,
            nodes,
            gpus_per_node,
            cpus_per_node,
        })
    }

    /// [`Allocation::from_env`], with the GPUs `scontrol show job` lists where no variable
    /// names them (salloc's shell: SLURM_GPUS_ON_NODE and SLURM_JOB_GPUS are set only in the
    /// batch script and in steps).
    pub fn detect(env: &dyn Fn(&str) -> Option<String>) -> crate::Result<Allocation> {
        let mut a = Allocation::from_env(env)?;
        if env("SLURM_GPUS_ON_NODE").is_none() && env("SLURM_JOB_GPUS").is_none() {
            let mut scontrol = std::process::Command::new("scontrol");
            scontrol.args(["show", "job", &a.job_id]);
            if let Some(out) = output_within(scontrol, SLURM_COMMAND_DEADLINE) {
                a.gpus_per_node = gpus_per_node(&String::from_utf8_lossy(&out), a.nodes);
            }
        }
        Ok(a)
    }

    /// How many trials of `ask` the allocation holds at once: its nodes, GPUs and CPUs divided
    /// by what a trial asks for (the scarcest decides), at most [`crate::MAX_SLOTS`] (as
    /// --slots); a usage error if not even one fits.
    pub fn slots(&self, ask: &Ask) -> crate::Result<usize> {
        let misfit = |what: String| {
            crate::Error::Usage(format!(
                "a trial asks for {what}, more than the allocation holds ({} node(s), {} GPU(s) and {} CPU(s) each)",
                self.nodes, self.gpus_per_node, self.cpus_per_node
            ))
        };
        if ask.nodes > self.nodes {
            return Err(misfit(format!("{} nodes", ask.nodes)));
        }
        let per_node_gpus = ask.gpus.div_ceil(ask.nodes);
        if per_node_gpus > self.gpus_per_node {
            return Err(misfit(format!(
                "{per_node_gpus} GPU(s) on each of its nodes"
            )));
        }
        let per_node_cpus = ask.cpus_per_task().unwrap_or(1) * ask.tasks_per_node;
        if per_node_cpus > self.cpus_per_node {
            return Err(misfit(format!(
                "{per_node_cpus} CPU(s) on each of its nodes"
            )));
        }
        // Trials per node by each resource, then as many node groups as the allocation has.
        let mut per_node = self.cpus_per_node / per_node_cpus;
        if let Some(by_gpus) = self.gpus_per_node.checked_div(per_node_gpus) {
            per_node = per_node.min(by_gpus);
        }
        // Each factor is at most 2^20: the product fits, and is then bounded as --slots is.
        Ok((self.nodes * per_node / ask.nodes).clamp(1, crate::MAX_SLOTS))
    }
}

/// The fewest CPUs of any node in SLURM_JOB_CPUS_PER_NODE's form: `2(x2)`, `4,2(x3)`.
pub fn fewest_per_node(v: &str) -> Option<usize> {
    v.split(',')
        .map(|part| {
            part.split('(')
                .next()
                .unwrap_or("")
                .trim()
                .parse::<usize>()
                .ok()
        })
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .min()
}

/// The GPUs per node `scontrol show job` gives: the allocated `gres/gpu=N` of its TRES over
/// its nodes, else what each node was asked for (`TresPerNode=gres:gpu:N`, or
/// `gres/gpu:TYPE:N`); 0 without either.
pub fn gpus_per_node(job: &str, nodes: usize) -> usize {
    let fields = || job.split_whitespace().flat_map(|w| w.split(','));
    let total = fields().find_map(|f| f.strip_prefix("gres/gpu=")?.parse::<usize>().ok());
    if let Some(t) = total {
        return t / nodes.max(1);
    }
    fields()
        .filter_map(|f| f.strip_prefix("TresPerNode="))
        .chain(fields().filter(|f| f.starts_with("gres")))
        .find_map(|f| {
            let f = f.replace('/', ":");
            let rest = f.strip_prefix("gres:gpu")?;
            rest.rsplit(':').next()?.parse::<usize>().ok()
        })
        .unwrap_or(0)
}

/// The srun arguments that run `command` as the step `name`, its tasks' stderr appended to
/// `stderr` (the trial's stderr.log).
pub fn srun_args(
    srun: &OsString,
    ask: &Ask,
    name: &str,
    stderr: &Path,
    command: &[OsString],
) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![srun.clone()];
    let mut push = |s: String| a.push(s.into());
    // Only what the step asks for, not the whole allocation (--exact), on its own nodes' share.
    push("--exact".into());
    push(format!("--nodes={}", ask.nodes));
    push(format!("--ntasks={}", ask.tasks()));
    push(format!("--ntasks-per-node={}", ask.tasks_per_node));
    if let Some(c) = ask.cpus_per_task() {
        push(format!("--cpus-per-task={c}"));
    }
    if ask.gpus > 0 {
        push(format!("--gres=gpu:{}", ask.gpus.div_ceil(ask.nodes)));
    }
    push(format!("--job-name={name}"));
    // One task that fails ends the step (a rank that died leaves its peers waiting).
    push("--kill-on-bad-exit=1".into());
    // Records as they are printed, not when a buffer fills.
    push("--unbuffered".into());
    // The tasks' stderr apart from srun's own messages, which are Slurm's word on the step.
    let mut error = OsString::from("--error=");
    error.push(file_pattern(stderr));
    a.push(error);
    a.push("--open-mode=append".into());
    a.extend(command.iter().cloned());
    a
}

/// `path` as srun's filename pattern naming it: `%` written `%%` (srun replaces `%j`, `%t`, ...);
/// a path with a backslash is taken literally by srun as it is.
fn file_pattern(path: &Path) -> OsString {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let bytes = path.as_os_str().as_bytes();
    if bytes.contains(&b'\\') {
        return path.as_os_str().to_owned();
    }
    let mut out = Vec::with_capacity(bytes.len() + 8);
    for &b in bytes {
        out.push(b);
        if b == b'%' {
            out.push(b'%');
        }
    }
    OsString::from_vec(out)
}

/// The name of trial `trial`'s attempt `attempt` in the sweep whose directory is `sweep_id`.
pub fn step_name(sweep_id: &str, trial: usize, attempt: usize) -> String {
    format!("sweep-{sweep_id}-trial-{trial:04}-{attempt}")
}

/// The identity of a sweep's directory (`DEV.INODE`, hexadecimal): no other directory, hence
/// no other sweep, has it while it exists.
fn sweep_id(out_dir: &Path) -> std::io::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(out_dir)?;
    Ok(format!("{:x}.{:x}", m.dev(), m.ino()))
}

/// The Slurm launcher.
#[derive(Debug)]
pub struct Slurm {
    pub ask: Ask,
    pub allocation: Allocation,
    /// The srun, scancel and squeue programs (`srun`, `scancel`, `squeue` from PATH).
    pub srun: OsString,
    pub scancel: OsString,
    pub squeue: OsString,
    /// Per running srun: its trial's step, and where its attempt's part of srun.log starts.
    running: HashMap<i32, Started>,
}

#[derive(Debug)]
struct Started {
    /// The step's name (ours: the sweep's identity, the trial, the attempt).
    name: String,
    srun_log: PathBuf,
    from: u64,
}

/// The file in a trial's directory that holds srun's own stderr (Slurm's messages).
pub const SRUN_LOG: &str = "srun.log";

impl Slurm {
    pub fn new(ask: Ask, allocation: Allocation) -> Slurm {
        Slurm {
            ask,
            allocation,
            srun: "srun".into(),
            scancel: "scancel".into(),
            squeue: "squeue".into(),
            running: HashMap::new(),
        }
    }

    /// The ids (JOB.STEP) of this allocation's steps named `name`.
    fn steps_named(&self, name: &str) -> Vec<String> {
        let mut squeue = std::process::Command::new(&self.squeue);
        squeue
            .args(["--steps", "--noheader", "--format=%i %j", "--jobs"])
            .arg(&self.allocation.job_id);
        let Some(out) = output_within(squeue, SLURM_COMMAND_DEADLINE) else {
            return Vec::new();
        };
        steps_named(
            &String::from_utf8_lossy(&out),
            &self.allocation.job_id,
            name,
        )
    }

    /// `scancel --signal=SIGNAL` of the step named `name` (by its id); whether there was one.
    fn scancel(&self, name: &str, signal: &str) -> bool {
        let steps = self.steps_named(name);
        for step in &steps {
            let mut scancel = std::process::Command::new(&self.scancel);
            scancel.arg(format!("--signal={signal}")).arg(step);
            output_within(scancel, SLURM_COMMAND_DEADLINE);
        }
        !steps.is_empty()
    }

    /// Why the job itself is ending (its state when not running), or None while it runs or
    /// when squeue cannot say.
    fn job_ending(&self) -> Option<String> {
        let mut squeue = std::process::Command::new(&self.squeue);
        squeue
            .args(["--noheader", "--format=%T", "--jobs"])
            .arg(&self.allocation.job_id);
        let out = output_within(squeue, SLURM_COMMAND_DEADLINE)?;
        job_ending(&String::from_utf8_lossy(&out))
    }
}

/// The ids in squeue's `--steps --format="%i %j"` lines of job `job`'s steps named exactly
/// `name`.
pub fn steps_named(squeue: &str, job: &str, name: &str) -> Vec<String> {
    squeue
        .lines()
        .filter_map(|l| {
            let (id, n) = l.trim().split_once(' ')?;
            let ours = id.strip_prefix(job)?.starts_with('.');
            (ours && n.trim() == name).then(|| id.to_string())
        })
        .collect()
}

/// Whether a job is ending, from squeue's `--format=%T` of it: its state, lower-cased, when not
/// RUNNING (COMPLETING, REQUEUED, PENDING after a requeue, CANCELLED, ...), "gone from the
/// queue" when squeue lists nothing.
pub fn job_ending(squeue: &str) -> Option<String> {
    let state = squeue.lines().map(str::trim).find(|l| !l.is_empty());
    match state {
        None => Some("gone from the queue".into()),
        Some("RUNNING") => None,
        Some(s) => Some(s.chars().take(40).collect::<String>().to_lowercase()),
    }
}

/// Every parser of Slurm's output the launcher has, on one text (for fuzzing): srun's messages,
/// squeue's step and job lines, scontrol's job, SLURM_JOB_CPUS_PER_NODE.
pub fn fuzz_slurm_output(text: &str) {
    let _ = slurm_failure(text);
    let _ = steps_named(text, "4242", "sweep-1.2-trial-0000-1");
    let _ = job_ending(text);
    let _ = gpus_per_node(text, 2);
    let _ = gpus_per_node(text, 0);
    let _ = fewest_per_node(text);
}

/// How long squeue or scancel may take before it is given up (the controller is unreachable).
const SLURM_COMMAND_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// The stdout of `cmd` if it succeeds within `deadline`; it is killed past it.
fn output_within(mut cmd: std::process::Command, deadline: std::time::Duration) -> Option<Vec<u8>> {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        // Bounded: a command that prints without end fills no memory.
        let mut buf = Vec::new();
        let _ = stdout.take(MAX_OUTPUT).read_to_end(&mut buf);
        buf
    });
    let until = std::time::Instant::now() + deadline;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let out = reader.join().ok()?;
    status.filter(|s| s.success()).map(|_| out)
}

/// The most of a Slurm command's output that is read.
const MAX_OUTPUT: u64 = 16 << 20;

/// Slurm's own errors in `text` (srun's own stderr): the first that ends a step.
pub fn slurm_failure(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|l| {
            l.starts_with("srun: error:")
                && (l.contains("Node failure")
                    || l.contains("node failure")
                    || l.contains("CANCELLED")
                    || l.contains("task") && l.contains("launch failed"))
        })
        .map(|l| {
            let why = l.trim_start_matches("srun: error:").trim();
            why.chars().take(300).collect()
        })
}

impl Launcher for Slurm {
    fn start(&mut self, launch: Launch<'_>, tx: Sender<Msg>) -> crate::Result<i32> {
        let Launch {
            trial,
            attempt,
            args,
            env,
            dir,
            stdout,
            ..
        } = launch;
        // The trial's directory is OUT_DIR/trial-NNNN: the sweep's identity is OUT_DIR's.
        let out_dir = dir.parent().unwrap_or(dir);
        let id = sweep_id(out_dir).with_context(|| format!("reading {}", out_dir.display()))?;
        let name = step_name(&id, trial, attempt);
        let srun_log = dir.join(SRUN_LOG);
        let own = crate::files::open_regular(&srun_log, true)?;
        let from = own.metadata().map(|m| m.len()).unwrap_or(0);
        let srun = srun_args(&self.srun, &self.ask, &name, &dir.join("stderr.log"), args);
        let pid = spawn(&srun, &env, None, own, stdout, (trial, attempt), tx)
            .with_context(|| format!("starting {:?}", self.srun))?;
        self.running.insert(
            pid,
            Started {
                name,
                srun_log,
                from,
            },
        );
        Ok(pid)
    }

    fn signal(&mut self, pid: i32, signal: Signal) {
        let name = self.running.get(&pid).map(|s| s.name.clone());
        match signal {
            // SIGTERM to srun makes it kill the step's tasks at once: the tasks get SIGTERM
            // through scancel instead, and checkpoint. A step not yet listed (srun is still
            // starting it) has done nothing to keep: srun ends it.
            Signal::Stop => {
                if !name.is_some_and(|n| self.scancel(&n, "TERM")) {
                    signal_group(pid, libc::SIGTERM);
                }
            }
            // The grace period is over: srun and its step, which would outlive a killed srun.
            Signal::Kill => {
                signal_group(pid, libc::SIGKILL);
                if let Some(n) = name {
                    self.scancel(&n, "KILL");
                }
            }
        }
    }

    fn ended(&mut self, pid: i32, status: &std::io::Result<ExitStatus>) -> Ended {
        let started = self.running.remove(&pid);
        let said = started
            .as_ref()
            .and_then(|s| attempt_text(&s.srun_log, s.from));
        let why = match (said.as_deref().and_then(slurm_failure), status) {
            (Some(why), _) => format!("Slurm: {why}"),
            (None, Ok(s)) if s.success() => return Ended::Success,
            (None, _) => {
                let last = said.as_deref().and_then(|t| {
                    let l = t.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
                    Some(l.chars().take(300).collect::<String>())
                });
                match last {
                    Some(l) => format!("{} ({l})", describe(status)),
                    None => describe(status),
                }
            }
        };
        // A step that failed because its job is going away (Slurm requeues or ends it) says
        // nothing of the trial.
        match self.job_ending() {
            Some(state) => Ended::Lost(format!(
                "{why}, while Slurm job {} is {state}",
                self.allocation.job_id
            )),
            None => Ended::Failed(why),
        }
    }
}

/// What an attempt wrote to `path` from byte `from` on (its last 64 KiB).
fn attempt_text(path: &Path, from: u64) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(from.max(len.saturating_sub(1 << 16))))
        .ok()?;
    let mut buf = Vec::new();
    f.take(1 << 16).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    fn ask(nodes: usize, tasks_per_node: usize, gpus: usize, cpus: Option<usize>) -> Ask {
        Ask {
            nodes,
            tasks_per_node,
            gpus,
            cpus,
        }
    }

    #[test]
    fn outside_an_allocation_is_a_usage_error() {
        let e = Allocation::from_env(&env(&[])).unwrap_err();
        assert!(
            matches!(e, crate::Error::Usage(ref m) if m.contains("salloc")),
            "{e}"
        );
        let e = Allocation::from_env(&env(&[("SLURM_JOB_ID", "7"), ("SLURM_CPUS_ON_NODE", "x")]))
            .unwrap_err();
        assert!(matches!(e, crate::Error::Usage(_)), "{e}");
    }

    #[test]
    fn slots_are_the_allocation_divided_by_a_trials_ask() {
        // 2 nodes × 4 GPUs × 16 CPUs.
        let a = Allocation::from_env(&env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_NUM_NODES", "2"),
            ("SLURM_GPUS_ON_NODE", "4"),
            ("SLURM_CPUS_ON_NODE", "16"),
        ]))
        .unwrap();
        assert_eq!(
            a,
            Allocation {
                job_id: "42".into(),
                nodes: 2,
                gpus_per_node: 4,
                cpus_per_node: 16
            }
        );
        assert_eq!(a.slots(&ask(1, 1, 1, None)).unwrap(), 8);
        assert_eq!(a.slots(&ask(1, 1, 2, None)).unwrap(), 4);
        assert_eq!(
            a.slots(&ask(1, 1, 1, Some(8))).unwrap(),
            4,
            "CPUs are scarcer"
        );
        assert_eq!(a.slots(&ask(2, 2, 4, None)).unwrap(), 2, "two-node trials");
        assert_eq!(
            a.slots(&ask(1, 1, 0, None)).unwrap(),
            32,
            "CPU trials: one CPU each"
        );
        let e = a.slots(&ask(3, 1, 0, None)).unwrap_err();
        assert!(e.to_string().contains("3 nodes"), "{e}");
        let e = a.slots(&ask(1, 1, 5, None)).unwrap_err();
        assert!(e.to_string().contains("5 GPU(s)"), "{e}");
        // SLURM_JOB_GPUS lists them where SLURM_GPUS_ON_NODE is not set.
        let b = Allocation::from_env(&env(&[("SLURM_JOB_ID", "1"), ("SLURM_JOB_GPUS", "0,1")]));
        assert_eq!(b.unwrap().gpus_per_node, 2);
    }

    #[test]
    fn default_slots_are_bounded_as_slots_is() {
        // 2^20 nodes of 2^20 CPUs: 2^40 one-CPU trials, a list of 17.6 TB of slots.
        let a = Allocation::from_env(&env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_NUM_NODES", "1048576"),
            ("SLURM_CPUS_ON_NODE", "1048576"),
        ]))
        .unwrap();
        assert_eq!(a.slots(&ask(1, 1, 0, None)).unwrap(), crate::MAX_SLOTS);
        // The CPUs of salloc's form are bounded as the others.
        let e = Allocation::from_env(&env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_CPUS_PER_NODE", "99999999999(x2)"),
        ]))
        .unwrap_err();
        assert!(matches!(e, crate::Error::Usage(_)), "{e}");
    }

    #[test]
    fn sallocs_shell_is_read_from_the_jobs_cpus_and_scontrol() {
        let a = Allocation::from_env(&env(&[
            ("SLURM_JOB_ID", "2"),
            ("SLURM_JOB_NUM_NODES", "2"),
            ("SLURM_JOB_CPUS_PER_NODE", "4,2(x3)"),
        ]))
        .unwrap();
        assert_eq!((a.nodes, a.cpus_per_node, a.gpus_per_node), (2, 2, 0));
        assert_eq!(fewest_per_node("2(x2)"), Some(2));
        // scontrol show job: the allocated TRES, else what each node asked for.
        let job = "JobId=2 JobName=x\n   TRES=cpu=4,mem=8G,node=2,billing=4,gres/gpu=8\n";
        assert_eq!(gpus_per_node(job, 2), 4);
        assert_eq!(
            gpus_per_node("   TRES=cpu=4,node=2\n   TresPerNode=gres:gpu:2\n", 2),
            2
        );
        assert_eq!(gpus_per_node("   TresPerNode=gres/gpu:a100:3\n", 1), 3);
        assert_eq!(gpus_per_node("   TRES=cpu=1,node=1,billing=1\n", 1), 0);
    }

    #[test]
    fn a_trial_is_one_step_that_asks_for_its_share() {
        let cmd: Vec<OsString> = vec!["ddp-train".into(), "--lr".into(), "0.1".into()];
        let name = step_name("803.1f2", 3, 2);
        let err = Path::new("/o/100%/trial-0003/stderr.log");
        let args = srun_args(&"srun".into(), &ask(2, 2, 4, Some(8)), &name, err, &cmd);
        let text: Vec<String> = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            text,
            [
                "srun",
                "--exact",
                "--nodes=2",
                "--ntasks=4",
                "--ntasks-per-node=2",
                "--cpus-per-task=2",
                "--gres=gpu:2",
                "--job-name=sweep-803.1f2-trial-0003-2",
                "--kill-on-bad-exit=1",
                "--unbuffered",
                "--error=/o/100%%/trial-0003/stderr.log",
                "--open-mode=append",
                "ddp-train",
                "--lr",
                "0.1"
            ]
        );
        assert!(!text.iter().any(|a| a.contains("no-kill")));
        // A backslash makes srun take the whole pattern literally.
        assert_eq!(file_pattern(Path::new("/a\\b%j")), "/a\\b%j");
    }

    #[test]
    fn a_step_is_found_by_its_exact_name_in_its_own_job() {
        let squeue = "4242.0 sweep-1.2-trial-0000-1\n4242.1 sweep-1.3-trial-0000-1\n\
                      42421.5 sweep-1.2-trial-0000-1\n4242.7 sweep-1.2-trial-0000-10\n\
                      4242.9   sweep-1.2-trial-0000-1  \n";
        assert_eq!(
            steps_named(squeue, "4242", "sweep-1.2-trial-0000-1"),
            ["4242.0", "4242.9"]
        );
        // Two directories are two identities.
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        assert_ne!(sweep_id(&a).unwrap(), sweep_id(&b).unwrap());
        assert_eq!(
            sweep_id(&a).unwrap(),
            sweep_id(&dir.path().join("a/.")).unwrap()
        );
    }

    #[test]
    fn a_job_that_is_not_running_is_ending() {
        assert_eq!(job_ending("RUNNING\n"), None);
        assert_eq!(job_ending("COMPLETING\n").as_deref(), Some("completing"));
        assert_eq!(job_ending("PENDING\n").as_deref(), Some("pending"));
        assert_eq!(job_ending("").as_deref(), Some("gone from the queue"));
        // The fuzz target's entry: every parser, on text of any shape.
        for text in [
            "",
            "\n\n",
            "4242. x",
            "gres/gpu=99999999999999999999",
            "2(x",
            "((,,",
            "\u{0}é",
        ] {
            fuzz_slurm_output(text);
        }
    }

    #[test]
    fn a_node_failure_is_a_failure_whatever_sruns_status() {
        let log = "epoch 1\nsrun: error: Node failure on n2\nsrun: Job step aborted\n";
        assert_eq!(slurm_failure(log).as_deref(), Some("Node failure on n2"));
        assert_eq!(
            slurm_failure("srun: error: n2: task 1: Exited with exit code 3"),
            None
        );
        assert_eq!(slurm_failure("all well\n"), None);
    }
}
