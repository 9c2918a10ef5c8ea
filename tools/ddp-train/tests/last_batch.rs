//! An epoch whose images do not fill its last batch trains that smaller batch, as PyTorch's
//! DataLoader(drop_last=False) over a DistributedSampler does: the weights equal PyTorch's on
//! 1 and 2 ranks, a run stopped before the last step resumes to the uninterrupted weights,
//! and --drop-last leaves the last batch out.

mod common;

use std::path::Path;
use std::process::Command;

use common::{epochs, max_rel_diff, model_flag, usr1_after_first_checkpoint};
use testkit::ok;

/// 15 images at a global batch of 6: one rank takes 6, 6, then 3; two ranks (8 each, the
/// sampler repeating one image) take 3, 3, then 2.
const IMAGES: &str = "15";
const BATCH: &str = "6";
const SEED: &str = "4";
const LR: &str = "0.05";
const EPOCHS: &str = "2";

/// `ddp-train --device cpu` with no launcher variables, training `model` on the synthetic
/// images with SGD at a constant LR.
fn cmd(model: &Path) -> Command {
    let mut c = common::cpu();
    c.args(["--threads", "1"])
        .args(["--data", &format!("synthetic:{IMAGES}:16")])
        .args(["--batch-size", BATCH, "--epochs", EPOCHS, "--seed", SEED])
        .args(["--lr", LR, "--schedule", "constant", "--max-val-steps", "1"])
        .arg(model_flag(model));
    c
}

/// Trains on `world` ranks (processes) into `ck`; their records (rank 0's: the others print
/// none).
fn train(model: &Path, ck: &Path, world: usize, extra: &[&str]) -> Vec<u8> {
    let ranks = common::ranks(world, |_| {
        let mut c = cmd(model);
        c.args(extra).arg("--checkpoint-dir").arg(ck);
        c
    });
    let mut records = Vec::new();
    for out in testkit::run_all(ranks) {
        ok(&out);
        records.extend(out.stdout);
    }
    records
}

#[test]
fn the_smaller_last_batch_trains_as_pytorchs_dataloader_does_on_one_and_two_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::bn_model();
    // The images as the loader gives them, in index order.
    let data = dir.path().join("data.npz");
    ok(&cmd(model)
        .args(["--no-shuffle", "--dump-batches", "3", "--dump"])
        .arg(&data)
        .output()
        .unwrap());
    for world in [1usize, 2] {
        let ck = dir.path().join(format!("ck-{world}"));
        let records = train(model, &ck, world, &[]);
        let epochs = epochs(&records);
        assert_eq!(
            epochs.len(),
            2,
            "rank 0 reports each epoch: {}",
            String::from_utf8_lossy(&records)
        );
        for e in &epochs {
            assert_eq!(e["steps"], 3, "{e}");
            assert_eq!(e["left_out"], 0, "{e}");
        }
        let reference = dir.path().join(format!("ref-{world}.safetensors"));
        let port = testkit::free_port().to_string();
        testkit::reference_script(
            "last_batch_ref.py",
            [
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
        let d = max_rel_diff(&ck.join("last.safetensors"), &reference, false);
        assert!(d <= 1e-5, "{world} rank(s): max relative difference {d}");
    }
    // --drop-last: the full batches only, the last one's images counted as left out.
    let records = train(model, &dir.path().join("dropped"), 1, &["--drop-last"]);
    let epochs = epochs(&records);
    assert_eq!(epochs[0]["steps"], 2, "{epochs:?}");
    assert_eq!(epochs[0]["left_out"], 3, "{epochs:?}");
}

#[test]
fn a_run_stopped_before_the_smaller_last_batch_resumes_to_the_same_weights() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::bn_model();
    let straight = dir.path().join("straight");
    train(model, &straight, 1, &[]);
    // A mid-epoch checkpoint after step 2 of 3, then the checkpoint signal: the run stops
    // there, before the smaller last batch.
    let stopped = dir.path().join("stopped");
    let mut run = cmd(model);
    run.args(["--checkpoint-every", "2", "--checkpoint-dir"])
        .arg(&stopped);
    let out = usr1_after_first_checkpoint(vec![run], 0, 0).remove(0);
    testkit::exits(&out, 75);
    let resumed = cmd(model)
        .args(["--checkpoint-every", "2", "--resume", "--checkpoint-dir"])
        .arg(&stopped)
        .output()
        .unwrap();
    ok(&resumed);
    let d = max_rel_diff(
        &straight.join("last.safetensors"),
        &stopped.join("last.safetensors"),
        false,
    );
    assert_eq!(d, 0.0, "resumed before the last batch vs uninterrupted");
}
