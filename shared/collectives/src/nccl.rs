//! NCCL, loaded at run time (no CUDA toolkit at build time).
//!
//! `libnccl.so.2` is looked up, in order: `SHARDKIT_NCCL_LIB` (a path), the torch wheel's own
//! copy (`site-packages/nvidia/nccl/lib`, found from where `libtorch_cpu.so` is mapped: the very
//! file libtorch_cuda links, so the process holds one NCCL), then the system search path. The
//! chosen file, or every reason none loaded, is reported by [`Nccl::load`].
//!
//! Collectives are enqueued on libtorch's current stream (the legacy default stream, stream 0,
//! unless a CUDA graph is being captured: then the capture stream, so the collective becomes part
//! of the graph), so they are ordered with the surrounding tensor work without extra
//! synchronisation; [`NcclComm::synchronize`] waits for the stream with a deadline
//! and aborts the communicator if NCCL reports an asynchronous error or the deadline passes.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

use crate::reduce::{DType, ReduceOp};
use crate::{Error, Result};

pub const UNIQUE_ID_BYTES: usize = 128;

/// What went wrong on NCCL's path, by kind (carried as [`Error::Nccl`]).
#[derive(Debug, thiserror::Error)]
pub enum NcclError {
    /// `libnccl.so.2` did not load, or lacks an entry point we use.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// An NCCL call returned an error code: its name, NCCL's text for the code, and the
    /// communicator's last error where there is one.
    #[error("{what} failed: {text} (ncclResult {code}){}", .last.as_ref().map(|l| format!(": {l}")).unwrap_or_default())]
    Call {
        what: &'static str,
        code: i32,
        text: String,
        last: Option<String>,
    },
    /// `ncclCommInitRank` did not return within the timeout.
    #[error(
        "ncclCommInitRank did not complete within {:.0} s: a rank died or cannot reach this one \
         (NCCL_DEBUG=INFO shows NCCL's view)",
        .waited.as_secs_f64()
    )]
    InitTimeout { waited: Duration },
    /// The stream did not drain within the timeout (the communicator was aborted).
    #[error(
        "NCCL collectives did not finish within {:.0} s: a rank died or is stuck; communicator \
         aborted",
        .waited.as_secs_f64()
    )]
    SyncTimeout { waited: Duration },
    /// The id read from the store is not the size of an `ncclUniqueId`.
    #[error("rank 0 published a malformed ncclUniqueId ({bytes} bytes)")]
    MalformedId { bytes: usize },
    /// The CUDA runtime failed on NCCL's path (with its causes: the loader's reason, say).
    #[error("{}", error_class::chain_text(.0))]
    Cuda(device::Error),
    /// libtorch's current CUDA stream could not be had.
    #[error("current CUDA stream: {0}")]
    Stream(gpu_runtime::shim::Error),
}

/// Why NCCL did not load (kept for the process: [`Nccl::load`] tries once).
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    /// No candidate opened: each one tried (how it was found) and the loader's error.
    #[error(
        "libnccl.so.2 could not be loaded ({}); set SHARDKIT_NCCL_LIB to its path",
        .tried.iter().map(|(source, e)| format!("{source}: {e}")).collect::<Vec<_>>().join("; ")
    )]
    NotFound {
        tried: Vec<(&'static str, Arc<libloading::Error>)>,
    },
    /// A file opened but lacks an entry point.
    #[error("{path}: {error}")]
    MissingSymbol {
        path: String,
        error: Arc<libloading::Error>,
    },
}

#[repr(C)]
#[derive(Clone, Copy)]
struct UniqueId([u8; UNIQUE_ID_BYTES]);

type Comm = *mut c_void;
type Stream = *mut c_void;

/// The entry points we use, with nccl.h's signatures (enums are C ints).
#[derive(Debug)]
struct Fns {
    get_version: unsafe extern "C" fn(*mut c_int) -> c_int,
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> c_int,
    comm_init_rank: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> c_int,
    comm_destroy: unsafe extern "C" fn(Comm) -> c_int,
    comm_abort: unsafe extern "C" fn(Comm) -> c_int,
    comm_get_async_error: unsafe extern "C" fn(Comm, *mut c_int) -> c_int,
    get_error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    get_last_error: unsafe extern "C" fn(Comm) -> *const c_char,
    all_reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        Comm,
        Stream,
    ) -> c_int,
    broadcast: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        Comm,
        Stream,
    ) -> c_int,
    all_gather:
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> c_int,
    reduce_scatter: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        Comm,
        Stream,
    ) -> c_int,
}

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UniqueId(..)")
    }
}

/// A loaded NCCL library.
#[derive(Debug)]
pub struct Nccl {
    fns: Fns,
    /// The file loaded.
    pub path: String,
    /// How it was found (`SHARDKIT_NCCL_LIB`, `torch wheel`, `system path`).
    pub source: &'static str,
    /// `ncclGetVersion`, e.g. 22809 for 2.28.9.
    pub version: i32,
}

static NCCL: OnceLock<std::result::Result<Nccl, LoadError>> = OnceLock::new();

impl Nccl {
    /// Loads NCCL once per process; the error lists every place tried.
    pub fn load() -> Result<&'static Nccl> {
        NCCL.get_or_init(load_uncached)
            .as_ref()
            .map_err(|e| NcclError::Load(e.clone()).into())
    }

    /// `major.minor.patch`.
    pub fn version_string(&self) -> String {
        let v = self.version;
        if v >= 10000 {
            format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)
        } else {
            format!("{}.{}.{}", v / 1000, v / 100 % 10, v % 100)
        }
    }

    fn check(&self, what: &'static str, code: c_int, comm: Option<Comm>) -> Result<()> {
        if code == 0 {
            return Ok(());
        }
        // SAFETY: NCCL returns static strings.
        let s = unsafe { CStr::from_ptr((self.fns.get_error_string)(code)) }
            .to_string_lossy()
            .into_owned();
        let last = comm
            .map(|c| {
                // SAFETY: a live communicator; NCCL returns a string it owns.
                unsafe { CStr::from_ptr((self.fns.get_last_error)(c)) }
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|l| !l.is_empty());
        Err(NcclError::Call {
            what,
            code,
            text: s,
            last,
        }
        .into())
    }

    /// A fresh `ncclUniqueId` (rank 0 makes it; the others get it through the store).
    pub fn unique_id(&self) -> Result<[u8; UNIQUE_ID_BYTES]> {
        let mut id = UniqueId([0; UNIQUE_ID_BYTES]);
        // SAFETY: a valid out-pointer of the right size.
        let code = unsafe { (self.fns.get_unique_id)(&mut id) };
        self.check("ncclGetUniqueId", code, None)?;
        Ok(id.0)
    }
}

fn load_uncached() -> std::result::Result<Nccl, LoadError> {
    let mut tried = Vec::new();
    let mut candidates: Vec<(String, &'static str)> = Vec::new();
    if let Ok(p) = std::env::var("SHARDKIT_NCCL_LIB") {
        candidates.push((p, "SHARDKIT_NCCL_LIB"));
    }
    if let Some(dir) = torch_lib_dir() {
        let p = dir.join("../../nvidia/nccl/lib/libnccl.so.2");
        candidates.push((p.to_string_lossy().into_owned(), "torch wheel"));
    }
    candidates.push(("libnccl.so.2".to_string(), "system path"));
    for (name, source) in candidates {
        // SAFETY: loading NCCL runs its initialisers, which only set up NCCL's own state.
        match unsafe { Library::open(Some(&name), RTLD_NOW | RTLD_GLOBAL) } {
            Ok(lib) => {
                let fns = bind(&lib).map_err(|e| LoadError::MissingSymbol {
                    path: name.clone(),
                    error: Arc::new(e),
                })?;
                let mut version = 0;
                // SAFETY: a valid out-pointer.
                unsafe { (fns.get_version)(&mut version) };
                let path = mapped_path("libnccl.so").unwrap_or(name);
                std::mem::forget(lib); // NCCL stays loaded for the process
                return Ok(Nccl {
                    fns,
                    path,
                    source,
                    version,
                });
            }
            Err(e) => tried.push((source, Arc::new(e))),
        }
    }
    Err(LoadError::NotFound { tried })
}

fn bind(lib: &Library) -> std::result::Result<Fns, libloading::Error> {
    // SAFETY: each symbol is given its nccl.h signature.
    unsafe {
        Ok(Fns {
            get_version: *lib.get(b"ncclGetVersion\0")?,
            get_unique_id: *lib.get(b"ncclGetUniqueId\0")?,
            comm_init_rank: *lib.get(b"ncclCommInitRank\0")?,
            comm_destroy: *lib.get(b"ncclCommDestroy\0")?,
            comm_abort: *lib.get(b"ncclCommAbort\0")?,
            comm_get_async_error: *lib.get(b"ncclCommGetAsyncError\0")?,
            get_error_string: *lib.get(b"ncclGetErrorString\0")?,
            get_last_error: *lib.get(b"ncclGetLastError\0")?,
            all_reduce: *lib.get(b"ncclAllReduce\0")?,
            broadcast: *lib.get(b"ncclBroadcast\0")?,
            all_gather: *lib.get(b"ncclAllGather\0")?,
            reduce_scatter: *lib.get(b"ncclReduceScatter\0")?,
        })
    }
}

/// The directory of the `libtorch_cpu.so` this process mapped.
fn torch_lib_dir() -> Option<PathBuf> {
    mapped_path("libtorch_cpu.so").and_then(|p| PathBuf::from(p).parent().map(PathBuf::from))
}

/// The path of the first mapped file whose name starts with `stem` (from /proc/self/maps).
fn mapped_path(stem: &str) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.rsplit('/').next().is_some_and(|f| f.starts_with(stem)))
        .map(str::to_string)
}

/// One rank's NCCL communicator on one CUDA device.
#[derive(Debug)]
pub struct NcclComm {
    nccl: &'static Nccl,
    comm: Comm,
    pub device: usize,
    timeout: Duration,
    stop: fn() -> bool,
}

// SAFETY: an NCCL communicator may be used from any thread as long as calls on it are not
// concurrent; `NcclComm` is only reachable through `&mut` (Communicator's methods).
unsafe impl Send for NcclComm {}

impl NcclComm {
    /// `ncclCommInitRank` on `device`, bounded by `timeout` (a peer that died after the ring
    /// rendezvous would otherwise leave it waiting forever).
    pub fn init(
        nccl: &'static Nccl,
        id: [u8; UNIQUE_ID_BYTES],
        rank: usize,
        world: usize,
        device: usize,
        timeout: Duration,
        stop: fn() -> bool,
    ) -> Result<NcclComm> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("nccl-init".into())
            .spawn(move || {
                let r = device::cuda_set_device(device)
                    .map_err(cuda_error)
                    .and_then(|_| {
                        let mut comm: Comm = std::ptr::null_mut();
                        // SAFETY: a valid out-pointer; id by value as nccl.h declares.
                        let code = unsafe {
                            (nccl.fns.comm_init_rank)(
                                &mut comm,
                                world as c_int,
                                UniqueId(id),
                                rank as c_int,
                            )
                        };
                        nccl.check("ncclCommInitRank", code, None)
                            .map(|_| comm as usize)
                    });
                let _ = tx.send(r);
            })
            .map_err(Error::io("nccl thread"))?;
        let deadline = Instant::now() + timeout;
        let got = loop {
            let slice = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            match rx.recv_timeout(slice) {
                Ok(r) => break Some(r),
                Err(_) if Instant::now() >= deadline => break None,
                Err(_) if stop() => {
                    return Err(Error::Interrupted("in ncclCommInitRank".into()));
                }
                Err(_) => {}
            }
        };
        match got {
            Some(r) => Ok(NcclComm {
                nccl,
                comm: r? as Comm,
                device,
                timeout,
                stop,
            }),
            None => Err(NcclError::InitTimeout { waited: timeout }.into()),
        }
    }

    fn enter(&self) -> Result<()> {
        device::cuda_set_device(self.device).map_err(cuda_error)
    }

    /// libtorch's current stream on this device: the legacy default stream normally, the
    /// capture stream while a CUDA graph is being captured (so collectives become part of it).
    fn stream(&self) -> Result<*mut c_void> {
        gpu_runtime::shim::current_stream(self.device).map_err(|e| NcclError::Stream(e).into())
    }

    /// One NCCL collective: `call(comm, stream)` enqueues it on libtorch's current stream, and
    /// its result is checked (`what` names it in the error).
    fn enqueue(
        &mut self,
        what: &'static str,
        call: impl FnOnce(Comm, *mut c_void) -> c_int,
    ) -> Result<()> {
        self.enter()?;
        let code = call(self.comm, self.stream()?);
        self.nccl.check(what, code, Some(self.comm))
    }

    /// # Safety
    /// `send`/`recv` must be device pointers on this communicator's device, holding the
    /// element counts NCCL's call documents, live until the stream has run the collective
    /// (the same for the three below).
    pub(crate) unsafe fn all_reduce(
        &mut self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let f = self.nccl.fns.all_reduce;
        let (dtype, op) = (dtype.code().into(), op.code().into());
        // SAFETY: per this function's contract.
        self.enqueue("ncclAllReduce", |comm, stream| unsafe {
            f(send, recv, count, dtype, op, comm, stream)
        })
    }

    /// # Safety
    /// As [`Self::all_reduce`].
    pub(crate) unsafe fn broadcast(
        &mut self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DType,
        root: usize,
    ) -> Result<()> {
        let f = self.nccl.fns.broadcast;
        let dtype = dtype.code().into();
        // SAFETY: per this function's contract.
        self.enqueue("ncclBroadcast", |comm, stream| unsafe {
            f(send, recv, count, dtype, root as c_int, comm, stream)
        })
    }

    /// `send_count` elements from each rank into `recv` (world × send_count).
    /// # Safety
    /// As [`Self::all_reduce`].
    pub(crate) unsafe fn all_gather(
        &mut self,
        send: *const c_void,
        recv: *mut c_void,
        send_count: usize,
        dtype: DType,
    ) -> Result<()> {
        let f = self.nccl.fns.all_gather;
        let dtype = dtype.code().into();
        // SAFETY: per this function's contract.
        self.enqueue("ncclAllGather", |comm, stream| unsafe {
            f(send, recv, send_count, dtype, comm, stream)
        })
    }

    /// `send` holds world × `recv_count` elements; `recv` gets this rank's reduced slot.
    /// # Safety
    /// As [`Self::all_reduce`].
    pub(crate) unsafe fn reduce_scatter(
        &mut self,
        send: *const c_void,
        recv: *mut c_void,
        recv_count: usize,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let f = self.nccl.fns.reduce_scatter;
        let (dtype, op) = (dtype.code().into(), op.code().into());
        // SAFETY: per this function's contract.
        self.enqueue("ncclReduceScatter", |comm, stream| unsafe {
            f(send, recv, recv_count, dtype, op, comm, stream)
        })
    }

    /// Waits until the default stream is idle, polling NCCL's asynchronous error; on an error
    /// or after the timeout the communicator is aborted (so NCCL's kernels stop spinning).
    pub fn synchronize(&mut self) -> Result<()> {
        self.enter()?;
        let start = Instant::now();
        loop {
            if device::cuda_default_stream_done().map_err(cuda_error)? {
                return Ok(());
            }
            let mut async_err: c_int = 0;
            // SAFETY: a live communicator and a valid out-pointer.
            unsafe { (self.nccl.fns.comm_get_async_error)(self.comm, &mut async_err) };
            if async_err != 0 && async_err != 7 {
                // 7 = ncclInProgress
                let e = self
                    .nccl
                    .check("an NCCL collective", async_err, Some(self.comm));
                self.abort();
                return e;
            }
            if (self.stop)() {
                self.abort();
                return Err(Error::Interrupted(
                    "waiting for NCCL collectives; communicator aborted".into(),
                ));
            }
            if start.elapsed() > self.timeout {
                self.abort();
                return Err(NcclError::SyncTimeout {
                    waited: self.timeout,
                }
                .into());
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Aborts the communicator (its kernels stop; nothing waits for peers). Idempotent.
    pub(crate) fn abort(&mut self) {
        if !self.comm.is_null() {
            // SAFETY: a live communicator, not used afterwards.
            unsafe { (self.nccl.fns.comm_abort)(self.comm) };
            self.comm = std::ptr::null_mut();
        }
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        if !self.comm.is_null() {
            let _ = self.enter();
            // SAFETY: a live communicator, not used afterwards.
            unsafe { (self.nccl.fns.comm_destroy)(self.comm) };
        }
    }
}

/// A CUDA runtime failure on NCCL's path, with its causes (the loader's reason, say).
fn cuda_error(e: device::Error) -> Error {
    NcclError::Cuda(e).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NCCL's failures keep their kind (and the loader's errors) under `Error::Nccl`, with the
    /// words they had as text.
    #[test]
    fn an_nccl_failure_keeps_its_kind_and_its_words() {
        // SAFETY: a path that does not exist loads nothing.
        let missing = unsafe { Library::open(Some("/nonexistent/libnccl.so.2"), RTLD_NOW) };
        let e: Error = NcclError::Load(LoadError::NotFound {
            tried: vec![("SHARDKIT_NCCL_LIB", Arc::new(missing.unwrap_err()))],
        })
        .into();
        let text = e.to_string();
        assert!(
            text.starts_with("NCCL: libnccl.so.2 could not be loaded (SHARDKIT_NCCL_LIB: ")
                && text.ends_with("); set SHARDKIT_NCCL_LIB to its path"),
            "{text}"
        );
        let Error::Nccl {
            error: NcclError::Load(LoadError::NotFound { tried }),
            ..
        } = &e
        else {
            panic!("{e:?}")
        };
        assert!(
            matches!(&*tried[0].1, libloading::Error::DlOpen { .. }),
            "{tried:?}"
        );
        let e: Error = NcclError::MalformedId { bytes: 3 }.into();
        assert_eq!(
            e.to_string(),
            "NCCL: rank 0 published a malformed ncclUniqueId (3 bytes)"
        );
        assert_eq!(error_class::Classify::class(&e), error_class::Class::Fatal);
        let e: Error = NcclError::Call {
            what: "ncclAllReduce",
            code: 3,
            text: "internal error".into(),
            last: Some("peer gone".into()),
        }
        .into();
        assert_eq!(
            e.to_string(),
            "NCCL: ncclAllReduce failed: internal error (ncclResult 3): peer gone"
        );
    }

    #[test]
    fn loads_the_torch_wheels_nccl_and_makes_an_id() {
        // torch's wheel ships NCCL even for CPU-only machines; make sure libtorch is
        // mapped first, as it is in every tool.
        let _ = tch::Tensor::zeros([1], (tch::Kind::Float, tch::Device::Cpu));
        let nccl = Nccl::load().unwrap();
        assert!(nccl.version >= 21000, "{}", nccl.version);
        assert!(nccl.path.contains("libnccl.so"), "{}", nccl.path);
        assert!(nccl.version_string().starts_with("2."));
        // Making an id needs no GPU; two ids differ.
        if let (Ok(a), Ok(b)) = (nccl.unique_id(), nccl.unique_id()) {
            assert_ne!(a, b);
        }
    }
}
