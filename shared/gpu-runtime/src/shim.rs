//! What tch 0.24 does not bind, from libtorch's C++ API through the runtime's C++
//! (`src/runtime.cpp`): CUDA graph capture and replay, the current CUDA stream and side streams,
//! channels_last layouts, CUDA autocast with a chosen dtype (tch's `autocast` is fp16 only and
//! uses deprecated calls), a differentiable all-reduce (an autograd Function whose forward and
//! backward call back into Rust: SyncBatchNorm's collective), and NVRTC's compile check
//! ([`nvrtc_compile`]). PyTorch's fused optimiser kernels are bound in [`crate::fused`].
//! Everything here is safe to call on a machine without CUDA as long as no CUDA function is
//! reached: the CUDA calls return an error there instead of aborting.
//!
//! A crate with C++ of its own over `include/shardkit/runtime.h` (a model's kernels) binds its
//! `extern "C"` functions with [`abi`].

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::Arc;

use tch::Tensor;
use torch_sys::C_tensor;

pub(crate) mod ffi {
    use super::*;
    unsafe extern "C" {
        pub fn shk_free_message(m: *mut c_char);
        pub fn shk_channels_last_(t: *mut C_tensor) -> *mut c_char;
        pub fn shk_channels_last(t: *mut C_tensor, out: *mut *mut C_tensor) -> *mut c_char;
        pub fn shk_is_channels_last(t: *mut C_tensor) -> c_int;
        pub fn shk_set_grad(p: *mut C_tensor, g: *mut C_tensor) -> *mut c_char;
        pub fn shk_fused_sgd(
            p: *mut C_tensor,
            g: *mut C_tensor,
            buf: *mut C_tensor,
            weight_decay: f64,
            momentum: f64,
            lr_t: *mut C_tensor,
            lr: f64,
            nesterov: c_int,
            first_step: c_int,
        ) -> *mut c_char;
        pub fn shk_fused_adamw(
            p: *mut C_tensor,
            g: *mut C_tensor,
            m: *mut C_tensor,
            v: *mut C_tensor,
            step: *mut C_tensor,
            beta1: f64,
            beta2: f64,
            weight_decay: f64,
            eps: f64,
            lr_t: *mut C_tensor,
            lr: f64,
        ) -> *mut c_char;
        pub fn shk_autocast_enter(dtype: c_int) -> *mut c_char;
        pub fn shk_autocast_exit(was_enabled: c_int) -> *mut c_char;
        pub fn shk_autocast_enabled() -> c_int;
        pub fn shk_set_cudnn_deterministic(on: c_int);
        pub fn shk_cuda_fp32_strict() -> *mut c_char;
        pub fn shk_cuda_tf32_allowed() -> c_int;
        pub fn shk_autocast_set_cache_enabled(on: c_int);
        pub fn shk_current_stream(device: c_int, out: *mut *mut c_void) -> *mut c_char;
        pub fn shk_side_stream_begin(device: c_int, previous: *mut *mut c_void) -> *mut c_char;
        pub fn shk_side_stream_end(previous: *mut c_void) -> *mut c_char;
        pub fn shk_empty_cache() -> *mut c_char;
        pub fn shk_empty_pinned(
            sizes: *const i64,
            ndim: c_int,
            dtype: c_int,
            out: *mut *mut C_tensor,
        ) -> *mut c_char;
        pub fn shk_sole_owner(t: *mut C_tensor) -> c_int;
        pub fn shk_to_device_on_side_stream(
            src: *mut C_tensor,
            device: c_int,
            out: *mut *mut C_tensor,
        ) -> *mut c_char;
        pub fn shk_stream_capturing(device: c_int, out: *mut c_int) -> *mut c_char;
        pub fn shk_graph_new() -> *mut c_void;
        pub fn shk_graph_free(g: *mut c_void);
        pub fn shk_graph_capture_begin(g: *mut c_void, device: c_int) -> *mut c_char;
        pub fn shk_graph_capture_end(g: *mut c_void) -> *mut c_char;
        pub fn shk_graph_replay(g: *mut c_void) -> *mut c_char;
        pub fn shk_leaky_relu(x: *mut C_tensor, slope: f64, out: *mut *mut C_tensor)
        -> *mut c_char;
        pub fn shk_nvrtc_compile(
            name: *const c_char,
            source: *const c_char,
            major: c_int,
            minor: c_int,
            bytes: *mut usize,
        ) -> *mut c_char;
        pub fn shk_all_reduce_sum_autograd(
            x: *mut C_tensor,
            reduce: unsafe extern "C" fn(*mut c_void, *mut C_tensor, *mut c_char, usize) -> c_int,
            drop: unsafe extern "C" fn(*mut c_void),
            state: *mut c_void,
            out: *mut *mut C_tensor,
        ) -> *mut c_char;
    }
}

/// A C++ exception's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // libtorch's messages end with a C++ backtrace after the first line: keep the first.
        f.write_str(self.0.lines().next().unwrap_or(""))
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

impl error_class::Classify for Error {}

impl Error {
    /// The libtorch failure this is, typed (out of memory for a graph's pool, say).
    pub fn torch(&self) -> error_class::Torch {
        error_class::Torch::from_message(&self.0)
    }
}

/// Turns a C++ return value into a Result (freeing the message).
pub(crate) fn check(m: *mut c_char) -> Result<()> {
    if m.is_null() {
        return Ok(());
    }
    // SAFETY: non-null returns are NUL-terminated strings from malloc in runtime.cpp (shardkit::dup).
    let s = unsafe { CStr::from_ptr(m) }.to_string_lossy().into_owned();
    // SAFETY: freed once, by the allocator that made it.
    unsafe { ffi::shk_free_message(m) };
    Err(Error(s))
}

pub(crate) fn ptr(t: &Tensor) -> *mut C_tensor {
    // The C++ only reads through it, except `channels_last_`, which changes the tensor's data
    // as `set_data` does for every alias (documented there).
    t.as_ptr() as *mut C_tensor
}

/// Re-lays a 4-D tensor out as channels_last in place: its storage is replaced and every alias
/// (the VarStore's, the optimiser's) sees the new layout, as `module.to(memory_format=...)`
/// does to parameters. Other tensors are left alone. Call it before gradients exist.
pub fn channels_last_(t: &Tensor) -> Result<()> {
    // SAFETY: `t` is a live tensor; the shim does not keep the pointer.
    check(unsafe { ffi::shk_channels_last_(ptr(t)) })
}

/// A channels_last copy of a 4-D tensor (the tensor itself when it already is; other ranks are
/// returned as they are).
pub fn to_channels_last(t: &Tensor) -> Result<Tensor> {
    let mut out: *mut C_tensor = std::ptr::null_mut();
    // SAFETY: `t` is live; on success `out` is a new `at::Tensor*` that we own.
    check(unsafe { ffi::shk_channels_last(ptr(t), &mut out) })?;
    // SAFETY: see above; tch frees it on drop.
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// Makes `g` the gradient of `p` (`p.grad = g` in Python; tch has no setter). Backward then
/// accumulates into `g` in place, so `g` may be a view into a larger buffer (DDP's
/// `gradient_as_bucket_view`). `g` must match `p` in shape, dtype and device.
pub fn set_grad(p: &Tensor, g: &Tensor) -> Result<()> {
    if p.size() != g.size() || p.kind() != g.kind() || p.device() != g.device() {
        return Err(Error(format!(
            "set_grad: {:?} {:?} {:?} vs {:?} {:?} {:?}",
            p.size(),
            p.kind(),
            p.device(),
            g.size(),
            g.kind(),
            g.device()
        )));
    }
    // SAFETY: two live tensors; the parameter's grad field holds its own reference to g.
    check(unsafe { ffi::shk_set_grad(ptr(p), ptr(g)) })
}

/// Takes ownership of a tensor the shim returned through `out`.
fn owned(out: *mut C_tensor) -> Tensor {
    // SAFETY: callers pass a non-null `at::Tensor*` the shim allocated for us; tch frees it.
    unsafe { Tensor::from_ptr(out) }
}

/// `torch.nn.functional.leaky_relu(x, slope)`: one kernel each way (tch binds only slope 0.01).
pub fn leaky_relu(x: &Tensor, slope: f64) -> Result<Tensor> {
    let mut out: *mut C_tensor = std::ptr::null_mut();
    // SAFETY: `x` is live; on success `out` is a new tensor we own.
    check(unsafe { ffi::shk_leaky_relu(ptr(x), slope, &mut out) })?;
    Ok(owned(out))
}

/// Compiles CUDA C++ `source` with NVRTC (the torch wheel's; no GPU needed) for compute
/// capability `major.minor`, as [`abi`]'s kernel modules do on first use, and returns the
/// cubin's size in bytes; Err carries NVRTC's log. `name` names the source in messages. The
/// build check of a kernel's source on a machine without a GPU.
pub fn nvrtc_compile(name: &str, source: &str, major: u32, minor: u32) -> Result<usize> {
    let c = |s: &str| {
        std::ffi::CString::new(s).map_err(|_| Error(format!("{name}: a NUL byte in the text")))
    };
    let (cname, csource) = (c(name)?, c(source)?);
    let mut bytes = 0usize;
    // SAFETY: two NUL-terminated strings the call only reads; writes one usize.
    check(unsafe {
        ffi::shk_nvrtc_compile(
            cname.as_ptr(),
            csource.as_ptr(),
            major as c_int,
            minor as c_int,
            &mut bytes,
        )
    })?;
    Ok(bytes)
}

/// For crates with C++ of their own over `include/shardkit/runtime.h`: its `extern "C"`
/// functions return `shardkit::guarded`'s message and take and give tensors as `at::Tensor*`.
pub mod abi {
    use super::*;

    /// What a `shardkit::guarded` call returned: Ok for NULL, else its message as an Error.
    ///
    /// # Safety
    /// `m` is NULL or a message made by `shardkit::dup` (malloc'd, NUL-terminated) that nothing
    /// else frees.
    pub unsafe fn result(m: *mut c_char) -> Result<()> {
        check(m)
    }

    /// The `at::Tensor*` behind `t`, for a C++ call that reads it (or changes its data in
    /// place); the C++ must not keep it past the call.
    pub fn tensor_ptr(t: &Tensor) -> *mut C_tensor {
        ptr(t)
    }

    /// Takes ownership of a tensor the C++ made (`new at::Tensor(...)`).
    ///
    /// # Safety
    /// `out` is a non-null `at::Tensor*` allocated with `new` that nothing else owns.
    pub unsafe fn take_tensor(out: *mut C_tensor) -> Tensor {
        owned(out)
    }
}

/// Whether a 4-D tensor is laid out channels_last.
pub fn is_channels_last(t: &Tensor) -> bool {
    // SAFETY: read-only query on a live tensor.
    unsafe { ffi::shk_is_channels_last(ptr(t)) != 0 }
}

/// The reduced precision of an autocast region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutocastDtype {
    F16,
    Bf16,
}

/// Runs `f` under CUDA autocast to `dtype` (torch.autocast("cuda", dtype)); leaves the region
/// even when `f` panics. Ops on CPU tensors are unaffected.
pub fn autocast<T>(dtype: AutocastDtype, f: impl FnOnce() -> T) -> Result<T> {
    struct Exit(c_int);
    impl Drop for Exit {
        fn drop(&mut self) {
            // SAFETY: pairs with the enter below. An error here (none is known) is dropped.
            let _ = check(unsafe { ffi::shk_autocast_exit(self.0) });
        }
    }
    // SAFETY: plain calls into libtorch's thread-local autocast state.
    let was = unsafe { ffi::shk_autocast_enabled() };
    // SAFETY: as above; the Exit guard below pairs it with its exit.
    check(unsafe { ffi::shk_autocast_enter(if dtype == AutocastDtype::Bf16 { 1 } else { 0 }) })?;
    let _exit = Exit(was);
    Ok(f())
}

/// `torch.backends.cudnn.deterministic`: cuDNN picks only deterministic algorithms (use with
/// benchmark mode off for run-to-run identical results on CUDA).
pub fn set_cudnn_deterministic(on: bool) {
    // SAFETY: a global flag in libtorch's context.
    unsafe { ffi::shk_set_cudnn_deterministic(on as c_int) }
}

/// Strict fp32 on CUDA: convolutions, RNNs and matmuls without TF32 (PyTorch's
/// `torch.backends.cudnn.conv.fp32_precision = "ieee"` and the same for RNNs and
/// `torch.backends.cuda.matmul`). libtorch's default allows TF32 in cuDNN convolutions, as
/// PyTorch's does, so upstream's generate.py and projector run in TF32 on Ampere and later GPUs.
/// libtorch's own setting, read at each call: it may be set at any time, and holds for the
/// whole process.
pub fn cuda_fp32_strict() -> Result<()> {
    // SAFETY: plain call returning shardkit::guarded's message.
    unsafe { abi::result(ffi::shk_cuda_fp32_strict()) }
}

/// Whether CUDA's fp32 convolutions or matmuls may use TF32 (libtorch's setting).
pub fn cuda_tf32_allowed() -> bool {
    // SAFETY: a read of libtorch's global context.
    unsafe { ffi::shk_cuda_tf32_allowed() != 0 }
}

/// Whether CUDA autocast is on in this thread.
pub fn autocast_enabled() -> bool {
    // SAFETY: read of thread-local state.
    unsafe { ffi::shk_autocast_enabled() != 0 }
}

/// torch.autocast's `cache_enabled`: off while capturing CUDA graphs (as
/// make_graphed_callables requires), so no cast outlives the capture.
pub fn set_autocast_cache_enabled(on: bool) {
    // SAFETY: thread-local flag.
    unsafe { ffi::shk_autocast_set_cache_enabled(on as c_int) }
}

/// The current CUDA stream of `device` as a `cudaStream_t` (null: the legacy default stream,
/// which libtorch uses unless told otherwise). Collectives must be queued on it.
pub fn current_stream(device: usize) -> Result<*mut c_void> {
    let mut s = std::ptr::null_mut();
    // SAFETY: writes one pointer.
    check(unsafe { ffi::shk_current_stream(device as c_int, &mut s) })?;
    Ok(s)
}

/// Whether `device`'s current stream is capturing a CUDA graph: then nothing may synchronise
/// with the device (timing runs must wait for an eager step).
pub fn stream_capturing(device: usize) -> Result<bool> {
    let mut on: c_int = 0;
    // SAFETY: writes one int.
    check(unsafe { ffi::shk_stream_capturing(device as c_int, &mut on) })?;
    Ok(on != 0)
}

/// Runs `f` with a side stream of libtorch's pool current on `device` (after waiting for all
/// queued work, and waiting for the side stream's work afterwards): how torch.cuda.graph's
/// callers warm a step up before capturing it.
pub fn on_side_stream<T>(device: usize, f: impl FnOnce() -> T) -> Result<T> {
    let mut prev = std::ptr::null_mut();
    // SAFETY: `prev` receives a heap CUDAStream that shk_side_stream_end frees.
    check(unsafe { ffi::shk_side_stream_begin(device as c_int, &mut prev) })?;
    struct End(*mut c_void);
    impl Drop for End {
        fn drop(&mut self) {
            if !self.0.is_null() {
                // SAFETY: the pointer from begin, ended once (on a panic in `f`).
                let _ = check(unsafe { ffi::shk_side_stream_end(self.0) });
            }
        }
    }
    let mut end = End(prev);
    let out = f();
    let p = std::mem::replace(&mut end.0, std::ptr::null_mut());
    // SAFETY: as in End::drop; the guard is disarmed.
    check(unsafe { ffi::shk_side_stream_end(p) })?;
    Ok(out)
}

/// A captured CUDA graph (`at::cuda::CUDAGraph`): `capture` records the CUDA work `f` queues
/// (nothing runs), `replay` launches all of it again on the current stream with the same
/// addresses. Tensors `f` allocates live in the graph's private memory pool and are the graph's
/// static outputs; inputs are tensors allocated before capture that the caller refills in place.
#[derive(Debug)]
pub struct CudaGraph {
    raw: *mut c_void,
    captured: bool,
}

impl CudaGraph {
    pub fn new() -> CudaGraph {
        CudaGraph {
            // SAFETY: allocation only; freed in Drop.
            raw: unsafe { ffi::shk_graph_new() },
            captured: false,
        }
    }

    /// Captures what `f` queues on `device` (on a side stream made current for the duration).
    /// `f` must not synchronise with the host (no `.item()`, no CPU copies of CUDA tensors).
    pub fn capture<T>(&mut self, device: usize, f: impl FnOnce() -> T) -> Result<T> {
        // SAFETY: `raw` is live; begin and end pair up on every path below (Drop-guarded).
        check(unsafe { ffi::shk_graph_capture_begin(self.raw, device as c_int) })?;
        struct End(*mut c_void, bool);
        impl Drop for End {
            fn drop(&mut self) {
                if self.1 {
                    // SAFETY: ends the capture begun above when `f` panicked.
                    let _ = check(unsafe { ffi::shk_graph_capture_end(self.0) });
                }
            }
        }
        let mut end = End(self.raw, true);
        let out = f();
        end.1 = false;
        // SAFETY: ends the capture begun above.
        check(unsafe { ffi::shk_graph_capture_end(self.raw) })?;
        self.captured = true;
        Ok(out)
    }

    /// Launches the captured work on the current stream (asynchronous, like any CUDA op).
    pub fn replay(&self) -> Result<()> {
        if !self.captured {
            return Err(Error(
                "replay of a CUDA graph that was never captured".into(),
            ));
        }
        // SAFETY: `raw` is a captured graph.
        check(unsafe { ffi::shk_graph_replay(self.raw) })
    }
}

/// An uninitialised host tensor in pinned (page-locked) memory, from libtorch's caching host
/// allocator, which a copy to the GPU reads asynchronously. Needs CUDA. For uint8, int64 and
/// float32 tensors.
pub fn empty_pinned(sizes: &[i64], kind: tch::Kind) -> Result<Tensor> {
    // c10::ScalarType's numbers (tch's own mapping is private).
    let dtype = match kind {
        tch::Kind::Uint8 => 0,
        tch::Kind::Int64 => 4,
        tch::Kind::Float => 6,
        other => {
            return Err(Error(format!(
                "empty_pinned: {other:?} tensors are not supported"
            )));
        }
    };
    let mut out: *mut C_tensor = std::ptr::null_mut();
    // SAFETY: `sizes` is read during the call only; on success `out` is a new `at::Tensor*`.
    check(unsafe { ffi::shk_empty_pinned(sizes.as_ptr(), sizes.len() as c_int, dtype, &mut out) })?;
    Ok(owned(out))
}

/// Whether `t` is the only handle on its data: no other tensor (a shallow clone, a view, a
/// tensor that autograd saved) refers to it or to its storage, so that writing to it changes
/// nothing anyone else can see. Stays true until `t` is cloned (counts only fall meanwhile).
pub fn sole_owner(t: &Tensor) -> bool {
    // SAFETY: `t` is live for the call, which reads two reference counts.
    unsafe { ffi::shk_sole_owner(ptr(t)) != 0 }
}

/// `src` (a host tensor, pinned for the copy to be asynchronous) copied to CUDA `device` on a
/// side stream, the current stream made to wait for the copy with an event: the copy overlaps
/// what the current stream is running and the host does not wait for the device (PyTorch's
/// `non_blocking` copy on a side stream + `wait_stream` + `record_stream`).
pub fn to_device_on_side_stream(src: &Tensor, device: usize) -> Result<Tensor> {
    let mut out: *mut C_tensor = std::ptr::null_mut();
    // SAFETY: `src` is live for the call; on success `out` is a new `at::Tensor*`.
    check(unsafe { ffi::shk_to_device_on_side_stream(ptr(src), device as c_int, &mut out) })?;
    Ok(owned(out))
}

/// Returns the CUDA caching allocator's unused blocks to the driver (`torch.cuda.empty_cache()`),
/// including the pools of dropped [`CudaGraph`]s. Not during a capture.
pub fn empty_cache() -> Result<()> {
    // SAFETY: no arguments; errors come back as messages.
    check(unsafe { ffi::shk_empty_cache() })
}

impl Default for CudaGraph {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        // SAFETY: allocated in new, freed once.
        unsafe { ffi::shk_graph_free(self.raw) }
    }
}

/// An in-place SUM all-reduce over the ranks, called by [`all_reduce_sum_autograd`]'s graph
/// node: in its forward, and again in backward, possibly on the autograd engine's device thread
/// (hence `Send + Sync`).
pub trait SumReducer: Send + Sync + std::fmt::Debug {
    /// `Err` is the reducer's own error; its text and its causes' (`a: b`) become the C++
    /// exception's message that autograd raises.
    fn sum_(&self, t: &Tensor) -> std::result::Result<(), ReduceError>;
}

/// A [`SumReducer`]'s error, whatever its type.
pub type ReduceError = Box<dyn std::error::Error + Send + Sync>;

type SharedReducer = Arc<dyn SumReducer>;

unsafe extern "C" fn reduce_cb(
    state: *mut c_void,
    t: *mut C_tensor,
    msg: *mut c_char,
    cap: usize,
) -> c_int {
    // SAFETY: the shim hands over a fresh tensor handle (ours to free) and the state made in
    // all_reduce_sum_autograd, alive until drop_cb.
    let t = unsafe { Tensor::from_ptr(t) };
    // SAFETY: as above: the state lives until drop_cb.
    let reducer = unsafe { &*(state as *const SharedReducer) };
    let err = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reducer.sum_(&t))) {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => error_class::chain_text(&*e),
        Err(_) => "the all-reduce callback panicked".to_string(),
    };
    let n = err.len().min(cap);
    // SAFETY: `msg` has room for `cap` bytes and is zeroed (NUL-terminated) by the shim.
    unsafe { std::ptr::copy_nonoverlapping(err.as_ptr(), msg as *mut u8, n) };
    1
}

unsafe extern "C" fn drop_cb(state: *mut c_void) {
    // SAFETY: made by Box::into_raw in all_reduce_sum_autograd; the shim drops it once.
    drop(unsafe { Box::from_raw(state as *mut SharedReducer) });
}

/// `reducer`'s SUM all-reduce of `x` as an autograd operation: the output is the sum over
/// ranks, and its backward all-reduces the incoming gradient the same way (rank r's input
/// feeds every rank's output). Every rank must call it, in the same order, in forward and in
/// backward. The reducer is kept by the graph node until the graph is freed.
pub fn all_reduce_sum_autograd(x: &Tensor, reducer: Arc<dyn SumReducer>) -> Result<Tensor> {
    let state = Box::into_raw(Box::new(reducer)) as *mut c_void;
    let mut out: *mut C_tensor = std::ptr::null_mut();
    // SAFETY: `x` is live; the shim takes `state` (freeing it through drop_cb) and sets `out`
    // to a new tensor handle on success.
    check(unsafe {
        ffi::shk_all_reduce_sum_autograd(ptr(x), reduce_cb, drop_cb, state, &mut out)
    })?;
    // SAFETY: a fresh handle from the shim, owned from here on.
    Ok(unsafe { Tensor::from_ptr(out) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn strict_fp32_is_libtorchs_own_setting() {
        // libtorch's default: TF32 convolutions on CUDA (the setting exists without a GPU).
        assert!(cuda_tf32_allowed());
        cuda_fp32_strict().unwrap();
        assert!(!cuda_tf32_allowed());
        assert!(std::env::var_os("NVIDIA_TF32_OVERRIDE").is_none());
    }

    #[test]
    fn channels_last_in_place_keeps_values_and_aliases() {
        let t = Tensor::arange(2 * 3 * 4 * 5, (Kind::Float, Device::Cpu)).view([2, 3, 4, 5]);
        let alias = t.shallow_clone();
        let before = t.copy();
        assert!(!is_channels_last(&t));
        channels_last_(&t).unwrap();
        assert!(is_channels_last(&t) && is_channels_last(&alias));
        assert_eq!(t.stride(), vec![60, 1, 15, 3]);
        assert!(t.equal(&before));
        let c = to_channels_last(&before).unwrap();
        assert!(is_channels_last(&c) && c.equal(&before) && !is_channels_last(&before));
        // Other ranks pass through.
        let v = Tensor::ones([3], (Kind::Float, Device::Cpu));
        channels_last_(&v).unwrap();
        assert_eq!(to_channels_last(&v).unwrap().size(), vec![3]);
    }

    #[test]
    fn leaky_relu_takes_a_slope_and_differentiates() {
        let x = Tensor::from_slice(&[-2.0f32, -0.5, 0.0, 3.0]).set_requires_grad(true);
        let y = leaky_relu(&x, 0.2).unwrap();
        assert_eq!(
            Vec::<f32>::try_from(&y).unwrap(),
            vec![-0.4, -0.1, 0.0, 3.0]
        );
        y.sum(Kind::Float).backward();
        // torch: slope where x <= 0 (the gradient at 0 is the slope).
        assert_eq!(
            Vec::<f32>::try_from(x.grad()).unwrap(),
            vec![0.2, 0.2, 0.2, 1.0]
        );
    }

    #[test]
    fn nvrtc_compiles_cuda_source_and_says_why_it_cannot() {
        // NVRTC needs no GPU: the same compile a kernel module runs on first use.
        let src = r#"extern "C" __global__ void twice(float *x, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) x[i] *= 2.f;
        }"#;
        for (major, minor) in [(9, 0), (8, 0)] {
            let bytes = nvrtc_compile("twice.cu", src, major, minor)
                .unwrap_or_else(|e| panic!("sm_{major}{minor}: {e}"));
            assert!(bytes > 500, "sm_{major}{minor}: {bytes} bytes");
        }
        let e = nvrtc_compile("broken.cu", "__global__ void f() { undeclared = 1; }", 9, 0)
            .unwrap_err();
        assert!(
            e.0.contains("NVRTC could not compile broken.cu for --gpu-architecture=sm_90")
                && e.0.contains("undeclared"),
            "{e:?}"
        );
        assert!(nvrtc_compile("nul.cu", "a\0b", 9, 0).is_err());
    }

    #[test]
    fn pinned_memory_is_refused_for_other_kinds_and_is_an_error_without_a_gpu() {
        let e = empty_pinned(&[2], tch::Kind::Double).unwrap_err();
        assert!(
            e.to_string().contains("Double tensors are not supported"),
            "{e}"
        );
        if !tch::Cuda::is_available() {
            // No pinned allocator without CUDA: an error message, not an abort.
            assert!(empty_pinned(&[2, 3], tch::Kind::Float).is_err());
        } else {
            let t = empty_pinned(&[2, 3], tch::Kind::Float).unwrap();
            assert!(t.is_pinned(tch::Device::Cuda(0)) && t.size() == [2, 3]);
            let host = Tensor::arange(6, (tch::Kind::Float, tch::Device::Cpu)).view([2, 3]);
            let mut pinned = t;
            pinned.copy_(&host);
            let on_gpu = to_device_on_side_stream(&pinned, 0).unwrap();
            assert!(on_gpu.to_device(tch::Device::Cpu).equal(&host));
        }
    }

    #[test]
    fn sole_owner_sees_clones_views_and_what_autograd_saved() {
        let x = Tensor::ones([2, 3], (tch::Kind::Float, tch::Device::Cpu));
        assert!(sole_owner(&x));
        let clone = x.shallow_clone();
        assert!(!sole_owner(&x) && !sole_owner(&clone));
        drop(clone);
        assert!(sole_owner(&x));
        let view = x.narrow(0, 1, 1);
        assert!(!sole_owner(&x));
        drop(view);
        // A product with a weight that needs its gradient keeps `x` for the backward pass.
        let w = Tensor::ones([3, 1], (tch::Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
        let loss = x.matmul(&w).sum(tch::Kind::Float);
        assert!(!sole_owner(&x));
        drop(loss);
        assert!(sole_owner(&x));
    }

    #[test]
    fn empty_cache_without_a_gpu_returns() {
        // The projector calls it after a graphed batch; with no CUDA memory ever allocated there
        // is nothing to release, and libtorch says so without an error (nor an abort).
        empty_cache().unwrap();
    }

    #[test]
    fn stream_capturing_without_a_gpu_is_an_error() {
        // Asked only for CUDA devices; without one it must say so, not abort.
        assert!(stream_capturing(0).is_err());
    }

    #[test]
    fn set_grad_makes_backward_accumulate_into_a_view() {
        let p = Tensor::from_slice(&[1.0f32, 2.0, 3.0]).set_requires_grad(true);
        let buf = Tensor::zeros([5], (Kind::Float, Device::Cpu));
        set_grad(&p, &buf.narrow(0, 1, 3)).unwrap();
        (&p * &p).sum(Kind::Float).backward();
        assert_eq!(
            Vec::<f32>::try_from(&buf).unwrap(),
            vec![0.0, 2.0, 4.0, 6.0, 0.0]
        );
        assert!(set_grad(&p, &buf).is_err());
    }

    #[test]
    fn autocast_nests_and_restores() {
        assert!(!autocast_enabled());
        let inner = autocast(AutocastDtype::Bf16, || {
            assert!(autocast_enabled());
            // CPU ops are untouched by CUDA autocast.
            let a = Tensor::ones([2, 2], (Kind::Float, Device::Cpu));
            let k = a.matmul(&a).kind();
            autocast(AutocastDtype::F16, autocast_enabled).unwrap() && k == Kind::Float
        })
        .unwrap();
        assert!(inner);
        assert!(!autocast_enabled());
        // A panic inside still leaves the region.
        let r = std::panic::catch_unwind(|| autocast(AutocastDtype::Bf16, || panic!("inside")));
        assert!(r.is_err());
        assert!(!autocast_enabled());
    }

    /// Stands for `ranks` identical ranks (their sum is `ranks` × the input); fails on call
    /// number `fail_at`.
    #[derive(Debug)]
    struct Fake {
        ranks: f64,
        calls: std::sync::atomic::AtomicUsize,
        fail_at: usize,
    }

    /// A reducer's typed error with its cause.
    #[derive(Debug, thiserror::Error)]
    #[error("rank 1 is gone")]
    struct Gone(#[source] std::io::Error);

    impl SumReducer for Fake {
        fn sum_(&self, t: &Tensor) -> std::result::Result<(), ReduceError> {
            if self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == self.fail_at {
                let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
                return Err(Box::new(Gone(reset)));
            }
            let _ = t.shallow_clone().g_mul_scalar_(self.ranks);
            Ok(())
        }
    }

    fn fake(fail_at: usize) -> Arc<Fake> {
        Arc::new(Fake {
            ranks: 3.0,
            calls: Default::default(),
            fail_at,
        })
    }

    #[test]
    fn all_reduce_autograd_reduces_forward_and_backward() {
        let r = fake(0);
        let x = Tensor::from_slice(&[1.0f32, -2.0, 0.5]).set_requires_grad(true);
        let y = all_reduce_sum_autograd(&(&x * 2.0), r.clone()).unwrap();
        assert_eq!(Vec::<f32>::try_from(&y).unwrap(), vec![6.0, -12.0, 3.0]);
        assert_eq!(Arc::strong_count(&r), 2, "the graph node holds the reducer");
        let w = Tensor::from_slice(&[1.0f32, 10.0, 100.0]);
        (&y * &w).sum(Kind::Float).backward();
        // d/dx of Σ_ranks w·(3·2x): the gradient is all-reduced (×3) on its way back.
        assert_eq!(
            Vec::<f32>::try_from(x.grad()).unwrap(),
            vec![6.0, 60.0, 600.0]
        );
        assert_eq!(r.calls.load(std::sync::atomic::Ordering::SeqCst), 2);
        drop(y);
        assert_eq!(Arc::strong_count(&r), 1, "freed with the graph");
    }

    #[test]
    fn all_reduce_autograd_errors_come_back_from_forward_and_backward() {
        let x = Tensor::ones([2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let r = fake(1);
        let e = all_reduce_sum_autograd(&x, r.clone()).unwrap_err();
        // The reducer's error and its causes, as text (it crosses libtorch's C++).
        assert!(
            e.to_string().contains("rank 1 is gone: connection reset"),
            "{e}"
        );
        assert_eq!(Arc::strong_count(&r), 1);
        let y = all_reduce_sum_autograd(&x, fake(2)).unwrap();
        let e = y.sum(Kind::Float).f_backward().unwrap_err();
        assert!(e.to_string().contains("rank 1 is gone"), "{e}");
    }

    #[test]
    fn cuda_calls_fail_cleanly_without_cuda() {
        if tch::Cuda::is_available() {
            return;
        }
        let mut g = CudaGraph::new();
        assert!(g.replay().is_err());
        let e = g.capture(0, || ()).unwrap_err();
        assert!(!e.to_string().is_empty(), "{e:?}");
        assert!(on_side_stream(0, || ()).is_err());
    }
}
