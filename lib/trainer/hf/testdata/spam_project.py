#!/usr/bin/env python3
"""Writes a SpamAssassin-like Potato project: synthetic emails (a subject
and a body), spam or ham, one annotator's labels, and config.yaml.

    python3 spam_project.py DIR [--items 3000] [--labelled 2400] [--seed 1]
                            [--topics] [--model-training YAML]

Ham reads like the mailing lists of the SpamAssassin corpus (patches,
builds, meetings), spam like its offers; each email also carries common
words, a few words of the other class, and 1.5% of the labels are flipped,
so a good model stays below 100%. With --topics every email also has one
or two of four topics, labelled in a multiselect schema "topics". The same
arguments always write the same project. Standard library only."""

import argparse
import json
import os
import random

COMMON = ("the a to of and in is it you that for on with this be are as at have was from "
          "or not but by will all can your we my if me so just about more what when one "
          "get there out up do some time like how our new now know see here which make "
          "think people also any only well way back them good who their would could over "
          "very then these need day want because look first much go right even work take "
          "please let week next still last message email mail list").split()
HAM = ("patch kernel build compile release cvs rpm config bug fix thread wrote regards "
       "attached version error install package mailing debian redhat script server file "
       "module perl python test commit branch source code library function update upgrade "
       "meeting tomorrow agenda notes review discussion question answer documentation "
       "manual header filter rule score razor procmail exmh spamassassin sourceforge "
       "developer log trace crash segfault directory path makefile gcc glibc").split()
SPAM = ("free offer click money cash credit guaranteed winner viagra mortgage rates "
        "unsubscribe limited act income investment loan prize deal cheap discount order "
        "save million dollars opportunity bonus casino pills weight loss refinance "
        "approved instant earn profit amazing exclusive urgent congratulations claim "
        "selected lowest satisfaction trial billion rolex replica pharmacy").split()
SPAM_MARKS = ("!", "!!!", "$", "$$$", "100%", "FREE", "NOW")
TOPICS = {
    "finance": "bank account payment invoice price stock market fund tax budget".split(),
    "health": "doctor health diet medicine clinic sleep fitness vitamin body care".split(),
    "software": "linux software release compiler driver binary terminal shell".split(),
    "travel": "flight hotel trip airport ticket travel beach visa luggage tour".split(),
}
SUBJ_HAM = ("Re: {} in {}", "[{}] {} question", "Re: [{}] {}", "{} for {}")
SUBJ_SPAM = ("{} {} inside", "Get your {} {}", "{} - {} today", "RE: your {} {}")


def email(rng, spam, topics):
    own, other = (SPAM, HAM) if spam else (HAM, SPAM)
    hard = rng.random() < 0.06
    f = rng.uniform(0.0, 0.04) if hard else rng.uniform(0.06, 0.25)
    n = rng.randint(25, 110)
    words = []
    for _ in range(n):
        x = rng.random()
        if x < f:
            words.append(rng.choice(own))
        elif x < f + 0.03:
            words.append(rng.choice(other))
        elif topics and x < f + 0.10:
            words.append(rng.choice(TOPICS[rng.choice(topics)]))
        else:
            words.append(rng.choice(COMMON))
    if spam and rng.random() < 0.5:
        words.insert(rng.randrange(len(words) + 1), rng.choice(SPAM_MARKS))
    subj = rng.choice(SUBJ_SPAM if spam else SUBJ_HAM).format(rng.choice(own), rng.choice(COMMON))
    return "Subject: %s\n\n%s" % (subj, " ".join(words))


def write(dir, items=3000, labelled=2400, seed=1, topics=False, model_training=None):
    rng = random.Random(seed)
    os.makedirs(os.path.join(dir, "data"), exist_ok=True)
    os.makedirs(os.path.join(dir, "annotation_output", "ann"), exist_ok=True)
    state, order = {}, []
    with open(os.path.join(dir, "data", "emails.jsonl"), "w", encoding="utf-8") as f:
        for i in range(1, items + 1):
            spam = rng.random() < 0.35
            tops = sorted(rng.sample(sorted(TOPICS), rng.choice((1, 1, 2)))) if topics else []
            text = email(rng, spam, tops)
            iid = "e%d" % i
            f.write(json.dumps({"id": iid, "text": text}) + "\n")
            if i <= labelled:
                label = "spam" if spam else "ham"
                if rng.random() < 0.015:
                    label = "ham" if spam else "spam"
                values = [[{"schema": "spam", "name": label}, "true"]]
                values += [[{"schema": "topics", "name": t}, "true"] for t in tops]
                state[iid] = values
                order.append(iid)
    with open(os.path.join(dir, "annotation_output", "ann", "user_state.json"), "w") as f:
        json.dump({"user_id": "ann", "instance_id_ordering": order, "instance_id_to_label_to_value": state}, f)
    schemes = '  - {annotation_type: radio, name: spam, labels: [spam, ham]}\n'
    if topics:
        schemes += '  - {annotation_type: multiselect, name: topics, labels: [%s]}\n' % ", ".join(sorted(TOPICS))
    mt = model_training if model_training is not None else (
        "model_training:\n  enabled: true\n  grace_seconds: 2\n"
        "  writeback:\n    schemas: [spam]\n    include_unlabeled: true\n    min_confidence: 0.5\n")
    cfg = os.path.join(dir, "config.yaml")
    with open(cfg, "w") as f:
        f.write('annotation_task_name: "Spam Filter"\ntask_dir: "."\ndata_files: ["data/emails.jsonl"]\n'
                'item_properties: {id_key: id, text_key: text}\noutput_annotation_dir: annotation_output\n'
                'annotation_schemes:\n' + schemes + mt)
    return cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--items", type=int, default=3000)
    ap.add_argument("--labelled", type=int, default=2400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--topics", action="store_true")
    ap.add_argument("--model-training", help="the config's model_training block, instead of the default")
    a = ap.parse_args()
    print(write(a.dir, a.items, a.labelled, a.seed, a.topics, a.model_training))


if __name__ == "__main__":
    main()
