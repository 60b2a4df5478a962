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


def build_model(spec: str, policy: Optional[str] = None) -> Any:
  """Calls the `--model` function and builds what it returns."""
  if policy:
    keras.mixed_precision.set_global_policy(policy)
  model = _run_builder(spec, load_function(spec))
  if not isinstance(model, keras.Model):
    raise UsageError(f"--model {spec} returned {type(model).__name__}, not a "
                     "Keras 3 model (keras.Model)")
  if not model.built:
    raise UsageError(f"--model {spec} returned a model that is not built: "
                     "give its Input, or call it once on data, in FUNCTION")
  return model


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
