//! `sweep` through its command line over `curve` (examples/curve.rs), a trial whose metric
//! follows a known curve of its config, or over `sh -c` scripts: one test binary, its tests by
//! topic in the modules below, their shared helpers here and in `tests/common` (which the Ray
//! comparison and Slurm tests use too). The engine's own behaviour is tested in
//! `shared/sweep-engine/tests/engine.rs`, without processes.

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

use common::{BIN, Records, curve, ok, records, sweep, sweep_running};

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

pub(crate) fn shell_sweep(dir: &Path, script: &str) -> Command {
    shell_sweep_of(dir, script, &json!({"x": {"grid": [1]}}), &[])
}

/// A sweep into DIR/run over `space` of `sh -c SCRIPT sh {x}`, maximising the result `m` by
/// `epoch`, with `extra` flags.
pub(crate) fn shell_sweep_of(dir: &Path, script: &str, space: &Value, extra: &[&str]) -> Command {
    let out = dir.join("run");
    let args = [
        &[
            "--metric",
            "m",
            "--mode",
            "max",
            "--time-attr",
            "epoch",
            "--out-dir",
            out.to_str().unwrap(),
        ],
        extra,
    ]
    .concat();
    sweep_running(
        dir,
        space,
        &args,
        "sh".as_ref(),
        &["-c", script, "sh", "{x}"],
    )
}
