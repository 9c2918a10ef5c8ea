//! Opening a sweep's directory: a new sweep (its journal and experiment written) or one to
//! resume (its journal read and checked), locked for the sweep's life.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::{Context, Error};
use atomic_file::DirLock;
use search::space::Space;

use crate::journal::{self, ArgRepr, Definition, Entry, Journal, SchedulerKind, SearchKind};
use crate::template::Template;

/// A sweep's directory, opened and locked.
#[derive(Debug)]
pub struct Opened {
    pub def: Definition,
    pub template: Template,
    pub journal: Journal,
    /// The journal's entries after the definition (none for a new sweep).
    pub replay: Vec<Entry>,
    /// The directory, absolute.
    pub out_dir: PathBuf,
    /// One live sweep per directory (a `--resume` beside the running original ran the same
    /// trials twice into one journal): held for the sweep's life.
    pub lock: DirLock,
}

/// The command template, its placeholders checked against the space's parameters.
pub fn template_of(space: &Space, command: &[OsString]) -> crate::Result<Template> {
    let params: BTreeSet<String> = space.names().map(String::from).collect();
    Template::parse(command, &params)
}

/// Starts a sweep of `def` in `out_dir` (created if needed): its journal and its TensorBoard
/// experiment.
pub fn create(out_dir: &Path, def: Definition, template: Template) -> crate::Result<Opened> {
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let out_dir = std::fs::canonicalize(out_dir)
        .with_context(|| format!("--out-dir {}", out_dir.display()))?;
    let lock = DirLock::acquire(&out_dir)?;
    let journal = Journal::create(&out_dir, &def)?;
    write_experiment(&out_dir, &def)?;
    Ok(Opened {
        def,
        template,
        journal,
        replay: Vec::new(),
        out_dir,
        lock,
    })
}

/// Opens the sweep in `out_dir` to go on with it: its definition, checked, and its journal.
pub fn resume(out_dir: &Path) -> crate::Result<Opened> {
    let out_dir = std::fs::canonicalize(out_dir)
        .with_context(|| format!("--out-dir {}", out_dir.display()))?;
    let lock = DirLock::acquire(&out_dir)?;
    let (def, replay, journal) = Journal::resume(&out_dir)?;
    let space = Space::parse(&def.space.to_string())?;
    check_resumed(&def, &space).with_context(|| {
        format!(
            "{}: its sweep definition",
            out_dir.join(journal::FILE).display()
        )
    })?;
    let command: Vec<OsString> = def.command.iter().map(ArgRepr::to_os).collect();
    // A journal's command that does not parse is a damaged journal, not a usage error.
    let template = template_of(&space, &command).map_err(|e| Error::Journal(e.to_string()))?;
    Ok(Opened {
        def,
        template,
        journal,
        replay,
        out_dir,
        lock,
    })
}

/// The most trials one sweep runs (their configs are made and journalled when it starts).
pub const MAX_TRIALS: u128 = 100_000;

/// A journal's definition, checked as `definition` checks flags before anything is sized by it:
/// the journal may have been edited or damaged.
pub fn check_resumed(def: &Definition, space: &Space) -> crate::Result<()> {
    let trials = def.trial_count() as u128;
    if trials == 0 || trials > MAX_TRIALS {
        return Err(Error::Journal(format!(
            "{trials} trials: a sweep runs 1 to {MAX_TRIALS}"
        )));
    }
    match def.scheduler {
        SchedulerKind::Asha | SchedulerKind::Median => def.asha.validate()?,
        SchedulerKind::Hyperband => search::hyperband::HyperBandSettings {
            max_t: def.asha.max_t,
            reduction_factor: def.asha.reduction_factor,
            mode: def.asha.mode,
        }
        .validate()?,
        SchedulerKind::Pbt => def
            .pbt
            .as_ref()
            .context("population-based training without its settings")?
            .validate()?,
        SchedulerKind::Fifo => {}
    }
    match def.search {
        SearchKind::Tpe => drop(space.tpe()?),
        SearchKind::Bohb => drop(space.bohb()?),
        SearchKind::Random => {}
    }
    Ok(())
}

/// OUT_DIR's own event file: the hparams experiment (parameters and the metric).
fn write_experiment(out_dir: &std::path::Path, def: &Definition) -> crate::Result<()> {
    // A config shows the parameters' names and kinds: the first trial's, or with TPE (whose
    // configs come later) one at the space's lower bounds.
    let first = match def.search {
        SearchKind::Random => match def.trials.first() {
            Some(c) => c.clone(),
            None => return Ok(()),
        },
        SearchKind::Tpe => {
            let space = Space::parse(&def.space.to_string())?.tpe()?;
            let lows: Vec<f64> = space
                .dists()
                .iter()
                .map(|d| match *d {
                    search::tpe::Dist::Float { low, .. } => low,
                    search::tpe::Dist::Int { low, .. } => low as f64,
                    search::tpe::Dist::Categorical(_) => 0.0,
                })
                .collect();
            space.config(&lows)
        }
        SearchKind::Bohb => Space::parse(&def.space.to_string())?.bohb()?.lowest(),
    };
    let params: Vec<(String, &serde_json::Value)> =
        first.iter().map(|(k, v)| (k.clone(), v)).collect();
    let mut w = tensorboard::EventWriter::create(out_dir, "sweep")?;
    w.experiment(
        &out_dir.display().to_string(),
        &params,
        &[def.metric.clone(), crate::files::STOPPED_EARLY.to_string()],
    )?;
    Ok(())
}
