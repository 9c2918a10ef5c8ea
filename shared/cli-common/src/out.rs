//! Records on stdout.

use std::io::{self, BufWriter, Write};

use serde::Serialize;

/// Stdout went away (a closed pipe): the tool stops quietly with exit 141, as SIGPIPE would.
#[derive(Debug, thiserror::Error)]
#[error("stdout closed")]
pub struct StdoutClosed;

/// Writes one compact JSON record per line. On stdout every record is flushed as it is written
/// (a pipe streams, and a killed run's finished items are on record); a tool that prints many
/// records per millisecond (shard-list) turns that off with `set_flush_each(false)`.
pub struct JsonlOut {
    inner: Box<dyn Write + Send>,
    flush_each: bool,
    records: usize,
}

impl std::fmt::Debug for JsonlOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonlOut")
            .field("records", &self.records)
            .finish()
    }
}

impl JsonlOut {
    pub fn stdout() -> Self {
        let mut out = Self::new(Box::new(BufWriter::with_capacity(1 << 16, io::stdout())));
        out.flush_each = true;
        out
    }

    pub fn new(inner: Box<dyn Write + Send>) -> Self {
        Self {
            inner,
            flush_each: false,
            records: 0,
        }
    }

    /// Flush after every record.
    pub fn set_flush_each(&mut self, yes: bool) {
        self.flush_each = yes;
    }

    /// Number of records written so far.
    pub fn records(&self) -> usize {
        self.records
    }

    /// Writes one record. Fails with [`StdoutClosed`] when the reader has gone.
    pub fn emit<T: Serialize + ?Sized>(&mut self, record: &T) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(record)?;
        line.push(b'\n');
        self.inner.write_all(&line).map_err(map_pipe)?;
        self.records += 1;
        if self.flush_each {
            self.flush()?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> anyhow::Result<()> {
        self.inner.flush().map_err(map_pipe)
    }
}

fn map_pipe(e: io::Error) -> anyhow::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        anyhow::Error::new(StdoutClosed)
    } else {
        anyhow::Error::new(e).context("writing records to stdout")
    }
}

/// A per-item tool's counts, kept as its records go out, and the summary record and outcome
/// that end its stream.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub ok: usize,
    /// Items whose output already existed.
    pub skipped: usize,
    /// Items that failed (each has an error record).
    pub failed: usize,
}

impl Tally {
    /// Emits an item's record, counted as done (or skipped), or its error record, counted as
    /// failed.
    pub fn emit<R: Serialize>(
        &mut self,
        out: &mut JsonlOut,
        item: &Result<R, records::ErrorRecord>,
        skipped: impl FnOnce(&R) -> bool,
    ) -> anyhow::Result<()> {
        match item {
            Ok(r) => {
                self.done(skipped(r));
                out.emit(r)
            }
            Err(e) => {
                self.failed += 1;
                out.emit(e)
            }
        }
    }

    /// One item done, or skipped because its output existed.
    pub fn done(&mut self, skipped: bool) {
        if skipped {
            self.skipped += 1
        } else {
            self.ok += 1
        }
    }

    /// The summary record of these counts; the tool adds what else it reports.
    pub fn summary(&self, started: std::time::Instant) -> records::Summary {
        records::Summary {
            ok: self.ok,
            skipped: self.skipped,
            failed: self.failed,
            elapsed_ms: started.elapsed().as_millis() as u64,
            ..Default::default()
        }
    }

    /// The run's outcome; with failures, `tool` says how many on stderr (unless `quiet`).
    pub fn outcome(&self, tool: &str, quiet: bool) -> crate::Outcome {
        if !quiet && self.failed > 0 {
            eprintln!(
                "{tool}: {} of {} inputs failed (see the error records)",
                self.failed,
                self.ok + self.skipped + self.failed
            );
        }
        crate::Outcome::from_failures(self.failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_tally_counts_what_it_emits() {
        let buf = Shared::default();
        let mut out = JsonlOut::new(Box::new(buf.clone()));
        let mut t = Tally::default();
        let err = records::ErrorRecord {
            input: "b".into(),
            message: "m".into(),
        };
        for (item, skipped) in [(Ok(1), false), (Ok(2), true), (Err(err), false)] {
            t.emit(&mut out, &item, |_| skipped).unwrap();
        }
        assert_eq!((t.ok, t.skipped, t.failed), (1, 1, 1));
        assert_eq!(out.records(), 3);
        let s = t.summary(std::time::Instant::now());
        assert_eq!((s.ok, s.skipped, s.failed), (1, 1, 1));
        assert_eq!(t.outcome("x", true), crate::Outcome::ItemsFailed);
        assert_eq!(Tally::default().outcome("x", true), crate::Outcome::Ok);
    }

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn one_compact_record_per_line() {
        let buf = Shared::default();
        let mut out = JsonlOut::new(Box::new(buf.clone()));
        out.emit(&serde_json::json!({"type": "x", "a": [1, 2]}))
            .unwrap();
        out.emit(&serde_json::json!({"type": "y"})).unwrap();
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text, "{\"a\":[1,2],\"type\":\"x\"}\n{\"type\":\"y\"}\n");
        assert_eq!(out.records(), 2);
    }
}
