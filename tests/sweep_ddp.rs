//! A real sweep: `sweep` over `ddp-train` on the digits data (scripts/make-digits-cifar), seed
//! 004's learning rate × batch size search, 8 trials on 2 slots, ASHA with max_t 4. The poor
//! learning rates are stopped early, the good ones complete, and the best trial is reported.

use std::process::Command;

use serde_json::Value;

#[test]
fn asha_over_ddp_train_stops_the_poor_learning_rates_early() {
    let dir = tempfile::tempdir().unwrap();
    let digits = dir.path().join("digits");
    testkit::make_digits(&digits, &[]);
    // Grid values in the order listed, batch_size (the first key) fastest: trials 0-3 have the
    // good learning rates, 4-7 the poor ones, so that the rungs hold good values when the poor
    // trials reach them.
    let space = dir.path().join("space.json");
    std::fs::write(
        &space,
        r#"{"lr": {"grid": [0.05, 0.02, 1e-5, 1e-6]}, "batch_size": {"grid": [32, 64]}}"#,
    )
    .unwrap();
    let out = dir.path().join("sweep");
    let o = Command::new(testkit::bin("sweep"))
        .arg("--space")
        .arg(&space)
        .args([
            "--metric",
            "val_top1",
            "--mode",
            "max",
            "--time-attr",
            "epoch",
            "--max-t",
            "4",
            "--grace-period",
            "1",
            "--reduction-factor",
            "2",
        ])
        .args(["--slots", "2", "--gpus-per-trial", "0", "-q", "--out-dir"])
        .arg(&out)
        .arg("--")
        .arg(testkit::bin("ddp-train"))
        .args(["--device", "cpu", "--data"])
        .arg(format!("cifar100:{}", digits.display()))
        .args([
            "--lr",
            "{lr}",
            "--batch-size",
            "{batch_size}",
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
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let recs = testkit::records(&o.stdout);
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
