"""The user's model and optimizer, and the restore plan of a checkpoint.

`--model` runs the user's own code on purpose; the dry run restores into that
throwaway model and a fresh optimizer, so it changes no training state.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import sys
import traceback
from typing import Any, Callable, Optional

import keras

from tf_mixed_precision_compat import LossScaleOptimizer
from tf_mixed_precision_compat.cli import _ckpt
from tf_mixed_precision_compat.optimizers import _keras2_config

# Keras 3 optimizer classes convert and the dry run may build: TF 2.x's
# built-in ones, in the slot table's order.
OPTIMIZERS = tuple(name for name in _keras2_config.SLOTS
                   if name in _keras2_config.KERAS2_OPTIMIZERS.values())
# Stored TF 2.x hyperparameters Keras 3's constructors take under that name.
_HYPERS = ("learning_rate", "momentum", "beta_1", "beta_2", "rho")


class UsageError(ValueError):
  """A command-line argument cannot be used (exit code 2)."""


class BuilderFailed(Exception):
  """The user's `--model` code raised (exit code 1): its failure, not ours."""


def _run_builder(spec: str, call: Callable[[], Any]) -> Any:
  """`call()`, the user's code raising as `BuilderFailed` with its last line
  and where it raised."""
  try:
    return call()
  except Exception as e:  # pylint: disable=broad-except
    frames = traceback.extract_tb(e.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    lines = str(e).strip().splitlines()
    raise BuilderFailed(
        f"--model {spec} raised {type(e).__name__}{where}"
        + (f": {lines[-1]}" if lines else "")) from e


def load_function(spec: str) -> Any:
  """The function `MODULE:FUNCTION` names (MODULE: dotted name or .py path).

  Raises UsageError if `spec` is malformed or names nothing callable.

  Example:

  >>> load_function("json:dumps")([1])
  '[1]'
  """
  module_name, sep, function = spec.rpartition(":")
  if not sep or not module_name or not function:
    raise UsageError(f"--model must be MODULE:FUNCTION, got {spec!r}")
  if module_name.endswith(".py") or os.sep in module_name:
    name = os.path.splitext(os.path.basename(module_name))[0]
    loader = importlib.util.spec_from_file_location(name, module_name)
    if loader is None or not os.path.exists(module_name):
      raise UsageError(f"--model: no such file {module_name!r}")
    module = importlib.util.module_from_spec(loader)
    sys.modules[name] = module
    _run_builder(spec, lambda: loader.loader.exec_module(module))  # type: ignore[union-attr]
  else:
    if os.getcwd() not in sys.path:
      sys.path.insert(0, os.getcwd())
    try:
      module = _run_builder(spec,
                            lambda: importlib.import_module(module_name))
    except BuilderFailed as e:
      missing = getattr(e.__cause__, "name", None) or ""
      if (isinstance(e.__cause__, ModuleNotFoundError) and
          (module_name + ".").startswith(missing + ".")):
        # The module itself (or its package) is not there: a wrong --model.
        raise UsageError(f"--model: cannot import {module_name!r}: "
                         f"{e.__cause__}") from None
      raise
  fn = getattr(module, function, None)
  if not callable(fn):
    raise UsageError(f"--model: {module_name!r} has no function {function!r}")
  return fn


def build_job(spec: str, policy: Optional[str] = None) -> tuple[Any, Any]:
  """Calls the `--model` function: `(model, its optimizer or None)`.

  The function returns the built model, or `(model, optimizer)` when the
  checkpoint cannot say all of the optimizer (a learning-rate schedule).
  """
  if policy:
    keras.mixed_precision.set_global_policy(policy)
  built = _run_builder(spec, load_function(spec))
  model, optimizer = built if isinstance(built, tuple) and len(built) == 2 \
      else (built, None)
  if not isinstance(model, keras.Model):
    raise UsageError(f"--model {spec} returned {type(model).__name__}, not a "
                     "Keras 3 model (keras.Model) or (model, optimizer)")
  if not model.built:
    raise UsageError(f"--model {spec} returned a model that is not built: "
                     "give its Input, or call it once on data, in FUNCTION")
  if optimizer is not None and not isinstance(optimizer,
                                              keras.optimizers.Optimizer):
    raise UsageError(f"--model {spec} returned (model, "
                     f"{type(optimizer).__name__}): the second must be a "
                     "Keras 3 optimizer (keras.optimizers.Optimizer)")
  return model, optimizer


def build_model(spec: str, policy: Optional[str] = None) -> Any:
  """The model the `--model` function returns, built."""
  return build_job(spec, policy)[0]


def given_inner(optimizer: Any) -> Any:
  """The inner optimizer of a builder's optimizer (itself if plain)."""
  if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
    return optimizer.inner_optimizer
  return optimizer


def job_optimizer(info: Optional[_ckpt.OptimizerInfo], args: Any,
                  given: Any) -> tuple[tuple[str, dict, str], Any]:
  """`((class, kwargs, why), inner optimizer)` to restore the old one into:
  the builder's own, else one made from the checkpoint and the flags."""
  if given is None:
    choice = optimizer_choice(info, args.optimizer, args.optimizer_args)
    return choice, make_inner(*choice[:2])
  if args.optimizer or args.optimizer_args:
    raise UsageError("--optimizer, --optimizer-args: --model's function "
                     "returns the job's optimizer, which is used as it is")
  inner = given_inner(given)
  return (type(inner).__name__, {}, "returned by --model's function"), inner


def schedule_problem(info: Optional[_ckpt.OptimizerInfo],
                     inner: Any) -> Optional[str]:
  """Why `inner`'s learning rate cannot hold the checkpoint's, or None.

  TF 2.x stored a learning rate only when it was a number: its absence
  means a schedule (or a callable), the job's own code.
  """
  if info is None or info.iterations is None or \
      "learning_rate" in info.hyperparameters:
    return None
  if not isinstance(inner.learning_rate, keras.Variable):
    return None  # A schedule here too: the job's code says its value.
  return (
      "The checkpoint stores no learning rate: the job's was a "
      "LearningRateSchedule (or a callable), which TF 2.x did not store "
      "since it is the job's code. Have --model's function return the "
      "model and the job's optimizer with its schedule, e.g. `return "
      "model, keras.optimizers.SGD(schedule, momentum=0.9)`: convert then "
      "restores into that optimizer and writes it.")


def optimizer_choice(info: Optional[_ckpt.OptimizerInfo], name: Optional[str],
                     args: Optional[str]) -> tuple[str, dict, str]:
  """`(class name, constructor kwargs, why)` of the Keras 3 inner optimizer."""
  try:
    kwargs = json.loads(args) if args else {}
  except ValueError:
    kwargs = None
  if not isinstance(kwargs, dict):
    raise UsageError("--optimizer-args must be a JSON object, e.g. "
                     "'{\"nesterov\": true}'")
  if info is not None:
    kwargs = {**{k: v for k, v in info.hyperparameters.items()
                 if k in _HYPERS}, **kwargs}
  if name is not None:
    if name not in OPTIMIZERS:
      raise UsageError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}; "
                       f"got {name!r}")
    return name, accepted(name, kwargs), "given by --optimizer"
  if info is None or info.class_name is None:
    note = info.class_note if info else "the checkpoint has no optimizer"
    raise UsageError(
        f"Cannot tell the optimizer class from the checkpoint ({note}); "
        f"pass --optimizer NAME ({', '.join(OPTIMIZERS)})")
  if info.class_name == "Adam" and any("vhat" in s for s in
                                       info.slots.values()):
    kwargs.setdefault("amsgrad", True)
  if info.class_name == "RMSprop" and any("mg" in s for s in
                                          info.slots.values()):
    kwargs.setdefault("centered", True)
  return (info.class_name, accepted(info.class_name, kwargs),
          "inferred " + info.class_note)


def accepted(name: str, kwargs: dict) -> dict:
  """The `kwargs` keras.optimizers.`name`'s constructor takes."""
  parameters = inspect.signature(getattr(keras.optimizers, name)).parameters
  return {k: v for k, v in kwargs.items() if k in parameters}


def make_inner(name: str, kwargs: dict) -> Any:
  """A Keras 3 optimizer of class `name`, from the `kwargs` it takes."""
  try:
    return getattr(keras.optimizers, name)(**accepted(name, kwargs))
  except (TypeError, ValueError) as e:
    raise UsageError(f"Cannot create keras.optimizers.{name}(**{kwargs}): "
                     f"{e}") from e


def package_optimizer(info: Optional[_ckpt.OptimizerInfo], inner: Any) -> Any:
  """What the package restores a TF 2.x optimizer into."""
  if info is not None and info.loss_scale is not None:
    return LossScaleOptimizer(inner)
  return inner
