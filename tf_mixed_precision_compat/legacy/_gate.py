"""Gate stage: a plan is checked whole, then refused or assigned exactly."""

import dataclasses

import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.legacy import _match
from tf_mixed_precision_compat.optimizers import loss_scale_optimizer


class RestoreError(ValueError):
  """A legacy checkpoint does not match the objects it should restore.

  Attributes:
    unmatched_checkpoint: Checkpoint keys with no Keras 3 counterpart.
    unmatched_objects: Keras 3 variables (or state) nothing restored.
    problems: Other mismatches (shape, dtype, ...): `_problems.Problem`s.

  Example:

  >>> RestoreError("ckpt-1", unmatched_objects=["dense/bias"]).problems
  []
  """

  def __init__(self, source, unmatched_checkpoint=(), unmatched_objects=(),
               problems=()):
    self.source = source
    self.unmatched_checkpoint = list(unmatched_checkpoint)
    self.unmatched_objects = list(unmatched_objects)
    self.problems = list(problems)
    lines = [f"Cannot restore {source!r} exactly; nothing was assigned."]
    for title, items in (
        ("Problems:", self.problems),
        ("Values in the checkpoint with no Keras 3 counterpart:",
         self.unmatched_checkpoint),
        ("Keras 3 state the checkpoint does not provide:",
         self.unmatched_objects)):
      lines += [title] + [f"  {item}" for item in items] if items else []
    if self.unmatched_checkpoint or self.unmatched_objects:
      lines.append("Pass allow_partial=True to restore the matched part.")
    super().__init__("\n".join(lines))


@dataclasses.dataclass
class RestoreReport:
  """What a legacy restore assigned.

  Attributes:
    source: The checkpoint prefix (or file) restored from.
    matched: `(checkpoint key, Keras 3 target)` pairs, in checkpoint order.
    unmatched_checkpoint: Checkpoint keys left unrestored (only non-empty
      with `allow_partial=True`).
    unmatched_objects: Keras 3 state left as it was (idem).
    ignored: Checkpoint keys that are bookkeeping (`save_counter`, metric
      states, hyperparameters equal to the optimizer's).
    hyperparameters: Optimizer attributes set from the checkpoint,
      `{name: value}`.
    iterations: The restored optimizer step, or None.
    loss_scale: The restored loss scale (dynamic), or None.
    counter: The restored good-steps counter (dynamic), or None.
    notes: Human-readable remarks (e.g. the loss scale was not stored).
  """
  source: str
  matched: list = dataclasses.field(default_factory=list)
  unmatched_checkpoint: list = dataclasses.field(default_factory=list)
  unmatched_objects: list = dataclasses.field(default_factory=list)
  ignored: list = dataclasses.field(default_factory=list)
  hyperparameters: dict = dataclasses.field(default_factory=dict)
  iterations: object = None
  loss_scale: object = None
  counter: object = None
  notes: list = dataclasses.field(default_factory=list)

  def __str__(self):
    lines = [f"Restored {len(self.matched)} values from {self.source}"]
    if self.iterations is not None:
      lines.append(f"  iterations: {self.iterations}")
    if self.loss_scale is not None:
      lines.append(f"  loss scale: {self.loss_scale}, counter: {self.counter}")
    lines += [f"  not restored (checkpoint): {k}"
              for k in self.unmatched_checkpoint]
    lines += [f"  not restored (Keras 3): {k}" for k in self.unmatched_objects]
    lines += [f"  note: {n}" for n in self.notes]
    return "\n".join(lines)


def check(plan, expected=None, allow_partial=False):
  """Raises `RestoreError` for `plan`'s problems or gaps."""
  if expected is not None:
    plan.unmatched_objects = [description for obj, description in expected
                              if id(obj) not in plan.targets]
  if plan.problems or (not allow_partial and (plan.unmatched_checkpoint or
                                              plan.unmatched_objects)):
    raise RestoreError(plan.source, plan.unmatched_checkpoint,
                       plan.unmatched_objects, plan.problems)


def assign(plan, optimizers=(), dry_run=False):
  """Assigns a checked plan (unless `dry_run`); returns the `RestoreReport`."""
  report = RestoreReport(
      plan.source, [(key, d) for key, _, _, d in plan.assignments],
      list(plan.unmatched_checkpoint), list(plan.unmatched_objects),
      list(plan.ignored), {a: v for a, (_, v) in plan.hyper.items()},
      notes=list(plan.notes))
  if dry_run:
    return report
  # Lifted out of any function being traced: a restore fired while a model
  # is first called inside `tf.function` must assign now, not in the graph.
  with tf.init_scope():
    for _, target, value, _ in plan.assignments:
      assign_exact(target, value)
    for attribute, (owner, value) in plan.hyper.items():
      setattr(owner, attribute, value)
    for optimizer in optimizers:
      inner = _match.inner_optimizer_of(optimizer)
      report.iterations = int(inner.iterations.numpy())
      if (isinstance(optimizer, loss_scale_optimizer.LossScaleOptimizer) and
          optimizer.dynamic_counter is not None):
        report.loss_scale = float(optimizer.loss_scale.numpy())
        report.counter = int(optimizer.dynamic_counter.numpy())
  return report


def assign_exact(target, value):
  """Assigns `value` to every copy of `target`, in any distribution context."""
  # In a replica context (a model first built in `strategy.run`) a mirrored
  # variable refuses a plain assign: each component is written directly.
  context = tf.distribute.get_replica_context()
  in_replica = (context is not None and tf.distribute.has_strategy() and
                not tf.distribute.in_cross_replica_context())
  if not in_replica:
    target.assign(value)
    return
  variable = (target if isinstance(target, tf.Variable) else
              getattr(target, "value", target))  # A Keras 3 variable's.
  components = getattr(variable, "values", None)
  if not isinstance(components, (tuple, list)):
    components = (variable,)
  for component in components:
    component.assign(value)


def failure(source, error):
  """What a failed restore's status assertions raise."""
  return AssertionError(f"Restoring {source!r} failed, nothing of it is "
                        f"restored: {error}")


# How `unconsumed` lines name a variable the checkpoint gave no value.
NOT_RESTORED = "not restored from the checkpoint"


class Restored:
  """A restore's legacy part as `LoadStatus` reads it: assigned at once
  (`load_weights`), or as its objects build (`_deferred.LegacyRestore`)."""

  def __init__(self, source, report=None, orphans=()):
    self.source, self.report, self.error = source, report, None
    self.orphans = list(orphans)  # Keys under entries nothing stands for.
    self.pending = set()  # What it waits to be built for: "model", "slots".

  def unconsumed(self):
    """Lines naming what is not restored (yet), for `assert_consumed`."""
    lines = [f"waiting for {what} to be built" for what in sorted(self.pending)]
    unmatched = self.report.unmatched_checkpoint if self.report else []
    lines += [f"checkpoint value not restored: {k}"
              for k in self.orphans + unmatched]
    return lines + [f"{NOT_RESTORED}: {d}" for d in self.unmatched_objects()]

  def unmatched_objects(self):
    """Descriptions of the variables the checkpoint gave no value."""
    return self.report.unmatched_objects if self.report else []

  def matched_any(self):
    return bool(self.pending) or bool(self.report and self.report.matched)


class LoadStatus:
  """TF's load status over the legacy part and the part TF restored.

  Attributes:
    legacy: The legacy part (`_deferred.LegacyRestore`, or `Restored`).
    report: The `RestoreReport` of what it assigned (None until then).
    unrestored: Checkpoint keys `load_weights` left out (an optimizer state
      for a model without optimizer, also logged at load time).
  """

  def __init__(self, legacy, native=None, native_keys=(), unrestored=()):
    self.legacy = legacy
    self.unrestored = list(unrestored)
    self._native = native
    self._native_keys = list(native_keys)  # [(variable node, key)] of TF's

  @property
  def report(self):
    return self.legacy.report

  def _raise_if_failed(self):
    if self.legacy.error is not None:
      raise failure(self.legacy.source, self.legacy.error) from (
          self.legacy.error)

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
    if self.unrestored:
      raise AssertionError(
          f"Unresolved values in {self.legacy.source!r} (the model has no "
          f"optimizer to restore them into): {self.unrestored}")
    resolved = (set() if self._native is None else
                _private_api.resolved_node_ids(self._native))
    return self._assert_none(
        self.legacy.unconsumed() + [f"checkpoint value not restored: {k}"
                                    for node, k in self._native_keys
                                    if node not in resolved],
        "was not fully restored")

  def assert_existing_objects_matched(self):
    """Raises `AssertionError` if a variable got no value; or self."""
    self._raise_if_failed()
    return self._assert_none(
        [f"{NOT_RESTORED}: {d}" for d in self.legacy.unmatched_objects()],
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
