"""An EAGLE drafter: a one-layer head that drafts from the target's own hidden states.

EAGLE (Li et al. 2024) drafts at the feature level: the input at position j is the target's final hidden state
f_j (after its final norm, what its output head reads) fused with the embedding of the next token t_{j+1}
(``fc``: 2*hidden -> hidden); one decoder layer and a norm turn it into an estimate of f_{j+1}, and the
target's head (here its rows for the draft's tokens, FR-Spec) turns that into the draft's next-token logits.
Drafting further, the head's own estimate stands in for the feature the target has not computed yet.

Row bookkeeping (a committed sequence t_0..t_{L-1}; the target has run positions 0..L-2, so it holds f_0..f_{L-2}):
row j of the head's cache reads (f_j, t_{j+1}). ``propose`` first builds the rows it lacks up to L-2 from the
target's features (kept by the target's lean decoder, ``keep_hidden``), whose last output drafts t_L; each
drafted token adds one row built from the head's own estimate. ``commit(valid_len)`` keeps only rows built from
the target's features that stay valid, so drafted rows never outlive their step. The target verifies every
proposal as usual, so the output stays exactly the target's.
"""

from __future__ import annotations

import torch

from specdesk.core.drafters import ModelDrafter
from specdesk.core.errors import BadSetting


class EagleDrafter(ModelDrafter):
    """``model``: the head as a one-layer causal LM sharing the target's embeddings (its layer, final norm and
    head rows run on the lean decoder); ``fc``: the fusion layer; ``target_seq``: the target's ModelSequence."""

    ids_path = False  # drafts from the target's features: its own _first and _next

    def __init__(self, model, fc: torch.nn.Linear, target_seq, vocab: int, target_vocab: int,
                 head_ids: torch.Tensor | None = None) -> None:
        super().__init__(model, vocab, target_vocab, lean=True, head_ids=head_ids)
        if not self.seq.uses_lean_path:
            raise BadSetting(f"this EAGLE head cannot run ({self.seq.lean_reason})")
        if not target_seq.uses_lean_path:
            raise BadSetting(f"an EAGLE head reads the target's hidden states, which specdesk keeps only on its "
                             f"lean path; this target has none ({target_seq.lean_reason})")
        self.fc_weight = fc.weight  # (hidden, 2 * hidden)
        self.embed = model.get_input_embeddings().weight  # the target's own tensor (borrowed)
        self.target_seq = target_seq
        target_seq.keep_hidden = True
        self.seq.keep_hidden = True
        self.rows = 0  # rows of the head's cache built from the target's features

    def start(self, prefix_ids: list[int], capacity: int) -> None:
        self.seq.start([], capacity)  # rows are built at the first proposal, from the target's prefill
        self.rows = 0

    def _fuse(self, feats: torch.Tensor, toks: torch.Tensor) -> torch.Tensor:
        """feats (n, hidden), toks (n,) -> the layer's inputs (n, hidden)."""
        return torch.nn.functional.linear(torch.cat([feats, self.embed[toks]], dim=-1), self.fc_weight)

    @torch.inference_mode()
    def _first(self, ids: list[int]) -> torch.Tensor:
        target = self.target_seq.decoder
        if target is None or target.hidden is None:
            raise BadSetting("an EAGLE head needs the target on its lean path with hidden states kept "
                             "(a sliding-window target past its window has none)")
        end = len(ids) - 1  # the target holds f_0..f_{end-1}
        toks = torch.tensor(ids[self.rows + 1:end + 1], dtype=torch.long, device=self.device)
        logits = self.seq.decoder.forward_embeds(self._fuse(target.hidden[self.rows:end], toks))
        self.rows = end
        return logits[: self.vocab]

    @torch.inference_mode()
    def _next(self, tok: torch.Tensor) -> torch.Tensor:
        dec = self.seq.decoder
        own = dec.hidden[dec.length - 1:dec.length]  # (1, hidden): the head's estimate of the next feature
        return dec.forward_embeds(self._fuse(own, tok))[: self.vocab]

    def remember(self, ids: list[int]) -> None:
        """Nothing: the head's rows are keyed by the target's features, and start() builds them anew."""

    def commit(self, valid_len: int) -> None:
        # the target keeps positions < valid_len, so rows j < valid_len have both f_j and t_{j+1} final
        self.rows = min(self.rows, valid_len)
        self.seq.crop(self.rows)
