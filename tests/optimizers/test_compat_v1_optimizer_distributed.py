"""MixedPrecisionLossScaleOptimizer under a 2-replica MirroredStrategy.

The recorded TF 2.3.4 run is replayed under the strategy in
test_v1_optimizer.py; these tests pin the distribution rules one by one:
gradients are summed across replicas exactly once, a "mean" loss reduction is
divided by the replica count as the v1 optimizer does, None gradients are
dropped on every replica, one replica's overflow skips the step on all, and
cross-replica calls are refused. Each runs eagerly (strategy.run), in a
tf.function, and in graph mode (tf.compat.v1 MirroredStrategy +
call_for_each_replica in a Session).
"""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat.optimizers.compat_v1_optimizer import (
    MixedPrecisionLossScaleOptimizer)
from tests.optimizers import test_compat_v1_optimizer as test_v1_optimizer

MODES = ("eager", "function", "graph")


def _wrapped(inner=None, **kwargs):
  kwargs.setdefault("initial_loss_scale", 8.0)
  return test_v1_optimizer._dynamic_opt(  # pylint: disable=protected-access
      inner or tf.compat.v1.train.GradientDescentOptimizer(1.0), **kwargs)


def run_steps(mode, make_state, replica_step, num_steps=1):
  """Runs `replica_step(state)` on both replicas `num_steps` times.

  Args:
    mode: "eager", "function" or "graph".
    make_state: Called in the strategy scope; returns a dict of variables and
      the optimizer ("opt").
    replica_step: Called per replica with the state dict and the step index
      tensor; builds one training step.
    num_steps: How many steps to run.

  Returns:
    `read()` results after each step: a dict of variable name -> list value,
    plus "loss_scale" and "good_steps".
  """

  def read_tensors(state):
    tensors = {k: v for k, v in state.items() if isinstance(v, tf.Variable)}
    tensors["loss_scale"] = state["opt"]._loss_scale()
    tensors["good_steps"] = state["opt"]._loss_scale._num_good_steps
    return tensors

  record = []
  if mode == "graph":
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      strategy = tf.compat.v1.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
      step_index = tf.compat.v1.placeholder(tf.int32, [])
      with strategy.scope():
        state = make_state()
        train_op = strategy.group(
            strategy.extended.call_for_each_replica(
                replica_step, args=(state, step_index)))
      tensors = read_tensors(state)
      sess.run(tf.compat.v1.global_variables_initializer())
      for i in range(num_steps):
        sess.run(train_op, {step_index: i})
        record.append(
            {k: np.asarray(v).tolist() for k, v in sess.run(tensors).items()})
    return record

  strategy = test_v1_optimizer._strategy()  # pylint: disable=protected-access
  with strategy.scope():
    state = make_state()

  def train(i):
    strategy.run(replica_step, args=(state, i))

  if mode == "function":
    train = tf.function(train)
  for i in range(num_steps):
    train(tf.constant(i))
    record.append({
        k: np.asarray(v.numpy()).tolist()
        for k, v in read_tensors(state).items()
    })
  return record


def _replica_id():
  return tf.distribute.get_replica_context().replica_id_in_sync_group


class DistributedTest(parameterized.TestCase):

  @parameterized.parameters(*MODES)
  def test_gradients_are_summed_once(self, mode):

    def make_state():
      return {"w": tf.Variable([1.0, 2.0]),
              "step": tf.Variable(0, dtype=tf.int64), "opt": _wrapped()}

    def replica_step(state, i):
      del i
      w = state["w"]
      # Replica r contributes (r + 1) * [1, 2]: the sum is 3 * [1, 2].
      factor = tf.cast(_replica_id(), tf.float32) + 1.0
      return state["opt"].minimize(
          lambda: tf.reduce_sum(w * [1.0, 2.0]) * factor,
          global_step=state["step"], var_list=[w])

    (after,) = run_steps(mode, make_state, replica_step)
    self.assertEqual(after["w"], [1.0 - 3.0, 2.0 - 6.0])
    self.assertEqual(after["step"], 1)
    self.assertEqual(after["good_steps"], 1)

  @parameterized.parameters(*MODES)
  def test_one_replica_overflowing_skips_the_step_everywhere(self, mode):

    def make_state():
      return {"w": tf.Variable([1.0, 2.0]), "b": tf.Variable(3.0),
              "step": tf.Variable(0, dtype=tf.int64),
              "opt": _wrapped(tf.compat.v1.train.MomentumOptimizer(1.0, 0.5))}

    def replica_step(state, i):
      w, b = state["w"], state["b"]
      # Step 1 overflows on replica 1 only, through b's gradient alone.
      bad = tf.logical_and(tf.equal(i, 1), tf.equal(_replica_id(), 1))
      gb = tf.where(bad, np.float32(np.inf), np.float32(1.0))
      return state["opt"].minimize(
          lambda: tf.reduce_sum(w) + b * gb, global_step=state["step"],
          var_list=[w, b])

    first, skipped, third = run_steps(mode, make_state, replica_step, 3)
    self.assertEqual(first["w"], [-1.0, 0.0])
    self.assertEqual(first["b"], 1.0)
    for key in ("w", "b", "step"):
      self.assertEqual(skipped[key], first[key], key)
    self.assertEqual(skipped["loss_scale"], first["loss_scale"] / 2)
    self.assertEqual(skipped["good_steps"], 0)
    # Momentum slots were untouched too: the third step continues from the
    # first step's accumulators (accum = 0.5 * 2 + 2).
    self.assertEqual(third["w"], [-4.0, -3.0])
    self.assertEqual(third["step"], 2)

  @parameterized.parameters(*MODES)
  def test_none_gradients_are_dropped_on_every_replica(self, mode):

    def make_state():
      return {"w": tf.Variable([1.0, 2.0]), "unused": tf.Variable(5.0),
              "opt": _wrapped()}

    def replica_step(state, i):
      del i
      w = state["w"]
      opt = state["opt"]
      grads_and_vars = opt.compute_gradients(
          lambda: tf.reduce_sum(w), var_list=[w, state["unused"]])
      assert grads_and_vars[1][0] is None
      return opt.apply_gradients(grads_and_vars)

    (after,) = run_steps(mode, make_state, replica_step)
    self.assertEqual(after["w"], [-1.0, 0.0])
    self.assertEqual(after["unused"], 5.0)

  @parameterized.parameters(*MODES)
  def test_mean_loss_reduction_divides_by_replica_count(self, mode):
    """With a mean-reduced tf.compat.v1.losses loss (Estimator's case), the
    v1 optimizer divides the loss by the replica count; wrapped, the same
    happens and the loss scale still cancels out exactly."""

    def make_state():
      return {"w": tf.Variable([1.0, 2.0]), "opt": _wrapped()}

    def replica_step(state):
      w = state["w"]

      def loss():
        # Weighted mean of |w| with weights [2, 4]: gradient [1, 2].
        return tf.compat.v1.losses.absolute_difference(
            tf.zeros([2]), w, weights=[2.0, 4.0])

      return state["opt"].minimize(loss, var_list=[w])

    # `_scale_loss_for_estimator_enabled` is the (private) switch Estimator
    # flips to get this behaviour; nothing public exposes it.
    if mode == "graph":
      with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        strategy = tf.compat.v1.distribute.MirroredStrategy(
            ["/cpu:0", "/cpu:1"])
        with strategy.scope():
          state = make_state()
          with strategy._scale_loss_for_estimator_enabled():  # pylint: disable=protected-access
            train_op = strategy.group(
                strategy.extended.call_for_each_replica(
                    replica_step, args=(state,)))
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(train_op)
        w = sess.run(state["w"]).tolist()
    else:
      strategy = test_v1_optimizer._strategy()  # pylint: disable=protected-access
      with strategy.scope():
        state = make_state()

      def train():
        with strategy._scale_loss_for_estimator_enabled():  # pylint: disable=protected-access
          strategy.run(replica_step, args=(state,))

      if mode == "function":
        train = tf.function(train)
      train()
      w = state["w"].numpy().tolist()
    # Each replica's gradient [1, 2] is halved and the halves summed once;
    # without the division w would be [-1, -2].
    self.assertEqual(w, [0.0, 0.0])

  def test_sum_reduction_is_not_divided(self):
    strategy = test_v1_optimizer._strategy()  # pylint: disable=protected-access
    with strategy.scope():
      w = tf.Variable([1.0, 2.0])
      opt = _wrapped()

    def replica_step():
      loss = lambda: tf.compat.v1.losses.absolute_difference(  # pylint: disable=g-long-lambda
          tf.zeros([2]), w, reduction=tf.compat.v1.losses.Reduction.SUM)
      opt.minimize(loss, var_list=[w])

    with strategy._scale_loss_for_estimator_enabled():  # pylint: disable=protected-access
      strategy.run(replica_step)
    self.assertEqual(w.numpy().tolist(), [-1.0, 0.0])

  def test_fixed_loss_scale_under_strategy(self):
    strategy = test_v1_optimizer._strategy()  # pylint: disable=protected-access
    with strategy.scope():
      w = tf.Variable([1.0, 2.0])
      step = tf.Variable(0, dtype=tf.int64)
      opt = MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(1.0), 32)

    def replica_step():
      opt.minimize(lambda: tf.reduce_sum(w * [0.5, 0.25]), global_step=step,
                   var_list=[w])

    strategy.run(replica_step)
    self.assertEqual(w.numpy().tolist(), [0.0, 1.5])
    self.assertEqual(int(step.numpy()), 1)

  @parameterized.parameters("dynamic", 16)
  def test_cross_replica_call_is_refused(self, loss_scale):
    strategy = test_v1_optimizer._strategy()  # pylint: disable=protected-access
    with strategy.scope():
      w = tf.Variable(1.0)
      opt = MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(1.0), loss_scale)
      with self.assertRaisesRegex(
          ValueError, r"must be called in a replica context"):
        opt.apply_gradients([(tf.constant(1.0), w)])
    self.assertEqual(float(w.numpy()), 1.0)
