//! kill -9, SIGINT and --resume: the journal replayed, what was left running ended, one live sweep per directory, a damaged journal refused.

use super::*;

/// Reads the sweep's stdout until `n` result records have come, then kills it with SIGKILL.
pub(crate) fn kill_after_results(mut c: Command, n: usize) {
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

/// Resumes the sweep in `cut`, kills the resumed run after `n` results, and resumes it again
/// to the end: that run's records.
pub(crate) fn cut_then_resumed(cut: &Path, n: usize) -> Records {
    let mut resume = Command::new(BIN);
    resume
        .args(["--resume", "--report-secs", "0", "--out-dir"])
        .arg(cut);
    kill_after_results(resume, n);
    ok(&resumed(cut))
}

pub(crate) fn journal_ends(out: &Path) -> Vec<(u64, String)> {
    let mut v: Vec<(u64, String)> = (journal_events(out, "end").iter())
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

pub(crate) fn journal_results(out: &Path) -> Vec<(u64, f64)> {
    (journal_events(out, "result").iter())
        .map(|e| (e["trial"].as_u64().unwrap(), e["time"].as_f64().unwrap()))
        .collect()
}

#[test]
fn kill_9_then_resume_ends_with_the_decisions_of_an_uninterrupted_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let args = |out: &Path| {
        [ASHA, &max_by_epoch("val_top1", out)]
            .concat()
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    let cmd = lr_batch_curve("12", KEEPS_STATE_15MS);
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
    let r = cut_then_resumed(&cut, 12);
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
            &["--scheduler", "fifo", "--max-t", "40"],
            &TWO_SLOTS_SLOW_STOP[..4],
            &max_by_epoch("val_top1", &out)[..],
        ]
        .concat(),
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
fn one_live_sweep_per_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let space = json!({"lr": {"grid": [0.03, 0.01]}});
    let args = max_by_epoch("val_top1", &out);
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
    let o = resumed(&out);
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
    let o = resume_reporting(&run);
    let err = String::from_utf8_lossy(&o.stderr);
    let r = ok(&o);
    assert!(err.contains("were still running in"), "{err}");
    assert_eq!(r.results.last().unwrap().time, 2.0);
    assert!(orphan().is_empty(), "left running: {}", orphan());
}

/// `sweep --resume` of `out` with a status table at every change: its output.
fn resume_reporting(out: &Path) -> std::process::Output {
    let mut c = Command::new(BIN);
    c.args(["--resume", "--report-secs", "0", "--out-dir"])
        .arg(out);
    c.output().unwrap()
}

/// A journal is input too: one naming a trial the sweep does not have, a definition with no
/// trials or more than a sweep runs, or settings no flag could give, is an error at --resume
/// naming the journal (each panicked or allocated without bound before). Exit 1 and the
/// message, for one of them; sweep-engine's schedulers::a_damaged_journal_is_an_error_at_resume_not_a_panic
/// tries each.
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
    let mut l = lines.clone();
    l[0]["definition"]["asha"]["brackets"] = json!(1u64 << 40);
    let text: String = l.iter().map(|v| format!("{v}\n")).collect();
    std::fs::write(&journal, text).unwrap();
    let o = resume();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--brackets must be at most") && err.contains("journal"),
        "{err}"
    );
}

/// Waits (at most 10 minutes) until `path` exists.
fn wait_for_file(path: &Path) {
    let t = Instant::now();
    while !path.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(600),
            "{} never came",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A trial that saves its state as it reports: results it wrote that the sweep had not read
/// when it was killed with SIGKILL are taken by --resume (its next run goes on after them).
/// The sweep is stopped (SIGSTOP) while the trial reports, so that they are unread for sure.
#[test]
fn results_unread_when_the_sweep_is_killed_are_taken_by_resume() {
    let dir = tempfile::tempdir().unwrap();
    // Run again (with its state), the trial reports epoch 3 and ends. Its first run reports
    // epochs 1 and 2 once told to ("go"), saves its state, says so ("printed") and waits.
    let script = r#"d=$SWEEP_TRIAL_DIR
if [ -e "$d/state" ]; then printf '\173"epoch": 3, "m": 3\175\n'; exit 0; fi
touch "$d/started"
while [ ! -e "$d/go" ]; do sleep 0.02; done
printf '\173"epoch": 1, "m": 1\175\n\173"epoch": 2, "m": 2\175\n'
touch "$d/state" "$d/printed"
exec sleep 600"#;
    let mut child = shell_sweep(dir.path(), script)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let trial = dir.path().join("run/trial-0000");
    wait_for_file(&trial.join("started"));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGSTOP) };
    std::fs::write(trial.join("go"), "").unwrap();
    wait_for_file(&trial.join("printed"));
    child.kill().unwrap();
    child.wait().unwrap();
    let o = resumed(&dir.path().join("run"));
    let r = ok(&o);
    let times: Vec<f64> = r.results.iter().map(|x| x.time).collect();
    assert_eq!(times, [1.0, 2.0, 3.0], "the resumed run's results");
    let out = dir.path().join("run");
    assert_eq!(journal_results(&out), [(0, 1.0), (0, 2.0), (0, 3.0)]);
    assert_eq!(journal_ends(&out), [(0, "completed".to_string())]);
}

/// What a killed sweep left running in a trial is ended by --resume also when the sweep's
/// directory was moved since (the processes' SWEEP_TRIAL_DIR names the old path), and when a
/// process cleared its environment and left its session (`setsid env -i`): they hold the
/// trial's stdout.log, the file the journal names.
#[test]
fn resume_of_a_moved_sweep_ends_what_was_left_running_even_without_its_environment() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"if [ -e "$SWEEP_TRIAL_DIR/again" ]; then printf '\173"m": 2, "epoch": 2\175\n'; exit 0; fi; touch "$SWEEP_TRIAL_DIR/again"; (trap '' TERM; exec sleep 1717) & (trap '' TERM; exec setsid env -i sleep 1718) & printf '\173"m": 1, "epoch": 1\175\n'; wait"#;
    kill_after_results(shell_sweep(dir.path(), script), 1);
    let left = |n: &str| {
        let o = Command::new("pgrep")
            .args(["-f", &format!("^sleep {n}$")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let moved = dir.path().join("moved");
    std::fs::rename(dir.path().join("run"), &moved).unwrap();
    let o = resume_reporting(&moved);
    let err = String::from_utf8_lossy(&o.stderr);
    let r = ok(&o);
    let (a, b) = (left("1717"), left("1718"));
    // Not left running for the next test run either.
    for pid in a.split_whitespace().chain(b.split_whitespace()) {
        let _ = Command::new("kill").args(["-9", pid]).status();
    }
    assert!(a.is_empty() && b.is_empty(), "left running: {a} {b}; {err}");
    assert!(err.contains("were still running in"), "{err}");
    assert_eq!(r.results.last().unwrap().time, 2.0);
}

/// A trial's stdout.log made another name of a file some other process writes (a hard link)
/// before --resume: that process is not the trial's and is not ended (the file is not the
/// trial's own: the trial fails, naming it).
#[test]
fn resume_leaves_alone_a_process_writing_a_file_linked_in_place_of_a_trials_stdout_log() {
    let (bystander, o) = resumed_with_another_file_as_stdout_log(true);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(bystander, "the bystander was ended: {err}");
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("other names"), "{err}");
}

/// Another file, one some other process writes, renamed over a trial's stdout.log before
/// --resume: that process is not the trial's (the journal names the file the trial wrote) and
/// is not ended; the trial runs again.
#[test]
fn resume_leaves_alone_a_process_writing_a_file_renamed_over_a_trials_stdout_log() {
    let (bystander, o) = resumed_with_another_file_as_stdout_log(false);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(bystander, "the bystander was ended: {err}");
    assert!(
        err.contains("is not the file its last attempt wrote to"),
        "{err}"
    );
    ok(&o);
}

/// A killed sweep's trial whose stdout.log is then a file a bystander process writes (linked
/// there with `link`, else renamed over it), resumed: whether the bystander still ran after,
/// and the resumed sweep's output.
fn resumed_with_another_file_as_stdout_log(link: bool) -> (bool, std::process::Output) {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"if [ -e "$SWEEP_TRIAL_DIR/again" ]; then printf '\173"m": 2, "epoch": 2\175\n'; exit 0; fi; touch "$SWEEP_TRIAL_DIR/again"; printf '\173"m": 1, "epoch": 1\175\n'; exec sleep 600"#;
    kill_after_results(shell_sweep(dir.path(), script), 1);
    let other = dir.path().join("other.log");
    let mut bystander = Command::new("sleep")
        .arg("600")
        .stdout(std::fs::File::create(&other).unwrap())
        .spawn()
        .unwrap();
    let stdout = dir.path().join("run/trial-0000/stdout.log");
    if link {
        std::fs::remove_file(&stdout).unwrap();
        std::fs::hard_link(&other, &stdout).unwrap();
    } else {
        std::fs::rename(&other, &stdout).unwrap();
    }
    let o = resumed(&dir.path().join("run"));
    let alive = bystander.try_wait().unwrap().is_none();
    bystander.kill().unwrap();
    bystander.wait().unwrap();
    (alive, o)
}
