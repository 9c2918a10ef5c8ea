//! `crop-resize`: a projection script's Pillow preprocessing (centre crop, Lanczos) as a tool,
//! bit-exact with Pillow.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use cli_common::inputs::Sniffed;
use cli_common::memory::MemoryBudget;
use cli_common::paths::Claims;
use cli_common::{
    CommonArgs, JsonlOut, Outcome, Tally, Tool, atomic, inputs, interrupt, paths, progress,
};
use image::RgbImage;
use imaging::{DecodeOptions, Gray16};
use rayon::prelude::*;
use records::{ErrorRecord, ImageRecord, InputItem};

pub use cli_common::paths::output_path;

/// Centre-crop images to a square and resize them with Pillow's exact Lanczos.
///
/// Does what a Pillow projection script does before projecting: `Image.open(p).convert('RGB')`, crop the centred
/// square of side min(w, h), `resize((R, R), Image.LANCZOS)`, with the same pixels as Pillow.
/// Inputs are image paths, shard records from shard-list, or `-` for stdin (one path or record
/// per line); outputs mirror the inputs' paths under --out-dir. Existing outputs are skipped.
#[derive(Debug, Parser)]
#[command(name = "crop-resize", version, max_term_width = 100)]
pub struct Cli {
    /// Images or JSON records (shard records, records with "path"); `-` or none reads stdin.
    #[arg(value_name = "INPUTS")]
    pub inputs: Vec<OsString>,

    /// Side of the square output in pixels (the generator's resolution; `--size` too).
    #[arg(short, long, visible_alias = "size", value_name = "PIXELS", value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub resolution: u32,

    /// Directory for the outputs: OUT_DIR/<input path relative to --base>.<png|npy>.
    #[arg(short, long, value_name = "DIR")]
    pub out_dir: PathBuf,

    /// Inputs under BASE are mirrored relative to it; others keep their whole absolute path.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub base: PathBuf,

    /// Output format: PNG, or .npy holding uint8 [3, R, R] (channels first).
    #[arg(long, value_enum, default_value_t = Format::Png)]
    pub format: Format,

    /// Redo outputs that already exist. The whole input list is read first, so that no output
    /// replaces an input listed later: an output that is an input of the run (by its path, its
    /// real path or a hard link) is that input's error record, and the file stays as it is.
    #[arg(long)]
    pub overwrite: bool,

    /// Worker threads, 1 to 1024 (default: all cores).
    #[arg(short, long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_JOBS))]
    pub jobs: Option<u64>,

    /// Refuse images with more pixels than this, read from the header before decoding
    /// (Pillow refuses above 2 x Image.MAX_IMAGE_PIXELS, the default).
    #[arg(long, value_name = "PIXELS", default_value_t = 178_956_970)]
    pub max_pixels: u64,

    /// Memory that the images being worked on may take together (e.g. 8G, 512M): a worker whose
    /// image would take more than is left waits for the others to finish theirs; an image larger
    /// than the whole budget is worked on alone. An image is reckoned at its file's size plus 12
    /// bytes a pixel, above what any decoder here takes for a crop (default: half of the
    /// machine's memory, or of the cgroup's limit when that is lower).
    #[arg(long, value_name = "SIZE", value_parser = cli_common::memory::parse_size)]
    pub max_memory: Option<u64>,

    /// Apply the EXIF orientation first (Pillow's ImageOps.exif_transpose). Off by default: a
    /// projection script's Image.open ignores it.
    #[arg(long)]
    pub exif_transpose: bool,

    /// 16-bit greyscale: `clip` as Pillow's convert('RGB') does (values over 255 become 255), or
    /// `scale` to the high byte like the other 16-bit modes.
    #[arg(long, value_enum, default_value_t = Gray16Arg::Clip)]
    pub gray16: Gray16Arg,

    #[command(flatten)]
    pub items: cli_common::inputs::ItemArgs,

    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Png,
    Npy,
}

impl Format {
    fn ext(self) -> &'static str {
        match self {
            Format::Png => "png",
            Format::Npy => "npy",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Gray16Arg {
    Clip,
    Scale,
}

impl Tool for Cli {
    const RECORDS: &'static str = r#"Reads image paths, one per line or as arguments, or JSON records: shard records ("paths"), records with "path", or a previous stage's records with "output". "error" and "summary" records are skipped.
.PP
Prints one record per input, in input order:
.PP
.nf
{"type":"image","input":"imgs/a/1.jpg","output":"/abs/out/imgs/a/1.png","format":"png","width":256,"height":256,"source_width":640,"source_height":480,"source_mode":"RGB","skipped":false}
{"type":"error","input":"imgs/a/2.jpg","message":"cannot decode: ..."}
.fi
.PP
A source with an alpha channel (RGBA, LA, PA) adds "alpha_dropped":true: convert('RGB') drops it as Pillow does, so its transparent pixels show whatever colour they hold (often all white or black).
.PP
and last {"type":"summary","ok":N,"skipped":N,"failed":N,"elapsed_ms":N}. Outputs are written to a temp file and renamed, so a killed run leaves no partial output; a re-run skips outputs that exist."#;
    const EXAMPLES: &'static [(&'static str, &'static str)] = &[
        (
            "Prepare every photo for a 1024x1024 generator, using all cores:",
            "shard-list --images imgs | crop-resize -r 1024 -o prepared",
        ),
        (
            "One shard of a shard-list run, as channels-first uint8 arrays:",
            "shard-list -n 4 list.txt | head -1 | crop-resize -r 256 -o arrays --format npy",
        ),
    ];
}

/// The most worker threads -j takes: each holds an image being worked on, and more threads
/// than cores only add memory.
const MAX_JOBS: u64 = 1024;

/// Images in flight at once per batch; records are printed in input order batch by batch.
const BATCH_PER_THREAD: usize = 8;

pub fn run(cli: Cli, out: &mut JsonlOut) -> Result<Outcome> {
    let started = Instant::now();
    let pool = rayon::ThreadPoolBuilder::new()
        // 0: rayon's default, a thread per core.
        .num_threads(cli.jobs.map_or(0, |j| j as usize))
        .build()
        .context("starting worker threads")?;
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let job = Job::from(&cli);
    let budget = MemoryBudget::new(cli.max_memory.unwrap_or_else(|| {
        cli_common::memory::available_to_us().map_or(u64::MAX, |bytes| bytes / 2)
    }));
    let bar = progress::bar(&cli.common, "crop-resize", None);
    let batch = pool.current_num_threads() * BATCH_PER_THREAD;
    let items = inputs::from_args_or_failed(&cli.inputs, &cli.items);
    let mut claims = Claims::default();
    // Without --overwrite no existing file is replaced (an output that exists is skipped), so the
    // list streams; with it, every input is known before anything is written.
    let mut items = if cli.overwrite {
        paths::list_first(items, &mut claims, &cwd)?
    } else {
        items
    };
    let mut tally = Tally::default();
    loop {
        interrupt::check()?;
        let (chunk, unreadable) = inputs::next_chunk(&mut items, batch);
        if chunk.is_empty() && unreadable.is_none() {
            break;
        }
        let chunk = pool.install(|| open_all(chunk));
        // Outputs are claimed in input order here, so that of two inputs with one output
        // (a.jpg, a.png) the first is written and the second is an error, in any chunking.
        let chunk: Vec<_> = chunk
            .into_iter()
            .map(|item| {
                let (item, file) = item?;
                let ext = job.format.ext();
                let target = output_path(&item.path, &cli.base, &cli.out_dir, &cwd, ext);
                claim(&mut claims, (item, file), target, &cwd)
            })
            .collect();
        for r in &pool.install(|| job.process_all(chunk, &budget)) {
            tally.emit(out, r, |rec| rec.skipped)?;
            bar.inc(1);
        }
        if let Some(e) = unreadable {
            return Err(e);
        }
    }
    bar.finish_and_clear();
    out.emit(&tally.summary(started))?;
    Ok(tally.outcome("crop-resize", cli.common.quiet))
}

/// Opens each input once, checking it is an image (the open file goes on to be read): only an
/// input that is an image may claim an output, so a caption file or a missing file listed
/// before the image with its name is its own error, not the image's.
fn open_all(chunk: Vec<inputs::Item>) -> Vec<Result<(InputItem, Sniffed), ErrorRecord>> {
    chunk
        .into_par_iter()
        .map(|item| {
            let item = item?;
            match Sniffed::open(&item.path, imaging::sniff) {
                Ok(file) => Ok((item, file)),
                Err(e) => Err(ErrorRecord {
                    input: item.name,
                    message: format!("{e:#}"),
                }),
            }
        })
        .collect()
}

/// An opened input with its output `target`, unless an earlier input claimed that output (or
/// the input is listed again): then the input's error record.
fn claim(
    claims: &mut Claims,
    (item, file): (InputItem, Sniffed),
    target: PathBuf,
    cwd: &Path,
) -> Result<(InputItem, Sniffed, PathBuf), ErrorRecord> {
    let claim = claims.claim(&target, &item.name, &item.path, cwd);
    match Claims::message(&claim, &target, &item.name) {
        Some(message) => Err(ErrorRecord {
            input: item.name,
            message,
        }),
        None => Ok((item, file, target)),
    }
}

/// What `--max-memory` reckons an image takes a pixel, beside its file: more than any decoder here
/// holds for a centre crop (at most 4 bytes of samples and 3 of RGB for TIFF, 8 + 3 for 16-bit
/// RGBA PNG, libjpeg's coefficients of a progressive CMYK JPEG and the crop), and the Lanczos
/// passes' rows.
const BYTES_PER_PIXEL: u64 = 12;

/// What to do with each image.
#[derive(Debug, Clone, Copy)]
struct Job {
    resolution: u32,
    format: Format,
    overwrite: bool,
    exif_transpose: bool,
    decode: DecodeOptions,
}

impl From<&Cli> for Job {
    fn from(cli: &Cli) -> Self {
        Job {
            resolution: cli.resolution,
            format: cli.format,
            overwrite: cli.overwrite,
            exif_transpose: cli.exif_transpose,
            decode: DecodeOptions {
                max_pixels: cli.max_pixels,
                gray16: match cli.gray16 {
                    Gray16Arg::Clip => Gray16::Clip,
                    Gray16Arg::Scale => Gray16::Scale,
                },
                // Each input is a file Pillow would open by name.
                by_name: true,
            },
        }
    }
}

impl Job {
    /// Decodes, crops, resizes and writes the claimed inputs in parallel (in the caller's pool),
    /// each to its record or its error record, in input order.
    fn process_all(
        &self,
        chunk: Vec<Result<(InputItem, Sniffed, PathBuf), ErrorRecord>>,
        budget: &MemoryBudget,
    ) -> Vec<Result<ImageRecord, ErrorRecord>> {
        chunk
            .into_par_iter()
            .map(|item| {
                let (item, file, target) = item?;
                // A panic in a decoder (the tiff crate asserts on some tiled files) is this
                // input's error record, not the batch's end.
                cli_common::panics::catch_item("decoding it", || {
                    self.process(&item, file, &target, budget)
                })
                .map_err(|e| ErrorRecord {
                    input: item.name.clone(),
                    message: format!("{e:#}"),
                })
            })
            .collect()
    }

    fn process(
        &self,
        item: &InputItem,
        file: Sniffed,
        target: &Path,
        budget: &MemoryBudget,
    ) -> Result<ImageRecord> {
        let r = self.resolution;
        let mut record = ImageRecord::square(
            item.name.clone(),
            target.to_path_buf(),
            self.format.ext(),
            r,
            false,
        );
        if !self.overwrite && target.exists() {
            // The record describes the file that is there, which may be of another size.
            let (w, h) = existing_size(target, self.format).with_context(|| {
                format!(
                    "{} exists but is not a {} image: remove it, or pass --overwrite",
                    target.display(),
                    self.format.ext()
                )
            })?;
            (record.width, record.height) = (w, h);
            record.skipped = true;
            return Ok(record);
        }
        let bytes = file.read_all(self.decode.max_file_bytes())?;
        let frame = if self.exif_transpose {
            imaging::Frame::Exif
        } else {
            imaging::Frame::Stored
        };
        // Memory is reserved from the header's size, before the decoder takes any; only the
        // centre square is decoded (where the format allows it).
        let mut reservation = None;
        let crop = imaging::decode_region(&bytes, &self.decode, frame, |w, h| {
            let pixels = w as u64 * h as u64;
            let bytes = (bytes.len() as u64).saturating_add(pixels.saturating_mul(BYTES_PER_PIXEL));
            reservation = Some(budget.reserve(bytes));
            imaging::center_crop_box(w, h)
        })?;
        record.source_width = Some(crop.width);
        record.source_height = Some(crop.height);
        record.source_mode = Some(crop.source_mode.into());
        // RGBA, LA, PA, RGBa, La: modes with an alpha channel.
        record.alpha_dropped = crop.source_mode.contains(['A', 'a']);
        let (w, h) = crop.rgb.dimensions();
        let resized = imaging::resize_lanczos(&crop.rgb, (0, 0, w, h), r, r);
        let write = |w: &mut atomic::Writer<'_>| write_image(w, &resized, self.format);
        if self.overwrite {
            atomic::write_atomic(target, write)?;
        } else {
            // Nothing that appeared meanwhile is replaced (another run's output, say).
            atomic::write_new(target, write)?;
        }
        drop(reservation);
        Ok(record)
    }
}

/// Width and height of an existing output, from the file.
fn existing_size(target: &Path, format: Format) -> Result<(u32, u32)> {
    match format {
        Format::Png => Ok(image::image_dimensions(target)?),
        Format::Npy => {
            use ndarray_npy::ReadNpyExt;
            let a = ndarray::Array3::<u8>::read_npy(std::fs::File::open(target)?)?;
            anyhow::ensure!(
                a.shape()[0] == 3,
                "shape {:?} is not [3, height, width]",
                a.shape()
            );
            Ok((a.shape()[2] as u32, a.shape()[1] as u32))
        }
    }
}

fn write_image(w: &mut impl Write, img: &RgbImage, format: Format) -> Result<()> {
    match format {
        Format::Png => imaging::write_png(w, img.as_raw(), img.width(), img.height(), 3)?,
        Format::Npy => {
            use ndarray_npy::WriteNpyExt;
            let hwc = ndarray::ArrayView3::from_shape(
                (img.height() as usize, img.width() as usize, 3),
                img.as_raw(),
            )?;
            let chw = hwc.permuted_axes([2, 0, 1]);
            chw.as_standard_layout().write_npy(w)?;
        }
    }
    Ok(())
}

cli_common::verify_cli!(Cli);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_is_channels_first() {
        let img = RgbImage::from_fn(2, 1, |x, _| {
            image::Rgb([x as u8, 10 + x as u8, 20 + x as u8])
        });
        let mut buf = Vec::new();
        write_image(&mut buf, &img, Format::Npy).unwrap();
        use ndarray_npy::ReadNpyExt;
        let a = ndarray::Array3::<u8>::read_npy(&buf[..]).unwrap();
        assert_eq!(a.shape(), &[3, 1, 2]);
        assert_eq!(
            a.iter().copied().collect::<Vec<_>>(),
            vec![0, 1, 10, 11, 20, 21]
        );
    }
}
