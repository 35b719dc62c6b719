"""The generation controls: drafter, k, sampling values, max new tokens, seed.

They produce a validated ``GenerationSettings`` (core's own validation, so the GUI and the CLI refuse
the same values with the same words) and a plain dict for the settings file.
"""

from __future__ import annotations

from PySide6.QtWidgets import (QComboBox, QDoubleSpinBox, QGridLayout, QLabel, QSpinBox, QWidget)

from specdesk.core.pairing import MODEL_DRAFTERS
from specdesk.core.settings import MAX_K, GenerationSettings
from specdesk.core.tree import SUGGESTED, parse_widths, widths_text

TREE_CHOICES = ((), SUGGESTED, (6, 3, 2), (8,))


def _tree_text(widths: tuple[int, ...]) -> str:
    return widths_text(widths) or "chain"

DRAFTER_LABELS = {"model": "draft model", "model+lookup": "draft model + lookup",
                  "phrases": "phrases + lookup", "ngram": "n-gram lookup", "none": "none (plain)"}
AUTO_K = -1  # the k spin box's minimum, shown as "auto"
RANDOM_SEED = -1


def _label(text: str, tip: str) -> QLabel:
    lab = QLabel(text)
    lab.setObjectName("muted")
    lab.setToolTip(tip)
    return lab


# why a drafter is greyed out: the model drafters need a draft model; the phrases need a table of this target's
_UNAVAILABLE = {
    "model": "load a draft model to use it (Models → Choose models…)",
    "phrases": "needs a table of this model's phrases: a draft distilled for it brings one, or Tools → Train a draft "
               "for this model… (Kind: phrases only) counts one in minutes",
}


class ControlsPanel(QWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.drafter_box = QComboBox()
        for key, label in DRAFTER_LABELS.items():
            self.drafter_box.addItem(label, key)
        self.drafter_box.setToolTip("Who proposes tokens: the draft model, prompt lookup (n-gram: tokens that "
                                    "followed the same words earlier in the text), both (the default with a draft: "
                                    "lookup where the text repeats, the draft elsewhere), the model's own phrases "
                                    "with lookup (a distilled draft's table: no model pass), or nobody")
        self.k_box = QSpinBox()
        self.k_box.setRange(AUTO_K, MAX_K)
        self.k_box.setSpecialValueText("auto")
        self.k_box.setValue(AUTO_K)  # adaptive k: in the bench, at least as fast as k=4 in every greedy category
        self.k_box.setToolTip("Draft tokens per step; 'auto' adapts k to the measured acceptance")
        self.tree_box = QComboBox()
        for widths in TREE_CHOICES:
            self.tree_box.addItem(_tree_text(widths), _tree_text(widths))
        self.tree_box.setToolTip("Greedy: the draft's runner-up tokens checked beside its chain in the same target "
                                 "pass (4,2: its best 4 at depth 1, best 2 at depth 2); 'chain' = its top token only. "
                                 "Pays where a pass over more positions costs little more (a GPU); on a CPU, "
                                 "measure with specdesk bench. Sampling always drafts a chain.")
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 5.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setDecimals(2)
        self.temperature.setToolTip("0 = greedy: output identical to plain decoding, token for token")
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 100_000)
        self.top_k.setSpecialValueText("off")
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.01, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setDecimals(2)
        self.top_p.setValue(1.0)
        self.max_new = QSpinBox()
        self.max_new.setRange(1, 100_000)
        self.max_new.setValue(256)
        self.seed = QSpinBox()
        self.seed.setRange(RANDOM_SEED, 2**31 - 1)
        self.seed.setSpecialValueText("random")
        self.seed.setValue(RANDOM_SEED)
        self.seed.setToolTip("Seed for sampling (temperature > 0); 'random' draws a new one each time")

        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(6)
        grid.setVerticalSpacing(6)
        fields = (("Drafter", self.drafter_box, "Who proposes tokens"), ("k", self.k_box, "Draft tokens per step"),
                  ("Max new", self.max_new, "Reply length limit (tokens)"), ("Seed", self.seed, "Sampling seed"),
                  ("Temp.", self.temperature, "Temperature: 0 = greedy"), ("Top-k", self.top_k, "0 = off"),
                  ("Top-p", self.top_p, "1.0 = off"), ("Tree", self.tree_box, "Draft candidates per depth (greedy)"))
        for i, (name, widget, tip) in enumerate(fields):
            row, col = divmod(i, 4)
            grid.addWidget(_label(name, tip), row, col * 2)
            grid.addWidget(widget, row, col * 2 + 1)
        for col in range(4):
            grid.setColumnStretch(col * 2 + 1, 1)
        self.drafter_box.currentIndexChanged.connect(self._sync_k)

    # ---------------------------------------------------------------- values

    def drafter(self) -> str:
        return self.drafter_box.currentData()

    def set_available_drafters(self, drafters: tuple[str, ...], preferred: str | None = None) -> None:
        model = self.drafter_box.model()
        for i in range(self.drafter_box.count()):
            key = self.drafter_box.itemData(i)
            item = model.item(i)
            item.setEnabled(key in drafters)
            item.setToolTip("" if key in drafters else _UNAVAILABLE.get(key, _UNAVAILABLE["model"]))
        want = preferred if preferred in drafters else (drafters[0] if drafters else "none")
        if self.drafter() not in drafters or preferred in drafters:
            self.drafter_box.setCurrentIndex(self.drafter_box.findData(want))
        self._sync_k()

    def _sync_k(self) -> None:
        self.k_box.setEnabled(self.drafter() != "none")
        self.tree_box.setEnabled(self.drafter() in MODEL_DRAFTERS)

    def tree(self) -> tuple[int, ...]:
        return parse_widths(self.tree_box.currentData())

    def k(self) -> int | str:
        return "auto" if self.k_box.value() == AUTO_K else self.k_box.value()

    def settings(self) -> GenerationSettings:
        """Validated settings; raises BadSetting with a one-line message."""
        seed = self.seed.value()
        return GenerationSettings(max_new_tokens=self.max_new.value(), temperature=round(self.temperature.value(), 4),
                                  top_k=self.top_k.value(), top_p=round(self.top_p.value(), 4),
                                  seed=None if seed == RANDOM_SEED else seed, k=self.k(), tree=self.tree())

    def values(self) -> dict:
        return {"drafter": self.drafter(), "k": self.k(), "temperature": self.temperature.value(),
                "top_k": self.top_k.value(), "top_p": self.top_p.value(), "max_new_tokens": self.max_new.value(),
                "seed": None if self.seed.value() == RANDOM_SEED else self.seed.value(), "tree": self.tree_box.currentData()}

    def set_values(self, v: dict) -> None:
        """Restore saved values; anything missing or malformed keeps its current value."""
        def num(key, kind):
            try:
                return kind(v[key])
            except (KeyError, TypeError, ValueError):
                return None

        if v.get("k") == "auto":
            self.k_box.setValue(AUTO_K)
        elif (k := num("k", int)) is not None:
            self.k_box.setValue(k)
        for key, box, kind in (("temperature", self.temperature, float), ("top_k", self.top_k, int),
                               ("top_p", self.top_p, float), ("max_new_tokens", self.max_new, int)):
            if (x := num(key, kind)) is not None:
                box.setValue(x)
        if isinstance(v.get("tree"), str) and (i := self.tree_box.findData(v["tree"])) >= 0:
            self.tree_box.setCurrentIndex(i)
        if "seed" in v:
            s = num("seed", int)
            self.seed.setValue(RANDOM_SEED if s is None else s)
        i = self.drafter_box.findData(v.get("drafter"))
        if i >= 0 and self.drafter_box.model().item(i).isEnabled():
            self.drafter_box.setCurrentIndex(i)
