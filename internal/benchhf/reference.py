"""The references of scripts/bench-hf, each one process of its own.

    python reference.py train BUNDLE_DIR SCHEMA MODEL EPOCHS BATCH MAX_LENGTH LR THREADS

A sequence classifier fine-tuned the way transformers' own documentation
trains one, with its Trainer and the practice it documents for speed:
dynamic padding (DataCollatorWithPadding) and batches grouped by length
(group_by_length), on the train split of a potato-training bundle, with
the LoRA adapter of peft. Then the fitted model predicts the test split
(Trainer.predict), scored as potato-dispatch scores a run's: accuracy and
macro-F1 (the mean F1 of the labels in the gold labels or the
predictions). Prints one JSON object: the Trainer's train_runtime and
train_samples_per_second, the training examples, and the test score.

    python reference.py pipeline BUNDLE_DIR SCHEMA MODEL_DIR BATCH MAX_LENGTH THREADS PREDICTIONS

A plain pipeline("text-classification") of the model a run saved, over
the run's predicted items (every split but train, in file order),
truncated at max_length, at batch_size BATCH (0: the pipeline's default,
no batching). Prints one JSON object:
the items, the seconds of the pipeline's call, and how many of its labels
are those of the run's predictions.jsonl."""

import json
import math
import os
import sys
import tempfile
import time

import torch


def rows(bundle, split):
    p = os.path.join(bundle, split + ".jsonl")
    if not os.path.exists(p):
        return []
    return [json.loads(line) for line in open(p, encoding="utf-8") if line.strip()]


def labelled(bundle, split, schema, labels):
    texts, ys = [], []
    for row in rows(bundle, split):
        if row.get("targets", {}).get(schema) in labels:
            texts.append(row.get("text") or " ")
            ys.append(labels.index(row["targets"][schema]))
    return texts, ys


def score(gold, pred, n_labels):
    """Accuracy and macro-F1, as lib/writeback scores a nominal schema."""
    f1s = []
    for k in range(n_labels):
        tp = sum(1 for g, p in zip(gold, pred) if g == k and p == k)
        fp = sum(1 for g, p in zip(gold, pred) if g != k and p == k)
        fn = sum(1 for g, p in zip(gold, pred) if g == k and p != k)
        if tp + fp + fn:
            f1s.append(2 * tp / (2 * tp + fp + fn))
    acc = sum(1 for g, p in zip(gold, pred) if g == p) / max(len(gold), 1)
    return acc, sum(f1s) / max(len(f1s), 1)


class Rows(torch.utils.data.Dataset):
    def __init__(self, enc, labels):
        self.enc, self.labels = enc, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        item = {k: v[i] for k, v in self.enc.items()}
        item["labels"] = self.labels[i]
        return item


def train(bundle, schema, model, epochs, batch, max_length, lr, threads):
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                              TrainingArguments)
    torch.set_num_threads(int(threads))
    manifest = json.load(open(os.path.join(bundle, "manifest.json")))
    labels = next(s for s in manifest["schemas"] if s["name"] == schema)["labels"]
    texts, ys = labelled(bundle, "train", schema, labels)
    tok = AutoTokenizer.from_pretrained(model)
    enc = tok(texts, truncation=True, max_length=int(max_length))
    net = AutoModelForSequenceClassification.from_pretrained(model, num_labels=len(labels))
    net = get_peft_model(net, LoraConfig(task_type=TaskType.SEQ_CLS, r=8, lora_alpha=16, lora_dropout=0.1,
                                         target_modules=["query", "value"], modules_to_save=["classifier"]))
    # group_by_length: since transformers 5 a train_sampling_strategy.
    fields = TrainingArguments.__dataclass_fields__
    grouped = ({"train_sampling_strategy": "group_by_length"} if "train_sampling_strategy" in fields
               else {"group_by_length": True})
    args = TrainingArguments(output_dir=tempfile.mkdtemp(prefix="bench-hf-reference-"), per_device_train_batch_size=int(batch),
                             per_device_eval_batch_size=int(batch), **grouped,
                             num_train_epochs=int(epochs), learning_rate=float(lr), weight_decay=0.01,
                             warmup_steps=int(0.06 * math.ceil(len(ys) / int(batch)) * int(epochs)),
                             lr_scheduler_type="linear", max_grad_norm=1.0, eval_strategy="no",
                             save_strategy="no", logging_strategy="no", report_to=[], use_cpu=True, seed=0)
    trainer = Trainer(model=net, args=args, train_dataset=Rows(enc, ys), processing_class=tok,
                      data_collator=DataCollatorWithPadding(tok))
    out = trainer.train()
    test_texts, test_ys = labelled(bundle, "test", schema, labels)
    pred = trainer.predict(Rows(tok(test_texts, truncation=True, max_length=int(max_length)), test_ys))
    acc, f1 = score(test_ys, pred.predictions.argmax(-1).tolist(), len(labels))
    print(json.dumps({"train_runtime": out.metrics["train_runtime"],
                      "train_samples_per_second": out.metrics["train_samples_per_second"], "examples": len(ys),
                      "test_n": len(test_ys), "test_accuracy": acc, "test_macro_f1": f1}))


def pipe(bundle, schema, model_dir, batch, max_length, threads, predictions):
    from transformers import pipeline
    torch.set_num_threads(int(threads))
    manifest = json.load(open(os.path.join(bundle, "manifest.json")))
    items = [r for split in sorted(manifest["splits"]) if split != "train" for r in rows(bundle, split)]
    # batch 0: the pipeline's default, no batching.
    kw = {"batch_size": int(batch)} if int(batch) > 0 else {}
    clf = pipeline("text-classification", model=model_dir, device="cpu", **kw)
    start = time.time()
    out = clf([r.get("text") or " " for r in items], truncation=True, max_length=int(max_length))
    secs = time.time() - start
    ours = {}
    for line in open(predictions, encoding="utf-8"):
        p = json.loads(line)
        if p["schema_name"] == schema:
            ours[p["instance_id"]] = p["payload"]["label"]
    same = sum(1 for r, o in zip(items, out) if ours.get(r["instance_id"]) == o["label"])
    print(json.dumps({"items": len(items), "seconds": secs, "same_label": same}))


if __name__ == "__main__":
    if sys.argv[1] == "train":
        train(*sys.argv[2:10])
    else:
        pipe(*sys.argv[2:9])
