//! Random generators of one's own. libtorch's default generator is one per device for the whole
//! process: ranks run as threads of one process, or two models drawing at once, would interleave
//! their draws on it. A [`Generator`] is seeded as `torch.manual_seed` seeds the default one, so
//! its draws equal the default generator's after `torch.manual_seed(seed)` (what a reference
//! script does), and it belongs to whoever holds it.

use std::ffi::{c_char, c_int, c_void};

use tch::{Device, Tensor};
use torch_sys::C_tensor;

use crate::shim::{Result, abi};

mod ffi {
    use super::*;
    unsafe extern "C" {
        pub fn shk_generator_new(device: c_int, seed: u64, out: *mut *mut c_void) -> *mut c_char;
        pub fn shk_generator_free(g: *mut c_void);
        pub fn shk_generator_draw(
            g: *mut c_void,
            what: c_int,
            high: i64,
            sizes: *const i64,
            ndim: c_int,
            device: c_int,
            out: *mut *mut C_tensor,
        ) -> *mut c_char;
    }
}

/// A random generator for one device (`torch.Generator(device).manual_seed(seed)`, seeded the
/// way `torch.manual_seed` seeds the default one).
#[derive(Debug)]
pub struct Generator {
    g: *mut c_void,
    device: Device,
}

// SAFETY: an `at::Generator` is a reference-counted handle whose state libtorch guards with the
// generator's own mutex on every draw; this one is owned by one `Generator` and freed once.
unsafe impl Send for Generator {}

fn device_index(device: Device) -> c_int {
    match device {
        Device::Cuda(i) => i as c_int,
        _ => -1,
    }
}

impl Generator {
    /// A generator for `device` seeded with `seed` (as `torch.manual_seed(seed)`: the draws
    /// equal the default generator's after it).
    pub fn new(device: Device, seed: i64) -> Result<Self> {
        let mut g = std::ptr::null_mut();
        // SAFETY: on success `g` is a new `at::Generator*` that this value owns.
        unsafe {
            abi::result(ffi::shk_generator_new(
                device_index(device),
                seed as u64,
                &mut g,
            ))?
        };
        Ok(Generator { g, device })
    }

    pub fn device(&self) -> Device {
        self.device
    }

    fn draw(&self, what: c_int, high: i64, size: &[i64]) -> Result<Tensor> {
        let mut out: *mut C_tensor = std::ptr::null_mut();
        // SAFETY: `self.g` is live; `size` is read during the call only; on success `out` is a
        // new `at::Tensor*` that we take.
        unsafe {
            abi::result(ffi::shk_generator_draw(
                self.g,
                what,
                high,
                size.as_ptr(),
                size.len() as c_int,
                device_index(self.device),
                &mut out,
            ))?;
            Ok(abi::take_tensor(out))
        }
    }

    /// `torch.randint(high, size, generator=g)`: int64 in [0, high) on the generator's device.
    pub fn randint(&self, high: i64, size: &[i64]) -> Result<Tensor> {
        self.draw(0, high, size)
    }

    /// `torch.rand(size, generator=g)`: float32 in [0, 1).
    pub fn rand(&self, size: &[i64]) -> Result<Tensor> {
        self.draw(1, 0, size)
    }

    /// `torch.randn(size, generator=g)`: float32, standard normal.
    pub fn randn(&self, size: &[i64]) -> Result<Tensor> {
        self.draw(2, 0, size)
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        // SAFETY: made by shk_generator_new, freed once here.
        unsafe { ffi::shk_generator_free(self.g) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn draws_equal_the_default_generator_after_manual_seed() {
        // Default-generator draws, then the same from generators of our own, in threads drawing
        // at once: each thread's draws are the seeded stream's, whoever else draws.
        let want = |seed: i64| {
            tch::manual_seed(seed);
            let o = (Kind::Float, Device::Cpu);
            (
                Tensor::randint(9, [70], (Kind::Int64, Device::Cpu)),
                Tensor::rand([33], o),
                Tensor::randn([40], o),
            )
        };
        let expected: Vec<_> = (0..4).map(|s| want(s * 7 - 3)).collect();
        let handles: Vec<_> = (0..4)
            .map(|s| {
                std::thread::spawn(move || {
                    (0..20)
                        .map(|_| {
                            let g = Generator::new(Device::Cpu, s * 7 - 3).unwrap();
                            (
                                g.randint(9, &[70]).unwrap(),
                                g.rand(&[33]).unwrap(),
                                g.randn(&[40]).unwrap(),
                            )
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for (h, (a, b, c)) in handles.into_iter().zip(&expected) {
            for (x, y, z) in h.join().unwrap() {
                assert!(x.equal(a) && y.equal(b) && z.equal(c));
            }
        }
    }
}
