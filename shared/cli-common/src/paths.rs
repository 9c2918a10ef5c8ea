//! Where an input's output goes: `OUT_DIR/<input relative to BASE>` with the extension replaced.

use std::path::{Component, Path, PathBuf};

/// Lexically normalised absolute form of `p` (relative paths are taken from `cwd`); `..` pops.
pub fn absolute(p: &Path, cwd: &Path) -> PathBuf {
    let joined = if p.is_absolute() { p.to_path_buf() } else { cwd.join(p) };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The output path of `input`: its path relative to `base` (or, outside `base`, its whole
/// absolute path without the root) under `out_dir`, with extension `ext`. Distinct inputs give
/// distinct outputs unless they differ only in extension.
pub fn output_path(input: &Path, base: &Path, out_dir: &Path, cwd: &Path, ext: &str) -> PathBuf {
    let abs = absolute(input, cwd);
    let base = absolute(base, cwd);
    let rel: PathBuf = match abs.strip_prefix(&base) {
        Ok(r) if !r.as_os_str().is_empty() => r.to_path_buf(),
        _ => abs.components().filter(|c| matches!(c, Component::Normal(_))).collect(),
    };
    absolute(out_dir, cwd).join(rel).with_extension(ext)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_inputs_are_mirrored_under_out_dir() {
        let cwd = Path::new("/work");
        let o = output_path(Path::new("imgs/a/1.jpg"), Path::new("."), Path::new("out"), cwd, "png");
        assert_eq!(o, Path::new("/work/out/imgs/a/1.png"));
        let o = output_path(Path::new("imgs/a/1.jpg"), Path::new("imgs"), Path::new("/o"), cwd, "npy");
        assert_eq!(o, Path::new("/o/a/1.npy"));
    }

    #[test]
    fn paths_outside_base_keep_their_whole_path() {
        let cwd = Path::new("/work");
        let o = output_path(Path::new("/data/x/1.jpeg"), Path::new("."), Path::new("out"), cwd, "png");
        assert_eq!(o, Path::new("/work/out/data/x/1.png"));
        let o = output_path(Path::new("../y/./2.png"), Path::new("."), Path::new("out"), cwd, "png");
        assert_eq!(o, Path::new("/work/out/y/2.png"));
    }
}
