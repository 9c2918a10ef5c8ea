//! `torch.amp.GradScaler`'s dynamic loss scale: start at 65536, ×2 after 2000 consecutive finite
//! steps, ×0.5 and skip the step when any gradient is inf/NaN.

use tch::{Kind, Tensor};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradScaler {
    pub scale: f64,
    pub growth_factor: f64,
    pub backoff_factor: f64,
    pub growth_interval: u64,
    /// Finite steps since the last change.
    pub growth_tracker: u64,
    pub enabled: bool,
}

impl GradScaler {
    /// torch's defaults.
    pub fn new(enabled: bool) -> Self {
        GradScaler {
            scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            growth_tracker: 0,
            enabled,
        }
    }

    /// The factor to multiply the loss by before `backward` (1 when disabled).
    pub fn loss_factor(&self) -> f64 {
        if self.enabled { self.scale } else { 1.0 }
    }

    /// Divides the gradients by the scale and says whether they are all finite (`unscale_`).
    pub fn unscale(&self, grads: &[Tensor]) -> bool {
        if !self.enabled {
            return true;
        }
        let _g = tch::no_grad_guard();
        let inv = 1.0 / self.scale;
        let mut finite = true;
        for g in grads.iter().filter(|g| g.defined()) {
            let _ = g.shallow_clone().g_mul_scalar_(inv);
            finite &= g.isfinite().all().int64_value(&[]) != 0;
        }
        finite
    }

    /// `update()` after a step that was taken (`finite`) or skipped.
    pub fn update(&mut self, finite: bool) {
        if !self.enabled {
            return;
        }
        if finite {
            self.growth_tracker += 1;
            if self.growth_tracker == self.growth_interval {
                self.scale *= self.growth_factor;
                self.growth_tracker = 0;
            }
        } else {
            self.scale *= self.backoff_factor;
            self.growth_tracker = 0;
        }
    }
}

/// Whether every element of `t` is finite (for checks outside the scaler).
pub fn all_finite(t: &Tensor) -> bool {
    t.isfinite().all().to_kind(Kind::Int64).int64_value(&[]) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_after_interval_and_backs_off_on_overflow() {
        let mut s = GradScaler::new(true);
        s.growth_interval = 3;
        for _ in 0..3 {
            s.update(true);
        }
        assert_eq!((s.scale, s.growth_tracker), (131072.0, 0));
        s.update(true);
        s.update(false);
        assert_eq!((s.scale, s.growth_tracker), (65536.0, 0));
        let g = Tensor::from_slice(&[65536.0f32, f32::INFINITY]);
        assert!(!s.unscale(std::slice::from_ref(&g)));
        assert_eq!(g.double_value(&[0]), 1.0);
        let g = Tensor::from_slice(&[131072.0f32]);
        assert!(s.unscale(std::slice::from_ref(&g)));
        assert_eq!(g.double_value(&[0]), 2.0);
        assert!(!all_finite(&Tensor::from_slice(&[f32::NAN])));
        let off = GradScaler::new(false);
        assert_eq!(off.loss_factor(), 1.0);
    }
}
