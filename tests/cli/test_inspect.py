"""`inspect` on checkpoints, H5 files and SavedModels written by real TF 2.2.3/
2.3.4/2.4.4 (compared with the generators' records) and on Keras 3 files;
`--model` dry runs that restore or say, in words, why not."""

import glob
import json
import os

import keras
import numpy as np
import pytest

from tests import testing
from tf_mixed_precision_compat import LossScaleOptimizer
from tf_mixed_precision_compat import legacy
from tf_mixed_precision_compat.cli import _explain
from tf_mixed_precision_compat.cli import main
from tf_mixed_precision_compat.legacy import _problems

CKPTS = sorted(os.path.basename(p)[:-5] for p in glob.glob(
    testing.fixture_path("legacy", "ckpt_*.json")))


def _record(name):
  with open(testing.fixture_path("legacy", name + ".json")) as f:
    return json.load(f)


def _inspect(capsys, *args):
  code = main(["inspect", *args])
  out = capsys.readouterr()
  return code, out.out, out.err


def _json(capsys, *args):
  code, out, err = _inspect(capsys, *args, "--json")
  assert code == 0, err
  return json.loads(out)


@pytest.mark.parametrize("case", CKPTS)
def test_tf2x_checkpoints_match_their_records(capsys, case):
  record = _record(case)
  got = _json(capsys, testing.fixture_path("legacy", case))
  (opt,) = got["optimizers"]
  assert opt["iterations"] == record["iterations"]
  assert opt["class_name"] == {"sgd": "SGD", "adam": "Adam"}[
      record["optimizer"]]
  for name, value in record["hyperparameters"].items():
    assert np.float32(opt["hyperparameters"][name]) == np.float32(value)
  if record["loss_scale_kind"] == "dynamic":
    assert opt["loss_scale"]["value"] == record["loss_scale"]
    assert opt["loss_scale"]["counter"] == record["counter"]
    assert ("TF 2.2" in got["generation"]) == case.startswith("ckpt_tf22")
  else:  # TF never stored a fixed scale: said, not invented.
    assert opt["loss_scale"] is None
    assert "fixed loss scale" in got["generation"]
  assert all(v == sorted(v) and v for v in opt["slots"].values())
  assert len(got["weights"]) == len(record["weights"])
  assert got["other"]["save_counter"] >= 1


def test_h5_model_file(capsys):
  record = _record("h5_tf24_seq_adam_exp")
  got = _json(capsys, testing.fixture_path("legacy",
                                           "h5_tf24_seq_adam_exp.h5"))
  assert got["format"] == "h5-model" and "2.4.0" in got["generation"]
  (opt,) = got["optimizers"]
  assert opt["iterations"] == record["iterations"]
  assert opt["hyperparameters"]["inner_optimizer"]["class_name"] == "Adam"
  assert opt["loss_scale"]["type"] == "not stored"
  assert got["layers"] == ["hidden_input", "hidden", "logits", "out"]


def test_saved_model(capsys):
  record = _record("sm_tf24_func_adam")
  got = _json(capsys, testing.fixture_path("legacy", "sm_tf24_func_adam"))
  assert got["format"] == "saved-model"
  assert "TensorFlow 2.4.4" in got["generation"]
  (opt,) = got["optimizers"]
  assert (opt["iterations"], opt["loss_scale"]["value"],
          opt["loss_scale"]["counter"], opt["loss_scale"]["growth_steps"],
          opt["class_name"]) == (
              record["iterations"], record["loss_scale"], record["counter"],
              record["growth_steps"], "Adam")
  assert got["layers"] == ["x", "d1", "bn", "relu", "d2", "out"]


def test_tf23_saved_model_growth_steps_from_its_config(capsys):
  record = _record("sm_tf23_seq_sgd")
  got = _json(capsys, testing.fixture_path("legacy", "sm_tf23_seq_sgd"))
  (opt,) = got["optimizers"]
  assert "TensorFlow 2.3.4" in got["generation"]
  assert (opt["class_name"], opt["loss_scale"]["growth_steps"],
          opt["iterations"]) == ("SGD", record["growth_steps"],
                                 record["iterations"])


def _keras3_job(tmp_path):
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  opt = keras.optimizers.LossScaleOptimizer(
      keras.optimizers.Adam(0.5), dynamic_growth_steps=7)
  opt.build(model.trainable_variables)
  opt.dynamic_scale.assign(64.)
  opt.step_counter.assign(5)
  opt.inner_optimizer.iterations.assign(9)
  return model, opt


def test_keras3_checkpoint(capsys, tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  model, opt = _keras3_job(tmp_path)
  tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=opt),
                             str(tmp_path), 1).save()
  got = _json(capsys, str(tmp_path))
  assert "Keras 3" in got["generation"]
  (info,) = got["optimizers"]
  assert (info["layout"], info["iterations"], info["loss_scale"]["value"],
          info["loss_scale"]["counter"]) == ("keras3", 9, 64.0, 5)
  assert info["hyperparameters"]["learning_rate"] == 0.5
  assert info["class_name"] == "Adam"
  assert sorted(info["slots"].values()) == [["momentum", "velocity"]] * 2
  assert sorted(w["shape"] for w in got["weights"]) == [[2], [3, 2]]
  assert all(w["name"].startswith("model/") for w in got["weights"])


def test_checkpoint_of_this_packages_optimizer_on_keras3(capsys, tmp_path):
  # TF 2.4's loss-scale entries beside Keras 3 optimizer state.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  opt = LossScaleOptimizer(keras.optimizers.SGD(0.5, momentum=0.9))
  with tf.GradientTape() as tape:
    loss = opt.get_scaled_loss(tf.reduce_sum(model(tf.ones((1, 3)))))
  grads = tape.gradient(loss, model.trainable_variables)
  opt.apply_gradients(zip(opt.get_unscaled_gradients(grads),
                          model.trainable_variables))
  tf.train.Checkpoint(model=model, optimizer=opt).write(str(tmp_path / "c"))
  got = _json(capsys, str(tmp_path / "c"))
  assert got["generation"].startswith("this package on TF 2.16 or later")
  (info,) = got["optimizers"]
  assert (info["layout"], info["class_name"], info["iterations"]) == (
      "keras3 (this package)", "SGD", 1)
  assert info["loss_scale"] == {"type": "dynamic", "value": 32768.0,
                                "counter": 1, "growth_steps": "not stored"}
  assert sorted(info["slots"].values()) == [["momentum"]] * 2
  assert sorted(w["shape"] for w in got["weights"]) == [[2], [3, 2]]
  assert all(w["name"].startswith("model/") for w in got["weights"])


@pytest.mark.parametrize("name, kwargs", [
    ("SGD", {"momentum": 0.9}), ("Adam", {"amsgrad": True}), ("AdamW", {}),
    ("Adamax", {}), ("Nadam", {}), ("RMSprop", {"momentum": 0.9,
                                                "centered": True}),
    ("Adagrad", {}), ("Adadelta", {}), ("Ftrl", {})])
def test_keras3_checkpoint_names_every_slot_and_class(capsys, tmp_path, name,
                                                      kwargs):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  opt = getattr(keras.optimizers, name)(**kwargs)
  opt.build(model.trainable_variables)
  tf.train.Checkpoint(model=model, optimizer=opt).write(str(tmp_path / "c"))
  (info,) = _json(capsys, str(tmp_path / "c"))["optimizers"]
  assert info["class_name"] == name
  # Every slot named as Keras 3 names it (none left "(unnamed)").
  # Keras 3 names a slot `<variable path, "/" as "_">_<slot name>`.
  prefixes = [w.path.replace("/", "_") + "_"
              for w in model.trainable_variables]
  expected = sorted(v.name[len(p):] for v in opt.variables
                    for p in prefixes if v.name.startswith(p))
  assert expected
  assert "(unnamed)" not in info["slots"]
  assert sorted(sum(info["slots"].values(), [])) == expected


def test_keras3_files(capsys, tmp_path):
  model, opt = _keras3_job(tmp_path)
  model.compile(optimizer=opt, loss="mse")
  model.save(tmp_path / "m.keras")
  model.save_weights(tmp_path / "m.weights.h5")
  archive = _json(capsys, str(tmp_path / "m.keras"))
  assert archive["format"] == "keras3-archive"
  assert archive["optimizers"][0]["class_name"] == "LossScaleOptimizer"
  weights = _json(capsys, str(tmp_path / "m.weights.h5"))
  assert weights["format"] == "keras3-weights-h5"
  assert sorted(w["shape"] for w in weights["weights"]) == [[2], [3, 2]]


def test_text_output_names_everything(capsys):
  code, out, _ = _inspect(capsys, testing.fixture_path("legacy", "demo_tf23"))
  assert code == 0
  for text in ("ckpt-40", "TF 2.3 or 2.4", "class: SGD", "iterations: 40",
               "momentum: 0.9\n", "loss scale: dynamic, value 1024.0, counter "
               "19", "model/layer_with_weights-2/kernel: float32[16, 1]",
               "save_counter = 2"):
    assert text in out, text


def test_dry_run_restores(capsys):
  code, out, _ = _inspect(
      capsys, testing.fixture_path("legacy", "ckpt_tf23_seq_adam_dynamic"),
      "--model", "tests.cli.models:seq_model")
  assert code == 0
  assert "restores exactly" in out and "16 values matched" in out


def test_dry_run_explains_a_narrower_model(capsys):
  code, out, _ = _inspect(capsys, testing.fixture_path("legacy", "demo_tf23"),
                          "--model", "tests.cli.models:demo_model_narrow")
  assert code == 1
  assert "does not restore" in out
  assert ("The old job's model/layer_with_weights-1/kernel has shape (32, "
          "16), your model's ") in out
  assert "dense_1/kernel has shape (32, 8): that layer has another size" \
      in out
  assert "slot" in out and "optimizer class differs" not in out


def test_dry_run_explains_another_structure(capsys):
  got = json.loads(_inspect(
      capsys, testing.fixture_path("legacy", "ckpt_tf24_func_adam_dynamic"),
      "--model", "tests.cli.models:func_model_swapped", "--json")[1])
  plan = got["restore_plan"]
  assert plan["verdict"] == "does not restore"
  assert plan["why"] == [
      "The old job's weights model/layer_with_weights-1 (gamma, beta, "
      "moving_mean, moving_variance); model/layer_with_weights-2 (kernel, "
      "bias) have no place in your model (a layer your model lacks, or "
      "layers created in another order or nesting; TF 2.x numbered the "
      "layers that hold weights, layer_with_weights-N, in the order the "
      "model tracks them).",
      "Your model's d2 (kernel, bias); bn (gamma, beta, moving_mean, "
      "moving_variance) get no value from the checkpoint (layers the old "
      "job did not have, or of another kind or structure)."]


def test_dry_run_explains_records_not_their_messages(capsys, monkeypatch):
  # Rewording a problem's message leaves inspect's explanation as it was.
  args = (testing.fixture_path("legacy", "demo_tf23"), "--model",
          "tests.cli.models:demo_model_narrow", "--json")
  before = json.loads(_inspect(capsys, *args)[1])["restore_plan"]["why"]
  monkeypatch.setattr(_problems.Problem, "__str__", lambda self: "reworded")
  after = json.loads(_inspect(capsys, *args)[1])["restore_plan"]["why"]
  assert after == before
  assert "has shape (32, 16), your model's" in before[0]


def test_problems_are_explained_from_their_fields(monkeypatch):
  key = "model/layer_with_weights-{}/kernel/.ATTRIBUTES/VARIABLE_VALUE"
  error = legacy.RestoreError("ckpt-1", problems=[
      _problems.Problem(_problems.DTYPE, key.format(0), "dense/kernel",
                        np.dtype("float64"), np.dtype("float32")),
      _problems.Problem(_problems.TWICE, key.format(2), "dense_1/kernel",
                        other=key.format(1))])
  assert _explain.sentences(error) == [
      "The old job's model/layer_with_weights-0/kernel holds float64 "
      "values, your model's dense/kernel holds float32: that layer (or the "
      "model's dtype policy) has another dtype than in the old job.",
      "Both model/layer_with_weights-2/kernel and "
      "model/layer_with_weights-1/kernel of the old job would go into your "
      "dense_1/kernel: your model has fewer layers with weights than the old "
      "job, or builds them in another order."]

  # Every kind is told from its fields, never from the message.
  every_kind = [
      _problems.Problem(_problems.AMBIGUOUS, key.format(0), "d/k, e/k"),
      _problems.Problem(_problems.STRUCTURE, key.format(0), "d", found="e"),
      _problems.Problem(_problems.NO_MATCH, target="net"),
      _problems.Problem(_problems.VALUE, "optimizer/decay",
                        reason="decay=0.1 has no Keras 3 counterpart")]
  monkeypatch.setattr(_problems.Problem, "__str__", lambda self: "reworded")
  assert [line[:40] for line in _explain.sentences(legacy.RestoreError(
      "ckpt-1", problems=every_kind))] == [
          "The old job's model/layer_with_weights-0",
          "The old job's model/layer_with_weights-0",
          "None of the weights of your model 'net' ",
          "optimizer/decay: decay=0.1 has no Keras "]


def test_dry_run_explains_another_optimizer(capsys):
  code, out, _ = _inspect(
      capsys, testing.fixture_path("legacy", "ckpt_tf24_func_adam_dynamic"),
      "--model", "tests.cli.models:func_model", "--optimizer", "SGD")
  assert code == 1
  assert "the optimizer class differs from the old job's" in out


@pytest.mark.parametrize("args, code", [
    (["/no/such/ckpt"], 3),
    (["--json"], 2),
    ([testing.fixture_path("legacy", "demo_tf23"), "--model", "nocolon"], 2),
    ([testing.fixture_path("legacy", "demo_tf23"), "--model",
      "tests.cli.models:missing"], 2),
    ([testing.fixture_path("legacy", "demo_tf23"), "--model",
      "tests.cli.models:demo_model", "--optimizer", "Lion2"], 2),
])
def test_exit_codes(capsys, args, code):
  assert _inspect(capsys, *args)[0] == code


@pytest.mark.parametrize("command", ["inspect", "convert", "migrate"])
def test_help_documents_exit_codes(capsys, command):
  assert main([command, "--help"]) == 0
  assert "exit codes: 0 done; 1 refused" in capsys.readouterr().out


def test_python_dash_m_entry_point(tmp_path):
  # What scripts run: the exit code of the process itself.
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  env = dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run(
      [sys.executable, "-m", "tf_mixed_precision_compat", "inspect",
       str(tmp_path / "missing"), "--json"],
      capture_output=True, text=True, env=env, check=False)
  assert result.returncode == 3
  assert "error: cannot read input: No checkpoint at" in result.stderr


def test_dry_run_reports_only_the_restores_own_errors(capsys, monkeypatch):
  # A failure while explaining a dry run that restored is not a verdict on
  # the checkpoint: it reaches main (exit code 3), not "does not restore".
  def fail(source):
    raise ValueError("explaining failed")

  monkeypatch.setattr(_explain, "sentences", fail)
  code, out, err = _inspect(
      capsys, testing.fixture_path("legacy", "ckpt_tf23_seq_adam_dynamic"),
      "--model", "tests.cli.models:seq_model")
  assert code == 3
  assert "does not restore" not in out and "explaining failed" in err
