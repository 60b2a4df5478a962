"""TF 2.4's Keras graph-rewrite unit tests, ported to the package.

Original: tensorflow/python/keras/mixed_precision/
mixed_precision_graph_rewrite_test.py (TF r2.4), which tested
`enable_mixed_precision_graph_rewrite_v1` (`tf.compat.v1.mixed_precision.*`
after `install()`) with Keras optimizers: here Keras 3's, wrapped in the
experimental `tf.keras.mixed_precision.experimental.LossScaleOptimizer`.
Inputs, expected values and assertions are the original's; the cases TF ran
in a graph and eagerly run inside `tf.Graph().as_default()` and eagerly
(Keras 3 optimizers build no TF1 graph ops, so the graph half reads the loss
scale eagerly: `opt.loss_scale` of a fixed scale is a constant).

Skipped: none.
"""

import contextlib

import pytest
import tensorflow as tf

from tests.tf_ported.rewrite_fixtures import rewrite_state  # noqa: F401
from tf_mixed_precision_compat import policy as policy_module


def _enable(*args):
  return tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(
      *args)


def _option_on():
  return tf.config.optimizer.get_experimental_options().get(
      "auto_mixed_precision", False)


def _context(mode):
  return tf.Graph().as_default() if mode == "graph" else (
      contextlib.nullcontext())


@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_wrap_optimizer(mode):
  with _context(mode):
    opt = _enable(tf.keras.optimizers.SGD(1.0), 123.)
    assert isinstance(opt,
                      tf.keras.mixed_precision.experimental.LossScaleOptimizer)
    loss_scale = opt.loss_scale
    if mode == "graph":
      with tf.compat.v1.Session() as sess:
        loss_scale = sess.run(loss_scale)
    assert float(loss_scale) == 123.


@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_optimizer_errors(mode):
  with _context(mode):
    opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
        tf.keras.optimizers.SGD(1.0), "dynamic")
    with pytest.raises(ValueError, match='"opt" must not already be an '
                       "instance of a LossScaleOptimizer."):
      _enable(opt)
    assert not _option_on()


def test_error_if_policy_is_set():
  with policy_module.policy_scope("mixed_float16"):
    with pytest.raises(ValueError,
                       match="the global Keras dtype Policy has been set"):
      _enable(tf.keras.optimizers.SGD(1.0))
  # No error with the default policy, nor with a policy that is not mixed.
  _enable(tf.keras.optimizers.SGD(1.0))
  with policy_module.policy_scope("float64"):
    _enable(tf.keras.optimizers.SGD(1.0))
