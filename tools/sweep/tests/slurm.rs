//! `sweep --launcher slurm` without a cluster: a stand-in `srun` first on PATH records the
//! options each step is started with and runs the command as one task would, so the launcher's
//! part is checked on every machine: the step each trial is, the slots an allocation holds, the
//! decisions (the local launcher's, for the same results), a node failure that srun reports
//! with exit status 0, and what a sweep outside an allocation is told. `scripts/slurm-check`
//! runs the same sweeps on a real two-node cluster.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ok, records, sweep, sweep_running};
use serde_json::{Value, json};

/// A directory with the stand-in `srun`: it writes its options (one per line, then `--`) to
/// SWEEP_TRIAL_DIR/srun.args, and runs the command; a trial whose number names a file in
/// $FAKE_SRUN_FAIL plays a node failure once (srun's message on stderr, exit status 0, as
/// srun 22.05 does).
fn fake_srun(dir: &Path) -> PathBuf {
    let bin = dir.join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let srun = bin.join("srun");
    std::fs::write(
        &srun,
        r#"#!/bin/sh
log="$SWEEP_TRIAL_DIR/srun.args"
while [ $# -gt 0 ]; do
  case $1 in --*) echo "$1" >>"$log"; shift ;; *) break ;; esac
done
echo -- >>"$log"
if [ -n "$FAKE_SRUN_FAIL" ] && [ -e "$FAKE_SRUN_FAIL/$SWEEP_TRIAL" ]; then
  rm "$FAKE_SRUN_FAIL/$SWEEP_TRIAL"
  echo "srun: error: Node failure on n2" >&2
  echo "srun: Job step aborted: Waiting up to 32 seconds for job step to finish." >&2
  exit 0
fi
SLURMD_NODENAME=n1 SLURM_PROCID=0 exec "$@"
"#,
    )
    .unwrap();
    // scontrol, asked for the job's GPUs where no variable names them, knows of no job here.
    let scontrol = bin.join("scontrol");
    std::fs::write(&scontrol, "#!/bin/sh\nexit 1\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    for f in [&srun, &scontrol] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

/// `c` inside an allocation of 2 nodes × 2 CPUs (no GPUs), the stand-in srun first on PATH.
fn in_allocation(c: &mut Command, bin: &Path) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    c.env("PATH", std::env::join_paths(paths).unwrap())
        .env("SLURM_JOB_ID", "4242")
        .env("SLURM_JOB_NUM_NODES", "2")
        .env("SLURM_CPUS_ON_NODE", "2")
        .env_remove("SLURM_GPUS_ON_NODE")
        .env_remove("SLURM_JOB_GPUS");
}

/// The options each trial's steps were started with, per step.
fn steps_of(trial_dir: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(trial_dir.join("srun.args")).unwrap_or_default();
    text.split("--\n")
        .filter(|s| !s.is_empty())
        .map(|s| s.lines().map(str::to_string).collect())
        .collect()
}

const ASHA: &[&str] = &[
    "--metric",
    "val_top1",
    "--mode",
    "max",
    "--time-attr",
    "epoch",
    "--max-t",
    "9",
    "--grace-period",
    "1",
    "--reduction-factor",
    "3",
    "--seed",
    "3",
];

/// The journal's lines without times and slots: what was decided, in order.
fn decisions(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if let Some(o) = v.as_object_mut() {
                // What the trials print of their own environment (CUDA_VISIBLE_DEVICES) differs.
                o.retain(|k, _| !["slot", "record", "message"].contains(&k.as_str()));
            }
            v
        })
        .collect()
}

#[test]
fn trials_are_job_steps_and_decide_as_local_trials_do() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_srun(dir.path());
    let space = json!({"lr": {"grid": [1e-4, 1e-3, 0.01, 0.1, 0.3, 1.0]}, "batch_size": {"grid": [64, 512]}});
    let cmd = [
        "--lr",
        "{lr}",
        "--batch-size",
        "{batch_size}",
        "--epochs",
        "12",
    ];
    let run = |name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let args = [
            ASHA,
            &["--slots", "1", "--out-dir", out.to_str().unwrap()],
            extra,
        ]
        .concat();
        let mut c = sweep(dir.path(), &space, &args, &cmd);
        in_allocation(&mut c, &bin);
        (ok(&c.output().unwrap()), out)
    };
    let (local, local_out) = run("local", &[]);
    let (slurm, slurm_out) = run("slurm", &["--launcher", "slurm", "--gpus-per-trial", "0"]);
    // The same results give the same decisions, entry for entry.
    assert_eq!(decisions(&local_out), decisions(&slurm_out));
    assert_eq!(local.ends.len(), 12);
    let ends = |r: &common::Records| -> Vec<(usize, Option<String>, Option<f64>)> {
        r.ends
            .iter()
            .map(|e| (e.trial, e.status.clone(), e.stopped_at))
            .collect()
    };
    assert_eq!(ends(&local), ends(&slurm));
    // Each trial ran as one step of its own, asking for one node and task, named by the trial;
    // never --no-kill. Local trials went through no srun.
    for t in 0..12 {
        let steps = steps_of(&slurm_out.join(format!("trial-{t:04}")));
        assert_eq!(steps.len(), 1, "trial {t}: {steps:?}");
        let s = &steps[0];
        for want in [
            "--exact",
            "--nodes=1",
            "--ntasks=1",
            "--kill-on-bad-exit=1",
            &format!("--job-name=sweep-trial-{t:04}"),
        ] {
            assert!(
                s.iter().any(|a| a == want),
                "trial {t}: {want} not in {s:?}"
            );
        }
        assert!(
            !s.iter()
                .any(|a| a.contains("no-kill") || a.contains("gres")),
            "{s:?}"
        );
        assert!(steps_of(&local_out.join(format!("trial-{t:04}"))).is_empty());
    }
}

/// A sweep of `sh -c SCRIPT` over `space` into DIR/run, maximising `m` by `epoch`.
fn shell_sweep(dir: &Path, space: &Value, script: &str, extra: &[&str]) -> Command {
    let out = dir.join("run");
    let args = [
        &[
            "--metric",
            "m",
            "--mode",
            "max",
            "--time-attr",
            "epoch",
            "--out-dir",
            out.to_str().unwrap(),
        ],
        extra,
    ]
    .concat();
    // The script's braces are its own, not placeholders.
    let script = script.replace('{', "{{").replace('}', "}}");
    sweep_running(dir, space, &args, "sh".as_ref(), &["-c", &script, "sh"])
}

#[test]
fn slots_default_to_what_the_allocation_holds_and_slurm_binds_the_devices() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_srun(dir.path());
    // Each trial says what it was given, waits until four run at once (or 60 s), and ends.
    let script = r#"
touch "$SWEEP_TRIAL_DIR/../running-$SWEEP_TRIAL"
i=0
while [ "$(ls "$SWEEP_TRIAL_DIR/.." | grep -c '^running-')" -lt 4 ] && [ $i -lt 600 ]; do
  sleep 0.1; i=$((i + 1))
done
echo "{\"epoch\": 1, \"m\": 1, \"cuda\": \"${CUDA_VISIBLE_DEVICES-unset}\", \"omp\": \"${OMP_NUM_THREADS-unset}\", \"node\": \"$SLURMD_NODENAME\"}"
"#;
    let space = json!({"x": {"grid": [1, 2, 3, 4, 5, 6]}});
    let mut c = shell_sweep(dir.path(), &space, script, &["--launcher", "slurm"]);
    in_allocation(&mut c, &bin);
    c.env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("OMP_NUM_THREADS");
    let r = ok(&c.output().unwrap());
    // 2 nodes × 2 CPUs, one CPU per trial: four slots, all used at once.
    let mut slots: Vec<usize> = r.starts.iter().filter_map(|s| s.slot).collect();
    slots.sort();
    slots.dedup();
    assert_eq!(slots, [0, 1, 2, 3]);
    for res in &r.results {
        let rec = &res.record;
        assert_eq!(
            (&rec["cuda"], &rec["omp"], &rec["node"]),
            (&json!("unset"), &json!("unset"), &json!("n1")),
            "the sweep sets no devices of its own under Slurm: {rec}"
        );
    }
    // --slots overrides; a trial asking for more than the allocation holds is a usage error.
    let mut c = shell_sweep(
        dir.path(),
        &space,
        "echo '{\"epoch\": 1, \"m\": 1}'",
        &["--launcher", "slurm", "--nodes-per-trial", "3"],
    );
    in_allocation(&mut c, &bin);
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("3 nodes"));
}

#[test]
fn a_node_failure_is_a_failed_trial_even_when_srun_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_srun(dir.path());
    let fail = dir.path().join("fail");
    std::fs::create_dir_all(&fail).unwrap();
    let space = json!({"x": {"grid": [1, 2]}});
    let script = "echo '{\"epoch\": 1, \"m\": 1}'; echo '{\"epoch\": 2, \"m\": 2}'";
    // Retried under --max-failures: the retry's record names the node and Slurm's reason.
    std::fs::write(fail.join("1"), "").unwrap();
    let mut c = shell_sweep(
        dir.path(),
        &space,
        script,
        &["--launcher", "slurm", "--max-failures", "1"],
    );
    in_allocation(&mut c, &bin);
    c.env("FAKE_SRUN_FAIL", &fail);
    let r = ok(&c.output().unwrap());
    assert_eq!(r.retries.len(), 1);
    let why = r.retries[0].message.clone().unwrap_or_default();
    assert!(why.contains("Node failure on n2"), "{why}");
    assert!(
        r.ends
            .iter()
            .all(|e| e.status.as_deref() == Some("completed"))
    );
    // Without retries left it is an error (exit 3), not a completed trial.
    std::fs::write(fail.join("0"), "").unwrap();
    let second = dir.path().join("second");
    std::fs::create_dir_all(&second).unwrap();
    let mut c = shell_sweep(&second, &space, script, &["--launcher", "slurm"]);
    in_allocation(&mut c, &bin);
    c.env("FAKE_SRUN_FAIL", &fail);
    let o = c.output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = records(&o.stdout);
    let e = r.ends.iter().find(|e| e.trial == 0).unwrap();
    assert_eq!(e.status.as_deref(), Some("error"));
    assert!(e.message.as_deref().unwrap().contains("Node failure on n2"));
}

#[test]
fn outside_an_allocation_the_slurm_launcher_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let space = json!({"x": {"grid": [1]}});
    let script = "echo '{\"epoch\": 1, \"m\": 1}'";
    let mut c = shell_sweep(dir.path(), &space, script, &["--launcher", "slurm"]);
    c.env_remove("SLURM_JOB_ID");
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("sbatch") && err.contains("salloc"), "{err}");
    assert!(!dir.path().join("run").exists(), "nothing was made");
    // Placing trials on nodes is the Slurm launcher's.
    let mut c = shell_sweep(dir.path(), &space, script, &["--tasks-per-node", "2"]);
    c.env_remove("SLURM_JOB_ID");
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--launcher slurm"));
}
