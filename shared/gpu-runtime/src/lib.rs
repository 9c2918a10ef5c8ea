//! The GPU machinery the domain crates share, so a fast path is written once:
//!
//! - [`shim`]: what tch does not bind, from libtorch's C++ (`src/runtime.cpp`): CUDA graphs,
//!   current and side streams, autocast with a chosen dtype, channels_last, `p.grad = g`, a
//!   differentiable all-reduce, NVRTC's compile check, and [`shim::abi`] for crates with C++ of
//!   their own;
//! - [`fused`]: PyTorch's fused SGD and AdamW kernels;
//! - [`graph`]: warm up, capture and replay a step as a CUDA graph, with one failure policy
//!   (the trainer's step and the projector's step both run through it);
//! - [`adam`]: one Adam/AdamW step as `torch.optim`'s single-tensor path computes it, with host
//!   or device-side learning rate and step count (the trainer's AdamW and the projector's Adam);
//! - [`scalar`]: 0-dim tensors on a device, the form a captured graph can read;
//! - [`rng`]: random generators of one's own, seeded as `torch.manual_seed` seeds the default;
//! - [`tune`]: choosing between formulations of the same maths by timing them once per shape.
//!
//! Kernels that belong to a model live with the model, in its own C++ over this crate's
//! `include/shardkit/runtime.h` (`shardkit::KernelModule`: CUDA C++ compiled by NVRTC for each
//! device on first use, launched on the current stream): StyleGAN2's fused epilogue is
//! `stylegan2`'s `src/epilogue.cpp`.

pub mod adam;
pub mod fused;
pub mod graph;
pub mod rng;
pub mod scalar;
pub mod script;
pub mod shim;
pub mod tune;
