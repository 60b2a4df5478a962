"""`migrate`: TF 2.3/2.4 mixed-precision API uses, reported and rewritten.

The rewrites keep formatting and comments; the examples rewritten with
`--write` run without the package and train as the package runs them.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_mixed_precision_compat.cli import _rewrite
from tf_mixed_precision_compat.cli import _rewrite_grads
from tf_mixed_precision_compat.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")


def _migrate(source):
  return _rewrite.migrate_source(source)


def _statuses(findings):
  return [(f.api, f.status) for f in findings]


@pytest.mark.parametrize("name, expected", [
    ("tf23_custom_loop.py", {
        "keras.mixed_precision.experimental.Policy",
        "keras.mixed_precision.experimental.set_policy",
        "keras.mixed_precision.experimental.LossScaleOptimizer",
        "LossScaleOptimizer.get_scaled_loss",
        "LossScaleOptimizer.get_unscaled_gradients",
        "import tf_mixed_precision_compat"}),
    ("tf24_fit_mirrored.py", {
        "keras.mixed_precision.LossScaleOptimizer",
        "keras.mixed_precision.set_global_policy",
        "LossScaleOptimizer.loss_scale", "LossScaleOptimizer.dynamic_counter",
        "import tf_mixed_precision_compat"}),
    ("tf1_session.py", {
        "tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer",
        "import tf_mixed_precision_compat"}),
])
def test_examples_are_fully_reported(name, expected):
  with open(os.path.join(EXAMPLES, name)) as f:
    code, findings = _migrate(f.read())
  assert expected <= {f.api for f in findings}
  assert all(f.status in ("rewrite", "native") for f in findings)
  assert "tf_mixed_precision_compat" not in code
  compile(code, name, "exec")


def test_rewrites_keep_comments_and_layout():
  source = (
      "import tensorflow as tf\n"
      "import tf_mixed_precision_compat.auto  # pylint: disable=unused-import"
      "\n\n"
      "opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(\n"
      "    tf.keras.optimizers.SGD(0.1),  # the inner one\n"
      "    tf.mixed_precision.experimental.DynamicLossScale(\n"
      "        initial_loss_scale=1024, increment_period=50))\n"
      "def step(loss):\n"
      "  # scale it\n"
      "  return opt.get_scaled_loss(loss)   # keep\n")
  code, findings = _migrate(source)
  assert code == (
      "import tensorflow as tf\n"
      "import keras\n\n"
      "opt = keras.optimizers.LossScaleOptimizer(\n"
      "    tf.keras.optimizers.SGD(0.1),  # the inner one\n"
      "    initial_scale=1024, dynamic_growth_steps=50)\n"
      "def step(loss):\n"
      "  # scale it\n"
      "  return opt.scale_loss(loss)   # keep\n")
  assert all(f.status == "rewrite" for f in findings)
  assert not any(f.api.endswith("DynamicLossScale") for f in findings)


@pytest.mark.parametrize("line", [
    "opt = mp.LossScaleOptimizer(inner, loss_scale=1000)",
    "opt = mp.LossScaleOptimizer(inner, tf.mixed_precision.experimental."
    "DynamicLossScale(multiplier=4))",
    "opt = tf.keras.mixed_precision.LossScaleOptimizer(inner, dynamic=False, "
    "initial_scale=12)",
    "opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(inner)",
    "print(thing.loss_scale)",
])
def test_changes_of_behaviour_stay_report_entries(line):
  source = ("import tensorflow as tf\n"
            "import tf_mixed_precision_compat.auto\n"
            "from tensorflow.keras.mixed_precision import experimental as mp\n"
            + line + "\n")
  code, findings = _migrate(source)
  assert "manual" in {f.status for f in findings}
  # The call is left as it is (a loss-scale class inside may move to its
  # tf.compat.v1 name: the same class).
  assert line.split("(")[0] + "(" in code
  assert "import tf_mixed_precision_compat.auto" in code  # still needed


def test_loss_scale_classes_keep_their_tf_class():
  code, findings = _migrate(
      "import tensorflow as tf\n"
      "s = tf.mixed_precision.experimental.FixedLossScale(128)\n"
      "o = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer("
      "tf.compat.v1.train.GradientDescentOptimizer(1.), s)\n")
  assert "tf.compat.v1.mixed_precision.FixedLossScale(128)" in code
  assert "tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(" \
      in code
  assert _statuses(findings)[0][1] == "rewrite"


def test_command_reports_and_writes(capsys, tmp_path):
  path = tmp_path / "job.py"
  shutil.copy(os.path.join(EXAMPLES, "tf23_custom_loop.py"), path)
  before = path.read_text()
  assert main(["migrate", str(path), "--verbose"]) == 0
  out = capsys.readouterr().out
  assert "[rewrite (with --write)] LossScaleOptimizer.get_scaled_loss" in out
  assert path.read_text() == before  # a report only
  assert main(["migrate", str(path), "--write", "--json"]) == 0
  report = json.loads(capsys.readouterr().out)[str(path)]
  assert {f["status"] for f in report} == {"rewrite"}
  assert "optimizer.scale_loss(loss)" in path.read_text()
  bad = tmp_path / "bad.py"
  bad.write_text("def (:\n")
  assert main(["migrate", str(bad)]) == 3


def _run(path, with_package):
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env["TF_CPP_MIN_LOG_LEVEL"] = "2"
  if with_package:
    env["PYTHONPATH"] = ROOT
  result = subprocess.run([sys.executable, str(path)], capture_output=True,
                          text=True, env=env, cwd=os.path.dirname(path),
                          check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stdout


def test_mirrored_custom_loop_runs_without_the_package_and_matches(tmp_path):
  # Seeded weights: the Keras 3 job prints what the package's run prints,
  # step count, skipped steps, the loss scale's path, counter and losses.
  original = os.path.join(EXAMPLES, "tf24_custom_loop_mirrored.py")
  path = tmp_path / "tf24_custom_loop_mirrored.py"
  shutil.copy(original, path)
  assert main(["migrate", str(path), "--write"]) == 0
  assert "optimizer.build(model.trainable_variables)" in path.read_text()
  keras3, package = _run(path, False), _run(original, True)
  assert "skipped steps: 0" not in package
  assert keras3 == package


def test_builds_where_tf2x_had_variables():
  code, findings = _migrate(
      "import tensorflow as tf\n"
      "model = make()\n"
      "opt = tf.keras.mixed_precision.LossScaleOptimizer(inner)\n"
      "print(float(opt.loss_scale))\n"
      "grads = opt.get_unscaled_gradients(grads)\n"
      "opt.apply_gradients(zip(grads, model.trainable_variables))\n\n"
      "# resume\n"
      "tf.train.Checkpoint(model=m2, optimizer=m2.optimizer).restore(p)\n")
  assert code == (
      "import tensorflow as tf\n"
      "import keras\n\n"
      "model = make()\n"
      "opt = keras.optimizers.LossScaleOptimizer(inner)\n"
      "opt.build(model.trainable_variables)\n"
      "print(float(tf.convert_to_tensor(opt.dynamic_scale)))\n"
      "grads = grads\n"
      "opt.apply_gradients(zip(grads, model.trainable_variables))\n\n"
      "# resume\n"
      "if not m2.optimizer.built: m2.optimizer.build(m2.trainable_variables)"
      "\n"
      "tf.train.Checkpoint(model=m2, optimizer=m2.optimizer).restore(p)\n")
  assert {f.status for f in findings} == {"rewrite"}


def test_rewritten_example_runs_without_the_package_and_matches(tmp_path):
  original = os.path.join(EXAMPLES, "tf23_custom_loop.py")
  path = tmp_path / "tf23_custom_loop.py"
  shutil.copy(original, path)
  assert main(["migrate", str(path), "--write"]) == 0
  keras3, package = _run(path, False), _run(original, True)
  # The example's weights start unseeded, so losses (and how many early
  # steps overflow) vary run to run; tests/cli/test_end_to_end.py compares
  # a resumed job number by number.
  for out in (keras3, package):
    steps, skipped = map(int, re.search(
        r"steps: (\d+)\noverflowed \(skipped\) steps: (\d+)", out).groups())
    first, last = map(float, re.search(r"loss: (\S+) -> (\S+)",
                                       out).groups())
    assert steps == 32 and skipped >= 1 and last < first / 4


def test_tf1_session_job_runs_on_tf_own_v1_class(tmp_path):
  # Rewritten to tf.compat.v1.mixed_precision's names: TF 2.21's own class,
  # which makes the package's decisions (tests/test_examples.py).
  original = os.path.join(EXAMPLES, "tf1_session.py")
  path = tmp_path / "tf1_session.py"
  shutil.copy(original, path)
  assert main(["migrate", str(path), "--write"]) == 0
  keras3, package = _run(path, False), _run(original, True)
  pattern = (r"steps run: (\d+), applied: (\d+), skipped: (\d+)\n"
             r"loss scale: (\d+) -> (\d+)")
  assert re.search(pattern, keras3).groups() == re.search(
      pattern, package).groups()


def test_keras3_code_has_nothing_to_migrate(capsys, tmp_path):
  path = tmp_path / "k3.py"
  source = ("import keras\n"
            "keras.mixed_precision.set_global_policy('mixed_float16')\n"
            "opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())"
            "\n")
  path.write_text(source)
  assert main(["migrate", str(path), "--write"]) == 0
  assert path.read_text() == source
  assert "need manual work" in capsys.readouterr().out


def test_imported_names_and_their_imports():
  code, findings = _migrate(
      "import tensorflow as tf\n"
      "from tensorflow.keras.mixed_precision.experimental import (\n"
      "    LossScaleOptimizer, Policy, set_policy)\n"
      "from tensorflow.keras.mixed_precision import experimental as mp\n"
      "set_policy(Policy('mixed_float16'))\n"
      "opt = LossScaleOptimizer(tf.keras.optimizers.SGD(), 'dynamic')\n")
  assert code == (
      "import tensorflow as tf\n"
      "import keras\n\n"
      "keras.mixed_precision.set_global_policy("
      "keras.mixed_precision.Policy('mixed_float16'))\n"
      "opt = keras.optimizers.LossScaleOptimizer(tf.keras.optimizers.SGD())\n")
  assert len(findings) == 3


def _header(*lines):
  return "\n".join(("import tensorflow as tf",
                    "import tf_mixed_precision_compat.auto",
                    "from tensorflow.keras.mixed_precision import "
                    "experimental as mp") + lines) + "\n"


def _rewritten(source):
  """The migrated code; every finding a rewrite and the run idempotent."""
  code, findings = _migrate(source)
  assert {f.status for f in findings} <= {"rewrite", "native"}, findings
  assert _migrate(code)[0] == code
  compile(code, "job.py", "exec")
  return code


def _manual(source):
  """The manual findings' texts; the code keeps the package."""
  code, findings = _migrate(source)
  assert _migrate(code)[0] == code
  manual = [f for f in findings if f.status == "manual"
            and f.api != "import tf_mixed_precision_compat"]
  if any(f.old_api for f in manual):
    assert "import tf_mixed_precision_compat.auto" in code
  return [f.change for f in manual]


@pytest.mark.parametrize("policy", [
    "mp.Policy('mixed_float16', loss_scale='dynamic')",
    "mp.Policy('mixed_float16', 'dynamic')",
    "mp.Policy('mixed_float16', loss_scale='auto')",
    "mp.Policy('mixed_float16', loss_scale=tf.mixed_precision.experimental."
    "DynamicLossScale())",
])
def test_policy_loss_scale_keras3_compile_gives_is_dropped(policy):
  code = _rewritten(_header(f"policy = {policy}", "mp.set_policy(policy)",
                            "model.compile('sgd', 'mse')"))
  assert "policy = keras.mixed_precision.Policy('mixed_float16')\n" in code
  assert "DynamicLossScale" not in code


@pytest.mark.parametrize("loss_scale, says", [
    ("128", "fixed loss scale"),
    ("None", "auto_scale_loss=False"),
    ("tf.mixed_precision.experimental.DynamicLossScale(initial_loss_scale=8)",
     "initial_scale=..."),
])
def test_policy_loss_scale_compile_used_is_reported(loss_scale, says):
  (change,) = _manual(_header(
      f"policy = mp.Policy('mixed_float16', loss_scale={loss_scale})",
      "mp.set_policy(policy)", "model.compile('sgd', 'mse')"))
  assert says in change


def test_policy_loss_scale_moves_to_the_optimizer_and_reads_keep_tf_class():
  code = _rewritten(_header(
      "policy = mp.Policy('mixed_float16', loss_scale=tf.mixed_precision."
      "experimental.DynamicLossScale(initial_loss_scale=256, "
      "increment_period=10))",
      "mp.set_policy(policy)",
      "print('Loss scale: %s' % policy.loss_scale)",
      "opt = mp.LossScaleOptimizer(tf.keras.optimizers.SGD(), "
      "policy.loss_scale)",
      "fixed = mp.Policy('mixed_float16', loss_scale=64)",
      "print(fixed.loss_scale, mp.Policy('float32').loss_scale)"))
  assert ("opt = keras.optimizers.LossScaleOptimizer(tf.keras.optimizers."
          "SGD(), initial_scale=256, dynamic_growth_steps=10)") in code
  assert ("print('Loss scale: %s' % tf.compat.v1.mixed_precision."
          "DynamicLossScale(initial_loss_scale=256, increment_period=10))"
          in code)
  assert "print(tf.compat.v1.mixed_precision.FixedLossScale(64), None)" in code


def test_global_policy_loss_scale_through_a_name():
  code = _rewritten(_header(
      "mp.set_policy('mixed_float16')",
      "loss_scale = mp.global_policy().loss_scale",
      "opt = mp.LossScaleOptimizer(tf.keras.optimizers.Adam(), loss_scale)"))
  assert ("opt = keras.optimizers.LossScaleOptimizer("
          "tf.keras.optimizers.Adam())") in code


def test_a_policy_only_printed_loses_its_loss_scale_even_beside_compile():
  # TF's r2.3 guide: this policy is built to show its loss scale, never set
  # or compiled with, so its loss scale reaches no optimizer.
  code = _rewritten(_header(
      "new_policy = mp.Policy('mixed_float16', loss_scale=1024)",
      "print(new_policy.loss_scale, new_policy.name)",
      "model.compile('sgd', 'mse')"))
  assert "new_policy = keras.mixed_precision.Policy('mixed_float16')\n" in code
  assert "print(tf.compat.v1.mixed_precision.FixedLossScale(1024), " in code


@pytest.mark.parametrize("use", ["mp.set_policy(new_policy)",
                                 "layer = tf.keras.layers.Dense(1, "
                                 "dtype=new_policy)", "configure(new_policy)"])
def test_a_policy_handed_on_keeps_its_loss_scale_question(use):
  (change,) = _manual(_header(
      "new_policy = mp.Policy('mixed_float16', loss_scale=1024)", use,
      "model.compile('sgd', 'mse')"))
  assert "compile() used this scale" in change


def test_a_run_time_policy_loss_scale_is_not_made_a_dynamic_loss_scale():
  # Model Garden's NCF: the policy's loss scale is a flag's value, and the
  # optimizer takes it through global_policy(); a second --write ran into
  # the first one's `DynamicLossScale(FLAGS, default_for_fp16=...)`.
  source = _header(
      "policy = mp.Policy('mixed_float16', loss_scale=flags_core."
      "get_loss_scale(FLAGS, default_for_fp16='dynamic'))",
      "mp.set_policy(policy)",
      "opt = mp.LossScaleOptimizer(tf.keras.optimizers.Adam(), "
      "loss_scale=mp.global_policy().loss_scale)")
  changes = _manual(source)
  assert "DynamicLossScale(FLAGS" not in _migrate(source)[0]
  assert any("only known at run time (flags_core.get_loss_scale(" in c
             for c in changes)


def test_unknown_dynamic_loss_scale_argument_is_reported_not_a_crash():
  (change,) = _manual(_header(
      "opt = mp.LossScaleOptimizer(tf.keras.optimizers.Adam(), "
      "loss_scale=tf.mixed_precision.experimental.DynamicLossScale("
      "FLAGS, default_for_fp16='dynamic'))"))
  assert "DynamicLossScale takes no argument 'default_for_fp16'" in change


def test_unknown_policy_loss_scale_read_is_reported():
  (change,) = _manual(_header("def f(policy):", "  return policy.loss_scale"))
  assert "dynamic_scale" in change


def test_graph_rewrite_with_keras_optimizer_is_grappler_and_native_lso():
  code = _rewritten(_header(
      "model = make_model()",
      "opt = tf.keras.optimizers.Adam(1e-3)",
      "opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(",
      "    opt, loss_scale='dynamic')",
      "opt.apply_gradients(zip(grads, model.trainable_variables))",
      "tf.train.experimental.disable_mixed_precision_graph_rewrite()"))
  assert ("tf.config.optimizer.set_experimental_options("
          "{'auto_mixed_precision': True})\n"
          "opt = keras.optimizers.LossScaleOptimizer(\n    opt)\n"
          "opt.build(model.trainable_variables)\n") in code
  assert code.endswith("tf.config.optimizer.set_experimental_options("
                       "{'auto_mixed_precision': False})\n")


def test_graph_rewrite_with_v1_optimizer_keeps_tf_function():
  code = _rewritten(_header(
      "opt = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9)",
      "opt = tf.compat.v1.train.experimental."
      "enable_mixed_precision_graph_rewrite(opt, 128)"))
  assert ("opt = tf.compat.v1.mixed_precision."
          "enable_mixed_precision_graph_rewrite(opt, 128)") in code


def test_graph_rewrite_of_an_unknown_optimizer_is_reported():
  (change,) = _manual(_header(
      "def wrap(opt):",
      "  return tf.train.experimental.enable_mixed_precision_graph_rewrite("
      "opt)"))
  assert "auto_mixed_precision" in change and "tf.compat.v1" in change


def test_optimizer_methods_and_attributes_keras3_renamed():
  code = _rewritten(_header(
      "import horovod.tensorflow as hvd",
      "def configure_optimizer(optimizer):",
      "  return mp.LossScaleOptimizer(optimizer, 'dynamic')",
      "optimizer = configure_optimizer(tf.keras.optimizers.SGD(0.1))",
      "hvd.broadcast_variables(optimizer.variables(), root_rank=0)",
      "print(optimizer.lr, optimizer.loss_scale())",
      "assert isinstance(optimizer, mp.LossScaleOptimizer)",
      "opt = parser.parse_args()",
      "print(opt.lr, model.variables())"))
  assert "hvd.broadcast_variables(optimizer.variables, root_rank=0)" in code
  assert ("print(optimizer.learning_rate, tf.convert_to_tensor("
          "optimizer.dynamic_scale))") in code
  assert "isinstance(optimizer, keras.optimizers.LossScaleOptimizer)" in code
  assert "print(opt.lr, model.variables())" in code  # Not optimizers.


def test_apply_gradients_tf2x_arguments():
  code = _rewritten(_header(
      "model = make_model()",
      "opt = mp.LossScaleOptimizer(tf.keras.optimizers.SGD(), 'dynamic')",
      "grads = opt.get_unscaled_gradients(grads)",
      "opt.apply_gradients(zip(grads, model.trainable_variables), 'apply',",
      "                    experimental_aggregate_gradients=True)"))
  assert "opt.apply_gradients(zip(grads, model.trainable_variables))" in code
  (change,) = _manual(_header(
      "opt = mp.LossScaleOptimizer(tf.keras.optimizers.SGD(), 'dynamic')",
      "opt.build(v)", "grads = opt.get_unscaled_gradients(grads)",
      "opt.apply_gradients(zip(grads, v), "
      "experimental_aggregate_gradients=False)"))
  assert "aggregates across replicas itself" in change
  own = _header("opt = MyOptimizer()", "opt.apply_gradients(gv, 1.0)")
  assert "opt.apply_gradients(gv, 1.0)" in _migrate(own)[0]


def test_build_is_inserted_only_after_a_model_in_the_same_scope():
  trainer = ("class Trainer(tf.Module):",
             "  def __init__(self, model):",
             "    self.model = model",
             "    self.optimizer = mp.LossScaleOptimizer(",
             "        tf.keras.optimizers.SGD(), 'dynamic')",
             "  @tf.function",
             "  def step(self, grads):",
             "    self.optimizer.apply_gradients(",
             "        zip(grads, self.model.trainable_variables))")
  assert ("        tf.keras.optimizers.SGD())\n"
          "    self.optimizer.build(self.model.trainable_variables)\n"
          in _rewritten(_header(*trainer)))
  # Two models, and the variables it applies to are neither's.
  (change,) = _manual(_header(
      *trainer[:3], "    self.critic_model = c", *trainer[3:-1],
      "        zip(grads, self.trainable_variables))"))
  assert "self.optimizer.build(" in change and "which model" in change
  # Two models: the one whose variables it applies to.
  code = _rewritten(_header(*trainer[:3], "    self.critic_model = c",
                            *trainer[3:]))
  assert "    self.optimizer.build(self.model.trainable_variables)\n" in code
  (change,) = _manual(_header(
      "class Trainer(tf.Module):",
      "  def train(self):",
      "    optimizer = mp.LossScaleOptimizer(tf.keras.optimizers.SGD(), "
      "'dynamic')",
      "    grads = optimizer.get_unscaled_gradients(grads)",
      "    optimizer.apply_gradients(zip(grads, self.trainable_variables))"))
  assert "not known to be a model's variables" in change


@pytest.mark.parametrize("scaling", ["", "scaled", "scaled and unscaled"])
def test_a_wrapper_that_unscales_nothing_is_not_made_one_that_unscales(
    scaling):
  # An object-detection trainer: raw gradients, clipped, applied through a
  # TF 2.3 wrapper, which only skipped non-finite steps; Keras 3's would
  # divide them by 32768 and the job would stop learning. (TF applied
  # scaled gradients as they were too, if the job never unscaled them.)
  lines = ("def train(model, clip):",
           "  optimizer = tf.keras.optimizers.SGD(0.01, momentum=0.9)",
           "  optimizer = mp.LossScaleOptimizer(optimizer, loss_scale="
           "'dynamic')",
           "  @tf.function",
           "  def step(x):",
           "    with tf.GradientTape() as tape:",
           "      loss = tf.reduce_mean(model(x))" + (
               "\n      loss = optimizer.get_scaled_loss(loss)" if scaling
               else ""),
           "    grads = tape.gradient(loss, model.trainable_variables)" + (
               "\n    grads = optimizer.get_unscaled_gradients(grads)"
               if "unscaled" in scaling else ""),
           "    grads, _ = tf.clip_by_global_norm(grads, clip)",
           "    optimizer.apply_gradients(zip(grads, "
           "model.trainable_variables))",
           "    return optimizer.iterations")
  code, findings = _migrate(_header(*lines))
  lso = [f for f in findings
         if f.api == "keras.mixed_precision.experimental.LossScaleOptimizer"]
  assert lso[0].status == "rewrite"
  assert "keras.optimizers.LossScaleOptimizer(optimizer)" in code
  # TF 2.x applied what it was given: so does the migrated apply.
  assert ("optimizer.apply_gradients(_as_given(zip(grads, "
          "model.trainable_variables), optimizer))") in code
  assert ("applied as given" in lso[0].change) == ("unscaled" not in scaling)
  assert _migrate(code)[0] == code


@pytest.mark.parametrize("use", ["opt.minimize(loss, v)",
                                 "model.compile(opt, 'mse')", "return opt",
                                 "train(opt)"])
def test_a_wrapper_scaling_elsewhere_is_rewritten(use):
  code = _rewritten(_header(
      "def f(model, loss, v):",
      "  opt = mp.LossScaleOptimizer(tf.keras.optimizers.SGD(), 'dynamic')",
      "  " + use))
  assert "keras.optimizers.LossScaleOptimizer(" in code


def test_write_twice_changes_nothing(tmp_path):
  path = tmp_path / "job.py"
  path.write_text(_header(
      "model = tf.keras.Sequential([tf.keras.layers.Dense(1)])",
      "model.compile(mp.LossScaleOptimizer(tf.keras.optimizers.SGD(), "
      "'dynamic'), 'mse')",
      "tf.train.Checkpoint(model=model, optimizer=model.optimizer)"))
  assert main(["migrate", str(path), "--write"]) == 0
  once = path.read_text()
  assert once.count("model.optimizer.build(") == 1
  assert main(["migrate", str(path), "--write"]) == 0
  assert path.read_text() == once


def test_report_is_a_line_per_file_and_the_manual_uses(capsys, tmp_path):
  done, todo = tmp_path / "done.py", tmp_path / "todo.py"
  shutil.copy(os.path.join(EXAMPLES, "tf23_custom_loop.py"), done)
  todo.write_text(_header("opt = mp.LossScaleOptimizer(inner, 1000)"))
  assert main(["migrate", str(done), str(todo)]) == 1
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == f"{done}: 7 uses: 7 to rewrite (--write), 0 native, " \
      "0 manual, 0 deviations; runs without the package: yes, once rewritten"
  assert lines[1].startswith(f"{todo}: 2 uses: 0 to rewrite")
  assert lines[1].endswith("2 manual, 0 deviations; runs without the "
                           "package: no: the MANUAL uses first")
  assert lines[2] == (f"  {todo}:2:1: [MANUAL] import "
                      "tf_mixed_precision_compat: kept until the uses marked "
                      "MANUAL are changed by hand")
  assert lines[3].startswith(f"  {todo}:4:7: [MANUAL] keras.mixed_precision."
                             "experimental.LossScaleOptimizer: not rewritten")
  assert len(lines) == 5 and "need manual work" in lines[-1]
  assert main(["migrate", str(done), "--verbose"]) == 0
  assert len(capsys.readouterr().out.splitlines()) == 2 + 2 * 7


def test_optimizers_from_factories_are_built_or_reported():
  code, findings = _migrate(_header(
      "def configure_optimizer(optimizer, use_float16=True):",
      "  if use_float16:",
      "    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)",
      "  return optimizer",
      "def make():",
      "  return configure_optimizer(tf.keras.optimizers.Adam())",
      "model = make_model()",
      "opt = configure_optimizer(tf.keras.optimizers.SGD(0.1))",
      "opt.apply_gradients(zip(grads, model.trainable_variables))",
      "class Trainer:",
      "  def __init__(self):",
      "    self.optimizer = make()"))
  assert ("opt = configure_optimizer(tf.keras.optimizers.SGD(0.1))\n"
          "opt.build(model.trainable_variables)\n") in code
  (note,) = [f for f in findings if f.status == "manual"]
  assert note.api == "self.optimizer = LossScaleOptimizer(...)"
  assert "tf_mixed_precision_compat" not in code  # Keras 3 code throughout.
  assert _migrate(code)[0] == code


@pytest.mark.parametrize("then, dropped", [
    ("opt.apply_gradients(zip(grads, v))", True),
    ("opt.apply_gradients(list(zip(grads, v)))", True),
    ("ok = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) "
     "for g in grads])\nopt.apply_gradients(zip(grads, v))", True),
    ("grads, _ = tf.clip_by_global_norm(grads, 1.0)\n"
     "opt.apply_gradients(zip(grads, v))", False),
    ("accumulated = [a + g for a, g in zip(accumulated, grads)]", False),
])
def test_unscale_is_dropped_only_when_apply_gradients_alone_reads_it(
    then, dropped):
  code, findings = _migrate(_header(
      "opt = mp.LossScaleOptimizer(tf.keras.optimizers.SGD(), 'dynamic')",
      "grads = opt.get_unscaled_gradients(scaled)", then))
  (finding,) = [f for f in findings
                if f.api.endswith("get_unscaled_gradients")]
  assert finding.status == "rewrite"
  assert "get_unscaled_gradients" not in code
  assert ("grads = scaled\n" in code) == dropped
  assert ("def _times(" in code) != dropped
  if not dropped:  # TF's products, and what is applied reaches the inner.
    assert "grads = _unscaled(scaled, opt)\n" in code
    assert ("opt.apply_gradients(_as_given(zip(grads, v), opt))" in code) == (
        "apply_gradients" in then)
  assert _migrate(code)[0] == code


def _helpers():
  namespace = {"tf": tf}
  exec(_rewrite_grads.HELPER, namespace)  # pylint: disable=exec-used
  return namespace


def test_helpers_unscale_as_tf_and_apply_as_given_bit_for_bit():
  helpers = _helpers()
  inner = keras.optimizers.SGD(0.5)
  opt = keras.optimizers.LossScaleOptimizer(inner, initial_scale=2.0 ** 10)
  v = keras.Variable(np.zeros((3,), "float32"))
  scaled = tf.constant([3e-30, 1.0, 7e30], tf.float32)
  sparse = tf.IndexedSlices(scaled, tf.constant([0, 1, 2]), tf.constant([3]))
  # Unbuilt: the initial scale, as the first step's variable will hold.
  tf_unscaled = scaled * tf.cast(1.0 / tf.constant(2.0 ** 10), tf.float32)
  (mine,) = helpers["_unscaled"]([scaled], opt)
  np.testing.assert_array_equal(mine.numpy(), tf_unscaled.numpy())
  (mine_sparse,) = helpers["_unscaled"]([sparse], opt)
  assert isinstance(mine_sparse, tf.IndexedSlices)
  np.testing.assert_array_equal(mine_sparse.values.numpy(),
                                tf_unscaled.numpy())
  assert helpers["_unscaled"]([None], opt) == [None]
  opt.build([v])
  opt.apply_gradients(helpers["_as_given"]([(tf_unscaled, v)], opt))
  expected = np.zeros((3,), "float32") - np.float32(0.5) * tf_unscaled.numpy()
  np.testing.assert_array_equal(v.numpy(), expected)
  plain = keras.optimizers.SGD(0.5)  # Not a wrapper: times 1.
  ((g, _),) = helpers["_as_given"]([(tf_unscaled, v)], plain)
  np.testing.assert_array_equal(g.numpy(), tf_unscaled.numpy())


def test_policy_loss_scale_known_at_run_time_only_is_reported():
  (change,) = _manual(_header(
      "def set_mixed_precision_policy(dtype, loss_scale=None):",
      "  mp.set_policy(mp.Policy('mixed_float16', loss_scale=loss_scale))"))
  assert "only known at run time" in change


_FLAG_POLICY = (
    "def init_tf(flags):",
    "  mp.set_policy(mp.Policy('mixed_float16', loss_scale=flags.loss_scale))")


@pytest.mark.parametrize("run", ["if __name__ == '__main__':\n  init_tf(F)",
                                 "for step in range(3):\n  init_tf(F)"])
def test_a_programs_run_time_policy_scale_nothing_compiles_is_dropped(run):
  # NVIDIA's DLRM: a flag's scale on the global policy of a custom-loop job;
  # only compile() read a policy's loss scale, and nothing here compiles.
  code, findings = _migrate(_header(*_FLAG_POLICY, run))
  (policy,) = [f for f in findings if f.api.endswith(".Policy")]
  assert policy.status == "rewrite"
  assert "this file compiles nothing" in policy.change
  assert "keras.mixed_precision.Policy('mixed_float16')" in code
  assert "loss_scale" not in code


@pytest.mark.parametrize("tail", [
    (),  # A library: its callers' files may compile.
    # A library setting the global policy from a flag: a caller's compile()
    # reads the global policy all the same.
    ("def init_global():",
     "  mp.set_policy(mp.Policy('mixed_float16', loss_scale=FLAGS.scale))"),
    ("if __name__ == '__main__':", "  init_tf(F)",
     "  model.compile('sgd', 'mse')"),  # A program that compiles.
])
def test_a_run_time_policy_scale_compile_may_read_stays_manual(tail):
  changes = _manual(_header(*_FLAG_POLICY, *tail))
  assert len(changes) == 1 + ("def init_global():" in tail)
  assert all("only known at run time" in c for c in changes)


def test_compat_v2_names_and_imports_inside_functions():
  code = _rewritten(
      "import tensorflow.compat.v2 as tf2\n"
      "def setup():\n"
      "  from tensorflow.keras.mixed_precision import experimental as mp\n"
      "  mp.set_policy(mp.Policy('mixed_float16'))\n"
      "  tf2.keras.mixed_precision.experimental.set_policy('float32')\n")
  assert code == (
      "import tensorflow.compat.v2 as tf2\n"
      "import keras\n\n"
      "def setup():\n"
      "  keras.mixed_precision.set_global_policy("
      "keras.mixed_precision.Policy('mixed_float16'))\n"
      "  keras.mixed_precision.set_global_policy('float32')\n")


def test_private_names_of_the_old_api():
  code, findings = _migrate(_header(
      "from tensorflow.python.keras.mixed_precision.experimental import "
      "loss_scale_optimizer as lso",
      "opt = mp.LossScaleOptimizer(tf.keras.optimizers.SGD(), 'dynamic')",
      "inner = opt._optimizer",
      "opt._loss_scale = MyLossScale()"))
  assert "inner = opt.inner_optimizer" in code
  manual = {f.api for f in findings if f.status == "manual"}
  assert {"tensorflow.python.keras.mixed_precision.experimental",
          "LossScaleOptimizer._loss_scale"} <= manual


def test_variables_call_on_optimizer_parameters_but_not_v1_ones():
  code = _migrate(_header(
      "def train_step(opt, d_opt, v1_opt=tf.compat.v1.train.AdamOptimizer())"
      ":",
      "  return opt.variables(), d_opt.variables(), model.variables()"))[0]
  assert "return opt.variables, d_opt.variables, model.variables()" in code


def test_v1_graph_rewrite_endpoint_of_unknown_optimizer_is_tf_own(tmp_path):
  code = _rewritten(_header(
      "def wrap(optimizer):",
      "  return tf.compat.v1.train.experimental."
      "enable_mixed_precision_graph_rewrite(optimizer)"))
  assert "tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(" \
      in code


def test_a_local_keras_package_is_reported_not_shadowed(tmp_path, capsys):
  (tmp_path / "keras").mkdir()
  job = tmp_path / "job.py"
  job.write_text(_header("mp.set_policy('mixed_float16')"))
  before = job.read_text()
  assert main(["migrate", str(job), "--write"]) == 1
  assert job.read_text() == before
  assert "shadows Keras 3" in capsys.readouterr().out


def test_settings_named_loss_scale_are_not_api_uses():
  code, findings = _migrate(_header(
      "opt = tf.keras.mixed_precision.LossScaleOptimizer(inner, dynamic=True,"
      " initial_scale=FLAGS.loss_scale)",
      "if runtime_config.loss_scale and params.runtime.loss_scale:",
      "  pass"))
  assert [f.api for f in findings if "loss_scale" in f.api] == []


@pytest.mark.parametrize("start, exact", [
    ("initial_scale=1024", True), ("initial_scale=2.0 ** 10", True),
    ("initial_scale=2 * 3", False),
    ("initial_scale=1000", False), ("initial_scale=0.5", False),
    ("initial_scale=FLAGS.scale", None)])
def test_a_dynamic_start_is_rewritten_only_when_it_unscales_the_same(
    start, exact):
  # TF 2.x multiplied gradients by the scale's reciprocal, Keras 3 divides
  # them by the scale: the same bits only for powers of two.
  code, findings = _migrate(_header(
      f"opt = tf.keras.mixed_precision.LossScaleOptimizer("
      f"tf.keras.optimizers.SGD(), {start})", "opt.minimize(loss, v)"))
  (lso,) = [f for f in findings if f.api.endswith("LossScaleOptimizer")]
  assert lso.status == ("rewrite" if exact else "manual")
  if not exact:
    assert ("is not a power of two" if exact is False else
            "only known at run time") in lso.change


def test_tf2x_slot_creation_before_a_restore_is_keras3_build_once():
  # The RetinaNet trainer's resume (tests/public_jobs/retinanet_trainer.py):
  # slots made before load_weights fills them.
  code = _rewritten(_header(
      "class Trainer:",
      "  def restore(self, model, path):",
      "    self.optimizer = model.optimizer",
      "    self.optimizer._create_all_weights(model.trainable_variables)",
      "    return model.load_weights(path)"))
  assert ("    self.optimizer.build(model.trainable_variables) if not "
          "self.optimizer.built else None\n") in code
  # Another optimizer kind's own method is left alone.
  v1 = _header("opt = tf.compat.v1.train.AdamOptimizer()",
               "opt._create_all_weights(v)")
  assert "opt._create_all_weights(v)" in _migrate(v1)[0]


def test_private_loss_scale_of_tf_own_v1_wrapper_is_kept():
  # DeepSpeech's harness reads the graph rewrite's `_loss_scale`: migrate
  # keeps TF's own tf.compat.v1 class, which still has it.
  code, findings = _migrate(_header(
      "def create_optimizer(lr):",
      "  return tf.compat.v1.train.AdamOptimizer(lr)",
      "opt = create_optimizer(0.1)",
      "opt = tf.compat.v1.train.experimental."
      "enable_mixed_precision_graph_rewrite(opt)",
      "scale = opt._loss_scale()"))
  (read,) = [f for f in findings if f.api == "LossScaleOptimizer._loss_scale"]
  assert read.status == "native"
  assert "scale = opt._loss_scale()" in code


def test_a_policy_handed_on_in_a_function_defined_before_keeps_its_question():
  # The function runs after the policy exists: its use counts.
  (change,) = _manual(_header(
      "def setup():", "  mp.set_policy(new_policy)",
      "new_policy = mp.Policy('mixed_float16', loss_scale=1024)",
      "setup()", "model.compile('sgd', 'mse')"))
  assert "compile() used this scale" in change


@pytest.mark.parametrize("call, written, mark", [
    # Fixed scales other than powers of two: the factor would change bits.
    ("mp.LossScaleOptimizer(inner, 1000)",
     "keras.optimizers.LossScaleOptimizer(inner, initial_scale=1000)",
     "fixed loss scale 1000 now dynamic"),
    ("mp.LossScaleOptimizer(inner, loss_scale=mp.FixedLossScale(96))",
     "keras.optimizers.LossScaleOptimizer(inner, initial_scale=96)",
     "fixed loss scale 96 now dynamic"),
    ("tf.keras.mixed_precision.LossScaleOptimizer(inner, dynamic=False, "
     "initial_scale=1e3)",
     "keras.optimizers.LossScaleOptimizer(inner, initial_scale=1e3)",
     "fixed loss scale 1e3 now dynamic"),
    ("tf.keras.mixed_precision.LossScaleOptimizer(inner, initial_scale=1000, "
     "dynamic_growth_steps=10)",
     "keras.optimizers.LossScaleOptimizer(inner, initial_scale=1000, "
     "dynamic_growth_steps=10)", "gradients divided by the scale"),
])
def test_deviate_writes_the_closest_form_marked_and_reported(call, written,
                                                             mark):
  source = _header("inner = tf.keras.optimizers.SGD()", f"opt = {call}")
  code, findings = _migrate(source)
  # Without --deviate: nothing that changes results.
  assert f"opt = {call}\n" in code
  assert "deviation" not in {f.status for f in findings}
  code, findings = _rewrite.migrate_source(source, deviate=True)
  line = next(line for line in code.splitlines() if line.startswith("opt"))
  assert line == f"opt = {written}  # migrate --deviate: {mark}"
  deviations = [f for f in findings if f.status == "deviation"]
  assert len(deviations) == 1 and deviations[0].line == 5
  assert "manual" not in {f.status for f in findings}
  assert "tf_mixed_precision_compat" not in code
  again, findings = _rewrite.migrate_source(code, deviate=True)
  assert again == code and "deviation" not in {f.status for f in findings}


def test_deviate_keeps_an_existing_comment_and_leaves_what_it_cannot_say():
  source = _header("opt = mp.LossScaleOptimizer(inner, 1000)  # fp16",
                   "bad = mp.LossScaleOptimizer(*args)")
  code, findings = _rewrite.migrate_source(source, deviate=True)
  assert "initial_scale=1000)  # fp16; migrate --deviate: fixed loss " \
      "scale 1000 now dynamic" in code
  assert "bad = mp.LossScaleOptimizer(*args)" in code
  assert [f.status for f in findings if "LossScaleOptimizer" in f.api] == [
      "deviation", "manual"]


def test_report_counts_deviations(capsys, tmp_path):
  path = tmp_path / "fixed.py"
  path.write_text(_header("opt = mp.LossScaleOptimizer(inner, 1000)"))
  assert main(["migrate", str(path), "--deviate"]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == (f"{path}: 2 uses: 1 to rewrite (--write), 0 native, "
                      "0 manual, 1 deviations; runs without the package: "
                      "yes, once rewritten")
  assert "[deviates (with --write)] keras.mixed_precision.experimental." \
      "LossScaleOptimizer: the fixed loss scale 1000 became" in lines[1]
  assert "initial_scale" not in path.read_text()
  assert main(["migrate", str(path), "--deviate", "--write"]) == 0
  assert "# migrate --deviate: fixed loss scale 1000" in path.read_text()


@pytest.mark.parametrize("compiled", [False, True])
def test_build_from_the_tapes_variables_when_applies_name_none(compiled):
  # NCF's loop: `apply_gradients(grads)` of pairs made elsewhere; every
  # gradient of the file is taken against the model's variables.
  code = _migrate(_header(
      "model = tf.keras.Sequential([tf.keras.layers.Dense(1)])",
      "opt = mp.LossScaleOptimizer(tf.keras.optimizers.Adam(), 'dynamic')",
      *(["model.compile(opt, 'mse')"] if compiled else []),
      "def step(x):",
      "  with tf.GradientTape() as tape:",
      "    loss = opt.get_scaled_loss(model(x))",
      "  grads = tape.gradient(loss, model.trainable_variables)",
      "  pairs = list(zip(grads, model.trainable_variables))",
      "  opt.apply_gradients(pairs)"))[0]
  # Built, the scale is a variable a tf.function reads; fit() builds a
  # compiled model's optimizer itself.
  assert ("opt.build(model.trainable_variables)\n" in code) != compiled
