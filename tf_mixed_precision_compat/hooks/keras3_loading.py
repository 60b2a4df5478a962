"""Keras 3's loading entry points, taught TF 2.x files by `install()`: TF
2.2-2.4 configs and files go to `legacy/`'s front ends, the rest to Keras 3.
"""

import functools
import inspect
import os

import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat.legacy import _args
from tf_mixed_precision_compat.legacy import _entry_points
from tf_mixed_precision_compat.legacy import _loaders
from tf_mixed_precision_compat.legacy import _read_h5


def wrap_optimizers_deserialize(original):
  """`keras.optimizers.deserialize`, with TF 2.x configs taken legacy."""

  @functools.wraps(original)
  def deserialize(config, custom_objects=None):
    if _entry_points.is_tf2x_optimizer_config(config):
      return _entry_points.deserialize_tf2x_optimizer(config, custom_objects)
    return original(config, custom_objects=custom_objects)

  return deserialize


def wrap_optimizers_get(original):
  """`keras.optimizers.get`, with TF 2.x configs taken legacy."""

  @functools.wraps(original)
  def get(identifier):
    if _entry_points.is_tf2x_optimizer_config(identifier):
      return _entry_points.deserialize_tf2x_optimizer(identifier)
    return original(identifier)

  return get


def wrap_load_model(original):
  """`keras.models.load_model`, with TF 2.x files loaded by `legacy`."""
  signature = inspect.signature(original)

  @functools.wraps(original)
  def load_model(filepath, *args, **kwargs):
    path = _args.path_or_none(filepath)
    if path is None or not (_read_h5.is_tf2x_h5(path) or
                            _entry_points.is_tf2x_saved_model(path)):
      return original(filepath, *args, **kwargs)
    bound = signature.bind(filepath, *args, **kwargs)
    bound.apply_defaults()
    options = dict(bound.arguments)
    return _loaders.load_model(
        path, custom_objects=options.get("custom_objects"),
        compile=options.get("compile", True),
        safe_mode=options.get("safe_mode", True))

  return load_model


def wrap_load_weights(original):
  """`keras.Model.load_weights`, with TF 2.x weight files restored exactly."""

  @functools.wraps(original)
  def load_weights(self, filepath, *args, **kwargs):
    kind = _entry_points.weights_format(filepath)
    if kind is None:
      return original(self, filepath, *args, **kwargs)
    by_name, skip_mismatch = _tf24_weights_arguments(args, kwargs)
    path = os.fspath(filepath)
    if kind == "tf":
      if by_name:
        raise NotImplementedError(
            "Weights may only be loaded based on topology into Models when "
            "loading TensorFlow-formatted weights (got by_name=True to "
            "load_weights).")
      return _entry_points.load_tf_format_weights(self, path)
    _entry_points.load_h5_weights(self, path, by_name, skip_mismatch)
    return None

  return load_weights


def _tf24_weights_arguments(args, kwargs):
  """(by_name, skip_mismatch): TF 2.4's `load_weights` arguments, checked."""
  names = ("by_name", "skip_mismatch", "options")
  if len(args) > len(names):
    raise TypeError(f"load_weights() takes at most {len(names) + 1} "
                    f"positional arguments for TF 2.x weight files "
                    f"({len(args) + 1} given).")
  values = dict(zip(names, args))
  for key, value in kwargs.items():
    if key not in names:
      raise TypeError(f"load_weights() got an unexpected keyword argument "
                      f"{key!r} for a TF 2.x weight file; it takes "
                      f"{', '.join(names)}.")
    if key in values:
      raise TypeError(f"load_weights() got multiple values for {key!r}.")
    values[key] = value
  by_name, skip_mismatch, options = (values.get("by_name", False),
                                     values.get("skip_mismatch", False),
                                     values.get("options"))
  for key, value in (("by_name", by_name), ("skip_mismatch", skip_mismatch)):
    if not isinstance(value, (bool, np.bool_)):
      raise TypeError(f"load_weights(): {key} must be a bool, got {value!r}.")
  if not isinstance(options, (tf.train.CheckpointOptions, type(None))):
    raise TypeError("load_weights(): options must be a "
                    f"tf.train.CheckpointOptions or None, got {options!r}.")
  if skip_mismatch and not by_name:
    raise ValueError("When calling model.load_weights, skip_mismatch can only "
                     "be set to True when by_name is True.")
  return bool(by_name), bool(skip_mismatch)
