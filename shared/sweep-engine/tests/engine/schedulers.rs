//! Whole sweeps of each scheduler through the stand-in launcher: what HyperBand pauses, halves,
//! unsticks and replays, what two slots never do (run one trial twice at once), population-based
//! training over trials without state, a trial in error never the best, and a damaged journal
//! refused at --resume. The sweep tool's tests compare the same sweeps with Ray Tune's.

use super::*;

/// The learning rates of the HyperBand sweeps' nine trials (trial i has LRS[i]).
const LRS: [f64; 9] = [0.0003, 0.03, 0.3, 0.003, 0.01, 0.1, 0.001, 0.05, 0.02];

/// The metric of the sweep tool's test trial (examples/curve.rs) at `lr`, batch 64, epochs
/// 1..=`epochs`: 100 · q · (1 − e^(−e/3)), q = exp(−(log10(lr) + 1.5)²) · (1 − 64/1024).
fn lr_curve(lr: f64, epochs: u32) -> Vec<String> {
    let q = (-(lr.log10() + 1.5).powi(2)).exp() * (1.0 - 64.0 / 1024.0);
    (1..=epochs)
        .map(|e| {
            let m = 100.0 * q * (1.0 - (-(e as f64) / 3.0).exp());
            json!({"epoch": e, "m": m}).to_string()
        })
        .collect()
}

/// HyperBand over the nine trials of [`LRS`] (max_t 9, η 3: brackets of 3 trials to 9, 5 to
/// 3 then the best 2 to 9, and 1 from 1).
fn hyperband() -> Definition {
    let mut def = definition(
        &[0, 1, 2, 3, 4, 5, 6, 7, 8],
        SchedulerKind::Hyperband,
        9.0,
        0,
    );
    def.asha.reduction_factor = 3.0;
    def
}

/// Each trial's result times, in the order printed.
fn times_by_trial(out: &Collect) -> BTreeMap<u64, Vec<f64>> {
    let mut times: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for r in out.of_type("result") {
        let t = r["trial"].as_u64().unwrap();
        times
            .entry(t)
            .or_default()
            .push(r["time"].as_f64().unwrap());
    }
    times
}

/// The trials of the 5-trial bracket (3 to 7) that went past epoch 3.
fn past_3_of_the_5_bracket(out: &Collect) -> BTreeSet<u64> {
    (times_by_trial(out).into_iter())
        .filter(|(t, times)| (3..8).contains(t) && times.iter().any(|&x| x > 3.0))
        .map(|(t, _)| t)
        .collect()
}

/// The journal's entries of `event`.
fn journal_events(dir: &Path, event: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join(sweep_engine::journal::FILE)).unwrap();
    (text.lines())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == event)
        .collect()
}

/// As the sweep tool's hyperband_decides_as_rays_and_paused_trials_resume_from_their_state,
/// without the comparison with Ray's scheduler.
#[test]
fn hyperband_pauses_halves_and_resumes_trials_from_where_they_were() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    // Each run of a trial prints its whole curve again: a resumed one's repeats are skipped.
    let fake = Fake::new(|trial, _| (lr_curve(LRS[trial], 9), Exit::Code(0)));
    let (out, ended) = run(create(&dir, hyperband()), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    assert!(!out.events("pause").is_empty() && !out.events("resume").is_empty());
    let s = out.summary();
    assert_eq!(
        (&s["trials"], &s["unfinished"], &s["error"]),
        (&json!(9), &json!(0), &json!(0))
    );
    let ends = out.events("end");
    assert!(ends.iter().any(|(_, s)| s == "stopped"), "{ends:?}");
    assert!(ends.iter().any(|(_, s)| s == "completed"), "{ends:?}");
    // The halving of the 5-trial bracket at epoch 3 keeps 2: its decisions say so. (lr 0.01
    // and 0.1 tie: the one added later is kept, as Python's stable sort leaves it.)
    let at3: Vec<&Value> = (out.of_type("decision"))
        .filter(|d| d["milestone"] == 3.0 && (3..8).contains(&d["trial"].as_u64().unwrap()))
        .collect();
    assert_eq!(at3.len(), 5, "{at3:?}");
    assert_eq!(at3.iter().filter(|d| d["action"] == "continue").count(), 2);
    for d in &at3 {
        let (value, cutoff) = (d["value"].as_f64().unwrap(), d["cutoff"].as_f64().unwrap());
        match d["action"].as_str().unwrap() {
            "continue" => assert!(value >= cutoff, "{d}"),
            _ => assert!(value <= cutoff, "{d}"),
        }
    }
    // lr 0.05, and 0.1 of the tie.
    assert_eq!(past_3_of_the_5_bracket(&out), BTreeSet::from([5, 7]));
    // Each trial's results go on from where it was paused: epochs 1, 2, ... once each.
    for (t, times) in times_by_trial(&out) {
        let want: Vec<f64> = (1..=times.len()).map(|e| e as f64).collect();
        assert_eq!(times, want, "trial {t}");
    }
    let best: Value =
        serde_json::from_slice(&std::fs::read(dir.join("best.json")).unwrap()).unwrap();
    assert_eq!(best["trial"], s["best"]["trial"]);
    assert_eq!(best["status"], "completed");
}

/// As the sweep tool's hyperband_with_two_slots_runs_every_trial_to_its_end_and_never_twice_at_once:
/// paused trials' processes ignore SIGTERM and live on until SIGKILL while the other slot may
/// free; a paused trial must not start again before its process is gone.
#[test]
fn hyperband_with_two_slots_never_starts_a_trial_whose_process_lives_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    // Trial 3 (of the 5-trial bracket, never kept) is paused or stopped at epoch 3: its first
    // process waits there until it is, so that it still lives then however late the sweep
    // reads (else it may have printed its curve and exited, and no process lives on).
    let fake = Fake::new(|trial, _| (lr_curve(LRS[trial], 9), Exit::Code(0)))
        .paced(Duration::from_millis(2), OnStop::PrintOn)
        .holding(|trial, attempt| match (trial, attempt) {
            (3, 1) => vec![Hold {
                after: 3,
                until: Until::Signalled(3),
            }],
            _ => Vec::new(),
        });
    let log = fake.log.clone();
    let opts = RunOptions {
        stop_grace: Duration::from_millis(30),
        ..options(2)
    };
    let (out, ended) = run_with(create(&dir, hyperband()), fake, opts);
    assert_eq!(ended.unwrap().failed, 0);
    let s = out.summary();
    assert_eq!((&s["unfinished"], &s["error"]), (&json!(0), &json!(0)));
    assert!(!out.events("pause").is_empty() && !out.events("resume").is_empty());
    let kills = (log.lock().unwrap().iter())
        .filter(|l| l["kind"] == "Kill")
        .count();
    assert!(kills > 0, "paused trials lived on until killed");
    // Exactly the top ⌈5/3⌉ of the 5-trial bracket went past epoch 3.
    assert_eq!(past_3_of_the_5_bracket(&out), BTreeSet::from([5, 7]));
}

/// As the sweep tool's hyperband_unsticks_a_bracket_ray_would_leave_waiting_and_resume_replays_it:
/// equal curves (ties: the later trials win) in brackets of 3 (to 4) and 3 (2, then the best 2
/// to 4). In the second, trial 5 goes on to 4 and pauses for trial 4, which fails at epoch 3:
/// Ray would wait for ever with trial 5 paused; the sweep processes the bracket again.
#[test]
fn hyperband_unsticks_a_bracket_left_waiting_and_resume_replays_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let mut def = definition(&[0, 1, 2, 3, 4, 5], SchedulerKind::Hyperband, 4.0, 0);
    def.asha.reduction_factor = 2.0;
    // Trial 4 fails after epoch 3 (a paused run of it is stopped before).
    let fake = Fake::new(|trial, _| match trial {
        4 => (lr_curve(0.03, 3), Exit::Code(1)),
        _ => (lr_curve(0.03, 4), Exit::Code(0)),
    });
    let (out, ended) = run(create(&dir, def), fake, 1);
    assert_eq!(ended.unwrap().failed, 1);
    let ends: BTreeMap<u64, Value> = out.events("end").into_iter().collect();
    assert_eq!(
        (&ends[&3], &ends[&4], &ends[&5]),
        (&json!("stopped"), &json!("error"), &json!("completed"))
    );
    assert_eq!(out.summary()["unfinished"], 0);
    assert_eq!(journal_events(&dir, "unstick").len(), 1);
    // --resume replays the journal, the unsticking included, to the same ends.
    let fake = Fake::new(|_, _| (Vec::new(), Exit::Code(0)));
    let log = fake.log.clone();
    let (again, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 1);
    assert!(starts(&log).is_empty(), "{:?}", starts(&log));
    assert!(again.events("start").is_empty() && again.events("resume").is_empty());
    assert_eq!(journal_events(&dir, "end").len(), 6, "no end written twice");
}

/// As the sweep tool's pbt_over_trials_without_state_ends_and_copies_none: trials whose
/// directories hold nothing of their commands' and whose results carry no time (a counted
/// training_iteration) are never copied; restarted after a pause, their count starts again
/// with the command, repeats left out; a replay decides as the run did.
#[test]
fn pbt_over_trials_without_state_ends_and_copies_none() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let mut def = definition(&[0, 1, 2, 3], SchedulerKind::Pbt, 100_000.0, 0);
    def.pbt = Some(search::pbt::PbtSettings {
        perturbation_interval: 2.0,
        burn_in_period: 0.0,
        quantile_fraction: 0.25,
        resample_probability: 0.25,
        perturbation_factors: [1.2, 0.8],
        mode: search::Mode::Max,
    });
    def.time_attr = "training_iteration".into();
    let fake = Fake::new(|trial, _| (lr_curve(LRS[trial], 5), Exit::Code(0)))
        .paced(Duration::from_millis(2), OnStop::Exit);
    let (out, ended) = run(create(&dir, def), fake, 2);
    assert_eq!(ended.unwrap().failed, 0);
    let s = out.summary();
    assert_eq!(
        (&s["completed"], &s["unfinished"], &s["error"]),
        (&json!(4), &json!(0), &json!(0))
    );
    assert!(!out.events("pause").is_empty(), "trials paused for others");
    assert_eq!(out.of_type("exploit").count(), 0, "no copies");
    for (t, times) in times_by_trial(&out) {
        assert_eq!(times, [1.0, 2.0, 3.0, 4.0, 5.0], "trial {t}");
    }
    let fake = Fake::new(|_, _| (Vec::new(), Exit::Code(0)));
    let log = fake.log.clone();
    let (again, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 2);
    assert_eq!(ended.unwrap().failed, 0);
    assert!(starts(&log).is_empty() && again.events("resume").is_empty());
}

/// As the sweep tool's a_trial_in_error_is_never_the_best.
#[test]
fn a_trial_in_error_is_never_the_best() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let def = definition(&[1, 2], SchedulerKind::Fifo, 2.0, 0);
    // Trial 0 reports the better metric, then fails; trial 1 completes.
    let fake = first_and_others((curve(100, 1), Exit::Code(1)), (curve(1, 1), Exit::Code(0)));
    let (out, ended) = run(create(&dir, def), fake, 1);
    assert_eq!(ended.unwrap().failed, 1);
    assert_eq!(
        out.events("end"),
        [(0, json!("error")), (1, json!("completed"))]
    );
    assert_eq!(out.summary()["best"]["trial"], 1);
    let best: Value =
        serde_json::from_slice(&std::fs::read(dir.join("best.json")).unwrap()).unwrap();
    assert_eq!(best["trial"], 1);
    let svg = std::fs::read_to_string(dir.join("metric.svg")).unwrap();
    assert!(svg.contains("(1 completed, best)"), "{svg}");
}

/// As the sweep tool's a_damaged_journal_is_an_error_at_resume_not_a_panic: a journal naming a
/// trial the sweep does not have, a definition with no trials or more than a sweep runs, or
/// settings no flag could give, is an error naming the journal.
#[test]
fn a_damaged_journal_is_an_error_at_resume_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let def = definition(&[1], SchedulerKind::Asha, 2.0, 0);
    let (_, ended) = run(
        create(&dir, def),
        Fake::new(|_, _| (curve(1, 1), Exit::Code(0))),
        1,
    );
    ended.unwrap();
    let path = dir.join(sweep_engine::journal::FILE);
    let good: Vec<Value> = (std::fs::read_to_string(&path).unwrap().lines())
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
        let mut lines = good.clone();
        edit(&mut lines);
        let text: String = lines.iter().map(|v| format!("{v}\n")).collect();
        std::fs::write(&path, text).unwrap();
        let e = resume_refused(&dir);
        let text = e.describe();
        assert!(
            text.contains(want) && text.contains("journal"),
            "{want}: {text}"
        );
        assert_eq!(e.class(), Class::Fatal, "{want}: {text}");
    }
}

/// As the sweep tool's median_with_two_slots_never_runs_a_paused_trial_twice_at_once: the
/// median rule (grace 2, 2 samples, max_t 6) in two slots, where a slot frees while nothing is
/// pending and a paused trial's process still lives: that trial must not start again before its
/// process is gone, and the slot goes to a paused trial whose process has exited.
///
/// Each step waits for the one before (the stand-in's holds), so the scenario is the same
/// however late the sweep reads: trials 0 and 1 start, trial 2 waits. Trial 1 pauses at epoch
/// 2 (trial 2 waits; too few others there) and its process exits at its stop; trial 2 takes its
/// slot. Trial 0 pauses at epoch 2 (trial 1 is paused) and its process, slow to stop, lives on
/// until trial 1 has started again. Trial 2 ends after epoch 1, once trial 0 was asked to stop:
/// its slot is free, nothing is pending, trials 0 and 1 are paused, and only trial 1's process
/// is gone. (Trials that ran on past their pause before the sweep read their lines would end by
/// those results, never resumed: the holds keep them from it.)
#[test]
fn median_with_two_slots_never_runs_a_paused_trial_twice_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let mut def = definition(&[0, 1, 2], SchedulerKind::Median, 6.0, 0);
    def.asha.grace_period = 2.0;
    def.median = Some(search::median::MedianSettings {
        grace_period: 2.0,
        min_samples: 2,
        min_time_slice: 0.0,
        mode: search::Mode::Max,
    });
    // Each run of a trial prints its whole curve again: a resumed one's repeats are skipped.
    let epochs = |trial: usize| if trial < 2 { 6 } else { 1 };
    let hold = |after, until| vec![Hold { after, until }];
    let fake = Fake::new(move |trial, _| (lr_curve(LRS[trial], epochs(trial)), Exit::Code(0)))
        .paced(Duration::from_millis(2), OnStop::Exit)
        .holding(move |trial, attempt| match (trial, attempt) {
            (0, 1) => hold(2, Until::Started(1, 2)),
            (1, 1) => hold(2, Until::Signalled(1)),
            (2, 1) => hold(1, Until::Signalled(0)),
            _ => Vec::new(),
        });
    let log = fake.log.clone();
    // (A start before the process is gone fails the test in the stand-in launcher.)
    let (out, ended) = run_within(create(&dir, def), fake, options(2));
    assert_eq!(ended.unwrap().failed, 0);
    let trials = |event| -> BTreeSet<u64> { out.events(event).iter().map(|e| e.0).collect() };
    assert_eq!(trials("pause"), BTreeSet::from([0, 1]), "{:?}", out.records);
    assert_eq!(
        trials("resume"),
        BTreeSet::from([0, 1]),
        "{:?}",
        out.records
    );
    // The freed slot went to trial 1 while trial 0's first process lived (it exits only then),
    // then trial 0 started again.
    let starts = starts(&log);
    let at = |start| starts.iter().position(|s| *s == start);
    assert!(
        at((1, 2)).is_some() && at((1, 2)) < at((0, 2)),
        "{starts:?}"
    );
    let s = out.summary();
    assert_eq!((&s["unfinished"], &s["error"]), (&json!(0), &json!(0)));
    // Each trial's results go on from where it was paused: epochs 1, 2, ... once each.
    let times = times_by_trial(&out);
    for (t, times) in &times {
        let want: Vec<f64> = (1..=times.len()).map(|e| e as f64).collect();
        assert_eq!(*times, want, "trial {t}");
    }
    assert_eq!(
        (times[&0].len(), times[&1].len(), times[&2].len()),
        (6, 6, 1)
    );
    // results.csv: every trial ended, each paused one with more than one attempt.
    let table = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    let rows: Vec<Vec<&str>> = (table.lines().map(|l| l.split(',').collect())).collect();
    let column = |name: &str| rows[0].iter().position(|h| *h == name).unwrap();
    let (status, attempts) = (column("status"), column("attempts"));
    assert_eq!(rows.len(), 4, "{table}");
    assert!(
        rows[1..].iter().all(|r| r[status] == "completed"),
        "{table}"
    );
    let more_than_once: Vec<bool> = rows[1..].iter().map(|r| r[attempts] != "1").collect();
    assert_eq!(more_than_once, [true, true, false], "{table}");
}
