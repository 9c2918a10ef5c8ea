//! Choosing between formulations of the same maths by timing them, once per input shape, as
//! cuDNN's benchmark mode picks its algorithms: which is faster depends on the GPU, the dtype
//! and the shapes, so it is measured where it runs instead of guessed. A [`Tuner`] remembers
//! the decisions of the model that owns it (the generator, the VGG16); [`KernelChoices`] is how
//! the tools fix or free each choice (`--kernel-choices`), handed to the models as a value.

use std::sync::Mutex;

use tch::{Device, Kind, Tensor};

/// A candidate: its name and how it computes the output from the input.
pub type Candidate<'a> = (&'static str, &'a dyn Fn(&Tensor) -> Tensor);

/// The StyleGAN2 generator's two 2× up-sampling convolutions (`stylegan2::fast::UpConv`).
pub const UPCONVS: [&str; 2] = ["phase", "tconv"];
/// The VGG16's two memory layouts (perceptual's `NativeVgg16::features`).
pub const VGG_LAYOUTS: [&str; 2] = ["nchw", "nhwc"];

/// How each timed choice is made, and whether the fused CUDA epilogue runs: what the tools'
/// `--kernel-choices upconv=phase|tconv|auto,vgg-layout=nchw|nhwc|auto,epilogue=on|off` sets.
/// A choice left unset is timed on CUDA and takes the first candidate elsewhere; `auto` times it
/// on any device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelChoices {
    /// A name of [`UPCONVS`], `auto`, or unset.
    pub upconv: Option<&'static str>,
    /// A name of [`VGG_LAYOUTS`], `auto`, or unset.
    pub vgg_layout: Option<&'static str>,
    /// The NVRTC-compiled modulated-convolution epilogue on CUDA (off: separate ops).
    pub fused_epilogue: bool,
}

impl Default for KernelChoices {
    fn default() -> Self {
        Self {
            upconv: None,
            vgg_layout: None,
            fused_epilogue: true,
        }
    }
}

/// Why a `--kernel-choices` value cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChoiceError {
    /// A comma-separated part without `=`.
    #[error("{0:?} is not key=value")]
    NotKeyValue(String),
    /// A key this does not know.
    #[error("unknown kernel choice {0:?}: upconv, vgg-layout or epilogue")]
    UnknownKey(String),
    /// A value the key does not take (`expected` says which it does).
    #[error("{key}={value}: {expected}")]
    Value {
        key: String,
        value: String,
        expected: String,
    },
}

/// A command-line value: a usage error.
impl error_class::Classify for ChoiceError {
    fn class(&self) -> error_class::Class {
        error_class::Class::Usage
    }
}

impl std::str::FromStr for KernelChoices {
    type Err = ChoiceError;

    /// `key=value` pairs separated by commas; the empty string is the default.
    fn from_str(s: &str) -> Result<Self, ChoiceError> {
        let mut c = KernelChoices::default();
        let bad_value = |key: &str, value: &str, expected: String| ChoiceError::Value {
            key: key.into(),
            value: value.into(),
            expected,
        };
        let pick = |key: &str, value: &str, names: &[&'static str]| {
            names
                .iter()
                .chain(&["auto"])
                .find(|n| **n == value)
                .copied()
                .ok_or_else(|| {
                    bad_value(key, value, format!("one of {} or auto", names.join(", ")))
                })
        };
        for pair in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| ChoiceError::NotKeyValue(pair.into()))?;
            let (key, value) = (key.trim(), value.trim());
            match key {
                "upconv" => c.upconv = Some(pick(key, value, &UPCONVS)?),
                "vgg-layout" => c.vgg_layout = Some(pick(key, value, &VGG_LAYOUTS)?),
                "epilogue" => {
                    c.fused_epilogue = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(bad_value(key, value, "on or off".into())),
                    }
                }
                _ => return Err(ChoiceError::UnknownKey(key.into())),
            }
        }
        Ok(c)
    }
}

/// One timed decision.
#[derive(Debug, Clone)]
pub struct Decision {
    /// What was chosen, e.g. "up-sampling conv 512->512".
    pub what: String,
    pub device: Device,
    pub kind: Kind,
    pub input: Vec<i64>,
    /// Each candidate's name and median forward + backward milliseconds (infinite when it
    /// failed, out of memory say).
    pub timings: Vec<(&'static str, f64)>,
    /// Index of the chosen candidate.
    pub choice: usize,
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} on {:?} {:?} {:?}: {}",
            self.what, self.device, self.kind, self.input, self.timings[self.choice].0
        )?;
        let t: Vec<String> = self
            .timings
            .iter()
            .map(|(n, ms)| format!("{n} {ms:.2} ms"))
            .collect();
        write!(f, " (forward+backward {})", t.join(", "))
    }
}

/// The decisions one model has timed, by (what, device, dtype, shape). Each model that tunes
/// owns one, so two models (or two configurations) in one process decide apart.
#[derive(Debug, Default)]
pub struct Tuner {
    decisions: Mutex<Vec<Decision>>,
}

/// The mode a choice asks for: `Some(i)` fixes candidate `i` of `names`, `None` times them.
/// Unset: timed on CUDA, the first candidate elsewhere; `auto`: timed.
pub fn mode(choice: Option<&str>, names: &[&'static str], device: Device) -> Option<usize> {
    match choice {
        Some("auto") => None,
        Some(name) => names.iter().position(|n| *n == name),
        None if device.is_cuda() => None,
        None => Some(0),
    }
}

impl Tuner {
    /// Every decision this tuner has timed (benchmarks print them).
    pub fn decisions(&self) -> Vec<Decision> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Decision>> {
        self.decisions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Which of `candidates` to run for `x`: `fixed` if given, else the decision made before
    /// for (`what`, device, dtype, shape), else timed now ([`time`]) and remembered. The first
    /// candidate is the default: it is taken untimed while a CUDA graph is being captured
    /// (timing waits for the device, which a capture forbids: the warm-up steps before a
    /// capture see every shape first).
    pub fn choose(
        &self,
        what: &str,
        fixed: Option<usize>,
        x: &Tensor,
        candidates: &[Candidate<'_>],
    ) -> usize {
        if let Some(i) = fixed {
            return i;
        }
        let (device, kind, input) = (x.device(), x.kind(), x.size());
        let same = |d: &&Decision| {
            d.what == what && d.device == device && d.kind == kind && d.input == input
        };
        if let Some(d) = self.lock().iter().find(same) {
            return d.choice;
        }
        if let Device::Cuda(i) = device
            && !matches!(crate::shim::stream_capturing(i), Ok(false))
        {
            return 0;
        }
        let ms = time(x, candidates);
        // The first of the fastest: ties (and all failing) keep the default.
        let choice = (0..ms.len()).fold(0, |best, i| if ms[i] < ms[best] { i } else { best });
        let timings = candidates.iter().map(|(n, _)| *n).zip(ms).collect();
        self.lock().push(Decision {
            what: what.to_string(),
            device,
            kind,
            input,
            timings,
            choice,
        });
        choice
    }
}

/// Median forward + backward milliseconds of each candidate on a copy of `x` (the gradient for
/// the input, as the projector needs), in alternating rounds after one warm-up round (cuDNN's
/// algorithm search runs then). A candidate that panics (out of memory, say) gets infinity.
pub fn time(x: &Tensor, candidates: &[Candidate<'_>]) -> Vec<f64> {
    const ROUNDS: usize = 5;
    let sync = || {
        if let Device::Cuda(i) = x.device() {
            tch::Cuda::synchronize(i as i64);
        }
    };
    tch::with_grad(|| {
        let leaf = x.detach().copy().set_requires_grad(x.is_floating_point());
        let run = |f: &dyn Fn(&Tensor) -> Tensor| {
            let once = || {
                sync();
                let t = std::time::Instant::now();
                let y = f(&leaf);
                if leaf.requires_grad() {
                    // A loss Σ y·1: backward gets a dense gradient, as from the projector's
                    // loss, and nothing is drawn from the global generator.
                    let _ = Tensor::run_backward(
                        &[(&y * y.ones_like()).sum(Kind::Float)],
                        &[&leaf],
                        false,
                        false,
                    );
                }
                sync();
                t.elapsed().as_secs_f64() * 1e3
            };
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(once)).unwrap_or(f64::INFINITY)
        };
        let mut ms = vec![Vec::new(); candidates.len()];
        for round in 0..=ROUNDS {
            for (i, (_, f)) in candidates.iter().enumerate() {
                let t = run(*f);
                if round > 0 {
                    ms[i].push(t);
                }
            }
        }
        ms.into_iter()
            .map(|mut v| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn kernel_choices_parse_as_key_value_pairs() {
        let c: KernelChoices = "upconv=tconv, vgg-layout=auto,epilogue=off"
            .parse()
            .unwrap();
        assert_eq!(
            c,
            KernelChoices {
                upconv: Some("tconv"),
                vgg_layout: Some("auto"),
                fused_epilogue: false
            }
        );
        assert_eq!(
            "".parse::<KernelChoices>().unwrap(),
            KernelChoices::default()
        );
        for bad in ["upconv=fast", "layout=nchw", "epilogue=1", "upconv"] {
            assert!(bad.parse::<KernelChoices>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_bad_kernel_choice_says_which_kind_in_the_same_words() {
        let e = |s: &str| s.parse::<KernelChoices>().unwrap_err();
        let bad = e("upconv=fast");
        assert!(
            matches!(&bad, ChoiceError::Value { key, .. } if key == "upconv"),
            "{bad:?}"
        );
        assert_eq!(bad.to_string(), "upconv=fast: one of phase, tconv or auto");
        assert_eq!(e("epilogue=1").to_string(), "epilogue=1: on or off");
        let unknown = e("layout=nchw");
        assert!(matches!(&unknown, ChoiceError::UnknownKey(k) if k == "layout"));
        assert_eq!(
            unknown.to_string(),
            r#"unknown kernel choice "layout": upconv, vgg-layout or epilogue"#
        );
        let pair = e("upconv");
        assert!(matches!(&pair, ChoiceError::NotKeyValue(p) if p == "upconv"));
        assert_eq!(pair.to_string(), r#""upconv" is not key=value"#);
        // A command-line mistake: exit 2.
        assert_eq!(
            error_class::Classify::class(&pair),
            error_class::Class::Usage
        );
    }

    #[test]
    fn a_shape_is_timed_once_and_the_faster_kept() {
        let o = (Kind::Float, Device::Cpu);
        let calls = Cell::new(0);
        let cheap = |x: &Tensor| {
            calls.set(calls.get() + 1);
            x * 2.0
        };
        let slow = |x: &Tensor| {
            calls.set(calls.get() + 1);
            std::thread::sleep(std::time::Duration::from_millis(50));
            x * 2.0
        };
        let tuner = Tuner::default();
        let cands: [Candidate<'_>; 2] = [("slow", &slow), ("cheap", &cheap)];
        assert_eq!(
            tuner.choose("test pair", Some(0), &Tensor::ones([3, 4], o), &cands),
            0
        );
        assert_eq!(calls.get(), 0, "a fixed choice times nothing");
        assert_eq!(
            tuner.choose("test pair", None, &Tensor::ones([3, 4], o), &cands),
            1
        );
        let n = calls.get();
        assert_eq!(n, 12, "a warm-up round and 5 timed rounds of each");
        assert_eq!(
            tuner.choose("test pair", None, &Tensor::zeros([3, 4], o), &cands),
            1
        );
        assert_eq!(calls.get(), n, "the same shape is not timed again");
        let d = tuner
            .decisions()
            .into_iter()
            .find(|d| d.what == "test pair")
            .unwrap();
        assert_eq!(
            (d.input.clone(), d.choice, d.timings[0].0),
            (vec![3, 4], 1, "slow")
        );
        assert!(d.timings[0].1 > d.timings[1].1, "{d}");
        // Another shape is another decision; a candidate that fails is not chosen.
        let fails = |_: &Tensor| -> Tensor { panic!("out of memory (test)") };
        assert_eq!(
            tuner.choose(
                "test pair",
                None,
                &Tensor::ones([5], o),
                &[("fails", &fails), ("slow", &slow)]
            ),
            1
        );
    }

    #[test]
    fn two_tuners_decide_apart_in_one_process() {
        // The same what and shape, where the faster candidate differs: each tuner (one per
        // thread, as two models of two configurations) keeps its own answer.
        let decide = |slow_first: bool| {
            std::thread::spawn(move || {
                let tuner = Tuner::default();
                let x = Tensor::ones([2, 2], (Kind::Float, Device::Cpu));
                let slow = |x: &Tensor| {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    x * 2.0
                };
                let cheap = |x: &Tensor| x * 2.0;
                let cands: [Candidate<'_>; 2] = if slow_first {
                    [("slow", &slow), ("cheap", &cheap)]
                } else {
                    [("cheap", &cheap), ("slow", &slow)]
                };
                (0..3)
                    .map(|_| tuner.choose("shared shape", None, &x, &cands))
                    .collect::<Vec<_>>()
            })
        };
        let (a, b) = (decide(true), decide(false));
        assert_eq!(a.join().unwrap(), [1, 1, 1]);
        assert_eq!(b.join().unwrap(), [0, 0, 0]);
    }

    #[test]
    fn modes_come_from_the_choice_or_the_device() {
        let names = ["a", "b"];
        // Unset: timed on CUDA, the first candidate on the CPU.
        assert_eq!(mode(None, &names, Device::Cpu), Some(0));
        assert_eq!(mode(None, &names, Device::Cuda(0)), None);
        assert_eq!(mode(Some("b"), &names, Device::Cuda(0)), Some(1));
        assert_eq!(mode(Some("auto"), &names, Device::Cpu), None);
    }
}
