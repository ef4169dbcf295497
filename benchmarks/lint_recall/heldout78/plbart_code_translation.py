"""PLBART-style encoder-decoder for Java -> C# translation (CodeXGLUE code-to-code-trans).

BART blocks as fairseq / Hugging Face lay them out for PLBART: learned positions with an
offset of 2, post-norm layers, a language-id token ending each sequence (``__java__`` /
``__cs__``) and the decoder started from the target language id. Attention is done by
``scaled_dot_product_attention`` with boolean keep masks built from the tokenizer's
``attention_mask``; decoding is greedy.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007
"""
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

SPECIALS = ["<s>", "<pad>", "</s>", "__java__", "__cs__"]
BOS, PAD, EOS, JAVA, CS = range(len(SPECIALS))


class PLBartTokenizer:
    def __init__(self, corpus, max_length=32):
        words = sorted({t for text in corpus for t in re.findall(r"\w+|[^\w\s]", text)})
        self.vocab = {w: i for i, w in enumerate(SPECIALS + words)}
        self.inverse = {i: w for w, i in self.vocab.items()}
        self.max_length = max_length

    def __call__(self, texts, lang_id):
        rows = [[self.vocab[t] for t in re.findall(r"\w+|[^\w\s]", s)][:self.max_length - 2] + [EOS, lang_id]
                for s in texts]
        width = max(map(len, rows))
        input_ids = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
        return {"input_ids": input_ids, "attention_mask": input_ids.ne(PAD).long()}

    def decode(self, ids):
        return " ".join(self.inverse[int(i)] for i in ids if int(i) >= len(SPECIALS))


def shift_tokens_right(input_ids, pad_token_id=PAD):
    prev = input_ids.clone()
    eos_index = (input_ids.ne(pad_token_id).sum(dim=1) - 1).unsqueeze(-1)
    prev[:, 0] = input_ids.gather(1, eos_index).squeeze(-1)
    prev[:, 1:] = input_ids[:, :-1]
    return prev


class BartAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, is_decoder=False):
        super().__init__()
        self.num_heads, self.is_decoder = num_heads, is_decoder
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def _shape(self, x):
        return x.view(x.size(0), x.size(1), self.num_heads, -1).transpose(1, 2)

    def forward(self, hidden_states, key_value_states=None, attention_mask=None):
        bsz, tgt_len, embed_dim = hidden_states.shape
        is_cross = key_value_states is not None
        source = key_value_states if is_cross else hidden_states
        q = self._shape(self.q_proj(hidden_states))
        k, v = self._shape(self.k_proj(source)), self._shape(self.v_proj(source))
        keep = attention_mask[:, None, None, :].bool()
        if self.is_decoder and not is_cross:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=True)  # expect: MC506 causal
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return self.out_proj(out.transpose(1, 2).reshape(bsz, tgt_len, embed_dim))


class BartLayer(nn.Module):
    def __init__(self, d_model, heads, is_decoder):
        super().__init__()
        self.self_attn = BartAttention(d_model, heads, is_decoder=is_decoder)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.encoder_attn = BartAttention(d_model, heads, is_decoder=True) if is_decoder else None
        self.encoder_attn_layer_norm = nn.LayerNorm(d_model) if is_decoder else None
        self.fc1, self.fc2 = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)
        self.final_layer_norm = nn.LayerNorm(d_model)

    def forward(self, x, attention_mask, encoder_hidden_states=None, encoder_attention_mask=None):
        x = self.self_attn_layer_norm(x + self.self_attn(x, attention_mask=attention_mask))
        if self.encoder_attn is not None:
            cross = self.encoder_attn(x, encoder_hidden_states, attention_mask=encoder_attention_mask)
            x = self.encoder_attn_layer_norm(x + cross)
        return self.final_layer_norm(x + self.fc2(F.gelu(self.fc1(x))))


class PLBartForTranslation(nn.Module):
    def __init__(self, vocab_size, d_model=64, heads=4, layers=2, max_positions=64):
        super().__init__()
        self.shared = nn.Embedding(vocab_size, d_model, padding_idx=PAD)
        self.embed_positions = nn.Embedding(max_positions + 2, d_model)
        self.encoder_layers = nn.ModuleList(BartLayer(d_model, heads, False) for _ in range(layers))
        self.decoder_layers = nn.ModuleList(BartLayer(d_model, heads, True) for _ in range(layers))
        self.layernorm_embedding = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.shared.weight
        nn.init.normal_(self.shared.weight, std=0.02)

    def embed(self, ids):
        positions = torch.arange(ids.size(1), device=ids.device) + 2
        return self.layernorm_embedding(self.shared(ids) + self.embed_positions(positions))

    def encode(self, input_ids, attention_mask):
        x = self.embed(input_ids)
        for layer in self.encoder_layers:
            x = layer(x, attention_mask)
        return x

    def decode(self, decoder_input_ids, decoder_attention_mask, memory, attention_mask):
        y = self.embed(decoder_input_ids)
        for layer in self.decoder_layers:
            y = layer(y, decoder_attention_mask, memory, attention_mask)
        return self.lm_head(y)

    def forward(self, input_ids, attention_mask, labels):
        decoder_input_ids = shift_tokens_right(labels)
        memory = self.encode(input_ids, attention_mask)
        logits = self.decode(decoder_input_ids, decoder_input_ids.ne(PAD).long(), memory, attention_mask)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD)

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, decoder_start_token_id=CS, max_length=20):
        memory = self.encode(input_ids, attention_mask)
        out = torch.full((input_ids.size(0), 1), decoder_start_token_id, dtype=torch.long)
        for _ in range(max_length):
            logits = self.decode(out, torch.ones_like(out), memory, attention_mask)
            out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            if out.eq(EOS).any(1).all():
                break
        return out[:, 1:]


PAIRS = [
    ("public int size() { return count; }", "public int Size() { return count; }"),
    ("public boolean isEmpty() { return size() == 0; }", "public bool IsEmpty() { return Size() == 0; }"),
    ("String s = obj.toString();", "string s = obj.ToString();"),
]


if __name__ == "__main__":
    torch.manual_seed(0)
    tokenizer = PLBartTokenizer([text for pair in PAIRS for text in pair])
    model = PLBartForTranslation(len(tokenizer.vocab))
    src = tokenizer([java for java, _ in PAIRS], JAVA)
    labels = tokenizer([cs for _, cs in PAIRS], CS)["input_ids"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(5):
        loss = model(**src, labels=labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    print(tokenizer.decode(model.generate(**tokenizer([PAIRS[2][0]], JAVA))[0]))
