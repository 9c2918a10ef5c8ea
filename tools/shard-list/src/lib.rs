//! `shard-list`: split a list of paths into shards, one JSON record per shard.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::Result;
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
/// `parallel`, `xargs` or a Makefile.
#[derive(Debug, Parser)]
#[command(name = "shard-list", version, max_term_width = 100)]
pub struct Cli {
    /// Files listing the paths, one per line; `-` or none reads stdin.
    #[arg(value_name = "FILES")]
    pub files: Vec<PathBuf>,

    /// Number of shards: shard i takes paths[i::N], like Python's `subdir_list[i::n]`.
    #[arg(short = 'n', long = "shards", value_name = "N", required_unless_present = "sizes",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub shards: Option<u32>,

    /// Shuffle with --seed, then split into consecutive parts of these fractions of the list
    /// (the DataPartitioner of PyTorch's distributed tutorial: part length int(frac*len), what is left over is dropped).
    #[arg(
        long,
        value_name = "F,F,...",
        value_delimiter = ',',
        conflicts_with = "shards"
    )]
    pub sizes: Option<Vec<f64>>,

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

    /// Print only shard K (nothing when it is empty), for one task of a job array: `slurm`
    /// takes K from SLURM_ARRAY_TASK_ID (sbatch --array=0-N-1). K counts every shard, the
    /// empty ones too.
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
With \-\-balance size the record also has "bytes". A path that cannot be read as a list entry (or, with \-\-balance size, whose size cannot be read) gives {"type":"error","input":...,"message":...} and is left out. shard\-list prints no summary record, so that every line of its output is one job for GNU parallel."#;
    const EXAMPLES: &'static [(&'static str, &'static str)] = &[
        (
            "Project every image, one shard per GPU:",
            "find imgs -name '*.jpg' | sort | shard-list -n 4 | parallel -j4 project-one-gpu --network G.safetensors --vgg vgg16.pt",
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
            "find imgs -type f | shard-list -n 4 --by-dir --balance size",
        ),
    ];

    fn common(&self) -> &CommonArgs {
        &self.common
    }
}

/// Reads the list, shards it and prints the records.
pub fn run(cli: Cli, out: &mut JsonlOut) -> Result<Outcome> {
    check_sizes(cli.sizes.as_deref())?;
    let parts = cli
        .sizes
        .as_ref()
        .map_or(cli.shards.unwrap_or(1) as usize, Vec::len);
    let only = match cli.shard.as_deref() {
        None => None,
        Some(k) => Some(shard_number(
            k,
            std::env::var("SLURM_ARRAY_TASK_ID").ok(),
            parts,
        )?),
    };
    // Many records per millisecond: block-buffered (the one tool that may be).
    out.set_flush_each(false);
    let mut failed = 0;
    let mut paths = Vec::new();
    for item in inputs::from_files(&cli.files, cli.list) {
        match item? {
            Ok(item) => paths.push(item.path),
            Err(e) => {
                failed += 1;
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
        for record in shards(&cli, &units, bytes.as_deref(), only) {
            out.emit(&record)?;
        }
    }
    Ok(Outcome::from_failures(failed))
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
    only: Option<usize>,
) -> Vec<Shard> {
    let assignment = match (&cli.sizes, cli.shards) {
        (Some(sizes), _) => partition(units.len(), sizes, cli.seed),
        (None, Some(n)) => match bytes {
            Some(b) => balance(b, n as usize),
            None => round_robin(units.len(), n as usize),
        },
        (None, None) => unreachable!("clap requires -n or --sizes"),
    };
    let shards = assignment.len();
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

/// `--shard K|slurm` as a shard number below `parts`; `slurm` reads `array_task_id`
/// (SLURM_ARRAY_TASK_ID).
fn shard_number(k: &str, array_task_id: Option<String>, parts: usize) -> Result<usize> {
    let (text, from) = match k {
        "slurm" => match array_task_id {
            Some(id) => (id, " (SLURM_ARRAY_TASK_ID)"),
            None => {
                return cli_common::usage(
                    "--shard slurm: SLURM_ARRAY_TASK_ID is not set (this is not a task of a job \
                     array: sbatch --array=0-N-1)",
                );
            }
        },
        k => (k.to_string(), ""),
    };
    match text.trim().parse::<usize>() {
        Ok(n) if n < parts => Ok(n),
        Ok(n) => cli_common::usage(format!(
            "--shard {n}{from}: there are {parts} shards, 0 to {}",
            parts - 1
        )),
        Err(_) => cli_common::usage(format!("--shard {text:?}{from}: a shard number or `slurm`")),
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn verify_cli() {
        Cli::command().debug_assert();
    }

    #[test]
    fn shard_numbers_come_from_the_flag_or_the_array_task() {
        assert_eq!(shard_number("2", None, 4).unwrap(), 2);
        assert_eq!(shard_number("slurm", Some("3".into()), 4).unwrap(), 3);
        let e = shard_number("slurm", Some("4".into()), 4).unwrap_err();
        assert!(
            e.to_string()
                .contains("--shard 4 (SLURM_ARRAY_TASK_ID): there are 4 shards, 0 to 3"),
            "{e}"
        );
        let e = shard_number("slurm", None, 4).unwrap_err();
        assert!(e.to_string().contains("not a task of a job array"), "{e}");
        assert!(shard_number("x", None, 4).is_err());
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
