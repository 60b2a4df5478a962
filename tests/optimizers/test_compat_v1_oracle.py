"""TF 2.21's own `tf.compat.v1` loss-scale optimizer as the oracle for ours.

Generated TF 1.x-style training graphs are built twice in one process, once
with TF's still-shipped `tf.compat.v1.mixed_precision.
MixedPrecisionLossScaleOptimizer` and its loss scales, once with this
package's class and loss scales. The two graphs must be op for op the same
(names, types, inputs, control edges, in creation order): the executor
orders what a job leaves unordered (its read of `global_step` for the
learning rate against its own increment) from that structure, so this is
what makes a real job end with TF's weights (docs/graph_mode.md). Then both
run in sessions and every variable (weights, slots, loss scale, counter,
`global_step`) must be bit-identical after every step.

Cases combine, from a seeded generator: gradients from `tf.gradients`,
`compute_gradients` or `minimize`; fixed or dynamic scales; finite, inf and
NaN steps; learning rates read from `global_step` before or after the loss,
or in the apply; weight decay under `control_dependencies`; the job's own
increment around or grouped with the train op, and `global_step` passed to
the optimizer; 1, 2 or 4 inter-op threads; one replica or two
(`MirroredStrategy` over two logical CPUs); TF2 graphs and TF1-style ones
(control flow v1, reference variables).
"""

import dataclasses
import random

import numpy as np
import pytest
import tensorflow as tf

from tf_mixed_precision_compat import loss_scale as ours_loss_scale
from tf_mixed_precision_compat.optimizers.compat_v1_optimizer import (
    MixedPrecisionLossScaleOptimizer)

_TF_V1 = getattr(tf.compat.v1, "mixed_precision", None)
pytestmark = pytest.mark.skipif(
    not hasattr(_TF_V1, "MixedPrecisionLossScaleOptimizer"),
    reason="this TensorFlow no longer ships its own v1 optimizer")

FEATURES = {
    "grads": ("tf_gradients", "compute_gradients", "minimize"),
    "scale": ("fixed", "dynamic"),
    "overflow": ("none", "inf", "nan"),
    "lr": ("warmup_first", "warmup_after_loss", "in_apply", "constant"),
    "inner": ("adamw", "momentum"),
    "increment": ("around_apply", "grouped", "none"),
    "pass_global_step": (False, True),
    "clip": (False, True),
    "threads": (1, 2, 4),
    "replicas": (1, 2),
    "tf1_graph": (False, True),
}
NUM_CASES = 48
NUM_STEPS = 6
# Runs of each graph, at most, when a case's outcome depends on thread timing.
_TIMING_RUNS = 16


@dataclasses.dataclass(frozen=True)
class Case:
  """One generated job; fields take the values listed in `FEATURES`."""
  grads: str
  scale: str
  overflow: str
  lr: str
  inner: str
  increment: str
  pass_global_step: bool
  clip: bool
  threads: int
  replicas: int
  tf1_graph: bool
  overflow_step: int

  @property
  def timing_dependent(self):
    """Whether the job leaves its own ops unordered against each other.

    Its increment around the apply orders only ops made inside; the
    learning rate's read made before races with it, and a grouped increment
    races with every read. A decay outside any conditional (a fixed scale
    applies unconditionally) races with the forward pass's reads of the
    variable it decays.
    """
    if self.inner == "adamw" and self.scale == "fixed":
      return True
    if self.lr == "constant" or self.increment == "none":
      return False
    return not (self.increment == "around_apply" and self.lr == "in_apply")

  def __str__(self):
    return "-".join(
        f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self))


def _generate(seed=39, count=NUM_CASES):
  """Cases cycling through every feature value, combined at random."""
  rng = random.Random(seed)
  orders = {name: rng.sample(values, len(values))
            for name, values in FEATURES.items()}
  cases = []
  for i in range(count):
    chosen = {name: order[(i + rng.randrange(2)) % len(order)]
              if i >= len(order) else order[i]
              for name, order in orders.items()}
    cases.append(Case(overflow_step=rng.randrange(1, NUM_STEPS - 1), **chosen))
  return cases


CASES = _generate()


def test_generated_cases_cover_every_feature_value():
  for name, values in FEATURES.items():
    assert {getattr(c, name) for c in CASES} == set(values), name
  racing = [c for c in CASES if c.timing_dependent]
  assert {c.threads for c in racing} == set(FEATURES["threads"])
  assert any(c.replicas == 2 and c.scale == "dynamic" and
             c.overflow != "none" for c in CASES)


class AdamWithDecay(tf.compat.v1.train.AdamOptimizer):
  """Adam whose update waits for a decoupled decay of the variable."""

  def __init__(self, learning_rate, decay=0.01):
    super().__init__(learning_rate)
    self._decay_rate = decay

  def _decayed(self, var):
    lr = tf.convert_to_tensor(self._call_if_callable(self._lr))
    return tf.compat.v1.assign_sub(var, self._decay_rate * lr * var)

  def _apply_dense(self, grad, var):
    with tf.control_dependencies([self._decayed(var)]):
      return super()._apply_dense(grad, var)

  def _resource_apply_dense(self, grad, var):
    with tf.control_dependencies([self._decayed(var)]):
      return super()._resource_apply_dense(grad, var)


def _learning_rate(global_step):
  # Linear warm-up over 3 steps, then linear decay.
  step = tf.cast(global_step, tf.float32)
  warm = tf.cast(step < 3., tf.float32)
  decayed = tf.compat.v1.train.polynomial_decay(0.1, global_step, 20, 0.)
  return warm * 0.1 * step / 3. + (1. - warm) * decayed


def _loss_scale(case, family):
  if case.scale == "fixed":
    return family.FixedLossScale(64.)
  return family.DynamicLossScale(initial_loss_scale=2.**10,
                                 increment_period=2, multiplier=2.)


def _wrap(case, inner, implementation):
  if implementation == "tf":
    return _TF_V1.MixedPrecisionLossScaleOptimizer(
        inner, _loss_scale(case, _TF_V1))
  return MixedPrecisionLossScaleOptimizer(
      inner, _loss_scale(case, ours_loss_scale))


def _build(case, implementation):
  """The job's graph: (graph, strategy, train op, factor placeholder)."""
  graph = tf.Graph()
  with graph.as_default():
    strategy = (tf.compat.v1.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
                if case.replicas == 2 else tf.distribute.get_strategy())
    factor = tf.compat.v1.placeholder(tf.float32, [], name="factor")
    with strategy.scope():
      global_step = tf.compat.v1.train.get_or_create_global_step()
      kernel = tf.compat.v1.get_variable(
          "dense/kernel", initializer=np.array(
              [[0.3, -0.2], [0.1, 0.4], [0.5, -0.6]], np.float32))
      bias = tf.compat.v1.get_variable(
          "dense/bias", initializer=np.array([0.1, -0.1], np.float32))
      # Read before the loss is built, once for all replicas.
      first_lr = (_learning_rate(global_step) if case.lr == "warmup_first"
                  else None)

      def replica_step():
        lr = first_lr
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        # Only the first replica overflows: its verdict must skip all.
        step_factor = tf.where(tf.equal(replica, 0), factor, 1.)
        x = tf.constant([[1., 2., 3.], [0.5, -1., 2.]]) * (
            1. + tf.cast(replica, tf.float32))
        loss = tf.reduce_sum(
            tf.square(tf.matmul(x, kernel) + bias - 1.)) * step_factor
        if case.lr == "warmup_after_loss":
          lr = _learning_rate(global_step)
        elif case.lr == "in_apply":
          lr = lambda: _learning_rate(global_step)
        elif case.lr == "constant":
          lr = 0.05
        inner = (AdamWithDecay(lr) if case.inner == "adamw" else
                 tf.compat.v1.train.MomentumOptimizer(lr, 0.9))
        opt = _wrap(case, inner, implementation)
        var_list = [kernel, bias]
        passed = global_step if case.pass_global_step else None

        def train():
          if case.grads == "minimize":
            return opt.minimize(loss, global_step=passed, var_list=var_list)
          if case.grads == "tf_gradients":
            grads = tf.gradients(loss, var_list)
          else:
            grads = [g for g, _ in opt.compute_gradients(loss, var_list)]
          if case.clip:
            grads, _ = tf.clip_by_global_norm(grads, 1.)
          return opt.apply_gradients(zip(grads, var_list), global_step=passed)

        if case.increment == "around_apply":
          with tf.control_dependencies([global_step.assign_add(1)]):
            return train()
        train_op = train()
        if case.increment == "grouped":
          return tf.group(train_op, global_step.assign_add(1))
        return train_op

      if case.replicas == 2:
        train_op = strategy.group(
            strategy.extended.call_for_each_replica(replica_step))
      else:
        train_op = replica_step()
  return graph, strategy, train_op, factor


def _structure(graph):
  # Control inputs as a set: TF adds some from Python sets (a mirrored
  # reduction's), so their order differs between two builds of TF's graph.
  return [(op.name, op.type, tuple(t.name for t in op.inputs),
           tuple(sorted(c.name for c in op.control_inputs)))
          for op in graph.get_operations()]


def _assert_same_structure(tf_graph, our_graph):
  theirs, ours = _structure(tf_graph), _structure(our_graph)
  for index, (a, b) in enumerate(zip(theirs, ours)):
    assert a == b, f"op {index} differs: TF's {a} vs ours {b}"
  assert len(theirs) == len(ours)


def _factors(case):
  bad = {"none": 1., "inf": float("inf"), "nan": float("nan")}[case.overflow]
  return [bad if i == case.overflow_step else 1. for i in range(NUM_STEPS)]


def _run(case, built):
  """Runs the job; returns, per step, {variable: bytes of its values}."""
  graph, strategy, train_op, factor = built
  # A session's own config must ask for the second CPU (conftest's logical
  # devices configure the eager context only).
  config = tf.compat.v1.ConfigProto(
      device_count={"CPU": 2}, inter_op_parallelism_threads=case.threads,
      intra_op_parallelism_threads=1, use_per_session_threads=True)
  with graph.as_default():
    fetches = {}
    for variable in tf.compat.v1.global_variables():
      for i, local in enumerate(strategy.experimental_local_results(variable)):
        fetches[f"{variable.name}[{i}]"] = tf.convert_to_tensor(local)
    init = tf.compat.v1.global_variables_initializer()
  steps = []
  with tf.compat.v1.Session(graph=graph, config=config) as sess:
    sess.run(init)
    for value in _factors(case):
      sess.run(train_op, {factor: value})
      steps.append({name: _bits(v) for name, v in sess.run(fetches).items()})
  return steps


def _bits(value):
  # Every NaN as one NaN: which operand's payload a NaN carries is not
  # something TF orders either.
  value = np.asarray(value)
  if value.dtype.kind == "f":
    value = np.where(np.isnan(value), np.nan, value).astype(value.dtype)
  return value.tobytes()


@pytest.fixture
def tf1_graph_behaviour(request):
  """Control flow v1 and reference variables while the case builds."""
  if not request.param:
    yield
    return
  tf.compat.v1.disable_control_flow_v2()
  tf.compat.v1.disable_resource_variables()
  try:
    yield
  finally:
    tf.compat.v1.enable_resource_variables()
    tf.compat.v1.enable_control_flow_v2()


def _first_difference(expected, actual):
  for step, (want, got) in enumerate(zip(expected, actual)):
    assert sorted(want) == sorted(got)
    for name in want:
      if want[name] != got[name]:
        return f"step {step}: {name}"
  return None


# The shape of the public TF 1.x fine-tuners of issue 39: an AdamW-like
# optimizer, a warm-up learning rate read from global_step, tf.gradients,
# global-norm clipping, the apply built under the job's own increment.
REAL_JOB_LIKE = [
    Case(grads="tf_gradients", scale="dynamic", overflow="inf",
         lr="warmup_after_loss", inner="adamw", increment="around_apply",
         pass_global_step=False, clip=True, threads=threads, replicas=1,
         tf1_graph=tf1_graph, overflow_step=2)
    for threads in (1, 2) for tf1_graph in (False, True)
]


@pytest.mark.parametrize(
    "case,tf1_graph_behaviour", [(c, c.tf1_graph) for c in REAL_JOB_LIKE],
    ids=[f"threads={c.threads}-tf1_graph={c.tf1_graph}"
         for c in REAL_JOB_LIKE], indirect=["tf1_graph_behaviour"])
def test_real_job_like_graph_is_tf_own_graph(case, tf1_graph_behaviour):
  del tf1_graph_behaviour
  _check(case)


@pytest.mark.parametrize(
    "case,tf1_graph_behaviour", [(c, c.tf1_graph) for c in CASES],
    ids=[str(c) for c in CASES], indirect=["tf1_graph_behaviour"])
def test_ours_builds_and_runs_tf_own_graph(case, tf1_graph_behaviour):
  del tf1_graph_behaviour
  _check(case)


def _check(case):
  """Same graph as TF's own class; same values, or same race outcomes."""
  theirs = _build(case, "tf")
  ours = _build(case, "ours")
  _assert_same_structure(theirs[0], ours[0])
  expected, actual = _run(case, theirs), _run(case, ours)
  if case.overflow != "none" and case.scale == "dynamic":
    # The overflowing step was skipped: the weights stayed, the scale fell.
    before, after = actual[case.overflow_step - 1:case.overflow_step + 1]
    for name in ("dense/bias:0[0]", "dense/kernel:0[0]"):
      assert before[name] == after[name], name
    assert before["current_loss_scale:0[0]"] != after[
        "current_loss_scale:0[0]"]
  if not case.timing_dependent:
    difference = _first_difference(expected, actual)
    assert difference is None, f"differs from TF's own class at {difference}"
    return
  # The executor orders the job's race by timing (which ops it runs inline
  # is measured, so even with one thread), for TF's graph as for ours, and
  # each ends in one of a few ways. Both are run
  # until one of ours is one of TF's: a graph that ordered the race other
  # than TF's, run after run, never gets there.
  theirs_seen, ours_seen = {_key(expected)}, {_key(actual)}
  for _ in range(_TIMING_RUNS):
    if theirs_seen & ours_seen:
      return
    theirs_seen.add(_key(_run(case, theirs)))
    ours_seen.add(_key(_run(case, ours)))
  assert theirs_seen & ours_seen, (
      f"none of {len(ours_seen)} outcomes of ours is one of TF's "
      f"{len(theirs_seen)}")


def _key(steps):
  return tuple(tuple(sorted(step.items())) for step in steps)
