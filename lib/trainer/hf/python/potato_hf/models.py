"""The models: the built-in hashed n-gram model (model=builtin:ngram, torch
alone) and a transformers sequence classifier, fine-tuned whole or with
LoRA through peft. load_model returns either as a Loaded: the module, how
it encodes texts, and how it saves itself beside its tokenizer."""

import importlib
import os
import re
import zlib

from .artifacts import write_json
from .hub import pretrained
from .packages import release
from .spec import (AUTO_MAX_LENGTH_CAP, AUTO_MAX_LENGTH_CAP_CPU, AUTO_MAX_LENGTH_PERCENTILE, EXIT_BAD_SPEC,
                   EXIT_MODEL_UNAVAILABLE, TrainerError, auto_max_length, head_tail, is_builtin, lora_for)

# Files that mean a model directory holds a tokenizer of its own.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                   "vocab.json", "spiece.model", "sentencepiece.bpe.model")
# Files that mean a model directory holds weights; a directory without any
# is built from its config.json with random weights.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack")
# LoRA target modules by config.model_type: the attention's projections,
# as each architecture names them. BERT and the models built like it get
# all three of query, key and value, and, where the model has them (a
# name with a dot matches the end of a module's path), the attention's
# output and the feed-forward layers: every linear layer of the encoder
# but the pooler. On a sentence-transformers checkpoint, whose [CLS] and
# pooler carry little, only query and value at rank 8 barely move the
# encoder in 3 epochs.
BERT_LIKE = ["query", "key", "value"]
BERT_DENSE = ["attention.output.dense", "intermediate.dense", "output.dense"]
LORA_TARGETS = {
    "bert": BERT_LIKE,
    "roberta": BERT_LIKE,
    "xlm-roberta": BERT_LIKE,
    "camembert": BERT_LIKE,
    "electra": BERT_LIKE,
    "albert": ["query", "value"],
    "mpnet": ["q", "v"],
    "distilbert": ["q_lin", "v_lin"],
    "deberta": ["in_proj"],
    "deberta-v2": ["query_proj", "value_proj"],
    "modernbert": ["Wqkv"],
    "gpt2": ["c_attn"],
    "bart": ["q_proj", "v_proj"],
    "mbart": ["q_proj", "v_proj"],
    "t5": ["q", "v"],
    "mt5": ["q", "v"],
    "llama": ["q_proj", "v_proj"],
    "mistral": ["q_proj", "v_proj"],
    "qwen2": ["q_proj", "v_proj"],
    "gemma": ["q_proj", "v_proj"],
    "phi": ["q_proj", "v_proj"],
}
LORA_EXTRA = {mt: BERT_DENSE for mt, t in LORA_TARGETS.items() if t is BERT_LIKE}
# The fallback for another architecture: linear layers whose own name is one
# of these; when none is, every linear layer but the classification head.
LORA_FALLBACK_NAMES = ("query", "value", "q_proj", "v_proj", "q_lin", "v_lin",
                       "c_attn", "Wqkv", "qkv", "query_key_value", "q", "v")
HEAD_NAMES = ("classifier", "score", "pre_classifier", "classification_head")
# The config keys of the dropout of the attention's probabilities, as
# architectures name it; param attention_dropout (0 by default) sets the
# one a model has while it is built, and its saved config keeps its own.
# With it, PyTorch's fused attention (scaled_dot_product_attention) runs
# while training; without it, on a CPU, the probabilities are computed
# whole and a random mask drawn over them, about a quarter of a step of
# all-MiniLM-L6-v2 at max_length 128 (scripts/bench-hf).
ATTENTION_DROPOUT_KEYS = ("attention_probs_dropout_prob", "attention_dropout", "attn_pdrop")


def with_attention_dropout(config, dropout, ev, build):
    """The model build() makes from config, its modules built with the
    attention dropout dropout (param attention_dropout); config and the
    model's config, which is saved, keep the model's own."""
    own = {k: getattr(config, k) for k in ATTENTION_DROPOUT_KEYS if type(getattr(config, k, None)) in (int, float)}
    for k in own:
        setattr(config, k, dropout)
    if any(v != dropout for v in own.values()):
        ev.log("info", "attention dropout %g, not the model's %g (--param attention_dropout=P sets it)"
               % (dropout, max(own.values())))
    model = build()
    for c in {id(config): config, id(model.config): model.config}.values():
        for k, v in own.items():
            setattr(c, k, v)
    return model


class HashTokenizer:
    """The tokenizer of a model directory that has none (a config.json
    alone, as built for a test): lowercased words and punctuation, each
    hashed (CRC-32) into the config's vocabulary, after [CLS] and before
    [SEP]. It needs no file and no download; its settings are saved beside
    the model as hash-tokenizer.json."""

    FORMAT = "potato-hash-tokenizer"
    WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)

    def __init__(self, vocab_size, pad_id=0, unk_id=1, cls_id=2, sep_id=3):
        self.vocab_size = vocab_size
        self.pad_id, self.unk_id, self.cls_id, self.sep_id = pad_id, unk_id, cls_id, sep_id
        self.first = max(pad_id, unk_id, cls_id, sep_id) + 1
        if vocab_size - self.first < 4:
            raise ValueError("vocab_size %d is too small for the fallback tokenizer" % vocab_size)

    def word_id(self, word):
        return self.first + zlib.crc32(word.encode("utf-8")) % (self.vocab_size - self.first)

    def encode(self, text, max_length=None, truncation="head"):
        """[CLS], the words' ids (cut by head_tail to max_length with
        [CLS] and [SEP]; all of them without max_length), [SEP]."""
        ids = [self.word_id(w) for w in self.WORD.findall(text.lower())]
        if max_length is not None:
            ids = head_tail(ids, max(0, max_length - 2), truncation)
        ids = [self.cls_id] + ids + [self.sep_id]
        return ids if max_length is None else ids[:max_length]

    def settings(self):
        return {"format": self.FORMAT, "v": 1, "vocab_size": self.vocab_size, "lowercase": True,
                "pattern": self.WORD.pattern, "hash": "crc32", "pad_id": self.pad_id,
                "unk_id": self.unk_id, "cls_id": self.cls_id, "sep_id": self.sep_id}


def has_tokenizer(model_dir):
    return any(os.path.exists(os.path.join(model_dir, f)) for f in TOKENIZER_FILES)


def has_weights(model_dir):
    try:
        names = os.listdir(model_dir)
    except OSError:
        return False
    return any(n.endswith(WEIGHT_SUFFIXES) for n in names)


class NgramFeaturizer:
    """builtin:ngram's tokenizer: the lowercased words and punctuation of a
    text (the first max_length of them), their word n-grams up to
    word_ngrams and, with char_ngrams, the character n-grams of each word
    with its boundaries; each hashed (CRC-32) into 1..buckets-1. 0 is
    padding; a text with no feature gets the one id 1."""

    WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)

    def __init__(self, buckets, word_ngrams=2, char_ngrams=0, max_length=128, truncation="head"):
        self.buckets, self.word_ngrams, self.char_ngrams = buckets, word_ngrams, char_ngrams
        self.max_length, self.truncation = max_length, truncation

    def _id(self, s):
        return 2 + zlib.crc32(s.encode("utf-8")) % (self.buckets - 2)

    def encode(self, text):
        words = head_tail(self.WORD.findall((text or "").lower()), self.max_length, self.truncation)
        ids = []
        for n in range(1, self.word_ngrams + 1):
            for i in range(len(words) - n + 1):
                ids.append(self._id("w%d:" % n + " ".join(words[i:i + n])))
        if self.char_ngrams:
            k = self.char_ngrams
            for w in words:
                b = "<" + w + ">"
                for i in range(max(1, len(b) - k + 1)):
                    ids.append(self._id("c:" + b[i:i + k]))
        return ids or [1]

    def settings(self):
        return {"format": "potato-ngram-features", "v": 1, "buckets": self.buckets, "lowercase": True,
                "pattern": self.WORD.pattern, "hash": "crc32", "offset": 2, "pad_id": 0, "empty_id": 1,
                "word_ngrams": self.word_ngrams, "char_ngrams": self.char_ngrams,
                "max_length": self.max_length, "truncation": self.truncation}


def ngram_model_class(torch):
    nn = torch.nn

    class NgramClassifier(nn.Module):
        """The mean of the hashed n-grams' embeddings, then a linear head."""

        def __init__(self, buckets, dim, n_labels):
            nn.Module.__init__(self)
            self.embed = nn.Embedding(buckets, dim, padding_idx=0)
            nn.init.uniform_(self.embed.weight, -0.1, 0.1)
            with torch.no_grad():
                self.embed.weight[0].zero_()
            self.dropout = nn.Dropout(0.1)
            self.classifier = nn.Linear(dim, n_labels)

        def forward(self, input_ids, attention_mask):
            m = attention_mask.unsqueeze(-1).to(self.embed.weight.dtype)
            pooled = (self.embed(input_ids) * m).sum(1) / m.sum(1).clamp(min=1.0)
            return self.classifier(self.dropout(pooled))

    return NgramClassifier


class Loaded:
    """A model ready to train: the module, how to encode texts, the padding
    id, how to save it, what it is, for the log and the model card, and
    the parameters of its new classification head (trained at
    head_learning_rate; none for builtin:ngram, trained whole at
    learning_rate)."""

    def __init__(self, model, encode, pad_id, save, card, describe, head=None, placed=False):
        self.model, self.encode, self.pad_id, self.save = model, encode, pad_id, save
        self.card, self.describe, self.head = card, describe, head or []
        # placed: the model is on its device already (a quantized one,
        # which cannot be moved).
        self.placed = placed


def load_builtin(params, labels, multi, torch):
    feats = NgramFeaturizer(params["buckets"], params["word_ngrams"], params["char_ngrams"], params["max_length"],
                            params["truncation"])
    model = ngram_model_class(torch)(params["buckets"], params["embed_dim"], len(labels))

    def save(out_dir):
        os.makedirs(out_dir, exist_ok=True)
        torch.save(model.state_dict(), os.path.join(out_dir, "model.pt"))
        write_json(os.path.join(out_dir, "ngram.json"), dict(
            feats.settings(), embed_dim=params["embed_dim"], num_labels=len(labels),
            id2label={str(i): l for i, l in enumerate(labels)}, label2id={l: i for i, l in enumerate(labels)},
            problem_type="multi_label_classification" if multi else "single_label_classification"))
        return ["model.pt", "ngram.json"]

    n = sum(p.numel() for p in model.parameters())
    return Loaded(model, lambda texts: [feats.encode(t) for t in texts], 0, save,
                  {"base_model": params["model"], "lora": None, "max_length": params["max_length"],
                   "truncation": params["truncation"]},
                  "builtin:ngram: %d buckets of %d dimensions, word n-grams to %d%s, %d parameters" % (
                      params["buckets"], params["embed_dim"], params["word_ngrams"],
                      ", char %d-grams" % params["char_ngrams"] if params["char_ngrams"] else "", n))


def _version(mod):
    return release(getattr(mod, "__version__", "0"))


def _dtype_kw(transformers, torch):
    """Weights in fp32 for training: transformers 5 loads dtype="auto" (the
    checkpoint's fp16 or bf16) by default; before 4.56 the key is torch_dtype."""
    return {"dtype": torch.float32} if _version(transformers) >= (4, 56) else {"torch_dtype": torch.float32}


def clamp_max_length(requested, config, tokenizer_max=None):
    """max_length, at most what the model's position embeddings hold
    (RoBERTa-style models lose two positions to their padding offset) and
    what the tokenizer says: (length, why it was lowered or "")."""
    limit, why = None, ""
    mpe = getattr(config, "max_position_embeddings", None)
    if isinstance(mpe, int) and mpe > 0:
        offset = 2 if getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert") else 0
        limit, why = mpe - offset, "max_position_embeddings %d" % mpe
    if isinstance(tokenizer_max, int) and 0 < tokenizer_max < 1000000 and (limit is None or tokenizer_max < limit):
        limit, why = tokenizer_max, "the tokenizer's model_max_length %d" % tokenizer_max
    if limit is not None and requested > limit:
        return limit, "max_length %d is more than the model's %s: using %d" % (requested, why, limit)
    return requested, ""


def _conv1d_class(transformers):
    try:
        return importlib.import_module(transformers.__name__ + ".pytorch_utils").Conv1D
    except (ImportError, AttributeError):
        return None


def lora_targets(model, config, explicit, torch, conv1d=None):
    """LoRA's target modules and why: the param, else the table when the
    model has those modules (with those of LORA_EXTRA it has), else its
    linear (or GPT-2 Conv1D) layers named like attention projections, else
    every such layer but the head. A target may be a module's name or the
    end of its path (intermediate.dense), as peft matches them. Never
    empty: a model with none is refused."""
    kinds = (torch.nn.Linear,) + ((conv1d,) if conv1d is not None else ())
    # every: the ends of every module's path; layers: the names of the
    # linear layers but the head's, and ends: the ends of their paths.
    every, layers, ends, is_conv = set(), set(), set(), set()
    for name, mod in model.named_modules():
        parts = name.split(".")
        suffixes = {".".join(parts[i:]) for i in range(len(parts))}
        every.update(suffixes)
        if not isinstance(mod, kinds) or any(h in parts for h in HEAD_NAMES):
            continue
        layers.add(parts[-1])
        ends.update(suffixes)
        if conv1d is not None and isinstance(mod, conv1d):
            is_conv.update(suffixes)
    mt = getattr(config, "model_type", "") or "?"
    if explicit:
        absent = [t for t in explicit if t not in every]
        if absent:
            raise TrainerError(EXIT_BAD_SPEC, "bad_spec",
                               "param target_modules: %s has no module named %s; its linear layers are %s"
                               % (mt, ", ".join(absent), ", ".join(sorted(layers)) or "none"))
        targets, why = list(explicit), "param"
    elif mt in LORA_TARGETS and all(t in ends for t in LORA_TARGETS[mt]):
        targets = list(LORA_TARGETS[mt]) + [t for t in LORA_EXTRA.get(mt, []) if t in ends]
        why = "model type " + mt
    elif layers & set(LORA_FALLBACK_NAMES):
        targets, why = sorted(layers & set(LORA_FALLBACK_NAMES)), "attention projections of model type " + mt
    else:
        targets, why = sorted(layers), "every linear layer of model type " + mt
    if not targets:
        raise TrainerError(EXIT_BAD_SPEC, "bad_spec",
                           "LoRA: model type %s has no linear layer to adapt: pass --param target_modules=NAMES "
                           "or --param lora=false" % mt)
    return targets, why, bool(is_conv & set(targets))


class TokenizerCache:
    """The run's transformers tokenizer (or hashing fallback), loaded once,
    and the texts of the train split, whose token lengths set max_length
    when the param is left out (choose_max_length), and the device's type
    (cpu, cuda, mps), which caps it."""
    value = None
    train_texts = ()
    max_length = None
    device_type = "cpu"


def choose_max_length(params, config, lengths, tokenizer_max, ev, device_type="cpu"):
    """max_length: the param's (at most the model's limit, with a warning
    when lowered), or by default auto_max_length of the train split's
    token lengths, at most the device's cap and the model's limit (no
    warning)."""
    if params["max_length"] is not None:
        return clamp_max_length(params["max_length"], config, tokenizer_max)
    cap = AUTO_MAX_LENGTH_CAP_CPU if device_type == "cpu" else AUTO_MAX_LENGTH_CAP
    limit, _ = clamp_max_length(cap, config, tokenizer_max)
    n, pct = auto_max_length(lengths, limit)
    longer = sum(1 for x in lengths if x > n)
    ev.log("info", "max_length %d: the %dth percentile of the token lengths of the train split's %d items is %d, "
           "rounded up to a multiple of 8, at most %d%s%s; %d items are longer and are cut (%s)%s" % (
               n, AUTO_MAX_LENGTH_PERCENTILE, len(lengths), pct, cap, " on the CPU" if device_type == "cpu" else "",
               " and the model's %d" % limit if limit < cap else "", longer,
               "their first quarter and last three quarters kept" if params["truncation"] == "head_tail"
               else "their first tokens kept", " (--param max_length=N sets it)"))
    return n, ""


def load_transformers(params, labels, multi, torch, transformers, peft, env, ev, cache):
    src = params["model"]
    local = os.path.isdir(src)
    kw = {"num_labels": len(labels),
          "id2label": {i: l for i, l in enumerate(labels)},
          "label2id": {l: i for i, l in enumerate(labels)},
          "problem_type": "multi_label_classification" if multi else "single_label_classification"}
    config = pretrained(transformers.AutoConfig.from_pretrained, src, env, **kw)
    random_init = local and not has_weights(src)

    if cache.value is None:
        if local and not has_tokenizer(src):
            if not random_init:
                raise TrainerError(EXIT_MODEL_UNAVAILABLE, "model_unavailable",
                                   "%s holds weights but no tokenizer (none of %s): save the model's tokenizer "
                                   "there with save_pretrained; a pretrained model cannot be trained on other "
                                   "tokens" % (src, ", ".join(TOKENIZER_FILES)))
            pad = config.pad_token_id if getattr(config, "pad_token_id", None) is not None else 0
            unk, cls, sep = [i for i in range(5) if i != pad][:3]
            tok = HashTokenizer(config.vocab_size, pad_id=pad, unk_id=unk, cls_id=cls, sep_id=sep)
            max_len, why = choose_max_length(params, config, [len(tok.encode(t)) for t in cache.train_texts],
                                             None, ev, cache.device_type)
            ev.log("info", "%s has no tokenizer and no weights: using the hashing tokenizer over its %d-word "
                   "vocabulary" % (src, config.vocab_size))

            def encode(texts):
                return [tok.encode(t, max_len, params["truncation"]) for t in texts]

            def save_tok(d):
                write_json(os.path.join(d, "hash-tokenizer.json"), tok.settings())
            cache.value = (encode, tok.pad_id, save_tok, max_len, why, "hash-tokenizer.json")
        else:
            hf_tok = pretrained(transformers.AutoTokenizer.from_pretrained, src, env)
            if hf_tok.pad_token is None:
                hf_tok.pad_token = hf_tok.eos_token or hf_tok.unk_token
                if hf_tok.pad_token is not None:
                    ev.log("info", "the tokenizer of %s has no pad token: batches are padded with %s, which the "
                           "attention mask hides" % (src, hf_tok.pad_token))
            if hf_tok.pad_token is None:
                raise TrainerError(EXIT_BAD_SPEC, "bad_spec", "the tokenizer of %s has no pad, eos or unk token to "
                                   "pad batches with" % src)
            fill = hf_tok.unk_token_id if getattr(hf_tok, "unk_token_id", None) is not None else hf_tok.pad_token_id
            # The special tokens ([CLS], [SEP]) the tokenizer puts around an
            # item's own: those of a probe's ids that are not its own.
            probe = hf_tok(["a"], add_special_tokens=True)["input_ids"][0]
            own = hf_tok(["a"], add_special_tokens=False)["input_ids"][0]
            at = next((i for i in range(len(probe) - len(own) + 1) if list(probe[i:i + len(own)]) == list(own)), 0)
            prefix, suffix = list(probe[:at]), list(probe[at + len(own):])

            def tokens(texts):
                texts = [t if t else " " for t in texts]
                if not texts:
                    return []
                return hf_tok(texts, add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
            max_len, why = choose_max_length(
                params, config, [len(x) + len(prefix) + len(suffix) for x in tokens(cache.train_texts)],
                getattr(hf_tok, "model_max_length", None), ev, cache.device_type)

            def encode(texts):
                # The item's tokens cut by head_tail, between the special tokens.
                budget = max(0, max_len - len(prefix) - len(suffix))
                return [(prefix + head_tail(x, budget, params["truncation"]) + suffix) or [fill] for x in tokens(texts)]
            cache.value = (encode, hf_tok.pad_token_id, hf_tok.save_pretrained, max_len, why, "the model's")
        if cache.value[4]:
            ev.log("warning", cache.value[4])
        cache.max_length = cache.value[3]
    encode, pad_id, save_tok, max_len, _, tok_kind = cache.value
    if getattr(config, "pad_token_id", None) is None:
        config.pad_token_id = pad_id

    def build():
        if random_init:
            m = transformers.AutoModelForSequenceClassification.from_config(config)
            ev.log("info", "%s holds no weights: built from its config with random weights" % src)
            return m
        return pretrained(transformers.AutoModelForSequenceClassification.from_pretrained, src, env,
                          config=config, ignore_mismatched_sizes=True, **_dtype_kw(transformers, torch))
    model = with_attention_dropout(config, params["attention_dropout"], ev, build)
    model.float()
    lora = None
    use_lora, why_lora = lora_for(params["lora"], sum(p.numel() for p in model.parameters()))
    if why_lora:
        ev.log("info", why_lora)
    if use_lora:
        targets, why, conv = lora_targets(model, config, params["target_modules"], torch, _conv1d_class(transformers))
        # The head is new: train all of it (DistilBERT's has two layers,
        # and peft's default saves only "classifier").
        head = [n for n, _ in model.named_children() if n in HEAD_NAMES]
        lkw = dict(task_type=peft.TaskType.SEQ_CLS, r=params["lora_r"], lora_alpha=params["lora_alpha"],
                   lora_dropout=params["lora_dropout"], target_modules=targets, modules_to_save=head or None)
        if conv:
            lkw["fan_in_fan_out"] = True
        model = peft.get_peft_model(model, peft.LoraConfig(**lkw))
        lora = {"r": params["lora_r"], "alpha": params["lora_alpha"], "dropout": params["lora_dropout"],
                "target_modules": targets, "modules_to_save": head, "why": why}
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    # The head's parameters: under LoRA, the trainable ones that are not
    # the adapters' (peft's copies of modules_to_save).
    head_params = [p for n, p in model.named_parameters() if p.requires_grad and (
        "lora_" not in n if lora is not None else n.split(".")[0] in HEAD_NAMES)]

    def save(out_dir):
        os.makedirs(out_dir, exist_ok=True)
        if lora is None:
            model.save_pretrained(out_dir)
        elif params["merge"]:
            # The adapter first, then the base with the adapter merged in:
            # the directory itself loads with from_pretrained alone.
            model.save_pretrained(os.path.join(out_dir, "adapter"))
            config.save_pretrained(os.path.join(out_dir, "adapter"))
            merged = model.merge_and_unload()
            merged.save_pretrained(out_dir)
        else:
            model.save_pretrained(out_dir)
            config.save_pretrained(out_dir)
        save_tok(out_dir)
        if lora is not None and params["merge"]:
            save_tok(os.path.join(out_dir, "adapter"))
        return []

    what = "LoRA on %s (%s)" % (",".join(lora["target_modules"]), lora["why"]) if lora else "full fine-tuning"
    return Loaded(model, encode, pad_id, save,
                  {"base_model": src, "lora": lora, "max_length": max_len, "truncation": params["truncation"],
                   "tokenizer": tok_kind},
                  "%s: %s, %d trainable parameters" % (src, what, n_train), head_params)


def load_model(params, labels, multi, mods, env, ev, cache):
    """The model of params["model"] for one schema (Loaded)."""
    if params.get("loader"):
        return params["loader"](params, labels, multi, mods, env, ev, cache)  # another trainer's (spec.become)
    if is_builtin(params["model"]):
        return load_builtin(params, labels, multi, mods["torch"])
    return load_transformers(params, labels, multi, mods["torch"], mods["transformers"], mods.get("peft"),
                             env, ev, cache)

