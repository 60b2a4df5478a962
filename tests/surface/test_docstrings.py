"""Every public module's docstring examples run and print what they claim."""

import doctest
import importlib

import keras
import pytest

import tf_mixed_precision_compat as mp

MODULES = [
    "cli",
    "cli._api_table",
    "cli._ckpt",
    "cli._explain",
    "cli._facts",
    "cli._files",
    "cli._plan",
    "cli._rewrite",
    "cli._sources",
    "endpoints",
    "graph_rewrite",
    "install",
    "legacy",
    "legacy._deferred",
    "legacy._gate",
    "legacy._loaders",
    "legacy._model_config",
    "legacy._problems",
    "loss_scale",
    "loss_scale._loss_scales",
    "loss_scale.dynamic_state",
    "optimizers._delegation",
    "optimizers._gated_apply",
    "optimizers._inner",
    "optimizers._keras2_config",
    "optimizers._optimizer_v2_methods",
    "optimizers._step",
    "optimizers._experimental_args",
    "optimizers.loss_scale_optimizer",
    "optimizers.experimental_loss_scale_optimizer",
    "optimizers.compat_v1_optimizer",
    "policy",
    "_version_check",
]


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name):
  module = importlib.import_module(f"tf_mixed_precision_compat.{name}")
  keras.config.set_dtype_policy("float32")  # Examples assume the default.
  result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
  assert result.attempted > 0, f"{name} has no runnable example"
  assert result.failed == 0
  # Examples that change global state put it back.
  assert not mp.installed()
  assert not importlib.import_module(
      "tf_mixed_precision_compat.install").compile_integration_enabled()
  assert keras.config.dtype_policy().name == "float32"
