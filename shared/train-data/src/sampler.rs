//! `torch.utils.data.DistributedSampler`, index for index.
//!
//! Per epoch: `g = torch.Generator(); g.manual_seed(seed + epoch); idx = torch.randperm(n,
//! generator=g)` (or `range(n)` without shuffle); pad to `total = world × num_samples` by
//! repeating the start of the list (or, with `drop_last`, cut to `total`); rank r takes
//! `idx[r : total : world]`. `num_samples = ceil(n / world)`, or `ceil((n − world) / world)` with
//! `drop_last` and `n % world != 0`.
//!
//! `randperm` is torch's own, bit for bit (`ref_rng::randperm`), so the lists equal torch's;
//! `tests/torch_parity.rs` compares them with torch from the venv.

pub use ref_rng::randperm;

/// The sampler's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DistributedSampler {
    pub len: usize,
    pub world: usize,
    pub rank: usize,
    pub shuffle: bool,
    pub seed: u64,
    pub drop_last: bool,
}

impl DistributedSampler {
    /// Samples per rank per epoch.
    pub fn num_samples(&self) -> usize {
        let (n, w) = (self.len, self.world);
        if self.drop_last && n % w != 0 {
            (n - w).div_ceil(w)
        } else {
            n.div_ceil(w)
        }
    }

    /// This rank's indices for `epoch`.
    pub fn indices(&self, epoch: u64) -> Vec<usize> {
        let mut idx: Vec<usize> = if self.shuffle {
            randperm(self.len, self.seed.wrapping_add(epoch))
        } else {
            (0..self.len).collect()
        };
        let total = self.num_samples() * self.world;
        if !self.drop_last {
            let pad = total - idx.len();
            if pad <= idx.len() {
                idx.extend_from_within(..pad);
            } else {
                // torch: `indices += (indices * ceil(pad / len(indices)))[:pad]`
                let base = idx.clone();
                idx.extend(base.iter().cycle().take(pad));
            }
        } else {
            idx.truncate(total);
        }
        idx.into_iter()
            .skip(self.rank)
            .step_by(self.world)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_and_padding_follow_torch() {
        let s = DistributedSampler {
            len: 10,
            world: 4,
            rank: 0,
            shuffle: false,
            seed: 0,
            drop_last: false,
        };
        assert_eq!(s.num_samples(), 3);
        let all: Vec<Vec<usize>> = (0..4)
            .map(|rank| DistributedSampler { rank, ..s }.indices(0))
            .collect();
        assert_eq!(
            all,
            [vec![0, 4, 8], vec![1, 5, 9], vec![2, 6, 0], vec![3, 7, 1]]
        );
        let d = DistributedSampler {
            drop_last: true,
            ..s
        };
        assert_eq!(d.num_samples(), 2);
        assert_eq!(DistributedSampler { rank: 3, ..d }.indices(0), [3, 7]);
        // More ranks than samples: the list repeats.
        let tiny = DistributedSampler {
            len: 2,
            world: 5,
            rank: 4,
            shuffle: false,
            seed: 0,
            drop_last: false,
        };
        assert_eq!(tiny.indices(0), [0]);
    }

    #[test]
    fn shuffles_change_with_the_epoch_and_are_permutations() {
        let s = DistributedSampler {
            len: 1000,
            world: 1,
            rank: 0,
            shuffle: true,
            seed: 7,
            drop_last: false,
        };
        let (a, b) = (s.indices(0), s.indices(1));
        assert_ne!(a, b);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
    }
}
