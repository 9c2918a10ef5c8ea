//! `ddp-train`: PyTorch DDP's training loop (torchvision ResNets, DistributedSampler, model
//! parallelism) as one Unix tool that each GPU (or CPU rank) runs
//! once. The loop itself is `train::trainer`; this is the command line, the records and the
//! error messages.

mod logs;
mod report;
mod rules;
mod snippet;

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use cli_common::ResultExt as _;
use cli_common::written::{Written, written};
use cli_common::{CommonArgs, JsonlOut, Outcome, Tool};
use collectives::{Communicator, DistArgs};
use device::{DeviceArg, Env};
use train::optim::Schedule;
use train::pipeline::Split;
use train::resnet::{Arch, Stem};
use train::trainer::{Config, Precision};
use train_data::data::Source;
use train_data::images::Transform;

use rules::{config, requeue_job, stage_devices, workers};

/// Data-parallel ResNet training on CIFAR binaries, image folders, RecordIO or webdataset shards, one process per GPU (or per pipeline of GPUs), as PyTorch DDP does it (checkpoints, resume, records).
///
/// Run one process per rank (torchrun --no-python, srun, GNU parallel with --rank, or one
/// process for world size 1). --batch-size is the global batch, split evenly over the ranks.
/// Parameters and buffers start from rank 0's, gradients are averaged in 25 MiB buckets, the
/// sampler is PyTorch's DistributedSampler. Checkpoints load into torchvision's ResNets.
#[derive(Debug, Parser)]
#[command(name = "ddp-train", version, max_term_width = 100)]
pub struct Cli {
    /// cifar100:DIR (train.bin, test.bin), cifar10:DIR (data_batch_*.bin, test_batch.bin),
    /// imagefolder:DIR (a tree of images by class, as torchvision's ImageFolder: DIR/train and
    /// DIR/val, or --val-data), recordio:PREFIX (MXNet's PREFIX.rec + PREFIX.idx, with
    /// --val-data PREFIX2), wds:PATTERN (webdataset tar shards, e.g.
    /// 'shards/{00000..00099}.tar': KEY.jpg|png|webp with KEY.cls or a KEY.json `label`; with
    /// --val-data PATTERN2), or synthetic[:N[:SIZE]] (N learnable SIZE×SIZE images of 100
    /// classes; 32 unless given). Nothing is downloaded.
    #[arg(
        long,
        value_name = "SOURCE",
        required_unless_present = "print_eval_snippet"
    )]
    pub data: Option<OsString>,

    /// torchvision's ResNet (resnet18, resnet34, resnet50, resnet101), with its state_dict
    /// keys; or torchscript:FILE, your own model as torch.jit.save wrote it (scripted or
    /// traced): it takes the float batch [N, 3, H, W] and returns logits [N, classes], and its
    /// parameters and buffers are trained and saved under its state_dict names (--stem does
    /// not apply; --stages and --sync-bn need a ResNet).
    #[arg(long, value_name = "MODEL", default_value = "resnet18", value_parser = clap::builder::TypedValueParser::try_map(clap::builder::OsStringValueParser::new(), model_arg))]
    pub model: Written<ModelArg>,

    /// The ResNet's first layers [default: imagenet].
    #[arg(long, value_name = "STEM", value_enum)]
    pub stem: Option<Stem>,

    /// Epochs to train.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = at_least_one)]
    pub epochs: usize,

    /// Global batch size (all ranks together; must divide by the world size).
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = at_least_one)]
    pub batch_size: usize,

    /// Micro-batches per rank and step (gradient accumulation; interleaved, so one rank with
    /// --accum k computes what k ranks do).
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = at_least_one)]
    pub accum: usize,

    /// Elastic runs: the run's rank count V, whatever the processes. The epoch's order is
    /// DistributedSampler's for V ranks and each of the W processes (W must divide V) computes
    /// V/W of them as micro-batches, each as that rank would (its augmentation and dropout
    /// draws, rank 0's BatchNorm statistics), their gradients summed in rank order: a run
    /// gives the same weights on 1, 2, ... or V processes, and any checkpoint, mid-epoch
    /// included, resumes on another W that divides V. Costs an all-gather of V gradients a step
    /// instead of an all-reduce; not with --accum, stages, --sync-bn, CUDA graphs or wds shards.
    #[arg(long, value_name = "V", value_parser = at_least_one)]
    pub virtual_ranks: Option<usize>,

    /// Model parallelism (PyTorch's model-parallel ResNet, pipelined): cut the model into S pipeline stages, each on its own
    /// device of this process (--stage-devices). Composes with data parallelism: each stage's
    /// gradients are averaged over the ranks. Default: 1, or the number of --stage-devices.
    #[arg(long, value_name = "S")]
    pub stages: Option<usize>,

    /// Where the stages start: `balanced` (the split whose most expensive stage has the fewest
    /// forward FLOPs at the data's image size), or S-1 comma-separated units each later stage
    /// starts at: a layer (layer3: the split of PyTorch's model-parallel tutorial, conv1…layer2 | layer3…fc), a block
    /// (layer3.2), or fc.
    #[arg(long, value_name = "balanced|UNIT,...", default_value = "balanced", value_parser = written(split))]
    pub split_at: Written<Split>,

    /// One device per stage, comma-separated (cuda:0,cuda:1; cpu,cpu). Default: S consecutive
    /// GPUs from LOCAL_RANK×S (from N with --device cuda:N), so `torchrun --nproc_per_node 2
    /// ddp-train --stages 2` on 4 GPUs runs 2 pipelines of 2 stages; all cpu without CUDA.
    #[arg(long, value_name = "LIST", value_parser = written(device_list))]
    pub stage_devices: Option<Written<Vec<DeviceArg>>>,

    /// With --stages: micro-batches per rank and step, pushed through the stages in GPipe order
    /// (all forwards, then all backwards) so that stage s+1 works on one while stage s works on
    /// the next. They split the rank's batch exactly as --accum M does (and compute the same
    /// step). 1 is the naive split: one stage works at a time.
    #[arg(long, value_name = "M")]
    pub micro_batches: Option<usize>,

    /// The optimiser, as torch.optim computes it.
    #[arg(long, value_name = "NAME", value_enum, default_value_t = OptimizerKind::Sgd)]
    pub optimizer: OptimizerKind,

    /// Peak learning rate (0 to float32's largest, as torch.optim checks it).
    #[arg(long, value_name = "LR", default_value_t = 0.1, value_parser = non_negative)]
    pub lr: f64,

    /// SGD momentum (0 to float32's largest).
    #[arg(long, value_name = "M", default_value_t = 0.9, value_parser = non_negative)]
    pub momentum: f64,

    /// Nesterov momentum (SGD).
    #[arg(long)]
    pub nesterov: bool,

    /// Weight decay (0 to float32's largest).
    #[arg(long, value_name = "WD", default_value_t = 5e-4, value_parser = non_negative)]
    pub weight_decay: f64,

    /// constant, step:EVERY:GAMMA (×GAMMA every EVERY epochs), or cosine[:WARMUP] (linear
    /// warm-up over WARMUP epochs, then cosine to 0).
    #[arg(long, value_name = "SCHEDULE", default_value = "cosine:1", value_parser = written(parse_schedule))]
    pub schedule: Written<Schedule>,

    /// Label smoothing of the cross-entropy loss, 0 to 1 (as nn.CrossEntropyLoss takes it).
    #[arg(long, value_name = "EPS", default_value_t = 0.0, value_parser = fraction)]
    pub label_smoothing: f64,

    /// Random crop (padding 4) and horizontal flip, on the device (CIFAR and synthetic data;
    /// image folders take --transform).
    #[arg(long)]
    pub augment: bool,

    /// The validation images: for imagefolder:DIR a tree of the same class folders (default:
    /// DIR/val, when DIR holds train and val); for recordio:PREFIX another prefix; for
    /// wds:PATTERN another pattern.
    #[arg(long, value_name = "DIR|PREFIX|PATTERN")]
    pub val_data: Option<PathBuf>,

    /// Image folders: imagenet (training RandomResizedCrop + random flip, evaluation Resize to
    /// SIZE·256/224 + CenterCrop, as torchvision's reference scripts, with Pillow's BILINEAR),
    /// flip (the images as they are, SIZE×SIZE, flipped at random in training: the face-set
    /// recipe) or none [default: imagenet].
    #[arg(long, value_name = "T", value_enum)]
    pub transform: Option<Transform>,

    /// Image folders: side of the square images the model sees [default: 224].
    #[arg(long, value_name = "PIXELS", value_parser = clap::value_parser!(u32).range(8..=4096))]
    pub image_size: Option<u32>,

    /// Image folders: Normalize's statistics after ToTensor: imagenet (torchvision's ImageNet
    /// mean and std), 0.5 (mean and std 0.5), MEAN,STD, or R,G,B,R,G,B [default: imagenet].
    #[arg(long, value_name = "STATS", value_parser = written(normalize_stats))]
    pub normalize: Option<Written<Stats>>,

    /// Image folders: decoding threads per rank [default: --threads, else SLURM_CPUS_PER_TASK,
    /// else the CPUs divided by the ranks on this node, as PyTorch scripts divide num_workers].
    /// With wds shards, each rank's shards are also split over N streams (webdataset's
    /// split_by_worker), so the sample order depends on it: every rank must have the same N.
    /// At most 256.
    #[arg(long, value_name = "N", value_parser = worker_count)]
    pub workers: Option<usize>,

    /// This rank's CPU threads (libtorch's, and the default of --workers, which does not take
    /// OMP_NUM_THREADS: torchrun sets it to 1 for libtorch's sake).
    #[command(flatten)]
    pub cpu: cli_common::threads::ThreadArgs,

    /// recordio and wds data: the number of classes (labels 0 to N-1; a label past them is an
    /// error naming its sample). Without it the classes are 0 to the largest label, which must
    /// be under 100000: a label sizes the model's last layer.
    #[arg(long, value_name = "N", value_parser = num_classes)]
    pub num_classes: Option<usize>,

    /// wds shards: samples in each stream's shuffle buffer (webdataset's shuffle(N)); shards are
    /// shuffled too, per epoch.
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub shuffle_buffer: Option<usize>,

    /// Write the first N batches this rank's loader gives (epoch 0) to --dump as .npz and exit
    /// without training: `images` (float32 NCHW, as the model receives them), `labels`,
    /// `indices` (in the split) and, for image files, `paths` (uint8: the paths' bytes, each
    /// ending in a newline); for data pack wrote, `packed_paths` (uint8: each sample's file as
    /// pack stored it, relative to the folder packed, its bytes ending in a NUL byte; empty for
    /// a sample without one). For comparing the data stage with torchvision, or looking at the
    /// augmentations.
    #[arg(long, value_name = "N", requires = "dump")]
    pub dump_batches: Option<usize>,

    /// Where --dump-batches writes (written atomically).
    #[arg(long, value_name = "FILE.npz", requires = "dump_batches")]
    pub dump: Option<PathBuf>,

    /// Which split --dump-batches takes: train (as training draws it) or val.
    #[arg(long, value_name = "SPLIT", value_enum, default_value_t = DumpSplit::Train)]
    pub split: DumpSplit,

    /// Image folders: steps whose batches are decoded ahead, while the steps before them run
    /// (0: each batch when its step asks for it).
    #[arg(long, value_name = "STEPS", default_value_t = 2)]
    pub prefetch: usize,

    /// Image folders: distinct files that may fail to decode in a run (each replaced by the next
    /// sample and counted, each time it is met, in the epoch record's bad_inputs) before it stops
    /// with exit 1. A file met again in a later epoch is still one file.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub max_bad_inputs: usize,

    /// Image folders, RecordIO and wds shards: refuse images with more pixels than this, read
    /// from their header before decoding (decompression bombs), as a bad input: twice Pillow's
    /// Image.MAX_IMAGE_PIXELS, where Pillow refuses [default: 178956970]; at most 4294967296
    /// (65536x65536, 12 GiB decoded).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1 << 32))]
    pub max_pixels: Option<u64>,

    /// Keep the data order (no per-epoch shuffle).
    #[arg(long)]
    pub no_shuffle: bool,

    /// Train full batches only (DataLoader's and DistributedSampler's drop_last=True): the
    /// samples that do not divide among the ranks are dropped instead of repeating the first
    /// ones, and an epoch's last batch the samples do not fill is left out. Without it an epoch
    /// trains every image, its last step the smaller batch left (as PyTorch's DataLoader by
    /// default; a last batch of one image per rank is left out, as BatchNorm cannot train on
    /// one). Each epoch record counts the images left out (left_out; shuffled, a different set
    /// each epoch); evaluation sees every image (val_images) unless --max-val-steps limits it.
    #[arg(long)]
    pub drop_last: bool,

    /// Seed of the model's initialisation, the sampler's shuffling and the augmentation draws.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: i64,

    /// --device, and --precision: fp32, tf32, fp16 (autocast with loss scaling) or bf16
    /// (autocast; the fastest).
    #[command(flatten)]
    pub gpu: device::GpuArgs,

    /// --cuda-graphs: several times faster for small batches (the eager loop is bound by kernel
    /// launches).
    #[command(flatten)]
    pub graphs: device::CudaGraphsArg,

    /// Only deterministic cuDNN algorithms, no benchmarking: a CUDA run repeats exactly (slower).
    #[arg(long)]
    pub deterministic: bool,

    /// channels_last (NHWC) weights and inputs, cuDNN's fast layout. auto: on with CUDA.
    #[arg(long, value_name = "auto|on|off", default_value = "auto")]
    pub channels_last: device::Switch,

    /// PyTorch's fused SGD/AdamW kernels (`fused=True`: one pass over the weights instead of
    /// four or nine; the same step to an ulp and the same checkpointed state) instead of the
    /// single-tensor paths. auto: on with CUDA.
    #[arg(long, value_name = "auto|on|off", default_value = "auto")]
    pub fused_optim: device::Switch,

    /// Rank 0 writes last.safetensors (+ last.train.safetensors) every epoch and best.safetensors
    /// when validation improves.
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,

    /// Print the Python (torch, torchvision, safetensors) that builds this checkpoint's model,
    /// loads its weights and prepares an image as its evaluation did (normalisation, size, class
    /// names, from the checkpoint's metadata), then exit. Plain text, as --help.
    #[arg(long, value_name = "CKPT")]
    pub print_eval_snippet: Option<PathBuf>,

    /// Continue from --checkpoint-dir's last checkpoint (a fresh start if there is none). A
    /// checkpoint written inside an epoch goes on with the step after it, exactly as the
    /// uninterrupted run would have; it needs the same ranks, --batch-size, --seed and
    /// --max-steps.
    #[arg(long, requires = "checkpoint_dir")]
    pub resume: bool,

    /// Also write the checkpoint inside epochs, after every N steps (counted over the whole run),
    /// so that a killed or preempted run loses at most N steps.
    #[arg(long, value_name = "N", value_parser = at_least_one, requires = "checkpoint_dir")]
    pub checkpoint_every: Option<usize>,

    /// The signal that asks for a checkpoint now (USR1, USR2, HUP, ALRM, or none): every rank
    /// finishes its step, rank 0 writes the checkpoint at that step, and the run stops with exit
    /// 75 (Slurm: #SBATCH --signal=USR1@120 before the time limit, scancel --signal=USR1). Without
    /// --checkpoint-dir it is ignored with a warning.
    #[arg(long, value_name = "SIGNAL", default_value = "USR1", value_parser = written(signal))]
    pub checkpoint_signal: Written<Option<i32>>,

    /// After the checkpoint signal's checkpoint, rank 0 runs `scontrol requeue $SLURM_JOB_ID`, so
    /// that the job goes back into the queue (its script runs again: give it --resume).
    #[arg(long, requires = "checkpoint_dir")]
    pub requeue_on_signal: bool,

    /// At most this many steps per epoch (benchmarks, smoke tests).
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub max_steps: Option<usize>,

    /// Evaluate at most this many batches per rank (benchmarks, smoke tests): each rank's first
    /// ones of its share of the validation images; the epoch record's val_images counts them.
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub max_val_steps: Option<usize>,

    /// Start from these weights (safetensors with torchvision's keys, e.g. a torchvision model's
    /// state_dict saved with safetensors.torch.save_file, or a checkpoint of ours).
    #[arg(long, value_name = "FILE")]
    pub init: Option<PathBuf>,

    /// Load what of --init matches the model and keep the rest from the initialisation (for
    /// fine-tuning from a partial state_dict), naming what was not loaded; without it --init
    /// must hold every tensor of the model and nothing else, as PyTorch's strict
    /// load_state_dict.
    #[arg(long, requires = "init")]
    pub init_non_strict: bool,

    /// Keep each rank's BatchNorm statistics (DDP's broadcast_buffers=False).
    #[arg(long)]
    pub no_broadcast_buffers: bool,

    /// SyncBatchNorm: normalise training batches with the statistics of the global batch (all
    /// ranks' shares together; one all-reduce per BatchNorm in forward and one in backward), as
    /// nn.SyncBatchNorm.convert_sync_batchnorm does. For small per-rank batches. With one rank it
    /// is plain BatchNorm.
    #[arg(long)]
    pub sync_bn: bool,

    /// Print records from every rank, not only rank 0.
    #[arg(long)]
    pub all_ranks: bool,

    /// Rank 0 writes TensorBoard event files into DIR: every --log-every steps (and at each
    /// epoch's last step) step/loss,
    /// step/top1 (rank 0's samples since the last), step/lr, step/images_per_s (all ranks),
    /// step/epoch and step/loss_scale at the run's step; every epoch epoch/train_loss,
    /// epoch/train_top1, epoch/val_loss, epoch/val_top1, epoch/lr, epoch/images_per_s,
    /// epoch/seconds at the epoch's number; and the hparams dashboard's session with this run's
    /// training flags (give each run its own DIR under one parent, then `tensorboard --logdir
    /// PARENT` compares them).
    #[arg(long, value_name = "DIR")]
    pub tensorboard: Option<PathBuf>,

    /// Rank 0 writes a CSV of the epochs to FILE (metrics.csv, say): a header, then per epoch
    /// epoch, global_step, train_loss, train_top1, val_loss, val_top1, lr, loss_scale,
    /// images_per_s, train_images_per_s, seconds, step_ms, skipped_steps, bad_inputs, best,
    /// left_out, val_images. The
    /// file is rewritten whole after each epoch; a resumed run keeps the rows of the epochs
    /// before it.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,

    /// The steps between --tensorboard's per-step figures (reading them waits for the GPU once).
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = at_least_one)]
    pub log_every: usize,

    #[command(flatten)]
    pub dist: DistArgs,

    #[command(flatten)]
    pub common: CommonArgs,
}

/// `--optimizer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OptimizerKind {
    /// SGD (--momentum, --nesterov, --weight-decay).
    Sgd,
    /// AdamW (betas 0.9, 0.999, eps 1e-8, --weight-decay).
    Adamw,
}

/// `--split`: which split --dump-batches takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DumpSplit {
    /// As training draws it.
    Train,
    /// The validation split.
    Val,
}

impl std::fmt::Display for DumpSplit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DumpSplit::Train => "train",
            DumpSplit::Val => "val",
        })
    }
}

/// `--normalize`: Normalize's per-channel statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

/// A value of a flag as its command line names it (`resnet18`, `adamw`).
fn value_name<T: clap::ValueEnum>(v: &T) -> String {
    v.to_possible_value()
        .map_or_else(String::new, |p| p.get_name().to_string())
}

/// imagenet, 0.5, MEAN,STD or R,G,B,R,G,B; finite, every standard deviation above 0.
fn normalize_stats(s: &str) -> Result<Stats, String> {
    use train_data::images::{IMAGENET_MEAN, IMAGENET_STD};
    let (mean, std) = match s {
        "imagenet" => (IMAGENET_MEAN, IMAGENET_STD),
        "0.5" => ([0.5; 3], [0.5; 3]),
        other => {
            let v: Vec<f32> = other
                .split(',')
                .map(|x| x.trim().parse::<f32>())
                .collect::<std::result::Result<_, _>>()
                .ok()
                .filter(|v: &Vec<f32>| v.iter().all(|x| x.is_finite()))
                .ok_or("imagenet, 0.5, MEAN,STD or R,G,B,R,G,B")?;
            match v[..] {
                [m, s] => ([m; 3], [s; 3]),
                [r, g, b, sr, sg, sb] => ([r, g, b], [sr, sg, sb]),
                _ => return Err("two numbers (MEAN,STD) or six (R,G,B,R,G,B)".into()),
            }
        }
    };
    if std.iter().any(|s| *s <= 0.0) {
        return Err("a standard deviation must be above 0".into());
    }
    Ok(Stats { mean, std })
}

/// A count of at least 1 (clap's message names the flag and the value).
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        Ok(_) => Err("must be at least 1".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// 1 to [`train_data::images::MAX_CLASSES`].
fn num_classes(s: &str) -> Result<usize, String> {
    let n = at_least_one(s)?;
    if n > train_data::images::MAX_CLASSES {
        return Err(format!("at most {}", train_data::images::MAX_CLASSES));
    }
    Ok(n)
}

/// `--workers`: 1 to 256 (each a thread with a batch of its own in memory).
fn worker_count(s: &str) -> Result<usize, String> {
    match at_least_one(s)? {
        n if n <= 256 => Ok(n),
        _ => Err("at most 256".into()),
    }
}

/// `--model`: a ResNet, or `torchscript:FILE`.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelArg {
    ResNet(Arch),
    TorchScript(std::path::PathBuf),
}

/// `--model` as written: a file name that is not UTF-8 is refused by name (a checkpoint names
/// its model file as text), where clap would only say that some argument was not UTF-8.
fn model_arg(s: OsString) -> Result<Written<ModelArg>, String> {
    let text = s.to_str().ok_or_else(|| {
        format!(
            "{s:?} is not UTF-8: a checkpoint names its model file as text; give the file a \
             UTF-8 name (or a symbolic link with one)"
        )
    })?;
    written(parse_model)(text)
}

fn parse_model(s: &str) -> Result<ModelArg, String> {
    match s.strip_prefix("torchscript:") {
        Some("") => Err("torchscript:FILE needs the model file".into()),
        Some(file) => Ok(ModelArg::TorchScript(file.into())),
        None => s.parse::<Arch>().map(ModelArg::ResNet).map_err(|_| {
            format!("resnet18, resnet34, resnet50, resnet101 or torchscript:FILE, not `{s}`")
        }),
    }
}

/// A number from 0 to float32's largest (NaN, infinities, negatives and numbers a float32
/// cannot hold are refused before anything starts: the optimiser computes with float32).
fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=f32::MAX as f64).contains(&v) => Ok(v),
        Ok(_) => Err(format!(
            "must be a number from 0 to {:e} (the largest float32: the optimiser computes in \
             float32)",
            f32::MAX
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// A number from 0 to 1.
fn fraction(s: &str) -> Result<f64, String> {
    match non_negative(s) {
        Ok(v) if v <= 1.0 => Ok(v),
        Ok(_) => Err("must be between 0 and 1".into()),
        e => e,
    }
}

impl Tool for Cli {
    const RECORDS: &'static str = r#"Reads no input. Rank 0 prints one record per epoch:
.PP
.nf
{"type":"epoch","epoch":3,"epochs":10,"train_loss":1.23,"train_top1":61.2,"val_loss":1.4,"val_top1":58.9,
 "images_per_s":812.5,"train_images_per_s":830.1,"seconds":61.5,"lr":0.0905,"steps":390,"skipped_steps":0,"peak_gpu_mib":2210,
 "step_ms":77.1,"checkpoint":"/abs/ck/last.safetensors","best":true,"left_out":80,"val_images":10000,"rank":0,"world_size":2}
.fi
.PP
With --stages, the record also lists the stages (devices, first and last unit, parameters, forward GFLOPs per image, memory in use):
.PP
.nf
 "stages":[{"stage":0,"device":"cuda:0","first":"conv1","last":"layer2.3","params":1444928,"gflops":0.44,"peak_gpu_mib":3010},
           {"stage":1,"device":"cuda:1","first":"layer3.0","last":"fc","params":22063464,"gflops":0.36,"peak_gpu_mib":2210}]
.fi
.PP
then {"type":"summary","ok":EPOCHS_RUN,"skipped":EPOCHS_ALREADY_DONE,"failed":0,"world_size":N,"elapsed_ms":N}.
.PP
A checkpoint written inside an epoch (--checkpoint-every, or the checkpoint signal) is a record of its own:
.PP
.nf
{"type":"checkpoint","epoch":3,"step":500,"steps":1251,"checkpoint":"/abs/ck/last.safetensors","reason":"every|signal","rank":0,"world_size":8}
.fi
.PP
After the checkpoint signal's checkpoint every rank exits 75 (sysexits' EX_TEMPFAIL): the run is not finished; run it again with --resume.
.PP
Accuracies are percent; losses are means over all ranks' images; validation counts every test image once (each rank takes images rank, rank+world, ...: val_images). An epoch's last step trains the smaller batch its samples leave (all of them unless --drop-last): left_out counts the training images the epoch did not train on (with --drop-last, a last batch the samples do not fill). loss_scale appears with --precision fp16."#;
    const EXAMPLES: &'static [(&'static str, &'static str)] = &[
        (
            "Four GPUs under torchrun:",
            "torchrun --no-python --standalone --nproc_per_node 4 ddp-train --data cifar100:cifar-100-binary --epochs 200 --augment --checkpoint-dir ck",
        ),
        (
            "Four GPUs with GNU parallel:",
            "seq 0 3 | parallel -j4 ddp-train --rank {} --world-size 4 --master-port 29511 --data cifar100:cifar-100-binary",
        ),
        (
            "One GPU at full speed (bf16, channels_last, the step replayed as a CUDA graph):",
            "ddp-train --data cifar100:cifar-100-binary --batch-size 512 --precision bf16 --augment --checkpoint-dir ck",
        ),
        (
            "PyTorch's model-parallel ResNet-50, cut at layer3 over two GPUs, 8 micro-batches pipelined:",
            "ddp-train --data synthetic:8192:128 --model resnet50 --stage-devices cuda:0,cuda:1 --split-at layer3 --micro-batches 8 --precision fp32",
        ),
        (
            "Two pipelines of two stages on four GPUs (data parallel over the pipelines):",
            "torchrun --no-python --standalone --nproc_per_node 2 ddp-train --data cifar100:cifar-100-binary --stages 2 --micro-batches 4",
        ),
        (
            "Resume after a crash:",
            "ddp-train --data cifar100:cifar-100-binary --checkpoint-dir ck --resume",
        ),
        (
            "Load the result in PyTorch (the model, its classes and evaluation's transform, from the checkpoint):",
            "ddp-train --print-eval-snippet ck/best.safetensors > load.py && python load.py",
        ),
    ];

    const ENVIRONMENT: &'static [cli_common::EnvVars] =
        &[collectives::ENVIRONMENT, device::ENVIRONMENT];
}

/// `--checkpoint-signal`: the signal's number (`None` for `none`).
fn signal(s: &str) -> Result<Option<i32>, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    match cli_common::interrupt::checkpoint_signal_by_name(s) {
        Some(n) => Ok(Some(n)),
        None => Err(
            "USR1, USR2, HUP, ALRM or none (SIGINT and SIGTERM stop the run at once, \
             keeping the last checkpoint)"
                .into(),
        ),
    }
}

/// `--split-at`: `balanced`, or the units each later stage starts at.
fn split(s: &str) -> Result<Split, String> {
    match s.parse::<Split>() {
        Ok(Split::At(units)) if units.iter().any(String::is_empty) => {
            Err("balanced, or comma-separated units (layer3, layer3.2, fc)".into())
        }
        r => r.map_err(|e| e.to_string()),
    }
}

/// `--stage-devices`: cpu, cuda or cuda:N, comma-separated.
fn device_list(s: &str) -> Result<Vec<DeviceArg>, String> {
    (s.split(','))
        .map(|d| match DeviceArg::parse(d) {
            Ok(DeviceArg::Auto) | Err(_) => Err(format!("`{d}` is not cpu, cuda or cuda:N")),
            Ok(d) => Ok(d),
        })
        .collect()
}

/// How long `scontrol requeue` may take before the run ends without it.
const REQUEUE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);
/// How long scontrol requeue may still take to exit once SIGTERM came (the requeue's own).
const REQUEUE_SIGNAL_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// `scontrol requeue JOB`, within [`REQUEUE_DEADLINE`]; what went wrong, if anything.
fn requeue(job: &str) -> Result<()> {
    let mut child = std::process::Command::new("scontrol")
        .args(["requeue", job])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("running scontrol requeue")?;
    let deadline = Instant::now() + REQUEUE_DEADLINE;
    let mut interrupted: Option<Instant> = None;
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("scontrol requeue {job} failed ({status})");
            }
            return Ok(());
        }
        // SIGINT/SIGTERM end the wait: the checkpoint stands, the job is not requeued. The
        // requeue itself ends the job's steps with SIGTERM, which can come before scontrol is
        // seen to exit: it has REQUEUE_SIGNAL_GRACE to.
        if cli_common::interrupt::requested() {
            let since = *interrupted.get_or_insert_with(Instant::now);
            if since.elapsed() >= REQUEUE_SIGNAL_GRACE {
                let _ = child.kill();
                let _ = child.wait();
                return Err(anyhow::Error::new(cli_common::Interrupted))
                    .with_context(|| format!("waiting for scontrol requeue {job}"));
            }
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "scontrol requeue {job} did not finish within {} s",
                REQUEUE_DEADLINE.as_secs()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// --dump-batches: this rank's first batches to an .npz (rank and world from the flags or the
/// launcher's variables; no rank meets another).
fn dump(cli: &Cli, cfg: &Config, n: usize, path: &std::path::Path) -> Result<Outcome> {
    let opts = cli.dist.options();
    let plan = opts.plan().classified()?;
    // libtorch's failures (out of memory among them) are panics: an error here as in training.
    let d = cli_common::panics::catch_torch(|| {
        train::trainer::dump_batches(
            cfg,
            plan.rank,
            plan.world_size,
            n,
            cli.split == DumpSplit::Train,
        )
    })?
    .classified()?;
    let paths: Vec<u8> = d
        .paths
        .iter()
        .flat_map(|p| {
            use std::os::unix::ffi::OsStrExt;
            let mut b = p.as_os_str().as_bytes().to_vec();
            b.push(b'\n');
            b
        })
        .collect();
    let mut named = vec![
        ("images", d.images),
        ("labels", d.labels),
        ("indices", tch::Tensor::from_slice(&d.indices)),
    ];
    if !paths.is_empty() {
        named.push(("paths", tch::Tensor::from_slice(&paths)));
    }
    // NUL-terminated: any file name, a line break in it too, comes back whole.
    if d.packed_paths.iter().any(Option::is_some) {
        use std::os::unix::ffi::OsStrExt;
        let packed: Vec<u8> = (d.packed_paths.iter())
            .flat_map(|p| {
                let p = p.as_ref().map_or(&[][..], |p| p.as_os_str().as_bytes());
                p.iter().copied().chain([0])
            })
            .collect();
        named.push(("packed_paths", tch::Tensor::from_slice(&packed)));
    }
    // Written whole or not at all: a temp file beside it (removed if the write fails), renamed.
    let tmp = cli_common::atomic::temp_beside(path)?;
    tch::Tensor::write_npz(&named, tmp.path())
        .with_context(|| format!("writing {}", path.display()))?;
    cli_common::atomic::persist(tmp, path)?;
    if !cli.common.quiet {
        eprintln!(
            "ddp-train: {} samples of the {} split decoded in {:.3} s ({:.1} images/s), written to {}",
            d.indices.len(),
            cli.split,
            d.seconds,
            d.indices.len() as f64 / d.seconds.max(1e-9),
            path.display()
        );
    }
    Ok(Outcome::Ok)
}

/// The flags every rank must share, as (flag, value): all that decides what is trained.
fn training_flags(cli: &Cli, data: &Source) -> Vec<(&'static str, String)> {
    let mut flags = model_flags(cli);
    flags.extend(data_flags(cli, data));
    flags.extend(run_flags(cli));
    // Shards are split over each rank's streams: every rank must split alike.
    if matches!(data, Source::Shards { .. }) {
        flags.push(("--workers", workers(cli).to_string()));
        flags.push(("--shuffle-buffer", format!("{:?}", cli.shuffle_buffer)));
    }
    flags
}

/// A flag's path, exact for any bytes: a name that is not UTF-8 is compared (and shown)
/// escaped.
fn os_flag(s: &OsStr) -> String {
    s.to_str().map_or_else(|| format!("{s:?}"), str::to_string)
}

/// A flag's optional value, "(none)" when not given.
fn or_none<T: ToString>(v: Option<T>) -> String {
    v.map_or("(none)".to_string(), |v| v.to_string())
}

/// The training flags of the data, model and optimiser.
fn model_flags(cli: &Cli) -> Vec<(&'static str, String)> {
    vec![
        ("--data", os_flag(data_arg(cli))),
        ("--model", cli.model.text.clone()),
        ("--stem", value_name(&cli.stem.unwrap_or(Stem::ImageNet))),
        ("--epochs", cli.epochs.to_string()),
        ("--batch-size", cli.batch_size.to_string()),
        ("--accum", cli.accum.to_string()),
        ("--virtual-ranks", or_none(cli.virtual_ranks)),
        ("--stages", format!("{:?}", cli.stages)),
        ("--split-at", cli.split_at.text.clone()),
        ("--micro-batches", format!("{:?}", cli.micro_batches)),
        ("--optimizer", value_name(&cli.optimizer)),
        ("--lr", cli.lr.to_string()),
        ("--momentum", cli.momentum.to_string()),
        ("--nesterov", cli.nesterov.to_string()),
        ("--weight-decay", cli.weight_decay.to_string()),
        ("--schedule", cli.schedule.text.clone()),
        ("--label-smoothing", cli.label_smoothing.to_string()),
        (
            "--val-data",
            or_none(cli.val_data.as_ref().map(|p| os_flag(p.as_os_str()))),
        ),
    ]
}

/// The training flags of how images are read and drawn: the values in effect (an image
/// source's defaults by name, "(none)" where the flag does not apply: decoded data).
fn data_flags(cli: &Cli, data: &Source) -> Vec<(&'static str, String)> {
    let files = data.is_files().then_some(());
    vec![
        (
            "--transform",
            or_none(files.map(|_| value_name(&cli.transform.unwrap_or(Transform::Imagenet)))),
        ),
        (
            "--image-size",
            or_none(files.map(|_| cli.image_size.unwrap_or(224))),
        ),
        (
            "--normalize",
            or_none(files.map(|_| {
                cli.normalize
                    .as_ref()
                    .map_or("imagenet".to_string(), |n| n.text.clone())
            })),
        ),
        ("--max-bad-inputs", cli.max_bad_inputs.to_string()),
        ("--max-pixels", or_none(files.and(cli.max_pixels))),
        ("--num-classes", format!("{:?}", cli.num_classes)),
        ("--augment", cli.augment.to_string()),
        ("--no-shuffle", cli.no_shuffle.to_string()),
        ("--drop-last", cli.drop_last.to_string()),
        ("--seed", cli.seed.to_string()),
    ]
}

/// The training flags of how the steps run, checkpoints and where the run starts.
fn run_flags(cli: &Cli) -> Vec<(&'static str, String)> {
    vec![
        ("--precision", cli.gpu.precision.name().to_string()),
        ("--cuda-graphs", format!("{:?}", cli.graphs.cuda_graphs)),
        ("--deterministic", cli.deterministic.to_string()),
        ("--channels-last", format!("{:?}", cli.channels_last)),
        ("--fused-optim", format!("{:?}", cli.fused_optim)),
        ("--resume", cli.resume.to_string()),
        ("--checkpoint-every", format!("{:?}", cli.checkpoint_every)),
        (
            "--checkpoint-signal",
            cli.checkpoint_signal.value.map_or("none".to_string(), |n| {
                cli_common::interrupt::checkpoint_signal_name(n)
            }),
        ),
        ("--max-steps", or_none(cli.max_steps)),
        ("--max-val-steps", or_none(cli.max_val_steps)),
        (
            "--init",
            or_none(cli.init.as_ref().map(|p| os_flag(p.as_os_str()))),
        ),
        (
            "--no-broadcast-buffers",
            cli.no_broadcast_buffers.to_string(),
        ),
        ("--sync-bn", cli.sync_bn.to_string()),
    ]
}

/// Every rank compares its training flags with every other rank's before training: ranks
/// started with different flags would otherwise train silently on a mixed configuration.
fn check_same_flags(comm: &mut Communicator, flags: &[(&'static str, String)]) -> Result<()> {
    if comm.world_size() == 1 {
        return Ok(());
    }
    let text: String = flags.iter().map(|(k, v)| format!("{k}\t{v}\n")).collect();
    let all = comm
        .all_gather_text(&text)
        .context("comparing the ranks' flags")?;
    for (r, theirs) in all.iter().enumerate() {
        for ((flag, value), line) in flags.iter().zip(theirs.lines()) {
            let other = line.split_once('\t').map_or(line, |(_, v)| v);
            if other != value {
                return cli_common::usage(format!(
                    "{flag} is {value} here but {other} on rank {r}: every rank must be started with the same training flags"
                ));
            }
        }
    }
    Ok(())
}

/// `--schedule`: `constant`, `step:EVERY:GAMMA` (EVERY above 0, GAMMA at least 0),
/// `cosine[:WARMUP]` (WARMUP at least 0); finite numbers.
pub fn parse_schedule(s: &str) -> Result<Schedule, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let num = |i: usize, what: &str, above_zero: bool| -> Result<f64, String> {
        let text = parts.get(i).ok_or_else(|| format!("missing {what}"))?;
        match text.parse::<f64>() {
            Ok(x) if x.is_finite() && (x > 0.0 || (!above_zero && x == 0.0)) => Ok(x),
            _ if above_zero => Err(format!("{what} must be a number above 0, not `{text}`")),
            _ => Err(format!("{what} must be a number at least 0, not `{text}`")),
        }
    };
    let (schedule, used) = match parts[0] {
        "constant" => (Schedule::Constant, 1),
        "step" => {
            let every = num(1, "EVERY", true)?;
            let gamma = num(2, "GAMMA", false)?;
            (Schedule::Step { every, gamma }, 3)
        }
        "cosine" if parts.len() == 1 => (Schedule::Cosine { warmup: 0.0 }, 1),
        "cosine" => (
            Schedule::Cosine {
                warmup: num(1, "WARMUP", false)?,
            },
            2,
        ),
        _ => return Err("constant, step:EVERY:GAMMA or cosine[:WARMUP]".into()),
    };
    if parts.len() > used {
        return Err(format!(
            "`{}` is more than {} takes",
            parts[used..].join(":"),
            parts[0]
        ));
    }
    Ok(schedule)
}

/// `--data` (present unless --print-eval-snippet, which needs none).
fn data_arg(cli: &Cli) -> &OsStr {
    cli.data.as_deref().unwrap_or_default()
}

/// This rank in its group, which was started with the same training `flags`.
fn join(cli: &Cli, flags: &[(&'static str, String)]) -> Result<Communicator> {
    let mut opts = cli.dist.options();
    // SIGINT/SIGTERM end any wait for peers at once (exit 130).
    opts.should_stop = cli_common::interrupt::requested;
    // A rank or world the launcher's variables contradict is a usage error (exit 2).
    let plan = opts.plan().classified()?;
    let rank = plan.rank;
    let mut comm = Communicator::from_plan(plan, &opts, cli.dist.backend)
        .with_context(|| format!("rank {rank}"))?;
    check_same_flags(&mut comm, flags).with_context(|| format!("rank {rank}"))?;
    Ok(comm)
}

pub fn run(cli: Cli, out: &mut JsonlOut) -> Result<Outcome> {
    if let Some(path) = &cli.print_eval_snippet {
        print!("{}", snippet::eval_snippet(path)?);
        return Ok(Outcome::Ok);
    }
    // Flag values are checked before the ranks meet or data is read, as usage errors (exit 2).
    let usage = |e: anyhow::Error| anyhow::Error::new(cli_common::UsageError(format!("{e:#}")));
    let precision = cli.gpu.precision;
    if precision == Precision::Fp32 {
        gpu_runtime::shim::cuda_fp32_strict()?;
    }
    let env = Env::from_process(None);
    let devices = stage_devices(&cli, &env)?;
    let device = devices[0];
    let mut cfg = config(&cli, &devices).map_err(usage)?;
    if let (Some(n), Some(path)) = (cli.dump_batches, &cli.dump) {
        return dump(&cli, &cfg, n, path);
    }
    let requeue_job = requeue_job(&cli, &|k| std::env::var(k).ok()).map_err(usage)?;
    // From here on the checkpoint signal no longer ends the process (it arrives on every rank,
    // possibly before they meet).
    if let Some(signal) = cli.checkpoint_signal.value {
        cli_common::interrupt::install_checkpoint_signal(signal)
            .context("installing the --checkpoint-signal handler")?;
    }
    // On the CPU the thread count is part of the arithmetic: it does not follow the load.
    let threads = match devices.contains(&tch::Device::Cpu) {
        true => cli.cpu.exact_share(),
        false => cli.cpu.share(),
    };
    device::set_cpu_threads(threads.threads);
    let flags = training_flags(&cli, &cfg.data);
    let mut comm = join(&cli, &flags)?;
    let (rank, world) = (comm.rank(), comm.world_size());
    // Ranks started by hand on one host find each other at the rendezvous: they divide its
    // CPUs (libtorch's threads and, unless --workers, the decoding threads; not shards'
    // streams, which decide the order: the ranks compared them already).
    let threads = threads.among_host_ranks(comm.host_size());
    device::set_cpu_threads(threads.threads);
    if cli.workers.is_none() && !matches!(cfg.data, Source::Shards { .. }) {
        cfg.images.workers = cli.cpu.workers().among_host_ranks(comm.host_size()).threads;
    }
    // The checkpoint directory is this run's before anything of it is written (a run refused
    // it wrote its TensorBoard file into the live run's log directory).
    let lock = train::trainer::lock_checkpoint_dir(&cfg, rank).classified()?;
    // Rank 0's logs; the other ranks never wait for their device to read per-step figures.
    let logs = if rank == 0 {
        cfg.log_every = cli.tensorboard.as_ref().map(|_| cli.log_every);
        logs::Logs::open(cli.tensorboard.as_deref(), cli.csv.as_deref(), &flags)?
    } else {
        logs::Logs::default()
    };
    if (rank == 0 || cli.all_ranks) && !cli.common.quiet {
        let engine = comm.engine(device);
        eprintln!(
            "{}",
            report::banner(&cli, &cfg, engine, (rank, world), &threads)
        );
    }
    let mut reporter = report::Reporter {
        cli: &cli,
        cfg: &cfg,
        rank,
        world,
        out,
        logs,
        bar: None,
        ran: 0,
        complete: false,
        started: Instant::now(),
    };
    // libtorch errors in tch's ops are panics (CUDA out of memory among them): caught as typed
    // errors, they are this run's error message and stay off stderr.
    let run = cli_common::panics::catch_torch(|| {
        train::trainer::train_locked(&cfg, &mut comm, lock, |event| reporter.event(event))
    });
    reporter.ended(run, comm, requeue_job.as_deref())
}

cli_common::verify_cli!(Cli);

#[cfg(test)]
mod tests {
    use super::*;

    /// TensorBoard's hparams and the ranks' comparison see the values in effect: an image
    /// folder's default transform, size and statistics by name, the checkpoint signal by name.
    #[test]
    fn training_flags_name_the_values_in_effect() {
        let flags = |args: &[&str], data: &Source| -> std::collections::HashMap<_, _> {
            let cli = Cli::try_parse_from([&["ddp-train", "--data", "x"], args].concat()).unwrap();
            training_flags(&cli, data).into_iter().collect()
        };
        let folder = Source::ImageFolder {
            dir: "photos".into(),
            val: None,
        };
        let f = flags(&[], &folder);
        assert_eq!(f["--transform"], "imagenet");
        assert_eq!(f["--image-size"], "224");
        assert_eq!(f["--normalize"], "imagenet");
        assert_eq!(f["--checkpoint-signal"], "USR1");
        let f = flags(
            &[
                "--transform",
                "flip",
                "--normalize",
                "0.5",
                "--checkpoint-signal",
                "none",
            ],
            &folder,
        );
        assert_eq!(
            (f["--transform"].as_str(), f["--normalize"].as_str()),
            ("flip", "0.5")
        );
        assert_eq!(f["--checkpoint-signal"], "none");
        // Decoded data takes no transform.
        let f = flags(
            &["--checkpoint-signal", "sigusr2"],
            &Source::Cifar10("c".into()),
        );
        assert_eq!(f["--transform"], "(none)");
        assert_eq!(f["--checkpoint-signal"], "USR2");
    }

    #[test]
    fn schedules_parse() {
        assert_eq!(parse_schedule("constant").unwrap(), Schedule::Constant);
        assert_eq!(
            parse_schedule("step:30:0.1").unwrap(),
            Schedule::Step {
                every: 30.0,
                gamma: 0.1
            }
        );
        assert_eq!(
            parse_schedule("cosine").unwrap(),
            Schedule::Cosine { warmup: 0.0 }
        );
        assert_eq!(
            parse_schedule("cosine:5").unwrap(),
            Schedule::Cosine { warmup: 5.0 }
        );
        assert!(parse_schedule("step:30").is_err());
        assert!(parse_schedule("linear").is_err());
        // Numbers that would make the rate NaN, infinite or negative, and extra parts.
        for bad in [
            "step:0:0.1",
            "step:nan:0.1",
            "step:30:-1",
            "cosine:-1",
            "cosine:inf",
            "cosine:1:2",
            "constant:3",
        ] {
            assert!(parse_schedule(bad).is_err(), "{bad}");
        }
        assert_eq!(
            split("layer3,layer4").unwrap(),
            Split::At(vec!["layer3".into(), "layer4".into()])
        );
        assert!(split("layer3,").is_err());
        assert_eq!(signal("none").unwrap(), None);
        assert!(signal("TERM").is_err());
        assert!(device_list("cpu,auto").is_err());
    }
}
