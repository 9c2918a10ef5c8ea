//! One training step: micro-batches forward and backward (eager, through stages, or as a
//! captured CUDA graph), gradients averaged, the optimiser's update.

use std::time::Instant;

use collectives::{Communicator, ReduceOp};
use gpu_runtime::graph::{self, Graphed, Next, Phase, Ran};
use gpu_runtime::rng::Generator;
use gpu_runtime::scalar::DeviceScalar;
use tch::{Device, Kind, Tensor};
use train_data::data::Dataset;

use super::setup::StageParts;
use super::{Config, GRAPH_WARMUP_STEPS, Precision, step_seed};
use crate::net::Net;
use crate::optim::Optimizer;
use crate::scaler::GradScaler;
use crate::syncbn::Lent;
use crate::{Error, Result, ddp};

/// The most gradient elements [`Stepper::virtual_gradients`] gathers at once, over all the
/// processes (64 MiB of float32).
const GATHER: i64 = 16 << 20;

/// Adds round `j` of [`Stepper::virtual_gradients`] to `sum`: the `world` processes' gradients
/// of virtual ranks jW … jW+W-1, each ÷ `v_all`, in that order (the first of round 0 copied).
/// `gather(offset, len, out)` fills `out` ([world, len], a view of `buf`) with every process's
/// elements offset … offset+len of its gradient, `chunk` elements at a time.
fn add_round(
    sum: &Tensor,
    buf: &Tensor,
    (j, world, v_all): (usize, usize, usize),
    chunk: i64,
    mut gather: impl FnMut(i64, i64, &mut Tensor) -> Result<()>,
) -> Result<()> {
    let numel = sum.numel() as i64;
    for off in (0..numel).step_by(chunk.max(1) as usize) {
        let len = chunk.min(numel - off);
        let mut all = buf
            .narrow(0, 0, world as i64 * len)
            .view([world as i64, len]);
        gather(off, len, &mut all)?;
        tch::no_grad(|| {
            let part = sum.narrow(0, off, len);
            for p in 0..world {
                let g = all.get(p as i64) / v_all as f64;
                if j == 0 && p == 0 {
                    part.shallow_clone().copy_(&g);
                } else {
                    let _ = part.shallow_clone().g_add_(&g);
                }
            }
        });
    }
    Ok(())
}

/// The indices of the step's micro-batches: interleaved positions of the rank's `batch` (see
/// the module doc). A full batch (`local` samples) splits into `--accum` micro-batches; an
/// epoch's smaller last batch into as many as give each at least 2 samples (BatchNorm's
/// minimum, as for a full batch), at most `--accum`, interleaved the same way.
pub(super) fn micro_indices(cfg: &Config, batch: &Tensor, local: usize) -> Vec<Tensor> {
    let n = batch.size()[0] as usize;
    let parts = match hosted_virtual(cfg, local) {
        // Each virtual rank's share, full or the last smaller one (at least 2 each: steps_in).
        Some(k) => k,
        None if n == local => cfg.accum,
        None => cfg.accum.min(n / 2).max(1),
    };
    (0..parts)
        .map(|j| {
            if parts == 1 {
                batch.shallow_clone()
            } else {
                batch.slice(0, j as i64, n as i64, parts as i64)
            }
        })
        .collect()
}

/// The virtual ranks each process computes (`--virtual-ranks` V over the W processes of a
/// per-rank batch `local` = batch / W: V / W), None without them.
pub(super) fn hosted_virtual(cfg: &Config, local: usize) -> Option<usize> {
    cfg.virtual_ranks.map(|v| v * local / cfg.batch_size)
}

/// The step's micro-batches ([`micro_indices`]), gathered and augmented (micro-batch j with
/// `draws[j]`, or all with the one generator given), channels_last when the run is.
pub(super) fn micro_batches(
    cfg: &Config,
    data: &Dataset,
    norm: &train_data::data::Normalize,
    batch: &Tensor,
    draws: &[Option<Generator>],
    epoch: usize,
    local: usize,
) -> Result<Vec<(Tensor, Tensor)>> {
    micro_indices(cfg, batch, local)
        .into_iter()
        .enumerate()
        .map(|(j, idx)| {
            let draws = draws.get(j).or(draws.first()).and_then(Option::as_ref);
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
pub(super) enum StepMode {
    Eager,
    Graphed {
        runner: Graphed<graph::Cuda, ()>,
        /// The captured step's inputs, refilled before each replay.
        statics: Option<Statics>,
    },
}

/// A graphed step's static inputs: each batch is copied into `inputs` and the learning rate
/// into `lr` before the step.
pub(super) struct Statics {
    pub(super) inputs: Vec<(Tensor, Tensor)>,
    pub(super) lr: DeviceScalar,
}

impl StepMode {
    pub(super) fn new(cfg: &Config) -> Self {
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
    /// the loss scaler skipped it (inf/nan gradients). `full`: the step's batch is a full one
    /// (an epoch's smaller last batch runs eagerly, never in the captured graph). The graphed
    /// form does what the eager one does.
    pub(super) fn run(
        &mut self,
        stepper: &Stepper,
        comm: &mut Communicator,
        (micro, full): (&[(Tensor, Tensor)], bool),
        lr: f64,
        opts: &mut [Optimizer],
        scaler: &mut GradScaler,
    ) -> Result<bool> {
        match self {
            StepMode::Eager => eager_step(stepper, comm, micro, lr, opts, scaler),
            StepMode::Graphed { runner, statics } => {
                // One stage (check_pipeline): one optimiser.
                let [opt] = opts else {
                    return Err(Error::Usage("CUDA graphs capture one device's step".into()));
                };
                if !full {
                    // An epoch's smaller last batch: eagerly, outside the graph, with the
                    // step the graph takes once it replays (its device-side LR and step count,
                    // which stay in step with the host's), else the warm-up's host step.
                    stepper.gradients(comm, micro, 1.0, std::slice::from_mut(opt))?;
                    match (runner.next(), &*statics) {
                        (Next::Replay, Some(st)) => {
                            st.lr.set(lr);
                            opt.step_on_device(st.lr.tensor());
                            opt.count_replayed_step();
                        }
                        _ => opt.step(lr),
                    }
                    return Ok(true);
                }
                if matches!(runner.next(), Next::Capture | Next::Replay) {
                    Statics::fill(statics, micro, lr, stepper.cfg.device, opt);
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

/// An eager step: the gradients of `micro` (scaled by the loss scaler), unscaled, and each
/// stage's optimiser step at `lr` unless they hold inf/nan (then false: the step is skipped).
fn eager_step(
    stepper: &Stepper,
    comm: &mut Communicator,
    micro: &[(Tensor, Tensor)],
    lr: f64,
    opts: &mut [Optimizer],
    scaler: &mut GradScaler,
) -> Result<bool> {
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

impl Statics {
    /// The step's batch `micro` and `lr` copied into the captured step's inputs; made from
    /// them (and `opt` readied for device-side steps) just before the capture.
    fn fill(
        statics: &mut Option<Statics>,
        micro: &[(Tensor, Tensor)],
        lr: f64,
        device: Device,
        opt: &mut Optimizer,
    ) {
        match statics {
            Some(st) => {
                for ((sx, sy), (x, y)) in st.inputs.iter().zip(micro) {
                    sx.shallow_clone().copy_(x);
                    sy.shallow_clone().copy_(y);
                }
                st.lr.set(lr);
            }
            None => {
                opt.prepare_device_steps(device);
                *statics = Some(Statics {
                    inputs: micro.iter().map(|(x, y)| (x.copy(), y.copy())).collect(),
                    lr: DeviceScalar::new(lr, device),
                });
            }
        }
    }
}

/// The generator of a training step's augmentation draws (None without augmentation): a
/// generator of the step's own, seeded with [`step_seed`] of the (epoch, step, rank) given, so
/// that a run resumed at any step draws what the uninterrupted one drew, and ranks run as
/// threads of one process draw apart.
pub(super) fn step_draws(
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

/// The model's forward pass through its stages in the run's precision (fp16/bf16: CUDA
/// autocast). Between stages the activation is copied to the next stage's device: a
/// device-to-device copy that PyTorch queues on the source device's stream between two events
/// (the destination's queued work first, the destination's later work after it), so the host
/// never waits and the previous stage can take the next micro-batch at once. Its backward is
/// the same copy the other way.
pub(super) fn forward(
    model: &Net,
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
pub(super) struct Stepper<'a> {
    pub(super) cfg: &'a Config,
    pub(super) model: &'a Net,
    pub(super) buffers: &'a [Tensor],
    /// Where each stage runs, and its flat gradient with its DDP buckets (ranges of it).
    pub(super) stages: &'a [StageParts],
    /// The SyncBatchNorms' way to the communicator (None: per-rank BatchNorm).
    pub(super) lent: Option<std::sync::Arc<Lent>>,
    /// Device-side sums of the epoch's loss and correct predictions (on the last stage's
    /// device), zeroed in place each epoch (a captured step adds into these very tensors).
    pub(super) loss_sum: Tensor,
    pub(super) correct: Tensor,
    /// The (epoch, step) being run: a TorchScript model's dropout is seeded from it.
    pub(super) at: std::cell::Cell<(usize, usize)>,
}

/// A TorchScript model's random draws (dropout) come from libtorch's default generator, not
/// one of the run's: it is seeded before each micro-batch's forward with [`step_seed`] of the
/// (epoch, step) and the micro-batch's place among all ranks' (rank × accum + j), so that a
/// resumed run draws what the uninterrupted one drew, and one rank with `--accum k` draws
/// what k ranks draw. (PyTorch does the same with `torch.manual_seed(step_seed(...))` before
/// the forward.) Ranks run as threads of one process share that generator: tests with dropout
/// run ranks as processes.
pub fn dropout_seed(seed: i64, (epoch, step): (usize, usize), place: usize) -> i64 {
    step_seed(seed ^ 0x005e_edd0, epoch, step, place)
}

impl Stepper<'_> {
    /// The epoch's training loss and top-1 (%) over every rank's `seen` samples (reading the
    /// sums waits for the device: the steps are done), and the host seconds since `t0` when
    /// the steps were done.
    pub(super) fn epoch_figures(
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
    pub(super) fn gradients(
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
        // (Not inside a CUDA graph's capture, where seeding is not allowed: a captured
        // step's draws advance from the seed of the capture with every replay.)
        let script = matches!(self.model, Net::Script(_)) && !self.cfg.cuda_graphs;
        if let (Some(_), [stage]) = (self.cfg.virtual_ranks, self.stages) {
            return self.virtual_gradients(comm, micro, loss_factor, stage, script);
        }
        if let [_] = self.stages {
            for (j, (x, y)) in micro.iter().enumerate() {
                if self.cfg.broadcast_buffers {
                    ddp::broadcast(comm, self.buffers)?;
                }
                if script {
                    let place = comm.rank() * micro.len() + j;
                    tch::manual_seed(dropout_seed(self.cfg.seed, self.at.get(), place));
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

    /// [`Stepper::gradients`] with virtual ranks: micro-batch j is virtual rank v = rank +
    /// world × j, computed as that rank of a V-rank run would: from rank 0's BatchNorm
    /// statistics (virtual rank 0's, which alone are kept), dropout seeded for v, its gradient
    /// of its own mean loss. The flat gradient is made as DDP makes it, g ÷ V summed, in the
    /// order v = 0, 1, …, V-1, whatever the processes: the step computes the same bits on any
    /// W. Round j gathers the W gradients of v = jW … jW+W-1 (consecutive in that order) on
    /// every process and adds them, through a buffer of at most [`GATHER`] elements: memory
    /// does not grow with V.
    fn virtual_gradients(
        &self,
        comm: &mut Communicator,
        micro: &[(Tensor, Tensor)],
        loss_factor: f64,
        stage: &StageParts,
        script: bool,
    ) -> Result<()> {
        let (rank, world, k) = (comm.rank(), comm.world_size(), micro.len());
        let v_all = world * k;
        let grad = &stage.flat.grad;
        if self.cfg.broadcast_buffers {
            ddp::broadcast(comm, self.buffers)?;
        }
        let copies = |from: &[Tensor]| -> Vec<Tensor> { from.iter().map(Tensor::copy).collect() };
        let put = |from: &[Tensor]| {
            tch::no_grad(|| {
                for (b, f) in self.buffers.iter().zip(from) {
                    b.shallow_clone().copy_(f);
                }
            })
        };
        let start = copies(self.buffers);
        let mut kept = None;
        let numel = grad.numel() as i64;
        let on = (grad.kind(), grad.device());
        let sum = Tensor::zeros([numel], on);
        let chunk = (GATHER / world as i64).clamp(1, numel.max(1));
        let gathered = Tensor::zeros([world as i64 * chunk], on);
        for (j, (x, y)) in micro.iter().enumerate() {
            if j > 0 {
                put(&start);
            }
            let _ = grad.shallow_clone().zero_();
            if script {
                tch::manual_seed(dropout_seed(self.cfg.seed, self.at.get(), rank + world * j));
            }
            let pass = self.loss(x, y)?;
            (&pass.loss * loss_factor).f_backward()?;
            self.count(&pass);
            if j == 0 {
                kept = Some(copies(self.buffers));
            }
            let mine = grad.view([-1]);
            add_round(
                &sum,
                &gathered,
                (j, world, v_all),
                chunk,
                |off, len, all| Ok(comm.all_gather(&mine.narrow(0, off, len), all)?),
            )?;
        }
        if let Some(kept) = kept {
            put(&kept);
        }
        tch::no_grad(|| grad.shallow_clone().view([-1]).copy_(&sum));
        Ok(())
    }

    /// One micro-batch's forward pass and mean loss (on the last stage's device).
    pub(super) fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Pass> {
        let raw = forward(self.model, self.stages, x, true, self.cfg.precision)?;
        if let Net::Script(s) = self.model {
            // The user's module in training mode: what evaluation's check cannot see (another
            // shape or dtype when training, an output that depends on no parameter).
            s.check_training_output(x, &raw, y.size()[0], self.cfg.batch_size)?;
        }
        let logits = raw.to_kind(Kind::Float);
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
    pub(super) fn count(&self, pass: &Pass) {
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
pub(super) struct Pass {
    pub(super) logits: Tensor,
    pub(super) labels: Tensor,
    pub(super) loss: Tensor,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gathered a few elements at a time, the rounds add the same bits as the whole gradients
    /// summed in the order of the virtual ranks: g0/V + g1/V + … (V = 6 on W = 3 processes).
    #[test]
    fn rounds_add_the_virtual_ranks_gradients_in_order_whatever_the_chunk() {
        let (world, k, numel) = (3usize, 2usize, 7i64);
        let v_all = world * k;
        // Gradient of virtual rank v: values of many magnitudes, so the order of a sum shows.
        // Element 0 cancels: g0/V + g1/V = 1 + 1e8 rounds to 1e8, less 1e8 is 0, while the
        // reverse order ends with -1e8 + 1e8 + 1 = 1; so the last check holds whatever randn draws.
        let first = [v_all as f32, 1e8 * v_all as f32, -1e8 * v_all as f32];
        let g: Vec<Tensor> = (0..v_all)
            .map(|v| {
                let gv = Tensor::randn([numel], (Kind::Float, Device::Cpu))
                    * 10f64.powi(v as i32 * 3 - 8);
                let _ = gv.get(0).fill_(first.get(v).copied().unwrap_or(0.0) as f64);
                gv
            })
            .collect();
        let mut expected = &g[0] / v_all as f64;
        for gv in &g[1..] {
            expected = &expected + gv / v_all as f64;
        }
        for chunk in [1, 2, 3, 7] {
            let sum = Tensor::zeros([numel], (Kind::Float, Device::Cpu));
            let buf = Tensor::zeros([world as i64 * chunk], (Kind::Float, Device::Cpu));
            for j in 0..k {
                add_round(&sum, &buf, (j, world, v_all), chunk, |off, len, all| {
                    for p in 0..world {
                        all.get(p as i64)
                            .copy_(&g[j * world + p].narrow(0, off, len));
                    }
                    Ok(())
                })
                .unwrap();
            }
            assert!(
                sum.equal(&expected),
                "chunk {chunk}: {sum:?} vs {expected:?}"
            );
        }
        // Another order would differ in the last bits (so the check above can fail).
        let mut reversed = &g[v_all - 1] / v_all as f64;
        for gv in g[..v_all - 1].iter().rev() {
            reversed = &reversed + gv / v_all as f64;
        }
        assert!(!reversed.equal(&expected));
    }
}
