"""The reference of scripts/bench-span --speed: a token classifier
fine-tuned and run the way transformers' documentation does it, one
process, on the bundle speed.py writes for hf-span.

    python reference.py --bundle DIR --schema NAME --model MODEL --epochs N --batch N
        --max-length N --stride N --lr X --lora true|false [--targets a,b] --threads N
        --predict-batches 0,64

Fit: the train split's texts tokenized with their character offsets
(return_offsets_mapping), an item longer than max_length tokens cut into
windows overlapping by stride (return_overflowing_tokens: the windows
hf-span learns, where the documentation's example truncates and learns
less), each token labelled B-/I-/O of the span it falls in and -100 for
the special tokens (the documentation's label alignment, on character
spans rather than words),
AutoModelForTokenClassification with the LoRA of peft (or every weight),
transformers' Trainer with DataCollatorForTokenClassification (padding
each batch to its longest) and batches grouped by length, no evaluation,
no saving, no logging. Fit items per second: the train items x epochs
over the Trainer's train_runtime.

Predict: the fitted model (its adapter merged, as hf-span predicts with
it merged) in a pipeline("token-classification",
aggregation_strategy="simple") over the unlabeled split's texts, windows
of max_length tokens overlapping by stride (the pipeline's stride), at
each batch size of --predict-batches (0: the pipeline's default, one item
at a time). Predict items per second: the items over the seconds of the
pipeline's call.

Prints one JSON object: train_items, train_windows, train_runtime, fit_items_per_s,
predict_items, and predict: [{batch, seconds, items_per_s, spans}], and
peak_rss_mib, the process's peak resident set."""

import argparse
import json
import math
import os
import resource
import sys
import tempfile
import time

import torch


def rows(bundle, split):
    p = os.path.join(bundle, split + ".jsonl")
    if not os.path.exists(p):
        return []
    return [json.loads(line) for line in open(p, encoding="utf-8") if line.strip()]


def align(offsets, spans, label2id, text):
    """Each token's label id from its character offsets: -100 for a special
    token ((0, 0)), B- for the first token of a span (the one its start
    falls in, or the first after it past spaces), I- for the span's other
    tokens, O outside every span."""
    out = []
    for a, b in offsets:
        if a == b:
            out.append(-100)
            continue
        hit = next((s for s in spans if s["start"] < b and a < s["end"]), None)
        if hit is None:
            out.append(label2id["O"])
        else:
            first = a <= hit["start"] or not text[hit["start"]:a].strip()
            out.append(label2id[("B-" if first else "I-") + hit["name"]])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--schema", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--epochs", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--max-length", type=int, required=True)
    ap.add_argument("--stride", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--lora", default="true")
    ap.add_argument("--targets", default="")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--predict-batches", default="0")
    a = ap.parse_args()
    from transformers import (AutoModelForTokenClassification, AutoTokenizer, DataCollatorForTokenClassification,
                              Trainer, TrainingArguments, pipeline)
    torch.set_num_threads(a.threads)
    manifest = json.load(open(os.path.join(a.bundle, "manifest.json")))
    labels = next(s for s in manifest["schemas"] if s["name"] == a.schema)["labels"]
    tags = ["O"] + [p + l for l in labels for p in ("B-", "I-")]
    label2id = {t: i for i, t in enumerate(tags)}

    train = rows(a.bundle, "train")
    tok = AutoTokenizer.from_pretrained(a.model)
    # Windows of max_length tokens overlapping by stride, as hf-span cuts a
    # long item, so that both learn every token of every item.
    enc = tok([r["text"] for r in train], truncation=True, max_length=a.max_length, stride=a.stride,
              return_overflowing_tokens=True, return_offsets_mapping=True, return_special_tokens_mask=True)
    data = []
    for i, item in enumerate(enc["overflow_to_sample_mapping"]):
        r = train[item]
        offs = [(0, 0) if sp else tuple(o) for o, sp in zip(enc["offset_mapping"][i], enc["special_tokens_mask"][i])]
        data.append({"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i],
                     "labels": align(offs, r["targets"][a.schema], label2id, r["text"])})
    model = AutoModelForTokenClassification.from_pretrained(
        a.model, num_labels=len(tags), id2label=dict(enumerate(tags)), label2id=label2id)
    if a.lora == "true":
        from peft import LoraConfig, TaskType, get_peft_model
        kw = {"target_modules": a.targets.split(",")} if a.targets else {}
        model = get_peft_model(model, LoraConfig(task_type=TaskType.TOKEN_CLS, r=8, lora_alpha=16, lora_dropout=0.1,
                                                 modules_to_save=["classifier"], **kw))
    # group_by_length: since transformers 5 a train_sampling_strategy.
    fields = TrainingArguments.__dataclass_fields__
    grouped = ({"train_sampling_strategy": "group_by_length"} if "train_sampling_strategy" in fields
               else {"group_by_length": True})
    steps = math.ceil(len(data) / a.batch) * a.epochs
    # The Trainer's output_dir, which it leaves empty here, removed at exit.
    out_dir = tempfile.TemporaryDirectory(prefix="bench-span-reference-")
    args = TrainingArguments(output_dir=out_dir.name,
                             per_device_train_batch_size=a.batch, num_train_epochs=a.epochs, learning_rate=a.lr,
                             weight_decay=0.01, warmup_steps=int(0.06 * steps), lr_scheduler_type="linear",
                             max_grad_norm=1.0, eval_strategy="no", save_strategy="no", logging_strategy="no",
                             report_to=[], use_cpu=True, seed=0, **grouped)
    trainer = Trainer(model=model, args=args, train_dataset=data, processing_class=tok,
                      data_collator=DataCollatorForTokenClassification(tok))
    out = trainer.train()
    runtime = out.metrics["train_runtime"]

    model = trainer.model
    if a.lora == "true":
        model = model.merge_and_unload()
    model.eval()
    # The pipeline's windows: max_length tokens, stride shared.
    tok.model_max_length = a.max_length
    texts = [r["text"] for r in rows(a.bundle, "unlabeled")]
    pred = []
    for b in [int(x) for x in a.predict_batches.split(",")]:
        kw = {"batch_size": b} if b > 0 else {}
        ner = pipeline("token-classification", model=model, tokenizer=tok, aggregation_strategy="simple",
                       stride=a.stride, device="cpu", **kw)
        t0 = time.perf_counter()
        res = ner(texts)
        secs = time.perf_counter() - t0
        pred.append({"batch": b, "seconds": secs, "items_per_s": len(texts) / secs,
                     "spans": sum(len(x) for x in res)})
    print(json.dumps({"train_items": len(train), "train_windows": len(data), "train_runtime": runtime,
                      "fit_items_per_s": len(train) * a.epochs / runtime, "predict_items": len(texts),
                      "predict": pred, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
