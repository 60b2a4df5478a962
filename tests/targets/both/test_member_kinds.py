"""Each member of the re-created classes returns what real TF 2.3/2.4 returned.

One test per row of the audit recorded under real TF 2.3.4 and 2.4.4
(tools/gen_member_kinds.py runs member_kinds.py there): a member's kind
(variable, tensor, `LossScale`, optimizer, Python value, an error), whether
a value kept from before a state change follows the state (`live`) or keeps
what it was (`snapshot`), its values, and whether each read returns the same
object. Where the releases differ, a class follows the release that
introduced it and also serves the other's code where both can hold (the
experimental class's `loss_scale` is TF 2.3's `LossScale` and TF 2.4's
tensor); the deliberate differences are `DIFFERENCES`, each held to what it
is, with its reason. docs/api_differences.md's table says the same.

Then the loss scale read around an overflowing step, in each mode: the
value TF 2.4 code reads (`ls = opt.loss_scale`, used as a tensor later) is
the scale at the read; TF 2.3 code's `ls()` is the scale at the call.
"""

import json
import os

import pytest

from tests.targets.both import member_kinds
from tf_mixed_precision_compat import keras_target

_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures",
                         "member_kinds")

_FRESH_PER_READ = (
    "each read is a new value (the scale read then, as TF 2.4's property "
    "returned a new tensor); it wraps the one `LossScale`, and `==` compares "
    "that")
_PYTHON_HYPER = (
    "Keras's current optimizers keep hyperparameters other than the "
    "learning rate as Python floats")
# (case, member, release of the row) -> (what differs in ours, why).
DIFFERENCES = {
    ("lso_v1", "loss_scale", "23"): ({"same_object": False}, _FRESH_PER_READ),
    ("lso_v1_fixed", "loss_scale", "23"): (
        {"same_object": False}, _FRESH_PER_READ),
    ("lso_v1", "_set_hyper('learning_rate', 0.5)", "23"): (
        {"kind": "raises AttributeError"},
        "TF 2.3.4 kept it in the wrapper's own unused hyperparameters, so the "
        "learning rate silently stayed; it raises as TF 2.4.4's class did, "
        "naming `optimizer.learning_rate = ...`"),
    ("lso_v1_fixed", "_set_hyper('learning_rate', 0.5)", "23"): (
        {"kind": "raises AttributeError"}, "as for the dynamic wrapper"),
}
DIFFERENCES[("v1_optimizer", "get_slot(var, 'momentum')", "24")] = (
    {"kind": "variable", "follows": "live", "before": [0.5, -1.0],
     "after": [0.949999988079071, -1.899999976158142]},
    "the wrapped optimizer's slot; TF 2.3.4/2.4.4's wrapper (and TF 2.21's "
    "own tf.compat.v1 class) answered None, having no slots of its own")
for _case in ("lso", "lso_fixed", "lso_v1", "lso_v1_fixed"):
  DIFFERENCES[(_case, "momentum", "24")] = (
      {"kind": "Python float", "before": 0.9, "after": 0.9}, _PYTHON_HYPER)
# On the tf_keras target, the wrapper of tf_keras's current optimizers:
# (case, member, release) -> (what differs there, why).
TF_KERAS_DIFFERENCES = {
    (case, "get_slot_names()", "24"): (
        {"kind": "raises AttributeError"},
        "on tf_keras's current optimizers: TF's checkpoint code takes an "
        "object with `get_slot_names` for an OptimizerV2 and would save each "
        "slot twice; `get_slot(var, name)` takes TF 2.x's names")
    for case in ("lso", "lso_fixed", "lso_v1", "lso_v1_fixed")}
# Members of the Keras loss-scale optimizers whose values are this Keras's
# (their kind and timing are compared): why.
VALUES_OF_THIS_KERAS = {
    "variables()": "Keras 3's list: iterations, learning rate, then slots "
                   "(TF 2.4's layout is `weights`)",
}
_COMPARED = ("kind", "read", "follows", "before", "after", "same_object")


def _recorded(version):
  with open(os.path.join(_FIXTURES, f"tf{version}.json")) as f:
    return json.load(f)


_RECORDS = {version: _recorded(version) for version in ("23", "24")}


def expected_rows(case, member, releases):
  """{release: row} whose code ours must serve.

  The rows that do not raise; if every release raised, one of them (ours
  raises the same). Two releases with the same row count once.
  """
  rows = {r: _RECORDS[r]["rows"][f"{case}.{member}"] for r in releases}
  usable = {r: row for r, row in rows.items()
            if not row["kind"].startswith("raises")}
  chosen, seen = {}, []
  for release, row in sorted((usable or rows).items(), reverse=True):
    if row not in seen:
      chosen[release] = row
      seen.append(row)
  return chosen


def _params():
  return [pytest.param(case, member, release, id=f"{case}.{member}@tf{release}")
          for case, member, releases in member_kinds.cases()
          for release in expected_rows(case, member, releases)]


pytestmark = pytest.mark.usefixtures("installed")


@pytest.mark.parametrize("case,member,release", _params())
def test_member_returns_what_the_release_returned(case, member, release):
  want = dict(_RECORDS[release]["rows"][f"{case}.{member}"])
  got = member_kinds.probe(case, member, as_kind=want["kind"])
  override, reason = DIFFERENCES.get((case, member, release), ({}, None))
  if keras_target.active() == keras_target.TF_KERAS:
    override, reason = TF_KERAS_DIFFERENCES.get((case, member, release),
                                                (override, reason))
  assert reason is None or reason
  want.update(override)
  if want["kind"].startswith("raises"):  # Then it has nothing else.
    want = {"kind": want["kind"]}
  keys = _COMPARED
  if _this_keras(case, member):
    keys = ("kind", "read", "follows", "same_object")
  assert {k: got.get(k) for k in keys} == {k: want.get(k) for k in keys}


def test_differences_name_recorded_rows():
  for (case, member, release), (override, reason) in (
      *DIFFERENCES.items(), *TF_KERAS_DIFFERENCES.items()):
    assert release in expected_rows(case, member, dict(
        (c, r) for c, m, r in member_kinds.cases())[case])
    assert override and reason


_SESSIONS = ("Keras 3 optimizers do not run in tf.compat.v1 Sessions "
             "(docs/graph_mode.md); the tf_keras target runs this mode")


@pytest.mark.parametrize("mode", member_kinds.MODES)
@pytest.mark.parametrize("case", member_kinds.LOSS_SCALE_OPTIMIZERS)
def test_loss_scale_is_read_when_tf24_and_tf23_read_it(case, mode):
  if mode == "session" and keras_target.active() != keras_target.TF_KERAS:
    pytest.skip(_SESSIONS)
  got = member_kinds.read_around_overflow(case, mode)
  tf24 = _RECORDS["24"]["reads"][case][mode]
  assert got["tensor"] == tf24["tensor"]
  assert got.get("after") == tf24.get("after")
  if case == "lso_v1":  # TF 2.3's class: its `loss_scale()` too.
    assert got["call"] == _RECORDS["23"]["reads"][case][mode]["call"]
  else:
    assert got["call"] == tf24["call"]


@pytest.mark.parametrize("case", ["lso", "lso_v1"])
def test_slot_creating_private_methods_do_what_they_did(case):
  assert member_kinds.private_method_effects(case) == (
      _RECORDS["24"]["effects"][case])
  if case == "lso_v1":
    assert member_kinds.private_method_effects(case) == (
        _RECORDS["23"]["effects"][case])


_CLASSES = {
    "lso": "`LossScaleOptimizer`",
    "lso_fixed": "`LossScaleOptimizer(dynamic=False)`",
    "lso_v1": "`experimental.LossScaleOptimizer`",
    "lso_v1_fixed": "`experimental.LossScaleOptimizer` (fixed)",
    "v1_optimizer": "`MixedPrecisionLossScaleOptimizer`",
    "dynamic_loss_scale": "`DynamicLossScale`",
    "fixed_loss_scale": "`FixedLossScale`",
    "policy": "`Policy`",
    "policy_v1": "`experimental.Policy`",
}
_TABLE_START = "<!-- member kinds: start -->"
_TABLE_END = "<!-- member kinds: end -->"


def _this_keras(case, member):
  return case.startswith("lso") and member in VALUES_OF_THIS_KERAS


def _cell(row):
  if row is None:
    return "-"
  parts = [row["kind"].replace("Python NoneType", "None")]
  parts += [row[k] for k in ("follows", "read") if k in row]
  return ", ".join(p for p in parts if p != "unchanged")


def table():
  """docs/api_differences.md's table of the rows above, as Markdown."""
  lines = ["| class | member | TF 2.3.4 | TF 2.4.4 | this package |",
           "| --- | --- | --- | --- | --- |"]
  for case, member, releases in member_kinds.cases():
    recorded = [_RECORDS[r]["rows"].get(f"{case}.{member}")
                for r in ("23", "24")]
    served = []
    for release in expected_rows(case, member, releases):
      override, reason = DIFFERENCES.get((case, member, release), ({}, None))
      served.append(f"TF 2.{release[1]}'s" + (
          f" but {_cell(dict(recorded[release == '24'], **override))}: "
          f"{reason}" if reason else ""))
    if _this_keras(case, member):
      served.append("values: " + VALUES_OF_THIS_KERAS[member])
    for release in expected_rows(case, member, releases):
      if (case, member, release) in TF_KERAS_DIFFERENCES:
        override, reason = TF_KERAS_DIFFERENCES[(case, member, release)]
        served.append(f"{_cell(override)} {reason}")
    lines.append(f"| {_CLASSES[case]} | `{member}` | "
                 f"{_cell(recorded[0])} | {_cell(recorded[1])} | "
                 f"{'; '.join(served)} |")
  return "\n".join(lines)


def test_docs_table_is_these_rows():
  path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs",
                      "api_differences.md")
  with open(path) as f:
    text = f.read()
  start = text.index(_TABLE_START) + len(_TABLE_START)
  assert text[start:text.index(_TABLE_END)].strip() == table(), (
      "regenerate it: python -m tests.targets.both.test_member_kinds")


if __name__ == "__main__":
  print(table())
