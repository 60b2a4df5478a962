"""Applying a step so a non-finite one leaves no trace, bit for bit.

Three ways, each with TF 2.4's conditional apply's results, knobs in one
`StepConfig` (docs/architecture.md has the design, docs/performance.md the
numbers).

Example:

>>> set_overlap_memory_budget(256 * 2**20)  # Keep up to 256 MiB.
>>> default_config().overlap_budget
268435456
>>> set_overlap_memory_budget(None)  # Back to the default.
"""

import contextlib
import dataclasses
import functools
from typing import Optional

import keras
import tensorflow as tf

from tf_mixed_precision_compat import _private_api


@dataclasses.dataclass(frozen=True)
class StepConfig:
  """The knobs of a loss-scaled step; results are identical whatever they are.

  Attributes:
    overlap_budget: Bytes of old values a step may keep until the verdict,
      or None for half of max(`state_share` of the optimizer state,
      `min_allowance`).
    state_share: The default allowance's share of the optimizer state.
    min_allowance: The default allowance's floor, in bytes.
    large_min_elements: From this many elements a tensor is large.
    out_of_place_min_elements: From this many elements a kept tensor is
      computed into a new buffer its variable adopts.
    xla_masked_small_max: Under XLA a step writing fewer small tensors masks
      them; with more, they wait in a conditional.
    large_in_flight: How many large updates run at once after the verdict.
    restore_chunk: Tensors restored per `If` op.
  """

  overlap_budget: Optional[int] = None
  state_share: float = 0.05
  min_allowance: int = 32 * 2**20
  large_min_elements: int = 1 << 16
  out_of_place_min_elements: int = 1 << 14
  xla_masked_small_max: int = 256
  large_in_flight: int = 2
  restore_chunk: int = 64


# What steps traced from now on use; only `set_overlap_memory_budget` sets it.
_default = StepConfig()

# Keras 3 optimizers whose updates all go through the optimizer's `assign`,
# `assign_add` and `assign_sub` or `keras.Variable.assign`, and whose
# `update_step` updates one variable and its slots. Exact types: a subclass
# may write variables any other way.
_VETTED_TYPES = tuple(getattr(keras.optimizers, n) for n in (
    "Adam", "SGD", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam",
    "Lion"))


def default_config():
  """The `StepConfig` of steps traced from now on.

  Example:

  >>> default_config().large_in_flight
  2
  """
  return _default


def set_overlap_memory_budget(num_bytes):
  """Lets a loss-scaled step keep up to `num_bytes` to overlap its updates.

  A `tf.function` step of this package's dynamic `LossScaleOptimizer` around
  a Keras 3 optimizer applies TF 2.4's skip-on-overflow exactly. When every
  variable and slot it writes fits the budget, the updates run as soon as
  their gradients exist, their old values kept until the verdict: faster,
  at one extra copy of each. Otherwise the step is TF 2.4's conditional,
  every update waiting for the verdict. By default the budget is half of
  max(5% of the optimizer state, 32 MiB), so the step needs about as much
  memory as TF 2.4's. The budget applies to steps traced afterwards, per
  replica of the step; the results are identical either way.

  Example:

  >>> set_overlap_memory_budget(2 * 2**30)  # Keep up to 2 GiB.
  >>> set_overlap_memory_budget(None)  # The default again.

  Args:
    num_bytes: The most bytes kept alive until the verdict, a non-negative
      int (0: every update waits), or None for the default.

  Raises:
    TypeError: If `num_bytes` is not an int or None.
    ValueError: If `num_bytes` is negative.
  """
  global _default
  if num_bytes is not None:
    if isinstance(num_bytes, bool) or not isinstance(num_bytes, int):
      raise TypeError("set_overlap_memory_budget: `num_bytes` must be an int "
                      f"(bytes) or None, got {num_bytes!r}")
    if num_bytes < 0:
      raise ValueError("set_overlap_memory_budget: `num_bytes` must be >= 0 "
                       f"(bytes) or None, got {num_bytes}")
  _default = dataclasses.replace(_default, overlap_budget=num_bytes)


def _tf_variable(variable):
  return variable.value if isinstance(variable, keras.Variable) else variable


def _num_elements(variable):
  size = tf.TensorShape(variable.shape).num_elements()
  return float("inf") if size is None else size


def _bytes(variable):
  size = _num_elements(variable)
  if size == float("inf"):
    return size
  return int(size) * tf.as_dtype(variable.dtype).size


def _is_large(variable, config):
  return _num_elements(variable) >= config.large_min_elements


def keep_budget(inner, variables, config):
  """Bytes a step of `inner` over `variables` may keep until the verdict."""
  if config.overlap_budget is not None:
    return config.overlap_budget
  state = sum(_bytes(v) for v in variables) + sum(
      _bytes(v) for v in inner.variables)
  return max(config.state_share * state, config.min_allowance) // 2


def supported(inner, grads, variables):
  """Whether this module may apply `grads` to `variables` with `inner` here.

  In a `tf.function` (its automatic control dependencies order reads, writes
  and the restore), without a strategy, for a vetted optimizer without weight
  decay, EMA or gradient accumulation, and dense gradients of unconstrained
  variables.
  """
  if type(inner) not in _VETTED_TYPES:  # pylint: disable=unidiomatic-typecheck
    return False
  if not tf.inside_function() or tf.distribute.has_strategy():
    return False
  if (inner.weight_decay is not None or inner.use_ema or
      inner.gradient_accumulation_steps):
    return False
  if any(isinstance(g, tf.IndexedSlices) for g in grads):
    return False
  return not any(
      getattr(v, "constraint", None) is not None or
      getattr(v, "overwrite_with_gradient", False) for v in variables)


def _written(inner, variables):
  """The tensors a step writes, `iterations` aside, each once."""
  unique = {id(_tf_variable(v)): v for v in variables}
  unique.update((id(v.value), v) for v in inner.variables
                if v is not inner.iterations)
  return list(unique.values())


def gates(inner, variables, config):
  """True for `apply_when_finite`, False for TF 2.4's conditional.

  Under XLA a conditional's branch copies what it writes, so only many small
  tensors within the budget wait; elsewhere, a mask costs a pass over a
  tensor, a conditional over many small ones more.
  """
  written = _written(inner, variables)
  budget = keep_budget(inner, variables, config)
  if _private_api.in_xla_context():
    return not _xla_small_wait(written, budget, config) or any(
        _is_large(v, config) for v in written)
  if sum(_bytes(v) for v in written) <= budget:
    return True
  return budget > 0 and not any(_is_large(v, config) for v in written)


def _kept_variables(inner, variables, written, budget):
  """Ids of the variables whose updates are kept, the others waiting.

  All when the `written` tensors fit the budget together, as `gates` found;
  else from the last variable backwards (the backward pass computes their
  gradients first), each one whose bytes and its slots' (estimated) fit.
  """
  if sum(_bytes(v) for v in written) <= budget:
    return {id(_tf_variable(v)) for v in variables}
  slot_bytes = sum(_bytes(v) for v in inner.variables
                   if _num_elements(v) > 1)
  var_bytes = sum(_bytes(v) for v in variables)
  per_variable = 1 + -(-slot_bytes // max(var_bytes, 1))
  kept, used = set(), 0
  for variable in reversed(list(variables)):
    cost = per_variable * _bytes(variable)
    if used + cost <= budget:
      kept.add(id(_tf_variable(variable)))
      used += cost
  return kept


def _xla_small_wait(written, budget, config):
  """Whether under XLA the small tensors wait for the verdict, not masked."""
  small = [v for v in written if not _is_large(v, config)]
  return (len(small) >= config.xla_masked_small_max and
          sum(_bytes(v) for v in small) <= budget)


@contextlib.contextmanager
def _replaced(inner, **methods):
  """`inner`'s methods replaced for a block, restored even after an error.

  Set in `__dict__` directly, so that Keras's attribute tracking never sees
  them.
  """
  inner.__dict__.update(methods)
  try:
    yield
  finally:
    for name in methods:
      del inner.__dict__[name]


_RAW_WRITES = ("AssignVariableOp", "AssignAddVariableOp",
               "AssignSubVariableOp")


@contextlib.contextmanager
def large_updates_two_at_a_time(inner, config):
  """Makes `inner`'s large updates built in this block run two at a time.

  All at once, their temporaries would add to the peak of the gradients held
  until the verdict; one at a time would give up the overlap two have.
  """
  original = inner.update_step
  done = []  # The write ops of each large update so far.

  def update_step(gradient, variable, learning_rate):
    if not _is_large(variable, config):
      return original(gradient, variable, learning_rate)
    graph = tf.compat.v1.get_default_graph()
    first = len(graph.get_operations())
    waits = (done[-config.large_in_flight]
             if len(done) >= config.large_in_flight else [])
    with tf.control_dependencies(waits):
      result = original(gradient, variable, learning_rate)
    writes = [op for op in graph.get_operations()[first:]
              if op.type in _RAW_WRITES]
    if writes:
      done.append(writes)
    return result

  with _replaced(inner, update_step=update_step):
    yield


# What a masked `assign_add` adds and a masked `assign_sub` subtracts on a
# skipped step: x + -0. and x - +0. are x, bit for bit, signed zeros too.
_NEUTRAL = {"assign_add": -0., "assign_sub": 0.}

# How each intercepted write combines the old value with the given one.
_COMBINE = {
    "assign": lambda old, value: value,
    "assign_add": lambda old, value: old + value,
    "assign_sub": lambda old, value: old - value,
}


class _Writes:
  """Stands in for an optimizer's `assign`, `assign_add` and `assign_sub`.

  Elsewhere than XLA also for its `update_step`, which marks the variable
  being updated: kept (its writes restored if need be) or waiting (its
  whole update after the verdict, its writes masked). Built outside the
  stateless scope, where `keras.Variable.value` is still the underlying
  `tf.Variable`.
  """

  def __init__(self, inner, variables, finite, config):
    self._finite = finite
    self._config = config
    self.xla = _private_api.in_xla_context()
    self._storage = {id(v): v.value for v in inner.variables}
    # Read once, up front, and handed to the optimizer by the stateless
    # scope: its own read of a slot doubles as the saved old value.
    self.first_reads = [(v, v.value.value()) for v in inner.variables
                        if v is not inner.iterations and
                        not _is_large(v, config)]
    self.first_read = {id(self._storage[id(v)]): r
                       for v, r in self.first_reads}
    written = _written(inner, variables)
    budget = keep_budget(inner, variables, config)
    self._mask_small = self.xla and not _xla_small_wait(written, budget,
                                                        config)
    # ids of the kept tf.Variables (None under XLA), and of the one
    # `update_step` is updating.
    self.kept = None if self.xla else _kept_variables(inner, variables,
                                                      written, budget)
    self.current = None
    self.scope = None  # The stateless scope, once entered.
    self.originals = {}  # id(tf.Variable) -> [it, its value before the step]
    self.last_write = {}  # id(tf.Variable) -> its last write so far
    self.written = []  # write ops of the tensors written at once
    self.deferred = {}  # id(tf.Variable) -> [tf.Variable, its new value]

  def write(self, method, variable, value):
    """Does `optimizer.<method>(variable, value)` the gated way."""
    target = self._storage.get(id(variable))
    if target is None:
      target = _tf_variable(variable)
    value = tf.cast(value, target.dtype)
    if not self.xla:
      waiting = self.current is not None and self.current not in self.kept
      op = (self._write_masked if waiting else self._write_kept)(
          method, target, value)
    elif self._mask_small or _is_large(target, self._config):
      op = self._write_masked(method, target, value)
    else:
      self._defer(method, variable, target, value)
      return
    self.last_write[id(target)] = op
    self.written.append(op)
    if isinstance(variable, keras.Variable):
      # Later reads in the scope must see the update.
      with tf.control_dependencies([op]):
        self.scope.add_update((variable, target.value()))

  def update_step(self, original, gradient, variable, learning_rate):
    """`update_step`, a waiting variable's whole update after the verdict."""
    self.current = id(_tf_variable(variable))
    waits = [] if self.current in self.kept else [self._finite]
    try:
      with tf.control_dependencies(waits):
        return original(gradient, variable, learning_rate)
    finally:
      self.current = None

  def _write_masked(self, method, target, value):
    """The write, leaving `target` as it was unless the step is finite."""
    neutral = _NEUTRAL.get(method)
    keep = (target.value() if neutral is None else
            tf.constant(neutral, target.dtype))
    return getattr(target, method)(tf.where(self._finite, value, keep),
                                   read_value=False)

  def _write_kept(self, method, target, value):
    """The write, after saving `target`'s value from before the step."""
    if id(target) not in self.originals:
      old = self.first_read.get(id(target))
      self.originals[id(target)] = [
          target, target.value() if old is None else old]
    saved = self.originals[id(target)][1]
    if _num_elements(target) >= self._config.out_of_place_min_elements:
      previous = self.last_write.get(id(target))
      if previous is None:
        current = saved
      else:
        with tf.control_dependencies([previous]):
          current = target.value()
      # The assign is the new tensor's only consumer: it adopts the buffer.
      value = _COMBINE[method](current, value)
      method = "assign"
    # The saved value must be read before the write.
    with tf.control_dependencies([saved]):
      return getattr(target, method)(value, read_value=False)

  def _defer(self, method, variable, target, value):
    """Turns the write into a new value, assigned by the commit."""
    # A keras.Variable also records it in the stateless scope so that the
    # optimizer's later reads see it.
    if isinstance(variable, keras.Variable):
      old = tf.convert_to_tensor(variable)
    else:
      entry = self.deferred.get(id(target))
      old = entry[1] if entry else target.read_value()
    new = _COMBINE[method](old, value)
    if isinstance(variable, keras.Variable):
      variable.assign(new)
    self.deferred[id(target)] = [target, new]


@functools.lru_cache(maxsize=None)
def _restore_branches(dtypes):
  """`(restore, keep)` branches of an `If` writing values back to handles.

  Shapes left unknown: one pair serves every chunk of the same dtypes.
  """
  count = len(dtypes)
  specs = ([tf.TensorSpec(None, tf.resource)] * count +
           [tf.TensorSpec(None, dtype) for dtype in dtypes])

  def restore(*args):
    for handle, value in zip(args[:count], args[count:]):
      tf.raw_ops.AssignVariableOp(resource=handle, value=value)
    return tf.constant(True)

  def keep(*args):
    del args
    return tf.constant(False)

  return tuple(tf.function(fn, autograph=False).get_concrete_function(*specs)
               for fn in (restore, keep))


def _restore_unless(finite, originals, chunk_size):
  """`If` ops writing `originals` back unless `finite`, one per chunk."""
  if not originals:
    return []
  ops = []
  not_finite = tf.logical_not(finite)
  for start in range(0, len(originals), chunk_size):
    chunk = originals[start:start + chunk_size]
    restore, keep = _restore_branches(tuple(o.dtype for _, o in chunk))
    restore.add_to_graph()
    keep.add_to_graph()
    ops.append(tf.raw_ops.If(
        cond=not_finite, input=[t.handle for t, _ in chunk] +
        [o for _, o in chunk], Tout=[tf.bool], then_branch=restore,
        else_branch=keep)[0].op)
  return ops


def _gate(finite, grads, writes):
  """Under XLA, which orders ops by data alone, the gradients pass the verdict.

  On a non-finite step the masked writes discard what the zeros give.
  """
  if not writes.xla:
    return grads
  return [g if g is None else tf.where(finite, g, tf.zeros([], g.dtype))
          for g in grads]


def apply_when_finite(inner, grads, variables, finite, config):
  """Applies `grads` with `inner` where `finite`, else only counts the step.

  Only where `supported(...)` and `gates(...)` hold; returns an op that runs
  after every write of the step.
  """
  # Named, so that the step's graph shows which ops wait for it.
  finite = tf.identity(finite, name="all_finite_verdict")
  writes = _Writes(inner, variables, finite, config)
  stand_ins = {name: functools.partial(writes.write, name)
               for name in _COMBINE}
  if not writes.xla:
    stand_ins["update_step"] = functools.partial(writes.update_step,
                                                 inner.update_step)
  with _replaced(inner, **stand_ins), keras.StatelessScope(
      writes.first_reads) as scope:
    writes.scope = scope
    inner.apply_gradients(list(zip(_gate(finite, grads, writes), variables)))
  ops = []
  deferred = list(writes.deferred.values())
  for variable in inner.variables:
    new = scope.get_current_value(variable)
    if (new is None or new is writes.first_read.get(id(variable.value)) or
        id(variable.value) in writes.deferred or
        id(variable.value) in writes.last_write):
      continue
    if variable is inner.iterations:
      ops.append(variable.value.assign(new, read_value=False))
    else:
      deferred.append([variable.value, new])
  if deferred:
    def commit():
      with tf.control_dependencies(
          [t.assign(n, read_value=False) for t, n in deferred]):
        return tf.constant(True)
    ops.append(tf.cond(finite, commit, lambda: tf.constant(False)).op)
  ops.extend(writes.written)
  with tf.control_dependencies(writes.written):
    ops.extend(_restore_unless(finite, list(writes.originals.values()),
                               config.restore_chunk))
  return tf.group(ops)
