"""A verl reward function answered by rlhfstation serve-reward.

Start the server next to the trainer, then point verl at this file:

    rlhfstation serve-reward --preset math --baselines baselines.json --addr 0.0.0.0:5000

    python3 -m verl.trainer.main_ppo ... \
        custom_reward_function.path=examples/verl_reward.py \
        custom_reward_function.name=compute_score \
        +custom_reward_function.reward_kwargs.url=http://HOST:5000/get_reward

(or set RLHFSTATION_REWARD_URL instead of reward_kwargs.url; the default is
http://127.0.0.1:5000/get_reward). verl calls compute_score once per response with the decoded
response and reward_model.ground_truth; the prompt is not among its arguments, so store the
prompt text in each row's extra_info as "prompt" when preprocessing the dataset, or the
perplexity rewards score the response without it. The result is {"score": r} plus each of the
preset's reward functions by name (NaN where one does not apply), which verl logs.
"""

import json
import math
import os
import time
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:5000/get_reward"

_functions = {}  # server URL -> the names of its reward functions (from /health)


def _request(url, body, tries, timeout):
    failure = None
    for attempt in range(tries):
        request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode("utf-8"),
                                         method="GET" if body is None else "POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            failure = "HTTP %d: %s" % (e.code, e.read().decode("utf-8", "replace").strip())
        except (urllib.error.URLError, OSError, ValueError) as e:
            failure = str(e)
        if attempt + 1 < tries:
            time.sleep(1.0)
    raise RuntimeError("rlhfstation reward server %s: no answer after %d attempts: %s" % (url, tries, failure))


def _function_names(url, tries, timeout):
    if url not in _functions:
        health = url.rsplit("/", 1)[0] + "/health"
        _functions[url] = list(_request(health, None, tries, timeout).get("functions", []))
    return _functions[url]


def compute_score(data_source, solution_str, ground_truth, extra_info=None, url=None, tries=5, timeout=180.0, **kwargs):
    url = url or os.environ.get("RLHFSTATION_REWARD_URL") or DEFAULT_URL
    prompt = (extra_info or {}).get("prompt") or ""
    if not isinstance(prompt, str):  # chat messages: no text to condition on
        prompt = ""
    label = "" if ground_truth is None else str(ground_truth)
    reply = _request(url, {"query": [prompt + solution_str], "prompts": [prompt], "labels": [label]}, tries, timeout)
    result = {"score": float(reply["rewards"][0])}
    logs = reply.get("extra_logs") or {}
    # The same keys for every response (verl gathers them into per-key lists).
    for name in _function_names(url, tries, timeout):
        values = logs.get(name)
        value = values[0] if values else None
        result[name if name != "score" else "score_fn"] = math.nan if value is None else float(value)
    return result
