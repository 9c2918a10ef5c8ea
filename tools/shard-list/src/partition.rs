//! The sharding rules, independent of I/O.

use ref_rng::PyRandom;

/// A projection script's `subdir_list[i::n]`: unit `j` goes to shard `j % n`, in order. Only the
/// first `min(n, len)` shards are returned (the others are empty), so memory follows `len`
/// however large `n` is.
pub fn round_robin(len: usize, n: usize) -> Vec<Vec<usize>> {
    let n = n.min(len);
    if n == 0 {
        return Vec::new();
    }
    let mut shards = vec![Vec::with_capacity(len / n + 1); n];
    for j in 0..len {
        shards[j % n].push(j);
    }
    shards
}

/// Greedy longest-processing-time balance: units by decreasing weight (ties: input order) each go
/// to the lightest shard so far (ties: lowest index); each shard then lists its units in input
/// order. The heaviest shard is at most 4/3 of the optimum. Only the first `min(n, len)` shards
/// are returned: the greedy rule never reaches a shard past the `len`-th (a unit goes to an
/// empty shard only when it is the lowest-numbered lightest one), so memory and time follow
/// `len` however large `n` is.
pub fn balance(weights: &[u64], n: usize) -> Vec<Vec<usize>> {
    use std::cmp::Reverse;
    let n = n.min(weights.len());
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| weights[b].cmp(&weights[a]).then(a.cmp(&b)));
    // The lightest shard, lowest index first among equals: the least (total, index).
    let mut lightest: std::collections::BinaryHeap<Reverse<(u64, usize)>> =
        (0..n).map(|s| Reverse((0, s))).collect();
    let mut shards = vec![Vec::new(); n];
    for j in order {
        let Reverse((total, s)) = lightest.pop().expect("n > 0 when there are units");
        shards[s].push(j);
        lightest.push(Reverse((total.saturating_add(weights[j]), s)));
    }
    for s in &mut shards {
        s.sort_unstable();
    }
    shards
}

/// PyTorch's distributed tutorial's `DataPartitioner(data, sizes, seed)`: indices shuffled by Python's
/// `random.Random(seed).shuffle`, then consecutive slices of `int(frac * len)`. What rounding down
/// leaves over is dropped, as there, unless `whole` and the fractions sum to 1: then the last part
/// takes it.
pub fn partition(len: usize, sizes: &[f64], seed: u64, whole: bool) -> Vec<Vec<usize>> {
    let mut idx: Vec<usize> = (0..len).collect();
    PyRandom::new(seed).shuffle(&mut idx);
    let sum: f64 = sizes.iter().sum();
    let to_last = whole && (sum - 1.0).abs() <= 1e-9;
    let mut rest = &idx[..];
    let mut parts: Vec<Vec<usize>> = sizes
        .iter()
        .map(|&frac| {
            let part_len = ((frac * len as f64) as usize).min(rest.len());
            let (part, tail) = rest.split_at(part_len);
            rest = tail;
            part.to_vec()
        })
        .collect();
    if let Some(last) = parts.last_mut().filter(|_| to_last) {
        last.extend_from_slice(rest);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_is_python_slicing() {
        // paths[i::3] for 8 paths
        assert_eq!(
            round_robin(8, 3),
            vec![vec![0, 3, 6], vec![1, 4, 7], vec![2, 5]]
        );
        assert_eq!(
            round_robin(2, 4),
            vec![vec![0], vec![1]],
            "empty shards left out"
        );
        assert_eq!(round_robin(2, usize::MAX), vec![vec![0], vec![1]]);
        assert!(round_robin(0, 3).is_empty());
    }

    #[test]
    fn partition_is_data_partitioner() {
        // DataPartitioner(range(10), [0.7, 0.2, 0.1], 1234).partitions
        let p = partition(10, &[0.7, 0.2, 0.1], 1234, false);
        assert_eq!(p, vec![vec![2, 8, 3, 5, 6, 4, 9], vec![0, 1], vec![7]]);
        // int(0.5 * 3) == 1: the remainder is dropped, as in the seed.
        let p = partition(3, &[0.5, 0.5], 1, false);
        assert_eq!(p.iter().map(Vec::len).collect::<Vec<_>>(), vec![1, 1]);
        // Whole: the last part takes it; fractions summing to less still leave the rest out.
        let lens = |p: Vec<Vec<usize>>| p.iter().map(Vec::len).collect::<Vec<_>>();
        assert_eq!(lens(partition(3, &[0.5, 0.5], 1, true)), [1, 2]);
        assert_eq!(lens(partition(30, &[0.75, 0.25], 1, true)), [22, 8]);
        assert_eq!(lens(partition(30, &[0.75, 0.25], 1, false)), [22, 7]);
        assert_eq!(lens(partition(30, &[0.5, 0.25], 1, true)), [15, 7]);
        // The same order either way: only the leftover's place differs.
        let (a, b) = (
            partition(30, &[0.75, 0.25], 9, true),
            partition(30, &[0.75, 0.25], 9, false),
        );
        assert_eq!(a[0], b[0]);
        assert_eq!(a[1][..7], b[1][..]);
    }

    #[test]
    fn balance_spreads_bytes() {
        let shards = balance(&[10, 1, 1, 1, 9, 2], 2);
        let totals: Vec<u64> = shards
            .iter()
            .map(|s| s.iter().map(|&j| [10, 1, 1, 1, 9, 2][j]).sum())
            .collect();
        assert_eq!(totals, vec![12, 12]);
        assert!(shards.iter().all(|s| s.windows(2).all(|w| w[0] < w[1])));
        // More shards than units: the zero-weight units share the first empty shard.
        assert_eq!(
            balance(&[0, 5, 0, 3], usize::MAX),
            vec![vec![1], vec![3], vec![0, 2], vec![]]
        );
    }
}
