//! Collectives over tch tensors for processes launched one per GPU by anything (GNU parallel,
//! xargs, Make, `torchrun --no-python`, Slurm `srun`).
//!
//! One [`Communicator`] per process: [`Communicator::connect`] meets the other ranks (see
//! [`rendezvous`]), learns which of them share its host ([`Communicator::host_peers`]) and wires
//! a TCP ring; collectives on CPU tensors run on that ring (the CPU backend, [`ring`]), or, when
//! every rank is on one host, all-reduce, broadcast and barrier through a shared-memory segment
//! ([`Transport`], `shm`: the same sums in the same order, so the same bits), or, across hosts,
//! through each host's segment and TCP between the hosts' leaders (`shm+tcp`, the same bits
//! again); collectives on
//! CUDA tensors on NCCL ([`nccl`], loaded at run time, its communicator made at the first CUDA
//! collective with the id passed through the store).
//!
//! Invariants:
//! - every wait has a deadline ([`Options::timeout`]); a peer that dies, hangs or never arrives
//!   makes every other rank fail with an error naming it, never hang;
//! - every CPU collective first checks that the neighbouring rank makes the same call (same
//!   collective, op, dtype, element count, root): a mismatch is [`Error::Mismatch`], not garbage;
//! - NCCL collectives are enqueued on libtorch's stream and are not waited for; call
//!   [`Communicator::synchronize`] where the host needs the result (reading it back to the CPU
//!   does that implicitly).
//!
//! ```no_run
//! use collectives::{Communicator, Options, ReduceOp};
//! let mut comm = Communicator::connect(&Options::default()).unwrap(); // env://
//! let mut g = tch::Tensor::ones([4], (tch::Kind::Float, tch::Device::Cpu));
//! comm.all_reduce(&mut g, ReduceOp::Avg).unwrap();
//! ```

#[cfg(feature = "clap")]
mod args;
mod host;
pub mod nccl;
mod reduce;
pub mod rendezvous;
mod ring;
mod shm;
pub mod store;

use std::time::Duration;

use tch::{Device, Tensor};

#[cfg(feature = "clap")]
pub use args::DistArgs;
pub use host::Hosts;
pub use reduce::{DType, ReduceOp};
pub use rendezvous::{InitMethod, Options, Plan};
pub use shm::Transport;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Rendezvous(String),
    #[error("{0}")]
    PortInUse(String),
    #[error("timed out after {:.0} s waiting for {}", waited.as_secs_f64(), missing.join(", "))]
    Timeout {
        waited: Duration,
        missing: Vec<String>,
    },
    #[error("lost rank {rank} during {during}: rank {rank} {what}")]
    Peer {
        rank: usize,
        what: String,
        during: String,
    },
    /// The stop hook ([`Options::should_stop`]) ended a wait: this rank was signalled.
    #[error("interrupted while {0}")]
    Interrupted(String),
    /// Rank `rank` left the group because it was stopped ([`Communicator::leave`]): `why` is
    /// its own account ("interrupted before ..."); this rank stops as well.
    #[error("stopping too: rank {rank} was {why}")]
    PeerStopped { rank: usize, why: String },
    #[error("{0}")]
    Mismatch(String),
    #[error("{0}")]
    Unsupported(String),
    /// NCCL failed (`also`: what the other ranks reported, when they did).
    #[error("NCCL: {error}{also}")]
    Nccl {
        error: nccl::NcclError,
        also: String,
    },
    #[error("{what}: {error}")]
    Io {
        what: &'static str,
        error: std::io::Error,
    },
}

impl From<nccl::NcclError> for Error {
    fn from(error: nccl::NcclError) -> Error {
        Error::Nccl {
            error,
            also: String::new(),
        }
    }
}

impl Error {
    pub(crate) fn io(what: &'static str) -> impl Fn(std::io::Error) -> Error {
        move |error| Error::Io { what, error }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

impl error_class::Classify for Error {
    fn class(&self) -> error_class::Class {
        match self {
            Error::Usage(_) => error_class::Class::Usage,
            // This rank's signal, or a peer that left because of its own.
            Error::Interrupted(_) | Error::PeerStopped { .. } => error_class::Class::Interrupted,
            _ => error_class::Class::Fatal,
        }
    }
}

/// How long a request may take on the failure paths (notes in the store when a rank fails or
/// leaves): a dead store refuses at once, so this only bounds a live but loaded one (1 s was
/// too short on a busy 2-core machine: a note went unread).
const NOTE_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest a stopped rank serving the store waits for the others to read its note: a
/// signalled process should end promptly (Slurm's KillWait is 30 s), and a peer learns of the
/// stop at its next collective, within a step.
const LINGER: Duration = Duration::from_secs(10);

/// Which engine runs collectives on CUDA tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// NCCL when it loads, else the CPU ring through host copies (with a note on stderr).
    #[default]
    Auto,
    /// NCCL or an error.
    Nccl,
    /// Always the CPU ring (CUDA tensors are copied to the host and back).
    Cpu,
}

impl std::str::FromStr for Backend {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Backend::Auto),
            "nccl" => Ok(Backend::Nccl),
            "cpu" | "gloo" | "ring" => Ok(Backend::Cpu),
            _ => Err(Error::Usage(format!(
                "unknown backend `{s}`: auto, nccl or cpu"
            ))),
        }
    }
}

/// This process's membership in a group of ranks.
#[derive(Debug)]
pub struct Communicator {
    plan: Plan,
    joined: rendezvous::Joined,
    backend: Backend,
    timeout: Duration,
    stop: fn() -> bool,
    /// One NCCL communicator per CUDA device this rank uses (a pipeline's stages each have
    /// theirs: the same ranks, each on its own device), made at the first collective there.
    nccl: Vec<nccl::NcclComm>,
    nccl_generation: usize,
}

impl Communicator {
    /// Meets the other ranks as `opts` and the launcher's environment say.
    pub fn connect(opts: &Options) -> Result<Communicator> {
        Communicator::connect_with(opts, Backend::Auto)
    }

    pub fn connect_with(opts: &Options, backend: Backend) -> Result<Communicator> {
        let plan = opts.plan()?;
        Communicator::from_plan(plan, opts, backend)
    }

    /// Connects a resolved plan (tests build plans without a process environment), with the
    /// init method, timeout and stop hook of `opts`.
    pub fn from_plan(plan: Plan, opts: &Options, backend: Backend) -> Result<Communicator> {
        let mut joined =
            rendezvous::connect(&plan, &opts.init_method, opts.timeout, opts.should_stop)?;
        if let Err(e) = shm::setup(
            &plan,
            &mut joined,
            opts.transport,
            &opts.init_method,
            opts.timeout,
            opts.should_stop,
        ) {
            if joined._server.is_some() {
                // The others read this rank's verdict from the store it serves: keep it up a
                // moment (their polls are 200 ms apart).
                std::thread::sleep(Duration::from_millis(600));
            }
            return Err(e);
        }
        Ok(Communicator {
            plan,
            joined,
            backend,
            timeout: opts.timeout,
            stop: opts.should_stop,
            nccl: Vec::new(),
            nccl_generation: 0,
        })
    }

    /// Leaves the group because this rank was stopped (a signal): `why` goes in the store for
    /// the others, which then fail their next (or current) collective with
    /// [`Error::PeerStopped`] naming this rank instead of a lost connection. The ring's sockets
    /// close at once, so no peer waits out its timeout on this rank (NCCL peers still do: their
    /// kernels see no socket); a rank serving the store keeps it up until every other rank has
    /// read the note or left one of its own, or the timeout passes.
    pub fn leave(mut self, why: &str) {
        let me = self.plan.rank;
        for c in &mut self.nccl {
            c.abort();
        }
        // The note first, then the sockets: a peer that sees them close finds the note. A set
        // has no reply (TCPStore's protocol); the check after it on the same connection does,
        // so once it answers the note is in the store for every connection.
        let noted = self.joined.store.as_mut().is_some_and(|store| {
            store.shorten_timeout(NOTE_TIMEOUT);
            let key = format!("stopped/{me}");
            store.set(&key, why.as_bytes()).is_ok() && store.check(&[&key]).unwrap_or(false)
        });
        self.drop_links();
        if noted {
            self.linger();
        }
    }

    /// Closes the ring's sockets and leaves the host's shared memory: the others' waits on this
    /// rank end now, not at their deadline.
    fn drop_links(&mut self) {
        self.joined.ring = ring::Ring::single();
        if let Some(g) = self.joined.shm.take() {
            g.abandon();
        }
    }

    /// A rank that serves the store and is leaving keeps it up until every other rank has left
    /// a note (and so has read the notes it came for), or [`LINGER`] (at most the timeout)
    /// passes. Its ring sockets must be closed first: the others learn from them that something
    /// happened.
    fn linger(&mut self) {
        let (me, world) = (self.plan.rank, self.plan.world_size);
        let (Some(store), Some(_)) = (self.joined.store.as_mut(), self.joined._server.as_ref())
        else {
            return;
        };
        let deadline = std::time::Instant::now() + self.timeout.min(LINGER);
        while std::time::Instant::now() < deadline {
            let seen = (0..world).filter(|&r| r != me).all(|r| {
                [format!("failed/{r}"), format!("stopped/{r}")]
                    .iter()
                    .any(|k| store.check(&[k.as_str()]).unwrap_or(true))
            });
            if seen {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn rank(&self) -> usize {
        self.plan.rank
    }

    pub fn world_size(&self) -> usize {
        self.plan.world_size
    }

    /// `LOCAL_RANK` / `SLURM_LOCALID`, when a launcher set it.
    pub fn local_rank(&self) -> Option<usize> {
        self.plan.local_rank
    }

    /// Which host each rank is on, as the ranks found at the rendezvous (each rank's kernel
    /// boot id, network namespace and host name, exchanged through the store).
    pub fn hosts(&self) -> &Hosts {
        &self.joined.hosts
    }

    /// The ranks on this rank's host, ascending (this rank among them): for dividing the
    /// host's CPU threads among them.
    pub fn host_peers(&self) -> Vec<usize> {
        self.joined.hosts.peers_of(self.plan.rank)
    }

    /// This rank's place among [`Communicator::host_peers`] (0 for the lowest rank on the host).
    pub fn host_rank(&self) -> usize {
        let me = self.plan.rank;
        self.host_peers().iter().position(|&r| r == me).unwrap_or(0)
    }

    /// How many ranks share this rank's host.
    pub fn host_size(&self) -> usize {
        self.host_peers().len()
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The engine collectives on tensors on `device` use: `"nccl"`, else `"cpu-shm"` (the
    /// host's shared memory, [`Transport::Shm`]), `"cpu-shm+tcp"` (shared memory inside each
    /// host, TCP between the hosts' leaders), `"cpu-ring"` (the TCP ring) or
    /// `"cpu-ring-interleaved"` (the TCP ring because the ranks of a host are not consecutive).
    pub fn engine(&self, device: Device) -> &'static str {
        if device.is_cuda()
            && self.backend != Backend::Cpu
            && (self.backend == Backend::Nccl || nccl::Nccl::load().is_ok())
        {
            return "nccl";
        }
        match (self.transport(), self.joined.interleaved) {
            ("shm", _) => "cpu-shm",
            ("shm+tcp", _) => "cpu-shm+tcp",
            (_, true) => "cpu-ring-interleaved",
            _ => "cpu-ring",
        }
    }

    /// How CPU collectives travel: `"shm"` (the host's shared memory: all-reduce, broadcast
    /// and barrier; all-gather and reduce-scatter keep the ring), `"shm+tcp"` (the same inside
    /// each host, and TCP between the hosts' leaders) or `"tcp"` (the ring; also a world of one).
    pub fn transport(&self) -> &'static str {
        match &self.joined.shm {
            Some(g) if g.is_cross() => "shm+tcp",
            Some(_) => "shm",
            None => "tcp",
        }
    }

    /// In-place all-reduce.
    pub fn all_reduce(&mut self, t: &mut Tensor, op: ReduceOp) -> Result<()> {
        let dtype = DType::from_kind(t.kind())?;
        if self.use_nccl(t.device())? {
            // SAFETY: `p` holds `count` elements of `dtype` (nccl_in_place).
            return self.nccl_in_place(t, "all_reduce", |c, p, count| unsafe {
                c.all_reduce(p, p, count, dtype, op)
            });
        }
        self.host_all_reduce(t, dtype, op)
    }

    /// Out-of-place all-reduce: `output` (same shape and kind) gets the reduction of `input`.
    pub fn all_reduce_into(
        &mut self,
        input: &Tensor,
        output: &mut Tensor,
        op: ReduceOp,
    ) -> Result<()> {
        same_layout(input, output, 1, "all_reduce")?;
        let dtype = DType::from_kind(input.kind())?;
        if self.use_nccl(input.device())? {
            let count = contiguous_numel(input, "all_reduce")?;
            contiguous_numel(output, "all_reduce")?;
            let (s, r) = (input.data_ptr(), output.data_ptr());
            // SAFETY: device pointers of contiguous tensors of `count` elements of `dtype` (checked
            // above), alive while NCCL works on them: it queues on libtorch's current stream.
            return self.with_nccl(input.device(), |c| unsafe {
                c.all_reduce(s, r, count, dtype, op)
            });
        }
        if input.device() == Device::Cpu
            && input.is_contiguous()
            && output.is_contiguous()
            && byte_len(input) > 0
        {
            // A plain memcpy: libtorch's copy_ may wake its thread pool, whose spinning threads
            // then compete with the other ranks' ring loops for the same cores.
            // SAFETY: two contiguous CPU tensors of equal byte size (same_layout); `input` is
            // only read, and cannot alias `output`, which is borrowed mutably.
            let src = unsafe {
                std::slice::from_raw_parts(input.data_ptr() as *const u8, byte_len(input))
            };
            // SAFETY: `output` is a contiguous CPU tensor borrowed mutably (no other view of it
            // is read here).
            unsafe { tensor_bytes(output) }.copy_from_slice(src);
        } else {
            output.copy_(input);
        }
        self.host_all_reduce(output, dtype, op)
    }

    /// Copies `root`'s tensor into every rank's `t`.
    pub fn broadcast(&mut self, t: &mut Tensor, root: usize) -> Result<()> {
        self.check_root(root)?;
        let dtype = DType::from_kind(t.kind())?;
        if self.use_nccl(t.device())? {
            // SAFETY: `p` holds `count` elements of `dtype` (nccl_in_place).
            return self.nccl_in_place(t, "broadcast", |c, p, count| unsafe {
                c.broadcast(p, p, count, dtype, root)
            });
        }
        self.on_host(t, |j, buf| match j.shm.as_mut() {
            Some(g) => g.broadcast(buf, dtype, root),
            None => j.ring.broadcast(buf, dtype, root),
        })
    }

    /// `output` (world × input.numel() elements, any shape) gets every rank's `input`, in rank
    /// order.
    pub fn all_gather(&mut self, input: &Tensor, output: &mut Tensor) -> Result<()> {
        let world = self.world_size();
        same_layout(input, output, world, "all_gather")?;
        let dtype = DType::from_kind(input.kind())?;
        if self.use_nccl(input.device())? {
            let count = contiguous_numel(input, "all_gather")?;
            contiguous_numel(output, "all_gather")?;
            let (s, r) = (input.data_ptr(), output.data_ptr());
            // SAFETY: device pointers of contiguous tensors of `count` elements of `dtype` (checked
            // above), alive while NCCL works on them: it queues on libtorch's current stream.
            return self.with_nccl(input.device(), |c| unsafe {
                c.all_gather(s, r, count, dtype)
            });
        }
        let n = input.numel() as i64;
        let rank = self.rank() as i64;
        // A contiguous output is worked on in place (a view); another through a copy.
        let mut flat = if output.is_contiguous() {
            output.view([-1])
        } else {
            output.reshape([-1]).copy()
        };
        // The slot may alias `input` (in-place all-gather): then it already holds the data.
        if flat.narrow(0, rank * n, n).data_ptr() != input.data_ptr() {
            flat.narrow(0, rank * n, n).copy_(&input.reshape([-1]));
        }
        self.on_host(&mut flat, |j, buf| j.ring.all_gather(buf, dtype))?;
        if !output.is_contiguous() {
            output.copy_(&flat.view(output.size().as_slice()));
        }
        Ok(())
    }

    /// `input` holds world × output.numel() elements; `output` gets the reduction of every
    /// rank's slot `rank`.
    pub fn reduce_scatter(
        &mut self,
        input: &Tensor,
        output: &mut Tensor,
        op: ReduceOp,
    ) -> Result<()> {
        let world = self.world_size();
        same_layout(output, input, world, "reduce_scatter")?;
        let dtype = DType::from_kind(input.kind())?;
        if self.use_nccl(input.device())? {
            contiguous_numel(input, "reduce_scatter")?;
            let count = contiguous_numel(output, "reduce_scatter")?;
            let (s, r) = (input.data_ptr(), output.data_ptr());
            // SAFETY: device pointers of contiguous tensors of `count` elements of `dtype` (checked
            // above), alive while NCCL works on them: it queues on libtorch's current stream.
            return self.with_nccl(input.device(), |c| unsafe {
                c.reduce_scatter(s, r, count, dtype, op)
            });
        }
        let n = output.numel() as i64;
        let mut work = input.to_device(Device::Cpu).reshape([-1]).copy();
        self.on_host(&mut work, |j, buf| j.ring.reduce_scatter(buf, dtype, op))?;
        output.copy_(
            &work
                .narrow(0, self.rank() as i64 * n, n)
                .view(output.size().as_slice()),
        );
        Ok(())
    }

    /// Every rank's `text`, in rank order, through the host ring (whatever the ranks' devices):
    /// for comparing settings or listing the ranks' machines.
    pub fn all_gather_text(&mut self, text: &str) -> Result<Vec<String>> {
        let world = self.world_size();
        let mut len = Tensor::from_slice(&[text.len() as i64]);
        self.all_reduce(&mut len, ReduceOp::Max)?;
        let n = len.int64_value(&[]) as usize;
        if n == 0 {
            return Ok(vec![String::new(); world]);
        }
        let mut mine = text.as_bytes().to_vec();
        mine.resize(n, 0);
        let mut all = Tensor::zeros([world as i64, n as i64], (tch::Kind::Uint8, Device::Cpu));
        self.all_gather(&Tensor::from_slice(&mine), &mut all)?;
        let bytes =
            Vec::<u8>::try_from(all.reshape([-1])).map_err(|e| Error::Mismatch(e.to_string()))?;
        Ok(bytes
            .chunks(n)
            .map(|row| {
                let end = row.iter().position(|&b| b == 0).unwrap_or(row.len());
                String::from_utf8_lossy(&row[..end]).into_owned()
            })
            .collect())
    }

    /// A zeroed CPU tensor of `numel` elements of `kind` shared with the other ranks of this
    /// host: with the shared-memory transport on one host (engine `cpu-shm`), an all-reduce of
    /// it, or of one range of it at the same place on every rank, reads the other ranks' values
    /// where they are instead of copying them through the transport's slots (about 1.6× less
    /// memory traffic for buffers over 256 KiB; same bits). Every rank calls it, in the same
    /// order and with the same size: a collective (another size is [`Error::Mismatch`]) over
    /// shared memory; with any other transport it is `Tensor::zeros`, and nothing is checked.
    /// Its memory is allocated at once (a size the host cannot hold is an error here) and
    /// stays until the process exits, whatever becomes of the communicator: allocate once (a
    /// run's gradients), not per step.
    pub fn shared_zeros(&mut self, numel: i64, kind: tch::Kind) -> Result<Tensor> {
        let bytes = DType::from_kind(kind).and_then(|dtype| {
            usize::try_from(numel)
                .ok()
                .and_then(|n| n.checked_mul(dtype.size()))
                .ok_or_else(|| Error::Usage(format!("{numel} elements cannot be shared")))
        });
        let bytes = bytes.inspect_err(|_| {
            // The other ranks may be waiting in the collective this rank will not enter.
            if let Some(g) = &self.joined.shm {
                g.abandon();
            }
        })?;
        match self.joined.shm.as_mut() {
            Some(g) if !g.is_cross() => {
                let r = g.share(bytes);
                let ptr = self.noted(r)?;
                // SAFETY: `bytes` bytes of zeroes at `ptr`, page-aligned, mapped read-write until
                // the process exits (never unmapped).
                Ok(unsafe { Tensor::from_blob(ptr, &[numel], &[1], kind, Device::Cpu) })
            }
            _ => Ok(Tensor::zeros([numel], (kind, Device::Cpu))),
        }
    }

    /// Returns once every rank has called it (host-side: it does not wait for queued GPU work;
    /// call [`Communicator::synchronize`] first for that).
    pub fn barrier(&mut self) -> Result<()> {
        let r = match self.joined.shm.as_mut() {
            Some(g) => g.barrier(),
            None => self.joined.ring.barrier(),
        };
        self.noted(r)
    }

    /// Waits for this rank's queued NCCL collectives on every device (no-op for the CPU ring,
    /// which is synchronous).
    pub fn synchronize(&mut self) -> Result<()> {
        self.nccl.iter_mut().try_for_each(|c| c.synchronize())
    }

    fn check_root(&self, root: usize) -> Result<()> {
        if root >= self.world_size() {
            return Err(Error::Usage(format!(
                "root {root} is outside a world of {}",
                self.world_size()
            )));
        }
        Ok(())
    }

    fn use_nccl(&self, device: Device) -> Result<bool> {
        if !device.is_cuda() || self.backend == Backend::Cpu {
            return Ok(false);
        }
        match nccl::Nccl::load() {
            Ok(_) => Ok(true),
            Err(e) if self.backend == Backend::Nccl => Err(e),
            Err(_) => Ok(false),
        }
    }

    /// Runs `f` on this device's NCCL communicator (each `f` above passes the data pointers of
    /// contiguous CUDA tensors on that device, checked by `contiguous_numel`/`same_layout`, which
    /// the caller's borrows keep alive; the caching allocator does not reuse their memory for work
    /// queued later on the same stream), making it first (collectively) if needed.
    ///
    /// A rank may use several devices (pipeline stages): each gets its own communicator over the
    /// same ranks, made in the order the devices are first used, which must be the same order
    /// on every rank (the ids travel through the store under one key per communicator made).
    fn with_nccl(
        &mut self,
        device: Device,
        f: impl FnOnce(&mut nccl::NcclComm) -> Result<()>,
    ) -> Result<()> {
        let Device::Cuda(index) = device else {
            unreachable!("NCCL on a CPU tensor")
        };
        let at = match self.nccl.iter().position(|c| c.device == index) {
            Some(at) => at,
            None => {
                let lib = nccl::Nccl::load()?;
                self.nccl_generation += 1;
                let key = format!("nccl_id/{}", self.nccl_generation);
                let id = if self.rank() == 0 {
                    let id = lib.unique_id()?;
                    if let Some(store) = self.joined.store.as_mut() {
                        store.set(&key, &id)?;
                    }
                    id
                } else {
                    let store = self.joined.store.as_mut().expect("world > 1 has a store");
                    let v = store.get(&key)?;
                    let bytes = v.len();
                    v.try_into()
                        .map_err(|_| nccl::NcclError::MalformedId { bytes })?
                };
                self.nccl.push(nccl::NcclComm::init(
                    lib,
                    id,
                    self.rank(),
                    self.world_size(),
                    index,
                    self.timeout,
                    self.stop,
                )?);
                self.nccl.len() - 1
            }
        };
        let r = f(&mut self.nccl[at]);
        self.noted(r)
    }

    /// Runs `f` on the NCCL communicator of `t`'s device with `t`'s data pointer and element
    /// count: a contiguous CUDA tensor (checked here; `what` names the collective if not), whose
    /// memory the caller's `&mut` keeps alive while NCCL works on it on libtorch's current
    /// stream.
    fn nccl_in_place(
        &mut self,
        t: &mut Tensor,
        what: &str,
        f: impl FnOnce(&mut nccl::NcclComm, *mut std::ffi::c_void, usize) -> Result<()>,
    ) -> Result<()> {
        let count = contiguous_numel(t, what)?;
        let p = t.data_ptr();
        self.with_nccl(t.device(), |c| f(c, p, count))
    }

    /// In-place all-reduce of a tensor through the host's memory (shared memory or the ring).
    fn host_all_reduce(&mut self, t: &mut Tensor, dtype: DType, op: ReduceOp) -> Result<()> {
        self.on_host(t, |j, buf| match j.shm.as_mut() {
            Some(g) => g.all_reduce(buf, dtype, op),
            None => j.ring.all_reduce(buf, dtype, op),
        })
    }

    /// Runs a CPU collective (shared memory or ring) on `t`'s bytes: in place for contiguous CPU tensors, else through
    /// a contiguous host copy that is copied back.
    fn on_host(
        &mut self,
        t: &mut Tensor,
        f: impl FnOnce(&mut rendezvous::Joined, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        let r = if t.device() == Device::Cpu && t.is_contiguous() {
            // SAFETY: a contiguous CPU tensor owns numel × elt_size bytes at data_ptr, and the
            // `&mut Tensor` keeps anything else from touching them meanwhile.
            let buf = unsafe { tensor_bytes(t) };
            f(&mut self.joined, buf)
        } else {
            let mut host = t.to_device(Device::Cpu).contiguous();
            if host.data_ptr() == t.data_ptr() {
                host = host.copy();
            }
            // SAFETY: as above, for the private host copy.
            let buf = unsafe { tensor_bytes(&mut host) };
            let r = f(&mut self.joined, buf);
            if r.is_ok() {
                t.copy_(&host);
            }
            r
        };
        self.noted(r)
    }

    /// On failure, leaves a note in the store for the other ranks and adds theirs to the error,
    /// so a rank that only saw its neighbour exit still learns which rank failed first.
    fn noted<T>(&mut self, r: Result<T>) -> Result<T> {
        let Err(e) = r else { return r };
        if matches!(e, Error::Interrupted(_)) {
            // This rank's own stop: the tool says why when it leaves.
            return Err(e);
        }
        let Some(store) = self.joined.store.as_mut() else {
            return Err(e);
        };
        store.shorten_timeout(NOTE_TIMEOUT);
        let (me, world) = (self.plan.rank, self.plan.world_size);
        // A rank that left because it was stopped explains every failure it caused. Its note
        // was written before its sockets closed, so it is there now; this rank's own note then
        // tells a leaving rank 0 that it may take the store down.
        let stopped = |store: &mut store::Store| {
            (0..world).filter(|&r| r != me).find_map(|r| {
                let key = format!("stopped/{r}");
                store
                    .check(&[&key])
                    .unwrap_or(false)
                    .then(|| store.get_now(&key).ok())
                    .flatten()
                    .map(|v| Error::PeerStopped {
                        rank: r,
                        why: String::from_utf8_lossy(&v).into_owned(),
                    })
            })
        };
        let left = stopped(store);
        let _ = store.set(&format!("failed/{me}"), e.to_string().as_bytes());
        if let Some(left) = left {
            // Done with the group: the sockets close (the others learn of it now, not at their
            // timeout), and a rank serving the store keeps it up until they have read the note.
            self.drop_links();
            self.linger();
            return Err(left);
        }
        std::thread::sleep(Duration::from_millis(300));
        let mut others = Vec::new();
        for r in (0..world).filter(|&r| r != me) {
            let key = format!("failed/{r}");
            if store.check(&[&key]).unwrap_or(false)
                && let Ok(v) = store.get_now(&key)
            {
                others.push(format!("rank {r}: {}", String::from_utf8_lossy(&v)));
            }
        }
        if others.is_empty() {
            return Err(e);
        }
        let also = format!(" [other ranks report: {}]", others.join("; "));
        Err(match e {
            Error::Peer { rank, during, what } => Error::Peer {
                rank,
                during,
                what: what + &also,
            },
            Error::Mismatch(m) => Error::Mismatch(m + &also),
            Error::Nccl { error, also: a } => Error::Nccl {
                error,
                also: a + &also,
            },
            e @ Error::Interrupted(_) => e,
            other => Error::Rendezvous(format!("{other}{also}")),
        })
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        if let Some((path, nonce)) = &self.joined.file {
            // Remove the rendezvous file only if it is still ours.
            if std::fs::read_to_string(path).is_ok_and(|t| t.trim().ends_with(nonce.as_str())) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

fn byte_len(t: &Tensor) -> usize {
    t.numel() * t.kind().elt_size_in_bytes()
}

/// # Safety
/// `t` must be a contiguous CPU tensor not otherwise accessed while the slice lives.
unsafe fn tensor_bytes(t: &mut Tensor) -> &mut [u8] {
    let len = byte_len(t);
    if len == 0 {
        return &mut [];
    }
    // SAFETY: per the function's contract.
    unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut u8, len) }
}

fn contiguous_numel(t: &Tensor, what: &str) -> Result<usize> {
    // channels_last is dense too: ranks share the layout, so the raw memory is what travels.
    if !t.is_contiguous() && !gpu_runtime::shim::is_channels_last(t) {
        return Err(Error::Unsupported(format!(
            "{what} on CUDA needs contiguous (or channels_last) tensors (call .contiguous())"
        )));
    }
    Ok(t.numel())
}

/// `big` must hold `factor` × `small`'s elements, of the same kind and device.
fn same_layout(small: &Tensor, big: &Tensor, factor: usize, what: &str) -> Result<()> {
    if small.kind() != big.kind() || small.device() != big.device() {
        return Err(Error::Usage(format!(
            "{what}: input and output differ ({:?} on {:?} vs {:?} on {:?})",
            small.kind(),
            small.device(),
            big.kind(),
            big.device()
        )));
    }
    if big.numel() != small.numel() * factor {
        return Err(Error::Usage(format!(
            "{what}: the larger tensor must hold {factor} × {} elements, it holds {}",
            small.numel(),
            big.numel()
        )));
    }
    Ok(())
}

/// What the rendezvous and the NCCL loader read from the environment (the tools list it in
/// their man pages), besides the `--rank`/`--world-size`/`--master-addr`/`--master-port` flags'
/// own fallbacks.
pub const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT",
        "torchrun's (and torch.distributed's env://) rank, world size and rendezvous address.",
    ),
    (
        "TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT",
        "Set by torchrun: its agent already serves the store on MASTER_PORT, so every rank connects \
         as a client; keys are prefixed with the run id and restart count.",
    ),
    (
        "SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST (SLURM_JOB_NODELIST, SLURM_NODELIST)",
        "Under srun without RANK: the rank, the world size and (without MASTER_ADDR) the step's \
         first node as the rendezvous host.",
    ),
    (
        "SHARDKIT_ADDR",
        "The address other machines reach this one at, advertised by a store or ring served here \
         (default: the host name if it resolves, else 127.0.0.1).",
    ),
    (
        "SHARDKIT_NCCL_LIB",
        "The libnccl.so.2 to load, before the torch wheel's and the system's.",
    ),
    (
        "SHARDKIT_AGENT_STORE",
        "Internal: =1 makes ranks connect to a store another process serves (all-reduce-check \
         --spawn sets it for its children).",
    ),
];

/// The default [`Options::should_stop`]: waits end only by their deadline.
pub fn never() -> bool {
    false
}

#[cfg(test)]
mod tests;
