"""What a saved file holds, as a plain dict (nothing from the file executed).

JSON configs are parsed as data; no pickle, marshal or graph function is run.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import zipfile
import zlib
from typing import Any

from google.protobuf import message
import h5py

from tf_mixed_precision_compat.cli import _ckpt


def _checkpoint_dict(info: _ckpt.CheckpointInfo) -> dict:
  optimizers = [dataclasses.asdict(o) for o in info.optimizers]
  return {"format": "tf-checkpoint", "source": info.prefix,
          "generation": info.generation,
          "weights": [{"name": k, "shape": s, "dtype": d}
                      for k, (s, d) in sorted(info.weights.items())],
          "optimizers": optimizers, "other": info.other,
          "notes": ([_ckpt.NAME_BASED_PATH]
                    if info.generation == _ckpt.NAME_BASED else [])}


def _datasets(group: Any) -> list[tuple[str, list, str]]:
  out: list = []
  group.visititems(lambda name, obj: out.append(
      (name, list(obj.shape), obj.dtype.name))
      if isinstance(obj, h5py.Dataset) else None)
  return out


def _json_attr(f: Any, name: str) -> Any:
  value = f.attrs.get(name)
  if value is None:
    return None
  return json.loads(value.decode() if isinstance(value, bytes) else value)


def _h5_optimizer(f: Any, training: Any) -> list[dict]:
  if "optimizer_weights" not in f:
    return []
  config = (training or {}).get("optimizer_config", {})
  opt: dict = {"path": "optimizer_weights", "layout": "keras2 (H5)",
               "class_name": config.get("class_name"),
               "hyperparameters": config.get("config", {}), "slots": {},
               "iterations": None,
               "loss_scale": {"type": "not stored",
                              "note": "TF 2.x never wrote the loss scale "
                                      "to H5 files; a dynamic scale "
                                      "restarts from its initial value"}}
  for name, shape, _ in _datasets(f["optimizer_weights"]):
    leaf = name.rsplit("/", 1)[-1].split(":")[0]
    if leaf == "iter":
      opt["iterations"] = int(f["optimizer_weights"][name][()])
    else:
      var = "/".join(name.split("/")[-3:-1])
      opt["slots"].setdefault(var, []).append(f"{leaf} {shape}")
  return [opt]


def _unreadable(path: str, what: str, error: Exception) -> ValueError:
  """The one-line error for a damaged `path`, with the reader's reason."""
  reason = " ".join(str(error).split()) or type(error).__name__
  return ValueError(f"{path}: not a readable {what} (truncated or "
                    f"corrupt?): {reason}")


def describe_h5(path: str) -> dict:
  """A TF 2.x / Keras 3 H5 file (`model.save`, `save_weights`)."""
  try:
    with h5py.File(path, "r") as f:
      return _describe_open_h5(f, path)
  # h5py raises OSError for a damaged file or object, KeyError for a
  # broken link, RuntimeError when a walk meets a damaged node; the JSON
  # configs ValueError.
  except (OSError, KeyError, RuntimeError, ValueError) as e:
    raise _unreadable(path, "HDF5 file", e) from None


def _describe_open_h5(f: Any, path: str) -> dict:
  version = f.attrs.get("keras_version", b"")
  version = version.decode() if isinstance(version, bytes) else version
  if "vars" in f or "layers" in f or "_layer_checkpoint_dependencies" in f:
    return _keras3_weights(f, path, "keras3-weights-h5")
  model = _json_attr(f, "model_config")
  training = _json_attr(f, "training_config")
  group = f["model_weights"] if "model_weights" in f else f
  weights = [{"name": n, "shape": s, "dtype": d}
             for n, s, d in _datasets(group)]
  return {"format": "h5-model" if model else "h5-weights", "source": path,
          "generation": f"TF 2.x Keras {version} (H5, backend "
                        f"{f.attrs.get('backend', '?')!s})",
          "model_class": (model or {}).get("class_name"),
          "layers": [layer["config"].get("name") for layer in
                     (model or {}).get("config", {}).get("layers", [])],
          "weights": weights, "optimizers": _h5_optimizer(f, training),
          "other": {"loss": (training or {}).get("loss")}, "notes": []}


def _keras3_weights(f: Any, source: str, kind: str) -> dict:
  weights = [{"name": n, "shape": s, "dtype": d} for n, s, d in _datasets(f)
             if not n.startswith("optimizer/")]
  slots = [f"{n} {s}" for n, s, _ in _datasets(f) if n.startswith("optimizer/")]
  return {"format": kind, "source": source,
          "generation": "Keras 3 (`.weights.h5` layout: layers/<name>/vars)",
          "weights": weights,
          "optimizers": [{"path": "optimizer", "layout": "keras3",
                          "slots": {"(by position)": slots}}] if slots else [],
          "other": {}, "notes": []}


def describe_keras_archive(path: str) -> dict:
  """A Keras 3 `.keras` zip: its config (as JSON data) and weights."""
  try:
    with zipfile.ZipFile(path) as archive:
      config = json.loads(archive.read("config.json"))
      meta = json.loads(archive.read("metadata.json"))
      with h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r") as f:
        out = _keras3_weights(f, path, "keras3-archive")
  # zipfile: BadZipFile (a bad CRC), zlib.error, KeyError for a missing
  # member; h5py as in `describe_h5`; json ValueError.
  except (zipfile.BadZipFile, zlib.error, KeyError, OSError, RuntimeError,
          ValueError) as e:
    raise _unreadable(path, ".keras archive", e) from None
  out["generation"] = f"Keras {meta.get('keras_version')} (`.keras` archive)"
  out["model_class"] = config.get("class_name")
  opt = (config.get("compile_config") or {}).get("optimizer")
  if isinstance(opt, dict) and out["optimizers"]:
    out["optimizers"][0]["class_name"] = opt.get("class_name")
    out["optimizers"][0]["hyperparameters"] = opt.get("config")
  return out


def describe_saved_model(path: str) -> dict:
  """A TF 2.x Keras SavedModel: the version that wrote it, its variables."""
  # pylint: disable-next=g-import-not-at-top
  from tensorflow.core.protobuf import saved_model_pb2
  pb = os.path.join(path, "saved_model.pb")
  with open(pb, "rb") as f:
    try:
      proto = saved_model_pb2.SavedModel.FromString(f.read())
    except message.DecodeError as e:
      raise _unreadable(pb, "SavedModel", e) from None
  if not proto.meta_graphs:  # An empty file parses, as an empty proto.
    raise ValueError(f"{pb}: not a readable SavedModel (empty or "
                     "truncated?): it holds no MetaGraph")
  meta = proto.meta_graphs[0].meta_info_def
  out = _checkpoint_dict(_ckpt.describe(
      os.path.join(path, "variables", "variables")))
  out["format"] = "saved-model"
  out["source"] = path
  out["generation"] = (f"SavedModel written by TensorFlow "
                       f"{meta.tensorflow_version}; variables: "
                       + out["generation"])
  _saved_keras_metadata(proto, out)
  return out


def _saved_keras_metadata(proto: Any, out: dict) -> None:
  """Layers and optimizer config from the nodes' `user_object.metadata` JSON."""
  nodes = proto.meta_graphs[0].object_graph_def.nodes
  if not nodes or nodes[0].WhichOneof("kind") != "user_object":
    return
  try:
    root = json.loads(nodes[0].user_object.metadata or "{}")
  except ValueError:
    return
  out["model_class"] = root.get("class_name")
  out["layers"] = [json.loads(n.user_object.metadata).get("name") for n in
                   nodes[1:] if n.WhichOneof("kind") == "user_object" and
                   n.user_object.identifier.endswith("layer")]
  config = (root.get("training_config") or {}).get("optimizer_config")
  if not config or not out["optimizers"]:
    return
  opt = out["optimizers"][0]
  opt["saved_config"] = config
  fields = config.get("config", {})
  # TF 2.4 names the inner optimizer `inner_optimizer`, TF 2.3 `optimizer`
  # (with the loss scale's own config under `loss_scale`).
  inner = fields.get("inner_optimizer") or fields.get("optimizer") or {}
  if isinstance(inner, dict) and inner.get("class_name"):
    opt["class_name"] = inner["class_name"]
    opt["class_note"] = (f"from the saved config ({config.get('class_name')}"
                         " around it)")
  scale = fields.get("loss_scale")
  growth = fields.get("dynamic_growth_steps", (
      scale.get("config", {}).get("increment_period")
      if isinstance(scale, dict) else None))
  if opt.get("loss_scale") and growth is not None:
    opt["loss_scale"]["growth_steps"] = growth


def describe(path: str) -> dict:
  """A checkpoint, H5 file, SavedModel, `.keras` or `.weights.h5` as a dict.

  The dict has `format`, `generation`, `weights`, `optimizers`, `other`.
  Raises FileNotFoundError if nothing is there, ValueError or OSError if it
  cannot be read.

  Example:

  >>> describe("/no/such/file.h5")
  Traceback (most recent call last):
  ...
  FileNotFoundError: No checkpoint at '/no/such/file.h5': ...
  """
  if os.path.isdir(path) and os.path.exists(
      os.path.join(path, "saved_model.pb")):
    return describe_saved_model(path)
  if os.path.isfile(path) and zipfile.is_zipfile(path):
    return describe_keras_archive(path)
  if os.path.isfile(path) and h5py.is_hdf5(path):
    return describe_h5(path)
  if os.path.isfile(path) and not os.path.exists(path + ".index"):
    # An H5 file or archive cut short or overwritten lands here too.
    raise ValueError(
        f"{path}: not a readable checkpoint, H5 file or .keras archive "
        f"({os.path.getsize(path)} bytes; empty, truncated or corrupt?)")
  return _checkpoint_dict(_ckpt.describe(path))
