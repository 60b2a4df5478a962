"""The demo's trajectory shows what dynamic loss scaling promises."""

import subprocess
import sys

from tf_mixed_precision_compat import demo


def test_scale_grows_halves_on_overflow_and_stays_at_least_one():
  history = demo.loss_scale_run(steps=40)
  skipped = [i for i, h in enumerate(history) if not h["applied"]]
  assert skipped, "the scripted run must overflow at least once"
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
  assert max(h["new_scale"] for h in history) > history[0]["scale"]


def test_module_entry_point_prints_the_trajectory():
  out = subprocess.run(
      [sys.executable, "-m", "tf_mixed_precision_compat.demo", "--steps", "25"],
      check=True, capture_output=True, text=True, timeout=300).stdout
  assert "SKIP" in out
  assert "skipped steps: [20]" in out
