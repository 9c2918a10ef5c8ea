//! `project-one-gpu`: a projection script's job — GAN inversion of every image of a shard on one GPU,
//! `<stem>.npz` with `w` per image — with the generator and VGG loaded once, W statistics computed
//! once, and B images optimised at a time.

mod names;
pub mod pictures;

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use cli_common::ResultExt as _;
use cli_common::paths::{Claim, Claims};
use cli_common::{
    CommonArgs, JsonlOut, Outcome, Tally, Tool, atomic, inputs, interrupt, paths, progress,
};
use device::{Env, Precision};
use perceptual::Vgg16;
use pictures::{Picture, Video};
use projector::{Projection, Projector, Settings, WStats};
use rayon::prelude::*;
use records::{ErrorRecord, InputItem, LatentRecord};
use stylegan2::{Config, Generator};
use tch::{Kind, Tensor};

/// Project images into a StyleGAN2-ADA generator's W space (upstream project(), batched) on one GPU.
///
/// Each image is centre-cropped and Lanczos-resized to the generator's resolution exactly as
/// a Pillow projection script does (skipped when it already has that size), then optimised for --steps
/// steps with upstream's schedule, noise regularisation and LPIPS (VGG16) distance. The result is
/// `<stem>.npz` with `w` float32 [1,1,w_dim] ([1,num_ws,w_dim] with --w-plus) beside the image, or
/// under --out-dir mirroring the input paths. Existing outputs are skipped.
///
/// --precision tf32 (the default: PyTorch's, so upstream's) computes in fp32 with TF32
/// convolutions on CUDA and the network's fp16 blocks; fp32 is strict fp32 everywhere; bf16 is
/// tf32 with the VGG16 in bfloat16. --cuda-graphs auto is off here (experimental: the same
/// results, +12-19 % images/s on an H100, more GPU memory than eager; native VGG weights only).
/// --device auto takes cuda:(LOCAL_RANK, else GNU parallel's job slot - 1, else the shard index of
/// a shard-record argument) mod the visible GPUs.
#[derive(Debug, Parser)]
#[command(name = "project-one-gpu", version, max_term_width = 100)]
pub struct Cli {
    /// Images, shard records or crop-resize records; `-` or none reads stdin.
    #[arg(value_name = "INPUTS")]
    pub inputs: Vec<OsString>,

    /// Generator weights (.safetensors from scripts/convert-network-pkl).
    #[arg(long, value_name = "FILE")]
    pub network: PathBuf,

    /// Generator config (JSON text or file) when the weights carry none.
    #[arg(long, value_name = "JSON|FILE")]
    pub config: Option<OsString>,

    /// Perceptual network: NVIDIA's TorchScript vgg16.pt, or safetensors from
    /// scripts/convert-vgg16-lpips.
    #[arg(long, value_name = "FILE")]
    pub vgg: PathBuf,

    /// Write outputs under this directory, mirroring the inputs' paths relative to --base
    /// (default: `<stem>.npz` beside each image, as the usual projection script does).
    /// (`--outdir` too, as upstream's projector.py spells it.)
    #[arg(short, long, visible_alias = "outdir", value_name = "DIR")]
    pub out_dir: Option<PathBuf>,

    /// Directory the mirrored paths are relative to. An input outside it goes to
    /// `OUT/<its folder's name>-<hash>/<stem>.npz` (16 hex digits of a hash of the folder's
    /// absolute path): short, the same in every run, one output folder per input folder.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub base: PathBuf,

    /// Optimisation steps (`--num-steps` too, as upstream's projector.py spells it).
    #[arg(long, visible_alias = "num-steps", value_name = "N", default_value_t = 150, value_parser = clap::value_parser!(u32).range(1..))]
    pub steps: u32,

    /// Images optimised together, each independently (the same maths as one at a time; the
    /// floats round differently, so long runs end at different, equally close, w); 1 to 1024.
    #[arg(short, long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub batch_size: u32,

    /// Optimise one w per layer ([1,num_ws,w_dim]) instead of one w ([1,1,w_dim]).
    #[arg(long)]
    pub w_plus: bool,

    /// Seed of each image's random draws (numpy RandomState: noise init, then w-noise).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u32,

    #[command(flatten)]
    pub gpu: device::GpuArgs,

    #[command(flatten)]
    pub graphs: device::CudaGraphsArg,

    /// The old spelling of --cuda-graphs on (kept for one release).
    #[arg(long, hide = true)]
    pub cuda_graph: bool,

    /// Fix what the projector otherwise picks by timing each way once per shape on CUDA (the
    /// CPU takes the first): `upconv=phase|tconv|auto` (the generator's 2x up-sampling
    /// convolution), `vgg-layout=nchw|nhwc|auto` (the VGG16's memory layout), `epilogue=on|off`
    /// (the fused CUDA epilogue of the modulated convolutions); comma-separated.
    #[arg(long, value_name = "KEY=VALUE,...", default_value = "")]
    pub kernel_choices: stylegan2::tune::KernelChoices,

    /// z samples for w_avg/w_std (computed once per run), 1 to 1000000.
    #[arg(long, value_name = "N", default_value_t = 10000, value_parser = clap::value_parser!(i64).range(1..=1_000_000))]
    pub w_avg_samples: i64,

    /// Also save the target as it was optimised against (`<stem>.target.png`: cropped and
    /// resized) and the projected image (`<stem>.proj.png`) beside the .npz, as upstream's
    /// target.png and proj.png. Pictures go under --out-dir (or beside the inputs with
    /// --beside-inputs).
    #[arg(long)]
    pub save_image: bool,

    /// Write a contact sheet of the run to FILE (PNG): the columns named, a row per image
    /// projected, target | projection, with the image's name and distance under it (up to 200
    /// rows; pictures larger than 256 pixels scaled down, smaller than 128 scaled up by a whole
    /// factor, each pixel a square). Written at the end of the run, or when it is interrupted.
    #[arg(long, value_name = "FILE")]
    pub sheet: Option<PathBuf>,

    /// Also save a video of each image's optimisation beside its .npz, as upstream's proj.mp4:
    /// target | the image of each step's w (with the final noise), 10 frames a second. mp4:
    /// H.264 through ffmpeg (`<stem>.proj.mp4`); apng: an animated PNG (`<stem>.proj.apng`,
    /// browsers play it); auto (the flag alone): mp4 when ffmpeg is on PATH, else apng.
    /// Rendering the frames costs about a third of the optimisation again.
    #[arg(
        long,
        value_name = "auto|mp4|apng",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "auto"
    )]
    pub video: Option<pictures::VideoFormat>,

    /// Let --save-image and --video write their pictures beside the inputs when there is no
    /// --out-dir (a later glob of the inputs would then take them for images to project).
    #[arg(long)]
    pub beside_inputs: bool,

    /// Also save w after every step in the .npz, as `w_steps` [steps,k,w_dim].
    #[arg(long)]
    pub save_trajectory: bool,

    #[command(flatten)]
    pub cpu: cli_common::threads::ThreadArgs,

    /// Re-project images whose output exists.
    ///
    /// With --overwrite, --save-image, --video or --sheet (which may replace files that exist)
    /// the whole input list is read before anything is written, so that no output replaces an
    /// input listed later: an output that is an input of the run (by its path, its real path or
    /// a hard link) is that input's error record, and a --sheet that is one is refused.
    #[arg(long)]
    pub overwrite: bool,

    /// Refuse images with more pixels than this (decompression bombs).
    #[arg(long, value_name = "N", default_value_t = 178_956_970)]
    pub max_pixels: u64,

    #[command(flatten)]
    pub items: cli_common::inputs::ItemArgs,

    #[command(flatten)]
    pub common: CommonArgs,
}

impl Tool for Cli {
    const RECORDS: &'static str = r#"Reads image paths, one per line or as arguments, or JSON records: shard records ("paths"), records with "path", or crop-resize's records ("output", named by "input"). "error" and "summary" records are skipped.
.PP
Prints one record per image, in input order:
.PP
.nf
{"type":"latent","input":"imgs/a/1.jpg","output":"/abs/imgs/a/1.npz","w_shape":[1,1,512],"distance":0.21,"steps":150,"batch_seconds":9.8,"images_per_s":0.82,"peak_gpu_mib":20480,"skipped":false}
{"type":"error","input":"imgs/a/2.jpg","message":"cannot decode: ..."}
.fi
.PP
and last {"type":"summary","ok":N,"skipped":N,"failed":N,"elapsed_ms":N}. distance is the squared LPIPS feature distance of the last step (the value upstream logs last). With --save-image the record names the projection's PNG ("image"), with --video its video ("video"). Outputs are written to a temp file and renamed; a re-run skips images whose .npz exists. An input listed again is projected once (the repeat's record says skipped); another input that would write the same .npz (a.jpg beside a.png) is an error record. gather-npz reads these records directly."#;
    const EXAMPLES: &'static [(&'static str, &'static str)] = &[
        (
            "A folder of photos over four GPUs, one shard each (GNU parallel's job slot picks the GPU):",
            "shard-list --images imgs -n 4 | parallel -j4 project-one-gpu --network G.safetensors --vgg vgg16.pt {} > latents.jsonl",
        ),
        (
            "Then one array of every w:",
            "gather-npz -o all.npz < latents.jsonl",
        ),
        (
            "Look at the results:",
            "generate --network G.safetensors -o projected < latents.jsonl",
        ),
    ];

    const ENVIRONMENT: &'static [cli_common::EnvVars] =
        &[device::ENVIRONMENT, &[cli_common::inputs::JOB_SLOT_ENV]];
}

/// One image waiting for its batch, or a record to print in its place.
#[derive(Debug)]
enum Entry {
    Job {
        item: InputItem,
        output: PathBuf,
        target: Tensor,
    },
    /// An input listed again in this run: skipped if its first listing's output was written or
    /// skipped, else failed like it (decided when its record is printed, after the first's).
    Again {
        item: InputItem,
        output: PathBuf,
    },
    Done(LatentRecord),
    Failed(ErrorRecord),
    /// The input list could not be read (the last entry): the run ends with this error once
    /// the images before it are projected.
    Unreadable(anyhow::Error),
}

pub fn run(cli: Cli, out: &mut JsonlOut) -> Result<Outcome> {
    let started = Instant::now();
    check_picture_flags(&cli)?;
    let video = cli.video.map(pictures::VideoFormat::resolve).transpose()?;
    // Every input known (and the sheet checked) before a network is loaded or a file written.
    let mut reader = Reader::new(&cli, video)?;
    let precision = cli
        .gpu
        .precision_among(
            "project-one-gpu",
            &[Precision::Fp32, Precision::Tf32, Precision::Bf16],
        )
        .classified()?;
    // Off unless asked for (experimental here); `--cuda-graph` is the old spelling of on.
    let cuda_graph = cli.graphs.cuda_graphs.or(false) || cli.cuda_graph;
    let threads = cli.cpu.share();
    device::set_cpu_threads(threads.threads);
    if precision == Precision::Fp32 {
        gpu_runtime::shim::cuda_fp32_strict()?;
    }
    let device = worker_device(&cli)?;
    let mem_base = device::cuda_mem_used();
    let (g, vgg) = load_networks(&cli, device, precision)?;
    let cuda_graph = cuda_graph && graphs_can_run(device, &vgg);
    let stats = WStats::compute(&g, cli.w_avg_samples);
    let settings = Settings {
        steps: cli.steps as usize,
        w_plus: cli.w_plus,
        seed: cli.seed,
        // Upstream's video renders each step's w.
        trajectory: cli.save_trajectory || video.is_some(),
        force_fp32: precision == Precision::Fp32,
        cuda_graph,
        kernel_choices: cli.kernel_choices,
        ..Default::default()
    };
    let projector = Projector {
        g: &g,
        vgg: &vgg,
        stats: &stats,
        settings,
    };
    let r = g.config.img_resolution;
    if !cli.common.quiet {
        eprintln!("project-one-gpu: {}", banner(&cli, device, r, &threads));
    }
    reader.resolution = r;
    let (entries, reading) = reader.spawn(cli.batch_size as usize);
    let mut run = Run {
        cli: &cli,
        projector: &projector,
        out,
        counts: Tally::default(),
        mem_base,
        bar: progress::bar(&cli.common, "project-one-gpu", None),
        done: HashSet::new(),
        video,
        sheet: cli
            .sheet
            .as_deref()
            .map(|f| pictures::Sheet::new(f, r as u32)),
    };
    // The sheet holds what was projected, however the run ends.
    let result = run.all(entries, reading);
    run.bar.finish_and_clear();
    run.write_sheet()?;
    result?;
    run.summary(started)
}

/// Whether --cuda-graphs can run on `device` with `vgg`; where not, a warning says why (through
/// the tool's logger: "project-one-gpu: warning: ...", silenced by -q).
fn graphs_can_run(device: tch::Device, vgg: &Vgg16) -> bool {
    if !device.is_cuda() {
        log::warn!("--cuda-graphs ignored on {device:?} (CUDA only)");
        false
    } else if !matches!(vgg, Vgg16::Native(_)) {
        log::warn!("--cuda-graphs ignored with a TorchScript VGG (native weights only)");
        false
    } else {
        true
    }
}

/// Pictures go under --out-dir, or beside the inputs only when asked to.
fn check_picture_flags(cli: &Cli) -> Result<()> {
    if (cli.save_image || cli.video.is_some()) && cli.out_dir.is_none() && !cli.beside_inputs {
        return cli_common::usage(
            "--save-image and --video write pictures under --out-dir (beside the inputs, the next \
             glob of them would take the pictures for images to project): give --out-dir DIR, or \
             --beside-inputs to put them there",
        );
    }
    Ok(())
}

/// What the start line says: the network, the device, the resolution, the space, the batch,
/// the steps and the threads.
fn banner(cli: &Cli, device: tch::Device, r: i64, threads: &impl std::fmt::Display) -> String {
    format!(
        "{} on {device:?}, {r}x{r} ({}), batch {}, {} steps, {threads}",
        cli.network.display(),
        if cli.w_plus { "W+" } else { "W" },
        cli.batch_size,
        cli.steps
    )
}

/// `--device`, with auto's slot from LOCAL_RANK, else GNU parallel's job slot, else the shard
/// index of a shard-record argument.
fn worker_device(cli: &Cli) -> Result<tch::Device> {
    let device = (cli.gpu.device).resolve(&Env::from_process(cli_common::inputs::worker_slot(
        &cli.inputs,
    )))?;
    if device.is_cuda() {
        // Shapes repeat every step: let cuDNN pick the fastest algorithms once.
        tch::Cuda::cudnn_set_benchmark(true);
    }
    Ok(device)
}

/// The generator (an unconditional RGB one) and the VGG16, on `device`.
fn load_networks(
    cli: &Cli,
    device: tch::Device,
    precision: Precision,
) -> Result<(Generator, Vgg16)> {
    let config = cli
        .config
        .as_deref()
        .map(Config::from_flag)
        .transpose()
        .context("--config")?;
    let g = Generator::load(&cli.network, config, device)
        .with_context(|| format!("loading {}", cli.network.display()))?;
    if g.config.img_channels != 3 {
        bail!(
            "the generator makes {}-channel images; projection needs RGB",
            g.config.img_channels
        );
    }
    if g.config.c_dim > 0 {
        bail!("conditional generators are not supported by the projector (as upstream)");
    }
    let mut vgg =
        Vgg16::load(&cli.vgg, device).with_context(|| format!("loading {}", cli.vgg.display()))?;
    if precision == Precision::Bf16 {
        vgg.to_kind(Kind::BFloat16);
    }
    vgg.set_kernel_choices(cli.kernel_choices);
    Ok((g, vgg))
}

impl Run<'_> {
    /// --sheet's file, with a line saying where (or why there is none).
    fn write_sheet(&self) -> Result<()> {
        let Some(sheet) = &self.sheet else {
            return Ok(());
        };
        let written = sheet.write()?;
        if !self.cli.common.quiet {
            match written {
                Some(path) => eprintln!(
                    "project-one-gpu: contact sheet in {}{}",
                    path.display(),
                    match sheet.left_out() {
                        0 => String::new(),
                        n => format!(
                            " (the first {} images; {n} more left out)",
                            pictures::Sheet::MAX_ROWS
                        ),
                    }
                ),
                None => eprintln!("project-one-gpu: no image projected, no contact sheet"),
            }
        }
        Ok(())
    }

    /// The last record, and the outcome.
    fn summary(&mut self, started: Instant) -> Result<Outcome> {
        self.out.emit(&self.counts.summary(started))?;
        Ok(self
            .counts
            .outcome("project-one-gpu", self.cli.common.quiet))
    }
}

impl Run<'_> {
    /// Projects every entry in batches of --batch-size.
    fn all(
        &mut self,
        entries: std::sync::mpsc::Receiver<Entry>,
        reading: std::thread::JoinHandle<()>,
    ) -> Result<()> {
        let batch = self.cli.batch_size as usize;
        let mut pending: Vec<Entry> = Vec::new();
        for entry in entries {
            interrupt::check()?;
            if let Entry::Unreadable(e) = entry {
                self.flush(pending)?;
                return Err(e);
            }
            pending.push(entry);
            if pending
                .iter()
                .filter(|e| matches!(e, Entry::Job { .. }))
                .count()
                >= batch
            {
                self.flush(std::mem::take(&mut pending))?;
            }
        }
        interrupt::check()?;
        // The inputs ended, or the reader died: then say so rather than finish as if complete.
        if reading.join().is_err() {
            bail!(
                "reading the inputs failed (see the message above); images after the last record were not projected"
            );
        }
        self.flush(pending)?;
        // A signal during the last batch (its video, say) ends the run as interrupted too.
        interrupt::check()
    }
}

/// The longest file name Linux file systems hold, in bytes.
const NAME_MAX: usize = 255;

/// What the input side needs, owned: it runs on a thread of its own ([`Reader::spawn`]).
struct Reader {
    /// The inputs: read as the thread goes, or already read to their end ([`paths::list_first`]).
    items: Box<dyn Iterator<Item = inputs::Listed> + Send>,
    out_dir: Option<PathBuf>,
    base: PathBuf,
    cwd: PathBuf,
    overwrite: bool,
    resolution: i64,
    decode: imaging::DecodeOptions,
    claims: Claims,
    /// What each job writes beside its .npz (--save-image's pictures, --video's file), and
    /// --sheet's file: claimed as outputs too, so that no two inputs, and no input and the
    /// sheet, share a file.
    save_image: bool,
    video: Option<pictures::VideoFormat>,
    sheet: Option<PathBuf>,
}

impl Reader {
    /// The run's reader, its resolution set once the generator is loaded. When the run may
    /// replace files that exist (--overwrite, pictures, videos, a sheet), every input is read
    /// first and registered as one, so that no output of an earlier input replaces a later one,
    /// and a --sheet that is an input is a usage error.
    fn new(cli: &Cli, video: Option<pictures::VideoFormat>) -> Result<Reader> {
        let cwd = std::env::current_dir().context("reading the current directory")?;
        let mut claims = Claims::default();
        let items = inputs::from_args_or_failed(&cli.inputs, &cli.items);
        let replaces = cli.overwrite || cli.save_image || video.is_some() || cli.sheet.is_some();
        let items = if replaces {
            paths::list_first(items, &mut claims, &cwd)?
        } else {
            items
        };
        let sheet = cli.sheet.as_deref().map(|p| paths::absolute(p, &cwd));
        if let Some(input) = sheet.as_deref().and_then(|s| claims.input_at(s)) {
            return cli_common::usage(format!(
                "--sheet {} is the input {} of this run: the sheet would replace it; choose another sheet file",
                cli.sheet.as_deref().unwrap_or(Path::new("")).display(),
                Path::new(&input).display()
            ));
        }
        Ok(Reader {
            items,
            out_dir: cli.out_dir.clone(),
            base: cli.base.clone(),
            cwd: cwd.clone(),
            overwrite: cli.overwrite,
            resolution: 0,
            decode: imaging::DecodeOptions {
                max_pixels: cli.max_pixels,
                // Each target is a file the projection script opens by name.
                by_name: true,
                ..Default::default()
            },
            claims,
            save_image: cli.save_image,
            video,
            sheet,
        })
    }

    /// The files `item`'s job writes, its .npz first.
    fn outputs_for(&self, npz: PathBuf) -> Vec<PathBuf> {
        let pictures = pictures::picture_paths(&npz).into_iter();
        let pictures = pictures.filter(|_| self.save_image);
        let video = self.video.map(|f| pictures::video_path(&npz, f));
        let others: Vec<PathBuf> = pictures.chain(video).collect();
        std::iter::once(npz).chain(others).collect()
    }

    /// Reads the inputs, skips finished ones and decodes the rest on a thread, at most `ahead`
    /// entries ahead of the consumer: the next batch's images are decoded and resized while
    /// the GPU projects this one, instead of the GPU waiting for them. In input order. The
    /// thread is not joined when the consumer stops early (it may be blocked reading stdin); it
    /// ends when the consumer drops the receiver, on an interrupt, or at the end of the inputs.
    /// A panic while preparing one image is that image's error record.
    fn spawn(
        mut self,
        ahead: usize,
    ) -> (
        std::sync::mpsc::Receiver<Entry>,
        std::thread::JoinHandle<()>,
    ) {
        let (tx, rx) = std::sync::mpsc::sync_channel(ahead.max(1));
        let handle = std::thread::spawn(move || {
            let items = std::mem::replace(&mut self.items, Box::new(std::iter::empty()));
            for item in items {
                let (entry, last) = match item {
                    Ok(item) => (self.entry(item), false),
                    Err(e) => (Entry::Unreadable(e), true),
                };
                if interrupt::requested() || tx.send(entry).is_err() || last {
                    break;
                }
            }
        });
        (rx, handle)
    }

    fn entry(&mut self, item: std::result::Result<InputItem, ErrorRecord>) -> Entry {
        let item = match item {
            Ok(item) => item,
            Err(e) => return Entry::Failed(e),
        };
        let input = item.name.clone();
        // A decoder's panic on one file is its error record, kept off stderr.
        cli_common::panics::catch(|| self.prepare(item)).unwrap_or_else(|panic| {
            Entry::Failed(ErrorRecord {
                input,
                message: format!("internal error while reading it: {panic}"),
            })
        })
    }

    fn prepare(&mut self, item: InputItem) -> Entry {
        let files = self.outputs_for(self.output_for(&item));
        let output = files[0].clone();
        let refused = |message: String| {
            Entry::Failed(ErrorRecord {
                input: item.name.clone(),
                message,
            })
        };
        // (A sheet that is an input stopped the run before it began.)
        if let Some(sheet) = &self.sheet
            && let Some(f) = files.iter().find(|f| *f == sheet)
        {
            return refused(format!(
                "{} is the contact sheet (--sheet): choose another sheet file",
                f.display()
            ));
        }
        // A name the file system cannot hold is refused before the image is projected.
        if let Some(f) = files
            .iter()
            .find(|f| f.file_name().map_or(0, |n| n.len()) > NAME_MAX)
        {
            return refused(format!(
                "{} is a name of {} bytes, longer than file names may be ({NAME_MAX}): rename the input",
                f.display(),
                f.file_name().map_or(0, |n| n.len())
            ));
        }
        // Every file the job writes, not the .npz alone: a picture of one input must not be
        // another input, nor another input's picture.
        for (i, file) in files.iter().enumerate() {
            match self.claims.claim(file, &item.name, &item.path, &self.cwd) {
                Claim::First => {}
                Claim::Again if i == 0 => return Entry::Again { item, output },
                Claim::Again => {}
                other => {
                    return refused(
                        Claims::message(&other, file, &item.name)
                            .expect("a refused claim has a message"),
                    );
                }
            }
        }
        if !self.overwrite && output.exists() {
            return Entry::Done(skipped_record(&item, &output));
        }
        match load_target(&item.path, self.resolution, &self.decode) {
            Ok(target) => Entry::Job {
                item,
                output,
                target,
            },
            Err(e) => Entry::Failed(ErrorRecord {
                input: item.name.clone(),
                message: format!("{e:#}"),
            }),
        }
    }

    fn output_for(&self, item: &InputItem) -> PathBuf {
        // Outputs are named after the original input (a crop-resize record's "input"), so that
        // the .npz lands beside the photo as the usual projection script writes it, not beside the prepared copy.
        let source = Path::new(&item.name);
        match &self.out_dir {
            Some(dir) => names::output_path(source, &self.base, dir, &self.cwd, "npz"),
            None => paths::absolute(source, &self.cwd).with_extension("npz"),
        }
    }
}

fn skipped_record(item: &InputItem, output: &Path) -> LatentRecord {
    LatentRecord {
        input: item.name.clone(),
        output: output.to_path_buf(),
        w_shape: None,
        distance: None,
        steps: None,
        batch_seconds: None,
        images_per_s: None,
        peak_gpu_mib: None,
        image: None,
        video: None,
        skipped: true,
    }
}

/// The image as a Pillow projection script prepares it: Pillow-exact decode, centre crop, Lanczos to R×R (left as
/// is when already R×R); `.npy` inputs are crop-resize's uint8 [3,R,R]. Returns uint8 [3,R,R].
pub fn load_target(path: &Path, r: i64, decode: &imaging::DecodeOptions) -> Result<Tensor> {
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("npy"))
    {
        use ndarray_npy::ReadNpyExt;
        cli_common::inputs::regular_file(path)?;
        let f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
        let a = ndarray::Array3::<u8>::read_npy(f)
            .context("expected a uint8 [3,R,R] .npy (crop-resize --format npy)")?;
        if a.shape() != [3, r as usize, r as usize] {
            bail!(
                "array of shape {:?}, the generator needs [3, {r}, {r}]",
                a.shape()
            );
        }
        let v: Vec<u8> = a.iter().copied().collect();
        return Ok(Tensor::from_slice(&v).reshape([3, r, r]));
    }
    let bytes = cli_common::inputs::read_regular(path, decode.max_file_bytes(), imaging::sniff)?;
    // Only the centre square is decoded (where the format allows it).
    let crop = imaging::decode_region(
        &bytes,
        decode,
        imaging::Frame::Stored,
        imaging::center_crop_box,
    )?
    .rgb;
    let (w, h) = crop.dimensions();
    let img = if w as i64 == r && h as i64 == r {
        crop
    } else {
        imaging::resize_lanczos(&crop, (0, 0, w, h), r as u32, r as u32)
    };
    Ok(Tensor::from_slice(img.as_raw())
        .reshape([r, r, 3])
        .permute([2, 0, 1])
        .contiguous())
}

struct Run<'a> {
    cli: &'a Cli,
    projector: &'a Projector<'a>,
    out: &'a mut JsonlOut,
    counts: Tally,
    mem_base: Option<u64>,
    bar: indicatif::ProgressBar,
    /// Outputs this run wrote or found done (for inputs listed again).
    done: HashSet<PathBuf>,
    video: Option<pictures::VideoFormat>,
    sheet: Option<pictures::Sheet>,
}

impl Run<'_> {
    /// One batch from its targets to its records, in order: skips, projection, each image's
    /// files, records.
    fn flush(&mut self, entries: Vec<Entry>) -> Result<()> {
        let jobs: Vec<&Tensor> = entries
            .iter()
            .filter_map(|e| {
                if let Entry::Job { target, .. } = e {
                    Some(target)
                } else {
                    None
                }
            })
            .collect();
        let result = if jobs.is_empty() {
            None
        } else {
            Some(self.project(&jobs)?)
        };
        // Each converged image's files, written on all cores (PNG encoding and fsyncs would
        // otherwise keep the GPU waiting image by image); a diverged image writes nothing, so a
        // re-run retries it. Records follow below, in input order.
        let saved: Vec<Result<Saved>> = match &result {
            Some((p, _, image)) => self.save(&entries, p, image.as_ref()),
            None => Vec::new(),
        };
        let mut saved = saved.into_iter();
        let mut row = 0;
        for e in entries {
            match e {
                Entry::Done(rec) => {
                    self.done.insert(PathBuf::from(&rec.output));
                    self.counts.skipped += 1;
                    self.out.emit(&rec)?;
                }
                Entry::Failed(rec) => {
                    self.counts.failed += 1;
                    self.out.emit(&rec)?;
                }
                // Never pending: run() ends at it.
                Entry::Unreadable(e) => return Err(e),
                Entry::Again { item, output } => self.again(item, &output)?,
                Entry::Job { item, output, .. } => {
                    let (p, seconds, _) = result.as_ref().unwrap();
                    let saved = saved.next().expect("one result per job");
                    self.projected(item, output, (p, *seconds, row), saved)?;
                    row += 1;
                }
            }
            self.bar.inc(1);
        }
        Ok(())
    }

    /// The record of an input listed again: skipped if its first listing's `output` was
    /// written or skipped, else failed like it.
    fn again(&mut self, item: InputItem, output: &Path) -> Result<()> {
        if self.done.contains(output) {
            self.counts.skipped += 1;
            self.out.emit(&skipped_record(&item, output))?;
        } else {
            self.counts.failed += 1;
            let message =
                "listed again, and its earlier listing failed (see that error record)".into();
            self.out.emit(&ErrorRecord {
                input: item.name,
                message,
            })?;
        }
        Ok(())
    }

    /// The record of a projected image (row `row` of the batch's projection `p`, which took
    /// `seconds`): its latent and files, or why they were not written.
    fn projected(
        &mut self,
        item: InputItem,
        output: PathBuf,
        (p, seconds, row): (&Projection, f64, usize),
        saved: Result<Saved>,
    ) -> Result<()> {
        match saved {
            Ok(Saved { image, video }) => {
                self.done.insert(output.clone());
                self.counts.ok += 1;
                let n = p.distance.len() as f64;
                self.out.emit(&LatentRecord {
                    input: item.name.clone(),
                    output: output.to_path_buf(),
                    w_shape: Some(vec![1, p.w.size()[1] as usize, p.w.size()[2] as usize]),
                    // Finite: a diverged image's result is the error below.
                    distance: Some(p.distance[row]),
                    steps: Some(self.cli.steps as usize),
                    batch_seconds: Some(seconds),
                    images_per_s: Some(n / seconds),
                    peak_gpu_mib: self.peak_mib(),
                    image,
                    video,
                    skipped: false,
                })?;
            }
            Err(e) => {
                self.counts.failed += 1;
                self.out.emit(&ErrorRecord {
                    input: item.name,
                    message: format!("{e:#}"),
                })?;
            }
        }
        Ok(())
    }

    fn peak_mib(&self) -> Option<u64> {
        let base = self.mem_base?;
        device::cuda_mem_used().map(|u| u.saturating_sub(base) / (1 << 20))
    }

    /// Projects a batch; a CUDA out-of-memory error becomes a message naming --batch-size.
    fn project(&mut self, targets: &[&Tensor]) -> Result<(Projection, f64, Option<Tensor>)> {
        let t = Tensor::stack(targets, 0).to_kind(Kind::Float);
        let started = Instant::now();
        // libtorch errors in tch's ops are panics (CUDA out of memory among them).
        let result = cli_common::panics::catch_torch(|| {
            let p = self.projector.project(&t, |_, _| {})?;
            let image = (self.cli.save_image || self.sheet.is_some())
                .then(|| self.projector.render(&p).to_device(tch::Device::Cpu));
            Ok::<_, projector::Error>((p, image))
        });
        let (p, image) = match result {
            Ok(r) => r?,
            Err(cli_common::Torch::OutOfMemory(_)) => {
                let b = targets.len();
                bail!(
                    "CUDA out of memory projecting {b} image(s) at once: lower --batch-size (e.g. --batch-size {})",
                    (b / 2).max(1)
                );
            }
            Err(cli_common::Torch::Other(first_line)) => {
                bail!("projection failed: {first_line}")
            }
        };
        Ok((p, started.elapsed().as_secs_f64(), image))
    }
}

impl Run<'_> {
    /// Writes the files of a projected batch's jobs (the sheet's rows, the videos, then each
    /// image's pictures and .npz on all cores); one result per job, in order.
    fn save(
        &mut self,
        entries: &[Entry],
        p: &Projection,
        image: Option<&Tensor>,
    ) -> Vec<Result<Saved>> {
        let (names, (targets, outputs)): (Vec<String>, (Vec<&Tensor>, Vec<&PathBuf>)) = entries
            .iter()
            .filter_map(|e| match e {
                Entry::Job {
                    item,
                    target,
                    output,
                } => Some((item.name.to_string_lossy().into_owned(), (target, output))),
                _ => None,
            })
            .unzip();
        let converged: Vec<bool> = p.distance.iter().map(|d| d.is_finite()).collect();
        let pictures = self.cli.save_image || self.sheet.is_some() || self.video.is_some();
        let target_pics: Vec<Option<Picture>> = targets
            .iter()
            .map(|t| pictures.then(|| target_picture(t)))
            .collect();
        let proj_pics: Vec<Option<Picture>> = (0..targets.len())
            .map(|row| image.map(|img| rendered_picture(&img.get(row as i64))))
            .collect();
        let videos: Vec<Result<Option<PathBuf>>> = match self.video {
            Some(format) => self.videos(p, &target_pics, &outputs, &converged, format),
            None => outputs.iter().map(|_| Ok(None)).collect(),
        };
        let save_image = self.cli.save_image;
        let files: Vec<Result<Files>> = videos
            .into_iter()
            .enumerate()
            .map(|(row, video)| {
                if !converged[row] {
                    bail!("the distance is not finite (diverged)");
                }
                Ok(Files {
                    output: outputs[row].clone(),
                    w: to_array(&p.w.get(row as i64).unsqueeze(0)),
                    steps: p
                        .trajectory
                        .as_ref()
                        .filter(|_| self.cli.save_trajectory)
                        .map(|t| to_array(&t.get(row as i64))),
                    pictures: save_image
                        .then(|| target_pics[row].clone().zip(proj_pics[row].clone()))
                        .flatten(),
                    video: video?,
                })
            })
            .collect();
        let written: Vec<Result<Saved>> = files
            .into_par_iter()
            .map(|f| f.and_then(Files::write))
            .collect();
        // The sheet shows what was projected and written (a diverged image, or one whose files
        // failed, has its error record instead).
        if let Some(sheet) = &mut self.sheet {
            for row in (0..targets.len()).filter(|&r| written[r].is_ok()) {
                if let (Some(t), Some(q)) = (&target_pics[row], &proj_pics[row]) {
                    sheet.add(&names[row], t, q, p.distance[row]);
                }
            }
        }
        written
    }

    /// Each converged row's video of the optimisation: target | each step's w rendered with the
    /// final noise (upstream's proj.mp4), frames encoded on all cores as the GPU renders the
    /// next step. Written whole or not at all, before the .npz that marks the image done.
    fn videos(
        &self,
        p: &Projection,
        targets: &[Option<Picture>],
        outputs: &[&PathBuf],
        converged: &[bool],
        format: pictures::VideoFormat,
    ) -> Vec<Result<Option<PathBuf>>> {
        let trajectory = p.trajectory.as_ref().expect("--video keeps the trajectory");
        let steps = trajectory.size()[1];
        let mut videos: Vec<Option<Result<Video>>> = (0..outputs.len())
            .map(|row| {
                let target = targets[row].as_ref()?;
                converged[row].then(|| {
                    let path = pictures::video_path(outputs[row], format);
                    Video::create(&path, format, 2 * target.width, target.height, steps as u32)
                })
            })
            .collect();
        for step in 0..steps {
            if interrupt::requested() {
                break;
            }
            let images = self
                .projector
                .render_w(&trajectory.select(1, step), &p.noise)
                .to_device(tch::Device::Cpu);
            let frames: Vec<Picture> = (0..outputs.len())
                .map(|row| rendered_picture(&images.get(row as i64)))
                .collect();
            videos.par_iter_mut().enumerate().for_each(|(row, v)| {
                let Some(Ok(video)) = v else { return };
                let target = targets[row].as_ref().expect("a video has its target");
                let frame = Picture::side_by_side(target, &frames[row]);
                if let Err(e) = video.frame(&frame) {
                    *v = Some(Err(e));
                }
            });
        }
        videos
            .into_iter()
            .map(|v| match v {
                None => Ok(None),
                Some(Err(e)) => Err(e.context("writing the video")),
                Some(Ok(_)) if interrupt::requested() => Err(cli_common::Interrupted.into()),
                Some(Ok(video)) => video.finish().map(Some),
            })
            .collect()
    }
}

/// A target (uint8 [3,R,R]) as a picture.
fn target_picture(t: &Tensor) -> Picture {
    let (_, h, w) = t.size3().expect("a target is [3,R,R]");
    let hwc = t.permute([1, 2, 0]).contiguous().reshape([-1]);
    Picture {
        width: w as u32,
        height: h as u32,
        rgb: Vec::<u8>::try_from(&hwc).expect("uint8 pixels"),
    }
}

/// A rendered image ([C,R,R], about [-1,1]) as a picture.
fn rendered_picture(img: &Tensor) -> Picture {
    let (_, h, w) = img.size3().expect("an image is [3,R,R]");
    Picture {
        width: w as u32,
        height: h as u32,
        rgb: stylegan2::to_uint8_hwc(img),
    }
}

/// What a job's files gave its record.
struct Saved {
    image: Option<PathBuf>,
    video: Option<PathBuf>,
}

/// An image's outputs, on the host: the .npz (w, and the trajectory if kept), the target and
/// the projection as pictures when asked for, and its video if written.
struct Files {
    output: PathBuf,
    w: ndarray::ArrayD<f32>,
    steps: Option<ndarray::ArrayD<f32>>,
    /// Target and projection.
    pictures: Option<(Picture, Picture)>,
    video: Option<PathBuf>,
}

impl Files {
    /// Writes them, each atomically: the pictures first, since the .npz marks the image done
    /// (a re-run skips it).
    fn write(self) -> Result<Saved> {
        let image = match &self.pictures {
            Some((target, proj)) => {
                let [target_path, path] = pictures::picture_paths(&self.output);
                target.write_png(&target_path)?;
                proj.write_png(&path)?;
                Some(path)
            }
            None => None,
        };
        atomic::write_atomic(&self.output, |out| {
            latent_file::write(out, &self.w, self.steps.as_ref())
        })?;
        Ok(Saved {
            image,
            video: self.video,
        })
    }
}

fn to_array(t: &Tensor) -> ndarray::ArrayD<f32> {
    let (shape, v) = stylegan2::to_f32_vec(t);
    ndarray::ArrayD::from_shape_vec(shape, v).expect("shape matches")
}

cli_common::verify_cli!(Cli);
