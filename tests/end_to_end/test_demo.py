"""The demo's story holds: exact resume, a skipped overflow, replay, plot."""

import filecmp
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat import demo
from tests import testing


def test_bundled_job_is_the_tf23_fixture():
  fixture = testing.fixture_path("legacy", "demo_tf23")
  for name in os.listdir(demo.DATA_DIR):
    assert filecmp.cmp(os.path.join(demo.DATA_DIR, name),
                       os.path.join(fixture, name), shallow=False), name
  assert demo.load_job()["tensorflow_version"] == "2.3.4"


def test_job_data_is_regenerated_exactly():
  job = demo.load_job()
  x, y = demo.job_data(job)
  assert x[:2].tolist() == job["x_head"]
  # x @ w may round differently in the last bit on another BLAS.
  np.testing.assert_allclose(y[:4, 0], job["y_head"], rtol=1e-6, atol=1e-5)


def test_resume_under_mirrored_strategy(installed, mirrored_strategy):
  del installed
  result = demo.resume(steps=8, spike_step=45, progress=False,
                       strategy=mirrored_strategy)
  recorded, restored = result["recorded"], result["restored"]
  assert recorded == {"loss_scale": 1024.0, "counter": 19, "iterations": 40}
  for key in recorded:
    assert restored[key] == recorded[key], key
  assert result["replicas"] == 2
  trajectory = result["trajectory"]
  assert [r["step"] for r in trajectory] == list(range(41, 49))
  assert [r["step"] for r in trajectory if r["skipped"]] == [45]
  for r in trajectory:
    if r["step"] < 45:
      assert (r["loss_scale"], r["counter"]) == (1024., r["step"] - 21)
    elif r["step"] == 45:
      assert r["corrupted"] and (r["loss_scale"], r["counter"]) == (512., 0)
    else:
      assert (r["loss_scale"], r["counter"]) == (512., r["step"] - 45)
  assert trajectory[-1]["loss"] < trajectory[0]["loss"]


def test_replay_makes_tf23s_loss_scale_decisions(installed):
  del installed
  pairs = demo.replay(progress=False)
  assert [o["step"] for o, _ in pairs] == list(range(21, 41))
  for ours, recorded in pairs:
    assert ours["skipped"] == recorded["skipped"], ours["step"]
    assert ours["loss_scale"] == recorded["loss_scale"], ours["step"]
    assert ours["counter"] == recorded["counter"], ours["step"]
    assert ours["loss"] == pytest.approx(recorded["loss"], rel=0.01)
  assert [o["step"] for o, _ in pairs if o["skipped"]] == [21]
  assert (pairs[-1][0]["loss_scale"], pairs[-1][0]["counter"]) == (1024., 19)


def _result():
  step = lambda s, scale, skipped: {  # pylint: disable=g-long-lambda
      "step": s, "loss": 1. / s, "loss_scale": scale, "counter": 0,
      "skipped": skipped, "corrupted": skipped}
  return {"history": [step(1, 4., False), step(2, 2., True)],
          "trajectory": [step(3, 2., False), step(4, 1., True)],
          "replicas": 2}


def test_plot_is_a_png(tmp_path):
  path = str(tmp_path / "plot.png")
  assert demo.plot(_result(), path)
  with open(path, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_is_skipped(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
  path = tmp_path / "plot.png"
  assert not demo.plot(_result(), str(path))
  assert not path.exists()


def test_module_entry_point_tells_the_story(tmp_path):
  plot = tmp_path / "story.png"
  result = subprocess.run(
      [sys.executable, "-m", "tf_mixed_precision_compat.demo", "--steps",
       "12", "--plot", str(plot)],
      capture_output=True, text=True, cwd=str(tmp_path))
  assert result.returncode == 0, result.stderr[-3000:]
  out = result.stdout
  assert "with 2 replicas" in out
  for key, value in (("loss_scale", 1024), ("counter", 19),
                     ("iterations", 40)):
    assert (f"restored {key:<10} {value:>8g}   TF 2.3.4 recorded "
            f"{value:>8g}   equal") in out
  assert "skipped steps: [50]" in out
  assert "loss scale trajectory: 1024 -> 512" in out
  assert "identical to TF 2.3.4's" in out
  assert "TF 2.3's DynamicLossScale by hand" in out
  assert "skipped steps: [9, 13, 17, 21]; scale from 4096 up to 32768" in out
  assert "20/20" in result.stderr  # The replay's progress bar.
  assert f"plot written to {plot}" in out
  assert plot.read_bytes()[:4] == b"\x89PNG"
  assert not mp.installed()  # The subprocess installed, not this one.
  assert tf.keras.mixed_precision is not None


def test_dynamic_loss_scale_grows_halves_on_overflow_and_stays_at_least_one():
  history = demo.scale_dynamics(steps=24)
  skipped = [i for i, h in enumerate(history) if not h["applied"]]
  assert skipped, "the float16 backward pass must overflow at least once"
  assert max(h["new_scale"] for h in history) > history[0]["scale"]
  for i, h in enumerate(history):
    assert h["new_scale"] >= 1
    if h["applied"]:
      grew = h["good_steps"] == 0
      assert h["new_scale"] == (h["scale"] * 2 if grew else h["scale"])
    else:
      assert h["new_scale"] == h["scale"] / 2
      assert h["good_steps"] == 0
      # A skipped step leaves the weights, hence the next loss, unchanged.
      if i + 1 < len(history):
        assert history[i + 1]["loss"] == h["loss"]

