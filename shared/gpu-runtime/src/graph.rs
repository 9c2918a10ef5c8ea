//! A step run as a CUDA graph: a few eager warm-up steps on a side stream (cuDNN picks its
//! algorithms, NVRTC kernels compile, optimiser state and the autograd engine's structures
//! exist: torch.cuda.graph's recipe), then the step captured once and replayed for every later
//! one. Used by the trainer's step and the projector's step.
//!
//! The failure policy, the same for every caller: **a capture that fails (an error, or a panic
//! inside it: out of memory for the graph's pool, say) is not fatal.** A capture runs nothing,
//! so the state is as the warm-up left it; the runner logs a warning (`log::warn!`, which the
//! tools print unless `-q`), releases the failed capture's cached memory, and runs that step and
//! every later one eagerly. Errors while warming up or replaying are the caller's errors.
//!
//! The caller owns the step's *static inputs*: tensors allocated before the capture that it
//! refills in place before every step ([`Graphed::next`] says when they are needed); what the
//! step returns when captured (a device tensor, say) is returned again, as a shallow copy, by
//! every replay.

use crate::shim;

/// What a step's work is queued for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Eagerly, on a side stream (the warm-up steps).
    Warmup,
    /// Into the graph: nothing runs; the static inputs must be set.
    Capture,
    /// Eagerly, on the current stream (after a failed capture).
    Eager,
}

/// What [`Graphed::step`] will do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Warmup,
    /// Capture, then replay at once: the static inputs must exist and be set.
    Capture,
    /// Replay: the static inputs must be set.
    Replay,
    Eager,
}

/// How a step ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    /// Eagerly (warm-up or after a failed capture): the caller's closure did the work.
    Eagerly,
    /// The graph was launched (right after its capture, or a replay).
    Replayed,
}

/// What a captured step returns, given back by each replay.
pub trait Output {
    fn again(&self) -> Self;
}

impl Output for () {
    fn again(&self) {}
}

impl Output for tch::Tensor {
    fn again(&self) -> Self {
        self.shallow_clone()
    }
}

/// Why a capture failed (the runner then warns and runs eagerly).
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// libtorch refused (an operation not permitted while capturing, its pool out of memory).
    #[error("{0}")]
    Failed(#[source] shim::Error),
    /// The step panicked while it was being captured (tch raises libtorch's errors as panics):
    /// the panic's text.
    #[error("{0}")]
    Panicked(String),
}

impl From<shim::Error> for CaptureError {
    fn from(e: shim::Error) -> Self {
        CaptureError::Failed(e)
    }
}

impl CaptureError {
    /// The libtorch failure this is, typed (out of memory, or other).
    pub fn torch(&self) -> error_class::Torch {
        match self {
            CaptureError::Failed(e) => e.torch(),
            CaptureError::Panicked(m) => error_class::Torch::from_message(m),
        }
    }
}

/// The CUDA calls the runner makes ([`Cuda`]); tests drive the policy with a fake.
pub trait Backend {
    type Graph;
    /// Runs `f` on a side stream, waiting for it before and after.
    fn side_stream<T>(&mut self, f: impl FnOnce() -> T) -> shim::Result<T>;
    /// Captures what `f` queues (nothing runs). A panic inside `f` is a failed capture too.
    fn capture<T>(&mut self, f: impl FnOnce() -> T) -> Result<(Self::Graph, T), CaptureError>;
    fn replay(&mut self, graph: &Self::Graph) -> shim::Result<()>;
    /// Gives the caching allocator's free blocks back (a failed capture's, a dropped graph's).
    fn release(&mut self) -> shim::Result<()>;
}

/// The real one: libtorch's `at::cuda::CUDAGraph` on one device.
#[derive(Debug, Clone, Copy)]
pub struct Cuda {
    pub device: usize,
}

impl Backend for Cuda {
    type Graph = shim::CudaGraph;

    fn side_stream<T>(&mut self, f: impl FnOnce() -> T) -> shim::Result<T> {
        shim::on_side_stream(self.device, f)
    }

    fn capture<T>(&mut self, f: impl FnOnce() -> T) -> Result<(Self::Graph, T), CaptureError> {
        let mut graph = shim::CudaGraph::new();
        // No autocast cast may be cached across the capture's end (make_graphed_callables' rule).
        shim::set_autocast_cache_enabled(false);
        let captured = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            graph.capture(self.device, f)
        }));
        shim::set_autocast_cache_enabled(true);
        match captured {
            Ok(Ok(out)) => Ok((graph, out)),
            Ok(Err(e)) => Err(CaptureError::Failed(e)),
            Err(panic) => Err(CaptureError::Panicked(error_class::panic_text(&*panic))),
        }
    }

    fn replay(&mut self, graph: &Self::Graph) -> shim::Result<()> {
        graph.replay()
    }

    fn release(&mut self) -> shim::Result<()> {
        shim::empty_cache()
    }
}

enum State<G, T> {
    Warming(usize),
    Captured(G, T),
    Eager,
}

/// A step that is warmed up, captured and replayed (see the module doc for the policy).
pub struct Graphed<B: Backend, T> {
    backend: B,
    warmup: usize,
    /// What the step is, for the warning ("the training step").
    what: &'static str,
    state: State<B::Graph, T>,
}

impl<B: Backend, T: Output> std::fmt::Debug for Graphed<B, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graphed")
            .field("what", &self.what)
            .field("next", &self.next())
            .finish()
    }
}

impl<B: Backend, T: Output> Graphed<B, T> {
    /// `warmup` eager steps, then the capture.
    pub fn new(backend: B, warmup: usize, what: &'static str) -> Self {
        Graphed {
            backend,
            warmup,
            what,
            state: State::Warming(0),
        }
    }

    pub fn next(&self) -> Next {
        match &self.state {
            State::Warming(done) if *done < self.warmup => Next::Warmup,
            State::Warming(_) => Next::Capture,
            State::Captured(..) => Next::Replay,
            State::Eager => Next::Eager,
        }
    }

    /// One step: `run(phase)` queues the step's work for `phase` (see [`Next`] for what the
    /// static inputs must be first). Returns the step's output and how it ran.
    pub fn step<E: From<shim::Error> + std::fmt::Display>(
        &mut self,
        mut run: impl FnMut(Phase) -> Result<T, E>,
    ) -> Result<(T, Ran), E> {
        match &mut self.state {
            State::Captured(graph, out) => {
                self.backend.replay(graph)?;
                Ok((out.again(), Ran::Replayed))
            }
            State::Eager => Ok((run(Phase::Eager)?, Ran::Eagerly)),
            State::Warming(done) if *done < self.warmup => {
                let out = self.backend.side_stream(|| run(Phase::Warmup))??;
                *done += 1;
                Ok((out, Ran::Eagerly))
            }
            State::Warming(_) => match self.backend.capture(|| run(Phase::Capture)) {
                Ok((graph, Ok(out))) => {
                    // The capture ran nothing: this step is the first replay.
                    self.backend.replay(&graph)?;
                    let again = out.again();
                    self.state = State::Captured(graph, out);
                    Ok((again, Ran::Replayed))
                }
                Ok((graph, Err(e))) => {
                    drop(graph);
                    self.fall_back(&e.to_string())?;
                    Ok((run(Phase::Eager)?, Ran::Eagerly))
                }
                Err(why) => {
                    self.fall_back(&why.to_string())?;
                    Ok((run(Phase::Eager)?, Ran::Eagerly))
                }
            },
        }
    }

    /// The policy: warn, release the failed capture's memory, run eagerly from now on.
    fn fall_back(&mut self, why: &str) -> shim::Result<()> {
        log::warn!(
            "capturing {} as a CUDA graph failed ({}); it runs eagerly from now on",
            self.what,
            why.lines().next().unwrap_or("")
        );
        self.state = State::Eager;
        self.backend.release()
    }

    /// Drops the graph and gives its private memory pool back to the driver (so the next user
    /// of the device finds it free).
    pub fn release(mut self) -> shim::Result<()> {
        let captured = matches!(self.state, State::Captured(..));
        self.state = State::Eager;
        if captured {
            self.backend.release()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the calls; captures fail as told.
    #[derive(Default)]
    struct Fake {
        log: Vec<String>,
        fail_capture: Option<&'static str>,
        panic_in_capture: bool,
    }

    impl Backend for Fake {
        type Graph = u32;
        fn side_stream<T>(&mut self, f: impl FnOnce() -> T) -> shim::Result<T> {
            self.log.push("side".into());
            Ok(f())
        }
        fn capture<T>(&mut self, f: impl FnOnce() -> T) -> Result<(u32, T), CaptureError> {
            self.log.push("capture".into());
            let panics = self.panic_in_capture;
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if panics {
                    panic!("CUDA out of memory while capturing");
                }
                f()
            }))
            .map_err(|p| CaptureError::Panicked(error_class::panic_text(&*p)))?;
            match self.fail_capture {
                Some(why) => Err(shim::Error(why.into()).into()),
                None => Ok((7, out)),
            }
        }
        fn replay(&mut self, g: &u32) -> shim::Result<()> {
            self.log.push(format!("replay {g}"));
            Ok(())
        }
        fn release(&mut self) -> shim::Result<()> {
            self.log.push("release".into());
            Ok(())
        }
    }

    fn steps(backend: Fake, n: usize) -> (Vec<String>, Vec<(Phase, Ran)>) {
        let mut g = Graphed::<Fake, ()>::new(backend, 2, "the test step");
        let mut ran = Vec::new();
        for _ in 0..n {
            let mut phase = None;
            let (_, how) = g
                .step(|p| {
                    phase = Some(p);
                    Ok::<(), shim::Error>(())
                })
                .unwrap();
            ran.push((phase.unwrap_or(Phase::Capture), how));
        }
        let log = g.backend.log.clone();
        g.release().unwrap();
        (log, ran)
    }

    #[test]
    fn warm_up_capture_once_then_replay() {
        let (log, ran) = steps(Fake::default(), 5);
        assert_eq!(
            log,
            [
                "side", "side", "capture", "replay 7", "replay 7", "replay 7"
            ]
        );
        assert_eq!(
            ran,
            [
                (Phase::Warmup, Ran::Eagerly),
                (Phase::Warmup, Ran::Eagerly),
                (Phase::Capture, Ran::Replayed),
                // Replays do not call the closure.
                (Phase::Capture, Ran::Replayed),
                (Phase::Capture, Ran::Replayed),
            ]
        );
    }

    #[test]
    fn a_failed_capture_runs_that_step_and_the_rest_eagerly() {
        for fake in [
            Fake {
                fail_capture: Some("operation not permitted when stream is capturing"),
                ..Fake::default()
            },
            Fake {
                panic_in_capture: true,
                ..Fake::default()
            },
        ] {
            let (log, ran) = steps(fake, 4);
            assert_eq!(log, ["side", "side", "capture", "release"]);
            let phases: Vec<Phase> = ran.iter().map(|r| r.0).collect();
            assert_eq!(
                phases,
                [Phase::Warmup, Phase::Warmup, Phase::Eager, Phase::Eager]
            );
            assert!(ran.iter().all(|r| r.1 == Ran::Eagerly));
        }
    }

    #[test]
    fn a_failed_capture_says_whether_libtorch_refused_or_the_step_panicked() {
        use std::error::Error as _;
        let mut fake = Fake {
            fail_capture: Some("operation not permitted when stream is capturing\nbacktrace"),
            ..Fake::default()
        };
        let e = fake.capture(|| ()).unwrap_err();
        assert!(matches!(&e, CaptureError::Failed(_)), "{e:?}");
        // libtorch's first line; the error itself is the source.
        assert_eq!(
            e.to_string(),
            "operation not permitted when stream is capturing"
        );
        assert!(e.source().is_some_and(|s| s.is::<shim::Error>()));
        let mut fake = Fake {
            panic_in_capture: true,
            ..Fake::default()
        };
        let e = fake.capture(|| ()).unwrap_err();
        assert!(
            matches!(&e, CaptureError::Panicked(m) if m == "CUDA out of memory while capturing"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "CUDA out of memory while capturing");
        assert_eq!(
            e.torch(),
            error_class::Torch::OutOfMemory("CUDA out of memory while capturing".into())
        );
    }

    #[test]
    fn the_step_s_own_error_during_capture_is_a_failed_capture_too() {
        let mut g = Graphed::<Fake, ()>::new(Fake::default(), 0, "the test step");
        let mut calls = Vec::new();
        let r = g.step(|p| {
            calls.push(p);
            match p {
                Phase::Capture => Err(shim::Error("capture-only failure".into())),
                _ => Ok(()),
            }
        });
        assert_eq!(r.unwrap().1, Ran::Eagerly);
        assert_eq!(calls, [Phase::Capture, Phase::Eager]);
        assert_eq!(g.next(), Next::Eager);
    }

    #[test]
    fn a_replayed_step_returns_its_captured_output() {
        let mut g = Graphed::<Fake, tch::Tensor>::new(Fake::default(), 0, "the test step");
        let out = tch::Tensor::from_slice(&[1.0f32]);
        let (a, _) = g
            .step(|_| Ok::<_, shim::Error>(out.shallow_clone()))
            .unwrap();
        let (b, _) = g
            .step(|_| -> Result<tch::Tensor, shim::Error> { unreachable!("replayed") })
            .unwrap();
        assert_eq!(a.data_ptr(), out.data_ptr());
        assert_eq!(b.data_ptr(), out.data_ptr());
    }
}
