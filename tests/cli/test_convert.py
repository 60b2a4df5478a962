"""`convert`: TF 2.2.3/2.3.4/2.4.4 checkpoints written as native Keras 3 ones.

The converted checkpoint restores into `keras.optimizers.LossScaleOptimizer`
through TensorFlow's own `tf.train.Checkpoint.restore` with every number the
original job recorded; a conversion that cannot be exact writes nothing.
"""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import testing
from tests.cli import models
from tf_mixed_precision_compat.cli import main

CASES = {  # fixture (one per TF version) -> (model function, inner class)
    "ckpt_tf22_func_adam_dynamic": ("func_model", "Adam"),
    "ckpt_tf23_seq_adam_dynamic": ("seq_model", "Adam"),
    "ckpt_tf24_func_adam_dynamic": ("func_model", "Adam"),
}


def _record(name):
  with open(testing.fixture_path("legacy", name + ".json")) as f:
    return json.load(f)


def _restore_natively(directory, model_fn, inner):
  """What a Keras 3 job's own resume code gets from `directory`."""
  model = getattr(models, model_fn)()
  opt = keras.optimizers.LossScaleOptimizer(getattr(keras.optimizers,
                                                    inner)())
  status = tf.train.Checkpoint(model=model, optimizer=opt).restore(
      tf.train.latest_checkpoint(directory))
  opt.build(model.trainable_variables)
  status.assert_consumed()
  return model, opt


@pytest.mark.parametrize("case", sorted(CASES))
def test_converted_checkpoint_restores_natively(capsys, tmp_path, case):
  model_fn, inner = CASES[case]
  record = _record(case)
  new = str(tmp_path / "new")
  code = main(["convert", testing.fixture_path("legacy", case), new,
               "--model", f"tests.cli.models:{model_fn}"])
  out, err = capsys.readouterr()
  assert code == 0, err
  assert "[5/5]" in err and "read back exactly" in out
  model, opt = _restore_natively(new, model_fn, inner)
  # (The inner optimizer's: Keras 3.7's wrapper `iterations` is its own.)
  assert int(opt.inner_optimizer.iterations.numpy()) == record["iterations"]
  assert float(opt.dynamic_scale.numpy()) == record["loss_scale"]
  assert int(opt.step_counter.numpy()) == record["counter"]
  assert np.float32(opt.inner_optimizer.learning_rate.numpy()) == np.float32(
      record["hyperparameters"]["learning_rate"])
  for key, value in record["weights"].items():
    layer, weight = key.split("/")
    np.testing.assert_array_equal(
        getattr(model.get_layer(layer), weight).numpy(), value, err_msg=key)


def test_demo_keeps_checkpoint_number_and_writes_extra_files(capsys,
                                                             tmp_path):
  new = str(tmp_path / "new")
  code = main(["convert", testing.fixture_path("legacy", "demo_tf23"), new,
               "--model", "tests.cli.models:demo_model",
               "--weights", str(tmp_path / "w.weights.h5"),
               "--keras", str(tmp_path / "m.keras")])
  assert code == 0, capsys.readouterr().err
  assert tf.train.latest_checkpoint(new).endswith("ckpt-40")
  reloaded = keras.models.load_model(tmp_path / "m.keras")
  assert float(reloaded.optimizer.dynamic_scale.numpy()) == 1024.0
  assert int(reloaded.optimizer.inner_optimizer.iterations.numpy()) == 40
  fresh = models.demo_model()
  fresh.load_weights(tmp_path / "w.weights.h5")
  for a, b in zip(fresh.weights, reloaded.weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert sorted(os.listdir(tmp_path)) == ["m.keras", "new", "w.weights.h5"]


@pytest.mark.parametrize("case, model_fn, words", [
    ("ckpt_tf24_seq_sgd_fixed", "seq_model", "fixed loss scale"),
    ("ckpt_tf22_sub_adam_fixed", "seq_model", "fixed loss scale"),
    ("demo_tf23", "demo_model_narrow", "has shape (32, 16), your model's "),
    ("ckpt_tf23_seq_adam_dynamic", "func_model", "does not restore"),
])
def test_refusals_write_nothing(capsys, tmp_path, case, model_fn, words):
  new = tmp_path / "new"
  code = main(["convert", testing.fixture_path("legacy", case), str(new),
               "--model", f"tests.cli.models:{model_fn}"])
  err = capsys.readouterr().err
  assert code == 1
  assert words in err and "Nothing was written" in err
  assert os.listdir(tmp_path) == []


def test_failed_read_back_deletes_the_output(capsys, tmp_path):
  # The model module imports the package, so the fresh interpreter (which
  # cannot) fails to read the checkpoint back: refused, nothing left.
  code = main(["convert", testing.fixture_path(
      "legacy", "ckpt_tf23_seq_adam_dynamic"), str(tmp_path / "new"),
               "--model", "tests.cli.models_with_package:seq_model"])
  err = capsys.readouterr().err
  assert code == 1
  assert "without the package failed" in err
  assert "must restore without the package" in err
  assert os.listdir(tmp_path) == []


def test_usage_errors(capsys, tmp_path):
  (tmp_path / "new").mkdir()
  (tmp_path / "new" / "x").write_text("")
  old = testing.fixture_path("legacy", "demo_tf23")
  assert main(["convert", old, str(tmp_path / "new"),
               "--model", "tests.cli.models:demo_model"]) == 2
  assert main(["convert", old, str(tmp_path / "n2")]) == 2  # no --model
  assert main(["convert", "/no/such", str(tmp_path / "n3"),
               "--model", "tests.cli.models:demo_model"]) == 3
  assert "is not empty" in capsys.readouterr().err


def test_root_counters_are_carried_over(capsys, tmp_path):
  # A TF 2.3.4 job that also saved `step` and `epoch` beside model and
  # optimizer: the native checkpoint keeps them under the same names.
  new = str(tmp_path / "new")
  old = testing.fixture_path("resume", "tf23_seq_adam_manager")
  assert main(["convert", old, new, "--model",
               "tests.cli.models:seq_model"]) == 0, capsys.readouterr().err
  record = _record_resume("tf23_seq_adam_manager")
  model = models.seq_model()
  opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam())
  step, epoch = tf.Variable(0, dtype=tf.int64), tf.Variable(0, dtype=tf.int64)
  opt.build(model.trainable_variables)
  tf.train.Checkpoint(model=model, optimizer=opt, step=step,
                      epoch=epoch).restore(
                          tf.train.latest_checkpoint(new)).assert_consumed()
  assert (int(step.numpy()), int(epoch.numpy())) == (record["step"],
                                                     record["epoch"])


def test_nested_jobs_are_refused(capsys, tmp_path):
  old = testing.fixture_path("resume", "tf23_trainer_adam_save")
  assert main(["convert", old, str(tmp_path / "new"), "--model",
               "tests.cli.models:seq_model"]) == 1
  assert "needs exactly one optimizer under `optimizer`" in (
      capsys.readouterr().err)
  assert os.listdir(tmp_path) == []


def _record_resume(name):
  with open(testing.fixture_path("resume", name + ".json")) as f:
    return json.load(f)


def test_keras3_checkpoints_are_not_converted(capsys, tmp_path):
  model = models.seq_model()
  opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())
  opt.build(model.trainable_variables)
  tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=opt),
                             str(tmp_path / "k3"), 1).save()
  assert main(["convert", str(tmp_path / "k3"), str(tmp_path / "new"),
               "--model", "tests.cli.models:seq_model"]) == 1
  assert "was written on Keras 3" in capsys.readouterr().err
  assert not os.path.exists(tmp_path / "new")
