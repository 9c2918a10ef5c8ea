//! ResNet-18/34/50/101 as torchvision builds them (`torchvision.models.resnet`), with its
//! state_dict key names, so checkpoints load into `torchvision.models.resnetXX(num_classes=K)`
//! with `load_state_dict(strict=True)`. `Stem::Cifar` swaps the ImageNet stem (7×7/2 conv +
//! 3×3/2 max-pool) for a 3×3/1 conv without pooling, the usual CIFAR variant (not torchvision's;
//! same keys, `conv1.weight` is then [64,3,3,3]). [`ResNet::sync_batch_norm`] makes every
//! BatchNorm a SyncBatchNorm ([`crate::syncbn`]).

use tch::nn::{self, Init, ModuleT};
use tch::{Kind, Tensor};

use crate::syncbn::Group;
use crate::{Error, Result};

/// Which ResNet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    ResNet18,
    ResNet34,
    ResNet50,
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

/// The first layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stem {
    /// torchvision's: conv 7×7 stride 2, BN, ReLU, max-pool 3×3 stride 2.
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
    convs: Vec<(nn::Conv2D, BatchNorm2d)>,
    downsample: Option<(nn::Conv2D, BatchNorm2d)>,
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
        (Block { convs, downsample }, cout)
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
#[derive(Debug)]
pub struct ResNet {
    conv1: nn::Conv2D,
    bn1: BatchNorm2d,
    stem: Stem,
    layers: Vec<Block>,
    fc: nn::Linear,
    /// Every BatchNorm's `num_batches_tracked`, as views of this one tensor: a training forward
    /// adds 1 to all of them at once (torch.nn.BatchNorm2d's per-layer count, in one kernel).
    counters: Tensor,
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
        let mut bns: Vec<&BatchNorm2d> = vec![&bn1];
        for b in &layers {
            bns.extend(b.convs.iter().map(|(_, bn)| bn));
            bns.extend(b.downsample.iter().map(|(_, bn)| bn));
        }
        let counters = Tensor::zeros([bns.len() as i64], (Kind::Int64, p.device()));
        for (i, bn) in bns.iter().enumerate() {
            // Same TensorImpl as the VarStore's entry, so checkpoints see the moved data.
            bn.num_batches_tracked
                .shallow_clone()
                .set_data(&counters.select(0, i as i64));
        }
        ResNet {
            conv1,
            bn1,
            stem,
            layers,
            fc,
            counters,
            sync: None,
        }
    }

    /// Makes every BatchNorm a SyncBatchNorm over `group` (`nn.SyncBatchNorm.
    /// convert_sync_batchnorm`): training batches are normalised with the statistics of the
    /// global batch. Same parameters and buffers, so checkpoints are unchanged.
    pub fn sync_batch_norm(&mut self, group: Group) {
        self.sync = Some(group);
    }

    /// The forward pass; fails only when a SyncBatchNorm's all-reduce does.
    pub fn try_forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        if train {
            let _ = tch::no_grad(|| self.counters.shallow_clone().f_add_scalar_(1i64));
        }
        let sync = self.sync.as_ref();
        let mut y = self.bn1.forward(&x.apply(&self.conv1), train, sync)?.relu();
        if self.stem == Stem::ImageNet {
            y = y.max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false);
        }
        for b in &self.layers {
            y = b.forward(&y, train, sync)?;
        }
        Ok(y.adaptive_avg_pool2d([1, 1]).flatten(1, -1).apply(&self.fc))
    }
}

impl ModuleT for ResNet {
    /// [`ResNet::try_forward`]; panics where that fails (a SyncBatchNorm's all-reduce).
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        self.try_forward(x, train)
            .unwrap_or_else(|e| panic!("ResNet forward: {e}"))
    }
}
