//! A trial as the engine keeps it: its status, config, results and process.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    Pending,
    Running,
    /// Yielded its slot to a waiting trial (the median rule); runs again later.
    Paused,
    Completed,
    Stopped,
    Error,
}

impl Status {
    pub(super) fn name(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Paused => "paused",
            Status::Completed => "completed",
            Status::Stopped => "stopped",
            Status::Error => "error",
        }
    }

    pub(super) fn ended(self) -> bool {
        matches!(self, Status::Completed | Status::Stopped | Status::Error)
    }

    /// What the schedulers that act on other trials see.
    pub(super) fn state(self) -> TrialState {
        match self {
            Status::Pending => TrialState::Pending,
            Status::Running => TrialState::Running,
            Status::Paused => TrialState::Paused,
            Status::Completed | Status::Stopped | Status::Error => TrialState::Ended,
        }
    }
}

/// The trials' states as the scheduler sees them.
pub(super) fn states(trials: &[Trial]) -> impl Fn(usize) -> TrialState + '_ {
    |i| trials[i].status.state()
}

#[derive(Debug)]
pub(super) struct Proc {
    pub(super) pid: i32,
    pub(super) slot: usize,
    pub(super) attempt: usize,
    pub(super) term_sent: Option<Instant>,
    pub(super) kill_sent: bool,
    /// The time attribute of this attempt's last result: one that goes backwards within an
    /// attempt is reported (a restarted attempt repeating its predecessor's is not).
    pub(super) last_time: Option<f64>,
    /// Results this attempt's command printed without the time attribute (a counted
    /// training_iteration).
    pub(super) counted: usize,
    /// `Some`: where this attempt's count stands is unknown (its stdout.log, read back, was cut
    /// since it started, and what is left may be an earlier attempt's), so a result without the
    /// time attribute is skipped; how many were.
    pub(super) uncountable: Option<usize>,
}

impl Proc {
    /// Attempt `attempt`, started as `pid` in `slot`.
    pub(super) fn new(pid: i32, slot: usize, attempt: usize) -> Proc {
        Proc {
            pid,
            slot,
            attempt,
            term_sent: None,
            kill_sent: false,
            last_time: None,
            counted: 0,
            uncountable: None,
        }
    }

    /// An attempt whose process is gone (a dead sweep's), while what it wrote is read back:
    /// marked as already asked to stop and killed, so it is never signalled.
    pub(super) fn read_back(attempt: usize, slot: usize) -> Proc {
        Proc {
            term_sent: Some(Instant::now()),
            kill_sent: true,
            ..Proc::new(0, slot, attempt)
        }
    }
}

#[derive(Debug)]
pub(super) struct Trial {
    pub(super) id: usize,
    pub(super) config: Config,
    /// Whether `config` is chosen (TPE chooses it when the trial first starts).
    pub(super) chosen: bool,
    pub(super) dir: PathBuf,
    pub(super) status: Status,
    pub(super) attempts: usize,
    pub(super) failures: usize,
    /// (time, metric) of every result (its length is Ray's training_iteration), for the plot.
    pub(super) history: Vec<(f64, f64)>,
    pub(super) last: Option<Map<String, Value>>,
    pub(super) stopped_at: Option<f64>,
    pub(super) message: Option<String>,
    pub(super) proc: Option<Proc>,
    pub(super) files: Option<TrialFiles>,
    pub(super) first_start: Option<Instant>,
    /// Results at or before this time are repeats of a restarted command (the last result's
    /// time; none after a copy, whose command goes on from the copied trial's checkpoint).
    pub(super) floor: Option<f64>,
    /// A counted training_iteration goes on from this in the running attempt: the trial's last
    /// time if its command has state to go on from, the copied trial's time after a copy, 0
    /// for a command that starts over.
    pub(super) counted_from: f64,
    /// Population-based training: the trial whose directory this one takes before it runs
    /// again (and that trial's time, which its count goes on from), the copies made so far and
    /// the last trial copied.
    pub(super) copy_from: Option<(usize, f64)>,
    pub(super) copies: usize,
    pub(super) copied_from: Option<usize>,
    /// The stdout.log its last attempt wrote to (device and inode), where known: what that
    /// attempt left running still writes to it.
    pub(super) stdout_file: Option<[u64; 2]>,
}

impl Trial {
    /// Trial `id`, pending, with `config` (`chosen`: final, else TPE chooses it at its start).
    pub(super) fn new(id: usize, config: Config, chosen: bool, dir: PathBuf) -> Trial {
        Trial {
            id,
            config,
            chosen,
            dir,
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
            counted_from: 0.0,
            copy_from: None,
            copies: 0,
            copied_from: None,
            stdout_file: None,
        }
    }

    /// The trial's record of `event`: its number, config, directory and attempts so far, the
    /// rest for the caller to fill in.
    pub(super) fn record(&self, event: &str) -> TrialRecord {
        TrialRecord {
            event: event.into(),
            trial: self.id,
            config: self.config.clone(),
            dir: self.dir.clone(),
            attempt: self.attempts,
            slot: None,
            status: None,
            stopped_at: None,
            last: None,
            message: None,
        }
    }

    pub(super) fn last_point(&self) -> Option<(f64, f64)> {
        self.history.last().copied()
    }

    /// Takes a result into the trial's history.
    pub(super) fn push_result(&mut self, time: f64, metric: f64, record: &Map<String, Value>) {
        self.history.push((time, metric));
        self.floor = Some(time);
        self.last = Some(record.clone());
    }

    /// A copy decided (population-based training): the new config now, the directory when
    /// the trial runs again.
    pub(super) fn take_copy(&mut self, e: &pbt::Exploit) {
        self.config = e.config.clone();
        self.copy_from = Some((e.from, e.from_time));
        self.copied_from = Some(e.from);
        self.copies += 1;
        self.floor = None;
    }

    /// The status a stop verdict gives (completed at max_t, else stopped at `time`).
    pub(super) fn stopped(&mut self, complete: bool, time: f64) -> Status {
        self.stopped_at = (!complete).then_some(time);
        if complete {
            Status::Completed
        } else {
            Status::Stopped
        }
    }

    /// [`Trial::stopped`] at the trial's last result (a trial the scheduler stops, or one
    /// stopped with it).
    pub(super) fn stopped_at_last(&mut self, complete: bool) -> Status {
        let time = self.last_point().map_or(0.0, |p| p.0);
        self.stopped(complete, time)
    }
}
