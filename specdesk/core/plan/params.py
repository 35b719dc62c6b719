"""What a model folder holds, without loading a single weight.

Sizes come from the safetensors headers (every tensor's shape, following a sharded index) when the
weights are there, or, when only config.json is (planning before a download), from the architecture
built by transformers on the meta device: exact parameter counts, tied input/output embeddings
counted once, as ``model.parameters()`` counts them after a real load.

The meta model also says which tensors bitsandbytes would quantize: transformers replaces every
``nn.Linear`` (and GPT-2's ``Conv1D``) except the output embedding and whatever is tied to it
(``transformers.quantizers.base.get_keys_to_not_convert``, matched with ``should_convert_module``), so
the planner asks transformers itself instead of guessing from names. An architecture transformers does
not know is planned from the headers alone, with the split guessed from tensor names and marked
``estimated``.

A GGUF file is planned from its header: transformers' GGUF loader rebuilds the config (kept in specdesk's
cache, ``models.convert.config_folder``) and the meta-device model of that config gives the exact
parameters and the linears bitsandbytes would quantize, as for a config.json. The weights are planned as
what specdesk loads: dequantized to the compute dtype, then re-quantized if asked (the GGUF's own
quantization does not survive the load).

Analyses are cached per folder or file (keyed on the config's and weight files' size and mtime), because
the GUI re-plans on every change of a setting.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from specdesk.core.errors import BadModel, SpecdeskError
from specdesk.core.loading import is_gguf, model_name, read_config, resolve, weight_files
from specdesk.core.stheader import folder_tensors

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LinearInfo:
    """One weight bitsandbytes would quantize."""

    name: str
    numel: int
    out_features: int
    in_features: int


@dataclass(frozen=True)
class KVLayout:
    """Per attention layer, how many positions its KV cache keeps: None = all, n = at most n (sliding)."""

    layers: tuple[int | None, ...]
    kv_heads: int
    head_dim: int
    known: bool = True

    def positions_kept(self, positions: int) -> int:
        """Positions summed over layers, for a sequence of ``positions`` tokens."""
        return sum(positions if cap is None else min(positions, cap) for cap in self.layers)

    @property
    def sliding(self) -> bool:
        return any(cap is not None for cap in self.layers)


@dataclass(frozen=True)
class ModelAnalysis:
    name: str
    path: str
    architecture: str
    source: str  # "safetensors headers", "config.json (meta-device model)", "... (unknown architecture)", ...
    estimated: bool  # True when the quantized/kept split or the KV layout is a guess
    params: int
    linears: tuple[LinearInfo, ...]  # what bitsandbytes quantizes
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    kv: KVLayout
    max_positions: int | None
    stored_dtype: str | None
    tied_embeddings: bool
    lean_fused_params: int = 0  # weights fastdraft.LeanDecoder copies when this model runs on it unquantized
    lean_layer_params: int = 0  # parameters of the decoder layers (its fusing limit is on their bytes)
    prequantized: str | None = None  # quant_method of an already-quantized checkpoint
    # hidden-state rows kept per position: an EAGLE head keeps the target's final hidden states and its own (2)
    hidden_rows: int = 0
    stored_bytes: int | None = None  # bytes of the weights as stored on disk (from the headers)
    borrows: bool = False  # a distilled draft built on its target's tensors (so in the target's dtype)
    own_head: tuple[int, int] | None = None  # a distilled draft's reduced head (rows, hidden): its own copy
    # ... of the rows of its target's head of this many rows (0: unknown): with a q4 target on specdesk's own kernels
    # a view of them instead (int4.share_rows), costing only the column map it adds to the target's head
    target_head_rows: int = 0
    # the output head (rows, hidden) of a model with one of its own (not borrowed), when a plain linear layer:
    # q4 gives it 8-bit codes (int4.Q8Linear), beside the embeddings when tied
    head: tuple[int, int] | None = None
    eagle: bool = False  # an EAGLE head (reads the target's hidden states)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def linear_params(self) -> int:
        return sum(lin.numel for lin in self.linears)

    @property
    def kept_params(self) -> int:
        """Parameters that stay in the compute dtype: embeddings, lm_head, norms, biases."""
        return self.params - self.linear_params

    @property
    def max_linear(self) -> LinearInfo | None:
        return max(self.linears, key=lambda lin: lin.numel, default=None)

    @property
    def uses_lean_path(self) -> bool:
        return self.lean_fused_params > 0

    def runs_lean(self, capacity: int) -> bool:
        """Whether a sequence of ``capacity`` positions runs on the lean decoder (sequence.ModelSequence.runs_lean:
        a sliding-window model only below its window, whose cache keeps window - 1 positions)."""
        caps = [c for c in self.kv.layers if c is not None]
        return self.uses_lean_path and (not caps or capacity <= min(caps))


# ----------------------------------------------------------------------------- the meta-device model

def _quiet():
    from specdesk.core.loading import quiet_transformers

    quiet_transformers()


def meta_model(path: Path):
    """The model of ``path``'s config.json, built on the meta device (no memory, no weights read).

    Raises ``BadModel`` for an architecture transformers cannot build as a causal LM.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    _quiet()
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
    except (ValueError, KeyError, OSError) as e:
        raise BadModel(_first_line(e)) from None
    try:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError, TypeError, AttributeError, ImportError, RuntimeError) as e:
        raise BadModel(_first_line(e)) from None


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _not_converted(model) -> list[str]:
    """Module names transformers keeps out of bitsandbytes (output embedding, tied, fp32-kept)."""
    try:
        from transformers.quantizers.base import get_keys_to_not_convert

        keys = list(get_keys_to_not_convert(model))
    except Exception:  # an older/newer transformers: the default every version has had
        keys = ["lm_head"]
    keys += list(getattr(model, "_keep_in_fp32_modules", None) or [])
    return sorted(set(keys))


def _should_convert(name: str, patterns: list[str]) -> bool:
    try:
        from transformers.quantizers.quantizers_utils import should_convert_module

        return should_convert_module(name, patterns)
    except ImportError:
        return not any(name == p or name.startswith(p + ".") or name.endswith(p) for p in patterns)


def _quantized_modules(model) -> dict[str, tuple[int, int]]:
    """weight name -> (out_features, in_features) for every layer bitsandbytes would replace."""
    import torch
    from transformers.pytorch_utils import Conv1D

    skip = _not_converted(model)
    out = {}
    for name, module in model.named_modules():
        if not name or not _should_convert(name, skip):
            continue
        if type(module) is torch.nn.Linear:
            out[f"{name}.weight"] = (module.out_features, module.in_features)
        elif isinstance(module, Conv1D):  # GPT-2 style: weight is (in, out)
            out[f"{name}.weight"] = (module.weight.shape[1], module.weight.shape[0])
    return out


def _kv_layout(config) -> tuple[KVLayout, list[str]]:
    """The KV layout the engine's cache gets for ``config`` (kvcache.new_cache decides per layer)."""
    from transformers.cache_utils import DynamicSlidingWindowLayer

    from specdesk.core.kvcache import PreallocatedLayer, new_cache

    notes: list[str] = []
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or (config.hidden_size // heads if heads else 0))
    caps: list[int | None] = []
    try:
        cache = new_cache(config, 1)
        layers = list(cache.layers)
    except Exception as e:  # a config the cache cannot describe: assume full attention everywhere
        notes.append(f"KV layout assumed full attention ({_first_line(e)})")
        layers = []
    for layer in layers:
        if isinstance(layer, PreallocatedLayer):
            caps.append(None)
        elif isinstance(layer, DynamicSlidingWindowLayer):
            caps.append(int(layer.sliding_window) - 1)  # it keeps the last sliding_window - 1 positions
        else:
            caps.append(None)
            notes.append(f"KV layer kind {type(layer).__name__} counted as full attention")
    if not layers:
        caps = [None] * int(getattr(config, "num_hidden_layers", 0) or 0)
    return KVLayout(tuple(caps), kv_heads, head_dim), sorted(set(notes))


_FUSED = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")


def _lean_params(model) -> tuple[int, int]:
    """(params fastdraft.LeanDecoder copies when fusing, decoder-layer params) or (0, 0) if it cannot run."""
    from specdesk.core.fastdraft import unsupported_reason

    try:
        if unsupported_reason(model) is not None:
            return 0, 0
        layers = model.model.layers
    except Exception:
        return 0, 0
    fused = 0
    for name, p in layers.named_parameters():
        parts = name.split(".")
        if len(parts) >= 3 and parts[-2] in _FUSED:  # "<i>.self_attn.q_proj.weight" (and q/k/v biases)
            fused += p.numel()
    return fused, sum(p.numel() for p in layers.parameters())


# ----------------------------------------------------------------------------- headers-only fallback

_KEPT_NAME = re.compile(r"(embed|wte|wpe|lm_head|norm|ln_|layernorm|\.bias$)", re.IGNORECASE)


def _cfg_int(cfg: dict, *keys: str) -> int | None:
    text = cfg.get("text_config") or {}
    for k in keys:
        for source in (cfg, text):
            v = source.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    return None


def _guess_from_headers(cfg: dict, tensors: dict) -> tuple[list[LinearInfo], KVLayout, list[str]]:
    """Unknown architecture: 2-D ``*.weight`` tensors outside embeddings/head/norms are taken as linear."""
    notes = ["unknown architecture: sizes from the safetensors headers; quantized/kept split guessed from tensor names"]
    linears = [LinearInfo(t.name, t.numel, t.shape[0], t.shape[1]) for t in tensors.values()
               if len(t.shape) == 2 and t.name.endswith(".weight") and not _KEPT_NAME.search(t.name)]
    layers = _cfg_int(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    heads = _cfg_int(cfg, "num_attention_heads", "n_head", "num_heads")
    kv_heads = _cfg_int(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv") or heads
    hidden = _cfg_int(cfg, "hidden_size", "n_embd", "d_model")
    head_dim = _cfg_int(cfg, "head_dim") or (hidden // heads if hidden and heads else None)
    if not (layers and kv_heads and head_dim):
        notes.append("KV cache size unknown: the config lacks layer or head counts")
        return linears, KVLayout((), 0, 0, known=False), notes
    return linears, KVLayout((None,) * layers, kv_heads, head_dim), notes


# ----------------------------------------------------------------------------- analysis

_cache: dict[tuple, ModelAnalysis] = {}
_lock = threading.Lock()


def _stamp(path: Path) -> tuple:
    if is_gguf(path):
        st = path.stat()
        return ((path.name, st.st_size, st.st_mtime_ns),)
    items = []
    for p in [path / "config.json", path / "model.safetensors.index.json", *sorted(path.glob("*.safetensors"))]:
        try:
            st = p.stat()
            items.append((p.name, st.st_size, st.st_mtime_ns))
        except OSError:
            pass
    return tuple(items)


def analyze(ref: str | Path) -> ModelAnalysis:
    """Describe a model (demo name, folder, or Hugging Face id in the local cache) for planning.

    Raises ``ModelNotFound``/``BadModel`` with a one-line reason for what cannot be planned.
    """
    path = resolve(ref)
    name = model_name(ref, path)
    key = (str(path), name, _stamp(path))
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    result = _analyze_gguf(path, name) if is_gguf(path) else _analyze(path, name)
    with _lock:
        _cache[key] = result
    return result


def clear_cache() -> None:
    with _lock:
        _cache.clear()


def _headers(path: Path, notes: list[str]) -> dict:
    try:
        files = weight_files(path)
    except BadModel as e:  # e.g. an index whose shards are not downloaded yet: plan from config.json
        notes.append(f"weights not usable ({e}); planned from config.json")
        return {}
    if not files:
        return {}
    try:
        return folder_tensors(files)
    except (OSError, ValueError) as e:
        raise BadModel(f"unreadable weights in {path}: {e}") from None


def _analyze(path: Path, name: str) -> ModelAnalysis:
    cfg = read_config(path)
    notes: list[str] = []
    tensors = _headers(path, notes)
    arch = str(cfg.get("model_type"))
    quant_cfg = cfg.get("quantization_config")
    prequantized = (quant_cfg.get("quant_method", "unknown") if isinstance(quant_cfg, dict) else
                    ("unknown" if quant_cfg else None))
    stored_bytes = sum(t.nbytes for t in tensors.values()) if tensors else None
    stored_dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    try:
        model = meta_model(path)
    except BadModel as e:
        if not tensors:
            raise BadModel(f"cannot plan {name}: architecture {arch!r} is unknown to transformers "
                           f"({e}) and there are no safetensors weights to read its sizes from") from None
        linears, kv, more = _guess_from_headers(cfg, tensors)
        return ModelAnalysis(
            name=name, path=str(path), architecture=arch, source="safetensors headers (unknown architecture)",
            estimated=True, params=sum(t.numel for t in tensors.values()), linears=tuple(linears),
            vocab_size=_cfg_int(cfg, "vocab_size") or 0, hidden_size=_cfg_int(cfg, "hidden_size", "n_embd") or 0,
            intermediate_size=_cfg_int(cfg, "intermediate_size", "n_inner", "ffn_dim") or 0,
            num_heads=_cfg_int(cfg, "num_attention_heads", "n_head") or 0, kv=kv,
            max_positions=_cfg_int(cfg, "max_position_embeddings", "n_positions"), stored_dtype=stored_dtype,
            tied_embeddings=bool(cfg.get("tie_word_embeddings", True)), prequantized=prequantized,
            stored_bytes=stored_bytes, notes=tuple(notes + more))

    config = model.config
    params = dict(model.named_parameters())  # tied parameters appear once, as after a real load
    quantized = _quantized_modules(model)
    shapes = {n: tuple(p.shape) for n, p in params.items()}
    if tensors and prequantized:  # packed tensors and quantization state: the stored bytes are the answer
        source = "safetensors headers (as stored)"
    elif tensors:
        matched = [n for n in shapes if n in tensors]
        if not matched:
            notes.append("checkpoint tensor names differ from the architecture's; sizes from config.json")
        for n in matched:
            if tensors[n].numel != _numel(shapes[n]):
                notes.append(f"{n}: checkpoint shape {list(tensors[n].shape)} differs from the config's "
                             f"{list(shapes[n])} (the load would fail)")
            else:
                shapes[n] = tensors[n].shape
        tied_names = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
        unused = [n for n in tensors if n not in params and n not in tied_names]
        if unused:
            notes.append(f"{len(unused)} checkpoint tensor(s) the model does not use (dropped at load)")
        source = "safetensors headers" if matched else "config.json (meta-device model)"
    else:
        source = "config.json (meta-device model)"
    borrow = cfg.get("specdesk") if isinstance(cfg.get("specdesk"), dict) else {}
    hidden_rows = 0
    if borrow.get("borrows"):  # a distilled draft: the target's tensors it shares are the target's, not counted twice
        for n in borrow["borrows"]:
            shapes.pop(n, None)
        if borrow.get("head_ids"):  # its reduced head: its own copy of head_vocab rows of the target's head
            shapes["lm_head.weight"] = (int(borrow.get("head_vocab", 0)), int(getattr(config, "hidden_size", 0)))
        notes = [n for n in notes if "does not use" not in n]
        shared = ["embeddings"] + ([] if borrow.get("head_ids") else ["output head"])
        notes.append(f"borrows the target's {' and '.join(shared)} at load time (counted with the target)")
        if borrow.get("kind") == "eagle-head":  # its fusion layer, and the hidden states it reads and writes
            hidden = int(getattr(config, "hidden_size", 0))
            shapes["specdesk_fc.weight"] = (hidden, 2 * hidden)
            hidden_rows = 2
            notes.append("an EAGLE head: the target's hidden states and its own kept per position (counted as its cache)")
    linears = tuple(LinearInfo(n, _numel(shapes[n]), *quantized[n]) for n in shapes if n in quantized)
    out = model.get_output_embeddings()
    head = None
    if not borrow.get("borrows") and type(out).__name__ == "Linear" and out.bias is None:
        head = (int(out.out_features), int(out.in_features))
    kv, kv_notes = _kv_layout(config)
    fused, layer_params = _lean_params(model)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if prequantized:
        notes.append(f"already quantized ({prequantized}): weights counted as stored")
    return ModelAnalysis(
        name=name, path=str(path), architecture=arch, source=source, estimated=False,
        params=sum(_numel(s) for s in shapes.values()), linears=linears,
        vocab_size=int(getattr(text, "vocab_size", 0) or 0), hidden_size=int(getattr(text, "hidden_size", 0) or 0),
        intermediate_size=int(getattr(text, "intermediate_size", 0) or 0),
        num_heads=int(getattr(text, "num_attention_heads", 0) or 0), kv=kv,
        max_positions=getattr(text, "max_position_embeddings", None), stored_dtype=stored_dtype,
        tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)), lean_fused_params=fused,
        lean_layer_params=layer_params, prequantized=prequantized, stored_bytes=stored_bytes,
        hidden_rows=hidden_rows, notes=tuple(notes + kv_notes), borrows=bool(borrow.get("borrows")), head=head,
        own_head=tuple(shapes["lm_head.weight"]) if borrow.get("borrows") and borrow.get("head_ids") else None,
        target_head_rows=int((borrow.get("target") or {}).get("vocab_size") or 0)
        if "lm_head.weight" in (borrow.get("borrows") or ()) else 0,
        eagle=borrow.get("kind") == "eagle-head")


def _analyze_gguf(path: Path, name: str) -> ModelAnalysis:
    """A GGUF file: its config rebuilt by transformers from the header, sizes checked against its tensors."""
    import dataclasses

    from specdesk.core.models.convert import config_folder
    from specdesk.core.models.gguf import check_gguf

    info = check_gguf(path)
    a = _analyze(config_folder(path, info.header), name)
    notes = list(a.notes)
    if a.params != info.params:
        notes.append(f"the header's tensors hold {info.params:,} parameters, the architecture {a.params:,}")
    notes.append(f"GGUF {info.file_type}: loaded dequantized to the compute dtype (then re-quantized if asked)")
    return dataclasses.replace(a, path=str(path), source=f"GGUF header ({info.file_type}; meta-device model)",
                               stored_bytes=info.stored_bytes, stored_dtype=info.file_type, notes=tuple(notes))


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def analyze_or_none(ref: str | Path) -> ModelAnalysis | None:
    """For listings: an analysis, or None when the folder cannot be planned."""
    try:
        return analyze(ref)
    except SpecdeskError:
        return None
