//! `scripts/slurm-check --up` and `--down` on this machine: the cluster starts from a checkout
//! where nothing is built (it needs only Slurm's and munge's programs), under `flock` the lock
//! is free once the script has returned (no daemon it started holds a descriptor of its
//! caller's: a lock, a pipe), and the command it prints stops everything it started (slurmctld,
//! both slurmd, munged) and removes its scratch directory and /etc/hosts line.
//!
//! Needs root, slurm-wlm and munge, and no munged already running (so that the script starts
//! one): `cargo test --release -p testkit --test slurm_up -- --ignored`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Every wait is bounded: the script under `timeout`, polls by a deadline.
const DEADLINE_S: u64 = 180;

fn running(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// The pids of processes named `comm` (not zombies: the first process of a daemon that forked
/// away stays one where PID 1 does not reap).
fn pids(comm: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == comm)
            && running(pid)
        {
            found.push(pid);
        }
    }
    found
}

/// What each of `pid`'s descriptors points to.
fn open_files(pid: u32) -> Vec<PathBuf> {
    (std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten())
    .filter_map(|e| std::fs::read_link(e.path()).ok())
    .collect()
}

#[test]
#[ignore = "needs root, slurm-wlm and munge: starts a two-node cluster"]
fn up_needs_nothing_built_holds_no_callers_descriptor_and_its_stop_command_stops_all() {
    assert!(
        pids("munged").is_empty() && pids("slurmctld").is_empty(),
        "munged or slurmctld runs already: this test starts its own"
    );
    // A checkout with nothing built: the script alone.
    let tmp = tempfile::tempdir().unwrap();
    let checkout = tmp.path().join("checkout");
    std::fs::create_dir_all(checkout.join("scripts")).unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::copy(
        repo.join("scripts/slurm-check"),
        checkout.join("scripts/slurm-check"),
    )
    .unwrap();
    let lock = tmp.path().join("lock");
    // Under flock, its output read through pipes (a daemon holding one would keep this waiting
    // until the deadline).
    let out = Command::new("timeout")
        .arg(DEADLINE_S.to_string())
        .arg("flock")
        .arg(&lock)
        .arg(checkout.join("scripts/slurm-check"))
        .arg("--up")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let daemons: Vec<(&str, u32)> = ["munged", "slurmctld", "slurmd"]
        .into_iter()
        .flat_map(|c| pids(c).into_iter().map(move |p| (c, p)))
        .collect();
    assert_eq!(daemons.len(), 4, "{daemons:?}\n{stderr}");
    for (name, pid) in &daemons {
        let files = open_files(*pid);
        assert!(
            !files.contains(&lock),
            "{name} holds the caller's lock: {files:?}"
        );
    }
    let free = Command::new("flock")
        .args(["-n"])
        .arg(&lock)
        .arg("true")
        .status()
        .unwrap();
    assert!(free.success(), "the lock is still held after --up returned");
    // The cluster answers.
    let conf = (stderr.lines())
        .find_map(|l| l.split("export SLURM_CONF=").nth(1))
        .map(|r| {
            r.split_whitespace()
                .next()
                .unwrap()
                .trim_end_matches(';')
                .to_string()
        })
        .expect("--up prints SLURM_CONF");
    let sinfo = Command::new("sinfo")
        .args(["-h", "-N", "-o", "%t"])
        .env("SLURM_CONF", &conf)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&sinfo.stdout)
            .matches("idle")
            .count(),
        2,
        "{}",
        String::from_utf8_lossy(&sinfo.stderr)
    );
    let work = Path::new(&conf).parent().unwrap().to_path_buf();
    // The stop command it printed, run as printed.
    let stop = (stderr.lines())
        .find_map(|l| l.split("stop it: ").nth(1))
        .map(|s| s.trim_end_matches(')').to_string())
        .expect("--up prints a stop command");
    assert!(stop.contains(&work.display().to_string()), "{stop}");
    testkit::succeeds(
        Command::new("timeout")
            .arg(DEADLINE_S.to_string())
            .args(["sh", "-c", &stop]),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(DEADLINE_S);
    while daemons.iter().any(|(_, p)| running(*p)) {
        assert!(
            std::time::Instant::now() < deadline,
            "still running after `{stop}`: {:?}",
            daemons
                .iter()
                .filter(|(_, p)| running(*p))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(!work.exists(), "{} is left", work.display());
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap();
    assert!(!hosts.contains("shardkit slurm-check"), "{hosts}");
}
