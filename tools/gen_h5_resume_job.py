"""Records a CosmoFlow-like TF 2.4.4 job resuming from whole-model H5 files.

Run under the TF 2.4.4 reference interpreter (Python 3.8):

    .ref/tf24/bin/python tools/gen_h5_resume_job.py

The MLPerf HPC CosmoFlow reference (TF 2.4, Keras API) trains a small 3-D
convolutional regressor under `mixed_float16` with a `LossScaleOptimizer`
around SGD with momentum, compiled with `loss="mse"` and
`metrics=["mean_absolute_error"]`; `ModelCheckpoint("checkpoint-{epoch}.h5")`
saves the whole model each epoch, and a restarted job resumes with
`tf.keras.models.load_model(path)` then `fit(initial_epoch=...)`. Its model
ends in a `Lambda` layer scaling the output.

Two cases, each a tiny version of that job on fixed data (no shuffling):

* `mlperf_h5_tf24`: no Lambda; metrics also hold a metric instance
  (`tf.keras.metrics.RootMeanSquaredError`) and a function.
* `mlperf_lambda_tf24`: the same model ending in `Lambda(lambda x: x * 1.2)`
  (Python 3.8 bytecode in the H5 file), loss given as a function.

For each, `tests/fixtures/legacy/<case>/checkpoint-2.h5` is the file written
after epoch 2 of 4, and `<case>.json` records the data, the weights in that
file, and the per-epoch history TF 2.4.4 reaches when a fresh process
resumes with `load_model(path)` and `fit(initial_epoch=2, epochs=4)`.
"""

import json
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

OUT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
    "fixtures", "legacy")
K = tf.keras
BATCH = 4
EPOCHS = 4
RESUME_EPOCH = 2


def _data():
  rng = np.random.RandomState(7)
  x = rng.uniform(-1, 1, (16, 4, 4, 4, 1)).astype(np.float32)
  y = np.stack([x.mean(axis=(1, 2, 3, 4)), x.std(axis=(1, 2, 3, 4))],
               axis=1).astype(np.float32)
  return x, y


def build(with_lambda):
  """The model (same layer names as tests/legacy/test_h5_resume.py)."""
  tf.random.set_seed(3)
  inputs = K.Input((4, 4, 4, 1), name="cube")
  h = K.layers.Conv3D(4, 2, strides=2, name="conv")(inputs)
  h = K.layers.LeakyReLU(name="act")(h)
  h = K.layers.Flatten(name="flat")(h)
  h = K.layers.Dense(8, activation="relu", name="fc1")(h)
  h = K.layers.Dense(2, activation="tanh", name="fc2")(h)
  outputs = K.layers.Activation("linear", dtype="float32", name="out")(h)
  if with_lambda:
    # float32 like the output layer: with a float16 model output TF 2.4
    # computed the loss in float16 (Keras 3 computes it in float32).
    outputs = K.layers.Lambda(lambda x: x * 1.2, dtype="float32",
                              name="scale_1p2")(outputs)
  return K.Model(inputs, outputs, name="cosmoflow_tiny")


def _compile(model, with_lambda):
  opt = K.mixed_precision.LossScaleOptimizer(
      K.optimizers.SGD(learning_rate=0.05, momentum=0.9),
      initial_scale=2.0 ** 15, dynamic_growth_steps=3)
  if with_lambda:
    model.compile(optimizer=opt, loss=K.losses.mean_squared_error,
                  metrics=["mean_absolute_error"])
  else:
    model.compile(optimizer=opt, loss="mse",
                  metrics=["mean_absolute_error",
                           K.metrics.RootMeanSquaredError(name="rmse"),
                           K.metrics.mean_absolute_percentage_error])


def _history(history):
  return {k: [float(v) for v in vs] for k, vs in history.history.items()}


def _record(case, with_lambda):
  x, y = _data()
  K.mixed_precision.set_global_policy("mixed_float16")
  work = tempfile.mkdtemp()
  model = build(with_lambda)
  _compile(model, with_lambda)
  first = model.fit(x, y, batch_size=BATCH, epochs=RESUME_EPOCH,
                    shuffle=False, verbose=0, callbacks=[
                        K.callbacks.ModelCheckpoint(
                            os.path.join(work, "checkpoint-{epoch}.h5"))])
  saved = os.path.join(work, f"checkpoint-{RESUME_EPOCH}.h5")
  K.backend.clear_session()
  resumed = K.models.load_model(saved)
  weights = {w.name: w.numpy().tolist() for w in resumed.weights}
  iterations = int(resumed.optimizer.iterations.numpy())
  history = resumed.fit(x, y, batch_size=BATCH, epochs=EPOCHS,
                        initial_epoch=RESUME_EPOCH, shuffle=False, verbose=0)
  out_dir = os.path.join(OUT, case)
  os.makedirs(out_dir, exist_ok=True)
  shutil.copy(saved, os.path.join(out_dir, f"checkpoint-{RESUME_EPOCH}.h5"))
  shutil.rmtree(work)
  record = {
      "tensorflow_version": tf.__version__,
      "x": x.tolist(), "y": y.tolist(), "batch_size": BATCH,
      "resume_epoch": RESUME_EPOCH, "epochs": EPOCHS,
      "first_history": _history(first),
      "loaded_weights": weights, "loaded_iterations": iterations,
      "loaded_loss_scale": float(resumed.optimizer.loss_scale.numpy()),
      "resumed_history": _history(history),
      "metrics_names": list(resumed.metrics_names),
  }
  with open(os.path.join(OUT, case + ".json"), "w") as f:
    json.dump(record, f, indent=1, sort_keys=True)
  K.mixed_precision.set_global_policy("float32")
  K.backend.clear_session()
  print("wrote", case, record["resumed_history"])


def main():
  _record("mlperf_h5_tf24", with_lambda=False)
  _record("mlperf_lambda_tf24", with_lambda=True)


if __name__ == "__main__":
  main()
