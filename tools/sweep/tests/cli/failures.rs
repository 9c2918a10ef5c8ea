//! Trials that fail, hang, ignore SIGTERM or print what cannot be used: retried, killed, warned about, never the sweep's end.

use super::*;

/// --max-failures, the exit status and the command's last words in the retry record; what the
/// retry's results are (going on from the checkpoint) is sweep-engine's
/// printed::a_failed_trial_is_retried_from_its_checkpoint_or_from_its_start.
#[test]
fn a_failed_trial_is_retried_from_its_checkpoint_and_one_out_of_retries_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let space = json!({"lr": 0.03, "crash": {"grid": [0, 2]}});
    let cmd = CRASHING_CURVE;
    // One retry allowed: trial 1 crashes after epoch 2, runs again from its state, completes.
    let out = dir.path().join("retry");
    let r = ok(&sweep(
        dir.path(),
        &space,
        &[
            FIFO_TO_4,
            &max_by_epoch("val_top1", &out),
            &["--max-failures", "1"],
        ]
        .concat(),
        cmd,
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

    // No retries: the trial is an error, the other completes, exit 3.
    let out = dir.path().join("error");
    std::fs::create_dir_all(&out).unwrap();
    let o = sweep(
        dir.path(),
        &space,
        &[FIFO_TO_4, &max_by_epoch("val_top1", &out)].concat(),
        cmd,
    )
    .output()
    .unwrap();
    testkit::exits(&o, 3);
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
            &["--max-t", "2", "--reduction-factor", "2"][..],
            &["--stop-grace-secs", "0.5"],
            &max_by_epoch("val_top1", &out),
        ]
        .concat(),
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

/// Exit 3 and the summary's best; best.json and metric.svg are sweep-engine's
/// schedulers::a_trial_in_error_is_never_the_best.
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
    testkit::exits(&o, 3);
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
}

#[test]
fn a_fifo_in_place_of_a_trials_stderr_log_fails_the_trial_not_the_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let trial_dir = dir.path().join("run/trial-0000");
    std::fs::create_dir_all(&trial_dir).unwrap();
    testkit::mkfifo(&trial_dir.join("stderr.log"));
    let mut c = shell_sweep(dir.path(), r#"printf '\173"epoch": 1, "m": 1\175\n'"#);
    // Opening the FIFO to write waited for a reader for ever.
    let o = testkit::output_within(&mut c, Duration::from_secs(120));
    testkit::exits(&o, 3);
    let r = records(&o.stdout);
    let why = r.ends[0].message.clone().unwrap_or_default();
    testkit::assert_mentions(&why, &["stderr.log", "not a regular file"]);
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

#[test]
fn a_trial_ends_when_its_process_exits_whatever_it_left_behind() {
    let dir = tempfile::tempdir().unwrap();
    // The trial reports epoch 1 and exits 0, leaving a process that holds its stdout and would
    // report epoch 2 after 600 s, and one that only sleeps (for a time no other run's sleeper
    // has: this test's pid as its fraction).
    let sleeper = format!("sleep 1717.{}", std::process::id());
    let script = format!(
        r#"printf '\173"m": 1, "epoch": 1\175\n'; (sleep 600; printf '\173"m": 9, "epoch": 2\175\n') & (exec {sleeper} >/dev/null) & exit 0"#
    );
    let start = Instant::now();
    let r = ok(&shell_sweep(dir.path(), &script).output().unwrap());
    // It held the slot until the orphan ended before, and the orphan's line was taken as a result.
    assert!(
        start.elapsed() < Duration::from_secs(120),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(r.results.len(), 1, "{:?}", r.results);
    assert_eq!(r.results[0].time, 1.0);
    // The trial's process group is gone, the sleeper included (SIGKILL was sent before the
    // sweep ended; on a loaded machine the sleeper may take a moment to die).
    let running = || {
        let left = Command::new("pgrep")
            .args(["-f", &sleeper])
            .output()
            .unwrap();
        String::from_utf8_lossy(&left.stdout).into_owned()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !running().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(running(), "", "left running");
}

/// What reaches stderr, and a line of 2 MiB read through the trial's stdout.log; each warning's
/// text, the NaN result and its replay are sweep-engine's
/// printed::results_that_cannot_be_used_are_warnings_naming_the_trial_and_line.
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
    assert!(
        err.contains("sweep: warning: trial 0: a line of 2097153 bytes (over 1 MiB) was skipped"),
        "{err}"
    );
    assert_eq!(err.matches("warning: trial 0").count(), 6, "{err}");
}
