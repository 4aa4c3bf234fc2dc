"""A TRL-style reward function: shorter completions score higher. Run it under rlhfstation with
examples/trl_reward_shim.py (see examples/short_answers.toml)."""


def short_answers(prompts, completions, **kwargs):
    # 1 for an empty completion, falling linearly to 0 at 120 characters and beyond.
    return [max(0.0, 1.0 - len(c) / 120.0) for c in completions]
