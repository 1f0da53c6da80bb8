#!/usr/bin/env python3
"""The embed-logreg trainer of potato-training.

Fits a linear head (scikit-learn's LogisticRegression) for each schema on
the vectors of a frozen sentence encoder (all-MiniLM-L6-v2 by default),
and speaks the v1 event protocol of potato-events(5) on standard output:

    python3 embed_logreg.py --spec spec.json

potato-agent(1) documents its parameters, outputs and exit codes. The
trainer is the module potato_hf.embed beside this file, with the modules
it shares with hf-text-classification.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from potato_hf.embed import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
