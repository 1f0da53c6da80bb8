"""A stand-in for the transformers library, for the tests of the
hf-text-classification trainer where transformers is not installed: the
few calls the trainer makes, with transformers' signatures and behaviour
(from_pretrained reads a directory or the cache, honours
local_files_only and HF_HUB_OFFLINE, raises OSError for a model it cannot
find; save_pretrained writes config.json and the weights), over a tiny
torch encoder. Not the library: tests that use it say so."""

import json
import os
import re
import types

import torch

from . import pytorch_utils

__version__ = "4.44.0+standin"

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "pytorch_model.bin"


def _hub_dir(name):
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return os.path.join(os.environ.get("HF_HUB_CACHE") or os.path.join(home, "hub"),
                        "models--" + name.replace("/", "--"))


def _resolve(name, local_files_only):
    """The directory of name: itself, else its snapshot in the cache; else
    OSError, as transformers raises it."""
    if os.path.isdir(name):
        return name
    snap = os.path.join(_hub_dir(name), "snapshots", "main")
    if os.path.isdir(snap):
        return snap
    if local_files_only or os.environ.get("HF_HUB_OFFLINE") == "1":
        raise OSError("We couldn't connect to the hub to load the files, and couldn't find them in the cached "
                      "files. Check your internet connection or see how to run the library in offline mode.")
    raise OSError("%s is not a local folder and is not a valid model identifier listed on the hub" % name)


class PretrainedConfig:
    def __init__(self, **kw):
        self.model_type = kw.pop("model_type", "bert")
        self.vocab_size = kw.pop("vocab_size", 100)
        self.hidden_size = kw.pop("hidden_size", 16)
        self.max_position_embeddings = kw.pop("max_position_embeddings", 64)
        self.pad_token_id = kw.pop("pad_token_id", None)
        self.num_labels = kw.pop("num_labels", 2)
        self.problem_type = kw.pop("problem_type", None)
        id2label = kw.pop("id2label", None) or {i: "LABEL_%d" % i for i in range(self.num_labels)}
        self.id2label = {int(k): v for k, v in id2label.items()}
        self.num_labels = len(self.id2label)
        self.label2id = kw.pop("label2id", None) or {v: k for k, v in self.id2label.items()}
        for k, v in kw.items():
            setattr(self, k, v)

    def to_dict(self):
        d = dict(self.__dict__)
        d["id2label"] = {str(k): v for k, v in self.id2label.items()}
        return d

    def save_pretrained(self, save_directory):
        os.makedirs(save_directory, exist_ok=True)
        with open(os.path.join(save_directory, CONFIG_NAME), "w") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)


class AutoConfig:
    @staticmethod
    def from_pretrained(pretrained_model_name_or_path, local_files_only=False, **kwargs):
        d = _resolve(pretrained_model_name_or_path, local_files_only)
        p = os.path.join(d, CONFIG_NAME)
        if not os.path.exists(p):
            raise OSError("%s does not appear to have a file named config.json" % d)
        with open(p) as f:
            obj = json.load(f)
        obj.update(kwargs)
        if "num_labels" in kwargs and "id2label" not in kwargs:
            obj.pop("id2label", None)
            obj.pop("label2id", None)
        return PretrainedConfig(**obj)


class WordTokenizer:
    """A WordPiece-like tokenizer of whole words over vocab.txt."""

    def __init__(self, vocab, model_max_length=512):
        self.vocab = vocab
        self.index = {w: i for i, w in enumerate(vocab)}
        self.pad_token, self.unk_token, self.eos_token = "[PAD]", "[UNK]", None
        self.cls_token, self.sep_token = "[CLS]", "[SEP]"
        self.model_max_length = model_max_length

    @property
    def pad_token_id(self):
        return self.index.get(self.pad_token) if self.pad_token else None

    @property
    def unk_token_id(self):
        return self.index.get(self.unk_token)

    def __call__(self, texts, truncation=False, max_length=None, add_special_tokens=True, **kw):
        out = []
        for t in texts:
            ids = [self.index.get(w, self.unk_token_id) for w in re.findall(r"\w+|[^\w\s]", t.lower())]
            if add_special_tokens:
                ids = [self.index[self.cls_token]] + ids + [self.index[self.sep_token]]
            if truncation and max_length:
                ids = ids[:max_length - 1] + [self.index[self.sep_token]] if len(ids) > max_length else ids
            out.append(ids)
        return {"input_ids": out, "attention_mask": [[1] * len(x) for x in out]}

    def save_pretrained(self, save_directory):
        os.makedirs(save_directory, exist_ok=True)
        with open(os.path.join(save_directory, "vocab.txt"), "w") as f:
            f.write("\n".join(self.vocab) + "\n")
        with open(os.path.join(save_directory, "tokenizer_config.json"), "w") as f:
            json.dump({"model_max_length": self.model_max_length, "tokenizer_class": "BertTokenizer"}, f)
        return (os.path.join(save_directory, "vocab.txt"),)


class AutoTokenizer:
    @staticmethod
    def from_pretrained(pretrained_model_name_or_path, local_files_only=False, **kwargs):
        d = _resolve(pretrained_model_name_or_path, local_files_only)
        p = os.path.join(d, "vocab.txt")
        if not os.path.exists(p):
            raise OSError("Can't load tokenizer for %r: no vocab.txt" % pretrained_model_name_or_path)
        with open(p) as f:
            vocab = [l.rstrip("\n") for l in f if l.strip()]
        return WordTokenizer(vocab)


class Attention(torch.nn.Module):
    def __init__(self, h, conv):
        torch.nn.Module.__init__(self)
        if conv:  # GPT-2 style: one Conv1D for query, key and value
            self.c_attn = pytorch_utils.Conv1D(3 * h, h)
        else:
            self.query = torch.nn.Linear(h, h)
            self.key = torch.nn.Linear(h, h)
            self.value = torch.nn.Linear(h, h)
        self.conv = conv

    def forward(self, x, mask):
        if self.conv:
            q, k, v = self.c_attn(x).chunk(3, dim=-1)
        else:
            q, k, v = self.query(x), self.key(x), self.value(x)
        s = q @ k.transpose(1, 2) / (x.shape[-1] ** 0.5)
        s = s.masked_fill(mask[:, None, :] == 0, -1e4)
        return x + torch.softmax(s, dim=-1) @ v


class TinyModelForSequenceClassification(torch.nn.Module):
    def __init__(self, config):
        torch.nn.Module.__init__(self)
        self.config = config
        h = config.hidden_size
        self.embeddings = torch.nn.Embedding(config.vocab_size, h)
        self.position = torch.nn.Embedding(config.max_position_embeddings, h)
        self.attention = Attention(h, config.model_type == "gpt2")
        self.classifier = torch.nn.Linear(h, config.num_labels)

    def forward(self, input_ids=None, attention_mask=None, **kw):
        if input_ids.shape[1] > self.config.max_position_embeddings:
            raise IndexError("index out of range in self: %d positions" % input_ids.shape[1])
        if input_ids.shape[1] == 0:
            raise RuntimeError("a batch of width 0")
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.embeddings(input_ids) + self.position(pos)[None]
        x = self.attention(x, attention_mask)
        m = attention_mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1)
        return types.SimpleNamespace(logits=self.classifier(pooled))

    def save_pretrained(self, save_directory, **kw):
        os.makedirs(save_directory, exist_ok=True)
        self.config.save_pretrained(save_directory)
        torch.save(self.state_dict(), os.path.join(save_directory, WEIGHTS_NAME))


class AutoModelForSequenceClassification:
    @staticmethod
    def from_config(config, **kwargs):
        return TinyModelForSequenceClassification(config)

    @staticmethod
    def from_pretrained(pretrained_model_name_or_path, config=None, ignore_mismatched_sizes=False,
                        local_files_only=False, torch_dtype=None, dtype=None, **kwargs):
        d = _resolve(pretrained_model_name_or_path, local_files_only)
        if config is None:
            config = AutoConfig.from_pretrained(d, **kwargs)
        model = TinyModelForSequenceClassification(config)
        p = os.path.join(d, WEIGHTS_NAME)
        if not os.path.exists(p):
            raise OSError("%s has no file named %s" % (d, WEIGHTS_NAME))
        state = torch.load(p)
        own = model.state_dict()
        for k, v in list(state.items()):
            if k in own and own[k].shape != v.shape:
                if not ignore_mismatched_sizes:
                    raise RuntimeError("size mismatch for %s" % k)
                del state[k]
        model.load_state_dict(state, strict=False)
        want = dtype if dtype is not None else torch_dtype
        # As transformers 5 does by default, a checkpoint is loaded in its
        # own dtype unless told otherwise: the stand-in's are fp16.
        model.to(want if isinstance(want, torch.dtype) else torch.float16)
        return model
