"""Wait stage: a restore's part that waits for a build, and its failure."""

import functools

import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.legacy import _gate
from tf_mixed_precision_compat.legacy import _layout
from tf_mixed_precision_compat.legacy import _match
from tf_mixed_precision_compat.legacy import _problems
from tf_mixed_precision_compat.optimizers import _inner


def reachable(roots, skip=frozenset(), stop=lambda obj: False):
  """(variables, other trackables) reachable from `roots` but `skip` (ids)."""
  variables, trackables, seen = [], [], set(skip)
  stack = list(roots)
  while stack:
    obj = stack.pop()
    if id(obj) in seen:
      continue
    seen.add(id(obj))
    if _match.is_variable(obj):
      variables.append(obj)
    elif isinstance(obj, tf.__internal__.tracking.Trackable):
      trackables.append(obj)
      if not stop(obj):
        try:
          stack.extend(_private_api.trackable_children(obj).values())
        except (AttributeError, TypeError, ValueError):
          pass  # Not a trackable whose children can be listed.
  return variables, trackables


class Snapshot:
  """The values of the variables reachable from some objects, to put back.

  Example:

  >>> step = tf.Variable(0)
  >>> snapshot = Snapshot([step])
  >>> _ = step.assign(7)
  >>> snapshot.roll_back()
  >>> int(step.numpy())
  0
  """

  def __init__(self, roots, skip=frozenset()):
    """Reads `roots`' variables now, but those of `skip` (waiting models)."""
    variables, self._trackables = reachable(roots, skip)
    # Read outside any function being traced, as a copy the restore's
    # assignments cannot change.
    with tf.init_scope():
      self._values = [(v, tf.identity(tf.convert_to_tensor(v)))
                      for v in variables]

  def roll_back(self):
    """Writes every value back and drops the restorations left waiting."""
    with tf.init_scope():
      for variable, value in self._values:
        _gate.assign_exact(variable, value)
    for obj in self._trackables:
      try:
        _private_api.deferred_dependencies(obj).clear()
      except AttributeError:  # Not a TF trackable that can wait.
        pass


def on_build(obj, callback):
  """Calls `callback()` right after `obj.build(...)` (once), through the
  instance's own `build` attribute (docs/architecture.md: "Waiting")."""
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


def refuse_use(targets, error):
  """Makes each `(object, method names)` of `targets` raise `error()`."""
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


class LegacyRestore(_gate.Restored):
  """The `Checkpoint` hook's legacy part: assigned now, or as objects build
  (`roll_back`: undoes TF's part)."""

  def __init__(self, reader, graph, source, parts):
    super().__init__(source, orphans=parts.orphans)
    self.roll_back, self._checked_plan = None, None
    self._reader, self._graph, self._parts = reader, graph, parts
    self._slot_keys = {  # The slots' values, restored as the optimizer builds.
        graph.variable(slot.slot_variable_node_id)[0]
        for node_id, _ in parts.optimizers
        for slot in graph.nodes[_match.inner_optimizer_node(
            graph, node_id)].slot_variables
        if graph.variable(slot.slot_variable_node_id) is not None}
    self._models = [m for _, m in parts.models]
    self._optimizers = [o for _, o in parts.optimizers]

  def _plan(self):
    """The checked plan, and whether slots wait for an optimizer's build."""
    plan = _match.plan_restore(
        self._reader, self._graph, self.source, self._parts.models,
        self._parts.optimizers, scope=self._parts.legacy_nodes)
    waiting_slots = not all(_match.is_built(o) for o in self._optimizers)
    if waiting_slots:
      plan.unmatched_checkpoint = [k for k in plan.unmatched_checkpoint
                                   if k not in self._slot_keys]
    # Unmatched values are named in a warning; mismatches and a model whose
    # weights would all stay fresh raise.
    plan.problems += [_problems.Problem(_problems.NO_MATCH, target=model.name)
                      for node_id, model in self._parts.models
                      if self._graph.variable_nodes_under(node_id) and
                      not any(id(v) in plan.targets for v in model.weights)]
    _gate.check(plan, _match.expected_objects(self._models, self._optimizers),
                allow_partial=True)
    return plan, waiting_slots

  def check(self):
    """Plans now if the models are built (raising on mismatches)."""
    if all(_layout.model_built(m) for m in self._models):
      self._checked_plan = self._plan()

  def start(self):
    """Restores now, or arranges to when the models are built."""
    if self.orphans:
      tf.get_logger().warning(
          f"Restoring the TF 2.x Keras checkpoint {self.source!r}: no object "
          "of the tf.train.Checkpoint stands for these values, which stay "
          "unrestored:\n  " + "\n  ".join(self.orphans))
    unbuilt = [m for m in self._models if not _layout.model_built(m)]
    if not unbuilt:
      self._restore_all()
      return
    self.pending.add("model")
    for model in unbuilt:
      on_build(model, functools.partial(self._built, "model",
                                        self._restore_all))

  def _built(self, what, part):
    """Runs `part` once every object `what` waits for is built; its failure
    stays (docs/architecture.md)."""
    if not (all(map(_layout.model_built, self._models)) if what == "model"
            else all(map(_match.is_built, self._optimizers))):
      return
    if self.error is not None:
      raise self.error.with_traceback(None)
    try:
      part()
    except Exception as e:  # pylint: disable=broad-except
      self.error = _private_api.keep_error_as_raised(e)
      refuse_use(self._refused(), lambda: self.error.with_traceback(None))
      if self.roll_back is not None:
        self.roll_back()
      raise
    self.pending.discard(what)
    if not self.pending:
      self.roll_back = None  # Nothing can fail any more: let the values go.

  def _refused(self):
    """The models' `call` and optimizers' updates refused after a failure."""
    targets = [(m, ("call",)) for m in self._models]
    for optimizer in self._optimizers:
      inner = _match.inner_optimizer_of(optimizer)
      targets += [(o, ("apply_gradients", "apply")) for o in {
          id(optimizer): optimizer, id(inner): inner}.values()]
    return targets

  def _restore_all(self):
    plan, waiting_slots = self._checked_plan or self._plan()
    self._checked_plan = None
    self._apply(plan)
    if not waiting_slots:
      return
    self.pending.add("slots")
    for optimizer in self._optimizers:
      if not _match.is_built(optimizer):
        inner = _match.inner_optimizer_of(optimizer)
        on_build(inner, functools.partial(self._built, "slots",
                                          self._restore_slots))
        # TF 2.x made a slot when `get_slot` asked for it.
        _inner.build_before_get_slot(inner, functools.partial(
            self._build_for_slots, optimizer))

  def _build_for_slots(self, optimizer):
    """Builds `optimizer` for the models' weights (their slots restore)."""
    if any(model.trainable_variables for model in self._models):
      _match.build_optimizer(optimizer, self._models)

  def _restore_slots(self):
    plan, _ = self._plan()
    plan.assignments = [a for a in plan.assignments
                        if a[0] in self._slot_keys]
    plan.hyper = {}
    self._apply(plan)

  def _apply(self, plan):
    self.report = _gate.assign(plan, self._optimizers)
    if plan.unmatched_checkpoint or plan.unmatched_objects:
      tf.get_logger().warning("\n".join(
          [f"Restoring the TF 2.x Keras checkpoint {self.source!r} left "
           "values unrestored:"] +
          [f"  in the checkpoint, nothing to restore into: {k}"
           for k in plan.unmatched_checkpoint] +
          [f"  kept its current value: {d}" for d in plan.unmatched_objects]))
