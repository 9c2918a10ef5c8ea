//! The random generators of the implementations we match, ported once, bit for bit, so that a
//! seed gives here what it gives there: numpy's legacy [`RandomState`] (upstream StyleGAN2's
//! latents, Ray Tune's and Optuna's samplers) and its pairwise [`sum`], Python's
//! [`random.Random`](PyRandom) (PyTorch's `DataPartitioner`, Ray's population-based training) and
//! PyTorch's CPU [`randperm`] (`DistributedSampler`). All three stand on MT19937 (`rand_mt`);
//! they differ in how it is seeded and how its words become numbers.
//!
//! Every stream is checked against values printed by the reference (the tests name the Python
//! that printed them).

mod numpy;
mod python;
mod torch;

pub use numpy::{RandomState, sum};
pub use python::PyRandom;
pub use torch::randperm;

/// 53 bits from two 32-bit draws, as numpy's `random_sample` and Python's `random` make a
/// double in [0, 1).
fn double(mt: &mut rand_mt::Mt) -> f64 {
    let a = (mt.next_u32() >> 5) as f64;
    let b = (mt.next_u32() >> 6) as f64;
    (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)
}
