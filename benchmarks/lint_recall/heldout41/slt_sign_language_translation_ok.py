"""Sign Language Transformers: joint gloss recognition (CTC) and translation.

Layout of neccam/slt on JoeyNMT: SpatialEmbeddings with MaskedNorm over frame features,
MultiHeadedAttention(k, v, q, mask), pre-norm encoder and decoder layers, SignModel with a gloss
output layer and a text decoder, get_loss_for_batch and greedy decoding, on synthetic
PHOENIX-like frame features.

Source: pytorch/pytorch#29546, rasbt/LLMs-from-scratch#1061, conventions.md §1 (direction cheat-sheet)
"""

import math
import random

import torch
import torch.nn as nn
from torch import Tensor

PAD, BOS, EOS, BLANK = 0, 1, 2, 0


def subsequent_mask(size: int) -> Tensor:
    ones = torch.ones(1, size, size, dtype=torch.bool)
    return torch.tril(ones, diagonal=0)


class MaskedNorm(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.norm = nn.BatchNorm1d(num_features=num_features)
        self.num_features = num_features

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        if self.training:
            reshaped = x.reshape([-1, self.num_features])
            reshaped_mask = mask.reshape([-1, 1]) > 0
            selected = torch.masked_select(reshaped, reshaped_mask).reshape([-1, self.num_features])
            batch_normed = self.norm(selected)
            scattered = reshaped.masked_scatter(reshaped_mask, batch_normed)
            return scattered.reshape([x.shape[0], -1, self.num_features])
        return self.norm(x.reshape([-1, self.num_features])).reshape([x.shape[0], -1, self.num_features])


class SpatialEmbeddings(nn.Module):
    def __init__(self, embedding_dim: int, input_size: int):
        super().__init__()
        self.ln = nn.Linear(input_size, embedding_dim)
        self.norm = MaskedNorm(embedding_dim)
        self.activation = nn.Softsign()

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return self.activation(self.norm(self.ln(x), mask))


class PositionalEncoding(nn.Module):
    def __init__(self, size: int, max_len: int = 512):
        super().__init__()
        pe = torch.zeros(max_len, size)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, size, 2, dtype=torch.float) * -(math.log(10000.0) / size))
        pe[:, 0::2] = torch.sin(position.float() * div_term)
        pe[:, 1::2] = torch.cos(position.float() * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, emb: Tensor) -> Tensor:
        return emb + self.pe[:, : emb.size(1)]


class MultiHeadedAttention(nn.Module):
    def __init__(self, num_heads: int, size: int, dropout: float = 0.1):
        super().__init__()
        self.head_size = size // num_heads
        self.num_heads = num_heads
        self.k_layer = nn.Linear(size, size)
        self.v_layer = nn.Linear(size, size)
        self.q_layer = nn.Linear(size, size)
        self.output_layer = nn.Linear(size, size)
        self.softmax = nn.Softmax(dim=-1)
        self.dropout = nn.Dropout(dropout)

    def forward(self, k: Tensor, v: Tensor, q: Tensor, mask: Tensor = None) -> Tensor:
        batch_size = k.size(0)
        k = self.k_layer(k).view(batch_size, -1, self.num_heads, self.head_size).transpose(1, 2)
        v = self.v_layer(v).view(batch_size, -1, self.num_heads, self.head_size).transpose(1, 2)
        q = self.q_layer(q).view(batch_size, -1, self.num_heads, self.head_size).transpose(1, 2)
        q = q / math.sqrt(self.head_size)
        scores = torch.matmul(q, k.transpose(2, 3))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
        attention = self.dropout(self.softmax(scores))
        context = torch.matmul(attention, v).transpose(1, 2).contiguous()
        return self.output_layer(context.view(batch_size, -1, self.num_heads * self.head_size))


class PositionwiseFeedForward(nn.Module):
    def __init__(self, input_size: int, ff_size: int, dropout: float = 0.1):
        super().__init__()
        self.layer_norm = nn.LayerNorm(input_size, eps=1e-6)
        self.pwff_layer = nn.Sequential(nn.Linear(input_size, ff_size), nn.ReLU(), nn.Dropout(dropout),
                                        nn.Linear(ff_size, input_size), nn.Dropout(dropout))

    def forward(self, x: Tensor) -> Tensor:
        return self.pwff_layer(self.layer_norm(x)) + x


class TransformerEncoderLayer(nn.Module):
    def __init__(self, size: int, ff_size: int, num_heads: int, dropout: float):
        super().__init__()
        self.layer_norm = nn.LayerNorm(size, eps=1e-6)
        self.src_src_att = MultiHeadedAttention(num_heads, size, dropout=dropout)
        self.feed_forward = PositionwiseFeedForward(size, ff_size, dropout=dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x_norm = self.layer_norm(x)
        h = self.dropout(self.src_src_att(x_norm, x_norm, x_norm, mask)) + x
        return self.feed_forward(h)


class TransformerDecoderLayer(nn.Module):
    def __init__(self, size: int, ff_size: int, num_heads: int, dropout: float):
        super().__init__()
        self.trg_trg_att = MultiHeadedAttention(num_heads, size, dropout=dropout)
        self.src_trg_att = MultiHeadedAttention(num_heads, size, dropout=dropout)
        self.feed_forward = PositionwiseFeedForward(size, ff_size, dropout=dropout)
        self.x_layer_norm = nn.LayerNorm(size, eps=1e-6)
        self.dec_layer_norm = nn.LayerNorm(size, eps=1e-6)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask, trg_mask):
        x_norm = self.x_layer_norm(x)
        h1 = self.dropout(self.trg_trg_att(x_norm, x_norm, x_norm, mask=trg_mask)) + x
        h1_norm = self.dec_layer_norm(h1)
        h2 = self.src_trg_att(memory, memory, h1_norm, mask=src_mask)
        return self.feed_forward(self.dropout(h2) + h1)


class TransformerEncoder(nn.Module):
    def __init__(self, hidden_size=64, ff_size=128, num_layers=2, num_heads=4, dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleList(
            [TransformerEncoderLayer(hidden_size, ff_size, num_heads, dropout) for _ in range(num_layers)]
        )
        self.layer_norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.pe = PositionalEncoding(hidden_size)
        self.emb_dropout = nn.Dropout(dropout)

    def forward(self, embed_src: Tensor, mask: Tensor) -> Tensor:
        x = self.emb_dropout(self.pe(embed_src))
        for layer in self.layers:
            x = layer(x, mask)
        return self.layer_norm(x)


class TransformerDecoder(nn.Module):
    def __init__(self, vocab_size, hidden_size=64, ff_size=128, num_layers=2, num_heads=4, dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleList(
            [TransformerDecoderLayer(hidden_size, ff_size, num_heads, dropout) for _ in range(num_layers)]
        )
        self.pe = PositionalEncoding(hidden_size)
        self.layer_norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.emb_dropout = nn.Dropout(dropout)
        self.output_layer = nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(self, trg_embed, encoder_output, src_mask, trg_mask):
        x = self.emb_dropout(self.pe(trg_embed))
        trg_mask = trg_mask & subsequent_mask(trg_embed.size(1)).type_as(trg_mask)
        for layer in self.layers:
            x = layer(x=x, memory=encoder_output, src_mask=src_mask, trg_mask=trg_mask)
        return self.output_layer(self.layer_norm(x))


class SignModel(nn.Module):
    def __init__(self, feature_size, gls_vocab_size, txt_vocab_size, hidden_size=64):
        super().__init__()
        self.sgn_embed = SpatialEmbeddings(hidden_size, feature_size)
        self.txt_embed = nn.Embedding(txt_vocab_size, hidden_size, padding_idx=PAD)
        self.encoder = TransformerEncoder(hidden_size)
        self.gloss_output_layer = nn.Linear(hidden_size, gls_vocab_size)
        self.decoder = TransformerDecoder(txt_vocab_size, hidden_size)

    def encode(self, sgn: Tensor, sgn_mask: Tensor) -> Tensor:
        return self.encoder(self.sgn_embed(x=sgn, mask=sgn_mask), sgn_mask)

    def forward(self, sgn, sgn_mask, txt_input, txt_mask):
        encoder_output = self.encode(sgn, sgn_mask)
        gloss_probabilities = self.gloss_output_layer(encoder_output).log_softmax(2).permute(1, 0, 2)
        decoder_outputs = self.decoder(self.txt_embed(txt_input), encoder_output, sgn_mask, txt_mask)
        return decoder_outputs, gloss_probabilities

    def get_loss_for_batch(self, batch, recognition_loss_weight=1.0, translation_loss_weight=1.0):
        txt_input = batch["txt"][:, :-1]
        txt_mask = (txt_input != PAD).unsqueeze(1)
        decoder_outputs, gloss_probabilities = self(batch["sgn"], batch["sgn_mask"], txt_input, txt_mask)
        recognition_loss = nn.functional.ctc_loss(gloss_probabilities, batch["gls"], batch["sgn_lengths"],
                                                  batch["gls_lengths"], blank=BLANK, zero_infinity=True)
        translation_loss = nn.functional.cross_entropy(decoder_outputs.reshape(-1, decoder_outputs.size(-1)),
                                                       batch["txt"][:, 1:].reshape(-1), ignore_index=PAD,
                                                       label_smoothing=0.1)
        return recognition_loss_weight * recognition_loss + translation_loss_weight * translation_loss

    @torch.no_grad()
    def greedy_translate(self, sgn, sgn_mask, max_output_length=10):
        encoder_output = self.encode(sgn, sgn_mask)
        ys = encoder_output.new_full([sgn.size(0), 1], BOS, dtype=torch.long)
        trg_mask = sgn_mask.new_ones([1, 1, 1])
        for _ in range(max_output_length):
            logits = self.decoder(self.txt_embed(ys), encoder_output, sgn_mask, trg_mask)[:, -1]
            ys = torch.cat([ys, logits.argmax(dim=-1, keepdim=True)], dim=1)
        return ys[:, 1:]


def make_batch(prototypes, n, frames_per_gloss=4, gen=None):
    glosses = [[random.randint(3, prototypes.size(0) - 1) for _ in range(random.randint(2, 5))] for _ in range(n)]
    sgn = torch.zeros(n, 5 * frames_per_gloss, prototypes.size(1))
    gls = torch.zeros(n, 5, dtype=torch.long)
    txt = torch.zeros(n, 7, dtype=torch.long)
    for i, seq in enumerate(glosses):
        frames = prototypes[seq].repeat_interleave(frames_per_gloss, dim=0)
        sgn[i, : frames.size(0)] = frames + 0.1 * torch.randn(frames.shape, generator=gen)
        gls[i, : len(seq)] = torch.tensor(seq)
        words = [BOS] + [g + 1 for g in reversed(seq)] + [EOS]
        txt[i, : len(words)] = torch.tensor(words)
    lengths = torch.tensor([len(s) for s in glosses])
    sgn_mask = (sgn != torch.zeros(prototypes.size(1))).any(dim=-1).unsqueeze(1)
    return {"sgn": sgn, "sgn_mask": sgn_mask, "sgn_lengths": lengths * frames_per_gloss,
            "gls": gls, "gls_lengths": lengths, "txt": txt}


if __name__ == "__main__":
    random.seed(0)
    torch.manual_seed(0)
    prototypes = torch.randn(11, 32)
    model = SignModel(feature_size=32, gls_vocab_size=11, txt_vocab_size=12)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(300):
        model.train()
        loss = model.get_loss_for_batch(make_batch(prototypes, 32))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    test = make_batch(prototypes, 128)
    hyp = model.greedy_translate(test["sgn"], test["sgn_mask"])
    refs = [[w for w in t[1:].tolist() if w not in (PAD, EOS)] for t in test["txt"]]
    outs = [h[: h.index(EOS)] if EOS in h else h for h in hyp.tolist()]
    print(f"sentence accuracy {sum(o == r for o, r in zip(outs, refs)) / len(refs):.3f}")
