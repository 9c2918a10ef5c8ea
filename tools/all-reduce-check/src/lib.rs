//! `all-reduce-check`: nccl-tests' `all_reduce_perf` for shardkit's collectives.
//!
//! Every rank runs the same sweep: for each collective × dtype × op × size it times `-w`
//! warm-ups and `-n` iterations out of place and in place (time averaged over ranks), then fills
//! the buffers with rank-dependent small integers whose result is known exactly and counts every
//! element that differs. Rank 0 prints nccl-tests' table on stderr and one `bandwidth` record per
//! size on stdout. `--spawn N` starts N local ranks itself (serving their rendezvous store, as
//! torchrun's agent does), for a one-command check.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use cli_common::ResultExt as _;
use cli_common::{CommonArgs, JsonlOut, Outcome, Tool, interrupt};
use collectives::{Communicator, DType, DistArgs, ReduceOp};
use device::{DeviceArg, Env};
use records::{BandwidthRecord, Summary};

mod cases;
mod spawn;

pub use cases::{Collective, parse_size};

/// Time and verify collectives across ranks, like nccl-tests' all_reduce_perf: NCCL on GPUs, shared memory or the TCP ring on CPUs.
///
/// Launch one process per rank (torchrun --no-python, srun, GNU parallel, by hand with --rank and
/// --world-size), or let `--spawn N` start N local ranks. CUDA tensors go through NCCL, CPU
/// tensors through the host's shared memory when every rank is on one host, through shared
/// memory inside each host and TCP between hosts when the ranks are on several (--transport),
/// else the TCP ring. Exits 3 if any element came out wrong.
#[derive(Debug, Parser)]
#[command(name = "all-reduce-check", version, max_term_width = 100)]
pub struct Cli {
    /// Smallest message, in bytes (K, M, G suffixes are powers of 1024).
    #[arg(short = 'b', long, value_name = "SIZE", default_value = "1M", value_parser = parse_size)]
    pub minbytes: u64,

    /// Largest message, in bytes.
    #[arg(short = 'e', long, value_name = "SIZE", default_value = "64M", value_parser = parse_size)]
    pub maxbytes: u64,

    /// Multiply the size by this between steps.
    #[arg(short = 'f', long, value_name = "FACTOR", default_value_t = 4, value_parser = clap::value_parser!(u64).range(2..))]
    pub stepfactor: u64,

    /// Collective to run: all-reduce, broadcast, all-gather, reduce-scatter.
    #[arg(short = 'C', long, value_name = "NAME", default_value = "all-reduce")]
    pub collective: Collective,

    /// Element types, comma-separated: f32, f16, bf16, f64, i32, i64 (nccl-tests' float, half,
    /// bfloat16, double, int32, int64 work too), or all.
    #[arg(short = 'd', long, value_name = "TYPES", default_value = "f32")]
    pub datatype: cases::DTypes,

    /// Reductions, comma-separated: sum, avg, prod, max, min, or all.
    #[arg(short = 'o', long, value_name = "OPS", default_value = "sum")]
    pub op: cases::Ops,

    /// Root rank of broadcast.
    #[arg(short = 'r', long, value_name = "RANK", default_value_t = 0)]
    pub root: usize,

    /// Untimed iterations before timing.
    #[arg(short = 'w', long, value_name = "N", default_value_t = 5)]
    pub warmup_iters: usize,

    /// Timed iterations per size.
    #[arg(short = 'n', long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub iters: u64,

    /// Correctness passes per size, their wrong elements added up (nccl-tests' -c; 0: none, no
    /// #wrong column).
    #[arg(short = 'c', long, value_name = "N", default_value_t = 1)]
    pub check: usize,

    /// Skip the correctness pass (-c 0).
    #[arg(long)]
    pub no_check: bool,

    /// 1: wait for each timed call to finish before the next (nccl-tests' -z, blocking
    /// collectives); 0: queue them.
    #[arg(short = 'z', long, value_name = "0|1", default_value_t = 0,
          value_parser = clap::value_parser!(u8).range(0..=1))]
    pub blocking: u8,

    /// 1: allocate the in-place buffer once, in memory shared with this host's other ranks
    /// (nccl-tests' -R, buffer registration): with the shared-memory transport (ranks on one
    /// host) an all-reduce of more than 256 KiB then reads the other ranks' values where they
    /// are instead of copying them through the transport's slots, as ddp-train does with its
    /// gradients on the CPU. Other collectives, smaller sizes, CUDA buffers and other
    /// transports are unchanged.
    #[arg(short = 'R', long, value_name = "0|1", default_value_t = 0,
          value_parser = clap::value_parser!(u8).range(0..=1))]
    pub register: u8,

    /// Capture the -n timed calls as one CUDA graph and launch it N times (nccl-tests' -G; CUDA
    /// devices only; 0: no graph). A capture that fails runs eagerly, with a warning.
    #[arg(short = 'G', long, value_name = "N", default_value_t = 0)]
    pub cudagraph: usize,

    /// nccl-tests' GPUs per thread. Only 1: a process here drives one GPU, and N GPUs are N
    /// ranks (--spawn N, or torchrun --no-python --nproc_per_node N all-reduce-check).
    #[arg(short = 'g', long, value_name = "N", default_value_t = 1)]
    pub ngpus: usize,

    /// Start N ranks on this machine (each a child process, rendezvous served by this one, on
    /// --master-port when given, else on a free port).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..),
          conflicts_with_all = ["rank", "world_size", "master_addr", "init_method"])]
    pub spawn: Option<u64>,

    /// cpu, cuda, cuda:N, or auto (cuda:LOCAL_RANK mod GPUs when CUDA is there, else cpu).
    #[arg(long, default_value = "auto", value_name = "DEVICE")]
    pub device: DeviceArg,

    /// Print records and the table from every rank, not only rank 0.
    #[arg(long)]
    pub all_ranks: bool,

    #[command(flatten)]
    pub dist: DistArgs,

    #[command(flatten)]
    pub common: CommonArgs,
}

impl Tool for Cli {
    const RECORDS: &'static str = r##"Reads no input. Rank 0 prints one record per size:
.PP
.nf
{"type":"bandwidth","collective":"all_reduce","bytes":1048576,"count":262144,"dtype":"f32","op":"sum",
 "world_size":2,"engine":"cpu-ring","device":"cpu",
 "out_of_place":{"time_us":812.4,"algbw_gbs":1.29,"busbw_gbs":1.29,"wrong":0},
 "in_place":{"time_us":790.1,"algbw_gbs":1.33,"busbw_gbs":1.33,"wrong":0}}
.fi
.PP
where engine is nccl, cpu-shm (shared memory), cpu-shm+tcp (shared memory inside each host, TCP between hosts), cpu-ring (the TCP ring) or cpu-ring-interleaved (the TCP ring, because a host's ranks are not consecutive), then {"type":"summary","ok":N,"skipped":0,"failed":N,"world_size":N,"wrong":N,"avg_busbw_gbs":X,"elapsed_ms":N}, where failed counts sizes with wrong elements.
.PP
time_us is the mean of -n iterations after -w warm-ups, averaged over ranks; algbw = bytes / time (GB = 1e9 bytes); busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for all-gather and reduce-scatter (bytes = the full n-slot buffer), 1 for broadcast. Inputs are small integers (+-1 for prod) so every result is exact: 0 wrong elements allowed, except avg on floats, which may differ from the exact quotient by 2 units in the last place.
.PP
On stderr rank 0 prints nccl-tests' table: size, count, type, redop, root, then time, algbw, busbw and #wrong out of place and in place, and "# Out of bounds values" and "# Avg bus bandwidth" lines."##;
    const EXAMPLES: &'static [(&'static str, &'static str)] = &[
        (
            "Two local ranks on the CPU, 1 MiB to 64 MiB:",
            "all-reduce-check --spawn 2 -b 1M -e 64M -f 2",
        ),
        (
            "One rank per GPU under torchrun, every type and op:",
            "torchrun --no-python --nproc_per_node 8 all-reduce-check -d all -o all",
        ),
        (
            "By hand, two machines:",
            "all-reduce-check --init-method tcp://node1:29500 --world-size 2 --rank 0   # rank 1 on node2",
        ),
        (
            "Slurm, one task per GPU:",
            "srun --ntasks-per-node 4 all-reduce-check -b 8M -e 1G",
        ),
    ];

    const ENVIRONMENT: &'static [cli_common::EnvVars] = &[
        collectives::ENVIRONMENT,
        device::ENVIRONMENT,
        &[(
            spawn::CHILD_VAR,
            "Set by --spawn in the ranks it starts, which then run as ranks instead of \
             spawning again (not for users to set).",
        )],
    ];
}

pub fn run(cli: Cli, out: &mut JsonlOut) -> Result<Outcome> {
    let spawned = std::env::var_os(spawn::CHILD_VAR).is_some();
    refuse_what_cannot_run(&cli)?;
    if let (Some(n), false) = (cli.spawn, spawned) {
        return spawn::run(n as usize, cli.dist.master_port);
    }
    let cases = cases_of(&cli)?;
    // The tool's own tensor work (fill, check) is light; libtorch's intra-op threads would only
    // spin on the cores the ranks' ring loops need (torchrun sets OMP_NUM_THREADS=1 likewise).
    tch::set_num_threads(1);
    let opts = options(&cli, spawned);
    // A rank or world the launcher's variables contradict is a usage error (exit 2).
    let plan = opts.plan().classified()?;
    let device = cli.device.resolve(&Env::from_process(None))?;
    let rank = plan.rank;
    let mut comm = Communicator::from_plan(plan, &opts, cli.dist.backend)
        .with_context(|| format!("rank {rank}"))?;
    let world = comm.world_size();
    if cli.collective == Collective::Broadcast && cli.root >= world {
        bail!("--root {} is outside a world of {world}", cli.root);
    }
    // Rank-aware output: only rank 0 speaks unless --all-ranks (STYLE.md).
    let speak = rank == 0 || cli.all_ranks;
    let table = speak && !cli.common.quiet;
    preamble(&cli, &mut comm, device, table)?;
    let cases: Vec<_> = cases
        .into_iter()
        .filter_map(|(dtype, op, bytes)| {
            cases::Case::new(cli.collective, dtype, op, cli.root, bytes, world)
        })
        .collect();
    // One buffer for every size (shared memory stays until the process exits).
    let pool = match cases.iter().map(cases::Case::bytes).max() {
        Some(most) if cli.register == 1 && device == tch::Device::Cpu => Some(
            comm.shared_zeros(most as i64, tch::Kind::Uint8)
                .with_context(|| format!("rank {rank}: sharing a buffer of {most} bytes"))?,
        ),
        _ => None,
    };
    let started = Instant::now();
    let mut tally = Tally::default();
    for case in &cases {
        let rec = match measure(&cli, &mut comm, device, case, pool.as_ref()) {
            Ok(rec) => rec,
            // The others stop too, naming this rank, instead of failing on a lost peer.
            Err(Stop::Leave(why)) => {
                comm.leave(&why);
                return Err(cli_common::Interrupted.into());
            }
            Err(Stop::Error(e)) => return Err(e),
        };
        tally.add(&rec);
        if table {
            eprintln!("{}", cases::table_row(&rec));
        }
        if speak {
            out.emit(&rec)?;
        }
    }
    comm.barrier()
        .with_context(|| format!("rank {rank}: final barrier"))?;
    if table {
        let verdict = if tally.wrong == 0 { "OK" } else { "FAILED" };
        eprintln!("# Out of bounds values : {} {verdict}", tally.wrong);
        eprintln!("# Avg bus bandwidth    : {:.3}", tally.avg_busbw());
    }
    if speak {
        out.emit(&Summary {
            world_size: Some(world),
            wrong: (how(&cli).checks > 0).then_some(tally.wrong),
            ..tally.summary(started)
        })?;
    }
    Ok(Outcome::from_failures(tally.failed))
}

/// The (dtype, op, bytes) of every case, in nccl-tests' order: dtypes, then ops, then sizes.
fn cases_of(cli: &Cli) -> Result<Vec<(DType, Option<ReduceOp>, u64)>> {
    let dtypes = &cli.datatype.0;
    let ops = cases::ops(&cli.op, cli.collective);
    if cli.minbytes > cli.maxbytes {
        bail!("-b {} is larger than -e {}", cli.minbytes, cli.maxbytes);
    }
    let sizes = cases::sizes(cli.minbytes, cli.maxbytes, cli.stepfactor);
    let mut all = Vec::new();
    for &d in dtypes {
        for &o in &ops {
            all.extend(sizes.iter().map(|&b| (d, o, b)));
        }
    }
    Ok(all)
}

/// nccl-tests' flags this design cannot honour, refused before any rank starts (exit 2).
fn refuse_what_cannot_run(cli: &Cli) -> Result<()> {
    if cli.ngpus != 1 {
        let n = cli.ngpus;
        return cli_common::usage(format!(
            "-g {n}: a process here drives one GPU (one rank per GPU, as torchrun and srun start \
             them); for {n} GPUs on this machine run that many ranks: all-reduce-check --spawn {n} \
             (or torchrun --no-python --nproc_per_node {n} all-reduce-check)"
        ));
    }
    if cli.cudagraph > 0 && !cli.device.resolve(&Env::from_process(None))?.is_cuda() {
        return cli_common::usage(format!(
            "-G {} captures CUDA graphs: it needs CUDA devices (the CPU ring has no graphs)",
            cli.cudagraph
        ));
    }
    Ok(())
}

/// The rendezvous options: the flags', or a spawned child's (its parent's environment decides).
fn options(cli: &Cli, spawned: bool) -> collectives::Options {
    let mut opts = cli.dist.options();
    // SIGINT/SIGTERM end any wait for peers at once (exit 130).
    opts.should_stop = cli_common::interrupt::requested;
    if spawned {
        // Flags meant for a launcher-less run do not apply.
        opts.init_method = collectives::InitMethod::Env;
        (
            opts.rank,
            opts.world_size,
            opts.master_addr,
            opts.master_port,
        ) = (None, None, None, None);
    }
    opts
}

/// How each size is timed and checked.
fn how(cli: &Cli) -> cases::How {
    cases::How {
        warmup: cli.warmup_iters,
        iters: cli.iters as usize,
        checks: if cli.no_check { 0 } else { cli.check },
        blocking: cli.blocking == 1,
        graph_launches: cli.cudagraph,
    }
}

/// nccl-tests' lines above the table: the parameters and every rank's process, host and
/// device (gathered from every rank: all of them call this), then the engine and the columns.
fn preamble(cli: &Cli, comm: &mut Communicator, device: tch::Device, table: bool) -> Result<()> {
    let rank = comm.rank();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let mine = match device {
        tch::Device::Cuda(i) => format!(
            "device {i:>2} {}",
            device::cuda_device_label(i).unwrap_or_default()
        ),
        other => format!("device {}", device::name(other)),
    };
    let pid = std::process::id();
    let ranks = comm
        .all_gather_text(&format!("Pid {pid:>6} on {host:>10} {mine}"))
        .with_context(|| format!("rank {rank}: listing the ranks' devices"))?;
    if !table {
        return Ok(());
    }
    let how = how(cli);
    eprintln!(
        "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: {}(factor) warmup iters: {} iters: {} agg iters: 1 validation: {} graph: {}",
        cli.minbytes,
        cli.maxbytes,
        cli.stepfactor,
        how.warmup,
        how.iters,
        how.checks,
        how.graph_launches
    );
    eprintln!("#\n# Using devices");
    for (r, line) in ranks.iter().enumerate() {
        eprintln!("#  Rank {r:>2} Group  0 {line}");
    }
    let engine = comm.engine(device);
    eprintln!(
        "#\n# all-reduce-check: {} ranks, engine {engine}{}{}",
        comm.world_size(),
        if how.blocking { ", blocking" } else { "" },
        if cli.register == 1 && device == tch::Device::Cpu && comm.transport() == "shm" {
            ", shared buffers"
        } else {
            ""
        }
    );
    if engine == "nccl" {
        let nccl = collectives::nccl::Nccl::load()?;
        eprintln!(
            "# NCCL {} from {} ({})",
            nccl.version_string(),
            nccl.path,
            nccl.source
        );
    }
    if comm.world_size() == 1 {
        eprintln!(
            "# one rank: busbw is 0 by definition (no bus crossed); algbw is the local copy rate"
        );
    }
    cases::print_header();
    Ok(())
}

/// Why [`measure`] stopped.
enum Stop {
    /// This rank was interrupted: it leaves the group saying why (exit 130).
    Leave(String),
    Error(anyhow::Error),
}

/// One size timed and checked, as its record.
fn measure(
    cli: &Cli,
    comm: &mut Communicator,
    device: tch::Device,
    case: &cases::Case,
    pool: Option<&tch::Tensor>,
) -> std::result::Result<BandwidthRecord, Stop> {
    let rank = comm.rank();
    if interrupt::requested() {
        return Err(Stop::Leave("interrupted (SIGINT or SIGTERM)".into()));
    }
    let r = match case.run(comm, device, &how(cli), pool) {
        Ok(r) => r,
        Err(e) => {
            // A peer left because it was interrupted: this rank stops as well (exit 130).
            if let Some(stopped @ collectives::Error::PeerStopped { .. }) = e.downcast_ref() {
                eprintln!("all-reduce-check[rank {rank}]: {stopped}");
                return Err(Stop::Error(cli_common::Interrupted.into()));
            }
            if interrupt::requested() {
                return Err(Stop::Leave(format!("interrupted ({e:#})")));
            }
            return Err(Stop::Error(e.context(format!(
                "rank {rank}: {} of {} bytes",
                cli.collective.name(),
                case.bytes()
            ))));
        }
    };
    Ok(BandwidthRecord {
        collective: cli.collective.name().to_string(),
        bytes: case.bytes(),
        count: case.count as u64,
        dtype: case.dtype.name().to_string(),
        op: case.op.map(|o| o.name().to_string()),
        root: (cli.collective == Collective::Broadcast).then_some(cli.root),
        world_size: comm.world_size(),
        engine: comm.engine(device).to_string(),
        device: device::name(device),
        out_of_place: r.out_of_place,
        in_place: Some(r.in_place),
    })
}

/// The sizes' figures added up for the summary.
#[derive(Debug, Default)]
struct Tally {
    ok: usize,
    failed: usize,
    wrong: u64,
    busbw_sum: f64,
    timed: usize,
}

impl Tally {
    fn add(&mut self, rec: &BandwidthRecord) {
        let mut wrong = 0;
        for t in [&rec.out_of_place, &rec.in_place].into_iter().flatten() {
            self.busbw_sum += t.busbw_gbs;
            self.timed += 1;
            wrong += t.wrong.unwrap_or(0);
        }
        self.wrong += wrong;
        if wrong > 0 {
            self.failed += 1
        } else {
            self.ok += 1
        }
    }

    fn avg_busbw(&self) -> f64 {
        if self.timed > 0 {
            self.busbw_sum / self.timed as f64
        } else {
            0.0
        }
    }

    /// The summary record of these cases (the caller adds the world and the check's result).
    fn summary(&self, started: Instant) -> Summary {
        Summary {
            ok: self.ok,
            failed: self.failed,
            elapsed_ms: started.elapsed().as_millis() as u64,
            avg_busbw_gbs: Some(self.avg_busbw()),
            ..Summary::default()
        }
    }
}

cli_common::verify_cli!(Cli);
