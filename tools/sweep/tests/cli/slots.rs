//! Slots: trials at once, each slot with its own GPUs and CPUs, never two trials in one slot.

use super::*;

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
        &lr_batch_curve("5", &["--sleep-ms", "400", "--slot-lock", &lock]),
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
    // At once: by the sweep's own records, three trials were running (started, not ended) at
    // one time and never more; and the nine took less than the 18 s their sleeps (5 × 400 ms
    // each) would take one after another, with room for a loaded machine's process starts.
    let (mut running, mut most) = (0, 0);
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["type"] == "trial" {
            running += match v["event"].as_str() {
                Some("start") => 1,
                Some("end") => -1,
                _ => 0,
            };
            most = most.max(running);
        }
    }
    assert_eq!(most, 3, "the slots did not run at once");
    assert!(
        elapsed < Duration::from_secs(17),
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

/// Each trial of a two-slot sweep notes its slot, OMP_NUM_THREADS and allowed CPUs: (slot,
/// OMP_NUM_THREADS, CPUs) per trial.
pub(crate) fn slot_cpus_seen(extra: &[&str]) -> Vec<(usize, String, String)> {
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
pub(crate) fn my_cpus() -> Vec<usize> {
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
