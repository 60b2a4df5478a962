"""Applying a step so a non-finite one leaves no trace, within a memory budget.

`apply_when_finite` gives TF 2.4's conditional apply bit for bit while letting
updates overlap the backward pass, keeping old values only up to a budget
(docs/architecture.md has the design; docs/performance.md the numbers).

Example:

>>> set_overlap_memory_budget(256 * 2**20)  # Keep up to 256 MiB.
>>> set_overlap_memory_budget(None)  # Back to the default.
"""

import contextlib
import functools

import keras
import tensorflow as tf

from tf_mixed_precision_compat import _private_api

# Tensors with at least this many elements are large: under XLA they are
# written in place, masked, and the small ones are deferred unless a step
# writes few of them (`_XLA_MASKED_SMALL_MAX`).
_LARGE_MIN_ELEMENTS = 1 << 16

# Kept tensors with at least this many elements are written out of place
# (computed into a new tensor that the variable adopts) rather than in place
# (which copies the tensor first, its old value being kept). An op costs
# about what copying 16K elements does: at 4096 elements neither way was
# cheaper from one run to the next, at 16384 and 65025 out of place was 3-4
# points cheaper.
_OUT_OF_PLACE_MIN_ELEMENTS = 1 << 14

# Keras 3 optimizers whose updates all go through the optimizer's `assign`,
# `assign_add` and `assign_sub` or `keras.Variable.assign`, which
# `apply_when_finite` intercepts, and whose `update_step` updates one
# variable and its slots. Exact types: a subclass may write variables any
# other way.
_VETTED = ("Adam", "SGD", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam",
           "Lion")
_VETTED_TYPES = tuple(getattr(keras.optimizers, n) for n in _VETTED)


# Under XLA, a step that writes fewer small tensors than this masks them
# all; with more, the small ones are deferred to the conditional, or, when
# the step writes no large tensor, the whole step is TF 2.4's conditional.
# Masking all measured 2-5 points cheaper than deferring with 30 and 90
# small tensors (10 and 30 Adam variables of 64x64), equal with 300, and 14
# points dearer with 1200 (400 variables of 32x32). With no large tensor,
# the whole conditional measured cheaper again than deferring: 300 tensors
# -5.8% against +6.7% over bare (eight compiled instances each), 1200
# tensors -1.7% against +2.1%.
_XLA_MASKED_SMALL_MAX = 256


# Waiting large updates run at most this many at a time, each after the
# writes of the one this many before it. On 16 Adam variables of 2048x2048
# the allocator's peak over resting was 324-328 MiB with all started at the
# verdict, 291-292 MiB with one or two at a time (Keras 3's conditional:
# 292-311); on 10 variables of 1000x1000 one at a time cost 6-15 points of
# step time, two at a time nothing measurable (+13.7% vs +13.1%, three
# instances each).
_LARGE_UPDATES_IN_FLIGHT = 2


# Tensors restored by one `If` op: a few dozen `If` ops per step cost less
# than building and instantiating one branch function over thousands of
# tensors.
_RESTORE_CHUNK = 64

# The extra memory a step may need by default: the larger of this share of
# the optimizer state (variables and slots) and `_MIN_ALLOWANCE` bytes. Half
# of it may be kept (or deferred) until the verdict; the other half is left
# for the masks' and the optimizer's short-lived temporaries.
_STATE_SHARE = 0.05
_MIN_ALLOWANCE = 32 * 2**20

_overlap_budget = None  # Set by `set_overlap_memory_budget`; None: default.


def set_overlap_memory_budget(num_bytes):
  """Lets a loss-scaled step keep up to `num_bytes` to overlap its updates.

  A `tf.function` step of this package's dynamic `LossScaleOptimizer` around
  a Keras 3 optimizer applies TF 2.4's skip-on-overflow exactly. A variable
  update either waits for the all-finite verdict (as in TF 2.4) or runs as
  soon as its gradient exists, its old value kept until the verdict: faster,
  at one extra copy of each such variable and slot. By default at most
  half of max(5% of the optimizer state, 32 MiB) is kept, so the step needs
  about as much memory as TF 2.4's. Where memory is plentiful a larger
  budget lets more updates overlap the backward pass. The budget applies to
  steps traced afterwards, per replica of the step; the results are
  identical either way.

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
  global _overlap_budget
  if num_bytes is not None:
    if isinstance(num_bytes, bool) or not isinstance(num_bytes, int):
      raise TypeError("set_overlap_memory_budget: `num_bytes` must be an int "
                      f"(bytes) or None, got {num_bytes!r}")
    if num_bytes < 0:
      raise ValueError("set_overlap_memory_budget: `num_bytes` must be >= 0 "
                       f"(bytes) or None, got {num_bytes}")
  _overlap_budget = num_bytes


def _bytes(variable):
  size = _num_elements(variable)
  if size == float("inf"):
    return size
  return int(size) * tf.as_dtype(variable.dtype).size


def keep_budget(inner, variables):
  """Bytes a step of `inner` over `variables` may keep until the verdict."""
  if _overlap_budget is not None:
    return _overlap_budget
  state = sum(_bytes(v) for v in variables) + sum(
      _bytes(v) for v in inner.variables)
  return max(_STATE_SHARE * state, _MIN_ALLOWANCE) // 2


def supported(inner, grads, variables):
  """Whether `apply_when_finite` may apply `grads` with `inner` here.

  Args:
    inner: The inner optimizer.
    grads: The gradients to apply (None allowed).
    variables: The variables they belong to.

  Returns:
    True inside a `tf.function` (whose automatic control dependencies keep
    reads, writes and the restore in order), without a distribution
    strategy, for a vetted Keras 3 optimizer without weight decay, EMA or
    gradient accumulation, and dense gradients of unconstrained variables.
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


def waits_in_conditional(inner, variables):
  """Whether a supported step is best applied as TF 2.4's conditional.

  In an executor graph, once a large update must wait for the verdict
  anyway (the budget cannot keep it), one conditional whose branch runs the
  large updates two at a time (`large_updates_two_at_a_time`) measured
  faster than the gated apply (`fit` of 4 Dense layers of 1024: +20.0%
  against +27.5% over bare, Keras 3's conditional +19.7%; 10 variables of
  1000x1000: +14.5% against +16.6%) in the same memory. Steps whose large
  updates the default budget keeps (many small variables), and every step
  under an opt-in budget (`set_overlap_memory_budget`), take the gated
  apply.

  Under XLA a large tensor is best masked in place (a conditional's branch
  writing it copies it), and a few small ones too; a step writing only
  small tensors, many of them (`_XLA_MASKED_SMALL_MAX`) and within the
  budget, is cheapest as the conditional.

  Args:
    inner: The inner optimizer (built).
    variables: The variables of the step.

  Returns:
    A Python bool.
  """
  if _private_api.in_xla_context():
    small, large = _xla_written(inner, variables)
    return not large and _xla_small_wait(small, keep_budget(inner, variables))
  if _overlap_budget is not None:
    return False
  kept = _kept_variables(inner, variables, keep_budget(inner, variables))
  return any(_is_large(v) and id(_tf_variable(v)) not in kept
             for v in variables)


def _xla_written(inner, variables):
  """The tensors an XLA step writes, `iterations` aside: (small, large)."""
  small, large = [], []
  for v in list(inner.variables) + list(variables):
    if v is not inner.iterations:
      (large if _is_large(_tf_variable(v)) else small).append(v)
  return small, large


def _xla_small_wait(small, budget):
  """Whether under XLA the `small` tensors wait for the verdict, not masked.

  They do, deferred to the conditional (or in it, with the whole step),
  when there are many of them (`_XLA_MASKED_SMALL_MAX`) within `budget`.
  """
  return (len(small) >= _XLA_MASKED_SMALL_MAX and
          sum(_bytes(v) for v in small) <= budget)


class _InFlight:
  """Large updates, each waiting for the one `_LARGE_UPDATES_IN_FLIGHT` before.

  Every gradient is held until the verdict, and large updates all started
  together would add their full-size temporaries to that peak; one at a
  time would give up the overlap two have.
  """

  def __init__(self):
    self._writes = []  # The write ops of each large update so far.

  def waits_for(self):
    """The ops the next large update must wait for."""
    if len(self._writes) < _LARGE_UPDATES_IN_FLIGHT:
      return []
    return self._writes[-_LARGE_UPDATES_IN_FLIGHT]

  def add(self, writes):
    """Records the write ops of a large update just built."""
    if writes:
      self._writes.append(writes)


@contextlib.contextmanager
def large_updates_two_at_a_time(inner):
  """Makes `inner`'s large updates built in this block run two at a time.

  Args:
    inner: The inner Keras 3 optimizer (vetted: its `update_step` updates
      one variable and its slots).

  Yields:
    Nothing.
  """
  original = inner.update_step
  in_flight = _InFlight()

  def update_step(gradient, variable, learning_rate):
    if not _is_large(variable):
      return original(gradient, variable, learning_rate)
    graph = tf.compat.v1.get_default_graph()
    first = len(graph.get_operations())
    with tf.control_dependencies(in_flight.waits_for()):
      result = original(gradient, variable, learning_rate)
    in_flight.add([op for op in graph.get_operations()[first:]
                   if op.type in _RAW_WRITES.values()])
    return result

  # Set in `__dict__` directly, as `_run_inner` does, so that Keras's
  # attribute tracking never sees it.
  inner.__dict__["update_step"] = update_step
  try:
    yield
  finally:
    del inner.__dict__["update_step"]


def _tf_variable(variable):
  return variable.value if isinstance(variable, keras.Variable) else variable


def _num_elements(variable):
  size = tf.TensorShape(variable.shape).num_elements()
  return float("inf") if size is None else size


def _is_large(variable):
  return _num_elements(variable) >= _LARGE_MIN_ELEMENTS


# What a masked `assign_add` adds and a masked `assign_sub` subtracts on a
# skipped step: x + -0. and x - +0. are x, bit for bit, for every x
# (signed zeros included; x + +0. would turn -0. into +0.).
_NEUTRAL = {"assign_add": -0., "assign_sub": 0.}

# How each intercepted write combines the old value with the given one.
_COMBINE = {
    "assign": lambda old, value: value,
    "assign_add": lambda old, value: old + value,
    "assign_sub": lambda old, value: old - value,
}


def _slots_per_variable(inner, variables):
  """How many tensors of a variable's size its update writes besides it.

  The optimizer's non-scalar variables over the variables' bytes, rounded
  up: exact for the vetted optimizers (every variable has the same slots),
  and an over-estimate when `variables` is a part of what `inner` knows.
  """
  slot_bytes = sum(_bytes(v) for v in inner.variables
                   if _num_elements(v) > 1)
  var_bytes = sum(_bytes(v) for v in variables)
  return -(-slot_bytes // max(var_bytes, 1))


def _kept_variables(inner, variables, budget):
  """Ids of the variables (as `tf.Variable`s) whose updates are kept.

  From the last variable backwards (the backward pass computes their
  gradients first) while each one's bytes and its slots' fit the budget.
  """
  per_var = 1 + _slots_per_variable(inner, variables)
  kept, used = set(), 0
  for variable in reversed(list(variables)):
    cost = per_var * _bytes(variable)
    if used + cost <= budget:
      kept.add(id(_tf_variable(variable)))
      used += cost
  return kept


class _Writes:
  """Stands in for an optimizer's `assign`, `assign_add` and `assign_sub`.

  Built outside the stateless scope, where `keras.Variable.value` is still
  the underlying `tf.Variable`.
  """

  def __init__(self, inner, variables, finite, budget):
    self._finite = finite
    self.xla = _private_api.in_xla_context()
    self._budget = budget
    self._storage = {id(v): v.value for v in inner.variables}
    # The small optimizer variables are read once, up front, and the
    # stateless scope hands these reads to the optimizer: the read it makes
    # anyway before updating a slot doubles as the slot's saved old value,
    # so saving costs no op. (`iterations` keeps its own reads. Under XLA,
    # where nothing is restored, they are just the optimizer's reads.)
    self.first_reads = [(v, v.value.value()) for v in inner.variables
                        if v is not inner.iterations and not _is_large(v)]
    # id(tf.Variable) -> its first read.
    self.first_read = {id(self._storage[id(v)]): r
                       for v, r in self.first_reads}
    # In an executor graph: the variables whose updates are kept (the
    # others wait), and the one `update_step` is updating.
    self.kept_variables = (set() if self.xla else
                           _kept_variables(inner, variables, budget))
    self.current = None
    # Under XLA the large tensors are masked, and the small ones too if
    # there are few, or more bytes of them than the budget.
    self._mask_small = self.xla and not _xla_small_wait(
        _xla_written(inner, variables)[0], budget)
    self.scope = None  # The stateless scope, once entered.
    self.originals = {}  # id(tf.Variable) -> [it, its value before the step]
    self.kept_bytes = 0  # Bytes of `originals`.
    # id(tf.Variable) -> its last write so far, of those written at once.
    self.last_write = {}
    self.written = []  # write ops of the tensors written at once
    self.deferred = {}  # id(tf.Variable) -> [tf.Variable, its new value]
    self._in_flight = _InFlight()  # The waiting large updates.

  def write(self, method, variable, value):
    """Does `optimizer.<method>(variable, value)` the gated way."""
    target = self._storage.get(id(variable))
    if target is None:
      target = _tf_variable(variable)
    value = tf.cast(value, target.dtype)
    how = self._how(target)
    if how == "defer":
      self._defer(method, variable, target, value)
      return
    if how == "mask" and not self.xla and _is_large(target):
      op = _write_if(self._finite, method, target, value)
    elif how == "mask":
      op = self._write_masked(method, target, value)
    else:
      op = self._write_kept(method, target, value)
    self.last_write[id(target)] = op
    self.written.append(op)
    if isinstance(variable, keras.Variable):
      # Later reads in the scope must see the update.
      with tf.control_dependencies([op]):
        self.scope.add_update((variable, target.value()))

  def _how(self, target):
    """"keep", "mask" (waiting for the verdict) or "defer" `target`'s write."""
    if self.xla:
      return "mask" if self._mask_small or _is_large(target) else "defer"
    if id(target) in self.originals:
      return "keep"
    # Writes outside `update_step` (Nadam's shared `u_product`) are kept
    # while the budget allows: the updates of kept variables read them.
    if (id(target) not in self.last_write and
        (self.current is None or self.current in self.kept_variables) and
        self.kept_bytes + _bytes(target) <= self._budget):
      self.kept_bytes += _bytes(target)
      return "keep"
    return "mask"

  def update_step(self, original, gradient, variable, learning_rate):
    """The optimizer's `update_step`, with `variable`'s writes decided."""
    self.current = id(_tf_variable(variable))
    try:
      if self.xla or self.current in self.kept_variables:
        return original(gradient, variable, learning_rate)
      # Waiting: every op of the update (also those that read only slots,
      # such as Adamax's `beta_2 * u`) runs after the verdict, so that none
      # of its full-size temporaries is held until then; large ones also
      # two at a time.
      large = _is_large(variable)
      deps = [self._finite] + (self._in_flight.waits_for() if large else [])
      first = len(self.written)
      with tf.control_dependencies(deps):
        result = original(gradient, variable, learning_rate)
      if large:
        self._in_flight.add(self.written[first:])
      return result
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
    if _num_elements(target) >= _OUT_OF_PLACE_MIN_ELEMENTS:
      previous = self.last_write.get(id(target))
      if previous is None:
        current = saved
      else:
        with tf.control_dependencies([previous]):
          current = target.value()
      # The assign is the new tensor's only consumer, so it can adopt the
      # buffer instead of copying it.
      value = _COMBINE[method](current, value)
      method = "assign"
    # The saved value must be read before the write (an `assign`'s value
    # need not depend on it).
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


_RAW_WRITES = {"assign": "AssignVariableOp",
               "assign_add": "AssignAddVariableOp",
               "assign_sub": "AssignSubVariableOp"}


@functools.lru_cache(maxsize=None)
def _write_branches(method, dtype):
  """The branches of an `If` doing `method` of a variable of `dtype`."""
  specs = (tf.TensorSpec(None, tf.resource), tf.TensorSpec(None, dtype))

  def write(handle, value):
    getattr(tf.raw_ops, _RAW_WRITES[method])(resource=handle, value=value)
    return tf.constant(True)

  def skip(handle, value):
    del handle, value
    return tf.constant(False)

  return tuple(tf.function(fn, autograph=False).get_concrete_function(*specs)
               for fn in (write, skip))


def _write_if(finite, method, target, value):
  """`target.<method>(value)` in place if `finite`, else nothing.

  For large tensors in an executor graph: an `If` op costs about what a
  select over a few ten thousand elements does, while a masked write costs a
  pass over the tensor.
  """
  write, skip = _write_branches(method, target.dtype)
  write.add_to_graph()
  skip.add_to_graph()
  return tf.raw_ops.If(cond=finite, input=[target.handle, value],
                       Tout=[tf.bool], then_branch=write,
                       else_branch=skip)[0].op


@functools.lru_cache(maxsize=None)
def _restore_branches(dtypes):
  """The branches of a restoring `If` over variables of `dtypes`.

  `restore(handles..., values...)` writes the values back; `keep` does
  nothing. Shapes are left unknown, so one pair serves every chunk of the
  same dtypes, traced once per process.
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


def _restore_unless(finite, originals):
  """`If` ops writing `originals` back unless `finite`, one per chunk.

  Chunks keep each branch function small: building and instantiating one
  function over thousands of tensors took seconds, growing faster than the
  tensor count.
  """
  if not originals:
    return []
  ops = []
  not_finite = tf.logical_not(finite)
  for start in range(0, len(originals), _RESTORE_CHUNK):
    chunk = originals[start:start + _RESTORE_CHUNK]
    restore, keep = _restore_branches(tuple(o.dtype for _, o in chunk))
    restore.add_to_graph()
    keep.add_to_graph()
    ops.append(tf.raw_ops.If(
        cond=not_finite, input=[t.handle for t, _ in chunk] +
        [o for _, o in chunk], Tout=[tf.bool], then_branch=restore,
        else_branch=keep)[0].op)
  return ops


def _gate(finite, grads, variables, writes):
  """The gradients, those of the waiting variables only after the verdict.

  So that nothing of a waiting variable's update (which holds full-size
  temporaries) is computed before its masked writes can run. XLA orders ops
  by their data alone: there every gradient passes a select on the verdict
  (`where(finite, g, 0.)`, the gradient itself on a finite step, fused into
  its consumers); on a non-finite step the masked writes discard what it
  gives.
  """
  if writes.xla:
    return [g if g is None else tf.where(finite, g, tf.zeros([], g.dtype))
            for g in grads]
  gated = []
  for grad, variable in zip(grads, variables):
    if grad is not None and id(_tf_variable(variable)) not in (
        writes.kept_variables):
      with tf.control_dependencies([finite]):
        grad = tf.identity(grad)
    gated.append(grad)
  return gated


def _run_inner(inner, writes, grads, variables):
  """`inner.apply_gradients` with its writes done by `writes`.

  Returns:
    The stateless scope it ran in.
  """
  # Instance attributes shadow the class's methods for the duration of the
  # call; set in `__dict__` directly so that Keras's attribute tracking
  # never sees them.
  for name in _COMBINE:
    inner.__dict__[name] = functools.partial(writes.write, name)
  inner.__dict__["update_step"] = functools.partial(
      writes.update_step, inner.update_step)
  try:
    with keras.StatelessScope(writes.first_reads) as scope:
      writes.scope = scope
      inner.apply_gradients(list(zip(grads, variables)))
  finally:
    for name in (*_COMBINE, "update_step"):
      del inner.__dict__[name]
  return scope


def apply_when_finite(inner, grads, variables, finite):
  """Applies `grads` with `inner` where `finite`, else only counts the step.

  Only call where `supported(inner, grads, variables)` holds.

  Args:
    inner: The inner Keras 3 optimizer (built).
    grads: Unscaled gradients, in the order of `variables`.
    variables: The variables.
    finite: Scalar bool tensor, whether the step is applied.

  Returns:
    An op that runs after every write of the step.
  """
  # Named, so that the step's graph shows which ops wait for it.
  finite = tf.identity(finite, name="all_finite_verdict")
  writes = _Writes(inner, variables, finite, keep_budget(inner, variables))
  scope = _run_inner(inner, writes, _gate(finite, grads, variables, writes),
                     variables)
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
    ops.extend(_restore_unless(finite, list(writes.originals.values())))
  return tf.group(ops)

