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
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::ring::Ring;
use crate::store::{Store, StoreServer};
use crate::{Error, Result};

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

impl Options {
    /// Resolves against this process's environment.
    pub fn plan(&self) -> Result<Plan> {
        self.plan_with(&|k| std::env::var(k).ok())
    }

    /// Resolves against `env` (a lookup, so tests need no process environment).
    ///
    /// Kept in one piece: the launchers' variables in their order of precedence (flags, torchrun,
    /// Slurm, defaults), which is what a reader checks against the documentation; split, that
    /// order would be spread over functions.
    pub fn plan_with(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Plan> {
        let num = |k: &str| -> Result<Option<usize>> {
            env(k)
                .map(|v| {
                    v.trim()
                        .parse()
                        .map_err(|_| Error::Usage(format!("{k}={v} is not a number")))
                })
                .transpose()
        };
        let torchrun = env("RANK").is_some() || env("TORCHELASTIC_RUN_ID").is_some();
        let slurm = !torchrun && env("SLURM_PROCID").is_some();
        let launcher = if torchrun {
            "torchrun/env"
        } else if slurm {
            "slurm"
        } else {
            "flags"
        };
        // A batch script (sbatch) has SLURM_PROCID=0 and the job's SLURM_NTASKS, but it is one
        // process, not the job's tasks: only srun starts those (each with its step's
        // SLURM_STEP_ID; the batch step's id is 0xfffffffb where Slurm sets one). Waiting for
        // ranks that never come would take the whole timeout.
        let batch_step = env("SLURM_STEP_ID").is_none_or(|s| s.trim() == "4294967291");
        let step = if batch_step {
            None
        } else {
            num("SLURM_STEP_ID")?
        };
        if slurm && batch_step && self.rank.is_none() && self.world_size.is_none() {
            let ntasks = num("SLURM_NTASKS")?.unwrap_or(1);
            if ntasks > 1 {
                return Err(Error::Usage(format!(
                    "this is the job's batch script (no SLURM_STEP_ID), not one of its \
                     SLURM_NTASKS={ntasks} tasks: launch the ranks with srun (`srun` in front of this command), \
                     or pass --world-size 1 to run one process here"
                )));
            }
        }
        let rank = match self.rank {
            Some(r) => Some(r),
            None if slurm => num("SLURM_PROCID")?,
            None => num("RANK")?,
        };
        let world_size = match self.world_size {
            Some(w) => Some(w),
            None if slurm => num("SLURM_NTASKS")?,
            None => num("WORLD_SIZE")?,
        };
        let local_rank = if slurm {
            num("SLURM_LOCALID")?
        } else {
            num("LOCAL_RANK")?
        };
        let world_size = world_size.unwrap_or(1);
        let rank = match rank {
            Some(r) => r,
            None if world_size == 1 => 0,
            None => {
                return Err(Error::Usage(format!(
                    "world size {world_size} but no rank: pass --rank or set RANK"
                )));
            }
        };
        if world_size == 0 || rank >= world_size {
            return Err(Error::Usage(format!(
                "rank {rank} is outside a world of {world_size}"
            )));
        }
        let agent = env("TORCHELASTIC_USE_AGENT_STORE")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || env("SHARDKIT_AGENT_STORE").is_some_and(|v| v == "1");
        let store = match &self.init_method {
            InitMethod::File(p) => StoreAt::File(p.clone()),
            method => {
                let (host, port, port_from) = match method {
                    InitMethod::Tcp { host, port } => (host.clone(), *port, "the tcp:// address"),
                    _ => {
                        let host = self.master_addr.clone().or_else(|| env("MASTER_ADDR"));
                        let host = host.or_else(|| {
                            if slurm {
                                // The step's first node runs its task 0: a step on a part of
                                // the job's nodes (srun --exact -N2 in a 4-node job, a sweep's
                                // trial) does not start on the job's first node.
                                first_host(
                                    &env("SLURM_STEP_NODELIST")
                                        .or_else(|| env("SLURM_JOB_NODELIST"))
                                        .or_else(|| env("SLURM_NODELIST"))?,
                                )
                            } else {
                                None
                            }
                        });
                        let (port, port_from) = match (self.master_port, env("MASTER_PORT")) {
                            (Some(p), _) => (p, "--master-port"),
                            (None, Some(p)) => (
                                p.trim().parse().map_err(|_| {
                                    Error::Usage(format!("MASTER_PORT={p} is not a port"))
                                })?,
                                "MASTER_PORT",
                            ),
                            (None, None) => match num("SLURM_JOB_ID")? {
                                // Two steps of one job (two sruns at once) get two ports.
                                Some(id) if slurm => (
                                    20000 + ((id + 1009 * step.unwrap_or(0)) % 20000) as u16,
                                    "SLURM_JOB_ID and SLURM_STEP_ID (20000 + (job + 1009 step) mod 20000)",
                                ),
                                _ => (DEFAULT_PORT, "the default"),
                            },
                        };
                        (
                            host.unwrap_or_else(|| "127.0.0.1".to_string()),
                            port,
                            port_from,
                        )
                    }
                };
                StoreAt::Tcp {
                    host,
                    port,
                    serve: rank == 0 && !agent,
                    port_from,
                }
            }
        };
        let prefix = match (agent, env("TORCHELASTIC_RUN_ID")) {
            (true, Some(id)) => format!(
                "shardkit/{id}/{}/",
                env("TORCHELASTIC_RESTART_COUNT").unwrap_or_else(|| "0".to_string())
            ),
            _ => "shardkit/".to_string(),
        };
        // The run's identity whichever variables name the rank: a job script that exports
        // RANK/WORLD_SIZE under Slurm is still its job's step (torchrun's default rendezvous id
        // is the word "none", which names no run).
        let run_id = self.run_id.clone().or_else(|| {
            env("TORCHELASTIC_RUN_ID")
                .filter(|id| id.trim() != "none")
                .or_else(|| {
                    Some(format!(
                        "slurm:{}.{}",
                        env("SLURM_JOB_ID")?.trim(),
                        step.map_or("batch".to_string(), |s| s.to_string())
                    ))
                })
        });
        Ok(Plan {
            run_id,
            rank,
            world_size,
            local_rank,
            store,
            prefix,
            launcher,
        })
    }
}

/// The first host name of a Slurm node list: `gpu[03-04,07],cpu1` → `gpu03`.
pub fn first_host(nodelist: &str) -> Option<String> {
    let nodelist = nodelist.trim();
    let end = nodelist.find([',', '[']).unwrap_or(nodelist.len());
    let prefix = &nodelist[..end];
    if nodelist[end..].starts_with('[') {
        let inner = &nodelist[end + 1..];
        let first = inner.split([',', '-', ']']).next()?;
        Some(format!("{prefix}{first}"))
    } else if prefix.is_empty() {
        None
    } else {
        Some(prefix.to_string())
    }
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

/// Publishes this rank's host identity and ring address, waits for everyone's, connects to the
/// next rank and accepts the previous one.
fn wire(
    plan: &Plan,
    store: &mut Store,
    method: &InitMethod,
    timeout: Duration,
    until: Until,
) -> Result<(Ring, crate::host::Hosts)> {
    let (rank, world) = (plan.rank, plan.world_size);
    same_run(plan, store, method, timeout, until)?;
    // Two processes given the same rank would otherwise wire a ring that deadlocks. (So one
    // communicator per process and store: a second would claim its rank again.)
    if store.add(&format!("{}{rank}", crate::store::CLAIM), 1)? > 1 {
        return Err(Error::Rendezvous(format!(
            "another process already joined as rank {rank} ({method}): each rank must be given once"
        )));
    }
    if rank == 0 {
        store.set("world_size", world.to_string().as_bytes())?;
        store.set("ring_nonce", format!("{:016x}", random_u64()).as_bytes())?;
    }
    // Bound to the address this rank advertises (the one its store connection leaves from),
    // not to every interface: only the network the ranks share can reach the ring port.
    let ip = store.local_ip();
    let listener = TcpListener::bind((ip, 0)).map_err(Error::io("ring listener"))?;
    let port = listener
        .local_addr()
        .map_err(Error::io("ring listener"))?
        .port();
    let me = std::net::SocketAddr::new(ip, port).to_string();
    crate::host::publish(store, rank)?;
    store.set(&format!("addr/{rank}"), me.as_bytes())?;

    let keys: Vec<(String, usize)> = (0..world).map(|r| (format!("addr/{r}"), r)).collect();
    wait_for_ranks(store, &keys, world, method, timeout, until)?;
    let theirs = String::from_utf8_lossy(&store.get("world_size")?).into_owned();
    if theirs != world.to_string() {
        return Err(Error::Mismatch(format!(
            "rank 0 runs a world of {theirs} ranks but rank {rank} was told {world}"
        )));
    }
    let nonce =
        u64::from_str_radix(&String::from_utf8_lossy(&store.get("ring_nonce")?), 16).unwrap_or(0);
    let hosts = crate::host::gather(store, world)?;

    let next = (rank + 1) % world;
    let prev = (rank + world - 1) % world;
    let next_addr = String::from_utf8_lossy(&store.get_now(&format!("addr/{next}"))?).into_owned();
    let prev_addr = String::from_utf8_lossy(&store.get_now(&format!("addr/{prev}"))?).into_owned();
    let mut to_next = connect_retry(&next_addr, until).map_err(|e| match e {
        Error::Interrupted(_) => e,
        e => Error::Rendezvous(format!("cannot connect to rank {next} at {next_addr}: {e}")),
    })?;
    let hello = hello(nonce, rank, world);
    to_next.write_all(&hello).map_err(Error::io("ring hello"))?;
    let from_prev =
        accept_prev(&listener, nonce, prev, &prev_addr, world, until).map_err(|e| match e {
            Error::Interrupted(_) => e,
            e => Error::Rendezvous(format!(
                "rank {prev} (previous in the ring) never connected to rank {rank}: {e}"
            )),
        })?;
    Ok((
        Ring::new(rank, world, to_next, from_prev, timeout, until.stop)?,
        hosts,
    ))
}

/// The rank field of a probe: a connection that only checks the port is open, dropped quietly.
const PROBE: usize = u32::MAX as usize;

fn hello(nonce: u64, rank: usize, world: usize) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(&nonce.to_le_bytes());
    h[8..12].copy_from_slice(&(rank as u32).to_le_bytes());
    h[12..].copy_from_slice(&(world as u32).to_le_bytes());
    h
}

/// Connects to the next rank's ring port. Its listener was bound before its address was
/// published, so a refused connection means the rank has gone: said at once, not at the deadline.
fn connect_retry(addr: &str, until: Until) -> Result<TcpStream> {
    loop {
        let sa = crate::store::resolve(addr)?;
        match TcpStream::connect_timeout(&sa[0], Duration::from_secs(5)) {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(Error::Rendezvous(format!(
                    "it has gone: its ring port refuses connections ({e})"
                )));
            }
            Err(e) if until.passed() => return Err(Error::io("ring connection")(e)),
            Err(_) => {
                until.check(|| format!("connecting to the next rank at {addr}"))?;
                std::thread::sleep(Duration::from_millis(50))
            }
        }
    }
}

/// How long a connection to the ring port may take to say its 16-byte hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections waiting to say hello at once; past that the oldest is dropped.
const MAX_PENDING_HELLOS: usize = 64;

/// Accepts connections until one says hello as `prev` of this run (the run's token from the
/// store, the rank and the world size). Nothing blocks: connections are accepted and read
/// without waiting ([`Hellos`]), so a stranger's silent connections cost nothing, and the
/// deadline and the stop hook are seen every few milliseconds. The previous rank is alive while
/// its own ring port (bound before it published its address, closed only after it connected
/// here) accepts connections: probed every [`PROBE_EVERY`]; once refused, its hello has
/// [`HELLO_TIMEOUT`] to arrive before it is declared gone.
fn accept_prev(
    listener: &TcpListener,
    nonce: u64,
    prev: usize,
    prev_addr: &str,
    world: usize,
    until: Until,
) -> Result<TcpStream> {
    let io = &Error::io("ring listener");
    listener.set_nonblocking(true).map_err(io)?;
    let mut hellos = Hellos {
        want: hello(nonce, prev, world),
        probe: hello(nonce, PROBE, world),
        prev,
        pending: Vec::new(),
    };
    let mut probed = Instant::now();
    let mut gone_since: Option<Instant> = None;
    loop {
        let mut busy = false;
        match listener.accept() {
            Ok((stream, peer)) => {
                stream.set_nonblocking(true).map_err(io)?;
                hellos.add(stream, peer);
                busy = true;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(io(e)),
        }
        let (found, read) = hellos.read();
        if let Some(stream) = found {
            stream.set_nonblocking(false).map_err(io)?;
            return Ok(stream);
        }
        if gone_since.is_some_and(|t| t.elapsed() > HELLO_TIMEOUT) {
            return Err(Error::Rendezvous(format!(
                "it has gone: its ring port at {prev_addr} refuses connections"
            )));
        }
        if gone_since.is_none() && probed.elapsed() > PROBE_EVERY {
            probed = Instant::now();
            if probe_refused(prev_addr, &hellos.probe) {
                gone_since = Some(Instant::now());
            }
        }
        if until.passed() {
            return Err(Error::Rendezvous("timed out".into()));
        }
        until.check(|| format!("waiting for rank {prev} to connect"))?;
        if !(busy || read) {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Connections to the ring port that have not said all of their 16-byte hello yet.
struct Hellos {
    /// The previous rank's hello.
    want: [u8; 16],
    /// A probe's hello (dropped quietly).
    probe: [u8; 16],
    prev: usize,
    pending: Vec<Pending>,
}

struct Pending {
    stream: TcpStream,
    peer: std::net::SocketAddr,
    got: Vec<u8>,
    since: Instant,
}

impl Hellos {
    /// A new connection (non-blocking); past [`MAX_PENDING_HELLOS`] the oldest is dropped.
    fn add(&mut self, stream: TcpStream, peer: std::net::SocketAddr) {
        if self.pending.len() == MAX_PENDING_HELLOS {
            let oldest = self.pending.remove(0);
            log::warn!(
                "dropped a connection to the ring port from {} (too many unannounced ones)",
                oldest.peer
            );
        }
        self.pending.push(Pending {
            stream,
            peer,
            got: Vec::with_capacity(16),
            since: Instant::now(),
        });
    }

    /// Reads what each connection has sent: the previous rank's stream once its hello is whole,
    /// and whether anything arrived. A connection whose hello is not this run's is dropped and
    /// named in a warning, one that says nothing within [`HELLO_TIMEOUT`] too; a probe quietly.
    fn read(&mut self) -> (Option<TcpStream>, bool) {
        use std::io::Read;
        let mut read = false;
        let mut i = 0;
        while i < self.pending.len() {
            let p = &mut self.pending[i];
            let mut buf = [0u8; 16];
            let left = self.want.len() - p.got.len();
            let verdict = match p.stream.read(&mut buf[..left]) {
                Ok(0) => Err("closed it before saying who it is"),
                Ok(n) => {
                    read = true;
                    p.got.extend_from_slice(&buf[..n]);
                    Ok(())
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if p.since.elapsed() > HELLO_TIMEOUT {
                        Err("said nothing within 2 s")
                    } else {
                        Ok(())
                    }
                }
                Err(_) => Err("failed"),
            };
            let whole = p.got.len() == self.want.len();
            match verdict {
                Ok(()) if whole && p.got == self.want => {
                    return (Some(self.pending.swap_remove(i).stream), read);
                }
                Ok(()) if whole && p.got == self.probe => {
                    self.pending.swap_remove(i);
                }
                Ok(()) if whole => self.drop_one(
                    i,
                    "presented a handshake that is not this run's rank, world size and token",
                ),
                Ok(()) => i += 1,
                Err(why) => self.drop_one(i, why),
            }
        }
        (None, read)
    }

    fn drop_one(&mut self, i: usize, why: &str) {
        let p = self.pending.swap_remove(i);
        log::warn!(
            "dropped a connection to the ring port from {}: it {why} (waiting for rank {})",
            p.peer,
            self.prev
        );
    }
}

/// How often a rank waiting for its previous rank checks that it is still there.
const PROBE_EVERY: Duration = Duration::from_millis(500);

/// Whether `addr` refuses a connection (its listener is gone); an open one gets `probe` (which
/// the listener drops quietly) and is closed.
fn probe_refused(addr: &str, probe: &[u8; 16]) -> bool {
    let Ok(sa) = crate::store::resolve(addr) else {
        return false;
    };
    match TcpStream::connect_timeout(&sa[0], Duration::from_secs(1)) {
        Ok(mut s) => {
            let _ = s.write_all(probe);
            false
        }
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionRefused,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn plan(opts: &Options, vars: &[(&str, &str)]) -> Result<Plan> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        opts.plan_with(&|k| m.get(k).cloned())
    }

    #[test]
    fn init_methods_parse() {
        assert_eq!("env://".parse::<InitMethod>().unwrap(), InitMethod::Env);
        assert_eq!(
            "tcp://node1:1234".parse::<InitMethod>().unwrap(),
            InitMethod::Tcp {
                host: "node1".into(),
                port: 1234
            }
        );
        assert_eq!(
            "file:///tmp/x".parse::<InitMethod>().unwrap(),
            InitMethod::File("/tmp/x".into())
        );
        for bad in ["tcp://node1", "tcp://h:notaport", "file://", "nccl://x"] {
            assert!(bad.parse::<InitMethod>().is_err(), "{bad}");
        }
    }

    #[test]
    fn torchrun_env_joins_the_agent_store_on_every_rank() {
        let vars = [
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29400"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("TORCHELASTIC_RUN_ID", "abc"),
            ("TORCHELASTIC_RESTART_COUNT", "1"),
        ];
        let p = plan(&Options::default(), &vars).unwrap();
        assert_eq!((p.rank, p.world_size, p.local_rank), (0, 2, Some(0)));
        assert_eq!(
            p.store,
            StoreAt::Tcp {
                host: "10.0.0.1".into(),
                port: 29400,
                serve: false,
                port_from: "MASTER_PORT"
            }
        );
        assert_eq!(p.prefix, "shardkit/abc/1/");
    }

    #[test]
    fn plain_env_makes_rank_0_serve_and_flags_override() {
        let vars = [
            ("RANK", "1"),
            ("WORLD_SIZE", "3"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "5000"),
        ];
        let p = plan(&Options::default(), &vars).unwrap();
        assert!(matches!(
            p.store,
            StoreAt::Tcp {
                serve: false,
                port: 5000,
                ..
            }
        ));
        let opts = Options {
            rank: Some(0),
            master_port: Some(6000),
            ..Options::default()
        };
        let p = plan(&opts, &vars).unwrap();
        assert_eq!(
            p.store,
            StoreAt::Tcp {
                host: "h".into(),
                port: 6000,
                serve: true,
                port_from: "--master-port"
            }
        );
    }

    #[test]
    fn slurm_env_gives_rank_world_master_host_and_a_per_job_port() {
        let vars = [
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_JOB_NODELIST", "gpu[03-04,07]"),
            ("SLURM_JOB_ID", "123456"),
            ("SLURM_STEP_ID", "0"),
        ];
        let p = plan(&Options::default(), &vars).unwrap();
        assert_eq!(
            (p.rank, p.world_size, p.local_rank, p.launcher),
            (5, 8, Some(1), "slurm")
        );
        assert!(
            matches!(&p.store, StoreAt::Tcp { host, port: 23456, serve: false, .. } if host == "gpu03")
        );
        assert_eq!(p.run_id.as_deref(), Some("slurm:123456.0"));
    }

    #[test]
    fn a_step_on_part_of_the_jobs_nodes_meets_on_its_own_first_node() {
        let vars = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_NODELIST", "gpu[03-04,07]"),
            ("SLURM_STEP_NODELIST", "gpu[04,07]"),
            ("SLURM_JOB_ID", "123456"),
            ("SLURM_STEP_ID", "3"),
        ];
        let p = plan(&Options::default(), &vars).unwrap();
        assert!(
            matches!(&p.store, StoreAt::Tcp { host, serve: true, .. } if host == "gpu04"),
            "{:?}",
            p.store
        );
    }

    #[test]
    fn runs_have_an_identity_and_slurm_steps_their_own_ports() {
        let slurm = |step: &'static str| {
            vec![
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_JOB_ID", "123456"),
                ("SLURM_STEP_ID", step),
            ]
        };
        let p = plan(&Options::default(), &slurm("2")).unwrap();
        assert!(
            matches!(p.store, StoreAt::Tcp { port: 25474, .. }),
            "{:?}",
            p.store
        );
        assert_eq!(p.run_id.as_deref(), Some("slurm:123456.2"));
        let torchrun = [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("TORCHELASTIC_RUN_ID", "job-7"),
        ];
        assert_eq!(
            plan(&Options::default(), &torchrun)
                .unwrap()
                .run_id
                .as_deref(),
            Some("job-7")
        );
        let flag = Options {
            run_id: Some("mine".into()),
            ..Options::default()
        };
        assert_eq!(
            plan(&flag, &slurm("0")).unwrap().run_id.as_deref(),
            Some("mine")
        );
        assert_eq!(plan(&Options::default(), &[]).unwrap().run_id, None);
    }

    #[test]
    fn a_slurm_job_that_exports_rank_and_world_size_keeps_its_job_as_its_run() {
        // `export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS` in the script srun starts: two
        // jobs on one MASTER_PORT must not take each other's ranks.
        let job = |id: &'static str| {
            vec![
                ("SLURM_PROCID", "1"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_JOB_ID", id),
                ("SLURM_STEP_ID", "0"),
                ("RANK", "1"),
                ("WORLD_SIZE", "2"),
                ("MASTER_PORT", "29500"),
            ]
        };
        let (a, b) = (
            plan(&Options::default(), &job("100")).unwrap(),
            plan(&Options::default(), &job("200")).unwrap(),
        );
        assert_eq!(a.run_id.as_deref(), Some("slurm:100.0"));
        assert_eq!(b.run_id.as_deref(), Some("slurm:200.0"));
        // torchrun's default id names no run: the job does.
        let mut torchrun = job("300");
        torchrun.push(("TORCHELASTIC_RUN_ID", "none"));
        assert_eq!(
            plan(&Options::default(), &torchrun)
                .unwrap()
                .run_id
                .as_deref(),
            Some("slurm:300.0")
        );
    }

    #[test]
    fn a_batch_script_of_several_tasks_is_told_to_use_srun_at_once() {
        let batch = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_NODELIST", "node1"),
            ("SLURM_JOB_ID", "77"),
        ];
        for step in [None, Some("4294967291")] {
            let mut vars = batch.to_vec();
            vars.extend(step.map(|s| ("SLURM_STEP_ID", s)));
            let e = plan(&Options::default(), &vars).unwrap_err().to_string();
            assert!(e.contains("launch the ranks with srun"), "{e}");
        }
        // One task, an srun step, or ranks given by flags: no complaint.
        let one = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")];
        assert_eq!(plan(&Options::default(), &one).unwrap().world_size, 1);
        let mut step = batch.to_vec();
        step.push(("SLURM_STEP_ID", "0"));
        assert_eq!(plan(&Options::default(), &step).unwrap().world_size, 2);
        let flags = Options {
            world_size: Some(1),
            ..Options::default()
        };
        assert_eq!(plan(&flags, &batch).unwrap().world_size, 1);
    }

    #[test]
    fn missing_or_bad_ranks_are_usage_errors() {
        assert!(plan(&Options::default(), &[("WORLD_SIZE", "2")]).is_err());
        assert!(plan(&Options::default(), &[("RANK", "2"), ("WORLD_SIZE", "2")]).is_err());
        assert!(plan(&Options::default(), &[("RANK", "x"), ("WORLD_SIZE", "2")]).is_err());
        let p = plan(&Options::default(), &[]).unwrap();
        assert_eq!((p.rank, p.world_size), (0, 1));
    }

    #[test]
    fn slurm_node_lists() {
        assert_eq!(first_host("gpu[03-04,07],cpu1").as_deref(), Some("gpu03"));
        assert_eq!(first_host("node7").as_deref(), Some("node7"));
        assert_eq!(first_host("a,b").as_deref(), Some("a"));
        assert_eq!(first_host("").as_deref(), None);
    }

    #[test]
    fn strangers_on_the_ring_port_neither_delay_the_real_rank_nor_the_stop() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // The previous rank's own ring port, open all along (it is alive).
        let prev_port = TcpListener::bind("127.0.0.1:0").unwrap();
        let live = prev_port.local_addr().unwrap().to_string();
        // 60 silent connections and one with another run's hello, then the real previous rank.
        let silent: Vec<TcpStream> = (0..60).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let mut stranger = TcpStream::connect(addr).unwrap();
        stranger.write_all(&hello(7, 1, 3)).unwrap();
        let mut real = TcpStream::connect(addr).unwrap();
        real.write_all(&hello(42, 1, 3)).unwrap();
        let t0 = Instant::now();
        let until = Until::new(Duration::from_secs(600), never);
        let mut got = accept_prev(&listener, 42, 1, &live, 3, until).unwrap();
        // Each silent connection had a blocking 5 s read before: five minutes here.
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{:?}",
            t0.elapsed()
        );
        // The stream returned is the real rank's.
        real.write_all(b"r").unwrap();
        got.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = [0u8; 1];
        std::io::Read::read_exact(&mut got, &mut b).unwrap();
        assert_eq!(&b, b"r");
        drop(silent);

        // A stop request ends the wait within a second, whatever waits on the port.
        static STOP: AtomicBool = AtomicBool::new(false);
        let _more: Vec<TcpStream> = (0..12).map(|_| TcpStream::connect(addr).unwrap()).collect();
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            STOP.store(true, Ordering::SeqCst);
        });
        let t0 = Instant::now();
        let until = Until::new(Duration::from_secs(600), || STOP.load(Ordering::SeqCst));
        let e = accept_prev(&listener, 42, 1, &live, 3, until).unwrap_err();
        assert!(matches!(e, Error::Interrupted(_)), "{e}");
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{:?}",
            t0.elapsed()
        );
    }

    #[test]
    fn a_previous_or_next_rank_that_has_gone_is_named_at_once_not_at_the_deadline() {
        // A rank that died after publishing its ring address: its port refuses connections.
        let gone = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let t0 = Instant::now();
        let e = accept_prev(
            &listener,
            42,
            1,
            &gone,
            3,
            Until::new(Duration::from_secs(600), never),
        )
        .unwrap_err()
        .to_string();
        // It waited for the whole --dist-timeout-secs before (the killed-rank test's flake).
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{:?}",
            t0.elapsed()
        );
        assert!(e.contains("has gone") && e.contains(&gone), "{e}");
        let t0 = Instant::now();
        let e = connect_retry(&gone, Until::new(Duration::from_secs(600), never))
            .unwrap_err()
            .to_string();
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{:?}",
            t0.elapsed()
        );
        assert!(e.contains("has gone"), "{e}");
        // A live previous rank that connects after being probed is accepted, the probes unseen.
        let prev_port = TcpListener::bind("127.0.0.1:0").unwrap();
        let live = prev_port.local_addr().unwrap().to_string();
        let addr = listener.local_addr().unwrap();
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&hello(42, 1, 3)).unwrap();
            s
        });
        accept_prev(
            &listener,
            42,
            1,
            &live,
            3,
            Until::new(Duration::from_secs(60), never),
        )
        .unwrap();
        drop(late.join().unwrap());
        drop(prev_port);
    }
}
