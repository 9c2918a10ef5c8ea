//! `sweep --launcher slurm` without a cluster: a stand-in `srun` first on PATH records the
//! options each step is started with and runs the command as one task would, so the launcher's
//! part is checked on every machine: the step each trial is, the slots an allocation holds, the
//! decisions (the local launcher's, for the same results), a node failure that srun reports
//! with exit status 0, and what a sweep outside an allocation is told. `scripts/slurm-check`
//! runs the same sweeps on a real two-node cluster.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ok, records, sweep};
use serde_json::{Value, json};

/// A directory with a stand-in Slurm: `srun` writes its options (one per line, then `--`) to
/// SWEEP_TRIAL_DIR/srun.args, sends the tasks' stderr where `--error` says, registers the step
/// (`4242.PID NAME TASK_PID`) in $FAKE_SLURM/steps while it runs (and in $FAKE_SLURM/started
/// for good), and runs the command as one task would; `squeue --steps` lists the registered
/// steps, `squeue` alone says the job's state ($FAKE_SLURM/job-state, RUNNING if absent);
/// `scancel --signal=SIG STEP` logs its arguments to $FAKE_SLURM/scancel.log and signals that
/// step's task. A trial whose number names a file in $FAKE_SRUN_FAIL plays a node failure once
/// (srun's message on its own stderr, exit status 0, as srun 22.05 does); with
/// $FAKE_SRUN_ENDS_JOB set that failure also ends the job (a job Slurm requeues), after which
/// every srun fails as srun does in an ended job.
fn fake_srun(dir: &Path) -> PathBuf {
    let bin = dir.join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(dir.join("fake-slurm/steps")).unwrap();
    // scontrol, asked for the job's GPUs where no variable names them, knows of no job here.
    let scripts = [
        ("srun", FAKE_SRUN),
        ("squeue", FAKE_SQUEUE),
        ("scancel", FAKE_SCANCEL),
        ("scontrol", "#!/bin/sh\nexit 1\n"),
    ];
    use std::os::unix::fs::PermissionsExt;
    for (name, text) in scripts {
        let path = bin.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

/// The stand-in srun: runs the step's command, noting its options and the step.
const FAKE_SRUN: &str = r#"#!/bin/sh
log="$SWEEP_TRIAL_DIR/srun.args"
name=
err=
while [ $# -gt 0 ]; do
  case $1 in
  --job-name=*) name=${1#--job-name=} ;;
  --error=*) err=${1#--error=} ;;
  --*) ;;
  *) break ;;
  esac
  echo "$1" >>"$log"
  shift
done
echo -- >>"$log"
if [ "$(cat "$FAKE_SLURM/job-state" 2>/dev/null || echo RUNNING)" != RUNNING ]; then
  echo "srun: error: Unable to create step for job 4242: Expired or invalid job" >&2
  exit 1
fi
if [ -n "$FAKE_SRUN_FAIL" ] && [ -e "$FAKE_SRUN_FAIL/$SWEEP_TRIAL" ]; then
  rm "$FAKE_SRUN_FAIL/$SWEEP_TRIAL"
  if [ -n "$FAKE_SRUN_ENDS_JOB" ]; then echo COMPLETING >"$FAKE_SLURM/job-state"; fi
  echo "srun: error: Node failure on n2" >&2
  echo "srun: Job step aborted: Waiting up to 32 seconds for job step to finish." >&2
  exit 0
fi
if [ -n "$err" ]; then exec 2>>"$err"; fi
export SLURMD_NODENAME=n1 SLURM_PROCID=0
"$@" &
task=$!
echo "4242.$$ $name $task" >"$FAKE_SLURM/steps/$$"
echo "4242.$$ $name" >>"$FAKE_SLURM/started"
wait $task
rc=$?
rm -f "$FAKE_SLURM/steps/$$"
exit $rc
"#;

/// The stand-in squeue: the running steps, or the job's state.
const FAKE_SQUEUE: &str = r#"#!/bin/sh
case " $* " in
*" --steps "*)
  for f in "$FAKE_SLURM"/steps/*; do
    if [ -e "$f" ]; then cut -d' ' -f1,2 "$f"; fi
  done ;;
*) cat "$FAKE_SLURM/job-state" 2>/dev/null || echo RUNNING ;;
esac
"#;

/// The stand-in scancel: signals the named step's task.
const FAKE_SCANCEL: &str = r#"#!/bin/sh
echo "$*" >>"$FAKE_SLURM/scancel.log"
sig=TERM
step=
for a in "$@"; do
  case $a in --signal=*) sig=${a#--signal=} ;; -*) ;; *) step=$a ;; esac
done
for f in "$FAKE_SLURM"/steps/*; do
  [ -e "$f" ] || continue
  set -- $(cat "$f")
  if [ "$1" = "$step" ]; then kill -s "$sig" "$3" 2>/dev/null; fi
done
exit 0
"#;

/// [`shell_sweep`] with `--launcher slurm` and `extra`, [`in_allocation`] of the stand-in Slurm
/// in `bin`.
fn slurm_sweep(dir: &Path, bin: &Path, space: &Value, script: &str, extra: &[&str]) -> Command {
    let mut c = shell_sweep(
        dir,
        space,
        script,
        &[&["--launcher", "slurm"], extra].concat(),
    );
    in_allocation(&mut c, bin);
    c
}

/// The stand-in srun of `c` plays a node failure once for trial `trial` (a mark in DIR/fail,
/// removed when played).
fn node_failure_once(c: &mut Command, dir: &Path, trial: usize) {
    let fail = dir.join("fail");
    std::fs::create_dir_all(&fail).unwrap();
    std::fs::write(fail.join(trial.to_string()), "").unwrap();
    c.env("FAKE_SRUN_FAIL", &fail);
}

/// `c` inside an allocation of 2 nodes × 2 CPUs (no GPUs), the stand-in Slurm first on PATH.
fn in_allocation(c: &mut Command, bin: &Path) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    c.env("PATH", std::env::join_paths(paths).unwrap())
        .env("FAKE_SLURM", bin.parent().unwrap().join("fake-slurm"))
        .env("SLURM_JOB_ID", "4242")
        .env("SLURM_JOB_NUM_NODES", "2")
        .env("SLURM_CPUS_ON_NODE", "2")
        .env_remove("SLURM_GPUS_ON_NODE")
        .env_remove("SLURM_JOB_GPUS")
        .env_remove("FAKE_SRUN_FAIL")
        .env_remove("FAKE_SRUN_ENDS_JOB");
}

/// The options each trial's steps were started with, per step.
fn steps_of(trial_dir: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(trial_dir.join("srun.args")).unwrap_or_default();
    text.split("--\n")
        .filter(|s| !s.is_empty())
        .map(|s| s.lines().map(str::to_string).collect())
        .collect()
}

/// The journal's lines without times and slots: what was decided, in order.
fn decisions(out: &Path) -> Vec<Value> {
    (common::journal(out).into_iter().skip(1))
        .map(|mut v| {
            if let Some(o) = v.as_object_mut() {
                // What the trials print of their own environment (CUDA_VISIBLE_DEVICES) differs,
                // and each run's stdout.log is a file of its own (device and inode).
                let differ = ["slot", "record", "message", "stdout_file"];
                o.retain(|k, _| !differ.contains(&k.as_str()));
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
    let cmd = common::lr_batch_curve("12", &[]);
    let run = |name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let args = [
            common::ASHA,
            &common::max_by_epoch("val_top1", &out),
            &["--seed", "3", "--slots", "1"],
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
        let dir = slurm_out.join(format!("trial-{t:04}"));
        for want in [
            "--exact",
            "--nodes=1",
            "--ntasks=1",
            "--kill-on-bad-exit=1",
            "--open-mode=append",
            &format!("--error={}", dir.join("stderr.log").display()),
        ] {
            assert!(
                s.iter().any(|a| a == want),
                "trial {t}: {want} not in {s:?}"
            );
        }
        // Named by the sweep (its directory's identity), the trial and the attempt.
        assert!(
            s.iter()
                .any(|a| a.starts_with("--job-name=sweep-")
                    && a.ends_with(&format!("-trial-{t:04}-1"))),
            "{s:?}"
        );
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
    // The script's braces are its own, not placeholders.
    let script = script.replace('{', "{{").replace('}', "}}");
    common::script_sweep(dir, space, &script, &[], extra)
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
    let mut c = slurm_sweep(dir.path(), &bin, &space, script, &[]);
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
    let mut c = slurm_sweep(
        dir.path(),
        &bin,
        &space,
        "echo '{\"epoch\": 1, \"m\": 1}'",
        &["--nodes-per-trial", "3"],
    );
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("3 nodes"));
}

#[test]
fn a_node_failure_is_a_failed_trial_even_when_srun_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_srun(dir.path());
    let space = json!({"x": {"grid": [1, 2]}});
    let script = "echo '{\"epoch\": 1, \"m\": 1}'; echo '{\"epoch\": 2, \"m\": 2}'";
    // Retried under --max-failures: the retry's record names the node and Slurm's reason.
    let mut c = slurm_sweep(dir.path(), &bin, &space, script, &["--max-failures", "1"]);
    node_failure_once(&mut c, dir.path(), 1);
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
    let second = dir.path().join("second");
    std::fs::create_dir_all(&second).unwrap();
    let mut c = slurm_sweep(&second, &bin, &space, script, &[]);
    node_failure_once(&mut c, dir.path(), 0);
    let o = c.output().unwrap();
    testkit::exits(&o, 3);
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

/// Waits (at most 120 s) until `what` holds.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "waited too long for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The steps the stand-in srun ran: (step id, name).
fn started_steps(bin: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(bin.parent().unwrap().join("fake-slurm/started"))
        .unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(id, name)| (id.to_string(), name.to_string()))
        .collect()
}

#[test]
fn two_sweeps_in_one_allocation_stop_only_their_own_trials() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_srun(dir.path());
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a_dir).unwrap();
    std::fs::create_dir_all(&b_dir).unwrap();
    let release = dir.path().join("release");
    let space = json!({"x": {"grid": [1]}});
    // B's trial 0 reports epoch 1, waits for the release (at most 60 s), reports epoch 2.
    let b_script = format!(
        r#"echo '{{"epoch": 1, "m": 1}}'; i=0
while [ ! -e '{}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
echo '{{"epoch": 2, "m": 2}}'"#,
        release.display()
    );
    let mut b = slurm_sweep(&b_dir, &bin, &space, &b_script, &["--scheduler", "fifo"]);
    let b = b
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let b_result = b_dir.join("run/trial-0000/result.json");
    wait_until("B's first result", || {
        std::fs::read(&b_result).is_ok_and(|r| !r.is_empty())
    });
    // A's trial 0, of the same number, reaches --max-t at its first result: A stops it.
    let mut a = slurm_sweep(
        &a_dir,
        &bin,
        &space,
        r#"echo '{"epoch": 1, "m": 1}'; sleep 30"#,
        &["--scheduler", "fifo", "--max-t", "1"],
    );
    let a = ok(&a.output().unwrap());
    assert_eq!(a.ends[0].status.as_deref(), Some("completed"));
    std::fs::write(&release, "").unwrap();
    let b = ok(&b.wait_with_output().unwrap());
    // B's trial ran to its own end, untouched by A's stop.
    assert_eq!(b.results.len(), 2, "{:?}", b.ends);
    assert_eq!(b.ends[0].status.as_deref(), Some("completed"));
    // No two sweeps' steps share a name, and A signalled its own step only.
    let steps = started_steps(&bin);
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert_ne!(steps[0].1, steps[1].1, "{steps:?}");
    let b_step = &steps[0].0;
    let log = std::fs::read_to_string(dir.path().join("fake-slurm/scancel.log")).unwrap();
    assert!(
        !log.contains(b_step.as_str()),
        "B's step {b_step} was signalled: {log}"
    );
    assert!(log.contains(steps[1].0.as_str()), "{log}");
}

#[test]
fn a_trial_that_prints_slurm_like_lines_is_judged_by_what_slurm_says() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_srun(dir.path());
    let space = json!({"x": {"grid": [1]}});
    // A healthy trial that writes what srun writes of failed steps to its own stderr.
    let script = r#"echo "srun: error: Node failure on n9" >&2
echo "srun: error: n9: task 0 launch failed: Unspecified error" >&2
echo "srun: error: *** STEP 4242.7 ON n9 CANCELLED AT 2026-01-01T00:00:00 ***" >&2
echo '{"epoch": 1, "m": 1}'"#;
    let mut c = slurm_sweep(dir.path(), &bin, &space, script, &["--max-failures", "1"]);
    let r = ok(&c.output().unwrap());
    assert!(r.retries.is_empty(), "{:?}", r.retries);
    assert_eq!(r.ends[0].status.as_deref(), Some("completed"));
    // Its stderr is kept in its stderr.log all the same.
    let log = std::fs::read_to_string(dir.path().join("run/trial-0000/stderr.log")).unwrap();
    assert!(log.contains("Node failure on n9"), "{log}");
}

#[test]
fn failures_while_the_job_ends_are_unfinished_and_resume_runs_them() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_srun(dir.path());
    // Trial 0 (the better one) loses its node, and the job with it: Slurm requeues the job,
    // and every srun in it fails from then on.
    let space = json!({"x": {"grid": [3, 1]}});
    let script = r#"e=1; while [ $e -le 3 ]; do echo "{\"epoch\": $e, \"m\": $(((2 - SWEEP_TRIAL) * e))}"; e=$((e + 1)); done"#;
    let mut c = slurm_sweep(
        dir.path(),
        &bin,
        &space,
        script,
        &["--slots", "1", "--max-failures", "2"],
    );
    node_failure_once(&mut c, dir.path(), 0);
    c.env("FAKE_SRUN_ENDS_JOB", "1");
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let r = records(&o.stdout);
    // No failure counted against --max-failures, no trial in error, none named best.
    assert!(r.retries.is_empty(), "{:?}\n{err}", r.retries);
    assert!(
        r.ends.iter().all(|e| e.status.as_deref() != Some("error")),
        "{:?}",
        r.ends
    );
    let summary = r.summary.clone().expect("a summary");
    assert_eq!((summary.error, summary.unfinished), (0, 2), "{summary:?}");
    assert!(summary.best.is_none(), "{summary:?}");
    assert_eq!(
        o.status.code(),
        Some(130),
        "the sweep stops as when interrupted: {err}"
    );
    let out = dir.path().join("run");
    let best: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("best.json")).unwrap()).unwrap();
    assert_eq!(best, Value::Null);
    // The requeued job runs the batch script again: --resume runs both trials (ASHA may stop
    // the worse one).
    std::fs::remove_file(dir.path().join("fake-slurm/job-state")).unwrap();
    let mut c = Command::new(common::BIN);
    c.args([
        "--resume",
        "--report-secs",
        "0",
        "--launcher",
        "slurm",
        "--out-dir",
    ])
    .arg(&out);
    in_allocation(&mut c, &bin);
    let r = ok(&c.output().unwrap());
    let summary = r.summary.unwrap();
    assert_eq!(
        (
            summary.completed + summary.stopped,
            summary.error,
            summary.unfinished
        ),
        (2, 0, 0),
        "{summary:?}"
    );
    assert_eq!(summary.best.unwrap().trial, 0);
}

#[test]
fn default_slots_from_slurms_variables_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_srun(dir.path());
    let space = json!({"x": {"grid": [1, 2]}});
    let mut c = slurm_sweep(
        dir.path(),
        &bin,
        &space,
        r#"echo '{"epoch": 1, "m": 1}'"#,
        &[],
    );
    c.env("SLURM_JOB_NUM_NODES", "1048576")
        .env("SLURM_CPUS_ON_NODE", "1048576");
    let r = ok(&c.output().unwrap());
    assert_eq!(r.ends.len(), 2);
    assert!(r.starts.iter().all(|s| s.slot.unwrap() < 4096));
}

#[test]
fn slots_beyond_what_the_allocation_holds_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_srun(dir.path());
    let space = json!({"x": {"grid": [1, 2]}});
    let run = |slots: &str| {
        let sub = dir.path().join(format!("slots-{slots}"));
        std::fs::create_dir_all(&sub).unwrap();
        let mut c = slurm_sweep(
            &sub,
            &bin,
            &space,
            r#"echo '{"epoch": 1, "m": 1}'"#,
            &["--slots", slots],
        );
        let o = c.output().unwrap();
        ok(&o);
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    // 2 nodes × 2 CPUs, one CPU per trial: four at once; the other two steps would wait in
    // Slurm's queue.
    let err = run("6");
    let warning = err
        .lines()
        .find(|l| l.starts_with("sweep: warning: --slots 6"))
        .unwrap_or_else(|| panic!("no warning about --slots 6: {err}"));
    assert!(warning.contains("holds 4"), "{warning}");
    // As many as it holds: no warning.
    let err = run("4");
    assert!(!err.contains("--slots"), "{err}");
}
