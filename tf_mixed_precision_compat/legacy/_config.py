"""Rebuild stage: compiled Keras 3 models from TF 2.x configs, safely."""

import contextlib
import json

import keras
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.legacy import _model_config
from tf_mixed_precision_compat.legacy import _training_config
from tf_mixed_precision_compat.optimizers import _inner
from tf_mixed_precision_compat.optimizers import loss_scale_optimizer

# TF 2.4.4 loaded a saved LossScaleOptimizerV1 as a LossScaleOptimizer.
LSO_CLASSES = dict.fromkeys(("LossScaleOptimizer", "LossScaleOptimizerV1"),
                            loss_scale_optimizer.LossScaleOptimizer)
_SAFE_PACKAGES = ("keras", "tf_mixed_precision_compat")
# Built-in Keras 3 layers whose `from_config` runs code the config carries or
# names (bytecode, a pickled torch module, SavedModel graphs, JAX functions).
_CODE_LAYERS = frozenset({"Lambda", "TorchModuleWrapper", "TFSMLayer",
                          "JaxLayer", "FlaxLayer"})
# Keys under which a layer config holds further layer configs.
_LAYER_KEYS = frozenset({"layers", "layer", "forward_layer", "backward_layer",
                         "cell", "cells"})
# Keras configs nest a few levels per layer; far deeper JSON is hostile (it
# would exhaust the recursion limit of the JSON parser or Keras).
MAX_DEPTH = 100


def parse_json(text, what, source):
  """The JSON value of `text` (str or bytes), nested at most `MAX_DEPTH`."""
  try:
    if isinstance(text, bytes):
      text = text.decode("utf-8")
    value = json.loads(text)
    too_deep = any(depth > MAX_DEPTH for _, depth in json_nodes(value))
  except RecursionError:
    too_deep = True
  except (TypeError, ValueError) as e:
    raise ValueError(f"{source!r}: its {what} is not valid JSON ({e}); the "
                     "file is corrupted or not a Keras model.") from None
  if too_deep:
    raise ValueError(f"{source!r}: its {what} nests deeper than {MAX_DEPTH} "
                     "levels; the file is corrupted or hostile.")
  return value


def json_nodes(tree):
  """(value, depth) of every value in a JSON tree, the root's depth 1."""
  stack = [(tree, 1)]
  while stack:
    node, depth = stack.pop()
    yield node, depth
    if isinstance(node, (dict, list)):
      children = node.values() if isinstance(node, dict) else node
      stack.extend((child, depth + 1) for child in children)


def expect_dict(value, what, source, allow_none=False):
  """`value` if it is a dict (or None when allowed); else a ValueError."""
  if isinstance(value, dict) or (allow_none and value is None):
    return value
  raise ValueError(f"{source!r}: its {what} must be a JSON object, got "
                   f"{type(value).__name__}; the file is corrupted or not a "
                   "TF 2.x Keras model.")


def _code_in(node, custom):
  """Why building config dict `node` would run code from the file, or None."""
  class_name = node.get("class_name")
  class_name = class_name if isinstance(class_name, str) else None
  registered = node.get("registered_name")
  if class_name == "__lambda__" or any(
      node.get(key) in ("lambda", "raw")
      for key in ("function_type", "output_shape_type")):
    return "it holds a serialized Python function (bytecode)"
  if class_name in custom or (isinstance(registered, str) and
                              registered in custom):
    return None
  if class_name in _CODE_LAYERS:
    return (f"{class_name} layers run code their config carries or names "
            "(Lambda: Python bytecode)")
  module = node.get("module")
  if ("module" in node and "class_name" in node and
      not (isinstance(module, str) and
           module.split(".")[0] in _SAFE_PACKAGES)):
    return f"it names the Python module {module!r}"
  return None


def check_config(config, source, safe_mode, custom_objects, what="model"):
  """Refuses a model (or `what="training_config"`) config running code."""
  custom = set(custom_objects or ())  # (`parse_json` bounded the depth.)
  # (value, where, kind): kind is _LAYER for a layer config, _LAYER_CONFIG
  # for a layer's own "config", None for anything else.
  stack = [(config, "" if what == "model" else what,
            _LAYER if what == "model" else None)]
  while stack:
    node, where, kind = stack.pop()
    if isinstance(node, list):
      stack.extend((v, where, kind) for v in reversed(node))
      continue
    if kind == _LAYER:
      where = _check_layer(node, where, source)
    if not isinstance(node, dict):
      continue
    why = _code_in(node, custom) if safe_mode else None
    if why:
      raise ValueError(
          f"{source!r}: refusing to load {where} ({node.get('class_name')}): "
          f"{why}. Loading it would run code stored in the file; pass "
          "safe_mode=False only if you trust the file (and custom_objects "
          "for your own classes).")
    if kind == _LAYER and not _is_known_layer(node["class_name"], custom):
      raise ValueError(
          f"{source!r}: unknown layer class {node['class_name']!r} at "
          f"{where}; pass it in custom_objects.")
    for key, value in reversed(list(node.items())):
      stack.append((value, where, _child_kind(kind, key, value)))


_LAYER, _LAYER_CONFIG = "layer", "layer config"


def _child_kind(kind, key, value):
  if kind == _LAYER:
    return _LAYER_CONFIG if key == "config" else None
  if kind == _LAYER_CONFIG and key in _LAYER_KEYS and (
      key == "layers" or isinstance(value, (dict, list))):
    return _LAYER
  return None


def _is_known_layer(class_name, custom):
  cls = getattr(keras.layers, class_name, None)
  return (class_name in custom or class_name in _model_config.MODEL_CLASSES or
          (isinstance(cls, type) and issubclass(cls, keras.layers.Layer)))


def _check_layer(node, where, source):
  """Checks a layer config's shape; returns its place in the model."""
  if (not isinstance(node, dict) or not isinstance(node.get("class_name"), str)
      or not isinstance(node.get("config"), dict)):
    raise ValueError(
        f"{source!r}: malformed layer config at {where or 'the top level'} "
        "(a layer config is an object with a string 'class_name' and an "
        "object 'config'); the file is corrupted or not a Keras model.")
  name = node["config"].get("name")
  name = name if isinstance(name, str) else node["class_name"]
  return f"{where}/{name}" if where else name


def keras_safe_mode(safe_mode):
  """Keras 3's own safe mode, forced on while a safe load builds objects."""
  # A process-wide `enable_unsafe_deserialization()` must not reach the file.
  return (_private_api.SafeModeScope(True) if safe_mode else
          contextlib.nullcontext())


def build_model(config, source, safe_mode, custom_objects):
  """A Keras 3 model from a TF 2.x model config, after `check_config`."""
  check_config(config, source, safe_mode, custom_objects)
  try:
    with keras_safe_mode(safe_mode):
      return _model_config.model_from_config(config,
                                             custom_objects=custom_objects)
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f"{source!r}: cannot rebuild the model from its config: "
                     f"{type(e).__name__}: {e}") from e


def build_optimizer(optimizer_config, source, custom_objects):
  """Our `LossScaleOptimizer` (or a Keras 3 optimizer) from a TF 2.x config."""
  if not isinstance(optimizer_config, dict) or not isinstance(
      optimizer_config.get("class_name"), str) or not isinstance(
          optimizer_config.get("config") or {}, dict):
    raise ValueError(f"{source!r}: malformed optimizer config "
                     f"{optimizer_config!r} (an object with a string "
                     "'class_name' and an object 'config').")
  class_name = optimizer_config["class_name"]
  options = optimizer_config.get("config") or {}
  try:
    if class_name in LSO_CLASSES:
      # TF 2.3's experimental class was saved as "LossScaleOptimizer" with
      # TF 2.3's keys; our `from_config` reads both formats.
      return LSO_CLASSES[class_name].from_config(
          options, custom_objects=custom_objects)
    return _inner.deserialize(optimizer_config, custom_objects)
  except (TypeError, ValueError) as e:
    # TF 2.4's exception type (TypeError for unknown keys), with the source.
    raise type(e)(f"{source!r}: cannot rebuild the optimizer "
                  f"{class_name!r}: {e}") from e
  except (KeyError, AttributeError) as e:
    raise ValueError(f"{source!r}: cannot rebuild the optimizer "
                     f"{class_name!r}: {type(e).__name__}: {e}") from e


def compile_model(model, training_config, source, custom_objects, safe_mode):
  """Compiles `model` as `training_config` says (checked); the optimizer."""
  expect_dict(training_config, "training_config", source)
  check_config(training_config, source, safe_mode, custom_objects,
               what="training_config")
  with keras_safe_mode(safe_mode):
    optimizer = build_optimizer(training_config.get("optimizer_config"),
                                source, custom_objects)
    kwargs = {}
    try:
      loss = training_config.get("loss")
      if loss is not None:
        kwargs["loss"] = _training_config.losses(loss, source, custom_objects)
      for key in ("metrics", "weighted_metrics"):
        if training_config.get(key):
          kwargs[key] = _training_config.metrics(
              training_config[key], source, len(model.outputs),
              custom_objects)
      if training_config.get("loss_weights") is not None:
        kwargs["loss_weights"] = training_config["loss_weights"]
      model.compile(optimizer=optimizer, **kwargs)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
      # Malformed losses or metrics fail inside Keras in many ways.
      raise ValueError(f"{source!r}: cannot compile the model as saved: "
                       f"{type(e).__name__}: {e}") from e
  return model.optimizer


def log_no_loss_scale(source, optimizer):
  if (isinstance(optimizer, loss_scale_optimizer.LossScaleOptimizer) and
      optimizer.dynamic):
    tf.get_logger().warning(
        "%s does not store the dynamic loss scale or its counter (TF 2.x H5 "
        "files never did): the LossScaleOptimizer starts again from its "
        "initial scale %s with counter 0.", source, optimizer.initial_scale)
