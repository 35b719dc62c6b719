"""Writing small GGUF files for the tests with the gguf package's own writer, as llama.cpp's converter would.

``write_gguf(hf_folder, dest, "Q8_0")`` turns a tiny Hugging Face llama folder (``conftest.make_llama``, demo
tokenizer) into a GGUF file: llama.cpp's tensor names, its q/k row permutation, 1-D tensors in F32, 2-D
tensors in the requested type, the byte-level BPE tokenizer as ``tokenizer.ggml.*`` metadata. Also the
store layouts: LM Studio's folders and Ollama's manifest + blob.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

CHAT_TEMPLATE = ("{% for m in messages %}<|endoftext|>{{ m['role'] }}\n{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|endoftext|>assistant\n{% endif %}")

_FILE_TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7}


def _permute(w, n_head: int, n_head_kv: int):
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute (q and k rows, for its rotary layout)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _tokenizer(folder: Path) -> tuple[list[str], list[int], list[str]]:
    data = json.loads((folder / "tokenizer.json").read_text())
    vocab = dict(data["model"]["vocab"])
    special = set()
    for t in data.get("added_tokens", []):
        vocab[t["content"]] = t["id"]
        if t.get("special"):
            special.add(t["id"])
    tokens = [None] * (max(vocab.values()) + 1)
    for tok, i in vocab.items():
        tokens[i] = tok
    types = [3 if i in special else 1 for i in range(len(tokens))]  # 3 = CONTROL, 1 = NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return tokens, types, merges


def write_gguf(hf_folder: Path, dest: Path, qtype: str = "F32", *, chat_template: str | None = None,
               arch: str = "llama", name: str = "tiny", tokens_override: dict[int, str] | None = None,
               extra: dict | None = None) -> Path:
    """``hf_folder`` (a tiny llama) as a GGUF file of weight type ``qtype`` (F32, F16, Q8_0, Q4_0, Q4_1)."""
    import numpy as np
    from gguf import MODEL_ARCH, GGMLQuantizationType, GGUFWriter, get_tensor_name_map, quants
    from safetensors.numpy import load_file

    cfg = json.loads((hf_folder / "config.json").read_text())
    weights = load_file(str(hf_folder / "model.safetensors"))
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(dest), arch)
    w.add_name(name)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    w.add_rope_freq_base(float((cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(_FILE_TYPES[qtype])
    tokens, types, merges = _tokenizer(hf_folder)
    for i, tok in (tokens_override or {}).items():
        tokens[i] = tok
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    if chat_template:
        w.add_chat_template(chat_template)
    for key, value in (extra or {}).items():
        if isinstance(value, int):
            w.add_uint32(key, value)
        else:
            w.add_string(key, value)
    names = get_tensor_name_map(MODEL_ARCH.LLAMA, cfg["num_hidden_layers"])
    kind = GGMLQuantizationType[qtype]
    for hf_name, tensor in weights.items():
        if hf_name == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            continue
        base, suffix = hf_name.rsplit(".", 1)
        gguf_name = names.get_name(base) + "." + suffix
        data = tensor.astype(np.float32)
        if ".attn_q." in gguf_name:
            data = _permute(data, heads, heads)
        elif ".attn_k." in gguf_name:
            data = _permute(data, heads, kv_heads)
        if data.ndim == 1 or kind == GGMLQuantizationType.F32:
            w.add_tensor(gguf_name, np.ascontiguousarray(data))
        elif kind == GGMLQuantizationType.F16:
            w.add_tensor(gguf_name, np.ascontiguousarray(data.astype(np.float16)))
        else:
            w.add_tensor(gguf_name, quants.quantize(np.ascontiguousarray(data), kind), raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dest


def lmstudio_layout(home: Path, gguf: Path, publisher: str = "acme", model: str = "tiny-GGUF") -> Path:
    """``~/.lmstudio/models/<publisher>/<model>/<file>.gguf``, as LM Studio downloads."""
    folder = home / ".lmstudio" / "models" / publisher / model
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(gguf, folder / gguf.name))


def ollama_layout(models: Path, gguf: Path, model: str = "tiny", tag: str = "latest",
                  projector: Path | None = None) -> Path:
    """Ollama's store: the GGUF as a content-addressed blob, named by a manifest's model layer."""
    blobs = models / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)

    def blob(data: bytes, media: str) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        (blobs / digest.replace(":", "-")).write_bytes(data)
        return {"mediaType": media, "digest": digest, "size": len(data)}

    layers = [blob(gguf.read_bytes(), "application/vnd.ollama.image.model"),
              blob(b"{{ .Prompt }}", "application/vnd.ollama.image.template")]
    if projector is not None:
        layers.append(blob(projector.read_bytes(), "application/vnd.ollama.image.projector"))
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": blob(b"{}", "application/vnd.docker.container.image.v1+json"), "layers": layers}
    path = models / "manifests" / "registry.ollama.ai" / "library" / model / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return blobs / layers[0]["digest"].replace(":", "-")
