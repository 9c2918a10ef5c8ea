#!/usr/bin/env python3
"""Reference LPIPS (v0.1, VGG16) for shared/perceptual's tests, written from the lpips package's
formulas with torchvision's VGG16 (no lpips import needed):

  x in [0,255] -> x/127.5 - 1 -> (x - shift)/scale (ScalingLayer) -> vgg16.features slices
  [0:4], [4:9], [9:16], [16:23], [23:30] -> normalize_tensor (x / (||x||_c + 1e-10))
  -> d = (f0 - f1)^2 -> lin_k (1x1 conv, no bias) -> spatial mean -> sum over the five taps.

  lpips_ref.py distance W.safetensors IN.safetensors OUT.safetensors
        IN holds `a` and `b` [N,3,H,W] in [0,255]; OUT gets `dist` [N]
  lpips_ref.py script W.safetensors OUT.pt
        a TorchScript module with vgg16.pt's call signature
        forward(img, resize_images: bool = True, return_lpips: bool = False), returning the
        flattened LPIPS features when return_lpips (what the projector calls)
"""
import sys

import torch
import torch.nn.functional as F
import torchvision
from safetensors.torch import load_file, save_file

SHIFT = torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1)
SCALE = torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1)
CUTS = [(0, 4), (4, 9), (9, 16), (16, 23), (23, 30)]


def vgg_from(weights):
    vgg = torchvision.models.vgg16(weights=None).features.eval()
    vgg.load_state_dict({k[len("features."):]: v for k, v in weights.items() if k.startswith("features.")})
    lins = [weights[f"lpips.{k}"] for k in range(5)]
    return vgg, lins


def taps(vgg, x):
    x = (x / 127.5 - 1 - SHIFT) / SCALE
    out = []
    for a, b in CUTS:
        for i in range(a, b):
            x = vgg[i](x)
        out.append(x)
    return out


def lpips_distance(vgg, lins, a, b):
    total = 0
    for fa, fb, w in zip(taps(vgg, a), taps(vgg, b), lins):
        na = fa / (torch.sqrt(torch.sum(fa ** 2, dim=1, keepdim=True)) + 1e-10)
        nb = fb / (torch.sqrt(torch.sum(fb ** 2, dim=1, keepdim=True)) + 1e-10)
        d = F.conv2d((na - nb) ** 2, w.view(1, -1, 1, 1))
        total = total + d.mean(dim=[2, 3], keepdim=True)
    return total.view(-1)


class Script(torch.nn.Module):
    def __init__(self, vgg, lins):
        super().__init__()
        self.vgg = vgg[:30]  # up to relu5_3
        self.register_buffer("lins", torch.cat([w.view(-1) for w in lins]))  # offsets 0,64,192,448,960
        self.register_buffer("shift", SHIFT.clone())
        self.register_buffer("scale", SCALE.clone())

    def forward(self, img, resize_images: bool = True, return_lpips: bool = False):
        x = img
        if resize_images:
            x = F.interpolate(x, size=(224, 224), mode="area")
        x = (x / 127.5 - 1 - self.shift) / self.scale
        feats = []
        k = 0
        offsets = [0, 64, 192, 448, 960, 1472]
        for i, layer in enumerate(self.vgg):
            x = layer(x)
            if i in (3, 8, 15, 22, 29):
                f = x / (torch.sqrt(torch.sum(x ** 2, dim=1, keepdim=True)) + 1e-10)
                w = self.lins[offsets[k]:offsets[k + 1]]
                f = f * torch.sqrt(w.view(1, -1, 1, 1) / (x.shape[2] * x.shape[3]))
                feats.append(f.flatten(1))
                k += 1
        return torch.cat(feats, dim=1)


def main():
    cmd = sys.argv[1]
    if cmd == "distance":
        vgg, lins = vgg_from(load_file(sys.argv[2]))
        inp = load_file(sys.argv[3])
        with torch.no_grad():
            save_file({"dist": lpips_distance(vgg, lins, inp["a"], inp["b"]).contiguous()}, sys.argv[4])
    elif cmd == "script":
        vgg, lins = vgg_from(load_file(sys.argv[2]))
        torch.jit.script(Script(vgg, lins).eval()).save(sys.argv[3])
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
