//! What Ray's schedulers and Optuna's samplers take from numpy and Python, bit for bit:
//! numpy's legacy `RandomState` and the pairwise `sum` its reductions use (`np.sum`, `np.mean`),
//! and Python's `random` ([`PyRandom`]), which Ray's population-based training draws from. The
//! ports are `ref_rng`'s.

pub(crate) use ref_rng::{PyRandom, RandomState, sum};
