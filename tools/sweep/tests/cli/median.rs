//! The median stopping rule as Ray's MedianStoppingRule decides, its pauses and resumes.

use super::*;

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
pub(crate) fn assert_median_journal_is_rays(out: &Path) {
    let journal = journal(out);
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
    let r = ok(&resumed(&out));
    assert_eq!(r.summary.as_ref().unwrap().unfinished, 0);
    assert!(
        !r.resumes.is_empty(),
        "trials paused before the kill run again"
    );
    assert_median_journal_is_rays(&out);
}

/// A median-rule sweep of five resumable curves (grace 2, 2 samples, max_t 6), one slot unless
/// `extra` says otherwise (`extra_cmd` goes after the curve's arguments, a later value winning);
/// each trial's processes take a lock in its directory (one that finds it held exits 4: an
/// error).
pub(crate) fn median_sweep(dir: &Path, out: &Path, extra: &[&str], extra_cmd: &[&str]) -> Command {
    let space = json!({"lr": {"grid": [0.0003, 0.03, 0.3, 0.003, 0.01]}, "batch_size": 64});
    let flags = [
        "--scheduler",
        "median",
        "--min-samples",
        "2",
        "--grace-period",
        "2",
        "--max-t",
        "6",
    ];
    let curves = Curves {
        epochs: 6,
        sleep_ms: 20,
        lock: true,
    };
    resumable_sweep(dir, out, &space, &flags, curves, extra, extra_cmd)
}

/// Real processes holding a lock, and Ray's rule on the journal; results.csv and the engine's
/// side (a start only once the paused process is gone) are sweep-engine's
/// schedulers::median_with_two_slots_never_runs_a_paused_trial_twice_at_once.
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
        TWO_SLOTS_SLOW_STOP,
        &["--ignore-term", "--sleep-ms", "150"],
    )
    .output()
    .unwrap());
    assert!(!r.pauses.is_empty());
    assert_eq!(r.summary.as_ref().unwrap().error, 0, "no overlap");
    assert_eq!(r.summary.as_ref().unwrap().unfinished, 0);
    assert_median_journal_is_rays(&out);
}
