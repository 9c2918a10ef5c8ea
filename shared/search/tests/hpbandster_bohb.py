"""BOHB's config generator as HpBandSter makes it (hpbandster 0.7.4 on ConfigSpace 1.2.2,
statsmodels 0.15.0, scipy 1.17.1, numpy 2.4.6), recorded for shared/search/tests/bohb_hpbandster.rs.

  scripts/setup --bench     # HpBandSter and ConfigSpace, pinned (benchmarks only, not CI's venv)
  .venv/bin/python shared/search/tests/hpbandster_bohb.py > shared/search/tests/bohb_hpbandster.json

Each case: a search space (sweep's JSON primitives, converted as Ray's TuneBOHB converts them),
a seed (the ConfigSpace seeded with it, as TuneBOHB does, and numpy's global generator, which
BOHB's own draws come from), and a run: configs asked for one at a time, each observed at a
budget (1, 3 or 9) with a loss from a noisy test function of its values, so that the KDE models
are fitted per budget and sampled from. Prints the cases with every config the generator gave
and whether it came from the model.
"""
import json
import logging
import math
import sys

import numpy as np
import ConfigSpace as CS
from hpbandster.optimizers.config_generators.bohb import BOHB

logging.disable(logging.WARNING)

SPACES = [
    {"x": {"uniform": [0.0, 1.0]}, "y": {"uniform": [-5.0, 10.0]}},
    {"lr": {"loguniform": [1e-4, 1.0]}, "wd": {"loguniform": [1e-6, 1e-2]}},
    {"lr": {"loguniform": [1e-4, 1.0]}, "layers": {"randint": [1, 9]},
     "opt": {"choice": ["sgd", "adam", "lamb"]}},
    {"a": {"uniform": [0.0, 1.0]}, "b": {"uniform": [0.0, 1.0]}, "c": {"uniform": [0.0, 1.0]},
     "n": {"randint": [2, 5]}},
    {"batch": {"choice": [16, 32, 64, 128]}, "x": {"uniform": [0.0, 2.0]}},
]


def config_space(space):
    """TuneBOHB.convert_search_space, for sweep's primitives."""
    cs = CS.ConfigurationSpace()
    for name, spec in space.items():
        (kind, args), = spec.items()
        if kind == "uniform":
            hp = CS.UniformFloatHyperparameter(name, lower=args[0], upper=args[1])
        elif kind == "loguniform":
            hp = CS.UniformFloatHyperparameter(name, lower=args[0], upper=args[1], log=True)
        elif kind == "randint":
            hp = CS.UniformIntegerHyperparameter(name, lower=args[0], upper=args[1] - 1)
        elif kind == "choice":
            hp = CS.CategoricalHyperparameter(name, choices=args)
        else:
            raise ValueError(kind)
        cs.add(hp)
    return cs


def plain(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, np.str_):
        return str(v)
    return v


def loss(config, budget, rng):
    s = 0.0
    for k, v in sorted(config.items()):
        if isinstance(v, str):
            s += 0.3 * (len(v) % 3)
        elif k in ("lr", "wd"):
            s += (math.log10(v) + 2) ** 2
        else:
            s += (float(v) - 0.3) ** 2
    return s * (1 + 1.0 / budget) + 0.05 * rng.standard_normal()


class Job:
    def __init__(self, config, budget, value):
        self.result = {"loss": value}
        self.kwargs = {"budget": budget, "config": config}
        self.exception = None


def run(space, seed, n):
    cs = config_space(space)
    cs.seed(seed)
    np.random.seed(seed)
    noise = np.random.RandomState(seed + 1000)  # the test's own, not BOHB's
    bohb = BOHB(cs)
    events = []
    for i in range(n):
        config, info = bohb.get_config(None)
        config = {k: plain(v) for k, v in config.items()}
        budget = [1.0, 3.0, 9.0][i % 3] if i >= 12 else 1.0
        value = loss(config, budget, noise)
        events.append({"config": config, "model": bool(info.get("model_based_pick", False)),
                       "budget": budget, "loss": value})
        bohb.new_result(Job(config, budget, value))
    return events


def main():
    cases = []
    for k, space in enumerate(SPACES):
        for seed in range(4):
            cases.append({"space": space, "seed": seed + 10 * k,
                          "events": run(space, seed + 10 * k, 40)})
    json.dump(cases, sys.stdout, indent=None)


if __name__ == "__main__":
    main()
