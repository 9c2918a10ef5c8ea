//! Which ranks share a host, learnt at the rendezvous.
//!
//! Each rank publishes its host's identity in the store (`host/RANK`): the kernel's boot id
//! (`/proc/sys/kernel/random/boot_id`, new at every boot of every machine), its network
//! namespace (`/proc/self/ns/net`: processes in two containers of one kernel cannot meet on an
//! abstract Unix socket, so they are two hosts here) and the host name. Ranks with the same
//! identity share a host; a rank whose identity cannot be read gets a random one (a host of its
//! own), so a guess never puts two machines' ranks together.

use crate::store::Store;
use crate::{Error, Result};

/// The longest host identity read back from the store: longer ones are nobody's neighbour.
const MAX_IDENTITY: usize = 512;

#[cfg(test)]
thread_local! {
    /// Unit tests run ranks as threads of one process: each thread may pretend to be on its own
    /// host by naming one here before it connects.
    pub(crate) static TEST_HOST: std::cell::RefCell<Option<String>> =
        const { std::cell::RefCell::new(None) };
}

/// This process's host identity: `boot_id netns hostname`.
pub(crate) fn identity() -> String {
    #[cfg(test)]
    if let Some(h) = TEST_HOST.with(|h| h.borrow().clone()) {
        return h;
    }
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s.len() <= 64);
    let netns = std::fs::read_link("/proc/self/ns/net")
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    match (boot, netns) {
        (Some(boot), Some(netns)) => format!("{boot} {netns} {}", hostname()),
        _ => format!("unknown:{:016x}", crate::rendezvous::random_u64()),
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: a valid buffer and its length.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Which host each rank is on: host numbers in order of first appearance (rank 0's host is 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hosts {
    of: Vec<usize>,
}

impl Hosts {
    /// One rank alone.
    pub(crate) fn single() -> Hosts {
        Hosts { of: vec![0] }
    }

    /// From each rank's identity, in rank order.
    pub(crate) fn from_identities(ids: &[Vec<u8>]) -> Hosts {
        let mut seen: Vec<&[u8]> = Vec::new();
        let mut of = Vec::with_capacity(ids.len());
        for (rank, id) in ids.iter().enumerate() {
            // An identity too long to be ours is its rank's alone.
            if id.len() > MAX_IDENTITY || id.is_empty() {
                of.push(usize::MAX - rank);
                continue;
            }
            let h = match seen.iter().position(|s| *s == id.as_slice()) {
                Some(h) => h,
                None => {
                    seen.push(id);
                    seen.len() - 1
                }
            };
            of.push(h);
        }
        // Renumber the lone ranks after the shared hosts, in rank order.
        let mut next = seen.len();
        for h in &mut of {
            if *h >= usize::MAX - ids.len() {
                *h = next;
                next += 1;
            }
        }
        Hosts { of }
    }

    /// The host number of every rank, in rank order.
    pub fn of_ranks(&self) -> &[usize] {
        &self.of
    }

    /// How many hosts the ranks are on.
    pub fn count(&self) -> usize {
        self.of.iter().max().map_or(0, |m| m + 1)
    }

    /// The ranks on `rank`'s host, ascending (`rank` among them).
    pub fn peers_of(&self, rank: usize) -> Vec<usize> {
        let h = self.of[rank];
        (0..self.of.len()).filter(|&r| self.of[r] == h).collect()
    }
}

/// Publishes this rank's identity (before its ring address, so that it is there once every
/// address is).
pub(crate) fn publish(store: &mut Store, rank: usize) -> Result<()> {
    store.set(&format!("host/{rank}"), identity().as_bytes())
}

/// Reads every rank's identity (all published: the caller waited for the ring addresses, which
/// each rank sets after its identity).
pub(crate) fn gather(store: &mut Store, world: usize) -> Result<Hosts> {
    let mut ids = Vec::with_capacity(world);
    for r in 0..world {
        let id = store.get_now(&format!("host/{r}")).map_err(|e| {
            Error::Rendezvous(format!("rank {r} did not say which host it is on: {e}"))
        })?;
        ids.push(id);
    }
    Ok(Hosts::from_identities(&ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_group_by_identity_and_odd_ones_stand_alone() {
        let ids: Vec<Vec<u8>> = ["a", "b", "a", "", "b"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .chain([vec![b'x'; MAX_IDENTITY + 1]])
            .collect();
        let h = Hosts::from_identities(&ids);
        assert_eq!(h.of_ranks(), [0, 1, 0, 2, 1, 3]);
        assert_eq!(h.count(), 4);
        assert_eq!(h.peers_of(2), [0, 2]);
        assert_eq!(h.peers_of(3), [3]);
        assert_eq!(h.peers_of(4), [1, 4]);
    }

    #[test]
    fn this_hosts_identity_is_more_than_its_name() {
        let id = identity();
        // Two calls in one process agree (a random fallback would not).
        assert_eq!(id, identity());
        assert!(id.contains("net:["), "{id}");
    }
}
