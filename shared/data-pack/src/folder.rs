//! A tree of images by class, read as `torchvision.datasets.ImageFolder` reads it: the classes
//! are the sorted names of the sub-directories (symlinks to directories included), the samples
//! each class's files walked top-down following symlinks, directories in the order of their
//! paths and files in the order of their names, kept when the name ends (in any case) with one
//! of torchvision's `IMG_EXTENSIONS`. Names are bytes; they sort as Python sorts the `str` it
//! makes of them (UTF-8, undecodable bytes as lone surrogates), which is byte order for UTF-8
//! names. Errors are torchvision's: no class directory, or a class with no valid file.
//!
//! Where torchvision would recurse forever (a symlink to a directory's own ancestor), this
//! stops with an error naming the loop; sub-directories that cannot be read, which `os.walk`
//! skips silently, are skipped and listed in [`ImageFolder::skipped`].

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// torchvision's `IMG_EXTENSIONS`, compared case-insensitively with the end of each file name.
pub const IMG_EXTENSIONS: [&str; 9] = [
    ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp",
];

/// The classes and samples of one tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFolder {
    /// Class names; a sample's label is its class's index here (torchvision's `class_to_idx`).
    pub classes: Vec<OsString>,
    /// (path, label) in torchvision's order.
    pub samples: Vec<(PathBuf, i64)>,
    /// Directories that could not be read (and what went wrong), skipped as `os.walk` skips them.
    pub skipped: Vec<(PathBuf, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error("cannot read {}: {error}", .path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("Couldn't find any class folder in {}.", .0.display())]
    NoClasses(PathBuf),
    #[error(
        "Found no valid file for the classes {}. Supported extensions are: {}",
        .0.iter().map(|c| c.to_string_lossy()).collect::<Vec<_>>().join(", "),
        IMG_EXTENSIONS.join(", ")
    )]
    EmptyClasses(Vec<OsString>),
    #[error("{} leads back to {} (a symlink loop): torchvision would walk it forever", .link.display(), .ancestor.display())]
    Loop { link: PathBuf, ancestor: PathBuf },
}

/// The order in which Python sorts the `str` that `os.fsdecode` makes of a name: UTF-8 code
/// points, each undecodable byte as U+DC80 + byte (the surrogateescape error handler).
pub fn python_order(name: &[u8]) -> Vec<u32> {
    let mut key = Vec::with_capacity(name.len());
    for chunk in name.utf8_chunks() {
        key.extend(chunk.valid().chars().map(|c| c as u32));
        key.extend(chunk.invalid().iter().map(|&b| 0xDC00 + b as u32));
    }
    key
}

/// Whether torchvision's `has_file_allowed_extension` keeps a file of this name.
pub fn is_image_name(name: &[u8]) -> bool {
    IMG_EXTENSIONS.iter().any(|ext| {
        name.len() >= ext.len()
            && name[name.len() - ext.len()..].eq_ignore_ascii_case(ext.as_bytes())
    })
}

impl ImageFolder {
    /// Reads the tree under `dir`.
    pub fn scan(dir: &Path) -> Result<ImageFolder, FolderError> {
        let read = |path: &Path| {
            std::fs::read_dir(path).map_err(|error| FolderError::Read {
                path: path.to_path_buf(),
                error,
            })
        };
        let mut classes = Vec::new();
        for entry in read(dir)? {
            let entry = entry.map_err(|error| FolderError::Read {
                path: dir.to_path_buf(),
                error,
            })?;
            // os.scandir's entry.is_dir() follows symlinks.
            if std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir()) {
                classes.push(entry.file_name());
            }
        }
        if classes.is_empty() {
            return Err(FolderError::NoClasses(dir.to_path_buf()));
        }
        classes.sort_by_cached_key(|c| python_order(c.as_bytes()));
        let mut samples = Vec::new();
        let mut skipped = Vec::new();
        let mut empty = Vec::new();
        for (label, class) in classes.iter().enumerate() {
            let mut dirs = Vec::new();
            walk(&dir.join(class), &mut Vec::new(), &mut dirs, &mut skipped)?;
            dirs.sort_by_cached_key(|(root, _)| python_order(root.as_os_str().as_bytes()));
            let before = samples.len();
            for (root, mut files) in dirs {
                files.sort_by_cached_key(|f| python_order(f.as_bytes()));
                samples.extend(
                    files
                        .into_iter()
                        .filter(|f| is_image_name(f.as_bytes()))
                        .map(|f| (root.join(f), label as i64)),
                );
            }
            if samples.len() == before {
                empty.push(class.clone());
            }
        }
        if !empty.is_empty() {
            return Err(FolderError::EmptyClasses(empty));
        }
        Ok(ImageFolder {
            classes,
            samples,
            skipped,
        })
    }
}

/// `os.walk(dir, followlinks=True)`: every directory reachable from `dir` with the names of its
/// non-directory entries (files, symlinks to files, broken symlinks). `ancestors` holds the
/// (device, inode) and path of each directory above, to find loops.
fn walk(
    dir: &Path,
    ancestors: &mut Vec<((u64, u64), PathBuf)>,
    out: &mut Vec<(PathBuf, Vec<OsString>)>,
    skipped: &mut Vec<(PathBuf, String)>,
) -> Result<(), FolderError> {
    let (meta, entries) =
        match std::fs::metadata(dir).and_then(|m| Ok((m, std::fs::read_dir(dir)?))) {
            Ok(x) => x,
            Err(e) => {
                skipped.push((dir.to_path_buf(), e.to_string()));
                return Ok(());
            }
        };
    let id = (meta.dev(), meta.ino());
    if let Some((_, ancestor)) = ancestors.iter().find(|(a, _)| *a == id) {
        return Err(FolderError::Loop {
            link: dir.to_path_buf(),
            ancestor: ancestor.clone(),
        });
    }
    let mut files = Vec::new();
    let mut subdirs = Vec::new();
    for entry in entries {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                skipped.push((dir.to_path_buf(), e.to_string()));
                continue;
            }
        };
        if std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir()) {
            subdirs.push(entry.file_name());
        } else {
            files.push(entry.file_name());
        }
    }
    out.push((dir.to_path_buf(), files));
    ancestors.push((id, dir.to_path_buf()));
    for sub in subdirs {
        walk(&dir.join(OsStr::new(&sub)), ancestors, out, skipped)?;
    }
    ancestors.pop();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_orders_undecodable_bytes_as_surrogates() {
        // U+E000 (EE 80 80) sorts after an undecodable 0xFF byte (U+DCFF) in Python, before
        // it in bytes.
        let private = "\u{E000}".as_bytes();
        assert!(private < &b"\xff"[..]);
        assert!(python_order(private) > python_order(b"\xff"));
        assert!(python_order(b"a") < python_order(b"b"));
        assert!(python_order("é".as_bytes()) < python_order(b"\xc3"));
    }

    #[test]
    fn extensions_are_torchvisions_in_any_case() {
        for name in [
            "a.jpg", "b.JPEG", "c.Png", "d.tiff", "e.TIF", "f.webp", "g.ppm", "h.pgm",
        ] {
            assert!(is_image_name(name.as_bytes()), "{name}");
        }
        for name in ["a.gif", "b.txt", "jpg", "c.jpg.bak", ".jpeg.x"] {
            assert!(!is_image_name(name.as_bytes()), "{name}");
        }
        assert!(is_image_name(b".jpg"));
    }
}
