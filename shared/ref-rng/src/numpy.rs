//! numpy's legacy generator, `np.random.RandomState` (also what `np.random.seed` seeds), and
//! the pairwise summation of its reductions (`np.sum`, `np.mean`).

use rand_mt::Mt;

/// `np.random.RandomState(seed)`: MT19937 seeded with `init_genrand(seed)`.
#[derive(Debug, Clone)]
pub struct RandomState {
    mt: Mt,
    /// The second normal of the last polar pair (`legacy_gauss` caches it).
    gauss: Option<f64>,
}

impl RandomState {
    /// `RandomState(seed)` for an integer seed in [0, 2³²).
    pub fn new(seed: u32) -> Self {
        RandomState {
            mt: Mt::new(seed),
            gauss: None,
        }
    }

    /// `random_sample()`: a double in [0, 1) from two 32-bit draws.
    pub fn random_sample(&mut self) -> f64 {
        crate::double(&mut self.mt)
    }

    /// `uniform(low, high)`.
    pub fn uniform(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.random_sample()
    }

    /// `randint(low, high)` (high excluded): the range masked to the next power of two, 32-bit
    /// draws rejected until one falls in it (64-bit draws for ranges over 2³²); a range of one
    /// value (high = low + 1) draws nothing.
    pub fn randint(&mut self, low: i64, high: i64) -> i64 {
        let range = high.abs_diff(low) - 1;
        if range == 0 {
            return low;
        }
        let mask = u64::MAX >> range.leading_zeros();
        let draw = |mt: &mut Mt| {
            if range <= u32::MAX as u64 {
                (mt.next_u32() as u64) & mask
            } else {
                let hi = mt.next_u32() as u64;
                ((hi << 32) | mt.next_u32() as u64) & mask
            }
        };
        let mut v = draw(&mut self.mt);
        while v > range {
            v = draw(&mut self.mt);
        }
        low.wrapping_add(v as i64)
    }

    /// `choice(len(p), p=p, size=n)`: the cumulative sum, normalised by its last element,
    /// searched on the right (`searchsorted(side='right')`) for each draw.
    pub fn choice(&mut self, p: &[f64], n: usize) -> Vec<usize> {
        let mut cdf: Vec<f64> = p
            .iter()
            .scan(0.0, |s, &x| {
                *s += x;
                Some(*s)
            })
            .collect();
        let last = *cdf.last().expect("a choice among at least one");
        cdf.iter_mut().for_each(|c| *c /= last);
        (0..n)
            .map(|_| {
                let u = self.random_sample();
                cdf.partition_point(|&c| c <= u).min(p.len() - 1)
            })
            .collect()
    }

    /// One standard normal, `legacy_gauss`: the Marsaglia polar method, the second value of
    /// each pair kept for the next call.
    pub fn standard_normal(&mut self) -> f64 {
        if let Some(g) = self.gauss.take() {
            return g;
        }
        let (x1, x2, r2) = loop {
            let x1 = 2.0 * self.random_sample() - 1.0;
            let x2 = 2.0 * self.random_sample() - 1.0;
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

/// numpy's sum of a contiguous array: pairwise, eight accumulators per block of up to 128.
pub fn sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        return a.iter().fold(0.0, |s, x| s + x);
    }
    if n <= 128 {
        let mut r = [0.0; 8];
        r.copy_from_slice(&a[..8]);
        let mut i = 8;
        while i < n - n % 8 {
            for j in 0..8 {
                r[j] += a[i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for x in &a[i..] {
            res += x;
        }
        return res;
    }
    let mut n2 = n / 2;
    n2 -= n2 % 8;
    sum(&a[..n2]) + sum(&a[n2..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_streams_are_numpys() {
        // np.random.RandomState(0).random_sample(3)
        let mut r = RandomState::new(0);
        let v: Vec<f64> = (0..3).map(|_| r.random_sample()).collect();
        assert_eq!(
            v,
            [0.5488135039273248, 0.7151893663724195, 0.6027633760716439]
        );
        // np.random.RandomState(1).choice(3, p=[0.2, 0.5, 0.3], size=5)
        assert_eq!(
            RandomState::new(1).choice(&[0.2, 0.5, 0.3], 5),
            [1, 2, 0, 1, 0]
        );
        // np.random.seed(1); [np.random.choice(3, p=[.2, .3, .5]) for _ in range(4)]
        let mut r = RandomState::new(1);
        let picks: Vec<usize> = (0..4).map(|_| r.choice(&[0.2, 0.3, 0.5], 1)[0]).collect();
        assert_eq!(picks, [1, 2, 0, 1]);
        // r = np.random.RandomState(3); [r.randint(-5, 7) for _ in range(6)]; a range of one
        // value draws nothing.
        let mut r = RandomState::new(3);
        let v: Vec<i64> = (0..6).map(|_| r.randint(-5, 7)).collect();
        assert_eq!(v, [5, 3, 4, -2, 3, 3]);
        let mut r = RandomState::new(3);
        assert_eq!(
            (r.randint(10, 11), r.random_sample()),
            (10, 0.5507979025745755)
        );
    }

    #[test]
    fn normal_streams_are_numpys() {
        // np.random.RandomState(123).randn(5)
        let want = [
            -1.0856306033005612,
            0.9973454465835858,
            0.28297849805199204,
            -1.506294713918092,
            -0.5786002519685364,
        ];
        assert_eq!(RandomState::new(123).randn(5), want);
        // np.random.RandomState(0).randn(3)
        assert_eq!(
            RandomState::new(0).randn(3),
            [1.764052345967664, 0.4001572083672233, 0.9787379841057392]
        );
    }
}
