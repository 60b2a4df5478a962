"""A TF 2.3 job calling `optimizer.loss_scale()` runs with the one line.

The job below is written as TF 2.3 jobs were (`loss_scale =
self.optimizer.loss_scale()` in a `tf.function`, `.numpy()` in a log line,
`DynamicLossScale(multiplier=4)`), preceded only by
`import tf_mixed_precision_compat.auto`, and runs in a fresh interpreter on
the current target (Keras 3, or tf_keras with TF_USE_LEGACY_KERAS=1). Its
steps must equal TF 2.3.4's (tests/fixtures/keras_lso/v1_tf23.json, recorded
by tools/gen_tf23_lso_v1_fixtures.py), from scratch and resumed from TF
2.3.4's checkpoint.
"""

import json
import os
import subprocess
import sys

from tests import testing

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

_JOB = '''
import tf_mixed_precision_compat.auto  # The one line.
import json, sys
import tensorflow as tf

class Trainer:
  def __init__(self):
    self.model = Holder()
    self.model(tf.ones([2]))
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    self.optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
        opt, tf.mixed_precision.experimental.DynamicLossScale(
            initial_loss_scale=8, increment_period=2, multiplier=4))

  @tf.function
  def train_step(self, grad):
    var = self.model.var
    loss_scale = self.optimizer.loss_scale()
    with tf.GradientTape() as tape:
      scaled = tf.reduce_sum(var * grad) * loss_scale
    grads = tape.gradient(scaled, [var])
    grads = [g / loss_scale for g in grads]
    self.optimizer.apply_gradients(zip(grads, [var]))
    return loss_scale

class Holder(tf.keras.layers.Layer):
  def __init__(self):
    super().__init__()
    self.var = self.add_weight(name="var", shape=(2,), initializer="zeros")
  def call(self, x):
    return x * self.var

args = json.loads(sys.argv[1])
trainer = Trainer()
if args["restore"]:
  tf.train.Checkpoint(model=trainer.model, optimizer=trainer.optimizer).restore(
      args["restore"])
  trainer.model(tf.ones([2]))
else:
  trainer.model.var.assign([1.0, -2.0])
rows = []
for grad in args["grads"]:
  scale_in_step = trainer.train_step(tf.constant(grad, tf.float32))
  print("loss scale: %s" % trainer.optimizer.loss_scale().numpy(),
        file=sys.stderr)
  rows.append({"scale_in_step": float(scale_in_step),
               "loss_scale": float(trainer.optimizer.loss_scale().numpy()),
               "iterations": int(trainer.optimizer.iterations.numpy()),
               "var": [float(x) for x in trainer.model.var.numpy()]})
print("ROWS" + json.dumps(rows))
'''


def _run(grads, restore):
  env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run(
      [sys.executable, "-c", _JOB, json.dumps({"grads": grads,
                                               "restore": restore})],
      env=env, capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  (line,) = [l for l in result.stdout.splitlines() if l.startswith("ROWS")]
  return json.loads(line[len("ROWS"):])


def _expected(rows):
  return [{"scale_in_step": float(r["scale_in_step"]),
           "loss_scale": float(r["loss_scale"]),
           "iterations": r["iterations"],
           "var": [float(x) for x in r["var"]]} for r in rows]


def test_tf23_job_runs_and_resumes_unmodified():
  with open(testing.fixture_path("keras_lso", "v1_tf23.json")) as f:
    data = json.load(f)
  record = data["multiplier_4"]
  grads = [[float(x) for x in g] for g in data["gradients"]]
  assert _run(grads, None) == _expected(record["trajectory_function"])
  after = data["save_after"]
  prefix = testing.fixture_path("keras_lso", record["checkpoint"]["prefix"])
  assert _run(grads[after:], prefix) == _expected(
      record["trajectory_eager"][after:])
