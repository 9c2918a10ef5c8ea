//! The native LPIPS features against `scripts/reference/lpips_ref.py` (torchvision's VGG16 and
//! the lpips package's formulas) on random weights, and the TorchScript path (a module with
//! vgg16.pt's call signature) against the native one. Tolerance: 1e-5 relative (issue 4); both
//! sides run the same fp32 convolutions, the distance is summed in a different order.

use std::path::Path;

use perceptual::Vgg16;
use tch::{Device, Kind, Tensor};

/// Runs `scripts/SCRIPT args...` with the venv's python, asserting that it succeeds.
fn run(script: &str, args: &[&Path]) {
    testkit::succeeds(testkit::python_script(&format!("scripts/{script}")).args(args));
}

#[test]
fn native_features_give_the_lpips_distance_and_match_torchscript() {
    let tmp = tempfile::tempdir().unwrap();
    let t = |n: &str| tmp.path().join(n);
    // Random VGG16/LPIPS weights, as the user-facing converter makes them.
    run(
        "convert-vgg16-lpips",
        &[
            Path::new("--random"),
            Path::new("7"),
            Path::new("-o"),
            &t("w.safetensors"),
        ],
    );
    tch::manual_seed(3);
    let opts = (Kind::Float, Device::Cpu);
    for (h, w) in [(32, 32), (48, 40)] {
        let a = Tensor::rand([3, 3, h, w], opts) * 255.0;
        let b = (&a + Tensor::randn([3, 3, h, w], opts) * 20.0).clamp(0.0, 255.0);
        Tensor::write_safetensors(&[("a", &a), ("b", &b)], t("in.safetensors")).unwrap();
        run(
            "reference/lpips_ref.py",
            &[
                Path::new("distance"),
                &t("w.safetensors"),
                &t("in.safetensors"),
                &t("out.safetensors"),
            ],
        );
        let want = Tensor::read_safetensors(t("out.safetensors"))
            .unwrap()
            .remove(0)
            .1;

        let vgg = Vgg16::load(&t("w.safetensors"), Device::Cpu).unwrap();
        let (fa, fb) = (vgg.features(&a).unwrap(), vgg.features(&b).unwrap());
        let got = (&fa - &fb)
            .square()
            .sum_dim_intlist(&[1i64][..], false, Kind::Float);
        let rel = ((&got - &want).abs() / want.abs()).max().double_value(&[]);
        eprintln!(
            "{h}x{w}: lpips {:?} rel err {rel:.2e}",
            Vec::<f32>::try_from(&want).unwrap()
        );
        assert!(rel <= 1e-5, "{h}x{w}: relative error {rel}");
    }

    run(
        "reference/lpips_ref.py",
        &[Path::new("script"), &t("w.safetensors"), &t("vgg.pt")],
    );
    let script = Vgg16::load(&t("vgg.pt"), Device::Cpu).unwrap();
    let native = Vgg16::load(&t("w.safetensors"), Device::Cpu).unwrap();
    let img = Tensor::rand([2, 3, 32, 32], opts) * 255.0;
    let (s, n) = (
        script.features(&img).unwrap(),
        native.features(&img).unwrap(),
    );
    assert_eq!(s.size(), n.size());
    let rel = ((&s - &n).abs().max() / n.abs().max()).double_value(&[]);
    assert!(rel <= 1e-5, "TorchScript vs native: {rel}");
}

#[test]
fn refuses_incomplete_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("w.safetensors");
    Tensor::write_safetensors(
        &[(
            "features.0.weight",
            Tensor::zeros([64, 3, 3, 3], (Kind::Float, Device::Cpu)),
        )],
        &p,
    )
    .unwrap();
    let e = Vgg16::load(&p, Device::Cpu).unwrap_err().to_string();
    assert!(e.contains("features.0.bias"), "{e}");
}
