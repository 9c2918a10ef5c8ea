//! Compiles the runtime's C++ (src/runtime.cpp, over include/shardkit/runtime.h) against the
//! torch wheel's headers, and hands the header's folder to the build scripts of crates with
//! C++ of their own (`DEP_SHARDKIT_GPU_RUNTIME_INCLUDE`: a model's NVRTC kernels build on it).
use std::path::PathBuf;

fn main() {
    torch_build::link_libtorch();
    let include = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("include");
    println!("cargo:rerun-if-changed=include/shardkit/runtime.h");
    println!("cargo:include={}", include.display());
    torch_build::compile_cxx(
        "shardkit_gpu_runtime",
        &["src/runtime.cpp", "src/script.cpp"],
        &[include],
    );
}
