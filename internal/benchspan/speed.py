"""The speed mode of scripts/bench-span: hf-span's fit and predict items
per second against reference.py's (transformers written the usual way),
on the tweets of testdata/span-project, in one run, taking turns.

It writes one bundle: the train split, --train items drawn (seeded) from
the 360 labelled tweets with their entities, and the unlabeled split,
--predict items drawn from all 380 tweets (labelled or not), each list
repeated with new ids when it asks for more than there are. Texts are
the tweets as Potato displays them (display_text: the spans' characters);
the item long000 (40 tweets in one) is left out. A tweet longer than
max_length tokens is cut into the same windows on both sides (hf-span's
stride), so that both learn and predict every token.

Then --reps turns of each side, alternating which goes first (hf-span
first in the first turn: its chosen max_length and LoRA targets are the
reference's), each a process of its own:

  - hf-span: the real launcher (hf_span.py --spec) on the CPU with its
    defaults but epochs, batch_size, max_length (when given), lora, and one
    learning rate for the adapters and the head (the reference has one),
    patience -1, no val split. Fit: train items x epochs over the time of
    its training steps (steps over steps_per_s of the result event);
    predict: its predict_items_per_s (reading, tokenizing, predicting,
    decoding the spans and writing predictions.jsonl).
  - reference.py: the same model, items, epochs, batch size, max_length,
    stride, learning rate and LoRA (or not), with the Trainer and a
    pipeline("token-classification", aggregation_strategy="simple"),
    batched at hf-span's prediction batch and unbatched; its predict
    figure is the faster of the two.

Prints the median of each figure over the turns, the peak RSS of each
side (the most of any turn), the ratios hf-span over reference, and the
verdict (ratio >= 1 for fit and predict)."""

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYDIR = os.path.join(ROOT, "lib", "trainer", "hf", "python")
sys.path.insert(0, PYDIR)

from potato_hf.spans import display_text  # noqa: E402

PROJECT = os.path.join(ROOT, "testdata", "span-project")
SCHEMA = "entities"
# hf-span predicts batch_size x this at a time (params.json).
PREDICT_BATCH_FACTOR = 4


def read_project():
    """(labels, labelled [(id, text, spans)], unlabelled [(id, text)])."""
    cfg = open(os.path.join(PROJECT, "config.yaml"), encoding="utf-8").read()
    labels = json.loads(re.search(r"labels: (\[.*\])", cfg).group(1))
    state = json.load(open(os.path.join(PROJECT, "annotation_output", "wnut", "user_state.json"), encoding="utf-8"))
    marked = state["instance_id_to_span_to_value"]
    lab, unl = [], []
    for line in open(os.path.join(PROJECT, "data", "tweets.jsonl"), encoding="utf-8"):
        r = json.loads(line)
        if r["id"].startswith("long"):
            continue
        text = display_text(r["text"])
        if r["id"] in marked:
            spans = [{"start": s["start"], "end": s["end"], "name": s["name"]}
                     for s, v in marked[r["id"]] if s.get("schema") == SCHEMA and v == "true"]
            lab.append((r["id"], text, spans))
        else:
            unl.append((r["id"], text))
    return labels, lab, unl


def draw(xs, n, rng):
    """n of xs, shuffled, the list repeated (shuffled again) as needed."""
    out = []
    while len(out) < n:
        ys = list(xs)
        rng.shuffle(ys)
        out += ys[:n - len(out)]
    return out


def write_bundle(d, labels, train, pred):
    os.makedirs(d, exist_ok=True)
    splits = {}
    for name, rows in (("train", train), ("unlabeled", pred)):
        with open(os.path.join(d, name + ".jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        splits[name] = {"path": name + ".jsonl", "format": "jsonl", "n": len(rows)}
    schema = {"name": SCHEMA, "annotation_type": "span", "kind": "span", "labels": labels, "source_field": ""}
    json.dump({"v": 1, "schemas": [schema], "splits": splits, "labels": {SCHEMA: labels}},
              open(os.path.join(d, "manifest.json"), "w"))
    return schema


def run(cmd, env):
    """(stdout, stderr) of a process, which must succeed."""
    p = subprocess.run(cmd, capture_output=True, env=env, text=True)
    if p.returncode != 0:
        sys.exit("bench-span: %s exited %d\n%s\n%s" % (cmd[1], p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
    return p.stdout, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--train", type=int, default=400, help="items fitted")
    ap.add_argument("--predict", type=int, default=1000, help="items predicted")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16, help="batch_size (hf-span's default 16)")
    ap.add_argument("--max-length", type=int, default=0, help="max_length (0: hf-span's default, by the items)")
    ap.add_argument("--lr", default="0.001", help="the learning rate of both (hf-span's of LoRA adapters)")
    ap.add_argument("--lora", default="true", choices=("true", "false"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=2, help="turns of each side")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    labels, lab, unl = read_project()
    rng = random.Random(a.seed)
    train = [{"instance_id": "train%05d-%s" % (i, x[0]), "text": x[1], "targets": {SCHEMA: x[2]}}
             for i, x in enumerate(draw(lab, a.train, rng))]
    pool = [(x[0], x[1]) for x in lab] + unl
    pred = [{"instance_id": "pred%05d-%s" % (i, x[0]), "text": x[1], "targets": {}}
            for i, x in enumerate(draw(pool, a.predict, rng))]
    bundle = os.path.join(a.work, "bundle")
    schema = write_bundle(bundle, labels, train, pred)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[k] = str(a.threads)
    params = {"model": a.model, "epochs": str(a.epochs), "batch_size": str(a.batch), "patience": "-1",
              "lora": a.lora, "learning_rate": a.lr, "head_learning_rate": a.lr}
    if a.max_length:
        params["max_length"] = str(a.max_length)
    pbatch = PREDICT_BATCH_FACTOR * a.batch
    ours, ref, window = [], [], {}

    def turn_ours(rep):
        work = os.path.join(a.work, "ours%d" % rep)
        spec = {"v": 1, "run_id": "bench-span-speed-%d" % rep, "trainer": "hf-span", "schemas": [schema],
                "bundle_dir": bundle, "workdir": work, "params": params, "seed": 0,
                "limits": {"max_wall_s": 0, "max_ram_mb": 0, "device": "cpu", "num_threads": a.threads}}
        os.makedirs(work, exist_ok=True)
        path = os.path.join(work, "spec.json")
        json.dump(spec, open(path, "w"))
        out, err = run([a.python, os.path.join(PYDIR, "hf_span.py"), "--spec", path], env)
        evs = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        res = [e for e in evs if e["event"] == "result"]
        if not res:
            sys.exit("bench-span: hf-span gave no result\n%s\n%s" % (out[-3000:], err[-3000:]))
        m = res[-1]["metrics"]
        card = json.load(open(os.path.join(work, "model-%s" % SCHEMA, "model_card.json")))
        window.update(max_length=card["max_length"], stride=card["stride"],
                      targets=",".join((card.get("lora") or {}).get("target_modules") or []))
        fit_s = m["steps"] / m["steps_per_s"]
        wins = [re.search(r" items in (\d+) windows", e.get("msg", "")) for e in evs if e["event"] == "log"]
        spans = sum(len(json.loads(l)["payload"]) for l in open(os.path.join(work, "predictions.jsonl")))
        ours.append({"fit": len(train) * a.epochs / fit_s, "predict": m["predict_items_per_s"],
                     "rss": m.get("peak_rss_mib", 0.0), "windows": next((int(w.group(1)) for w in wins if w), 0),
                     "spans": spans})

    def turn_ref(rep):
        cmd = [a.python, os.path.join(HERE, "reference.py"), "--bundle", bundle, "--schema", SCHEMA, "--model",
               a.model, "--epochs", str(a.epochs), "--batch", str(a.batch), "--max-length",
               str(window["max_length"]), "--stride", str(window["stride"]), "--lr", a.lr, "--lora", a.lora,
               "--targets", window["targets"], "--threads", str(a.threads),
               "--predict-batches", "%d,0" % pbatch]
        out, err = run(cmd, env)
        r = json.loads(out.strip().splitlines()[-1])
        ref.append({"fit": r["fit_items_per_s"], "rss": r["peak_rss_mib"], "windows": r["train_windows"],
                    "spans": r["predict"][0]["spans"],
                    "by_batch": {p["batch"]: p["items_per_s"] for p in r["predict"]},
                    "predict": max(p["items_per_s"] for p in r["predict"])})

    for rep in range(a.reps):
        for who in (("ours", "ref") if rep % 2 == 0 else ("ref", "ours")):
            (turn_ours if who == "ours" else turn_ref)(rep)

    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    print("speed: hf-span against transformers written the usual way (internal/benchspan/reference.py), "
          "all-MiniLM-L6-v2, CPU, %d threads; %d WNUT-16 tweets fitted (%d epoch%s, batch %d, max_length %d, "
          "LoRA %s%s, learning rate %s) and %d predicted; median of %d turns each" % (
              a.threads, len(train), a.epochs, "" if a.epochs == 1 else "s", a.batch, window["max_length"],
              a.lora, " on " + window["targets"] if a.lora == "true" and window["targets"] else "", a.lr,
              len(pred), a.reps))
    print("%-28s  %14s  %14s  %6s" % ("", "hf-span", "reference", "ratio"))
    ok = True
    for what in ("fit", "predict"):
        x, y = med(ours, what), med(ref, what)
        ok = ok and x / y >= 1
        print("%-28s  %9.1f it/s  %9.1f it/s  %6.2f" % (what + " items/s", x, y, x / y))
    for b in (pbatch, 0):
        y = statistics.median(r["by_batch"][b] for r in ref)
        print("%-28s  %14s  %9.1f it/s  %6.2f" % ("  pipeline, %s" % ("batch %d" % b if b else "unbatched"), "",
                                                   y, med(ours, "predict") / y))
    for what in ("fit", "predict"):
        print("%s items/s by turn: hf-span %s; reference %s" % (
            what, ", ".join("%.1f" % x[what] for x in ours), ", ".join("%.1f" % x[what] for x in ref)))
    print("%-28s  %14d  %14d" % ("windows fitted a turn", ours[0]["windows"], ref[0]["windows"]))
    print("%-28s  %14d  %14d" % ("spans predicted, last turn", ours[-1]["spans"], ref[-1]["spans"]))
    print("%-28s  %10.0f MiB  %10.0f MiB" % ("peak RSS", max(x["rss"] for x in ours), max(x["rss"] for x in ref)))
    print("goal: ratio >= 1 for fit and predict: %s" % ("met" if ok else "MISSED"))


if __name__ == "__main__":
    main()
