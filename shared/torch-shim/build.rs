//! Compiles src/shim.cpp against the headers of the torch wheel tch links (no CUDA toolkit: the
//! wheel's nvidia/cu13 headers, plus triton's copy of crt/host_config.h) and links it to
//! libtorch_cuda and libc10_cuda, which hold the graph and stream symbols.
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src/shim.cpp");
    torch_build::link_libtorch();
    let lib = PathBuf::from(
        std::env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys sets DEP_TCH_LIBTORCH_LIB"),
    );
    let torch = lib.parent().expect("torch/lib has a parent").to_path_buf();
    let site = torch.parent().expect("torch has a parent").to_path_buf();
    let includes = [
        torch.join("include"),
        torch.join("include/torch/csrc/api/include"),
        site.join("nvidia/cu13/include"),
        site.join("triton/backends/nvidia/include"),
    ];
    for dir in &includes {
        if !dir.is_dir() {
            println!(
                "cargo:warning=torch-shim: {} is missing (a torch 2.11 CUDA wheel has it)",
                dir.display()
            );
        }
    }
    cc::Build::new()
        .cpp(true)
        .file("src/shim.cpp")
        .includes(&includes)
        .flag("-std=c++17")
        .flag("-D_GLIBCXX_USE_CXX11_ABI=1")
        .flag("-DGLOG_USE_GLOG_EXPORT")
        .warnings(false)
        .compile("shardkit_torch_shim");
    println!("cargo:rustc-link-search=native={}", lib.display());
    for l in ["torch_cuda", "c10_cuda", "torch_cpu", "c10"] {
        println!("cargo:rustc-link-lib=dylib={l}");
    }
}
