//! Two network namespaces joined by a veth pair: two hosts to the collectives (a rank's host is
//! its boot id, network namespace and host name), on one machine. Needs root and iproute2's
//! `ip` (scripts/setup installs it); a test that uses this fails saying what is missing rather
//! than passing without running. Shared by collectives' and all-reduce-check's tests.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The namespaces' addresses on the veth pair, host 0 then host 1.
pub const ADDRS: [&str; 2] = ["10.231.7.1", "10.231.7.2"];

/// The two namespaces, deleted (with their veth pair) when dropped, also when a test fails.
pub struct TwoHosts {
    pub names: [String; 2],
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip` ({e}): install iproute2 (scripts/setup does)"))?;
    if !out.status.success() {
        return Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

impl TwoHosts {
    /// Makes two namespaces named for this process and a counter (unique per test run), each
    /// with loopback up and one end of a veth pair at [`ADDRS`]. Panics saying what is missing
    /// (root, `ip`, network namespaces).
    pub fn new() -> TwoHosts {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        // SAFETY: no arguments.
        let uid = unsafe { libc::geteuid() };
        assert_eq!(
            uid, 0,
            "this test makes network namespaces (`ip netns add`): run it as root, as CI does"
        );
        let tag = format!(
            "sk{}x{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::SeqCst)
        );
        let hosts = TwoHosts {
            names: [format!("{tag}a"), format!("{tag}b")],
        };
        // Interface names are at most 15 bytes; each lives in its own namespace.
        let (va, vb) = ("skveth0", "skveth1");
        let [a, b] = [hosts.names[0].as_str(), hosts.names[1].as_str()];
        let made = (|| {
            ip(&["netns", "add", a])?;
            ip(&["netns", "add", b])?;
            ip(&[
                "link", "add", va, "netns", a, "type", "veth", "peer", "name", vb, "netns", b,
            ])?;
            for (ns, dev, addr) in [(a, va, ADDRS[0]), (b, vb, ADDRS[1])] {
                ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
                ip(&["-n", ns, "link", "set", "lo", "up"])?;
                ip(&["-n", ns, "link", "set", dev, "up"])?;
            }
            Ok::<(), String>(())
        })();
        if let Err(e) = made {
            drop(hosts); // deletes what was made
            panic!("cannot make two network namespaces: {e}");
        }
        hosts
    }

    /// `program` run inside host `h`'s namespace.
    pub fn command(&self, h: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[h]]).arg(program);
        c
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip")
                .args(["netns", "del", n])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}
