//! `gather-npz`: many per-image latents into one array.
//!
//! Streaming: the inputs are read in parallel straight into their row of a memory-mapped scratch
//! file beside the output (so memory holds at most a few inputs, never the whole array twice),
//! failed rows are compacted away, and the rows are copied once into an uncompressed `.npz`
//! written atomically.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use cli_common::{CommonArgs, JsonlOut, Outcome, Tool, atomic, inputs, interrupt};
use rayon::prelude::*;
use records::{ErrorRecord, InputItem, Summary};

pub use latent_file::{Latent, npy_header, read_latent, unicode_array};

/// Gather per-image latent files (.npz/.npy with w [1,k,d]) into one .npz with w [N,k,d] and names.
///
/// Inputs are `.npz` files (array `w`, as project-one-gpu and StyleGAN2-ADA projection scripts write them) or `.npy`
/// files, named by arguments, stdin lines, or the records a previous stage printed (the file in
/// "output", named by "input"). The output holds `w` (float32 [N,k,d], input order) and `names`
/// (a numpy unicode array, loads without allow_pickle). An unreadable input or one whose shape
/// differs from the first is an error record; the others are still gathered.
#[derive(Debug, Parser)]
#[command(name = "gather-npz", version, max_term_width = 100)]
pub struct Cli {
    /// Latent files or JSON records; `-` or none reads stdin.
    #[arg(value_name = "INPUTS")]
    pub inputs: Vec<OsString>,

    /// The gathered file (.npz; with --jsonl, a JSON-lines file).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,

    /// Name of the array to read from each .npz.
    #[arg(long, value_name = "NAME", default_value = "w")]
    pub key: String,

    /// Write a JSON-lines manifest instead of .npz: one line per latent,
    /// {"name":...,"input":...,"shape":[1,k,d],"w":[...]} (w flattened, row-major).
    #[arg(long)]
    pub jsonl: bool,

    /// Replace the output if it exists (otherwise an existing output is an error). An output
    /// that is one of the inputs (by its path, its real path or a hard link) is refused either way.
    #[arg(long)]
    pub overwrite: bool,

    /// Reader threads, 1 to 1024 (default: all cores).
    #[arg(short, long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_JOBS))]
    pub jobs: Option<u64>,

    #[command(flatten)]
    pub list: cli_common::inputs::ListArgs,

    #[command(flatten)]
    pub common: CommonArgs,
}

impl Tool for Cli {
    const RECORDS: &'static str = r#"Reads latent file paths, one per line or as arguments, or JSON records: a record with "output" contributes that file, named by its "input"; records with "path" and shard records ("paths") work too; "error" and "summary" records are skipped.
.PP
Prints an error record for each input that could not be gathered, then
.PP
.nf
{"type":"summary","ok":N,"skipped":0,"failed":N,"elapsed_ms":N,"output":"/abs/all.npz","shape":[N,k,d]}
.fi
.PP
The .npz holds w (float32 [N,k,d]) and names (numpy unicode [N]); numpy.load reads both without allow_pickle."#;
    const EXAMPLES: &'static [(&'static str, &'static str)] = &[
        (
            "Gather what a projection job recorded, each w named by its photo:",
            "cat out/shard-*.jsonl | gather-npz -o latents.npz",
        ),
        (
            "Gather straight from the projector's records:",
            "project-one-gpu --network G.safetensors --vgg vgg16.pt shard.json | gather-npz -o latents.npz",
        ),
        (
            "Gather .npz files found on disk (each named by its own path):",
            "find out -name '*.npz' | sort | gather-npz -o latents.npz",
        ),
        (
            "Then, in Python:",
            "python -c \"import numpy as np; f = np.load('latents.npz'); print(f['w'].shape, f['names'][:3])\"",
        ),
    ];
}

/// The most reader threads -j takes (more than cores only add memory).
const MAX_JOBS: u64 = 1024;

pub fn run(cli: Cli, out: &mut JsonlOut) -> Result<Outcome> {
    let started = Instant::now();
    check_output(&cli)?;
    let pool = rayon::ThreadPoolBuilder::new()
        // 0: rayon's default, a thread per core.
        .num_threads(cli.jobs.map_or(0, |j| j as usize))
        .build()
        .context("starting reader threads")?;
    // Errors by input index, so that their records come out in input order.
    let mut errors: Vec<(usize, ErrorRecord)> = Vec::new();
    let mut items: Vec<InputItem> = Vec::new();
    for item in inputs::from_args(&cli.inputs, cli.list) {
        match item? {
            Ok(i) => items.push(i),
            Err(e) => errors.push((items.len(), e)),
        }
    }
    // The output replaces no input (by its path, its real path or a hard link), --overwrite or
    // not: checked against every input before anything is written.
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let mut claims = cli_common::paths::Claims::default();
    for item in &items {
        claims.register_input(&item.name, &item.path, &cwd);
    }
    if let Some(input) = claims.input_at(&cli_common::paths::absolute(&cli.output, &cwd)) {
        return cli_common::usage(format!(
            "-o {} is the input {} of this run: the gathered file would replace it; choose another output",
            cli.output.display(),
            Path::new(&input).display()
        ));
    }
    // The first readable input fixes the row shape.
    let mut first = None;
    for (i, item) in items.iter().enumerate() {
        match load(item, &cli.key, None, |l| l.shape().to_vec()) {
            Ok(shape) => {
                first = Some((i, shape));
                break;
            }
            Err(e) => errors.push((i, error(item, &e))),
        }
    }
    let (start, shape) = first.unwrap_or((items.len(), vec![1, 0, 0]));
    let rest = &items[start..];
    let row_bytes = shape.iter().product::<usize>() * 4;
    let (scratch, mut map) = scratch_rows(&cli.output, rest.len() * row_bytes)?;
    let results = pool.install(|| read_rows(&cli, rest, &shape, &mut map, row_bytes));
    interrupt::check()?;

    // Compact the good rows to the front, in input order.
    let mut names: Vec<&InputItem> = Vec::new();
    for (j, r) in results.into_iter().enumerate() {
        match r {
            Ok(()) => {
                let n = names.len();
                if n != j {
                    map.copy_within(j * row_bytes..(j + 1) * row_bytes, n * row_bytes);
                }
                names.push(&rest[j]);
            }
            Err(e) => errors.push((start + j, e)),
        }
    }
    let n = names.len();
    let mut out_shape = shape.clone();
    out_shape[0] = n;
    // Nothing gathered, nothing written: an empty array would only make the re-run refuse.
    if n > 0 {
        let data = &map[..n * row_bytes];
        if cli.jsonl {
            write_jsonl(&cli.output, &names, data, &shape, cli.overwrite)?;
        } else {
            write_npz(&cli.output, &names, data, &out_shape, cli.overwrite)?;
        }
    }
    drop(map);
    drop(scratch);
    errors.sort_by_key(|(i, _)| *i);
    report(&cli, out, &errors, (n > 0).then_some(out_shape), started)
}

/// -o must be a file, and one that does not exist unless --overwrite.
fn check_output(cli: &Cli) -> Result<()> {
    if cli.output.is_dir() {
        return cli_common::usage(format!(
            "-o {} is a directory: give the file to write, e.g. -o {}/latents.npz",
            cli.output.display(),
            cli.output.display()
        ));
    }
    if cli.output.exists() && !cli.overwrite {
        bail!(
            "{} exists; pass --overwrite to replace it",
            cli.output.display()
        );
    }
    Ok(())
}

/// A scratch file of `bytes` beside `output`, reserved on the disk and memory-mapped: one row
/// per input.
fn scratch_rows(
    output: &Path,
    bytes: usize,
) -> Result<(tempfile::NamedTempFile, memmap2::MmapMut)> {
    let scratch = atomic::temp_beside(&output.with_extension("gather-scratch"))?;
    let len = bytes as u64;
    scratch
        .as_file()
        .set_len(len)
        .context("sizing the scratch file")?;
    reserve(scratch.as_file(), len).with_context(|| {
        format!(
            "reserving {len} bytes for the scratch file beside {}",
            output.display()
        )
    })?;
    // SAFETY: the scratch file is private to this process (a fresh temp file) and outlives the map.
    let map = unsafe { memmap2::MmapMut::map_mut(scratch.as_file()) }
        .context("mapping the scratch file")?;
    Ok((scratch, map))
}

/// Each input's row into its slot of `map`, on the pool's threads: per input, nothing or its
/// error (unreadable, another shape, non-finite values, interrupted).
fn read_rows(
    cli: &Cli,
    items: &[InputItem],
    shape: &[usize],
    map: &mut [u8],
    row_bytes: usize,
) -> Vec<Result<(), ErrorRecord>> {
    if row_bytes == 0 || items.is_empty() {
        return Vec::new();
    }
    map.par_chunks_mut(row_bytes)
        .zip(items.par_iter())
        .map(|(slot, item)| {
            if interrupt::requested() {
                return Err(error(item, &anyhow::anyhow!("interrupted")));
            }
            let finite = load(item, &cli.key, Some(shape), |l| {
                l.write_le(slot);
                l.all_finite()
            })
            .map_err(|e| error(item, &e))?;
            if !finite {
                return Err(error(
                    item,
                    &anyhow::anyhow!("has non-finite values (NaN or inf): not a latent"),
                ));
            }
            Ok(())
        })
        .collect()
}

/// The error records in input order, the summary (`shape`: the written array's, when one was
/// written) and the outcome.
fn report(
    cli: &Cli,
    out: &mut JsonlOut,
    errors: &[(usize, ErrorRecord)],
    shape: Option<Vec<usize>>,
    started: Instant,
) -> Result<Outcome> {
    for (_, e) in errors {
        out.emit(e)?;
    }
    let n = shape.as_ref().map_or(0, |s| s[0]);
    let output = (n > 0).then(|| fs::canonicalize(&cli.output).unwrap_or(cli.output.clone()));
    out.emit(&Summary {
        ok: n,
        skipped: 0,
        failed: errors.len(),
        elapsed_ms: started.elapsed().as_millis() as u64,
        output,
        shape,
        ..Summary::default()
    })?;
    if n == 0 && errors.is_empty() {
        bail!(
            "no inputs: nothing gathered, {} not written",
            cli.output.display()
        );
    }
    if !cli.common.quiet && !errors.is_empty() {
        eprintln!(
            "gather-npz: {} of {} inputs failed (see the error records)",
            errors.len(),
            n + errors.len()
        );
    }
    Ok(Outcome::from_failures(errors.len()))
}

/// Allocates the file's blocks now: writing through a map into a sparse file on a full disk
/// raises SIGBUS (the process died with it before this, found by tests/disk_full.rs), while
/// `posix_fallocate` reports ENOSPC as an error.
fn reserve(f: &fs::File, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    if len == 0 {
        return Ok(());
    }
    // SAFETY: a valid open descriptor; the call only allocates blocks.
    match unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len as libc::off_t) } {
        0 => Ok(()),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}

fn error(item: &InputItem, e: &anyhow::Error) -> ErrorRecord {
    ErrorRecord {
        input: item.path.clone().into_os_string(),
        message: format!("{e:#}"),
    }
}

/// Reads one input, checks it is [1, k, d] (and, given `want`, exactly that shape), and hands it
/// to `use_it` while the file's bytes are alive.
fn load<T>(
    item: &InputItem,
    key: &str,
    want: Option<&[usize]>,
    use_it: impl FnOnce(&Latent) -> T,
) -> Result<T> {
    // A panic in a reader on a malformed file is this input's error, not the batch's end.
    cli_common::panics::catch_item("reading it", || {
        let bytes =
            inputs::read_regular(&item.path, latent_file::MAX_FILE_BYTES, latent_file::sniff)?;
        let l = read_latent(&bytes, key)?;
        let shape = l.shape();
        match want {
            Some(w) if shape != w => bail!("shape {shape:?} differs from the first input's {w:?}"),
            None if shape.len() != 3 || shape[0] != 1 => bail!("shape {shape:?} is not [1, k, d]"),
            _ => Ok(use_it(&l)),
        }
    })
}

fn write_npz(
    target: &Path,
    names: &[&InputItem],
    data: &[u8],
    shape: &[usize],
    overwrite: bool,
) -> Result<()> {
    use zip::write::SimpleFileOptions;
    let header = npy_header("<f4", shape);
    let names_npy = unicode_array(&names.iter().map(|i| i.name.as_os_str()).collect::<Vec<_>>());
    let big = (header.len() + data.len()) as u64 >= u32::MAX as u64 - 1024;
    let opts = SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(big);
    let mut tmp = atomic::temp_beside(target)?;
    {
        let mut zip = zip::ZipWriter::new(std::io::BufWriter::with_capacity(
            1 << 20,
            tmp.as_file_mut(),
        ));
        let entries = (|| -> zip::result::ZipResult<()> {
            zip.start_file("w.npy", opts)?;
            zip.write_all(&header)?;
            zip.write_all(data)?;
            zip.start_file(
                "names.npy",
                opts.large_file(names_npy.len() as u64 >= u32::MAX as u64),
            )?;
            zip.write_all(&names_npy)?;
            Ok(())
        })();
        if let Err(e) = entries {
            // Dropped, the writer would try to finish the archive on the failing disk again and
            // print its own line; the temp file is removed anyway.
            std::mem::forget(zip);
            return Err(anyhow::Error::new(e).context(format!("writing {}", target.display())));
        }
        zip.finish()
            .map_err(anyhow::Error::new)
            .and_then(|mut w| Ok(w.flush()?))
            .with_context(|| format!("writing {}", target.display()))?;
    }
    if overwrite {
        atomic::persist(tmp, target)?
    } else {
        atomic::persist_new(tmp, target)?
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct JsonlLine<'a> {
    #[serde(serialize_with = "records::os_text::serialize")]
    name: &'a OsStr,
    #[serde(serialize_with = "records::os_text::serialize")]
    input: &'a Path,
    shape: &'a [usize],
    w: Vec<f32>,
}

fn write_jsonl(
    target: &Path,
    names: &[&InputItem],
    data: &[u8],
    row_shape: &[usize],
    overwrite: bool,
) -> Result<()> {
    let row = row_shape.iter().product::<usize>() * 4;
    let fill = |w: &mut std::io::BufWriter<&mut fs::File>| -> Result<()> {
        for (item, bytes) in names.iter().zip(data.chunks_exact(row.max(1))) {
            let floats = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            let line = JsonlLine {
                name: &item.name,
                input: &item.path,
                shape: row_shape,
                w: floats,
            };
            serde_json::to_writer(&mut *w, &line)?;
            w.write_all(b"\n")?;
        }
        Ok(())
    };
    if overwrite {
        atomic::write_atomic(target, fill)?
    } else {
        atomic::write_new(target, fill)?
    }
    Ok(())
}

cli_common::verify_cli!(Cli);
