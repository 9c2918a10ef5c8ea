//! The sweep's loop: trials started into free slots, their results fed to the scheduler in the
//! order they arrive, stops sent as SIGTERM then SIGKILL to the trial's process group, failures
//! retried, every step journaled before it is printed.
//!
//! [`Engine`] holds one part per job and drives them: the trials and their processes
//! ([`procs`]: the launcher, the slots, the lines and exits), the searcher and scheduler
//! ([`searcher`]), the journal and its replay ([`replay`]), and what the sweep shows
//! ([`outputs`]: records, the status table, the files at its end). A trial's life (started,
//! paused, stopped, failed, ended) is in [`lifecycle`], a result's in [`results`].

mod lifecycle;
mod outputs;
mod procs;
mod replay;
mod results;
mod searcher;
mod summary;
mod table;
mod trial;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use records::{BestTrial, Decision, SweepSummary, TrialRecord, TrialResult};
use serde_json::{Map, Value};

use crate::error::{Context, Error, Result};
use crate::files::TrialFiles;
use crate::journal::{Copied, Definition, Entry, Journal, SchedulerKind, SearchKind};
use crate::launcher::{self, Ended, Launch, Launcher, Msg, Signal};
use crate::setup::Opened;
use crate::template::{Bindings, Template};
use crate::{Finished, Output, Record};
use outputs::{Outputs, View};
use procs::Procs;
use search::asha::{Action, Asha};
use search::bohb::Bohb;
use search::hyperband::{HyperBand, HyperBandSettings};
use search::median::Median;
use search::pbt::{self, Pbt};
use search::space::{Config, Space, TpeSpace};
use search::tpe::{Observed, Tpe};
use search::{Effects, Scheduler, TrialState};
use searcher::Searcher;
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
    trials: Vec<Trial>,
    /// Trials waiting for a slot, in the order they start (a retry first).
    queue: VecDeque<usize>,
    search: Searcher,
    procs: Procs,
    journal: Journal,
    output: Outputs<'a>,
    interrupted: fn() -> bool,
    /// The directory's lock, held for the sweep's life.
    _lock: atomic_file::DirLock,
    /// Why the place trials run in is going away (a launcher's [`Ended::Lost`]): the sweep
    /// stops as when interrupted.
    ending: Option<String>,
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("out_dir", &self.output.out_dir)
            .field("trials", &self.trials.len())
            .finish()
    }
}

/// The directory of trial `i`.
pub fn trial_dir(out_dir: &Path, i: usize) -> PathBuf {
    out_dir.join(format!("trial-{i:04}"))
}

impl<'a> Engine<'a> {
    /// A sweep from its opened directory (a new sweep's, or one to resume, whose journal is
    /// replayed here), run with `opts`, its trials started through `launcher`, its records
    /// and status table given to `out`.
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
            return Err(Error::Usage(format!(
                "{} slots: a sweep runs 1 to {} trials at once",
                opts.slots,
                crate::MAX_SLOTS
            )));
        }
        let trials: Vec<Trial> = (0..def.trial_count())
            .map(|i| {
                let config = def.trials.get(i).cloned().unwrap_or_default();
                let chosen = def.search == SearchKind::Random;
                Trial::new(i, config, chosen, trial_dir(&out_dir, i))
            })
            .collect();
        let search = Searcher::new(&def, &trials)?;
        let mut e = Engine {
            def,
            trials,
            queue: VecDeque::new(),
            search,
            procs: Procs::new(launcher, template, opts.slots, opts.stop_grace),
            journal,
            output: Outputs::new(out, out_dir, opts.report_every),
            interrupted: opts.interrupted,
            _lock: lock,
            ending: None,
        };
        e.replay(&replay)?;
        Ok(e)
    }

    /// Runs every trial to its end; the summary record is printed last.
    pub fn run(mut self) -> crate::Result<Finished> {
        let interrupted = loop {
            if (self.interrupted)() || self.ending.is_some() {
                break true;
            }
            while let Some(slot) = self.procs.free_slot() {
                let Some(i) = self.next_trial()? else {
                    break;
                };
                self.start(i, slot)?;
            }
            self.make_pending()?;
            if self.procs.idle() && self.queue.is_empty() {
                if self.trials.iter().any(|t| t.status == Status::Paused) {
                    self.unstick()?;
                    continue;
                }
                break false;
            }
            if let Some(msg) = self.procs.recv(Duration::from_millis(100)) {
                self.handle(msg)?;
            }
            self.procs.enforce_deadlines(&mut self.trials);
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
        self.finish_outputs(interrupted)
    }

    /// The last status table, metric.svg, best.json, results.csv and the summary record.
    fn finish_outputs(mut self, interrupted: bool) -> Result<Finished> {
        self.report(true);
        let view = View {
            def: &self.def,
            trials: &self.trials,
            scheduler: &self.search.scheduler,
        };
        self.output.write_plot(&view);
        let summary = self.output.summary(&view);
        self.output.write_results(&view, &summary);
        let failed = summary.error;
        self.output.emit(Record::Summary(summary))?;
        if interrupted {
            return Err(Error::Interrupted);
        }
        Ok(Finished { failed })
    }

    /// One record to the output; its refusal ends the sweep.
    fn emit(&mut self, record: Record) -> Result<()> {
        self.output.emit(record)
    }

    /// The status table, when it is due (`last`: at the end, sorted).
    fn report(&mut self, last: bool) {
        let view = View {
            def: &self.def,
            trials: &self.trials,
            scheduler: &self.search.scheduler,
        };
        self.output.report(&view, last);
    }

    /// The trial to start in a free slot: the scheduler's choice (HyperBand's, PBT's), else the first
    /// pending one, else (median) a paused one in trial order, once its process has exited
    /// (it must not run twice at once).
    fn next_trial(&mut self) -> Result<Option<usize>> {
        self.make_pending()?;
        let chosen = self.search.scheduler.choose(&states(&self.trials));
        if let Some(i) = chosen.filter(|&i| self.trials[i].proc.is_none()) {
            self.queue.retain(|&q| q != i);
            return Ok(Some(i));
        }
        if let Some(i) = self.queue.pop_front() {
            return Ok(Some(i));
        }
        if self.search.scheduler.chooses_paused() {
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
        if !self.search.makes_trials() || self.search.made == self.trials.len() {
            return Ok(());
        }
        let pending = (self.queue.iter()).any(|&i| self.trials[i].status == Status::Pending);
        if !pending {
            self.make(self.search.made, None)?;
            self.queue.push_back(self.search.made - 1);
        }
        Ok(())
    }

    /// Makes BOHB's trial `i` (the next): its config suggested (checked against the journal's
    /// when replayed, else journalled), and the scheduler told.
    fn make(&mut self, i: usize, journalled: Option<&Config>) -> Result<()> {
        let (config, model) = self.search.make(i, journalled)?;
        if journalled.is_none() {
            self.journal.append(&Entry::Suggest {
                trial: i,
                config: config.clone(),
                model,
            })?;
        }
        let t = &mut self.trials[i];
        t.config = config;
        t.chosen = true;
        self.search.made(i, &t.config);
        Ok(())
    }
}
