//! Work items from the command line, list files and stdin.
//!
//! A line (or an argument) is a path, or a JSON record that [`records::parse_input_line`]
//! understands (shard records, a previous stage's records). A line that cannot be used becomes an
//! error record naming it, and the rest continue. Stdin is read lazily, so a long `find | tool`
//! pipe starts working at once.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use records::{ErrorRecord, InputItem, parse_input_line};

/// Checks that `path` is a regular file (following symlinks) before anything opens it: a FIFO
/// would block the open, a device (`/dev/zero`) never ends, a directory is no input. Returns its
/// length.
pub fn regular_file(path: &Path) -> anyhow::Result<u64> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    match input_file::not_regular(&meta) {
        None => Ok(meta.len()),
        Some(kind) => bail!(
            "{} is {kind}, not a regular file: only files are read",
            path.display()
        ),
    }
}

/// A boxed error, as a format's sniffer gives it.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An input whose first bytes are not of the kind asked for: the sniffer's own error (typed:
/// [`NotOfKind::kind`], e.g. `imaging::Error::NotAnImage`) and how many bytes it judged.
#[derive(Debug, thiserror::Error)]
#[error("{kind} (judged from its first {head_len} bytes)")]
pub struct NotOfKind {
    kind: BoxError,
    head_len: usize,
}

impl NotOfKind {
    /// What the sniffer said the input is not (downcast it to the sniffer's error type).
    pub fn kind(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.kind
    }

    /// The bytes judged (64, or fewer in a shorter file).
    pub fn head_len(&self) -> usize {
        self.head_len
    }
}

/// An input opened and recognised from its first bytes, the rest not read yet: what a tool holds
/// between deciding that an input is of its kind (before it may claim its output) and reading
/// it, so the file is opened and sniffed once.
#[derive(Debug)]
pub struct Sniffed {
    file: File,
    len: u64,
    head: Vec<u8>,
    path: PathBuf,
}

impl Sniffed {
    /// Opens `path` if it is a regular file whose first bytes (up to 64) `sniff` recognises
    /// (`Err` names what it is not): a file of the wrong kind is refused after a few bytes, with
    /// a [`NotOfKind`] holding the sniffer's error.
    pub fn open<E: Into<BoxError>>(
        path: &Path,
        sniff: impl Fn(&[u8]) -> Result<(), E>,
    ) -> anyhow::Result<Self> {
        let len = regular_file(path)?;
        let mut file = File::open(path).with_context(|| format!("reading {}", path.display()))?;
        let mut head = Vec::with_capacity(64);
        (&mut file)
            .take(64)
            .read_to_end(&mut head)
            .with_context(|| format!("reading {}", path.display()))?;
        if let Err(what) = sniff(&head) {
            return Err(NotOfKind {
                kind: what.into(),
                head_len: head.len(),
            }
            .into());
        }
        Ok(Sniffed {
            file,
            len,
            head,
            path: path.to_path_buf(),
        })
    }

    /// The whole file, which must be at most `limit` bytes: no input is read past what its
    /// format allows.
    pub fn read_all(self, limit: u64) -> anyhow::Result<Vec<u8>> {
        let Sniffed {
            file,
            len,
            head,
            path,
        } = self;
        if len > limit {
            bail!("{len} bytes, more than this input may hold ({limit})");
        }
        let mut bytes = head;
        bytes.reserve(len.saturating_sub(bytes.len() as u64) as usize);
        // A file that grows while it is read still stops at the limit.
        file.take((limit + 1).saturating_sub(bytes.len() as u64))
            .read_to_end(&mut bytes)
            .with_context(|| format!("reading {}", path.display()))?;
        if bytes.len() as u64 > limit {
            bail!("more than {limit} bytes: more than this input may hold");
        }
        Ok(bytes)
    }
}

/// Reads an input file whose kind `sniff` recognises from its first bytes and which is at most
/// `limit` bytes ([`Sniffed::open`], then [`Sniffed::read_all`]).
pub fn read_regular<E: Into<BoxError>>(
    path: &Path,
    limit: u64,
    sniff: impl Fn(&[u8]) -> Result<(), E>,
) -> anyhow::Result<Vec<u8>> {
    Sniffed::open(path, sniff)?.read_all(limit)
}

/// One item or the reason a line gave none.
pub type Item = Result<InputItem, ErrorRecord>;

/// What an input iterator yields: an item (or a line's error record), or, once and last, the
/// reason the list itself could not be read (stdin that is a directory, an I/O error). That one
/// is fatal: a list that cannot be read has no next line to go on with.
pub type Listed = anyhow::Result<Item>;

/// Up to `n` items, and the error that ended the list if it ended with one (after the items
/// read before it, which are still to be done).
pub fn next_chunk(
    items: &mut dyn Iterator<Item = Listed>,
    n: usize,
) -> (Vec<Item>, Option<anyhow::Error>) {
    let mut chunk = Vec::with_capacity(n);
    while chunk.len() < n {
        match items.next() {
            Some(Ok(item)) => chunk.push(item),
            Some(Err(e)) => return (chunk, Some(e)),
            None => break,
        }
    }
    (chunk, None)
}

/// How an input list (stdin, a list file) is split into entries.
#[derive(clap::Args, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListArgs {
    /// Input lists (stdin, list files) are NUL-separated, as `find -print0` writes them and
    /// `xargs -0` reads them: each entry is a path, taken byte for byte (newlines included).
    /// Without it, a list has one path or JSON record (such as {"path": ...}) per line.
    #[arg(short = '0', long = "null")]
    pub null: bool,
}

impl ListArgs {
    fn separator(self) -> u8 {
        if self.null { b'\0' } else { b'\n' }
    }
}

/// Where a per-item tool's items come from besides its positional arguments (`inputs`): `-0`
/// for its lists, and `--retry-failed FILE` ([`from_args_or_failed`]).
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemArgs {
    #[command(flatten)]
    pub list: ListArgs,
    /// Redo only what failed in an earlier run: FILE is that run's output, and each of its
    /// `error` records' inputs is an input again (as GNU parallel's --resume-failed redoes a
    /// joblog's failed jobs).
    #[arg(long, value_name = "FILE", conflicts_with = "inputs")]
    pub retry_failed: Option<PathBuf>,
}

/// Items named by positional arguments: each argument is a path (any bytes: a name need not be
/// UTF-8) or a record; `-` reads items from stdin (one per line, or per NUL with `--null`). No
/// arguments at all means stdin.
pub fn from_args(args: &[OsString], list: ListArgs) -> Box<dyn Iterator<Item = Listed> + Send> {
    if args.is_empty() {
        return stdin_lines(list);
    }
    let args = args.to_vec();
    Box::new(
        args.into_iter()
            .flat_map(move |arg| -> Box<dyn Iterator<Item = Listed> + Send> {
                if arg == "-" {
                    stdin_lines(list)
                } else {
                    Box::new(parse(arg.as_bytes()).into_iter().map(Ok))
                }
            }),
    )
}

/// Items listed in files, one per line or per NUL (`cat` semantics: `-` or no files means
/// stdin). A file that cannot be opened gives one error record.
pub fn from_files(files: &[PathBuf], list: ListArgs) -> Box<dyn Iterator<Item = Listed> + Send> {
    let files = if files.is_empty() {
        vec![PathBuf::from("-")]
    } else {
        files.to_vec()
    };
    Box::new(
        files
            .into_iter()
            .flat_map(move |f| -> Box<dyn Iterator<Item = Listed> + Send> {
                if f.as_os_str() == "-" {
                    return stdin_lines(list);
                }
                match File::open(&f) {
                    Ok(file) => lines_of(BufReader::new(file), f.into_os_string(), list),
                    Err(e) => Box::new(std::iter::once(Ok(Err(ErrorRecord {
                        input: f.into_os_string(),
                        message: format!("cannot open list file: {e}"),
                    })))),
                }
            }),
    )
}

/// The items of a per-item tool: with `--retry-failed FILE`, the inputs of the `error` records
/// in an earlier run's output ([`failed_in`]); else its arguments ([`from_args`]).
pub fn from_args_or_failed(
    args: &[OsString],
    flags: &ItemArgs,
) -> Box<dyn Iterator<Item = Listed> + Send> {
    match &flags.retry_failed {
        Some(f) => failed_in(f),
        None => from_args(args, flags.list),
    }
}

/// The inputs that failed in an earlier run, from its output (records, one per line): each
/// `error` record's input, once, in the order they failed; every other line is passed over. As
/// GNU parallel's `--resume-failed` redoes a joblog's failed jobs. A file that cannot be read is
/// the one fatal error.
pub fn failed_in(path: &Path) -> Box<dyn Iterator<Item = Listed> + Send> {
    let what = format!("reading {}", path.display());
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) => return Box::new(std::iter::once(Err(anyhow::Error::new(e).context(what)))),
    };
    let mut seen = std::collections::HashSet::new();
    Box::new(
        entries(BufReader::new(file), b'\n', what).filter_map(move |line| match line {
            // The record's "type" must be "error" (serde's tag): other records do not parse.
            Ok(line) => serde_json::from_slice::<ErrorRecord>(&line)
                .ok()
                .filter(|rec| seen.insert(rec.input.clone()))
                .map(|rec| Ok(Ok(InputItem::path(rec.input)))),
            Err(e) => Some(Err(e)),
        }),
    )
}

/// The entries of `reader` split at `separator`, as bytes. A read error ends them with one
/// error (`what` says what was being read): the same read would fail again (a directory on stdin
/// fails every read with EISDIR), and a list read past a failure may have lost entries.
fn entries(
    reader: impl BufRead + Send + 'static,
    separator: u8,
    what: String,
) -> impl Iterator<Item = anyhow::Result<Vec<u8>>> + Send {
    let mut entries = reader.split(separator);
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        match entries.next()? {
            Ok(bytes) => Some(Ok(bytes)),
            Err(e) => {
                done = true;
                Some(Err(anyhow::Error::new(e).context(what.clone())))
            }
        }
    })
}

fn stdin_lines(list: ListArgs) -> Box<dyn Iterator<Item = Listed> + Send> {
    lines_of(BufReader::new(io::stdin()), "<stdin>".into(), list)
}

/// The items of each entry of a list ([`entries`]; a path need not be UTF-8), the read error
/// that ends it last.
fn lines_of(
    reader: impl BufRead + Send + 'static,
    source: OsString,
    list: ListArgs,
) -> Box<dyn Iterator<Item = Listed> + Send> {
    let what = format!("reading the input list {}", Path::new(&source).display());
    let entries = entries(reader, list.separator(), what);
    Box::new(entries.flat_map(move |entry| -> Vec<Listed> {
        match entry {
            Ok(bytes) if list.null => entry_path(bytes).map(Ok).into_iter().collect(),
            Ok(bytes) => parse(&bytes).into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e)],
        }
    }))
}

/// A NUL-separated entry is a path, byte for byte; an empty one names nothing.
fn entry_path(bytes: Vec<u8>) -> Option<Item> {
    (!bytes.is_empty()).then(|| Ok(InputItem::path(OsString::from_vec(bytes))))
}

fn parse(line: &[u8]) -> Vec<Item> {
    match parse_input_line(line) {
        Ok(items) => items.into_iter().map(Ok).collect(),
        Err(e) => vec![Err(ErrorRecord {
            input: OsString::from_vec(line.to_vec()),
            message: e.to_string(),
        })],
    }
}

/// GNU parallel's job slot, which [`worker_slot`] reads, as `Tool::ENVIRONMENT` lists it.
pub const JOB_SLOT_ENV: (&str, &str) = (
    "PARALLEL_JOBSLOT",
    "GNU parallel's job slot: --device auto's slot (minus 1) when LOCAL_RANK is unset.",
);

/// A worker's place among processes started side by side (what `--device auto` picks a GPU
/// by when no launcher says): GNU parallel's job slot (1-based) minus 1, else the shard index of
/// a shard-record argument (`shard-list -n 4 | parallel tool`).
pub fn worker_slot(args: &[OsString]) -> Option<usize> {
    let slot = std::env::var(JOB_SLOT_ENV.0)
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .map(|s| s.saturating_sub(1));
    slot.or_else(|| shard_index(args))
}

/// The shard index of the first shard-record argument.
fn shard_index(args: &[OsString]) -> Option<usize> {
    args.iter().find_map(|a| {
        let v: serde_json::Value = serde_json::from_str(a.to_str()?).ok()?;
        (v.get("type")?.as_str()? == "shard")
            .then(|| v.get("shard")?.as_u64().map(|s| s as usize))?
    })
}

#[cfg(test)]
mod read_tests {
    use super::*;

    #[test]
    fn only_regular_files_of_the_right_kind_and_size_are_read() {
        let (dir, good) = testkit::temp_file("a.bin", b"MAGIC and the rest");
        let sniff = |b: &[u8]| {
            if b.starts_with(b"MAGIC") {
                Ok(())
            } else {
                Err("not MAGIC".to_string())
            }
        };
        assert_eq!(
            read_regular(&good, 100, sniff).unwrap(),
            b"MAGIC and the rest"
        );
        let e = read_regular(&good, 10, sniff).unwrap_err().to_string();
        assert!(e.contains("18 bytes, more than"), "{e}");
        let e = read_regular(dir.path(), 100, sniff)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a directory"), "{e}");
        let e = read_regular(Path::new("/dev/zero"), 100, sniff)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a device"), "{e}");
        let zeros = dir.path().join("zeros");
        std::fs::File::create(&zeros)
            .unwrap()
            .set_len(1 << 40)
            .unwrap(); // sparse, 1 TiB
        let e = read_regular(&zeros, u64::MAX - 1, sniff)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not MAGIC (judged from its first 64 bytes)"),
            "{e}"
        );
    }

    /// What a format's sniffer says a file is not.
    #[derive(Debug, PartialEq)]
    struct NotMagic;
    impl std::fmt::Display for NotMagic {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("not MAGIC")
        }
    }
    impl std::error::Error for NotMagic {}

    #[test]
    fn a_file_of_another_kind_keeps_the_sniffers_typed_error() {
        let (_dir, other) = testkit::temp_file("a.txt", b"plain text");
        let sniff = |b: &[u8]| b.starts_with(b"MAGIC").then_some(()).ok_or(NotMagic);
        let e = read_regular(&other, 100, sniff).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "not MAGIC (judged from its first 10 bytes)"
        );
        let not = e.downcast_ref::<NotOfKind>().expect("a NotOfKind");
        assert_eq!(not.head_len(), 10);
        assert_eq!(not.kind().downcast_ref::<NotMagic>(), Some(&NotMagic));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_index_comes_from_a_shard_record_argument() {
        let args = vec![r#"{"type":"shard","shard":3,"shards":4,"paths":["a.jpg"]}"#.into()];
        assert_eq!(shard_index(&args), Some(3));
        assert_eq!(shard_index(&["a.jpg".into()]), None);
    }

    #[test]
    fn arguments_are_paths_or_records() {
        let items: Vec<Item> = from_args(
            &[
                "a.jpg".into(),
                r#"{"type":"shard","shard":0,"shards":1,"paths":["b","c"]}"#.into(),
                "{broken".into(),
            ],
            ListArgs::default(),
        )
        .map(Result::unwrap)
        .collect();
        assert_eq!(items.len(), 4);
        assert_eq!(items[0].as_ref().unwrap().path, Path::new("a.jpg"));
        assert_eq!(items[2].as_ref().unwrap().path, Path::new("c"));
        assert_eq!(items[3].as_ref().unwrap_err().input, "{broken");
    }

    #[test]
    fn an_earlier_runs_error_records_are_the_inputs_to_retry() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run1.jsonl");
        let bad = OsString::from_vec(b"caf\xe9.png".to_vec());
        let bad_record = serde_json::to_string(&ErrorRecord {
            input: bad.clone(),
            message: "not an image".into(),
        })
        .unwrap();
        let lines = [
            r#"{"type":"image","input":"ok.png","output":"out/ok.png"}"#.to_string(),
            r#"{"type":"error","input":"b.jpg","message":"truncated"}"#.into(),
            "not a record".into(),
            bad_record,
            r#"{"type":"error","input":"b.jpg","message":"again"}"#.into(),
            r#"{"type":"summary","ok":1,"skipped":0,"failed":2}"#.into(),
        ];
        std::fs::write(&run, lines.join("\n")).unwrap();
        let items: Vec<Item> = failed_in(&run).map(Result::unwrap).collect();
        assert_eq!(
            items,
            vec![Ok(InputItem::path("b.jpg")), Ok(InputItem::path(bad))]
        );
        let missing: Vec<Listed> = failed_in(&dir.path().join("none.jsonl")).collect();
        assert_eq!(missing.len(), 1);
        assert!(
            missing[0]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("none.jsonl")
        );
        // Without the flag, the arguments.
        let args: Vec<Item> = from_args_or_failed(&["x".into()], &ItemArgs::default())
            .map(Result::unwrap)
            .collect();
        assert_eq!(args, vec![Ok(InputItem::path("x"))]);
    }

    #[test]
    fn names_that_are_not_utf8_are_paths_from_arguments_and_lists() {
        let raw = OsString::from_vec(b"caf\xe9.png".to_vec());
        let items: Vec<Item> = from_args(std::slice::from_ref(&raw), ListArgs::default())
            .map(Result::unwrap)
            .collect();
        assert_eq!(items, vec![Ok(InputItem::path(raw.clone()))]);
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join(&raw).with_extension("txt");
        std::fs::write(&list, b"caf\xe9.png\n").unwrap();
        let items: Vec<Item> = from_files(&[list], ListArgs::default())
            .map(Result::unwrap)
            .collect();
        assert_eq!(items, vec![Ok(InputItem::path(raw))]);
    }

    #[test]
    fn list_files_are_read_line_by_line_and_missing_ones_are_errors() {
        let (_dir, list) = testkit::temp_file("list.txt", "x\n\ny\r\n");
        let items: Vec<Item> = from_files(&[list, "/no/such/list".into()], ListArgs::default())
            .map(Result::unwrap)
            .collect();
        assert_eq!(items.len(), 3);
        assert_eq!(items[1].as_ref().unwrap().path, Path::new("y"));
        assert!(
            items[2]
                .as_ref()
                .unwrap_err()
                .message
                .contains("cannot open")
        );
    }

    #[test]
    fn nul_separated_lists_are_paths_byte_for_byte() {
        let (_dir, list) = testkit::temp_file("list0", b"a\nb.png\0{\"path\":\"x\"}\0\0c\r\0last");
        let items: Vec<Item> = from_files(&[list], ListArgs { null: true })
            .map(Result::unwrap)
            .collect();
        let want: Vec<Item> = ["a\nb.png", "{\"path\":\"x\"}", "c\r", "last"]
            .into_iter()
            .map(|p| Ok(InputItem::path(OsString::from(p))))
            .collect();
        assert_eq!(items, want);
    }

    #[test]
    fn a_list_that_cannot_be_read_is_one_fatal_error() {
        // A directory opens but fails every read (EISDIR): once, then the list ends.
        let dir = tempfile::tempdir().unwrap();
        let reader = BufReader::new(File::open(dir.path()).unwrap());
        let items: Vec<Listed> = lines_of(reader, "<stdin>".into(), ListArgs::default()).collect();
        assert_eq!(items.len(), 1);
        let e = format!("{:#}", items[0].as_ref().unwrap_err());
        assert!(e.contains("reading the input list <stdin>"), "{e}");
        assert!(e.contains("Is a directory"), "{e}");
    }
}
