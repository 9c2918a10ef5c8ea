//! PyTorch's fused optimiser kernels (`torch.optim.SGD(fused=True)`, `AdamW(fused=True)`): one
//! pass over a parameter instead of four (SGD) or nine (AdamW), with the learning rate on the
//! host or in a device tensor a captured CUDA graph reads. The trainer's `--fused-optim`; the
//! single-tensor AdamW maths both the trainer and the projector use by default is
//! [`crate::adam`].

use std::ffi::c_int;

use tch::Tensor;
use torch_sys::C_tensor;

use crate::shim::{Result, check, ffi, ptr};

/// The learning rate of a [`sgd`] or [`adamw`] step.
#[derive(Debug, Clone, Copy)]
pub enum Lr<'a> {
    Host(f64),
    /// A 0-dim float tensor on the parameter's device, read by the kernel (graph-safe).
    Device(&'a Tensor),
}

impl Lr<'_> {
    /// The shim's two arguments: the tensor (null for a host value) and the host value.
    fn raw(self) -> (*mut C_tensor, f64) {
        match self {
            Lr::Host(v) => (std::ptr::null_mut(), v),
            Lr::Device(t) => (ptr(t), 0.0),
        }
    }
}

/// SGD's hyper-parameters (dampening 0).
#[derive(Debug, Clone, Copy)]
pub struct Sgd {
    pub weight_decay: f64,
    pub momentum: f64,
    pub nesterov: bool,
}

/// `torch.optim.SGD(fused=True)`'s step (`at::_fused_sgd_`, dampening 0) on one parameter:
/// `d = g + weight_decay·p`; with a momentum buffer `buf = momentum·buf + d` (`buf = d` when
/// `first_step`), `d = nesterov ? d + momentum·buf : buf`; `p -= lr·d`. One kernel on CUDA
/// instead of four passes over the parameters; `g` is left as it was. Without momentum pass
/// `buf` None. Same maths as the single-tensor SGD, rounded as PyTorch's fused one (they
/// differ by an ulp here and there).
pub fn sgd(
    p: &Tensor,
    g: &Tensor,
    buf: Option<&Tensor>,
    h: Sgd,
    lr: Lr<'_>,
    first_step: bool,
) -> Result<()> {
    let (lr_t, lr) = lr.raw();
    let buf = buf.map_or(std::ptr::null_mut(), ptr);
    // SAFETY: live tensors (or null where the shim allows it), updated in place.
    check(unsafe {
        ffi::shk_fused_sgd(
            ptr(p),
            ptr(g),
            buf,
            h.weight_decay,
            h.momentum,
            lr_t,
            lr,
            h.nesterov as c_int,
            first_step as c_int,
        )
    })
}

/// AdamW's hyper-parameters (no amsgrad).
#[derive(Debug, Clone, Copy)]
pub struct AdamW {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// `torch.optim.AdamW(fused=True)`'s step (`at::_fused_adamw_`) on one parameter: decoupled
/// weight decay, the moments `m` and `v` updated, the bias-corrected update, in one kernel on
/// CUDA instead of nine passes. `step` is a 0-dim float tensor on `p`'s device holding this
/// step's count t (1 on the first step). `g` is left as it was.
pub fn adamw(
    p: &Tensor,
    g: &Tensor,
    m: &Tensor,
    v: &Tensor,
    step: &Tensor,
    h: AdamW,
    lr: Lr<'_>,
) -> Result<()> {
    let (lr_t, lr) = lr.raw();
    // SAFETY: live tensors (lr_t may be null), updated in place.
    check(unsafe {
        ffi::shk_fused_adamw(
            ptr(p),
            ptr(g),
            ptr(m),
            ptr(v),
            ptr(step),
            h.beta1,
            h.beta2,
            h.weight_decay,
            h.eps,
            lr_t,
            lr,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn fused_sgd_is_sgd() {
        // Two steps with momentum, weight decay and nesterov, by hand in f64.
        let o = (Kind::Float, Device::Cpu);
        let p = Tensor::from_slice(&[1.0f32, -2.0, 0.5]);
        let b = Tensor::zeros([3], o);
        let (wd, mu, lr) = (0.01, 0.9, 0.1);
        let (mut pw, mut bw) = (vec![1.0f64, -2.0, 0.5], vec![0.0f64; 3]);
        for (step, g) in [[0.3f32, -4.0, 1e-3], [1.0, 2.0, -3.0]].iter().enumerate() {
            let gt = Tensor::from_slice(g);
            let lr_t = Tensor::from(lr as f32);
            let lr_arg = if step == 0 {
                Lr::Host(lr)
            } else {
                Lr::Device(&lr_t)
            };
            sgd(
                &p,
                &gt,
                Some(&b),
                Sgd {
                    weight_decay: wd,
                    momentum: mu,
                    nesterov: true,
                },
                lr_arg,
                step == 0,
            )
            .unwrap();
            assert_eq!(
                Vec::<f32>::try_from(&gt).unwrap(),
                g.to_vec(),
                "the gradient is left as it was"
            );
            for i in 0..3 {
                let d = g[i] as f64 + wd * pw[i];
                bw[i] = if step == 0 { d } else { mu * bw[i] + d };
                pw[i] -= lr * (d + mu * bw[i]);
            }
        }
        for (got, want) in Vec::<f32>::try_from(&p).unwrap().iter().zip(&pw) {
            assert!((*got as f64 - want).abs() < 1e-6, "{got} vs {want}");
        }
        // Without momentum: plain decayed steps.
        let q = Tensor::from_slice(&[2.0f32]);
        let plain = Sgd {
            weight_decay: 0.0,
            momentum: 0.0,
            nesterov: false,
        };
        sgd(
            &q,
            &Tensor::from_slice(&[1.0f32]),
            None,
            plain,
            Lr::Host(0.5),
            true,
        )
        .unwrap();
        assert_eq!(q.double_value(&[0]), 1.5);
    }

    #[test]
    fn fused_adamw_first_step_is_decay_then_lr_times_sign() {
        // Step 1: m/(1-β1) = g and √(v/(1-β2)) = |g|, so p ← p(1 − lr·wd) − lr·g/(|g| + eps).
        let p = Tensor::from_slice(&[1.0f32, -2.0, 0.5]);
        let g = Tensor::from_slice(&[0.3f32, -4.0, 1e-3]);
        let (m, v) = (p.zeros_like(), p.zeros_like());
        let h = AdamW {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.1,
        };
        adamw(&p, &g, &m, &v, &Tensor::from(1.0f32), h, Lr::Host(0.01)).unwrap();
        let want = [
            1.0 * 0.999 - 0.01,
            -2.0 * 0.999 + 0.01,
            0.5 * 0.999 - 0.01 * 1e-3 / (1e-3 + 1e-8),
        ];
        for (got, want) in Vec::<f32>::try_from(&p).unwrap().iter().zip(want) {
            assert!((*got as f64 - want).abs() < 1e-6, "{got} vs {want}");
        }
        assert!((m.double_value(&[1]) - 0.1 * -4.0).abs() < 1e-6);
        assert!((v.double_value(&[1]) - 0.001 * 16.0).abs() < 1e-6);
    }
}
