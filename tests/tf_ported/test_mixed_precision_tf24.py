"""TF 2.4's graph-rewrite unit tests (tf.train API), ported to the package.

Original: tensorflow/python/training/experimental/mixed_precision_test.py
(TF r2.4), which tested `enable_mixed_precision_graph_rewrite_v1` and
`disable_mixed_precision_graph_rewrite_v1` (`tf.compat.v1.mixed_precision.*`,
reached here through `tf.compat.v1` after `install()`) with
`tf.compat.v1.train` optimizers. Inputs, expected values and assertions are
the original's; cases TF ran in a graph and eagerly run in a tf.compat.v1
graph + Session and eagerly. TF mocked `tf_logging.warn`; here the TF
logger's messages are captured. (Later TensorFlow versions of this file add
`register_loss_scale_wrapper` cases; TF 2.4 had no such API, so they are not
ported.)

Skipped, with reasons:
- test_grappler_pass_enabled: needs a GPU: Grappler's auto_mixed_precision
  pass only converts ops to float16 on NVIDIA GPUs, so on CPU nothing
  overflows (TF 2.4 ran it GPU-only too).
"""

import pytest
import tensorflow as tf

from tests import testing
from tests.tf_ported import harness
from tests.tf_ported.rewrite_fixtures import rewrite_state  # noqa: F401
from tf_mixed_precision_compat import _private_api

MODES = harness.MODES


def _enable(*args):
  return tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(
      *args)


def _disable():
  tf.compat.v1.mixed_precision.disable_mixed_precision_graph_rewrite()


def _option_on():
  return tf.config.optimizer.get_experimental_options().get(
      "auto_mixed_precision", False)


def _sgd(learning_rate):
  return tf.compat.v1.train.GradientDescentOptimizer(learning_rate)


@pytest.mark.parametrize("mode", MODES)
def test_wrap_optimizer(mode):
  with harness.mode_context(mode) as evaluate:
    opt = _enable(_sgd(1.0), 123.)
    assert isinstance(
        opt, tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer)
    assert evaluate(opt._loss_scale()) == 123.


@pytest.mark.parametrize("mode", MODES)
def test_optimizer_errors(mode):
  with harness.mode_context(mode):
    with pytest.raises(ValueError, match='"opt" must be an instance of a '
                       "tf.train.Optimizer or a tf.keras.optimizers.Optimizer, "
                       "but got"):
      _enable(1)
    assert not _option_on()

    opt = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(
        _sgd(1.0), "dynamic")
    with pytest.raises(ValueError, match='"opt" must not already be an '
                       "instance of a MixedPrecisionLossScaleOptimizer."):
      _enable(opt)
    assert not _option_on()


@pytest.mark.skipif(not tf.config.list_physical_devices("GPU"),
                    reason="needs a GPU: Grappler's auto_mixed_precision "
                    "only converts ops to float16 on NVIDIA GPUs")
@pytest.mark.parametrize("mode", MODES)
def test_grappler_pass_enabled(mode):
  _enable(_sgd(1.0), 123.)

  def overflow_in_float16(var):
    out = var * 2**10
    out = tf.matmul(out, out)
    return tf.reshape(out, ())

  if mode == "eager":
    var = tf.Variable([[1.0]])
    f = tf.function(lambda: overflow_in_float16(var))
    assert f().numpy() == float("inf")
    # Outside a tf.function Grappler does not run.
    assert overflow_in_float16(var).numpy() == pytest.approx(2**20)
    _disable()
    assert f().numpy() == 2**20
    return

  with tf.Graph().as_default():
    var = tf.Variable([[1.0]])
    out = overflow_in_float16(var)
    with tf.compat.v1.Session() as sess:
      sess.run(var.initializer)
      assert sess.run(out) == float("inf")
    # A Session with its own ConfigProto gets the rewrite too.
    with tf.compat.v1.Session(config=tf.compat.v1.ConfigProto()) as sess:
      sess.run(var.initializer)
      assert sess.run(out) == float("inf")
    _disable()
    with tf.compat.v1.Session() as sess:
      sess.run(var.initializer)
      assert sess.run(out) == pytest.approx(2**20)


def test_warn_if_session_already_exists():
  # Sessions of earlier tests must not count.
  _private_api.set_non_mixed_precision_session_created(False)
  with tf.compat.v1.Session(), testing.capture_tf_log() as messages:
    _enable(_sgd(1.0))
  assert ("You already have existing Sessions that do not use mixed "
          "precision. enable_mixed_precision_graph_rewrite() will not affect "
          "these Sessions.") in messages


def test_do_not_warn_if_session_does_not_already_exist():
  _private_api.set_non_mixed_precision_session_created(False)
  with testing.capture_tf_log() as messages:
    _enable(_sgd(1.0))
    # Created after enabling the rewrite, so it uses it.
    with tf.compat.v1.Session():
      pass
  for message in messages:
    assert ("You already have existing Sessions that do not use mixed "
            "precision") not in message
