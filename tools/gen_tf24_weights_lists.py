"""Records TF 2.4.4's `LossScaleOptimizer.weights` / `get_weights()` lists.

Run under the TF 2.4.4 reference interpreter:

    .ref/tf24/bin/python tools/gen_tf24_weights_lists.py

For each inner optimizer (Adam, SGD with momentum, RMSprop with momentum and
centered, Adagrad, Adam with amsgrad, Nadam, Adamax, Adadelta, Ftrl) wrapped
by a dynamic `tf.keras.mixed_precision.LossScaleOptimizer`, applies two
steps of fixed gradients to a kernel (3, 2) and a bias (2,) and writes to
tests/fixtures/keras_lso/weights_tf24.json the names and shapes of
`opt.weights` and the values of `opt.get_weights()`, in TF 2.4.4's order,
plus the variable values after the steps. A TF 2.4 job that
saved `opt.get_weights()` with NumPy saved exactly such a list.
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

OUT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
    "fixtures", "keras_lso", "weights_tf24.json")
KERNEL = [[0.5, -1.0], [0.25, 2.0], [-0.75, 1.5]]
BIAS = [0.1, -0.2]
CASES = ("adam", "sgd_momentum", "rmsprop", "adagrad", "adam_amsgrad", "nadam",
         "adamax", "adadelta", "ftrl")
GRADS = [([[0.1, -0.2], [0.3, 0.4], [-0.5, 0.6]], [0.05, -0.05]),
         ([[-0.2, 0.1], [0.2, -0.3], [0.4, 0.1]], [0.1, 0.2])]


def make_inner(case):
  """The inner optimizer of each case (same arguments in Keras 3)."""
  if case == "adam":
    return tf.keras.optimizers.Adam(0.01)
  if case == "sgd_momentum":
    return tf.keras.optimizers.SGD(0.1, momentum=0.9)
  if case == "rmsprop":
    return tf.keras.optimizers.RMSprop(0.01, momentum=0.5, centered=True)
  if case == "adagrad":
    return tf.keras.optimizers.Adagrad(0.1)
  if case == "adam_amsgrad":
    return tf.keras.optimizers.Adam(0.01, amsgrad=True)
  if case == "nadam":
    return tf.keras.optimizers.Nadam(0.01)
  if case == "adamax":
    return tf.keras.optimizers.Adamax(0.01)
  if case == "adadelta":
    return tf.keras.optimizers.Adadelta(1.0)
  return tf.keras.optimizers.Ftrl(0.1)


def _record(case):
  opt = tf.keras.mixed_precision.LossScaleOptimizer(make_inner(case))
  kernel = tf.Variable(KERNEL, name="kernel")
  bias = tf.Variable(BIAS, name="bias")
  for kernel_grad, bias_grad in GRADS:
    opt.apply_gradients([(tf.constant(kernel_grad), kernel),
                         (tf.constant(bias_grad), bias)])
  return {
      "names": [w.name for w in opt.weights],
      "shapes": [list(w.shape) for w in opt.weights],
      "get_weights": [np.asarray(w).tolist() for w in opt.get_weights()],
      "kernel": kernel.numpy().tolist(),
      "bias": bias.numpy().tolist(),
  }


def main():
  assert tf.__version__ == "2.4.4", tf.__version__
  data = {"tensorflow_version": tf.__version__, "kernel": KERNEL, "bias": BIAS,
          "grads": GRADS}
  for case in CASES:
    data[case] = _record(case)
  with open(OUT, "w") as f:
    json.dump(data, f, indent=1, sort_keys=True)
    f.write("\n")


if __name__ == "__main__":
  main()
