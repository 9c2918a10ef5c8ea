//! One Adam/AdamW step, as `torch.optim.adamw._single_tensor_adamw` computes it (amsgrad off;
//! `torch.optim.Adam` is the same with `weight_decay` 0, where the decay is an exact no-op):
//!
//! ```text
//! p ← p·(1 − lr·wd);  m ← lerp(m, g, 1 − β1);  v ← β2·v + (1 − β2)·g²
//! p ← p − lr/(1 − β1^t) · m / (√v / √(1 − β2^t) + eps)
//! ```
//!
//! with torch's roundings (the same ops in the same order), and without parameter-sized
//! temporaries: g², the denominator and m/denominator go through one scratch buffer per
//! parameter. The learning rate and step count come from the host, or from 0-dim tensors on the
//! device ([`On::Device`]), which a captured CUDA graph reads at each replay (the bias
//! corrections are then computed on the device, as `1 − exp(t·ln β)`: an ulp off the host's
//! `powf` here and there). The trainer's AdamW (single-tensor path) and the projector's Adam
//! are this function.

use tch::Tensor;

use crate::scalar;

/// The hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hyper {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Hyper {
    /// `torch.optim.Adam`'s defaults (no weight decay).
    pub const ADAM: Hyper = Hyper {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
    };
}

/// Where a step's learning rate and step count t (1 for the first step) come from.
#[derive(Debug)]
pub enum On<'a> {
    Host {
        lr: f64,
        t: f64,
    },
    /// 0-dim float tensors on the parameters' device.
    Device {
        lr: &'a Tensor,
        t: &'a Tensor,
    },
}

/// One parameter's moments and work buffer.
#[derive(Debug)]
pub struct Moments {
    pub m: Tensor,
    pub v: Tensor,
    pub scratch: Tensor,
}

impl Moments {
    /// Zero moments for `p`.
    pub fn zeros_like(p: &Tensor) -> Moments {
        Moments {
            m: p.zeros_like(),
            v: p.zeros_like(),
            scratch: p.zeros_like(),
        }
    }
}

/// Updates `p` in place from its gradient `g` (under no_grad).
pub fn step(p: &Tensor, g: &Tensor, m: &Tensor, v: &Tensor, scratch: &Tensor, h: Hyper, on: &On) {
    let _guard = tch::no_grad_guard();
    let (mut p, mut m, mut v, mut tmp) = (
        p.shallow_clone(),
        m.shallow_clone(),
        v.shallow_clone(),
        scratch.shallow_clone(),
    );
    let constant = scalar::on_device_of(&p);
    if h.weight_decay != 0.0 {
        let _ = match on {
            On::Host { lr, .. } => p.g_mul_scalar_(1.0 - lr * h.weight_decay),
            On::Device { lr, .. } => p.g_mul_(&(*lr * -h.weight_decay + 1.0)),
        };
    }
    let _ = m.lerp_(g, 1.0 - h.beta1);
    let _ = g.mul_out(&tmp, g);
    let _ = v
        .g_mul_scalar_(h.beta2)
        .addcmul_(&tmp, &constant(1.0 - h.beta2));
    let _ = v.sqrt_out(&tmp);
    // denom = √v / √(1 − β2^t) + eps; p −= lr / (1 − β1^t) · m / denom.
    let factor = match on {
        On::Host { lr, t } => {
            let (bc1, bc2) = (1.0 - h.beta1.powf(*t), 1.0 - h.beta2.powf(*t));
            let _ = tmp.g_div_scalar_(bc2.sqrt()).g_add_scalar_(h.eps);
            constant(-lr / bc1)
        }
        On::Device { lr, t } => {
            // 1 − β^t = 1 − exp(t·ln β), all on the device.
            let bc1 = -(*t * h.beta1.ln()).exp() + 1.0;
            let bc2 = -(*t * h.beta2.ln()).exp() + 1.0;
            let _ = tmp.g_div_(&bc2.sqrt()).g_add_scalar_(h.eps);
            (*lr / bc1).neg()
        }
    };
    let _ = m.div_out(&tmp, &tmp);
    let _ = p.addcmul_(&tmp, &factor);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    /// torch's algorithm written out in f64, for a few steps with weight decay.
    #[test]
    fn matches_the_algorithm_and_the_device_path_the_host_path() {
        let h = Hyper {
            weight_decay: 0.01,
            ..Hyper::ADAM
        };
        let p0 = Tensor::from_slice(&[0.5f64, -1.0, 2.0, 0.0]);
        let grads = [
            Tensor::from_slice(&[0.1f64, -0.2, 0.3, 1e-3]),
            Tensor::from_slice(&[-0.05f64, 0.4, 0.0, 2.0]),
            Tensor::from_slice(&[0.2f64, 0.2, -0.1, -1.0]),
        ];
        let lr = 0.1;
        let run = |device_side: bool| {
            let p = p0.copy();
            let mo = Moments::zeros_like(&p);
            for (i, g) in grads.iter().enumerate() {
                let t = (i + 1) as f64;
                let (lr_t, t_t) = (
                    Tensor::full([], lr, (Kind::Double, Device::Cpu)),
                    Tensor::full([], t, (Kind::Double, Device::Cpu)),
                );
                let on = if device_side {
                    On::Device { lr: &lr_t, t: &t_t }
                } else {
                    On::Host { lr, t }
                };
                step(&p, g, &mo.m, &mo.v, &mo.scratch, h, &on);
            }
            Vec::<f64>::try_from(&p).unwrap()
        };
        // Written out.
        let mut p: Vec<f64> = Vec::try_from(&p0).unwrap();
        let (mut m, mut v) = (vec![0.0; 4], vec![0.0; 4]);
        for (i, g) in grads.iter().enumerate() {
            let g: Vec<f64> = Vec::try_from(g).unwrap();
            let t = (i + 1) as i32;
            for k in 0..4 {
                p[k] *= 1.0 - lr * h.weight_decay;
                m[k] += (g[k] - m[k]) * (1.0 - h.beta1);
                v[k] = h.beta2 * v[k] + (1.0 - h.beta2) * g[k] * g[k];
                let denom = v[k].sqrt() / (1.0 - h.beta2.powi(t)).sqrt() + h.eps;
                p[k] -= lr / (1.0 - h.beta1.powi(t)) * m[k] / denom;
            }
        }
        for (a, b) in run(false).iter().zip(&p) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
        for (a, b) in run(true).iter().zip(run(false)) {
            assert!((a - b).abs() < 1e-12, "device {a} vs host {b}");
        }
    }
}
