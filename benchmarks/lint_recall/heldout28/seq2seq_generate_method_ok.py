"""Small encoder-decoder that turns spoken-command tokens into action tokens, with a greedy
`generate()` method on the module: the source is encoded once, the decoder re-reads the growing
target every step and cross-attends to the padded source.

Source: conventions.md §2.6 and §5 item 6, lucidrains/x-transformers#172
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
VOCAB, DIM, HEADS = 32, 32, 4
PAD, BOS, EOS = 0, 1, 2


def split_heads(x):
    b, t, _ = x.shape
    return x.view(b, t, HEADS, DIM // HEADS).transpose(1, 2)


def merge_heads(x):
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


class CommandTranslator(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_emb = nn.Embedding(VOCAB, DIM, padding_idx=PAD)
        self.tgt_emb = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(32, DIM)
        self.enc_qkv = nn.Linear(DIM, 3 * DIM)
        self.dec_qkv = nn.Linear(DIM, 3 * DIM)
        self.cross_q = nn.Linear(DIM, DIM)
        self.cross_kv = nn.Linear(DIM, 2 * DIM)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def encode(self, src):
        src_keep = src != PAD
        x = self.src_emb(src) + self.pos(torch.arange(src.shape[1]))
        q, k, v = map(split_heads, self.enc_qkv(x).chunk(3, dim=-1))
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=src_keep[:, None, None, :])
        return self.norm(x + merge_heads(h)), src_keep

    def decode(self, tgt, memory, src_keep):
        y = self.tgt_emb(tgt) + self.pos(torch.arange(tgt.shape[1]))
        q, k, v = map(split_heads, self.dec_qkv(y).chunk(3, dim=-1))
        y = y + merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True))
        mk, mv = map(split_heads, self.cross_kv(memory).chunk(2, dim=-1))
        c = F.scaled_dot_product_attention(split_heads(self.cross_q(y)), mk, mv, attn_mask=src_keep[:, None, None, :])
        return self.head(self.norm(y + merge_heads(c)))

    @torch.no_grad()
    def generate(self, src, max_len=6):
        memory, src_keep = self.encode(src)
        tgt = torch.full((src.shape[0], 1), BOS)
        done = torch.zeros(src.shape[0], dtype=torch.bool)
        for _ in range(max_len):
            logits = self.decode(tgt, memory, src_keep)[:, -1]
            nxt = logits.argmax(-1).masked_fill(done, PAD)
            tgt = torch.cat([tgt, nxt[:, None]], dim=1)
            done |= nxt == EOS
            if done.all():
                break
        return tgt, logits


if __name__ == "__main__":
    model = CommandTranslator().eval()
    commands = [[7, 8, 9, 10], [11, 12], [13, 14, 15], [16]]
    src = torch.tensor([c + [PAD] * (4 - len(c)) for c in commands])
    out, last = model.generate(src)
    print("batched:", out.tolist())
    worst = 0.0
    with torch.no_grad():
        memory, keep = model.encode(src)
        for i, c in enumerate(commands):
            mem_alone, _ = model.encode(torch.tensor([c]))
            worst = max(worst, (memory[i, : len(c)] - mem_alone[0]).abs().max().item())
    print(f"encoder states, batched vs alone, max difference on real tokens: {worst:.3g}")
    for c in commands:
        print("alone:  ", model.generate(torch.tensor([c]))[0].tolist())
