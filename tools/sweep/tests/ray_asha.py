"""Ray Tune's own AsyncHyperBandScheduler fed result streams, for sweep's tests.

  python ray_asha.py replay CASES.json   # streams as events, decisions out
  python ray_asha.py sequential CASES.json  # whole curves run one trial after another

replay: each case is {"settings": {...}, "seed": N, "trials": N, "events": [[kind, trial, time,
value], ...]} with kind "result" (on_trial_result) or "complete" (on_trial_complete with that
result, as Ray's controller calls it after a STOP or when a trial ends). Prints per case the
actions ("CONTINUE"/"STOP") of the results, each trial's bracket index and every rung's recorded
values.

sequential: each case is {"settings", "seed", "curves": [[[time, value], ...] per trial]}: trials
run one after another (max_concurrent_trials=1), each until Ray stops it or its curve ends.
Prints per case {"stopped": {trial: time}, "completed": [...]}.

np.random.seed(seed) is called before the trials are added, in trial order.
"""
import json
import sys

import numpy as np
from ray.tune.schedulers import AsyncHyperBandScheduler, TrialScheduler


class T:
    def __init__(self, i):
        self.trial_id = str(i)


def scheduler(s):
    return AsyncHyperBandScheduler(
        time_attr="t",
        metric="m",
        mode=s["mode"],
        max_t=s["max_t"],
        grace_period=s["grace_period"],
        reduction_factor=s["reduction_factor"],
        brackets=s["brackets"],
        stop_last_trials=True,
    )


def num(x):
    return int(x) if float(x).is_integer() else x


def replay(case):
    sched = scheduler(case["settings"])
    np.random.seed(case["seed"])
    trials = [T(i) for i in range(case["trials"])]
    for t in trials:
        sched.on_trial_add(None, t)
    brackets = [sched._brackets.index(sched._trial_info[t.trial_id]) for t in trials]
    actions = []
    for kind, i, time, value in case["events"]:
        result = {"t": num(time), "m": float(value) if isinstance(value, str) else value}
        if kind == "result":
            actions.append(sched.on_trial_result(None, trials[i], result))
        else:
            sched.on_trial_complete(None, trials[i], result)
    # NaN as the string "NaN" (json.dump would write a bare NaN, which is not JSON).
    rungs = [
        [[m, {k: "NaN" if v != v else v for k, v in rec.items()}] for m, rec in b._rungs]
        for b in sched._brackets
    ]
    return {"actions": actions, "brackets": brackets, "rungs": rungs}


def sequential(case):
    sched = scheduler(case["settings"])
    np.random.seed(case["seed"])
    trials = [T(i) for i in range(len(case["curves"]))]
    for t in trials:
        sched.on_trial_add(None, t)
    stopped, completed = {}, []
    for t, curve in zip(trials, case["curves"]):
        last = None
        for time, value in curve:
            last = {"t": num(time), "m": value}
            if sched.on_trial_result(None, t, last) == TrialScheduler.STOP:
                sched.on_trial_complete(None, t, last)
                if time >= case["settings"]["max_t"]:
                    completed.append(int(t.trial_id))
                else:
                    stopped[t.trial_id] = time
                break
        else:
            if last is not None:
                sched.on_trial_complete(None, t, last)
            completed.append(int(t.trial_id))
    return {"stopped": stopped, "completed": completed}


if __name__ == "__main__":
    how, path = sys.argv[1], sys.argv[2]
    with open(path) as f:
        cases = json.load(f)
    fn = {"replay": replay, "sequential": sequential}[how]
    json.dump([fn(c) for c in cases], sys.stdout)
