"""Run a TRL reward function, unchanged, as an rlhfstation reward of kind "command".

In a preset or a run configuration:

    [[rewards]]
    kind = "command"
    name = "short"
    command = ["python3", "examples/trl_reward_shim.py", "examples/short_answers.py:short_answers"]
    weight = 1.0
    timeout = 60

FUNCTION is FILE.py:NAME or MODULE:NAME. It is called as TRL's GRPOTrainer calls reward
functions, once per batch:

    f(prompts=[...], completions=[...], completion_ids=[[...]], **columns)

where columns are the dataset's other columns (one list each), `answer` (the ground truth,
unless the dataset has a column of that name) and `trainer_state` (with global_step). It
returns one number or None per completion (None: the reward does not apply, as in TRL), or
{"rewards": [...], "metrics": {"name": number}} to log metrics as rewards/<name>/<metric>.
What it prints goes to stderr (rlhfstation keeps it in the run folder as rewards/<name>.stderr):
stdout carries only the replies, one JSON line per request.
"""

import importlib
import importlib.util
import json
import math
import os
import sys
import types


def load(spec):
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        sys.exit("trl_reward_shim.py: want FILE.py:FUNCTION or MODULE:FUNCTION, got %r" % spec)
    if where.endswith(".py") or os.sep in where:
        module_spec = importlib.util.spec_from_file_location("reward_module", where)
        if module_spec is None:
            sys.exit("trl_reward_shim.py: cannot load %s" % where)
        module = importlib.util.module_from_spec(module_spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    function = getattr(module, name, None)
    if not callable(function):
        sys.exit("trl_reward_shim.py: %s has no function %s" % (where, name))
    return function


def number(v):
    """A reward as JSON: a finite float, or None."""
    if v is None:
        return None
    if hasattr(v, "item"):  # numpy or torch scalars
        v = v.item()
    v = float(v)
    return v if math.isfinite(v) else None


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: trl_reward_shim.py FILE.py:FUNCTION | MODULE:FUNCTION")
    function = load(sys.argv[1])
    replies = sys.stdout
    sys.stdout = sys.stderr  # prints of the function must not mix with the replies
    fixed = ("step", "prompts", "completions", "completion_ids", "answers")
    for line in sys.stdin:
        request = json.loads(line)
        columns = {k: v for k, v in request.items() if k not in fixed}
        columns.setdefault("answer", request["answers"])
        columns["trainer_state"] = types.SimpleNamespace(global_step=request["step"])
        out = function(prompts=request["prompts"], completions=request["completions"],
                       completion_ids=request["completion_ids"], **columns)
        metrics = {}
        if isinstance(out, dict):
            metrics = {k: float(v) for k, v in (out.get("metrics") or {}).items()}
            out = out["rewards"]
        if hasattr(out, "tolist"):
            out = out.tolist()
        reply = {"rewards": [number(v) for v in out], "metrics": metrics}
        replies.write(json.dumps(reply, allow_nan=False) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
