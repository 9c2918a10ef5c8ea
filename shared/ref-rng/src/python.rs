//! CPython's `random.Random`.

use rand_mt::Mt;

/// `random.Random(seed)` for an integer seed: MT19937 seeded by `init_by_array` with the
/// seed's 32-bit words, least significant first (0 → `[0]`).
#[derive(Debug, Clone)]
pub struct PyRandom(Mt);

impl PyRandom {
    pub fn new(seed: u64) -> Self {
        let mut key = vec![seed as u32];
        if seed >> 32 != 0 {
            key.push((seed >> 32) as u32);
        }
        PyRandom(Mt::new_with_key(key))
    }

    /// `random()`: a double in [0, 1) from two 32-bit draws.
    pub fn random(&mut self) -> f64 {
        crate::double(&mut self.0)
    }

    /// `getrandbits(k)` for 1 ≤ k ≤ 32.
    pub fn getrandbits(&mut self, k: u32) -> u32 {
        assert!((1..=32).contains(&k), "getrandbits of 1 to 32 bits");
        self.0.next_u32() >> (32 - k)
    }

    /// `_randbelow(n)`: `getrandbits(n.bit_length())` until one is below `n`, for
    /// 0 < n < 2³².
    pub fn below(&mut self, n: usize) -> usize {
        let n = u32::try_from(n).expect("a draw among fewer than 2^32");
        assert!(n > 0, "a draw from an empty range");
        let k = 32 - n.leading_zeros();
        loop {
            let r = self.getrandbits(k);
            if r < n {
                return r as usize;
            }
        }
    }

    /// `choice(seq)`.
    pub fn choice<'a, T>(&mut self, seq: &'a [T]) -> &'a T {
        &seq[self.below(seq.len())]
    }

    /// `shuffle(x)`.
    pub fn shuffle<T>(&mut self, x: &mut [T]) {
        for i in (1..x.len()).rev() {
            let j = self.below(i + 1);
            x.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_cpythons() {
        // random.seed(7); random.random(), random.choice([1, 2, 3, 4, 5]),
        // random.choice([-1, 1]), random.getrandbits(32); random.seed(0); random.random()
        let mut r = PyRandom::new(7);
        assert_eq!(r.random(), 0.32383276483316237);
        assert_eq!(*r.choice(&[1, 2, 3, 4, 5]), 2);
        assert_eq!(*r.choice(&[-1, 1]), 1);
        assert_eq!(r.getrandbits(32), 2795742288);
        assert_eq!(PyRandom::new(0).random(), 0.8444218515250481);
    }

    #[test]
    fn shuffles_are_cpythons() {
        // CPython 3.11: r = random.Random(); r.seed(s); x = list(range(n)); r.shuffle(x)
        let cases: [(u64, usize, &[usize]); 4] = [
            (1234, 10, &[2, 8, 3, 5, 6, 4, 9, 0, 1, 7]),
            (0, 7, &[4, 2, 1, 0, 5, 3, 6]),
            (
                (1 << 40) + 5,
                20,
                &[
                    9, 7, 17, 13, 4, 18, 5, 6, 10, 11, 3, 14, 12, 15, 2, 1, 0, 8, 19, 16,
                ],
            ),
            (1234, 1, &[0]),
        ];
        for (seed, n, want) in cases {
            let mut x: Vec<usize> = (0..n).collect();
            PyRandom::new(seed).shuffle(&mut x);
            assert_eq!(x, want, "seed {seed}, n {n}");
        }
    }
}
