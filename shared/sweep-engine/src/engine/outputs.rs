//! What the sweep shows: its records (through [`Output`]), the status table, and at its end the
//! summary, results.csv, best.json and metric.svg in its directory.

use super::*;

/// Where the sweep's records, status table and files go.
pub(super) struct Outputs<'a> {
    out: &'a mut dyn Output,
    /// The sweep's directory, absolute.
    pub(super) out_dir: PathBuf,
    started: Instant,
    last_report: Option<Instant>,
    report_every: Duration,
    /// Whether something changed since the last status table.
    pub(super) dirty: bool,
}

/// What the status table and the files at the end show.
pub(super) struct View<'v> {
    pub(super) def: &'v Definition,
    pub(super) trials: &'v [Trial],
    pub(super) scheduler: &'v Scheduler,
}

impl<'a> Outputs<'a> {
    pub(super) fn new(out: &'a mut dyn Output, out_dir: PathBuf, report_every: Duration) -> Self {
        Outputs {
            out,
            out_dir,
            started: Instant::now(),
            last_report: None,
            report_every,
            dirty: true,
        }
    }

    /// One record; its refusal ends the sweep.
    pub(super) fn emit(&mut self, record: Record) -> Result<()> {
        self.out.record(record).map_err(Error::Output)
    }

    /// The status table: at most every `report_every` while something changed, and at the
    /// end (`last`) sorted by the metric.
    pub(super) fn report(&mut self, view: &View<'_>, last: bool) {
        if !self.dirty {
            return;
        }
        if !last
            && self
                .last_report
                .is_some_and(|r| r.elapsed() < self.report_every)
        {
            return;
        }
        self.last_report = Some(Instant::now());
        self.dirty = false;
        let table = view.table(self.started.elapsed(), last);
        self.out.status(&table);
    }

    /// The summary record of the sweep so far.
    pub(super) fn summary(&self, view: &View<'_>) -> SweepSummary {
        view.summary(&self.out_dir, self.started.elapsed())
    }

    /// `best.json` (the best trial: its config, metric and directory; `null` when no trial has
    /// a result) and `results.csv` (a row per trial), each written whole.
    pub(super) fn write_results(&self, view: &View<'_>, summary: &SweepSummary) {
        let json = view.best_json(summary);
        let csv = view.results_csv();
        for (name, bytes) in [("best.json", json), ("results.csv", csv.into_bytes())] {
            self.write(name, &bytes);
        }
    }

    /// `metric.svg`.
    pub(super) fn write_plot(&self, view: &View<'_>) {
        self.write("metric.svg", view.plot().as_bytes());
    }

    /// OUT_DIR/`name`, written whole; a failure is a warning (the sweep's work is in its
    /// journal and trial directories).
    fn write(&self, name: &str, bytes: &[u8]) {
        let path = self.out_dir.join(name);
        if let Err(e) = atomic_file::write_atomic(&path, |w| std::io::Write::write_all(w, bytes)) {
            log::warn!("{}", e.describe());
        }
    }
}
