//! The sweep's end: the best trial, the summary record, and the text of results.csv, best.json
//! and metric.svg.

use super::*;

/// The best of `trials` by the metric in `mode`: Ray's get_best_result leaves out trials whose
/// metric is NaN or infinite; a trial in error is never the best (its last result is where it
/// broke off).
pub(super) fn best(trials: &[Trial], mode: search::asha::Mode) -> Option<&Trial> {
    trials
        .iter()
        .filter(|t| t.status != Status::Error)
        .filter(|t| t.last_point().is_some_and(|(_, m)| m.is_finite()))
        .fold(None, |best: Option<&Trial>, t| match best {
            Some(b) if !mode.better(t.last_point().unwrap().1, b.last_point().unwrap().1) => {
                Some(b)
            }
            _ => Some(t),
        })
}

impl View<'_> {
    pub(super) fn best(&self) -> Option<&Trial> {
        best(self.trials, self.def.asha.mode)
    }

    pub(super) fn summary(&self, out_dir: &Path, elapsed: Duration) -> SweepSummary {
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
            out_dir: out_dir.to_path_buf(),
            elapsed_ms: elapsed.as_millis() as u64,
        }
    }

    /// best.json's text: the best trial (its config, metric and directory), `null` when no
    /// trial has a result.
    pub(super) fn best_json(&self, summary: &SweepSummary) -> Vec<u8> {
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
        json
    }

    /// results.csv's text: a row per trial.
    pub(super) fn results_csv(&self) -> String {
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
        crate::files::results_csv(
            &rows,
            &self.def.time_attr,
            &self.def.metric,
            self.def.asha.mode,
        )
    }

    /// metric.svg's text.
    pub(super) fn plot(&self) -> String {
        let curves: Vec<crate::plot::Curve<'_>> = self
            .trials
            .iter()
            .filter(|t| !t.history.is_empty())
            .map(|t| crate::plot::Curve {
                trial: t.id,
                status: t.status.name(),
                config: super::table::config_text(&t.config),
                points: &t.history,
            })
            .collect();
        crate::plot::svg(
            &curves,
            &self.def.time_attr,
            &self.def.metric,
            self.best().map(|t| t.id),
        )
    }
}
