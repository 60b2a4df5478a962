"""Front ends: argument checks of the `legacy` loaders, before files open."""

import os
from typing import Any

import keras
import tensorflow as tf


def path_arg(path: Any) -> str:
  """Argument `path` as a `str` (also given PathLike or UTF-8 bytes: TF 2.4)."""
  try:
    path = os.fspath(path)
  except TypeError:
    raise TypeError("path must be a str, bytes or os.PathLike path, got "
                    f"{type(path).__name__}: {path!r}.") from None
  if isinstance(path, bytes):
    try:
      path = path.decode("utf-8")
    except UnicodeDecodeError:
      raise ValueError("path must be UTF-8 when given as bytes, got "
                       f"{path!r}.") from None
  return path


def path_or_none(value):
  """`value` as a `str` path if it is one, else None (a file-like object)."""
  try:
    return os.fsdecode(os.fspath(value))
  except (TypeError, UnicodeDecodeError):
    return None


def bool_args(**flags):
  """Refuses anything but bools (e.g. the truthy string "False"), by name."""
  for name, value in flags.items():
    if not isinstance(value, bool):
      raise TypeError(f"{name} must be a bool (True or False), got "
                      f"{type(value).__name__}: {value!r}.")


def custom_objects_arg(custom_objects):
  """Refuses anything but None or a dict of the caller's objects by name."""
  if custom_objects is not None and not isinstance(custom_objects, dict):
    raise TypeError(f"custom_objects must be a dict or None, got "
                    f"{type(custom_objects).__name__}.")


def restore_targets_arg(model, optimizer):
  """Checks `restore_checkpoint`'s `model` and `optimizer` (not both None)."""
  if model is not None and not isinstance(model, keras.Model):
    raise TypeError(
        "model must be a Keras 3 model (a keras.Model, e.g. rebuilt with "
        "legacy.model_from_json) or None, got "
        f"{type(model).__module__}.{type(model).__name__}: {model!r}.")
  if optimizer is not None and not isinstance(optimizer,
                                              keras.optimizers.Optimizer):
    if isinstance(optimizer, str):
      hint = (f" Pass an optimizer object, e.g. LossScaleOptimizer("
              f"keras.optimizers.get({optimizer!r})).")
    elif isinstance(optimizer, tf.compat.v1.train.Optimizer):
      hint = (" TF1 optimizers (tf.compat.v1.train.Optimizer, also "
              "MixedPrecisionLossScaleOptimizer) restore their own "
              "checkpoints with tf.train.Checkpoint or "
              "tf.compat.v1.train.Saver.")
    else:
      hint = ""
    raise TypeError(
        "optimizer must be this package's LossScaleOptimizer, a Keras 3 "
        "optimizer (keras.optimizers.Optimizer) or None, got "
        f"{type(optimizer).__module__}.{type(optimizer).__name__}: "
        f"{optimizer!r}.{hint}")
  if model is None and optimizer is None:
    raise TypeError("restore_checkpoint needs a model (a Keras 3 keras.Model) "
                    "or an optimizer (this package's LossScaleOptimizer or a "
                    "Keras 3 optimizer), or both; got model=None and "
                    "optimizer=None.")
