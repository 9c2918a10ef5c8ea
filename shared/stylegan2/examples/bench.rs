//! Generator benchmarks and an on-device parity check (scripts/bench/stylegan2.sh runs it).
//!
//!   bench parity DEVICE FIXTURES_DIR          max|Δ| of every fixture tensor on DEVICE
//!   bench fixture DEVICE G.safetensors ITERS  one 32x32 synthesis, and one forward+backward
//!   bench paper DEVICE RES BATCH fp32|fp16 ITERS
//!                                             paper `stylegan2` config, random weights, in
//!                                             fp32 or with fp16 blocks (num_fp16_res 4); run
//!                                             each in its own process for its peak memory
//!   bench fp16-error DEVICE RES               fp16 blocks vs fp32 on the same inputs
//!   bench fast-check DEVICE RES BATCH ITERS   Ops::Fast vs Ops::Reference (unfused): images
//!                                             and the gradients of w and the noise buffers,
//!                                             in fp32 and with fp16 blocks; then the
//!                                             forward+backward time of each
//!   bench layers DEVICE RES BATCH fp32|fp16 ITERS
//!                                             the synthesis layers' pieces on their own, per
//!                                             block resolution, forward+backward (gradients
//!                                             for the inputs, as the projector needs): input
//!                                             modulation, the up-sampling convolution as phase
//!                                             convolution (Fast), as transposed conv + FIR
//!                                             (upstream) and as transposed conv + single-
//!                                             channel FIR (fast::conv_up_tconv), the 3×3
//!                                             convolution, the epilogue, ToRGB, the image
//!                                             up-sampling; and the phase and 3×3
//!                                             convolutions in channels_last (.cl columns)
//!
//! `NO_TF32=1` turns TF32 off (gpu_runtime::shim::cuda_fp32_strict); `KERNEL_CHOICES=upconv=phase|tconv,...` fixes
//! the kernel choices as project-one-gpu's `--kernel-choices` does.
//!
//! Forward+backward is the projector's inner step without the VGG: w [B,1,w_dim] broadcast to
//! ws, per-image noise buffers, synthesis with noise const, a mean-square loss, gradients for w
//! and the noise buffers. Timings are medians over ITERS after 3 warm-up runs, with CUDA
//! synchronised; memory is the growth of the device's used memory (cudaMemGetInfo) from just
//! after CUDA initialisation to the end (weights included): libtorch's caching allocator keeps
//! what it reserved, so that is the process's peak reserved memory.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use stylegan2::tune::KernelChoices;
use stylegan2::{Config, Generator, Noise, Ops, SynthesisOptions, fast, ops};
use tch::{Device, Kind, Tensor};

fn device(s: &str) -> Device {
    let d = device::DeviceArg::parse(s).expect("device");
    d.resolve(&device::Env::default())
        .expect("device available")
}

fn sync(d: Device) {
    if let Device::Cuda(i) = d {
        tch::Cuda::synchronize(i as i64);
    }
}

fn median_ms(d: Device, iters: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    sync(d);
    let mut v: Vec<f64> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            f();
            sync(d);
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One projector-like step without the VGG; returns the loss.
fn fwd_bwd(g: &Generator, w: &Tensor, noise: &[Tensor], force_fp32: bool) -> Tensor {
    let ws = w.repeat([1, g.num_ws(), 1]);
    let opts = SynthesisOptions {
        noise: Noise::Given(noise),
        fused_modconv: None,
        force_fp32,
        ..Default::default()
    };
    let img = g.synthesis.forward(&ws, &opts);
    let loss = img.square().mean(Kind::Float);
    let mut inputs: Vec<&Tensor> = vec![w];
    inputs.extend(noise.iter());
    let _grads = Tensor::run_backward(&[&loss], &inputs, false, false);
    loss
}

fn noise_bufs(g: &Generator, batch: i64, d: Device) -> Vec<Tensor> {
    g.synthesis
        .noise_layers()
        .iter()
        .map(|(_, l)| {
            let r = l.noise_const.size()[0];
            Tensor::randn([batch, 1, r, r], (Kind::Float, d)).set_requires_grad(true)
        })
        .collect()
}

fn parity(d: Device, dir: &Path) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for cfg in entries.iter().filter(|p| p.join("G.safetensors").is_file()) {
        let g = Generator::load(&cfg.join("G.safetensors"), None, d).unwrap();
        let r: BTreeMap<String, Tensor> =
            Tensor::read_safetensors(cfg.join("reference.safetensors"))
                .unwrap()
                .into_iter()
                .map(|(k, v)| (k, v.to_device(d)))
                .collect();
        let line = parity_line(&g, &r);
        let worst = line.iter().map(|(_, v)| *v).fold(0.0, f64::max);
        let name = cfg.file_name().unwrap().to_string_lossy();
        let items: Vec<String> = line.iter().map(|(k, v)| format!("{k} {v:.2e}")).collect();
        println!(
            "parity {name} on {d:?}: {} | worst {worst:.2e} {}",
            items.join(", "),
            if worst <= 1e-4 { "PASS" } else { "FAIL" }
        );
    }
}

/// Each figure's largest difference from the reference outputs `r` (mapping, synthesis with
/// each noise mode, fused or not, the w statistics, a gradient through synthesis).
fn parity_line(g: &Generator, r: &BTreeMap<String, Tensor>) -> Vec<(&'static str, f64)> {
    let diff = |a: &Tensor, b: &Tensor| (a - b).abs().max().double_value(&[]);
    (parity::outputs(g, r).into_iter())
        .map(|(name, ours)| (name, diff(&ours, &r[name])))
        .collect()
}

fn fixture(d: Device, path: &Path, iters: usize) {
    let g = Generator::load(path, None, d).unwrap();
    let ws = Tensor::randn([1, g.num_ws(), g.config.w_dim], (Kind::Float, d));
    let fwd = median_ms(d, iters, || {
        let _g = tch::no_grad_guard();
        let _ = g.synthesis.forward(&ws, &SynthesisOptions::default());
    });
    let w = Tensor::randn([1, 1, g.config.w_dim], (Kind::Float, d)).set_requires_grad(true);
    let noise = noise_bufs(&g, 1, d);
    let fb = median_ms(d, iters, || {
        let _ = fwd_bwd(&g, &w, &noise, false);
    });
    println!(
        "fixture {} on {d:?} ({} threads): synthesis {fwd:.2} ms, forward+backward {fb:.2} ms (batch 1, median of {iters})",
        path.display(),
        tch::get_num_threads()
    );
}

fn paper(d: Device, res: i64, b: i64, fp16: bool, iters: usize) {
    tch::Cuda::cudnn_set_benchmark(true);
    let _ = Tensor::zeros([1], (Kind::Float, d)); // CUDA context up before the baseline
    let before = device::cuda_mem_used();
    tch::manual_seed(0);
    let g = Generator::random(Config::paper_stylegan2(res), d).unwrap();
    let force_fp32 = !fp16;
    let w = Tensor::randn([b, 1, 512], (Kind::Float, d)).set_requires_grad(true);
    let noise = noise_bufs(&g, b, d);
    let ms = median_ms(d, iters, || {
        let _ = fwd_bwd(&g, &w, &noise, force_fp32);
    });
    let fwd = median_ms(d, iters, || {
        let _g = tch::no_grad_guard();
        let opts = SynthesisOptions {
            noise: Noise::Const,
            fused_modconv: None,
            force_fp32,
            ..Default::default()
        };
        let _ = g
            .synthesis
            .forward(&w.detach().repeat([1, g.num_ws(), 1]), &opts);
    });
    let mem = match (before, device::cuda_mem_used()) {
        (Some(a), Some(z)) => format!("{:.0} MiB", z.saturating_sub(a) as f64 / 1048576.0),
        _ => "n/a".into(),
    };
    let label = if fp16 {
        "fp16 blocks (num_fp16_res 4)"
    } else {
        "fp32"
    };
    let tf32 = if !gpu_runtime::shim::cuda_tf32_allowed() {
        "no TF32"
    } else {
        "TF32 convs"
    };
    println!(
        "paper {res}x{res} on {d:?} batch {b} {label}, {tf32}: forward+backward {ms:.1} ms ({:.1} img/s), forward {fwd:.1} ms ({:.1} img/s), peak reserved {mem}",
        b as f64 * 1e3 / ms,
        b as f64 * 1e3 / fwd
    );
}

fn fp16_error(d: Device, res: i64) {
    tch::manual_seed(0);
    let g = Generator::random(Config::paper_stylegan2(res), d).unwrap();
    let _g = tch::no_grad_guard();
    let ws = Tensor::randn([4, 1, 512], (Kind::Float, d)).repeat([1, g.num_ws(), 1]);
    let a = g.synthesis.forward(
        &ws,
        &SynthesisOptions {
            force_fp32: true,
            ..Default::default()
        },
    );
    let h = g.synthesis.forward(&ws, &SynthesisOptions::default());
    let diff = (&a - &h).abs();
    println!(
        "fp16 blocks vs fp32 at {res}x{res} on {d:?}: max|Δ| {:.3e}, mean|Δ| {:.3e}, max|img| {:.2}",
        diff.max().double_value(&[]),
        diff.mean(Kind::Float).double_value(&[]),
        a.abs().max().double_value(&[])
    );
}

/// Relative error ‖a − b‖₂ / ‖b‖₂. Not the max: a reformulation's rounding flips the leaky
/// ReLU's branch for the odd pre-activation within rounding of 0, which moves that pixel's
/// noise gradient by a whole 0.8·|gradient| (seen on CPU in fp32: max-relative 2e-2, L2 1e-6).
fn rel(a: &Tensor, b: &Tensor) -> f64 {
    let n = |t: &Tensor| {
        t.to_kind(Kind::Double)
            .square()
            .sum(Kind::Double)
            .sqrt()
            .double_value(&[])
    };
    n(&(a - b)) / n(b).max(1e-30)
}

/// The image and the gradients of w and every noise buffer of `mean((img − target)²)`.
fn image_and_grads(
    g: &Generator,
    w: &Tensor,
    noise: &[Tensor],
    target: &Tensor,
    opts: &SynthesisOptions<'_>,
) -> (Tensor, Vec<Tensor>) {
    let img = g.synthesis.forward(&w.repeat([1, g.num_ws(), 1]), opts);
    let loss = (&img - target).square().mean(Kind::Float);
    let mut inputs: Vec<&Tensor> = vec![w];
    inputs.extend(noise.iter());
    (
        img.detach(),
        Tensor::run_backward(&[&loss], &inputs, false, false),
    )
}

/// Non-zero noise strengths and biases, so that every input of the epilogue matters.
fn stir_epilogue_inputs(g: &Generator) {
    let _ng = tch::no_grad_guard();
    for blk in &g.synthesis.blocks {
        for l in blk.conv0.iter().chain(std::iter::once(&blk.conv1)) {
            let _ = l.noise_strength.shallow_clone().fill_(0.3);
            l.bias
                .shallow_clone()
                .copy_(&(Tensor::randn_like(&l.bias) * 0.2));
        }
    }
}

/// The relative errors of an image and its gradients against the reference's: the image's, w's
/// gradient's, and the worst noise buffer's gradient's.
fn errors(
    (img, grads): &(Tensor, Vec<Tensor>),
    (img_r, grads_r): &(Tensor, Vec<Tensor>),
) -> (f64, f64, f64) {
    let g: Vec<f64> = grads.iter().zip(grads_r).map(|(a, b)| rel(a, b)).collect();
    (
        rel(img, img_r),
        g[0],
        g[1..].iter().cloned().fold(0.0, f64::max),
    )
}

fn fast_check(d: Device, res: i64, b: i64, iters: usize, choices: KernelChoices) {
    tch::manual_seed(0);
    let g = Generator::random(Config::paper_stylegan2(res), d).unwrap();
    stir_epilogue_inputs(&g);
    let w = (Tensor::randn([b, 1, 512], (Kind::Float, d)) * 0.5).set_requires_grad(true);
    let noise = noise_bufs(&g, b, d);
    let target = Tensor::randn([b, 3, res, res], (Kind::Float, d));
    let o = |ops, force_fp32| SynthesisOptions {
        noise: Noise::Given(&noise),
        fused_modconv: Some(false),
        force_fp32,
        ops,
    };
    let truth = image_and_grads(&g, &w, &noise, &target, &o(Ops::Reference, true));
    let fast32 = image_and_grads(&g, &w, &noise, &target, &o(Ops::Fast(choices), true));
    let e = errors(&fast32, &truth);
    // fp32: the reformulation's rounding only (noise gradients carry the lrelu branch flips).
    let mut ok = e.0 <= 1e-4 && e.1 <= 1e-3 && e.2 <= 2e-3;
    println!(
        "fast-check {res}x{res} batch {b} fp32 on {d:?}: Fast vs Reference: image {:.2e}, grad w {:.2e}, worst noise grad {:.2e} (bounds 1e-4/1e-3/2e-3) {}",
        e.0,
        e.1,
        e.2,
        if ok { "PASS" } else { "FAIL" }
    );
    if d.is_cuda() {
        // fp16 blocks: both op sequences against the fp32 result; Fast (epilogue in fp32, one
        // rounding) must not be worse than upstream's sequence (a rounding per op) by more
        // than half again.
        let e16r = errors(
            &image_and_grads(&g, &w, &noise, &target, &o(Ops::Reference, false)),
            &truth,
        );
        let e16f = errors(
            &image_and_grads(&g, &w, &noise, &target, &o(Ops::Fast(choices), false)),
            &truth,
        );
        let pass = e16f.0 <= 1.5 * e16r.0 && e16f.1 <= 1.5 * e16r.1 && e16f.2 <= 1.5 * e16r.2;
        ok &= pass;
        println!(
            "fast-check {res}x{res} batch {b} fp16 blocks vs fp32: Reference image {:.2e}, grad w {:.2e}, noise {:.2e}; Fast image {:.2e}, grad w {:.2e}, noise {:.2e} {}",
            e16r.0,
            e16r.1,
            e16r.2,
            e16f.0,
            e16f.1,
            e16f.2,
            if pass { "PASS" } else { "FAIL" }
        );
    }
    for force_fp32 in [true, false] {
        for ops in [Ops::Reference, Ops::Fast(choices)] {
            let ms = median_ms(d, iters, || {
                let _ = image_and_grads(&g, &w, &noise, &target, &o(ops, force_fp32));
            });
            let label = if force_fp32 { "fp32" } else { "fp16 blocks" };
            println!(
                "  {label} {ops:?}: forward+backward {ms:.1} ms ({:.1} img/s)",
                b as f64 * 1e3 / ms
            );
        }
    }
    if !ok {
        std::process::exit(1);
    }
}

#[path = "common/kernel_choices.rs"]
mod common;
#[path = "../tests/common/parity.rs"]
mod parity;

fn main() {
    let choices = common::set_up("bench");
    let a: Vec<String> = std::env::args().collect();
    if std::env::var_os("NO_TF32").is_some() {
        gpu_runtime::shim::cuda_fp32_strict().unwrap();
    }
    let _ = device::load_cuda();
    match a.get(1).map(String::as_str) {
        Some("parity") => parity(device(&a[2]), Path::new(&a[3])),
        Some("fixture") => fixture(device(&a[2]), Path::new(&a[3]), a[4].parse().unwrap()),
        Some("paper") => paper(
            device(&a[2]),
            a[3].parse().unwrap(),
            a[4].parse().unwrap(),
            a[5] == "fp16",
            a[6].parse().unwrap(),
        ),
        Some("fp16-error") => fp16_error(device(&a[2]), a[3].parse().unwrap()),
        Some("layers") => layers(
            device(&a[2]),
            a[3].parse().unwrap(),
            a[4].parse().unwrap(),
            a[5] == "fp16",
            a[6].parse().unwrap(),
            choices,
        ),
        Some("fast-check") => fast_check(
            device(&a[2]),
            a[3].parse().unwrap(),
            a[4].parse().unwrap(),
            a[5].parse().unwrap(),
            choices,
        ),
        _ => {
            eprintln!(
                "usage: bench parity DEVICE DIR | fixture DEVICE G ITERS | paper DEVICE RES BATCH fp32|fp16 ITERS | fp16-error DEVICE RES | fast-check DEVICE RES BATCH ITERS | layers DEVICE RES BATCH fp32|fp16 ITERS"
            );
            std::process::exit(2);
        }
    }
}

/// Forward+backward milliseconds of `f`'s output (gradients for `inputs`), without the cost of
/// the loss that backward needs: Σ out·u for a fixed random u, timed alone on a leaf of the
/// output's shape and subtracted.
fn fwd_bwd_ms(d: Device, iters: usize, inputs: &[&Tensor], f: impl Fn() -> Tensor) -> f64 {
    let out = tch::no_grad(&f);
    let u = Tensor::randn_like(&out);
    let leaf = out.detach().set_requires_grad(true);
    let loss_only = median_ms(d, iters, || {
        let _ = Tensor::run_backward(&[(&leaf * &u).sum(Kind::Float)], &[&leaf], false, false);
    });
    let total = median_ms(d, iters, || {
        let _ = Tensor::run_backward(&[(f() * &u).sum(Kind::Float)], inputs, false, false);
    });
    total - loss_only
}

/// `bench layers`: each piece of a synthesis block at the paper config's shapes.
/// The column names of `layers`' table.
fn print_layers_header() {
    println!(
        "{:>6} {:>5} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>8} {:>8}",
        "res",
        "dtype",
        "in->out",
        "modul.",
        "up-phase",
        "up-ref",
        "up-tconv",
        "conv3x3",
        "epilog.",
        "torgb",
        "img-up",
        "up-ph.cl",
        "conv.cl"
    );
}

/// Forward+backward milliseconds of a block's epilogue (noise, bias, gain, clamp), ToRGB and
/// the image's up-sampling (`img_up`), on `y` ([batch, channels, r, r]).
fn epilogue_torgb_ms(
    d: Device,
    iters: usize,
    fast: fast::Fast,
    y: &Tensor,
    img_up: &Tensor,
) -> (f64, f64, f64) {
    let [b, cout, r, _] = y.size()[..] else {
        unreachable!("y is NCHW")
    };
    let f32_on = (Kind::Float, d);
    let grad = |t: Tensor| t.set_requires_grad(true);
    let dc = grad(Tensor::rand([b, cout], f32_on));
    let noise = grad(Tensor::randn([b, 1, r, r], f32_on));
    let (strength, bias) = (
        Tensor::from(0.1f32).to_device(d),
        Tensor::randn([cout], f32_on),
    );
    let epi = fwd_bwd_ms(d, iters, &[y, &dc, &noise], || {
        fast::epilogue(
            fast,
            y,
            &dc,
            Some(&noise),
            &strength,
            &bias,
            1.0,
            Some(256.0),
        )
    });
    let (wrgb, srgb) = (
        Tensor::randn([3, cout, 1, 1], f32_on),
        grad(Tensor::randn([b, cout], f32_on)),
    );
    let torgb = fwd_bwd_ms(d, iters, &[y, &srgb], || fast::torgb(y, &wrgb, &srgb));
    let img = grad(Tensor::randn([b, 3, r / 2, r / 2], f32_on));
    let up_img = fwd_bwd_ms(d, iters, &[&img], || fast::upsample2d_with(&img, img_up));
    (epi, torgb, up_img)
}

fn layers(d: Device, res: i64, b: i64, fp16: bool, iters: usize, choices: KernelChoices) {
    let state = fast::FastState::default();
    let fast = fast::Fast {
        choices,
        state: &state,
    };
    let cfg = Config::paper_stylegan2(res);
    let f = ops::default_resample_filter().to_device(d);
    let img_up = fast::upsample_weight(&f);
    let f32_on = (Kind::Float, d);
    println!(
        "layers {res}x{res} batch {b} on {d:?}: forward+backward ms (median of {iters}) per block resolution"
    );
    print_layers_header();
    let (mut fast_total, mut ref_total, mut tconv_total) = (0.0, 0.0, 0.0);
    for r in cfg.block_resolutions().into_iter().filter(|&r| r >= 8) {
        let (cin, cout) = (cfg.channels(r / 2), cfg.channels(r));
        let kind = if fp16 && d.is_cuda() && r >= cfg.fp16_resolution() {
            Kind::Half
        } else {
            Kind::Float
        };
        let grad = |t: Tensor| t.set_requires_grad(true);
        let x = grad(Tensor::randn([b, cin, r / 2, r / 2], (kind, d)));
        let s = grad(Tensor::randn([b, cin, 1, 1], (kind, d)));
        let w0 = Tensor::randn([cout, cin, 3, 3], f32_on) / ((cin * 9) as f64).sqrt();
        let phase = fast::phase_weight(&w0, &f).to_kind(kind);
        let w0 = w0.to_kind(kind);
        let modulate = fwd_bwd_ms(d, iters, &[&x, &s], || &x * &s);
        let up_phase = fwd_bwd_ms(d, iters, &[&x], || fast::conv_up(&x, &phase));
        let up_ref = fwd_bwd_ms(d, iters, &[&x], || {
            ops::conv2d_resample(&x, &w0, Some(&f), 2, 1, 1, false)
        });
        let up_tconv = fwd_bwd_ms(d, iters, &[&x], || fast::conv_up_tconv(&x, &w0, &f));
        let y = grad(Tensor::randn([b, cout, r, r], (kind, d)));
        let w1 =
            (Tensor::randn([cout, cout, 3, 3], f32_on) / ((cout * 9) as f64).sqrt()).to_kind(kind);
        let conv = fwd_bwd_ms(d, iters, &[&y], || {
            y.conv2d(&w1, None::<Tensor>, [1, 1], [1, 1], [1, 1], 1)
        });
        // The same two convolutions in channels_last (NHWC: no layout transposes around cuDNN's
        // tensor-core kernels), to see what a channels_last Fast path could gain.
        let nhwc = |t: &Tensor| gpu_runtime::shim::to_channels_last(t).unwrap();
        let (x_cl, y_cl) = (grad(nhwc(&x.detach())), grad(nhwc(&y.detach())));
        let (phase_cl, w1_cl) = (nhwc(&phase), nhwc(&w1));
        let up_phase_cl = fwd_bwd_ms(d, iters, &[&x_cl], || fast::conv_up(&x_cl, &phase_cl));
        let conv_cl = fwd_bwd_ms(d, iters, &[&y_cl], || {
            y_cl.conv2d(&w1_cl, None::<Tensor>, [1, 1], [1, 1], [1, 1], 1)
        });
        let (epi, torgb, up_img) = epilogue_torgb_ms(d, iters, fast, &y, &img_up);
        // A block: two modulations, one up-sampling and one plain convolution, two epilogues,
        // ToRGB and the image's up-sampling.
        let common = 2.0 * modulate + conv + 2.0 * epi + torgb + up_img;
        fast_total += common + up_phase;
        ref_total += common + up_ref;
        tconv_total += common + up_tconv;
        let kind_name = if kind == Kind::Half { "fp16" } else { "fp32" };
        println!(
            "{r:>6} {kind_name:>5} {:>9} {modulate:>8.2} {up_phase:>8.2} {up_ref:>8.2} {up_tconv:>8.2} {conv:>8.2} {epi:>8.2} {torgb:>7.2} {up_img:>7.2} {up_phase_cl:>8.2} {conv_cl:>8.2}",
            format!("{cin}->{cout}")
        );
    }
    println!(
        "sum over blocks 8..{res} (2 modulations, 2 epilogues per block): {fast_total:.1} ms with the phase convolution, \
         {ref_total:.1} ms with upstream's transposed conv + FIR, {tconv_total:.1} ms with transposed conv + single-channel FIR"
    );
}
