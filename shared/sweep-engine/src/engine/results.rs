//! A trial's result: parsed, journalled, judged by the scheduler and acted on (population-based
//! training's copies included).

use super::*;

/// A stdout line read as a result: its record, metric and time, or why it is none.
#[derive(Debug, PartialEq)]
enum Parsed {
    /// Not a result (other output, or a record without the metric): ignored quietly.
    Other,
    /// A record that cannot be used: ignored with this warning.
    Unusable(String),
    /// A result: its record, metric, time (`None`: counted, as Ray's training_iteration) and
    /// the flattened paths of its non-finite values.
    Result {
        record: Map<String, Value>,
        metric: f64,
        time: Option<f64>,
        non_finite: Vec<(String, f64)>,
    },
}

/// Reads one line of a trial as a result of `metric` by `time_attr`. NaN and ±Infinity as
/// Python writes them are results, as Ray takes them (ASHA records a NaN, and its cutoffs
/// leave NaNs out).
fn parse(line: &[u8], metric: &str, time_attr: &str) -> Parsed {
    let Some((record, non_finite, non_finite_paths)) = crate::pyjson::parse_record(line) else {
        // Not a record: other output, unless it names the metric (a number out of range is
        // no JSON, nor are bytes that are not UTF-8).
        let text = String::from_utf8_lossy(line);
        if text.trim_start().starts_with('{') && text.contains(&format!("\"{metric}\"")) {
            if std::str::from_utf8(line).is_err() {
                return Parsed::Unusable("is not UTF-8, so not JSON: ignored".into());
            }
            return Parsed::Unusable("is not valid JSON (a number out of range?): ignored".into());
        }
        return Parsed::Other;
    };
    let metric_value = match (record.get(metric), non_finite.get(metric)) {
        (_, Some(&x)) => x,
        (None, None) => return Parsed::Other,
        (Some(v), None) => match v.as_f64() {
            Some(m) => m,
            None => {
                return Parsed::Unusable(format!("has \"{metric}\": {v}, not a number: ignored"));
            }
        },
    };
    if let Some(x) = non_finite.get(time_attr) {
        return Parsed::Unusable(format!(
            "has \"{time_attr}\": {x}, not a finite time: ignored"
        ));
    }
    let time = match record.get(time_attr) {
        Some(v) => match v.as_f64() {
            Some(x) => Some(x),
            None => {
                return Parsed::Unusable(format!(
                    "has \"{time_attr}\": {v}, not a number: ignored"
                ));
            }
        },
        None if time_attr == "training_iteration" => None,
        None => return Parsed::Other,
    };
    Parsed::Result {
        record,
        metric: metric_value,
        time,
        non_finite: non_finite_paths,
    }
}

impl Engine<'_> {
    /// One stdout line of a running trial.
    ///
    /// One result as the journal records it: parsed, its time checked, then journalled, judged
    /// by the scheduler and acted on, in that order (a replay depends on it).
    pub(super) fn line(&mut self, i: usize, line: &[u8]) -> Result<()> {
        let (record, metric, time, non_finite) =
            match parse(line, &self.def.metric, &self.def.time_attr) {
                Parsed::Other => return Ok(()),
                Parsed::Unusable(why) => {
                    self.warn(i, line, &why);
                    return Ok(());
                }
                Parsed::Result {
                    record,
                    metric,
                    time,
                    non_finite,
                } => (record, metric, time, non_finite),
            };
        let Some(time) = self.result_time(i, line, time) else {
            return Ok(());
        };
        let iteration = self.trials[i].history.len() + 1;
        let (verdict, effects) = self.judge(i, time, metric, &record)?;
        let full = self.full_record(i, &record, iteration);
        if let Some(f) = &mut self.trials[i].files {
            f.result(&full, time.round() as i64, &non_finite)?;
        }
        self.emit(Record::Result(TrialResult {
            trial: i,
            training_iteration: iteration,
            time,
            metric,
            record: Value::Object(record),
        }))?;
        self.act(i, time, verdict, &effects)
    }

    /// The result's time: as the record gives it, or counted from where this attempt's command
    /// started (a command restarted without state counts from 1 again, its repeats then
    /// skipped, as Ray's training_iteration starts again for a trial restored without a
    /// checkpoint). `None`: a repeat of what a restarted command reported before, skipped.
    fn result_time(&mut self, i: usize, line: &[u8], time: Option<f64>) -> Option<f64> {
        let t = &mut self.trials[i];
        if time.is_none()
            && let Some(skipped) = t.proc.as_mut().and_then(|p| p.uncountable.as_mut())
        {
            *skipped += 1;
            return None;
        }
        let time = time.unwrap_or_else(|| {
            let counted = t.proc.as_mut().map_or(0, |p| {
                p.counted += 1;
                p.counted
            });
            t.counted_from + counted as f64
        });
        let proc_last = t.proc.as_mut().and_then(|p| p.last_time.replace(time));
        if t.floor.is_some_and(|last| time <= last) {
            // Backwards within one attempt is the command's mistake: said so.
            if let Some(before) = proc_last.filter(|&before| time <= before) {
                let why = format!(
                    "has \"{}\": {time} after {before}: the time went backwards: ignored",
                    self.def.time_attr
                );
                self.warn(i, line, &why);
            }
            return None;
        }
        Some(time)
    }

    /// The result taken into trial `i`'s history, judged by the scheduler (and BOHB's model),
    /// and journalled with the verdict.
    fn judge(
        &mut self,
        i: usize,
        time: f64,
        metric: f64,
        record: &Map<String, Value>,
    ) -> Result<(search::Verdict, Effects)> {
        // Only the median rule asks (the scan over every trial stays off other sweeps' results).
        let waiting = self.search.scheduler.asks_waiting()
            && (!self.queue.is_empty()
                || (self.trials.iter()).any(|t| t.id != i && t.status == Status::Paused));
        self.trials[i].push_result(time, metric, record);
        // Population-based training copies only a trial that has state (Ray skips the exploit
        // of a trial whose save gave no checkpoint); what it saw is journalled for a replay.
        let no_state =
            self.search.scheduler.asks_state() && !crate::files::holds_state(&self.trials[i].dir);
        self.search.scheduler.set_has_state(i, !no_state);
        let (verdict, effects) =
            (self.search.scheduler).on_result(i, time, metric, waiting, &states(&self.trials));
        (self.search).observe(&self.trials[i].config, verdict.action, &effects, metric);
        self.journal.append(&Entry::Result {
            trial: i,
            time,
            metric,
            record: record.clone(),
            stop: verdict.action == Action::Stop,
            pause: verdict.action == Action::Pause,
            waiting,
            exploit: effects.exploit.as_ref().map(|e| Copied {
                from: e.from,
                config: e.config.clone(),
            }),
            save: effects.save,
            no_state,
        })?;
        Ok((verdict, effects))
    }

    /// The result as result.json holds it: the record plus Ray's bookkeeping fields (and,
    /// with population-based training, the trial's lineage).
    fn full_record(
        &self,
        i: usize,
        record: &Map<String, Value>,
        iteration: usize,
    ) -> Map<String, Value> {
        let t = &self.trials[i];
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
        if matches!(self.search.scheduler, Scheduler::Pbt { .. }) {
            // The lineage, as numbers TensorBoard plots: the copies made so far, and the trial
            // last copied (its own id before any).
            full.insert("pbt_copies".into(), Value::from(t.copies));
            full.insert(
                "pbt_copied_from".into(),
                Value::from(t.copied_from.unwrap_or(i)),
            );
        }
        full
    }

    /// What the verdict on trial `i`'s result at `time` says to do: its rung's decision
    /// printed, the trials it stops ended, a save or copy made, the trial stopped or paused.
    fn act(
        &mut self,
        i: usize,
        time: f64,
        verdict: search::Verdict,
        effects: &Effects,
    ) -> Result<()> {
        let stop = verdict.action == Action::Stop;
        if let Some(j) = verdict.rung {
            self.emit(Record::Decision(Decision {
                trial: i,
                milestone: j.milestone,
                value: j.value,
                cutoff: j.cutoff,
                action: if stop { "stop" } else { "continue" }.into(),
            }))?;
        }
        self.output.dirty = true;
        self.stop_others(effects)?;
        if effects.save {
            let (dir, saved) = (&self.trials[i].dir, self.saved_dir(i));
            if let Err(e) = crate::files::save_checkpoint(dir, &saved) {
                log::warn!("trial {i}: saving its state: {}", e.describe());
            }
        }
        if let Some(e) = &effects.exploit {
            self.copy_decided(i, time, e)?;
        }
        if stop {
            self.stop_trial(i, verdict.complete, None)?;
        }
        if verdict.action == Action::Pause && self.trials[i].status == Status::Running {
            self.pause(i, time)?;
        }
        Ok(())
    }

    /// A warning naming the trial and the line (cut to 200 characters).
    pub(super) fn warn(&self, trial: usize, line: &[u8], why: &str) {
        let line: String = String::from_utf8_lossy(line)
            .trim_end()
            .chars()
            .take(200)
            .collect();
        log::warn!("trial {trial}: the line {line:?} {why}");
    }

    /// Where population-based training saves trial `i`'s state when it is in the top quantile.
    pub(super) fn saved_dir(&self, i: usize) -> PathBuf {
        self.output
            .out_dir
            .join("pbt-checkpoints")
            .join(format!("trial-{i:04}"))
    }

    /// Where trial `i` keeps the save it copies until it runs again.
    pub(super) fn kept_dir(&self, i: usize) -> PathBuf {
        self.output
            .out_dir
            .join("pbt-checkpoints")
            .join(format!("trial-{i:04}.copy"))
    }

    /// Population-based training: trial `i`, about to run again, takes the directory of trial
    /// `from` it copies. Its own process has exited: the copied trial's save kept when the copy
    /// was decided (Ray's checkpoint to exploit), else (no save) its directory as it is now.
    pub(super) fn take_copy(&mut self, i: usize, from: usize) -> Result<()> {
        let kept = self.kept_dir(i);
        let src = if kept.exists() {
            kept.clone()
        } else {
            self.trials[from].dir.clone()
        };
        crate::files::copy_checkpoint(&src, &self.trials[i].dir)?;
        if let Err(e) = crate::files::remove(&kept) {
            log::warn!("{}", e.describe());
        }
        self.trials[i].copy_from = None;
        Ok(())
    }

    /// Population-based training decided that trial `i` copies another: its config now (an
    /// `exploit` record, and Ray's policy files: OUT_DIR/pbt_global.txt, and
    /// OUT_DIR/pbt_policy_NNNN.txt, the copied trial's policy followed by this copy), its
    /// directory when it runs again; it pauses.
    pub(super) fn copy_decided(&mut self, i: usize, time: f64, e: &pbt::Exploit) -> Result<()> {
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
            log::warn!(
                "trial {i}: keeping trial {}'s save ({}): it will copy trial {}'s directory as it is when it runs again",
                e.from,
                err.describe(),
                e.from
            );
        }
        let policy = |t: usize| self.output.out_dir.join(format!("pbt_policy_{t:04}.txt"));
        let mut lines = std::fs::read(policy(e.from)).unwrap_or_default();
        lines.extend_from_slice(format!("{row}\n").as_bytes());
        let written =
            atomic_file::write_atomic(&policy(i), |w| std::io::Write::write_all(w, &lines));
        if let Err(err) = written {
            log::warn!("{}", err.describe());
        }
        let global = self.output.out_dir.join("pbt_global.txt");
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&global)
            .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{row}\n").as_bytes()));
        if let Err(err) = appended {
            log::warn!("writing {}: {err}", global.display());
        }
        self.emit(Record::Exploit(records::Exploit {
            trial: i,
            time,
            from: e.from,
            from_time: e.from_time,
            from_config: e.from_config.clone(),
            config: e.config.clone(),
            operations: (e.operations.iter())
                .map(|(k, op)| (k.clone(), Value::String(op.clone())))
                .collect(),
        }))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result_of(line: &str) -> Parsed {
        parse(line.as_bytes(), "m", "epoch")
    }

    #[test]
    fn a_line_is_a_result_other_output_or_an_unusable_record() {
        match result_of(r#"{"epoch": 2, "m": NaN, "x": {"y": Infinity}}"#) {
            Parsed::Result {
                metric,
                time,
                non_finite,
                ..
            } => {
                assert!(metric.is_nan());
                assert_eq!(time, Some(2.0));
                assert_eq!(non_finite.len(), 2, "{non_finite:?}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(result_of("epoch 2: m = 3"), Parsed::Other);
        assert_eq!(result_of(r#"{"epoch": 2, "loss": 1}"#), Parsed::Other);
        // Without the time attribute a record is no result, unless it is counted.
        assert_eq!(result_of(r#"{"m": 1}"#), Parsed::Other);
        assert!(matches!(
            parse(br#"{"m": 1}"#, "m", "training_iteration"),
            Parsed::Result { time: None, .. }
        ));
        for (line, why) in [
            (r#"{"epoch": 1, "m": "high"}"#, "not a number"),
            (r#"{"epoch": Infinity, "m": 1}"#, "not a finite time"),
            (r#"{"epoch": "one", "m": 1}"#, "not a number"),
            (r#"{"epoch": 1, "m": 1e999}"#, "not valid JSON"),
        ] {
            match result_of(line) {
                Parsed::Unusable(w) => assert!(w.contains(why), "{line}: {w}"),
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_record_with_bytes_that_are_not_utf8_is_unusable_for_that_reason() {
        match parse(b"{\"epoch\": 1, \"m\": 1, \"s\": \"\xff\"}", "m", "epoch") {
            Parsed::Unusable(w) => assert!(w.contains("not UTF-8"), "{w}"),
            other => panic!("{other:?}"),
        }
    }
}
