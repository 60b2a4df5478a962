"""enable/disable_mixed_precision_graph_rewrite: what a CPU can observe.

The rewrite itself only changes ops on NVIDIA GPUs (compute capability 7.0+);
here we check the grappler option it sets, the optimizer wrapping, the
refusals and TF's messages, and that training through the returned optimizer
runs with the option on (eagerly, in tf.function, in a Session and under the
2-replica MirroredStrategy).
"""

from absl.testing import parameterized
import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat import endpoints
from tf_mixed_precision_compat import graph_rewrite
from tf_mixed_precision_compat.optimizers.compat_v1_optimizer import (
    MixedPrecisionLossScaleOptimizer)
from tests.optimizers import test_compat_v1_optimizer as test_v1_optimizer
from tests import testing

ENABLES = {
    "v1": graph_rewrite.enable_mixed_precision_graph_rewrite_v1,
    "v2": graph_rewrite.enable_mixed_precision_graph_rewrite,
}
DISABLES = {
    "v1": graph_rewrite.disable_mixed_precision_graph_rewrite_v1,
    "v2": graph_rewrite.disable_mixed_precision_graph_rewrite,
}


def _option():
  return tf.config.optimizer.get_experimental_options().get(
      "auto_mixed_precision")


@pytest.fixture(autouse=True)
def clean_state():
  """Leaves the option, the module flag and the Keras policy as found."""
  before = _option()
  policy = keras.config.dtype_policy()
  yield
  tf.config.optimizer.set_experimental_options(
      {"auto_mixed_precision": bool(before)})
  _private_api.set_graph_rewrite_enabled(False)
  keras.config.set_dtype_policy(policy)


@pytest.mark.parametrize("flavour", ["v1", "v2"])
def test_enable_wraps_v1_optimizer_and_sets_option(flavour):
  inner = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9)
  assert not graph_rewrite.rewrite_is_enabled()
  opt = ENABLES[flavour](inner)
  assert isinstance(opt, MixedPrecisionLossScaleOptimizer)
  assert opt._optimizer is inner
  assert isinstance(opt._loss_scale, mp.DynamicLossScale)
  assert float(opt._loss_scale()) == 2.**15
  assert _option() is True
  assert graph_rewrite.rewrite_is_enabled()
  DISABLES[flavour]()
  assert _option() is False
  assert not graph_rewrite.rewrite_is_enabled()


@pytest.mark.parametrize("loss_scale, expected", [
    (128, mp.FixedLossScale),
    (mp.DynamicLossScale(initial_loss_scale=4), mp.DynamicLossScale),
    (tf.compat.v1.mixed_precision.FixedLossScale(8),
     tf.compat.v1.mixed_precision.FixedLossScale),
])
def test_loss_scale_is_passed_on(loss_scale, expected):
  opt = graph_rewrite.enable_mixed_precision_graph_rewrite_v1(
      tf.compat.v1.train.GradientDescentOptimizer(1.0), loss_scale)
  assert isinstance(opt._loss_scale, expected)
  if not isinstance(loss_scale, (int, float)):
    assert opt._loss_scale is loss_scale


def test_session_created_afterwards_gets_the_rewrite_option():
  graph_rewrite.enable_mixed_precision_graph_rewrite_v1(
      tf.compat.v1.train.GradientDescentOptimizer(1.0))
  # Sessions without an explicit ConfigProto take the context's config.
  with tf.Graph().as_default():
    with tf.compat.v1.Session() as sess:
      on = sess._config.graph_options.rewrite_options.auto_mixed_precision  # pylint: disable=protected-access
  assert on == 1  # RewriterConfig.ON


@pytest.mark.parametrize("mode", ["eager", "function", "graph", "mirrored"])
def test_training_with_the_returned_optimizer(mode):
  """With the option on, a dynamic step and a skipped step behave normally
  (float32 on CPU: the rewrite leaves CPU ops alone)."""
  grads = [[1.0, 2.0], [np.inf, 0.0], [1.0, 1.0]]
  make = lambda: graph_rewrite.enable_mixed_precision_graph_rewrite_v1(  # pylint: disable=g-long-lambda
      tf.compat.v1.train.GradientDescentOptimizer(0.5),
      mp.DynamicLossScale(initial_loss_scale=4, increment_period=1))
  if mode == "graph":
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      g = tf.compat.v1.placeholder(tf.float32, [2])
      w = tf.compat.v1.get_variable("w", initializer=[1.0, 2.0])
      opt = make()
      train = opt.minimize(tf.reduce_sum(w * g))
      sess.run(tf.compat.v1.global_variables_initializer())
      for grad in grads:
        sess.run(train, {g: grad})
      w_val, scale = sess.run([w, opt._loss_scale()])
  else:
    strategy = (test_v1_optimizer._strategy() if mode == "mirrored"  # pylint: disable=protected-access
                else tf.distribute.get_strategy())
    with strategy.scope():
      w = tf.Variable([1.0, 2.0])
      opt = make()

    def step(grad):
      # Each of the two replicas contributes half under the strategy.
      share = grad / strategy.num_replicas_in_sync
      opt.minimize(lambda: tf.reduce_sum(w * share), var_list=[w])

    def train(grad):
      strategy.run(step, args=(grad,))

    if mode == "function":
      train = tf.function(train)
    for grad in grads:
      train(tf.constant(grad))
    w_val, scale = w.numpy(), opt._loss_scale().numpy()
  assert w_val.tolist() == [0.0, 0.5]
  # 4 -> 8 (finite) -> 4 (overflow, step skipped) -> 8 (finite).
  assert float(scale) == 8.0


def test_already_wrapped_is_refused_and_nothing_changes():
  wrapped = MixedPrecisionLossScaleOptimizer(
      tf.compat.v1.train.GradientDescentOptimizer(1.0), "dynamic")
  with pytest.raises(ValueError) as info:
    graph_rewrite.enable_mixed_precision_graph_rewrite_v1(wrapped)
  assert str(info.value) == (
      '"opt" must not already be an instance of a '
      "MixedPrecisionLossScaleOptimizer. `enable_mixed_precision_graph_rewrite`"
      " will automatically wrap the optimizer with a "
      "MixedPrecisionLossScaleOptimizer.")
  assert not _option()
  assert not graph_rewrite.rewrite_is_enabled()


def test_keras_loss_scale_optimizer_is_refused():
  wrapped = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD())
  with pytest.raises(ValueError, match='"opt" must not already be an instance '
                     "of a LossScaleOptimizer"):
    graph_rewrite.enable_mixed_precision_graph_rewrite(wrapped)
  assert not _option()


@pytest.mark.parametrize("flavour, message", [
    ("v1", '"opt" must be an instance of a tf.train.Optimizer or a '
     "tf.keras.optimizers.Optimizer, but got: 3"),
    ("v2", '"opt" must be an instance of a tf.keras.optimizers.Optimizer, but '
     "got: 3"),
])
def test_non_optimizer_messages(flavour, message):
  with pytest.raises(ValueError) as info:
    ENABLES[flavour](3)
  assert str(info.value) == message
  assert not _option()


def test_messages_equal_tf_compat_v1():
  theirs = tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite
  for bad in (3, MixedPrecisionLossScaleOptimizer(
      tf.compat.v1.train.GradientDescentOptimizer(1.0), 2)):
    with pytest.raises(ValueError) as ours_info:
      graph_rewrite.enable_mixed_precision_graph_rewrite_v1(bad)
    their_bad = bad
    if isinstance(bad, MixedPrecisionLossScaleOptimizer):
      their_bad = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(1.0), 2)
    with pytest.raises(ValueError) as their_info:
      theirs(their_bad)
    assert str(ours_info.value) == str(their_info.value)


def test_bad_loss_scale_leaves_the_option_off():
  with pytest.raises(ValueError, match="Could not interpret loss scale"):
    graph_rewrite.enable_mixed_precision_graph_rewrite_v1(
        tf.compat.v1.train.GradientDescentOptimizer(1.0), "always")
  assert not _option()
  assert not graph_rewrite.rewrite_is_enabled()


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("flavour", ["v1", "v2"])
def test_mixed_keras_policy_is_refused(policy, flavour):
  keras.config.set_dtype_policy(policy)
  with pytest.raises(ValueError) as info:
    ENABLES[flavour](tf.compat.v1.train.GradientDescentOptimizer(1.0))
  assert str(info.value).startswith(
      "The mixed precision graph rewrite cannot be enabled, because the "
      "global Keras dtype Policy has been set to a mixed precision policy.")
  assert "tf.keras.mixed_precision.experimental.set_policy()" in str(
      info.value)
  assert not _option()
  keras.config.set_dtype_policy("float32")
  ENABLES[flavour](tf.compat.v1.train.GradientDescentOptimizer(1.0))
  assert _option()


def test_our_mixed_policy_is_refused_too():
  from tf_mixed_precision_compat import policy as mp_policy  # pylint: disable=g-import-not-at-top
  mp_policy.set_global_policy("mixed_float16")
  with pytest.raises(ValueError, match="global Keras dtype Policy"):
    graph_rewrite.enable_mixed_precision_graph_rewrite_v1(
        tf.compat.v1.train.GradientDescentOptimizer(1.0))


def test_keras_optimizer_is_wrapped_in_keras_loss_scale_optimizer():
  from tf_mixed_precision_compat import LossScaleOptimizerV1  # pylint: disable=g-import-not-at-top
  inner = keras.optimizers.SGD(0.1)
  opt = graph_rewrite.enable_mixed_precision_graph_rewrite(inner, 64)
  assert isinstance(opt, LossScaleOptimizerV1)
  assert opt.inner_optimizer is inner
  assert not opt.dynamic
  assert float(opt.loss_scale) == 64.0
  assert _option()
  dynamic = graph_rewrite.enable_mixed_precision_graph_rewrite_v1(
      keras.optimizers.Adam())
  assert isinstance(dynamic, LossScaleOptimizerV1)
  assert dynamic.dynamic


def test_disable_when_not_enabled_warns(tf_log):
  graph_rewrite.disable_mixed_precision_graph_rewrite_v1()
  # After the deprecation warning of the v2 function TF 2.4's v1 one called.
  assert tf_log[1:] == [
      "disable_mixed_precision_graph_rewrite() called when mixed precision is "
      "already disabled."
  ]
  assert _option() is False


def test_v2_flavours_log_tf24_deprecation_once(tf_log):
  graph_rewrite.enable_mixed_precision_graph_rewrite(
      tf.compat.v1.train.GradientDescentOptimizer(1.0))
  graph_rewrite.enable_mixed_precision_graph_rewrite(
      tf.compat.v1.train.GradientDescentOptimizer(1.0))
  graph_rewrite.disable_mixed_precision_graph_rewrite()
  # (The default DynamicLossScale logs its own TF 2.4 deprecation too.)
  tf_log = [m for m in tf_log if "_graph_rewrite (from" in m]
  assert len(tf_log) == 2, tf_log
  assert "enable_mixed_precision_graph_rewrite (from " in tf_log[0]
  assert "is deprecated and will be removed after 2020-11-30" in tf_log[0]
  assert ("`tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite`"
          " can be used" in tf_log[0])
  assert "disable_mixed_precision_graph_rewrite (from " in tf_log[1]
  assert tf_log[0].startswith("From " + __file__)


def test_v1_enable_logs_nothing_v1_disable_the_v2_deprecation(tf_log):
  # As TF 2.4.4: its v1 disable called the deprecated v2 function.
  graph_rewrite.enable_mixed_precision_graph_rewrite_v1(
      tf.compat.v1.train.GradientDescentOptimizer(1.0), 4)
  assert not [m for m in tf_log if "_graph_rewrite (from" in m]
  assert tf_log  # The FixedLossScale's own deprecation was captured.
  graph_rewrite.disable_mixed_precision_graph_rewrite_v1()
  graph_rewrite.disable_mixed_precision_graph_rewrite_v1()
  logged = [m for m in tf_log if "_graph_rewrite (from" in m]
  assert len(logged) == 1, logged
  assert "disable_mixed_precision_graph_rewrite (from " in logged[0]
  assert "is deprecated and will be removed after 2020-11-30" in logged[0]
  assert ("`tf.compat.v1.mixed_precision.disable_mixed_precision_graph_rewrite`"
          " can be used" in logged[0])


class EndpointTest(parameterized.TestCase):

  @parameterized.parameters(
      ("enable_mixed_precision_graph_rewrite",
       graph_rewrite.enable_mixed_precision_graph_rewrite_v1,
       graph_rewrite.enable_mixed_precision_graph_rewrite),
      ("disable_mixed_precision_graph_rewrite",
       graph_rewrite.disable_mixed_precision_graph_rewrite_v1,
       graph_rewrite.disable_mixed_precision_graph_rewrite))
  def test_paths_as_tf24(self, name, v1_symbol, v2_symbol):
    v2 = endpoints.lookup("v2", f"train.experimental.{name}")
    self.assertIs(v2.symbol, v2_symbol)
    self.assertEqual(v2.v1, ())
    self.assertEqual(v2.deprecated, ())
    self.assertIn("2020-11-30", v2.warning)
    for path in (f"mixed_precision.{name}", f"train.experimental.{name}"):
      self.assertIs(endpoints.lookup("v1", path).symbol, v1_symbol)
    v1 = endpoints.lookup("v1", f"mixed_precision.{name}")
    self.assertEqual(v1.v2, ())
    self.assertEqual(v1.deprecated, (f"train.experimental.{name}",))

  def test_namespaces(self):
    self.assertIs(
        mp.v1.train.experimental.enable_mixed_precision_graph_rewrite,
        graph_rewrite.enable_mixed_precision_graph_rewrite_v1)
    self.assertIs(
        mp.v2.train.experimental.enable_mixed_precision_graph_rewrite,
        graph_rewrite.enable_mixed_precision_graph_rewrite)
    self.assertIs(mp.v1.mixed_precision.MixedPrecisionLossScaleOptimizer,
                  MixedPrecisionLossScaleOptimizer)

  def test_argspecs_match_tf(self):
    theirs = tf.compat.v1.mixed_precision
    self.assertEqual(
        testing.argspec(
            graph_rewrite.enable_mixed_precision_graph_rewrite_v1),
        testing.argspec(theirs.enable_mixed_precision_graph_rewrite))
    self.assertEqual(
        testing.argspec(graph_rewrite.enable_mixed_precision_graph_rewrite),
        testing.argspec(theirs.enable_mixed_precision_graph_rewrite))
    self.assertEqual(
        testing.argspec(graph_rewrite.disable_mixed_precision_graph_rewrite),
        testing.argspec(theirs.disable_mixed_precision_graph_rewrite))
