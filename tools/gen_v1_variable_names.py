"""Records the variable names TF 2.3/2.4 gave a v1 loss-scale optimizer's graph.

A `tf.compat.v1.train.Saver` checkpoint finds variables by name, so an old
job resumes only if the names TF 2.21 plus this package gives its graph are
TF's. Non-slot variables of v1 optimizers (Adam's `beta1_power`) are named
after the name scope they are first built in, which the loss-scale update's
conditional decides (TF 2.4: `cond_1/beta1_power`).

Run under the reference environments (Python 3.8):

    .ref/tf24/bin/python tools/gen_v1_variable_names.py
    .ref/tf23/bin/python tools/gen_v1_variable_names.py

Each writes tests/fixtures/v1_optimizer/variable_names_tf2{3,4}.json: per case
of `CASES`, the global variables' names in creation order, with resource and
with reference variables (`disable_v2_behavior()`, as TF1-style jobs run).
`tests/optimizers/test_compat_v1_variable_names.py` runs this file with
`--ours` on TF 2.21
(the package installed; JSON on stdout) and compares.

Keep this file Python 3.8 compatible.
"""

import json
import os
import sys

OUT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
    "fixtures", "v1_optimizer")

# name: (optimizer, loss_scale, name scope around minimize, minimize calls)
CASES = {
    "adam_dynamic": ("adam", "dynamic", None, 1),
    "adam_fixed": ("adam", 128, None, 1),
    "adam_dynamic_scoped": ("adam", "dynamic", "train", 1),
    "adam_dynamic_twice": ("adam", "dynamic", None, 2),
    "momentum_dynamic": ("momentum", "dynamic", None, 1),
    "adagrad_dynamic": ("adagrad", "dynamic", None, 1),
    "rmsprop_dynamic": ("rmsprop", "dynamic", None, 1),
}


def _optimizer(tf, kind):
  v1 = tf.compat.v1.train
  return {
      "adam": lambda: v1.AdamOptimizer(0.01),
      "momentum": lambda: v1.MomentumOptimizer(0.01, 0.9),
      "adagrad": lambda: v1.AdagradOptimizer(0.01),
      "rmsprop": lambda: v1.RMSPropOptimizer(0.01),
  }[kind]()


def variable_names(tf, case, use_resource):
  """The global variables' names of `CASES[case]`'s graph, in order.

  Args:
    tf: The `tensorflow` module, with v2 behaviour disabled.
    case: A key of `CASES`.
    use_resource: Whether the model's variable is a resource variable.

  Returns:
    A list of variable names.
  """
  kind, loss_scale, scope, calls = CASES[case]
  graph = tf.Graph()
  with graph.as_default():
    var = tf.compat.v1.get_variable("w", [2], use_resource=use_resource)
    step = tf.compat.v1.train.get_or_create_global_step()
    opt = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(
        _optimizer(tf, kind), loss_scale)
    for _ in range(calls):
      loss = tf.reduce_sum(var * var)
      if scope is None:
        opt.minimize(loss, global_step=step)
      else:
        with tf.compat.v1.name_scope(scope):
          opt.minimize(loss, global_step=step)
    return [v.name for v in tf.compat.v1.global_variables()]


def main():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.compat.v1.disable_v2_behavior()
  ours = "--ours" in sys.argv
  if ours:
    import tf_mixed_precision_compat.auto  # pylint: disable=g-import-not-at-top,unused-import
  version = ".".join(tf.__version__.split(".")[:2])
  record = {"tf_version": tf.__version__, "cases": {}}
  for case in CASES:
    for kind, use_resource in (("resource", True), ("ref", False)):
      record["cases"]["%s_%s" % (case, kind)] = variable_names(
          tf, case, use_resource)
  if ours:
    print(json.dumps(record))
    return
  path = os.path.join(OUT, "variable_names_tf%s.json" % version.replace(
      ".", ""))
  with open(path, "w") as f:
    json.dump(record, f, indent=1, sort_keys=True)
    f.write("\n")
  print("wrote", path)


if __name__ == "__main__":
  sys.exit(main())
