"""Keras 3's own loading entry points, taught TF 2.3/2.4's files and configs.

`install()` puts these replacements behind the functions an old job calls
(through its journal, so `uninstall()` restores the originals):

* `keras.optimizers.deserialize` / `get` (also reached as
  `tf.keras.optimizers.*`): a config TF 2.x wrote (no Keras 3 `module` key,
  and recognisably Keras 2's: a TF 2.3/2.4 `LossScaleOptimizer` config, or a
  plain optimizer config with Keras 2's `decay` / `lr` keys) is rebuilt as
  `legacy.load_model` rebuilds the optimizer of an old model. Everything else
  goes to Keras 3 unchanged.
* `keras.models.load_model` / `keras.saving.load_model`: a TF 2.x H5 model
  (`keras_version` 2.x) or a TF 2.3/2.4 Keras SavedModel directory is loaded
  by `legacy.load_model` with the same `custom_objects`, `compile` and
  `safe_mode`; Keras 3 `.keras` files and everything else go to Keras 3.
* `keras.Model.load_weights`: TF-format weights (`model.save_weights("ckpt")`
  or `ModelCheckpoint(save_weights_only=True)` in TF 2.x: a checkpoint rooted
  at the model) are restored through the object graph like
  `legacy.restore_checkpoint`, with the model's optimizer (when it has one)
  and its loss scale; TF 2.x H5 weight files (`model.save_weights("w.h5")`)
  by TF 2.x's topological order or, with `by_name=True`, by layer name.
  Values are checked before any is assigned and a mismatch raises. For these
  files the arguments are TF 2.4's (`filepath, by_name=False,
  skip_mismatch=False, options=None`); Keras 3 `.weights.h5` / `.keras`
  files and anything else go to Keras 3.
"""

import functools
import inspect
import os

import h5py
import keras
import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat import legacy
from tf_mixed_precision_compat.legacy import _checkpoint
from tf_mixed_precision_compat.legacy import _config
from tf_mixed_precision_compat.legacy import _h5
from tf_mixed_precision_compat.legacy import _saved_model
from tf_mixed_precision_compat.optimizers import _keras2_config

# Keys only Keras 3 serialization writes; configs with them stay Keras 3's.
_KERAS3_KEYS = ("module", "registered_name")
# Keys every TF 2.x Keras 2 optimizer config had (`lr` before TF 2.0) and no
# Keras 3 config has (Keras 3 drops a `decay` with a warning).
_KERAS2_OPTIMIZER_KEYS = ("decay", "lr")
_H5_SUFFIXES = (".h5", ".hdf5", ".keras")
_KERAS3_WEIGHTS_SUFFIXES = (".weights.h5", ".weights.json", ".keras")

# --------------------------------------------------------------------------
# Optimizer configs.


def is_tf2x_optimizer_config(config):
  """Whether `config` is an optimizer config as TF 2.x (Keras 2) wrote it.

  Args:
    config: Anything passed to `keras.optimizers.deserialize` / `get`.

  Returns:
    True for a `{"class_name", "config"}` dict without Keras 3's `module` /
    `registered_name` that is a TF 2.3 (`optimizer`, `loss_scale`) or TF 2.4
    (`inner_optimizer`, `dynamic`) loss-scale optimizer config, or a Keras 2
    built-in optimizer config (it has `decay` or `lr`).
  """
  if not isinstance(config, dict) or any(k in config for k in _KERAS3_KEYS):
    return False
  class_name, options = config.get("class_name"), config.get("config")
  if not isinstance(class_name, str) or not isinstance(options, dict):
    return False
  if class_name in _config.LSO_CLASSES:
    return ({"optimizer", "loss_scale"} <= options.keys() or
            {"inner_optimizer", "dynamic"} <= options.keys())
  return (class_name.lower() in _keras2_config.KERAS2_OPTIMIZERS and
          any(k in options for k in _KERAS2_OPTIMIZER_KEYS))


def deserialize_tf2x_optimizer(config, custom_objects=None):
  """The optimizer `legacy.load_model` builds from a TF 2.x config.

  Args:
    config: A config for which `is_tf2x_optimizer_config` is True (not
      modified).
    custom_objects: Optional dict of the caller's classes, by name; Keras'
      global custom objects are consulted too.

  Returns:
    Our `LossScaleOptimizer` / `LossScaleOptimizerV1`, or a Keras 3
    optimizer.

  Raises:
    ValueError: For unknown classes or options Keras 3 cannot honour.
  """
  objects = dict(keras.saving.get_custom_objects())
  objects.update(custom_objects or {})
  return _config.build_optimizer(config, "the optimizer config",
                                 objects)


def wrap_optimizers_deserialize(original):
  """`keras.optimizers.deserialize`, with TF 2.x configs taken legacy."""

  @functools.wraps(original)
  def deserialize(config, custom_objects=None):
    if is_tf2x_optimizer_config(config):
      return deserialize_tf2x_optimizer(config, custom_objects)
    return original(config, custom_objects=custom_objects)

  return deserialize


def wrap_optimizers_get(original):
  """`keras.optimizers.get`, with TF 2.x configs taken legacy."""

  @functools.wraps(original)
  def get(identifier):
    if is_tf2x_optimizer_config(identifier):
      return deserialize_tf2x_optimizer(identifier)
    return original(identifier)

  return get


# --------------------------------------------------------------------------
# Model files.


def _path_string(filepath):
  try:
    return os.fspath(filepath)
  except TypeError:
    return None  # File-like objects and the like: never TF 2.x files here.


def _h5_keras_version(path):
  """The `keras_version` an H5 file records, or None (not H5 / unreadable)."""
  try:
    if not os.path.isfile(path) or not h5py.is_hdf5(path):
      return None
    with h5py.File(path, "r") as f:
      version = f.attrs.get("keras_version")
      if version is None and "model_weights" in f:
        version = f["model_weights"].attrs.get("keras_version")
  except (OSError, ValueError):
    return None
  if isinstance(version, bytes):
    version = version.decode("utf-8", "replace")
  return None if version is None else str(version)


def is_tf2x_h5(path):
  """Whether `path` is an H5 file written by TF 2.x's Keras 2."""
  version = _h5_keras_version(path)
  return version is not None and version.startswith("2.")


def is_tf2x_saved_model(path):
  """Whether `path` is a TF 2.3/2.4 Keras SavedModel directory."""
  if not _saved_model.is_saved_model(path):
    return False
  try:
    _saved_model.root_metadata(path)
  except ValueError:
    return False
  return True


def wrap_load_model(original):
  """`keras.models.load_model`, with TF 2.x files loaded by `legacy`."""
  signature = inspect.signature(original)

  @functools.wraps(original)
  def load_model(filepath, *args, **kwargs):
    path = _path_string(filepath)
    if path is None or not (is_tf2x_h5(path) or is_tf2x_saved_model(path)):
      return original(filepath, *args, **kwargs)
    bound = signature.bind(filepath, *args, **kwargs)
    bound.apply_defaults()
    options = dict(bound.arguments)
    return legacy.load_model(
        path, custom_objects=options.get("custom_objects"),
        compile=options.get("compile", True),
        safe_mode=options.get("safe_mode", True))

  return load_model


# --------------------------------------------------------------------------
# Model.load_weights.


def weights_format(filepath):
  """"tf" / "h5" for TF 2.x weight files, None for anything else."""
  path = _path_string(filepath)
  if path is None or path.endswith(_KERAS3_WEIGHTS_SUFFIXES):
    if path is not None and path.endswith(".keras") and is_tf2x_h5(path):
      return "h5"  # TF 2.x wrote H5 files under this suffix too.
    return None
  if (not path.endswith(_H5_SUFFIXES) and
      tf.io.gfile.exists(path + ".index")):
    return "tf"
  return "h5" if is_tf2x_h5(path) else None


def wrap_load_weights(original):
  """`keras.Model.load_weights`, with TF 2.x weight files restored exactly."""

  @functools.wraps(original)
  def load_weights(self, filepath, *args, **kwargs):
    kind = weights_format(filepath)
    if kind is None:
      return original(self, filepath, *args, **kwargs)
    by_name, skip_mismatch, _ = _tf24_weights_arguments(args, kwargs)
    path = os.fspath(filepath)
    if kind == "tf":
      if by_name:
        raise NotImplementedError(
            "Weights may only be loaded based on topology into Models when "
            "loading TensorFlow-formatted weights (got by_name=True to "
            "load_weights).")
      return load_tf_format_weights(self, path)
    load_h5_weights(self, path, by_name, skip_mismatch)
    return None

  return load_weights


def _tf24_weights_arguments(args, kwargs):
  """(by_name, skip_mismatch, options) as TF 2.4's `load_weights` took them."""
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
  by_name = values.get("by_name", False)
  skip_mismatch = values.get("skip_mismatch", False)
  options = values.get("options")
  for key, value in (("by_name", by_name), ("skip_mismatch", skip_mismatch)):
    if not isinstance(value, (bool, np.bool_)):
      raise TypeError(f"load_weights(): {key} must be a bool, got {value!r}.")
  if options is not None and not isinstance(options,
                                            tf.train.CheckpointOptions):
    raise TypeError("load_weights(): options must be a "
                    f"tf.train.CheckpointOptions or None, got {options!r}.")
  if skip_mismatch and not by_name:
    raise ValueError("When calling model.load_weights, skip_mismatch can only "
                     "be set to True when by_name is True.")
  return bool(by_name), bool(skip_mismatch), options


class LegacyWeightsStatus:
  """What `load_weights` returns for TF-format weights, as TF 2.x did.

  The restore already happened, exactly; the assertions only report what was
  left out (the checkpoint's optimizer state when the model has no optimizer,
  also logged as a warning at load time).

  Attributes:
    report: The `legacy.RestoreReport` of the restore.
    unrestored: Checkpoint keys left unrestored.
  """

  def __init__(self, report, unrestored):
    self.report = report
    self.unrestored = list(unrestored)

  def assert_consumed(self):
    """Raises AssertionError if any checkpoint value was left unrestored."""
    if self.unrestored:
      raise AssertionError(
          f"Unresolved values in {self.report.source!r} (the model has no "
          f"optimizer to restore them into): {self.unrestored}")
    return self

  def assert_existing_objects_matched(self):
    """Every existing model/optimizer variable was restored (always)."""
    return self

  def assert_nontrivial_match(self):
    """Something was restored (always: a restore restores everything)."""
    return self

  def expect_partial(self):
    """Accepted for TF 2.x code; the warning was already given."""
    return self

  def run_restore_ops(self, session=None):
    """Nothing to run: values are assigned eagerly."""
    del session

  def initialize_or_restore(self, session=None):
    """Nothing to run: values are assigned eagerly."""
    del session


def load_tf_format_weights(model, path):
  """Restores TF 2.x TF-format weights (rooted at the model) into `model`.

  Args:
    model: The built Keras 3 model; its optimizer (if compiled) receives the
      checkpoint's optimizer state, loss scale included.
    path: The checkpoint prefix.

  Returns:
    A `LegacyWeightsStatus`.

  Raises:
    legacy.RestoreError: If anything does not match (nothing is assigned).
    ValueError: If the model is not built or the checkpoint unreadable.
  """
  prefix = legacy.checkpoint_prefix(path)
  reader = legacy.open_checkpoint(prefix)
  graph = _checkpoint.read_object_graph(reader, prefix)
  optimizer_node = graph.child(0, "optimizer")
  optimizer = None
  ignored = []
  if optimizer_node is not None:
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
      ignored.append(optimizer_node)
      optimizer_node = None
    elif model.weights:
      _checkpoint.ensure_optimizer_built(model, optimizer)
  report = _checkpoint.restore(
      reader, graph, prefix, model, optimizer, 0, optimizer_node,
      allow_partial=False, ignored_nodes=ignored)
  unrestored = []
  if ignored:
    unrestored = [graph.variable(n)[0]
                  for n in graph.variable_nodes_under(ignored[0])]
    tf.get_logger().warning(
        "Restored the weights of model '%s' from %s; its optimizer state "
        "(%d values, e.g. %s) was not restored: the model has no optimizer. "
        "Compile the model before load_weights to restore it too.",
        model.name, prefix, len(unrestored), unrestored[:3])
  return LegacyWeightsStatus(report, unrestored)


# --------------------------------------------------------------------------
# TF 2.x H5 weight files.


def _decode_all(values):
  return [v.decode("utf-8") if isinstance(v, bytes) else str(v)
          for v in values]


def _read_h5_layers(path):
  """[(layer name, [(weight name, value)])] for the saved layers, in order."""
  try:
    with h5py.File(path, "r") as f:
      group = f
      if "layer_names" not in f.attrs and "model_weights" in f:
        group = f["model_weights"]
      if "layer_names" not in group.attrs:
        raise ValueError(f"{path!r} holds no Keras weights (no layer_names).")
      layers = []
      for name in _decode_all(group.attrs["layer_names"]):
        sub = group[name]
        weight_names = _decode_all(sub.attrs.get("weight_names", []))
        layers.append((name, [(w, np.asarray(sub[w][()]))
                              for w in weight_names]))
      return layers
  except (KeyError, OSError, RuntimeError) as e:
    raise ValueError(f"Cannot read the weights of {path!r} (truncated or "
                     f"corrupted?): {type(e).__name__}: {e}") from None


def _layer_variables(layer):
  """A layer's variables in the order TF 2.x saved and loaded them."""
  return list(layer.trainable_weights) + list(layer.non_trainable_weights)


def _short(name):
  name = name[:-2] if name.endswith(":0") else name
  return name.split("/")[-1]


def _pairs(variables, saved):
  """Saved values paired with variables: by name when that is unambiguous."""
  own = [v.name.split("/")[-1] for v in variables]
  theirs = [_short(w) for w, _ in saved]
  if len(set(own)) == len(own) and sorted(own) == sorted(theirs):
    by_name = dict(zip(own, variables))
    return [(by_name[_short(w)], w, value) for w, value in saved]
  return [(v, w, value) for v, (w, value) in zip(variables, saved)]


def _plan_topological(model, path, saved_layers, plan):
  targets = [layer for layer in model.layers if layer.weights]
  saved = [(name, weights) for name, weights in saved_layers if weights]
  if len(saved) != len(targets):
    raise ValueError(
        f"{path!r} holds the weights of {len(saved)} layers, while model "
        f"'{model.name}' has {len(targets)} layers with weights.")
  for index, ((name, weights), layer) in enumerate(zip(saved, targets)):
    variables = _layer_variables(layer)
    if len(variables) != len(weights):
      raise ValueError(
          f"Layer #{index} (named \"{layer.name}\") expects "
          f"{len(variables)} weight(s), but the saved weights of layer "
          f"'{name}' have {len(weights)} element(s).")
    for variable, weight_name, value in _pairs(variables, weights):
      plan.bind(f"{name}/{weight_name}", variable, value,
                f"{layer.name}/{variable.name}")


def _plan_by_name(model, path, saved_layers, skip_mismatch, plan):
  del path
  index = {}
  for layer in model.layers:
    index.setdefault(layer.name, []).append(layer)
  logger = tf.get_logger()
  for k, (name, weights) in enumerate(saved_layers):
    for layer in index.get(name, []) if weights else []:
      variables = _layer_variables(layer)
      if len(variables) != len(weights):
        if skip_mismatch:
          logger.warning("Skipping loading of weights for layer %s due to "
                         "mismatch in number of weights (%d vs %d).",
                         layer.name, len(variables), len(weights))
          continue
        raise ValueError(
            f"Layer #{k} (named \"{layer.name}\") expects {len(variables)} "
            f"weight(s), but the saved weights have {len(weights)} "
            "element(s).")
      for variable, weight_name, value in _pairs(variables, weights):
        if tuple(variable.shape) != tuple(value.shape):
          if skip_mismatch:
            logger.warning("Skipping loading of weights for layer %s due to "
                           "mismatch in shape (%s vs %s).", layer.name,
                           tuple(variable.shape), tuple(value.shape))
            continue
          raise ValueError(
              f"Layer #{k} (named \"{layer.name}\"), weight "
              f"{variable.name} has shape {tuple(variable.shape)}, but the "
              f"saved weight has shape {tuple(value.shape)}.")
        plan.bind(f"{name}/{weight_name}", variable, value,
                  f"{layer.name}/{variable.name}")


def load_h5_weights(model, path, by_name=False, skip_mismatch=False):
  """Loads a TF 2.x H5 weight file into `model` as TF 2.x did, exactly.

  Args:
    model: The Keras 3 model, built.
    path: The H5 file (`model.save_weights("w.h5")`, or a whole-model H5).
    by_name: Match layers by name instead of by topological order.
    skip_mismatch: With `by_name`, skip (and log) layers whose weights do not
      fit instead of raising.

  Raises:
    ValueError: If the model is not built, the file unreadable, or layers,
      weight counts, shapes or dtypes do not match (nothing is assigned).
  """
  if not model.built or not model.weights:
    raise ValueError(
        "Unable to load weights saved in HDF5 format into a model which has "
        "not created its variables yet. Call the Model first, then load the "
        "weights.")
  saved_layers = _read_h5_layers(path)
  plan = _checkpoint.Plan(path)
  if by_name:
    _plan_by_name(model, path, saved_layers, skip_mismatch, plan)
  else:
    _plan_topological(model, path, saved_layers, plan)
  if plan.problems:
    raise _checkpoint.RestoreError(path, problems=plan.problems)
  optimizer_plan = _plan_h5_optimizer(model, path, plan)
  for _, target, value, _ in plan.assignments + optimizer_plan:
    target.assign(value)
  if optimizer_plan:
    _config.log_no_loss_scale(path, model.optimizer)


def _plan_h5_optimizer(model, path, weights_plan):
  """The optimizer state of a whole-model H5 file, bound to `model`'s.

  TF 2.4's `load_weights` read only the model's weights. A model rebuilt in
  code (e.g. because the file's `Lambda` bytecode is unreadable here) and
  compiled as the job did also gets its optimizer's iterations and slots
  back, so that `fit` resumes as after `load_model`. When the file's state
  does not fit that optimizer entirely, the optimizer is left untouched and
  a warning says why.

  Returns:
    [(key, variable, value, description)] to assign; [] for none.
  """
  optimizer = getattr(model, "optimizer", None)
  if optimizer is None:
    return []
  with h5py.File(path, "r") as f:
    group = f.get("optimizer_weights")
    if not isinstance(group, h5py.Group) or "weight_names" not in group.attrs:
      return []
    by_tf_name = {key.split("/", 1)[1][:-2] if key.endswith(":0") else
                  key.split("/", 1)[1]: target
                  for key, target, _, _ in weights_plan.assignments}
    _checkpoint.ensure_optimizer_built(model, optimizer)
    plan = _checkpoint.Plan(path)
    _h5.plan_optimizer(group, path, optimizer, by_tf_name, plan)
  missing = [d for obj, d in _checkpoint.expected_optimizer_objects(optimizer)
             if id(obj) not in plan.targets and
             not d.startswith("optimizer/loss_scale") and
             d != "optimizer/learning_rate"]
  if plan.problems or plan.unmatched_checkpoint or missing:
    tf.get_logger().warning(
        "Loaded the weights of model '%s' from %s; its optimizer state was "
        "not restored, as it does not fit the model's optimizer (%s).",
        model.name, path, "; ".join(
            plan.problems + [f"{k} has no counterpart"
                             for k in plan.unmatched_checkpoint] +
            [f"nothing restores {d}" for d in missing])[:500])
    return []
  return plan.assignments
