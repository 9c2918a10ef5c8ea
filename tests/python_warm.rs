//! scripts/python-warm, which scripts/test.sh gives the tests as their python: each script run
//! through it (forked from a server that has imported torch) against the venv's python itself,
//! same output, same status, same error text.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// This binary's server directory (its server ends when the directory is gone).
fn warm_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| testkit::fixture_dir("python-warm"))
}

fn warm() -> Command {
    let mut c = Command::new(testkit::repo_root().join("scripts/python-warm"));
    // The server ends soon after this binary's last test.
    c.env("SHARDKIT_PYTHON_WARM_DIR", warm_dir())
        .env("SHARDKIT_PYTHON_WARM_IDLE_S", "20");
    c
}

fn cold() -> Command {
    let mut c = Command::new(testkit::venv_python());
    c.env_remove("SHARDKIT_PYTHON_WARM_DIR");
    c
}

/// `python ARGS` both ways, each command set up by `setup` first: (cold, warm).
fn both(args: &[&str], setup: impl Fn(&mut Command), stdin: &[u8]) -> (Output, Output) {
    let run = |mut c: Command| {
        setup(&mut c);
        let mut child = c
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        child.wait_with_output().unwrap()
    };
    (run(cold()), run(warm()))
}

/// Same stdout, stderr and status both ways.
fn same(args: &[&str], setup: impl Fn(&mut Command), stdin: &[u8]) -> Output {
    let (c, w) = both(args, setup, stdin);
    let text = |o: &Output| {
        format!(
            "{:?} / {:?}\n--- stdout\n{}--- stderr\n{}",
            o.status.code(),
            o.status.signal(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    assert_eq!(text(&c), text(&w), "python {args:?}: cold, then warm");
    w
}

#[test]
fn a_child_sees_the_arguments_directory_environment_umask_and_path_of_its_client() {
    let dir = tempfile::tempdir().unwrap();
    let show = "import os, sys\n\
                print(sys.argv, repr(sys.path[0]), __name__, os.getcwd())\n\
                print(os.environ.get('WARM_TEST'), 'GONE' in os.environ, oct(os.umask(0)))";
    let o = same(
        &["-c", show, "a", "b c"],
        |c| {
            c.current_dir(dir.path())
                .env("WARM_TEST", "é ü")
                .env_remove("GONE");
        },
        b"",
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("['-c', 'a', 'b c']"));
    // A script file: its __file__, argv[0] as given, its directory first on the path, and its
    // functions found again by multiprocessing's spawned processes (which import it).
    std::fs::write(
        dir.path().join("s.py"),
        "import multiprocessing as mp, sys\n\
         def square(x):\n    return x * x\n\
         if __name__ == '__main__':\n\
         \x20   print(__file__, sys.argv, sys.path[0])\n\
         \x20   with mp.get_context('spawn').Pool(2) as p:\n\
         \x20       print(p.map(square, [1, 2, 3]))\n\
         \x20   sys.stdout.write('no newline at the end')\n",
    )
    .unwrap();
    let o = same(
        &["s.py", "x"],
        |c| {
            c.current_dir(dir.path());
        },
        b"",
    );
    assert!(String::from_utf8_lossy(&o.stdout).ends_with("[1, 4, 9]\nno newline at the end"));
    // Standard input, unbuffered output, a module.
    same(
        &[
            "-u",
            "-c",
            "import sys; print(sys.stdin.read().upper(), end='')",
        ],
        |_| {},
        b"piped in\n",
    );
    same(&["-m", "json.tool"], |_| {}, b"{\"a\": [1, 2]}");
}

#[test]
fn exit_statuses_errors_and_endings_are_python_s() {
    for code in [
        "import sys; sys.exit(7)",
        "import sys; sys.exit('a message')",
        "raise ValueError('boom')",
        "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
        "raise KeyboardInterrupt",
        // Threads are joined and atexit functions run, in that order, before the end.
        "import atexit, threading, time\n\
         atexit.register(print, 'atexit')\n\
         threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()",
    ] {
        same(&["-c", code], |_| {}, b"");
    }
    // A resource limit of the client's holds in the child: 1 KiB files, a 4 KiB write refused.
    let dir = tempfile::tempdir().unwrap();
    let limited = |python: Command| {
        let mut c = Command::new("bash");
        for (k, v) in python.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c.args(["-c", "ulimit -f 1 && exec \"$0\" -c \"$1\""])
            .arg(python.get_program())
            .arg("with open('f', 'w') as f: f.write('x' * 4096)")
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let (c, w) = (limited(cold()), limited(warm()));
    for o in [&c, &w] {
        assert_eq!(o.status.code(), Some(1));
        testkit::assert_mentions(&String::from_utf8_lossy(&o.stderr), &["File too large"]);
    }
}

#[test]
fn signals_to_the_client_reach_the_script() {
    let wait = "import sys, time\nprint('ready', flush=True)\ntime.sleep(300)";
    for (signal, how) in [(libc::SIGTERM, "terminated"), (libc::SIGINT, "interrupted")] {
        let mut statuses = Vec::new();
        for mut c in [cold(), warm()] {
            let mut child = c
                .args(["-c", wait])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            assert_eq!(line, "ready\n");
            // SAFETY: a signal to our own child, which has not been waited for.
            assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
            statuses.push(child.wait().unwrap().signal());
        }
        assert_eq!(statuses, [Some(signal); 2], "{how}: cold, then warm");
    }
}

/// The runs above were warm, not the cold fallback: a script's parent is the server.
#[test]
fn scripts_run_forked_from_the_server() {
    let o = warm()
        .args([
            "-c",
            "import os, sys; print(os.getppid(), 'torch' in sys.modules)",
        ])
        .output()
        .unwrap();
    testkit::ok(&o);
    let out = String::from_utf8(o.stdout).unwrap();
    let pids: Vec<String> = std::fs::read_dir(warm_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "pid"))
        .map(|e| {
            std::fs::read_to_string(e.path())
                .unwrap()
                .trim()
                .to_string()
        })
        .collect();
    assert!(
        pids.iter().any(|p| out == format!("{p} True\n")),
        "{out:?}: not a child of a server of {pids:?}"
    );
}
