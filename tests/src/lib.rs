//! Helpers for tests that drive the built shardkit binaries: find them, run them through a shell
//! pipe, and read their JSON-lines output.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Every tool of the workspace.
pub const TOOLS: &[&str] = &[
    "shard-list",
    "crop-resize",
    "gather-npz",
    "generate",
    "project-one-gpu",
    "all-reduce-check",
    "ddp-train",
    "sweep",
    "pack",
    "classify",
];

/// The directory holding the built binaries: the test executable's directory minus `deps`.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let mut dir = exe.parent().expect("deps dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// Path of a built tool; panics with a hint when it was not built.
pub fn bin(tool: &str) -> PathBuf {
    let p = bin_dir().join(tool);
    assert!(
        p.exists(),
        "{} not built: run `cargo build --release --workspace --bins` (scripts/test.sh does)",
        p.display()
    );
    p
}

/// Runs `script` with `sh -c` in `dir`, the built tools first on PATH.
pub fn sh(dir: &Path, script: &str) -> Output {
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .expect("running sh")
}

/// The workspace's root (the checkout holding `scripts/`, `shared/` and `.venv/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The variables a launcher (torchrun, Slurm, a hand-made rendezvous) sets for a process: a
/// test that starts ranks itself clears them, so that a test run inside a job does not take
/// the job's rank for its own.
pub const LAUNCHER_VARS: &[&str] = &[
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_RUN_ID",
    "SHARDKIT_AGENT_STORE",
    "SHARDKIT_SPAWNED",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
];

/// A command for `program` with none of [`LAUNCHER_VARS`] in its environment.
pub fn without_launcher(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    clear_launcher(&mut c);
    c
}

/// Removes [`LAUNCHER_VARS`] from `c`'s environment.
pub fn clear_launcher(c: &mut Command) -> &mut Command {
    for v in LAUNCHER_VARS {
        c.env_remove(v);
    }
    c
}

/// Asserts that a command succeeded (exit 0); its exit status and stderr in the message when
/// not.
pub fn ok(o: &Output) {
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}: {stderr}", o.status);
}

/// Asserts that a command exited with `code`; its stderr in the message when not.
pub fn exits(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Asserts that a command exited with `code` (its stderr in the message when not); its stderr,
/// for the assertions on what it says.
pub fn exit_stderr(o: &Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "{stderr}");
    stderr
}

/// Asserts that a command exited with `code` and that its stderr says `says`.
pub fn exits_saying(o: &Output, code: i32, says: &str) {
    let stderr = exit_stderr(o, code);
    assert!(stderr.contains(says), "not saying {says:?}: {stderr}");
}

/// Asserts that `text` (a message, a log) contains each of `parts`; `text` and the parts it
/// lacks in the message when not.
#[track_caller]
pub fn assert_mentions(text: &str, parts: &[&str]) {
    let missing: Vec<&str> = parts
        .iter()
        .copied()
        .filter(|p| !text.contains(p))
        .collect();
    assert!(missing.is_empty(), "not mentioning {missing:?}: {text}");
}

/// Starts every command at once (stdout and stderr captured) and waits for them all: their
/// outputs, in order.
pub fn run_all(cmds: impl IntoIterator<Item = Command>) -> Vec<Output> {
    let children: Vec<_> = cmds
        .into_iter()
        .map(|mut c| {
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("starting a command")
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().expect("waiting for a command"))
        .collect()
}

/// Runs the venv's Python ([`python`]) with `args`, asserting that it succeeds (its stdout and
/// stderr in the message when not); its output.
pub fn run_python<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Output {
    succeeds(Command::new(python()).args(args))
}

/// Runs `c` to its end and asserts that it succeeded (the command, its stdout and its stderr
/// in the message when not); its output.
pub fn succeeds(c: &mut Command) -> Output {
    let out = c.output().unwrap_or_else(|e| panic!("running {c:?}: {e}"));
    assert!(
        out.status.success(),
        "{c:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// [`run_python`] on `scripts/reference/SCRIPT` (the PyTorch transcriptions tests compare
/// with).
pub fn reference_script<S: AsRef<std::ffi::OsStr>>(
    script: &str,
    args: impl IntoIterator<Item = S>,
) -> Output {
    succeeds(python_script(&format!("scripts/reference/{script}")).args(args))
}

/// `c`, made to drop root's rights (to nobody, uid and gid 65534) before it runs when the
/// tests run as root, so that file permissions apply to it.
pub fn as_nobody(c: &mut Command) -> &mut Command {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::process::CommandExt;
        // SAFETY: setgid/setuid between fork and exec, async-signal-safe.
        unsafe {
            c.pre_exec(|| {
                if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    c
}

/// `name` (a file name or a relative path) in a new temporary directory, nothing made there
/// yet; the directory goes when the returned `TempDir` drops.
pub fn temp_path(name: impl AsRef<Path>) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join(name);
    (dir, path)
}

/// A file `name` holding `contents` in a new temporary directory; the directory goes when the
/// returned `TempDir` drops.
pub fn temp_file(
    name: impl AsRef<Path>,
    contents: impl AsRef<[u8]>,
) -> (tempfile::TempDir, PathBuf) {
    let (dir, path) = temp_path(name);
    std::fs::write(&path, contents).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (dir, path)
}

/// Makes a FIFO at `path` with mkfifo(3), in this process: a child forked for mkfifo(1) would
/// hold, until it execs, the descriptors (and their locks) of whatever other test runs then.
pub fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("a path without NUL");
    // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(
        r,
        0,
        "mkfifo {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// Runs `c` to its end, killing it and failing the test if it runs past `deadline` (what a
/// test of "never hangs" waits for: long, so that a loaded machine never trips it). Its output
/// is read as it comes, so that a command writing much never blocks on a full pipe.
pub fn output_within(c: &mut Command, deadline: std::time::Duration) -> Output {
    let mut child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting the command");
    // Each stream is read into a buffer by a thread of its own; on a timeout the buffer is
    // read as it is (grandchildren may hold the pipe open).
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let b = buf.clone();
        let reader = std::thread::spawn(move || {
            let mut chunk = [0u8; 65536];
            loop {
                match r.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => b.lock().expect("buffer").extend_from_slice(&chunk[..n]),
                }
            }
        });
        (buf, reader)
    };
    let (stdout, out_reader) = drain(Box::new(child.stdout.take().expect("piped")));
    let (stderr, err_reader) = drain(Box::new(child.stderr.take().expect("piped")));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting") {
            break status;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let err = stderr.lock().expect("buffer").clone();
            let tail = &err[err.len().saturating_sub(4000)..];
            panic!(
                "{c:?} still ran after {deadline:?} (killed): {}",
                String::from_utf8_lossy(tail)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    out_reader.join().expect("stdout reader");
    err_reader.join().expect("stderr reader");
    let take = |b: std::sync::Arc<std::sync::Mutex<Vec<u8>>>| {
        std::mem::take(&mut *b.lock().expect("buffer"))
    };
    Output {
        status,
        stdout: take(stdout),
        stderr: take(stderr),
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (for rendezvous in tests).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

/// A TCP port on 127.0.0.1 that refuses connections for as long as the returned socket lives
/// (what a port whose process died does): bound but not listening, so no other test or process
/// can take it meanwhile, as they could a port freed by [`free_port`].
pub fn refusing_port() -> (std::os::fd::OwnedFd, std::net::SocketAddr) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a new descriptor, owned at once; `addr` outlives them.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let fd = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
        let p = (&raw mut addr).cast::<libc::sockaddr>();
        assert_eq!(
            libc::bind(raw, p, len),
            0,
            "bind: {}",
            std::io::Error::last_os_error()
        );
        let mut got = len;
        assert_eq!(libc::getsockname(raw, p, &mut got), 0);
        let port = u16::from_be(addr.sin_port);
        (
            fd,
            std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port)),
        )
    }
}

/// Parses JSON lines, failing on anything that is not one JSON object per line.
pub fn records(stdout: &[u8]) -> Vec<Value> {
    let text = std::str::from_utf8(stdout).expect("stdout is UTF-8");
    text.lines()
        .map(|l| {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            assert!(
                v.get("type").and_then(Value::as_str).is_some(),
                "record without type: {l}"
            );
            v
        })
        .collect()
}

/// Files under `dir` (recursively, sorted) whose path ends with `suffix` ("" for all); none
/// when `dir` does not exist.
pub fn files_under(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p, suffix));
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Records of one type.
pub fn of_type<'a>(recs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["type"] == kind).collect()
}

/// Writes a small RGB test image (a gradient with some texture) as PNG or JPEG by extension.
/// imgs/{a,b,c}/{0,1,2}.{png,jpg}: nine small photos of different sizes in three folders.
pub fn photo_tree(dir: &Path) {
    for (i, sub) in ["a", "b", "c"].iter().enumerate() {
        for j in 0..3 {
            let ext = if j % 2 == 0 { "png" } else { "jpg" };
            write_image(
                &dir.join(format!("imgs/{sub}/{j}.{ext}")),
                40 + 7 * j,
                30 + 5 * i as u32,
                j + 3 * i as u32,
            );
        }
    }
}

/// `../shared` (or SHARDKIT_SHARED).
pub fn shared_dir() -> PathBuf {
    std::env::var_os("SHARDKIT_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
}

/// The command that runs the project venv's python: `scripts/python-warm` where
/// SHARDKIT_PYTHON_WARM_DIR is set (scripts/test.sh sets it), which runs it forked from a
/// process that has imported torch once, else the python itself ([`venv_python`]).
pub fn python() -> String {
    if std::env::var_os("SHARDKIT_PYTHON_WARM_DIR").is_some() {
        return repo_root()
            .join("scripts/python-warm")
            .to_string_lossy()
            .into_owned();
    }
    venv_python()
}

/// The project venv's python executable (or SHARDKIT_PYTHON).
pub fn venv_python() -> String {
    std::env::var("SHARDKIT_PYTHON")
        .unwrap_or_else(|_| format!("{}/../.venv/bin/python", env!("CARGO_MANIFEST_DIR")))
}

/// A program of the venv's `bin/` beside its python: `venv_bin("torchrun")`.
pub fn venv_bin(name: &str) -> PathBuf {
    Path::new(&venv_python()).with_file_name(name)
}

/// A command running the venv's python ([`python`]) on `script`, a path in the checkout
/// (`scripts/convert-network-pkl`); add its arguments.
pub fn python_script(script: &str) -> Command {
    let mut c = Command::new(python());
    c.arg(repo_root().join(script));
    c
}

/// `shared_dir()/fixtures/stylegan2`: upstream's tiny generators (`tiny-skip`,
/// `tiny-skip-clamp`: `G.safetensors`, the snapshot pickle and upstream's reference tensors).
pub fn stylegan2_fixtures() -> PathBuf {
    let dir = shared_dir().join("fixtures/stylegan2");
    assert!(
        dir.is_dir(),
        "{} is missing: ../shared must sit beside the checkout",
        dir.display()
    );
    dir
}

/// `$TMPDIR/shardkit-NAME-PID`, created, for a fixture a test binary makes once and its tests
/// share (kept in a `static`, which is never dropped). The directories of earlier test processes
/// of the same NAME that have ended are removed first, so that repeated runs do not fill the
/// disk: a process alive under such a PID keeps its directory.
pub fn fixture_dir(name: &str) -> PathBuf {
    let prefix = format!("shardkit-{name}-");
    let tmp = std::env::temp_dir();
    for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|p| p.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        // SAFETY: kill with signal 0 sends nothing; it only asks whether the process exists.
        let gone = pid > 0
            && unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let dir = tmp.join(format!("{prefix}{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// scikit-learn's digits in the CIFAR-100 layout, written into `dir` by
/// `scripts/make-digits-cifar` with the venv's python, with its `extra` flags (`--class-order`,
/// `--image-folder DIR`, `--shards DIR`): the small real data set the training tests learn.
pub fn make_digits(dir: &Path, extra: &[&std::ffi::OsStr]) {
    succeeds(
        python_script("scripts/make-digits-cifar")
            .arg(dir)
            .args(extra),
    );
}

pub fn write_image(path: &Path, w: u32, h: u32, seed: u32) {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).unwrap();
    }
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        let v = x
            .wrapping_mul(7)
            .wrapping_add(y.wrapping_mul(13))
            .wrapping_add(seed * 31);
        image::Rgb([
            (x * 255 / w.max(1)) as u8,
            (y * 255 / h.max(1)) as u8,
            (v % 256) as u8,
        ])
    });
    img.save(path).unwrap();
}

/// Writes a seed-000-style latent `.npz` holding `w` of shape [1, k, d] filled from `base`.
pub fn write_latent(path: &Path, k: usize, d: usize, base: f32) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    let a = ndarray::Array3::<f32>::from_shape_fn((1, k, d), |(_, i, j)| base + (i * d + j) as f32);
    let mut npz = ndarray_npy::NpzWriter::new(std::fs::File::create(path).unwrap());
    npz.add_array("w", &a).unwrap();
    npz.finish().unwrap();
}

/// The `make` call of `scripts/reference/torchscript_models.py` (for [`scripted_model_calls`]):
/// the scripted model `kind` for `classes` classes written to `file`, its initialisation drawn
/// from `seed` (the script's fixed seed without one).
pub fn scripted_model_make(
    kind: &str,
    file: &Path,
    classes: usize,
    seed: Option<u32>,
) -> Vec<std::ffi::OsString> {
    let mut call = vec![
        "make".into(),
        kind.into(),
        file.into(),
        classes.to_string().into(),
    ];
    call.extend(seed.map(|s| s.to_string().into()));
    call
}

/// [`scripted_model_make`]'s model (the script's fixed seed), made once per test binary, kind and
/// class count, for the tests that only read it: each Python start that imports torch costs a
/// few CPU seconds. Its "bn" (a small network with BatchNorm) trains many times faster than
/// ResNet-18 on the CPU, for the tests of the training loop rather than of the network.
pub fn scripted_model(kind: &str, classes: usize) -> &'static Path {
    scripted_models(&[(kind, classes)])[0]
}

/// [`scripted_model`] for several (kind, classes) at once: those not made yet are made by one
/// Python process.
pub fn scripted_models(wanted: &[(&str, usize)]) -> Vec<&'static Path> {
    type Made = std::collections::BTreeMap<(String, usize), &'static Path>;
    static MODELS: std::sync::Mutex<Made> = std::sync::Mutex::new(Made::new());
    let mut models = MODELS.lock().unwrap_or_else(|e| e.into_inner());
    let (mut made, mut calls) = (Vec::new(), Vec::new());
    for &(kind, classes) in wanted {
        let key = (kind.to_string(), classes);
        if !models.contains_key(&key) && !made.iter().any(|(k, _)| *k == key) {
            let model = fixture_dir(&format!("ts-{kind}-{classes}")).join(format!("{kind}.pt"));
            calls.push(scripted_model_make(kind, &model, classes, None));
            made.push((key, model));
        }
    }
    if !calls.is_empty() {
        scripted_model_calls(&calls);
    }
    for (key, model) in made {
        models.insert(key, Box::leak(model.into_boxed_path()));
    }
    (wanted.iter())
        .map(|&(kind, classes)| models[&(kind.to_string(), classes)])
        .collect()
}

/// `scripts/reference/torchscript_models.py each`: its calls (each the arguments after the
/// script's name: `make`, `train`, `ddp`, `state`, `eager`) run by one Python process, its `ddp`
/// calls last, all in the same rank processes (one per rank).
pub fn scripted_model_calls(calls: &[Vec<std::ffi::OsString>]) {
    let json: Vec<Vec<&str>> = (calls.iter())
        .map(|c| {
            (c.iter())
                .map(|a| {
                    a.to_str()
                        .expect("torchscript_models.py's arguments as UTF-8")
                })
                .collect()
        })
        .collect();
    let (_dir, list) = temp_file("calls.json", serde_json::to_vec(&json).unwrap());
    reference_script(
        "torchscript_models.py",
        [std::ffi::OsStr::new("each"), list.as_os_str()],
    );
}

/// `scripts/convert-vgg16-lpips --random SEED`'s file (VGG16 and LPIPS weights, random), made
/// once per test binary and seed: the script imports torchvision, seconds of CPU at every start.
/// Tests copy it where they want it ([`random_vgg_at`]) rather than share the one file.
pub fn random_vgg(seed: u32) -> &'static Path {
    static FILES: std::sync::Mutex<std::collections::BTreeMap<u32, &'static Path>> =
        std::sync::Mutex::new(std::collections::BTreeMap::new());
    let mut files = FILES.lock().unwrap_or_else(|e| e.into_inner());
    files.entry(seed).or_insert_with(|| {
        let path = fixture_dir(&format!("vgg{seed}")).join("vgg.safetensors");
        succeeds(
            python_script("scripts/convert-vgg16-lpips")
                .args(["--random", &seed.to_string(), "-o"])
                .arg(&path),
        );
        Box::leak(path.into_boxed_path())
    })
}

/// A copy of [`random_vgg`]`(seed)` at `path`.
pub fn random_vgg_at(seed: u32, path: &Path) {
    std::fs::copy(random_vgg(seed), path).unwrap();
}

/// A projection job on the tiny fixture generator: `n` target images rendered from seeds 0..n
/// under `dir/targets` and a VGG with random weights at `dir/vgg.safetensors`. Returns the
/// generator's path and the targets' paths relative to `dir`.
pub fn projection_job(dir: &Path, n: usize) -> (PathBuf, Vec<PathBuf>) {
    let g = shared_dir().join("fixtures/stylegan2/tiny-skip/G.safetensors");
    let o = Command::new(bin("generate"))
        .current_dir(dir)
        .args(["-q", "--device", "cpu", "--network"])
        .arg(&g)
        .args([
            "--seeds",
            &format!("0-{}", n - 1),
            "--trunc",
            "0.7",
            "-o",
            "targets",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    random_vgg_at(2, &dir.join("vgg.safetensors"));
    let inputs: Vec<PathBuf> = files_under(&dir.join("targets"), ".png")
        .iter()
        .map(|p| p.strip_prefix(dir).unwrap().to_path_buf())
        .collect();
    assert_eq!(inputs.len(), n);
    (g, inputs)
}

/// A tiled RGB TIFF with separate planes (PlanarConfiguration=2), 8 bits, uncompressed, whose
/// tiles overhang the image: Pillow reads it; the tiff crate (0.11.3) asserted on it.
pub fn planar_tiled_tiff(w: u16, h: u16, tile: u16) -> Vec<u8> {
    let (tx, ty) = (w.div_ceil(tile) as u32, h.div_ceil(tile) as u32);
    let tiles = tx * ty * 3;
    let tile_bytes = tile as u32 * tile as u32;
    let n = 11u16;
    let bps_at = 8 + 2 + 12 * n as u32 + 4;
    let offsets_at = bps_at + 6;
    let counts_at = offsets_at + 4 * tiles;
    let data_at = counts_at + 4 * tiles;
    let mut b = b"II".to_vec();
    b.extend(42u16.to_le_bytes());
    b.extend(8u32.to_le_bytes());
    b.extend(n.to_le_bytes());
    let mut entry = |tag: u16, typ: u16, count: u32, value: u32| {
        b.extend(tag.to_le_bytes());
        b.extend(typ.to_le_bytes());
        b.extend(count.to_le_bytes());
        b.extend(value.to_le_bytes()); // a SHORT sits in the first two bytes
    };
    for (tag, typ, count, value) in [
        (256, 3, 1, w as u32),
        (257, 3, 1, h as u32),
        (258, 3, 3, bps_at),
        (259, 3, 1, 1),
        (262, 3, 1, 2),
        (277, 3, 1, 3),
        (284, 3, 1, 2),
        (322, 3, 1, tile as u32),
        (323, 3, 1, tile as u32),
        (324, 4, tiles, offsets_at),
        (325, 4, tiles, counts_at),
    ] {
        entry(tag, typ, count, value);
    }
    b.extend(0u32.to_le_bytes());
    for _ in 0..3 {
        b.extend(8u16.to_le_bytes());
    }
    for i in 0..tiles {
        b.extend((data_at + i * tile_bytes).to_le_bytes());
    }
    for _ in 0..tiles {
        b.extend(tile_bytes.to_le_bytes());
    }
    for i in 0..tiles * tile_bytes {
        b.push((i * 7 % 256) as u8);
    }
    b
}

/// A record type of the `records` crate, with the `type` tag its lines carry.
pub trait Typed: serde::de::DeserializeOwned {
    const TYPE: &'static str;
}

macro_rules! typed {
    ($($t:ty => $name:literal),* $(,)?) => {
        $(impl Typed for $t {
            const TYPE: &'static str = $name;
        })*
    };
}

typed! {
    records::Shard => "shard",
    records::ErrorRecord => "error",
    records::SkippedRecord => "skipped",
    records::ImageRecord => "image",
    records::LatentRecord => "latent",
    records::Summary => "summary",
    records::EpochRecord => "epoch",
    records::BandwidthRecord => "bandwidth",
    records::TrialRecord => "trial",
    records::TrialResult => "result",
    records::Decision => "decision",
    records::Packed => "packed",
    records::NetworkRecord => "network",
    records::PredictionRecord => "prediction",
    records::EvaluationRecord => "evaluation",
}

/// Every record of type `T` among `stdout`'s lines ([`records`]), decoded into `T`: a line of
/// that type that `T` cannot hold (a missing or mistyped key) fails the test.
pub fn typed<T: Typed>(stdout: &[u8]) -> Vec<T> {
    decoded(&records(stdout))
}

/// The records of type `T` among parsed ones ([`of_type`]), decoded (as [`typed`]).
fn decoded<T: Typed>(all: &[Value]) -> Vec<T> {
    of_type(all, T::TYPE)
        .into_iter()
        .map(|v| {
            serde_json::from_value(v.clone())
                .unwrap_or_else(|e| panic!("a {} record {v} does not decode: {e}", T::TYPE))
        })
        .collect()
}

/// The one record of type `T` (a summary, say).
pub fn one<T: Typed>(stdout: &[u8]) -> T {
    only(decoded(&records(stdout)))
}

fn only<T: Typed>(mut all: Vec<T>) -> T {
    assert_eq!(all.len(), 1, "expected one {} record", T::TYPE);
    all.remove(0)
}

/// A batch tool's output (crop-resize, generate, project-one-gpu, gather-npz, ddp-train's
/// epochs), decoded: its item
/// records of type `T`, its error records, its summary (which must come last) and every
/// record's type in order.
#[derive(Debug)]
pub struct Batch<T> {
    pub items: Vec<T>,
    pub errors: Vec<records::ErrorRecord>,
    pub summary: records::Summary,
    pub types: Vec<String>,
}

impl<T> Batch<T> {
    /// (input, message) of each error record, in order.
    pub fn errors(&self) -> Vec<(&str, &str)> {
        self.errors
            .iter()
            .map(|e| (e.input.to_str().expect("UTF-8 input"), e.message.as_str()))
            .collect()
    }
}

/// Decodes a batch tool's stdout ([`Batch`]).
pub fn batch<T: Typed>(stdout: &[u8]) -> Batch<T> {
    let all = records(stdout);
    let types: Vec<String> = all
        .iter()
        .map(|r| r["type"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        types.last().map(String::as_str),
        Some("summary"),
        "{types:?}"
    );
    Batch {
        items: decoded(&all),
        errors: decoded(&all),
        summary: only(decoded(&all)),
        types,
    }
}

/// A `side`×`side` black RGB PNG whose colour profile (iCCP) inflates to `profile_bytes` zeros,
/// about a thousandth of that in the file: a decompression bomb where decoders look last.
pub fn png_with_profile(side: u32, profile_bytes: usize) -> Vec<u8> {
    use std::io::Write;
    let zlib = |data: &mut dyn FnMut(&mut dyn Write)| {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        data(&mut z);
        z.finish().expect("zlib in memory")
    };
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend(side.to_be_bytes());
    ihdr.extend(side.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]);
    png_chunk(&mut png, b"IHDR", &ihdr);
    let mut iccp = b"icc\0\0".to_vec();
    iccp.extend(zlib(&mut |w| {
        let zeros = vec![0u8; 1 << 20];
        let mut left = profile_bytes;
        while left > 0 {
            let n = left.min(zeros.len());
            w.write_all(&zeros[..n]).expect("zlib in memory");
            left -= n;
        }
    }));
    png_chunk(&mut png, b"iCCP", &iccp);
    // Each row: filter type 0, then the row's samples.
    let rows = vec![0u8; side as usize * (1 + 3 * side as usize)];
    let idat = zlib(&mut |w| w.write_all(&rows).expect("zlib in memory"));
    png_chunk(&mut png, b"IDAT", &idat);
    png_chunk(&mut png, b"IEND", &[]);
    png
}

/// Appends a PNG chunk to `png`: its length, type, body and CRC.
pub fn png_chunk(png: &mut Vec<u8>, kind: &[u8; 4], body: &[u8]) {
    png.extend((body.len() as u32).to_be_bytes());
    let start = png.len();
    png.extend(kind);
    png.extend(body);
    let crc = crc32fast::hash(&png[start..]);
    png.extend(crc.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixture_dir_removes_those_of_ended_processes_and_keeps_the_living_ones() {
        let name = format!("fixture-dir-test-{}", std::process::id());
        let tmp = std::env::temp_dir();
        let mut ended = Command::new("true").spawn().unwrap();
        let ended_pid = ended.id();
        ended.wait().unwrap();
        let mut living = Command::new("sleep").arg("600").spawn().unwrap();
        let stale = tmp.join(format!("shardkit-{name}-{ended_pid}"));
        let kept = tmp.join(format!("shardkit-{name}-{}", living.id()));
        // Same prefix but another name (NAME followed by more characters): not this fixture's.
        let other = tmp.join(format!("shardkit-{name}0-{ended_pid}"));
        for d in [&stale, &kept, &other] {
            std::fs::create_dir_all(d.join("inside")).unwrap();
        }
        let mine = fixture_dir(&name);
        let (stale_left, kept_left, other_left) = (stale.exists(), kept.exists(), other.exists());
        let made = mine.is_dir();
        living.kill().unwrap();
        living.wait().unwrap();
        for d in [&mine, &kept, &other] {
            let _ = std::fs::remove_dir_all(d);
        }
        assert_eq!(
            mine,
            tmp.join(format!("shardkit-{name}-{}", std::process::id()))
        );
        assert!(made);
        assert!(!stale_left, "the ended process's directory is left");
        assert!(kept_left, "a living process's directory was removed");
        assert!(other_left, "another fixture's directory was removed");
    }
}
