//! `torch.optim.SGD` and `torch.optim.AdamW` (single-tensor code paths, same maths as foreach),
//! with their state as named tensors so checkpoints hold it, and the learning-rate schedules.

use std::collections::BTreeMap;

use tch::Tensor;

use gpu_runtime::{adam, fused};

use crate::flat::FlatParams;

/// Which update rule, and its hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    Sgd {
        momentum: f64,
        nesterov: bool,
        weight_decay: f64,
    },
    AdamW {
        beta1: f64,
        beta2: f64,
        eps: f64,
        weight_decay: f64,
    },
}

/// Why a checkpoint's optimiser state does not fit this optimiser ([`Optimizer::load_state`]):
/// each names the state's key (without `optim.`, except [`StateError::Missing`]'s, which is the
/// whole key expected).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("optimiser state {0}: not <parameter>.<what>")]
    NotParameterWhat(String),
    #[error("optimiser state {0} names no parameter of this model")]
    NoSuchParameter(String),
    #[error("optimiser state {key}: shape {saved:?}, parameter {parameter:?}")]
    Shape {
        key: String,
        saved: Vec<i64>,
        parameter: Vec<i64>,
    },
    #[error("optimiser state {0} is missing")]
    Missing(String),
}

/// An optimiser over named parameters, one by one or as one flat buffer.
#[derive(Debug)]
pub struct Optimizer {
    pub rule: Rule,
    params: Vec<(String, Tensor)>,
    /// `"<param>.momentum_buffer"`, `"<param>.exp_avg"`, `"<param>.exp_avg_sq"` (in flat mode
    /// one buffer each, `"flat.<what>"`).
    state: BTreeMap<String, Tensor>,
    /// Flat mode: the buffers and every parameter's name and place in them.
    flat: Option<(FlatParams, Vec<String>)>,
    /// AdamW's step count (shared by all parameters: they step together).
    pub steps: i64,
    /// The same count on the device, for graphed steps.
    device_steps: Option<Tensor>,
    /// AdamW's per-parameter work buffer (not state: never checkpointed).
    scratch: BTreeMap<String, Tensor>,
    /// PyTorch's fused kernels ([`Optimizer::use_fused`]).
    fused: bool,
}

use gpu_runtime::scalar::on_device_of as device_scalar;

/// Where a step's learning rate and AdamW's step count t come from: host values, or 0-dim
/// tensors on the device (graph-capturable).
enum StepOn<'a> {
    Host { lr: f64, t: f64 },
    Device { lr: &'a Tensor, t: Tensor },
}

impl Optimizer {
    pub fn new(rule: Rule, params: Vec<(String, Tensor)>) -> Optimizer {
        Optimizer {
            rule,
            params,
            state: BTreeMap::new(),
            flat: None,
            steps: 0,
            device_steps: None,
            scratch: BTreeMap::new(),
            fused: false,
        }
    }

    /// An optimiser over flattened parameters (`names[i]` names `FlatParams::new`'s parameter
    /// i): each step updates the whole flat buffer from the flat gradient at once. Checkpointed
    /// state keeps the per-parameter names, so either mode resumes the other's checkpoints.
    pub fn flat(rule: Rule, flat: &FlatParams, names: Vec<String>) -> Optimizer {
        Optimizer {
            params: vec![("flat".into(), flat.data.shallow_clone())],
            flat: Some((flat.shallow_clone(), names)),
            ..Optimizer::new(rule, Vec::new())
        }
    }

    /// Steps through PyTorch's fused kernels ([`fused::sgd`], `SGD(fused=True)`;
    /// [`fused::adamw`], `AdamW(fused=True)`): one pass over the parameters instead
    /// of four (SGD) or nine (AdamW); on an H100 at ResNet-18 batch 128 those passes are
    /// several % of a graphed step, by estimate. Same maths and state (checkpoints move between
    /// both), rounded as PyTorch's fused optimisers: an ulp off the single-tensor path here and
    /// there, which is why the CPU keeps that path by default (bit-exact with torch's).
    pub fn use_fused(&mut self, on: bool) {
        self.fused = on;
    }

    /// One step at learning rate `lr` with the parameters' current `.grad()`.
    pub fn step(&mut self, lr: f64) {
        self.steps += 1;
        self.update(StepOn::Host {
            lr,
            t: self.steps as f64,
        });
    }

    /// The same step with the learning rate read from `lr` (a 0-dim float tensor on the
    /// parameters' device) and AdamW's step count kept on the device too: nothing in it reads
    /// host values that change between steps, so it can be captured in a CUDA graph and
    /// replayed. Call [`Optimizer::prepare_device_steps`] before capture and
    /// [`Optimizer::count_replayed_step`] after every replay.
    pub fn step_on_device(&mut self, lr: &Tensor) {
        let st = self
            .device_steps
            .as_ref()
            .expect("prepare_device_steps before step_on_device")
            .shallow_clone();
        let _g = tch::no_grad_guard();
        let _ = st.shallow_clone().g_add_scalar_(1.0);
        self.update(StepOn::Device { lr, t: st });
    }

    /// Makes the device-side step counter (from the host one) that graphed AdamW steps use.
    pub fn prepare_device_steps(&mut self, device: tch::Device) {
        self.device_steps = Some(Tensor::from(self.steps as f32).to_device(device));
    }

    /// Counts a replayed step on the host (checkpoints save the host count).
    pub fn count_replayed_step(&mut self) {
        self.steps += 1;
    }

    fn update(&mut self, on: StepOn) {
        let _guard = tch::no_grad_guard();
        for (name, p) in &self.params {
            let g = match &self.flat {
                Some((f, _)) => f.grad.shallow_clone(),
                None => p.grad(),
            };
            if !g.defined() {
                continue;
            }
            let state = &mut self.state;
            match self.rule {
                Rule::Sgd {
                    momentum,
                    nesterov,
                    weight_decay,
                } => {
                    let h = fused::Sgd {
                        weight_decay,
                        momentum,
                        nesterov,
                    };
                    if self.fused {
                        sgd_fused(state, name, p, &g, h, &on);
                    } else {
                        sgd(state, name, p, &g, h, &on);
                    }
                }
                Rule::AdamW {
                    beta1,
                    beta2,
                    eps,
                    weight_decay,
                } => {
                    if self.fused {
                        let h = fused::AdamW {
                            beta1,
                            beta2,
                            eps,
                            weight_decay,
                        };
                        adamw_fused(state, name, p, &g, h, &on);
                    } else {
                        let h = adam::Hyper {
                            beta1,
                            beta2,
                            eps,
                            weight_decay,
                        };
                        adamw(state, &mut self.scratch, name, p, &g, h, &on);
                    }
                }
            }
        }
    }

    /// Whether this optimiser updates the parameter `name`.
    pub fn has_param(&self, name: &str) -> bool {
        match &self.flat {
            Some((_, names)) => names.iter().any(|n| n == name),
            None => self.params.iter().any(|(n, _)| n == name),
        }
    }

    /// Clears every parameter's gradient (`zero_grad(set_to_none=False)`).
    pub fn zero_grad(&mut self) {
        if let Some((f, _)) = &self.flat {
            let _ = f.grad.shallow_clone().zero_();
            return;
        }
        for (_, p) in &self.params {
            let mut g = p.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
    }

    /// The state to checkpoint (names prefixed `optim.`, per parameter in either mode), plus the
    /// step count.
    pub fn state(&self) -> BTreeMap<String, Tensor> {
        let mut m = BTreeMap::new();
        for (k, v) in &self.state {
            match (&self.flat, k.strip_prefix("flat.")) {
                (Some((f, names)), Some(what)) => {
                    for seg in &f.segments {
                        m.insert(format!("optim.{}.{what}", names[seg.index]), f.view(v, seg));
                    }
                }
                _ => {
                    m.insert(format!("optim.{k}"), v.shallow_clone());
                }
            }
        }
        m.insert("optim.steps".into(), Tensor::from(self.steps));
        m
    }

    /// Restores what [`Optimizer::state`] saved (tensors moved to the parameters' device).
    pub fn load_state(&mut self, saved: &BTreeMap<String, Tensor>) -> Result<(), StateError> {
        let device = self
            .params
            .first()
            .map_or(tch::Device::Cpu, |(_, p)| p.device());
        self.state.clear();
        for (k, v) in saved {
            let Some(k) = k.strip_prefix("optim.") else {
                continue;
            };
            if k == "steps" {
                self.steps = v.int64_value(&[]);
                continue;
            }
            let Some((f, names)) = &self.flat else {
                self.state.insert(k.to_string(), v.to_device(device));
                continue;
            };
            // `<param>.<what>` into the flat `<what>` buffer.
            let (name, what) = k
                .rsplit_once('.')
                .ok_or_else(|| StateError::NotParameterWhat(k.into()))?;
            let seg = f
                .segments
                .iter()
                .find(|s| names[s.index] == name)
                .ok_or_else(|| StateError::NoSuchParameter(k.into()))?;
            let buf = self
                .state
                .entry(format!("flat.{what}"))
                .or_insert_with(|| f.data.zeros_like())
                .shallow_clone();
            if v.size() != seg.size {
                return Err(StateError::Shape {
                    key: k.into(),
                    saved: v.size(),
                    parameter: seg.size.clone(),
                });
            }
            tch::no_grad(|| f.view(&buf, seg).copy_(v));
        }
        if let Some((_, names)) = &self.flat {
            // Every parameter's slot of every buffer must have been filled.
            for what in self.state.keys().filter_map(|k| k.strip_prefix("flat.")) {
                if let Some(n) = names
                    .iter()
                    .find(|n| !saved.contains_key(&format!("optim.{n}.{what}")))
                {
                    return Err(StateError::Missing(format!("optim.{n}.{what}")));
                }
            }
        }
        Ok(())
    }
}

/// Learning rate as a function of training progress.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Schedule {
    Constant,
    /// × gamma every `every` epochs (StepLR).
    Step {
        every: f64,
        gamma: f64,
    },
    /// Linear warm-up over `warmup` epochs, then cosine decay to 0 at the last epoch.
    Cosine {
        warmup: f64,
    },
}

impl Schedule {
    /// LR at `epoch` (fractional: epoch + batch / batches) of `epochs`, base `lr`.
    pub fn lr(self, lr: f64, epoch: f64, epochs: f64) -> f64 {
        match self {
            Schedule::Constant => lr,
            Schedule::Step { every, gamma } => lr * gamma.powf((epoch / every).floor()),
            // The first step gets lr/1000 rather than 0 (a zero step would be wasted).
            Schedule::Cosine { warmup } if epoch < warmup => lr * epoch.max(warmup * 1e-3) / warmup,
            Schedule::Cosine { warmup } => {
                let t = ((epoch - warmup) / (epochs - warmup).max(1e-9)).clamp(0.0, 1.0);
                lr * 0.5 * (1.0 + (std::f64::consts::PI * t).cos())
            }
        }
    }

    /// The largest LR of a run of `epochs` epochs from base `lr`, and the first epoch (0-based)
    /// that has it: `lr` itself, but for a step schedule whose gamma grows it.
    pub fn peak(self, lr: f64, epochs: usize) -> (f64, usize) {
        match self {
            Schedule::Step { every, gamma } if gamma > 1.0 && epochs > 0 => {
                // The last epoch's steps: epoch epochs - 1 + a fraction below 1.
                let k = ((epochs as f64 / every).ceil() - 1.0).max(0.0);
                (lr * gamma.powf(k), (k * every).ceil() as usize)
            }
            _ => (lr, 0),
        }
    }
}

/// PyTorch's fused SGD kernel on one parameter (its momentum buffer made on the first step).
fn sgd_fused(
    state: &mut BTreeMap<String, Tensor>,
    name: &str,
    p: &Tensor,
    g: &Tensor,
    h: fused::Sgd,
    on: &StepOn,
) {
    let key = format!("{name}.momentum_buffer");
    let (buf, first_step) = match (h.momentum != 0.0, state.get(&key)) {
        (false, _) => (None, false),
        (true, Some(b)) => (Some(b.shallow_clone()), false),
        (true, None) => {
            let b = p.zeros_like();
            state.insert(key, b.shallow_clone());
            (Some(b), true)
        }
    };
    let lr = match on {
        StepOn::Host { lr, .. } => fused::Lr::Host(*lr),
        StepOn::Device { lr, .. } => fused::Lr::Device(lr),
    };
    fused::sgd(p, g, buf.as_ref(), h, lr, first_step)
        .unwrap_or_else(|e| panic!("fused SGD step on {:?}: {e}", p.device()));
}

/// torch.optim.sgd._single_tensor_sgd (dampening 0), in place: the gradient becomes the step
/// direction and nothing is allocated (on the CPU each parameter-sized temporary cost a
/// page-faulted allocation: the step took 47 ms for ResNet-18's 11.2M parameters, 5 ms in
/// place). addcmul_ with a 0-dim factor is `a + b·c` rounded as the separate ops were.
fn sgd(
    state: &mut BTreeMap<String, Tensor>,
    name: &str,
    p: &Tensor,
    g: &Tensor,
    h: fused::Sgd,
    on: &StepOn,
) {
    let mut p = p.shallow_clone();
    let scalar = device_scalar(&p);
    let mut d = g.shallow_clone();
    if h.weight_decay != 0.0 {
        let _ = d.addcmul_(&p, &scalar(h.weight_decay));
    }
    if h.momentum != 0.0 {
        let key = format!("{name}.momentum_buffer");
        let buf = match state.get(&key) {
            Some(b) => {
                let mut b = b.shallow_clone();
                let _ = b.g_mul_scalar_(h.momentum).g_add_(&d);
                b
            }
            None => {
                let b = d.detach().copy();
                state.insert(key, b.shallow_clone());
                b
            }
        };
        if h.nesterov {
            let _ = d.addcmul_(&buf, &scalar(h.momentum));
        } else {
            d = buf;
        }
    }
    let _ = match on {
        StepOn::Host { lr, .. } => p.addcmul_(&d, &scalar(-lr)),
        StepOn::Device { lr, .. } => p.addcmul_(&d, &lr.neg()),
    };
}

/// AdamW's moments of `name` (zeros at the first step).
fn moments(state: &mut BTreeMap<String, Tensor>, name: &str, p: &Tensor) -> (Tensor, Tensor) {
    let mut get = |suffix: &str| {
        state
            .entry(format!("{name}.{suffix}"))
            .or_insert_with(|| p.zeros_like())
            .shallow_clone()
    };
    (get("exp_avg"), get("exp_avg_sq"))
}

/// PyTorch's fused AdamW kernel on one parameter.
fn adamw_fused(
    state: &mut BTreeMap<String, Tensor>,
    name: &str,
    p: &Tensor,
    g: &Tensor,
    h: fused::AdamW,
    on: &StepOn,
) {
    let (m, v) = moments(state, name, p);
    let (lr, step) = match on {
        StepOn::Host { lr, t } => (
            fused::Lr::Host(*lr),
            Tensor::full([], *t, (tch::Kind::Float, p.device())),
        ),
        StepOn::Device { lr, t } => (fused::Lr::Device(lr), t.shallow_clone()),
    };
    fused::adamw(p, g, &m, &v, &step, h, lr)
        .unwrap_or_else(|e| panic!("fused AdamW step on {:?}: {e}", p.device()));
}

/// torch.optim.adamw._single_tensor_adamw: the runtime's one Adam/AdamW step, with one scratch
/// buffer per parameter (not checkpointed).
fn adamw(
    state: &mut BTreeMap<String, Tensor>,
    scratch: &mut BTreeMap<String, Tensor>,
    name: &str,
    p: &Tensor,
    g: &Tensor,
    h: adam::Hyper,
    on: &StepOn,
) {
    let (m, v) = moments(state, name, p);
    let tmp = scratch
        .entry(name.to_string())
        .or_insert_with(|| p.zeros_like())
        .shallow_clone();
    let on = match on {
        StepOn::Host { lr, t } => adam::On::Host { lr: *lr, t: *t },
        StepOn::Device { lr, t } => adam::On::Device { lr, t },
    };
    adam::step(p, g, &m, &v, &tmp, h, &on);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    fn quad(p: &Tensor) {
        // loss = Σ p², grad = 2p
        (p * p).sum(Kind::Float).backward();
    }

    #[test]
    fn a_saved_state_that_does_not_fit_says_which_way() {
        let a = Tensor::zeros([2, 3], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let b = Tensor::zeros([4], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let flat = FlatParams::new(&[a, b]).unwrap();
        let rule = Rule::Sgd {
            momentum: 0.9,
            nesterov: false,
            weight_decay: 0.0,
        };
        let names = vec!["a".to_string(), "b".to_string()];
        let load = |saved: &[(&str, Tensor)]| {
            let saved: BTreeMap<String, Tensor> = saved
                .iter()
                .map(|(k, v)| (k.to_string(), v.shallow_clone()))
                .collect();
            Optimizer::flat(rule, &flat, names.clone())
                .load_state(&saved)
                .unwrap_err()
        };
        let buf = |n: &[i64]| Tensor::zeros(n, (Kind::Float, Device::Cpu));
        let e = load(&[("optim.nodot", buf(&[1]))]);
        assert!(
            matches!(&e, StateError::NotParameterWhat(k) if k == "nodot"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "optimiser state nodot: not <parameter>.<what>"
        );
        let e = load(&[("optim.c.momentum_buffer", buf(&[1]))]);
        assert!(matches!(&e, StateError::NoSuchParameter(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "optimiser state c.momentum_buffer names no parameter of this model"
        );
        let e = load(&[("optim.a.momentum_buffer", buf(&[3, 2]))]);
        assert!(
            matches!(&e, StateError::Shape { saved, .. } if saved == &[3, 2]),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "optimiser state a.momentum_buffer: shape [3, 2], parameter [2, 3]"
        );
        let e = load(&[("optim.a.momentum_buffer", buf(&[2, 3]))]);
        assert!(matches!(&e, StateError::Missing(k) if k == "optim.b.momentum_buffer"));
        assert_eq!(
            e.to_string(),
            "optimiser state optim.b.momentum_buffer is missing"
        );
        // A checkpoint that does not fit the run: fatal, as it was.
        let e = crate::Error::from(e);
        assert_eq!(error_class::Classify::class(&e), error_class::Class::Fatal);
    }

    #[test]
    fn sgd_nesterov_matches_torch_by_hand() {
        let p = Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true);
        let mut o = Optimizer::new(
            Rule::Sgd {
                momentum: 0.9,
                nesterov: true,
                weight_decay: 0.1,
            },
            vec![("w".into(), p.shallow_clone())],
        );
        // step 1: d = 2p + 0.1p = 2.1p; buf = d; d = d + 0.9 buf = 1.9·2.1p; p -= 0.1 d
        quad(&p);
        o.step(0.1);
        let want1: Vec<f32> = [1.0f32, -2.0]
            .iter()
            .map(|x| x - 0.1 * 1.9 * 2.1 * x)
            .collect();
        let got: Vec<f32> = Vec::try_from(&p.detach()).unwrap();
        for (a, b) in got.iter().zip(&want1) {
            assert!((a - b).abs() < 1e-6, "{got:?} {want1:?}");
        }
        assert!(o.state().contains_key("optim.w.momentum_buffer"));
    }

    #[test]
    fn adamw_first_step_moves_by_lr_times_sign() {
        let p = Tensor::from_slice(&[3.0f64, -4.0]).set_requires_grad(true);
        let mut o = Optimizer::new(
            Rule::AdamW {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
            },
            vec![("w".into(), p.shallow_clone())],
        );
        quad(&p);
        o.step(0.01);
        // Bias-corrected m/√v = sign(g) on step 1.
        let got: Vec<f64> = Vec::try_from(&p.detach()).unwrap();
        assert!(
            (got[0] - 2.99).abs() < 1e-7 && (got[1] + 3.99).abs() < 1e-7,
            "{got:?}"
        );
        let st = o.state();
        let mut o2 = Optimizer::new(o.rule, vec![("w".into(), p.shallow_clone())]);
        o2.load_state(&st).unwrap();
        assert_eq!(o2.steps, 1);
        assert!(o2.state()["optim.w.exp_avg"].equal(&st["optim.w.exp_avg"]));
        let _ = Device::Cpu;
    }

    /// Three AdamW steps with weight decay and changing LRs against the update written out
    /// scalar by scalar (torch.optim.AdamW's documented algorithm), in f64.
    #[test]
    fn adamw_matches_the_algorithm_written_out() {
        let (b1, b2, eps, wd) = (0.9, 0.999, 1e-8, 0.05);
        let x0 = [3.0f64, -4.0, 0.5];
        let p = Tensor::from_slice(&x0).set_requires_grad(true);
        let mut o = Optimizer::new(
            Rule::AdamW {
                beta1: b1,
                beta2: b2,
                eps,
                weight_decay: wd,
            },
            vec![("w".into(), p.shallow_clone())],
        );
        let (mut x, mut m, mut v) = (x0, [0.0f64; 3], [0.0f64; 3]);
        for (t, lr) in [(1, 0.1), (2, 0.05), (3, 0.2)] {
            o.zero_grad();
            quad(&p);
            o.step(lr);
            for i in 0..3 {
                let g = 2.0 * x[i]; // quad's gradient
                x[i] *= 1.0 - lr * wd;
                m[i] = b1 * m[i] + (1.0 - b1) * g;
                v[i] = b2 * v[i] + (1.0 - b2) * g * g;
                let (mh, vh) = (m[i] / (1.0 - b1.powi(t)), v[i] / (1.0 - b2.powi(t)));
                x[i] -= lr * mh / (vh.sqrt() + eps);
            }
            let got: Vec<f64> = Vec::try_from(&p.detach()).unwrap();
            for (a, b) in got.iter().zip(&x) {
                assert!((a - b).abs() < 1e-12, "step {t}: {got:?} vs {x:?}");
            }
        }
    }

    /// Two optimisers of `rule` on Σp² from `init`, six steps at decaying LRs: `a` by host steps,
    /// `b` (fused if asked) by `step_b(b, step, lr)`. Returns both parameters and optimisers.
    fn side_by_side(
        rule: Rule,
        init: &Tensor,
        fused_b: bool,
        step_b: impl Fn(&mut Optimizer, usize, f64),
    ) -> [(Tensor, Optimizer); 2] {
        let [(a, mut oa), (b, mut ob)] = [0, 1].map(|_| {
            let p = init.copy().set_requires_grad(true);
            let o = Optimizer::new(rule, vec![("w".into(), p.shallow_clone())]);
            (p, o)
        });
        ob.use_fused(fused_b);
        for step in 0..6 {
            let lr = 0.05 / (1.0 + step as f64);
            for (p, o) in [(&a, &mut oa), (&b, &mut ob)] {
                o.zero_grad();
                quad(p);
            }
            oa.step(lr);
            step_b(&mut ob, step, lr);
        }
        let diff = (&a - &b).abs().max().double_value(&[]);
        assert!(diff < 1e-6, "{rule:?}: {diff}");
        assert!(
            (a.detach() - init).abs().max().double_value(&[]) > 1e-2,
            "the steps moved the weights"
        );
        [(a, oa), (b, ob)]
    }

    /// A graph-ready step: the LR and AdamW's count from device tensors.
    fn device_step(o: &mut Optimizer, lr: f64) {
        o.step_on_device(&Tensor::from(lr as f32));
        o.count_replayed_step();
    }

    /// The graph-ready step computes what the host one does, to float rounding (f32 bias
    /// corrections and LR instead of f64 ones).
    #[test]
    fn device_steps_match_host_steps() {
        for rule in [
            Rule::Sgd {
                momentum: 0.9,
                nesterov: true,
                weight_decay: 5e-4,
            },
            Rule::AdamW {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.05,
            },
        ] {
            let init = Tensor::from_slice(&[0.5f32, -1.5, 2.0, 0.25]);
            let [(_, oa), (_, ob)] = side_by_side(rule, &init, false, |o, step, lr| {
                if step == 0 {
                    o.prepare_device_steps(Device::Cpu);
                }
                device_step(o, lr);
            });
            assert_eq!(oa.steps, ob.steps);
        }
    }

    /// The fused kernels take the same steps as the single-tensor paths (ulp-level rounding),
    /// from host and device LRs, and keep the same state.
    #[test]
    fn fused_steps_match_the_single_tensor_path() {
        for rule in [
            Rule::Sgd {
                momentum: 0.9,
                nesterov: false,
                weight_decay: 5e-4,
            },
            Rule::Sgd {
                momentum: 0.9,
                nesterov: true,
                weight_decay: 0.0,
            },
            Rule::Sgd {
                momentum: 0.0,
                nesterov: false,
                weight_decay: 0.1,
            },
            Rule::AdamW {
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.05,
            },
        ] {
            let init = Tensor::randn([1000], (Kind::Float, Device::Cpu));
            let [(_, oa), (_, ob)] = side_by_side(rule, &init, true, |o, step, lr| {
                if step % 2 == 0 {
                    o.step(lr);
                } else {
                    // The device's step count from the host's (as before a capture).
                    o.prepare_device_steps(Device::Cpu);
                    device_step(o, lr);
                }
            });
            let (sa, sb) = (oa.state(), ob.state());
            assert_eq!(sa.keys().collect::<Vec<_>>(), sb.keys().collect::<Vec<_>>());
            for (k, t) in &sa {
                let d = (t.to_kind(Kind::Double) - sb[k].to_kind(Kind::Double))
                    .abs()
                    .max()
                    .double_value(&[]);
                assert!(
                    d <= 1e-6 * t.abs().max().double_value(&[]).max(1.0),
                    "{rule:?} {k}: {d}"
                );
            }
        }
    }

    #[test]
    fn schedules() {
        assert_eq!(Schedule::Constant.lr(0.1, 5.0, 10.0), 0.1);
        assert!(
            (Schedule::Step {
                every: 30.0,
                gamma: 0.1
            }
            .lr(1.0, 65.0, 90.0)
                - 0.01)
                .abs()
                < 1e-12
        );
        let c = Schedule::Cosine { warmup: 2.0 };
        assert!((c.lr(1.0, 1.0, 10.0) - 0.5).abs() < 1e-6);
        assert!((c.lr(1.0, 2.0, 10.0) - 1.0).abs() < 1e-9);
        assert!((c.lr(1.0, 6.0, 10.0) - 0.5).abs() < 1e-9);
        assert!(c.lr(1.0, 10.0, 10.0).abs() < 1e-12);
    }
}
