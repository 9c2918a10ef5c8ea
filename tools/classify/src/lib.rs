//! `classify`: a `ddp-train` checkpoint put to work on images: the most probable classes of
//! each, and with labelled data the evaluation `ddp-train`'s validation computes.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use cli_common::{CommonArgs, JsonlOut, Outcome, ResultExt as _, Tally, Tool, inputs, interrupt};
use device::{Env, Precision};
use records::{ClassAccuracy, ClassProb, ErrorRecord, EvaluationRecord, PredictionRecord};
use tch::{Device, Kind, Tensor};
use train::infer::{Classifier, Evaluation};
use train_data::images::ImageFiles;

/// Classify images with a ddp-train checkpoint.
///
/// Loads the model of a checkpoint that ddp-train wrote (--checkpoint: last.safetensors or
/// best.safetensors; every ResNet and both stems) and prepares each image as that run's
/// evaluation did, from the checkpoint's metadata: decoded with Pillow's pixels
/// (`Image.open(p).convert("RGB")`), torchvision's `Resize(size * 256 // 224)` and
/// `CenterCrop(size)` (or the image as it is, for runs without a resize), `ToTensor()` and the
/// run's `Normalize(mean, std)`; `ddp-train --print-eval-snippet` prints the same steps as
/// torchvision code. Each image gets its most probable classes (softmax of the logits), named
/// as the run named them.
///
/// Images come from arguments, stdin lines or shard-list's records. With --data (labelled
/// images, as ddp-train's --data names them) the tool also evaluates the model on them: loss,
/// top-1, top-5 and per-class accuracy as ddp-train's validation computes them, and with
/// --confusion the confusion matrix as CSV.
#[derive(Debug, Parser)]
#[command(name = "classify", version, max_term_width = 100)]
pub struct Cli {
    /// Images or JSON records (shard records, records with "path"); `-` or none reads stdin.
    /// --device auto takes cuda:(LOCAL_RANK, else GNU parallel's job slot - 1, else the shard
    /// index of a shard-record argument) mod the visible GPUs.
    #[arg(value_name = "INPUTS", conflicts_with = "data")]
    pub inputs: Vec<OsString>,

    /// The checkpoint ddp-train wrote (last.safetensors, best.safetensors): a ResNet's, or a
    /// TorchScript model's (--model torchscript:FILE), whose module is loaded from the file its
    /// metadata names (the path the run was given; a file with another SHA-256 is named in a
    /// warning).
    #[arg(long, value_name = "FILE")]
    pub checkpoint: PathBuf,

    /// A TorchScript model's module from this file instead of the one the checkpoint's
    /// metadata names.
    #[arg(long, value_name = "FILE.pt")]
    pub model: Option<PathBuf>,

    /// Classes per image, most probable first (at most the model's classes).
    #[arg(long, value_name = "K", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub top_k: u32,

    /// Labelled images to evaluate the model on instead of INPUTS: imagefolder:DIR (DIR/val
    /// when DIR holds train and val, else DIR; its class folders must be the model's),
    /// recordio:PREFIX or wds:PATTERN (the validation records or shards, as pack writes them).
    #[arg(long, value_name = "KIND:ARG")]
    pub data: Option<OsString>,

    /// Write the confusion matrix of --data to FILE as CSV: a row per true class, a column per
    /// predicted class, headed by the class names.
    #[arg(long, value_name = "FILE.csv", requires = "data")]
    pub confusion: Option<PathBuf>,

    /// Images per forward pass. ddp-train evaluates in batches of twice its per-rank
    /// --batch-size; the same batches give its figures to the bit.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub batch_size: u32,

    /// Refuse images with more pixels than this, read from their header before decoding
    /// (decompression bombs): twice Pillow's Image.MAX_IMAGE_PIXELS, where Pillow refuses, by
    /// default; at most 4294967296 (65536x65536, 12 GiB decoded).
    #[arg(long, value_name = "N", default_value_t = 178_956_970, value_parser = clap::value_parser!(u64).range(1..=1 << 32))]
    pub max_pixels: u64,

    #[command(flatten)]
    pub gpu: device::GpuArgs,

    #[command(flatten)]
    pub cpu: cli_common::threads::ThreadArgs,

    #[command(flatten)]
    pub items: cli_common::inputs::ItemArgs,

    #[command(flatten)]
    pub common: CommonArgs,
}

impl Tool for Cli {
    const RECORDS: &'static str = r#"Reads image paths, one per line or as arguments, or JSON records: shard records ("paths"), records with "path", or a previous stage's records with "output". "error" and "summary" records are skipped. With --data, the labelled images instead.
.PP
Prints one record per image, in input order: its --top-k most probable classes (softmax of the logits, most probable first; "class" is the name the training run gave it, or its index as text), and with --data its true class ("label") and, for shards or records that pack wrote, the file the sample was packed from ("packed_path", relative to the folder packed; an error record's message ends with it):
.PP
.nf
{"type":"prediction","input":"imgs/a/1.jpg","top":[{"class":"tabby","index":281,"prob":0.8127},{"class":"tiger_cat","index":282,"prob":0.1032}]}
{"type":"error","input":"imgs/a/2.jpg","message":"cannot decode: ..."}
{"type":"prediction","input":"val/shard-000000.tar:000000007","top":[{"class":"cat","index":0,"prob":0.91}],"label":1,"packed_path":"dog/IMG_1001.jpg"}
.fi
.PP
With --data, an evaluation record after the images: the loss (mean cross-entropy), top-1 and top-5 (percent; top5_of is 5, or the classes when the model has fewer), the top-1 of each class ("top1" null for a class without images), and the confusion CSV written:
.PP
.nf
{"type":"evaluation","data":"imagefolder:val","images":500,"loss":0.412,"top1":88.6,"top5":99.2,"top5_of":5,"per_class":[{"class":"cat","index":0,"images":250,"top1":90.4},...],"confusion":"/abs/confusion.csv"}
.fi
.PP
and last {"type":"summary","ok":N,"skipped":0,"failed":N,"elapsed_ms":N}. An image that cannot be used (unreadable, not an image, the wrong size for a model that does not resize) is an error record and is left out of the figures; the others go on, and the tool exits 3."#;
    const EXAMPLES: &'static [(&'static str, &'static str)] = &[
        (
            "The five most probable classes of every image under imgs/ (every suffix the folder reader takes, any case):",
            "shard-list --images imgs | classify --checkpoint ck/best.safetensors",
        ),
        (
            "Four processes, one shard each (GPUs by job slot):",
            "shard-list --images imgs -n 4 | parallel classify --checkpoint ck/best.safetensors",
        ),
        (
            "Evaluate on the validation images, with a confusion matrix:",
            "classify --checkpoint ck/best.safetensors --data imagefolder:imagenet --confusion confusion.csv",
        ),
    ];

    const ENVIRONMENT: &'static [cli_common::EnvVars] =
        &[device::ENVIRONMENT, &[cli_common::inputs::JOB_SLOT_ENV]];
}

/// `--device`, with auto's slot from LOCAL_RANK, else GNU parallel's job slot, else the shard
/// index of a shard-record argument (as project-one-gpu picks its GPU).
fn worker_device(cli: &Cli) -> Result<Device> {
    let slot = cli_common::inputs::worker_slot(&cli.inputs);
    Ok(cli.gpu.device.resolve(&Env::from_process(slot))?)
}

/// The most float32 values a batch of prepared images may take (4 GiB): the checkpoint's image
/// size and --batch-size together size it.
const MAX_BATCH_VALUES: u64 = 1 << 30;

pub fn run(cli: Cli, out: &mut JsonlOut) -> Result<Outcome> {
    let started = Instant::now();
    let threads = cli.cpu.share();
    device::set_cpu_threads(threads.threads);
    let precision = cli.gpu.precision;
    if precision == Precision::Fp32 {
        gpu_runtime::shim::cuda_fp32_strict()?;
    }
    let device = worker_device(&cli)?;
    let model =
        train::infer::model_from_checkpoint_with(&cli.checkpoint, device, cli.model.as_deref())
            .classified()
            .with_context(|| format!("loading {}", cli.checkpoint.display()))?;
    let size = model.input.image_size as u64;
    let values = u64::from(cli.batch_size) * 3 * size * size;
    if values > MAX_BATCH_VALUES {
        return cli_common::usage(format!(
            "--batch-size {} of {size}x{size} images is {values} values; a batch holds at most \
             {MAX_BATCH_VALUES}: give a smaller --batch-size",
            cli.batch_size
        ));
    }
    if !cli.common.quiet {
        // (A TorchScript module has its own first layers: no stem.)
        let stem = match model.arch {
            Some(_) => format!(", {} stem", model.input.stem),
            None => String::new(),
        };
        eprintln!(
            "classify: {} ({}, {} classes{stem}, {size}x{size}) on {}, {threads}",
            cli.checkpoint.display(),
            model.name,
            model.classes.len(),
            device::name(device),
        );
    }
    let mut opts = model.image_options(cli.cpu.workers().threads);
    opts.decode.max_pixels = cli.max_pixels;
    let mut job = Job {
        top_k: (cli.top_k as usize).min(model.classes.len()) as i64,
        model: &model,
        precision,
        out,
        tally: Tally::default(),
        bar: cli_common::progress::bar(&cli.common, "classify", None),
    };
    let _grad = tch::no_grad_guard();
    let evaluation = match &cli.data {
        Some(data) => job.labelled(&cli, data, opts)?,
        None => {
            job.paths(&cli, opts)?;
            None
        }
    };
    job.bar.finish_and_clear();
    // A signal during the last batch still ends the run as interrupted (exit 130).
    interrupt::check()?;
    if let Some(record) = evaluation {
        job.out.emit(&record)?;
    }
    job.out.emit(&job.tally.summary(started))?;
    Ok(job.tally.outcome("classify", cli.common.quiet))
}

/// What every batch needs.
struct Job<'a> {
    model: &'a Classifier,
    precision: Precision,
    top_k: i64,
    out: &'a mut JsonlOut,
    tally: Tally,
    bar: indicatif::ProgressBar,
}

/// A labelled image's record: its classes and label, or why it has none; either way naming
/// where pack found the sample (unreadable: the data is damaged, as a shard cut short is).
fn labelled_record(
    files: &ImageFiles,
    index: usize,
    row: std::result::Result<Vec<ClassProb>, String>,
) -> Result<std::result::Result<PredictionRecord, ErrorRecord>> {
    let input = files.paths[index].clone().into_os_string();
    let packed_path = files
        .packed_path(index)
        .classified()
        .with_context(|| format!("--data: the packed path of {}", input.display()))?;
    Ok(match row {
        Ok(top) => Ok(PredictionRecord {
            input,
            top,
            label: Some(files.labels[index] as usize),
            packed_path,
        }),
        Err(mut message) => {
            if let Some(p) = packed_path {
                // (Quoted as Rust quotes it: a name that is not UTF-8 keeps its bytes as \x
                // escapes.)
                message += &format!(" (packed from {:?})", p.as_os_str());
            }
            Err(ErrorRecord { input, message })
        }
    })
}

/// The evaluation's record of `--data` (its figures finite), with the confusion matrix
/// written where `--confusion` says.
fn evaluation_record(
    cli: &Cli,
    data: &OsString,
    model: &Classifier,
    evaluation: &Evaluation,
    figures: train::infer::Figures,
) -> Result<EvaluationRecord> {
    let confusion = match &cli.confusion {
        Some(path) => {
            cli_common::atomic::write_atomic(path, |w| {
                evaluation.write_confusion(&model.classes, w)
            })
            .map_err(|e| anyhow::anyhow!("{}", e.describe()))
            .with_context(|| format!("writing --confusion {}", path.display()))?;
            Some(std::path::absolute(path).unwrap_or_else(|_| path.clone()))
        }
        None => None,
    };
    let finite = |what: &str, v: f64| {
        anyhow::ensure!(v.is_finite(), "the evaluation's {what} is {v}");
        Ok(v)
    };
    Ok(EvaluationRecord {
        data: data.clone(),
        images: figures.images as usize,
        loss: finite("loss", figures.loss)?,
        top1: figures.top1,
        top5: figures.top_k,
        top5_of: figures.k as usize,
        per_class: (figures.per_class.iter().enumerate())
            .map(|(index, &(images, top1))| ClassAccuracy {
                class: model.classes[index].clone(),
                index,
                images: images as usize,
                top1,
            })
            .collect(),
        confusion,
    })
}

/// A batch's usable images, run through the model.
struct Scored {
    /// Per row of the batch: its classes, or why it has none.
    rows: Vec<Result<Vec<ClassProb>, String>>,
    /// The logits of the rows that have classes, in order (on the model's device).
    logits: Option<Tensor>,
    /// Those rows.
    kept: Vec<usize>,
}

impl Job<'_> {
    /// Images named by the inputs, a batch at a time.
    fn paths(&mut self, cli: &Cli, opts: train_data::images::ImageOptions) -> Result<()> {
        let mut items = inputs::from_args_or_failed(&cli.inputs, &cli.items);
        loop {
            interrupt::check()?;
            let (chunk, unreadable) = inputs::next_chunk(&mut items, cli.batch_size as usize);
            if chunk.is_empty() && unreadable.is_none() {
                break;
            }
            let paths: Vec<PathBuf> = chunk
                .iter()
                .filter_map(|item| Some(item.as_ref().ok()?.path.clone()))
                .collect();
            let files = ImageFiles::from_paths(paths, opts).classified()?;
            let indices: Vec<usize> = (0..files.len()).collect();
            let scored = self.score(&files, &indices)?;
            let mut rows = scored.rows.into_iter();
            for item in chunk {
                let record = item.and_then(|item| {
                    let row = rows.next().expect("a row per readable item");
                    match row {
                        Ok(top) => Ok(PredictionRecord {
                            input: item.name,
                            top,
                            label: None,
                            packed_path: None,
                        }),
                        Err(message) => Err(ErrorRecord {
                            input: item.name,
                            message,
                        }),
                    }
                });
                self.tally.emit(self.out, &record, |_| false)?;
                self.bar.inc(1);
            }
            if let Some(e) = unreadable {
                return Err(e);
            }
        }
        Ok(())
    }

    /// The labelled images of `--data`, a batch at a time, and their evaluation.
    fn labelled(
        &mut self,
        cli: &Cli,
        data: &OsString,
        opts: train_data::images::ImageOptions,
    ) -> Result<Option<EvaluationRecord>> {
        let model = self.model;
        let source = train_data::data::Source::parse(data, 0)
            .classified()
            .context("--data")?;
        let files = train::infer::labelled_images(&source, opts, model)
            .classified()
            .context("--data")?;
        let classes = model.classes.len();
        let mut evaluation =
            Evaluation::new(classes, model.device, cli.confusion.is_some()).classified()?;
        self.bar.set_length(files.len() as u64);
        let all: Vec<usize> = (0..files.len()).collect();
        for chunk in all.chunks(cli.batch_size as usize) {
            interrupt::check()?;
            let scored = self.score(&files, chunk)?;
            if let Some(logits) = &scored.logits {
                let labels: Vec<i64> = scored
                    .kept
                    .iter()
                    .map(|&r| files.labels[chunk[r]])
                    .collect();
                let y = Tensor::from_slice(&labels).to_device(model.device);
                evaluation.add(logits, &y).classified()?;
            }
            for (row, &index) in scored.rows.into_iter().zip(chunk) {
                let record = labelled_record(&files, index, row)?;
                self.tally.emit(self.out, &record, |_| false)?;
                self.bar.inc(1);
            }
        }
        let Some(figures) = evaluation.figures() else {
            // Every image has its error record: the stream still ends with its summary.
            log::warn!(
                "no evaluation: none of the {} images of --data could be used",
                files.len()
            );
            return Ok(None);
        };
        evaluation_record(cli, data, model, &evaluation, figures).map(Some)
    }

    /// Decodes the samples `indices` of `files` as evaluation prepares them and runs the
    /// usable ones through the model.
    fn score(&self, files: &ImageFiles, indices: &[usize]) -> Result<Scored> {
        let (x, decoded) = files.eval_batch(indices);
        let usable: Vec<usize> = (decoded.iter().enumerate())
            .filter_map(|(i, r)| r.is_ok().then_some(i))
            .collect();
        let mut rows: Vec<Result<Vec<ClassProb>, String>> = (decoded.into_iter())
            .map(|r| {
                r.map(|()| Vec::new())
                    .map_err(|e| error_class::chain_text(&e))
            })
            .collect();
        if usable.is_empty() {
            return Ok(Scored {
                rows,
                logits: None,
                kept: Vec::new(),
            });
        }
        let device = self.model.device;
        let x = if usable.len() == indices.len() {
            x
        } else {
            let at: Vec<i64> = usable.iter().map(|&i| i as i64).collect();
            x.index_select(0, &Tensor::from_slice(&at))
        };
        let logits = self
            .model
            .forward(&x.to_device(device), self.precision)
            .classified()?;
        // Ranked by the logits, as the evaluation's top-k is (probabilities that round to
        // the same float would rank their classes in another order).
        let (_, c) = logits.topk(self.top_k, 1, true, true);
        let p = logits.softmax(1, Kind::Float).gather(1, &c, false);
        let finite =
            Vec::<bool>::try_from(logits.isfinite().all_dim(1, false).to_device(Device::Cpu))?;
        let p = Vec::<f32>::try_from(p.to_device(Device::Cpu).flatten(0, -1))?;
        let c = Vec::<i64>::try_from(c.to_device(Device::Cpu).flatten(0, -1))?;
        let k = self.top_k as usize;
        let mut kept = Vec::new();
        for (j, &row) in usable.iter().enumerate() {
            rows[row] = if finite[j] {
                kept.push(j);
                Ok((0..k)
                    .map(|t| {
                        let index = c[j * k + t] as usize;
                        ClassProb {
                            class: self.model.classes[index].clone(),
                            index,
                            prob: f64::from(p[j * k + t]),
                        }
                    })
                    .collect())
            } else {
                Err("the model's output for it is not finite (NaN or inf)".into())
            };
        }
        let logits = if kept.len() == usable.len() {
            logits
        } else {
            let at: Vec<i64> = kept.iter().map(|&j| j as i64).collect();
            logits.index_select(0, &Tensor::from_slice(&at).to_device(device))
        };
        let kept_rows: Vec<usize> = kept.iter().map(|&j| usable[j]).collect();
        Ok(Scored {
            rows,
            logits: (!kept_rows.is_empty()).then_some(logits),
            kept: kept_rows,
        })
    }
}

cli_common::verify_cli!(Cli);
