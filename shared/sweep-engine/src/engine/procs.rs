//! Trials' processes: launched through the launcher into slots, their lines and exits
//! received, stopped (SIGTERM, then SIGKILL after the grace period).

use super::*;

/// The trials' processes: the launcher, the command template, the slots and the channel the
/// launcher's threads send lines and exits through.
pub(super) struct Procs {
    launcher: Box<dyn Launcher>,
    template: Template,
    tx: mpsc::Sender<Msg>,
    rx: mpsc::Receiver<Msg>,
    /// The trial running in each slot.
    pub(super) slots: Vec<Option<usize>>,
    stop_grace: Duration,
}

impl Procs {
    pub(super) fn new(
        launcher: Box<dyn Launcher>,
        template: Template,
        slots: usize,
        stop_grace: Duration,
    ) -> Self {
        let (tx, rx) = mpsc::channel();
        Procs {
            launcher,
            template,
            tx,
            rx,
            slots: vec![None; slots],
            stop_grace,
        }
    }

    /// The first free slot.
    pub(super) fn free_slot(&self) -> Option<usize> {
        self.slots.iter().position(Option::is_none)
    }

    /// Whether no slot runs a trial.
    pub(super) fn idle(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }

    /// The next line or exit, waiting at most `timeout`.
    pub(super) fn recv(&self, timeout: Duration) -> Option<Msg> {
        match self.rx.recv_timeout(timeout) {
            Ok(msg) => Some(msg),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                unreachable!("the engine holds a sender")
            }
        }
    }

    /// Starts attempt `attempt` of trial `t` in `slot`: its files opened, its command
    /// expanded and given to the launcher, its output read from `stdout` (its stdout.log, or
    /// why it could not be opened); the pid it runs as.
    pub(super) fn launch(
        &mut self,
        t: &Trial,
        slot: usize,
        attempt: usize,
        stdout: Result<launcher::Stdout>,
    ) -> Result<(i32, TrialFiles)> {
        let i = t.id;
        let files = TrialFiles::open(&t.dir, i, attempt, &t.config, t.copies)?;
        let stderr_path = t.dir.join("stderr.log");
        let stderr = crate::files::open_regular(&stderr_path, true)?;
        let stdout = stdout?;
        let args = self.template.expand(&Bindings {
            config: &t.config,
            trial: i,
            trial_dir: &t.dir,
            slot,
        });
        let env = vec![
            ("SWEEP_TRIAL", i.to_string().into()),
            ("SWEEP_TRIAL_DIR", t.dir.as_os_str().to_owned()),
            ("SWEEP_SLOT", slot.to_string().into()),
        ];
        let launch = Launch {
            trial: i,
            attempt,
            slot,
            args: &args,
            env,
            dir: &t.dir,
            stderr,
            stdout,
        };
        let pid = self.launcher.start(launch, self.tx.clone())?;
        Ok((pid, files))
    }

    /// Ends what an earlier run of trial `t` left running (a killed sweep's processes), before
    /// its output is read back or it starts again.
    pub(super) fn end_leftovers(&mut self, t: &Trial) {
        self.launcher.end_leftovers(t.id, &t.dir, t.stdout_file);
    }

    /// Attempt `attempt` of trial `t` exited: its slot freed; how it ended, as its launcher
    /// judges it (`None`: an earlier attempt's exit, already dealt with).
    pub(super) fn exited(
        &mut self,
        t: &mut Trial,
        attempt: usize,
        status: &std::io::Result<std::process::ExitStatus>,
    ) -> Option<Ended> {
        let p = t.proc.take_if(|p| p.attempt == attempt)?;
        self.slots[p.slot] = None;
        Some(self.launcher.ended(p.pid, status))
    }

    /// Asks trial `t`'s process to stop (once).
    pub(super) fn terminate(&mut self, t: &mut Trial) {
        if let Some(p) = &mut t.proc
            && p.term_sent.is_none()
        {
            self.launcher.signal(p.pid, Signal::Stop);
            p.term_sent = Some(Instant::now());
        }
    }

    /// SIGKILL for trials still running a grace period after their SIGTERM.
    pub(super) fn enforce_deadlines(&mut self, trials: &mut [Trial]) {
        for t in trials {
            if let Some(p) = &mut t.proc
                && !p.kill_sent
                && p.term_sent.is_some_and(|s| s.elapsed() >= self.stop_grace)
            {
                self.launcher.signal(p.pid, Signal::Kill);
                p.kill_sent = true;
            }
        }
    }

    /// How long a shutdown waits for the trials it stopped.
    pub(super) fn shutdown_deadline(&self) -> Instant {
        Instant::now() + self.stop_grace + Duration::from_secs(5)
    }
}

impl Engine<'_> {
    /// A line or exit from a trial's process.
    pub(super) fn handle(&mut self, msg: Msg) -> Result<()> {
        match msg {
            Msg::Line {
                trial,
                attempt,
                line,
            } => {
                if !self.takes_line(trial, attempt) {
                    return Ok(()); // decided already, or an old attempt's last words
                }
                self.line(trial, &line)
            }
            Msg::LongLine { trial, bytes } => {
                long_line(trial, bytes);
                Ok(())
            }
            Msg::Exit {
                trial,
                attempt,
                status,
            } => self.exit(trial, attempt, &status),
        }
    }

    /// Whether a line of attempt `attempt` of `trial` is read as a result: not once the trial
    /// was decided, nor an old attempt's last words.
    pub(super) fn takes_line(&self, trial: usize, attempt: usize) -> bool {
        let t = &self.trials[trial];
        // A paused trial's process may print results before its SIGTERM lands: for the
        // median rule they are results (its checkpoint will hold them), not lost lines.
        // HyperBand judges a bracket at one milestone: what a trial did past it is not
        // compared (Ray's trials stop at once when paused).
        let late = t.status == Status::Paused && self.search.scheduler.chooses_paused();
        !late
            && matches!(t.status, Status::Running | Status::Paused)
            && t.proc.as_ref().is_some_and(|p| p.attempt == attempt)
    }

    /// Attempt `attempt` of trial `i` exited with `status`: complete, failed (retried or an
    /// error), or unfinished when the sweep is stopping.
    fn exit(
        &mut self,
        i: usize,
        attempt: usize,
        status: &std::io::Result<std::process::ExitStatus>,
    ) -> Result<()> {
        let Some(ended) = self.procs.exited(&mut self.trials[i], attempt, status) else {
            return Ok(());
        };
        self.output.dirty = true;
        let t = &mut self.trials[i];
        let failure = match ended {
            Ended::Success => None,
            Ended::Failed(why) => Some(why),
            // The allocation is going away: the trial is unfinished (run again by
            // --resume) and the sweep stops, counting nothing against the trial.
            Ended::Lost(why) => {
                t.files = None;
                if t.status == Status::Running {
                    log::warn!("trial {i}: {why}: unfinished; the sweep stops");
                    self.ending.get_or_insert(why);
                }
                return Ok(());
            }
        };
        // A trial that fails once the sweep was asked to stop was most likely ended by the
        // same signal (Slurm cancelling the job signals every process of it; a trial's
        // exit can be seen before the loop sees the sweep's own SIGTERM): unfinished, as
        // the trials the shutdown stops, and run again by --resume.
        if t.status != Status::Running || (failure.is_some() && (self.interrupted)()) {
            t.files = None;
            return Ok(());
        }
        match failure {
            None => {
                // The command finished on its own: complete, as Ray's on_trial_complete.
                let last = t.last_point();
                let effects = (self.search.scheduler).on_complete(i, last, &states(&self.trials));
                self.finish(i, Status::Completed, None)?;
                self.stop_others(&effects)
            }
            Some(mut message) => {
                // The command's last words, unless they are what the launcher said already.
                if let Some(l) = launcher::last_line(&t.dir.join("stderr.log"))
                    && !l.ends_with(message.rsplit(": ").next().unwrap_or_default())
                {
                    message = format!("{message}: {l}");
                }
                self.failed(i, message)
            }
        }
    }

    /// Asks trial `i`'s process to stop.
    pub(super) fn terminate(&mut self, i: usize) {
        self.procs.terminate(&mut self.trials[i]);
    }

    /// Stops every running trial (SIGTERM, then SIGKILL after the grace period) and waits for
    /// them; their journal stays as it is, so `--resume` restarts them.
    pub(super) fn shut_down(&mut self) {
        log::info!(
            "interrupted: stopping {} running trial(s)",
            self.procs.slots.iter().flatten().count()
        );
        for i in 0..self.trials.len() {
            self.terminate(i);
        }
        let deadline = self.procs.shutdown_deadline();
        while !self.procs.idle() && Instant::now() < deadline {
            match self.procs.recv(Duration::from_millis(50)) {
                // Results not read yet are journaled: a trial's checkpoint may hold them.
                Some(msg @ (Msg::Line { .. } | Msg::LongLine { .. })) => {
                    if let Err(e) = self.handle(msg) {
                        log::info!("{}", e.describe());
                    }
                }
                // Ended by our SIGTERM: unfinished, not failed.
                Some(Msg::Exit {
                    trial,
                    attempt,
                    status,
                }) => {
                    let t = &mut self.trials[trial];
                    if self.procs.exited(t, attempt, &status).is_some() {
                        t.files = None;
                    }
                }
                None => {}
            }
            self.procs.enforce_deadlines(&mut self.trials);
        }
    }
}

/// The warning for a line over [`launcher::MAX_LINE`], skipped.
pub(super) fn long_line(trial: usize, bytes: u64) {
    log::warn!(
        "trial {trial}: a line of {bytes} bytes (over {} MiB) was skipped",
        launcher::MAX_LINE >> 20
    );
}
