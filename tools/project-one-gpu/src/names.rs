//! Where an input's latent goes under `--out-dir`.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use cli_common::paths;

/// The most bytes of a folder's name kept in the name of its output folder.
const FOLDER_NAME_BYTES: usize = 48;

/// The output of `input` under `out_dir`, with extension `ext`: its path relative to `base`
/// mirrored (`OUT/a/b.npz`), or, for an input outside `base`, `OUT/<folder>-<hash>/<stem>.npz`:
/// the name of the input's folder (its first 48 bytes) and 16 hex digits of the FNV-1a hash of
/// that folder's absolute path. Short, and the same in every run and every shard; two inputs of
/// one name in two folders (of one name too) get two outputs. Inputs that differ only in
/// extension share one, as mirrored inputs do (the run's claims report the second).
pub fn output_path(input: &Path, base: &Path, out_dir: &Path, cwd: &Path, ext: &str) -> PathBuf {
    let abs = paths::absolute(input, cwd);
    let inside = abs
        .strip_prefix(paths::absolute(base, cwd))
        .is_ok_and(|r| !r.as_os_str().is_empty());
    let (Some(folder), Some(file), false) = (abs.parent(), abs.file_name(), inside) else {
        return paths::output_path(input, base, out_dir, cwd, ext);
    };
    let mut name = folder.file_name().map_or(Vec::new(), |n| {
        let n = n.as_bytes();
        let mut end = n.len().min(FOLDER_NAME_BYTES);
        // Not in the middle of a UTF-8 character.
        while end < n.len() && end > 0 && n[end] & 0xC0 == 0x80 {
            end -= 1;
        }
        let mut v = n[..end].to_vec();
        v.push(b'-');
        v
    });
    name.extend(format!("{:016x}", fnv1a(folder.as_os_str().as_bytes())).bytes());
    paths::absolute(out_dir, cwd)
        .join(OsString::from_vec(name))
        .join(file)
        .with_extension(ext)
}

/// 64-bit FNV-1a: a hash that is the same on every machine and in every release.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_base_is_mirrored_outside_is_one_short_folder_per_source_folder() {
        let cwd = Path::new("/work");
        let o = |p: &str| {
            output_path(
                Path::new(p),
                Path::new("imgs"),
                Path::new("out"),
                cwd,
                "npz",
            )
        };
        assert_eq!(o("imgs/a/1.jpg"), Path::new("/work/out/a/1.npz"));
        let x = o("/tmp/x/photos/IMG_1001.JPG");
        let y = o("/tmp/y/photos/IMG_1001.JPG");
        assert_ne!(x, y);
        for p in [&x, &y] {
            let rel = p.strip_prefix("/work/out").unwrap();
            assert_eq!(rel.components().count(), 2, "{p:?}");
            assert_eq!(rel.file_name().unwrap(), "IMG_1001.npz");
            let folder = rel.parent().unwrap().to_str().unwrap();
            assert!(
                folder.starts_with("photos-") && folder.len() == 7 + 16,
                "{p:?}"
            );
        }
        // The hash is of the folder's absolute path: the same folder named two ways is one.
        assert_eq!(o("../../tmp/x/photos/IMG_1001.JPG"), x);
        assert_eq!(o("/tmp/x/photos/IMG_1001.png"), x);
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn long_and_non_utf8_folder_names_are_cut_to_whole_characters() {
        let cwd = Path::new("/");
        let folder = "é".repeat(40);
        let o = output_path(
            &Path::new("/d").join(&folder).join("a.png"),
            Path::new("/e"),
            Path::new("/o"),
            cwd,
            "npz",
        );
        let name = o.parent().unwrap().file_name().unwrap().to_str().unwrap();
        assert_eq!(name.len(), 48 + 1 + 16, "{name}");
        assert!(name.starts_with(&"é".repeat(24)));
        let raw = OsString::from_vec(b"/d/caf\xe9/a.png".to_vec());
        let o = output_path(
            Path::new(&raw),
            Path::new("/e"),
            Path::new("/o"),
            cwd,
            "npz",
        );
        assert!(
            o.parent()
                .unwrap()
                .as_os_str()
                .as_bytes()
                .starts_with(b"/o/caf\xe9-")
        );
        // The root's files: no folder name, the hash alone.
        let o = output_path(
            Path::new("/a.png"),
            Path::new("/e"),
            Path::new("/o"),
            cwd,
            "npz",
        );
        assert_eq!(o.parent().unwrap().file_name().unwrap().len(), 16);
    }
}
