//! The engine on its own, against a stand-in [`Launcher`] whose "processes" are threads that
//! send scripted lines and exits: the order of records, the schedulers' decisions acted on
//! (a stop signalled), retries, a lost allocation stopping the sweep, `--resume`'s replay, and
//! an output that refuses a record; the schedulers' behaviour over whole sweeps in
//! [`schedulers`], what trials print (lines that cannot be used, non-finite metrics, a retry's
//! results) in [`printed`]. No process runs, so each sweep takes milliseconds.

mod printed;
mod schedulers;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use error_class::{Class, Classify};
use serde_json::{Value, json};
use sweep_engine::journal::{ArgRepr, Definition, SchedulerKind, SearchKind};
use sweep_engine::launcher::{self, Ended, Launch, Launcher, Msg, Signal};
use sweep_engine::{Engine, Error, Output, OutputError, Record, RunOptions};

/// How one attempt of a stand-in trial ends after printing its lines.
#[derive(Debug, Clone, PartialEq)]
enum Exit {
    Code(i32),
    /// The place it ran in went away ([`Ended::Lost`]).
    Lost,
    /// As the sweep dies (kill -9): these lines are written to the trial's stdout after the
    /// script's, but never read by the sweep; then the place goes away as with `Lost`.
    Died(Vec<String>),
}

/// What attempt `.1` of trial `.0` prints and how it ends.
type Script = dyn Fn(usize, usize) -> (Vec<String>, Exit) + Send + Sync;

/// A launcher whose trials are threads: each sends its script's lines, then its exit.
struct Fake {
    script: Arc<Script>,
    next_pid: i32,
    exits: BTreeMap<i32, Exit>,
    /// Every start (trial, attempt, slot, the command) and signal (pid, signal), in order. (A
    /// start of a trial whose earlier attempt's exit the engine has not taken yet fails the
    /// test there: it may still run, and the engine would wait for ever for its slot.)
    log: Arc<Mutex<Vec<Value>>>,
    /// Paced: a line each this long, a stop (SIGTERM) ending the trial at once, as a training
    /// run's process; else every line at once, signals unheeded.
    pace: Option<Duration>,
    /// What a paced trial does when asked to stop.
    on_stop: OnStop,
    /// Each attempt's signals, by pid.
    signals: BTreeMap<i32, Sender<Signal>>,
    /// The trial of each attempt whose exit the engine has not taken yet (by pid).
    running: BTreeMap<i32, usize>,
    /// What a dead sweep's processes of a trial, left running, write to its stdout.log once
    /// the trial starts again, unless they were ended first ([`Launcher::end_leftovers`]).
    leftovers: BTreeMap<usize, Vec<String>>,
}

impl std::fmt::Debug for Fake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fake")
    }
}

impl Fake {
    fn new(script: impl Fn(usize, usize) -> (Vec<String>, Exit) + Send + Sync + 'static) -> Self {
        Fake {
            script: Arc::new(script),
            // Far above any real pid: nothing here signals a process.
            next_pid: 1 << 30,
            exits: BTreeMap::new(),
            log: Arc::default(),
            pace: None,
            on_stop: OnStop::Exit,
            signals: BTreeMap::new(),
            running: BTreeMap::new(),
            leftovers: BTreeMap::new(),
        }
    }

    /// Trials that print a line each `pace` and, asked to stop, do as `on_stop` says.
    fn paced(mut self, pace: Duration, on_stop: OnStop) -> Self {
        self.pace = Some(pace);
        self.on_stop = on_stop;
        self
    }
}

/// What a paced trial does when asked to stop (SIGTERM).
#[derive(Debug, Clone, Copy, PartialEq)]
enum OnStop {
    /// It exits at once, as a training run's process does.
    Exit,
    /// It prints on, then lives until it is killed (SIGKILL).
    PrintOn,
    /// It prints nothing more and lives until it is killed (stuck saving its state).
    Hang,
}

/// How a paced attempt runs: its lines, a line each `pace`, until a stop (SIGTERM) or, as
/// `on_stop` says, a kill; `None`: it was not signalled and exits as its script says.
fn run_paced(
    lines: Vec<String>,
    pace: Duration,
    on_stop: OnStop,
    signals: &Receiver<Signal>,
    mut send: impl FnMut(String),
) -> Option<ExitStatus> {
    let mut stopped = false;
    for line in lines {
        match signals.recv_timeout(pace) {
            Ok(Signal::Kill) => return Some(ExitStatus::from_raw(9)),
            Ok(Signal::Stop) if on_stop == OnStop::Exit => return Some(ExitStatus::from_raw(15)),
            Ok(Signal::Stop) => stopped = true,
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
        }
        if stopped && on_stop == OnStop::Hang {
            break;
        }
        send(line);
    }
    if !stopped {
        return None;
    }
    // Asked to stop, ignoring it: it lives on until killed.
    loop {
        match signals.recv_timeout(Duration::from_secs(600)) {
            Ok(Signal::Kill) | Err(_) => return Some(ExitStatus::from_raw(9)),
            Ok(Signal::Stop) => {}
        }
    }
}

impl Launcher for Fake {
    fn start(&mut self, launch: Launch<'_>, tx: Sender<Msg>) -> sweep_engine::Result<i32> {
        let (trial, attempt) = (launch.trial, launch.attempt);
        let args: Vec<String> = (launch.args.iter())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        self.log.lock().unwrap().push(json!({
            "start": trial, "attempt": attempt, "slot": launch.slot, "args": args,
        }));
        let (lines, exit) = (self.script)(trial, attempt);
        // Everything the trial prints is in its stdout.log, as a real trial's output is.
        let unread = match &exit {
            Exit::Died(unread) => unread.clone(),
            _ => Vec::new(),
        };
        let mut stdout = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(launch.dir.join("stdout.log"))
            .unwrap();
        // Leftovers still running write in the file after where this attempt's output starts,
        // so the attempt's reader takes their lines first (a real launcher reads the file from
        // there).
        let left = self.leftovers.remove(&trial).unwrap_or_default();
        for line in left.iter().chain(&lines).chain(&unread) {
            writeln!(stdout, "{line}").unwrap();
        }
        let lines = [left, lines].concat();
        self.next_pid += 1;
        self.exits.insert(self.next_pid, exit.clone());
        assert!(
            !self.running.values().any(|&t| t == trial),
            "trial {trial} started before its last attempt's exit was taken: a trial ran twice at once"
        );
        self.running.insert(self.next_pid, trial);
        let (signal_tx, signals) = std::sync::mpsc::channel();
        self.signals.insert(self.next_pid, signal_tx);
        let (pace, on_stop) = (self.pace, self.on_stop);
        std::thread::spawn(move || {
            // A line over the cap arrives as its length, as a launcher's reader sends it.
            let send = |line: String| {
                let line = format!("{line}\n").into_bytes();
                let _ = tx.send(match line.len() {
                    n if n > launcher::MAX_LINE => Msg::LongLine {
                        trial,
                        bytes: n as u64,
                    },
                    _ => Msg::Line {
                        trial,
                        attempt,
                        line,
                    },
                });
            };
            let signalled = match pace {
                Some(pace) => run_paced(lines, pace, on_stop, &signals, send),
                None => {
                    lines.into_iter().for_each(send);
                    None
                }
            };
            let code = match exit {
                Exit::Code(c) => c,
                Exit::Lost | Exit::Died(_) => 1,
            };
            let _ = tx.send(Msg::Exit {
                trial,
                attempt,
                status: Ok(signalled.unwrap_or(ExitStatus::from_raw(code << 8))),
            });
        });
        Ok(self.next_pid)
    }

    fn signal(&mut self, pid: i32, signal: Signal) {
        if let Some(s) = self.signals.get(&pid) {
            let _ = s.send(signal);
        }
        let signal = format!("{signal:?}");
        self.log
            .lock()
            .unwrap()
            .push(json!({"signal": pid - (1 << 30), "kind": signal}));
    }

    fn end_leftovers(&mut self, trial: usize, _dir: &Path, _stdout: Option<[u64; 2]>) {
        if self.leftovers.remove(&trial).is_some() {
            self.log
                .lock()
                .unwrap()
                .push(json!({ "ended_leftovers": trial }));
        }
    }

    fn ended(&mut self, pid: i32, status: &std::io::Result<ExitStatus>) -> Ended {
        self.running.remove(&pid);
        match self.exits.get(&pid) {
            Some(Exit::Lost | Exit::Died(_)) => Ended::Lost("the job is being requeued".into()),
            _ => match status {
                Ok(s) if s.success() => Ended::Success,
                _ => Ended::Failed(sweep_engine::launcher::describe(status)),
            },
        }
    }
}

/// Every record as JSON, and how many status tables came.
#[derive(Default)]
struct Collect {
    records: Vec<Value>,
    tables: usize,
    /// Refuse the record after this many.
    refuse_after: Option<usize>,
}

impl Output for Collect {
    fn record(&mut self, record: Record) -> Result<(), OutputError> {
        if self.refuse_after == Some(self.records.len()) {
            return Err("the reader went away".into());
        }
        self.records.push(serde_json::to_value(&record).unwrap());
        Ok(())
    }

    fn status(&mut self, _table: &str) {
        self.tables += 1;
    }
}

impl Collect {
    fn of_type<'a>(&'a self, ty: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.records.iter().filter(move |r| r["type"] == ty)
    }

    /// The trial records of `event`.
    fn trial_records<'a>(&'a self, event: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.of_type("trial").filter(move |r| r["event"] == event)
    }

    /// The trial records of `event`, as (trial, status).
    fn events(&self, event: &str) -> Vec<(u64, Value)> {
        (self.trial_records(event))
            .map(|r| (r["trial"].as_u64().unwrap(), r["status"].clone()))
            .collect()
    }

    /// The result records, as (time, metric).
    fn results(&self) -> Vec<(Value, Value)> {
        (self.of_type("result"))
            .map(|r| (r["time"].clone(), r["metric"].clone()))
            .collect()
    }

    fn summary(&self) -> &Value {
        let last = self.records.last().expect("records");
        assert_eq!(last["type"], "sweep_summary", "the summary comes last");
        last
    }
}

thread_local! {
    /// The warnings given through `log` on this thread.
    static WARNED: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Keeps each warning for the thread that gave it: a test's sweep runs on the test's thread.
struct KeepWarnings;

impl log::Log for KeepWarnings {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            WARNED.with(|w| w.borrow_mut().push(record.args().to_string()));
        }
    }

    fn flush(&self) {}
}

/// The warnings given on this thread since the last call (the first call sets the logger up:
/// none before it are kept).
fn warnings() -> Vec<String> {
    static SET: std::sync::Once = std::sync::Once::new();
    SET.call_once(|| {
        log::set_logger(&KeepWarnings).expect("no other logger in this test binary");
        log::set_max_level(log::LevelFilter::Warn);
    });
    WARNED.with(|w| w.take())
}

/// A sweep over `x` in `xs` maximising `m` by `epoch`, with `scheduler` and max_t `max_t`.
fn definition(xs: &[i64], scheduler: SchedulerKind, max_t: f64, max_failures: usize) -> Definition {
    let space = json!({"x": {"grid": xs}});
    let parsed = search::space::Space::parse(&space.to_string()).unwrap();
    Definition {
        space,
        samples: 1,
        seed: 0,
        metric: "m".into(),
        time_attr: "epoch".into(),
        scheduler,
        search: SearchKind::Random,
        asha: search::AshaSettings {
            max_t,
            grace_period: 1.0,
            reduction_factor: 2.0,
            brackets: 1,
            mode: search::Mode::Max,
        },
        median: None,
        pbt: None,
        max_failures,
        command: ["train", "--x", "{x}", "--dir", "{trial_dir}"]
            .iter()
            .map(|a| ArgRepr::Text(a.to_string()))
            .collect(),
        trials: parsed.generate(1, 0),
    }
}

fn options(slots: usize) -> RunOptions {
    RunOptions {
        slots,
        stop_grace: Duration::from_secs(60),
        report_every: Duration::ZERO,
        interrupted: || false,
    }
}

/// Runs `opened` with `launcher` and `opts`: what it printed and how it ended.
fn run_with(
    opened: sweep_engine::Opened,
    launcher: Fake,
    opts: RunOptions,
) -> (Collect, sweep_engine::Result<sweep_engine::Finished>) {
    let mut out = Collect::default();
    let ended = Engine::new(opened, opts, Box::new(launcher), &mut out).and_then(Engine::run);
    (out, ended)
}

/// [`run_with`] on a thread of its own, waited for at most 120 s: a sweep that would wait for
/// ever fails the test.
fn run_within(
    opened: sweep_engine::Opened,
    launcher: Fake,
    opts: RunOptions,
) -> (Collect, sweep_engine::Result<sweep_engine::Finished>) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(run_with(opened, launcher, opts)).unwrap());
    rx.recv_timeout(Duration::from_secs(120))
        .expect("the sweep ends within 120 s")
}

/// A new sweep of `def` in `dir`.
fn create(dir: &Path, def: Definition) -> sweep_engine::Opened {
    let space = search::space::Space::parse(&def.space.to_string()).unwrap();
    let command: Vec<OsString> = def.command.iter().map(ArgRepr::to_os).collect();
    let template = sweep_engine::template_of(&space, &command).unwrap();
    sweep_engine::create(dir, def, template).unwrap()
}

/// Runs `opened` with `launcher` and `slots`: what it printed and how it ended.
fn run(
    opened: sweep_engine::Opened,
    launcher: Fake,
    slots: usize,
) -> (Collect, sweep_engine::Result<sweep_engine::Finished>) {
    run_with(opened, launcher, options(slots))
}

/// A sweep of `def` in `dir` (one slot) that dies with a trial's `Exit::Died` (or stops with
/// its `Exit::Lost`), leaving its journal for a --resume: what it printed.
fn died(dir: &Path, def: Definition, launcher: Fake) -> Collect {
    let (out, ended) = run(create(dir, def), launcher, 1);
    assert!(matches!(ended, Err(Error::Interrupted)), "{ended:?}");
    out
}

/// A stand-in whose trial 0 prints and ends as `first` says, every other trial as `others`.
fn first_and_others(first: (Vec<String>, Exit), others: (Vec<String>, Exit)) -> Fake {
    Fake::new(move |trial, _| if trial == 0 { &first } else { &others }.clone())
}

/// What `--resume` of the sweep in `dir` is refused with (its journal replayed; nothing runs).
fn resume_refused(dir: &Path) -> Error {
    let fake = Fake::new(|_, _| (Vec::new(), Exit::Code(0)));
    let mut out = Collect::default();
    sweep_engine::resume(dir)
        .and_then(|opened| Engine::new(opened, options(1), Box::new(fake), &mut out))
        .unwrap_err()
}

/// Results at epochs 1..=`epochs` with m = `slope` · epoch.
fn curve(slope: i64, epochs: i64) -> Vec<String> {
    (1..=epochs)
        .map(|e| json!({"epoch": e, "m": slope * e}).to_string())
        .collect()
}

fn out_dir(tmp: &tempfile::TempDir) -> PathBuf {
    tmp.path().join("sweep")
}

#[test]
fn fifo_runs_every_trial_and_prints_the_summary_and_files_last() {
    let tmp = tempfile::tempdir().unwrap();
    let def = definition(&[1, 2, 3], SchedulerKind::Fifo, 3.0, 0);
    let fake = Fake::new(|trial, _| (curve(trial as i64 + 1, 3), Exit::Code(0)));
    let log = fake.log.clone();
    let (out, ended) = run(create(&out_dir(&tmp), def), fake, 2);
    assert_eq!(ended.unwrap().failed, 0);
    // Each trial: a start, three results, an end (completed); the command's placeholders
    // filled in.
    assert_eq!(out.events("start").len(), 3);
    assert_eq!(out.of_type("result").count(), 9);
    let ends = out.events("end");
    assert_eq!(ends.len(), 3);
    assert!(ends.iter().all(|(_, s)| s == "completed"), "{ends:?}");
    let starts: Vec<Value> = (log.lock().unwrap().iter())
        .filter(|l| l.get("start").is_some())
        .cloned()
        .collect();
    assert_eq!(starts.len(), 3);
    let dir = out_dir(&tmp).canonicalize().unwrap();
    assert_eq!(
        starts[0]["args"],
        json!([
            "train",
            "--x",
            "1",
            "--dir",
            dir.join("trial-0000").to_str().unwrap()
        ])
    );
    // Two slots, never the same one twice at once: slots 0 and 1 only.
    assert!(
        starts.iter().all(|s| s["slot"].as_u64().unwrap() < 2),
        "{starts:?}"
    );
    let summary = out.summary();
    assert_eq!(
        (
            &summary["completed"],
            &summary["best"]["trial"],
            &summary["best"]["metric"]
        ),
        (&json!(3), &json!(2), &json!(9.0))
    );
    assert!(out.tables > 0);
    let best: Value =
        serde_json::from_slice(&std::fs::read(dir.join("best.json")).unwrap()).unwrap();
    assert_eq!(best["trial"], 2);
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4, "{csv}");
    assert!(
        std::fs::read_to_string(dir.join("metric.svg"))
            .unwrap()
            .contains(">best</text>")
    );
}

#[test]
fn asha_stops_a_trial_that_falls_behind_and_signals_it() {
    let tmp = tempfile::tempdir().unwrap();
    // Trial 1 is worse than trial 0 at every rung: ASHA (rf 2) stops it at its first.
    let def = definition(&[1, 2], SchedulerKind::Asha, 4.0, 0);
    let fake = Fake::new(|trial, _| (curve(if trial == 0 { 10 } else { 1 }, 4), Exit::Code(0)));
    let log = fake.log.clone();
    let (out, ended) = run(create(&out_dir(&tmp), def), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    let stops: Vec<&Value> = (out.of_type("decision"))
        .filter(|d| d["action"] == "stop")
        .collect();
    assert_eq!(stops.len(), 1, "{:?}", out.records);
    assert_eq!(stops[0]["trial"], 1);
    assert_eq!(
        out.events("end"),
        [(0, json!("completed")), (1, json!("stopped"))]
    );
    // The stopped trial's process was asked to stop; its results after the stop are not
    // counted.
    let signals: Vec<Value> = (log.lock().unwrap().iter())
        .filter(|l| l.get("signal").is_some())
        .cloned()
        .collect();
    assert!(
        signals
            .iter()
            .any(|s| s["kind"] == "Stop" && s["signal"] == 2),
        "{signals:?}"
    );
    let results_of_1 = (out.of_type("result")).filter(|r| r["trial"] == 1).count();
    assert_eq!(results_of_1, 1);
}

#[test]
fn a_failed_attempt_is_retried_and_one_out_of_retries_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let def = definition(&[1, 2], SchedulerKind::Fifo, 2.0, 1);
    // Trial 0 fails once, then succeeds; trial 1 always fails.
    let fake = Fake::new(|trial, attempt| match (trial, attempt) {
        (0, 1) | (1, _) => (curve(1, 1), Exit::Code(3)),
        _ => (curve(1, 2), Exit::Code(0)),
    });
    let (out, ended) = run(create(&out_dir(&tmp), def), fake, 1);
    assert_eq!(ended.unwrap().failed, 1);
    let retries: Vec<&Value> = out.trial_records("retry").collect();
    assert_eq!(retries.len(), 2, "one per trial: {retries:?}");
    assert!(
        retries[0]["message"]
            .as_str()
            .unwrap()
            .contains("exit status 3"),
        "{retries:?}"
    );
    assert_eq!(
        out.events("end"),
        [(0, json!("completed")), (1, json!("error"))]
    );
    assert_eq!(out.summary()["error"], 1);
}

#[test]
fn a_lost_allocation_stops_the_sweep_and_resume_runs_only_the_unfinished_trial() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let def = definition(&[1, 2], SchedulerKind::Fifo, 2.0, 3);
    // Trial 0 completes; trial 1's place goes away under it.
    let fake = first_and_others((curve(1, 2), Exit::Code(0)), (curve(2, 1), Exit::Lost));
    let out = died(&dir, def, fake);
    assert_eq!(Error::Interrupted.class(), Class::Interrupted);
    assert!(out.events("retry").is_empty(), "nothing counted against it");
    assert_eq!(out.summary()["unfinished"], 1);
    // Resumed: the journal replayed (trial 0 stays completed, trial 1's result is kept) and
    // only trial 1 runs again, from its second epoch on.
    let fake = Fake::new(|_, _| (curve(2, 2), Exit::Code(0)));
    let log = fake.log.clone();
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    let starts: Vec<Value> = (log.lock().unwrap().iter())
        .filter(|l| l.get("start").is_some())
        .cloned()
        .collect();
    assert_eq!(starts.len(), 1, "{starts:?}");
    assert_eq!(
        (&starts[0]["start"], &starts[0]["attempt"]),
        (&json!(1), &json!(2))
    );
    let times: Vec<&Value> = out.of_type("result").map(|r| &r["time"]).collect();
    assert_eq!(times, [&json!(2.0)], "the repeated epoch 1 is skipped");
    let summary = out.summary();
    assert_eq!(
        (&summary["completed"], &summary["best"]["trial"]),
        (&json!(2), &json!(1))
    );
}

#[test]
fn an_output_that_refuses_a_record_ends_the_sweep_with_its_error() {
    let tmp = tempfile::tempdir().unwrap();
    let def = definition(&[1], SchedulerKind::Fifo, 2.0, 0);
    let fake = Fake::new(|_, _| (curve(1, 2), Exit::Code(0)));
    let mut out = Collect {
        refuse_after: Some(1),
        ..Collect::default()
    };
    let opened = create(&out_dir(&tmp), def);
    let ended = Engine::new(opened, options(1), Box::new(fake), &mut out).and_then(Engine::run);
    let e = ended.unwrap_err();
    assert!(matches!(e, Error::Output(_)), "{e:?}");
    assert_eq!(e.class(), Class::Fatal);
    assert_eq!(
        e.describe(),
        "the sweep's output refused a record: the reader went away"
    );
    assert_eq!(out.records.len(), 1);
}

#[test]
fn slots_out_of_bounds_are_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let def = definition(&[1], SchedulerKind::Fifo, 2.0, 0);
    let fake = Fake::new(|_, _| (Vec::new(), Exit::Code(0)));
    let e = run(create(&out_dir(&tmp), def), fake, 0).1.unwrap_err();
    assert_eq!(e.class(), Class::Usage, "{e}");
    // A second sweep in the same directory is refused: it holds one already.
    let def = definition(&[1], SchedulerKind::Fifo, 2.0, 0);
    let space = search::space::Space::parse(&def.space.to_string()).unwrap();
    let command: Vec<OsString> = def.command.iter().map(ArgRepr::to_os).collect();
    let template = sweep_engine::template_of(&space, &command).unwrap();
    let e = sweep_engine::create(&out_dir(&tmp), def, template).unwrap_err();
    assert!(matches!(e.root(), Error::Started { .. }), "{e:?}");
    assert_eq!(e.class(), Class::Fatal);
}

/// `dir`'s journal with `edit` applied to each entry after the definition.
fn edit_journal(dir: &Path, edit: impl Fn(&mut Value)) {
    let path = dir.join(sweep_engine::journal::FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        if n > 0 {
            edit(&mut v);
        }
        lines.push(v.to_string());
    }
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn resume_refuses_a_journal_whose_decisions_this_sweep_would_not_take() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let def = definition(&[1, 2], SchedulerKind::Asha, 4.0, 0);
    let fake = Fake::new(|trial, _| (curve(if trial == 0 { 10 } else { 1 }, 4), Exit::Code(0)));
    let (_, ended) = run(create(&dir, def), fake, 1);
    ended.unwrap();
    // ASHA stopped trial 1 at its first result: a journal saying it went on is another
    // sweep's.
    edit_journal(&dir, |v| {
        if v["event"] == "result" && v["trial"] == 1 {
            v["stop"] = json!(false);
        }
    });
    let e = resume_refused(&dir);
    assert!(matches!(e, Error::Journal(_)), "{e:?}");
    assert!(
        e.describe()
            .contains("decision for trial 1 at 1 differs from this sweep's scheduler"),
        "{e}"
    );
    assert_eq!(e.class(), Class::Fatal);
    // A trial the sweep does not have (the decision put back).
    edit_journal(&dir, |v| {
        if v["event"] == "result" && v["trial"] == 1 {
            v["stop"] = json!(true);
        }
        if v["event"] == "end" && v["trial"] == 1 {
            v["trial"] = json!(7);
        }
    });
    let e = resume_refused(&dir);
    assert!(e.describe().contains("names trial 7"), "{e}");
}

#[test]
fn tpe_resumed_suggests_again_what_its_journal_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let mut def = definition(&[1], SchedulerKind::Fifo, 2.0, 0);
    def.space = json!({"x": {"uniform": [0.0, 1.0]}});
    def.search = SearchKind::Tpe;
    def.samples = 4;
    def.trials = Vec::new();
    // The metric is the config's x: each trial's results depend on what TPE suggested. Trial
    // 2's allocation goes away under it.
    let script = |lost: bool| {
        move |trial: usize, _: usize| {
            let line = json!({"epoch": 1, "m": trial as f64 * 0.1}).to_string();
            let exit = if lost && trial == 2 {
                Exit::Lost
            } else {
                Exit::Code(0)
            };
            (vec![line], exit)
        }
    };
    let fake = Fake::new(script(true));
    let first = fake.log.clone();
    let out = died(&dir, def, fake);
    let configs = |records: &[Value]| -> Vec<(u64, Value)> {
        (records.iter())
            .filter(|r| r["type"] == "trial" && r["event"] != "end")
            .map(|r| (r["trial"].as_u64().unwrap(), r["config"].clone()))
            .collect()
    };
    let before = configs(&out.records);
    assert_eq!(before.len(), 3, "{before:?}");
    assert_eq!(first.lock().unwrap().len(), 3);
    // Resumed: the sampler replays trials 0 to 2's suggestions (checked against the
    // journal's), then runs trial 2 again with its config, and suggests trial 3.
    let (out, ended) = run(
        sweep_engine::resume(&dir).unwrap(),
        Fake::new(script(false)),
        1,
    );
    assert_eq!(ended.unwrap().failed, 0);
    let after = configs(&out.records);
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(
        after[0], before[2],
        "trial 2 runs again with the config it had"
    );
    assert_eq!(after[1].0, 3);
    assert_eq!(out.summary()["completed"], 4);
}

/// The trials started, as (trial, attempt).
fn starts(log: &Mutex<Vec<Value>>) -> Vec<(u64, u64)> {
    (log.lock().unwrap().iter())
        .filter(|l| l.get("start").is_some())
        .map(|l| (l["start"].as_u64().unwrap(), l["attempt"].as_u64().unwrap()))
        .collect()
}

/// The journal's results, as (trial, time).
fn journal_results(dir: &Path) -> Vec<(u64, f64)> {
    let text = std::fs::read_to_string(dir.join(sweep_engine::journal::FILE)).unwrap();
    (text.lines())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "result")
        .map(|e| (e["trial"].as_u64().unwrap(), e["time"].as_f64().unwrap()))
        .collect()
}

/// A FIFO sweep in `dir` of one trial to epoch 4 that dies (as with kill -9) having read
/// epoch 1 of its trial, with epochs 2 and 3 written.
fn died_with_two_results_unread(dir: &Path) -> Collect {
    let def = definition(&[1], SchedulerKind::Fifo, 4.0, 0);
    let fake = Fake::new(|_, _| (curve(1, 1), Exit::Died(curve(1, 3)[1..].to_vec())));
    died(dir, def, fake)
}

/// A trial that keeps its state wrote results the sweep had not read when it died (kill -9
/// with lines in the trial's pipe): its next attempt goes on after them, so they are taken
/// from its stdout.log on --resume, not lost.
#[test]
fn results_written_but_unread_when_the_sweep_died_are_taken_on_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let out = died_with_two_results_unread(&dir);
    assert_eq!(out.of_type("result").count(), 1);
    // Resumed: epochs 2 and 3 are this run's results before the trial runs again (from its
    // state: epoch 4).
    let fake = Fake::new(|_, _| (curve(1, 4)[3..].to_vec(), Exit::Code(0)));
    let log = fake.log.clone();
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    let times: Vec<&Value> = out.of_type("result").map(|r| &r["time"]).collect();
    assert_eq!(times, [&json!(2.0), &json!(3.0), &json!(4.0)]);
    assert_eq!(starts(&log), [(0, 2)]);
    assert_eq!(
        journal_results(&dir),
        [(0, 1.0), (0, 2.0), (0, 3.0), (0, 4.0)]
    );
    let rows = std::fs::read_to_string(dir.join("trial-0000/result.json")).unwrap();
    assert_eq!(rows.lines().count(), 4, "{rows}");
    assert_eq!(out.summary()["best"]["metric"], 4.0);
}

/// A dead sweep's processes of a trial, left running, are ended before its stdout.log is read
/// back at --resume (what they wrote until then is the dead attempt's output), so no line of
/// theirs is taken as the next attempt's.
#[test]
fn a_dead_sweeps_leftover_processes_are_ended_before_its_output_is_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    died_with_two_results_unread(&dir);
    // Left running: it would write epoch 9 as the trial starts again.
    let mut fake = Fake::new(|_, _| (curve(1, 4)[3..].to_vec(), Exit::Code(0)));
    fake.leftovers.insert(0, curve(1, 9)[8..].to_vec());
    let log = fake.log.clone();
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    let times: Vec<&Value> = out.of_type("result").map(|r| &r["time"]).collect();
    assert_eq!(times, [&json!(2.0), &json!(3.0), &json!(4.0)]);
    let log = log.lock().unwrap();
    let ended_at = log.iter().position(|l| l["ended_leftovers"] == 0);
    let started_at = log.iter().position(|l| l["start"] == 0);
    assert!(
        ended_at.is_some() && ended_at < started_at,
        "leftovers ended before the trial starts again: {log:?}"
    );
}

/// A result taken from a dead sweep's trial output is judged as if it had been read: ASHA
/// stops the trial on it, and it does not run again.
#[test]
fn an_unread_result_that_stops_its_trial_is_acted_on_at_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let def = definition(&[1, 2], SchedulerKind::Asha, 4.0, 0);
    // Trial 0 is good; trial 1 writes a poor epoch 1 and the sweep dies before reading it.
    let fake = first_and_others(
        (curve(10, 4), Exit::Code(0)),
        (Vec::new(), Exit::Died(curve(1, 1))),
    );
    died(&dir, def, fake);
    let fake = Fake::new(|_, _| (curve(1, 4), Exit::Code(0)));
    let log = fake.log.clone();
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    assert_eq!(starts(&log), [], "trial 1 was stopped at epoch 1");
    let stops: Vec<&Value> = (out.of_type("decision"))
        .filter(|d| d["action"] == "stop")
        .collect();
    assert_eq!(stops.len(), 1, "{:?}", out.records);
    assert_eq!(out.events("end"), [(1, json!("stopped"))]);
    assert_eq!(journal_results(&dir).last(), Some(&(1, 1.0)));
}

/// A FIFO put in place of a dead sweep's trial's stdout.log (through a link, which has a
/// length of its own) is not read at --resume, nor does it stop the resume; the trial's next
/// launch fails on it, naming it.
#[test]
fn a_fifo_in_place_of_a_trials_stdout_log_at_resume_is_not_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    died_with_two_results_unread(&dir);
    let stdout = dir.join("trial-0000/stdout.log");
    std::fs::remove_file(&stdout).unwrap();
    let fifo = tmp.path().join("fifo");
    // mkfifo(3), not the command: a child forked while another test holds its sweep's lock
    // would hold it too until it execs (that test's --resume then finds it held).
    let path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink(&fifo, &stdout).unwrap();
    let fake = Fake::new(|_, _| (curve(1, 4), Exit::Code(0)));
    let (out, ended) = run_within(sweep_engine::resume(&dir).unwrap(), fake, options(1));
    assert_eq!(ended.unwrap().failed, 1);
    let why = the_error(&out);
    assert!(
        why.contains("stdout.log") && why.contains("not a regular file"),
        "{why}"
    );
}

/// The message of the one trial end among `out`'s records, an error.
fn the_error(out: &Collect) -> &str {
    let ends: Vec<&Value> = out.trial_records("end").collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0]["status"], "error");
    ends[0]["message"].as_str().unwrap()
}

/// A sweep of two trials (FIFO, to 4) that dies in trial 1, after its epoch 1 was read and with
/// epochs 2 and 3 unread (m = epoch); trial 0 ran to its end first, m = `slope` · epoch.
fn second_died_with_two_results_unread(dir: &Path, slope: i64) {
    let def = definition(&[1, 2], SchedulerKind::Fifo, 4.0, 0);
    let fake = first_and_others(
        (curve(slope, 4), Exit::Code(0)),
        (curve(1, 1), Exit::Died(curve(1, 3)[1..].to_vec())),
    );
    died(dir, def, fake);
}

/// A trial's stdout.log replaced by a link to another trial's at --resume: the other trial's
/// lines are not judged as this one's; its launch fails on the link, naming it.
#[test]
fn a_link_to_another_trials_stdout_log_is_not_read_as_this_trials() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    // Trial 0 completes (m = 10 · epoch); trial 1 reads epoch 1 and the sweep dies.
    second_died_with_two_results_unread(&dir, 10);
    let stdout = dir.join("trial-0001/stdout.log");
    std::fs::remove_file(&stdout).unwrap();
    std::os::unix::fs::symlink("../trial-0000/stdout.log", &stdout).unwrap();
    let fake = Fake::new(|_, _| (curve(1, 4), Exit::Code(0)));
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 1);
    let metrics: Vec<&Value> = out.of_type("result").map(|r| &r["metric"]).collect();
    assert_eq!(
        metrics,
        [] as [&Value; 0],
        "trial 0's lines taken as trial 1's"
    );
    let why = the_error(&out);
    assert!(
        why.contains("trial-0001/stdout.log") && why.contains("a symbolic link"),
        "{why}"
    );
}

/// A dead sweep's trial whose stdout.log was cut (as logrotate's copytruncate does) after its
/// attempt started, then written to: what it wrote since is read from the file's start, not
/// lost because the file is now shorter than where the attempt started.
#[test]
fn results_written_after_the_stdout_log_was_cut_are_taken_on_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let def = definition(&[1], SchedulerKind::Fifo, 4.0, 1);
    // The first attempt prints a long banner and fails; the second reads epoch 1, then the
    // sweep dies.
    let fake = Fake::new(|_, attempt| match attempt {
        1 => (vec!["x".repeat(300)], Exit::Code(3)),
        _ => (curve(1, 1), Exit::Died(Vec::new())),
    });
    died(&dir, def, fake);
    // Cut, then epochs 2 and 3 written.
    let unread = curve(1, 3)[1..].join("\n") + "\n";
    std::fs::write(dir.join("trial-0000/stdout.log"), unread).unwrap();
    let fake = Fake::new(|_, _| (curve(1, 4)[3..].to_vec(), Exit::Code(0)));
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    let times: Vec<&Value> = out.of_type("result").map(|r| &r["time"]).collect();
    assert_eq!(times, [&json!(2.0), &json!(3.0), &json!(4.0)]);
}

/// The sweep in `dir` resumed with `launcher` (one slot) to its end, no trial in error, with a
/// warning about trial 0 that holds each of `warning`'s parts: its results as (time, metric).
fn resumed_to_its_end(dir: &Path, launcher: Fake, warning: &[&str]) -> Vec<(Value, Value)> {
    warnings();
    let (out, ended) = run(sweep_engine::resume(dir).unwrap(), launcher, 1);
    let warned = warnings();
    assert_eq!(ended.unwrap().failed, 0, "{warned:?}");
    let said = |w: &String| w.starts_with("trial 0: ") && warning.iter().all(|p| w.contains(p));
    assert!(warned.iter().any(said), "{warning:?}: {warned:?}");
    out.results()
}

/// A FIFO sweep of one trial to 4 whose results carry no time (a counted training_iteration),
/// with `max_failures`.
fn counted_sweep(max_failures: usize) -> Definition {
    let mut def = definition(&[1], SchedulerKind::Fifo, 4.0, max_failures);
    def.time_attr = "training_iteration".into();
    def
}

/// A counted result: m = `x`, no time.
fn m(x: i64) -> String {
    json!({ "m": x }).to_string()
}

/// A dead sweep's trial whose stdout.log was cut to a length below where its last attempt
/// started, not to nothing: what is left is an earlier attempt's, so a result without a time
/// (counted) read back from the file's start would count that attempt's results again as this
/// one's. Such results are not taken (where they stand in the count is unknown), with a
/// warning; the trial runs again from its checkpoint.
#[test]
fn counted_results_after_a_cut_to_a_non_zero_length_are_not_counted_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let def = counted_sweep(1);
    // The first attempt keeps its state, prints 2 results and fails; the second dies before
    // its 2 results are read.
    let state = dir.join("trial-0000/state");
    let fake = Fake::new(move |_, attempt| match attempt {
        1 => {
            std::fs::write(&state, "2 done").unwrap();
            (vec![m(1), m(2)], Exit::Code(3))
        }
        _ => (Vec::new(), Exit::Died(vec![m(3), m(4)])),
    });
    died(&dir, def, fake);
    // Cut to its first line, the first attempt's result 1.
    let stdout = dir.join("trial-0000/stdout.log");
    std::fs::write(&stdout, m(1) + "\n").unwrap();
    let fake = Fake::new(move |_, _| (vec![m(3), m(4)], Exit::Code(0)));
    let warning = [
        "1 result(s) without \"training_iteration\"",
        "not taken: the file was cut",
    ];
    let results = resumed_to_its_end(&dir, fake, &warning);
    assert_eq!(
        results,
        [(json!(3.0), json!(3.0)), (json!(4.0), json!(4.0))]
    );
}

/// Another regular file put in place of a dead sweep's trial's stdout.log (renamed over it, as
/// logrotate's default `create` leaves a new file where the trial's was) is not read back as the
/// trial's output at --resume: the file is not the one the attempt started with (its device and
/// inode), a warning says so, and the trial runs again.
#[test]
fn another_file_in_place_of_a_trials_stdout_log_is_not_read_as_its_output() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    died_with_two_results_unread(&dir);
    // As long as the trial's file, with other results after where its attempt started.
    let stdout = dir.join("trial-0000/stdout.log");
    let kept = std::fs::read(&stdout).unwrap().len() - (curve(1, 3)[1..].join("\n").len() + 1);
    let other = dir.join("trial-0000/other.log");
    let text = "x".repeat(kept - 1) + "\n" + &curve(25, 3)[1..].join("\n") + "\n";
    std::fs::write(&other, text).unwrap();
    std::fs::rename(&other, &stdout).unwrap();
    let fake = Fake::new(|_, _| (curve(1, 4)[3..].to_vec(), Exit::Code(0)));
    let results = resumed_to_its_end(&dir, fake, &["trial-0000/stdout.log is not the file"]);
    assert_eq!(results, [(json!(4.0), json!(4.0))]);
}

/// A dead sweep's directory copied elsewhere (to resume on another machine) holds the same
/// files under other inodes: its trials' unread results are read back all the same.
#[test]
fn a_copied_sweep_directory_reads_back_its_unread_results() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    died_with_two_results_unread(&dir);
    let copy = tmp.path().join("copy");
    copy_tree(&dir, &copy);
    let fake = Fake::new(|_, _| (curve(1, 4)[3..].to_vec(), Exit::Code(0)));
    let (out, ended) = run(sweep_engine::resume(&copy).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    let times: Vec<Value> = out.results().into_iter().map(|r| r.0).collect();
    assert_eq!(times, [json!(2.0), json!(3.0), json!(4.0)]);
}

/// Copies directory `from` to `to` (as `cp -r`: new files, new inodes).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (f, t) = (e.path(), to.join(e.file_name()));
        match e.file_type().unwrap().is_dir() {
            true => copy_tree(&f, &t),
            false => drop(std::fs::copy(&f, &t).unwrap()),
        }
    }
}

/// A dead sweep's directory copied (or put back from a tar archive), whose copied trial
/// directory was given the inode number of the original's (numbers of deleted files are used
/// again): it is still a copy, made later than the original (its birth time, where the
/// filesystem keeps one), so its stdout.log, another inode, is read back all the same.
#[test]
fn a_copy_whose_trial_directory_got_the_originals_inode_number_reads_back_its_results() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    died_with_two_results_unread(&dir);
    let copy = tmp.path().join("copy");
    copy_tree(&dir, &copy);
    let m = std::fs::metadata(copy.join("trial-0000")).unwrap();
    assert!(
        m.created().is_ok(),
        "this test needs a filesystem with birth times"
    );
    // The original's directory had the number the copy's has now.
    edit_journal(&copy, |v| {
        if v["event"] == "start" {
            v["stdout_file"]["dir"] = json!([m.dev(), m.ino()]);
        }
    });
    let fake = Fake::new(|_, _| (curve(1, 4)[3..].to_vec(), Exit::Code(0)));
    let (out, ended) = run(sweep_engine::resume(&copy).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    let times: Vec<Value> = out.results().into_iter().map(|r| r.0).collect();
    assert_eq!(times, [json!(2.0), json!(3.0), json!(4.0)]);
}

/// A journal written before stdout.log (its start entries without `stdout_from`,
/// `counted_from` and `stdout_file`) resumes as it did: the unfinished trial runs again,
/// nothing is read back.
#[test]
fn a_journal_without_stdout_offsets_resumes_as_before() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    died_with_two_results_unread(&dir);
    edit_journal(&dir, |v| {
        if v["event"] == "start" {
            let e = v.as_object_mut().unwrap();
            assert!(e.remove("stdout_from").is_some() && e.remove("counted_from").is_some());
            assert!(e.remove("stdout_file").is_some());
            assert_eq!(e.len(), 4, "event, trial, attempt, slot: {e:?}");
        }
    });
    // Run again without state: its epochs 2 to 4 (m = 2 · epoch) are this run's results.
    let fake = Fake::new(|_, _| (curve(2, 4), Exit::Code(0)));
    let log = fake.log.clone();
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    assert_eq!(ended.unwrap().failed, 0);
    assert_eq!(starts(&log), [(0, 2)]);
    assert_eq!(
        out.results(),
        [
            (json!(2.0), json!(4.0)),
            (json!(3.0), json!(6.0)),
            (json!(4.0), json!(8.0))
        ]
    );
    assert_eq!(out.summary()["completed"], 1);
}

/// A start entry whose `counted_from` was edited below zero is refused at --resume, as any
/// journalled step this sweep would not have taken (its unread counted results would get
/// negative times).
#[test]
fn resume_refuses_a_start_counted_from_below_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    let def = counted_sweep(0);
    let fake = Fake::new(move |_, _| (vec![m(1)], Exit::Died(vec![m(2), m(3)])));
    died(&dir, def, fake);
    edit_journal(&dir, |v| {
        if v["event"] == "start" {
            v["counted_from"] = json!(-10.0);
        }
    });
    let e = resume_refused(&dir);
    assert!(matches!(e, Error::Journal(_)), "{e:?}");
    assert!(e.describe().contains("counted_from"), "{e}");
}

/// A dead sweep's trial directories swapped (renamed into each other's places) before
/// --resume: the unfinished trial's stdout.log is now another trial's file, the journal's by
/// its device and inode, so it is not read back as the unfinished trial's output (that would
/// judge trial 1 by trial 0's curve); a warning names the trial and the file, and the trial
/// runs again.
#[test]
fn another_trials_stdout_log_in_place_of_a_trials_is_not_read_as_its_output() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    // Trial 0 runs to its end (m = 5 · epoch); trial 1 dies with two results unread.
    second_died_with_two_results_unread(&dir, 5);
    let (a, b, swap) = (
        dir.join("trial-0000"),
        dir.join("trial-0001"),
        dir.join("swap"),
    );
    std::fs::rename(&a, &swap).unwrap();
    std::fs::rename(&b, &a).unwrap();
    std::fs::rename(&swap, &b).unwrap();
    warnings();
    let fake = Fake::new(|_, _| (curve(1, 4)[3..].to_vec(), Exit::Code(0)));
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    let warned = warnings();
    assert_eq!(ended.unwrap().failed, 0, "{warned:?}");
    assert_eq!(out.results(), [(json!(4.0), json!(4.0))], "{warned:?}");
    let said = |w: &String| w.starts_with("trial 1: ") && w.contains("trial-0001/stdout.log");
    assert!(warned.iter().any(said), "{warned:?}");
}

/// A dead sweep's trial whose stdout.log was made another name of the sweep's journal (a hard
/// link: the same file) before --resume: nothing of the journal is read back as the trial's
/// output, and the trial's next attempt does not write into the journal through it (a resume
/// after it found lines there that are no journal entries); the attempt fails, naming the file.
#[test]
fn a_trials_stdout_log_linked_to_the_journal_is_neither_read_nor_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    died_with_two_results_unread(&dir);
    let stdout = dir.join("trial-0000/stdout.log");
    std::fs::remove_file(&stdout).unwrap();
    std::fs::hard_link(dir.join("journal.jsonl"), &stdout).unwrap();
    warnings();
    let fake = Fake::new(|_, _| (curve(1, 4)[3..].to_vec(), Exit::Code(0)));
    let (out, ended) = run(sweep_engine::resume(&dir).unwrap(), fake, 1);
    let warned = warnings();
    assert_eq!(ended.unwrap().failed, 1, "{warned:?}");
    assert!(out.results().is_empty(), "{:?}", out.results());
    let message = the_error(&out);
    assert!(
        message.contains("trial-0000/stdout.log") && message.contains("other names"),
        "{message}"
    );
    let said = |w: &String| w.starts_with("trial 0: ") && w.contains("trial-0000/stdout.log");
    assert!(warned.iter().any(said), "{warned:?}");
    sweep_engine::resume(&dir).unwrap();
}

/// A start entry whose attempt was edited to more than the journal has entries (the largest
/// number there is, so that the next attempt's number wrapped round to 0) is refused at
/// --resume: no sweep writes it.
#[test]
fn resume_refuses_a_start_of_an_attempt_no_sweep_made() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = out_dir(&tmp);
    died_with_two_results_unread(&dir);
    edit_journal(&dir, |v| {
        if v["event"] == "start" {
            v["attempt"] = json!(u64::MAX);
        }
    });
    let e = resume_refused(&dir);
    assert!(matches!(e, Error::Journal(_)), "{e:?}");
    assert!(e.describe().contains("attempt"), "{e}");
}
