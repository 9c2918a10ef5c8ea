//! SyncBatchNorm (`torch.nn.SyncBatchNorm`): in training, BatchNorm's statistics are those of
//! the global batch — every rank's share together — so W ranks with B/W images each normalise
//! exactly as one process with B images does. One collective per layer in forward (every rank's
//! per-channel mean, centred sum of squares and count, all-gathered) and one in backward (their
//! gradients: rank r's inputs move every rank's mean and variance), as PyTorch's does; here the
//! backward's all-reduce comes from autograd itself ([`gpu_runtime::shim::all_reduce_sum_autograd`])
//! instead of a hand-written backward.
//!
//! The collective runs through a [`Lent`] communicator: the trainer lends its communicator for
//! the forward and backward of a step, and the reducer held by the graph nodes reaches it only
//! then (backward may run on the autograd engine's device thread; the lock makes the loan
//! exclusive).

use std::sync::{Arc, Mutex};

use collectives::{Communicator, ReduceOp};
use gpu_runtime::shim::SumReducer;
use tch::{Kind, Tensor};

use crate::{Error, Result};

/// The ranks a SyncBatchNorm spans: the all-reduce and this process's place among them.
#[derive(Debug, Clone)]
pub struct Group {
    pub reducer: Arc<dyn SumReducer>,
    pub rank: usize,
    pub world: usize,
}

/// BatchNorm over the global batch in training mode: normalises `x` ([N, C, H, W]) with the
/// batch mean and biased variance of all ranks together and updates the running statistics
/// with them (unbiased variance over the global count), as `nn.BatchNorm2d` over the whole
/// batch would. Statistics are computed in fp32 whatever `x`'s dtype (autocast); the output
/// has `x`'s dtype and memory format.
///
/// Like PyTorch's, each rank contributes its own mean, centred sum of squares and count (an
/// all-gather, done as a SUM all-reduce of per-rank slots so that autograd differentiates it),
/// combined as Chan et al.'s parallel variance: every term stays centred, so neither the
/// statistics nor their gradients lose digits when |mean| ≫ std (E[x²] − E[x]² would).
///
/// Sums are fp32, as cuDNN's are. libtorch's CPU kernel accumulates in double, so on channels
/// that are nearly constant (std ≪ |mean|, where x − mean is sensitive to the mean's last bit)
/// the two differ by more than rounding: ~1e-4 relative in some gradients of a ResNet-18 on
/// the synthetic set, where clamped pixels make such channels. Well-spread channels agree to
/// ~1e-7 (every layer of a ResNet-18 on the digits set: 2e-7). Whole networks differ more
/// where such a difference flips a ReLU or max-pool choice: every weight upstream of it then
/// gets a visibly different gradient (1e-3 relative, measured), so the tests compare one step
/// and the weights as a whole (shared/train/tests/train.rs).
///
/// Kept in one piece: torch's SyncBatchNorm forward in its order, to read beside it.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    momentum: f64,
    eps: f64,
    group: &Group,
) -> Result<Tensor> {
    let c = x.size()[1];
    let channel = [1, c, 1, 1];
    let dims: &[i64] = &[0, 2, 3];
    let xf = x.to_kind(Kind::Float);
    let local_mean = xf.mean_dim(dims, false, Kind::Float);
    let centred = &xf - local_mean.view(channel);
    let width = 2 * c + 1;
    let opts = (Kind::Float, x.device());
    let mine = Tensor::cat(
        &[
            local_mean.shallow_clone(),
            centred.square().sum_dim_intlist(dims, false, Kind::Float),
            Tensor::full([1], (x.numel() as i64 / c) as f64, opts),
        ],
        0,
    );
    let (before, after) = (
        group.rank as i64 * width,
        (group.world - group.rank - 1) as i64 * width,
    );
    let slots = Tensor::cat(
        &[
            Tensor::zeros([before], opts),
            mine,
            Tensor::zeros([after], opts),
        ],
        0,
    );
    // The reducer's own message (a lost rank, a timeout) comes back through libtorch.
    let all = gpu_runtime::shim::all_reduce_sum_autograd(&slots, group.reducer.clone())
        .map_err(Error::Cuda)?
        .view([group.world as i64, width]);
    let (means, sq, counts) = (
        all.narrow(1, 0, c),
        all.narrow(1, c, c),
        all.narrow(1, 2 * c, 1),
    );
    let n = counts.sum_dim_intlist(0, false, Kind::Float);
    let mean = (&means * &counts).sum_dim_intlist(0, false, Kind::Float) / &n;
    let var = (sq + &counts * (&means - mean.unsqueeze(0)).square()).sum_dim_intlist(
        0,
        false,
        Kind::Float,
    ) / &n;
    let scale = weight * (&var + eps).rsqrt();
    tch::no_grad(|| {
        // nn.BatchNorm2d's update: unbiased variance, from the same global batch. On the
        // device (n is a tensor): nothing here waits for the host, so a step can be captured.
        let unbiased = &var * &n / (&n - 1.0).clamp_min(1.0);
        let _ = running_mean
            .shallow_clone()
            .g_mul_scalar_(1.0 - momentum)
            .g_add_(&(mean.detach() * momentum));
        let _ = running_var
            .shallow_clone()
            .g_mul_scalar_(1.0 - momentum)
            .g_add_(&(unbiased.detach() * momentum));
    });
    // x − mean = (x − local mean) − (mean − local mean): centred before scaling.
    let y =
        (centred - (mean - local_mean).view(channel)) * scale.view(channel) + bias.view(channel);
    Ok(y.to_kind(x.kind()))
}

/// A communicator lent to the SyncBatchNorm reducers for a scope ([`Lent::lend`]); outside it
/// their all-reduce fails with an error instead of reaching a communicator in use elsewhere.
#[derive(Debug, Default)]
pub struct Lent {
    comm: Mutex<Option<CommPtr>>,
}

#[derive(Debug, Clone, Copy)]
struct CommPtr(*mut Communicator);

// SAFETY: the pointer is only dereferenced under the mutex while `lend` holds the exclusive
// borrow it came from; Communicator itself moves between threads (one per rank in the tests).
unsafe impl Send for CommPtr {}

impl Lent {
    pub fn new() -> Arc<Lent> {
        Arc::new(Lent::default())
    }

    /// Runs `f` with `comm` reachable by the reducers (forward and backward of a step).
    pub fn lend<R>(&self, comm: &mut Communicator, f: impl FnOnce() -> R) -> R {
        struct Back<'a>(&'a Lent);
        impl Drop for Back<'_> {
            fn drop(&mut self) {
                *self.0.comm.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
        }
        *self.comm.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(CommPtr(comm as *mut Communicator));
        let _back = Back(self);
        f()
    }
}

/// Why a SyncBatchNorm all-reduce failed (it reaches autograd as the error's text and causes).
#[derive(Debug, thiserror::Error)]
pub enum SyncBnError {
    /// Called outside [`Lent::lend`]: no communicator to reduce with.
    #[error("SyncBatchNorm's all-reduce ran outside a training step (no communicator lent)")]
    NotLent,
    /// The communicator's all-reduce failed.
    #[error("SyncBatchNorm all-reduce")]
    AllReduce(#[source] collectives::Error),
}

impl SumReducer for Lent {
    fn sum_(&self, t: &Tensor) -> std::result::Result<(), gpu_runtime::shim::ReduceError> {
        let held = self.comm.lock().unwrap_or_else(|e| e.into_inner());
        let CommPtr(p) = held.ok_or(SyncBnError::NotLent)?;
        // SAFETY: set by `lend` from a live `&mut Communicator` that nothing else uses until the
        // loan ends (which clears it under this lock, held here).
        let comm = unsafe { &mut *p };
        let mut t = t.shallow_clone();
        comm.all_reduce(&mut t, ReduceOp::Sum)
            .map_err(|e| SyncBnError::AllReduce(e).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    /// One rank: the all-reduce is the identity.
    #[derive(Debug)]
    struct Alone;
    impl SumReducer for Alone {
        fn sum_(&self, _: &Tensor) -> std::result::Result<(), gpu_runtime::shim::ReduceError> {
            Ok(())
        }
    }

    #[test]
    fn one_rank_equals_native_batch_norm_values_gradients_and_running_stats() {
        tch::manual_seed(5);
        let opts = (Kind::Float, Device::Cpu);
        // Mean far from 0 and unequal per channel: the shifted sums must still be accurate.
        let x0 = Tensor::randn([6, 3, 5, 4], opts) * 2.0
            + Tensor::from_slice(&[40.0f32, -3.0, 0.0]).view([1, 3, 1, 1]);
        let w0 = Tensor::from_slice(&[1.5f32, -0.5, 2.0]);
        let b0 = Tensor::from_slice(&[0.1f32, 0.2, -0.3]);
        let upstream = Tensor::randn([6, 3, 5, 4], opts);
        let run = |sync: bool| {
            let x = x0.copy().set_requires_grad(true);
            let w = w0.copy().set_requires_grad(true);
            let b = b0.copy().set_requires_grad(true);
            let (rm, rv) = (
                Tensor::from_slice(&[1.0f32, 0.0, -1.0]),
                Tensor::from_slice(&[1.0f32, 2.0, 0.5]),
            );
            let mut ys = Vec::new();
            for _ in 0..2 {
                let y = if sync {
                    let group = Group {
                        reducer: Arc::new(Alone),
                        rank: 0,
                        world: 1,
                    };
                    batch_norm(&x, &w, &b, &rm, &rv, 0.1, 1e-5, &group).unwrap()
                } else {
                    x.batch_norm(
                        Some(&w),
                        Some(&b),
                        Some(&rm),
                        Some(&rv),
                        true,
                        0.1,
                        1e-5,
                        false,
                    )
                };
                ys.push(y);
            }
            (&ys[1] * &upstream).sum(Kind::Float).backward();
            [ys[1].detach(), x.grad(), w.grad(), b.grad(), rm, rv]
        };
        let (ours, native) = (run(true), run(false));
        for (i, (a, b)) in ours.iter().zip(&native).enumerate() {
            let scale = b.abs().max().double_value(&[]).max(1.0);
            let d = (a - b).abs().max().double_value(&[]) / scale;
            assert!(d < 1e-5, "output {i}: relative difference {d}");
        }
    }

    #[test]
    fn outside_a_loan_the_reducer_refuses() {
        let lent = Lent::new();
        let e = lent
            .sum_(&Tensor::ones([2], (Kind::Float, Device::Cpu)))
            .unwrap_err();
        // A kind the caller can match, in the same words.
        let e = e.downcast_ref::<SyncBnError>().expect("a SyncBnError");
        assert!(matches!(e, SyncBnError::NotLent), "{e:?}");
        assert!(e.to_string().contains("outside a training step"), "{e}");
    }

    #[test]
    fn a_reducer_that_fails_is_a_libtorch_error_holding_its_words() {
        let opts = (Kind::Float, Device::Cpu);
        let x = Tensor::ones([2, 3, 2, 2], opts);
        let (w, b) = (Tensor::ones([3], opts), Tensor::zeros([3], opts));
        let (rm, rv) = (Tensor::zeros([3], opts), Tensor::ones([3], opts));
        let group = Group {
            reducer: Lent::new(),
            rank: 0,
            world: 1,
        };
        let e = batch_norm(&x, &w, &b, &rm, &rv, 0.1, 1e-5, &group).unwrap_err();
        assert!(matches!(e, Error::Cuda(_)), "{e:?}");
        let source = std::error::Error::source(&e).expect("a source");
        assert!(source.is::<gpu_runtime::shim::Error>(), "{source:?}");
        assert!(e.to_string().contains("outside a training step"), "{e}");
        assert!(matches!(e.torch(), Some(error_class::Torch::Other(_))));
    }
}
