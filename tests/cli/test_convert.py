"""`convert`: TF 2.2.3/2.3.4/2.4.4 checkpoints written as native Keras 3 ones.

The converted checkpoint restores into `keras.optimizers.LossScaleOptimizer`
through TensorFlow's own `tf.train.Checkpoint.restore` with every number the
original job recorded; a conversion that cannot be exact writes nothing.
"""

import json
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from tests import testing
from tests.cli import models
from tf_mixed_precision_compat import legacy
from tf_mixed_precision_compat.cli import _sources
from tf_mixed_precision_compat.cli import _verify
from tf_mixed_precision_compat.cli import convert_cmd
from tf_mixed_precision_compat.cli import main

CASES = {  # fixture (one per TF version) -> (model function, inner class)
    "ckpt_tf22_func_adam_dynamic": ("func_model", "Adam"),
    "ckpt_tf23_seq_adam_dynamic": ("seq_model", "Adam"),
    "ckpt_tf24_func_adam_dynamic": ("func_model", "Adam"),
    # Layers held in a Python list of a subclassed model.
    "ckpt_tf23_sub_sgd_dynamic": ("sub_model", ("SGD", {"momentum": 0.9})),
}


def _record(name):
  with open(testing.fixture_path("legacy", name + ".json")) as f:
    return json.load(f)


def _restore_natively(directory, model_fn, inner):
  """What a Keras 3 job's own resume code gets from `directory`, restored
  as docs/migration.md says: the optimizer built first."""
  model = getattr(models, model_fn)()
  name, kwargs = inner if isinstance(inner, tuple) else (inner, {})
  opt = keras.optimizers.LossScaleOptimizer(
      getattr(keras.optimizers, name)(**kwargs))
  opt.build(model.trainable_variables)
  tf.train.Checkpoint(model=model, optimizer=opt).restore(
      tf.train.latest_checkpoint(directory)).assert_consumed()
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
  for key, slots in record["slots"].items():
    layer, weight = key.split("/")
    variable = getattr(model.get_layer(layer), weight)
    for tf_name, value in slots.items():
      np.testing.assert_array_equal(
          _slot(opt, variable, SLOTS[tf_name]).numpy(), value,
          err_msg=f"{key} {tf_name}")


SLOTS = {"momentum": "momentum", "m": "momentum", "v": "velocity"}


def _slot(opt, variable, name):
  """Keras 3's slot `name` of `variable`, by the name Keras 3 gives it."""
  want = f"{variable.path.replace('/', '_')}_{name}"
  found = [v for v in opt.inner_optimizer.variables if v.name == want]
  assert len(found) == 1, (want, [v.name for v in
                                  opt.inner_optimizer.variables])
  return found[0]


def test_subclassed_model_is_found_by_a_trial_match():
  # Its layers are named by attribute, not `layer-N`: the one node that
  # restores into --model's model completely is the model's.
  layout = _sources.find_optimizer(
      testing.fixture_path("legacy", "ckpt_tf23_sub_sgd_dynamic"))
  paths = _sources._paths(layout.graph)  # pylint: disable=protected-access
  node = _sources._subclassed_model_node(  # pylint: disable=protected-access
      layout, models.sub_model(), paths)
  assert node is not None and paths[node] == ("model",)
  # A model whose weights do not all have a place there is not it.
  assert _sources._subclassed_model_node(  # pylint: disable=protected-access
      layout, models.seq_model(), paths) is None


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


def test_the_jobs_next_save_is_numbered_as_the_old_jobs_was(tmp_path):
  # The old job saved twice (as ckpt-40): its next manager.save() after a
  # restore writes ckpt-3; so does the migrated job's after restoring NEW.
  old = testing.fixture_path("legacy", "demo_tf23")
  new = str(tmp_path / "new")
  assert main(["convert", old, new, "--model",
               "tests.cli.models:demo_model"]) == 0
  for directory, expected in ((old, "ckpt-3"), (new, "ckpt-3")):
    ckpt = tf.train.Checkpoint()
    ckpt.restore(tf.train.latest_checkpoint(directory)).expect_partial()
    manager = tf.train.CheckpointManager(ckpt, str(tmp_path / "next"),
                                         max_to_keep=None)
    assert manager.save().endswith(expected), directory
    shutil.rmtree(tmp_path / "next")


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


# TF 2.x slot names -> Keras 3's slot lists, for the fixtures' optimizers.
_SLOTS = {"m": "_momentums", "v": "_velocities", "momentum": "momentums"}


def _convert(capsys, old, new, *options):
  code = main(["convert", old, str(new), *options])
  out, err = capsys.readouterr()
  assert code == 0, err
  assert "read back exactly" in out
  return err


def _restore_with_extras(directory, model, inner, extras=None):
  """A Keras 3 job's own resume, with its own root variables."""
  opt = keras.optimizers.LossScaleOptimizer(inner)
  status = tf.train.Checkpoint(model=model, optimizer=opt,
                               **(extras or {})).restore(
                                   tf.train.latest_checkpoint(directory))
  opt.build(model.trainable_variables)
  status.assert_consumed()
  return opt


def _assert_state(model, opt, saved, zero_slots=False):
  """`model` and `opt` hold what TF 2.3.4 recorded at the save, exactly."""
  inner = opt.inner_optimizer
  assert int(inner.iterations.numpy()) == saved["iterations"]
  assert float(opt.dynamic_scale.numpy()) == saved["loss_scale"]
  assert int(opt.step_counter.numpy()) == saved["counter"]
  for key, value in saved["weights"].items():
    layer, name = key.split("/")
    variable = getattr(model.get_layer(layer), name)
    np.testing.assert_array_equal(variable.numpy(), value, err_msg=key)
    for slot, slot_value in saved["slots"].get(key, {}).items():
      got = getattr(inner, _SLOTS[slot])[inner._get_variable_index(variable)]  # pylint: disable=protected-access
      np.testing.assert_array_equal(
          got.numpy(), np.zeros_like(slot_value) if zero_slots else
          slot_value, err_msg=f"{key} {slot}")


def _int64_variables(*names):
  return {n: tf.Variable(0, dtype=tf.int64) for n in names}


def _children(directory, depth=2):
  """`{dotted object path: its children's names}` in `directory`'s object
  graph, down to `depth` names."""
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(tf.train.load_checkpoint(str(directory)).get_tensor(
      "_CHECKPOINTABLE_OBJECT_GRAPH"))
  found, todo = {}, [((), 0)]
  while todo:
    path, node = todo.pop()
    children = graph.nodes[node].children
    found[".".join(path)] = sorted(c.local_name for c in children)
    if len(path) < depth:
      todo += [(path + (c.local_name,), c.node_id) for c in children]
  return found


def _holder(model, optimizer):
  """Any object with `.model` and `.optimizer`, as a job's trainer."""
  holder = tf.Module()
  holder.model, holder.optimizer = model, optimizer
  return holder


@pytest.mark.parametrize("paths", [[], ["--model-path", "trainer.model",
                                        "--optimizer-path",
                                        "trainer.optimizer"]])
def test_trainer_job_with_policy_loss_scale(capsys, tmp_path, paths):
  # tests/cli/job_trainer run by TF 2.3.4: model and optimizer on a trainer
  # tf.Module, step and epoch at the root, the policy's loss scale. NEW
  # keeps them there, so the job's own resume code restores it.
  old = testing.fixture_path("convert", "trainer_tf23")
  with open(os.path.join(old, "job.json")) as f:
    record = json.load(f)
  new = tmp_path / "new"
  err = _convert(capsys, old, new, "--model",
                 "tests.cli.models:trainer_job_model", *paths)
  assert "model at trainer.model, optimizer at trainer.optimizer" in err
  assert ("model at trainer.model, optimizer at trainer.optimizer, epoch at "
          "epoch, step at step (their paths in the old checkpoint)") in err
  children = _children(new)
  assert children[""] == ["epoch", "save_counter", "step", "trainer"]
  assert children["trainer"] == ["model", "optimizer"]
  keys = {k for k, _ in tf.train.list_variables(str(new))}
  assert {k.split("/")[0] for k in keys} == {
      "_CHECKPOINTABLE_OBJECT_GRAPH", "epoch", "save_counter", "step",
      "trainer"}
  assert "trainer/optimizer/dynamic_scale/.ATTRIBUTES/VARIABLE_VALUE" in keys
  # A Keras 3 job's own resume, the trainer any object holding both.
  model = models.trainer_job_model()
  opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam())
  opt.build(model.trainable_variables)  # As migrate's rewrite does.
  extras = _int64_variables("step", "epoch")
  tf.train.Checkpoint(trainer=_holder(model, opt), **extras).restore(
      tf.train.latest_checkpoint(new)).assert_existing_objects_matched()
  _assert_state(model, opt, record)
  assert (int(extras["step"].numpy()), int(extras["epoch"].numpy())) == (
      record["step"], record["epoch"]) == (12, 2)
  assert float(opt.dynamic_scale.numpy()) == 8192.0  # Halved twice.


def _trainer_with_epoch(model, opt):
  trainer = _holder(model, opt)
  trainer.epoch = tf.Variable(0, dtype=tf.int64)
  return {"trainer": trainer}


def test_dicts_and_nested_extras(capsys, tmp_path):
  # Model and optimizer in a dict and a list, or on a trainer beside its
  # `trainer.epoch`: NEW keeps all at their paths, restored by the job's
  # own dict, list and trainer.
  for case, model_fn, inner, root in (
      ("tf23_dicts_sgd_manager", "seq_model",
       lambda: keras.optimizers.SGD(momentum=0.9),
       lambda model, opt: {"models": {"main": model}, "optimizers": [opt]}),
      ("tf23_trainer_adam_save", "resume_func_model", keras.optimizers.Adam,
       _trainer_with_epoch)):
    new = tmp_path / case
    _convert(capsys, testing.fixture_path("resume", case), new, "--model",
             f"tests.cli.models:{model_fn}")
    record = _record_resume(case)
    model = getattr(models, model_fn)()
    opt = keras.optimizers.LossScaleOptimizer(inner())
    objects = root(model, opt)
    step = tf.Variable(0, dtype=tf.int64)
    status = tf.train.Checkpoint(step=step, **objects).restore(
        tf.train.latest_checkpoint(new))
    opt.build(model.trainable_variables)
    status.assert_consumed()
    _assert_state(model, opt, record["saved"])
    assert int(step.numpy()) == record["step"]
    if "trainer" in objects:
      assert int(objects["trainer"].epoch.numpy()) == record["epoch"]


def test_save_weights_tf_format(capsys, tmp_path):
  # model.save_weights(prefix): the model is the root, its compiled
  # optimizer under `optimizer` inside it. Keras 3's load_weights reads no
  # TF checkpoint, so NEW is `Checkpoint(model=..., optimizer=...)`.
  case = "weights_tf23_seq_adam_dynamic"
  err = _convert(capsys, testing.fixture_path("legacy", case, "ckpt"),
                 tmp_path / "new", "--model", "tests.cli.models:seq_model")
  assert ("model at model, optimizer at optimizer (the model was the "
          "checkpoint's root)") in err
  model = models.seq_model()
  opt = _restore_with_extras(tmp_path / "new", model, keras.optimizers.Adam())
  _assert_state(model, opt, _record(case))


def test_optimizer_only_checkpoint_with_h5_weights(capsys, tmp_path):
  old = testing.fixture_path("convert", "optonly_h5_tf23")
  with open(old + ".json") as f:
    record = json.load(f)
  # No slots, so the class is told by --optimizer: beta_1 and beta_2 say
  # only "Adam, Adamax or Nadam".
  model_option = ["--model", "tests.cli.models:seq_model", "--optimizer",
                  "Adam"]
  assert main(["convert", old, str(tmp_path / "refused"),
               *model_option]) == 1
  assert "pass --weights-h5 FILE" in capsys.readouterr().err
  err = _convert(capsys, old, tmp_path / "new", *model_option,
                 "--weights-h5", os.path.join(old, "weights.h5"))
  assert "they start at zero" in err
  assert "model at model, optimizer at optimizer, epoch at epoch" in err
  model = models.seq_model()
  extras = _int64_variables("step", "epoch")
  opt = _restore_with_extras(tmp_path / "new", model,
                             keras.optimizers.Adam(), extras)
  # TF saved no slots without their variables: TF's own resume started
  # them at zero too.
  _assert_state(model, opt, record["saved"], zero_slots=True)
  assert (int(extras["step"].numpy()), int(extras["epoch"].numpy())) == (
      record["step"], record["epoch"])


def test_whole_model_h5(capsys, tmp_path):
  h5 = testing.fixture_path("legacy", "h5_tf23_func_adam.h5")
  new = tmp_path / "new"
  err = _convert(capsys, h5, new)
  assert "never stored the dynamic loss scale" in err
  # NEW/model.keras: the model with its optimizer; NEW's checkpoint
  # restores into the model uncompiled and an optimizer of the job's own.
  compiled = keras.models.load_model(new / "model.keras")
  loaded = keras.models.load_model(new / "model.keras", compile=False)
  package = legacy.load_model(h5)  # What the package restores.
  for mine, theirs in zip(loaded.weights, package.weights):
    np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
  opt = _restore_with_extras(new, loaded, keras.optimizers.Adam())
  inner, theirs = opt.inner_optimizer, package.optimizer.inner_optimizer
  assert [v.shape for v in inner.variables] == [v.shape for v in
                                                theirs.variables]
  for mine, value in zip(inner.variables, theirs.variables):
    np.testing.assert_array_equal(mine.numpy(), value.numpy())
  assert int(inner.iterations.numpy()) == 8
  # H5 files never stored the scale: both start again from the initial.
  assert float(opt.dynamic_scale.numpy()) == float(
      package.optimizer.loss_scale.numpy()) == 32768.0
  assert compiled.optimizer.dynamic_growth_steps == 3
  assert compiled.loss == "mse"
  for mine, value in zip(compiled.optimizer.variables, opt.variables):
    np.testing.assert_array_equal(mine.numpy(), value.numpy())


def test_fixed_loss_scale_on_request(capsys, tmp_path):
  case = "ckpt_tf24_seq_sgd_fixed"
  err = _convert(capsys, testing.fixture_path("legacy", case),
                 tmp_path / "new", "--model", "tests.cli.models:seq_model",
                 "--fixed-loss-scale", "32")
  assert "fixed loss scale 32.0 written as" in err and "skipped" in err
  model = models.seq_model()
  opt = _restore_with_extras(tmp_path / "new", model,
                             keras.optimizers.SGD(momentum=0.9))
  record = _record(case)
  _assert_state(model, opt, {**record, "counter": 0})
  assert convert_cmd.FIXED_GROWTH_STEPS == 2**31 - 1


def test_layout_usage_errors(capsys, tmp_path):
  old = testing.fixture_path("convert", "trainer_tf23")
  model = ["--model", "tests.cli.models:trainer_job_model"]
  assert main(["convert", old, str(tmp_path / "n1"), *model,
               "--model-path", "trainer.net"]) == 2
  assert "no 'net' there" in capsys.readouterr().err
  assert main(["convert", old, str(tmp_path / "n2"), *model,
               "--optimizer-path", "step"]) == 2
  assert main(["convert", old, str(tmp_path / "n3"), *model,
               "--fixed-loss-scale", "128"]) == 2
  assert "dynamic loss scale" in capsys.readouterr().err
  assert not os.listdir(tmp_path)


@pytest.mark.parametrize("command", ["convert", "inspect"])
@pytest.mark.parametrize("where, source", [
    ("at import", "raise RuntimeError('no data dir\\n/data/train missing')\n"
     "def make():\n  pass\n"),
    ("in the call", "def make():\n  return {}['layers']\n"),
])
def test_a_builder_that_raises_is_named_as_its_failure(
    capsys, tmp_path, command, where, source):
  del where
  builder = tmp_path / "builder.py"
  builder.write_text(source)
  old = testing.fixture_path("legacy", "demo_tf23")
  paths = [old, str(tmp_path / "new")] if command == "convert" else [old]
  code = main([command, *paths, "--model", f"{builder}:make"])
  err = capsys.readouterr().err.strip().splitlines()[-1]
  assert code == 1
  assert err.startswith(f"refused: --model {builder}:make raised ")
  assert f"at {builder}:" in err  # Where in the user's code.
  assert ("RuntimeError" in err and err.endswith("/data/train missing")) or (
      "KeyError" in err and err.endswith("'layers'"))
  assert "bug in tf_mixed_precision_compat" not in err
  assert sorted(os.listdir(tmp_path)) == ["builder.py"]


def test_a_missing_builder_module_is_a_usage_error(capsys):
  assert main(["inspect", testing.fixture_path("legacy", "demo_tf23"),
               "--model", "tests.cli.no_such_module:make"]) == 2
  assert "cannot import 'tests.cli.no_such_module'" in capsys.readouterr().err


def test_failed_read_back_names_the_values_that_differ():
  model = models.demo_model()
  got = {f"weight/{i}": v for i, v in enumerate(model.weights)}
  expected = {key: v.numpy() for key, v in got.items()}
  expected["weight/1"] = expected["weight/1"].copy()
  expected["weight/1"].ravel()[3] += 1.0
  expected["optimizer/0"] = np.zeros(())
  lines = _verify.differences(got, expected)
  assert len(lines) == 2
  assert lines[0].startswith("optimizer/0 (optimizer/0): not read back")
  bias = model.weights[1]
  assert lines[1] == (
      f"{bias.path} (weight/1): element 3 is {bias.numpy().ravel()[3]!r}, "
      f"written {expected['weight/1'].ravel()[3]!r}")
  assert _verify.differences(got, {k: v.numpy() for k, v in got.items()}) \
      == []


def test_a_read_back_crash_shows_its_error_not_the_log():
  output = ("I0000 oneDNN custom operations are on.\n"
            "Traceback (most recent call last):\n"
            '  File "/x/_verify.py", line 9, in <module>\n'
            "    main()\n"
            '  File "/job/builder.py", line 3, in make\n'
            "    raise ValueError('bad')\n"
            "ValueError: bad\n")
  assert convert_cmd._last_error(output) == (  # pylint: disable=protected-access
      'File "/job/builder.py", line 3, in make\nValueError: bad')


def test_no_loss_scale_usage_errors(capsys, tmp_path):
  # A dynamic scale in the checkpoint, or a fixed one given: not plain.
  old = testing.fixture_path("legacy", "demo_tf23")
  assert main(["convert", old, str(tmp_path / "n1"), "--no-loss-scale",
               "--model", "tests.cli.models:demo_model"]) == 2
  assert "holds a dynamic loss scale (1024.0)" in capsys.readouterr().err
  fixed = testing.fixture_path("legacy", "ckpt_tf24_seq_sgd_fixed")
  assert main(["convert", fixed, str(tmp_path / "n2"), "--no-loss-scale",
               "--fixed-loss-scale", "128",
               "--model", "tests.cli.models:seq_model"]) == 2
  assert "--fixed-loss-scale says the job had one" in \
      capsys.readouterr().err
  assert main(["convert", fixed, str(tmp_path / "n3"),
               "--model", "tests.cli.models:seq_model"]) == 1
  assert "--no-loss-scale if the job had no loss-scale" in \
      capsys.readouterr().err
  assert os.listdir(tmp_path) == []
