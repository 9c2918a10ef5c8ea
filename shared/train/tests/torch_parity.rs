//! Against PyTorch itself (torch/torchvision from the project venv): the sampler's index lists,
//! and torchvision loading our checkpoints with the same logits.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Command;

use tch::nn::{self, ModuleT};
use tch::{Device, Kind, Tensor};
use train::resnet::{Arch, ResNet, Stem};
use train_data::sampler::{DistributedSampler, randperm};

fn python(script: &str) -> String {
    let out = Command::new(testkit::python())
        .arg("-c")
        .arg(script)
        .output()
        .unwrap();
    testkit::ok(&out);
    String::from_utf8(out.stdout).unwrap()
}

/// libtorch's generator is process-global: tests that seed and draw from it run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn sampler_index_lists_equal_torchs_distributed_sampler() {
    let cases = [
        (10usize, 3usize, true, false, 0u64, 0u64),
        (1000, 4, true, false, 42, 3),
        (1001, 4, true, true, 7, 1),
        (7, 3, false, false, 0, 0),
        (50_000, 8, true, false, 1234, 5),
    ];
    let mut script =
        String::from("import torch\nfrom torch.utils.data import DistributedSampler\n");
    for (n, w, shuffle, drop_last, seed, epoch) in cases {
        script += &format!(
            "for r in range({w}):\n    s = DistributedSampler(range({n}), num_replicas={w}, rank=r, shuffle={}, seed={seed}, drop_last={})\n    s.set_epoch({epoch})\n    print(','.join(map(str, list(s))))\n",
            if shuffle { "True" } else { "False" },
            if drop_last { "True" } else { "False" },
        );
    }
    script += "g = torch.Generator(); g.manual_seed(99); print(','.join(map(str, torch.randperm(100000, generator=g).tolist())))\n";
    let out = python(&script);
    let mut lines = out.lines();
    for (n, w, shuffle, drop_last, seed, epoch) in cases {
        for rank in 0..w {
            let s = DistributedSampler {
                len: n,
                world: w,
                rank,
                shuffle,
                seed,
                drop_last,
            };
            let ours: Vec<String> = s.indices(epoch).iter().map(usize::to_string).collect();
            assert_eq!(
                ours.join(","),
                lines.next().unwrap(),
                "n={n} world={w} rank={rank}"
            );
        }
    }
    let ours: Vec<String> = randperm(100_000, 99).iter().map(usize::to_string).collect();
    assert_eq!(ours.join(","), lines.next().unwrap());
}

#[test]
fn torchvision_loads_our_checkpoints_strictly_with_the_same_logits() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    // Both architectures' checkpoints and logits written first, then checked by one Python
    // process (each start that imports torchvision costs seconds): a line per architecture.
    let archs = [(Arch::ResNet18, "resnet18"), (Arch::ResNet50, "resnet50")];
    let mut script =
        String::from("import torch, torchvision\nfrom safetensors.torch import load_file\n");
    for (arch, tv) in archs {
        tch::manual_seed(5);
        let vs = nn::VarStore::new(Device::Cpu);
        let model = ResNet::new(&vs.root(), arch, 100, Stem::ImageNet);
        // A few training-mode forwards so the BN running statistics are not trivial.
        for _ in 0..2 {
            let _ = model.forward_t(
                &Tensor::randn([4, 3, 64, 64], (Kind::Float, Device::Cpu)),
                true,
            );
        }
        let x = Tensor::randn([2, 3, 64, 64], (Kind::Float, Device::Cpu));
        let ours = tch::no_grad(|| model.forward_t(&x, false));
        let ck = dir.path().join(format!("{tv}.safetensors"));
        let tensors: BTreeMap<String, Tensor> = vs.variables().into_iter().collect();
        assert!(tensors.contains_key("layer1.0.bn1.num_batches_tracked"));
        train::checkpoint::save(&ck, &tensors, &HashMap::new()).unwrap();
        let io = dir.path().join(format!("{tv}.io.safetensors"));
        Tensor::write_safetensors(&[("x", &x), ("logits", &ours)], &io).unwrap();
        script += &format!(
            r#"
m = torchvision.models.{tv}(num_classes=100)
m.load_state_dict(load_file("{ck}"), strict=True)
m.eval()
io = load_file("{io}")
with torch.no_grad():
    y = m(io["x"])
print((y - io["logits"]).abs().max().item(), io["logits"].abs().max().item(), int(m.layer1[0].bn1.num_batches_tracked))
"#,
            ck = ck.display(),
            io = io.display()
        );
    }
    let out = python(&script);
    assert_eq!(out.lines().count(), archs.len(), "{out}");
    for ((_, tv), line) in archs.into_iter().zip(out.lines()) {
        let v: Vec<f64> = line
            .split_whitespace()
            .map(|s| s.parse().unwrap())
            .collect();
        // fp32 CPU, the same kernels in the same order: 1e-4 absolute is the issue's bound.
        assert!(
            v[0] <= 1e-4,
            "{tv}: max |Δlogit| {} (max |logit| {})",
            v[0],
            v[1]
        );
        assert_eq!(v[2], 2.0, "num_batches_tracked travels");
    }
}

/// A training step's augmentation draws come from libtorch's generator seeded with
/// `step_seed`; the PyTorch reference loop (scripts/reference/train_ref.py) seeds its steps with
/// its own copy of the formula: both give the same draws, negative seeds and wrap-around
/// included.
#[test]
fn step_seeds_draw_what_the_reference_loop_draws() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cases = [
        (0i64, 0usize, 0usize, 0usize),
        (9, 2, 17, 0),
        (-3, 1, 5, 3),
        (i64::MAX, 7, 123, 1),
    ];
    let mut script = format!(
        "import sys, torch\nsys.path.insert(0, {:?})\nfrom train_ref import step_seed\n",
        root.join("scripts/reference").display().to_string()
    );
    for (seed, epoch, step, rank) in cases {
        script += &format!(
            "torch.manual_seed(step_seed({seed}, {epoch}, {step}, {rank})); print(','.join(map(str, torch.randint(9, (6,)).tolist())))\n"
        );
    }
    let out = python(&script);
    let _serial = serial();
    for ((seed, epoch, step, rank), line) in cases.into_iter().zip(out.lines()) {
        tch::manual_seed(train::trainer::step_seed(seed, epoch, step, rank));
        let ours: Vec<i64> =
            Vec::try_from(Tensor::randint(9, [6], (Kind::Int64, Device::Cpu))).unwrap();
        let ours: Vec<String> = ours.iter().map(i64::to_string).collect();
        assert_eq!(
            ours.join(","),
            line,
            "seed {seed} epoch {epoch} step {step} rank {rank}"
        );
    }
}
