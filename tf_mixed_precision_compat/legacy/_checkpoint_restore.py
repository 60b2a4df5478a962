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

* Each Keras 3 object of the root (a layer/model or an optimizer, also
  below non-Keras containers: a trainer `tf.Module`, a dict or list of
  models) is judged by its own entry, on evidence only one Keras writes
  (see `_Evidence`): TF 2.x wrote an optimizer entry with `iter` /
  `base_optimizer` children or slot variables, and a model entry with
  `layer_with_weights-N` / `layer-N` children or variables such an
  optimizer lists slots for; Keras 3 wrote `_iterations`, `_functional`,
  and the variables its optimizers track. An entry without evidence (a
  subclassed model of custom layers only) is TF 2.x's when the rest of the
  checkpoint is and has nothing of Keras 3, or when `_checkpoint` maps it
  completely onto the built model. So a checkpoint TF 2.21 wrote is restored
  by TF unchanged, and one holding both layouts restores each part its way.
* The Keras objects with TF 2.x entries are restored by `_checkpoint`'s
  object-graph matching (what `legacy.restore_checkpoint` does); everything
  else (Keras 3 entries, a step counter, a `tf.Variable`, the rest of a
  container) and `save_counter` are restored by TF.
* Everything is matched and checked before anything is assigned. Shape,
  dtype or structure mismatches raise `RestoreError` at once; so does a model
  the checkpoint has weights for when none of them can be placed (the loss
  scale is never restored alone while weights stay fresh). Entries that stay
  unmatched are named in a warning at restore time, and the returned status'
  `assert_consumed()` lists them.
  Slots are checked against their variables also before the optimizer made
  them.
* As in TF 2.x, values wait for variables not created yet: a model that is
  not built gets its weights (and the optimizer its step and loss scale) when
  Keras builds it, before its first forward pass runs; slots land when the
  optimizer builds them, before its first update, or when `get_slot` asks
  for one first (our `LossScaleOptimizer` then builds the optimizer).
* A deferred part that fails raises at that first call and stays failed: the
  model's forward pass and the optimizer's updates raise the same error from
  then on, and the status' assertions raise; nothing trains on values the
  error left fresh. What TF's part assigned at restore time beside the
  models (a step counter, a plain `tf.Variable`, the save counter) is put
  back then (`_rollback`): a failed restore leaves no partial state.
"""

import contextlib
import functools
import os
import re

import keras
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.legacy import _checkpoint
from tf_mixed_precision_compat.legacy import _rollback
from tf_mixed_precision_compat.optimizers import _inner

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
#
# Each Keras object of the root is judged by its own entry, on evidence only
# one Keras writes, so that a checkpoint TF 2.21 itself wrote (a custom
# layer's `w` is named alike by both) is never taken for TF 2.x layout, and a
# checkpoint holding both layouts restores each part its own way:
#
# * Keras 2 only: an optimizer entry with `iter` / `base_optimizer` children
#   or slot variables (Keras 3 optimizers keep slots in `_variables`); a
#   model entry with `layer_with_weights-N` / `layer-N` children (names no
#   Python attribute has), or variables such an optimizer lists slots for.
# * Keras 3 only: an optimizer entry with `_iterations`; a model entry with
#   a `_functional` child (Keras 3's Sequential), or variables a Keras 3
#   optimizer tracks (its `_trainable_variables`).


class _Evidence:
  """Which checkpoint nodes only Keras 2, or only Keras 3, writes."""

  def __init__(self, graph):
    self.graph = graph
    self.keras3_optimizers = set()
    self.keras2_optimizers = set()
    self.keras3_variables = set()
    self.keras2_variables = set()
    for node_id, node in enumerate(graph.nodes):
      if graph.child(node_id, "_iterations") is not None:
        self.keras3_optimizers.add(node_id)
        self.keras3_variables.update(graph.variable_nodes_under(node_id))
      elif (graph.child(node_id, "iter") is not None or
            graph.child(node_id, "base_optimizer") is not None or
            node.slot_variables):
        self.keras2_optimizers.add(node_id)
        self.keras2_variables.update(s.original_variable_node_id
                                     for s in node.slot_variables)
    # Keras 3 optimizers never write slot variables (nor do their owners).
    self.keras2_variables -= self.keras3_variables

  @property
  def any_keras2(self):
    return bool(self.keras2_optimizers or self.keras2_variables or
                _has_name(self.graph, 0, _is_layer_index))

  @property
  def any_keras3(self):
    return bool(self.keras3_optimizers or
                _has_name(self.graph, 0, _is_keras3_name))

  def optimizer_layout(self, node_id):
    """"keras2", "keras3" or None (an entry with nothing in it)."""
    if node_id in self.keras3_optimizers:
      return "keras3"
    if node_id in self.keras2_optimizers:
      return "keras2"
    return None

  def model_layout(self, node_id):
    """"keras2", "keras3" or None (nothing tells)."""
    variables = set(self.graph.variable_nodes_under(
        node_id, skip=_checkpoint.MODEL_ALIASES))
    if (variables & self.keras3_variables or
        _has_name(self.graph, node_id, _is_keras3_name)):
      return "keras3"
    if (variables & self.keras2_variables or
        _has_name(self.graph, node_id, _is_layer_index)):
      return "keras2"
    return None


def _is_layer_index(name):
  return bool(_LAYER_INDEX.match(name))


def _is_keras3_name(name):
  return name == "_functional"


def _has_name(graph, node_id, predicate):
  """Whether a child name below `node_id` satisfies `predicate`."""
  seen, stack = set(), [node_id]
  while stack:
    current = stack.pop()
    if current in seen:
      continue
    seen.add(current)
    for name, child in graph.children(current):
      if name in _checkpoint.MODEL_ALIASES:
        continue
      if predicate(name):
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


def _walk(obj, node_id, graph, parts, native, seen, judge,
          known=frozenset()):
  """Sorts `obj`'s dependencies, facing checkpoint node `node_id`, into parts.

  Keras models and optimizers whose entries TF 2.x wrote go to the legacy
  matcher, also below non-Keras containers (a trainer `tf.Module`, a dict or
  list of models), as TF 2.x jobs nested them. Everything else (Keras
  objects whose entries Keras 3 wrote included) goes into `native` (name ->
  object) for TF to restore; a container that holds legacy Keras objects is
  replaced there by a stand-in holding only its other dependencies.

  Args:
    obj: The trackable (the root first).
    node_id: Its node in the checkpoint's object graph.
    graph: The checkpoint's object graph.
    parts: The `_Parts` being filled.
    native: Receives `obj`'s dependencies that TF restores.
    seen: Ids of the containers visited (object graphs may share nodes).
    judge: `judge(obj, node_id)`: whether a Keras object's entry is TF 2.x's.
    known: Ids of the objects that face a checkpoint entry somewhere; where
      the same object is also reached without one, TF is not given it there
      (as TF matches each object once, it counts it as not restored).
  """
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
    keras_object = _is_optimizer(child) or _is_model(child)
    if child_id is not None and keras_object and judge(child, child_id):
      (parts.optimizers if _is_optimizer(child) else parts.models).append(
          (child_id, child))
    elif child_id is not None and not keras_object and id(child) not in seen:
      seen.add(id(child))
      found = len(parts.legacy_nodes)
      sub = {}
      _walk(child, child_id, graph, parts, sub, seen, judge, known)
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


def _judge(reader, graph, source):
  """`judge(obj, node_id)` for `_walk`: whether the entry has TF 2.x layout.

  An entry without evidence either way (a subclassed model of custom layers
  only, an empty optimizer) is TF 2.x's when the rest of the checkpoint is
  and nothing in it is Keras 3's, or when it is a built model the TF 2.x
  rules restore completely (a TF 2.x model-only checkpoint).
  """
  evidence = _Evidence(graph)
  keras2_only = evidence.any_keras2 and not evidence.any_keras3

  def judge(obj, node_id):
    if _is_optimizer(obj):
      layout = evidence.optimizer_layout(node_id)
    else:
      layout = evidence.model_layout(node_id)
    if layout is not None:
      return layout == "keras2"
    if keras2_only or _is_optimizer(obj) or evidence.any_keras3:
      return keras2_only
    return _maps_completely(reader, graph, source, node_id, obj)

  return judge


def _split(checkpoint, reader, graph, source):
  """The legacy parts of `checkpoint`'s restore, or None if there are none."""
  judge = _judge(reader, graph, source)
  probe = _Parts()
  _walk(checkpoint, 0, graph, probe, {}, set(), judge)
  known = frozenset(probe.faced)
  parts = _Parts()
  _walk(checkpoint, 0, graph, parts, parts.others, set(), judge, known)
  if not (parts.models or parts.optimizers):
    return None
  return parts


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
    self.error = None
    # Puts back what the rest of the restore assigned at once, should the
    # deferred part fail (set by `read_or_restore`).
    self.roll_back = None

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
      self._deferred(self._restore_all)
      self.pending.discard("model")
      self._release_if_done()

  def _release_if_done(self):
    if not self.pending:
      self.roll_back = None  # Nothing can fail any more: let the values go.

  def _deferred(self, part):
    """Runs a part of the restore that waited; its failure stays.

    The objects the restore targets refuse to be used from then on (a
    model's forward pass, an optimizer's update) with the same error, and
    the status' assertions raise it: nothing trains on values a loud error
    left fresh. What the rest of the restore assigned at once is put back.
    """
    if self.error is not None:
      raise self.error.with_traceback(None)
    try:
      part()
    except Exception as e:  # pylint: disable=broad-except
      self.error = _private_api.keep_error_as_raised(e)
      _refuse_use(self._parts, self._refusal)
      if self.roll_back is not None:
        self.roll_back()
      raise

  def _refusal(self):
    return self.error.with_traceback(None)

  def _restore_all(self):
    plan, waiting_slots = self._checked_plan or self._plan()
    self._checked_plan = None
    self._apply(plan, only=None)
    if waiting_slots:
      self.pending.add("slots")
      for _, optimizer in self._parts.optimizers:
        if not _optimizer_built(optimizer):
          inner = _checkpoint.inner_optimizer_of(optimizer)
          _on_build(inner, self._optimizer_built)
          # TF 2.x made a slot when `get_slot` asked for it.
          _inner.build_before_get_slot(inner, functools.partial(
              self._build_for_slots, optimizer))

  def _build_for_slots(self, optimizer):
    """Builds `optimizer` for the models' weights (their slots restore)."""
    variables = []
    for _, model in self._parts.models:
      variables += model.trainable_variables
    if not variables or _optimizer_built(optimizer):
      return
    strategy = getattr(self._parts.models[0][1], "distribute_strategy", None)
    scope = (strategy.scope() if strategy is not None and
             not tf.distribute.has_strategy() else contextlib.nullcontext())
    with scope:
      optimizer.build(variables)

  def _optimizer_built(self):
    if any(not _optimizer_built(o) for _, o in self._parts.optimizers):
      return

    def restore_slots():
      plan, _ = self._plan()
      self._apply(plan, only=self._slot_keys)

    self._deferred(restore_slots)
    self.pending.discard("slots")
    self._release_if_done()

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


# What a failed restore makes its objects refuse: a model's forward pass
# (Keras calls the instance's `call`) and an optimizer's updates.
_REFUSED = {"model": ("call",),
            "optimizer": ("apply_gradients", "apply")}


def _refuse_use(parts, error):
  """Makes the models' and optimizers' use raise `error()`."""
  targets = [(m, _REFUSED["model"]) for _, m in parts.models]
  for _, optimizer in parts.optimizers:
    inner = _checkpoint.inner_optimizer_of(optimizer)
    targets += [(o, _REFUSED["optimizer"]) for o in {id(optimizer): optimizer,
                                                     id(inner): inner}.values()]
  for obj, names in targets:
    for name in names:
      original = getattr(obj, name, None)
      if original is None:
        continue

      @functools.wraps(original)
      def refuse(*unused_args, **unused_kwargs):
        raise error()

      # Not through Keras' `__setattr__`: the wrapper is no tracked state.
      object.__setattr__(obj, name, refuse)


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

  def _raise_if_failed(self):
    if self.legacy.error is not None:
      raise AssertionError(
          f"Restoring {self.legacy.source!r} failed, nothing of it is "
          f"restored: {self.legacy.error}") from self.legacy.error

  def assert_consumed(self):
    """Raises `AssertionError` unless every value and object was restored.

    Returns:
      self.
    """
    self._raise_if_failed()
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
    self._raise_if_failed()
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
    self._raise_if_failed()
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
    self._raise_if_failed()
    if self._native is not None:
      self._native.run_restore_ops(session)

  def initialize_or_restore(self, session=None):
    """As TF's: restores (the legacy part is already restored eagerly)."""
    self._raise_if_failed()
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
  if any(not _model_built(m) for _, m in parts.models):
    # The models' part waits for their build: should it fail, what TF's part
    # and the save counter got now is put back (never a partial state).
    legacy.roll_back = _rollback.Snapshot(
        list(parts.others.values()) + [checkpoint.save_counter]).roll_back
  native, native_nodes = None, []
  if parts.others:
    sub = make_checkpoint(**parts.others)
    native = original(sub, save_path, *args, **kwargs)
    # TF's part lacks the Keras objects restored above, which TF would
    # otherwise list at exit as "could not be found" (and fail to name the
    # slot entries, only reachable through them); what TF's part really
    # leaves unrestored is named by this restore's own checks.
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
