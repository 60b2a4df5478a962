"""Front ends: `restore_checkpoint`, `load_model`, `load_saved_model`."""

from __future__ import annotations

import os
from typing import Any, Optional, Union

import h5py
import keras  # noqa: F401 (the docstring examples use it)
import tensorflow as tf

from tf_mixed_precision_compat.legacy import _args
from tf_mixed_precision_compat.legacy import _config
from tf_mixed_precision_compat.legacy import _gate
from tf_mixed_precision_compat.legacy import _match
from tf_mixed_precision_compat.legacy import _match_h5
from tf_mixed_precision_compat.legacy import _read_checkpoint
from tf_mixed_precision_compat.legacy import _read_h5
from tf_mixed_precision_compat.legacy import _saved_model

# A file or directory path, as TF 2.4's loaders took it.
_PathLike = Union[str, bytes, "os.PathLike[str]"]


def restore_graph(reader, graph, source, model, optimizer, model_node,
                  allow_partial, keep_optimizer_node=False, dry_run=False):
  """Match, gate, assign; returns the report (docs/architecture.md)."""
  optimizer_node = graph.child(0, "optimizer")
  ignored = [node for name, node in graph.children(0) if name == "save_counter"]
  if optimizer is None and optimizer_node is not None:
    if not keep_optimizer_node:
      ignored.append(optimizer_node)
    optimizer_node = None
  if model is not None:
    _match.check_built(model, source)
    _match.build_optimizer(optimizer, [model])
  models = [] if model is None or model_node is None else [(model_node, model)]
  optimizers = [] if optimizer_node is None else [(optimizer_node, optimizer)]
  plan = _match.plan_restore(reader, graph, source, models, optimizers,
                             ignored)
  _gate.check(plan, _match.expected_objects([model], [optimizer]),
              allow_partial)
  return _gate.assign(plan, [o for _, o in optimizers], dry_run=dry_run)


def restore_checkpoint(path: _PathLike, model: Any, optimizer: Any = None,
                       allow_partial: bool = False,
                       dry_run: bool = False) -> _gate.RestoreReport:
  """Restores a TF 2.2/2.3/2.4 Keras checkpoint into Keras 3 objects, exactly.

  How: docs/migration.md, "Loading explicitly: `legacy`".

  Args:
    path: A checkpoint prefix, or a `tf.train.CheckpointManager` directory.
    model: The same architecture rebuilt in Keras 3 and built, or None (a
      checkpoint without a `model` entry).
    optimizer: Our `LossScaleOptimizer`, a Keras 3 optimizer, or None; built
      for `model.trainable_variables` if it is not yet.
    allow_partial: If True, values without a counterpart (either way) are
      listed in the report and left alone instead of raising `RestoreError`.
    dry_run: If True, only match and check: the report (its numbers None) or
      the error of the restore, assigning nothing.

  Returns:
    A `RestoreReport` of what was matched, restored and left unmatched.

  Raises:
    TypeError: If an argument has the wrong type (naming it).
    FileNotFoundError: If `path` holds no checkpoint.
    ValueError: If the checkpoint is unreadable, malformed or not
      object-based (naming the file), or the model is not built.
    RestoreError: (a `ValueError`) If entries do not match, listing them.

  Example (a model the checkpoint does not fit is refused, unchanged):

  >>> import tempfile
  >>> old = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
  >>> path = tf.train.Checkpoint(model=old).save(tempfile.mkdtemp() + "/c")
  >>> other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
  >>> restore_checkpoint(path, other)
  Traceback (most recent call last):
  ...
  tf_mixed_precision_compat.legacy._gate.RestoreError: Cannot restore ...
  """
  _args.restore_targets_arg(model, optimizer)
  _args.bool_args(allow_partial=allow_partial, dry_run=dry_run)
  prefix = _read_checkpoint.checkpoint_prefix(path)
  reader = _read_checkpoint.open_checkpoint(prefix)
  graph = _read_checkpoint.read_object_graph(reader, prefix)
  model_node = graph.child(0, "model")
  if model_node is None and graph.child(0, "optimizer") is None:
    raise ValueError(
        f"{prefix!r} has neither a 'model' nor an 'optimizer' entry: it was "
        "not written by tf.train.Checkpoint(model=..., optimizer=...). "
        f"Children of its root: {[name for name, _ in graph.children(0)]}")
  return restore_graph(reader, graph, prefix, model, optimizer, model_node,
                       allow_partial, keep_optimizer_node=True,
                       dry_run=dry_run)


def load_model(path: _PathLike,
               custom_objects: Optional[dict[str, Any]] = None,
               compile: bool = True,  # pylint: disable=redefined-builtin
               safe_mode: bool = True, allow_partial: bool = False,
               return_report: bool = False) -> Any:
  """Loads a TF 2.3/2.4 `model.save(...)` H5 file or SavedModel into Keras 3.

  What is restored, and safe mode: docs/migration.md, "Loading explicitly".

  Args:
    path: An H5 file or a SavedModel directory (str, bytes, PathLike).
    custom_objects: Optional dict of the caller's classes/functions by name.
    compile: Whether to compile the model and restore the optimizer.
    safe_mode: Refuse to load anything that would run code from the file.
    allow_partial: Tolerate saved values without a Keras 3 counterpart (and
      Keras 3 variables left unrestored) instead of raising `RestoreError`.
    return_report: Also return a `RestoreReport` (SavedModels) or None (H5).

  Returns:
    The Keras 3 model, or `(model, report)` with `return_report=True`.

  Raises:
    TypeError: If `custom_objects` is not a dict or a flag not a bool.
    FileNotFoundError: If `path` does not exist.
    OSError: If an H5 file cannot be opened.
    ValueError: For corrupted files, refused code, unknown classes, configs
      Keras 3 cannot honour, or mismatched values (`RestoreError`).

  Example:

  >>> import tempfile
  >>> load_model(tempfile.mkdtemp() + "/missing.h5")
  Traceback (most recent call last):
  ...
  FileNotFoundError: No such file or directory: '...missing.h5'
  """
  path = _args.path_arg(path)
  _args.custom_objects_arg(custom_objects)
  _args.bool_args(compile=compile, safe_mode=safe_mode,
                  allow_partial=allow_partial, return_report=return_report)
  if not os.path.exists(path):
    raise FileNotFoundError(f"No such file or directory: {path!r}")
  report = None
  if os.path.isdir(path):
    if not _saved_model.is_saved_model(path):
      raise ValueError(f"{path!r} is a directory but not a SavedModel (no "
                       "saved_model.pb); for a checkpoint directory use "
                       "restore_checkpoint.")
    model, report = _load_saved_model(path, safe_mode, custom_objects,
                                      compile, allow_partial)
  else:
    model = _load_h5(path, safe_mode, custom_objects, compile, allow_partial)
  return (model, report) if return_report else model


def load_saved_model(path: _PathLike, tags: Any = None, options: Any = None,
                     safe_mode: bool = True) -> Any:
  """`tf.saved_model.load` for TF 2.3/2.4 Keras SavedModels (serving).

  Why, and what runs: docs/migration.md, "Loading explicitly" and "Untrusted
  files".

  Args:
    path: The SavedModel directory (str, UTF-8 bytes or os.PathLike).
    tags: As `tf.saved_model.load`.
    options: As `tf.saved_model.load`.
    safe_mode: Refuse SavedModels whose loading runs graph functions stored
      in the file.

  Returns:
    What `tf.saved_model.load` returns: the restored object, callable with
    the model's inputs and carrying its `signatures`.

  Raises:
    TypeError: If `path` is not a path or `safe_mode` not a bool.
    ValueError: If `safe_mode` refuses the file (names it).
    OSError: If `saved_model.pb` cannot be parsed (names it), as
      `tf.saved_model.load`.

  Example:

  >>> import tempfile
  >>> class Doubler(tf.Module):
  ...   @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
  ...   def __call__(self, x):
  ...     return 2 * x
  >>> path = tempfile.mkdtemp()
  >>> tf.saved_model.save(Doubler(), path)
  >>> load_saved_model(path)(tf.constant([1.5])).numpy()
  array([3.], dtype=float32)
  """
  path = _args.path_arg(path)
  _args.bool_args(safe_mode=safe_mode)
  if safe_mode and _saved_model.is_saved_model(path):
    _saved_model.check_load_time_code(path)
  with _saved_model.serving():
    return tf.saved_model.load(path, tags=tags, options=options)


def _load_h5(path, safe_mode, custom_objects, compile, allow_partial,  # pylint: disable=redefined-builtin
             model=None):
  """`load_model` of an H5 file; into `model` (built in code, matched by
  topology as TF 2.x's `load_weights` did) when given."""
  try:
    f = h5py.File(path, "r")
  except OSError as e:
    raise OSError(f"Cannot open {path!r} as an HDF5 file (truncated or "
                  f"corrupted?): {e}") from None
  try:
    with f:
      if "model_config" not in f.attrs:
        raise ValueError(f"{path!r} has no model_config: it holds weights "
                         "only (use model.load_weights) or is not a Keras H5 "
                         "file.")
      config = _config.parse_json(f.attrs["model_config"], "model_config",
                                  path)
      plan = _match.Plan(path)
      if model is None:
        _read_h5.check_lambda_bytecode(config, _read_h5.keras_version(f),
                                       path)
        model = _config.build_model(config, path, safe_mode, custom_objects)
        by_tf_name = _match_h5.plan_by_layer_name(
            _read_h5.layer_groups(f, path), path, model, plan)
      else:
        by_tf_name = _match_h5.plan_topological(
            _read_h5.layer_groups(f, path, required=True), path, model, plan)
      optimizer = None
      if compile and "training_config" in f.attrs:
        training_config = _config.parse_json(
            f.attrs["training_config"], "training_config", path)
        optimizer = _config.compile_model(model, training_config, path,
                                          custom_objects, safe_mode)
        _match.build_optimizer(optimizer, [model])
        if "optimizer_weights" in f:
          _match_h5.plan_optimizer(f["optimizer_weights"], path, optimizer,
                                   by_tf_name, plan)
      _gate.check(plan, _match_h5.expected_objects([model], [optimizer]),
                  allow_partial)
  except (KeyError, RuntimeError) as e:
    raise ValueError(f"{path!r} is corrupted or not a TF 2.x Keras H5 "
                     f"model: {type(e).__name__}: {e}") from None
  _gate.assign(plan)
  if optimizer is not None:
    _config.log_no_loss_scale(path, optimizer)
  return model


def _load_saved_model(path, safe_mode, custom_objects, compile,  # pylint: disable=redefined-builtin
                      allow_partial):
  """`load_model` of a SavedModel; returns (model, report)."""
  config, training_config = _saved_model.model_and_training_config(path)
  prefix = os.path.join(path, "variables", "variables")
  if not tf.io.gfile.exists(prefix + ".index"):
    raise FileNotFoundError(f"{path!r}: missing {prefix + '.index'!r}.")
  # Read and check the variables before anything is built.
  reader = _read_checkpoint.open_checkpoint(
      prefix, f"the variables of {path!r}")
  graph = _read_checkpoint.read_object_graph(reader, prefix)
  model = _config.build_model(config, path, safe_mode, custom_objects)
  optimizer = None
  if compile and training_config:
    optimizer = _config.compile_model(model, training_config, path,
                                      custom_objects, safe_mode)
  return model, restore_graph(reader, graph, path, model, optimizer, 0,
                              allow_partial)


def load_h5_into(path: _PathLike, model: Any, custom_objects: Any = None
                 ) -> Any:
  """A whole-model TF 2.x H5 file's weights and compiled optimizer state,
  into `model` (the job's model built in code), exactly or not at all."""
  return _load_h5(os.fspath(path), True, custom_objects, True, False,
                  model=model)
