"""transformers.pytorch_utils.Conv1D, as GPT-2 uses it: a linear layer
whose weight is stored transposed (in_features, out_features)."""

import torch


class Conv1D(torch.nn.Module):
    def __init__(self, nf, nx):
        torch.nn.Module.__init__(self)
        self.nf = nf
        self.weight = torch.nn.Parameter(torch.empty(nx, nf))
        self.bias = torch.nn.Parameter(torch.zeros(nf))
        torch.nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)
