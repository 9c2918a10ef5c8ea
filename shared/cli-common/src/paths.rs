//! Where an input's output goes: `OUT_DIR/<input relative to BASE>` with the extension replaced,
//! and which input of a run owns each output ([`Claims`]).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

/// Lexically normalised absolute form of `p` (relative paths are taken from `cwd`); `..` pops.
pub fn absolute(p: &Path, cwd: &Path) -> PathBuf {
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    };
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
        _ => abs
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect(),
    };
    absolute(out_dir, cwd).join(rel).with_extension(ext)
}

/// Which input of this run writes each output. Inputs that differ only in extension (`a.jpg`,
/// `a.png`) share an output; without this the second would silently replace the first's
/// result, or be "skipped" because the first's output exists.
///
/// It also keeps an input from being replaced by an output: an output that is its own input or
/// another input of the run seen before, and an input that an earlier input's output already
/// took, are [`Claim::IsInput`] and [`Claim::InputIsOutput`]. (An input listed after the one
/// whose output replaced it cannot be saved any more; it is refused rather than read.)
///
/// Memory is per claiming input, not per record: a 64-bit hash of its output and of its source
/// (absolute) path, and its name as given, in one arena (about 60 bytes plus the name), so a list
/// of millions of inputs streams through in bounded memory. A hash collision (about 1 in 10^7 for
/// a million inputs) would report two inputs as sharing an output; it never overwrites one.
#[derive(Debug, Default)]
pub struct Claims {
    /// Output (hash) → the index of the input that writes it.
    owner: HashMap<u64, u32>,
    /// Source (hash) → the index of the first input read from it.
    inputs: HashMap<u64, u32>,
    /// Each claiming input's source (hash), by index.
    sources: Vec<u64>,
    /// Each claiming input's name as given: `names[ends[i-1]..ends[i]]`.
    names: Vec<u8>,
    ends: Vec<usize>,
}

/// What [`Claims::claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The first input to write this output.
    First,
    /// The same input again (listed twice).
    Again,
    /// Another input writes this output; its name as given.
    Taken(OsString),
    /// The output would be an input of this run (this one, or the one named).
    IsInput(OsString),
    /// This input is the output of the input named, listed earlier.
    InputIsOutput(OsString),
}

fn hash_path(p: &Path) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    use std::os::unix::ffi::OsStrExt;
    BuildHasherDefault::<DefaultHasher>::default().hash_one(p.as_os_str().as_bytes())
}

impl Claims {
    /// Claims `output` for the input named `name` (as given), read from `source` (compared
    /// lexically after [`absolute`] with `cwd`).
    pub fn claim(
        &mut self,
        output: &Path,
        name: impl AsRef<OsStr>,
        source: &Path,
        cwd: &Path,
    ) -> Claim {
        let name = name.as_ref();
        let source = absolute(source, cwd);
        if source == output || same_file(&source, output) {
            return Claim::IsInput(name.to_os_string());
        }
        let (out_h, src_h) = (hash_path(output), hash_path(&source));
        if let Some(&other) = self.inputs.get(&out_h) {
            return Claim::IsInput(self.name(other));
        }
        if let Some(&owner) = self.owner.get(&src_h) {
            return Claim::InputIsOutput(self.name(owner));
        }
        // Every input is registered as one (also one that does not get its output), so that no
        // later output replaces it.
        let me = match self.inputs.get(&src_h) {
            Some(&i) => i,
            None => {
                let i = self.push(name, src_h);
                self.inputs.insert(src_h, i);
                i
            }
        };
        match self.owner.get(&out_h) {
            Some(&i) if self.sources[i as usize] == src_h => Claim::Again,
            Some(&i) => Claim::Taken(self.name(i)),
            None => {
                self.owner.insert(out_h, me);
                Claim::First
            }
        }
    }

    fn push(&mut self, name: &OsStr, source: u64) -> u32 {
        use std::os::unix::ffi::OsStrExt;
        let i = u32::try_from(self.sources.len()).expect("fewer than 2^32 inputs");
        self.sources.push(source);
        self.names.extend_from_slice(name.as_bytes());
        self.ends.push(self.names.len());
        i
    }

    fn name(&self, i: u32) -> OsString {
        use std::os::unix::ffi::OsStrExt;
        let i = i as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        OsStr::from_bytes(&self.names[start..self.ends[i]]).to_os_string()
    }

    /// The message of an error record for any claim but `First` and `Again`.
    pub fn message(claim: &Claim, output: &Path, name: impl AsRef<OsStr>) -> Option<String> {
        let name = name.as_ref();
        Some(match claim {
            Claim::First | Claim::Again => return None,
            Claim::Taken(other) => Self::taken_message(output, other),
            Claim::IsInput(input) if input == name => {
                format!(
                    "{} is this input itself: its output would replace it, with or without --overwrite; choose another output directory",
                    output.display()
                )
            }
            Claim::IsInput(input) => format!(
                "{} is the input {} of this run: its output would replace it; choose another output directory",
                output.display(),
                Path::new(input).display()
            ),
            Claim::InputIsOutput(owner) => {
                format!(
                    "this input is the output of {}, listed earlier: not read as an input",
                    Path::new(owner).display()
                )
            }
        })
    }

    /// The message of an error record for an input whose output another input took.
    pub fn taken_message(output: &Path, other: impl AsRef<OsStr>) -> String {
        format!(
            "{} is already the output of {}, listed earlier (names that differ only in extension share an output): rename one",
            output.display(),
            Path::new(other.as_ref()).display()
        )
    }
}

/// The same file by device and inode (both exist), for outputs reached through links.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_inputs_are_mirrored_under_out_dir() {
        let cwd = Path::new("/work");
        let o = output_path(
            Path::new("imgs/a/1.jpg"),
            Path::new("."),
            Path::new("out"),
            cwd,
            "png",
        );
        assert_eq!(o, Path::new("/work/out/imgs/a/1.png"));
        let o = output_path(
            Path::new("imgs/a/1.jpg"),
            Path::new("imgs"),
            Path::new("/o"),
            cwd,
            "npy",
        );
        assert_eq!(o, Path::new("/o/a/1.npy"));
    }

    #[test]
    fn paths_outside_base_keep_their_whole_path() {
        let cwd = Path::new("/work");
        let o = output_path(
            Path::new("/data/x/1.jpeg"),
            Path::new("."),
            Path::new("out"),
            cwd,
            "png",
        );
        assert_eq!(o, Path::new("/work/out/data/x/1.png"));
        let o = output_path(
            Path::new("../y/./2.png"),
            Path::new("."),
            Path::new("out"),
            cwd,
            "png",
        );
        assert_eq!(o, Path::new("/work/out/y/2.png"));
    }

    #[test]
    fn claims_tell_repeats_from_other_inputs_with_the_same_output() {
        let cwd = Path::new("/work");
        let mut c = Claims::default();
        let out = Path::new("/o/a.npz");
        assert_eq!(c.claim(out, "a.jpg", Path::new("a.jpg"), cwd), Claim::First);
        assert_eq!(
            c.claim(out, "./a.jpg", Path::new("./a.jpg"), cwd),
            Claim::Again
        );
        assert_eq!(
            c.claim(out, "/work/a.jpg", Path::new("/work/a.jpg"), cwd),
            Claim::Again
        );
        assert_eq!(
            c.claim(out, "a.png", Path::new("a.png"), cwd),
            Claim::Taken("a.jpg".into())
        );
        assert_eq!(
            c.claim(Path::new("/o/b.npz"), "b.png", Path::new("b.png"), cwd),
            Claim::First
        );
        assert!(
            Claims::taken_message(out, "a.jpg")
                .starts_with("/o/a.npz is already the output of a.jpg")
        );
    }

    #[test]
    fn outputs_never_replace_inputs() {
        let cwd = Path::new("/work");
        let mut c = Claims::default();
        // -o on the inputs' own directory: a.png's output is a.png.
        let claim = c.claim(Path::new("/work/a.png"), "a.png", Path::new("a.png"), cwd);
        assert_eq!(claim, Claim::IsInput("a.png".into()));
        assert!(
            Claims::message(&claim, Path::new("/work/a.png"), "a.png")
                .unwrap()
                .contains("this input itself")
        );
        // b.png read first, then b.jpg whose output is b.png.
        assert_eq!(
            c.claim(Path::new("/o/b.png"), "b.png", Path::new("b.png"), cwd),
            Claim::First
        );
        assert_eq!(
            c.claim(Path::new("/work/b.png"), "b.jpg", Path::new("b.jpg"), cwd),
            Claim::IsInput("b.png".into())
        );
        // c.jpg first (its output /work/c.png), then c.png: already replaced, so refused.
        assert_eq!(
            c.claim(Path::new("/work/c.png"), "c.jpg", Path::new("c.jpg"), cwd),
            Claim::First
        );
        assert_eq!(
            c.claim(Path::new("/o/c.png"), "c.png", Path::new("c.png"), cwd),
            Claim::InputIsOutput("c.jpg".into())
        );
    }
}
