//! The status table.

use super::*;

impl View<'_> {
    /// The status table: the counts, each scheduler's state, the best trial so far, and a row
    /// per trial (at the end, `sorted` by the metric).
    pub(super) fn table(&self, elapsed: Duration, sorted: bool) -> String {
        let mut s = self.counts_line(elapsed);
        s.push_str(&self.scheduler_lines());
        s.push_str(&self.best_line());
        s.push_str(&self.rows_text(sorted));
        s
    }

    /// `== sweep: N trials (...) HH:MM:SS ==`.
    fn counts_line(&self, elapsed: Duration) -> String {
        let count = |st: Status| self.trials.iter().filter(|t| t.status == st).count();
        let secs = elapsed.as_secs();
        format!(
            "== sweep: {} trials ({} running, {} pending, {}{} completed, {} stopped, {} error), {:02}:{:02}:{:02} ==\n",
            self.trials.len(),
            count(Status::Running),
            count(Status::Pending),
            match count(Status::Paused) {
                0 => String::new(),
                n => format!("{n} paused, "),
            },
            count(Status::Completed),
            count(Status::Stopped),
            count(Status::Error),
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
    }

    /// ASHA's cutoffs per bracket, HyperBand's brackets, or PBT's counts.
    fn scheduler_lines(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let time_attr = &self.def.time_attr;
        match self.scheduler {
            Scheduler::Asha(a) => {
                for (b, rungs) in a.rungs().iter().enumerate() {
                    let r: Vec<String> = rungs
                        .iter()
                        .map(|(m, c, n)| {
                            let cutoff = c.map_or("-".into(), fmt_num);
                            format!("{time_attr} {}: {cutoff} ({n})", fmt_num(*m))
                        })
                        .collect();
                    let cutoffs = if r.is_empty() {
                        "no rungs".into()
                    } else {
                        r.join(" | ")
                    };
                    let _ = writeln!(s, "ASHA bracket {b}, cutoffs: {cutoffs}");
                }
            }
            Scheduler::HyperBand(h) => {
                for (band, s_, n, milestone, done, live) in h.brackets() {
                    let _ = writeln!(
                        s,
                        "HyperBand round {band} bracket {s_}: {live} live of at most {} trials, milestone {time_attr} {}, {:.0}% done",
                        fmt_num(n),
                        fmt_num(milestone),
                        done * 100.0
                    );
                }
            }
            Scheduler::Pbt { pbt, .. } => {
                let _ = writeln!(
                    s,
                    "PBT: {} copies of a better trial, {} trials in the top quantile when compared",
                    pbt.num_perturbations, pbt.num_checkpoints
                );
            }
            _ => {}
        }
        s
    }

    /// `best so far: ...`, when a trial has a finite result.
    fn best_line(&self) -> String {
        let Some(b) = self.best() else {
            return String::new();
        };
        let (time, metric) = b.last_point().expect("best has a result");
        format!(
            "best so far: trial {} {}={} at {} {} ({})\n",
            b.id,
            self.def.metric,
            fmt_num(metric),
            self.def.time_attr,
            fmt_num(time),
            config_text(&b.config)
        )
    }

    /// The trials in table order: by trial, or (`sorted`) best first, trials without a
    /// finite result last (a NaN compares with nothing).
    fn ordered(&self, sorted: bool) -> Vec<&Trial> {
        let mut order: Vec<&Trial> = self.trials.iter().collect();
        if sorted {
            let mode = self.def.asha.mode;
            let finite = |t: &Trial| t.last_point().filter(|(_, m)| m.is_finite());
            order.sort_by(|a, b| match (finite(a), finite(b)) {
                (Some(x), Some(y)) if mode.better(x.1, y.1) => std::cmp::Ordering::Less,
                (Some(x), Some(y)) if mode.better(y.1, x.1) => std::cmp::Ordering::Greater,
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                _ => a.id.cmp(&b.id),
            });
        }
        order
    }

    /// The header and a row per trial (at most 40 while running), in aligned columns.
    fn rows_text(&self, sorted: bool) -> String {
        use std::fmt::Write as _;
        // The parameters of the first config chosen (TPE and BOHB choose theirs as trials start).
        let names: Vec<&String> = (self.trials.iter())
            .find(|t| t.chosen)
            .map(|t| t.config.keys().collect())
            .unwrap_or_default();
        let mut header = vec!["trial".to_string(), "status".into(), "slot".into()];
        header.extend(names.iter().map(|n| n.to_string()));
        header.extend([self.def.time_attr.clone(), self.def.metric.clone()]);
        let rows: Vec<Vec<String>> = (self.ordered(sorted).iter())
            .map(|t| row(t, &names))
            .collect();
        let widths: Vec<usize> = (0..header.len())
            .map(|c| {
                (rows.iter().map(|r| r[c].chars().count()))
                    .chain([header[c].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let padded: Vec<String> = (cells.iter().zip(&widths))
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            padded.join("  ").trim_end().to_string()
        };
        let mut s = String::new();
        if sorted {
            let order = if self.def.asha.mode == search::asha::Mode::Max {
                "highest first"
            } else {
                "lowest first"
            };
            let _ = writeln!(s, "trials by their last {} ({order}):", self.def.metric);
        }
        let _ = writeln!(s, "{}", line(&header));
        let max_rows = if sorted { usize::MAX } else { 40 };
        for r in rows.iter().take(max_rows) {
            let _ = writeln!(s, "{}", line(r));
        }
        if rows.len() > max_rows {
            let _ = writeln!(s, "... {} more trials", rows.len() - max_rows);
        }
        s
    }
}

/// A trial's row: its number, status, slot, the `names` parameters, its last time and metric.
fn row(t: &Trial, names: &[&String]) -> Vec<String> {
    let mut r = vec![
        t.id.to_string(),
        t.status.name().to_string(),
        t.proc.as_ref().map_or("-".into(), |p| p.slot.to_string()),
    ];
    r.extend(
        names
            .iter()
            .map(|n| t.config.get(*n).map_or(String::new(), cell)),
    );
    let (time, metric) = t
        .last_point()
        .map_or(("-".into(), "-".into()), |(x, y)| (fmt_num(x), fmt_num(y)));
    r.extend([time, metric]);
    r
}

/// Up to five significant digits, as Ray's table shows numbers.
fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return crate::pyjson::spelling(x).into();
    }
    if x == x.trunc() && x.abs() < 1e15 {
        return format!("{}", x as i64);
    }
    let a = x.abs();
    if (1e-3..1e5).contains(&a) {
        let digits = (4 - a.log10().floor() as i32).max(0) as usize;
        let s = format!("{x:.digits$}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{x:.4e}")
    }
}

fn cell(v: &Value) -> String {
    match v {
        Value::Number(n) => n.as_f64().map_or(n.to_string(), fmt_num),
        other => crate::template::render(other).chars().take(24).collect(),
    }
}

pub(super) fn config_text(c: &Config) -> String {
    c.iter()
        .map(|(k, v)| format!("{k}={}", cell(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_the_table() {
        assert_eq!(fmt_num(4.0), "4");
        assert_eq!(fmt_num(91.23456), "91.235");
        assert_eq!(fmt_num(0.012345678), "0.012346");
        assert_eq!(fmt_num(1.5e-7), "1.5000e-7");
        // Non-finite values as the records and files spell them.
        let spelled: Vec<String> = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY]
            .into_iter()
            .map(fmt_num)
            .collect();
        assert_eq!(spelled, ["NaN", "Infinity", "-Infinity"]);
    }
}
