"""Writes the TF 2.3 checkpoints `convert` takes beyond `model=`/`optimizer=`.

Run under the TF 2.3.4 reference interpreter:

    .ref/tf23/bin/python tools/gen_convert_fixtures.py

Writes under tests/fixtures/convert/:

* `trainer_tf23/`: the job tests/cli/job_trainer/tf23_trainer_job.py run by
  TF 2.3.4 for 12 steps from scratch (its install line made a no-op: the
  package does not run on TF 2.3): `tf.train.Checkpoint(trainer=trainer,
  step=step, epoch=epoch)`, the trainer a `tf.Module` holding the model and
  an experimental LossScaleOptimizer(Adam, policy.loss_scale) of
  `Policy('mixed_float16', loss_scale='dynamic')`. `trainer_tf23/job.json`
  records every number TF 2.3.4 held at the save.
* `optonly_h5_tf23/`: a job that checkpointed only its optimizer and
  counters (`tf.train.Checkpoint(optimizer=opt, step=step, epoch=epoch)`,
  `ckpt-1`) and its model's weights with `model.save_weights("weights.h5")`
  at the same step: the `seq_adam` model and data of
  tools/gen_resume_fixtures.py, 7 steps. `optonly_h5_tf23.json` records
  the saved state (`saved`: weights and slots by layer, iterations, loss
  scale, counter), `step`, `epoch`, `variables` and `model_json`.
"""

import json
import os
import runpy
import shutil
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # pylint: disable=g-import-not-at-top

TOOLS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TOOLS)
OUT = os.path.join(ROOT, "tests", "fixtures", "convert")
JOB = os.path.join(ROOT, "tests", "cli", "job_trainer")
sys.path.insert(0, TOOLS)
import gen_resume_fixtures as resume  # pylint: disable=g-import-not-at-top,wrong-import-position

STEPS = 12


def _write_json(path, record):
  with open(path, "w") as f:
    json.dump(record, f, indent=1, sort_keys=True)
    f.write("\n")


def _no_op_install_line():
  """A `tf_mixed_precision_compat.auto` that does nothing, on sys.path."""
  stub = tempfile.mkdtemp()
  os.makedirs(os.path.join(stub, "tf_mixed_precision_compat"))
  for name in ("__init__.py", "auto.py"):
    open(os.path.join(stub, "tf_mixed_precision_compat", name), "w").close()
  sys.path[:0] = [stub, JOB]
  return stub


def trainer_job():
  """Runs the trainer job for STEPS steps; records what it saved."""
  directory = os.path.join(OUT, "trainer_tf23")
  shutil.rmtree(directory, ignore_errors=True)
  stub = _no_op_install_line()
  out = os.path.join(stub, "out.json")
  sys.argv = ["tf23_trainer_job.py", directory, str(STEPS), out]
  job = runpy.run_path(os.path.join(JOB, "tf23_trainer_job.py"),
                       run_name="__main__")
  with open(out) as f:
    ran = json.load(f)
  model, opt = job["trainer"].model, job["trainer"].optimizer
  prefix = tf.train.latest_checkpoint(directory)
  record = resume._snapshot(model, opt)  # pylint: disable=protected-access
  record.update({
      "tensorflow_version": tf.__version__, "steps": STEPS,
      "history": ran["history"], "step": ran["step"], "epoch": ran["epoch"],
      "checkpoint": os.path.basename(prefix),
      "variables": tf.train.list_variables(prefix),
      "model_json": model.to_json(),
      "loss_scale_config": opt.loss_scale.get_config()})
  _write_json(os.path.join(directory, "job.json"), record)
  print("trainer_tf23: scales", [h["loss_scale"] for h in ran["history"]])


def optimizer_only_with_h5():
  """Optimizer and counters checkpointed, the weights in an H5 file."""
  tf.keras.backend.clear_session()
  tf.random.set_seed(5)
  resume._set_policy("mixed_float16")  # pylint: disable=protected-access
  model = resume._model("sequential")  # pylint: disable=protected-access
  opt = resume._lso(resume._inner("adam"))  # pylint: disable=protected-access
  step_var = tf.Variable(0, dtype=tf.int64, name="step")
  epoch_var = tf.Variable(0, dtype=tf.int64, name="epoch")
  x, y = resume._data()  # pylint: disable=protected-access
  train = resume._trainer(model, opt, None)  # pylint: disable=protected-access
  before = resume._run(train, opt, x, y, 0, resume.SAVE_AT)  # pylint: disable=protected-access
  step_var.assign(resume.SAVE_AT)
  epoch_var.assign(1)
  directory = os.path.join(OUT, "optonly_h5_tf23")
  shutil.rmtree(directory, ignore_errors=True)
  prefix = tf.train.Checkpoint(optimizer=opt, step=step_var,
                               epoch=epoch_var).save(
                                   os.path.join(directory, "ckpt"))
  model.save_weights(os.path.join(directory, "weights.h5"))
  record = {
      "tensorflow_version": tf.__version__, "model": "sequential",
      "optimizer": "adam", "initial_scale": resume.INITIAL_SCALE,
      "growth_steps": resume.GROWTH_STEPS, "before": before,
      "saved": resume._snapshot(model, opt),  # pylint: disable=protected-access
      "step": resume.SAVE_AT, "epoch": 1,
      "checkpoint": os.path.relpath(prefix, OUT),
      "variables": tf.train.list_variables(prefix),
      "model_json": model.to_json()}
  _write_json(directory + ".json", record)
  print("optonly_h5_tf23: scale", record["saved"]["loss_scale"])


def main():
  assert tf.__version__.startswith("2.3."), tf.__version__
  os.makedirs(OUT, exist_ok=True)
  optimizer_only_with_h5()
  trainer_job()


if __name__ == "__main__":
  main()
