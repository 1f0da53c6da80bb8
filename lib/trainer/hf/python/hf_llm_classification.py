#!/usr/bin/env python3
"""The hf-llm-classification trainer of potato-training.

Fine-tunes a decoder LLM (Llama, Qwen, Gemma, Mistral) as a sequence
classifier with LoRA through peft, on its weights as they are or on 4-bit
or 8-bit weights (quantize=4bit|8bit, bitsandbytes on a CUDA GPU), or
prelabels with an instruction-tuned one zero-shot (mode=zero-shot); and
speaks the v1 event protocol of potato-events(5) on standard output:

    python3 hf_llm_classification.py --spec spec.json

It is the package potato_hf beside this file (potato_hf/llm.py), made
this trainer before its other modules are imported.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from potato_hf import llm  # noqa: E402

llm.install()

from potato_hf.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(train=llm.train))
