//! `pack`: an image folder into webdataset tar shards or MXNet RecordIO, with its class names.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Parser;
use cli_common::{CommonArgs, JsonlOut, Outcome, Tool};
use data_pack::folder::ImageFolder;
use data_pack::{Format, OutDir};
use error_class::ResultExt;
use records::{ErrorRecord, Packed, SkippedRecord, Summary};

/// Pack an image folder into webdataset tar shards or MXNet RecordIO, for ddp-train.
///
/// Reads DIR as torchvision's ImageFolder does (a sub-folder per class, in its order; the files
/// its extensions name; a directory that symlinks reach by several paths once) — or, when DIR
/// holds train/ and val/, both, with one list of classes (other folders beside them are error
/// records, not packed) — and writes each split to OUT_DIR (OUT_DIR/train, OUT_DIR/val):
/// shard-000000.tar, shard-000001.tar, ... (or data.rec and data.idx), and classes.txt, the
/// class names in label order, which ddp-train reads back (its records and checkpoints then name
/// the classes). The images are stored as their files hold them, each with the path of its file
/// relative to the split's folder (a shard's KEY.path member; with RecordIO, data.lst as MXNet's
/// im2rec writes a list), which ddp-train's --dump-batches and classify show. A file that is not
/// an image by its name (a .gif or a .txt, which ImageFolder leaves out too) or that lies outside
/// the class folders is a skipped record, not an error. An image that ddp-train could not decode
/// (its first bytes are not PNG, JPEG, GIF, BMP, TIFF or WebP: PPM and PGM, say), or that cannot
/// be read, is an error record and left out, as is a directory that cannot be read. Each split's
/// record says what ddp-train's --data takes for it.
///
/// A pack is written beside the previous one (in OUT_DIR/.pack-staging) and replaces it only
/// once whole: a pack that is interrupted or fails leaves OUT_DIR as it was. One pack at a time
/// writes to a directory (a lock on OUT_DIR/.lock).
#[derive(Debug, Parser)]
#[command(name = "pack", version, max_term_width = 100)]
pub struct Cli {
    /// The image folder (a sub-folder per class, or train/ and val/ holding them).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// Where the packed data goes (made if needed; refused when it holds files, unless
    /// --overwrite).
    #[arg(short, long, value_name = "OUT_DIR")]
    pub out_dir: PathBuf,

    /// What to write.
    #[arg(long, value_enum, default_value_t = Format::Wds)]
    pub format: Format,

    /// The largest shard (wds): a shard is closed before a sample would take it past SIZE
    /// (bytes; K, M, G are powers of 1024). A shard holds at least one sample.
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = size)]
    pub shard_size: u64,

    /// The most samples a shard holds (wds).
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub shard_samples: u64,

    /// The samples are written in a shuffled order (Python's random.Random(SEED).shuffle of the
    /// folder's), so that every shard holds every class.
    #[arg(long, value_name = "SEED", default_value_t = 0)]
    pub seed: u64,

    /// Keep the folder's order (class by class).
    #[arg(long)]
    pub no_shuffle: bool,

    /// The class names, one per line in label order, instead of the folder's: to pack a
    /// validation folder on its own with the training classes (the classes.txt of the packed
    /// training split). Every sub-folder must be one of them.
    #[arg(long, value_name = "FILE")]
    pub classes: Option<PathBuf>,

    /// An image file larger than this is an error record, not packed (K, M, G: powers of 1024).
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = size)]
    pub max_image_bytes: u64,

    /// Replace the pack in OUT_DIR: the files pack writes there (shard-NNNNNN.tar, data.rec,
    /// data.idx, classes.txt) are replaced or removed once the new pack is whole; other files
    /// are left as they are.
    #[arg(long)]
    pub overwrite: bool,

    #[command(flatten)]
    pub common: CommonArgs,
}

fn size(s: &str) -> Result<u64, String> {
    cli_common::memory::parse_size(s).map_err(|e| e.to_string())
}

impl Tool for Cli {
    const RECORDS: &'static str = r#"Prints a record per split packed:
.PP
.nf
{"type":"packed","split":"train","format":"wds","samples":1281167,"classes":1000,"files":["/abs/out/train/shard-000000.tar",...,"/abs/out/train/classes.txt"],"bytes":146214523904,"data":"wds:/abs/out/train/shard-{000000..000544}.tar"}
.fi
.PP
("split" only when DIR holds train/ and val/; with --format recordio "data" is "recordio:/abs/out/train/data" and "files" holds data.rec, data.lst and data.idx; braces and backslashes of OUT_DIR escaped with a backslash in a pattern), a skipped record for each file that is not an image to pack:
.PP
.nf
{"type":"skipped","input":"photos/train/cat/anim.gif","message":"not an image file name (ImageFolder's extensions: .jpg, ...): not packed"}
.fi
.PP
(files beside the class folders, and beside train/ and val/, too), an error record for each image left out (it cannot be read, ddp-train could not decode it, or it is too large for a RecordIO record), each directory that cannot be read, each folder beside train/ and val/, and each split of which no image could be packed (nothing is written for it, and it has no packed record), then {"type":"summary","ok":SAMPLES,"skipped":FILES,"failed":N,"elapsed_ms":N}. Skipped files alone end with exit status 0; error records, with 3.
.PP
Train with: ddp-train --data DATA_OF_TRAIN --val-data PATH_OF_VAL (the val record's "data" after its "wds:" or "recordio:")."#;
    const EXAMPLES: &'static [(&'static str, &'static str)] = &[
        (
            "Shards of 256 MiB from a folder with train/ and val/, then training from them:",
            "pack imagenet -o packed && ddp-train --data \"wds:packed/train/shard-{000000..000544}.tar\" --val-data \"packed/val/shard-{000000..000024}.tar\"",
        ),
        (
            "RecordIO, as MXNet's im2rec writes it:",
            "pack photos --format recordio -o packed",
        ),
    ];
}

/// One split to pack: its name (with train/ and val/), its folder and where it goes.
struct Split {
    name: Option<&'static str>,
    dir: PathBuf,
    out: PathBuf,
}

pub fn run(cli: Cli, out: &mut JsonlOut) -> Result<Outcome> {
    let started = std::time::Instant::now();
    let (splits, mut skipped, mut failed) = splits(&cli, out)?;
    let folders = (splits.iter())
        .map(|s| {
            (ImageFolder::scan(&s.dir).classified())
                .with_context(|| format!("reading {}", s.dir.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    let classes = classes(&cli, &splits, &folders)?;
    // Every output directory locked (one pack at a time in each) and checked before any is
    // written; each keeps its previous pack until its new one is whole.
    let dirs = (splits.iter())
        .map(|s| OutDir::open(&abs(&s.out), cli.overwrite).classified())
        .collect::<Result<Vec<_>, _>>()?;
    let mut packed = 0;
    for ((s, f), dir) in splits.iter().zip(&folders).zip(dirs) {
        let (record, skips, errors) = pack_split(&cli, s, f, dir, &classes)?;
        for r in &skips {
            out.emit(r)?;
        }
        skipped += skips.len();
        for e in &errors {
            out.emit(e)?;
        }
        failed += errors.len();
        if let Some(record) = record {
            packed += record.samples;
            out.emit(&record)?;
        }
    }
    out.emit(&Summary {
        ok: packed,
        skipped,
        failed,
        elapsed_ms: started.elapsed().as_millis() as u64,
        ..Summary::default()
    })?;
    Ok(Outcome::from_failures(failed))
}

/// The splits to pack: train/ and val/ where the folder has both (each file and other folder
/// beside them reported, as skipped and failed: their counts follow), else the folder itself.
fn splits(cli: &Cli, out: &mut JsonlOut) -> Result<(Vec<Split>, usize, usize)> {
    let (train, val) = (cli.dir.join("train"), cli.dir.join("val"));
    let mut failed = 0;
    let mut skipped = 0;
    let splits = if train.is_dir() && val.is_dir() {
        for file in other_files(&cli.dir)? {
            out.emit(&SkippedRecord {
                input: file.into_os_string(),
                message: "a file beside train/ and val/: not packed".into(),
            })?;
            skipped += 1;
        }
        // Other folders beside train/ and val/ (test/, say) are not packed: said, not dropped.
        for other in other_folders(&cli.dir)? {
            out.emit(&ErrorRecord {
                input: other.into_os_string(),
                message: "a folder beside train/ and val/: not packed (pack it on its own, with \
                          --classes naming the packed training split's classes.txt)"
                    .into(),
            })?;
            failed += 1;
        }
        vec![
            Split {
                name: Some("train"),
                dir: train,
                out: cli.out_dir.join("train"),
            },
            Split {
                name: Some("val"),
                dir: val,
                out: cli.out_dir.join("val"),
            },
        ]
    } else {
        vec![Split {
            name: None,
            dir: cli.dir.clone(),
            out: cli.out_dir.clone(),
        }]
    };
    Ok((splits, skipped, failed))
}

/// The classes the splits are packed with (`--classes`, else the first split's), each split's
/// classes among them and every name one a line of classes.txt carries back.
fn classes(cli: &Cli, splits: &[Split], folders: &[ImageFolder]) -> Result<Vec<OsString>> {
    let classes = match &cli.classes {
        Some(file) => data_pack::read_classes(file).map_err(|e| {
            cli_common::UsageError(format!("--classes {}", error_class::chain_text(&e)))
        })?,
        None => folders[0].classes.clone(),
    };
    // Before anything is written: names a line of classes.txt cannot carry back.
    if let Err(e) = data_pack::check_class_names(&classes) {
        return cli_common::usage(match &cli.classes {
            Some(file) => format!("--classes {}: {e}", file.display()),
            None => format!("{}: {e}", splits[0].dir.display()),
        });
    }
    for (s, f) in splits.iter().zip(folders) {
        if let Some(c) = f.classes.iter().find(|c| !classes.contains(c)) {
            return cli_common::usage(format!(
                "{}: the class {c:?} is not among {}",
                s.dir.display(),
                match &cli.classes {
                    Some(file) => format!("--classes {}", file.display()),
                    None => format!("the classes of {}", splits[0].dir.display()),
                }
            ));
        }
    }
    Ok(classes)
}

/// The folders in `dir` other than train/ and val/, in name order.
fn other_folders(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut others: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name() != "train" && e.file_name() != "val")
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    others.sort();
    Ok(others)
}

/// The files (not directories) in `dir`, in name order.
fn other_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| !p.is_dir())
        .collect();
    files.sort();
    Ok(files)
}

/// Packs one split: its record (none when no image could be packed: nothing was written), a
/// skipped record per file that is not an image to pack, and an error record per image or
/// directory left out.
fn pack_split(
    cli: &Cli,
    s: &Split,
    f: &ImageFolder,
    dir: OutDir,
    classes: &[OsString],
) -> Result<(Option<Packed>, Vec<SkippedRecord>, Vec<ErrorRecord>)> {
    let o = data_pack::Options {
        format: cli.format,
        shard_size: cli.shard_size,
        shard_samples: cli.shard_samples as usize,
        shuffle: (!cli.no_shuffle).then_some(cli.seed),
        max_image_bytes: cli.max_image_bytes,
    };
    let p = match data_pack::pack(f, dir, classes, &o, &cli_common::interrupt::requested) {
        Err(data_pack::PackError::Stopped) => return Err(cli_common::Interrupted.into()),
        packed => {
            (packed.classified()).with_context(|| format!("packing into {}", s.out.display()))?
        }
    };
    let skips = (p.skipped.into_iter())
        .map(|(path, why)| SkippedRecord {
            input: path.into_os_string(),
            message: why.to_string(),
        })
        .collect();
    let mut errors: Vec<ErrorRecord> = (p.left_out.into_iter())
        .map(|(path, why)| ErrorRecord {
            input: path.into_os_string(),
            message: error_class::chain_text(&why),
        })
        .collect();
    let Some(data) = p.data else {
        errors.push(ErrorRecord {
            input: s.dir.clone().into_os_string(),
            message: format!(
                "no image could be packed: nothing written ({} holds what it held)",
                s.out.display()
            ),
        });
        return Ok((None, skips, errors));
    };
    let record = Packed {
        split: s.name.map(str::to_string),
        format: cli.format.name().into(),
        samples: p.samples,
        classes: classes.len(),
        bytes: p.files.iter().map(|w| w.bytes).sum(),
        files: p.files.iter().map(|w| w.path.clone()).collect(),
        data: PathBuf::from(data),
    };
    Ok((Some(record), skips, errors))
}

fn abs(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}
