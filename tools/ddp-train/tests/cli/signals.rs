//! Signals: SIGINT and SIGTERM stop every rank within a step, the checkpoint signal checkpoints
//! mid-epoch for a --resume to the same weights, Slurm requeues, and interrupts around an
//! epoch's end lose and repeat nothing.

use super::*;

#[test]
fn sigint_stops_within_a_step_keeps_the_last_checkpoint_and_exits_130() {
    use std::io::{BufRead, BufReader};
    let ck = tempfile::tempdir().unwrap();
    // Epochs of 44 steps (about 10-20 s here): SIGINT right after epoch 1's record.
    let mut child = cmd()
        .args(["--batch-size", "32", "--epochs", "3", "--checkpoint-dir"])
        .arg(ck.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["epoch"], 1);
    let t = std::time::Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let waited = t.elapsed();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    // Within a step of epoch 2, not at its end (the step it stopped before says so, and no
    // epoch 2 record below); the time only bounds a hang, long enough for a loaded machine.
    assert!(
        waited < std::time::Duration::from_secs(60),
        "{waited:?}: the interrupt was not acted on"
    );
    let step: usize = (stderr.split("interrupted before step ").nth(1))
        .and_then(|rest| rest.split(" of epoch 2").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no \"interrupted before step N of epoch 2\": {stderr}"));
    assert!((1..=44).contains(&step), "{stderr}");
    assert!(
        stderr.contains("checkpoint of epoch 1 is the last one"),
        "{stderr}"
    );
    assert!(
        lines.all(|l| !l.unwrap().contains("\"epoch\":2")),
        "no second epoch"
    );
    let (_, meta) =
        train::checkpoint::load(&ck.path().join("last.safetensors"), tch::Device::Cpu).unwrap();
    assert_eq!(meta["epoch"], "1");
}

/// SIGTERM to one rank of two stops both within a step or two, exit 130 each, and the rank that
/// got no signal names the one that did (it failed with "lost rank N", exit 1, before). Tried
/// with each rank signalled: rank 0 also serves the store the note travels through.
#[test]
fn sigterm_to_one_rank_stops_every_rank_with_130_naming_it() {
    use std::io::{BufRead, BufReader};
    for signalled in [1usize, 0] {
        let port = free_port();
        let mut children: Vec<_> = (0..2)
            .map(|rank| {
                cmd()
                    .args(["--batch-size", "32", "--epochs", "3"])
                    .args(rank_of(rank, 2, &port))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        // Rank 0 says what it trains once the ranks have met: signal a moment into training.
        let mut err0 = BufReader::new(children[0].stderr.take().unwrap());
        let mut banner = String::new();
        while !banner.contains("global batch") {
            banner.clear();
            assert!(
                err0.read_line(&mut banner).unwrap() > 0,
                "rank 0 ended early"
            );
        }
        std::thread::sleep(std::time::Duration::from_secs(2));
        let t = std::time::Instant::now();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(children[signalled].id() as i32, libc::SIGTERM) };
        let mut errs = Vec::new();
        for (rank, c) in children.iter_mut().enumerate() {
            let status = c.wait().unwrap();
            let mut err = String::new();
            match rank {
                0 => std::io::Read::read_to_string(&mut err0, &mut err),
                _ => std::io::Read::read_to_string(&mut c.stderr.take().unwrap(), &mut err),
            }
            .unwrap();
            errs.push((status.code(), err));
        }
        let waited = t.elapsed();
        let other = 1 - signalled;
        for (rank, (code, err)) in errs.iter().enumerate() {
            assert_eq!(
                *code,
                Some(130),
                "signalled {signalled}, rank {rank}: {err} (every rank: {errs:?})"
            );
        }
        // Before its next step, or within a collective waiting for the other rank.
        assert!(
            errs[signalled]
                .1
                .contains(&format!("ddp-train[rank {signalled}]: interrupted")),
            "{}",
            errs[signalled].1
        );
        assert!(
            errs[other]
                .1
                .contains(&format!("stopping too: rank {signalled} was interrupted")),
            "signalled {signalled}: {}",
            errs[other].1
        );
        assert!(
            waited < std::time::Duration::from_secs(10),
            "signalled {signalled}: {waited:?}"
        );
    }
}

/// The checkpoint records in a run's stdout: (epoch, step, reason).
fn checkpoint_records(o: &Output) -> Vec<(u64, u64, String)> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "checkpoint")
        .map(|v| {
            (
                v["epoch"].as_u64().unwrap(),
                v["step"].as_u64().unwrap(),
                v["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Asserts that a run stopped for the checkpoint signal (exit 75) at a step inside epoch 1, at
/// or after the scheduled checkpoint at step 2 (at it when the signal came before the next
/// step: that checkpoint then stands, and is reported again); the step.
fn assert_stopped_at_a_signal_checkpoint(o: &Output, what: &str) -> u64 {
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(75), "{what}: {stderr}");
    let ck = checkpoint_records(o);
    assert_eq!(ck[0], (1, 2, "every".to_string()), "{what}: {ck:?}");
    let (epoch, step, reason) = ck.last().unwrap().clone();
    assert_eq!((epoch, reason.as_str()), (1, "signal"), "{what}: {ck:?}");
    assert!(step >= 2, "{what}: {ck:?}");
    assert!(
        stderr.contains("--resume goes on from there"),
        "{what}: {stderr}"
    );
    step
}

#[test]
fn hup_as_the_checkpoint_signal_checkpoints_instead_of_interrupting() {
    // SIGHUP also ends a run (a closed terminal); named as the checkpoint signal it must only
    // checkpoint, as USR1 does, not interrupt (exit 130) and lose the step's work.
    let ck = tempfile::tempdir().unwrap();
    let mut run = cmd();
    run.args([
        "--batch-size",
        "32",
        "--max-steps",
        "8",
        "--epochs",
        "1",
        "--max-val-steps",
        "2",
        "--threads",
        "1",
        "--checkpoint-every",
        "2",
        "--checkpoint-signal",
        "HUP",
        "--checkpoint-dir",
    ])
    .arg(ck.path());
    let out = signal_after_first_checkpoint(vec![run], 0, 0, libc::SIGHUP).remove(0);
    assert_stopped_at_a_signal_checkpoint(&out, "SIGHUP as --checkpoint-signal");
}

#[test]
fn usr1_to_one_rank_stops_both_at_one_step_and_resume_trains_the_same_weights() {
    let args = [
        "--batch-size",
        "32",
        "--max-steps",
        "8",
        "--epochs",
        "1",
        "--augment",
        "--seed",
        "4",
        "--max-val-steps",
        "2",
    ];
    let ((_, straight), plain) = two_rank_processes_of(cmd, &args);
    let ck = tempfile::tempdir().unwrap();
    let ranks = |extra: &[&str]| -> Vec<Command> {
        let port = free_port();
        (0..2)
            .map(|rank| {
                let mut c = cmd();
                c.args(args)
                    .args(extra)
                    .args(rank_of(rank, 2, &port))
                    .arg("--checkpoint-dir")
                    .arg(ck.path());
                c
            })
            .collect()
    };
    // Only rank 1 gets the signal; rank 0 stops at the same step all the same.
    let outs = usr1_after_first_checkpoint(ranks(&["--checkpoint-every", "2"]), 0, 1);
    let step = assert_stopped_at_a_signal_checkpoint(&outs[0], "rank 0");
    testkit::exits(&outs[1], 75);
    assert!(
        String::from_utf8_lossy(&outs[1].stderr)
            .contains(&format!("after step {step} of 8 of epoch 1"))
    );
    let resumed = run_all(ranks(&["--resume"]));
    let recs = records(&resumed[0]);
    assert!(resumed[1].status.success());
    assert_same_weights(straight.path(), ck.path(), 0.0);
    let (a, b) = (&plain.items[0], &recs.items[0]);
    assert_eq!(
        (a.train_loss, a.train_top1, a.val_loss, a.steps),
        (b.train_loss, b.train_top1, b.val_loss, b.steps),
        "the resumed epoch reports the whole epoch"
    );
}

#[test]
fn image_folders_recordio_and_shards_resume_mid_epoch_to_the_same_weights() {
    let dir = digits_twice();
    let rec = digit_records();
    type Base<'a> = Box<dyn Fn() -> Command + 'a>;
    let sources: [(&str, Base); 3] = [
        (
            "image folder",
            Box::new(|| cmd_on(format!("imagefolder:{}", dir.join("folder").display()))),
        ),
        (
            "recordio",
            Box::new(|| {
                let mut c = cmd_on(format!("recordio:{}", rec.join("train").display()));
                c.arg("--val-data").arg(rec.join("val"));
                c
            }),
        ),
        ("shards", Box::new(digit_shards)),
    ];
    let args = [
        "--epochs",
        "1",
        "--max-steps",
        "10",
        "--batch-size",
        "16",
        "--image-size",
        "28",
        "--workers",
        "2",
        "--max-val-steps",
        "2",
    ];
    for (what, base) in &sources {
        let straight = tempfile::tempdir().unwrap();
        let plain = trained(base().args(args), straight.path());
        let ck = tempfile::tempdir().unwrap();
        let mut run = base();
        run.args(args)
            .args(["--checkpoint-every", "2", "--checkpoint-dir"])
            .arg(ck.path());
        let out = usr1_after_first_checkpoint(vec![run], 0, 0).remove(0);
        assert_stopped_at_a_signal_checkpoint(&out, what);
        let resumed = trained(base().args(args).args(["--resume"]), ck.path());
        assert_same_weights(straight.path(), ck.path(), 0.0);
        let (a, b) = (&plain.items[0], &resumed.items[0]);
        assert_eq!(
            (a.train_loss, a.train_top1, a.val_loss),
            (b.train_loss, b.train_top1, b.val_loss),
            "{what}"
        );
    }
}

/// Puts a stand-in `scontrol` running the shell `script` into `dir`; a PATH with `dir` first.
fn fake_scontrol(dir: &Path, script: &str) -> String {
    let scontrol = dir.join("scontrol");
    std::fs::write(&scontrol, script).unwrap();
    std::fs::set_permissions(
        &scontrol,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A run of 24 steps with --requeue-on-signal and a checkpoint every 2 steps into `ck`, in Slurm
/// job 4242 with `path` (a stand-in scontrol first) for PATH.
fn requeue_run(ck: &Path, path: &str) -> Command {
    let mut run = cmd();
    run.args(["--batch-size", "32", "--max-steps", "24", "--epochs", "1"])
        .args(["--requeue-on-signal", "--checkpoint-every", "2"])
        .arg("--checkpoint-dir")
        .arg(ck)
        .env("SLURM_JOB_ID", "4242")
        .env("PATH", path);
    run
}

#[test]
fn requeue_on_signal_asks_slurm_to_requeue_the_job_after_the_checkpoint() {
    // A stand-in for scontrol on PATH that notes its arguments.
    let bin = tempfile::tempdir().unwrap();
    let noted = bin.path().join("args");
    let path = fake_scontrol(
        bin.path(),
        &format!("#!/bin/sh\necho \"$@\" > '{}'\n", noted.display()),
    );
    let args = ["--batch-size", "32", "--max-steps", "24", "--epochs", "1"];
    let ck = tempfile::tempdir().unwrap();
    // Outside Slurm it cannot work: said at once.
    assert_usage(
        cmd()
            .args(args)
            .args(["--requeue-on-signal", "--checkpoint-dir"])
            .arg(ck.path())
            .env_remove("SLURM_JOB_ID"),
        "not in a Slurm job",
    );
    let run = requeue_run(ck.path(), &path);
    let out = usr1_after_first_checkpoint(vec![run], 0, 0).remove(0);
    assert_stopped_at_a_signal_checkpoint(&out, "requeue");
    assert_eq!(std::fs::read_to_string(&noted).unwrap(), "requeue 4242\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Slurm job 4242 requeued"));
}

/// SIGTERM while `scontrol requeue` hangs (a slow controller) ends the wait: exit 130 with the
/// checkpoint standing, not a run deaf to signals for a minute.
#[test]
fn sigterm_ends_a_wait_for_scontrol_requeue() {
    let bin = tempfile::tempdir().unwrap();
    let noted = bin.path().join("pid");
    // Notes its parent (ddp-train), then hangs.
    let path = fake_scontrol(
        bin.path(),
        &format!(
            "#!/bin/sh\necho $PPID > '{}.tmp'; mv '{}.tmp' '{}'\nexec sleep 1000\n",
            noted.display(),
            noted.display(),
            noted.display()
        ),
    );
    let ck = tempfile::tempdir().unwrap();
    let run = requeue_run(ck.path(), &path);
    let killer = std::thread::spawn(move || {
        let t = Instant::now();
        let pid = loop {
            if let Ok(p) = std::fs::read_to_string(&noted) {
                break p.trim().parse::<i32>().unwrap();
            }
            assert!(t.elapsed() < Duration::from_secs(300), "scontrol never ran");
            std::thread::sleep(Duration::from_millis(50));
        };
        // SAFETY: a signal to the ddp-train this test started.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        Instant::now()
    });
    let out = usr1_after_first_checkpoint(vec![run], 0, 0).remove(0);
    let signalled = killer.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted") && !err.contains("requeued"),
        "{err}"
    );
    // Well under the 60 s that scontrol is given.
    assert!(signalled.elapsed() < Duration::from_secs(30));
}

/// The requeue itself ends the job's steps with SIGTERM, which can reach rank 0 before it sees
/// `scontrol requeue` exit: the job was requeued all the same, and rank 0 says so (exit 75).
#[test]
fn the_requeues_own_sigterm_does_not_hide_that_the_job_was_requeued() {
    let bin = tempfile::tempdir().unwrap();
    // As slurmctld does on a requeue: the job's tasks get SIGTERM; scontrol then returns 0.
    let path = fake_scontrol(
        bin.path(),
        "#!/bin/sh\nkill -TERM $PPID\nsleep 0.2\nexit 0\n",
    );
    let ck = tempfile::tempdir().unwrap();
    let run = requeue_run(ck.path(), &path);
    let out = usr1_after_first_checkpoint(vec![run], 0, 0).remove(0);
    assert_stopped_at_a_signal_checkpoint(&out, "requeue");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Slurm job 4242 requeued"));
}

#[test]
fn a_signal_once_the_last_epoch_is_done_ends_the_run_as_finished() {
    // SIGTERM while the last epoch's checkpoint is written (a sweep stopping a trial that has
    // given its last result lands there or later): the epoch is reported, the run is complete.
    let ck = tempfile::tempdir().unwrap();
    let mut child = cmd_on("synthetic:64")
        .args(["--batch-size", "16", "--epochs", "1", "--checkpoint-dir"])
        .arg(ck.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    // Polled: the write takes tens of milliseconds.
    while (std::fs::read_dir(ck.path()).unwrap()).all(|e| e.unwrap().file_name() == ".lock") {
        assert!(
            child.try_wait().unwrap().is_none() && Instant::now() < deadline,
            "no checkpoint seen"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: a signal to a child of this test.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("interrupted"), "{stderr}");
    // On the CPU the start line says what runs: fp32 (TF32 is a CUDA mode).
    assert!(stderr.contains("fp32 via cpu"), "{stderr}");
    let run = records(&o);
    assert_eq!(run.items.len(), 1);
    assert_eq!(run.summary.ok, 1);
}

/// Where, around epoch 1's checkpoint, an interrupt lands.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Around {
    /// Epoch 1's last steps, its evaluation (once step 2's checkpoint is reported).
    Before,
    /// The checkpoint's files being written (a new name in the directory).
    During,
    /// The checkpoint written (its model file replaced).
    After,
}

/// Two ranks of 2 epochs of 4 steps (a checkpoint every 2 steps), rank 0 writing a CSV and
/// TensorBoard under `at`; SIGINT to the `signalled` ranks at `around` epoch 1's end; then
/// `--resume` to the end. The epochs of rank 0's records over both runs.
fn interrupted_around_the_first_epochs_end(
    at: &Path,
    around: Around,
    signalled: &[usize],
) -> Vec<usize> {
    let ck = at.join("ck");
    // 64 images (12 to evaluate): epochs of 4 steps of 8 per rank.
    let rank = |r: usize, port: &str, resume: bool| {
        let mut c = cmd_on("synthetic:64");
        c.args(["--batch-size", "16", "--epochs", "2"])
            .args(["--checkpoint-every", "2", "--lr", "0.05"])
            .args(rank_of(r, 2, port))
            .arg("--checkpoint-dir")
            .arg(&ck)
            .arg("--csv")
            .arg(at.join("epochs.csv"))
            .arg("--tensorboard")
            .arg(at.join("tb"));
        if resume {
            c.arg("--resume");
        }
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    };
    let port = free_port();
    let mut children: Vec<_> = (0..2)
        .map(|r| rank(r, &port, false).spawn().unwrap())
        .collect();
    let pids: Vec<i32> = children.iter().map(|c| c.id() as i32).collect();
    let stdout = children[0].stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    // The first checkpoint record is step 2's, in epoch 1.
    let reader = read_watching(stdout, r#""type":"checkpoint""#, move || {
        let _ = tx.send(());
    });
    let deadline = Instant::now() + Duration::from_secs(300);
    rx.recv_timeout(Duration::from_secs(300))
        .expect("step 2's checkpoint reported");
    let names = || -> Vec<std::ffi::OsString> {
        let mut v: Vec<_> = (std::fs::read_dir(&ck).unwrap())
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let model = || {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(ck.join("last.safetensors"))
            .unwrap()
            .ino()
    };
    let (before, ino) = (names(), model());
    // Polled, not slept on: the window is the checkpoint's write (tens of milliseconds).
    let landed = |c: &mut [std::process::Child]| c[0].try_wait().unwrap().is_some();
    loop {
        let now = match around {
            Around::Before => true,
            Around::During => names().iter().any(|n| !before.contains(n)),
            Around::After => model() != ino,
        };
        if now {
            break;
        }
        assert!(
            !landed(&mut children) && Instant::now() < deadline,
            "{around:?}: epoch 1's checkpoint was never seen"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    for &r in signalled {
        // SAFETY: a signal to a child of this test.
        unsafe { libc::kill(pids[r], libc::SIGINT) };
    }
    let mut outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    outs[0].stdout = reader.join().unwrap();
    for (r, o) in outs.iter().enumerate() {
        // 0 when the interrupt came after the last step's check (the run had ended).
        assert!(
            matches!(o.status.code(), Some(130 | 0)),
            "{around:?} {signalled:?}, rank {r}: {:?} {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let port = free_port();
    let resumed = run_all((0..2).map(|r| rank(r, &port, true)));
    records(&resumed[0]);
    let epochs = |o: &Output| -> Vec<usize> {
        (testkit::records(&o.stdout).iter())
            .filter(|r| r["type"] == "epoch")
            .map(|r| r["epoch"].as_u64().unwrap() as usize)
            .collect()
    };
    let mut printed = epochs(&outs[0]);
    printed.extend(epochs(&resumed[0]));
    printed
}

#[test]
fn an_interrupt_around_an_epochs_end_loses_no_epoch_record_and_repeats_none() {
    let dir = tempfile::tempdir().unwrap();
    let mut tries = Vec::new();
    // Before the write both ranks stop at a step or a collective: once is enough there.
    let both = &[0, 1][..];
    let mut cases = vec![(Around::Before, both)];
    for around in [Around::During, Around::After] {
        cases.extend([(around, &[0][..]), (around, &[1]), (around, both)]);
    }
    for (around, signalled) in cases {
        let at = dir.path().join(format!("{around:?}-{signalled:?}"));
        std::fs::create_dir(&at).unwrap();
        let printed = interrupted_around_the_first_epochs_end(&at, around, signalled);
        // Once its checkpoint exists an epoch is done: --resume does not run it again.
        assert_eq!(printed, [1, 2], "{around:?} {signalled:?}: records");
        let csv = std::fs::read_to_string(at.join("epochs.csv")).unwrap();
        let rows: Vec<&str> = csv
            .lines()
            .skip(1)
            .map(|l| &l[..l.find(',').unwrap()])
            .collect();
        assert_eq!(rows, ["1", "2"], "{around:?} {signalled:?}: CSV rows");
        tries.push(at);
    }
    // TensorBoard's own reader: each epoch's scalars once in each run directory.
    let check = r#"
import sys, json
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
steps = []
for d in sys.argv[1:]:
    ea = EventAccumulator(d + "/tb"); ea.Reload()
    steps.append([e.step for e in ea.Scalars("epoch/val_top1")])
print(json.dumps(steps))
"#;
    let mut args = vec![std::ffi::OsString::from("-c"), check.into()];
    args.extend(tries.iter().map(|t| t.clone().into_os_string()));
    let steps: Vec<Vec<u64>> = serde_json::from_str(&python(args)).unwrap();
    for (t, s) in tries.iter().zip(&steps) {
        assert_eq!(s, &[1, 2], "{}: TensorBoard's epochs", t.display());
    }
}
