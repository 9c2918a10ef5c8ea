//! `sweep`: hyper-parameter search over any command that prints JSON records, with ASHA early
//! stopping decided as Ray Tune's `AsyncHyperBandScheduler` decides.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use cli_common::{CommonArgs, JsonlOut, Outcome, ResultExt, Tool, interrupt, usage};
use search::median::MedianSettings;
use search::pbt::PbtSettings;
use search::{AshaSettings, Mode, space};
use sweep_engine::journal::{ArgRepr, Definition, SchedulerKind, SearchKind};
use sweep_engine::launcher::{self, Allocation, Ask, Local, Slurm};
use sweep_engine::{MAX_TRIALS, Record, RunOptions, template::Template, template_of};

/// Hyper-parameter search (random, grid, TPE as Optuna's or BOHB) with ASHA, HyperBand, median stopping or population-based training, as Ray Tune's, over any command that prints JSON records.
///
/// Draws trial configs from a search space (Ray Tune's primitives, as JSON; at random, or
/// suggested by TPE as Optuna's sampler suggests them, --search tpe), runs the command
/// once per trial with {placeholders} filled in, at most --slots at a time, each slot with its
/// own CUDA_VISIBLE_DEVICES. Every stdout line of a trial that is a JSON object holding
/// --metric (and --time-attr) is a result; ASHA stops the trials that fall behind at each rung,
/// exactly as Ray Tune's AsyncHyperBandScheduler decides. Trials are stopped with SIGTERM to
/// their process group, then SIGKILL after --stop-grace-secs. Everything is journaled in
/// --out-dir, so a killed sweep continues with --resume. Per trial, OUT_DIR/trial-NNNN holds
/// params.json, result.json, progress.csv and TensorBoard event files, as Ray Tune writes them;
/// OUT_DIR/metric.svg plots the metric of every trial.
#[derive(Debug, Parser)]
#[command(name = "sweep", version, max_term_width = 100)]
pub struct Cli {
    /// The search space: a JSON object of parameters, each a plain value or one of
    /// {"grid": [...]}, {"choice": [...]}, {"uniform": [a, b]}, {"loguniform": [a, b]},
    /// {"randint": [a, b]} (b excluded), {"quniform": [a, b, q]}.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "resume",
        conflicts_with = "resume"
    )]
    pub space: Option<PathBuf>,

    /// Repetitions of the space (Ray's num_samples): every grid combination is run this many
    /// times, each time with fresh draws for the other parameters. With --search tpe or bohb, the
    /// number of trials (required). [default: 1]
    #[arg(long, value_name = "N", conflicts_with = "resume", value_parser = clap::value_parser!(u32).range(1..))]
    pub samples: Option<u32>,

    /// Seed of the draws, of ASHA's bracket choice (numpy's legacy generator seeded with it, as
    /// np.random.seed(N) before Ray adds the trials), of PBT's (Python's random and numpy's
    /// generator) and of BOHB's (numpy's, and ConfigSpace's sampler). [default: 0]
    #[arg(long, value_name = "N", conflicts_with = "resume")]
    pub seed: Option<u32>,

    /// How configs are chosen: random (grid combinations, other parameters drawn at random,
    /// all when the sweep starts), bohb (BOHB as Ray's TuneBOHB runs HpBandSter's: HyperBand's
    /// brackets, each trial made when the one before has started, its config drawn at random
    /// or, once a budget has enough results, from density models of the good and bad configs
    /// at the largest such budget; --samples trials; choice, uniform, loguniform, randint,
    /// quniform without its quantization) or tpe (Optuna's TPESampler with its defaults and --seed:
    /// 10 random trials, then each config suggested when its trial starts from the trials
    /// before it — finished ones by their last --metric, running ones as Optuna's constant
    /// liar counts them; a trial ASHA stopped counts with its last result, as Ray's OptunaSearch
    /// reports it). TPE takes choice, uniform, loguniform, randint and quniform, no grid.
    /// [default: random]
    #[arg(long, value_enum, conflicts_with = "resume")]
    pub search: Option<SearchKind>,

    /// The record field to optimise.
    #[arg(
        long,
        value_name = "NAME",
        required_unless_present = "resume",
        conflicts_with = "resume"
    )]
    pub metric: Option<String>,

    /// Whether --metric should be minimised or maximised.
    #[arg(
        long,
        value_enum,
        required_unless_present = "resume",
        conflicts_with = "resume"
    )]
    pub mode: Option<Mode>,

    /// The record field that measures progress (ddp-train: epoch). training_iteration, when a
    /// record lacks it, counts the trial's results as Ray does: a trial restarted (after a pause
    /// or a failure) with nothing of its command's in its directory counts from 1 again, its
    /// repeated results skipped. [default: training_iteration]
    #[arg(long, value_name = "NAME", conflicts_with = "resume")]
    pub time_attr: Option<String>,

    /// asha (early stopping), hyperband (Ray's HyperBandScheduler: trials fill brackets in
    /// turn; each pauses at its bracket's milestone until every trial of the bracket is there,
    /// then the best 1/--reduction-factor go on to a milestone that many times further and the
    /// others stop), median (Ray's MedianStoppingRule: past --grace-period, a trial whose best
    /// metric is below the median of the others' running means at the same time is stopped;
    /// with fewer than --min-samples such trials it yields its slot to a pending one), pbt
    /// (Ray's PopulationBasedTraining: every --perturbation-interval, a trial in the bottom
    /// --quantile-fraction copies one of the top that has files of its command's in its
    /// directory: its directory is replaced by a copy of the other's and it runs on with a
    /// config mutated from the other's; the space's parameters are the mutations) or fifo
    /// (every trial runs to its end). A paused trial's command is restarted later in its
    /// directory: give it a flag that resumes from {trial_dir}. [default: asha]
    #[arg(long, value_enum, conflicts_with = "resume")]
    pub scheduler: Option<SchedulerKind>,

    /// A trial whose time attribute reaches this is complete (and stopped if still running).
    /// [default: 100; hyperband: 81]
    #[arg(long, value_name = "T", conflicts_with = "resume")]
    pub max_t: Option<f64>,

    /// ASHA and median: no trial is stopped before its time attribute reaches this (median:
    /// running means start there). [default: 1]
    #[arg(long, value_name = "T", conflicts_with = "resume")]
    pub grace_period: Option<f64>,

    /// ASHA: rungs at grace·rf^k; at each, trials below the top 1/rf are stopped. HyperBand:
    /// brackets halve by this factor (Ray's eta). [default: 4; hyperband: 3]
    #[arg(long, value_name = "RF", conflicts_with = "resume")]
    pub reduction_factor: Option<f64>,

    /// ASHA brackets (bracket s starts its rungs at grace·rf^s). [default: 1]
    #[arg(long, value_name = "N", conflicts_with = "resume")]
    pub brackets: Option<usize>,

    /// Median: trials (other than the one judged) that must have reached its time before it
    /// can be stopped. [default: 3]
    #[arg(long, value_name = "N", conflicts_with = "resume")]
    pub min_samples: Option<usize>,

    /// Median: a trial yields its slot at most once per this much of its time attribute.
    /// [default: 0]
    #[arg(long, value_name = "T", conflicts_with = "resume")]
    pub min_time_slice: Option<f64>,

    /// PBT: a trial is compared (and may copy a better one) each time its time attribute has
    /// advanced this much since it last was. Required with --scheduler pbt.
    #[arg(long, value_name = "T", conflicts_with = "resume")]
    pub perturbation_interval: Option<f64>,

    /// PBT: no trial is compared before its time attribute reaches this. [default: 0]
    #[arg(long, value_name = "T", conflicts_with = "resume")]
    pub burn_in_period: Option<f64>,

    /// PBT: the share of trials (at most half) in the bottom quantile, which copy, and in the
    /// top one, which are copied. [default: 0.25]
    #[arg(long, value_name = "F", conflicts_with = "resume")]
    pub quantile_fraction: Option<f64>,

    /// PBT: the probability that a copy draws a parameter afresh from the space rather than
    /// perturbing it (a list value moves one place, a number is multiplied by one of
    /// --perturbation-factors). [default: 0.25]
    #[arg(long, value_name = "P", conflicts_with = "resume")]
    pub resample_probability: Option<f64>,

    /// PBT: the two factors a perturbed number is multiplied by, one drawn per copy.
    /// [default: 1.2,0.8]
    #[arg(
        long,
        value_names = ["UP", "DOWN"],
        value_delimiter = ',',
        num_args = 2,
        conflicts_with = "resume"
    )]
    pub perturbation_factors: Option<Vec<f64>>,

    /// Times a failed trial (its command exited non-zero before it was stopped) runs again
    /// before it is an error. A retry runs the same command in the same trial directory: give
    /// it a flag that continues from its checkpoint (ddp-train: --checkpoint-dir {trial_dir}
    /// --resume); results it prints again are ignored. [default: 0]
    #[arg(long, value_name = "K", conflicts_with = "resume")]
    pub max_failures: Option<usize>,

    /// Where the journal, the trials' directories and metric.svg go.
    #[arg(long, value_name = "DIR")]
    pub out_dir: PathBuf,

    /// Continue the sweep in --out-dir after it was killed or interrupted: finished trials are
    /// kept, the rungs rebuilt from the journal, unfinished trials run again. The sweep's
    /// definition comes from the journal; only the options of how it runs may be given anew.
    #[arg(long)]
    pub resume: bool,

    /// Where trials run: local (child processes of the sweep, on this machine's GPUs and CPUs)
    /// or slurm (inside a Slurm allocation: each trial one job step, `srun --exact`, on the
    /// nodes Slurm picks, which binds its GPUs and CPUs; a step that fails while the job itself
    /// is ending, as when Slurm requeues it, leaves its trial unfinished, not failed, and the
    /// sweep stops with exit 130 for --resume to go on).
    #[arg(long, value_enum, default_value_t = LauncherKind::Local)]
    pub launcher: LauncherKind,

    /// Trials running at once (at most 4096) [default: 1; with --launcher slurm, what the
    /// allocation holds divided by what a trial asks for].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=sweep_engine::MAX_SLOTS as i64))]
    pub slots: Option<u32>,

    /// GPUs per trial. Local: slot i gets CUDA_VISIBLE_DEVICES = GPUs i·G … i·G+G−1 of --gpus, 0
    /// leaves CUDA_VISIBLE_DEVICES as it is [default: 1]. Slurm: the step's --gres=gpu, spread
    /// over its nodes [default: 1 if the allocation has GPUs, else 0].
    #[arg(long, value_name = "G", value_parser = at_most::<1024>)]
    pub gpus_per_trial: Option<usize>,

    /// With --launcher slurm: nodes per trial (srun --nodes). [default: 1]
    #[arg(long, value_name = "N", value_parser = at_most::<4096>)]
    pub nodes_per_trial: Option<usize>,

    /// With --launcher slurm: tasks on each of a trial's nodes (srun --ntasks-per-node; a
    /// ddp-train trial's ranks, which read Slurm's variables). [default: 1]
    #[arg(long, value_name = "N", value_parser = at_most::<4096>)]
    pub tasks_per_node: Option<usize>,

    /// The GPUs to share out [default: CUDA_VISIBLE_DEVICES if set, else 0,1,…,slots·G−1, checked
    /// against the GPUs the NVIDIA driver lists].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub gpus: Option<Vec<String>>,

    /// CPUs per slot: slot i's trials run on CPUs i·N … i·N+N−1 of those the sweep may use (an
    /// affinity mask, as Ray Tune's resources_per_trial={"cpu": N}) with OMP_NUM_THREADS=N, so
    /// that trials side by side do not each start a pool of every core. 0 leaves both as they
    /// are [default: the sweep's CPUs divided by --slots when --slots is above 1]. At most 4096.
    #[arg(long, value_name = "N", value_parser = at_most::<4096>)]
    pub cpus_per_trial: Option<usize>,

    /// Seconds between SIGTERM and SIGKILL when a trial is stopped.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub stop_grace_secs: f64,

    /// Seconds between two status tables on stderr (a table is printed only when something
    /// changed; -q prints none).
    #[arg(long, value_name = "S", default_value_t = 5.0)]
    pub report_secs: f64,

    /// The trial command, after `--`: {name} for each parameter, {trial}, {trial_dir},
    /// {slot}; {{ and }} for literal braces. It also gets SWEEP_TRIAL, SWEEP_TRIAL_DIR and
    /// SWEEP_SLOT in its environment.
    #[arg(
        last = true,
        value_name = "COMMAND",
        required_unless_present = "resume",
        conflicts_with = "resume"
    )]
    pub command: Vec<OsString>,

    #[command(flatten)]
    pub common: CommonArgs,
}

impl Tool for Cli {
    const RECORDS: &'static str = r#"Reads the trials' stdout. Prints, as the sweep goes:
.PP
.nf
{"type":"trial","event":"start","trial":0,"config":{"batch_size":64,"lr":0.0132},"dir":"/abs/out/trial-0000","attempt":1,"slot":0}
{"type":"result","trial":0,"training_iteration":1,"time":1,"metric":41.5,"record":{...the trial's record...}}
{"type":"decision","trial":0,"milestone":1,"value":41.5,"cutoff":38.2,"action":"continue"}
{"type":"trial","event":"end","trial":0,"config":{...},"dir":"...","attempt":1,"status":"stopped","stopped_at":4,"last":{...}}
{"type":"sweep_summary","trials":8,"completed":2,"stopped":6,"error":0,"unfinished":0,"metric":"val_top1","mode":"max",
 "best":{"trial":3,"config":{...},"metric":91.2,"time":10,"status":"completed"},"out_dir":"/abs/out","elapsed_ms":81234}
.fi
.PP
A decision record is printed when a result is judged at an ASHA rung (value and cutoff in the metric's units; cutoff is null for the first trial at a rung). A metric of NaN or Infinity, as Python's json.dumps writes it, is a result as in Ray Tune (ASHA records a NaN and its cutoffs leave NaNs out; the best trial has a finite metric); records, result.json, progress.csv and results.csv carry such values as the strings "NaN", "Infinity", "-Infinity", and TensorBoard as scalars. A trial that failed and runs again prints an event "retry" record with the message; one whose retries are used up ends with status "error" and a message. The best trial is the one whose last result has the best metric (Ray's scope "last"); a trial in error is never the best.
.PP
Files in OUT_DIR: journal.jsonl (append-only: the definition, every start, result with its decision, failure and end), best.json (the best trial by its last result: config, metric, directory), results.csv (a row per trial: status, config, last and best metric, where it was stopped), metric.svg (a line per trial, named by its config), a TensorBoard event file with the hparams experiment, and per trial trial-NNNN/ with params.json, result.json (JSON lines: the record plus trial_id, training_iteration, time_total_s, timestamp, config), progress.csv, stdout.log and stderr.log (the command's output, every attempt appended; --resume reads what a killed sweep had not), srun.log (with --launcher slurm: srun's own messages) and events.out.tfevents.* (a scalar per numeric field at step = the time attribute, and the hparams session; a trial stopped early ends with status Unknown, as the dashboard has no "stopped", and the metric stopped_early = 1).
.PP
A status table goes to stderr every --report-secs while something changes, and the trials sorted by the metric at the end."#;
    const EXAMPLES: &'static [(&'static str, &'static str)] = &[
        (
            "Ray Tune's ASHA recipe: learning rate × batch size for a CIFAR ResNet, 4 GPUs:",
            "sweep --space space.json --samples 8 --metric val_top1 --mode max --time-attr epoch --max-t 10 --grace-period 1 --reduction-factor 4 --slots 4 --out-dir sweeps/run1 -- ddp-train --data cifar100:cifar-100-binary --lr {lr} --batch-size {batch_size} --epochs 10 --checkpoint-dir {trial_dir} --resume -q",
        ),
        (
            "where space.json is:",
            r#"{"lr": {"loguniform": [1e-4, 1e-1]}, "batch_size": {"choice": [64, 128, 256]}}"#,
        ),
        (
            "Continue it after a crash or Ctrl-C:",
            "sweep --resume --out-dir sweeps/run1 --slots 4",
        ),
        (
            "Two GPUs per trial, each trial two ranks under torchrun:",
            "sweep --space space.json --metric val_loss --mode min --time-attr epoch --max-t 20 --slots 2 --gpus-per-trial 2 --out-dir sweeps/run2 -- torchrun --no-python --standalone --nproc_per_node 2 ddp-train --data cifar10:cifar-10 --lr {lr} --epochs 20 -q",
        ),
        ("Compare the trials:", "tensorboard --logdir sweeps/run1"),
    ];

    const ENVIRONMENT: &'static [cli_common::EnvVars] = &[
        &[(
            "CUDA_VISIBLE_DEVICES",
            "The GPUs the slots share when --gpus is not given (else the driver's list); each trial \
             gets its slot's share in its own CUDA_VISIBLE_DEVICES.",
        )],
        launcher::SLURM_ENVIRONMENT,
    ];
}

/// Starts or resumes the sweep.
pub fn run(cli: Cli, out: &mut JsonlOut) -> Result<Outcome> {
    let grace = Duration::try_from_secs_f64(cli.stop_grace_secs).ok();
    let report = Duration::try_from_secs_f64(cli.report_secs).ok();
    let (Some(stop_grace), Some(report_every)) = (grace, report) else {
        return usage("--stop-grace-secs and --report-secs take a non-negative number of seconds");
    };
    let (slots, launcher) = launcher_of(&cli, &|k| std::env::var(k).ok())?;
    let opts = RunOptions {
        slots,
        stop_grace,
        report_every,
        interrupted: interrupt::requested,
    };
    let opened = if cli.resume {
        sweep_engine::resume(&cli.out_dir)
    } else {
        let (def, template) = definition(&cli)?;
        sweep_engine::create(&cli.out_dir, def, template)
    }
    .classified()?;
    let mut printer = Printer {
        out,
        quiet: cli.common.quiet,
        refused: None,
    };
    let ended = sweep_engine::Engine::new(opened, opts, launcher, &mut printer)
        .and_then(sweep_engine::Engine::run);
    // A record stdout refused (its reader gone): that error as it was, for the exit status.
    if let Some(e) = printer.refused {
        return Err(e);
    }
    let finished = match ended {
        Err(sweep_engine::Error::Interrupted) => return Err(cli_common::Interrupted.into()),
        ended => ended.classified()?,
    };
    Ok(Outcome::from_failures(finished.failed))
}

/// `--launcher`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LauncherKind {
    /// Child processes of the sweep, here.
    Local,
    /// Job steps of the Slurm allocation the sweep runs in.
    Slurm,
}

/// The slots and the launcher the flags ask for (`env`: the process's variables).
fn launcher_of(
    cli: &Cli,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(usize, Box<dyn launcher::Launcher>)> {
    match cli.launcher {
        LauncherKind::Local => {
            if cli.nodes_per_trial.is_some() || cli.tasks_per_node.is_some() {
                return usage(
                    "--nodes-per-trial and --tasks-per-node place trials on a Slurm allocation's nodes: add --launcher slurm",
                );
            }
            let slots = cli.slots.unwrap_or(1) as usize;
            let local = Local {
                slot_gpus: launcher::slot_gpus(
                    slots,
                    cli.gpus_per_trial.unwrap_or(1),
                    cli.gpus.as_deref(),
                    env("CUDA_VISIBLE_DEVICES").as_deref(),
                    launcher::installed_gpus(),
                )
                .classified()?,
                slot_cpus: launcher::slot_cpus(
                    slots,
                    cli.cpus_per_trial,
                    &launcher::allowed_cpus(),
                ),
            };
            Ok((slots, Box::new(local)))
        }
        LauncherKind::Slurm => {
            if cli.gpus.is_some() {
                return usage(
                    "--gpus lists this machine's GPUs for local trials; with --launcher slurm, Slurm gives each step its own (--gpus-per-trial)",
                );
            }
            let allocation = Allocation::detect(env).classified()?;
            let ask = Ask {
                nodes: cli.nodes_per_trial.unwrap_or(1).max(1),
                tasks_per_node: cli.tasks_per_node.unwrap_or(1).max(1),
                gpus: cli
                    .gpus_per_trial
                    .unwrap_or(usize::from(allocation.gpus_per_node > 0)),
                cpus: cli.cpus_per_trial.filter(|&c| c > 0),
            };
            let fits = allocation.slots(&ask).classified()?;
            let slots = cli.slots.map_or(fits, |s| s as usize);
            if slots > fits {
                // srun --exact queues a step the allocation has no room for: it would wait
                // silently for a running trial to end.
                log::warn!(
                    "--slots {slots}: the allocation holds {fits} trial(s) of this size at once; \
                     the other steps wait in Slurm's queue until one ends"
                );
            }
            Ok((slots, Box::new(Slurm::new(ask, allocation))))
        }
    }
}

/// Records to stdout, the status table to stderr (not under -q).
struct Printer<'a> {
    out: &'a mut JsonlOut,
    quiet: bool,
    /// Why stdout refused a record (the sweep then stops).
    refused: Option<anyhow::Error>,
}

impl sweep_engine::Output for Printer<'_> {
    fn record(&mut self, record: Record) -> std::result::Result<(), sweep_engine::OutputError> {
        self.out.emit(&record).map_err(|e| {
            let text = format!("{e:#}");
            self.refused = Some(e);
            text.into()
        })
    }

    fn status(&mut self, table: &str) {
        if !self.quiet {
            eprint!("{table}");
        }
    }
}

/// The longest --space file read (a space of a few parameters is a few hundred bytes).
const MAX_SPACE_BYTES: u64 = 16 << 20;

/// The sweep's definition and its command template from the command line, checked before
/// anything runs.
fn definition(cli: &Cli) -> Result<(Definition, Template)> {
    let space_path = cli
        .space
        .as_ref()
        .expect("clap requires --space without --resume");
    // A regular file only (a FIFO would block the read for ever), bounded before it is read.
    let bytes = input_file::read(space_path, MAX_SPACE_BYTES)
        .with_context(|| format!("reading --space {}", space_path.display()))?;
    let text = String::from_utf8(bytes)
        .with_context(|| format!("reading --space {}: not UTF-8", space_path.display()))?;
    let space = space::Space::parse(&text)
        .classified()
        .with_context(|| format!("--space {}", space_path.display()))?;
    let template = template_of(&space, &cli.command).classified()?;
    let mode = cli.mode.expect("clap requires --mode without --resume");
    let (scheduler, asha) = scheduler_settings(cli, mode)?;
    let pbt = pbt_settings(cli, scheduler, mode, &space)?;
    let search = search_kind(cli, scheduler == SchedulerKind::Hyperband, &space)?;
    let samples = cli.samples.unwrap_or(1) as usize;
    // Every trial's config is made up front and journalled: bounded before anything is made.
    let trials = match search {
        SearchKind::Random => space.trial_count(samples),
        SearchKind::Tpe | SearchKind::Bohb => samples as u128,
    };
    if trials > MAX_TRIALS {
        return usage(format!(
            "the space gives {trials} trials (--samples {samples} × its grid combinations); a sweep \
             runs at most {MAX_TRIALS}: fewer samples or grid values"
        ));
    }
    let seed = cli.seed.unwrap_or(0);
    let def = Definition {
        space: serde_json::from_str(&text)?,
        samples,
        seed,
        metric: cli
            .metric
            .clone()
            .expect("clap requires --metric without --resume"),
        time_attr: cli
            .time_attr
            .clone()
            .unwrap_or_else(|| "training_iteration".into()),
        scheduler,
        search,
        asha,
        median: (scheduler == SchedulerKind::Median).then_some(MedianSettings {
            grace_period: asha.grace_period,
            min_samples: cli.min_samples.unwrap_or(3),
            min_time_slice: cli.min_time_slice.unwrap_or(0.0),
            mode,
        }),
        pbt,
        max_failures: cli.max_failures.unwrap_or(0),
        command: cli.command.iter().map(ArgRepr::from_os).collect(),
        trials: match search {
            SearchKind::Random => space.generate(samples, seed as u64),
            SearchKind::Tpe | SearchKind::Bohb => Vec::new(),
        },
    };
    Ok((def, template))
}

/// The scheduler and its ASHA-shaped settings (max_t, and ASHA's and the median rule's own),
/// each default its Ray class's, checked.
fn scheduler_settings(cli: &Cli, mode: Mode) -> Result<(SchedulerKind, AshaSettings)> {
    // BOHB runs in HyperBand's brackets (Ray's HyperBandForBOHB).
    let scheduler = cli.scheduler.unwrap_or(match cli.search {
        Some(SearchKind::Bohb) => SchedulerKind::Hyperband,
        _ => SchedulerKind::Asha,
    });
    let hyperband = scheduler == SchedulerKind::Hyperband;
    // Each scheduler's defaults are its Ray class's.
    let asha = AshaSettings {
        max_t: cli.max_t.unwrap_or(if hyperband { 81.0 } else { 100.0 }),
        grace_period: cli.grace_period.unwrap_or(1.0),
        reduction_factor: cli
            .reduction_factor
            .unwrap_or(if hyperband { 3.0 } else { 4.0 }),
        brackets: cli.brackets.unwrap_or(1),
        mode,
    };
    // The grace period and brackets are ASHA's (the median rule's grace period too); every
    // scheduler takes max_t.
    let uses_grace = matches!(scheduler, SchedulerKind::Asha | SchedulerKind::Median);
    if uses_grace {
        asha.validate().classified()?;
    }
    if !(asha.max_t.is_finite() && asha.max_t > 0.0) {
        return usage("--max-t must be positive");
    }
    if hyperband {
        if cli.grace_period.is_some() || cli.brackets.is_some() {
            return usage(
                "--grace-period and --brackets are ASHA's: HyperBand's brackets follow from --max-t and --reduction-factor",
            );
        }
        let settings = search::hyperband::HyperBandSettings {
            max_t: asha.max_t,
            reduction_factor: asha.reduction_factor,
            mode,
        };
        settings.validate().classified()?;
    }
    if cli.min_time_slice.is_some_and(|t| t.is_nan() || t < 0.0) {
        return usage("--min-time-slice must be 0 or more");
    }
    if scheduler != SchedulerKind::Median
        && (cli.min_samples.is_some() || cli.min_time_slice.is_some())
    {
        return usage(
            "--min-samples and --min-time-slice are the median rule's: add --scheduler median",
        );
    }
    Ok((scheduler, asha))
}

/// Population-based training's settings (`None` for another scheduler, whose command line
/// must not give them), checked.
fn pbt_settings(
    cli: &Cli,
    scheduler: SchedulerKind,
    mode: Mode,
    space: &space::Space,
) -> Result<Option<PbtSettings>> {
    let pbt_flags = cli.perturbation_interval.is_some()
        || cli.burn_in_period.is_some()
        || cli.quantile_fraction.is_some()
        || cli.resample_probability.is_some()
        || cli.perturbation_factors.is_some();
    if scheduler == SchedulerKind::Pbt {
        if cli.grace_period.is_some() || cli.brackets.is_some() {
            return usage(
                "--grace-period and --brackets are ASHA's, not population-based training's",
            );
        }
        if cli.search == Some(SearchKind::Tpe) {
            return usage(
                "--scheduler pbt makes its own configs: it takes random search only, as Ray's",
            );
        }
        let Some(interval) = cli.perturbation_interval else {
            return usage("--scheduler pbt needs --perturbation-interval T (in --time-attr units)");
        };
        let factors = cli.perturbation_factors.clone().unwrap_or(vec![1.2, 0.8]);
        let settings = PbtSettings {
            perturbation_interval: interval,
            burn_in_period: cli.burn_in_period.unwrap_or(0.0),
            quantile_fraction: cli.quantile_fraction.unwrap_or(0.25),
            resample_probability: cli.resample_probability.unwrap_or(0.25),
            perturbation_factors: [factors[0], factors[1]],
            mode,
        };
        settings.validate().classified()?;
        if search::pbt::mutations(space).is_empty() {
            return usage(
                "--scheduler pbt: the space has nothing to mutate (a grid, choice or distribution)",
            );
        }
        Ok(Some(settings))
    } else if pbt_flags {
        usage(
            "--perturbation-interval, --burn-in-period, --quantile-fraction, --resample-probability and --perturbation-factors are population-based training's: add --scheduler pbt",
        )
    } else {
        Ok(None)
    }
}

/// The search, checked against the scheduler and the space.
fn search_kind(cli: &Cli, hyperband: bool, space: &space::Space) -> Result<SearchKind> {
    let search = cli.search.unwrap_or_default();
    if search == SearchKind::Bohb {
        if !hyperband {
            return usage(
                "--search bohb runs in HyperBand's brackets (Ray's HyperBandForBOHB): leave out --scheduler, or give hyperband",
            );
        }
        space.bohb().classified().context("--search bohb")?;
        if cli.samples.is_none() {
            return usage("--search bohb needs --samples N, the number of trials");
        }
    }
    if search == SearchKind::Tpe {
        space.tpe().classified().context("--search tpe")?;
        if cli.samples.is_none() {
            return usage("--search tpe needs --samples N, the number of trials");
        }
    }
    Ok(search)
}

/// A count from 0 to `MAX` (what sizes per-slot lists is bounded before they are made).
fn at_most<const MAX: usize>(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n <= MAX => Ok(n),
        Ok(_) => Err(format!("at most {MAX}")),
        Err(e) => Err(e.to_string()),
    }
}

cli_common::verify_cli!(Cli);
