"""Speech-to-text translation with fairseq's S2T Transformer (MuST-C-like en-de setup).

Conv1dSubsampler over log-mel filterbanks, a post-norm transformer encoder, a transformer
decoder with fairseq's MultiheadAttention over (T, B, C) tensors, label-smoothed cross-entropy,
greedy decoding, and the `--fp16` inference path of fairseq-generate (model.half()).

Source: facebookresearch/fairseq#3575 and NVIDIA/apex#1052 (conventions.md section 3 item 18), conventions.md section 2.3
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS, UNK = 1, 0, 2, 3
N_MELS = 40


def lengths_to_padding_mask(lens):
    bsz, max_lens = lens.size(0), int(torch.max(lens).item())
    mask = torch.arange(max_lens, device=lens.device).to(lens.device).view(1, max_lens)
    return mask.expand(bsz, -1) >= lens.view(bsz, 1).expand(-1, max_lens)


def fill_with_neg_inf(t):
    return t.float().fill_(float("-inf")).type_as(t)


class Conv1dSubsampler(nn.Module):
    def __init__(self, in_channels, mid_channels, out_channels, kernel_sizes=(5, 5)):
        super().__init__()
        self.n_layers = len(kernel_sizes)
        self.conv_layers = nn.ModuleList(
            nn.Conv1d(in_channels if i == 0 else mid_channels // 2,
                      mid_channels if i < self.n_layers - 1 else out_channels * 2,
                      k, stride=2, padding=k // 2)
            for i, k in enumerate(kernel_sizes)
        )

    def get_out_seq_lens_tensor(self, in_seq_lens_tensor):
        out = in_seq_lens_tensor.clone()
        for _ in range(self.n_layers):
            out = ((out.float() - 1) / 2 + 1).floor().long()
        return out

    def forward(self, src_tokens, src_lengths):
        x = src_tokens.transpose(1, 2).contiguous()
        for conv in self.conv_layers:
            x = F.glu(conv(x), dim=1)
        x = x.transpose(1, 2).transpose(0, 1).contiguous()
        return x, self.get_out_seq_lens_tensor(src_lengths)


class SinusoidalPositionalEmbedding(nn.Module):
    def __init__(self, embedding_dim, max_positions=1024):
        super().__init__()
        half_dim = embedding_dim // 2
        emb = torch.exp(torch.arange(half_dim, dtype=torch.float) * -(math.log(10000) / (half_dim - 1)))
        emb = torch.arange(max_positions, dtype=torch.float).unsqueeze(1) * emb.unsqueeze(0)
        self.register_buffer("weights", torch.cat([torch.sin(emb), torch.cos(emb)], dim=1), persistent=False)

    def forward(self, seq_len):
        return self.weights[:seq_len]


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.embed_dim, self.num_heads, self.dropout_p = embed_dim, num_heads, dropout
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None):
        tgt_len, bsz, embed_dim = query.size()
        q = (self.q_proj(query) * self.scaling).contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = self.k_proj(key).contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = self.v_proj(value).contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        src_len = k.size(1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))
        if attn_mask is not None:
            attn_weights += attn_mask.unsqueeze(0)
        if key_padding_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2).to(torch.bool), float("-inf"))
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_weights_float = F.softmax(attn_weights.float(), dim=-1)
        attn_probs = F.dropout(attn_weights_float.type_as(attn_weights), p=self.dropout_p, training=self.training)
        attn = torch.bmm(attn_probs, v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(attn)


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d, heads, ffn, dropout):
        super().__init__()
        self.self_attn = MultiheadAttention(d, heads, dropout)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.final_layer_norm = nn.LayerNorm(d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, encoder_padding_mask):
        residual = x
        x = self.self_attn(x, x, x, key_padding_mask=encoder_padding_mask)
        x = self.self_attn_layer_norm(residual + self.dropout(x))
        residual = x
        x = self.fc2(self.dropout(F.relu(self.fc1(x))))
        return self.final_layer_norm(residual + self.dropout(x))


class TransformerDecoderLayer(nn.Module):
    def __init__(self, d, heads, ffn, dropout):
        super().__init__()
        self.self_attn = MultiheadAttention(d, heads, dropout)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = MultiheadAttention(d, heads, dropout)
        self.encoder_attn_layer_norm = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.final_layer_norm = nn.LayerNorm(d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, encoder_out, encoder_padding_mask, self_attn_mask, self_attn_padding_mask):
        residual = x
        x = self.self_attn(x, x, x, key_padding_mask=self_attn_padding_mask, attn_mask=self_attn_mask)
        x = self.self_attn_layer_norm(residual + self.dropout(x))
        residual = x
        x = self.encoder_attn(x, encoder_out, encoder_out, key_padding_mask=encoder_padding_mask)
        x = self.encoder_attn_layer_norm(residual + self.dropout(x))
        residual = x
        x = self.fc2(self.dropout(F.relu(self.fc1(x))))
        return self.final_layer_norm(residual + self.dropout(x))


class S2TTransformerModel(nn.Module):
    def __init__(self, tgt_vocab, d=64, heads=4, ffn=256, layers=2, dropout=0.1):
        super().__init__()
        self.subsample = Conv1dSubsampler(N_MELS, 128, d)
        self.embed_scale = math.sqrt(d)
        self.embed_positions = SinusoidalPositionalEmbedding(d)
        self.encoder_layers = nn.ModuleList(TransformerEncoderLayer(d, heads, ffn, dropout) for _ in range(layers))
        self.embed_tokens = nn.Embedding(tgt_vocab, d, padding_idx=PAD)
        self.decoder_layers = nn.ModuleList(TransformerDecoderLayer(d, heads, ffn, dropout) for _ in range(layers))
        self.output_projection = nn.Linear(d, tgt_vocab, bias=False)
        self.dropout = nn.Dropout(dropout)
        self._future_mask = torch.empty(0)

    def buffered_future_mask(self, tensor):
        dim = tensor.size(0)
        if self._future_mask.size(0) < dim:
            self._future_mask = torch.triu(fill_with_neg_inf(torch.zeros([dim, dim])), 1)
        self._future_mask = self._future_mask.to(tensor)
        return self._future_mask[:dim, :dim]

    def encoder(self, src_tokens, src_lengths):
        x, input_lengths = self.subsample(src_tokens, src_lengths)
        x = self.dropout(self.embed_scale * x + self.embed_positions(x.size(0)).unsqueeze(1).to(x))
        encoder_padding_mask = lengths_to_padding_mask(input_lengths)
        for layer in self.encoder_layers:
            x = layer(x, encoder_padding_mask)
        return {"encoder_out": x, "encoder_padding_mask": encoder_padding_mask}

    def decoder(self, prev_output_tokens, encoder_out):
        self_attn_padding_mask = prev_output_tokens.eq(PAD) if prev_output_tokens.eq(PAD).any() else None
        x = self.embed_scale * self.embed_tokens(prev_output_tokens)
        x = x + self.embed_positions(prev_output_tokens.size(1)).unsqueeze(0).to(x)
        x = self.dropout(x).transpose(0, 1)
        for layer in self.decoder_layers:
            x = layer(x, encoder_out["encoder_out"], encoder_out["encoder_padding_mask"],
                      self.buffered_future_mask(x), self_attn_padding_mask)
        return self.output_projection(x.transpose(0, 1))

    def forward(self, src_tokens, src_lengths, prev_output_tokens):
        return self.decoder(prev_output_tokens, self.encoder(src_tokens, src_lengths))


def make_corpus(n, n_words=12, seed=0):
    templates = torch.randn(n_words, 3, N_MELS, generator=torch.Generator().manual_seed(1234)) * 2.0
    g = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    samples = []
    for _ in range(n):
        words = [rng.randrange(n_words) for _ in range(rng.randint(2, 6))]
        frames = [templates[w, p].expand(rng.randint(3, 5), -1) for w in words for p in range(3)]
        fbank = torch.cat(frames) + 0.3 * torch.randn(sum(f.size(0) for f in frames), N_MELS, generator=g)
        target = [4 + (7 * w + 3) % n_words for w in reversed(words)] + [EOS]
        samples.append((fbank, target))
    return samples, n_words + 4


def collater(samples):
    lengths = torch.tensor([s[0].size(0) for s in samples])
    src = torch.zeros(len(samples), int(lengths.max()), N_MELS)
    tlen = max(len(s[1]) for s in samples)
    target = torch.full((len(samples), tlen), PAD, dtype=torch.long)
    prev = torch.full((len(samples), tlen), PAD, dtype=torch.long)
    for i, (fbank, tgt) in enumerate(samples):
        src[i, : fbank.size(0)] = fbank
        target[i, : len(tgt)] = torch.tensor(tgt)
        prev[i, : len(tgt)] = torch.tensor([EOS] + tgt[:-1])
    return {"net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}, "target": target}


@torch.no_grad()
def greedy_generate(model, src_tokens, src_lengths, max_len=10):
    encoder_out = model.encoder(src_tokens, src_lengths)
    tokens = torch.full((src_tokens.size(0), 1), EOS, dtype=torch.long)
    for _ in range(max_len):
        logits = model.decoder(tokens, encoder_out)[:, -1].float()
        tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
    return tokens[:, 1:]


def sentence_accuracy(model, batch):
    hyp = greedy_generate(model, batch["net_input"]["src_tokens"], batch["net_input"]["src_lengths"])
    targets = [t[: t.index(EOS) + 1] for t in batch["target"].tolist()]
    return sum(h[: len(t)] == t for h, t in zip(hyp.tolist(), targets)) / len(hyp)


def main():
    torch.manual_seed(0)
    train, vocab = make_corpus(640)
    model = S2TTransformerModel(vocab)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.98))
    for epoch in range(12):
        model.train()
        random.Random(epoch).shuffle(train)
        for i in range(0, len(train), 32):
            batch = collater(train[i : i + 32])
            lprobs = F.log_softmax(model(**batch["net_input"]).float(), dim=-1)
            loss = F.cross_entropy(lprobs.transpose(1, 2), batch["target"], ignore_index=PAD, label_smoothing=0.1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.3f}")
    model.eval()
    test_batch = collater(make_corpus(64, seed=1)[0])
    print(f"fp32 sentence accuracy {sentence_accuracy(model, test_batch):.3f}")
    model.half()
    test_batch["net_input"]["src_tokens"] = test_batch["net_input"]["src_tokens"].half()
    print(f"fp16 sentence accuracy {sentence_accuracy(model, test_batch):.3f}")


if __name__ == "__main__":
    main()
