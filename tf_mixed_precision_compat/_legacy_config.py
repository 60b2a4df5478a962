"""Rebuilding compiled Keras 3 models from the configs TF 2.3/2.4 saved, safely.

TF 2.x H5 files and SavedModels carry a model config (`model_config`, or the
SavedModel root's metadata) and a `training_config` (loss, metrics, optimizer
config). Building from them must not run code the file brings: a `Lambda`
layer stores Python bytecode, and Keras 3 configs can name modules to import.
`check_config` walks a config first and, in safe mode, refuses both, and any
layer class that is neither a built-in Keras 3 layer nor one the caller passed
in `custom_objects` (the caller's opt-in).
"""

import json

import keras
import tensorflow as tf

from tf_mixed_precision_compat import keras_optimizer
from tf_mixed_precision_compat import policy as policy_module

_MODEL_CLASSES = frozenset({"Sequential", "Functional", "Model"})
_LSO_CLASSES = {
    "LossScaleOptimizer": keras_optimizer.LossScaleOptimizer,
    "LossScaleOptimizerV1": keras_optimizer.LossScaleOptimizerV1,
}
_SAFE_MODULE_PREFIXES = ("keras", "tf_mixed_precision_compat")


def parse_json(text, what, source):
  if isinstance(text, bytes):
    text = text.decode("utf-8")
  try:
    return json.loads(text)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{source!r}: its {what} is not valid JSON ({e}); the "
                     "file is corrupted or not a Keras model.") from None


def _is_builtin_layer(class_name):
  cls = getattr(keras.layers, class_name, None)
  return isinstance(cls, type) and issubclass(cls, keras.layers.Layer)


def check_config(config, source, safe_mode, custom_objects):
  """Refuses configs whose loading would run code from the file.

  Args:
    config: A model config dict `{"class_name", "config"}`.
    source: The file, for messages.
    safe_mode: Whether to refuse Lambda layers and foreign modules.
    custom_objects: Names the caller vouches for.

  Raises:
    ValueError: Naming the file, the offending layer and `safe_mode`.
  """
  custom = set(custom_objects or ())

  def refuse(where, why):
    raise ValueError(
        f"{source!r}: refusing to load {where}: {why}. Loading it would run "
        "code stored in the file; pass safe_mode=False only if you trust the "
        "file (and custom_objects for your own classes).")

  def walk(node, where):
    if isinstance(node, dict):
      module = node.get("module")
      if (safe_mode and isinstance(module, str) and
          not module.startswith(_SAFE_MODULE_PREFIXES) and "class_name" in node
          and node["class_name"] not in custom):
        refuse(where, f"it names the Python module {module!r}")
      if safe_mode and node.get("function_type") in ("lambda", "raw"):
        refuse(where, "it holds a serialized Python function")
      for key, value in node.items():
        walk(value, where)
    elif isinstance(node, list):
      for value in node:
        walk(value, where)

  def walk_layers(model_config, where):
    class_name = model_config.get("class_name")
    if class_name in custom:
      return
    if class_name not in _MODEL_CLASSES:
      if class_name == "Lambda":
        if safe_mode:
          refuse(f"{where} (a Lambda layer)",
                 "Lambda layers store Python bytecode")
      elif not _is_builtin_layer(str(class_name)):
        raise ValueError(
            f"{source!r}: unknown layer class {class_name!r} at {where}; "
            "pass it in custom_objects.")
      walk(model_config.get("config"), where)
      return
    inner = model_config.get("config")
    if not isinstance(inner, dict):
      raise ValueError(f"{source!r}: malformed model config at {where}.")
    for layer in inner.get("layers", []):
      if not isinstance(layer, dict):
        raise ValueError(f"{source!r}: malformed layer config at {where}.")
      name = (layer.get("config") or {}).get("name", "?")
      walk_layers(layer, f"{where}/{name}")

  if not isinstance(config, dict) or "class_name" not in config:
    raise ValueError(f"{source!r}: the model config is malformed (no "
                     "class_name).")
  walk_layers(config, str(config.get("config", {}).get("name", "model")))


def build_model(config, source, safe_mode, custom_objects):
  """A Keras 3 model from a TF 2.x model config, after `check_config`."""
  check_config(config, source, safe_mode, custom_objects)
  try:
    return policy_module.model_from_config(config,
                                           custom_objects=custom_objects)
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f"{source!r}: cannot rebuild the model from its config: "
                     f"{type(e).__name__}: {e}") from e


def build_optimizer(optimizer_config, source, custom_objects):
  """Our `LossScaleOptimizer` (or a Keras 3 optimizer) from a TF 2.x config."""
  if not isinstance(optimizer_config, dict) or "class_name" not in (
      optimizer_config):
    raise ValueError(f"{source!r}: malformed optimizer config "
                     f"{optimizer_config!r}.")
  class_name = optimizer_config["class_name"]
  options = optimizer_config.get("config") or {}
  try:
    if class_name in _LSO_CLASSES:
      # TF 2.3's experimental class was saved as "LossScaleOptimizer" with
      # TF 2.3's keys; our `from_config` reads both formats.
      cls = (keras_optimizer.LossScaleOptimizerV1
             if class_name == "LossScaleOptimizerV1" else
             keras_optimizer.LossScaleOptimizer)
      return cls.from_config(options, custom_objects=custom_objects)
    return keras_optimizer._deserialize_optimizer(optimizer_config,  # pylint: disable=protected-access
                                                  custom_objects)
  except (TypeError, ValueError, KeyError) as e:
    raise ValueError(f"{source!r}: cannot rebuild the optimizer "
                     f"{class_name!r}: {e}") from e


def _loss_or_metric(value, getter):
  if isinstance(value, dict) and "class_name" in value:
    return getter(value)
  if isinstance(value, list):
    return [_loss_or_metric(v, getter) for v in value]
  return value


def compile_model(model, training_config, source, custom_objects):
  """Compiles `model` as `training_config` says; returns the optimizer."""
  optimizer = build_optimizer(training_config.get("optimizer_config"), source,
                              custom_objects)
  kwargs = {}
  try:
    loss = training_config.get("loss")
    if loss is not None:
      kwargs["loss"] = _loss_or_metric(loss, keras.losses.get)
    for key in ("metrics", "weighted_metrics"):
      if training_config.get(key):
        kwargs[key] = _loss_or_metric(training_config[key], keras.metrics.get)
    if training_config.get("loss_weights") is not None:
      kwargs["loss_weights"] = training_config["loss_weights"]
    model.compile(optimizer=optimizer, **kwargs)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{source!r}: cannot compile the model as saved: {e}"
                     ) from e
  return model.optimizer


def log_no_loss_scale(source, optimizer):
  if (isinstance(optimizer, keras_optimizer.LossScaleOptimizer) and
      optimizer.dynamic):
    tf.get_logger().warning(
        "%s does not store the dynamic loss scale or its counter (TF 2.x H5 "
        "files never did): the LossScaleOptimizer starts again from its "
        "initial scale %s with counter 0.", source, optimizer.initial_scale)
