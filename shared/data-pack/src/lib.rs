//! Writing the formats training data is read from (`train-data`'s `wds` and `recordio`):
//! webdataset tar shards and MXNet's indexed RecordIO (as MXNet's `im2rec` writes it: key i
//! holds image i with its class as the label), with the class names beside them in
//! `classes.txt` (one per line, in label order), which [`read_classes_beside`] takes back. No
//! libtorch here: the `pack` tool runs without it.
//!
//! Every file appears whole: each is written under a temporary name and renamed when complete.
//! [`folder`] lists an image tree as torchvision's `ImageFolder` does (what `pack` packs, and
//! what training reads).

pub mod folder;

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The magic word that starts every RecordIO record part.
pub const MAGIC: u32 = 0xced7_230a;
/// Size of RecordIO's `IRHeader` (`struct.calcsize('IfQQ')`).
pub const HEADER_BYTES: usize = 24;

/// The class-name file beside packed data.
pub const CLASSES_FILE: &str = "classes.txt";

/// The files of MXNet's indexed RecordIO with `prefix`: `PREFIX.rec` and `PREFIX.idx`.
pub fn recordio_paths(prefix: &Path) -> (PathBuf, PathBuf) {
    let with = |ext: &str| {
        let mut p = prefix.as_os_str().to_owned();
        p.push(ext);
        PathBuf::from(p)
    };
    (with(".rec"), with(".idx"))
}

/// The prefix [`pack`] gives RecordIO in its directory (`DIR/data.rec`, `DIR/data.idx`).
const RECORDIO_PREFIX: &str = "data";

/// A shard's name: `shard-000003.tar`.
fn shard_name(n: usize) -> String {
    format!("shard-{n:06}.tar")
}

/// Whether a file of a directory is one [`pack`] writes (a shard, the RecordIO files,
/// classes.txt), which a pack over it replaces.
pub fn is_packed_file(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    let rec = [".rec", ".idx"].map(|e| format!("{RECORDIO_PREFIX}{e}"));
    (name.starts_with("shard-") && name.ends_with(".tar"))
        || rec.contains(&name.to_string())
        || name == CLASSES_FILE
}

/// The most bytes a class-name file may hold: names, not data.
const MAX_CLASSES_BYTES: u64 = 64 << 20;

fn io_error(path: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", path.display())
}

/// Writes `DIR/classes.txt`: the names in label order, one per line (a name holding a line
/// break cannot be written).
pub fn write_classes(dir: &Path, classes: &[OsString]) -> Result<PathBuf, String> {
    if let Some(c) = classes
        .iter()
        .find(|c| c.as_bytes().contains(&b'\n') || c.is_empty())
    {
        return Err(format!(
            "the class name {c:?} cannot be a line of {CLASSES_FILE}"
        ));
    }
    let path = dir.join(CLASSES_FILE);
    atomic_file::write_atomic(&path, |w| {
        classes
            .iter()
            .try_for_each(|c| w.write_all(c.as_bytes()).and_then(|_| w.write_all(b"\n")))
    })
    .map_err(|e| e.describe())?;
    Ok(path)
}

/// The class names in `classes.txt` in the directory of `data` (a shard, or a RecordIO prefix),
/// if there is one there.
pub fn read_classes_beside(data: &Path) -> Result<Option<Vec<OsString>>, String> {
    let dir = match data.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match read_classes(&dir.join(CLASSES_FILE)) {
        Ok(names) => Ok(Some(names)),
        Err((_, false)) => Ok(None),
        Err((e, true)) => Err(e),
    }
}

/// The class names of a class-name file: one per line, in label order.
pub fn read_class_file(path: &Path) -> Result<Vec<OsString>, String> {
    read_classes(path).map_err(|(e, _)| e)
}

/// The names in `path`, or why not (and whether the file was there at all).
fn read_classes(path: &Path) -> Result<Vec<OsString>, (String, bool)> {
    let bytes = match input_file::read(path, MAX_CLASSES_BYTES) {
        Ok(b) => b,
        Err(e) => {
            let there = e.kind() != std::io::ErrorKind::NotFound;
            return Err((io_error(path, e), there));
        }
    };
    let text = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    if text.is_empty() {
        return Err((format!("{}: no class names", path.display()), true));
    }
    let names: Vec<OsString> = (text.split(|&b| b == b'\n'))
        .map(|l| OsString::from_vec(l.strip_suffix(b"\r").unwrap_or(l).to_vec()))
        .collect();
    match names.iter().position(|n| n.is_empty()) {
        Some(n) => Err((
            format!("{} line {}: an empty class name", path.display(), n + 1),
            true,
        )),
        None => Ok(names),
    }
}

/// One sample to pack: an encoded image as its file holds it, and its class.
#[derive(Debug, Clone)]
pub struct Sample<'a> {
    /// The image's suffix as webdataset names members (`jpg`, `png`, `webp`...).
    pub suffix: &'a str,
    pub image: &'a [u8],
    pub label: usize,
}

/// A shard written: its path and how many samples it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub path: PathBuf,
    pub samples: usize,
    pub bytes: u64,
}

/// Tar blocks a member of `len` bytes takes: its header and its data, padded.
fn member_bytes(len: usize) -> u64 {
    512 + (len as u64).div_ceil(512) * 512
}

/// webdataset shards `DIR/shard-000000.tar`, `shard-000001.tar`, ...: a sample is its image
/// (`KEY.SUFFIX`) and its class (`KEY.cls`, the label in decimal), as webdataset's `TarWriter`
/// writes them; a shard is closed before a sample would take it past `max_bytes` (a shard
/// holds at least one sample) or once it holds `max_samples`.
pub struct ShardWriter {
    dir: PathBuf,
    max_bytes: u64,
    max_samples: usize,
    open: Option<OpenShard>,
    done: Vec<Written>,
}

impl std::fmt::Debug for ShardWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (f.debug_struct("ShardWriter"))
            .field("dir", &self.dir)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

struct OpenShard {
    path: PathBuf,
    tmp: tempfile::NamedTempFile,
    tar: tar::Builder<std::io::BufWriter<std::fs::File>>,
    bytes: u64,
    samples: usize,
}

impl ShardWriter {
    pub fn new(dir: &Path, max_bytes: u64, max_samples: usize) -> ShardWriter {
        ShardWriter {
            dir: dir.to_path_buf(),
            max_bytes,
            max_samples: max_samples.max(1),
            open: None,
            done: Vec::new(),
        }
    }

    /// The shard names, as a brace pattern over the shards written (`DIR/shard-{000000..000003}.tar`).
    pub fn pattern(dir: &Path, shards: usize) -> PathBuf {
        match shards {
            0 | 1 => dir.join(shard_name(0)),
            n => dir.join(format!("shard-{{000000..{:06}}}.tar", n - 1)),
        }
    }

    /// Adds sample `key` (a name without dots).
    pub fn add(&mut self, key: &str, s: &Sample) -> Result<(), String> {
        let size = member_bytes(s.image.len()) + member_bytes(s.label.to_string().len());
        let full = self.open.as_ref().is_some_and(|o| {
            o.samples >= self.max_samples || (o.samples > 0 && o.bytes + size > self.max_bytes)
        });
        if full {
            self.close()?;
        }
        if self.open.is_none() {
            let path = self.dir.join(shard_name(self.done.len()));
            let tmp = atomic_file::temp_beside(&path).map_err(|e| e.describe())?;
            let file = tmp.as_file().try_clone().map_err(|e| io_error(&path, e))?;
            let tar = tar::Builder::new(std::io::BufWriter::with_capacity(1 << 20, file));
            self.open = Some(OpenShard {
                path,
                tmp,
                tar,
                bytes: 1024, // the two zero blocks that end a tar
                samples: 0,
            });
        }
        let o = self.open.as_mut().expect("opened above");
        let label = s.label.to_string();
        for (suffix, data) in [(s.suffix, s.image), ("cls", label.as_bytes())] {
            let mut h = tar::Header::new_ustar();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_mtime(0);
            h.set_entry_type(tar::EntryType::Regular);
            h.set_cksum();
            (o.tar.append_data(&mut h, format!("{key}.{suffix}"), data))
                .map_err(|e| io_error(&o.path, e))?;
        }
        o.bytes += size;
        o.samples += 1;
        Ok(())
    }

    fn close(&mut self) -> Result<(), String> {
        let Some(o) = self.open.take() else {
            return Ok(());
        };
        let mut w = o.tar.into_inner().map_err(|e| io_error(&o.path, e))?;
        w.flush().map_err(|e| io_error(&o.path, e))?;
        drop(w);
        atomic_file::persist(o.tmp, &o.path).map_err(|e| e.describe())?;
        self.done.push(Written {
            path: o.path,
            samples: o.samples,
            bytes: o.bytes,
        });
        Ok(())
    }

    /// Closes the last shard; the shards written.
    pub fn finish(mut self) -> Result<Vec<Written>, String> {
        self.close()?;
        Ok(self.done)
    }
}

/// MXNet's indexed RecordIO, `PREFIX.rec` and `PREFIX.idx`, as `im2rec` writes it: record
/// `key` is an `IRHeader` (flag 0, the label, id = key) and the image's bytes.
pub struct RecordWriter {
    rec: PathBuf,
    idx: PathBuf,
    tmp: tempfile::NamedTempFile,
    out: std::io::BufWriter<std::fs::File>,
    offset: u64,
    index: String,
    records: usize,
}

impl std::fmt::Debug for RecordWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (f.debug_struct("RecordWriter"))
            .field("rec", &self.rec)
            .field("records", &self.records)
            .finish_non_exhaustive()
    }
}

impl RecordWriter {
    pub fn create(prefix: &Path) -> Result<RecordWriter, String> {
        let (rec, idx) = recordio_paths(prefix);
        let tmp = atomic_file::temp_beside(&rec).map_err(|e| e.describe())?;
        let file = tmp.as_file().try_clone().map_err(|e| io_error(&rec, e))?;
        Ok(RecordWriter {
            rec,
            idx,
            tmp,
            out: std::io::BufWriter::with_capacity(1 << 20, file),
            offset: 0,
            index: String::new(),
            records: 0,
        })
    }

    /// Appends record `key`.
    pub fn add(&mut self, key: u64, label: f32, payload: &[u8]) -> Result<(), String> {
        let mut data = Vec::with_capacity(HEADER_BYTES + payload.len());
        data.extend_from_slice(&0u32.to_le_bytes());
        data.extend_from_slice(&label.to_le_bytes());
        data.extend_from_slice(&key.to_le_bytes());
        data.extend_from_slice(&0u64.to_le_bytes());
        data.extend_from_slice(payload);
        self.index.push_str(&format!("{key}\t{}\n", self.offset));
        let rec = &self.rec;
        for (flag, part) in parts(&data) {
            if part.len() >= 1 << 29 {
                return Err(format!(
                    "{}: a record part of {} bytes is past RecordIO's 2^29",
                    rec.display(),
                    part.len()
                ));
            }
            let head = (flag << 29) | part.len() as u32;
            let pad = [0u8; 3];
            let padding = &pad[..(4 - part.len() % 4) % 4];
            for bytes in [&MAGIC.to_le_bytes()[..], &head.to_le_bytes(), part, padding] {
                self.out.write_all(bytes).map_err(|e| io_error(rec, e))?;
            }
            self.offset += 8 + (part.len() + padding.len()) as u64;
        }
        self.records += 1;
        Ok(())
    }

    /// Renames the `.rec` into place, then writes the `.idx` (the set is whole once it exists).
    pub fn finish(mut self) -> Result<[Written; 2], String> {
        self.out.flush().map_err(|e| io_error(&self.rec, e))?;
        drop(self.out);
        let _ = std::fs::remove_file(&self.idx);
        atomic_file::persist(self.tmp, &self.rec).map_err(|e| e.describe())?;
        let index = self.index.into_bytes();
        atomic_file::write_atomic(&self.idx, |w| w.write_all(&index)).map_err(|e| e.describe())?;
        Ok([
            Written {
                path: self.rec,
                samples: self.records,
                bytes: self.offset,
            },
            Written {
                path: self.idx,
                samples: self.records,
                bytes: index.len() as u64,
            },
        ])
    }
}

/// dmlc's `RecordIOWriter::WriteRecord`: the record cut at every 4-byte-aligned magic word,
/// which is dropped; the parts flagged 1 (first), 2 (middle), 3 (last), or 0 when whole.
fn parts(data: &[u8]) -> Vec<(u32, &[u8])> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in (0..data.len() / 4 * 4).step_by(4) {
        if data[i..i + 4] == MAGIC.to_le_bytes() {
            out.push((if start == 0 { 1 } else { 2 }, &data[start..i]));
            start = i + 4;
        }
    }
    out.push((if start == 0 { 0 } else { 3 }, &data[start..]));
    out
}

/// What [`pack`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    /// webdataset tar shards: each sample its image (KEY.jpg, KEY.png...) and its class
    /// (KEY.cls), as webdataset's ShardWriter writes them.
    Wds,
    /// MXNet's indexed RecordIO (data.rec, data.idx), as im2rec writes it: record i holds
    /// image i with its class as the label.
    Recordio,
}

impl Format {
    /// As records and `--data` name it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Wds => "wds",
            Format::Recordio => "recordio",
        }
    }
}

/// How [`pack`] packs.
#[derive(Debug, Clone)]
pub struct Options {
    pub format: Format,
    /// Shards: their largest size, and most samples.
    pub shard_size: u64,
    pub shard_samples: usize,
    /// The seed of the order the samples are written in (Python's `random.Random(seed).shuffle`
    /// of the folder's); `None` keeps the folder's.
    pub shuffle: Option<u64>,
    /// The largest image file taken.
    pub max_image_bytes: u64,
}

/// A folder packed.
#[derive(Debug)]
pub struct Packed {
    pub samples: usize,
    /// The files written: the shards (or the .rec and .idx), then classes.txt.
    pub files: Vec<Written>,
    /// What training's `--data` takes for it: `wds:DIR/shard-{000000..N}.tar` or
    /// `recordio:DIR/data` (DIR as given).
    pub data: OsString,
    /// The images left out, and why.
    pub left_out: Vec<(PathBuf, String)>,
}

/// Why [`pack`] stopped.
#[derive(Debug)]
pub enum PackError {
    /// `stop` said so: nothing half-written stays (the open file is dropped).
    Stopped,
    Failed(String),
}

/// Packs the images of `folder` into `dir` with their labels in `classes` (each of the
/// folder's classes is one of them), then writes `dir/classes.txt`. An image that cannot be
/// read is left out (and said); `stop` is asked before each.
pub fn pack(
    folder: &folder::ImageFolder,
    dir: &Path,
    classes: &[OsString],
    o: &Options,
    stop: &dyn Fn() -> bool,
) -> Result<Packed, PackError> {
    let failed = PackError::Failed;
    let labels: Vec<usize> = (folder.classes.iter())
        .map(|c| classes.iter().position(|n| n == c))
        .collect::<Option<_>>()
        .ok_or_else(|| failed("a class of the folder is not among the classes".into()))?;
    let mut order: Vec<usize> = (0..folder.samples.len()).collect();
    if let Some(seed) = o.shuffle {
        ref_rng::PyRandom::new(seed).shuffle(&mut order);
    }
    enum Writer {
        Shards(ShardWriter),
        Records(RecordWriter),
    }
    let mut w = match o.format {
        Format::Wds => Writer::Shards(ShardWriter::new(dir, o.shard_size, o.shard_samples)),
        Format::Recordio => {
            Writer::Records(RecordWriter::create(&dir.join(RECORDIO_PREFIX)).map_err(failed)?)
        }
    };
    let (mut left_out, mut samples) = (Vec::new(), 0usize);
    for i in order {
        if stop() {
            return Err(PackError::Stopped);
        }
        let (path, label) = &folder.samples[i];
        let image = match input_file::read(path, o.max_image_bytes) {
            Ok(b) => b,
            Err(e) => {
                left_out.push((path.clone(), e.to_string()));
                continue;
            }
        };
        let suffix = (path.extension())
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        let label = labels[*label as usize];
        match &mut w {
            Writer::Shards(sw) => {
                let sample = Sample {
                    suffix: &suffix,
                    image: &image,
                    label,
                };
                sw.add(&format!("{samples:09}"), &sample)
            }
            Writer::Records(rw) => rw.add(samples as u64, label as f32, &image),
        }
        .map_err(failed)?;
        samples += 1;
    }
    let (mut files, path) = match w {
        Writer::Shards(sw) => {
            let written = sw.finish().map_err(failed)?;
            let pattern = ShardWriter::pattern(dir, written.len());
            (written, pattern)
        }
        Writer::Records(rw) => (
            rw.finish().map_err(failed)?.to_vec(),
            dir.join(RECORDIO_PREFIX),
        ),
    };
    let mut data = OsString::from(format!("{}:", o.format.name()));
    data.push(path);
    let path = write_classes(dir, classes).map_err(failed)?;
    files.push(Written {
        bytes: std::fs::metadata(&path).map_or(0, |m| m.len()),
        path,
        samples: 0,
    });
    Ok(Packed {
        samples,
        files,
        data,
        left_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shards and records read back by train-data's readers: train-data/tests/pack.rs.

    #[test]
    fn records_are_cut_at_aligned_magic_words_as_dmlc_cuts_them() {
        let m = MAGIC.to_le_bytes();
        let data: Vec<u8> = [&[1u8, 2, 3, 4][..], &m, &[5, 6], &m[..2]].concat();
        let p = parts(&data);
        assert_eq!(
            p,
            [(1, &data[..4]), (3, &data[8..])],
            "the word at 4 cut, the unaligned kept"
        );
        assert_eq!(parts(b"abc"), [(0, &b"abc"[..])]);
        assert_eq!(parts(&m), [(1, &[][..]), (3, &[][..])]);
    }

    #[test]
    fn the_files_pack_writes_are_known_by_name() {
        for name in [&shard_name(12), "data.rec", "data.idx", CLASSES_FILE] {
            assert!(is_packed_file(name.as_ref()), "{name}");
        }
        for name in ["photo.png", "data.txt", "shard-1.tgz"] {
            assert!(!is_packed_file(name.as_ref()), "{name}");
        }
        let (rec, idx) = recordio_paths(Path::new("d/x.y"));
        assert_eq!((rec, idx), ("d/x.y.rec".into(), "d/x.y.idx".into()));
    }

    #[test]
    fn class_names_go_beside_and_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let names: Vec<OsString> = ["cat", "dog é", "x y"].map(OsString::from).into();
        write_classes(dir.path(), &names).unwrap();
        let back = read_classes_beside(&dir.path().join("shard-000000.tar")).unwrap();
        assert_eq!(back, Some(names));
        assert_eq!(
            read_classes_beside(Path::new("/nonexistent/x.tar")).unwrap(),
            None
        );
        assert!(write_classes(dir.path(), &[OsString::from("a\nb")]).is_err());
        std::fs::write(dir.path().join(CLASSES_FILE), "a\n\nb\n").unwrap();
        let e = read_classes_beside(&dir.path().join("p")).unwrap_err();
        assert!(e.contains("line 2: an empty class name"), "{e}");
    }
}
