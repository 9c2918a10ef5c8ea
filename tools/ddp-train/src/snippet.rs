//! `--print-eval-snippet`: Python (torchvision) that evaluates a checkpoint as ddp-train did.
//!
//! A checkpoint is input like any other: its metadata may have been written by anyone. Nothing
//! from it is pasted into the code as it is: the architecture and stem come from their closed
//! sets (an unknown value is an error), numbers are printed from parsed numbers, and every string
//! (class names, the path) goes through [`py_str`] / [`py_path`], an ASCII-only literal encoding
//! as Python's `ascii()` writes it.

use std::path::Path;

use anyhow::{Result, bail};
use cli_common::ResultExt as _;
use train::resnet::Arch;

/// The Python that evaluates the checkpoint at `path`.
pub fn eval_snippet(path: &Path) -> Result<String> {
    let (_, map) = train::checkpoint::load(path, tch::Device::Cpu).classified()?;
    let meta = train::checkpoint::Meta::from_map(&map, path).classified()?;
    let Some(input) = &meta.input else {
        bail!(
            "{}: written by an older ddp-train, whose checkpoints did not keep how the model sees \
             images (normalisation, size): train on, or resume, to write a checkpoint that does",
            path.display()
        );
    };
    let bad = |what: &str, value: &str| {
        anyhow::anyhow!(
            "{}: its metadata's {what} {} is not one ddp-train writes",
            path.display(),
            py_str(value)
        )
    };
    let (classes, size) = (input.num_classes, input.image_size);
    let mut s;
    if let Some(script) = &meta.script {
        s = script_lines(script, classes, size);
    } else {
        let arch: Arch = meta.arch.parse().map_err(|_| bad("arch", &meta.arch))?;
        s = resnet_lines(arch, input.stem.as_str(), classes, size).map_err(|v| bad("stem", &v))?;
    }
    let resize = match input.eval_transform.as_str() {
        "imagenet" => true,
        "none" => false,
        other => return Err(bad("eval_transform", other)),
    };
    s += &format!(
        "model.load_state_dict(load_file({}))\nmodel.eval()\n\n",
        py_path(path)
    );
    if meta.script.is_some() {
        s += &output_check_lines(classes, size);
    }
    s += &transform_lines(resize, size, (&input.mean, &input.std));
    if !meta.classes.is_empty() {
        let names: Vec<String> = meta.classes.iter().map(|c| py_str(c)).collect();
        s += &format!("classes = [{}]\n", names.join(", "));
    }
    s += "\n# from PIL import Image\n\
          # with torch.no_grad():\n\
          #     logits = model(transform(Image.open(\"image.png\").convert(\"RGB\"))[None])\n\
          # print(logits.argmax(1).item())\n";
    Ok(s)
}

/// The lines that load the user's own model: its TorchScript file (or the eager nn.Module it
/// was made from: the checkpoint's names are its state_dict's).
fn script_lines(script: &train::checkpoint::ScriptFile, classes: i64, size: i64) -> String {
    format!(
        "# A TorchScript model, {classes} classes, {size}x{size} images (written by \
         ddp-train --print-eval-snippet)\n\
         import os, torch\n\
         from torchvision import transforms\n\
         from safetensors.torch import load_file\n\n\
         # The file the run trained (sha256 {}); your eager nn.Module takes the same \
         state_dict\n\
         model = torch.jit.load({}, map_location='cpu')\n",
        script.sha256, // hex digits only (checked when the metadata is read)
        py_str(&script.file),
    )
}

/// The lines that check a TorchScript module's output: the module file may have changed since
/// the run (its state_dict is checked by load_state_dict, its output is not): the run's
/// classes, as float logits.
fn output_check_lines(classes: i64, size: i64) -> String {
    format!(
        "# The module must return float logits for the run's {classes} classes\n\
         with torch.no_grad():\n    \
         _y = model(torch.zeros(1, 3, {size}, {size}))\n\
         if tuple(_y.shape) != (1, {classes}) or not _y.is_floating_point():\n    \
         raise ValueError(f\"the module returns {{_y.dtype}} {{tuple(_y.shape)}} for one \
         {size}x{size} image, not float logits (1, {classes}) for the run's {classes} \
         classes\")\n\n"
    )
}

/// The lines of the transform evaluation applied to an image of side `size` (resized and
/// center-cropped as ImageNet's, or as it is), normalised with `(mean, std)`.
fn transform_lines(resize: bool, size: i64, (mean, std): (&[f64], &[f64])) -> String {
    let floats = |v: &[f64]| {
        let v: Vec<String> = v.iter().map(|x| format!("{x:?}")).collect();
        format!("[{}]", v.join(", "))
    };
    let mut s = String::from(
        "# An image as evaluation prepared it (a PIL image in RGB)\ntransform = transforms.Compose([\n",
    );
    if resize {
        s += &format!(
            "    transforms.Resize({}),\n    transforms.CenterCrop({size}),\n",
            size * 256 / 224
        );
    } else {
        s += &format!("    # the image as it is, {size}x{size}\n");
    }
    s += &format!(
        "    transforms.ToTensor(),\n    transforms.Normalize(mean={}, std={}),\n])\n",
        floats(mean),
        floats(std)
    );
    s
}

/// The lines that build a ResNet as ddp-train trained it (`Err(stem)` for a stem it does not
/// write).
fn resnet_lines(arch: Arch, stem: &str, classes: i64, size: i64) -> Result<String, String> {
    let arch = arch.name();
    let cifar = match stem {
        "cifar" => true,
        "imagenet" => false,
        other => return Err(other.to_string()),
    };
    let mut s = format!(
        "# {arch}, {classes} classes, {} stem, {size}x{size} images (written by ddp-train \
         --print-eval-snippet)\n\
         import os, torch, torchvision\n\
         from torchvision import transforms\n\
         from safetensors.torch import load_file\n\n\
         model = torchvision.models.{arch}(num_classes={classes})\n",
        if cifar { "cifar" } else { "imagenet" },
    );
    if cifar {
        s += "# ddp-train's CIFAR stem: a 3x3 stride-1 first convolution and no max-pool\n\
              model.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)\n\
              model.maxpool = torch.nn.Identity()\n";
    }
    Ok(s)
}

/// `s` as a Python string literal, ASCII only, as `ascii(s)` writes it (single quotes; `\\`,
/// `\'`, `\t`, `\n`, `\r`; other characters outside printable ASCII as `\xNN`, `\uNNNN` or
/// `\UNNNNNNNN`).
pub fn py_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            ' '..='~' => out.push(c),
            c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('\'');
    out
}

/// A path as Python code naming it exactly: a string literal, or for a name that is not UTF-8,
/// `os.fsdecode(b'...')` over its bytes (the snippet imports os).
pub fn py_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    if let Some(s) = path.to_str() {
        return py_str(s);
    }
    let mut out = String::from("os.fsdecode(b'");
    for &b in path.as_os_str().as_bytes() {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\'' => out.push_str("\\'"),
            b' '..=b'~' => out.push(b as char),
            b => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push_str("')");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_escape_everything_outside_printable_ascii() {
        assert_eq!(py_str("cat"), "'cat'");
        assert_eq!(
            py_str("a'b\"c\\d\ne\r\t\0\u{7f}é\u{2028}😀"),
            r#"'a\'b"c\\d\ne\r\t\x00\x7f\xe9\u2028\U0001f600'"#
        );
        assert_eq!(py_str("'''); import os #"), r"'\'\'\'); import os #'");
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/a'\xff\n.st"));
        assert_eq!(py_path(p), r"os.fsdecode(b'/tmp/a\'\xff\x0a.st')");
    }
}
