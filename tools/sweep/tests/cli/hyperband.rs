//! HyperBand as Ray's HyperBandScheduler decides: brackets, pauses, two slots, a bracket left waiting.

use super::*;

/// A HyperBand sweep of nine resumable curves (max_t 9, η 3: brackets of 3 trials to 9, 5 to 3
/// then the best 2 to 9, and 1 from 1), one slot unless `extra` says otherwise.
pub(crate) fn hyperband_sweep(
    dir: &Path,
    out: &Path,
    extra: &[&str],
    extra_cmd: &[&str],
) -> Command {
    let lrs = [0.0003, 0.03, 0.3, 0.003, 0.01, 0.1, 0.001, 0.05, 0.02];
    let space = json!({"lr": {"grid": lrs}, "batch_size": 64});
    let flags = [
        "--scheduler",
        "hyperband",
        "--max-t",
        "9",
        "--reduction-factor",
        "3",
    ];
    let curves = Curves {
        epochs: 9,
        sleep_ms: 40,
        lock: true,
    };
    resumable_sweep(dir, out, &space, &flags, curves, extra, extra_cmd)
}

/// A one-slot HyperBand sweep's journal replayed through Ray's HyperBandScheduler and a
/// stand-in controller: each start is the trial Ray chooses, each result gets the journal's
/// action, and the trials each event stops are the ends that follow it in the journal (up to
/// where the sweep had to unstick a bracket: there Ray chooses no trial).
pub(crate) fn assert_hyperband_journal_is_rays(out: &Path) {
    let journal = journal(out);
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
                events.push(json!([end_kind(e), trial]));
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
    let r = ok(&resumed(&out));
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
        TWO_SLOTS_SLOW_STOP,
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
    ];
    // Slow enough that a paused trial stops before its next epoch (else trial 4 could crash
    // while paused rather than after it runs again).
    let cmd = [CRASHING_CURVE, &["--sleep-ms", "100"]].concat();
    let args = [&args[..], &max_by_epoch("val_top1", &out)].concat();
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
    let o2 = resumed(&out);
    assert_eq!(o2.status.code(), Some(3));
    let again = records(&o2.stdout);
    assert!(again.starts.is_empty() && again.resumes.is_empty());
    assert_eq!(journal_ends(&out).len(), 6, "no end written twice");
}
