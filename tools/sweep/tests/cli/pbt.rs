//! Population-based training as Ray's PopulationBasedTraining copies: lineage, checkpoints, two slots, trials without state.

use super::*;

/// A population-based training sweep of six resumable curves (interval 3, max_t 12), one slot
/// unless `extra` says otherwise.
pub(crate) fn pbt_sweep(dir: &Path, out: &Path, extra: &[&str]) -> Command {
    let space =
        json!({"lr": {"loguniform": [1e-4, 1.0]}, "batch_size": {"choice": [32, 64, 128, 256]}});
    let flags = [
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
    ];
    let curves = Curves {
        epochs: 12,
        sleep_ms: 10,
        lock: false,
    };
    resumable_sweep(dir, out, &space, &flags, curves, extra, &[])
}

/// A one-slot population-based training sweep's journal replayed through Ray's own scheduler
/// (random and numpy seeded with the sweep's seed) and a stand-in controller: each start is
/// Ray's choice, each result gets the journal's action, each copy is from the same trial with
/// the same config. Returns the number of copies.
pub(crate) fn assert_pbt_journal_is_rays(out: &Path) -> usize {
    let journal = journal(out);
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
                events.push(json!([end_kind(e), trial]));
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
        let py = Command::new(testkit::python())
            .args(["-c", check])
            .arg(&out)
            .arg(format!("trial-{t:04}/pbt-copy-{copies}"))
            .output()
            .unwrap();
        testkit::ok(&py);
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
pub(crate) fn py_repr(x: f64) -> String {
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
pub(crate) fn assert_copies_go_on_from_the_copied_checkpoint(out: &Path) -> usize {
    let journal = journal(out);
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
    let r = ok(&resumed(&out));
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
    // Each trial's results are its command's five epochs (sweep-engine's
    // schedulers::pbt_over_trials_without_state_ends_and_copies_none checks their order, and
    // the replay).
    assert_eq!(r.results.len(), 20);
}
