"""`weights` / `get_weights` / `set_weights` in TF 2.4's layout (Keras 3).

TF 2.4's `LossScaleOptimizer.weights` was `[iterations] + slots` in the
order its inner optimizer created them; tests/fixtures/keras_lso/
weights_tf24.json was recorded by tools/gen_tf24_weights_lists.py under TF
2.4.4 (two steps of fixed gradients on a kernel and a bias).
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import testing
from tf_mixed_precision_compat.optimizers.loss_scale_optimizer import (
    LossScaleOptimizer)
from tf_mixed_precision_compat import LossScaleOptimizerV1


def _fixture():
  with open(testing.fixture_path("keras_lso", "weights_tf24.json")) as f:
    return json.load(f)


CASES = ("adam", "sgd_momentum", "rmsprop", "adagrad", "adam_amsgrad",
         "nadam", "adamax", "adadelta", "ftrl")


def _inner(case):
  """The Keras 3 twin of the recorded inner optimizer."""
  opt = keras.optimizers
  return {
      "adam": lambda: opt.Adam(0.01),
      "sgd_momentum": lambda: opt.SGD(0.1, momentum=0.9),
      "rmsprop": lambda: opt.RMSprop(0.01, momentum=0.5, centered=True),
      "adagrad": lambda: opt.Adagrad(0.1),
      "adam_amsgrad": lambda: opt.Adam(0.01, amsgrad=True),
      "nadam": lambda: opt.Nadam(0.01),
      "adamax": lambda: opt.Adamax(0.01),
      "adadelta": lambda: opt.Adadelta(1.0),
      "ftrl": lambda: opt.Ftrl(0.1),
  }[case]()


def _trained(case, data, cls=LossScaleOptimizer):
  opt = (cls(_inner(case)) if cls is LossScaleOptimizer else
         cls(_inner(case), "dynamic"))
  kernel = tf.Variable(data["kernel"], name="kernel")
  bias = tf.Variable(data["bias"], name="bias")
  for kernel_grad, bias_grad in data["grads"]:
    opt.apply_gradients([(tf.constant(kernel_grad), kernel),
                         (tf.constant(bias_grad), bias)])
  return opt, kernel, bias


def _tf24_suffix(name):
  # "Adam/kernel/m:0" -> ("kernel", "m"); "Adam/iter:0" -> ("iter",).
  return tuple(name.split(":")[0].split("/")[1:])


@pytest.mark.parametrize("case", CASES)
def test_layout_is_tf24s(case):
  data = _fixture()
  record = data[case]
  opt, kernel, bias = _trained(case, data)
  weights = opt.weights
  assert [list(w.shape) for w in weights] == record["shapes"]
  assert weights[0] is opt.iterations
  for weight, name in zip(weights[1:], record["names"][1:]):
    suffix = _tf24_suffix(name)
    if len(suffix) == 2:  # A slot: the same variable and TF 2.4 slot name.
      var = {"kernel": kernel, "bias": bias}[suffix[0]]
      assert weight is opt.get_slot(var, suffix[1]), name
  assert len(opt.get_weights()) == len(record["get_weights"])


@pytest.mark.parametrize("case", ["adam", "sgd_momentum", "rmsprop",
                                  "adagrad"])
def test_values_match_tf24(case):
  data = _fixture()
  opt, kernel, _ = _trained(case, data)
  ours = opt.get_weights()
  for mine, theirs in zip(ours, data[case]["get_weights"]):
    np.testing.assert_allclose(mine, np.asarray(theirs, np.float32),
                               rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(kernel.numpy(), data[case]["kernel"], rtol=1e-4)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("cls", [LossScaleOptimizer, LossScaleOptimizerV1])
def test_set_weights_loads_tf24_list(case, cls):
  data = _fixture()
  record = data[case]
  opt, _, _ = _trained(case, data, cls)
  # A TF 2.4 job's `np.save(opt.get_weights())`, loaded into a fresh run.
  saved = [np.asarray(w) for w in record["get_weights"]]
  opt.set_weights(saved)
  for got, expected in zip(opt.get_weights(), saved):
    np.testing.assert_array_equal(got, expected.astype(got.dtype))


def test_wrong_length_or_shape_raises_before_assigning():
  data = _fixture()
  opt, _, _ = _trained("adam", data)
  before = opt.get_weights()
  with pytest.raises(ValueError, match=r"list of 4 arrays.*5, in TF 2\.4's "
                     r"layout \[iterations\] \+ slots: \[iterations \(\), "
                     r"kernel/m \(3, 2\)"):
    opt.set_weights(before[:4])
  bad = [np.full_like(w, 7) for w in before]
  bad[3] = np.zeros((2, 3), np.float32)
  with pytest.raises(ValueError, match=r"kernel/v has shape \(2, 3\), "
                     r"expected \(3, 2\)"):
    opt.set_weights(bad)
  for got, kept in zip(opt.get_weights(), before):
    np.testing.assert_array_equal(got, kept)


def test_weights_in_function_and_mirrored(mirrored_strategy):
  data = _fixture()
  with mirrored_strategy.scope():
    opt = LossScaleOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    var = tf.Variable([1.0, 2.0])

  @tf.function
  def step():
    mirrored_strategy.run(
        lambda: opt.apply_gradients([(tf.constant([0.5, 0.5]), var)]))

  step()
  assert opt.weights == [opt.iterations, opt.get_slot(var, "momentum")]
  opt.set_weights([np.int64(9), np.float32([3., 4.])])
  assert int(opt.iterations.numpy()) == 9
  for value in mirrored_strategy.experimental_local_results(
      opt.get_slot(var, "momentum")):
    np.testing.assert_array_equal(value.numpy(), [3., 4.])
  del data
