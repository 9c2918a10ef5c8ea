//! Two nodes on one machine: two network namespaces joined by a veth pair (10.77.0.1 and
//! 10.77.0.2, nothing else reachable), two ranks on each. `all-reduce-check` and `ddp-train`
//! meet across them launched three ways: `torchrun --nnodes 2 --nproc_per_node 2` (c10d
//! rendezvous), `--init-method tcp://` and env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
//! by hand; ddp-train trains the same weights, bit for bit, however it was launched.
//!
//! Creating namespaces needs root (CAP_NET_ADMIN) and `ip`; where that fails the tests say so on
//! stderr (past the test harness's capture) and pass without running.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use testkit::{bin, bin_dir, python};

/// The nodes' addresses; node 0 serves the store.
const ADDR: [&str; 2] = ["10.77.0.1", "10.77.0.2"];
/// Every launch waits at most this long (`timeout` ends it).
const DEADLINE_S: &str = "240";

/// Two network namespaces joined by a veth pair, removed (with the pair) on drop.
struct Nodes {
    names: [String; 2],
}

impl Nodes {
    /// The two namespaces, or `None` (said on stderr) where they cannot be made.
    fn new(test: &str) -> Option<Nodes> {
        let id = format!("{}{}", std::process::id(), test.len());
        let names = [format!("sk{id}a"), format!("sk{id}b")];
        let nodes = Nodes {
            names: names.clone(),
        };
        let (va, vb) = (format!("sk{id}va"), format!("sk{id}vb"));
        let steps: Vec<Vec<&str>> = vec![
            vec!["netns", "add", &names[0]],
            vec!["netns", "add", &names[1]],
            vec!["link", "add", &va, "type", "veth", "peer", "name", &vb],
            vec!["link", "set", &va, "netns", &names[0]],
            vec!["link", "set", &vb, "netns", &names[1]],
        ];
        let a = format!("{}/24", ADDR[0]);
        let b = format!("{}/24", ADDR[1]);
        let inside: Vec<(&str, Vec<&str>)> = vec![
            (&names[0], vec!["addr", "add", &a, "dev", &va]),
            (&names[1], vec!["addr", "add", &b, "dev", &vb]),
            (&names[0], vec!["link", "set", "lo", "up"]),
            (&names[1], vec!["link", "set", "lo", "up"]),
            (&names[0], vec!["link", "set", &va, "up"]),
            (&names[1], vec!["link", "set", &vb, "up"]),
        ];
        let run = |args: &[&str]| -> Result<(), String> {
            let out = Command::new("ip")
                .args(args)
                .output()
                .map_err(|e| format!("ip: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "ip {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        let made = steps.iter().try_for_each(|s| run(s)).and_then(|_| {
            inside.iter().try_for_each(|(ns, s)| {
                let mut args = vec!["-n", *ns];
                args.extend(s);
                run(&args)
            })
        });
        match made {
            Ok(()) => Some(nodes),
            Err(why) => {
                // Straight to the process's stderr: the harness captures only print! and
                // eprint!, and a skipped test must be seen.
                let _ = writeln!(
                    std::io::stderr(),
                    "multinode::{test}: SKIPPED, cannot make network namespaces here ({why}); \
                     needs root and iproute2"
                );
                None
            }
        }
    }

    /// A command run on `node` (`ip netns exec NS timeout ... PROGRAM`), with the built tools
    /// first on PATH and no launcher variables of the test's own environment.
    fn on(&self, node: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[node], "timeout", DEADLINE_S])
            .arg(program);
        let path = format!(
            "{}:{}",
            bin_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        c.env("PATH", path);
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy().into_owned();
            if [
                "RANK",
                "WORLD_SIZE",
                "LOCAL_RANK",
                "MASTER_ADDR",
                "MASTER_PORT",
            ]
            .contains(&k.as_str())
                || k.starts_with("SLURM_")
                || k.starts_with("TORCHELASTIC_")
            {
                c.env_remove(k);
            }
        }
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

/// How the four ranks are started.
#[derive(Clone, Copy, Debug)]
enum Launch {
    /// One torchrun per node, c10d rendezvous on node 0.
    Torchrun,
    /// Four processes with `--init-method tcp://NODE0:PORT --rank R --world-size 4`.
    Tcp,
    /// Four processes with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
    Env,
}

/// Runs `tool args` as four ranks, two per node, launched as `how` with the store on `port`:
/// every process's output (all must succeed).
fn four_ranks(nodes: &Nodes, how: Launch, port: u16, tool: &str, args: &[&str]) -> Vec<Output> {
    let torchrun = testkit::venv_bin("torchrun");
    let commands: Vec<Command> = match how {
        Launch::Torchrun => (0..2)
            .map(|node| {
                let mut c = nodes.on(node, &torchrun);
                c.args(["--nnodes", "2", "--nproc_per_node", "2"])
                    .args(["--rdzv-backend", "c10d", "--rdzv-id", "multinode"])
                    .arg(format!("--rdzv-endpoint={}:{port}", ADDR[0]))
                    // torchrun hosts the c10d store only where the endpoint is its hostname;
                    // both namespaces share one hostname, so node 0 is told.
                    .arg(format!("--rdzv-conf=is_host={}", u8::from(node == 0)))
                    .args(["--local-addr", ADDR[node], "--no-python", tool])
                    .args(args);
                c
            })
            .collect(),
        Launch::Tcp | Launch::Env => (0..4)
            .map(|rank| {
                let mut c = nodes.on(rank / 2, bin(tool));
                c.args(args);
                if let Launch::Tcp = how {
                    c.arg(format!("--init-method=tcp://{}:{port}", ADDR[0]))
                        .args(["--rank", &rank.to_string(), "--world-size", "4"]);
                } else {
                    c.env("RANK", rank.to_string())
                        .env("LOCAL_RANK", (rank % 2).to_string())
                        .env("WORLD_SIZE", "4")
                        .env("MASTER_ADDR", ADDR[0])
                        .env("MASTER_PORT", port.to_string());
                }
                c
            })
            .collect(),
    };
    let children: Vec<_> = commands
        .into_iter()
        .map(|mut c| c.spawn().unwrap())
        .collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for (i, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "{tool} {how:?}, process {i}: {:?}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
    outs
}

/// The JSON records of all the processes' stdout, of `kind`.
fn records_of(outs: &[Output], kind: &str) -> Vec<serde_json::Value> {
    outs.iter()
        .flat_map(|o| testkit::records(&o.stdout))
        .filter(|r| r["type"] == kind)
        .collect()
}

#[test]
fn all_reduce_check_meets_across_two_nodes_launched_three_ways() {
    let Some(nodes) = Nodes::new("all_reduce_check") else {
        return;
    };
    for (how, port) in [
        (Launch::Torchrun, 29400),
        (Launch::Tcp, 29401),
        (Launch::Env, 29402),
    ] {
        let outs = four_ranks(
            &nodes,
            how,
            port,
            "all-reduce-check",
            &["-b", "1K", "-e", "64K", "-f", "8", "--device", "cpu"],
        );
        let sizes = records_of(&outs, "bandwidth");
        assert_eq!(sizes.len(), 3, "{how:?}: 1K, 8K, 64K");
        for r in &sizes {
            assert_eq!(r["world_size"], 4, "{how:?}");
            assert_eq!(r["out_of_place"]["wrong"], 0, "{how:?}");
            assert_eq!(r["in_place"]["wrong"], 0, "{how:?}");
        }
    }
}

#[test]
fn ddp_train_across_two_nodes_trains_the_same_weights_however_launched() {
    let Some(nodes) = Nodes::new("ddp_train") else {
        return;
    };
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    for ((how, port), dir) in [
        (Launch::Torchrun, 29410),
        (Launch::Tcp, 29411),
        (Launch::Env, 29412),
    ]
    .into_iter()
    .zip(&dirs)
    {
        let ck = dir.path().to_str().unwrap();
        let outs = four_ranks(
            &nodes,
            how,
            port,
            "ddp-train",
            &[
                "--device",
                "cpu",
                "--data",
                "synthetic:256",
                "--batch-size",
                "16",
                "--max-steps",
                "2",
                "--epochs",
                "1",
                "--augment",
                "--threads",
                "1",
                "--checkpoint-dir",
                ck,
            ],
        );
        let epochs = records_of(&outs, "epoch");
        assert_eq!(epochs.len(), 1, "{how:?}: rank 0 reports");
        assert_eq!(epochs[0]["world_size"], 4, "{how:?}");
    }
    // The same ranks in the same ring order: the same sums, so the same weights to the bit.
    let check = "import sys, torch\nfrom safetensors.torch import load_file\n\
         a = load_file(sys.argv[1])\n\
         for p in sys.argv[2:]:\n    b = load_file(p)\n    assert a.keys() == b.keys()\n    \
         bad = [k for k in a if not torch.equal(a[k], b[k])]\n    assert not bad, (p, bad[:5])\n";
    let out = Command::new(python())
        .arg("-c")
        .arg(check)
        .args(dirs.iter().map(|d| d.path().join("last.safetensors")))
        .output()
        .unwrap();
    testkit::ok(&out);
}
