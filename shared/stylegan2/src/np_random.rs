//! numpy's legacy `np.random.RandomState(seed).randn(...)`, bit for bit: upstream draws its
//! latents with it (`generate.py`: z of seed s; the projector: 10,000 z from seed 123), so the
//! same seed gives the same z here as there. The port is `ref_rng`'s, shared with the sweep's
//! samplers.

pub use ref_rng::RandomState;
