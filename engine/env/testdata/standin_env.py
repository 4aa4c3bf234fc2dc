"""A stand-in environment for engine/env's tests, speaking the JSON-lines protocol.

reset: one user message and the `calc` tool; step: answers each tool call with the value of
its expression, done when the assistant makes none (before "chat_turns" turns, a user
message follows a turn without tool calls); reward: 1 when the last tool result was
the example's answer. An example with "crash": true makes the process exit ("crash_once": FILE, only when FILE does
not exist yet, creating it); "fail": true gets
an error reply; "sleep": seconds delays the reply."""
import json
import os
import sys
import time

TOOLS = [{"type": "function", "function": {"name": "calc", "description": "Evaluate arithmetic.",
          "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                         "required": ["expression"]}}}]
episodes = {}

for line in sys.stdin:
    req = json.loads(line)
    op, rid = req["op"], req["id"]
    if op == "reset":
        ex = req["example"]
        if ex.get("crash_once") and not os.path.exists(ex["crash_once"]):
            open(ex["crash_once"], "w").close()
            print("crashing on purpose", file=sys.stderr)
            sys.exit(3)
        if ex.get("crash"):
            print("crashing on purpose", file=sys.stderr)
            sys.exit(3)
        if ex.get("sleep"):
            time.sleep(ex["sleep"])
        if ex.get("fail"):
            print(json.dumps({"id": rid, "error": "cannot set up this example"}), flush=True)
            continue
        episodes[rid] = {"answer": ex.get("answer"), "last": None, "turns": 0, "chat": ex.get("chat_turns", 0)}
        print(json.dumps({"id": rid, "messages": [{"role": "user", "content": ex["prompt"]}], "tools": TOOLS}), flush=True)
    elif op == "step":
        ep = episodes[rid]
        ep["turns"] += 1
        out = []
        for c in req["message"].get("tool_calls") or []:
            expr = c["function"]["arguments"].get("expression", "")
            try:
                val = str(eval(expr, {"__builtins__": {}}))
            except Exception as e:  # noqa: BLE001
                val = "error: %s" % e
            ep["last"] = val
            out.append({"role": "tool", "name": "calc", "content": val})
        if not out and ep["turns"] < ep["chat"]:  # a user turn, tool call or not
            out.append({"role": "user", "content": "Go on (turn %d)." % ep["turns"]})
        print(json.dumps({"id": rid, "messages": out, "done": not out, "reward": 0.1 * len(out),
                          "metrics": {"calls": len(out)}}), flush=True)
    elif op == "reward":
        vals = [1.0 if episodes[i]["last"] == episodes[i]["answer"] else 0.0 for i in req["ids"]]
        print(json.dumps({"id": rid, "rewards": {"correct": vals}}), flush=True)
