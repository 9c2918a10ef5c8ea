#!/usr/bin/env python3
"""atheris fuzz target for scripts/convert-network-pkl's input checks (issue 7's reliability
suite; the converter is Python, so cargo-fuzz cannot drive it).

The converter's contract: whatever bytes the pickle holds, convert_stream() returns tensors and a
config or raises ConvertError (which the CLI prints as one error line, exit 1) -- never another
exception (a traceback) and never runs code the pickle names. Any other exception is a crash.

  python fuzz/python/convert_network_pkl.py --make-seeds DIR    # small valid/near-valid pickles
  python fuzz/python/convert_network_pkl.py DIR -max_total_time=60 -rss_limit_mb=2048
(scripts/fuzz.sh does both.)
"""

import importlib.machinery
import importlib.util
import io
import os
import pickle
import sys
import types
import warnings

# Libraries first, uninstrumented: coverage feedback is wanted for the converter's own code.
import numpy  # noqa: F401
import safetensors.torch  # noqa: F401
import torch  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "convert-network-pkl")


def load_converter():
    loader = importlib.machinery.SourceFileLoader("convert_network_pkl", SCRIPT)
    spec = importlib.util.spec_from_loader("convert_network_pkl", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


conv = None


def TestOneInput(data):
    try:
        conv.convert_stream(io.BytesIO(data), "G_ema")
    except conv.ConvertError:
        pass


def make_seeds(out):
    """Writes a few small pickles shaped like StyleGAN2-ADA's: a persistent Generator holding
    tiny tensors, with and without the snapshot dict, and with a foreign global."""
    import torch

    # Stand-ins for upstream's modules so that plain pickle writes the same global names.
    pers = types.ModuleType("torch_utils.persistence")
    util = types.ModuleType("dnnlib.util")

    def _reconstruct_persistent_obj(meta):
        return meta

    _reconstruct_persistent_obj.__module__ = "torch_utils.persistence"
    _reconstruct_persistent_obj.__qualname__ = "_reconstruct_persistent_obj"
    pers._reconstruct_persistent_obj = _reconstruct_persistent_obj

    class EasyDict(dict):
        pass

    EasyDict.__module__ = "dnnlib.util"
    EasyDict.__qualname__ = "EasyDict"
    util.EasyDict = EasyDict
    sys.modules.update({"torch_utils": types.ModuleType("torch_utils"), "torch_utils.persistence": pers,
                        "dnnlib": types.ModuleType("dnnlib"), "dnnlib.util": util})

    class Persistent:
        def __init__(self, class_name, state):
            self.meta = {"type": "class", "version": 4, "module_src": "", "class_name": class_name, "state": state}

        def __reduce__(self):
            return (_reconstruct_persistent_obj, (self.meta,))

    def module(class_name, params=None, modules=None, **extra):
        state = {"_parameters": params or {}, "_buffers": {}, "_modules": modules or {},
                 "_non_persistent_buffers_set": set(), "training": False}
        state.update(extra)
        return Persistent(class_name, state)

    t = lambda *shape: torch.nn.Parameter(torch.arange(int(torch.tensor(shape).prod()), dtype=torch.float32).reshape(shape) / 7)
    gen = module(
        "Generator",
        modules={
            "mapping": module("MappingNetwork", modules={"fc0": module("FullyConnectedLayer", {"weight": t(2, 2), "bias": t(2)})}),
            "synthesis": module("SynthesisNetwork", modules={"b4": module("SynthesisBlock", {"const": t(2, 4, 4)})}),
        },
        _init_args=(),
        _init_kwargs=EasyDict(z_dim=2, c_dim=0, w_dim=2, img_resolution=4, img_channels=3,
                              mapping_kwargs=EasyDict(num_layers=1), synthesis_kwargs=EasyDict(channel_base=64, conv_clamp=256)),
    )
    os.makedirs(out, exist_ok=True)
    seeds = {
        "snapshot.pkl": {"G": gen, "D": None, "G_ema": gen, "augment_pipe": None},
        "bare.pkl": gen,
        "no-const.pkl": {"G_ema": module("Generator", _init_kwargs=EasyDict(z_dim=2, c_dim=0, w_dim=2, img_resolution=4, img_channels=3))},
        "foreign.pkl": {"G_ema": os.system},
    }
    for name, obj in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            pickle.dump(obj, f, protocol=4)
    # The seeds are what the converter accepts or refuses cleanly.
    tensors, cfg = conv.convert_stream(open(os.path.join(out, "snapshot.pkl"), "rb"), "G_ema")
    assert "synthesis.b4.const" in tensors and cfg["z_dim"] == 2, cfg


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--make-seeds":
        conv = load_converter()
        make_seeds(sys.argv[2])
        sys.exit(0)
    import atheris

    warnings.filterwarnings("ignore")  # torch's notes on odd pickle protocols, once per input

    conv = load_converter()
    # Coverage for every function and method the converter defines.
    for name, obj in list(vars(conv).items()):
        if getattr(obj, "__module__", None) != conv.__name__:
            continue
        if isinstance(obj, types.FunctionType):
            setattr(conv, name, atheris.instrument_func(obj))
        elif isinstance(obj, type):
            for mname, m in list(vars(obj).items()):
                if isinstance(m, types.FunctionType):
                    setattr(obj, mname, atheris.instrument_func(m))
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
