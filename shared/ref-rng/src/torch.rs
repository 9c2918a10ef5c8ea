//! PyTorch's CPU generator, as far as `torch.randperm` uses it.

use rand_mt::Mt;

/// `torch.randperm(n, generator=torch.Generator().manual_seed(seed))` on the CPU: the CPU
/// generator seeds MT19937 with the seed's low 32 bits (`init_genrand`), and ATen's
/// `randperm_cpu` makes a Fisher–Yates pass, `z = random() % (n − i); swap(r[i], r[z + i])`
/// (its kernel for n below 2²⁴-ish, which is what it takes for every list we shuffle). The
/// train crate's parity test compares 100,000 indices with torch's.
pub fn randperm(n: usize, seed: u64) -> Vec<usize> {
    let mut mt = Mt::new(seed as u32);
    let mut r: Vec<usize> = (0..n).collect();
    if n < 2 {
        return r;
    }
    for i in 0..n - 1 {
        let z = (mt.next_u32() as usize) % (n - i);
        r.swap(i, z + i);
    }
    r
}

#[cfg(test)]
mod tests {
    #[test]
    fn randperm_is_a_permutation_that_changes_with_the_seed() {
        let a = super::randperm(50, 1);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_ne!(a, super::randperm(50, 2));
        assert_eq!(super::randperm(1, 7), [0]);
    }
}
