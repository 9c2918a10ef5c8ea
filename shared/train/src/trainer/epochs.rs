//! The loop over epochs and steps: batches prefetched, steps run, evaluation, the checkpoint
//! signal and the per-step figures.

use std::time::Instant;

use collectives::{Communicator, ReduceOp};
use tch::{Kind, Tensor};
use train_data::data::Dataset;
use train_data::sampler::DistributedSampler;

use super::resume::{RankSums, RunInfo, Start, model_input, save_last, save_mid_epoch};
use super::setup::{StageParts, index_device, out_device};
use super::step::{
    StepMode, Stepper, forward, hosted_virtual, micro_batches, micro_indices, step_draws,
};
use super::{Config, EpochStats, Event, MidEpoch, Named, StepFigures, StepInfo};
use crate::net::Net;
use crate::optim::Optimizer;
use crate::scaler::GradScaler;
use crate::{Error, Result, checkpoint};

/// What the training loop reads and never changes.
pub(super) struct Fixed<'a> {
    pub(super) cfg: &'a Config,
    /// Images a step on each rank.
    pub(super) local: usize,
    pub(super) train_set: &'a Dataset,
    pub(super) test_set: &'a Dataset,
    pub(super) named: &'a Named,
}

impl Fixed<'_> {
    /// Bad files met so far, in both splits.
    pub(super) fn bad_inputs(&self) -> usize {
        self.train_set.bad_inputs() + self.test_set.bad_inputs()
    }
}

/// The training loop over a run's epochs: what every step reads, and what the steps change
/// (optimisers, loss scaler, the best top-1, where the last checkpoint stands).
pub(super) struct Epochs<'a> {
    fixed: Fixed<'a>,
    stepper: Stepper<'a>,
    norm: train_data::data::Normalize,
    sampler: DistributedSampler,
    steps_per_epoch: usize,
    /// Samples in a rank's epoch (the sampler's, padded as DistributedSampler pads): the last
    /// step's batch is what is left of them when they do not fill it.
    per_rank: usize,
    /// Training images an epoch does not train on.
    left_out: usize,
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
pub(super) struct Epoch {
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
    pub(super) fn new(
        fixed: Fixed<'a>,
        stepper: Stepper<'a>,
        mut start: Start,
        (opts, scaler): (Vec<Optimizer>, GradScaler),
        comm: &Communicator,
    ) -> Result<Self> {
        let (cfg, local) = (fixed.cfg, fixed.local);
        let (rank, world) = (comm.rank(), comm.world_size());
        // With virtual ranks the sampler is theirs (this process computes virtual ranks rank,
        // rank + world, …, `hosted` of them), and the steps count a virtual rank's samples.
        let hosted = hosted_virtual(cfg, local).unwrap_or(1);
        let sampler = DistributedSampler {
            len: fixed.train_set.len(),
            world: world * hosted,
            rank,
            shuffle: cfg.shuffle,
            seed: cfg.seed as u64,
            drop_last: cfg.drop_last,
        };
        let per_rank = sampler.num_samples() * hosted;
        let all = steps_in(sampler.num_samples(), local / hosted, cfg.drop_last);
        let steps_per_epoch = cfg.max_steps.map_or(all, |m| m.min(all));
        if steps_per_epoch == 0 {
            return Err(no_batch(per_rank, cfg.drop_last, local));
        }
        // Padded samples repeat the first ones: what the steps take covers every image unless
        // --drop-last or --max-steps leave some out.
        let trained = (steps_per_epoch * local).min(per_rank) * world;
        let images = fixed.train_set.len();
        let left_out = images.saturating_sub(trained);
        if rank == 0 && left_out > 0 && steps_per_epoch == all {
            warn_left_out(cfg, (trained, images), local, world);
        }
        let resumed_sums = start.mid_epoch(cfg, rank, world, steps_per_epoch)?;
        let norm = fixed.train_set.normalize();
        let run = run_info(
            cfg,
            (world, steps_per_epoch),
            fixed.train_set,
            stepper.model,
            &norm,
        );
        Ok(Epochs {
            fixed,
            stepper,
            norm,
            sampler,
            steps_per_epoch,
            per_rank,
            left_out,
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

    /// The epoch training starts in (a resumed run's first unfinished one).
    pub(super) fn first_epoch(&self) -> usize {
        self.first.0
    }

    /// Trains one epoch, validates, writes the epoch's checkpoint, and gives its figures.
    pub(super) fn epoch(
        &mut self,
        epoch: usize,
        comm: &mut Communicator,
        on_event: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<EpochStats> {
        let mut e = self.begin(epoch);
        for step in e.first..self.steps_per_epoch {
            self.step(&mut e, step, comm, on_event)?;
        }
        self.end(e, comm, on_event)
    }

    pub(super) fn begin(&self, epoch: usize) -> Epoch {
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
        let order = match hosted_virtual(cfg, local) {
            // Virtual ranks rank, rank + world, …: their lists interleaved, so that micro-batch
            // j of a step (positions j, j + k, …) is virtual rank rank + world × j's batch.
            Some(k) => {
                let world = self.sampler.world / k;
                let lists: Vec<Vec<usize>> = (0..k)
                    .map(|j| {
                        DistributedSampler {
                            rank: self.sampler.rank + world * j,
                            ..self.sampler
                        }
                        .indices(epoch as u64)
                    })
                    .collect();
                let order = (0..lists[0].len())
                    .flat_map(|i| lists.iter().map(move |l| l[i]))
                    .collect();
                train_set.train_order_given(order, epoch, cfg.augment)
            }
            None => train_set.train_order(&self.sampler, epoch, local, cfg.augment),
        };
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

    /// Samples of a rank's batch at `step`: a full batch, or an epoch's smaller last one.
    pub(super) fn batch_len(&self, step: usize) -> usize {
        batch_len(self.fixed.local, self.per_rank, step)
    }

    /// Bad files of the epoch so far (a resumed epoch's earlier ones included).
    pub(super) fn bad(&self, e: &Epoch) -> usize {
        e.sums.bad + self.fixed.bad_inputs() - e.bad_before
    }

    /// One training step, unless the run is to stop before it (interrupted, or checkpointed on
    /// the checkpoint signal: both errors); then its event and any mid-epoch checkpoint due.
    pub(super) fn step(
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
        // Each virtual rank draws as that rank would; without them the process's one
        // generator serves its micro-batches.
        let (rank, world) = (comm.rank(), comm.world_size());
        let draws = (0..hosted_virtual(cfg, local).unwrap_or(1))
            .map(|j| step_draws(cfg, train_set, true, (epoch, step, rank + world * j)))
            .collect::<Result<Vec<_>>>()?;
        let n = self.batch_len(step);
        let batch = e.order.narrow(0, (step * local) as i64, n as i64);
        let micro = micro_batches(cfg, train_set, &self.norm, &batch, &draws, epoch, local)?;
        let stepper = &self.stepper;
        stepper.at.set((epoch, step));
        if !self.steps.run(
            stepper,
            comm,
            (&micro, n == local),
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
    pub(super) fn stepped(
        &mut self,
        e: &mut Epoch,
        step: usize,
        comm: &mut Communicator,
        on_event: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<()> {
        let (cfg, local) = (self.fixed.cfg, self.fixed.local);
        let (epoch, steps_per_epoch) = (e.epoch, self.steps_per_epoch);
        let done = epoch * steps_per_epoch + step + 1;
        // Also at each epoch's last step: a short run's epochs get their figures too.
        let figures = match cfg.log_every {
            Some(every) if done.is_multiple_of(every) || step + 1 == steps_per_epoch => {
                let ranks = (local, self.per_rank, comm.world_size());
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
            report_then_meet(comm, Event::Checkpoint(&at), on_event)?;
        }
        Ok(())
    }

    /// The checkpoint signal before `step`: the checkpoint written there (unless the last one
    /// already stands there, the one at the end of the previous epoch say) and reported either
    /// way; the error that ends the run (Err: what failed on the way).
    pub(super) fn stop_on_signal(
        &mut self,
        e: &Epoch,
        step: usize,
        comm: &mut Communicator,
        on_event: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<Error> {
        let (cfg, epoch, steps) = (self.fixed.cfg, e.epoch, self.steps_per_epoch);
        if self.saved_at == Some((epoch, step)) {
            let at = MidEpoch::standing(cfg, epoch, step, steps);
            on_event(Event::Checkpoint(&at.signalled()))?;
        } else {
            let at = self.save_mid_epoch(e, step, comm)?;
            report_then_meet(comm, Event::Checkpoint(&at.signalled()), on_event)?;
        }
        Ok(Error::Checkpointed {
            epoch: epoch + 1,
            step,
            steps,
        })
    }

    pub(super) fn save_mid_epoch(
        &self,
        e: &Epoch,
        step: usize,
        comm: &mut Communicator,
    ) -> Result<MidEpoch> {
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

    /// The epoch's figures over every rank, validation, the checkpoint at its end, and the
    /// epoch's event.
    pub(super) fn end(
        &mut self,
        e: Epoch,
        comm: &mut Communicator,
        on_event: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<EpochStats> {
        let (local, per_rank) = (self.fixed.local, self.per_rank);
        let (steps, world) = (self.steps_per_epoch, comm.world_size());
        let seen = images_through(steps, local, per_rank);
        // Images this process's steps took (a resumed epoch's first ones ran before it), over
        // all ranks.
        let took = ((seen - images_through(e.first, local, per_rank)) * world) as f64;
        let train = self.stepper.epoch_figures(comm, seen as f64, e.t0)?;
        let val = self.validate(comm)?;
        let seconds = e.t0.elapsed().as_secs_f64();
        let best = self.val_top1 > self.best_top1;
        if best {
            self.best_top1 = self.val_top1;
        }
        let mut stats = self.epoch_stats(&e, train, &val, (took, seconds), best);
        if let Some(dir) = &self.fixed.cfg.checkpoint_dir {
            if comm.rank() == 0 {
                let (best_top1, val_top1) = (self.best_top1, self.val_top1);
                let meta = self
                    .run
                    .meta(e.epoch + 1, 0, best_top1, val_top1, &self.scaler, 0);
                save_last(dir, self.fixed.named, &self.opts, &meta, best, None)?;
            }
            self.saved_at = Some((e.epoch + 1, 0));
            stats.checkpoint = Some(dir.join("last.safetensors"));
            report_then_meet(comm, Event::Epoch(&stats), on_event)?;
        } else {
            on_event(Event::Epoch(&stats))?;
        }
        Ok(stats)
    }

    /// Validation at an epoch's end (with rank 0's buffers where DDP broadcasts them), its
    /// top-1 kept as the run's latest.
    fn validate(&mut self, comm: &mut Communicator) -> Result<Evaluation> {
        let cfg = self.fixed.cfg;
        let (model, stages) = (self.stepper.model, self.stepper.stages);
        // DDP's first forward after a training step (in eval mode, under no_grad) broadcasts
        // rank 0's buffers when broadcast_buffers is on: every rank evaluates with the
        // BatchNorm statistics that rank 0's checkpoint keeps.
        if cfg.broadcast_buffers {
            crate::ddp::broadcast(comm, self.stepper.buffers)?;
        }
        let data = (self.fixed.test_set, &self.norm, self.fixed.local);
        let val = evaluate(model, stages, data, comm, cfg)?;
        self.val_top1 = val.top1;
        if cfg.device.is_cuda() {
            comm.synchronize()?;
        }
        Ok(val)
    }

    /// The epoch's record (no checkpoint yet): `train` is the training steps' loss, top-1 and
    /// seconds, `took` the images they took over all ranks in the epoch's `seconds`.
    fn epoch_stats(
        &self,
        e: &Epoch,
        (train_loss, train_top1, train_seconds): (f64, f64, f64),
        val: &Evaluation,
        (took, seconds): (f64, f64),
        best: bool,
    ) -> EpochStats {
        let steps = self.steps_per_epoch;
        // Steps this process ran (a resumed epoch's first ones ran before it).
        let ran = (steps - e.first) as f64;
        EpochStats {
            epoch: e.epoch + 1,
            train_loss,
            train_top1,
            val_loss: val.loss,
            val_top1: self.val_top1,
            images_per_s: took / seconds,
            train_images_per_s: took / train_seconds,
            seconds,
            step_seconds: train_seconds / ran,
            stages: self.stepper.stages.iter().map(|s| s.plan.clone()).collect(),
            lr: e.lr,
            loss_scale: self.scaler.enabled.then_some(self.scaler.scale),
            steps,
            skipped_steps: e.skipped,
            checkpoint: None,
            best,
            bad_inputs: self.bad(e),
            left_out: self.left_out,
            val_images: val.images,
            classes: if e.epoch == self.first.0 {
                self.fixed.train_set.class_names()
            } else {
                Vec::new()
            },
        }
    }
}

/// The error when an epoch has no batch to train: `per_rank` samples a rank, in batches of
/// `local`.
fn no_batch(per_rank: usize, drop_last: bool, local: usize) -> Error {
    Error::Usage(format!(
        "no batch to train: {per_rank} sample(s) per rank{}",
        if drop_last {
            format!(" and --drop-last leaves out a batch smaller than {local}")
        } else {
            " (a batch needs at least 2)".into()
        }
    ))
}

/// Warns that an epoch trains on `trained` of the `images` training images, and why.
fn warn_left_out(cfg: &Config, (trained, images): (usize, usize), local: usize, world: usize) {
    let left_out = images - trained;
    log::warn!(
        "an epoch trains on {trained} of the {images} training images: {}, the other \
         {left_out} are left out ({}); evaluation sees every image",
        if cfg.drop_last {
            format!(
                "--drop-last keeps only full batches of {}{}",
                local * world,
                if world > 1 {
                    format!(" ({local} per rank)")
                } else {
                    String::new()
                }
            )
        } else {
            "a last batch of one image per rank cannot train (BatchNorm needs two)".into()
        },
        if cfg.shuffle {
            "a different set each epoch, as the order is shuffled"
        } else {
            "the same ones every epoch, as the order is not shuffled"
        }
    );
}

/// What every checkpoint's metadata says of the run: `world` ranks taking `steps_per_epoch`
/// steps an epoch of `train_set` through `model`.
fn run_info<'a>(
    cfg: &'a Config,
    (world, steps_per_epoch): (usize, usize),
    train_set: &Dataset,
    model: &Net,
    norm: &train_data::data::Normalize,
) -> RunInfo<'a> {
    RunInfo {
        cfg,
        world,
        steps_per_epoch,
        classes: train_set.class_names(),
        input: model_input(cfg, train_set, norm),
        script: match model {
            Net::Script(s) => Some(checkpoint::ScriptFile {
                file: s.file.display().to_string(),
                sha256: s.sha256.clone(),
            }),
            Net::ResNet(_) => None,
        },
    }
}

/// Images a rank's first `step` steps take, with `local` a step and `per_rank` an epoch.
fn images_through(step: usize, local: usize, per_rank: usize) -> usize {
    (step * local).min(per_rank)
}

/// The event of a checkpoint rank 0 has just written (an epoch's, or one inside an epoch), and
/// the ranks' meeting that none leaves before the file is whole. Rank 0 reports before the
/// meeting, the others after it: a report exists once its checkpoint does, even if the meeting
/// is interrupted (`--resume` skips what the checkpoint holds, so a report lost there would be
/// lost for good), and no rank reports a checkpoint that may not exist.
fn report_then_meet(
    comm: &mut Communicator,
    event: Event,
    on_event: &mut dyn FnMut(Event) -> Result<()>,
) -> Result<()> {
    if comm.rank() == 0 {
        let reported = on_event(event);
        // Met even when reporting failed: the others are waiting.
        let met = comm.barrier();
        reported.and(met.map_err(Error::from))
    } else {
        comm.barrier()?;
        on_event(event)
    }
}

/// Image files: the batches of the steps ahead of `step` start decoding (at the epoch's `first`
/// step, all of the first `prefetch`; then one step further each step).
pub(super) fn prefetch_ahead(
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
    let per_rank = order.size()[0] as usize;
    for s in ahead..(step + cfg.prefetch + 1).min(steps) {
        let n = batch_len(local, per_rank, s);
        let batch = order.narrow(0, (s * local) as i64, n as i64);
        for idx in micro_indices(cfg, &batch, local) {
            train_set.prefetch(&idx, cfg.augment, epoch)?;
        }
    }
    Ok(())
}

/// Steps an epoch of `per_rank` samples takes in batches of `local`: its full batches, and a
/// last smaller one unless `drop_last` (or it would hold a single sample, which BatchNorm
/// cannot train on).
pub(super) fn steps_in(per_rank: usize, local: usize, drop_last: bool) -> usize {
    let rest = per_rank % local;
    per_rank / local + usize::from(!drop_last && rest >= 2)
}

/// Samples of a rank's batch at `step` (see [`steps_in`]).
pub(super) fn batch_len(local: usize, per_rank: usize, step: usize) -> usize {
    local.min(per_rank.saturating_sub(step * local))
}

/// Where the last [`StepFigures`] stood: this rank's epoch sums, the step and the time.
pub(super) struct Window {
    pub(super) loss: f64,
    pub(super) correct: i64,
    pub(super) step: usize,
    pub(super) at: Instant,
}

impl Window {
    pub(super) fn start(sums: &RankSums, first: usize) -> Window {
        Window {
            loss: if first > 0 { sums.loss } else { 0.0 },
            correct: if first > 0 { sums.correct } else { 0 },
            step: first,
            at: Instant::now(),
        }
    }

    /// The figures since the last call (reading the sums waits for the device), `done` steps of
    /// the epoch done, with `local` images a step (of `per_rank` an epoch) on each of `world`
    /// ranks.
    pub(super) fn take(
        &mut self,
        stepper: &Stepper,
        done: usize,
        (local, per_rank, world): (usize, usize, usize),
        scaler: &GradScaler,
    ) -> StepFigures {
        let loss = stepper.loss_sum.double_value(&[]);
        let correct = stepper.correct.int64_value(&[]);
        let through = |step: usize| images_through(step, local, per_rank);
        let seen = (through(done.max(self.step + 1)) - through(self.step)) as f64;
        let seconds = self.at.elapsed().as_secs_f64().max(f64::MIN_POSITIVE);
        let figures = StepFigures {
            loss: (loss - self.loss) / seen,
            top1: 100.0 * (correct - self.correct) as f64 / seen,
            images_per_s: seen * world as f64 / seconds,
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

/// The checkpoint signal ([`Config::checkpoint_signal`]) as the ranks agree on it.
#[derive(Default)]
pub(super) struct Signal {
    pub(super) warned: bool,
}

impl Signal {
    /// Whether the signal reached any rank: every rank gets the same answer before the same
    /// step (a max all-reduce of the ranks' flags over the host ring, which waits for no
    /// device). Without a checkpoint directory there is nothing to write: a warning, and
    /// training goes on.
    pub(super) fn agreed(&mut self, cfg: &Config, comm: &mut Communicator) -> Result<bool> {
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

/// What an evaluation found, over every rank.
pub(super) struct Evaluation {
    /// Mean loss and top-1 (%) over the images seen.
    pub(super) loss: f64,
    pub(super) top1: f64,
    pub(super) images: usize,
}

/// The model over the test set: each rank takes images rank, rank+world, … in batches of twice
/// its training batch `local` (the first `max_val_steps` batches of them, if set).
pub(super) fn evaluate(
    model: &Net,
    stages: &[StageParts],
    (data, norm, local): (&Dataset, &train_data::data::Normalize, usize),
    comm: &mut Communicator,
    cfg: &Config,
) -> Result<Evaluation> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let bs = local.max(1) * 2;
    let limit = cfg
        .max_val_steps
        .map_or(usize::MAX, |s| s.saturating_mul(bs));
    let mine: Vec<i64> = data
        .eval_order(rank, world)
        .iter()
        .take(limit)
        .map(|&i| i as i64)
        .collect();
    let idx = Tensor::from_slice(&mine).to_device(index_device(cfg, data));
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
            // The sums `classify` takes too, so that its figures are these.
            let (batch_loss, batch_correct) = crate::infer::batch_sums(&logits, &y);
            let _ = loss.shallow_clone().g_add_(&batch_loss);
            let _ = correct.shallow_clone().g_add_(&batch_correct);
        }
        Ok(())
    })?;
    let (loss, correct) = (loss.double_value(&[]), correct.int64_value(&[]));
    let mut t = Tensor::from_slice(&[loss, correct as f64, mine.len() as f64]);
    comm.all_reduce(&mut t, ReduceOp::Sum)?;
    let v: Vec<f64> = Vec::try_from(&t)?;
    Ok(Evaluation {
        loss: v[0] / v[2].max(1.0),
        top1: 100.0 * v[1] / v[2].max(1.0),
        images: v[2] as usize,
    })
}
