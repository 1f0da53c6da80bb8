"""A stand-in for peft, for the tests of the hf-text-classification
trainer where peft is not installed: LoraConfig, TaskType, get_peft_model
and the PeftModel calls the trainer makes, with peft's signatures and
behaviour (unknown target modules refused as peft refuses them, only the
adapters and modules_to_save trainable, save_pretrained writing
adapter_config.json and the adapter's weights, merge_and_unload). Not the
library: tests that use it say so."""

import json
import os

import torch

__version__ = "0.12.0+standin"


class TaskType:
    SEQ_CLS = "SEQ_CLS"


class LoraConfig:
    def __init__(self, task_type=None, r=8, lora_alpha=8, lora_dropout=0.0, target_modules=None,
                 modules_to_save=None, fan_in_fan_out=False, **kw):
        self.task_type, self.r, self.lora_alpha, self.lora_dropout = task_type, r, lora_alpha, lora_dropout
        self.target_modules, self.modules_to_save, self.fan_in_fan_out = target_modules, modules_to_save, fan_in_fan_out
        self.base_model_name_or_path = None


class LoraLayer(torch.nn.Module):
    def __init__(self, base, r, alpha, dropout, fan_in_fan_out):
        torch.nn.Module.__init__(self)
        self.base_layer = base
        w = base.weight
        fin, fout = (w.shape[0], w.shape[1]) if fan_in_fan_out else (w.shape[1], w.shape[0])
        self.lora_A = torch.nn.Linear(fin, r, bias=False)
        self.lora_B = torch.nn.Linear(r, fout, bias=False)
        torch.nn.init.zeros_(self.lora_B.weight)
        self.scale = alpha / r
        self.dropout = torch.nn.Dropout(dropout)
        self.fan_in_fan_out = fan_in_fan_out

    def forward(self, x):
        return self.base_layer(x) + self.lora_B(self.lora_A(self.dropout(x))) * self.scale

    def merged(self):
        delta = (self.lora_B.weight @ self.lora_A.weight) * self.scale
        with torch.no_grad():
            self.base_layer.weight += delta.T if self.fan_in_fan_out else delta
        return self.base_layer


class PeftModel(torch.nn.Module):
    def __init__(self, model, config):
        torch.nn.Module.__init__(self)
        self.base_model = model
        self.peft_config = {"default": config}

    def forward(self, *a, **kw):
        return self.base_model(*a, **kw)

    def save_pretrained(self, save_directory, **kw):
        os.makedirs(save_directory, exist_ok=True)
        cfg = self.peft_config["default"]
        with open(os.path.join(save_directory, "adapter_config.json"), "w") as f:
            json.dump({k: v for k, v in cfg.__dict__.items()}, f, indent=2, sort_keys=True)
        state = {k: v for k, v in self.base_model.state_dict().items()
                 if "lora_" in k or any(k.startswith(m + ".") for m in cfg.modules_to_save or [])}
        torch.save(state, os.path.join(save_directory, "adapter_model.bin"))

    def merge_and_unload(self):
        model = self.base_model
        for name, mod in list(model.named_modules()):
            for cname, child in list(mod.named_children()):
                if isinstance(child, LoraLayer):
                    setattr(mod, cname, child.merged())
        return model


def _targeted(path, targets):
    """Whether a module's path is one of targets or ends with "." and one,
    as peft matches a list of target modules."""
    return any(path == t or path.endswith("." + t) for t in targets)


def get_peft_model(model, peft_config):
    targets = set(peft_config.target_modules or [])
    found = set()
    for name, mod in list(model.named_modules()):
        for cname, child in list(mod.named_children()):
            path = name + "." + cname if name else cname
            if _targeted(path, targets) and not isinstance(child, LoraLayer):
                setattr(mod, cname, LoraLayer(child, peft_config.r, peft_config.lora_alpha,
                                              peft_config.lora_dropout, peft_config.fan_in_fan_out))
                found.add(cname)
    if not found:
        raise ValueError("Target modules %s not found in the base model. Please check the target modules "
                         "and try again." % sorted(targets))
    for n, p in model.named_parameters():
        head = any(n.startswith(m + ".") for m in peft_config.modules_to_save or [])
        p.requires_grad = "lora_" in n or head
    peft_config.base_model_name_or_path = getattr(model.config, "_name_or_path", None)
    return PeftModel(model, peft_config)
