//! ASHA with one slot: the trials Ray Tune's AsyncHyperBandScheduler stops, at the same epochs.

use super::*;

/// (trial → stop time) and the completed trials, from end records.
pub(crate) fn outcome(ends: &[TrialRecord]) -> (BTreeMap<usize, f64>, Vec<usize>) {
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

pub(crate) fn lr_batch_space() -> Value {
    json!({"lr": {"grid": [1e-4, 1e-3, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0]}, "batch_size": {"grid": [64, 512]}})
}

pub(crate) use common::ASHA;

/// Nine seeded draws of the space, run to the end (FIFO), maximising val_top1.
pub(crate) const NINE_DRAWS: &[&str] = &[
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

/// FIFO over the curve's epochs, each trial complete at epoch 4 (with [`max_by_epoch`]'s flags).
pub(crate) const FIFO_TO_4: &[&str] = &["--scheduler", "fifo", "--max-t", "4"];

/// Every trial's whole curve, from the program itself.
pub(crate) fn curves(
    configs: &[&serde_json::Map<String, Value>],
    epochs: u32,
) -> Vec<Vec<(f64, f64)>> {
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
pub(crate) fn ray_sequential(
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
        &[ASHA, &max_by_epoch("val_top1", &out)].concat(),
        &lr_batch_curve("12", &[]),
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
    assert!(common::journal(&out).len() > 16 * 3);

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
    let py = Command::new(testkit::python())
        .args(["-c", check])
        .arg(&t0)
        .arg(&out)
        .arg(out.join(format!("trial-{stopped:04}")))
        .arg(out.join(format!("trial-{completed:04}")))
        .output()
        .unwrap();
    testkit::ok(&py);
    let steps: Vec<String> = (1..=results).map(|e| e.to_string()).collect();
    assert_eq!(
        String::from_utf8_lossy(&py.stdout).trim(),
        format!(
            "[{}] 0.0001 64.0 ['batch_size', 'lr'] ['val_top1', 'stopped_early']\n0 1.0\n1 0.0",
            steps.join(", ")
        )
    );
}
