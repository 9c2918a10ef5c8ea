//! Compiles src/epilogue.cpp (the fused modulated-convolution epilogue's launches and autograd
//! Function) over gpu-runtime's C++ API, whose header folder gpu-runtime's build script hands
//! over as DEP_SHARDKIT_GPU_RUNTIME_INCLUDE, with src/epilogue.cu (its kernels, compiled by NVRTC
//! at run time) embedded as a string.
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
    // epilogue.cu as the C++ string kEpilogueSource, for epilogue.cpp to #include.
    println!("cargo:rerun-if-changed=src/epilogue.cu");
    let source = std::fs::read_to_string("src/epilogue.cu").expect("reading src/epilogue.cu");
    assert!(
        !source.contains(")SHK_CU\""),
        "src/epilogue.cu holds the raw string's end marker"
    );
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(
        out.join("epilogue_cu.inc"),
        format!("const char *kEpilogueSource = R\"SHK_CU({source})SHK_CU\";\n"),
    )
    .expect("writing epilogue_cu.inc");
    torch_build::compile_cxx("shardkit_stylegan2", &["src/epilogue.cpp"], &[runtime, out]);
}
