//! StyleGAN2-ADA's `project()` (upstream `projector.py`, as seed 000 runs it), for a batch of
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

use stylegan2::np_random::RandomState;
use stylegan2::{Generator, Noise, Ops, SynthesisOptions};
use tch::{Device, Kind, Tensor};

pub use perceptual::Vgg16;

/// `project()`'s keyword arguments, upstream defaults (steps as seed 000: 150).
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
            cuda_graph: false,
        }
    }
}

impl Settings {
    /// The op sequence used on `device`.
    pub fn ops_on(&self, device: Device) -> Ops {
        self.ops.unwrap_or(if device.is_cuda() {
            Ops::Fast
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

fn shim_error(what: &str, e: torch_shim::Error) -> perceptual::Error {
    perceptual::Error::Script(tch::TchError::Kind(format!("CUDA graph, {what}: {e}")))
}

/// The text a panic was raised with ("unknown error" when it carried none).
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<String>(), panic.downcast_ref::<&str>()) {
        (Some(s), _) => s.clone(),
        (None, Some(s)) => s.to_string(),
        (None, None) => "unknown error".into(),
    }
}

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

/// Adam's per-step factors (see [`Adam::step`]).
#[derive(Debug)]
enum Factors {
    Host(f64, f64),
    Device(Tensor, Tensor),
}

/// Adam exactly as `torch.optim.Adam`'s single-tensor path computes it.
#[derive(Debug)]
struct Adam {
    m: Tensor,
    v: Tensor,
}

const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const EPS: f64 = 1e-8;

impl Adam {
    fn new(p: &Tensor) -> Self {
        Adam {
            m: p.zeros_like(),
            v: p.zeros_like(),
        }
    }

    /// The step's factors: −lr / (1 − β1^t) and √(1 − β2^t), as torch.optim.Adam computes
    /// them on the host.
    fn factors(lr: f64, step: i32) -> (f64, f64) {
        let bias_correction1 = 1.0 - BETA1.powi(step);
        let bias_correction2 = 1.0 - BETA2.powi(step);
        (-(lr / bias_correction1), bias_correction2.sqrt())
    }

    /// One step with the factors of [`Adam::factors`]: host scalars (torch's arithmetic to
    /// the last bit), or 0-dim f32 tensors on the device, which a captured CUDA graph reads at
    /// each replay (a tensor divisor rounds differently from a scalar one by an ulp).
    fn step(&mut self, p: &mut Tensor, grad: &Tensor, f: &Factors) {
        let _ = self.m.lerp_(grad, 1.0 - BETA1);
        let _ = self.v.g_mul_scalar_(BETA2);
        let _ = self.v.addcmul_(grad, &(grad * (1.0 - BETA2)));
        let (denom, step) = match f {
            Factors::Host(neg, sq) => (self.v.sqrt() / *sq + EPS, &self.m * *neg),
            Factors::Device(neg, sq) => (self.v.sqrt() / sq + EPS, &self.m * neg),
        };
        let _ = p.addcdiv_(&step, &denom);
    }
}

/// The projector: a generator, a perceptual network and the generator's W statistics.
#[derive(Debug)]
pub struct Projector<'a> {
    pub g: &'a Generator,
    pub vgg: &'a Vgg16,
    pub stats: &'a WStats,
    pub settings: Settings,
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
    pub fn project(
        &self,
        targets: &Tensor,
        mut on_step: impl FnMut(usize, &Tensor),
    ) -> perceptual::Result<Projection> {
        let g = self.g;
        let s = &self.settings;
        let dev = g.device();
        let (b, c, h, w) = targets.size4().expect("targets are [B,C,R,R]");
        let r = g.config.img_resolution;
        assert!(
            c == g.config.img_channels && h == r && w == r,
            "targets must be [B,{},{r},{r}]",
            g.config.img_channels
        );
        let num_ws = g.num_ws();
        let k = if s.w_plus { num_ws } else { 1 };

        let target_features = {
            let _ng = tch::no_grad_guard();
            self.vgg
                .features(&to_vgg_size(&targets.to_device(dev).to_kind(Kind::Float)))?
        };
        let w_opt = self
            .stats
            .w_avg
            .to_device(dev)
            .expand([b, k, g.config.w_dim], false)
            .copy()
            .set_requires_grad(true);
        let (bufs, w_noise) = self.draws(b, k);
        let bufs: Vec<Tensor> = bufs
            .into_iter()
            .map(|t| t.set_requires_grad(true))
            .collect();
        let mut adam_w = Adam::new(&w_opt);
        let mut adam_n: Vec<Adam> = bufs.iter().map(Adam::new).collect();
        let mut trajectory = Vec::new();
        let mut last_dist = None;
        // Each step's inputs live in fixed device tensors, set before the step runs: the step
        // body is then the same sequence of kernels every time, which a CUDA graph can replay.
        let f32_on = (Kind::Float, dev);
        let w_noise_now = Tensor::zeros([b, k, g.config.w_dim], f32_on);
        let graphed = dev.is_cuda()
            && s.cuda_graph
            && matches!(self.vgg, Vgg16::Native(_))
            && s.steps > GRAPH_WARMUP;
        // Adam's factors: host scalars when eager; 0-dim device tensors, filled before each
        // step, when graphed (only those are read at replay).
        let host_factors = std::cell::Cell::new((0.0, 1.0));
        let device_factors =
            graphed.then(|| Factors::Device(Tensor::zeros([], f32_on), Tensor::ones([], f32_on)));
        let ops = s.ops_on(dev);
        let mut body = || -> perceptual::Result<Tensor> {
            let host;
            let factors = match &device_factors {
                Some(f) => f,
                None => {
                    let (neg, sq) = host_factors.get();
                    host = Factors::Host(neg, sq);
                    &host
                }
            };
            let ws = &w_opt + &w_noise_now;
            let ws = if s.w_plus {
                ws
            } else {
                ws.repeat([1, num_ws, 1])
            };
            let opts = SynthesisOptions {
                noise: Noise::Given(&bufs),
                fused_modconv: s.fused_modconv,
                force_fp32: s.force_fp32,
                ops,
            };
            let synth = (g.synthesis.forward(&ws, &opts) + 1.0) * (255.0 / 2.0);
            let synth_features = self.vgg.features(&to_vgg_size(&synth))?;
            let dist = (&target_features - synth_features.to_kind(Kind::Float))
                .square()
                .sum_dim_intlist(&[1i64][..], false, Kind::Float);
            let reg = noise_regularizer(&bufs);
            let loss = (&dist + reg * s.regularize_noise_weight).sum(Kind::Float);
            let mut params: Vec<&Tensor> = vec![&w_opt];
            params.extend(bufs.iter());
            let grads = Tensor::run_backward(&[&loss], &params, false, false);
            let _ng = tch::no_grad_guard();
            // In-place updates through aliases (the closure only borrows the parameters).
            adam_w.step(&mut w_opt.shallow_clone(), &grads[0], factors);
            for ((p, a), gr) in bufs.iter().zip(adam_n.iter_mut()).zip(&grads[1..]) {
                a.step(&mut p.shallow_clone(), gr, factors);
            }
            for buf in bufs.iter() {
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
        };
        let set_inputs = |step: usize| {
            let _ng = tch::no_grad_guard();
            let (lr, scale) = s.schedule(step, self.stats.w_std);
            let (neg, sq) = Adam::factors(lr, step as i32 + 1);
            w_noise_now
                .shallow_clone()
                .copy_(&(w_noise.get(step as i64) * scale));
            host_factors.set((neg, sq));
            if let Some(Factors::Device(n, q)) = &device_factors {
                let _ = n.shallow_clone().fill_(neg);
                let _ = q.shallow_clone().fill_(sq);
            }
        };
        let mut record = |step: usize, dist: Tensor| {
            if s.trajectory {
                trajectory.push(w_opt.detach().copy());
            }
            on_step(step, &dist);
            last_dist = Some(dist);
        };
        // CUDA: the first steps run eagerly on a side stream (cuDNN picks its algorithms, the
        // fused kernels compile), then one step is captured and replayed for the rest.
        let mut graph = None;
        let mut step = 0;
        if let (Device::Cuda(i), true) = (dev, graphed) {
            let warm = torch_shim::on_side_stream(i, || -> perceptual::Result<()> {
                for st in 0..GRAPH_WARMUP {
                    set_inputs(st);
                    record(st, body()?);
                }
                Ok(())
            });
            warm.map_err(|e| shim_error("warm-up on a side stream", e))??;
            step = GRAPH_WARMUP;
            let mut gr = torch_shim::CudaGraph::new();
            set_inputs(step);
            // A capture runs nothing (the parameters are as the warm-up left them), so if it
            // fails (out of memory for the graph's pool, say) the batch goes on eagerly.
            let captured = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                gr.capture(i, &mut body)
            })) {
                Ok(Ok(Ok(dist))) => Ok(dist),
                Ok(Ok(Err(e))) => Err(e.to_string()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(panic) => Err(panic_message(&*panic)),
            };
            match captured {
                Ok(dist) => graph = Some((gr, dist)),
                Err(why) => {
                    log::warn!(
                        "capturing the projection step as a CUDA graph failed ({}); this batch runs eagerly",
                        why.lines().next().unwrap_or("")
                    );
                    drop(gr);
                    torch_shim::empty_cache()
                        .map_err(|e| shim_error("releasing the failed capture's memory", e))?;
                }
            }
        }
        while step < s.steps {
            set_inputs(step);
            let dist = match &graph {
                Some((gr, dist)) => {
                    gr.replay()
                        .map_err(|e| shim_error("replaying the step", e))?;
                    dist.shallow_clone()
                }
                None => body()?,
            };
            record(step, dist);
            step += 1;
        }
        let distance = match last_dist {
            Some(d) => Vec::<f64>::try_from(d.to_kind(Kind::Double).to_device(Device::Cpu))
                .unwrap_or_default(),
            None => vec![f64::NAN; b as usize],
        };
        if let Some((gr, dist)) = graph {
            // The graph's private pool goes back to the driver, so the next batch's warm-up and
            // capture find the memory free (the capture itself first releases the warm-up's).
            drop((gr, dist));
            torch_shim::empty_cache().map_err(|e| shim_error("releasing the graph's memory", e))?;
        }
        Ok(Projection {
            w: w_opt.detach(),
            distance,
            trajectory: s.trajectory.then(|| Tensor::stack(&trajectory, 1)),
            noise: bufs.into_iter().map(|t| t.detach()).collect(),
        })
    }

    /// The image of a projection (w and the optimised noise, noise_mode const), [B,C,R,R] in
    /// about [-1,1].
    pub fn render(&self, p: &Projection) -> Tensor {
        let _ng = tch::no_grad_guard();
        let num_ws = self.g.num_ws();
        let ws = if p.w.size()[1] == num_ws {
            p.w.shallow_clone()
        } else {
            p.w.repeat([1, num_ws, 1])
        };
        let opts = SynthesisOptions {
            noise: Noise::Given(&p.noise),
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
        let mut p = Tensor::from_slice(&[1.0f32, -2.0, 0.5]);
        let g = Tensor::from_slice(&[0.3f32, -4.0, 1e-3]);
        let mut a = Adam::new(&p);
        let (neg, sq) = Adam::factors(0.1, 1);
        a.step(&mut p, &g, &Factors::Host(neg, sq));
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
