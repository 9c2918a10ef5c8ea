//! `sweep` through its command line over `curve` (examples/curve.rs), a trial whose metric
//! follows a known curve of its config: Ray's decisions with one slot, slots and their GPUs,
//! retries, a trial that ignores SIGTERM, kill -9 and --resume, interrupts, the trial files and
//! TensorBoard's reader, usage errors.

mod common;

use common::{BIN, Records, curve, ok, records, sweep, sweep_running};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use records::{Decision, SweepSummary, TrialRecord, TrialResult};
use serde_json::{Value, json};

/// (trial → stop time) and the completed trials, from end records.
fn outcome(ends: &[TrialRecord]) -> (BTreeMap<usize, f64>, Vec<usize>) {
    let mut stopped = BTreeMap::new();
    let mut completed = Vec::new();
    for e in ends {
        match e.status.as_deref() {
            Some("stopped") => {
                stopped.insert(e.trial, e.stopped_at.unwrap());
            }
            Some("completed") => completed.push(e.trial),
            other => panic!("trial {} ended {other:?}: {:?}", e.trial, e.message),
        }
    }
    completed.sort();
    (stopped, completed)
}

fn lr_batch_space() -> Value {
    json!({"lr": {"grid": [1e-4, 1e-3, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0]}, "batch_size": {"grid": [64, 512]}})
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
];

/// Nine seeded draws of the space, run to the end (FIFO), maximising val_top1.
const NINE_DRAWS: &[&str] = &[
    "--samples",
    "9",
    "--seed",
    "3",
    "--scheduler",
    "fifo",
    "--metric",
    "val_top1",
    "--mode",
    "max",
];

/// FIFO over the curve's epochs, each trial complete at epoch 4.
const FIFO_TO_4: &[&str] = &[
    "--scheduler",
    "fifo",
    "--metric",
    "val_top1",
    "--mode",
    "max",
    "--time-attr",
    "epoch",
    "--max-t",
    "4",
];

/// Every trial's whole curve, from the program itself.
fn curves(configs: &[&serde_json::Map<String, Value>], epochs: u32) -> Vec<Vec<(f64, f64)>> {
    configs
        .iter()
        .map(|c| {
            let o = Command::new(curve())
                .args([
                    "--lr",
                    &c["lr"].to_string(),
                    "--batch-size",
                    &c["batch_size"].to_string(),
                    "--epochs",
                    &epochs.to_string(),
                ])
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .filter(|v| v["type"] == "epoch")
                .map(|v| {
                    (
                        v["epoch"].as_f64().unwrap(),
                        v["val_top1"].as_f64().unwrap(),
                    )
                })
                .collect()
        })
        .collect()
}

/// Ray Tune's stopped set and completions for trials run one after another.
fn ray_sequential(
    curves: &[Vec<(f64, f64)>],
    max_t: f64,
    rf: f64,
    seed: u32,
) -> (BTreeMap<usize, f64>, Vec<usize>) {
    let case = json!([{
        "settings": {"mode": "max", "max_t": max_t, "grace_period": 1, "reduction_factor": rf, "brackets": 1},
        "seed": seed, "curves": curves,
    }]);
    let r = &common::ray("sequential", &case)[0];
    let stopped = r["stopped"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.parse().unwrap(), v.as_f64().unwrap()))
        .collect();
    let mut completed: Vec<usize> = r["completed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    completed.sort();
    (stopped, completed)
}

#[test]
fn one_slot_stops_what_ray_tune_stops_at_the_same_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = sweep(
        dir.path(),
        &lr_batch_space(),
        &[ASHA, &["--out-dir", out.to_str().unwrap()]].concat(),
        &[
            "--lr",
            "{lr}",
            "--batch-size",
            "{batch_size}",
            "--epochs",
            "12",
        ],
    )
    .output()
    .unwrap();
    let r = ok(&o);
    assert_eq!(r.starts.len(), 16);
    assert_eq!(r.ends.len(), 16);
    // Generation order: batch_size (the first key) fastest; with one slot, trials run in that
    // order.
    assert_eq!(
        r.starts.iter().map(|s| s.trial).collect::<Vec<_>>(),
        (0..16).collect::<Vec<_>>()
    );
    assert_eq!(
        (&r.starts[1].config["lr"], &r.starts[1].config["batch_size"]),
        (&json!(1e-4), &json!(512))
    );
    assert_eq!(
        (&r.starts[2].config["lr"], &r.starts[2].config["batch_size"]),
        (&json!(1e-3), &json!(64))
    );

    let configs: Vec<_> = r.starts.iter().map(|s| &s.config).collect();
    let want = ray_sequential(&curves(&configs, 12), 9.0, 3.0, 0);
    let got = outcome(&r.ends);
    assert_eq!(got, want, "sweep vs Ray Tune: (stopped at, completed)");
    assert!(
        got.0.len() >= 6 && got.1.len() >= 2,
        "the curves make ASHA stop some and keep some: {got:?}"
    );

    // Completed trials went to max_t and no further; decisions were printed at each rung.
    for t in &got.1 {
        let last = r
            .results
            .iter()
            .filter(|x| x.trial == *t)
            .map(|x| x.time)
            .fold(0.0, f64::max);
        assert_eq!(last, 9.0, "trial {t}");
    }
    for d in &r.decisions {
        assert!([1.0, 3.0, 9.0].contains(&d.milestone), "{d:?}");
    }
    for (t, at) in &got.0 {
        let d = r
            .decisions
            .iter()
            .find(|d| d.trial == *t && d.action == "stop")
            .unwrap();
        assert_eq!(d.milestone, *at);
        assert!(d.value < d.cutoff.unwrap());
    }
    let s = r.summary.unwrap();
    assert_eq!(
        (s.trials, s.completed + s.stopped, s.error, s.unfinished),
        (16, 16, 0, 0)
    );
    let best = s.best.unwrap();
    assert_eq!(
        (best.config["lr"].clone(), best.config["batch_size"].clone()),
        (json!(0.03), json!(64)),
        "the curve's best"
    );

    // Ray Tune's per-trial files, the journal and the plot.
    let t0 = out.join("trial-0000");
    let params: Value =
        serde_json::from_slice(&std::fs::read(t0.join("params.json")).unwrap()).unwrap();
    assert_eq!(params, json!({"batch_size": 64, "lr": 1e-4}));
    assert_eq!(r.retries.len(), 0);
    let results = r.results.iter().filter(|x| x.trial == 0).count();
    let lines: Vec<Value> = std::fs::read_to_string(t0.join("result.json"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), results);
    assert_eq!(lines[0]["config"], params);
    assert_eq!(lines[0]["training_iteration"], 1);
    let csv = std::fs::read_to_string(t0.join("progress.csv")).unwrap();
    assert_eq!(csv.lines().count(), results + 1);
    assert!(csv.lines().next().unwrap().contains("config/lr"));
    let svg = std::fs::read_to_string(out.join("metric.svg")).unwrap();
    assert_eq!(svg.matches("<polyline").count(), 16);
    assert!(
        std::fs::read_to_string(out.join("journal.jsonl"))
            .unwrap()
            .lines()
            .count()
            > 16 * 3
    );

    // best.json names the summary's best trial; results.csv has a row per trial.
    let best_file: Value =
        serde_json::from_slice(&std::fs::read(out.join("best.json")).unwrap()).unwrap();
    assert_eq!(best_file["trial"], json!(best.trial));
    assert_eq!(best_file["config"], Value::Object(best.config.clone()));
    assert_eq!(
        (
            &best_file["metric"],
            &best_file["mode"],
            &best_file["value"]
        ),
        (&json!("val_top1"), &json!("max"), &json!(best.metric))
    );
    assert_eq!(
        best_file["dir"],
        json!(
            out.join(format!("trial-{:04}", best.trial))
                .display()
                .to_string()
        )
    );
    let table = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let rows: Vec<Vec<&str>> = table.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(
        rows[0],
        [
            "trial",
            "status",
            "config/batch_size",
            "config/lr",
            "results",
            "epoch",
            "last_val_top1",
            "best_val_top1",
            "stopped_at",
            "attempts",
            "dir",
            "message"
        ]
    );
    assert_eq!(rows.len(), 17);
    for e in &r.ends {
        let row = &rows[e.trial + 1];
        let last = r.results.iter().rfind(|x| x.trial == e.trial).unwrap();
        assert_eq!(
            (row[0], row[1], row[5], row[6]),
            (
                e.trial.to_string().as_str(),
                e.status.as_deref().unwrap(),
                last.time.to_string().as_str(),
                last.metric.to_string().as_str()
            ),
            "{table}"
        );
        assert_eq!(
            row[8],
            e.stopped_at.map(|x| x.to_string()).unwrap_or_default()
        );
    }

    // TensorBoard reads the event files: a scalar per epoch, the hparams of the trial, and its
    // end: a stopped trial is Unknown (0) with stopped_early 1, a completed one a success (1)
    // with 0.
    let check = r#"
import sys, glob
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
def trial(d):
    ea = EventAccumulator(d); ea.Reload()
    content = ea.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"]).session_end_info
    return ea, start, end
ea, start, end = trial(sys.argv[1])
steps = [e.step for e in ea.Scalars("val_top1")]
root = EventAccumulator(sys.argv[2]); root.Reload()
exp = plugin_data_pb2.HParamsPluginData.FromString(root.PluginTagToContent("hparams")["_hparams_/experiment"]).experiment
print(steps, start.hparams["lr"].number_value, start.hparams["batch_size"].number_value,
      sorted(h.name for h in exp.hparam_infos), [m.name.tag for m in exp.metric_infos])
for d in sys.argv[3:]:
    ea, _, end = trial(d)
    print(end.status, ea.Scalars("stopped_early")[-1].value)
"#;
    let stopped = *got.0.keys().next().unwrap();
    let completed = got.1[0];
    let py = Command::new(common::python())
        .args(["-c", check])
        .arg(&t0)
        .arg(&out)
        .arg(out.join(format!("trial-{stopped:04}")))
        .arg(out.join(format!("trial-{completed:04}")))
        .output()
        .unwrap();
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    let steps: Vec<String> = (1..=results).map(|e| e.to_string()).collect();
    assert_eq!(
        String::from_utf8_lossy(&py.stdout).trim(),
        format!(
            "[{}] 0.0001 64.0 ['batch_size', 'lr'] ['val_top1', 'stopped_early']\n0 1.0\n1 0.0",
            steps.join(", ")
        )
    );
}

#[test]
fn slots_run_at_once_each_with_its_own_gpus_never_two_trials_in_one_slot() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let locks = dir.path().join("locks");
    std::fs::create_dir(&locks).unwrap();
    let lock = format!("{}/slot-{{slot}}", locks.display());
    let space =
        json!({"lr": {"loguniform": [1e-4, 1.0]}, "batch_size": {"choice": [64, 128, 256]}});
    let start = Instant::now();
    let o = sweep(
        dir.path(),
        &space,
        &[
            NINE_DRAWS,
            &[
                "--time-attr",
                "epoch",
                "--max-t",
                "5",
                "--slots",
                "3",
                "--gpus-per-trial",
                "2",
                "--gpus",
                "0,1,2,3,4,5",
                "--out-dir",
                out.to_str().unwrap(),
            ],
        ]
        .concat(),
        &[
            "--lr",
            "{lr}",
            "--batch-size",
            "{batch_size}",
            "--epochs",
            "5",
            "--sleep-ms",
            "400",
            "--slot-lock",
            &lock,
        ],
    )
    .output()
    .unwrap();
    let elapsed = start.elapsed();
    let r = ok(&o);
    assert_eq!(r.ends.len(), 9);
    assert!(
        r.ends
            .iter()
            .all(|e| e.status.as_deref() == Some("completed")),
        "fifo runs every trial to the end (a lock clash exits 4)"
    );
    let gpus = ["0,1", "2,3", "4,5"];
    for res in &r.results {
        let slot = r
            .starts
            .iter()
            .find(|s| s.trial == res.trial)
            .unwrap()
            .slot
            .unwrap();
        assert_eq!(
            res.record["cuda"], gpus[slot],
            "trial {} in slot {slot}",
            res.trial
        );
    }
    assert_eq!(
        r.starts
            .iter()
            .map(|s| s.slot.unwrap())
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        3
    );
    // Nine trials of 5 × 400 ms on three slots: about three trials' time (6 s), well under
    // half of nine's (18 s) even on a loaded machine (the trials sleep).
    assert!(
        elapsed < Duration::from_secs(9),
        "{elapsed:?}: the slots did not run at once"
    );
    // The same seed draws the same configs.
    let again = tempfile::tempdir().unwrap();
    let o2 = sweep(
        again.path(),
        &space,
        &[
            NINE_DRAWS,
            &[
                "--max-t",
                "2",
                "--gpus-per-trial",
                "0",
                "--out-dir",
                again.path().join("o").to_str().unwrap(),
            ],
        ]
        .concat(),
        &["--lr", "{lr}", "--epochs", "1"],
    )
    .output()
    .unwrap();
    let configs = |r: &Records| {
        let mut v: Vec<(usize, Value)> = r
            .starts
            .iter()
            .map(|s| (s.trial, Value::Object(s.config.clone())))
            .collect();
        v.sort_by_key(|x| x.0);
        v
    };
    assert_eq!(configs(&ok(&o2)), configs(&r));
}

#[test]
fn a_failed_trial_is_retried_from_its_checkpoint_and_one_out_of_retries_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let space = json!({"lr": 0.03, "crash": {"grid": [0, 2]}});
    let cmd = [
        "--lr",
        "{lr}",
        "--epochs",
        "4",
        "--crash-at",
        "{crash}",
        "--state",
        "{trial_dir}/state",
    ];
    // One retry allowed: trial 1 crashes after epoch 2, runs again from its state, completes.
    let out = dir.path().join("retry");
    let r = ok(&sweep(
        dir.path(),
        &space,
        &[
            FIFO_TO_4,
            &["--max-failures", "1", "--out-dir", out.to_str().unwrap()],
        ]
        .concat(),
        &cmd,
    )
    .output()
    .unwrap());
    assert_eq!(r.retries.len(), 1);
    assert_eq!(r.retries[0].trial, 1);
    assert!(
        r.retries[0]
            .message
            .as_deref()
            .unwrap()
            .contains("exit status 1: curve: crashing at epoch 2 as asked"),
        "{:?}",
        r.retries[0]
    );
    let epochs: Vec<f64> = r
        .results
        .iter()
        .filter(|x| x.trial == 1)
        .map(|x| x.time)
        .collect();
    assert_eq!(
        epochs,
        [1.0, 2.0, 3.0, 4.0],
        "the retry continued after epoch 2"
    );
    assert!(
        r.ends
            .iter()
            .all(|e| e.status.as_deref() == Some("completed"))
    );

    // No retries: the trial is an error, the other completes, exit 3.
    let out = dir.path().join("error");
    std::fs::create_dir_all(&out).unwrap();
    let o = sweep(
        dir.path(),
        &space,
        &[FIFO_TO_4, &["--out-dir", out.to_str().unwrap()]].concat(),
        &cmd,
    )
    .output()
    .unwrap();
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = records(&o.stdout);
    let e = r.ends.iter().find(|e| e.trial == 1).unwrap();
    assert_eq!(e.status.as_deref(), Some("error"));
    assert!(e.message.as_deref().unwrap().contains("exit status 1"));
    assert_eq!(r.summary.unwrap().error, 1);

    // A command that cannot start is a trial error too, not the sweep's end.
    let o = Command::new(BIN)
        .arg("--space")
        .arg(dir.path().join("space.json"))
        .args(["--metric", "m", "--mode", "max", "--out-dir"])
        .arg(dir.path().join("nocmd"))
        .args(["--", "/nonexistent/program", "{lr}"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let r = records(&o.stdout);
    assert_eq!(r.ends.len(), 2);
    assert!(
        r.ends[0]
            .message
            .as_deref()
            .unwrap()
            .contains("/nonexistent/program"),
        "{:?}",
        r.ends[0]
    );
}

#[test]
fn a_trial_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // Trial 0 is good, trial 1 poor: ASHA (rf 2) stops trial 1 at epoch 1; it ignores SIGTERM and
    // would print for 300 s.
    let space = json!({"lr": {"grid": [0.03, 1e-4]}});
    let start = Instant::now();
    let mut c = sweep(
        dir.path(),
        &space,
        &[
            "--metric",
            "val_top1",
            "--mode",
            "max",
            "--time-attr",
            "epoch",
            "--max-t",
            "2",
            "--reduction-factor",
            "2",
            "--stop-grace-secs",
            "0.5",
            "--out-dir",
            out.to_str().unwrap(),
        ],
        &[
            "--lr",
            "{lr}",
            "--epochs",
            "3000",
            "--sleep-ms",
            "100",
            "--ignore-term",
        ],
    );
    let r = ok(&c.output().unwrap());
    let elapsed = start.elapsed();
    let (stopped, completed) = outcome(&r.ends);
    assert_eq!(stopped, BTreeMap::from([(1, 1.0)]));
    assert_eq!(completed, [0]);
    assert!(
        elapsed < Duration::from_secs(60),
        "{elapsed:?}: SIGKILL after the grace period"
    );
    assert!(
        r.results.iter().all(|x| x.trial != 1 || x.time <= 1.0),
        "no results of a stopped trial"
    );
}

/// Reads the sweep's stdout until `n` result records have come, then kills it with SIGKILL.
fn kill_after_results(mut c: Command, n: usize) {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut seen = 0;
    for line in BufReader::new(stdout).lines() {
        if line.unwrap().contains("\"type\":\"result\"") {
            seen += 1;
            if seen == n {
                break;
            }
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

fn journal_ends(out: &Path) -> Vec<(u64, String)> {
    let mut v: Vec<(u64, String)> = std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "end")
        .map(|e| {
            (
                e["trial"].as_u64().unwrap(),
                e["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

fn journal_results(out: &Path) -> Vec<(u64, f64)> {
    std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "result")
        .map(|e| (e["trial"].as_u64().unwrap(), e["time"].as_f64().unwrap()))
        .collect()
}

#[test]
fn kill_9_then_resume_ends_with_the_decisions_of_an_uninterrupted_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let args = |out: &Path| {
        [ASHA, &["--out-dir", out.to_str().unwrap()]]
            .concat()
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    let cmd = [
        "--lr",
        "{lr}",
        "--batch-size",
        "{batch_size}",
        "--epochs",
        "12",
        "--sleep-ms",
        "15",
        "--state",
        "{trial_dir}/state",
    ];
    let whole = dir.path().join("whole");
    let a = args(&whole);
    let r = ok(&sweep(
        dir.path(),
        &lr_batch_space(),
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
        &cmd,
    )
    .output()
    .unwrap());
    let want = outcome(&r.ends);

    let cut = dir.path().join("cut");
    let a = args(&cut);
    // Killed in the middle of the fourth trial, then killed again during the resumed run.
    kill_after_results(
        sweep(
            dir.path(),
            &lr_batch_space(),
            &a.iter().map(String::as_str).collect::<Vec<_>>(),
            &cmd,
        ),
        9,
    );
    let mut resume = Command::new(BIN);
    resume
        .args(["--resume", "--report-secs", "0", "--out-dir"])
        .arg(&cut);
    kill_after_results(resume, 12);
    let mut resume = Command::new(BIN);
    resume.args(["--resume", "--out-dir"]).arg(&cut);
    let r = ok(&resume.output().unwrap());
    assert_eq!(r.summary.as_ref().unwrap().trials, 16);
    assert_eq!(r.summary.as_ref().unwrap().unfinished, 0);
    assert_eq!(journal_ends(&cut), journal_ends(&whole));
    // The same results, each once: restarted trials continued from their state.
    assert_eq!(journal_results(&cut), journal_results(&whole));
    let mut from_journal: Vec<TrialRecord> = Vec::new();
    for l in std::fs::read_to_string(cut.join("journal.jsonl"))
        .unwrap()
        .lines()
    {
        let e: Value = serde_json::from_str(l).unwrap();
        if e["event"] == "end" {
            let stopped_at = journal_results(&cut)
                .iter()
                .filter(|(t, _)| *t == e["trial"].as_u64().unwrap())
                .map(|x| x.1)
                .fold(0.0, f64::max);
            from_journal.push(TrialRecord {
                event: "end".into(),
                trial: e["trial"].as_u64().unwrap() as usize,
                config: Default::default(),
                dir: PathBuf::new(),
                attempt: 1,
                slot: None,
                status: e["status"].as_str().map(String::from),
                stopped_at: Some(stopped_at),
                last: None,
                message: None,
            });
        }
    }
    assert_eq!(outcome(&from_journal), want);

    // A resumed sweep takes its definition from the journal: redefining it is a usage error.
    let o = Command::new(BIN)
        .args(["--resume", "--metric", "x", "--out-dir"])
        .arg(&cut)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    // And a new sweep does not overwrite an old one.
    let o = sweep(
        dir.path(),
        &lr_batch_space(),
        &args(&cut).iter().map(String::as_str).collect::<Vec<_>>(),
        &cmd,
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--resume"));
}

#[test]
fn sigint_stops_the_trials_exits_130_and_resume_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let space = json!({"lr": {"grid": [0.01, 0.03]}});
    let mut c = sweep(
        dir.path(),
        &space,
        &[
            "--scheduler",
            "fifo",
            "--metric",
            "val_top1",
            "--mode",
            "max",
            "--time-attr",
            "epoch",
            "--max-t",
            "40",
            "--slots",
            "2",
            "--gpus-per-trial",
            "0",
            "--out-dir",
            out.to_str().unwrap(),
        ],
        &[
            "--lr",
            "{lr}",
            "--epochs",
            "40",
            "--sleep-ms",
            "50",
            "--state",
            "{trial_dir}/state",
        ],
    );
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut results = 0;
    for l in lines.by_ref() {
        if l.unwrap().contains("\"type\":\"result\"") {
            results += 1;
            if results == 4 {
                break;
            }
        }
    }
    let t = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    // Not a hang: what shows that the trials were stopped, not waited for, is the summary's
    // two unfinished trials.
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    let summary: SweepSummary = serde_json::from_str(rest.last().unwrap()).unwrap();
    assert_eq!(summary.unfinished, 2);
    let mut resume = Command::new(BIN);
    resume
        .args([
            "--resume",
            "--slots",
            "2",
            "--gpus-per-trial",
            "0",
            "--out-dir",
        ])
        .arg(&out);
    let r = ok(&resume.output().unwrap());
    assert_eq!(r.summary.unwrap().completed, 2);
    let times: Vec<(u64, f64)> = journal_results(&out);
    for trial in 0..2 {
        let t: Vec<f64> = times.iter().filter(|x| x.0 == trial).map(|x| x.1).collect();
        assert_eq!(
            t,
            (1..=40).map(f64::from).collect::<Vec<_>>(),
            "trial {trial}: every epoch once"
        );
    }
}

/// A job that Slurm cancels (a node failure, preemption) gets SIGTERM in every process: the
/// sweep and its trials alike. A trial ended by that signal is unfinished, not failed, even
/// when its exit is seen before the sweep's own SIGTERM: --resume runs it again.
#[test]
fn a_trial_ended_by_the_signal_that_stops_the_sweep_is_unfinished_not_failed() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"echo $$ > "$SWEEP_TRIAL_DIR/pid"
echo '{{"epoch": 1, "m": 1}}'
trap 'exit 143' TERM
sleep 600 >/dev/null & wait"#;
    let mut c = shell_sweep(dir.path(), script);
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid_file = dir.path().join("run/trial-0000/pid");
    let t = Instant::now();
    let trial = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            break p;
        }
        assert!(
            t.elapsed() < Duration::from_secs(600),
            "the trial never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // As Slurm cancels a job: the sweep, then at once its trial.
    // SAFETY: signals to our own child and to the trial it started.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
        libc::kill(trial, libc::SIGTERM);
    }
    let mut stdout = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let r = records(stdout.as_bytes());
    assert!(r.ends.is_empty(), "{:?}", r.ends);
    assert_eq!(r.summary.unwrap().unfinished, 1);
    let journal = std::fs::read_to_string(dir.path().join("run/journal.jsonl")).unwrap();
    assert!(!journal.contains("\"failure\""), "{journal}");
}

#[test]
fn usage_errors_exit_2_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never");
    let o = |space: Value, extra: &[&str], cmd: &[&str]| {
        let mut args = vec![
            "--metric",
            "m",
            "--mode",
            "max",
            "--out-dir",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        sweep(dir.path(), &space, &args, cmd).output().unwrap()
    };
    for (space, extra, cmd, want) in [
        (
            json!({"lr": 0.1}),
            &[][..],
            &["--lr", "{lrr}"][..],
            "unknown placeholder {lrr}",
        ),
        (
            json!({"lr": {"uniform": [1, 0]}}),
            &[],
            &["--lr", "{lr}"],
            "uniform needs a < b",
        ),
        (
            json!({"lr": 0.1}),
            &["--reduction-factor", "1"],
            &[],
            "--reduction-factor must be greater than 1",
        ),
        (
            json!({"lr": 0.1}),
            &["--slots", "3", "--gpus", "0,1"],
            &[],
            "needs 3 GPUs, 2 given",
        ),
        // Every config was made up front: this aborted in 0.5 s (a 10^6-point grid took 2 GB).
        (
            json!({"lr": {"uniform": [0, 1]}}),
            &["--samples", "100000000"],
            &["--lr", "{lr}"],
            "gives 100000000 trials",
        ),
        (
            json!({"a": {"grid": (0..1000).collect::<Vec<_>>()}, "b": {"grid": (0..1000).collect::<Vec<_>>()}}),
            &[],
            &["--a", "{a}", "--b", "{b}"],
            "gives 1000000 trials",
        ),
        (
            tpe_space(),
            &["--search", "tpe"],
            &["--lr", "{lr}", "--batch-size", "{batch_size}"],
            "--samples",
        ),
        (
            json!({"lr": {"grid": [0.1, 0.01]}}),
            &["--search", "tpe", "--samples", "4"],
            &["--lr", "{lr}"],
            "grid",
        ),
        (
            json!({"lr": 0.1}),
            &["--min-samples", "2"],
            &[],
            "--scheduler median",
        ),
        // Settings that size allocations: bounded before anything is made.
        (
            json!({"lr": 0.1}),
            &["--brackets", "1000000000000"],
            &[],
            "--brackets must be at most",
        ),
        (
            json!({"lr": 0.1}),
            &[
                "--max-t",
                "1e300",
                "--grace-period",
                "1e-300",
                "--reduction-factor",
                "1.000001",
            ],
            &[],
            "rungs; at most",
        ),
        (json!({"lr": 0.1}), &["--slots", "5000"], &[], "--slots"),
        (
            json!({"lr": 0.1}),
            &["--cpus-per-trial", "1000000000000000000"],
            &[],
            "--cpus-per-trial",
        ),
        (
            json!({"lr": 0.1}),
            &["--gpus-per-trial", "1000000000000000000"],
            &[],
            "--gpus-per-trial",
        ),
        // A width past the largest double panicked (random, hyperband) or drew null (BOHB).
        (
            json!({"lr": {"uniform": [-1e308, 1e308]}}),
            &["--search", "bohb", "--samples", "3"],
            &["--lr", "{lr}"],
            "largest double",
        ),
        (
            json!({"lr": 0.1}),
            &["--scheduler", "median", "--min-time-slice=-1"],
            &[],
            "--min-time-slice",
        ),
        (
            json!({"lr": 0.1}),
            &["--scheduler", "hyperband", "--grace-period", "2"],
            &[],
            "HyperBand's brackets follow",
        ),
        (
            json!({"lr": 0.1}),
            &["--scheduler", "hyperband", "--max-t", "0.5"],
            &[],
            "--max-t must be at least 1",
        ),
        (
            json!({"lr": {"uniform": [0.1, 1]}}),
            &["--scheduler", "pbt"],
            &["--lr", "{lr}"],
            "needs --perturbation-interval",
        ),
        (
            json!({"lr": 0.1}),
            &["--scheduler", "pbt", "--perturbation-interval", "2"],
            &[],
            "nothing to mutate",
        ),
        (
            json!({"lr": {"uniform": [0.1, 1]}}),
            &[
                "--scheduler",
                "pbt",
                "--perturbation-interval",
                "2",
                "--quantile-fraction",
                "0.7",
            ],
            &["--lr", "{lr}"],
            "--quantile-fraction",
        ),
        (
            json!({"lr": {"uniform": [0.1, 1]}}),
            &[
                "--scheduler",
                "pbt",
                "--perturbation-interval",
                "2",
                "--search",
                "tpe",
                "--samples",
                "3",
            ],
            &["--lr", "{lr}"],
            "random search only",
        ),
        (
            json!({"lr": {"uniform": [0.1, 1]}}),
            &["--perturbation-interval", "2"],
            &["--lr", "{lr}"],
            "add --scheduler pbt",
        ),
        (
            json!({"lr": {"uniform": [0.1, 1]}}),
            &["--search", "bohb", "--samples", "4", "--scheduler", "asha"],
            &["--lr", "{lr}"],
            "HyperBandForBOHB",
        ),
        (
            json!({"lr": {"uniform": [0.1, 1]}}),
            &["--search", "bohb"],
            &["--lr", "{lr}"],
            "--search bohb needs --samples",
        ),
        (
            json!({"lr": {"grid": [0.1, 1]}}),
            &["--search", "bohb", "--samples", "4"],
            &["--lr", "{lr}"],
            "BOHB takes no grid",
        ),
    ] {
        let r = o(space, extra, cmd);
        assert_eq!(
            r.status.code(),
            Some(2),
            "{want}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert!(
            String::from_utf8_lossy(&r.stderr).contains(want),
            "{want}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
    }
    assert!(!out.join("journal.jsonl").exists(), "nothing ran");
    // No command at all: clap's usage error.
    let r = Command::new(BIN)
        .args([
            "--space",
            "x.json",
            "--metric",
            "m",
            "--mode",
            "max",
            "--out-dir",
            "o",
        ])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2));
}

#[test]
fn one_live_sweep_per_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let space = json!({"lr": {"grid": [0.03, 0.01]}});
    let args = [
        "--metric",
        "val_top1",
        "--mode",
        "max",
        "--time-attr",
        "epoch",
        "--out-dir",
        out.to_str().unwrap(),
    ];
    let mut first = sweep(
        dir.path(),
        &space,
        &args,
        &["--lr", "{lr}", "--epochs", "300", "--sleep-ms", "100"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Wait for a result: the first sweep is under way.
    let stdout = first.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    while !lines
        .next()
        .unwrap()
        .unwrap()
        .contains("\"type\":\"result\"")
    {}
    // `--resume` beside the running original ran trials 0 and 1 again into one journal (exit 0).
    let o = Command::new(BIN)
        .args(["--resume", "--out-dir"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("in use by another run (pid {})", first.id())),
        "{err}"
    );
    assert!(o.stdout.is_empty());
    first.kill().unwrap();
    first.wait().unwrap();
}

/// A sweep of one trial running `sh -c SCRIPT` (its `$1` is the trial's x), reporting `m` by
/// `epoch`; `{` and `}` in SCRIPT are written `\173` and `\175` for printf (braces are
/// placeholders in a command).
#[test]
fn non_finite_metrics_are_spelled_alike_in_every_file_and_plotted_where_finite() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"case $1 in
1) printf '\173"epoch": 1, "m": NaN, "extra": \173"loss": Infinity\175\175\n\173"epoch": 2, "m": Infinity\175\n' ;;
2) printf '\173"epoch": 1, "m": 1e308\175\n\173"epoch": 2, "m": -Infinity\175\n' ;;
*) printf '\173"epoch": 1, "m": -1e308\175\n\173"epoch": 2, "m": -1e308\175\n' ;;
esac"#;
    let space = json!({"x": {"grid": [1, 2, 3]}});
    let r = ok(
        &shell_sweep_of(dir.path(), script, &space, &["--scheduler", "fifo"])
            .output()
            .unwrap(),
    );
    assert_eq!(r.results.len(), 6);
    let out = dir.path().join("run");
    // result.json: JSON lines (no bare tokens), the values as the records spell them.
    let lines: Vec<Value> = std::fs::read_to_string(out.join("trial-0000/result.json"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(
        (&lines[0]["m"], &lines[0]["extra"]["loss"], &lines[1]["m"]),
        (&json!("NaN"), &json!("Infinity"), &json!("Infinity"))
    );
    // progress.csv: the same spelling in the cells.
    let progress = std::fs::read_to_string(out.join("trial-0000/progress.csv")).unwrap();
    let rows: Vec<Vec<&str>> = progress.lines().map(|l| l.split(',').collect()).collect();
    let col = |name: &str| rows[0].iter().position(|c| *c == name).unwrap();
    assert_eq!(
        (
            rows[1][col("m")],
            rows[1][col("extra/loss")],
            rows[2][col("m")]
        ),
        ("NaN", "Infinity", "Infinity"),
        "{progress}"
    );
    // results.csv: the last metric of each trial.
    let results = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let rows: Vec<Vec<&str>> = results.lines().map(|l| l.split(',').collect()).collect();
    let last = rows[0].iter().position(|c| *c == "last_m").unwrap();
    assert_eq!(
        (rows[1][last], rows[2][last]),
        ("Infinity", "-Infinity"),
        "{results}"
    );
    // metric.svg: finite coordinates only, and a line through the finite points.
    let svg = std::fs::read_to_string(out.join("metric.svg")).unwrap();
    assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
    let points = |trial: usize| {
        let title = format!("<title>trial {trial} (");
        let line = svg.lines().find(|l| l.contains(&title)).unwrap();
        let start = line.find("points=\"").unwrap() + 8;
        line[start..]
            .split('"')
            .next()
            .unwrap()
            .split(' ')
            .filter(|p| !p.is_empty())
            .count()
    };
    assert_eq!((points(0), points(1), points(2)), (0, 1, 2), "{svg}");
    // TensorBoard: a scalar per result, the non-finite ones included.
    let check = r#"
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1]); ea.Reload()
print([str(e.value) for e in ea.Scalars("m")], [str(e.value) for e in ea.Scalars("extra/loss")])
"#;
    let py = Command::new(common::python())
        .args(["-c", check])
        .arg(out.join("trial-0000"))
        .output()
        .unwrap();
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&py.stdout).trim(),
        "['nan', 'inf'] ['inf']"
    );
}

#[test]
fn a_trial_in_error_is_never_the_best() {
    let dir = tempfile::tempdir().unwrap();
    // Trial 0 reports the better metric, then fails; trial 1 completes.
    let script = r#"if [ "$1" = 1 ]; then printf '\173"epoch": 1, "m": 100\175\n'; exit 1; fi
printf '\173"epoch": 1, "m": 1\175\n'"#;
    let space = json!({"x": {"grid": [1, 2]}});
    let o = shell_sweep_of(dir.path(), script, &space, &["--scheduler", "fifo"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = records(&o.stdout);
    assert_eq!(
        r.ends
            .iter()
            .find(|e| e.trial == 0)
            .unwrap()
            .status
            .as_deref(),
        Some("error")
    );
    assert_eq!(r.summary.unwrap().best.unwrap().trial, 1);
    let out = dir.path().join("run");
    let best: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("best.json")).unwrap()).unwrap();
    assert_eq!(best["trial"], 1);
    let svg = std::fs::read_to_string(out.join("metric.svg")).unwrap();
    assert!(svg.contains("(1 completed, best)"), "{svg}");
}

#[test]
fn a_fifo_in_place_of_a_trials_stderr_log_fails_the_trial_not_the_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let trial_dir = dir.path().join("run/trial-0000");
    std::fs::create_dir_all(&trial_dir).unwrap();
    let made = Command::new("mkfifo")
        .arg(trial_dir.join("stderr.log"))
        .status()
        .unwrap();
    assert!(made.success());
    let mut child = shell_sweep(dir.path(), r#"printf '\173"epoch": 1, "m": 1\175\n'"#)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Opening the FIFO to write waited for a reader for ever.
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the sweep waits on the FIFO");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = records(&o.stdout);
    let why = r.ends[0].message.clone().unwrap_or_default();
    assert!(
        why.contains("stderr.log") && why.contains("not a regular file"),
        "{why}"
    );
}

#[test]
fn a_trial_directory_whose_name_is_not_utf8_reaches_the_trial_as_it_is() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(std::ffi::OsStr::from_bytes(b"run-\xff"));
    // The trial reports a result only when SWEEP_TRIAL_DIR is its directory, byte for byte.
    let script = r#"[ "$SWEEP_TRIAL_DIR" = "$1" ] && printf '\173"epoch": 1, "m": 1\175\n'; true"#;
    let space = dir.path().join("space.json");
    std::fs::write(&space, json!({"x": {"grid": [1]}}).to_string()).unwrap();
    let o = Command::new(BIN)
        .arg("--space")
        .arg(&space)
        .args([
            "--metric",
            "m",
            "--mode",
            "max",
            "--time-attr",
            "epoch",
            "-q",
        ])
        .arg("--out-dir")
        .arg(&out)
        .args(["--", "sh", "-c", script, "sh", "{trial_dir}"])
        .output()
        .unwrap();
    let r = ok(&o);
    assert_eq!(
        r.results.len(),
        1,
        "SWEEP_TRIAL_DIR was not the trial's directory"
    );
}

fn shell_sweep(dir: &Path, script: &str) -> Command {
    shell_sweep_of(dir, script, &json!({"x": {"grid": [1]}}), &[])
}

/// A sweep into DIR/run over `space` of `sh -c SCRIPT sh {x}`, maximising the result `m` by
/// `epoch`, with `extra` flags.
fn shell_sweep_of(dir: &Path, script: &str, space: &Value, extra: &[&str]) -> Command {
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
    sweep_running(
        dir,
        space,
        &args,
        "sh".as_ref(),
        &["-c", script, "sh", "{x}"],
    )
}

#[test]
fn a_trial_ends_when_its_process_exits_whatever_it_left_behind() {
    let dir = tempfile::tempdir().unwrap();
    // The trial reports epoch 1 and exits 0, leaving a process that holds its stdout and would
    // report epoch 2 after 600 s, and one that only sleeps.
    let script = r#"printf '\173"m": 1, "epoch": 1\175\n'; (sleep 600; printf '\173"m": 9, "epoch": 2\175\n') & (exec sleep 1717 >/dev/null) & exit 0"#;
    let start = Instant::now();
    let r = ok(&shell_sweep(dir.path(), script).output().unwrap());
    // It held the slot until the orphan ended before, and the orphan's line was taken as a result.
    assert!(
        start.elapsed() < Duration::from_secs(120),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(r.results.len(), 1, "{:?}", r.results);
    assert_eq!(r.results[0].time, 1.0);
    // The trial's process group is gone, the sleeper included.
    let left = Command::new("pgrep")
        .args(["-f", "sleep 1717"])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "left running: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}

#[test]
fn results_that_cannot_be_used_are_warnings_naming_the_trial_and_line() {
    let dir = tempfile::tempdir().unwrap();
    // A line of 2 MiB without a newline is skipped (it was buffered whole); the others each
    // lose a result that vanished without a word before, except the NaN Python writes for a
    // diverged metric, which is a result (Ray Tune takes it too).
    let script = concat!(
        r#"head -c 2097152 /dev/zero | tr '\0' x; echo; "#,
        r#"printf '\173"m": null, "epoch": 1\175\n\173"m": "12", "epoch": 1\175\n'; "#,
        r#"printf '\173"m": NaN, "epoch": 1\175\n\173"m": 1e400, "epoch": 1\175\n'; "#,
        r#"printf '\173"m": 5, "epoch": "two"\175\n'; "#,
        r#"printf '\173"m": 1, "epoch": 2\175\n\173"m": 2, "epoch": 1\175\n\173"m": 3, "epoch": 3\175\n'"#
    );
    let o = shell_sweep(dir.path(), script).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let r = ok(&o);
    let times: Vec<f64> = r.results.iter().map(|x| x.time).collect();
    assert_eq!(times, [1.0, 2.0, 3.0], "{err}");
    assert!(r.results[0].metric.is_nan());
    // The record carries it as every record spells it.
    assert_eq!(r.results[0].record["m"], "NaN");
    for want in [
        "a line of 2097153 bytes (over 1 MiB) was skipped",
        r#"has "m": null, not a number"#,
        r#"has "m": "12", not a number"#,
        "is not valid JSON (a number out of range?)",
        r#"has "epoch": "two", not a number"#,
        "1 after 2: the time went backwards",
    ] {
        assert!(err.contains(want), "{want}: {err}");
    }
    assert_eq!(err.matches("warning: trial 0").count(), 6, "{err}");
    // The journal keeps the NaN: a resumed sweep replays it.
    let journal = std::fs::read_to_string(dir.path().join("run/journal.jsonl")).unwrap();
    assert!(journal.contains(r#""metric":"NaN""#), "{journal}");
    let resumed = Command::new(BIN)
        .args(["--resume", "--out-dir"])
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    let r = ok(&resumed);
    assert_eq!(r.summary.as_ref().unwrap().completed, 1);
    assert_eq!(r.summary.unwrap().best.unwrap().metric, 3.0);
}

#[test]
fn resume_ends_what_a_killed_sweep_left_running_in_a_trial() {
    let dir = tempfile::tempdir().unwrap();
    // The first run starts a child, reports epoch 1 and waits (the trial's shell gets SIGTERM
    // when the sweep dies; its child gets nothing, and runs on). The second run of the trial
    // reports epoch 2 and ends.
    let script = r#"if [ -e "$SWEEP_TRIAL_DIR/again" ]; then printf '\173"m": 2, "epoch": 2\175\n'; exit 0; fi; touch "$SWEEP_TRIAL_DIR/again"; (trap '' TERM; exec sleep 1313) & printf '\173"m": 1, "epoch": 1\175\n'; wait"#;
    kill_after_results(shell_sweep(dir.path(), script), 1);
    let run = dir.path().join("run");
    let orphan = || {
        let o = Command::new("pgrep")
            .args(["-f", "sleep 1313"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    // Before: --resume started the trial again beside the orphan, in the same directory.
    assert!(!orphan().is_empty(), "the orphan runs after the kill");
    let o = Command::new(BIN)
        .args(["--resume", "--report-secs", "0", "--out-dir"])
        .arg(&run)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let r = ok(&o);
    assert!(err.contains("were still running in"), "{err}");
    assert_eq!(r.results.last().unwrap().time, 2.0);
    assert!(orphan().is_empty(), "left running: {}", orphan());
}

/// Each trial of a two-slot sweep notes its slot, OMP_NUM_THREADS and allowed CPUs: (slot,
/// OMP_NUM_THREADS, CPUs) per trial.
fn slot_cpus_seen(extra: &[&str]) -> Vec<(usize, String, String)> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let script = r#"printf '%s %s %s\n' "$SWEEP_SLOT" "${{OMP_NUM_THREADS:-unset}}" "$(sed -n 's/^Cpus_allowed_list:\t//p' /proc/self/status)" > "$SWEEP_TRIAL_DIR/cpus"; printf '\173"m": 1, "epoch": 1\175\n'"#;
    let args = [&["--slots", "2", "--gpus-per-trial", "0"], extra].concat();
    let space = json!({"x": {"grid": [1, 2, 3, 4]}});
    let r = ok(&shell_sweep_of(dir.path(), script, &space, &args)
        .env_remove("OMP_NUM_THREADS")
        .output()
        .unwrap());
    assert_eq!(r.ends.len(), 4);
    let trials: Vec<PathBuf> = (0..4)
        .map(|i| out.join(format!("trial-{i:04}/cpus")))
        .collect();
    let mut seen: Vec<(usize, String, String)> = trials
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            let f: Vec<&str> = text.split_whitespace().collect();
            (f[0].parse().unwrap(), f[1].to_string(), f[2].to_string())
        })
        .collect();
    seen.sort();
    assert_eq!(seen.len(), 4);
    seen
}

/// The CPUs this test may run on, as /proc lists them one by one.
fn my_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string();
    list.split(',')
        .flat_map(|part| match part.split_once('-') {
            Some((a, b)) => (a.parse().unwrap()..=b.parse().unwrap()).collect::<Vec<usize>>(),
            None => vec![part.parse().unwrap()],
        })
        .collect()
}

#[test]
fn each_slot_runs_on_cpus_of_its_own_with_that_many_omp_threads() {
    let cpus = my_cpus();
    // --cpus-per-trial 1: slot s on CPU s (in turn, where there are fewer CPUs than slots).
    for (slot, omp, list) in slot_cpus_seen(&["--cpus-per-trial", "1"]) {
        assert_eq!(omp, "1");
        assert_eq!(list, cpus[slot % cpus.len()].to_string(), "slot {slot}");
    }
    // By default two slots share the CPUs out between them.
    let half = (cpus.len() / 2).max(1);
    for (slot, omp, list) in slot_cpus_seen(&[]) {
        assert_eq!(omp, half.to_string());
        let first = cpus[(slot * half) % cpus.len()];
        assert!(
            list.starts_with(&first.to_string()),
            "slot {slot}: {list} (CPUs {cpus:?})"
        );
    }
    // 0 leaves them as they are.
    for (_, omp, list) in slot_cpus_seen(&["--cpus-per-trial", "0"]) {
        assert_eq!(omp, "unset");
        let mine = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(
            mine.contains(&format!("Cpus_allowed_list:\t{list}\n")),
            "{list}"
        );
    }
}

const TPE: &[&str] = &[
    "--search",
    "tpe",
    "--samples",
    "14",
    "--seed",
    "5",
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
];

/// The last status table's header names these parameters (TPE and BOHB choose configs as
/// trials start, after the table's first look at them).
fn assert_table_shows(stderr: &[u8], params: &[&str]) {
    let err = String::from_utf8_lossy(stderr);
    let header = err
        .lines()
        .rfind(|l| l.starts_with("trial  status"))
        .unwrap_or_else(|| panic!("no status table: {err}"));
    let cols: Vec<&str> = header.split_whitespace().collect();
    for p in params {
        assert!(cols.contains(p), "{p} not in {header:?}");
    }
}

fn tpe_space() -> Value {
    json!({"lr": {"loguniform": [1e-4, 1]}, "batch_size": {"randint": [16, 512]}})
}

/// The configs of the trials in trial order (from their start records).
fn started_configs(r: &Records) -> Vec<serde_json::Map<String, Value>> {
    let mut s: Vec<&TrialRecord> = r.starts.iter().collect();
    s.sort_by_key(|t| t.trial);
    s.iter().map(|t| t.config.clone()).collect()
}

#[test]
fn tpe_suggests_what_optuna_suggests_given_the_same_results() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let args = [TPE, &["--out-dir", out.to_str().unwrap()]].concat();
    let cmd = [
        "--lr",
        "{lr}",
        "--batch-size",
        "{batch_size}",
        "--epochs",
        "4",
    ];
    let o = sweep(dir.path(), &tpe_space(), &args, &cmd)
        .output()
        .unwrap();
    let r = ok(&o);
    let configs = started_configs(&r);
    assert_eq!(configs.len(), 14);
    assert_table_shows(&o.stderr, &["lr", "batch_size"]);
    // Each trial's value is its last result, whether ASHA stopped it or it completed.
    let mut ends: Vec<&TrialRecord> = r.ends.iter().collect();
    ends.sort_by_key(|t| t.trial);
    let values: Vec<f64> = ends
        .iter()
        .map(|e| e.last.as_ref().unwrap()["val_top1"].as_f64().unwrap())
        .collect();
    let (stopped, _) = outcome(&r.ends);
    assert!(!stopped.is_empty(), "ASHA stopped some trials");
    let case = json!({"seed": 5, "mode": "max", "values": values, "space": {
        "lr": {"float": [1e-4, 1.0], "log": true}, "batch_size": {"int": [16, 511]}}});
    let want: Vec<serde_json::Map<String, Value>> =
        common::reference("optuna_replay.py", &[], &case);
    for (i, (got, want)) in configs.iter().zip(&want).enumerate() {
        assert_eq!(got["batch_size"], want["batch_size"], "trial {i}");
        let (g, w) = (got["lr"].as_f64().unwrap(), want["lr"].as_f64().unwrap());
        assert!(
            (g - w).abs() <= 1e-9 * w,
            "trial {i}: lr {g} vs Optuna's {w}"
        );
    }
    // best.json is the trial with the best last value; results.csv has a row per trial.
    let best_file: Value =
        serde_json::from_slice(&std::fs::read(out.join("best.json")).unwrap()).unwrap();
    let best = (0..values.len())
        .max_by(|&a, &b| values[a].total_cmp(&values[b]))
        .unwrap();
    assert_eq!(best_file["trial"], json!(best));
    assert_eq!(best_file["config"], Value::Object(configs[best].clone()));
    let table = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(table.lines().count(), 15, "{table}");
    // TPE's suggestions after the 10 random ones gather near the curve's best lr (0.03).
    let near = configs[10..]
        .iter()
        .filter(|c| (c["lr"].as_f64().unwrap().log10() + 1.5).abs() < 1.0)
        .count();
    assert!(near >= 2, "{configs:?}");
}

#[test]
fn tpe_kill_9_then_resume_suggests_what_an_uninterrupted_sweep_does() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = [
        "--lr",
        "{lr}",
        "--batch-size",
        "{batch_size}",
        "--epochs",
        "4",
        "--sleep-ms",
        "15",
        "--state",
        "{trial_dir}/state",
    ];
    let run = |out: &Path| {
        let args = [TPE, &["--out-dir", out.to_str().unwrap()]].concat();
        sweep(dir.path(), &tpe_space(), &args, &cmd)
    };
    let whole = dir.path().join("whole");
    let r = ok(&run(&whole).output().unwrap());
    let want = started_configs(&r);

    let cut = dir.path().join("cut");
    // Killed in the middle of the sweep (past the random start-up), then again.
    kill_after_results(run(&cut), 30);
    let mut resume = Command::new(BIN);
    resume
        .args(["--resume", "--report-secs", "0", "--out-dir"])
        .arg(&cut);
    kill_after_results(resume, 4);
    let mut resume = Command::new(BIN);
    resume.args(["--resume", "--out-dir"]).arg(&cut);
    ok(&resume.output().unwrap());
    let suggested: Vec<serde_json::Map<String, Value>> =
        std::fs::read_to_string(cut.join("journal.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e["event"] == "suggest")
            .map(|e| e["config"].as_object().unwrap().clone())
            .collect();
    assert_eq!(
        suggested, want,
        "each trial suggested once, as without the kills"
    );
    assert_eq!(journal_ends(&cut), journal_ends(&whole));
    assert_eq!(journal_results(&cut), journal_results(&whole));
}

#[test]
fn median_rule_decides_as_rays_and_paused_trials_resume_from_their_state() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = median_sweep(dir.path(), &out, &[], &[]).output().unwrap();
    let r = ok(&o);
    assert!(
        !r.pauses.is_empty(),
        "the first trials yield to pending ones"
    );
    // The status table counts them.
    assert!(String::from_utf8_lossy(&o.stderr).contains(" paused, "));
    // A paused trial runs again once no trial is pending, unless results its process printed
    // before the SIGTERM landed ended it (they count: its checkpoint holds them).
    assert!(!r.resumes.is_empty() && r.resumes.len() <= r.pauses.len());
    assert_eq!(r.summary.as_ref().unwrap().unfinished, 0);
    let (stopped, completed) = outcome(&r.ends);
    assert!(
        !stopped.is_empty() && !completed.is_empty(),
        "{stopped:?} {completed:?}"
    );
    assert_median_journal_is_rays(&out);
}

/// A median sweep's journal: each trial's results go on from where it was paused (epochs 1, 2,
/// ... once each), and Ray's MedianStoppingRule fed the journal's results (and a completion
/// with each trial's last result when it ended) takes the journal's decisions.
fn assert_median_journal_is_rays(out: &Path) {
    let journal: Vec<Value> = std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for trial in 0..5u64 {
        let times: Vec<f64> = journal
            .iter()
            .filter(|e| e["event"] == "result" && e["trial"] == trial)
            .map(|e| e["time"].as_f64().unwrap())
            .collect();
        let want: Vec<f64> = (1..=times.len()).map(|e| e as f64).collect();
        assert_eq!(times, want, "trial {trial}");
    }
    // Ray's MedianStoppingRule fed the journal's results (and a completion with each trial's
    // last result when it ended) takes the journal's decisions.
    let mut events = Vec::new();
    let mut want = Vec::new();
    let mut last: BTreeMap<u64, (f64, Value)> = BTreeMap::new();
    for e in &journal {
        match e["event"].as_str().unwrap() {
            "result" => {
                let (t, m) = (e["time"].as_f64().unwrap(), e["metric"].clone());
                let trial = e["trial"].as_u64().unwrap();
                // A result at max_t completes the trial before the scheduler sees it.
                if t < 6.0 {
                    events.push(json!([
                        "result",
                        trial,
                        t,
                        m,
                        e["waiting"].as_bool().unwrap_or(false)
                    ]));
                    want.push(if e["stop"] == true {
                        "STOP"
                    } else if e["pause"] == true {
                        "PAUSE"
                    } else {
                        "CONTINUE"
                    });
                }
                last.insert(trial, (t, m));
            }
            "end" => {
                let trial = e["trial"].as_u64().unwrap();
                let (t, m) = last[&trial].clone();
                events.push(json!(["complete", trial, t, m, false]));
            }
            _ => {}
        }
    }
    let case = json!([{"settings": {"grace_period": 2.0, "min_samples": 2, "min_time_slice": 0.0,
        "mode": "max"}, "events": events}]);
    let ray: Vec<Vec<String>> = common::reference("ray_median.py", &[], &case);
    assert_eq!(ray[0], want);
}

#[test]
fn median_kill_9_then_resume_keeps_pauses_and_decides_as_rays() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // Killed after some trials have paused, then resumed to the end.
    kill_after_results(median_sweep(dir.path(), &out, &[], &[]), 8);
    let paused_before = std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap()
        .matches("\"pause\":true")
        .count();
    assert!(paused_before > 0, "a pause before the kill");
    let mut resume = Command::new(BIN);
    resume.args(["--resume", "--out-dir"]).arg(&out);
    let r = ok(&resume.output().unwrap());
    assert_eq!(r.summary.as_ref().unwrap().unfinished, 0);
    assert!(
        !r.resumes.is_empty(),
        "trials paused before the kill run again"
    );
    assert_median_journal_is_rays(&out);
}

/// A median-rule sweep of five resumable curves (one slot, grace 2, 2 samples, max_t 6).
/// A median-rule sweep of five resumable curves (grace 2, 2 samples, max_t 6), one slot unless
/// `extra` says otherwise (`extra_cmd` goes after the curve's arguments, a later value winning);
/// each trial's processes take a lock in its directory (one that finds
/// it held exits 4: an error).
fn median_sweep(dir: &Path, out: &Path, extra: &[&str], extra_cmd: &[&str]) -> Command {
    let space = json!({"lr": {"grid": [0.0003, 0.03, 0.3, 0.003, 0.01]}, "batch_size": 64});
    let args = [
        "--scheduler",
        "median",
        "--min-samples",
        "2",
        "--grace-period",
        "2",
        "--max-t",
        "6",
        "--metric",
        "val_top1",
        "--mode",
        "max",
        "--time-attr",
        "epoch",
        "--out-dir",
        out.to_str().unwrap(),
    ];
    let cmd = [
        "--lr",
        "{lr}",
        "--batch-size",
        "{batch_size}",
        "--epochs",
        "6",
        "--sleep-ms",
        "20",
        "--state",
        "{trial_dir}/state",
        "--slot-lock",
        "{trial_dir}/lock",
    ];
    sweep(
        dir,
        &space,
        &[&args[..], extra].concat(),
        &[&cmd[..], extra_cmd].concat(),
    )
}

#[test]
fn median_with_two_slots_never_runs_a_paused_trial_twice_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // Paused processes that ignore SIGTERM live on until SIGKILL half a second later, while
    // the other slot may free: a paused trial must not start again before its process is gone
    // (the lock would catch it). A guard: the race did not show in runs without the check.
    let r = ok(&median_sweep(
        dir.path(),
        &out,
        &[
            "--slots",
            "2",
            "--gpus-per-trial",
            "0",
            "--stop-grace-secs",
            "0.5",
        ],
        &["--ignore-term", "--sleep-ms", "150"],
    )
    .output()
    .unwrap());
    assert!(!r.pauses.is_empty());
    assert_eq!(r.summary.as_ref().unwrap().error, 0, "no overlap");
    assert_eq!(r.summary.as_ref().unwrap().unfinished, 0);
    assert_median_journal_is_rays(&out);
    // results.csv: every trial ended, a resumed one with more than one attempt.
    let table = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let rows: Vec<Vec<&str>> = table
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 5);
    assert!(
        rows.iter()
            .all(|r| r[1] == "completed" || r[1] == "stopped"),
        "{table}"
    );
    if !r.resumes.is_empty() {
        let header: Vec<&str> = table.lines().next().unwrap().split(',').collect();
        let a = header.iter().position(|h| *h == "attempts").unwrap();
        assert!(rows.iter().any(|r| r[a] != "1"), "{table}");
    }
}

/// A HyperBand sweep of nine resumable curves (max_t 9, η 3: brackets of 3 trials to 9, 5 to 3
/// then the best 2 to 9, and 1 from 1), one slot unless `extra` says otherwise.
fn hyperband_sweep(dir: &Path, out: &Path, extra: &[&str], extra_cmd: &[&str]) -> Command {
    let lrs = [0.0003, 0.03, 0.3, 0.003, 0.01, 0.1, 0.001, 0.05, 0.02];
    let space = json!({"lr": {"grid": lrs}, "batch_size": 64});
    let args = [
        "--scheduler",
        "hyperband",
        "--max-t",
        "9",
        "--reduction-factor",
        "3",
        "--metric",
        "val_top1",
        "--mode",
        "max",
        "--time-attr",
        "epoch",
        "--out-dir",
        out.to_str().unwrap(),
    ];
    let cmd = [
        "--lr",
        "{lr}",
        "--batch-size",
        "{batch_size}",
        "--epochs",
        "9",
        "--sleep-ms",
        "40",
        "--state",
        "{trial_dir}/state",
        "--slot-lock",
        "{trial_dir}/lock",
    ];
    sweep(
        dir,
        &space,
        &[&args[..], extra].concat(),
        &[&cmd[..], extra_cmd].concat(),
    )
}

/// A one-slot HyperBand sweep's journal replayed through Ray's HyperBandScheduler and a
/// stand-in controller: each start is the trial Ray chooses, each result gets the journal's
/// action, and the trials each event stops are the ends that follow it in the journal (up to
/// where the sweep had to unstick a bracket: there Ray chooses no trial).
fn assert_hyperband_journal_is_rays(out: &Path) {
    let journal: Vec<Value> = std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let def = &journal[0]["definition"];
    let bohb = def["search"] == "bohb";
    let trials = if bohb {
        def["samples"].as_u64().unwrap() as usize
    } else {
        def["trials"].as_array().unwrap().len()
    };
    // BOHB: the stops HyperBandForBOHB's choice made (processing brackets when nothing ran),
    // which sweep journals as an unstick before the start.
    let mut choice_stops: Vec<u64> = Vec::new();
    // The ends that directly follow entry k.
    let ends_after = |k: usize| -> Vec<u64> {
        journal[k + 1..]
            .iter()
            .take_while(|e| e["event"] == "end")
            .map(|e| e["trial"].as_u64().unwrap())
            .collect()
    };
    let (mut events, mut want) = (Vec::new(), Vec::new());
    let mut explained = std::collections::HashSet::new();
    // The trial running (one slot): still running at a start, it was interrupted by a kill
    // and the resumed sweep took it as pending.
    let mut running = None;
    for (k, e) in journal.iter().enumerate() {
        let trial = e["trial"].as_u64();
        match e["event"].as_str().unwrap() {
            "start" => {
                if let Some(r) = running.replace(trial) {
                    events.push(json!(["pending", r]));
                    want.push(json!([null, [], null]));
                }
                events.push(json!(["choose"]));
                want.push(json!([trial, std::mem::take(&mut choice_stops), null]));
                events.push(json!(["start", trial]));
                want.push(json!([null, [], null]));
            }
            "result" => {
                events.push(json!(["result", trial, e["time"], e["metric"]]));
                let action = if e["stop"] == true {
                    "STOP"
                } else if e["pause"] == true {
                    "PAUSE"
                } else {
                    "CONTINUE"
                };
                // A trial told to continue whose end follows finished on its own.
                let ends: Vec<u64> = ends_after(k)
                    .into_iter()
                    .filter(|&t| action == "STOP" || Some(t) != trial)
                    .collect();
                explained.extend(ends.iter().map(|&t| (t, k)));
                if action != "CONTINUE" {
                    running = None;
                }
                want.push(json!([action, ends, null]));
            }
            "end" if !explained.iter().any(|&(t, at)| Some(t) == trial && at < k) => {
                running = None;
                let kind = if e["status"] == "error" {
                    "error"
                } else {
                    "complete"
                };
                events.push(json!([kind, trial]));
                let ends = ends_after(k);
                explained.extend(ends.iter().map(|&t| (t, k)));
                want.push(json!([null, ends, null]));
            }
            "suggest" if bohb => {
                events.push(json!(["add", trial]));
                want.push(json!([null, [], null]));
            }
            "unstick" if bohb => {
                choice_stops = ends_after(k);
                explained.extend(choice_stops.iter().map(|&t| (t, k)));
            }
            "unstick" => {
                // Where the sweep found nothing to run but paused trials: Ray chooses none
                // either (and would wait for ever); the comparison ends here.
                events.push(json!(["choose"]));
                want.push(json!([null, [], null]));
                break;
            }
            _ => {}
        }
    }
    let asha = &def["asha"];
    let case = json!([{"settings": {"max_t": asha["max_t"], "reduction_factor": asha["reduction_factor"],
        "mode": asha["mode"], "bohb": bohb}, "trials": trials, "events": events}]);
    let ray: Vec<Vec<Value>> = common::reference("ray_hyperband.py", &[], &case);
    for (k, (got, want)) in ray[0].iter().zip(&want).enumerate() {
        // (The budget BOHB's results are given is checked by hyperband_ray.rs.)
        assert_eq!(
            (&got[0], &got[1]),
            (&want[0], &want[1]),
            "event {k}: {}",
            events[k]
        );
    }
    assert_eq!(ray[0].len(), want.len());
}

#[test]
fn hyperband_decides_as_rays_and_paused_trials_resume_from_their_state() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = hyperband_sweep(dir.path(), &out, &[], &[])
        .output()
        .unwrap();
    let r = ok(&o);
    assert!(!r.pauses.is_empty() && !r.resumes.is_empty());
    let s = r.summary.as_ref().unwrap();
    assert_eq!((s.trials, s.unfinished, s.error), (9, 0, 0));
    let (stopped, completed) = outcome(&r.ends);
    assert!(!stopped.is_empty() && !completed.is_empty());
    // The halving of the 5-trial bracket at epoch 3 keeps 2: its decisions say so.
    // (lr 0.01 and 0.1 tie: the one added later is kept, as Python's stable sort leaves it.)
    let at3: Vec<&Decision> = (r.decisions.iter())
        .filter(|d| d.milestone == 3.0 && (3..8).contains(&d.trial))
        .collect();
    assert_eq!(at3.len(), 5, "{:?}", r.decisions);
    assert_eq!(at3.iter().filter(|d| d.action == "continue").count(), 2);
    for d in &at3 {
        let cutoff = d.cutoff.unwrap();
        match d.action.as_str() {
            "continue" => assert!(d.value >= cutoff, "{d:?}"),
            _ => assert!(d.value <= cutoff, "{d:?}"),
        }
    }
    // Each trial's results go on from where it was paused: epochs 1, 2, ... once each.
    for t in 0..9 {
        let times: Vec<f64> = (r.results.iter())
            .filter(|x| x.trial == t)
            .map(|x| x.time)
            .collect();
        let want: Vec<f64> = (1..=times.len()).map(|e| e as f64).collect();
        assert_eq!(times, want, "trial {t}");
    }
    let table = String::from_utf8_lossy(&o.stderr);
    assert!(table.contains("HyperBand round 0 bracket 1: "), "{table}");
    assert_hyperband_journal_is_rays(&out);
    // best.json and results.csv hold for HyperBand as for the others.
    let best: Value =
        serde_json::from_slice(&std::fs::read(out.join("best.json")).unwrap()).unwrap();
    assert_eq!(best["trial"], s.best.as_ref().unwrap().trial);
    assert_eq!(best["status"], "completed");
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 10);
}

#[test]
fn hyperband_kill_9_then_resume_decides_as_rays() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    kill_after_results(hyperband_sweep(dir.path(), &out, &[], &[]), 20);
    let journal = std::fs::read_to_string(out.join("journal.jsonl")).unwrap();
    assert!(
        journal.contains("\"pause\":true"),
        "a pause before the kill"
    );
    let mut resume = Command::new(BIN);
    resume.args(["--resume", "--out-dir"]).arg(&out);
    let r = ok(&resume.output().unwrap());
    assert_eq!(r.summary.as_ref().unwrap().unfinished, 0);
    assert_hyperband_journal_is_rays(&out);
}

#[test]
fn hyperband_with_two_slots_runs_every_trial_to_its_end_and_never_twice_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let r = ok(&hyperband_sweep(
        dir.path(),
        &out,
        &[
            "--slots",
            "2",
            "--gpus-per-trial",
            "0",
            "--stop-grace-secs",
            "0.5",
        ],
        &["--ignore-term", "--sleep-ms", "60"],
    )
    .output()
    .unwrap());
    let s = r.summary.as_ref().unwrap();
    assert_eq!((s.unfinished, s.error), (0, 0), "no overlap");
    assert!(!r.pauses.is_empty() && !r.resumes.is_empty());
    // Exactly the top ⌈5/3⌉ of the 5-trial bracket went past epoch 3.
    let past3: std::collections::BTreeSet<usize> = (r.results.iter())
        .filter(|x| x.time > 3.0 && (3..8).contains(&x.trial))
        .map(|x| x.trial)
        .collect();
    assert_eq!(past3.len(), 2, "{past3:?}");
}

#[test]
fn hyperband_unsticks_a_bracket_ray_would_leave_waiting_and_resume_replays_it() {
    // Equal curves (ties: the later trials win) in brackets of 3 (to 4) and 3 (2, then the
    // best 2 to 4). In the second, trial 5 goes on to 4 and pauses for trial 4, which fails at
    // epoch 3: after a first halving a removal does not process the bracket again, and Ray
    // would wait for ever with trial 5 paused. The sweep processes it: trial 5 completes.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let space = json!({"lr": 0.03, "crash": {"grid": [99, 99, 99, 99, 3, 99]}});
    let args = [
        "--scheduler",
        "hyperband",
        "--max-t",
        "4",
        "--reduction-factor",
        "2",
        "--metric",
        "val_top1",
        "--mode",
        "max",
        "--time-attr",
        "epoch",
        "--out-dir",
        out.to_str().unwrap(),
    ];
    let cmd = [
        "--lr",
        "{lr}",
        "--epochs",
        "4",
        "--crash-at",
        "{crash}",
        "--state",
        "{trial_dir}/state",
        // Slow enough that a paused trial stops before its next epoch (else trial 4 could
        // crash while paused rather than after it runs again).
        "--sleep-ms",
        "100",
    ];
    let o = sweep(dir.path(), &space, &args, &cmd).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "a trial failed");
    let r = records(&o.stdout);
    let ends: BTreeMap<usize, String> = (r.ends.iter())
        .map(|e| (e.trial, e.status.clone().unwrap()))
        .collect();
    assert_eq!(ends[&4], "error");
    assert_eq!(ends[&5], "completed");
    assert_eq!(ends[&3], "stopped");
    assert_eq!(r.summary.as_ref().unwrap().unfinished, 0);
    let journal = std::fs::read_to_string(out.join("journal.jsonl")).unwrap();
    assert_eq!(journal.matches("\"event\":\"unstick\"").count(), 1);
    assert_hyperband_journal_is_rays(&out);
    // --resume replays the journal, the unsticking included, to the same ends.
    let mut resume = Command::new(BIN);
    resume.args(["--resume", "--out-dir"]).arg(&out);
    let o2 = resume.output().unwrap();
    assert_eq!(o2.status.code(), Some(3));
    let again = records(&o2.stdout);
    assert!(again.starts.is_empty() && again.resumes.is_empty());
    assert_eq!(journal_ends(&out).len(), 6, "no end written twice");
}

/// A population-based training sweep of six resumable curves (interval 3, max_t 12), one slot
/// unless `extra` says otherwise.
fn pbt_sweep(dir: &Path, out: &Path, extra: &[&str]) -> Command {
    let space =
        json!({"lr": {"loguniform": [1e-4, 1.0]}, "batch_size": {"choice": [32, 64, 128, 256]}});
    let args = [
        "--scheduler",
        "pbt",
        "--perturbation-interval",
        "3",
        "--samples",
        "6",
        "--seed",
        "5",
        "--max-t",
        "12",
        "--metric",
        "val_top1",
        "--mode",
        "max",
        "--time-attr",
        "epoch",
        "--out-dir",
        out.to_str().unwrap(),
    ];
    let cmd = [
        "--lr",
        "{lr}",
        "--batch-size",
        "{batch_size}",
        "--epochs",
        "12",
        "--sleep-ms",
        "10",
        "--state",
        "{trial_dir}/state",
    ];
    sweep(dir, &space, &[&args[..], extra].concat(), &cmd)
}

/// A one-slot population-based training sweep's journal replayed through Ray's own scheduler
/// (random and numpy seeded with the sweep's seed) and a stand-in controller: each start is
/// Ray's choice, each result gets the journal's action, each copy is from the same trial with
/// the same config. Returns the number of copies.
fn assert_pbt_journal_is_rays(out: &Path) -> usize {
    let journal: Vec<Value> = std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let def = &journal[0]["definition"];
    let max_t = def["asha"]["max_t"].as_f64().unwrap();
    let (mut events, mut want) = (Vec::new(), Vec::new());
    let mut running = None;
    let mut copies = 0;
    for e in &journal {
        let trial = e["trial"].as_u64();
        match e["event"].as_str().unwrap() {
            "start" => {
                if let Some(r) = running.replace(trial) {
                    events.push(json!(["pending", r]));
                    want.push(json!([null, null]));
                }
                events.push(json!(["choose"]));
                want.push(json!([trial, null]));
                events.push(json!(["start", trial]));
                want.push(json!([null, null]));
            }
            // At max_t the trial completes before the scheduler sees the result (Ray's stopper).
            "result" if e["time"].as_f64().unwrap() >= max_t => {}
            "result" => {
                events.push(json!(["result", trial, e["time"], e["metric"]]));
                let copy = &e["exploit"];
                let (answer, copy) = if copy.is_null() {
                    let pause = e["pause"] == true;
                    (if pause { "PAUSE" } else { "CONTINUE" }, Value::Null)
                } else {
                    copies += 1;
                    (
                        "NOOP",
                        json!({"from": copy["from"], "config": copy["config"]}),
                    )
                };
                if answer != "CONTINUE" {
                    running = None;
                }
                want.push(json!([answer, copy]));
            }
            "end" => {
                running = None;
                let kind = if e["status"] == "error" {
                    "error"
                } else {
                    "complete"
                };
                events.push(json!([kind, trial]));
                want.push(json!([null, null]));
            }
            _ => {}
        }
    }
    let p = &def["pbt"];
    let case = json!([{"settings": {"perturbation_interval": p["perturbation_interval"],
        "burn_in_period": p["burn_in_period"], "quantile_fraction": p["quantile_fraction"],
        "resample_probability": p["resample_probability"],
        "perturbation_factors": p["perturbation_factors"], "mode": p["mode"], "seed": def["seed"]},
        "space": def["space"], "configs": def["trials"], "events": events}]);
    let ray: Vec<Vec<Value>> = common::reference("ray_pbt.py", &[], &case);
    for (k, (got, want)) in ray[0].iter().zip(&want).enumerate() {
        // The copy's operations are not journalled: compare the trial and config.
        let mut got = got.clone();
        if let Some(c) = got[1].as_object_mut() {
            c.remove("ops");
        }
        assert_eq!(&got, want, "event {k}: {}", events[k]);
    }
    assert_eq!(ray[0].len(), want.len());
    copies
}

#[test]
fn pbt_copies_as_rays_and_writes_each_trials_lineage() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = pbt_sweep(dir.path(), &out, &[]).output().unwrap();
    let r = ok(&o);
    let s = r.summary.as_ref().unwrap();
    assert_eq!((s.trials, s.completed, s.unfinished), (6, 6, 0));
    let copies = assert_pbt_journal_is_rays(&out);
    assert!(assert_copies_go_on_from_the_copied_checkpoint(&out) > 0);
    let exploits: Vec<Value> = (r.exploits.iter())
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    assert!(copies > 0 && exploits.len() == copies, "{copies} copies");
    // Ray's policy files: a row per copy in pbt_global.txt; each trial's file is the copied
    // trial's lineage followed by its own copy.
    let global = std::fs::read_to_string(out.join("pbt_global.txt")).unwrap();
    let rows: Vec<Value> = global
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), copies);
    for (row, e) in rows.iter().zip(&exploits) {
        let t = e["trial"].as_u64().unwrap();
        let from = e["from"].as_u64().unwrap();
        assert_eq!(row[0], format!("trial-{t:04}"));
        assert_eq!(row[1], format!("trial-{from:04}"));
        assert_eq!((&row[4], &row[5]), (&e["from_config"], &e["config"]));
    }
    let last = exploits.last().unwrap();
    let policy = std::fs::read_to_string(out.join(format!(
        "pbt_policy_{:04}.txt",
        last["trial"].as_u64().unwrap()
    )))
    .unwrap();
    assert_eq!(
        policy.lines().last().unwrap(),
        global.lines().last().unwrap()
    );
    // The lineage in each result (TensorBoard plots it): copies so far and the trial copied.
    let t = last["trial"].as_u64().unwrap() as usize;
    let after: Vec<&TrialResult> = (r.results.iter())
        .filter(|x| x.trial == t && x.time > last["time"].as_f64().unwrap())
        .collect();
    let progress = std::fs::read_to_string(out.join(format!("trial-{t:04}/progress.csv"))).unwrap();
    let header: Vec<&str> = progress.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "pbt_copied_from").unwrap();
    let last_row: Vec<&str> = progress.lines().last().unwrap().split(',').collect();
    assert_eq!(last_row[col], last["from"].to_string());
    // The copying trial went on from the copied trial's checkpoint, with the new config.
    let params: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join(format!("trial-{t:04}/params.json"))).unwrap(),
    )
    .unwrap();
    if !after.is_empty() {
        assert_eq!(params, last["config"]);
        // TensorBoard shows it: each copy starts a run of its own (trial-NNNN/pbt-copy-K)
        // whose hparams session holds the config explored, and the trial copied as a scalar.
        let check = r#"
import os, sys
from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
m = pem.EventMultiplexer(); m.AddRunsFromDirectory(sys.argv[1]); m.Reload()
run = sys.argv[2]
start = plugin_data_pb2.HParamsPluginData.FromString(
    m.PluginRunToTagToContent("hparams")[run]["_hparams_/session_start_info"]).session_start_info
ea = EventAccumulator(os.path.join(sys.argv[1], run)); ea.Reload()
print(int(ea.Scalars("pbt_copied_from")[-1].value), repr(start.hparams["lr"].number_value))
"#;
        let copies = exploits
            .iter()
            .filter(|e| e["trial"] == last["trial"])
            .count();
        let py = Command::new(common::python())
            .args(["-c", check])
            .arg(&out)
            .arg(format!("trial-{t:04}/pbt-copy-{copies}"))
            .output()
            .unwrap();
        assert!(
            py.status.success(),
            "{}",
            String::from_utf8_lossy(&py.stderr)
        );
        let lr = last["config"]["lr"].as_f64().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&py.stdout).trim(),
            format!("{} {}", last["from"], py_repr(lr))
        );
    }
    // best.json and results.csv hold for PBT as for the others.
    let best: Value =
        serde_json::from_slice(&std::fs::read(out.join("best.json")).unwrap()).unwrap();
    assert_eq!(best["trial"], s.best.as_ref().unwrap().trial);
    let table = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(table.lines().count(), 7);
}

/// Python's repr of a float (shortest round trip, as Rust's Display, with ".0" on integers).
fn py_repr(x: f64) -> String {
    let s = x.to_string();
    if s.contains(['.', 'e', 'E']) {
        s
    } else {
        format!("{s}.0")
    }
}

/// In a one-slot sweep of curves, a trial that copied another goes on from the copied trial's
/// state as saved when it was last in the top quantile (at epoch T) before the copy: its first result after the
/// copy is T (the curve's state lags its records by one epoch), or T − 1 when the save came
/// before the curve wrote its state for T. Returns the copies checked.
fn assert_copies_go_on_from_the_copied_checkpoint(out: &Path) -> usize {
    let journal: Vec<Value> = std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut saved_at: BTreeMap<u64, f64> = BTreeMap::new();
    let mut copying: BTreeMap<u64, f64> = BTreeMap::new(); // trial → the save it copies
    let mut restarted: BTreeMap<u64, f64> = BTreeMap::new(); // trial → the epoch it should repeat
    let mut checked = 0;
    for e in &journal {
        let trial = e["trial"].as_u64().unwrap_or(u64::MAX);
        match e["event"].as_str().unwrap() {
            "start" => {
                if let Some(save) = copying.remove(&trial) {
                    restarted.insert(trial, save);
                }
            }
            "result" => {
                let time = e["time"].as_f64().unwrap();
                if let Some(want) = restarted.remove(&trial) {
                    assert!(
                        time == want || time == want - 1.0,
                        "trial {trial}'s first result after its copy: {time}, saved at {want}"
                    );
                    checked += 1;
                }
                if e["save"] == true {
                    saved_at.insert(trial, time);
                }
                // The copy is of the copied trial's save when the copy is decided (it may be
                // saved again before the copying trial runs).
                if let Some(from) = e["exploit"]["from"].as_u64() {
                    copying.insert(trial, saved_at[&from]);
                }
            }
            _ => {}
        }
    }
    checked
}

#[test]
fn pbt_kill_9_then_resume_copies_as_rays() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    kill_after_results(pbt_sweep(dir.path(), &out, &[]), 25);
    let mut resume = Command::new(BIN);
    resume.args(["--resume", "--out-dir"]).arg(&out);
    let r = ok(&resume.output().unwrap());
    assert_eq!(r.summary.as_ref().unwrap().unfinished, 0);
    assert!(assert_pbt_journal_is_rays(&out) > 0);
}

#[test]
fn pbt_with_two_slots_runs_every_trial_to_max_t() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let r = ok(
        &pbt_sweep(dir.path(), &out, &["--slots", "2", "--gpus-per-trial", "0"])
            .output()
            .unwrap(),
    );
    let s = r.summary.as_ref().unwrap();
    assert_eq!((s.completed, s.unfinished, s.error), (6, 0, 0));
    assert!(!r.pauses.is_empty());
}

/// Trials whose command keeps no state (each restart starts over) and reports no time: after a
/// pause the count of results starts again with the command (it ran for ever: every restart
/// counted on from the pause, was paused again before its command could finish, and copied an
/// empty directory), and no trial copies another (Ray skips the exploit of a trial whose save
/// gave no checkpoint).
#[test]
fn pbt_over_trials_without_state_ends_and_copies_none() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let space = json!({"lr": {"loguniform": [1e-4, 1.0]}});
    let args = [
        "--scheduler",
        "pbt",
        "--perturbation-interval",
        "2",
        "--samples",
        "4",
        "--slots",
        "2",
        "--gpus-per-trial",
        "0",
        "--max-t",
        "100000",
        "--metric",
        "val_top1",
        "--mode",
        "max",
        "--out-dir",
        out.to_str().unwrap(),
    ];
    let mut c = sweep(
        dir.path(),
        &space,
        &args,
        &["--lr", "{lr}", "--epochs", "5"],
    );
    let o = testkit::output_within(&mut c, Duration::from_secs(300));
    let r = ok(&o);
    let s = r.summary.as_ref().unwrap();
    assert_eq!((s.completed, s.unfinished, s.error), (4, 0, 0));
    assert!(!r.pauses.is_empty(), "trials paused for others");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(!stdout.contains("\"type\":\"exploit\""), "no copies");
    // Each trial's results are its command's five epochs, in order, repeats left out.
    for t in 0..4 {
        let times: Vec<f64> = (r.results.iter())
            .filter(|x| x.trial == t)
            .map(|x| x.time)
            .collect();
        assert_eq!(times, [1.0, 2.0, 3.0, 4.0, 5.0], "trial {t}");
    }
    // The journal says the trials had no state: a replay decides as the run did.
    let mut resume = Command::new(BIN);
    resume.args(["--resume", "--out-dir"]).arg(&out);
    let again = ok(&testkit::output_within(
        &mut resume,
        Duration::from_secs(300),
    ));
    assert!(again.starts.is_empty() && again.resumes.is_empty());
}

/// A BOHB sweep of resumable curves (max_t 9, η 3), one slot unless `extra` says otherwise.
fn bohb_sweep(dir: &Path, out: &Path, extra: &[&str]) -> Command {
    let space = json!({"lr": {"loguniform": [1e-4, 1.0]}, "batch_size": {"choice": [16, 64, 256]}});
    let args = [
        "--search",
        "bohb",
        "--samples",
        "30",
        "--seed",
        "3",
        "--max-t",
        "9",
        "--metric",
        "val_top1",
        "--mode",
        "max",
        "--time-attr",
        "epoch",
        "--out-dir",
        out.to_str().unwrap(),
    ];
    let cmd = [
        "--lr",
        "{lr}",
        "--batch-size",
        "{batch_size}",
        "--epochs",
        "9",
        "--sleep-ms",
        "20",
        "--state",
        "{trial_dir}/state",
    ];
    sweep(dir, &space, &[&args[..], extra].concat(), &cmd)
}

#[test]
fn bohb_decides_as_rays_hyperband_for_bohb_and_suggests_from_its_models() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = bohb_sweep(dir.path(), &out, &[]).output().unwrap();
    let r = ok(&o);
    let s = r.summary.as_ref().unwrap();
    assert_eq!((s.trials, s.unfinished, s.error), (30, 0, 0));
    assert_table_shows(&o.stderr, &["lr", "batch_size"]);
    assert_hyperband_journal_is_rays(&out);
    let journal = std::fs::read_to_string(out.join("journal.jsonl")).unwrap();
    let suggestions: Vec<Value> = (journal.lines())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "suggest")
        .collect();
    assert_eq!(suggestions.len(), 30, "each trial made once");
    let from_model = suggestions.iter().filter(|e| e["model"] == true).count();
    assert!(from_model > 5, "{from_model} configs from the models");
    // Each trial ran with the config suggested for it.
    for e in &suggestions {
        let t = e["trial"].as_u64().unwrap() as usize;
        let start = r.starts.iter().find(|x| x.trial == t).unwrap();
        assert_eq!(Value::Object(start.config.clone()), e["config"]);
    }
}

#[test]
fn bohb_kill_9_then_resume_suggests_and_decides_as_without_the_kill() {
    let dir = tempfile::tempdir().unwrap();
    let (whole, cut) = (dir.path().join("whole"), dir.path().join("cut"));
    ok(&bohb_sweep(dir.path(), &whole, &[]).output().unwrap());
    kill_after_results(bohb_sweep(dir.path(), &cut, &[]), 40);
    let mut resume = Command::new(BIN);
    resume.args(["--resume", "--out-dir"]).arg(&cut);
    let r = ok(&resume.output().unwrap());
    assert_eq!(r.summary.as_ref().unwrap().unfinished, 0);
    assert_hyperband_journal_is_rays(&cut);
    let suggested = |out: &Path| -> Vec<Value> {
        (std::fs::read_to_string(out.join("journal.jsonl"))
            .unwrap()
            .lines())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "suggest")
        .map(|e| e["config"].clone())
        .collect()
    };
    assert_eq!(
        suggested(&cut),
        suggested(&whole),
        "one slot: the same configs"
    );
    assert_eq!(journal_ends(&cut), journal_ends(&whole));
}

/// A journal is input too: one naming a trial the sweep does not have, a definition with no
/// trials or more than a sweep runs, or settings no flag could give, is an error at --resume
/// naming the journal (each panicked or allocated without bound before).
#[test]
fn a_damaged_journal_is_an_error_at_resume_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    ok(
        &shell_sweep(dir.path(), r#"printf '\173"m": 1, "epoch": 1\175\n'"#)
            .output()
            .unwrap(),
    );
    let journal = dir.path().join("run/journal.jsonl");
    let good = std::fs::read_to_string(&journal).unwrap();
    let resume = || {
        Command::new(BIN)
            .args(["--resume", "-q", "--out-dir"])
            .arg(dir.path().join("run"))
            .output()
            .unwrap()
    };
    let lines: Vec<Value> = good
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    type Edit = Box<dyn Fn(&mut Vec<Value>)>;
    let edits: Vec<(Edit, &str)> = vec![
        (
            Box::new(|l: &mut Vec<Value>| l[1]["trial"] = json!(7)),
            "names trial 7, but this sweep has 1 trials",
        ),
        (
            Box::new(|l: &mut Vec<Value>| l[0]["definition"]["trials"] = json!([])),
            "0 trials",
        ),
        (
            Box::new(|l: &mut Vec<Value>| {
                l[0]["definition"]["search"] = json!("tpe");
                l[0]["definition"]["samples"] = json!(1u64 << 40);
            }),
            "1099511627776 trials",
        ),
        (
            Box::new(|l: &mut Vec<Value>| {
                l[0]["definition"]["asha"]["brackets"] = json!(1u64 << 40)
            }),
            "--brackets must be at most",
        ),
    ];
    for (edit, want) in edits {
        let mut l = lines.clone();
        edit(&mut l);
        let text: String = l.iter().map(|v| format!("{v}\n")).collect();
        std::fs::write(&journal, text).unwrap();
        let o = resume();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{want}: {err}");
        assert!(
            err.contains(want) && err.contains("journal"),
            "{want}: {err}"
        );
    }
}

/// Where roff's `\"` starts a comment outside a comment line: the rest of that line is lost.
fn roff_comment_in_text(page: &str) -> Option<&str> {
    page.lines().filter(|l| !l.starts_with(".\\\"")).find(|l| {
        let mut chars = l.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some('"') => return true,
                    _ => continue, // `\\` and other escapes are whole
                }
            }
        }
        false
    })
}

#[test]
fn help_and_man_page_print_quotes_whole() {
    let man = Command::new(BIN)
        .args(["--generate", "man"])
        .output()
        .unwrap();
    let page = String::from_utf8(man.stdout).unwrap();
    assert!(page.contains(".SH \"OUTPUT RECORDS\""), "{page}");
    if let Some(line) = roff_comment_in_text(&page) {
        panic!("roff reads the rest of this line as a comment: {line}");
    }
    let help = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("\"stopped\""), "{help}");
    assert!(!help.contains("\\\""), "a backslash before a quote: {help}");
}
