//! Ranks on two hosts for real: two network namespaces of this machine (root; iproute2), two
//! ranks in each. Each rank is this test binary run again inside a namespace.

#[path = "support/netns.rs"]
mod netns;
#[path = "support/values.rs"]
mod values;

use values::{bytes_of, noise};

use std::process::Stdio;
use std::time::Duration;

use collectives::{Backend, Communicator, DType, Options, ReduceOp, Transport};
use tch::{Device, Kind, Tensor};

/// Set in the ranks this test starts: they run [`rank`] instead of starting ranks.
const CHILD: &str = "COLLECTIVES_TEST_NETNS_RANK";
const WORLD: usize = 4;

/// One rank: a communicator over `--transport auto` (which must pick shared memory inside each
/// namespace and TCP between them) and one over the TCP ring, the same inputs through both,
/// every result compared bit for bit (tolerance 0: both fold in the ring's order).
fn rank(rank: usize) {
    let connect = |transport, port| {
        let opts = Options {
            rank: Some(rank),
            world_size: Some(WORLD),
            master_addr: Some(netns::ADDRS[0].into()),
            master_port: Some(port),
            timeout: Duration::from_secs(60),
            transport,
            ..Options::default()
        };
        Communicator::connect_with(&opts, Backend::Cpu).unwrap()
    };
    let mut hier = connect(Transport::Auto, 29500);
    let mut ring = connect(Transport::Tcp, 29501);
    assert_eq!(hier.hosts().count(), 2);
    assert_eq!(hier.transport(), "shm+tcp");
    assert_eq!(hier.engine(Device::Cpu), "cpu-shm+tcp");
    assert_eq!(ring.engine(Device::Cpu), "cpu-ring");
    let mut cases = 0;
    for dtype in DType::ALL {
        for len in [1usize, 1001, 300_007] {
            for op in ReduceOp::ALL {
                let mut a = noise(rank, len, dtype.kind());
                let mut b = a.copy();
                hier.all_reduce(&mut a, op).unwrap();
                ring.all_reduce(&mut b, op).unwrap();
                assert!(
                    bytes_of(&a) == bytes_of(&b),
                    "rank {rank}: {dtype:?} {op:?} of {len}: memory+tcp and the ring differ"
                );
                cases += 1;
            }
        }
    }
    for root in 0..WORLD {
        let mut a = if rank == root {
            noise(20 + root, 600_001, Kind::Float)
        } else {
            Tensor::zeros([600_001], (Kind::Float, Device::Cpu))
        };
        let mut b = a.copy();
        hier.broadcast(&mut a, root).unwrap();
        ring.broadcast(&mut b, root).unwrap();
        assert!(bytes_of(&a) == bytes_of(&b), "broadcast from {root}");
        cases += 1;
    }
    hier.barrier().unwrap();
    ring.barrier().unwrap();
    println!("rank {rank}: {cases} cases bit-identical");
}

#[test]
fn two_hosts_in_network_namespaces_reduce_to_the_tcp_rings_bits() {
    if let Ok(r) = std::env::var(CHILD) {
        rank(r.parse().unwrap());
        return;
    }
    let hosts = netns::TwoHosts::new();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..WORLD)
        .map(|r| {
            let mut c = hosts.command(r / 2, &exe);
            c.args([
                "--exact",
                "two_hosts_in_network_namespaces_reduce_to_the_tcp_rings_bits",
                "--nocapture",
            ])
            .env(CHILD, r.to_string());
            for v in [
                "RANK",
                "WORLD_SIZE",
                "LOCAL_RANK",
                "MASTER_ADDR",
                "MASTER_PORT",
            ] {
                c.env_remove(v);
            }
            for v in [
                "TORCHELASTIC_USE_AGENT_STORE",
                "SHARDKIT_AGENT_STORE",
                "SLURM_PROCID",
            ] {
                c.env_remove(v);
            }
            c.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (r, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        let (o, e) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "rank {r}: {o}\n{e}");
        assert!(
            o.contains(&format!("rank {r}: 124 cases bit-identical")),
            "{o}"
        );
    }
    drop(hosts);
}
