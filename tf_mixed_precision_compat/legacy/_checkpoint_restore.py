"""Front end: `tf.train.Checkpoint.restore` of TF 2.2-2.4 Keras checkpoints.

`install()` grafts `patched_read` / `patched_restore_v1`: the Keras objects
whose entries TF 2.x wrote are restored through the pipeline (now, or when
they are built), the rest by TF. Design: docs/architecture.md.
"""

import functools

import keras
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.legacy import _args
from tf_mixed_precision_compat.legacy import _deferred
from tf_mixed_precision_compat.legacy import _gate
from tf_mixed_precision_compat.legacy import _match
from tf_mixed_precision_compat.legacy import _read_checkpoint
from tf_mixed_precision_compat.optimizers import _inner

_SAVE_COUNTER = "save_counter"


def _is_model(obj):
  return isinstance(obj, keras.layers.Layer)


def _is_optimizer(obj):
  """A Keras 3 optimizer, or our wrapper of one.

  Our LossScaleOptimizer around a tf_keras legacy optimizer (TF 2.4's own
  OptimizerV2, whose checkpoints TF restores itself, deferred slots
  included) is left to TF, as a bare tf_keras optimizer is.
  """
  inner = _match.inner_optimizer_of(obj)
  return (isinstance(obj, keras.optimizers.Optimizer) and
          isinstance(inner, keras.optimizers.Optimizer))


def _model_built(model):
  return bool(model.built and model.weights)


def _log(message):
  tf.get_logger().warning(message)


# ---------------------------------------------------------------------------
# Recognising a TF 2.x Keras checkpoint (docs/architecture.md: "Whose
# layout is an entry").


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
        node_id, skip=_match.MODEL_ALIASES))
    if (variables & self.keras3_variables or
        _has_name(self.graph, node_id, _is_keras3_name)):
      return "keras3"
    if (variables & self.keras2_variables or
        _has_name(self.graph, node_id, _is_layer_index)):
      return "keras2"
    return None


def _is_layer_index(name):
  return bool(_match.LAYER_INDEX.match(name))


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
      if name in _match.MODEL_ALIASES:
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
    plan = _match.plan_restore(reader, graph, source, [(node_id, model)],
                               [], scope=[node_id])
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

  Keras objects `judge(obj, node_id)` finds TF 2.x's go to `parts`, also
  below non-Keras containers; the rest into `native` (name -> object) for TF,
  a container holding legacy objects as a stand-in holding only the others.
  `seen`: the containers visited; `known`: the objects facing an entry
  somewhere, not given to TF where reached without one (TF matches each
  object once).
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
  """`judge(obj, node_id)` for `_walk`: whether the entry has TF 2.x layout
  (with no evidence either way: see docs/architecture.md)."""
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
    self._slot_keys = {  # The slots' values, restored as the optimizer builds.
        graph.variable(slot.slot_variable_node_id)[0]
        for node_id, _ in parts.optimizers
        for slot in graph.nodes[_match.inner_optimizer_node(
            graph, node_id)].slot_variables
        if graph.variable(slot.slot_variable_node_id) is not None}
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

  # Planning.

  def _plan(self):
    plan = _match.plan_restore(
        self._reader, self._graph, self.source, self._parts.models,
        self._parts.optimizers, scope=self._parts.legacy_nodes)
    waiting_slots = any(not _match.is_built(opt)
                        for _, opt in self._parts.optimizers)
    if waiting_slots:
      plan.unmatched_checkpoint = [k for k in plan.unmatched_checkpoint
                                   if k not in self._slot_keys]
    # Unmatched values are named in a warning; mismatches and a model whose
    # weights would all stay fresh raise.
    bound = {id(target) for _, target, _, _ in plan.assignments}
    fresh = [f"none of model '{model.name}''s weights matches the "
             "checkpoint's entries for it, so nothing (not even the "
             "optimizer's step or loss scale) is restored; is it the same "
             "architecture?" for node_id, model in self._parts.models
             if self._graph.variable_nodes_under(node_id) and
             not any(id(v) in bound for v in model.weights)]
    _gate.check(plan, _match.expected_objects(
        [m for _, m in self._parts.models],
        [o for _, o in self._parts.optimizers]),
                allow_partial=True, problems=fresh)
    return plan, waiting_slots

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
        _deferred.on_build(model, self._model_built)
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
      _deferred.refuse_use(_refused(self._parts), self._refusal)
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
        if not _match.is_built(optimizer):
          inner = _match.inner_optimizer_of(optimizer)
          _deferred.on_build(inner, self._optimizer_built)
          # TF 2.x made a slot when `get_slot` asked for it.
          _inner.build_before_get_slot(inner, functools.partial(
              self._build_for_slots, optimizer))

  def _build_for_slots(self, optimizer):
    """Builds `optimizer` for the models' weights (their slots restore)."""
    models = [model for _, model in self._parts.models]
    if any(model.trainable_variables for model in models):
      _match.build_optimizer(optimizer, models)

  def _optimizer_built(self):
    if any(not _match.is_built(o) for _, o in self._parts.optimizers):
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
    self.report = _gate.assign(plan, [o for _, o in self._parts.optimizers])
    if plan.unmatched_checkpoint or plan.unmatched_objects:
      _log("\n".join(
          [f"Restoring the TF 2.x Keras checkpoint {self.source!r} left "
           "values unrestored:"] +
          [f"  in the checkpoint, nothing to restore into: {k}"
           for k in plan.unmatched_checkpoint] +
          [f"  kept its current value: {d}" for d in plan.unmatched_objects]))

  # Status checks.

  def unconsumed(self):
    """Lines naming what is not restored (yet), for `assert_consumed`."""
    lines = [f"waiting for {what} to be built" for what in sorted(self.pending)]
    report = self.report or _gate.RestoreReport(self.source)
    lines += [f"checkpoint value not restored: {k}"
              for k in self._parts.orphans + report.unmatched_checkpoint]
    lines += [f"not restored from the checkpoint: {d}"
              for d in report.unmatched_objects]
    return lines

  def matched_any(self):
    return bool(self.pending) or bool(self.report and self.report.matched)


def _refused(parts):
  """What a failed restore makes refuse use: the models' forward pass (Keras
  calls the instance's `call`) and the optimizers' updates."""
  targets = [(m, ("call",)) for _, m in parts.models]
  for _, optimizer in parts.optimizers:
    inner = _match.inner_optimizer_of(optimizer)
    targets += [(o, ("apply_gradients", "apply")) for o in {
        id(optimizer): optimizer, id(inner): inner}.values()]
  return targets


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
      raise _deferred.failure(self.legacy.source,
                              self.legacy.error) from self.legacy.error

  def _assert_none(self, lines, what):
    if lines:
      raise AssertionError(f"Checkpoint {self.legacy.source!r} {what}:\n  "
                           + "\n  ".join(lines))
    if self._native is not None:
      self._native.assert_existing_objects_matched()
    return self

  def assert_consumed(self):
    """Raises `AssertionError` unless everything was restored; or self."""
    self._raise_if_failed()
    return self._assert_none(
        self.legacy.unconsumed() + [f"checkpoint value not restored: {k}"
                                    for k in self._native_unresolved()],
        "was not fully restored")

  def assert_existing_objects_matched(self):
    """Raises `AssertionError` if a variable got no value; or self."""
    self._raise_if_failed()
    return self._assert_none(
        [line for line in self.legacy.unconsumed()
         if line.startswith("not restored from the checkpoint")],
        "has no value for")

  def assert_nontrivial_match(self):
    """Raises `AssertionError` if nothing but the root matched; or self."""
    self._raise_if_failed()
    if self.legacy.matched_any():
      return self
    if self._native is not None:
      self._native.assert_nontrivial_match()
      return self
    raise AssertionError(
        f"Nothing was restored from {self.legacy.source!r}.")

  def expect_partial(self):
    """Silences TF's warnings at exit about unrestored values; self."""
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
  path = None if save_path is None else _args.path_or_none(save_path)
  return path if path and tf.io.gfile.exists(path + ".index") else None


def read_or_restore(original, checkpoint, save_path, args, kwargs,
                    make_checkpoint):
  """`original(checkpoint, save_path, *args, **kwargs)` (TF's `read` or v1
  `restore`), or the legacy restore, returning a `LoadStatus`.

  `make_checkpoint(**objects)` builds a checkpoint of the same kind, for the
  entries TF restores itself. Raises `RestoreError` if the legacy Keras part
  does not match (nothing assigned).
  """
  prefix = _prefix(save_path)
  if prefix is None or not tf.executing_eagerly():
    return original(checkpoint, save_path, *args, **kwargs)
  try:
    reader = tf.train.load_checkpoint(prefix)
    graph = _read_checkpoint.read_object_graph(reader, prefix)
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
    legacy.roll_back = _deferred.Snapshot(
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
  key = graph.variable_child(0, _SAVE_COUNTER)
  if key is not None:
    with tf.init_scope():
      checkpoint.save_counter.assign(reader.get_tensor(key))


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
