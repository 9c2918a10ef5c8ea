//! The sweep's loop: trials started into free slots, their results fed to the scheduler in the
//! order they arrive, stops sent as SIGTERM then SIGKILL to the trial's process group, failures
//! retried, every step journaled before it is printed.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cli_common::{JsonlOut, Outcome, interrupt};
use records::{BestTrial, Decision, SweepSummary, TrialRecord, TrialResult};
use serde_json::{Map, Value};

use crate::files::TrialFiles;
use crate::journal::{Copied, Definition, Entry, Journal, SchedulerKind, SearchKind};
use crate::procs::{self, Msg};
use crate::template::{Bindings, Template};
use search::asha::{Action, Asha};
use search::bohb::Bohb;
use search::hyperband::{HyperBand, HyperBandSettings};
use search::median::Median;
use search::pbt::{self, Pbt};
use search::space::{Config, Space, TpeSpace};
use search::tpe::{Observed, Tpe};
use search::{Effects, Scheduler, TrialState};
use tensorboard::SessionStatus;

/// How this run of the sweep executes (may change between a sweep and its resumption).
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub slots: usize,
    /// CUDA_VISIBLE_DEVICES of each slot (None: left as inherited).
    pub slot_gpus: Vec<Option<String>>,
    /// The CPUs each slot's trials may run on, also their OMP_NUM_THREADS (None: left as
    /// inherited).
    pub slot_cpus: Vec<Option<Vec<usize>>>,
    pub stop_grace: Duration,
    pub report_every: Duration,
    pub quiet: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Pending,
    Running,
    /// Yielded its slot to a waiting trial (the median rule); runs again later.
    Paused,
    Completed,
    Stopped,
    Error,
}

impl Status {
    fn name(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Paused => "paused",
            Status::Completed => "completed",
            Status::Stopped => "stopped",
            Status::Error => "error",
        }
    }

    fn ended(self) -> bool {
        matches!(self, Status::Completed | Status::Stopped | Status::Error)
    }

    /// What the schedulers that act on other trials see.
    fn state(self) -> TrialState {
        match self {
            Status::Pending => TrialState::Pending,
            Status::Running => TrialState::Running,
            Status::Paused => TrialState::Paused,
            Status::Completed | Status::Stopped | Status::Error => TrialState::Ended,
        }
    }
}

/// The trials' states as the scheduler sees them.
fn states(trials: &[Trial]) -> impl Fn(usize) -> TrialState + '_ {
    |i| trials[i].status.state()
}

#[derive(Debug)]
struct Proc {
    pid: i32,
    slot: usize,
    attempt: usize,
    term_sent: Option<Instant>,
    kill_sent: bool,
    /// The time attribute of this attempt's last result: one that goes backwards within an
    /// attempt is reported (a restarted attempt repeating its predecessor's is not).
    last_time: Option<f64>,
}

#[derive(Debug)]
struct Trial {
    id: usize,
    config: Config,
    /// Whether `config` is chosen (TPE chooses it when the trial first starts).
    chosen: bool,
    dir: PathBuf,
    status: Status,
    attempts: usize,
    failures: usize,
    /// (time, metric) of every result (its length is Ray's training_iteration), for the plot.
    history: Vec<(f64, f64)>,
    last: Option<Map<String, Value>>,
    stopped_at: Option<f64>,
    message: Option<String>,
    proc: Option<Proc>,
    files: Option<TrialFiles>,
    first_start: Option<Instant>,
    /// Results at or before this time are repeats of a restarted command (the last result's
    /// time; none after a copy, whose command goes on from the copied trial's checkpoint).
    floor: Option<f64>,
    /// Population-based training: the trial whose directory this one takes before it runs
    /// again, the copies made so far and the last trial copied.
    copy_from: Option<usize>,
    copies: usize,
    copied_from: Option<usize>,
}

impl Trial {
    fn last_point(&self) -> Option<(f64, f64)> {
        self.history.last().copied()
    }

    /// Takes a result into the trial's history.
    fn push_result(&mut self, time: f64, metric: f64, record: &Map<String, Value>) {
        self.history.push((time, metric));
        self.floor = Some(time);
        self.last = Some(record.clone());
    }

    /// A copy decided (population-based training): the new config now, the directory when
    /// the trial runs again.
    fn take_copy(&mut self, e: &pbt::Exploit) {
        self.config = e.config.clone();
        self.copy_from = Some(e.from);
        self.copied_from = Some(e.from);
        self.copies += 1;
        self.floor = None;
    }

    /// The status a stop verdict gives (completed at max_t, else stopped at `time`).
    fn stopped(&mut self, complete: bool, time: f64) -> Status {
        self.stopped_at = (!complete).then_some(time);
        if complete {
            Status::Completed
        } else {
            Status::Stopped
        }
    }

    /// [`Trial::stopped`] at the trial's last result (a trial the scheduler stops, or one
    /// stopped with it).
    fn stopped_at_last(&mut self, complete: bool) -> Status {
        let time = self.last_point().map_or(0.0, |p| p.0);
        self.stopped(complete, time)
    }
}

/// The sweep in progress.
pub struct Engine<'a> {
    def: Definition,
    template: Template,
    out_dir: PathBuf,
    trials: Vec<Trial>,
    scheduler: Scheduler,
    /// TPE's view of the space and its sampler (--search tpe).
    tpe: Option<(TpeSpace, Tpe)>,
    /// BOHB's config generator (--search bohb).
    bohb: Option<Bohb>,
    /// Trials made so far (the scheduler knows them): all but BOHB's at the start.
    made: usize,
    journal: Journal,
    queue: VecDeque<usize>,
    slots: Vec<Option<usize>>,
    opts: RunOptions,
    out: &'a mut JsonlOut,
    tx: mpsc::Sender<Msg>,
    rx: mpsc::Receiver<Msg>,
    started: Instant,
    last_report: Option<Instant>,
    dirty: bool,
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("out_dir", &self.out_dir)
            .field("trials", &self.trials.len())
            .finish()
    }
}

/// The directory of trial `i`.
pub fn trial_dir(out_dir: &Path, i: usize) -> PathBuf {
    out_dir.join(format!("trial-{i:04}"))
}

impl<'a> Engine<'a> {
    /// A sweep from its definition; `replay` holds the journal entries of an interrupted run.
    pub fn new(
        def: Definition,
        template: Template,
        out_dir: PathBuf,
        journal: Journal,
        replay: &[Entry],
        opts: RunOptions,
        out: &'a mut JsonlOut,
    ) -> Result<Self> {
        let space = Space::parse(&def.space.to_string())?;
        let mut scheduler = match def.scheduler {
            SchedulerKind::Asha => Scheduler::Asha(Box::new(Asha::new(def.asha, def.seed)?)),
            SchedulerKind::Fifo => Scheduler::Fifo {
                max_t: def.asha.max_t,
            },
            SchedulerKind::Hyperband => {
                let s = HyperBandSettings {
                    max_t: def.asha.max_t,
                    reduction_factor: def.asha.reduction_factor,
                    mode: def.asha.mode,
                };
                let h = match def.search {
                    SearchKind::Bohb => HyperBand::for_bohb(s)?,
                    _ => HyperBand::new(s)?,
                };
                Scheduler::HyperBand(Box::new(h))
            }
            SchedulerKind::Pbt => Scheduler::Pbt {
                pbt: Box::new(Pbt::new(
                    def.pbt
                        .context("a pbt sweep's journal without its settings")?,
                    pbt::mutations(&space),
                    def.seed,
                )?),
                max_t: def.asha.max_t,
            },
            SchedulerKind::Median => Scheduler::Median {
                rule: Box::new(Median::new(
                    def.median
                        .context("a median sweep's journal without its settings")?,
                )),
                max_t: def.asha.max_t,
            },
        };
        let tpe = match def.search {
            SearchKind::Random | SearchKind::Bohb => None,
            SearchKind::Tpe => {
                let space = space.tpe()?;
                let tpe = Tpe::new(space.dists().to_vec(), def.asha.mode, def.seed);
                Some((space, tpe))
            }
        };
        let bohb = match def.search {
            SearchKind::Bohb => Some(Bohb::new(space.bohb()?, def.seed)),
            _ => None,
        };
        let count = match def.search {
            SearchKind::Random => def.trials.len(),
            SearchKind::Tpe | SearchKind::Bohb => def.samples,
        };
        let trials: Vec<Trial> = (0..count)
            .map(|i| Trial {
                id: i,
                config: def.trials.get(i).cloned().unwrap_or_default(),
                chosen: def.search == SearchKind::Random,
                dir: trial_dir(&out_dir, i),
                status: Status::Pending,
                attempts: 0,
                failures: 0,
                history: Vec::new(),
                last: None,
                stopped_at: None,
                message: None,
                proc: None,
                files: None,
                first_start: None,
                floor: None,
                copy_from: None,
                copies: 0,
                copied_from: None,
            })
            .collect();
        // A searcher's trials (BOHB's) are made one at a time, as Ray makes them.
        let made = if bohb.is_some() { 0 } else { trials.len() };
        for t in &trials[..made] {
            scheduler.add(t.id, &t.config);
        }
        let (tx, rx) = mpsc::channel();
        let slots = vec![None; opts.slots];
        let mut e = Engine {
            def,
            template,
            out_dir,
            trials,
            scheduler,
            tpe,
            bohb,
            made,
            journal,
            queue: VecDeque::new(),
            slots,
            opts,
            out,
            tx,
            rx,
            started: Instant::now(),
            last_report: None,
            dirty: true,
        };
        e.replay(replay)?;
        Ok(e)
    }

    /// Rebuilds the trials' state and the scheduler's rungs from the journal, in its order.
    ///
    /// Kept in one piece: one match over the journal's entry kinds, in the order they were
    /// written.
    fn replay(&mut self, entries: &[Entry]) -> Result<()> {
        let mut decided: Vec<Option<Status>> = vec![None; self.trials.len()];
        for e in entries {
            if let Some(trial) = e.trial()
                && trial >= self.trials.len()
            {
                anyhow::bail!(
                    "the journal names trial {trial}, but this sweep has {} trials: was it written \
                     by another sweep?",
                    self.trials.len()
                );
            }
            match e {
                Entry::Sweep { .. } => {}
                Entry::Suggest { trial, config, .. } if self.bohb.is_some() => {
                    // Made as it was: the same results, the same draws.
                    self.make(*trial, Some(config))?;
                }
                Entry::Suggest { trial, config, .. } => {
                    // The sampler's stream advances as it did: the same history, the same draws.
                    let again = self.suggest(*trial)?;
                    if again != *config {
                        anyhow::bail!(
                            "the journal's config for trial {trial} differs from this sweep's TPE suggestion: was it written by another version?"
                        );
                    }
                    let t = &mut self.trials[*trial];
                    t.config = again;
                    t.chosen = true;
                }
                Entry::Start { trial, attempt, .. } => {
                    let t = &mut self.trials[*trial];
                    t.attempts = *attempt;
                    t.status = Status::Running;
                    t.copy_from = None; // copied before the start was journalled
                }
                Entry::Result {
                    trial,
                    time,
                    metric,
                    record,
                    stop,
                    pause,
                    waiting,
                    exploit,
                    save,
                } => {
                    self.trials[*trial].push_result(*time, *metric, record);
                    let (v, effects) = self.scheduler.on_result(
                        *trial,
                        *time,
                        *metric,
                        *waiting,
                        &states(&self.trials),
                    );
                    self.replay_stops(&effects, &mut decided);
                    self.observe(*trial, v.action, &effects, *metric);
                    let copied = effects.exploit.as_ref().map(|e| Copied {
                        from: e.from,
                        config: e.config.clone(),
                    });
                    if copied != *exploit || effects.save != *save {
                        anyhow::bail!(
                            "the journal's copy or save for trial {trial} at {time} differs from this sweep's population-based training: was it written by another version?"
                        );
                    }
                    if let Some(e) = &effects.exploit {
                        self.trials[*trial].take_copy(e);
                    }
                    let t = &mut self.trials[*trial];
                    if (v.action == Action::Stop) != *stop || (v.action == Action::Pause) != *pause
                    {
                        anyhow::bail!(
                            "the journal's decision for trial {trial} at {time} differs from this sweep's scheduler: was it written by another version?"
                        );
                    }
                    if v.action == Action::Stop {
                        decided[*trial] = Some(t.stopped(v.complete, *time));
                    }
                    if v.action == Action::Pause {
                        t.status = Status::Paused;
                    }
                }
                Entry::Failure { trial, .. } => self.trials[*trial].failures += 1,
                Entry::End {
                    trial,
                    status,
                    message,
                } => {
                    let t = &mut self.trials[*trial];
                    t.status = match status.as_str() {
                        "completed" => Status::Completed,
                        "stopped" => Status::Stopped,
                        _ => Status::Error,
                    };
                    t.message = message.clone();
                    let last = t.last_point();
                    let effects = if t.status == Status::Error {
                        self.scheduler.on_error(*trial, &states(&self.trials))
                    } else {
                        (self.scheduler).on_complete(*trial, last, &states(&self.trials))
                    };
                    decided[*trial] = None;
                    self.replay_stops(&effects, &mut decided);
                }
                Entry::Unstick => {
                    let effects = self.scheduler.unstick(&states(&self.trials));
                    self.replay_stops(&effects, &mut decided);
                }
            }
        }
        // Decided but killed before the end was written: end them now.
        for (i, d) in decided.into_iter().enumerate() {
            if let Some(status) = d {
                self.finish(i, status, None)?;
            }
        }
        // Unfinished trials first (they were running), then the ones never started.
        let unfinished = self
            .trials
            .iter()
            .filter(|t| t.status == Status::Running)
            .map(|t| t.id);
        let pending = self.trials[..self.made]
            .iter()
            .filter(|t| t.status == Status::Pending)
            .map(|t| t.id);
        self.queue = unfinished.chain(pending).collect();
        for &i in &self.queue {
            self.trials[i].status = Status::Pending;
        }
        Ok(())
    }

    /// Trials a replayed decision stopped: ended when the journal says so, or at the end of
    /// the replay if it was cut before.
    fn replay_stops(&mut self, effects: &Effects, decided: &mut [Option<Status>]) {
        for &x in &effects.stop {
            decided[x] = Some(self.trials[x].stopped_at_last(effects.completes(x)));
        }
    }

    /// The trial to start in a free slot: the scheduler's choice (HyperBand's, PBT's), else the first
    /// pending one, else (median) a paused one in trial order, once its process has exited
    /// (it must not run twice at once).
    fn next_trial(&mut self) -> Result<Option<usize>> {
        self.make_pending()?;
        let chosen = self.scheduler.choose(&states(&self.trials));
        if let Some(i) = chosen.filter(|&i| self.trials[i].proc.is_none()) {
            self.queue.retain(|&q| q != i);
            return Ok(Some(i));
        }
        if let Some(i) = self.queue.pop_front() {
            return Ok(Some(i));
        }
        if self.scheduler.chooses_paused() {
            return Ok(None);
        }
        Ok((self.trials.iter())
            .find(|t| t.status == Status::Paused && t.proc.is_none())
            .map(|t| t.id))
    }

    /// BOHB: while trials remain to be made and none made is pending, the next is made: its
    /// config suggested (journalled) and the scheduler told (Ray keeps one searcher trial
    /// pending).
    fn make_pending(&mut self) -> Result<()> {
        if self.bohb.is_none() || self.made == self.trials.len() {
            return Ok(());
        }
        let pending = (self.queue.iter()).any(|&i| self.trials[i].status == Status::Pending);
        if !pending {
            self.make(self.made, None)?;
            self.queue.push_back(self.made - 1);
        }
        Ok(())
    }

    /// Makes BOHB's trial `i` (the next): its config suggested (checked against the journal's
    /// when replayed, else journalled), and the scheduler told.
    fn make(&mut self, i: usize, journalled: Option<&Config>) -> Result<()> {
        let bohb = self
            .bohb
            .as_mut()
            .context("a BOHB trial in a sweep without --search bohb")?;
        if i != self.made {
            anyhow::bail!(
                "the journal makes trial {i} where this sweep makes trial {}",
                self.made
            );
        }
        let (config, model) = bohb.suggest();
        match journalled {
            Some(c) if *c != config => anyhow::bail!(
                "the journal's config for trial {i} differs from this sweep's BOHB suggestion: was it written by another version?"
            ),
            Some(_) => {}
            None => self.journal.append(&Entry::Suggest {
                trial: i,
                config: config.clone(),
                model,
            })?,
        }
        let t = &mut self.trials[i];
        t.config = config;
        t.chosen = true;
        self.scheduler.add(i, &t.config);
        self.made += 1;
        Ok(())
    }

    /// BOHB's model takes a result at a milestone (unless the trial stops there): its loss
    /// is the metric, negated when maximised (Ray's TuneBOHB).
    fn observe(&mut self, i: usize, action: Action, effects: &Effects, metric: f64) {
        if let (Some(bohb), Some(budget)) = (&mut self.bohb, effects.budget)
            && action != Action::Stop
        {
            let loss = -self.def.asha.mode.op() * metric;
            bohb.observe(&self.trials[i].config, budget, loss);
        }
    }

    /// Runs every trial to its end; the summary record is printed last.
    pub fn run(mut self) -> Result<Outcome> {
        let interrupted = loop {
            if interrupt::requested() {
                break true;
            }
            while let Some(slot) = self.slots.iter().position(Option::is_none) {
                let Some(i) = self.next_trial()? else {
                    break;
                };
                self.start(i, slot)?;
            }
            self.make_pending()?;
            if self.slots.iter().all(Option::is_none) && self.queue.is_empty() {
                if self.trials.iter().any(|t| t.status == Status::Paused) {
                    self.unstick()?;
                    continue;
                }
                break false;
            }
            match self.rx.recv_timeout(Duration::from_millis(100)) {
                Ok(msg) => self.handle(msg)?,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    unreachable!("the engine holds a sender")
                }
            }
            self.enforce_deadlines();
            self.report(false);
        };
        if interrupted {
            self.shut_down();
        }
        self.report(true);
        self.write_plot();
        let summary = self.summary();
        self.write_results(&summary);
        let failed = summary.error;
        self.out.emit(&summary)?;
        if interrupted {
            return Err(cli_common::Interrupted.into());
        }
        Ok(Outcome::from_failures(failed))
    }

    /// TPE's config for trial `i`, from every trial chosen so far: finished ones by their last
    /// metric (an error, no result or a NaN leaves a trial out, as Optuna leaves out failed
    /// trials), the others as running.
    fn suggest(&mut self, i: usize) -> Result<Config> {
        let Some((space, tpe)) = &mut self.tpe else {
            anyhow::bail!("trial {i}: a suggestion in a sweep without --search tpe");
        };
        let mut history = Vec::new();
        for t in self.trials.iter().filter(|t| t.chosen && t.id != i) {
            let value = match t.status {
                Status::Error => continue,
                Status::Completed | Status::Stopped => match t.last_point() {
                    Some((_, m)) if !m.is_nan() => Some(m),
                    _ => continue,
                },
                Status::Running | Status::Pending | Status::Paused => None,
            };
            let params = space
                .values(&t.config)
                .with_context(|| format!("trial {}'s config is not of this space", t.id))?;
            history.push(Observed { params, value });
        }
        Ok(space.config(&tpe.suggest(&history)))
    }

    fn start(&mut self, i: usize, slot: usize) -> Result<()> {
        if !self.trials[i].chosen {
            let config = self.suggest(i)?;
            self.journal.append(&Entry::Suggest {
                trial: i,
                config: config.clone(),
                model: false,
            })?;
            let t = &mut self.trials[i];
            t.config = config;
            t.chosen = true;
        }
        if let Some(from) = self.trials[i].copy_from {
            // Its own process has exited: the copied trial's save kept when the copy was
            // decided (Ray's checkpoint to exploit), else (no save) its directory as it is now.
            let kept = self.kept_dir(i);
            let src = if kept.exists() {
                kept.clone()
            } else {
                self.trials[from].dir.clone()
            };
            if let Err(e) = crate::files::copy_checkpoint(&src, &self.trials[i].dir) {
                // A failed attempt: a retry copies again.
                let message = format!("copying trial {from}'s checkpoint: {e:#}");
                return self.failed(i, message);
            }
            if let Err(e) = crate::files::remove(&kept) {
                self.note(&format!("warning: {e:#}"));
            }
            self.trials[i].copy_from = None;
        }
        let attempt = self.trials[i].attempts + 1;
        let t = &mut self.trials[i];
        let resumed = t.status == Status::Paused;
        t.attempts = attempt;
        t.status = Status::Running;
        t.first_start.get_or_insert_with(Instant::now);
        self.journal.append(&Entry::Start {
            trial: i,
            attempt,
            slot,
        })?;
        let launched = self.launch(i, slot, attempt);
        let t = &mut self.trials[i];
        let record = TrialRecord {
            event: match (attempt, resumed) {
                (1, _) => "start",
                (_, true) => "resume",
                _ => "retry",
            }
            .into(),
            trial: i,
            config: t.config.clone(),
            dir: t.dir.clone(),
            attempt,
            slot: Some(slot),
            status: None,
            stopped_at: None,
            last: None,
            message: if attempt > 1 && !resumed {
                t.message.clone()
            } else {
                None
            },
        };
        self.out.emit(&record)?;
        self.dirty = true;
        match launched {
            Ok((pid, files)) => {
                let t = &mut self.trials[i];
                t.files = Some(files);
                t.proc = Some(Proc {
                    pid,
                    slot,
                    attempt,
                    term_sent: None,
                    kill_sent: false,
                    last_time: None,
                });
                self.slots[slot] = Some(i);
                Ok(())
            }
            Err(e) => self.failed(i, format!("{e:#}")),
        }
    }

    fn launch(&mut self, i: usize, slot: usize, attempt: usize) -> Result<(i32, TrialFiles)> {
        let t = &self.trials[i];
        let files = TrialFiles::open(&t.dir, i, attempt, &t.config, t.copies)?;
        let stderr_path = t.dir.join("stderr.log");
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&stderr_path)
            .with_context(|| format!("opening {}", stderr_path.display()))?;
        let args = self.template.expand(&Bindings {
            config: &t.config,
            trial: i,
            trial_dir: &t.dir,
            slot,
        });
        let dir = t.dir.display().to_string();
        let mut env = vec![
            ("SWEEP_TRIAL", i.to_string()),
            ("SWEEP_TRIAL_DIR", dir.clone()),
            ("SWEEP_SLOT", slot.to_string()),
        ];
        if let Some(g) = &self.opts.slot_gpus[slot] {
            env.push(("CUDA_VISIBLE_DEVICES", g.clone()));
        }
        let cpus = self.opts.slot_cpus[slot].as_deref();
        if let Some(c) = cpus {
            env.push(("OMP_NUM_THREADS", c.len().to_string()));
        }
        // A sweep killed with SIGKILL left this trial's background processes running in its
        // directory: end them before the trial runs there again.
        let left = procs::end_leftovers(&dir);
        if !left.is_empty() {
            self.note(&format!(
                "warning: trial {i}: {} process(es) of an earlier run of this trial were still running in {} (pids {left:?}): ended them",
                left.len(),
                t.dir.display()
            ));
        }
        let pid = procs::spawn(&args, &env, cpus, stderr, i, attempt, self.tx.clone())
            .with_context(|| format!("starting {:?}", args[0]))?;
        Ok((pid, files))
    }

    fn handle(&mut self, msg: Msg) -> Result<()> {
        match msg {
            Msg::Line {
                trial,
                attempt,
                line,
            } => {
                let t = &self.trials[trial];
                // A paused trial's process may print results before its SIGTERM lands: for the
                // median rule they are results (its checkpoint will hold them), not lost lines.
                // HyperBand judges a bracket at one milestone: what a trial did past it is not
                // compared (Ray's trials stop at once when paused).
                let late = t.status == Status::Paused && self.scheduler.chooses_paused();
                if late
                    || !matches!(t.status, Status::Running | Status::Paused)
                    || t.proc.as_ref().is_none_or(|p| p.attempt != attempt)
                {
                    return Ok(()); // decided already, or an old attempt's last words
                }
                self.line(trial, &line)
            }
            Msg::LongLine { trial, bytes } => {
                self.note(&format!(
                    "warning: trial {trial}: a line of {bytes} bytes (over {} MiB) was skipped",
                    procs::MAX_LINE >> 20
                ));
                Ok(())
            }
            Msg::Exit {
                trial,
                attempt,
                status,
            } => {
                let t = &mut self.trials[trial];
                let Some(p) = t.proc.take_if(|p| p.attempt == attempt) else {
                    return Ok(());
                };
                self.slots[p.slot] = None;
                self.dirty = true;
                if t.status != Status::Running {
                    t.files = None;
                    return Ok(());
                }
                let ok = status.as_ref().is_ok_and(|s| s.success());
                if ok {
                    // The command finished on its own: complete, as Ray's on_trial_complete.
                    let last = t.last_point();
                    let effects = (self.scheduler).on_complete(trial, last, &states(&self.trials));
                    self.finish(trial, Status::Completed, None)?;
                    self.stop_others(&effects)
                } else {
                    let mut message = procs::describe(&status);
                    if let Some(l) = procs::last_line(&t.dir.join("stderr.log")) {
                        message = format!("{message}: {l}");
                    }
                    self.failed(trial, message)
                }
            }
        }
    }

    /// One stdout line of a running trial.
    ///
    /// Kept in one piece: one result as the journal records it: parsed, journalled, judged by the
    /// scheduler, acted on, in that order (a replay depends on it).
    fn line(&mut self, i: usize, line: &[u8]) -> Result<()> {
        let metric_key = &self.def.metric;
        let Some((record, non_finite)) = crate::pyjson::parse_record(line) else {
            // Not a record: other output, unless it names the metric (a number out of range is
            // no JSON).
            let text = String::from_utf8_lossy(line);
            if text.trim_start().starts_with('{') && text.contains(&format!("\"{metric_key}\"")) {
                self.warn(
                    i,
                    line,
                    "is not valid JSON (a number out of range?): ignored",
                );
            }
            return Ok(());
        };
        // NaN and ±Infinity as Python writes them are results, as Ray takes them (ASHA records
        // a NaN, and its cutoffs leave NaNs out).
        let metric = match (record.get(metric_key), non_finite.get(metric_key)) {
            (_, Some(&x)) => x,
            (None, None) => return Ok(()),
            (Some(v), None) => match v.as_f64() {
                Some(m) => m,
                None => {
                    let why = format!("has \"{metric_key}\": {v}, not a number: ignored");
                    self.warn(i, line, &why);
                    return Ok(());
                }
            },
        };
        if let Some(x) = non_finite.get(&self.def.time_attr) {
            let why = format!(
                "has \"{}\": {x}, not a finite time: ignored",
                self.def.time_attr
            );
            self.warn(i, line, &why);
            return Ok(());
        }
        let t = &mut self.trials[i];
        let iteration = t.history.len() + 1;
        let time = match record.get(&self.def.time_attr) {
            Some(v) => match v.as_f64() {
                Some(x) => x,
                None => {
                    let why = format!("has \"{}\": {v}, not a number: ignored", self.def.time_attr);
                    self.warn(i, line, &why);
                    return Ok(());
                }
            },
            None if self.def.time_attr == "training_iteration" => iteration as f64,
            None => return Ok(()),
        };
        let proc_last = t.proc.as_mut().and_then(|p| p.last_time.replace(time));
        // A restarted command repeats what it had reported before its checkpoint: skip it.
        if t.floor.is_some_and(|last| time <= last) {
            if let Some(before) = proc_last.filter(|&before| time <= before) {
                let why = format!(
                    "has \"{}\": {time} after {before}: the time went backwards: ignored",
                    self.def.time_attr
                );
                self.warn(i, line, &why);
            }
            return Ok(());
        }
        // Only the median rule asks (the scan over every trial stays off other sweeps' results).
        let waiting = self.scheduler.asks_waiting()
            && (!self.queue.is_empty()
                || (self.trials.iter()).any(|t| t.id != i && t.status == Status::Paused));
        self.trials[i].push_result(time, metric, &record);
        let (verdict, effects) =
            (self.scheduler).on_result(i, time, metric, waiting, &states(&self.trials));
        self.observe(i, verdict.action, &effects, metric);
        let stop = verdict.action == Action::Stop;
        let pause = verdict.action == Action::Pause;
        self.journal.append(&Entry::Result {
            trial: i,
            time,
            metric,
            record: record.clone(),
            stop,
            pause,
            waiting,
            exploit: effects.exploit.as_ref().map(|e| Copied {
                from: e.from,
                config: e.config.clone(),
            }),
            save: effects.save,
        })?;

        let t = &mut self.trials[i];
        let mut full = record.clone();
        full.insert("trial_id".into(), Value::from(i));
        full.insert("training_iteration".into(), Value::from(iteration));
        let total = t.first_start.map_or(0.0, |s| s.elapsed().as_secs_f64());
        full.insert("time_total_s".into(), Value::from(total));
        full.insert(
            "timestamp".into(),
            Value::from(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            ),
        );
        full.insert("config".into(), Value::Object(t.config.clone()));
        if matches!(self.scheduler, Scheduler::Pbt { .. }) {
            // The lineage, as numbers TensorBoard plots: the copies made so far, and the trial
            // last copied (its own id before any).
            full.insert("pbt_copies".into(), Value::from(t.copies));
            full.insert(
                "pbt_copied_from".into(),
                Value::from(t.copied_from.unwrap_or(i)),
            );
        }
        if let Some(f) = &mut t.files {
            f.result(&full, time.round() as i64)?;
        }
        self.out.emit(&TrialResult {
            trial: i,
            training_iteration: iteration,
            time,
            metric,
            record: Value::Object(record),
        })?;
        if let Some(j) = verdict.rung {
            self.out.emit(&Decision {
                trial: i,
                milestone: j.milestone,
                value: j.value,
                cutoff: j.cutoff,
                action: if stop { "stop" } else { "continue" }.into(),
            })?;
        }
        self.dirty = true;
        self.stop_others(&effects)?;
        if effects.save {
            let (dir, saved) = (&self.trials[i].dir, self.saved_dir(i));
            if let Err(e) = crate::files::save_checkpoint(dir, &saved) {
                self.note(&format!("warning: trial {i}: saving its state: {e:#}"));
            }
        }
        if let Some(e) = &effects.exploit {
            self.copy_decided(i, time, e)?;
        }
        if stop {
            self.stop_trial(i, verdict.complete, None)?;
        }
        if pause && self.trials[i].status == Status::Running {
            self.pause(i, time)?;
        }
        Ok(())
    }

    /// Where population-based training saves trial `i`'s state when it is in the top quantile.
    fn saved_dir(&self, i: usize) -> PathBuf {
        self.out_dir
            .join("pbt-checkpoints")
            .join(format!("trial-{i:04}"))
    }

    /// Where trial `i` keeps the save it copies until it runs again.
    fn kept_dir(&self, i: usize) -> PathBuf {
        self.out_dir
            .join("pbt-checkpoints")
            .join(format!("trial-{i:04}.copy"))
    }

    /// Population-based training decided that trial `i` copies another: its config now (an
    /// `exploit` record, and Ray's policy files: OUT_DIR/pbt_global.txt, and
    /// OUT_DIR/pbt_policy_NNNN.txt, the copied trial's policy followed by this copy), its
    /// directory when it runs again; it pauses.
    fn copy_decided(&mut self, i: usize, time: f64, e: &pbt::Exploit) -> Result<()> {
        let iteration = |t: &Trial| t.history.len();
        let row = serde_json::json!([
            format!("trial-{i:04}"),
            format!("trial-{:04}", e.from),
            iteration(&self.trials[i]),
            iteration(&self.trials[e.from]),
            e.from_config,
            e.config,
        ]);
        // The segment before the copy ends in TensorBoard as a trial the scheduler stopped.
        let t = &mut self.trials[i];
        if let Some(f) = &mut t.files {
            f.end(SessionStatus::Unknown, true, time as i64)?;
        }
        t.take_copy(e);
        let (saved, kept) = (self.saved_dir(e.from), self.kept_dir(i));
        if let Err(err) = crate::files::keep_save(&saved, &kept) {
            let _ = crate::files::remove(&kept);
            self.note(&format!(
                "warning: trial {i}: keeping trial {}'s save ({err:#}): it will copy trial {}'s directory as it is when it runs again",
                e.from, e.from
            ));
        }
        let policy = |t: usize| self.out_dir.join(format!("pbt_policy_{t:04}.txt"));
        let mut lines = std::fs::read(policy(e.from)).unwrap_or_default();
        lines.extend_from_slice(format!("{row}\n").as_bytes());
        let written =
            cli_common::atomic::write_atomic(&policy(i), |w| std::io::Write::write_all(w, &lines));
        if let Err(err) = written {
            self.note(&format!("warning: {}", err.describe()));
        }
        let global = self.out_dir.join("pbt_global.txt");
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&global)
            .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{row}\n").as_bytes()));
        if let Err(err) = appended {
            self.note(&format!("warning: writing {}: {err}", global.display()));
        }
        self.out.emit(&records::Exploit {
            trial: i,
            time,
            from: e.from,
            from_time: e.from_time,
            from_config: e.from_config.clone(),
            config: e.config.clone(),
            operations: (e.operations.iter())
                .map(|(k, op)| (k.clone(), Value::String(op.clone())))
                .collect(),
        })?;
        Ok(())
    }

    /// The median rule's pause: the trial's process is stopped as a stopped trial's is, and the
    /// trial runs again (its command restarted in its directory) when no pending trial is left.
    fn pause(&mut self, i: usize, time: f64) -> Result<()> {
        let t = &mut self.trials[i];
        t.status = Status::Paused;
        let record = TrialRecord {
            event: "pause".into(),
            trial: i,
            config: t.config.clone(),
            dir: t.dir.clone(),
            attempt: t.attempts,
            slot: t.proc.as_ref().map(|p| p.slot),
            status: None,
            stopped_at: Some(time),
            last: t.last.clone().map(Value::Object),
            message: None,
        };
        self.out.emit(&record)?;
        self.terminate(i);
        self.dirty = true;
        Ok(())
    }

    /// A halving's judgements as decision records, then the other trials a decision stopped
    /// (each ends: completed if it won every halving of its bracket, else stopped).
    fn stop_others(&mut self, effects: &Effects) -> Result<()> {
        if let Some(h) = &effects.halving {
            // The worst value kept: below it (in the metric's direction) a trial stops.
            let cutoff = h.judged.iter().find(|j| j.2).map(|j| j.1);
            for &(trial, value, kept) in &h.judged {
                self.out.emit(&Decision {
                    trial,
                    milestone: h.milestone,
                    value,
                    cutoff,
                    action: if kept { "continue" } else { "stop" }.into(),
                })?;
            }
        }
        for &x in &effects.stop {
            if self.trials[x].status.ended() {
                continue;
            }
            let status = self.trials[x].stopped_at_last(effects.completes(x));
            self.finish(x, status, None)?;
            self.terminate(x);
        }
        Ok(())
    }

    /// Nothing runs, nothing is pending, and trials are paused that HyperBand will not run
    /// again (Ray would wait for ever): their brackets are processed again; any still left
    /// paused then end as stopped.
    fn unstick(&mut self) -> Result<()> {
        self.journal.append(&Entry::Unstick)?;
        let effects = self.scheduler.unstick(&states(&self.trials));
        self.note(
            "every trial left is paused and its bracket would wait for ever: processing it again",
        );
        self.stop_others(&effects)?;
        if self.scheduler.choose(&states(&self.trials)).is_some() {
            return Ok(());
        }
        let paused: Vec<usize> = (self.trials.iter())
            .filter(|t| t.status == Status::Paused)
            .map(|t| t.id)
            .collect();
        for i in paused {
            let why = "left paused with nothing else to run".to_string();
            self.stop_trial(i, false, Some(why))?;
        }
        Ok(())
    }

    /// Stops trial `i` at its last result, as Ray's controller stops a trial: the scheduler
    /// told (`on_trial_complete`), its end journalled, its process signalled, and the trials
    /// the scheduler stops in turn ended after it.
    fn stop_trial(&mut self, i: usize, complete: bool, message: Option<String>) -> Result<()> {
        let last = self.trials[i].last_point();
        let more = (self.scheduler).on_complete(i, last, &states(&self.trials));
        let status = self.trials[i].stopped_at_last(complete);
        self.finish(i, status, message)?;
        self.terminate(i);
        self.stop_others(&more)
    }

    /// A failed attempt: retried while --max-failures allows, else the trial's end.
    fn failed(&mut self, i: usize, message: String) -> Result<()> {
        let t = &mut self.trials[i];
        t.failures += 1;
        self.journal.append(&Entry::Failure {
            trial: i,
            attempt: t.attempts,
            message: message.clone(),
        })?;
        if t.failures <= self.def.max_failures {
            let note = format!(
                "trial {i} failed ({message}); retry {} of {}",
                t.failures, self.def.max_failures
            );
            t.status = Status::Pending;
            t.message = Some(message);
            t.files = None; // the retry opens its own event file
            self.queue.push_front(i);
            self.note(&note);
            Ok(())
        } else {
            // The end goes into the event file too (the hparams session as a failure).
            self.finish(i, Status::Error, Some(message))?;
            self.trials[i].files = None;
            let effects = self.scheduler.on_error(i, &states(&self.trials));
            self.stop_others(&effects)
        }
    }

    /// Journals and prints a trial's end.
    fn finish(&mut self, i: usize, status: Status, message: Option<String>) -> Result<()> {
        let t = &mut self.trials[i];
        t.status = status;
        if message.is_some() {
            t.message = message.clone();
        }
        self.journal.append(&Entry::End {
            trial: i,
            status: status.name().into(),
            message: message.clone(),
        })?;
        let at = t.last_point().map_or(0, |(time, _)| time as i64);
        if let Some(f) = &mut t.files {
            // The dashboard has no "stopped": a trial ASHA stopped is Unknown there (and its
            // stopped_early metric is 1), one that ran to max_t a success.
            let session = match status {
                Status::Error => SessionStatus::Failure,
                Status::Stopped => SessionStatus::Unknown,
                _ => SessionStatus::Success,
            };
            f.end(session, status == Status::Stopped, at)?;
        }
        let record = TrialRecord {
            event: "end".into(),
            trial: i,
            config: t.config.clone(),
            dir: t.dir.clone(),
            attempt: t.attempts,
            slot: None,
            status: Some(status.name().into()),
            stopped_at: t.stopped_at,
            last: t.last.clone().map(Value::Object),
            message,
        };
        self.out.emit(&record)?;
        self.dirty = true;
        Ok(())
    }

    /// A warning naming the trial and the line (cut to 200 characters).
    fn warn(&self, trial: usize, line: &[u8], why: &str) {
        let line: String = String::from_utf8_lossy(line)
            .trim_end()
            .chars()
            .take(200)
            .collect();
        self.note(&format!("warning: trial {trial}: the line {line:?} {why}"));
    }

    fn note(&self, message: &str) {
        if !self.opts.quiet {
            eprintln!("sweep: {message}");
        }
    }

    fn terminate(&mut self, i: usize) {
        if let Some(p) = &mut self.trials[i].proc
            && p.term_sent.is_none()
        {
            procs::signal_group(p.pid, libc::SIGTERM);
            p.term_sent = Some(Instant::now());
        }
    }

    /// SIGKILL for trials still running a grace period after their SIGTERM.
    fn enforce_deadlines(&mut self) {
        for t in &mut self.trials {
            if let Some(p) = &mut t.proc
                && !p.kill_sent
                && p.term_sent
                    .is_some_and(|s| s.elapsed() >= self.opts.stop_grace)
            {
                procs::signal_group(p.pid, libc::SIGKILL);
                p.kill_sent = true;
            }
        }
    }

    /// Stops every running trial (SIGTERM, then SIGKILL after the grace period) and waits for
    /// them; their journal stays as it is, so `--resume` restarts them.
    fn shut_down(&mut self) {
        self.note(&format!(
            "interrupted: stopping {} running trial(s)",
            self.slots.iter().flatten().count()
        ));
        for i in 0..self.trials.len() {
            self.terminate(i);
        }
        let deadline = Instant::now() + self.opts.stop_grace + Duration::from_secs(5);
        while self.slots.iter().any(Option::is_some) && Instant::now() < deadline {
            match self.rx.recv_timeout(Duration::from_millis(50)) {
                // Results still in the pipes are journaled: a trial's checkpoint may hold them.
                Ok(msg @ (Msg::Line { .. } | Msg::LongLine { .. })) => {
                    if let Err(e) = self.handle(msg) {
                        self.note(&format!("{e:#}"));
                    }
                }
                // Ended by our SIGTERM: unfinished, not failed.
                Ok(Msg::Exit { trial, attempt, .. }) => {
                    let t = &mut self.trials[trial];
                    if let Some(p) = t.proc.take_if(|p| p.attempt == attempt) {
                        self.slots[p.slot] = None;
                        t.files = None;
                    }
                }
                Err(_) => {}
            }
            self.enforce_deadlines();
        }
    }

    fn best(&self) -> Option<&Trial> {
        let mode = self.def.asha.mode;
        // Ray's get_best_result leaves out trials whose metric is NaN or infinite.
        self.trials
            .iter()
            .filter(|t| t.last_point().is_some_and(|(_, m)| m.is_finite()))
            .fold(None, |best: Option<&Trial>, t| match best {
                Some(b) if !mode.better(t.last_point().unwrap().1, b.last_point().unwrap().1) => {
                    Some(b)
                }
                _ => Some(t),
            })
    }

    fn summary(&self) -> SweepSummary {
        let count = |s: Status| self.trials.iter().filter(|t| t.status == s).count();
        let best = self.best().map(|t| {
            let (time, metric) = t.last_point().expect("best has a result");
            BestTrial {
                trial: t.id,
                config: t.config.clone(),
                metric,
                time,
                status: t.status.name().into(),
                dir: t.dir.clone(),
            }
        });
        SweepSummary {
            trials: self.trials.len(),
            completed: count(Status::Completed),
            stopped: count(Status::Stopped),
            error: count(Status::Error),
            unfinished: self.trials.iter().filter(|t| !t.status.ended()).count(),
            metric: self.def.metric.clone(),
            mode: format!("{:?}", self.def.asha.mode).to_lowercase(),
            best,
            out_dir: self.out_dir.clone(),
            elapsed_ms: self.started.elapsed().as_millis() as u64,
        }
    }

    /// `best.json` (the best trial: its config, metric and directory; `null` when no trial has
    /// a result) and `results.csv` (a row per trial), each written whole.
    fn write_results(&self, summary: &SweepSummary) {
        let best = summary.best.as_ref().map(|b| {
            serde_json::json!({
                "trial": b.trial,
                "config": b.config,
                "metric": self.def.metric,
                "mode": summary.mode,
                "value": b.metric,
                "time_attr": self.def.time_attr,
                "time": b.time,
                "status": b.status,
                "dir": b.dir.display().to_string(),
            })
        });
        let mut json = serde_json::to_vec_pretty(&best).expect("JSON values serialise");
        json.push(b'\n');
        let rows: Vec<crate::files::ResultRow<'_>> = self
            .trials
            .iter()
            .map(|t| crate::files::ResultRow {
                trial: t.id,
                status: t.status.name(),
                config: &t.config,
                history: &t.history,
                stopped_at: t.stopped_at,
                attempts: t.attempts,
                dir: &t.dir,
                message: t.message.as_deref(),
            })
            .collect();
        let csv = crate::files::results_csv(
            &rows,
            &self.def.time_attr,
            &self.def.metric,
            self.def.asha.mode,
        );
        for (name, bytes) in [("best.json", json), ("results.csv", csv.into_bytes())] {
            let path = self.out_dir.join(name);
            if let Err(e) =
                cli_common::atomic::write_atomic(&path, |w| std::io::Write::write_all(w, &bytes))
            {
                eprintln!("sweep: warning: {}", e.describe());
            }
        }
    }

    fn write_plot(&self) {
        let curves: Vec<crate::plot::Curve<'_>> = self
            .trials
            .iter()
            .filter(|t| !t.history.is_empty())
            .map(|t| crate::plot::Curve {
                trial: t.id,
                status: t.status.name(),
                config: config_text(&t.config),
                points: &t.history,
            })
            .collect();
        let svg = crate::plot::svg(
            &curves,
            &self.def.time_attr,
            &self.def.metric,
            self.best().map(|t| t.id),
        );
        let path = self.out_dir.join("metric.svg");
        if let Err(e) = cli_common::atomic::write_atomic(&path, |w| {
            std::io::Write::write_all(w, svg.as_bytes())
        }) {
            eprintln!("sweep: warning: {}", e.describe());
        }
    }

    /// The status table on stderr: at most every --report-secs while something changed, and
    /// at the end sorted by the metric.
    fn report(&mut self, last: bool) {
        if self.opts.quiet || !self.dirty {
            return;
        }
        if !last
            && self
                .last_report
                .is_some_and(|r| r.elapsed() < self.opts.report_every)
        {
            return;
        }
        self.last_report = Some(Instant::now());
        self.dirty = false;
        eprint!("{}", self.table(last));
    }

    // Kept in one piece: the status table's parts in the order printed (counts, columns, rows).
    fn table(&self, sorted: bool) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let count = |st: Status| self.trials.iter().filter(|t| t.status == st).count();
        let secs = self.started.elapsed().as_secs();
        let _ = writeln!(
            s,
            "== sweep: {} trials ({} running, {} pending, {}{} completed, {} stopped, {} error), {:02}:{:02}:{:02} ==",
            self.trials.len(),
            count(Status::Running),
            count(Status::Pending),
            match count(Status::Paused) {
                0 => String::new(),
                n => format!("{n} paused, "),
            },
            count(Status::Completed),
            count(Status::Stopped),
            count(Status::Error),
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        );
        if let Scheduler::Asha(a) = &self.scheduler {
            for (b, rungs) in a.rungs().iter().enumerate() {
                let r: Vec<String> = rungs
                    .iter()
                    .map(|(m, c, n)| {
                        format!(
                            "{} {}: {} ({n})",
                            self.def.time_attr,
                            fmt_num(*m),
                            c.map_or("-".into(), fmt_num)
                        )
                    })
                    .collect();
                let _ = writeln!(
                    s,
                    "ASHA bracket {b}, cutoffs: {}",
                    if r.is_empty() {
                        "no rungs".into()
                    } else {
                        r.join(" | ")
                    }
                );
            }
        }
        if let Scheduler::HyperBand(h) = &self.scheduler {
            for (band, s_, n, milestone, done, live) in h.brackets() {
                let _ = writeln!(
                    s,
                    "HyperBand round {band} bracket {s_}: {live} live of at most {} trials, milestone {} {}, {:.0}% done",
                    fmt_num(n),
                    self.def.time_attr,
                    fmt_num(milestone),
                    done * 100.0
                );
            }
        }
        if let Scheduler::Pbt { pbt, .. } = &self.scheduler {
            let _ = writeln!(
                s,
                "PBT: {} copies of a better trial, {} trials in the top quantile when compared",
                pbt.num_perturbations, pbt.num_checkpoints
            );
        }
        if let Some(b) = self.best() {
            let (time, metric) = b.last_point().expect("best has a result");
            let _ = writeln!(
                s,
                "best so far: trial {} {}={} at {} {} ({})",
                b.id,
                self.def.metric,
                fmt_num(metric),
                self.def.time_attr,
                fmt_num(time),
                config_text(&b.config)
            );
        }
        // The parameters of the first config chosen (TPE and BOHB choose theirs as trials start).
        let names: Vec<&String> = self
            .trials
            .iter()
            .find(|t| t.chosen)
            .map(|t| t.config.keys().collect())
            .unwrap_or_default();
        let mut header = vec!["trial".to_string(), "status".into(), "slot".into()];
        header.extend(names.iter().map(|n| n.to_string()));
        header.extend([self.def.time_attr.clone(), self.def.metric.clone()]);
        let mut order: Vec<&Trial> = self.trials.iter().collect();
        if sorted {
            let mode = self.def.asha.mode;
            // Trials without a finite result last (a NaN compares with nothing).
            let finite = |t: &Trial| t.last_point().filter(|(_, m)| m.is_finite());
            order.sort_by(|a, b| match (finite(a), finite(b)) {
                (Some(x), Some(y)) if mode.better(x.1, y.1) => std::cmp::Ordering::Less,
                (Some(x), Some(y)) if mode.better(y.1, x.1) => std::cmp::Ordering::Greater,
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                _ => a.id.cmp(&b.id),
            });
        }
        let rows: Vec<Vec<String>> = order
            .iter()
            .map(|t| {
                let mut r = vec![
                    t.id.to_string(),
                    t.status.name().to_string(),
                    t.proc.as_ref().map_or("-".into(), |p| p.slot.to_string()),
                ];
                r.extend(
                    names
                        .iter()
                        .map(|n| t.config.get(*n).map_or(String::new(), cell)),
                );
                let (time, metric) = t
                    .last_point()
                    .map_or(("-".into(), "-".into()), |(x, y)| (fmt_num(x), fmt_num(y)));
                r.extend([time, metric]);
                r
            })
            .collect();
        let widths: Vec<usize> = (0..header.len())
            .map(|c| {
                rows.iter()
                    .map(|r| r[c].chars().count())
                    .chain([header[c].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        };
        if sorted {
            let _ = writeln!(
                s,
                "trials by their last {} ({}):",
                self.def.metric,
                if self.def.asha.mode == search::asha::Mode::Max {
                    "highest first"
                } else {
                    "lowest first"
                }
            );
        }
        let _ = writeln!(s, "{}", line(&header));
        let max_rows = if sorted { usize::MAX } else { 40 };
        for r in rows.iter().take(max_rows) {
            let _ = writeln!(s, "{}", line(r));
        }
        if rows.len() > max_rows {
            let _ = writeln!(s, "... {} more trials", rows.len() - max_rows);
        }
        s
    }
}

/// Up to five significant digits, as Ray's table shows numbers.
fn fmt_num(x: f64) -> String {
    if x == x.trunc() && x.abs() < 1e15 {
        return format!("{}", x as i64);
    }
    let a = x.abs();
    if (1e-3..1e5).contains(&a) {
        let digits = (4 - a.log10().floor() as i32).max(0) as usize;
        let s = format!("{x:.digits$}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{x:.4e}")
    }
}

fn cell(v: &Value) -> String {
    match v {
        Value::Number(n) => n.as_f64().map_or(n.to_string(), fmt_num),
        other => crate::template::render(other).chars().take(24).collect(),
    }
}

fn config_text(c: &Config) -> String {
    c.iter()
        .map(|(k, v)| format!("{k}={}", cell(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_the_table() {
        assert_eq!(fmt_num(4.0), "4");
        assert_eq!(fmt_num(91.23456), "91.235");
        assert_eq!(fmt_num(0.012345678), "0.012346");
        assert_eq!(fmt_num(1.5e-7), "1.5000e-7");
    }
}
