"""What a GGUF file holds, from its header alone, and whether specdesk can run it.

specdesk runs a GGUF through transformers: its GGUF loader rebuilds the config and tokenizer from the
metadata and dequantizes the weights (``specdesk.core.models.convert`` does that once, into the cache).
So a file is runnable when transformers can rebuild its architecture and tokenizer, the architecture is a
causal LM whose layers specdesk's KV cache can roll back (attention only: no recurrent state), and the
file is whole and in one part.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from specdesk.core.errors import BadModel
from specdesk.core.models.ggufheader import GGUFHeader, read_gguf_header

# GGUF tensors that are not parameters of the transformers model (rotary scaling factors become config).
NOT_PARAMETERS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")
# llama.cpp's architecture names where transformers' differ (transformers' load_gguf_checkpoint renames them)
_HF_NAMES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2"}
_NOT_CAUSAL = ("t5", "t5encoder", "umt5", "bert", "nomic-bert", "jina-bert-v2", "clip")
# recurrent state (state-space, short convolutions, linear attention) cannot be rolled back past a rejected draft
_RECURRENT = ("mamba", "mamba2", "rwkv6", "rwkv7", "lfm2", "qwen35", "qwen35moe", "jamba")
_FALLBACK_TOKENIZERS = ("gpt2", "llama", "t5", "gemma4")


@dataclass(frozen=True)
class GGUFInfo:
    path: Path
    architecture: str  # as the file names it (llama.cpp's names)
    name: str | None  # general.name
    params: int  # exact: every tensor's shape, rotary factor tables left out
    file_type: str  # quantization as llama.cpp names it: Q4_K_M, Q8_0, F16, ...
    context_length: int | None
    chat_template: bool
    vocab_size: int | None
    tokenizer: str | None  # tokenizer.ggml.model: gpt2 (byte-level BPE), llama (sentencepiece), ...
    stored_bytes: int  # the tensors' bytes as stored
    problem: str | None  # why specdesk cannot run it; None when it can
    header: GGUFHeader

    @property
    def runnable(self) -> bool:
        return self.problem is None


def inspect_gguf(path: Path) -> GGUFInfo:
    """Read ``path``'s header. Raises BadModel for a file that is not a whole GGUF (cut short, not GGUF)."""
    path = Path(path)
    try:
        header = read_gguf_header(path)
    except (OSError, ValueError) as e:
        raise BadModel(f"{path.name} is not a readable GGUF file: {e}") from None
    if header.metadata.get("split.count", 1) > 1 or header.metadata.get("split.no", 0) > 0:
        return _info(header, split_problem(header))
    if header.file_size < header.data_end:
        raise BadModel(f"{path.name} is truncated: {header.file_size:,} bytes where its header promises "
                       f"{header.data_end:,} (interrupted download?)")
    return _info(header, runnable_problem(header))


def check_gguf(path: Path) -> GGUFInfo:
    """``inspect_gguf`` that also raises BadModel (one line) when specdesk cannot run the file."""
    info = inspect_gguf(path)
    if info.problem:
        raise BadModel(f"{Path(path).name}: {info.problem}")
    return info


def split_problem(header: GGUFHeader) -> str:
    count = header.metadata.get("split.count", "several")
    return (f"a GGUF split into {count} parts; merge them into one file first "
            f"(llama.cpp: `llama-gguf-split --merge FIRST-PART.gguf merged.gguf`): transformers reads single files")


def hf_architecture(arch: str) -> str:
    return _HF_NAMES.get(arch, arch)


def runnable_problem(header: GGUFHeader) -> str | None:
    """Why transformers or specdesk cannot run this (whole, single-part) file, or None."""
    arch = header.architecture
    if "general.architecture" not in header.metadata:
        return "no architecture in the header (general.architecture)"
    if arch in _NOT_CAUSAL:
        return f"architecture {arch!r} is not a text-generating (causal) language model"
    if arch in _RECURRENT:
        return (f"architecture {arch!r} keeps recurrent state that cannot be rolled back past a rejected draft "
                f"(specdesk runs attention-only models)")
    supported = transformers_gguf_architectures()
    if supported and arch not in supported and hf_architecture(arch) not in supported:
        return (f"architecture {arch!r} cannot be loaded from GGUF by transformers "
                f"(it reads {', '.join(sorted(supported))})")
    tok = header.metadata.get("tokenizer.ggml.model")
    if tok is None or "tokenizer.ggml.tokens" not in header.metadata:
        return "no tokenizer in the file"
    tokenizers = transformers_gguf_tokenizers()
    if tok not in tokenizers:
        return f"tokenizer type {tok!r} cannot be rebuilt by transformers (it reads {', '.join(tokenizers)})"
    bad = _undequantizable(header)
    if bad:
        return f"weights in {bad}, which the gguf package cannot dequantize"
    return None


def transformers_gguf_architectures() -> set[str]:
    """llama.cpp architecture names transformers' GGUF loader maps to a config."""
    try:
        from transformers.integrations.ggml import GGUF_CONFIG_MAPPING
    except ImportError:
        return set()
    return set(GGUF_CONFIG_MAPPING) - {"general", "tokenizer"}


def transformers_gguf_tokenizers() -> tuple[str, ...]:
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_TYPES
    except ImportError:
        return _FALLBACK_TOKENIZERS
    return tuple(GGUF_TOKENIZER_TYPES)


def _undequantizable(header: GGUFHeader) -> str | None:
    from gguf import GGMLQuantizationType, quants

    traits = getattr(quants, "_type_traits", None)
    if traits is None:  # another gguf version: let the conversion say it
        return None
    plain = {GGMLQuantizationType.F32, GGMLQuantizationType.F16}
    for t in header.tensors:
        qtype = GGMLQuantizationType(t.ggml_type)
        if qtype not in plain and qtype not in traits:
            return qtype.name
    return None


def type_name(ggml_type: int) -> str:
    from gguf import GGMLQuantizationType

    try:
        return GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"type {ggml_type}"


def file_type_name(header: GGUFHeader) -> str:
    """llama.cpp's name for the file's quantization (general.file_type), else its commonest weight type."""
    from gguf import LlamaFileType

    ft = header.metadata.get("general.file_type")
    if isinstance(ft, int):
        try:
            name = LlamaFileType(ft).name
            return name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    counts = Counter(t.ggml_type for t in header.tensors if len(t.shape) >= 2)
    return type_name(counts.most_common(1)[0][0]) if counts else "?"


def parameter_count(header: GGUFHeader) -> int:
    return sum(t.numel for t in header.tensors if t.name not in NOT_PARAMETERS)


def vocab_size(header: GGUFHeader) -> int | None:
    """The vocabulary: the architecture's vocab_size, else the tokenizer's token count, or None."""
    vocab = header.get("vocab_size") or header.metadata.get("tokenizer.ggml.tokens")
    return vocab if isinstance(vocab, int) else None


def _info(header: GGUFHeader, problem: str | None) -> GGUFInfo:
    md = header.metadata
    return GGUFInfo(
        path=header.path, architecture=header.architecture, name=md.get("general.name"),
        params=parameter_count(header), file_type=file_type_name(header) if header.tensors else "?",
        context_length=header.get("context_length"), chat_template=bool(md.get("tokenizer.chat_template")),
        vocab_size=vocab_size(header), tokenizer=md.get("tokenizer.ggml.model"),
        stored_bytes=sum(t.nbytes for t in header.tensors), problem=problem, header=header)


def is_projector(path: Path) -> bool:
    """A multimodal projector (``mmproj-*.gguf``): listed by no one, loadable by no one."""
    name = Path(path).name.lower()
    return name.startswith("mmproj") or "-mmproj" in name or ".mmproj" in name


def model_ggufs(folder: Path) -> list[Path]:
    """The model GGUF files directly inside ``folder`` (projectors left out), sorted by name."""
    try:
        files = [p for p in folder.iterdir() if p.suffix.lower() == ".gguf" and p.is_file()]
    except OSError:
        return []
    return sorted(p for p in files if not is_projector(p))


_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def first_parts(folder: Path) -> list[Path]:
    """``model_ggufs`` with only the first part of a split model (``-00001-of-00003.gguf``) kept."""
    return [p for p in model_ggufs(folder) if not ((m := _PART.search(p.name)) and int(m[1]) > 1)]
