#!/usr/bin/env python3
"""The hf-text-classification trainer of potato-training.

Fine-tunes a transformers sequence classifier, with LoRA through peft by
default, on a run's bundle, or trains the built-in hashed n-gram model
(model=builtin:ngram), which needs torch alone; and speaks the v1 event
protocol of potato-events(5) on standard output:

    python3 hf_text_classification.py --spec spec.json

potato-agent(1) documents its parameters, outputs and exit codes. The
trainer is the package potato_hf beside this file, one module per concern
(its __init__ lists them).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from potato_hf.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
