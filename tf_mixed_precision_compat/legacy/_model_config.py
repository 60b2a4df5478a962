"""Rebuild stage: Keras 3 models from the model configs TF 2.3/2.4 wrote."""

from __future__ import annotations

import json
from typing import Any, Optional

import keras

from tf_mixed_precision_compat import policy

# Both load as `Policy`, as in TF 2.4 (and as `policy.deserialize` reads them).
_POLICY_CLASSES = {"Policy": policy.Policy, "PolicyV1": policy.Policy}

# The classes TF 2.x named its models' configs by.
MODEL_CLASSES = frozenset({"Sequential", "Functional", "Model"})


def custom_objects() -> dict[str, type]:
  """Returns the class names TF 2.3/2.4 configs use for policies, to ours.

  Returns:
    A new dict, for the `custom_objects` argument of Keras 3 loaders.

  Example:

  >>> sorted(custom_objects())
  ['Policy', 'PolicyV1']
  """
  return dict(_POLICY_CLASSES)


def deserialization_scope() -> Any:
  """A `keras.saving.custom_object_scope` in which TF 2.3/2.4 policies load.

  Returns:
    A context manager.

  Example:

  >>> config = {"name": "d", "units": 2, "dtype": {
  ...     "class_name": "Policy", "config": {"name": "mixed_float16"}}}
  >>> with deserialization_scope():
  ...   layer = keras.layers.Dense.from_config(config)
  >>> layer.compute_dtype
  'float16'
  """
  return keras.saving.custom_object_scope(custom_objects())


def model_from_config(config: dict[str, Any],
                      custom_objects: Optional[dict[str, Any]] = None  # pylint: disable=redefined-outer-name
                      ) -> Any:
  """Builds a Keras 3 model from a model config TF 2.3/2.4 (or Keras 3) wrote.

  How: docs/architecture.md, "Configs".

  Args:
    config: A dict `{"class_name": ..., "config": ...}`.
    custom_objects: Optional dict of further custom classes/functions.

  Returns:
    An uncompiled Keras 3 model.

  Raises:
    ValueError: If `config` is not a model config.

  Example:

  >>> config = {"name": "s", "layers": []}
  >>> model_from_config({"class_name": "Sequential", "config": config}).name
  's'
  """
  if not isinstance(config, dict) or not isinstance(config.get("config"),
                                                    dict):
    raise ValueError("config must be a dict with keys 'class_name' and "
                     f"'config', got: {config!r}")
  merged = {**_POLICY_CLASSES, **(custom_objects or {})}
  class_name = config.get("class_name")
  if "module" not in config and class_name in MODEL_CLASSES:
    if class_name == "Sequential":
      return keras.Sequential.from_config(
          _with_input_layer(config["config"]), custom_objects=merged)
    return keras.Model.from_config(config["config"], custom_objects=merged)
  return keras.saving.deserialize_keras_object(config, custom_objects=merged)


def _with_input_layer(sequential_config):
  """A TF 2.2 Sequential config, given the InputLayer TF 2.3+ wrote."""
  # TF 2.2 kept the input shape only as the first layer's
  # `batch_input_shape`, which Keras 3 reads as its input shape.
  layers = sequential_config.get("layers")
  first = layers[0] if isinstance(layers, list) and layers else None
  if (not isinstance(first, dict) or first.get("class_name") == "InputLayer"
      or not isinstance(first.get("config"), dict) or
      "batch_input_shape" not in first["config"]):
    return sequential_config
  name = first["config"].get("name", "layer")
  input_layer = {"class_name": "InputLayer", "config": {
      "batch_input_shape": first["config"]["batch_input_shape"],
      "dtype": "float32", "sparse": False, "ragged": False,
      "name": f"{name}_input"}}
  return dict(sequential_config, layers=[input_layer] + layers)


def model_from_json(json_string: str,
                    custom_objects: Optional[dict[str, Any]] = None  # pylint: disable=redefined-outer-name
                    ) -> Any:
  """`keras.models.model_from_json` that also reads TF 2.3/2.4 model JSON.

  Args:
    json_string: The output of `model.to_json()` (TF 2.x or Keras 3).
    custom_objects: Optional dict of further custom classes/functions.

  Returns:
    An uncompiled Keras 3 model.

  Raises:
    ValueError: If `json_string` is not JSON of a model config.

  Example:

  >>> dense = keras.layers.Dense(2, dtype=policy.Policy("mixed_float16"))
  >>> model = keras.Sequential([keras.Input((3,)), dense])
  >>> model_from_json(model.to_json()).layers[0].compute_dtype
  'float16'
  """
  try:
    config = json.loads(json_string)
  except (TypeError, ValueError) as e:
    raise ValueError(f"json_string is not valid JSON: {e}") from None
  return model_from_config(config, custom_objects=custom_objects)
