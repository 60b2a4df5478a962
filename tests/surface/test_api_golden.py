"""Tests of the API goldens (`tools/api_golden.py`) and the exported paths.

Three things are checked:

* the committed `api_golden/` matches the code, and any drift (changed
  signature, new or removed endpoint, changed deprecation) fails the check
  with a message naming `--update`;
* the golden formatter writes TensorFlow's own golden text: run on the real
  TF 2.3.4 classes (`tools/tf_reference_goldens.py`, committed under
  `tests/fixtures/tf_goldens/`) it reproduces TF 2.3's golden byte for byte,
  and our loss scale classes have the same members and argspecs as TF 2.3.4's;
* the registered endpoint paths are the ones TF 2.3.4/2.4.4 exported
  (`tools/dump_tf_endpoints.py` -> `tests/fixtures/tf_endpoints.json`).
"""

import abc
import collections
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import types

import pytest

import tf_mixed_precision_compat
from tf_mixed_precision_compat import endpoints
from tests import testing

_REPO_ROOT = testing.REPO_ROOT
_TOOL = os.path.join(_REPO_ROOT, "tools", "api_golden.py")
_FIXTURES = os.path.join(_REPO_ROOT, "tests", "fixtures")


def _fixture_path(*parts):
  return os.path.join(_FIXTURES, *parts)


def _load_tool():
  spec = importlib.util.spec_from_file_location("api_golden", _TOOL)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


api_golden = _load_tool()

_LOSS_SCALES = ("LossScale", "FixedLossScale", "DynamicLossScale")

# TensorFlow 2.3's own golden, verbatim from
# tensorflow/tools/api/golden/v2/
# tensorflow.mixed_precision.experimental.-dynamic-loss-scale.pbtxt.
_TF23_DYNAMIC_LOSS_SCALE_GOLDEN = r"""path: "tensorflow.mixed_precision.experimental.DynamicLossScale"
tf_class {
  is_instance: "<class \'tensorflow.python.training.experimental.loss_scale.DynamicLossScale\'>"
  is_instance: "<class \'tensorflow.python.training.experimental.loss_scale.LossScale\'>"
  is_instance: "<class \'tensorflow.python.training.tracking.base.Trackable\'>"
  is_instance: "<type \'object\'>"
  member {
    name: "increment_period"
    mtype: "<type \'property\'>"
  }
  member {
    name: "initial_loss_scale"
    mtype: "<type \'property\'>"
  }
  member {
    name: "multiplier"
    mtype: "<type \'property\'>"
  }
  member_method {
    name: "__init__"
    argspec: "args=[\'self\', \'initial_loss_scale\', \'increment_period\', \'multiplier\'], varargs=None, keywords=None, defaults=[\'32768\', \'2000\', \'2.0\'], "
  }
  member_method {
    name: "from_config"
    argspec: "args=[\'cls\', \'config\'], varargs=None, keywords=None, defaults=None"
  }
  member_method {
    name: "get_config"
    argspec: "args=[\'self\'], varargs=None, keywords=None, defaults=None"
  }
  member_method {
    name: "update"
    argspec: "args=[\'self\', \'grads\'], varargs=None, keywords=None, defaults=None"
  }
}
"""  # noqa: E501 (TF's golden text, verbatim)


def _read(*parts):
  with open(os.path.join(*parts), encoding="utf-8") as f:
    return f.read()


def _body(golden_text):
  """The golden without its `path` and `is_instance` lines."""
  return [
      line for line in golden_text.splitlines()
      if not line.startswith("path: ") and
      not line.lstrip().startswith("is_instance: ")
  ]


def _golden_name(path):
  return api_golden.golden_file_name(api_golden.golden_path(path))


# ---------------------------------------------------------------------------
# The committed goldens and the check / update cycle.
# ---------------------------------------------------------------------------


def test_committed_goldens_match_the_code():
  problems = api_golden.check()
  assert not problems, api_golden.drift_report(problems)


def test_cli_default_mode_checks_and_passes():
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run([sys.executable, _TOOL],
                          cwd=_REPO_ROOT,
                          env=env,
                          capture_output=True,
                          text=True,
                          timeout=900,  # A hang guard only.
                          check=False)
  assert result.returncode == 0, result.stderr
  assert "up to date" in result.stdout


def test_every_registered_path_has_a_golden():
  files = set(api_golden.read_goldens(api_golden.GOLDEN_DIR))
  count = 0
  for spec in endpoints.all_specs():
    for api_version in api_golden.API_VERSIONS:
      for path in spec.paths(api_version):
        if isinstance(spec.symbol, type):
          assert f"{api_version}/{_golden_name(path)}" in files, path
        parent = path.rpartition(".")[0]
        assert f"{api_version}/{_golden_name(parent)}" in files, parent
        count += 1
  assert count >= 15  # 3 loss scales x (2 v2 + 3 v1 paths)


def test_signature_change_is_drift_naming_update(tmp_path, monkeypatch,
                                                 capsys):
  api_golden.update(str(tmp_path))
  assert api_golden.check(str(tmp_path)) == []

  def update(self, grads, experimental_flag=False):
    del self, grads, experimental_flag

  monkeypatch.setattr(tf_mixed_precision_compat.DynamicLossScale, "update",
                      update)
  problems = api_golden.check(str(tmp_path))
  changed = sorted(p.splitlines()[0] for p in problems)
  assert changed == [
      "changed golden: v1/tensorflow.mixed_precision.-dynamic-loss-scale.pbtxt",
      "changed golden: v1/tensorflow.mixed_precision.experimental."
      "-dynamic-loss-scale.pbtxt",
      "changed golden: v1/tensorflow.train.experimental."
      "-dynamic-loss-scale.pbtxt",
      "changed golden: v2/tensorflow.mixed_precision.experimental."
      "-dynamic-loss-scale.pbtxt",
      "changed golden: v2/tensorflow.train.experimental."
      "-dynamic-loss-scale.pbtxt",
  ]
  assert "experimental_flag" in problems[0]

  assert api_golden.main(["--check", "--golden_dir", str(tmp_path)]) == 1
  err = capsys.readouterr().err
  assert "python tools/api_golden.py --update" in err
  assert "-dynamic-loss-scale.pbtxt" in err

  assert api_golden.main(["--update", "--golden_dir", str(tmp_path)]) == 0
  assert api_golden.main(["--golden_dir", str(tmp_path)]) == 0
  assert "experimental_flag" in _read(
      str(tmp_path), "v2",
      "tensorflow.mixed_precision.experimental.-dynamic-loss-scale.pbtxt")


def test_new_endpoint_is_drift(tmp_path):
  api_golden.update(str(tmp_path))

  class ExtraLossScale(tf_mixed_precision_compat.FixedLossScale):

    def extra(self, value=None):
      del value

  specs = list(endpoints.all_specs()) + [
      endpoints.EndpointSpec(ExtraLossScale,
                             v2=("mixed_precision.experimental.ExtraLossScale",),
                             v1=())
  ]
  problems = api_golden.check(str(tmp_path), specs)
  headlines = sorted(p.splitlines()[0] for p in problems)
  assert headlines == [
      "changed golden: deprecations.json",
      "changed golden: v2/tensorflow.mixed_precision.experimental.pbtxt",
      "missing golden: v2/tensorflow.mixed_precision.experimental."
      "-extra-loss-scale.pbtxt",
  ]


def test_stale_missing_and_edited_files_are_drift_and_update_repairs(
    tmp_path):
  api_golden.update(str(tmp_path))
  v2 = tmp_path / "v2"
  (v2 / "tensorflow.mixed_precision.experimental.-removed.pbtxt").write_text(
      "path: \"tensorflow.mixed_precision.experimental.Removed\"\n")
  (v2 / "tensorflow.train.pbtxt").unlink()
  fixed = v2 / "tensorflow.train.experimental.-fixed-loss-scale.pbtxt"
  fixed.write_text(fixed.read_text().replace("get_config", "get_konfig"))

  headlines = sorted(
      p.splitlines()[0] for p in api_golden.check(str(tmp_path)))
  assert headlines == [
      "changed golden: v2/tensorflow.train.experimental."
      "-fixed-loss-scale.pbtxt",
      "missing golden: v2/tensorflow.train.pbtxt",
      "stale golden (no such endpoint any more): "
      "v2/tensorflow.mixed_precision.experimental.-removed.pbtxt",
  ]
  changed = api_golden.update(str(tmp_path))
  assert len(changed) == 3
  assert not (v2 / "tensorflow.mixed_precision.experimental.-removed.pbtxt"
             ).exists()
  assert api_golden.check(str(tmp_path)) == []


def test_deprecation_record():
  record = json.loads(_read(api_golden.GOLDEN_DIR, "deprecations.json"))
  for spec in endpoints.all_specs():
    for api_version in api_golden.API_VERSIONS:
      for path in spec.paths(api_version):
        entry = record[api_version][path]
        assert entry["deprecated"] is (path in spec.deprecated), path
        assert entry["warning"] == spec.warning, path
  v2 = record["v2"]
  assert v2["mixed_precision.experimental.DynamicLossScale"]["deprecated"]
  assert v2["train.experimental.FixedLossScale"]["deprecated"]
  assert not record["v1"]["mixed_precision.DynamicLossScale"]["deprecated"]
  assert ("tf.keras.mixed_precision.LossScaleOptimizer" in
          v2["mixed_precision.experimental.DynamicLossScale"]["warning"])


def test_changed_deprecation_is_drift(tmp_path):
  api_golden.update(str(tmp_path))
  specs = [
      dataclasses.replace(spec, warning="something else")
      if spec.symbol is tf_mixed_precision_compat.DynamicLossScale else spec
      for spec in endpoints.all_specs()
  ]
  problems = api_golden.check(str(tmp_path), specs)
  assert [p.splitlines()[0] for p in problems
         ] == ["changed golden: deprecations.json"]


# ---------------------------------------------------------------------------
# The formatter writes TensorFlow's format.
# ---------------------------------------------------------------------------


def test_formatter_reproduces_tf23_golden_of_the_real_class():
  # Written by tools/tf_reference_goldens.py under real TF 2.3.4.
  produced = _read(
      _fixture_path("tf_goldens", "tf23", "v2"),
      "tensorflow.mixed_precision.experimental.-dynamic-loss-scale.pbtxt")
  assert produced == _TF23_DYNAMIC_LOSS_SCALE_GOLDEN


def test_our_dynamic_loss_scale_golden_matches_tf23_text():
  ours = _read(api_golden.GOLDEN_DIR, "v2",
               "tensorflow.mixed_precision.experimental.-dynamic-loss-scale.pbtxt")
  assert _body(ours) == _body(_TF23_DYNAMIC_LOSS_SCALE_GOLDEN)
  assert ours.splitlines()[0] == _TF23_DYNAMIC_LOSS_SCALE_GOLDEN.splitlines(
  )[0]
  assert ours.splitlines()[2] == (
      "  is_instance: \"<class "
      "\\'tf_mixed_precision_compat.loss_scale._loss_scales.DynamicLossScale"
      "\\'>\"")


@pytest.mark.parametrize("api_version", api_golden.API_VERSIONS)
@pytest.mark.parametrize("class_name", _LOSS_SCALES)
def test_loss_scale_members_equal_tf234(class_name, api_version):
  symbol = getattr(tf_mixed_precision_compat, class_name)
  reference = _read(
      _fixture_path("tf_goldens", "tf23", "v2"),
      _golden_name("mixed_precision.experimental." + class_name))
  paths = endpoints.lookup(
      "v2", "mixed_precision.experimental." + class_name).paths(api_version)
  assert paths
  for path in paths:
    ours = _read(api_golden.GOLDEN_DIR, api_version, _golden_name(path))
    assert ours.startswith(f'path: "tensorflow.{path}"\n')
    assert _body(ours) == _body(reference), path
    for tf_dir in ("tf23", "tf24"):
      # Where that TF version had this very endpoint, it is the same class.
      same_path = _fixture_path("tf_goldens", tf_dir, api_version,
                                       _golden_name(path))
      if os.path.exists(same_path):
        assert _body(_read(same_path)) == _body(reference), (tf_dir, path)
    assert endpoints.lookup(api_version, path).symbol is symbol


def test_argspec_format():

  def f(a, b=1, *args, c, d=None, **kwargs):
    del a, b, args, c, d, kwargs

  assert api_golden.argspec_string(f) == (
      "args=['a', 'b'], varargs=args, keywords=kwargs, defaults=['1'], ")

  def g():
    pass

  assert api_golden.argspec_string(g) == (
      "args=[], varargs=None, keywords=None, defaults=None")

  sentinel = object()

  def h(x=sentinel, y="dynamic"):
    del x, y

  assert api_golden.argspec_string(h) == (
      "args=['x', 'y'], varargs=None, keywords=None, "
      "defaults=['<object object instance>', 'dynamic'], ")


def test_wrapped_routines_show_the_wrapped_signature():
  import functools  # pylint: disable=g-import-not-at-top

  def target(self, grads, name=None):
    del self, grads, name

  @functools.wraps(target)
  def wrapper(*args, **kwargs):
    return target(*args, **kwargs)

  assert api_golden.argspec_string(wrapper) == (
      "args=['self', 'grads', 'name'], varargs=None, keywords=None, "
      "defaults=['None'], ")

  # TensorFlow's decorators: `_tf_decorator.decorated_target`.
  def decorated(*args, **kwargs):
    del args, kwargs

  decorated._tf_decorator = types.SimpleNamespace(  # pylint: disable=protected-access
      decorated_target=target,
      decorator_argspec=None)
  assert api_golden.argspec_string(decorated).startswith(
      "args=['self', 'grads', 'name']")


def test_class_golden_rules():

  class Base(collections.OrderedDict):
    CONSTANT = 3

    def method(self, x):
      del x

    @property
    def prop(self):
      return 1

    @classmethod
    def build(cls, config):
      del config

    @staticmethod
    def helper(value="a'b\\c\n"):
      del value

    def _private(self):
      pass

    class Nested:
      pass

  Base.__module__ = "tf_mixed_precision_compat.fake"
  Base.Nested.__module__ = "tf_mixed_precision_compat.fake"
  text = api_golden.format_class("tensorflow.a.Base", Base)
  lines = text.splitlines()
  assert lines[:4] == [
      'path: "tensorflow.a.Base"',
      "tf_class {",
      "  is_instance: \"<class \\'tf_mixed_precision_compat.fake."
      "test_class_golden_rules.<locals>.Base\\'>\"",
      # The first base outside tensorflow/keras/our package ends the list.
      "  is_instance: \"<class \\'collections.OrderedDict\\'>\"",
  ]
  assert lines[4] == "  member {"
  assert "_private" not in text
  members = [
      line.strip() for line in lines if line.strip().startswith("name: ")
  ]
  # Members (sorted) first, then methods (sorted); `__init__` is a method.
  assert members[:4] == [
      'name: "CONSTANT"', 'name: "Nested"', 'name: "prop"',
      'name: "__init__"'
  ]
  assert 'mtype: "<type \\\'int\\\'>"' in text
  assert 'mtype: "<type \\\'property\\\'>"' in text
  assert 'mtype: "<type \\\'type\\\'>"' in text
  # OrderedDict.__init__ is a C slot: listed without argspec.
  init = lines.index('    name: "__init__"')
  assert lines[init + 1] == "  }"
  assert ('argspec: "args=[\\\'cls\\\', \\\'config\\\'], varargs=None, '
          'keywords=None, defaults=None"') in text
  # Quotes, backslashes and newlines are escaped as protobuf text does.
  assert r"""defaults=[\"a\'b\\\\c\\n\"], """ in text

  files = api_golden.render_tree({"a.Base": Base})
  assert sorted(files) == [
      "tensorflow.a.-base.-nested.pbtxt",
      "tensorflow.a.-base.pbtxt",
      "tensorflow.a.pbtxt",
      "tensorflow.pbtxt",
  ]


def test_module_golden_rules():

  class Meta(abc.ABC):  # noqa: B024 (no abstract method, on purpose)
    pass

  def function(x, y=2):
    del x, y

  files = api_golden.render_tree({
      "ns.sub.Meta": Meta,
      "ns.function": function,
  })
  assert files["tensorflow.ns.pbtxt"] == (
      'path: "tensorflow.ns"\n'
      "tf_module {\n"
      "  member {\n"
      '    name: "sub"\n'
      "    mtype: \"<type \\'module\\'>\"\n"
      "  }\n"
      "  member_method {\n"
      '    name: "function"\n'
      "    argspec: \"args=[\\'x\\', \\'y\\'], varargs=None, keywords=None, "
      "defaults=[\\'2\\'], \"\n"
      "  }\n"
      "}\n")
  # abc.ABCMeta is written as a plain type, as TensorFlow did.
  assert "mtype: \"<type \\'type\\'>\"" in files["tensorflow.ns.sub.pbtxt"]


def test_file_names_follow_tf_convention():
  assert api_golden.golden_file_name(
      "tensorflow.keras.mixed_precision.LossScaleOptimizer") == (
          "tensorflow.keras.mixed_precision.-loss-scale-optimizer.pbtxt")
  assert api_golden.golden_file_name("tensorflow") == "tensorflow.pbtxt"


# ---------------------------------------------------------------------------
# Registered paths are TensorFlow's.
# ---------------------------------------------------------------------------


def _normalized(name):
  # TF 2.4 exported some experimental endpoints from `FooV1` / `foo_v1`
  # twins of the same API.
  for suffix in ("_v1", "V1"):
    if name.endswith(suffix):
      return name[:-len(suffix)]
  return name


def _components():
  """Groups registered specs and TF symbols that share a path or a name.

  Returns:
    A list of `(specs, tf_entries)` for every group holding at least one
    registered spec and one TF symbol.
  """
  dump = json.loads(_read(_fixture_path("tf_endpoints.json")))
  assert set(dump) == {"tf23", "tf24"}
  nodes = [("ours", spec) for spec in endpoints.all_specs()]
  for version in sorted(dump):
    nodes += [("tf", entry) for entry in dump[version]["symbols"].values()]

  def keys(node):
    kind, item = node
    if kind == "ours":
      name = item.symbol.__name__
      paths = [(v, p) for v in ("v1", "v2") for p in item.paths(v)]
    else:
      name = item["name"]
      paths = [(v, p) for v in ("v1", "v2") for p in item[v]]
    return [("name", _normalized(name))] + paths

  parent = list(range(len(nodes)))

  def find(i):
    while parent[i] != i:
      parent[i] = parent[parent[i]]
      i = parent[i]
    return i

  owner = {}
  for i, node in enumerate(nodes):
    for key in keys(node):
      if key in owner:
        parent[find(i)] = find(owner[key])
      else:
        owner[key] = i
  groups = collections.defaultdict(list)
  for i, node in enumerate(nodes):
    groups[find(i)].append(node)
  result = []
  for members in groups.values():
    ours = [item for kind, item in members if kind == "ours"]
    theirs = [item for kind, item in members if kind == "tf"]
    if ours and theirs:
      result.append((ours, theirs))
  return result


def test_registered_paths_are_tf234_and_tf244_exports():
  compared = set()
  for ours, theirs in _components():
    names = sorted(spec.symbol.__name__ for spec in ours)
    for api_version in ("v1", "v2"):
      registered = {p for spec in ours for p in spec.paths(api_version)}
      exported = {p for entry in theirs for p in entry[api_version]}
      assert registered == exported, (names, api_version)
    registered = {p for spec in ours for p in spec.deprecated}
    exported = {p for entry in theirs for p in entry["deprecated"]}
    assert registered == exported, (names, "deprecated")
    compared.update(names)
  assert compared >= set(_LOSS_SCALES)


def test_loss_scale_paths_are_the_union_of_tf234_and_tf244():
  dump = json.loads(_read(_fixture_path("tf_endpoints.json")))
  for name in _LOSS_SCALES:
    entries = [
        entry for version in dump.values()
        for entry in version["symbols"].values() if entry["name"] == name
    ]
    assert len(entries) == 2, name  # one per TF version
    spec = endpoints.lookup("v2", "mixed_precision.experimental." + name)
    assert spec.symbol is getattr(tf_mixed_precision_compat, name)
    for api_version in ("v1", "v2"):
      assert set(spec.paths(api_version)) == {
          p for entry in entries for p in entry[api_version]
      }, (name, api_version)
    assert set(spec.deprecated) == {
        p for entry in entries for p in entry["deprecated"]
    }
  # TF 2.4 added the non-experimental v1 paths.
  assert "mixed_precision.DynamicLossScale" in endpoints.lookup(
      "v1", "mixed_precision.DynamicLossScale").v1


def _member_methods(golden_text):
  """{name: argspec line} of a golden's member_method entries."""
  methods, name = {}, None
  for line in golden_text.splitlines():
    line = line.strip()
    if line.startswith("name: "):
      name = line
    elif line.startswith("argspec: ") or line == "}":
      if name is not None and line != "}":
        methods[name] = line
      if line == "}":
        name = None
  return methods


# The Keras classes sit on Keras 3 bases; docs/api_differences.md lists
# their differences.
_KERAS3_BASED = ("keras.",)


@pytest.mark.parametrize("tf_dir", ["tf23", "tf24"])
@pytest.mark.parametrize("api_version", api_golden.API_VERSIONS)
def test_non_keras_classes_and_functions_equal_the_tf_goldens(
    tf_dir, api_version):
  reference_dir = _fixture_path("tf_goldens", tf_dir, api_version)
  compared = set()
  for file_name in sorted(os.listdir(reference_dir)):
    ours_path = os.path.join(api_golden.GOLDEN_DIR, api_version, file_name)
    if not os.path.exists(ours_path):
      continue
    reference = _read(reference_dir, file_name)
    ours = _read(ours_path)
    path = reference.splitlines()[0]
    if "tf_class {" in reference and not any(
        f"tensorflow.{k}" in path for k in _KERAS3_BASED):
      assert _body(ours) == _body(reference), (tf_dir, file_name)
      compared.add(file_name)
    elif "tf_module {" in reference:
      # Each function that TF version exported there: present, same argspec
      # (the other version may have added more; the path test covers those).
      theirs = _member_methods(reference)
      assert theirs.items() <= _member_methods(ours).items(), (tf_dir,
                                                               file_name)
      compared.update(f"{file_name}:{m}" for m in theirs)
  if api_version == "v1":
    assert any("mixed-precision-loss-scale-optimizer" in c for c in compared)
  assert any("enable_mixed_precision_graph_rewrite" in c for c in compared)
