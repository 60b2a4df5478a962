"""The demo's story holds: exact resume, a skipped overflow, replay, plot."""

import filecmp
import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests import testing

# README's demo is a script beside its data, not a module of the package.
DEMO = os.path.join(testing.REPO_ROOT, "examples", "demo", "demo.py")
_SPEC = importlib.util.spec_from_file_location("demo", DEMO)
demo = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(demo)


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


def _table(lines, header_start):
  """The rows of the table under the header line starting `header_start`."""
  first = next(i for i, line in enumerate(lines)
               if line.lstrip().startswith(header_start)) + 1
  rows = []
  for line in lines[first:]:
    fields = line.split()
    if not fields or not fields[0].isdigit():
      break
    rows.append(fields)
  return rows


def _run_demo(tmp_path, *args):
  return subprocess.run(
      [sys.executable, DEMO, *args],
      capture_output=True, text=True, cwd=str(tmp_path),
      env={**os.environ, "PYTHONPATH": testing.REPO_ROOT})


def test_module_entry_point_resumes_skips_replays_and_plots(tmp_path):
  plot = tmp_path / "story.png"
  result = _run_demo(tmp_path, "--steps", "12", "--plot", str(plot))
  assert result.returncode == 0, result.stderr[-3000:]
  lines = result.stdout.splitlines()
  job = demo.load_job()

  # The restored state, printed next to what TF 2.3.4 recorded.
  restored = {m.group(1): (float(m.group(2)), float(m.group(3)))
              for m in map(re.compile(
                  r"\s*restored (\w+)\s+(\S+)\s+TF 2.3.4 recorded\s+(\S+)"
              ).match, lines) if m}
  assert restored == {key: (job[key], job[key])
                      for key in ("loss_scale", "counter", "iterations")}
  assert re.search(r"with (\d+) replicas", result.stdout).group(1) == "2"

  # Steps 41-52 on 2 replicas: step 50's corrupted batch is skipped and
  # halves the scale; every other step counts one more good step.
  rows = _table(lines, "step        loss")
  assert [int(r[0]) for r in rows] == list(range(41, 53))
  for step, _loss, scale, counter, *note in rows:
    step, scale, counter = int(step), float(scale), int(counter)
    if step < 50:
      assert (scale, counter, note) == (1024., step - 21, [])
    elif step == 50:
      assert (scale, counter, note[0]) == (512., 0, "SKIP")
    else:
      assert (scale, counter, note) == (512., step - 50, [])
  assert float(rows[-1][1]) < float(rows[0][1])  # Training goes on.

  # The replay of steps 21-40 makes TF 2.3.4's recorded decisions.
  replay = re.search(r"skipped \[(.*)\], final scale (\S+) counter (\d+);"
                     r".*within ([\d.]+)%", result.stdout)
  recorded = job["trajectory"]
  assert [int(s) for s in replay.group(1).split(",")] == [
      r["step"] for r in recorded if r["skipped"] and r["step"] > 20]
  assert (float(replay.group(2)), int(replay.group(3))) == (
      recorded[-1]["loss_scale"], recorded[-1]["counter"])
  assert float(replay.group(4)) < 1
  assert "20/20" in result.stderr  # The replay's progress bar.

  # The hand-driven DynamicLossScale prints what scale_dynamics computes.
  printed = _table(lines, "step  scale used")
  assert printed == [
      [str(i), f"{h['scale']:g}", "yes" if h["applied"] else "SKIP",
       f"{h['new_scale']:g}", str(h["good_steps"])]
      for i, h in enumerate(demo.scale_dynamics())]
  assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_module_entry_point_refuses_zero_steps():
  with pytest.raises(SystemExit) as exit_info:
    demo.main(["--steps", "0"])
  assert exit_info.value.code == 2


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

