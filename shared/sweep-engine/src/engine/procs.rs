//! Trials' processes: launched through the launcher, their lines and exits handled, stopped.

use super::*;

impl Engine<'_> {
    pub(super) fn launch(
        &mut self,
        i: usize,
        slot: usize,
        attempt: usize,
    ) -> Result<(i32, TrialFiles)> {
        let t = &self.trials[i];
        let files = TrialFiles::open(&t.dir, i, attempt, &t.config, t.copies)?;
        let stderr_path = t.dir.join("stderr.log");
        let stderr = crate::files::open_regular(&stderr_path, true)?;
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
        };
        let pid = self.launcher.start(launch, self.tx.clone())?;
        Ok((pid, files))
    }

    pub(super) fn handle(&mut self, msg: Msg) -> Result<()> {
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
                log::warn!(
                    "trial {trial}: a line of {bytes} bytes (over {} MiB) was skipped",
                    launcher::MAX_LINE >> 20
                );
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
                let ended = self.launcher.ended(p.pid, &status);
                let t = &mut self.trials[trial];
                let failure = match ended {
                    Ended::Success => None,
                    Ended::Failed(why) => Some(why),
                    // The allocation is going away: the trial is unfinished (run again by
                    // --resume) and the sweep stops, counting nothing against the trial.
                    Ended::Lost(why) => {
                        t.files = None;
                        if t.status == Status::Running {
                            log::warn!("trial {trial}: {why}: unfinished; the sweep stops");
                            self.ending.get_or_insert(why);
                        }
                        return Ok(());
                    }
                };
                // A trial that fails once the sweep was asked to stop was most likely ended by the
                // same signal (Slurm cancelling the job signals every process of it; a trial's
                // exit can be seen before the loop sees the sweep's own SIGTERM): unfinished, as
                // the trials the shutdown stops, and run again by --resume.
                if t.status != Status::Running || (failure.is_some() && (self.opts.interrupted)()) {
                    t.files = None;
                    return Ok(());
                }
                match failure {
                    None => {
                        // The command finished on its own: complete, as Ray's on_trial_complete.
                        let last = t.last_point();
                        let effects =
                            (self.scheduler).on_complete(trial, last, &states(&self.trials));
                        self.finish(trial, Status::Completed, None)?;
                        self.stop_others(&effects)
                    }
                    Some(mut message) => {
                        // The command's last words, unless they are what the launcher said
                        // already.
                        if let Some(l) = launcher::last_line(&t.dir.join("stderr.log"))
                            && !l.ends_with(message.rsplit(": ").next().unwrap_or_default())
                        {
                            message = format!("{message}: {l}");
                        }
                        self.failed(trial, message)
                    }
                }
            }
        }
    }

    pub(super) fn terminate(&mut self, i: usize) {
        if let Some(p) = &mut self.trials[i].proc
            && p.term_sent.is_none()
        {
            self.launcher.signal(p.pid, Signal::Stop);
            p.term_sent = Some(Instant::now());
        }
    }

    /// SIGKILL for trials still running a grace period after their SIGTERM.
    pub(super) fn enforce_deadlines(&mut self) {
        for t in &mut self.trials {
            if let Some(p) = &mut t.proc
                && !p.kill_sent
                && p.term_sent
                    .is_some_and(|s| s.elapsed() >= self.opts.stop_grace)
            {
                self.launcher.signal(p.pid, Signal::Kill);
                p.kill_sent = true;
            }
        }
    }

    /// Stops every running trial (SIGTERM, then SIGKILL after the grace period) and waits for
    /// them; their journal stays as it is, so `--resume` restarts them.
    pub(super) fn shut_down(&mut self) {
        log::info!(
            "interrupted: stopping {} running trial(s)",
            self.slots.iter().flatten().count()
        );
        for i in 0..self.trials.len() {
            self.terminate(i);
        }
        let deadline = Instant::now() + self.opts.stop_grace + Duration::from_secs(5);
        while self.slots.iter().any(Option::is_some) && Instant::now() < deadline {
            match self.rx.recv_timeout(Duration::from_millis(50)) {
                // Results still in the pipes are journaled: a trial's checkpoint may hold them.
                Ok(msg @ (Msg::Line { .. } | Msg::LongLine { .. })) => {
                    if let Err(e) = self.handle(msg) {
                        log::info!("{}", e.describe());
                    }
                }
                // Ended by our SIGTERM: unfinished, not failed.
                Ok(Msg::Exit {
                    trial,
                    attempt,
                    status,
                }) => {
                    let t = &mut self.trials[trial];
                    if let Some(p) = t.proc.take_if(|p| p.attempt == attempt) {
                        self.slots[p.slot] = None;
                        t.files = None;
                        let _ = self.launcher.ended(p.pid, &status);
                    }
                }
                Err(_) => {}
            }
            self.enforce_deadlines();
        }
    }
}
