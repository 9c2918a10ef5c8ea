//! MXNet's indexed RecordIO (`PREFIX.rec` + `PREFIX.idx`), read without MXNet: what
//! insightface's `MXFaceDataset` trains from.
//!
//! A record is the magic word `0xced7230a`, a length word (the upper 3 bits a continuation flag:
//! 0 whole, 1 first part, 2 middle, 3 last; the lower 29 the part's length), the part's bytes and
//! padding to 4 bytes. MXNet's writer cuts a record wherever the magic word appears in it at a
//! 4-byte boundary and drops that word; reading puts it back between the parts. A record holds an
//! `IRHeader` (flag u32, label f32, id u64, id2 u64, little-endian), then, when flag > 0, flag
//! float32 labels, then the payload (an encoded image). The `.idx` file has a line `key\toffset`
//! per record.
//!
//! As `MXFaceDataset` reads it: when record 0's header has flag > 0, its first label is one past
//! the last image key (images are keys 1 .. label[0] - 1); else every key of the index is an
//! image. A record's class is its label, or the first of its label vector.
//!
//! `PREFIX.lst` beside them, when there is one (`pack` writes it; MXNet's `im2rec` makes its
//! records from one), names each record's file: a line per record, its key, its labels and the
//! path, separated by tabs ([`data_pack::lst_line`]); read only when a path is asked for
//! ([`RecordIo::packed_path`]).

use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The format's constants, shared with its writer.
pub use data_pack::{HEADER_BYTES, MAGIC};

/// One `.rec` file, read by position (not mapped: a file truncated while training would end the
/// process with SIGBUS; a read past its end is an error naming the file and byte), with its
/// index.
#[derive(Debug)]
pub struct RecordIo {
    rec: PathBuf,
    file: std::fs::File,
    /// The file's length when it was opened: shorter later, it was cut while read.
    len: u64,
    /// (key, offset) in the index's order.
    pub index: Vec<(u64, u64)>,
    /// `PREFIX.lst`, opened with the rest (a pack that replaces the set later does not change
    /// what this one reads), and its paths by key once asked for.
    lst: Option<(PathBuf, std::fs::File, u64)>,
    paths: std::sync::OnceLock<Result<std::collections::HashMap<u64, Vec<u8>>, String>>,
}

/// A record's `IRHeader`, its label vector, and where its payload is.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub flag: u32,
    pub label: f32,
    pub labels: Vec<f32>,
    pub id: u64,
    pub id2: u64,
    pub payload: Vec<u8>,
}

impl Record {
    /// The class: the label, or the first of the label vector (MXFaceDataset's `label[0]`).
    pub fn class(&self) -> f32 {
        if self.flag > 0 {
            self.labels[0]
        } else {
            self.label
        }
    }
}

impl RecordIo {
    /// Opens `PREFIX.rec` and reads `PREFIX.idx`.
    pub fn open(prefix: &Path) -> Result<RecordIo, String> {
        let (rec, idx) = data_pack::recordio_paths(prefix);
        let (file, len) = input_file::open(&rec).map_err(|e| e.to_string())?;
        // An index line is a key and an offset: 1 GiB of them is 50 million records.
        let text = input_file::read(&idx, 1 << 30).map_err(|e| e.to_string())?;
        let text = String::from_utf8(text)
            .map_err(|_| format!("{}: not text (a key<TAB>offset per line)", idx.display()))?;
        let mut index = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let bad = || {
                format!(
                    "{} line {}: not `key<TAB>offset`: {line:?}",
                    idx.display(),
                    n + 1
                )
            };
            let (k, o) = line.split_once('\t').ok_or_else(bad)?;
            let (k, o) = (
                k.trim().parse().map_err(|_| bad())?,
                o.trim().parse().map_err(|_| bad())?,
            );
            if o >= len {
                return Err(format!(
                    "{} line {}: offset {o} is past the end of {} ({} bytes)",
                    idx.display(),
                    n + 1,
                    rec.display(),
                    len
                ));
            }
            index.push((k, o));
        }
        let lst = data_pack::lst_path(prefix);
        let lst = match input_file::open(&lst) {
            Ok((f, len)) => Some((lst, f, len)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e.to_string()),
        };
        Ok(RecordIo {
            rec,
            file,
            len,
            index,
            lst,
            paths: std::sync::OnceLock::new(),
        })
    }

    /// The path of the file record `key` was packed from, as `PREFIX.lst` names it (the bytes
    /// [`data_pack::lst_line`] wrote), if there is a list and it names the key.
    pub fn packed_path(&self, key: u64) -> Result<Option<PathBuf>, String> {
        let Some((path, file, len)) = &self.lst else {
            return Ok(None);
        };
        let paths = self.paths.get_or_init(|| read_list(path, file, *len));
        let paths = paths.as_ref().map_err(Clone::clone)?;
        Ok(paths
            .get(&key)
            .map(|p| PathBuf::from(std::ffi::OsString::from_vec(p.clone()))))
    }

    /// The offset of record `key`.
    pub fn offset(&self, key: u64) -> Option<u64> {
        self.index.iter().find(|(k, _)| *k == key).map(|(_, o)| *o)
    }

    /// The record at `offset`, its parts joined, its header parsed; an error naming the file and
    /// offset where it is damaged or cut short.
    pub fn read(&self, offset: u64) -> Result<Record, String> {
        let data = self.joined(offset, false)?;
        parse(&data, true).map_err(|e| self.at(&e, offset as usize))
    }

    /// The class of the record at `offset` ([`Record::class`]), without copying its payload:
    /// listing a set reads its records' headers, not their images.
    pub fn class(&self, offset: u64) -> Result<f32, String> {
        let data = self.joined(offset, true)?;
        Ok(parse(&data, false)
            .map_err(|e| self.at(&e, offset as usize))?
            .class())
    }

    /// Why the data can no longer be read as it was opened, if it cannot: the file is shorter
    /// than when it was opened (truncated, or replaced, while a run reads it), named with the
    /// byte where it now ends. Not a bad record but data that shrank under the run.
    pub fn shrunk(&self) -> Option<String> {
        let now = self.file_len().ok()?;
        (now < self.len).then(|| {
            self.at(
                &format!(
                    "the file ends here, {} bytes short of the {} it had when the run opened it                      (truncated or replaced while read)",
                    self.len - now,
                    self.len
                ),
                now as usize,
            )
        })
    }

    fn at(&self, what: &str, pos: usize) -> String {
        format!("{} at byte {pos}: {what}", self.rec.display())
    }

    /// `len` bytes at `pos`, or an error naming the byte where the file ends (truncated while
    /// read, say).
    fn bytes_at(&self, pos: u64, len: usize) -> Result<Vec<u8>, String> {
        // Allocated only once the file is known to hold them: a length word sizes nothing
        // before that.
        if pos + len as u64 > self.file_len()? {
            return Err(self.at("the file ends inside a record (truncated?)", pos as usize));
        }
        let mut buf = vec![0; len];
        self.file.read_exact_at(&mut buf, pos).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                self.at("the file ends inside a record (truncated?)", pos as usize)
            } else {
                self.at(&e.to_string(), pos as usize)
            }
        })?;
        Ok(buf)
    }

    /// The magic and length words of the record part at `pos`: its continuation flag and length.
    fn part_at(&self, pos: u64) -> Result<(u32, usize), String> {
        let head = self.bytes_at(pos, 8)?;
        let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
        if word(0) != MAGIC {
            return Err(self.at("no record starts here (bad magic word)", pos as usize));
        }
        let lrec = word(4);
        Ok((lrec >> 29, (lrec & ((1 << 29) - 1)) as usize))
    }

    /// The bytes of the record at `offset` (a record MXNet's writer cut joined, the dropped
    /// magic words put back); with `head`, a record of one part is read only as far as its
    /// header and first label.
    fn joined(&self, offset: u64, head: bool) -> Result<Vec<u8>, String> {
        let (flag, len) = self.part_at(offset)?;
        if flag == 0 {
            let len = if head { len.min(HEADER_BYTES + 4) } else { len };
            return self.bytes_at(offset + 8, len);
        }
        let mut pos = offset;
        let mut data = Vec::new();
        loop {
            let (flag, len) = self.part_at(pos)?;
            let body = pos + 8;
            match (flag, pos == offset) {
                (1, true) => {}
                (2 | 3, false) => data.extend_from_slice(&MAGIC.to_le_bytes()),
                _ => {
                    return Err(self.at(
                        &format!("a record part with flag {flag} out of order"),
                        pos as usize,
                    ));
                }
            }
            data.extend_from_slice(&self.bytes_at(body, len)?);
            if flag == 3 {
                break;
            }
            pos = body + len.next_multiple_of(4) as u64;
        }
        Ok(data)
    }

    fn file_len(&self) -> Result<u64, String> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| format!("{}: {e}", self.rec.display()))
    }

    /// The image keys as MXFaceDataset lists them: 1 .. label[0] - 1 when record 0's header has a
    /// label vector, else every key of the index.
    pub fn image_keys(&self) -> Result<Vec<u64>, String> {
        if let Some(o) = self.offset(0) {
            let head = self.read(o)?;
            if head.flag > 0 {
                let end = head.labels[0];
                if !(end.is_finite() && end >= 1.0) {
                    return Err(format!(
                        "{}: record 0 says the images end at {end}",
                        self.rec.display()
                    ));
                }
                // Keys 1 .. end - 1, each a record of the index: no more than it holds.
                let records = self.index.len();
                if f64::from(end) - 1.0 > records as f64 {
                    return Err(format!(
                        "{}: record 0 says the images end at {end}, but the index holds {records} \
                         records",
                        self.rec.display()
                    ));
                }
                return Ok((1..end as u64).collect());
            }
        }
        Ok(self.index.iter().map(|(k, _)| *k).collect())
    }
}

/// The paths of an `im2rec` list by key: on each line the key before the first tab, the path
/// after the last ([`data_pack::lst_unescape`]).
fn read_list(
    path: &Path,
    file: &std::fs::File,
    len: u64,
) -> Result<std::collections::HashMap<u64, Vec<u8>>, String> {
    use std::io::Read;
    // A line per record: 1 GiB of them is millions of paths.
    const MAX_LIST_BYTES: u64 = 1 << 30;
    if len > MAX_LIST_BYTES {
        return Err(format!(
            "{}: {len} bytes, over the {MAX_LIST_BYTES} a list of files may hold",
            path.display()
        ));
    }
    let mut text = Vec::with_capacity(len as usize);
    (file
        .try_clone()
        .map_err(|e| format!("{}: {e}", path.display()))?)
    .take(MAX_LIST_BYTES + 1)
    .read_to_end(&mut text)
    .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut paths = std::collections::HashMap::new();
    for (n, line) in text.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.trim_ascii().is_empty() {
            continue;
        }
        let bad = || {
            format!(
                "{} line {}: not `key<TAB>label<TAB>path`: {:?}",
                path.display(),
                n + 1,
                line.escape_ascii().to_string()
            )
        };
        let (first, last) = match (
            line.iter().position(|&b| b == b'\t'),
            line.iter().rposition(|&b| b == b'\t'),
        ) {
            (Some(f), Some(l)) if f < l => (f, l),
            _ => return Err(bad()),
        };
        let key = std::str::from_utf8(&line[..first])
            .ok()
            .and_then(|k| k.trim().parse::<u64>().ok())
            .ok_or_else(bad)?;
        paths.insert(key, data_pack::lst_unescape(&line[last + 1..]));
    }
    Ok(paths)
}

/// `recordio.unpack`: the header, the label vector when flag > 0, and the payload when asked
/// (else left empty).
fn parse(data: &[u8], payload: bool) -> Result<Record, String> {
    if data.len() < HEADER_BYTES {
        return Err(format!("a record of {} bytes has no IRHeader", data.len()));
    }
    let u32_at = |i: usize| u32::from_le_bytes(data[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().expect("8 bytes"));
    let flag = u32_at(0);
    let label = f32::from_bits(u32_at(4));
    let rest = &data[HEADER_BYTES..];
    // Listing a set reads a record's class only: its first label.
    let labels_len = if payload {
        flag as usize
    } else {
        flag.min(1) as usize
    } * 4;
    if labels_len > rest.len() {
        return Err(format!(
            "the header announces {flag} labels; the record has {} bytes",
            rest.len()
        ));
    }
    let labels = rest[..labels_len]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect();
    Ok(Record {
        flag,
        label,
        labels,
        id: u64_at(8),
        id2: u64_at(16),
        payload: if payload {
            rest[labels_len..].to_vec()
        } else {
            Vec::new()
        },
    })
}
