//! What Ray's schedulers and Optuna's samplers take from numpy, bit for bit: the legacy
//! `RandomState` (MT19937 seeded with `init_genrand`: `random_sample`, `uniform`, `randint`,
//! `choice` with probabilities) and the pairwise `sum` its reductions use (`np.sum`, `np.mean`);
//! and Python's own `random` module ([`PyRandom`]), which Ray's population-based training draws
//! from.

use rand_mt::Mt;

#[derive(Debug, Clone)]
pub(crate) struct RandomState(Mt);

impl RandomState {
    /// `RandomState(seed)`, as `np.random.seed(seed)` leaves the global one.
    pub(crate) fn new(seed: u32) -> Self {
        RandomState(Mt::new(seed))
    }

    /// `random_sample()`: 53 bits from two 32-bit draws.
    pub(crate) fn random_sample(&mut self) -> f64 {
        let a = (self.0.next_u32() >> 5) as f64;
        let b = (self.0.next_u32() >> 6) as f64;
        (a * 67108864.0 + b) / 9007199254740992.0
    }

    /// `uniform(low, high)`.
    pub(crate) fn uniform(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.random_sample()
    }

    /// `randint(low, high)` (high excluded) of the legacy generator: the range masked to the
    /// next power of two, 32-bit draws rejected until one falls in it (64-bit draws for ranges
    /// over 2³²); an empty range (high = low + 1) draws nothing.
    pub(crate) fn randint(&mut self, low: i64, high: i64) -> i64 {
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
        let mut v = draw(&mut self.0);
        while v > range {
            v = draw(&mut self.0);
        }
        low.wrapping_add(v as i64)
    }

    /// `choice(len(p), p=p, size=n)`: the cumulative sum, normalised by its last element,
    /// searched on the right (`searchsorted(side='right')`) for each draw.
    pub(crate) fn choice(&mut self, p: &[f64], n: usize) -> Vec<usize> {
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
}

/// Python's `random.Random` (MT19937 seeded with `init_by_array` of the seed's 32-bit words,
/// as `random.seed(n)` for 0 ≤ n < 2³² seeds it).
#[derive(Debug, Clone)]
pub(crate) struct PyRandom(Mt);

impl PyRandom {
    pub(crate) fn new(seed: u32) -> Self {
        PyRandom(Mt::new_with_key([seed]))
    }

    /// `random()`: 53 bits from two 32-bit draws.
    pub(crate) fn random(&mut self) -> f64 {
        let a = (self.0.next_u32() >> 5) as f64;
        let b = (self.0.next_u32() >> 6) as f64;
        (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)
    }

    /// `_randbelow(n)` (`getrandbits(n.bit_length())` until below n), for 0 < n < 2³².
    pub(crate) fn below(&mut self, n: usize) -> usize {
        let n = u32::try_from(n).expect("a choice among fewer than 2^32");
        assert!(n > 0, "a choice from an empty sequence");
        let k = 32 - n.leading_zeros();
        loop {
            let r = self.0.next_u32() >> (32 - k);
            if r < n {
                return r as usize;
            }
        }
    }

    /// `choice(seq)`.
    pub(crate) fn choice<'a, T>(&mut self, seq: &'a [T]) -> &'a T {
        &seq[self.below(seq.len())]
    }
}

/// numpy's sum of a contiguous array: pairwise, eight accumulators per block of up to 128.
pub(crate) fn sum(a: &[f64]) -> f64 {
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
    fn numpy_streams() {
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
        // r = np.random.RandomState(3); [r.randint(-5, 7) for _ in range(6)]; an empty range
        // draws nothing.
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
    fn python_random_streams() {
        // random.seed(7); random.random(), random.choice([1, 2, 3, 4, 5]),
        // random.choice([-1, 1]), random.getrandbits(32); random.seed(0); random.random()
        let mut r = PyRandom::new(7);
        assert_eq!(r.random(), 0.32383276483316237);
        assert_eq!(*r.choice(&[1, 2, 3, 4, 5]), 2);
        assert_eq!(*r.choice(&[-1, 1]), 1);
        assert_eq!(r.0.next_u32(), 2795742288);
        assert_eq!(PyRandom::new(0).random(), 0.8444218515250481);
    }
}
