"""Ray Tune's own PopulationBasedTraining (asynchronous) driven through a stand-in controller,
for sweep's tests.

  python ray_pbt.py CASES.json

Each case: {"settings": {"perturbation_interval", "burn_in_period", "quantile_fraction",
"resample_probability", "perturbation_factors", "mode", "seed"}, "space": {name: spec} (sweep's
JSON primitives; grid and choice are list mutations, the others distributions), "configs": [the
trials' first configs], "events": [...]}. `random.seed(seed)` and `np.random.seed(seed)` come
first; the trials are then added in order. Events:
  ["choose"]              choose_trial_to_run: the trial it returns (or null)
  ["start", i]            the controller runs trial i (status RUNNING)
  ["pending", i]          trial i was interrupted (the sweep was killed): PENDING again
  ["result", i, t, v]     on_trial_result: its action (PAUSE makes the trial PAUSED; NOOP means
                          the scheduler paused it to copy another) and, for a copy,
                          {"from", "config", "ops"}
  ["complete", i]         the trial ended: TERMINATED
  ["error", i]            the trial failed: ERROR
Prints per case one output per event: [answer, copy or null].
"""
import random

import numpy as np
from ray import tune
from ray.tune.experiment import Trial
from ray.tune.schedulers import PopulationBasedTraining

import ray_cases


class Stub:
    pass


class T:
    def __init__(self, i, config):
        self.trial_id = str(i)
        self.index = i
        self.status = Trial.PENDING
        self.config = dict(config)
        self.evaluated_params = {}
        self.experiment_tag = str(i)
        self.last_result = {}
        self.run_metadata = Stub()
        self.run_metadata.checkpoint_manager = Stub()
        self.run_metadata.checkpoint_manager.checkpoint_config = Stub()
        self.run_metadata.checkpoint_manager.checkpoint_config.num_to_keep = None

    def is_finished(self):
        return self.status in (Trial.TERMINATED, Trial.ERROR)

    def set_experiment_tag(self, tag):
        self.experiment_tag = tag

    def set_config(self, config):
        self.config = config


class Controller:
    search_alg = None

    def __init__(self, trials):
        self.trials = trials

    def get_trials(self):
        return self.trials

    def _schedule_trial_save(self, trial, result=None):
        return "checkpoint of trial %d" % trial.index

    def pause_trial(self, trial, should_checkpoint=True):
        trial.status = Trial.PAUSED


class Pbt(PopulationBasedTraining):
    """Keeps what Ray only logs: the trial each copy is from and the operations of _explore."""
    ops = None
    copied = {}

    def _get_new_config(self, trial, trial_to_clone):
        config, ops = super()._get_new_config(trial, trial_to_clone)
        self.ops = ops
        self.copied[trial.index] = trial_to_clone.index
        return config, ops


def mutation(spec):
    if not isinstance(spec, dict):
        return None
    (kind, args), = spec.items()
    if kind in ("grid", "grid_search", "choice"):
        return list(args)
    return {"uniform": tune.uniform, "loguniform": tune.loguniform, "randint": tune.randint,
            "quniform": tune.quniform}[kind](*args)


def run(case):
    s = case["settings"]
    mutations = {k: m for k, m in ((k, mutation(v)) for k, v in case["space"].items())
                 if m is not None}
    random.seed(s["seed"])
    np.random.seed(s["seed"])
    pbt = Pbt(time_attr="t", metric="m", mode=s["mode"],
              perturbation_interval=s["perturbation_interval"],
              burn_in_period=s["burn_in_period"], hyperparam_mutations=mutations,
              quantile_fraction=s["quantile_fraction"],
              resample_probability=s["resample_probability"],
              perturbation_factors=tuple(s["perturbation_factors"]), log_config=False)
    trials = [T(i, c) for i, c in enumerate(case["configs"])]
    ctl = Controller(trials)
    for t in trials:
        pbt.on_trial_add(ctl, t)
    out = []
    for ev in case["events"]:
        kind, copy = ev[0], None
        known, answer = ray_cases.control(pbt, ctl, trials, ev)
        if kind == "result":
            t = trials[ev[1]]
            before = pbt._num_perturbations
            pbt.ops = None
            answer = pbt.on_trial_result(ctl, t, {"t": float(ev[2]), "m": float(ev[3])})
            if pbt._num_perturbations != before:
                copy = {"from": pbt.copied[t.index], "config": t.config, "ops": pbt.ops}
            if answer == "PAUSE":
                t.status = Trial.PAUSED
        elif kind == "complete":
            trials[ev[1]].status = Trial.TERMINATED
        elif kind == "error":
            trials[ev[1]].status = Trial.ERROR
        elif not known:
            raise ValueError(kind)
        out.append([answer, copy])
    return out


if __name__ == "__main__":
    ray_cases.main(run)
