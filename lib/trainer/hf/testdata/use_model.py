"""Predicts with a run's model in plain transformers and peft, as
potato-rundir(5) shows under USING A MODEL: nothing of the toolkit.

    python3 use_model.py RUNDIR/artifacts/model-SCHEMA ITEMS.jsonl
    python3 use_model.py RUNDIR/artifacts/model-SCHEMA/adapter ITEMS.jsonl

The first is the model as the run saved it (hf-text-classification's or
hf-llm-classification's): a LoRA adapter, a merged
model (merge=true) or a whole fine-tuned one (lora=false); the second, of
a merged model, its adapter on the base model.

ITEMS.jsonl has one {"instance_id", "text"} a line (a split of the run's
bundle will do). Writes one {"instance_id", "label", "confidence",
"probs"} a line."""

import json
import os
import sys

import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer


def load(model_dir):
    # A merged model keeps its adapter in adapter/, whose card is the
    # model's, one directory up.
    card_path = model_dir + "/model_card.json"
    if not os.path.exists(card_path):
        card_path = os.path.dirname(os.path.abspath(model_dir)) + "/model_card.json"
    card = json.load(open(card_path))
    if os.path.exists(model_dir + "/adapter_config.json"):
        from peft import PeftModel
        config = AutoConfig.from_pretrained(model_dir)
        # hf-llm-classification's base may be a GGUF file, which
        # transformers reads (dequantized) with gguf_file.
        gguf = {"gguf_file": card["gguf_file"]} if card.get("gguf_file") else {}
        base = AutoModelForSequenceClassification.from_pretrained(card["base_model"], config=config, **gguf)
        model = PeftModel.from_pretrained(base, model_dir)
    else:
        model = AutoModelForSequenceClassification.from_pretrained(model_dir)
    return card, AutoTokenizer.from_pretrained(model_dir), model.eval()


def main(model_dir, items):
    card, tok, model = load(model_dir)
    labels, multi = card["labels"], card["problem_type"] == "multi_label_classification"
    # The special tokens the tokenizer puts around a text ([CLS] and [SEP]
    # for BERT): those of a probe's ids that are not its own.
    own = tok("a", add_special_tokens=False)["input_ids"]
    full = tok("a")["input_ids"]
    at = next(i for i in range(len(full) - len(own) + 1) if full[i:i + len(own)] == own)
    prefix, suffix = full[:at], full[at + len(own):]
    for line in open(items):
        item = json.loads(line)
        # Cut as the run cut it (model_card.json's truncation): head_tail
        # keeps the first quarter and the last three quarters of the room
        # the special tokens leave.
        ids = tok(item["text"] or " ", add_special_tokens=False)["input_ids"]
        room = card["max_length"] - len(prefix) - len(suffix)
        if len(ids) > room:
            head = room if card.get("truncation", "head") == "head" else max(1, round(room / 4))
            ids = ids[:head] + (ids[len(ids) - (room - head):] if room > head else [])
        ids = torch.tensor([prefix + ids + suffix])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0]
        probs = (torch.sigmoid(logits) if multi else torch.softmax(logits, -1)).tolist()
        if multi:
            t = card["threshold"]
            label = "|".join(sorted(l for l, p in zip(labels, probs) if p >= t))
            conf = min(p if p >= t else 1 - p for p in probs)
        else:
            best = max(range(len(probs)), key=probs.__getitem__)
            label, conf = labels[best], probs[best]
        print(json.dumps({"instance_id": item["instance_id"], "label": label, "confidence": conf, "probs": probs}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
