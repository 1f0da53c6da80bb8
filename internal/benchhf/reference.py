"""The reference of scripts/bench-hf: a sequence classifier fine-tuned the
way transformers' own documentation trains one, with its Trainer, on the
train split of a potato-training bundle, with the LoRA adapter of peft
that hf-text-classification uses by default.

    python reference.py BUNDLE_DIR SCHEMA MODEL EPOCHS BATCH MAX_LENGTH LR

Prints one JSON object: the Trainer's train_runtime and
train_samples_per_second, and the number of training examples."""

import json
import math
import sys
import tempfile

import torch
from peft import LoraConfig, TaskType, get_peft_model
from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                          TrainingArguments)


class Rows(torch.utils.data.Dataset):
    def __init__(self, enc, labels):
        self.enc, self.labels = enc, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        item = {k: v[i] for k, v in self.enc.items()}
        item["labels"] = self.labels[i]
        return item


def main(bundle, schema, model, epochs, batch, max_length, lr):
    manifest = json.load(open(bundle + "/manifest.json"))
    labels = next(s for s in manifest["schemas"] if s["name"] == schema)["labels"]
    texts, ys = [], []
    for line in open(bundle + "/train.jsonl"):
        row = json.loads(line)
        if row.get("targets", {}).get(schema) in labels:
            texts.append(row.get("text") or " ")
            ys.append(labels.index(row["targets"][schema]))
    tok = AutoTokenizer.from_pretrained(model)
    enc = tok(texts, truncation=True, max_length=int(max_length))
    net = AutoModelForSequenceClassification.from_pretrained(model, num_labels=len(labels))
    net = get_peft_model(net, LoraConfig(task_type=TaskType.SEQ_CLS, r=8, lora_alpha=16, lora_dropout=0.1,
                                         target_modules=["query", "value"], modules_to_save=["classifier"]))
    args = TrainingArguments(output_dir=tempfile.mkdtemp(prefix="bench-hf-reference-"), per_device_train_batch_size=int(batch),
                             num_train_epochs=int(epochs), learning_rate=float(lr), weight_decay=0.01,
                             warmup_steps=int(0.06 * math.ceil(len(ys) / int(batch)) * int(epochs)),
                             lr_scheduler_type="linear", max_grad_norm=1.0, eval_strategy="no",
                             save_strategy="no", logging_strategy="no", report_to=[], use_cpu=True, seed=0)
    out = Trainer(model=net, args=args, train_dataset=Rows(enc, ys),
                  data_collator=DataCollatorWithPadding(tok)).train()
    print(json.dumps({"train_runtime": out.metrics["train_runtime"],
                      "train_samples_per_second": out.metrics["train_samples_per_second"], "examples": len(ys)}))


if __name__ == "__main__":
    main(*sys.argv[1:8])
