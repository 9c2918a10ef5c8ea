//! The generator's hyper-parameters, as stored in the `config` metadata of a weights file.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Synthesis architecture (`synthesis_kwargs.architecture` upstream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// Original StyleGAN: ToRGB only at the last block.
    Orig,
    /// ToRGB at every block, images up-sampled and summed (upstream's default).
    #[default]
    Skip,
    /// Residual blocks (1×1 up-sampling skip convolution), ToRGB at the last block.
    Resnet,
}

/// Generator configuration: the `config` JSON of the safetensors metadata written by
/// `scripts/convert-network-pkl` (upstream's `G_kwargs` flattened). Unknown keys are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    pub z_dim: i64,
    /// Conditioning label size (0: unconditional).
    #[serde(default)]
    pub c_dim: i64,
    pub w_dim: i64,
    pub img_resolution: i64,
    pub img_channels: i64,
    /// Mapping network depth (`mapping_kwargs.num_layers`).
    #[serde(default = "default_map_layers")]
    pub map_layers: i64,
    #[serde(default = "default_channel_base")]
    pub channel_base: i64,
    #[serde(default = "default_channel_max")]
    pub channel_max: i64,
    /// Clamp of conv outputs (`null`: none).
    #[serde(default)]
    pub conv_clamp: Option<f64>,
    #[serde(default)]
    pub architecture: Architecture,
    /// Number of highest-resolution blocks run in fp16 (on CUDA, unless forced to fp32).
    #[serde(default)]
    pub num_fp16_res: i64,
    /// Learning-rate multiplier of the mapping layers (it also scales their forward pass).
    #[serde(default = "default_mapping_lr")]
    pub mapping_lr_multiplier: f64,
}

fn default_map_layers() -> i64 {
    8
}
fn default_channel_base() -> i64 {
    32768
}
fn default_channel_max() -> i64 {
    512
}
fn default_mapping_lr() -> f64 {
    0.01
}

impl Config {
    /// Upstream train.py's `--cfg stylegan2` (the paper config) at `res`: z = w = 512, 8 mapping
    /// layers, channel_base 32768, channel_max 512, 4 fp16 resolutions, conv_clamp 256.
    pub fn paper_stylegan2(res: i64) -> Self {
        Config {
            z_dim: 512,
            c_dim: 0,
            w_dim: 512,
            img_resolution: res,
            img_channels: 3,
            map_layers: 8,
            channel_base: 32768,
            channel_max: 512,
            conv_clamp: Some(256.0),
            architecture: Architecture::Skip,
            num_fp16_res: 4,
            mapping_lr_multiplier: 0.01,
        }
    }

    /// Parses and checks a `config` JSON string.
    pub fn from_json(s: &str) -> Result<Self> {
        let c: Config = serde_json::from_str(s).map_err(|e| Error::Config(e.to_string()))?;
        c.validate()?;
        Ok(c)
    }

    /// The config in a weights file's metadata (`config`), if any.
    pub fn from_metadata(
        metadata: &std::collections::BTreeMap<String, String>,
    ) -> Result<Option<Self>> {
        metadata
            .get("config")
            .map(|json| Config::from_json(json))
            .transpose()
    }

    /// A `--config` flag's value: JSON text (starting with `{`) or the path of a JSON file.
    /// The path need not be UTF-8.
    pub fn from_flag(value: &std::ffi::OsStr) -> Result<Self> {
        if let Some(json) = value.to_str().filter(|v| v.trim_start().starts_with('{')) {
            return Config::from_json(json);
        }
        let text = std::fs::read_to_string(value).map_err(|e| weights::Error::Io {
            path: std::path::Path::new(value).display().to_string(),
            error: e,
        })?;
        Config::from_json(&text)
    }

    /// Checks the values upstream's constructors would accept.
    pub fn validate(&self) -> Result<()> {
        let r = self.img_resolution;
        let bad = |m: String| Err(Error::Config(m));
        if r < 4 || r & (r - 1) != 0 {
            return bad(format!("img_resolution {r} is not a power of two >= 4"));
        }
        if self.z_dim < 0 || self.c_dim < 0 || self.z_dim + self.c_dim == 0 {
            return bad("z_dim and c_dim must be >= 0 and not both 0".into());
        }
        for (name, v) in [
            ("w_dim", self.w_dim),
            ("img_channels", self.img_channels),
            ("map_layers", self.map_layers),
            ("channel_base", self.channel_base),
            ("channel_max", self.channel_max),
        ] {
            if v <= 0 {
                return bad(format!("{name} must be positive, got {v}"));
            }
        }
        // Sizes are bounded before anything is sized by them (a declared 10^12 mapping layers
        // would be an allocation failure, an abort, rather than this error). The bounds are far
        // above any published network (1024², 512-wide, 8 mapping layers).
        for (name, v, most) in [
            ("img_resolution", r, 1 << 14),
            ("z_dim", self.z_dim, 1 << 16),
            ("c_dim", self.c_dim, 1 << 16),
            ("w_dim", self.w_dim, 1 << 16),
            ("img_channels", self.img_channels, 64),
            ("map_layers", self.map_layers, 1024),
            ("channel_base", self.channel_base, 1 << 30),
            ("channel_max", self.channel_max, 1 << 16),
            ("num_fp16_res", self.num_fp16_res, 64),
        ] {
            if v > most {
                return bad(format!(
                    "{name} {v} is more than any generator has (at most {most})"
                ));
            }
        }
        if self.num_fp16_res < 0 {
            return bad(format!(
                "num_fp16_res must be >= 0, got {}",
                self.num_fp16_res
            ));
        }
        if self.channels(r) == 0 {
            return bad(format!(
                "channel_base {} gives 0 channels at {r}x{r}",
                self.channel_base
            ));
        }
        Ok(())
    }

    /// Block resolutions 4, 8, ..., img_resolution.
    pub fn block_resolutions(&self) -> Vec<i64> {
        let log2 = self.img_resolution.trailing_zeros() as i64;
        (2..=log2).map(|i| 1i64 << i).collect()
    }

    /// `channels_dict[res] = min(channel_base // res, channel_max)`.
    pub fn channels(&self, res: i64) -> i64 {
        (self.channel_base / res).min(self.channel_max)
    }

    /// Lowest resolution run in fp16: `max(2 ** (log2 + 1 - num_fp16_res), 8)`.
    pub fn fp16_resolution(&self) -> i64 {
        let log2 = self.img_resolution.trailing_zeros() as i64;
        let e = log2 + 1 - self.num_fp16_res;
        if e < 0 { 8 } else { (1i64 << e).max(8) }
    }

    /// Number of w vectors the synthesis network consumes: two per block (one at 4×4) plus the
    /// last ToRGB.
    pub fn num_ws(&self) -> i64 {
        2 * self.block_resolutions().len() as i64
    }

    /// The JSON stored in weights-file metadata.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("config serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_fixture_style_config_with_defaults() {
        let c = Config::from_json(
            r#"{"z_dim": 32, "w_dim": 32, "img_resolution": 32, "img_channels": 3,
                "map_layers": 2, "channel_base": 512, "channel_max": 32, "conv_clamp": null,
                "architecture": "skip", "num_ws": 8}"#,
        )
        .unwrap();
        assert_eq!(c.block_resolutions(), [4, 8, 16, 32]);
        assert_eq!(c.num_ws(), 8);
        assert_eq!(c.channels(32), 16);
        assert_eq!(c.mapping_lr_multiplier, 0.01);
        assert_eq!(c.c_dim, 0);
    }

    #[test]
    fn paper_config_values() {
        let c = Config::paper_stylegan2(1024);
        assert_eq!(c.num_ws(), 18);
        assert_eq!(c.channels(1024), 32);
        assert_eq!(c.fp16_resolution(), 128);
        let back = Config::from_json(&c.to_json()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn rejects_bad_resolution() {
        let e = Config::from_json(
            r#"{"z_dim": 8, "w_dim": 8, "img_resolution": 48, "img_channels": 3}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("power of two"), "{e}");
    }
}
