//! The draws of a sample's random transforms and of a shard stream's shuffle: each a function of
//! the run's seed, the epoch and the sample (or stream), so that they do not depend on which
//! worker thread or rank makes them.

/// SplitMix64: a small generator whose state is a function of what it is seeded with.
pub(crate) struct Draws(u64);

impl Draws {
    pub(crate) fn new(seed: i64, epoch: usize, index: usize) -> Draws {
        let mut d = Draws((seed as u64) ^ 0x5851_F42D_4C95_7F2D);
        for v in [epoch as u64, index as u64] {
            d.0 = d.0.wrapping_add(d.next_u64() ^ v);
        }
        d
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_a_function_of_seed_epoch_and_index() {
        let a: Vec<f64> = (0..4).map(|_| Draws::new(1, 2, 3).uniform()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let mut d = Draws::new(1, 2, 3);
        let (x, y) = (d.uniform(), d.uniform());
        assert_ne!(x, y);
        assert_ne!(Draws::new(1, 2, 4).uniform(), x);
        assert_ne!(Draws::new(1, 3, 3).uniform(), x);
        assert_ne!(Draws::new(2, 2, 3).uniform(), x);
        let mean = (0..10_000)
            .map(|i| Draws::new(0, 0, i).uniform())
            .sum::<f64>()
            / 1e4;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }
}
