//! Used from the `build.rs` of every package whose binaries or tests link libtorch (the package
//! must depend on `torch-sys` directly, so that cargo hands its build script
//! `DEP_TCH_LIBTORCH_LIB`):
//!
//! ```no_run
//! // build.rs: fn main() { ... }
//! torch_build::link_libtorch();
//! ```
//!
//! It emits, for the package's own targets:
//! - `-Wl,--enable-new-dtags,-rpath,<torch/lib>`: a RUNPATH to the venv's libtorch, so binaries
//!   run on this machine with nothing exported; being a RUNPATH (not an RPATH), `LD_LIBRARY_PATH`
//!   overrides it, which is how the same binaries use a torch 2.11.0 installed elsewhere;
//! - `-Wl,--no-as-needed,-ltorch,--as-needed`: rustc links with `--as-needed`, which drops
//!   `libtorch_cuda.so` (nothing references its symbols directly) and leaves CUDA silently
//!   unavailable on a GPU machine; `libtorch.so` depends on it and keeps it loaded.
//!
//! A package with C++ of its own against libtorch (gpu-runtime's bindings, a model's CUDA
//! kernels) compiles it with [`compile_cxx`], which knows where the wheel keeps its headers.

use std::path::PathBuf;

/// Emits the link arguments described in the crate docs.
pub fn link_libtorch() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    match std::env::var("DEP_TCH_LIBTORCH_LIB") {
        Ok(dir) => {
            println!("cargo:rustc-link-arg=-Wl,--enable-new-dtags,-rpath,{dir}");
            println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch,--as-needed");
        }
        Err(_) => println!(
            "cargo:warning=DEP_TCH_LIBTORCH_LIB is not set: add `torch-sys` to this package's \
             [dependencies] so binaries get a run path to libtorch"
        ),
    }
}

/// Compiles `files` (C++17) into the static library `name`, against the headers of the torch
/// wheel tch links with no CUDA toolkit — the wheel's own headers, its nvidia/cu13 headers
/// (cuda.h, nvrtc.h), triton's copy of crt/host_config.h — and `includes`; then links the
/// package to libtorch_cuda and libc10_cuda (CUDA graphs, streams) beside libtorch_cpu and
/// libc10, after the library (whose symbols need them). Re-runs when any of `files` changes.
pub fn compile_cxx(name: &str, files: &[&str], includes: &[PathBuf]) {
    let lib = PathBuf::from(
        std::env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys sets DEP_TCH_LIBTORCH_LIB"),
    );
    let torch = lib.parent().expect("torch/lib has a parent").to_path_buf();
    let site = torch.parent().expect("torch has a parent").to_path_buf();
    let wheel = [
        torch.join("include"),
        torch.join("include/torch/csrc/api/include"),
        site.join("nvidia/cu13/include"),
        site.join("triton/backends/nvidia/include"),
    ];
    for dir in &wheel {
        if !dir.is_dir() {
            println!(
                "cargo:warning={} is missing (a torch 2.11 CUDA wheel has it)",
                dir.display()
            );
        }
    }
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .files(files)
        .includes(includes)
        .flag("-std=c++17")
        .flag("-D_GLIBCXX_USE_CXX11_ABI=1")
        .flag("-DGLOG_USE_GLOG_EXPORT")
        // Our C++ is held to -Wall -Wextra -Werror; libtorch's headers are system headers
        // (-isystem), whose warnings are theirs.
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true);
    for dir in &wheel {
        build.flag("-isystem").flag(dir.display().to_string());
    }
    build.compile(name);
    println!("cargo:rustc-link-search=native={}", lib.display());
    for l in ["torch_cuda", "c10_cuda", "torch_cpu", "c10"] {
        println!("cargo:rustc-link-lib=dylib={l}");
    }
}
