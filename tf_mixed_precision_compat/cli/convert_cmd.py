"""`convert OLD NEW --model MODULE:FUNCTION`: a TF 2.x checkpoint, made native.

OLD is restored through the package (exactly, or refused) into the model the
function builds; NEW is written as `tf.train.Checkpoint(model=model,
optimizer=keras.optimizers.LossScaleOptimizer(inner))` by a
`tf.train.CheckpointManager`, then read back in a fresh interpreter that
cannot import the package. Only a conversion that reads back exactly is
left at NEW.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Optional, TextIO

import keras
import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat import legacy
from tf_mixed_precision_compat.cli import _ckpt
from tf_mixed_precision_compat.cli import _explain
from tf_mixed_precision_compat.cli import _plan
from tf_mixed_precision_compat.cli import inspect_cmd


class Refused(Exception):
  """The conversion cannot be exact (exit code 1); says why."""


def _progress(step: int, text: str, err: TextIO) -> None:
  err.write(f"[{step}/5] {text}\n")
  err.flush()


def check_convertible(info: _ckpt.CheckpointInfo) -> _ckpt.OptimizerInfo:
  """The checkpoint's optimizer, if the native layout can hold everything."""
  if len(info.optimizers) != 1 or info.optimizers[0].path != "optimizer":
    raise Refused(
        f"{info.prefix} holds optimizers at "
        f"{[o.path for o in info.optimizers] or 'no path'}; convert writes "
        "tf.train.Checkpoint(model=..., optimizer=...) and needs exactly one "
        "optimizer under `optimizer` (restore nested jobs with the package)")
  opt = info.optimizers[0]
  if opt.layout != "keras2":
    raise Refused(
        f"{info.prefix} was written on Keras 3 ({info.generation}); convert "
        "reads TF 2.2-2.4 checkpoints. A checkpoint this package wrote "
        "restores with the package installed (tf.train.Checkpoint.restore); "
        "save it again from a Keras 3 LossScaleOptimizer to leave it.")
  if opt.loss_scale is None:
    raise Refused(
        "The checkpoint stores no loss scale: the job used a fixed loss "
        "scale (TF never stored its value) or none. Keras 3's "
        "LossScaleOptimizer is dynamic only, so the job's behaviour would "
        "change; keep the package for this job, or drop loss scaling.")
  if opt.hyperparameters.get("decay", 0.0) != 0.0:
    raise Refused(f"decay={opt.hyperparameters['decay']}: Keras 3's "
                  "optimizers have no `decay`; use a LearningRateSchedule")
  outside = [k for k in info.weights if not k.startswith("model/")]
  outside += [k for k in info.other if "/" in k]
  if outside:
    raise Refused(f"Variables outside `model` and `optimizer`: {outside}")
  return opt


def _restore(args: Any, info: _ckpt.CheckpointInfo,
             opt_info: _ckpt.OptimizerInfo) -> tuple[Any, Any, tuple]:
  """The model, the package's optimizer, the choice and the report."""
  model = _plan.build_model(args.model, args.policy)
  choice = _plan.optimizer_choice(opt_info, args.optimizer,
                                  args.optimizer_args)
  optimizer = _plan.package_optimizer(opt_info,
                                      _plan.make_inner(*choice[:2]))
  report, error = _plan.dry_run(info.prefix, model, optimizer)
  root = _explain.root_entries(report.unmatched_checkpoint) if report else []
  unmatched = [k for k in getattr(report, "unmatched_checkpoint", [])
               if k.split("/")[0] not in root]  # carried by _extras
  if error is None and (unmatched or report.unmatched_objects):
    error = legacy.RestoreError(info.prefix, unmatched,
                                report.unmatched_objects)
  if error is not None:
    _, plan = inspect_cmd.explain(None, error)
    raise Refused("The checkpoint does not restore into --model "
                  f"{args.model}:\n  - " + "\n  - ".join(plan["why"]))
  return model, optimizer, (choice, report)


def native_optimizer(model: Any, source: Any, choice: tuple, report: Any,
                     growth_steps: int) -> Any:
  """Keras 3's own `LossScaleOptimizer` holding `source`'s restored state."""
  name, kwargs, _ = choice
  inner = _plan.make_inner(name, kwargs)
  opt = keras.optimizers.LossScaleOptimizer(
      inner, dynamic_growth_steps=growth_steps)
  opt.build(model.trainable_variables)
  old = source.inner_optimizer.variables
  if [tuple(v.shape) for v in old] != [tuple(v.shape) for v in
                                       inner.variables]:
    raise Refused(f"The restored {name} and Keras 3's {name} keep different "
                  "variables; pass --optimizer with the job's class")
  for target, value in zip(inner.variables, old):
    target.assign(value)
  opt.dynamic_scale.assign(float(report.loss_scale))
  opt.step_counter.assign(int(report.counter))
  return opt


def _extras(info: _ckpt.CheckpointInfo) -> dict:
  """Root scalars beside model and optimizer (a step, an epoch), kept."""
  reader = legacy.open_checkpoint(info.prefix)
  dtypes = reader.get_variable_to_dtype_map()
  return {name: tf.Variable(value, dtype=dtypes[
      name + "/.ATTRIBUTES/VARIABLE_VALUE"])
          for name, value in info.other.items() if name != "save_counter"}


def _write(directory: str, model: Any, opt: Any, extras: dict,
           number: Any) -> str:
  ckpt = tf.train.Checkpoint(model=model, optimizer=opt, **extras)
  manager = tf.train.CheckpointManager(ckpt, directory, max_to_keep=1)
  return manager.save(checkpoint_number=number)


def _expected(model: Any, opt: Any, extras: dict, path: str) -> None:
  values = {f"weight/{i}": v.numpy() for i, v in enumerate(model.weights)}
  values.update({f"optimizer/{i}": np.asarray(v.numpy())
                 for i, v in enumerate(opt.variables)})
  values.update({f"extra/{k}": v.numpy() for k, v in extras.items()})
  np.savez(path, **values)


def verify(work: str, directory: str, args: Any, choice: tuple,
           extras: dict) -> dict:
  """Reads `directory` back in a fresh interpreter without the package."""
  spec = {"model": args.model, "policy": args.policy,
          "optimizer": choice[0], "kwargs": choice[1],
          "growth_steps": args.growth_steps, "directory": directory,
          "expected": os.path.join(work, "expected.npz"),
          "extra": {k: v.dtype.name for k, v in extras.items()}}
  with open(os.path.join(work, "spec.json"), "w") as f:
    json.dump(spec, f)
  # PYTHONPATH stays (the model's module may need it): _verify.py blocks
  # importing the package itself.
  env = dict(os.environ)
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  script = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "_verify.py")
  result = subprocess.run(
      [sys.executable, script, os.path.join(work, "spec.json")],
      capture_output=True, text=True, env=env, check=False)
  lines = result.stdout.strip().splitlines()
  if result.returncode != 0 or not lines:
    raise Refused("Reading the converted checkpoint back without the "
                  "package failed:\n" + (result.stdout + result.stderr)[-2000:])
  return json.loads(lines[-1])


def _number(prefix: str) -> Any:
  match = re.search(r"-(\d+)$", prefix)
  return int(match.group(1)) if match else None


def _extra_files(args: Any, model: Any, opt: Any, work: str) -> list:
  """`--weights` / `--keras` outputs, written under `work` first."""
  written = []
  if args.weights:
    path = os.path.join(work, os.path.basename(args.weights))
    model.save_weights(path)
    written.append((path, args.weights))
  if args.keras:
    path = os.path.join(work, os.path.basename(args.keras))
    model.compile(optimizer=opt)
    model.save(path)
    written.append((path, args.keras))
  return written


def convert(args: Any, err: TextIO) -> dict:
  """Converts `args.old` to `args.new`; returns what the read-back saw."""
  if os.path.exists(args.new) and os.listdir(args.new):
    raise _plan.UsageError(f"NEW {args.new!r} exists and is not empty")
  _progress(1, f"reading {args.old}", err)
  info = _ckpt.describe(args.old)
  opt_info = check_convertible(info)
  _progress(2, f"restoring into {args.model} through the package", err)
  model, source, (choice, report) = _restore(args, info, opt_info)
  err.write(f"      optimizer {choice[0]}({choice[1]}): {choice[2]}\n")
  opt = native_optimizer(model, source, choice, report, args.growth_steps)
  extras = _extras(info)
  work = tempfile.mkdtemp(prefix=".convert-", dir=os.path.dirname(
      os.path.abspath(args.new)))
  try:
    _progress(3, "writing the native checkpoint", err)
    staged = os.path.join(work, "ckpt")
    _write(staged, model, opt, extras, _number(info.prefix))
    _expected(model, opt, extras, os.path.join(work, "expected.npz"))
    files = _extra_files(args, model, opt, work)
    _progress(4, "reading it back in a fresh interpreter without the "
              "package", err)
    seen = verify(work, staged, args, choice, extras)
    _progress(5, f"moving it to {args.new}", err)
    if os.path.exists(args.new):
      os.rmdir(args.new)
    shutil.move(staged, args.new)
    for path, target in files:
      shutil.move(path, target)
  finally:
    shutil.rmtree(work, ignore_errors=True)
  return seen


def _outputs(args: Any) -> dict:
  """`{NEW and each extra output: its entries, or None if absent}`."""
  paths = [args.new] + [p for p in (getattr(args, "weights", None),
                                    getattr(args, "keras", None)) if p]
  return {p: (os.listdir(p) if os.path.isdir(p) else [p])
          if os.path.exists(p) else None for p in paths}


def _undo(before: dict) -> None:
  """Leaves NEW and the extra outputs as they were: absent or empty."""
  for path, entries in before.items():
    if entries is None and os.path.isdir(path):
      shutil.rmtree(path, ignore_errors=True)
    elif entries is None and os.path.lexists(path):
      os.remove(path)
    elif entries == []:  # NEW was an empty directory: emptied again.
      shutil.rmtree(path, ignore_errors=True)
      os.makedirs(path, exist_ok=True)


def run(args: Any, out: Optional[TextIO] = None,
        err: Optional[TextIO] = None) -> int:
  """Runs `convert`; returns the exit code."""
  out = out or sys.stdout
  err = err or sys.stderr
  before = _outputs(args)
  try:
    seen = convert(args, err)
  except Refused as e:
    _undo(before)
    err.write(f"refused: {e}\nNothing was written to {args.new}.\n")
    return 1
  except BaseException:
    # A failure after NEW was moved in place (an extra output's move, an
    # interrupt) must not leave a half conversion there.
    _undo(before)
    raise
  out.write(f"wrote {tf.train.latest_checkpoint(args.new)}: iterations "
            f"{seen['iterations']}, loss scale {seen['loss_scale']}, counter "
            f"{seen['counter']}; read back exactly without the package\n")
  return 0
