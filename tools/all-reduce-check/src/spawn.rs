//! `--spawn N`: this process serves the rendezvous store (as torchrun's agent does) and runs N
//! copies of itself as ranks 0..N with torchrun's variables, then reports how they ended.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cli_common::{Outcome, interrupt};
use collectives::store::StoreServer;

/// Set in the children so they run as ranks instead of spawning again.
pub const CHILD_VAR: &str = "SHARDKIT_SPAWNED";

/// Runs `n` ranks; their store is served on `port` (`--master-port`) when given, else on a free
/// port. A given port that is taken is an error, never silently another port.
pub fn run(n: usize, port: Option<u16>) -> Result<Outcome> {
    let server =
        StoreServer::bind(&format!("127.0.0.1:{}", port.unwrap_or(0))).map_err(|e| {
            match (e, port) {
                (collectives::Error::PortInUse(_), Some(p)) => anyhow::anyhow!(
                    "--master-port {p} is already in use on this host, so --spawn cannot serve the \
                 ranks' rendezvous store there: choose another, or leave it out for a free one"
                ),
                (e, _) => anyhow::Error::new(e).context("serving the rendezvous store for --spawn"),
            }
        })?;
    let children = start(n, server.addr().port())?;
    let ranks = wait_all(children)?;
    drop(server);
    interrupt::check()?;
    ranks.outcome()
}

/// Starts `n` copies of this command as ranks of a store on `port`.
fn start(n: usize, port: u16) -> Result<Vec<Child>> {
    let exe = std::env::current_exe().context("locating this executable")?;
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    (0..n)
        .map(|rank| {
            Command::new(&exe)
                .args(&args)
                .env(CHILD_VAR, "1")
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("WORLD_SIZE", n.to_string())
                .env("LOCAL_WORLD_SIZE", n.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("SHARDKIT_AGENT_STORE", "1")
                .spawn()
                .with_context(|| format!("starting rank {rank}"))
        })
        .collect()
}

/// How each rank ended: its exit code, and whether we stopped it.
struct Ended {
    codes: Vec<i32>,
    stopped_by_us: Vec<bool>,
}

/// Waits for every rank. A rank that fails names what it saw (a stalled peer after
/// --dist-timeout-secs); the others get a second to end by themselves, then they are stopped:
/// a rank still running a second after another failed is stalled (stopped, or stuck), and is
/// named as such. An interrupt stops them all.
fn wait_all(mut children: Vec<Child>) -> Result<Ended> {
    let n = children.len();
    let grace = Duration::from_secs(1);
    let mut first_failure: Option<(Instant, usize)> = None;
    let mut codes: Vec<Option<i32>> = vec![None; n];
    let mut stopped_by_us = vec![false; n];
    while codes.iter().any(Option::is_none) {
        let overdue = first_failure.is_some_and(|(t, _)| t.elapsed() > grace);
        if interrupt::requested() || overdue {
            for (rank, c) in children.iter_mut().enumerate() {
                if codes[rank].is_none() && !stopped_by_us[rank] {
                    stopped_by_us[rank] = true;
                    if let Some((_, failed)) = first_failure.filter(|_| !interrupt::requested()) {
                        eprintln!(
                            "all-reduce-check: rank {rank} stalled: still running {grace:?} after rank {failed} failed; stopping it"
                        );
                    }
                    let _ = c.kill();
                }
            }
        }
        for (rank, child) in children.iter_mut().enumerate() {
            if codes[rank].is_some() {
                continue;
            }
            if let Some(status) = child.try_wait()? {
                let code = status.code().unwrap_or_else(|| {
                    use std::os::unix::process::ExitStatusExt;
                    if !stopped_by_us[rank] {
                        eprintln!(
                            "all-reduce-check: rank {rank} was killed by signal {}",
                            status.signal().unwrap_or(0)
                        );
                    }
                    1
                });
                if code != 0 && first_failure.is_none() {
                    first_failure = Some((Instant::now(), rank));
                }
                codes[rank] = Some(code);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Ended {
        codes: codes.into_iter().map(Option::unwrap_or_default).collect(),
        stopped_by_us,
    })
}

impl Ended {
    /// All 0: ok; only 0 and 3: items failed; else an error naming each rank that failed.
    fn outcome(&self) -> Result<Outcome> {
        let codes = &self.codes;
        if codes.iter().all(|&c| c == 0) {
            return Ok(Outcome::Ok);
        }
        if codes.iter().all(|&c| c == 0 || c == 3) {
            return Ok(Outcome::ItemsFailed);
        }
        let failed: Vec<String> = codes
            .iter()
            .enumerate()
            .filter(|(_, c)| **c != 0)
            .map(|(r, c)| {
                if self.stopped_by_us[r] {
                    format!("rank {r} stalled")
                } else {
                    format!("rank {r} exited {c}")
                }
            })
            .collect();
        bail!(
            "{} of {} ranks failed ({})",
            failed.len(),
            codes.len(),
            failed.join(", ")
        )
    }
}
