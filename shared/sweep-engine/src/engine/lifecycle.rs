//! A trial's life: started (its config suggested first when TPE chooses it), paused, stopped,
//! failed (retried or an error) and ended, each journalled before it is printed.

use std::fs::File;

use crate::journal::FileId;

use super::*;

/// Trial directory `dir`'s stdout.log opened for an attempt (or why it cannot be: a file in
/// its place fails the launch), where the attempt's output starts in it, and which file it is.
fn open_stdout(dir: &Path) -> (Result<File>, u64, Option<FileId>) {
    let stdout = std::fs::create_dir_all(dir)
        .map_err(Error::from)
        .and_then(|()| crate::files::open_stdout_log(&dir.join(launcher::STDOUT_LOG)));
    let dir = std::fs::metadata(dir);
    match (stdout.as_ref().map(File::metadata), dir) {
        (Ok(Ok(m)), Ok(dir)) => (stdout, m.len(), Some(FileId::found(&dir, &m))),
        (Ok(Ok(m)), Err(_)) => (stdout, m.len(), None),
        _ => (stdout, 0, None),
    }
}

impl Engine<'_> {
    pub(super) fn start(&mut self, i: usize, slot: usize) -> Result<()> {
        if !self.trials[i].chosen {
            let config = self.search.suggest(i, &self.trials)?;
            self.journal.append(&Entry::Suggest {
                trial: i,
                config: config.clone(),
                model: false,
            })?;
            let t = &mut self.trials[i];
            t.config = config;
            t.chosen = true;
        }
        // Nothing an earlier run left running may write into the output of this attempt.
        self.procs.end_leftovers(&self.trials[i]);
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
        let (stdout, stdout_from, stdout_file) = open_stdout(&t.dir);
        t.stdout_file = stdout_file.map(|f| f.file);
        self.journal.append(&Entry::Start {
            trial: i,
            attempt,
            slot,
            stdout_from: Some(stdout_from),
            counted_from: Some(t.counted_from),
            stdout_file,
        })?;
        let stdout = stdout.map(|file| launcher::Stdout {
            file,
            from: stdout_from,
        });
        let launched = self.procs.launch(&self.trials[i], slot, attempt, stdout);
        let t = &self.trials[i];
        let event = match (attempt, resumed) {
            (1, _) => "start",
            (_, true) => "resume",
            _ => "retry",
        };
        let record = TrialRecord {
            slot: Some(slot),
            message: if attempt > 1 && !resumed {
                t.message.clone()
            } else {
                None
            },
            ..t.record(event)
        };
        self.emit(Record::Trial(record))?;
        self.output.dirty = true;
        match launched {
            Ok((pid, files)) => {
                let t = &mut self.trials[i];
                t.files = Some(files);
                t.proc = Some(Proc::new(pid, slot, attempt));
                self.procs.slots[slot] = Some(i);
                Ok(())
            }
            Err(e) => self.failed(i, e.describe()),
        }
    }

    /// The median rule's pause: the trial's process is stopped as a stopped trial's is, and the
    /// trial runs again (its command restarted in its directory) when no pending trial is left.
    pub(super) fn pause(&mut self, i: usize, time: f64) -> Result<()> {
        let t = &mut self.trials[i];
        t.status = Status::Paused;
        let record = TrialRecord {
            slot: t.proc.as_ref().map(|p| p.slot),
            stopped_at: Some(time),
            last: t.last.clone().map(Value::Object),
            ..t.record("pause")
        };
        self.emit(Record::Trial(record))?;
        self.terminate(i);
        self.output.dirty = true;
        Ok(())
    }

    /// A halving's judgements as decision records, then the other trials a decision stopped
    /// (each ends: completed if it won every halving of its bracket, else stopped).
    pub(super) fn stop_others(&mut self, effects: &Effects) -> Result<()> {
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
    pub(super) fn unstick(&mut self) -> Result<()> {
        self.journal.append(&Entry::Unstick)?;
        let effects = self.search.scheduler.unstick(&states(&self.trials));
        log::info!(
            "every trial left is paused and its bracket would wait for ever: processing it again"
        );
        self.stop_others(&effects)?;
        if self
            .search
            .scheduler
            .choose(&states(&self.trials))
            .is_some()
        {
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
    pub(super) fn stop_trial(
        &mut self,
        i: usize,
        complete: bool,
        message: Option<String>,
    ) -> Result<()> {
        let last = self.trials[i].last_point();
        let more = (self.search.scheduler).on_complete(i, last, &states(&self.trials));
        let status = self.trials[i].stopped_at_last(complete);
        self.finish(i, status, message)?;
        self.terminate(i);
        self.stop_others(&more)
    }

    /// A failed attempt: retried while --max-failures allows, else the trial's end.
    pub(super) fn failed(&mut self, i: usize, message: String) -> Result<()> {
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
            let effects = self.search.scheduler.on_error(i, &states(&self.trials));
            self.stop_others(&effects)
        }
    }

    /// Journals and prints a trial's end.
    pub(super) fn finish(
        &mut self,
        i: usize,
        status: Status,
        message: Option<String>,
    ) -> Result<()> {
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
            status: Some(status.name().into()),
            stopped_at: t.stopped_at,
            last: t.last.clone().map(Value::Object),
            message,
            ..t.record("end")
        };
        self.emit(Record::Trial(record))?;
        self.output.dirty = true;
        Ok(())
    }
}
