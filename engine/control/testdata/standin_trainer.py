"""A stand-in for transformers' Trainer loop (transformers is not installed where the tests run),
to drive examples/rlhfstation_callback.py as a GRPOTrainer would.

It has transformers' shapes: TrainingArguments-like args (a GRPOConfig's fields), TrainerState,
TrainerControl, a CallbackHandler that calls each callback with (args, state, control, **kwargs)
and resets should_log/should_save/should_evaluate at each step's start, DefaultFlowCallback's
flags (log every logging_steps, save every save_steps and at the end), and the inner loop's
order: on_step_begin, the step, on_step_end, then log (on_log), save (on_save), then a break on
should_training_stop; the end-of-training summary is logged, then on_train_end. Like TRL's
GRPOTrainer it keeps the step's completions in self._logs when log_completions is on.

The logs are a real trainer_state.json's log_history entries, replayed one a step.

usage: standin_trainer.py --history trainer_state.json --run-dir D --output-dir D
       [--max-steps N] [--save-steps N] [--step-seconds S] [--stop-on a,b] [--rlhfstation BIN]
       [--adapter DIR] [--world N]
Prints "saved N" at each save and "ended at N" at the end.
"""

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import time


class TrainerControl:
    def __init__(self):
        self.should_training_stop = False
        self.should_epoch_stop = False
        self.should_save = False
        self.should_evaluate = False
        self.should_log = False


class TrainerState:
    def __init__(self, max_steps, rank=0):
        self.global_step = 0
        self.max_steps = max_steps
        self.epoch = 0.0
        self.log_history = []
        self.is_world_process_zero = rank == 0
        self.is_local_process_zero = rank == 0


class Args:
    """The fields of a GRPOConfig the loop and the callback read."""

    def __init__(self, output_dir, max_steps, save_steps, logging_steps=1, log_completions=True):
        self.output_dir = output_dir
        self.max_steps = max_steps
        self.save_steps = save_steps
        self.save_strategy = "steps" if save_steps > 0 else "no"
        self.logging_steps = logging_steps
        self.log_completions = log_completions
        self.learning_rate = 1e-5
        self.num_generations = 8
        self.beta = 0.0
        self.loss_type = "dapo"
        self.device = "cpu"

    def to_dict(self):
        return dict(vars(self))


class DefaultFlowCallback:
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % args.logging_steps == 0:
            control.should_log = True
        if args.save_steps > 0 and state.global_step % args.save_steps == 0:
            control.should_save = True
        if state.global_step >= state.max_steps:
            control.should_training_stop = True
            if args.save_strategy != "no":
                control.should_save = True
        return control


class CallbackHandler:
    def __init__(self, callbacks):
        self.callbacks = list(callbacks)

    def call_event(self, event, args, state, control, **kwargs):
        for cb in self.callbacks:
            f = getattr(cb, event, None)
            if f is None:
                continue
            result = f(args, state, control, model=None, **kwargs)
            if result is not None:
                control = result
        return control

    def on_step_begin(self, args, state, control):
        control.should_log = control.should_evaluate = control.should_save = False
        return self.call_event("on_step_begin", args, state, control)


class StandInGRPOTrainer:
    def __init__(self, args, history, step_seconds, adapter="", dist=None):
        self.args = args
        self.dist = dist  # torch.distributed between the processes of a --world run
        self.rank = dist.get_rank() if dist else 0
        self.adapter = adapter  # a PEFT adapter folder copied into each checkpoint
        self.state = TrainerState(args.max_steps, self.rank)
        self.control = TrainerControl()
        self.handler = CallbackHandler([DefaultFlowCallback()])
        self.history = history
        self.step_seconds = step_seconds
        n = 4  # TRL keeps one generation batch (deques of its size)
        self._logs = {"prompt": collections.deque(maxlen=n), "completion": collections.deque(maxlen=n),
                      "rewards": collections.defaultdict(lambda: collections.deque(maxlen=n)),
                      "advantages": collections.deque(maxlen=n)}

    def add_callback(self, cb):
        self.handler.callbacks.append(cb)

    def log(self, logs):
        logs = dict(logs)
        self.state.log_history.append({**logs, "step": self.state.global_step})
        self.control = self.handler.call_event("on_log", self.args, self.state, self.control, logs=logs)

    def _save_checkpoint(self):
        if self.rank != 0:
            return
        path = os.path.join(self.args.output_dir, f"checkpoint-{self.state.global_step}")
        os.makedirs(path, exist_ok=True)
        if self.adapter:
            for name in os.listdir(self.adapter):
                shutil.copy(os.path.join(self.adapter, name), path)
        with open(os.path.join(path, "trainer_state.json"), "w") as f:
            json.dump({"global_step": self.state.global_step, "max_steps": self.state.max_steps,
                       "log_history": self.state.log_history}, f)
        print(f"saved {self.state.global_step}", flush=True)

    def train(self):
        a, s = self.args, self.state
        self.control = self.handler.call_event("on_train_begin", a, s, self.control)
        while s.global_step < s.max_steps:
            self.control = self.handler.on_step_begin(a, s, self.control)
            time.sleep(self.step_seconds)  # the step's work
            if self.dist:  # DDP's gradient all-reduce: a process that stopped alone would hang here
                import torch

                self.dist.all_reduce(torch.ones(1))
            step = s.global_step + 1
            if a.log_completions:
                for i in range(4):
                    self._logs["prompt"].append(f"Question {step}.{i}: what is {step} + {i}?")
                    self._logs["completion"].append(f"{step} plus {i} is {step + i}. #### {step + i}")
                    self._logs["rewards"]["accuracy_reward"].append(float(i % 2))
                    self._logs["advantages"].append(float(i % 2) - 0.5)
            s.global_step = step
            s.epoch = step / s.max_steps
            self.control = self.handler.call_event("on_step_end", a, s, self.control)
            # _maybe_log_save_evaluate
            if self.control.should_log:
                self.log(self.history[step])
            if self.control.should_save:
                self._save_checkpoint()
                self.control = self.handler.call_event("on_save", a, s, self.control)
            if self.control.should_training_stop or self.control.should_epoch_stop:
                break
        self.log(self.history.get("summary", {"train_runtime": 1.0, "train_loss": 0.0}))
        self.control = self.handler.call_event("on_train_end", a, s, self.control)
        print(f"ended at {s.global_step}" if not self.dist else f"rank {self.rank} ended at {s.global_step}", flush=True)


def load_history(path):
    """log_history entries by step (without "step"), and the end-of-training summary."""
    with open(path) as f:
        doc = json.load(f)  # Python's json reads the bare NaN transformers writes
    out = {}
    for e in doc["log_history"]:
        e = dict(e)
        step = e.pop("step")
        if "train_runtime" in e:
            out["summary"] = e
        else:
            out[step] = e
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--history", required=True)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--output-dir", required=True)
    p.add_argument("--max-steps", type=int, default=60)
    p.add_argument("--save-steps", type=int, default=0)
    p.add_argument("--step-seconds", type=float, default=0.05)
    p.add_argument("--stop-on", default="")
    p.add_argument("--rlhfstation", default="")
    p.add_argument("--adapter", default="")
    p.add_argument("--world", type=int, default=1, help="processes, joined by torch.distributed (gloo)")
    args = p.parse_args()
    if args.world > 1 and "RANK" not in os.environ:
        # The launcher's part (torchrun's): one process a rank, then wait for them all.
        init = os.path.join(args.output_dir + ".dist-init")
        procs = [subprocess.Popen([sys.executable] + sys.argv, env={**os.environ, "RANK": str(r), "WORLD_SIZE": str(args.world),
                                                                   "DIST_INIT": init}) for r in range(args.world)]
        sys.exit(max(p.wait() for p in procs))
    dist = None
    if args.world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method="file://" + os.environ["DIST_INIT"],
                                rank=int(os.environ["RANK"]), world_size=args.world)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples"))
    from rlhfstation_callback import RLHFStationCallback

    t = StandInGRPOTrainer(Args(args.output_dir, args.max_steps, args.save_steps), load_history(args.history), args.step_seconds,
                           args.adapter, dist)
    stop_on = [x for x in args.stop_on.split(",") if x]
    t.add_callback(RLHFStationCallback(args.run_dir, stop_on=stop_on, rlhfstation=args.rlhfstation or None))
    t.train()


if __name__ == "__main__":
    main()
