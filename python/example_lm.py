#!/usr/bin/python3
"""A PyTorch language model to fixformer, untrained (docs/importing.md, "From PyTorch").

    /usr/bin/python3 python/example_lm.py /tmp/lm     # writes /tmp/lm/lm.lua + lm.safetensors
    build/fixformer run /tmp/lm/lm.lua --tokens "5 17 42 8 8 3"

Both print the argmax of each position: PyTorch's here, fixformer's there.
"""
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixformer_export  # noqa: E402


class LM(nn.Module):
    """GPT-style: embedding * sqrt(d) + learned positions, a causal
    nn.TransformerEncoder (pre-norm, gelu, final norm), a head tied to the embedding."""

    def __init__(self, vocab=100, d=64, heads=4, layers=2, max_seq=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos_embed = nn.Embedding(max_seq, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(d), enable_nested_tensor=False)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.embed.weight  # tied
        for e in (self.embed, self.pos_embed):  # GPT-2's initialisation
            nn.init.normal_(e.weight, std=0.02)
        self.d = d

    def forward(self, ids):
        T = ids.shape[1]
        x = self.embed(ids) * math.sqrt(self.d) + self.pos_embed(torch.arange(T))
        mask = nn.Transformer.generate_square_subsequent_mask(T)
        return self.lm_head(self.blocks(x, mask=mask))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "lm-export"
    torch.manual_seed(0)
    model = LM().eval()
    lua = fixformer_export.export(model, out, "lm", arch="decoder-only")
    with torch.no_grad():
        ids = torch.tensor([[5, 17, 42, 8, 8, 3]])
        print("PyTorch argmax:", " ".join(str(int(i)) for i in model(ids).argmax(-1)[0]))
    print(lua)


if __name__ == "__main__":
    main()
