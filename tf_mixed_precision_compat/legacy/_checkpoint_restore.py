"""`tf.train.Checkpoint` restoring what TF 2.2/2.3/2.4 Keras jobs saved.

A TF 2.x job resumes with its own code: `tf.train.Checkpoint(model=model,
optimizer=optimizer).restore(path)` (or `CheckpointManager.
restore_or_initialize()`). On TF 2.21 the objects behind those names are
Keras 3 objects, whose checkpoint layout differs from Keras 2's
(`layer_with_weights-0/kernel` vs `_functional/_operations/1/_kernel`,
`iter` vs `_iterations`, slots listed by the optimizer vs kept in its
`_variables`). TF's name matching then restores only what happens to share
a name, the loss scale for one, and silently leaves the weights, the step
and the slots fresh.

After `install()`, `tf.train.Checkpoint.read` (which `restore` calls) and
`tf.compat.v1.train.Checkpoint.restore` go through `read_or_restore` here:

* A checkpoint is *legacy* when a Keras 3 object of the root (a layer/model
  or an optimizer) faces an entry written by Keras 2: an optimizer entry with
  `iter` / `base_optimizer` children or slot variables; a model entry with
  `layer_with_weights-N` / `layer-N` children; or, for a subclassed model,
  an entry that `_checkpoint` maps completely onto the model. Anything
  else is restored by TF unchanged.
* The Keras objects of a legacy checkpoint, also those below non-Keras
  containers (a trainer `tf.Module`, a dict or list of models), are
  restored by `_checkpoint`'s object-graph matching (what `legacy.
  restore_checkpoint` does); everything else (a step counter, a
  `tf.Variable`, the rest of a container) and `save_counter` are restored by
  TF.
* Everything is matched and checked before anything is assigned. Shape,
  dtype or structure mismatches raise `RestoreError` at once; so does a model
  the checkpoint has weights for when none of them can be placed (the loss
  scale is never restored alone while weights stay fresh). Entries that stay
  unmatched are named in a warning at restore time, and the returned status'
  `assert_consumed()` lists them.
* As in TF 2.x, values wait for variables not created yet: a model that is
  not built gets its weights (and the optimizer its step and loss scale) when
  Keras builds it, before its first forward pass runs; slots land when the
  optimizer builds them, before its first update.
"""

import functools
import os
import re

import keras
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.legacy import _checkpoint

_LAYER_INDEX = re.compile(r"^layer(_with_weights)?-\d+$")
_SAVE_COUNTER = "save_counter"


def _is_model(obj):
  return isinstance(obj, keras.layers.Layer)


def _is_optimizer(obj):
  """A Keras 3 optimizer, or our wrapper of one.

  Our LossScaleOptimizer around a tf_keras legacy optimizer (TF 2.4's own
  OptimizerV2, whose checkpoints TF restores itself, deferred slots
  included) is left to TF, as a bare tf_keras optimizer is.
  """
  inner = _checkpoint.inner_optimizer_of(obj)
  return (isinstance(obj, keras.optimizers.Optimizer) and
          isinstance(inner, keras.optimizers.Optimizer))


def _model_built(model):
  return bool(model.built and model.weights)


def _optimizer_built(optimizer):
  return bool(getattr(_checkpoint.inner_optimizer_of(optimizer),
                      "built", True))


def _log(message):
  tf.get_logger().warning(message)


# ---------------------------------------------------------------------------
# Recognising a TF 2.x Keras checkpoint.


def _keras2_optimizer_entry(graph, node_id):
  if graph.child(node_id, "_iterations") is not None:
    return False  # Keras 3 wrote it.
  return bool(graph.child(node_id, "iter") is not None or
              graph.child(node_id, "base_optimizer") is not None or
              graph.nodes[node_id].slot_variables)


def _has_layer_index(graph, node_id):
  seen, stack = set(), [node_id]
  while stack:
    current = stack.pop()
    if current in seen:
      continue
    seen.add(current)
    for name, child in graph.children(current):
      if _LAYER_INDEX.match(name):
        return True
      stack.append(child)
  return False


def _maps_completely(reader, graph, source, node_id, model):
  """Whether a subclassed model's entry is all matched by the legacy rules."""
  if not _model_built(model):
    return False
  try:
    plan = _checkpoint.plan_restore(reader, graph, source,
                                    [(node_id, model)], [],
                                    scope=[node_id])
  except ValueError:
    return False
  matched = {id(target) for _, target, _, _ in plan.assignments}
  return (not plan.problems and not plan.unmatched_checkpoint and
          all(id(v) in matched for v in model.weights))


class _Parts:
  """The root's dependencies, split into legacy Keras objects and the rest."""

  def __init__(self):
    self.models = []  # (node id, model)
    self.optimizers = []  # (node id, optimizer)
    self.others = {}  # name -> object (or stand-in), restored by TF
    self.orphans = []  # checkpoint keys under entries nothing stands for
    self.has_stand_ins = False
    self.faced = set()  # ids of the objects met with a checkpoint entry

  @property
  def legacy_nodes(self):
    return [n for n, _ in self.models] + [n for n, _ in self.optimizers]


def _stand_in(children):
  """A trackable holding `children` by name, for TF's part of the restore."""
  stand_in = tf.__internal__.tracking.AutoTrackable()
  for name, child in children.items():
    setattr(stand_in, name, child)
  return stand_in


def _walk(obj, node_id, graph, parts, native, seen, known=frozenset()):
  """Sorts `obj`'s dependencies, facing checkpoint node `node_id`, into parts.

  Keras models and optimizers go to the legacy matcher, also below non-Keras
  containers (a trainer `tf.Module`, a dict or list of models), as TF 2.x
  jobs nested them. Everything else goes into `native` (name -> object) for
  TF to restore; a container that holds Keras objects is replaced there by a
  stand-in holding only its other dependencies.

  Args:
    obj: The trackable (the root first).
    node_id: Its node in the checkpoint's object graph.
    graph: The checkpoint's object graph.
    parts: The `_Parts` being filled.
    native: Receives `obj`'s dependencies that TF restores.
    seen: Ids of the containers visited (object graphs may share nodes).
    known: Ids of the objects that face a checkpoint entry somewhere; where
      the same object is also reached without one, TF is not given it there
      (as TF matches each object once, it counts it as not restored).

  Returns:
    Whether a Keras object faces an entry written by Keras 2.
  """
  keras2 = False
  found_before = len(parts.legacy_nodes)
  entries = dict(graph.children(node_id))
  children = _private_api.trackable_children(obj)
  for name, child in children.items():
    child_id = entries.get(name)
    if node_id == 0 and name == _SAVE_COUNTER:
      continue
    if child_id is not None and child_id in parts.legacy_nodes:
      continue  # The same Keras object reached twice.
    if child_id is None and id(child) in known:
      continue
    if child_id is not None:
      parts.faced.add(id(child))
    if child_id is not None and _is_optimizer(child):
      parts.optimizers.append((child_id, child))
      keras2 = keras2 or _keras2_optimizer_entry(graph, child_id)
    elif child_id is not None and _is_model(child):
      parts.models.append((child_id, child))
      keras2 = keras2 or _has_layer_index(graph, child_id)
    elif child_id is not None and id(child) not in seen:
      seen.add(id(child))
      found = len(parts.legacy_nodes)
      sub = {}
      keras2 = _walk(child, child_id, graph, parts, sub, seen,
                     known) or keras2
      if len(parts.legacy_nodes) == found:
        native[name] = child
      else:
        native[name] = _stand_in(sub)
        parts.has_stand_ins = True
    else:
      native[name] = child
  if len(parts.legacy_nodes) > found_before:
    # TF is not given this node whole, so it cannot report the entries no
    # object stands for: they are named here.
    for name, child_id in entries.items():
      if name not in children and not (node_id == 0 and
                                       name == _SAVE_COUNTER):
        parts.orphans += [graph.variable(n)[0]
                          for n in graph.variable_nodes_under(child_id)]
  return keras2


def _split(checkpoint, reader, graph, source):
  """The legacy parts of `checkpoint`'s restore, or None if there are none."""
  probe = _Parts()
  _walk(checkpoint, 0, graph, probe, {}, seen=set())
  known = frozenset(probe.faced)
  parts = _Parts()
  keras2 = _walk(checkpoint, 0, graph, parts, parts.others, set(), known)
  if not (parts.models or parts.optimizers):
    return None
  if not keras2:
    keras2 = bool(parts.models) and all(
        _maps_completely(reader, graph, source, node_id, model)
        for node_id, model in parts.models)
  return parts if keras2 else None


# ---------------------------------------------------------------------------
# The restore.


class LegacyRestore:
  """One legacy restore: assigns now, or when the variables get created.

  Attributes:
    source: The checkpoint prefix.
    report: The latest `RestoreReport` (None until something was assigned).
    pending: What still waits for variables: "model" (an unbuilt model) and/or
      "slots" (an optimizer that has not built its slots).
  """

  def __init__(self, reader, graph, source, parts):
    self.source = source
    self.report = None
    self._reader = reader
    self._graph = graph
    self._parts = parts
    self._slot_keys = self._keys_of_slots()
    self._unmatched_checkpoint = []
    self._unmatched_objects = []
    self._checked_plan = None
    self.pending = set()

  @property
  def legacy_nodes(self):
    """The checkpoint nodes of the Keras objects this restore matches."""
    return self._parts.legacy_nodes

  def _keys_of_slots(self):
    keys = set()
    for node_id, _ in self._parts.optimizers:
      inner = self._graph.child(node_id, "base_optimizer")
      for owner in (node_id, inner):
        if owner is None:
          continue
        for slot in self._graph.nodes[owner].slot_variables:
          info = self._graph.variable(slot.slot_variable_node_id)
          if info is not None:
            keys.add(info[0])
    return keys

  # Planning.

  def _plan(self):
    plan = _checkpoint.plan_restore(
        self._reader, self._graph, self.source, self._parts.models,
        self._parts.optimizers, scope=self._parts.legacy_nodes)
    waiting_slots = any(not _optimizer_built(opt)
                        for _, opt in self._parts.optimizers)
    if waiting_slots:
      plan.unmatched_checkpoint = [k for k in plan.unmatched_checkpoint
                                   if k not in self._slot_keys]
    expected = []
    for _, model in self._parts.models:
      expected += _checkpoint.expected_model_objects(model)
    for _, optimizer in self._parts.optimizers:
      expected += _checkpoint.expected_optimizer_objects(optimizer)
    plan.unmatched_objects = [d for obj, d in expected
                              if id(obj) not in plan.targets]
    self._check(plan)
    return plan, waiting_slots

  def _check(self, plan):
    """Raises `RestoreError` for mismatches and for weights left fresh."""
    problems = list(plan.problems)
    bound = {id(target) for _, target, _, _ in plan.assignments}
    for node_id, model in self._parts.models:
      has_values = bool(self._graph.variable_nodes_under(node_id))
      if has_values and not any(id(v) in bound for v in model.weights):
        problems.append(
            f"none of model '{model.name}''s weights matches the "
            "checkpoint's entries for it, so nothing (not even the "
            "optimizer's step or loss scale) is restored; is it the same "
            "architecture?")
    if problems:
      raise _checkpoint.RestoreError(
          self.source, plan.unmatched_checkpoint, plan.unmatched_objects,
          problems)

  # Running.

  def check(self):
    """Plans now if the models are built (raising on mismatches)."""
    if all(_model_built(m) for _, m in self._parts.models):
      self._checked_plan = self._plan()

  def start(self):
    """Restores now, or arranges to when the models are built."""
    if self._parts.orphans:
      _log(f"Restoring the TF 2.x Keras checkpoint {self.source!r}: no "
           "object of the tf.train.Checkpoint stands for these values, "
           "which stay unrestored:\n  " + "\n  ".join(self._parts.orphans))
    unbuilt = [m for _, m in self._parts.models if not _model_built(m)]
    if unbuilt:
      self.pending.add("model")
      for model in unbuilt:
        _on_build(model, self._model_built)
      return
    self._restore_all()

  def _model_built(self):
    if all(_model_built(m) for _, m in self._parts.models):
      self.pending.discard("model")
      self._restore_all()

  def _restore_all(self):
    plan, waiting_slots = self._checked_plan or self._plan()
    self._checked_plan = None
    self._apply(plan, only=None)
    if waiting_slots:
      self.pending.add("slots")
      for _, optimizer in self._parts.optimizers:
        if not _optimizer_built(optimizer):
          _on_build(_checkpoint.inner_optimizer_of(optimizer),
                    self._optimizer_built)

  def _optimizer_built(self):
    if any(not _optimizer_built(o) for _, o in self._parts.optimizers):
      return
    self.pending.discard("slots")
    plan, _ = self._plan()
    self._apply(plan, only=self._slot_keys)

  def _apply(self, plan, only):
    if only is not None:
      plan.assignments = [a for a in plan.assignments if a[0] in only]
      plan.hyper = {}
    self.report = _checkpoint.assign(
        plan, [o for _, o in self._parts.optimizers])
    self._unmatched_checkpoint = list(plan.unmatched_checkpoint)
    self._unmatched_objects = list(plan.unmatched_objects)
    if self._unmatched_checkpoint or self._unmatched_objects:
      _log(self._unmatched_message())

  def _unmatched_message(self):
    lines = [f"Restoring the TF 2.x Keras checkpoint {self.source!r} left "
             "values unrestored:"]
    lines += [f"  in the checkpoint, nothing to restore into: {k}"
              for k in self._unmatched_checkpoint]
    lines += [f"  kept its current value: {d}" for d in self._unmatched_objects]
    return "\n".join(lines)

  # Status checks.

  def unconsumed(self):
    """Lines naming what is not restored (yet), for `assert_consumed`."""
    lines = [f"waiting for {what} to be built" for what in sorted(self.pending)]
    lines += [f"checkpoint value not restored: {k}"
              for k in self._parts.orphans]
    lines += [f"checkpoint value not restored: {k}"
              for k in self._unmatched_checkpoint]
    lines += [f"not restored from the checkpoint: {d}"
              for d in self._unmatched_objects]
    return lines

  def matched_any(self):
    return bool(self.pending) or bool(self.report and self.report.matched)


def _on_build(obj, callback):
  """Calls `callback()` right after `obj.build(...)` (once).

  Keras builds a model when it is first called, just before its forward
  pass (a layer's `build` is an attribute of the instance, which Keras
  wraps), and an optimizer at its first update. Wrapping the instance's
  own `build` attribute is the one hook both have that runs at that moment
  without changing Keras' classes; the original attribute is put back when
  it fires.
  """
  had_own = "build" in vars(obj)
  original = obj.build

  @functools.wraps(original)
  def build(*args, **kwargs):
    result = original(*args, **kwargs)
    if had_own:
      object.__setattr__(obj, "build", original)
    else:
      object.__delattr__(obj, "build")
    callback()
    return result

  object.__setattr__(obj, "build", build)


class LoadStatus:
  """The status `restore` returns for a legacy checkpoint.

  It offers what TF's load status does: `assert_consumed()`,
  `assert_existing_objects_matched()`, `assert_nontrivial_match()`,
  `expect_partial()`, `run_restore_ops()` and `initialize_or_restore()`, over
  both the legacy Keras part and the part TF restored.

  Attributes:
    legacy: The `LegacyRestore` (its `report` says what was assigned).
  """

  def __init__(self, legacy, native, native_nodes, graph):
    self.legacy = legacy
    self._native = native
    self._native_nodes = native_nodes
    self._graph = graph

  def _native_unresolved(self):
    if self._native is None:
      return []
    resolved = _private_api.resolved_node_ids(self._native)
    legacy = set()
    for node_id in self.legacy.legacy_nodes:
      legacy.update(self._graph.variable_nodes_under(node_id))
    unresolved = []
    for node_id in self._native_nodes:
      for var_node in self._graph.variable_nodes_under(node_id):
        if var_node not in resolved and var_node not in legacy:
          unresolved.append(self._graph.variable(var_node)[0])
    return unresolved

  def assert_consumed(self):
    """Raises `AssertionError` unless every value and object was restored.

    Returns:
      self.
    """
    lines = self.legacy.unconsumed()
    lines += [f"checkpoint value not restored: {k}"
              for k in self._native_unresolved()]
    if lines:
      raise AssertionError(
          f"Checkpoint {self.legacy.source!r} was not fully restored:\n  "
          + "\n  ".join(lines))
    if self._native is not None:
      self._native.assert_existing_objects_matched()
    return self

  def assert_existing_objects_matched(self):
    """Raises `AssertionError` if an existing variable got no value.

    Returns:
      self.
    """
    objects = [line for line in self.legacy.unconsumed()
               if line.startswith("not restored from the checkpoint")]
    if objects:
      raise AssertionError(
          f"Checkpoint {self.legacy.source!r} has no value for:\n  "
          + "\n  ".join(objects))
    if self._native is not None:
      self._native.assert_existing_objects_matched()
    return self

  def assert_nontrivial_match(self):
    """Raises `AssertionError` if nothing but the root matched.

    Returns:
      self.
    """
    if self.legacy.matched_any():
      return self
    if self._native is not None:
      self._native.assert_nontrivial_match()
      return self
    raise AssertionError(
        f"Nothing was restored from {self.legacy.source!r}.")

  def expect_partial(self):
    """Silences TF's warnings at exit about unrestored values.

    Returns:
      self.
    """
    if self._native is not None:
      self._native.expect_partial()
    return self

  def run_restore_ops(self, session=None):
    """Runs TF's restore ops when graph building (the legacy part is eager)."""
    if self._native is not None:
      self._native.run_restore_ops(session)

  def initialize_or_restore(self, session=None):
    """As TF's: restores (the legacy part is already restored eagerly)."""
    if self._native is not None:
      self._native.initialize_or_restore(session)


def _prefix(save_path):
  """The checkpoint prefix `save_path` names, or None (TF then decides)."""
  if save_path is None:
    return None
  try:
    path = os.fsdecode(os.fspath(save_path))
  except (TypeError, UnicodeDecodeError):
    return None
  return path if tf.io.gfile.exists(path + ".index") else None


def read_or_restore(original, checkpoint, save_path, args, kwargs,
                    make_checkpoint):
  """`original(checkpoint, save_path, ...)`, or the legacy restore.

  Args:
    original: TF's unpatched method (`Checkpoint.read` or v1 `restore`).
    checkpoint: The `tf.train.Checkpoint` (or v1) being restored.
    save_path: The path the caller passed.
    args: Further positional arguments for `original`.
    kwargs: Keyword arguments for `original`.
    make_checkpoint: Builds a checkpoint of the same kind from kwargs (for
      the entries TF restores itself).

  Returns:
    TF's status, or a `LoadStatus` for a legacy checkpoint.

  Raises:
    RestoreError: If the legacy Keras part does not match (nothing assigned).
  """
  prefix = _prefix(save_path)
  if prefix is None or not tf.executing_eagerly():
    return original(checkpoint, save_path, *args, **kwargs)
  try:
    reader = tf.train.load_checkpoint(prefix)
    graph = _checkpoint.read_object_graph(reader, prefix)
  except ValueError:
    return original(checkpoint, save_path, *args, **kwargs)
  parts = _split(checkpoint, reader, graph, prefix)
  if parts is None:
    return original(checkpoint, save_path, *args, **kwargs)
  legacy = LegacyRestore(reader, graph, prefix, parts)
  # Checked before TF restores the other entries, so that a mismatch leaves
  # every value as it was.
  legacy.check()
  native, native_nodes = None, []
  if parts.others:
    sub = make_checkpoint(**parts.others)
    native = original(sub, save_path, *args, **kwargs)
    if parts.has_stand_ins:
      # A stand-in lacks the Keras objects restored above, which TF would
      # otherwise list at exit as "could not be found"; what TF's part
      # really leaves unrestored is named by this restore's own checks.
      native.expect_partial()
    entries = dict(graph.children(0))
    native_nodes = [entries[n] for n in parts.others if n in entries]
  _restore_save_counter(checkpoint, reader, graph)
  legacy.start()
  return LoadStatus(legacy, native, native_nodes, graph)


def _restore_save_counter(checkpoint, reader, graph):
  node_id = graph.child(0, _SAVE_COUNTER)
  info = None if node_id is None else graph.variable(node_id)
  if info is not None:
    with tf.init_scope():
      checkpoint.save_counter.assign(reader.get_tensor(info[0]))


def patched_read(original):
  """`tf.train.Checkpoint.read` that restores TF 2.x Keras checkpoints."""

  @functools.wraps(original)
  def read(self, save_path, *args, **kwargs):
    return read_or_restore(original, self, save_path, args, kwargs,
                           tf.train.Checkpoint)

  return read


def patched_restore_v1(original):
  """`tf.compat.v1.train.Checkpoint.restore`, idem."""

  @functools.wraps(original)
  def restore(self, save_path, *args, **kwargs):
    return read_or_restore(original, self, save_path, args, kwargs,
                           tf.compat.v1.train.Checkpoint)

  return restore
