//! Where a rank learns its rank, the world size and its peers.
//!
//! A [`Plan`] is resolved from options and the launcher's environment (pure, so it is unit
//! tested); [`connect`] then meets the other ranks through a TCPStore and wires the ring:
//!
//! - `env://` — `RANK`/`WORLD_SIZE`/`LOCAL_RANK`/`MASTER_ADDR`/`MASTER_PORT` as torchrun sets
//!   them, else Slurm's `SLURM_PROCID`/`SLURM_NTASKS`/`SLURM_LOCALID` with the first host of
//!   `SLURM_STEP_NODELIST` (the step's nodes; else the job's) as master and a port derived from
//!   `SLURM_JOB_ID` (so two jobs sharing a node do not clash on torch's fixed 29500, the seeds'
//!   `--master_port` trouble);
//! - `tcp://host:port` — the same with the address given;
//! - `file:///path` — rank 0 serves the store on a free port and writes `host:port nonce` to
//!   the file (atomically); the others read it, connect and check the nonce, so a stale file
//!   from an earlier run is never trusted. Works across machines on a shared filesystem.
//!
//! Under torchrun (`TORCHELASTIC_USE_AGENT_STORE=True`) the agent already serves a TCPStore
//! on `MASTER_PORT`, so every rank, rank 0 included, joins it as a client; otherwise rank 0
//! serves it. Keys are prefixed with torchrun's run id and restart count.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::ring::Ring;
use crate::store::{Store, StoreServer};
use crate::{Error, Result};

mod plan;
mod wire;

pub use plan::first_host;
use wire::wire;
pub(crate) use wire::wire_leaders;

/// torch's default `MASTER_PORT`.
pub const DEFAULT_PORT: u16 = 29500;
/// Default for every wait: rendezvous, each collective's silence, NCCL completion.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// How ranks find each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitMethod {
    Env,
    Tcp { host: String, port: u16 },
    File(PathBuf),
}

impl std::str::FromStr for InitMethod {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        if s == "env://" || s == "env" {
            return Ok(InitMethod::Env);
        }
        if let Some(rest) = s.strip_prefix("tcp://") {
            let rest = rest.trim_end_matches('/');
            let (host, port) = rest
                .rsplit_once(':')
                .and_then(|(h, p)| {
                    Some((h.trim_matches(|c| c == '[' || c == ']'), p.parse().ok()?))
                })
                .ok_or_else(|| Error::Usage(format!("`{s}`: write tcp://HOST:PORT")))?;
            return Ok(InitMethod::Tcp {
                host: host.to_string(),
                port,
            });
        }
        if let Some(path) = s.strip_prefix("file://") {
            if path.is_empty() {
                return Err(Error::Usage(format!("`{s}`: write file:///absolute/path")));
            }
            return Ok(InitMethod::File(PathBuf::from(path)));
        }
        Err(Error::Usage(format!(
            "unknown init method `{s}`: use env://, tcp://HOST:PORT or file:///PATH"
        )))
    }
}

impl std::fmt::Display for InitMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InitMethod::Env => f.write_str("env://"),
            InitMethod::Tcp { host, port } => write!(f, "tcp://{host}:{port}"),
            InitMethod::File(p) => write!(f, "file://{}", p.display()),
        }
    }
}

/// What the user said (flags); `None` falls back to the launcher's environment.
#[derive(Debug, Clone)]
pub struct Options {
    pub init_method: InitMethod,
    pub rank: Option<usize>,
    pub world_size: Option<usize>,
    pub master_addr: Option<String>,
    pub master_port: Option<u16>,
    /// The run this rank belongs to (`--run-id`); else the launcher's ([`Plan::run_id`]).
    pub run_id: Option<String>,
    pub timeout: Duration,
    /// How CPU collectives travel between ranks on one host.
    pub transport: crate::Transport,
    /// Asked while waiting for peers (rendezvous, ring collectives, NCCL completion): true ends
    /// the wait at once with [`Error::Interrupted`]. A tool passes its SIGINT/SIGTERM flag.
    pub should_stop: fn() -> bool,
}

use crate::never;

impl Default for Options {
    fn default() -> Self {
        Options {
            init_method: InitMethod::Env,
            rank: None,
            world_size: None,
            master_addr: None,
            master_port: None,
            run_id: None,
            timeout: DEFAULT_TIMEOUT,
            transport: crate::Transport::Auto,
            should_stop: never,
        }
    }
}

/// The end of a wait: its deadline, or the stop hook saying so first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Until {
    pub deadline: Instant,
    pub stop: fn() -> bool,
}

impl Until {
    pub fn new(timeout: Duration, stop: fn() -> bool) -> Until {
        Until {
            deadline: Instant::now() + timeout,
            stop,
        }
    }

    pub fn passed(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// `Err(Interrupted)` once the stop hook says so; `what` says what was being waited for.
    pub fn check(&self, what: impl FnOnce() -> String) -> Result<()> {
        if (self.stop)() {
            return Err(Error::Interrupted(what()));
        }
        Ok(())
    }
}

/// Where the store is and who serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreAt {
    /// `host:port`; `serve` says this rank (0) binds it.
    Tcp {
        host: String,
        port: u16,
        serve: bool,
        port_from: &'static str,
    },
    File(PathBuf),
}

/// A resolved rendezvous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub rank: usize,
    pub world_size: usize,
    pub local_rank: Option<usize>,
    pub store: StoreAt,
    /// Prefix of every store key.
    pub prefix: String,
    /// Which launcher's variables were used (for messages).
    pub launcher: &'static str,
    /// The run's identity: `--run-id`, else torchrun's `TORCHELASTIC_RUN_ID` (unless "none"),
    /// else Slurm's `slurm:JOB.STEP` (whichever variables name the rank); none otherwise (rank 0
    /// then makes a token up). A rank whose run is not the one rank 0's store serves is refused
    /// before it claims its rank.
    pub run_id: Option<String>,
}

/// The connected pieces: the store (kept for failure notes and NCCL's id), the ring, and the
/// server when this rank runs it (dropping it stops it).
#[derive(Debug)]
pub(crate) struct Joined {
    pub store: Option<Store>,
    pub ring: Ring,
    /// Held so that it serves until the communicator is dropped.
    pub _server: Option<StoreServer>,
    pub file: Option<(PathBuf, String)>,
    /// Which host each rank is on.
    pub hosts: crate::host::Hosts,
    /// The host's shared memory, when CPU collectives go through it ([`crate::shm`]).
    pub shm: Option<crate::shm::Group>,
    /// Ranks on several hosts, some sharing one, but not in runs of consecutive ranks per host:
    /// everything goes over the TCP ring ([`crate::shm`] needs them consecutive).
    pub interleaved: bool,
}

/// Meets the other ranks and wires the ring.
///
/// Kept in one piece: the rendezvous steps in order (store, run identity, peers, ring), each with
/// its own deadline and message.
pub(crate) fn connect(
    plan: &Plan,
    method: &InitMethod,
    timeout: Duration,
    stop: fn() -> bool,
) -> Result<Joined> {
    if plan.world_size == 1 {
        return Ok(Joined {
            store: None,
            ring: Ring::single(),
            _server: None,
            file: None,
            hosts: crate::host::Hosts::single(),
            shm: None,
            interleaved: false,
        });
    }
    let until = Until::new(timeout, stop);
    let prefix = plan.prefix.clone();
    let (mut store, server, file) = match &plan.store {
        StoreAt::Tcp {
            host,
            port,
            serve,
            port_from,
        } => {
            let server = if *serve {
                Some(StoreServer::bind_for(&format!("0.0.0.0:{port}"), plan.world_size).map_err(|e| match e {
                    Error::PortInUse(_) => Error::PortInUse(format!(
                        "port {port} (from {port_from}) is already in use on this host, so rank 0 cannot serve the \
                         rendezvous store there: another job (or a launcher) holds it; choose another with \
                         --master-port or MASTER_PORT"
                    )),
                    other => other,
                })?)
            } else {
                None
            };
            let store = Store::connect_until(&format!("{host}:{port}"), &prefix, timeout, stop)
                .map_err(|e| match e {
                    Error::Interrupted(_) => e,
                    e => Error::Rendezvous(format!(
                        "rank {} could not join the rendezvous ({method}): {e}",
                        plan.rank
                    )),
                })?;
            (store, server, None)
        }
        StoreAt::File(path) if plan.rank == 0 => {
            let server = StoreServer::bind("0.0.0.0:0")?;
            let host = advertised_host();
            let nonce = format!("{:016x}", random_u64());
            let addr = format!("{host}:{}", server.addr().port());
            let mut store = Store::connect(&addr, &prefix, timeout)?;
            store.set("nonce", nonce.as_bytes())?;
            // Temp file beside it, synced, renamed: a reader never sees half an address.
            atomic_file::write_atomic(path, |w| writeln!(w, "{addr} {nonce}")).map_err(|e| {
                Error::Rendezvous(format!(
                    "cannot write the rendezvous file {}: {}",
                    path.display(),
                    e.describe()
                ))
            })?;
            (store, Some(server), Some((path.clone(), nonce)))
        }
        StoreAt::File(path) => (join_file(path, &prefix, timeout, until)?, None, None),
    };
    let (ring, hosts) = match wire(plan, &mut store, method, timeout, until) {
        Ok(r) => r,
        Err(e) => {
            if server.is_some() {
                // The others read this rank's verdict from the store it serves: keep it up a
                // moment (their polls are 200 ms apart).
                std::thread::sleep(Duration::from_millis(600));
            }
            return Err(e);
        }
    };
    Ok(Joined {
        store: Some(store),
        ring,
        _server: server,
        file,
        hosts,
        shm: None,
        interleaved: false,
    })
}

/// Ranks ≠ 0 of `file://`: read the address, connect, check the nonce; retry until the deadline
/// (the file may not exist yet, or be left over from an earlier run).
fn join_file(path: &Path, prefix: &str, timeout: Duration, until: Until) -> Result<Store> {
    let mut why = String::from("the file does not exist yet");
    while !until.passed() {
        until.check(|| format!("waiting for rank 0's store in {}", path.display()))?;
        // Opening a FIFO (or a device) would block past every deadline: only a regular file is
        // read. Rank 0 renames its file over whatever is there, so keep waiting for it.
        if let Ok(meta) = std::fs::metadata(path)
            && !meta.is_file()
        {
            why = format!(
                "{} is not a regular file (a FIFO, device or directory?)",
                path.display()
            );
        } else if let Ok(text) = std::fs::read_to_string(path) {
            if let Some((addr, nonce)) = text.trim().split_once(' ') {
                match Store::connect(addr, prefix, Duration::from_millis(500)) {
                    Ok(mut s) => {
                        s.shorten_timeout(Duration::from_secs(2));
                        if s.check(&["nonce"]).unwrap_or(false)
                            && s.get_now("nonce").ok().as_deref() == Some(nonce.as_bytes())
                        {
                            s.shorten_timeout(timeout);
                            return Ok(s);
                        }
                        why = format!("the store at {addr} belongs to another run");
                    }
                    Err(_) => {
                        why = format!("nothing answers at {addr} (a file left by an earlier run?)")
                    }
                }
            } else {
                why = "the file is not `host:port nonce`".to_string();
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(Error::Rendezvous(format!(
        "rank 0 did not publish a store in {} within {:.0} s ({why})",
        path.display(),
        timeout.as_secs_f64()
    )))
}

/// Rank 0 says in the store which run it serves; every other rank reads it before it claims
/// its rank and, when its own run is known and another, leaves with a message naming both: a
/// rank of another job that found this port (the same MASTER_PORT, or job ids that map to one
/// port) must neither join this run nor take a real rank's place.
fn same_run(
    plan: &Plan,
    store: &mut Store,
    method: &InitMethod,
    timeout: Duration,
    until: Until,
) -> Result<()> {
    if plan.rank == 0 {
        let id = plan
            .run_id
            .clone()
            .unwrap_or_else(|| format!("token:{:016x}", random_u64()));
        return store.set("run_id", id.as_bytes());
    }
    wait_for_ranks(
        store,
        &[("run_id".to_string(), 0)],
        plan.world_size,
        method,
        timeout,
        until,
    )?;
    let theirs = String::from_utf8_lossy(&store.get_now("run_id")?).into_owned();
    match &plan.run_id {
        Some(mine) if *mine != theirs => Err(Error::Rendezvous(format!(
            "rank {} belongs to run {mine}, but the rendezvous store ({method}) serves run {theirs}: \
             another run holds this address and port. Nothing was joined; give this run another \
             port (--master-port or MASTER_PORT), or the same --run-id to ranks of one run",
            plan.rank
        ))),
        _ => Ok(()),
    }
}

/// Waits until every `(key, rank)` of `keys` is in the store, in short slices so that a verdict
/// another rank reached (it timed out first) is seen at once and repeated, rather than this rank
/// outliving the store. At the deadline, the verdict names the ranks that never came, and is left
/// in the store for the others.
pub(crate) fn wait_for_ranks(
    store: &mut Store,
    keys: &[(String, usize)],
    world: usize,
    method: &InitMethod,
    timeout: Duration,
    until: Until,
) -> Result<()> {
    let key_refs: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
    loop {
        let slice = until
            .deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(200));
        match store.wait(&key_refs, slice) {
            Ok(()) => return Ok(()),
            Err(Error::Timeout { missing, .. }) => {
                let who = || {
                    keys.iter()
                        .filter(|(k, _)| missing.contains(k))
                        .map(|(_, r)| r.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                until.check(|| {
                    format!("waiting at the rendezvous ({method}) for rank(s) {}", who())
                })?;
                if store.check(&["rendezvous_failed"])? {
                    let why = store.get_now("rendezvous_failed")?;
                    return Err(Error::Rendezvous(
                        String::from_utf8_lossy(&why).into_owned(),
                    ));
                }
                // A rank that claimed its place and whose store connection then closed has
                // gone (our store server says so; torch's agent store does not).
                let mut left = Vec::new();
                for (_, r) in keys.iter().filter(|(k, _)| missing.contains(k)) {
                    if store.check(&[&format!("{}{r}", crate::store::LEFT)])? {
                        left.push(r.to_string());
                    }
                }
                if !left.is_empty() {
                    let msg = format!(
                        "rank(s) {} of {world} left before the rendezvous ({method}) completed: \
                         their connection to the store closed (did they fail at start-up?)",
                        left.join(", ")
                    );
                    let _ = store.set("rendezvous_failed", msg.as_bytes());
                    return Err(Error::Rendezvous(msg));
                }
                if until.passed() {
                    let msg = format!(
                        "rank(s) {} of {world} never arrived at the rendezvous ({method}) within {:.0} s: were they \
                         launched, with the same address and port?",
                        who(),
                        timeout.as_secs_f64()
                    );
                    let _ = store.set("rendezvous_failed", msg.as_bytes());
                    return Err(Error::Rendezvous(msg));
                }
            }
            Err(other) => return Err(other),
        }
    }
}

/// The address other machines reach this one at: `SHARDKIT_ADDR`, else the host name if it
/// resolves to an address, else 127.0.0.1.
fn advertised_host() -> String {
    if let Ok(a) = std::env::var("SHARDKIT_ADDR") {
        return a;
    }
    let mut buf = [0u8; 256];
    // SAFETY: a valid buffer and its length.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0 {
        let name = String::from_utf8_lossy(&buf[..buf.iter().position(|&b| b == 0).unwrap_or(0)])
            .into_owned();
        use std::net::ToSocketAddrs;
        if let Some(a) = (name.as_str(), 0)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.find(|a| a.is_ipv4()))
        {
            return a.ip().to_string();
        }
    }
    "127.0.0.1".to_string()
}

/// A random u64 from the standard library's per-process hash keys (no extra dependency).
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.write_u32(std::process::id());
    h.finish()
}
