"""A GGUF file as q4 (or q8), stored once in specdesk's cache: its 4-bit (8-bit) codes, not a float32 copy.

q4 loaded a GGUF through its float32 conversion (convert.py) and quantized every layer again at each load: 4-8x
the file on disk (an 8B Q4_K_M: ~32 GB), all of it read at every load, then int4.quantize_model's work. The q4
conversion quantizes each tensor as it is dequantized, with the very functions quantize_model applies to the
float32 copy (so codes, steps and zeros are bit for bit the same), and stores what a q4 model holds: the layers'
packed codes and scales in the kernel's layout, the head's 8-bit codes, everything else in bfloat16. A load builds
the architecture with empty parameters (accelerate's init_empty_weights: buffers such as the rotary frequencies
are computed as usual), puts the stored modules in place and assigns the rest. q8 (8-bit codes per 32 weights for the
layers too, int4.quantize_model's ``layers="q8"``) is stored the same way in folders named q8-... .
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from specdesk.core.errors import BadModel

LAYOUT = 1  # the stored form's version: a change makes a new folder, not a misread one
Encoder = Callable[[str, object], list]  # (name, float32 tensor) -> [(stored name, tensor), ...]


def folder_names(layers: str = "q4") -> tuple[str, str]:
    """The cache folders of the current q4 (``layers`` "q8": q8) forms: specdesk's own kernel's layout, and torch's
    int4 kernel's (whose packing belongs to the torch version and to the vector width its CPU kernels run at: blocks
    of 64 rows with AVX-512, of 32 with AVX2, so a cache shared by two such machines must not hand one the other's)."""
    import torch

    width = torch.backends.cpu.get_cpu_capability().lower()
    return f"{layers}-own-{LAYOUT}", f"{layers}-torch-{torch.__version__.split('+')[0]}-{width}-{LAYOUT}"


def folder_name(layers: str = "q4") -> str:
    """The cache folder of this machine's q4 (q8) form (:func:`folder_names`: its own kernel's where that runs)."""
    from specdesk.core import int4

    own, torch_form = folder_names(layers)
    return own if int4.native() else torch_form


def layers_of(folder: Path) -> str:
    """"q4" or "q8": which form a folder :func:`folder_name` named holds."""
    return "q8" if Path(folder).name.startswith("q8-") else "q4"


def encoder(model, layers: str = "q4") -> Encoder:
    """What the conversion stores for each of ``model``'s tensors (``model``: the architecture, parameters empty):
    a quantized layer's packed codes and scales, anything else in bfloat16; a head tied to the embeddings gets its
    codes from the embedding tensor, as quantize_model takes them from the tied weight."""
    import torch

    from specdesk.core import int4

    targets = int4.quant_targets(model, layers=layers)
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    names = {id(p): n for n, p in model.named_parameters()}  # a tied weight appears once, as the embedding's
    modules = {id(m): n for n, m in model.named_modules()}
    emb_name = names.get(id(emb.weight))
    tied_head = modules.get(id(head)) if head is not None and head.weight is emb.weight else None

    def codes(module: str, w) -> list:
        q = targets[module].from_linear(SimpleNamespace(weight=w, bias=None, in_features=w.shape[1]))
        return [(f"{module}.packed", q.packed), (f"{module}.scales_zeros", q.scales_zeros)]

    def encode(name: str, w) -> list:
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        out = codes(module, w) if module in targets else [(name, w.to(torch.bfloat16))]
        if name == emb_name and tied_head in targets:
            out += codes(tied_head, w)
        return out
    return encode


def load(folder: Path) -> tuple[object, int]:
    """(the q4 or q8 model stored in ``folder``, its parameter count as the float32 model has it), on the CPU."""
    import torch
    from accelerate import init_empty_weights
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    from specdesk.core import int4

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    with init_empty_weights():  # parameters on the meta device; buffers real
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
    model.tie_weights()  # as from_pretrained ties them (not done under init_empty_weights): the count takes one
    params = sum(p.numel() for p in model.parameters())
    index = folder / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    state: dict = {}
    for f in files:
        state.update(load_file(str(folder / f)))
    for name, kind in int4.quant_targets(model, layers=layers_of(folder)).items():
        lin = model.get_submodule(name)
        try:
            packed, scales = state.pop(f"{name}.packed"), state.pop(f"{name}.scales_zeros")
        except KeyError:
            raise BadModel(f"specdesk's q4 cache {folder} lacks {name}: delete the folder to convert again") from None
        model.set_submodule(name, kind(packed, scales, lin.in_features, state.pop(f"{name}.bias", None)))
    int4.fuse_model(model)
    result = model.load_state_dict(state, strict=False, assign=True)
    empty = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if result.unexpected_keys or empty:
        odd = (result.unexpected_keys or empty)[0]
        raise BadModel(f"specdesk's q4 cache {folder} does not fit the architecture ({odd}): delete it to convert again")
    model.to(torch.bfloat16)  # as quantize_model leaves it (the rotary frequencies too)
    model.eval()
    return model, params
