//! Checkpoints and resume: a run killed or diverged resumes to the same weights, optimiser state
//! round-trips, and damaged, partial or shared checkpoint directories are refused.

use super::*;

#[test]
fn a_run_killed_mid_epoch_resumes_to_the_same_weights() {
    // Uninterrupted: 3 epochs.
    let args = [
        "--batch-size",
        "64",
        "--max-steps",
        "6",
        "--epochs",
        "3",
        "--augment",
        "--seed",
        "9",
        "--max-val-steps",
        "2",
    ];
    let straight = tempfile::tempdir().unwrap();
    trained(cmd().args(args), straight.path());

    // Killed (SIGKILL) once the first checkpoint exists, i.e. somewhere in epoch 2 or 3.
    let ck = tempfile::tempdir().unwrap();
    let mut child = cmd()
        .args(args)
        .arg("--checkpoint-dir")
        .arg(ck.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !ck.path().join("last.safetensors").exists() {
        assert!(t0.elapsed().as_secs() < 120, "no checkpoint appeared");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // No partial file is ever taken for a checkpoint; resume finishes the run.
    let recs = trained(cmd().args(args).args(["--resume"]), ck.path());
    assert!(recs.items.iter().any(|e| e.epoch == 3), "{recs:?}");
    let (a, b) = (
        params(&straight.path().join("last.safetensors")),
        params(&ck.path().join("last.safetensors")),
    );
    for (name, t) in &a {
        assert!(t.equal(&b[name]), "{name} differs after kill + resume");
    }
}

/// `--fused-optim on` (the CUDA default) takes PyTorch's fused SGD and AdamW kernels: the
/// same step as the single-tensor paths to an ulp, and the same checkpointed state, so each
/// resumes the other's momentum buffer or moments (a fused SGD step that ignored the loaded
/// buffer is 5e-3 off).
#[test]
fn fused_optimisers_take_the_same_steps_and_resume_the_same_state() {
    for (optimizer, lr) in [("sgd", "0.05"), ("adamw", "0.001")] {
        let base = [
            "--batch-size",
            "32",
            "--max-steps",
            "1",
            "--seed",
            "3",
            "--optimizer",
            optimizer,
            "--lr",
            lr,
            "--max-val-steps",
            "1",
        ];
        // The optimiser's step and state are the point: the small network's.
        let run = |fused: &str, epochs: &str, resume: bool, dir: &Path| {
            let mut c = small();
            c.args(["--fused-optim", fused])
                .args(base)
                .args(["--epochs", epochs, "--checkpoint-dir"])
                .arg(dir);
            if resume {
                c.arg("--resume");
            }
            records(&c.output().unwrap());
        };
        let (plain, fused) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        run("off", "1", false, plain.path());
        run("on", "1", false, fused.path());
        assert_same_weights(plain.path(), fused.path(), 1e-6);
        // Both resume the plain run's checkpoint (identical weights and state, so identical
        // gradients): one more step each.
        for f in std::fs::read_dir(plain.path()).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, fused.path().join(f.file_name().unwrap())).unwrap();
        }
        run("off", "2", true, plain.path());
        run("on", "2", true, fused.path());
        assert_same_weights(plain.path(), fused.path(), 1e-6);
    }
}

/// One quick epoch of `base()`'s network: its checkpoint directory (one batch evaluated).
fn one_epoch(base: fn() -> Command, ck: &Path) {
    trained(
        base()
            .args(["--batch-size", "64", "--max-steps", "2", "--epochs", "1"])
            .args(["--max-val-steps", "1"]),
        ck,
    );
}

/// One step of a batch of 64 of `base()`'s network (one batch evaluated), the run ending with
/// epoch `epochs`.
fn one_step(base: fn() -> Command, epochs: &str) -> Command {
    let mut c = base();
    c.args(["--batch-size", "64", "--max-steps", "1", "--epochs", epochs])
        .args(["--max-val-steps", "1"]);
    c
}

/// Overwrites the float32 tensor `name` of a safetensors file with NaN in place (its header and
/// metadata kept).
fn poison(path: &Path, name: &str) {
    let mut bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    assert_eq!(header[name]["dtype"], "F32");
    let at = |i: usize| 8 + n + header[name]["data_offsets"][i].as_u64().unwrap() as usize;
    for chunk in bytes[at(0)..at(1)].chunks_exact_mut(4) {
        chunk.copy_from_slice(&f32::NAN.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

/// A run that diverges never writes its NaN weights over the last finite checkpoint (before, it
/// did, and `--resume` with a lower --lr, as the error said, was then refused); NaN in the
/// optimiser's state is an error at --resume naming the tensor.
#[test]
fn a_diverging_run_keeps_the_last_finite_checkpoint_to_resume_from() {
    let tmp = tempfile::tempdir().unwrap();
    let ck = tmp.path().join("ck");
    // What the loop keeps is the point: the small network.
    one_epoch(small, &ck);
    let before = std::fs::read(ck.join("last.safetensors")).unwrap();
    let run = |lr: &str, epochs: &str| {
        small()
            .args(["--batch-size", "64", "--max-steps", "2", "--resume"])
            .args(["--epochs", epochs, "--lr", lr])
            .arg("--checkpoint-dir")
            .arg(&ck)
            .output()
            .unwrap()
    };
    let o = run("1e30", "2");
    let err = testkit::exit_stderr(&o, 1);
    testkit::assert_mentions(&err, &["training diverged", "left as it was"]);
    assert_eq!(
        std::fs::read(ck.join("last.safetensors")).unwrap(),
        before,
        "the epoch-1 checkpoint is kept"
    );
    let o = run("0.01", "2");
    testkit::exits(&o, 0);
    let epochs: Vec<usize> = records(&o).items.iter().map(|e| e.epoch).collect();
    assert_eq!(epochs, [2], "resumed after epoch 1");
    // The optimiser's momentum poisoned: named at --resume, not "diverged" later.
    let train = ck.join("last.train.safetensors");
    let names = Tensor::read_safetensors(&train).unwrap();
    let momentum = names
        .iter()
        .map(|(n, _)| n.clone())
        .find(|n| n.contains("fc.weight"))
        .expect("the fc's momentum");
    poison(&train, &momentum);
    let o = run("0.01", "3");
    let err = testkit::exit_stderr(&o, 1);
    assert!(
        err.contains(&format!("{momentum} holds NaN or infinite values")),
        "{err}"
    );
}

#[test]
fn init_and_resume_refuse_partial_non_finite_and_incomplete_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let ck = tmp.path().join("ck");
    // ResNet-18's: the messages name its layers.
    one_epoch(cmd, &ck);
    let all = Tensor::read_safetensors(ck.join("last.safetensors")).unwrap();
    let run_init = |file: &Path, extra: &[&str]| {
        one_step(cmd, "1")
            .arg("--init")
            .arg(file)
            .args(extra)
            .output()
            .unwrap()
    };
    // Only the classifier: it trained from random layers without a word before.
    let fc_only = tmp.path().join("fc.safetensors");
    let fc: Vec<(String, Tensor)> = all
        .iter()
        .filter(|(n, _)| n.starts_with("fc."))
        .map(|(n, t)| (n.clone(), t.shallow_clone()))
        .collect();
    Tensor::write_safetensors(&fc, &fc_only).unwrap();
    let o = run_init(&fc_only, &[]);
    let err = testkit::exit_stderr(&o, 1);
    testkit::assert_mentions(&err, &["of resnet18 it lacks", "conv1.weight"]);
    assert!(err.contains("--init-non-strict"), "{err}");
    // Deliberately partial: loaded, and what was not is named.
    let o = run_init(&fc_only, &["--init-non-strict"]);
    let err = testkit::exit_stderr(&o, 0);
    testkit::assert_mentions(&err, &["warning", "not loaded", "conv1.weight"]);
    // NaN weights are refused rather than "diverged ... lower --lr".
    let nan = tmp.path().join("nan.safetensors");
    let poisoned: Vec<(String, Tensor)> = all
        .iter()
        .map(|(n, t)| {
            let t = if n == "layer1.0.conv1.weight" {
                t.fill(f64::NAN)
            } else {
                t.shallow_clone()
            };
            (n.clone(), t)
        })
        .collect();
    Tensor::write_safetensors(&poisoned, &nan).unwrap();
    let o = run_init(&nan, &[]);
    let err = testkit::exit_stderr(&o, 1);
    assert!(
        err.contains("layer1.0.conv1.weight holds NaN or infinite values"),
        "{err}"
    );
    poison(&ck.join("last.safetensors"), "layer1.0.conv1.weight");
    let resume = |dir: &Path| {
        one_step(cmd, "2")
            .arg("--resume")
            .arg("--checkpoint-dir")
            .arg(dir)
            .output()
            .unwrap()
    };
    let o = resume(&ck);
    let err = testkit::exit_stderr(&o, 1);
    assert!(
        err.contains("layer1.0.conv1.weight holds NaN or infinite values"),
        "{err}"
    );
    // The training half without the model half: it started at epoch 1 and overwrote it before.
    std::fs::remove_file(ck.join("last.safetensors")).unwrap();
    let before = std::fs::read(ck.join("last.train.safetensors")).unwrap();
    let o = resume(&ck);
    let err = testkit::exit_stderr(&o, 1);
    assert!(err.contains("last.safetensors is missing"), "{err}");
    assert_eq!(
        std::fs::read(ck.join("last.train.safetensors")).unwrap(),
        before
    );
}

#[test]
fn two_runs_on_one_checkpoint_directory_are_refused_naming_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let ck = tmp.path().join("ck");
    let tb = tmp.path().join("tb");
    let mut first = cmd()
        .args(["--batch-size", "64", "--epochs", "1000", "--checkpoint-dir"])
        .arg(&ck)
        .arg("--tensorboard")
        .arg(&tb)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait (with a deadline) for the first run to hold the directory.
    let lock = ck.join(".lock");
    let pid = first.id().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    // ... and to have written its event file.
    while std::fs::read_to_string(&lock)
        .map(|s| s.trim().to_string())
        .ok()
        != Some(pid.clone())
        || std::fs::read_dir(&tb).map_or(0, |d| d.count()) == 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the first run never took the lock"
        );
        assert!(first.try_wait().unwrap().is_none(), "the first run ended");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let logs_before = std::fs::read_dir(&tb).unwrap().count();
    // Both exited 0 before, leaving best and last files of different runs.
    let o = one_step(cmd, "1")
        .arg("--checkpoint-dir")
        .arg(&ck)
        .arg("--tensorboard")
        .arg(&tb)
        .output()
        .unwrap();
    let err = testkit::exit_stderr(&o, 1);
    assert!(
        err.contains(&format!("in use by another run (pid {pid})")),
        "{err}"
    );
    // The refused run left no event file in the live run's log directory.
    assert_eq!(std::fs::read_dir(&tb).map_or(0, |d| d.count()), logs_before);
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    first.wait().unwrap();
    // Once the first has gone, the directory is free again.
    one_epoch(cmd, &ck);
}

#[test]
fn a_run_on_shards_resumes_to_the_same_weights() {
    // The shards' order is a function of the seed and the epoch: two epochs straight, or one
    // and then --resume, take the same steps.
    let base = [
        "--batch-size",
        "32",
        "--max-steps",
        "2",
        "--image-size",
        "28",
        "--workers",
        "2",
        "--max-val-steps",
        "2",
    ];
    let straight = tempfile::tempdir().unwrap();
    // The order of the shards is the point: the small network (10 classes) trains.
    trained(
        with_small_net(&mut digit_shards(), 10)
            .args(base)
            .args(["--epochs", "2"]),
        straight.path(),
    );
    let resumed = tempfile::tempdir().unwrap();
    for (epochs, resume) in [("1", false), ("2", true)] {
        let mut c = digit_shards();
        with_small_net(&mut c, 10)
            .args(base)
            .args(["--epochs", epochs, "--checkpoint-dir"]);
        c.arg(resumed.path());
        if resume {
            c.arg("--resume");
        }
        let recs = records(&c.output().unwrap());
        assert_eq!(recs.items.len(), 1);
    }
    assert_same_weights(straight.path(), resumed.path(), 0.0);
}
