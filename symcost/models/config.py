"""Transformer configurations: presets as data files (``presets/*.json``) and HuggingFace import.

    >>> cfg = load_model_config("llama3-70b")
    >>> cfg.L, cfg.D, cfg.F, cfg.N, cfg.K, cfg.H
    (80, 8192, 28672, 64, 8, 128)

The book's names: L layers, D model width, F MLP width, N query heads, K key/value heads, H head width,
V vocabulary; a gated MLP has three matrices; MoE models have E routed experts of width F_expert, k
active per token, shared experts and leading dense layers.
"""
from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import UsageError

PRESETS = Path(__file__).parent / "presets"
FIELDS = ("L", "D", "F", "N", "K", "H", "V")


@dataclass(frozen=True)
class ModelConfig:
    name: str
    L: int
    D: int
    F: int
    N: int
    K: int
    H: int
    V: int
    gated: bool = True
    tied_embeddings: bool = False
    E: int = 1
    k: int = 1
    shared_experts: int = 0
    F_expert: int | None = None
    dense_layers: int = 0
    source: str = ""
    notes: str = ""

    def __post_init__(self):
        for f in FIELDS + ("E", "k"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UsageError(f"model {self.name}: field {f} must be a positive integer, not {v!r}")
        if self.N % self.K:
            raise UsageError(f"model {self.name}: N={self.N} query heads do not divide into K={self.K} "
                             f"key/value heads")
        if self.k > self.E:
            raise UsageError(f"model {self.name}: k={self.k} active experts exceed E={self.E}")

    @property
    def is_moe(self) -> bool:
        return self.E > 1

    @property
    def G(self) -> int:
        """Query heads per key/value head."""
        return self.N // self.K

    def as_dict(self) -> dict:
        return asdict(self)


def _from_fields(d: dict, where: str) -> ModelConfig:
    known = set(ModelConfig.__dataclass_fields__)
    missing = [f for f in ("name",) + FIELDS if f not in d]
    if missing:
        raise UsageError(f"{where}: missing field {missing[0]!r}")
    extra = [k for k in d if k not in known]
    if extra:
        raise UsageError(f"{where}: unknown field {extra[0]!r}")
    return ModelConfig(**d)


def _int(d: dict, key: str, where: str, default=None) -> int:
    if key not in d:
        if default is None:
            raise UsageError(f"{where}: missing field {key!r}")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise UsageError(f"{where}: field {key!r} must be a positive integer, not {v!r}")
    return v


def from_hf_config(d: dict, name: str, source: str = "") -> ModelConfig:
    """A HuggingFace ``config.json`` (LLaMA, Mistral, Qwen, Gemma, DeepSeek; GPT-2 field names too)."""
    where = source or name
    if not isinstance(d, dict):
        raise UsageError(f"{where}: a model config must be a JSON object")
    if "n_embd" in d:  # GPT-2 style
        D = _int(d, "n_embd", where)
        N = _int(d, "n_head", where)
        return ModelConfig(name, L=_int(d, "n_layer", where), D=D, F=_int(d, "n_inner", where, 4 * D) if
                           d.get("n_inner") is not None else 4 * D, N=N, K=N, H=D // N,
                           V=_int(d, "vocab_size", where), gated=False,
                           tied_embeddings=bool(d.get("tie_word_embeddings", True)), source=source)
    D = _int(d, "hidden_size", where)
    N = _int(d, "num_attention_heads", where)
    K = _int(d, "num_key_value_heads", where, N) if d.get("num_key_value_heads") is not None else N
    H = _int(d, "head_dim", where, D // N) if d.get("head_dim") is not None else D // N
    E = d.get("n_routed_experts") or d.get("num_local_experts") or d.get("num_experts") or 1
    kw = {}
    if E and E > 1:
        kw = dict(E=_int({"E": E}, "E", where), k=_int(d, "num_experts_per_tok", where),
                  shared_experts=int(d.get("n_shared_experts") or 0),
                  F_expert=_int(d, "moe_intermediate_size", where, _int(d, "intermediate_size", where)),
                  dense_layers=int(d.get("first_k_dense_replace") or 0))
    arch = " ".join(d.get("architectures") or []) + " " + str(d.get("model_type", ""))
    gated = not re.search(r"gpt2|gpt_neox|opt|bert", arch.lower())
    return ModelConfig(name, L=_int(d, "num_hidden_layers", where), D=D,
                       F=_int(d, "intermediate_size", where), N=N, K=K, H=H, V=_int(d, "vocab_size", where),
                       gated=gated, tied_embeddings=bool(d.get("tie_word_embeddings", False)), source=source,
                       **kw)


@functools.lru_cache(maxsize=None)
def _presets() -> dict[str, ModelConfig]:
    out = {}
    for p in sorted(PRESETS.glob("*.json")):
        out[p.stem] = _from_fields(json.loads(p.read_text(encoding="utf-8")), p.name)
    return out


def model_presets() -> tuple[str, ...]:
    return tuple(sorted(_presets()))


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9.]", "", name.lower().replace("llama-", "llama"))


def load_model_config(name_or_path: str) -> ModelConfig:
    """A preset name (``llama3-70b``, ``Llama-3-70B``), a preset-style JSON file, or a HF config.json."""
    presets = _presets()
    keys = {_key(n): n for n in presets}
    if _key(name_or_path) in keys:
        return presets[keys[_key(name_or_path)]]
    p = Path(name_or_path)
    if p.suffix == ".json" or p.exists():
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UsageError(f"no such model config file: {name_or_path}") from None
        except (OSError, json.JSONDecodeError) as e:
            raise UsageError(f"cannot read model config {name_or_path}: {e}") from None
        if not isinstance(data, dict):
            raise UsageError(f"{name_or_path}: a model config must be a JSON object")
        if "L" in data and "D" in data:
            data.setdefault("name", p.stem)
            return _from_fields(data, p.name)
        return from_hf_config(data, p.stem, str(p))
    close = difflib.get_close_matches(name_or_path.lower(), list(presets), n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise UsageError(f"unknown model {name_or_path!r}{hint} Known: {', '.join(model_presets())}, "
                     f"or a path to a config.json")
