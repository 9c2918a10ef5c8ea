//! `--resume`: the journal replayed through a fresh scheduler, in its order; then what the
//! unfinished trials wrote that the journal lacks (the sweep died before reading it) taken from
//! their stdout.log, as if read then.

use std::io::{BufReader, Read, Seek};

use crate::journal::FileId;

use super::*;

/// Where an attempt started, as its start entry says: its slot, where its output starts in
/// the trial's stdout.log, and where its counted training_iteration goes on from.
#[derive(Debug, Clone, Copy)]
struct Started {
    attempt: usize,
    slot: usize,
    stdout_from: u64,
    counted_from: f64,
    /// Which stdout.log it was, where the journal says.
    stdout_file: Option<FileId>,
}

/// The part of a trial's stdout.log its attempt wrote that the sweep had not read: from
/// `from` to `len`; `cut`: the file was cut since the attempt started.
struct Unread {
    file: std::fs::File,
    from: u64,
    len: u64,
    cut: bool,
}

/// The trials whose start entries name each file and directory (device and inode, and birth
/// time where known) as their stdout.log's: the first one, and whether others do too.
#[derive(Default)]
struct Owners(std::collections::HashMap<([u64; 2], Option<u64>), (usize, bool)>);

/// A file's and its directory's ids, each with its birth time where known.
fn both(f: &FileId) -> [([u64; 2], Option<u64>); 2] {
    [
        (f.dir, f.born.map(|b| b[0])),
        (f.file, f.born.map(|b| b[1])),
    ]
}

impl Owners {
    fn add(&mut self, trial: usize, f: &FileId) {
        for id in both(f) {
            let o = self.0.entry(id).or_insert((trial, false));
            o.1 |= o.0 != trial;
        }
    }

    /// Whether a trial other than `trial` wrote to `now`'s file or in its directory (named
    /// without a birth time by an older version).
    fn other_than(&self, trial: usize, now: &FileId) -> bool {
        let other = |id| self.0.get(&id).is_some_and(|&(t, more)| more || t != trial);
        both(now)
            .into_iter()
            .any(|(id, born)| other((id, born)) || born.is_some() && other((id, None)))
    }
}

/// A result entry's fields, as the journal holds them.
struct Journalled<'e> {
    trial: usize,
    time: f64,
    metric: f64,
    record: &'e Map<String, Value>,
    stop: bool,
    pause: bool,
    waiting: bool,
    exploit: &'e Option<Copied>,
    save: bool,
    no_state: bool,
}

/// A start entry of a journal of `entries` entries: its trial and where its attempt started
/// (`None` for another entry, or a start from before stdout.log), its numbers checked.
fn started_from(e: &Entry, entries: usize) -> Result<Option<(usize, Started)>> {
    let Entry::Start {
        trial,
        attempt,
        slot,
        stdout_from,
        counted_from,
        stdout_file,
    } = e
    else {
        return Ok(None);
    };
    // Each attempt has its start entry: one numbered past them was written by no sweep (and
    // the next attempt's number would wrap round).
    if *attempt > entries {
        return Err(differs(format!(
            "start of trial {trial} has attempt {attempt}, more than it has entries"
        )));
    }
    // Where counting goes on from is a time the sweep had: never below zero.
    if let Some(c) = counted_from
        && !(c.is_finite() && *c >= 0.0)
    {
        return Err(differs(format!(
            "start of trial {trial} has counted_from {c}"
        )));
    }
    Ok(stdout_from.map(|stdout_from| {
        let s = Started {
            attempt: *attempt,
            slot: *slot,
            stdout_from,
            counted_from: counted_from.unwrap_or(0.0),
            stdout_file: *stdout_file,
        };
        (*trial, s)
    }))
}

/// The error for a journalled step this sweep would not have taken.
fn differs(what: String) -> Error {
    Error::Journal(format!(
        "the journal's {what}: was it written by another version?"
    ))
}

impl Engine<'_> {
    /// Rebuilds the trials' state and the scheduler's rungs from the journal, in its order:
    /// each entry applied as the sweep applied it when it was written, then the trials a
    /// decision ended whose end was not written ended, and the unfinished ones queued.
    pub(super) fn replay(&mut self, entries: &[Entry]) -> Result<()> {
        // The status a replayed decision gave a trial, until its end entry is read.
        let mut decided: Vec<Option<Status>> = vec![None; self.trials.len()];
        let mut started: Vec<Option<Started>> = vec![None; self.trials.len()];
        // Each attempt's stdout.log, as its start entry names it, and its trial.
        let mut files = Owners::default();
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
            if let Some((trial, s)) = started_from(e, entries.len())? {
                if let Some(f) = &s.stdout_file {
                    files.add(trial, f);
                }
                started[trial] = Some(s);
            }
            self.replay_entry(e, &mut decided)?;
        }
        // Decided but killed before the end was written: end them now.
        for (i, d) in decided.into_iter().enumerate() {
            if let Some(status) = d {
                self.finish(i, status, None)?;
            }
        }
        // The unfinished trials' unread output, read with the queue a running sweep had then
        // (the trials not yet started).
        self.queue = (self.trials[..self.search.made].iter())
            .filter(|t| t.status == Status::Pending)
            .map(|t| t.id)
            .collect();
        for (i, s) in started.into_iter().enumerate() {
            if let Some(s) = s
                && self.trials[i].status == Status::Running
            {
                // Its processes the dead sweep left running are ended first: what they wrote
                // until then is read as the dead attempt's, nothing after it as the next's.
                // They write to the file its start entry names, if in this directory (in a
                // copy they write to the original).
                let t = &mut self.trials[i];
                let dir = std::fs::metadata(&t.dir).ok();
                let here = (s.stdout_file).filter(|f| dir.as_ref().is_some_and(|d| f.in_dir(d)));
                t.stdout_file = here.map(|f| f.file);
                self.procs.end_leftovers(&self.trials[i]);
                self.read_unread(i, s, &files)?;
            }
        }
        self.requeue();
        Ok(())
    }

    /// What of trial `i`'s stdout.log at `path` attempt `s` wrote and the sweep had not read;
    /// `None` when there is nothing of the attempt's to read (warned when something other than
    /// its file is in its place: another trial's, as `files` names them, or another file in its
    /// directory).
    fn unread_part(
        &self,
        (i, s): (usize, &Started),
        path: &Path,
        files: &Owners,
    ) -> Result<Option<Unread>> {
        if std::fs::symlink_metadata(path).is_err() {
            return Ok(None); // nothing written
        }
        // Not a regular file (put in its place since), or a link: nothing is read, and the
        // trial's launch fails on it as on any of its files.
        let file = match crate::files::open_stdout_log(path) {
            Ok(f) => f,
            Err(e) => {
                log::warn!(
                    "trial {i}: {}: its unread results are not read",
                    e.describe()
                );
                return Ok(None);
            }
        };
        let meta = file
            .metadata()
            .with_context(|| format!("reading {}", path.display()))?;
        // Another file in its place (renamed over it, as logrotate's default `create` leaves a
        // new one) holds nothing of this attempt's; in a copy of the sweep's directory (other
        // inodes throughout) nothing can be told.
        let now = (std::fs::metadata(&self.trials[i].dir).ok()).map(|d| FileId::found(&d, &meta));
        let replaced = |id: FileId| now.is_some_and(|n| id.same_dir(&n) && !id.same_file(&n));
        // Another trial's file or directory (the trials' directories swapped, linked or moved
        // into each other's places) holds nothing of this trial's either.
        let another = now.is_some_and(|n| files.other_than(i, &n));
        if another || s.stdout_file.is_some_and(replaced) {
            log::warn!(
                "trial {i}: {} is not the file its last attempt wrote to ({} since): its unread \
                 results are not read",
                path.display(),
                match another {
                    true => "another trial's file or directory put in its place",
                    false => "replaced",
                }
            );
            return Ok(None);
        }
        let len = meta.len();
        // Shorter than where the attempt started: cut since (as logrotate's copytruncate
        // does), so what it holds was written after the cut (lines read already are repeats),
        // or kept from before (a cut to a length other than nothing): results with their time
        // are placed by it; counted ones cannot be, and are skipped.
        let cut = len < s.stdout_from;
        let from = if cut {
            log::warn!(
                "trial {i}: {} has {len} bytes, fewer than the {} it had when the trial's last \
                 attempt started: it was cut since; read from its start",
                path.display(),
                s.stdout_from
            );
            0
        } else {
            s.stdout_from
        };
        Ok((len > from).then_some(Unread {
            file,
            from,
            len,
            cut,
        }))
    }

    /// Trial `i`'s unfinished attempt `s`: the lines it wrote to its stdout.log (from where the
    /// attempt started) taken as the running sweep would have taken them; those journalled
    /// already are repeats, skipped.
    fn read_unread(&mut self, i: usize, s: Started, files: &Owners) -> Result<()> {
        let path = self.trials[i].dir.join(launcher::STDOUT_LOG);
        let Some(Unread {
            mut file,
            from,
            len,
            cut,
        }) = self.unread_part((i, &s), &path, files)?
        else {
            return Ok(());
        };
        file.seek(std::io::SeekFrom::Start(from))
            .with_context(|| format!("reading {}", path.display()))?;
        let mut r = BufReader::new(file.take(len - from));
        let t = &mut self.trials[i];
        t.files = Some(TrialFiles::open(&t.dir, i, s.attempt, &t.config, t.copies)?);
        t.counted_from = s.counted_from;
        t.proc = Some(Proc {
            uncountable: cut.then_some(0),
            ..Proc::read_back(s.attempt, s.slot)
        });
        let read = loop {
            match launcher::read_line_capped(&mut r, launcher::MAX_LINE) {
                Ok(launcher::Read::Line(line)) if self.takes_line(i, s.attempt) => {
                    if let Err(e) = self.line(i, &line) {
                        break Err(e);
                    }
                }
                Ok(launcher::Read::TooLong(bytes)) => procs::long_line(i, bytes),
                Ok(_) => break Ok(()),
                Err(e) => break Err(Error::from(e).context(format!("reading {}", path.display()))),
            }
        };
        let t = &mut self.trials[i];
        if let Some(n) = t.proc.take().and_then(|p| p.uncountable).filter(|&n| n > 0) {
            log::warn!(
                "trial {i}: {n} result(s) without \"{}\" in {} not taken: the file was cut, so \
                 where they stand in the count is unknown",
                self.def.time_attr,
                path.display()
            );
        }
        t.files = None;
        read
    }

    /// One journal entry, applied.
    fn replay_entry(&mut self, e: &Entry, decided: &mut [Option<Status>]) -> Result<()> {
        match e {
            Entry::Sweep { .. } => {}
            Entry::Suggest { trial, config, .. } => self.replay_suggest(*trial, config)?,
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
            } => self.replay_result(
                Journalled {
                    trial: *trial,
                    time: *time,
                    metric: *metric,
                    record,
                    stop: *stop,
                    pause: *pause,
                    waiting: *waiting,
                    exploit,
                    save: *save,
                    no_state: *no_state,
                },
                decided,
            )?,
            Entry::Failure { trial, .. } => self.trials[*trial].failures += 1,
            Entry::End {
                trial,
                status,
                message,
            } => self.replay_end(*trial, status, message, decided),
            Entry::Unstick => {
                let effects = self.search.scheduler.unstick(&states(&self.trials));
                self.replay_stops(&effects, decided);
            }
        }
        Ok(())
    }

    /// A config made as it was: BOHB's trial made again, or TPE's sampler advanced as it did
    /// (the same history, the same draws), each checked against the journal's.
    fn replay_suggest(&mut self, trial: usize, config: &Config) -> Result<()> {
        if self.search.makes_trials() {
            return self.make(trial, Some(config));
        }
        let again = self.search.suggest(trial, &self.trials)?;
        if again != *config {
            return Err(differs(format!(
                "config for trial {trial} differs from this sweep's TPE suggestion"
            )));
        }
        let t = &mut self.trials[trial];
        t.config = again;
        t.chosen = true;
        Ok(())
    }

    /// A result given to the scheduler again: its verdict, copy and save must be the
    /// journal's.
    fn replay_result(&mut self, r: Journalled<'_>, decided: &mut [Option<Status>]) -> Result<()> {
        let (trial, time) = (r.trial, r.time);
        self.trials[trial].push_result(time, r.metric, r.record);
        self.search.scheduler.set_has_state(trial, !r.no_state);
        let (v, effects) = self.search.scheduler.on_result(
            trial,
            time,
            r.metric,
            r.waiting,
            &states(&self.trials),
        );
        self.replay_stops(&effects, decided);
        (self.search).observe(&self.trials[trial].config, v.action, &effects, r.metric);
        let copied = effects.exploit.as_ref().map(|e| Copied {
            from: e.from,
            config: e.config.clone(),
        });
        if copied != *r.exploit || effects.save != r.save {
            return Err(differs(format!(
                "copy or save for trial {trial} at {time} differs from this sweep's population-based training"
            )));
        }
        if let Some(e) = &effects.exploit {
            self.trials[trial].take_copy(e);
        }
        let t = &mut self.trials[trial];
        if (v.action == Action::Stop) != r.stop || (v.action == Action::Pause) != r.pause {
            return Err(differs(format!(
                "decision for trial {trial} at {time} differs from this sweep's scheduler"
            )));
        }
        if v.action == Action::Stop {
            decided[trial] = Some(t.stopped(v.complete, time));
        }
        if v.action == Action::Pause {
            t.status = Status::Paused;
        }
        Ok(())
    }

    /// A trial's end: its status, and the scheduler told as it was then.
    fn replay_end(
        &mut self,
        trial: usize,
        status: &str,
        message: &Option<String>,
        decided: &mut [Option<Status>],
    ) {
        let t = &mut self.trials[trial];
        t.status = match status {
            "completed" => Status::Completed,
            "stopped" => Status::Stopped,
            _ => Status::Error,
        };
        t.message = message.clone();
        let last = t.last_point();
        let effects = if t.status == Status::Error {
            self.search.scheduler.on_error(trial, &states(&self.trials))
        } else {
            (self.search.scheduler).on_complete(trial, last, &states(&self.trials))
        };
        decided[trial] = None;
        self.replay_stops(&effects, decided);
    }

    /// Unfinished trials first (they were running), then the ones never started, pending.
    fn requeue(&mut self) {
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
    }

    /// Trials a replayed decision stopped: ended when the journal says so, or at the end of
    /// the replay if it was cut before.
    pub(super) fn replay_stops(&mut self, effects: &Effects, decided: &mut [Option<Status>]) {
        for &x in &effects.stop {
            decided[x] = Some(self.trials[x].stopped_at_last(effects.completes(x)));
        }
    }
}
