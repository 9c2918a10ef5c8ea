//! The GPU flags every tool that computes with libtorch spells alike (`--device`, `--precision`,
//! `--cuda-graphs`), flattened into the tools' `Cli`s; each tool takes the precisions it has.

use crate::{DeviceArg, Precision};

/// `auto`, `on` or `off`: a fast path whose `auto` each tool decides (and says in its help).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    Auto,
    On,
    Off,
}

impl Switch {
    /// On or off, with `auto` meaning `auto_means`.
    pub fn or(self, auto_means: bool) -> bool {
        match self {
            Switch::Auto => auto_means,
            Switch::On => true,
            Switch::Off => false,
        }
    }
}

/// Where and in what precision a tool computes.
#[derive(Debug, Clone, clap::Args)]
pub struct GpuArgs {
    /// cpu, cuda, cuda:N, or auto: cuda:(LOCAL_RANK, else the tool's worker slot) mod the
    /// visible GPUs when CUDA is there, else cpu.
    #[arg(long, default_value = "auto", value_name = "DEVICE")]
    pub device: DeviceArg,

    /// fp32 (strict: no TF32 anywhere), tf32 (fp32 values, TF32 tensor-core convolutions on CUDA:
    /// PyTorch's default), bf16 or fp16 (autocast on CUDA) - among those the tool has:
    /// ddp-train all four, project-one-gpu fp32, tf32 and bf16 (its VGG16), generate fp32 and
    /// tf32.
    #[arg(long, default_value = "tf32", value_name = "fp32|tf32|bf16|fp16")]
    pub precision: Precision,
}

impl GpuArgs {
    /// `--precision`, which must be one of `allowed` for `tool` (a usage error naming them).
    pub fn precision_among(&self, tool: &str, allowed: &[Precision]) -> crate::Result<Precision> {
        if allowed.contains(&self.precision) {
            Ok(self.precision)
        } else {
            Err(crate::Error::PrecisionOf {
                tool: tool.to_string(),
                asked: self.precision.name(),
                allowed: allowed
                    .iter()
                    .map(|p| p.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        }
    }
}

/// `--cuda-graphs`: each step captured once as a CUDA graph and replayed (CUDA only).
#[derive(Debug, Clone, clap::Args)]
pub struct CudaGraphsArg {
    /// Capture each step as a CUDA graph after 3 eager warm-up steps and replay it (CUDA only;
    /// a capture that fails runs eagerly, with a warning). auto: the tool's choice - on in
    /// ddp-train (except with fp16, whose loss scaler decides on the host), off in
    /// project-one-gpu (experimental there).
    #[arg(long, value_name = "auto|on|off", default_value = "auto")]
    pub cuda_graphs: Switch,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        gpu: GpuArgs,
        #[command(flatten)]
        graphs: CudaGraphsArg,
    }

    #[test]
    fn one_spelling_with_each_tools_values() {
        let cli = Cli::parse_from(["t"]);
        assert_eq!(cli.gpu.device, DeviceArg::Auto);
        assert_eq!(cli.gpu.precision, Precision::Tf32);
        assert!(cli.graphs.cuda_graphs.or(true));
        let cli = Cli::parse_from(["t", "--precision", "fp16", "--cuda-graphs", "off"]);
        assert!(!cli.graphs.cuda_graphs.or(true));
        let e = cli
            .gpu
            .precision_among("generate", &[Precision::Fp32, Precision::Tf32])
            .unwrap_err();
        assert_eq!(e.to_string(), "--precision fp16: generate takes fp32, tf32");
        assert!(Cli::try_parse_from(["t", "--precision", "fp8"]).is_err());
    }
}
