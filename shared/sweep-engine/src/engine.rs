//! The sweep's loop: trials started into free slots, their results fed to the scheduler in the
//! order they arrive, stops sent as SIGTERM then SIGKILL to the trial's process group, failures
//! retried, every step journaled before it is printed.

mod procs;
mod replay;
mod results;
mod summary;
mod table;
mod trial;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::error::{Context, Error, Result};
use records::{BestTrial, Decision, SweepSummary, TrialRecord, TrialResult};
use serde_json::{Map, Value};

use crate::files::TrialFiles;
use crate::journal::{Copied, Definition, Entry, Journal, SchedulerKind, SearchKind};
use crate::launcher::{self, Ended, Launch, Launcher, Msg, Signal};
use crate::setup::Opened;
use crate::template::{Bindings, Template};
use crate::{Finished, Output, Record};
use search::asha::{Action, Asha};
use search::bohb::Bohb;
use search::hyperband::{HyperBand, HyperBandSettings};
use search::median::Median;
use search::pbt::{self, Pbt};
use search::space::{Config, Space, TpeSpace};
use search::tpe::{Observed, Tpe};
use search::{Effects, Scheduler, TrialState};
use tensorboard::SessionStatus;
use trial::{Proc, Status, Trial, states};

/// How this run of the sweep executes (may change between a sweep and its resumption).
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Trials that run at once.
    pub slots: usize,
    /// How long a trial asked to stop has before it is killed.
    pub stop_grace: Duration,
    /// How often the status table is given to [`Output::status`] while something changes.
    pub report_every: Duration,
    /// Whether the sweep was asked to stop (SIGINT, SIGTERM): checked between events.
    pub interrupted: fn() -> bool,
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
    launcher: Box<dyn Launcher>,
    out: &'a mut dyn Output,
    /// The directory's lock, held for the sweep's life.
    _lock: atomic_file::DirLock,
    tx: mpsc::Sender<Msg>,
    rx: mpsc::Receiver<Msg>,
    started: Instant,
    last_report: Option<Instant>,
    dirty: bool,
    /// Why the place trials run in is going away (a launcher's [`Ended::Lost`]): the sweep
    /// stops as when interrupted.
    ending: Option<String>,
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("out_dir", &self.out_dir)
            .field("trials", &self.trials.len())
            .finish()
    }
}

/// The scheduler of a sweep's definition (its space parsed).
fn scheduler_of(def: &Definition, space: &Space) -> Result<Scheduler> {
    Ok(match def.scheduler {
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
                pbt::mutations(space),
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
    })
}

/// The directory of trial `i`.
pub fn trial_dir(out_dir: &Path, i: usize) -> PathBuf {
    out_dir.join(format!("trial-{i:04}"))
}

impl<'a> Engine<'a> {
    /// A sweep from its definition; `replay` holds the journal entries of an interrupted run.
    pub fn new(
        opened: Opened,
        opts: RunOptions,
        launcher: Box<dyn Launcher>,
        out: &'a mut dyn Output,
    ) -> crate::Result<Self> {
        let Opened {
            def,
            template,
            journal,
            replay,
            out_dir,
            lock,
        } = opened;
        if !(1..=crate::MAX_SLOTS).contains(&opts.slots) {
            return Err(crate::Error::Usage(format!(
                "{} slots: a sweep runs 1 to {} trials at once",
                opts.slots,
                crate::MAX_SLOTS
            )));
        }
        let space = Space::parse(&def.space.to_string())?;
        let mut scheduler = scheduler_of(&def, &space)?;
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
            .map(|i| {
                let config = def.trials.get(i).cloned().unwrap_or_default();
                Trial::new(
                    i,
                    config,
                    def.search == SearchKind::Random,
                    trial_dir(&out_dir, i),
                )
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
            launcher,
            out,
            _lock: lock,
            tx,
            rx,
            started: Instant::now(),
            last_report: None,
            dirty: true,
            ending: None,
        };
        e.replay(&replay)?;
        Ok(e)
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
            return Err(Error::Journal(format!(
                "the journal makes trial {i} where this sweep makes trial {}",
                self.made
            )));
        }
        let (config, model) = bohb.suggest();
        match journalled {
            Some(c) if *c != config => {
                return Err(Error::Journal(format!(
                    "the journal's config for trial {i} differs from this sweep's BOHB suggestion: was it written by another version?"
                )));
            }
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

    /// One record to the output; its refusal ends the sweep.
    fn emit(&mut self, record: Record) -> Result<()> {
        self.out.record(record).map_err(Error::Output)
    }

    /// Runs every trial to its end; the summary record is printed last.
    pub fn run(mut self) -> crate::Result<Finished> {
        let interrupted = loop {
            if (self.opts.interrupted)() || self.ending.is_some() {
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
            if let Some(why) = &self.ending {
                log::warn!(
                    "{why}: stopping; --resume (the requeued job's) runs the unfinished trials again"
                );
            }
            self.shut_down();
        }
        self.report(true);
        self.write_plot();
        let summary = self.summary();
        self.write_results(&summary);
        let failed = summary.error;
        self.emit(Record::Summary(summary))?;
        if interrupted {
            return Err(crate::Error::Interrupted);
        }
        Ok(Finished { failed })
    }

    /// TPE's config for trial `i`, from every trial chosen so far: finished ones by their last
    /// metric (an error, no result or a NaN leaves a trial out, as Optuna leaves out failed
    /// trials), the others as running.
    fn suggest(&mut self, i: usize) -> Result<Config> {
        let Some((space, tpe)) = &mut self.tpe else {
            return Err(Error::Journal(format!(
                "trial {i}: a suggestion in a sweep without --search tpe"
            )));
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
        let copy = self.trials[i].copy_from;
        if let Some((from, _)) = copy
            && let Err(e) = self.take_copy(i, from)
        {
            // A failed attempt: a retry copies again.
            let message = format!("copying trial {from}'s checkpoint: {}", e.describe());
            return self.failed(i, message);
        }
        let attempt = self.trials[i].attempts + 1;
        let t = &mut self.trials[i];
        t.counted_from = match copy {
            Some((_, copied_time)) => copied_time,
            None if crate::files::holds_state(&t.dir) => t.last_point().map_or(0.0, |p| p.0),
            None => 0.0,
        };
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
        self.emit(Record::Trial(record))?;
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
                    counted: 0,
                });
                self.slots[slot] = Some(i);
                Ok(())
            }
            Err(e) => self.failed(i, e.describe()),
        }
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
        self.emit(Record::Trial(record))?;
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
                self.emit(Record::Decision(Decision {
                    trial,
                    milestone: h.milestone,
                    value,
                    cutoff,
                    action: if kept { "continue" } else { "stop" }.into(),
                }))?;
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
        log::info!(
            "every trial left is paused and its bracket would wait for ever: processing it again"
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
            log::info!("{note}");
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
        self.emit(Record::Trial(record))?;
        self.dirty = true;
        Ok(())
    }
}
