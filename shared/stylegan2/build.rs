//! Compiles src/epilogue.cpp (the fused modulated-convolution epilogue: its NVRTC source and
//! autograd Function) over gpu-runtime's C++ API, whose header folder gpu-runtime's build script
//! hands over as DEP_SHARDKIT_GPU_RUNTIME_INCLUDE.
use std::path::PathBuf;

fn main() {
    torch_build::link_libtorch();
    println!("cargo:rerun-if-env-changed=DEP_SHARDKIT_GPU_RUNTIME_INCLUDE");
    let runtime = PathBuf::from(
        std::env::var("DEP_SHARDKIT_GPU_RUNTIME_INCLUDE")
            .expect("gpu-runtime (a direct dependency) sets DEP_SHARDKIT_GPU_RUNTIME_INCLUDE"),
    );
    println!(
        "cargo:rerun-if-changed={}",
        runtime.join("shardkit/runtime.h").display()
    );
    torch_build::compile_cxx("shardkit_stylegan2", &["src/epilogue.cpp"], &[runtime]);
}
