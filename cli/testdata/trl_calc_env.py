"""A stand-in of TRL's environment_factory shape for cli's tests: reset(**columns), a public
tool method with a Google-style docstring, get_reward(), and a TRL reward function that reads
the environments. An example whose column "broken" is true makes reset raise, as an
environment that crashes."""


class CalcEnv:
    def reset(self, **kwargs):
        if kwargs.get("broken"):
            raise RuntimeError("the calculator's environment crashed")
        self.answer = kwargs.get("answer")
        self.results = []
        return None

    def calc(self, expression: str) -> str:
        """
        Evaluate an arithmetic expression.

        Args:
            expression: the expression, such as 2+3

        Returns:
            Its value.
        """
        value = str(eval(expression, {"__builtins__": {}}))
        self.results.append(value)
        return value

    def get_reward(self) -> float:
        return 1.0 if self.results and self.results[-1] == self.answer else 0.0


def calls(completions, environments, **kwargs):
    """The number of tool results of each episode."""
    return [float(sum(m.get("role") == "tool" for m in c)) for c in completions]
