//! Python's file object over a file's bytes, as Pillow's plugins (GIF, BMP) read files:
//! `read(n)` returns what is there, short at the end, and never fails.

pub(crate) struct PyFile<'a> {
    pub(crate) bytes: &'a [u8],
    /// The position, which may lie past the end (a seek beyond it).
    pub(crate) pos: usize,
}

impl<'a> PyFile<'a> {
    pub(crate) fn new(bytes: &'a [u8], pos: usize) -> Self {
        Self { bytes, pos }
    }

    /// `fp.read(n)`: up to `n` bytes from the position, fewer at the end.
    pub(crate) fn read(&mut self, n: usize) -> &'a [u8] {
        let end = self.pos.saturating_add(n).min(self.bytes.len());
        let start = self.pos.min(end);
        self.pos = end.max(self.pos);
        &self.bytes[start..end]
    }
}
