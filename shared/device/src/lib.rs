//! Device choice for GPU workers: one process per GPU, as torchrun and Slurm start them.
//!
//! `--device cpu|cuda|cuda:N|auto`. `auto` picks `cuda:(slot mod visible GPUs)` when CUDA is
//! available, where the slot is `LOCAL_RANK` (torchrun, and Slurm's `SLURM_LOCALID`), else the
//! shard index the worker was given (GNU parallel's `{%}`/xargs' slot are passed the same way),
//! else 0; without CUDA it is the CPU. `CUDA_VISIBLE_DEVICES` is honoured by CUDA itself: indices
//! are among the visible devices.
//!
//! [`load_cuda`] is the run-time safety net against a link that dropped libtorch_cuda: it `dlopen`s `libtorch_cuda.so` with
//! `RTLD_GLOBAL` so its CUDA hooks register even if a linker dropped it.
//!
//! ```
//! use device::{DeviceArg, Env};
//! let env = Env { local_rank: Some(5), shard: None };
//! assert_eq!(DeviceArg::parse("auto").unwrap().resolve_with(&env, 4), tch::Device::Cuda(1));
//! assert_eq!(DeviceArg::parse("auto").unwrap().resolve_with(&env, 0), tch::Device::Cpu);
//! ```

use std::sync::{Arc, OnceLock};

#[cfg(feature = "clap")]
mod args;
#[cfg(feature = "clap")]
pub use args::{CudaGraphsArg, GpuArgs, Switch};

/// Numeric precision of a tool's work on the device (`--precision`): one type for every tool,
/// each taking the values it supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Strict fp32 (no TF32: `gpu_runtime::shim::cuda_fp32_strict`).
    Fp32,
    /// fp32 values, TF32 tensor-core convolutions and matmuls on CUDA (libtorch's cuDNN default,
    /// so PyTorch's); fp32 on the CPU.
    Tf32,
    /// fp16 autocast (with a loss scaler when training).
    Fp16,
    /// bf16 autocast.
    Bf16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        [
            Precision::Fp32,
            Precision::Tf32,
            Precision::Fp16,
            Precision::Bf16,
        ]
        .into_iter()
        .find(|p| p.name() == s)
        .ok_or_else(|| Error::Precision(s.to_string()))
    }
}

/// `cpu` or `cuda:N`, as `--device` spells it (records and messages).
pub fn name(device: tch::Device) -> String {
    match device {
        tch::Device::Cuda(i) => format!("cuda:{i}"),
        _ => "cpu".into(),
    }
}

/// A `--device` value as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceArg {
    Cpu,
    /// `cuda` (= `cuda:0`) or `cuda:N`.
    Cuda(usize),
    Auto,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown device `{0}`: use cpu, cuda, cuda:N or auto")]
    Parse(String),
    #[error("--device {asked} asked for, but {why}")]
    Unavailable { asked: String, why: String },
    #[error("unknown precision `{0}`: fp32, tf32, bf16 or fp16")]
    Precision(String),
    #[error("--precision {asked}: {tool} takes {allowed}")]
    PrecisionOf {
        tool: String,
        asked: &'static str,
        allowed: String,
    },
    /// `libtorch_cuda.so` could not be loaded (no CUDA build, or not on the run path): the
    /// loader's error ([`load_cuda`]).
    #[error("libtorch's CUDA library could not be loaded")]
    CudaLoad(#[source] Arc<libloading::Error>),
    /// libtorch's CUDA is there, but no device is.
    #[error("no CUDA device is visible (driver missing, or CUDA_VISIBLE_DEVICES empty)")]
    NoCuda,
    /// A CUDA runtime call (`call`, with its arguments) returned error `code`.
    #[error("{call} failed with CUDA error {code}")]
    CudaCall { call: String, code: i32 },
}

pub type Result<T> = std::result::Result<T, Error>;

impl error_class::Classify for Error {
    fn class(&self) -> error_class::Class {
        match self {
            Error::Parse(_) | Error::Precision(_) | Error::PrecisionOf { .. } => {
                error_class::Class::Usage
            }
            // The machine lacks what was asked for (the tools' --device has always exited 1).
            Error::Unavailable { .. } => error_class::Class::Fatal,
            Error::CudaLoad(_) | Error::NoCuda | Error::CudaCall { .. } => {
                error_class::Class::Fatal
            }
        }
    }
}

/// Where the launcher says this worker sits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Env {
    /// `LOCAL_RANK` (torchrun) or `SLURM_LOCALID`.
    pub local_rank: Option<usize>,
    /// The shard index the worker was given (a shard record's `shard`).
    pub shard: Option<usize>,
}

impl Env {
    /// Reads `LOCAL_RANK`, else `SLURM_LOCALID`; `shard` is the caller's.
    pub fn from_process(shard: Option<usize>) -> Self {
        let var = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse().ok());
        Env {
            local_rank: var("LOCAL_RANK").or_else(|| var("SLURM_LOCALID")),
            shard,
        }
    }
}

impl DeviceArg {
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim() {
            "cpu" => Ok(DeviceArg::Cpu),
            "auto" => Ok(DeviceArg::Auto),
            "cuda" => Ok(DeviceArg::Cuda(0)),
            other => other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceArg::Cuda)
                .ok_or_else(|| Error::Parse(s.to_string())),
        }
    }

    /// The device for `gpus` visible CUDA devices (pure: for tests and callers that know).
    pub fn resolve_with(self, env: &Env, gpus: usize) -> tch::Device {
        match self {
            DeviceArg::Cpu => tch::Device::Cpu,
            DeviceArg::Cuda(i) => tch::Device::Cuda(i),
            DeviceArg::Auto if gpus == 0 => tch::Device::Cpu,
            DeviceArg::Auto => tch::Device::Cuda(env.local_rank.or(env.shard).unwrap_or(0) % gpus),
        }
    }

    /// Resolves against this process: loads CUDA, counts devices, checks an explicit index.
    pub fn resolve(self, env: &Env) -> Result<tch::Device> {
        let gpus = cuda_device_count();
        let device = self.resolve_with(env, gpus);
        if let tch::Device::Cuda(i) = device {
            if gpus == 0 {
                return Err(Error::Unavailable {
                    asked: name(device),
                    why: error_class::chain_text(&cuda_unavailable_reason()),
                });
            }
            if i >= gpus {
                return Err(Error::Unavailable {
                    asked: name(device),
                    why: format!(
                        "only {gpus} CUDA device(s) are visible (CUDA_VISIBLE_DEVICES={})",
                        std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "<unset>".into())
                    ),
                });
            }
        }
        Ok(device)
    }
}

impl std::str::FromStr for DeviceArg {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        DeviceArg::parse(s)
    }
}

static CUDA_LOAD: OnceLock<std::result::Result<(), Arc<libloading::Error>>> = OnceLock::new();

/// `dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_GLOBAL)` once; `Err` ([`Error::CudaLoad`]) holds
/// why it failed (no CUDA build, or the library is not on the run path).
pub fn load_cuda() -> Result<()> {
    CUDA_LOAD
        .get_or_init(|| load_library("libtorch_cuda.so").map_err(Arc::new))
        .clone()
        .map_err(Error::CudaLoad)
}

/// Loads `name` for good with its symbols global.
fn load_library(name: &str) -> std::result::Result<(), libloading::Error> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading libtorch_cuda runs its static initialisers, which register CUDA
    // hooks with the libtorch already loaded; that is what linking it would do.
    let lib = unsafe { Library::open(Some(name), RTLD_NOW | RTLD_GLOBAL) }?;
    std::mem::forget(lib); // stays loaded for the life of the process
    Ok(())
}

/// Number of visible CUDA devices (0 without CUDA).
pub fn cuda_device_count() -> usize {
    let _ = load_cuda();
    if tch::Cuda::is_available() {
        tch::Cuda::device_count().max(0) as usize
    } else {
        0
    }
}

/// Sets libtorch's intra-op threads: the CPU pool every CPU operation of this process shares.
pub fn set_cpu_threads(n: usize) {
    tch::set_num_threads(n.min(i32::MAX as usize) as i32);
}

/// Bytes in use on the current CUDA device (total − free, `cudaMemGetInfo`), or `None` without
/// CUDA. libtorch's caching allocator keeps what it reserved, so the growth of this figure over a
/// run is the run's peak reserved memory (tch exposes no allocator statistics). The CUDA runtime
/// is the one libtorch already loaded (`libcudart.so.13`, found by soname).
pub fn cuda_mem_used() -> Option<u64> {
    type MemGetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> i32;
    static MEM_GET_INFO: OnceLock<Option<MemGetInfo>> = OnceLock::new();
    // SAFETY: the CUDA runtime's documented signature.
    let f = (*MEM_GET_INFO.get_or_init(|| unsafe { cudart_symbol(b"cudaMemGetInfo\0") }))?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: two valid out-pointers.
    (unsafe { f(&mut free, &mut total) } == 0).then(|| (total - free) as u64)
}

/// [`cuda_mem_used`] on device `i` (the calling thread's current device is put back after).
pub fn cuda_mem_used_on(i: usize) -> Option<u64> {
    type GetDevice = unsafe extern "C" fn(*mut i32) -> i32;
    static GET_DEVICE: OnceLock<Option<GetDevice>> = OnceLock::new();
    // SAFETY: the CUDA runtime's documented signature.
    let get = (*GET_DEVICE.get_or_init(|| unsafe { cudart_symbol(b"cudaGetDevice\0") }))?;
    let mut current = 0i32;
    // SAFETY: a valid out-pointer.
    if unsafe { get(&mut current) } != 0 {
        return None;
    }
    cuda_set_device(i).ok()?;
    let used = cuda_mem_used();
    let _ = cuda_set_device(current as usize);
    used
}

/// CUDA device `i` as nccl-tests lists it: its PCI bus id (`cudaDeviceGetPCIBusId`) and the
/// driver's model name (/proc/driver/nvidia/gpus/BUS/information), e.g. `[0000:07:00.0] NVIDIA
/// H100 80GB HBM3`; `None` without CUDA.
pub fn cuda_device_label(i: usize) -> Option<String> {
    type GetBusId = unsafe extern "C" fn(*mut std::ffi::c_char, i32, i32) -> i32;
    static GET_BUS_ID: OnceLock<Option<GetBusId>> = OnceLock::new();
    // SAFETY: the CUDA runtime's documented signature.
    let f = (*GET_BUS_ID.get_or_init(|| unsafe { cudart_symbol(b"cudaDeviceGetPCIBusId\0") }))?;
    let mut buf = [0u8; 32];
    // SAFETY: a buffer of the length passed.
    if unsafe { f(buf.as_mut_ptr().cast(), buf.len() as i32, i as i32) } != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let bus = String::from_utf8_lossy(&buf[..end]).to_lowercase();
    let model = std::fs::read_to_string(format!("/proc/driver/nvidia/gpus/{bus}/information"))
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("Model:").map(|m| m.trim().to_string()))
        })
        .unwrap_or_else(|| "(model unknown)".into());
    Some(format!("[{bus}] {model}"))
}

/// `cudaSetDevice(i)` for the calling thread (what NCCL launches on is the current device's
/// stream).
pub fn cuda_set_device(i: usize) -> Result<()> {
    type SetDevice = unsafe extern "C" fn(i32) -> i32;
    static SET_DEVICE: OnceLock<Option<SetDevice>> = OnceLock::new();
    // SAFETY: the CUDA runtime's documented signature.
    let f = (*SET_DEVICE.get_or_init(|| unsafe { cudart_symbol(b"cudaSetDevice\0") }))
        .ok_or_else(cuda_unavailable_reason)?;
    // SAFETY: plain integer argument.
    match unsafe { f(i as i32) } {
        0 => Ok(()),
        code => Err(Error::CudaCall {
            call: format!("cudaSetDevice({i})"),
            code,
        }),
    }
}

/// Whether all work queued on the current device's legacy default stream (libtorch's stream
/// unless told otherwise) has finished: `cudaStreamQuery(0)`. `Err` for a CUDA error.
pub fn cuda_default_stream_done() -> Result<bool> {
    type StreamQuery = unsafe extern "C" fn(*mut std::ffi::c_void) -> i32;
    static STREAM_QUERY: OnceLock<Option<StreamQuery>> = OnceLock::new();
    // SAFETY: the CUDA runtime's documented signature.
    let f = (*STREAM_QUERY.get_or_init(|| unsafe { cudart_symbol(b"cudaStreamQuery\0") }))
        .ok_or_else(cuda_unavailable_reason)?;
    // SAFETY: the null stream is the legacy default stream.
    match unsafe { f(std::ptr::null_mut()) } {
        0 => Ok(true),
        600 => Ok(false), // cudaErrorNotReady
        code => Err(Error::CudaCall {
            call: "cudaStreamQuery".into(),
            code,
        }),
    }
}

/// A symbol of the CUDA runtime libtorch already loaded (`libcudart.so.13`, found by soname),
/// or `None` without CUDA.
///
/// # Safety
/// `T` must be the symbol's true function-pointer type.
unsafe fn cudart_symbol<T: Copy>(name: &[u8]) -> Option<T> {
    use libloading::os::unix::{Library, RTLD_NOW};
    if cuda_device_count() == 0 {
        return None;
    }
    ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
        .into_iter()
        .find_map(|lib| {
            // SAFETY: opening a library libtorch has already loaded runs no new initialisers.
            let lib = unsafe { Library::open(Some(lib), RTLD_NOW) }.ok()?;
            // SAFETY: the caller vouches for T.
            let f = unsafe { lib.get::<T>(name) }.ok().map(|s| *s)?;
            std::mem::forget(lib); // libtorch keeps it loaded; so does this handle
            Some(f)
        })
}

/// Why the CUDA runtime's symbols are not there: libtorch's CUDA did not load, or no device.
fn cuda_unavailable_reason() -> Error {
    match load_cuda() {
        Err(e) => e,
        Ok(()) => Error::NoCuda,
    }
}

/// What device choice reads from the environment (the GPU tools list it in their man pages).
pub const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "LOCAL_RANK, SLURM_LOCALID",
        "--device auto's slot: cuda:(slot mod visible GPUs).",
    ),
    (
        "CUDA_VISIBLE_DEVICES",
        "The GPUs this process sees (cuda:N counts among them).",
    ),
    (
        "NVIDIA_TF32_OVERRIDE",
        "Read by cuBLAS and cuDNN themselves: 0 turns TF32 off whatever --precision says.",
    ),
    (
        "LD_LIBRARY_PATH",
        "Where libtorch is loaded from when not the venv's (the binaries' RUNPATH yields to it).",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_failures_are_typed_with_the_loaders_error_as_source() {
        use std::error::Error as _;
        let e = Error::CudaLoad(Arc::new(
            load_library("libtorch_cuda-not-here.so").unwrap_err(),
        ));
        assert_eq!(e.to_string(), "libtorch's CUDA library could not be loaded");
        let source = e.source().expect("the loader's error is the source");
        assert!(source.is::<Arc<libloading::Error>>(), "{source:?}");
        assert!(
            error_class::chain_text(&e).contains("libtorch_cuda-not-here.so"),
            "{}",
            error_class::chain_text(&e)
        );
        let e = Error::CudaCall {
            call: "cudaSetDevice(3)".into(),
            code: 101,
        };
        assert_eq!(e.to_string(), "cudaSetDevice(3) failed with CUDA error 101");
        for e in [e, Error::NoCuda] {
            assert_eq!(error_class::Classify::class(&e), error_class::Class::Fatal);
        }
        // Without a GPU, setting one says why in a kind the caller can match.
        match cuda_set_device(0) {
            Ok(()) => assert!(cuda_device_count() > 0),
            Err(e) => assert!(matches!(e, Error::NoCuda | Error::CudaLoad(_)), "{e:?}"),
        }
    }

    #[test]
    fn parses_every_form() {
        assert_eq!(DeviceArg::parse("cpu").unwrap(), DeviceArg::Cpu);
        assert_eq!(DeviceArg::parse("cuda").unwrap(), DeviceArg::Cuda(0));
        assert_eq!(DeviceArg::parse("cuda:3").unwrap(), DeviceArg::Cuda(3));
        assert_eq!(DeviceArg::parse("auto").unwrap(), DeviceArg::Auto);
        for bad in ["gpu", "cuda:", "cuda:x", "cuda:-1", ""] {
            assert!(DeviceArg::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn auto_spreads_local_ranks_then_shards_over_gpus() {
        let auto = DeviceArg::Auto;
        assert_eq!(
            auto.resolve_with(
                &Env {
                    local_rank: Some(3),
                    shard: Some(0)
                },
                2
            ),
            tch::Device::Cuda(1)
        );
        assert_eq!(
            auto.resolve_with(
                &Env {
                    local_rank: None,
                    shard: Some(6)
                },
                4
            ),
            tch::Device::Cuda(2)
        );
        assert_eq!(auto.resolve_with(&Env::default(), 8), tch::Device::Cuda(0));
        assert_eq!(
            auto.resolve_with(
                &Env {
                    local_rank: Some(1),
                    shard: None
                },
                0
            ),
            tch::Device::Cpu
        );
    }
}
