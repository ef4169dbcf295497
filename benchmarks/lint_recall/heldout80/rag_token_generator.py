"""RAG-Token: retrieval-augmented generation that marginalises over documents per token.

A question encoder scores the question against a small dense document index and keeps the
top `n_docs` passages with their scores. Each passage is joined with the question
("title / text // question") and fed to a BART-like generator; the per-document token
distributions are combined at every step with the document posterior
(`marginalize`), which gives the training NLL and a greedy RAG-Token decoder.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask); pytorch/pytorch#103749 (conventions.md §3 item 5); §2.3.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS = 1, 0, 2
VOCAB, D_MODEL, N_DOCS = 600, 64, 2


def bpe(text):
    return [3 + (sum(ord(c) * 13 ** i for i, c in enumerate(w)) % (VOCAB - 3)) for w in text.lower().split()]


def _expand_mask(mask, dtype, tgt_len=None):
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len
    expanded = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted = 1.0 - expanded
    return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)


class BartAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.scaling = heads, (d // heads) ** -0.5
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))

    def forward(self, hidden_states, key_value_states=None, attention_mask=None):
        kv = hidden_states if key_value_states is None else key_value_states
        b, t, d = hidden_states.shape
        q = (self.q_proj(hidden_states) * self.scaling).view(b, t, self.heads, -1).transpose(1, 2)
        k = self.k_proj(kv).view(b, kv.size(1), self.heads, -1).transpose(1, 2)
        v = self.v_proj(kv).view(b, kv.size(1), self.heads, -1).transpose(1, 2)
        attn_weights = q @ k.transpose(-1, -2)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_probs = F.softmax(attn_weights, dim=-1)
        return self.out_proj((attn_probs @ v).transpose(1, 2).reshape(b, t, d))


class Layer(nn.Module):
    def __init__(self, d, heads, is_decoder):
        super().__init__()
        self.self_attn = BartAttention(d, heads)
        self.encoder_attn = BartAttention(d, heads) if is_decoder else None
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(3))
        self.fc = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, attention_mask, encoder_hidden_states=None, encoder_attention_mask=None):
        x = self.norms[0](x + self.self_attn(x, attention_mask=attention_mask))
        if self.encoder_attn is not None:
            x = self.norms[1](x + self.encoder_attn(x, encoder_hidden_states, encoder_attention_mask))
        return self.norms[2](x + self.fc(x))


class BartGenerator(nn.Module):
    def __init__(self, d=D_MODEL, heads=4, layers=2):
        super().__init__()
        self.shared = nn.Embedding(VOCAB, d, padding_idx=PAD)
        self.embed_positions = nn.Embedding(64, d)
        self.encoder = nn.ModuleList(Layer(d, heads, False) for _ in range(layers))
        self.decoder = nn.ModuleList(Layer(d, heads, True) for _ in range(layers))

    def _causal_bias(self, tgt_len, device):
        return torch.full((tgt_len, tgt_len), float("-inf"), device=device).triu()  # expect: MC503 diagonal

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        h = self.shared(input_ids) + self.embed_positions.weight[: input_ids.size(1)]
        enc_mask = _expand_mask(attention_mask, h.dtype)
        for layer in self.encoder:
            h = layer(h, enc_mask)
        t = decoder_input_ids.size(1)
        y = self.shared(decoder_input_ids) + self.embed_positions.weight[:t]
        causal = self._causal_bias(t, y.device)[None, None]
        cross = _expand_mask(attention_mask, y.dtype, tgt_len=t)
        for layer in self.decoder:
            y = layer(y, causal, h, cross)
        return y @ self.shared.weight.t()


class RagToken(nn.Module):
    def __init__(self, docs):
        super().__init__()
        self.docs = docs
        self.question_encoder = nn.EmbeddingBag(VOCAB, D_MODEL, mode="mean")
        self.ctx_encoder = nn.EmbeddingBag(VOCAB, D_MODEL, mode="mean")
        self.generator = BartGenerator()

    def retrieve(self, questions):
        q = torch.stack([self.question_encoder(torch.tensor([bpe(x)]))[0] for x in questions])
        with torch.no_grad():
            index = torch.stack([self.ctx_encoder(torch.tensor([bpe(t + " " + x)]))[0] for t, x in self.docs])
        doc_ids = (q @ index.t()).topk(N_DOCS, dim=-1).indices
        doc_scores = torch.einsum("bd,bkd->bk", q, index[doc_ids])
        return doc_ids, doc_scores

    def contextualize(self, questions, doc_ids):
        rows = [[BOS] + bpe(f"{self.docs[d][0]} / {self.docs[d][1]} // {q}")[:24] + [EOS]
                for q, ids in zip(questions, doc_ids.tolist()) for d in ids]
        width = max(len(r) for r in rows)
        input_ids = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
        return input_ids, (input_ids != PAD).long()

    def marginalize(self, seq_logits, doc_scores):
        seq_logprobs = F.log_softmax(seq_logits, dim=-1).view(doc_scores.size(0), N_DOCS, -1, VOCAB)
        doc_logprobs = torch.log_softmax(doc_scores, dim=1)
        return torch.logsumexp(seq_logprobs + doc_logprobs[:, :, None, None], dim=1)

    def forward(self, questions, decoder_input_ids):
        doc_ids, doc_scores = self.retrieve(questions)
        input_ids, attention_mask = self.contextualize(questions, doc_ids)
        dec = decoder_input_ids.repeat_interleave(N_DOCS, dim=0)
        return self.marginalize(self.generator(input_ids, attention_mask, dec), doc_scores)

    def get_nll(self, questions, target_ids):
        logprobs = self(questions, target_ids[:, :-1])
        labels = target_ids[:, 1:]
        nll = -logprobs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        return nll.masked_fill(labels == PAD, 0.0).sum(-1).mean()

    @torch.no_grad()
    def generate(self, question, max_length=6):
        out = torch.tensor([[BOS]])
        for _ in range(max_length):
            nxt = self([question], out)[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, nxt], dim=1)
            if nxt.item() == EOS:
                break
        return out[0].tolist()


if __name__ == "__main__":
    torch.manual_seed(0)
    docs = [("Aconcagua", "highest mountain in the americas in argentina"),
            ("Everest", "earth's highest mountain above sea level in the himalayas"),
            ("Danube", "second longest river in europe"),
            ("Nile", "a major north flowing river in africa")]
    model = RagToken(docs)
    questions = ["what is the highest mountain on earth", "longest river in africa"]
    targets = [[BOS] + bpe("everest") + [EOS], [BOS] + bpe("the nile") + [EOS]]
    width = max(len(t) for t in targets)
    target_ids = torch.tensor([t + [PAD] * (width - len(t)) for t in targets])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(3):
        loss = model.get_nll(questions, target_ids)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} nll {loss.item():.4f}")
    print("generated ids", model.generate(questions[0]))
