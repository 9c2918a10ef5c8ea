//! ResNet-18/34/50/101 as torchvision builds them (`torchvision.models.resnet`), with its
//! state_dict key names, so checkpoints load into `torchvision.models.resnetXX(num_classes=K)`
//! with `load_state_dict(strict=True)`. `Stem::Cifar` swaps the ImageNet stem (7×7/2 conv +
//! 3×3/2 max-pool) for a 3×3/1 conv without pooling, the usual CIFAR variant (not torchvision's;
//! same keys, `conv1.weight` is then [64,3,3,3]). [`ResNet::sync_batch_norm`] makes every
//! BatchNorm a SyncBatchNorm ([`crate::syncbn`]).

use std::ops::Range;

use tch::nn::{self, Init, ModuleT};
use tch::{Device, Kind, Tensor};

use crate::syncbn::Group;
use crate::{Error, Result};

/// Which ResNet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Arch {
    #[cfg_attr(feature = "clap", value(name = "resnet18"))]
    ResNet18,
    #[cfg_attr(feature = "clap", value(name = "resnet34"))]
    ResNet34,
    #[cfg_attr(feature = "clap", value(name = "resnet50"))]
    ResNet50,
    #[cfg_attr(feature = "clap", value(name = "resnet101"))]
    ResNet101,
}

impl Arch {
    /// Blocks per stage, and whether the blocks are bottlenecks (torchvision's `_resnet` calls).
    fn layout(self) -> ([i64; 4], bool) {
        match self {
            Arch::ResNet18 => ([2, 2, 2, 2], false),
            Arch::ResNet34 => ([3, 4, 6, 3], false),
            Arch::ResNet50 => ([3, 4, 6, 3], true),
            Arch::ResNet101 => ([3, 4, 23, 3], true),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::ResNet18 => "resnet18",
            Arch::ResNet34 => "resnet34",
            Arch::ResNet50 => "resnet50",
            Arch::ResNet101 => "resnet101",
        }
    }
}

impl std::str::FromStr for Arch {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        [
            Arch::ResNet18,
            Arch::ResNet34,
            Arch::ResNet50,
            Arch::ResNet101,
        ]
        .into_iter()
        .find(|a| a.name() == s)
        .ok_or_else(|| {
            Error::Usage(format!(
                "unknown model `{s}`: resnet18, resnet34, resnet50 or resnet101"
            ))
        })
    }
}

/// One unit of a ResNet as a pipeline sees it ([`Arch::units`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Unit {
    /// `conv1` (the stem: conv, BatchNorm, max-pool), `layer1.0`, … (residual blocks), `fc`
    /// (average pool and classifier).
    pub name: String,
    /// Forward floating-point operations per image: 2 × the multiply-adds of its convolutions
    /// and of the classifier (BatchNorm, ReLU and additions are a few % and left out).
    pub flops: f64,
    /// Trainable parameters.
    pub params: i64,
}

impl Arch {
    /// The units of this ResNet for `num_classes` classes and `h`×`w` inputs, in forward order
    /// (computed from the layout; [`ResNet::unit_names`] names the same units).
    pub fn units(self, stem: Stem, num_classes: i64, (h, w): (i64, i64)) -> Vec<Unit> {
        let (counts, bottleneck) = self.layout();
        // Every convolution pads k/2, so its output is ⌈in / stride⌉; so is the 3×3/2 max-pool's.
        let out = |x: i64, stride: i64| (x - 1) / stride + 1;
        // (flops, params) of a bias-free k×k conv producing h×w, and of its BatchNorm.
        let conv = |cin: i64, cout: i64, k: i64, (h, w): (i64, i64)| {
            (
                (2 * cin * cout * k * k * h * w) as f64,
                cin * cout * k * k + 2 * cout,
            )
        };
        let add = |a: (f64, i64), b: (f64, i64)| (a.0 + b.0, a.1 + b.1);
        let unit = |name: String, (flops, params): (f64, i64)| Unit {
            name,
            flops,
            params,
        };
        let (k, stride) = match stem {
            Stem::ImageNet => (7, 2),
            Stem::Cifar => (3, 1),
        };
        let mut size = (out(h, stride), out(w, stride));
        let mut units = vec![unit("conv1".into(), conv(3, 64, k, size))];
        if stem == Stem::ImageNet {
            size = (out(size.0, 2), out(size.1, 2));
        }
        let mut cin = 64;
        for (i, (&n, planes)) in counts.iter().zip([64i64, 128, 256, 512]).enumerate() {
            for b in 0..n {
                let stride = if b == 0 && i > 0 { 2 } else { 1 };
                let cout = if bottleneck { planes * 4 } else { planes };
                let half = (out(size.0, stride), out(size.1, stride));
                let mut cost = if bottleneck {
                    add(
                        add(conv(cin, planes, 1, size), conv(planes, planes, 3, half)),
                        conv(planes, cout, 1, half),
                    )
                } else {
                    add(conv(cin, planes, 3, half), conv(planes, planes, 3, half))
                };
                if stride != 1 || cin != cout {
                    cost = add(cost, conv(cin, cout, 1, half));
                }
                units.push(unit(format!("layer{}.{b}", i + 1), cost));
                (cin, size) = (cout, half);
            }
        }
        units.push(unit(
            "fc".into(),
            (
                (2 * cin * num_classes) as f64,
                cin * num_classes + num_classes,
            ),
        ));
        units
    }
}

/// The state_dict prefixes of a unit's tensors.
fn unit_prefixes(unit: &str) -> Vec<String> {
    match unit {
        "conv1" => vec!["conv1.".into(), "bn1.".into()],
        other => vec![format!("{other}.")],
    }
}

/// The first layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Stem {
    /// torchvision's: conv 7×7 stride 2, BN, ReLU, max-pool 3×3 stride 2.
    #[cfg_attr(feature = "clap", value(name = "imagenet"))]
    ImageNet,
    /// conv 3×3 stride 1, BN, ReLU, no pooling (for 32×32 inputs).
    Cifar,
}

/// `nn.BatchNorm2d` with its five state_dict entries (tch's own omits `num_batches_tracked`).
#[derive(Debug)]
pub struct BatchNorm2d {
    pub weight: Tensor,
    pub bias: Tensor,
    pub running_mean: Tensor,
    pub running_var: Tensor,
    pub num_batches_tracked: Tensor,
}

impl BatchNorm2d {
    fn new(p: nn::Path, c: i64) -> Self {
        BatchNorm2d {
            weight: p.var("weight", &[c], Init::Const(1.0)),
            bias: p.var("bias", &[c], Init::Const(0.0)),
            running_mean: p.zeros_no_train("running_mean", &[c]),
            running_var: p.ones_no_train("running_var", &[c]),
            num_batches_tracked: p.add(
                "num_batches_tracked",
                Tensor::zeros([], (Kind::Int64, p.device())),
                false,
            ),
        }
    }

    /// Normalises `x` (in training with the statistics of all ranks when `sync` is given);
    /// `num_batches_tracked` is counted by the owning [`ResNet`] (one kernel for all layers).
    fn forward(&self, x: &Tensor, train: bool, sync: Option<&Group>) -> Result<Tensor> {
        // Momentum 0.1, eps 1e-5: nn.BatchNorm2d's defaults, as torchvision uses them.
        let (momentum, eps) = (0.1, 1e-5);
        match sync {
            Some(g) if train => crate::syncbn::batch_norm(
                x,
                &self.weight,
                &self.bias,
                &self.running_mean,
                &self.running_var,
                momentum,
                eps,
                g,
            ),
            _ => Ok(x.batch_norm(
                Some(&self.weight),
                Some(&self.bias),
                Some(&self.running_mean),
                Some(&self.running_var),
                train,
                momentum,
                eps,
                true,
            )),
        }
    }
}

fn conv(p: nn::Path, cin: i64, cout: i64, k: i64, stride: i64, padding: i64) -> nn::Conv2D {
    // torchvision: kaiming_normal_(mode="fan_out", nonlinearity="relu"), no bias.
    let init = Init::Kaiming {
        dist: nn::init::NormalOrUniform::Normal,
        fan: nn::init::FanInOut::FanOut,
        non_linearity: nn::init::NonLinearity::ReLU,
    };
    let cfg = nn::ConvConfig {
        stride,
        padding,
        bias: false,
        ws_init: init,
        ..Default::default()
    };
    nn::conv2d(p, cin, cout, k, cfg)
}

/// One residual block (BasicBlock or Bottleneck).
#[derive(Debug)]
struct Block {
    /// `layer<i>.<j>`, its state_dict prefix.
    name: String,
    convs: Vec<(nn::Conv2D, BatchNorm2d)>,
    downsample: Option<(nn::Conv2D, BatchNorm2d)>,
}

impl Block {
    fn batch_norms(&self) -> impl Iterator<Item = &BatchNorm2d> {
        self.convs
            .iter()
            .chain(self.downsample.iter())
            .map(|(_, bn)| bn)
    }
}

impl Block {
    fn new(p: &nn::Path, cin: i64, planes: i64, stride: i64, bottleneck: bool) -> (Block, i64) {
        let expansion = if bottleneck { 4 } else { 1 };
        let cout = planes * expansion;
        let convs = if bottleneck {
            // torchvision's Bottleneck (v1.5): the stride sits on the 3×3 conv.
            vec![
                (
                    conv(p / "conv1", cin, planes, 1, 1, 0),
                    BatchNorm2d::new(p / "bn1", planes),
                ),
                (
                    conv(p / "conv2", planes, planes, 3, stride, 1),
                    BatchNorm2d::new(p / "bn2", planes),
                ),
                (
                    conv(p / "conv3", planes, cout, 1, 1, 0),
                    BatchNorm2d::new(p / "bn3", cout),
                ),
            ]
        } else {
            vec![
                (
                    conv(p / "conv1", cin, planes, 3, stride, 1),
                    BatchNorm2d::new(p / "bn1", planes),
                ),
                (
                    conv(p / "conv2", planes, planes, 3, 1, 1),
                    BatchNorm2d::new(p / "bn2", planes),
                ),
            ]
        };
        let downsample = (stride != 1 || cin != cout).then(|| {
            let d = p / "downsample";
            (
                conv(&d / "0", cin, cout, 1, stride, 0),
                BatchNorm2d::new(&d / "1", cout),
            )
        });
        (
            Block {
                name: p.components().collect::<Vec<_>>().join("."),
                convs,
                downsample,
            },
            cout,
        )
    }

    fn forward(&self, x: &Tensor, train: bool, sync: Option<&Group>) -> Result<Tensor> {
        let mut y = x.shallow_clone();
        let last = self.convs.len() - 1;
        for (i, (c, bn)) in self.convs.iter().enumerate() {
            y = bn.forward(&y.apply(c), train, sync)?;
            if i < last {
                y = y.relu();
            }
        }
        let identity = match &self.downsample {
            Some((c, bn)) => bn.forward(&x.apply(c), train, sync)?,
            None => x.shallow_clone(),
        };
        Ok((y + identity).relu())
    }
}

/// A torchvision ResNet.
///
/// For model parallelism it is a sequence of *units* — the stem (`conv1`, `bn1`, max-pool), each
/// residual block (`layer1.0`, `layer1.1`, …) and the head (average pool + `fc`) — that
/// [`ResNet::place`] puts on devices in contiguous ranges (pipeline stages) and
/// [`ResNet::forward_units`] runs range by range.
#[derive(Debug)]
pub struct ResNet {
    conv1: nn::Conv2D,
    bn1: BatchNorm2d,
    stem: Stem,
    layers: Vec<Block>,
    fc: nn::Linear,
    /// Every BatchNorm's `num_batches_tracked`, as views of one tensor per stage (one for the
    /// whole model until [`ResNet::place`] splits it): a training forward of a stage adds 1 to
    /// all of its counters at once (torch.nn.BatchNorm2d's per-layer count, in one kernel).
    counters: Vec<(Range<usize>, Tensor)>,
    /// SyncBatchNorm's ranks, when the BatchNorms are synchronised.
    sync: Option<Group>,
}

impl ResNet {
    pub fn new(p: &nn::Path, arch: Arch, num_classes: i64, stem: Stem) -> ResNet {
        let (counts, bottleneck) = arch.layout();
        let conv1 = match stem {
            Stem::ImageNet => conv(p / "conv1", 3, 64, 7, 2, 3),
            Stem::Cifar => conv(p / "conv1", 3, 64, 3, 1, 1),
        };
        let bn1 = BatchNorm2d::new(p / "bn1", 64);
        let mut layers = Vec::new();
        let mut cin = 64;
        for (i, (&n, planes)) in counts.iter().zip([64, 128, 256, 512]).enumerate() {
            let lp = p / format!("layer{}", i + 1);
            for b in 0..n {
                let stride = if b == 0 && i > 0 { 2 } else { 1 };
                let (block, cout) =
                    Block::new(&(&lp / b.to_string()), cin, planes, stride, bottleneck);
                layers.push(block);
                cin = cout;
            }
        }
        // nn.Linear's default init: U(±1/√fan_in) for weight and bias.
        let bound = 1.0 / (cin as f64).sqrt();
        let u = Init::Uniform {
            lo: -bound,
            up: bound,
        };
        let fc = nn::linear(
            p / "fc",
            cin,
            num_classes,
            nn::LinearConfig {
                ws_init: u,
                bs_init: Some(u),
                bias: true,
            },
        );
        let mut net = ResNet {
            conv1,
            bn1,
            stem,
            layers,
            fc,
            counters: Vec::new(),
            sync: None,
        };
        let all = 0..net.num_units();
        net.counters = vec![(all.clone(), net.counter_over(all, p.device()))];
        net
    }

    /// Stem, residual blocks, head.
    pub fn num_units(&self) -> usize {
        self.layers.len() + 2
    }

    /// `conv1` (the stem), `layer1.0`, … (the residual blocks), `fc` (pool and classifier).
    pub fn unit_names(&self) -> Vec<String> {
        std::iter::once("conv1".to_string())
            .chain(self.layers.iter().map(|b| b.name.clone()))
            .chain(std::iter::once("fc".to_string()))
            .collect()
    }

    /// The unit a state_dict entry (`layer3.1.conv2.weight`) belongs to.
    pub fn unit_of(&self, name: &str) -> Option<usize> {
        self.unit_names().iter().position(|u| {
            unit_prefixes(u)
                .iter()
                .any(|p| name.starts_with(p.as_str()))
        })
    }

    /// The BatchNorms of units `units`, in order.
    fn batch_norms(&self, units: Range<usize>) -> Vec<&BatchNorm2d> {
        let last = self.num_units() - 1;
        units
            .flat_map(|u| match u {
                0 => vec![&self.bn1],
                u if u == last => Vec::new(),
                u => self.layers[u - 1].batch_norms().collect(),
            })
            .collect()
    }

    /// One tensor on `device` holding the `num_batches_tracked` of units `units` (their
    /// values kept), each BatchNorm's entry becoming a view of it.
    fn counter_over(&self, units: Range<usize>, device: Device) -> Tensor {
        let bns = self.batch_norms(units);
        let counter = Tensor::zeros([bns.len() as i64], (Kind::Int64, device));
        tch::no_grad(|| {
            for (i, bn) in bns.iter().enumerate() {
                let slot = counter.select(0, i as i64);
                slot.shallow_clone().copy_(&bn.num_batches_tracked);
                // Same TensorImpl as the VarStore's entry, so checkpoints see the moved data.
                bn.num_batches_tracked.shallow_clone().set_data(&slot);
            }
        });
        counter
    }

    /// Moves each stage's units — their parameters and buffers, which are the VarStore's
    /// tensors — to the stage's device (`stages`: contiguous unit ranges covering the model, in
    /// order), and gives each stage its own BatchNorm counter there.
    pub fn place(&mut self, vs: &nn::VarStore, stages: &[(Range<usize>, Device)]) -> Result<()> {
        let covered: Vec<usize> = stages.iter().flat_map(|(r, _)| r.clone()).collect();
        if covered != (0..self.num_units()).collect::<Vec<_>>() {
            return Err(Error::Usage(format!(
                "pipeline stages {:?} do not cover the model's {} units in order",
                stages.iter().map(|(r, _)| r).collect::<Vec<_>>(),
                self.num_units()
            )));
        }
        for (name, t) in vs.variables() {
            let unit = self.unit_of(&name);
            let Some((_, device)) = stages
                .iter()
                .find(|(r, _)| unit.is_some_and(|u| r.contains(&u)))
            else {
                return Err(Error::Usage(format!(
                    "{name} belongs to no unit of the model"
                )));
            };
            if t.device() != *device {
                tch::no_grad(|| t.shallow_clone().set_data(&t.to_device(*device)));
            }
        }
        self.counters = stages
            .iter()
            .map(|(units, device)| (units.clone(), self.counter_over(units.clone(), *device)))
            .collect();
        Ok(())
    }

    /// Makes every BatchNorm a SyncBatchNorm over `group` (`nn.SyncBatchNorm.
    /// convert_sync_batchnorm`): training batches are normalised with the statistics of the
    /// global batch. Same parameters and buffers, so checkpoints are unchanged.
    pub fn sync_batch_norm(&mut self, group: Group) {
        self.sync = Some(group);
    }

    /// The forward pass; fails only when a SyncBatchNorm's all-reduce does.
    pub fn try_forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        self.forward_units(x, 0..self.num_units(), train)
    }

    /// Units `units` of the forward pass (a pipeline stage: its input is the previous stage's
    /// output, on this stage's device). A training forward counts a batch in the BatchNorm
    /// counters of every stage ([`ResNet::place`]) that `units` covers whole.
    pub fn forward_units(&self, x: &Tensor, units: Range<usize>, train: bool) -> Result<Tensor> {
        if train {
            for (_, c) in self
                .counters
                .iter()
                .filter(|(r, _)| units.start <= r.start && r.end <= units.end)
            {
                let _ = tch::no_grad(|| c.shallow_clone().f_add_scalar_(1i64));
            }
        }
        let sync = self.sync.as_ref();
        let head = self.num_units() - 1;
        let mut y = x.shallow_clone();
        for u in units {
            y = match u {
                0 => {
                    let y = self.bn1.forward(&y.apply(&self.conv1), train, sync)?.relu();
                    match self.stem {
                        Stem::ImageNet => y.max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false),
                        Stem::Cifar => y,
                    }
                }
                u if u == head => y.adaptive_avg_pool2d([1, 1]).flatten(1, -1).apply(&self.fc),
                u => self.layers[u - 1].forward(&y, train, sync)?,
            };
        }
        Ok(y)
    }
}

impl ModuleT for ResNet {
    /// [`ResNet::try_forward`]; panics where that fails (a SyncBatchNorm's all-reduce).
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        self.try_forward(x, train)
            .unwrap_or_else(|e| panic!("ResNet forward: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn the_computed_units_are_the_models_units() {
        for (arch, stem) in [
            (Arch::ResNet18, Stem::Cifar),
            (Arch::ResNet34, Stem::ImageNet),
            (Arch::ResNet50, Stem::ImageNet),
            (Arch::ResNet101, Stem::Cifar),
        ] {
            let vs = nn::VarStore::new(Device::Cpu);
            let net = ResNet::new(&vs.root(), arch, 10, stem);
            let units = arch.units(stem, 10, (32, 32));
            let names: Vec<String> = units.iter().map(|u| u.name.clone()).collect();
            assert_eq!(names, net.unit_names(), "{}", arch.name());
            let vars = vs.variables();
            for (i, u) in units.iter().enumerate() {
                let params: i64 = vars
                    .iter()
                    .filter(|(n, t)| t.requires_grad() && net.unit_of(n) == Some(i))
                    .map(|(_, t)| t.numel() as i64)
                    .sum();
                assert_eq!(params, u.params, "{} {}", arch.name(), u.name);
            }
        }
        // torchvision's ResNet-50 at 224×224: 4.1 G multiply-adds.
        let flops: f64 = Arch::ResNet50
            .units(Stem::ImageNet, 1000, (224, 224))
            .iter()
            .map(|u| u.flops)
            .sum();
        assert!((flops / 2e9 - 4.1).abs() < 0.05, "{}", flops / 2e9);
    }
}
