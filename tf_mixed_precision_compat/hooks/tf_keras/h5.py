"""TF 2.x H5 files, SavedModels and optimizer configs on the tf_keras target:
wrappers of tf_keras's loaders (docs/architecture.md, "The tf_keras target")."""

import functools

import h5py
import tensorflow as tf
import tf_keras

from tf_mixed_precision_compat.legacy import _args
from tf_mixed_precision_compat.legacy import _config
from tf_mixed_precision_compat.legacy import _entry_points
from tf_mixed_precision_compat.legacy import _gate
from tf_mixed_precision_compat.legacy import _match
from tf_mixed_precision_compat.legacy import _match_h5
from tf_mixed_precision_compat.legacy import _read_h5
from tf_mixed_precision_compat.hooks.tf_keras import restore


def _tf2x_h5(filepath):
  path = _args.path_or_none(filepath)
  return path if path is not None and _read_h5.is_tf2x_h5(path) else None


def _metric_functions(training_config):
  """TF 2.x metric functions a config names that tf_keras cannot look up
  (e.g. `kl_divergence`: tf_keras keeps the name, and `fit` fails)."""
  found = {}
  for config in _read_h5.class_configs(training_config, "MeanMetricWrapper"):
    fn = config.get("fn")
    if isinstance(fn, str) and not callable(tf_keras.metrics.get(fn)):
      function = getattr(tf_keras.metrics, fn, None)
      if callable(function):
        found[fn] = function
  return found


def _checked_custom_objects(path):
  """Checks the file's Lambda layers; the custom objects it also needs."""
  with h5py.File(path, "r") as f:
    version = _read_h5.keras_version(f)
    config = f.attrs.get("model_config")
    training_config = f.attrs.get("training_config")
    if config is not None:
      _read_h5.check_lambda_bytecode(
          _config.parse_json(config, "model_config", path), version, path)
    if training_config is None:
      return {}
    return _metric_functions(
        _config.parse_json(training_config, "training_config", path))


def wrap_load_model(original):
  """tf_keras `load_model`, refusing unreadable old Lambda bytecode clearly
  and restoring TF 2.x SavedModels' optimizer state."""

  @functools.wraps(original)
  def load_model(filepath, *args, **kwargs):
    path = _args.path_or_none(filepath)
    if path is not None and _read_h5.is_tf2x_h5(path):
      extra = _checked_custom_objects(path)
      if extra:
        if args:  # custom_objects, given positionally.
          args = (dict(extra, **(args[0] or {})),) + tuple(args[1:])
        else:
          kwargs["custom_objects"] = dict(
              extra, **(kwargs.get("custom_objects") or {}))
    model = original(filepath, *args, **kwargs)
    if (path is not None and getattr(model, "optimizer", None) is not None
        and _entry_points.is_tf2x_saved_model(path)):
      restore.restore_saved_model_optimizer(model, path)
    return model

  return load_model


def _optimizer_plan(model, group, path):
  """The plan of every saved optimizer weight, or a reason it does not fit."""
  inner = restore.inner(model.optimizer)
  restore.build_slots(inner, model.trainable_variables)
  by_name = {_read_h5.strip(v.name): v for v in model.trainable_variables}
  plan = _match.Plan(path)
  for name, slot, owner in _match_h5.saved_slots(group, path, by_name):
    found = ([] if owner is None else
             restore.current_slots(inner, owner, slot))
    target = inner.iterations if slot == "iter" else (
        found[0] if len(found) == 1 else None)
    value = None if target is None else _read_h5.read(group, name, path,
                                                      target)
    if target is None or tuple(target.shape) != tuple(value.shape):
      return None, f"{name} has no counterpart of its shape"
    plan.bind(name, target, value)
  left = [v.name for v in restore.variables(inner) if id(v) not in
          plan.targets and "iter" not in v.name and
          "learning_rate" not in v.name]
  if plan.problems or left:
    return None, ("; ".join(map(str, plan.problems)) or
                  f"nothing restores {left[:3]}")
  return plan, None


def wrap_load_weights(original):
  """tf_keras `Model.load_weights`, with a whole-model H5's optimizer state."""

  @functools.wraps(original)
  def load_weights(self, filepath, *args, **kwargs):
    path = _tf2x_h5(filepath)
    if path is None or getattr(self, "optimizer", None) is None:
      return original(self, filepath, *args, **kwargs)
    with h5py.File(path, "r") as f:
      group = _read_h5.optimizer_weights(f)
      if group is None:
        return original(self, filepath, *args, **kwargs)
      plan, why = _optimizer_plan(self, group, path)
    result = original(self, filepath, *args, **kwargs)
    if plan is None:
      tf.get_logger().warning(
          "Loaded the weights of model '%s' from %s; its optimizer state was "
          "not restored, as it does not fit the model's optimizer (%s).",
          self.name, path, why)
    else:
      _gate.assign(plan)
    return result

  return load_weights


def _check_learning_rate(config, custom_objects):
  """Raises TF 2.4's error for a learning rate naming no schedule."""
  options = config.get("config") if isinstance(config, dict) else None
  if not isinstance(options, dict):
    return
  for key in ("inner_optimizer", "optimizer"):  # TF 2.4's / TF 2.3's LSO.
    _check_learning_rate(options.get(key), custom_objects)
  rate = options.get("learning_rate", options.get("lr", 0.001))
  if rate is None or isinstance(rate, (str, list, tuple)):
    # TF 2.4 (and tf_keras) failed on the first step, eagerly with this
    # type; in a tf.function with another. Refused on loading instead.
    error = TypeError if rate is None else ValueError
    raise error(f"The TF 2.x {config.get('class_name')} config's "
                "learning_rate must be a number or a LearningRateSchedule "
                f"config, got {rate!r}.")
  if not isinstance(rate, dict) or "module" in rate:
    return  # A number, a schedule or callable built in Python, or Keras 3's.
  name = rate.get("class_name")
  schedules = tf_keras.optimizers.schedules
  cls = ((custom_objects or {}).get(name) or
         getattr(schedules, str(name), None) or
         tf_keras.utils.get_custom_objects().get(name))
  if not (isinstance(cls, type) and
          issubclass(cls, schedules.LearningRateSchedule)):
    raise ValueError(
        f"Unknown decay: {name}. A TF 2.x optimizer config's learning_rate "
        "is a number or a LearningRateSchedule config.")


def wrap_optimizers_deserialize(original):
  """tf_keras `optimizers.deserialize`, checking old learning rates."""

  @functools.wraps(original)
  def deserialize(config, custom_objects=None, **kwargs):
    _check_learning_rate(config, custom_objects)
    return original(config, custom_objects=custom_objects, **kwargs)

  return deserialize


def wrap_optimizers_get(original):
  """tf_keras `optimizers.get`, checking old learning rates."""

  @functools.wraps(original)
  def get(identifier, **kwargs):
    _check_learning_rate(identifier, None)
    return original(identifier, **kwargs)

  return get
