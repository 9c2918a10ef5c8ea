//! StyleGAN2-ADA's `project()` (upstream `projector.py`), for a batch of
//! images at once.
//!
//! The maths per image is upstream's: start from `w_avg`, optimise w ([1,1,w_dim], or
//! [1,num_ws,w_dim] in W+) and every noise buffer with Adam(β 0.9/0.999, eps 1e-8), lr
//! `0.1 · rampdown · rampup` (cosine ramp-down over the last 25 %, linear ramp-up over the first
//! 5 %), w-noise `w_std · 0.05 · max(0, 1 − t/0.75)²`, images mapped to [0,255] and area-pooled to
//! 256² when larger, squared LPIPS feature distance, noise regulariser (squared mean of the
//! products with the buffer rolled by one pixel, both axes, over the 2×-pooled pyramid down to
//! 8²) weighted 1e5, buffers renormalised after each step.
//!
//! Batching: each image has its own w, its own noise buffers ([B,1,r,r]) and its own Adam
//! moments; the loss is the sum of the per-image losses, so each image's gradient (and Adam's
//! element-wise update) is what it would be alone. Random draws come from numpy's
//! `RandomState(seed)` per image (noise-buffer initialisation in layer order, then the w-noise of
//! each step), so an image gets the same draws in any batch: batched equals one by one.

use gpu_runtime::adam::{self, Moments};
use gpu_runtime::graph::{self, Graphed};
use gpu_runtime::scalar::DeviceScalar;
use stylegan2::np_random::RandomState;
use stylegan2::{Generator, Noise, Ops, SynthesisOptions};
use tch::{Device, Kind, Tensor};

pub use perceptual::Vgg16;

/// `project()`'s keyword arguments, upstream defaults (but 150 steps, as the usual projection script runs it).
#[derive(Debug, Clone)]
pub struct Settings {
    pub steps: usize,
    pub initial_learning_rate: f64,
    pub initial_noise_factor: f64,
    pub lr_rampdown_length: f64,
    pub lr_rampup_length: f64,
    pub noise_ramp_length: f64,
    pub regularize_noise_weight: f64,
    /// Optimise one w per layer ([1,num_ws,w_dim]) instead of one w ([1,1,w_dim]).
    pub w_plus: bool,
    /// Seed of each image's `RandomState`.
    pub seed: u32,
    /// Keep w after every step.
    pub trajectory: bool,
    /// Run the generator's fp16 blocks in fp32 too.
    pub force_fp32: bool,
    /// The synthesis' `fused_modconv` (None: upstream's choice, fused in fp32 or at batch 1);
    /// only with `Ops::Reference`.
    pub fused_modconv: Option<bool>,
    /// The synthesis' op sequence: upstream's `Reference` ops or the `Fast` reformulation
    /// (same maths, other rounding); None: Fast on CUDA, Reference on the CPU (where the phase
    /// convolutions' extra FLOPs cost more than the memory passes they save).
    pub ops: Option<Ops>,
    /// The timed kernel choices of the default `Fast` ops (the VGG16's layout is the VGG's own
    /// setting: `Vgg16::set_kernel_choices`).
    pub kernel_choices: stylegan2::tune::KernelChoices,
    /// On CUDA, capture one step as a CUDA graph after a few eager ones and replay it (every
    /// step launches the same kernels; the host's per-op cost goes): same distances, +12-19 %
    /// images/s on an H100. It took about 3x the eager peak GPU memory while the warm-up's
    /// cached blocks stayed beside the graph's pool; the capture now releases them first and
    /// the pool is released after each batch (not yet measured on a GPU), so off by default.
    /// Only with the native VGG (a TorchScript module runs eagerly). A batch whose capture
    /// fails (out of memory for the graph's pool, say) goes on eagerly, with a warning.
    pub cuda_graph: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            steps: 150,
            initial_learning_rate: 0.1,
            initial_noise_factor: 0.05,
            lr_rampdown_length: 0.25,
            lr_rampup_length: 0.05,
            noise_ramp_length: 0.75,
            regularize_noise_weight: 1e5,
            w_plus: false,
            seed: 0,
            trajectory: false,
            force_fp32: false,
            fused_modconv: None,
            ops: None,
            kernel_choices: Default::default(),
            cuda_graph: false,
        }
    }
}

impl Settings {
    /// The op sequence used on `device`.
    pub fn ops_on(&self, device: Device) -> Ops {
        self.ops.unwrap_or(if device.is_cuda() {
            Ops::Fast(self.kernel_choices)
        } else {
            Ops::Reference
        })
    }

    /// Learning rate and w-noise scale of `step`, computed in f64 as upstream (numpy) does.
    pub fn schedule(&self, step: usize, w_std: f64) -> (f64, f64) {
        let t = step as f64 / self.steps as f64;
        let w_noise_scale =
            w_std * self.initial_noise_factor * (1.0 - t / self.noise_ramp_length).max(0.0).powi(2);
        let mut lr_ramp = ((1.0 - t) / self.lr_rampdown_length).min(1.0);
        lr_ramp = 0.5 - 0.5 * (lr_ramp * std::f64::consts::PI).cos();
        lr_ramp *= (t / self.lr_rampup_length).min(1.0);
        (self.initial_learning_rate * lr_ramp, w_noise_scale)
    }
}

/// `w_avg` [1,1,w_dim] and `w_std` of a network (upstream uses 10,000 samples): computed once
/// per process and network, not per image.
#[derive(Debug)]
pub struct WStats {
    pub w_avg: Tensor,
    pub w_std: f64,
}

impl WStats {
    pub fn compute(g: &Generator, samples: i64) -> Self {
        let (w_avg, w_std) = g.w_avg_std(samples);
        WStats { w_avg, w_std }
    }
}

/// Eager steps before a CUDA graph is captured.
const GRAPH_WARMUP: usize = 3;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Perceptual(#[from] perceptual::Error),
    /// Warming up or replaying the graphed step (a failed capture is not an error: the batch
    /// runs eagerly, see [`gpu_runtime::graph`]).
    #[error("CUDA graph: {0}")]
    Cuda(#[from] gpu_runtime::shim::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl error_class::Classify for Error {}

/// The outcome for a batch.
#[derive(Debug)]
pub struct Projection {
    /// Final w per image: [B, 1 or num_ws, w_dim].
    pub w: Tensor,
    /// Each image's feature distance at the last step (the value upstream logs last).
    pub distance: Vec<f64>,
    /// w after each step, [B, steps, 1 or num_ws, w_dim], when asked for.
    pub trajectory: Option<Tensor>,
    /// The optimised noise buffers, [B,1,r,r] per noise layer.
    pub noise: Vec<Tensor>,
}

/// The projector: a generator, a perceptual network and the generator's W statistics.
#[derive(Debug)]
pub struct Projector<'a> {
    pub g: &'a Generator,
    pub vgg: &'a Vgg16,
    pub stats: &'a WStats,
    pub settings: Settings,
}

/// Each step's inputs, in fixed tensors set before the step runs (so the step body is the same
/// kernels every time): the w-noise, and Adam's learning rate and step count — host numbers
/// when eager, 0-dim device tensors when graphed (only those are read at replay).
struct StepInputs {
    w_noise: Tensor,
    host: std::cell::Cell<(f64, f64)>,
    device: Option<(DeviceScalar, DeviceScalar)>,
}

impl StepInputs {
    fn new(b: i64, k: i64, w_dim: i64, dev: Device, graphed: bool) -> StepInputs {
        StepInputs {
            w_noise: Tensor::zeros([b, k, w_dim], (Kind::Float, dev)),
            host: std::cell::Cell::new((0.0, 1.0)),
            device: graphed.then(|| (DeviceScalar::new(0.0, dev), DeviceScalar::new(1.0, dev))),
        }
    }

    /// Step `step`'s w-noise (of `w_noise`, all steps' draws), learning rate and step count.
    fn set(&self, s: &Settings, step: usize, w_std: f64, w_noise: &Tensor) {
        let _ng = tch::no_grad_guard();
        let (lr, scale) = s.schedule(step, w_std);
        self.w_noise
            .shallow_clone()
            .copy_(&(w_noise.get(step as i64) * scale));
        let t = (step + 1) as f64;
        self.host.set((lr, t));
        if let Some((l, n)) = &self.device {
            l.set(lr);
            n.set(t);
        }
    }

    fn adam_on(&self) -> adam::On<'_> {
        match &self.device {
            Some((lr, t)) => adam::On::Device {
                lr: lr.tensor(),
                t: t.tensor(),
            },
            None => {
                let (lr, t) = self.host.get();
                adam::On::Host { lr, t }
            }
        }
    }
}

/// Images [B,C,H,W] in [0,255] as the VGG sees them: area-pooled to 256² when larger.
fn to_vgg_size(img: &Tensor) -> Tensor {
    if img.size()[2] > 256 {
        img.adaptive_avg_pool2d([256, 256])
    } else {
        img.shallow_clone()
    }
}

/// Upstream's noise regulariser, per image: [B].
pub fn noise_regularizer(bufs: &[Tensor]) -> Tensor {
    let mut reg: Option<Tensor> = None;
    for v in bufs {
        let mut noise = v.shallow_clone();
        loop {
            for dim in [3, 2] {
                let m = (&noise * noise.roll([1], [dim]))
                    .mean_dim(&[1i64, 2, 3][..], false, Kind::Float)
                    .square();
                reg = Some(match reg {
                    Some(r) => r + m,
                    None => m,
                });
            }
            if noise.size()[2] <= 8 {
                break;
            }
            noise = noise.avg_pool2d([2, 2], [2, 2], [0, 0], false, true, None::<i64>);
        }
    }
    reg.expect("at least one noise buffer")
}

impl Projector<'_> {
    /// Per image (same stream for every image): noise-buffer initialisations, then the w-noise
    /// draws of every step.
    fn draws(&self, batch: i64, k: i64) -> (Vec<Tensor>, Tensor) {
        let layers = self.g.synthesis.noise_layers();
        let sizes: Vec<i64> = layers
            .iter()
            .map(|(_, l)| l.noise_const.size()[0])
            .collect();
        let w_dim = self.g.config.w_dim;
        let steps = self.settings.steps as i64;
        let mut rs = RandomState::new(self.settings.seed);
        let bufs: Vec<Tensor> = sizes
            .iter()
            .map(|&r| {
                let v: Vec<f32> = rs
                    .randn((r * r) as usize)
                    .into_iter()
                    .map(|x| x as f32)
                    .collect();
                Tensor::from_slice(&v).reshape([1, 1, r, r])
            })
            .collect();
        let wn: Vec<f32> = rs
            .randn((steps * k * w_dim) as usize)
            .into_iter()
            .map(|x| x as f32)
            .collect();
        let wn = Tensor::from_slice(&wn).reshape([steps, 1, k, w_dim]);
        let dev = self.g.device();
        let bufs = bufs
            .iter()
            .map(|b| b.repeat([batch, 1, 1, 1]).to_device(dev))
            .collect();
        (bufs, wn.repeat([1, batch, 1, 1]).to_device(dev))
    }

    /// Projects `targets` [B, C, R, R] (values in [0,255], R = the generator's resolution).
    /// `on_step(step, dist)` sees each step's per-image distances [B] (a device tensor: reading
    /// it synchronises).
    ///
    /// Kept in one piece: upstream's projector loop, step for step (parity with it is the point).
    pub fn project(
        &self,
        targets: &Tensor,
        mut on_step: impl FnMut(usize, &Tensor),
    ) -> Result<Projection> {
        let s = &self.settings;
        let dev = self.g.device();
        let b = self.check(targets);
        let k = if s.w_plus { self.g.num_ws() } else { 1 };
        let target_features = {
            let _ng = tch::no_grad_guard();
            self.vgg
                .features(&to_vgg_size(&targets.to_device(dev).to_kind(Kind::Float)))?
        };
        // The parameters: w (from w_avg), then the noise buffers; each with its Adam moments.
        let (bufs, w_noise) = self.draws(b, k);
        let w_opt = self
            .stats
            .w_avg
            .to_device(dev)
            .expand([b, k, self.g.config.w_dim], false)
            .copy();
        let params: Vec<Tensor> = std::iter::once(w_opt)
            .chain(bufs)
            .map(|t| t.set_requires_grad(true))
            .collect();
        let moments: Vec<Moments> = params.iter().map(Moments::zeros_like).collect();
        let graphed = dev.is_cuda()
            && s.cuda_graph
            && matches!(self.vgg, Vgg16::Native(_))
            && s.steps > GRAPH_WARMUP;
        let inputs = StepInputs::new(b, k, self.g.config.w_dim, dev, graphed);
        let body = || self.step(&target_features, &params, &moments, &inputs);
        // CUDA: the first steps run eagerly on a side stream, then one step is captured and
        // replayed for the rest (gpu_runtime::graph: a failed capture runs the batch eagerly).
        let mut runner = match dev {
            Device::Cuda(device) if graphed => Some(Graphed::new(
                graph::Cuda { device },
                GRAPH_WARMUP,
                "the projection step",
            )),
            _ => None,
        };
        let mut trajectory = Vec::new();
        let mut last_dist = None;
        for step in 0..s.steps {
            inputs.set(s, step, self.stats.w_std, &w_noise);
            let dist = match &mut runner {
                Some(r) => r.step(|_| body())?.0,
                None => body()?,
            };
            if s.trajectory {
                trajectory.push(params[0].detach().copy());
            }
            on_step(step, &dist);
            last_dist = Some(dist);
        }
        let distance = match last_dist {
            Some(d) => Vec::<f64>::try_from(d.to_kind(Kind::Double).to_device(Device::Cpu))
                .unwrap_or_default(),
            None => vec![f64::NAN; b as usize],
        };
        if let Some(r) = runner {
            // The graph's private pool goes back to the driver, so the next batch's warm-up and
            // capture find the memory free (the capture itself first releases the warm-up's).
            r.release()?;
        }
        let mut params = params.into_iter().map(|t| t.detach());
        Ok(Projection {
            w: params.next().expect("w is the first parameter"),
            distance,
            trajectory: s.trajectory.then(|| Tensor::stack(&trajectory, 1)),
            noise: params.collect(),
        })
    }

    /// The batch size of `targets`, which must be [B, C, R, R] for this generator.
    fn check(&self, targets: &Tensor) -> i64 {
        let (b, c, h, w) = targets.size4().expect("targets are [B,C,R,R]");
        let (r, channels) = (self.g.config.img_resolution, self.g.config.img_channels);
        assert!(
            c == channels && h == r && w == r,
            "targets must be [B,{channels},{r},{r}]"
        );
        b
    }

    /// One optimisation step (w and the noise buffers, then the buffers renormalised) with the
    /// inputs [`StepInputs::set`] put in place; the per-image distances [B]. The same kernels
    /// every time, which a CUDA graph can replay.
    fn step(
        &self,
        target_features: &Tensor,
        params: &[Tensor],
        moments: &[Moments],
        inputs: &StepInputs,
    ) -> Result<Tensor> {
        let (g, s) = (self.g, &self.settings);
        let (w_opt, bufs) = (&params[0], &params[1..]);
        let ws = w_opt + &inputs.w_noise;
        let ws = if s.w_plus {
            ws
        } else {
            ws.repeat([1, g.num_ws(), 1])
        };
        let opts = SynthesisOptions {
            noise: Noise::Given(bufs),
            fused_modconv: s.fused_modconv,
            force_fp32: s.force_fp32,
            ops: s.ops_on(g.device()),
        };
        let synth = (g.synthesis.forward(&ws, &opts) + 1.0) * (255.0 / 2.0);
        let synth_features = self.vgg.features(&to_vgg_size(&synth))?;
        let dist = (target_features - synth_features.to_kind(Kind::Float))
            .square()
            .sum_dim_intlist(&[1i64][..], false, Kind::Float);
        let reg = noise_regularizer(bufs);
        let loss = (&dist + reg * s.regularize_noise_weight).sum(Kind::Float);
        let grads = Tensor::run_backward(&[&loss], params, false, false);
        let on = inputs.adam_on();
        for ((p, gr), m) in params.iter().zip(&grads).zip(moments) {
            adam::step(p, gr, &m.m, &m.v, &m.scratch, adam::Hyper::ADAM, &on);
        }
        let _ng = tch::no_grad_guard();
        for buf in bufs {
            let mut buf = buf.shallow_clone();
            let mean = buf.mean_dim(&[1i64, 2, 3][..], true, Kind::Float);
            let _ = buf.g_sub_(&mean);
            let scale = buf
                .square()
                .mean_dim(&[1i64, 2, 3][..], true, Kind::Float)
                .rsqrt();
            let _ = buf.g_mul_(&scale);
        }
        Ok(dist.detach())
    }

    /// The image of a projection (w and the optimised noise, noise_mode const), [B,C,R,R] in
    /// about [-1,1].
    pub fn render(&self, p: &Projection) -> Tensor {
        self.render_w(&p.w, &p.noise)
    }

    /// The images of `w` [B, 1 or num_ws, w_dim] with the noise buffers `noise` (a projection's
    /// optimised ones), [B,C,R,R] in about [-1,1]: upstream's video frames, each step's w
    /// rendered with the final noise.
    pub fn render_w(&self, w: &Tensor, noise: &[Tensor]) -> Tensor {
        let _ng = tch::no_grad_guard();
        let num_ws = self.g.num_ws();
        let ws = if w.size()[1] == num_ws {
            w.shallow_clone()
        } else {
            w.repeat([1, num_ws, 1])
        };
        let opts = SynthesisOptions {
            noise: Noise::Given(noise),
            fused_modconv: None,
            force_fp32: self.settings.force_fp32,
            ops: self.settings.ops_on(self.g.device()),
        };
        self.g.synthesis.forward(&ws, &opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_upstreams() {
        let s = Settings::default();
        // step 0: t = 0 -> lr 0; w-noise at full scale.
        assert_eq!(s.schedule(0, 2.0), (0.0, 2.0 * 0.05));
        // t = 0.02: ramp-up 0.4, no ramp-down yet.
        let (lr, _) = s.schedule(3, 1.0);
        assert!((lr - 0.1 * 0.4).abs() < 1e-12, "{lr}");
        // t = 0.9: ramp-down (1-0.9)/0.25 = 0.4 -> 0.5 - 0.5 cos(0.4 pi); w-noise 0 after t = 0.75.
        let (lr, wn) = s.schedule(135, 1.0);
        let want = 0.1 * (0.5 - 0.5 * (0.4 * std::f64::consts::PI).cos());
        assert!((lr - want).abs() < 1e-12, "{lr} vs {want}");
        assert_eq!(wn, 0.0);
    }

    #[test]
    fn adam_matches_the_closed_form_first_step() {
        // After one step from zero moments, Adam moves each element by -lr * sign(g) (up to eps).
        let p = Tensor::from_slice(&[1.0f32, -2.0, 0.5]);
        let g = Tensor::from_slice(&[0.3f32, -4.0, 1e-3]);
        let m = Moments::zeros_like(&p);
        let on = adam::On::Host { lr: 0.1, t: 1.0 };
        adam::step(&p, &g, &m.m, &m.v, &m.scratch, adam::Hyper::ADAM, &on);
        let got = Vec::<f32>::try_from(&p).unwrap();
        for (x, want) in got.iter().zip([0.9f32, -1.9, 0.4]) {
            assert!((x - want).abs() < 1e-5, "{got:?}");
        }
    }

    #[test]
    fn regularizer_is_per_image() {
        tch::manual_seed(0);
        let a = Tensor::randn([1, 1, 16, 16], (Kind::Float, Device::Cpu));
        let b = Tensor::randn([1, 1, 16, 16], (Kind::Float, Device::Cpu));
        let both = noise_regularizer(&[Tensor::cat(&[&a, &b], 0)]);
        let (ra, rb) = (noise_regularizer(&[a]), noise_regularizer(&[b]));
        assert!(both.allclose(&Tensor::cat(&[ra, rb], 0), 1e-6, 1e-9, false));
    }
}
