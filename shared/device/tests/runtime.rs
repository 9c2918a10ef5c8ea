//! This test binary links libtorch through torch-build's recipe. That it starts at all, with no
//! LD_LIBRARY_PATH set by the test runner, shows the run path works; the checks below show the
//! CUDA half is wired (loaded when present) and the CPU path computes.

use device::{DeviceArg, Env};

#[test]
fn libtorch_runs_without_any_exported_path() {
    let t = tch::Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
    let s = f64::try_from((&t * 2.0).sum(tch::Kind::Float)).unwrap();
    assert_eq!(s, 12.0);
}

#[test]
fn binary_has_a_runpath_to_torch_lib() {
    let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let needle = b"torch/lib";
    assert!(
        exe.windows(needle.len()).any(|w| w == needle),
        "no RUNPATH to torch/lib in the test binary"
    );
}

#[test]
fn cuda_library_loads_and_auto_falls_back_to_cpu_without_a_gpu() {
    // The PyPI wheel is the CUDA build: libtorch_cuda.so is there even on a CPU-only machine.
    device::load_cuda().expect("libtorch_cuda.so should load from the run path");
    let device = DeviceArg::Auto.resolve(&Env::default()).unwrap();
    if device::cuda_device_count() == 0 {
        assert_eq!(device, tch::Device::Cpu);
        let e = DeviceArg::Cuda(0).resolve(&Env::default()).unwrap_err();
        assert!(e.to_string().contains("--device cuda:0"), "{e}");
    } else {
        assert_eq!(device, tch::Device::Cuda(0));
    }
}
