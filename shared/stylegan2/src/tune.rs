//! StyleGAN2's timed kernel choices: which up-sampling convolution the generator runs and which
//! memory layout the VGG16 uses, each timed once per shape by [`gpu_runtime::tune`] (re-exported
//! here) unless the tools' `--kernel-choices` ([`KernelChoices`], set once with
//! [`set_kernel_choices`]) fixes it: a candidate's name fixes it, `auto` times the candidates on
//! any device; left unset, CUDA times them and the CPU takes the first candidate.

use std::sync::{OnceLock, RwLock};

pub use gpu_runtime::tune::{Candidate, Decision, choose, decisions, mode, time};

/// The generator's two 2× up-sampling convolutions ([`crate::fast::UpConv`]).
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

impl std::str::FromStr for KernelChoices {
    type Err = String;

    /// `key=value` pairs separated by commas; the empty string is the default.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut c = KernelChoices::default();
        let pick = |key: &str, value: &str, names: &[&'static str]| {
            names
                .iter()
                .chain(&["auto"])
                .find(|n| **n == value)
                .copied()
                .ok_or_else(|| format!("{key}={value}: one of {} or auto", names.join(", ")))
        };
        for pair in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} is not key=value"))?;
            let (key, value) = (key.trim(), value.trim());
            match key {
                "upconv" => c.upconv = Some(pick(key, value, &UPCONVS)?),
                "vgg-layout" => c.vgg_layout = Some(pick(key, value, &VGG_LAYOUTS)?),
                "epilogue" => {
                    c.fused_epilogue = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(format!("epilogue={value}: on or off")),
                    }
                }
                _ => {
                    return Err(format!(
                        "unknown kernel choice {key:?}: upconv, vgg-layout or epilogue"
                    ));
                }
            }
        }
        Ok(c)
    }
}

fn choices_cell() -> &'static RwLock<KernelChoices> {
    static C: OnceLock<RwLock<KernelChoices>> = OnceLock::new();
    C.get_or_init(Default::default)
}

/// Sets the process's kernel choices (the tools do it once, from `--kernel-choices`).
pub fn set_kernel_choices(choices: KernelChoices) {
    *choices_cell().write().unwrap_or_else(|e| e.into_inner()) = choices;
}

/// The process's kernel choices (read on the hot path: a shared lock and a copy of three words).
pub fn kernel_choices() -> KernelChoices {
    *choices_cell().read().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
