//! An epoch whose images do not fill its last batch trains that smaller batch, as PyTorch's
//! DataLoader(drop_last=False) over a DistributedSampler does: the weights equal PyTorch's on
//! 1 and 2 ranks, a run stopped before the last step resumes to the uninterrupted weights,
//! and --drop-last leaves the last batch out.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_ddp-train");

/// 15 images at a global batch of 6: one rank takes 6, 6, then 3; two ranks (8 each, the
/// sampler repeating one image) take 3, 3, then 2.
const IMAGES: &str = "15";
const BATCH: &str = "6";
const SEED: &str = "4";
const LR: &str = "0.05";
const EPOCHS: &str = "2";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn python(script: &str, args: &[&std::ffi::OsStr]) -> Output {
    let out = Command::new(testkit::python())
        .arg(root().join("scripts/reference").join(script))
        .args(args)
        .output()
        .unwrap();
    ok(&out);
    out
}

/// `ddp-train --device cpu` with no launcher variables, training `model` on the synthetic
/// images with SGD at a constant LR.
fn cmd(model: &Path) -> Command {
    let mut c = Command::new(BIN);
    for v in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "SLURM_PROCID",
    ] {
        c.env_remove(v);
    }
    let mut m = std::ffi::OsString::from("--model=torchscript:");
    m.push(model);
    c.args(["--device", "cpu", "--threads", "1"])
        .args(["--data", &format!("synthetic:{IMAGES}:16")])
        .args(["--batch-size", BATCH, "--epochs", EPOCHS, "--seed", SEED])
        .args(["--lr", LR, "--schedule", "constant", "--max-val-steps", "1"])
        .arg(m);
    c
}

/// Trains on `world` ranks (processes) into `ck`; their records.
fn train(model: &Path, ck: &Path, world: usize, extra: &[&str]) -> Vec<String> {
    let port = testkit::free_port().to_string();
    let children: Vec<_> = (0..world)
        .map(|r| {
            let mut c = cmd(model);
            c.args(extra).arg("--checkpoint-dir").arg(ck);
            if world > 1 {
                c.args(["--rank", &r.to_string(), "--world-size", &world.to_string()])
                    .args(["--master-addr", "127.0.0.1", "--master-port", &port]);
            }
            c.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut records = Vec::new();
    for c in children {
        let out = c.wait_with_output().unwrap();
        ok(&out);
        records.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(String::from),
        );
    }
    records
}

/// The largest difference between two checkpoints' tensors (the module's state_dict: the same
/// names in both), relative to each tensor's largest value (at least 1).
fn max_rel_diff(a: &Path, b: &Path) -> f64 {
    let read = |p: &Path| -> std::collections::BTreeMap<String, tch::Tensor> {
        tch::Tensor::read_safetensors(p)
            .unwrap()
            .into_iter()
            .collect()
    };
    let (a, b) = (read(a), read(b));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    a.iter()
        .map(|(k, x)| {
            let (x, y) = (
                x.to_kind(tch::Kind::Double),
                b[k].to_kind(tch::Kind::Double),
            );
            let scale = y.abs().max().double_value(&[]).max(1.0);
            (x - y).abs().max().double_value(&[]) / scale
        })
        .fold(0.0, f64::max)
}

fn epochs_of(records: &[String]) -> Vec<serde_json::Value> {
    records
        .iter()
        .filter(|l| l.contains(r#""type":"epoch""#))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_smaller_last_batch_trains_as_pytorchs_dataloader_does_on_one_and_two_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("bn.pt");
    let make = ["make", "bn"].map(std::ffi::OsStr::new);
    python(
        "torchscript_models.py",
        &[make[0], make[1], model.as_os_str(), "100".as_ref()],
    );
    // The images as the loader gives them, in index order.
    let data = dir.path().join("data.npz");
    ok(&cmd(&model)
        .args(["--no-shuffle", "--dump-batches", "3", "--dump"])
        .arg(&data)
        .output()
        .unwrap());
    for world in [1usize, 2] {
        let ck = dir.path().join(format!("ck-{world}"));
        let records = train(&model, &ck, world, &[]);
        let epochs = epochs_of(&records);
        assert_eq!(epochs.len(), 2, "rank 0 reports each epoch: {records:?}");
        for e in &epochs {
            assert_eq!(e["steps"], 3, "{e}");
            assert_eq!(e["left_out"], 0, "{e}");
        }
        let reference = dir.path().join(format!("ref-{world}.safetensors"));
        let port = testkit::free_port().to_string();
        python(
            "last_batch_ref.py",
            &[
                model.as_os_str(),
                data.as_os_str(),
                reference.as_os_str(),
                SEED.as_ref(),
                LR.as_ref(),
                EPOCHS.as_ref(),
                BATCH.as_ref(),
                world.to_string().as_ref(),
                port.as_ref(),
            ],
        );
        // The same kernels on the same batches; only the order of DDP's gloo sum and of
        // libtorch's reductions may differ: float32 rounding over six steps stays below 1e-5.
        let d = max_rel_diff(&ck.join("last.safetensors"), &reference);
        assert!(d <= 1e-5, "{world} rank(s): max relative difference {d}");
    }
    // --drop-last: the full batches only, the last one's images counted as left out.
    let records = train(&model, &dir.path().join("dropped"), 1, &["--drop-last"]);
    let epochs = epochs_of(&records);
    assert_eq!(epochs[0]["steps"], 2, "{epochs:?}");
    assert_eq!(epochs[0]["left_out"], 3, "{epochs:?}");
}

#[test]
fn a_run_stopped_before_the_smaller_last_batch_resumes_to_the_same_weights() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("bn.pt");
    let make = ["make", "bn"].map(std::ffi::OsStr::new);
    python(
        "torchscript_models.py",
        &[make[0], make[1], model.as_os_str(), "100".as_ref()],
    );
    let straight = dir.path().join("straight");
    train(&model, &straight, 1, &[]);
    // A mid-epoch checkpoint after step 2 of 3, then the checkpoint signal: the run stops
    // there, before the smaller last batch.
    let stopped = dir.path().join("stopped");
    let mut child = cmd(&model)
        .args(["--checkpoint-every", "2", "--checkpoint-dir"])
        .arg(&stopped)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().contains(r#""type":"checkpoint""#) {
            // SAFETY: a signal to our child, still running (its stdout is open).
            assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR1) }, 0);
            break;
        }
    }
    lines.for_each(drop);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resumed = cmd(&model)
        .args(["--checkpoint-every", "2", "--resume", "--checkpoint-dir"])
        .arg(&stopped)
        .output()
        .unwrap();
    ok(&resumed);
    let d = max_rel_diff(
        &straight.join("last.safetensors"),
        &stopped.join("last.safetensors"),
    );
    assert_eq!(d, 0.0, "resumed before the last batch vs uninterrupted");
}
