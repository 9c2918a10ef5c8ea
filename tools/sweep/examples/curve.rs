//! A stand-in trial for sweep's tests and benchmark: prints one epoch record per epoch whose
//! accuracy follows a known curve of its config, like a training run that takes no time.
//!
//!   curve --lr LR [--batch-size N] [--epochs N] [--sleep-ms MS] [--state DIR]
//!         [--crash-at E] [--ignore-term] [--slot-lock FILE] [--noise SD --noise-seed N]
//!
//! val_top1(e) = 100 · q · (1 − e^(−e/3)), q = exp(−(log10(lr) + 1.5)²) · (1 − batch/1024):
//! best at lr ≈ 0.03, small batches. --noise SD adds SD · z to each epoch's value, z a standard
//! normal of (--noise-seed, epoch) (splitmix64 and Box–Muller, as scripts/bench/schedulers.py
//! computes it), as validation noise that can mislead early stopping. --state DIR resumes after the last epoch written there
//! (DIR/epoch); --crash-at E exits 1 after epoch E unless DIR/crashed exists (so it crashes once);
//! --ignore-term ignores SIGTERM; --slot-lock FILE takes an exclusive flock on FILE for the life
//! of the process and exits 4 with an "overlap" record if another process holds it. Each record carries the
//! CUDA_VISIBLE_DEVICES it was given.

use std::io::Write;
use std::path::PathBuf;

/// The command line.
struct Args {
    lr: f64,
    batch: f64,
    epochs: u32,
    sleep_ms: u64,
    state: Option<PathBuf>,
    crash_at: Option<u32>,
    lock: Option<PathBuf>,
    noise: f64,
    noise_seed: u64,
}

fn parse_args() -> Args {
    let mut a = Args {
        lr: 0.01,
        batch: 64.0,
        epochs: 10,
        sleep_ms: 0,
        state: None,
        crash_at: None,
        lock: None,
        noise: 0.0,
        noise_seed: 0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut val = || {
            args.next()
                .unwrap_or_else(|| panic!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--lr" => a.lr = val().parse().expect("--lr"),
            "--batch-size" => a.batch = val().parse().expect("--batch-size"),
            "--epochs" => a.epochs = val().parse().expect("--epochs"),
            "--sleep-ms" => a.sleep_ms = val().parse().expect("--sleep-ms"),
            "--state" => a.state = Some(PathBuf::from(val())),
            "--crash-at" => a.crash_at = Some(val().parse().expect("--crash-at")),
            "--slot-lock" => a.lock = Some(PathBuf::from(val())),
            "--noise" => a.noise = val().parse().expect("--noise"),
            "--noise-seed" => a.noise_seed = val().parse().expect("--noise-seed"),
            "--ignore-term" => {
                // SAFETY: setting a signal disposition to SIG_IGN at start-up, single-threaded.
                unsafe {
                    libc::signal(libc::SIGTERM, libc::SIG_IGN);
                }
            }
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// An exclusive flock on `path` for the life of the process; held by another process, an
/// "overlap" record and exit 4.
fn take_lock(path: &std::path::Path, out: &mut impl Write) -> std::fs::File {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .expect("lock file");
    // SAFETY: flock on a file descriptor this process owns.
    if unsafe {
        libc::flock(
            std::os::fd::AsRawFd::as_raw_fd(&f),
            libc::LOCK_EX | libc::LOCK_NB,
        )
    } != 0
    {
        writeln!(
            out,
            "{{\"type\":\"overlap\",\"lock\":{:?}}}",
            path.display().to_string()
        )
        .unwrap();
        std::process::exit(4);
    }
    f
}

/// After epoch `e`: the state written (lagging one epoch behind the records, so a run killed
/// with a record sweep had not read yet prints it again when restarted; sweep ignores what it has
/// seen), and the crash --crash-at asks for, once.
fn after_epoch(a: &Args, e: u32) {
    if let Some(d) = &a.state {
        // Written whole (a SIGTERM between truncating and writing would leave it empty).
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("epoch.tmp"), (e - 1).to_string()).unwrap();
        std::fs::rename(d.join("epoch.tmp"), d.join("epoch")).unwrap();
    }
    if a.crash_at == Some(e) {
        let marker = a.state.as_ref().map(|d| d.join("crashed"));
        if marker.as_ref().is_none_or(|m| !m.exists()) {
            if let Some(m) = marker {
                std::fs::write(m, "").unwrap();
            }
            eprintln!("curve: crashing at epoch {e} as asked");
            std::process::exit(1);
        }
    }
}

fn main() {
    let a = parse_args();
    let mut out = std::io::stdout().lock();
    let _lock_file = a.lock.as_deref().map(|p| take_lock(p, &mut out));
    let cuda = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default();
    let (lr, batch, epochs) = (a.lr, a.batch, a.epochs);
    eprintln!("curve: lr {lr} batch {batch}");
    let start = (a.state.as_ref())
        .and_then(|d| std::fs::read_to_string(d.join("epoch")).ok())
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(0);
    let q = (-(lr.log10() + 1.5).powi(2)).exp() * (1.0 - batch / 1024.0);
    for e in start + 1..=epochs {
        if a.sleep_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(a.sleep_ms));
        }
        let acc = 100.0 * q * (1.0 - (-(e as f64) / 3.0).exp()) + a.noise * normal(a.noise_seed, e);
        writeln!(out, "{{\"type\":\"epoch\",\"epoch\":{e},\"epochs\":{epochs},\"val_top1\":{acc},\"val_loss\":{},\"cuda\":{cuda:?}}}", 1.0 - acc / 100.0).unwrap();
        out.flush().unwrap();
        after_epoch(&a, e);
    }
    writeln!(out, "{{\"type\":\"summary\",\"ok\":1}}").unwrap();
}

/// A standard normal of (seed, epoch): two splitmix64 outputs through Box–Muller.
fn normal(seed: u64, epoch: u32) -> f64 {
    let mut x = seed ^ (epoch as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut next = || {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let u1 = ((next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let u2 = (next() >> 11) as f64 / (1u64 << 53) as f64;
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}
