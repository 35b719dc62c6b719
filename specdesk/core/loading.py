"""Finding and loading models: local folders, GGUF files, the local Hugging Face cache, Ollama's store,
and the bundled demo pair.

Nothing here downloads. A name that is none of these is a clear error. A GGUF file is converted once into
specdesk's cache (``specdesk.core.models.convert``) and then loads like any folder. Quantization goes
through transformers' ``BitsAndBytesConfig`` with the compute dtype equal to the model dtype.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from specdesk.core.errors import BadModel, BadSetting, ModelNotFound, OutOfMemory, SpecdeskError

log = logging.getLogger(__name__)

DEMO_NAMES = ("demo-target", "demo-draft")
# q4, q8: core/int4.py (CPU); the others bitsandbytes; auto: auto_quant
QUANTS = ("none", "int8", "nf4", "fp4", "q4", "q8", "auto")
OWN_QUANTS = ("q4", "q8")  # specdesk's own CPU quantizations (core/int4.py): bfloat16 activations
LEAN_TYPES = ("llama", "mistral", "qwen2")  # architectures the lean decoder runs (core/fastdraft.py)
# auto's q8 for a float folder from this size of weight files: a pass of such a model is bound by reading its weights
# (SmolLM2-135M in bfloat16, 270 MB: 25 -> 144 tokens/s as q8 on 2 Zen 3 cores, and its draft still pays, 1.2-1.3x).
# Below it a pass is bound by its per-call work: the demo target (42 MB) plain 150 -> 1,900 tokens/s as q8, where a
# draft step's own work outweighs a pass and the pair's speculative decoding stops paying (0.4-0.9x of plain); the
# demo pair (the machinery's proof) and such toys stay as stored
Q8_AUTO_MIN_BYTES = 100 * 10**6
DTYPES = ("auto", "float32", "float16", "bfloat16")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")


def bundled_models_dir() -> Path:
    """resources/models of a source checkout, or specdesk/resources/models of an installed package."""
    here = Path(__file__).resolve().parent.parent  # .../specdesk
    for candidate in (here / "resources" / "models", here.parent / "resources" / "models"):
        if (candidate / "demo-target" / "config.json").exists():
            return candidate
    return here.parent / "resources" / "models"


def hf_cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def resolve(ref: str | os.PathLike) -> Path:
    """A model reference -> its folder, or its GGUF file.

    References: a demo name, a folder, a GGUF file (or a folder holding one), a Hugging Face id in the local
    cache (``org/name``, or ``org/name/file.gguf`` for a GGUF repository), or ``ollama:name[:tag]``.
    """
    text = str(ref).strip()
    if not text:
        raise ModelNotFound("no model given")
    if text in DEMO_NAMES:
        path = bundled_models_dir() / text
        if not (path / "config.json").exists():
            raise ModelNotFound(f"the bundled model {text} is missing from {path.parent} (broken install?)")
        return path
    if text.startswith("ollama:"):
        from specdesk.core.models.stores import ollama_model

        return ollama_model(text.removeprefix("ollama:"))
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            from specdesk.core.models.ggufheader import is_gguf_file

            if is_gguf_file(path):
                return path.resolve()
            raise BadModel(f"{path} is a file but not a GGUF file; give a .gguf file or the model's folder "
                           f"(the one holding config.json)")
        return folder_model(path.resolve())
    parts = text.split("/")
    looks_like_id = len(parts) in (2, 3) and not text.startswith((".", "/", "~")) and \
        (len(parts) == 2 or parts[2].lower().endswith(".gguf"))
    if looks_like_id:
        from huggingface_hub import snapshot_download

        repo = "/".join(parts[:2])
        try:
            snapshot = Path(snapshot_download(repo, local_files_only=True))
        except Exception:
            where = f"no such file {text}, and " if len(parts) == 3 else ""
            raise ModelNotFound(
                f"{where}{repo} is not in the local Hugging Face cache ({hf_cache_dir()}); specdesk never "
                f"downloads: fetch it first (e.g. `hf download {repo}`) or give a local folder") from None
        if len(parts) == 3:
            if not (snapshot / parts[2]).is_file():
                raise ModelNotFound(f"{parts[2]} is not in the local copy of {repo} ({snapshot})")
            return snapshot / parts[2]
        return folder_model(snapshot)
    raise ModelNotFound(f"no such model folder or file: {path}")


def folder_model(folder: Path) -> Path:
    """A folder -> itself (a Hugging Face folder), or the one model GGUF file it holds."""
    if (folder / "config.json").exists():
        return folder
    from specdesk.core.models.gguf import first_parts

    ggufs = first_parts(folder)
    if len(ggufs) == 1:
        return ggufs[0]
    if len(ggufs) > 1:
        names = ", ".join(p.name for p in ggufs[:4]) + (", ..." if len(ggufs) > 4 else "")
        raise BadModel(f"{folder} holds {len(ggufs)} GGUF files; give the one to load: {names}")
    return folder


def is_gguf(path: Path) -> bool:
    """Whether a resolved model path is a GGUF file (resolve returns folders or GGUF files)."""
    return Path(path).is_file()


def model_name(ref: str | os.PathLike, path: Path) -> str:
    """How a model is named in listings, logs and messages."""
    text = str(ref).strip()
    return text if text in DEMO_NAMES or text.startswith("ollama:") else path.name


def gguf_description(path: Path, converted: Path) -> dict:
    """What a loaded model's session log and status bar say about the GGUF file it came from."""
    from specdesk.core.models.gguf import inspect_gguf

    info = inspect_gguf(path)
    return {"file": str(path), "architecture": info.architecture, "file_type": info.file_type,
            "converted_folder": str(converted)}


def loadable_folder(path: Path, torch_dtype, progress=None) -> Path:
    """The folder transformers loads for a resolved model: a GGUF file is converted once into the cache."""
    if not is_gguf(path):
        return path
    from specdesk.core.models.convert import converted_folder

    return converted_folder(path, torch_dtype, progress)


def _check_safetensors(path: Path) -> None:
    from specdesk.core.stheader import read_header

    try:
        read_header(path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BadModel(f"corrupt weights file {path.name} in {path.parent}: {e}") from None


def read_config(path: Path) -> dict:
    cfg_path = path / "config.json"
    if not cfg_path.exists():
        raise BadModel(f"{path} is not a model folder: it has no config.json")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BadModel(f"corrupt config.json in {path}: {e}") from None
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise BadModel(f"config.json in {path} has no model_type; is this a Hugging Face model folder?")
    return cfg


def weight_files(path: Path) -> list[Path]:
    """The safetensors files of a model folder (following an index when sharded)."""
    index = path / "model.safetensors.index.json"
    if index.exists():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError) as e:
            raise BadModel(f"corrupt model.safetensors.index.json in {path}: {e}") from None
        files = [path / n for n in names]
        missing = [f.name for f in files if not f.exists()]
        if missing:
            raise BadModel(f"{path} is incomplete: missing {', '.join(missing[:3])} (partial download?)")
        return files
    return sorted(path.glob("*.safetensors"))


def check_model_folder(path: Path, need_weights: bool = True) -> dict:
    """Validate a folder cheaply (no weights read); return its config."""
    cfg = read_config(path)
    if need_weights:
        files = weight_files(path)
        if not files and not (path / "pytorch_model.bin").exists():
            raise BadModel(f"{path} has no weights (no *.safetensors); partial download?")
        for f in files:
            _check_safetensors(f)
    if not any((path / name).exists() for name in TOKENIZER_FILES):
        raise BadModel(f"{path} has no tokenizer files (tokenizer.json or tokenizer.model)")
    return cfg


def resolve_device(device: str) -> str:
    import torch

    if device in ("auto", "", None):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BadSetting("device cuda requested but no CUDA GPU is available (use --device cpu or auto)")
    if device != "cpu" and not device.startswith("cuda"):
        raise BadSetting(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N")
    return device


def resolve_dtype(dtype: str, device: str):
    import torch

    if dtype not in DTYPES:
        raise BadSetting(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    if dtype == "auto":
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    return getattr(torch, dtype)


def cpu_only(quant: str) -> BadSetting:
    """The error for q4 or q8 asked of a GPU (the load's and the planner's), naming bitsandbytes' nearest method."""
    return BadSetting(f"quantization {quant} runs on the CPU only: on a GPU use {'nf4' if quant == 'q4' else 'int8'}")


def check_q4(device: str, dtype: str, quant: str = "q4") -> None:
    """q4 and q8 (core/int4.py) run specdesk's CPU kernels, or torch's CPU int4 kernel, with bfloat16 activations."""
    from specdesk.core import int4

    if device != "cpu":
        raise cpu_only(quant)
    if dtype not in ("auto", "bfloat16"):
        raise BadSetting(f"quantization {quant} computes in bfloat16: leave dtype at auto (not {dtype})")
    if not int4.available():
        raise BadSetting(f"quantization {quant} needs torch >= 2.5 (its CPU int4 kernel); this torch has none")


# GGUF file types of about 4 bits a weight or fewer (llama.cpp's names): q4 keeps such a file about as small and as
# exact as it is; a 5-, 6- or 8-bit file would lose precision to it and takes q8 (8 bits per weight and a step per 32:
# more precise than the file's own 5 or 6 bits, a Q8_0 file's own codes)
_FOUR_BITS_OR_FEWER = ("Q4", "IQ4", "Q3", "IQ3", "Q2", "IQ2", "IQ1", "TQ1", "TQ2")
_FIVE_TO_EIGHT_BITS = ("Q5", "Q6", "Q8")


def auto_quant(source: Path, device: str, dtype: str = "auto") -> str:
    """What quantization "auto" (the command line's and the app's default, for the target and the draft) means for a
    resolved model, on a CPU with the compute dtype left to it and specdesk's own kernels built:

    - q4 for a GGUF file of 4 bits a weight or fewer (Q4_0, Q4_1, Q4_K_M, IQ4_XS, Q3_K, ...): 4-bit codes (a Q4_1
      file's own; other files' weights re-quantized to that layout, about their own precision); without the own
      kernels too (torch's int4 kernel). SmolLM2-135M-Instruct Q4_1 on a 2-core AMD EPYC: 246 tokens/s against 41.5
      dequantized to float32.
    - q8 for a GGUF file of 5 to 8 bits (Q5_K_M, Q6_K, Q8_0, ...; a Q8_0 file's own codes) and for a float folder
      of an architecture the lean decoder runs (llama, mistral, qwen2; not one quantized already) whose weight
      files hold at least :data:`Q8_AUTO_MIN_BYTES`: 8-bit codes per 32 weights, about the float model's precision
      (SmolLM2's greedy tokens teacher-forced: 0.97 agree with float32's, as q4's: devscripts/quant_agreement.py).
      SmolLM2 as a bfloat16 Hugging Face folder on a 2-core AMD EPYC (Zen 3): 25 tokens/s in float32 (its own dtype
      widened), 144 as q8.

      A float GGUF file (F16, BF16, F32) takes the folder's rule.

    Else none: the model as it is stored (a smaller float model, another architecture, a GPU, a dtype asked for)."""
    if device != "cpu" or dtype not in ("auto", "bfloat16"):
        return "none"
    from specdesk.core import kernels

    if Path(source).is_dir():
        try:
            cfg = read_config(Path(source))
            size = sum(f.stat().st_size for f in weight_files(Path(source)))
        except (SpecdeskError, OSError):
            return "none"  # the load says what is wrong with the folder
        lean = (cfg.get("model_type") in LEAN_TYPES and cfg.get("hidden_act", "silu") == "silu"
                and "quantization_config" not in cfg and not isinstance(cfg.get("specdesk"), dict))
        return "q8" if lean and size >= Q8_AUTO_MIN_BYTES and kernels.available() else "none"
    from specdesk.core.models.gguf import inspect_gguf

    try:
        info = inspect_gguf(Path(source))
    except SpecdeskError:
        return "none"  # the load says what is wrong with the file
    file_type = info.file_type.upper()
    if file_type.startswith(_FOUR_BITS_OR_FEWER):
        return "q4"
    if file_type.startswith(_FIVE_TO_EIGHT_BITS):
        return "q8" if kernels.available() else "none"  # torch's int4 kernel computes q8 at two 4-bit halves
    # a float file as a float folder: llama.cpp names mistral's and llama's architecture "llama"
    lean = info.architecture in LEAN_TYPES and info.stored_bytes >= Q8_AUTO_MIN_BYTES
    if file_type.startswith(("F16", "BF16", "F32")) and lean and kernels.available():
        return "q8"
    return "none"


def resolve_quant(ref, quant: str, device: str = "auto", dtype: str = "auto") -> str:
    """``quant`` with "auto" made concrete for model ``ref`` on ``device`` (see :func:`auto_quant`); no model (ref
    None), or a reference that does not resolve, gives none (loading it says why)."""
    if quant != "auto":
        return quant
    if ref is None:
        return "none"
    try:
        return auto_quant(resolve(ref), resolve_device(device), dtype)
    except SpecdeskError:
        return "none"


def follower_quant(target_quant: str) -> str:
    """The quantization a distilled draft (or EAGLE head) takes beside a target loaded as ``target_quant``: it follows
    the target whatever is asked for it, q4 beside a q4 or q8 target (:func:`load_borrowing_draft`), else none (the
    target's dtype)."""
    return "q4" if target_quant in OWN_QUANTS else "none"


def resolve_draft_quant(ref, quant: str, target_quant: str, device: str = "auto",
                        dtype: str = "auto") -> tuple[str, bool]:
    """(quantization, follows) for draft ``ref`` beside a target loaded as ``target_quant`` (concrete): a distilled
    draft (built on the target's embeddings, :func:`load_borrowing_draft`) follows its target whatever is asked (q4
    with a q4 or q8 target, else none: the target's dtype), with ``follows`` true; any other draft is ``quant`` as
    :func:`resolve_quant` makes it concrete."""
    from specdesk.core.distill.draft import borrow_info

    try:
        distilled = borrow_info(resolve(ref)) is not None
    except SpecdeskError:
        distilled = False
    if distilled:
        return follower_quant(target_quant), True
    return resolve_quant(ref, quant, device, dtype), False


def quantization_config(quant: str, double_quant: bool, dtype):
    if quant not in QUANTS:
        raise BadSetting(f"unknown quantization {quant!r}: use one of {', '.join(QUANTS)}")
    if quant in ("none", *OWN_QUANTS):
        return None
    from transformers import BitsAndBytesConfig

    if quant == "int8":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quant, bnb_4bit_compute_dtype=dtype,
                              bnb_4bit_use_double_quant=double_quant)


@dataclass
class LoadedModel:
    name: str
    path: Path
    model: object
    tokenizer: object
    quant: str
    double_quant: bool
    dtype: str
    device: str
    vocab: int  # tokenizer vocabulary: ids >= vocab are padding rows of the embedding
    embedding_rows: int
    eos_ids: frozenset[int]
    params: int
    weight_bytes: int
    gguf: dict | None = None  # a model loaded from a GGUF file: its quantization and the converted folder
    # a distilled draft (specdesk.core.distill.draft): the target tensors it shares, and its reduced head's token ids
    borrowed: tuple[str, ...] = ()
    head_ids: object = None
    phrases: object = None  # a distilled draft's table of the target's own phrases (core/phrases.py), if it has one

    def describe(self) -> dict:
        out = {"name": self.name, "path": str(self.path), "quant": self.quant, "double_quant": self.double_quant,
               "dtype": self.dtype, "device": self.device, "params": self.params,
               "weight_bytes": self.weight_bytes, "vocab": self.vocab, "embedding_rows": self.embedding_rows,
               "architecture": getattr(self.model.config, "model_type", "?")}
        if self.gguf is not None:
            out["gguf"] = self.gguf
        if self.borrowed:
            out["borrowed_from_target"] = list(self.borrowed)
        return out


def quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message=".*MatMul8bitLt.*")
    warnings.filterwarnings("ignore", message=".*inputs will be cast.*")
    # bitsandbytes' int8 CPU path logs a cast notice on every matmul
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as e:  # tokenizers raise many types; the user needs the one line
        raise BadModel(f"could not read the tokenizer in {path}: {str(e).splitlines()[0] if str(e) else e!r}") from None


# what a tokenizer is read from besides TOKENIZER_FILES (a borrowing draft's tokenizer is its target's where all match)
TOKENIZER_SIDE_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "merges.txt",
                        "chat_template.jinja", "chat_template.json")


def _same_file(a: Path, b: Path) -> bool:
    """The same bytes, or for JSON the same values without the loading arguments transformers writes into
    tokenizer_config.json on saving (``local_files_only``: a saved copy of a tokenizer that was read with it)."""
    da, db = a.read_bytes(), b.read_bytes()
    if da == db:
        return True
    if a.suffix != ".json":
        return False
    try:
        va, vb = json.loads(da), json.loads(db)
    except ValueError:
        return False
    for value in (va, vb):
        if isinstance(value, dict):
            for key in ("local_files_only", "name_or_path"):
                value.pop(key, None)
    return va == vb


def same_tokenizer_files(a: Path, b: Path) -> bool:
    """Whether folders a and b hold the same tokenizer files (the same names present, the same contents). A distilled
    draft saves its target's tokenizer as its own, so its tokenizer is then the target's object: reading SmolLM2's
    3.5 MB tokenizer.json again cost ~0.25-0.4 s of every load."""
    a, b = Path(a), Path(b)
    found = False
    for name in TOKENIZER_FILES + TOKENIZER_SIDE_FILES:
        fa, fb = a / name, b / name
        if fa.is_file() != fb.is_file():
            return False
        if fa.is_file():
            if not _same_file(fa, fb):
                return False
            found = found or name in TOKENIZER_FILES
    return found


def eos_ids_of(path: Path, model, tokenizer) -> frozenset[int]:
    ids: set[int] = set()
    gen = getattr(model, "generation_config", None)
    for value in (getattr(gen, "eos_token_id", None), getattr(model.config, "eos_token_id", None),
                  tokenizer.eos_token_id):
        if value is None:
            continue
        ids.update(value if isinstance(value, (list, tuple)) else [value])
    return frozenset(int(i) for i in ids)


def _share_head_rows(draft, target, head_ids) -> bool:
    """A q4 draft's reduced 8-bit head (its copy of the target head's rows ``head_ids``) becomes a view of its target's
    head (int4.share_rows: the target's head stores those rows first). Its copy was quantized from a bfloat16 copy
    of the same weights (0.2% of SmolLM2's draft's codes then differ by one from the target's); the view reads the
    target's own codes, so the draft's logits move by about that much, and exactness does not depend on them.
    Whether it did (not where the target's head is not the own kernel's, or is shared already with other rows)."""
    import torch

    from specdesk.core import int4

    mine, theirs = draft.lm_head, target.lm_head
    if type(mine) is not int4.NativeQ8Linear or type(theirs) is not int4.NativeQ8Linear:
        return False
    ids = head_ids.to(torch.int64).cpu()
    m = ids.numel()
    if mine.out_features != m or mine.in_features != theirs.in_features:
        return False
    if theirs.out_map is None:
        pair = int4.share_rows(theirs, ids)
        if pair is None:
            return False
        target.lm_head, draft.lm_head = pair
        return True
    if m % 16 or not torch.equal(theirs.out_map[:m], ids):  # shared already (an earlier draft): the same rows only
        return False
    draft.lm_head = int4.first_rows(theirs, m)
    return True


def load_borrowing_draft(ref: str, target: LoadedModel, progress=None) -> LoadedModel:
    """A distilled draft that borrows ``target``'s embeddings (and head), built next to it on its device."""
    from specdesk.core import phrases
    from specdesk.core.distill.draft import borrow_info, build_from_folder

    source = resolve(ref)
    info = borrow_info(source)
    if info is None:
        raise BadModel(f"{source} is not a distilled draft")
    check_model_folder(source)  # a readable model folder, or BadModel
    theirs = getattr(target.tokenizer, "name_or_path", "")
    same = bool(theirs) and same_tokenizer_files(source, Path(theirs))
    tokenizer = target.tokenizer if same else load_tokenizer(source)
    model, head_ids = build_from_folder(source, target.model, model_name(ref, source), target.name)
    quant, q4_params, q4_bytes = follower_quant(target.quant), 0, 0
    if quant == "q4":
        # a q4 (or q8) target's draft follows it: 4-bit layers cost half its drafting time (3.2 -> 1.6 ms per token for
        # SmolLM2's); its own reduced head takes 8 bits, as the target's does: with a 4-bit head the retrained
        # SmolLM2 draft agreed with the target on 0.435 of held-out tokens, 0.453 with 8 bits (float32: 0.473).
        # An EAGLE head likewise (its fusion layer goes bfloat16, as the target's features are)
        from specdesk.core import int4

        int4.quantize_model(model, head="none" if head_ids is None else "q8")
        if head_ids is not None and "lm_head.weight" in info["borrows"]:
            _share_head_rows(model, target.model, head_ids)
        q4_params, q4_bytes = int4.stored(model)
    own = [p for n, p in model.named_parameters() if n not in info["borrows"]]
    if head_ids is not None and quant == "none":  # the reduced head is the draft's own copy of the target's rows
        own.append(model.lm_head.weight)
    embedding_rows = model.get_input_embeddings().weight.shape[0]
    return LoadedModel(
        name=model_name(ref, source), path=source, model=model, tokenizer=tokenizer, quant=quant,
        double_quant=False, dtype=target.dtype, device=target.device, vocab=min(len(tokenizer), embedding_rows),
        embedding_rows=embedding_rows, eos_ids=eos_ids_of(source, model, tokenizer),
        params=sum(p.numel() for p in own) + q4_params,
        weight_bytes=sum(p.numel() * p.element_size() for p in own) + q4_bytes,
        borrowed=tuple(b for b in info["borrows"] if head_ids is None or b != "lm_head.weight"),
        head_ids=head_ids, phrases=phrases.find(source))


def _stored_16_bit(source: Path):
    """torch.bfloat16 or torch.float16 where ``source`` is a folder whose config says its weights are stored so,
    else None."""
    import torch

    if not Path(source).is_dir():
        return None
    try:
        cfg = read_config(Path(source))
    except SpecdeskError:
        return None
    name = cfg.get("dtype") or cfg.get("torch_dtype")
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(name)


def load_model(ref: str, quant: str = "none", double_quant: bool = False, dtype: str = "auto",
               device: str = "auto", progress=None) -> LoadedModel:
    """Load one model and its tokenizer, ready for inference. ``progress(message)`` hears of long steps."""
    import torch
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    quiet_transformers()
    source = resolve(ref)
    device = resolve_device(device)
    if device == "cpu":
        from specdesk.core import kernels

        kernels.library(progress)  # built once per machine: say so rather than sit silent
    if quant == "auto":
        quant = auto_quant(source, device, dtype)
    torch_dtype = resolve_dtype(dtype, device)
    stored_q4 = quant in OWN_QUANTS and is_gguf(source)  # a GGUF's q4 / q8 form: converted once, loaded as stored
    if quant in OWN_QUANTS:
        check_q4(device, dtype, quant)
        # loaded as float32 (a GGUF's exact values), or as a 16-bit folder stores its weights (the same values, half
        # the memory while it is quantized), then 4- or 8-bit codes + bfloat16
        torch_dtype = _stored_16_bit(source) or torch.float32
    path = loadable_folder(source, quant if stored_q4 else torch_dtype, progress)
    cfg = check_model_folder(path)
    if isinstance(cfg.get("specdesk"), dict) and cfg["specdesk"].get("borrows"):
        want = cfg["specdesk"].get("target", {}).get("name", "its target")
        raise BadModel(f"{source.name} is a distilled draft that borrows {want}'s embeddings: load it as the "
                       f"draft of that target (or write a standalone copy: specdesk distill --standalone)")
    qcfg = quantization_config(quant, double_quant, torch_dtype)
    if qcfg is not None and "quantization_config" in cfg:
        raise BadSetting(f"{source.name} is already quantized ({cfg['quantization_config'].get('quant_method', '?')}); "
                         f"load it with quantization none")
    tokenizer = load_tokenizer(path)
    # use_kernels=False: transformers 5 otherwise swaps layers for kernels fetched from the Hub at load time
    # (a download, and a hard error where the `kernels` package is missing); the lean path runs its own code
    kwargs = dict(dtype=torch_dtype, local_files_only=True, attn_implementation="sdpa", use_kernels=False)
    if qcfg is not None:
        kwargs.update(quantization_config=qcfg, device_map={"": device})
    try:
        if stored_q4:
            from specdesk.core.models import q4store

            model, params = q4store.load(path)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
            params = sum(p.numel() for p in model.parameters())  # before q4 turns the linear weights into buffers
        if qcfg is None:
            model = model.to(device)
    except torch.cuda.OutOfMemoryError:
        raise OutOfMemory(f"out of GPU memory loading {source.name}: try a 4-bit quantization (nf4) or a smaller model") from None
    except MemoryError:
        raise OutOfMemory(f"out of memory loading {source.name}") from None
    except (ValueError, OSError, RuntimeError, KeyError, ImportError, SafetensorError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BadModel(f"could not load {source.name}: {first}") from None
    model.eval()
    if quant in OWN_QUANTS:
        from specdesk.core import int4

        if not stored_q4:
            say = (lambda done, total: progress(f"quantizing {source.name} to {quant[1]} bits ({quant}): "
                                                f"{100 * done // total}%")) if progress else None
            int4.quantize_model(model, layers=quant, progress=say)
        torch_dtype = torch.bfloat16
    if qcfg is not None and device == "cpu":
        from specdesk.core.bnb_cpu import prepare_4bit_layers

        prepare_4bit_layers(model)  # bitsandbytes' packed CPU layout, where this CPU gets it (see bnb_cpu)
    name = model_name(ref, source)
    embedding_rows = model.get_input_embeddings().weight.shape[0]
    return LoadedModel(
        name=name, path=source, model=model, tokenizer=tokenizer, quant=quant,
        double_quant=double_quant and quant in ("nf4", "fp4"), dtype=str(torch_dtype).replace("torch.", ""),
        device=device, vocab=min(len(tokenizer), embedding_rows), embedding_rows=embedding_rows,
        eos_ids=eos_ids_of(path, model, tokenizer), params=params,
        weight_bytes=int(model.get_memory_footprint()),
        gguf=gguf_description(source, path) if is_gguf(source) else None)
