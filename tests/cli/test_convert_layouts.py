"""`convert` on the layouts real jobs' TF 2.4.4 checkpoints have.

tests/fixtures/convert/layouts_tf24 (tools/gen_convert_layouts.py) is a
`fit` job with a learning-rate schedule of its own code (not stored by TF
2.x) and a DepthwiseConv2D (whose `depthwise_kernel` Keras 3 calls
`kernel`); tests/cli/job_layouts/builder.py is its Keras 3 builder. The
converted checkpoint is restored as docs/migration.md prescribes and must
hold every value TF 2.4.4 recorded, bit for bit. The other TF 2.4.4
fixtures (blocks_tf24, tfops_tf24, adamw_tf24) come from the same tool.
"""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import testing
from tests.cli.job_layouts import builder
from tf_mixed_precision_compat.cli import main
from tf_mixed_precision_compat.legacy import _match

OLD = testing.fixture_path("convert", "layouts_tf24")
BLOCKS = testing.fixture_path("convert", "blocks_tf24")
TFOPS = testing.fixture_path("convert", "tfops_tf24")
BUILDER = "tests.cli.job_layouts.builder"


def _record(old=OLD):
  with open(os.path.join(old, "job.json")) as f:
    return json.load(f)


def _slot(opt, variable, name):
  want = f"{variable.path.replace('/', '_')}_{name}"
  (found,) = [v for v in opt.inner_optimizer.variables if v.name == want]
  return found


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
  new = str(tmp_path_factory.mktemp("layouts") / "new")
  policy = keras.config.dtype_policy()  # The builder sets its own.
  assert main(["convert", OLD, new, "--model", f"{BUILDER}:make_job"]) == 0
  keras.config.set_dtype_policy(policy)
  return new


def _restore_and_check(directory, model, opt, record):
  """The native restore docs/migration.md prescribes, checked against
  every value TF 2.4.4 recorded."""
  opt.build(model.trainable_variables)
  tf.train.Checkpoint(model=model, optimizer=opt).restore(
      tf.train.latest_checkpoint(directory)).assert_consumed()
  assert len(model.weights) == len(record["weights"])
  for variable, (name, value) in zip(model.weights, record["weights"]):
    np.testing.assert_array_equal(variable.numpy(), value, err_msg=name)
  for index, slots in record["slots"].items():
    variable = model.trainable_weights[int(index)]
    for tf_name, value in slots.items():
      keras3 = {"m": "momentum", "v": "velocity"}.get(tf_name, tf_name)
      np.testing.assert_array_equal(
          _slot(opt, variable, keras3).numpy(), value,
          err_msg=f"{variable.path} {tf_name}")
  assert int(opt.inner_optimizer.iterations.numpy()) == record["iterations"]
  assert float(opt.dynamic_scale.numpy()) == record["loss_scale"]
  assert int(opt.step_counter.numpy()) == record["counter"]
  assert opt.dynamic_growth_steps == record["growth_steps"]


def test_schedule_and_renamed_weights_restore_natively(converted):
  record = _record()
  model, opt = builder.make_job()
  _restore_and_check(converted, model, opt, record)
  assert model.layers[0].kernel.name == "kernel"  # TF 2.x: depthwise_kernel
  inner = opt.inner_optimizer
  # The job's schedule, at the restored step, gives TF 2.4.4's rate.
  assert np.float32(inner.learning_rate.numpy()) == np.float32(
      record["learning_rate"])


def test_layers_in_a_list_and_a_dict_and_metric_state(capsys, tmp_path):
  # The metric's total and count are left out, said in one line; the
  # weights of the layers held in a list and a dict (model/blocks/0/...,
  # model/heads/main/...) and their slots all come back.
  new = str(tmp_path / "new")
  assert main(["convert", BLOCKS, new, "--growth-steps", "4",
               "--model", f"{BUILDER}:make_blocks"]) == 0
  err = capsys.readouterr().err
  assert ("note: metric state left out (2 values: model/tracker/total, "
          "model/tracker/count): " in err)
  record = _record(BLOCKS)
  model = builder.make_blocks()
  opt = builder.make_blocks_optimizer()
  _restore_and_check(new, model, opt, record)
  assert float(model.tracker.count.numpy()) == 0.0
  assert main(["inspect", BLOCKS, "--model", f"{BUILDER}:make_blocks"]) == 0
  assert "metric state left out" in capsys.readouterr().out


def test_without_the_jobs_optimizer_both_commands_say_why(capsys, tmp_path):
  spec = f"{BUILDER}:make_model"
  assert main(["convert", OLD, str(tmp_path / "new"), "--model", spec]) == 1
  err = capsys.readouterr().err
  assert "stores no learning rate" in err and "optimizer class" not in err
  assert main(["inspect", OLD, "--model", spec, "--json"]) == 1
  plan = json.loads(capsys.readouterr().out)["restore_plan"]
  assert plan["verdict"] == "does not restore"
  assert len(plan["why"]) == 1 and plan["why"][0] in err
  assert os.listdir(tmp_path) == []


def test_the_dry_run_takes_the_jobs_optimizer(capsys):
  assert main(["inspect", OLD, "--model", f"{BUILDER}:make_job"]) == 0
  assert "restores exactly" in capsys.readouterr().out
  assert main(["inspect", OLD, "--model", f"{BUILDER}:make_job",
               "--optimizer", "SGD"]) == 2
  assert "returns the job's optimizer" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(_match.RENAMED_WEIGHTS))
def test_renamed_weights_are_keras3s_names(name):
  layer = getattr(keras.layers, name)(3)
  layer.build((None,) + (5,) * (int(name[-2]) + 1))
  for old, new in _match.RENAMED_WEIGHTS[name].items():
    assert not hasattr(layer, old)
    assert _match.own_variable(layer, old) is getattr(layer, new)


def test_tf_op_layers_do_not_shift_the_weights(capsys, tmp_path):
  # TF 2.4's `layer-N` counted the layers Keras 2 made of tf.nn.relu and
  # the multiply; by it, the second Dense's weights would also reach the
  # third Dense of the Keras 3 model, which makes no such layers.
  names = [n for n, _ in _record(TFOPS)["variables"]]
  assert not any("model/layer-" in n for n in names)  # Only in the graph.
  new = str(tmp_path / "new")
  assert main(["convert", TFOPS, new, "--growth-steps", "4",
               "--model", f"{BUILDER}:make_tfops"]) == 0, \
      capsys.readouterr().err
  _restore_and_check(new, builder.make_tfops(),
                     builder.make_tfops_optimizer(), _record(TFOPS))


@pytest.mark.parametrize("version", ["tf23", "tf24"])
def test_whole_model_h5_with_a_lambda_takes_the_model_from_code(
    capsys, tmp_path, version):
  # The file's Lambda is Python 3.8 bytecode: the model comes from
  # --model, the weights and optimizer state from the file, by layer order.
  h5 = testing.fixture_path("legacy", f"lambda_{version}.h5")
  with open(testing.fixture_path("legacy", f"lambda_{version}.json")) as f:
    record = json.load(f)
  new = str(tmp_path / "new")
  assert main(["convert", h5, new, "--model", f"{BUILDER}:make_lambda"]) \
      == 0, capsys.readouterr().err
  assert "never stored the dynamic loss scale" in capsys.readouterr().err
  assert sorted(os.listdir(new)) == ["checkpoint", "ckpt-1.data-00000-of-00001",
                                     "ckpt-1.index"]
  model = builder.make_lambda()
  opt = keras.optimizers.LossScaleOptimizer(
      keras.optimizers.SGD(0.05, momentum=0.9))
  opt.build(model.trainable_variables)
  tf.train.Checkpoint(model=model, optimizer=opt).restore(
      tf.train.latest_checkpoint(new)).assert_consumed()
  layer = model.get_layer("d")
  for weight in ("kernel", "bias"):
    variable = getattr(layer, weight)
    np.testing.assert_array_equal(variable.numpy(),
                                  record["weights"][f"d/{weight}"])
    np.testing.assert_array_equal(
        _slot(opt, variable, "momentum").numpy(),
        record["slots"][f"d/{weight}"]["momentum"])
  assert int(opt.inner_optimizer.iterations.numpy()) == record["iterations"]
  # H5 files never stored the scale: it starts again, as the package's.
  assert float(opt.dynamic_scale.numpy()) == 2.0**15


def test_an_h5_builder_returning_an_optimizer_is_a_usage_error(capsys,
                                                               tmp_path):
  h5 = testing.fixture_path("legacy", "lambda_tf24.h5")
  assert main(["convert", h5, str(tmp_path / "new"),
               "--model", f"{BUILDER}:make_job"]) == 2
  assert "its own training config" in capsys.readouterr().err


@pytest.mark.parametrize("case, model_fn", [
    ("weights_tf23_seq_adam_dynamic/ckpt", "seq_model"),  # The model root.
    ("weights_tf23_seq_adam_dynamic/ckpt", "func_model"),
    ("ckpt_tf24_func_adam_dynamic", "func_model_swapped"),
    ("demo_tf23", "demo_model_narrow"),
])
def test_inspect_and_convert_give_the_same_verdict_and_reasons(
    capsys, tmp_path, case, model_fn):
  old = testing.fixture_path("legacy", case)
  spec = f"tests.cli.models:{model_fn}"
  inspected = main(["inspect", old, "--model", spec, "--json"])
  plan = json.loads(capsys.readouterr().out)["restore_plan"]
  converted = main(["convert", old, str(tmp_path / "new"), "--model", spec])
  err = capsys.readouterr().err
  assert (inspected == 0) == (converted == 0)
  assert (plan["verdict"] == "restores exactly") == (converted == 0)
  if converted:
    assert "does not restore" in err
    listed = [line[len("  - "):] for line in err.splitlines()
              if line.startswith("  - ")]
    assert listed == plan["why"]


def test_a_name_based_saver_checkpoint_gets_its_native_path(capsys,
                                                            tmp_path):
  # TF 2.3.4's tf.compat.v1 graph job (tests/fixtures/v1_optimizer): no
  # Keras objects; what the statement says restores it, by name, exactly.
  prefix = testing.fixture_path("v1_optimizer", "tf23_saver", "model.ckpt")
  assert main(["inspect", prefix]) == 0
  out = capsys.readouterr().out
  assert "written by: a name-based TF1 checkpoint" in out
  assert "note: its native path is the job's own graph code" in out
  assert "other: good_steps = 1" in out
  assert main(["convert", prefix, str(tmp_path / "new"),
               "--model", "tests.cli.models:seq_model"]) == 1
  assert "tf.compat.v1.train.Saver().restore(sess, path)" in \
      capsys.readouterr().err
  reader = tf.train.load_checkpoint(prefix)
  shapes = reader.get_variable_to_shape_map()
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    variables = {name: tf.compat.v1.Variable(
        tf.zeros(shape, reader.get_variable_to_dtype_map()[name]),
        name=name.replace("/", "_")) for name, shape in shapes.items()}
    tf.compat.v1.train.Saver(variables).restore(sess, prefix)
    for name, variable in variables.items():
      np.testing.assert_array_equal(sess.run(variable),
                                    reader.get_tensor(name), err_msg=name)


ADAMW = testing.fixture_path("convert", "adamw_tf24")


def _adamw_batch(i):
  """tools/gen_convert_layouts.py's batch `i` of the AdamWeightDecay job."""
  rng = np.random.RandomState(200 + i)
  x = rng.normal(size=(8, 5)).astype("float32")
  return x, (x @ np.linspace(-1.0, 1.0, 5)[:, None]).astype("float32")


def _continue(model, opt, steps):
  losses = []
  for i in steps:
    x, y = _adamw_batch(i)
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(model(x) - y))
      scaled = opt.scale_loss(loss)
    opt.apply(tape.gradient(scaled, model.trainable_variables),
              model.trainable_variables)
    losses.append(float(loss.numpy()))
  return losses


def test_adam_weight_decay_resumes_as_keras3s_adamw(capsys, tmp_path):
  # The state converts exactly into the builder's AdamW; its next steps are
  # TF 2.4.4's AdamWeightDecay's within float32 rounding (Keras 3's Adam
  # rounds otherwise than TF's fused kernel: not bit for bit), and not
  # plain Adam's.
  new = str(tmp_path / "new")
  assert main(["convert", ADAMW, new, "--model",
               f"{BUILDER}:make_adamw_job"]) == 0, capsys.readouterr().err
  record = _record(ADAMW)
  model, opt = builder.make_adamw_job()
  _restore_and_check(new, model, opt, record)
  losses = _continue(model, opt, range(6, 10))
  np.testing.assert_allclose(losses, record["continued"]["losses"],
                             rtol=1e-5)
  for variable, value in zip(model.weights, record["continued"]["weights"]):
    np.testing.assert_allclose(variable.numpy(), value, rtol=1e-5,
                               atol=1e-6)
  # Without the decay (plain Adam restored from the same NEW) it is not.
  plain = builder.make_adamw_model()
  adam = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.01),
                                             initial_scale=128,
                                             dynamic_growth_steps=3)
  _restore_and_check(new, plain, adam, record)
  _continue(plain, adam, range(6, 10))
  assert not np.allclose(plain.weights[0].numpy(),
                         record["continued"]["weights"][0], rtol=1e-4)
