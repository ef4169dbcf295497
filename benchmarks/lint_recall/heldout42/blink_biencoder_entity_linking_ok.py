"""Zero-shot entity linking with BLINK's bi-encoder (Wu et al., 2020).

facebookresearch/BLINK's biencoder layout: mention contexts `[CLS] left [START] mention [END]
right [SEP]` and entity candidates `[CLS] title [ENT] description [SEP]`, each encoded by its own
BERT (a small one in transformers' BertModel layout, eager attention), `to_bert_input`,
`BiEncoderModule`, `BiEncoderRanker.score_candidate` with in-batch negatives, recall@1 against
the whole entity dictionary of an ambiguous synthetic knowledge base.

Source: pytorch/pytorch#103963 and huggingface/transformers#32195 (conventions.md section 3 items 6 and 25), conventions.md section 1 (HF 4-D masks row) and section 2.9
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, CLS, SEP, START, END, ENT = 0, 1, 2, 3, 4, 5


@dataclass
class BertConfig:
    vocab_size: int
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 128
    max_position_embeddings: int = 64
    type_vocab_size: int = 2
    hidden_dropout_prob: float = 0.1
    layer_norm_eps: float = 1e-12


class BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=PAD)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids):
        position_ids = torch.arange(input_ids.size(1), device=input_ids.device).unsqueeze(0)
        embeddings = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings + self.token_type_embeddings(token_type_ids)))


class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def transpose_for_scores(self, x):
        return x.view(x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask
        attention_probs = self.dropout(nn.functional.softmax(attention_scores, dim=-1))
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (-1,))


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, attention_mask):
        attn = self.attention(hidden_states, attention_mask)
        hidden_states = self.attention_norm(hidden_states + self.dropout(self.attention_output(attn)))
        inter = F.gelu(self.intermediate(hidden_states))
        return self.output_norm(hidden_states + self.dropout(self.output(inter)))


class BertModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))

    def get_extended_attention_mask(self, attention_mask, dtype):
        extended_attention_mask = attention_mask[:, None, None, :]
        return (1.0 - extended_attention_mask.to(dtype=dtype)) * torch.finfo(dtype).min

    def forward(self, input_ids, token_type_ids, attention_mask):
        hidden_states = self.embeddings(input_ids, token_type_ids)
        extended_attention_mask = self.get_extended_attention_mask(attention_mask, hidden_states.dtype)
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, extended_attention_mask)
        return hidden_states


class BertEncoder(nn.Module):
    def __init__(self, bert_model, output_dim):
        super().__init__()
        self.bert_model = bert_model
        self.additional_linear = nn.Linear(bert_model.config.hidden_size, output_dim)

    def forward(self, token_ids, segment_ids, attention_mask):
        output_bert = self.bert_model(token_ids, segment_ids, attention_mask)
        return self.additional_linear(output_bert[:, 0, :])


def to_bert_input(token_idx, null_idx):
    segment_idx = token_idx * 0
    mask = token_idx != null_idx
    token_idx = token_idx * mask.long()
    return token_idx, segment_idx, mask


class BiEncoderModule(nn.Module):
    def __init__(self, config, out_dim=64):
        super().__init__()
        self.context_encoder = BertEncoder(BertModel(config), out_dim)
        self.cand_encoder = BertEncoder(BertModel(config), out_dim)


class BiEncoderRanker(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = BiEncoderModule(config)
        self.NULL_IDX = PAD

    def encode_context(self, cands):
        return self.model.context_encoder(*to_bert_input(cands, self.NULL_IDX))

    def encode_candidate(self, cands):
        return self.model.cand_encoder(*to_bert_input(cands, self.NULL_IDX))

    def score_candidate(self, text_vecs, cand_vecs=None, cand_encs=None):
        embedding_ctxt = self.encode_context(text_vecs)
        embedding_cands = cand_encs if cand_encs is not None else self.encode_candidate(cand_vecs)
        return embedding_ctxt.mm(embedding_cands.t())

    def forward(self, context_input, cand_input):
        scores = self.score_candidate(context_input, cand_input)
        target = torch.arange(scores.size(0), device=scores.device)
        return F.cross_entropy(scores, target, reduction="mean"), scores


class SyntheticKB:
    def __init__(self, n_entities=60, n_topics=40, seed=0):
        rng = random.Random(seed)
        self.offset = ENT + 1
        self.n_surface = n_entities // 3
        self.topic0 = self.offset + self.n_surface
        self.filler0 = self.topic0 + n_topics
        self.vocab_size = self.filler0 + 30
        self.entities = [(e % self.n_surface, rng.sample(range(n_topics), 3)) for e in range(n_entities)]
        self.rng = rng

    def candidate(self, e):
        surface, topics = self.entities[e]
        return [CLS, self.offset + surface, ENT] + [self.topic0 + t for t in topics] + [SEP]

    def mention(self, e):
        surface, topics = self.entities[e]
        words = [self.topic0 + t for t in self.rng.sample(topics, 2)]
        words += [self.filler0 + self.rng.randrange(30) for _ in range(self.rng.randint(0, 8))]
        self.rng.shuffle(words)
        cut = self.rng.randint(0, len(words))
        return [CLS] + words[:cut] + [START, self.offset + surface, END] + words[cut:] + [SEP]


def pad_batch(seqs):
    out = torch.full((len(seqs), max(len(s) for s in seqs)), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s)
    return out


def main():
    torch.manual_seed(0)
    random.seed(0)
    kb = SyntheticKB()
    ranker = BiEncoderRanker(BertConfig(vocab_size=kb.vocab_size))
    optimizer = torch.optim.AdamW(ranker.parameters(), lr=1e-3)
    n_entities = len(kb.entities)
    for step in range(600):
        ranker.train()
        gold = random.sample(range(n_entities), 32)
        loss, _ = ranker(pad_batch([kb.mention(e) for e in gold]), pad_batch([kb.candidate(e) for e in gold]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 150 == 0:
            print(f"step {step} in-batch loss {loss.item():.3f}")
    ranker.eval()
    with torch.no_grad():
        cand_encs = ranker.encode_candidate(pad_batch([kb.candidate(e) for e in range(n_entities)]))
        gold = [random.randrange(n_entities) for _ in range(300)]
        scores = ranker.score_candidate(pad_batch([kb.mention(e) for e in gold]), cand_encs=cand_encs)
        print(f"recall@1 over {n_entities} entities {(scores.argmax(-1) == torch.tensor(gold)).float().mean():.3f}")
        e = gold[0]
        mention = kb.mention(e)
        alone = ranker.encode_context(pad_batch([mention]))
        padded = ranker.encode_context(pad_batch([mention, mention[:-1] + [kb.filler0] * 6 + [SEP]]))[:1]
        print(f"one mention alone vs padded: {(alone - padded).abs().max():.2e}")


if __name__ == "__main__":
    main()
