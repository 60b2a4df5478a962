"""The libcst transformer behind `migrate`: finds and rewrites API uses.

libcst keeps every comment and all formatting outside the rewritten
expressions. Names are resolved through the file's imports
(`QualifiedNameProvider`), so `mixed_precision.Policy` after `from
tensorflow.keras.mixed_precision import experimental as mixed_precision` is
recognised. Methods (`get_scaled_loss`, ...) are recognised by name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import libcst as cst
from libcst import matchers as m
from libcst.metadata import PositionProvider
from libcst.metadata import QualifiedNameProvider

from tf_mixed_precision_compat.cli import _api_table as table

_DYNAMIC_ARGS = {"initial_loss_scale": "initial_scale",
                 "increment_period": "dynamic_growth_steps"}


@dataclasses.dataclass
class Finding:
  """One API use: where, what, its replacement, and whether it was rewritten.

  `status` is "rewrite" (keeps behaviour; applied with --write), "native"
  (Keras 3 has the name; left as is) or "manual" (no exact rewrite).
  """
  line: int
  column: int
  api: str
  replacement: str
  change: str
  status: str


def _expr(code: str) -> cst.BaseExpression:
  return cst.parse_expression(code)


class Prepass(cst.CSTVisitor):
  """What `Migrator` needs from the whole file before it rewrites."""

  METADATA_DEPENDENCIES = (PositionProvider,)

  def __init__(self) -> None:
    super().__init__()
    self.apply_vars: dict[str, str] = {}  # optimizer name -> its var list
    self.assigned: dict[str, int] = {}  # name -> line first assigned

  def visit_Assign(self, node: cst.Assign) -> None:
    line = self.get_metadata(PositionProvider, node).start.line
    for target in node.targets:
      if isinstance(target.target, cst.Name):
        self.assigned.setdefault(target.target.value, line)

  def visit_Call(self, node: cst.Call) -> None:
    func = node.func
    if not (m.matches(func, m.Attribute(value=m.Name(),
                                        attr=m.Name("apply_gradients")))
            and node.args and m.matches(node.args[0].value, m.Call(
                func=m.Name("zip"), args=[m.Arg(), m.Arg()]))):
      return
    var_list = node.args[0].value.args[1].value  # type: ignore
    self.apply_vars[func.value.value] = (  # type: ignore
        cst.Module([]).code_for_node(var_list))


class Migrator(cst.CSTTransformer):
  """Collects `Finding`s and rewrites the uses that keep behaviour."""

  METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider)

  def __init__(self, prepass: "Prepass") -> None:
    super().__init__()
    self.prepass = prepass
    self.findings: list[Finding] = []
    self.needs_keras = False
    self.needs_tf = False
    self.lso_names: set[str] = set()
    self.lso_lines: set[tuple[str, int]] = set()

  def _names(self, node: cst.CSTNode) -> list[str]:
    return sorted(table.normalise(q.name) for q in
                  self.get_metadata(QualifiedNameProvider, node, set()))

  def _add(self, node: cst.CSTNode, api: str, replacement: Optional[str],
           change: str, status: str) -> None:
    pos = self.get_metadata(PositionProvider, node).start
    self.findings.append(Finding(pos.line, pos.column + 1, api,
                                 replacement if replacement is not None
                                 else "(none)", change, status))

  # Names: function and class endpoints.
  def leave_Call(self, original: cst.Call, updated: cst.Call
                 ) -> cst.BaseExpression:
    for name in self._names(original.func):
      if _special(name) and name.endswith("LossScaleOptimizer"):
        return self._lso(original, updated, name)
      if _special(name):
        return self._layer_policy(original, updated, name)
    return self._method_call(original, updated)

  def leave_Attribute(self, original: cst.Attribute,
                      updated: cst.Attribute) -> cst.BaseExpression:
    for name in self._names(original):
      if name in table.NATIVE:
        self._add(original, name, "unchanged", "Keras 3 has it", "native")
      elif name in table.FUNCTIONS and not _special(name):
        return self._replace_name(original, updated, name)
    return self._method_attribute(original, updated)

  def leave_Name(self, original: cst.Name, updated: cst.Name
                 ) -> cst.BaseExpression:
    for name in self._names(original):
      if name in table.FUNCTIONS and not _special(name):
        return self._replace_name(original, updated, name)
    return updated

  def _replace_name(self, original: cst.CSTNode, updated: Any,
                    name: str) -> Any:
    replacement, change = table.FUNCTIONS[name]
    if replacement is None:
      self._add(original, name, None, change, "manual")
      return updated
    self._add(original, name, replacement, change, "rewrite")
    if replacement.startswith("keras."):
      self.needs_keras = True
    return _expr(replacement)

  # Imports: names there are declarations, not uses.
  def visit_Import(self, node: cst.Import) -> bool:
    return False

  def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
    return False

  def _lso_args(self, original: cst.Call, updated: cst.Call, name: str
                ) -> Optional[list[cst.Arg]]:
    """Keras 3 arguments for a TF 2.3/2.4 LossScaleOptimizer call, or None."""
    order = (["optimizer", "loss_scale"] if "experimental" in name else
             ["inner_optimizer", "dynamic", "initial_scale",
              "dynamic_growth_steps"])
    named: dict = {}
    for i, (arg, new) in enumerate(zip(original.args, updated.args)):
      if arg.star or i >= len(order) and arg.keyword is None:
        return None
      named[arg.keyword.value if arg.keyword else order[i]] = (arg, new)
    inner = named.pop(order[0], None)
    if inner is None:
      return None
    out = [inner[1]]
    if "loss_scale" in named:
      extra = self._loss_scale_args(named.pop("loss_scale")[0].value)
      if extra is None:
        return None
      out += extra
    dynamic = named.pop("dynamic", None)
    if dynamic is not None and not m.matches(dynamic[0].value,
                                             m.Name("True")):
      return None
    for key, (_, new) in named.items():
      out.append(cst.Arg(keyword=cst.Name(key), value=new.value,
                         equal=cst.AssignEqual(cst.SimpleWhitespace(""),
                                               cst.SimpleWhitespace(""))))
    return out

  def _loss_scale_args(self, value: cst.BaseExpression
                       ) -> Optional[list[cst.Arg]]:
    if isinstance(value, cst.SimpleString) and (
        value.evaluated_value == "dynamic"):
      return []
    if not (isinstance(value, cst.Call) and any(
        n.endswith("DynamicLossScale") for n in self._names(value.func))):
      return None
    out = []
    order = ["initial_loss_scale", "increment_period", "multiplier"]
    for i, arg in enumerate(value.args):
      key = arg.keyword.value if arg.keyword else order[i]
      if key == "multiplier":
        if not m.matches(arg.value, m.Integer("2") | m.Float("2.0")):
          return None
        continue
      out.append(cst.Arg(keyword=cst.Name(_DYNAMIC_ARGS[key]),
                         value=arg.value, equal=cst.AssignEqual(
                             cst.SimpleWhitespace(""),
                             cst.SimpleWhitespace(""))))
    pos = self.get_metadata(PositionProvider, value.func).start
    self.findings = [f for f in self.findings if (f.line, f.column) != (
        pos.line, pos.column + 1)]
    return out

  def _lso(self, original: cst.Call, updated: cst.Call, name: str
           ) -> cst.BaseExpression:
    replacement, change = table.FUNCTIONS[name]
    args = self._lso_args(original, updated, name)
    if args is None:
      self._add(original, name, replacement, "not rewritten: a fixed loss "
                "scale, a LossScale object or arguments Keras 3 cannot "
                "express (Keras 3's LossScaleOptimizer is dynamic only). "
                + change, "manual")
      return updated
    self._add(original, name, replacement, change, "rewrite")
    self.needs_keras = True
    # The kept arguments keep their own spacing; the last loses its comma
    # only when arguments after it were dropped.
    if len(args) < len(updated.args):
      args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return updated.with_changes(func=_expr(str(replacement)), args=args)

  def _layer_policy(self, original: cst.Call, updated: cst.Call, name: str
                    ) -> cst.BaseExpression:
    if len(updated.args) != 1 or updated.args[0].keyword is not None:
      self._add(original, name, None, table.FUNCTIONS[name][1], "manual")
      return updated
    self._add(original, name, "layer.dtype_policy", "same policy object",
              "rewrite")
    return cst.Attribute(value=updated.args[0].value,
                         attr=cst.Name("dtype_policy"))

  def _method_call(self, original: cst.Call, updated: cst.Call
                   ) -> cst.BaseExpression:
    func = original.func
    if not isinstance(func, cst.Attribute):
      return updated
    attr = func.attr.value
    if attr == "get_scaled_loss" and len(original.args) == 1:
      self._add(original, "LossScaleOptimizer.get_scaled_loss",
                "scale_loss", table.METHODS[attr][1], "rewrite")
      return updated.with_changes(func=updated.func.with_changes(
          attr=cst.Name("scale_loss")))
    if attr == "get_unscaled_gradients" and len(original.args) == 1:
      self._add(original, "LossScaleOptimizer.get_unscaled_gradients",
                "(the gradients as they are)", table.METHODS[attr][1],
                "rewrite")
      return updated.args[0].value
    new_func = updated.func
    if attr == "loss_scale" and not original.args and m.matches(
        new_func, m.Call(func=m.Attribute(attr=m.Name("convert_to_tensor")))):
      return new_func  # TF 2.3's `loss_scale()` call: the same tensor.
    return updated

  def _method_attribute(self, original: cst.Attribute,
                        updated: cst.Attribute) -> cst.BaseExpression:
    attr = original.attr.value
    if attr not in ("loss_scale", "dynamic_counter"):
      return updated
    replacement, change = table.METHODS[attr]
    receiver = original.value
    if isinstance(receiver, cst.Name) and receiver.value in self.lso_names \
        or m.matches(receiver, m.Attribute(attr=m.Name("optimizer"))):
      renamed = updated.with_changes(attr=cst.Name(str(replacement)))
      if attr == "dynamic_counter":
        self._add(original, "LossScaleOptimizer." + attr, replacement,
                  change, "rewrite")
        return renamed
      # TF 2.3's `loss_scale()` and TF 2.4's `loss_scale` gave a tensor
      # (also of a mirrored variable, which `float()` cannot take).
      self._add(original, "LossScaleOptimizer." + attr,
                "tf.convert_to_tensor(<optimizer>.dynamic_scale)", change,
                "rewrite")
      self.needs_tf = True
      return cst.Call(func=_expr("tf.convert_to_tensor"),
                      args=[cst.Arg(value=renamed)])
    self._add(original, "LossScaleOptimizer." + attr, replacement,
              "not rewritten: not known to be a loss-scale optimizer (a "
              "TF 2.3 Policy has `loss_scale` too). " + change, "manual")
    return updated

  def visit_Assign(self, node: cst.Assign) -> None:
    if isinstance(node.value, cst.Call) and any(
        n.endswith("LossScaleOptimizer") for n in self._names(
            node.value.func)):
      line = self.get_metadata(PositionProvider, node).start.line
      for target in node.targets:
        if isinstance(target.target, cst.Name):
          self.lso_names.add(target.target.value)
          self.lso_lines.add((target.target.value, line))

  def leave_Module(self, original: cst.Module, updated: cst.Module
                   ) -> cst.Module:
    manual = any(f.status == "manual" for f in self.findings)
    for statement in original.body:
      if _imports_package(statement):
        self.findings.append(Finding(
            self.get_metadata(PositionProvider, statement).start.line, 1,
            "import tf_mixed_precision_compat",
            "(kept: some uses need manual work)" if manual else "(removed)",
            "the package is no longer needed",
            "manual" if manual else "rewrite"))
    if manual:
      return updated
    # Statements only get added around others, never replace an import.
    return updated.with_changes(body=[
        s for s in updated.body if not _imports_package(s)])

  def leave_SimpleStatementLine(
      self, original: cst.SimpleStatementLine,
      updated: cst.SimpleStatementLine) -> Any:
    """Builds Keras 3 optimizers where TF 2.x had their variables already."""
    line = self.get_metadata(PositionProvider, original).start.line
    found = [self._build_for_checkpoint(call, line) for call in m.findall(
        original, m.Call(func=m.Attribute(attr=m.Name("Checkpoint"))))]
    before = [statement for statement in found if statement is not None]
    found = [self._build_after(name, line) for name, at in
             sorted(self.lso_lines) if at == line]
    after = [statement for statement in found if statement is not None]
    if not before and not after:
      return updated
    if before:  # Blank lines and comments above the statement go first.
      before[0] = before[0].with_changes(leading_lines=updated.leading_lines)
      updated = updated.with_changes(leading_lines=())
    return cst.FlattenSentinel([*before, updated, *after])

  def _build_after(self, name: str, line: int) -> Optional[cst.BaseStatement]:
    """`opt.build(model.trainable_variables)` right after the optimizer."""
    var_list = self.prepass.apply_vars.get(name)
    if var_list is None or self.prepass.assigned.get(
        var_list.split(".")[0], line) >= line:
      return None
    self.findings.append(Finding(
        line, 1, f"{name} = LossScaleOptimizer(...)",
        f"{name}.build({var_list}) inserted after it",
        "Keras 3 creates the scale variable when the optimizer is built; "
        "built here, scale_loss in a tf.function reads the (restored) "
        "variable instead of baking in initial_scale, and `dynamic_scale` "
        "exists before the first step", "rewrite"))
    return cst.parse_statement(f"{name}.build({var_list})\n")

  def _build_for_checkpoint(self, call: Any, line: int
                            ) -> Optional[cst.BaseStatement]:
    """A compiled model's optimizer, built before a checkpoint names it."""
    if not any(n in ("tf.train.Checkpoint", "tf.compat.v2.train.Checkpoint")
               for n in self._names(call.func)):
      return None
    for arg in call.args:
      if arg.keyword is not None and arg.keyword.value == "optimizer" and \
          m.matches(arg.value, m.Attribute(value=m.Name(),
                                           attr=m.Name("optimizer"))):
        model = arg.value.value.value
        self.findings.append(Finding(
            line, 1, f"tf.train.Checkpoint(optimizer={model}.optimizer)",
            f"{model}.optimizer built before it (if not yet)",
            "Keras 3 creates a compiled model's optimizer variables at its "
            "first step; built first, the checkpoint restores (or saves) "
            "them as TF 2.x's did", "rewrite"))
        return cst.parse_statement(
            f"if not {model}.optimizer.built: {model}.optimizer.build("
            f"{model}.trainable_variables)\n")
    return None


def _special(name: str) -> bool:
  """Names rewritten as whole calls (arguments change), not as names."""
  return name in table.FUNCTIONS and name.startswith("keras.") and (
      name.endswith(("LossScaleOptimizer", "get_layer_policy")))


def _imports_package(statement: cst.CSTNode) -> bool:
  if not isinstance(statement, cst.SimpleStatementLine):
    return False
  for small in statement.body:
    if isinstance(small, cst.Import) and any(
        cst.Module([]).code_for_node(a.name).startswith(
            "tf_mixed_precision_compat") for a in small.names):
      return True
    if isinstance(small, cst.ImportFrom) and small.module is not None and (
        cst.Module([]).code_for_node(small.module).startswith(
            "tf_mixed_precision_compat")):
      return True
  return False


def migrate_source(source: str) -> tuple[str, list[Finding]]:
  """Rewrites `source`; returns the new code and every finding.

  Args:
    source: A Python module's text.

  Returns:
    `(new source, findings)`; the new source differs only where a finding
    has status "rewrite".

  Raises:
    libcst.ParserSyntaxError: If `source` is not valid Python.

  Example:

  >>> code, found = migrate_source(
  ...     "from tensorflow.keras.mixed_precision import experimental as mp\\n"
  ...     "mp.set_policy('mixed_float16')  # fp16\\n")
  >>> print(code, end="")
  import keras
  <BLANKLINE>
  keras.mixed_precision.set_global_policy('mixed_float16')  # fp16
  """
  # pylint: disable=g-import-not-at-top
  from libcst.codemod import CodemodContext
  from libcst.codemod.visitors import AddImportsVisitor
  from libcst.metadata import MetadataWrapper
  wrapper = MetadataWrapper(cst.parse_module(source))
  prepass = Prepass()
  wrapper.visit(prepass)
  migrator = Migrator(prepass)
  new = wrapper.visit(migrator)
  context = CodemodContext()
  if migrator.needs_keras:
    AddImportsVisitor.add_needed_import(context, "keras")
  if migrator.needs_tf:
    AddImportsVisitor.add_needed_import(context, "tensorflow", asname="tf")
  if migrator.needs_keras or migrator.needs_tf:
    new = AddImportsVisitor(context).transform_module(new)
  new = _remove_unused_experimental(new, context)
  return new.code, sorted(migrator.findings,
                          key=lambda f: (f.line, f.column))


def _remove_unused_experimental(module: cst.Module, context: Any
                                ) -> cst.Module:
  # pylint: disable-next=g-import-not-at-top
  from libcst.codemod.visitors import RemoveImportsVisitor
  for statement in module.body:
    if not isinstance(statement, cst.SimpleStatementLine):
      continue
    for small in statement.body:
      if isinstance(small, cst.ImportFrom) and small.module is not None and \
          not isinstance(small.names, cst.ImportStar):
        mod = cst.Module([]).code_for_node(small.module)
        for alias in small.names:
          # Names the rewrites replaced leave their imports unused; unused
          # imports of the old API are removed (it no longer exists).
          asname = alias.asname.name if alias.asname else None
          if ("mixed_precision" in mod or "experimental" in mod) and \
              isinstance(alias.name, cst.Name) and (
                  asname is None or isinstance(asname, cst.Name)):
            RemoveImportsVisitor.remove_unused_import(
                context, mod, alias.name.value,
                asname.value if isinstance(asname, cst.Name) else None)
  return RemoveImportsVisitor(context).transform_module(module)
