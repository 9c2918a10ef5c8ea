//! What `torch.nn.parallel.DistributedDataParallel` does around each step, over a
//! [`Communicator`]: parameters and buffers broadcast from rank 0 at the start (and buffers
//! before every forward, `broadcast_buffers=True`), gradients averaged as the SUM of g ÷ world
//! in buckets of ~25 MiB (the first 1 MiB) filled in reverse parameter order; the buckets are
//! ranges of the flat gradient ([`crate::flat`]).

use collectives::{Communicator, ReduceOp};
use tch::{Kind, Tensor};

use crate::Result;
use crate::flat::FlatParams;

/// DDP's defaults.
pub const BUCKET_BYTES: usize = 25 << 20;
pub const FIRST_BUCKET_BYTES: usize = 1 << 20;

/// Copies rank 0's values into every rank's tensors (in the given order, which every rank must
/// share: sort by name).
pub fn broadcast(comm: &mut Communicator, tensors: &[Tensor]) -> Result<()> {
    if comm.world_size() == 1 {
        return Ok(());
    }
    let _g = tch::no_grad_guard();
    for t in tensors {
        let mut t = t.shallow_clone();
        comm.broadcast(&mut t, 0)?;
    }
    Ok(())
}

/// Gradient buckets: index lists into the parameter list.
#[derive(Debug)]
pub struct Buckets {
    buckets: Vec<Vec<usize>>,
}

impl Buckets {
    /// Groups parameters in reverse order (the order backward produces their gradients) into
    /// buckets of at most `cap` bytes (the first of `first_cap`), one dtype per bucket.
    pub fn new(params: &[Tensor], first_cap: usize, cap: usize) -> Buckets {
        let mut buckets: Vec<Vec<usize>> = Vec::new();
        let mut cur: Vec<usize> = Vec::new();
        let mut bytes = 0;
        let mut kind: Option<Kind> = None;
        for i in (0..params.len()).rev() {
            let p = &params[i];
            let b = p.numel() * p.kind().elt_size_in_bytes();
            let limit = if buckets.is_empty() { first_cap } else { cap };
            if !cur.is_empty() && (bytes + b > limit || kind != Some(p.kind())) {
                buckets.push(std::mem::take(&mut cur));
                bytes = 0;
            }
            cur.push(i);
            bytes += b;
            kind = Some(p.kind());
        }
        if !cur.is_empty() {
            buckets.push(cur);
        }
        Buckets { buckets }
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Each bucket's range `(offset, len)` of the flat gradient (computed once: the layout is
    /// fixed for the run).
    pub fn ranges(&self, flat: &FlatParams) -> Result<Vec<(i64, i64)>> {
        self.buckets
            .iter()
            .map(|b| {
                flat.range_of(b).ok_or_else(|| {
                    crate::Error::Usage("gradient bucket is not one range of the flat gradient (flatten in reverse parameter order)".into())
                })
            })
            .collect()
    }
}

/// Averages the flat gradient over ranks, bucket by bucket, in place: each bucket is one range
/// of `grad` ([`Buckets::ranges`]; DDP's `gradient_as_bucket_view`: no copies in or out).
pub fn all_reduce_flat(
    comm: &mut Communicator,
    grad: &Tensor,
    ranges: &[(i64, i64)],
) -> Result<()> {
    let world = comm.world_size();
    if world == 1 {
        return Ok(());
    }
    let _g = tch::no_grad_guard();
    for &(start, len) in ranges {
        let mut part = grad.narrow(0, start, len);
        // DDP: gradient ÷ world before the SUM all-reduce.
        let _ = part.g_div_scalar_(world as f64);
        comm.all_reduce(&mut part, ReduceOp::Sum)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn buckets_fill_in_reverse_order_with_a_small_first_bucket() {
        let p = |n: i64| Tensor::zeros([n], (Kind::Float, Device::Cpu));
        // 4-byte floats: 300k elements = 1.2 MB.
        let params = vec![p(10), p(300_000), p(100), p(200_000), p(50)];
        let b = Buckets::new(&params, 1 << 20, 2 << 20);
        assert_eq!(b.buckets, vec![vec![4, 3, 2], vec![1, 0]]);
    }
}
