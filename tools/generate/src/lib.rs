//! `generate`: render a StyleGAN2-ADA generator, as upstream `generate.py` does, from seeds or
//! from z / w / ws arrays (what project-one-gpu writes), to PNGs and optionally the raw float
//! images.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use cli_common::ResultExt as _;
use cli_common::paths::Claims;
use cli_common::{
    CommonArgs, JsonlOut, Outcome, Tally, Tool, atomic, inputs, interrupt, paths, progress,
};
use device::{Env, Precision};
use records::{ErrorRecord, ImageRecord, Summary};
use stylegan2::{Config, Generator, Noise, SynthesisOptions};
use tch::Tensor;

mod latents;
pub use latents::{Array, InputKind, Mapper, parse_seeds, read as read_array};

/// Render images with a StyleGAN2-ADA generator from seeds, z, w or ws (like upstream generate.py).
///
/// Images come from `--seeds` (z = numpy RandomState(seed).randn(1, z_dim), exactly as upstream)
/// and/or from latent files: `.npy`/`.npz` arrays of z [N,z_dim], w [N,1,w_dim] (broadcast to
/// every layer; project-one-gpu's `<stem>.npz`) or ws [N,num_ws,w_dim], named by arguments,
/// stdin lines or previous records ("output"). PNGs use upstream's mapping
/// (img*127.5+128).clamp(0,255) to uint8; `--raw` also saves the float32 NCHW images before it.
///
/// --precision tf32 (the default, as upstream on a GPU) runs the network's fp16 blocks in fp16 and
/// lets convolutions use TF32; fp32 runs everything in strict fp32 (CUDA images then differ from a
/// CPU run by ~1e-5 instead of ~1e-3). On the CPU everything is fp32.
#[derive(Debug, Parser)]
#[command(name = "generate", version, max_term_width = 100)]
pub struct Cli {
    /// Latent files or JSON records; `-` reads stdin. With --seeds and no inputs, stdin is not read.
    #[arg(value_name = "INPUTS")]
    pub inputs: Vec<OsString>,

    /// Generator weights (.safetensors from scripts/convert-network-pkl).
    #[arg(long, value_name = "FILE")]
    pub network: PathBuf,

    /// Generator config (JSON text or a .json file) when the weights file has no `config`
    /// metadata, or to override it.
    #[arg(long, value_name = "JSON|FILE")]
    pub config: Option<OsString>,

    /// Seeds to render, e.g. `0-3,7` (upstream's number ranges).
    #[arg(long, value_name = "LIST", value_parser = |s: &str| parse_seeds(s).map(Seeds))]
    pub seeds: Option<Seeds>,

    /// Directory for the PNGs: seed0007.png for seeds; for files, the input's path relative to
    /// --base mirrored under DIR (as crop-resize does; a record's "input" names it), with .png
    /// for a one-row file and .0000.png, .0001.png, ... for several rows. (`--outdir` too, as
    /// upstream's gen_images.py spells it.)
    #[arg(
        short,
        long,
        visible_alias = "outdir",
        value_name = "DIR",
        required_unless_present = "init_network"
    )]
    pub out_dir: Option<PathBuf>,

    /// Instead of rendering, write a freshly initialised generator to --network (upstream's
    /// initialisation, seeded with SEED; on the CPU the same file for a seed): random weights
    /// to try the tools with, on the CPU too. --config gives its shape; by default a 32×32
    /// generator of 32 channels (z and w of 32, 2 mapping layers, skip architecture).
    #[arg(long, value_name = "SEED", conflicts_with_all = ["inputs", "seeds", "raw"])]
    pub init_network: Option<i64>,

    /// Directory the mirrored paths are relative to.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub base: PathBuf,

    /// Truncation psi: w_avg + psi (w - w_avg). Applies to seeds and z, and to w/ws inputs too.
    #[arg(long, value_name = "PSI", default_value_t = 1.0)]
    pub trunc: f64,

    /// Truncate only the first N ws (upstream's truncation_cutoff).
    #[arg(long, value_name = "N")]
    pub trunc_cutoff: Option<i64>,

    /// Class label for conditional networks.
    #[arg(long = "class", value_name = "N")]
    pub class_idx: Option<i64>,

    /// Noise inputs of the synthesis layers.
    #[arg(long, value_enum, default_value_t = NoiseMode::Const)]
    pub noise_mode: NoiseMode,

    /// What input arrays hold (auto: decided by shape, a 2-D array is z).
    #[arg(long, value_enum, default_value_t = InputKind::Auto)]
    pub input_kind: InputKind,

    /// Array to read from .npz inputs (default: w, else ws, else z, else the only one).
    #[arg(long, value_name = "NAME")]
    pub key: Option<String>,

    /// Also write all rendered images, float32 [N,C,R,R] before the uint8 mapping, to this
    /// .npy, in the order of the image records.
    #[arg(long, value_name = "OUT.npy")]
    pub raw: Option<PathBuf>,

    #[command(flatten)]
    pub gpu: device::GpuArgs,

    #[command(flatten)]
    pub cpu: cli_common::threads::ThreadArgs,

    /// Images per synthesis call, 1 to 1024.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(i64).range(1..=1024))]
    pub batch_size: i64,

    /// Old spelling (kept for one release): the network's fp16 blocks in fp32 (half of
    /// --precision fp32).
    #[arg(long, hide = true)]
    pub fp32: bool,

    /// Old spelling (kept for one release): no TF32 in convolutions (the other half of
    /// --precision fp32).
    #[arg(long, hide = true)]
    pub no_tf32: bool,

    /// Re-render PNGs that exist (otherwise they are skipped, unless --raw needs the pixels).
    /// With it, or with --raw, the whole input list is read before anything is written, so that
    /// no output replaces an input listed later (by its path, its real path or a hard link): the
    /// latent whose image would is an error record instead, and a --raw file that is an input is
    /// refused.
    #[arg(long)]
    pub overwrite: bool,

    #[command(flatten)]
    pub list: cli_common::inputs::ListArgs,

    #[command(flatten)]
    pub common: CommonArgs,
}

/// The seeds of `--seeds`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seeds(pub Vec<std::ops::RangeInclusive<u32>>);

/// `noise_mode` of upstream's synthesis network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NoiseMode {
    /// The network's stored noise buffers (upstream's default): deterministic.
    Const,
    /// No noise.
    None,
    /// Fresh random noise per image.
    Random,
}

impl Tool for Cli {
    const RECORDS: &'static str = r#"Reads latent file paths (.npy/.npz), one per line or as arguments, or JSON records: a record with "output" contributes that file, named by its "input"; "error" and "summary" records are skipped.
.PP
Prints one record per image, in order (seeds first), an error record for each input that could not be rendered, and a summary:
.PP
.nf
{"type":"image","input":"seed:7","output":"/abs/out/seed0007.png","format":"png","width":1024,"height":1024,"skipped":false}
{"type":"image","input":"imgs/a/1.npz","output":"/abs/out/imgs/a/1.png","format":"png","width":1024,"height":1024,"skipped":false}
{"type":"error","input":"imgs/a/2.npz","message":"array of shape [1, 3] is none of z [N,512], ..."}
{"type":"summary","ok":N,"skipped":N,"failed":N,"elapsed_ms":N}
.fi
.PP
With --raw, the summary's "output" is the .npy and "shape" its shape; its rows follow the image records."#;
    const EXAMPLES: &'static [(&'static str, &'static str)] = &[
        (
            "A small random generator to try the tools on the CPU, and images from it:",
            "generate --init-network 0 --network G.safetensors && generate --network G.safetensors --seeds 0-3 -o targets",
        ),
        (
            "Curated images, as upstream generate.py:",
            "generate --network ffhq.safetensors --seeds 0-7 --trunc 0.7 -o out",
        ),
        (
            "Look at projection results:",
            "find imgs -name '*.npz' | generate --network ffhq.safetensors -o projected",
        ),
        (
            "Check parity with upstream's raw output:",
            "generate --network G.safetensors ws.npy --raw img.npy -o out --device cpu",
        ),
    ];

    const ENVIRONMENT: &'static [cli_common::EnvVars] = &[device::ENVIRONMENT];
}

/// One image to render.
#[derive(Debug)]
struct Pending {
    input: OsString,
    output: PathBuf,
    ws: Tensor,
}

/// The generator `--init-network` writes without --config.
const SMALL_GENERATOR: &str = r#"{"z_dim": 32, "w_dim": 32, "img_resolution": 32, "img_channels": 3,
 "map_layers": 2, "channel_base": 512, "channel_max": 32, "conv_clamp": null, "architecture": "skip"}"#;

/// `--init-network SEED`: a freshly initialised generator written (atomically) to --network.
fn init_network(cli: &Cli, seed: i64, out: &mut JsonlOut) -> Result<Outcome> {
    let config = match &cli.config {
        Some(c) => Config::from_flag(c).context("--config")?,
        None => Config::from_json(SMALL_GENERATOR)?,
    };
    config.validate().context("--config")?;
    if cli.network.exists() && !cli.overwrite {
        return cli_common::usage(format!(
            "--init-network: {} exists (--overwrite replaces it)",
            cli.network.display()
        ));
    }
    tch::manual_seed(seed);
    let tensors = stylegan2::init::init_tensors(&config);
    let bytes = stylegan2::init::encode(&tensors, &config).map_err(anyhow::Error::msg)?;
    cli_common::atomic::write_atomic(&cli.network, |w| std::io::Write::write_all(w, &bytes))
        .map_err(|e| anyhow::anyhow!("{}", e.describe()))?;
    out.emit(&records::NetworkRecord {
        input: None,
        output: std::path::absolute(&cli.network).unwrap_or(cli.network.clone()),
        tensors: tensors.len(),
        parameters: tensors.values().map(|t| t.numel()).sum(),
        config: serde_json::from_str(&config.to_json())?,
    })?;
    Ok(Outcome::Ok)
}

pub fn run(cli: Cli, out: &mut JsonlOut) -> Result<Outcome> {
    if let Some(seed) = cli.init_network {
        return init_network(&cli, seed, out);
    }
    let started = Instant::now();
    let threads = cli.cpu.share();
    device::set_cpu_threads(threads.threads);
    let device = choose_device(&cli)?;
    let g = load_generator(&cli, device)?;
    if !cli.common.quiet {
        let r = g.config.img_resolution;
        eprintln!(
            "generate: {} on {device:?}, {r}x{r}, {threads}",
            cli.network.display()
        );
    }
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let out_dir = cwd.join(cli.out_dir.as_ref().context("-o DIR")?);
    let (items, claims) = listed_inputs(&cli, &cwd)?;
    let _grad = tch::no_grad_guard();
    let mapper = Mapper {
        g: &g,
        psi: cli.trunc,
        cutoff: cli.trunc_cutoff,
        class: cli.class_idx,
    };
    let mut r = Renderer {
        g: &g,
        cli: &cli,
        out,
        pending: Vec::new(),
        raw: cli.raw.as_deref().map(RawRows::beside).transpose()?,
        counts: Tally::default(),
        bar: progress::bar(&cli.common, "generate", None),
        claims,
        cwd: cwd.clone(),
    };
    for seed in cli.seeds.iter().flat_map(|s| s.0.iter().cloned().flatten()) {
        interrupt::check()?;
        r.push(Pending {
            input: format!("seed:{seed}").into(),
            output: out_dir.join(format!("seed{seed:04}.png")),
            ws: mapper.from_z(&g.seeded_z(seed, 1))?,
        })?;
    }
    for item in items {
        interrupt::check()?;
        match item? {
            Ok(item) => r.file(&item, &mapper, &out_dir)?,
            Err(e) => r.fail(e)?,
        }
    }
    r.flush()?;
    r.bar.finish_and_clear();
    // A signal during the last batch still ends the run as interrupted (exit 130).
    interrupt::check()?;
    r.summary(started)
}

/// The device `--device` names, after `--precision` (fp32 or tf32) and `--no-tf32` have set
/// libtorch's float32 math.
fn choose_device(cli: &Cli) -> Result<tch::Device> {
    let strict = cli
        .gpu
        .precision_among("generate", &[Precision::Fp32, Precision::Tf32])
        .classified()?
        == Precision::Fp32;
    if strict || cli.no_tf32 {
        gpu_runtime::shim::cuda_fp32_strict()?;
    }
    Ok(cli.gpu.device.resolve(&Env::from_process(None))?)
}

/// The inputs (none with --seeds alone), and the paths they claim. With --overwrite (images
/// replace files that exist) or --raw, every input is known before anything is written, so
/// that no output replaces an input listed later (nor --raw's array an input); otherwise the
/// list streams, and an existing image is kept.
fn listed_inputs(
    cli: &Cli,
    cwd: &Path,
) -> Result<(Box<dyn Iterator<Item = inputs::Listed> + Send>, Claims)> {
    let items: Box<dyn Iterator<Item = inputs::Listed> + Send> =
        if cli.seeds.is_some() && cli.inputs.is_empty() {
            Box::new(std::iter::empty())
        } else {
            inputs::from_args(&cli.inputs, cli.list)
        };
    let mut claims = Claims::default();
    let items = if cli.overwrite || cli.raw.is_some() {
        paths::list_first(items, &mut claims, cwd)?
    } else {
        items
    };
    if let Some(raw) = &cli.raw
        && let Some(input) = claims.input_at(&paths::absolute(raw, cwd))
    {
        return cli_common::usage(format!(
            "--raw {} is the input {} of this run: the array would replace it; choose another file",
            raw.display(),
            Path::new(&input).display()
        ));
    }
    Ok((items, claims))
}

/// The generator, one whose images can be PNGs.
fn load_generator(cli: &Cli, device: tch::Device) -> Result<Generator> {
    let config = cli
        .config
        .as_deref()
        .map(Config::from_flag)
        .transpose()
        .context("--config")?;
    let g = Generator::load(&cli.network, config, device)
        .with_context(|| format!("loading the generator {}", cli.network.display()))?;
    let channels = g.config.img_channels;
    if !(1..=4).contains(&channels) {
        bail!("img_channels = {channels} cannot be written as PNG");
    }
    if g.config.c_dim == 0 && cli.class_idx.is_some() && !cli.common.quiet {
        eprintln!("generate: warning: --class ignored, the network is unconditional");
    }
    Ok(g)
}

/// Batches pending images, renders them, writes PNGs and records in input order.
struct Renderer<'a> {
    g: &'a Generator,
    cli: &'a Cli,
    out: &'a mut JsonlOut,
    pending: Vec<Pending>,
    /// Rendered float images for --raw, kept on disk as they come (not in memory: a run of
    /// many images held them all).
    raw: Option<RawRows>,
    counts: Tally,
    bar: indicatif::ProgressBar,
    /// Which input writes each PNG (a.npy and a.npz would both write a.png).
    claims: Claims,
    cwd: PathBuf,
}

impl Renderer<'_> {
    /// A latent file's rows, each an image to render (a file that cannot be read or mapped, or
    /// holds no rows, is an error record; so is each row with a non-finite value).
    fn file(
        &mut self,
        item: &records::InputItem,
        mapper: &Mapper<'_>,
        out_dir: &Path,
    ) -> Result<()> {
        let cli = self.cli;
        let path = item.path.as_path();
        // A panic while reading or mapping one file is that file's error record.
        let ws = cli_common::panics::catch_item("reading it", || {
            read_array(path, cli.key.as_deref()).and_then(|a| mapper.to_ws(&a, cli.input_kind))
        });
        let ws = match ws {
            Ok(ws) if ws.size()[0] == 0 => {
                return self.fail(ErrorRecord {
                    input: item.name.clone(),
                    message: "holds no rows: nothing to render".into(),
                });
            }
            Ok(ws) => ws,
            Err(e) => {
                return self.fail(ErrorRecord {
                    input: item.name.clone(),
                    message: format!("{e:#}"),
                });
            }
        };
        let n = ws.size()[0];
        let mirrored =
            paths::output_path(Path::new(&item.name), &cli.base, out_dir, &self.cwd, "png");
        for i in 0..n {
            let (input, output) = if n == 1 {
                (item.name.clone(), mirrored.clone())
            } else {
                let mut input = item.name.clone();
                input.push(format!("[{i}]"));
                (input, mirrored.with_extension(format!("{i:04}.png")))
            };
            let row = ws.narrow(0, i, 1);
            // NaN or inf would render an all-black image counted as done.
            if row.isfinite().all().int64_value(&[]) == 0 {
                self.fail(ErrorRecord {
                    input,
                    message: "has non-finite values (NaN or inf): nothing to render".into(),
                })?;
                continue;
            }
            self.push(Pending {
                input,
                output,
                ws: row,
            })?;
        }
        Ok(())
    }

    /// The --raw array, the last record, and the outcome.
    fn summary(&mut self, started: Instant) -> Result<Outcome> {
        let (output, shape) = match (&self.cli.raw, self.raw.take()) {
            (Some(path), Some(rows)) => {
                let shape = rows.write(path, self.g)?;
                (Some(self.cwd.join(path)), Some(shape))
            }
            _ => (None, None),
        };
        self.out.emit(&Summary {
            output,
            shape,
            ..self.counts.summary(started)
        })?;
        Ok(self.counts.outcome("generate", self.cli.common.quiet))
    }

    fn push(&mut self, p: Pending) -> Result<()> {
        let claim = self
            .claims
            .claim(&p.output, &p.input, Path::new(&p.input), &self.cwd);
        if let Some(message) = Claims::message(&claim, &p.output, &p.input) {
            return self.fail(ErrorRecord {
                message,
                input: p.input,
            });
        }
        self.pending.push(p);
        if self.pending.len() as i64 >= self.cli.batch_size {
            self.flush()?;
        }
        Ok(())
    }

    /// An error record, after the records of everything before it.
    fn fail(&mut self, e: ErrorRecord) -> Result<()> {
        self.flush()?;
        self.counts.failed += 1;
        self.out.emit(&e)
    }

    fn record(&self, p: &Pending, skipped: bool) -> ImageRecord {
        let r = self.g.config.img_resolution as u32;
        ImageRecord::square(p.input.clone(), p.output.clone(), "png", r, skipped)
    }

    // Kept in one piece: one batch from its latents to its records, in order: render, write,
    // record.
    fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.pending);
        let need_raw = self.cli.raw.is_some();
        // An existing PNG is kept (without --overwrite); --raw still needs its pixels.
        let keep: Vec<bool> = batch
            .iter()
            .map(|p| !self.cli.overwrite && p.output.exists())
            .collect();
        let todo: Vec<bool> = keep.iter().map(|&k| need_raw || !k).collect();
        let rendered = if todo.iter().any(|&t| t) {
            let ws: Vec<&Tensor> = batch
                .iter()
                .zip(&todo)
                .filter(|(_, t)| **t)
                .map(|(p, _)| &p.ws)
                .collect();
            let ws = Tensor::cat(&ws, 0);
            let opts = SynthesisOptions {
                noise: match self.cli.noise_mode {
                    NoiseMode::Const => Noise::Const,
                    NoiseMode::None => Noise::None,
                    NoiseMode::Random => Noise::Random,
                },
                fused_modconv: None,
                force_fp32: self.cli.fp32 || self.cli.gpu.precision == Precision::Fp32,
                ..Default::default()
            };
            let img = self
                .g
                .synthesis
                .forward(&ws, &opts)
                .to_device(tch::Device::Cpu);
            Some(img)
        } else {
            None
        };
        let mut row = 0;
        for ((p, t), keep) in batch.iter().zip(todo).zip(keep) {
            if !t {
                self.counts.skipped += 1;
                let rec = self.record(p, true);
                self.out.emit(&rec)?;
                self.bar.inc(1);
                continue;
            }
            let img = rendered.as_ref().unwrap().narrow(0, row, 1);
            row += 1;
            let result = if keep {
                Ok(true)
            } else {
                write_png(&p.output, &img).map(|_| false)
            };
            match result {
                Ok(skipped) => {
                    if let Some(raw) = &mut self.raw {
                        raw.push(&img)?;
                    }
                    self.counts.done(skipped);
                    let rec = self.record(p, skipped);
                    self.out.emit(&rec)?;
                }
                Err(e) => {
                    self.counts.failed += 1;
                    self.out.emit(&ErrorRecord {
                        input: p.input.clone(),
                        message: format!("{e:#}"),
                    })?;
                }
            }
            self.bar.inc(1);
        }
        Ok(())
    }
}

fn write_png(path: &Path, img: &Tensor) -> Result<()> {
    let (_, c, h, w) = img.size4()?;
    let buf = stylegan2::to_uint8_hwc(img);
    Ok(atomic::write_atomic(path, |out| {
        imaging::write_png(out, &buf, w as u32, h as u32, c as u32)
    })?)
}

/// --raw's rows as they are rendered: float32 little-endian in a temp file beside the target,
/// one image at a time; written as the .npy (header, then the rows) at the end.
struct RawRows {
    rows: usize,
    data: std::io::BufWriter<tempfile::NamedTempFile>,
}

impl RawRows {
    fn beside(target: &Path) -> Result<RawRows> {
        Ok(RawRows {
            rows: 0,
            data: std::io::BufWriter::new(atomic::temp_beside(target)?),
        })
    }

    /// Appends a rendered image [1,C,R,R].
    fn push(&mut self, img: &Tensor) -> Result<()> {
        let (_, values) = stylegan2::to_f32_vec(img);
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::io::Write::write_all(&mut self.data, &bytes).context("keeping a --raw row")?;
        self.rows += 1;
        Ok(())
    }

    /// Writes `path` (atomically): the .npy of every row, [N,C,R,R]; its shape.
    fn write(self, path: &Path, g: &Generator) -> Result<Vec<usize>> {
        use std::io::{Seek, Write};
        let (c, r) = (
            g.config.img_channels as usize,
            g.config.img_resolution as usize,
        );
        let shape = vec![self.rows, c, r, r];
        let mut data = self.data.into_inner().map_err(|e| e.into_error())?;
        data.rewind()?;
        atomic::write_atomic(path, |w| {
            w.write_all(&latent_file::npy::header("<f4", &shape))?;
            std::io::copy(&mut data, w).map(|_| ())
        })
        .with_context(|| format!("writing {}", path.display()))?;
        Ok(shape)
    }
}

cli_common::verify_cli!(Cli);
