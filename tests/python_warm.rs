//! scripts/python-warm, which scripts/test.sh gives the tests as their python: each script run
//! through it (forked from a server that has imported torch) against the venv's python itself,
//! same output, same status, same error text.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
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

/// An output's status, stdout and stderr, to compare and to print.
fn described(o: &Output) -> String {
    format!(
        "{:?} / {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        o.status.signal(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A command running `program` with the environment changes of `python` (a [`cold`] or
/// [`warm`] command), to start python through a shell.
fn with_env_of(python: &Command, program: &str) -> Command {
    let mut c = Command::new(program);
    for (k, v) in python.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// Same stdout, stderr and status both ways.
fn same(args: &[&str], setup: impl Fn(&mut Command), stdin: &[u8]) -> Output {
    let (c, w) = both(args, setup, stdin);
    assert_eq!(
        described(&c),
        described(&w),
        "python {args:?}: cold, then warm"
    );
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
        "import os; os.kill(os.getpid(), 9)",
        "raise SystemExit(2**70)",
        // A file left open is written out at the end, as Python's own finalisation does.
        "import sys; f = open('/dev/stdout', 'w'); f.write('left open'); sys.stdout.write('std')",
        // Threads are joined and atexit functions run, in that order, before the end.
        "import atexit, threading, time\n\
         atexit.register(print, 'atexit')\n\
         threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()",
    ] {
        same(&["-c", code], |_| {}, b"");
    }
    // A resource limit of the client's holds in the child: 1 KiB files, a 4 KiB write refused.
    let write = "with open('f', 'w') as f: f.write('x' * 4096)";
    let o = same_through_sh("ulimit -f 1", write);
    assert_eq!(o.status.code(), Some(1));
    testkit::assert_mentions(&String::from_utf8_lossy(&o.stderr), &["File too large"]);
    // An address-space limit that a fresh python lives within (but not the server's torch).
    same_through_sh(
        "ulimit -v 1500000",
        "x = bytearray(50_000_000); print('allocated')",
    );
    // Python's own answers: a closed standard input, a script that is missing or a directory.
    // (A working directory that is gone runs too, but the /bin/sh that starts the client says
    // so on stderr first.)
    same_through_sh("exec <&-", "import sys; print(sys.stdin)");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("app")).unwrap();
    std::fs::write(dir.path().join("app/__main__.py"), "print('the app')").unwrap();
    for script in ["missing.py", "app"] {
        same(
            &[script],
            |c| {
                c.current_dir(dir.path());
            },
            b"",
        );
    }
}

/// `bash -c 'SHELL_PREFIX && exec python -c CODE'` both ways, in a new directory: the warm run's
/// output (checked the same as the cold one's).
fn same_through_sh(prefix: &str, code: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let run = |python: Command| {
        // A deadline: a run that hangs fails here rather than holding the suite.
        let mut c = with_env_of(&python, "timeout");
        c.args(["300", "bash"]);
        c.arg("-c")
            .arg(format!("{prefix} && exec \"$0\" -c \"$1\""))
            .arg(python.get_program())
            .arg(code)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let (c, w) = (run(cold()), run(warm()));
    assert_eq!(
        described(&c),
        described(&w),
        "{prefix}; python -c {code:?}: cold, then warm"
    );
    w
}

#[test]
fn signals_to_the_client_reach_the_script() {
    let wait = "import sys, time\nprint('ready', flush=True)\ntime.sleep(300)";
    for (signal, how) in [(libc::SIGTERM, "terminated"), (libc::SIGINT, "interrupted")] {
        let mut statuses = Vec::new();
        for mut c in [cold(), warm()] {
            // As from a terminal, whatever this test inherited: a background job of a
            // non-interactive shell (`cmd &`) starts with SIGINT ignored, and python then
            // keeps it ignored.
            // SAFETY: signal() is async-signal-safe, and nothing else runs in the child yet.
            unsafe {
                c.pre_exec(move || {
                    libc::signal(signal, libc::SIG_DFL);
                    Ok(())
                })
            };
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

#[test]
fn the_interpreter_state_a_fresh_process_would_have() {
    // PYTHONUNBUFFERED as -u: standard output and error reach one pipe in the order written.
    let merged = |python: Command| {
        let mut c = with_env_of(&python, "bash");
        c.env("PYTHONUNBUFFERED", "1")
            .args(["-c", "exec \"$0\" -c \"$1\" 2>&1"])
            .arg(python.get_program())
            .arg("import sys; print('out1'); print('err', file=sys.stderr); print('out2')")
            .output()
            .unwrap()
    };
    assert_eq!(merged(cold()).stdout, b"out1\nerr\nout2\n");
    assert_eq!(merged(warm()).stdout, b"out1\nerr\nout2\n");
    // Ignored signals and -B come along as a fresh process would have them.
    same(
        &[
            "-B",
            "-c",
            "import signal, sys; print(signal.getsignal(signal.SIGINT), sys.dont_write_bytecode)",
        ],
        |c| {
            // SAFETY: only async-signal-safe calls between fork and exec.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(c, || {
                    libc::signal(libc::SIGINT, libc::SIG_IGN);
                    Ok(())
                });
            }
        },
        b"",
    );
    // torch's generator is seeded afresh in every run; its threads follow the CPUs allowed.
    let seeds: Vec<Output> = (0..2)
        .map(|_| {
            warm()
                .args(["-c", "import torch; print(torch.initial_seed())"])
                .output()
                .unwrap()
        })
        .collect();
    assert_ne!(seeds[0].stdout, seeds[1].stdout, "the same seed twice");
    same(
        &["-c", "import torch; print(torch.get_num_threads())"],
        |c| {
            c.env_remove("OMP_NUM_THREADS");
            // SAFETY: only async-signal-safe calls between fork and exec.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(c, || {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(0, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
                    Ok(())
                });
            }
        },
        b"",
    );
}

/// A reader that is gone before the last flush: status 120, as Python ends then.
#[test]
fn a_failed_last_flush_is_status_120() {
    let code = "import sys, time; time.sleep(0.5); print('x'); sys.exit(3)";
    for c in [cold(), warm()] {
        let program = c.get_program().to_owned();
        let mut c = c;
        let mut child = c
            .args(["-c", code])
            .env_remove("PYTHONUNBUFFERED")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(120),
            "{program:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
