"""What a run leaves: each schema's model in workdir/model-SCHEMA (the
model as its library saves it, its tokenizer, labels.json and
model_card.json), and predictions.jsonl. Each model is saved under
PARTIAL_PREFIX and renamed into place by publish, once every model and
the predictions are written: a run that fails or is cancelled leaves no
partial model in artifacts/."""

import json
import os
import re
import shutil
import time

from .spec import MODEL_VERSION, TRAINER

MODEL_CARD_FORMAT = "potato-model-card"
PARTIAL_PREFIX = ".partial-"


def write_json(path, obj):
    """Writes obj to path through a temporary file renamed into place."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def model_dir_name(schema_name):
    """model-SCHEMA, with what a file name cannot hold replaced."""
    return "model-" + (re.sub(r"[/\\\x00]", "_", schema_name) or "_")


def save_model(workdir, loaded, card):
    """Saves a schema's model (Loaded) with labels.json and model_card.json
    under PARTIAL_PREFIX in workdir: (partial directory, final directory)."""
    final_dir = os.path.join(workdir, model_dir_name(card["schema"]))
    out_dir = os.path.join(workdir, PARTIAL_PREFIX + model_dir_name(card["schema"]))
    shutil.rmtree(out_dir, ignore_errors=True)
    loaded.save(out_dir)
    write_json(os.path.join(out_dir, "labels.json"),
               {"schema": card["schema"], "kind": card["kind"], "labels": card["labels"]})
    write_json(os.path.join(out_dir, "model_card.json"), card)
    return out_dir, final_dir


def model_card(spec, schema, params, labels, loaded, fit, outputs=None):
    """model_card.json of a schema's model: what it is, what it learned
    from, with what, and how to read its outputs. fit holds precision,
    seed, train_items, val_items, best_epoch, val_accuracy and packages."""
    multi = schema["kind"] in ("multilabel", "ordinal")
    # An ordinal schema's model outputs the thresholds of its scale, whose
    # points are labels (ordinal.py).
    outputs = outputs or labels
    card = {"format": MODEL_CARD_FORMAT, "v": 1, "trainer": TRAINER, "model_version": MODEL_VERSION,
            "run_id": spec.get("run_id", ""), "schema": schema["name"], "kind": schema["kind"],
            "annotation_type": schema.get("annotation_type", ""), "labels": labels,
            "id2label": {str(i): l for i, l in enumerate(outputs)}, "label2id": {l: i for i, l in enumerate(outputs)},
            "problem_type": "multi_label_classification" if multi else "single_label_classification",
            "threshold": (0.5 if schema["kind"] == "ordinal" else params["threshold"]) if multi else None,
            "merged": bool(loaded.card.get("lora") and params["merge"]),
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if schema["kind"] == "ordinal":
        card["ordinal"] = {"method": "cumulative binary decomposition (Frank and Hall 2001)", "thresholds": outputs,
                           "prediction": "the median of the points' probabilities"}
    card.update(fit)
    card.update(loaded.card)
    card["params"] = {k: v for k, v in params.items() if k in spec["params"]}
    return card


def publish(saved, tmp_pred, pred_path, workdir, ev):
    """Renames each saved (partial, final) model directory into place,
    reporting its files as artifacts, then the predictions."""
    for partial, final in saved:
        if os.path.exists(final):
            shutil.rmtree(final)
        os.rename(partial, final)
        for rel, size in files_under(final, workdir):
            ev.artifact(rel, size)
    os.replace(tmp_pred, pred_path)


def remove_partial(workdir):
    """Removes what a run that did not finish saved in workdir."""
    try:
        names = os.listdir(workdir)
    except OSError:
        return
    for n in names:
        if n.startswith(PARTIAL_PREFIX):
            shutil.rmtree(os.path.join(workdir, n), ignore_errors=True)


def files_under(root, rel_base):
    """(path relative to rel_base, size) of every file under root, sorted."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(d, f)
            out.append((os.path.relpath(p, rel_base), os.path.getsize(p)))
    return out
