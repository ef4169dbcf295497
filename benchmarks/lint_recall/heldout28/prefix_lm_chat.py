"""Prefix-LM chat model: system and user turns are read bidirectionally, the assistant reply
causally. The chat template is built from role segments and the per-layer mask arguments travel
as a keyword dict, the way Hugging Face decoder layers receive them.

Source: conventions.md §1 (HF 4-D masks row), §2.9 and §5 item 7
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
VOCAB, DIM, HEADS = 48, 32, 4
BOS, SYS, USR, AST = 1, 2, 3, 4


def apply_chat_template(turns):
    ids, prefix = [BOS], 1
    for role, toks in turns:
        ids += [role] + toks
        if role != AST:
            prefix = len(ids)
    return torch.tensor([ids]), prefix


def prefix_lm_mask(n, prefix):
    i = torch.arange(n)
    causal = i[None, :] <= i[:, None]
    both_in_prefix = (i[:, None] < prefix) & (i[None, :] < prefix)
    return (causal | both_in_prefix)[None, None]


class EagerAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.o_proj = nn.Linear(DIM, DIM)

    def forward(self, hidden, attention_mask=None, output_attentions=False):
        b, t, _ = hidden.shape
        q, k, v = self.qkv(hidden).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        attn_weights = q @ k.transpose(-2, -1) * (DIM // HEADS) ** -0.5
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask  # expect: MC509 prefixlm
        attn_weights = attn_weights.softmax(dim=-1)
        out = self.o_proj((attn_weights @ v).transpose(1, 2).reshape(b, t, DIM))
        return (out, attn_weights) if output_attentions else (out, None)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.attn = EagerAttention()
        self.mlp = nn.Sequential(nn.Linear(DIM, 2 * DIM), nn.GELU(), nn.Linear(2 * DIM, DIM))

    def forward(self, x, **kwargs):
        x = x + self.attn(self.norm1(x), **kwargs)[0]
        return x + self.mlp(self.norm2(x))


class PrefixLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(64, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, input_ids, prefix_len):
        t = input_ids.shape[1]
        x = self.embed(input_ids) + self.pos(torch.arange(t))
        layer_kwargs = {"attention_mask": prefix_lm_mask(t, prefix_len), "output_attentions": False}
        for block in self.blocks:
            x = block(x, **layer_kwargs)
        return self.head(x)


if __name__ == "__main__":
    model = PrefixLM().eval()
    turns = [(SYS, [10, 11, 12]), (USR, [20, 21, 22, 23]), (AST, [30, 31, 32, 33, 34])]
    ids, prefix = apply_chat_template(turns)
    with torch.no_grad():
        logits = model(ids, prefix)
        changed = ids.clone()
        changed[0, -1] = 40  # the last assistant token
        logits2 = model(changed, prefix)
        leak = (logits[0, :-1] - logits2[0, :-1]).abs().max().item()
        moved = ids.clone()
        moved[0, prefix - 1] = 25
        prefix_ok = (model(moved, prefix)[0, 1] - logits[0, 1]).abs().max().item()
    print(f"prefix {prefix}, length {ids.shape[1]}")
    print(f"max change of earlier logits when the last token changes: {leak:.3g}")
    print(f"system position moved by the last prefix token (should be > 0): {prefix_ok:.3g}")
