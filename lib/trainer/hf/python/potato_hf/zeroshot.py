"""hf-llm-classification's mode=zero-shot: prelabels before there are
labels. An instruction-tuned decoder is asked, through its chat template,
which of the schema's labels a text has, the schema's description and
labels in the instruction; each label is scored by the probability the
model gives its name as the whole answer (the sum of its tokens' log
probabilities), and a nominal schema's scores are made probabilities by a
softmax over its labels; a multilabel schema asks of each label whether
the text has it, its probability P(yes) / (P(yes) + P(no)). A small
model favours some answers whatever the text; each schema's scores are
calibrated against that bias (contextual calibration, Zhao et al., 2021,
"Calibrate before use"): the same prompt is scored with texts that carry
no content ("N/A", "", "[MASK]"), and each label's mean log probability
there is taken from its score on every text (a multilabel schema's
log-odds of yes likewise) before the softmax. Nothing is
trained and no model is saved: predictions.jsonl goes through the same
write-back, calibration and promotion gate as a fine-tune's."""

import json
import math
import os
import time

from . import ordinal
from .data import chunks, examples, label_order, prediction_row, read_bundle
from .packages import import_packages
from .spec import TrainerError, EXIT_BAD_SPEC, head_tail

INSTRUCTION = ("You label texts for an annotation project. {what}Answer with exactly one of these labels and "
               "nothing else: {labels}.")
INSTRUCTION_MULTI = ("You label texts for an annotation project. {what}Does the text have the label \"{label}\"? "
                     "Answer yes or no.")
# Texts without content, whose answers measure the model's bias.
CONTENT_FREE = ("N/A", "", "[MASK]")
# The text's tokens in a prompt, at most (head_tail keeps its head and tail).
DEFAULT_TEXT_TOKENS = 256
BATCH = 8


def schema_what(schema, custom):
    """The schema's description for the instruction: the prompt param, else
    its description, else its name."""
    d = (custom or schema.get("description") or "").strip()
    if not d:
        d = "The question is: %s." % schema["name"]
    return d + ("" if d.endswith((".", "?", "!")) else ".") + " "


def build_prompt(tok, system, text):
    """The prompt's ids up to the answer: the chat template where the
    tokenizer has one, else plain text."""
    if getattr(tok, "chat_template", None):
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": text}]
        s = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return tok(s, add_special_tokens=False)["input_ids"]
    return tok(system + "\n\nText: " + text + "\nAnswer:", add_special_tokens=True)["input_ids"]


def answer_ids(tok, label, chat):
    return tok((label if chat else " " + label), add_special_tokens=False)["input_ids"]


def score_batch(torch, model, device, pairs, pad_id):
    """The log probability of each answer after its prompt: pairs of
    (prompt ids, answer ids), one forward pass for all, right-padded."""
    width = max(len(p) + len(a) for p, a in pairs)
    ids = torch.full((len(pairs), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(pairs), width), dtype=torch.long)
    for i, (p, a) in enumerate(pairs):
        seq = p + a
        ids[i, :len(seq)] = torch.tensor(seq)
        att[i, :len(seq)] = 1
    with torch.inference_mode():
        logits = model(input_ids=ids.to(device), attention_mask=att.to(device)).logits.float()
        logp = torch.log_softmax(logits, dim=-1).cpu()
    out = []
    for i, (p, a) in enumerate(pairs):
        out.append(sum(float(logp[i, len(p) - 1 + j, t]) for j, t in enumerate(a)))
    return out


def label_scores(torch, model, device, tok, chat, pad_id, bs, what_s, labels, text):
    """Each label's log probability as the answer for text (one prompt)."""
    p = build_prompt(tok, INSTRUCTION.format(what=what_s, labels=", ".join(labels)), text)
    sc = []
    for i in range(0, len(labels), bs):
        sc += score_batch(torch, model, device, [(p, answer_ids(tok, l, chat)) for l in labels[i:i + bs]], pad_id)
    return sc


def yes_log_odds(torch, model, device, tok, chat, pad_id, what_s, labels, text):
    """Each label's log-odds of yes against no for text."""
    out = []
    for l in labels:
        p = build_prompt(tok, INSTRUCTION_MULTI.format(what=what_s, label=l), text)
        yes, no = score_batch(torch, model, device, [(p, answer_ids(tok, "yes", chat)),
                                                     (p, answer_ids(tok, "no", chat))], pad_id)
        out.append(yes - no)
    return out


def softmax(xs):
    top = max(xs)
    ex = [math.exp(x - top) for x in xs]
    return [x / sum(ex) for x in ex]


def zero_shot(spec, params, ev, stop, env, torch, device):
    from .hub import pretrained
    from .llm import RUN, model_facts, resolve_model
    from .models import _dtype_kw
    transformers, = import_packages(("transformers",), "for mode=zero-shot")
    ev.status("loading", "reading the bundle")
    manifest, splits = read_bundle(spec["bundle_dir"])
    src, gguf, what = resolve_model(params["model"], env)
    gkw = {"gguf_file": gguf} if gguf else {}
    _, lic, _ = model_facts(params["model"], env)
    if lic:
        ev.log("info", "%s: licence %s, as its model card says" % (what, lic))
    tok = pretrained(transformers.AutoTokenizer.from_pretrained, src, env, **gkw)
    chat = bool(getattr(tok, "chat_template", None))
    if not chat:
        ev.log("warning", "%s has no chat template: prompting it with plain text; an instruction-tuned model "
               "answers better" % src)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    dkw = _dtype_kw(transformers, torch)
    if device.type == "cuda" and RUN["precision"] in ("bf16", "fp16"):
        dkw = {k: torch.bfloat16 if RUN["precision"] == "bf16" else torch.float16 for k in dkw}
    t0 = time.time()
    model = pretrained(transformers.AutoModelForCausalLM.from_pretrained, src, env, **dict(gkw, **dkw))
    model.to(device).eval()
    ev.log("info", "zero-shot with %s (%s, %.0f million parameters): each label scored by the probability of "
           "its name as the answer; loaded in %.0f s" % (src, what, sum(p.numel() for p in model.parameters()) / 1e6,
                                                        time.time() - t0))
    budget = params["max_length"] or DEFAULT_TEXT_TOKENS
    workdir = spec["workdir"]
    os.makedirs(workdir, exist_ok=True)
    pred_path = os.path.join(workdir, "predictions.jsonl")
    tmp = pred_path + ".tmp"
    metrics, orders, n_pred, n_items, t_pred = {}, {}, 0, 0, time.time()
    bs = params["batch_size"]
    todo = [r for split in sorted(splits) if split != "train" for r in splits[split]]
    total = len(todo) * len(spec["schemas"])
    try:
        with open(tmp, "w", encoding="utf-8") as pf:
            for s in spec["schemas"]:
                multi, ordered = s["kind"] == "multilabel", ordinal.is_ordinal(s)
                labels = label_order(s, manifest, splits.get("train", []))
                if len(labels) < 2 and not multi:
                    raise TrainerError(EXIT_BAD_SPEC, "validation_failed",
                                       "schema %s has %d labels: zero-shot needs 2 or more" % (s["name"], len(labels)))
                orders[s["name"]] = labels
                what_s = schema_what(s, params["prompt"])
                ev.status("predicting", "prompting for %s" % s["name"])
                gold = {iid: y for iid, _, y in examples(splits.get("val", []), s, labels)}
                # The model's bias: its answers to texts without content.
                if multi:
                    cf = [yes_log_odds(torch, model, device, tok, chat, pad_id, what_s, labels, t) for t in CONTENT_FREE]
                else:
                    cf = [label_scores(torch, model, device, tok, chat, pad_id, bs, what_s, labels, t)
                          for t in CONTENT_FREE]
                bias = [sum(c[i] for c in cf) / len(cf) for i in range(len(labels))]
                ev.log("info", "zero-shot %s: the bias its answers are calibrated against, from texts without "
                       "content: %s" % (s["name"], ", ".join("%s %+.2f" % (l, b) for l, b in zip(labels, bias))))
                correct = n_val = 0
                for rows in chunks(todo, 256):
                    for r in rows:
                        stop.check()
                        ids = tok(r["text"] or " ", add_special_tokens=False)["input_ids"]
                        text = tok.decode(head_tail(ids, budget, params["truncation"]))
                        if multi:
                            odds = yes_log_odds(torch, model, device, tok, chat, pad_id, what_s, labels, text)
                            probs = [1.0 / (1.0 + math.exp(b - o)) for o, b in zip(odds, bias)]
                        else:
                            sc = label_scores(torch, model, device, tok, chat, pad_id, bs, what_s, labels, text)
                            probs = softmax([x - b for x, b in zip(sc, bias)])
                        if ordered:
                            # A likert scale's points are scored as a radio
                            # schema's labels; the prediction is the median
                            # point of their probabilities, as a fine-tuned
                            # run's is (ordinal.py).
                            cum = [sum(probs[k + 1:]) for k in range(len(probs) - 1)]
                            row = ordinal.prediction_row(r["instance_id"], s["name"], cum, labels)
                        else:
                            row = prediction_row(r["instance_id"], s["name"], probs, labels, multi,
                                                 params["threshold"])
                        pf.write(json.dumps(row, separators=(",", ":"), ensure_ascii=False) + "\n")
                        n_pred += 1
                        n_items += 1
                        if r["instance_id"] in gold:
                            y = gold[r["instance_id"]]
                            n_val += 1
                            if multi:
                                correct += int([int(q >= params["threshold"]) for q in probs] == list(y))
                            elif ordered:
                                correct += int(labels.index(row["payload"]["label"]) == int(sum(y)))
                            else:
                                correct += int(max(range(len(probs)), key=probs.__getitem__) == y)
                        if n_items % 10 == 0 or n_items == total:
                            ev.progress("predict", n_items, total)
                if n_val:
                    metrics[s["name"] + "/val_accuracy"] = correct / float(n_val)
            pf.flush()
            os.fsync(pf.fileno())
        stop.check()
        os.replace(tmp, pred_path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    metrics["predict_items_per_s"] = n_items / max(time.time() - t_pred, 1e-9)
    metrics["zero_shot"] = 1
    ev.result(metrics, orders, "predictions.jsonl", n_pred, precision=RUN["precision"], device=RUN["device"])
