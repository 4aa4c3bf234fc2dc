"""Live monitoring and steering of a TRL / transformers training run with rlhfstation.

One line in your training script:

    from rlhfstation_callback import RLHFStationCallback
    trainer.add_callback(RLHFStationCallback("runs/my-grpo"))

and, in another terminal, `rlhfstation watch runs/my-grpo`. The callback writes the run folder
that `rlhfstation watch` and `replay` read (events.jsonl, DESIGN §9 of rlhfstation) as the run
goes: run_start (the model, the trainer's arguments: the GRPOConfig under TRL), a step event
at every log (TRL's names mapped as rlhfstation maps them in TRL's TensorBoard files, with the
process's memory and CUDA's peak), the completions TRL logs when log_completions is on, a
checkpoint event at each save (with its health from `rlhfstation inspect` when the binary is
on PATH) and run_end.

It reads the folder's control file (control.json, written by `watch`'s keys and by
`rlhfstation control RUN_DIR pause|resume|save|stop`) at each step boundary: pause holds the
trainer there until resume; save sets control.should_save; stop saves and stops. Each request
is acknowledged in the events when it takes effect. stop_on=["nan", "kl_spike"] stops the run
(saving first) on those alerts of rlhfstation's monitor: the list is recorded in run_start for
any `watch` of the run, and the callback starts `rlhfstation watch RUN_DIR --summary` itself as
the guard when the binary is on PATH.

The callback never raises into the trainer: a failure is one warning, after which it stays
quiet. Events are appended and flushed, never fsynced, so the trainer does not wait on the
disk. Only the main process (state.is_world_process_zero) writes; with several processes it
reads the control file and broadcasts it over torch.distributed, so that all act at the same
step. It needs nothing beyond the standard library; it works with transformers >= 4.46 and 5.x,
with TRL's GRPOTrainer and any Trainer.
"""

import atexit
import datetime
import functools
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings

try:
    from transformers import TrainerCallback
except ImportError:  # tests drive the callback without transformers

    class TrainerCallback:
        pass


SOURCE = "TRL / Hugging Face Trainer"

# TRL's metric names that rlhfstation names otherwise (the table of rlhfstation's TRL reader,
# engine/runs/names.go; a Go test checks that the two agree).
RENAMES = {
    "completion_length": "completions/mean_length",  # TRL <= 0.14
    "clip_ratio": "clip_ratio/region_mean",  # TRL 0.16-0.17
}

# What the Trainer logs once when training ends: the end of the run, not a step.
TRAINER_SUMMARY = {"train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos", "train_loss"}


def map_names(logs):
    """TRL's logged values under rlhfstation's names; ended is True for the Trainer's
    end-of-training summary (which is not a step)."""
    out, ended = {}, False
    for key, value in logs.items():
        name = key
        if name.startswith("train/"):
            name = name[len("train/"):]
        elif name.startswith("eval_"):
            name = "eval/" + name[len("eval_"):]
        if name in TRAINER_SUMMARY:
            ended = True
            continue
        if name in RENAMES:
            name = RENAMES[name]
        elif name.startswith("rewards/") and "/" not in name[len("rewards/"):]:
            name += "/mean"  # TRL <= 0.14: one mean per reward function
        number = _number(value)
        if number is not None:
            out[name] = number
    return out, ended


def _number(v):
    """A logged value as a float, or None for what is not a number (strings, lists)."""
    if isinstance(v, bool):
        return None
    if hasattr(v, "item") and getattr(v, "ndim", 0) == 0:  # a 0-d tensor or numpy scalar
        v = v.item()
    if isinstance(v, (int, float)):
        return float(v)
    return None


def _json_number(v):
    """rlhfstation's events spell non-finite numbers as strings (JSON numbers cannot)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return v


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def _rss_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        try:
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return peak if sys.platform == "darwin" else peak * 1024
        except Exception:
            return None


def _gpu_bytes():
    torch = sys.modules.get("torch")  # never imported here: a run without torch has no GPU
    try:
        if torch is not None and torch.cuda.is_available():
            return int(torch.cuda.max_memory_allocated())
    except Exception:
        pass
    return None


def _safe(method):
    """Runs a callback method; the first exception is one warning, then the callback is off."""

    @functools.wraps(method)
    def wrapper(self, args, state, control, **kwargs):
        if self._failed:
            return None
        try:
            method(self, args, state, control, **kwargs)
        except Exception as e:  # never into the trainer
            self._failed = True
            warnings.warn(f"RLHFStationCallback stopped writing {self.run_dir}: {type(e).__name__}: {e}", RuntimeWarning)
        return None

    return wrapper


class RLHFStationCallback(TrainerCallback):
    """Writes run_dir/events.jsonl for rlhfstation watch/replay, and obeys run_dir/control.json.

    run_dir: the run folder (created). stop_on: alerts that stop the run after a save ("nan",
    "kl_spike", "critical" or a rule of rlhfstation's monitor). trainer: the trainer, for TRL's
    completions (found on the call stack when not given). rlhfstation: the binary for
    checkpoint health and the stop_on guard ("rlhfstation" on PATH by default; None: not used).
    poll: seconds between reads of the control file while paused.
    """

    def __init__(self, run_dir, stop_on=None, trainer=None, rlhfstation="rlhfstation", poll=0.2):
        self.run_dir = str(run_dir)
        self.stop_on = list(stop_on or [])
        self.trainer = trainer
        self.binary = shutil.which(rlhfstation) if rlhfstation else None
        self.poll = poll
        self._failed = False
        self._file = None
        self._lock = threading.Lock()
        self._threads = []
        self._guard = None
        # control file: the counters acted on, and the pause asked for / in effect
        self._seq = self._saves = self._stops = 0
        self._want_pause = False
        self._paused = False
        self._pause_by = ""
        self._steer = True  # off when several processes train without torch.distributed
        self._active = False  # between on_train_begin and on_train_end
        self._main = True  # the process that writes (state.is_world_process_zero)
        self._dist = None  # torch.distributed when several processes train: requests are broadcast
        self._write_failed = False
        self._stop_reason = None
        self._samples_seen = None
        self._ended = False

    # --- writing -------------------------------------------------------------------------

    def _write(self, event):
        if not self._main or self._file is None or self._write_failed:
            return
        try:
            event.setdefault("time", _now())
            line = json.dumps(event, default=str, allow_nan=False, ensure_ascii=False) + "\n"
            with self._lock:
                self._file.write(line)
                self._file.flush()  # readers see it now; no fsync: the trainer never waits on the disk
        except Exception as e:  # one warning, then quiet; steering goes on (every process must keep in step)
            self._write_failed = True
            warnings.warn(f"RLHFStationCallback stopped writing {self.run_dir}: {type(e).__name__}: {e}", RuntimeWarning)

    def _log(self, step, message, level="info", control=None):
        e = {"type": "log", "step": step, "level": level, "message": message}
        if control:
            e["control"] = control
        self._write(e)

    # --- the control file ----------------------------------------------------------------

    def _read_control(self):
        try:
            with open(os.path.join(self.run_dir, "control.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None  # none yet; written atomically, so never half of one

    def _fetch(self):
        """The control file as the main process reads it; with several processes it is
        broadcast, so that every process acts on the same requests at the same step."""
        c = self._read_control() if self._main else None
        if self._dist is not None:
            box = [c]
            self._dist.broadcast_object_list(box, src=0)
            c = box[0]
        return c

    def _baseline(self):
        c = self._fetch() or {}
        self._seq, self._saves, self._stops = c.get("seq", 0), c.get("saves", 0), c.get("stops", 0)

    def _requests(self):
        """The requests since the last call, as rlhfstation's engine/control Reader returns them:
        pause or resume when the state asked for changed, one save, stop."""
        if not self._steer:
            return []
        c = self._fetch()
        if not c or c.get("seq", 0) == self._seq:
            return []
        self._seq = c.get("seq", 0)
        out = []

        def who(action):
            by = c.get("by") or "rlhfstation"
            reason = c.get("reason") if c.get("action") == action else ""
            return by, reason or ""

        paused = bool(c.get("paused"))
        if paused != self._want_pause:
            self._want_pause = paused
            out.append(("pause" if paused else "resume",) + who("pause" if paused else "resume"))
            self._pause_by = out[-1][1]
        if c.get("saves", 0) > self._saves:
            self._saves = c.get("saves", 0)
            out.append(("save",) + who("save"))
        if c.get("stops", 0) > self._stops:
            self._stops = c.get("stops", 0)
            out.append(("stop",) + who("stop"))
        return out

    def _act(self, state, control, where, hold=True):
        """Reads the control file and acts: where is "step_end" (before the step's log and save),
        "log" (after the log, before the save) or "save" (after it); hold: a pause holds here."""
        for action, by, reason in self._requests():
            step = state.global_step
            if action == "save":
                if where == "save":
                    self._log(step, f"save asked by {by}: the checkpoint of step {step} was just written", control="save")
                else:
                    control.should_save = True
                    self._log(step, f"saving a checkpoint of step {step} (asked by {by})", control="save")
            elif action == "stop" and self._stop_reason is None:
                self._stop_reason = _stop_reason(by, reason)
                self._want_pause = False
                if where != "save":
                    control.should_save = True
                control.should_training_stop = True
                self._log(step, f"stopping after step {step}, saving first ({self._stop_reason})",
                          level="warn" if reason else "info", control="stop")
            elif action == "resume" and self._paused:
                self._paused = False
                self._log(step, f"resumed after step {step} (asked by {by})", control="resume")
        if hold and self._want_pause and not self._paused and self._stop_reason is None:
            self._hold(state, control, where)

    def _hold(self, state, control, where):
        """Holds the trainer at this step boundary until resume, save or stop."""
        self._paused = True
        self._log(state.global_step, f"paused after step {state.global_step} (asked by {self._pause_by}; the trainer holds until resume)",
                  control="pause")
        while True:
            time.sleep(self.poll)
            go = False  # every request of this read is acted on before the trainer goes on
            for action, by, reason in self._requests():
                step = state.global_step
                if action == "resume" and self._paused:
                    self._paused, go = False, True
                    self._log(step, f"resumed after step {step} (asked by {by})", control="resume")
                elif action == "save" and where != "save":
                    # the save runs now; the trainer holds again once it is written (on_save)
                    control.should_save, self._paused, go = True, False, True
                    self._log(step, f"saving a checkpoint of step {step} while paused (asked by {by})", control="save")
                elif action == "save":
                    self._log(step, f"save asked by {by}: the checkpoint of step {step} is already written", control="save")
                elif action == "stop":
                    self._paused = self._want_pause = False
                    self._stop_reason, go = _stop_reason(by, reason), True
                    if where != "save":
                        control.should_save = True
                    control.should_training_stop = True
                    self._log(step, f"stopping after step {step}, saving first ({self._stop_reason})",
                              level="warn" if reason else "info", control="stop")
            if go:
                return

    # --- the trainer's events ------------------------------------------------------------

    @_safe
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._main = bool(state.is_world_process_zero)
        world, self._dist = _world()
        if world > 1 and self._dist is None:
            # Each process would read the file at its own moment and act at a different step,
            # and processes that stop at different steps hang in their collectives.
            self._steer = False
        if self._main:
            os.makedirs(self.run_dir, exist_ok=True)
            self._file = open(os.path.join(self.run_dir, "events.jsonl"), "a", encoding="utf-8")
        self._active = True
        if self._steer:
            self._baseline()
        if not self._main:
            return
        config = {"trainer_args": _plain(args.to_dict() if hasattr(args, "to_dict") else vars(args)),
                  "args_class": type(args).__name__, "output_dir": getattr(args, "output_dir", None),
                  "writer": "examples/rlhfstation_callback.py"}
        if self.stop_on:
            config["monitor"] = {"stop_on": self.stop_on}
        start = {"type": "run_start", "step": state.global_step, "run": os.path.basename(os.path.abspath(self.run_dir)),
                 "model": _model_name(model, args), "device": _device(args), "source": SOURCE,
                 "total_steps": state.max_steps, "config": config}
        params = _params(model)
        if params:
            start["params"] = params
        self._write(start)
        if not self._steer:
            self._log(state.global_step, f"{world} processes train without torch.distributed: pause, save and stop from "
                      "rlhfstation are not applied (the processes could not act at the same step); the events are written",
                      level="warn")
        if self.stop_on and self.binary:
            with open(os.path.join(self.run_dir, "guard.log"), "ab") as log:
                self._guard = subprocess.Popen([self.binary, "watch", self.run_dir, "--summary"],
                                               stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True)
            atexit.register(self._end_guard)  # a run that dies without on_train_end leaves no guard behind
            self._log(state.global_step, f"stop_on {', '.join(self.stop_on)}: guarded by rlhfstation watch (pid {self._guard.pid}, guard.log)")
        elif self.stop_on:
            self._log(state.global_step, "stop_on is recorded for `rlhfstation watch`: the rlhfstation binary is not on PATH, "
                      "so the run stops on those alerts only while a watch follows it", level="warn")

    @_safe
    def on_step_end(self, args, state, control, **kwargs):
        if not self._active:
            return
        # Save and stop are set now, before the step's save; a pause is held after the step's
        # log (on_log) or save (on_save) when it has them, so the dashboard shows the step.
        self._act(state, control, "step_end", hold=not (control.should_log or control.should_save))

    @_safe
    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self._active or not logs:
            return
        metrics, ended = map_names(logs)
        self._ended = self._ended or ended
        training = not any(k.startswith("eval_") for k in logs)
        if metrics and not ended:  # the summary's epoch is no step of its own
            if training:
                rss, gpu = _rss_bytes(), _gpu_bytes()
                if rss is not None:
                    metrics["mem/rss_bytes"] = float(rss)
                if gpu is not None:
                    metrics["mem/gpu_bytes"] = float(gpu)
            self._write({"type": "step", "step": state.global_step,
                         "metrics": {k: _json_number(v) for k, v in metrics.items()}})
        if training and self._main and getattr(args, "log_completions", False):
            self._samples(state.global_step)
        if training and not ended and self._want_pause and not self._paused and not control.should_save:
            self._act(state, control, "log")

    @_safe
    def on_save(self, args, state, control, **kwargs):
        if not self._active:
            return
        path = os.path.abspath(os.path.join(args.output_dir, f"checkpoint-{state.global_step}"))
        if not self._main:
            pass
        elif self.binary and os.path.isdir(path):
            t = threading.Thread(target=self._checkpoint, args=(state.global_step, path, True), daemon=True)
            t.start()
            self._threads.append(t)
        else:
            self._checkpoint(state.global_step, path, False)
        if self._want_pause and not self._paused and self._stop_reason is None and not control.should_training_stop:
            self._act(state, control, "save")

    def _checkpoint(self, step, path, inspect):
        health = None
        if inspect:
            try:
                out = subprocess.run([self.binary, "inspect", path, "--json"], capture_output=True, timeout=300, text=True)
                if out.returncode == 0:
                    rep = json.loads(out.stdout)
                    health = {"score": rep.get("score", 0), "issues": [i.get("message", "") for i in rep.get("issues") or []]}
            except Exception:
                health = None  # the checkpoint is still reported
        e = {"type": "checkpoint", "step": step, "path": path}
        if health is not None:
            e["health"] = health
        try:
            self._write(e)
        except Exception:
            pass

    @_safe
    def on_train_end(self, args, state, control, **kwargs):
        if not self._active:
            return
        for t in self._threads:
            t.join(timeout=60)  # checkpoint health before run_end, which ends a reader
        if self._stop_reason is not None:
            status, reason = "stopped", self._stop_reason
        elif self._ended or (state.max_steps and state.global_step >= state.max_steps):
            status, reason = "completed", ""
        else:
            status, reason = "stopped", f"training ended at step {state.global_step} of {state.max_steps}"
        end = {"type": "run_end", "step": state.global_step, "status": status}
        if reason:
            end["reason"] = reason
        self._write(end)
        self._active = False
        if self._file is not None:
            with self._lock:
                self._file.close()
            self._file = None

    def _end_guard(self):
        g = self._guard
        if g is not None and g.poll() is None:
            g.terminate()

    # --- TRL's completions ---------------------------------------------------------------

    def _samples(self, step):
        logs = getattr(self._find_trainer(), "_logs", None)
        if not isinstance(logs, dict) or not logs.get("completion"):
            return
        prompts, completions = list(logs.get("prompt") or []), list(logs["completion"])
        rewards = {k: list(v) for k, v in (logs.get("rewards") or {}).items()}
        advantages = list(logs.get("advantages") or [])
        key = (len(completions), completions[0] if completions else "", completions[-1] if completions else "")
        if key == self._samples_seen:
            return  # the same batch, logged again
        self._samples_seen = key
        samples = []
        for i, c in enumerate(completions[:64]):
            per = {name: _json_number(float(vals[i])) for name, vals in rewards.items()
                   if i < len(vals) and _number(vals[i]) is not None}
            total = sum(v for v in per.values() if isinstance(v, float))
            samples.append({"prompt": _text(prompts[i] if i < len(prompts) else ""), "completion": _text(c),
                            "reward": total, "rewards": per,
                            "advantage": float(advantages[i]) if i < len(advantages) and _number(advantages[i]) is not None else 0.0})
        if samples:
            self._write({"type": "samples", "step": step, "samples": samples})

    def _find_trainer(self):
        if self.trainer is not None:
            return self.trainer
        f = sys._getframe(1)
        while f is not None:  # Trainer.log is on the stack: its self holds TRL's _logs
            obj = f.f_locals.get("self")
            if obj is not None and obj is not self and isinstance(getattr(obj, "_logs", None), dict):
                self.trainer = obj
                return obj
            f = f.f_back
        return None


def _stop_reason(by, reason):
    """run_end's reason: a stop_on stop's own (it names the rule and the step), else who asked and why."""
    if by == "stop_on" and reason:
        return reason
    return f"stopped by {by}: {reason}" if reason else f"stopped by {by}"


def _text(v):
    """A prompt or completion as text: TRL keeps conversational ones as lists of messages."""
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        return "\n".join(m.get("content", "") if isinstance(m, dict) else str(m) for m in v)
    return str(v)


def _plain(v):
    """JSON-able copy of the trainer's arguments (enums and paths as strings)."""
    try:
        return json.loads(json.dumps(v, default=str, allow_nan=True).replace("NaN", "null"))
    except Exception:
        return str(v)


def _world():
    """How many processes train, and torch.distributed when it connects them (else None)."""
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    try:
        if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return dist.get_world_size(), dist
    except Exception:
        pass
    try:
        return int(os.environ.get("WORLD_SIZE", "1")), None
    except ValueError:
        return 1, None


def _model_name(model, args):
    cfg = getattr(model, "config", None)
    name = getattr(cfg, "_name_or_path", None) or getattr(args, "model_name_or_path", None)
    return str(name) if name else type(model).__name__ if model is not None else ""


def _device(args):
    try:
        return str(args.device)
    except Exception:
        return ""


def _params(model):
    try:
        total = trainable = 0
        for p in model.parameters():
            total += p.numel()
            if p.requires_grad:
                trainable += p.numel()
        return {"total": total, "trainable": trainable} if total else None
    except Exception:
        return None
