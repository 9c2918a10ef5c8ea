//! The sweep's append-only journal, `OUT_DIR/journal.jsonl`: the sweep's definition first, then
//! every suggested config, trial start, result (with the scheduler's answer), failure and end,
//! one JSON line each,
//! written with one `write` call so that a killed sweep leaves at most a torn last line.
//! `sweep --resume` replays it through a fresh scheduler to rebuild the rungs.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use crate::error::{Context, Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use search::asha::AshaSettings;
use search::median::MedianSettings;
use search::pbt::PbtSettings;
use search::space::Config;

pub const FILE: &str = "journal.jsonl";

/// A command-line argument, kept losslessly: text when it is UTF-8, else its bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ArgRepr {
    Text(String),
    Bytes { bytes: Vec<u8> },
}

impl ArgRepr {
    pub fn from_os(a: &OsString) -> Self {
        match a.to_str() {
            Some(s) => ArgRepr::Text(s.to_string()),
            None => ArgRepr::Bytes {
                bytes: a.as_bytes().to_vec(),
            },
        }
    }

    pub fn to_os(&self) -> OsString {
        match self {
            ArgRepr::Text(s) => OsString::from(s),
            ArgRepr::Bytes { bytes } => OsString::from_vec(bytes.clone()),
        }
    }
}

/// `asha`, `hyperband`, `median`, `pbt` or `fifo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum SchedulerKind {
    Asha,
    Hyperband,
    Median,
    Pbt,
    Fifo,
}

/// How trial configs are chosen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum SearchKind {
    /// Every grid combination, --samples times, other parameters drawn at random; all made
    /// when the sweep starts.
    #[default]
    Random,
    /// Optuna's tree-structured Parzen estimator: each trial's config suggested when it
    /// starts, from the results of the trials before it.
    Tpe,
    /// BOHB (HpBandSter's config generator, Ray's HyperBandForBOHB): each trial made and its
    /// config suggested when the one before has started, from the results at the brackets'
    /// milestones.
    Bohb,
}

/// Everything that decides a sweep's trials and decisions (what `--resume` takes from the
/// journal rather than the command line).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Definition {
    pub space: Value,
    pub samples: usize,
    pub seed: u32,
    pub metric: String,
    pub time_attr: String,
    pub scheduler: SchedulerKind,
    /// Absent from journals written before TPE: random.
    #[serde(default)]
    pub search: SearchKind,
    pub asha: AshaSettings,
    /// The median rule's settings (absent before it, and for the other schedulers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median: Option<MedianSettings>,
    /// Population-based training's settings (pbt only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pbt: Option<PbtSettings>,
    pub max_failures: usize,
    pub command: Vec<ArgRepr>,
    /// The generated configs, in trial order (random search; TPE's are `Suggest` entries).
    pub trials: Vec<Config>,
}

impl Definition {
    /// The sweep's trials: its generated configs (random search), else --samples (TPE and
    /// BOHB suggest each config).
    pub fn trial_count(&self) -> usize {
        match self.search {
            SearchKind::Random => self.trials.len(),
            SearchKind::Tpe | SearchKind::Bohb => self.samples,
        }
    }
}

/// A copy population-based training decided: the trial copied and the new config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Copied {
    pub from: usize,
    pub config: Config,
}

/// One journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Entry {
    Sweep {
        version: u32,
        definition: Definition,
    },
    /// A config the search algorithm suggested, before the trial's first start.
    Suggest {
        trial: usize,
        config: Config,
        /// BOHB: the config came from its density models (else it was drawn at random).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        model: bool,
    },
    Start {
        trial: usize,
        attempt: usize,
        slot: usize,
        /// Where the attempt's output starts in the trial's stdout.log: what it wrote there
        /// that the sweep had not read when it died is read from there by --resume (absent
        /// from the journals of versions that read trials through a pipe).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stdout_from: Option<u64>,
        /// Where a counted training_iteration of the attempt goes on from.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        counted_from: Option<f64>,
        /// The stdout.log the attempt wrote to: --resume reads back no other file found in its
        /// place (absent from older journals).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stdout_file: Option<FileId>,
    },
    Result {
        trial: usize,
        time: f64,
        /// NaN and ±infinity as Python's tokens, in a string.
        #[serde(with = "records::float")]
        metric: f64,
        record: Map<String, Value>,
        stop: bool,
        /// The median rule paused the trial (it yields its slot and runs again later).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pause: bool,
        /// Another trial was pending or paused (what the median rule asks).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        waiting: bool,
        /// Population-based training: the trial copies another (and pauses).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exploit: Option<Copied>,
        /// Population-based training: the trial's state was saved (it was in the top quantile).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        save: bool,
        /// Population-based training: the trial's directory held nothing of its command's (no
        /// state to save or copy).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        no_state: bool,
    },
    Failure {
        trial: usize,
        attempt: usize,
        message: String,
    },
    End {
        trial: usize,
        status: String,
        message: Option<String>,
    },
    /// Nothing could run while trials were paused: HyperBand processed their brackets again.
    Unstick,
}

/// A file known by its device and inode, and its directory's: in the same directory (the
/// sweep's, not a copy of it) another file of the same name is another file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    pub dir: [u64; 2],
    pub file: [u64; 2],
    /// When the directory and the file were made (nanoseconds since 1970), where the
    /// filesystem keeps it: a number of a deleted file's used again (a tar round trip) is
    /// another file (absent from older journals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub born: Option<[u64; 2]>,
}

impl FileId {
    /// The device and inode of what `meta` describes.
    pub fn of(meta: &std::fs::Metadata) -> [u64; 2] {
        use std::os::unix::fs::MetadataExt;
        [meta.dev(), meta.ino()]
    }

    /// When what `meta` describes was made, where the filesystem says.
    pub fn born(meta: &std::fs::Metadata) -> Option<u64> {
        let t = meta.created().ok()?;
        let ns = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
        u64::try_from(ns).ok()
    }

    /// The id of a file (`file`) in a directory (`dir`), as they are now.
    pub fn found(dir: &std::fs::Metadata, file: &std::fs::Metadata) -> FileId {
        FileId {
            dir: FileId::of(dir),
            file: FileId::of(file),
            born: FileId::born(dir)
                .zip(FileId::born(file))
                .map(|(d, f)| [d, f]),
        }
    }

    /// Whether `other`'s directory is this one's: the same device and inode, made at the same
    /// time where both say.
    pub fn same_dir(&self, other: &FileId) -> bool {
        self.dir == other.dir && self.born.zip(other.born).is_none_or(|(a, b)| a[0] == b[0])
    }

    /// Whether the directory `dir` describes is this one's, as [`FileId::same_dir`] tells.
    pub fn in_dir(&self, dir: &std::fs::Metadata) -> bool {
        let born = self.born.map(|b| b[0]);
        self.dir == FileId::of(dir) && born.zip(FileId::born(dir)).is_none_or(|(a, b)| a == b)
    }

    /// Whether `other`'s file is this one's, as [`FileId::same_dir`] tells.
    pub fn same_file(&self, other: &FileId) -> bool {
        self.file == other.file && self.born.zip(other.born).is_none_or(|(a, b)| a[1] == b[1])
    }
}

impl Entry {
    /// The trial the entry is about, if any.
    pub fn trial(&self) -> Option<usize> {
        match self {
            Entry::Suggest { trial, .. }
            | Entry::Start { trial, .. }
            | Entry::Result { trial, .. }
            | Entry::Failure { trial, .. }
            | Entry::End { trial, .. } => Some(*trial),
            Entry::Sweep { .. } | Entry::Unstick => None,
        }
    }
}

/// The open journal.
#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
}

impl Journal {
    /// Creates the journal of a new sweep; an existing one is an error (use --resume).
    pub fn create(dir: &Path, definition: &Definition) -> Result<Self> {
        let path = dir.join(FILE);
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    Error::Started {
                        dir: dir.to_path_buf(),
                    }
                } else {
                    Error::Io(e).context(format!("creating {}", path.display()))
                }
            })?;
        let mut j = Journal { file, path };
        j.append(&Entry::Sweep {
            version: 1,
            definition: definition.clone(),
        })?;
        Ok(j)
    }

    /// Opens an existing journal: its entries, and the journal ready for appending (a torn last
    /// line from a killed sweep is cut off).
    pub fn resume(dir: &Path) -> Result<(Definition, Vec<Entry>, Self)> {
        let path = dir.join(FILE);
        // A regular file only: a FIFO in its place would block the read below for ever.
        if let Err(e) = input_file::open(&path)
            && e.kind() == std::io::ErrorKind::InvalidInput
        {
            return Err(Error::Io(e));
        }
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .with_context(|| {
                format!(
                    "opening {} (is {} a sweep's --out-dir?)",
                    path.display(),
                    dir.display()
                )
            })?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .with_context(|| format!("reading {}", path.display()))?;
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if whole < bytes.len() {
            file.set_len(whole as u64)
                .with_context(|| format!("cutting the torn last line of {}", path.display()))?;
            file.seek(SeekFrom::End(0))?;
        }
        let mut entries = Vec::new();
        for (n, line) in bytes[..whole]
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .enumerate()
        {
            let e: Entry = serde_json::from_slice(line).with_context(|| {
                format!("{} line {}: not a journal entry", path.display(), n + 1)
            })?;
            entries.push(e);
        }
        let Some(Entry::Sweep {
            version: 1,
            definition,
        }) = entries.first().cloned()
        else {
            return Err(Error::Journal(format!(
                "{} does not start with a sweep definition of version 1",
                path.display()
            )));
        };
        entries.remove(0);
        Ok((definition, entries, Journal { file, path }))
    }

    /// Appends one entry with a single write.
    pub fn append(&mut self, e: &Entry) -> Result<()> {
        let mut line = serde_json::to_vec(e)?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use search::asha::Mode;

    fn definition() -> Definition {
        Definition {
            space: serde_json::json!({"lr": {"grid": [1, 2]}}),
            samples: 1,
            seed: 0,
            metric: "acc".into(),
            time_attr: "epoch".into(),
            scheduler: SchedulerKind::Asha,
            search: SearchKind::Random,
            median: None,
            pbt: None,
            asha: AshaSettings {
                max_t: 4.0,
                grace_period: 1.0,
                reduction_factor: 2.0,
                brackets: 1,
                mode: Mode::Max,
            },
            max_failures: 0,
            command: vec![
                ArgRepr::Text("x".into()),
                ArgRepr::from_os(&OsString::from_vec(b"caf\xe9".to_vec())),
            ],
            trials: vec![],
        }
    }

    #[test]
    fn a_definition_written_before_tpe_reads_as_random_search() {
        let mut v = serde_json::to_value(definition()).unwrap();
        v.as_object_mut().unwrap().remove("search").unwrap();
        let d: Definition = serde_json::from_value(v).unwrap();
        assert_eq!(d, definition());
    }

    #[test]
    fn a_fifo_in_place_of_the_journal_is_refused_not_read_for_ever() {
        let dir = tempfile::tempdir().unwrap();
        testkit::mkfifo(&dir.path().join(FILE));
        let d = dir.path().to_path_buf();
        let e = crate::testing::within("resume ends", move || {
            Journal::resume(&d).map(|_| ()).map_err(|e| e.to_string())
        })
        .unwrap_err();
        assert!(e.contains("is a FIFO"), "{e}");
    }

    #[test]
    fn round_trip_and_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::create(dir.path(), &definition()).unwrap();
        let start = Entry::Start {
            trial: 0,
            attempt: 1,
            slot: 0,
            stdout_from: Some(7),
            counted_from: None,
            stdout_file: Some(FileId {
                dir: [1, 2],
                file: [1, 3],
                born: Some([4, 5]),
            }),
        };
        j.append(&start).unwrap();
        drop(j);
        assert!(
            Journal::create(dir.path(), &definition())
                .unwrap_err()
                .to_string()
                .contains("--resume")
        );
        // A sweep killed in the middle of a write.
        let p = dir.path().join(FILE);
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"event\":\"end\",\"tri").unwrap();
        let (d, entries, mut j) = Journal::resume(dir.path()).unwrap();
        assert_eq!(d, definition());
        assert_eq!(d.command[1].to_os().as_bytes(), b"caf\xe9");
        assert_eq!(entries, [start]);
        j.append(&Entry::End {
            trial: 0,
            status: "completed".into(),
            message: None,
        })
        .unwrap();
        let (_, entries, _) = Journal::resume(dir.path()).unwrap();
        assert_eq!(entries.len(), 2);
    }
}
