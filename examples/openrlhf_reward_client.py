"""Ask an rlhfstation reward server for rewards the way OpenRLHF's trainer asks its remote
reward model (openrlhf/utils/agent.py, SingleTurnAgentExecutor._fetch_rewards_via_http): POST
{"query": [...], "prompts": [...], "labels": [...]} as JSON, each attempt with a 180-second
timeout, up to 5 attempts one second apart, then fail. Standard library only.

    rlhfstation serve-reward --preset math --addr 127.0.0.1:5000 &
    echo '{"query": ["Q: 2+3? A: 5"], "prompts": ["Q: 2+3? A:"], "labels": ["5"]}' |
        python3 examples/openrlhf_reward_client.py http://127.0.0.1:5000/get_reward

In OpenRLHF itself nothing of this is needed: pass --reward.remote_url
http://HOST:5000/get_reward to openrlhf.cli.train_ppo_ray (--remote_rm_url up to v0.10.1).
"""

import json
import sys
import time
import urllib.error
import urllib.request


def get_rewards(url, queries, prompts, labels, tries=5, timeout=180.0, pause=1.0):
    """The server's reply {"rewards", "scores", "extra_logs"} for the queries (prompt +
    response texts), their prompts and labels (ground truths)."""
    body = json.dumps({"query": queries, "prompts": prompts, "labels": labels}).encode("utf-8")
    failure = None
    for attempt in range(1, tries + 1):
        request = urllib.request.Request(url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                reply = json.loads(response.read())
            if "rewards" not in reply:
                raise ValueError("no rewards in the reply: %r" % (reply,))
            return reply
        except urllib.error.HTTPError as e:  # an answer with an error status: say why
            failure = "HTTP %d: %s" % (e.code, e.read().decode("utf-8", "replace").strip())
        except (urllib.error.URLError, OSError, ValueError) as e:
            failure = str(e)
        print("reward request failed (attempt %d of %d): %s" % (attempt, tries, failure), file=sys.stderr)
        if attempt < tries:
            time.sleep(pause)
    raise RuntimeError("no reward after %d attempts: %s" % (tries, failure))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: openrlhf_reward_client.py URL < request.json")
    request = json.load(sys.stdin)
    reply = get_rewards(sys.argv[1], request["query"], request.get("prompts"), request.get("labels"))
    json.dump(reply, sys.stdout)
    print()


if __name__ == "__main__":
    main()
