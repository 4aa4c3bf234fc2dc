"""Run a verifiers environment (SingleTurnEnv, MultiTurnEnv, ToolEnv, ...) as an rlhfstation
environment.

In a preset or a run configuration:

    [[environments]]
    name = "wordle"
    kind = "command"
    command = ["python3", "examples/verifiers_shim.py", "wordle", "num_train_examples=500"]
    rewards = { correct_answer = 1.0, format_reward = 0.2 }
    max_turns = 6

ENV is what verifiers' load_environment takes: the name of an installed environment module
(its "-" read as "_"), or a FILE.py. Each KEY=VALUE after it is a keyword argument of the
module's load_environment (VALUE read as JSON when it parses, else as a string). With
verifiers installed, verifiers.load_environment(ENV, **kwargs) loads it; without, the
module's own load_environment(**kwargs) does, which is what that function does too.

Each episode is one rollout of the environment, played as verifiers' MultiTurnEnv plays it:

  - the prompt is the environment's system_prompt (when it has one) and the example's
    prompt (or its "question" column); its tools are the environment's oai_tools;
  - the state is a dict with prompt, completion, answer, info, task, turn and responses, given
    to setup_state when the environment has it;
  - after each assistant turn: is_completed(messages, state) ends the episode (a
    SingleTurnEnv ends after its first turn), else env_response(messages, state) gives the
    environment's messages (a list, or a (messages, state) pair as older versions return);
  - at the end each function of the environment's rubric is called with the arguments it
    names among completion, prompt, answer, info, state, task and parser, its value the
    reward of its name. The rubric's weights are printed on stderr at the start: put them in
    the configuration's rewards (rewards not listed there weigh 1).

The methods may be coroutines. An exception raised by the environment fails that episode
only: it is reported by rlhfstation as an anomaly and scored as not applicable. What the
environment prints goes to stderr: stdout carries only the replies.
"""

import asyncio
import importlib
import importlib.util
import inspect
import json
import math
import os
import sys
import traceback

RUBRIC_ARGS = ("completion", "prompt", "answer", "info", "state", "task", "parser")


def parse_value(v):
    try:
        return json.loads(v)
    except ValueError:
        return v


def load(env_id, kwargs):
    if env_id.endswith(".py") or os.sep in env_id:
        spec = importlib.util.spec_from_file_location(os.path.basename(env_id)[:-3] or "vf_env", env_id)
        if spec is None:
            sys.exit("verifiers_shim.py: cannot load %s" % env_id)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(env_id)))
        spec.loader.exec_module(module)
    else:
        try:
            import verifiers  # noqa: F401
        except ImportError:
            module = importlib.import_module(env_id.replace("-", "_"))
        else:
            return verifiers.load_environment(env_id, **kwargs)
    if not hasattr(module, "load_environment"):
        sys.exit("verifiers_shim.py: %s has no load_environment" % env_id)
    return module.load_environment(**kwargs)


def resolve(v):
    return asyncio.run(v) if inspect.iscoroutine(v) else v


def number(v):
    if v is None:
        return None
    if hasattr(v, "item"):
        v = v.item()
    v = float(v)
    return v if math.isfinite(v) else None


def rubric_funcs(rubric):
    """The rubric's reward functions and their weights, whichever way its version keeps them."""
    if rubric is None:
        return [], []
    for funcs, weights in (("get_reward_funcs", "get_reward_weights"), ("reward_funcs", "reward_weights"), ("funcs", "weights")):
        fs = getattr(rubric, funcs, None)
        if fs is None:
            continue
        fs = fs() if callable(fs) and not isinstance(fs, list) else fs
        ws = getattr(rubric, weights, None)
        ws = ws() if callable(ws) and not isinstance(ws, list) else ws
        fs = list(fs or [])
        return fs, list(ws) if ws else [1.0] * len(fs)
    return [], []


def call_named(f, available):
    """f called with the arguments it names among available (all of them if it takes **kwargs)."""
    params = inspect.signature(f).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return resolve(f(**available))
    return resolve(f(**{k: v for k, v in available.items() if k in params}))


def is_single_turn(env):
    return any(c.__name__ == "SingleTurnEnv" for c in type(env).__mro__)


def prompt_of(env, example):
    if example.get("messages"):
        return [dict(m) for m in example["messages"]]
    msgs = []
    if getattr(env, "system_prompt", None):
        msgs.append({"role": "system", "content": env.system_prompt})
    msgs.extend(dict(m) for m in (getattr(env, "few_shot", None) or []))
    msgs.append({"role": "user", "content": example.get("question", example.get("prompt", ""))})
    return msgs


def main():
    argv = sys.argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        sys.exit(0 if argv else 2)
    kwargs = {}
    for a in argv[1:]:
        k, sep, v = a.partition("=")
        if not sep or not k.isidentifier():
            sys.exit("verifiers_shim.py: want KEY=VALUE arguments, got %r" % a)
        kwargs[k] = parse_value(v)
    replies = sys.stdout
    sys.stdout = sys.stderr  # the environment's prints must not mix with the replies
    env = load(argv[0], kwargs)
    funcs, weights = rubric_funcs(getattr(env, "rubric", None))
    print("verifiers_shim.py: rubric rewards = { %s }" % ", ".join(
        "%s = %s" % (f.__name__, w) for f, w in zip(funcs, weights)), file=sys.stderr)
    tools = list(getattr(env, "oai_tools", None) or [])
    single = is_single_turn(env)
    states = {}

    def reply(obj):
        replies.write(json.dumps(obj) + "\n")
        replies.flush()

    for line in sys.stdin:
        req = json.loads(line)
        op, rid = req.get("op"), req.get("id")
        try:
            if op == "reset":
                example = req.get("example") or {}
                prompt = prompt_of(env, example)
                state = {"prompt": prompt, "completion": [], "answer": example.get("answer", ""),
                         "info": example.get("info") or {}, "task": example.get("task", "default"),
                         "turn": 0, "responses": []}
                if hasattr(env, "setup_state"):
                    state = resolve(env.setup_state(state)) or state
                states[rid] = state
                reply({"id": rid, "messages": prompt, "tools": tools})
            elif op == "step":
                state = states[rid]
                message = req.get("message") or {}
                state["completion"].append(message)
                state["responses"].append(message)
                state["turn"] += 1
                messages = state["prompt"] + state["completion"]
                if single or resolve(env.is_completed(messages, state)):
                    reply({"id": rid, "messages": [], "done": True})
                    continue
                out = resolve(env.env_response(messages, state))
                if isinstance(out, tuple):
                    out, new_state = out
                    if new_state is not None:
                        states[rid] = state = new_state
                out = [dict(m) for m in (out or [])]
                state["completion"].extend(out)
                reply({"id": rid, "messages": out, "done": not out})
            elif op == "reward":
                ids = req.get("ids") or []
                rewards = {f.__name__: [] for f in funcs}
                for i in ids:
                    state = states.pop(i)
                    available = {"completion": state["completion"], "prompt": state["prompt"], "answer": state["answer"],
                                 "info": state["info"], "state": state, "task": state["task"],
                                 "parser": getattr(env, "parser", None)}
                    for f in funcs:
                        try:
                            rewards[f.__name__].append(number(call_named(f, available)))
                        except Exception:  # noqa: BLE001 - this reward does not apply to this episode
                            traceback.print_exc()
                            rewards[f.__name__].append(None)
                reply({"id": rid, "rewards": rewards})
            else:
                reply({"id": rid, "error": "unknown op %r" % op})
        except Exception as e:  # noqa: BLE001 - this episode fails, the others go on
            traceback.print_exc()
            states.pop(rid, None)
            reply({"id": rid, "error": "%s: %s" % (type(e).__name__, e)})


if __name__ == "__main__":
    main()
