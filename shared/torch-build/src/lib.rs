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
