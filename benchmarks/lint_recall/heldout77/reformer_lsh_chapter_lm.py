"""Reformer character language model over whole novel chapters (Crime and Punishment).

Shared-QK LSH attention: random-rotation hashing into buckets, sort by bucket,
chunked attention that also looks one chunk back, a causal mask on positions,
a self-attention penalty, and several hash rounds combined by their
logsumexp, after lucidrains/reformer-pytorch.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask), §7 Q3; conventions.md §1 (cheat-sheet), §2.3
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

TOKEN_SELF_ATTN_VALUE = -5e4


def max_neg_value(tensor):
    return -torch.finfo(tensor.dtype).max


def sort_key_val(t1, t2, dim=-1):
    values, indices = t1.sort(dim=dim)
    t2 = t2.expand_as(t1)
    return values, t2.gather(dim, indices)


def batched_index_select(values, indices):
    last_dim = values.shape[-1]
    return values.gather(1, indices[:, :, None].expand(-1, -1, last_dim))


def look_one_back(x):
    x_extra = torch.cat([x[:, -1:, ...], x[:, :-1, ...]], dim=1)
    return torch.cat([x, x_extra], dim=2)


class LSHAttention(nn.Module):
    def __init__(self, bucket_size=4, n_hashes=2, causal=True):
        super().__init__()
        self.bucket_size, self.n_hashes, self.causal = bucket_size, n_hashes, causal

    def hash_vectors(self, n_buckets, vecs):
        batch_size = vecs.shape[0]
        rotations_shape = (1, vecs.shape[-1], self.n_hashes, n_buckets // 2)
        random_rotations = torch.randn(rotations_shape, dtype=vecs.dtype, device=vecs.device).expand(batch_size, -1, -1, -1)
        rotated_vecs = torch.einsum("btf,bfhi->bhti", vecs, random_rotations)
        rotated_vecs = torch.cat([rotated_vecs, -rotated_vecs], dim=-1)
        buckets = torch.argmax(rotated_vecs, dim=-1)
        offsets = torch.arange(self.n_hashes, device=vecs.device).reshape(1, -1, 1) * n_buckets
        return (buckets + offsets).reshape(batch_size, -1)

    def forward(self, qk, v, input_mask=None):
        batch_size, seqlen, dim = qk.shape
        n_buckets = seqlen // self.bucket_size
        buckets = self.hash_vectors(n_buckets, qk)
        ticker = torch.arange(self.n_hashes * seqlen, device=qk.device).unsqueeze(0).expand_as(buckets)
        buckets_and_t = (seqlen * buckets + (ticker % seqlen)).detach()
        sbuckets_and_t, sticker = sort_key_val(buckets_and_t, ticker, dim=-1)
        _, undo_sort = sticker.sort(dim=-1)
        st = sticker % seqlen
        sqk = batched_index_select(qk, st)
        sv = batched_index_select(v, st)

        chunk_size = self.n_hashes * n_buckets
        bq_t = bkv_t = st.reshape(batch_size, chunk_size, -1)
        bq = sqk.reshape(batch_size, chunk_size, -1, dim)
        bv = sv.reshape(batch_size, chunk_size, -1, dim)
        bk = F.normalize(bq, p=2, dim=-1).type_as(bq)
        bk, bv, bkv_t = look_one_back(bk), look_one_back(bv), look_one_back(bkv_t)

        dots = torch.einsum("bhie,bhje->bhij", bq, bk) * (dim ** -0.5)
        masked_value = max_neg_value(dots)
        if input_mask is not None:
            mq = input_mask.gather(1, st).reshape(batch_size, chunk_size, -1)
            mkv = look_one_back(mq)
            mask = mq[:, :, :, None] & mkv[:, :, None, :]
            dots = dots.masked_fill(~mask, masked_value)
        if self.causal:
            causal_bias = (bq_t[:, :, :, None] < bkv_t[:, :, None, :]).float() * float("-inf")  # expect: MC522 causal
            dots = dots + causal_bias
        self_mask = bq_t[:, :, :, None] == bkv_t[:, :, None, :]
        dots = dots.masked_fill(self_mask, TOKEN_SELF_ATTN_VALUE)

        dots_logsumexp = torch.logsumexp(dots, dim=-1, keepdim=True)
        dots = torch.exp(dots - dots_logsumexp).type_as(dots)
        bo = torch.einsum("buij,buje->buie", dots, bv)
        so = bo.reshape(batch_size, -1, dim)
        slogits = dots_logsumexp.reshape(batch_size, -1)
        o = batched_index_select(so, undo_sort).reshape(batch_size, self.n_hashes, seqlen, dim)
        logits = slogits.gather(1, undo_sort).reshape(batch_size, self.n_hashes, seqlen, 1)
        probs = torch.exp(logits - torch.logsumexp(logits, dim=1, keepdim=True))
        return torch.sum(o * probs, dim=1)


class LSHSelfAttention(nn.Module):
    def __init__(self, dim, heads=2, bucket_size=4, n_hashes=2, causal=True):
        super().__init__()
        self.heads = heads
        self.toqk = nn.Linear(dim, dim, bias=False)
        self.tov = nn.Linear(dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.lsh_attn = LSHAttention(bucket_size=bucket_size, n_hashes=n_hashes, causal=causal)

    def forward(self, x, input_mask=None):
        b, t, e = x.shape
        h, dh = self.heads, e // self.heads
        merge_heads = lambda z: z.view(b, t, h, dh).transpose(1, 2).reshape(b * h, t, dh)
        qk, v = merge_heads(self.toqk(x)), merge_heads(self.tov(x))
        if input_mask is not None:
            input_mask = input_mask.repeat_interleave(h, dim=0)
        out = self.lsh_attn(qk, v, input_mask=input_mask)
        out = out.view(b, h, t, dh).transpose(1, 2).reshape(b, t, e)
        return self.to_out(out)


class ReformerLM(nn.Module):
    def __init__(self, num_tokens=256, dim=32, depth=2, max_seq_len=64, heads=2, bucket_size=4, n_hashes=2):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)
        self.layers = nn.ModuleList()
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                nn.LayerNorm(dim), LSHSelfAttention(dim, heads, bucket_size, n_hashes),
                nn.LayerNorm(dim), nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)),
            ]))
        self.to_logits = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, num_tokens))

    def forward(self, x, input_mask=None):
        x = self.token_emb(x) + self.pos_emb(torch.arange(x.shape[1], device=x.device))
        for norm1, attn, norm2, ff in self.layers:
            x = x + attn(norm1(x), input_mask=input_mask)
            x = x + ff(norm2(x))
        return self.to_logits(x)


def chapter_batches(text, seq_len, batch_size):
    data = torch.tensor(list(text.encode("utf-8")))
    chunks = list(data.split(seq_len))
    for i in range(0, len(chunks), batch_size):
        group = chunks[i:i + batch_size]
        ids = torch.zeros(len(group), seq_len, dtype=torch.long)
        mask = torch.zeros(len(group), seq_len, dtype=torch.bool)
        for j, c in enumerate(group):
            ids[j, : len(c)], mask[j, : len(c)] = c, True
        yield ids, mask


if __name__ == "__main__":
    torch.manual_seed(0)
    chapter = ("On an exceptionally hot evening early in July a young man came out of the garret in which he "
               "lodged in S. Place and walked slowly, as though in hesitation, towards K. bridge.")
    model = ReformerLM()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for ids, mask in chapter_batches(chapter, seq_len=64, batch_size=2):
        logits = model(ids, input_mask=mask)
        target = ids[:, 1:].masked_fill(~mask[:, 1:], -100)
        loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), target, ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"loss {loss.item():.4f}")
