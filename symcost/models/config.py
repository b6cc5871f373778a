"""Transformer configurations: presets as data files (``presets/*.json``) and HuggingFace import.

    >>> cfg = load_model_config("llama3-70b")          # or "Llama-3-70B", "meta-llama/Meta-Llama-3-70B"
    >>> cfg.L, cfg.D, cfg.F, cfg.N, cfg.K, cfg.H, cfg.V
    (80, 8192, 28672, 64, 8, 128, 128256)
    >>> load_model_config("deepseek-v3").is_moe
    True

``load_model_config`` also takes a path: a preset-style JSON (the fields of :class:`ModelConfig`, as
``as_dict`` writes them), a HuggingFace ``config.json``, or a directory holding one.

The book's names: L layers, D model width, F MLP width, N query heads, K key/value heads, H head width,
V vocabulary; a gated MLP has three matrices (in1, in2, out), an ungated one two; an MoE model has E routed
experts of width F_expert, k of them active per token, shared experts that every token uses, and
``dense_layers`` leading layers with an ordinary MLP of width F. Multi-head latent attention (DeepSeek)
caches a ``kv_lora``-wide latent and a ``rope_dim``-wide rotary key a token (:mod:`symcost.models.mla`).
"""
from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import MappingProxyType

from .. import caching
from ..errors import UsageError

PRESETS = Path(__file__).parent / "presets"
FIELDS = ("L", "D", "F", "N", "K", "H", "V")

# HuggingFace model families by MLP (prefixes of model_type / architecture names, '_' and '-' removed).
# Gated (SwiGLU / GeGLU) is checked first, so "phi3" is gated while "phi" (Phi-1/2) is not.
_GATED = ("llama", "mistral", "mixtral", "qwen", "gemma", "deepseek", "phi3", "phimoe", "olmo", "granite",
          "internlm", "baichuan", "yi", "cohere", "exaone", "minicpm", "stablelm", "arctic", "dbrx")
_UNGATED = ("gpt2", "gptneox", "gptj", "gptbigcode", "opt", "bert", "falcon", "bloom", "mpt", "phi", "starcoder")
_TIED_BY_DEFAULT = ("gpt2", "gemma")  # families whose HF config class defaults tie_word_embeddings to true


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
    gated: bool = True              # SwiGLU: 3 MLP matrices (in1, in2, out); False: 2
    tied_embeddings: bool = False
    E: int = 1                      # routed experts (1 = dense)
    k: int = 1                      # active routed experts per token
    shared_experts: int = 0
    F_expert: int | None = None     # per-expert MLP width (None = F)
    dense_layers: int = 0           # leading layers with a dense MLP of width F (DeepSeek-V3: 3)
    kv_lora: int = 0                # multi-head latent attention: the cached key-value latent (0: ordinary)
    q_lora: int = 0                 # MLA: the query latent (0: queries projected from D directly)
    rope_dim: int = 0               # MLA: the decoupled rotary key width, cached beside the latent
    source: str = ""                # where the numbers come from (config.json URL, book section)
    notes: str = ""

    def __post_init__(self):
        _validate(self.as_dict(), f"model {self.name!r}")

    @property
    def is_moe(self) -> bool:
        return self.E > 1

    @property
    def is_mla(self) -> bool:
        return self.kv_lora > 0

    @property
    def G(self) -> int:
        """Query heads per key/value head."""
        return self.N // self.K

    def as_dict(self) -> dict:
        return asdict(self)


_KNOWN = tuple(f.name for f in fields(ModelConfig))


def _bad_int(v, minimum: int) -> bool:
    return isinstance(v, bool) or not isinstance(v, int) or v < minimum


def _validate(d: Mapping, where: str) -> None:
    """Raise UsageError naming the first bad field of a ModelConfig's values."""
    _check_types(d, where)
    _check_agreement(d, where)


def _check_types(d: Mapping, where: str) -> None:
    """Each field on its own: a name, positive and non-negative counts, flags, texts."""
    if not isinstance(d.get("name"), str) or not d["name"]:
        raise UsageError(f"{where}: field 'name' must be a non-empty string, not {d.get('name')!r}.")
    for f in FIELDS + ("E", "k"):
        if _bad_int(d.get(f, 1 if f in ("E", "k") else None), 1):
            raise UsageError(f"{where}: field {f!r} must be a positive integer, not {d.get(f)!r}.")
    for f in ("shared_experts", "dense_layers", "kv_lora", "q_lora", "rope_dim"):
        if _bad_int(d.get(f, 0), 0):
            raise UsageError(f"{where}: field {f!r} must be a non-negative integer, not {d.get(f)!r}.")
    if d.get("F_expert") is not None and _bad_int(d["F_expert"], 1):
        raise UsageError(f"{where}: field 'F_expert' must be a positive integer or null, not {d['F_expert']!r}.")
    for f in ("gated", "tied_embeddings"):
        if not isinstance(d.get(f, False), bool):
            raise UsageError(f"{where}: field {f!r} must be true or false, not {d.get(f)!r}.")
    for f in ("source", "notes"):
        if not isinstance(d.get(f, ""), str):
            raise UsageError(f"{where}: field {f!r} must be a string, not {d.get(f)!r}.")


def _check_agreement(d: Mapping, where: str) -> None:
    """The fields against each other: heads into key/value heads, active experts, latent attention, layers."""
    if d["N"] % d["K"]:
        raise UsageError(f"{where}: N={d['N']} query heads do not divide into K={d['K']} key/value heads.")
    if d.get("k", 1) > d.get("E", 1):
        raise UsageError(f"{where}: field 'k' ({d['k']} active experts) exceeds field 'E' ({d.get('E', 1)} experts).")
    if (d.get("q_lora", 0) or d.get("rope_dim", 0)) and not d.get("kv_lora", 0):
        raise UsageError(f"{where}: fields 'q_lora' and 'rope_dim' describe latent attention: give 'kv_lora' too.")
    if d.get("kv_lora", 0) and d["K"] != d["N"]:
        raise UsageError(f"{where}: latent attention gives every head its own keys: field 'K' ({d['K']}) must "
                         f"equal field 'N' ({d['N']}).")
    if d.get("dense_layers", 0) > d["L"]:
        raise UsageError(f"{where}: field 'dense_layers' ({d['dense_layers']}) exceeds field 'L' ({d['L']}).")


def _from_fields(d: dict, where: str) -> ModelConfig:
    """A ModelConfig from a preset-style dict (our field names), errors naming ``where``."""
    _all_there(d, ("name",) + FIELDS, where)
    extra = [f for f in d if f not in _KNOWN]
    if extra:
        raise UsageError(f"{where}: unknown field {extra[0]!r} (known: {', '.join(_KNOWN)}).")
    _validate(d, where)
    return ModelConfig(**d)


def _int(d: Mapping, key: str, where: str, default: int | None = None) -> int:
    """A positive integer field of a HF config; absent or null gives ``default`` (None: required)."""
    v = d.get(key)
    if v is None:
        if default is None:
            raise UsageError(f"{where}: missing field {key!r}.")
        return default
    if _bad_int(v, 1):
        raise UsageError(f"{where}: field {key!r} must be a positive integer, not {v!r}.")
    return v


def _count(d: Mapping, key: str, where: str) -> int:
    """A non-negative integer field of a HF config that defaults to 0 (absent or null)."""
    v = d.get(key) or 0
    if _bad_int(v, 0):
        raise UsageError(f"{where}: field {key!r} must be a non-negative integer, not {v!r}.")
    return v


def _family(d: Mapping) -> list[str]:
    names = [str(d.get("model_type") or "")] + [str(a) for a in d.get("architectures") or []]
    return [re.sub(r"[_\-\s]", "", n.lower()) for n in names if n]


def _is_gated(d: Mapping) -> bool:
    fam = _family(d)
    if any(n.startswith(_GATED) for n in fam):
        return True
    if any(n.startswith(_UNGATED) for n in fam):
        return False
    return str(d.get("hidden_act") or d.get("activation_function") or "").lower() in ("silu", "swiglu", "swish")


def _all_there(d: dict, fields: tuple, where: str) -> None:
    """Every field of ``fields`` the config lacks, named at once."""
    missing = [f for f in fields if d.get(f) is None]
    if missing:
        raise UsageError(f"{where}: missing field{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}.")


def from_hf_config(d: dict, name: str, source: str = "") -> ModelConfig:
    """A ModelConfig from a HuggingFace ``config.json`` dict.

    LLaMA-style fields (hidden_size, intermediate_size, num_attention_heads, num_key_value_heads, head_dim,
    num_hidden_layers, vocab_size, tie_word_embeddings) and GPT-2-style ones (n_embd, n_inner, n_head,
    n_layer); MoE from n_routed_experts / num_local_experts / num_experts, num_experts_per_tok,
    n_shared_experts, moe_intermediate_size and first_k_dense_replace. Whether the MLP is gated follows
    model_type / architectures (LLaMA, Mistral, Qwen, Gemma, DeepSeek, ... gated; GPT-2, GPT-NeoX, OPT, ...
    not), else hidden_act (silu gated). Multi-head latent attention from kv_lora_rank, q_lora_rank and
    qk_rope_head_dim, with H = v_head_dim (:mod:`symcost.models.mla`).
    """
    where = source or name
    if not isinstance(d, dict):
        raise UsageError(f"{where}: a model config must be a JSON object, not {type(d).__name__}.")
    notes = []
    if "n_embd" in d:  # GPT-2 field names (GPT-2, GPT-J)
        _all_there(d, ("n_embd", "n_head", "n_layer", "vocab_size"), where)
        D, N = _int(d, "n_embd", where), _int(d, "n_head", where)
        return ModelConfig(name, L=_int(d, "n_layer", where), D=D, F=_int(d, "n_inner", where, 4 * D), N=N, K=N,
                           H=_int(d, "head_dim", where, max(1, D // N)), V=_int(d, "vocab_size", where),
                           gated=False, tied_embeddings=bool(d.get("tie_word_embeddings", True)), source=source)
    _all_there(d, ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size"),
               where)
    D, N = _int(d, "hidden_size", where), _int(d, "num_attention_heads", where)
    K = _int(d, "num_key_value_heads", where, N)
    H = _int(d, "head_dim", where, max(1, D // N))
    mla: dict = {}
    if d.get("kv_lora_rank") is not None:  # DeepSeek multi-head latent attention
        H = _int(d, "v_head_dim", where, _int(d, "qk_nope_head_dim", where, H))
        K = N
        mla = dict(kv_lora=_int(d, "kv_lora_rank", where), q_lora=_count(d, "q_lora_rank", where),
                   rope_dim=_count(d, "qk_rope_head_dim", where))
        nope = _int(d, "qk_nope_head_dim", where, H)
        if nope != H:
            notes.append(f"query-key head width qk_nope_head_dim {nope} taken as v_head_dim {H}")
    F = _int(d, "intermediate_size", where)
    moe: dict = {}
    ekey = next((key for key in ("n_routed_experts", "num_local_experts", "num_experts") if d.get(key)), None)
    if ekey and _int(d, ekey, where) > 1:
        F_expert = _int(d, "moe_intermediate_size", where, F)
        shared = _count(d, "n_shared_experts", where)
        if not shared and d.get("shared_expert_intermediate_size"):  # Qwen-MoE: one wide shared expert
            shared = max(1, round(_int(d, "shared_expert_intermediate_size", where) / F_expert))
            notes.append(f"shared expert of width {d['shared_expert_intermediate_size']} counted as {shared} "
                         f"experts of width {F_expert}")
        moe = dict(E=d[ekey], k=_int(d, "num_experts_per_tok", where), shared_experts=shared, F_expert=F_expert,
                   dense_layers=_count(d, "first_k_dense_replace", where))
    tied = d.get("tie_word_embeddings", any(n.startswith(_TIED_BY_DEFAULT) for n in _family(d)))
    if not _family(d) and not (d.get("hidden_act") or d.get("activation_function")):
        notes.append("no model_type, architectures or hidden_act: the MLP taken as ungated (two matrices; a "
                     "gated one, as LLaMA's, has three: name its model_type or hidden_act)")
    if "tie_word_embeddings" not in d and not _family(d):
        notes.append("no tie_word_embeddings: the input and output embeddings taken as two matrices")
    values = dict(name=name, L=_int(d, "num_hidden_layers", where), D=D, F=F, N=N, K=K, H=H,
                  V=_int(d, "vocab_size", where), gated=_is_gated(d), tied_embeddings=bool(tied),
                  source=source, notes="; ".join(notes), **moe, **mla)
    _validate(values, where)
    return ModelConfig(**values)


@caching.memoize(maxsize=1)
def _presets() -> Mapping[str, ModelConfig]:
    return MappingProxyType({p.stem: _from_fields(json.loads(p.read_text(encoding="utf-8")), str(p))
                             for p in sorted(PRESETS.glob("*.json"))})


def model_presets() -> tuple[str, ...]:
    """Names of the bundled presets."""
    return tuple(sorted(_presets()))


def _key(name: str) -> str:
    """Normalise a model name: 'meta-llama/Meta-Llama-3.1-405B' and 'llama3-405b' both give 'llama3405b'."""
    s = name.strip().lower().rsplit("/", 1)[-1]
    s = re.sub(r"^meta-", "", s)
    s = re.sub(r"-hf$", "", s)
    s = re.sub(r"llama[-_ ]?3\.\d", "llama3", s)
    return re.sub(r"[^a-z0-9]", "", s)


def _read(p: Path) -> dict:
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"no model config file {p} (nor a preset of that name; known: "
                         f"{', '.join(model_presets())}).") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"cannot read model config {p}: {e}.") from None
    if not isinstance(data, dict):
        raise UsageError(f"{p}: a model config must be a JSON object, not {type(data).__name__}.")
    return data


def load_model_config(name_or_path: str | Path) -> ModelConfig:
    """A preset by name (case-insensitive, aliases such as ``Llama-3-70B``), or a JSON file / directory.

    A file with our field names (``L``, ``D``, ...) loads as a preset-style config; anything else is read
    as a HuggingFace ``config.json``. A directory is read through its ``config.json``.
    """
    if not isinstance(name_or_path, (str, Path)) or not str(name_or_path).strip():
        raise UsageError(f"a model name or config path must be a non-empty string, not {name_or_path!r}.")
    text = str(name_or_path)
    p = Path(text)
    if p.is_dir() and (p / "config.json").is_file():
        p = p / "config.json"
    if not p.is_file() and not text.lower().endswith(".json"):
        presets = _presets()
        by_key = {_key(n): n for n in presets}
        if _key(text) in by_key:
            return presets[by_key[_key(text)]]
        close = difflib.get_close_matches(text.lower(), list(presets), n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UsageError(f"unknown model {text!r}{hint}; known presets: {', '.join(presets)}, "
                         f"or give a path to a config.json.")
    data = _read(p)
    if "L" in data and "D" in data:
        data.setdefault("name", p.stem)
        return _from_fields(data, str(p))
    name = p.parent.name if p.stem == "config" and p.parent.name else p.stem
    return from_hf_config(data, name, str(p))
