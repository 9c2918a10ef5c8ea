//! `sweep` through its command line over `curve` (examples/curve.rs), a trial whose metric
//! follows a known curve of its config, or over `sh -c` scripts: one test binary, its tests by
//! topic in the modules below, their shared helpers here and in `tests/common` (which the Ray
//! comparison and Slurm tests use too). The engine's own behaviour is tested in
//! `shared/sweep-engine/tests/engine/`, without processes.

#[path = "../common/mod.rs"]
mod common;

mod asha;
mod failures;
mod hyperband;
mod median;
mod output;
mod pbt;
mod resume;
mod searchers;
mod slots;
mod usage;

use common::{
    BIN, Records, curve, end_kind, journal, journal_events, lr_batch_curve, max_by_epoch, ok,
    records, sweep,
};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use records::{Decision, SweepSummary, TrialRecord, TrialResult};
use serde_json::{Value, json};

// Helpers each topic shares with the others.
#[allow(unused_imports)]
use {
    asha::*, failures::*, hyperband::*, median::*, output::*, pbt::*, resume::*, searchers::*,
    slots::*, usage::*,
};

/// `sweep --resume --out-dir OUT`, run to its end.
pub(crate) fn resumed(out: &Path) -> std::process::Output {
    let mut c = Command::new(BIN);
    c.args(["--resume", "--out-dir"]).arg(out);
    c.output().unwrap()
}

/// 15 ms an epoch, the state kept in the trial's directory (a restarted trial goes on from it).
pub(crate) const KEEPS_STATE_15MS: &[&str] = &["--sleep-ms", "15", "--state", "{trial_dir}/state"];

/// A curve to epoch 4 that keeps its state in its trial's directory and crashes once after
/// epoch {crash}.
pub(crate) const CRASHING_CURVE: &[&str] = &[
    "--lr",
    "{lr}",
    "--epochs",
    "4",
    "--crash-at",
    "{crash}",
    "--state",
    "{trial_dir}/state",
];

/// Two slots of no GPU, a stopped trial's process given half a second after SIGTERM.
pub(crate) const TWO_SLOTS_SLOW_STOP: &[&str] = &[
    "--slots",
    "2",
    "--gpus-per-trial",
    "0",
    "--stop-grace-secs",
    "0.5",
];

pub(crate) fn shell_sweep(dir: &Path, script: &str) -> Command {
    shell_sweep_of(dir, script, &json!({"x": {"grid": [1]}}), &[])
}

/// A sweep into DIR/run over `space` of `sh -c SCRIPT sh {x}`, maximising the result `m` by
/// `epoch`, with `extra` flags.
pub(crate) fn shell_sweep_of(dir: &Path, script: &str, space: &Value, extra: &[&str]) -> Command {
    common::script_sweep(dir, space, script, &["{x}"], extra)
}

/// The curves a resumable sweep runs: `epochs` long, `sleep_ms` per epoch; with `lock`, each
/// trial's processes take a lock in its directory (one that finds it held exits 4: an error).
pub(crate) struct Curves {
    pub(crate) epochs: u32,
    pub(crate) sleep_ms: u32,
    pub(crate) lock: bool,
}

/// A sweep into `out` over `space` of curves that keep their state in their trial's directory
/// (a paused, retried or copied trial goes on from it), maximising val_top1 by epoch:
/// `flags` (the scheduler's or searcher's), then `extra`; `extra_cmd` after the curve's
/// arguments (a later value winning).
pub(crate) fn resumable_sweep(
    dir: &Path,
    out: &Path,
    space: &Value,
    flags: &[&str],
    curves: Curves,
    extra: &[&str],
    extra_cmd: &[&str],
) -> Command {
    let common = max_by_epoch("val_top1", out);
    let (epochs, sleep_ms) = (curves.epochs.to_string(), curves.sleep_ms.to_string());
    let state = ["--sleep-ms", &sleep_ms, "--state", "{trial_dir}/state"];
    let mut cmd = lr_batch_curve(&epochs, &state);
    if curves.lock {
        cmd.extend(["--slot-lock", "{trial_dir}/lock"]);
    }
    sweep(
        dir,
        space,
        &[flags, &common, extra].concat(),
        &[&cmd[..], extra_cmd].concat(),
    )
}
