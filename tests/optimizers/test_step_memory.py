"""A loss-scaled step keeps alive no more bytes than its memory budget.

Measured from the step's graph, deterministically: the bytes that must
survive until the all-finite verdict beyond what TF 2.4's conditional apply
holds (the gradients, which both hold). Those are

* the variables and slots written before the verdict (their old values are
  kept, to be written back on a non-finite step), and
* the tensors computed before the verdict and used after it (new values
  deferred to a conditional), gradients and variable reads excepted.

A `StepConfig` (or `set_overlap_memory_budget`) sets the budget; by
default it is half of max(5% of the optimizer state, 32 MiB). Steps that
take TF 2.4's conditional (under MirroredStrategy, the `tf.compat.v1`
optimizer, once the budget cannot keep every large tensor the step writes,
and under XLA with many small tensors only) hold nothing beyond the
gradients; nor do the updates a partly kept step makes wait;
eagerly each op runs when called, so nothing is computed ahead of the
verdict.
"""

from unittest import mock

from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat.optimizers import _gated_apply
from tf_mixed_precision_compat.optimizers import loss_scale_optimizer
from tf_mixed_precision_compat.optimizers import (
    experimental_loss_scale_optimizer)
from tf_mixed_precision_compat.optimizers import compat_v1_optimizer

_WRITES = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")
# Ops whose outputs hold no bytes of their own: the step's inputs (the
# gradients), references to a variable's buffer, handles.
_NOT_HELD = ("Placeholder", "ReadVariableOp", "VarHandleOp", "Const")


def _downstream(graph, seeds):
  """Ops reachable from `seeds` through data and control edges."""
  consumers = {}
  for op in graph.get_operations():
    for t in op.inputs:
      consumers.setdefault(t.op, []).append(op)
    for c in op.control_inputs:
      consumers.setdefault(c, []).append(op)
  seen, todo = set(), list(seeds)
  while todo:
    op = todo.pop()
    for nxt in consumers.get(op, ()):
      if nxt not in seen:
        seen.add(nxt)
        todo.append(nxt)
  return seen


def _tensor_bytes(t):
  if t.dtype in (tf.resource, tf.variant) or not t.shape.is_fully_defined():
    return 0
  return t.shape.num_elements() * t.dtype.size


def held_bytes(graph, verdicts, first_op=0):
  """Bytes a step must keep alive until `verdicts` are known.

  Args:
    graph: The step's graph.
    verdicts: The ops computing the all-finite verdict.
    first_op: How many of the graph's first ops (variable initializers in a
      `tf.compat.v1` graph) are not part of the step.

  Returns:
    (bytes of variables written before the verdict, bytes of tensors
    computed before it and used after it).
  """
  verdicts = set(verdicts)
  after = _downstream(graph, verdicts) | verdicts
  kept, held = {}, set()
  for op in graph.get_operations()[first_op:]:
    if op in verdicts:
      continue  # Its inputs are what the verdict is computed from.
    if op in after:
      for t in op.inputs:
        if t.op not in after and t.op.type not in _NOT_HELD:
          held.add(t.ref())
    elif op.type in _WRITES:
      value = op.inputs[1]
      kept[op.inputs[0].ref()] = _tensor_bytes(value)
  return sum(kept.values()), sum(_tensor_bytes(r.deref()) for r in held)


def _gated_verdict(graph):
  return [op for op in graph.get_operations()
          if op.name.endswith("all_finite_verdict")]


def _conditional_verdicts(graph):
  return [op.inputs[0].op for op in graph.get_operations()
          if op.type in ("If", "StatelessIf")]


def _large(variables):
  return [v for v in variables if np.prod(v.shape) >=
          _gated_apply.StepConfig().large_min_elements]


def _config(**knobs):
  """Steps traced in this block use a `StepConfig` of `knobs`."""
  return mock.patch.object(_gated_apply, "default_config",
                           return_value=_gated_apply.StepConfig(**knobs))


def _step_graph(make_inner, shapes, jit=False):
  variables = [tf.Variable(tf.zeros(s)) for s in shapes]
  opt = loss_scale_optimizer.LossScaleOptimizer(make_inner())
  opt.build(variables)
  step = tf.function(lambda g: opt.apply_gradients(zip(g, variables)),
                     jit_compile=jit)
  graph = step.get_concrete_function(
      [tf.TensorSpec(s) for s in shapes]).graph
  return graph, opt, variables


_OPTIMIZERS = {
    "adam": lambda: keras.optimizers.Adam(0.01),
    "adam_amsgrad": lambda: keras.optimizers.Adam(0.01, amsgrad=True),
    "sgd": lambda: keras.optimizers.SGD(0.1),
    "sgd_momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "rmsprop_centered": lambda: keras.optimizers.RMSprop(
        0.01, momentum=0.5, centered=True),
    "adagrad": lambda: keras.optimizers.Adagrad(0.1),
    "adadelta": lambda: keras.optimizers.Adadelta(1.0),
    "adamax": lambda: keras.optimizers.Adamax(0.01),
    "nadam": lambda: keras.optimizers.Nadam(0.01),
    "lion": lambda: keras.optimizers.Lion(0.001),
}

# Six variables of 256 KiB (large) and two small ones.
_SHAPES = ((256, 256),) * 6 + ((3, 4), (128, 128))
_MIB = 2**20
# Bytes of the scalars written or held around the verdict (`iterations`,
# the loss scale and its counter, learning rates, verdicts).
_SCALARS = 256


class StepMemoryTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{name}_{budget}", name, budget)
      for name in _OPTIMIZERS for budget in (0, 3 * _MIB, 8 * _MIB))
  def test_kept_bytes_stay_within_the_budget(self, name, budget):
    with _config(overlap_budget=budget):
      graph, opt, variables = _step_graph(_OPTIMIZERS[name], _SHAPES)
    state = sum(np.asarray(v).nbytes for v in
                variables + [w for w in opt.inner_optimizer.variables
                             if w is not opt.iterations])
    # All or nothing: kept when everything the step writes fits.
    verdict = _gated_verdict(graph) or _conditional_verdicts(graph)
    self.assertEqual(bool(_gated_verdict(graph)), state <= budget)
    kept, held = held_bytes(graph, verdict)
    self.assertLessEqual(kept, budget + _SCALARS)
    self.assertLessEqual(held, _SCALARS)
    if state <= budget:
      self.assertBetween(kept, state - _SCALARS, state + _SCALARS)

  @parameterized.named_parameters((name, name) for name in _OPTIMIZERS)
  def test_small_tensors_kept_in_part_the_others_wait_whole(self, name):
    # Eight variables of 64 KiB, none large: the last three and their slots
    # fit the budget and are kept; the other updates run after the verdict.
    shapes = ((128, 128),) * 8
    _, opt, variables = _step_graph(_OPTIMIZERS[name], shapes)
    per_variable = sum(
        np.asarray(w).nbytes for w in opt.inner_optimizer.variables
        if w.shape == (128, 128)) // 8 + 64 * 2**10
    budget = 3 * per_variable + 100
    with _config(overlap_budget=budget):
      graph, _, _ = _step_graph(_OPTIMIZERS[name], shapes)
    kept, held = held_bytes(graph, _gated_verdict(graph))
    self.assertBetween(kept, 3 * per_variable, budget + _SCALARS)
    self.assertLessEqual(held, _SCALARS)

  def test_a_step_that_fits_keeps_each_update_it_makes(self):
    # The optimizer also holds the slots of a (10,) variable this step does
    # not update, which skews the per-variable estimate of slot bytes; all
    # the step writes fits the budget, so its one update is still kept.
    variables = [tf.Variable(tf.zeros((64, 64))), tf.Variable(tf.zeros(10))]
    opt = loss_scale_optimizer.LossScaleOptimizer(keras.optimizers.Adam())
    opt.build(variables)
    step = tf.function(lambda g: opt.apply_gradients([(g, variables[0])]))
    with _config(overlap_budget=60 * 2**10):
      graph = step.get_concrete_function(tf.TensorSpec((64, 64))).graph
    kept, held = held_bytes(graph, _gated_verdict(graph))
    self.assertBetween(kept, 3 * 64 * 64 * 4, 3 * 64 * 64 * 4 + _SCALARS)
    self.assertLessEqual(held, _SCALARS)

  def test_a_larger_budget_keeps_more(self):
    kept = []
    for budget in (0, 1 * _MIB, 2 * _MIB, 100 * _MIB):
      with _config(overlap_budget=budget):
        graph, _, _ = _step_graph(_OPTIMIZERS["adam"], _SHAPES)
      verdict = _gated_verdict(graph) or _conditional_verdicts(graph)
      kept.append(held_bytes(graph, verdict)[0])
    self.assertEqual(kept, sorted(kept))
    state = sum(int(np.prod(s)) * 4 * 3 for s in _SHAPES)
    # With room for everything, every variable and slot is kept.
    self.assertBetween(kept[-1], state, state + _SCALARS)

  def test_default_budget_is_half_of_five_percent_of_state_or_32_mib(self):
    _, opt, variables = _step_graph(_OPTIMIZERS["adam"], _SHAPES)
    inner = opt.inner_optimizer
    self.assertEqual(_gated_apply.keep_budget(
        inner, variables, _gated_apply.StepConfig()), 16 * _MIB)
    state = sum(np.asarray(v).nbytes
                for v in list(variables) + list(inner.variables))
    self.assertEqual(_gated_apply.keep_budget(
        inner, variables, _gated_apply.StepConfig(min_allowance=0)),
                     (0.05 * state) // 2)

  def test_default_budget_keeps_no_more_than_it(self):
    graph, opt, variables = _step_graph(_OPTIMIZERS["adam"], _SHAPES)
    kept, held = held_bytes(graph, _gated_verdict(graph))
    self.assertLessEqual(kept, _gated_apply.keep_budget(
        opt.inner_optimizer, variables, _gated_apply.StepConfig()) + _SCALARS)
    self.assertLessEqual(held, _SCALARS)

  def _assert_two_at_a_time(self, graph, writes):
    """Each large update's writes (`writes`, in order) wait for the writes
    of the update two before, and not for those of the one just before."""
    self.assertLen(writes, 6)
    for index in range(2, len(writes)):
      self.assertTrue(writes[index])
      downstream = _downstream(graph, writes[index - 2])
      self.assertTrue(all(w in downstream for w in writes[index]))
      self.assertNotIn(writes[index][0],
                       _downstream(graph, writes[index - 1]))

  def test_by_default_waiting_large_updates_take_a_conditional(self):
    # Once the default budget cannot keep everything, the step is TF 2.4's
    # conditional, its large updates in the branch two at a time.
    with _config(min_allowance=0):
      graph, _, variables = _step_graph(_OPTIMIZERS["adam"], _SHAPES)
    self.assertEmpty(_gated_verdict(graph))
    [cond] = [op for op in graph.get_operations()
              if op.type in ("If", "StatelessIf")]
    # Nothing is written before the verdict; only the gradients are held.
    kept, held = held_bytes(graph, _conditional_verdicts(graph))
    self.assertLessEqual(kept, _SCALARS)
    self.assertLessEqual(held, _SCALARS)
    branch = cond._true_graph  # pylint: disable=protected-access
    in_step = {id(outer): inner for outer, inner in graph.captures}
    # The branch's inputs are the conditional's, after the predicate.
    in_branch = {id(outer): inner
                 for outer, inner in zip(cond.inputs[1:], branch.inputs)}
    writes = []
    for variable in _large(variables):
      handle = in_branch[id(in_step[id(variable.handle)])]
      writes.append([op for op in branch.get_operations()
                     if op.type in _WRITES and op.inputs[0] is handle])
    self._assert_two_at_a_time(branch, writes)

  def test_under_xla_waiting_large_updates_are_masked_not_conditional(self):
    # XLA updates a tensor in place only outside a conditional, so there the
    # default budget's waiting large updates stay in the gated apply.
    with _config(min_allowance=0):
      graph, _, _ = _step_graph(_OPTIMIZERS["adam"], _SHAPES, jit=True)
    self.assertLen(_gated_verdict(graph), 1)
    self.assertFalse({"If", "StatelessIf"} &
                     {op.type for op in graph.get_operations()})

  @parameterized.parameters(0, 8 * _MIB)
  def test_under_xla_deferred_small_tensors_stay_within_the_budget(
      self, budget):
    # Many small tensors beside a large one (masked): the small ones are
    # deferred to the conditional if they fit.
    shapes = ((64, 64),) * 100 + ((256, 256),)
    with _config(overlap_budget=budget, xla_masked_small_max=0):
      graph, _, _ = _step_graph(_OPTIMIZERS["adam"], shapes, jit=True)
    verdict = _gated_verdict(graph)
    self.assertLen(verdict, 1)
    kept, held = held_bytes(graph, verdict)
    # A scalar or two per variable (learning rates) around the verdict.
    scalars = _SCALARS + 8 * len(shapes)
    self.assertLessEqual(kept, scalars)
    self.assertLessEqual(held, budget + scalars)
    # Deferred to the conditional only within the budget (4.7 MiB).
    types = {op.type for op in graph.get_operations()}
    self.assertEqual(bool({"If", "StatelessIf"} & types), budget > 0)

  @parameterized.parameters(0, 8 * _MIB)
  def test_under_xla_many_small_tensors_alone_take_the_conditional(
      self, budget):
    shapes = ((64, 64),) * 100  # 301 small tensors with Adam's slots.
    with _config(overlap_budget=budget):
      graph, _, _ = _step_graph(_OPTIMIZERS["adam"], shapes, jit=True)
    # Within the budget (4.7 MiB), TF 2.4's conditional: the whole update in
    # its branch, so nothing is computed ahead of the verdict but the
    # gradients; beyond it, every write masked in place.
    conditional = _conditional_verdicts(graph)
    self.assertEqual(bool(conditional), budget > 0)
    self.assertEqual(not _gated_verdict(graph), budget > 0)
    kept, held = held_bytes(graph, conditional or _gated_verdict(graph))
    self.assertLessEqual(kept, _SCALARS + 8 * len(shapes))
    self.assertLessEqual(held, _SCALARS + 8 * len(shapes))

  def test_the_v1_optimizer_holds_only_the_gradients(self):
    graph = tf.Graph()
    with graph.as_default():
      variables = [tf.compat.v1.Variable(tf.zeros(s), use_resource=True)
                   for s in _SHAPES]
      grads = [tf.compat.v1.placeholder(tf.float32, s) for s in _SHAPES]
      opt = compat_v1_optimizer.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.AdamOptimizer(0.01), "dynamic")
      # The slots and their initializers are made up front.
      opt.apply_gradients(list(zip(grads, variables)))
      first_op = len(graph.get_operations())
      opt.apply_gradients(list(zip(grads, variables)))
    verdicts = _conditional_verdicts(graph) + [
        op.inputs[1].op for op in graph.get_operations()
        if op.type == "Switch"]
    self.assertNotEmpty(verdicts)
    kept, held = held_bytes(graph, verdicts, first_op)
    self.assertLessEqual(kept, _SCALARS)
    self.assertLessEqual(held, _SCALARS)


def test_under_a_mirrored_strategy_only_the_gradients_are_held(
    mirrored_strategy):
  strategy = mirrored_strategy
  with strategy.scope():
    variables = [tf.Variable(tf.zeros(s)) for s in _SHAPES]
    opt = loss_scale_optimizer.LossScaleOptimizer(
        keras.optimizers.Adam(0.01))
    opt.build(variables)

  @tf.function
  def step(grads):
    # Gradients computed in the replica, on its device.
    strategy.run(lambda: opt.apply_gradients(
        zip([tf.identity(g) * 0.5 for g in grads], variables)))

  graph = step.get_concrete_function(
      [tf.TensorSpec(s) for s in _SHAPES]).graph
  verdicts = _conditional_verdicts(graph)
  assert verdicts
  kept, held = held_bytes(graph, verdicts)
  assert kept <= _SCALARS
  # Each replica's gradients (computed in the step), as in TF 2.4.
  gradients = sum(int(np.prod(s)) * 4 for s in _SHAPES)
  assert held <= strategy.num_replicas_in_sync * gradients + _SCALARS


class FitTest(parameterized.TestCase):
  """`compile`/`fit` with TF 2.4's and TF 2.3's class keep within budget."""

  @parameterized.product(version=("v2", "v1"),
                         budget=(0, 60 * 1024, 200 * 1024))
  def test_fit_keeps_within_the_budget(self, version, budget):
    writes = []
    real = _gated_apply._Writes  # pylint: disable=protected-access

    def spy(*args):
      writes.append(real(*args))
      return writes[-1]

    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64),
                              keras.layers.Dense(64), keras.layers.Dense(64)])
    inner = keras.optimizers.Adam(0.01)
    opt = (loss_scale_optimizer.LossScaleOptimizer(inner) if version == "v2"
           else experimental_loss_scale_optimizer.LossScaleOptimizerV1(
               inner, "dynamic"))
    model.compile(optimizer=opt, loss="mse")
    x = np.ones((8, 64), np.float32)
    # Adam: three kernels (64x64) and biases with their slots, 146 KiB.
    state = 3 * (64 * 64 + 64) * 4 * 3
    with _config(overlap_budget=budget), mock.patch.object(
        _gated_apply, "_Writes", spy):
      model.fit(x, x, epochs=1, verbose=0)
    # No large tensor: kept as far as the budget allows, the rest waiting;
    # budget 0 is TF 2.4's conditional.
    self.assertEqual(bool(writes), budget > 0)
    for traced in writes:  # one per trace
      kept = sum(np.asarray(t).nbytes for t, _ in traced.originals.values())
      if state <= budget:
        self.assertEqual(kept, state)
      else:
        # The last kernel and every bias, with their slots: each variable
        # from the last backwards that still fits.
        self.assertEqual(kept, (64 * 64 + 3 * 64) * 4 * 3)


class SetOverlapMemoryBudgetTest(parameterized.TestCase):

  def tearDown(self):
    _gated_apply.set_overlap_memory_budget(None)
    super().tearDown()

  def test_set_overlap_memory_budget_sets_the_default_config(self):
    _gated_apply.set_overlap_memory_budget(3 * _MIB)
    self.assertEqual(_gated_apply.default_config(),
                     _gated_apply.StepConfig(overlap_budget=3 * _MIB))
    _gated_apply.set_overlap_memory_budget(None)
    self.assertEqual(_gated_apply.default_config(), _gated_apply.StepConfig())

  @parameterized.parameters(1.5, "1GB", True)
  def test_refuses_a_non_int(self, value):
    with self.assertRaisesRegex(TypeError, "num_bytes"):
      _gated_apply.set_overlap_memory_budget(value)

  def test_refuses_a_negative_budget(self):
    with self.assertRaisesRegex(ValueError, "num_bytes.*>= 0"):
      _gated_apply.set_overlap_memory_budget(-1)


if __name__ == "__main__":
  tf.test.main()
