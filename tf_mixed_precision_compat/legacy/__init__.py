"""Resuming TF 2.2/2.3/2.4 mixed-precision Keras jobs on today's TensorFlow.

Keras 3 cannot read what TF 2.x Keras jobs wrote: their optimizer checkpoints
("trying to restore a checkpoint from a legacy Keras optimizer"), their H5
files with a dtype policy, their SavedModels as Keras models. This module
restores them into Keras 3 models and this package's `LossScaleOptimizer`:

* `restore_checkpoint(path, model, optimizer)`: a `tf.train.Checkpoint(
  model=..., optimizer=...)` written by TF 2.2, 2.3 or 2.4 (a prefix or a
  `tf.train.CheckpointManager` directory): weights, the inner optimizer's
  iterations, learning rate and slots, the loss scale and its counter, all
  exact. Returns a `RestoreReport`.
* `load_model(path)`: a TF 2.3/2.4 `model.save(...)` H5 file or SavedModel
  directory, rebuilt as a compiled Keras 3 model with our optimizer and its
  state (from SavedModels including the loss scale and counter).
* `model_from_json(json_string)` / `model_from_config(config)`: the model of
  a TF 2.3/2.4 `model.to_json()` (or H5 `model_config`), uncompiled;
  `custom_objects()` and `deserialization_scope()` let Keras 3's own loaders
  read the policies in such configs.

Loaders never run Python code from the files unless `safe_mode=False` (what
graph code `load_saved_model` runs: see there), and a failed restore leaves
every model and optimizer value as it was.

Example (resuming a TF 2.3 job; `old.json` is its `model.to_json()`):

    model = model_from_json(open("old.json").read())
    opt = LossScaleOptimizer(keras.optimizers.SGD(0.01, momentum=0.9))
    report = restore_checkpoint("/old/job/checkpoints", model, opt)
    print(report.iterations, report.loss_scale, report.counter)

>>> restore_checkpoint("/no/such/ckpt-1", keras.Sequential())
Traceback (most recent call last):
...
FileNotFoundError: No checkpoint at '/no/such/ckpt-1': ...
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

import keras  # noqa: F401 (the docstring examples use it)
import tensorflow as tf

from tf_mixed_precision_compat.legacy import _args
from tf_mixed_precision_compat.legacy import _checkpoint
from tf_mixed_precision_compat.legacy import _h5
from tf_mixed_precision_compat.legacy import _saved_model
from tf_mixed_precision_compat.legacy._checkpoint import RestoreError
from tf_mixed_precision_compat.legacy._checkpoint import RestoreReport
from tf_mixed_precision_compat.legacy._model_config import custom_objects
from tf_mixed_precision_compat.legacy._model_config import (
    deserialization_scope)
from tf_mixed_precision_compat.legacy._model_config import model_from_config
from tf_mixed_precision_compat.legacy._model_config import model_from_json
from tf_mixed_precision_compat.optimizers.loss_scale_optimizer import (
    LossScaleOptimizer)  # noqa: F401  # pylint: disable=unused-import

# A file or directory path, as TF 2.4's loaders took it.
_PathLike = Union[str, bytes, "os.PathLike[str]"]

__all__ = ["RestoreError", "RestoreReport", "custom_objects",
           "deserialization_scope", "load_model", "load_saved_model",
           "model_from_config", "model_from_json", "restore_checkpoint"]


def checkpoint_prefix(path: _PathLike) -> str:
  """The checkpoint prefix `path` designates.

  Args:
    path: A checkpoint prefix (`.../ckpt-3`) or a directory holding a
      `tf.train.CheckpointManager`'s `checkpoint` state file (its latest
      checkpoint is used).

  Returns:
    The prefix, whose `.index` file exists.

  Raises:
    OSError: (`FileNotFoundError`) if there is no such checkpoint.
  """
  path = _args.path_arg(path)
  if os.path.isdir(path):
    prefix = tf.train.latest_checkpoint(path)
    if prefix is None:
      raise FileNotFoundError(
          f"No checkpoint found in directory {path!r} (no 'checkpoint' state "
          "file pointing at an existing checkpoint).")
    return prefix
  if not tf.io.gfile.exists(path + ".index"):
    raise FileNotFoundError(
        f"No checkpoint at {path!r}: {path + '.index'!r} does not exist.")
  return path


def open_checkpoint(prefix: str) -> Any:
  """A reader of `prefix`, with errors naming the file."""
  try:
    return tf.train.load_checkpoint(prefix)
  except (tf.errors.OpError, ValueError) as e:
    raise ValueError(f"Cannot read checkpoint {prefix!r} (truncated or "
                     f"corrupted?): {e}") from None


def restore_checkpoint(path: _PathLike, model: Any, optimizer: Any = None,
                       allow_partial: bool = False) -> RestoreReport:
  """Restores a TF 2.2/2.3/2.4 Keras checkpoint into Keras 3 objects, exactly.

  For a checkpoint of `tf.train.Checkpoint(model=..., optimizer=...)` (any
  TF 2.x loss-scale optimizer or a plain Keras 2 one). Entries are matched by
  the object graph the checkpoint stores, never by variable order (see
  `legacy/_checkpoint.py`); nothing is assigned until every value has been
  read and checked, so a failing restore changes nothing.

  Args:
    path: A checkpoint prefix, or a `tf.train.CheckpointManager` directory.
    model: The same architecture rebuilt in Keras 3 and built, or None (a
      checkpoint without a `model` entry: its other root entries are left to
      `tf.train.Checkpoint.restore` after `install()`).
    optimizer: Our `LossScaleOptimizer`, a Keras 3 optimizer, or None; built
      for `model.trainable_variables` if it is not yet.
    allow_partial: If False (default), a checkpoint value without a Keras 3
      counterpart, or a variable the checkpoint lacks, raises `RestoreError`;
      if True they are listed in the report and left alone.

  Returns:
    A `RestoreReport`: the matched pairs, the restored iterations, loss scale
    and counter, and what was left unmatched.

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
  tf_mixed_precision_compat.legacy._checkpoint.RestoreError: Cannot restore ...
  """
  _args.restore_targets_arg(model, optimizer)
  _args.bool_arg(allow_partial, "allow_partial")
  prefix = checkpoint_prefix(path)
  reader = open_checkpoint(prefix)
  graph = _checkpoint.read_object_graph(reader, prefix)
  model_node, optimizer_node = _checkpoint.model_and_optimizer_nodes(
      graph, prefix)
  if model is not None:
    _checkpoint.check_built(model, prefix)
    _checkpoint.ensure_optimizer_built(model, optimizer)
  ignored = [node for name, node in graph.children(0) if name == "save_counter"]
  return _checkpoint.restore(
      reader, graph, prefix, model, optimizer, model_node, optimizer_node,
      allow_partial, ignored_nodes=ignored)


def load_model(path: _PathLike,
               custom_objects: Optional[dict[str, Any]] = None,
               compile: bool = True,  # pylint: disable=redefined-builtin
               safe_mode: bool = True, allow_partial: bool = False,
               return_report: bool = False) -> Any:
  """Loads a TF 2.3/2.4 `model.save(...)` H5 file or SavedModel into Keras 3.

  The model is rebuilt from its config and, with `compile=True`, compiled as
  saved with this package's `LossScaleOptimizer`, its state restored: from H5
  files the weights, iterations and slots (TF 2.x never stored the loss scale
  there: it restarts, and a warning says so); from SavedModels also the loss
  scale and counter, which TF 2.3/2.4's own `load_model` lost. With
  `safe_mode=True` nothing stored in the file is executed (see
  docs/migration.md); values are checked before any is assigned.

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
    model, report = _saved_model.load(
        path, safe_mode, custom_objects, compile, allow_partial)
  else:
    model = _h5.load(path, safe_mode, custom_objects, compile,
                     allow_partial)
  return (model, report) if return_report else model


def load_saved_model(path: _PathLike, tags: Any = None, options: Any = None,
                     safe_mode: bool = True) -> Any:
  """`tf.saved_model.load` for TF 2.3/2.4 Keras SavedModels (serving).

  On TF 2.21, without Keras 2 installed, `tf.saved_model.load` fails on a
  Keras SavedModel saved with its optimizer ("'_UserObject' object has no
  attribute 'add_slot'"): nothing revives the saved optimizer object. This
  function registers a stand-in for that object type with the SavedModel
  loader for the duration of the load and removes it again; after
  `install()`, which keeps it registered, plain `tf.saved_model.load` works
  too.

  What runs: no Python code from the file (nothing is unpickled or
  unmarshalled). TensorFlow graph code from the file does run, as in
  `tf.saved_model.load`: calling the returned object or its signatures
  runs the saved graphs, and loading itself runs a TF1-format SavedModel's
  saver restore op and init op, and in a TF2 SavedModel every resource's
  `_create_resource` / `_initialize` function (lookup tables) and every
  saveable object's restore function. Graph ops can read and write files.
  With `safe_mode=True` SavedModels that would run any such function while
  loading are refused; TF 2.3/2.4 Keras models without lookup tables have
  none. The graphs you call are yours to trust.

  Args:
    path: The SavedModel directory (str, UTF-8 bytes or os.PathLike).
    tags: As `tf.saved_model.load`.
    options: As `tf.saved_model.load`.
    safe_mode: Refuse SavedModels whose loading runs graph functions stored
      in the file (see above).

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
  _args.bool_arg(safe_mode, "safe_mode")
  if safe_mode and _saved_model.is_saved_model(path):
    _saved_model.check_load_time_code(path)
  with _saved_model.serving():
    return tf.saved_model.load(path, tags=tags, options=options)
