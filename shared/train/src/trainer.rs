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

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::PathBuf;
use std::time::Instant;

use collectives::{Communicator, ReduceOp};
use gpu_runtime::graph::{self, Graphed, Next, Phase, Ran};
use gpu_runtime::rng::Generator;
use gpu_runtime::scalar::DeviceScalar;
use tch::nn;
use tch::{Device, Kind, Tensor};

use crate::data::{Dataset, Source};
use crate::ddp::{self, Buckets};
use crate::flat::FlatParams;
use crate::optim::{Optimizer, Rule, Schedule};
use crate::pipeline::{Pipeline, Split, Stage};
use crate::resnet::{Arch, ResNet, Stem};
use crate::sampler::DistributedSampler;
use crate::scaler::GradScaler;
use crate::syncbn::Lent;
use crate::{Error, Result, checkpoint};

/// Numeric precision of the forward/backward pass (fp16 and bf16 autocast are CUDA-only; fp16
/// comes with the loss scaler).
pub use device::Precision;

/// Everything a run is made of.
#[derive(Debug, Clone)]
pub struct Config {
    pub arch: Arch,
    pub stem: Stem,
    pub data: Source,
    /// How image files are prepared (image-folder data).
    pub images: crate::images::ImageOptions,
    pub epochs: usize,
    /// Global batch (all ranks together), as the seeds count it.
    pub batch_size: usize,
    /// Micro-batches per rank and step (gradient accumulation; with a pipeline, the GPipe
    /// micro-batches).
    pub accum: usize,
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
    /// Every this many steps (counted over the whole run), [`Event::Step`] carries the figures
    /// of the steps since the last (their loss and top-1 on this rank, images per second).
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
    /// The class names, in label order, in the first epoch a run reports (image trees only).
    pub classes: Vec<String>,
}

/// A finished (or resumed-and-finished) run.
#[derive(Debug)]
pub struct Trained {
    pub vs: nn::VarStore,
    pub model: ResNet,
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
    Ok(Dump {
        images: Tensor::cat(&xs, 0),
        labels: Tensor::cat(&ys, 0),
        indices,
        paths,
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
    };
    let mut run = Epochs::new(fixed, stepper, start, (opts, scaler), comm)?;
    let mut epochs = Vec::new();
    for epoch in run.first.0..cfg.epochs {
        let stats = run.epoch(epoch, comm, &mut on_event)?;
        on_event(Event::Epoch(&stats))?;
        epochs.push(stats);
    }
    drop(run);
    Ok(Trained {
        vs,
        model,
        epochs,
        resumed_from,
    })
}

/// What the training loop reads and never changes.
struct Fixed<'a> {
    cfg: &'a Config,
    /// Images a step on each rank.
    local: usize,
    train_set: &'a Dataset,
    test_set: &'a Dataset,
    named: &'a Named,
}

impl Fixed<'_> {
    /// Bad files met so far, in both splits.
    fn bad_inputs(&self) -> usize {
        self.train_set.bad_inputs() + self.test_set.bad_inputs()
    }
}

/// The training loop over a run's epochs: what every step reads, and what the steps change
/// (optimisers, loss scaler, the best top-1, where the last checkpoint stands).
struct Epochs<'a> {
    fixed: Fixed<'a>,
    stepper: Stepper<'a>,
    norm: crate::data::Normalize,
    sampler: DistributedSampler,
    steps_per_epoch: usize,
    run: RunInfo<'a>,
    steps: StepMode,
    opts: Vec<Optimizer>,
    scaler: GradScaler,
    /// The (epoch, step) training starts at, and this rank's sums of that epoch where a
    /// mid-epoch checkpoint left them.
    first: (usize, usize),
    resumed_sums: Option<RankSums>,
    best_top1: f64,
    val_top1: f64,
    /// The (epoch, step) the last checkpoint written or resumed from stands at.
    saved_at: Option<(usize, usize)>,
    signal: Signal,
}

/// One epoch as it goes.
struct Epoch {
    epoch: usize,
    /// Its first step here (a resumed epoch's earlier ones ran before).
    first: usize,
    t0: Instant,
    /// This rank's sample indices, a step's worth after another.
    order: Tensor,
    /// The sums it started from, and the bad files met before it.
    sums: RankSums,
    bad_before: usize,
    skipped: usize,
    lr: f64,
    window: Window,
}

impl<'a> Epochs<'a> {
    fn new(
        fixed: Fixed<'a>,
        stepper: Stepper<'a>,
        mut start: Start,
        (opts, scaler): (Vec<Optimizer>, GradScaler),
        comm: &Communicator,
    ) -> Result<Self> {
        let (cfg, local) = (fixed.cfg, fixed.local);
        let (rank, world) = (comm.rank(), comm.world_size());
        let sampler = DistributedSampler {
            len: fixed.train_set.len(),
            world,
            rank,
            shuffle: cfg.shuffle,
            seed: cfg.seed as u64,
            drop_last: cfg.drop_last,
        };
        let steps_per_epoch = {
            let full = sampler.num_samples() / local;
            cfg.max_steps.map_or(full, |m| m.min(full))
        };
        if steps_per_epoch == 0 {
            return Err(Error::Usage(format!(
                "no full per-rank batch of {local} in {} samples per rank",
                sampler.num_samples()
            )));
        }
        let resumed_sums = start.mid_epoch(cfg, rank, world, steps_per_epoch)?;
        let norm = fixed.train_set.normalize();
        let run = RunInfo {
            cfg,
            world,
            steps_per_epoch,
            classes: fixed.train_set.class_names(),
            input: model_input(cfg, fixed.train_set, &norm),
        };
        Ok(Epochs {
            fixed,
            stepper,
            norm,
            sampler,
            steps_per_epoch,
            run,
            steps: StepMode::new(cfg),
            opts,
            scaler,
            first: (start.epoch, start.step),
            resumed_sums,
            best_top1: start.best_top1,
            val_top1: start.val_top1,
            saved_at: start.resumed_from.map(|_| (start.epoch, start.step)),
            signal: Signal::default(),
        })
    }

    /// Trains one epoch, validates, writes the epoch's checkpoint, and gives its figures.
    fn epoch(
        &mut self,
        epoch: usize,
        comm: &mut Communicator,
        on_event: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<EpochStats> {
        let mut e = self.begin(epoch);
        for step in e.first..self.steps_per_epoch {
            self.step(&mut e, step, comm, on_event)?;
        }
        self.end(e, comm)
    }

    fn begin(&self, epoch: usize) -> Epoch {
        let Fixed {
            cfg,
            local,
            train_set,
            ..
        } = self.fixed;
        let first = if epoch == self.first.0 {
            self.first.1
        } else {
            0
        };
        let order = train_set.train_order(&self.sampler, epoch, local, cfg.augment);
        let order = Tensor::from_slice(&order.iter().map(|&i| i as i64).collect::<Vec<_>>())
            .to_device(index_device(cfg, train_set));
        // The epoch's sums start at zero, or at this rank's where a mid-epoch checkpoint left
        // them.
        let sums = match &self.resumed_sums {
            Some(s) if first > 0 => s.clone(),
            _ => RankSums::default(),
        };
        let _ = self.stepper.loss_sum.shallow_clone().fill_(sums.loss);
        let _ = self.stepper.correct.shallow_clone().fill_(sums.correct);
        Epoch {
            epoch,
            first,
            t0: Instant::now(),
            order,
            bad_before: self.fixed.bad_inputs(),
            skipped: sums.skipped,
            lr: cfg.lr,
            window: Window::start(&sums, first),
            sums,
        }
    }

    /// Bad files of the epoch so far (a resumed epoch's earlier ones included).
    fn bad(&self, e: &Epoch) -> usize {
        e.sums.bad + self.fixed.bad_inputs() - e.bad_before
    }

    /// One training step, unless the run is to stop before it (interrupted, or checkpointed on
    /// the checkpoint signal: both errors); then its event and any mid-epoch checkpoint due.
    fn step(
        &mut self,
        e: &mut Epoch,
        step: usize,
        comm: &mut Communicator,
        on_event: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<()> {
        let Fixed {
            cfg,
            local,
            train_set,
            ..
        } = self.fixed;
        let (epoch, steps_per_epoch) = (e.epoch, self.steps_per_epoch);
        if (cfg.should_stop)() {
            return Err(Error::Interrupted {
                epoch: epoch + 1,
                step,
                last_complete: epoch,
            });
        }
        if self.signal.agreed(cfg, comm)? {
            return Err(self.stop_on_signal(e, step, comm, on_event)?);
        }
        e.lr = cfg.schedule.lr(
            cfg.lr,
            epoch as f64 + step as f64 / steps_per_epoch as f64,
            cfg.epochs as f64,
        );
        let ahead = (e.first, step, steps_per_epoch);
        prefetch_ahead(cfg, train_set, &e.order, ahead, local, epoch)?;
        let draws = step_draws(cfg, train_set, true, (epoch, step, comm.rank()))?;
        let batch = e.order.narrow(0, (step * local) as i64, local as i64);
        let micro = micro_batches(cfg, train_set, &self.norm, &batch, draws.as_ref(), epoch)?;
        let stepper = &self.stepper;
        if !self.steps.run(
            stepper,
            comm,
            &micro,
            e.lr,
            &mut self.opts,
            &mut self.scaler,
        )? {
            e.skipped += 1;
        }
        self.stepped(e, step, comm, on_event)
    }

    /// After `step` ran: its event (with the figures since the last, every `--log-every`
    /// steps), and a mid-epoch checkpoint when one is due.
    fn stepped(
        &mut self,
        e: &mut Epoch,
        step: usize,
        comm: &mut Communicator,
        on_event: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<()> {
        let (cfg, local) = (self.fixed.cfg, self.fixed.local);
        let (epoch, steps_per_epoch) = (e.epoch, self.steps_per_epoch);
        let done = epoch * steps_per_epoch + step + 1;
        let figures = match cfg.log_every {
            Some(every) if done.is_multiple_of(every) => {
                let ranks = (local, comm.world_size());
                Some(e.window.take(&self.stepper, step + 1, ranks, &self.scaler))
            }
            _ => None,
        };
        on_event(Event::Step(&StepInfo {
            epoch: epoch + 1,
            step: step + 1,
            steps: steps_per_epoch,
            global_step: done,
            lr: e.lr,
            figures,
        }))?;
        if let (Some(every), Some(_)) = (cfg.checkpoint_every, &cfg.checkpoint_dir)
            && done.is_multiple_of(every)
            && step + 1 < steps_per_epoch
        {
            let at = self.save_mid_epoch(e, step + 1, comm)?;
            self.saved_at = Some((epoch, step + 1));
            on_event(Event::Checkpoint(&at))?;
        }
        Ok(())
    }

    /// The checkpoint signal before `step`: the checkpoint written there (unless the last one
    /// already stands there, the one at the end of the previous epoch say) and reported either
    /// way; the error that ends the run (Err: what failed on the way).
    fn stop_on_signal(
        &mut self,
        e: &Epoch,
        step: usize,
        comm: &mut Communicator,
        on_event: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<Error> {
        let (cfg, epoch, steps) = (self.fixed.cfg, e.epoch, self.steps_per_epoch);
        let at = if self.saved_at == Some((epoch, step)) {
            MidEpoch::standing(cfg, epoch, step, steps)
        } else {
            self.save_mid_epoch(e, step, comm)?
        };
        on_event(Event::Checkpoint(&at.signalled()))?;
        Ok(Error::Checkpointed {
            epoch: epoch + 1,
            step,
            steps,
        })
    }

    fn save_mid_epoch(&self, e: &Epoch, step: usize, comm: &mut Communicator) -> Result<MidEpoch> {
        let meta = self.run.meta(
            e.epoch,
            step,
            self.best_top1,
            self.val_top1,
            &self.scaler,
            e.skipped,
        );
        let (named, bad) = (self.fixed.named, self.bad(e));
        save_mid_epoch(comm, &self.stepper, named, &self.opts, &meta, bad)
    }

    /// The epoch's figures over every rank, validation, and the checkpoint at its end.
    fn end(&mut self, e: Epoch, comm: &mut Communicator) -> Result<EpochStats> {
        let Fixed {
            cfg,
            local,
            train_set,
            test_set,
            named,
        } = self.fixed;
        let (steps, world) = (self.steps_per_epoch, comm.world_size());
        // Steps this process ran (a resumed epoch's first ones ran before it).
        let ran = (steps - e.first) as f64;
        let seen = (steps * local) as f64;
        let (train_loss, train_top1, train_seconds) =
            self.stepper.epoch_figures(comm, seen, e.t0)?;
        let (model, stages) = (self.stepper.model, self.stepper.stages);
        let val_loss;
        (val_loss, self.val_top1) = evaluate(model, stages, test_set, &self.norm, comm, cfg)?;
        if cfg.device.is_cuda() {
            comm.synchronize()?;
        }
        let seconds = e.t0.elapsed().as_secs_f64();
        let best = self.val_top1 > self.best_top1;
        if best {
            self.best_top1 = self.val_top1;
        }
        let mut stats = EpochStats {
            epoch: e.epoch + 1,
            train_loss,
            train_top1,
            val_loss,
            val_top1: self.val_top1,
            images_per_s: ran * (local * world) as f64 / seconds,
            train_images_per_s: ran * (local * world) as f64 / train_seconds,
            seconds,
            step_seconds: train_seconds / ran,
            stages: stages.iter().map(|s| s.plan.clone()).collect(),
            lr: e.lr,
            loss_scale: self.scaler.enabled.then_some(self.scaler.scale),
            steps,
            skipped_steps: e.skipped,
            checkpoint: None,
            best,
            bad_inputs: self.bad(&e),
            classes: if e.epoch == self.first.0 {
                train_set.class_names()
            } else {
                Vec::new()
            },
        };
        if let Some(dir) = &cfg.checkpoint_dir {
            if comm.rank() == 0 {
                let (best_top1, val_top1) = (self.best_top1, self.val_top1);
                let meta = self
                    .run
                    .meta(e.epoch + 1, 0, best_top1, val_top1, &self.scaler, 0);
                save_last(dir, named, &self.opts, &meta, best, None)?;
            }
            self.saved_at = Some((e.epoch + 1, 0));
            stats.checkpoint = Some(dir.join("last.safetensors"));
            comm.barrier()?;
        }
        Ok(stats)
    }
}

/// Image files: the batches of the steps ahead of `step` start decoding (at the epoch's `first`
/// step, all of the first `prefetch`; then one step further each step).
fn prefetch_ahead(
    cfg: &Config,
    train_set: &Dataset,
    order: &Tensor,
    (first, step, steps): (usize, usize, usize),
    local: usize,
    epoch: usize,
) -> Result<()> {
    if !train_set.is_files() || cfg.prefetch == 0 {
        return Ok(());
    }
    let ahead = if step == first {
        step
    } else {
        step + cfg.prefetch
    };
    for s in ahead..(step + cfg.prefetch + 1).min(steps) {
        let batch = order.narrow(0, (s * local) as i64, local as i64);
        for idx in micro_indices(cfg, &batch, local) {
            train_set.prefetch(&idx, cfg.augment, epoch)?;
        }
    }
    Ok(())
}

/// The settings that cannot work together, as usage errors; the per-rank batch.
fn check(cfg: &Config, world: usize) -> Result<usize> {
    if !cfg.batch_size.is_multiple_of(world) {
        return Err(Error::Usage(format!(
            "--batch-size {} is not divisible by the world size {world}",
            cfg.batch_size
        )));
    }
    let local = cfg.batch_size / world;
    let flag = match cfg.pipeline {
        Some(_) => "--micro-batches",
        None => "--accum",
    };
    if cfg.accum > local {
        return Err(Error::Usage(format!(
            "{flag} {} is more than the {local} samples per rank and step (--batch-size {} over \
             {world} rank(s))",
            cfg.accum, cfg.batch_size
        )));
    }
    if cfg.accum == 0 || !local.is_multiple_of(cfg.accum) {
        return Err(Error::Usage(format!(
            "the per-rank batch {local} is not divisible by {flag} {}",
            cfg.accum
        )));
    }
    if local / cfg.accum < 2 {
        // PyTorch: "Expected more than 1 value per channel when training" (BatchNorm).
        return Err(Error::Usage(format!(
            "BatchNorm cannot train on one image at a time: --batch-size {} over {world} rank(s) \
             and {flag} {} leaves 1 per rank and micro-batch; give each at least 2",
            cfg.batch_size, cfg.accum
        )));
    }
    if let Some(p) = &cfg.pipeline {
        check_pipeline(cfg, p, world)?;
    }
    match cfg.precision {
        Precision::Fp16 | Precision::Bf16 if !cfg.device.is_cuda() => {
            return Err(Error::Usage(format!(
                "--precision {} needs a CUDA device (autocast is CUDA-only here); use fp32 on the CPU",
                cfg.precision.name()
            )));
        }
        _ => {}
    }
    if cfg.cuda_graphs && !cfg.device.is_cuda() {
        return Err(Error::Usage(
            "CUDA graphs need a CUDA device (--cuda-graphs off on the CPU)".into(),
        ));
    }
    if cfg.cuda_graphs && cfg.precision == Precision::Fp16 {
        return Err(Error::Usage(
            "CUDA graphs cannot hold fp16's loss scaler (it decides on the host whether to skip a step): \
             use --precision bf16, or --cuda-graphs off with fp16"
                .into(),
        ));
    }
    Ok(local)
}

/// What a pipeline cannot be combined with.
fn check_pipeline(cfg: &Config, p: &Pipeline, world: usize) -> Result<()> {
    if p.devices.first() != Some(&cfg.device) {
        return Err(Error::Usage(format!(
            "the first stage's device ({:?}) must be the run's device ({:?}), where the data lives",
            p.devices.first(),
            cfg.device
        )));
    }
    if p.devices
        .iter()
        .any(|d| d.is_cuda() != cfg.device.is_cuda())
    {
        return Err(Error::Usage(
            "the stages must all be on CUDA devices or all on the CPU".into(),
        ));
    }
    if p.devices.len() > 1 && cfg.cuda_graphs {
        return Err(Error::Usage(
            "CUDA graphs capture one device's step: --cuda-graphs off with --stages".into(),
        ));
    }
    if p.devices.len() > 1 && cfg.sync_bn && world > 1 {
        return Err(Error::Usage(
            "--sync-bn cannot be combined with --stages over several ranks (each stage's \
             BatchNorms would all-reduce from the backward pass's per-device threads)"
                .into(),
        ));
    }
    Ok(())
}

/// The model and what trains it, as [`setup`] makes them.
struct Parts {
    vs: nn::VarStore,
    model: ResNet,
    named: Named,
    /// One per pipeline stage (one for the whole model), with its optimiser in `opts`.
    stages: Vec<StageParts>,
    opts: Vec<Optimizer>,
    scaler: GradScaler,
    /// The communicator's loan to the SyncBatchNorms (None: per-rank BatchNorm).
    lent: Option<std::sync::Arc<Lent>>,
}

/// One stage of the model: where it runs, and its parameters as one flat buffer (with the
/// flat gradient) whose DDP buckets are ranges of it.
struct StageParts {
    plan: Stage,
    flat: FlatParams,
    buckets: Vec<(i64, i64)>,
}

/// The device the last stage runs on: where the logits, the loss and the epoch sums are.
fn out_device(stages: &[StageParts]) -> Device {
    stages
        .last()
        .expect("a model has one stage at least")
        .plan
        .device
}

/// The data, and the model built from `cfg.seed` (placed on its stages' devices) with each
/// stage's flat buffers, buckets and optimiser, and the loss scaler; every rank ends with rank
/// 0's weights and buffers (DDP's constructor).
///
/// Kept in one piece: DDP's constructor in its order: data, model, stages, flat buffers and
/// buckets, optimisers, rank 0's weights broadcast.
fn setup(cfg: &Config, comm: &mut Communicator) -> Result<(Dataset, Dataset, Parts)> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let (train_set, test_set) = cfg.data.load(cfg.device, &cfg.images, cfg.seed)?;
    if train_set.len() < cfg.batch_size {
        return Err(Error::Usage(format!(
            "--batch-size {} is larger than the {} training images",
            cfg.batch_size,
            train_set.len()
        )));
    }
    // The initialisation draws from libtorch's default generator (tch's initialisers take no
    // generator), as torchvision's do after torch.manual_seed: a lock held only around them
    // keeps ranks run as threads of one process (tests) from interleaving their draws. Every
    // other draw of a run is from a generator of its own (gpu_runtime::rng).
    static INIT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let (vs, mut model) = {
        let _init = INIT.lock().unwrap_or_else(|e| e.into_inner());
        tch::manual_seed(cfg.seed);
        let vs = nn::VarStore::new(cfg.device);
        let model = ResNet::new(&vs.root(), cfg.arch, train_set.num_classes, cfg.stem);
        (vs, model)
    };
    let plans = {
        let units = cfg
            .arch
            .units(cfg.stem, train_set.num_classes, train_set.image_size());
        match &cfg.pipeline {
            Some(p) => crate::pipeline::stages(&units, &p.split, &p.devices)?,
            None => crate::pipeline::stages(&units, &Split::At(Vec::new()), &[cfg.device])?,
        }
    };
    if plans.len() > 1 {
        let place: Vec<(Range<usize>, Device)> =
            plans.iter().map(|s| (s.units.clone(), s.device)).collect();
        model.place(&vs, &place)?;
    }
    // The communicator is lent to the SyncBatchNorms for each step's forward and backward.
    let lent = (cfg.sync_bn && world > 1).then(Lent::new);
    if let Some(l) = &lent {
        model.sync_batch_norm(crate::syncbn::Group {
            reducer: l.clone(),
            rank,
            world,
        });
    }
    if cfg.channels_last {
        for t in vs.variables().values() {
            gpu_runtime::shim::channels_last_(t)?;
        }
    }
    let named = named(&vs);
    let mut stages = Vec::with_capacity(plans.len());
    let mut opts = Vec::with_capacity(plans.len());
    for plan in plans {
        let (names, tensors): (Vec<String>, Vec<Tensor>) = named
            .params
            .iter()
            .filter(|(n, _)| model.unit_of(n).is_some_and(|u| plan.units.contains(&u)))
            .map(|(n, t)| (n.clone(), t.shallow_clone()))
            .unzip();
        let buckets = Buckets::new(&tensors, ddp::FIRST_BUCKET_BYTES, ddp::BUCKET_BYTES);
        // One flat buffer for the stage's weights and one for its gradients: the optimiser and
        // the gradient all-reduce then take a few kernels per step instead of a few per
        // parameter.
        let flat = FlatParams::new(&tensors)?;
        let mut opt = Optimizer::flat(cfg.rule, &flat, names);
        opt.use_fused(cfg.fused_optim);
        opts.push(opt);
        stages.push(StageParts {
            plan,
            buckets: buckets.ranges(&flat)?,
            flat,
        });
    }
    let scaler = GradScaler::new(cfg.precision == Precision::Fp16);

    // Start: everyone takes rank 0's weights and buffers (DDP's constructor).
    let all: Vec<Tensor> = named
        .all_sorted
        .iter()
        .map(|(_, t)| t.shallow_clone())
        .collect();
    ddp::broadcast(comm, &all)?;
    let parts = Parts {
        vs,
        model,
        named,
        stages,
        opts,
        scaler,
        lent,
    };
    Ok((train_set, test_set, parts))
}

/// Where a run starts: epoch 0, or where `--resume` finds the last checkpoint.
struct Start {
    /// Epochs done, and steps of the next one (a mid-epoch checkpoint).
    epoch: usize,
    step: usize,
    best_top1: f64,
    /// The last finished epoch's (NaN before the first).
    val_top1: f64,
    resumed_from: Option<usize>,
    /// A mid-epoch checkpoint's metadata, file and per-rank sums ([`PROGRESS`]).
    mid: Option<(checkpoint::Meta, PathBuf, Tensor)>,
}

impl Start {
    /// This rank's sums of the epoch a mid-epoch checkpoint interrupted, once the checkpoint
    /// is known to come from this very run set-up: the same ranks, global batch, seed and steps
    /// per epoch (the samples of each step depend on all four), else a usage error.
    fn mid_epoch(
        &mut self,
        cfg: &Config,
        rank: usize,
        world: usize,
        steps_per_epoch: usize,
    ) -> Result<Option<RankSums>> {
        let Some((meta, path, progress)) = self.mid.take() else {
            return Ok(None);
        };
        let then = (
            meta.world_size,
            meta.batch_size,
            meta.seed,
            meta.steps_per_epoch,
        );
        if then != (world, cfg.batch_size, cfg.seed, steps_per_epoch) {
            return Err(Error::Usage(format!(
                "{} was written after step {} of epoch {} by a run of {} rank(s), --batch-size {}, \
                 --seed {} and {} steps an epoch; this one has {world} rank(s), --batch-size {}, \
                 --seed {} and {steps_per_epoch} steps an epoch: resume a mid-epoch checkpoint as \
                 it was run",
                path.display(),
                meta.step,
                meta.epoch + 1,
                then.0,
                then.1,
                then.2,
                then.3,
                cfg.batch_size,
                cfg.seed,
            )));
        }
        if progress.size() != [world as i64, 3] || progress.kind() != Kind::Double {
            return Err(Error::Checkpoint(format!(
                "{}: {PROGRESS} is {:?} {:?}, not float64 [{world}, 3]",
                path.display(),
                progress.kind(),
                progress.size()
            )));
        }
        let row: Vec<f64> = Vec::try_from(progress.get(rank as i64))?;
        // Counts are whole numbers, the correct ones at most the samples the steps done saw.
        let seen = (meta.step * cfg.batch_size) as f64;
        let whole = |v: f64| v.is_finite() && v.fract() == 0.0 && v >= 0.0;
        if row[0].is_nan() || row[0] < 0.0 || !whole(row[1]) || row[1] > seen || !whole(row[2]) {
            return Err(Error::Checkpoint(format!(
                "{}: {PROGRESS} of rank {rank} is {row:?}: out of range (a damaged or edited \
                 checkpoint)",
                path.display()
            )));
        }
        Ok(Some(RankSums {
            loss: row[0],
            correct: row[1] as i64,
            bad: row[2] as usize,
            skipped: meta.skipped_steps,
        }))
    }
}

/// `--init`'s weights, then with `--resume` the last checkpoint's weights, optimiser state and
/// loss scaler.
fn restore(cfg: &Config, parts: &mut Parts) -> Result<Start> {
    let mut start = Start {
        epoch: 0,
        step: 0,
        best_top1: f64::NEG_INFINITY,
        val_top1: f64::NAN,
        resumed_from: None,
        mid: None,
    };
    let last = match (&cfg.checkpoint_dir, cfg.resume) {
        (Some(dir), true) => load_last(dir, cfg.device)?,
        _ => None,
    };
    if let Some(path) = &cfg.init {
        let (weights, _) = checkpoint::load(path, cfg.device)?;
        let strict = cfg
            .init_strict
            .then_some("; --init-non-strict loads what matches");
        copy_weights(&parts.vs, &weights, cfg.arch, strict, path)?;
    }
    if let Some(state) = last {
        copy_weights(&parts.vs, &state.model, cfg.arch, Some(""), &state.path)?;
        // The epoch's loss sum may be infinite (fp16's skipped steps); the state may not.
        let optim: BTreeMap<String, Tensor> = state
            .train
            .iter()
            .filter(|(n, _)| n.as_str() != PROGRESS)
            .map(|(n, t)| (n.clone(), t.shallow_clone()))
            .collect();
        if let Some(name) = checkpoint::non_finite(&optim) {
            return Err(Error::Checkpoint(format!(
                "{}: tensor {name} holds NaN or infinite values: not a usable checkpoint",
                state
                    .path
                    .with_file_name("last.train.safetensors")
                    .display()
            )));
        }
        load_optimizers(&mut parts.opts, &state.train)?;
        let mid = match (state.meta.step, state.train.get(PROGRESS)) {
            (0, _) => None,
            (_, Some(p)) => Some((
                state.meta.clone(),
                state.path.clone(),
                p.to_device(Device::Cpu),
            )),
            (step, None) => {
                return Err(Error::Checkpoint(format!(
                    "{}: a checkpoint after step {step} of an epoch without the ranks' {PROGRESS}",
                    state.path.display()
                )));
            }
        };
        start = Start {
            epoch: state.meta.epoch,
            step: state.meta.step,
            best_top1: state.meta.best_top1,
            val_top1: state.meta.val_top1,
            resumed_from: Some(state.meta.epoch),
            mid,
        };
        if state.meta.scaler {
            parts.scaler.scale = state.meta.loss_scale;
            parts.scaler.growth_tracker = state.meta.growth_tracker;
        }
    }
    Ok(start)
}

/// Gives each stage's optimiser its parameters' share of the saved state (which names
/// parameters, so a checkpoint moves between split and unsplit runs).
fn load_optimizers(opts: &mut [Optimizer], saved: &BTreeMap<String, Tensor>) -> Result<()> {
    let mut claimed = BTreeSet::new();
    for opt in opts {
        let mine: BTreeMap<String, Tensor> = saved
            .iter()
            .filter(|(k, _)| {
                k.as_str() == "optim.steps"
                    || k.strip_prefix("optim.")
                        .and_then(|k| k.rsplit_once('.'))
                        .is_some_and(|(param, _)| opt.has_param(param))
            })
            .map(|(k, v)| (k.clone(), v.shallow_clone()))
            .collect();
        claimed.extend(mine.keys().cloned());
        opt.load_state(&mine).map_err(Error::Checkpoint)?;
    }
    match saved
        .keys()
        .find(|k| k.starts_with("optim.") && !claimed.contains(*k))
    {
        Some(k) => Err(Error::Checkpoint(format!(
            "optimiser state {} names no parameter of this model",
            &k["optim.".len()..]
        ))),
        None => Ok(()),
    }
}

/// Where a dataset's batch indices live: on the device for data held there, on the host for
/// image files, which are decoded on the host (indices on a GPU would make every step wait for
/// the device to read them back).
fn index_device(cfg: &Config, data: &Dataset) -> Device {
    if data.is_files() {
        Device::Cpu
    } else {
        cfg.device
    }
}

/// The indices of the step's micro-batches: interleaved positions of the rank's `batch` (see
/// the module doc).
fn micro_indices(cfg: &Config, batch: &Tensor, local: usize) -> Vec<Tensor> {
    (0..cfg.accum)
        .map(|j| {
            if cfg.accum == 1 {
                batch.shallow_clone()
            } else {
                batch.slice(0, j as i64, local as i64, cfg.accum as i64)
            }
        })
        .collect()
}

/// The step's micro-batches ([`micro_indices`]), gathered and augmented, channels_last when the
/// run is.
fn micro_batches(
    cfg: &Config,
    data: &Dataset,
    norm: &crate::data::Normalize,
    batch: &Tensor,
    draws: Option<&Generator>,
    epoch: usize,
) -> Result<Vec<(Tensor, Tensor)>> {
    micro_indices(cfg, batch, batch.size()[0] as usize)
        .into_iter()
        .map(|idx| {
            let (x, y) = data.batch(&idx, norm, draws, epoch)?;
            Ok((
                if cfg.channels_last {
                    gpu_runtime::shim::to_channels_last(&x)?
                } else {
                    x
                },
                y,
            ))
        })
        .collect()
}

/// How each training step runs: eagerly (with the loss scaler's check), or with CUDA graphs
/// ([`Config::cuda_graphs`]): [`GRAPH_WARMUP_STEPS`] eager steps on a side stream, then the step
/// captured once and replayed. A pipelined model steps eagerly ([`Stepper::gradients`] runs its
/// micro-batches in GPipe order).
enum StepMode {
    Eager,
    Graphed {
        runner: Graphed<graph::Cuda, ()>,
        /// The captured step's inputs, refilled before each replay.
        statics: Option<Statics>,
    },
}

/// A graphed step's static inputs: each batch is copied into `inputs` and the learning rate
/// into `lr` before the step.
struct Statics {
    inputs: Vec<(Tensor, Tensor)>,
    lr: DeviceScalar,
}

impl StepMode {
    fn new(cfg: &Config) -> Self {
        match (cfg.cuda_graphs, cfg.device) {
            (false, _) => StepMode::Eager,
            (true, device) => StepMode::Graphed {
                runner: Graphed::new(
                    graph::Cuda {
                        device: match device {
                            Device::Cuda(i) => i,
                            _ => 0,
                        },
                    },
                    GRAPH_WARMUP_STEPS,
                    "the training step",
                ),
                statics: None,
            },
        }
    }

    /// One optimisation step on `micro` at `lr` (`opts`: each stage's optimiser); false when
    /// the loss scaler skipped it (inf/nan gradients).
    ///
    /// Kept in one piece: one step, eager and graphed side by side: the graphed form must do what
    /// the eager one does.
    fn run(
        &mut self,
        stepper: &Stepper,
        comm: &mut Communicator,
        micro: &[(Tensor, Tensor)],
        lr: f64,
        opts: &mut [Optimizer],
        scaler: &mut GradScaler,
    ) -> Result<bool> {
        match self {
            StepMode::Eager => {
                stepper.gradients(comm, micro, scaler.loss_factor(), opts)?;
                let grads: Vec<Tensor> = stepper
                    .stages
                    .iter()
                    .map(|s| s.flat.grad.shallow_clone())
                    .collect();
                let finite = scaler.unscale(&grads);
                if finite {
                    for opt in opts.iter_mut() {
                        opt.step(lr);
                    }
                }
                scaler.update(finite);
                Ok(finite)
            }
            StepMode::Graphed { runner, statics } => {
                // One stage (check_pipeline): one optimiser.
                let [opt] = opts else {
                    return Err(Error::Usage("CUDA graphs capture one device's step".into()));
                };
                if matches!(runner.next(), Next::Capture | Next::Replay) {
                    match statics {
                        Some(st) => {
                            for ((sx, sy), (x, y)) in st.inputs.iter().zip(micro) {
                                sx.shallow_clone().copy_(x);
                                sy.shallow_clone().copy_(y);
                            }
                            st.lr.set(lr);
                        }
                        // Made from this step's batch and LR, just before the capture.
                        None => {
                            let device = stepper.cfg.device;
                            opt.prepare_device_steps(device);
                            *statics = Some(Statics {
                                inputs: micro.iter().map(|(x, y)| (x.copy(), y.copy())).collect(),
                                lr: DeviceScalar::new(lr, device),
                            });
                        }
                    }
                }
                let statics = &*statics;
                let (_, ran) = runner.step(|phase| -> Result<()> {
                    match (phase, statics) {
                        (Phase::Capture, Some(st)) => {
                            stepper.gradients(comm, &st.inputs, 1.0, std::slice::from_mut(opt))?;
                            opt.step_on_device(st.lr.tensor());
                        }
                        // Warm-up, or eagerly after a failed capture.
                        _ => {
                            stepper.gradients(comm, micro, 1.0, std::slice::from_mut(opt))?;
                            opt.step(lr);
                        }
                    }
                    Ok(())
                })?;
                if ran == Ran::Replayed {
                    opt.count_replayed_step();
                }
                Ok(true)
            }
        }
    }
}

/// Rank 0's checkpoint: `last.train.safetensors` (optimiser state, and in a mid-epoch
/// checkpoint every rank's sums of the unfinished epoch as `progress`), `last.safetensors` (the
/// model), and `best.safetensors` when validation improved, written as one unit
/// ([`checkpoint::save_set`]): a failure (a full disk) leaves the previous checkpoint whole.
/// Weights or optimiser state holding NaN or infinities are never written over it.
fn save_last(
    dir: &std::path::Path,
    named: &Named,
    opts: &[Optimizer],
    meta: &checkpoint::Meta,
    best: bool,
    progress: Option<Tensor>,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Io {
        what: format!("creating {}", dir.display()),
        error: e,
    })?;
    let (epoch, step) = (meta.epoch, meta.step);
    let meta = meta.to_map();
    let model_state: BTreeMap<String, Tensor> = named
        .all_sorted
        .iter()
        .map(|(n, t)| (n.clone(), t.shallow_clone()))
        .collect();
    // Each stage's optimiser state names its parameters: together, the unsplit run's state.
    let mut train_state: BTreeMap<String, Tensor> =
        opts.iter().flat_map(Optimizer::state).collect();
    if let Some(name) =
        checkpoint::non_finite(&model_state).or_else(|| checkpoint::non_finite(&train_state))
    {
        let at = match step {
            0 => format!("epoch {epoch}"),
            _ => format!("step {step} of epoch {}", epoch + 1),
        };
        return Err(Error::Data(format!(
            "training diverged: {name} holds NaN or infinite values after {at}; the checkpoint in \
             {} was left as it was: --resume from it with a lower --lr, or use --precision fp32",
            dir.display()
        )));
    }
    if let Some(p) = progress {
        train_state.insert(PROGRESS.to_string(), p);
    }
    let [train, model, best_path] = checkpoint_files(dir);
    checkpoint::recover(&[&train, &model, &best_path])?;
    // The training state is the set's commit point (see `checkpoint::save_set`).
    let mut files = vec![
        (train.as_path(), &train_state),
        (model.as_path(), &model_state),
    ];
    if best {
        files.push((best_path.as_path(), &model_state));
    }
    checkpoint::save_set(&files, &meta)
}

/// A checkpoint directory's files, in the order they are committed: `last.train.safetensors`,
/// `last.safetensors`, `best.safetensors`.
fn checkpoint_files(dir: &std::path::Path) -> [PathBuf; 3] {
    ["last.train", "last", "best"].map(|n| dir.join(format!("{n}.safetensors")))
}

/// The name, in `last.train.safetensors`, of a mid-epoch checkpoint's per-rank sums: float64
/// [world, 3], each rank's row its epoch-so-far loss sum, correct count and unusable files.
const PROGRESS: &str = "progress.ranks";

/// One rank's sums of an unfinished epoch, as a mid-epoch checkpoint keeps them, so that the
/// resumed epoch reports what the uninterrupted one does.
#[derive(Debug, Clone, Default)]
struct RankSums {
    loss: f64,
    correct: i64,
    bad: usize,
    /// Steps the loss scaler skipped (the same on every rank).
    skipped: usize,
}

/// What every checkpoint's metadata says of the run.
struct RunInfo<'a> {
    cfg: &'a Config,
    world: usize,
    steps_per_epoch: usize,
    classes: Vec<String>,
    input: checkpoint::Input,
}

/// How the model sees images: its stem and classes, the side of its images, and what
/// evaluation does to an image before the model (image files: their transform and Normalize;
/// data held as tensors: ToTensor and the statistics the run computed).
fn model_input(cfg: &Config, data: &Dataset, norm: &crate::data::Normalize) -> checkpoint::Input {
    use crate::images::Transform;
    let stats = |t: &Tensor| {
        Vec::<f64>::try_from(t.to_kind(Kind::Double).flatten(0, -1)).unwrap_or_default()
    };
    let (mean, std, eval) = if data.is_files() {
        let wide = |v: [f32; 3]| v.iter().map(|&x| f64::from(x)).collect();
        let eval = match cfg.images.transform {
            Transform::Imagenet => "imagenet",
            Transform::Flip | Transform::None => "none",
        };
        (wide(cfg.images.mean), wide(cfg.images.std), eval)
    } else {
        (stats(&norm.mean), stats(&norm.std), "none")
    };
    checkpoint::Input {
        stem: match cfg.stem {
            Stem::ImageNet => "imagenet",
            Stem::Cifar => "cifar",
        }
        .to_string(),
        num_classes: data.num_classes,
        image_size: data.image_size().0,
        mean,
        std,
        eval_transform: eval.to_string(),
    }
}

impl RunInfo<'_> {
    /// The metadata of a checkpoint after `step` steps of the epoch after `epoch` (0: at the
    /// end of epoch `epoch`).
    fn meta(
        &self,
        epoch: usize,
        step: usize,
        best_top1: f64,
        val_top1: f64,
        scaler: &GradScaler,
        skipped_steps: usize,
    ) -> checkpoint::Meta {
        checkpoint::Meta {
            epoch,
            step,
            steps_per_epoch: self.steps_per_epoch,
            seed: self.cfg.seed,
            skipped_steps,
            arch: self.cfg.arch.name().to_string(),
            best_top1,
            val_top1,
            scaler: scaler.enabled,
            loss_scale: scaler.scale,
            growth_tracker: scaler.growth_tracker,
            world_size: self.world,
            batch_size: self.cfg.batch_size,
            classes: self.classes.clone(),
            input: Some(self.input.clone()),
        }
    }
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
    /// At every [`Config::log_every`]-th step: the figures since the last.
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

/// Where the last [`StepFigures`] stood: this rank's epoch sums, the step and the time.
struct Window {
    loss: f64,
    correct: i64,
    step: usize,
    at: Instant,
}

impl Window {
    fn start(sums: &RankSums, first: usize) -> Window {
        Window {
            loss: if first > 0 { sums.loss } else { 0.0 },
            correct: if first > 0 { sums.correct } else { 0 },
            step: first,
            at: Instant::now(),
        }
    }

    /// The figures since the last call (reading the sums waits for the device), `done` steps of
    /// the epoch done, with `local` images a step on each of `world` ranks.
    fn take(
        &mut self,
        stepper: &Stepper,
        done: usize,
        (local, world): (usize, usize),
        scaler: &GradScaler,
    ) -> StepFigures {
        let loss = stepper.loss_sum.double_value(&[]);
        let correct = stepper.correct.int64_value(&[]);
        let steps = done.saturating_sub(self.step).max(1);
        let seen = (steps * local) as f64;
        let seconds = self.at.elapsed().as_secs_f64().max(f64::MIN_POSITIVE);
        let figures = StepFigures {
            loss: (loss - self.loss) / seen,
            top1: 100.0 * (correct - self.correct) as f64 / seen,
            images_per_s: (steps * local * world) as f64 / seconds,
            loss_scale: scaler.enabled.then_some(scaler.scale),
        };
        *self = Window {
            loss,
            correct,
            step: done,
            at: Instant::now(),
        };
        figures
    }
}

/// What [`train`] reports as it goes.
#[derive(Debug)]
pub enum Event<'a> {
    /// After every training step, on every rank (host figures only, unless it carries
    /// [`StepFigures`]).
    Step(&'a StepInfo),
    Epoch(&'a EpochStats),
    Checkpoint(&'a MidEpoch),
}

/// Every rank's part in a mid-epoch checkpoint: the ranks' epoch sums gathered (exactly: each
/// row is one rank's), rank 0 writes, then all meet so that none leaves before the file is
/// whole.
fn save_mid_epoch(
    comm: &mut Communicator,
    stepper: &Stepper,
    named: &Named,
    opts: &[Optimizer],
    meta: &checkpoint::Meta,
    bad: usize,
) -> Result<MidEpoch> {
    let dir = stepper.cfg.checkpoint_dir.as_deref().ok_or_else(|| {
        Error::Usage("a mid-epoch checkpoint needs a checkpoint directory".into())
    })?;
    let mine = Tensor::from_slice(&[
        stepper.loss_sum.double_value(&[]),
        stepper.correct.int64_value(&[]) as f64,
        bad as f64,
    ]);
    let mut all = Tensor::zeros([comm.world_size() as i64, 3], (Kind::Double, Device::Cpu));
    comm.all_gather(&mine, &mut all)?;
    if comm.rank() == 0 {
        save_last(dir, named, opts, meta, false, Some(all))?;
    }
    comm.barrier()?;
    Ok(MidEpoch::standing(
        stepper.cfg,
        meta.epoch,
        meta.step,
        meta.steps_per_epoch,
    ))
}

/// The checkpoint signal ([`Config::checkpoint_signal`]) as the ranks agree on it.
#[derive(Default)]
struct Signal {
    warned: bool,
}

impl Signal {
    /// Whether the signal reached any rank: every rank gets the same answer before the same
    /// step (a max all-reduce of the ranks' flags over the host ring, which waits for no
    /// device). Without a checkpoint directory there is nothing to write: a warning, and
    /// training goes on.
    fn agreed(&mut self, cfg: &Config, comm: &mut Communicator) -> Result<bool> {
        let Some(requested) = cfg.checkpoint_signal else {
            return Ok(false);
        };
        if cfg.checkpoint_dir.is_none() {
            if requested() && !self.warned {
                log::warn!(
                    "the checkpoint signal arrived, but there is no checkpoint directory to write to: training goes on"
                );
                self.warned = true;
            }
            return Ok(false);
        }
        let mine = requested();
        if comm.world_size() == 1 {
            return Ok(mine);
        }
        let mut flag = Tensor::from(i32::from(mine));
        comm.all_reduce(&mut flag, ReduceOp::Max)?;
        Ok(flag.int64_value(&[]) != 0)
    }
}

/// The generator of a training step's augmentation draws (None without augmentation): a
/// generator of the step's own, seeded with [`step_seed`] of the (epoch, step, rank) given, so
/// that a run resumed at any step draws what the uninterrupted one drew, and ranks run as
/// threads of one process draw apart.
fn step_draws(
    cfg: &Config,
    data: &Dataset,
    train: bool,
    (epoch, step, rank): (usize, usize, usize),
) -> Result<Option<Generator>> {
    if !(train && cfg.augment) {
        return Ok(None);
    }
    let seed = step_seed(cfg.seed, epoch, step, rank);
    Ok(Some(Generator::new(data.draws_device(), seed)?))
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

/// The model's forward pass through its stages in the run's precision (fp16/bf16: CUDA
/// autocast). Between stages the activation is copied to the next stage's device: a
/// device-to-device copy that PyTorch queues on the source device's stream between two events
/// (the destination's queued work first, the destination's later work after it), so the host
/// never waits and the previous stage can take the next micro-batch at once. Its backward is
/// the same copy the other way.
fn forward(
    model: &ResNet,
    stages: &[StageParts],
    x: &Tensor,
    train: bool,
    precision: Precision,
) -> Result<Tensor> {
    let run = || -> Result<Tensor> {
        let mut h = x.shallow_clone();
        for stage in stages {
            let device = stage.plan.device;
            if h.device() != device {
                h = h.to_device_(device, h.kind(), true, false);
            }
            h = model.forward_units(&h, stage.plan.units.clone(), train)?;
        }
        Ok(h)
    };
    let dtype = match precision {
        Precision::Fp16 => gpu_runtime::shim::AutocastDtype::F16,
        Precision::Bf16 => gpu_runtime::shim::AutocastDtype::Bf16,
        Precision::Fp32 | Precision::Tf32 => return run(),
    };
    gpu_runtime::shim::autocast(dtype, run)?
}

/// What one optimisation step touches; shared by the eager and the graphed path.
struct Stepper<'a> {
    cfg: &'a Config,
    model: &'a ResNet,
    buffers: &'a [Tensor],
    /// Where each stage runs, and its flat gradient with its DDP buckets (ranges of it).
    stages: &'a [StageParts],
    /// The SyncBatchNorms' way to the communicator (None: per-rank BatchNorm).
    lent: Option<std::sync::Arc<Lent>>,
    /// Device-side sums of the epoch's loss and correct predictions (on the last stage's
    /// device), zeroed in place each epoch (a captured step adds into these very tensors).
    loss_sum: Tensor,
    correct: Tensor,
}

impl Stepper<'_> {
    /// The epoch's training loss and top-1 (%) over every rank's `seen` samples (reading the
    /// sums waits for the device: the steps are done), and the host seconds since `t0` when
    /// the steps were done.
    fn epoch_figures(
        &self,
        comm: &mut Communicator,
        seen: f64,
        t0: Instant,
    ) -> Result<(f64, f64, f64)> {
        let mut t = Tensor::from_slice(&[
            self.loss_sum.double_value(&[]),
            self.correct.int64_value(&[]) as f64,
            seen,
        ]);
        let seconds = t0.elapsed().as_secs_f64();
        comm.all_reduce(&mut t, ReduceOp::Sum)?;
        let v: Vec<f64> = Vec::try_from(&t)?;
        Ok((v[0] / v[2], 100.0 * v[1] / v[2], seconds))
    }

    /// Gradients of the mean loss over the micro-batches (× `loss_factor`), averaged over
    /// ranks stage by stage; adds the batch's summed loss and correct count to the epoch sums.
    /// Queues device work only (no host reads), so it can be captured.
    ///
    /// One stage: each micro-batch forward and backward in turn (only one micro-batch's
    /// activations are held). Several (a pipeline): every micro-batch forward, then every one
    /// backward (GPipe), in the same order, so gradients accumulate as they do with one stage
    /// and the step computes the same thing.
    fn gradients(
        &self,
        comm: &mut Communicator,
        micro: &[(Tensor, Tensor)],
        loss_factor: f64,
        opts: &mut [Optimizer],
    ) -> Result<()> {
        for opt in opts.iter_mut() {
            opt.zero_grad();
        }
        let scale = loss_factor / micro.len() as f64;
        if let [_] = self.stages {
            for (x, y) in micro {
                if self.cfg.broadcast_buffers {
                    ddp::broadcast(comm, self.buffers)?;
                }
                let pass = || -> Result<Pass> {
                    let pass = self.loss(x, y)?;
                    (&pass.loss * scale).f_backward()?;
                    Ok(pass)
                };
                let pass = match &self.lent {
                    Some(lent) => lent.lend(comm, pass)?,
                    None => pass()?,
                };
                self.count(&pass);
            }
        } else {
            // No SyncBatchNorm here (check_pipeline), so nothing borrows the communicator.
            let mut passes = Vec::with_capacity(micro.len());
            for (x, y) in micro {
                if self.cfg.broadcast_buffers {
                    ddp::broadcast(comm, self.buffers)?;
                }
                passes.push(self.loss(x, y)?);
            }
            for pass in &passes {
                (&pass.loss * scale).f_backward()?;
                self.count(pass);
            }
        }
        for stage in self.stages {
            ddp::all_reduce_flat(comm, &stage.flat.grad, &stage.buckets)?;
        }
        Ok(())
    }

    /// One micro-batch's forward pass and mean loss (on the last stage's device).
    fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Pass> {
        let logits =
            forward(self.model, self.stages, x, true, self.cfg.precision)?.to_kind(Kind::Float);
        let labels = y.to_device_(logits.device(), y.kind(), true, false);
        let loss = logits.cross_entropy_loss::<Tensor>(
            &labels,
            None,
            tch::Reduction::Mean,
            -100,
            self.cfg.label_smoothing,
        );
        Ok(Pass {
            logits,
            labels,
            loss,
        })
    }

    /// Adds a micro-batch's summed loss and correct predictions to the epoch sums.
    fn count(&self, pass: &Pass) {
        tch::no_grad(|| {
            let n = pass.labels.size()[0] as f64;
            let _ = self
                .loss_sum
                .shallow_clone()
                .g_add_(&(pass.loss.detach().to_kind(Kind::Double) * n));
            let right = pass.logits.argmax(1, false).eq_tensor(&pass.labels);
            let _ = self.correct.shallow_clone().g_add_(&right.sum(Kind::Int64));
        });
    }
}

/// A micro-batch's forward pass: logits, labels and mean loss, on the last stage's device.
struct Pass {
    logits: Tensor,
    labels: Tensor,
    loss: Tensor,
}

/// Copies `weights` (read from `path`) into the model. Non-finite values are refused. `strict`
/// (PyTorch's strict `load_state_dict`): the file holds every tensor of the model and no other,
/// else an error naming them and saying `hint`; not strict: what matches is loaded and the rest
/// named in a warning. Shapes must match either way.
///
/// Kept in one piece: `load_state_dict`'s checks in their order: names, shapes, values.
fn copy_weights(
    vs: &nn::VarStore,
    weights: &BTreeMap<String, Tensor>,
    arch: Arch,
    strict: Option<&str>,
    path: &std::path::Path,
) -> Result<()> {
    let mut vars = vs.variables();
    // A checkpoint with NaN or infinite values would only resume into "training diverged".
    if let Some(name) = checkpoint::non_finite(weights) {
        return Err(Error::Checkpoint(format!(
            "{}: tensor {name} holds NaN or infinite values: not a usable checkpoint",
            path.display()
        )));
    }
    let unexpected: Vec<&str> = weights
        .keys()
        .filter(|n| !vars.contains_key(*n))
        .map(String::as_str)
        .collect();
    let mut missing: Vec<String> = vars
        .keys()
        .filter(|n| !weights.contains_key(*n))
        .cloned()
        .collect();
    missing.sort();
    let missing: Vec<&str> = missing.iter().map(String::as_str).collect();
    let (what_missing, what_extra) = (
        format!("{} tensor(s) of {} it lacks", missing.len(), arch.name()),
        format!(
            "{} tensor(s) {} does not have",
            unexpected.len(),
            arch.name()
        ),
    );
    if let Some(hint) = strict
        && !(unexpected.is_empty() && missing.is_empty())
    {
        let mut why = Vec::new();
        if !missing.is_empty() {
            why.push(format!("{what_missing}: {}", names(&missing, 8)));
        }
        if !unexpected.is_empty() {
            why.push(format!("{what_extra}: {}", names(&unexpected, 8)));
        }
        return Err(Error::Checkpoint(format!(
            "{}: {} (a strict load, as PyTorch's load_state_dict){hint}",
            path.display(),
            why.join("; ")
        )));
    }
    tch::no_grad(|| -> Result<()> {
        for (name, t) in weights {
            let Some(v) = vars.get_mut(name) else {
                continue;
            };
            if v.size() != t.size() {
                return Err(Error::Checkpoint(format!(
                    "{}: {name}: file {:?}, model {:?}",
                    path.display(),
                    t.size(),
                    v.size()
                )));
            }
            v.copy_(t);
        }
        Ok(())
    })?;
    if !missing.is_empty() || !unexpected.is_empty() {
        log::warn!(
            "{}: loaded {} tensor(s); not loaded, {what_missing} (kept from the initialisation): {}; ignored, {what_extra}: {}",
            path.display(),
            weights.len() - unexpected.len(),
            names(&missing, 20),
            names(&unexpected, 20),
        );
    }
    Ok(())
}

/// Up to `most` names, then how many more; "none" for none.
fn names(v: &[&str], most: usize) -> String {
    if v.is_empty() {
        return "none".into();
    }
    let mut text = v[..v.len().min(most)].join(", ");
    if v.len() > most {
        text.push_str(&format!(" and {} more", v.len() - most));
    }
    text
}

/// (loss, top-1 %) over the whole test set: each rank takes images rank, rank+world, …
fn evaluate(
    model: &ResNet,
    stages: &[StageParts],
    data: &Dataset,
    norm: &crate::data::Normalize,
    comm: &mut Communicator,
    cfg: &Config,
) -> Result<(f64, f64)> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let mine: Vec<i64> = data
        .eval_order(rank, world)
        .iter()
        .map(|&i| i as i64)
        .collect();
    let idx = Tensor::from_slice(&mine).to_device(index_device(cfg, data));
    let bs = (cfg.batch_size / world).max(1) * 2;
    // Sums stay on the (last stage's) device; one read at the end.
    let out = out_device(stages);
    let loss = Tensor::zeros([], (Kind::Double, out));
    let correct = Tensor::zeros([], (Kind::Int64, out));
    tch::no_grad(|| -> Result<()> {
        for start in (0..mine.len()).step_by(bs) {
            let n = bs.min(mine.len() - start);
            let (x, y) = data.batch(&idx.narrow(0, start as i64, n as i64), norm, None, 0)?;
            let x = if cfg.channels_last {
                gpu_runtime::shim::to_channels_last(&x)?
            } else {
                x
            };
            let logits = forward(model, stages, &x, false, cfg.precision)?.to_kind(Kind::Float);
            let y = y.to_device_(out, y.kind(), true, false);
            let _ = loss.shallow_clone().g_add_(
                &logits
                    .cross_entropy_loss::<Tensor>(&y, None, tch::Reduction::Sum, -100, 0.0)
                    .to_kind(Kind::Double),
            );
            let _ = correct
                .shallow_clone()
                .g_add_(&logits.argmax(1, false).eq_tensor(&y).sum(Kind::Int64));
        }
        Ok(())
    })?;
    let (loss, correct) = (loss.double_value(&[]), correct.int64_value(&[]));
    let mut t = Tensor::from_slice(&[loss, correct as f64, mine.len() as f64]);
    comm.all_reduce(&mut t, ReduceOp::Sum)?;
    let v: Vec<f64> = Vec::try_from(&t)?;
    Ok((v[0] / v[2].max(1.0), 100.0 * v[1] / v[2].max(1.0)))
}

struct LastState {
    model: BTreeMap<String, Tensor>,
    train: BTreeMap<String, Tensor>,
    meta: checkpoint::Meta,
    /// The model half's file (named in errors).
    path: PathBuf,
}

/// The last checkpoint in `dir`, if any; both halves must be of one epoch.
fn load_last(dir: &std::path::Path, device: Device) -> Result<Option<LastState>> {
    let [tp, mp, best] = checkpoint_files(dir);
    // A run killed while committing its checkpoint: the set it was writing is finished, or
    // dropped if none of it was in place yet.
    if checkpoint::recover(&[&tp, &mp, &best])? == atomic_file::Recovered::Finished {
        log::warn!(
            "{}: finished the checkpoint a killed run was committing",
            dir.display()
        );
    }
    if !mp.exists() {
        if tp.exists() {
            return Err(Error::Checkpoint(format!(
                "{} is there but {} is missing: an incomplete checkpoint (a run killed while \
                 writing its first one?); remove {} to start over",
                tp.display(),
                mp.display(),
                tp.display()
            )));
        }
        return Ok(None);
    }
    let (model, meta) = checkpoint::load(&mp, device)?;
    let (train, tmeta) = checkpoint::load(&tp, device)?;
    let meta = checkpoint::Meta::from_map(&meta, &mp)?;
    let tmeta = checkpoint::Meta::from_map(&tmeta, &tp).ok();
    let train_at = tmeta.as_ref().map(|t| (t.epoch, t.step));
    if train_at != Some((meta.epoch, meta.step)) {
        return Err(Error::Checkpoint(format!(
            "{} (epoch {}, step {}) and {} ({}) are from different steps: the run was killed while \
             writing; remove both to start over",
            mp.display(),
            meta.epoch,
            meta.step,
            tp.display(),
            train_at.map_or("no epoch".to_string(), |(e, s)| format!(
                "epoch {e}, step {s}"
            )),
        )));
    }
    Ok(Some(LastState {
        model,
        train,
        meta,
        path: mp,
    }))
}
