//! A real sweep: `sweep` over `ddp-train` on the digits data (scripts/make-digits-cifar), seed
//! 004's learning rate × batch size search, 8 trials on 2 slots, ASHA with max_t 4. The poor
//! learning rates are stopped early, the good ones complete, and the best trial is reported.
//! The trials train a small TorchScript network (`--model torchscript:`), which learns the
//! digits in a second where ResNet-18 takes ten: the sweep, not the network, is tested here.

use std::process::Command;

use serde_json::Value;

#[test]
fn asha_over_ddp_train_stops_the_poor_learning_rates_early() {
    let dir = tempfile::tempdir().unwrap();
    // Grid values in the order listed, batch_size (the first key) fastest: trials 0-3 have the
    // good learning rates, 4-7 the poor ones, so that the rungs hold good values when the poor
    // trials reach them.
    let recs = sweep_over_ddp_train(
        dir.path(),
        r#"{"lr": {"grid": [0.05, 0.02, 1e-5, 1e-6]}, "batch_size": {"grid": [32, 64]}}"#,
        &[
            "--grace-period",
            "1",
            "--reduction-factor",
            "2",
            "--slots",
            "2",
            "--gpus-per-trial",
            "0",
        ],
        "{batch_size}",
    );
    let out = dir.path().join("sweep");
    let ends: Vec<&Value> = recs
        .iter()
        .filter(|r| r["type"] == "trial" && r["event"] == "end")
        .collect();
    assert_eq!(ends.len(), 8);
    for e in &ends {
        let lr = e["config"]["lr"].as_f64().unwrap();
        let status = e["status"].as_str().unwrap();
        if lr < 1e-3 {
            assert_eq!(status, "stopped", "a poor learning rate ran on: {e}");
            assert!(e["stopped_at"].as_f64().unwrap() < 4.0);
        }
        assert_ne!(status, "error", "{e}");
    }
    let summary = recs.last().unwrap();
    assert_eq!(summary["type"], "sweep_summary");
    let best = &summary["best"];
    assert!(best["config"]["lr"].as_f64().unwrap() > 1e-3, "{summary}");
    let acc = best["metric"].as_f64().unwrap();
    eprintln!(
        "best trial {} ({}): val_top1 {acc} at epoch {}",
        best["trial"], best["config"], best["time"]
    );
    assert!(acc > 50.0, "the best trial learned the digits: {summary}");
    // ddp-train wrote its checkpoints into each trial's directory.
    assert!(out.join("trial-0000/ck/last.safetensors").exists());
}

/// Population-based training over ddp-train: a trial in the bottom quarter copies the save of one
/// in the top quarter made when it was compared, and ddp-train --resume goes on from it with a
/// learning rate moved one place along the grid.
#[test]
fn pbt_over_ddp_train_copies_a_good_checkpoint_into_a_poor_trial() {
    let dir = tempfile::tempdir().unwrap();
    let recs = sweep_over_ddp_train(
        dir.path(),
        r#"{"lr": {"grid": [1e-6, 1e-5, 0.02, 0.05]}}"#,
        &[
            "--scheduler",
            "pbt",
            "--perturbation-interval",
            "1",
            "--resample-probability",
            "0",
            "--slots",
            "1",
        ],
        "32",
    );
    let copies: Vec<&Value> = recs.iter().filter(|r| r["type"] == "exploit").collect();
    assert!(!copies.is_empty(), "a poor trial copied a good one");
    let grid = [1e-6, 1e-5, 0.02, 0.05];
    let place = |v: &Value| grid.iter().position(|&g| g == v.as_f64().unwrap()).unwrap() as i64;
    for c in &copies {
        let t = c["trial"].as_u64().unwrap();
        // Explored from the copied trial's (no resampling): one place along the grid, or the
        // same value at its end.
        let shift = place(&c["config"]["lr"]) - place(&c["from_config"]["lr"]);
        assert!(shift.abs() <= 1, "{c}");
        // The copying trial went on from the copied trial's save of from_time (ddp-train
        // writes its checkpoint before it prints the epoch's record, and goes on after it) —
        // not from a later save: one slot, turns at each epoch, so the copied trial is saved
        // again before the copying one runs.
        let first = (recs.iter())
            .skip_while(|r| *r != *c)
            .find(|r| r["type"] == "result" && r["trial"] == t)
            .unwrap_or_else(|| panic!("trial {t} ran after its copy"));
        let (from_time, time) = (
            c["from_time"].as_f64().unwrap(),
            c["time"].as_f64().unwrap(),
        );
        let resumed = first["time"].as_f64().unwrap();
        assert_eq!(
            resumed,
            from_time + 1.0,
            "trial {t} went on at epoch {resumed} after copying a checkpoint of epoch {from_time} at {time}"
        );
    }
    let summary = recs.last().unwrap();
    assert!(
        summary["best"]["metric"].as_f64().unwrap() > 50.0,
        "{summary}"
    );
    let ends: Vec<&Value> = (recs.iter())
        .filter(|r| r["type"] == "trial" && r["event"] == "end")
        .collect();
    assert_eq!(ends.len(), 4);
    assert!(ends.iter().all(|e| e["status"] == "completed"), "{ends:?}");
}

/// `sweep` with `args` over ddp-train on the digits (the small network, 4 epochs of 12 steps,
/// checkpoints in each trial's directory, --resume), the space written from `space`, `batch` as
/// ddp-train's --batch-size (a value or a placeholder); its records, after checking it succeeded.
fn sweep_over_ddp_train(
    dir: &std::path::Path,
    space: &str,
    args: &[&str],
    batch: &str,
) -> Vec<Value> {
    let digits = dir.join("digits");
    testkit::make_digits(&digits, &[]);
    let space_path = dir.join("space.json");
    std::fs::write(&space_path, space).unwrap();
    let mut model = std::ffi::OsString::from("torchscript:");
    model.push(testkit::scripted_model("digits", 10));
    let o = Command::new(testkit::bin("sweep"))
        .arg("--space")
        .arg(&space_path)
        .args([
            "--metric",
            "val_top1",
            "--mode",
            "max",
            "--time-attr",
            "epoch",
        ])
        .args(["--max-t", "4", "-q", "--out-dir"])
        .arg(dir.join("sweep"))
        .args(args)
        .arg("--")
        .arg(testkit::bin("ddp-train"))
        .args(["--device", "cpu", "--data"])
        .arg(format!("cifar100:{}", digits.display()))
        .arg("--model")
        .arg(model)
        .args([
            "--lr",
            "{lr}",
            "--batch-size",
            batch,
            "--epochs",
            "4",
            "--max-steps",
            "12",
            "--schedule",
            "constant",
            "--checkpoint-dir",
            "{trial_dir}/ck",
            "--resume",
            "-q",
        ])
        .env("OMP_NUM_THREADS", "1")
        .output()
        .unwrap();
    testkit::ok(&o);
    testkit::records(&o.stdout)
}
