"""The vLLM command for the current pair, beside the planner: GPUs and memory per GPU in, a copyable command out."""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QDoubleSpinBox, QFormLayout, QLabel, QPlainTextEdit,
                               QPushButton, QSpinBox, QVBoxLayout)

from specdesk.core.errors import SpecdeskError
from specdesk.qt import theme


class VllmDialog(QDialog):
    def __init__(self, parent, request) -> None:
        super().__init__(parent)
        self.setWindowTitle("Serve this pair with vLLM")
        self.resize(860, 520)
        self.request = request
        self.gpus = QSpinBox()
        self.gpus.setRange(1, 64)
        self.budget = QDoubleSpinBox()
        self.budget.setRange(1, 4096)
        self.budget.setSuffix(" GiB per GPU")
        self.budget.setValue(self._default_budget())
        self.context = QSpinBox()
        self.context.setRange(0, 1 << 20)
        self.context.setSpecialValueText("4096, or the model's maximum if smaller")
        form = QFormLayout()
        form.addRow("GPUs", self.gpus)
        form.addRow("Memory", self.budget)
        form.addRow("Context", self.context)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setFont(theme.mono_font(9))
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.summary.setObjectName("muted")
        copy = QPushButton("Copy command")
        copy.clicked.connect(self.copy)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.addButton(copy, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addLayout(form)
        lay.addWidget(self.text, 1)
        lay.addWidget(self.summary)
        lay.addWidget(buttons)
        for w in (self.gpus, self.budget, self.context):
            w.valueChanged.connect(self.refresh)
        self.command = None
        self.refresh()

    @staticmethod
    def _default_budget() -> float:
        from specdesk.hw.memory import memory_budget

        b = memory_budget("cuda")
        return round(b.bytes / 2**30, 1) if b.bytes else 24.0

    def refresh(self) -> None:
        from specdesk.core.plan.planner import human_bytes
        from specdesk.core.plan.vllm import VLLM_VERSION_READ, export_vllm

        r = self.request
        try:
            cmd, p, par = export_vllm(r.target, r.draft, drafter=r.drafter, target_quant=r.target_quant,
                                      draft_quant=r.draft_quant, double_quant=r.double_quant, gpus=self.gpus.value(),
                                      budget_bytes_per_gpu=int(self.budget.value() * 2**30),
                                      context=self.context.value() or None)
        except SpecdeskError as e:
            self.command = None
            self.text.setPlainText(f"cannot plan this pair for vLLM: {e}")
            self.summary.setText("")
            return
        self.command = cmd
        big = par.largest
        lines = [cmd.shell(), "", f"# k = {cmd.k}: {cmd.k_source}" if cmd.k else f"# {cmd.k_source}"]
        lines += [f"# vLLM limit: {x}" for x in cmd.limits] + [f"# note: {x}" for x in cmd.notes]
        self.text.setPlainText("\n".join(lines))
        self.summary.setText(f"Tensor parallel {par.tensor_parallel}, pipeline parallel {par.pipeline_parallel}. "
                             f"Busiest GPU: {human_bytes(big.total)} of {human_bytes(par.budget_bytes)} "
                             f"({'fits' if par.fits else 'does not fit'}). Keys and flags as in vLLM "
                             f"{VLLM_VERSION_READ}.")

    def copy(self) -> None:
        if self.command is not None:
            QGuiApplication.clipboard().setText(self.command.shell())
