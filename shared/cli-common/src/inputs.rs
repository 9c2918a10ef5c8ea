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
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    let t = meta.file_type();
    let kind = if t.is_file() {
        return Ok(meta.len());
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    };
    bail!(
        "{} is {kind}, not a regular file: only files are read",
        path.display()
    )
}

/// Reads an input file whose kind `sniff` recognises from its first bytes (up to 64; `Err`
/// names what it is not), and which is at most `limit` bytes: a file of the wrong kind is refused
/// after a few bytes, not after reading gigabytes, and no input is read past what its format
/// allows.
pub fn read_regular(
    path: &Path,
    limit: u64,
    sniff: impl Fn(&[u8]) -> Result<(), String>,
) -> anyhow::Result<Vec<u8>> {
    let len = regular_file(path)?;
    let mut f = File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut head = Vec::with_capacity(64);
    (&mut f)
        .take(64)
        .read_to_end(&mut head)
        .with_context(|| format!("reading {}", path.display()))?;
    if let Err(what) = sniff(&head) {
        bail!("{what} (judged from its first {} bytes)", head.len());
    }
    if len > limit {
        bail!("{len} bytes, more than this input may hold ({limit})");
    }
    let mut bytes = head;
    bytes.reserve(len.saturating_sub(bytes.len() as u64) as usize);
    // A file that grows while it is read still stops at the limit.
    f.take((limit + 1).saturating_sub(bytes.len() as u64))
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() as u64 > limit {
        bail!("more than {limit} bytes: more than this input may hold");
    }
    Ok(bytes)
}

/// One item or the reason a line gave none.
pub type Item = Result<InputItem, ErrorRecord>;

/// Items named by positional arguments: each argument is a path (any bytes: a name need not be
/// UTF-8) or a record; `-` reads items from stdin, one per line. No arguments at all means stdin.
pub fn from_args(args: &[OsString]) -> Box<dyn Iterator<Item = Item> + Send> {
    if args.is_empty() {
        return stdin_lines();
    }
    let args = args.to_vec();
    Box::new(
        args.into_iter()
            .flat_map(|arg| -> Box<dyn Iterator<Item = Item> + Send> {
                if arg == "-" {
                    stdin_lines()
                } else {
                    Box::new(parse(arg.as_bytes()).into_iter())
                }
            }),
    )
}

/// Items listed in files, one per line (`cat` semantics: `-` or no files means stdin). A file
/// that cannot be opened gives one error record.
pub fn from_files(files: &[PathBuf]) -> Box<dyn Iterator<Item = Item> + Send> {
    let files = if files.is_empty() {
        vec![PathBuf::from("-")]
    } else {
        files.to_vec()
    };
    Box::new(
        files
            .into_iter()
            .flat_map(|f| -> Box<dyn Iterator<Item = Item> + Send> {
                if f.as_os_str() == "-" {
                    return stdin_lines();
                }
                match File::open(&f) {
                    Ok(file) => lines_of(Box::new(BufReader::new(file)), f.into_os_string()),
                    Err(e) => Box::new(std::iter::once(Err(ErrorRecord {
                        input: f.into_os_string(),
                        message: format!("cannot open list file: {e}"),
                    }))),
                }
            }),
    )
}

fn stdin_lines() -> Box<dyn Iterator<Item = Item> + Send> {
    lines_of(Box::new(BufReader::new(io::stdin())), "<stdin>".into())
}

/// The items of each line, as bytes: a path need not be UTF-8.
fn lines_of(
    reader: Box<dyn BufRead + Send>,
    source: OsString,
) -> Box<dyn Iterator<Item = Item> + Send> {
    Box::new(reader.split(b'\n').flat_map(move |line| match line {
        Ok(bytes) => parse(&bytes),
        Err(e) => vec![Err(ErrorRecord {
            input: source.clone(),
            message: format!("reading: {e}"),
        })],
    }))
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

#[cfg(test)]
mod read_tests {
    use super::*;

    #[test]
    fn only_regular_files_of_the_right_kind_and_size_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("a.bin");
        std::fs::write(&good, b"MAGIC and the rest").unwrap();
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_paths_or_records() {
        let items: Vec<Item> = from_args(&[
            "a.jpg".into(),
            r#"{"type":"shard","shard":0,"shards":1,"paths":["b","c"]}"#.into(),
            "{broken".into(),
        ])
        .collect();
        assert_eq!(items.len(), 4);
        assert_eq!(items[0].as_ref().unwrap().path, Path::new("a.jpg"));
        assert_eq!(items[2].as_ref().unwrap().path, Path::new("c"));
        assert_eq!(items[3].as_ref().unwrap_err().input, "{broken");
    }

    #[test]
    fn names_that_are_not_utf8_are_paths_from_arguments_and_lists() {
        let raw = OsString::from_vec(b"caf\xe9.png".to_vec());
        let items: Vec<Item> = from_args(std::slice::from_ref(&raw)).collect();
        assert_eq!(items, vec![Ok(InputItem::path(raw.clone()))]);
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join(&raw).with_extension("txt");
        std::fs::write(&list, b"caf\xe9.png\n").unwrap();
        let items: Vec<Item> = from_files(&[list]).collect();
        assert_eq!(items, vec![Ok(InputItem::path(raw))]);
    }

    #[test]
    fn list_files_are_read_line_by_line_and_missing_ones_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("list.txt");
        std::fs::write(&list, "x\n\ny\r\n").unwrap();
        let items: Vec<Item> = from_files(&[list, "/no/such/list".into()]).collect();
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
}
