//! Model parallelism (PyTorch's model-parallel ResNet example): the ResNet cut into contiguous stages of units (the stem, the
//! residual blocks, the head; [`crate::resnet::Unit`]), each stage on its own device of this
//! process, and every step's micro-batches pushed through them in GPipe order.
//!
//! This module decides the cut: at named units (`--split-at layer3` is that example's split:
//! `conv1 … layer2` on the first device, `layer3 … fc` on the second) or balanced, by the
//! forward FLOPs of each unit at the data's image size — the contiguous split whose most
//! expensive stage is cheapest. FLOPs rather than parameters: a ResNet's parameters sit in its
//! last blocks while its compute is spread evenly, so a split by parameters would leave the
//! first device doing most of the work; FLOPs rather than measured times: every rank computes
//! the same split without timing anything (the split does not model activation copies or the
//! memory-bound layers, which favour slightly smaller later stages).
//!
//! The step itself is in the trainer: all micro-batches forward (stage s+1 computes
//! micro-batch k while stage s computes k+1: on CUDA the host only queues work, and each
//! activation crosses devices as a device-to-device copy that PyTorch orders with events on
//! both devices' streams, without blocking the host), then all backward in the same order,
//! gradients accumulating; each stage's gradients are then averaged over the ranks holding that
//! stage (every rank holds every stage: a stage's group is all ranks, each on its own device).

use std::ops::Range;

use tch::Device;

use crate::resnet::Unit;
use crate::{Error, Result};

/// Where the cuts go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Split {
    /// The split with the smallest most expensive stage, by forward FLOPs.
    Balanced,
    /// Each later stage starts at the named unit: `layer3` (its first block), `layer3.2` (a
    /// block), or `fc` (the head alone).
    At(Vec<String>),
}

impl std::str::FromStr for Split {
    type Err = Error;
    /// `balanced`, or comma-separated unit names.
    fn from_str(s: &str) -> Result<Split> {
        if s == "balanced" {
            return Ok(Split::Balanced);
        }
        Ok(Split::At(
            s.split(',').map(|n| n.trim().to_string()).collect(),
        ))
    }
}

/// A pipeline: how to cut, and one device per stage.
#[derive(Debug, Clone, PartialEq)]
pub struct Pipeline {
    pub split: Split,
    pub devices: Vec<Device>,
}

/// One stage as resolved for a model.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage {
    pub units: Range<usize>,
    pub device: Device,
    /// Its first and last unit's names.
    pub first: String,
    pub last: String,
    pub params: i64,
    /// Forward FLOPs per image.
    pub flops: f64,
}

/// Cuts `units` into `devices.len()` stages as `split` says.
pub fn stages(units: &[Unit], split: &Split, devices: &[Device]) -> Result<Vec<Stage>> {
    let n = devices.len();
    if n == 0 {
        return Err(Error::Usage("a pipeline needs at least one stage".into()));
    }
    if n > units.len() {
        return Err(Error::Usage(format!(
            "--stages {n} is more than the model's {} blocks to cut between (conv1, {} residual \
             blocks, fc)",
            units.len(),
            units.len() - 2
        )));
    }
    let starts = match split {
        Split::Balanced => balanced(&units.iter().map(|u| u.flops).collect::<Vec<_>>(), n),
        Split::At(names) => named_cuts(units, names, n)?,
    };
    let ends = starts.iter().skip(1).copied().chain([units.len()]);
    Ok(starts
        .iter()
        .zip(ends)
        .zip(devices)
        .map(|((&a, b), &device)| Stage {
            units: a..b,
            device,
            first: units[a].name.clone(),
            last: units[b - 1].name.clone(),
            params: units[a..b].iter().map(|u| u.params).sum(),
            flops: units[a..b].iter().map(|u| u.flops).sum(),
        })
        .collect())
}

/// Every stage's first unit for the named cuts (each later stage's first unit, in order).
fn named_cuts(units: &[Unit], names: &[String], stages: usize) -> Result<Vec<usize>> {
    if names.len() + 1 != stages {
        return Err(Error::Usage(format!(
            "--split-at names {} cut(s) for {stages} stages: give {} (comma-separated)",
            names.len(),
            stages - 1
        )));
    }
    let mut starts = vec![0];
    for name in names {
        // `layer3` is layer3's first block; a block or `fc` by its own name.
        let at = units
            .iter()
            .position(|u| u.name == *name || u.name == format!("{name}.0"))
            .filter(|&i| i > 0)
            .ok_or_else(|| {
                Error::Usage(format!(
                    "--split-at {name}: not a place to cut; use a layer (layer2), a block \
                     (layer3.1) or fc"
                ))
            })?;
        if at <= *starts.last().unwrap() {
            return Err(Error::Usage(format!(
                "--split-at {}: the cuts must be in forward order, each after the last",
                names.join(",")
            )));
        }
        starts.push(at);
    }
    Ok(starts)
}

/// The first unit of each of `stages` contiguous non-empty stages minimising the largest
/// stage's cost (ties: the earliest cuts).
fn balanced(costs: &[f64], stages: usize) -> Vec<usize> {
    let n = costs.len();
    let prefix: Vec<f64> = std::iter::once(0.0)
        .chain(costs.iter().scan(0.0, |s, c| {
            *s += c;
            Some(*s)
        }))
        .collect();
    let sum = |a: usize, b: usize| prefix[b] - prefix[a];
    // best[s][i]: the smallest largest cost of cutting units 0..i into s stages; from[s][i]
    // where the last of them starts.
    let mut best = vec![vec![f64::INFINITY; n + 1]; stages + 1];
    let mut from = vec![vec![0usize; n + 1]; stages + 1];
    best[0][0] = 0.0;
    for s in 1..=stages {
        for i in s..=n {
            for j in (s - 1)..i {
                let c = best[s - 1][j].max(sum(j, i));
                if c < best[s][i] {
                    best[s][i] = c;
                    from[s][i] = j;
                }
            }
        }
    }
    let mut starts = vec![0; stages];
    let mut i = n;
    for s in (1..=stages).rev() {
        starts[s - 1] = from[s][i];
        i = from[s][i];
    }
    starts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resnet::{Arch, Stem};

    fn names(stages: &[Stage]) -> Vec<(String, String)> {
        stages
            .iter()
            .map(|s| (s.first.clone(), s.last.clone()))
            .collect()
    }

    #[test]
    fn seed_004s_split_and_named_cuts() {
        let units = Arch::ResNet50.units(Stem::ImageNet, 1000, (128, 128));
        let two = [Device::Cpu; 2];
        let s = stages(&units, &Split::At(vec!["layer3".into()]), &two).unwrap();
        assert_eq!(
            names(&s),
            [
                ("conv1".into(), "layer2.3".into()),
                ("layer3.0".into(), "fc".into())
            ]
        );
        assert_eq!(
            s[0].params + s[1].params,
            units.iter().map(|u| u.params).sum::<i64>()
        );
        let s = stages(
            &units,
            &"layer2.1,layer4,fc".parse().unwrap(),
            &[Device::Cpu; 4],
        )
        .unwrap();
        assert_eq!(s[1].first, "layer2.1");
        assert_eq!(s[2].units, 14..17);
        assert_eq!(s[3].units, 17..18);
        for (n, split, why) in [
            (2, "layer9", "not a place to cut"),
            (2, "conv1", "not a place to cut"),
            (3, "layer3,layer2", "forward order"),
            (3, "layer3,layer3.0", "forward order"),
            (2, "layer2,layer3", "names 2 cut(s) for 2 stages"),
        ] {
            let e = stages(&units, &split.parse().unwrap(), &vec![Device::Cpu; n]).unwrap_err();
            assert!(e.to_string().contains(why), "{split}: {e}");
            assert!(matches!(e, Error::Usage(_)));
        }
        let e = stages(&units, &Split::Balanced, &[Device::Cpu; 19]).unwrap_err();
        assert!(
            e.to_string().contains("more than the model's 18 blocks"),
            "{e}"
        );
    }

    #[test]
    fn a_balanced_split_minimises_the_largest_stage() {
        assert_eq!(balanced(&[1.0, 1.0, 1.0, 1.0], 2), [0, 2]);
        assert_eq!(balanced(&[5.0, 1.0, 1.0, 1.0, 1.0, 1.0], 2), [0, 1]);
        assert_eq!(balanced(&[1.0, 2.0, 3.0], 3), [0, 1, 2]);
        // Brute force over every 2- and 3-way cut of ResNet-18's units.
        let units = Arch::ResNet18.units(Stem::Cifar, 100, (32, 32));
        let costs: Vec<f64> = units.iter().map(|u| u.flops).collect();
        let worst = |starts: &[usize]| {
            let ends = starts.iter().skip(1).copied().chain([costs.len()]);
            starts
                .iter()
                .zip(ends)
                .map(|(&a, b)| costs[a..b].iter().sum::<f64>())
                .fold(0.0, f64::max)
        };
        let n = costs.len();
        let best2 = (1..n).map(|a| worst(&[0, a])).fold(f64::INFINITY, f64::min);
        assert_eq!(worst(&balanced(&costs, 2)), best2);
        let best3 = (1..n)
            .flat_map(|a| (a + 1..n).map(move |b| [0, a, b]))
            .map(|c| worst(&c))
            .fold(f64::INFINITY, f64::min);
        assert_eq!(worst(&balanced(&costs, 3)), best3);
        let s = stages(&units, &Split::Balanced, &[Device::Cpu; 2]).unwrap();
        // The CIFAR stem keeps 32×32 through layer1: conv1…layer2.1 is 574 MFLOPs, the rest 537.
        assert_eq!(names(&s)[0], ("conv1".into(), "layer2.1".into()));
        assert_eq!((s[0].flops / 1e6).round(), 574.0);
    }
}
