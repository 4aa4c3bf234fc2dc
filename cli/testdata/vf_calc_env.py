"""A stand-in of a verifiers environment module for cli's tests, with classes of verifiers'
shape (MultiTurnEnv with async is_completed and env_response returning (messages, state), a
Rubric of functions and weights): load_environment(**kwargs) makes a calculator environment
whose rubric functions name the arguments they want. An example whose info has "broken" makes
env_response raise, as an environment that crashes."""
import json


class Rubric:
    def __init__(self, funcs=None, weights=None):
        self.reward_funcs = list(funcs or [])
        self.reward_weights = list(weights or [1.0] * len(self.reward_funcs))


class MultiTurnEnv:
    def __init__(self, system_prompt=None, rubric=None, max_turns=10, oai_tools=None):
        self.system_prompt, self.rubric, self.max_turns, self.oai_tools = system_prompt, rubric, max_turns, oai_tools


def correct_answer(completion, answer):
    results = [m["content"] for m in completion if m.get("role") == "tool"]
    return 1.0 if results and results[-1] == answer else 0.0


def tool_calls(state, info):
    return float(state["calls"])


class CalcEnv(MultiTurnEnv):
    async def setup_state(self, state, **kwargs):
        state["calls"] = 0
        return state

    async def is_completed(self, messages, state, **kwargs):
        return not messages[-1].get("tool_calls")

    async def env_response(self, messages, state, **kwargs):
        if state["info"].get("broken"):
            raise RuntimeError("the calculator's environment crashed")
        out = []
        for call in messages[-1]["tool_calls"]:
            args = call["function"]["arguments"]
            if isinstance(args, str):
                args = json.loads(args)
            state["calls"] += 1
            out.append({"role": "tool", "tool_call_id": call.get("id"),
                        "content": str(eval(args["expression"], {"__builtins__": {}}))})
        return out, state


def load_environment(max_turns=4, **kwargs):
    tools = [{"type": "function", "function": {"name": "calc", "description": "Evaluate arithmetic.",
              "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]
    return CalcEnv(rubric=Rubric([correct_answer, tool_calls], [1.0, 0.0]), max_turns=max_turns, oai_tools=tools)
