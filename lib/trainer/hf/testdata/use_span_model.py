"""Predicts spans with an hf-span model in plain transformers and peft, as
potato-rundir(5) shows under USING A MODEL: nothing of the toolkit.

    python3 use_span_model.py RUNDIR/artifacts/model-SCHEMA ITEMS.jsonl

ITEMS.jsonl has one {"instance_id", "text"} a line (a split of the run's
bundle will do). Writes one {"instance_id", "spans"} a line, spans as the
run's prelabels have them: {start, end, label, confidence}, characters
[start, end) of the text."""

import json
import os
import re
import sys
from html.parser import HTMLParser

import torch
from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer


def load(model_dir):
    card = json.load(open(os.path.join(model_dir, "model_card.json")))
    if os.path.exists(os.path.join(model_dir, "adapter_config.json")):
        from peft import PeftModel
        base = AutoModelForTokenClassification.from_pretrained(
            card["base_model"], config=AutoConfig.from_pretrained(model_dir))
        model = PeftModel.from_pretrained(base, model_dir)
    else:
        model = AutoModelForTokenClassification.from_pretrained(model_dir)
    return card, AutoTokenizer.from_pretrained(model_dir), model.eval()


class TextContent(HTMLParser):
    def __init__(self):
        HTMLParser.__init__(self, convert_charrefs=True)
        self.parts = []

    def handle_data(self, data):
        self.parts.append(data)


def displayed(text):
    """The text as Potato's annotation page shows it, whose characters its
    span offsets count: spaces and tabs run together, the ends trimmed,
    entities decoded, tags dropped."""
    text = re.sub(r"[\x00-\x09\x0B-\x1F\x7F]", "", text or "")
    p = TextContent()
    p.feed(re.sub(r"[ \t]+", " ", text).strip())
    p.close()
    return "".join(p.parts)


def spans_of(card, tok, model, text):
    tags = card["tags"]  # O, B-label, I-label, ...
    # Windows of max_length tokens overlapping by stride, as the run cut
    # the text; each token's character offsets in the text.
    enc = tok(text or " ", truncation=True, max_length=card["max_length"], stride=card["stride"],
              return_overflowing_tokens=True, return_offsets_mapping=True, return_special_tokens_mask=True)
    best = {}  # (start, end) -> (distance from the window's edge, probs)
    for ids, offsets, special in zip(enc["input_ids"], enc["offset_mapping"], enc["special_tokens_mask"]):
        with torch.no_grad():
            probs = torch.softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), -1).tolist()
        real = [i for i, s in enumerate(special) if not s]
        for rank, i in enumerate(real):
            key, depth = tuple(offsets[i]), min(rank, len(real) - 1 - rank)
            if key not in best or depth > best[key][0]:
                best[key] = (depth, probs[i])
    # A span: a B- token, or an I- token after one of another tag, and the
    # I- tokens of its label after it.
    out, cur = [], None
    for (a, b) in sorted(best):
        p = best[(a, b)][1]
        k = max(range(len(p)), key=p.__getitem__)
        tag = tags[k]
        if tag == "O":
            cur = None
        elif tag.startswith("I-") and cur is not None and cur["label"] == tag[2:]:
            cur["end"], cur["confidence"] = b, min(cur["confidence"], p[k])
        else:
            cur = {"start": a, "end": b, "label": tag[2:], "confidence": p[k]}
            out.append(cur)
    return out


def main(model_dir, items):
    card, tok, model = load(model_dir)
    for line in open(items, encoding="utf-8"):
        item = json.loads(line)
        print(json.dumps({"instance_id": item["instance_id"], "spans": spans_of(card, tok, model, displayed(item["text"]))},
                         ensure_ascii=False))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
