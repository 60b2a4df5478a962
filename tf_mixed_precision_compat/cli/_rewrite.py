"""The libcst transformer behind `migrate`: finds and rewrites API uses.

Names resolve through the file's imports, methods by name on receivers the
facts (`_facts.py`) say hold an optimizer or a policy. A use is rewritten
only where Keras 3 does what TF 2.x did; any other is a "manual" finding.
"""

from __future__ import annotations

from typing import Any

import libcst as cst
from libcst import matchers as m
from libcst.metadata import PositionProvider

from tf_mixed_precision_compat.cli import _api_table as table
from tf_mixed_precision_compat.cli import _facts
from tf_mixed_precision_compat.cli._facts import code
from tf_mixed_precision_compat.cli._rewrite_base import Finding
from tf_mixed_precision_compat.cli._rewrite_base import Substitute
from tf_mixed_precision_compat.cli._rewrite_build import BuildRewrites
from tf_mixed_precision_compat.cli._rewrite_fixed import FixedScaleRewrites
from tf_mixed_precision_compat.cli._rewrite_fixed import NEW_LSO as _NEW_LSO
from tf_mixed_precision_compat.cli._rewrite_grads import GradientRewrites
from tf_mixed_precision_compat.cli._rewrite_scale import LossScaleRewrites

_PRIVATE_MODULES = ("tensorflow.python.keras.mixed_precision",
                    "tensorflow.python.training.experimental.loss_scale",
                    "tensorflow.python.training.experimental.mixed_precision")


def _special(name: str) -> bool:
  """Names rewritten as whole calls (arguments change), not as names."""
  return name in table.GRAPH_REWRITE or name == table.GRAPH_REWRITE_OFF[0] \
      or name in table.FUNCTIONS and name.startswith("keras.") and (
          name.endswith(("LossScaleOptimizer", "get_layer_policy",
                         "experimental.Policy")))




class Migrator(LossScaleRewrites, BuildRewrites, GradientRewrites,
               FixedScaleRewrites):
  """Collects `Finding`s and rewrites the uses that keep behaviour."""

  def visit_Module(self, node: cst.Module) -> None:
    self.scan_rescaled(node)
    self.scan_fixed(node)
    self.scan_tape_sources(node)

  def visit_Call(self, node: cst.Call) -> None:
    self._call_funcs.add(node.func)

  # Imports: names there are declarations, not uses; TF's private modules
  # of the old API are gone.
  def visit_Import(self, node: cst.Import) -> bool:
    for alias in node.names:
      self._private_module(node, code(alias.name))
    return False

  def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
    if node.module is not None:
      self._private_module(node, code(node.module))
    return False

  def _private_module(self, node: cst.CSTNode, module: str) -> None:
    if module.startswith(_PRIVATE_MODULES):
      self._add(node, module, None, "not rewritten: a private TensorFlow "
                "module of the old API, gone in TF 2.21: subclass or use "
                "keras.optimizers.LossScaleOptimizer (its `inner_optimizer`, "
                "`dynamic_scale`, `step_counter`) instead", "manual")

  def leave_Call(self, original: cst.Call, updated: cst.Call
                 ) -> cst.BaseExpression:
    for name in self._names(original.func):
      if name in table.GRAPH_REWRITE:
        return self._graph_rewrite(original, updated, name)
      if name == table.GRAPH_REWRITE_OFF[0]:
        self._add(original, name, table.GRAPH_REWRITE_OFF[1],
                  table.GRAPH_REWRITE_OFF[2], "rewrite")
        self.needs_tf = True
        return cst.parse_expression(table.GRAPH_REWRITE_OFF[1])
      if _special(name) and name.endswith("LossScaleOptimizer"):
        return self._lso(original, updated, name)
      if _special(name) and name.endswith("Policy"):
        return self._policy(original, updated, name)
      if _special(name):
        return self._layer_policy(original, updated, name)
    checked = self.is_loss_scaled_form(original, updated)
    if checked is not None:
      return checked
    return self._method_call(original, updated)

  def leave_Attribute(self, original: cst.Attribute,
                      updated: cst.Attribute) -> cst.BaseExpression:
    for name in self._names(original):
      if name in table.NATIVE:
        self._add(original, name, "unchanged", "Keras 3 has it", "native")
      elif table.is_tf2_lso(name) and original not in self._call_funcs:
        return self._replace_name(original, updated, name)
      elif name in table.FUNCTIONS and not _special(name):
        return self._replace_name(original, updated, name)
    return self._method_attribute(original, updated)

  def leave_Name(self, original: cst.Name, updated: cst.Name
                 ) -> cst.BaseExpression:
    for name in self._names(original):
      if (name in table.FUNCTIONS and not _special(name) or
          table.is_tf2_lso(name) and original not in self._call_funcs):
        return self._replace_name(original, updated, name)
    return updated

  def _replace_name(self, original: cst.CSTNode, updated: Any,
                    name: str) -> Any:
    replacement, change = table.FUNCTIONS[name]
    if replacement is None:
      self._add(original, name, None, change, "manual")
      return updated
    if table.is_tf2_lso(name):  # A class reference (isinstance, a type check).
      change = "the same check: Keras 3's class is the optimizer's type"
      if "experimental" in name and _NEW_LSO in self.facts.called:
        self._add(original, name, replacement, "not rewritten: TF 2.4's "
                  f"{_NEW_LSO}, which this file builds, is no instance of "
                  "the experimental class, so this check was False for it; "
                  "Keras 3 has one class, for which it would be True: write "
                  "the outcome the job had (or check for "
                  f"{replacement} where both classes were meant)", "manual")
        return updated
    self._add(original, name, replacement, change, "rewrite")
    if replacement.startswith("keras."):
      self.needs_keras = True
    return cst.parse_expression(replacement)

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
    optimizer = self.facts.kind_of(func.value, self.scope) == "optimizer"
    if attr == "get_scaled_loss" and len(original.args) == 1:
      self._add(original, "LossScaleOptimizer.get_scaled_loss",
                "scale_loss", table.METHODS[attr][1], "rewrite")
      return updated.with_changes(func=updated.func.with_changes(
          attr=cst.Name("scale_loss")))
    if attr == "get_unscaled_gradients" and len(original.args) == 1:
      api = "LossScaleOptimizer.get_unscaled_gradients"
      if code(func.value) in self.rescaled:  # Its gradients go on.
        return self.unscale_as_tf(original, updated)
      self._add(original, api, "(the gradients as they are)",
                table.METHODS[attr][1], "rewrite")
      return updated.args[0].value
    if attr == "get_gradients" and (
        optimizer or _facts.looks_like_optimizer(func.value)) and \
        self.facts.optimizer_family(func.value, self.scope) != "v1":
      self._add(original, "LossScaleOptimizer.get_gradients", None,
                "not rewritten: Keras 3's optimizers have no get_gradients; "
                "TF 2.x scaled the loss, took its gradients and unscaled "
                "them: write `grads = tape.gradient(opt.scale_loss(loss), "
                "params)` and hand them to `opt.apply_gradients` as they "
                "are (it unscales them); where they go on to other code "
                "first (accumulation, clipping), divide them by "
                "`opt.dynamic_scale` there and multiply them by it again "
                "before apply_gradients", "manual")
      return updated
    if attr == "variables" and not original.args and (
        optimizer or _facts.looks_like_optimizer(func.value)) and \
        self.facts.optimizer_family(func.value, self.scope) != "v1":
      self._add(original, "Optimizer.variables()", "variables",
                "Keras 3's `variables` is a list property (a method in TF "
                "2.x); a LossScaleOptimizer's list also holds its scale and "
                "counter", "rewrite")
      return updated.func
    if attr == "apply_gradients" and len(original.args) > 1:
      updated = self._apply_extra_args(original, updated)  # type: ignore
    if attr == "apply_gradients" and original.args and isinstance(
        updated, cst.Call) and code(func.value) in self.rescaled:
      return self.apply_as_given(original, updated)
    if attr == "apply_gradients":
      return updated
    if attr == "_create_all_weights" and optimizer and len(
        original.args) == 1 and m.matches(
            func.value, m.Name() | m.Attribute(value=m.Name())) and \
        self.facts.optimizer_family(func.value, self.scope) != "v1":
      return self._create_all_weights(original, updated)
    new_func = updated.func
    if attr == "loss_scale" and not original.args and m.matches(
        new_func, m.Call(func=m.Attribute(attr=m.Name("convert_to_tensor")))):
      return new_func  # TF 2.3's `loss_scale()` call: the same tensor.
    return updated

  def _create_all_weights(self, original: cst.Call, updated: cst.Call
                          ) -> cst.BaseExpression:
    """TF 2.x's `opt._create_all_weights(vars)`: Keras 3's `build`, once."""
    receiver = updated.func.value  # type: ignore[attr-defined]
    template = cst.parse_expression(
        "OPT.build(VARS) if not OPT.built else None")
    new = template.visit(Substitute({"OPT": receiver,
                                      "VARS": updated.args[0].value}))
    self._add(original, "Optimizer._create_all_weights",
              "build(var_list) if not built", "the same variables, made "
              "for var_list before a restore fills them: Keras 3 builds an "
              "optimizer once (a second build would make new ones)",
              "rewrite")
    return cst.ensure_type(new, cst.IfExp)

  def _apply_extra_args(self, original: cst.Call, updated: cst.Call
                        ) -> cst.BaseExpression:
    """TF 2.x's `name` and `experimental_aggregate_gradients` arguments."""
    api = "LossScaleOptimizer.apply_gradients"
    keys = [a.keyword.value if a.keyword else ("name" if i == 1 else "")
            for i, a in enumerate(original.args)]
    if not self.facts.is_lso(original.func.value,  # type: ignore
                             self.scope):
      return updated  # Another optimizer's own signature: left alone.
    aggregate = [a for a, k in zip(original.args, keys)
                 if k == "experimental_aggregate_gradients"]
    if any(k not in ("", "name", "experimental_aggregate_gradients")
           for k in keys[1:]) or aggregate and not m.matches(
               aggregate[0].value, m.Name("True")):
      self._add(original, api, None, "Keras 3's apply_gradients takes the "
                "gradients and variables only, and aggregates across "
                "replicas itself: drop the other arguments (for "
                "experimental_aggregate_gradients=False, pass gradients "
                "not yet summed across replicas)", "manual")
      return updated
    self._add(original, api, "apply_gradients(grads_and_vars)",
              "TF 2.x's other arguments dropped: `name` named the ops only, "
              "and aggregating across replicas is what Keras 3 does",
              "rewrite")
    first = updated.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return updated.with_changes(args=[first])

  def _method_attribute(self, original: cst.Attribute,
                        updated: cst.Attribute) -> cst.BaseExpression:
    attr = original.attr.value
    if attr not in ("loss_scale", "dynamic_counter", "lr", "_optimizer",
                    "_loss_scale"):
      return updated
    kind = self.facts.kind_of(original.value, self.scope)
    if attr.startswith("_"):
      return self._private_attribute(original, updated, kind)
    if attr == "lr":
      if kind != "optimizer":
        return updated
      self._add(original, "Optimizer.lr", "learning_rate", "the same "
                "hyperparameter: Keras 3 dropped the `lr` alias", "rewrite")
      return updated.with_changes(attr=cst.Name("learning_rate"))
    if attr == "loss_scale" and kind == "policy":
      return self._policy_read(original, updated)
    replacement, change = table.METHODS[attr]
    if kind == "config":
      return updated  # A setting (flags.loss_scale), not the API.
    if kind != "optimizer":
      self._add(original, "LossScaleOptimizer." + attr, replacement,
                "not rewritten: not known to be a loss-scale optimizer or a "
                "policy. " + change, "manual")
      return updated
    renamed = updated.with_changes(attr=cst.Name(str(replacement)))
    if attr == "dynamic_counter":
      self._add(original, "LossScaleOptimizer." + attr, replacement, change,
                "rewrite")
      return renamed
    # TF 2.3's `loss_scale()` and TF 2.4's `loss_scale` gave a tensor
    # (also of a mirrored variable, which `float()` cannot take).
    self._add(original, "LossScaleOptimizer." + attr,
              "tf.convert_to_tensor(<optimizer>.dynamic_scale)", change,
              "rewrite")
    self.needs_tf = True
    if self.fixed:  # Optimizers with a fixed loss_scale_factor among them.
      self.needs_helper = True
      return cst.ensure_type(cst.parse_expression(
          "tf.convert_to_tensor(_scale(OPT), tf.float32)").visit(
              Substitute({"OPT": updated.value})), cst.Call)
    return cst.Call(func=cst.parse_expression("tf.convert_to_tensor"),
                    args=[cst.Arg(value=renamed)])

  def _private_attribute(self, original: cst.Attribute,
                         updated: cst.Attribute, kind: str
                         ) -> cst.BaseExpression:
    """TF 2.x's private `_optimizer` / `_loss_scale` of a loss-scale one."""
    if kind != "optimizer":
      return updated
    api = "LossScaleOptimizer." + original.attr.value
    if self.facts.optimizer_family(original.value, self.scope) == "v1":
      self._add(original, api, "unchanged", "TF's own tf.compat.v1 "
                "loss-scale optimizer, which migrate keeps, has it", "native")
      return updated
    if original.attr.value == "_optimizer":
      self._add(original, api, "inner_optimizer", "the same wrapped "
                "optimizer, public in Keras 3", "rewrite")
      return updated.with_changes(attr=cst.Name("inner_optimizer"))
    self._add(original, api, None, "not rewritten: TF 2.x's private loss "
              "scale object has no Keras 3 counterpart (its scale is "
              "`dynamic_scale`, its counter `step_counter`; a custom "
              "update rule needs a LossScaleOptimizer subclass)", "manual")
    return updated

  def leave_Module(self, original: cst.Module, updated: cst.Module
                   ) -> cst.Module:
    manual = any(f.status == "manual" and f.old_api for f in self.findings)
    for statement in original.body:
      if _imports_package(statement):
        self.findings.append(Finding(
            self._pos(statement)[0], 1, "import tf_mixed_precision_compat",
            "(kept: some uses need manual work)" if manual else "(removed)",
            "kept until the uses marked MANUAL are changed by hand" if manual
            else "the package is no longer needed",
            "manual" if manual else "rewrite"))
    body: list[Any] = list(updated.body)
    imports = [i for i, s in enumerate(body) if m.matches(
        s, m.SimpleStatementLine(body=[m.Import() | m.ImportFrom()]))]
    at = imports[-1] + 1 if imports else 0
    helpers = self.helper_statements() + self.fixed_helper_statements()
    if helpers and at < len(body) and not body[at].leading_lines:
      body[at] = body[at].with_changes(  # Two blank lines after them too.
          leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    body[at:at] = helpers
    # Statements only get added around others, never replace an import.
    return updated.with_changes(body=[
        s for s in body if manual or not _imports_package(s)])

  def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
    self._before = []

  def leave_SimpleStatementLine(
      self, original: cst.SimpleStatementLine,
      updated: cst.SimpleStatementLine) -> Any:
    """Statements Keras 3 needs around this one."""
    line = self._pos(original)[0]
    before = self._before + [s for s in (
        self._build_for_checkpoint(call, line) for call in m.findall(
            original, m.Call(func=m.Attribute(attr=m.Name("Checkpoint")))))
                             if s is not None]
    self._before = []
    updated = self._mark(original, updated)
    # A fixed scale's plain optimizer has no scale variable to build.
    plain = any(self.fixed.get(call, ("",))[0] == "fixed"  # type: ignore
                for call in m.findall(original, m.Call()))
    after = [s for s in (self._build_after(name, scope) for name, at, scope
                         in self.facts.lso_sites if at == line and not plain)
             if s is not None]
    if not before and not after:
      return updated
    if before:  # Blank lines and comments above the statement go first.
      before[0] = before[0].with_changes(leading_lines=updated.leading_lines)
      updated = updated.with_changes(leading_lines=())
    return cst.FlattenSentinel([*before, updated, *after])

  def _mark(self, original: cst.SimpleStatementLine,
            updated: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    """`updated` with the comments of the deviations written in it."""
    span = self.get_metadata(PositionProvider, original)
    marks = [self.marks.pop(line) for line in sorted(self.marks)
             if span.start.line <= line <= span.end.line]
    if not marks:
      return updated
    trailing = updated.trailing_whitespace
    old = trailing.comment.value + "; " if trailing.comment else "# "
    return updated.with_changes(trailing_whitespace=trailing.with_changes(
        whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(
            old + "migrate --deviate: " + "; ".join(marks))))


def _imports_package(statement: cst.CSTNode) -> bool:
  if not isinstance(statement, cst.SimpleStatementLine):
    return False
  for small in statement.body:
    if isinstance(small, cst.Import) and any(
        code(a.name).startswith("tf_mixed_precision_compat")
        for a in small.names):
      return True
    if isinstance(small, cst.ImportFrom) and small.module is not None and (
        code(small.module).startswith("tf_mixed_precision_compat")):
      return True
  return False


def migrate_source(source: str, deviate: bool = False
                   ) -> tuple[str, list[Finding]]:
  """`(new source, findings)`: `source` rewritten where a finding says so.

  With `deviate`, uses no Keras 3 code keeps get their closest native form
  too, each line marked by a `# migrate --deviate: ...` comment.

  Rewriting the new source again changes nothing. Raises
  libcst.ParserSyntaxError if `source` is not valid Python.

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
  facts = _facts.Facts()
  wrapper.visit(facts)
  migrator = Migrator(facts, deviate)
  new = wrapper.visit(migrator)
  context = CodemodContext()
  if migrator.needs_keras:
    AddImportsVisitor.add_needed_import(context, "keras")
  if migrator.needs_tf:
    AddImportsVisitor.add_needed_import(context, "tensorflow", asname="tf")
  if migrator.needs_math:
    AddImportsVisitor.add_needed_import(context, "math")
  if migrator.needs_keras or migrator.needs_tf or migrator.needs_math:
    new = AddImportsVisitor(context).transform_module(new)
  new = _remove_unused_experimental(new, context)
  return new.code, sorted(migrator.findings,
                          key=lambda f: (f.line, f.column))


def _remove_unused_experimental(module: cst.Module, context: Any
                                ) -> cst.Module:
  # pylint: disable-next=g-import-not-at-top
  from libcst.codemod.visitors import RemoveImportsVisitor
  # Imports inside functions too: a job may import the old API where it
  # sets the policy.
  for small in m.findall(module, m.ImportFrom()):
    if not isinstance(small, cst.ImportFrom) or small.module is None or \
        isinstance(small.names, cst.ImportStar):
      continue
    mod = code(small.module)
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
