//! Freshly initialised generators, as upstream's constructors make them (for benchmarks, tests
//! and demos without a trained network), and writing weights files.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use safetensors::tensor::TensorView;
use tch::{Device, Kind, Tensor};

use crate::{Architecture, Config, Result};

/// Every G_ema tensor for `cfg`, initialised like upstream: weights N(0,1) (FC weights / lr
/// multiplier), biases 0 (affine biases 1), `const` and `noise_const` N(0,1), `noise_strength`
/// 0, `w_avg` 0, resample filters the normalised [1,3,3,1] outer product. Uses torch's global
/// generator (seed it with `tch::manual_seed`).
///
/// Kept in one piece: one entry per upstream tensor name, in upstream's module order.
pub fn init_tensors(cfg: &Config) -> BTreeMap<String, Tensor> {
    let o = (Kind::Float, Device::Cpu);
    let mut t = BTreeMap::new();
    let filter = crate::ops::default_resample_filter();
    let fc =
        |t: &mut BTreeMap<String, Tensor>, p: &str, i: i64, out: i64, lr: f64, bias_init: f64| {
            t.insert(format!("{p}.weight"), Tensor::randn([out, i], o) / lr);
            t.insert(format!("{p}.bias"), Tensor::full([out], bias_init, o));
        };
    let layer = |t: &mut BTreeMap<String, Tensor>, p: &str, i: i64, out: i64, res: i64| {
        fc(t, &format!("{p}.affine"), cfg.w_dim, i, 1.0, 1.0);
        t.insert(format!("{p}.weight"), Tensor::randn([out, i, 3, 3], o));
        t.insert(format!("{p}.noise_const"), Tensor::randn([res, res], o));
        t.insert(format!("{p}.noise_strength"), Tensor::zeros([], o));
        t.insert(format!("{p}.bias"), Tensor::zeros([out], o));
        t.insert(format!("{p}.resample_filter"), filter.copy());
    };
    for res in cfg.block_resolutions() {
        let p = format!("synthesis.b{res}");
        let in_ch = if res > 4 { cfg.channels(res / 2) } else { 0 };
        let out_ch = cfg.channels(res);
        t.insert(format!("{p}.resample_filter"), filter.copy());
        if in_ch == 0 {
            t.insert(format!("{p}.const"), Tensor::randn([out_ch, res, res], o));
        } else {
            layer(&mut t, &format!("{p}.conv0"), in_ch, out_ch, res);
        }
        layer(&mut t, &format!("{p}.conv1"), out_ch, out_ch, res);
        if res == cfg.img_resolution || cfg.architecture == Architecture::Skip {
            fc(
                &mut t,
                &format!("{p}.torgb.affine"),
                cfg.w_dim,
                out_ch,
                1.0,
                1.0,
            );
            t.insert(
                format!("{p}.torgb.weight"),
                Tensor::randn([cfg.img_channels, out_ch, 1, 1], o),
            );
            t.insert(
                format!("{p}.torgb.bias"),
                Tensor::zeros([cfg.img_channels], o),
            );
        }
        if in_ch != 0 && cfg.architecture == Architecture::Resnet {
            t.insert(
                format!("{p}.skip.weight"),
                Tensor::randn([out_ch, in_ch, 1, 1], o),
            );
            t.insert(format!("{p}.skip.resample_filter"), filter.copy());
        }
    }
    let embed = if cfg.c_dim > 0 { cfg.w_dim } else { 0 };
    if cfg.c_dim > 0 {
        fc(&mut t, "mapping.embed", cfg.c_dim, embed, 1.0, 0.0);
    }
    for i in 0..cfg.map_layers {
        let input = if i == 0 { cfg.z_dim + embed } else { cfg.w_dim };
        fc(
            &mut t,
            &format!("mapping.fc{i}"),
            input,
            cfg.w_dim,
            cfg.mapping_lr_multiplier,
            0.0,
        );
    }
    t.insert("mapping.w_avg".into(), Tensor::zeros([cfg.w_dim], o));
    t
}

/// Writes tensors (as fp32) and `config` metadata to a safetensors file, the format
/// `scripts/convert-network-pkl` produces.
pub fn save(path: &Path, tensors: &BTreeMap<String, Tensor>, cfg: &Config) -> Result<()> {
    let bytes = encode(tensors, cfg).map_err(|message| weights::Error::File {
        path: path.display().to_string(),
        message,
    })?;
    std::fs::write(path, bytes).map_err(|error| weights::Error::Io {
        path: path.display().to_string(),
        error,
    })?;
    Ok(())
}

/// The safetensors file [`save`] writes, in memory.
pub fn encode(
    tensors: &BTreeMap<String, Tensor>,
    cfg: &Config,
) -> std::result::Result<Vec<u8>, String> {
    let mut bytes = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let (shape, v) = crate::to_f32_vec(t);
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        bytes.push((name.clone(), shape, b));
    }
    let views = bytes
        .iter()
        .map(|(name, shape, b)| {
            TensorView::new(safetensors::Dtype::F32, shape.clone(), b)
                .map(|v| (name.clone(), v))
                .map_err(|e| format!("{e:?}"))
        })
        .collect::<std::result::Result<Vec<_>, String>>()?;
    let meta = HashMap::from([("config".to_string(), cfg.to_json())]);
    safetensors::tensor::serialize(views, &Some(meta)).map_err(|e| format!("{e:?}"))
}
