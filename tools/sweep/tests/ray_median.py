"""Ray Tune's own MedianStoppingRule (hard_stop=True) fed result streams, for sweep's tests.

  python ray_median.py CASES.json

Each case: {"settings": {"grace_period", "min_samples", "min_time_slice", "mode"}, "events":
[[kind, trial, time, value, waiting], ...]} with kind "result" (on_trial_result; `waiting`:
whether another trial is pending, which the rule asks the controller when it has too few
samples) or "complete" (on_trial_complete with that result). Values may be the string "NaN".
Prints per case the actions of the results ("CONTINUE", "STOP", "PAUSE").
"""

from ray.tune.schedulers import MedianStoppingRule

import ray_cases


class T:
    def __init__(self, i, status="RUNNING"):
        self.trial_id = str(i)
        self.status = status


class Controller:
    waiting = False

    def get_live_trials(self):
        return [T(-1, "PENDING")] if self.waiting else []


def run(case):
    s = case["settings"]
    rule = MedianStoppingRule(time_attr="t", metric="m", mode=s["mode"], grace_period=s["grace_period"],
                              min_samples_required=s["min_samples"], min_time_slice=s["min_time_slice"],
                              hard_stop=True)
    ctl, trials, actions = Controller(), {}, []
    for kind, i, t, v, waiting in case["events"]:
        if i not in trials:
            trials[i] = T(i)
            rule.on_trial_add(ctl, trials[i])
        result = {"t": t, "m": float(v)}
        if kind == "result":
            ctl.waiting = waiting
            if trials[i] in rule._stopped_trials:
                actions.append("AFTER_STOP")  # Ray stopped it before: it would get no result
                continue
            actions.append(rule.on_trial_result(ctl, trials[i], result))
        else:
            rule.on_trial_complete(ctl, trials[i], result)
    return actions


if __name__ == "__main__":
    ray_cases.main(run)
