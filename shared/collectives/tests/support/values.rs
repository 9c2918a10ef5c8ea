//! Test values shared by collectives' unit tests (src/tests.rs) and its integration tests.

use tch::{Kind, Tensor};

/// Rank-dependent pseudo-random values of every sign and magnitude (an LCG: no global seed
/// shared by the rank threads), as `kind`.
pub fn noise(rank: usize, n: usize, kind: Kind) -> Tensor {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (rank as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    let v: Vec<f64> = (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            (u - 0.5) * 2f64.powi(((x >> 3) % 20) as i32 - 10)
        })
        .collect();
    Tensor::from_slice(&v).to_kind(kind)
}

/// A tensor's bytes, as stored.
pub fn bytes_of(t: &Tensor) -> Vec<u8> {
    let mut v = vec![0u8; t.numel() * t.kind().elt_size_in_bytes()];
    t.contiguous().copy_data_u8(&mut v, t.numel());
    v
}
