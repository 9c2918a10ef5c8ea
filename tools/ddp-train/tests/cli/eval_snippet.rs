//! `--print-eval-snippet`: the Python it prints evaluates a checkpoint in torchvision as training
//! did, and runs nothing a crafted checkpoint says.

use super::*;

/// `--print-eval-snippet`'s Python, run on the validation images with torchvision's own code:
/// the loss and top-1 of the checkpoint's epoch record (CIFAR binaries with the CIFAR stem; an
/// image folder through the ImageNet evaluation transform, with its class names).
#[test]
fn the_eval_snippet_evaluates_the_checkpoint_in_torchvision_as_training_did() {
    let folder = digits_twice().join("folder");
    // (what, --data, flags, validation data, ranks): with two ranks, each rank's BatchNorm
    // statistics differ after the last step; the checkpoint keeps rank 0's, so evaluation
    // must use rank 0's too (as DDP's first forward under no_grad broadcasts them).
    let cases = [
        (
            "cifar",
            format!("cifar100:{}", digits_twice().display()),
            vec!["--stem", "cifar"],
            digits_twice().to_path_buf(),
            1,
        ),
        (
            "folder",
            format!("imagefolder:{}", folder.display()),
            vec!["--image-size", "32", "--transform", "imagenet"],
            folder.join("val"),
            1,
        ),
        (
            "cifar",
            format!("cifar100:{}", digits_twice().display()),
            vec!["--stem", "cifar"],
            digits_twice().to_path_buf(),
            2,
        ),
    ];
    let check = r#"
import json, sys
import numpy as np
from PIL import Image
mode, data = sys.argv[1], sys.argv[2]
if mode == "cifar":
    raw = np.fromfile(data + "/test.bin", np.uint8).reshape(-1, 2 + 3072)
    ys = raw[:, 1].astype(np.int64)
    images = [Image.fromarray(r[2:].reshape(3, 32, 32).transpose(1, 2, 0)) for r in raw]
else:
    ds = torchvision.datasets.ImageFolder(data)
    assert ds.classes == classes, (ds.classes, classes)
    images = [Image.open(p).convert("RGB") for p, _ in ds.samples]
    ys = np.array([y for _, y in ds.samples])
x = torch.stack([transform(i) for i in images])
with torch.no_grad():
    logits = model(x)
loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(ys)).item()
print(json.dumps({"loss": loss, "top1": 100 * float((logits.argmax(1).numpy() == ys).mean())}))
"#;
    // Each case's snippet and check as a script, all run by one Python process (each start
    // that imports torch costs seconds): (what, script, mode, validation data, the epoch record,
    // the snippet, the checkpoint's directory, which the snippet reads).
    let dir = tempfile::tempdir().unwrap();
    let mut scripts = Vec::new();
    for (i, (mode, data, args, val, ranks)) in cases.into_iter().enumerate() {
        let ck = tempfile::tempdir().unwrap();
        let port = free_port();
        let outs = run_all((0..ranks).map(|rank| {
            let mut c = cmd_on(&data);
            c.args(&args)
                .args(["--epochs", "1", "--max-steps", "8", "--batch-size", "32"])
                .arg("--checkpoint-dir")
                .arg(ck.path());
            if ranks > 1 {
                c.args(rank_of(rank, ranks, &port));
            }
            c
        }));
        let run = records(&outs[0]);
        let last = ck.path().join("last.safetensors");
        let out = Command::new(BIN)
            .arg("--print-eval-snippet")
            .arg(&last)
            .output()
            .unwrap();
        ok(&out);
        let snippet = String::from_utf8(out.stdout).unwrap();
        let script = dir.path().join(format!("eval{i}.py"));
        std::fs::write(&script, format!("{snippet}\n{check}")).unwrap();
        let what = format!("{mode}, {ranks} rank(s)");
        scripts.push((what, script, mode, val, run.items[0].clone(), snippet, ck));
    }
    // Runs each script as `python SCRIPT MODE DATA` would, in a namespace of its own.
    let driver = r#"
import runpy, sys
for script, mode, data in zip(*[iter(sys.argv[1:])] * 3):
    sys.argv = [script, mode, data]
    runpy.run_path(script, run_name="__main__")
    sys.stdout.flush()
"#;
    let mut py = Command::new(testkit::python());
    py.args(["-c", driver]);
    for (_, script, mode, val, ..) in &scripts {
        py.arg(script).arg(mode).arg(val);
    }
    let out = py.output().unwrap();
    let snippets: Vec<&str> = scripts.iter().map(|s| s.5.as_str()).collect();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        snippets.join("\n")
    );
    let lines: Vec<Value> = (String::from_utf8_lossy(&out.stdout).lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), scripts.len(), "one result per script");
    for ((what, _, _, _, rec, snippet, _), got) in scripts.iter().zip(&lines) {
        // The same float operations in another library's order: the loss to 1e-4, top-1 to one
        // image in 360 (an argmax that flips on a tie).
        let loss = got["loss"].as_f64().unwrap();
        assert!(
            (loss - rec.val_loss).abs() <= 1e-4 * rec.val_loss.abs().max(1.0),
            "{what}: loss {loss} vs {}\n{snippet}",
            rec.val_loss
        );
        let top1 = got["top1"].as_f64().unwrap();
        assert!(
            (top1 - rec.val_top1).abs() <= 0.3,
            "{what}: top-1 {top1} vs {}\n{snippet}",
            rec.val_top1
        );
    }
}

/// A checkpoint's metadata may come from anyone: `--print-eval-snippet` pastes none of it as
/// code. Hostile class names and a hostile file name come out as the same strings in Python
/// (nothing they say runs); an architecture or stem outside ddp-train's is an error.
#[test]
fn the_eval_snippet_runs_no_code_from_a_crafted_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ck'\"\n; touch PWNED #");
    std::fs::create_dir_all(&dir).unwrap();
    let hostile = [
        "cat",
        "'); open('PWNED', 'w') #",
        "\"\"\"\nopen('PWNED', 'w')\n\"\"\"",
        "\\'; __import__('os').system('touch PWNED') #",
        "line\u{2028}sep\u{85}nel\0nul\x0cff",
        "é😀",
    ];
    // One Python process writes the three checkpoints: (file name, arch, stem) each.
    let make = r#"
import json, sys, torchvision
from safetensors.torch import save_file
classes = json.loads(sys.argv[1])
m = torchvision.models.resnet18(num_classes=len(classes))
state = {k: v.contiguous() for k, v in m.state_dict().items()}
for path, arch, stem in zip(*[iter(sys.argv[2:])] * 3):
    meta = {"epoch": "1", "arch": arch, "stem": stem, "num_classes": str(len(classes)),
            "image_size": "32", "normalize_mean": "[0.5, 0.5, 0.5]",
            "normalize_std": "[0.5, 0.5, 0.5]", "eval_transform": "none",
            "classes": json.dumps(classes)}
    save_file(state, path, metadata=meta)
"#;
    let python = testkit::python();
    let good = ("x'\n\".safetensors", "resnet18", "imagenet");
    let crafted = [
        (
            "arch.safetensors",
            "resnet18(); __import__('os').system('touch PWNED') #",
            "imagenet",
        ),
        ("stem.safetensors", "resnet18", "cifar\nopen('PWNED', 'w')"),
    ];
    let mut c = Command::new(&python);
    c.args(["-c", make])
        .arg(serde_json::to_string(&hostile).unwrap());
    for (name, arch, stem) in std::iter::once(good).chain(crafted) {
        c.arg(dir.join(name)).args([arch, stem]);
    }
    ok(&c.output().unwrap());
    let snippet = |path: &Path| {
        Command::new(BIN)
            .arg("--print-eval-snippet")
            .arg(path)
            .current_dir(tmp.path())
            .output()
            .unwrap()
    };
    let out = snippet(&dir.join(good.0));
    ok(&out);
    let code = String::from_utf8(out.stdout).unwrap();
    let check = "\nimport json, sys\njson.dump(classes, sys.stdout)\n";
    let out = Command::new(&python)
        .args(["-c", &format!("{code}{check}")])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{code}",
        String::from_utf8_lossy(&out.stderr)
    );
    let classes: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(classes, hostile, "{code}");
    for (name, ..) in crafted {
        let out = snippet(&dir.join(name));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("bad arch") || err.contains("bad stem"),
            "{err}"
        );
        assert!(out.stdout.is_empty());
    }
    assert!(!tmp.path().join("PWNED").exists() && !dir.join("PWNED").exists());
}
