//! Records on stdout.

use std::io::{self, BufWriter, Write};

use serde::Serialize;

/// Stdout went away (a closed pipe): the tool stops quietly with exit 141, as SIGPIPE would.
#[derive(Debug)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout closed")
    }
}

impl std::error::Error for StdoutClosed {}

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

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
