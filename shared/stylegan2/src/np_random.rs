//! numpy's legacy `np.random.RandomState(seed).randn(...)`, bit for bit: upstream draws its
//! latents with it (`generate.py`: z of seed s; the projector: 10,000 z from seed 123), so the
//! same seed gives the same z here as there.
//!
//! MT19937 seeded with `init_genrand(seed)`; doubles from two draws (`(a >> 5) * 2^26 + (b >> 6)`
//! over 2^53); normals by the Marsaglia polar method, the second value of each pair cached —
//! numpy's `legacy_gauss`.

use rand_mt::Mt;

/// A `numpy.random.RandomState` restricted to `randn`.
#[derive(Debug, Clone)]
pub struct RandomState {
    mt: Mt,
    gauss: Option<f64>,
}

impl RandomState {
    /// `RandomState(seed)` for an integer seed in [0, 2^32).
    pub fn new(seed: u32) -> Self {
        RandomState {
            mt: Mt::new(seed),
            gauss: None,
        }
    }

    fn random_double(&mut self) -> f64 {
        let a = (self.mt.next_u32() >> 5) as f64;
        let b = (self.mt.next_u32() >> 6) as f64;
        (a * 67108864.0 + b) / 9007199254740992.0
    }

    /// One standard normal (`legacy_gauss`).
    pub fn standard_normal(&mut self) -> f64 {
        if let Some(g) = self.gauss.take() {
            return g;
        }
        let (x1, x2, r2) = loop {
            let x1 = 2.0 * self.random_double() - 1.0;
            let x2 = 2.0 * self.random_double() - 1.0;
            let r2 = x1 * x1 + x2 * x2;
            if r2 < 1.0 && r2 != 0.0 {
                break (x1, x2, r2);
            }
        };
        let f = (-2.0 * r2.ln() / r2).sqrt();
        self.gauss = Some(f * x1);
        f * x2
    }

    /// `randn(n)` as a flat vector (row-major for any shape with n elements).
    pub fn randn(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.standard_normal()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_numpy() {
        // python -c "import numpy as np; print(repr(np.random.RandomState(123).randn(5)))"
        let want = [
            -1.0856306033005612,
            0.9973454465835858,
            0.28297849805199204,
            -1.506294713918092,
            -0.5786002519685364,
        ];
        let got = RandomState::new(123).randn(5);
        for (g, w) in got.iter().zip(want) {
            assert_eq!(*g, w);
        }
        // np.random.RandomState(0).randn(3)
        let got = RandomState::new(0).randn(3);
        assert_eq!(
            got,
            [1.764052345967664, 0.4001572083672233, 0.9787379841057392]
        );
    }
}
