//! `classes.txt`: the class names beside packed data, one per line in label order. A name is
//! bytes (a directory name need not be UTF-8) and comes back as the same bytes; what a line
//! cannot carry is refused before anything is written: an empty name, a line break, and a
//! carriage return at the end (a reader of a file written on Windows takes `\r\n` as the end of
//! a line). The same name twice would make two labels of one class, and is refused too.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The class-name file beside packed data.
pub const CLASSES_FILE: &str = "classes.txt";

/// The most bytes a class-name file may hold: names, not data.
pub const MAX_CLASSES_BYTES: u64 = 64 << 20;

/// What is wrong with a list of class names, or a class-name file.
#[derive(Debug, thiserror::Error)]
pub enum ClassesError {
    /// A name a line of `classes.txt` cannot carry.
    #[error("the class name {:?} cannot be a line of {CLASSES_FILE}: {why}", .name)]
    Unwritable { name: OsString, why: &'static str },
    #[error("the class name {:?} is there twice", .0)]
    Twice(OsString),
    #[error("cannot read {}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: no class names", .0.display())]
    Empty(PathBuf),
    #[error("{} line {line}: an empty class name", .path.display())]
    EmptyLine { path: PathBuf, line: usize },
    #[error("{} line {line}: a class name ending in a carriage return", .path.display())]
    CarriageReturn { path: PathBuf, line: usize },
    #[error("{} line {line}: the class name {:?} is there twice (first on line {first})", .path.display(), .name)]
    TwiceIn {
        path: PathBuf,
        name: OsString,
        line: usize,
        first: usize,
    },
    #[error("writing {CLASSES_FILE}")]
    Write(#[from] atomic_file::Error),
}

impl error_class::Classify for ClassesError {
    fn class(&self) -> error_class::Class {
        match self {
            ClassesError::Read { .. } | ClassesError::Write(_) => error_class::Class::Fatal,
            _ => error_class::Class::Usage,
        }
    }
}

/// Why `name` cannot be a line of `classes.txt`, if it cannot.
fn unwritable(name: &OsStr) -> Option<&'static str> {
    let b = name.as_bytes();
    if b.is_empty() {
        Some("it is empty")
    } else if b.contains(&b'\n') {
        Some("it holds a line break")
    } else if b.ends_with(b"\r") {
        Some("it ends in a carriage return, which readers take as part of the line's end")
    } else {
        None
    }
}

/// Checks that every name can be written as a line and read back as the same bytes, and that
/// no name is there twice: what [`write_classes`] would refuse, refused before any work.
pub fn check_class_names(classes: &[OsString]) -> Result<(), ClassesError> {
    let mut seen = std::collections::HashSet::with_capacity(classes.len());
    for c in classes {
        if let Some(why) = unwritable(c) {
            return Err(ClassesError::Unwritable {
                name: c.clone(),
                why,
            });
        }
        if !seen.insert(c.as_os_str()) {
            return Err(ClassesError::Twice(c.clone()));
        }
    }
    Ok(())
}

/// Writes `DIR/classes.txt`: the names in label order, one per line (checked first:
/// [`check_class_names`]).
pub fn write_classes(dir: &Path, classes: &[OsString]) -> Result<PathBuf, ClassesError> {
    check_class_names(classes)?;
    let path = dir.join(CLASSES_FILE);
    atomic_file::write_atomic(&path, |w| {
        classes
            .iter()
            .try_for_each(|c| w.write_all(c.as_bytes()).and_then(|_| w.write_all(b"\n")))
    })?;
    Ok(path)
}

/// The class names in `classes.txt` in the directory of `data` (a shard, or a RecordIO prefix),
/// if there is one there.
pub fn read_classes_beside(data: &Path) -> Result<Option<Vec<OsString>>, ClassesError> {
    let dir = match data.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match read_classes(&dir.join(CLASSES_FILE)) {
        Ok(names) => Ok(Some(names)),
        Err(ClassesError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The names in `path`: one per line (a `\r` before the line break taken as part of it, as a
/// file written on Windows has it), none empty, none ending in another `\r`, none twice: names
/// [`write_classes`] writes as they are.
pub fn read_classes(path: &Path) -> Result<Vec<OsString>, ClassesError> {
    let bytes = input_file::read(path, MAX_CLASSES_BYTES).map_err(|source| ClassesError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let text = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    if text.is_empty() {
        return Err(ClassesError::Empty(path.to_path_buf()));
    }
    let mut names = Vec::new();
    let mut first = std::collections::HashMap::new();
    for (n, l) in text.split(|&b| b == b'\n').enumerate() {
        let name = l.strip_suffix(b"\r").unwrap_or(l);
        if name.is_empty() {
            return Err(ClassesError::EmptyLine {
                path: path.to_path_buf(),
                line: n + 1,
            });
        }
        if name.ends_with(b"\r") {
            return Err(ClassesError::CarriageReturn {
                path: path.to_path_buf(),
                line: n + 1,
            });
        }
        if let Some(&f) = first.get(name) {
            return Err(ClassesError::TwiceIn {
                path: path.to_path_buf(),
                name: OsString::from_vec(name.to_vec()),
                line: n + 1,
                first: f,
            });
        }
        first.insert(name, n + 1);
        names.push(OsString::from_vec(name.to_vec()));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(matches!(e, ClassesError::EmptyLine { line: 2, .. }), "{e}");
        assert!(e.to_string().contains("line 2: an empty class name"), "{e}");
    }

    #[test]
    fn names_come_back_as_the_same_bytes_or_are_refused_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        // Bytes that are not UTF-8, and two names that would look alike once made text.
        let names = vec![
            OsString::from_vec(b"caf\xe9".to_vec()),
            OsString::from_vec(b"caf\xe8".to_vec()),
            OsString::from("tab\there"),
        ];
        write_classes(dir.path(), &names).unwrap();
        assert_eq!(read_classes(&dir.path().join(CLASSES_FILE)).unwrap(), names);
        for (bad, says) in [
            ("a\r", "carriage return"),
            ("", "empty"),
            ("x\ny", "line break"),
        ] {
            let e = check_class_names(&[OsString::from("ok"), OsString::from(bad)]).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
            assert!(write_classes(dir.path(), &[OsString::from(bad)]).is_err());
        }
        let e = check_class_names(&[OsString::from("a"), OsString::from("a")]).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        // A file written on Windows reads as the same names; a name twice is refused.
        std::fs::write(dir.path().join("w.txt"), "a\r\nb\r\n").unwrap();
        assert_eq!(
            read_classes(&dir.path().join("w.txt")).unwrap(),
            [OsString::from("a"), OsString::from("b")]
        );
        std::fs::write(dir.path().join("r.txt"), "a\r\r\nb\n").unwrap();
        let e = read_classes(&dir.path().join("r.txt")).unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
        std::fs::write(dir.path().join("t.txt"), "a\nb\na\n").unwrap();
        let e = read_classes(&dir.path().join("t.txt")).unwrap_err();
        assert!(e.to_string().contains("line 3"), "{e}");
    }
}
