//! The engine on its own, against a stand-in [`Launcher`] whose "processes" are threads that
//! send scripted lines and exits: the order of records, the schedulers' decisions acted on
//! (a stop signalled), retries, a lost allocation stopping the sweep, `--resume`'s replay, and
//! an output that refuses a record; the schedulers' behaviour over whole sweeps in
//! [`schedulers`], what trials print (lines that cannot be used, non-finite metrics, a retry's
//! results) in [`printed`], what a dead sweep's trials wrote and it had not read, read back by
//! `--resume`, in [`readback`]. No process runs, so each sweep takes milliseconds.

mod printed;
mod readback;
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

/// Where attempt `.1` of trial `.0` waits in its output (a paced trial's).
type Holds = dyn Fn(usize, usize) -> Vec<Hold> + Send + Sync;

/// A wait in a paced attempt's output, so that the sweep acts on its lines in an order of the
/// test's choosing however late it reads them: after its `after`-th line the attempt waits
/// until `until` happened (at most [`HOLD_MAX`]). A stop (SIGTERM) meanwhile is acted on only
/// then, as by a process slow to stop; a kill (SIGKILL) ends it at once.
#[derive(Debug, Clone, Copy)]
struct Hold {
    after: usize,
    until: Until,
}

/// What a [`Hold`] waits for, as the stand-in's log shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Until {
    /// Trial `.0` was signalled (a stop or a kill, of any attempt).
    Signalled(usize),
    /// Attempt `.1` of trial `.0` was started.
    Started(usize, usize),
}

/// The longest a [`Hold`] waits: a sweep that never does what it waits for goes on, and the
/// test's assertions say what went wrong.
const HOLD_MAX: Duration = Duration::from_secs(30);

impl Hold {
    fn done(&self, log: &Mutex<Vec<Value>>) -> bool {
        (log.lock().unwrap().iter()).any(|l| match self.until {
            Until::Signalled(trial) => l.get("signal").is_some() && l["trial"] == trial,
            Until::Started(trial, attempt) => l["start"] == trial && l["attempt"] == attempt,
        })
    }

    /// Waits until the hold is done (or for [`HOLD_MAX`]): the stop heard meanwhile, or a kill
    /// at once.
    fn wait(&self, log: &Mutex<Vec<Value>>, signals: &Receiver<Signal>) -> Option<Signal> {
        let deadline = std::time::Instant::now() + HOLD_MAX;
        let mut heard = None;
        while !self.done(log) && std::time::Instant::now() < deadline {
            match signals.recv_timeout(Duration::from_millis(1)) {
                Ok(Signal::Kill) => return Some(Signal::Kill),
                Ok(Signal::Stop) => heard = Some(Signal::Stop),
                Err(_) => {}
            }
        }
        heard
    }
}

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
    /// Where each paced attempt waits.
    holds: Arc<Holds>,
    /// Each attempt's signals, by pid.
    signals: BTreeMap<i32, Sender<Signal>>,
    /// The trial of each attempt whose exit the engine has not taken yet (by pid).
    running: BTreeMap<i32, usize>,
    /// The trial of every attempt started (by pid).
    trial_of: BTreeMap<i32, usize>,
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
            holds: Arc::new(|_, _| Vec::new()),
            signals: BTreeMap::new(),
            running: BTreeMap::new(),
            trial_of: BTreeMap::new(),
            leftovers: BTreeMap::new(),
        }
    }

    /// Trials that print a line each `pace` and, asked to stop, do as `on_stop` says.
    fn paced(mut self, pace: Duration, on_stop: OnStop) -> Self {
        self.pace = Some(pace);
        self.on_stop = on_stop;
        self
    }

    /// Paced attempts that wait where `holds` says.
    fn holding(
        mut self,
        holds: impl Fn(usize, usize) -> Vec<Hold> + Send + Sync + 'static,
    ) -> Self {
        self.holds = Arc::new(holds);
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

/// How a paced attempt runs: its lines, a line each `pace` (and waits where `holds` say),
/// until a stop (SIGTERM) or, as `on_stop` says, a kill; `None`: it was not signalled and
/// exits as its script says.
fn run_paced(
    lines: Vec<String>,
    (pace, on_stop): (Duration, OnStop),
    (holds, log): (&[Hold], &Mutex<Vec<Value>>),
    signals: &Receiver<Signal>,
    mut send: impl FnMut(String),
) -> Option<ExitStatus> {
    let mut stopped = false;
    let count = lines.len();
    let mut lines = lines.into_iter();
    for sent in 0..=count {
        let mut heard: Vec<Signal> = (holds.iter().filter(|h| h.after == sent))
            .filter_map(|h| h.wait(log, signals))
            .collect();
        if sent < count {
            match signals.recv_timeout(pace) {
                Ok(signal) => heard.push(signal),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
            }
        }
        for signal in heard {
            match signal {
                Signal::Kill => return Some(ExitStatus::from_raw(9)),
                Signal::Stop if on_stop == OnStop::Exit => return Some(ExitStatus::from_raw(15)),
                Signal::Stop => stopped = true,
            }
        }
        let Some(line) = lines.next() else {
            break;
        };
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
        self.trial_of.insert(self.next_pid, trial);
        let (signal_tx, signals) = std::sync::mpsc::channel();
        self.signals.insert(self.next_pid, signal_tx);
        let (pace, on_stop) = (self.pace, self.on_stop);
        let (holds, log) = ((self.holds)(trial, attempt), self.log.clone());
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
                Some(pace) => run_paced(lines, (pace, on_stop), (&holds, &log), &signals, send),
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
        let trial = self.trial_of.get(&pid);
        self.log
            .lock()
            .unwrap()
            .push(json!({"signal": pid - (1 << 30), "kind": signal, "trial": trial}));
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

/// A counted result: m = `x`, no time.
fn m(x: i64) -> String {
    json!({ "m": x }).to_string()
}
