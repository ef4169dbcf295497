"""MSA Transformer-style row and column attention for zero-shot variant effect
prediction: tied row attention over the alignment, column attention over the
sequences, a masked-token head and a wild-type-marginal score for each mutant.

The alignment batch converter pads alignments to a common depth and width and
returns an int64 ``attention_mask`` (1 = residue or gap token, 0 = padding).

Source: conventions.md section 1 (Hugging Face attention_mask row), section 2.4,
section 5 item 7.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = ["<pad>", "<cls>", "<mask>"] + list("ACDEFGHIKLMNPQRSTVWY-")
PAD_IDX, CLS_IDX, MASK_IDX = 0, 1, 2


class MSABatchConverter:
    def __init__(self):
        self.tok_to_idx = {t: i for i, t in enumerate(TOKENS)}

    def __call__(self, alignments):
        depth = max(len(a) for a in alignments)
        width = max(len(a[0]) for a in alignments) + 1
        tokens = torch.full((len(alignments), depth, width), PAD_IDX, dtype=torch.long)
        for b, msa in enumerate(alignments):
            for r, seq in enumerate(msa):
                tokens[b, r, 0] = CLS_IDX
                tokens[b, r, 1 : len(seq) + 1] = torch.tensor([self.tok_to_idx[c] for c in seq])
        return {"tokens": tokens, "attention_mask": (tokens != PAD_IDX).long()}


class RowSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x, padding_mask):
        b, r, c, d = x.shape
        q, k, v = self.qkv(x).view(b, r, c, 3, self.heads, self.head_dim).unbind(3)
        q = q / (self.head_dim ** 0.5 * r ** 0.5)
        q = q * (1 - padding_mask[..., None, None].to(q))
        attn_weights = torch.einsum("brihd,brjhd->bhij", q, k)
        attn_weights = attn_weights.masked_fill(padding_mask[:, 0, None, None, :], float("-inf"))
        probs = attn_weights.softmax(-1)
        out = torch.einsum("bhij,brjhd->brihd", probs, v).reshape(b, r, c, d)
        return self.out_proj(out)


class ColumnSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x, padding_mask):
        b, r, c, d = x.shape
        q, k, v = self.qkv(x).view(b, r, c, 3, self.heads, -1).unbind(3)
        scores = torch.einsum("bichd,bjchd->bhcij", q, k) / q.size(-1) ** 0.5
        scores = scores.masked_fill(padding_mask.transpose(1, 2)[:, None, :, None, :], torch.finfo(scores.dtype).min)
        probs = scores.softmax(-1)
        out = torch.einsum("bhcij,bjchd->bichd", probs, v).reshape(b, r, c, d)
        return self.out_proj(out)


class AxialBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.row = RowSelfAttention(dim, heads)
        self.col = ColumnSelfAttention(dim, heads)
        self.norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(3)])
        self.ffn = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, padding_mask):
        x = x + self.row(self.norms[0](x), padding_mask)
        x = x + self.col(self.norms[1](x), padding_mask)
        return x + self.ffn(self.norms[2](x))


class MSATransformer(nn.Module):
    def __init__(self, dim=32, heads=4, layers=2, max_positions=64):
        super().__init__()
        self.embed_tokens = nn.Embedding(len(TOKENS), dim, padding_idx=PAD_IDX)
        self.embed_positions = nn.Embedding(max_positions, dim)
        self.msa_position_embedding = nn.Parameter(0.01 * torch.randn(1, 16, 1, dim))
        self.layers = nn.ModuleList([AxialBlock(dim, heads) for _ in range(layers)])
        self.lm_head = nn.Linear(dim, len(TOKENS))

    def forward(self, tokens, attention_mask):
        padding_mask = attention_mask == 0
        b, r, c = tokens.shape
        x = self.embed_tokens(tokens) + self.embed_positions(torch.arange(c))[None, None]
        x = x + self.msa_position_embedding[:, :r]
        x = x * attention_mask[..., None].to(x.dtype)
        for layer in self.layers:
            x = layer(x, padding_mask.bool())
        return self.lm_head(x)


def masked_marginal_scores(model, converter, msa, mutants):
    batch = converter([msa])
    wt = batch["tokens"][0, 0]
    scores = []
    with torch.no_grad():
        for mut in mutants:
            wt_aa, pos, mt_aa = mut[0], int(mut[1:-1]), mut[-1]
            tokens = batch["tokens"].clone()
            tokens[0, 0, pos] = MASK_IDX
            logp = model(tokens, batch["attention_mask"])[0, 0, pos].log_softmax(-1)
            assert wt[pos] == converter.tok_to_idx[wt_aa]
            scores.append((logp[converter.tok_to_idx[mt_aa]] - logp[converter.tok_to_idx[wt_aa]]).item())
    return scores


if __name__ == "__main__":
    torch.manual_seed(0)
    converter = MSABatchConverter()
    msa_a = ["MKTAYIAKQR", "MKSAYIA-QR", "MRTAYLAKQK", "MKTGYIAKHR"]
    msa_b = ["GSHMLEDP", "GSHMIE-P", "GAHMLEEP"]
    batch = converter([msa_a, msa_b])
    model = MSATransformer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    real = batch["tokens"] > MASK_IDX
    for step in range(3):
        masked = (torch.rand(batch["tokens"].shape) < 0.15) & real
        logits = model(batch["tokens"].masked_fill(masked, MASK_IDX), batch["attention_mask"])
        loss = F.cross_entropy(logits[masked | (batch["tokens"] == CLS_IDX)], batch["tokens"][masked | (batch["tokens"] == CLS_IDX)])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("mlm loss", round(loss.item(), 4))
    print("mutant scores", [round(s, 3) for s in masked_marginal_scores(model, converter, msa_a, ["K2R", "A4G", "Q9H"])])
