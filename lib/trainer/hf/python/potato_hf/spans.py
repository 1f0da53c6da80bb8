"""hf-span's data: a span schema's spans as BIO tags of a fast tokenizer's
tokens, and tags back to spans, in the characters of the item's text as
Potato displays it (display_text; Python's str: code points), through the
tokenizer's offset mapping. Plain Python: no torch.

The text. Potato 2.12 counts a span's start and end in the characters of
the text its annotation page renders, not of the data file's string: its
spaces and tabs run together, the ends trimmed, then read as HTML, so that
an entity (&lt; &amp;) is the one character it stands for and a tag
nothing (its span_text.instance_dom_text). The annotators' spans are in
those characters, and Potato highlights a prelabel's there: the trainer
learns and predicts on display_text of each item, never the raw string.

Overlapping spans. A token carries one tag, so where the spans of an item
overlap, learn_spans keeps the one that starts first (the longer of two
that start together, then the first label in the schema's order) and
drops each span that overlaps one kept; the run's log counts them. The
spans predicted never overlap.

Long items. An item longer than a window (max_length tokens, special
tokens included) is cut into windows that overlap by stride tokens
(the tokenizer's return_overflowing_tokens); every window is learnt, and
a token predicted in several windows takes the tags' probabilities of the
window where it is farthest from an edge."""

import re
from html.parser import HTMLParser

# A token outside every span; the others are B-LABEL and I-LABEL.
OUTSIDE = "O"
# The label of a token a loss ignores (special tokens, padding).
IGNORE = -100


def tag_names(labels):
    """The model's tags: O, then B- and I- of each label in order."""
    out = [OUTSIDE]
    for l in labels:
        out += ["B-" + l, "I-" + l]
    return out


def span_label(span):
    """A span's label: its name (Potato's), else its label."""
    if not isinstance(span, dict):
        return None
    l = span.get("name") or span.get("label")
    return l if isinstance(l, str) and l else None


def learn_spans(spans, labels, text_len):
    """The spans of a target that the tags learn: (start, end, label) with
    0 <= start < end <= text_len and a label of labels, overlapping ones
    resolved as the module says; and how many were dropped for overlap."""
    order = {l: i for i, l in enumerate(labels)}
    ok = []
    for s in spans or []:
        l = span_label(s)
        try:
            a, b = int(s["start"]), int(s["end"])
        except (KeyError, TypeError, ValueError):
            continue
        if l in order and 0 <= a < b <= text_len:
            ok.append((a, b, l))
    ok = sorted(set(ok), key=lambda x: (x[0], -(x[1] - x[0]), order[x[2]]))
    kept, dropped = [], 0
    for a, b, l in ok:
        if kept and a < kept[-1][1]:
            dropped += 1
            continue
        kept.append((a, b, l))
    return kept, dropped


def token_tags(offsets, spans, tag_index, text):
    """The tag index of each token of a window from its (start, end)
    character offsets in text: IGNORE for a special token (start == end),
    B- for the first token of a span (the one its start falls in, or the
    first after it when nothing but spaces come between), I- for the
    span's other tokens, O for the others. spans are learn_spans'. A token
    that straddles a span's end is in it: a span ends with the last token
    it touches. A window that starts inside a span starts it with I-."""
    out = []
    k = 0
    for a, b in offsets:
        if a == b:
            out.append(IGNORE)
            continue
        while k < len(spans) and spans[k][1] <= a:
            k += 1
        if k < len(spans) and spans[k][0] < b:
            s, _, l = spans[k]
            first = a <= s or not text[s:a].strip()
            out.append(tag_index[("B-" if first else "I-") + l])
        else:
            out.append(tag_index[OUTSIDE])
    return out


def merge_windows(windows):
    """One item's tokens from its windows: windows is a list of (offsets,
    probs), probs each token's probabilities of the tags (None for a
    special token). Returns [(start, end, probs)] in text order, each
    token once, with the probabilities of the window where it is farthest
    from an edge."""
    best = {}
    for offsets, probs in windows:
        real = [i for i, (a, b) in enumerate(offsets) if a != b]
        n = len(real)
        for rank, i in enumerate(real):
            key = tuple(offsets[i])
            depth = min(rank, n - 1 - rank)
            if key not in best or depth > best[key][0]:
                best[key] = (depth, probs[i])
    return [(a, b, best[(a, b)][1]) for a, b in sorted(best)]


def decode(tokens, tags):
    """Spans from an item's tokens (merge_windows) and the model's tags:
    each token's tag is its most probable one. A span is a B-LABEL token
    (or an I-LABEL one after a token of another tag) and the I-LABEL
    tokens after it; it runs from its first token's start to its last
    token's end. Returns [{start, end, label, confidence}] in text order,
    confidence the lowest, over the span's tokens, of the probability of
    the token's tag, and the item's confidence: the lowest, over all its
    tokens, of the probability of the tag chosen (1.0 for an item of no
    tokens)."""
    out, cur = [], None
    item_conf = 1.0
    for a, b, p in tokens:
        best = max(range(len(p)), key=lambda i: p[i])
        conf = float(p[best])
        item_conf = min(item_conf, conf)
        tag = tags[best]
        if tag == OUTSIDE:
            cur = None
            continue
        kind, label = tag[:2], tag[2:]
        if kind == "I-" and cur is not None and cur["label"] == label:
            cur["end"] = b
            cur["confidence"] = min(cur["confidence"], conf)
            continue
        cur = {"start": a, "end": b, "label": label, "confidence": conf}
        out.append(cur)
    for s in out:
        s["confidence"] = float("%.6g" % s["confidence"])
    return out, item_conf


def prediction_row(instance_id, schema_name, spans, item_conf):
    """One line of predictions.jsonl for a span schema: the payload is the
    list of spans, as Potato 2.12 renders a span pre-annotation ({start,
    end, label, confidence}, end exclusive, in the characters of the
    item's text); confidence is the item's (decode)."""
    return {"instance_id": instance_id, "schema_name": schema_name, "payload": spans,
            "confidence": float(item_conf)}


_CONTROL = re.compile(r"[\x00-\x1F\x7F]")
_HSPACE = re.compile(r"[ \t]+")


class _Text(HTMLParser):
    def __init__(self):
        HTMLParser.__init__(self, convert_charrefs=True)
        self.parts = []

    def handle_data(self, data):
        self.parts.append(data)


def display_text(text):
    """The text of an item as Potato 2.12's annotation page holds it, whose
    characters its span offsets count: control characters but newline
    removed, runs of spaces and tabs one space, the ends trimmed
    (normalize_display_text), then its text content read as HTML
    (markup_text): entities decoded, tags dropped. Potato sanitizes the
    HTML before it reads it; a tag its sanitizer escapes rather than keeps
    would show as text there and not here."""
    text = _CONTROL.sub(lambda m: m.group() if m.group() == "\n" else "", text or "")
    text = _HSPACE.sub(" ", text).strip()
    p = _Text()
    p.feed(text)
    p.close()
    return "".join(p.parts)
