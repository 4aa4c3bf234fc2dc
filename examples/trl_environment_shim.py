"""Run a TRL environment_factory class, unchanged, as an rlhfstation environment.

In a preset or a run configuration:

    [[environments]]
    name = "calc"
    kind = "command"
    command = ["python3", "examples/trl_environment_shim.py", "my_env.py:CalcEnv",
               "--reward", "my_rewards.py:correct"]
    rewards = { reward = 1.0, correct = 0.5 }
    max_turns = 4

FACTORY is FILE.py:NAME or MODULE:NAME: what TRL's GRPOTrainer takes as environment_factory
(a class, or any callable returning an environment). One environment is made per episode, and
used as TRL uses it:

  - reset(**columns) is called with the dataset entry's columns (prompt, answer and the
    others). It returns None, or a string appended to the prompt's last user message.
  - Every public method other than reset and get_reward is a tool. Its JSON schema comes from
    its signature (the annotations give the types) and its docstring (the text before Args:
    describes the tool; the Args: section, one "name: description" line each, its
    parameters). A tool's return value, as a string, is the tool message; an exception it
    raises becomes an "error: ..." tool message and counts as a failed tool call.
  - The episode ends at the first assistant turn without a tool call.
  - get_reward(), when the environment has it, is the reward "reward" of the episode.
  - Each --reward FILE.py:NAME is a TRL reward function, the reward NAME, called once per
    batch of finished episodes as TRL calls it: f(prompts=..., completions=...,
    environments=..., **columns), prompts and completions being lists of messages.

An exception in reset, or an environment that cannot be made, fails that episode only: it is
reported by rlhfstation as an anomaly and scored as not applicable. What the environment
prints goes to stderr: stdout carries only the replies.
"""

import asyncio
import importlib
import importlib.util
import inspect
import json
import math
import os
import re
import sys
import traceback

RESERVED = ("reset", "get_reward")

JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean",
              list: "array", tuple: "array", dict: "object"}


def load(spec, what):
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        sys.exit("trl_environment_shim.py: want FILE.py:%s or MODULE:%s, got %r" % (what, what, spec))
    if where.endswith(".py") or os.sep in where:
        module_spec = importlib.util.spec_from_file_location(os.path.basename(where)[:-3] or "env_module", where)
        if module_spec is None:
            sys.exit("trl_environment_shim.py: cannot load %s" % where)
        module = importlib.util.module_from_spec(module_spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    obj = getattr(module, name, None)
    if not callable(obj):
        sys.exit("trl_environment_shim.py: %s has no %s %s" % (where, what.lower(), name))
    return obj


def resolve(v):
    """The value of v, awaited when a coroutine."""
    return asyncio.run(v) if inspect.iscoroutine(v) else v


def json_type(annotation):
    if annotation in JSON_TYPES:
        return JSON_TYPES[annotation]
    origin = getattr(annotation, "__origin__", None)
    if origin in JSON_TYPES:
        return JSON_TYPES[origin]
    args = [a for a in getattr(annotation, "__args__", ()) if a is not type(None)]
    if len(args) == 1:  # Optional[X]
        return json_type(args[0])
    return "string"


ARG_LINE = re.compile(r"^(\s*)(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc):
    """The description and the per-argument descriptions of a Google-style docstring."""
    description, args = [], {}
    section, current, indent = None, None, None
    for line in inspect.cleandoc(doc or "").splitlines():
        stripped = line.strip()
        if stripped.endswith(":") and stripped[:-1].lower() in ("args", "arguments", "parameters", "returns", "raises", "yields"):
            section, current, indent = stripped[:-1].lower(), None, None
            continue
        if section is None:
            description.append(stripped)
            continue
        if section not in ("args", "arguments", "parameters") or not stripped:
            continue
        m = ARG_LINE.match(line)
        if m and (indent is None or len(m.group(1)) <= indent):
            indent, current = len(m.group(1)), m.group(2)
            args[current] = m.group(3).strip()
        elif current:
            args[current] = (args[current] + " " + stripped).strip()
    return " ".join(l for l in description if l).strip(), args


def schema(name, method):
    """The JSON schema of a method as a tool, in the form chat templates take as tools."""
    description, arg_docs = parse_docstring(method.__doc__)
    properties, required = {}, []
    for p in inspect.signature(method).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        prop = {"type": json_type(p.annotation)}
        if p.name in arg_docs:
            prop["description"] = arg_docs[p.name]
        properties[p.name] = prop
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
    return {"type": "function", "function": {"name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required}}}


def tools_of(env):
    out = {}
    for name in dir(env):
        if name.startswith("_") or name in RESERVED:
            continue
        method = getattr(env, name)
        if inspect.ismethod(method) or inspect.isfunction(method):
            out[name] = method
    return out


def number(v):
    if v is None:
        return None
    if hasattr(v, "item"):
        v = v.item()
    v = float(v)
    return v if math.isfinite(v) else None


def text_of(v):
    return v if isinstance(v, str) else json.dumps(v)


class Episode:
    def __init__(self, env, prompt, columns):
        self.env, self.prompt, self.columns = env, prompt, columns
        self.completion = []
        self.tools = tools_of(env)


def call_tool(ep, call):
    fn = call.get("function") or {}
    name, args = fn.get("name"), fn.get("arguments") or {}
    if isinstance(args, str):
        args = json.loads(args)
    tool = ep.tools.get(name)
    if tool is None:
        raise ValueError("no tool named %r" % name)
    return text_of(resolve(tool(**args)))


def main():
    argv = sys.argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        sys.exit(0 if argv else 2)
    factory = load(argv[0], "FACTORY")
    reward_funcs = []
    rest = argv[1:]
    while rest:
        if rest[0] != "--reward" or len(rest) < 2:
            sys.exit("usage: trl_environment_shim.py FILE.py:FACTORY [--reward FILE.py:FUNCTION ...]")
        reward_funcs.append(load(rest[1], "FUNCTION"))
        rest = rest[2:]
    replies = sys.stdout
    sys.stdout = sys.stderr  # the environment's prints must not mix with the replies
    episodes = {}

    def reply(obj):
        replies.write(json.dumps(obj) + "\n")
        replies.flush()

    for line in sys.stdin:
        req = json.loads(line)
        op, rid = req.get("op"), req.get("id")
        try:
            if op == "reset":
                example = dict(req.get("example") or {})
                messages = example.pop("messages", None) or [{"role": "user", "content": example.get("prompt", "")}]
                messages = [dict(m) for m in messages]
                env = factory()
                extra = resolve(env.reset(**example)) if hasattr(env, "reset") else None
                if extra is not None:
                    users = [m for m in messages if m.get("role") == "user"]
                    if users:
                        users[-1]["content"] = (users[-1].get("content") or "") + str(extra)
                    else:
                        messages.append({"role": "user", "content": str(extra)})
                ep = Episode(env, messages, example)
                episodes[rid] = ep
                reply({"id": rid, "messages": messages, "tools": [schema(n, m) for n, m in sorted(ep.tools.items())]})
            elif op == "step":
                ep = episodes[rid]
                message = req.get("message") or {}
                ep.completion.append(message)
                out, failures = [], 0
                for call in message.get("tool_calls") or []:
                    try:
                        content = call_tool(ep, call)
                    except Exception as e:  # noqa: BLE001 - TRL gives a failing tool's error to the model
                        failures += 1
                        content = "error: %s: %s" % (type(e).__name__, e)
                    out.append({"role": "tool", "name": (call.get("function") or {}).get("name", ""),
                                "tool_call_id": call.get("id", ""), "content": content})
                ep.completion.extend(out)
                reply({"id": rid, "messages": out, "done": not out, "metrics": {"tool_failures": failures}})
            elif op == "reward":
                ids = req.get("ids") or []
                eps = [episodes.pop(i) for i in ids]
                rewards = {}
                if any(hasattr(ep.env, "get_reward") for ep in eps):
                    vals = []
                    for ep in eps:
                        try:
                            vals.append(number(resolve(ep.env.get_reward())) if hasattr(ep.env, "get_reward") else None)
                        except Exception:  # noqa: BLE001 - one episode's reward does not apply
                            traceback.print_exc()
                            vals.append(None)
                    rewards["reward"] = vals
                for f in reward_funcs:
                    columns = {}
                    for ep in eps:
                        for k in ep.columns:
                            columns.setdefault(k, [])
                    for k in list(columns):
                        if k in ("prompt", "prompts", "completions", "environments"):
                            del columns[k]
                            continue
                        columns[k] = [ep.columns.get(k) for ep in eps]
                    vals = resolve(f(prompts=[ep.prompt for ep in eps], completions=[ep.completion for ep in eps],
                                     environments=[ep.env for ep in eps], **columns))
                    rewards[f.__name__] = [number(v) for v in vals]
                reply({"id": rid, "rewards": rewards})
            else:
                reply({"id": rid, "error": "unknown op %r" % op})
        except Exception as e:  # noqa: BLE001 - this episode fails, the others go on
            traceback.print_exc()
            episodes.pop(rid, None)
            reply({"id": rid, "error": "%s: %s" % (type(e).__name__, e)})


if __name__ == "__main__":
    main()
