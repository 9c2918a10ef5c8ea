//! What the upstream fixtures do not cover — architectures `orig` and `resnet`, conditional
//! mapping, one image channel, other depths — against `scripts/reference/stylegan2_ref.py`, an
//! independent PyTorch transcription of upstream that this test first checks against the
//! upstream fixtures (so it is known to compute upstream's maths where both can be compared).
//!
//! Weights are upstream's initialisation with the zero/one-initialised tensors (biases,
//! noise_strength, w_avg) randomised too, so that every term contributes. Tolerance 1e-4 as for
//! the fixtures.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{max_abs, tensors};
use stylegan2::tune::KernelChoices;
use stylegan2::{Architecture, Config, Generator, Noise, Ops, SynthesisOptions, init};
use tch::{Device, Kind, Tensor};

/// Held by every test that draws from libtorch's global generator: the parity cases seed it
/// and must draw the same weights on every run, which another test's draws on another thread
/// would change.
static DRAWS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn draws() -> std::sync::MutexGuard<'static, ()> {
    DRAWS.lock().unwrap_or_else(|e| e.into_inner())
}

fn run_reference(g: &Path, inputs: &Path, out: &Path) -> BTreeMap<String, Tensor> {
    testkit::reference_script("stylegan2_ref.py", [g, inputs, out]);
    tensors(out)
}

#[test]
fn python_reference_matches_the_upstream_fixtures() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["tiny-skip", "tiny-skip-clamp"] {
        let dir = testkit::stylegan2_fixtures().join(name);
        let got = run_reference(
            &dir.join("G.safetensors"),
            &dir.join("reference.safetensors"),
            &tmp.path().join("o"),
        );
        let want = tensors(&dir.join("reference.safetensors"));
        for k in ["ws", "img_const", "img_none", "img_const_unfused"] {
            let d = max_abs(&got[k], &want[k]);
            assert!(d <= 1e-4, "{name} {k}: {d}");
        }
    }
}

fn config(
    architecture: Architecture,
    c_dim: i64,
    img_channels: i64,
    res: i64,
    map_layers: i64,
) -> Config {
    Config {
        z_dim: 12,
        c_dim,
        w_dim: 16,
        img_resolution: res,
        img_channels,
        map_layers,
        channel_base: 256,
        channel_max: 24,
        conv_clamp: Some(4.0),
        architecture,
        num_fp16_res: 0,
        mapping_lr_multiplier: 0.01,
    }
}

#[test]
fn other_architectures_match_the_python_reference() {
    let _draws = draws();
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        ("orig", config(Architecture::Orig, 0, 3, 32, 2)),
        ("resnet", config(Architecture::Resnet, 0, 3, 32, 3)),
        (
            "skip-conditional-gray",
            config(Architecture::Skip, 5, 1, 16, 2),
        ),
        (
            "resnet-rgba-no-clamp",
            Config {
                conv_clamp: None,
                ..config(Architecture::Resnet, 0, 4, 8, 1)
            },
        ),
    ];
    for (i, (name, cfg)) in cases.into_iter().enumerate() {
        tch::manual_seed(100 + i as i64);
        let mut t = init::init_tensors(&cfg);
        for (k, v) in t.iter_mut() {
            if k.ends_with(".bias") || k.ends_with("noise_strength") || k.ends_with("w_avg") {
                *v = Tensor::randn(v.size(), (Kind::Float, Device::Cpu)) * 0.3;
            }
        }
        let gpath = tmp.path().join(format!("{name}.safetensors"));
        init::save(&gpath, &t, &cfg).unwrap();
        let g = Generator::load(&gpath, None, Device::Cpu).unwrap();

        let n = 3;
        let z = Tensor::randn([n, cfg.z_dim], (Kind::Float, Device::Cpu));
        let mut inputs = vec![("z".to_string(), z.shallow_clone())];
        let c = (cfg.c_dim > 0).then(|| {
            let c = Tensor::zeros([n, cfg.c_dim], (Kind::Float, Device::Cpu));
            for row in 0..n {
                let _ = c.get(row).get(row + 1).fill_(1.0);
            }
            c
        });
        if let Some(c) = &c {
            inputs.push(("c".into(), c.shallow_clone()));
        }
        let ipath = tmp.path().join(format!("{name}-in.safetensors"));
        Tensor::write_safetensors(&inputs, &ipath).unwrap();
        let want = run_reference(
            &gpath,
            &ipath,
            &tmp.path().join(format!("{name}-out.safetensors")),
        );

        let ws = g.mapping.forward(&z, c.as_ref(), 1.0, None);
        let mut report = vec![format!("ws {:.1e}", max_abs(&ws, &want["ws"]))];
        assert!(max_abs(&ws, &want["ws"]) <= 1e-4, "{name} ws");
        for (k, noise, fused) in [
            ("img_const", Noise::Const, None),
            ("img_none", Noise::None, None),
            ("img_const_unfused", Noise::Const, Some(false)),
        ] {
            let img = g.synthesis.forward(
                &want["ws"],
                &SynthesisOptions {
                    noise,
                    fused_modconv: fused,
                    force_fp32: false,
                    ..Default::default()
                },
            );
            assert_eq!(
                img.size(),
                [n, cfg.img_channels, cfg.img_resolution, cfg.img_resolution]
            );
            let d = max_abs(&img, &want[k]);
            report.push(format!(
                "{k} {d:.1e} (max|ref| {:.1})",
                want[k].abs().max().double_value(&[])
            ));
            assert!(d <= 1e-4, "{name} {k}: {d}");
        }
        eprintln!("{name}: {}", report.join(", "));
    }
}

#[test]
fn random_init_has_upstream_structure() {
    let _draws = draws();
    let cfg = Config {
        num_fp16_res: 2,
        ..config(Architecture::Resnet, 0, 3, 64, 2)
    };
    let g = Generator::random(cfg, Device::Cpu).unwrap();
    assert_eq!(g.num_ws(), 10); // blocks 4..64: 2 per block
    let names: Vec<String> = g
        .synthesis
        .noise_layers()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names[..3],
        [
            "synthesis.b4.conv1",
            "synthesis.b8.conv0",
            "synthesis.b8.conv1"
        ]
    );
    assert_eq!(names.len(), 9);
    // fp16 blocks only on CUDA: on the CPU the output is fp32 and equals force_fp32.
    let ws = Tensor::randn([2, 10, 16], (Kind::Float, Device::Cpu));
    let a = g.synthesis.forward(&ws, &SynthesisOptions::default());
    let b = g.synthesis.forward(
        &ws,
        &SynthesisOptions {
            force_fp32: true,
            ..Default::default()
        },
    );
    assert_eq!(a.kind(), Kind::Float);
    assert!(a.equal(&b));
}

#[test]
fn two_kernel_choices_coexist_in_one_process() {
    let _draws = draws();
    // Each generator runs the fast ops with its own choice of up-sampling convolution and keeps
    // its own decisions: run at once in two threads, each gives what it gives alone.
    let cfg = config(Architecture::Skip, 0, 3, 32, 2);
    let g = Generator::random(cfg.clone(), Device::Cpu).unwrap();
    let ws = Tensor::randn([2, g.num_ws(), 16], (Kind::Float, Device::Cpu));
    let opts = |upconv: &'static str| SynthesisOptions {
        noise: Noise::Const,
        ops: Ops::Fast(KernelChoices {
            upconv: Some(upconv),
            ..Default::default()
        }),
        ..Default::default()
    };
    let alone: Vec<Tensor> = ["phase", "tconv"]
        .iter()
        .map(|u| g.synthesis.forward(&ws, &opts(u)))
        .collect();
    assert!(
        !alone[0].equal(&alone[1]),
        "the two formulations round differently: the choice took effect"
    );
    let reference = g.synthesis.forward(&ws, &SynthesisOptions::default());
    for a in &alone {
        assert!(
            max_abs(a, &reference) < 1e-4,
            "same maths as the reference ops"
        );
    }
    let other = Generator::random(cfg, Device::Cpu).unwrap();
    let other_alone = other.synthesis.forward(&ws, &opts("tconv"));
    // Generators are not shared between threads (tensors are Send, not Sync): each thread owns
    // one, as each rank or job would.
    let run = |net: Generator, upconv: &'static str| {
        let ws = ws.shallow_clone();
        std::thread::spawn(move || {
            let out: Vec<Tensor> = (0..3)
                .map(|_| net.synthesis.forward(&ws, &opts(upconv)))
                .collect();
            (net, out)
        })
    };
    let (a, b) = (run(g, "phase"), run(other, "tconv"));
    let (g, a) = a.join().unwrap();
    let (_, b) = b.join().unwrap();
    assert!(a.iter().all(|t| t.equal(&alone[0])));
    assert!(b.iter().all(|t| t.equal(&other_alone)));
    // A fixed choice times nothing.
    assert!(g.synthesis.fast_state().decisions().is_empty());
}
