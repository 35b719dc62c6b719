"""Models in the formats people hold: GGUF files (loose, in LM Studio's, Ollama's and llama.cpp's stores).

- ``ggufheader``: a GGUF file's metadata and tensor table, read without touching the weights.
- ``gguf``: what a GGUF header says about the model (architecture, exact parameter count, quantization,
  context length, chat template) and whether specdesk can run it, with the reason when not.
- ``convert``: the one-time conversion of a GGUF file into a safetensors folder in specdesk's cache.
- ``stores``: where LM Studio, Ollama and llama.cpp keep their GGUF files.

``specdesk.core.loading.resolve`` turns a name or path into a folder or a GGUF file, and
``specdesk.core.discovery`` lists both kinds; both call into this package for GGUF files.
"""
