//! StyleGAN2's timed kernel choices: which up-sampling convolution the generator runs, timed once
//! per shape by the generator's own [`Tuner`] unless [`KernelChoices`] (the tools'
//! `--kernel-choices`, handed to the synthesis as [`crate::Ops::Fast`]) fixes it: a candidate's
//! name fixes it, `auto` times the candidates on any device; left unset, CUDA times them and the
//! CPU takes the first candidate.

pub use gpu_runtime::tune::{
    Candidate, Decision, KernelChoices, Tuner, UPCONVS, VGG_LAYOUTS, mode, time,
};
