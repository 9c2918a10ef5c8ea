//! TPE (as Optuna's sampler) and BOHB (as Ray's TuneBOHB): the configs suggested, and again after kill -9 and --resume.

use super::*;

/// TPE's sweep (with [`max_by_epoch`]'s flags).
pub(crate) const TPE: &[&str] = &[
    "--search",
    "tpe",
    "--samples",
    "14",
    "--seed",
    "5",
    "--max-t",
    "4",
    "--grace-period",
    "1",
    "--reduction-factor",
    "2",
];

/// The last status table's header names these parameters (TPE and BOHB choose configs as
/// trials start, after the table's first look at them).
pub(crate) fn assert_table_shows(stderr: &[u8], params: &[&str]) {
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

pub(crate) fn tpe_space() -> Value {
    json!({"lr": {"loguniform": [1e-4, 1]}, "batch_size": {"randint": [16, 512]}})
}

/// The configs of the trials in trial order (from their start records).
pub(crate) fn started_configs(r: &Records) -> Vec<serde_json::Map<String, Value>> {
    let mut s: Vec<&TrialRecord> = r.starts.iter().collect();
    s.sort_by_key(|t| t.trial);
    s.iter().map(|t| t.config.clone()).collect()
}

#[test]
fn tpe_suggests_what_optuna_suggests_given_the_same_results() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let args = [TPE, &max_by_epoch("val_top1", &out)].concat();
    let cmd = lr_batch_curve("4", &[]);
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
    let cmd = lr_batch_curve("4", KEEPS_STATE_15MS);
    let run = |out: &Path| {
        let args = [TPE, &max_by_epoch("val_top1", out)].concat();
        sweep(dir.path(), &tpe_space(), &args, &cmd)
    };
    let whole = dir.path().join("whole");
    let r = ok(&run(&whole).output().unwrap());
    let want = started_configs(&r);

    let cut = dir.path().join("cut");
    // Killed in the middle of the sweep (past the random start-up), then again.
    kill_after_results(run(&cut), 30);
    cut_then_resumed(&cut, 4);
    let suggested: Vec<serde_json::Map<String, Value>> = (journal_events(&cut, "suggest").iter())
        .map(|e| e["config"].as_object().unwrap().clone())
        .collect();
    assert_eq!(
        suggested, want,
        "each trial suggested once, as without the kills"
    );
    assert_eq!(journal_ends(&cut), journal_ends(&whole));
    assert_eq!(journal_results(&cut), journal_results(&whole));
}

/// A BOHB sweep of resumable curves (max_t 9, η 3), one slot unless `extra` says otherwise.
pub(crate) fn bohb_sweep(dir: &Path, out: &Path, extra: &[&str]) -> Command {
    let space = json!({"lr": {"loguniform": [1e-4, 1.0]}, "batch_size": {"choice": [16, 64, 256]}});
    let flags = [
        "--search",
        "bohb",
        "--samples",
        "30",
        "--seed",
        "3",
        "--max-t",
        "9",
    ];
    let curves = Curves {
        epochs: 9,
        sleep_ms: 20,
        lock: false,
    };
    resumable_sweep(dir, out, &space, &flags, curves, extra, &[])
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
    let suggestions = journal_events(&out, "suggest");
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
    let r = ok(&resumed(&cut));
    assert_eq!(r.summary.as_ref().unwrap().unfinished, 0);
    assert_hyperband_journal_is_rays(&cut);
    let suggested = |out: &Path| -> Vec<Value> {
        (journal_events(out, "suggest").into_iter())
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
