//! A tree of images by class, read as `torchvision.datasets.ImageFolder` reads it: the classes
//! are the sorted names of the sub-directories (symlinks to directories included), the samples
//! each class's files walked top-down following symlinks, directories in the order of their
//! paths and files in the order of their names, kept when the name ends (in any case) with one
//! of torchvision's `IMG_EXTENSIONS`. Names are bytes; they sort as Python sorts the `str` it
//! makes of them (UTF-8, undecodable bytes as lone surrogates), which is byte order for UTF-8
//! names. Errors are torchvision's: no class directory, or a class with no valid file.
//!
//! Where torchvision would recurse forever (a symlink to a directory's own ancestor), this
//! stops with an error naming the loop. Each real directory (device and inode) of a class is
//! walked once: where symlinks reach one directory by several paths, `os.walk(followlinks=True)`
//! lists its images once per path (a chain of directories each linking twice to the next is
//! 2^depth copies of one image), this lists them under the first path in walking order.
//! Sub-directories that cannot be read, which `os.walk` skips silently, are skipped and listed
//! in [`ImageFolder::skipped`] for the caller to report.

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
    /// The directory read: each sample's path starts with it.
    pub root: PathBuf,
    /// The files that are not samples, and why (ImageFolder passes over them without a word): by
    /// their names, in the classes' walking order, then those beside the class folders.
    pub not_taken: Vec<(PathBuf, NotTaken)>,
}

/// Why a file of the tree is not a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotTaken {
    /// Its name does not end with one of [`IMG_EXTENSIONS`] (a `.gif`, a `.txt`).
    Name,
    /// It lies beside the class folders, in none of them.
    OutsideClasses,
}

impl std::fmt::Display for NotTaken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotTaken::Name => write!(
                f,
                "not an image file name (ImageFolder's extensions: {}): not packed",
                IMG_EXTENSIONS.join(", ")
            ),
            NotTaken::OutsideClasses => f.write_str("not in a class folder: not packed"),
        }
    }
}

/// Why a tree cannot be read as ImageFolder reads it.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error("cannot read {}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
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

impl error_class::Classify for FolderError {}

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
    image_suffix(name).is_some()
}

/// The extension (of [`IMG_EXTENSIONS`], without its dot, in lower case) that a file name ends
/// with, in any case: `jpg` for `a.JPG` and for a file named only `.jpg`.
pub fn image_suffix(name: &[u8]) -> Option<&'static str> {
    IMG_EXTENSIONS
        .iter()
        .find(|ext| {
            name.len() >= ext.len()
                && name[name.len() - ext.len()..].eq_ignore_ascii_case(ext.as_bytes())
        })
        .map(|ext| &ext[1..])
}

/// The place in [`IMG_EXTENSIONS`] of an extension given without its dot (`jpg`, `PNG`), in any
/// case: whether a webdataset sample's member of that suffix is an image, and which of several
/// is the sample's image (the first in that order).
pub fn extension_rank(ext: &[u8]) -> Option<usize> {
    IMG_EXTENSIONS
        .iter()
        .position(|e| e.as_bytes()[1..].eq_ignore_ascii_case(ext))
}

impl ImageFolder {
    /// Reads the tree under `dir`.
    pub fn scan(dir: &Path) -> Result<ImageFolder, FolderError> {
        let read = |path: &Path| {
            std::fs::read_dir(path).map_err(|source| FolderError::Read {
                path: path.to_path_buf(),
                source,
            })
        };
        let mut classes = Vec::new();
        let mut outside = Vec::new();
        for entry in read(dir)? {
            let entry = entry.map_err(|source| FolderError::Read {
                path: dir.to_path_buf(),
                source,
            })?;
            // os.scandir's entry.is_dir() follows symlinks.
            if std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir()) {
                classes.push(entry.file_name());
            } else {
                outside.push(entry.path());
            }
        }
        if classes.is_empty() {
            return Err(FolderError::NoClasses(dir.to_path_buf()));
        }
        classes.sort_by_cached_key(|c| python_order(c.as_bytes()));
        let mut samples = Vec::new();
        let mut skipped = Vec::new();
        let mut not_taken = Vec::new();
        let mut empty = Vec::new();
        for (label, class) in classes.iter().enumerate() {
            let (found, others): (Vec<PathBuf>, Vec<PathBuf>) =
                (files_under(&dir.join(class), &mut skipped)?.into_iter())
                    .partition(|f| f.file_name().is_some_and(|n| is_image_name(n.as_bytes())));
            if found.is_empty() {
                empty.push(class.clone());
            }
            samples.extend(found.into_iter().map(|p| (p, label as i64)));
            not_taken.extend(others.into_iter().map(|p| (p, NotTaken::Name)));
        }
        if !empty.is_empty() {
            return Err(FolderError::EmptyClasses(empty));
        }
        outside.sort_by_cached_key(|p| python_order(p.as_os_str().as_bytes()));
        not_taken.extend(outside.into_iter().map(|p| (p, NotTaken::OutsideClasses)));
        Ok(ImageFolder {
            classes,
            samples,
            skipped,
            root: dir.to_path_buf(),
            not_taken,
        })
    }
}

/// The image files under `dir`, at any depth, in the order [`ImageFolder::scan`] lists one
/// class's files: [`files_under`] whose names end with one of [`IMG_EXTENSIONS`].
pub fn images_under(
    dir: &Path,
    skipped: &mut Vec<(PathBuf, String)>,
) -> Result<Vec<PathBuf>, FolderError> {
    let mut files = files_under(dir, skipped)?;
    files.retain(|f| f.file_name().is_some_and(|n| is_image_name(n.as_bytes())));
    Ok(files)
}

/// Every file under `dir` (everything but directories: symlinks followed, hidden files kept),
/// walked as [`ImageFolder::scan`] walks a class: each real directory once, directories in the
/// order of their paths and files in the order of their names, as Python sorts them.
/// Directories that cannot be read are added to `skipped`; a symlink loop is an error.
pub fn files_under(
    dir: &Path,
    skipped: &mut Vec<(PathBuf, String)>,
) -> Result<Vec<PathBuf>, FolderError> {
    // Every real directory once (a class that is a link to another's folder still has its
    // images, as torchvision has them).
    let mut seen = std::collections::HashSet::new();
    let mut dirs = Vec::new();
    let mut walker = Walk {
        ancestors: Vec::new(),
        seen: &mut seen,
        out: &mut dirs,
        skipped,
    };
    walker.walk(dir)?;
    dirs.sort_by_cached_key(|(root, _)| python_order(root.as_os_str().as_bytes()));
    let mut all = Vec::new();
    for (root, mut files) in dirs {
        files.sort_by_cached_key(|f| python_order(f.as_bytes()));
        all.extend(files.into_iter().map(|f| root.join(f)));
    }
    Ok(all)
}

/// `os.walk(dir, followlinks=True)`, each real directory once: every directory reachable from
/// `dir` with the names of its non-directory entries (files, symlinks to files, broken
/// symlinks).
struct Walk<'a> {
    /// The (device, inode) and path of each directory above, to find loops.
    ancestors: Vec<((u64, u64), PathBuf)>,
    /// Every directory walked so far.
    seen: &'a mut std::collections::HashSet<(u64, u64)>,
    out: &'a mut Vec<(PathBuf, Vec<OsString>)>,
    skipped: &'a mut Vec<(PathBuf, String)>,
}

impl Walk<'_> {
    fn walk(&mut self, dir: &Path) -> Result<(), FolderError> {
        let (meta, entries) =
            match std::fs::metadata(dir).and_then(|m| Ok((m, std::fs::read_dir(dir)?))) {
                Ok(x) => x,
                Err(e) => {
                    self.skipped.push((dir.to_path_buf(), e.to_string()));
                    return Ok(());
                }
            };
        let id = (meta.dev(), meta.ino());
        if let Some((_, ancestor)) = self.ancestors.iter().find(|(a, _)| *a == id) {
            return Err(FolderError::Loop {
                link: dir.to_path_buf(),
                ancestor: ancestor.clone(),
            });
        }
        if !self.seen.insert(id) {
            return Ok(());
        }
        let mut files = Vec::new();
        let mut subdirs = Vec::new();
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    self.skipped.push((dir.to_path_buf(), e.to_string()));
                    continue;
                }
            };
            if std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir()) {
                subdirs.push(entry.file_name());
            } else {
                files.push(entry.file_name());
            }
        }
        // Walked in the order the listing sorts them (directories by path), so that which of
        // several paths to one directory is kept does not depend on readdir's order.
        subdirs.sort_by_cached_key(|s| python_order(s.as_bytes()));
        self.out.push((dir.to_path_buf(), files));
        self.ancestors.push((id, dir.to_path_buf()));
        for sub in subdirs {
            self.walk(&dir.join(OsStr::new(&sub)))?;
        }
        self.ancestors.pop();
        Ok(())
    }
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

    #[test]
    fn a_directory_reached_by_many_links_is_walked_once() {
        // d0 holds links a and b to d1, which holds a and b to d2, ... and d16 one image:
        // os.walk(followlinks=True) lists it 2^16 times.
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("set");
        let depth = 16;
        for i in 0..=depth {
            std::fs::create_dir_all(tmp.path().join(format!("d{i}"))).unwrap();
        }
        for i in 0..depth {
            for link in ["a", "b"] {
                std::os::unix::fs::symlink(
                    tmp.path().join(format!("d{}", i + 1)),
                    tmp.path().join(format!("d{i}/{link}")),
                )
                .unwrap();
            }
        }
        std::fs::write(tmp.path().join(format!("d{depth}/x.png")), b"png").unwrap();
        std::fs::create_dir_all(&root).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("d0"), root.join("cls")).unwrap();
        let f = ImageFolder::scan(&root).unwrap();
        assert_eq!(
            f.samples.len(),
            1,
            "{:?}",
            &f.samples[..f.samples.len().min(3)]
        );
        let first: PathBuf = ["cls"]
            .into_iter()
            .chain(["a"; 16])
            .chain(["x.png"])
            .collect();
        assert_eq!(f.samples[0].0, root.join(first));
    }
}
