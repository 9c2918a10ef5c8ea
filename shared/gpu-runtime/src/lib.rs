//! The GPU machinery the domain crates share, so a fast path is written once:
//!
//! - [`graph`]: warm up, capture and replay a step as a CUDA graph, with one failure policy
//!   (the trainer's step and the projector's step both run through it);
//! - [`adam`]: one Adam/AdamW step as `torch.optim`'s single-tensor path computes it, with host
//!   or device-side learning rate and step count (the trainer's AdamW and the projector's Adam);
//! - [`scalar`]: 0-dim tensors on a device, the form a captured graph can read;
//! - [`tune`]: choosing between formulations of the same maths by timing them once per shape.
//!
//! The C++ bindings themselves are `torch-shim`'s (re-exported as [`shim`]); model kernels live
//! with their model (StyleGAN2's epilogue is called from `stylegan2::fast`).

pub mod adam;
pub mod graph;
pub mod scalar;
pub mod tune;

pub use torch_shim as shim;
