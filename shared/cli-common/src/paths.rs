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
/// another input of the run, and an input that an earlier input's output already took, are
/// [`Claim::IsInput`] and [`Claim::InputIsOutput`]. An input is known by its path as given (made
/// absolute), its real path (symlinks resolved) and, when it exists, its device and inode (hard
/// links); an output is compared by the same three. Only inputs registered before an output is
/// claimed count: a tool that may replace existing files registers every input of the run first
/// ([`list_first`]), so that no earlier input's output replaces a later-listed one.
///
/// Memory is per input, not per record: 64-bit hashes of its output and of its source paths, its
/// device and inode, and its name as given, in one arena (about 100 bytes plus the name), so a list
/// of millions of inputs fits. A hash collision (about 1 in 10^7 for a million inputs) would
/// report two inputs as sharing an output; it never overwrites one.
#[derive(Debug, Default)]
pub struct Claims {
    /// Output (hash of its path and of its real path) → the index of the input that writes it.
    owner: HashMap<u64, u32>,
    /// Source (hash of its path and of its real path) → the index of the first input read from
    /// it.
    inputs: HashMap<u64, u32>,
    /// Source (device, inode) → the index of the first input read from it.
    inodes: HashMap<(u64, u64), u32>,
    /// Each input's source (hash), by index.
    sources: Vec<u64>,
    /// Each input's name as given: `names[ends[i-1]..ends[i]]`.
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

/// The real path of `p` (absolute): its directory's symlinks resolved, and its own when it is
/// one; `p` itself where the directory does not exist yet.
fn real_path(p: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(p) {
        return real;
    }
    match (p.parent(), p.file_name()) {
        (Some(dir), Some(name)) => {
            std::fs::canonicalize(dir).map_or(p.to_path_buf(), |d| d.join(name))
        }
        _ => p.to_path_buf(),
    }
}

/// Device and inode of the file at `p` (following symlinks), if there is one.
fn inode(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

impl Claims {
    /// Registers the input named `name` (as given), read from `source`, as an input of the run
    /// (once: an input listed again keeps its first index), without claiming an output: no
    /// output claimed afterwards may replace it.
    pub fn register_input(&mut self, name: impl AsRef<OsStr>, source: &Path, cwd: &Path) {
        self.input_index(name.as_ref(), &absolute(source, cwd));
    }

    /// The index of the input read from `source` (absolute), registered now if it is new.
    fn input_index(&mut self, name: &OsStr, source: &Path) -> u32 {
        let src_h = hash_path(source);
        if let Some(&i) = self.inputs.get(&src_h) {
            return i;
        }
        let i = self.push(name, src_h);
        self.inputs.insert(src_h, i);
        self.inputs
            .entry(hash_path(&real_path(source)))
            .or_insert(i);
        if let Some(ino) = inode(source) {
            self.inodes.entry(ino).or_insert(i);
        }
        i
    }

    /// The name of the registered input that `path` (absolute) is, by path, real path or
    /// device and inode.
    pub fn input_at(&self, path: &Path) -> Option<OsString> {
        let found = (self.inputs.get(&hash_path(path)))
            .or_else(|| self.inputs.get(&hash_path(&real_path(path))))
            .or_else(|| inode(path).and_then(|ino| self.inodes.get(&ino)));
        found.map(|&i| self.name(i))
    }

    /// Claims `output` for the input named `name` (as given), read from `source` (made absolute
    /// with `cwd`), registering that input if it is new.
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
        if let Some(input) = self.input_at(output) {
            return Claim::IsInput(input);
        }
        let src_h = hash_path(&source);
        let src_real_h = hash_path(&real_path(&source));
        if let Some(&owner) = (self.owner.get(&src_h)).or_else(|| self.owner.get(&src_real_h)) {
            return Claim::InputIsOutput(self.name(owner));
        }
        // Every input is registered as one (also one that does not get its output), so that no
        // later output replaces it.
        let me = self.input_index(name, &source);
        let (out_h, out_real_h) = (hash_path(output), hash_path(&real_path(output)));
        match (self.owner.get(&out_h)).or_else(|| self.owner.get(&out_real_h)) {
            Some(&i) if self.sources[i as usize] == self.sources[me as usize] => Claim::Again,
            Some(&i) => Claim::Taken(self.name(i)),
            None => {
                self.owner.insert(out_h, me);
                self.owner.entry(out_real_h).or_insert(me);
                Claim::First
            }
        }
    }

    fn push(&mut self, name: &OsStr, source: u64) -> u32 {
        use std::os::unix::ffi::OsStrExt;
        // At most MAX_LISTED (listed first) or one per record read: far below 2^32.
        let i = u32::try_from(self.sources.len()).unwrap_or(u32::MAX);
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

/// The most inputs [`list_first`] holds: a run that reads its whole list before writing holds
/// every item (about 200 bytes each with its claims), so it stops with an error past this
/// rather than grow without bound.
pub const MAX_LISTED: usize = 1 << 25;

/// Reads `items` to their end before anything is written, registering every item's path in
/// `claims` as an input of the run (see [`Claims`]), and gives them back in order: the
/// tools whose outputs may replace existing files (`--overwrite`, files written beside an
/// output) call it, so that no output of an earlier input replaces an input listed later. The
/// error that ended the list, if one did, comes last as before. More than [`MAX_LISTED`] items
/// are an error (nothing has been written then).
pub fn list_first(
    items: Box<dyn Iterator<Item = crate::inputs::Listed> + Send>,
    claims: &mut Claims,
    cwd: &Path,
) -> anyhow::Result<Box<dyn Iterator<Item = crate::inputs::Listed> + Send>> {
    let mut all = Vec::new();
    for item in items {
        if all.len() == MAX_LISTED {
            anyhow::bail!(
                "more than {MAX_LISTED} inputs in one run that reads its whole list before writing (so that no output replaces a later input): split the list (shard-list -n)"
            );
        }
        let end = item.is_err();
        if let Ok(Ok(item)) = &item {
            claims.register_input(&item.name, &item.path, cwd);
        }
        all.push(item);
        if end {
            break;
        }
    }
    Ok(Box::new(all.into_iter()))
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

    /// Each `(input, base, out_dir, ext, output)`: [`output_path`] of `input` under `base`
    /// into `out_dir` with `ext`, run from /work, is `output`.
    fn outputs_are(cases: &[(&str, &str, &str, &str, &str)]) {
        let (p, cwd) = (Path::new, Path::new("/work"));
        for &(input, base, out_dir, ext, want) in cases {
            let o = output_path(p(input), p(base), p(out_dir), cwd, ext);
            assert_eq!(o, p(want), "{input} under {base} into {out_dir}");
        }
    }

    #[test]
    fn relative_inputs_are_mirrored_under_out_dir() {
        outputs_are(&[
            ("imgs/a/1.jpg", ".", "out", "png", "/work/out/imgs/a/1.png"),
            ("imgs/a/1.jpg", "imgs", "/o", "npy", "/o/a/1.npy"),
        ]);
    }

    #[test]
    fn paths_outside_base_keep_their_whole_path() {
        outputs_are(&[
            (
                "/data/x/1.jpeg",
                ".",
                "out",
                "png",
                "/work/out/data/x/1.png",
            ),
            ("../y/./2.png", ".", "out", "png", "/work/out/y/2.png"),
        ]);
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

    #[test]
    fn inputs_registered_first_are_known_by_path_real_path_and_inode() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("in")).unwrap();
        std::fs::write(d.join("in/b.png"), b"b").unwrap();
        std::fs::write(d.join("a.png"), b"a").unwrap();
        std::fs::hard_link(d.join("in/b.png"), d.join("x.png")).unwrap();
        std::os::unix::fs::symlink(d.join("in"), d.join("linked")).unwrap();
        let mut c = Claims::default();
        c.register_input("a.png", Path::new("a.png"), d);
        c.register_input("in/b.png", Path::new("in/b.png"), d);
        // a.jpg, listed before a.png: its output is a.png.
        assert_eq!(
            c.claim(&d.join("a.png"), "a.jpg", Path::new("a.jpg"), d),
            Claim::IsInput("a.png".into())
        );
        // Through a hard link, and through a symlinked directory.
        for out in ["x.png", "linked/b.png"] {
            assert_eq!(
                c.claim(&d.join(out), "q.jpg", Path::new("q.jpg"), d),
                Claim::IsInput("in/b.png".into()),
                "{out}"
            );
        }
        assert_eq!(c.input_at(&d.join("linked/b.png")), Some("in/b.png".into()));
        assert_eq!(c.input_at(&d.join("in/c.png")), None);
        // A registered input claims its own output as before, once.
        let out = d.join("out/b.npz");
        assert_eq!(
            c.claim(&out, "in/b.png", Path::new("in/b.png"), d),
            Claim::First
        );
        assert_eq!(
            c.claim(&out, "./in/b.png", Path::new("./in/b.png"), d),
            Claim::Again
        );
    }
}
