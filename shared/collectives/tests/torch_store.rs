//! Our TCPStore client and server against PyTorch's own `torch.distributed.TCPStore` (from the
//! project venv that scripts/setup makes): the protocol is undocumented, so this is the proof.

use std::process::{Command, Stdio};
use std::time::Duration;

use collectives::store::{Store, StoreServer};

#[test]
fn torch_clients_use_our_server() {
    let server = StoreServer::bind("127.0.0.1:0").unwrap();
    let port = server.addr().port();
    let mut ours =
        Store::connect(&format!("127.0.0.1:{port}"), "", Duration::from_secs(10)).unwrap();
    ours.set("from_rust", b"hello").unwrap();
    let script = format!(
        r#"
import datetime, torch.distributed as dist
s = dist.TCPStore("127.0.0.1", {port}, is_master=False, timeout=datetime.timedelta(seconds=20))
assert s.get("from_rust") == b"hello", s.get("from_rust")
s.set("from_torch", "42")
assert s.add("counter", 5) == 5 and s.add("counter", 2) == 7
s.wait(["from_rust"])
assert s.check(["from_rust"]) and not s.check(["absent"])
s.set("done", "1")
"#
    );
    let out = Command::new(testkit::python())
        .arg("-c")
        .arg(script)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ours.get("from_torch").unwrap(), b"42");
    assert_eq!(ours.add("counter", 1).unwrap(), 8);
}

#[test]
fn our_client_uses_a_torch_server() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = format!(
        r#"
import datetime, time, torch.distributed as dist
s = dist.TCPStore("127.0.0.1", {port}, is_master=True, timeout=datetime.timedelta(seconds=20), wait_for_workers=False)
s.set("from_torch", "abc")
s.wait(["from_rust"])
assert s.get("from_rust") == b"xyz"
assert int(s.get("n")) == 3
s.set("bye", "1")
time.sleep(1)
"#
    );
    let child = Command::new(testkit::python())
        .arg("-c")
        .arg(script)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ours =
        Store::connect(&format!("127.0.0.1:{port}"), "", Duration::from_secs(20)).unwrap();
    assert_eq!(ours.get("from_torch").unwrap(), b"abc");
    assert_eq!(ours.add("n", 3).unwrap(), 3);
    ours.set("from_rust", b"xyz").unwrap();
    ours.wait(&["bye"], Duration::from_secs(20)).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
