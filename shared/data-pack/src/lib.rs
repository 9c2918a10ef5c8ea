//! Writing the formats training data is read from (`train-data`'s `wds` and `recordio`):
//! webdataset tar shards and MXNet's indexed RecordIO (as MXNet's `im2rec` writes it: key i
//! holds image i with its class as the label), with the class names beside them in
//! `classes.txt` (one per line, in label order, as the same bytes: [`classes`]), which
//! [`read_classes_beside`] takes back. No libtorch here: the `pack` tool runs without it.
//!
//! Every file appears whole: each is written under a temporary name and renamed when complete;
//! a pack as a whole replaces the previous one in its directory only once it is whole
//! ([`out::OutDir`]: a lock, a staging directory, a commit). [`folder`] lists an image tree as
//! torchvision's `ImageFolder` does (what `pack` packs, and what training reads).
//!
//! What the readers cannot take back is not written: an image whose first bytes are not those
//! of a format training decodes, or one too large for a RecordIO record, is left out with its
//! reason, as an unreadable file or directory is.

pub mod classes;
pub mod folder;
pub mod out;

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub use classes::{
    CLASSES_FILE, ClassesError, check_class_names, read_classes, read_classes_beside, write_classes,
};
pub use out::{OutDir, OutError, RECORDIO_PREFIX, is_packed_file};

/// The magic word that starts every RecordIO record part.
pub const MAGIC: u32 = 0xced7_230a;
/// Size of RecordIO's `IRHeader` (`struct.calcsize('IfQQ')`).
pub const HEADER_BYTES: usize = 24;
/// A RecordIO part's length has 29 bits: no part reaches this.
pub const MAX_PART_BYTES: usize = 1 << 29;

/// The files of MXNet's indexed RecordIO with `prefix`: `PREFIX.rec` and `PREFIX.idx`.
pub fn recordio_paths(prefix: &Path) -> (PathBuf, PathBuf) {
    let with = |ext: &str| {
        let mut p = prefix.as_os_str().to_owned();
        p.push(ext);
        PathBuf::from(p)
    };
    (with(".rec"), with(".idx"))
}

/// A shard's name: `shard-000003.tar`.
fn shard_name(n: usize) -> String {
    format!("shard-{n:06}.tar")
}

/// What can go wrong writing shards or records.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("writing {}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Atomic(#[from] atomic_file::Error),
    #[error(
        "more than {} shards (their names have six digits): a larger --shard-size or --shard-samples",
        out::MAX_SHARDS
    )]
    TooManyShards,
    /// One record cannot be written (the writer is unchanged: the others can).
    #[error(
        "a RecordIO record part of {0} bytes: RecordIO's lengths have 29 bits (at most {max} bytes)",
        max = MAX_PART_BYTES - 1
    )]
    RecordTooLarge(usize),
}

impl error_class::Classify for WriteError {}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> WriteError + '_ {
    move |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One sample to pack: an encoded image as its file holds it, its class, and the path of its
/// file.
#[derive(Debug, Clone)]
pub struct Sample<'a> {
    /// The image's suffix as webdataset names members (`jpg`, `png`, `webp`...).
    pub suffix: &'a str,
    pub image: &'a [u8],
    pub label: usize,
    /// The path of the file the image was read from (relative to the folder packed), as bytes:
    /// written as the sample's `KEY.path` member, its bytes as they are.
    pub path: Option<&'a [u8]>,
}

/// The suffix of the member that holds a sample's path (`KEY.path`).
pub const PATH_SUFFIX: &str = "path";

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
/// writes them, and the path of its file (`KEY.path`, the path's bytes) when it has one; a shard is closed before a sample would take it past `max_bytes` (a shard
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
    pub fn add(&mut self, key: &str, s: &Sample) -> Result<(), WriteError> {
        let size = member_bytes(s.image.len())
            + member_bytes(s.label.to_string().len())
            + s.path.map_or(0, |p| member_bytes(p.len()));
        let full = self.open.as_ref().is_some_and(|o| {
            o.samples >= self.max_samples || (o.samples > 0 && o.bytes + size > self.max_bytes)
        });
        if full {
            self.close()?;
        }
        if self.open.is_none() {
            if self.done.len() >= out::MAX_SHARDS {
                return Err(WriteError::TooManyShards);
            }
            let path = self.dir.join(shard_name(self.done.len()));
            let tmp = atomic_file::temp_beside(&path)?;
            let file = tmp.as_file().try_clone().map_err(io_error(&path))?;
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
        let members = [(s.suffix, s.image), ("cls", label.as_bytes())]
            .into_iter()
            .chain(s.path.map(|p| (PATH_SUFFIX, p)));
        for (suffix, data) in members {
            let mut h = tar::Header::new_ustar();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_mtime(0);
            h.set_entry_type(tar::EntryType::Regular);
            h.set_cksum();
            (o.tar.append_data(&mut h, format!("{key}.{suffix}"), data))
                .map_err(io_error(&o.path))?;
        }
        o.bytes += size;
        o.samples += 1;
        Ok(())
    }

    fn close(&mut self) -> Result<(), WriteError> {
        let Some(o) = self.open.take() else {
            return Ok(());
        };
        let mut w = o.tar.into_inner().map_err(io_error(&o.path))?;
        w.flush().map_err(io_error(&o.path))?;
        drop(w);
        atomic_file::persist(o.tmp, &o.path)?;
        self.done.push(Written {
            path: o.path,
            samples: o.samples,
            bytes: o.bytes,
        });
        Ok(())
    }

    /// Closes the last shard; the shards written.
    pub fn finish(mut self) -> Result<Vec<Written>, WriteError> {
        self.close()?;
        Ok(self.done)
    }
}

/// MXNet's indexed RecordIO, `PREFIX.rec` and `PREFIX.idx`, as `im2rec` writes it: record
/// `key` is an `IRHeader` (flag 0, the label, id = key) and the image's bytes; with the paths
/// of the records' files ([`Self::add_with_path`]), `PREFIX.lst` beside, as im2rec's list
/// ([`lst_line`]).
pub struct RecordWriter {
    rec: PathBuf,
    idx: PathBuf,
    lst: PathBuf,
    /// The list's lines, once a record has a path.
    list: Vec<u8>,
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
    pub fn create(prefix: &Path) -> Result<RecordWriter, WriteError> {
        let (rec, idx) = recordio_paths(prefix);
        let lst = lst_path(prefix);
        let tmp = atomic_file::temp_beside(&rec)?;
        let file = tmp.as_file().try_clone().map_err(io_error(&rec))?;
        Ok(RecordWriter {
            rec,
            idx,
            lst,
            list: Vec::new(),
            tmp,
            out: std::io::BufWriter::with_capacity(1 << 20, file),
            offset: 0,
            index: String::new(),
            records: 0,
        })
    }

    /// Whether a record of this payload can be written: every part shorter than 2^29 bytes
    /// ([`WriteError::RecordTooLarge`] if not). Checked by [`Self::add`] before it writes
    /// anything.
    pub fn check(payload: &[u8]) -> Result<(), WriteError> {
        // The header holds no aligned magic word (flag 0, then the label's and the key's bits
        // are checked with the payload below, whole): cut as the record is.
        let data = record_bytes(0, 0.0, payload);
        match parts(&data).iter().map(|(_, p)| p.len()).max() {
            Some(n) if n >= MAX_PART_BYTES => Err(WriteError::RecordTooLarge(n)),
            _ => Ok(()),
        }
    }

    /// Appends record `key`; a record that cannot be written ([`Self::check`]) leaves the
    /// file as it was.
    pub fn add(&mut self, key: u64, label: f32, payload: &[u8]) -> Result<(), WriteError> {
        self.add_with_path(key, label, payload, None)
    }

    /// Appends record `key` as [`Self::add`] does, and the path of its file (relative to the
    /// folder packed, as bytes) as its line of `PREFIX.lst`.
    pub fn add_with_path(
        &mut self,
        key: u64,
        label: f32,
        payload: &[u8],
        path: Option<&[u8]>,
    ) -> Result<(), WriteError> {
        let data = record_bytes(key, label, payload);
        let cut = parts(&data);
        if let Some(n) = cut
            .iter()
            .map(|(_, p)| p.len())
            .find(|&n| n >= MAX_PART_BYTES)
        {
            return Err(WriteError::RecordTooLarge(n));
        }
        self.index.push_str(&format!("{key}\t{}\n", self.offset));
        let rec = &self.rec;
        for (flag, part) in cut {
            let head = (flag << 29) | part.len() as u32;
            let pad = [0u8; 3];
            let padding = &pad[..(4 - part.len() % 4) % 4];
            for bytes in [&MAGIC.to_le_bytes()[..], &head.to_le_bytes(), part, padding] {
                self.out.write_all(bytes).map_err(io_error(rec))?;
            }
            self.offset += 8 + (part.len() + padding.len()) as u64;
        }
        if let Some(path) = path {
            self.list.extend(lst_line(key, label, path));
        }
        self.records += 1;
        Ok(())
    }

    /// Renames the `.rec` into place, then writes the `.lst` (when records have paths) and the
    /// `.idx` (the set is whole once it exists): the files written, in that order.
    pub fn finish(mut self) -> Result<Vec<Written>, WriteError> {
        self.out.flush().map_err(io_error(&self.rec))?;
        drop(self.out);
        let _ = std::fs::remove_file(&self.idx);
        let _ = std::fs::remove_file(&self.lst);
        atomic_file::persist(self.tmp, &self.rec)?;
        let mut written = vec![Written {
            path: self.rec,
            samples: self.records,
            bytes: self.offset,
        }];
        let list = (!self.list.is_empty()).then_some(Written {
            path: self.lst,
            samples: self.records,
            bytes: self.list.len() as u64,
        });
        if let Some(l) = list {
            atomic_file::write_atomic(&l.path, |w| w.write_all(&self.list))?;
            written.push(l);
        }
        let index = self.index.into_bytes();
        atomic_file::write_atomic(&self.idx, |w| w.write_all(&index))?;
        written.push(Written {
            path: self.idx,
            samples: self.records,
            bytes: index.len() as u64,
        });
        Ok(written)
    }
}

/// The list of a RecordIO file's images beside it, as MXNet's `im2rec` names it:
/// `PREFIX.lst`.
pub fn lst_path(prefix: &Path) -> PathBuf {
    let mut p = prefix.as_os_str().to_owned();
    p.push(".lst");
    PathBuf::from(p)
}

/// A line of an `im2rec` list (its `write_list`: the key, the label as `%f`, the path, separated
/// by tabs): the path's bytes as they are (not necessarily UTF-8), but for a tab, a line break,
/// a carriage return and a backslash, written `\t`, `\n`, `\r` and `\\` ([`lst_unescape`]
/// reads them back).
pub fn lst_line(key: u64, label: f32, path: &[u8]) -> Vec<u8> {
    let mut line = format!("{key}\t{label:.6}\t").into_bytes();
    for &b in path {
        match b {
            b'\t' => line.extend_from_slice(b"\\t"),
            b'\n' => line.extend_from_slice(b"\\n"),
            b'\r' => line.extend_from_slice(b"\\r"),
            b'\\' => line.extend_from_slice(b"\\\\"),
            _ => line.push(b),
        }
    }
    line.push(b'\n');
    line
}

/// A path of an `im2rec` list as [`lst_line`] writes it, read back: `\t`, `\n`, `\r` and
/// `\\` are a tab, a line break, a carriage return and a backslash; a backslash before
/// anything else is itself.
pub fn lst_unescape(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let escaped = match (text[i], text.get(i + 1)) {
            (b'\\', Some(b't')) => Some(b'\t'),
            (b'\\', Some(b'n')) => Some(b'\n'),
            (b'\\', Some(b'r')) => Some(b'\r'),
            (b'\\', Some(b'\\')) => Some(b'\\'),
            _ => None,
        };
        match escaped {
            Some(b) => {
                out.push(b);
                i += 2;
            }
            None => {
                out.push(text[i]);
                i += 1;
            }
        }
    }
    out
}

/// A record's bytes: the `IRHeader` (flag 0, the label, id = key, id2 = 0), then the payload.
fn record_bytes(key: u64, label: f32, payload: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(HEADER_BYTES + payload.len());
    data.extend_from_slice(&0u32.to_le_bytes());
    data.extend_from_slice(&label.to_le_bytes());
    data.extend_from_slice(&key.to_le_bytes());
    data.extend_from_slice(&0u64.to_le_bytes());
    data.extend_from_slice(payload);
    data
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
    /// The files written: the shards (or the .rec and .idx), then classes.txt; none when no
    /// image could be packed (the directory then holds what it held).
    pub files: Vec<Written>,
    /// What training's `--data` takes for it: `wds:DIR/shard-{000000..N}.tar` or
    /// `recordio:DIR/data` (DIR absolute as given, its braces and backslashes escaped with a
    /// backslash in a brace pattern); none when nothing was written.
    pub data: Option<OsString>,
    /// The images (and unreadable directories) left out, and why.
    pub left_out: Vec<(PathBuf, LeftOut)>,
    /// The files of the folder that are not images to pack (by their names, as ImageFolder
    /// leaves them out, or outside the class folders), and why: none is left out unsaid.
    pub skipped: Vec<(PathBuf, folder::NotTaken)>,
}

/// Why [`pack`] left an image (or a directory of images) out; the others are packed.
#[derive(Debug, thiserror::Error)]
pub enum LeftOut {
    /// A directory of the folder that could not be read (as `os.walk` skips it).
    #[error("cannot be read ({0}): the images in it are left out")]
    Directory(String),
    /// The image cannot be read (its text names the file), or is over `max_image_bytes`.
    #[error("{0}: left out")]
    Unreadable(std::io::Error),
    /// Its first bytes are not those of a format training decodes.
    #[error("{0} (training decodes only these): left out")]
    NotDecodable(String),
    /// Too large for a RecordIO record.
    #[error("{0}: left out")]
    TooLarge(WriteError),
}

/// Why [`pack`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// `stop` said so: nothing half-written stays, the previous pack stands.
    #[error("interrupted")]
    Stopped,
    #[error("the class {:?} of the folder is not among the classes", .0)]
    NotAmong(OsString),
    #[error(transparent)]
    Classes(#[from] ClassesError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error(transparent)]
    Out(#[from] OutError),
}

impl error_class::Classify for PackError {
    fn class(&self) -> error_class::Class {
        use error_class::Class;
        match self {
            PackError::Stopped => Class::Interrupted,
            PackError::NotAmong(_) => Class::Usage,
            PackError::Classes(e) => e.class(),
            PackError::Write(e) => e.class(),
            PackError::Out(e) => e.class(),
        }
    }
}

/// `path` as a literal in a brace pattern (webdataset's `braceexpand`): `\`, `{` and `}`
/// escaped with a backslash.
pub fn brace_literal(path: &Path) -> OsString {
    let mut out = Vec::with_capacity(path.as_os_str().len());
    for &b in path.as_os_str().as_bytes() {
        if matches!(b, b'\\' | b'{' | b'}') {
            out.push(b'\\');
        }
        out.push(b);
    }
    std::os::unix::ffi::OsStringExt::from_vec(out)
}

/// What `--data` takes for a pack in `dir` of `shards` shards (wds) or RecordIO.
pub fn data_arg(format: Format, dir: &Path, shards: usize) -> OsString {
    let mut data = OsString::from(format!("{}:", format.name()));
    match format {
        Format::Wds => {
            data.push(brace_literal(dir));
            let name = ShardWriter::pattern(Path::new(""), shards);
            data.push("/");
            data.push(name);
        }
        Format::Recordio => data.push(dir.join(RECORDIO_PREFIX)),
    }
    data
}

/// Packs the images of `folder` into `out` (its staging directory, then committed) with their
/// labels in `classes` (each of the folder's classes is one of them), with `out/classes.txt`.
/// An image that cannot be read, that training could not decode (its first bytes are not those
/// of a format it reads), or that is too large for a record, is left out (and said), as are
/// directories of the folder that could not be read; `stop` is asked before each image. When no
/// image could be packed, nothing is committed.
pub fn pack(
    folder: &folder::ImageFolder,
    out: OutDir,
    classes: &[OsString],
    o: &Options,
    stop: &dyn Fn() -> bool,
) -> Result<Packed, PackError> {
    check_class_names(classes)?;
    // Each of the folder's classes as its label among `classes`.
    let labels: Vec<usize> = (folder.classes.iter())
        .map(|c| {
            (classes.iter().position(|n| n == c)).ok_or_else(|| PackError::NotAmong(c.clone()))
        })
        .collect::<Result<_, _>>()?;
    let mut order: Vec<usize> = (0..folder.samples.len()).collect();
    if let Some(seed) = o.shuffle {
        ref_rng::PyRandom::new(seed).shuffle(&mut order);
    }
    let staging = out.staging().to_path_buf();
    let mut w = Writer::new(o, &staging)?;
    let mut left_out: Vec<(PathBuf, LeftOut)> = (folder.skipped.iter())
        .map(|(dir, why)| (dir.clone(), LeftOut::Directory(why.clone())))
        .collect();
    let skipped = folder.not_taken.clone();
    let mut samples = 0usize;
    for i in order {
        if stop() {
            return Err(PackError::Stopped);
        }
        let (path, label) = &folder.samples[i];
        let image = match read_image(path, o.max_image_bytes) {
            Ok(b) => b,
            Err(why) => {
                left_out.push((path.clone(), why));
                continue;
            }
        };
        // The suffix webdataset names the member by: the extension the folder took the file
        // for (a file named only `.png` has one too), in lower case.
        let name = path.file_name().unwrap_or_default().as_bytes();
        let suffix = folder::image_suffix(name).unwrap_or("jpg");
        let label = labels[*label as usize];
        // Where the image came from, relative to the folder: every sample can be traced back.
        let relative = path.strip_prefix(&folder.root).unwrap_or(path);
        let sample = Sample {
            suffix,
            image: &image,
            label,
            path: Some(relative.as_os_str().as_bytes()),
        };
        match w.add(samples, &sample) {
            Ok(()) => samples += 1,
            Err(e @ WriteError::RecordTooLarge(_)) => {
                left_out.push((path.clone(), LeftOut::TooLarge(e)));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let files = w.finish()?;
    if samples == 0 {
        // Dropped: the staging directory goes, the previous pack stands.
        return Ok(Packed {
            samples,
            files: Vec::new(),
            data: None,
            left_out,
            skipped,
        });
    }
    let (files, data) = commit(out, files, classes, o.format)?;
    Ok(Packed {
        samples,
        files,
        data: Some(data),
        left_out,
        skipped,
    })
}

/// An image file's bytes (at most `max_bytes`), or why it is left out: unreadable, or not
/// of a format training decodes (by its first bytes).
fn read_image(path: &Path, max_bytes: u64) -> Result<Vec<u8>, LeftOut> {
    let image = input_file::read(path, max_bytes).map_err(LeftOut::Unreadable)?;
    if let Err(why) = imaging::sniff(&image) {
        return Err(LeftOut::NotDecodable(why.to_string()));
    }
    Ok(image)
}

/// A pack's writer: shards or RecordIO, in the staging directory.
enum Writer {
    Shards(ShardWriter),
    Records(RecordWriter),
}

impl Writer {
    fn new(o: &Options, staging: &Path) -> Result<Writer, PackError> {
        Ok(match o.format {
            Format::Wds => Writer::Shards(ShardWriter::new(staging, o.shard_size, o.shard_samples)),
            Format::Recordio => {
                Writer::Records(RecordWriter::create(&staging.join(RECORDIO_PREFIX))?)
            }
        })
    }

    /// Adds the pack's sample number `n`.
    fn add(&mut self, n: usize, sample: &Sample) -> Result<(), WriteError> {
        match self {
            Writer::Shards(sw) => sw.add(&format!("{n:09}"), sample),
            Writer::Records(rw) => {
                rw.add_with_path(n as u64, sample.label as f32, sample.image, sample.path)
            }
        }
    }

    fn finish(self) -> Result<Vec<Written>, PackError> {
        Ok(match self {
            Writer::Shards(sw) => sw.finish()?,
            Writer::Records(rw) => rw.finish()?,
        })
    }
}

/// The staged `files` with classes.txt (naming `classes`) committed into `out`: the files as
/// placed (classes.txt last), and what `--data` takes for them.
fn commit(
    out: OutDir,
    files: Vec<Written>,
    classes: &[OsString],
    format: Format,
) -> Result<(Vec<Written>, OsString), PackError> {
    let classes_path = write_classes(out.staging(), classes)?;
    let classes_bytes = std::fs::metadata(&classes_path).map_or(0, |m| m.len());
    let names: Vec<OsString> = (files.iter().map(|w| &w.path))
        .chain([&classes_path])
        .map(|p| p.file_name().unwrap_or_default().to_owned())
        .collect();
    let dir = out.dir().to_path_buf();
    let shards = files.len();
    let placed = out.commit(&names)?;
    let mut written: Vec<Written> = files
        .into_iter()
        .zip(&placed)
        .map(|(w, path)| Written {
            path: path.clone(),
            ..w
        })
        .collect();
    written.push(Written {
        path: placed.last().expect("classes.txt").clone(),
        samples: 0,
        bytes: classes_bytes,
    });
    Ok((written, data_arg(format, &dir, shards)))
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
    fn a_record_too_large_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = RecordWriter::create(&dir.path().join("data")).unwrap();
        w.add(0, 1.0, b"small").unwrap();
        let big = vec![0u8; MAX_PART_BYTES];
        let e = w.add(1, 1.0, &big).unwrap_err();
        assert!(matches!(e, WriteError::RecordTooLarge(_)), "{e}");
        assert!(RecordWriter::check(&big).is_err());
        // Cut by magic words into parts under the bound, it fits.
        let mut cut = vec![0u8; MAX_PART_BYTES];
        cut[1 << 28..(1 << 28) + 4].copy_from_slice(&MAGIC.to_le_bytes());
        assert!(RecordWriter::check(&cut).is_ok());
        w.add(1, 2.0, b"next").unwrap();
        let written = w.finish().unwrap();
        assert_eq!(written.len(), 2, "no list: no record has a path");
        let rec = &written[0];
        assert_eq!(rec.samples, 2);
        let r = std::fs::read(&rec.path).unwrap();
        assert_eq!(r.len() as u64, rec.bytes, "nothing of the refused record");
    }

    #[test]
    fn list_paths_come_back_as_the_same_bytes() {
        let odd: &[u8] = b"a\tb\\c\nd\re\xff\\t.png";
        let line = lst_line(3, 2.0, odd);
        assert_eq!(line, b"3\t2.000000\ta\\tb\\\\c\\nd\\re\xff\\\\t.png\n");
        let path = &line[line.iter().rposition(|&b| b == b'\t').unwrap() + 1..line.len() - 1];
        assert_eq!(lst_unescape(path), odd);
        // im2rec's own lists hold plain paths; a lone backslash stays.
        assert_eq!(lst_unescape(b"cat/x\\y.jpg"), b"cat/x\\y.jpg");
    }

    #[test]
    fn brace_patterns_name_the_directory_literally() {
        let d = Path::new("/data/a{b,c}\\x");
        assert_eq!(brace_literal(d), OsString::from("/data/a\\{b,c\\}\\\\x"));
        assert_eq!(
            data_arg(Format::Wds, d, 3),
            OsString::from("wds:/data/a\\{b,c\\}\\\\x/shard-{000000..000002}.tar")
        );
        assert_eq!(
            data_arg(Format::Recordio, d, 0),
            OsString::from("recordio:/data/a{b,c}\\x/data")
        );
    }
}
