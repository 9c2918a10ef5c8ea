"""Optuna's TPESampler (its defaults, a seed) asked for one trial after another and told the
values a sweep recorded, for sweep's tests: prints the parameters Optuna suggests.

  python optuna_replay.py CASE.json

CASE: {"seed": N, "mode": "min"|"max", "space": {name: dim}, "values": [value of trial i]}, a dim
being {"float": [low, high], "log": bool} or {"int": [low, high]} (high included) or
{"choice": [values]}. Parameters are suggested in name order (as sweep orders them). Prints
[{name: value}, ...], one per value.
"""
import json
import sys

import optuna

optuna.logging.set_verbosity(optuna.logging.ERROR)


def main():
    case = json.load(open(sys.argv[1]))
    direction = "minimize" if case["mode"] == "min" else "maximize"
    study = optuna.create_study(direction=direction, sampler=optuna.samplers.TPESampler(seed=case["seed"]))
    asked = []
    for v in case["values"]:
        t = study.ask()
        params = {}
        for name in sorted(case["space"]):
            d = case["space"][name]
            if "float" in d:
                params[name] = t.suggest_float(name, *d["float"], log=d.get("log", False))
            elif "int" in d:
                params[name] = t.suggest_int(name, *d["int"])
            else:
                params[name] = t.suggest_categorical(name, d["choice"])
        asked.append(params)
        study.tell(t, v)
    json.dump(asked, sys.stdout)


if __name__ == "__main__":
    main()
