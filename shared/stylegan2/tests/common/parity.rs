//! What the upstream fixture's reference tensors hold, computed by our generator: the parity
//! test holds each to its tolerance on the CPU, and the bench example's `parity` prints each
//! difference on a device (`#[path]` brings this file into both).

use std::collections::BTreeMap;

use stylegan2::{Generator, Noise, SynthesisOptions};
use tch::{Kind, Tensor};

/// Each reference tensor's name with our value of it, from the fixture's own inputs in `r`
/// (`z`, `ws`, `w_avg_1000`, `grad_target`), on their device.
pub fn outputs(g: &Generator, r: &BTreeMap<String, Tensor>) -> Vec<(&'static str, Tensor)> {
    let z = &r["z"];
    let mut out = vec![
        ("ws", g.mapping.forward(z, None, 1.0, None)),
        ("ws_psi0.7", g.mapping.forward(z, None, 0.7, None)),
        (
            "ws_psi0.5_cutoff2",
            g.mapping.forward(z, None, 0.5, Some(2)),
        ),
    ];
    // Synthesis from the reference ws, so each stage is checked on its own.
    let ws = &r["ws"];
    let opts = |noise, fused| SynthesisOptions {
        noise,
        fused_modconv: fused,
        force_fp32: false,
        ..Default::default()
    };
    out.extend([
        (
            "img_const",
            g.synthesis.forward(ws, &opts(Noise::Const, None)),
        ),
        (
            "img_none",
            g.synthesis.forward(ws, &opts(Noise::None, None)),
        ),
        (
            "img_const_unfused",
            g.synthesis.forward(ws, &opts(Noise::Const, Some(false))),
        ),
    ]);

    // The projector's statistics: 1000 z from numpy RandomState(123), W of the first layer.
    let (w_avg, w_std) = g.w_avg_std(1000);
    let w_std = Tensor::from_slice(&[w_std]).to_device(w_avg.device());
    out.extend([("w_avg_1000", w_avg), ("w_std_1000", w_std)]);

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
    out.extend([("grad_loss", loss.reshape([1])), ("grad_w", grad)]);
    out
}
