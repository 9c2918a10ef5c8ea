//! StyleGAN2's modulated-convolution epilogue as one fused CUDA kernel each way: the kernel
//! source, its launches and its autograd Function are `src/epilogue.cpp`, built on gpu-runtime's
//! NVRTC kernel modules (compiled for each device's architecture on first use). [`crate::fast`]
//! calls it on CUDA and takes separate ops elsewhere.

use std::ffi::{c_char, c_int};

use gpu_runtime::shim::{self, abi};
use tch::Tensor;
use torch_sys::C_tensor;

mod ffi {
    use super::*;
    unsafe extern "C" {
        pub fn shk_modconv_epilogue(
            x: *mut C_tensor,
            d: *mut C_tensor,
            noise: *mut C_tensor,
            strength: *mut C_tensor,
            bias: *mut C_tensor,
            gain: f64,
            clamp: f64,
            out: *mut *mut C_tensor,
        ) -> *mut c_char;
        pub fn shk_modconv_epilogue_compile(
            major: c_int,
            minor: c_int,
            bytes: *mut usize,
        ) -> *mut c_char;
        pub fn shk_modconv_epilogue_ready(device: c_int) -> *mut c_char;
    }
}

/// `clamp(leaky_relu(x·d·gain + noise·strength·gain + bias·gain, 0.2), ±clamp)` in one kernel
/// (and one for its backward), which is upstream's `addcmul(noise·strength, x, dcoefs)` then
/// `bias_act(lrelu, √2·gain, clamp)` with `gain` = √2·gain (leaky ReLU is positively
/// homogeneous; only rounding differs).
///
/// `x` [B,C,H,W] CUDA (f32, f16 or bf16; the output has its dtype), `d` [B,C] f32, `noise`
/// f32 with B·H·W or H·W elements (contiguous), `strength` a 0-dim f32, `bias` [C] f32;
/// `clamp` may be infinite. Gradients flow to `x`, `d` and `noise`, not to `strength` or
/// `bias` (callers take another path when those need gradients).
pub fn modconv_epilogue(
    x: &Tensor,
    d: &Tensor,
    noise: Option<&Tensor>,
    strength: &Tensor,
    bias: &Tensor,
    gain: f64,
    clamp: f64,
) -> shim::Result<Tensor> {
    let mut out: *mut C_tensor = std::ptr::null_mut();
    let n = noise.map_or(std::ptr::null_mut(), abi::tensor_ptr);
    // SAFETY: live tensors (or NULL for no noise) that the call only reads; it returns
    // shardkit::guarded's message, and on success `out` is a new tensor we own.
    unsafe {
        abi::result(ffi::shk_modconv_epilogue(
            abi::tensor_ptr(x),
            abi::tensor_ptr(d),
            n,
            abi::tensor_ptr(strength),
            abi::tensor_ptr(bias),
            gain,
            clamp,
            &mut out,
        ))?;
        Ok(abi::take_tensor(out))
    }
}

/// Compiles and loads [`modconv_epilogue`]'s kernels on CUDA device `device` (the first call
/// does it anyway): Err says why they cannot run there (no driver, no NVRTC, a compile error).
pub fn modconv_epilogue_ready(device: usize) -> shim::Result<()> {
    // SAFETY: plain call returning shardkit::guarded's message; the C++ caches the outcome.
    unsafe { abi::result(ffi::shk_modconv_epilogue_ready(device as c_int)) }
}

/// Compiles [`modconv_epilogue`]'s kernel source with NVRTC for compute capability
/// `major.minor` (no GPU needed) and returns the cubin's size in bytes.
pub fn modconv_epilogue_compile(major: u32, minor: u32) -> shim::Result<usize> {
    let mut bytes = 0usize;
    // SAFETY: writes one usize; returns shardkit::guarded's message.
    unsafe {
        abi::result(ffi::shk_modconv_epilogue_compile(
            major as c_int,
            minor as c_int,
            &mut bytes,
        ))?;
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn epilogue_kernels_compile_with_nvrtc() {
        // NVRTC needs no GPU: this is the build check of the CUDA source for Hopper and Ampere.
        for (major, minor) in [(9, 0), (8, 0)] {
            let bytes = modconv_epilogue_compile(major, minor)
                .unwrap_or_else(|e| panic!("sm_{major}{minor}: {e}"));
            assert!(bytes > 1000, "sm_{major}{minor}: {bytes} bytes");
        }
    }

    #[test]
    fn epilogue_refuses_cpu_tensors() {
        let o = (Kind::Float, Device::Cpu);
        let x = Tensor::ones([1, 2, 3, 3], o);
        let err = modconv_epilogue(
            &x,
            &Tensor::ones([1, 2], o),
            None,
            &Tensor::zeros([], o),
            &Tensor::zeros([2], o),
            1.0,
            f64::INFINITY,
        )
        .unwrap_err();
        assert!(err.to_string().contains("CUDA tensor"), "{err}");
    }

    #[test]
    fn without_a_gpu_the_kernels_are_not_ready_and_say_why_each_time() {
        if tch::Cuda::is_available() {
            return;
        }
        // gpu-runtime's KernelModule: the failure on a device is remembered and given again.
        let first = modconv_epilogue_ready(0).unwrap_err();
        assert!(!first.0.is_empty());
        assert_eq!(modconv_epilogue_ready(0).unwrap_err(), first);
    }
}
