"""`convert OLD NEW --model MODULE:FUNCTION`: a TF 2.x checkpoint, made native.

OLD (a checkpoint in any layout `_sources.py` finds, or a whole-model H5 file)
is restored through the package, exactly or refused; NEW, with Keras 3's own
LossScaleOptimizer, is left only if it reads back exactly without the package.
"""

from __future__ import annotations

import dataclasses
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
from tf_mixed_precision_compat.cli import _plan
from tf_mixed_precision_compat.cli import _sources
from tf_mixed_precision_compat.cli import _verify
from tf_mixed_precision_compat.cli import inspect_cmd
from tf_mixed_precision_compat.legacy import _loaders
from tf_mixed_precision_compat.legacy import _match
from tf_mixed_precision_compat.legacy import _read_checkpoint
from tf_mixed_precision_compat.legacy import _read_h5

# A fixed loss scale as Keras 3's dynamic LossScaleOptimizer: it never grows
# (2**31 - 1 finite steps; its counter is an int32).
FIXED_GROWTH_STEPS = 2**31 - 1
_DEFAULT_GROWTH_STEPS = 2000  # TF 2.x's default, never stored.
_DEFAULT_INITIAL_SCALE = 2.0**15  # TF 2.x's and Keras 3's default.
FIXED_NOTE = (
    "fixed loss scale {scale} written as Keras 3's LossScaleOptimizer("
    "initial_scale={scale}, dynamic_growth_steps=2**31-1): every step with "
    "finite gradients is the same as before; a step whose gradients "
    "overflow is now skipped and the scale halved for good (TF 2.x's fixed "
    "scale applied it, writing inf/NaN into the weights)")


class Refused(Exception):
  """The conversion cannot be exact (exit code 1); says why."""


@dataclasses.dataclass
class Restored:
  """What the package restored from OLD, to be written natively.

  Attributes:
    model: The Keras 3 model, restored.
    source: The package's optimizer (or the plain inner one), restored.
    choice: `(class name, constructor kwargs, why)` of the inner optimizer.
    loss_scale: The current loss scale to write.
    counter: The good-steps counter to write.
    initial_scale: The new LossScaleOptimizer's `initial_scale` argument.
    growth_steps: Its `dynamic_growth_steps` argument.
    notes: What the user should know about the conversion.
    extras: `{path tuple: tf.Variable}` carried over beside model and
      optimizer.
    paths: The object paths (tuples of names) to write the model and the
      optimizer at.
    why_native: Why `paths` are not the old checkpoint's ("" when they are).
    builder_optimizer: Whether the inner optimizer is `--model`'s own, made
      afresh by calling it again (its schedule is the job's code).
    plain: Whether NEW holds the plain inner optimizer (no loss scaling).
  """
  model: Any
  source: Any
  choice: tuple
  loss_scale: float
  counter: int
  initial_scale: float = _DEFAULT_INITIAL_SCALE
  growth_steps: int = _DEFAULT_GROWTH_STEPS
  notes: list = dataclasses.field(default_factory=list)
  extras: dict = dataclasses.field(default_factory=dict)
  paths: tuple = _sources.NATIVE
  why_native: str = "the model came from an H5 file"
  builder_optimizer: bool = False
  plain: bool = False


def _progress(step: int, text: str, err: TextIO) -> None:
  err.write(f"[{step}/5] {text}\n")
  err.flush()


def check_convertible(info: _ckpt.CheckpointInfo, layout: _sources.Layout,
                      fixed: Optional[float], plain: bool = False
                      ) -> _ckpt.OptimizerInfo:
  """The optimizer `layout` found, if the native layout can hold it
  (`plain`: the job had no loss-scale optimizer, as --no-loss-scale says)."""
  opt = next((o for o in info.optimizers if o.inner_path == layout.inner_key),
             None)
  if opt is None:  # The root itself (a checkpoint of an optimizer object).
    raise Refused(f"The optimizer at {layout.optimizer_path} is the "
                  "checkpoint's root; convert reads optimizers below it")
  if plain and (fixed is not None or opt.loss_scale is not None):
    raise _plan.UsageError(
        "--no-loss-scale: " + ("--fixed-loss-scale says the job had one"
                               if fixed is not None else
                               "the checkpoint holds a dynamic loss scale "
                               f"({opt.loss_scale['value']})"))
  if opt.loss_scale is None and fixed is None and not plain:
    raise Refused(
        "The checkpoint stores no loss scale: the job used a fixed loss "
        "scale (TF never stored its value) or none. Keras 3's "
        "LossScaleOptimizer is dynamic only; pass --fixed-loss-scale VALUE "
        "(the job's value, e.g. LossScaleOptimizer(opt, loss_scale=128) or "
        "(opt, dynamic=False, initial_scale=128)) to write it as one that "
        "never grows, --no-loss-scale if the job had no loss-scale "
        "optimizer (bfloat16, float32), or keep the package for this job.")
  if opt.loss_scale is not None and fixed is not None:
    raise _plan.UsageError(
        "--fixed-loss-scale: the checkpoint holds a dynamic loss scale "
        f"({opt.loss_scale['value']}), converted as it is")
  if opt.hyperparameters.get("decay", 0.0) != 0.0:
    raise Refused(f"decay={opt.hyperparameters['decay']}: Keras 3's "
                  "optimizers have no `decay`; use a LearningRateSchedule")
  return opt


def _refuse_leftovers(args: Any, report: Any, error: Any) -> None:
  if error is None and (report.unmatched_checkpoint or
                        report.unmatched_objects):
    error = legacy.RestoreError(report.source, report.unmatched_checkpoint,
                                report.unmatched_objects)
  if error is not None:
    _, plan = inspect_cmd.explain(None, error)
    raise Refused("The checkpoint does not restore into --model "
                  f"{args.model}:\n  - " + "\n  - ".join(plan["why"]))


def _extras(layout: _sources.Layout) -> dict:
  """Scalars beside model and optimizer (a step, an epoch), kept by path."""
  dtypes = layout.reader.get_variable_to_dtype_map()
  out = {}
  for path, node in layout.extras.items():
    key = layout.graph.variable(node)[0]
    out[path] = tf.Variable(layout.reader.get_tensor(key), dtype=dtypes[key])
  return out


def _growth_steps(args: Any, fixed: Optional[float], given: Any = None) -> int:
  if fixed is not None:
    if args.growth_steps is not None:
      raise _plan.UsageError("--growth-steps: a fixed loss scale never grows")
    return FIXED_GROWTH_STEPS
  return args.growth_steps or getattr(given, "dynamic_growth_steps",
                                      _DEFAULT_GROWTH_STEPS)


def _restore_checkpoint(args: Any, err: TextIO) -> Restored:
  """Restores a TF 2.x checkpoint through the package."""
  if not args.model:
    raise _plan.UsageError("--model MODULE:FUNCTION is needed for a "
                           "checkpoint (only H5 files describe their model)")
  info = _ckpt.describe(args.old)
  if info.generation == _ckpt.NAME_BASED:
    raise Refused(f"{info.prefix} is {_ckpt.NAME_BASED}: "
                  f"{_ckpt.NAME_BASED_PATH}.")
  if any(o.layout != "keras2" for o in info.optimizers):
    raise Refused(
        f"{info.prefix} was written on Keras 3 ({info.generation}); convert "
        "reads TF 2.2-2.4 checkpoints. A checkpoint this package wrote "
        "restores with the package installed (tf.train.Checkpoint.restore); "
        "save it again from a Keras 3 LossScaleOptimizer to leave it.")
  plain = bool(getattr(args, "no_loss_scale", False))
  try:
    layout = _sources.find_optimizer(args.old, args.optimizer_path)
    opt_info = check_convertible(info, layout, args.fixed_loss_scale, plain)
    model, given = _plan.build_job(args.model, args.policy)
    _sources.find(layout, model, args.model_path, args.weights_h5)
  except _sources.NotConvertible as e:
    raise Refused(str(e)) from None
  _progress(2, f"restoring into {args.model} through the package", err)
  where = (f"model at {layout.model_path}" if layout.model_path else
           f"model weights from {args.weights_h5}")
  err.write(f"      {where}, optimizer at {layout.optimizer_path}\n")
  choice, inner = _plan.job_optimizer(opt_info, args, given)
  problem = _plan.schedule_problem(opt_info, inner)
  if problem:
    raise Refused(problem)
  source = _plan.package_optimizer(opt_info, inner)
  report: Any = None
  error: Optional[ValueError] = None
  try:
    report = _sources.restore(layout, model, source, args.weights_h5)
  except ValueError as e:  # A RestoreError, or an H5 file that does not fit.
    error = e
  _refuse_leftovers(args, report, error)
  fixed = args.fixed_loss_scale
  restored = Restored(
      model, source, choice,
      fixed if fixed is not None else
      (0.0 if plain else float(report.loss_scale)),
      0 if fixed is not None or plain else int(report.counter),
      initial_scale=fixed or getattr(given, "initial_scale",
                                     _DEFAULT_INITIAL_SCALE),
      growth_steps=_growth_steps(args, fixed, given), extras=_extras(layout),
      builder_optimizer=given is not None, plain=plain)
  restored.paths, restored.why_native = _sources.written_paths(layout)
  restored.notes += report.notes
  if fixed is not None:
    restored.notes.append(FIXED_NOTE.format(scale=fixed))
  if layout.model_node is None:
    restored.notes.append(
        f"weights from {args.weights_h5}; the checkpoint holds no slots (TF "
        "saved a slot only beside its variable), so they start at zero, as "
        "in the job's own resume")
  return restored


def _h5_choice(inner: Any) -> tuple:
  name = type(inner).__name__
  if name not in _plan.OPTIMIZERS:
    raise Refused(f"The H5 file's inner optimizer is {name}; convert writes "
                  f"{', '.join(_plan.OPTIMIZERS)}")
  config = {k: v for k, v in inner.get_config().items() if k != "name"}
  try:
    json.dumps(config)
  except TypeError:
    raise Refused(f"{name}'s configuration holds objects (a learning-rate "
                  "schedule?) convert cannot pass on") from None
  return name, _plan.accepted(name, config), "from the file's training config"


def _h5_scale(args: Any, opt: Any, restored: Restored) -> None:
  """Fills in the loss scale of an H5 file's optimizer."""
  if opt.dynamic:
    if args.fixed_loss_scale is not None:
      raise _plan.UsageError("--fixed-loss-scale: the file's optimizer has a "
                             "dynamic loss scale")
    restored.loss_scale = float(opt.loss_scale.numpy())
    restored.counter = int(opt.dynamic_counter.numpy())
    restored.initial_scale = float(opt.initial_scale)
    restored.growth_steps = args.growth_steps or opt.dynamic_growth_steps
    restored.notes.append(
        "H5 files never stored the dynamic loss scale or its counter: they "
        f"start again at {opt.initial_scale} and 0, as when the package "
        "loads the file")
    return
  if args.fixed_loss_scale != float(opt.initial_scale):
    raise Refused(
        f"The file's optimizer has a fixed loss scale of {opt.initial_scale}"
        ". Keras 3's LossScaleOptimizer is dynamic only; pass "
        f"--fixed-loss-scale {opt.initial_scale:g} to write it as one that "
        "never grows, or keep the package for this job.")
  restored.loss_scale = restored.initial_scale = args.fixed_loss_scale
  restored.growth_steps = _growth_steps(args, args.fixed_loss_scale)
  restored.notes.append(FIXED_NOTE.format(scale=args.fixed_loss_scale))


def _load_h5(args: Any, err: TextIO) -> Any:
  """The H5 file's model, compiled with its optimizer, through the package:
  built from its config, or `--model`'s (a Lambda's bytecode from another
  Python, a layer only the job's code has)."""
  if not args.model:
    _progress(2, "loading it through the package (legacy.load_model)", err)
    return legacy.load_model(args.old)
  model, given = _plan.build_job(args.model, args.policy)
  if given is not None:
    raise _plan.UsageError(
        f"--model {args.model} returned an optimizer: an H5 file's comes "
        "from its own training config; return the model only")
  _progress(2, f"loading its weights and optimizer state into {args.model}"
            " through the package (by layer order, as TF 2.x's "
            "load_weights)", err)
  return _loaders.load_h5_into(args.old, model)


def _restore_h5(args: Any, err: TextIO) -> Restored:
  """Loads a whole-model TF 2.x H5 file through the package."""
  for option in ("model_path", "optimizer_path", "weights_h5",
                 "optimizer", "optimizer_args"):
    if getattr(args, option, None):
      raise _plan.UsageError(
          f"--{option.replace('_', '-')} is not used with an H5 model file: "
          "the model and optimizer come from its own config")
  try:
    model = _load_h5(args, err)
  except ValueError as e:
    if isinstance(e, _plan.UsageError):
      raise
    raise Refused(f"The package does not load {args.old}: {e}") from None
  opt = model.optimizer
  if not isinstance(opt, legacy.LossScaleOptimizer):
    raise Refused(f"{args.old} holds no loss-scale optimizer (saved without "
                  "one, or without its training config): nothing to convert;"
                  " legacy.load_model gives the model")
  restored = Restored(model, opt, _h5_choice(opt.inner_optimizer), 0.0, 0)
  _h5_scale(args, opt, restored)
  return restored


def native_optimizer(restored: Restored, model_spec: Optional[str] = None
                     ) -> Any:
  """Keras 3's own `LossScaleOptimizer` holding the restored state."""
  name, kwargs, _ = restored.choice
  if restored.builder_optimizer:
    # The builder's optimizer afresh: its schedule may be any code.
    inner = _plan.given_inner(_plan.build_job(str(model_spec))[1])
  else:
    inner = _plan.make_inner(name, kwargs)
  opt = inner if restored.plain else keras.optimizers.LossScaleOptimizer(
      inner, initial_scale=restored.initial_scale,
      dynamic_growth_steps=restored.growth_steps)
  opt.build(restored.model.trainable_variables)
  old = _match.inner_optimizer_of(restored.source).variables
  if [tuple(v.shape) for v in old] != [tuple(v.shape) for v in
                                       inner.variables]:
    raise Refused(f"The restored {name} and Keras 3's {name} keep different "
                  "variables; pass --optimizer with the job's class")
  for target, value in zip(inner.variables, old):
    target.assign(value)
  if not restored.plain:
    opt.dynamic_scale.assign(restored.loss_scale)
    opt.step_counter.assign(restored.counter)
  return opt


def written(restored: Restored) -> str:
  """Where NEW holds what, in words.

  Example:

  >>> print(written(Restored(
  ...     None, None, (), 1.0, 0, paths=(("trainer", "model"),
  ...                                    ("trainer", "optimizer")),
  ...     why_native="", extras={("step",): 0})).replace(", ", ",\\n"))
  model at trainer.model,
  optimizer at trainer.optimizer,
  step at step (their paths in the old checkpoint)
  """
  names = ["model", "optimizer"] + [path[-1] for path in restored.extras]
  paths = list(restored.paths) + list(restored.extras)
  where = ", ".join(f"{name} at {_sources.dotted(path)}"
                    for name, path in zip(names, paths))
  if restored.why_native:
    return f"{where} ({restored.why_native})"
  return f"{where} (their paths in the old checkpoint)"


def _save_counter(prefix: str) -> Optional[int]:
  """How many saves a `tf.train.Checkpoint` root counted, if it was one."""
  reader = tf.train.load_checkpoint(prefix)
  key = "save_counter" + _read_checkpoint.VALUE_SUFFIX
  return int(reader.get_tensor(key)) if reader.has_tensor(key) else None


def _write(directory: str, restored: Restored, opt: Any,
           prefix: Optional[str]) -> str:
  """Writes NEW, numbered as the old checkpoint `prefix` (`ckpt-40`) was."""
  model_path, optimizer_path = restored.paths
  objects = {model_path: restored.model, optimizer_path: opt,
             **restored.extras}
  # Nested as _verify.py reads it back.
  ckpt = tf.train.Checkpoint(**_verify.tree(
      objects.items(), tf.__internal__.tracking.AutoTrackable))
  saves = None if prefix is None else _save_counter(prefix)
  if saves:
    # save() counts itself: NEW then holds the old count, and the job's next
    # manager.save() is numbered as the old job's would have been.
    ckpt.save_counter.assign(saves - 1)
  manager = tf.train.CheckpointManager(ckpt, directory, max_to_keep=1)
  number = re.search(r"-(\d+)$", prefix or "")
  return manager.save(checkpoint_number=int(number.group(1)) if number
                      else None)


def verify(work: str, directory: str, args: Any, restored: Restored,
           keras_file: Optional[str]) -> dict:
  """Reads `directory` back in a fresh interpreter without the package."""
  spec = {"model": args.model, "policy": args.policy,
          "keras_file": keras_file, "optimizer": restored.choice[0],
          "kwargs": restored.choice[1],
          "builder_optimizer": restored.builder_optimizer,
          "plain": restored.plain,
          "initial_scale": restored.initial_scale,
          "growth_steps": restored.growth_steps, "directory": directory,
          "expected": os.path.join(work, "expected.npz"),
          "model_path": restored.paths[0],
          "optimizer_path": restored.paths[1],
          "extra": [[k, v.dtype.name] for k, v in restored.extras.items()]}
  with open(os.path.join(work, "spec.json"), "w") as f:
    json.dump(spec, f)
  # This process's environment (main set TF_CPP_MIN_LOG_LEVEL): PYTHONPATH
  # stays (the model's module may need it), _verify.py blocks importing the
  # package itself.
  script = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "_verify.py")
  result = subprocess.run(
      [sys.executable, script, os.path.join(work, "spec.json")],
      capture_output=True, text=True, check=False)
  lines = result.stdout.strip().splitlines()
  try:
    seen = json.loads(lines[-1]) if lines else None
  except ValueError:
    seen = None
  if result.returncode == 0 and seen is not None:
    return seen
  if seen is not None and seen.get("wrong"):
    raise Refused(
        "Reading the converted checkpoint back without the package gave "
        f"other values for {len(seen['wrong'])} of them, first:\n  - " +
        "\n  - ".join(seen["wrong"][:3]))
  raise Refused("Reading the converted checkpoint back without the "
                "package failed:\n" + _last_error(result.stderr or
                                                    result.stdout))


def _last_error(output: str) -> str:
  """The exception line of a traceback in `output` (else its tail), not the
  log lines TensorFlow printed before it."""
  lines = [line for line in output.strip().splitlines() if line.strip()]
  start = max((i for i, line in enumerate(lines)
               if line.startswith("Traceback (most recent call last)")),
              default=None)
  if start is None:
    return "\n".join(lines[-20:])
  tail = lines[start:]
  frames = [line.strip() for line in tail if line.startswith("  File ")]
  error = [line for line in tail[1:] if not line.startswith(" ")]
  return "\n".join(([frames[-1]] if frames else []) + error)[-2000:]


def _extra_files(args: Any, restored: Restored, opt: Any, work: str,
                 staged: str) -> list:
  """`--weights` / `--keras` outputs, written under `work` first.

  An H5 file's model is written as `.keras` too unless `--model` builds it.
  """
  written = []
  if args.weights:
    path = os.path.join(work, os.path.basename(args.weights))
    restored.model.save_weights(path)
    written.append((path, args.weights))
  if args.keras or not args.model:
    path = (os.path.join(work, os.path.basename(args.keras)) if args.keras
            else os.path.join(staged, "model.keras"))
    model = restored.model  # Compiled with `opt` and the loss it had.
    config = (model.get_compile_config() or {}) if model.compiled else {}
    model.compile(optimizer=opt, **{
        k: config[k] for k in ("loss", "loss_weights", "metrics",
                               "weighted_metrics") if config.get(k)})
    model.save(path)
    written.append((path, args.keras))
  return written


def convert(args: Any, err: TextIO) -> dict:
  """Converts `args.old` to `args.new`; returns what the read-back saw."""
  if os.path.exists(args.new) and os.listdir(args.new):
    raise _plan.UsageError(f"NEW {args.new!r} exists and is not empty")
  h5 = os.path.isfile(args.old) and _read_h5.is_tf2x_h5(args.old)
  if not h5 and os.path.isfile(args.old):  # A prefix is no file itself.
    raise ValueError(f"{args.old}: not a TF 2.x whole-model H5 file (nor a "
                     "checkpoint: give its prefix or directory)")
  _progress(1, f"reading {args.old}", err)
  restored = (_restore_h5 if h5 else _restore_checkpoint)(args, err)
  name, kwargs, why = restored.choice
  err.write(f"      optimizer {name}({kwargs}): {why}\n")
  for note in restored.notes:
    err.write(f"      note: {note}\n")
  opt = native_optimizer(restored, args.model)
  parent = os.path.dirname(os.path.abspath(args.new))
  os.makedirs(parent, exist_ok=True)  # As `mkdir -p` would.
  work = tempfile.mkdtemp(prefix=".convert-", dir=parent)
  try:
    _progress(3, "writing the native checkpoint", err)
    staged = os.path.join(work, "ckpt")
    os.makedirs(staged)
    files = _extra_files(args, restored, opt, work, staged) if h5 else []
    if h5:
      # The model uncompiled (else the package's optimizer, which the model
      # tracks, would be written), and a native optimizer built for its
      # variables: the `.keras` file's, or `--model`'s afresh.
      plain = (_plan.build_model(args.model) if args.model else
               keras.models.load_model(files[-1][0], compile=False))
      for target, value in zip(plain.weights, restored.model.weights):
        target.assign(value)
      restored.model = plain
      opt = native_optimizer(restored)
    _write(staged, restored, opt,
           None if h5 else legacy.checkpoint_prefix(args.old))
    err.write(f"      {written(restored)}\n")
    np.savez(os.path.join(work, "expected.npz"), **{
        key: v.numpy() for key, v in _verify.values(
            restored.model, opt, restored.extras).items()})
    if not h5:  # After the write: the checkpoint's model has no optimizer.
      files = _extra_files(args, restored, opt, work, staged)
    _progress(4, "reading it back in a fresh interpreter without the "
              "package", err)
    keras_file = files[-1][0] if args.keras or (h5 and not args.model) \
        else None
    seen = verify(work, staged, args, restored, keras_file)
    _progress(5, f"moving it to {args.new}", err)
    if os.path.exists(args.new):
      os.rmdir(args.new)
    shutil.move(staged, args.new)
    for path, target in files:
      if target:  # (NEW/model.keras moved with NEW.)
        shutil.move(path, target)
  finally:
    shutil.rmtree(work, ignore_errors=True)
  seen["notes"] = restored.notes
  return seen


def _outputs(args: Any) -> dict:
  """`{NEW and each extra output: its entries, or None if absent}`."""
  paths = [args.new] + [p for p in (args.weights, args.keras) if p]
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
  scale = ("no loss scale" if seen["loss_scale"] is None else
           f"loss scale {seen['loss_scale']}, counter {seen['counter']}")
  out.write(f"wrote {tf.train.latest_checkpoint(args.new)}: iterations "
            f"{seen['iterations']}, {scale}; read back exactly without the "
            "package\n")
  return 0
