"""What sweep's reference scripts share: the command line (a file of cases) and the answer
(one result per case, as JSON on stdout).

  python ray_SCHEDULER.py CASES.json
"""
import json
import sys

from ray.tune.experiment import Trial

# The status a "start" or "pending" event gives its trial.
STATUS = {"start": Trial.RUNNING, "pending": Trial.PENDING}


def control(scheduler, ctl, trials, ev):
    """The events every scheduler's case has: "choose" asks `scheduler` for the trial to run
    next (the answer: its index, or None); "start" and "pending" set a trial's status. Returns
    (True, the answer) for those, (False, None) for any other event."""
    kind = ev[0]
    if kind == "choose":
        t = scheduler.choose_trial_to_run(ctl)
        return True, None if t is None else t.index
    if kind in STATUS:
        trials[ev[1]].status = STATUS[kind]
        return True, None
    return False, None


def main(run):
    """Runs `run` on each case of the JSON file named by the first argument; prints the list
    of what it returned."""
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    json.dump([run(c) for c in cases], sys.stdout)
