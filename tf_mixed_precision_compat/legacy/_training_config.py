"""Rebuild stage: a TF 2.3/2.4 `training_config`'s losses and metrics."""

import inspect

import keras

# TF 2.4's `metrics.cosine_similarity` (a similarity) has no Keras 3
# function; Keras 3's `losses.cosine_similarity` is its negative.
_RENAMED_FUNCTIONS = {
    "kullback_leibler_divergence": "kl_divergence",
    "logcosh": "log_cosh",
}
# TF 2.x's default reduction; outside a distribution strategy it meant
# Keras 3's default.
_REDUCTIONS = {"auto": "sum_over_batch_size"}
_WRAPPERS = frozenset({"MeanMetricWrapper"})


def _cosine_similarity(y_true, y_pred, axis=-1):
  return -keras.losses.cosine_similarity(y_true, y_pred, axis=axis)


def function(name, what, source, custom_objects):
  """The metric or loss function TF 2.x saved as `name`, or raises."""
  if callable(custom_objects.get(name)):
    return custom_objects[name]
  if name == "cosine_similarity":
    return _cosine_similarity
  name = _RENAMED_FUNCTIONS.get(name, name)
  for module in (keras.metrics, keras.losses):
    fn = getattr(module, name, None)
    if inspect.isfunction(fn):
      return fn
  raise ValueError(
      f"{source!r}: {what} names the function {name!r}, which is neither a "
      "Keras metric or loss function nor in custom_objects; pass it in "
      "custom_objects.")


def _metric(config, source, custom_objects):
  """A Keras 3 metric from one TF 2.x metric config dict."""
  class_name = config["class_name"]
  options = dict(config.get("config") or {})
  what = f"the metric {options.get('name', class_name)!r}"
  if class_name in _WRAPPERS and class_name not in custom_objects:
    fn = options.pop("fn", None)
    if isinstance(fn, str):
      fn = function(fn, what, source, custom_objects)
    elif isinstance(fn, dict):
      fn = keras.saving.deserialize_keras_object(
          fn, custom_objects=custom_objects)
    if not callable(fn):
      raise ValueError(f"{source!r}: {what} wraps {fn!r}, which is not a "
                       "function; the file is corrupted.")
    return keras.metrics.MeanMetricWrapper(fn, **options)
  cls = custom_objects.get(class_name, getattr(keras.metrics, class_name,
                                               None))
  if not (isinstance(cls, type) and issubclass(cls, keras.metrics.Metric)):
    raise ValueError(f"{source!r}: {what} is of the unknown metric class "
                     f"{class_name!r}; pass it in custom_objects.")
  try:
    return cls.from_config(options)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{source!r}: cannot rebuild {what} ({class_name}): "
                     f"{e}") from e


def _loss(config, source, custom_objects):
  """A Keras 3 loss from one TF 2.x loss config dict."""
  options = dict(config.get("config") or {})
  if options.get("reduction") in _REDUCTIONS:
    options["reduction"] = _REDUCTIONS[options["reduction"]]
  cls = custom_objects.get(config["class_name"])
  if cls is not None:
    return cls.from_config(options)
  try:
    return keras.losses.get({"class_name": config["class_name"],
                             "config": options})
  except (TypeError, ValueError) as e:
    raise ValueError(f"{source!r}: cannot rebuild the loss "
                     f"{config['class_name']!r}: {e}") from e


def _walk(value, build, source, custom_objects):
  """`value` with every config dict built and every custom name resolved."""
  if isinstance(value, dict) and "class_name" in value:
    return build(value, source, custom_objects)
  if isinstance(value, dict):
    return {k: _walk(v, build, source, custom_objects)
            for k, v in value.items()}
  if isinstance(value, list):
    return [_walk(v, build, source, custom_objects) for v in value]
  if isinstance(value, str) and callable(custom_objects.get(value)):
    return custom_objects[value]
  return value


def losses(value, source, custom_objects=None):
  """The `loss` of `compile` from a TF 2.x training config's `loss`."""
  return _walk(value, _loss, source, dict(custom_objects or {}))


def metrics(value, source, num_outputs, custom_objects=None):
  """The `metrics` of `compile` from a TF 2.x training config's `metrics`."""
  # TF 2.x saved a single-output model's metrics as a list holding one list.
  if (num_outputs == 1 and isinstance(value, list) and len(value) == 1 and
      isinstance(value[0], list)):
    value = value[0]
  return _walk(value, _metric, source, dict(custom_objects or {}))
