//! webdataset tar shards (`shards/{00000..00099}.tar`), what webdataset's `TarWriter` and
//! img2dataset write, read without Python.
//!
//! A shard is a plain (uncompressed) tar file; a sample is the run of consecutive regular files
//! that share a key, as webdataset groups them: a member's key is its name up to the first dot of
//! its last path component and its suffix the rest, lower-cased (`base_plus_ext`); names without
//! a dot and webdataset's `__meta__` files are passed over; a suffix twice in one sample is an
//! error. A sample's image is its member with one of the suffixes an image folder takes
//! ([`crate::folder::IMG_EXTENSIONS`]: `jpg`, `jpeg`, `png`, `ppm`, `bmp`, `pgm`, `tif`, `tiff`,
//! `webp`; the first of those in that order), its class the integer in its `cls` member or the
//! `label` field of its `json` member. Samples without an image or a
//! class are left out, with a warning. A `path` member (what `pack` writes) holds the path of the
//! file the sample was packed from, as bytes ([`Shards::packed_path`]).
//!
//! The shards are indexed when a run starts (each member's header is read; the data between is
//! skipped by seeking; only `cls` and `json` members are read), so that every rank knows every
//! shard's samples: a sample is then read with one positioned read, and the order below is a
//! function of (seed, epoch, ranks, `--workers`), whatever the timing.
//!
//! Per epoch the order follows webdataset's pipeline: the shard list shuffled (seeded by seed +
//! epoch, as `detshuffle`), split over ranks (`split_by_node`: rank r takes shards r, r + world,
//! …), then over the rank's loader threads (`split_by_worker`); each thread's samples pass
//! through a seeded shuffle buffer (`shuffle(bufsize, initial=100)`), and the rank's batches take
//! a block from each thread in turn, as a `DataLoader` takes batches from its workers. Ranks must
//! take the same number of steps: each takes `ceil(samples / world)` (`floor` with drop_last);
//! the samples past that at the end of the longer ranks' lists go to the shorter ranks, and a
//! rank still short repeats the start of its list (as `DistributedSampler` pads), so that every
//! sample is seen once per epoch.

use std::ffi::OsStr;
use std::io::Read;
use std::ops::Range;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::draws::Draws;
use crate::sampler::randperm;

/// The most a `cls` or `json` member may hold: labels, not data.
const MAX_LABEL_BYTES: u64 = 1 << 20;
/// The most a `path` member may hold (a longer one is passed over): a path, not data.
const MAX_PATH_BYTES: u64 = 1 << 16;

/// What goes wrong reading shards: each error names its shard, and the byte where there is
/// one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pattern's braces cannot be expanded.
    #[error("{}", .pattern.display())]
    Pattern {
        pattern: std::ffi::OsString,
        #[source]
        source: PatternError,
    },
    /// A shard cannot be opened (the source names it).
    #[error("cannot read the shard")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{}: a compressed (gzip) shard: shards are read by position, so they must be plain tar \
         files (gunzip them)",
        .path.display()
    )]
    Compressed { path: PathBuf },
    /// A member header cannot be read: after the last member that read well.
    #[error("{}: damaged or cut short after byte {after} ({len} bytes in all)", .path.display())]
    Damaged {
        path: PathBuf,
        after: u64,
        len: u64,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{}: cut short: member {member} at byte {at} holds {size} bytes, and the file ends \
         {left} bytes after its start",
        .path.display()
    )]
    CutShort {
        path: PathBuf,
        member: String,
        at: u64,
        size: u64,
        left: u64,
    },
    #[error(
        "{}: member {member} at byte {at}: a second `{suffix}` file for sample {key} \
         (webdataset refuses duplicate file names in a sample)",
        .path.display()
    )]
    Duplicate {
        path: PathBuf,
        member: String,
        at: u64,
        suffix: String,
        key: String,
    },
    /// Reading a member (a class, a path) or a sample's image failed.
    #[error("{}: reading {len} bytes at byte {offset}", .path.display())]
    Read {
        path: PathBuf,
        offset: u64,
        len: u64,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{}: no sample with an image and a class in {shards} shard{}{}",
        .pattern.display(),
        if *.shards == 1 { "" } else { "s" },
        .first.as_ref().map(|why| format!(" ({why})")).unwrap_or_default()
    )]
    NoSamples {
        pattern: std::ffi::OsString,
        shards: usize,
        /// Why the first sample left out was.
        first: Option<String>,
    },
    #[error("an image of {len} bytes, over the {limit} an image within --max-pixels takes")]
    ImageTooLarge { len: u64, limit: u64 },
    /// The shard is shorter than when it was indexed: [`Shards::shrunk`].
    #[error(
        "{} at byte {now}: the shard ends here, {} bytes short of the {was} it had when the run \
         indexed it (truncated or replaced while read)",
        .path.display(), .was - .now
    )]
    Shrunk { path: PathBuf, now: u64, was: u64 },
}

impl error_class::Classify for Error {
    fn class(&self) -> error_class::Class {
        error_class::Class::Fatal
    }
}

/// A brace pattern that cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("unbalanced braces in {:?}", String::from_utf8_lossy(.pattern))]
    Unbalanced { pattern: Vec<u8> },
    /// The pattern, or one of its ranges (in its braces), names too many shards.
    #[error("{:?} names more than {MAX_SHARDS} shards", String::from_utf8_lossy(.pattern))]
    TooMany { pattern: Vec<u8> },
}

/// Why a sample's class cannot be read (the sample is left out).
#[derive(Debug, thiserror::Error)]
pub enum LabelError {
    #[error("its {suffix} member has {size} bytes")]
    TooLarge { suffix: String, size: u64 },
    #[error("its cls {:?} is not a class number", .text.escape_ascii().to_string())]
    Cls { text: Vec<u8> },
    #[error("its json does not parse")]
    Json(#[source] serde_json::Error),
    #[error("its json has no `label` field")]
    NoLabel,
    #[error("its json label {0} is not a class number")]
    JsonLabel(serde_json::Value),
}

/// The samples of a set of shards.
#[derive(Debug)]
pub struct Shards {
    pub files: Vec<PathBuf>,
    pub samples: Vec<Sample>,
    /// Each shard's samples, a range of `samples`.
    pub ranges: Vec<Range<usize>>,
    /// Samples left out (no image, or no class), with why: the first few.
    pub left_out: Vec<String>,
    pub left_out_count: usize,
    /// Each shard's length when it was indexed: shorter later, it was cut while read.
    lens: Vec<u64>,
}

/// One sample: its key and where its image is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub shard: usize,
    pub key: Vec<u8>,
    /// The image's bytes in the shard file.
    pub offset: u64,
    pub len: u64,
    pub label: i64,
    /// Where the sample's `path` member's bytes are in the shard file (offset, length), if it
    /// has one.
    pub path: Option<(u64, u64)>,
}

/// How one epoch's samples are split and shuffled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    pub world: usize,
    pub rank: usize,
    /// Loader threads per rank (`--workers`).
    pub workers: usize,
    /// Samples a rank takes from one thread before the next thread's (its batch).
    pub block: usize,
    pub shuffle: bool,
    pub seed: u64,
    pub drop_last: bool,
    /// The shuffle buffer's size, in samples.
    pub buffer: usize,
}

impl Shards {
    /// Expands `pattern` (braces as in webdataset's `braceexpand`) and indexes every shard.
    pub fn open(pattern: &OsStr) -> Result<Shards, Error> {
        let names = braceexpand(pattern.as_bytes()).map_err(|source| Error::Pattern {
            pattern: pattern.to_owned(),
            source,
        })?;
        let files: Vec<PathBuf> = names
            .into_iter()
            .map(|n| PathBuf::from(OsStr::from_bytes(&n)))
            .collect();
        use rayon::prelude::*;
        let indexed: Vec<Result<Indexed, Error>> = files
            .par_iter()
            .enumerate()
            .map(|(i, f)| index(i, f))
            .collect();
        let mut shards = Shards {
            files,
            samples: Vec::new(),
            ranges: Vec::new(),
            left_out: Vec::new(),
            left_out_count: 0,
            lens: Vec::new(),
        };
        for one in indexed {
            let one = one?;
            shards.lens.push(one.len);
            let start = shards.samples.len();
            shards.samples.extend(one.samples);
            shards.ranges.push(start..shards.samples.len());
            shards.left_out_count += one.left_out.len();
            let room = 5usize.saturating_sub(shards.left_out.len());
            shards.left_out.extend(one.left_out.into_iter().take(room));
        }
        if shards.samples.is_empty() {
            return Err(Error::NoSamples {
                pattern: pattern.to_owned(),
                shards: shards.files.len(),
                first: shards.left_out.first().cloned(),
            });
        }
        Ok(shards)
    }

    /// Sample `i`'s name: `SHARD:KEY`.
    pub fn name(&self, i: usize) -> PathBuf {
        let s = &self.samples[i];
        let mut name = self.files[s.shard].as_os_str().as_bytes().to_vec();
        name.push(b':');
        name.extend_from_slice(&s.key);
        PathBuf::from(OsStr::from_bytes(&name))
    }

    /// Why sample `i`'s shard can no longer be read as it was indexed, if it cannot: it is
    /// shorter than it was (truncated, or replaced, while a run reads it), named with the byte
    /// where it now ends. Not a bad sample but data that shrank under the run.
    pub fn shrunk(&self, i: usize) -> Option<Error> {
        let shard = self.samples.get(i)?.shard;
        let path = &self.files[shard];
        let now = std::fs::metadata(path).ok()?.len();
        let was = self.lens[shard];
        (now < was).then(|| Error::Shrunk {
            path: path.clone(),
            now,
            was,
        })
    }

    /// Sample `i`'s image bytes, refused past `limit`.
    pub fn read(&self, i: usize, limit: u64) -> Result<Vec<u8>, Error> {
        let s = &self.samples[i];
        if s.len > limit {
            return Err(Error::ImageTooLarge { len: s.len, limit });
        }
        self.bytes_at(s.shard, s.offset, s.len)
    }

    /// `len` bytes at `offset` of shard `shard` (a sample's member, bounded when indexed).
    fn bytes_at(&self, shard: usize, offset: u64, len: u64) -> Result<Vec<u8>, Error> {
        let path = &self.files[shard];
        // Opened as a regular file only: a shard replaced by a FIFO would block the open.
        let (f, _) = input_file::open(path).map_err(|source| Error::Open {
            path: path.clone(),
            source,
        })?;
        let mut bytes = vec![0; len as usize];
        f.read_exact_at(&mut bytes, offset)
            .map_err(|source| Error::Read {
                path: path.clone(),
                offset,
                len,
                source,
            })?;
        Ok(bytes)
    }

    /// The path of the file sample `i` was packed from (its `path` member, as bytes), if it has
    /// one: read from the shard when asked.
    pub fn packed_path(&self, i: usize) -> Result<Option<PathBuf>, Error> {
        let s = &self.samples[i];
        let Some((offset, len)) = s.path else {
            return Ok(None);
        };
        // Bounded when indexed (MAX_PATH_BYTES).
        let bytes = self.bytes_at(s.shard, offset, len)?;
        Ok(Some(PathBuf::from(std::ffi::OsString::from_vec(bytes))))
    }

    /// This rank's samples for `epoch`, in the order it trains on them (see the module's text).
    pub fn order(&self, split: &Split, epoch: usize) -> Vec<usize> {
        let n = self.files.len();
        let shards: Vec<usize> = if split.shuffle {
            randperm(n, split.seed.wrapping_add(epoch as u64))
        } else {
            (0..n).collect()
        };
        let lists: Vec<Vec<usize>> = (0..split.world)
            .map(|rank| self.rank_order(&shards, &Split { rank, ..*split }, epoch))
            .collect();
        balance(lists, split, self.samples.len())
    }

    /// Rank `split.rank`'s own samples of the epoch's `shards` list: its shards, its threads,
    /// their buffers, interleaved.
    fn rank_order(&self, shards: &[usize], split: &Split, epoch: usize) -> Vec<usize> {
        let mine: Vec<usize> = shards
            .iter()
            .copied()
            .skip(split.rank)
            .step_by(split.world)
            .collect();
        let workers = split.workers.max(1);
        let streams: Vec<Vec<usize>> = (0..workers)
            .map(|w| {
                let samples = mine
                    .iter()
                    .skip(w)
                    .step_by(workers)
                    .flat_map(|&s| self.ranges[s].clone());
                if split.shuffle {
                    let stream = split.rank * workers + w;
                    let mut draws =
                        Draws::new((split.seed ^ 0x7764_735F_6275_6600) as i64, epoch, stream);
                    shuffle_buffer(samples, split.buffer, &mut draws)
                } else {
                    samples.collect()
                }
            })
            .collect();
        interleave(streams, split.block.max(1))
    }
}

/// webdataset's `_shuffle(data, bufsize, initial=100)`: the buffer fills two samples per sample
/// read until it holds `bufsize`, and yields a random one of its samples once it holds `initial`.
fn shuffle_buffer(
    mut data: impl Iterator<Item = usize>,
    bufsize: usize,
    draws: &mut Draws,
) -> Vec<usize> {
    let bufsize = bufsize.max(1);
    let initial = bufsize.min(100);
    // Sized by the samples there are, not by the flag (`--shuffle-buffer 1000000000000`).
    let mut buf = Vec::with_capacity(bufsize.min(data.size_hint().0) + 1);
    let mut out = Vec::new();
    let mut pick = |buf: &mut Vec<usize>| {
        let k = (draws.next_u64() % buf.len() as u64) as usize;
        buf.swap_remove(k)
    };
    while let Some(s) = data.next() {
        buf.push(s);
        if buf.len() < bufsize
            && let Some(t) = data.next()
        {
            buf.push(t);
        }
        if buf.len() >= initial {
            out.push(pick(&mut buf));
        }
    }
    while !buf.is_empty() {
        out.push(pick(&mut buf));
    }
    out
}

/// The threads' samples as a `DataLoader` takes its workers' batches: `block` from each thread
/// in turn, a thread that has run out passed over.
fn interleave(streams: Vec<Vec<usize>>, block: usize) -> Vec<usize> {
    let total = streams.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    let mut at = vec![0; streams.len()];
    while out.len() < total {
        for (s, pos) in streams.iter().zip(at.iter_mut()) {
            let end = (*pos + block).min(s.len());
            out.extend_from_slice(&s[*pos..end]);
            *pos = end;
        }
    }
    out
}

/// Every rank's list cut or filled to the same length: the surplus at the end of the longer
/// lists goes, in rank order, to the shorter; a list still short repeats its start (or, empty,
/// the start of all the samples).
fn balance(mut lists: Vec<Vec<usize>>, split: &Split, total: usize) -> Vec<usize> {
    let per = crate::sampler::DistributedSampler {
        len: total,
        world: split.world,
        rank: split.rank,
        shuffle: split.shuffle,
        seed: split.seed,
        drop_last: split.drop_last,
    }
    .num_samples();
    let mut surplus = Vec::new();
    for list in &mut lists {
        if list.len() > per {
            surplus.extend(list.drain(per..));
        }
    }
    let mut surplus = surplus.into_iter();
    for list in &mut lists {
        while list.len() < per {
            match surplus.next() {
                Some(s) => list.push(s),
                None => break,
            }
        }
    }
    let mut mine = std::mem::take(&mut lists[split.rank]);
    if mine.len() < per {
        let source = if mine.is_empty() {
            (0..total).collect()
        } else {
            mine.clone()
        };
        let pad = per - mine.len();
        mine.extend(source.iter().cycle().take(pad));
    }
    mine
}

/// One shard's samples and the ones left out.
struct Indexed {
    samples: Vec<Sample>,
    left_out: Vec<String>,
    /// The shard's length.
    len: u64,
}

/// A sample being gathered: its key, members' suffixes, image (suffix rank, offset, length) and
/// class.
struct Gathering {
    key: Vec<u8>,
    suffixes: Vec<Vec<u8>>,
    image: Option<(usize, u64, u64)>,
    label: Option<Result<i64, LabelError>>,
    path: Option<(u64, u64)>,
}

/// Reads one shard's member headers (and its `cls`/`json` members) into samples.
///
/// Kept in one piece: the tar member loop, each header checked before its member is read.
fn index(shard: usize, path: &Path) -> Result<Indexed, Error> {
    let (file, len) = open_tar(path)?;
    let damaged = |after, source| Error::Damaged {
        path: path.to_path_buf(),
        after,
        len,
        source,
    };
    let mut out = Indexed {
        samples: Vec::new(),
        left_out: Vec::new(),
        len,
    };
    let mut archive = tar::Archive::new(file);
    let entries = archive.entries_with_seek().map_err(|e| damaged(0, e))?;
    let mut current: Option<Gathering> = None;
    // Where the last member that read well ended: a damaged header is after it.
    let mut good_to = 0u64;
    for entry in entries {
        let mut entry = entry.map_err(|e| damaged(good_to, e))?;
        let (data, size) = (entry.raw_file_position(), entry.size());
        let name = entry.path_bytes().into_owned();
        if data.checked_add(size).is_none_or(|end| end > len) {
            return Err(Error::CutShort {
                path: path.to_path_buf(),
                member: String::from_utf8_lossy(&name).into_owned(),
                at: entry.raw_header_position(),
                size,
                left: len.saturating_sub(data),
            });
        }
        good_to = data + size;
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_contiguous()) || is_meta(&name) {
            continue;
        }
        let Some((key, suffix)) = base_plus_ext(&name) else {
            continue;
        };
        let suffix = suffix.to_ascii_lowercase();
        if current.as_ref().is_none_or(|g| g.key != key) {
            if let Some(g) = current.take() {
                finish(shard, path, g, &mut out);
            }
            current = Some(Gathering {
                key: key.to_vec(),
                suffixes: Vec::new(),
                image: None,
                label: None,
                path: None,
            });
        }
        let g = current.as_mut().expect("a sample is being gathered");
        if g.suffixes.contains(&suffix) {
            return Err(Error::Duplicate {
                path: path.to_path_buf(),
                member: String::from_utf8_lossy(&name).into_owned(),
                at: entry.raw_header_position(),
                suffix: String::from_utf8_lossy(&suffix).into_owned(),
                key: String::from_utf8_lossy(key).into_owned(),
            });
        }
        if let Some(rank) = crate::folder::extension_rank(&suffix) {
            if g.image.is_none_or(|(r, ..)| rank < r) {
                g.image = Some((rank, data, size));
            }
        } else if (suffix == b"cls" || suffix == b"json") && g.label.is_none() {
            g.label = Some(read_label(&mut entry, &suffix, (data, size), path)?);
        } else if suffix == b"path" && size <= MAX_PATH_BYTES {
            g.path = Some((data, size));
        }
        g.suffixes.push(suffix);
    }
    if let Some(g) = current.take() {
        finish(shard, path, g, &mut out);
    }
    Ok(out)
}

/// A shard opened for reading (a FIFO refused without waiting for a writer), and its length;
/// a gzip-compressed one is refused.
fn open_tar(path: &Path) -> Result<(std::fs::File, u64), Error> {
    let (file, len) = input_file::open(path).map_err(|source| Error::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let mut magic = [0u8; 2];
    if file.read_exact_at(&mut magic, 0).is_ok() && magic == [0x1f, 0x8b] {
        return Err(Error::Compressed {
            path: path.to_path_buf(),
        });
    }
    Ok((file, len))
}

/// A `cls` or `json` member's label (`suffix` lowercase), the member `size` bytes at `data` in
/// the shard at `path`: one over [`MAX_LABEL_BYTES`] is not read (the sample is left out).
fn read_label(
    member: &mut impl Read,
    suffix: &[u8],
    (data, size): (u64, u64),
    path: &Path,
) -> Result<Result<i64, LabelError>, Error> {
    if size > MAX_LABEL_BYTES {
        return Ok(Err(LabelError::TooLarge {
            suffix: suffix.escape_ascii().to_string(),
            size,
        }));
    }
    let mut text = Vec::with_capacity(size as usize);
    member
        .read_to_end(&mut text)
        .map_err(|source| Error::Read {
            path: path.to_path_buf(),
            offset: data,
            len: size,
            source,
        })?;
    Ok(if suffix == b"cls" {
        parse_cls(&text)
    } else {
        parse_json_label(&text)
    })
}

/// A gathered sample into the shard's samples, or its reason into the left-out list.
fn finish(shard: usize, path: &Path, g: Gathering, out: &mut Indexed) {
    let name = || format!("{}:{}", path.display(), String::from_utf8_lossy(&g.key));
    match (g.image, g.label) {
        (Some((_, offset, len)), Some(Ok(label))) => out.samples.push(Sample {
            shard,
            key: g.key,
            offset,
            len,
            label,
            path: g.path,
        }),
        (None, _) => out.left_out.push(format!("{}: no image file", name())),
        (_, None) => out
            .left_out
            .push(format!("{}: no `cls` or `json` file (its class)", name())),
        (_, Some(Err(why))) => {
            (out.left_out).push(format!("{}: {}", name(), error_class::chain_text(&why)))
        }
    }
}

/// A `cls` member: an integer in text (webdataset writes `str(label)`), a class number.
fn parse_cls(text: &[u8]) -> Result<i64, LabelError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok())
        .filter(|c| (0..1_000_000_000).contains(c))
        .ok_or_else(|| LabelError::Cls {
            text: text.to_vec(),
        })
}

/// A `json` member's `label` field, a class number.
fn parse_json_label(text: &[u8]) -> Result<i64, LabelError> {
    let v: serde_json::Value = serde_json::from_slice(text).map_err(LabelError::Json)?;
    match v.get("label") {
        None => Err(LabelError::NoLabel),
        Some(l) => l
            .as_i64()
            .filter(|c| (0..1_000_000_000).contains(c))
            .ok_or_else(|| LabelError::JsonLabel(l.clone())),
    }
}

/// webdataset's metadata members: `__x__` at the top, or a name matching `__[^/]*__($|/)`.
fn is_meta(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(b"__") else {
        return false;
    };
    let first = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
    // `__[^/]*__` then the end or a slash: some `__` within the first component ends it, with
    // `[^/]*` greedy but backtracking to any `__` there.
    (0..first.saturating_sub(1))
        .any(|i| &rest[i..i + 2] == b"__" && (i + 2 == rest.len() || rest[i + 2] == b'/'))
}

/// webdataset's `base_plus_ext`: `re.match(r"^((?:.*/|)[^.]+)[.]([^/]*)$", path)` as (key,
/// suffix), or None where it does not match. The suffix has no `/`, so the dot is the first of
/// the last component; the key's `[^.]+` may then begin at any earlier component boundary
/// (`.*` matches no newline) from which it holds no dot.
pub fn base_plus_ext(name: &[u8]) -> Option<(&[u8], &[u8])> {
    let last = name.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let dot = last + name[last..].iter().position(|&b| b == b'.')?;
    let starts = std::iter::once(0).chain(
        name[..dot]
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b == b'/')
            .map(|(i, _)| i + 1),
    );
    let ok = starts
        .filter(|&k| k < dot && !name[..k].contains(&b'\n'))
        .any(|k| !name[k..dot].contains(&b'.'));
    ok.then(|| (&name[..dot], &name[dot + 1..]))
}

/// Brace expansion as Python's `braceexpand` (which webdataset uses) does it: `{a,b}`
/// alternatives, `{1..10}`, `{001..100}` (zero-padded), `{1..9..2}`, `{a..e}`, nesting,
/// backslash escapes; unbalanced braces are an error.
pub fn braceexpand(pattern: &[u8]) -> Result<Vec<Vec<u8>>, PatternError> {
    let parts = parse_pattern(pattern)?;
    Ok(parts
        .into_iter()
        .map(|mut s| {
            unescape(&mut s);
            s
        })
        .collect())
}

/// `parse_pattern`: the product of literal runs and brace expressions.
fn parse_pattern(p: &[u8]) -> Result<Vec<Vec<u8>>, PatternError> {
    let mut items: Vec<Vec<Vec<u8>>> = Vec::new();
    let (mut start, mut depth) = (0usize, 0i32);
    for (pos, c) in unescaped(p) {
        match c {
            b'{' => {
                if depth == 0 && pos > start {
                    items.push(vec![p[start..pos].to_vec()]);
                    start = pos;
                }
                depth += 1;
            }
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    let expr = &p[start + 1..pos];
                    match parse_expression(expr)? {
                        Some(item) => items.push(item),
                        None => {
                            items.push(vec![b"{".to_vec()]);
                            items.push(parse_pattern(expr)?);
                            items.push(vec![b"}".to_vec()]);
                        }
                    }
                    start = pos + 1;
                }
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(PatternError::Unbalanced {
            pattern: p.to_vec(),
        });
    }
    if start < p.len() {
        items.push(vec![p[start..].to_vec()]);
    }
    // The names are made only once their number is known to be within bounds.
    let names = items
        .iter()
        .try_fold(1usize, |n, item| n.checked_mul(item.len()))
        .filter(|&n| n <= MAX_SHARDS);
    if names.is_none() {
        return Err(PatternError::TooMany {
            pattern: p.to_vec(),
        });
    }
    let mut out = vec![Vec::new()];
    for item in items {
        out = out
            .iter()
            .flat_map(|a| {
                item.iter().map(move |b| {
                    let mut s = a.clone();
                    s.extend_from_slice(b);
                    s
                })
            })
            .collect();
    }
    Ok(out)
}

/// `parse_expression`: an integer range, a letter range, or a comma sequence (None when it is
/// none of them: the braces are then literal).
fn parse_expression(e: &[u8]) -> Result<Option<Vec<Vec<u8>>>, PatternError> {
    if let Some(r) = int_range(e)? {
        return Ok(Some(r));
    }
    if let Some(r) = char_range(e) {
        return Ok(Some(r));
    }
    // parse_sequence
    let mut items = Vec::new();
    let (mut start, mut depth) = (0usize, 0i32);
    for (pos, c) in unescaped(e) {
        match c {
            b'{' => depth += 1,
            b'}' => depth -= 1,
            b',' if depth == 0 => {
                items.extend(parse_pattern(&e[start..pos])?);
                start = pos + 1;
            }
            _ => {}
        }
    }
    if depth != 0 || items.is_empty() {
        return Ok(None);
    }
    items.extend(parse_pattern(&e[start.min(e.len())..])?);
    Ok(Some(items))
}

/// The bytes of `p` that no backslash escapes, with their places: both of braceexpand's parsers
/// step over `\x` whole (a trailing `\` ends the pattern).
fn unescaped(p: &[u8]) -> impl Iterator<Item = (usize, u8)> + '_ {
    let mut pos = 0;
    std::iter::from_fn(move || {
        while p.get(pos) == Some(&b'\\') {
            pos += 2;
        }
        let c = *p.get(pos)?;
        pos += 1;
        Some((pos - 1, c))
    })
}

/// `(-?\d+)..(-?\d+)(..-?(\d+))?`: the bounds and the step's digits.
fn range_parts(e: &[u8], bound: impl Fn(&[u8]) -> bool) -> Option<(&[u8], &[u8], i64)> {
    let text = std::str::from_utf8(e).ok()?;
    let mut parts = text.split("..");
    let (a, b) = (parts.next()?, parts.next()?);
    let step = match parts.next() {
        None => 1,
        Some(s) => {
            let digits = s.strip_prefix('-').unwrap_or(s);
            if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            // `int(step) or 1`: a step of 0 is 1.
            digits.parse::<i64>().ok().filter(|&s| s != 0).unwrap_or(1)
        }
    };
    if parts.next().is_some() || !bound(a.as_bytes()) || !bound(b.as_bytes()) {
        return None;
    }
    Some((a.as_bytes(), b.as_bytes(), step))
}

/// `make_int_range`: zero-padded to the wider bound when either bound (but a lone 0) starts
/// with 0 or -0.
fn int_range(e: &[u8]) -> Result<Option<Vec<Vec<u8>>>, PatternError> {
    let is_int = |s: &[u8]| {
        let d = s.strip_prefix(b"-").unwrap_or(s);
        !d.is_empty() && d.iter().all(u8::is_ascii_digit)
    };
    let Some((a, b, step)) = range_parts(e, is_int) else {
        return Ok(None);
    };
    let pad = [a, b]
        .iter()
        .any(|s| *s != b"0" && *s != b"-0" && (s.starts_with(b"0") || s.starts_with(b"-0")));
    let width = if pad { a.len().max(b.len()) } else { 0 };
    let int = |s: &[u8]| std::str::from_utf8(s).ok()?.parse::<i64>().ok();
    let (Some(x), Some(y)) = (int(a), int(b)) else {
        return Ok(None);
    };
    // Far too many shards to name is a mistake, not a data set: said before they are named.
    if x.abs_diff(y) / step as u64 >= MAX_SHARDS as u64 {
        return Err(PatternError::TooMany {
            pattern: [b"{", e, b"}"].concat(),
        });
    }
    let values: Vec<i64> = if x < y {
        (x..=y).step_by(step as usize).collect()
    } else {
        (y..=x).rev().step_by(step as usize).collect()
    };
    Ok(Some(
        values
            .into_iter()
            .map(|v| {
                // Python's '%0Nd': the sign counts in the width.
                if v < 0 {
                    format!("-{:0w$}", -v, w = width.saturating_sub(1)).into_bytes()
                } else {
                    format!("{v:0width$}").into_bytes()
                }
            })
            .collect(),
    ))
}

/// The most shards a pattern may name (a million: img2dataset's largest sets have tens of
/// thousands).
pub const MAX_SHARDS: usize = 1_000_000;

/// `make_char_range` over `A..Za..z`.
fn char_range(e: &[u8]) -> Option<Vec<Vec<u8>>> {
    let is_letter = |s: &[u8]| s.len() == 1 && s[0].is_ascii_alphabetic();
    let (a, b, step) = range_parts(e, is_letter)?;
    let alphabet: Vec<u8> = (b'A'..=b'Z').chain(b'a'..=b'z').collect();
    let at = |c: u8| alphabet.iter().position(|&x| x == c).expect("a letter");
    let (x, y) = (at(a[0]), at(b[0]));
    let picked: Vec<u8> = if x < y {
        alphabet[x..=y]
            .iter()
            .step_by(step as usize)
            .copied()
            .collect()
    } else {
        alphabet[y..=x]
            .iter()
            .rev()
            .step_by(step as usize)
            .copied()
            .collect()
    };
    Some(picked.into_iter().map(|c| vec![c]).collect())
}

/// `escape_re.sub(r'\1', ...)`: a backslash keeps the character after it.
fn unescape(s: &mut Vec<u8>) {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\' && i + 1 < s.len() {
            out.push(s[i + 1]);
            i += 2;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    *s = out;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(p: &str) -> Vec<String> {
        braceexpand(p.as_bytes())
            .unwrap()
            .into_iter()
            .map(|s| String::from_utf8(s).unwrap())
            .collect()
    }

    #[test]
    fn patterns_and_labels_that_cannot_be_read_keep_their_bytes() {
        let e = braceexpand(b"s/\xff{1{2,3}").unwrap_err();
        assert_eq!(
            e,
            PatternError::Unbalanced {
                pattern: b"s/\xff{1{2,3}".to_vec()
            }
        );
        assert_eq!(e.to_string(), "unbalanced braces in \"s/\u{fffd}{1{2,3}\"");
        let e = braceexpand(b"{0..1000000000000}").unwrap_err();
        assert_eq!(
            e,
            PatternError::TooMany {
                pattern: b"{0..1000000000000}".to_vec()
            }
        );
        let e = parse_cls(b"seven\xff").unwrap_err();
        assert!(
            matches!(&e, LabelError::Cls { text } if text == b"seven\xff"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "its cls \"seven\\\\xff\" is not a class number"
        );
    }

    #[test]
    fn braces_expand_as_braceexpand_does() {
        assert_eq!(expand("item{1..3}"), ["item1", "item2", "item3"]);
        assert_eq!(expand("{a..c}"), ["a", "b", "c"]);
        assert_eq!(
            expand("index.html{,.backup}"),
            ["index.html", "index.html.backup"]
        );
        assert_eq!(
            expand("python{2.{5..7},3.{2,3}}"),
            [
                "python2.5",
                "python2.6",
                "python2.7",
                "python3.2",
                "python3.3"
            ]
        );
        assert_eq!(expand("{07..10}"), ["07", "08", "09", "10"]);
        assert_eq!(expand("{a..g..2}"), ["a", "c", "e", "g"]);
        assert_eq!(expand("{4..1}"), ["4", "3", "2", "1"]);
        assert_eq!(expand("{2..-1}"), ["2", "1", "0", "-1"]);
        assert_eq!(expand(r"{1\{2,3}"), ["1{2", "3"]);
        assert_eq!(
            expand("s/{00000..00002}.tar"),
            ["s/00000.tar", "s/00001.tar", "s/00002.tar"]
        );
        assert_eq!(expand("{x}"), ["{x}"]);
        assert!(braceexpand(b"{1{2,3}").is_err());
        // Named only within bounds: a product of ranges, or one range, past a million names.
        for huge in [
            "{0..999999}{0..999999}",
            "{0..1000000000000}",
            "{1..9}{0..999999}",
        ] {
            let e = braceexpand(huge.as_bytes()).unwrap_err();
            assert!(matches!(e, PatternError::TooMany { .. }), "{huge}: {e}");
            assert!(
                e.to_string().contains("more than 1000000 shards"),
                "{huge}: {e}"
            );
        }
        assert_eq!(braceexpand(b"{0..999999}").unwrap().len(), 1_000_000);
    }

    #[test]
    fn keys_and_suffixes_follow_base_plus_ext() {
        let split = |n: &str| {
            base_plus_ext(n.as_bytes()).map(|(k, s)| {
                (
                    String::from_utf8(k.to_vec()).unwrap(),
                    String::from_utf8(s.to_vec()).unwrap(),
                )
            })
        };
        let kv = |k: &str, s: &str| Some((k.to_string(), s.to_string()));
        assert_eq!(split("a/b.c.jpg"), kv("a/b", "c.jpg"));
        assert_eq!(split("x.y/b.jpg"), kv("x.y/b", "jpg"));
        assert_eq!(split("dir/.x.jpg"), kv("dir/", "x.jpg"));
        assert_eq!(split("d.r/.x.jpg"), None);
        assert_eq!(split(".x.jpg"), None);
        assert_eq!(split("noext"), None);
        assert_eq!(split("d.x/noext"), None);
        assert!(is_meta(b"__key__"));
        assert!(is_meta(b"__a__/b.jpg"));
        assert!(!is_meta(b"__a_b.jpg"));
        assert!(!is_meta(b"a__b__"));
    }

    /// Shards of `sizes` samples each, in memory (no files).
    fn shards(sizes: &[usize]) -> Shards {
        let (mut samples, mut ranges) = (Vec::new(), Vec::new());
        for (shard, &n) in sizes.iter().enumerate() {
            let start = samples.len();
            for k in 0..n {
                samples.push(Sample {
                    shard,
                    key: format!("{shard}/{k}").into_bytes(),
                    offset: 0,
                    len: 0,
                    label: 0,
                    path: None,
                });
            }
            ranges.push(start..samples.len());
        }
        Shards {
            files: sizes.iter().map(|_| PathBuf::new()).collect(),
            samples,
            ranges,
            left_out: Vec::new(),
            left_out_count: 0,
            lens: sizes.iter().map(|_| 0).collect(),
        }
    }

    fn split(world: usize, workers: usize) -> Split {
        Split {
            world,
            rank: 0,
            workers,
            block: 4,
            shuffle: true,
            seed: 3,
            drop_last: false,
            buffer: 50,
        }
    }

    #[test]
    fn two_ranks_of_three_threads_see_every_sample_once() {
        // Uneven shards: 7 shards, sizes that split unevenly over 2 ranks × 3 threads.
        let set = shards(&[40, 33, 41, 12, 40, 40, 26]);
        let total = set.samples.len();
        assert_eq!(total % 2, 0);
        for epoch in 0..3 {
            let lists: Vec<Vec<usize>> = (0..2)
                .map(|rank| {
                    set.order(
                        &Split {
                            rank,
                            ..split(2, 3)
                        },
                        epoch,
                    )
                })
                .collect();
            assert_eq!(lists[0].len(), lists[1].len());
            let mut all: Vec<usize> = lists.concat();
            all.sort();
            assert_eq!(all, (0..total).collect::<Vec<_>>(), "epoch {epoch}");
        }
        let e0 = set.order(&split(2, 3), 0);
        assert_eq!(
            e0,
            set.order(&split(2, 3), 0),
            "a function of its arguments"
        );
        assert_ne!(e0, set.order(&split(2, 3), 1), "shuffled per epoch");
        let plain = Split {
            shuffle: false,
            ..split(1, 1)
        };
        assert_eq!(set.order(&plain, 5), (0..total).collect::<Vec<_>>());
    }

    #[test]
    fn a_rank_reads_its_own_shards_and_threads_take_turns() {
        // Four equal shards, two ranks, two threads, no shuffling: rank 0 has shards 0 and 2,
        // thread 0 shard 0 and thread 1 shard 2, taken a block (4) at a time.
        let set = shards(&[6, 6, 6, 6]);
        let s = Split {
            shuffle: false,
            ..split(2, 2)
        };
        let r0 = set.order(&s, 0);
        assert_eq!(r0, [0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 16, 17]);
        let r1 = set.order(&Split { rank: 1, ..s }, 0);
        assert_eq!(r1, [6, 7, 8, 9, 18, 19, 20, 21, 10, 11, 22, 23]);
    }

    #[test]
    fn uneven_ranks_are_padded_or_cut_as_the_sampler_does() {
        // 3 samples in one shard over 2 ranks: rank 0 has them all; 2 each, one repeated.
        let set = shards(&[3]);
        let s = Split {
            shuffle: false,
            ..split(2, 1)
        };
        assert_eq!(set.order(&s, 0), [0, 1]);
        assert_eq!(set.order(&Split { rank: 1, ..s }, 0), [2, 2]);
        let d = Split {
            drop_last: true,
            ..s
        };
        assert_eq!(set.order(&d, 0), [0]);
        assert_eq!(set.order(&Split { rank: 1, ..d }, 0), [1]);
    }

    #[test]
    fn a_huge_shuffle_buffer_allocates_for_the_samples_there_are() {
        let mut d = Draws::new(1, 0, 0);
        let mut out = shuffle_buffer(0..500, usize::MAX, &mut d);
        out.sort_unstable();
        assert_eq!(out, (0..500).collect::<Vec<_>>());
    }

    #[test]
    fn the_shuffle_buffer_is_a_permutation_that_moves_samples() {
        let mut d = Draws::new(1, 0, 0);
        let out = shuffle_buffer(0..500, 100, &mut d);
        let mut sorted = out.clone();
        sorted.sort();
        assert_eq!(sorted, (0..500).collect::<Vec<_>>());
        assert_ne!(out, sorted);
        // Nothing comes out before the buffer holds 100 samples: the first is one of them.
        assert!(out[0] < 100);
    }
}
