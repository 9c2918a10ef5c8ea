//! Projection throughput (scripts/bench/project.sh runs it): the paper `stylegan2` generator at
//! RES with random weights and a VGG16 with random weights (the compute of the pretrained ones),
//! targets rendered by the same generator (seeds 0..B-1, truncation 0.7), STEPS steps.
//!
//!   bench_project DEVICE RES BATCH STEPS [tf32|fp32|bf16] [fast|auto|fused|unfused]
//!
//! fast (default): the projector's default op sequence (stylegan2::fast); auto/fused/unfused:
//! upstream's reference ops with its fused_modconv choice, or forced.
//!
//! Prints images/s, seconds per image, the mean final distance and the process's peak reserved
//! GPU memory (cudaMemGetInfo growth from start-up).
//!
//! `KERNEL_CHOICES=upconv=phase|tconv,vgg-layout=nchw|nhwc,epilogue=on|off` fixes the
//! generator's up-sampling convolution, the VGG's memory layout and the fused epilogue, as
//! project-one-gpu's `--kernel-choices` does (by default CUDA times both ways once per shape and
//! keeps the faster: the choices are printed).
//!
//! `PARTS=1` then times the pieces of a step on their own (medians of 10 after 3 warm-ups,
//! synchronised): the synthesis forward and forward+backward (gradients for ws and the noise
//! buffers), the area pooling to 256² and the VGG features forward+backward (gradient for the
//! image), the noise regulariser forward+backward; the rest of a step (Adam, renormalisation,
//! the launches between) is what they leave of the measured ms/step.

use std::time::Instant;

use perceptual::{NativeVgg16, Vgg16};
use projector::{Projector, Settings, WStats, noise_regularizer};
use stylegan2::{Config, Generator, Noise, Ops, SynthesisOptions};
use tch::{Device, Kind, Tensor};

#[path = "../../stylegan2/examples/common/kernel_choices.rs"]
mod common;

fn main() {
    let choices = common::set_up("bench_project");
    let Args {
        dev,
        res,
        batch,
        steps,
        precision,
        mode,
    } = Args::parse();
    let precision = precision.as_str();
    if precision == "fp32" {
        gpu_runtime::shim::cuda_fp32_strict().unwrap();
    }
    let fused = match mode.as_str() {
        "fused" => Some(true),
        "unfused" => Some(false),
        _ => None,
    };
    if dev.is_cuda() {
        tch::Cuda::cudnn_set_benchmark(true);
        let _ = Tensor::zeros([1], (Kind::Float, dev));
    }
    let base = device::cuda_mem_used();
    tch::manual_seed(0);
    let g = Generator::random(Config::paper_stylegan2(res), dev).unwrap();
    let mut vgg = Vgg16::Native(NativeVgg16::random(dev));
    vgg.set_kernel_choices(choices);
    if precision == "bf16" {
        vgg.to_kind(Kind::BFloat16);
    }
    let t0 = Instant::now();
    let stats = WStats::compute(&g, 10000);
    let stats_s = t0.elapsed().as_secs_f64();
    let targets = targets(&g, batch);
    let ops = Some(if mode == "fast" {
        Ops::Fast(choices)
    } else {
        Ops::Reference
    });
    // GRAPH=1: capture the step as a CUDA graph (Settings::cuda_graph).
    let cuda_graph = std::env::var_os("GRAPH").is_some();
    let settings = Settings {
        steps,
        force_fp32: precision == "fp32",
        fused_modconv: fused,
        ops,
        cuda_graph,
        ..Default::default()
    };
    let p = Projector {
        g: &g,
        vgg: &vgg,
        stats: &stats,
        settings,
    };
    let (out, secs) = timed(&p, &targets, dev);
    let step_ms = secs * 1e3 / steps as f64;
    let graphed = if cuda_graph && dev.is_cuda() {
        " graphed"
    } else {
        ""
    };
    let run = format!("{res}x{res} batch {batch} {steps} steps {precision} {mode}{graphed}");
    report(&run, &out.distance, (batch, secs, step_ms), base, stats_s);
    // What was chosen by timing (the up-sampling convolutions, the VGG's layout: auto on CUDA).
    let decisions = g.synthesis.fast_state().decisions();
    for d in decisions.iter().chain(&vgg.decisions()) {
        println!("  {d}");
    }
    if std::env::var_os("PARTS").is_some() {
        let opts = SynthesisOptions {
            force_fp32: precision == "fp32",
            fused_modconv: fused,
            ops: p.settings.ops_on(dev),
            ..Default::default()
        };
        parts(&g, &vgg, &stats, &targets, &opts, step_ms);
    }
}

/// The command line: DEVICE RES BATCH STEPS [tf32|fp32|bf16] [fast|auto|fused|unfused].
struct Args {
    dev: Device,
    res: i64,
    batch: i64,
    steps: usize,
    precision: String,
    mode: String,
}

impl Args {
    fn parse() -> Args {
        let a: Vec<String> = std::env::args().collect();
        if a.len() < 5 {
            eprintln!(
                "usage: bench_project DEVICE RES BATCH STEPS [tf32|fp32|bf16] [fast|auto|fused|unfused]"
            );
            std::process::exit(2);
        }
        Args {
            dev: device::DeviceArg::parse(&a[1])
                .unwrap()
                .resolve(&device::Env::default())
                .unwrap(),
            res: a[2].parse().unwrap(),
            batch: a[3].parse().unwrap(),
            steps: a[4].parse().unwrap(),
            precision: a.get(5).cloned().unwrap_or_else(|| "tf32".into()),
            mode: a.get(6).cloned().unwrap_or_else(|| "fast".into()),
        }
    }
}

/// `batch` images the random generator makes from seeds 0.. (ψ 0.7), as 0..255 targets.
fn targets(g: &Generator, batch: i64) -> Tensor {
    let _ng = tch::no_grad_guard();
    let z: Vec<Tensor> = (0..batch as u32).map(|s| g.seeded_z(s, 1)).collect();
    let img = g.forward(
        &Tensor::cat(&z, 0),
        None,
        0.7,
        None,
        &SynthesisOptions {
            force_fp32: true,
            ..Default::default()
        },
    );
    ((img + 1.0) * 127.5).clamp(0.0, 255.0)
}

/// The projection of `targets` and its seconds, after a warm-up (cuDNN autotuning) on 2
/// steps, not timed.
fn timed(p: &Projector, targets: &Tensor, dev: Device) -> (projector::Projection, f64) {
    let warm = Projector {
        settings: Settings {
            steps: 2,
            ..p.settings.clone()
        },
        ..*p
    };
    let _ = warm.project(targets, |_, _| {}).unwrap();
    if let Device::Cuda(i) = dev {
        tch::Cuda::synchronize(i as i64);
    }
    let t = Instant::now();
    let out = p.project(targets, |_, _| {}).unwrap();
    (out, t.elapsed().as_secs_f64())
}

/// The timed run's line: `batch` images projected in `secs` (`step_ms` a step), their mean
/// final distance, the memory reserved since `base`, and the w statistics' seconds.
fn report(
    run: &str,
    distance: &[f64],
    (batch, secs, step_ms): (i64, f64, f64),
    base: Option<u64>,
    stats_s: f64,
) {
    let mean = distance.iter().sum::<f64>() / distance.len() as f64;
    let mem = match (base, device::cuda_mem_used()) {
        (Some(a), Some(b)) => format!("{} MiB", b.saturating_sub(a) >> 20),
        _ => "n/a".into(),
    };
    println!(
        "project {run}: {:.3} img/s ({:.2} s/img, {:.1} ms/step), mean final distance {mean:.4}, peak reserved {mem}, w stats {stats_s:.2} s",
        batch as f64 / secs,
        secs / batch as f64,
        step_ms
    );
}

/// Median milliseconds of `f` over 10 runs after 3 warm-ups, the device synchronised.
fn median_ms(dev: Device, mut f: impl FnMut()) -> f64 {
    let sync = || {
        if let Device::Cuda(i) = dev {
            tch::Cuda::synchronize(i as i64);
        }
    };
    for _ in 0..3 {
        f();
    }
    sync();
    let mut v: Vec<f64> = (0..10)
        .map(|_| {
            let t = Instant::now();
            f();
            sync();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The step's pieces on their own (PARTS=1), with the projector's shapes and options.
fn parts(
    g: &Generator,
    vgg: &Vgg16,
    stats: &WStats,
    targets: &Tensor,
    opts: &SynthesisOptions<'_>,
    step_ms: f64,
) {
    let dev = g.device();
    let b = targets.size()[0];
    let ws = stats
        .w_avg
        .to_device(dev)
        .expand([b, g.num_ws(), g.config.w_dim], false)
        .copy()
        .set_requires_grad(true);
    let bufs: Vec<Tensor> = g
        .synthesis
        .noise_layers()
        .iter()
        .map(|(_, l)| {
            let r = l.noise_const.size()[0];
            Tensor::randn([b, 1, r, r], (Kind::Float, dev)).set_requires_grad(true)
        })
        .collect();
    let opts = SynthesisOptions {
        noise: Noise::Given(&bufs),
        ..*opts
    };
    let synth = || (g.synthesis.forward(&ws, &opts) + 1.0) * 127.5;
    let mut inputs = vec![&ws];
    inputs.extend(bufs.iter());
    let g_fwd = median_ms(dev, || {
        let _ng = tch::no_grad_guard();
        let _ = synth();
    });
    let g_fwd_bwd = median_ms(dev, || {
        let _ = Tensor::run_backward(&[synth().square().mean(Kind::Float)], &inputs, false, false);
    });
    let img = tch::no_grad(synth).set_requires_grad(true);
    let pooled = |x: &Tensor| {
        if x.size()[2] > 256 {
            x.adaptive_avg_pool2d([256, 256])
        } else {
            x.shallow_clone()
        }
    };
    let pool = median_ms(dev, || {
        let _ = Tensor::run_backward(&[pooled(&img).mean(Kind::Float)], &[&img], false, false);
    });
    let target_features = tch::no_grad(|| vgg.features(&pooled(targets)).unwrap());
    let small = tch::no_grad(|| pooled(&img)).set_requires_grad(true);
    let vgg_fwd_bwd = median_ms(dev, || {
        let f = vgg.features(&small).unwrap().to_kind(Kind::Float);
        let _ = Tensor::run_backward(
            &[(&target_features - f).square().sum(Kind::Float)],
            &[&small],
            false,
            false,
        );
    });
    let reg = median_ms(dev, || {
        let _ = Tensor::run_backward(
            &[noise_regularizer(&bufs).sum(Kind::Float)],
            &bufs,
            false,
            false,
        );
    });
    let rest = step_ms - g_fwd_bwd - pool - vgg_fwd_bwd - reg;
    println!(
        "  parts (ms): synthesis forward {g_fwd:.1}, forward+backward {g_fwd_bwd:.1}; pooling to 256 f+b {pool:.1}; VGG f+b {vgg_fwd_bwd:.1}; noise regulariser f+b {reg:.1}; rest of the {step_ms:.1} ms step {rest:.1}"
    );
}
