"""Ray Tune's own HyperBandScheduler (or, with "bohb": true in the settings, HyperBandForBOHB)
driven through a stand-in controller, for sweep's tests.

  python ray_hyperband.py CASES.json

Each case: {"settings": {"max_t", "reduction_factor", "mode", "bohb"}, "trials": N, "events":
[...]}. Without "bohb" the N trials are added first, in order (Ray adds every trial up front when
the search makes them all at once); with it, each when an ["add", i] event says (a searcher's
trials are made one at a time). Events, in order:
  ["add", i]              on_trial_add (bohb)
  ["choose"]              choose_trial_to_run: the trial it returns (or null)
  ["start", i]            the controller runs trial i (status RUNNING)
  ["pending", i]          trial i was interrupted (the sweep was killed): PENDING again
  ["result", i, t, v]     on_trial_result: its action; PAUSE makes the trial PAUSED, STOP makes
                          the controller stop it (on_trial_complete with its last result)
  ["complete", i]         the trial's command finished: on_trial_complete, then TERMINATED
  ["error", i]            the trial failed for good: on_trial_error, then ERROR
Values may be the string "NaN". Prints per case one output per event: [action or chosen trial
or null, [trials the controller was told to stop while handling the event, in order], the
budget HyperBandForBOHB gives the result (or null)]. An exception (Ray asserting on a state it
cannot be in) is output as ["EXCEPTION: ...", [], null] and ends the case.
"""

from ray.tune.experiment import Trial
from ray.tune.schedulers import HyperBandForBOHB, HyperBandScheduler

import ray_cases


class T:
    def __init__(self, i):
        self.trial_id = str(i)
        self.index = i
        self.status = Trial.PENDING
        self.is_saving = False
        self.last_result = None

    def __repr__(self):
        return f"T{self.index}"


class Searcher:
    def on_pause(self, trial_id):
        pass

    def on_unpause(self, trial_id):
        pass


class SearchAlg:
    searcher = Searcher()


class Controller:
    search_alg = SearchAlg()

    def __init__(self, scheduler, trials):
        self.scheduler = scheduler
        self.trials = trials
        self.stopped = []

    def get_trials(self):
        return self.trials

    def stop_trial(self, t):
        # TuneController.stop_trial, as far as the scheduler sees it.
        if t.status in (Trial.ERROR, Trial.TERMINATED):
            return
        if t.status in (Trial.PENDING, Trial.PAUSED):
            self.scheduler.on_trial_remove(self, t)
        elif t.status == Trial.RUNNING:
            self.scheduler.on_trial_complete(self, t, t.last_result)
        t.status = Trial.TERMINATED
        self.stopped.append(t.index)


def number(v):
    return float(v)


def run(case):
    s = case["settings"]
    cls = HyperBandForBOHB if s.get("bohb") else HyperBandScheduler
    hb = cls(time_attr="t", metric="m", mode=s["mode"], max_t=s["max_t"],
             reduction_factor=s["reduction_factor"])
    trials = [T(i) for i in range(case["trials"])]
    ctl = Controller(hb, trials)
    if not s.get("bohb"):
        for t in trials:
            hb.on_trial_add(ctl, t)
    out = []
    for ev in case["events"]:
        ctl.stopped = []
        budget = None
        try:
            kind = ev[0]
            known, answer = ray_cases.control(hb, ctl, trials, ev)
            if kind == "add":
                hb.on_trial_add(ctl, trials[ev[1]])
            elif kind == "result":
                t = trials[ev[1]]
                result = {"t": number(ev[2]), "m": number(ev[3])}
                answer = hb.on_trial_result(ctl, t, result)
                budget = result.get("hyperband_info", {}).get("budget")
                budget = None if budget is None else float(budget)
                t.last_result = result
                if answer == "PAUSE":
                    t.status = Trial.PAUSED
                elif answer == "STOP":
                    ctl.stop_trial(t)
            elif kind == "complete":
                t = trials[ev[1]]
                hb.on_trial_complete(ctl, t, t.last_result)
                t.status = Trial.TERMINATED
            elif kind == "error":
                t = trials[ev[1]]
                hb.on_trial_error(ctl, t)
                t.status = Trial.ERROR
            elif not known:
                raise ValueError(kind)
        except Exception as e:  # Ray's assertions: report and end the case
            out.append([f"EXCEPTION: {type(e).__name__}: {e}", [], None])
            break
        out.append([answer, ctl.stopped, budget])
    return out


if __name__ == "__main__":
    ray_cases.main(run)
