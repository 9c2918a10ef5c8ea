//! One timed and checked case (collective × dtype × op × size), the fill patterns whose results
//! are known exactly, and nccl-tests' table.

use std::time::Instant;

use anyhow::Result;
use collectives::{Communicator, DType, ReduceOp};
use records::{BandwidthRecord, Timing};
use tch::{Device, Kind, Tensor};

/// The collectives the tool measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collective {
    AllReduce,
    Broadcast,
    AllGather,
    ReduceScatter,
}

impl Collective {
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::Broadcast => "broadcast",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
        }
    }

    /// busbw / algbw for `n` ranks (nccl-tests' PERFORMANCE.md).
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter => (n - 1.0) / n,
            Collective::Broadcast => 1.0,
        }
    }

    fn reduces(self) -> bool {
        matches!(self, Collective::AllReduce | Collective::ReduceScatter)
    }
}

impl std::str::FromStr for Collective {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.replace('_', "-").as_str() {
            "all-reduce" | "allreduce" => Ok(Collective::AllReduce),
            "broadcast" => Ok(Collective::Broadcast),
            "all-gather" | "allgather" => Ok(Collective::AllGather),
            "reduce-scatter" | "reducescatter" => Ok(Collective::ReduceScatter),
            _ => Err(format!(
                "unknown collective `{s}`: all-reduce, broadcast, all-gather or reduce-scatter"
            )),
        }
    }
}

/// `1M`, `64M`, `512K`, `1G`, `8` (bytes; K/M/G are powers of 1024, as in nccl-tests).
pub use cli_common::memory::parse_size;

/// min, min·f, min·f², … up to max.
pub fn sizes(min: u64, max: u64, factor: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        v.push(s);
        match s.checked_mul(factor) {
            Some(n) => s = n,
            None => break,
        }
    }
    v
}

/// `--datatype`: the element types the checker knows exact results for, comma-separated
/// (nccl-tests' names too), or `all`.
#[derive(Debug, Clone, PartialEq)]
pub struct DTypes(pub Vec<DType>);

impl std::str::FromStr for DTypes {
    type Err = String;
    fn from_str(list: &str) -> Result<DTypes, String> {
        if list == "all" {
            return Ok(DTypes(vec![
                DType::F32,
                DType::F16,
                DType::BF16,
                DType::F64,
                DType::I32,
                DType::I64,
            ]));
        }
        let one = |s: &str| {
            let s = s.trim();
            let name = match s {
                "float" | "float32" => "f32",
                "half" | "float16" => "f16",
                "bfloat16" => "bf16",
                "double" | "float64" => "f64",
                "int" | "int32" => "i32",
                "int64" => "i64",
                other => other,
            };
            match name.parse::<DType>() {
                Ok(DType::U8 | DType::I8) | Err(_) => Err(format!(
                    "unknown or unsupported type `{s}`: f32, f16, bf16, f64, i32, i64 or all"
                )),
                Ok(d) => Ok(d),
            }
        };
        list.split(',')
            .map(one)
            .collect::<Result<_, _>>()
            .map(DTypes)
    }
}

/// `--op`: reductions, comma-separated, or `all` (in nccl-tests' order).
#[derive(Debug, Clone, PartialEq)]
pub struct Ops(pub Vec<ReduceOp>);

impl std::str::FromStr for Ops {
    type Err = String;
    fn from_str(list: &str) -> Result<Ops, String> {
        if list == "all" {
            use ReduceOp::*;
            return Ok(Ops(vec![Sum, Prod, Max, Min, Avg]));
        }
        (list.split(','))
            .map(|s| s.trim().parse::<ReduceOp>().map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()
            .map(Ops)
    }
}

/// The reductions of a collective's cases: `None` once for one that does not reduce.
pub fn ops(ops: &Ops, collective: Collective) -> Vec<Option<ReduceOp>> {
    if !collective.reduces() {
        return vec![None];
    }
    ops.0.iter().copied().map(Some).collect()
}

/// One size of one collective.
#[derive(Debug, Clone)]
pub struct Case {
    pub collective: Collective,
    pub dtype: DType,
    pub op: Option<ReduceOp>,
    pub root: usize,
    /// Elements of the full buffer (all-gather's output, reduce-scatter's input).
    pub count: usize,
    pub world: usize,
}

/// Timings of a case (out-of-place is absent for broadcast, which is in place only).
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub out_of_place: Option<Timing>,
    pub in_place: Timing,
}

impl Case {
    /// `None` when `bytes` holds no whole element per rank.
    pub fn new(
        collective: Collective,
        dtype: DType,
        op: Option<ReduceOp>,
        root: usize,
        bytes: u64,
        world: usize,
    ) -> Option<Case> {
        let mut count = bytes as usize / dtype.size();
        if matches!(
            collective,
            Collective::AllGather | Collective::ReduceScatter
        ) {
            count -= count % world;
        }
        (count > 0).then_some(Case {
            collective,
            dtype,
            op,
            root,
            count,
            world,
        })
    }

    pub fn bytes(&self) -> u64 {
        (self.count * self.dtype.size()) as u64
    }

    /// Per-rank slot of all-gather / reduce-scatter.
    fn slot(&self) -> usize {
        self.count / self.world
    }

    /// Rank `r`'s input values at global indices `start..start+len`, as f64: small integers
    /// (−3..3; ±1 for prod) so that sums, products and extrema are exact in every type.
    fn fill(&self, r: usize, start: usize, len: usize, device: Device) -> Tensor {
        let idx = Tensor::arange_start(start as i64, (start + len) as i64, (Kind::Double, device));
        if self.op == Some(ReduceOp::Prod) {
            (idx + r as f64).remainder(2.0) * 2.0 - 1.0
        } else {
            (idx * 5.0 + (r * 3) as f64).remainder(7.0) - 3.0
        }
    }

    fn input(&self, r: usize, start: usize, len: usize, device: Device) -> Tensor {
        self.fill(r, start, len, device).to_kind(self.dtype.kind())
    }

    /// What rank `rank`'s output must hold, as f64, and the tolerance per element.
    fn expected(&self, rank: usize, device: Device) -> (Tensor, f64) {
        let (start, len) = match self.collective {
            Collective::ReduceScatter => (rank * self.slot(), self.slot()),
            Collective::AllGather => (0, self.slot()),
            _ => (0, self.count),
        };
        let want = match self.collective {
            Collective::Broadcast => return (self.fill(self.root, 0, self.count, device), 0.0),
            Collective::AllGather => {
                let parts: Vec<Tensor> = (0..self.world)
                    .map(|r| self.fill(r, start, len, device))
                    .collect();
                return (Tensor::cat(&parts, 0), 0.0);
            }
            _ => {
                let op = self.op.expect("reducing collective");
                let mut acc = self.fill(0, start, len, device);
                for r in 1..self.world {
                    let v = self.fill(r, start, len, device);
                    acc = match op {
                        ReduceOp::Sum | ReduceOp::Avg => acc + v,
                        ReduceOp::Prod => acc * v,
                        ReduceOp::Max => acc.maximum(&v),
                        ReduceOp::Min => acc.minimum(&v),
                    };
                }
                if op != ReduceOp::Avg {
                    return (acc, 0.0);
                }
                acc / self.world as f64
            }
        };
        // avg: integers truncate toward zero; floats may be 2 ulp from the exact quotient
        // (|x| ≤ 3, so one ulp is 2^(1 − mantissa bits)).
        if !self.dtype.is_float() {
            return (want.trunc(), 0.0);
        }
        let ulp = match self.dtype {
            DType::F16 => 2f64.powi(-9),
            DType::BF16 => 2f64.powi(-6),
            DType::F32 => 2f64.powi(-22),
            _ => 2f64.powi(-51),
        };
        (want, 2.0 * ulp)
    }

    /// Elements of `got` that are not `want` ± `tol` (NaN counts as wrong).
    fn wrong(got: &Tensor, want: &(Tensor, f64)) -> i64 {
        (got.reshape([-1]).to_kind(Kind::Double) - &want.0)
            .abs()
            .le(want.1)
            .logical_not()
            .sum(Kind::Int64)
            .int64_value(&[])
    }

    /// Times out of place and in place, then checks both (`how.checks` times each). The
    /// in-place buffer is the start of `pool` (bytes) when given, else a tensor of its own.
    ///
    /// Kept in one piece: nccl-tests' loop: warm-up, timed out of place, timed in place, then the
    /// checks, sharing the buffers.
    pub fn run(
        &self,
        comm: &mut Communicator,
        device: Device,
        how: &How,
        pool: Option<&Tensor>,
    ) -> Result<CaseResult> {
        let check = how.checks > 0;
        let rank = comm.rank();
        let (c, n) = (self.count as i64, self.slot() as i64);
        let zeros = |len: i64| Tensor::zeros([len], (self.dtype.kind(), device));
        let fresh_input = || match self.collective {
            Collective::AllReduce | Collective::ReduceScatter => {
                self.input(rank, 0, self.count, device)
            }
            Collective::AllGather => self.input(rank, 0, self.slot(), device),
            Collective::Broadcast if rank == self.root => self.input(rank, 0, self.count, device),
            Collective::Broadcast => zeros(c),
        };
        let op = self.op.unwrap_or(ReduceOp::Sum);
        let root = self.root;

        // Out of place: separate input and output buffers.
        let oop = |comm: &mut Communicator,
                   input: &Tensor,
                   output: &mut Tensor|
         -> collectives::Result<()> {
            match self.collective {
                Collective::AllReduce => comm.all_reduce_into(input, output, op),
                Collective::AllGather => comm.all_gather(input, output),
                Collective::ReduceScatter => comm.reduce_scatter(input, output, op),
                Collective::Broadcast => unreachable!("broadcast is timed in place only"),
            }
        };
        // In place: one buffer; all-gather's input and reduce-scatter's output are its slot `rank`.
        let ip = |comm: &mut Communicator, buf: &mut Tensor| -> collectives::Result<()> {
            match self.collective {
                Collective::AllReduce => comm.all_reduce(buf, op),
                Collective::Broadcast => comm.broadcast(buf, root),
                Collective::AllGather => {
                    let slot = buf.narrow(0, rank as i64 * n, n);
                    comm.all_gather(&slot, buf)
                }
                Collective::ReduceScatter => {
                    let mut slot = buf.narrow(0, rank as i64 * n, n);
                    comm.reduce_scatter(buf, &mut slot, op)
                }
            }
        };
        let out_len = match self.collective {
            Collective::ReduceScatter => n,
            _ => c,
        };
        let ip_buffer = |input: Tensor| {
            let mut buf = match pool {
                Some(pool) => pool
                    .narrow(0, 0, self.bytes() as i64)
                    .view_dtype(self.dtype.kind()),
                None if self.collective == Collective::AllGather => zeros(c),
                None => return input,
            };
            match self.collective {
                Collective::AllGather => {
                    let _ = buf.zero_();
                    buf.narrow(0, rank as i64 * n, n).copy_(&input);
                }
                _ => buf.copy_(&input),
            }
            buf
        };

        let has_oop = self.collective != Collective::Broadcast;
        let mut times = [0.0f64; 2];
        if has_oop {
            let input = fresh_input();
            let mut output = zeros(out_len);
            times[0] = time_us(comm, device, how, |comm| oop(comm, &input, &mut output))?;
        }
        let mut buf = ip_buffer(fresh_input());
        times[1] = time_us(comm, device, how, |comm| ip(comm, &mut buf))?;

        let mut wrong = [0.0f64; 2];
        if check {
            let want = self.expected(rank, device);
            for _ in 0..how.checks {
                if has_oop {
                    let input = fresh_input();
                    let mut output = zeros(out_len);
                    oop(comm, &input, &mut output)?;
                    wrong[0] += Case::wrong(&output, &want) as f64;
                }
                let mut buf = ip_buffer(fresh_input());
                ip(comm, &mut buf)?;
                let got = match self.collective {
                    Collective::ReduceScatter => buf.narrow(0, rank as i64 * n, n),
                    _ => buf,
                };
                wrong[1] += Case::wrong(&got, &want) as f64;
            }
        }
        let (mean, sum) = across_ranks(comm, &times, &wrong)?;
        let timing = |i: usize| {
            let algbw = self.bytes() as f64 / (mean[i] * 1e-6) / 1e9;
            Timing {
                time_us: mean[i],
                algbw_gbs: algbw,
                busbw_gbs: algbw * self.collective.bus_factor(self.world),
                wrong: check.then_some(sum[i] as u64),
            }
        };
        Ok(CaseResult {
            out_of_place: has_oop.then(|| timing(0)),
            in_place: timing(1),
        })
    }
}

/// How each size is timed and checked (nccl-tests' -w, -n, -c, -z, -G).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct How {
    pub warmup: usize,
    pub iters: usize,
    /// Correctness passes (0: none).
    pub checks: usize,
    /// Wait for each call to finish before the next.
    pub blocking: bool,
    /// Launch the `iters` calls, captured as one CUDA graph, this many times (0: no graph).
    pub graph_launches: usize,
}

/// Mean time of one call of `f`, in µs: `warmup` calls, the device idle and the ranks lined up,
/// then `iters` timed calls (each waited for with `blocking`), or with `graph_launches` those
/// calls captured once as a CUDA graph and the graph launched that many times.
fn time_us(
    comm: &mut Communicator,
    device: Device,
    how: &How,
    mut f: impl FnMut(&mut Communicator) -> collectives::Result<()>,
) -> Result<f64> {
    for _ in 0..how.warmup {
        f(comm)?;
    }
    comm.synchronize()?;
    if let (Device::Cuda(gpu), 1..) = (device, how.graph_launches) {
        return time_graph(comm, gpu, how, f);
    }
    comm.barrier()?;
    let t0 = Instant::now();
    for _ in 0..how.iters {
        f(comm)?;
        if how.blocking {
            comm.synchronize()?;
        }
    }
    comm.synchronize()?;
    Ok(t0.elapsed().as_secs_f64() * 1e6 / how.iters as f64)
}

/// nccl-tests' -G: the `iters` calls queued once eagerly on a side stream, captured as a CUDA
/// graph (NCCL queues on libtorch's current stream, which the capture takes), and the graph
/// launched `graph_launches` times; µs per call. A capture that fails goes on eagerly with a
/// warning (gpu_runtime::graph's policy): the figure is then the eager one.
fn time_graph(
    comm: &mut Communicator,
    gpu: usize,
    how: &How,
    mut f: impl FnMut(&mut Communicator) -> collectives::Result<()>,
) -> Result<f64> {
    use gpu_runtime::graph::{Cuda, Graphed};
    let mut graphed: Graphed<Cuda, ()> =
        Graphed::new(Cuda { device: gpu }, 1, "the timed collectives");
    let mut pass = |comm: &mut Communicator| -> Result<()> {
        for _ in 0..how.iters {
            f(comm)?;
        }
        Ok(())
    };
    // The warm-up pass, then the capture (its launch is the first replay).
    for _ in 0..2 {
        graphed.step(|_| pass(comm))?;
    }
    tch::Cuda::synchronize(gpu as i64);
    comm.barrier()?;
    let t0 = Instant::now();
    for _ in 0..how.graph_launches {
        graphed.step(|_| pass(comm))?;
    }
    tch::Cuda::synchronize(gpu as i64);
    let us = t0.elapsed().as_secs_f64() * 1e6 / (how.iters * how.graph_launches) as f64;
    graphed.release()?;
    Ok(us)
}

/// The mean over ranks of `mean` and the sum over ranks of `sum` (through the CPU ring).
fn across_ranks(
    comm: &mut Communicator,
    mean: &[f64],
    sum: &[f64],
) -> Result<(Vec<f64>, Vec<f64>)> {
    let mut m = Tensor::from_slice(mean);
    let mut s = Tensor::from_slice(sum);
    comm.all_reduce(&mut m, ReduceOp::Avg)?;
    comm.all_reduce(&mut s, ReduceOp::Sum)?;
    Ok((Vec::<f64>::try_from(&m)?, Vec::<f64>::try_from(&s)?))
}

/// nccl-tests' column header.
pub fn print_header() {
    eprintln!("#{:>75}{:>36}", "out-of-place", "in-place");
    eprintln!(
        "#{:>11} {:>13} {:>8} {:>6} {:>6} {:>9} {:>7} {:>7} {:>6} {:>9} {:>7} {:>7} {:>6}",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong"
    );
    eprintln!(
        "#{:>11} {:>13} {:>8} {:>6} {:>6} {:>9} {:>7} {:>7} {:>6} {:>9} {:>7} {:>7} {:>6}",
        "(B)",
        "(elements)",
        "",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        ""
    );
}

/// One table row for a record.
pub fn table_row(r: &BandwidthRecord) -> String {
    let cols = |t: &Option<Timing>| match t {
        Some(t) => format!(
            "{:>9.1} {:>7.2} {:>7.2} {:>6}",
            t.time_us,
            t.algbw_gbs,
            t.busbw_gbs,
            t.wrong.map_or("N/A".to_string(), |w| w.to_string())
        ),
        None => format!("{:>9} {:>7} {:>7} {:>6}", "-", "-", "-", "-"),
    };
    let ty = match r.dtype.as_str() {
        "f32" => "float",
        "f16" => "half",
        "bf16" => "bfloat16",
        "f64" => "double",
        "i32" => "int32",
        "i64" => "int64",
        other => other,
    };
    format!(
        "{:>12} {:>13} {:>8} {:>6} {:>6} {} {}",
        r.bytes,
        r.count,
        ty,
        r.op.as_deref().unwrap_or("none"),
        r.root.map_or(-1, |x| x as i64),
        cols(&r.out_of_place),
        cols(&r.in_place)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_grow_by_the_factor() {
        assert_eq!(
            sizes(1 << 20, 64 << 20, 4),
            [1 << 20, 4 << 20, 16 << 20, 64 << 20]
        );
        assert_eq!(sizes(3, 2, 2), Vec::<u64>::new());
    }

    #[test]
    fn bus_factors_follow_nccl_tests() {
        assert_eq!(Collective::AllReduce.bus_factor(4), 1.5);
        assert_eq!(Collective::AllGather.bus_factor(4), 0.75);
        assert_eq!(Collective::ReduceScatter.bus_factor(2), 0.5);
        assert_eq!(Collective::Broadcast.bus_factor(8), 1.0);
        assert_eq!(Collective::AllReduce.bus_factor(1), 0.0);
    }

    #[test]
    fn types_and_ops_take_nccl_names_and_all() {
        assert_eq!(
            "float,half,bfloat16".parse::<DTypes>().unwrap().0,
            [DType::F32, DType::F16, DType::BF16]
        );
        assert_eq!("all".parse::<DTypes>().unwrap().0.len(), 6);
        assert!("u8".parse::<DTypes>().is_err());
        let all: Ops = "all".parse().unwrap();
        assert_eq!(ops(&all, Collective::AllReduce).len(), 5);
        assert_eq!(ops(&"sum".parse().unwrap(), Collective::Broadcast), [None]);
        assert!("mean".parse::<Ops>().is_err());
    }

    #[test]
    fn gather_and_scatter_sizes_round_to_whole_slots() {
        let c = Case::new(Collective::AllGather, DType::F32, None, 0, 1000, 3).unwrap();
        assert_eq!(c.count, 249); // 250 elements, rounded down to a multiple of 3
        assert!(
            Case::new(
                Collective::AllReduce,
                DType::F64,
                Some(ReduceOp::Sum),
                0,
                4,
                2
            )
            .is_none()
        );
    }

    #[test]
    fn expected_values_are_what_one_rank_computes_by_hand() {
        // World 2, avg over f16: fill(0, i) = (5i) mod 7 − 3, fill(1, i) = (5i + 3) mod 7 − 3.
        let c = Case::new(
            Collective::AllReduce,
            DType::F16,
            Some(ReduceOp::Avg),
            0,
            8,
            2,
        )
        .unwrap();
        let (want, tol) = c.expected(0, Device::Cpu);
        assert_eq!(Vec::<f64>::try_from(&want).unwrap(), [-1.5, 0.0, 1.5, -0.5]);
        assert!(tol > 0.0 && tol < 0.01);
        // A wrong element is counted, NaN included.
        let got = Tensor::from_slice(&[-1.5f64, 0.0, f64::NAN, 9.0]);
        assert_eq!(Case::wrong(&got, &(want, tol)), 2);
    }
}
