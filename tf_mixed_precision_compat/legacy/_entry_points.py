"""Front ends for Keras 3's loading entry points (`hooks/keras3_loading`)."""

import h5py
import keras
import tensorflow as tf

from tf_mixed_precision_compat.legacy import _args
from tf_mixed_precision_compat.legacy import _config
from tf_mixed_precision_compat.legacy import _gate
from tf_mixed_precision_compat.legacy import _loaders
from tf_mixed_precision_compat.legacy import _match
from tf_mixed_precision_compat.legacy import _match_h5
from tf_mixed_precision_compat.legacy import _read_checkpoint
from tf_mixed_precision_compat.legacy import _read_h5
from tf_mixed_precision_compat.legacy import _saved_model
from tf_mixed_precision_compat.optimizers import _keras2_config

# Keys only Keras 3 serialization writes; configs with them stay Keras 3's.
_KERAS3_KEYS = ("module", "registered_name")
# Keys every TF 2.x Keras 2 optimizer config had (`lr` before TF 2.0) and no
# Keras 3 config has (Keras 3 drops a `decay` with a warning).
_KERAS2_OPTIMIZER_KEYS = ("decay", "lr")
# TF 2.x wrote H5 files under ".keras" too: such a file is read as H5.
_H5_SUFFIXES = (".h5", ".hdf5", ".keras")
_KERAS3_WEIGHTS_SUFFIXES = (".weights.h5", ".weights.json")


def is_tf2x_optimizer_config(config):
  """Whether `config` (given to `deserialize` / `get`) is TF 2.x's."""
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
  """The optimizer `legacy.load_model` builds from a TF 2.x `config`."""
  objects = {**keras.saving.get_custom_objects(), **(custom_objects or {})}
  return _config.build_optimizer(config, "the optimizer config", objects)


def is_tf2x_saved_model(path):
  """Whether `path` is a TF 2.3/2.4 Keras SavedModel directory."""
  try:
    return (_saved_model.is_saved_model(path) and
            _saved_model.root_metadata(path) is not None)
  except ValueError:
    return False


def weights_format(filepath):
  """"tf" / "h5" for TF 2.x weight files, None for anything else."""
  path = _args.path_or_none(filepath)
  if path is None or path.endswith(_KERAS3_WEIGHTS_SUFFIXES):
    return None
  if not path.endswith(_H5_SUFFIXES) and tf.io.gfile.exists(path + ".index"):
    return "tf"
  return "h5" if _read_h5.is_tf2x_h5(path) else None


def load_tf_format_weights(model, path):
  """Restores TF 2.x TF-format weights (and optimizer state) into `model`."""
  prefix = _read_checkpoint.checkpoint_prefix(path)
  reader = _read_checkpoint.open_checkpoint(prefix)
  graph = _read_checkpoint.read_object_graph(reader, prefix)
  optimizer = getattr(model, "optimizer", None)
  report = _loaders.restore_graph(reader, graph, prefix, model, optimizer, 0,
                                  allow_partial=False)
  optimizer_node = graph.child(0, "optimizer")
  unrestored = []
  if optimizer is None and optimizer_node is not None:
    unrestored = graph.keys_under(optimizer_node)
    tf.get_logger().warning(
        "Restored the weights of model '%s' from %s; its optimizer state "
        "(%d values, e.g. %s) was not restored: the model has no optimizer. "
        "Compile the model before load_weights to restore it too.",
        model.name, prefix, len(unrestored), unrestored[:3])
  return _gate.LoadStatus(_gate.Restored(prefix, report),
                          unrestored=unrestored)


def load_h5_weights(model, path, by_name=False, skip_mismatch=False):
  """Loads a TF 2.x H5 weight (or whole-model) file into built `model`."""
  if not model.built or not model.weights:
    raise ValueError(
        "Unable to load weights saved in HDF5 format into a model which has "
        "not created its variables yet. Call the Model first, then load the "
        "weights.")
  plan = _match.Plan(path)
  try:
    with h5py.File(path, "r") as f:
      layers = _read_h5.layer_groups(f, path, required=True)
      if by_name:
        by_tf_name = _match_h5.plan_by_name(layers, path, model, plan,
                                            skip_mismatch)
      else:
        by_tf_name = _match_h5.plan_topological(layers, path, model, plan)
      _gate.check(plan, allow_partial=True)
      with_optimizer = _plan_h5_optimizer(model, f, path, by_tf_name, plan)
  except (KeyError, OSError, RuntimeError) as e:
    raise ValueError(f"Cannot read the weights of {path!r} (truncated or "
                     f"corrupted?): {type(e).__name__}: {e}") from None
  _gate.assign(plan)
  if with_optimizer:
    _config.log_no_loss_scale(path, model.optimizer)


def _plan_h5_optimizer(model, f, path, by_tf_name, weights_plan):
  """Adds the file's optimizer state to `weights_plan` if all fits; whether."""
  # TF 2.4 read only the weights; a model rebuilt in code (its `Lambda`
  # bytecode unreadable here) and compiled resumes `fit` as after load_model.
  optimizer = getattr(model, "optimizer", None)
  group = _read_h5.optimizer_weights(f)
  if optimizer is None or group is None:
    return False
  _match.build_optimizer(optimizer, [model])
  plan = _match.Plan(path)
  _match_h5.plan_optimizer(group, path, optimizer, by_tf_name, plan)
  try:
    _gate.check(plan, _match_h5.expected_objects(optimizers=[optimizer]))
  except _gate.RestoreError as e:
    tf.get_logger().warning(
        "Loaded the weights of model '%s' from %s; its optimizer state was "
        "not restored, as it does not fit the model's optimizer (%s).",
        model.name, path, "; ".join(
            [str(p) for p in e.problems] +
            [f"{k} has no counterpart" for k in e.unmatched_checkpoint] +
            [f"nothing restores {d}" for d in e.unmatched_objects])[:500])
    return False
  weights_plan.assignments += plan.assignments
  return True
