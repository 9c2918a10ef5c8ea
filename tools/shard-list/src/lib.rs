//! `shard-list`: split a list of paths into shards, one JSON record per shard.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use std::io::Write;

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use cli_common::{CommonArgs, JsonlOut, Outcome, Tool, inputs};
use records::{ErrorRecord, Shard};

mod partition;
pub use partition::{balance, partition, round_robin};

/// Split a list of paths into shards: round-robin, seeded partitions, by directory, or balanced by bytes.
///
/// Reads paths, one per line, from FILES or stdin (JSON records with a "path" field, or shard
/// records, are accepted too), and prints one shard record per non-empty shard:
/// {"type":"shard","shard":0,"shards":4,"paths":[...]}. Each line is one job for
/// `parallel`, `xargs` or a Makefile. `--images DIR` lists the image files under DIR instead
/// (every file pack and ddp-train's image folders would take), one path a line.
#[derive(Debug, Parser)]
#[command(name = "shard-list", version, max_term_width = 100)]
pub struct Cli {
    /// Files listing the paths, one per line; `-` or none reads stdin.
    #[arg(value_name = "FILES")]
    pub files: Vec<PathBuf>,

    /// The image files under DIR instead of a list: every file whose name ends, in any case,
    /// with an extension torchvision's ImageFolder takes (.jpg .jpeg .png .ppm .bmp .pgm .tif
    /// .tiff .webp), found as pack and ddp-train walk an image folder's class (symlinks
    /// followed, hidden files kept, each directory once, directories in the order of their
    /// paths and files in the order of their names). Without -n, --sizes or --shard, prints
    /// them one path a line (NUL-terminated with -0, as `find -print0`), bytes as they are; a
    /// name holding a newline needs -0 and is otherwise reported and left out (exit 3), as is
    /// a sub-directory that cannot be read. With them, shards the images. May be repeated.
    #[arg(long, value_name = "DIR", conflicts_with = "files")]
    pub images: Vec<PathBuf>,

    /// Number of shards: shard i takes paths[i::N], like Python's `subdir_list[i::n]`. With
    /// --shard slurm it defaults to the job array's size (SLURM_ARRAY_TASK_COUNT).
    #[arg(short = 'n', long = "shards", value_name = "N",
          required_unless_present_any = ["sizes", "shard", "images"],
          value_parser = clap::value_parser!(u32).range(1..))]
    pub shards: Option<u32>,

    /// Shuffle with --seed, then split into consecutive parts of these fractions of the list,
    /// each int(frac*len) long, as the DataPartitioner of PyTorch's distributed tutorial cuts
    /// them. Fractions summing to 1 split the whole list: the last part also takes the paths
    /// that rounding down leaves over (30 paths at 0.75,0.25: 22 and 8). Fractions summing to
    /// less leave the rest out.
    #[arg(
        long,
        value_name = "F,F,...",
        value_delimiter = ',',
        conflicts_with = "shards"
    )]
    pub sizes: Option<Vec<f64>>,

    /// --sizes exactly as DataPartitioner: the paths rounding down leaves over are dropped,
    /// even when the fractions sum to 1 (30 paths at 0.75,0.25: 22 and 7).
    #[arg(long, requires = "sizes")]
    pub data_partitioner: bool,

    /// Seed of the --sizes shuffle: CPython's random.Random(seed).shuffle, so the split is the
    /// one the Python code gets, on every machine.
    #[arg(long, default_value_t = 1234, requires = "sizes")]
    pub seed: u64,

    /// Shard directories instead of files: paths are grouped by their parent directory and whole
    /// groups are assigned (one folder of photos never spans two shards).
    #[arg(long)]
    pub by_dir: bool,

    /// What -n balances: the number of paths (round-robin) or their size in bytes (greedy,
    /// largest first; each shard keeps input order).
    #[arg(long, value_enum, default_value_t = Balance::Count, requires = "shards")]
    pub balance: Balance,

    /// Sort the paths (byte order) first, so the shards do not depend on `find`'s order.
    #[arg(long)]
    pub sort: bool,

    /// Print only shard K (nothing when it is empty), for one task of a job array. K counts
    /// every shard, the empty ones too. `slurm` takes K from the array task: without -n, the
    /// array is the shards (SLURM_ARRAY_TASK_COUNT of them; the task's place in the array is
    /// K: --array=1-4 gives 0 to 3, --array=0-12:4 too); with -n N, the task ids are shard
    /// numbers (SLURM_ARRAY_TASK_ID: --array=0-99 for -n 100, --array=3,17 to run two again).
    #[arg(long, value_name = "K|slurm")]
    pub shard: Option<String>,

    #[command(flatten)]
    pub list: cli_common::inputs::ListArgs,

    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Balance {
    Count,
    Size,
}

impl Tool for Cli {
    const RECORDS: &'static str = r#"Reads one path per line, or JSON records: a record with "paths" (a shard) contributes its paths, one with "path" that path; "error" and "summary" records are skipped.
.PP
Prints one line per non-empty shard, in shard order:
.PP
.nf
{"type":"shard","shard":0,"shards":4,"paths":["a/1.jpg","c/7.jpg"]}
.fi
.PP
With \-\-balance size the record also has "bytes". A path that cannot be read as a list entry (or, with \-\-balance size, whose size cannot be read) gives {"type":"error","input":...,"message":...} and is left out; so does, with \-\-images, a sub\-directory that cannot be read. With \-\-images alone, the output is paths, not records: one a line (or NUL\-terminated with \-0). shard\-list prints no summary record, so that every line of its output is one job for GNU parallel."#;
    const EXAMPLES: &'static [(&'static str, &'static str)] = &[
        (
            "Project every image, one shard per GPU:",
            "shard-list --images imgs -n 4 | parallel -j4 project-one-gpu --network G.safetensors --vgg vgg16.pt",
        ),
        (
            "Count the images that pack and ddp-train would take:",
            "shard-list --images imgs | wc -l",
        ),
        (
            "PyTorch's DataPartitioner 70/20/10 split of a file list:",
            "shard-list --sizes 0.7,0.2,0.1 --seed 1234 files.txt",
        ),
        (
            "One shard of 100 per task of a Slurm job array (sbatch --array=0-99):",
            "shard-list -n 100 --shard slurm --sort files.txt | crop-resize -r 256 -o out",
        ),
        (
            "Four shards of whole directories, balanced by bytes:",
            "shard-list --images imgs -n 4 --by-dir --balance size",
        ),
    ];
}

/// Reads the list, shards it and prints the records.
pub fn run(cli: Cli, out: &mut JsonlOut) -> Result<Outcome> {
    check_sizes(cli.sizes.as_deref())?;
    if !cli.images.is_empty() && cli.shards.is_none() && cli.sizes.is_none() && cli.shard.is_none()
    {
        return list_images(&cli.images, cli.list.null);
    }
    let env = |k: &str| std::env::var(k).ok();
    let (parts, only) = shard_choice(
        cli.sizes.as_ref().map(Vec::len),
        cli.shards,
        cli.shard.as_deref(),
        &env,
    )?;
    // Many records per millisecond: block-buffered (the one tool that may be).
    out.set_flush_each(false);
    let mut failed = 0;
    let mut paths = Vec::new();
    if cli.images.is_empty() {
        for item in inputs::from_files(&cli.files, cli.list) {
            match item? {
                Ok(item) => paths.push(item.path),
                Err(e) => {
                    failed += 1;
                    out.emit(&e)?;
                }
            }
        }
    } else {
        for dir in &cli.images {
            let (images, skipped) = images_under(dir)?;
            paths.extend(images);
            failed += skipped.len();
            for e in skipped {
                out.emit(&e)?;
            }
        }
    }
    if cli.sort {
        // Byte order, not Path's component order ("a-b" before "a/b").
        paths.sort_by(|a: &PathBuf, b| a.as_os_str().as_bytes().cmp(b.as_os_str().as_bytes()));
    }
    let units = if cli.by_dir {
        group_by_dir(paths)
    } else {
        paths.into_iter().map(|p| vec![p]).collect()
    };
    let (units, bytes) = if cli.balance == Balance::Size {
        let (units, bytes, unreadable) = sizes_of(units);
        failed += unreadable.len();
        for e in &unreadable {
            out.emit(e)?;
        }
        (units, Some(bytes))
    } else {
        (units, None)
    };
    if !units.is_empty() {
        for record in shards(&cli, &units, bytes.as_deref(), (parts, only)) {
            out.emit(&record)?;
        }
    }
    Ok(Outcome::from_failures(failed))
}

/// The image files under `dir` as the image folder reader walks a class, and an error record
/// for each sub-directory that could not be read. `dir` itself must be a directory, and a
/// symlink loop under it is an error (the folder reader's).
fn images_under(dir: &Path) -> Result<(Vec<PathBuf>, Vec<ErrorRecord>)> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => anyhow::bail!("--images {}: not a directory", dir.display()),
        Err(e) => anyhow::bail!("--images {}: {e}", dir.display()),
    }
    let mut skipped = Vec::new();
    let images = data_pack::folder::images_under(dir, &mut skipped)
        .with_context(|| format!("--images {}", dir.display()))?;
    let errors = (skipped.into_iter())
        .map(|(path, message)| ErrorRecord {
            input: path.into_os_string(),
            message: format!("cannot read this directory ({message}): its images are not listed"),
        })
        .collect();
    Ok((images, errors))
}

/// `--images` alone: the image files, one path a line (or NUL-terminated), bytes as they are.
/// A name that holds the separator is reported on stderr and left out, as is a directory that
/// cannot be read; either makes the run exit 3.
fn list_images(dirs: &[PathBuf], null: bool) -> Result<Outcome> {
    let sep = if null { b'\0' } else { b'\n' };
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let pipe = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            anyhow::Error::new(cli_common::StdoutClosed)
        } else {
            anyhow::Error::new(e).context("writing to stdout")
        }
    };
    let mut failed = 0;
    for dir in dirs {
        let (images, skipped) = images_under(dir)?;
        for e in skipped {
            failed += 1;
            log::error!("{}: {}", e.input.display(), e.message);
        }
        for p in images {
            let bytes = p.as_os_str().as_bytes();
            if bytes.contains(&sep) {
                failed += 1;
                log::error!(
                    "{}: its name holds a newline; not listed (-0 lists it, NUL-terminated)",
                    bytes.escape_ascii()
                );
                continue;
            }
            w.write_all(bytes).map_err(pipe)?;
            w.write_all(&[sep]).map_err(pipe)?;
        }
    }
    w.flush().map_err(pipe)?;
    Ok(Outcome::from_failures(failed))
}

/// The most shards a run has: -n's bound, and the bound on the job array's variables with
/// `--shard slurm` (Slurm's own arrays are far smaller: MaxArraySize is at most 4000001). No
/// memory is sized by it: only the non-empty shards are held.
pub const MAX_SHARDS: usize = u32::MAX as usize;

/// How many shards there are and which one alone to print (`None`: all), from the number of
/// `--sizes` fractions, `-n`, `--shard K|slurm` and, for `slurm`, the job array's variables as
/// `env` gives them. Every number is checked against [`MAX_SHARDS`] first; a value that is not
/// one, or past it, is a usage error. On success the shard is below the count, and the count is
/// between 1 and [`MAX_SHARDS`].
pub fn shard_choice(
    sizes: Option<usize>,
    shards: Option<u32>,
    shard: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(usize, Option<usize>)> {
    let parts = match (sizes, shards, shard) {
        (Some(n), _, _) if (1..=MAX_SHARDS).contains(&n) => n,
        (Some(n), _, _) => {
            return cli_common::usage(format!(
                "--sizes: {n} fractions; 1 to {MAX_SHARDS} parts can be made"
            ));
        }
        (None, Some(0), _) => return cli_common::usage("-n 0: there must be a shard"),
        (None, Some(n), _) => n as usize,
        (None, None, Some("slurm")) => {
            let task = ArrayTask::from_env(env)?;
            return Ok((task.count, Some(task.place()?)));
        }
        (None, None, _) => {
            return cli_common::usage("-n N says how many shards --shard K is one of");
        }
    };
    let only = shard.map(|k| shard_number(k, env, parts)).transpose()?;
    Ok((parts, only))
}

/// `--sizes`: non-negative fractions summing to at most 1.
fn check_sizes(sizes: Option<&[f64]>) -> Result<()> {
    let Some(sizes) = sizes else {
        return Ok(());
    };
    let total: f64 = sizes.iter().sum();
    if sizes.iter().any(|f| !f.is_finite() || *f < 0.0) || total > 1.0 + 1e-9 || sizes.is_empty() {
        return cli_common::usage(format!(
            "--sizes must be non-negative fractions summing to at most 1, got {sizes:?}"
        ));
    }
    Ok(())
}

/// The shard records of `units` (with their sizes when balancing by bytes): every non-empty
/// shard, or only shard `only`.
fn shards(
    cli: &Cli,
    units: &[Vec<PathBuf>],
    bytes: Option<&[u64]>,
    (parts, only): (usize, Option<usize>),
) -> Vec<Shard> {
    let assignment = match &cli.sizes {
        Some(sizes) => partition(units.len(), sizes, cli.seed, !cli.data_partitioner),
        None => match bytes {
            Some(b) => balance(b, parts),
            None => round_robin(units.len(), parts),
        },
    };
    // Only the first shards are held (the rest are empty); `parts` counts them all.
    let shards = parts;
    assignment
        .into_iter()
        .enumerate()
        .filter(|(shard, members)| !members.is_empty() && only.is_none_or(|k| k == *shard))
        .map(|(shard, members)| Shard {
            shard,
            shards,
            bytes: bytes.map(|b| members.iter().map(|&j| b[j]).sum()),
            paths: members
                .iter()
                .flat_map(|&j| units[j].iter().cloned())
                .collect(),
        })
        .collect()
}

/// `--shard K|slurm` with the shard count given: a shard number below `parts`; `slurm` reads
/// the task id (SLURM_ARRAY_TASK_ID), which names the shard.
fn shard_number(k: &str, env: &dyn Fn(&str) -> Option<String>, parts: usize) -> Result<usize> {
    let (n, from) = match k {
        "slurm" => (ArrayTask::from_env(env)?.id, " (SLURM_ARRAY_TASK_ID)"),
        k => match k.trim().parse::<usize>() {
            Ok(n) => (n, ""),
            Err(_) => {
                return cli_common::usage(format!("--shard {k:?}: a shard number or `slurm`"));
            }
        },
    };
    if n < parts {
        return Ok(n);
    }
    let hint = match env("SLURM_ARRAY_TASK_MIN") {
        Some(_) if !from.is_empty() => {
            " (with -n the task ids are shard numbers: --array=0-N-1; without -n the array's \
             size is the shard count and its first task shard 0)"
        }
        _ => "",
    };
    cli_common::usage(format!(
        "--shard {n}{from}: there are {parts} shards, 0 to {}{hint}",
        parts - 1
    ))
}

/// A Slurm job array task, as its variables describe it.
#[derive(Debug, Clone, PartialEq)]
struct ArrayTask {
    id: usize,
    /// Tasks in the array.
    count: usize,
    min: usize,
    max: usize,
    step: usize,
}

impl ArrayTask {
    /// SLURM_ARRAY_TASK_ID, _COUNT, _MIN, _MAX and _STEP (the last four as the ID alone when
    /// unset: an array of one).
    fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<ArrayTask> {
        let var = |k: &str| -> Result<Option<usize>> {
            let Some(v) = env(k) else {
                return Ok(None);
            };
            let t = v.trim();
            match t.parse::<u64>() {
                Ok(n) if n <= MAX_SHARDS as u64 => Ok(Some(n as usize)),
                _ if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => {
                    cli_common::usage(format!(
                        "--shard slurm: {k}={v:?} is more than {MAX_SHARDS}, the most shards \
                         a run has (Slurm's arrays are far smaller)"
                    ))
                }
                _ => cli_common::usage(format!("--shard slurm: {k}={v:?} is not a number")),
            }
        };
        let Some(id) = var("SLURM_ARRAY_TASK_ID")? else {
            return cli_common::usage(
                "--shard slurm: SLURM_ARRAY_TASK_ID is not set (this is not a task of a job \
                 array: sbatch --array=0-N-1)",
            );
        };
        Ok(ArrayTask {
            id,
            count: var("SLURM_ARRAY_TASK_COUNT")?.unwrap_or(1).max(1),
            min: var("SLURM_ARRAY_TASK_MIN")?.unwrap_or(id),
            max: var("SLURM_ARRAY_TASK_MAX")?.unwrap_or(id),
            step: var("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1),
        })
    }

    /// The task's place in an evenly spaced array (MIN, MIN+STEP, ... MAX): its shard when the
    /// array is the shards.
    fn place(&self) -> Result<usize> {
        let even = self.max >= self.min
            && (self.max - self.min).is_multiple_of(self.step)
            && (self.max - self.min) / self.step + 1 == self.count;
        if !even || self.id < self.min || !(self.id - self.min).is_multiple_of(self.step) {
            return cli_common::usage(format!(
                "--shard slurm: the array's {} task ids ({} to {}) are not evenly spaced, so a \
                 task's place in it is not its shard: give -n N, and task ids that are shard \
                 numbers",
                self.count, self.min, self.max
            ));
        }
        Ok((self.id - self.min) / self.step)
    }
}

/// Groups paths by parent directory, groups in order of first appearance.
fn group_by_dir(paths: Vec<PathBuf>) -> Vec<Vec<PathBuf>> {
    let mut index: HashMap<PathBuf, usize> = HashMap::new();
    let mut groups: Vec<Vec<PathBuf>> = Vec::new();
    for p in paths {
        let dir = p.parent().map(Path::to_path_buf).unwrap_or_default();
        let g = *index.entry(dir).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(p);
    }
    groups
}

/// Bytes of each unit; paths whose size cannot be read become error records and are left out.
fn sizes_of(units: Vec<Vec<PathBuf>>) -> (Vec<Vec<PathBuf>>, Vec<u64>, Vec<ErrorRecord>) {
    let mut kept = Vec::new();
    let mut bytes = Vec::new();
    let mut errors = Vec::new();
    for unit in units {
        let mut total = 0u64;
        let mut ok = Vec::new();
        for p in unit {
            match std::fs::metadata(&p) {
                Ok(m) => {
                    total += m.len();
                    ok.push(p);
                }
                Err(e) => errors.push(ErrorRecord {
                    input: p.into_os_string(),
                    message: format!("cannot read its size: {e}"),
                }),
            }
        }
        if !ok.is_empty() {
            kept.push(ok);
            bytes.push(total);
        }
    }
    (kept, bytes, errors)
}

cli_common::verify_cli!(Cli);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_numbers_come_from_the_flag_or_the_array_task() {
        let none = |_: &str| None;
        let id =
            |v: &'static str| move |k: &str| (k == "SLURM_ARRAY_TASK_ID").then(|| v.to_string());
        assert_eq!(shard_number("2", &none, 4).unwrap(), 2);
        assert_eq!(shard_number("slurm", &id("3"), 4).unwrap(), 3);
        let e = shard_number("slurm", &id("4"), 4).unwrap_err();
        assert!(
            e.to_string()
                .contains("--shard 4 (SLURM_ARRAY_TASK_ID): there are 4 shards, 0 to 3"),
            "{e}"
        );
        let e = shard_number("slurm", &none, 4).unwrap_err();
        assert!(e.to_string().contains("not a task of a job array"), "{e}");
        assert!(shard_number("x", &none, 4).is_err());
    }

    /// The variables Slurm 22.05 sets for `sbatch --array=SPEC`'s task `id`.
    fn array(id: usize, count: usize, min: usize, max: usize, step: usize) -> ArrayTask {
        let vars = [
            ("SLURM_ARRAY_TASK_ID", id),
            ("SLURM_ARRAY_TASK_COUNT", count),
            ("SLURM_ARRAY_TASK_MIN", min),
            ("SLURM_ARRAY_TASK_MAX", max),
            ("SLURM_ARRAY_TASK_STEP", step),
        ];
        let env = |k: &str| {
            (vars.iter())
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        ArrayTask::from_env(&env).unwrap()
    }

    #[test]
    fn an_evenly_spaced_array_is_the_shards_in_order() {
        // --array=1-4, --array=0-12:4 (printed by a two-node slurm-wlm 22.05 cluster).
        let places: Vec<usize> = (1..=4)
            .map(|id| array(id, 4, 1, 4, 1).place().unwrap())
            .collect();
        assert_eq!(places, [0, 1, 2, 3]);
        let places: Vec<usize> = [0, 4, 8, 12]
            .map(|id| array(id, 4, 0, 12, 4).place().unwrap())
            .into();
        assert_eq!(places, [0, 1, 2, 3]);
        // --array=1,3,7 and --array=2,5-6: step 1, but the ids are not MIN..=MAX.
        for a in [array(3, 3, 1, 7, 1), array(5, 3, 2, 6, 1)] {
            let e = a.place().unwrap_err();
            assert!(e.to_string().contains("not evenly spaced"), "{e}");
        }
    }

    #[test]
    fn groups_keep_first_appearance_order() {
        let g = group_by_dir(vec!["b/1".into(), "a/1".into(), "b/2".into(), "top".into()]);
        assert_eq!(
            g,
            vec![
                vec![PathBuf::from("b/1"), "b/2".into()],
                vec!["a/1".into()],
                vec!["top".into()]
            ]
        );
    }
}
