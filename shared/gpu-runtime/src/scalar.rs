//! Scalars as 0-dim tensors on a device.
//!
//! An op's scalar operand given as a host number is baked into a captured CUDA graph; one that
//! changes between steps (a learning rate, a step count) must be a device tensor the caller
//! refills before each replay. A few ops also refuse a CPU 0-dim operand for a CUDA tensor
//! (`addcmul_`'s third), so the constants they take are made on the device too — filled by a
//! kernel, not copied from the host: no synchronisation, and capturable.

use tch::Tensor;

/// A maker of 0-dim tensors of `like`'s dtype on `like`'s device.
pub fn on_device_of(like: &Tensor) -> impl Fn(f64) -> Tensor + use<> {
    let opts = (like.kind(), like.device());
    move |v| Tensor::full([], v, opts)
}

/// A 0-dim tensor the caller refills before each step ([`DeviceScalar::set`]).
#[derive(Debug)]
pub struct DeviceScalar(Tensor);

impl DeviceScalar {
    /// A float32 scalar holding `v` on `device`.
    pub fn new(v: f64, device: tch::Device) -> DeviceScalar {
        DeviceScalar(Tensor::full([], v, (tch::Kind::Float, device)))
    }

    /// Fills it with `v` (a kernel on the device: queued like any op, no synchronisation).
    pub fn set(&self, v: f64) {
        let _ = self.0.shallow_clone().fill_(v);
    }

    pub fn tensor(&self) -> &Tensor {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_take_the_dtype_and_device_and_refill_in_place() {
        let like = Tensor::zeros([3], (tch::Kind::Double, tch::Device::Cpu));
        let s = on_device_of(&like)(0.25);
        assert_eq!(
            (s.kind(), s.size(), s.double_value(&[])),
            (tch::Kind::Double, vec![], 0.25)
        );
        let d = DeviceScalar::new(1.0, tch::Device::Cpu);
        let alias = d.tensor().shallow_clone();
        d.set(0.5);
        assert_eq!(alias.double_value(&[]), 0.5);
    }
}
