//! Parity with the upstream StyleGAN2-ADA code: `../shared/fixtures/stylegan2/<config>/` holds
//! G_ema weights and reference tensors made by upstream on CPU in fp32 (reference ops).
//!
//! Tolerance: 1e-4 absolute on every tensor (issue 3). Both sides run the same fp32 op sequence
//! through the same libtorch CPU kernels, so mapping, images and gradient come out bit-identical
//! here (max|Δ| 0); w_avg/w_std differ by ~2e-6 because upstream averages in numpy (float32
//! pairwise sums). The tolerance leaves room for other CPUs' kernels; a wrong formula (a missing
//! gain, a flipped filter, a wrong padding) misses it by orders of magnitude.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::max_abs;
use stylegan2::{Generator, Noise, SynthesisOptions};
use tch::{Device, Kind, Tensor};

const TOL: f64 = 1e-4;

fn configs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(testkit::stylegan2_fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("G.safetensors").is_file())
        .collect();
    v.sort();
    assert!(v.len() >= 2, "expected the fixture configs, found {v:?}");
    v
}

fn reference(dir: &std::path::Path) -> BTreeMap<String, Tensor> {
    common::tensors(&dir.join("reference.safetensors"))
}

fn check(report: &mut Vec<String>, name: &str, got: &Tensor, want: &Tensor) {
    let d = max_abs(got, want);
    report.push(format!(
        "{name}: max|Δ| {d:.3e} (max|ref| {:.2})",
        want.abs().max().double_value(&[])
    ));
    assert!(d <= TOL, "{name}: max abs error {d:e} > {TOL:e}");
}

#[test]
fn mapping_synthesis_and_gradient_match_upstream() {
    for dir in configs() {
        let g = Generator::load(&dir.join("G.safetensors"), None, Device::Cpu).unwrap();
        let r = reference(&dir);
        let mut report = Vec::new();
        let z = &r["z"];
        let ws = g.mapping.forward(z, None, 1.0, None);
        check(&mut report, "ws", &ws, &r["ws"]);
        check(
            &mut report,
            "ws_psi0.7",
            &g.mapping.forward(z, None, 0.7, None),
            &r["ws_psi0.7"],
        );
        check(
            &mut report,
            "ws_psi0.5_cutoff2",
            &g.mapping.forward(z, None, 0.5, Some(2)),
            &r["ws_psi0.5_cutoff2"],
        );
        // Synthesis from the reference ws, so each stage is checked on its own.
        let ws = &r["ws"];
        let opts = |noise, fused| SynthesisOptions {
            noise,
            fused_modconv: fused,
            force_fp32: false,
            ..Default::default()
        };
        check(
            &mut report,
            "img_const",
            &g.synthesis.forward(ws, &opts(Noise::Const, None)),
            &r["img_const"],
        );
        check(
            &mut report,
            "img_none",
            &g.synthesis.forward(ws, &opts(Noise::None, None)),
            &r["img_none"],
        );
        check(
            &mut report,
            "img_const_unfused",
            &g.synthesis.forward(ws, &opts(Noise::Const, Some(false))),
            &r["img_const_unfused"],
        );

        // The projector's statistics: 1000 z from numpy RandomState(123), W of the first layer.
        let (w_avg, w_std) = g.w_avg_std(1000);
        check(&mut report, "w_avg_1000", &w_avg, &r["w_avg_1000"]);
        check(
            &mut report,
            "w_std_1000",
            &Tensor::from_slice(&[w_std as f32]),
            &r["w_std_1000"],
        );

        // One loss + gradient at w = w_avg_1000, as the projector's first step takes it: the
        // fixture's loss is mean((G.synthesis(w.repeat(num_ws), noise_mode='const') - target)^2)
        // (found by matching both the loss and its gradient exactly).
        let w = r["w_avg_1000"].copy().set_requires_grad(true);
        let img = g
            .synthesis
            .forward(&w.repeat([1, g.num_ws(), 1]), &opts(Noise::Const, None));
        let loss = (&img - &r["grad_target"]).square().mean(Kind::Float);
        let grad = Tensor::run_backward(&[&loss], &[&w], false, false)
            .pop()
            .unwrap();
        check(
            &mut report,
            "grad_loss",
            &loss.reshape([1]),
            &r["grad_loss"],
        );
        check(&mut report, "grad_w", &grad, &r["grad_w"]);
        eprintln!("{}: {}", dir.display(), report.join("; "));
    }
}
