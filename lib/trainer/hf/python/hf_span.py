#!/usr/bin/env python3
"""The hf-span trainer of potato-training.

Fine-tunes a transformers token classifier, with LoRA through peft by
default, on the span schemas of a run's bundle, and speaks the v1 event
protocol of potato-events(5) on standard output:

    python3 hf_span.py --spec spec.json

potato-agent(1) documents its parameters, outputs and exit codes. It is
the package potato_hf beside this file (span_loop and spans), which it
shares with hf-text-classification.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from potato_hf.main import main  # noqa: E402
from potato_hf.span_loop import TRAINER  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(trainer=TRAINER))
