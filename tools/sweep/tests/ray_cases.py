"""What sweep's reference scripts share: the command line (a file of cases) and the answer
(one result per case, as JSON on stdout).

  python ray_SCHEDULER.py CASES.json
"""
import json
import sys


def main(run):
    """Runs `run` on each case of the JSON file named by the first argument; prints the list
    of what it returned."""
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    json.dump([run(c) for c in cases], sys.stdout)
