"""A BART-style encoder-decoder fine-tuned for extractive-abstractive summarization, SDPA attention
with an eager path for `output_attentions` (cross-attention alignment inspection).

Source: conventions.md §1 (SDPA is_causal row), §2.7 and §5 item 8.
"""

import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


@dataclass
class BartConfig:
    vocab_size: int = 32
    d_model: int = 64
    encoder_layers: int = 2
    decoder_layers: int = 2
    attention_heads: int = 4
    ffn_dim: int = 128
    max_position_embeddings: int = 64
    bos_token_id: int = 0
    pad_token_id: int = 1
    eos_token_id: int = 2
    decoder_start_token_id: int = 2
    dropout: float = 0.1
    attention_dropout: float = 0.0


def shift_tokens_right(input_ids, pad_token_id, decoder_start_token_id):
    shifted_input_ids = input_ids.new_zeros(input_ids.shape)
    shifted_input_ids[:, 1:] = input_ids[:, :-1].clone()
    shifted_input_ids[:, 0] = decoder_start_token_id
    return shifted_input_ids.masked_fill(shifted_input_ids == -100, pad_token_id)


def _expand_mask(mask):
    """(bsz, src_len) 1/0 mask -> (bsz, 1, 1, src_len) bool, True = attend."""
    return None if mask is None else mask[:, None, None, :].bool()


class BartLearnedPositionalEmbedding(nn.Embedding):
    def __init__(self, num_embeddings, embedding_dim):
        self.offset = 2
        super().__init__(num_embeddings + self.offset, embedding_dim)

    def forward(self, input_ids):
        bsz, seq_len = input_ids.shape[:2]
        positions = torch.arange(seq_len, device=self.weight.device).expand(bsz, -1)
        return super().forward(positions + self.offset)


class BartAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0, is_causal=False):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout, self.is_causal = dropout, is_causal
        self.k_proj, self.v_proj = nn.Linear(embed_dim, embed_dim), nn.Linear(embed_dim, embed_dim)
        self.q_proj, self.out_proj = nn.Linear(embed_dim, embed_dim), nn.Linear(embed_dim, embed_dim)

    def _shape(self, tensor, bsz):
        return tensor.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden_states, key_value_states=None, attention_mask=None, output_attentions=False):
        bsz, tgt_len, _ = hidden_states.size()
        kv_input = hidden_states if key_value_states is None else key_value_states
        q = self._shape(self.q_proj(hidden_states), bsz)
        k, v = self._shape(self.k_proj(kv_input), bsz), self._shape(self.v_proj(kv_input), bsz)
        src_len = k.size(2)
        keep = attention_mask
        if self.is_causal:
            causal = torch.ones(tgt_len, src_len, dtype=torch.bool, device=q.device).tril()
            keep = causal if keep is None else keep & causal
        if output_attentions:
            attn_weights = torch.matmul(q, k.transpose(-1, -2)) * self.scaling
            if keep is not None:
                attn_weights = attn_weights.masked_fill(~keep, torch.finfo(attn_weights.dtype).min)
            attn_weights = F.softmax(attn_weights, dim=-1)
            attn_output = torch.matmul(F.dropout(attn_weights, self.dropout, self.training), v)
        else:
            attn_weights = None
            attn_output = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, dropout_p=self.dropout if self.training else 0.0, is_causal=self.is_causal)  # expect: MC506 bart
        attn_output = attn_output.transpose(1, 2).reshape(bsz, tgt_len, self.embed_dim)
        return self.out_proj(attn_output), attn_weights


class BartLayer(nn.Module):
    def __init__(self, config, is_decoder):
        super().__init__()
        d = config.d_model
        self.self_attn = BartAttention(d, config.attention_heads, config.attention_dropout, is_causal=is_decoder)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = BartAttention(d, config.attention_heads, config.attention_dropout) if is_decoder else None
        self.encoder_attn_layer_norm = nn.LayerNorm(d) if is_decoder else None
        self.fc1, self.fc2, self.final_layer_norm = nn.Linear(d, config.ffn_dim), nn.Linear(config.ffn_dim, d), nn.LayerNorm(d)
        self.dropout = config.dropout

    def forward(self, hidden_states, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None,
                output_attentions=False):
        residual = hidden_states
        hidden_states, _ = self.self_attn(hidden_states, attention_mask=attention_mask, output_attentions=output_attentions)
        hidden_states = self.self_attn_layer_norm(residual + F.dropout(hidden_states, self.dropout, self.training))
        cross_attn_weights = None
        if self.encoder_attn is not None:
            residual = hidden_states
            hidden_states, cross_attn_weights = self.encoder_attn(
                hidden_states, key_value_states=encoder_hidden_states, attention_mask=encoder_attention_mask,
                output_attentions=output_attentions,
            )
            hidden_states = self.encoder_attn_layer_norm(residual + F.dropout(hidden_states, self.dropout, self.training))
        residual = hidden_states
        hidden_states = self.fc2(F.gelu(self.fc1(hidden_states)))
        return self.final_layer_norm(residual + F.dropout(hidden_states, self.dropout, self.training)), cross_attn_weights


class BartStack(nn.Module):
    def __init__(self, config, embed_tokens, is_decoder):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.embed_positions = BartLearnedPositionalEmbedding(config.max_position_embeddings, config.d_model)
        self.layernorm_embedding = nn.LayerNorm(config.d_model)
        self.layers = nn.ModuleList([BartLayer(config, is_decoder) for _ in range(config.decoder_layers)])
        nn.init.normal_(self.embed_positions.weight, std=0.02)

    def forward(self, input_ids, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None,
                output_attentions=False):
        hidden_states = self.layernorm_embedding(self.embed_tokens(input_ids) + self.embed_positions(input_ids))
        self_attn_mask, cross_attn_mask = _expand_mask(attention_mask), _expand_mask(encoder_attention_mask)
        cross_attentions = []
        for layer in self.layers:
            hidden_states, cross = layer(hidden_states, self_attn_mask, encoder_hidden_states, cross_attn_mask, output_attentions)
            cross_attentions.append(cross)
        return hidden_states, cross_attentions


class BartForConditionalGeneration(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        nn.init.normal_(self.shared.weight, std=0.02)
        self.encoder = BartStack(config, self.shared, is_decoder=False)
        self.decoder = BartStack(config, self.shared, is_decoder=True)
        self.register_buffer("final_logits_bias", torch.zeros((1, config.vocab_size)))

    def forward(self, input_ids, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None, labels=None,
                output_attentions=False):
        if decoder_input_ids is None:
            decoder_input_ids = shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)
        encoder_hidden_states, _ = self.encoder(input_ids, attention_mask=attention_mask)
        hidden_states, cross_attentions = self.decoder(
            decoder_input_ids, attention_mask=decoder_attention_mask, encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=attention_mask, output_attentions=output_attentions,
        )
        lm_logits = F.linear(hidden_states, self.shared.weight) + self.final_logits_bias
        loss = None
        if labels is not None:
            loss = F.cross_entropy(lm_logits.flatten(0, 1), labels.flatten(), ignore_index=-100, label_smoothing=0.1)
        return {"loss": loss, "logits": lm_logits, "cross_attentions": cross_attentions}

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, max_length=12):
        decoder_input_ids = torch.full((input_ids.size(0), 1), self.config.decoder_start_token_id)
        done = torch.zeros(input_ids.size(0), dtype=torch.bool)
        for _ in range(max_length):
            logits = self(input_ids, attention_mask, decoder_input_ids=decoder_input_ids)["logits"][:, -1]
            next_tokens = logits.argmax(-1).masked_fill(done, self.config.pad_token_id)
            decoder_input_ids = torch.cat([decoder_input_ids, next_tokens[:, None]], dim=1)
            done |= next_tokens == self.config.eos_token_id
            if done.all():
                break
        return decoder_input_ids


def make_example(rng):
    """Filler tokens 3..19; salient tokens 20..31 form the reference summary, in order."""
    source = [rng.randrange(3, 20) for _ in range(rng.randint(6, 14))]
    summary = sorted(rng.sample(range(20, 32), rng.randint(1, 4)))
    for tok in summary:
        source.insert(rng.randrange(len(source) + 1), tok)
    return {"input_ids": [0, *source, 2], "labels": [0, *summary, 2]}


def collate_summarization(features, config):
    def pad(seqs, value):
        n = max(len(s) for s in seqs)
        return torch.tensor([s + [value] * (n - len(s)) for s in seqs])

    input_ids = pad([f["input_ids"] for f in features], config.pad_token_id)
    labels = pad([f["labels"] for f in features], -100)
    decoder_input_ids = shift_tokens_right(labels, config.pad_token_id, config.decoder_start_token_id)
    return {
        "input_ids": input_ids,
        "attention_mask": (input_ids != config.pad_token_id).long(),
        "decoder_input_ids": decoder_input_ids,
        "decoder_attention_mask": (decoder_input_ids != config.pad_token_id).long(),
        "labels": labels,
    }


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    config = BartConfig()
    model = BartForConditionalGeneration(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(400):
        out = model(**collate_summarization([make_example(rng) for _ in range(32)], config))
        optimizer.zero_grad()
        out["loss"].backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {out['loss'].item():.3f}")
    model.eval()
    batch = collate_summarization([make_example(rng) for _ in range(8)], config)
    summaries = model.generate(batch["input_ids"], batch["attention_mask"])
    refs = [[t for t in row if t >= 0] for row in batch["labels"].tolist()]
    hyps = [row[1 : row.index(2, 1) + 1] if 2 in row[1:] else row[1:] for row in summaries.tolist()]
    print("exact match", sum(h == r for h, r in zip(hyps, refs)), "/ 8")
    with torch.no_grad():
        sdpa = model(**batch)["logits"]
        eager = model(**batch, output_attentions=True)["logits"]
        print("sdpa vs eager on real tokens:", (sdpa - eager)[batch["labels"] != -100].abs().max().item())
        try:
            with sdpa_kernel(SDPBackend.MATH):
                math = model(**batch)["logits"]
            print("math vs eager:", (math - eager)[batch["labels"] != -100].abs().max().item())
        except RuntimeError as err:
            print("MATH kernel:", err)
