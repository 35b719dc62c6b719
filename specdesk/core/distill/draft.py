"""A distilled draft: a few Llama decoder layers that borrow the target's embeddings and output head.

Shape: the target's own architecture (hidden size, heads, MLP) with ``layers`` decoder layers, initialised from
the target's first layers, and the target's final norm. The input embedding is the target's tensor itself
(shared at load time, never copied); the output head is the target's head restricted to ``head_ids``, the most
frequent tokens of the target's replies (FR-Spec): the draft's probability is zero for every other token, which
the acceptance rule already handles exactly (such a token is never proposed, and a sampled proposal's law has no
mass there). With ``head_ids`` None the head is the target's whole head, shared too.

On disk (``save_draft``) the folder holds only the draft's own weights (float16) and the head's token ids, and
its config.json says what is borrowed, under the ``specdesk`` key:

    "specdesk": {"kind": "distilled-draft", "borrows": ["model.embed_tokens.weight", "lm_head.weight"],
                 "head_ids": "specdesk.head_ids", "target": {"name", "file", "sha256", "hidden_size", "vocab_size"}}

``load_borrowing_draft`` rebuilds it next to a loaded target; ``export_standalone`` writes an ordinary
Hugging Face model (embeddings copied in, the whole head tied to them) for vLLM or transformers.
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
from pathlib import Path

import torch

from specdesk.core.errors import BadModel

log = logging.getLogger(__name__)

SPECDESK_KEY = "specdesk"
HEAD_IDS_KEY = "specdesk.head_ids"
BORROWED = ("model.embed_tokens.weight", "lm_head.weight")
TOKENIZER_NAMES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                   "tokenizer.model", "chat_template.jinja", "added_tokens.json", "generation_config.json")


def _head_weight(target_model) -> torch.Tensor:
    head = target_model.get_output_embeddings()
    return head.weight if isinstance(head, torch.nn.Linear) else head.dequantized()  # a q4 target's Q8Linear


def draft_config(target_model, layers: int):
    cfg = copy.deepcopy(target_model.config)
    cfg.num_hidden_layers = layers
    cfg.tie_word_embeddings = False
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = list(cfg.layer_types[:layers])
    for attr in ("quantization_config", "_name_or_path"):
        if hasattr(cfg, attr):
            try:
                delattr(cfg, attr)
            except AttributeError:
                pass
    return cfg


def load_own_weights(draft, init_from: str | Path, shape: str, dtype=torch.float32) -> None:
    """Load a distilled draft folder's own weights (layers, norm) into ``draft``, which must have their shape;
    the borrowed tensors stay the target's."""
    from safetensors.torch import load_file

    own = load_file(str(Path(init_from) / "model.safetensors"))
    own.pop(HEAD_IDS_KEY, None)
    missing, unexpected = draft.load_state_dict({k: v.to(dtype) for k, v in own.items()}, strict=False)
    if [m for m in missing if m not in BORROWED and "rotary" not in m] or unexpected:
        raise BadModel(f"{init_from} does not have {shape}")


def build_draft(target_model, layers: int, head_ids: torch.Tensor | None, dtype=torch.float32,
                init_from: str | None = None):
    """A draft from the target: its first ``layers`` layers (copied), final norm (copied), embeddings (shared),
    head rows ``head_ids`` (a frozen copy) or the whole head (shared). ``init_from``: a distilled draft folder of
    this shape whose own layers and norm replace the copied ones (training goes on from that draft)."""
    from transformers import AutoModelForCausalLM

    cfg = draft_config(target_model, layers)
    with torch.device("meta"):
        draft = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    device = next(target_model.parameters()).device
    draft = draft.to_empty(device=device)
    src = target_model.model
    for i in range(layers):
        draft.model.layers[i].load_state_dict({k: v.to(dtype) for k, v in src.layers[i].state_dict().items()})
    draft.model.norm.load_state_dict({k: v.to(dtype) for k, v in src.norm.state_dict().items()})
    draft.model.rotary_emb = copy.deepcopy(src.rotary_emb).to(device)
    attach_borrowed(draft, target_model, head_ids)
    if init_from:
        load_own_weights(draft, init_from, f"this draft's shape ({layers} layers)", dtype)
    return draft


FC = "specdesk_fc"  # an EAGLE head's fusion layer, a submodule of the draft model (saved as specdesk_fc.weight)


def build_eagle(target_model, head_ids: torch.Tensor | None, layers: int = 1, init_from: str | None = None,
                dtype=torch.float32):
    """An EAGLE head (core/eagle.py): ``layers`` decoder layers, the target's final norm (copied), a fusion layer fc
    (2*hidden -> hidden), embeddings shared and head rows ``head_ids`` as for a draft.

    Fresh: the layers start as the target's last ones and fc as the mean of the feature and the token embedding.
    ``init_from`` a distilled draft folder of the same shape (its layers, norm and head): fc starts as [0 | I], the
    token embedding alone, so the head starts out drafting as that draft does (row j reads t_{j+1}) and training
    adds what the target's features tell it."""
    hidden = int(target_model.config.hidden_size)
    draft = build_draft(target_model, layers, head_ids, dtype)
    device = next(draft.parameters()).device
    fc = torch.nn.Linear(2 * hidden, hidden, bias=False, device=device, dtype=dtype)
    eye = torch.eye(hidden, dtype=dtype)
    if init_from:
        load_own_weights(draft, init_from, f"this head's shape ({layers} layers)", dtype)
        weight = torch.cat([torch.zeros_like(eye), eye], dim=1)
    else:
        n = target_model.config.num_hidden_layers
        src = target_model.model.layers
        for i in range(layers):
            draft.model.layers[i].load_state_dict({k: v.to(dtype) for k, v in src[n - layers + i].state_dict().items()})
        weight = torch.cat([eye, eye], dim=1) * 0.5
    with torch.no_grad():
        fc.weight.copy_(weight)
    setattr(draft, FC, fc)
    return draft


def is_eagle(draft) -> bool:
    return getattr(draft, FC, None) is not None


def attach_borrowed(draft, target_model, head_ids: torch.Tensor | None) -> None:
    """Point the draft's embedding at the target's tensor and give it the (reduced) head; both frozen."""
    emb = target_model.get_input_embeddings().weight
    draft.model.embed_tokens.weight = emb  # the same Parameter: no copy, no second count in memory
    module = target_model.get_output_embeddings()
    if head_ids is None and not isinstance(module, torch.nn.Linear):
        lin = module  # a q4 target's Q8Linear (core/int4.py): shared as it is
    elif head_ids is None:
        head = module.weight
        lin = torch.nn.Linear(head.shape[1], head.shape[0], bias=False, device="meta")
        lin.weight = head
    else:
        rows = getattr(module, "dequantized_rows", None)  # a q4 target's own-kernel head: only those rows widened
        head = rows(head_ids) if rows is not None else _head_weight(target_model)[head_ids.to(emb.device)]
        dtype = module.weight.dtype if isinstance(module, torch.nn.Linear) else emb.dtype
        lin = torch.nn.Linear(head.shape[1], int(head_ids.numel()), bias=False, device=head.device, dtype=dtype)
        with torch.no_grad():
            lin.weight.copy_(head)
        lin.weight.requires_grad_(False)
    draft.lm_head = lin
    draft.model.embed_tokens.weight.requires_grad_(False)
    draft.config.specdesk_head_vocab = int(lin.out_features)


def own_state(draft) -> dict[str, torch.Tensor]:
    """The draft's own tensors (everything but the borrowed embedding and head)."""
    return {k: v for k, v in draft.state_dict().items() if k not in BORROWED}


def save_draft(draft, out: Path, target, *, head_ids: torch.Tensor | None, target_sha256: str,
               target_source: Path) -> None:
    """Write the draft folder: config (with the ``specdesk`` key), own weights in float16, the target's tokenizer."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in own_state(draft).items()}
    borrows = ["model.embed_tokens.weight"]
    if head_ids is not None:
        tensors[HEAD_IDS_KEY] = head_ids.to("cpu", torch.int64).contiguous()
    borrows.append("lm_head.weight")
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    from specdesk.core.userdirs import usual_mode

    usual_mode(out / "model.safetensors")
    cfg = draft.config.to_dict()
    cfg.pop("specdesk_head_vocab", None)
    cfg["architectures"] = [type(draft).__name__]
    cfg["torch_dtype"] = cfg["dtype"] = "float16"
    tcfg = target.model.config
    cfg[SPECDESK_KEY] = {
        "kind": "eagle-head" if is_eagle(draft) else "distilled-draft",
        "borrows": borrows,
        "head_ids": HEAD_IDS_KEY if head_ids is not None else None,
        "head_vocab": int(head_ids.numel()) if head_ids is not None else int(tcfg.vocab_size),
        "target": {"name": target.name, "file": Path(target_source).name, "sha256": target_sha256,
                   "bytes": Path(target_source).stat().st_size if Path(target_source).is_file() else None,
                   "hidden_size": int(tcfg.hidden_size), "vocab_size": int(tcfg.vocab_size),
                   "num_hidden_layers": int(tcfg.num_hidden_layers)},
    }
    (out / "config.json").write_text(json.dumps(cfg, indent=2, default=str))
    tok_dir = Path(target.tokenizer.name_or_path)
    target.tokenizer.save_pretrained(out)
    for name in ("generation_config.json",):
        if (tok_dir / name).exists():
            shutil.copy(tok_dir / name, out / name)


def borrow_info(path: Path) -> dict | None:
    """The ``specdesk`` key of a draft folder that borrows from its target, else None."""
    cfg_path = Path(path) / "config.json"
    if not Path(path).is_dir() or not cfg_path.exists():
        return None
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    info = cfg.get(SPECDESK_KEY) if isinstance(cfg, dict) else None
    return info if isinstance(info, dict) and info.get("borrows") else None


def made_for(path: Path) -> dict:
    """The model a distilled draft folder was made for, as its config names it (name, file, sha256 and shapes), or {}
    for any other folder."""
    return (borrow_info(path) or {}).get("target") or {}


def _read_own(path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    from specdesk.core.loading import read_config

    cfg = read_config(path)
    try:
        tensors = load_file(str(path / "model.safetensors"))
    except Exception as e:  # safetensors raises several types
        raise BadModel(f"could not read the weights of {path.name}: {str(e).splitlines()[0] if str(e) else e}") from None
    return cfg, tensors


def check_fits(info: dict, target_model, name: str, target_name: str) -> None:
    want = info.get("target", {})
    tcfg = target_model.config
    if (want.get("hidden_size"), want.get("vocab_size")) != (tcfg.hidden_size, tcfg.vocab_size):
        raise BadModel(f"{name} was distilled for {want.get('name', 'another model')} (hidden size "
                       f"{want.get('hidden_size')}, vocabulary {want.get('vocab_size')}); it cannot borrow from "
                       f"{target_name} (hidden size {tcfg.hidden_size}, vocabulary {tcfg.vocab_size})")


def build_from_folder(path: Path, target_model, name: str = "", target_name: str = "the target"):
    """The draft model of a borrowing folder, its tensors on the target's device and dtype; and its head ids."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(path)
    info = borrow_info(path)
    if info is None:
        raise BadModel(f"{path} is not a draft that borrows from its target")
    check_fits(info, target_model, name or path.name, target_name)
    cfg_dict, tensors = _read_own(path)
    head_ids = tensors.pop(HEAD_IDS_KEY, None)
    cfg = AutoConfig.from_pretrained(path, local_files_only=True)
    target_dtype = target_model.get_input_embeddings().weight.dtype
    device = target_model.get_input_embeddings().weight.device
    with torch.device("meta"):
        draft = AutoModelForCausalLM.from_config(cfg, dtype=target_dtype)
    draft = draft.to_empty(device=device)
    if info.get("kind") == "eagle-head":
        fc = tensors.get(f"{FC}.weight")
        if fc is None or fc.dim() != 2:
            raise BadModel(f"{path.name} is an EAGLE head without its fusion layer ({FC}.weight)")
        setattr(draft, FC, torch.nn.Linear(fc.shape[1], fc.shape[0], bias=False, device=device, dtype=target_dtype))
    missing, unexpected = draft.load_state_dict({k: v.to(target_dtype) for k, v in tensors.items()}, strict=False)
    missing = [m for m in missing if m not in BORROWED and "rotary" not in m]
    if missing or unexpected:
        raise BadModel(f"{path.name} has {'missing' if missing else 'unexpected'} weights: "
                       f"{', '.join((missing or unexpected)[:3])}")
    draft.model.rotary_emb = copy.deepcopy(target_model.model.rotary_emb)
    # rotary tables for this config (same as the target's when the shapes agree, which check_fits ensured)
    attach_borrowed(draft, target_model, head_ids)
    draft.eval()
    return draft, head_ids


def export_standalone(path: Path, target_model, dest: Path) -> Path:
    """An ordinary Hugging Face model of the draft, for engines that cannot borrow (vLLM, transformers).

    The embeddings are copied in and the head is tied to them (the target's whole head when the target ties
    its own; otherwise an untied copy of the target's head). The reduced head's zero probabilities outside its
    tokens are not kept: another engine's draft may propose any token, which stays exact (the target verifies).
    """
    from transformers import AutoModelForCausalLM

    if (borrow_info(Path(path)) or {}).get("kind") == "eagle-head":
        raise BadModel(f"{Path(path).name} is an EAGLE head: it drafts from its target's hidden states, so it has no "
                       f"standalone form as an ordinary model")
    draft, _ = build_from_folder(path, target_model)
    cfg = copy.deepcopy(draft.config)
    tied = bool(getattr(target_model.config, "tie_word_embeddings", False))
    cfg.tie_word_embeddings = tied
    for attr in (SPECDESK_KEY, "specdesk_head_vocab"):
        if hasattr(cfg, attr):
            delattr(cfg, attr)
    full = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    state = {k: v.detach().float().cpu() for k, v in own_state(draft).items()}
    state["model.embed_tokens.weight"] = target_model.get_input_embeddings().weight.detach().float().cpu()
    if not tied:
        state["lm_head.weight"] = _head_weight(target_model).detach().float().cpu()
    full.load_state_dict(state, strict=False)
    if tied:
        full.tie_weights()
    from specdesk.core.userdirs import usual_mode

    dest = Path(dest)
    full.save_pretrained(dest)
    for weights in dest.glob("*.safetensors"):
        usual_mode(weights)  # safetensors writes 0600: the usual mode, as a distilled folder gets
    for name in TOKENIZER_NAMES:
        if (Path(path) / name).exists() and name != "generation_config.json":
            shutil.copy(Path(path) / name, dest / name)
    return dest
