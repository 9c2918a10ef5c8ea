//! The training loop every rank runs, done as PyTorch DDP does it.
//!
//! Per epoch: the sampler's indices for this rank; per step, `--batch-size / world` images,
//! split into `accum` interleaved micro-batches (micro-batch j takes positions j, j+accum, … of
//! the rank's batch, so one rank with `accum = k` computes exactly what k ranks do — BatchNorm
//! statistics included; with [`Config::sync_bn`], k ranks compute what one rank does with the
//! whole batch instead); forward (BN buffers broadcast from rank 0 first), loss / accum,
//! backward; gradients averaged over ranks in buckets; the loss scaler's check; the optimiser.
//! Validation runs on every rank over its share of the test set (no padding, so each image is
//! counted once) and the sums are all-reduced. Rank 0 writes checkpoints, then all ranks meet at
//! a barrier: at each epoch's end, and within epochs every [`Config::checkpoint_every`] steps
//! or when the checkpoint signal comes. The sampler's order is a function of (seed, epoch), the
//! augmentation draws of (seed, epoch, step, rank), and a mid-epoch checkpoint holds the
//! ranks' partial sums beside the model, optimiser and loss scaler, so a run resumed at any
//! step repeats the uninterrupted one exactly on the CPU.
//!
//! An epoch's last step takes what is left of each rank's samples when they do not fill a
//! batch (DataLoader's `drop_last=False`; [`Config::drop_last`] keeps full batches only). With
//! [`Config::virtual_ranks`] V, the sampler is V ranks' and each process computes V / W of them
//! as its micro-batches, their gradients gathered and summed in virtual-rank order
//! ([`step`]'s `virtual_gradients`), so a step computes the same on any number of processes.
//!
//! The parts, each with one job: `setup` (checks, the model's stages and flat buffers), `step`
//! (one optimisation step: micro-batches, gradients, the optimiser, eager or graphed),
//! `epochs` (the loop: batches, steps, evaluation, checkpoints at their times), `resume`
//! (what checkpoints hold and what a resumed run starts from).
//!
//! With a [`Config::pipeline`] the model is cut into stages on several devices (PyTorch's
//! model-parallel example, [`crate::pipeline`]): the step's `accum` micro-batches go forward through
//! every stage, then backward in the same order (GPipe), so the step computes what `accum`
//! micro-batches compute on one device; each stage's gradients are averaged over the ranks in
//! that stage's own buckets.
//!
//! On CUDA ([`Config::cuda_graphs`]) the whole step after the batch is gathered — forward,
//! backward, all-reduce, optimiser — is captured once as a CUDA graph after
//! [`GRAPH_WARMUP_STEPS`] eager steps and replayed ([`gpu_runtime::graph`], whose policy runs
//! the step eagerly from then on, with a warning, if the capture fails); with `--deterministic`
//! the replayed run equals the eager one bit for bit (scripts/gpu-check).

use std::path::PathBuf;
use std::time::Instant;

use collectives::Communicator;
use tch::nn;
use tch::{Device, Kind, Tensor};

use crate::net::Net;
use crate::optim::{Rule, Schedule};
use crate::pipeline::{Pipeline, Stage};
use crate::resnet::{Arch, Stem};
use crate::{Error, Result};
use train_data::data::{Dataset, Source};
use train_data::sampler::DistributedSampler;

mod epochs;
mod resume;
mod setup;
mod step;

use epochs::{Epochs, Fixed};
use resume::restore;
use setup::{Parts, check, out_device, setup};
use step::{Stepper, step_draws};

/// Numeric precision of the forward/backward pass (fp16 and bf16 autocast are CUDA-only; fp16
/// comes with the loss scaler).
pub use device::Precision;
pub use step::dropout_seed;

/// Everything a run is made of.
#[derive(Debug, Clone)]
pub struct Config {
    pub arch: Arch,
    pub stem: Stem,
    /// Train this TorchScript module (a `torch.jit.save` file taking `[N, 3, H, W]` and
    /// returning logits `[N, classes]`) instead of a ResNet: `arch` and `stem` are then unused.
    pub script: Option<PathBuf>,
    pub data: Source,
    /// How image files are prepared (image-folder data).
    pub images: train_data::images::ImageOptions,
    pub epochs: usize,
    /// Global batch (all ranks together), as the seeds count it.
    pub batch_size: usize,
    /// Micro-batches per rank and step (gradient accumulation; with a pipeline, the GPipe
    /// micro-batches).
    pub accum: usize,
    /// The run's canonical rank count V (`--virtual-ranks`): the epoch's order is
    /// DistributedSampler's for V ranks and each of the W processes computes V/W of them as
    /// micro-batches (virtual rank v on process v mod W), each with its own draws, dropout
    /// seeds and rank 0's BatchNorm statistics, their gradients summed in the order v = 0..V-1:
    /// what a step computes does not depend on W, so a run resumes on any W that divides V
    /// with the weights of the uninterrupted run. `None`: the processes are the ranks.
    pub virtual_ranks: Option<usize>,
    pub lr: f64,
    pub schedule: Schedule,
    pub rule: Rule,
    pub label_smoothing: f64,
    pub augment: bool,
    pub shuffle: bool,
    pub drop_last: bool,
    pub seed: i64,
    pub precision: Precision,
    /// The device of the model, or with a pipeline of its first stage; the data lives here.
    pub device: Device,
    /// Model parallelism: the model cut into stages, each on its own device (the first
    /// `device`), the `accum` micro-batches of every step pushed through them in GPipe order.
    /// `None`: the whole model on `device`.
    pub pipeline: Option<Pipeline>,
    /// Where `last`/`best` checkpoints go (rank 0 writes; every rank reads on resume).
    pub checkpoint_dir: Option<PathBuf>,
    pub resume: bool,
    /// Stop each epoch after this many steps (benchmarks, quick tests).
    pub max_steps: Option<usize>,
    /// Evaluate at most this many batches per rank (benchmarks, quick tests): the first ones of
    /// each rank's share of the validation images.
    pub max_val_steps: Option<usize>,
    /// Steps whose batches image files decode ahead, while the steps before run (0: each
    /// batch when its step asks for it).
    pub prefetch: usize,
    /// DDP's `broadcast_buffers`: rank 0's BatchNorm statistics before every forward.
    pub broadcast_buffers: bool,
    /// Start from these weights (a state_dict with torchvision's keys) instead of a fresh
    /// initialisation.
    pub init: Option<PathBuf>,
    /// `--init` must hold every tensor of the model and nothing else (PyTorch's strict
    /// `load_state_dict`); without it, what matches is loaded and the rest named in a warning.
    pub init_strict: bool,
    /// Lay 4-D weights and inputs out as channels_last (NHWC; the fast layout for cuDNN's
    /// tensor-core convolutions). Checkpoints are written contiguous either way.
    pub channels_last: bool,
    /// Capture one whole step (forward, backward, gradient all-reduce, optimiser) as a CUDA graph
    /// after a few eager warm-up steps and replay it for every later batch (CUDA only; not with
    /// fp16's loss scaler, whose skip decision is made on the host).
    pub cuda_graphs: bool,
    /// cuDNN's deterministic algorithms and no benchmarking: a CUDA run repeats exactly (the
    /// CPU is deterministic anyway).
    pub deterministic: bool,
    /// SyncBatchNorm: training batches normalised with the statistics of the global batch
    /// (all ranks' shares together). With one rank, plain BatchNorm (as in PyTorch).
    pub sync_bn: bool,
    /// PyTorch's fused SGD/AdamW kernels (one pass over the weights instead of four or nine)
    /// instead of the single-tensor paths; the same step to an ulp and the same state.
    pub fused_optim: bool,
    /// Asked before every step: true ends training with [`Error::Interrupted`], the last
    /// complete checkpoint left as it is. The tool passes its signal flag (`|| false` for none).
    pub should_stop: fn() -> bool,
    /// Write a mid-epoch checkpoint after every this many steps (counted over the whole run),
    /// beside the one at each epoch's end.
    pub checkpoint_every: Option<usize>,
    /// The checkpoint signal's flag (a scheduler's warning before a time limit or preemption):
    /// once it is up on any rank, every rank finishes its step, a checkpoint is written at that
    /// step and training ends with [`Error::Checkpointed`]. Asked before every step, agreed
    /// over the ranks. `None`: no such signal.
    pub checkpoint_signal: Option<fn() -> bool>,
    /// Every this many steps (counted over the whole run), and at each epoch's last step,
    /// [`Event::Step`] carries the figures of the steps since the last (their loss and top-1 on
    /// this rank, images per second).
    /// Reading them waits for the device, so `None` (no one reads them) never does.
    pub log_every: Option<usize>,
}

/// Eager steps (on a side stream) before the step is captured: cuDNN picks its algorithms, the
/// optimiser's state exists, and the autograd engine has seen the graph (torch.cuda.graph's
/// recipe).
pub const GRAPH_WARMUP_STEPS: usize = 3;

/// One epoch's figures (over all ranks).
#[derive(Debug, Clone, PartialEq)]
pub struct EpochStats {
    /// 1-based.
    pub epoch: usize,
    pub train_loss: f64,
    pub train_top1: f64,
    pub val_loss: f64,
    pub val_top1: f64,
    pub images_per_s: f64,
    /// The same over the training steps only (validation and checkpointing excluded).
    pub train_images_per_s: f64,
    pub seconds: f64,
    /// Mean seconds per training step (host time from the epoch's start to its last step's
    /// results, validation excluded).
    pub step_seconds: f64,
    /// The stages the model runs in (one: the whole model on one device).
    pub stages: Vec<Stage>,
    /// LR at the epoch's last step.
    pub lr: f64,
    pub loss_scale: Option<f64>,
    pub steps: usize,
    pub skipped_steps: usize,
    pub checkpoint: Option<PathBuf>,
    pub best: bool,
    /// Image files this rank could not use in the epoch (each replaced by the next sample).
    pub bad_inputs: usize,
    /// Training images the epoch did not train on (see [`Epochs`]'s warning).
    pub left_out: usize,
    /// Images the evaluation saw, over every rank.
    pub val_images: usize,
    /// The class names, in label order, in the first epoch a run reports (image trees only).
    pub classes: Vec<String>,
}

/// A finished (or resumed-and-finished) run.
#[derive(Debug)]
pub struct Trained {
    pub vs: nn::VarStore,
    pub model: Net,
    pub epochs: Vec<EpochStats>,
    /// Epochs already done by the checkpoint this run resumed from.
    pub resumed_from: Option<usize>,
}

/// The model's (name, tensor) pairs: parameters in registration order (as `parameters()`),
/// and every entry sorted by name (for broadcasts and checkpoints).
struct Named {
    params: Vec<(String, Tensor)>,
    buffers: Vec<Tensor>,
    all_sorted: Vec<(String, Tensor)>,
}

fn named(vs: &nn::VarStore) -> Named {
    let vars = vs.variables();
    let trainable = vs.trainable_variables();
    let params: Vec<(String, Tensor)> = trainable
        .iter()
        .map(|t| {
            let name = vars
                .iter()
                .find(|(_, v)| v.data_ptr() == t.data_ptr())
                .map(|(n, _)| n.clone())
                .unwrap_or_default();
            (name, t.shallow_clone())
        })
        .collect();
    let mut all_sorted: Vec<(String, Tensor)> = vars.into_iter().collect();
    all_sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let buffers = all_sorted
        .iter()
        .filter(|(_, t)| !t.requires_grad())
        .map(|(_, t)| t.shallow_clone())
        .collect();
    Named {
        params,
        buffers,
        all_sorted,
    }
}

/// The first `n` batches this rank's loader gives in epoch 0 (`train`: the training split as
/// training draws them, in the sampler's order; else the validation split as evaluation reads
/// it, images rank, rank + world, …): images as the model receives them (float32 NCHW), labels,
/// and each sample's index in its split. Nothing is trained; no rank meets another.
pub fn dump_batches(
    cfg: &Config,
    rank: usize,
    world: usize,
    n: usize,
    train: bool,
) -> Result<Dump> {
    let local = check(cfg, world)?;
    let (train_set, test_set) = cfg.data.load(Device::Cpu, &cfg.images, cfg.seed)?;
    let (data, order): (&Dataset, Vec<i64>) = if train {
        let sampler = DistributedSampler {
            len: train_set.len(),
            world,
            rank,
            shuffle: cfg.shuffle,
            seed: cfg.seed as u64,
            drop_last: cfg.drop_last,
        };
        let order = train_set.train_order(&sampler, 0, local, cfg.augment);
        (&train_set, order.iter().map(|&i| i as i64).collect())
    } else {
        let order = test_set.eval_order(rank, world);
        (&test_set, order.iter().map(|&i| i as i64).collect())
    };
    let norm = data.normalize();
    let take = (n * local).min(order.len());
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    let mut seconds = 0.0;
    for (step, chunk) in order[..take].chunks(local).enumerate() {
        // Data held on the device draws its augmentation as training's steps of epoch 0 do.
        let draws = step_draws(cfg, data, train, (0, step, rank))?;
        let idx = Tensor::from_slice(chunk);
        let started = Instant::now();
        let (x, y) = data.batch(&idx, &norm, draws.as_ref(), 0)?;
        seconds += started.elapsed().as_secs_f64();
        // Copies, as training lets each batch go after its step: the loader may then reuse
        // its memory, as it does in training.
        xs.push(x.copy());
        ys.push(y.copy());
    }
    if xs.is_empty() {
        return Err(Error::Usage("no batch to dump: the split is empty".into()));
    }
    // A bad file's place was taken by another sample: the dump names what it holds.
    let indices: Vec<i64> = order[..take].iter().map(|&i| data.taken(i)).collect();
    let paths = data.sample_paths().map_or_else(Vec::new, |p| {
        indices.iter().map(|&i| p[i as usize].clone()).collect()
    });
    let packed_paths = (indices.iter())
        .map(|&i| data.packed_path(i))
        .collect::<std::result::Result<_, _>>()?;
    Ok(Dump {
        images: Tensor::cat(&xs, 0),
        labels: Tensor::cat(&ys, 0),
        indices,
        paths,
        packed_paths,
        seconds,
    })
}

/// What [`dump_batches`] gives.
#[derive(Debug)]
pub struct Dump {
    /// float32 [n, 3, h, w], as the model receives them.
    pub images: Tensor,
    pub labels: Tensor,
    /// Each sample's index in its split.
    pub indices: Vec<i64>,
    /// Each sample's file (image files; none for CIFAR and synthetic data).
    pub paths: Vec<PathBuf>,
    /// Each sample's path as `pack` stored it (the file it was packed from, relative to the
    /// folder packed), where its data holds one.
    pub packed_paths: Vec<Option<PathBuf>>,
    /// Time the batches took (decoding and transforms, for files), the copies kept for the dump
    /// left out.
    pub seconds: f64,
}

/// Runs the whole training; `on_event` sees every step, every epoch's figures and every
/// mid-epoch checkpoint (on every rank).
pub fn train(
    cfg: &Config,
    comm: &mut Communicator,
    on_event: impl FnMut(Event) -> Result<()>,
) -> Result<Trained> {
    let lock = lock_checkpoint_dir(cfg, comm.rank())?;
    train_locked(cfg, comm, lock, on_event)
}

/// One run per checkpoint directory, for the run's life: two runs sharing one would leave
/// best/last files of different runs, which a later --resume would pair. Rank 0 writes; the
/// other ranks only read under its lock (if rank 0 stops here, they see it leave at their first
/// collective and stop, naming it). Rank 0's lock (none without a directory, or on other ranks).
pub fn lock_checkpoint_dir(cfg: &Config, rank: usize) -> Result<Option<atomic_file::DirLock>> {
    Ok(match (&cfg.checkpoint_dir, rank) {
        (Some(dir), 0) => Some(atomic_file::DirLock::acquire(dir)?),
        _ => None,
    })
}

/// [`train`] with the lock [`lock_checkpoint_dir`] gave, taken by the caller before it writes
/// anything of its own for the run (a run refused the directory then leaves no trace, its logs
/// included); held to the end.
pub fn train_locked(
    cfg: &Config,
    comm: &mut Communicator,
    _lock: Option<atomic_file::DirLock>,
    mut on_event: impl FnMut(Event) -> Result<()>,
) -> Result<Trained> {
    let local = check(cfg, comm.world_size())?;
    if cfg.device.is_cuda() {
        tch::Cuda::cudnn_set_benchmark(!cfg.deterministic);
        gpu_runtime::shim::set_cudnn_deterministic(cfg.deterministic);
    }
    let (train_set, test_set, mut parts) = setup(cfg, comm)?;
    let start = restore(cfg, &mut parts)?;
    let resumed_from = start.resumed_from;
    let Parts {
        vs,
        model,
        named,
        stages,
        opts,
        scaler,
        lent,
    } = parts;
    let fixed = Fixed {
        cfg,
        local,
        train_set: &train_set,
        test_set: &test_set,
        named: &named,
    };
    let out = out_device(&stages);
    let stepper = Stepper {
        cfg,
        model: &model,
        buffers: &named.buffers,
        stages: &stages,
        lent,
        loss_sum: Tensor::zeros([], (Kind::Double, out)),
        correct: Tensor::zeros([], (Kind::Int64, out)),
        at: std::cell::Cell::new((0, 0)),
    };
    let mut run = Epochs::new(fixed, stepper, start, (opts, scaler), comm)?;
    let mut epochs = Vec::new();
    for epoch in run.first_epoch()..cfg.epochs {
        epochs.push(run.epoch(epoch, comm, &mut on_event)?);
    }
    drop(run);
    Ok(Trained {
        vs,
        model,
        epochs,
        resumed_from,
    })
}

/// A checkpoint written in the middle of an epoch (by [`Config::checkpoint_every`] or the
/// checkpoint signal), as [`Event::Checkpoint`] reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct MidEpoch {
    /// The epoch it is in (1-based).
    pub epoch: usize,
    /// Steps of it done; `--resume` goes on with the next.
    pub step: usize,
    pub steps: usize,
    pub checkpoint: PathBuf,
    /// Written for the checkpoint signal (the run then stops), not on schedule.
    pub signal: bool,
}

impl MidEpoch {
    /// The checkpoint already in `cfg`'s directory, after `step` steps of epoch `epoch + 1`.
    fn standing(cfg: &Config, epoch: usize, step: usize, steps: usize) -> MidEpoch {
        MidEpoch {
            epoch: epoch + 1,
            step,
            steps,
            checkpoint: cfg
                .checkpoint_dir
                .as_deref()
                .unwrap_or(std::path::Path::new(""))
                .join("last.safetensors"),
            signal: false,
        }
    }

    fn signalled(self) -> MidEpoch {
        MidEpoch {
            signal: true,
            ..self
        }
    }
}

/// A training step done, as [`Event::Step`] reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepInfo {
    /// 1-based.
    pub epoch: usize,
    /// Steps of the epoch done (1-based).
    pub step: usize,
    pub steps: usize,
    /// Steps of the run done, counted from its first epoch (a resumed run goes on counting).
    pub global_step: usize,
    pub lr: f64,
    /// At every [`Config::log_every`]-th step and each epoch's last: the figures since the last.
    pub figures: Option<StepFigures>,
}

/// The figures of the steps since the last [`StepFigures`] (or the epoch's start).
#[derive(Debug, Clone, PartialEq)]
pub struct StepFigures {
    /// Mean training loss and top-1 (%) over those steps' samples on this rank.
    pub loss: f64,
    pub top1: f64,
    /// Over all ranks: those steps' images over the host time they took.
    pub images_per_s: f64,
    pub loss_scale: Option<f64>,
}

/// What [`train`] reports as it goes.
#[derive(Debug)]
pub enum Event<'a> {
    /// After every training step, on every rank (host figures only, unless it carries
    /// [`StepFigures`]).
    Step(&'a StepInfo),
    /// After the epoch's evaluation and checkpoint: on rank 0 before the ranks meet after the
    /// checkpoint, so that an interrupt there cannot lose the event of a checkpointed epoch.
    Epoch(&'a EpochStats),
    /// After a mid-epoch checkpoint, as for `Epoch`.
    Checkpoint(&'a MidEpoch),
}

/// The seed of a training step's augmentation draws: a function of the run's seed, the epoch,
/// the step and the rank only (`scripts/reference/train_ref.py` seeds libtorch's generator with
/// it before each step's draws; ours is the step's own, seeded the same way).
pub fn step_seed(seed: i64, epoch: usize, step: usize, rank: usize) -> i64 {
    (seed as u64)
        .wrapping_mul(1_000_003)
        .wrapping_add(epoch as u64 * 1009 + rank as u64)
        .wrapping_mul(1_000_033)
        .wrapping_add(step as u64) as i64
}
