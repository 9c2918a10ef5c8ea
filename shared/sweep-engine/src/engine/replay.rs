//! `--resume`: the journal replayed through a fresh scheduler, in its order.

use super::*;

impl Engine<'_> {
    /// Rebuilds the trials' state and the scheduler's rungs from the journal, in its order.
    ///
    /// Kept in one piece: one match over the journal's entry kinds, in the order they were
    /// written.
    pub(super) fn replay(&mut self, entries: &[Entry]) -> Result<()> {
        let mut decided: Vec<Option<Status>> = vec![None; self.trials.len()];
        for e in entries {
            if let Some(trial) = e.trial()
                && trial >= self.trials.len()
            {
                return Err(Error::Journal(format!(
                    "the journal names trial {trial}, but this sweep has {} trials: was it written \
                     by another sweep?",
                    self.trials.len()
                )));
            }
            match e {
                Entry::Sweep { .. } => {}
                Entry::Suggest { trial, config, .. } if self.search.makes_trials() => {
                    // Made as it was: the same results, the same draws.
                    self.make(*trial, Some(config))?;
                }
                Entry::Suggest { trial, config, .. } => {
                    // The sampler's stream advances as it did: the same history, the same draws.
                    let again = self.search.suggest(*trial, &self.trials)?;
                    if again != *config {
                        return Err(Error::Journal(format!(
                            "the journal's config for trial {trial} differs from this sweep's TPE suggestion: was it written by another version?"
                        )));
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
                    no_state,
                } => {
                    self.trials[*trial].push_result(*time, *metric, record);
                    self.search.scheduler.set_has_state(*trial, !no_state);
                    let (v, effects) = self.search.scheduler.on_result(
                        *trial,
                        *time,
                        *metric,
                        *waiting,
                        &states(&self.trials),
                    );
                    self.replay_stops(&effects, &mut decided);
                    (self.search).observe(&self.trials[*trial].config, v.action, &effects, *metric);
                    let copied = effects.exploit.as_ref().map(|e| Copied {
                        from: e.from,
                        config: e.config.clone(),
                    });
                    if copied != *exploit || effects.save != *save {
                        return Err(Error::Journal(format!(
                            "the journal's copy or save for trial {trial} at {time} differs from this sweep's population-based training: was it written by another version?"
                        )));
                    }
                    if let Some(e) = &effects.exploit {
                        self.trials[*trial].take_copy(e);
                    }
                    let t = &mut self.trials[*trial];
                    if (v.action == Action::Stop) != *stop || (v.action == Action::Pause) != *pause
                    {
                        return Err(Error::Journal(format!(
                            "the journal's decision for trial {trial} at {time} differs from this sweep's scheduler: was it written by another version?"
                        )));
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
                        self.search
                            .scheduler
                            .on_error(*trial, &states(&self.trials))
                    } else {
                        (self.search.scheduler).on_complete(*trial, last, &states(&self.trials))
                    };
                    decided[*trial] = None;
                    self.replay_stops(&effects, &mut decided);
                }
                Entry::Unstick => {
                    let effects = self.search.scheduler.unstick(&states(&self.trials));
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
        let pending = self.trials[..self.search.made]
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
    pub(super) fn replay_stops(&mut self, effects: &Effects, decided: &mut [Option<Status>]) {
        for &x in &effects.stop {
            decided[x] = Some(self.trials[x].stopped_at_last(effects.completes(x)));
        }
    }
}
